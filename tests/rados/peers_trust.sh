#!/usr/bin/env bash
# Ceph: peers are trusted for nothing: a peer sending wrong bytes is caught (never cached or served); a wrong key, the old clear-text protocol or a group-readable key file are refused.
# needs: ceph
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
. "$REPO/tests/lib_peers.sh"

# node 2 flips a byte of every chunk it serves (peer_test_corrupt)
# one object a file: the chunk asked for below is an object of its own
PEER_PUBLISH_ARGS="--pack-max 0" PEERS_NO_MOUNT=1 peers_setup 2
peers_mount 1
peers_mount 2 peer_test_corrupt=yes
N2=127.0.0.3:$PEER_PORT

log "node 1 reads everything; half the chunks are node 2's, which lies"
treecmp "$T/src" "$T/m1" --jobs 3 || die "node 1 served wrong bytes from a corrupt peer"
corrupt=$(stat_get "$T/m1" peer_corrupt)
log "node 1: $corrupt corrupt chunks from node 2, peer_bytes_in $(stat_get "$T/m1" peer_bytes_in)"
assert_gt "$corrupt" 0 "corrupt chunks node 1 caught"
assert_eq "$(stat_get "$T/m1" peer_bytes_in)" 0 "bytes node 1 took from the corrupt peer"
assert_eq "$(stat_get "$T/m1" read_errors)" 0 "node 1 read errors"
grep -q "peer $N2 sent wrong bytes for chunk" "$(sfs_log "$T/m1")" || die "no log line for the wrong bytes"
log "node 1 restarted: every cached chunk is checked at its first read"
sfs_umount "$T/m1"
peers_mount 1
r0=$(stat_get "$T/m1" backend_reads)
drop_caches
treecmp "$T/src" "$T/m1" --jobs 3 || die "node 1's cache holds wrong bytes"
assert_eq "$(stat_get "$T/m1" corrupt_chunks)" 0 "corrupt chunks in node 1's cache"
assert_eq $(($(stat_get "$T/m1" backend_reads) - r0)) 0 "backend reads of a cached dataset"

log "requests by hand: the right key gets a chunk, a wrong key nothing, the old protocol ENOENT"
# a chunk of this dataset (the pool holds other tests' datasets too, and a
# node serves only those it has mounted): a file of one 1 MiB chunk at
# most is that chunk, named by its XXH3-128
CFILE=$(find "$T/src" -type f -size +4k -size -1024k | sort | sed -n 1p)
[[ -n $CFILE ]] || die "no one-chunk file in $T/src"
CID=$("$PYTHON" -c 'import sys, xxhash; print(xxhash.xxh3_128_hexdigest(open(sys.argv[1], "rb").read()))' "$CFILE")
rados --conf "$CEPH_CONF" -p "$POOL" stat "sfs.chunk.$CID" >/dev/null || die "no chunk object for $CFILE"
CLEN=$(stat -c %s "$CFILE")
# the request names where the asker's manifest has the chunk: the dataset
# (a hash of its URI and version: a new name's first publish is version 1),
# the file's inode (st_ino on a mount of one dataset) and the chunk's index
CINO=$(stat -c %i "$T/m1/${CFILE#"$T/src/"}")
TAG=$("$PYTHON" -c 'import sys, xxhash; print("%x" % (xxhash.xxh3_64_intdigest(sys.argv[1].encode()) | 1))' "rados://$POOL/$PEER_NAME@1")
ASK=$REPO/tests/helpers/peer_ask
[[ -x $ASK ]] || die "no $ASK (make test-progs)"
S1=127.0.0.2:$PEER_PORT
req() { echo "$1:$CLEN:$2:$3:$4"; }
# the right key, from node 2's address: the chunk, then on the same
# connection wrong places (another dataset or version, an inode or index
# out of range, a directory, no tag) and an unknown id: ENOENT each
rc=0
out=$("$ASK" -k "$PEER_KEY" -s 127.0.0.3 "$S1" "$(req "$CID" "$TAG" "$CINO" 0)" \
	"$(req "$CID" "$(printf %x $((0x$TAG ^ 2)))" "$CINO" 0)" "$(req "$CID" "$TAG" "$CINO" 1)" \
	"$(req "$CID" "$TAG" "$CINO" $((1 << 31)))" "$(req "$CID" "$TAG" $((1 << 62)) 0)" \
	"$(req "$CID" "$TAG" 18446744073709551615 0)" "$(req "$CID" "$TAG" 1 0)" \
	"$(req "$CID" "$TAG" 0 0)" "$(req "$CID" 0 "$CINO" 0)" \
	"$(req 00000000000000010000000000000002 "$TAG" "$CINO" 0)") || rc=$?
