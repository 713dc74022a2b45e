#!/usr/bin/env bash
# tools/bench.sh - stagefs benchmarks: ratios against a baseline measured in
# SPDX-License-Identifier: Apache-2.0
# the same run.  Speed is measured here, not by timed tests.
#
#   tools/bench.sh [warm|smallfiles|passthrough|smallhot|uring|rados|publish|manifest|index|warmup|hints|epoch|coldsmall|peers|peertls|gpu|au|all]...
#
#   warm         2 GiB file, sequential, warm stagefs cache: mount / cache file read directly
#   smallfiles   20,000 x 110 KiB files, shuffled, 1 and 4 readers, warm:
#                mount / the cache files read directly (files/s)
#   passthrough  warm + smallfiles with -o passthrough=off (no-open mode where the
#                daemon has it), with passthrough=off,no_open=off (the daemon path
#                with OPEN), and with the default
#   smallhot     smallfiles with the page cache hot (both sides read once first):
#                default, passthrough=off (no-open) and the daemon path with OPEN
#   uring        warm (daemon path) and smallfiles (default, and the daemon path
#                with OPEN) with -o uring=on / uring=off: FUSE over io_uring against
#                /dev/fuse; sets fuse.enable_uring for the run, restores it after
#   rados        cold reads through the mount (empty cache, OSD restarted) /
#                `rados bench seq` at the same concurrency; 4 MiB and 128 KiB objects
#   publish      `stagefs publish` MB/s / `rados bench write` at the same concurrency
#   manifest     a published dataset of BENCH_MANIFEST_N empty files: mount time
#                (first, with the manifest copy, and again), the daemon's memory
#                per entry after the mount and after `find` (RssAnon against a
#                daemon mounting a one-file dataset; the mapped manifest,
#                RssFile, is page cache, shared and reclaimable: shown apart),
#                the publisher's peak RSS per entry; and files/s publishing
#                BENCH_MANIFEST_PUB_N unique 4 KiB files / `rados bench write
#                -b 4K` objects/s at the same concurrency
#   index        daemon start-up with 1,000,000 cached chunks (cache_load_ms, wall)
#   warmup       `stagefs warmup` / `rados bench seq`, and / `cp -r` of a cold mount
#   hints        shuffled epochs over a dataset 2x the cache (from Ceph where
#                there is one): with order hints / without
#   epoch        one cold shuffled epoch of a plain multi-worker reader (no hints,
#                tools/bench/epoch_reader.py) over small files in Ceph: with epoch
#                staging (the default) / with epoch_staging=off, and / `stagefs
#                warmup` then the epoch (timed together); page cache, node
#                cache and the OSD's cache dropped before each
#   coldsmall    BENCH_COLD_N (200,000) tiny files (tests/genscale.py) read
#                once, cold (empty cache, page cache dropped), shuffled, by
#                BENCH_EPOCH_WORKERS readers (tools/bench/epoch_reader.py) through
#                dir:// with epoch_staging=on and =off / the same files read
#                directly from the source (ext4 here), in files/s; the
#                mount's first scan and the readers' listing are not timed
#   peers        BENCH_PEER_NODES (4) daemons in one peer group on 127.0.0.2..,
#                a dataset from a Ceph cluster made remote (OSD replies delayed)
#                and narrow (a link shared fairly: backend_max_rate LINK/N per
#                node, LINK for a node alone): backend bytes per dataset byte;
#                sharded warmup with peers / N nodes warming independently, and
#                / one node alone; a cold epoch on N nodes with / without
#                peers; the transport (tools/bench/peerbench) / iperf3 on loopback;
#                then peertls
#   peertls      the peer transport, TLS 1.3 (this build) / the clear-text
#                transport it replaced (commit BENCH_PEER_PLAIN_REV, built from
#                this checkout's history into the run's directory, or the
#                build in BENCH_PEER_PLAIN): tools/bench/peerbench against a daemon
#                serving from its warm cache, 1 and 16 chunks in flight,
#                interleaved, median of 3;
#                a node's own reads while it serves 3 askers flat out (and
#                with peer_serve_max_mbps=50) / alone
#   gpu          the warm 2 GiB file into GPU memory with libstagefs (tools/bench/gpubench):
#                feed rate / min(disk, pinned H2D), and / read() + cudaMemcpy,
#                all measured in the same run; "skipped: no GPU" without one
#   au           MLPerf-Storage-style: the most simulated accelerators kept at the
#                AU pass line (tools/bench/aubench: unet3d, resnet50, cosmoflow), reading
#                from the local disk, stagefs warm, stagefs cold (rados://),
#                ceph-fuse over CephFS, and copy-then-read (cp -r from CephFS)
#
# Each prints a table; at the end one summary table of ratio vs target.  A
# sub-benchmark whose piece is not built yet prints "skipped: <why>".  The
# page cache is dropped before every timed read.  Needs root (FUSE mounts).
#
# Environment (sizes shrink for a quick run, e.g. BENCH_QUICK=1):
#   BENCH_DIR        parent of the scratch directory (default /var/tmp; must be
#                    the local disk the cache would live on)
#   BENCH_ROUNDS     rounds per measurement, the median is reported (default 3)
#   BENCH_BIG_MB     warm: size of the big file (default 2048)
#   BENCH_SMALL_N    smallfiles: number of files (default 20000)
#   BENCH_SMALL_KB   smallfiles: file size (default 110)
#   BENCH_READERS    smallfiles: reader counts (default "1 4")
#   BENCH_T          rados/publish/warmup concurrency (default 16)
#   BENCH_RADOS_4M_N, BENCH_RADOS_128K_N   objects per size (default 384, 8192)
#   BENCH_PUBLISH_MB publish: MiB per round (default 1024)
#   BENCH_MANIFEST_N manifest: entries of the mounted dataset (default 1000000)
#   BENCH_MANIFEST_PUB_N  manifest: unique small files published (default 100000)
#   BENCH_INDEX_CHUNKS  index: chunks wanted (default 1000000)
#   BENCH_INDEX_CHUNK_KB  index: chunk size in KiB (default 4: 1M chunks = 4 GiB;
#                    64 with a stagefs whose chunk_size minimum is 64K)
#   BENCH_INDEX_MAX_GB  index: most GiB of disk the index fill may write
#                    (default 8, and at most 40% of the free space); with
#                    fewer chunks than wanted the 1M figure is extrapolated
#   BENCH_INDEX_READERS  index: readers filling the cache (default 4)
#   BENCH_HINT_STEP_US  hints: the training step a reader spends after each
#                    sample in the second measurement (default 2000 us)
#   BENCH_HINT_REMOTE_MS  hints: also measure with this much latency (ms,
#                    at most) injected into every OSD reply the daemon gets
#                    (librados ms_inject_delay through CEPH_ARGS), as from a
#                    remote, busy cluster (default 4; 0: local only)
#   BENCH_HINT_CMD   hints: command run as `CMD MNT ORDERFILE` to give the order
#                    hint (default: `stagefs warmup --order ORDERFILE MNT`)
#   BENCH_WARMUP_ARGS  extra arguments for `stagefs warmup`
#   BENCH_EPOCH_N    epoch: files (default 5000)
#   BENCH_EPOCH_KB   epoch: file size in KiB (default 110, a JPEG's)
#   BENCH_EPOCH_WORKERS  epoch, coldsmall: reader processes (default 4)
#   BENCH_COLD_N     coldsmall: tiny files (default 200000)
#   BENCH_EPOCH_STEP_MS  epoch: training step after each sample, per worker
#                    (default 0: the input pipeline alone)
#   BENCH_EPOCH_REMOTE_MS  epoch: also measure with this much latency (ms, at
#                    most) injected into every OSD reply the daemon gets, as
#                    in hints (default 0: local only)
#   BENCH_PEER_NODES peers: daemons in the group (default 4)
#   BENCH_PEER_MB    peers: dataset size in MiB, 4 MiB files (default 256)
#   BENCH_PEER_LINK  peers: the storage link's bytes/s (default 48M)
#   BENCH_PEER_CHUNK peers: chunk size (default 1M: with 4M chunks, 256 MiB is
#                    64 chunks, and one owner may get a third more than its share)
#   BENCH_PEER_DELAY_MS  peers: most ms injected into each OSD reply (default 4)
#   BENCH_GPU_DEV    gpu: the CUDA device (default 0)
#   BENCH_GPU_REQ    gpu: sfs_read_device request size (default 64M)
#   BENCH_AU_MB      au: MB of data per workload (default 1400; quick 300)
#   BENCH_AU_EPOCHS  au: epochs per trial (default 2)
#   BENCH_AU_MAX_N   au: most accelerators tried (default 48)
#   BENCH_AU_S_UNET3D, BENCH_AU_S_RESNET50, BENCH_AU_S_COSMOFLOW
#                    au: compute-time scale factor per workload (default 2, 4, 10)
#   BENCH_STAGEFS    the stagefs binary (default ./stagefs; stagefs-CMD beside it)
#   BENCH_OSD_SIZE   apparent size of the throwaway OSD (default 48G, sparse)
#   BENCH_MOUNT_OPTS extra -o options for every stagefs mount (experiments)
#   BENCH_DROP       what "page cache dropped" drops: 3 (default: pages, dentries
#                    and inodes, so every file costs a LOOKUP too) or 1 (pages
#                    only: a later epoch, whose dentries the kernel still holds)
#   BENCH_KEEP=1     keep the scratch directory
#   BENCH_QUICK=1    small sizes everywhere (a smoke run of the harness)

set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
STAGEFS=${BENCH_STAGEFS:-$REPO/stagefs}
RB=$REPO/tools/bench/readbench
PB=$REPO/tools/bench/peerbench
GB=$REPO/tools/bench/gpubench
AUB=$REPO/tools/bench/aubench
CLUSTER_SH=$REPO/tools/dev/ceph-cluster.sh
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

if [ "${BENCH_QUICK:-0}" = 1 ]; then
	: "${BENCH_ROUNDS:=1}" "${BENCH_BIG_MB:=256}" "${BENCH_SMALL_N:=2000}"
	: "${BENCH_RADOS_4M_N:=32}" "${BENCH_RADOS_128K_N:=512}" "${BENCH_PUBLISH_MB:=128}"
	: "${BENCH_INDEX_CHUNKS:=50000}" "${BENCH_MANIFEST_N:=20000}" "${BENCH_MANIFEST_PUB_N:=2000}" "${BENCH_AU_MB:=300}"
fi
ROUNDS=${BENCH_ROUNDS:-3}
BIG_MB=${BENCH_BIG_MB:-2048}
SMALL_N=${BENCH_SMALL_N:-20000}
SMALL_KB=${BENCH_SMALL_KB:-110}
READERS=${BENCH_READERS:-1 4}
T=${BENCH_T:-16}
R4M_N=${BENCH_RADOS_4M_N:-384}
R128K_N=${BENCH_RADOS_128K_N:-8192}
PUB_MB=${BENCH_PUBLISH_MB:-1024}
MF_N=${BENCH_MANIFEST_N:-1000000}
MF_PUB_N=${BENCH_MANIFEST_PUB_N:-100000}
IDX_CHUNKS=${BENCH_INDEX_CHUNKS:-1000000}
IDX_MAX_GB=${BENCH_INDEX_MAX_GB:-8}
IDX_CHUNK_KB=${BENCH_INDEX_CHUNK_KB:-4}
IDX_READERS=${BENCH_INDEX_READERS:-4}
HINT_STEP_US=${BENCH_HINT_STEP_US:-2000}
HINT_REMOTE_MS=${BENCH_HINT_REMOTE_MS:-4}
GPU_DEV=${BENCH_GPU_DEV:-0}
GPU_REQ=${BENCH_GPU_REQ:-64M}
AU_MB=${BENCH_AU_MB:-1400}
AU_EPOCHS=${BENCH_AU_EPOCHS:-2}
AU_MAX_N=${BENCH_AU_MAX_N:-48}
POOL=stagefs

ALL="warm smallfiles passthrough smallhot uring rados publish manifest index warmup hints epoch coldsmall peers gpu au"
PLAIN_REV=${BENCH_PEER_PLAIN_REV:-5538a86}	# the last commit with the clear-text peer transport

# ---------------------------------------------------------------------------
# output

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
hdr() { printf '\n== %s: %s\n' "$1" "$2"; }
row() {	# row LABEL A B RATIO [NOTE]
	printf '  %-34s %14s %14s %8s' "${1-}" "${2-}" "${3-}" "${4-}"
	[ -z "${5-}" ] || printf '  %s' "$5"
	printf '\n'
}
row5() { printf '  %-34s %14s %14s %14s %8s\n' "$@"; }

SUMMARY=()			# "name|measured|baseline|ratio|target|verdict"
CUR=				# the sub-benchmark running

# result NAME MEASURED BASELINE RATIO TARGET: one summary row; TARGET is
# ">=X", "<X" (compared with RATIO) or "" (information only).
result() {
	local verdict=
	case $5 in
	'>='*) verdict=$(awk -v r="$4" -v t="${5#>=}" 'BEGIN { print (r + 0 >= t + 0) ? "ok" : "BELOW" }') ;;
	'<'*) verdict=$(awk -v r="$4" -v t="${5#<}" 'BEGIN { print (r + 0 < t + 0) ? "ok" : "ABOVE" }') ;;
	esac
	SUMMARY+=("$1|$2|$3|$4|$5|$verdict")
}
skipped() {
	printf '  skipped: %s\n' "$*"
	SUMMARY+=("$CUR|skipped: $*|||| ")
}
failed() {
	printf '  FAILED: %s\n' "$*"
	SUMMARY+=("$CUR|FAILED: $*|||| ")
}

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
mbs() { awk -v b="$1" 'BEGIN { printf "%.0f MB/s", b / 1e6 }'; }
fps() { awk -v f="$1" 'BEGIN { printf "%.0f f/s", f }'; }
# jget JSON KEY: a number from readbench's one-line JSON
jget() { sed -n "s/.*\"$2\": \\([0-9.e+-]*\\).*/\\1/p" <<<"$1"; }

# rb KEY ARGS...: run readbench ARGS, print its KEY figure; on any read error
# print nothing, leave the reason in $WORK/log/rb.err and return 1
rb() {
	local key=$1 out
	shift
	out=$("$RB" "$@" 2>"$WORK/log/rb.stderr")
	printf '%s\n' "$out" >"$WORK/log/rb.json"	# the whole JSON, for callers wanting more
	if [ $? -ne 0 ] || [ -z "$out" ]; then
		{ printf '%s read errors, e.g. ' "$(jget "$out" errors)"; head -1 "$WORK/log/rb.stderr"; } >"$WORK/log/rb.err"
		return 1
	fi
	jget "$out" "$key"
}
rb_why() { cat "$WORK/log/rb.err" 2>/dev/null; }

# machine_notes: what else on this machine moves the figures, one line each
# (proactive reclaim of the page cache; the guest's idle polling)
machine_notes() {
	local k st act
	for k in /sys/kernel/mm/damon/admin/kdamonds/[0-9]*; do
		[ -r "$k/state" ] || continue
		st=$(cat "$k/state" 2>/dev/null)
		act=$(cat "$k"/contexts/0/schemes/*/action 2>/dev/null | sort -u | tr '\n' ' ')
		[ "$st" = on ] && printf '  note: DAMON kdamond %s is on (actions: %s): it may page out cached pages mid-run\n' \
			"${k##*/}" "${act% }"
	done
	# system-wide, and flipped by tests/integration/uring.sh and `uring`: it
	# decides whether cold reads of mounts with uring=auto take the rings
	[ -r /sys/module/fuse/parameters/enable_uring ] &&
		printf '  note: fuse.enable_uring=%s (uring=auto mounts take FUSE requests through io_uring where Y)\n' \
			"$(cat /sys/module/fuse/parameters/enable_uring)"
	[ -r /sys/module/haltpoll/parameters/guest_halt_poll_ns ] &&
		printf '  note: guest_halt_poll_ns=%s (0: an idle vCPU halts at once; cross-CPU wake-ups cost more)\n' \
			"$(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns)"
	return 0
}

