#!/usr/bin/env bash
# tools/bench/index.sh - index: start-up with many cached chunks
# SPDX-License-Identifier: Apache-2.0
#
#   index        daemon start-up with 1,000,000 cached chunks (cache_load_ms, wall)
#
#   BENCH_INDEX_CHUNKS  index: chunks wanted (default 1000000)
#   BENCH_INDEX_CHUNK_KB  index: chunk size in KiB (default 4: 1M chunks = 4 GiB;
#                    64 with a stagefs whose chunk_size minimum is 64K)
#   BENCH_INDEX_MAX_GB  index: most GiB of disk the index fill may write
#                    (default 8, and at most 40% of the free space); with
#                    fewer chunks than wanted the 1M figure is extrapolated
#   BENCH_INDEX_READERS  index: readers filling the cache (default 4)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_INDEX_CHUNKS:=50000}"
IDX_CHUNKS=${BENCH_INDEX_CHUNKS:-1000000}
IDX_MAX_GB=${BENCH_INDEX_MAX_GB:-8}
IDX_CHUNK_KB=${BENCH_INDEX_CHUNK_KB:-4}
IDX_READERS=${BENCH_INDEX_READERS:-4}

# chunk_accepted BYTES: does this stagefs take chunk_size=BYTES?  (It fails
# later, on the missing mount point, unless the value itself is refused.)
chunk_accepted() {
	local out
	out=$("$STAGEFS" -f -o "chunk_size=$1,cache_dir=$WORK/nonexistent" dir:///nonexistent \
		"$WORK/nonexistent-mnt" 2>&1)
	case $out in *chunk_size*) return 1 ;; esac
	return 0
}

bench_index() {
	local d=$WORK/index cs=$((IDX_CHUNK_KB * 1024)) want=$IDX_CHUNKS n maxb free files fsz i r t0 loaded lms=() wms=() lm wm est
	if ! chunk_accepted "$cs"; then
		printf '  note: this stagefs refuses chunk_size=%s KiB; using 64 KiB\n' "$IDX_CHUNK_KB"
		cs=65536
	fi
	hdr index "daemon start-up with $IDX_CHUNKS cached chunks ($((cs >> 10)) KiB chunks, dir://)"
	free=$(df -B1 --output=avail "$WORK" | tail -1)
	maxb=$(awk -v g="$IDX_MAX_GB" -v f="$free" 'BEGIN { m = g * 1073741824; if (f * 0.4 < m) m = f * 0.4; printf "%.0f", m }')
	n=$want
	[ $((n * cs)) -le "$maxb" ] || n=$((maxb / cs))
	[ "$n" -ge 1000 ] || { skipped "not enough free disk for a useful index"; return; }
	# source: sparse files (zeros read fast), at least one per filling reader
	mkdir -p "$d/src"
	fsz=$(((n * cs / IDX_READERS + cs - 1) / cs * cs))
	[ "$fsz" -le $((1 << 30)) ] || fsz=$((1 << 30))
	files=$(((n * cs + fsz - 1) / fsz))
	for i in $(seq "$files"); do
		truncate -s $((i < files ? fsz : n * cs - (files - 1) * fsz)) "$d/src/f$i"
	done
	log "index: filling $n chunks ($((n * cs >> 20)) MiB in $files files) through the mount, $IDX_READERS readers"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache,chunk_size=$cs,cache_sync=no" ||
		{ skipped "mount failed"; return; }
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	t0=$(now_ms)
	rb bytes_per_s files -t "$IDX_READERS" -s 0 "$d/mnt.list" >/dev/null || { failed "filling the cache: $(rb_why)"; sfs_umount "$d/mnt"; return; }
	loaded=$(stat_get "$d/mnt" cache_chunks)
	log "index: $loaded chunks cached in $(($(now_ms) - t0)) ms"
	sfs_umount "$d/mnt"
	row "" "cache_load_ms" "ready (ms)" "chunks"
	for r in $(seq "$ROUNDS"); do
		drop_caches
		sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache,chunk_size=$cs" || { skipped "remount failed"; return; }
		lm=$(stat_get "$d/mnt" cache_load_ms) wm=$MOUNT_MS
		loaded=$(stat_get "$d/mnt" cache_loaded_chunks)
		sfs_umount "$d/mnt"
		row "round $r" "$lm" "$wm" "$loaded"
		lms+=("$lm") wms+=("$wm")
	done
	rm -rf "$d"
	lm=$(median "${lms[@]}") wm=$(median "${wms[@]}")
	row "median of $ROUNDS" "$lm" "$wm" "$loaded"
	if [ "$loaded" -lt 1000000 ]; then
		# the fixed part (exec, FUSE mount) stays; the index load scales
		est=$(awk -v w="$wm" -v l="$lm" -v n="$loaded" 'BEGIN { printf "%.0f", w + l * (1000000 / n - 1) }')
		row "linear estimate for 1,000,000" "$(awk -v l="$lm" -v n="$loaded" 'BEGIN { printf "%.0f", l * 1000000 / n }')" "$est" "1000000"
		result "index: ready, $loaded chunks" "${wm} ms" "" "$(awk -v w="$wm" 'BEGIN { printf "%.2f", w / 1000 }')" ""
		result "index: ready, 1M chunks (est.)" "${est} ms" "" "$(awk -v w="$est" 'BEGIN { printf "%.2f", w / 1000 }')" "<2"
	else
		result "index: ready, $loaded chunks" "${wm} ms (load ${lm})" "" "$(awk -v w="$wm" 'BEGIN { printf "%.2f", w / 1000 }')" "<2"
	fi
}
