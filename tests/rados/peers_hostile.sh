#!/usr/bin/env bash
# Ceph: a keyless local user turns the peer port against no one: an impostor on a member's address replays and relays nothing useful, slot floods and a squatted port leave members served and the mount up, log floods stay bounded, honest traffic is never refused.
# needs: ceph
# timeout: 240
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
need_users nobody
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
. "$REPO/tests/lib_peers.sh"

# A group of three on 127.0.0.2-4; node 3 (127.0.0.4) has no daemon: the
# address an impostor takes.  Node 1 and 2 mount the dataset.
PEERS_NO_MOUNT=1 peers_setup 3
EVIL=$T/evil
chmod 0711 "$T"	# the attacker (nobody) reaches her own directory, nothing else
mkdir -p "$EVIL"
chmod 0777 "$EVIL"
S1=127.0.0.2:$PEER_PORT S2=127.0.0.3:$PEER_PORT S3=127.0.0.4:$PEER_PORT
peers_mount 2
node_row() {	# node_row MNT ADDR KEY: a member's counter in MNT's stats
	"$PYTHON" -c '
import json, sys
rows = [r for r in json.load(sys.stdin)["peers"] if r["addr"] == sys.argv[1]]
print(rows[0][sys.argv[2]] if rows else 0)' "$2" "$3" < <(stats_dump "$1")
}
evil() { as nobody env PYTHONDONTWRITEBYTECODE=1 "$PYTHON" "$@"; }

# ---- 1. an impostor on node 3's address records what node 1 sends it, then replays it
log "1. an impostor listens on node 3's address $S3 while node 1 reads everything"
evil - "$EVIL" 127.0.0.4 "$PEER_PORT" >"$T/imp.out" 2>&1 <<'PY' &
import os, socket, sys, threading, time
out, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(64)
open(os.path.join(out, "imp.ready"), "w").close()
n = 0
def take(c, i):
    c.settimeout(1.0)
    data = b""
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            data += b
    except OSError:
        pass
    c.close()
    with open(os.path.join(out, "rec.%d" % i), "wb") as f:
        f.write(data)
ls.settimeout(0.5)
end = time.monotonic() + 60
while time.monotonic() < end and not os.path.exists(os.path.join(out, "imp.stop")):
    try:
        c, _ = ls.accept()
    except socket.timeout:
        continue
    n += 1
    threading.Thread(target=take, args=(c, n), daemon=True).start()
time.sleep(1.2)
print("impostor: %d connections recorded" % n)
PY
IMP=$!
wait_for -t 10 test -e "$EVIL/imp.ready"
peers_mount 1
treecmp "$T/src" "$T/m1" --jobs 3 || die "node 1 read wrong bytes while an impostor held node 3's address"
touch "$EVIL/imp.stop"
wait "$IMP" || die "the impostor failed: $(cat "$T/imp.out")"
cat "$T/imp.out"
nrec=$(find "$EVIL" -name 'rec.*' -size +0 | wc -l)
assert_gt "$nrec" 0 "connections node 1 made to the impostor"
assert_eq "$(node_row "$T/m1" "$S3" hits)" 0 "chunks node 1 took from the impostor"
assert_gt "$(node_row "$T/m1" "$S3" fallbacks)" 0 "fallbacks from the impostor to Ceph"
out1=$(stat_get "$T/m1" peer_bytes_out) out2=$(stat_get "$T/m2" peer_bytes_out)
log "the impostor replays each of the $nrec recordings to node 1 and node 2"
evil - "$EVIL" "$S1" "$S2" <<'PY' || die "the replay"
import glob, os, socket, sys, threading
out, targets = sys.argv[1], sys.argv[2:]
got, lock = [0], threading.Lock()
def replay(data, t):
    h, p = t.rsplit(":", 1)
    s = socket.create_connection((h, int(p)), timeout=5, source_address=("127.0.0.4", 0))
    try:
        s.sendall(data)
        while True:
            b = s.recv(65536)
            if not b:
                break
            with lock:
                got[0] += len(b)
    except OSError:
        pass
    s.close()
ths = [threading.Thread(target=replay, args=(open(rec, "rb").read(), t))
       for rec in sorted(glob.glob(os.path.join(out, "rec.*"))) for t in targets]
