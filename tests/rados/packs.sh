#!/usr/bin/env bash
# Small files in packs on a real pool: 300 files of 1..40 KB become a few sfs.pack objects (only the big files are chunks) and reassemble byte for byte from them; identical small files are stored once, in this run's packs or the version before's; v2 (3 changed, half a directory gone, 5 added) writes one pack and names the old packs of the files it keeps, renewing old ones; gc keeps every pack while v1 and v2 live and, v1 dropped, removes exactly the packs only v1 named, keeping half-used ones; a pack gone is packed again; io_uring's batch reads and pread(2) give the same packs, and a FIFO among small files is skipped.
# needs: ceph
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_stagefs
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
PC=$REPO/tests/helpers/pack_check
[[ -x $PC ]] || die "$PC is not built (make test-progs)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NS=packs$$			# the pool under test: a namespace of its own
URI="rados://$POOL?ns=$NS"
pub() { "$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 1M "$@"; }
gc() { "$STAGEFS" gc --ceph-conf "$CEPH_CONF" "$@"; }
objects() { rados -p "$POOL" -N "$1" ls | sort; }
kind() { objects "$1" | grep "^sfs\.$2\." || true; }
count() { [[ -s $1 ]] && wc -l <"$1" || echo 0; }
# json FILE KEY: a field of the last line of FILE
json() { "$PYTHON" -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2"; }
# check NAME@V DIR: every file of the version reassembles from the pool as DIR has it
check() { "$PC" "$CEPH_CONF" "$POOL" "$NS" "$1" "$2" || die "$1 does not reassemble into $2"; }
# members NAME@V: "PACK FILES" for each pack the version names, sorted; named: the packs
members() { "$PC" --packs "$CEPH_CONF" "$POOL" "$NS" "$1" | sort; }
named() { members "$1" | cut -d' ' -f1; }
# no_warning FILE: publish's stderr (progress lines) has no warning
no_warning() { if contains warning "$1"; then die "publish warned: $(cat "$1")"; fi; }

# --- v1: d0 (100 files of 24..40 KB, so its first 50 fill whole packs),
# d1 and d2 (100 files of 1..40 KB each), 3 files of 2..9 MiB, an empty
# file, a hard link to a small file and a symlink
"$PYTHON" - "$T/v1" <<'PY'
import os, random, sys
root = sys.argv[1]
r = random.Random(30)
for d, lo in (("d0", 24), ("d1", 1), ("d2", 1)):
    os.makedirs(f"{root}/{d}")
    for i in range(100):
        n = r.randint(lo * 1024 if lo > 1 else 1, 40 * 1024)
        open(f"{root}/{d}/f{i:03d}", "wb").write(os.urandom(n))
for i in range(3):
    open(f"{root}/big{i}", "wb").write(os.urandom(r.randint(2, 9) * 1048576 + r.randint(1, 99999)))
open(f"{root}/empty", "wb").close()
os.link(f"{root}/d1/f005", f"{root}/hl")
os.symlink("d1/f001", f"{root}/sym")
PY
bigchunks=0
for f in "$T"/v1/big*; do bigchunks=$((bigchunks + ($(stat -c %s "$f") + 1048575) / 1048576)); done

# without packs, for the figures: one chunk object per small file
pub --pack-max 0 --json "$T/v1" "rados://$POOL/P?ns=$NS-flat" >"$T/flat.json" 2>/dev/null ||
	die "publish --pack-max 0 failed"
assert_eq "$(kind "$NS-flat" pack | wc -l)" 0 "packs written with --pack-max 0"
assert_eq "$(kind "$NS-flat" chunk | wc -l)" $((300 + bigchunks)) "chunk objects with --pack-max 0"

pub --json "$T/v1" "rados://$POOL/P?ns=$NS" >"$T/pub1.json" 2>"$T/pub1.err" || die "publish v1 failed: $(cat "$T/pub1.err")"
no_warning "$T/pub1.err"
kind "$NS" pack >"$T/packs1"
kind "$NS" chunk >"$T/chunks1"
npacks1=$(count "$T/packs1")
assert_eq "$(json "$T/pub1.json" files)" 304 "files (300 small, 3 big, 1 empty)"
assert_eq "$(json "$T/pub1.json" hardlinks)" 1 "hard links"
assert_eq "$(json "$T/pub1.json" symlinks)" 1 "symlinks"
assert_eq "$(json "$T/pub1.json" packed_files)" 300 "files packed"
assert_eq "$(json "$T/pub1.json" packs)" "$npacks1" "packs in the summary and sfs.pack objects"
assert_eq "$(json "$T/pub1.json" new_packs)" "$npacks1" "new packs of a first version"
assert_eq "$(json "$T/pub1.json" reused_packs)" 0 "packs reused by a first version"
assert_eq "$(json "$T/pub1.json" same_files)" 0 "copies among 300 random files"
assert_ge "$npacks1" 6 "packs (about 6 MB of small files in 1 MiB packs)"
assert_gt 12 "$npacks1" "packs (about 6 MB of small files in 1 MiB packs)"
assert_eq "$(count "$T/chunks1")" "$bigchunks" "chunk objects: the big files' only"
assert_eq "$(json "$T/pub1.json" new_chunks)" "$bigchunks" "new chunks"
check P@1 "$T/v1" >"$T/check1"
log "v1: 300 small files in $npacks1 packs + $bigchunks chunks of 3 big files ($((npacks1 + bigchunks)) data objects; $((300 + bigchunks)) with --pack-max 0); $(cat "$T/check1")"

# --- v2: 3 files changed, the first half of d0 gone, 5 files added
cp -a "$T/v1" "$T/v2"
rm -f "$T"/v2/d0/f0[0-4][0-9]
head -c 5000 /dev/urandom >"$T/v2/d1/f010"
head -c 33333 /dev/urandom >"$T/v2/d1/f020"
head -c 77 /dev/urandom >"$T/v2/d2/f030"
for i in 0 1 2 3 4; do head -c $((1000 + 7000 * i)) /dev/urandom >"$T/v2/d2/new$i"; done
newbytes=$((5000 + 33333 + 77 + 1000 + 8000 + 15000 + 22000 + 29000))
pub --json "$T/v2" "rados://$POOL/P?ns=$NS" >"$T/pub2.json" 2>"$T/pub2.err" || die "publish v2 failed: $(cat "$T/pub2.err")"
kind "$NS" pack >"$T/packs2"
comm -13 "$T/packs1" "$T/packs2" >"$T/packs.new"
named P@1 >"$T/named1"
named P@2 >"$T/named2"
cmp -s "$T/named1" "$T/packs1" || die "v1 names other packs than the pool holds"
comm -23 "$T/named1" "$T/named2" >"$T/only1"
comm -12 "$T/named1" "$T/named2" >"$T/both"
assert_eq "$(count "$T/packs.new")" 1 "new sfs.pack objects for 8 new and changed files"
assert_eq "$(json "$T/pub2.json" new_packs)" 1 "new packs in the summary"
assert_eq "$(json "$T/pub2.json" new_chunks)" 0 "new chunks (big files unchanged)"
assert_eq "$(json "$T/pub2.json" new_bytes)" "$newbytes" "bytes uploaded: the new and changed files'"
assert_eq "$(json "$T/pub2.json" packed_files)" 255 "files packed (300 - 50 + 5)"
assert_eq "$(json "$T/pub2.json" previous_version)" 1 "the version packs were reused from"
assert_eq "$(json "$T/pub2.json" reused_packs)" "$(count "$T/both")" "packs reused: v1's that v2 names"
assert_eq "$(json "$T/pub2.json" packs)" $(($(count "$T/both") + 1)) "packs v2 names"
assert_gt "$(count "$T/only1")" 0 "v1 packs whose files are all gone"
comm -23 "$T/named2" "$T/named1" | cmp -s - "$T/packs.new" || die "v2 names packs other than v1's and the new one"
no_warning "$T/pub2.err"
# a pack of v1 of which v2 keeps some files but not all (the one d0/f049 ends in)
members P@1 >"$T/members1"
members P@2 >"$T/members2"
join "$T/members1" "$T/members2" | awk '$3 < $2' >"$T/half"
assert_gt "$(count "$T/half")" 0 "v1 packs v2 names for only some of their files"
check P@2 "$T/v2" >"$T/check2"
log "v2: wrote $(count "$T/packs.new") pack ($newbytes bytes), reused $(count "$T/both") of v1's $npacks1 packs; $(count "$T/only1") v1 packs no longer named; $(cat "$T/check2")"

# --- gc: with v1 and v2 live every pack stays
kind "$NS" pack >"$T/packs.before"
gc --grace 0 --json "$URI" >"$T/gc1.json" 2>/dev/null || die "gc failed"
assert_eq "$(json "$T/gc1.json" objects_removed)" 0 "objects removed while every version lives"
assert_eq "$(json "$T/gc1.json" packs)" "$(count "$T/packs.before")" "packs listed"
assert_eq "$(json "$T/gc1.json" packs_in_use)" "$(count "$T/packs.before")" "packs in use"
kind "$NS" pack | cmp -s - "$T/packs.before" || die "gc changed the packs while every version lives"
# the default grace: v1 dropped, its renewed packs are too young to go
gc --drop P@1 --json "$URI" >"$T/gc2.json" 2>/dev/null || die "gc --drop P@1 failed"
assert_eq "$(json "$T/gc2.json" versions_dropped)" 1 "versions dropped"
assert_eq "$(json "$T/gc2.json" packs_removed)" 0 "packs removed inside the grace period"
assert_eq "$(json "$T/gc2.json" packs_kept_young)" "$(count "$T/only1")" "packs only v1 named, kept by the grace period"
# --grace 0: exactly the packs only v1 named go; half-used ones stay
gc --grace 0 --json "$URI" >"$T/gc3.json" 2>/dev/null || die "gc --grace 0 failed"
assert_eq "$(json "$T/gc3.json" packs_removed)" "$(count "$T/only1")" "packs removed"
assert_eq "$(json "$T/gc3.json" chunks_removed)" 0 "chunks removed"
kind "$NS" pack >"$T/packs.after"
comm -23 "$T/packs.before" "$T/packs.after" | cmp -s - "$T/only1" ||
	die "gc removed other packs than v1's own: $(comm -3 <(comm -23 "$T/packs.before" "$T/packs.after") "$T/only1" | head -5)"
cmp -s "$T/packs.after" "$T/named2" || die "the pool holds other packs than v2 names"
cut -d' ' -f1 "$T/half" | comm -23 - "$T/packs.after" | cmp -s - /dev/null || die "a half-used pack was removed"
check P@2 "$T/v2" >/dev/null
gc --grace 0 --json "$URI" >"$T/gc4.json" 2>/dev/null || die "second gc failed"
assert_eq "$(json "$T/gc4.json" objects_removed)" 0 "objects removed by a second run"
log "gc: v1 dropped; removed the $(count "$T/only1") packs only it named, kept $(count "$T/half") half-used; v2 reassembles"

# --- an unchanged republish uploads nothing; old packs are renewed
# every pack in the namespace looks two hours old
rados_age "$POOL" "$NS" sfs.pack. || die "cannot age the packs"
pub --json "$T/v2" "rados://$POOL/P?ns=$NS" >"$T/pub3.json" 2>"$T/pub3.err" || die "republish failed: $(cat "$T/pub3.err")"
no_warning "$T/pub3.err"
npacks2=$(json "$T/pub2.json" packs)
assert_eq "$(json "$T/pub3.json" new_bytes)" 0 "bytes uploaded by an unchanged republish"
assert_eq "$(json "$T/pub3.json" new_packs)" 0 "packs written by an unchanged republish"
assert_eq "$(json "$T/pub3.json" reused_packs)" "$npacks2" "packs reused by an unchanged republish"
assert_eq "$(json "$T/pub3.json" freshened_packs)" "$npacks2" "two-hour-old packs renewed"
members P@3 | cmp -s - "$T/members2" || die "P@3 names other packs, or other files in them, than P@2"
log "unchanged republish (P@3): 0 bytes, $npacks2 packs reused, all renewed"

# --- a pack gone from the pool is not reused: its files are packed again
gone=$(head -1 "$T/named2")
rados -p "$POOL" -N "$NS" rm "$gone"
pub --json "$T/v2" "rados://$POOL/P?ns=$NS" >"$T/pub4.json" 2>"$T/pub4.err" || die "publish after a lost pack failed: $(cat "$T/pub4.err")"
contains "warning: $gone of P@3 is missing; its files are packed again" "$T/pub4.err" ||
	die "no warning about the lost pack: $(cat "$T/pub4.err")"
assert_ge "$(json "$T/pub4.json" new_packs)" 1 "packs written for the files of a lost pack"
assert_eq "$(json "$T/pub4.json" reused_packs)" $((npacks2 - 1)) "packs reused beside a lost one"
check P@4 "$T/v2" >/dev/null
log "a lost pack: its files packed again into $(json "$T/pub4.json" new_packs) new pack(s); P@4 reassembles"

# --- identical small files are stored once: 60 random files in a/ (two
# 1 MiB packs and part of a third), then in b/ a copy of a/f000 (in a pack
# written already), of a/f059 (in the pack still being filled) and twice
# a copy of b/x0 (in that same pack)
"$PYTHON" - "$T/v5" <<'PY'
import os, shutil, sys
root = sys.argv[1]
os.makedirs(f"{root}/a")
os.makedirs(f"{root}/b")
for i in range(60):
    open(f"{root}/a/f{i:03d}", "wb").write(os.urandom(30000 + i))
shutil.copy(f"{root}/a/f000", f"{root}/b/c000")
shutil.copy(f"{root}/a/f059", f"{root}/b/c059")
open(f"{root}/b/x0", "wb").write(os.urandom(12345))
shutil.copy(f"{root}/b/x0", f"{root}/b/x1")
shutil.copy(f"{root}/b/x0", f"{root}/b/x2")
PY
unique=$((60 * 30000 + 59 * 60 / 2 + 12345))
pub --json "$T/v5" "rados://$POOL/Q?ns=$NS" >"$T/pub5.json" 2>"$T/pub5.err" || die "publish of copies failed: $(cat "$T/pub5.err")"
assert_eq "$(json "$T/pub5.json" packed_files)" 65 "files packed"
assert_eq "$(json "$T/pub5.json" same_files)" 4 "copies named where their first lies"
assert_eq "$(json "$T/pub5.json" new_bytes)" "$unique" "bytes stored: each distinct file's once"
check Q@1 "$T/v5" >"$T/check5"
members Q@1 >"$T/members5"
assert_eq "$(awk '{ n += $2 } END { print n }' "$T/members5")" 65 "members of Q@1's packs (copies included)"
# a second version reuses the packs: the copies follow their first
pub --json "$T/v5" "rados://$POOL/Q?ns=$NS" >"$T/pub6.json" 2>"$T/pub6.err" || die "republish of copies failed: $(cat "$T/pub6.err")"
assert_eq "$(json "$T/pub6.json" new_bytes)" 0 "bytes stored by an unchanged republish with copies"
assert_eq "$(json "$T/pub6.json" same_files)" 4 "copies named where their first lies, reused"
members Q@2 | cmp -s - "$T/members5" || die "Q@2 names other packs, or other files in them, than Q@1"
check Q@2 "$T/v5" >/dev/null
log "copies: 65 small files, 4 copies among them, stored as 61 ($unique bytes); $(cat "$T/check5")"

# --- small files are read in batches (io_uring, else pread(2)): both give
# the same packs, and a FIFO among them is skipped, not opened and waited on
cp -a "$T/v5" "$T/v7"
mkfifo "$T/v7/b/p0"	# between c059 and x0: in the middle of a batch
timeout 60 "$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 1M --json "$T/v7" "rados://$POOL/R?ns=$NS" \
	>"$T/pub7.json" 2>"$T/pub7.err" || die "publish with a FIFO failed (rc $?): $(cat "$T/pub7.err")"
contains "warning: skipping $T/v7/b/p0 (not a file" "$T/pub7.err" || die "no warning about the FIFO: $(cat "$T/pub7.err")"
assert_eq "$(json "$T/pub7.json" skipped)" 1 "entries skipped (the FIFO)"
assert_eq "$(json "$T/pub7.json" new_bytes)" 0 "bytes stored for Q's files under another name"
members R@1 | cmp -s - "$T/members5" || die "R@1 names other packs, or other files in them, than Q@1"
if was=$(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null); then
	echo 2 >/proc/sys/kernel/io_uring_disabled
	pub --json "$T/v7" "rados://$POOL/R?ns=$NS" >"$T/pub8.json" 2>"$T/pub8.err"
	rc=$?
	echo "$was" >/proc/sys/kernel/io_uring_disabled
	[[ $rc == 0 ]] || die "publish without io_uring failed: $(cat "$T/pub8.err")"
	assert_eq "$(json "$T/pub8.json" packed_files)" 65 "files packed by pread(2)"
	members R@2 | cmp -s - "$T/members5" || die "without io_uring, R@2 names other packs than Q@1"
	check R@2 "$T/v5" >/dev/null
	log "batches: with io_uring and without it, the same $(wc -l <"$T/members5") packs; a FIFO skipped"
else
	log "batches: with io_uring, the same packs; a FIFO skipped (no kernel.io_uring_disabled: the pread(2) path not tried)"
fi

# The daemon's reads of packs (a mount of v2, a pack whose bytes were
# replaced) are checked where the daemon learns packs.

# leave the shared test cluster as we found it
"$PYTHON" - "$CEPH_CONF" "$POOL" "$NS" "$NS-flat" <<'PY' || die "cleanup failed"
import sys, rados
with rados.Rados(conffile=sys.argv[1]) as cl:
    with cl.open_ioctx(sys.argv[2]) as io:
        for ns in sys.argv[3:]:
            io.set_namespace(ns)
            for o in list(io.list_objects()):
                io.remove_object(o.key)
PY
echo "ok: packs written, reassembled, reused across versions, renewed, collected"
