#!/usr/bin/env bash
# The local files the daemon trusts, attacked by another user (issue 27): a cache_dir/runtime_dir of hers or behind her link stops the daemon naming it (left as it was), a victim's bytes through a proper mount are right; her CACHE_FD/CLOSE/CLIENT_READ flood adds no more than client_report_rate allows and leaves the victim's rows alone; metrics_file in a directory she may write (links planted at the tmp and file names) and a linked peers_file are refused, no foreign file touched.
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
command -v runuser >/dev/null || skip "runuser is not installed"
LIB=$REPO/gpudirect/libstagefs.so
[[ -f $LIB ]] || die "$LIB is not built (make)"

A=sfs_ten_a V=sfs_ten_b		# attacker, victim
need_users $A $V
UA=$(id -u $A)

T=$TEST_TMPDIR
chmod 755 "$T" "$(dirname "$T")"
# a public directory as /tmp is: root's, sticky, everyone may create in it
mkdir "$T/pub"
chmod 1777 "$T/pub"
SRC=$T/src
mkdir -p "$SRC"
for i in 1 2 3; do head -c $((i * 700 * 1024 + 11)) /dev/urandom >"$SRC/v$i"; done
head -c $((4 * 1024 * 1024)) /dev/urandom >"$SRC/atk.bin"
head -c $((40 * 1024 * 1024)) /dev/zero >"$SRC/big.bin"
chmod -R a+rX "$SRC"
(cd "$SRC" && sha256sum v1 v2 v3) >"$T/sums"
chmod 644 "$T/sums"
S_ATK=$(stat -c %s "$SRC/atk.bin")
# a file of the victim's that links will point at
printf 'the victim keeps this\n' >"$T/secret"
chown $V "$T/secret"
chmod 600 "$T/secret"
SECRET_SUM=$(sha256 "$T/secret")
secret_intact() {
	[[ $(sha256 "$T/secret") == "$SECRET_SUM" && $(stat -c '%U %a' "$T/secret") == "$V 600" ]] ||
		die "$1: the victim's file was changed: $(stat -c '%U %a %s' "$T/secret")"
}

# refused WHAT MSG... -- -o OPTS: the daemon must not start, and say every MSG
refused() {
	local what=$1 out rc=0
	shift
	local msgs=()
	while [[ $1 != -- ]]; do msgs+=("$1"); shift; done
	shift
	mkdir -p "$T/mnt.refused"
	out=$(timeout 20 "$STAGEFS" -f "$@" "dir://$SRC" "$T/mnt.refused" 2>&1 </dev/null) || rc=$?
	mountpoint -q "$T/mnt.refused" && { fusermount3 -u "$T/mnt.refused"; die "$what: mounted"; }
	[[ $rc -ne 0 && $rc -ne 124 ]] || die "$what: the daemon started (rc=$rc): $out"
	for m in "${msgs[@]}"; do
		[[ $out == *"$m"* ]] || die "$what: the refusal does not say '$m': $out"
	done
	log "$what: refused: $out"
}

# --- (a) a cache_dir or runtime_dir she made or reaches ------------------------

as $A mkdir -m 755 "$T/pub/cache" "$T/pub/hers"
as $A sh -c "echo planted >'$T/pub/cache/planted'"
as $A ln -s "$T/pub/hers" "$T/pub/link"
ln -s "$T/pub/cache" "$T/rootlink"	# root's link, to under her directory
state() { (cd "$T/pub" && find cache hers -printf '%p %u %m\n' | sort); }
before=$(state)
refused "cache_dir of hers" "cache_dir $T/pub/cache" "$T/pub/cache is owned by uid $UA ($A), mode 0755" -- \
	-o "cache_dir=$T/pub/cache,runtime_dir=$T/run"
refused "cache_dir through her link" "$T/pub/link is a symbolic link owned by uid $UA" -- \
	-o "cache_dir=$T/pub/link,runtime_dir=$T/run"
refused "cache_dir under her directory through root's link" "$T/pub/cache is owned by uid $UA" -- \
	-o "cache_dir=$T/rootlink/c,runtime_dir=$T/run"
refused "runtime_dir of hers" "runtime_dir $T/pub/cache" "owned by uid $UA" -- \
	-o "cache_dir=$T/cache0,runtime_dir=$T/pub/cache"
mkdir -m 777 "$T/open"
refused "cache_dir in a directory anyone may write" "$T/open is owned by uid 0 (root), mode 0777" -- \
	-o "cache_dir=$T/open/c,runtime_dir=$T/run"
