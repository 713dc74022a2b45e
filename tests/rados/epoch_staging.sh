#!/usr/bin/env bash
# Ceph: a plain shuffled multi-worker reader of a published dataset makes the daemon stage the rest of it: staged bytes in the stats, every byte compared, and with the OSD stopped the next epoch reads all of it from the cache.
# needs: ceph
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NAME=epoch$$
# 300 distinct files of 24 KiB (7 MiB): one chunk each
"$PYTHON" - "$T/src" <<'EOF'
import os, random, sys
r = random.Random(19)
for i in range(300):
    d = os.path.join(sys.argv[1], "c%d" % (i % 6))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "s%03d.jpg" % i), "wb") as f:
        f.write(r.randbytes(24 * 1024))
EOF
# --pack-max 0: staging's own work; with packs, each reader's miss reads
# its pack ahead, which leaves staging little to do (tests/rados/pack_reads.sh)
"$STAGEFS" publish --ceph-conf "$CEPH_CONF" --pack-max 0 "$T/src" "rados://$POOL/$NAME" \
	>"$T/pub.out" 2>&1 || { cat "$T/pub.out"; die "publish failed"; }

M=$T/mnt
sfs_mount "rados://$POOL/$NAME" "$M" "ceph_conf=$CEPH_CONF" rados_timeout=5s \
	epoch_staging_files=32
READER=$REPO/tools/bench/epoch_reader.py
"$PYTHON" "$READER" "$M" --workers 3 --compute 0.01 --seed 3 --verify "$T/src" >"$T/e1.json" ||
	die "the first epoch failed: $(cat "$T/e1.json")"
cat "$T/e1.json" >&2
# One epoch, one staging; a staging that ended short of complete (a fetch
# failed under load) is started again by the next window, and the log must
# say why.  A complete one is never followed by another: complete is 1 below.
started=$(stat_get "$M" epoch_stagings_started)
assert_ge "$started" 1 "stagings started"
if [[ $started -gt 1 ]]; then
	grep "epoch staging" "$(sfs_log "$M")" >&2
	[[ $(grep -c "epoch staging: .*: \(stopped\|ended\)" "$(sfs_log "$M")") -ge $((started - 1)) ]] ||
		die "$started stagings started and the earlier ones did not stop"
fi
assert_gt "$(stat_get "$M" epoch_staged_bytes)" 0 "bytes staged"
demand=$(stat_get "$M" demand_fetches)
log "demand fetches: $demand of 300"
[[ $demand -lt 150 ]] || die "readers fetched $demand of 300 files themselves"
complete() { [[ $(stat_get "$M" epoch_stagings_complete) -eq 1 ]]; }
wait_for complete || die "the staging did not complete: $(grep 'epoch staging' "$(sfs_log "$M")")"
assert_eq $(($(stat_get "$M" stage_fetches) + demand)) 300 "chunks fetched in all"

log "the OSD stopped: the next epoch comes from the cache"
"$REPO/tools/dev/ceph-cluster.sh" stop-osd "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || die "cannot stop the OSD"
rc=0
"$PYTHON" "$READER" "$M" --workers 3 --seed 4 --verify "$T/src" >"$T/e2.json" || rc=$?
"$REPO/tools/dev/ceph-cluster.sh" start-osd "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || die "cannot restart the OSD"
assert_eq "$rc" 0 "the second epoch with the OSD stopped ($(cat "$T/e2.json"))"
sfs_umount "$M"
echo "ok: staged $(( 300 - demand )) of 300 files from Ceph in the background"
