#!/usr/bin/env bash
# Ceph: two peer-group nodes mount a 300k-entry manifest fetched part by part: each answers having fetched under 1 % of it (the peer server indexes nothing), and files read on one node come from the other, located by inode and chunk index.
# needs: ceph
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
helper=$REPO/tools/bench/scale_dataset
[[ -x $helper ]] || die "$helper is not built (make test-progs)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NAME=pl$$
N=${PEERS_LARGE_N:-300000}
PORT=$((20000 + (RANDOM % 20000)))
R() { rados -p "$POOL" "$@"; }
now_ms() { date +%s%3N; }
fetched() { stat_get "$1" manifest_fetched_bytes; }
entries=$((N + (N + 999) / 1000 + 1))

# --- a published dataset of N files: 16 real chunks, the manifest put by hand
mkdir -p "$T/blobs"
size=$("$helper" "$N" "$T/m.manifest" "$T/blobs")
# --pack-max 0: the manifest put by hand names the blobs' chunk objects
"$STAGEFS" publish -q --ceph-conf "$CEPH_CONF" --pack-max 0 "$T/blobs" "rados://$POOL/${NAME}b" >"$T/pub.out" 2>&1 ||
	{ cat "$T/pub.out"; die "publish of the blobs failed"; }
PIECE=$((32 * 1048576))
nparts=$(((size + PIECE - 1) / PIECE))
split -b "$PIECE" -d -a 3 "$T/m.manifest" "$T/piece."
for ((i = 0; i < nparts; i++)); do R put "sfs.manifest.$NAME.1.$i" "$T/piece.$(printf %03d "$i")"; done
printf 'parts %d %d\n' "$nparts" "$size" >"$T/head"
R put "sfs.manifest.$NAME.1" "$T/head"
log "$N files, a manifest of $size bytes in $nparts objects"

(umask 077 && "$PYTHON" -c "import secrets; print(secrets.token_hex(32))" >"$T/peer.key")
cat >"$T/peers.conf" <<CONF
[stagefs]
peers = 127.0.0.2:$PORT, 127.0.0.3:$PORT
peer_key_file = $T/peer.key
peer_timeout = 5s
CONF

# --- a mount with no peer group, for comparison; then both nodes mount:
# each answers having fetched under 1 % of the manifest, holding about
# what the mount without peers holds
mounted() {	# mounted I [ARG...]: mount on $T/mI, wait for an answer, log
	local i=$1 ms f pid t0
	shift
	t0=$(now_ms)
	sfs_mount "rados://$POOL/$NAME@1" "$T/m$i" "ceph_conf=$CEPH_CONF" "cache_dir=$T/cache$i" \
		"runtime_dir=$T/run$i" rados_timeout=10s manifest_fill=no "$@"
	stat "$T/m$i/d00000/img_00000001.jpg" >/dev/null || die "mount $i does not answer"
	ms=$(($(now_ms) - t0))
	f=$(fetched "$T/m$i")
	pid=$(sfs_pid "$T/m$i")
	anon=$(awk '/^RssAnon/ { print $2 }' "/proc/$pid/status")
	log "mount $i${1:+ ($*)}: answered in $ms ms; $f of $size manifest bytes fetched; RssAnon $anon KiB"
	((f * 100 < size)) || die "mount $i fetched $f of $size manifest bytes before answering (>= 1 %)"
}
mounted 0
anon0=$anon
sfs_umount "$T/m0"
for i in 1 2; do
	mounted "$i" -c "$T/peers.conf" "peer_listen=127.0.0.$((i + 1)):$PORT"
	more=$(((anon - anon0) * 1024 / entries))
	log "node $i: $more B per entry more than the mount without peers"
	((more <= 30)) || die "node $i holds $more B per entry more than a mount without peers (bound 30)"
done

# --- files read on node 1: the chunks node 2 owns come from node 2, which
# finds each by the inode and index the request names, touching one part
"$PYTHON" - "$T/m1" "$T/blobs" "$N" <<'PY' || die "a sampled file reads back wrong through the peer group"
import sys
m, blobs, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
want = [open("%s/b%02d" % (blobs, k), "rb").read() for k in range(16)]
for i in list(range(n // 2, n // 2 + 16)) + list(range(0, n, n // 64)):
    p = "%s/d%05d/img_%08d.jpg" % (m, i // 1000, i)
    if open(p, "rb").read() != want[i % 16]:
        sys.exit("%s differs" % p)
PY
pin=$(stat_get "$T/m1" peer_bytes_in)

f2=$(fetched "$T/m2")
log "node 1: peer_bytes_in $pin, peer_failures $(stat_get "$T/m1" peer_failures); node 2: $f2 manifest bytes fetched"
assert_eq "$(stat_get "$T/m1" read_errors)" 0 "node 1 read errors"
assert_eq "$(stat_get "$T/m1" peer_corrupt)" 0 "node 1 corrupt chunks from peers"
assert_ge "$pin" 1 "bytes node 1 took from node 2"
assert_eq "$(stat_get "$T/m1" peer_failures)" 0 "node 1 requests node 2 failed"
((f2 * 20 < size)) || die "node 2 fetched $f2 of $size manifest bytes to serve a few chunks (>= 5 %)"
for i in 1 2; do sfs_umount "$T/m$i"; done
