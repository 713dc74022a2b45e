# tools/bench/perf-lib.sh - what every benchmark of tools/bench/ shares
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
#
# Sourced by tools/bench/run.sh, as git's t/perf/perf-lib.sh is by its
# scripts: the programs' paths and the knobs every benchmark reads, the
# output (tables, the summary rows and the summary table), the scratch
# directory, the daemon's mounts and the cleanup, data generation, and the
# throwaway Ceph cluster.  A benchmark, tools/bench/NAME.sh, defines
# bench_NAME and its own helpers and knobs on top of this, and names the
# benchmarks whose data it shares with bench_source.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
BENCH_LIB_DIR=$REPO/tools/bench
STAGEFS=${BENCH_STAGEFS:-$REPO/stagefs}
RB=$REPO/tools/bench/readbench
PB=$REPO/tools/bench/peerbench
GB=$REPO/tools/bench/gpubench
AUB=$REPO/tools/bench/aubench
CLUSTER_SH=$REPO/tools/dev/ceph-cluster.sh
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

# BENCH_QUICK=1: each benchmark's sizes shrink (its own file says to what)
QUICK=${BENCH_QUICK:-0}
[ "$QUICK" = 1 ] && : "${BENCH_ROUNDS:=1}"
ROUNDS=${BENCH_ROUNDS:-3}
T=${BENCH_T:-16}
POOL=stagefs

# bench_source NAME...: load tools/bench/NAME.sh, once each (a benchmark
# that reuses another's data and helpers names it so)
declare -A BENCH_LOADED=()
bench_source() {
	local n
	for n; do
		[ -z "${BENCH_LOADED[$n]:-}" ] || continue
		BENCH_LOADED[$n]=1
		# shellcheck source=/dev/null
		. "$BENCH_LIB_DIR/$n.sh" || { printf 'bench.sh: cannot load %s\n' "$BENCH_LIB_DIR/$n.sh" >&2; return 1; }
	done
}

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

