#!/usr/bin/env bash
# A real PyTorch DataLoader epoch (tools/dev/demo_train.py --torch: 4 worker processes, shuffled, batches of 32) reads 512 files through a supervised mount while its daemon is SIGKILLed 3 times mid-epoch: the epoch ends with every sample once and its crc32 right, no read error, the daemon generation at 4, the samples read by the DataLoader's workers.  Skipped where torch cannot be imported (python3-torch).
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
torch=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>&1) ||
	skip "torch cannot be imported by $PYTHON (install Debian's python3-torch): $(tail -1 <<<"$torch")"

T=$TEST_TMPDIR
KILLS=${RESTART_TORCH_KILLS:-3}
NFILES=512
WORKERS=4
# The source fetched at 6 MB/s (readers may borrow ahead, and the epoch
# staging fetches beside them): the epoch (58 MB, cold) lasts 5 to 7 s here,
# so each kill lands while the workers wait in the daemon for bytes.
"$PYTHON" - "$T/src" "$T/sums" "$NFILES" <<'EOF'
import os, random, sys, zlib
root, sums, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = random.Random(29)
with open(sums, "w") as out:
    for i in range(n):
        rel = "class%d/s%04d.bin" % (i % 8, i)
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        b = r.randbytes(r.choice([3000, 20000, 70000, 150000, 300000]) + r.randrange(4096))
        with open(os.path.join(root, rel), "wb") as f:
            f.write(b)
        out.write("%d %d %s\n" % (zlib.crc32(b), len(b), rel))
EOF
total=$(awk '{ s += $2 } END { print s }' "$T/sums")
log "dataset: $NFILES files, $total bytes; torch $torch"

MNT=$T/mnt
sfs_mount "dir://$T/src" "$MNT" supervise=on backend_max_rate=6M chunk_size=128K
sup=$(sfs_pid "$MNT")
logf=$(sfs_log "$MNT")
daemon_of() { pgrep -P "$1" -x stagefs | head -1; }
# the generation now serving, as the daemons logged it
generation() {
	local g
	g=$(sed -n 's/.*took the mount .* over (daemon generation \([0-9]*\)) .*/\1/p' "$logf" | tail -1)
	echo "${g:-1}"
}
past_generation() { (($(generation) > $1)); }
# samples the epoch has yielded so far (0 before it starts)
done_samples() {
	local e n
	read -r e n <"$T/progress" 2>/dev/null || { echo 0; return; }
	[[ $e == 1 && -n $n ]] && echo "$n" || echo 0
}
at_least() { (($(done_samples) >= $1)); }
train_running() { kill -0 "$train" 2>/dev/null; }

: >"$T/progress"
"$PYTHON" "$REPO/tools/dev/demo_train.py" "$MNT" --torch --epochs 1 --workers "$WORKERS" \
	--seed 29 --sums "$T/sums" --progress "$T/progress" --json "$T/train.json" \
	>"$T/train.out" 2>&1 &
train=$!

for ((i = 1; i <= KILLS; i++)); do
	want=$((NFILES * i / (KILLS + 1)))
	wait_for -t 60 at_least "$want" ||
		{ cat "$T/train.out" >&2; die "kill $i: the epoch did not reach $want samples (at $(done_samples))"; }
	old=$(daemon_of "$sup")
	[[ -n $old ]] || die "kill $i: no daemon under supervisor $sup"
	workers=$(pgrep -c -P "$train" || true)
	n=$(done_samples)
	gen=$(generation)
	train_running || die "kill $i: the epoch ended before the kill (too fast to kill mid-epoch?): $(cat "$T/train.out")"
	kill -KILL "$old"
	log "kill $i: daemon $old SIGKILLed at sample $n of $NFILES, $workers DataLoader worker(s) running"
	((n < NFILES)) || die "kill $i: the epoch had yielded all its samples before the kill"
	assert_ge "$workers" "$WORKERS" "kill $i: DataLoader worker processes at the kill"
	wait_for -t 30 past_generation "$gen" ||
		{ tail -30 "$logf" >&2; die "kill $i: no daemon took the mount over"; }
	n=$(done_samples)
	log "kill $i: $(grep -o "took the mount .* over (daemon generation .*" "$logf" | tail -1); at sample $n"
	# the epoch goes on through the new daemon
	((n == NFILES)) || wait_for -t 30 at_least $((n + 1)) ||
		die "kill $i: no sample came in 30 s after the takeover (still at $(done_samples))"
done

wait_for -t 60 bash -c "! kill -0 $train 2>/dev/null" ||
	die "the epoch did not end 60 s after the last takeover (at $(done_samples) of $NFILES samples)"
rc=0
wait "$train" || rc=$?
cat "$T/train.out"
[[ $rc -eq 0 ]] || die "demo_train.py exited $rc across $KILLS kills"

# What the loop found: torch's DataLoader read every sample, each once and
# right, in its worker processes; nothing was missing, repeated or wrong.
"$PYTHON" - "$T/train.json" "$NFILES" "$total" "$WORKERS" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
nfiles, total, workers = map(int, sys.argv[2:5])
def check(ok, what):
    if not ok:
        sys.exit("FAIL: %s: %s" % (what, json.dumps(r)))
check(r["loader"] == "torch DataLoader" and r["torch"], "not torch's DataLoader")
check(r["files"] == nfiles and r["checked"] == nfiles, "the files listed and checked")
[e] = r["epochs"]
check(e["samples"] == nfiles and e["bytes"] == total, "the epoch's samples and bytes")
check(e["wrong"] == 0 and e["missing"] == 0 and e["repeated"] == 0, "wrong, missing or repeated samples")
readers = r["readers"]
check(r["pid"] not in readers and len(readers) == workers, "the samples were not read by %d worker processes" % workers)
print("epoch: %d samples, %d bytes, every crc32 right, in %.1f s by %d DataLoader workers (torch %s)"
      % (e["samples"], e["bytes"], e["seconds"], len(readers), r["torch"]))
EOF

# One takeover per kill.  A planned restart from outside the test (another
# user's `stagefs restart --all` on a shared machine restarts every
# supervised mount, ours too) is one more: counted from the log, said.
planned=$(grep -c "supervisor: restarting the daemon of " "$logf" || true)
((planned == 0)) || log "note: $planned planned restart(s) from outside this test (stagefs restart --all?)"
assert_eq "$(stat_get "$MNT" daemon_generation)" $((1 + KILLS + planned)) "daemon generation"
assert_eq "$(stat_get "$MNT" daemon_restarts)" $((KILLS + planned)) "daemon restarts"
assert_eq "$(grep -c "supervisor: the daemon was killed by signal 9 " "$logf")" "$KILLS" \
	"daemons the supervisor saw killed by SIGKILL"
for k in read_errors backend_errors corrupt_chunks prefetch_errors; do
	assert_eq "$(stat_get "$MNT" "$k")" 0 "$k"
done
kill -0 "$sup" 2>/dev/null || die "the supervisor $sup is gone"
sfs_umount "$MNT"
log "ok"
