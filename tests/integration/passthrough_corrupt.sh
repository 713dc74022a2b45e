#!/usr/bin/env bash
# FUSE passthrough never hands the kernel a corrupt cache file: damage done while the daemon was stopped is caught at the first open after restart.
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

M=$((1 << 20))
src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt cache=$TEST_TMPDIR/cache
mkdir -p "$src"
head -c $((8 * M + 99)) /dev/urandom >"$src/file.bin"
want=$(sha256 "$src/file.bin")

sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=auto "cache_dir=$cache"
[[ $(stat_get "$mnt" passthrough_active) -eq 1 ]] ||
	skip "passthrough is not available here: $(grep -o 'passthrough: off.*' "$(sfs_log "$mnt")" || echo 'no reason logged')"
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "first read: wrong content"
assert_eq "$(stat_get "$mnt" cache_chunks)" 9 "cache_chunks after reading the file whole"
sfs_umount "$mnt"

mapfile -t cfs < <(find "$cache/data" -type f -regextype posix-extended \
	-regex '.*/data/[0-9a-f]{2}/[0-9a-f]{32}')
[[ ${#cfs[@]} -eq 1 ]] || die "expected one cache data file, found ${#cfs[@]}"
log "corrupting ${cfs[0]} in chunk 5"
flip_bytes "${cfs[0]}" $((5 * M + 4096)) 32
drop_caches

sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=on "cache_dir=$cache"
# The first open verifies every chunk, finds chunk 5 bad, drops it and serves
# the file on the daemon path, which refetches the chunk.
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "served corrupt bytes after a restart"
log "stats: $(stats_dump "$mnt")"
assert_ge "$(stat_get "$mnt" corrupt_chunks)" 1 "corrupt_chunks"
assert_eq "$(stat_get "$mnt" passthrough_opens)" 0 "passthrough_opens for the open that found damage"
assert_ge "$(stat_get "$mnt" backend_reads)" 1 "backend_reads (the refetch)"

# Repaired and complete again: a later open is passthrough, with the right bytes.
pt_open() {
	head -c 1 "$mnt/file.bin" >/dev/null
	[[ $(stat_get "$mnt" passthrough_opens) -ge 1 ]]
}
wait_for -t 20 pt_open || die "the repaired file never went passthrough"
drop_caches
reads=$(stat_get "$mnt" read_requests)
[[ $(sha256 "$mnt/file.bin") == "$want" ]] || die "repaired file via passthrough: wrong content"
assert_eq "$(stat_get "$mnt" read_requests)" "$reads" "read_requests for the repaired file"
sfs_umount "$mnt"
