#!/usr/bin/env bash
# tools/bench/epoch.sh - epoch: a cold first epoch of a plain shuffled reader, staged or not
# SPDX-License-Identifier: Apache-2.0
#
#   epoch        one cold shuffled epoch of a plain multi-worker reader (no hints,
#                tools/bench/epoch_reader.py) over small files in Ceph: with epoch
#                staging (the default) / with epoch_staging=off, and / `stagefs
#                warmup` then the epoch (timed together); page cache, node
#                cache and the OSD's cache dropped before each
#
#   BENCH_EPOCH_N    epoch: files (default 5000)
#   BENCH_EPOCH_KB   epoch: file size in KiB (default 110, a JPEG's)
#   BENCH_EPOCH_WORKERS  epoch, coldsmall: reader processes (default 4)
#   BENCH_EPOCH_STEP_MS  epoch: training step after each sample, per worker
#                    (default 0: the input pipeline alone)
#   BENCH_EPOCH_REMOTE_MS  epoch: also measure with this much latency (ms, at
#                    most) injected into every OSD reply the daemon gets, as
#                    in hints (default 0: local only)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

# epoch_run MODE ROUND: one cold epoch (MODE stage, off or warmup) over
# rados://$POOL/bench-epoch; sets EP_MS (wall, warmup included) and EP_NOTE
epoch_run() {
	local mode=$1 r=$2 d=$WORK/epoch opts t0 out
	opts="cache_dir=$d/cache,ceph_conf=$CEPH_CONF"
	[ "$mode" = stage ] || opts+=",epoch_staging=off"
	retire "$d/cache"
	osd_restart || { EP_WHY="OSD restart failed"; return 1; }
	drop_caches
	sfs_mount "rados://$POOL/bench-epoch" "$d/mnt" "$opts" || { EP_WHY="mount failed"; return 1; }
	t0=$(now_ms)
	if [ "$mode" = warmup ]; then
		"$STAGEFS" warmup -q "$d/mnt" >>"$WORK/log/epoch-warmup.log" 2>&1 ||
			{ EP_WHY="stagefs warmup failed"; sfs_umount "$d/mnt"; return 1; }
	fi
	out=$("$PY" "$REPO/tools/bench/epoch_reader.py" "$d/mnt" --workers "$EPOCH_WORKERS" --seed "$r" \
		--compute "$(awk -v s="$EPOCH_STEP_MS" 'BEGIN { print s / 1000 }')" 2>"$WORK/log/epoch.err") ||
		{ EP_WHY="the reader failed: $(tail -1 "$WORK/log/epoch.err")"; sfs_umount "$d/mnt"; return 1; }
	EP_MS=$(($(now_ms) - t0))
	[ "$(jget "$out" files)" = "$EPOCH_N" ] || { EP_WHY="the reader read $(jget "$out" files) files"; sfs_umount "$d/mnt"; return 1; }
	EP_NOTE="demand $(stat_get "$d/mnt" demand_fetches), staged $(stat_get "$d/mnt" stage_fetches), warmup $(stat_get "$d/mnt" warmup_fetches), stall $(stat_get "$d/mnt" stall_ms) ms"
	sfs_umount "$d/mnt"
}

bench_epoch() {
	local d=$WORK/epoch r mode where wheres=local what ms_s ms_o ms_w rs=() rw=() ss=() os=() ws=()
	EPOCH_N=${BENCH_EPOCH_N:-5000} EPOCH_WORKERS=${BENCH_EPOCH_WORKERS:-4}
	EPOCH_STEP_MS=${BENCH_EPOCH_STEP_MS:-0}
	local kb=${BENCH_EPOCH_KB:-110} remote=${BENCH_EPOCH_REMOTE_MS:-0}
	[ "${BENCH_QUICK:-0}" = 1 ] && [ -z "${BENCH_EPOCH_N:-}" ] && EPOCH_N=1000
	hdr epoch "one cold shuffled epoch, $EPOCH_N x $kb KiB in Ceph, $EPOCH_WORKERS reader processes, step $EPOCH_STEP_MS ms: staging on / off / warmup-then-epoch"
	need_rados || { skipped "$RADOS_WHY"; return; }
	has_option epoch_staging || { skipped "this stagefs has no epoch_staging"; return; }
	mkdir -p "$d/src"
	log "epoch: writing and publishing $EPOCH_N files of $kb KiB"
	gen_files "$d/src" "$EPOCH_N" $((kb * 1024)) || { skipped "could not write the data"; return; }
	publish_set "$d/src" bench-epoch 4M || { skipped "stagefs publish failed"; return; }
	rm -rf "$d/src"
	[ "$remote" = 0 ] || wheres="local remote"
	for where in $wheres; do
		MOUNT_CEPH_ARGS= what=""
		if [ "$where" = remote ]; then
			MOUNT_CEPH_ARGS="--ms_inject_delay_type=osd --ms_inject_delay_probability=1 --ms_inject_delay_max=$(awk -v m="$remote" 'BEGIN { print m / 1000 }')"
			what=", OSD replies delayed <=${remote} ms"
		fi
		row5 "epoch seconds$what" "staging on" "staging off" "warmup+epoch" ""
		rs=() rw=() ss=() os=() ws=()
		for r in $(seq "$ROUNDS"); do
			for mode in stage off warmup; do
				epoch_run "$mode" "$r" || { failed "$mode: $EP_WHY"; MOUNT_CEPH_ARGS=; return; }
				printf '  round %s %-7s %6.2f s  (%s)\n' "$r" "$mode" "$(awk -v m="$EP_MS" 'BEGIN { print m / 1000 }')" "$EP_NOTE"
				case $mode in
				stage) ms_s=$EP_MS ;;
				off) ms_o=$EP_MS ;;
				warmup) ms_w=$EP_MS ;;
				esac
			done
			ss+=("$ms_s") os+=("$ms_o") ws+=("$ms_w")
			rs+=("$(ratio "$ms_o" "$ms_s")") rw+=("$(ratio "$ms_s" "$ms_w")")
		done
		ms_s=$(median "${ss[@]}") ms_o=$(median "${os[@]}") ms_w=$(median "${ws[@]}")
		row5 "median of $ROUNDS" "$(awk -v m="$ms_s" 'BEGIN { printf "%.2f s", m / 1000 }')" \
			"$(awk -v m="$ms_o" 'BEGIN { printf "%.2f s", m / 1000 }')" \
			"$(awk -v m="$ms_w" 'BEGIN { printf "%.2f s", m / 1000 }')" ""
		row "speed-up: off / on (median)" "" "" "$(median "${rs[@]}")"
		row "cost: on / warmup+epoch (median)" "" "" "$(median "${rw[@]}")"
		result "epoch ($where): staging off / on" "$(awk -v m="$ms_s" 'BEGIN { printf "%.2f s", m / 1000 }')" \
			"$(awk -v m="$ms_o" 'BEGIN { printf "%.2f s", m / 1000 }')" "$(median "${rs[@]}")" ">=1"
		result "epoch ($where): on / warmup+epoch" "$(awk -v m="$ms_s" 'BEGIN { printf "%.2f s", m / 1000 }')" \
			"$(awk -v m="$ms_w" 'BEGIN { printf "%.2f s", m / 1000 }')" "$(median "${rw[@]}")" "<1.1"
	done
	MOUNT_CEPH_ARGS=
	rm -rf "$d"
}
