#!/usr/bin/env bash
# A generated tree (10,000 small files, a 200 MiB file, chunk-boundary sizes, odd names, links, modes, owners) reads back identical, cold then warm from the cache.
# timeout: 600
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
log "generating the tree"
gentree "$src" --small 10000 --big-mb 200 --chunk 4M,1M,8M
total=$(find "$src" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')

sfs_mount "dir://$src" "$mnt"	# default chunk_size (4M)

log "pass 1: cold"
treecmp "$src" "$mnt" --jobs 8
hits1=$(cache_served "$mnt")
reads1=$(stat_get "$mnt" backend_reads)
bytes1=$(stat_get "$mnt" backend_bytes)
misses1=$(stat_get "$mnt" cache_misses)
corrupt1=$(stat_get "$mnt" corrupt_chunks)
log "after pass 1: $(stats_dump "$mnt")"
assert_gt "$reads1" 0 "pass 1 backend_reads"
assert_gt "$misses1" 0 "pass 1 cache_misses"
assert_eq "$corrupt1" 0 "pass 1 corrupt_chunks"
# Every byte is fetched once at most (content-identical files may share).
[[ $bytes1 -le $total ]] || die "pass 1 fetched $bytes1 bytes from the source, more than the $total the tree holds"

drop_caches
log "pass 2: warm (page cache dropped, stagefs cache full)"
treecmp "$src" "$mnt" --jobs 8 --shuffle 2
hits2=$(cache_served "$mnt")
reads2=$(stat_get "$mnt" backend_reads)
log "after pass 2: $(stats_dump "$mnt")"
assert_gt $((hits2 - hits1)) 0 "pass 2 cache_hits + passthrough_opens"
assert_eq $((reads2 - reads1)) 0 "pass 2 backend_reads"
assert_eq "$(stat_get "$mnt" corrupt_chunks)" 0 "pass 2 corrupt_chunks"

sfs_umount "$mnt"
