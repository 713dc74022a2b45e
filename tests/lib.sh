# SPDX-License-Identifier: Apache-2.0
# lib.sh: helpers sourced by the integration tests (tests/integration/*.sh).
# shellcheck shell=bash
#
# A test starts with
#     #!/usr/bin/env bash
#     # what it checks, in one line
#     . "$(dirname "$0")/../lib.sh"
# and exits 0 (pass), 1 (fail: die) or 77 (skip: skip REASON).
#
# Sourcing this file turns on `set -eEu -o pipefail`; a command that fails
# unexpectedly fails the test (exit 1, never a stray 77) and names its line.
# Mind pipefail with a reader that stops early: in `od FILE | head -20` od
# may die of SIGPIPE (141) and fail the test; write `head -c N FILE | od`,
# or end the pipeline with `|| true` where a cut-short producer is fine.
# The same holds for `cmd | grep -q`: grep -q stops at the first match and
# cmd may die of SIGPIPE; write `cmd | contains PATTERN` instead.
# Each test gets TEST_TMPDIR from tests/run.sh; run by hand it makes its own.
# Everything sfs_mount starts is unmounted and stopped when the test exits,
# whichever way it exits, so a test can `die` anywhere.
#
# Helpers:
#   die MSG / skip REASON / need_root / need_fuse / need_stagefs / need_mount
#   sfs_mount SRC MNT [name=value | -c FILE]... start a foreground daemon, wait until ready
#   sfs_umount MNT                              fusermount3 -u, daemon must exit 0
#   sfs_pid MNT / sfs_log MNT                   the daemon's pid and log file
#   stat_get MNT KEY [DEF] / stats_dump MNT     counters from MNT/.stagefs/stats
#   cache_served MNT                            cache hits + passthrough opens
#   drop_caches                                 sync and drop the page cache
#   rados_age POOL NS PREFIX                    objects named PREFIX* look two hours old
#   expect_eio LIMIT_MS WHAT CMD...             CMD fails with EIO within LIMIT_MS (time in EIO_MS)
#   contains [GREP-OPTIONS] PATTERN             grep -q that reads all its input
#   wait_for [-t SECS] CMD...                   poll CMD until it succeeds
#   wait_pid_exit PID [SECS]                    wait for a child; its status in WAIT_RC
#   assert_eq / assert_ge / assert_gt A B MSG   numeric checks that die with MSG
#   gentree ARGS... / treecmp ARGS...           tests/gentree.py, tests/treecmp.py
#   flip_bytes FILE OFFSET [COUNT]              invert COUNT bytes in place
#   sha256 FILE                                 hex digest
#   keep_uring_param                            restore fuse.enable_uring at exit

set -eEu -o pipefail
shopt -s inherit_errexit 2>/dev/null || true

: "${REPO:=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)}"
: "${STAGEFS:=$REPO/stagefs}"
: "${PYTHON:=/usr/bin/python3}"
export REPO STAGEFS PYTHON

# Deadlines, in seconds.
: "${SFS_MOUNT_TIMEOUT:=20}"
: "${SFS_EXIT_TIMEOUT:=20}"
: "${SFS_LOG_LEVEL:=info}"

