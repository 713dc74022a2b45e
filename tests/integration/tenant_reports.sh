#!/usr/bin/env bash
# A client cannot falsify the feed rate: CLIENT_READ and GPU_BYTES beyond what its uid was handed (or read through the mount) are refused with ERANGE, reports count for the caller's own uid whatever the line says, no counter wraps, and the client library reports a re-read handle's bytes once.
# timeout: 120
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
head -c $((1024 * 1024 + 3)) /dev/urandom >"$T/data/f1"
head -c $((500 * 1024)) /dev/urandom >"$T/data/f2"
head -c $((700 * 1024 + 1)) /dev/urandom >"$T/data/f3"
chmod -R a+rX "$T/data"
S1=$(stat -c %s "$T/data/f1") S2=$(stat -c %s "$T/data/f2") S3=$(stat -c %s "$T/data/f3")

MNT=$T/mnt
sfs_mount "dir://$T/data" "$MNT" chunk_size=1M
SOCK=$(cat "$MNT/.stagefs/socket")

# --- the attacker: reports without, and beyond, what it was handed ---
as $A "$PYTHON" - "$SOCK" "$MNT" "$S1" "$S2" <<'PY' || die "reports (see above)"
import socket, sys
sock, mnt, s1, s2 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
f = s.makefile("rb")
def req(line):
    s.sendall(line.encode() + b"\n")
    return f.readline().decode().strip()
def want(line, prefix):
    got = req(line)
    if not got.startswith(prefix):
        sys.exit("%s: got %r, want %s..." % (line, got, prefix))
assert req("HELLO version=1").startswith("OK ")
big = 2**64 - 1
# nothing handed over: nothing may be reported, whatever the line claims
want("CLIENT_READ bytes=%d files=1" % big, "ERR code=ERANGE")
want("CLIENT_READ bytes=%d" % big, "ERR code=ERANGE")
want("CLIENT_READ bytes=1 uid=0 pid=1", "ERR code=ERANGE")
want("GPU_BYTES gpu=0 bytes=%d" % 10**15, "ERR code=ERANGE")
# one file handed over: at most its size, through at most one handle
want("CACHE_FD path=f1", "OK handle=1 size=%d " % s1)
want("CLIENT_READ bytes=%d files=1 uid=0" % (s1 - 10), "OK")
want("CLIENT_READ bytes=11", "ERR code=ERANGE")
want("CLIENT_READ bytes=10 files=1", "ERR code=ERANGE")
want("CLIENT_READ bytes=10", "OK")
want("GPU_BYTES gpu=0 bytes=%d" % s1, "OK")
want("GPU_BYTES gpu=0 bytes=1", "ERR code=ERANGE")
# bytes read through the mount may go to a GPU too
with open(mnt + "/f2", "rb") as r:
    assert len(r.read()) == s2
want("GPU_BYTES gpu=0 bytes=%d" % s2, "OK")
want("GPU_BYTES gpu=0 bytes=%d" % big, "ERR code=ERANGE")
want("PING", "OK")
print("reports: refused beyond the ledger")
PY

# --- the client library: a handle read twice is reported once ---
PYTHONPATH=$REPO/gpudirect STAGEFS_LIB=$LIB as $B "$PYTHON" - "$MNT" "$T/data/f3" <<'PY' || die "library (see above)"
import os, sys
import stagefs
mnt = sys.argv[1]
want = open(sys.argv[2], "rb").read()
with stagefs.open(os.path.join(mnt, "f3")) as f:
    for _ in range(2):
        buf = bytearray(f.size)
        if f.read_into(0, buf) != f.size or bytes(buf) != want or f.via != "cache_fd":
            sys.exit("f3: wrong read (%s)" % f.via)
st = stagefs.stats()
if st["fd_bytes"] != 2 * len(want) or st["report_errors"] or not st["reports"]:
    sys.exit("library stats: %s" % st)
PY

stats_dump "$MNT" >"$T/stats.json"
"$PYTHON" - "$T/stats.json" "$A" "$B" "$S1" "$S2" "$S3" <<'PY' || die "the counts are wrong (see above)"
import json, sys
d = json.load(open(sys.argv[1]))
a, b = sys.argv[2], sys.argv[3]
s1, s2, s3 = map(int, sys.argv[4:])
def want(what, got, exp):
    if got != exp:
        sys.exit("%s: %s, want %s" % (what, got, exp))
users = {u["user"]: u for u in d["users"]}
want("node client_read_bytes", d["node"]["client_read_bytes"], s1 + s3)
# and f2 through the mount by A
want("node read_bytes", d["node"]["read_bytes"], s1 + s2 + s3)
want("node files_read", d["node"]["files_read"], 3)
want("%s client_read_bytes" % a, users[a]["client_read_bytes"], s1)
want("%s client_read_bytes (read twice, reported once)" % b, users[b]["client_read_bytes"], s3)
want("%s gpu_bytes" % a, users[a]["gpu_bytes"], s1 + s2)
want("GPU rows", {g["gpu"]: g["gpu_bytes"] for g in d["gpus"]}, {0: s1 + s2})
want("other users' client_read_bytes", [u for u in users if u not in (a, b) and users[u]["client_read_bytes"]], [])
PY
n=$(grep -c "bytes refused: more than it was handed" "$(sfs_log "$MNT")" || true)
[[ $n -ge 1 && $n -le 2 ]] || die "refusals logged $n times at notice level, want 1 (rate-limited)"
sfs_umount "$MNT"
echo "ok: reports bounded by what was handed, charged to the caller, no wrap; the library reports once per handle"
