#!/usr/bin/env bash
# stagefs publish tells the OSD that what it writes is immutable and read whole: the OSD's own record of the ops (`ceph daemon osd.0 dump_historic_ops`) shows a set-alloc-hint of the object's size in every writefull of a chunk, of a pack and of the manifest, and none on the dataset pointer, which every publish rewrites.
# needs: ceph
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_stagefs
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
command -v ceph >/dev/null || skip "no ceph command"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NS=hints$$
osd() { ceph --conf "$CEPH_CONF" daemon osd.0 "$@" >/dev/null; }

# The OSD keeps its osd_op_history_size (20) longest ops of the last
# osd_op_history_duration (600) s: on a cluster the suite has used, slower
# ops of earlier tests would crowd this test's quick writes out.  Age them
# out (the history is trimmed when an op is added), then keep plenty.
osd config set osd_op_history_size 1000 || skip "no admin socket for osd.0"
osd config set osd_op_history_duration 1
restore() { osd config set osd_op_history_size 20; osd config set osd_op_history_duration 600; }
trap 'rc=$?; restore; (exit $rc); _lib_on_exit' EXIT
sleep 1.5
rados -p "$POOL" -N "$NS" stat nothing-here >/dev/null 2>&1 || true	# an op, to trim
sleep 1
osd config set osd_op_history_duration 600

# 3 chunks (1 MiB chunks): 300,000 B, 1 MiB + 476,000 B; c and d (5 and
# 2000 B, under --pack-max, a quarter of a chunk) in one pack of 2005 B
mkdir -p "$T/src"
head -c 300000 /dev/urandom >"$T/src/a"
head -c 1524576 /dev/urandom >"$T/src/b"
echo tiny >"$T/src/c"
head -c 2000 /dev/urandom >"$T/src/d"
"$STAGEFS" publish -q --ceph-conf "$CEPH_CONF" --chunk-size 1M "$T/src" "rados://$POOL/h?ns=$NS" >/dev/null ||
	die "publish failed"
# Ops reach the history from a thread of the OSD's own: allow it a moment.
check() {
	ceph --conf "$CEPH_CONF" daemon osd.0 dump_historic_ops >"$T/ops.json" ||
		die "cannot read the OSD's op history"
	"$PYTHON" - "$T/ops.json" "$NS" <<'PY'
import json, re, sys
ops = json.load(open(sys.argv[1]))["ops"]
ns = sys.argv[2]
bad, seen = [], {"chunk": [], "pack": [], "manifest": [], "dataset": []}
for o in ops:
    d = o["description"]
    m = re.search(r":%s::sfs\.(chunk|pack|manifest|dataset)\.[^:]*:head \[([^\]]*)\]" % re.escape(ns), d)
    if not m or "writefull" not in m.group(2):
        continue
    kind, parts = m.group(1), m.group(2).split(",")
    full = [p for p in parts if p.startswith("writefull ")]
    size = int(full[0].split("~")[1])
    hint = [p for p in parts if p.startswith("set-alloc-hint")]
    seen[kind].append(size)
    if kind == "dataset":
        if hint:
            bad.append("the dataset pointer got a hint: " + d)
    elif hint != ["set-alloc-hint object_size %d write_size %d" % (size, size)]:
        bad.append("no hint of its size: " + d)
print(len(ops), "ops in the history; writefull sizes seen:", seen)
if sorted(seen["chunk"]) != [300000, 476000, 1048576]:
    bad.append("expected the writes of 3 chunks of 300000, 476000 and 1048576 bytes")
if seen["pack"] != [2005]:
    bad.append("expected the write of one pack of 2005 bytes")
if len(seen["manifest"]) != 1 or len(seen["dataset"]) < 1:
    bad.append("expected one manifest write and a dataset pointer write")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
}
for try in 1 2 3 4 5 6 7 8 9 10; do
	check >"$T/check.out" && break
	sleep 0.5
done
cat "$T/check.out"
[[ $try -lt 10 ]] || die "allocation hints: see above"
echo "PASS: chunks, pack and manifest hinted, pointer not"
