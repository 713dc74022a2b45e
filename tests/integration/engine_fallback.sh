#!/usr/bin/env bash
# The I/O engine's fallbacks give the same bytes and keep the cache: a cache filesystem that refuses O_DIRECT (ramfs) gets buffered writes, tmpfs works, buffers that cannot be registered (no CAP_IPC_LOCK, 8 MiB memlock) are used unregistered, and prefetch_io_uring=no falls back to worker threads.
# timeout: 240
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src"
for i in $(seq 1 6); do head -c $((2 * 1024 * 1024 + 777 * i)) /dev/urandom >"$src/f$i"; done
TOTAL=18 # chunks of 1 MiB

# check_mount WHAT: read everything twice (cold, then from the cache), warm up
check_mount() {
	drop_caches
	treecmp "$src" "$mnt"
	assert_eq "$(stat_get "$mnt" backend_reads)" "$TOTAL" "$1: one fetch per chunk"
	assert_eq "$(stat_get "$mnt" cache_chunks)" "$TOTAL" "$1: chunks kept in the cache"
	drop_caches
	treecmp "$src" "$mnt"
	assert_eq "$(stat_get "$mnt" backend_reads)" "$TOTAL" "$1: read again from the cache"
	assert_eq "$(stat_get "$mnt" read_errors)" 0 "$1: read errors"
	assert_eq "$(stat_get "$mnt" corrupt_chunks)" 0 "$1: corrupt chunks"
}

log "cache on ramfs: O_DIRECT refused, buffered writes"
mkdir -p "$TEST_TMPDIR/ramfs"
if mount -t ramfs ramfs "$TEST_TMPDIR/ramfs" 2>/dev/null; then
	# ramfs reports no size: cache_size bounds it
	sfs_mount "dir://$src" "$mnt" chunk_size=1M cache_size=64M passthrough=off \
		"cache_dir=$TEST_TMPDIR/ramfs/cache"
	check_mount ramfs
	assert_eq "$(stat_get "$mnt" uring_direct_ops)" 0 "ramfs: O_DIRECT transfers"
	assert_ge "$(stat_get "$mnt" uring_ops)" "$TOTAL" "ramfs: transfers through io_uring"
	grep -q "refuses O_DIRECT" "$(sfs_log "$mnt")" || die "ramfs: the fallback was not logged"
	sfs_umount "$mnt"
	# and across a restart: every chunk checked, none refetched
	sfs_mount "dir://$src" "$mnt" chunk_size=1M cache_size=64M passthrough=off \
		"cache_dir=$TEST_TMPDIR/ramfs/cache"
	treecmp "$src" "$mnt"
	assert_eq "$(stat_get "$mnt" backend_reads)" 0 "ramfs: refetched after a restart"
	sfs_umount "$mnt"
	umount "$TEST_TMPDIR/ramfs"
else
	log "no ramfs here: skipping that part"
fi

log "cache on tmpfs"
mkdir -p "$TEST_TMPDIR/tmpfs"
mount -t tmpfs -o size=256M tmpfs "$TEST_TMPDIR/tmpfs" || die "cannot mount a tmpfs"
sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=off "cache_dir=$TEST_TMPDIR/tmpfs/cache"
check_mount tmpfs
log "tmpfs: $(stat_get "$mnt" uring_direct_ops) of $(stat_get "$mnt" uring_ops) transfers O_DIRECT (kernels >= 6.6 accept it on tmpfs)"
sfs_umount "$mnt"
umount "$TEST_TMPDIR/tmpfs"

log "no CAP_IPC_LOCK and 8 MiB of memlock: buffers unregistered"
if setpriv --bounding-set=-ipc_lock true 2>/dev/null && command -v prlimit >/dev/null; then
	cat >"$TEST_TMPDIR/nolock" <<EOF
#!/bin/sh
exec setpriv --bounding-set=-ipc_lock -- prlimit --memlock=8388608:8388608 -- "$STAGEFS" "\$@"
EOF
	chmod +x "$TEST_TMPDIR/nolock"
	rm -rf "$TEST_TMPDIR/cache"
	STAGEFS=$TEST_TMPDIR/nolock sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=off
	check_mount unregistered
	assert_eq "$(stat_get "$mnt" engine_registered)" 0 "registered without CAP_IPC_LOCK"
	assert_eq "$(stat_get "$mnt" uring_fixed_ops)" 0 "fixed-buffer transfers"
	assert_ge "$(stat_get "$mnt" uring_ops)" "$TOTAL" "transfers through io_uring"
	grep -q "cannot register" "$(sfs_log "$mnt")" || die "the unregistered buffers were not logged"
	sfs_umount "$mnt"
else
	log "no setpriv/prlimit: skipping that part"
fi

log "prefetch_io_uring=no: worker threads, reads on the FUSE workers"
rm -rf "$TEST_TMPDIR/cache"
sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=off prefetch_io_uring=no
check_mount workers
assert_eq "$(stat_get "$mnt" uring_ops)" 0 "io_uring transfers without the engine"
assert_eq "$(stat_get "$mnt" async_reads)" 0 "READs answered off the FUSE workers"
"$STAGEFS" warmup --evict --quiet "$mnt" >/dev/null
"$STAGEFS" warmup --quiet "$mnt" >/dev/null
assert_eq "$(stat_get "$mnt" warmup_fetches)" "$TOTAL" "warmup by worker threads"
treecmp "$src" "$mnt"
sfs_umount "$mnt"
echo "ok: ramfs, tmpfs, unregistered buffers and worker threads give the same bytes"
