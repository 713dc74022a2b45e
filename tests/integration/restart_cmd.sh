#!/usr/bin/env bash
# `stagefs restart`: an unsupervised mount is refused (exit 3, saying how to get a supervised one) and keeps serving; a non-stagefs path, a path inside a mount and bad usage are refused; a supervised mount (whose READY=1 comes from the daemon, the supervisor's child, naming the supervisor: the unit's NotifyAccess=all) restarts under readers that check every byte (the new generation, pause and version printed; the new daemon sends READY=1 too), with --wait 0 too; a binary on disk that refuses the state gives exit 4 naming the log and the old daemon stays; --all --binary restarts only the mounts of that binary; a supervisor that is gone (its pid now the reaper's) is never signalled; a background mount's new daemon logs to syslog.
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
T=$TEST_TMPDIR
bindir=$(dirname "$STAGEFS")
[[ -x $bindir/stagefs-restart ]] || die "$bindir/stagefs-restart is not built (run make)"
"$PYTHON" - "$T/src" <<'EOF'
import os, random, sys
r = random.Random(11)
for i in range(40):
    d = os.path.join(sys.argv[1], "d%d" % (i % 3))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%02d" % i), "wb") as f:
        f.write(r.randbytes(r.choice([4096, 70000, 300000, 1100000])))
EOF
version=$("$STAGEFS" --version | awk '{print $2}')

# restart ARGS...: run `stagefs restart`, its output in $T/out, its status in $rc
restart() {
	rc=0
	"$STAGEFS" restart "$@" >"$T/out" 2>&1 || rc=$?
	log "stagefs restart $*: exit $rc: $(cat "$T/out")"
}
gen() { stat_get "$1" daemon_generation; }

# --- a mount without a supervisor (-f: supervise=auto is off): refused, untouched
plain=$T/plain
sfs_mount "dir://$T/src" "$plain" cache_dir="$T/cache-plain"
[[ $(stat_get "$plain" supervisor_pid) == 0 ]] || die "a -f mount has a supervisor"
restart "$plain"
assert_eq "$rc" 3 "stagefs restart of an unsupervised mount"
if ! grep -q "not supervised" "$T/out" || ! grep -q "supervise=on" "$T/out"; then
	die "the refusal does not say why and what to do: $(cat "$T/out")"
fi
cmp -s "$T/src/d0/f00" "$plain/d0/f00" || die "the unsupervised mount stopped serving"
assert_eq "$(gen "$plain")" 1 "generation of the unsupervised mount"

# --- what is not a stagefs mount, or not its mount point; usage
restart "$T/src"
assert_eq "$rc" 1 "stagefs restart of a plain directory"
grep -q "not a stagefs mount" "$T/out" || die "no clear message for a plain directory"
restart "$plain/d0"
assert_eq "$rc" 1 "stagefs restart of a directory inside a mount"
grep -q "inside the stagefs mount $plain" "$T/out" || die "no clear message for a path inside a mount"
restart
assert_eq "$rc" 2 "stagefs restart without a mount point"
restart --wait soon "$plain"
assert_eq "$rc" 2 "stagefs restart --wait soon"
"$STAGEFS" restart --help | contains "^usage: stagefs restart" || die "stagefs restart --help"

# --- a supervised mount, from a binary of its own (replaced below), under readers
# (as the unit runs it: the sd_notify messages come from the daemon, the
# supervisor's child, naming the supervisor: the unit needs NotifyAccess=all)
"$PYTHON" - "$T/notify.sock" "$T/notes" <<'PY' &
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind(sys.argv[1])
with open(sys.argv[2], "w") as f:
    while True:
        msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
        pid = [struct.unpack("iii", d[:12])[0] for l, t, d in anc
               if l == socket.SOL_SOCKET and t == socket.SCM_CREDENTIALS]
        f.write("%s|%s\n" % (pid[0] if pid else "?", msg.decode().replace("\n", ";")))
        f.flush()
PY
listener=$!
wait_for -t 10 test -S "$T/notify.sock" || die "the test's notify socket did not appear"
mkdir -p "$T/bin"
cp -p "$STAGEFS" "$T/bin/stagefs"
sup_mnt=$T/sup
NOTIFY_SOCKET=$T/notify.sock STAGEFS=$T/bin/stagefs sfs_mount "dir://$T/src" "$sup_mnt" supervise=on cache_dir="$T/cache-sup"
sup=$(sfs_pid "$sup_mnt")
logf=$(sfs_log "$sup_mnt")
assert_eq "$(stat_get "$sup_mnt" supervisor_pid)" "$sup" "supervisor_pid of the supervised mount"
wait_for -t 10 grep -q "READY=1;MAINPID=$sup;" "$T/notes" || die "no READY=1 naming the supervisor: $(cat "$T/notes")"
from=$(grep "READY=1" "$T/notes" | head -n 1 | cut -d'|' -f1)
[[ $from != "$sup" && $(ps -o ppid= -p "$from" | tr -d ' ') == "$sup" ]] ||
	die "READY=1 came from $from, not from a child of the supervisor $sup"
rm -f "$T/stop"
"$PYTHON" "$REPO/tests/verify_reader.py" --threads 3 "$sup_mnt" "$T/src" "$T/stop" >"$T/reader.json" &
reader=$!
sleep 0.5

restart "$sup_mnt"
assert_eq "$rc" 0 "stagefs restart of a supervised mount"
grep -q "^$sup_mnt: restarted: daemon generation 2 (was 1), takeover pause [0-9]* ms, stagefs $version\$" "$T/out" ||
	die "unexpected output: $(cat "$T/out")"