drop_caches() {
	sync
	echo "${BENCH_DROP:-3}" >/proc/sys/vm/drop_caches
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# ---------------------------------------------------------------------------
# scratch space, mounts, cleanup

WORK=
CLUSTER_DIR=
declare -A MNT_PID=()
NMOUNT=0

cleanup() {
	local m
	trap - EXIT INT TERM
	for m in "${!MNT_PID[@]}"; do
		mountpoint -q "$m" && fusermount3 -u -z "$m" 2>/dev/null
		kill -TERM "${MNT_PID[$m]}" 2>/dev/null
	done
	for m in "${!MNT_PID[@]}"; do
		wait_gone "${MNT_PID[$m]}" 10 || kill -KILL "${MNT_PID[$m]}" 2>/dev/null
	done
	if [ -n "$CLUSTER_DIR" ] && [ -d "$CLUSTER_DIR" ]; then
		log "stopping the Ceph cluster"
		"$CLUSTER_SH" stop "$CLUSTER_DIR" >/dev/null 2>&1
	fi
	if [ -n "$WORK" ] && [ -d "$WORK" ]; then
		if [ "${BENCH_KEEP:-0}" = 1 ]; then
			log "kept $WORK"
		else
			rm -rf --one-file-system "$WORK"
		fi
	fi
}

# retire DIR...: empty DIR for the next cold run without deleting it now.
# On ext4 without a journal (this VM's root filesystem) an inode freed in
# the last 5 minutes is skipped by the allocator while its inode-table block
# is dirty (fs/ext4/ialloc.c: recently_deleted()), so creating files right
# after deleting thousands scans past all of them for each new file: 14-18 %
# of all CPU on a cold 128 KiB read, a benchmark artefact a node with a
# fresh or journalled cache filesystem does not have.  The directories go
# to $WORK/trash, deleted at the end; tmpfs ones, or all of them when the
# disk runs short (< BENCH_TRASH_MIN_GB free, default 16), go at once.
retire() {
	local dir free
	for dir; do
		[ -e "$dir" ] || continue
		free=$(df -P --output=avail "$WORK" 2>/dev/null | tail -1)
		if [ "$(stat -f -c %T "$dir")" = tmpfs ] || [ "${free:-0}" -lt $((${BENCH_TRASH_MIN_GB:-16} << 20)) ]; then
			rm -rf "$dir"
		else
			mkdir -p "$WORK/trash" && mv "$dir" "$(mktemp -u "$WORK/trash/XXXXXX")"
		fi
	done
}

# wait_gone PID SECS: wait until PID has exited (zombies count as gone)
wait_gone() {
	local pid=$1 end=$((SECONDS + $2)) st
	while :; do
		st=$(ps -o stat= -p "$pid" 2>/dev/null) || break
		case $st in Z*) break ;; esac
		[ $SECONDS -lt "$end" ] || return 1
		sleep 0.05
	done
	wait "$pid" 2>/dev/null
	return 0
}

# sfs_mount SRC MNT [OPTS]: start `stagefs -f` and wait until MNT answers.
# Sets MOUNT_MS (launch to ready) and MOUNT_LOG.  Returns 1 (log on stderr)
# if the daemon exits or is not ready within 120 s.
sfs_mount() {
	local src=$1 mnt=$2 opts=${3:-} pid t0 end cargs=()
	[ -z "${MOUNT_CONF:-}" ] || cargs=(-c "$MOUNT_CONF")
	NMOUNT=$((NMOUNT + 1))
	mkdir -p "$mnt" "$WORK/run/$NMOUNT" "$WORK/log"
	MOUNT_LOG=$WORK/log/mount.$NMOUNT.log
	t0=$(now_ms)
	# the user.stagefs.content xattr finds the cache files (cache_files)
	has_option xattrs && opts="xattrs=yes${opts:+,$opts}"
	CEPH_ARGS=${MOUNT_CEPH_ARGS:-${CEPH_ARGS:-}} "$STAGEFS" -f "${cargs[@]}" -o "runtime_dir=$WORK/run/$NMOUNT,log_level=notice${opts:+,$opts}${BENCH_MOUNT_OPTS:+,$BENCH_MOUNT_OPTS}" \
		"$src" "$mnt" </dev/null >"$MOUNT_LOG" 2>&1 &
	pid=$!
	MNT_PID[$mnt]=$pid
	end=$((SECONDS + 120))
	until mountpoint -q "$mnt" && timeout 5 cat "$mnt/.stagefs/stats" >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null || [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ]; then
			wait "$pid" 2>/dev/null
			unset "MNT_PID[$mnt]"
			sed 's/^/    stagefs: /' "$MOUNT_LOG" | tail -5 >&2
			return 1
		fi
		if [ $SECONDS -ge $end ]; then
			sed 's/^/    stagefs: /' "$MOUNT_LOG" | tail -5 >&2
			return 1
		fi
		sleep 0.01
	done
	MOUNT_MS=$(($(now_ms) - t0))
}

sfs_umount() {
	local mnt=$1 pid=${MNT_PID[$1]:-} i
	for i in $(seq 100); do
		fusermount3 -u "$mnt" 2>/dev/null && break
		mountpoint -q "$mnt" || break
		sleep 0.1
	done
	mountpoint -q "$mnt" && fusermount3 -u -z "$mnt" 2>/dev/null
	if [ -n "$pid" ]; then
		wait_gone "$pid" 30 || kill -KILL "$pid" 2>/dev/null
		unset "MNT_PID[$mnt]"
	fi
}

# stat_get MNT KEY: one integer from MNT/.stagefs/stats
stat_get() { timeout 10 cat "$1/.stagefs/stats" 2>/dev/null | sed -n "s/^ *\"$2\": *\\([0-9]*\\).*/\\1/p"; }

# (no grep -q: it exits at the first match, stagefs --help gets SIGPIPE and
# pipefail would turn the match into a failure)
has_option() { "$STAGEFS" --help 2>&1 | grep -c -- "-o $1=" >/dev/null; }
# the cache is filled the plain way: passthrough plays no part in a fill
fill_opts() { if has_option passthrough; then echo ",passthrough=off"; fi; }

# ---------------------------------------------------------------------------
# data

# gen_files DIR N BYTES [CLASSES]: N files of BYTES random bytes in CLASSES
# subdirectories (default 100), written in parallel by two processes.
gen_files() {
	"$PY" - "$1" "$2" "$3" "${4:-100}" <<'PY'
import os, sys
from concurrent.futures import ProcessPoolExecutor
root, n, size, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def part(k):
    for i in range(k, n, 2):
        d = os.path.join(root, "c%03d" % (i % classes))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%07d.bin" % i), "wb") as f:
            f.write(os.urandom(size))
with ProcessPoolExecutor(2) as ex:
    list(ex.map(part, range(2)))
PY
}

# gen_big FILE MIB: one file of random bytes
gen_big() {
	"$PY" - "$1" "$2" <<'PY'
import os, sys
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2]) // 64):
        f.write(os.urandom(64 << 20))
    f.write(os.urandom((int(sys.argv[2]) % 64) << 20))
PY
}

# list_files SRC MNT OUT: the mount's paths of SRC's files, sorted
list_files() { (cd "$1" && find . -type f | LC_ALL=C sort | sed "s|^\\.|$2|") >"$3"; }

# cache_paths CACHE_DIR IN OUT: the cache file behind each path of IN (same
# order), from the user.stagefs.content xattr; fails unless every one is
# fully cached within 30 s (a reader served from the fill buffers can
# finish before the last cache writes have).
cache_paths() {
	"$PY" - "$1" "$2" "$3" <<'PY'
import os, sys, time
cache, lin, lout = sys.argv[1:4]
paths = [line.rstrip("\n") for line in open(lin)]
with open(lout, "w") as fo:
    for p in paths:
        h = os.getxattr(p, "user.stagefs.content").decode()
        fo.write("%s/data/%s/%s\n" % (cache, h[:2], h))
def uncached():
    n = 0
    for p in paths:
        present, total = os.getxattr(p, "user.stagefs.cached").decode().split("/")
        n += present != total
    return n
end = time.time() + 30
while True:
    bad = uncached()
    if not bad or time.time() >= end:
        break
    time.sleep(0.2)
if bad:
    sys.exit("%d files are not fully cached" % bad)
PY
}

# ---------------------------------------------------------------------------
# Ceph

CLUSTER_WHY=
# need_cluster: start the throwaway cluster once; 1 (CLUSTER_WHY) if impossible
need_cluster() {
	local base conf
	[ -n "$CLUSTER_DIR" ] && return 0
	[ -z "$CLUSTER_WHY" ] || return 1
	if [ ! -x "$CLUSTER_SH" ] || ! command -v ceph-mon >/dev/null || ! command -v rados >/dev/null; then
		CLUSTER_WHY="no Ceph here (tools/dev/ceph-cluster.sh, ceph-mon or rados missing)"
		return 1
	fi
	for _ in 1 2 3; do
		base=${CEPH_PORT_BASE:-$((40000 + 32 * (RANDOM % 600)))}
		log "starting a throwaway Ceph cluster (ports $base..)"
		if conf=$(CEPH_PORT_BASE=$base CEPH_OSD_SIZE=${BENCH_OSD_SIZE:-48G} CEPH_POOL=$POOL \
			"$CLUSTER_SH" start "$WORK/ceph" 2>"$WORK/log/ceph-start.log"); then
			CLUSTER_DIR=$WORK/ceph
			export CEPH_CONF=$conf
			return 0
		fi
		[ -z "${CEPH_PORT_BASE:-}" ] || break
	done
	CLUSTER_WHY="the Ceph cluster did not start: $(tail -1 "$WORK/log/ceph-start.log")"
	return 1
}

osd_restart() {
	"$CLUSTER_SH" stop-osd "$CLUSTER_DIR" >>"$WORK/log/osd.log" 2>&1 &&
		"$CLUSTER_SH" start-osd "$CLUSTER_DIR" >>"$WORK/log/osd.log" 2>&1
}

# rados_bench_bw ARGS...: `rados bench ARGS`, prints the bandwidth in bytes/s
rados_bench_bw() {
	local out
	out=$(rados bench -p "$POOL" "$@" 2>&1) || { printf '%s\n' "$out" | tail -3 >&2; return 1; }
	printf '%s\n' "$out" | awk -F: '/^Bandwidth \(MB\/sec\)/ { gsub(/ /, "", $2); printf "%.0f\n", $2 * 1048576 }'
}

RADOS_WHY=
# need_rados: cluster + publish + a daemon that mounts rados:// (checked once
# with a tiny dataset); 1 (RADOS_WHY) if not
need_rados() {
	[ "$RADOS_WHY" = ok ] && return 0
	[ -z "$RADOS_WHY" ] || return 1
	if [ ! -x "$(dirname "$STAGEFS")/stagefs-publish" ]; then
		RADOS_WHY="stagefs-publish is not built"
		return 1
	fi
	if ! need_cluster; then
		RADOS_WHY=$CLUSTER_WHY
		return 1
	fi
	mkdir -p "$WORK/probe/src"
	head -c 100000 /dev/urandom >"$WORK/probe/src/f"
	if ! "$STAGEFS" publish -q "$WORK/probe/src" "rados://$POOL/probe" >"$WORK/log/probe.log" 2>&1; then
		RADOS_WHY="stagefs publish failed: $(tail -1 "$WORK/log/probe.log")"
		return 1
	fi
	if ! sfs_mount "rados://$POOL/probe" "$WORK/probe/mnt" "cache_dir=$WORK/probe/cache,ceph_conf=$CEPH_CONF" 2>/dev/null; then
		RADOS_WHY="./stagefs cannot mount rados:// yet: $(grep -v '^$' "$MOUNT_LOG" | tail -1)"
		return 1
	fi
	cmp -s "$WORK/probe/src/f" "$WORK/probe/mnt/f" || RADOS_WHY="a published file reads back wrong"
	sfs_umount "$WORK/probe/mnt"
	[ -z "$RADOS_WHY" ] || return 1
	RADOS_WHY=ok
}

# publish_set DIR NAME CHUNK: publish DIR as NAME (prints nothing; 1 on failure)
publish_set() {
	"$STAGEFS" publish -q -j "$T" --chunk-size "$3" "$1" "rados://$POOL/$2" >>"$WORK/log/publish.log" 2>&1
}

# ---------------------------------------------------------------------------
# warm: one big file, sequential

WARM_READY=
warm_prepare() {
	[ -n "$WARM_READY" ] && return 0
	local d=$WORK/warm
	mkdir -p "$d/src"
	log "warm: writing a $BIG_MB MiB file"
	gen_big "$d/src/big" "$BIG_MB" || return 1
	echo "$d/mnt/big" >"$d/mnt.list"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache$(fill_opts)" || return 1
	log "warm: filling the cache"
	if ! rb bytes_per_s seq "$d/mnt/big" >/dev/null ||
		! cache_paths "$d/cache" "$d/mnt.list" "$d/cache.list" 2>"$WORK/log/rb.err"; then
		sfs_umount "$d/mnt"
		return 1
	fi
	WARM_CACHEFILE=$(cat "$d/cache.list")
	sfs_umount "$d/mnt"
	WARM_READY=1
}

# measure_warm OPTS: rounds of (cache file direct, mount); sets W_DIRECT,
# W_FUSE (median bytes/s) and W_RATIO (median of the per-round ratios)
measure_warm() {
	local d=$WORK/warm r a b rs=() as=() bs=()
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache${1:+,$1}" || { echo "mount failed" >"$WORK/log/rb.err"; return 1; }
	# the first read after start verifies the chunks: not timed
	rb bytes_per_s seq "$d/mnt/big" >/dev/null || { sfs_umount "$d/mnt"; return 1; }
	for r in $(seq "$ROUNDS"); do
		drop_caches
		a=$(rb bytes_per_s seq "$WARM_CACHEFILE") || { sfs_umount "$d/mnt"; return 1; }
		drop_caches
		b=$(rb bytes_per_s seq "$d/mnt/big") || { sfs_umount "$d/mnt"; return 1; }
		row "round $r${1:+ ($1)}" "$(mbs "$a")" "$(mbs "$b")" "$(ratio "$b" "$a")"
		as+=("$a") bs+=("$b") rs+=("$(ratio "$b" "$a")")
	done
	sfs_umount "$d/mnt"
	W_DIRECT=$(median "${as[@]}") W_FUSE=$(median "${bs[@]}") W_RATIO=$(median "${rs[@]}")
}

bench_warm() {
	hdr warm "$BIG_MB MiB file, sequential, warm stagefs cache, page cache dropped"
	warm_prepare || { failed "preparing: $(rb_why)"; return; }
	row "" "cache file" "mount" "ratio"
	measure_warm "" || { failed "$(rb_why)"; return; }
	row "median of $ROUNDS" "$(mbs "$W_DIRECT")" "$(mbs "$W_FUSE")" "$W_RATIO"
	result "warm: ${BIG_MB}M sequential" "$(mbs "$W_FUSE")" "$(mbs "$W_DIRECT")" "$W_RATIO" ">=0.9"
}

