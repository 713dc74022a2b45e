#!/usr/bin/env bash
# tools/bench/coldsmall.sh - coldsmall: many tiny files read once, cold, through dir:// / directly
# SPDX-License-Identifier: Apache-2.0
#
#   coldsmall    BENCH_COLD_N (200,000) tiny files (tools/bench/genscale.py) read
#                once, cold (empty cache, page cache dropped), shuffled, by
#                BENCH_EPOCH_WORKERS readers (tools/bench/epoch_reader.py) through
#                dir:// with epoch_staging=on and =off / the same files read
#                directly from the source (ext4 here), in files/s; the
#                mount's first scan and the readers' listing are not timed
#
#   BENCH_COLD_N     coldsmall: tiny files (default 200000)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

# cold_run WHERE ROUND: one cold shuffled read of $WORK/cold/src, directly
# (WHERE=direct) or through a fresh dir:// mount (WHERE=on|off: epoch_staging).
# Sets CR_FPS and CR_NOTE; returns 1 with CR_WHY on a failure.
cold_run() {
	local where=$1 r=$2 d=$WORK/cold root out secs
	root=$d/src
	if [ "$where" != direct ]; then
		retire "$d/cache"
		drop_caches
		sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache,epoch_staging=$where" ||
			{ CR_WHY="mount failed"; return 1; }
		root=$d/mnt
		# the first scan, not timed: the listing below waits for it
	fi
	drop_caches
	out=$("$PY" "$REPO/tools/bench/epoch_reader.py" "$root" --workers "$EPOCH_WORKERS" --seed "$r" 2>"$WORK/log/cold.err") ||
		{ CR_WHY="the reader failed: $(tail -1 "$WORK/log/cold.err")"; [ "$where" = direct ] || sfs_umount "$d/mnt"; return 1; }
	[ "$(jget "$out" files)" = "$COLD_N" ] || { CR_WHY="the reader read $(jget "$out" files) files"; [ "$where" = direct ] || sfs_umount "$d/mnt"; return 1; }
	secs=$(jget "$out" seconds)
	CR_FPS=$(awk -v n="$COLD_N" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')
	CR_NOTE="$secs s"
	if [ "$where" != direct ]; then
		CR_NOTE+=", demand $(stat_get "$d/mnt" demand_fetches), staged $(stat_get "$d/mnt" stage_fetches)"
		sfs_umount "$d/mnt"
	fi
}

bench_coldsmall() {
	local d=$WORK/cold r where fd=() fon=() foff=() ron=() roff=()
	COLD_N=${BENCH_COLD_N:-200000} EPOCH_WORKERS=${BENCH_EPOCH_WORKERS:-4}
	[ "${BENCH_QUICK:-0}" = 1 ] && [ -z "${BENCH_COLD_N:-}" ] && COLD_N=20000
	hdr coldsmall "$COLD_N tiny files (10-20 B) read once, cold, shuffled, $EPOCH_WORKERS readers: dir:// with epoch staging on / off / the source directly (files/s)"
	has_option epoch_staging || { skipped "this stagefs has no epoch_staging"; return; }
	log "coldsmall: writing $COLD_N files"
	"$PY" "$REPO/tools/bench/genscale.py" "$d/src" --files "$COLD_N" >/dev/null ||
		{ skipped "could not write the data"; return; }
	row5 "files/s" "staging on" "staging off" "source" ""
	for r in $(seq "$ROUNDS"); do
		for where in direct on off; do
			cold_run "$where" "$r" || { failed "$where: $CR_WHY"; return; }
			printf '  round %s %-7s %8s f/s  (%s)\n' "$r" "$where" "$CR_FPS" "$CR_NOTE"
			case $where in
			direct) fd+=("$CR_FPS") ;;
			on) fon+=("$CR_FPS") ;;
			off) foff+=("$CR_FPS") ;;
			esac
		done
		ron+=("$(ratio "${fon[-1]}" "${fd[-1]}")") roff+=("$(ratio "${foff[-1]}" "${fd[-1]}")")
	done
	row5 "median of $ROUNDS" "$(fps "$(median "${fon[@]}")")" "$(fps "$(median "${foff[@]}")")" "$(fps "$(median "${fd[@]}")")" ""
	row "staging on / source (median)" "" "" "$(median "${ron[@]}")"
	row "staging off / source (median)" "" "" "$(median "${roff[@]}")"
	result "coldsmall: dir://, staging on / source" "$(fps "$(median "${fon[@]}")")" "$(fps "$(median "${fd[@]}")")" "$(median "${ron[@]}")" ""
	result "coldsmall: dir://, staging off / source" "$(fps "$(median "${foff[@]}")")" "$(fps "$(median "${fd[@]}")")" "$(median "${roff[@]}")" ""
	retire "$d"
}
