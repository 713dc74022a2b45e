#!/usr/bin/env bash
# LOOKUP readahead of small cached files: right bytes with the page cache dropped (passthrough and no-open), counted reads, a cache file corrupted under a running daemon caught and refetched, off with lookup_readahead_max=0.
# timeout: 240
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

T=$TEST_TMPDIR N=300 K=1024
src=$T/src mnt=$T/mnt
mkdir -p "$src/s0" "$src/s1" "$src/s2"
for i in $(seq 1 $N); do head -c $((110 * K)) /dev/urandom >"$src/s$((i % 3))/f$i"; done
head -c $((3 * K * K)) /dev/urandom >"$src/big.bin"	# over lookup_readahead_max: never read ahead

# check MNT: every file through MNT has the source's bytes
check() {
	(cd "$src" && find . -type f | sort) | while read -r f; do
		cmp -s "$src/$f" "$1/$f" || die "$f: wrong content through $1"
	done
}

for mode in "" passthrough=off; do
	log "mode: ${mode:-default}"
	rm -rf "$T/cache"
	# few engine buffers: a READ of the damaged file must not be served from
	# the buffer of its fill (correct bytes, but no check to see)
	# epoch_staging=off: staging would cache files ahead of the first pass,
	# whose LOOKUPs must find nothing to read ahead
	sfs_mount "dir://$src" "$mnt" chunk_size=1M lookup_readahead_max=1M prefetch_buffers=4M xattrs=yes \
		epoch_staging=off ${mode:+"$mode"}
	check "$mnt"	# fills the cache: nothing to read ahead at these LOOKUPs
	# (only a LOOKUP the kernel repeats for a file already read may count)
	ra=$(stat_get "$mnt" lookup_readaheads)
	[[ $ra -lt $((N / 10)) ]] || die "lookup_readaheads while filling: $ra"
	drop_caches
	pt=$(stat_get "$mnt" passthrough_opens) bytes=$(stat_get "$mnt" read_bytes)
	misses=$(stat_get "$mnt" cache_misses)
	check "$mnt"
	assert_ge "$(stat_get "$mnt" lookup_readaheads)" $((ra + N)) "lookup_readaheads after drop_caches"
	assert_eq "$(stat_get "$mnt" cache_misses)" "$misses" "cache_misses of a cached tree"
	if [[ $(stat_get "$mnt" passthrough_active) -eq 1 ]]; then
		assert_ge "$(($(stat_get "$mnt" passthrough_opens) - pt))" $N "passthrough_opens"
	else
		# the daemon answered the READs: the feed rate counts every byte
		assert_ge "$(($(stat_get "$mnt" read_bytes) - bytes))" $((N * 110 * K)) "read_bytes"
	fi

	# a cache file damaged under the running daemon is read ahead, but the
	# OPEN (passthrough) or READ (no-open) that follows re-verifies it and
	# drops the bad chunk (its bytes then come from the source, or from the
	# I/O engine's buffer of its recent fill)
	h=$("$PYTHON" -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.stagefs.content").decode())' "$mnt/s1/f7")
	flip_bytes "$T/cache/data/${h:0:2}/$h" 5000 64
	drop_caches
	cmp -s "$src/s1/f7" "$mnt/s1/f7" || die "served corrupt bytes of a read-ahead file"
	assert_ge "$(stat_get "$mnt" corrupt_chunks)" 1 "corrupt_chunks"
	check "$mnt"
	sfs_umount "$mnt"
done

log "lookup_readahead_max=0"
sfs_mount "dir://$src" "$mnt" chunk_size=1M lookup_readahead_max=0
drop_caches
check "$mnt"
assert_eq "$(stat_get "$mnt" lookup_readaheads)" 0 "lookup_readaheads with lookup_readahead_max=0"
sfs_umount "$mnt"
