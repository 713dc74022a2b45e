#!/usr/bin/env bash
# tools/bench/smallfiles.sh - smallfiles: many small files, shuffled, 1 and N readers
# SPDX-License-Identifier: Apache-2.0
#
#   smallfiles   20,000 x 110 KiB files, shuffled, 1 and 4 readers, warm:
#                mount / the cache files read directly (files/s)
#
#   BENCH_SMALL_N    smallfiles: number of files (default 20000)
#   BENCH_SMALL_KB   smallfiles: file size (default 110)
#   BENCH_READERS    smallfiles: reader counts (default "1 4")
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_SMALL_N:=2000}"
SMALL_N=${BENCH_SMALL_N:-20000}
SMALL_KB=${BENCH_SMALL_KB:-110}
READERS=${BENCH_READERS:-1 4}

SMALL_READY=
small_prepare() {
	[ -n "$SMALL_READY" ] && return 0
	local d=$WORK/small
	mkdir -p "$d/src"
	log "smallfiles: writing $SMALL_N files of $SMALL_KB KiB"
	gen_files "$d/src" "$SMALL_N" $((SMALL_KB * 1024)) || return 1
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache$(fill_opts)" || return 1
	log "smallfiles: filling the cache"
	if ! rb files_per_s files -t 4 "$d/mnt.list" >/dev/null ||
		! cache_paths "$d/cache" "$d/mnt.list" "$d/cache.list" 2>"$WORK/log/rb.err"; then
		sfs_umount "$d/mnt"
		return 1
	fi
	sfs_umount "$d/mnt"
	SMALL_READY=1
}

# measure_small OPTS READERS [hot]: sets S_DIRECT, S_FUSE (median files/s),
# S_RATIO.  With "hot" the page cache is not dropped: both sides are read
# once first and stay in memory.
measure_small() {
	local d=$WORK/small r a b q l rs=() as=() bs=() hot=${3:-}
	drop_caches
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache${1:+,$1}" || { echo "mount failed" >"$WORK/log/rb.err"; return 1; }
	# the first read after start verifies the chunks: not timed
	rb files_per_s files -t 4 "$d/mnt.list" >/dev/null || { sfs_umount "$d/mnt"; return 1; }
	if [ -n "$hot" ]; then
		rb files_per_s files -t 4 "$d/cache.list" >/dev/null || { sfs_umount "$d/mnt"; return 1; }
		rb files_per_s files -t 4 "$d/mnt.list" >/dev/null || { sfs_umount "$d/mnt"; return 1; }
	fi
	for r in $(seq "$ROUNDS"); do
		[ -n "$hot" ] || drop_caches
		a=$(rb files_per_s files -t "$2" -s "$r" "$d/cache.list") || { sfs_umount "$d/mnt"; return 1; }
		[ -n "$hot" ] || drop_caches
		q=$(stat_get "$d/mnt" read_requests) l=$(stat_get "$d/mnt" lookup_readaheads)
		b=$(rb files_per_s files -t "$2" -s "$r" "$d/mnt.list") || { sfs_umount "$d/mnt"; return 1; }
		# what reached the daemon, per file: READs and LOOKUP readaheads
		q=$(awk -v a="$q" -v b="$(stat_get "$d/mnt" read_requests)" -v n="$SMALL_N" 'BEGIN { printf "%.2f", (b - a) / n }')
		l=$(awk -v a="$l" -v b="$(stat_get "$d/mnt" lookup_readaheads)" -v n="$SMALL_N" 'BEGIN { printf "%.2f", (b - a) / n }')
		row "round $r, $2 readers${1:+ ($1)}${hot:+, hot}" "$(fps "$a")" "$(fps "$b")" "$(ratio "$b" "$a")" "READ/f $q, LOOKUP-ra/f $l"
		as+=("$a") bs+=("$b") rs+=("$(ratio "$b" "$a")")
	done
	sfs_umount "$d/mnt"
	S_DIRECT=$(median "${as[@]}") S_FUSE=$(median "${bs[@]}") S_RATIO=$(median "${rs[@]}")
}

bench_smallfiles() {
	local n target=">=0.75"
	hdr smallfiles "$SMALL_N files of $SMALL_KB KiB, shuffled, warm stagefs cache, page cache dropped"
	small_prepare || { failed "preparing: $(rb_why)"; return; }
	has_option passthrough && target=">=0.9"
	row "" "cache files" "mount" "ratio"
	for n in $READERS; do
		measure_small "" "$n" || { failed "$n readers: $(rb_why)"; continue; }
		row "median of $ROUNDS, $n readers" "$(fps "$S_DIRECT")" "$(fps "$S_FUSE")" "$S_RATIO"
		result "smallfiles: $n readers" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" "$target"
	done
}
