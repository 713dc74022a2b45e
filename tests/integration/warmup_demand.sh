#!/usr/bin/env bash
# A reader's demand read issued during a large rate-limited warmup completes (right bytes) while the warmup is still running: readers go before background work.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src/bulk" "$src/other"
for i in $(seq -w 1 24); do
	head -c $((12 * 1024 * 1024)) /dev/urandom >"$src/bulk/f$i.bin"
done
head -c $((16 * 1024 * 1024)) /dev/urandom >"$src/other/wanted.bin"
want=$(sha256 "$src/other/wanted.bin")

# 288 MiB of warmup at 40 MB/s: about 7 s, whatever the disk
sfs_mount "dir://$src" "$mnt" chunk_size=1M backend_max_rate=40M
stat_ge() { [[ $(stat_get "$1" "$2") -ge $3 ]]; }

"$STAGEFS" warmup --json "$mnt/bulk" >"$TEST_TMPDIR/w.json" 2>"$TEST_TMPDIR/w.err" &
wpid=$!
wait_for -t 30 stat_ge "$mnt" warmup_fetches 20 || die "the warmup does not start"

log "demand read of 16 MiB outside the warmup set"
got=$(sha256 "$mnt/other/wanted.bin")
[[ $got == "$want" ]] || die "wrong bytes from the demand read"
demand=$(stat_get "$mnt" demand_fetches)
wf=$(stat_get "$mnt" warmup_fetches)
jobs=$(stat_get "$mnt" warmup_jobs)
log "after the read: demand_fetches $demand, warmup_fetches $wf, warmup_jobs $jobs"
# the ordering: the reader finished while the warmup still had work left
_pid_gone "$wpid" && die "the warmup finished before the demand read"
assert_eq "$jobs" 1 "warmup jobs running after the demand read"
assert_gt $((24 * 12)) "$wf" "chunks the warmup had fetched when the read completed"
assert_gt "$demand" 0 "demand fetches"

wait_pid_exit "$wpid" 120 || die "the warmup does not finish"
assert_eq "$WAIT_RC" 0 "warmup exit status"
"$PYTHON" - "$TEST_TMPDIR/w.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["failed"] == 0, d
assert d["fetched"] + d["cached_before"] == d["chunks"] == 24 * 12, d
print("warmup: %d chunks in %.1f s" % (d["chunks"], d["seconds"]), file=sys.stderr)
PY
throttle=$(stat_get "$mnt" backend_throttle_ms)
assert_gt "$throttle" 0 "backend_throttle_ms (the rate cap was applied)"
sfs_umount "$mnt"
