#!/usr/bin/env bash
# A cache on a small size-limited filesystem (tmpfs size=24M) filled past capacity: no reader errors, right bytes, usage within bounds; with no reserve the disk fills and reads bypass the cache; with a reserve larger than the filesystem the daemon logs why nothing is cached and a warmup says so.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

T=$TEST_TMPDIR
mkdir -p "$T/src" "$T/small"
mount -t tmpfs -o size=24M tmpfs "$T/small" || skip "cannot mount a tmpfs"
trap 'umount -l "$T/small" 2>/dev/null || true' EXIT
for i in $(seq 1 16); do head -c $((3 * 1024 * 1024)) /dev/urandom >"$T/src/f$i"; done # 48 MiB

run() { # run NAME OPTS...: read everything twice, check bytes and bounds
	local name=$1 mnt=$T/mnt-$1
	shift
	sfs_mount "dir://$T/src" "$mnt" chunk_size=1M "cache_dir=$T/small/$name" "$@"
	for pass in 1 2; do
		drop_caches
		for i in $(seq 1 16); do cmp "$mnt/f$i" "$T/src/f$i" || die "$name: wrong bytes in f$i"; done
	done
	assert_eq "$(stat_get "$mnt" read_errors)" 0 "$name: reader errors"
	local used df_used
	used=$(stat_get "$mnt" cache_used_bytes)
	df_used=$(df -B1 --output=used "$T/small" | tail -1)
	log "$name: cache_used_bytes $used, tmpfs used $df_used, bypass $(stat_get "$mnt" bypass_reads), evicted $(stat_get "$mnt" evicted_chunks)"
	[[ $df_used -le $((24 * 1024 * 1024)) ]] || die "$name: tmpfs over its size"
	sfs_umount "$mnt"
	rm -rf "${T:?}/small/$name"
}
# bounded by the filesystem: keep 10 % free
run ratio cache_free_ratio=0.10
# nothing reserved: writes hit ENOSPC, which must evict or bypass, never fail a read
run nofree cache_free_ratio=0

# other data (2 MiB) and the reserve (95 % of 24 MiB) leave the cache no
# room: the daemon says why, reads are right (past the cache), a warmup
# fails naming the cache's room
head -c $((2 * 1024 * 1024)) /dev/zero >"$T/small/other-data"
mnt=$T/mnt-noroom
sfs_mount "dir://$T/src" "$mnt" chunk_size=1M "cache_dir=$T/small/noroom" cache_free_ratio=0.95
grep -q "room for only 0 B: the filesystem has .* free and cache_free_ratio=0.95 keeps" "$(sfs_log "$mnt")" ||
	die "noroom: no warning about the cache's room in the log"
for i in 1 2; do cmp "$mnt/f$i" "$T/src/f$i" || die "noroom: wrong bytes in f$i"; done
assert_eq "$(stat_get "$mnt" cache_used_bytes)" 0 "noroom: cache_used_bytes"
assert_gt "$(stat_get "$mnt" bypass_reads)" 0 "noroom: bypass_reads"
if "$STAGEFS" warmup "$mnt/f3" >"$T/w.out" 2>&1; then die "noroom: warmup succeeded with no room"; fi
grep -q "f3: no room in the cache" "$T/w.out" || { cat "$T/w.out" >&2; die "noroom: warmup did not name the cache's room"; }
sfs_umount "$mnt"
echo "ok: no reader errors on a 24M cache filesystem with 48M of data; no room at all is explained"
