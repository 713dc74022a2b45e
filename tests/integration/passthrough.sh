#!/usr/bin/env bash
# FUSE passthrough: a fully cached file is read by the kernel with zero READs reaching the daemon; a partial one stays on the daemon path until it is complete.
# timeout: 240
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

M=$((1 << 20))
src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src"
head -c $((32 * M + 777)) /dev/urandom >"$src/full.bin"
head -c $((16 * M + 5)) /dev/urandom >"$src/part.bin"
want_full=$(sha256 "$src/full.bin")
want_part=$(sha256 "$src/part.bin")

sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=auto xattrs=yes
[[ $(stat_get "$mnt" passthrough_active) -eq 1 ]] ||
	skip "passthrough is not available here: $(grep -o 'passthrough: off.*' "$(sfs_log "$mnt")" || echo 'no reason logged')"

# --- 1: a file read whole once is passthrough at its next open -------------
[[ $(sha256 "$mnt/full.bin") == "$want_full" ]] || die "cold read: wrong content"
reads=$(stat_get "$mnt" read_requests)
assert_gt "$reads" 0 "read_requests after the cold read (daemon path)"

# RELEASE reaches the daemon asynchronously after close(2); until it has, a
# new open stays on the daemon path (the kernel refuses a cached open and a
# passthrough open of one inode at the same time).  So wait for one open to
# go passthrough before measuring.
pt0=$(stat_get "$mnt" passthrough_opens)
pt_open_happened() {
	head -c 1 "$mnt/full.bin" >/dev/null
	[[ $(stat_get "$mnt" passthrough_opens) -gt $pt0 ]]
}
wait_for -t 20 pt_open_happened || die "no open of the fully cached file went passthrough"

drop_caches
reads=$(stat_get "$mnt" read_requests)
pt0=$(stat_get "$mnt" passthrough_opens)
bytes0=$(stat_get "$mnt" passthrough_bytes_estimate)
[[ $(sha256 "$mnt/full.bin") == "$want_full" ]] || die "passthrough read: wrong content"
assert_eq "$(stat_get "$mnt" read_requests)" "$reads" "read_requests across a passthrough read (page cache dropped)"
assert_eq "$(stat_get "$mnt" passthrough_opens)" $((pt0 + 1)) "passthrough_opens: one per open"
assert_eq "$(stat_get "$mnt" passthrough_bytes_estimate)" $((bytes0 + 32 * M + 777)) \
	"passthrough_bytes_estimate: the file size at open"

# mmap goes to the backing file as well.
drop_caches
reads=$(stat_get "$mnt" read_requests)
got=$("$PYTHON" - "$mnt/full.bin" <<'PY'
import hashlib, mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    print(hashlib.sha256(m).hexdigest())
PY
)
[[ $got == "$want_full" ]] || die "mmap of a passthrough file: wrong content"
assert_eq "$(stat_get "$mnt" read_requests)" "$reads" "read_requests across an mmap read"

# Opens held at the same time share the inode's one backing file.
"$PYTHON" - "$mnt/full.bin" "$src/full.bin" <<'PY'
import os, sys
fds = [os.open(sys.argv[1], os.O_RDONLY) for _ in range(4)]
want = open(sys.argv[2], "rb").read()
for i, fd in enumerate(fds):
    off = i * 3 * 1024 * 1024
    if os.pread(fd, 65536, off) != want[off:off + 65536]:
        sys.exit(f"fd {i}: wrong bytes at {off}")
for fd in fds:
    os.close(fd)
PY

# --- 1b: the backing id outlives the open, until it is not safe to reuse ----
# After the last RELEASE the id stays registered ("idle"); the next open of
# the inode reuses it.  An outside write to the cache file (its ctime moves)
# must make the next open check the file again instead.
stat_ge() { [[ $(stat_get "$mnt" "$1") -ge $2 ]]; }
# Hold the inode with an O_PATH descriptor (no OPEN, no RELEASE) until the
# FORGET below: on a loaded machine memory reclaim may evict the unused
# inode at any time, and its FORGET closes the idle id this part is about.
"$PYTHON" -c 'import os, sys, time; fd = os.open(sys.argv[1], os.O_PATH); print("held", flush=True); time.sleep(600)' \
	"$mnt/full.bin" >"$TEST_TMPDIR/pin.out" &
