#!/usr/bin/env bash
# tools/dev/demo.sh - stagefs end to end, unattended, in a few minutes (`make demo`).
# SPDX-License-Identifier: Apache-2.0
#
#   1. make a sample dataset: image-sized files (50-300 KiB) in class
#      directories plus a few 64 MiB shards
#   2. start a throwaway Ceph cluster (tools/dev/ceph-cluster.sh) in a temp dir
#      and publish the dataset into it (`stagefs publish`)
#   3. mount it (`stagefs rados://stagefs/NAME MNT`)
#   4. read one epoch on the cold node as a training loop would
#      (tools/dev/demo_train.py: shuffled, several readers, a torch DataLoader if
#      torch is installed), checking every byte
#   5. evict it and stage it again with `stagefs warmup` (progress shown)
#   6. read two more epochs from the warm NVMe cache; print per epoch the
#      samples/s and MB/s the loop measured beside the feed rate, hit ratio
#      and stall stagefs counted for the job over that epoch
#   7. print the feed rate as stagefs reports it (`stagefs top`, or the
#      counters of MNT/.stagefs/stats), unmount, stop the cluster
#
# Where Ceph or the rados:// pieces are missing it says so and mounts the
# dataset from a local directory (dir://) instead.  Everything lives in one
# temp dir and is removed at the end, on failure too.  Needs root (FUSE).
#
# Environment: DEMO_FILES (default 3000), DEMO_SHARDS (default 4),
#   DEMO_WORKERS (readers, default 4), DEMO_DIR (parent of the temp dir,
#   default /var/tmp), DEMO_KEEP=1 (keep the temp dir), DEMO_NO_CEPH=1.

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
STAGEFS=$REPO/stagefs
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
FILES=${DEMO_FILES:-3000}
SHARDS=${DEMO_SHARDS:-4}
WORKERS=${DEMO_WORKERS:-4}
NAME=demo

