#!/usr/bin/env bash
# cephfs:// sources through libcephfs: a tree in CephFS (files of several chunks, an empty file, a symlink, a hard link, a striped layout, a sparse file, a pool namespace) reads byte-exact, read from the data pool's objects directly where it can (the saved map of objects reused with the walk; a bit flipped in it sends its files through the client, and a saved walk without one is walked again) and through the client where it cannot, through a live mount and through a mount of a CephFS snapshot, which keeps serving the bytes as they were when it was taken; a file another client is still writing is walked with its real size; a file changed under a live mount gives EIO (logged), never mixed bytes, and its neighbours read right; warmup fills the cache (no backend read after); a mount again reuses the saved walk of a snapshot or of an unchanged tree, and walks again once the tree's recursive ctime moved; the first mount answers while the walk runs (a directory listed long before the walk ends, the same inode numbers after); a missing file system, snapshot or bad path fails the mount with a clear message; with the OSD stopped an uncached read fails with EIO within rados_timeout (the kernel's second READ of the page fails at once), and once it is back the same mount reads it, though that read was the daemon's first of an OSD.
# needs: ceph
# timeout: 240
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
command -v ceph-mds >/dev/null || skip "ceph-mds is not installed (./install-deps installs it): no CephFS to read"
command -v ceph-fuse >/dev/null || skip "ceph-fuse is not installed (./install-deps installs it): no way to write the tree"
"$STAGEFS" --version >/dev/null 2>&1 || die "stagefs does not run"
TOOL=$REPO/tools/dev/ceph-cluster.sh
T=$TEST_TMPDIR F=$TEST_TMPDIR/cephfs D=ds$$
osd_up() { "$TOOL" start-osd "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || true; }
cleanup() {
	osd_up
	"$TOOL" umount-fs "$STAGEFS_CEPH_DIR" "$F" >/dev/null 2>&1 || true
	"$TOOL" rm-fs "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT

"$TOOL" fs "$STAGEFS_CEPH_DIR" >"$T/fs.log" 2>&1 || die "no CephFS: $(tail -3 "$T/fs.log")"
"$TOOL" mount-fs "$STAGEFS_CEPH_DIR" "$F" >>"$T/fs.log" 2>&1 || die "ceph-fuse mount failed: $(tail -3 "$T/fs.log")"

# the tree, written through ceph-fuse: 3 MiB + a bit (4 chunks of 1 MiB),
# 40 small files, an empty one, a symlink, a second name of a file
mkdir -p "$F/$D/a/b"
head -c $((3 * 1048576 + 4097)) /dev/urandom >"$F/$D/big.bin"
for i in $(seq 1 40); do head -c $((i * 997)) /dev/urandom >"$F/$D/a/f$i"; done
: >"$F/$D/empty"
echo "as it was" >"$F/$D/a/b/note.txt"
ln -s a/b/note.txt "$F/$D/link"
ln "$F/$D/a/f1" "$F/$D/hard1"
# layouts read from the objects directly: striped (3 objects of 256 KiB in
# 64 KiB units) and sparse (its first object missing: read through the
# client); one in a pool namespace (its objects are not where the client's
# layout, which does not name it, says: through the client)
mkdir -p "$F/$D/lay"
touch "$F/$D/lay/striped" "$F/$D/lay/ns"
setfattr -n ceph.file.layout -v "stripe_unit=65536 stripe_count=3 object_size=262144" \
	"$F/$D/lay/striped" || die "cannot set a file's layout"
setfattr -n ceph.file.layout.pool_namespace -v sfsns "$F/$D/lay/ns" || die "cannot set a pool namespace"
head -c 3000000 /dev/urandom >"$F/$D/lay/striped"
head -c 300000 /dev/urandom >"$F/$D/lay/ns"
truncate -s 9000000 "$F/$D/lay/sparse"
printf 'tail' | dd of="$F/$D/lay/sparse" bs=1 seek=8000000 conv=notrunc status=none
for i in $(seq -w 1 20); do mkdir -p "$F/$D/wide/d$i" && echo "$i" >"$F/$D/wide/d$i/x"; done
sync
mkdir "$F/$D/.snap/s1" || die "cannot take a CephFS snapshot"
# after the snapshot, through ceph-fuse (whose caps hold the new size until
# someone asks): the snapshot keeps the old bytes, a live walk sees the new
echo "as it is now, longer" >"$F/$D/a/b/note.txt"

opts=("ceph_conf=$CEPH_CONF" chunk_size=1M rados_timeout=3s)

# --- a snapshot: as it was when taken, every byte
S=$T/snap
sfs_mount "cephfs://cephfs/$D@s1" "$S" "${opts[@]}" "cache_dir=$T/cs"
treecmp "$F/$D/.snap/s1" "$S"
# every file from its objects (66); the sparse one's missing object and
# the one in a namespace (no object of its name outside it) through the client
direct_ok() {
	contains "66 files read from their objects directly" "$(sfs_log "$1")" ||
		die "$1: $(grep -e 'objects' "$(sfs_log "$1")")"
	contains "a hole, data kept inline, or a pool namespace" "$(sfs_log "$1")" ||
		die "$1: the missing object not said"
}
direct_ok "$S"
[[ $(cat "$S/a/b/note.txt") == "as it was" ]] || die "a snapshot's file changed after it was taken: $(cat "$S/a/b/note.txt")"
[[ $(readlink "$S/link") == a/b/note.txt ]] || die "symlink target: $(readlink "$S/link")"
assert_eq "$(stat -c %i "$S/hard1")" "$(stat -c %i "$S/a/f1")" "two names of one file, one inode"
"$STAGEFS" warmup --json "$S" >"$T/w.json" || die "warmup failed: $(cat "$T/w.json")"
r0=$(stat_get "$S" backend_reads)
drop_caches
treecmp "$F/$D/.snap/s1" "$S"
assert_eq "$(stat_get "$S" backend_reads)" "$r0" "backend reads after a warmup"
log "snapshot: byte-exact, warmed, served from the cache"
# mounted again: the saved walk (a snapshot never changes), the same bytes
sfs_umount "$S"
sfs_mount "cephfs://cephfs/$D@s1" "$S" "${opts[@]}" "cache_dir=$T/cs"
contains "index reused" "$(sfs_log "$S")" || die "a snapshot mounted again was walked again"
contains "66 files read from their objects directly" "$(sfs_log "$S")" ||
	die "the saved map of objects was not used: $(grep -e 'objects' "$(sfs_log "$S")")"
treecmp "$F/$D/.snap/s1" "$S"
# a bit flipped in the saved map (the cache's disk): its files through the
# client, the same bytes, said once; never another file's objects.  (The
# saved walk linked into an empty cache: the same files, so it is reused.)
sfs_umount "$S"
mkdir -p -m 700 "$T/cs5/snapshots"
ln "$T"/cs/snapshots/* "$T/cs5/snapshots/" || die "cannot link the saved walk"
om=$(ls "$T"/cs5/snapshots/*.cephfs-objs) || die "no saved map of objects"
"$PYTHON" - "$om" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-16] ^= 2
open(sys.argv[1], "wb").write(b)
PY
sfs_mount "cephfs://cephfs/$D@s1" "$S" "${opts[@]}" "cache_dir=$T/cs5"
contains "index reused" "$(sfs_log "$S")" || die "the linked saved walk was not reused"
treecmp "$F/$D/.snap/s1" "$S"
contains "is corrupt in places" "$(sfs_log "$S")" || die "a corrupt map of objects was not noticed"
# no map at all beside the saved walk: walked again, for one
sfs_umount "$S"
rm -f "$om"
sfs_mount "cephfs://cephfs/$D@s1" "$S" "${opts[@]}" "cache_dir=$T/cs5"
contains "has no map of the files' objects: walking again" "$(sfs_log "$S")" ||
	die "a saved walk without its map was reused: $(grep -e objects -e walk "$(sfs_log "$S")")"
wait_for -t 30 contains "66 files read from their objects directly" "$(sfs_log "$S")" ||
	die "the walk again made no map of objects"
treecmp "$F/$D/.snap/s1" "$S"

# --- the first mount answers while it walks (each directory slowed by 0.15 s,
# one thread, 24 directories: 3.6 s at least), with the finished index's
# inodes.  (A directory holding a file with several names, as the top
# does, is listed once the walk is over: dirscan.h.)
now_ms() { date +%s%3N; }
W=$T/walking	# a mount point of its own: its own log
t0=$(now_ms)
STAGEFS_TEST_SCAN_DELAY_US=150000 sfs_mount "cephfs://cephfs/$D@s1" "$W" "${opts[@]}" \
	"cache_dir=$T/cs3" dir_scan_threads=1
ls -i1 "$W/wide" | LC_ALL=C sort -k2 >"$T/wide.during"
t1=$(now_ms)
contains "walked in" "$(sfs_log "$W")" && die "the walk ended before \`ls\` of a directory: nothing shows the mount answers early"
contains "walking in the background" "$(sfs_log "$W")" || die "no background walk: $(grep -i walk "$(sfs_log "$W")")"
assert_gt 3000 "$((t1 - t0))" "ms from exec to \`ls\` of wide/ during the walk"
assert_eq "$(wc -l <"$T/wide.during")" 20 "entries of wide/ listed during the walk"
stat -c '%i %n' "$W/wide/d20/x" "$W/a/b/note.txt" >"$T/probe.during"
treecmp "$F/$D/.snap/s1" "$W"
wait_for -t 30 contains "walked in" "$(sfs_log "$W")" || die "the walk did not end"
drop_caches
ls -i1 "$W/wide" | LC_ALL=C sort -k2 | cmp -s - "$T/wide.during" || die "inode numbers of wide/ changed when the walk ended"
stat -c '%i %n' "$W/wide/d20/x" "$W/a/b/note.txt" | cmp -s - "$T/probe.during" ||
	die "inode numbers changed when the walk ended"
log "first mount: \`ls\` of wide/ $((t1 - t0)) ms after exec, the walk still running; the same inodes after it"
sfs_umount "$W"

# --- live: the tree as it is at mount, a file still being written included
L=$T/live
sfs_mount "cephfs://cephfs/$D" "$L" "${opts[@]}" "cache_dir=$T/cl"
[[ $(cat "$L/a/b/note.txt") == "as it is now, longer" ]] ||
	die "a file written by another client just before the mount: '$(cat "$L/a/b/note.txt")'"
treecmp "$F/$D" "$L"
direct_ok "$L"
# changed under the mount, before this mount cached it: EIO, never a mix
sfs_umount "$L"
sfs_mount "cephfs://cephfs/$D" "$L" "${opts[@]}" "cache_dir=$T/cl2"
rct() { getfattr --only-values -n ceph.dir.rctime "$F/$D" 2>/dev/null; }
moved() { [[ $(rct) != "$r0" ]]; }
r0=$(rct)
printf 'X' | dd of="$F/$D/big.bin" bs=1 seek=2000000 conv=notrunc status=none
sync
# CephFS propagates a change to the tree's recursive ctime within seconds
wait_for -t 30 moved || die "ceph.dir.rctime did not move in 30 s after a write"
if cat "$L/big.bin" >"$T/out" 2>"$T/err"; then
	die "a file changed under the mount was served ($(cmp "$T/out" "$F/$D/big.bin" >/dev/null && echo new || echo mixed or old) bytes)"
fi
contains "Input/output error" "$T/err" || die "big.bin: $(cat "$T/err")"
contains "changed since it was mounted" "$(sfs_log "$L")" || die "the change was not logged"
cmp "$L/a/f7" "$F/$D/a/f7" || die "a neighbour of the changed file reads wrong"
log "live: walked with the writer's size; a file changed under it gives EIO"
sfs_umount "$L"
# mounted again: walked again, since big.bin changed (ceph.dir.rctime moved)
sfs_mount "cephfs://cephfs/$D" "$L" "${opts[@]}" "cache_dir=$T/cl"
contains "index reused" "$(sfs_log "$L")" && die "a changed tree's saved walk was reused"
cmp "$L/big.bin" "$F/$D/big.bin" || die "big.bin after a new walk"
sfs_umount "$L"
# unchanged since: the saved walk; a file added: the tree's recursive
# ctime moves (CephFS propagates it within seconds) and the next mount walks
sfs_mount "cephfs://cephfs/$D" "$L" "${opts[@]}" "cache_dir=$T/cl"
contains "index reused" "$(sfs_log "$L")" || die "an unchanged tree was walked again"
sfs_umount "$L"
r0=$(rct)
echo "added" >"$F/$D/a/added.txt"
sync
wait_for -t 30 moved || die "ceph.dir.rctime did not move in 30 s"
sfs_mount "cephfs://cephfs/$D" "$L" "${opts[@]}" "cache_dir=$T/cl"
[[ $(cat "$L/a/added.txt") == added ]] || die "a file added since the last walk is not there"
sfs_umount "$L"
log "saved walks: reused for a snapshot and an unchanged tree, not after a change"

# --- what the mount refuses, and why
mkdir -p "$T/bad"
for bad in "cephfs://nosuchfs/$D|no such file system" "cephfs://cephfs/$D@nosnap|no such snapshot" \
	"cephfs://cephfs/$D/../x|may not hold" "cephfs://cephfs/nodir$$|No such file"; do
	uri=${bad%%|*} want=${bad#*|}
	if timeout 60 "$STAGEFS" -f -o "ceph_conf=$CEPH_CONF,cache_dir=$T/cb,runtime_dir=$T/rb" "$uri" "$T/bad" \
		>"$T/bad.out" 2>&1; then
		die "$uri mounted"
	fi
	contains "$want" "$T/bad.out" || die "$uri: expected '$want', got: $(tail -2 "$T/bad.out")"
done
log "bad sources refused with a reason"

# --- a dead OSD: an uncached read fails within rados_timeout (a read through
# the page cache is the kernel's readahead, then its READ of the page, which
# the daemon fails at once: the same range just failed).  No file is read
# before, so the daemon's first object read falls in the outage: a librados
# client so placed never finds the OSD back by itself (osdmap_refresh.h).
sfs_umount "$S"
sfs_mount "cephfs://cephfs/$D@s1" "$S" "${opts[@]}" "cache_dir=$T/cd"
wait_for -t 30 grep -q "files read from their objects directly" "$(sfs_log "$S")" ||
	die "the walk did not end: $(tail -3 "$(sfs_log "$S")")"
"$TOOL" stop-osd "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || die "cannot stop the OSD"
expect_eio 4500 "f3 with the OSD down (rados_timeout=3s)" cat "$S/a/f3"
ls "$S/a" >/dev/null || die "the mount stopped answering"
"$TOOL" start-osd "$STAGEFS_CEPH_DIR" >"$T/start-osd.log" 2>&1 ||
	die "the OSD did not start again: $(tail -3 "$T/start-osd.log")"
log "$(tail -1 "$T/start-osd.log")"
# the OSD back: the same mount reads the file that failed (EIO until its
# librados learns the new OSD map, never wrong bytes), with no remount
wait_for -t 30 same_or_eio "$S/a/f3" "$F/$D/.snap/s1/a/f3" f3 ||
	die "f3 still fails 30 s after the OSD came back"
cmp "$S/a/f2" "$F/$D/.snap/s1/a/f2" || die "f2 reads wrong once the OSD was back"
contains "asking the monitors for the latest OSD map" "$(sfs_log "$S")" ||
	die "no refresh of the OSD map logged after the timeout"
log "OSD back: f3 and f2 read right on the same mount"
sfs_umount "$S"
