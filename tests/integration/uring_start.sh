#!/usr/bin/env bash
# FUSE over io_uring start-up: requests the kernel held until the rings were registered (a stat of the mount point, a read, as the mount comes up) are answered, not lost with the registration's completion.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

PARAM=$URING_PARAM
keep_uring_param || skip "$PARAM is missing or not writable: this kernel has no FUSE over io_uring"

T=$TEST_TMPDIR
mkdir -p "$T/src"
printf 'hello\n' >"$T/src/f"
MNT=$T/mnt
mkdir -p "$MNT"

# Each ring thread sleeps 0.3 s between submitting its REGISTER and looking
# for a refusal in its completion queue.  The kernel holds the readers'
# requests until every queue has an entry, then hands them out at once: to
# the entries of the ring thread that registered last, still asleep.  A
# start-up that consumed those completions as REGISTER's lost the requests
# (their readers waited forever).
for round in 1 2 3; do
	STAGEFS_TEST_URING_REGISTER_DELAY_US=300000 "$STAGEFS" -f \
		-o "uring=on,cache_dir=$T/cache,runtime_dir=$T/run,log_level=info" \
		"dir://$T/src" "$MNT" </dev/null >"$T/log.$round" 2>&1 &
	pid=$!
	SFS_PID[$(_canon "$MNT")]=$pid
	SFS_LOG[$(_canon "$MNT")]=$T/log.$round
	# readers that ask as soon as the mount exists, before the rings do
	up() { awk -v m="$(_canon "$MNT")" '$5 == m' /proc/self/mountinfo | contains .; }
	wait_for -t 20 up || die "round $round: no mount: $(cat "$T/log.$round")"
	pids=()
	for i in 1 2 3 4 5 6; do
		timeout -k 2 20 cat "$MNT/f" >"$T/out.$round.$i" 2>&1 &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		rc=0
		wait "${pids[$i]}" || rc=$?
		[[ $rc -ne 124 && $rc -ne 137 ]] || die "round $round: a read sent while the rings came up was never answered"
		[[ $rc -eq 0 && $(cat "$T/out.$round.$((i + 1))") == hello ]] ||
			die "round $round: reader $((i + 1)) got rc $rc: $(cat "$T/out.$round.$((i + 1))")"
	done
	# the ring threads log "uring: on" once registered, which can come after
	# the readers they answered have gone: wait for the line, not a moment
	wait_for -t 10 grep -q "uring: on" "$T/log.$round" ||
		die "round $round: the rings were not used: $(grep "uring:" "$T/log.$round")"
	sfs_umount "$MNT"
done
log "ok: 3 rounds of 6 readers racing the rings' start-up, every read answered"
