#!/usr/bin/env bash
# run.sh: the stagefs test runner.
# SPDX-License-Identifier: Apache-2.0
#
#   tests/run.sh                 all unit tests, then integration, then rados tests
#   tests/run.sh tree erofs      just these (a name, name.sh, or a path)
#
# Each test is a program or script that exits 0 (pass), 1 (fail) or 77 (skip,
# the reason being the last line it printed).  Every test runs:
#   - in its own session (setsid), so that everything it starts can be found
#     and killed afterwards, daemons included;
#   - under a timeout: 300 s, or `# timeout: N` in the test's first 5 lines;
#   - with stdin from /dev/null and stdout+stderr in tests/out/NAME.log;
#   - with its own empty TEST_TMPDIR (and TMPDIR), removed afterwards unless
#     the test failed or STAGEFS_TEST_KEEP=1.
# After each test the runner kills what the test left running and lazily
# unmounts every FUSE mount left under its TEST_TMPDIR.
#
# Sanitizers: every test runs with ASAN_OPTIONS and UBSAN_OPTIONS naming a
# log_path of its own (what the caller set comes first), so each report of
# AddressSanitizer, LeakSanitizer or UBSan, from any process the test starts
# (daemons and tools whose output a test discards included), lands in a
# file; a test with such a file fails, the reports appended to its log.
# LeakSanitizer reads tests/lsan.supp (each entry says why).  In a build
# without sanitizers this changes nothing (tests/sanitize.sh makes one).  In
# one, PYTHON (unless given) is a wrapper that preloads the ASan runtime
# (without leak checks) for Python that loads gpudirect/libstagefs.so.
#
# Tests that live in tests/rados/ or say `# needs: ceph` in their first 5 lines
# share one throwaway Ceph cluster (tools/dev/ceph-cluster.sh start DIR), started
# once before the first of them and stopped on exit, whatever happens.  If it
# cannot be started they are skipped with the reason.
#
# Environment given to tests: REPO, STAGEFS (the daemon binary: a copy of
# $REPO/stagefs taken at start, so rebuilding during a run is safe), PYTHON,
# TEST_NAME, TEST_TMPDIR, TMPDIR, and for Ceph tests CEPH_CONF and
# STAGEFS_CEPH_DIR.  Knobs: STAGEFS_TEST_TMPDIR (where temp dirs go, default
# /tmp), STAGEFS_TEST_TIMEOUT (default per-test timeout), STAGEFS_TEST_KEEP,
# STAGEFS_TEST_OUT (where the logs go, default tests/out; give concurrent
# runs different ones).
#
# The last line printed is "N passed, N failed, N skipped"; the exit status is
# non-zero iff a test failed.
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
OUT=${STAGEFS_TEST_OUT:-$REPO/tests/out}
DEFAULT_TIMEOUT=${STAGEFS_TEST_TIMEOUT:-300}
KILL_GRACE=5		# seconds between the timeout's TERM and its KILL

export REPO
STAGEFS_GIVEN=${STAGEFS:-}
export STAGEFS=${STAGEFS:-$REPO/stagefs}
PYTHON_GIVEN=${PYTHON:-}
export PYTHON=${PYTHON:-/usr/bin/python3}

RUN_TMP=
CEPH_STATE=none		# none | up | failed
CEPH_DIR=
CEPH_FAIL_REASON=
CUR_TMP=
npass=0 nfail=0 nskip=0
failed_names=()

say() { printf '%s\n' "$*"; }

# --- test discovery ----------------------------------------------------------