assert_eq "$(gen "$sup_mnt")" 2 "generation after stagefs restart"
wait_for -t 10 eval '[[ $(grep -c "READY=1;MAINPID=$sup;" "$T/notes") -ge 2 ]]' ||
	die "the new daemon did not tell the service manager it is ready: $(cat "$T/notes")"
kill "$listener"

restart --wait 0 "$sup_mnt"
assert_eq "$rc" 0 "stagefs restart --wait 0"
grep -q "asked the supervisor (pid $sup) to restart the daemon" "$T/out" || die "--wait 0 printed $(cat "$T/out")"
wait_for -t 30 eval '[[ $(gen "$sup_mnt") == 3 ]]' || die "no new daemon after --wait 0"

# the binary on disk refuses the mount's state (as a newer, incompatible one
# would: exit 76 in the check): exit 4, the old daemon serves on
printf '#!/bin/sh\necho "stagefs: test: this binary refuses the state" >&2\nexit 76\n' >"$T/bin/stagefs.new"
chmod +x "$T/bin/stagefs.new"
mv "$T/bin/stagefs.new" "$T/bin/stagefs"
t0=$(date +%s%N)
restart --wait 3 "$sup_mnt"
took=$((($(date +%s%N) - t0) / 1000000))
assert_eq "$rc" 4 "stagefs restart when the binary on disk refuses"
if ! grep -q "no new daemon took the mount over within 3 s (daemon generation still 3)" "$T/out" ||
   ! grep -q "log" "$T/out"; then
	die "the refusal's message: $(cat "$T/out")"
fi
((took < 10000)) || die "stagefs restart --wait 3 took $took ms"
grep -q "cannot take the mount over (exit status 76" "$logf" || die "the supervisor did not log the refusal"
assert_eq "$(gen "$sup_mnt")" 3 "generation after a refused restart"
cp -p "$STAGEFS" "$T/bin/stagefs.new"
mv "$T/bin/stagefs.new" "$T/bin/stagefs"

# --all --binary: the mounts of that binary only (the unsupervised one is named)
restart --all --binary "$T/bin/stagefs" --wait 30
assert_eq "$rc" 0 "stagefs restart --all --binary"
grep -q "^$sup_mnt: restarted: daemon generation 4 (was 3)" "$T/out" || die "--all did not restart $sup_mnt"
grep -q "^$plain: not supervised: left as it is" "$T/out" || die "--all did not name $plain"
assert_eq "$(gen "$plain")" 1 "generation of the unsupervised mount after --all"

touch "$T/stop"
rc=0
wait "$reader" || rc=$?
log "readers across 4 restarts and a refusal: $(cat "$T/reader.json")"
assert_eq "$rc" 0 "readers across the restarts ($(cat "$T/reader.json"))"

# --- the supervisor is gone: the daemon serves on alone and says it is not
# supervised any more (supervisor_pid 0, not its new parent, the reaper),
# so nothing is signalled
kill -KILL "$sup"
wait "$sup" 2>/dev/null || true
wait_for -t 10 eval '[[ $(stat_get "$sup_mnt" supervisor_pid) == 0 ]]' || die "supervisor_pid still $(stat_get "$sup_mnt" supervisor_pid)"
restart "$sup_mnt"
assert_eq "$rc" 3 "stagefs restart after the supervisor's end"
grep -q "not supervised" "$T/out" || die "no clear message: $(cat "$T/out")"
cmp -s "$T/src/d1/f01" "$sup_mnt/d1/f01" || die "the daemon stopped serving"
fusermount3 -u "$sup_mnt" || die "cannot unmount $sup_mnt"
unset "SFS_PID[$sup_mnt]"
sfs_umount "$plain"

# --- in the background, a new daemon logs where the first did: syslog (in a
# mount namespace of its own with a /dev holding a /dev/log that we read)
if unshare -m --propagation private true 2>/dev/null; then
	mkdir -p "$T/bg"
	cat >"$T/ns.sh" <<'EOF'
set -e
mount -t tmpfs none /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/urandom c 1 9
mknod -m 600 /dev/fuse c 10 229
"$PYTHON" -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
open(sys.argv[1] + ".ready", "w").close()
with open(sys.argv[1], "w") as f:
    while True:
        f.write(s.recv(65536).decode(errors="replace") + "\n")
        f.flush()
' "$T/syslog" &
listener=$!
for _ in $(seq 100); do [[ -e $T/syslog.ready ]] && break; sleep 0.05; done
"$STAGEFS" -o "cache_dir=$T/cache-bg,runtime_dir=$T/run-bg" "dir://$T/src" "$T/bg"
sup=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["supervisor_pid"])' "$T/bg/.stagefs/stats")
rc=0
"$STAGEFS" restart "$T/bg" || rc=$?
fusermount3 -u "$T/bg" || true
for _ in $(seq 100); do kill -0 "$sup" 2>/dev/null || break; sleep 0.05; done
sleep 0.2
kill "$listener"
exit $rc
EOF
	rc=0
	env T="$T" STAGEFS="$STAGEFS" PYTHON="$PYTHON" unshare -m --propagation private bash "$T/ns.sh" \
		>"$T/ns.out" 2>&1 || rc=$?
	cat "$T/ns.out" >&2
	assert_eq "$rc" 0 "stagefs restart of a background mount"
	grep -q "took the mount $T/bg over (daemon generation 2)" "$T/syslog" ||
		die "the new daemon of a background mount did not log to syslog: $(cat "$T/syslog")"
	log "syslog: $(grep -c . "$T/syslog") lines, the new daemon's among them"
else
	log "no unshare -m here: the syslog check is skipped"
fi
log "ok"
