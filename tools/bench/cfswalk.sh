#!/usr/bin/env bash
# tools/bench/cfswalk.sh - cfswalk: a large CephFS tree mounted: first answer, walk, remount
# SPDX-License-Identifier: Apache-2.0
#
#   cfswalk      BENCH_CFSWALK_N (200,000; quick 20,000) empty files in
#                directories of 1,000 (tools/bench/cephfs_tree.py, through
#                libcephfs) in a CephFS of the lab cluster, mounted as
#                cephfs://FS/PATH with an empty cache: the first answer (exec
#                to `ls` of the top listed, the walk running on), the walk
#                (dir_scan_threads, default; and 1 thread), a mount again (the
#                saved walk); against ceph-fuse of the same tree: its first
#                answer (mount to `ls` of the top) and `find` over every entry
#
#   BENCH_CFSWALK_N  cfswalk: empty files in the tree (default 200000)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_CFSWALK_N:=20000}"
CW_N=${BENCH_CFSWALK_N:-200000}

# cw_walk_ms LOG: the walk's own time, from the daemon's log ("walked in N ms")
cw_walk_ms() { sed -n 's/.* walked in \([0-9]*\) ms.*/\1/p' "$1" | tail -1; }

# cw_mount OPTS: a first mount of the tree (empty cache); sets CW_FIRST (ms,
# exec to the top listed) and CW_WALK (ms, the walk alone, once it ended)
cw_mount() {
	local d=$WORK/cfswalk t0 end
	rm -rf "$d/cache"
	drop_caches
	t0=$(now_ms)
	sfs_mount "cephfs://cephfs/bwalk$$" "$d/mnt" "cache_dir=$d/cache,ceph_conf=$CEPH_CONF${1:+,$1}" || return 1
	ls "$d/mnt" >/dev/null || return 1
	CW_FIRST=$(($(now_ms) - t0))
	end=$((SECONDS + 1800))
	until grep -q "walked in" "$MOUNT_LOG"; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.1
	done
	CW_WALK=$(cw_walk_ms "$MOUNT_LOG")
	CW_FOUND=$(find "$d/mnt" | wc -l)
}

bench_cfswalk() {
	local d=$WORK/cfswalk n=$CW_N r t0 fuse_ms find_ms entries
	local first=() walk=() walk1=() again=() ffirst=() ffind=()
	hdr cfswalk "$n files in CephFS: cephfs:// first answer and walk, against ceph-fuse"
	need_rados || { skipped "$RADOS_WHY"; return; }
	[ -n "$CLUSTER_DIR" ] || { skipped "needs the benchmark's own lab cluster (an MDS is added to it)"; return; }
	"$STAGEFS" --help 2>&1 | grep -c cephfs_threads >/dev/null || { skipped "stagefs built without libcephfs"; return; }
	"$PY" -c 'import cephfs' 2>/dev/null || { skipped "no python3-cephfs to write the tree"; return; }
	mkdir -p "$d/mnt" "$d/fuse"
	"$CLUSTER_SH" fs "$CLUSTER_DIR" >>"$WORK/log/cfswalk.log" 2>&1 || { skipped "no CephFS (ceph-mds installed?)"; return; }
	log "cfswalk: writing $n files into CephFS"
	t0=$(now_ms)
	"$PY" "$BENCH_LIB_DIR/cephfs_tree.py" --conf "$CEPH_CONF" "/bwalk$$" --files "$n" --empty --jobs 4 \
		>>"$WORK/log/cfswalk.log" 2>&1 || { skipped "could not write the tree: $(tail -1 "$WORK/log/cfswalk.log")"; return; }
	log "cfswalk: written in $(($(now_ms) - t0)) ms"
	entries=$(("$n" + 1 + ("$n" - "$n" / 10 + 999) / 1000 + 1))	# files, the root, the dNNNN, wide
	row "" "first answer" "walk" "again" "walk, 1 thread"
	for r in $(seq "$ROUNDS"); do
		cw_mount "" || { skipped "the first mount failed (see $MOUNT_LOG)"; return; }
		[ "$CW_FOUND" -eq "$entries" ] || { sfs_umount "$d/mnt"; failed "the mount lists $CW_FOUND entries, not $entries"; return; }
		first+=("$CW_FIRST") walk+=("$CW_WALK")
		sfs_umount "$d/mnt"
		drop_caches
		t0=$(now_ms)
		sfs_mount "cephfs://cephfs/bwalk$$" "$d/mnt" "cache_dir=$d/cache,ceph_conf=$CEPH_CONF" || { skipped "the second mount failed"; return; }
		ls "$d/mnt" >/dev/null
		again+=("$(($(now_ms) - t0))")
		grep -q "index reused" "$MOUNT_LOG" || { sfs_umount "$d/mnt"; failed "the second mount walked again"; return; }
		sfs_umount "$d/mnt"
		cw_mount "dir_scan_threads=1" || { skipped "the one-thread mount failed"; return; }
		walk1+=("$CW_WALK")
		sfs_umount "$d/mnt"
		# ceph-fuse: mount to the top listed; then every entry
		drop_caches
		t0=$(now_ms)
		"$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$d/fuse" >>"$WORK/log/cfswalk.log" 2>&1 || { skipped "ceph-fuse mount failed"; return; }
		ls "$d/fuse/bwalk$$" >/dev/null
		fuse_ms=$(($(now_ms) - t0))
		t0=$(now_ms)
		find "$d/fuse/bwalk$$" >/dev/null
		find_ms=$(($(now_ms) - t0))
		"$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$d/fuse" >>"$WORK/log/cfswalk.log" 2>&1
		ffirst+=("$fuse_ms") ffind+=("$find_ms")
		row "round $r" "${first[-1]} ms" "${walk[-1]} ms" "${again[-1]} ms" "${walk1[-1]} ms"
		row "  ceph-fuse" "${fuse_ms} ms" "find ${find_ms} ms" "" ""
	done
	# the tree stays: empty files take no room in the pool (removing 200,000
	# names one by one takes minutes), and the cluster is the run's own
	local f w w1 a ff fd
	f=$(median "${first[@]}") w=$(median "${walk[@]}") w1=$(median "${walk1[@]}")
	a=$(median "${again[@]}") ff=$(median "${ffirst[@]}") fd=$(median "${ffind[@]}")
	result "first answer, cephfs:// ($n files), s (target < 1 s)" "$f ms" "1000 ms" "$(ratio "$f" 1000)" "<1"
	result "first answer, cephfs:// vs ceph-fuse mount + ls" "$f ms" "$ff ms" "$(ratio "$f" "$ff")" ""
	result "walk, entries/s, vs find through ceph-fuse" \
		"$(fps "$(awk -v e="$entries" -v m="$w" 'BEGIN { print e * 1000 / m }')")" \
		"$(fps "$(awk -v e="$entries" -v m="$fd" 'BEGIN { print e * 1000 / m }')")" "$(ratio "$fd" "$w")" ""
	result "walk, default threads vs 1 thread (speedup)" "$w ms" "$w1 ms" "$(ratio "$w1" "$w")" ""
	result "mount again (saved walk) to the top listed" "$a ms" "1000 ms" "$(ratio "$a" 1000)" "<1"
}
