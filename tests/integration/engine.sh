#!/usr/bin/env bash
# The I/O engine: a warmup keeps many fills in flight on one thread, through registered buffers and O_DIRECT writes, many transfers per submit; cold READs are answered from the engine thread and the rest of a chunk from its buffer; a READ that waits for a warmup's fill counts as stalled.
# timeout: 240
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src/w" "$src/r" "$src/s"
for i in $(seq 1 8); do head -c $((8 * 1024 * 1024)) /dev/urandom >"$src/w/f$i"; done
for i in $(seq 1 8); do head -c $((3 * 1024 * 1024 + 4321 * i)) /dev/urandom >"$src/r/g$i"; done
head -c $((24 * 1024 * 1024)) /dev/urandom >"$src/s/big"
stat_ge() { [[ $(stat_get "$1" "$2") -ge $3 ]]; }

log "warmup of 64 MiB in 64 KiB chunks"
sfs_mount "dir://$src" "$mnt" chunk_size=64K
grep -q "I/O engine: 128 MiB of buffers" "$(sfs_log "$mnt")" || die "no I/O engine: $(grep -i engine "$(sfs_log "$mnt")")"
"$STAGEFS" warmup --json -t 32 "$mnt/w" >"$TEST_TMPDIR/w.json"
"$PYTHON" - "$TEST_TMPDIR/w.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["failed"] == 0 and d["fetched"] == d["chunks"] == 1024, d
PY
treecmp "$src/w" "$mnt/w"
fills=$(stat_get "$mnt" engine_fills)
maxin=$(stat_get "$mnt" engine_max_inflight)
ops=$(stat_get "$mnt" uring_ops)
direct=$(stat_get "$mnt" uring_direct_ops)
fixed=$(stat_get "$mnt" uring_fixed_ops)
submits=$(stat_get "$mnt" uring_submits)
reg=$(stat_get "$mnt" engine_registered)
log "engine: $fills fills, at most $maxin in flight; $ops transfers ($direct O_DIRECT, $fixed from registered buffers) in $submits submissions; registered $reg"
assert_ge "$fills" 1024 "engine fills"
assert_eq "$(stat_get "$mnt" warmup_fetches)" 1024 "warmup fetches"
# 16 per user by default: the engine started them together, on one thread
assert_ge "$maxin" 8 "fills in flight at once"
# each chunk: an io_uring read of the source, an O_DIRECT write of the cache
assert_ge "$ops" 2048 "transfers through io_uring"
assert_ge "$direct" 1024 "O_DIRECT transfers"
assert_eq "$reg" 1 "buffers registered with io_uring (root has CAP_IPC_LOCK)"
assert_ge "$fixed" 2048 "transfers from registered buffers"
assert_gt "$ops" "$submits" "transfers per io_uring_enter (prepared together, submitted once)"
assert_eq "$(stat_get "$mnt" prefetch_errors)" 0 "background errors"

log "cold readers: answered from the engine thread, the rest of each chunk from its buffer"
sfs_umount "$mnt"
rm -rf "$TEST_TMPDIR/cache"
sfs_mount "dir://$src" "$mnt" chunk_size=4M passthrough=off
drop_caches
pids=()
for i in $(seq 1 8); do
	cmp "$mnt/r/g$i" "$src/r/g$i" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || die "a reader got wrong bytes"; done
async=$(stat_get "$mnt" async_reads)
hits=$(stat_get "$mnt" buffer_hits)
log "8 cold readers: $async READs answered by the engine thread, $hits pieces from fill buffers, demand fetches $(stat_get "$mnt" demand_fetches)"
assert_ge "$async" 8 "READs answered from the engine thread"
assert_eq "$(stat_get "$mnt" demand_fetches)" 8 "one fetch per chunk, however many READs wanted it"
assert_gt "$(stat_get "$mnt" stall_ms)" 0 "stall time of cold READs"
assert_eq "$(stat_get "$mnt" read_errors)" 0 "read errors"
assert_eq "$(stat_get "$mnt" corrupt_chunks)" 0 "corrupt chunks"
# 3 MiB+ files in 1 MiB READs: the kernel's readahead READs of a file all
# reach the daemon while its only chunk is in flight or just filled
sfs_umount "$mnt"

log "a READ that joins a warmup's fill counts as stalled"
rm -rf "$TEST_TMPDIR/cache"
# 2 MiB/s, 1 MiB chunks: the warmup's 16 fills wait for tokens, claimed
sfs_mount "dir://$src" "$mnt" chunk_size=1M backend_max_rate=2M readahead_max=0
"$STAGEFS" warmup --quiet -t 16 "$mnt/s" >/dev/null 2>&1 &
wpid=$!
wait_for -t 30 stat_ge "$mnt" engine_inflight 8 || die "the warmup's fills are not in flight"
stall0=$(stat_get "$mnt" stall_ms)
t0=$(date +%s%N)
dd if="$mnt/s/big" of="$TEST_TMPDIR/head" bs=1M skip=4 count=2 status=none
ms=$((($(date +%s%N) - t0) / 1000000))
cmp "$TEST_TMPDIR/head" <(tail -c +$((4 * 1024 * 1024 + 1)) "$src/s/big" | head -c $((2 * 1024 * 1024))) ||
	die "wrong bytes from chunks the warmup was fetching"
demand=$(stat_get "$mnt" demand_fetches)
stall=$(($(stat_get "$mnt" stall_ms) - stall0))
log "read of 2 chunks in flight for the warmup: ${ms} ms, stall_ms +$stall, demand_fetches $demand"
assert_eq "$demand" 0 "the reader joined the warmup's fills, fetched nothing itself"
assert_gt "$stall" 0 "waiting for a warmup fill is a stall"
kill "$wpid" 2>/dev/null || true
wait "$wpid" 2>/dev/null || true
sfs_umount "$mnt"
echo "ok: $maxin fills in flight, $ops transfers in $submits submissions; $async READs answered from the engine thread"
