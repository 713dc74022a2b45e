#!/usr/bin/env bash
# Ceph: stagefs warmup of a published dataset, then with the OSD stopped every byte reads back right with zero backend reads; --shard i/3 covers every chunk once.
# needs: ceph
# timeout: 400
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NAME=warm$$
jget() { "$PYTHON" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$1" "$2"; }

gentree "$T/src" --small 400 --big-mb 16 --chunk 1M
# publish stores hard links as separate files (docs/publish.md): break them
find "$T/src" -type f -links +1 -exec sh -c 'cp -p "$1" "$1.t" && mv "$1.t" "$1"' _ {} \;
"$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 1M "$T/src" "rados://$POOL/$NAME" \
	>"$T/pub.out" 2>&1 || { cat "$T/pub.out"; die "publish failed"; }

M=$T/mnt
sfs_mount "rados://$POOL/$NAME" "$M" "ceph_conf=$CEPH_CONF" rados_timeout=5s

log "shards 0..2 of 3, one after another"
"$STAGEFS" warmup --check --json "$M" >"$T/all.json"
total=$(jget "$T/all.json" chunks)
assert_gt "$total" 0 "chunks in the dataset"
sum=0
for i in 0 1 2; do
	"$STAGEFS" warmup --shard "$i/3" --json "$M" >"$T/s$i.json"
	cat "$T/s$i.json" >&2
	assert_eq "$(jget "$T/s$i.json" failed)" 0 "shard $i failures"
	# disjoint: nothing of shard i was brought in by the shards before it
	assert_eq "$(jget "$T/s$i.json" cached_before)" 0 "shard $i found cached (shards overlap)"
	sum=$((sum + $(jget "$T/s$i.json" chunks)))
	# identical files share chunks (one cache file): fetched once, the
	# copies settle as cached_meanwhile
	assert_eq $(($(jget "$T/s$i.json" fetched) + $(jget "$T/s$i.json" cached_meanwhile))) \
		"$(jget "$T/s$i.json" chunks)" "shard $i fetched + cached_meanwhile"
done
assert_eq "$sum" "$total" "chunks over the 3 shards"
# covering: after the three, everything is cached
"$STAGEFS" warmup --check --json "$M" >"$T/after.json"
assert_eq "$(jget "$T/after.json" cached_before)" "$total" "chunks cached after the 3 shards"
assert_eq "$(stat_get "$M" warmup_fetches)" "$(stat_get "$M" backend_reads)" "backend reads = warmup fetches"

log "OSD stopped: everything from the cache"
osd_down=0
restart_osd() { [[ $osd_down == 1 ]] && "$REPO/tools/dev/ceph-cluster.sh" start-osd "$STAGEFS_CEPH_DIR" >/dev/null 2>&1; osd_down=0; }
trap 'restart_osd' EXIT
reads0=$(stat_get "$M" backend_reads)
"$REPO/tools/dev/ceph-cluster.sh" stop-osd "$STAGEFS_CEPH_DIR" >/dev/null 2>&1
osd_down=1
drop_caches
treecmp "$T/src" "$M" --jobs 4
assert_eq $(($(stat_get "$M" backend_reads) - reads0)) 0 "backend reads with the OSD down"
assert_eq "$(stat_get "$M" backend_errors)" 0 "backend errors"
restart_osd
sfs_umount "$M"