# nothing chmodded, created or taken over in her directories
[[ $(state) == "$before" ]] || die "her directories changed: $(state) (was: $before)"
[[ ! -e $T/open/c ]] || die "a cache directory was created under $T/open"
log "(a) foreign cache_dir/runtime_dir refused, naming the path; her directories untouched"

# --- the proper mount ------------------------------------------------------------

port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])')
(umask 077 && "$PYTHON" -c "import secrets; print(secrets.token_hex(32))" >"$T/peer.key")
mkdir -m 755 "$T/mdir" "$T/pdir"
echo "127.0.0.3:$port" >"$T/pdir/peers.list"
chmod 644 "$T/pdir/peers.list"
RATE=$((16 * 1024 * 1024))
CONF=$T/stagefs.conf
cat >"$CONF" <<EOC
[stagefs]
chunk_size = 1M
passthrough = off
client_report_rate = $RATE
metrics_file = $T/mdir/m.prom
metrics_interval = 1s
peer_listen = 127.0.0.2:$port
peer_key_file = $T/peer.key
peers_file = $T/pdir/peers.list
EOC
MNT=$T/mnt
sfs_mount "dir://$SRC" "$MNT" -c "$CONF"
SOCK=$(cat "$MNT/.stagefs/socket")
chmod 1777 "$T/pub"

# the victim reads through the mount and through cache files handed over
(cd "$MNT" && as $V sha256sum -c --quiet "$T/sums") || die "the victim's bytes through the mount"
PYTHONPATH=$REPO/gpudirect STAGEFS_LIB=$LIB as $V "$PYTHON" - "$MNT" "$SRC" <<'PY' || die "the victim's CACHE_FD reads"
import os, sys
import stagefs
mnt, src = sys.argv[1:3]
for n in ("v1", "v2", "v3"):
    want = open(os.path.join(src, n), "rb").read()
    with stagefs.open(os.path.join(mnt, n)) as f:
        buf = bytearray(f.size)
        if f.read_into(0, buf) != f.size or bytes(buf) != want or f.via != "cache_fd":
            sys.exit("%s: wrong bytes from the cache file (%s)" % (n, f.via))
PY
log "the victim's bytes are right, through the mount and from the cache files handed over"

# --- (b) the report flood ----------------------------------------------------------

# rows of a user and the node, from root's view
rows() {
	stats_dump "$MNT" | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
u = {r["user"]: r for r in d["users"]}.get(sys.argv[1], {})
keys = ("read_bytes", "files_read", "client_read_bytes", "gpu_bytes", "opens", "cache_hits")
print(json.dumps({"user": {k: u.get(k, 0) for k in keys},
                  "node": {k: d["node"][k] for k in keys},
                  "client_reported_bytes": d["client_reported_bytes"],
                  "client_reported_gpu_bytes": d["client_reported_gpu_bytes"]}))' "$1"
}
rows $V >"$T/vic.before"
rows $A >"$T/atk.before"
cat >"$T/flood.py" <<'PY'
import json, socket, sys, time
sock, path, dur, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
f = s.makefile("rb")
def req(line):
    s.sendall(line.encode() + b"\n")
    return f.readline().decode().strip()     # a handed descriptor is dropped unread
assert req("HELLO version=1").startswith("OK ")
n = {"loops": 0, "read": 0, "gpu": 0, "refused": 0, "size": 0}
t0 = time.monotonic()
while time.monotonic() - t0 < dur:
    r = req("CACHE_FD path=" + path)
    if not r.startswith("OK handle="):
        sys.exit("CACHE_FD: " + r)
    kv = dict(w.split("=", 1) for w in r.split()[1:])
    n["size"] = size = int(kv["size"])
    if req("CACHE_FD_CLOSE handle=" + kv["handle"]) != "OK":
        sys.exit("CACHE_FD_CLOSE refused")
    for k, line in (("read", "CLIENT_READ bytes=%d files=1" % size),
                    ("gpu", "GPU_BYTES gpu=0 bytes=%d" % size)):
        r = req(line)
        if r == "OK":
            n[k] += size
        elif r.startswith("ERR code=ERANGE"):
            n["refused"] += 1
        else:
            sys.exit("%s: %s" % (line, r))
    n["loops"] += 1