# Print the tests to run, one absolute path a line.
list_all() {
	local f
	for f in "$REPO"/tests/unit/test_*; do
		[[ -f $f && -x $f && ${f##*/} != *.* ]] && say "$f"
	done
	for f in "$REPO"/tests/integration/*.sh "$REPO"/tests/rados/*.sh; do
		[[ -f $f ]] && say "$f"
	done
}

# Resolve one command-line argument (a path, or a name such as "tree",
# "integration/tree", "test_config") to the absolute path of a test.
resolve() {
	local a=$1 d c
	if [[ -f $a ]]; then
		say "$(cd "$(dirname "$a")" && pwd -P)/$(basename "$a")"
		return 0
	fi
	a=${a#tests/}
	for d in "" unit/ integration/ rados/; do
		for c in "$REPO/tests/$d$a" "$REPO/tests/$d$a.sh"; do
			if [[ -f $c ]]; then
				say "$c"
				return 0
			fi
		done
	done
	return 1
}

# NAME of a test, for its log file and messages:
# $REPO/tests/integration/tree.sh -> integration/tree; a test from outside
# tests/ is named by its file name.
test_name() {
	local n=$1
	if [[ $n == "$REPO"/tests/* ]]; then
		n=${n#"$REPO"/tests/}
	else
		n=$(basename "$n")
	fi
	say "${n%.sh}"
}

# First-lines header value: header FILE KEY -> value of "# KEY: value".
header() {
	local file=$1 key=$2
	# Binaries have no header; grep -a would find garbage, so only read text.
	[[ $file == *.sh ]] || return 0
	head -n 5 "$file" | sed -n "s/^#[[:space:]]*$key:[[:space:]]*//p" | head -n 1
}

needs_ceph() {
	[[ $1 == "$REPO"/tests/rados/* ]] && return 0
	[[ $(header "$1" needs) == *ceph* ]]
}

# --- cleanup -----------------------------------------------------------------

# FUSE mount points at or under $1, deepest first.
# mounts_under DIR [TYPE_REGEX]: mount points under DIR (deepest first) whose
# filesystem type matches TYPE_REGEX (default: any)
mounts_under() {
	local root=$1 re=${2:-.}
	# mountinfo field 5 is the mount point (octal escapes), the fs type follows " - ".
	awk -v re="$re" '{ split($0, a, " - "); split(a[2], b, " ");
	       if (b[1] ~ re) print $5 }' /proc/self/mountinfo |
	while IFS= read -r m; do
		m=$(printf '%b' "$m")
		[[ $m == "$root" || $m == "$root"/* ]] && say "$m"
	done | sort -r
}

# Pids of live (not zombie) processes in session $1, or whose command line
# names directory $2.
leftover_pids() {
	# Through the environment: awk's own command line must not name $dir.
	ps -e -o pid=,sid=,stat=,args= | S=$1 D=$2 ME=$$ awk '
		$3 ~ /^Z/ || $1 == ENVIRON["ME"] { next }
		(ENVIRON["S"] != "" && $2 == ENVIRON["S"]) ||
		(ENVIRON["D"] != "" && index($0, ENVIRON["D"])) { print $1 }'
}

# Kill what a test left behind and unmount what it left mounted.
cleanup_test() {
	local sid=$1 dir=$2 pids m i
	pids=$(leftover_pids "$sid" "$dir")
	if [[ -n $pids ]]; then
		say "runner: killing leftover processes:" >>"$CUR_LOG"
		# shellcheck disable=SC2086
		ps -o pid=,args= -p "$(echo $pids | tr ' ' ,)" >>"$CUR_LOG" 2>&1
		# shellcheck disable=SC2086
		kill -TERM $pids 2>/dev/null
		# shellcheck disable=SC2086
		kill -CONT $pids 2>/dev/null
		for ((i = 0; i < 50; i++)); do
			pids=$(leftover_pids "$sid" "$dir")
			[[ -z $pids ]] && break
			sleep 0.1
		done
		# shellcheck disable=SC2086
		[[ -n $pids ]] && kill -KILL $pids 2>/dev/null
	fi
	[[ -n $dir ]] || return 0
	for m in $(mounts_under "$dir" '^fuse'); do
		say "runner: unmounting leftover mount $m" >>"$CUR_LOG"
		fusermount3 -u -z "$m" >>"$CUR_LOG" 2>&1 || umount -l "$m" >>"$CUR_LOG" 2>&1
	done
	# then whatever else a test mounted there (tmpfs, ramfs, loop devices)
	for m in $(mounts_under "$dir"); do
		say "runner: unmounting leftover mount $m" >>"$CUR_LOG"
		umount -l "$m" >>"$CUR_LOG" 2>&1
	done
}

# san_check DIR LOG: append the sanitizer reports in DIR to LOG and remove
# DIR; true if there were any.
san_check() {
	local dir=$1 log=$2 f found=1
	for f in "$dir"/*; do
		[[ -f $f ]] || continue
		found=0
		say "runner: sanitizer report ${f##*/}:" >>"$log"
		cat "$f" >>"$log"
	done
	rm -rf "$dir"
	[[ $found -eq 0 ]] && say "FAIL: sanitizer report(s) above" >>"$log"
	return $found
}

# The cluster's ports lie inside the kernel's ephemeral range (32768-60999
# by default): a client's outgoing connection could take one between the
# check below and the daemon (or the gateway, started by a test much later)
# binding it.  Reserve the range while the cluster runs (as root), and put
# back what was there.
PORTS_RESERVED=/proc/sys/net/ipv4/ip_local_reserved_ports
PORTS_SAVED= PORTS_HELD=0
ports_reserve() {
	[[ -w $PORTS_RESERVED ]] || return 0
	PORTS_SAVED=$(cat "$PORTS_RESERVED") || return 0
	printf '%s\n' "${PORTS_SAVED:+$PORTS_SAVED,}$1-$2" >"$PORTS_RESERVED" 2>/dev/null &&
		PORTS_HELD=1
}
ports_release() {
	[[ $PORTS_HELD == 1 ]] || return 0
	PORTS_HELD=0
	printf '%s\n' "${PORTS_SAVED:-}" >"$PORTS_RESERVED" 2>/dev/null
}

ceph_stop() {
	[[ $CEPH_STATE == up ]] || return 0
	CEPH_STATE=none
	say "runner: stopping the Ceph cluster"
	"$REPO/tools/dev/ceph-cluster.sh" stop "$CEPH_DIR" >>"$OUT/ceph-cluster.log" 2>&1 ||
		say "runner: ceph-cluster.sh stop failed (see ${OUT#"$REPO"/}/ceph-cluster.log)"
	ports_release
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	[[ -n $CUR_TMP ]] && cleanup_test "" "$CUR_TMP"
	ceph_stop
	# Keep the directories of failed tests (and everything with
	# STAGEFS_TEST_KEEP=1); the run directory goes once it is empty.
	if [[ -n $RUN_TMP && -d $RUN_TMP && ${STAGEFS_TEST_KEEP:-0} != 1 ]]; then
		rm -rf --one-file-system "${RUN_TMP:?}/bin" "$RUN_TMP/sid" "$RUN_TMP/san" "$RUN_TMP/python3"
		rmdir "$RUN_TMP" 2>/dev/null
	fi
	exit "$rc"
}

on_signal() {
	say "runner: interrupted"
	[[ -n ${CUR_PID:-} ]] && kill -TERM -- "-$CUR_PID" 2>/dev/null
	exit 130
}

# --- Ceph --------------------------------------------------------------------

ceph_start() {
	local script=$REPO/tools/dev/ceph-cluster.sh conf rc
	[[ $CEPH_STATE == none ]] || return 0
	if [[ ! -x $script ]]; then
		CEPH_STATE=failed
		CEPH_FAIL_REASON="tools/dev/ceph-cluster.sh is missing or not executable"
		return 0
	fi
	CEPH_DIR=$RUN_TMP/ceph
	mkdir -p "$CEPH_DIR"
	# Another cluster (a developer's, a parallel run) may hold the default
	# ports: take the first free 32-port range unless told which.
	if [[ -z ${CEPH_PORT_BASE:-} ]]; then
		local base used
		used=$(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }' | sort -un)
		for ((base = 46789; base < 46789 + 32 * 40; base += 32)); do
			awk -v lo="$base" -v hi=$((base + 31)) '$1 >= lo && $1 <= hi { f = 1 } END { exit !f }' \
				<<<"$used" || break
		done
		export CEPH_PORT_BASE=$base
	fi
	say "runner: starting a Ceph cluster in $CEPH_DIR (ports from $CEPH_PORT_BASE)"
	ports_reserve "$CEPH_PORT_BASE" $((CEPH_PORT_BASE + 31))
	# Mark it up first so that the EXIT trap stops a half-started cluster too.
	CEPH_STATE=up
	conf=$(timeout -k 10 300 "$script" start "$CEPH_DIR" 2>>"$OUT/ceph-cluster.log" </dev/null)
	rc=$?
	conf=$(printf '%s\n' "$conf" | tail -n 1)
	if [[ $rc -ne 0 || ! -f $conf ]]; then
		ceph_stop
		CEPH_STATE=failed
		CEPH_FAIL_REASON="Ceph cluster did not start (rc=$rc, see ${OUT#"$REPO"/}/ceph-cluster.log)"
		say "runner: $CEPH_FAIL_REASON"
		tail -n 20 "$OUT/ceph-cluster.log" | sed 's/^/    /'
		return 0
	fi
	export CEPH_CONF=$conf STAGEFS_CEPH_DIR=$CEPH_DIR
}

# --- one test ----------------------------------------------------------------

fmt_secs() { awk -v ns="$1" 'BEGIN { printf "%.1fs", ns / 1e9 }'; }

run_one() {
	local t=$1 name limit log tmp rc t0 t1 secs sidfile sid reason sandir san
	name=$(test_name "$t")
	log=$OUT/$name.log
	mkdir -p "$(dirname "$log")"
	CUR_LOG=$log

	if needs_ceph "$t"; then
		ceph_start
		if [[ $CEPH_STATE != up ]]; then
			say "$CEPH_FAIL_REASON" >"$log"
			say "SKIP $name: $CEPH_FAIL_REASON"
			nskip=$((nskip + 1))
			return
		fi
	fi

	limit=$(header "$t" timeout)
	[[ $limit =~ ^[0-9]+$ ]] || limit=$DEFAULT_TIMEOUT
	tmp=$(mktemp -d "$RUN_TMP/$(basename "$name").XXXXXX")
	CUR_TMP=$tmp
	sidfile=$RUN_TMP/sid

	# sanitizer reports, from processes of any user (runuser): see the top
	sandir=$RUN_TMP/san/$(basename "$name")
	san=0
	mkdir -p "$sandir"
	chmod 1777 "$sandir"

	t0=$(date +%s%N)
	# The inner bash records its pid, which setsid made a session (and
	# process group) id, then becomes the timeout.  timeout kills the test
	# with TERM, and KILL_GRACE seconds later with KILL.
	# shellcheck disable=SC2016 # $$ and $1 are the inner bash's
	(
		cd "$REPO" &&
		TEST_NAME=$name TEST_TMPDIR=$tmp TMPDIR=$tmp \
		ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$sandir/asan \
		UBSAN_OPTIONS=print_stacktrace=1:${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$sandir/ubsan \
		LSAN_OPTIONS=suppressions=$REPO/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS} \
		exec setsid -w bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$sidfile" \
			timeout -k "$KILL_GRACE" "$limit" "$t"
	) </dev/null >"$log" 2>&1 &
	CUR_PID=$!
	{ wait "$CUR_PID"; } 2>/dev/null
	rc=$?
	CUR_PID=
	t1=$(date +%s%N)
	secs=$(fmt_secs $((t1 - t0)))
	sid=$(cat "$sidfile" 2>/dev/null)
	rm -f "$sidfile"

	cleanup_test "$sid" "$tmp"
	if san_check "$sandir" "$log"; then
		san=1
		[[ $rc -eq 0 || $rc -eq 77 ]] && rc=1
	fi

	case $rc in
	0)
		say "PASS $name ($secs)"
		npass=$((npass + 1))
		;;
	77)
		reason=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
		reason=${reason#SKIP: }
		say "SKIP $name: ${reason:-no reason given}"
		nskip=$((nskip + 1))
		;;
	*)
		if [[ $rc -eq 124 || $rc -eq 137 ]]; then
			say "runner: timed out after ${limit}s" >>"$log"
			say "FAIL $name (timeout after ${limit}s, rc=$rc, see ${OUT#"$REPO"/}/$name.log)"
		elif [[ $san -eq 1 ]]; then
			say "FAIL $name (sanitizer report, rc=$rc, $secs, see ${OUT#"$REPO"/}/$name.log)"
		else
			say "FAIL $name (rc=$rc, $secs, see ${OUT#"$REPO"/}/$name.log)"
		fi
		if [[ $san -eq 1 ]]; then
			grep -E -m 20 '^==[0-9]+==ERROR|^SUMMARY|runtime error' "$log" | sed 's/^/    /'
		else
			tail -n 30 "$log" | sed 's/^/    /'
		fi
		nfail=$((nfail + 1))
		failed_names+=("$name")
		;;
	esac

	if [[ $rc -ne 0 && $rc -ne 77 ]] || [[ ${STAGEFS_TEST_KEEP:-0} == 1 ]]; then
		say "    (kept $tmp)" >>"$log"
	else
		rm -rf --one-file-system "$tmp"
	fi
	CUR_TMP=
}

# A sanitizer build's libstagefs.so needs the ASan runtime loaded first: in
# one, point PYTHON (unless the caller set it) at a wrapper that preloads it
# when PYTHONPATH names gpudirect/ (where stagefs.py, which loads the
# library, lives), without leak checks for Python itself (gpuread checks
# the library's).  Only then: ASan turns mlock() into a no-op, and
# noopen.sh's pin.py needs it.
python_for_asan() {
	local rt
	[[ -z $PYTHON_GIVEN ]] || return 0
	rt=$(ldd "$REPO/gpudirect/libstagefs.so" 2>/dev/null |
		awk '/lib(asan|clang_rt\.asan)/ { print $3; exit }')
	[[ -n $rt && -f $rt ]] || return 0
	cat >"$RUN_TMP/python3" <<EOF
#!/bin/sh
case ":\${PYTHONPATH:-}:" in
*/gpudirect:* | */gpudirect/:*)
	export LD_PRELOAD="$rt\${LD_PRELOAD:+ \$LD_PRELOAD}"
	export ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}detect_leaks=0" ;;
esac
exec "$PYTHON" "\$@"
EOF
	chmod 755 "$RUN_TMP/python3"
	PYTHON=$RUN_TMP/python3
}

