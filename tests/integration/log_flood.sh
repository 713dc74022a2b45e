#!/usr/bin/env bash
# An unprivileged user floods the daemon for 2 s with what makes it log (control connections past its cap, PEERS reload=1, WARMUPs of datasets denied to it in turns, opens of those datasets, garbage on the metrics port): the log grows by fewer than 50 lines, a later line says how many were suppressed, and legitimate requests are answered throughout (issue 27).
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
command -v runuser >/dev/null || skip "runuser is not installed"

A=sfs_flood
need_users $A
T=$TEST_TMPDIR
chmod 755 "$T" "$(dirname "$T")"
SRC=$T/src
for d in open a b; do
	mkdir -p "$SRC/$d"
	head -c 100000 /dev/urandom >"$SRC/$d/f"
done
chmod -R a+rX "$SRC"

port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
peer_port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])')
(umask 077 && "$PYTHON" -c "import secrets; print(secrets.token_hex(32))" >"$T/peer.key")
# a and b are root's: the attacker is refused in turns, which a "once per
# source" rule would log every time; a peer group, so that PEERS reload=1
# reaches its root-only check; 4 control connections per user
cat >"$T/stagefs.conf" <<EOC
[stagefs]
chunk_size = 1M
metrics_port = $port
control_user_connections = 4
peer_listen = 127.0.0.2:$peer_port
peer_key_file = $T/peer.key

[dataset open]
source = dir://$SRC/open

[dataset a]
source = dir://$SRC/a
allow = user:root

[dataset b]
source = dir://$SRC/b
allow = user:root
EOC
MNT=$T/mnt
sfs_mount "" "$MNT" -c "$T/stagefs.conf"
SOCK=$(cat "$MNT/.stagefs/socket")
LOG=$(sfs_log "$MNT")
chmod 1777 "$T"

# flood.py SOCK MNT PORT SECS: every bad move in turns for SECS seconds;
# prints how many of each it made (and how many came back as expected)
cat >"$T/flood.py" <<'PY'
import os, socket, sys, time
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
import hostile
sock, mnt, port, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
held, _, _ = hostile.hold(sock, 4)          # the cap: every further connection is refused
ctl = held[0]
f = ctl.makefile("rb")
def req(lines, until=("OK", "ERR", "DONE")):
    ctl.sendall("".join(l + "\n" for l in lines).encode())
    while True:
        got = f.readline().decode()
        if not got or got.startswith(until):
            return got
n = dict(refused=0, peers=0, warmup=0, denied=0, http=0, bad=0)
end = time.monotonic() + secs
turn = 0
while time.monotonic() < end:
    turn += 1
    ds = "ab"[turn % 2]
    s, line = hostile.ctl_hello(sock)
    s.close()
    n["refused"] += line.startswith("ERR code=EAGAIN")
    n["peers"] += req(["PEERS reload=1"]).startswith("ERR code=EPERM")
    n["warmup"] += req(["WARMUP mode=check", "PATH " + ds, "END"]).startswith("DONE")
    try:                                    # hidden from it: ENOENT (or EACCES)
        open(os.path.join(mnt, ds, "f"), "rb").close()
    except (FileNotFoundError, PermissionError):
        n["denied"] += 1
    h = socket.create_connection(("127.0.0.1", port))
    h.sendall(b"BREW /pot HTCPCP/1.0\r\n\r\n")
    h.close()
    n["http"] += 1
    n["bad"] += req(["NONSENSE"]).startswith("ERR")
print(" ".join("%s=%d" % kv for kv in n.items()))
PY
# one refused connection and one refused reload: a line each, unless
# limited, which says how many were suppressed since the last one let through
cat >"$T/poke.py" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
import hostile
held, refused, _ = hostile.hold(sys.argv[1], 5)
s = held[0]
s.sendall(b"PEERS reload=1\n")
s.makefile("rb").readline()
print("refused=%d" % refused)
PY

# settle: the mount's own lines are written
wait_for -t 10 test -s "$LOG"
before=$(wc -l <"$LOG")
t0=$SECONDS
counts=$(as $A "$PYTHON" "$T/flood.py" "$SOCK" "$MNT" "$port" 2)
lines=$(($(wc -l <"$LOG") - before))
log "flood: $counts; the log grew by $lines lines"
declare -A N
for kv in $counts; do N[${kv%%=*}]=${kv#*=}; done
# the flood was one: every move got its refusal, many times over
for k in refused peers warmup denied http bad; do
	assert_ge "${N[$k]}" 50 "$k moves in 2 s"
done
assert_eq "${N[denied]}" "${N[warmup]}" "opens refused as WARMUPs were made"
((lines < 50)) || die "the log grew by $lines lines under a flood of $((N[refused] * 6)) bad moves: $(tail -n 20 "$LOG")"
# the kinds that a flood could make log: each let a few lines through
for pat in "control: uid $(id -u $A) pid [0-9]* refused: too many control connections" \
	"control: uid $(id -u $A) may not reload the peer group" \
	"control: uid $(id -u $A) pid [0-9]*: check of 1 path" \
	"access denied: uid $(id -u $A) may not read dataset"; do
	grep -q "$pat" "$LOG" || die "no '$pat' line in the log"
done

# what was suppressed is counted, in the next line let through (an
# interval of 10 s later)
suppressed() {
	as $A "$PYTHON" "$T/poke.py" "$SOCK" >/dev/null
	grep -Eq "refused: too many control connections.* \(([0-9]{2,}) similar lines suppressed before this one\)" "$LOG" &&
		grep -Eq "may not reload the peer group.* \(([0-9]{2,}) similar lines suppressed before this one\)" "$LOG"
}
wait_for -t 20 suppressed ||
	die "no line says how many were suppressed: $(tail -n 20 "$LOG")"
grep -E "suppressed before this one" "$LOG" | sed 's/^/    /' >&2
log "suppressed counts after $((SECONDS - t0)) s"

# legitimate requests are answered, the attacker's own included
got=$(as $A "$PYTHON" -c '
import os, sys
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
import hostile
s, line = hostile.ctl_hello(sys.argv[1])
s.sendall(b"PING\n")
print(line.split()[0], s.makefile("rb").readline().decode().strip())' "$SOCK")
[[ $got == "OK OK" ]] || die "the attacker's PING after the flood: $got"
cmp "$MNT/open/f" "$SRC/open/f" || die "a read of the open dataset after the flood"
as $A cmp "$MNT/open/f" "$SRC/open/f" || die "the attacker's read of the open dataset after the flood"
"$STAGEFS" warmup "$MNT/a" >/dev/null || die "root's warmup of a after the flood"
sfs_umount "$MNT"
log "ok"
