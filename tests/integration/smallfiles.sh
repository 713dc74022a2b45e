#!/usr/bin/env bash
# 10,000 small files read in random order by 4 concurrent readers, cold then warm: every file's sha256 is right.
# timeout: 400
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
gentree "$src" --small 10000 --big-mb 0 --chunk 1M
# epoch_staging=off: the readers read small/ only, and this counts the
# fetches they make (staging would bring in the rest of the tree too)
sfs_mount "dir://$src" "$mnt" chunk_size=1M epoch_staging=off

cat >"$TEST_TMPDIR/readers.py" <<'PY'
import hashlib, os, random, sys
from concurrent.futures import ProcessPoolExecutor
src, mnt, nreaders, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()

files = sorted(os.path.relpath(os.path.join(d, f), src)
               for d, _, fs in os.walk(os.path.join(src, "small")) for f in fs)
want = {rel: sha(os.path.join(src, rel)) for rel in files}

def reader(i):
    order = list(files)
    random.Random(seed * 100 + i).shuffle(order)
    bad = []
    for rel in order:
        try:
            got = sha(os.path.join(mnt, rel))
        except OSError as e:
            bad.append(f"{rel}: {e}")
            continue
        if got != want[rel]:
            bad.append(f"{rel}: wrong sha256")
    return bad

with ProcessPoolExecutor(nreaders) as ex:
    bad = [b for r in ex.map(reader, range(nreaders)) for b in r]
for b in bad[:20]:
    print(b)
print(f"{nreaders} readers x {len(files)} files: {len(bad)} wrong")
sys.exit(1 if bad else 0)
PY

log "cold"
"$PYTHON" "$TEST_TMPDIR/readers.py" "$src" "$mnt" 4 1
reads=$(stat_get "$mnt" backend_reads)
log "stats: $(stats_dump "$mnt")"
# Each small file is one chunk (all are under 1 MiB), fetched once however
# many readers wanted it.
assert_eq "$reads" 10000 "backend_reads after 4 readers of 10,000 one-chunk files"

drop_caches
log "warm"
"$PYTHON" "$TEST_TMPDIR/readers.py" "$src" "$mnt" 4 2
assert_eq "$(stat_get "$mnt" backend_reads)" "$reads" "backend_reads on the warm pass"
assert_gt "$(cache_served "$mnt")" 0 "cache_hits + passthrough_opens"
sfs_umount "$mnt"