# ---------------------------------------------------------------------------
# smallfiles: many small files, shuffled, 1 and N readers

SMALL_READY=
small_prepare() {
	[ -n "$SMALL_READY" ] && return 0
	local d=$WORK/small
	mkdir -p "$d/src"
	log "smallfiles: writing $SMALL_N files of $SMALL_KB KiB"
	gen_files "$d/src" "$SMALL_N" $((SMALL_KB * 1024)) || return 1
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache$(fill_opts)" || return 1
	log "smallfiles: filling the cache"
	if ! rb files_per_s files -t 4 "$d/mnt.list" >/dev/null ||
		! cache_paths "$d/cache" "$d/mnt.list" "$d/cache.list" 2>"$WORK/log/rb.err"; then
		sfs_umount "$d/mnt"
		return 1
	fi
	sfs_umount "$d/mnt"
	SMALL_READY=1
}

# measure_small OPTS READERS [hot]: sets S_DIRECT, S_FUSE (median files/s),
# S_RATIO.  With "hot" the page cache is not dropped: both sides are read
# once first and stay in memory.
measure_small() {
	local d=$WORK/small r a b q l rs=() as=() bs=() hot=${3:-}
	drop_caches
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache${1:+,$1}" || { echo "mount failed" >"$WORK/log/rb.err"; return 1; }
	# the first read after start verifies the chunks: not timed
	rb files_per_s files -t 4 "$d/mnt.list" >/dev/null || { sfs_umount "$d/mnt"; return 1; }
	if [ -n "$hot" ]; then
		rb files_per_s files -t 4 "$d/cache.list" >/dev/null || { sfs_umount "$d/mnt"; return 1; }
		rb files_per_s files -t 4 "$d/mnt.list" >/dev/null || { sfs_umount "$d/mnt"; return 1; }
	fi
	for r in $(seq "$ROUNDS"); do
		[ -n "$hot" ] || drop_caches
		a=$(rb files_per_s files -t "$2" -s "$r" "$d/cache.list") || { sfs_umount "$d/mnt"; return 1; }
		[ -n "$hot" ] || drop_caches
		q=$(stat_get "$d/mnt" read_requests) l=$(stat_get "$d/mnt" lookup_readaheads)
		b=$(rb files_per_s files -t "$2" -s "$r" "$d/mnt.list") || { sfs_umount "$d/mnt"; return 1; }
		# what reached the daemon, per file: READs and LOOKUP readaheads
		q=$(awk -v a="$q" -v b="$(stat_get "$d/mnt" read_requests)" -v n="$SMALL_N" 'BEGIN { printf "%.2f", (b - a) / n }')
		l=$(awk -v a="$l" -v b="$(stat_get "$d/mnt" lookup_readaheads)" -v n="$SMALL_N" 'BEGIN { printf "%.2f", (b - a) / n }')
		row "round $r, $2 readers${1:+ ($1)}${hot:+, hot}" "$(fps "$a")" "$(fps "$b")" "$(ratio "$b" "$a")" "READ/f $q, LOOKUP-ra/f $l"
		as+=("$a") bs+=("$b") rs+=("$(ratio "$b" "$a")")
	done
	sfs_umount "$d/mnt"
	S_DIRECT=$(median "${as[@]}") S_FUSE=$(median "${bs[@]}") S_RATIO=$(median "${rs[@]}")
}

bench_smallfiles() {
	local n target=">=0.75"
	hdr smallfiles "$SMALL_N files of $SMALL_KB KiB, shuffled, warm stagefs cache, page cache dropped"
	small_prepare || { failed "preparing: $(rb_why)"; return; }
	has_option passthrough && target=">=0.9"
	row "" "cache files" "mount" "ratio"
	for n in $READERS; do
		measure_small "" "$n" || { failed "$n readers: $(rb_why)"; continue; }
		row "median of $ROUNDS, $n readers" "$(fps "$S_DIRECT")" "$(fps "$S_FUSE")" "$S_RATIO"
		result "smallfiles: $n readers" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" "$target"
	done
}

# ---------------------------------------------------------------------------
# passthrough: the two above with passthrough=off vs the default

bench_passthrough() {
	local n off
	hdr passthrough "warm and smallfiles, -o passthrough=off vs the default"
	if ! has_option passthrough; then
		row "warm, smallfiles" "n/a" "" ""
		skipped "n/a: ./stagefs has no passthrough option yet"
		return
	fi
	warm_prepare || { failed "preparing: $(rb_why)"; return; }
	small_prepare || { failed "preparing: $(rb_why)"; return; }
	row "ratio to direct" "passthrough=off" "default" "default/off"
	if measure_warm "passthrough=off"; then
		off=$W_RATIO
		result "passthrough: warm, off" "$(mbs "$W_FUSE")" "$(mbs "$W_DIRECT")" "$off" ""
		if measure_warm ""; then
			row "warm ${BIG_MB}M sequential" "$off" "$W_RATIO" "$(ratio "$W_RATIO" "$off")"
			result "passthrough: warm, default" "$(mbs "$W_FUSE")" "$(mbs "$W_DIRECT")" "$W_RATIO" ">=0.9"
		else
			failed "warm, default: $(rb_why)"
		fi
	else
		failed "warm, passthrough=off: $(rb_why)"
	fi
	for n in $READERS; do
		if measure_small "passthrough=off" "$n"; then
			off=$S_RATIO
			result "passthrough: small $n rd, off$(has_option no_open && echo ' (no-open)')" \
				"$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$off" ">=0.75"
		else
			failed "smallfiles $n readers, passthrough=off: $(rb_why)"
			off=0
		fi
		if has_option no_open; then
			if measure_small "passthrough=off,no_open=off" "$n"; then
				result "passthrough: small $n rd, off + OPEN" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" ">=0.75"
			else
				failed "smallfiles $n readers, passthrough=off,no_open=off: $(rb_why)"
			fi
		fi
		if measure_small "" "$n"; then
			row "smallfiles, $n readers" "$off" "$S_RATIO" "$(ratio "$S_RATIO" "$off")"
			result "passthrough: small $n rd, default" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" ">=0.9"
		else
			failed "smallfiles $n readers, default: $(rb_why)"
		fi
	done
}

# ---------------------------------------------------------------------------
# smallhot: small files with the page cache hot

bench_smallhot() {
	local n mode label
	hdr smallhot "$SMALL_N files of $SMALL_KB KiB, shuffled, page cache hot (read once first on both sides)"
	small_prepare || { failed "preparing: $(rb_why)"; return; }
	row "" "cache files" "mount" "ratio"
	for n in $READERS; do
		for mode in "" "passthrough=off" "passthrough=off,no_open=off"; do
			case $mode in
			"") label=default ;;
			passthrough=off) label="passthrough=off" ;;
			*) has_option no_open || continue; label="daemon path + OPEN" ;;
			esac
			measure_small "$mode" "$n" hot || { failed "$n readers, $label: $(rb_why)"; continue; }
			row "median of $ROUNDS, $n rd, $label" "$(fps "$S_DIRECT")" "$(fps "$S_FUSE")" "$S_RATIO"
			result "smallhot: $n rd, $label" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" ""
		done
	done
}

# ---------------------------------------------------------------------------
# uring: FUSE over io_uring (-o uring=on) against /dev/fuse (uring=off)

bench_uring() {
	local n mode label off param=/sys/module/fuse/parameters/enable_uring orig
	hdr uring "-o uring=on vs uring=off: warm daemon path, small files"
	if ! has_option uring || [ ! -w "$param" ]; then
		row "warm, smallfiles" "n/a" "" ""
		skipped "n/a: no uring option, or no $param"
		return
	fi
	warm_prepare || { failed "preparing: $(rb_why)"; return; }
	small_prepare || { failed "preparing: $(rb_why)"; return; }
	orig=$(cat "$param")
	row "ratio to direct" "uring=off" "uring=on" "on/off"
	mode="passthrough=off,no_open=off"
	if measure_warm "$mode,uring=off"; then
		off=$W_RATIO
		if measure_warm "$mode,uring=on"; then
			row "warm ${BIG_MB}M, daemon path" "$off" "$W_RATIO" "$(ratio "$W_RATIO" "$off")"
			result "uring: warm, daemon path, on" "$(mbs "$W_FUSE")" "$(mbs "$W_DIRECT")" "$W_RATIO" ""
			result "uring: warm, daemon path, off" "" "" "$off" ""
		else
			failed "warm, uring=on: $(rb_why)"
		fi
	else
		failed "warm, uring=off: $(rb_why)"
	fi
	for n in $READERS; do
		for mode in "" "passthrough=off,no_open=off"; do
			label=${mode:+daemon path + OPEN}
			label=${label:-default}
			measure_small "${mode:+$mode,}uring=off" "$n" || { failed "$n rd, $label, off: $(rb_why)"; continue; }
			off=$S_RATIO
			measure_small "${mode:+$mode,}uring=on" "$n" || { failed "$n rd, $label, on: $(rb_why)"; continue; }
			row "small, $n rd, $label" "$off" "$S_RATIO" "$(ratio "$S_RATIO" "$off")"
			result "uring: small $n rd, $label, on" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" ""
			result "uring: small $n rd, $label, off" "" "" "$off" ""
		done
	done
	echo "$orig" >"$param"
}

# ---------------------------------------------------------------------------
# rados: cold reads through the mount vs rados bench seq

# rados_size LABEL BYTES N TARGET
rados_size() {
	local label=$1 size=$2 n=$3 target=$4 d=$WORK/rados-$1 r a b t cdir got rs=() as=() bs=() ts=() shm=/dev/shm/stagefs-bench.$$
	mkdir -p "$d/src"
	log "rados $label: writing and publishing $n files of $label"
	gen_files "$d/src" "$n" "$size" 64 || return 1
	publish_set "$d/src" "bench-$label" "$label" || { skipped "$label: stagefs publish failed"; return 0; }
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	rados_bench_bw 600 write -b "$size" -O "$size" -t "$T" --max-objects "$n" \
		--no-cleanup --run-name "rb-$label" >/dev/null || { skipped "$label: rados bench write failed"; return 0; }
	for r in $(seq "$ROUNDS"); do
		osd_restart || { skipped "$label: OSD restart failed"; return 0; }
		drop_caches
		a=$(rados_bench_bw 600 seq -t "$T" --run-name "rb-$label") || { skipped "$label: rados bench seq failed"; return 0; }
		# once with the cache on disk, once on tmpfs: the OSD and the cache
		# share this machine's one disk, a node's NVMe is not the OSDs' disk
		got=()
		for cdir in "$d/cache" "$shm"; do
			retire "$cdir"
			osd_restart || { skipped "$label: OSD restart failed"; return 0; }
			drop_caches
			sfs_mount "rados://$POOL/bench-$label" "$d/mnt" "cache_dir=$cdir,ceph_conf=$CEPH_CONF" ||
				{ skipped "$label: mount failed"; return 0; }
			got+=("$(rb bytes_per_s files -t "$T" -s "$r" "$d/mnt.list")") ||
				{ failed "$label: $(rb_why)"; sfs_umount "$d/mnt"; rm -rf "$shm"; return 0; }
			sfs_umount "$d/mnt"
			retire "$cdir"
		done
		b=${got[0]} t=${got[1]}
		row5 "round $r, $label" "$(mbs "$a")" "$(mbs "$b")" "$(mbs "$t")" "$(ratio "$b" "$a")"
		as+=("$a") bs+=("$b") ts+=("$t") rs+=("$(ratio "$b" "$a")")
	done
	rados -p "$POOL" cleanup --run-name "rb-$label" >/dev/null 2>&1
	a=$(median "${as[@]}") b=$(median "${bs[@]}") t=$(median "${ts[@]}")
	row5 "median of $ROUNDS, $label x $n, t=$T" "$(mbs "$a")" "$(mbs "$b")" "$(mbs "$t")" "$(median "${rs[@]}")"
	result "rados: cold $label, t=$T" "$(mbs "$b")" "$(mbs "$a")" "$(median "${rs[@]}")" "$target"
	result "rados: cold $label, cache on tmpfs" "$(mbs "$t")" "$(mbs "$a")" "$(ratio "$t" "$a")" "$target"
	return 0
}

bench_rados() {
	hdr rados "cold reads (empty cache, OSD restarted) vs rados bench seq, $T in flight"
	need_rados || { skipped "$RADOS_WHY"; return; }
	row5 "" "rados bench" "mount" "tmpfs cache" "ratio"
	rados_size 4M $((4 << 20)) "$R4M_N" ">=0.9"
	rados_size 128K $((128 << 10)) "$R128K_N" ">=0.8"
}

# ---------------------------------------------------------------------------
# publish: stagefs publish vs rados bench write

