#!/usr/bin/env bash
# tools/bench/cephfs.sh - cephfs: a dataset read where it lives in CephFS
# SPDX-License-Identifier: Apache-2.0
#
#   cephfs       BENCH_CEPHFS_N (8,000; quick 1,000) ImageNet-like files of
#                BENCH_CEPHFS_KB (60-220) KB in 100 directories, copied into a
#                CephFS of the lab cluster (ceph-fuse) and published to
#                rados:// as well: one cold shuffled epoch
#                (tools/bench/epoch_reader.py, BENCH_EPOCH_WORKERS (8) readers;
#                OSD cache dropped, page cache dropped, the listing not timed)
#                through stagefs cephfs://FS/PATH (empty cache on a fresh ext4,
#                as in packs), against
#                ceph-fuse of the same tree and stagefs over the published
#                copy (rados://, empty cache), and the same through a mount
#                of a CephFS snapshot of the tree (cephfs://FS/PATH@SNAP);
#                cephfs:// reads the data pool's objects directly, and the
#                same mount with cephfs_direct_reads=no (every read through
#                libcephfs) is timed beside it, and so is rados:// published
#                with --pack-max 0 (one object a file, as CephFS stores them)
#
#   BENCH_CEPHFS_N   cephfs: number of files (default 8000)
#   BENCH_CEPHFS_KB  cephfs: their sizes, MIN-MAX KB (default 60-220)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_CEPHFS_N:=1000}"
CFS_N=${BENCH_CEPHFS_N:-8000}
CFS_KB=${BENCH_CEPHFS_KB:-60-220}

bench_cephfs() {
	local d=$WORK/cephfs n=$CFS_N r x
	local cs=() fs=() rs=() ss=() ls=() us=()
	hdr cephfs "$n files of $CFS_KB KB in CephFS: cephfs:// against ceph-fuse and rados://"
	need_rados || { skipped "$RADOS_WHY"; return; }
	[ -n "$CLUSTER_DIR" ] || { skipped "needs the benchmark's own lab cluster (an MDS is added to it)"; return; }
	"$STAGEFS" --help 2>&1 | grep -c cephfs_threads >/dev/null || { skipped "stagefs built without libcephfs"; return; }
	mkdir -p "$d/mnt" "$d/fuse"
	image_tree "$d/src" "$n" "${CFS_KB%-*}" "${CFS_KB#*-}" 31 || { skipped "could not write the files"; return; }
	"$CLUSTER_SH" fs "$CLUSTER_DIR" >>"$WORK/log/cephfs.log" 2>&1 &&
		"$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$d/fuse" >>"$WORK/log/cephfs.log" 2>&1 ||
		{ skipped "no CephFS (ceph-mds, ceph-fuse installed?)"; return; }
	log "cephfs: copying the files into CephFS"
	rm -rf "$d/fuse/bcfs"
	cp -r "$d/src" "$d/fuse/bcfs" && sync && mkdir "$d/fuse/bcfs/.snap/s1" ||
		{ "$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$d/fuse" >/dev/null 2>&1; skipped "could not copy into CephFS"; return; }
	"$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$d/fuse" >>"$WORK/log/cephfs.log" 2>&1
	"$STAGEFS" publish -q -j "$T" "$d/src" "rados://$POOL/bcfs" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
	"$STAGEFS" publish -q -j "$T" --pack-max 0 "$d/src" "rados://$POOL/bcfsnp" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "publish --pack-max 0 failed: $(tail -1 "$WORK/log/publish.log")"; return; }

	local mb=$(((n * 280 >> 10) + 1024))
	sfs_epoch() {	# sfs_epoch SRC SEED [OPTS]: a cold epoch through a fresh stagefs mount
		sfs_cold_epoch "$1" "$d/mnt" "$d/cache" "$mb" "$2" "$n" "${3:-}"
	}
	fuse_epoch() {	# fuse_epoch SEED: the same through ceph-fuse
		cold_start "$d/cache" "$mb"
		fuse_epoch_fps "$d/fuse" bcfs "$1" "$n" "$WORK/log/cephfs.log"
	}
	printf '  %-10s %10s %10s %10s %10s %10s %10s\n' "" "cephfs://" "ceph-fuse" "rados://" "@snap" "libcephfs" "unpacked"
	for r in $(seq "$ROUNDS"); do
		x=$(sfs_epoch "cephfs://cephfs/bcfs" "$r") || { cachefs_gone "$d/cache"; skipped "the cephfs:// epoch failed: $(tail -1 "$WORK/log/epoch.err")"; return; }
		cs+=("$x")
		x=$(fuse_epoch "$r") || { cachefs_gone "$d/cache"; skipped "the ceph-fuse epoch failed"; return; }
		fs+=("$x")
		x=$(sfs_epoch "rados://$POOL/bcfs" "$r") || { cachefs_gone "$d/cache"; skipped "the rados:// epoch failed"; return; }
		rs+=("$x")
		x=$(sfs_epoch "cephfs://cephfs/bcfs@s1" "$r") || { cachefs_gone "$d/cache"; skipped "the snapshot epoch failed"; return; }
		ss+=("$x")
		x=$(sfs_epoch "cephfs://cephfs/bcfs" "$r" cephfs_direct_reads=no) || { cachefs_gone "$d/cache"; skipped "the libcephfs epoch failed"; return; }
		ls+=("$x")
		x=$(sfs_epoch "rados://$POOL/bcfsnp" "$r") || { cachefs_gone "$d/cache"; skipped "the unpacked rados:// epoch failed"; return; }
		us+=("$x")
		printf '  %-10s %10s %10s %10s %10s %10s %10s\n' "round $r" "$(fps "${cs[-1]}")" "$(fps "${fs[-1]}")" \
			"$(fps "${rs[-1]}")" "$(fps "${ss[-1]}")" "$(fps "${ls[-1]}")" "$(fps "${us[-1]}")"
	done
	if "$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$d/fuse" >>"$WORK/log/cephfs.log" 2>&1; then
		rmdir "$d/fuse/bcfs/.snap/s1" 2>/dev/null
		rm -rf "$d/fuse/bcfs"	# room for the benchmarks after this one
		"$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$d/fuse" >>"$WORK/log/cephfs.log" 2>&1
	fi
	cachefs_gone "$d/cache"
	result "cold epoch, cephfs://, vs ceph-fuse" "$(fps "$(median "${cs[@]}")")" "$(fps "$(median "${fs[@]}")")" \
		"$(ratio "$(median "${cs[@]}")" "$(median "${fs[@]}")")" ">=2"
	result "cold epoch, cephfs://, vs rados:// (published)" "$(fps "$(median "${cs[@]}")")" "$(fps "$(median "${rs[@]}")")" \
		"$(ratio "$(median "${cs[@]}")" "$(median "${rs[@]}")")" ">=0.9"
	result "cold epoch, cephfs://...@snapshot, vs ceph-fuse" "$(fps "$(median "${ss[@]}")")" "$(fps "$(median "${fs[@]}")")" \
		"$(ratio "$(median "${ss[@]}")" "$(median "${fs[@]}")")" ""
	result "cold epoch, cephfs:// direct, vs through libcephfs" "$(fps "$(median "${cs[@]}")")" "$(fps "$(median "${ls[@]}")")" \
		"$(ratio "$(median "${cs[@]}")" "$(median "${ls[@]}")")" ""
	result "cold epoch, cephfs://, vs rados:// unpacked" "$(fps "$(median "${cs[@]}")")" "$(fps "$(median "${us[@]}")")" \
		"$(ratio "$(median "${cs[@]}")" "$(median "${us[@]}")")" ""
}
