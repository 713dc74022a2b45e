#!/usr/bin/env bash
# Ceph: a peer killed mid-epoch: the others read on without an error, its share from Ceph, its stagefs_peer_up 0; restarted, it serves again and is up; a hung peer costs a read at most peer_timeout; SIGHUP rereads the peers_file.
# needs: ceph
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
. "$REPO/tests/lib_peers.sh"

# nodes 1 and 2 read their own share from Ceph at 6 MB/s (backend_max_rate), so the kill lands mid-read
peers_setup 3
N3=127.0.0.4:$PEER_PORT

# peer_row MNT ADDR KEY: a member's counter from MNT's "peers" rows
peer_row() {
	stats_dump "$1" | "$PYTHON" -c '
import json, sys
rows = {r["addr"]: r for r in json.load(sys.stdin)["peers"]}
v = rows[sys.argv[1]][sys.argv[2]]
print(int(v) if not isinstance(v, bool) else int(v))' "$2" "$3"
}

log "node 3 reads everything first: the owner of a third of the chunks has them"
treecmp "$T/src" "$T/m3" --jobs 3 || die "node 3 read wrong bytes"
sfs_umount "$T/m1"
sfs_umount "$T/m2"
# epoch_staging=off: the readers' own misses must still go to node 3 when
# it dies (staging would have fetched every chunk in the background first)
peers_mount 1 backend_max_rate=6M epoch_staging=off
peers_mount 2 backend_max_rate=6M epoch_staging=off

log "nodes 1 and 2 read; node 3 is killed (SIGKILL) once node 1 has had a chunk from it"
# Not later: node 3's chunks come at once while nodes 1 and 2 fetch theirs
# at 6 MB/s, so node 1's readahead can have all of node 3's share before a
# quarter of the data is read, and then never asks the dead node.
pids=()
for i in 1 2; do
	treecmp "$T/src" "$T/m$i" --jobs 3 >"$T/cmp$i.out" 2>&1 &
	pids+=($!)
done
from3() { (($(peer_row "$T/m1" "$N3" hits) > 0)); }
wait_for -t 30 from3 || die "node 1 had no chunk from node 3 in 30 s"
kill -KILL "$(sfs_pid "$T/m3")"
fusermount3 -u -z "$T/m3" 2>/dev/null || true
unset "SFS_PID[$(_canon "$T/m3")]"
for i in 1 2; do
	wait "${pids[$((i - 1))]}" || { cat "$T/cmp$i.out" >&2; die "node $i saw an error or wrong bytes after the kill"; }
	assert_eq "$(stat_get "$T/m$i" read_errors)" 0 "node $i read errors"
	assert_eq "$(stat_get "$T/m$i" backend_errors)" 0 "node $i backend errors"
done
f1=$(peer_row "$T/m1" "$N3" failures)
if ((f1 == 0)); then
	# node 3 sent its whole share before the kill (its files answer at
	# once, and with packs a few requests carry them): empty node 1's
	# cache, so that it reads them again and must ask the dead node
	log "node 1 had all of node 3's share before the kill: reading again"
	"$STAGEFS" warmup --evict "$T/m1" >/dev/null 2>&1 || die "evict on node 1 failed"
	drop_caches
	treecmp "$T/src" "$T/m1" --jobs 3 || die "node 1 read wrong bytes with node 3 dead"
	assert_eq "$(stat_get "$T/m1" read_errors)" 0 "node 1 read errors"
	f1=$(peer_row "$T/m1" "$N3" failures)
fi
assert_gt "$f1" 0 "node 1's failed requests to the killed node 3"
assert_ge "$(peer_row "$T/m1" "$N3" fallbacks)" "$f1" "node 1's fallbacks to Ceph for node 3"
grep -q "peer $N3: .*its chunks come from the backend" "$(sfs_log "$T/m1")" ||
	die "node 1 did not log node 3's failure"
# the alert rules' StagefsPeerDown: node 3 is down for node 1 until it answers
peer_up() { grep "^stagefs_peer_up{peer=\"$2\"} " "$1/.stagefs/metrics" | cut -d' ' -f2; }
assert_eq "$(peer_up "$T/m1" "$N3")" 0 "stagefs_peer_up of the killed node 3 on node 1"
# nodes 1 and 2 together hold the dataset; Ceph gave node 3's share again
be=$(($(stat_get "$T/m1" backend_bytes) + $(stat_get "$T/m2" backend_bytes)))
assert_gt "$be" 0 "backend bytes of nodes 1 and 2"

