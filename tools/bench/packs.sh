#!/usr/bin/env bash
# tools/bench/packs.sh - packs: a dataset of small images (20-38 KB), packed and not
# SPDX-License-Identifier: Apache-2.0
#
#   packs        BENCH_PACK_N (30,000; quick 3,000) files of BENCH_PACK_KB (20-38) KB in 100
#                directories, published twice: packed (the default) and one
#                object a file (--pack-max 0); publish / rados bench write 4M;
#                stagefs warmup / rados bench seq 4M; a cold shuffled epoch of
#                BENCH_EPOCH_WORKERS readers (tools/bench/epoch_reader.py),
#                in files/s / the warm epoch after it / the local disk, and
#                the same cold epoch through ceph-fuse over a CephFS holding
#                the same files (where the lab cluster can add an MDS); a
#                CPU-bound PyTorch DataLoader epoch (tools/bench/loader_epoch.py,
#                BENCH_LOADER_WORKERS workers; needs Debian's python3-torch)
#                of the warm mount / of the local disk; the
#                cache is a fresh ext4 (mkfs defaults, loop device) each time:
#                this VM's root ext4 has no journal, and ext4 without one
#                scans recently freed inodes at every create (50-60 % of the
#                daemon's CPU on a cold epoch of 30,000 files in a cache
#                directory made anew; docs/benchmarks.md)
#
#   BENCH_PACK_N     packs: number of files (default 30000)
#   BENCH_PACK_KB    packs: their sizes, MIN-MAX KB (default 20-38; ImageNet-like: 60-220)
#   BENCH_LOADER_WORKERS  packs: the DataLoader's workers (default 8)
#   BENCH_CACHE_DIO  packs: 1 puts the cache's loop device on direct I/O (its
#                    writes then share this VM's one disk with the OSD)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_PACK_N:=3000}"
PACK_N=${BENCH_PACK_N:-30000}
PACK_KB=${BENCH_PACK_KB:-20-38}

