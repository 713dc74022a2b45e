#!/usr/bin/env bash
# Ceph: a supervised daemon killed 10 times while readers that check every byte read a published dataset cold (page cache and chunks fetched from the OSD as they go) and warm: no error, no wrong byte; the new daemons find the same node ids in the manifest.
# needs: ceph
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NAME=restart$$
"$PYTHON" - "$T/src" <<'EOF'
import os, random, sys
r = random.Random(29)
for i in range(200):
    d = os.path.join(sys.argv[1], "c%d" % (i % 5))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "s%03d.bin" % i), "wb") as f:
        f.write(r.randbytes(r.choice([20000, 29000, 110000, 600000])))
EOF
"$STAGEFS" publish --ceph-conf "$CEPH_CONF" "$T/src" "rados://$POOL/$NAME" \
	>"$T/pub.out" 2>&1 || { cat "$T/pub.out"; die "publish failed"; }

M=$T/mnt
sfs_mount "rados://$POOL/$NAME" "$M" "ceph_conf=$CEPH_CONF" rados_timeout=10s \
	supervise=on backend_max_rate=15M epoch_staging=off
sup=$(sfs_pid "$M")
logf=$(sfs_log "$M")
ino=$(stat -c %i "$M/c3/s013.bin")
rm -f "$T/stop"
"$PYTHON" "$REPO/tests/verify_reader.py" --threads 4 "$M" "$T/src" "$T/stop" >"$T/reader.json" &
reader=$!
for i in $(seq 1 10); do
	sleep "0.$((RANDOM % 4 + 6))"
	((i % 4)) || echo 3 >/proc/sys/vm/drop_caches
	kill -KILL "$(pgrep -P "$sup" -x stagefs | head -1)"
	wait_for -t 30 grep -q "took the mount .* over (daemon generation $((i + 1))) " "$logf" ||
		{ tail -20 "$logf" >&2; die "kill $i: no daemon took over"; }
done
sleep 0.5
touch "$T/stop"
wait_for -t 60 bash -c "! kill -0 $reader 2>/dev/null" || die "readers still waiting 60 s after the last takeover"
rc=0
wait "$reader" || rc=$?
log "readers: $(cat "$T/reader.json")"
assert_eq "$rc" 0 "readers across 10 kills ($(cat "$T/reader.json"))"
assert_eq "$(stat -c %i "$M/c3/s013.bin")" "$ino" "the inode number of c3/s013.bin"
assert_eq "$(stat_get "$M" daemon_restarts)" 10 "daemon restarts ($(grep -E "supervisor|took the mount" "$logf"))"
treecmp "$T/src" "$M"
sfs_umount "$M"
echo "ok: 10 takeovers under readers of a Ceph dataset"
