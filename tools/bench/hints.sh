#!/usr/bin/env bash
# tools/bench/hints.sh - hints: shuffled epochs over a dataset larger than the cache
# SPDX-License-Identifier: Apache-2.0
#
#   hints        shuffled epochs over a dataset 2x the cache (from Ceph where
#                there is one): with order hints / without
#
#   BENCH_HINT_STEP_US  hints: the training step a reader spends after each
#                    sample in the second measurement (default 2000 us)
#   BENCH_HINT_REMOTE_MS  hints: also measure with this much latency (ms,
#                    at most) injected into every OSD reply the daemon gets
#                    (librados ms_inject_delay through CEPH_ARGS), as from a
#                    remote, busy cluster (default 4; 0: local only)
#   BENCH_HINT_CMD   hints: command run as `CMD MNT ORDERFILE` to give the order
#                    hint (default: `stagefs warmup --order ORDERFILE MNT`)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

HINT_STEP_US=${BENCH_HINT_STEP_US:-2000}
HINT_REMOTE_MS=${BENCH_HINT_REMOTE_MS:-4}

# hint_order MNT ORDERFILE: announce this session's read order to the daemon
hint_order() { "$STAGEFS" warmup -q --order "$2" "$1"; }

bench_hints() {
	local d=$WORK/hints n=$((SMALL_N / 2)) hint=${BENCH_HINT_CMD:-} r e a b ta tb rs=() as=() bs=() limit modes mode t0 ms hf
	hdr hints "2 shuffled epochs over a dataset 2x the cache (page cache dropped before each), 4 readers: with order hints / without"
	if [ -z "$hint" ] && "$STAGEFS" warmup --help 2>&1 | grep -c -- '--order' >/dev/null; then
		hint=hint_order
	fi
	if [ -z "$hint" ]; then
		if "$STAGEFS" --help 2>&1 | grep -ci hint >/dev/null; then
			skipped "stagefs mentions hints but bench.sh does not know how to give one: set BENCH_HINT_CMD='CMD' (run as CMD MNT ORDERFILE)"
		else
			skipped "stagefs has no order-hint interface yet (set BENCH_HINT_CMD to try one)"
		fi
		return
	fi
	mkdir -p "$d/src"
	gen_files "$d/src" "$n" $((SMALL_KB * 1024)) || { skipped "could not write the data"; return; }
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	limit=$((n * SMALL_KB * 1024 / 2))
	# hints pay where a miss costs a round trip to remote storage: read the
	# dataset from Ceph where there is one (a dir:// source on the local
	# disk is nearly as fast as the cache, so hints can gain little there)
	local src=dir://$d/src mopts=""
	if need_rados && publish_set "$d/src" bench-hints 4M; then
		src=rados://$POOL/bench-hints mopts=",ceph_conf=$CEPH_CONF"
	else
		printf '  note: no rados:// source (%s): hinting a dir:// source\n' "${RADOS_WHY:-publish failed}"
	fi
	printf '  source %s\n' "$src"
	# two kinds of reader: flat out (the input pipeline alone), and one
	# that spends a training step after every sample (sleeping, as a job
	# waits on its GPU): there the question is how long it stalls on input
	local step steps="0 $HINT_STEP_US" stall sa sb out where wheres=local what
	# and, where the source is Ceph, once more with a remote cluster's
	# latency put between the daemon and the local OSD: that is where a
	# miss costs what it costs on a real cluster (order hints exist for it)
	if [ "${src#rados://}" != "$src" ] && [ "$HINT_REMOTE_MS" != 0 ]; then
		wheres="local remote"
	fi
	for where in $wheres; do
		MOUNT_CEPH_ARGS= what=""
		if [ $where = remote ]; then
			MOUNT_CEPH_ARGS="--ms_inject_delay_type=osd --ms_inject_delay_probability=1 --ms_inject_delay_max=$(awk -v m="$HINT_REMOTE_MS" 'BEGIN { print m / 1000 }')"
			what=", OSD replies delayed <=${HINT_REMOTE_MS} ms"
			printf '  remote: librados %s\n' "$MOUNT_CEPH_ARGS"
		fi
		for step in $steps; do
			row "step ${step} us/sample$what" "no hints" "hints" "ratio"
			as=() bs=() rs=()
			for r in $(seq "$ROUNDS"); do
				# alternate which goes first, so a drift in the machine's load
				# does not always favour the same side
				modes="plain hinted"
				[ $((r % 2)) = 1 ] || modes="hinted plain"
				for mode in $modes; do
					retire "$d/cache"
					drop_caches
					sfs_mount "$src" "$d/mnt" "cache_dir=$d/cache,cache_size=$limit$mopts" || { skipped "mount failed"; return; }
					stall=0 ms=0
					for e in 1 2; do
						# the dataset is meant to be larger than the node's
						# memory too: epoch 2 must not come from the page cache
						[ $e = 1 ] || drop_caches
						"$RB" files -P -s $((r * 10 + e)) "$d/mnt.list" >"$d/order.$e"
						t0=$(now_ms)
						if [ $mode = hinted ]; then
							$hint "$d/mnt" "$d/order.$e" >>"$WORK/log/hint.log" 2>&1 || { skipped "BENCH_HINT_CMD failed"; sfs_umount "$d/mnt"; return; }
						fi
						rb files_per_s files -t 4 -c "$step" -s $((r * 10 + e)) "$d/mnt.list" >/dev/null ||
							{ failed "$(rb_why)"; sfs_umount "$d/mnt"; return; }
						ms=$((ms + $(now_ms) - t0))
						out=$(cat "$WORK/log/rb.json")
						stall=$(awk -v a="$stall" -v b="$(jget "$out" io_seconds)" 'BEGIN { printf "%.1f", a + b }')
					done
					[ $mode = plain ] || hf=$(stat_get "$d/mnt" hint_fetches)
					sfs_umount "$d/mnt"
					if [ $mode = plain ]; then
						ta=$((2 * n * 1000 / (ms ? ms : 1))) sa=$stall
					else
						tb=$((2 * n * 1000 / (ms ? ms : 1))) sb=$stall
					fi
				done
				row "round $r (hint_fetches ${hf:-?})" "$(fps "$ta")" "$(fps "$tb")" "$(ratio "$tb" "$ta")"
				row "  reader stall, s (4 readers)" "$sa" "$sb" ""
				as+=("$ta") bs+=("$tb") rs+=("$(ratio "$tb" "$ta")")
			done
			a=$(median "${as[@]}") b=$(median "${bs[@]}")
			row "median of $ROUNDS" "$(fps "$a")" "$(fps "$b")" "$(median "${rs[@]}")"
			if [ "$step" = 0 ]; then
				result "hints ($where): 2 epochs, flat out" "$(fps "$b")" "$(fps "$a")" "$(median "${rs[@]}")" ">=2"
			else
				result "hints ($where): 2 epochs, ${step}us step" "$(fps "$b")" "$(fps "$a")" "$(median "${rs[@]}")" ">=2"
			fi
		done
	done
	MOUNT_CEPH_ARGS=
	rm -rf "$d"
}