n["elapsed"] = time.monotonic() - t0
json.dump(n, open(out, "w"))
PY
chmod 755 "$T/flood.py"
as $A "$PYTHON" "$T/flood.py" "$SOCK" atk.bin 3 "$T/pub/flood.json" || die "the flood failed"
rows $V >"$T/vic.after"
rows $A >"$T/atk.after"
"$PYTHON" - "$T/pub/flood.json" "$T/vic.before" "$T/vic.after" "$T/atk.before" "$T/atk.after" "$RATE" <<'PY' ||
import json, sys
fl, vb, va, ab, aa = (json.load(open(p)) for p in sys.argv[1:6])
rate = int(sys.argv[6])
size, loops, el = fl["size"], fl["loops"], fl["elapsed"]
# what she could have read: 2 s of the rate at once, then the rate (plus a
# little for the clock's steps); and no chunk counted as a hit beyond that
bound = int(rate * (el + 2.5))
print("flood: %d loops of %d bytes in %.2f s, accepted %d read and %d GPU bytes, "
      "%d refused; bound %d" % (loops, size, el, fl["read"], fl["gpu"], fl["refused"], bound))
def fail(msg):
    sys.exit("FAIL: " + msg)
if loops * size < 4 * bound:
    fail("the flood was too slow to tell (%d loops)" % loops)
if not 0 < fl["read"] <= bound or not 0 < fl["gpu"] <= bound:
    fail("accepted %d read / %d GPU bytes, want 1..%d" % (fl["read"], fl["gpu"], bound))
if not fl["refused"]:
    fail("nothing refused")
if va["user"] != vb["user"]:
    fail("the victim's rows changed: %s -> %s" % (vb["user"], va["user"]))
d = lambda a, b, k: a[k] - b[k]
du = {k: aa["user"][k] - ab["user"][k] for k in ab["user"]}
dn = {k: aa["node"][k] - ab["node"][k] for k in ab["node"]}
if du["client_read_bytes"] != fl["read"] or du["read_bytes"] != fl["read"] or du["gpu_bytes"] != fl["gpu"]:
    fail("her rows moved by %s, her accepted reports were %s" % (du, fl))
if dn["read_bytes"] != fl["read"] or dn["gpu_bytes"] != fl["gpu"]:
    fail("the node moved by %s, her accepted reports were %s" % (dn, fl))
if d(aa, ab, "client_reported_bytes") != fl["read"] or d(aa, ab, "client_reported_gpu_bytes") != fl["gpu"]:
    fail("client_reported_bytes moved by %d / %d, her accepted reports were %s" % (
        d(aa, ab, "client_reported_bytes"), d(aa, ab, "client_reported_gpu_bytes"), fl))
