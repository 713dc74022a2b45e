#!/usr/bin/env bash
# Bytes flipped, cut off or deleted in a cache file (stopped or mounted) are detected, refetched from the source and never served; the repair sticks.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

M=$((1 << 20))
mnt=$TEST_TMPDIR/mnt

# cache_file CACHE: the one data file in CACHE (fails if there is not exactly one).
cache_file() {
	local files
	mapfile -t files < <(find "$1/data" -type f -regextype posix-extended \
		-regex '.*/data/[0-9a-f]{2}/[0-9a-f]{32}' 2>/dev/null)
	[[ ${#files[@]} -eq 1 ]] ||
		die "expected one cache data file under $1/data, found ${#files[@]}: $(find "$1" -type f | head -n 20)"
	printf '%s\n' "${files[0]}"
}

# --- 1: corrupt while unmounted --------------------------------------------
src=$TEST_TMPDIR/src1 cache=$TEST_TMPDIR/cache1
mkdir -p "$src"
head -c $((8 * M + 4321)) /dev/urandom >"$src/file.bin"
want=$(sha256 "$src/file.bin")

sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache"
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "first read: wrong content"
sfs_umount "$mnt"

cf=$(cache_file "$cache")
log "corrupting $cf in chunks 0, 3 and the last"
flip_bytes "$cf" 100
flip_bytes "$cf" $((3 * M + 512 * 1024)) 4096
flip_bytes "$cf" $((8 * M + 4000)) 8
drop_caches

sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache"
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "served corrupt bytes after a remount"
log "stats: $(stats_dump "$mnt")"
assert_ge "$(stat_get "$mnt" corrupt_chunks)" 3 "corrupt_chunks after corrupting 3 chunks"
assert_ge "$(stat_get "$mnt" backend_reads)" 3 "backend_reads (refetches)"
sfs_umount "$mnt"

# The refetched chunks were written back: a third mount finds a clean cache.
drop_caches
sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache"
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "wrong content after the repair"
log "stats: $(stats_dump "$mnt")"
assert_eq "$(stat_get "$mnt" corrupt_chunks)" 0 "corrupt_chunks after the repair"
assert_eq "$(stat_get "$mnt" backend_reads)" 0 "backend_reads after the repair"
sfs_umount "$mnt"

# --- 2: corrupt while mounted ----------------------------------------------
# Whatever the daemon does, wrong bytes must never come back; the page cache
# may legitimately still hold the right ones.  Detection is asserted after a
# remount.
src=$TEST_TMPDIR/src2 cache=$TEST_TMPDIR/cache2
mkdir -p "$src"
head -c $((4 * M)) /dev/urandom >"$src/file.bin"
want=$(sha256 "$src/file.bin")

sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache"
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "first read: wrong content"
cf=$(cache_file "$cache")
flip_bytes "$cf" $((2 * M + 7)) 64
drop_caches
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "served corrupt bytes while mounted"
c=$(stat_get "$mnt" corrupt_chunks)
log "corrupt_chunks while mounted: $c ($(stats_dump "$mnt"))"
# Reading piecewise with O_DIRECT bypasses the page cache where the daemon
# allows it; either way the bytes must be right.
"$PYTHON" - "$mnt/file.bin" "$src/file.bin" <<'PY'
import mmap, os, sys
m, s = sys.argv[1], sys.argv[2]
try:
    fd = os.open(m, os.O_RDONLY | os.O_DIRECT)
except OSError:
    sys.exit(0)  # O_DIRECT refused: nothing more to check
buf = mmap.mmap(-1, 1 << 20)
want = open(s, "rb").read()
off = 0
while True:
    try:
        n = os.preadv(fd, [buf], off)
    except OSError:
        break  # O_DIRECT accepted at open but not on read: not this test's business
    if n <= 0:
        break
    if buf[:n] != want[off:off + n]:
        sys.exit(f"O_DIRECT read at {off}: corrupt bytes")
    off += n
PY
sfs_umount "$mnt"

drop_caches
sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache"
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "served corrupt bytes after the remount"
c2=$(stat_get "$mnt" corrupt_chunks)
# Either the live mount caught it (and repaired it), or this mount does.
[[ $((c + c2)) -ge 1 ]] || die "corruption was never detected (corrupt_chunks $c while mounted, $c2 after the remount)"
sfs_umount "$mnt"

# --- 3: truncate and delete while mounted ----------------------------------
# Files the daemon serves itself (passthrough off): a cache file cut short
# under the running mount is noticed (its ctime moved) and the missing
# chunks refetched; a deleted one is recreated.  No wrong or short read.
src=$TEST_TMPDIR/src3 cache=$TEST_TMPDIR/cache3
mkdir -p "$src"
head -c $((4 * M + 123)) /dev/urandom >"$src/file.bin"
want=$(sha256 "$src/file.bin")
# (prefetch_buffers=1M: the I/O engine keeps recently filled chunks in its
# buffers and would serve them from memory, right but without a refetch)
sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache" passthrough=off prefetch_buffers=1M
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "first read: wrong content"
r0=$(stat_get "$mnt" backend_reads)
cf=$(cache_file "$cache")
truncate -s $((M + 5)) "$cf"
drop_caches
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "served wrong bytes after the cache file was truncated"
r1=$(stat_get "$mnt" backend_reads)
log "truncated while mounted: $((r1 - r0)) chunks refetched, corrupt_chunks $(stat_get "$mnt" corrupt_chunks)"
[[ $r1 -gt $r0 ]] || die "a truncated cache file was not refetched (backend_reads $r0 -> $r1)"
rm -f "$cf"
drop_caches
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "served wrong bytes after the cache file was deleted"
assert_eq "$(stat_get "$mnt" read_errors)" 0 "reader errors"
sfs_umount "$mnt"
# and the next start does not trust what the journal says about it
drop_caches
sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache" passthrough=off
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "served wrong bytes after the remount"
sfs_umount "$mnt"
