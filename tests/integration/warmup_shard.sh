#!/usr/bin/env bash
# stagefs warmup --shard i/3 for i = 0..2 stages disjoint shards whose union is every chunk exactly once; an interrupted warmup resumes without refetching.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
gentree "$src" --small 300 --big-mb 24 --chunk 1M
sfs_mount "dir://$src" "$mnt" chunk_size=1M

stat_ge() { [[ $(stat_get "$1" "$2") -ge $3 ]]; }
stat_eq() { [[ $(stat_get "$1" "$2") -eq $3 ]]; }
jget() {
	"$PYTHON" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$1" "$2"
}

"$STAGEFS" warmup --check --json "$mnt" >"$TEST_TMPDIR/all.json"
total=$(jget "$TEST_TMPDIR/all.json" chunks)
assert_gt "$total" 100 "chunks in the tree"

log "each shard's --check before staging: sizes add up to the whole"
sum=0
for i in 0 1 2; do
	"$STAGEFS" warmup --check --shard "$i/3" --json "$mnt" >"$TEST_TMPDIR/c$i.json"
	n=$(jget "$TEST_TMPDIR/c$i.json" chunks)
	assert_gt "$n" 0 "chunks of shard $i"
	sum=$((sum + n))
done
assert_eq "$sum" "$total" "sum of the shards' chunks"

log "stage the shards one after another (cold cache)"
reads0=$(stat_get "$mnt" backend_reads)
fetched=0
for i in 0 1 2; do
	"$STAGEFS" warmup --shard "$i/3" --json "$mnt" >"$TEST_TMPDIR/s$i.json"
	cat "$TEST_TMPDIR/s$i.json" >&2
	n=$(jget "$TEST_TMPDIR/s$i.json" chunks)
	# disjoint: nothing of shard i was brought in by shards < i
	assert_eq "$(jget "$TEST_TMPDIR/s$i.json" cached_before)" 0 "shard $i cached_before"
	assert_eq "$(jget "$TEST_TMPDIR/s$i.json" fetched)" "$n" "shard $i fetched"
	assert_eq "$n" "$(jget "$TEST_TMPDIR/c$i.json" chunks)" "shard $i is the same shard as its --check"
	fetched=$((fetched + n))
	"$STAGEFS" warmup --check --json "$mnt" >"$TEST_TMPDIR/after$i.json"
	assert_eq "$(jget "$TEST_TMPDIR/after$i.json" cached_before)" "$fetched" "cached after shard $i"
done
# covering: every chunk is cached, each fetched exactly once
assert_eq "$fetched" "$total" "chunks fetched over all shards"
assert_eq $(($(stat_get "$mnt" backend_reads) - reads0)) "$total" "backend reads over all shards"

log "an interrupted warmup resumes without refetching"
"$STAGEFS" warmup --evict --json "$mnt" >/dev/null
sfs_umount "$mnt"
# slow source: the warmup takes ~3 s, long enough to interrupt
sfs_mount "dir://$src" "$mnt" chunk_size=1M backend_max_rate=8M
"$STAGEFS" warmup --json "$mnt" >"$TEST_TMPDIR/int.json" 2>/dev/null &
wpid=$!
wait_for -t 30 stat_ge "$mnt" warmup_fetches 5 || die "the warmup does not start"
kill -INT "$wpid"
wait_pid_exit "$wpid" 10 || die "warmup did not exit on SIGINT"
# the daemon notices the client is gone and drops the rest of the job
wait_for -t 10 stat_eq "$mnt" warmup_jobs 0 || die "the job outlives its client"
part=$(stat_get "$mnt" warmup_fetches)
assert_gt "$total" "$part" "the interrupted warmup stopped early"
sfs_umount "$mnt"
sfs_mount "dir://$src" "$mnt" chunk_size=1M
"$STAGEFS" warmup --json "$mnt" >"$TEST_TMPDIR/resume.json"
cat "$TEST_TMPDIR/resume.json" >&2
cb=$(jget "$TEST_TMPDIR/resume.json" cached_before)
assert_eq "$cb" "$part" "chunks the resumed warmup found cached"
assert_eq $((cb + $(jget "$TEST_TMPDIR/resume.json" fetched))) "$total" "cached_before + fetched"
assert_eq "$(stat_get "$mnt" backend_reads)" $((total - part)) "backend reads of the resumed warmup"
sfs_umount "$mnt"