chunks = (size + 2**20 - 1) // 2**20
if dn["cache_hits"] > chunks * (bound // size + 1):
    fail("her hand-overs counted %d cache hits, at most %d" % (dn["cache_hits"], chunks * (bound // size + 1)))
PY
	die "the flood moved the counts beyond what she could have read (see above)"
grep -q "bytes refused: more than it was handed" "$(sfs_log "$MNT")" || die "the refusals were not logged"
# the time bound alone: bytes she really read through the mount, reported
# to a GPU at once, are more than 2 s of client_report_rate
cat "$MNT/big.bin" >/dev/null
as $A "$PYTHON" - "$SOCK" "$(stat -c %s "$SRC/big.bin")" <<'PY' || die "a report beyond client_report_rate"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
f = s.makefile("rb")
def req(line):
    s.sendall(line.encode() + b"\n")
    return f.readline().decode().strip()
assert req("HELLO version=1").startswith("OK ")
got = req("GPU_BYTES gpu=1 bytes=%s" % sys.argv[2])
if not (got.startswith("ERR code=ERANGE") and "client_report_rate" in got):
    sys.exit("GPU_BYTES of 40 MiB at once: %r, want ERANGE naming client_report_rate" % got)
PY
n=$(grep -c "more than client_report_rate" "$(sfs_log "$MNT")" || true)
[[ $n -eq 1 ]] || die "the time-bound refusal was logged $n times, want 1"
grep -q "^stagefs_client_reported_bytes_total [1-9]" "$MNT/.stagefs/metrics" ||
	die "no stagefs_client_reported_bytes_total: $(grep client_reported "$MNT/.stagefs/metrics")"
log "(b) the flood's reports stayed within client_report_rate; the victim's rows unchanged"

# --- (c) metrics_file --------------------------------------------------------------

# in a directory she may write, with her links at the old tmp name and the name
as $A mkdir -m 777 "$T/pub/prom"
as $A ln -s "$T/secret" "$T/pub/prom/m.prom.tmp"
as $A ln -s "$T/secret" "$T/pub/prom/m.prom"
refused "metrics_file in her directory" "metrics_file $T/pub/prom/m.prom" "$T/pub/prom is owned by uid $UA" -- \
	-o "cache_dir=$T/cache1,runtime_dir=$T/run1,metrics_file=$T/pub/prom/m.prom"
as $A ln -s "$T/secret" "$T/pub/m.prom.tmp"
refused "metrics_file in a sticky directory" "$T/pub is owned by uid 0 (root), mode 1777" -- \
	-o "cache_dir=$T/cache1,runtime_dir=$T/run1,metrics_file=$T/pub/m.prom"
secret_intact "metrics_file refused at start"
# the running daemon's directory opened to others: refused at each rewrite, logged
prom=$T/mdir/m.prom
[[ $(stat -c '%F %a' "$prom") == "regular file 640" ]] || die "metrics_file: $(stat -c '%F %a' "$prom")"
chmod 777 "$T/mdir"
as $A rm -f "$prom"
as $A ln -s "$T/secret" "$prom"
as $A ln -s "$T/secret" "$prom.tmp"
wait_for -t 10 grep -q "metrics_file $prom: not written: $T/mdir is owned by uid 0 (root), mode 0777" \
	"$(sfs_log "$MNT")" || die "the rewrite in an open directory was not refused"
stat_get "$MNT" uptime_s >/dev/null	# the daemon serves on
secret_intact "metrics_file's directory opened while mounted"
[[ -L $prom ]] || die "her link at metrics_file was followed or replaced while refused"
# closed again: the daemon writes again, replacing her link, not following it
chmod 755 "$T/mdir"
wait_for -t 10 test -f "$prom" -a ! -L "$prom" || die "metrics_file not rewritten once its directory was closed"
[[ $(stat -c '%U %a' "$prom") == "root 640" ]] || die "metrics_file: $(stat -c '%U %a' "$prom")"
grep -q "^stagefs_client_reported_bytes_total" "$prom" || die "metrics_file lacks the new counter"
secret_intact "metrics_file rewritten"
log "(c) metrics_file refused in her and sticky directories and while its directory was open; her links never followed"

# --- (d) peers_file -----------------------------------------------------------------

assert_eq "$(stat_get "$MNT" peer_members)" 1 "peer members from the peers_file"
ln -s "$T/pdir/peers.list" "$T/pdir/peers.link"
refused "peers_file as a link" "peers_file $T/pdir/peers.link: is a symbolic link" -- \
	-o "cache_dir=$T/cache1,runtime_dir=$T/run1,peer_listen=127.0.0.2:$((port + 1)),peer_key_file=$T/peer.key,peers_file=$T/pdir/peers.link"
as $A mkdir -m 755 "$T/pub/peers"
cp -p "$T/pdir/peers.list" "$T/pub/peers/peers.list"	# root's file, her directory
refused "peers_file in her directory" "its directory is not one only root may change" "$T/pub/peers is owned by uid $UA" -- \
	-o "cache_dir=$T/cache1,runtime_dir=$T/run1,peer_listen=127.0.0.2:$((port + 1)),peer_key_file=$T/peer.key,peers_file=$T/pub/peers/peers.list"
# at a reload: the file replaced by a link (to one naming another member) is refused
echo "127.0.0.4:$port" >"$T/pdir/other.list"
chmod 644 "$T/pdir/other.list"
mv "$T/pdir/peers.list" "$T/pdir/peers.saved"
ln -s "$T/pdir/other.list" "$T/pdir/peers.list"
kill -HUP "$(sfs_pid "$MNT")"
wait_for -t 10 grep -q "reload: peers: peers_file $T/pdir/peers.list: is a symbolic link" "$(sfs_log "$MNT")" ||
	die "a linked peers_file was not refused at the reload"
stats_dump "$MNT" | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
m = sorted(p["addr"] for p in d.get("peers", []) if p["member"] and not p["self"])
sys.exit(0 if m == ["127.0.0.3:" + sys.argv[1]] else "members after the refused reload: %s" % m)' "$port" ||
	die "a refused peers_file changed the group"
log "(d) peers_file through a link or in her directory refused, at start and at a reload"

# --- the victim, once more -----------------------------------------------------------

drop_caches
(cd "$MNT" && as $V sha256sum -c --quiet "$T/sums") || die "the victim's bytes after the attacks"
sfs_umount "$MNT"
[[ ! -e $prom ]] || die "metrics_file was left behind after unmount"
secret_intact "the unmount"
echo "ok: foreign directories, links and report floods refused; the victim's bytes, rows and files untouched"
