#!/usr/bin/env bash
# Epoch-order hints (stagefs warmup --order, tools/stagefs_hints.py): files are prefetched a bounded window ahead of the reader, in order, so a reader following the order finds them cached (hits > misses).
# timeout: 240
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
N=160
"$PYTHON" - "$src/h" "$N" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
for i in range(n):
    with open(os.path.join(d, "f%04d.bin" % i), "wb") as f:
        f.write(os.urandom(768 * 1024))
PY
sfs_mount "dir://$src" "$mnt" chunk_size=1M hint_window=16
stat_eq() { [[ $(stat_get "$1" "$2") -eq $3 ]]; }

# order SEED FILE: a shuffled list of the files, absolute paths in the mount
order() {
	"$PYTHON" - "$mnt/h" "$N" "$1" >"$2" <<'PY'
import os, random, sys
d, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = ["f%04d.bin" % i for i in range(n)]
random.Random(seed).shuffle(names)
print("\n".join(os.path.join(d, x) for x in names))
PY
}

# read_in_order LIST: read every file of LIST in order with a little "compute"
# between files, checking the bytes against the source
cat >"$TEST_TMPDIR/reader.py" <<'PY'
import os, sys, time
lst, mnt, src = sys.argv[1], sys.argv[2], sys.argv[3]
for line in open(lst):
    p = line.strip()
    with open(p, "rb") as f:
        got = f.read()
    with open(os.path.join(src, os.path.relpath(p, mnt)), "rb") as f:
        if f.read() != got:
            sys.exit("wrong bytes in " + p)
    time.sleep(0.02)
PY

log "hinted order from stagefs warmup --order"
order 1 "$TEST_TMPDIR/order1"
"$STAGEFS" warmup --order "$TEST_TMPDIR/order1" --json >"$TEST_TMPDIR/h1.json"
cat "$TEST_TMPDIR/h1.json" >&2
# the first window, and no more, is fetched before anyone reads
wait_for -t 20 stat_eq "$mnt" hint_fetches 16 || die "the first window was not prefetched: $(stat_get "$mnt" hint_fetches)"
sleep 0.5
assert_eq "$(stat_get "$mnt" hint_fetches)" 16 "prefetched ahead of a reader that has not started"
d0=$(stat_get "$mnt" demand_fetches)
"$PYTHON" "$TEST_TMPDIR/reader.py" "$TEST_TMPDIR/order1" "$mnt" "$src"
misses=$(($(stat_get "$mnt" demand_fetches) - d0))
hits=$((N - misses))
log "hinted read: $hits files found cached, $misses fetched by the reader, hint_fetches $(stat_get "$mnt" hint_fetches)"
assert_gt "$hits" "$misses" "hits vs misses when reading in hinted order"
assert_ge "$hits" $((N * 9 / 10)) "files found cached"
wait_for -t 10 stat_eq "$mnt" hint_sessions 0 || die "the session did not end after its last file"

log "without a hint the same kind of read misses every file"
"$STAGEFS" warmup --evict --quiet "$mnt/h" >/dev/null
drop_caches	# or the kernel serves the files from the mount's page cache
order 2 "$TEST_TMPDIR/order2"
d0=$(stat_get "$mnt" demand_fetches)
"$PYTHON" "$TEST_TMPDIR/reader.py" "$TEST_TMPDIR/order2" "$mnt" "$src"
assert_ge $(($(stat_get "$mnt" demand_fetches) - d0)) $((N * 9 / 10)) "reader fetches without hints (a few may land by readahead)"

log "hinted order from tools/stagefs_hints.py (HintedOrder over indices)"
"$STAGEFS" warmup --evict --quiet "$mnt/h" >/dev/null
drop_caches
h0=$(stat_get "$mnt" hint_fetches)
d0=$(stat_get "$mnt" demand_fetches)
"$PYTHON" - "$REPO/tools" "$mnt/h" "$N" <<'PY'
import os, random, sys, time
sys.path.insert(0, sys.argv[1])
import stagefs_hints
d, n = sys.argv[2], int(sys.argv[3])
paths = [os.path.join(d, "f%04d.bin" % i) for i in range(n)]
idx = list(range(n))
random.Random(3).shuffle(idx)
order = stagefs_hints.HintedOrder(idx, paths)
time.sleep(0.3)
for i in order:		# iterating sends the order first
    with open(paths[i], "rb") as f:
        f.read()
    time.sleep(0.02)
assert order.session, "no session id"
PY
misses=$(($(stat_get "$mnt" demand_fetches) - d0))
log "python-hinted read: $((N - misses)) cached, $misses fetched by the reader, $(($(stat_get "$mnt" hint_fetches) - h0)) hint fetches"
assert_gt $((N - misses)) "$misses" "hits vs misses with the python helper"
sfs_umount "$mnt"
