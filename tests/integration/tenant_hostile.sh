#!/usr/bin/env bash
# Two real users, one hostile: while the victim reads a tree, warms its dataset and reads its feed rate, the attacker fills its control-connection cap, sends huge and handle-less CLIENT_READ/GPU_BYTES, evicts the victim's files, scrapes every view, probes a dataset denied to it and trickles into the metrics port; the victim's bytes, warmup, cached chunks and counts come out exact and every attack gets its refusal.
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
command -v runuser >/dev/null || skip "runuser is not installed"
command -v curl >/dev/null || skip "curl is not installed"

A=sfs_ten_a V=sfs_ten_b		# attacker, victim
need_users $A $V
UA=$(id -u $A) UV=$(id -u $V)

T=$TEST_TMPDIR
chmod 755 "$T" "$(dirname "$T")"
SRC=$T/src
# shared (everyone): the victim's tree, and a file of the attacker's;
# private (the victim only): files it reads and files it only warms
"$PYTHON" - "$SRC" <<'PY'
import os, random, sys
src = sys.argv[1]
rnd = random.Random(17)
M = 1024 * 1024
def put(rel, size):
    p = os.path.join(src, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(os.urandom(size))
for d in range(4):
    for i in range(8):
        size = rnd.choice([0, 1, 4095, M, 2 * M + 7]) if i == 0 else rnd.randrange(1, 700 * 1024)
        put("shared/tree/d%d/f%d" % (d, i), size)
for i in range(6):
    put("private/p%d" % i, rnd.randrange(200 * 1024, 1300 * 1024))
    put("private/warm/w%d" % i, rnd.randrange(200 * 1024, 1300 * 1024))
put("shared/atk.bin", 1536 * 1024)
PY
chmod -R a+rX "$SRC"
# what the victim reads: sha256 sums, bytes, non-empty files
(cd "$SRC" && find shared/tree private -path private/warm -prune -o -type f -print | sort |
	xargs sha256sum) >"$T/sums"
chmod 644 "$T/sums"
V_BYTES=$(cd "$SRC" && find shared/tree private -path private/warm -prune -o -type f -printf '%s\n' |
	awk '{ s += $1 } END { print s }')
V_FILES=$(cd "$SRC" && find shared/tree private -path private/warm -prune -o -type f -size +0 -print | wc -l)
S_ATK=$(stat -c %s "$SRC/shared/atk.bin")
chunks_of() { # chunks_of DIR: 1 MiB chunks of the files under DIR
	find "$1" -type f -printf '%s\n' | awk '{ c += int(($1 + 1048575) / 1048576) } END { print c }'
}
# alloc_of DIR...: the cache bytes their chunks take (4 KiB units, cache_i.h)
alloc_of() {
	find "$@" -type f -printf '%s\n' | awk '{ f = int($1 / 1048576); r = $1 - f * 1048576
		s += f * 1048576 + int((r + 4095) / 4096) * 4096 } END { print s }'
}
V_ALLOC=$(alloc_of "$SRC/shared/tree" "$SRC/private")
WARM_CHUNKS=$(chunks_of "$SRC/private/warm")
TREE_CHUNKS=$(chunks_of "$SRC/shared/tree")
ATK_CHUNKS=$(chunks_of "$SRC/shared/atk.bin")

port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
CONF=$T/stagefs.conf
# control_max_connections=96: a small server, 80 for users and 16 for root,
# where the attacker's 64 (control_user_connections) leave others room.
# passthrough=off: every byte read is a READ the daemon counts, exactly.
cat >"$CONF" <<EOC
[stagefs]
chunk_size = 1M
passthrough = off
metrics_port = $port
control_max_connections = 96

[dataset shared]
source = dir://$SRC/shared

[dataset private]
source = dir://$SRC/private
allow = user:$V
EOC
MNT=$T/mnt
sfs_mount "" "$MNT" -c "$CONF"
SOCK=$(cat "$MNT/.stagefs/socket")
chmod 1777 "$T"	# the users' scripts write their results here

# --- the attacker's tools ----------------------------------------------------

# hold.py SOCK N DIR: open N connections with HELLO, print "ok=K refused=R
# msg=M" to DIR/hold.out; then try one more every 20 ms until DIR/release
# appears, print how many of those got in ("greedy=G"), close 4; hold the
# rest until DIR/stop appears, then print how many the daemon had closed.
cat >"$T/hold.py" <<'PY'
import os, sys, time
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
import hostile
path, n, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = open(os.path.join(d, "hold.out"), "w")
held, refused, msg = hostile.hold(path, n)
print("ok=%d refused=%d msg=%s" % (len(held), refused, msg), file=out, flush=True)
greedy = 0
while not os.path.exists(os.path.join(d, "release")):
    s, line = hostile.ctl_hello(path)
    if line.startswith("OK "):
        held.append(s)
        greedy += 1
    else:
        s.close()
    time.sleep(0.02)