if [ -t 1 ]; then B=$'\033[1m' N=$'\033[0m'; else B='' N=''; fi
step() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }
note() { printf '   note: %s\n' "$*"; }
die() { printf 'demo: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (FUSE mounts are root-only here)"
[ -x "$STAGEFS" ] || die "$STAGEFS is not built: run make"
command -v fusermount3 >/dev/null || die "fusermount3 is missing (./configure --install-deps)"

T=$(mktemp -d "${DEMO_DIR:-/var/tmp}/stagefs-demo.XXXXXX")
MNT=$T/mnt
CLUSTER=
DPID=

cleanup() {
	local rc=$?
	trap - EXIT
	set +e
	if [ -n "$DPID" ]; then
		mountpoint -q "$MNT" && { fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT"; }
		for _ in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$DPID" 2>/dev/null && kill -KILL "$DPID"
		wait "$DPID" 2>/dev/null
	fi
	if [ -n "$CLUSTER" ]; then
		echo "   stopping the Ceph cluster"
		"$REPO/tools/dev/ceph-cluster.sh" stop "$CLUSTER" >/dev/null 2>&1
	fi
	if [ "$rc" -ne 0 ] && [ -f "$T/stagefs.log" ]; then
		echo "--- stagefs log (last lines):"
		tail -15 "$T/stagefs.log"
	fi
	if [ "${DEMO_KEEP:-0}" = 1 ]; then
		echo "   kept $T"
	else
		rm -rf --one-file-system "$T"
	fi
	[ "$rc" -eq 0 ] && printf '\ndemo: done\n' || printf '\ndemo: FAILED (status %s)\n' "$rc"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# mount SRC [OPTS]: start the daemon in the foreground (in the background of
# this script, so the trap can always stop it) and wait until MNT answers
mount_ds() {
	mkdir -p "$MNT"
	"$STAGEFS" -f -o "cache_dir=$T/cache,runtime_dir=$T/run,log_level=info${2:+,$2}" \
		"$1" "$MNT" </dev/null >>"$T/stagefs.log" 2>&1 &
	DPID=$!
	for _ in $(seq 600); do
		if mountpoint -q "$MNT" && timeout 5 cat "$MNT/.stagefs/stats" >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$DPID" 2>/dev/null || { wait "$DPID"; DPID=; return 1; }
		sleep 0.1
	done
	return 1
}

umount_ds() {
	for _ in $(seq 50); do fusermount3 -u "$MNT" 2>/dev/null && break; sleep 0.1; done
	wait "$DPID" 2>/dev/null || true
	DPID=
}

stat_of() { sed -n "s/^ *\"$1\": *\\([0-9]*\\).*/\\1/p" "$MNT/.stagefs/stats"; }

# ---------------------------------------------------------------------------
step "1. a sample dataset: $FILES image-sized files in 10 classes + $SHARDS shards of 64 MiB"
"$PY" - "$T/data" "$FILES" "$SHARDS" "$T/sums" <<'PY'
import os, random, sys, zlib
root, n, shards, sums = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = random.Random(7)
lines = []
def put(rel, data):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)
    lines.append("%d %d %s" % (zlib.crc32(data), len(data), rel))
for i in range(n):
    put("train/class%02d/img%06d.jpg" % (i % 10, i), os.urandom(rng.randint(50, 300) << 10))
for s in range(shards):
    put("shards/shard-%05d.tar" % s, os.urandom(64 << 20))
with open(sums, "w") as f:
    f.write("\n".join(lines) + "\n")
PY
echo "   $(du -sh --apparent-size "$T/data" | cut -f1) in $(find "$T/data" -type f | wc -l) files under $T/data"

# ---------------------------------------------------------------------------
step "2. a throwaway Ceph cluster, and the dataset published into it"
SRC=
why=
if [ "${DEMO_NO_CEPH:-0}" = 1 ]; then
	why="DEMO_NO_CEPH=1"
elif [ ! -x "$REPO/tools/dev/ceph-cluster.sh" ] || ! command -v ceph-mon >/dev/null; then
	why="Ceph is not installed (./configure --install-deps installs it)"
elif [ ! -x "$REPO/stagefs-publish" ]; then
	why="stagefs publish is not built yet"
else
	base=$((40000 + 32 * (RANDOM % 600)))
	if conf=$(CEPH_PORT_BASE=$base CEPH_OSD_SIZE=16G "$REPO/tools/dev/ceph-cluster.sh" start "$T/ceph" 2>"$T/ceph-start.log"); then
		CLUSTER=$T/ceph
		export CEPH_CONF=$conf
		echo "   cluster up: CEPH_CONF=$CEPH_CONF"
		if "$STAGEFS" publish "$T/data" "rados://stagefs/$NAME"; then
			SRC=rados://stagefs/$NAME
		else
			why="stagefs publish failed"
		fi
	else
		why="the Ceph cluster did not start: $(tail -1 "$T/ceph-start.log")"
	fi
fi

# ---------------------------------------------------------------------------
step "3. mount it"
MOPTS=
if [ -n "$SRC" ]; then
	MOPTS=ceph_conf=$CEPH_CONF
	echo "   $ ./stagefs $SRC $MNT -o cache_dir=$T/cache,ceph_conf=$CEPH_CONF"
	if ! mount_ds "$SRC" "$MOPTS"; then
		why="this ./stagefs cannot mount $SRC yet: $(grep -v '^$' "$T/stagefs.log" | tail -1)"
		SRC=
	fi
fi
if [ -z "$SRC" ]; then
	note "$why"
	note "FALLING BACK to a local source: dir://$T/data (same cache, same reads; no Ceph)"
	SRC=dir://$T/data
	MOPTS=
	echo "   $ ./stagefs $SRC $MNT -o cache_dir=$T/cache"
	mount_ds "$SRC" "" || die "the mount failed"
fi
echo "   mounted: $(find "$MNT" -type f | wc -l) files, source $(getfattr --only-values -n user.stagefs.source "$MNT" 2>/dev/null || echo "$SRC")"

# ---------------------------------------------------------------------------
step "4. epoch 1 on a cold node: every sample comes from the source through stagefs"
"$PY" -c 'import torch' 2>/dev/null && echo "   torch found: a real DataLoader" ||
	echo "   (no torch for $PY: plain reader threads stand in for DataLoader workers)"
: >"$T/results"
# the job's name: what stagefs counts the training loop's reads under
export STAGEFS_JOB=demo-train
"$PY" "$REPO/tools/dev/demo_train.py" "$MNT" --epochs 1 --workers "$WORKERS" \
	--sums "$T/sums" --drop-caches --results "$T/results" --label "cold: from the source through stagefs"

# ---------------------------------------------------------------------------
if [ -x "$REPO/stagefs-warmup" ]; then
	step "5. stage the dataset before the next job: stagefs warmup"
	"$STAGEFS" warmup --check "$MNT" | tail -1
	echo "   (evicting it first, so the warmup below fetches everything from the source again)"
	"$STAGEFS" warmup -q --evict "$MNT"
	sync; echo 3 >/proc/sys/vm/drop_caches
	t0=$(date +%s%N)
	"$STAGEFS" warmup "$MNT"
	ms=$((($(date +%s%N) - t0) / 1000000))
	bytes=$(du -sb --apparent-size "$T/data" | cut -f1)
	echo "   warmup: $((bytes / 1000000)) MB in $((ms / 1000)).$((ms % 1000 / 100)) s:" \
		"$((bytes / 1000 / (ms ? ms : 1))) MB/s from the source"
else
	step "5. (stagefs warmup is not built: epoch 1 warmed the cache as it read)"
fi

# ---------------------------------------------------------------------------
step "6. epochs 2 and 3 from the node's NVMe cache (page cache dropped before each)"
"$PY" "$REPO/tools/dev/demo_train.py" "$MNT" --epochs 2 --workers "$WORKERS" --seed 2 \
	--sums "$T/sums" --drop-caches --results "$T/results" \
	--label "warm: stagefs NVMe cache" --label "warm again"

echo
echo "   per epoch (page cache dropped before each): what the training loop measured,"
echo "   and what stagefs counted for its job (STAGEFS_JOB=$STAGEFS_JOB) over the same epoch:"
printf '   %-38s %9s %7s %6s | %s\n' epoch samples/s MB/s "x cold" "stagefs: feed rate, files/s, cache hits, stall"
awk -F'\t' '{ split($1, f, " "); label = substr($1, length(f[1]) + length(f[2]) + 3)
	if (NR == 1) c = f[1]
	printf "   %-38.38s %9d %7d %5.2fx | %s\n", label, f[1], f[2], c ? f[1] / c : 0, $2 }' "$T/results"
echo "   (stall: the share of the readers' time spent waiting for data not in the node cache;"
echo "    ~ marks a rate that includes estimated passthrough bytes: docs/feedrate.md)"

# ---------------------------------------------------------------------------
step "7. the feed rate, as stagefs reports it"
if [ -x "$REPO/stagefs-top" ]; then
	"$STAGEFS" top "$MNT" --once
else
	read_b=$(stat_of read_bytes) be_b=$(stat_of backend_bytes)
	hits=$(stat_of cache_hits) miss=$(stat_of cache_misses) up=$(stat_of uptime_s)
	printf '   (stagefs top is not built yet; from %s)\n' "$MNT/.stagefs/stats"
	printf '   %-28s %s\n' \
		"read by the job" "$((read_b / 1000000)) MB in $(stat_of read_requests) requests" \
		"fetched from the source" "$((be_b / 1000000)) MB in $(stat_of backend_reads) reads" \
		"cache hits / misses" "$hits / $miss ($(awk -v h="$hits" -v m="$miss" 'BEGIN { printf "%.1f", (h + m) ? 100 * h / (h + m) : 0 }') % hits)" \
		"cache on NVMe" "$(($(stat_of cache_used_bytes) / 1000000)) MB in $(stat_of cache_chunks) chunks" \
		"mean feed rate since mount" "$(awk -v b="$read_b" -v s="$up" 'BEGIN { printf "%.0f MB/s over %d s", b / 1e6 / (s ? s : 1), s }')"
	if "$STAGEFS" --help 2>&1 | grep -c -- '-o passthrough=' >/dev/null; then
		echo "   (reads the kernel serves itself through FUSE passthrough never reach the daemon, so are not counted)"
	fi
fi

step "8. clean up"
umount_ds
echo "   unmounted $MNT"
