#!/usr/bin/env bash
# Ceph: three daemons in one peer group (127.0.0.2-4) each read the whole dataset, every byte right, and the OSD serves it about once, not three times.
# needs: ceph
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
. "$REPO/tests/lib_peers.sh"

peers_setup 3

log "the three nodes read everything at once"
osd0=$(osd_read_bytes)
pids=()
for i in 1 2 3; do
	treecmp "$T/src" "$T/m$i" --jobs 3 >"$T/cmp$i.out" 2>&1 &
	pids+=($!)
done
for i in 1 2 3; do
	wait "${pids[$((i - 1))]}" || { cat "$T/cmp$i.out" >&2; die "node $i read wrong bytes"; }
done
osd1=$(osd_read_bytes)

osd=$((osd1 - osd0))
be=0 pin=0
for i in 1 2 3; do
	b=$(stat_get "$T/m$i" backend_bytes)
	p=$(stat_get "$T/m$i" peer_bytes_in)
	log "node $i: backend_bytes $b, peer_bytes_in $p, failures $(stat_get "$T/m$i" peer_failures)"
	be=$((be + b))
	pin=$((pin + p))
	assert_eq "$(stat_get "$T/m$i" read_errors)" 0 "node $i read errors"
	assert_eq "$(stat_get "$T/m$i" peer_corrupt)" 0 "node $i corrupt chunks from peers"
done
log "dataset $DATA_BYTES bytes; backend bytes of the 3 nodes $be; OSD read bytes $osd; from peers $pin"
# every chunk crossed from Ceph once: 1.05x leaves room for a chunk a
# node's fill took from Ceph while its owner was busy past peer_timeout
assert_ge $((DATA_BYTES * 105 / 100)) "$be" "backend bytes of the group (x100 / dataset)"
assert_ge "$be" "$DATA_BYTES" "backend bytes (every chunk at least once)"
assert_ge $((DATA_BYTES * 110 / 100 + 4 * 1048576)) "$osd" "bytes the OSD read out"
assert_ge "$pin" $((DATA_BYTES * 2 * 90 / 100)) "bytes that came from peers"

log "per-peer rows in .stagefs/stats, Prometheus and stagefs top"
stats_dump "$T/m1" >"$T/stats1.json"
"$PYTHON" - "$T/stats1.json" "$PEER_PORT" <<'PY' || die "no peers rows in .stagefs/stats"
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["addr"]: r for r in d["peers"]}
port = sys.argv[2]
assert set(rows) == {f"127.0.0.{i}:{port}" for i in (2, 3, 4)}, rows
assert rows[f"127.0.0.2:{port}"]["self"], rows
others = [rows[f"127.0.0.{i}:{port}"] for i in (3, 4)]
assert all(r["hits"] > 0 and r["bytes_in"] > 0 for r in others), others
assert sum(r["bytes_out"] for r in others) > 0, others
PY
timeout 10 cat "$T/m1/.stagefs/metrics" >"$T/metrics1"
grep -q "^stagefs_peer_bytes_in_total{peer=\"127.0.0.3:$PEER_PORT\"} [1-9]" "$T/metrics1" ||
	die "no stagefs_peer_bytes_in_total for 127.0.0.3 in .stagefs/metrics"
if command -v promtool >/dev/null; then
	promtool check metrics <"$T/metrics1" >"$T/promtool.out" 2>&1 || {
		cat "$T/promtool.out" >&2
		die "promtool rejects the metrics"
	}
fi
"$STAGEFS" top --once "$T/m1" >"$T/top.out" 2>&1 || { cat "$T/top.out" >&2; die "stagefs top failed"; }
grep -q "127.0.0.3:$PEER_PORT" "$T/top.out" || { cat "$T/top.out" >&2; die "stagefs top shows no peer rows"; }

for i in 1 2 3; do
	sfs_umount "$T/m$i"
done