echo "$out"
[[ $rc == 0 ]] || die "hand-made requests with the key: rc $rc"
[[ $(echo "$out" | sed -n 1p) == "status 0 len $CLEN ok" ]] || die "the right request was not served whole and right"
[[ $(echo "$out" | grep -c '^status 2 len 0 ') == 9 ]] || die "a wrong place or id was not answered ENOENT"
# a wrong key: no session, no reply
rc=0
out=$("$ASK" -s 127.0.0.3 "$S1" "$(req "$CID" "$TAG" "$CINO" 0)") || rc=$?
[[ $rc == 3 ]] || die "a client with a wrong key got a session (rc $rc): $out"
# the clear-text request of before (SFP2, HMAC'ed with the right key):
# ENOENT at once and the connection closed, so an old node reads its backend
"$PYTHON" - "$PEER_KEY" 127.0.0.2 "$PEER_PORT" "$CID" "$CLEN" <<'PY' || die "an SFP2 request"
import hashlib, hmac, os, socket, struct, sys, time
keyfile, host, port, idhex, clen = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
key = open(keyfile).readline().strip().encode()
body = struct.pack("<IIQ16sQQIIQQ", 0x32504653, 1, int(time.time() * 1000), os.urandom(16),
                   int(idhex[:16], 16), int(idhex[16:], 16), clen, 0, 0, 0)
s = socket.create_connection((host, port), timeout=10, source_address=("127.0.0.3", 0))
t = time.monotonic()
s.sendall(body + hmac.new(key, body, hashlib.sha256).digest()[:24])
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
took = time.monotonic() - t
assert len(data) == 16 and struct.unpack_from("<III", data) == (0x31524653, 2, 0), data
assert took < 1.0, "the connection was held %.1f s" % took
print("SFP2: ENOENT and closed in %.3f s" % took)
PY
log_has() { grep -q "$1" "$(sfs_log "$T/m1")" || die "no log line: $1"; }
log_has "peer server: refused 127.0.0.3: a stagefs peer with another group's key"
log_has "peer server: refused 127.0.0.3: an older stagefs"
refused=$("$PYTHON" -c '
import json, sys
print([r for r in json.load(sys.stdin)["peers"] if r["addr"] == sys.argv[1]][0]["refused"])' \
	"$N2" < <(stats_dump "$T/m1"))
assert_eq "$refused" 2 "connections from node 2's address refused (no key, SFP2)"

log "a key file others may read: the daemon refuses to start"
chmod 0640 "$PEER_KEY"
mkdir -p "$T/m9"
if "$STAGEFS" -f -c "$PEER_CONF" -o "ceph_conf=$CEPH_CONF,cache_dir=$T/cache9,runtime_dir=$T/run9,peer_listen=127.0.0.9:$PEER_PORT" \
	"rados://$POOL/$PEER_NAME" "$T/m9" >"$T/m9.out" 2>&1; then
	die "the daemon started with a group-readable key file"
fi
grep -q "peer_key_file .*must be owned by root and not accessible to group or others" "$T/m9.out" ||
	{ cat "$T/m9.out" >&2; die "no clear message for the key file's mode"; }

sfs_umount "$T/m1"
sfs_umount "$T/m2"
