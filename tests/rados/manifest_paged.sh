#!/usr/bin/env bash
# Ceph: the paged manifest: a mount copies it once into the cache and maps it; a part of that copy damaged under a live mount fails with EIO only where touched (logged with dataset, version, part), the rest is served byte for byte; a remount maps the copy without downloading; a copy with a bad header is fetched again.
# needs: ceph
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NAME=mp$$
C=$T/cache

# 3 directories of 1000 small files: entries 4..1003 are d0's, 1004..2003
# d1's, 2004..3003 d2's; 630 records of 104 bytes fill each 64 KiB part of
# the entry table, so d1's run spans entry parts 1, 2 and 3
"$PYTHON" - "$T/src" <<'PY'
import os, sys
for d in range(3):
    os.makedirs(f"{sys.argv[1]}/d{d}")
    for i in range(1000):
        with open(f"{sys.argv[1]}/d{d}/f{i:04d}", "wb") as f:
            f.write(os.urandom(100 + i))
PY
# --pack-max 0: 104-byte records, 630 a part (packs make them 120 bytes)
"$STAGEFS" publish -q --ceph-conf "$CEPH_CONF" --pack-max 0 "$T/src" "rados://$POOL/$NAME" >"$T/pub.out" 2>&1 ||
	{ cat "$T/pub.out"; die "publish failed"; }

M=$T/m
sfs_mount "rados://$POOL/$NAME" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$C"
copy=$(ls "$C"/manifests/*)
[[ $(ls "$C/manifests" | wc -l) == 1 && -s $copy ]] || die "no manifest copy in $C/manifests: $(ls -la "$C/manifests")"
grep -q "manifest copied to" "$(sfs_log "$M")" || die "the daemon did not say it copied the manifest"

# the entry table's part 2 (entries 1260..1889: names in d1 only)
read -r off len < <("$PYTHON" - "$copy" <<'PY'
import struct, sys
h = open(sys.argv[1], "rb").read(256)
assert h[:8] == b"SFSMANIF" and struct.unpack_from("<I", h, 8)[0] == 2, "not a format 2 manifest"
esize, shift = struct.unpack_from("<I", h, 36)[0], struct.unpack_from("<I", h, 72)[0]
ent_off = struct.unpack_from("<Q", h, 80)[0]
assert (1 << shift) // esize == 630, (esize, shift)
print(ent_off + 2 * (1 << shift), 1 << shift)
PY
) || die "cannot read the copy's header"

# nothing of d1 touched yet: damage the middle of its part, in place
"$PYTHON" - "$copy" "$off" "$len" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
at = int(sys.argv[2]) + int(sys.argv[3]) // 2
b = bytearray(os.pread(fd, 1, at))
b[0] ^= 0x5a
os.pwrite(fd, bytes(b), at)
os.close(fd)
PY
grep -q "fails its checksum" "$(sfs_log "$M")" && die "a part was refused before anything touched it"

# d0 and d2 (other parts) read back byte for byte
for d in d0 d2; do
	for f in f0000 f0500 f0999; do
		cmp "$T/src/$d/$f" "$M/$d/$f" || die "$d/$f reads back wrong"
	done
done
[[ $(ls "$M/d0" | wc -l) == 1000 && $(ls "$M/d2" | wc -l) == 1000 ]] || die "d0 or d2 is not listed whole"
grep -q "fails its checksum" "$(sfs_log "$M")" && die "reading d0 and d2 touched the damaged part"

# d1: its lookups binary-search through part 2, its listing walks it
out=$(stat "$M/d1/f0500" 2>&1) && die "stat of d1/f0500 succeeded over a damaged part: $out"
[[ $out == *"Input/output error"* ]] || die "stat of d1/f0500: $out (expected EIO)"
out=$(ls "$M/d1" 2>&1) && die "ls d1 succeeded over a damaged part"
[[ $out == *"Input/output error"* ]] || die "ls d1: $out (expected EIO)"
grep -q "rados://$POOL/$NAME@1 v1: part 2 of .*entry table.*fails its checksum" "$(sfs_log "$M")" ||
	die "no log line naming the dataset, version and part: $(grep -i manifest "$(sfs_log "$M")" | tail -3)"
[[ $(grep -c "fails its checksum" "$(sfs_log "$M")") == 1 ]] || die "the bad part was logged more than once"
# still served around it
cmp "$T/src/d2/f0123" "$M/d2/f0123" || die "d2/f0123 reads back wrong after the EIO"
log "damaged part 2: d1 EIO, d0 and d2 served"
sfs_umount "$M"

# a remount maps the copy (no download); the damage is still refused
sfs_mount "rados://$POOL/$NAME" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$C"
grep -q "manifest mapped from $copy" "$(sfs_log "$M")" || die "the remount did not map the copy: $(grep rados "$(sfs_log "$M")")"
stat "$M/d1/f0001" >/dev/null 2>&1 && die "the damaged copy was served after a remount"
cmp "$T/src/d0/f0001" "$M/d0/f0001" || die "d0/f0001 reads back wrong after the remount"
sfs_umount "$M"

# a copy that does not open (bad header) is fetched again, and then all is well
printf 'XXXXXXXX' | dd of="$copy" conv=notrunc status=none
sfs_mount "rados://$POOL/$NAME" "$M" "ceph_conf=$CEPH_CONF" "cache_dir=$C"
grep -q "is unusable .*downloading it again" "$(sfs_log "$M")" || die "a bad copy was not fetched again"
for f in f0000 f0500 f0999; do
	cmp "$T/src/d1/$f" "$M/d1/$f" || die "d1/$f reads back wrong after the fresh copy"
done
[[ $(find "$M" -type f | wc -l) == 3000 ]] || die "the fresh copy does not list 3000 files"
sfs_umount "$M"
log "remount mapped the copy; a bad header fetched again"