pin=$!
wait_for -t 10 grep -q held "$TEST_TMPDIR/pin.out" || die "cannot hold full.bin's inode"
wait_for -t 20 stat_ge passthrough_idle_ids 1 || die "no idle backing id after the opens were released"
r0=$(stat_get "$mnt" passthrough_reused)
[[ $(sha256 "$mnt/full.bin") == "$want_full" ]] || die "read through a kept backing id: wrong content"
assert_eq "$(stat_get "$mnt" passthrough_reused)" $((r0 + 1)) "passthrough_reused after an open of an idle inode"
wait_for -t 20 stat_ge passthrough_idle_ids 1 || die "the id did not go idle again"
cf=$(find "$TEST_TMPDIR/cache/data" -type f -name "$(getfattr --only-values -n user.stagefs.content "$mnt/full.bin")")
[[ -f $cf ]] || die "cannot find the cache file of full.bin"
flip_bytes "$cf" $((3 * M + 100)) 16
r0=$(stat_get "$mnt" passthrough_reused)
c0=$(stat_get "$mnt" corrupt_chunks)
[[ $(sha256 "$mnt/full.bin") == "$want_full" ]] || die "after an outside write to an idle backing file: wrong content"
assert_eq "$(stat_get "$mnt" passthrough_reused)" "$r0" "passthrough_reused after the cache file changed"
assert_gt "$(stat_get "$mnt" corrupt_chunks)" "$c0" "corrupt_chunks found by the check that replaced the reuse"
# FORGET (the kernel drops its inodes) closes the idle ids
kill "$pin"
wait "$pin" 2>/dev/null || true
drop_caches
stat_zero() { [[ $(stat_get "$mnt" passthrough_idle_ids) -eq 0 ]]; }
wait_for -t 20 stat_zero || die "idle backing ids left after drop_caches: $(stat_get "$mnt" passthrough_idle_ids)"

# --- 2: a partially cached file stays on the daemon path --------------------
head -c $M "$mnt/part.bin" >/dev/null
cached=$(getfattr --only-values -n user.stagefs.cached "$mnt/part.bin" 2>/dev/null || true)
log "part.bin after reading its first MiB: $cached chunks"
pt0=$(stat_get "$mnt" passthrough_opens)
reads=$(stat_get "$mnt" read_requests)
drop_caches
[[ $(sha256 "$mnt/part.bin") == "$want_part" ]] || die "partial file: wrong content"
assert_eq "$(stat_get "$mnt" passthrough_opens)" "$pt0" "passthrough_opens for a partially cached file"
assert_gt "$(stat_get "$mnt" read_requests)" "$reads" "read_requests for a partially cached file"

# ... and that read completed it: a later open is passthrough.
pt_open_part() {
	head -c 1 "$mnt/part.bin" >/dev/null
	[[ $(stat_get "$mnt" passthrough_opens) -gt $pt0 ]]
}
wait_for -t 20 pt_open_part || die "part.bin never went passthrough after it was complete"
drop_caches
reads=$(stat_get "$mnt" read_requests)
[[ $(sha256 "$mnt/part.bin") == "$want_part" ]] || die "completed file via passthrough: wrong content"
assert_eq "$(stat_get "$mnt" read_requests)" "$reads" "read_requests once part.bin is complete"

log "stats: $(stats_dump "$mnt")"
# full.bin's chunk 3 was refetched after the outside write: part 3 needs
# the cache complete, so wait until that fill is stored (a READ is answered
# from the fill's buffer before its write to the cache file ends)
full_cached() {
	"$STAGEFS" warmup --check --json "$mnt/full.bin" 2>/dev/null |
		"$PYTHON" -c 'import json, sys; j = json.load(sys.stdin); sys.exit(j["cached_files"] != j["files"])'
}
wait_for -t 20 full_cached || die "full.bin is not whole in the cache after its refetch"
sfs_umount "$mnt"

# --- 3: after a restart the first open verifies, then serves passthrough ----
drop_caches
sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=on
reads=$(stat_get "$mnt" read_requests)
[[ $(sha256 "$mnt/full.bin") == "$want_full" ]] || die "after restart: wrong content"
assert_eq "$(stat_get "$mnt" read_requests)" "$reads" "read_requests after a restart (the cache was complete)"
assert_eq "$(stat_get "$mnt" corrupt_chunks)" 0 "corrupt_chunks after a clean restart"
assert_eq "$(stat_get "$mnt" backend_reads)" 0 "backend_reads after a clean restart"
sfs_umount "$mnt"
