#!/usr/bin/env bash
# 8 concurrent readers (4 on one 64 MiB file in different orders, 4 on other files) get the right bytes, and each chunk is fetched from the source exactly once.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
chunk=$((1 << 20))
mkdir -p "$src"
# Sizes chosen to end mid-chunk, on a chunk boundary and just past one.
"$PYTHON" - "$src" <<'PY'
import os, random, sys
d = sys.argv[1]
M = 1 << 20
sizes = {"shared.bin": 64 * M, "a.bin": 24 * M + 12345, "b.bin": 16 * M,
         "c.bin": 8 * M + 1, "d.bin": 33 * M - 1}
for i, (name, size) in enumerate(sorted(sizes.items())):
    rng = random.Random(i)
    with open(os.path.join(d, name), "wb") as f:
        left = size
        while left:
            n = min(left, M)
            f.write(rng.randbytes(n))
            left -= n
PY
chunks=0
for f in "$src"/*.bin; do
	s=$(stat -c %s "$f")
	chunks=$((chunks + (s + chunk - 1) / chunk))
done
log "$chunks distinct chunks of 1 MiB"

sfs_mount "dir://$src" "$mnt" chunk_size=1M

# reader FILE ORDER: print the sha256 of FILE read piecewise in ORDER
# (forward, backward or random), in 256 KiB preads put back in place first.
cat >"$TEST_TMPDIR/reader.py" <<'PY'
import hashlib, os, random, sys
path, order = sys.argv[1], sys.argv[2]
size = os.stat(path).st_size
B = 256 * 1024
offs = list(range(0, size, B))
if order == "backward":
    offs.reverse()
elif order == "random":
    random.Random(os.getpid()).shuffle(offs)
buf = bytearray(size)
fd = os.open(path, os.O_RDONLY)
for o in offs:
    n = min(B, size - o)
    b = os.pread(fd, n, o)
    if len(b) != n:
        sys.exit(f"{path}: short read at {o}: {len(b)} of {n}")
    buf[o:o + n] = b
os.close(fd)
print(hashlib.sha256(buf).hexdigest(), path)
PY

pids=() outs=()
start_reader() {
	local f=$1 order=$2 out=$TEST_TMPDIR/r${#pids[@]}.out
	"$PYTHON" "$TEST_TMPDIR/reader.py" "$mnt/$f" "$order" >"$out" 2>&1 &
	pids+=($!)
	outs+=("$out:$f")
}
start_reader shared.bin forward
start_reader shared.bin backward
start_reader shared.bin random
start_reader shared.bin random
start_reader a.bin random
start_reader b.bin forward
start_reader c.bin backward
start_reader d.bin random

bad=0
for i in "${!pids[@]}"; do
	if ! wait_pid_exit "${pids[$i]}" 120; then
		die "reader ${outs[$i]#*:} hung"
	fi
	out=${outs[$i]%%:*} f=${outs[$i]#*:}
	if [[ $WAIT_RC -ne 0 ]]; then
		log "reader $i ($f) failed: $(cat "$out")"
		bad=1
		continue
	fi
	got=$(cut -d' ' -f1 "$out")
	if [[ $got != "$(sha256 "$src/$f")" ]]; then
		log "reader $i ($f): wrong sha256"
		bad=1
	fi
done
[[ $bad -eq 0 ]] || die "some readers got wrong data"

log "stats: $(stats_dump "$mnt")"
assert_eq "$(stat_get "$mnt" backend_reads)" "$chunks" "backend_reads (one fetch per distinct chunk)"
assert_eq "$(stat_get "$mnt" cache_misses)" "$chunks" "cache_misses"
total=$(du -cb "$src"/*.bin | tail -n 1 | cut -f1)
assert_eq "$(stat_get "$mnt" backend_bytes)" "$total" "backend_bytes"
assert_eq "$(stat_get "$mnt" corrupt_chunks)" 0 "corrupt_chunks"

# Once more, all 8 readers on the shared file with the page cache dropped:
# everything from the cache now.
drop_caches
pids=() outs=()
for order in forward backward random random forward backward random random; do
	start_reader shared.bin "$order"
done
want=$(sha256 "$src/shared.bin")
for i in "${!pids[@]}"; do
	wait_pid_exit "${pids[$i]}" 120 || die "warm reader $i hung"
	[[ $WAIT_RC -eq 0 ]] || die "warm reader $i failed: $(cat "${outs[$i]%%:*}")"
	[[ $(cut -d' ' -f1 "${outs[$i]%%:*}") == "$want" ]] || die "warm reader $i: wrong sha256"
done
assert_eq "$(stat_get "$mnt" backend_reads)" "$chunks" "backend_reads after the warm pass"

sfs_umount "$mnt"