for s in held[:4]:
    s.close()
held = held[4:]
print("greedy=%d, released 4" % greedy, file=out, flush=True)
while not os.path.exists(os.path.join(d, "stop")):
    time.sleep(0.1)
print("closed=%d" % hostile.closed_by_peer(held), file=out, flush=True)
PY

# reports.py SOCK VICTIM_UID FIRST: false reports, each of which must be
# refused with ERANGE; with FIRST=1 also one honest report of a handed file.
# Prints a line per reply that is not the expected one.
cat >"$T/reports.py" <<'PY'
import socket, sys
sock, vuid, first = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
f = s.makefile("rb")
def req(line):
    s.sendall(line.encode() + b"\n")
    return f.readline().decode().strip()
def want(line, *prefixes):
    got = req(line)
    if not got.startswith(prefixes):
        print("%s: got %r, want %s" % (line, got, " or ".join(prefixes)))
    return got
big = 2**64 - 1
want("HELLO version=1", "OK ")
for n in (big, 2**63, 10**15, 1):
    want("CLIENT_READ bytes=%d files=1" % n, "ERR code=ERANGE")
    want("CLIENT_READ bytes=%d files=%d uid=%s pid=1" % (n, 10**9, vuid), "ERR code=ERANGE")
    want("GPU_BYTES gpu=0 bytes=%d" % n, "ERR code=ERANGE")
    want("GPU_BYTES gpu=3 bytes=%d uid=%s" % (n, vuid), "ERR code=ERANGE")
want("CACHE_FD path=private/p1", "ERR code=ENOENT")
want("CACHE_FD path=private/../private/p2", "ERR code=ENOENT", "ERR code=EINVAL")
if first:
    got = want("CACHE_FD path=shared/atk.bin", "OK handle=1 ")
    size = int(dict(w.split("=", 1) for w in got.split()[1:])["size"])
    want("CLIENT_READ bytes=%d files=1 uid=%s" % (size, vuid), "OK")
    want("CLIENT_READ bytes=1", "ERR code=ERANGE")
    want("GPU_BYTES gpu=0 bytes=%d uid=%s" % (size, vuid), "OK")
    want("GPU_BYTES gpu=0 bytes=1", "ERR code=ERANGE")
    want("CACHE_FD_CLOSE handle=1", "OK")
    want("CLIENT_READ bytes=1", "ERR code=ERANGE")
want("PING", "OK")
PY

# slowloris.py PORT DIR: until DIR/stop appears, rounds of 20 idle
# connections and one trickling a byte a second into the metrics port; to
# DIR/slowloris.out, how long each trickler lived ("never": 8 s and open).
cat >"$T/slowloris.py" <<'PY'
import os, socket, sys
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
import hostile
port, d = int(sys.argv[1]), sys.argv[2]
out = open(os.path.join(d, "slowloris.out"), "w")
while not os.path.exists(os.path.join(d, "stop")):
    idle = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(20)]
    print(hostile.trickle(port, 8), file=out, flush=True)
    for s in idle:
        s.close()
PY