bench_publish() {
	local d=$WORK/publish r a b t0 ms bytes rs=() as=() bs=()
	hdr publish "$PUB_MB MiB of new data per round, 4 MiB chunks, $T in flight"
	[ -x "$(dirname "$STAGEFS")/stagefs-publish" ] || { skipped "stagefs-publish is not built"; return; }
	need_cluster || { skipped "$CLUSTER_WHY"; return; }
	row "" "rados bench" "publish" "ratio"
	for r in $(seq "$ROUNDS"); do
		rm -rf "$d" && mkdir -p "$d/src"
		# new random data each round: publish never uploads a chunk twice
		gen_files "$d/src" $((PUB_MB / 64)) $((64 << 20)) 4 || { skipped "could not write the data"; return; }
		bytes=$(du -sb "$d/src" | cut -f1)
		drop_caches
		a=$(rados_bench_bw 600 write -b 4M -t "$T" --max-objects $((PUB_MB / 4)) --run-name "pb-$r") ||
			{ skipped "rados bench write failed"; return; }
		drop_caches
		t0=$(now_ms)
		publish_set "$d/src" "bench-publish-$r" 4M || { skipped "stagefs publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
		ms=$(($(now_ms) - t0))
		b=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
		row "round $r" "$(mbs "$a")" "$(mbs "$b")" "$(ratio "$b" "$a")"
		as+=("$a") bs+=("$b") rs+=("$(ratio "$b" "$a")")
	done
	rm -rf "$d"
	a=$(median "${as[@]}") b=$(median "${bs[@]}")
	row "median of $ROUNDS" "$(mbs "$a")" "$(mbs "$b")" "$(median "${rs[@]}")"
	result "publish: 4M chunks, j=$T" "$(mbs "$b")" "$(mbs "$a")" "$(median "${rs[@]}")" ""
}

# ---------------------------------------------------------------------------
# manifest: a paged manifest mounted, walked; the builder; small-file publish

# mf_tree DIR N [SIZE]: N files (SIZE bytes of random data, default empty)
# in directories of 1000
mf_tree() {
	"$PY" - "$1" "$2" "${3:-0}" <<'PY'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    if i % 1000 == 0:
        d = os.path.join(root, "d%05d" % (i // 1000))
        os.makedirs(d, exist_ok=True)
    fd = os.open(os.path.join(d, "f%06d" % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if size:
        os.write(fd, os.urandom(size))
    os.close(fd)
PY
}

# mf_mem PID: "RssAnon RssFile Pss" in KiB
mf_mem() {
	local a f p
	a=$(awk '/^RssAnon:/ { print $2 }' "/proc/$1/status")
	f=$(awk '/^RssFile:/ { print $2 }' "/proc/$1/status")
	p=$(awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null)
	echo "${a:-0} ${f:-0} ${p:-0}"
}

# mf_per KIB N: bytes per entry
mf_per() { awk -v k="$1" -v n="$2" 'BEGIN { printf "%.1f", k * 1024 / n }'; }

bench_manifest() {
	local d=$WORK/manifest n=$MF_N ents pid base t0 ms mb b0 m1 a f p a0 out files iops fps
	hdr manifest "rados:// dataset of $n empty files; publish of $MF_PUB_N x 4 KiB, $T in flight"
	need_rados || { skipped "$RADOS_WHY"; return; }
	mkdir -p "$d/src" "$d/empty"
	log "manifest: writing $n empty files"
	mf_tree "$d/src" "$n" || { skipped "could not write the tree"; return; }
	ents=$((n + (n + 999) / 1000 + 1))

	# the publisher's peak, against one that publishes nothing
	b0=$(/usr/bin/time -f %M -o "$d/time0" "$STAGEFS" publish -q "$d/empty" "rados://$POOL/mf-empty" >/dev/null 2>&1 && cat "$d/time0") ||
		{ skipped "stagefs publish failed"; return; }
	log "manifest: publishing $n entries"
	t0=$(now_ms)
	/usr/bin/time -f %M -o "$d/time1" "$STAGEFS" publish -q -j "$T" "$d/src" "rados://$POOL/mf" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "stagefs publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
	ms=$(($(now_ms) - t0))
	m1=$(tail -1 "$d/time1")
	row "" "value" "" ""
	row "publish $n entries" "$((ms / 1000)) s" "" ""
	row "publisher peak RSS / entry" "$(mf_per $((m1 - b0)) "$ents") B" "" "" "($((m1 / 1024)) MiB peak, $((b0 / 1024)) MiB with no entries)"
	result "manifest: publisher peak per entry" "$(mf_per $((m1 - b0)) "$ents") B" "150 B" \
		"$(awk -v a="$(mf_per $((m1 - b0)) "$ents")" 'BEGIN { printf "%.2f", a / 150 }')" "<1.01"

	# a daemon with a one-file dataset: what the daemon costs without entries
	sfs_mount "rados://$POOL/probe" "$d/mnt0" "cache_dir=$d/cache0,ceph_conf=$CEPH_CONF" || { skipped "mount failed"; return; }
	read -r a0 _ _ <<<"$(mf_mem "${MNT_PID[$d/mnt0]}")"

	sfs_mount "rados://$POOL/mf" "$d/mnt" "cache_dir=$d/cache,ceph_conf=$CEPH_CONF" || { skipped "mount failed"; return; }
	row "first mount (manifest copied)" "$MOUNT_MS ms" "" "" "($(du -k "$d"/cache/manifests/* | awk '{ s += $1 } END { printf "%.0f", s / 1024 }') MiB manifest)"
	sfs_umount "$d/mnt"
	drop_caches
	sfs_mount "rados://$POOL/mf" "$d/mnt" "cache_dir=$d/cache,ceph_conf=$CEPH_CONF" || { skipped "mount failed"; return; }
	pid=${MNT_PID[$d/mnt]}
	row "mount again (copy mapped, cold)" "$MOUNT_MS ms" "" ""
	result "manifest: mount, $n entries" "$MOUNT_MS ms" "1000 ms" "$(ratio "$MOUNT_MS" 1000)" "<1"
	read -r a f p <<<"$(mf_mem "$pid")"
	row "after mount: anon / entry" "$(mf_per $((a - a0)) "$ents") B" "" "" "(RssAnon $((a / 1024)) MiB, one-file daemon $((a0 / 1024)) MiB; RssFile $((f / 1024)) MiB, Pss $((p / 1024)) MiB)"
	t0=$(now_ms)
	files=$(find "$d/mnt" | wc -l)
	ms=$(($(now_ms) - t0))
	[ "$files" = "$ents" ] || { failed "find listed $files entries, not $ents"; sfs_umount "$d/mnt"; sfs_umount "$d/mnt0"; return; }
	read -r a f p <<<"$(mf_mem "$pid")"
	row "find, $files entries" "$ms ms" "" ""
	row "after find: anon / entry" "$(mf_per $((a - a0)) "$ents") B" "" "" "(RssAnon $((a / 1024)) MiB; RssFile $((f / 1024)) MiB: the manifest paged in, shared, reclaimable)"
	result "manifest: daemon anon per entry after find" "$(mf_per $((a - a0)) "$ents") B" "30 B" \
		"$(awk -v a="$(mf_per $((a - a0)) "$ents")" 'BEGIN { printf "%.2f", a / 30 }')" "<1.01"
	sfs_umount "$d/mnt"
	sfs_umount "$d/mnt0"
	retire "$d/src" "$d/cache" "$d/cache0"

	# small unique files: publish files/s against rados bench objects/s
	mkdir -p "$d/small"
	log "manifest: writing $MF_PUB_N unique 4 KiB files"
	mf_tree "$d/small" "$MF_PUB_N" 4096 || { skipped "could not write the small files"; return; }
	cat "$d"/small/*/* >/dev/null 2>&1 || find "$d/small" -type f -exec cat {} + >/dev/null
	out=$(rados bench -p "$POOL" 20 write -b 4096 -t "$T" --run-name mf-bench 2>&1) ||
		{ skipped "rados bench write failed"; return; }
	iops=$(printf '%s\n' "$out" | awk -F: '/^Average IOPS/ { gsub(/ /, "", $2); print $2 }')
	rados -p "$POOL" cleanup --run-name mf-bench >/dev/null 2>&1
	t0=$(now_ms)
	"$STAGEFS" publish -q -j "$T" "$d/small" "rados://$POOL/mf-small" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "stagefs publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
	ms=$(($(now_ms) - t0))
	fps=$(awk -v n="$MF_PUB_N" -v ms="$ms" 'BEGIN { printf "%.0f", n * 1000 / (ms ? ms : 1) }')
	row "" "rados bench" "publish" "ratio"
	row "4 KiB objects / files per s" "$iops" "$fps" "$(ratio "$fps" "$iops")"
	result "manifest: publish 4K files, j=$T" "$(fps "$fps")" "$(fps "$iops")" "$(ratio "$fps" "$iops")" ">=0.8"
	retire "$d"
}

# ---------------------------------------------------------------------------
# index: start-up with many cached chunks

# chunk_accepted BYTES: does this stagefs take chunk_size=BYTES?  (It fails
# later, on the missing mount point, unless the value itself is refused.)
chunk_accepted() {
	local out
	out=$("$STAGEFS" -f -o "chunk_size=$1,cache_dir=$WORK/nonexistent" dir:///nonexistent \
		"$WORK/nonexistent-mnt" 2>&1)
	case $out in *chunk_size*) return 1 ;; esac
	return 0
}

bench_index() {
	local d=$WORK/index cs=$((IDX_CHUNK_KB * 1024)) want=$IDX_CHUNKS n maxb free files fsz i r t0 loaded lms=() wms=() lm wm est
	if ! chunk_accepted "$cs"; then
		printf '  note: this stagefs refuses chunk_size=%s KiB; using 64 KiB\n' "$IDX_CHUNK_KB"
		cs=65536
	fi
	hdr index "daemon start-up with $IDX_CHUNKS cached chunks ($((cs >> 10)) KiB chunks, dir://)"
	free=$(df -B1 --output=avail "$WORK" | tail -1)
	maxb=$(awk -v g="$IDX_MAX_GB" -v f="$free" 'BEGIN { m = g * 1073741824; if (f * 0.4 < m) m = f * 0.4; printf "%.0f", m }')
	n=$want
	[ $((n * cs)) -le "$maxb" ] || n=$((maxb / cs))
	[ "$n" -ge 1000 ] || { skipped "not enough free disk for a useful index"; return; }
	# source: sparse files (zeros read fast), at least one per filling reader
	mkdir -p "$d/src"
	fsz=$(((n * cs / IDX_READERS + cs - 1) / cs * cs))
	[ "$fsz" -le $((1 << 30)) ] || fsz=$((1 << 30))
	files=$(((n * cs + fsz - 1) / fsz))
	for i in $(seq "$files"); do
		truncate -s $((i < files ? fsz : n * cs - (files - 1) * fsz)) "$d/src/f$i"
	done
	log "index: filling $n chunks ($((n * cs >> 20)) MiB in $files files) through the mount, $IDX_READERS readers"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache,chunk_size=$cs,cache_sync=no" ||
		{ skipped "mount failed"; return; }
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	t0=$(now_ms)
	rb bytes_per_s files -t "$IDX_READERS" -s 0 "$d/mnt.list" >/dev/null || { failed "filling the cache: $(rb_why)"; sfs_umount "$d/mnt"; return; }
	loaded=$(stat_get "$d/mnt" cache_chunks)
	log "index: $loaded chunks cached in $(($(now_ms) - t0)) ms"
	sfs_umount "$d/mnt"
	row "" "cache_load_ms" "ready (ms)" "chunks"
	for r in $(seq "$ROUNDS"); do
		drop_caches
		sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache,chunk_size=$cs" || { skipped "remount failed"; return; }
		lm=$(stat_get "$d/mnt" cache_load_ms) wm=$MOUNT_MS
		loaded=$(stat_get "$d/mnt" cache_loaded_chunks)
		sfs_umount "$d/mnt"
		row "round $r" "$lm" "$wm" "$loaded"
		lms+=("$lm") wms+=("$wm")
	done
	rm -rf "$d"
	lm=$(median "${lms[@]}") wm=$(median "${wms[@]}")
	row "median of $ROUNDS" "$lm" "$wm" "$loaded"
	if [ "$loaded" -lt 1000000 ]; then
		# the fixed part (exec, FUSE mount) stays; the index load scales
		est=$(awk -v w="$wm" -v l="$lm" -v n="$loaded" 'BEGIN { printf "%.0f", w + l * (1000000 / n - 1) }')
		row "linear estimate for 1,000,000" "$(awk -v l="$lm" -v n="$loaded" 'BEGIN { printf "%.0f", l * 1000000 / n }')" "$est" "1000000"
		result "index: ready, $loaded chunks" "${wm} ms" "" "$(awk -v w="$wm" 'BEGIN { printf "%.2f", w / 1000 }')" ""
		result "index: ready, 1M chunks (est.)" "${est} ms" "" "$(awk -v w="$est" 'BEGIN { printf "%.2f", w / 1000 }')" "<2"
	else
		result "index: ready, $loaded chunks" "${wm} ms (load ${lm})" "" "$(awk -v w="$wm" 'BEGIN { printf "%.2f", w / 1000 }')" "<2"
	fi
}

# ---------------------------------------------------------------------------
# warmup: stagefs warmup vs rados bench seq and cp -r of a cold mount

bench_warmup() {
	local d=$WORK/warmup r a b c t w t0 ms bytes sbytes=0 src mopts base wargs shm=/dev/shm/stagefs-bench.$$
	local small_n=2000 small_size=$((110 << 10))	# the dataset's small files, and the baseline's
	local rs=() cs=() bs=() as=() ts=() ws=()
	hdr warmup "stagefs warmup -t $T of a cold mount vs rados bench seq -t $T and cp -r"
	[ -x "$(dirname "$STAGEFS")/stagefs-warmup" ] || { skipped "stagefs-warmup is not built yet"; return; }
	mkdir -p "$d/src"
	gen_files "$d/src" $((R4M_N / 2)) $((4 << 20)) 16 || { skipped "could not write the data"; return; }
	gen_files "$d/src/small" "$small_n" "$small_size" 20 || { skipped "could not write the data"; return; }
	bytes=$(du -sb --apparent-size "$d/src" | cut -f1)
	if need_rados; then
		publish_set "$d/src" bench-warmup 4M || { skipped "stagefs publish failed"; return; }
		src=rados://$POOL/bench-warmup mopts="ceph_conf=$CEPH_CONF" base="rados bench"
		# The baseline reads objects of the same sizes: one run of
		# 4 MiB objects and one of 110 KiB ones.
		sbytes=$(du -sb --apparent-size "$d/src/small" | cut -f1)
		rados_bench_bw 600 write -b 4M -t "$T" --max-objects $(((bytes - sbytes) >> 22)) --no-cleanup --run-name wb >/dev/null &&
			rados_bench_bw 600 write -b "$small_size" -t "$T" --max-objects "$small_n" --no-cleanup --run-name wbs >/dev/null ||
			{ skipped "rados bench write failed"; return; }
	else
		printf '  note: %s; warming a dir:// source instead, baseline = reading the source\n' "$RADOS_WHY"
		src=dir://$d/src mopts="" base="source read"
		list_files "$d/src" "$d/src" "$d/src.list"
	fi
	cold() {	# a cold start: empty cache, cold OSD, no page cache
		retire "$d/cache" "$d/cp" "$shm"
		[ -z "$CLUSTER_DIR" ] || [ "$base" != "rados bench" ] || osd_restart
		drop_caches
	}
	baseline() {
		if [ "$base" = "rados bench" ]; then
			local big small
			big=$(rados_bench_bw 600 seq -t "$T" --run-name wb) &&
				small=$(rados_bench_bw 600 seq -t "$T" --run-name wbs) || return 1
			# the bytes of both over the time both took
			awk -v b="$((bytes - sbytes))" -v s="$sbytes" -v bb="$big" -v sb="$small" \
				'BEGIN { printf "%.0f\n", (b + s) / (b / bb + s / sb) }'
		else
			rb bytes_per_s files -t "$T" -s 0 "$d/src.list"
		fi
	}
	warmup() {	# warmup CACHE_DIR: sets WU (bytes/s)
		sfs_mount "$src" "$d/mnt" "cache_dir=$1${mopts:+,$mopts}" || return 1
		t0=$(now_ms)
		# shellcheck disable=SC2086
		"$STAGEFS" warmup $wargs ${BENCH_WARMUP_ARGS:-} "$d/mnt" >"$WORK/log/warmup.$r.log" 2>&1 ||
			{ echo "stagefs warmup failed: $(tail -1 "$WORK/log/warmup.$r.log")" >"$WORK/log/rb.err"; sfs_umount "$d/mnt"; return 1; }
		ms=$(($(now_ms) - t0))
		sfs_umount "$d/mnt"
		WU=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
	}
	wargs=-q
	"$STAGEFS" warmup --help 2>&1 | grep -c -- '--threads' >/dev/null && wargs="-q -t $T"
	# A warmup reads every byte from the source *and* writes it to the
	# cache.  Here the OSD and the cache share one disk, so the second
	# baseline is the source read with the same bytes written to the cache
	# disk at the same time (4 dd, O_DIRECT): about the most this machine
# allows.
	# The last column has the cache on tmpfs, as if on a device of its own.
	row "" "$base" "+cache write" "cp -r"
	row "" "warmup" "warmup, tmpfs" ""
	for r in $(seq "$ROUNDS"); do
		cold
		a=$(baseline) || { skipped "$base failed: $(rb_why)"; return; }
		cold
		mkdir -p "$d/cache"
		t0=$(now_ms)
		for w in 0 1 2 3; do	# 4 writers: a queue depth like the engine's
			dd if=/dev/zero of="$d/cache/dd$w" bs=4M count=$((bytes >> 24)) oflag=direct status=none &
		done
		baseline >/dev/null || { wait; skipped "$base failed: $(rb_why)"; return; }
		wait
		ms=$(($(now_ms) - t0))
		w=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
		cold
		sfs_mount "$src" "$d/mnt" "cache_dir=$d/cache${mopts:+,$mopts}" || { skipped "mount failed"; return; }
		t0=$(now_ms)
		cp -r "$d/mnt/." "$d/cp" || { skipped "cp -r failed"; sfs_umount "$d/mnt"; return; }
		ms=$(($(now_ms) - t0))
		c=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
		sfs_umount "$d/mnt"
		cold
		warmup "$d/cache" || { skipped "$(rb_why)"; return; }
		b=$WU
		cold
		warmup "$shm" || { skipped "$(rb_why)"; rm -rf "$shm"; return; }
		t=$WU
		rm -rf "$shm"
		row "round $r" "$(mbs "$a")" "$(mbs "$w")" "$(mbs "$c")"
		row "" "$(mbs "$b")" "$(mbs "$t")" ""
		as+=("$a") ws+=("$w") cs+=("$c") bs+=("$b") ts+=("$t") rs+=("$(ratio "$b" "$a")")
	done
	rm -rf "$d/cp" "$d/cache"
	[ "$base" != "rados bench" ] || {
		rados -p "$POOL" cleanup --run-name wb >/dev/null 2>&1
		rados -p "$POOL" cleanup --run-name wbs >/dev/null 2>&1
	}
	a=$(median "${as[@]}") w=$(median "${ws[@]}") c=$(median "${cs[@]}") b=$(median "${bs[@]}") t=$(median "${ts[@]}")
	row "median of $ROUNDS" "$(mbs "$a")" "$(mbs "$w")" "$(mbs "$c")"
	row "" "$(mbs "$b")" "$(mbs "$t")" ""
	result "warmup vs $base" "$(mbs "$b")" "$(mbs "$a")" "$(median "${rs[@]}")" ">=0.95"
	result "warmup vs $base + cache write" "$(mbs "$b")" "$(mbs "$w")" "$(ratio "$b" "$w")" ""
	result "warmup, cache on tmpfs, vs $base" "$(mbs "$t")" "$(mbs "$a")" "$(ratio "$t" "$a")" ">=0.95"
	result "warmup vs cp -r" "$(mbs "$b")" "$(mbs "$c")" "$(ratio "$b" "$c")" ""
}

# ---------------------------------------------------------------------------
# hints: shuffled epochs over a dataset larger than the cache

# hint_order MNT ORDERFILE: announce this session's read order to the daemon
hint_order() { "$STAGEFS" warmup -q --order "$2" "$1"; }

bench_hints() {
	local d=$WORK/hints n=$((SMALL_N / 2)) hint=${BENCH_HINT_CMD:-} r e a b ta tb rs=() as=() bs=() limit modes mode t0 ms hf
	hdr hints "2 shuffled epochs over a dataset 2x the cache (page cache dropped before each), 4 readers: with order hints / without"
	if [ -z "$hint" ] && "$STAGEFS" warmup --help 2>&1 | grep -c -- '--order' >/dev/null; then
		hint=hint_order
	fi
	if [ -z "$hint" ]; then
		if "$STAGEFS" --help 2>&1 | grep -ci hint >/dev/null; then
			skipped "stagefs mentions hints but bench.sh does not know how to give one: set BENCH_HINT_CMD='CMD' (run as CMD MNT ORDERFILE)"
		else
			skipped "stagefs has no order-hint interface yet (set BENCH_HINT_CMD to try one)"
		fi
		return
	fi
	mkdir -p "$d/src"
	gen_files "$d/src" "$n" $((SMALL_KB * 1024)) || { skipped "could not write the data"; return; }
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	limit=$((n * SMALL_KB * 1024 / 2))
	# hints pay where a miss costs a round trip to remote storage: read the
	# dataset from Ceph where there is one (a dir:// source on the local
	# disk is nearly as fast as the cache, so hints can gain little there)
	local src=dir://$d/src mopts=""
	if need_rados && publish_set "$d/src" bench-hints 4M; then
		src=rados://$POOL/bench-hints mopts=",ceph_conf=$CEPH_CONF"
	else
		printf '  note: no rados:// source (%s): hinting a dir:// source\n' "${RADOS_WHY:-publish failed}"
	fi
	printf '  source %s\n' "$src"
	# two kinds of reader: flat out (the input pipeline alone), and one
	# that spends a training step after every sample (sleeping, as a job
	# waits on its GPU): there the question is how long it stalls on input
	local step steps="0 $HINT_STEP_US" stall sa sb out where wheres=local what
	# and, where the source is Ceph, once more with a remote cluster's
	# latency put between the daemon and the local OSD: that is where a
	# miss costs what it costs on a real cluster (order hints exist for it)
	if [ "${src#rados://}" != "$src" ] && [ "$HINT_REMOTE_MS" != 0 ]; then
		wheres="local remote"
	fi
	for where in $wheres; do
		MOUNT_CEPH_ARGS= what=""
		if [ $where = remote ]; then
			MOUNT_CEPH_ARGS="--ms_inject_delay_type=osd --ms_inject_delay_probability=1 --ms_inject_delay_max=$(awk -v m="$HINT_REMOTE_MS" 'BEGIN { print m / 1000 }')"
			what=", OSD replies delayed <=${HINT_REMOTE_MS} ms"
			printf '  remote: librados %s\n' "$MOUNT_CEPH_ARGS"
		fi
		for step in $steps; do
			row "step ${step} us/sample$what" "no hints" "hints" "ratio"
			as=() bs=() rs=()
			for r in $(seq "$ROUNDS"); do
				# alternate which goes first, so a drift in the machine's load
				# does not always favour the same side
				modes="plain hinted"
				[ $((r % 2)) = 1 ] || modes="hinted plain"
				for mode in $modes; do
					retire "$d/cache"
					drop_caches
					sfs_mount "$src" "$d/mnt" "cache_dir=$d/cache,cache_size=$limit$mopts" || { skipped "mount failed"; return; }
					stall=0 ms=0
					for e in 1 2; do
						# the dataset is meant to be larger than the node's
						# memory too: epoch 2 must not come from the page cache
						[ $e = 1 ] || drop_caches
						"$RB" files -P -s $((r * 10 + e)) "$d/mnt.list" >"$d/order.$e"
						t0=$(now_ms)
						if [ $mode = hinted ]; then
							$hint "$d/mnt" "$d/order.$e" >>"$WORK/log/hint.log" 2>&1 || { skipped "BENCH_HINT_CMD failed"; sfs_umount "$d/mnt"; return; }
						fi
						rb files_per_s files -t 4 -c "$step" -s $((r * 10 + e)) "$d/mnt.list" >/dev/null ||
							{ failed "$(rb_why)"; sfs_umount "$d/mnt"; return; }
						ms=$((ms + $(now_ms) - t0))
						out=$(cat "$WORK/log/rb.json")
						stall=$(awk -v a="$stall" -v b="$(jget "$out" io_seconds)" 'BEGIN { printf "%.1f", a + b }')
					done
					[ $mode = plain ] || hf=$(stat_get "$d/mnt" hint_fetches)
					sfs_umount "$d/mnt"
					if [ $mode = plain ]; then
						ta=$((2 * n * 1000 / (ms ? ms : 1))) sa=$stall
					else
						tb=$((2 * n * 1000 / (ms ? ms : 1))) sb=$stall
					fi
				done
				row "round $r (hint_fetches ${hf:-?})" "$(fps "$ta")" "$(fps "$tb")" "$(ratio "$tb" "$ta")"
				row "  reader stall, s (4 readers)" "$sa" "$sb" ""
				as+=("$ta") bs+=("$tb") rs+=("$(ratio "$tb" "$ta")")
			done
			a=$(median "${as[@]}") b=$(median "${bs[@]}")
			row "median of $ROUNDS" "$(fps "$a")" "$(fps "$b")" "$(median "${rs[@]}")"
			if [ "$step" = 0 ]; then
				result "hints ($where): 2 epochs, flat out" "$(fps "$b")" "$(fps "$a")" "$(median "${rs[@]}")" ">=2"
			else
				result "hints ($where): 2 epochs, ${step}us step" "$(fps "$b")" "$(fps "$a")" "$(median "${rs[@]}")" ">=2"
			fi
		done
	done
	MOUNT_CEPH_ARGS=
	rm -rf "$d"
}

# ---------------------------------------------------------------------------
# epoch: a cold first epoch of a plain shuffled reader, staged or not

# epoch_run MODE ROUND: one cold epoch (MODE stage, off or warmup) over
# rados://$POOL/bench-epoch; sets EP_MS (wall, warmup included) and EP_NOTE
epoch_run() {
	local mode=$1 r=$2 d=$WORK/epoch opts t0 out
	opts="cache_dir=$d/cache,ceph_conf=$CEPH_CONF"
	[ "$mode" = stage ] || opts+=",epoch_staging=off"
	retire "$d/cache"
	osd_restart || { EP_WHY="OSD restart failed"; return 1; }
	drop_caches
	sfs_mount "rados://$POOL/bench-epoch" "$d/mnt" "$opts" || { EP_WHY="mount failed"; return 1; }
	t0=$(now_ms)
	if [ "$mode" = warmup ]; then
		"$STAGEFS" warmup -q "$d/mnt" >>"$WORK/log/epoch-warmup.log" 2>&1 ||
			{ EP_WHY="stagefs warmup failed"; sfs_umount "$d/mnt"; return 1; }
	fi
	out=$("$PY" "$REPO/tools/bench/epoch_reader.py" "$d/mnt" --workers "$EPOCH_WORKERS" --seed "$r" \
		--compute "$(awk -v s="$EPOCH_STEP_MS" 'BEGIN { print s / 1000 }')" 2>"$WORK/log/epoch.err") ||
		{ EP_WHY="the reader failed: $(tail -1 "$WORK/log/epoch.err")"; sfs_umount "$d/mnt"; return 1; }
	EP_MS=$(($(now_ms) - t0))
	[ "$(jget "$out" files)" = "$EPOCH_N" ] || { EP_WHY="the reader read $(jget "$out" files) files"; sfs_umount "$d/mnt"; return 1; }
	EP_NOTE="demand $(stat_get "$d/mnt" demand_fetches), staged $(stat_get "$d/mnt" stage_fetches), warmup $(stat_get "$d/mnt" warmup_fetches), stall $(stat_get "$d/mnt" stall_ms) ms"
	sfs_umount "$d/mnt"
}

bench_epoch() {
	local d=$WORK/epoch r mode where wheres=local what ms_s ms_o ms_w rs=() rw=() ss=() os=() ws=()
	EPOCH_N=${BENCH_EPOCH_N:-5000} EPOCH_WORKERS=${BENCH_EPOCH_WORKERS:-4}
	EPOCH_STEP_MS=${BENCH_EPOCH_STEP_MS:-0}
	local kb=${BENCH_EPOCH_KB:-110} remote=${BENCH_EPOCH_REMOTE_MS:-0}
	[ "${BENCH_QUICK:-0}" = 1 ] && [ -z "${BENCH_EPOCH_N:-}" ] && EPOCH_N=1000
	hdr epoch "one cold shuffled epoch, $EPOCH_N x $kb KiB in Ceph, $EPOCH_WORKERS reader processes, step $EPOCH_STEP_MS ms: staging on / off / warmup-then-epoch"
	need_rados || { skipped "$RADOS_WHY"; return; }
	has_option epoch_staging || { skipped "this stagefs has no epoch_staging"; return; }
	mkdir -p "$d/src"
	log "epoch: writing and publishing $EPOCH_N files of $kb KiB"
	gen_files "$d/src" "$EPOCH_N" $((kb * 1024)) || { skipped "could not write the data"; return; }
	publish_set "$d/src" bench-epoch 4M || { skipped "stagefs publish failed"; return; }
	rm -rf "$d/src"
	[ "$remote" = 0 ] || wheres="local remote"
	for where in $wheres; do
		MOUNT_CEPH_ARGS= what=""
		if [ "$where" = remote ]; then
			MOUNT_CEPH_ARGS="--ms_inject_delay_type=osd --ms_inject_delay_probability=1 --ms_inject_delay_max=$(awk -v m="$remote" 'BEGIN { print m / 1000 }')"
			what=", OSD replies delayed <=${remote} ms"
		fi
		row5 "epoch seconds$what" "staging on" "staging off" "warmup+epoch" ""
		rs=() rw=() ss=() os=() ws=()
		for r in $(seq "$ROUNDS"); do
			for mode in stage off warmup; do
				epoch_run "$mode" "$r" || { failed "$mode: $EP_WHY"; MOUNT_CEPH_ARGS=; return; }
				printf '  round %s %-7s %6.2f s  (%s)\n' "$r" "$mode" "$(awk -v m="$EP_MS" 'BEGIN { print m / 1000 }')" "$EP_NOTE"
				case $mode in
				stage) ms_s=$EP_MS ;;
				off) ms_o=$EP_MS ;;
				warmup) ms_w=$EP_MS ;;
				esac
			done
			ss+=("$ms_s") os+=("$ms_o") ws+=("$ms_w")
			rs+=("$(ratio "$ms_o" "$ms_s")") rw+=("$(ratio "$ms_s" "$ms_w")")
		done
		ms_s=$(median "${ss[@]}") ms_o=$(median "${os[@]}") ms_w=$(median "${ws[@]}")
		row5 "median of $ROUNDS" "$(awk -v m="$ms_s" 'BEGIN { printf "%.2f s", m / 1000 }')" \
			"$(awk -v m="$ms_o" 'BEGIN { printf "%.2f s", m / 1000 }')" \
			"$(awk -v m="$ms_w" 'BEGIN { printf "%.2f s", m / 1000 }')" ""
		row "speed-up: off / on (median)" "" "" "$(median "${rs[@]}")"
		row "cost: on / warmup+epoch (median)" "" "" "$(median "${rw[@]}")"
		result "epoch ($where): staging off / on" "$(awk -v m="$ms_s" 'BEGIN { printf "%.2f s", m / 1000 }')" \
			"$(awk -v m="$ms_o" 'BEGIN { printf "%.2f s", m / 1000 }')" "$(median "${rs[@]}")" ">=1"
		result "epoch ($where): on / warmup+epoch" "$(awk -v m="$ms_s" 'BEGIN { printf "%.2f s", m / 1000 }')" \
			"$(awk -v m="$ms_w" 'BEGIN { printf "%.2f s", m / 1000 }')" "$(median "${rw[@]}")" "<1.1"
	done
	MOUNT_CEPH_ARGS=
	rm -rf "$d"
}

# ---------------------------------------------------------------------------
# coldsmall: many tiny files read once, cold, through dir:// / directly

# cold_run WHERE ROUND: one cold shuffled read of $WORK/cold/src, directly
# (WHERE=direct) or through a fresh dir:// mount (WHERE=on|off: epoch_staging).
# Sets CR_FPS and CR_NOTE; returns 1 with CR_WHY on a failure.
cold_run() {
	local where=$1 r=$2 d=$WORK/cold root out secs
	root=$d/src
	if [ "$where" != direct ]; then
		retire "$d/cache"
		drop_caches
		sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache,epoch_staging=$where" ||
			{ CR_WHY="mount failed"; return 1; }
		root=$d/mnt
		# the first scan, not timed: the listing below waits for it
	fi
	drop_caches
	out=$("$PY" "$REPO/tools/bench/epoch_reader.py" "$root" --workers "$EPOCH_WORKERS" --seed "$r" 2>"$WORK/log/cold.err") ||
		{ CR_WHY="the reader failed: $(tail -1 "$WORK/log/cold.err")"; [ "$where" = direct ] || sfs_umount "$d/mnt"; return 1; }
	[ "$(jget "$out" files)" = "$COLD_N" ] || { CR_WHY="the reader read $(jget "$out" files) files"; [ "$where" = direct ] || sfs_umount "$d/mnt"; return 1; }
	secs=$(jget "$out" seconds)
	CR_FPS=$(awk -v n="$COLD_N" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')
	CR_NOTE="$secs s"
	if [ "$where" != direct ]; then
		CR_NOTE+=", demand $(stat_get "$d/mnt" demand_fetches), staged $(stat_get "$d/mnt" stage_fetches)"
		sfs_umount "$d/mnt"
	fi
}

bench_coldsmall() {
	local d=$WORK/cold r where fd=() fon=() foff=() ron=() roff=()
	COLD_N=${BENCH_COLD_N:-200000} EPOCH_WORKERS=${BENCH_EPOCH_WORKERS:-4}
	[ "${BENCH_QUICK:-0}" = 1 ] && [ -z "${BENCH_COLD_N:-}" ] && COLD_N=20000
	hdr coldsmall "$COLD_N tiny files (10-20 B) read once, cold, shuffled, $EPOCH_WORKERS readers: dir:// with epoch staging on / off / the source directly (files/s)"
	has_option epoch_staging || { skipped "this stagefs has no epoch_staging"; return; }
	log "coldsmall: writing $COLD_N files"
	"$PY" "$REPO/tests/genscale.py" "$d/src" --files "$COLD_N" >/dev/null ||
		{ skipped "could not write the data"; return; }
	row5 "files/s" "staging on" "staging off" "source" ""
	for r in $(seq "$ROUNDS"); do
		for where in direct on off; do
			cold_run "$where" "$r" || { failed "$where: $CR_WHY"; return; }
			printf '  round %s %-7s %8s f/s  (%s)\n' "$r" "$where" "$CR_FPS" "$CR_NOTE"
			case $where in
			direct) fd+=("$CR_FPS") ;;
			on) fon+=("$CR_FPS") ;;
			off) foff+=("$CR_FPS") ;;
			esac
		done
		ron+=("$(ratio "${fon[-1]}" "${fd[-1]}")") roff+=("$(ratio "${foff[-1]}" "${fd[-1]}")")
	done
	row5 "median of $ROUNDS" "$(fps "$(median "${fon[@]}")")" "$(fps "$(median "${foff[@]}")")" "$(fps "$(median "${fd[@]}")")" ""
	row "staging on / source (median)" "" "" "$(median "${ron[@]}")"
	row "staging off / source (median)" "" "" "$(median "${roff[@]}")"
	result "coldsmall: dir://, staging on / source" "$(fps "$(median "${fon[@]}")")" "$(fps "$(median "${fd[@]}")")" "$(median "${ron[@]}")" ""
	result "coldsmall: dir://, staging off / source" "$(fps "$(median "${foff[@]}")")" "$(fps "$(median "${fd[@]}")")" "$(median "${roff[@]}")" ""
	retire "$d"
}

# ---------------------------------------------------------------------------
# gpu: libstagefs into GPU memory, against the ceilings of the same run

bench_gpu() {
	local d=$WORK/warm out rc feed disk h2d naive lo
	hdr gpu "$BIG_MB MiB file, warm stagefs cache, into GPU $GPU_DEV: sfs_read_device / min(disk, pinned H2D), / read() + cudaMemcpy"
	if [ ! -x "$GB" ]; then
		if ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1; then
			skipped "tools/bench/gpubench is not built (configure found no CUDA toolkit)"
		else
			skipped "no GPU"
		fi
		return
	fi
	"$GB" -p -d "$GPU_DEV" >/dev/null || { skipped "no GPU"; return; }
	warm_prepare || { failed "preparing: $(rb_why)"; return; }
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache" || { failed "mount failed"; return; }
	out=$("$GB" -d "$GPU_DEV" -b "$GPU_REQ" -r "$ROUNDS" -D "$d/mnt/big" 2>"$WORK/log/gpubench.err")
	rc=$?
	sfs_umount "$d/mnt"
	case $rc in
	0) ;;
	77) skipped "no GPU"; return ;;
	*) failed "gpubench: $(tail -1 "$WORK/log/gpubench.err")"; return ;;
	esac
	sed -n 's/^gpubench: /  /p' "$WORK/log/gpubench.err"
	feed=$(jget "$out" feed_bytes_per_s) disk=$(jget "$out" disk_bytes_per_s)
	h2d=$(jget "$out" h2d_bytes_per_s) naive=$(jget "$out" naive_bytes_per_s)
	lo=$(awk -v a="$disk" -v b="$h2d" 'BEGIN { print (a + 0 < b + 0) ? a : b }')
	row "" "feed" "baseline" "ratio"
	row "vs min(disk, pinned H2D) (median)" "$(mbs "$feed")" "$(mbs "$lo")" "$(jget "$out" feed_vs_min_disk_h2d)"
	row "vs read() + cudaMemcpy (median)" "$(mbs "$feed")" "$(mbs "$naive")" "$(jget "$out" feed_vs_naive)"
	row "source: $(sed -n 's/.*"via": "\([a-z_]*\)".*/\1/p' <<<"$out"), cuFile bytes $(jget "$out" cufile_bytes)" "" "" ""
	result "gpu: feed / min(disk, H2D)" "$(mbs "$feed")" "$(mbs "$lo")" \
		"$(jget "$out" feed_vs_min_disk_h2d)" ">=0.9"
	result "gpu: feed / read()+cudaMemcpy" "$(mbs "$feed")" "$(mbs "$naive")" \
		"$(jget "$out" feed_vs_naive)" ">=2"
}

# ---------------------------------------------------------------------------
# au: simulated accelerators kept busy (MLPerf Storage style, tools/bench/aubench)

# Per workload: the arguments aubench gets (search and gen), and the size of
# one data file in bytes.  Scaled for a 2-vCPU VM (docs/benchmarks.md, "au"):
#   unet3d     samples 1/20 of 146.6 MB, batch 1 (compute per sample kept), S=2
#   resnet50   114.7 KB samples, 313 a record file, batch 40, S=4
#   cosmoflow  2.83 MB samples, batch 1, S=10
au_args() {
	case $1 in
	unet3d) echo "-b 1 -S ${BENCH_AU_S_UNET3D:-2}" ;;
	resnet50) echo "-k 313 -b 40 -S ${BENCH_AU_S_RESNET50:-4}" ;;
	cosmoflow) echo "-b 1 -S ${BENCH_AU_S_COSMOFLOW:-10}" ;;
	esac
}
au_gen_args() {
	case $1 in
	unet3d) echo "-z 20" ;;
	resnet50) echo "-k 313" ;;
	cosmoflow) echo "" ;;
	esac
}
au_file_bytes() {
	case $1 in
	unet3d) echo 7330000 ;;
	resnet50) echo $((313 * 114700)) ;;
	cosmoflow) echo 2830000 ;;
	esac
}

