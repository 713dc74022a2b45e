#!/usr/bin/env bash
# libstagefs against a scripted daemon: falls back to plain reads for an old daemon, a refusal, a wrong file or a daemon that hangs up, unpins at close, reports exact bytes with the job, shares connections between threads, and survives fork.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"

GPUREAD=$REPO/tests/helpers/gpuread
LIB=$REPO/gpudirect/libstagefs.so
[[ -x $GPUREAD ]] || die "$GPUREAD is not built (make test-progs)"
[[ -f $LIB ]] || die "$LIB is not built (make)"
export STAGEFS_LIB=$LIB

# A directory with .stagefs/socket is a mount root to the library
# (ctl_find_mount); the "daemon" behind that socket is a script whose answer
# depends on the file's name.  Files are read where they are, which is what
# "through the mount" means here.
T=$TEST_TMPDIR
ROOT=$T/root SOCK=$T/d.sock LOG=$T/daemon.log
mkdir -p "$ROOT/.stagefs" "$ROOT/sub" "$T/out"
printf '%s\n' "$SOCK" >"$ROOT/.stagefs/socket"
"$PYTHON" - "$ROOT" <<'PY'
import os, random, sys
rng = random.Random(5)
for name, size in (("ok-a.bin", 3 * 1048576 + 77), ("sub/ok-b.bin", 4097), ("old.bin", 70000),
                   ("full.bin", 1048577), ("wrong.bin", 5000), ("hup.bin", 2 * 1048576 + 1),
                   ("slow-0.bin", 9000), ("slow-1.bin", 9001), ("slow-2.bin", 9002),
                   ("slow-3.bin", 9003)):
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(rng.randbytes(size))
PY

cat >"$T/daemon.py" <<'PY'
# The scripted daemon: docs/control.md, with canned answers by file name.
import os, socket, sys, threading, time
root, path, logpath = sys.argv[1:4]
lock = threading.Lock()
conns = [0]

def log(line):
    with lock, open(logpath, "a") as f:
        f.write(line + "\n")

def serve(c, n):
    handle = 0
    buf = b""
    while True:
        while b"\n" not in buf:
            data = c.recv(65536)
            if not data:
                log("conn %d closed" % n)
                return
            buf += data
        line, buf = buf.split(b"\n", 1)
        words = line.decode().split(" ")
        verb, kv = words[0], dict(w.split("=", 1) for w in words[1:] if "=" in w)
        if verb == "HELLO":
            c.sendall(b"OK version=1 server=scripted uid=0\n")
        elif verb == "CACHE_FD":
            rel = kv["path"]
            name = os.path.basename(rel)
            full = os.path.join(root, rel)
            log("conn %d CACHE_FD %s" % (n, rel))
            if name.startswith("old"):
                c.sendall(b"ERR code=EINVAL msg=unknown%20request\n")
                continue
            if name.startswith("full"):
                c.sendall(b"ERR code=ENOSPC msg=cannot%20be%20cached%20whole\n")
                continue
            if name.startswith("slow"):
                time.sleep(0.5)
            st = os.stat(full)
            ino = st.st_ino + 1 if name.startswith("wrong") else st.st_ino
            fd = os.open(full, os.O_RDONLY)
            handle += 1
            msg = "OK handle=%d size=%d ino=%d chunk_size=1048576 fetched=0 fd=1\n" % (
                handle, st.st_size, ino)
            c.sendmsg([msg.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        fd.to_bytes(4, sys.byteorder))])
            os.close(fd)
            if name.startswith("hup"):
                c.shutdown(socket.SHUT_RDWR)    # the daemon stops: pins gone
                log("conn %d hung up" % n)
                return
        elif verb in ("CACHE_FD_CLOSE", "CLIENT_READ", "GPU_BYTES"):
            log("conn %d %s" % (n, line.decode()))
            c.sendall(b"OK\n")
        else:
            c.sendall(b"ERR code=EINVAL msg=unknown%20request\n")

def orphaned(parent):
    while os.getppid() == parent:   # the test is gone: so are we
        time.sleep(0.2)
    os._exit(0)
threading.Thread(target=orphaned, args=(os.getppid(),), daemon=True).start()

s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(64)
open(logpath, "w").close()
while True:
    c, _ = s.accept()
    conns[0] += 1
    log("conn %d open" % conns[0])
    threading.Thread(target=serve, args=(c, conns[0]), daemon=True).start()
PY
"$PYTHON" "$T/daemon.py" "$ROOT" "$SOCK" "$LOG" &
DPID=$!
wait_for test -S "$SOCK" || die "the scripted daemon did not start"

st() { sed -n "s/.* $1=\\([^ ]*\\).*/\\1/p" "$2"; }
# gread FILE [ENV...]: gpuread -m pinned of ROOT/FILE, compared with the file
gread() {
	local rel=$1
	shift
	env "$@" "$GPUREAD" -m pinned -s -b 1000003 -o "$T/out/x" "$ROOT/$rel" 2>"$T/out/stats" ||
		die "gpuread $rel failed: $(cat "$T/out/stats")"
	cmp "$T/out/x" "$ROOT/$rel" || die "$rel: wrong bytes"
}

