#!/usr/bin/env bash
# LRU vs no-thrash on a cyclic scan 1.5x the cache: LRU hits ~0, no-thrash keeps its resident set (hit ratio > 0.5).
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

T=$TEST_TMPDIR
mkdir -p "$T/data"
N=30 # files of one 1 MiB chunk each; the cache holds 20 (more misses than bypass slots)
# The I/O engine keeps recently filled chunks in its buffers (prefetch_buffers):
# 4 of them, so that the daemon's disk cache is what the scan measures.
for i in $(seq 1 $N); do head -c $((1024 * 1024)) /dev/urandom >"$T/data/f$i"; done

scan_ratio() { # scan_ratio POLICY -> hit ratio over epochs 2..4
	local policy=$1 mnt=$T/mnt-$1 conf=$T/$1.conf
	cat >"$conf" <<EOC
[stagefs]
chunk_size = 1M
cache_size = 20M
prefetch_buffers = 4M
[dataset data]
source = dir://$T/data
policy = $policy
EOC
	sfs_mount "" "$mnt" -c "$conf" "cache_dir=$T/cache-$policy"
	for i in $(seq 1 $N); do cat "$mnt/data/f$i" >/dev/null; done # epoch 1 fills
	local before misses_before
	before=$(stat_get "$mnt" backend_reads)
	for epoch in 2 3 4; do
		drop_caches # the kernel page cache must not hide the daemon's cache
		for i in $(seq 1 $N); do cmp -s "$mnt/data/f$i" "$T/data/f$i" || die "$policy: wrong bytes in f$i"; done
	done
	local fetched=$(($(stat_get "$mnt" backend_reads) - before))
	local used
	used=$(stat_get "$mnt" cache_used_bytes)
	[[ $used -le $((21 * 1024 * 1024)) ]] || die "$policy: cache holds $used bytes (limit 20M + 1 chunk)"
	assert_eq "$(stat_get "$mnt" read_errors)" 0 "$policy: reader errors"
	sfs_umount "$mnt"
	"$PYTHON" -c "print(f'{1 - $fetched / (3 * $N):.3f}')"
}

lru=$(scan_ratio lru)
nothrash=$(scan_ratio nothrash)
echo "hit ratio on a cyclic scan 1.5x the cache: lru $lru, nothrash $nothrash"
"$PYTHON" -c "import sys; sys.exit(0 if $lru < 0.1 else 1)" || die "LRU hit ratio $lru, expected near 0"
"$PYTHON" -c "import sys; sys.exit(0 if $nothrash > 0.5 else 1)" || die "no-thrash hit ratio $nothrash, expected > 0.5"
