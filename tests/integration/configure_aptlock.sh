#!/usr/bin/env bash
# ./configure --install-deps waits for the dpkg lock another apt-get holds (saying so, naming the holder), then goes on once it is free; with --apt-lock-timeout it gives up at the deadline; it never runs apt-get here (every package is already installed).
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_root
command -v dpkg-query >/dev/null || skip "not a Debian system (no dpkg-query)"
[[ -r /proc/locks ]] || skip "no /proc/locks"
LOCK=/var/lib/dpkg/lock-frontend
[[ -e $LOCK ]] || skip "$LOCK does not exist"

# Only where every package --install-deps wants is installed: this test must
# never install anything.  The lists are install-deps' own.
eval "$(sed -n '/^deps_required="/,/"$/p; /^deps_optional="/p' "$REPO/install-deps")"
# shellcheck disable=SC2154  # set by the eval above
for p in $deps_required $deps_optional; do
	dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | contains '^ii' ||
		skip "package $p is not installed: configure --install-deps would run apt-get"
done
# apt busy (unattended upgrades): holding its lock would disturb it
lock_held() {
	local f key dev
	for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock; do
		[[ -e $f ]] || continue
		dev=$((0x$(stat -c %D "$f")))
		key=$(printf '%02x:%02x:%s' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))) "$(stat -c %i "$f")")
		awk -v k="$key" '$2 != "->" && $6 == k { f = 1 } END { exit !f }' /proc/locks && return 0
	done
	return 1
}
lock_held && skip "apt or dpkg is running (its lock is held): not competing with it"
pgrep -x 'apt-get|apt|dpkg|unattended-upgr' >/dev/null && skip "apt or dpkg is running: not competing with it"

# a copy of the tree's configure, so that the tree's config.mk stays as it is
W=$TEST_TMPDIR/tree
mkdir -p "$W"
cp "$REPO/configure" "$REPO/install-deps" "$REPO/VERSION" "$W/"

# hold_lock SECS: take dpkg's frontend lock as apt does (fcntl), print "locked"
hold_lock() {
	"$PYTHON" - "$LOCK" "$1" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
PY
	HOLDER=$!
	wait_for -t 10 lock_held || die "could not take $LOCK"
}
now_ms() { date +%s%3N; }

# 1. held for 4 s: configure says it waits, waits, then carries on
hold_lock 4
t0=$(now_ms) rc=0
"$W/configure" --install-deps --disable-cuda >"$TEST_TMPDIR/out1" 2>&1 || rc=$?
took=$(($(now_ms) - t0))
cat "$TEST_TMPDIR/out1" >&2
wait_pid_exit "$HOLDER" 10 || die "the lock holder did not exit"
[[ $rc == 0 ]] || die "configure --install-deps failed (rc=$rc) after the lock was freed"
grep -q "holds the dpkg/apt lock.*waiting" "$TEST_TMPDIR/out1" || die "configure did not say it waits for the lock"
grep -q "pid $HOLDER " "$TEST_TMPDIR/out1" || die "configure did not name the holder, pid $HOLDER"
grep -q "all Debian dependencies are already installed" "$TEST_TMPDIR/out1" || die "configure did not go on to check the packages"
[[ -f $W/config.mk ]] || die "configure did not write config.mk"
((took >= 3000)) || die "configure went on after ${took} ms, with the lock held for 4 s"
log "configure waited for the lock and went on after ${took} ms"

# 2. held for 30 s, --apt-lock-timeout=2: a clear refusal in about 2 s
rm -f "$W/config.mk"
hold_lock 30
t0=$(now_ms) rc=0
"$W/configure" --install-deps --disable-cuda --apt-lock-timeout=2 >"$TEST_TMPDIR/out2" 2>&1 || rc=$?
took=$(($(now_ms) - t0))
kill "$HOLDER" 2>/dev/null || true
wait_pid_exit "$HOLDER" 10 || true
cat "$TEST_TMPDIR/out2" >&2
[[ $rc != 0 ]] || die "configure succeeded with the lock held past --apt-lock-timeout"
grep -q "still holds the dpkg/apt lock after 2s" "$TEST_TMPDIR/out2" || die "configure's refusal does not say why"
((took <= 6000)) || die "configure gave up after ${took} ms; --apt-lock-timeout=2"
[[ ! -f $W/config.mk ]] || die "configure wrote config.mk after giving up"
log "configure gave up after ${took} ms with --apt-lock-timeout=2"