log() { printf '%s: %s\n' "$(date +%T.%3N)" "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
skip() { printf 'SKIP: %s\n' "$*"; exit 77; }
# contains [GREP-OPTIONS] PATTERN: grep -q that reads all its input, so the
# writer of a pipeline never gets SIGPIPE (grep -c to /dev/null reads on)
contains() { grep -c "$@" >/dev/null; }

_lib_on_err() {
	local rc=$? line=$1 cmd=$2
	printf 'FAIL: line %s: command failed (rc=%s): %s\n' "$line" "$rc" "$cmd" >&2
	exit 1
}
trap '_lib_on_err "$LINENO" "$BASH_COMMAND"' ERR

need_root() { [[ $(id -u) -eq 0 ]] || skip "needs root (FUSE mounts here are root-only)"; }
need_fuse() {
	[[ -c /dev/fuse ]] || skip "/dev/fuse is missing"
	command -v fusermount3 >/dev/null || skip "fusermount3 is not installed"
}
need_stagefs() { [[ -x $STAGEFS ]] || die "$STAGEFS is not built (run make)"; }
# What every mounting test needs.
need_mount() { need_root; need_fuse; need_stagefs; }

# Make the local users named (no home, no login shell) unless they exist:
# the tenants of the multi-user tests.  Then run a command as one of them
# with `as USER CMD...`.
need_users() {
	local u
	for u in "$@"; do
		id "$u" >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin "$u" ||
			skip "cannot create user $u"
	done
}
as() { local u=$1; shift; runuser -u "$u" -- "$@"; }

# keep_uring_param: remember the kernel-wide switch of FUSE over io_uring
# ($URING_PARAM, which a mount with uring=on sets) and put it back when the
# test exits, keeping the test's status.  Returns 1, keeping nothing, where
# this kernel has no such switch.
URING_PARAM=/sys/module/fuse/parameters/enable_uring
keep_uring_param() {
	[[ -w $URING_PARAM ]] || return 1
	_URING_ORIG=$(cat "$URING_PARAM")
	trap _restore_uring_param EXIT
}
_restore_uring_param() {
	local rc=$?
	echo "$_URING_ORIG" >"$URING_PARAM" 2>/dev/null
	(exit "$rc")
	_lib_on_exit
}

# --- temp dir and cleanup ----------------------------------------------------

if [[ -z ${TEST_TMPDIR:-} ]]; then
	TEST_TMPDIR=$(mktemp -d "${STAGEFS_TEST_TMPDIR:-/tmp}/stagefs-$(basename "$0" .sh).XXXXXX")
	_LIB_OWN_TMP=1
fi
TEST_TMPDIR=$(cd "$TEST_TMPDIR" && pwd -P)
export TEST_TMPDIR TMPDIR=$TEST_TMPDIR

declare -A SFS_PID=() SFS_LOG=()
_SFS_N=0

_lib_on_exit() {
	local rc=$? m
	trap - ERR
	set +e
	for m in "${!SFS_PID[@]}"; do
		if mountpoint -q "$m"; then
			fusermount3 -u -z "$m" 2>/dev/null
		fi
		kill -TERM "${SFS_PID[$m]}" 2>/dev/null
	done
	for m in "${!SFS_PID[@]}"; do
		wait_pid_exit "${SFS_PID[$m]}" 5 ||
			kill -KILL "${SFS_PID[$m]}" 2>/dev/null
	done
	if [[ ${_LIB_OWN_TMP:-0} == 1 ]]; then
		if [[ $rc -eq 0 || $rc -eq 77 ]]; then
			rm -rf --one-file-system "$TEST_TMPDIR"
		else
			printf 'kept %s\n' "$TEST_TMPDIR" >&2
		fi
	fi
	exit "$rc"
}
trap _lib_on_exit EXIT

# --- small helpers -----------------------------------------------------------

# wait_for [-t SECS] CMD...: run CMD every 50 ms until it succeeds; fail after
# SECS (default 20).
wait_for() {
	local secs=20 end
	if [[ $1 == -t ]]; then
		secs=$2
		shift 2
	fi
	end=$((SECONDS + secs))
	until "$@"; do
		((SECONDS < end)) || return 1
		sleep 0.05
	done
}

# wait_pid_exit PID [SECS]: wait for child PID (of this shell, so never call
# it in a subshell) to exit and set WAIT_RC to its exit status.  Returns 1 if
# it is still running after SECS (default SFS_EXIT_TIMEOUT).
wait_pid_exit() {
	local pid=$1 secs=${2:-$SFS_EXIT_TIMEOUT}
	WAIT_RC=
	wait_for -t "$secs" _pid_gone "$pid" || return 1
	WAIT_RC=0
	wait "$pid" 2>/dev/null || WAIT_RC=$?
}
_pid_gone() {
	# A zombie child still answers kill -0; look at its state instead.
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 0
	[[ $st == Z* ]]
}

assert_eq() { [[ $1 -eq $2 ]] || die "${3:-assert_eq}: expected $2, got $1"; }
assert_ge() { [[ $1 -ge $2 ]] || die "${3:-assert_ge}: expected >= $2, got $1"; }
assert_gt() { [[ $1 -gt $2 ]] || die "${3:-assert_gt}: expected > $2, got $1"; }

# expect_eio LIMIT_MS WHAT CMD...: CMD (a read of a dead backend's data)
# must fail with EIO within LIMIT_MS ms; the time it took is left in EIO_MS
expect_eio() {
	local limit=$1 what=$2 t0
	shift 2
	t0=$(date +%s%3N)
	if timeout 60 "$@" >/dev/null 2>"$TEST_TMPDIR/eio.err"; then
		die "$what: read with the backend down"
	fi
	EIO_MS=$(($(date +%s%3N) - t0))
	contains "Input/output error" "$TEST_TMPDIR/eio.err" ||
		die "$what: expected EIO, got: $(cat "$TEST_TMPDIR/eio.err")"
	log "$what: EIO after ${EIO_MS} ms"
	((EIO_MS <= limit)) || die "$what: EIO after ${EIO_MS} ms; the timeout promises <= ${limit} ms"
}

# same_or_eio FILE REF WHAT: 0 if FILE reads as REF, 1 if it cannot be read
# (the backend not back yet: "wait_for same_or_eio ..."); wrong bytes fail
# the test at once.
same_or_eio() {
	local rc=0
	cmp -s "$1" "$2" || rc=$?
	[[ $rc -ne 1 ]] || die "$3: wrong bytes once the backend was back"
	return $((rc != 0))
}

# rand_files SIZE N DIR...: DIR/f1..fN of SIZE random bytes each, readable by
# every user, with TEST_TMPDIR and its parent open to them (the multi-user
# tests read as other users).
rand_files() {
	local size=$1 n=$2 d i
	shift 2
	chmod 755 "$TEST_TMPDIR" "$(dirname "$TEST_TMPDIR")"
	for d in "$@"; do
		mkdir -p "$d"
		for ((i = 1; i <= n; i++)); do head -c "$size" /dev/urandom >"$d/f$i"; done
		chmod -R a+rX "$d"
	done
}
gentree() { "$PYTHON" "$REPO/tests/gentree.py" "$@"; }
treecmp() { "$PYTHON" "$REPO/tests/treecmp.py" "$@"; }

sha256() { sha256sum -- "$1" | cut -d' ' -f1; }

# flip_bytes FILE OFFSET [COUNT]: invert COUNT (default 16) bytes at OFFSET.
flip_bytes() {
	"$PYTHON" - "$1" "$2" "${3:-16}" <<'EOF'
import os, sys
path, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR)
old = os.pread(fd, n, off)
if len(old) != n:
    sys.exit(f"flip_bytes: {path} has only {len(old)} bytes at {off}")
os.pwrite(fd, bytes(b ^ 0xFF for b in old), off)
os.fsync(fd)
os.close(fd)
EOF
}

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