# cachefs_new DIR MB: DIR on a fresh ext4 of MB MiB (mkfs defaults, so with
# a journal) on a loop device, where mkfs.ext4 and loop devices work; else
# a plain directory.  This VM's root ext4 has no journal, and ext4 without
# one scans recently freed inodes at every create: a cache emptied and
# filled again there slows down run after run (docs/benchmarks.md, packs).
# The loop device writes into the image's page cache, as a node's own NVMe
# takes the cache's writes out of the OSDs' way; BENCH_CACHE_DIO=1 gives it
# direct I/O, so that they compete with this VM's OSD for its disk.
# cachefs_gone DIR undoes it, finding the loop device by its image (a
# cachefs_new in a command substitution's subshell keeps nothing here).
cachefs_new() {
	local dev
	cachefs_gone "$1"
	mkdir -p "$1"
	command -v mkfs.ext4 >/dev/null || return 0
	truncate -s "$2"M "$1.img" &&
		mkfs.ext4 -q -F "$1.img" &&
		dev=$(losetup --direct-io="$([ "${BENCH_CACHE_DIO:-0}" = 1 ] && echo on || echo off)" \
			--show -f "$1.img") &&
		mount "$dev" "$1" || { cachefs_gone "$1"; mkdir -p "$1"; return 0; }
}
cachefs_gone() {
	local dev
	! mountpoint -q "$1" || umount "$1" || umount -l "$1"
	[ ! -e "$1.img" ] || for dev in $(losetup -j "$1.img" 2>/dev/null | cut -d: -f1); do
		losetup -d "$dev" 2>/dev/null
	done
	rm -rf "$1" "$1.img"
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# image_tree DIR N MIN_KB MAX_KB SEED: N files of random bytes, MIN..MAX KB,
# in 100 directories (DIR/c000/img0000000.jpg ...), the same for the same SEED
image_tree() {
	"$PY" - "$@" <<'PY'
import os, random, sys
root, n, lo, hi, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
r = random.Random(seed)
for i in range(n):
    sub = f"{root}/c{i % 100:03}"
    if i < 100:
        os.makedirs(sub, exist_ok=True)
    with open(f"{sub}/img{i:07}.jpg", "wb") as f:
        f.write(r.randbytes(r.randint(lo << 10, hi << 10)))
PY
}

# fuse_epoch_fps MNT DIR SEED N LOG: epoch_fps of MNT/DIR through a fresh
# ceph-fuse mount of the lab cluster's CephFS at MNT (listed first, then the
# page cache dropped), unmounted after; its messages go to LOG.  The caller
# has emptied the caches it wants cold.
fuse_epoch_fps() {
	local x
	"$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$1" >>"$5" 2>&1 || return 1
	ls -R "$1/$2" >/dev/null
	drop_caches
	x=$(epoch_fps "$1/$2" "$3" "$4")
	"$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$1" >>"$5" 2>&1
	[ -n "$x" ] && echo "$x"
}

# cold_start DIR MB: an empty cache on a new filesystem of MB MiB at DIR
# (cachefs_new), a cold OSD, no page cache
cold_start() {
	cachefs_new "$1" "$2"
	timeout 30 ceph tell osd.0 cache drop >/dev/null 2>&1 || osd_restart
	drop_caches
}

# sfs_cold_epoch SRC MNT CACHE MB SEED N [OPTS]: files/s of one cold
# shuffled epoch of the N files of SRC through a fresh stagefs mount on MNT
# (cold_start CACHE MB; OPTS: more -o settings; the listing not timed)
sfs_cold_epoch() {
	local x
	cold_start "$3" "$4"
	sfs_mount "$1" "$2" "cache_dir=$3,ceph_conf=$CEPH_CONF${7:+,$7}" || return 1
	ls -R "$2" >/dev/null
	drop_caches
	x=$(epoch_fps "$2" "$5" "$6")
	sfs_umount "$2"
	[ -n "$x" ] && echo "$x"
}

# epoch_fps ROOT SEED N: files/s of one shuffled epoch over the N files
# under ROOT (tools/bench/epoch_reader.py, BENCH_EPOCH_WORKERS readers, 8 by
# default); fails unless all N were read (errors in $WORK/log/epoch.err)
epoch_fps() {
	local out
	out=$("$PY" "$REPO/tools/bench/epoch_reader.py" "$1" --workers "${BENCH_EPOCH_WORKERS:-8}" \
		--seed "$2" 2>"$WORK/log/epoch.err") || return 1
	[ "$(jget "$out" files)" = "$3" ] || return 1
	awk -v n="$3" -v s="$(jget "$out" seconds)" 'BEGIN { printf "%.0f\n", n / s }'
}

# loader_fps ROOT SEED N: one CPU-bound PyTorch DataLoader epoch over ROOT
# (tools/bench/loader_epoch.py, BENCH_LOADER_WORKERS workers), in files/s;
# it must have read all N files.  On failure prints why (no torch: the
# benchmark goes on without the figure) and returns 1.
loader_fps() {
	local out rc
	out=$("$PY" -W ignore "$REPO/tools/bench/loader_epoch.py" "$1" \
		--workers "${BENCH_LOADER_WORKERS:-8}" --seed "$2" 2>"$WORK/log/loader.err")
	rc=$?
	if [ "$rc" = 3 ]; then
		echo "$(tail -1 "$WORK/log/loader.err") (Debian: python3-torch)"
		return 1
	fi
	if [ "$rc" != 0 ] || [ "$(jget "$out" files)" != "$3" ]; then
		echo "the DataLoader epoch of $1 failed (log/loader.err)"
		return 1
	fi
	awk -v n="$3" -v s="$(jget "$out" seconds)" 'BEGIN { printf "%.0f\n", n / s }'
}

# ---------------------------------------------------------------------------
# scratch space, mounts, cleanup

WORK=
CLUSTER_DIR=
declare -A MNT_PID=() MNT_LOG=()
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
			# a benchmark that gave up midway can leave its cache filesystem
			# mounted (cachefs_new): unmount what is under $WORK and free the
			# loop devices of its images, or rm (one file system) leaves them
			awk -v w="$WORK/" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
				while IFS= read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
			losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v w="$WORK/" 'index($2, w) == 1 { print $1 }' |
				while IFS= read -r m; do losetup -d "$m" 2>/dev/null; done
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
	MNT_PID[$mnt]=$pid MNT_LOG[$mnt]=$MOUNT_LOG
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

# sfs_umount MNT: unmount, then wait BENCH_UMOUNT_WAIT seconds (default 30)
# for the daemon to exit; one that does not is described on stderr (what
# its threads wait in, the end of its log) and killed
sfs_umount() {
	local mnt=$1 pid=${MNT_PID[$1]:-} i why=
	for i in $(seq 100); do
		why=$(fusermount3 -u "$mnt" 2>&1) && break
		mountpoint -q "$mnt" || break
		sleep 0.1
	done
	if mountpoint -q "$mnt"; then
		printf 'sfs_umount: %s: fusermount3 -u: %s; detaching it\n' "$mnt" "${why:-failed}" >&2
		fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
	fi
	if [ -n "$pid" ]; then
		if ! wait_gone "$pid" "${BENCH_UMOUNT_WAIT:-30}"; then
			daemon_why "$pid" "$mnt" >&2
			kill -KILL "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
		unset "MNT_PID[$mnt]" "MNT_LOG[$mnt]"
	fi
}

# daemon_why PID MNT: why a daemon is still there after its unmount
daemon_why() {
	local pid=$1 mnt=$2 t
	printf 'sfs_umount: %s: the daemon (pid %s) is still running %s s after the unmount (%s)\n' \
		"$mnt" "$pid" "${BENCH_UMOUNT_WAIT:-30}" "$(grep -c " $mnt fuse" /proc/mounts) mounts left there"
	for t in /proc/"$pid"/task/*; do
		[ -d "$t" ] || continue
		printf '  thread %s %s: %s, wchan %s%s\n' "${t##*/}" "$(cat "$t/comm" 2>/dev/null)" \
			"$(awk '{ print $3 }' "$t/stat" 2>/dev/null)" "$(cat "$t/wchan" 2>/dev/null)" \
			"$(head -3 "$t/stack" 2>/dev/null | sed 's/^\[<[0-9a-f]*>\] //; s/+0x.*//' | tr '\n' ' ' | sed 's/^/; /')"
	done
	[ -z "${MNT_LOG[$mnt]:-}" ] || tail -3 "${MNT_LOG[$mnt]}" | sed 's/^/  log: /'
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
# a run: its start and its summary

# bench_start: check what every benchmark needs, make the scratch directory
# (removed on exit), take a snapshot of the build and print the run's line
bench_start() {
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
}

# bench_run NAME: one benchmark (bench_NAME, loaded by bench_source)
bench_run() {
	CUR=$1
	MOUNT_CEPH_ARGS=
	"bench_$1"
}

# bench_summary: the summary table, one row per result/skipped/failed
bench_summary() {
	local s n m bl ra ta v
	printf '\n== summary (ratio = stagefs / baseline, same run; median of %s)\n' "$ROUNDS"
	printf '  %-40s %-16s %-16s %7s %7s  %s\n' benchmark stagefs baseline ratio target ""
	for s in "${SUMMARY[@]}"; do
		IFS='|' read -r n m bl ra ta v <<<"$s"
		if [ "${m#skipped}" != "$m" ] || [ "${m#FAILED}" != "$m" ]; then
			printf '  %-40s %s\n' "$n" "$m"
		else
			printf '  %-40s %-16s %-16s %7s %7s  %s\n' "$n" "$m" "$bl" "$ra" "$ta" "$v"
		fi
	done
}
