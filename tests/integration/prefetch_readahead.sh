#!/usr/bin/env bash
# Sequential reading triggers chunk readahead (readahead_fetches > 0, fetches ahead of the reader, right bytes); random reading does not.
# timeout: 200
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src"
head -c $((96 * 1024 * 1024)) /dev/urandom >"$src/seq.bin"
head -c $((256 * 1024 * 1024)) /dev/urandom >"$src/rand.bin"
want=$(sha256 "$src/seq.bin")
# 1 MiB chunks, 1 MiB kernel readahead: readahead_max=8 is 8 MiB ahead
sfs_mount "dir://$src" "$mnt" chunk_size=1M read_ahead_kb=1024 readahead_max=8

log "random reads first: no readahead"
"$PYTHON" - "$mnt/rand.bin" <<'PY'
import os, random, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
rng = random.Random(7)
grid = 4 << 20
last = None
for _ in range(40):
    while True:
        off = rng.randrange(8, size // grid) * grid	# never near offset 0
        if last is None or abs(off - last) >= 16 << 20:
            break
    os.posix_fadvise(fd, off, 65536, os.POSIX_FADV_RANDOM)
    assert len(os.pread(fd, 65536, off)) == 65536
    last = off
os.close(fd)
PY
ra=$(stat_get "$mnt" readahead_fetches)
log "after 40 random reads: readahead_fetches $ra, demand_fetches $(stat_get "$mnt" demand_fetches)"
assert_eq "$ra" 0 "readahead_fetches after random reads"

log "a sequential read"
d0=$(stat_get "$mnt" demand_fetches)
got=$(dd if="$mnt/seq.bin" bs=1M status=none | sha256sum | cut -d' ' -f1)
[[ $got == "$want" ]] || die "wrong bytes from the sequential read"
# a readahead fill is counted when its cache write ends, which can come
# after the reader was served from the engine's buffer: let them settle
counted() {
	ra=$(stat_get "$mnt" readahead_fetches)
	demand=$(($(stat_get "$mnt" demand_fetches) - d0))
	((ra + demand >= 96))
}
wait_for -t 15 counted || log "the fetch counters did not reach 96 in 15 s"
counted || true
log "sequential: readahead_fetches $ra, demand_fetches $demand (of 96 chunks)"
assert_gt "$ra" 0 "readahead_fetches after a sequential read"
# the backend was asked ahead of the reader: readers fetched fewer chunks themselves
assert_gt 96 "$demand" "chunks the reader fetched itself"
assert_eq $((ra + demand)) 96 "each chunk fetched once"
assert_eq "$(stat_get "$mnt" backend_reads)" $((ra + demand + d0)) "backend reads"

log "readahead_max=0: no readahead"
sfs_umount "$mnt"
rm -rf "$TEST_TMPDIR/cache"
sfs_mount "dir://$src" "$mnt" chunk_size=1M read_ahead_kb=1024 readahead_max=0
cat "$mnt/seq.bin" >/dev/null
assert_eq "$(stat_get "$mnt" readahead_fetches)" 0 "readahead_fetches with readahead_max=0"
sfs_umount "$mnt"