bench_packs() {
	local d=$WORK/packs r n=$PACK_N bytes t0 ms w4 s4 pu pp fps x src
	local wus=() wps=() s4s=() cps=() cus=() wms=() ls=() cfs=() lws=() lls=() fs= lwhy=
	hdr packs "$n files of $PACK_KB KB, packed and not, against 4 MiB objects (rados bench)"
	need_rados || { skipped "$RADOS_WHY"; return; }
	mkdir -p "$d"
	image_tree "$d/src" "$n" "${PACK_KB%-*}" "${PACK_KB#*-}" 29 || { skipped "could not write the files"; return; }
	bytes=$(du -sb --apparent-size "$d/src" | cut -f1)
	log "packs: $n files, $bytes bytes"
	# the files' writeback done first: rados bench write, next, shares the disk
	sync

	# the baseline: the same bytes as 4 MiB objects
	w4=$(rados_bench_bw 600 write -b 4M -t "$T" --max-objects $(((bytes >> 22) + 1)) --no-cleanup --run-name pk) ||
		{ skipped "rados bench write failed"; return; }
	# packed first, right after the baseline: the 30,000 objects of the
	# unpacked publish leave the OSD compacting for a while after it
	t0=$(now_ms)
	"$STAGEFS" publish -q -j "$T" "$d/src" "rados://$POOL/pk-p" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
	ms=$(($(now_ms) - t0)) pp=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
	t0=$(now_ms)
	"$STAGEFS" publish -q -j "$T" --pack-max 0 "$d/src" "rados://$POOL/pk-u" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "publish --pack-max 0 failed: $(tail -1 "$WORK/log/publish.log")"; return; }
	ms=$(($(now_ms) - t0)) pu=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
	# ceph-fuse's baseline: the same files in CephFS
	if [ -n "$CLUSTER_DIR" ] && "$CLUSTER_SH" fs "$CLUSTER_DIR" >>"$WORK/log/packs.log" 2>&1 &&
		"$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$d/cephfs" >>"$WORK/log/packs.log" 2>&1; then
		log "packs: copying the files into CephFS"
		rm -rf "$d/cephfs/pk"
		if cp -r "$d/src" "$d/cephfs/pk" && sync; then
			fs=1
		else
			printf '  note: copying into CephFS failed: no ceph-fuse figure\n'
		fi
		"$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$d/cephfs" >>"$WORK/log/packs.log" 2>&1
	else
		printf '  note: no CephFS (ceph-mds, ceph-fuse installed?): no ceph-fuse figure\n'
	fi
	fuse_epoch() {	# fuse_epoch SEED: a cold shuffled epoch through ceph-fuse, in files/s
		[ -z "$CLUSTER_DIR" ] || timeout 30 ceph tell osd.0 cache drop >/dev/null 2>&1 || osd_restart
		drop_caches
		fuse_epoch_fps "$d/cephfs" pk "$1" "$n" "$WORK/log/packs.log"
	}
	row "publish" "packed" "a file an object" "4M objects"
	row "" "$(mbs "$pp")" "$(mbs "$pu")" "$(mbs "$w4")"

	cold() {	# an empty cache on a new filesystem, a cold OSD, no page cache
		cachefs_new "$d/cache" $(((2 * bytes >> 20) + 1024)) || return 1
		[ -z "$CLUSTER_DIR" ] || timeout 30 ceph tell osd.0 cache drop >/dev/null 2>&1 || osd_restart
		drop_caches
	}
	warmup() {	# warmup SRC: prints bytes/s
		sfs_mount "$1" "$d/mnt" "cache_dir=$d/cache,ceph_conf=$CEPH_CONF" || return 1
		t0=$(now_ms)
		"$STAGEFS" warmup -q -t "$T" "$d/mnt" >"$WORK/log/warmup.log" 2>&1 || { sfs_umount "$d/mnt"; return 1; }
		ms=$(($(now_ms) - t0))
		sfs_umount "$d/mnt"
		awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f\n", b * 1000 / (ms ? ms : 1) }'
	}
	row "" "warmup packed" "a file an object" "rados seq 4M"
	row "" "cold epoch packed" "cold, a file an object" "warm epoch / local disk"
	for r in $(seq "$ROUNDS"); do
		cold || { skipped "no cache filesystem"; return; }
		s4=$(rados_bench_bw 600 seq -t "$T" --run-name pk) || { cachefs_gone "$d/cache"; skipped "rados bench seq failed"; return; }
		cold
		x=$(warmup "rados://$POOL/pk-p") || { cachefs_gone "$d/cache"; skipped "warmup failed: $(tail -1 "$WORK/log/warmup.log")"; return; }
		wps+=("$x")
		cold
		x=$(warmup "rados://$POOL/pk-u") || { cachefs_gone "$d/cache"; skipped "warmup failed: $(tail -1 "$WORK/log/warmup.log")"; return; }
		wus+=("$x")
		s4s+=("$s4")
		for src in pk-p pk-u; do
			cold
			sfs_mount "rados://$POOL/$src" "$d/mnt" "cache_dir=$d/cache,ceph_conf=$CEPH_CONF" ||
				{ cachefs_gone "$d/cache"; skipped "mount failed"; return; }
			ls -R "$d/mnt" >/dev/null	# the listing, not timed: the readers list too
			drop_caches
			fps=$(epoch_fps "$d/mnt" "$r" "$n") || { sfs_umount "$d/mnt"; cachefs_gone "$d/cache"; skipped "the epoch failed: $(tail -1 "$WORK/log/epoch.err")"; return; }
			if [ "$src" = pk-p ]; then
				cps+=("$fps")
				drop_caches
				x=$(epoch_fps "$d/mnt" $((r + 100)) "$n") || { sfs_umount "$d/mnt"; cachefs_gone "$d/cache"; skipped "the warm epoch failed"; return; }
				wms+=("$x")
				if [ -z "$lwhy" ]; then
					drop_caches
					x=$(loader_fps "$d/mnt" $((r + 400)) "$n") && lws+=("$x") || lwhy=$x
				fi
			else
				cus+=("$fps")
			fi
			sfs_umount "$d/mnt"
		done
		drop_caches
		x=$(epoch_fps "$d/src" $((r + 200)) "$n") || { cachefs_gone "$d/cache"; skipped "the local epoch failed"; return; }
		ls+=("$x")
		if [ -z "$lwhy" ]; then
			drop_caches
			x=$(loader_fps "$d/src" $((r + 400)) "$n") && lls+=("$x") || lwhy=$x
		fi
		if [ -n "$fs" ]; then
			x=$(fuse_epoch $((r + 300))) && cfs+=("$x") || printf '  note: the ceph-fuse epoch failed (log/epoch.err)\n'
		fi
		row "round $r" "$(mbs "${wps[-1]}")" "$(mbs "${wus[-1]}")" "$(mbs "$s4")"
		row "" "$(fps "${cps[-1]}")" "$(fps "${cus[-1]}")" "$(fps "${wms[-1]}") / $(fps "${ls[-1]}")"
		[ ${#cfs[@]} = 0 ] || row "" "ceph-fuse cold: $(fps "${cfs[-1]}")" "" ""
		[ -n "$lwhy" ] || row "" "DataLoader warm: $(fps "${lws[-1]}")" "" "local disk: $(fps "${lls[-1]}")"
	done
	[ -z "$lwhy" ] || printf '  note: no DataLoader epoch: %s\n' "$lwhy"
	rados -p "$POOL" cleanup --run-name pk >/dev/null 2>&1
	if [ -n "$fs" ] && "$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$d/cephfs" >>"$WORK/log/packs.log" 2>&1; then
		rm -rf "$d/cephfs/pk"	# room for the benchmarks after this one
		"$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$d/cephfs" >>"$WORK/log/packs.log" 2>&1
	fi
	cachefs_gone "$d/cache"
	s4=$(median "${s4s[@]}")
	result "publish, packed, vs rados bench write 4M" "$(mbs "$pp")" "$(mbs "$w4")" "$(ratio "$pp" "$w4")" ">=0.8"
	result "publish, a file an object, vs the same" "$(mbs "$pu")" "$(mbs "$w4")" "$(ratio "$pu" "$w4")" ""
	result "warmup, packed, vs rados bench seq 4M" "$(mbs "$(median "${wps[@]}")")" "$(mbs "$s4")" \
		"$(ratio "$(median "${wps[@]}")" "$s4")" ">=0.8"
	result "warmup, a file an object, vs the same" "$(mbs "$(median "${wus[@]}")")" "$(mbs "$s4")" \
		"$(ratio "$(median "${wus[@]}")" "$s4")" ""
	result "cold epoch, packed, vs the warm epoch" "$(fps "$(median "${cps[@]}")")" "$(fps "$(median "${wms[@]}")")" \
		"$(ratio "$(median "${cps[@]}")" "$(median "${wms[@]}")")" ">=0.6"
	result "cold epoch, packed, vs a file an object" "$(fps "$(median "${cps[@]}")")" "$(fps "$(median "${cus[@]}")")" \
		"$(ratio "$(median "${cps[@]}")" "$(median "${cus[@]}")")" ""
	[ ${#cfs[@]} = 0 ] ||
		result "cold epoch, packed, vs ceph-fuse (cold)" "$(fps "$(median "${cps[@]}")")" "$(fps "$(median "${cfs[@]}")")" \
			"$(ratio "$(median "${cps[@]}")" "$(median "${cfs[@]}")")" ">=4"
	result "warm epoch vs the local disk" "$(fps "$(median "${wms[@]}")")" "$(fps "$(median "${ls[@]}")")" \
		"$(ratio "$(median "${wms[@]}")" "$(median "${ls[@]}")")" ">=0.9"
	[ -n "$lwhy" ] ||
		result "DataLoader (CPU-bound) warm vs the disk" "$(fps "$(median "${lws[@]}")")" \
			"$(fps "$(median "${lls[@]}")")" "$(ratio "$(median "${lws[@]}")" "$(median "${lls[@]}")")" ">=0.9"
}