for t in ths:
    t.start()
for t in ths:
    t.join()
got = got[0]
# what came back is a ServerHello and an alert at most: no session, no chunk
print("replays: %d bytes came back in all" % got)
assert got < 4096 * len(glob.glob(os.path.join(out, "rec.*"))) * len(targets), got
PY
assert_eq "$(stat_get "$T/m1" peer_bytes_out)" "$out1" "bytes node 1 served during the replays"
assert_eq "$(stat_get "$T/m2" peer_bytes_out)" "$out2" "bytes node 2 served during the replays"

# ---- 2. the impostor relays node 1 to node 2 and keeps the transcript
log "2. the impostor relays node 1's connections to node 2: she sees no byte of a chunk"
sfs_umount "$T/m1"
rm -rf "$T/cache1"
evil - "$EVIL" 127.0.0.4 "$PEER_PORT" "$S2" >"$T/relay.out" 2>&1 <<'PY' &
import os, socket, sys, threading, time
out, host, port, target = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
th, tp = target.rsplit(":", 1)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(64)
ls.settimeout(0.5)
open(os.path.join(out, "relay.ready"), "w").close()
lock = threading.Lock()
tr = open(os.path.join(out, "transcript"), "wb")
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            with lock:
                tr.write(d)
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
n = 0
while not os.path.exists(os.path.join(out, "relay.stop")):
    try:
        c, _ = ls.accept()
    except socket.timeout:
        continue
    u = socket.create_connection((th, int(tp)), source_address=(host, 0))
    n += 1
    threading.Thread(target=pump, args=(c, u), daemon=True).start()
    threading.Thread(target=pump, args=(u, c), daemon=True).start()
time.sleep(0.5)
with lock:
    tr.close()
print("relay: %d connections" % n)
PY
RELAY=$!
wait_for -t 10 test -e "$EVIL/relay.ready"
peers_mount 1
treecmp "$T/src" "$T/m1" --jobs 3 || die "node 1 read wrong bytes through the relay"
touch "$EVIL/relay.stop"
wait "$RELAY" || die "the relay failed: $(cat "$T/relay.out")"
cat "$T/relay.out"
hits=$(node_row "$T/m1" "$S3" hits)
log "node 1 took $hits chunks through the relay (node 2's, encrypted)"
assert_gt "$hits" 0 "chunks that crossed the relay"
"$PYTHON" - "$T/src" "$EVIL/transcript" <<'PY' || die "chunk bytes crossed the relay in clear"
import os, sys
src, tr = sys.argv[1], open(sys.argv[2], "rb").read()
windows = 0
for d, _, files in os.walk(src):
    for f in files:
        p = os.path.join(d, f)
        if os.path.islink(p):
            continue
        b = open(p, "rb").read()
        for off in range(100, len(b) - 64, 65536):
            windows += 1
            if tr.find(b[off:off + 64]) >= 0:
                sys.exit("%s: bytes %d..%d are in the relay's transcript" % (p, off, off + 64))
print("transcript %d bytes; none of %d 64-byte windows of the files in it" % (len(tr), windows))
PY

# ---- 3. keyless connections from nine addresses try to take every slot of node 2
log "3. nine addresses hold node 2's port (slow handshakes, idle, SFP2) while node 1 reads from it"
L2=$(sfs_log "$T/m2")
n0=$(wc -l <"$L2") t0=$SECONDS
sfs_umount "$T/m1"
rm -rf "$T/cache1"
evil - "$EVIL" "$S2" >"$T/flood.out" 2>&1 <<'PY' &
import os, socket, struct, sys, threading, time
out, target = sys.argv[1], sys.argv[2]
h, p = target.rsplit(":", 1)
p = int(p)
stop = os.path.join(out, "flood.stop")
life, lock, opened = [0.0], threading.Lock(), [0]
sfp2 = struct.pack("<IIQ16sQQIIQQ", 0x32504653, 1, int(time.time() * 1000), b"\0" * 16, 1, 2, 1 << 20, 0, 0, 0) + b"\0" * 24
def worker(src, kind):
    while not os.path.exists(stop):
        try:
            s = socket.create_connection((h, p), timeout=5, source_address=(src, 0))
        except OSError:
            time.sleep(0.05)
            continue
        t0 = time.monotonic()
        with lock:
            opened[0] += 1
        try:
            if kind == "slow":	# a ClientHello's first bytes, one every 300 ms
                s.settimeout(0.3)
                for b in b"\x16\x03\x01\x02\x00" + b"\x01" * 40:
                    s.send(bytes([b]))
                    try:
                        if s.recv(1) == b"":
                            break
                    except socket.timeout:
                        pass
            elif kind == "sfp2":
                s.sendall(sfp2)
                s.settimeout(10)
                while s.recv(4096):
                    pass
            else:		# idle
                s.settimeout(10)
                s.recv(1)
        except OSError:
            pass
        lt = time.monotonic() - t0
        s.close()
        if not os.path.exists(stop):
            with lock:
                life[0] = max(life[0], lt)
