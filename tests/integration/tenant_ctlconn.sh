#!/usr/bin/env bash
# One user cannot starve another of control connections: a user holding 300 gets 64 (control_user_connections) and a clear refusal, the other user's warmup and root's still work; idle connections close after control_idle_timeout, ones holding a cache file or running a warmup do not, and the client library reconnects.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

LIB=$REPO/gpudirect/libstagefs.so
[[ -f $LIB ]] || die "$LIB is not built (make)"

A=sfs_ten_a B=sfs_ten_b
need_users $A $B

T=$TEST_TMPDIR
chmod 755 "$T" "$(dirname "$T")"
mkdir -p "$T/data"
for i in 1 2 3 4; do head -c $((300 * 1024 + i)) /dev/urandom >"$T/data/f$i"; done
head -c $((10 * 1024 * 1024)) /dev/urandom >"$T/data/slow"
chmod -R a+rX "$T/data"

# hold.py SOCK N SECS [STOP]: open N connections and say HELLO on each;
# print "ok=K refused=R msg=M" (M: the first refusal's message), keep them
# open SECS seconds (or until the file STOP exists), then print how many
# the daemon had closed by then.
cat >"$T/hold.py" <<'PY'
import os, sys, time
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
import hostile
path, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
stop = sys.argv[4] if len(sys.argv) > 4 else None
held, refused, msg = hostile.hold(path, n)
print("ok=%d refused=%d msg=%s" % (len(held), refused, msg), flush=True)
end = time.monotonic() + secs
while time.monotonic() < end and not (stop and os.path.exists(stop)):
    time.sleep(0.05)
print("closed=%d" % hostile.closed_by_peer(held), flush=True)
PY

# --- defaults: a user's connections are capped, others still get in ---
MNT=$T/mnt
sfs_mount "dir://$T/data" "$MNT"
SOCK=$(cat "$MNT/.stagefs/socket")
as $A "$PYTHON" "$T/hold.py" "$SOCK" 300 60 "$T/hold.stop" >"$T/hold.out" &
hold=$!
wait_for -t 30 grep -q "^ok=" "$T/hold.out" || die "the holder did not connect"
read -r ok refused msg <<<"$(head -1 "$T/hold.out")"
log "$A: $ok $refused $msg"
[[ $ok == ok=64 ]] || die "$A holds ${ok#ok=} connections, want 64 (control_user_connections)"
[[ $refused == refused=236 ]] || die "$A: ${refused#refused=} refused, want 236"
grep -q "EAGAIN: too many control connections: uid $(id -u $A) has 64 open.*control_user_connections" "$T/hold.out" ||
	die "the refusal does not say why: $(head -1 "$T/hold.out")"
# the other user, and root, are not starved
as $B "$STAGEFS" warmup -q "$MNT" 2>"$T/wb.err" || die "$B's warmup failed while $A holds connections: $(cat "$T/wb.err")"
"$STAGEFS" warmup -q --check "$MNT" 2>"$T/wr.err" || die "root's check failed: $(cat "$T/wr.err")"
# the user over its limit gets the daemon's reason, not "Broken pipe"
as $A "$STAGEFS" warmup -q --check "$MNT" >"$T/wa.out" 2>&1 && die "$A's 65th connection was accepted"
grep -q "control_user_connections" "$T/wa.out" || die "$A's warmup does not print the reason: $(cat "$T/wa.out")"
touch "$T/hold.stop"
wait "$hold" || die "the holder failed"
log "limits: $A capped at 64, $B's warmup and root's check got in, the refusal says why"
sfs_umount "$MNT"

# --- a small server: the root reserve and the idle timeout ---
sfs_mount "dir://$T/data" "$MNT" control_max_connections=32 control_idle_timeout=4s \
	backend_max_rate=1M cache_dir="$T/cache2"
SOCK=$(cat "$MNT/.stagefs/socket")
as $A "$PYTHON" "$T/hold.py" "$SOCK" 40 8 >"$T/hold2.out" &
hold=$!
wait_for -t 30 grep -q "^ok=" "$T/hold2.out" || die "the holder did not connect"
read -r ok refused msg <<<"$(head -1 "$T/hold2.out")"
# per user: at most the 32 less root's 16
[[ $ok == ok=16 ]] || die "$A holds ${ok#ok=} of 32 connections, want 16 (16 kept for root)"
"$STAGEFS" warmup -q --check "$MNT" 2>"$T/wr.err" || die "root's check failed: $(cat "$T/wr.err")"
as $B "$STAGEFS" warmup -q --check "$MNT" >"$T/wb.out" 2>&1 && die "$B got one of root's 16"
grep -q "control_max_connections" "$T/wb.out" || die "no reason for $B: $(cat "$T/wb.out")"
wait "$hold" || die "the holder failed"
grep -q "^closed=16$" "$T/hold2.out" || die "idle connections not closed after 4 s: $(tail -1 "$T/hold2.out")"
log "reserve: $A got 16 of 32, root got in, $B was told why; idle connections closed"

# a warmup longer than the idle timeout (10 MiB at 1 MiB/s, after a burst) runs to its end
t0=$(date +%s%N)
as $B "$STAGEFS" warmup -q "$MNT/slow" 2>"$T/ws.err" || die "a slow warmup failed: $(cat "$T/ws.err")"
ms=$((($(date +%s%N) - t0) / 1000000))
((ms > 4500)) || die "the slow warmup took $ms ms: not longer than the 4 s idle timeout"
log "a warmup of $ms ms outlived the 4 s idle timeout"

# a connection holding a cache file is not idle; the client library
# reconnects after its pooled connection was closed as idle
PYTHONPATH=$REPO/gpudirect STAGEFS_LIB=$LIB as $B "$PYTHON" - "$MNT" <<'PY' || die "client library (see above)"
import os, sys, time
import stagefs
mnt = sys.argv[1]
def check(f, rel):
    buf = bytearray(f.size)
    if f.read_into(0, buf) != f.size or bytes(buf) != open(os.path.join(mnt, rel), "rb").read():
        sys.exit("%s: wrong bytes" % rel)
    if f.via != "cache_fd":
        sys.exit("%s: read through the mount, not the cache file" % rel)
with stagefs.open(os.path.join(mnt, "f1")) as f:
    check(f, "f1")
time.sleep(6)                   # the pool's connection, holding no pin, is closed as idle
with stagefs.open(os.path.join(mnt, "f2")) as f:
    check(f, "f2")              # on a new connection
held = stagefs.open(os.path.join(mnt, "f3"))
time.sleep(6)
check(held, "f3")               # its pin held: the connection was not idle
held.close()
st = stagefs.stats()
for k in ("fd_fallbacks", "fd_lost", "report_errors"):
    if st[k]:
        sys.exit("%s = %d: %s" % (k, st[k], st))
print("library: 3 cache files, across an idle close, reports %d" % st["reports"])
PY
sfs_umount "$MNT"
echo "ok: per-user connection cap, root reserve, idle timeout, library reconnects"