# stagefs's job row against the tool's own figures (tools/bench/aubench_agree.py):
# au_row MNT JOB prints the row before a trial; au_agree MNT JOB BEFORE
# TRIAL prints the comparison after it (status 1: they disagree).
au_row() { "$PY" "$REPO/tools/bench/aubench_agree.py" row "$1" "$2" 2>>"$WORK/log/au.log"; }
au_agree() { "$PY" "$REPO/tools/bench/aubench_agree.py" check "$@" 2>>"$WORK/log/au.log"; }

# au_cold_ceph: a cold OSD (bluestore cache dropped; restarted if that fails)
au_cold_ceph() {
	[ -n "$CLUSTER_DIR" ] || return 0
	timeout 30 ceph tell osd.0 cache drop >>"$WORK/log/au.log" 2>&1 || osd_restart
}

# Before each trial of system SYS (au_prep_SYS WORKLOAD N): make the state
# that system starts from; AU_STAGING = seconds of staging to count.
au_prep_local() { AU_STAGING=0; }
au_prep_warm() { AU_STAGING=0; }
au_prep_cold() {
	local d=$WORK/au
	AU_STAGING=0
	mountpoint -q "$d/cold" && sfs_umount "$d/cold"
	rm -rf "$d/cold-cache"
	au_cold_ceph
	drop_caches
	sfs_mount "$AU_SRC" "$d/cold" "cache_dir=$d/cold-cache$AU_MOPTS"
}
au_prep_cephfuse() {
	AU_STAGING=0
	"$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$WORK/au/cephfs" >>"$WORK/log/au.log" 2>&1
	au_cold_ceph
	drop_caches
	"$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$WORK/au/cephfs" >>"$WORK/log/au.log" 2>&1
}
au_prep_copy() {
	local d=$WORK/au t0
	au_prep_cephfuse || return 1
	rm -rf "$d/copy" && mkdir -p "$d/copy"
	drop_caches
	# the staging a user would do: cp -r from CephFS, written to disk
	t0=$(now_ms)
	cp -r "$d/cephfs/$1" "$d/copy/$1" && sync || return 1
	AU_STAGING=$(awk -v ms="$(($(now_ms) - t0))" 'BEGIN { printf "%.3f", ms / 1000 }')
}