# --- the cache file is used, its pin dropped at close, the bytes reported once ---
: >"$LOG"
gread ok-a.bin STAGEFS_JOB=job-a
[[ $(st via "$T/out/stats") == cache_fd ]] || die "ok-a.bin: not from the descriptor: $(cat "$T/out/stats")"
size=$(stat -c %s "$ROOT/ok-a.bin")
wait_for grep -q "conn .* closed" "$LOG" || die "the connection was not closed at exit"
grep -q "CACHE_FD_CLOSE handle=1$" "$LOG" || die "no CACHE_FD_CLOSE: $(cat "$LOG")"
got=$(awk '$3 == "CLIENT_READ" { for (i = 4; i <= NF; i++) if ($i ~ /^bytes=/) { sub("bytes=", "", $i); s += $i } } END { print s + 0 }' "$LOG")
assert_eq "$got" "$size" "bytes reported in CLIENT_READ"
grep "CLIENT_READ" "$LOG" | contains "files=1 job=job-a" || die "CLIENT_READ without files=1 job=job-a: $(cat "$LOG")"
! grep -q GPU_BYTES "$LOG" || die "GPU bytes reported for host reads"
log "cache file used, unpinned at close, $got bytes reported for job-a"

# --- fallbacks: old daemon, refusal, another file, a hangup ---
gread old.bin
[[ $(st via "$T/out/stats") == mount && $(st fd_last_error "$T/out/stats") == EOPNOTSUPP ]] ||
	die "old daemon: $(cat "$T/out/stats")"
gread full.bin
[[ $(st via "$T/out/stats") == mount && $(st fd_last_error "$T/out/stats") == ENOSPC ]] ||
	die "refusal: $(cat "$T/out/stats")"
gread wrong.bin
[[ $(st via "$T/out/stats") == mount && $(st fd_last_error "$T/out/stats") == ESTALE ]] ||
	die "wrong inode: $(cat "$T/out/stats")"
: >"$LOG"
gread hup.bin
[[ $(st via "$T/out/stats") == mount ]] || die "hangup: still on the descriptor"
assert_eq "$(st fd_lost "$T/out/stats")" 1 "hangup: fd_lost"
assert_eq "$(st fd_bytes "$T/out/stats")" 0 "hangup: nothing read from the unpinned descriptor"
! grep -q CLIENT_READ "$LOG" || die "bytes read the plain way were reported as cache-file bytes"
gread sub/ok-b.bin STAGEFS_FD_PASSING=0
[[ $(st via "$T/out/stats") == mount && $(st fd_opens "$T/out/stats") == 0 ]] || die "STAGEFS_FD_PASSING=0 asked"
log "fallbacks: old daemon, ENOSPC, wrong inode, hangup, STAGEFS_FD_PASSING=0"

# --- threads share a pool of connections; a fork lets go of the parent's pins ---
: >"$LOG"
PYTHONPATH=$REPO/gpudirect "$PYTHON" - "$ROOT" <<'PY' || die "threads / fork (see above)"
import os, sys, threading
import stagefs
root = sys.argv[1]
def want(rel):
    return open(os.path.join(root, rel), "rb").read()
bad = []
def one(rel):
    with stagefs.open(os.path.join(root, rel)) as f:
        buf = bytearray(f.size)
        if f.via != "cache_fd" or f.read_into(0, buf) != len(buf) or buf != want(rel):
            bad.append(rel)
ts = [threading.Thread(target=one, args=("slow-%d.bin" % i,)) for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
if bad:
    sys.exit("threads: wrong reads of %s" % bad)

f = stagefs.open(os.path.join(root, "ok-a.bin"))
ref = want("ok-a.bin")
for _ in range(2):      # the second read's count waits for the next report
    buf = bytearray(len(ref))
    assert f.read_into(0, buf) == len(ref) and buf == ref and f.via == "cache_fd"
pid = os.fork()
if pid == 0:
    b = bytearray(len(ref))
    ok = f.read_into(0, b) == len(ref) and b == ref and f.via == "mount"
    g = stagefs.open(os.path.join(root, "sub/ok-b.bin"))
    b2 = bytearray(g.size)
    ok = ok and g.read_into(0, b2) == g.size and b2 == want("sub/ok-b.bin") and g.via == "cache_fd"
    g.close()
    f.close()
    sys.exit(0 if ok else 1)    # a normal exit: the library reports what is left
_, status = os.waitpid(pid, 0)
if status:
    sys.exit("fork: the child's reads were wrong")
buf = bytearray(len(ref))
if f.read_into(0, buf) != len(ref) or buf != ref or f.via != "cache_fd":
    sys.exit("fork: the parent lost its cache file")
f.close()
print("threads and fork ok; stats", {k: v for k, v in stagefs.stats().items() if k.startswith("fd_")})
PY
# each byte once: the child reports its own reads, never the parent's, and
# the parent's three reads of ok-a.bin through one handle count once (a
# handle reports at most its file's size: docs/control.md, CLIENT_READ)
want=$((9000 + 9001 + 9002 + 9003 + size + $(stat -c %s "$ROOT/sub/ok-b.bin")))
got=$(awk '$3 == "CLIENT_READ" { for (i = 4; i <= NF; i++) if ($i ~ /^bytes=/) { sub("bytes=", "", $i); s += $i } } END { print s + 0 }' "$LOG")
assert_eq "$got" "$want" "bytes reported by the threads, the parent and its child"
nconn=$(grep -c "CACHE_FD .*slow" "$LOG")
assert_eq "$nconn" 4 "CACHE_FD requests of the threads"
conns=$(grep "CACHE_FD .*slow" "$LOG" | awk '{ print $2 }' | sort -u | wc -l)
assert_gt "$conns" 1 "connections used by 4 threads opening slow files at once"
log "threads: 4 slow opens on $conns connections; fork: child via the mount, parent kept its cache file"
kill $DPID