# rados_age POOL NS PREFIX: every object of namespace NS of POOL whose name
# starts with PREFIX (sfs.chunk., sfs.pack.) looks two hours old to
# publish's freshening and gc's grace period (its mtime set back, through
# an sfs.seen xattr write).  Needs $CEPH_CONF.
rados_age() {
	"$PYTHON" - "$CEPH_CONF" "$@" <<'PY'
import sys, time, rados
conf, pool, ns, prefix = sys.argv[1:5]
with rados.Rados(conffile=conf) as cl:
    with cl.open_ioctx(pool) as io:
        io.set_namespace(ns)
        old = int(time.time()) - 7200
        for o in io.list_objects():
            if o.key.startswith(prefix):
                with rados.WriteOpCtx() as op:
                    op.set_xattr("sfs.seen", b"aged by the test")
                    io.operate_write_op(op, o.key, mtime=old)
PY
}

# --- the daemon --------------------------------------------------------------

_canon() { (cd "$1" && pwd -P); }

# stats_dump MNT: print the stats JSON.  Bounded, in case the daemon hangs.
stats_dump() { timeout 10 cat "$1/.stagefs/stats"; }

# stat_get MNT KEY [DEFAULT]: print one integer counter from
# MNT/.stagefs/stats; a missing key fails, or gives DEFAULT if one is given.
stat_get() {
	local json
	json=$(stats_dump "$1") || die "cannot read $1/.stagefs/stats"
	# On stdin: the JSON can be larger than one argument may be (128 KiB).
	"$PYTHON" -c '
import json, sys
text = sys.stdin.read()
try:
    d = json.loads(text)
except ValueError as e:
    sys.exit("stats is not valid JSON (%s): %s" % (e, text[:2000]))
key = sys.argv[1]
if key not in d:
    if len(sys.argv) > 2:
        print(sys.argv[2])
        sys.exit(0)
    sys.exit("stats has no key %r: %s" % (key, text[:2000]))
print(int(d[key]))' "$2" "${@:3}" <<<"$json"
}

# cache_served MNT: how many times MNT answered from its cache: chunk hits
# in the daemon plus opens handed to the kernel as FUSE passthrough (whose
# reads then go straight to the cache file and are not seen by the daemon).
cache_served() {
	echo $(($(stat_get "$1" cache_hits) + $(stat_get "$1" passthrough_opens 0)))
}

_ready() {
	local mnt=$1 logf=${SFS_LOG[$1]:-}
	timeout -k 2 5 mountpoint -q "$mnt" && timeout -k 2 5 cat "$mnt/.stagefs/stats" >/dev/null 2>&1 &&
		# with FUSE over io_uring the rings answer before the daemon has
		# set up the rest (exporters, control socket, passthrough
		# accounting); it logs "mounted" once it has
		{ [[ -z $logf || ! -f $logf ]] || grep -q "notice: mounted " "$logf"; }
}

