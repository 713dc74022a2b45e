#!/usr/bin/env bash
# Eviction frees a cache file's blocks even while an idle passthrough backing id still holds the file: on a 40M tmpfs cache, three files read passthrough and then evicted leave no hidden usage behind.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

M=$((1 << 20))
T=$TEST_TMPDIR
mkdir -p "$T/src" "$T/cachefs"
mount -t tmpfs -o size=40M tmpfs "$T/cachefs" || skip "cannot mount a tmpfs"
trap 'umount -l "$T/cachefs" 2>/dev/null || true' EXIT
for i in 1 2 3 4 5 6; do head -c $((8 * M)) /dev/urandom >"$T/src/f$i"; done

mnt=$T/mnt
sfs_mount "dir://$T/src" "$mnt" chunk_size=4M cache_size=24M "cache_dir=$T/cachefs/c" passthrough=on
[[ $(stat_get "$mnt" passthrough_active) -eq 1 ]] ||
	skip "passthrough is not available here: $(grep -o 'passthrough: off.*' "$(sfs_log "$mnt")" || echo 'no reason logged')"

# f1..f3: read whole (daemon path, fills), then opened again until an open
# goes passthrough; its id stays registered, idle, after the close
for i in 1 2 3; do
	cmp "$mnt/f$i" "$T/src/f$i" || die "f$i: wrong bytes (cold)"
	pt0=$(stat_get "$mnt" passthrough_opens)
	pt_open() { cmp "$mnt/f$i" "$T/src/f$i" || die "f$i: wrong bytes"; [[ $(stat_get "$mnt" passthrough_opens) -gt $pt0 ]]; }
	wait_for -t 20 pt_open || die "no passthrough open of f$i"
done
wait_for -t 10 eval '[[ $(stat_get "$mnt" passthrough_idle_ids) -ge 3 ]]' ||
	die "expected 3 idle backing ids, have $(stat_get "$mnt" passthrough_idle_ids)"

# f4..f6 need the room: f1..f3 are evicted while their ids are still idle
for i in 4 5 6; do cmp "$mnt/f$i" "$T/src/f$i" || die "f$i: wrong bytes"; done
assert_ge "$(stat_get "$mnt" evicted_chunks)" 6 "evicted_chunks"
[[ $(stat_get "$mnt" passthrough_idle_ids) -ge 3 ]] || skip "the idle ids were closed before eviction: nothing to check"

used=$(stat_get "$mnt" cache_used_bytes)
df_used=$(df -B1 --output=used "$T/cachefs" | tail -1)
log "cache_used_bytes $used, tmpfs used $df_used, idle ids $(stat_get "$mnt" passthrough_idle_ids)"
# the index and fan-out dirs take little; each evicted file's last 4 MiB chunk,
# unlinked but held by its idle id, would take 12 MiB (4 MiB per file)
[[ $df_used -le $((used + 2 * M)) ]] ||
	die "tmpfs holds $df_used bytes for $used cached: evicted files still take space"

# the evicted files read right again (refetched, passthrough or not)
for i in 1 2 3; do cmp "$mnt/f$i" "$T/src/f$i" || die "f$i: wrong bytes after eviction"; done
assert_eq "$(stat_get "$mnt" read_errors)" 0 "read_errors"
echo "ok: evicted files free their blocks under idle passthrough ids"
