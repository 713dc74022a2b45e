#!/usr/bin/env bash
# Ceph: packs read by the daemon: a cold read of one small file reads its range and its pack follows at readahead priority, its files stored in the page cache as it arrives (each byte charged once); warmup reads each pack once into one cache file, waking the I/O engine a batch at a time (no file a small file; no demand fetch after, every file put in the page cache at its open from its pack's entry, and not again while the kernel holds it, every byte equal); --shard i/2 splits the packs; damaged pack bytes fail exactly the damaged files (EIO, logged), their neighbours read right; copies of a file, stored once, are fetched once and each reads right.
# needs: ceph
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NS=pk$$				# a namespace of its own: its objects are this test's
URI="rados://$POOL/pk?ns=$NS"
jget() { "$PYTHON" -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2"; }
packs() { rados -p "$POOL" -N "$NS" ls | grep '^sfs\.pack\.' | sort || true; }

# 600 files of 1..40 KB in 6 directories, and one of 3 MiB (not packed)
"$PYTHON" - "$T/src" <<'PY'
import os, random, sys
r = random.Random(30)
for d in range(6):
    os.makedirs(f"{sys.argv[1]}/d{d}", exist_ok=True)
    for i in range(100):
        with open(f"{sys.argv[1]}/d{d}/f{i:03}.jpg", "wb") as f:
            f.write(r.randbytes(r.randint(1, 40 * 1024)))
with open(f"{sys.argv[1]}/big.bin", "wb") as f:
    f.write(r.randbytes(3 << 20))
PY
"$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 1M --json "$T/src" "$URI" \
	>"$T/pub.json" 2>"$T/pub.err" || { cat "$T/pub.err"; die "publish failed"; }
mapfile -t PACKS < <(packs)
np=${#PACKS[@]}
# ~12 MiB of small files in packs of at most 1 MiB
((np >= 12 && np <= 20)) || die "$np packs for 600 small files of ~12 MiB with 1 MiB chunks"
log "published: $np packs, $(rados -p "$POOL" -N "$NS" ls | grep -c '^sfs\.chunk\.') chunk objects"
[[ $(rados -p "$POOL" -N "$NS" ls | grep -c '^sfs\.chunk\.') == 3 ]] || die "expected 3 chunk objects (big.bin), got $(rados -p "$POOL" -N "$NS" ls | grep -c '^sfs\.chunk\.')"

# --- a cold read of one file: its range now, its pack right after
M=$T/m1
sfs_mount "$URI" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$T/c1" rados_timeout=5s
ls -lR "$M" >/dev/null	# the kernel holds every file's inode, as after a DataLoader's scan
cmp "$M/d3/f050.jpg" "$T/src/d3/f050.jpg" || die "d3/f050.jpg: wrong bytes"
pack_came() { [[ $(stat_get "$M" pack_reads) -ge 1 && $(stat_get "$M" pack_files) -ge 10 ]]; }
wait_for -t 10 pack_came ||
	die "no pack read followed the cold read: pack_reads $(stat_get "$M" pack_reads), pack_files $(stat_get "$M" pack_files)"
log "one cold read: pack_reads $(stat_get "$M" pack_reads), pack_files $(stat_get "$M" pack_files)"
# a pack read for readers: its files stored in the kernel's page cache as
# it arrived (fuse/packpush.h), its entry written with O_DIRECT
pushed() { (($(stat_get "$M" pack_pushes) >= 10)); }
wait_for -t 10 pushed || die "the pack's files were not pushed as it arrived: pack_pushes $(stat_get "$M" pack_pushes)"
assert_ge "$(stat_get "$M" uring_direct_ops)" 1 "O_DIRECT writes of the pack's entry"
# every byte a reader got, however it was served (READ, passthrough, a push)
node_read() { stats_dump "$M" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["node"]["read_bytes"])'; }
q0=$(stat_get "$M" read_requests) b0=$(node_read) o0=$(stat_get "$M" read_push_kept)
all=$(find "$T/src" -type f -printf "%s\n" | awk '{ s += $1 } END { print s }')
treecmp "$T/src" "$M"
# every byte charged once: a pushed file at its open (or its release, when
# it was opened before its pack came), any other at its READs
# (the kernel sends a RELEASE after close() returns: wait for the last ones)
charged() { (($(node_read) - b0 >= all)); }
wait_for -t 10 charged || true
assert_eq $(($(node_read) - b0)) "$all" "bytes charged for a walk of every file"
log "a walk after the first pack came: $(($(stat_get "$M" read_requests) - q0)) READs, $(($(stat_get "$M" read_push_kept) - o0)) opens of pushed files, $(stat_get "$M" pack_pushes) files pushed as their packs came"
assert_ge $(($(stat_get "$M" read_push_kept) - o0)) 10 "opens of files pushed as their pack came"
# each pack's first miss reads its range and queues the pack: far fewer
# backend reads than files
# (backend_reads counts object reads: a pack read is one, whatever it brings)
ops=$(stat_get "$M" backend_reads)
log "a cold walk of 601 files: $ops object reads ($(stat_get "$M" pack_reads) of packs)"
((ops < 300)) || die "$ops object reads for 601 files in $np packs"
sfs_umount "$M"

# --- warmup: each pack read once, every file cached, nothing fetched after
M=$T/m2
sfs_mount "$URI" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$T/c2" rados_timeout=5s
w0=$(stat_get "$M" engine_wakeups)
"$STAGEFS" warmup --json "$M" >"$T/w.json" || die "warmup failed: $(cat "$T/w.json")"
assert_eq "$(jget "$T/w.json" failed)" 0 "warmup failures"
assert_eq "$(stat_get "$M" pack_reads)" "$np" "pack reads of a warmup"
# the walk wakes the I/O engine a batch of files at a time, and a pack's
# read wakes it once, not once a file: 5-13 times here, 63-106 when it
# woke the engine for each file (before e0617ba)
wakes=$(($(stat_get "$M" engine_wakeups) - w0))
log "warmup of 601 files in $np packs: the engine woken $wakes times"
((wakes <= 35)) || die "the engine was woken $wakes times for a warmup of 601 files in $np packs"
assert_eq "$(stat_get "$M" pack_files)" 600 "files brought in by pack reads"
# a pack is one cache file: the node holds no file per small file
nfiles=$(find "$T/c2/data" -type f | wc -l)
((nfiles == np + 1)) || die "$nfiles cache files after a warmup of $np packs and big.bin"
r0=$(stat_get "$M" backend_reads)
p0=$(stat_get "$M" read_pushes)
# the kernel's inodes evicted (their FORGETs in) before the walk: every open pushes
inodes_gone() { (($(stat_get "$M" kernel_inodes) < 10)); }
drop_caches
wait_for -t 10 inodes_gone || die "the kernel still holds $(stat_get "$M" kernel_inodes) inodes after drop_caches"
treecmp "$T/src" "$M"
assert_eq "$(stat_get "$M" backend_reads)" "$r0" "backend reads after a warmup (every file cached)"
# each small file read from its pack's entry, put in the page cache at its open
assert_ge $(($(stat_get "$M" read_pushes) - p0)) 600 "files pushed at open from their pack's entry"
# read again, the page cache kept: the kernel holds each file's pages from
# its push, so no open copies it again (fuse/pushmap.h), and each open is
# charged its file's size (an estimate) all the same
p1=$(stat_get "$M" read_pushes) k0=$(stat_get "$M" read_push_kept) b0=$(stat_get "$M" read_bytes)
small=$(cat "$T"/src/d*/*.jpg | wc -c)
treecmp "$T/src" "$M"
assert_eq "$(stat_get "$M" read_pushes)" "$p1" "files pushed again while the kernel held their pages"
assert_ge $(($(stat_get "$M" read_push_kept) - k0)) 600 "opens of files the kernel held from a push"
assert_ge $(($(stat_get "$M" read_bytes) - b0)) "$small" "bytes charged for a walk of kept files"
assert_eq "$(stat_get "$M" backend_reads)" "$r0" "backend reads of a walk of kept files"
# the client library's hand-over (CACHE_FD) of a packed file: a cache file
# of its own, copied from the pack's entry (no backend read), right bytes
export STAGEFS_LIB=$REPO/gpudirect/libstagefs.so
for rel in d0/f001.jpg d4/f077.jpg; do
	"$REPO/tests/helpers/gpuread" -m pinned -s -o "$T/gx" "$M/$rel" 2>"$T/gst" ||
		die "gpuread $rel failed: $(cat "$T/gst")"
	cmp "$T/gx" "$T/src/$rel" || die "$rel: wrong bytes through the hand-over"
	grep -q "via=cache_fd" "$T/gst" || die "$rel: not read from a cache file: $(cat "$T/gst")"
done
assert_eq "$(stat_get "$M" backend_reads)" "$r0" "backend reads of hand-overs of cached packed files"
sfs_umount "$M"

# --- --shard i/2 on two caches: the packs split between them, none twice
for i in 0 1; do
	M=$T/s$i
	sfs_mount "$URI" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$T/cs$i" rados_timeout=5s
	"$STAGEFS" warmup --shard "$i/2" --json "$M" >"$T/s$i.json" || die "warmup --shard $i/2 failed"
	sp[i]=$(stat_get "$M" pack_reads)
	sfs_umount "$M"
done
assert_eq $((sp[0] + sp[1])) "$np" "pack reads of shards 0 and 1"
log "shards: ${sp[0]} + ${sp[1]} packs"

# --- damage: one byte in the middle of every pack; only the files there fail
bad=0
for p in "${PACKS[@]}"; do
	rados -p "$POOL" -N "$NS" get "$p" "$T/p"
	sz=$(stat -c %s "$T/p")
	printf '\x55' | dd of="$T/p" bs=1 seek=$((sz / 2)) conv=notrunc status=none
	rados -p "$POOL" -N "$NS" put "$p" "$T/p"
done
M=$T/m3
sfs_mount "$URI" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$T/c3" rados_timeout=5s
"$STAGEFS" warmup --json "$M" >"$T/w3.json" || true
for f in "$T"/src/d*/*.jpg; do
	rel=${f#"$T/src/"}
	if cat "$M/$rel" >"$T/out" 2>"$T/err"; then
		cmp -s "$T/out" "$f" || die "$rel: wrong bytes served from a damaged pack"
	else
		contains "Input/output error" "$T/err" || die "$rel: $(cat "$T/err")"
		bad=$((bad + 1))
	fi
done
# a byte written over one of its own is no change: at most one file a pack
((bad >= np - 1 && bad <= np)) || die "$bad files failed for $np damaged packs (one byte each)"
contains "is corrupt" "$(sfs_log "$M")" || die "the damage was not logged"
log "damaged packs: $bad files EIO, the other $((600 - bad)) byte-exact"

# --- copies of one file, stored once (publish names them at its place):
# a warmup fetches the distinct files and every name reads right
sfs_umount "$M"
NS2=${NS}cp
"$PYTHON" - "$T/cp" <<'PY'
import os, shutil, sys
root = sys.argv[1]
os.makedirs(f"{root}/a")
os.makedirs(f"{root}/b")
for i in range(30):
    open(f"{root}/a/f{i:02}", "wb").write(os.urandom(20000 + i))
for i in (0, 7, 29):
    shutil.copy(f"{root}/a/f{i:02}", f"{root}/b/copy{i:02}")
PY
"$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 1M --json "$T/cp" "rados://$POOL/cp?ns=$NS2" \
	>"$T/pubcp.json" 2>"$T/pubcp.err" || { cat "$T/pubcp.err"; die "publish of copies failed"; }
assert_eq "$(jget "$T/pubcp.json" same_files)" 3 "copies named at their first's place"
M=$T/m4
sfs_mount "rados://$POOL/cp?ns=$NS2" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$T/c4" rados_timeout=5s
"$STAGEFS" warmup --json "$M" >"$T/w4.json" || die "warmup of copies failed"
assert_eq "$(jget "$T/w4.json" fetched)" 30 "chunks fetched for 33 names of 30 distinct files"
assert_eq "$(jget "$T/w4.json" failed)" 0 "chunks failed"
diff -r "$T/cp" "$M" >/dev/null || die "a copy or its first reads wrong through the mount"
sfs_umount "$M"
log "copies: 3 of 30 files stored once; a warmup fetched 30 chunks and all 33 names read right"