# sfs_mount SRC MNT [ARG...]: start `$STAGEFS -f` on SRC at MNT and wait until
# the mount answers.  Each ARG is either name=value (passed with -o) or an
# option starting with '-' (passed as is; -c and -o take the next ARG along).  cache_dir defaults to
# $TEST_TMPDIR/cache and runtime_dir to $TEST_TMPDIR/run; log_level to
# $SFS_LOG_LEVEL.  The daemon's output goes to $(sfs_log MNT).
sfs_mount() {
	local src=$1 mnt=$2 a pid logf end
	shift 2
	local oopts=() raw=() have=" "
	while [[ $# -gt 0 ]]; do
		a=$1
		shift
		case $a in
		-c | -o)
			raw+=("$a" "$1")
			shift
			;;
		-*) raw+=("$a") ;;
		*)
			oopts+=("$a")
			have+="${a%%=*} "
			;;
		esac
	done
	[[ $have == *" cache_dir "* ]] || oopts+=("cache_dir=$TEST_TMPDIR/cache")
	[[ $have == *" runtime_dir "* ]] || oopts+=("runtime_dir=$TEST_TMPDIR/run")
	[[ $have == *" log_level "* ]] || oopts+=("log_level=$SFS_LOG_LEVEL")
	mkdir -p "$mnt"
	mnt=$(_canon "$mnt")
	mountpoint -q "$mnt" && die "sfs_mount: $mnt is already a mount point"

	_SFS_N=$((_SFS_N + 1))
	logf=$TEST_TMPDIR/stagefs.$_SFS_N.log
	local ostr
	ostr=$(IFS=,; printf '%s' "${oopts[*]}")
	log "mount: $STAGEFS -f ${raw[*]} -o $ostr $src $mnt"
	# A script's background jobs ignore SIGINT; give the daemon the default
	# dispositions a terminal would, so that signals.sh can test them.
	env --default-signal=INT,QUIT,TERM "$STAGEFS" -f "${raw[@]}" \
		-o "$ostr" "$src" "$mnt" </dev/null >"$logf" 2>&1 &
	pid=$!
	SFS_PID[$mnt]=$pid
	SFS_LOG[$mnt]=$logf

	end=$((SECONDS + SFS_MOUNT_TIMEOUT))
	until _ready "$mnt"; do
		if _pid_gone "$pid"; then
			local rc=0
			wait "$pid" 2>/dev/null || rc=$?
			unset "SFS_PID[$mnt]"
			sed 's/^/    daemon: /' "$logf" >&2
			die "sfs_mount: stagefs exited with status $rc before $mnt was ready"
		fi
		if ((SECONDS >= end)); then
			sed 's/^/    daemon: /' "$logf" >&2
			die "sfs_mount: $mnt not ready after ${SFS_MOUNT_TIMEOUT}s"
		fi
		sleep 0.05
	done
	log "mounted $mnt (pid $pid)"
}

sfs_pid() { printf '%s\n' "${SFS_PID[$(_canon "$1")]}"; }
sfs_log() { printf '%s\n' "${SFS_LOG[$(_canon "$1")]}"; }

# sfs_wait_exit MNT: wait for MNT's daemon to exit; it must exit 0 and leave
# MNT unmounted.
sfs_wait_exit() {
	local mnt pid rc
	mnt=$(_canon "$1")
	pid=${SFS_PID[$mnt]:-}
	[[ -n $pid ]] || die "sfs_wait_exit: no daemon for $mnt"
	if ! wait_pid_exit "$pid"; then
		sed 's/^/    daemon: /' "${SFS_LOG[$mnt]}" >&2
		die "stagefs (pid $pid) still running ${SFS_EXIT_TIMEOUT}s after unmount/signal"
	fi
	unset "SFS_PID[$mnt]"
	rc=$WAIT_RC
	if [[ $rc -ne 0 ]]; then
		sed 's/^/    daemon: /' "${SFS_LOG[$mnt]}" >&2
		die "stagefs (pid $pid) exited with status $rc"
	fi
	! mountpoint -q "$mnt" || die "$mnt is still mounted after the daemon exited"
	log "daemon for $mnt exited 0"
}

# sfs_umount MNT: unmount with fusermount3 -u (retrying while busy), then
# check that the daemon exits 0 within the deadline.
sfs_umount() {
	local mnt
	mnt=$(_canon "$1")
	wait_for -t 10 fusermount3 -u "$mnt" || die "fusermount3 -u $mnt kept failing"
	sfs_wait_exit "$mnt"
}
