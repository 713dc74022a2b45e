#!/usr/bin/env bash
# Ceph: peers are trusted for nothing: a peer sending wrong bytes is caught (never cached or served), a wrong key, a replay or a group-readable key file are refused.
# needs: ceph
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/ceph-cluster.sh)"
. "$REPO/tests/lib_peers.sh"

# node 2 flips a byte of every chunk it serves (peer_test_corrupt)
PEERS_NO_MOUNT=1 peers_setup 2
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

log "requests by hand: the right key gets a chunk, a wrong key or a replay nothing"
# a chunk of this dataset (the pool holds other tests' datasets too, and a
# node serves only those it has mounted): a file of one 1 MiB chunk at
# most is that chunk, named by its XXH3-128
CFILE=$(find "$T/src" -type f -size +4k -size -1024k | sort | sed -n 1p)
[[ -n $CFILE ]] || die "no one-chunk file in $T/src"
CHUNK=sfs.chunk.$("$PYTHON" -c 'import sys, xxhash; print(xxhash.xxh3_128_hexdigest(open(sys.argv[1], "rb").read()))' "$CFILE")
rados --conf "$CEPH_CONF" -p "$POOL" stat "$CHUNK" >/dev/null || die "no chunk object $CHUNK for $CFILE"
CLEN=$(stat -c %s "$CFILE")
# the request names where the asker's manifest has the chunk: the dataset
# (a hash of its URI and version: a new name's first publish is version 1),
# the file's inode (st_ino on a mount of one dataset) and the chunk's index
CINO=$(stat -c %i "$T/m1/${CFILE#"$T/src/"}")
"$PYTHON" - "$PEER_KEY" "127.0.0.2" "$PEER_PORT" "${CHUNK#sfs.chunk.}" "$CLEN" "$CINO" "rados://$POOL/$PEER_NAME@1" <<'PY' || die "hand-made requests"
import hashlib, hmac, os, socket, struct, sys, time, xxhash
keyfile, host, port, idhex, clen = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
ino, tag = int(sys.argv[6]), xxhash.xxh3_64_intdigest(sys.argv[7].encode()) | 1
key = open(keyfile).readline().strip().encode()
hi, lo = int(idhex[:16], 16), int(idhex[16:], 16)

def request(k, nonce=None, ts=None, loc=None):
    nonce = nonce or os.urandom(16)
    ts = int(time.time() * 1000) if ts is None else ts
    t, i, x = loc or (tag, ino, 0)
    body = struct.pack("<IIQ16sQQIIQQ", 0x32504653, 1, ts, nonce, hi, lo, clen, x, i, t)
    return body + hmac.new(k, body, hashlib.sha256).digest()[:24]

def ask(msg, src="127.0.0.3"):
    s = socket.create_connection((host, port), timeout=10, source_address=(src, 0))
    s.sendall(msg)
    data = b""
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        data += b
        if len(data) >= 16:
            st, n = struct.unpack_from("<II", data, 4)
            if len(data) >= 16 + (n if st == 0 else 0):
                break
    s.close()
    return data

assert ask(request(b"x" * 64)) == b"", "a request with a wrong key was answered"
good = request(key)
rep = ask(good)
magic, st, n = struct.unpack_from("<III", rep)
assert magic == 0x31524653 and st == 0 and n == clen, (hex(magic), st, n)
assert xxhash.xxh3_128_hexdigest(rep[16:16 + n]) == idhex, "the chunk does not hash to its id"
assert ask(good) == b"", "a replayed request was answered"
assert ask(request(key, ts=int(time.time() * 1000) - 120000)) == b"", "a stale request was answered"
# a locator that does not name the chunk (another dataset or version, an
# inode or index out of range, a directory): ENOENT, nothing else
for loc in [(tag ^ 2, ino, 0), (tag, ino, 1), (tag, ino, 1 << 31), (tag, 1 << 62, 0),
            (tag, (1 << 64) - 1, 0), (tag, 1, 0), (tag, 0, 0), (0, ino, 0)]:
    rep = ask(request(key, loc=loc))
    assert struct.unpack_from("<III", rep)[1:] == (2, 0) and len(rep) == 16, (loc, rep[:16])
# an unknown chunk id at the right place: the same
hi, lo = 1, 2
rep = ask(request(key))
assert struct.unpack_from("<III", rep)[1:] == (2, 0) and len(rep) == 16, rep[:16]
# an SFP1 request (an older node, no locator): ENOENT, so that it reads its backend
body = struct.pack("<IIQ16sQQII", 0x31504653, 1, int(time.time() * 1000), os.urandom(16), hi, lo, clen, 0)
rep = ask(body + hmac.new(key, body, hashlib.sha256).digest()[:24])
assert struct.unpack_from("<III", rep)[1:] == (2, 0) and len(rep) == 16, rep[:16]
print("hand-made requests: right key served, replay, wrong key, stale time refused; wrong places and SFP1 not here")
PY
grep -q "refused a request from 127.0.0.3: wrong key" "$(sfs_log "$T/m1")" || die "the wrong key was not logged"
[[ $(grep -c "refused a request from 127.0.0.3" "$(sfs_log "$T/m1")") == 1 ]] ||
	die "refusals of one source logged more than once"
refused=$("$PYTHON" -c '
import json, sys
print([r for r in json.load(sys.stdin)["peers"] if r["addr"] == sys.argv[1]][0]["refused"])' \
	"$N2" < <(stats_dump "$T/m1"))
assert_eq "$refused" 4 "requests from node 2's address refused (wrong key, replay, stale, SFP1)"

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