log "node 3 restarts with its cache: it rejoins"
peers_mount 3
"$STAGEFS" warmup --evict "$T/m1" >/dev/null 2>&1 || die "evict on node 1 failed"
back() { [[ $(peer_row "$T/m1" "$N3" backoff) == 0 ]]; }
wait_for -t 35 back || die "node 3 still backed off on node 1"
h0=$(peer_row "$T/m1" "$N3" hits)
drop_caches
treecmp "$T/src" "$T/m1" --jobs 3 || die "node 1 read wrong bytes after node 3 rejoined"
h1=$(peer_row "$T/m1" "$N3" hits)
log "node 1: $((h1 - h0)) chunks from the restarted node 3"
assert_gt $((h1 - h0)) 0 "chunks node 1 had from node 3 after its restart"
assert_eq "$(peer_up "$T/m1" "$N3")" 1 "stagefs_peer_up of the restarted node 3 on node 1"
assert_eq "$(stat_get "$T/m1" read_errors)" 0 "node 1 read errors"

log "node 2 hangs (SIGSTOP): node 1 (peer_timeout=1s) waits at most that before Ceph"
sfs_umount "$T/m1"
peers_mount 1 peer_timeout=1s
"$STAGEFS" warmup --evict "$T/m1" >/dev/null 2>&1 || die "evict on node 1 failed"
N2=127.0.0.3:$PEER_PORT
f0=$(peer_row "$T/m1" "$N2" failures)
stopped=$(sfs_pid "$T/m2")
kill -STOP "$stopped"
trap 'kill -CONT $stopped 2>/dev/null' EXIT
drop_caches
"$PYTHON" - "$T/src" "$T/m1" <<'PY' || die "a read waited too long for the hung peer, or read wrong"
import hashlib, os, sys, time
src, mnt = sys.argv[1], sys.argv[2]
worst, n = 0.0, 0
for d, _, files in os.walk(src):
    for f in sorted(files):
        p = os.path.join(d, f)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        q = os.path.join(mnt, os.path.relpath(p, src))
        t = time.monotonic()
        data = open(q, "rb").read()
        worst = max(worst, time.monotonic() - t)
        if hashlib.sha256(data).digest() != hashlib.sha256(open(p, "rb").read()).digest():
            sys.exit(f"{q} reads wrong")
        n += 1
print(f"{n} files right; the slowest took {worst:.2f} s")
# peer_timeout 1 s, then Ceph: a file of up to 12 MiB at most ~2 s more here
if worst > 4.0:
    sys.exit(f"a file took {worst:.2f} s with peer_timeout=1s")
PY
kill -CONT "$stopped"
trap - EXIT
assert_gt $(($(peer_row "$T/m1" "$N2" failures) - f0)) 0 "node 1's failures for the hung node 2"
grep -q "peer $N2: Connection timed out; its chunks come from the backend" "$(sfs_log "$T/m1")" ||
	die "node 1 did not log node 2's timeout"
assert_eq "$(stat_get "$T/m1" read_errors)" 0 "node 1 read errors with node 2 hung"

log "SIGHUP: the group from a peers_file a scheduler wrote (node 3 left)"
members() { [[ $(stat_get "$T/m1" peer_members) == "$1" ]]; }
assert_eq "$(stat_get "$T/m1" peer_members)" 2 "node 1's other members"
printf '# written by the scheduler\n127.0.0.3:%s\n' "$PEER_PORT" >"$T/peers.list"
sed -i -e "s|^peers = .*|peers = 127.0.0.2:$PEER_PORT|" -e "\$a peers_file = $T/peers.list" "$PEER_CONF"
kill -HUP "$(sfs_pid "$T/m1")"
wait_for -t 10 members 1 || die "node 1 did not take the peers_file at SIGHUP"
assert_eq "$(peer_row "$T/m1" "$N3" member)" 0 "node 3 is no member after the reload"
assert_eq "$(peer_row "$T/m1" "127.0.0.3:$PEER_PORT" member)" 1 "node 2 is a member after the reload"
echo "127.0.0.3:$PEER_PORT bogus" >"$T/peers.list"
kill -HUP "$(sfs_pid "$T/m1")"
wait_for -t 10 grep -q "reload: peers: .*bogus" "$(sfs_log "$T/m1")" || die "a bad peers_file was not refused"
assert_eq "$(stat_get "$T/m1" peer_members)" 1 "members after a refused peers_file"

for i in 1 2 3; do
	sfs_umount "$T/m$i"
done
