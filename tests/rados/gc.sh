#!/usr/bin/env bash
# stagefs gc on a real pool: --keep 1 drops A@1; with --grace 0 exactly the chunks only A@1 named are removed (rados ls), A@2 and dataset B still read byte-exact; dry-run and the default grace remove no chunk; publish renews old chunks so gc spares them; gc over and over beside a publish leaves it whole; bad versions and unreadable manifests fail with nothing removed.
# needs: ceph
# timeout: 400
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"

T=$TEST_TMPDIR
POOL=${CEPH_POOL:-stagefs}
NS=gc$$				# the pool under test: a namespace of its own
URI="rados://$POOL?ns=$NS"
# one object per chunk, small files included (the chunk sets below come
# from `rados ls`): packs and gc are tests/rados/packs.sh's
pub() { "$STAGEFS" publish --ceph-conf "$CEPH_CONF" --chunk-size 1M --pack-max 0 "$@"; }
gc() { "$STAGEFS" gc --ceph-conf "$CEPH_CONF" "$@"; }
objects() { rados -p "$POOL" -N "$1" ls | sort; }
chunks() { objects "$1" | grep '^sfs\.chunk\.' || true; }
# json FILE KEY: a field of the last line of FILE
json() { "$PYTHON" -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2"; }
count() { [[ -s $1 ]] && wc -l <"$1" || echo 0; }

# --- the trees: A@1, A@2 (files removed, one changed, one added), B (part of A@1)
gentree "$T/v1" --small 300 --big-mb 6 --chunk 1M --wide 50
mkdir -p "$T/v1/hl/x"
head -c 1500000 /dev/urandom >"$T/v1/hl/x/one"
ln "$T/v1/hl/x/one" "$T/v1/hl/two"
cp -a "$T/v1" "$T/v2"
rm -rf "$T/v2"/small/d0*
dd if=/dev/urandom of="$T/v2/big.bin" bs=4096 count=1 conv=notrunc status=none
echo "new in v2" >"$T/v2/NEW"
mkdir -p "$T/b"
cp -a "$T/v1/small/d00" "$T/v1/small/d01" "$T/b/"

# --- which chunks each tree has: publish each into a namespace of its own
for t in v1 v2 b; do
	pub -q "$T/$t" "rados://$POOL/probe?ns=$NS-$t" >/dev/null || die "probe publish of $t failed"
	chunks "$NS-$t" >"$T/chunks.$t"
done
comm -23 "$T/chunks.v1" "$T/chunks.v2" | comm -23 - "$T/chunks.b" >"$T/expect.gone"
comm -23 "$T/chunks.v1" "$T/chunks.v2" | comm -12 - "$T/chunks.b" >"$T/expect.shared"
assert_gt "$(count "$T/expect.gone")" 0 "chunks only A@1 names"
assert_gt "$(count "$T/expect.shared")" 0 "chunks of A@1 that only B still names"

# --- the pool: A@1, A@2, B@1
pub -q "$T/v1" "rados://$POOL/A?ns=$NS" >/dev/null || die "publish A@1 failed"
pub --json "$T/v2" "rados://$POOL/A?ns=$NS" >"$T/pubA2.json" || die "publish A@2 failed"
assert_eq "$(json "$T/pubA2.json" freshened_chunks)" 0 "chunks renewed by a publish right after another"
pub -q "$T/b" "rados://$POOL/B?ns=$NS" >/dev/null || die "publish B@1 failed"
objects "$NS" >"$T/before"
chunks "$NS" >"$T/chunks.before"

# --- dry run: prints exactly what would go, removes nothing
gc --keep 1 --grace 0 --dry-run "$URI" >"$T/dry.out" 2>"$T/dry.err" || die "dry run failed: $(cat "$T/dry.err")"
grep -q "would drop A@1" "$T/dry.err" || die "dry run does not name A@1: $(cat "$T/dry.err")"
grep -o 'would remove sfs\.chunk\.[0-9a-f]*' "$T/dry.out" | sed 's/would remove //' | sort >"$T/dry.chunks"
cmp -s "$T/dry.chunks" "$T/expect.gone" || die "dry run would remove other chunks than A@1's own: $(diff "$T/dry.chunks" "$T/expect.gone" | head -5)"
grep -qx "would remove sfs.manifest.A.1 ([0-9]* bytes)" "$T/dry.out" || die "dry run does not remove sfs.manifest.A.1"
objects "$NS" | cmp -s - "$T/before" || die "the dry run changed the pool"
log "dry run: would drop A@1 and $(count "$T/dry.chunks") chunks; nothing changed"

# --- the default grace period (1 h): A@1 goes, its chunks are too young
gc --keep 1 --json "$URI" >"$T/gc1.json" || die "gc --keep 1 failed"
assert_eq "$(json "$T/gc1.json" versions_dropped)" 1 "versions dropped"
assert_eq "$(json "$T/gc1.json" chunks_removed)" 0 "chunks removed inside the grace period"
assert_eq "$(json "$T/gc1.json" kept_young)" "$(count "$T/expect.gone")" "chunks kept by the grace period"
rados -p "$POOL" -N "$NS" stat sfs.manifest.A.1 >/dev/null 2>&1 && die "sfs.manifest.A.1 still there"
chunks "$NS" | cmp -s - "$T/chunks.before" || die "chunks removed inside the grace period"

# --- --grace 0: exactly the chunks only A@1 named are gone
gc --grace 0 "$URI" >"$T/gc2.out" 2>&1 || die "gc --grace 0 failed: $(cat "$T/gc2.out")"
grep -q "removed $(count "$T/expect.gone") objects" "$T/gc2.out" || die "summary: $(cat "$T/gc2.out")"
chunks "$NS" >"$T/chunks.after"
comm -23 "$T/chunks.before" "$T/chunks.after" | cmp -s - "$T/expect.gone" ||
	die "removed other chunks than A@1's own: $(comm -3 <(comm -23 "$T/chunks.before" "$T/chunks.after") "$T/expect.gone" | head -5)"
comm -13 "$T/chunks.before" "$T/chunks.after" | cmp -s - /dev/null || die "chunks appeared"
log "gc --grace 0: removed the $(count "$T/expect.gone") chunks only A@1 named; $(count "$T/expect.shared") of its chunks stay for B"
gc --grace 0 --json "$URI" >"$T/gc3.json" 2>/dev/null || die "second gc failed"
assert_eq "$(json "$T/gc3.json" objects_removed)" 0 "objects removed by a second run"

# --- what stays reads byte for byte; A@1 is gone
MA=$T/ma MB=$T/mb
sfs_mount "rados://$POOL/A?ns=$NS" "$MA" "ceph_conf=$CEPH_CONF" "cache_dir=$T/cache-a"
treecmp "$T/v2" "$MA"
assert_eq "$(stat_get "$MA" backend_errors)" 0 "backend errors reading A@2"
sfs_umount "$MA"
sfs_mount "rados://$POOL/B?ns=$NS" "$MB" "ceph_conf=$CEPH_CONF" "cache_dir=$T/cache-b"
treecmp "$T/b" "$MB"
sfs_umount "$MB"
if "$STAGEFS" -o "ceph_conf=$CEPH_CONF,cache_dir=$T/cache-x" "rados://$POOL/A@1?ns=$NS" "$MA" 2>"$T/a1.err"; then
	die "A@1 still mounts"
fi
grep -q "does not exist" "$T/a1.err" || die "A@1: $(cat "$T/a1.err")"

# --- bad requests fail, nothing removed
objects "$NS" >"$T/before"
if gc --drop A@2 "$URI" 2>"$T/e1"; then die "dropping the latest version succeeded"; fi
grep -q "A@2 is the latest version" "$T/e1" || die "--drop A@2: $(cat "$T/e1")"
if gc --drop A@9 "$URI" 2>"$T/e2"; then die "dropping a missing version succeeded"; fi
grep -q "A@9 does not exist" "$T/e2" || die "--drop A@9: $(cat "$T/e2")"
if gc --keep 0 "$URI" 2>"$T/e3"; then die "--keep 0 accepted"; fi
if gc "rados://nopool$$" 2>"$T/e4"; then die "a missing pool accepted"; fi
grep -q "does not exist" "$T/e4" || die "missing pool: $(cat "$T/e4")"
# an unreadable manifest: young, taken for a publish in progress; old: an error
head -c 1000 /dev/urandom >"$T/garbage"
rados -p "$POOL" -N "$NS" put sfs.manifest.Z.1 "$T/garbage"
gc "$URI" >/dev/null 2>"$T/e5" || die "gc failed on a young unreadable manifest: $(cat "$T/e5")"
grep -q "Z@1 is not readable yet" "$T/e5" || die "no note about Z@1: $(cat "$T/e5")"
if gc --grace 0 "$URI" >/dev/null 2>"$T/e6"; then die "gc ignored an unreadable manifest"; fi
grep -q "cannot read Z@1.*nothing was removed.*--drop Z@1" "$T/e6" || die "unreadable manifest: $(cat "$T/e6")"
objects "$NS" | grep -v '^sfs\.manifest\.Z\.1$' | cmp -s - "$T/before" || die "a failed gc changed the pool"
gc --grace 0 --drop Z@1 "$URI" >/dev/null 2>&1 || die "--drop Z@1 failed"
objects "$NS" | cmp -s - "$T/before" || die "--drop Z@1 removed more than sfs.manifest.Z.1"

# --- publish renews old chunks, so gc spares them until the manifest is there
mkdir -p "$T/d" "$T/d2"
head -c 3500000 /dev/urandom >"$T/d/data"
echo tiny >"$T/d2/tiny"
pub -q "$T/d" "rados://$POOL/D?ns=$NS" >/dev/null || die "publish D@1 failed"
pub -q "$T/d2" "rados://$POOL/D?ns=$NS" >/dev/null || die "publish D@2 failed"
# every chunk in the namespace looks two hours old
rados_age "$POOL" "$NS" sfs.chunk. || die "cannot age the chunks"
gc --drop D@1 --dry-run --json "$URI" >"$T/d1.json" 2>/dev/null || die "dry run --drop D@1 failed"
assert_eq "$(json "$T/d1.json" chunks_removed)" 4 "old chunks only D@1 names (dry run, 1 h grace)"
# a publish of the same data (E) renews them; hide its manifest, as if gc
# had listed the pool before the publish wrote it
pub --json "$T/d" "rados://$POOL/E?ns=$NS" >"$T/e.json" || die "publish E@1 failed"
assert_eq "$(json "$T/e.json" freshened_chunks)" 4 "old chunks renewed by publish"
rados -p "$POOL" -N "$NS" rm sfs.manifest.E.1
rados -p "$POOL" -N "$NS" rm sfs.dataset.E
gc --drop D@1 --json "$URI" >"$T/d2.json" 2>/dev/null || die "gc --drop D@1 failed"
assert_eq "$(json "$T/d2.json" chunks_removed)" 0 "renewed chunks removed"
assert_eq "$(json "$T/d2.json" kept_young)" 4 "renewed chunks kept by the grace period"
gc --grace 0 --json "$URI" >"$T/d3.json" 2>/dev/null || die "gc --grace 0 failed"
assert_eq "$(json "$T/d3.json" chunks_removed)" 4 "unnamed chunks removed with --grace 0"
log "publish renewed 4 two-hour-old chunks; gc kept them within the grace period"

# --- gc running over and over beside a publish (default grace): the new
# dataset, made of chunks A@2 already has and new ones, reads byte-exact
mkdir -p "$T/c"
cp -a "$T/v2/." "$T/c/"
for i in 1 2 3 4 5 6; do head -c 3000000 /dev/urandom >"$T/c/new$i.bin"; done
pub -j 2 "$T/c" "rados://$POOL/C?ns=$NS" >"$T/pubC.out" 2>&1 &
ppid=$!
runs=0
while kill -0 "$ppid" 2>/dev/null || [[ $runs = 0 ]]; do
	gc --keep 1 "$URI" >/dev/null 2>"$T/gcC.err" || die "gc beside a publish failed: $(cat "$T/gcC.err")"
	runs=$((runs + 1))
done
wait "$ppid" || die "publish beside gc failed: $(tail -3 "$T/pubC.out")"
MC=$T/mc
sfs_mount "rados://$POOL/C?ns=$NS" "$MC" "ceph_conf=$CEPH_CONF" "cache_dir=$T/cache-c"
treecmp "$T/c" "$MC"
sfs_umount "$MC"
log "publish beside $runs gc runs: the new dataset reads byte-exact"

# leave the shared test cluster as we found it
"$PYTHON" - "$CEPH_CONF" "$POOL" "$NS" "$NS-v1" "$NS-v2" "$NS-b" <<'PY' || die "cleanup failed"
import sys, rados
with rados.Rados(conffile=sys.argv[1]) as cl:
    with cl.open_ioctx(sys.argv[2]) as io:
        for ns in sys.argv[3:]:
            io.set_namespace(ns)
            for o in list(io.list_objects()):
                io.remove_object(o.key)
PY
echo "ok: gc dry run, grace, exact sweep, mounts after gc, errors, publish renewal"