# attack.sh: every other attack, over and over until $T/stop appears (at
# least twice).  Unexpected outcomes go to att.fail, one a line.
cat >"$T/attack.sh" <<'SH'
T=$1 MNT=$2 SOCK=$3 VUID=$4 V=$5 port=$6 PYTHON=$7 STAGEFS=$8
fail() { echo "$*" >>"$T/att.fail"; }
# an evict storm on the victim's tree, racing its reads and warmup
(
	n=0
	while [[ ! -e $T/stop ]]; do
		n=$((n + 1))
		"$STAGEFS" warmup --evict --json "$MNT/shared/tree" >"$T/att.storm.$n" 2>&1 ||
			fail "evict storm: $(cat "$T/att.storm.$n")"
	done
) &
storm=$!
i=0
while [[ $i -lt 2 || ! -e $T/stop ]]; do
	i=$((i + 1))
	"$PYTHON" "$T/reports.py" "$SOCK" "$VUID" $((i == 1)) >>"$T/att.fail" 2>&1 || fail "reports.py failed"
	# evict everything it can see: the victim's chunks must stay
	"$STAGEFS" warmup --evict --json "$MNT" >"$T/att.evict.$i" 2>"$T/att.evict.$i.err" ||
		fail "evict of the mount failed: $(cat "$T/att.evict.$i.err")"
	"$STAGEFS" warmup --evict "$MNT/shared/tree" >/dev/null 2>&1 || fail "evict of shared/tree failed"
	# the victim's dataset: no evict, no stat, no list, no read
	"$STAGEFS" warmup --evict "$MNT/private" >"$T/att.evictp" 2>&1 && fail "evict of private succeeded"
	grep -qE "No such file|ENOENT" "$T/att.evictp" ||
		fail "evict of private: no ENOENT: $(cat "$T/att.evictp")"
	err=$(stat "$MNT/private" 2>&1) && fail "stat private succeeded"
	[[ $err == *"No such file"* ]] || fail "stat private: $err"
	err=$(stat "$MNT/private/p1" 2>&1) && fail "stat private/p1 succeeded"
	[[ $err == *"No such file"* ]] || fail "stat private/p1: $err"
	ls "$MNT/private" >/dev/null 2>&1 && fail "ls private succeeded"
	cat "$MNT/private/p0" >/dev/null 2>&1 && fail "cat private/p0 succeeded"
	[[ $(ls "$MNT") == shared ]] || fail "the root lists: $(ls "$MNT" | tr '\n' ' ')"
	# every view of the daemon: its own rows only
	for f in stats metrics quota; do
		timeout 10 cat "$MNT/.stagefs/$f" >"$T/att.view.$f" 2>&1 || fail "cat .stagefs/$f failed"
	done
	"$STAGEFS" quota --json "$MNT" >"$T/att.view.quotajson" 2>&1 || fail "stagefs quota failed"
	curl -sS --max-time 5 -o "$T/att.view.http" "http://127.0.0.1:$port/metrics" 2>>"$T/att.fail" ||
		fail "scrape failed"
	for f in "$T"/att.view.*; do
		for w in "$V" victimjob victimcat "\"uid\": $VUID," "$T/src/private"; do
			! grep -qF -- "$w" "$f" || fail "$(basename "$f") shows $w (pass $i)"
		done
	done
	echo "$i" >"$T/att.passes"
done
wait $storm
SH

# victim.sh T MNT PORT STAGEFS PHASE: the victim's work, its own failures
# to vic.fail.  PHASE flood: a warmup while the attacker holds connections;
# then: read, warm, read its rows and scrape under the other attacks.
cat >"$T/victim.sh" <<'SH'
T=$1 MNT=$2 port=$3 STAGEFS=$4 phase=$5
fail() { echo "$*" >>"$T/vic.fail"; }
if [[ $phase == flood ]]; then
	# the attacker holds every connection it can get
	"$STAGEFS" warmup --json "$MNT/private/warm" >"$T/vic.warm1" 2>"$T/vic.warm1.err" ||
		fail "warmup failed during the connection flood: $(cat "$T/vic.warm1.err")"
	grep -qi "broken pipe" "$T/vic.warm1.err" && fail "warmup: $(cat "$T/vic.warm1.err")"
	exit 0
fi
# start once the attacker's first pass is done and its storm under way
while [[ ! -e $T/att.passes || ! -e $T/att.storm.2 ]]; do sleep 0.05; done
cd "$MNT" || exit 1
STAGEFS_JOB=victimjob "$T/victimcat" -c "$T/sums" >"$T/vic.sums" 2>&1 || fail "wrong bytes: $(grep -v ': OK$' "$T/vic.sums")"
cd /
"$STAGEFS" warmup --json "$MNT/private" "$MNT/shared/tree" >"$T/vic.warm" 2>"$T/vic.warm.err" ||
	fail "warmup failed: $(cat "$T/vic.warm.err")"
grep -qi "broken pipe" "$T/vic.warm.err" && fail "warmup: $(cat "$T/vic.warm.err")"
timeout 10 cat "$MNT/.stagefs/stats" >"$T/vic.stats" || fail "cannot read .stagefs/stats"
t0=$(date +%s%3N)
curl -sS --max-time 3 -o "$T/vic.http" "http://127.0.0.1:$port/metrics" 2>>"$T/vic.fail" ||
	fail "scrape failed during the slowloris"
echo "$(($(date +%s%3N) - t0))" >"$T/vic.scrape_ms"
SH
# the victim's reader, under a name of its own (process rows show it)
cp "$(command -v sha256sum)" "$T/victimcat"
chmod 755 "$T/hold.py" "$T/reports.py" "$T/slowloris.py" "$T/attack.sh" "$T/victim.sh" "$T/victimcat"

