#!/usr/bin/env bash
# ceph-cluster.sh fs / mount-fs / umount-fs / rm-fs (the CephFS bench.sh au compares with): an MDS comes up, ceph-fuse mounts it, files written read back identical after a remount, umount-fs leaves no mount and no ceph-fuse behind, fs again is a no-op, rm-fs leaves the cluster as it was.
# needs: ceph
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_root
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
command -v ceph-mds >/dev/null || skip "ceph-mds is not installed (./install-deps installs it)"
command -v ceph-fuse >/dev/null || skip "ceph-fuse is not installed (./install-deps installs it)"
[[ -e /dev/fuse ]] || skip "no /dev/fuse"
TOOL=$REPO/tools/dev/ceph-cluster.sh
T=$TEST_TMPDIR M=$T/cephfs
# leave the suite's cluster as it was (no MDS of this session for the
# runner to kill, no file system without one)
trap '"$TOOL" rm-fs "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || true' EXIT

"$TOOL" fs "$STAGEFS_CEPH_DIR" || die "fs failed"
"$TOOL" status "$STAGEFS_CEPH_DIR" 2>"$T/status.err" >/dev/null || die "status after fs: $(cat "$T/status.err")"
grep -q '^mds.a: running' "$T/status.err" || die "status does not show mds.a: $(cat "$T/status.err")"
ceph fs ls --format json | "$PYTHON" -c 'import json, sys; assert any(f["name"] == "cephfs" for f in json.load(sys.stdin))' ||
	die "no file system cephfs"

# ceph-fuse processes of this cluster mounted on $M
fuse_pids() { pgrep -f -x "ceph-fuse -c $CEPH_CONF $M" || true; }

"$TOOL" mount-fs "$STAGEFS_CEPH_DIR" "$M" || die "mount-fs failed"
mountpoint -q "$M" || die "$M is not a mount point"
[[ -n $(fuse_pids) ]] || die "no ceph-fuse process for $M"
mkdir -p "$M/t$$"
head -c 5000000 /dev/urandom >"$T/a"
cp "$T/a" "$M/t$$/a"
"$TOOL" umount-fs "$STAGEFS_CEPH_DIR" "$M" || die "umount-fs failed"
mountpoint -q "$M" && die "$M still mounted after umount-fs"
[[ -z $(fuse_pids) ]] || die "ceph-fuse still running after umount-fs: $(fuse_pids)"

# a second fs changes nothing; a new mount reads the file back
"$TOOL" fs "$STAGEFS_CEPH_DIR" || die "fs again failed"
"$TOOL" mount-fs "$STAGEFS_CEPH_DIR" "$M" || die "mount-fs again failed"
cmp "$T/a" "$M/t$$/a" || die "the file read back differs"
rm -rf "${M:?}/t$$"
"$TOOL" umount-fs "$STAGEFS_CEPH_DIR" "$M" || die "umount-fs failed"
[[ -z $(fuse_pids) ]] || die "ceph-fuse still running"
"$TOOL" rm-fs "$STAGEFS_CEPH_DIR" || die "rm-fs failed"
ceph fs ls --format json | contains '"cephfs"' && die "cephfs still there after rm-fs"
[[ -z $(pgrep -f -x "ceph-mds -c $CEPH_CONF -i a" || true) ]] || die "ceph-mds still running after rm-fs"
"$TOOL" status "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || die "cluster status not clean after rm-fs"
log "ok"
