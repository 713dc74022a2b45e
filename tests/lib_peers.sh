# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/rados/peers*.sh (after tests/lib.sh): a peer group of daemons on one machine.
#
# peers_setup N [ARG...]: publish a dataset, write the group's key and a
# config naming N nodes, 127.0.0.2 .. 127.0.0.(N+1) on port $PEER_PORT, and
# (unless PEERS_NO_MOUNT=1) mount node i on $T/m$i with its own cache
# $T/cache$i.  ARGs go to every sfs_mount.  Sets T, DATA_BYTES (the bytes of distinct content), PEER_PORT,
# PEER_CONF, PEER_KEY.  PEER_PUBLISH_ARGS: more publish options (a test that
# names chunk objects publishes with --pack-max 0).
# peers_mount I [ARG...]: mount node I (again).
# osd_read_bytes: bytes the OSD has sent to clients so far (its perf counters).

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
PEER_NAME=peers$$
PEER_PORT=$((20000 + (RANDOM % 20000)))

osd_read_bytes() {
	ceph --conf "$CEPH_CONF" daemon osd.0 perf dump |
		"$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["osd"]["op_r_out_bytes"])'
}

peers_mount() {
	local i=$1
	shift
	sfs_mount "rados://$POOL/$PEER_NAME" "$T/m$i" -c "$PEER_CONF" "ceph_conf=$CEPH_CONF" \
		"cache_dir=$T/cache$i" "runtime_dir=$T/run$i" rados_timeout=10s \
		"peer_listen=127.0.0.$((i + 1)):$PEER_PORT" "$@"
}

peers_setup() {
	local n=$1 i list=
	shift
	gentree "$T/src" --small 150 --big-mb 12 --wide 40 --chunk 1M
	# publish stores hard links as separate files (docs/publish.md): break them
	find "$T/src" -type f -links +1 -exec sh -c 'cp -p "$1" "$1.t" && mv "$1.t" "$1"' _ {} \;
	# shellcheck disable=SC2086
	"$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 1M ${PEER_PUBLISH_ARGS:-} "$T/src" "rados://$POOL/$PEER_NAME" \
		>"$T/pub.out" 2>&1 || { cat "$T/pub.out"; die "publish failed"; }
	DATA_BYTES=$("$PYTHON" - "$T/src" <<'PY'
import hashlib, os, sys
seen, total = set(), 0
for d, _, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(d, f)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        h = hashlib.sha256(open(p, "rb").read()).digest()
        if h not in seen:
            seen.add(h)
            total += os.path.getsize(p)
print(total)
PY
)
	PEER_KEY=$T/peer.key
	(umask 077 && "$PYTHON" -c "import secrets; print(secrets.token_hex(32))" >"$PEER_KEY")
	for ((i = 1; i <= n; i++)); do
		list+="${list:+, }127.0.0.$((i + 1)):$PEER_PORT"
	done
	PEER_CONF=$T/peers.conf
	cat >"$PEER_CONF" <<CONF
[stagefs]
peers = $list
peer_key_file = $PEER_KEY
peer_timeout = 5s
CONF
	for ((i = 1; i <= n && !${PEERS_NO_MOUNT:-0}; i++)); do
		peers_mount "$i" "$@"
	done
}