# --- main --------------------------------------------------------------------

main() {
	local tests=() t a suite_t0

	if [[ ${1:-} == -h || ${1:-} == --help ]]; then
		sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
	fi
	if [[ $# -eq 0 ]]; then
		mapfile -t tests < <(list_all)
	else
		for a in "$@"; do
			if ! t=$(resolve "$a"); then
				say "run.sh: no such test: $a" >&2
				exit 2
			fi
			tests+=("$t")
		done
	fi

	mkdir -p "$OUT" "${STAGEFS_TEST_TMPDIR:-/tmp}"
	RUN_TMP=$(mktemp -d "${STAGEFS_TEST_TMPDIR:-/tmp}/stagefs-tests.XXXXXX")
	# other users write sanitizer reports under it (RUN_TMP/san)
	chmod 711 "$RUN_TMP"
	# Test the binary as it is now: a rebuild while the suite runs must not
	# swap daemons between (or within) tests.
	# The stagefs-* tools go along: `stagefs CMD` runs the stagefs-CMD
	# beside it.
	if [[ -z $STAGEFS_GIVEN && -x $STAGEFS ]]; then
		mkdir "$RUN_TMP/bin"
		cp -p "$STAGEFS" "$REPO"/stagefs-* "$RUN_TMP/bin/" 2>/dev/null || true
		STAGEFS=$RUN_TMP/bin/stagefs
	fi
	python_for_asan
	: >"$OUT/ceph-cluster.log"
	trap on_exit EXIT
	trap on_signal INT TERM

	suite_t0=$(date +%s%N)
	for t in "${tests[@]}"; do
		run_one "$t"
	done
	ceph_stop

	say "suite took $(fmt_secs $(($(date +%s%N) - suite_t0)))"
	[[ $nfail -gt 0 ]] && say "failed: ${failed_names[*]}"
	say "$npass passed, $nfail failed, $nskip skipped"
	[[ $nfail -eq 0 ]]
}

main "$@"