ths = []
for a in range(20, 29):
    for kind in ("slow", "idle", "sfp2"):
        for _ in range(12):
            t = threading.Thread(target=worker, args=("127.0.0.%d" % a, kind), daemon=True)
            t.start()
            ths.append(t)
open(os.path.join(out, "flood.ready"), "w").close()
while not os.path.exists(stop):
    time.sleep(0.2)
print("flood: %d connections opened, the longest held %.2f s" % (opened[0], life[0]))
assert life[0] < 3.5, "a keyless connection was held %.2f s" % life[0]
PY
FLOOD=$!
wait_for -t 10 test -e "$EVIL/flood.ready"
sleep 1
peers_mount 1
treecmp "$T/src" "$T/m1" --jobs 3 || die "node 1 read wrong bytes during the flood"
h2=$(node_row "$T/m1" "$S2" hits) f2=$(node_row "$T/m1" "$S2" failures)
sleep 2.5	# past a handshake's 2 s: the longest-lived connection is measured
touch "$EVIL/flood.stop"
wait "$FLOOD" || die "the flood: $(cat "$T/flood.out")"
cat "$T/flood.out"
log "node 1 during the flood: $h2 chunks from node 2, $f2 failures"
assert_gt "$h2" 0 "chunks node 1 took from node 2 during the flood"
assert_eq "$f2" 0 "node 1's failed requests to node 2 during the flood"