# au_search SYS WORKLOAD DIR MNT START: aubench's search through the -H
# handshake, the system prepared before each trial; prints a row per trial.
# Sets AU_N, AU_AU, AU_MBS, AU_SPS (the result) and AU_ROW (the line for
# the result's N: tool and stagefs figures).  MNT: a stagefs mount whose
# job row to read ("" for none); each of its trials adds to AU_AGREE or
# AU_DISAGREE.
au_search() {
	local sys=$1 wl=$2 dir=$3 mnt=$4 start=$5 line n before agree job=au-$1-$2 rfd wfd pid
	local -A rows=()
	AU_N=0 AU_AU=0 AU_MBS=0 AU_SPS=0 AU_ROW=
	# shellcheck disable=SC2046
	coproc AUBC { STAGEFS_JOB=$job exec "$AUB" search -H -w "$wl" $(au_args "$wl") -e "$AU_EPOCHS" -D -L "$WORK/au/data" \
		-m "$AU_MAX_N" ${start:+-n "$start"} "$dir" 2>>"$WORK/log/aubench.err"; }
	# bash unsets AUBC when the coprocess exits: keep copies of its fds
	pid=$AUBC_PID
	if [ -z "${AUBC[0]:-}" ]; then	# it has exited already: a usage error
		printf '    %s: aubench failed: %s\n' "$sys" "$(tail -1 "$WORK/log/aubench.err")"
		return
	fi
	exec {rfd}<&"${AUBC[0]}" {wfd}>&"${AUBC[1]}"
	while IFS= read -r line <&"$rfd"; do
		printf '%s %s\n' "$sys" "$line" >>"$WORK/log/au.json"
		case $line in
		prepare*)
			n=${line#prepare }
			if "au_prep_$sys" "$wl" "$n" >>"$WORK/log/au.log" 2>&1; then
				[ -z "$mnt" ] || before=$(au_row "$mnt" "$job") || before=
				echo "go $AU_STAGING" >&"$wfd"
			else
				printf '  %s: preparing the trial failed (see log/au.log)\n' "$sys"
				echo stop >&"$wfd"
			fi
			;;
		'{"trial"'*)
			n=$(jget "$line" n)
			rows[$n]=$(printf '%-9s N=%-3s AU %-6s (epoch 1 %-6s) %5.0f MB/s  wait %6.1f s' \
				"$sys" "$n" "$(jget "$line" au)" "$(sed -n 's/.*"epoch_au": \[\([0-9.]*\).*/\1/p' <<<"$line")" \
				"$(jget "$line" mb_per_s)" "$(jget "$line" wait_s)")
			printf '    %s%s\n' "${rows[$n]}" "$(awk -v s="$(jget "$line" staging_s)" 'BEGIN { if (s > 0) printf "  (copy %.1f s)", s }')"
			if [ -n "$mnt" ]; then
				if [ -z "$before" ]; then
					agree="stagefs's row unreadable (log/au.log)"
					AU_DISAGREE=$((AU_DISAGREE + 1))
				elif agree=$(au_agree "$mnt" "$job" "$before" "$line"); then
					AU_AGREE=$((AU_AGREE + 1))
				else
					AU_DISAGREE=$((AU_DISAGREE + 1))
				fi
				printf '      %s\n' "$agree"
				rows[$n]+=$'\n'"      $agree"
			fi
			[ "$(jget "$line" errors)" = 0 ] || printf '    read errors: %s\n' "$(tail -1 "$WORK/log/aubench.err")"
			;;
		'{"result"'*)
			AU_N=$(jget "$line" n) AU_AU=$(jget "$line" au) AU_MBS=$(jget "$line" mb_per_s) AU_SPS=$(jget "$line" samples_per_s)
			[ "$(jget "$line" fail_n)" != 0 ] || AU_N=">=$AU_N"
			# none passed: show the AU of the smallest N tried (1)
			[ "$AU_N" != 0 ] || AU_AU="$(jget "$line" fail_au) at N=$(jget "$line" fail_n)"
			;;
		esac
	done
	exec {rfd}<&- {wfd}>&-
	wait "$pid" 2>/dev/null
	AU_ROW=${rows[${AU_N#>=}]:-}
}

bench_au() {
	local d=$WORK/au wl sys n start cnt mb=$AU_MB line nlocal nwarm ncold nfuse ncopy sums=() dir mnt s b w y a m p
	AU_AGREE=0 AU_DISAGREE=0
	hdr au "simulated accelerators kept busy at the pass line (tools/bench/aubench; MLPerf Storage workloads, scaled)"
	[ -x "$AUB" ] || make -C "$REPO" -s tools/bench/aubench >&2 || { skipped "tools/bench/aubench does not build"; return; }
	mkdir -p "$d/data"
	for wl in unet3d resnet50 cosmoflow; do
		cnt=$((mb * 1000000 / $(au_file_bytes "$wl")))
		log "au: writing $wl: $cnt files ($mb MB)"
		# shellcheck disable=SC2046
		"$AUB" gen -w "$wl" -N "$cnt" $(au_gen_args "$wl") "$d/data" >>"$WORK/log/au.log" ||
			{ skipped "aubench gen failed"; return; }
	done
	printf '  dataset: %s MB per workload (%s in all; %s GiB RAM), %s epochs, page cache dropped before every epoch\n' \
		"$mb" "$(du -sh "$d/data" | cut -f1)" "$(awk '/MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)" "$AU_EPOCHS"
	for wl in unet3d resnet50 cosmoflow; do
		printf '  %-9s aubench %s (gen %s), pass %s\n' "$wl" "$(au_args "$wl")" "$(au_gen_args "$wl")" \
			"$([ $wl = cosmoflow ] && echo 0.70 || echo 0.90)"
	done
	# the sources: Ceph (rados:// and CephFS) where there is one
	AU_SRC= AU_MOPTS= AU_FS=
	if need_rados; then
		log "au: publishing the dataset"
		if publish_set "$d/data" au 4M; then
			AU_SRC=rados://$POOL/au AU_MOPTS=",ceph_conf=$CEPH_CONF"
		else
			printf '  note: stagefs publish failed: no stagefs cold\n'
		fi
		if "$CLUSTER_SH" fs "$CLUSTER_DIR" >>"$WORK/log/au.log" 2>&1 &&
			"$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$d/cephfs" >>"$WORK/log/au.log" 2>&1; then
			log "au: copying the dataset into CephFS"
			if cp -r "$d/data/." "$d/cephfs/" && sync; then
				AU_FS=1
			else
				printf '  note: copying into CephFS failed: no ceph-fuse or copy-then-read\n'
			fi
		else
			printf '  note: no CephFS (%s): no ceph-fuse or copy-then-read (ceph-mds, ceph-fuse installed?)\n' \
				"$(grep -h 'error' "$WORK/log/au.log" | tail -1)"
		fi
	else
		printf '  note: %s: stagefs warm from a dir:// source; no cold, ceph-fuse or copy-then-read\n' "$RADOS_WHY"
	fi
	# the warm mount: the same source as cold, its cache filled once
	log "au: filling the warm cache"
	sfs_mount "${AU_SRC:-dir://$d/data}" "$d/warm" "cache_dir=$d/warm-cache${AU_SRC:+$AU_MOPTS}$(fill_opts)" ||
		{ failed "warm mount failed"; return; }
	list_files "$d/data" "$d/warm" "$d/warm.list"
	rb bytes_per_s files -t 8 -s 0 "$d/warm.list" >/dev/null &&
		cache_paths "$d/warm-cache" "$d/warm.list" /dev/null 2>"$WORK/log/rb.err" ||
		{ failed "filling the warm cache: $(rb_why)"; sfs_umount "$d/warm"; return; }
	sfs_umount "$d/warm"
	sfs_mount "${AU_SRC:-dir://$d/data}" "$d/warm" "cache_dir=$d/warm-cache${AU_SRC:+$AU_MOPTS}" ||
		{ failed "warm mount failed"; return; }
	# the first read after a start verifies the chunks: not timed
	rb bytes_per_s files -t 8 -s 0 "$d/warm.list" >/dev/null || { failed "warm: $(rb_why)"; sfs_umount "$d/warm"; return; }

	for wl in unet3d resnet50 cosmoflow; do
		printf '  %s:\n' "$wl"
		nlocal=0 nwarm=0 ncold=- nfuse=- ncopy=-
		start=
		for sys in local warm cold cephfuse copy; do
			case $sys in
			local) dir=$d/data mnt= ;;
			warm) dir=$d/warm mnt=$d/warm ;;
			cold) [ -n "$AU_SRC" ] || continue; dir=$d/cold mnt=$d/cold ;;
			cephfuse) [ -n "$AU_FS" ] || continue; dir=$d/cephfs mnt= ;;
			copy) [ -n "$AU_FS" ] || continue; dir=$d/copy mnt= ;;
			esac
			drop_caches
			au_search "$sys" "$wl" "$dir" "$mnt" "$start"
			printf '  %-9s largest N %-5s AU %s  %s MB/s  %s samples/s\n' "$sys" "$AU_N" "$AU_AU" "$AU_MBS" "$AU_SPS"
			sums+=("$wl|$sys|$AU_N|$AU_AU|$AU_MBS|$AU_SPS|$AU_ROW")
			case $sys in
			local) nlocal=${AU_N#>=}; start=$nlocal ;;
			warm) nwarm=${AU_N#>=} ;;
			cold) ncold=${AU_N#>=}; mountpoint -q "$d/cold" && sfs_umount "$d/cold" ;;
			cephfuse) nfuse=${AU_N#>=} ;;
			copy) ncopy=${AU_N#>=} ;;
			esac
			[ "$start" != 0 ] || start=
		done
		result "au $wl: warm / local disk (N)" "N=$nwarm" "N=$nlocal" "$(ratio "$nwarm" "$nlocal")" ">=0.9"
		[ "$ncold" = - ] || [ "$nfuse" = - ] ||
			result "au $wl: cold / ceph-fuse (N)" "N=$ncold" "N=$nfuse" "$(ratio "$ncold" "$nfuse")" ">=2"
		[ "$ncold" = - ] || [ "$ncopy" = - ] ||
			result "au $wl: cold / copy-then-read (N)" "N=$ncold" "N=$ncopy" "$(ratio "$ncold" "$ncopy")" ""
	done
	sfs_umount "$d/warm"
	[ -z "$AU_FS" ] || "$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$d/cephfs" >>"$WORK/log/au.log" 2>&1
	printf '\n  largest N at the pass line (AU, MB/s, samples/s at that N)\n'
	printf '  %-10s %-22s %-22s %-22s %-22s %-22s\n' workload "local disk" "stagefs warm" "stagefs cold" "ceph-fuse" "copy-then-read"
	for wl in unet3d resnet50 cosmoflow; do
		line=$(printf '  %-10s' "$wl")
		for sys in local warm cold cephfuse copy; do
			s=-
			for b in "${sums[@]}"; do
				IFS='|' read -r w y n a m p _ <<<"$b"
				[ "$w|$y" = "$wl|$sys" ] || continue
				if [ "$n" = 0 ]; then
					s="0 (AU ${a% at*} at ${a#* at N=})"
				else
					s=$(printf '%s (%.2f, %.0f, %.0f)' "$n" "$a" "$m" "$p")
				fi
			done
			line+=$(printf ' %-22s' "$s")
		done
		printf '%s\n' "$line"
	done
	printf '\n  at that N, stagefs'"'"'s job row against the tool (tools/bench/aubench_agree.py: bytes exact, or within 10 %% where\n'
	printf '  estimated; stall share = stall_ns / active_ns between the readers'"'"' lost and blocked shares of their active\n'
	printf '  time, plus or minus 5 points; docs/benchmarks.md):\n'
	for b in "${sums[@]}"; do
		IFS='|' read -r w y _ <<<"$b"
		line=${b#*|*|*|*|*|*|}	# the row and its comparison: two lines
		case $y in warm | cold) [ -z "$line" ] || printf '    %-9s %s\n' "$w" "$line" ;; esac
	done
	printf '  stagefs'"'"'s figures agree with the tool'"'"'s in %s of %s stagefs trials\n' "$AU_AGREE" $((AU_AGREE + AU_DISAGREE))
}

