#!/usr/bin/env bash
# FUSE over io_uring with more cold readers than ring entries of old: 24 readers on a capped backend; with the default uring_queue_depth the daemon holds every READ and its stall share agrees within 5 points with what the readers measured, and with uring_queue_depth=8 (the old threads / CPUs here) fuse_uring_queue_full flags the requests the kernel kept; the cold fills are never taken for an outside change to a cache file.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
keep_uring_param || skip "$URING_PARAM is missing or not writable: this kernel has no FUSE over io_uring"

T=$TEST_TMPDIR
READER=$REPO/tests/feedreader.py
M=$((1 << 20))
NR=${URING_READERS:-24}	# readers at once: more than the 16 entries of old here
FPR=3			# files per reader, with a 0.5 s step after each but the last
# 72 MiB at 8 MiB/s: the readers lose more than half of a cold epoch
# waiting, and wait long enough that the warm cost per file (tens of ms
# with 24 readers on 2 vCPUs, and noisy) moves the share by a point or two
RATE=$((8 * M))
mkdir -p "$T/src"
"$PYTHON" - "$T/src" $((2 * NR * FPR)) <<'PY'
import os, random, sys
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(24)
for i in range(n):
    with open(os.path.join(d, "f%03d.bin" % i), "wb") as f:
        f.write(rng.randbytes((1 << 20) - rng.randrange(0, 4096)))
PY
mapfile -t ALL < <(cd "$T/src" && ls | sort)

# readers JOB SET: NR readers at once as job JOB, reader i reading files
# FPR*i.. of file set SET (0 or 1); their JSON lines go to $T/JOB.readers.
readers() {
	local job=$1 base=$(($2 * NR * FPR)) pids=() i j args
	drop_caches
	for ((i = 0; i < NR; i++)); do
		args=()
		for ((j = 0; j < FPR; j++)); do args+=("$MNT/${ALL[base + i * FPR + j]}"); done
		STAGEFS_JOB=$job "$PYTHON" "$READER" --compute-ms 500 "${args[@]}" >"$T/$job.$i" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || die "$job: a reader failed"; done
	cat "$T/$job".[0-9]* >"$T/$job.readers"
	stats_dump "$MNT" >"$T/$job.stats"
	wait_for -t 15 settled "$job" ||
		die "$job: the daemon's row did not settle at the readers' bytes: $(job_row "$job")"
	stats_dump "$MNT" >"$T/$job.stats"
}
job_row() {
	"$PYTHON" -c 'import json, sys; print([j for j in json.load(sys.stdin)["jobs"] if j["job"] == sys.argv[1]])' "$1" <"$T/$1.stats"
}
# settled JOB: the job's row holds every byte the readers read, unchanged
# since the last call.  It may hold a little more: under memory pressure
# the kernel can drop a page it read ahead before the reader copies it and
# ask for it again (72 files came as 73-81 READs on a loaded VM).
settled() {
	local now
	now=$("$PYTHON" -c '
import json, sys
want = sum(json.loads(l)["bytes"] for l in open(sys.argv[2]))
rows = [j for j in json.load(open(sys.argv[3]))["jobs"] if j["job"] == sys.argv[1]]
if rows and want <= rows[0]["read_bytes"] <= want * 1.05:
    print(rows[0]["read_bytes"], rows[0]["active_ns"], rows[0]["stall_ns"])
' "$1" "$T/$1.readers" <(stats_dump "$MNT"))
	[[ -n $now && $now == "$(cat "$T/settle" 2>/dev/null)" ]] && return 0
	echo "$now" >"$T/settle"
	sleep 1.2
	return 1
}
# compare COLD WARM: print the readers' stall share (their time blocked
# beyond the warm epoch's cost per file, over their wall time, summed over
# readers) and the daemon's (stall_ns / active_ns of the job), in points,
# and exit 1 if they differ by more than 5.
compare() {
	"$PYTHON" - "$T/$1.readers" "$T/$2.readers" "$T/$1.stats" "$1" <<'PY'
import json, sys
cold = [json.loads(l) for l in open(sys.argv[1])]
warm = [json.loads(l) for l in open(sys.argv[2])]
per_file = sum(r["blocked_ns"] for r in warm) / sum(r["files"] for r in warm)
lost = sum(max(0, r["blocked_ns"] - per_file * r["files"]) for r in cold)
reader = 100 * lost / sum(r["wall_ns"] for r in cold)
j = [j for j in json.load(open(sys.argv[3]))["jobs"] if j["job"] == sys.argv[4]][0]
daemon = 100 * j["stall_ns"] / j["active_ns"]
raw = 100 * sum(r["blocked_ns"] for r in cold) / sum(r["wall_ns"] for r in cold)
print(f"{sys.argv[4]}: readers' stall {reader:.1f}% (blocked {raw:.1f}%), daemon's {daemon:.1f}% "
      f"({j['stall_ns'] / 1e6:.0f} of {j['active_ns'] / 1e6:.0f} ms), warm cost {per_file / 1e6:.1f} ms a file")
sys.exit(abs(reader - daemon) > 5)
PY
}

MNT=$T/mnt
# epochs DEPTH SET: a cold and a warm epoch of file set SET on a fresh
# cache, uring_queue_depth=DEPTH (0: the default)
epochs() {
	rm -rf "$T/cache"
	sfs_mount "dir://$T/src" "$MNT" chunk_size=1M backend_max_rate=$RATE uring=on \
		passthrough=off no_open=off lookup_readahead_max=0 uring_queue_depth="$1"
	assert_eq "$(stat_get "$MNT" fuse_uring_active)" 1 "fuse_uring_active"
	readers "cold$1" "$2"
	readers "warm$1" "$2"
	FULL=$(stat_get "$MNT" fuse_uring_queue_full)
	# the daemon's own fills are no outside change to its cache files
	assert_eq "$(stat_get "$MNT" cache_outside_changes)" 0 "cache_outside_changes after a cold fill"
	! grep "changed outside stagefs" "$(sfs_log "$MNT")" || die "a cold fill was taken for an outside change"
	log "uring_queue_depth=$1: $(stat_get "$MNT" fuse_uring_entries) entries, all of a queue's held $FULL times"
	sfs_umount "$MNT"
}

# the old layout, threads / CPUs entries a queue: the kernel keeps READs; flagged
epochs 8 0
compare cold8 warm8 || log "uring_queue_depth=8: the daemon did not see every wait (expected: its queues were full)"
assert_gt "$FULL" 0 "fuse_uring_queue_full with 8 entries a queue and $NR cold readers"

# the default: every READ reaches the daemon, and its stall is the readers'
epochs 0 1
compare cold0 warm0 || die "uring_queue_depth=0 (auto): the daemon's stall share disagrees with the readers'"
