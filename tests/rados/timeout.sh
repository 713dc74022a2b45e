#!/usr/bin/env bash
# rados_timeout is what a reader waits: with the cluster's ceph.conf saying 10 s and the mount saying 5s, a read with the OSD stopped fails with EIO within ~6.5 s (several files, cold and repeated), and the mount answers throughout.
# needs: ceph
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NAME=tmo$$
TOOL=$REPO/tools/dev/ceph-cluster.sh
LIMIT_MS=${SFS_TIMEOUT_LIMIT_MS:-6500}	# rados_timeout=5s plus slack

# the cluster's ceph.conf must say something longer than the mount's 5 s, or
# this test proves nothing
cconf=$(grep -E '^\s*rados_osd_op_timeout' "$CEPH_CONF" | tr -dc 0-9 || true)
[[ -n $cconf && $cconf -gt 6 ]] || die "the test cluster's ceph.conf has rados_osd_op_timeout='$cconf'; expected > 6 s"

mkdir -p "$T/src/d"
for i in 0 1 2 3; do head -c $((3 * 1048576 + 4097 * i)) /dev/urandom >"$T/src/d/f$i"; done
"$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 1M "$T/src" "rados://$POOL/$NAME" \
	>"$T/pub.out" 2>&1 || { cat "$T/pub.out"; die "publish failed"; }

M=$T/m
sfs_mount "rados://$POOL/$NAME" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$T/cache" rados_timeout=5s
cmp "$M/d/f0" "$T/src/d/f0" || die "f0 reads wrong before the OSD stops"

osd_up() { "$TOOL" start-osd "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || true; }
"$TOOL" stop-osd "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || die "cannot stop the OSD"
trap 'osd_up' EXIT

# read_eio WHAT CMD...: CMD must fail with EIO within LIMIT_MS (rados_timeout=5s)
read_eio() { expect_eio "$LIMIT_MS" "$@"; }
# a whole file through the page cache (kernel readahead, then its retry)
read_eio "cat f1" cat "$M/d/f1"
# one small read in the middle of a chunk, no readahead from the reader
read_eio "dd f2" dd if="$M/d/f2" of=/dev/null bs=4k count=1 skip=300 iflag=direct
# a read spanning two chunks
read_eio "dd f3" dd if="$M/d/f3" of=/dev/null bs=64k count=2 skip=15 iflag=direct
# the same file again: no longer than the first time
read_eio "cat f1 again" cat "$M/d/f1"
ls "$M/d" >/dev/null || die "the mount stopped answering"

trap - EXIT
osd_up
cmp "$M/d/f1" "$T/src/d/f1" || die "f1 reads wrong after the OSD came back"
sfs_umount "$M"