# --- the attack ----------------------------------------------------------------

as $A "$PYTHON" "$T/slowloris.py" "$port" "$T" &
slow=$!
as $A "$PYTHON" "$T/hold.py" "$SOCK" 100 "$T" &
hold=$!
wait_for -t 20 grep -q "^ok=" "$T/hold.out" 2>/dev/null || die "the holder did not connect"
read -r ok refused msg <<<"$(head -1 "$T/hold.out")"
log "$A: $ok $refused $msg"
[[ $ok == ok=64 && $refused == refused=36 ]] || die "$A holds ${ok#ok=} connections, ${refused#refused=} refused; want 64 and 36"
[[ ${msg#msg=} == "EAGAIN: too many control connections: uid $UA has 64 open"*control_user_connections* ]] ||
	die "the refusal does not say why: $msg"
# at its cap, the attacker's own tools are told why
as $A "$STAGEFS" warmup --evict "$MNT" >"$T/att.capped" 2>&1 && die "$A's 65th connection was accepted"
grep -q control_user_connections "$T/att.capped" || die "$A's capped warmup: $(cat "$T/att.capped")"
# the victim's warmup while the attacker holds and keeps grabbing connections
as $V bash "$T/victim.sh" "$T" "$MNT" "$port" "$STAGEFS" flood || die "the victim's script failed"
[[ ! -s $T/vic.fail ]] || die "victim: $(cat "$T/vic.fail")"
touch "$T/release"
wait_for -t 10 grep -q "released 4" "$T/hold.out" || die "the holder did not release"
grep -q "^greedy=0," "$T/hold.out" || die "the attacker got more connections: $(sed -n 2p "$T/hold.out")"

_passes_over() { [[ $(cat "$T/att.passes") -ge $1 ]]; }
as $A bash "$T/attack.sh" "$T" "$MNT" "$SOCK" "$UV" "$V" "$port" "$PYTHON" "$STAGEFS" &
att=$!
t0=$SECONDS
as $V bash "$T/victim.sh" "$T" "$MNT" "$port" "$STAGEFS" attack || die "the victim's script failed"
log "the victim's work took $((SECONDS - t0)) s under attack"
# two more passes with the victim's chunks in the cache
p=$(cat "$T/att.passes")
wait_for -t 30 _passes_over $((p + 2)) || die "the attacker's loop is stuck"
touch "$T/stop"
wait_pid_exit $att 60 || die "the attacker's loop did not stop"
assert_eq "$WAIT_RC" 0 "the attacker's loop status"
wait_pid_exit $hold 20 || die "the holder did not stop"
wait_pid_exit $slow 30 || die "the slowloris did not stop"

# --- the victim is unaffected --------------------------------------------------

[[ ! -s $T/vic.fail ]] || die "victim: $(cat "$T/vic.fail")"
assert_eq "$(grep -c ': OK$' "$T/vic.sums")" "$(wc -l <"$T/sums")" "files the victim read correctly"
jget() { "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
assert_eq "$(jget "$T/vic.warm1" failed)" 0 "chunks the victim's first warmup failed"
assert_eq "$(jget "$T/vic.warm1" fetched)" "$WARM_CHUNKS" "chunks the victim's first warmup fetched (private/warm)"
assert_eq "$(jget "$T/vic.warm" failed)" 0 "chunks the victim's second warmup failed"
assert_eq "$(jget "$T/vic.warm" fetched)" 0 "chunks the victim's second warmup fetched (all read or warmed, none evicted)"
[[ $(cat "$T/vic.scrape_ms") -le 2500 ]] || die "the victim's scrape took $(cat "$T/vic.scrape_ms") ms during the slowloris"
grep -qF "user=\"$V\",job=\"victimjob\"" "$T/vic.http" || die "the victim's scrape lacks its own job row"
# its feed rate, as it read it and as root reads it: exactly what it read
stats_dump "$MNT" >"$T/root.stats"
"$PYTHON" - "$T/vic.stats" "$T/root.stats" "$V" "$A" "$V_BYTES" "$V_FILES" "$S_ATK" <<'PY' || die "the counts are wrong (see above)"
import json, sys
vic, root = (json.load(open(p)) for p in sys.argv[1:3])
v, a = sys.argv[3], sys.argv[4]
vbytes, vfiles, satk = map(int, sys.argv[5:])
def want(what, got, exp):
    if got != exp:
        sys.exit("%s: %s, want %s" % (what, got, exp))
for name, d in (("victim's view", vic), ("root's view", root)):
    users = {u["user"]: u for u in d["users"]}
    jobs = {(j["user"], j["job"]): j for j in d["jobs"]}
    want(name + ": " + v + " read_bytes", users[v]["read_bytes"], vbytes)
    want(name + ": " + v + " files_read", users[v]["files_read"], vfiles)
    want(name + ": " + v + " client_read_bytes", users[v]["client_read_bytes"], 0)
    want(name + ": " + v + " gpu_bytes", users[v]["gpu_bytes"], 0)
    want(name + ": victimjob read_bytes", jobs[(v, "victimjob")]["read_bytes"], vbytes)
    want(name + ": victimjob files_read", jobs[(v, "victimjob")]["files_read"], vfiles)
    want(name + ": node client_read_bytes", d["node"]["client_read_bytes"], satk)
    want(name + ": node read_bytes", d["node"]["read_bytes"], vbytes + satk)
    want(name + ": GPU rows", {g["gpu"]: g["gpu_bytes"] for g in d["gpus"]}, {0: satk})
want("the victim's view: users", sorted(u["user"] for u in vic["users"]), [v])
users = {u["user"]: u for u in root["users"]}
want("root's view: " + a + " client_read_bytes", users[a]["client_read_bytes"], satk)
want("root's view: " + a + " gpu_bytes", users[a]["gpu_bytes"], satk)
PY
# its chunks are all still cached: none fetched again when it reads again
"$STAGEFS" warmup --check --json "$MNT/shared/tree" "$MNT/private" >"$T/check.json"
assert_eq "$(jget "$T/check.json" cached_before)" "$(jget "$T/check.json" chunks)" "the victim's chunks cached after the attack"
used=$("$STAGEFS" quota --json "$MNT" | "$PYTHON" -c '
import json, sys
print(sum(u["used_bytes"] for u in json.load(sys.stdin)["users"] if u["user"] == sys.argv[1]))' $V)
assert_eq "$used" "$V_ALLOC" "the victim's cache usage (stagefs quota)"
misses=$(stat_get "$MNT" cache_misses) fetched=$(stat_get "$MNT" backend_bytes)
drop_caches
(cd "$MNT" && as $V sha256sum -c --quiet "$T/sums") || die "the victim's second read"
assert_eq "$(stat_get "$MNT" cache_misses)" "$misses" "chunk misses on the victim's second read"
assert_eq "$(stat_get "$MNT" backend_bytes)" "$fetched" "bytes fetched on the victim's second read"
log "victim: $V_FILES files and $V_BYTES bytes right, warmups fetched $WARM_CHUNKS and 0 chunks, counts exact, chunks kept"

# --- the attacker was refused each time ----------------------------------------

[[ ! -s $T/att.fail ]] || die "attacker: $(head -20 "$T/att.fail")"
passes=$(cat "$T/att.passes")
assert_ge "$passes" 2 "the attacker's passes"
evicted=0
for i in $(seq 1 "$passes"); do
	evicted=$((evicted + $(jget "$T/att.evict.$i" evicted)))
done
# its own chunks (the file it was handed), once; none of the victim's
assert_eq "$evicted" "$ATK_CHUNKS" "chunks the attacker's evicts of the mount dropped"
assert_eq "$(jget "$T/att.evict.$passes" evict_skipped)" "$TREE_CHUNKS" "the victim's chunks kept by the attacker's last evict"
storms=0
for f in "$T"/att.storm.*; do
	assert_eq "$(jget "$f" evicted)" 0 "chunks an evict of the victim's tree dropped ($(basename "$f"))"
	storms=$((storms + 1))
done
grep -q "^closed=0$" "$T/hold.out" || die "the holder's connections were closed: $(tail -1 "$T/hold.out")"
rounds=$(wc -l <"$T/slowloris.out")
assert_ge "$rounds" 1 "slowloris rounds"
"$PYTHON" - "$T/slowloris.out" <<'PY' || die "a trickling connection outlived the metrics port's request deadline (2 s)"
import sys
lives = open(sys.argv[1]).read().split()
print("trickler lifetimes:", " ".join(lives))
sys.exit(0 if all(t != "never" and float(t) <= 4.0 for t in lives) else 1)
PY
log "attacker: $passes passes and $storms evicts of the tree, 64 connections then EAGAIN, reports ERANGE, private ENOENT, $evicted own chunks evicted, $rounds slowloris rounds cut at the deadline"
sfs_umount "$MNT"
echo "ok: the victim's bytes, warmup, cached chunks and feed rate are untouched by every attack"