# ---------------------------------------------------------------------------
# main

# ---------------------------------------------------------------------------
# peers: a group of daemons sharing their chunks (docs/fleet.md)

bench_peers() {
	local d=$WORK/peers n=${BENCH_PEER_NODES:-4} mb=${BENCH_PEER_MB:-256}
	local link=${BENCH_PEER_LINK:-48M} delay=${BENCH_PEER_DELAY_MS:-4} chunk=${BENCH_PEER_CHUNK:-1M} cbytes
	local linkb cap port uri bytes i t0 ms t1 tind tpeer tall be bind bpeer ball pin e1 e0 wargs
	local list=
	linkb=$(numfmt --from=iec "$link") || { skipped "bad BENCH_PEER_LINK"; return; }
	cbytes=$(numfmt --from=iec "$chunk") || { skipped "bad BENCH_PEER_CHUNK"; return; }
	cap=$((linkb / n))
	hdr peers "$n nodes, $mb MiB dataset (4 MiB files, $chunk chunks), OSD replies delayed <= $delay ms, a $link/s link shared fairly ($((cap / 1000000)) MB/s a node; all of it for a node alone)"
	[ -x "$PB" ] || { skipped "tools/bench/peerbench is not built"; return; }
	need_rados || { skipped "$RADOS_WHY"; return; }
	"$STAGEFS" --help 2>&1 | grep -c -- "-o peer_listen=" >/dev/null || { skipped "this stagefs has no peer groups"; return; }
	mkdir -p "$d/src"
	gen_files "$d/src" $((mb / 4)) $((4 << 20)) 8 || { skipped "could not write the data"; return; }
	bytes=$(du -sb --apparent-size "$d/src" | cut -f1)
	uri="rados://$POOL/bench-peers?ns=bench-peers"
	"$STAGEFS" publish -q -j "$T" --chunk-size "$chunk" "$d/src" "$uri" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "stagefs publish failed"; return; }
	port=$((20000 + RANDOM % 20000))
	for ((i = 1; i <= n; i++)); do
		list+="${list:+, }127.0.0.$((i + 1)):$port"
	done
	(umask 077 && "$PY" -c "import secrets; print(secrets.token_hex(32))" >"$d/key")
	printf '[stagefs]\npeers = %s\npeer_key_file = %s\npeer_timeout = 10s\n' "$list" "$d/key" >"$d/peers.conf"
	printf '[stagefs]\n' >"$d/solo.conf"
	MOUNT_CEPH_ARGS="--ms_inject_delay_type=osd --ms_inject_delay_probability=1 --ms_inject_delay_max=$(awk -v m="$delay" 'BEGIN { print m / 1000 }')"
	wargs=-q
	"$STAGEFS" warmup --help 2>&1 | grep -c -- '--threads' >/dev/null && wargs="-q -t $T"
	# nodes CONF CAP K: mount nodes 1..K (cold caches) with CONF
	nodes() {
		local k pl
		retire "$d"/c[0-9]*
		drop_caches
		for ((k = 1; k <= $3; k++)); do
			pl=
			[ "$1" = "$d/solo.conf" ] || pl=",peer_listen=127.0.0.$((k + 1)):$port"
			MOUNT_CONF=$1 sfs_mount "$uri" "$d/m$k" \
				"cache_dir=$d/c$k,ceph_conf=$CEPH_CONF,backend_max_rate=$2$pl" ||
				return 1
		done
	}
	unmount() { local k; for ((k = 1; k <= $1; k++)); do sfs_umount "$d/m$k"; done; }
	backend_sum() { local k s=0; for ((k = 1; k <= $1; k++)); do s=$((s + $(stat_get "$d/m$k" "$2"))); done; echo "$s"; }
	# all K [--shard]: stagefs warmup on nodes 1..K at once; with --shard,
	# each node first its shard (node j: shard j-1 of K), then the rest,
	# as each node of a job would do it (no barrier between the two)
	all() {
		local k=$1 j pids=() rc=0
		for ((j = 1; j <= k; j++)); do
			# shellcheck disable=SC2086
			if [ "${2:-}" = --shard ]; then
				"$STAGEFS" warmup $wargs --shard "$((j - 1))/$k" "$d/m$j" &&
					"$STAGEFS" warmup $wargs "$d/m$j"
			else
				"$STAGEFS" warmup $wargs "$d/m$j"
			fi >"$WORK/log/peers-warmup.$j.log" 2>&1 &
			pids+=($!)
		done
		for j in "${pids[@]}"; do wait "$j" || rc=1; done
		return $rc
	}
	row "" "time" "backend bytes" "per byte"
	# one node alone, the whole link
	nodes "$d/solo.conf" "$linkb" 1 || { skipped "mount failed"; return; }
	t0=$(now_ms)
	all 1 || { skipped "warmup failed"; unmount 1; return; }
	t1=$(($(now_ms) - t0))
	be=$(backend_sum 1 backend_bytes)
	unmount 1
	row "one node alone" "$((t1)) ms" "$be" "$(ratio "$be" "$bytes")"
	# n nodes, no peers: each its share of the link
	nodes "$d/solo.conf" "$cap" "$n" || { skipped "mount failed"; unmount "$n"; return; }
	t0=$(now_ms)
	all "$n" || { skipped "warmup failed"; unmount "$n"; return; }
	tind=$(($(now_ms) - t0))
	bind=$(backend_sum "$n" backend_bytes)
	unmount "$n"
	row "$n nodes, independent" "$tind ms" "$bind" "$(ratio "$bind" "$bytes")"
	# n nodes, one group: each its shard (from Ceph, through the owners), then the rest (from peers)
	nodes "$d/peers.conf" "$cap" "$n" || { skipped "mount failed"; unmount "$n"; return; }
	t0=$(now_ms)
	all "$n" --shard || { skipped "warmup failed"; unmount "$n"; return; }
	tpeer=$(($(now_ms) - t0))
	bpeer=$(backend_sum "$n" backend_bytes)
	pin=$(backend_sum "$n" peer_bytes_in)
	row "$n nodes, peers, --shard i/$n + rest" "$tpeer ms" "$bpeer" "$(ratio "$bpeer" "$bytes")"
	row "" "" "from peers: $pin" ""
	unmount "$n"
	# the same group, every node warming everything at once (no shards)
	nodes "$d/peers.conf" "$cap" "$n" || { skipped "mount failed"; unmount "$n"; return; }
	t0=$(now_ms)
	all "$n" || { skipped "warmup failed"; unmount "$n"; return; }
	tall=$(($(now_ms) - t0))
	ball=$(backend_sum "$n" backend_bytes)
	row "$n nodes, peers, no shards" "$tall ms" "$ball" "$(ratio "$ball" "$bytes")"
	# the transport, node 1 serving from its (page-)cached copy, against iperf3
	# interleaved with iperf3 over the same loopback, 3 times (the machine
	# is noisy), iperf3 writing chunk-sized buffers as the server does
	local pbr1 pbr ipf1 ipf16 r a1=() a16=() b1=() b16=()
	iperf() {	# iperf STREAMS: bytes/s over loopback, 127.0.0.9 -> 127.0.0.2
		local p=$((port + 1)) out
		iperf3 -s -1 -B 127.0.0.2 -p "$p" >/dev/null 2>&1 &
		sleep 0.5
		out=$(iperf3 -c 127.0.0.2 -B 127.0.0.9 -p "$p" -t 3 -l "$cbytes" -P "$1" -J 2>/dev/null)
		wait
		"$PY" -c 'import json, sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8))' <<<"$out"
	}
	pb() { jget "$("$PB" -t "$1" -r "$2" "$d/key" "127.0.0.9:$port" "127.0.0.2:$port" "$uri" 2>>"$WORK/log/peerbench.err")" bytes_per_s; }
	timeout 60 cat "$d/c1"/data/*/* >/dev/null 2>&1
	for r in 1 2 3; do
		if command -v iperf3 >/dev/null; then
			a1+=("$(iperf 1)") a16+=("$(iperf 16)")
		fi
		b1+=("$(pb 1 4)") b16+=("$(pb 16 8)")
	done
	pbr1=$(median "${b1[@]}") pbr=$(median "${b16[@]}")
	[ ${#a1[@]} = 0 ] || ipf1=$(median "${a1[@]}") ipf16=$(median "${a16[@]}")
	# local readers first: node 1's own reads of its cached copy (page cache
	# dropped, 4 readers) alone, then while 3 askers pull from it flat out,
	# then the same with peer_serve_max_mbps=50 on node 1
	local loc0 loc1 loc2 srv1 srv2
	list_files "$d/src" "$d/m1" "$d/files.1"
	under_load() {	# under_load: sets LOC (node 1's read bytes/s) and SRV (served bytes/s)
		local k lp=() o0 t
		# from the other members' addresses: node 1 counts what it serves them
		for k in 3 4 5; do
			"$PB" -t 16 -r 100000 "$d/key" "127.0.0.$k:$((port + 7))" "127.0.0.2:$port" "$uri" >/dev/null 2>&1 &
			lp+=($!)
		done
		sleep 1
		drop_caches
		o0=$(stat_get "$d/m1" peer_bytes_out) t=$(now_ms)
		LOC=$(rb bytes_per_s files -t 4 -s 1 "$d/files.1")
		SRV=$((($(stat_get "$d/m1" peer_bytes_out) - o0) * 1000 / ($(now_ms) - t + 1)))
		kill "${lp[@]}" 2>/dev/null
		wait "${lp[@]}" 2>/dev/null
	}
	drop_caches
	loc0=$(rb bytes_per_s files -t 4 -s 1 "$d/files.1")
	under_load
	loc1=$LOC srv1=$SRV
	sfs_umount "$d/m1"
	MOUNT_CONF=$d/peers.conf sfs_mount "$uri" "$d/m1" \
		"cache_dir=$d/c1,ceph_conf=$CEPH_CONF,backend_max_rate=$cap,peer_listen=127.0.0.2:$port,peer_serve_max_mbps=50" ||
		{ failed "remount of node 1"; unmount "$n"; return; }
	under_load
	loc2=$LOC srv2=$SRV
	unmount "$n"
	row "transport: peerbench -t 1 / -t 16" "$(mbs "${pbr1:-0}")" "$(mbs "${pbr:-0}")" "" "median of 3, chunks checked on arrival"
	row "iperf3 -l $chunk, 1 / 16 streams" "$(mbs "${ipf1:-0}")" "$(mbs "${ipf16:-0}")" "" "median of 3, interleaved"
	row "node 1 reads its copy: alone" "$(mbs "${loc0:-0}")" "" ""
	row "... while serving 3 askers" "$(mbs "${loc1:-0}")" "served $(mbs "${srv1:-0}")" "$(ratio "${loc1:-0}" "${loc0:-0}")"
	row "... the same, peer_serve_max_mbps=50" "$(mbs "${loc2:-0}")" "served $(mbs "${srv2:-0}")" "$(ratio "${loc2:-0}" "${loc0:-0}")"
	# a cold epoch: every node reads the whole dataset, shuffled, with / without peers
	list_files "$d/src" "$d/mX" "$d/files"
	epoch() {	# epoch CONF: ms until n cold nodes have read everything
		local k pids=() t
		nodes "$1" "$cap" "$n" || return 1
		t=$(now_ms)
		for ((k = 1; k <= n; k++)); do
			sed "s|$d/mX|$d/m$k|" "$d/files" >"$d/files.$k"
			"$RB" files -t 4 -s "$k" "$d/files.$k" >/dev/null 2>>"$WORK/log/rb.err" &
			pids+=($!)
		done
		for k in "${pids[@]}"; do wait "$k" || { unmount "$n"; return 1; }; done
		EPOCH_MS=$(($(now_ms) - t))
		EPOCH_BE=$(backend_sum "$n" backend_bytes)
		unmount "$n"
	}
	epoch "$d/solo.conf" || { failed "epoch without peers: $(rb_why)"; return; }
	e0=$EPOCH_MS b=$EPOCH_BE
	epoch "$d/peers.conf" || { failed "epoch with peers: $(rb_why)"; return; }
	e1=$EPOCH_MS
	row "cold epoch, $n nodes, no peers" "$e0 ms" "$b" "$(ratio "$b" "$bytes")"
	row "cold epoch, $n nodes, peers" "$e1 ms" "$EPOCH_BE" "$(ratio "$EPOCH_BE" "$bytes")"
	retire "$d"/c[0-9]*
	MOUNT_CEPH_ARGS=
	result "peers: backend bytes per byte, $n nodes" "$(ratio "$bpeer" "$bytes")" "$(ratio "$bind" "$bytes")" "$(ratio "$bpeer" "$bytes")" "<1.06"
	result "peers: sharded warmup vs $n independent" "${tpeer} ms" "${tind} ms" "$(ratio "$tpeer" "$tind")" "<0.36"
	CUR=peertls
	bench_peertls
	result "peers: sharded warmup vs one node alone" "${tpeer} ms" "${t1} ms" "$(ratio "$tpeer" "$t1")" "<1.31"
	result "peers: cold epoch vs without peers" "${e1} ms" "${e0} ms" "$(ratio "$e1" "$e0")" ""
	result "peers: every node warming, no shards, vs one node" "${tall} ms" "${t1} ms" "$(ratio "$tall" "$t1")" ""
	result "peers: local reads while serving / alone" "$(mbs "${loc1:-0}")" "$(mbs "${loc0:-0}")" "$(ratio "${loc1:-0}" "${loc0:-0}")" ""
	result "peers: the same, serving capped at 50 MB/s" "$(mbs "${loc2:-0}")" "$(mbs "${loc0:-0}")" "$(ratio "${loc2:-0}" "${loc0:-0}")" ""
	[ -z "${ipf16:-}" ] || {
		result "peers: transport vs iperf3, 1 stream" "$(mbs "${pbr1:-0}")" "$(mbs "$ipf1")" "$(ratio "${pbr1:-0}" "$ipf1")" ""
		result "peers: transport vs iperf3, 16 streams" "$(mbs "${pbr:-0}")" "$(mbs "$ipf16")" "$(ratio "${pbr:-0}" "$ipf16")" ""
	}
}

# ---------------------------------------------------------------------------
# peertls: the peer transport, TLS 1.3 / the clear-text one it replaced

# plain_build DIR: a build of PLAIN_REV (stagefs, its peerbench) in DIR, or
# BENCH_PEER_PLAIN's.  Sets PLAIN_DIR and PLAIN_PB (its peerbench: in
# tools/ in a tree from before tools/bench/, in tools/bench/ after), or
# PLAIN_WHY and returns 1.
plain_build() {
	local pb
	if [ -n "${BENCH_PEER_PLAIN:-}" ]; then
		PLAIN_DIR=$BENCH_PEER_PLAIN
	else
		PLAIN_DIR=$1
		git -C "$REPO" rev-parse -q --verify "$PLAIN_REV^{commit}" >/dev/null ||
			{ PLAIN_WHY="commit $PLAIN_REV (the clear-text transport) is not in this checkout: set BENCH_PEER_PLAIN to a build of it"; return 1; }
		if [ ! -x "$PLAIN_DIR/tools/peerbench" ] && [ ! -x "$PLAIN_DIR/tools/bench/peerbench" ]; then
			mkdir -p "$PLAIN_DIR"
			log "building the clear-text transport ($PLAIN_REV) in $PLAIN_DIR"
			git -C "$REPO" archive "$PLAIN_REV" | tar -x -C "$PLAIN_DIR" || { PLAIN_WHY="git archive $PLAIN_REV failed"; return 1; }
			pb=tools/bench/peerbench
			[ -e "$PLAIN_DIR/$pb.c" ] || pb=tools/peerbench
			(cd "$PLAIN_DIR" && ./configure --disable-cuda && make -j"$(nproc)" stagefs "$pb") \
				>"$WORK/log/plain-build.log" 2>&1 ||
				{ PLAIN_WHY="building $PLAIN_REV failed (log/plain-build.log)"; return 1; }
		fi
	fi
	PLAIN_PB=$PLAIN_DIR/tools/bench/peerbench
	[ -x "$PLAIN_PB" ] || PLAIN_PB=$PLAIN_DIR/tools/peerbench
	[ -x "$PLAIN_DIR/stagefs" ] && [ -x "$PLAIN_PB" ] ||
		{ PLAIN_WHY="no stagefs and peerbench (tools/ or tools/bench/) in $PLAIN_DIR"; return 1; }
}

# pid_cpu_ms PID: user + system CPU time of PID (all its threads) so far, ms
pid_cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print int(($12 + $13) * 1000 / hz) }' "/proc/$1/stat"; }

bench_peertls() {
	local d=$WORK/peertls mb=${BENCH_PEER_MB:-256} chunk=${BENCH_PEER_CHUNK:-1M} port uri r
	local n1=() n16=() p1=() p16=() mn1 mn16 mp1 mp16 ktls
	hdr peertls "the peer transport, TLS 1.3 (this build) / clear text ($PLAIN_REV): tools/bench/peerbench against a daemon's warm cache, $mb MiB of 4 MiB files in $chunk chunks, loopback"
	[ -x "$PB" ] || { skipped "tools/bench/peerbench is not built"; return; }
	need_rados || { skipped "$RADOS_WHY"; return; }
	plain_build "$WORK/plain" || { skipped "$PLAIN_WHY"; return; }
	mkdir -p "$d/src"
	gen_files "$d/src" $((mb / 4)) $((4 << 20)) 8 || { skipped "could not write the data"; return; }
	uri="rados://$POOL/bench-peertls?ns=bench-peertls"
	"$STAGEFS" publish -q -j "$T" --chunk-size "$chunk" "$d/src" "$uri" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "stagefs publish failed"; return; }
	port=$((20000 + RANDOM % 20000))
	(umask 077 && "$PY" -c "import secrets; print(secrets.token_hex(32))" >"$d/key")
	# two groups of two: an asker (peerbench) and a server, each side's build
	printf '[stagefs]\npeers = 127.0.0.11:%s, 127.0.0.12:%s\npeer_key_file = %s\n' "$port" "$port" "$d/key" >"$d/tls.conf"
	printf '[stagefs]\npeers = 127.0.0.13:%s, 127.0.0.14:%s\npeer_key_file = %s\n' "$port" "$port" "$d/key" >"$d/plain.conf"
	MOUNT_CONF=$d/tls.conf sfs_mount "$uri" "$d/mt" "cache_dir=$d/ct,ceph_conf=$CEPH_CONF,peer_listen=127.0.0.12:$port" ||
		{ skipped "mount failed"; return; }
	MOUNT_CONF=$d/plain.conf STAGEFS=$PLAIN_DIR/stagefs sfs_mount "$uri" "$d/mp" \
		"cache_dir=$d/cp,ceph_conf=$CEPH_CONF,peer_listen=127.0.0.14:$port" ||
		{ skipped "mount of the clear-text build failed"; sfs_umount "$d/mt"; return; }
	timeout 300 cat "$d/mt"/*/* "$d/mp"/*/* >/dev/null 2>&1	# both caches warm
	# pbx PEERBENCH DAEMON_PID SELF PEER INFLIGHT ROUNDS: "bytes/s cpu-ms/GB"
	# (the CPU time of the server daemon and of the asker together per GB moved)
	pbx() {
		local out c0 c1
		c0=$(pid_cpu_ms "$2")
		out=$("$PY" -c '
import json, resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
j = json.loads(r.stdout or "{}")
print(j.get("bytes_per_s", 0), j.get("bytes", 0), int((u.ru_utime + u.ru_stime) * 1000))' \
			"$1" -t "$5" -r "$6" "$d/key" "$3" "$4" "$uri" 2>>"$WORK/log/peerbench.err")
		c1=$(pid_cpu_ms "$2")
		set -- $out
		awk -v r="$1" -v b="$2" -v c=$(($3 + c1 - c0)) 'BEGIN { printf "%.0f %.0f\n", r, (b > 0) ? c / (b / 1e9) : 0 }'
	}
	local tp=${MNT_PID[$d/mt]} pp=${MNT_PID[$d/mp]} x ct=() cp=()
	for r in 1 2 3; do
		x=$(pbx "$PB" "$tp" "127.0.0.11:$port" "127.0.0.12:$port" 1 4); n1+=("${x% *}")
		x=$(pbx "$PLAIN_PB" "$pp" "127.0.0.13:$port" "127.0.0.14:$port" 1 4); p1+=("${x% *}")
		x=$(pbx "$PB" "$tp" "127.0.0.11:$port" "127.0.0.12:$port" 16 8); n16+=("${x% *}") ct+=("${x#* }")
		x=$(pbx "$PLAIN_PB" "$pp" "127.0.0.13:$port" "127.0.0.14:$port" 16 8); p16+=("${x% *}") cp+=("${x#* }")
	done
	ktls=no
	grep -q '^tls ' /proc/modules 2>/dev/null && ktls="module loaded"
	sfs_umount "$d/mt"
	sfs_umount "$d/mp"
	retire "$d/ct" "$d/cp"
	mn1=$(median "${n1[@]}") mp1=$(median "${p1[@]}") mn16=$(median "${n16[@]}") mp16=$(median "${p16[@]}")
	row "" "TLS 1.3" "clear text" "ratio"
	row "1 chunk in flight" "$(mbs "${mn1:-0}")" "$(mbs "${mp1:-0}")" "$(ratio "${mn1:-0}" "${mp1:-0}")" "median of 3, interleaved"
	row "16 chunks in flight" "$(mbs "${mn16:-0}")" "$(mbs "${mp16:-0}")" "$(ratio "${mn16:-0}" "${mp16:-0}")" "kernel TLS: $ktls"
	row "CPU ms per GB, both ends, 16" "$(median "${ct[@]}")" "$(median "${cp[@]}")" "$(ratio "$(median "${ct[@]}")" "$(median "${cp[@]}")")" "server daemon + asker"
	result "peers: TLS / clear text, 1 in flight" "$(mbs "${mn1:-0}")" "$(mbs "${mp1:-0}")" "$(ratio "${mn1:-0}" "${mp1:-0}")" ">=0.8"
	result "peers: TLS / clear text, 16 in flight" "$(mbs "${mn16:-0}")" "$(mbs "${mp16:-0}")" "$(ratio "${mn16:-0}" "${mp16:-0}")" ">=0.8"
}

usage() {
	awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
	exit 2
}

main() {
	local b allv todo=()
	for b in "${@:-all}"; do
		case $b in
		all) read -ra allv <<<"$ALL"; todo+=("${allv[@]}") ;;
		warm | smallfiles | passthrough | smallhot | uring | rados | publish | manifest | index | warmup | hints | epoch | coldsmall | peers | peertls | gpu | au) todo+=("$b") ;;
		-h | --help) usage ;;
		*) printf 'bench.sh: unknown benchmark %s\n' "$b" >&2; usage ;;
		esac
	done
	[ "$(id -u)" = 0 ] || { echo "bench.sh: needs root (FUSE mounts and drop_caches)" >&2; exit 1; }
	[ -x "$STAGEFS" ] || { echo "bench.sh: $STAGEFS is not built (make)" >&2; exit 1; }
	[ -x "$RB" ] || make -C "$REPO" -s tools/bench/readbench >&2 || exit 1
	command -v fusermount3 >/dev/null || { echo "bench.sh: fusermount3 missing" >&2; exit 1; }

	trap cleanup EXIT
	trap 'exit 130' INT TERM
	WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/stagefs-bench.XXXXXX") || exit 1
	mkdir -p "$WORK/log" "$WORK/bin"
	# run a snapshot of the build: a `make` during the run must not change
	# the binary under half of the measurements
	cp -p "$STAGEFS" "$(dirname "$STAGEFS")"/stagefs-* "$WORK/bin/" 2>/dev/null
	STAGEFS=$WORK/bin/stagefs
	printf 'stagefs bench  %s  %s  %s vCPU  %s GiB RAM  rounds=%s\n' "$(date -u +%FT%TZ)" \
		"$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)" "$(nproc)" \
		"$(awk '/MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)" "$ROUNDS"
	machine_notes
	for b in "${todo[@]}"; do
		CUR=$b
		MOUNT_CEPH_ARGS=
		"bench_$b"
	done

	printf '\n== summary (ratio = stagefs / baseline, same run; median of %s)\n' "$ROUNDS"
	printf '  %-40s %-16s %-16s %7s %7s  %s\n' benchmark stagefs baseline ratio target ""
	for b in "${SUMMARY[@]}"; do
		IFS='|' read -r n m bl ra ta v <<<"$b"
		if [ "${m#skipped}" != "$m" ] || [ "${m#FAILED}" != "$m" ]; then
			printf '  %-40s %s\n' "$n" "$m"
		else
			printf '  %-40s %-16s %-16s %7s %7s  %s\n' "$n" "$m" "$bl" "$ra" "$ta" "$v"
		fi
	done
}

# one line, read whole before it runs: editing this file during a run is safe
main "$@"; exit $?
