#!/usr/bin/env bash
# After one full read, a remount serves every byte and all metadata from the cache alone, with the source directory gone.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt cache=$TEST_TMPDIR/cache
gentree "$src" --small 1000 --big-mb 32 --chunk 1M

sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache"
treecmp "$src" "$mnt"
assert_gt "$(stat_get "$mnt" backend_reads)" 0 "backend_reads while online"
sfs_umount "$mnt"

# The source disappears: the path no longer exists.
mv "$src" "$TEST_TMPDIR/src.moved"
[[ ! -e $src ]]

sfs_mount "dir://$src" "$mnt" chunk_size=1M "cache_dir=$cache"
log "remounted offline: $(stats_dump "$mnt")"
treecmp "$TEST_TMPDIR/src.moved" "$mnt" --shuffle 3
log "after reading offline: $(stats_dump "$mnt")"
assert_eq "$(stat_get "$mnt" backend_reads)" 0 "backend_reads offline"
assert_eq "$(stat_get "$mnt" cache_misses)" 0 "cache_misses offline"
assert_gt "$(cache_served "$mnt")" 0 "cache_hits + passthrough_opens offline"
sfs_umount "$mnt"

# A second offline remount works as well (the snapshot is not used up), and
# the bare-path spelling of the source names the same dataset.
sfs_mount "$src" "$mnt" chunk_size=1M "cache_dir=$cache"
treecmp "$TEST_TMPDIR/src.moved" "$mnt" --no-content
cmp "$TEST_TMPDIR/src.moved/big.bin" "$mnt/big.bin"
assert_eq "$(stat_get "$mnt" backend_reads)" 0 "backend_reads on the second offline mount"
sfs_umount "$mnt"

# With an empty cache there is nothing to serve: mounting must fail, with a
# message, rather than show an empty tree.
rc=0
timeout 20 "$STAGEFS" -o "cache_dir=$TEST_TMPDIR/empty-cache,runtime_dir=$TEST_TMPDIR/run" \
	"dir://$src" "$mnt" </dev/null >"$TEST_TMPDIR/err" 2>&1 || rc=$?
if mountpoint -q "$mnt"; then
	fusermount3 -u -z "$mnt"
	die "mounted a missing source with an empty cache"
fi
[[ $rc -ne 0 && $rc -ne 124 ]] || die "missing source, empty cache: rc=$rc, expected a refusal"
[[ -s $TEST_TMPDIR/err ]] || die "missing source, empty cache: refused without a message"
log "ok: refused with: $(head -n 1 "$TEST_TMPDIR/err")"
