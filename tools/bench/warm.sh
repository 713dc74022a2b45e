#!/usr/bin/env bash
# tools/bench/warm.sh - warm: one big file, sequential
# SPDX-License-Identifier: Apache-2.0
#
#   warm         2 GiB file, sequential, warm stagefs cache: mount / cache file read directly
#
#   BENCH_BIG_MB     warm: size of the big file (default 2048)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_BIG_MB:=256}"
BIG_MB=${BENCH_BIG_MB:-2048}

WARM_READY=
warm_prepare() {
	[ -n "$WARM_READY" ] && return 0
	local d=$WORK/warm
	mkdir -p "$d/src"
	log "warm: writing a $BIG_MB MiB file"
	gen_big "$d/src/big" "$BIG_MB" || return 1
	echo "$d/mnt/big" >"$d/mnt.list"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache$(fill_opts)" || return 1
	log "warm: filling the cache"
	if ! rb bytes_per_s seq "$d/mnt/big" >/dev/null ||
		! cache_paths "$d/cache" "$d/mnt.list" "$d/cache.list" 2>"$WORK/log/rb.err"; then
		sfs_umount "$d/mnt"
		return 1
	fi
	WARM_CACHEFILE=$(cat "$d/cache.list")
	sfs_umount "$d/mnt"
	WARM_READY=1
}

# measure_warm OPTS: rounds of (cache file direct, mount); sets W_DIRECT,
# W_FUSE (median bytes/s) and W_RATIO (median of the per-round ratios)
measure_warm() {
	local d=$WORK/warm r a b rs=() as=() bs=()
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache${1:+,$1}" || { echo "mount failed" >"$WORK/log/rb.err"; return 1; }
	# the first read after start verifies the chunks: not timed
	rb bytes_per_s seq "$d/mnt/big" >/dev/null || { sfs_umount "$d/mnt"; return 1; }
	for r in $(seq "$ROUNDS"); do
		drop_caches
		a=$(rb bytes_per_s seq "$WARM_CACHEFILE") || { sfs_umount "$d/mnt"; return 1; }
		drop_caches
		b=$(rb bytes_per_s seq "$d/mnt/big") || { sfs_umount "$d/mnt"; return 1; }
		row "round $r${1:+ ($1)}" "$(mbs "$a")" "$(mbs "$b")" "$(ratio "$b" "$a")"
		as+=("$a") bs+=("$b") rs+=("$(ratio "$b" "$a")")
	done
	sfs_umount "$d/mnt"
	W_DIRECT=$(median "${as[@]}") W_FUSE=$(median "${bs[@]}") W_RATIO=$(median "${rs[@]}")
}

bench_warm() {
	hdr warm "$BIG_MB MiB file, sequential, warm stagefs cache, page cache dropped"
	warm_prepare || { failed "preparing: $(rb_why)"; return; }
	row "" "cache file" "mount" "ratio"
	measure_warm "" || { failed "$(rb_why)"; return; }
	row "median of $ROUNDS" "$(mbs "$W_DIRECT")" "$(mbs "$W_FUSE")" "$W_RATIO"
	result "warm: ${BIG_MB}M sequential" "$(mbs "$W_FUSE")" "$(mbs "$W_DIRECT")" "$W_RATIO" ">=0.9"
}