# ---- 4. a log flood from 300 sources
log "4. 300 sources send garbage, SFP2 and wrong-key handshakes to node 2"
evil - "$S2" "$REPO/tests/helpers/peer_ask" <<'PY' || die "the log flood"
import socket, struct, subprocess, sys, time
h, p = sys.argv[1].rsplit(":", 1)
sfp2 = struct.pack("<IIQ16sQQIIQQ", 0x32504653, 1, int(time.time() * 1000), b"\0" * 16, 1, 2, 1 << 20, 0, 0, 0) + b"\0" * 24
n = 0
for i in range(300):
    src = "127.0.%d.%d" % (1 + i // 250, 1 + i % 250)
    for msg in (b"GET / HTTP/1.0\r\n\r\n", sfp2):
        try:
            s = socket.create_connection((h, int(p)), timeout=5, source_address=(src, 0))
            s.sendall(msg)
            s.settimeout(3)
            while s.recv(4096):
                pass
            s.close()
            n += 1
        except OSError:
            pass
    if i % 10 == 0:	# a TLS client with another key (a full handshake each)
        subprocess.run([sys.argv[2], "-s", src, sys.argv[1], "0" * 32 + ":1:1:1:0"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        n += 1
print("log flood: %d connections" % n)
PY
# three kinds of refusal, five lines each per 10 s
lines=$(tail -n +"$((n0 + 1))" "$L2" | grep -c "peer server: " || true)
most=$((15 * ((SECONDS - t0) / 10 + 2)))
log "node 2 logged $lines lines in $((SECONDS - t0)) s of floods (tens of thousands of refusals; at most $most lines)"
[[ $lines -le $most ]] || { tail -n +"$((n0 + 1))" "$L2" | grep "peer server: " | head -30; die "$lines log lines for a flood"; }
sleep 10.5	# the next interval: its first refusal says how many were not logged
evil -c '
import socket, sys
s = socket.create_connection(("127.0.0.3", int(sys.argv[1])), source_address=("127.0.3.1", 0))
try:
    s.sendall(b"GET /\r\n\r\n"); s.recv(10)
except OSError:
    pass' "$PEER_PORT"
wait_for -t 5 grep -q "similar lines suppressed before this one" "$L2"
grep "similar lines suppressed" "$L2" | tail -n 1

# ---- 5. a squatted port: the mount goes on, the server binds once it is free
log "5. a user holds node 1's peer port before node 1 starts"
sfs_umount "$T/m1"
evil -c '
import os, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.2", int(sys.argv[1]))); s.listen(8)
open(sys.argv[2] + "/squat.ready", "w").close()
while not os.path.exists(sys.argv[2] + "/squat.stop"):
    time.sleep(0.1)' "$PEER_PORT" "$EVIL" &
SQ=$!
wait_for -t 10 test -e "$EVIL/squat.ready"
peers_mount 1 || die "node 1 did not mount while its peer port was taken"
L1=$(sfs_log "$T/m1")
grep -q "serving no peers until it can bind" "$L1" || die "no log line for the squatted port"
drop_caches
treecmp "$T/src" "$T/m1" --jobs 3 || die "node 1 read wrong bytes with its port squatted"
touch "$EVIL/squat.stop"
wait "$SQ"
wait_for -t 10 grep -q "peer server: listening on 127.0.0.2:$PEER_PORT at last" "$L1"
assert_eq "$(grep -c "serving no peers until it can bind" "$L1")" 1 "log lines for the squatted port"
# the default port is 785, which only root may bind
grep -q "peer_listen.*785" "$REPO/docs/configuration.md" || die "configuration.md does not say the default port"
if evil -c 'import socket; s = socket.socket(); s.bind(("127.0.0.31", 785))' 2>/dev/null; then
	die "an unprivileged user bound port 785"
fi
mkdir -p "$T/m9"
"$STAGEFS" -f -c "$PEER_CONF" -o "ceph_conf=$CEPH_CONF,cache_dir=$T/cache9,runtime_dir=$T/run9,peer_listen=127.0.0.31" \
	"rados://$POOL/$PEER_NAME" "$T/m9" >"$T/m9.out" 2>&1 &
M9=$!
wait_for -t 15 grep -q "peer server: listening on 127.0.0.31:785" "$T/m9.out"
fusermount3 -u "$T/m9"
wait "$M9" || true

# ---- 6. honest traffic at a high rate is never refused
log "6. a member asks node 2 for small chunks as fast as it can"
gentree "$T/small" --small 1500 --big-mb 0 --wide 50 --chunk 64K
"$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 64K "$T/small" "rados://$POOL/${PEER_NAME}s" \
	>"$T/pubs.out" 2>&1 || { cat "$T/pubs.out"; die "publish failed"; }
sfs_umount "$T/m2"
cat >"$T/rate.conf" <<CONF
[stagefs]
peers = $S2, 127.0.0.9:$PEER_PORT
peer_key_file = $PEER_KEY
CONF
sfs_mount "rados://$POOL/${PEER_NAME}s" "$T/m2" -c "$T/rate.conf" "ceph_conf=$CEPH_CONF" \
	"cache_dir=$T/cache2s" "runtime_dir=$T/run2" "peer_listen=$S2"
treecmp "$T/small" "$T/m2" --jobs 3 >/dev/null || die "node 2 read the small dataset wrong"
r0=$(node_row "$T/m2" "127.0.0.9:$PEER_PORT" refused)
res=$(CEPH_CONF=$CEPH_CONF "$REPO/tools/bench/peerbench" -t 32 -r 12 "$PEER_KEY" "127.0.0.9:$PEER_PORT" "$S2" \
	"rados://$POOL/${PEER_NAME}s") || die "peerbench: $res"
echo "$res"
rate=$("$PYTHON" -c 'import json, sys; print(int(json.loads(sys.argv[1])["requests_per_s"]))' "$res")
errs=$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["errors"])' "$res")
log "honest requests: $rate a second, $errs failed"
assert_eq "$errs" 0 "honest requests that failed"
assert_eq "$(node_row "$T/m2" "127.0.0.9:$PEER_PORT" refused)" "$r0" "honest requests refused"
assert_gt "$rate" 1000 "honest requests a second"
sfs_umount "$T/m1"
sfs_umount "$T/m2"
log "ok"
