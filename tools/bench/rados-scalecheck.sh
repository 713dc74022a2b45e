#!/usr/bin/env bash
# rados-scalecheck.sh: a rados:// dataset of many files, timed from mount
# SPDX-License-Identifier: Apache-2.0
# to first answer, in one run (1 M files: about a minute here).
#
#   sudo CEPH_CONF=/path/ceph.conf tools/bench/rados-scalecheck.sh
#   sudo SCALE_N=10000000 SCALE_EXT4=0 tools/bench/rados-scalecheck.sh
#
# Without CEPH_CONF it starts a throwaway cluster (tools/dev/ceph-cluster.sh)
# and stops it at the end.  Needs `make` (tools/bench/
# scale_dataset).  It stores the manifest of SCALE_N files (1,000 a
# directory, over 16 real chunks: scale_dataset) in pool SCALE_POOL
# (stagefs) by hand, as publish would split it, without publishing SCALE_N
# files, and:
#   - times the first mount (a fresh cache directory, caches dropped) and a
#     remount, from exec to a mount that answers, with the manifest bytes
#     each fetched from RADOS to open (the log) and after a walk
#     (manifest_fetched_bytes), both with manifest_fill=no (parts fetched
#     only as touched), and how long manifest_fill=yes takes to complete a
#     fresh copy in the background;
#   - `find` of the whole tree (names only), caches dropped, against the
#     same shape on the local filesystem (tools/bench/genscale.py --wide 0, under
#     SCALE_DIR, default /var/tmp) as a ratio, unless SCALE_EXT4=0;
#   - the daemon's RssAnon and RssFile per entry after the walk (RssFile is
#     the mapped manifest copy: page cache, shared, reclaimable);
#   - that the walk listed every entry and that SCALE_SAMPLE (500) sampled
#     files read back byte for byte.
# Exits 1 if a listing or a file is wrong.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
STAGEFS=${STAGEFS:-$REPO/stagefs}
# shellcheck source=tools/bench/scalecheck-lib.sh
. "$REPO/tools/bench/scalecheck-lib.sh"
HELPER=$REPO/tools/bench/scale_dataset
N=${SCALE_N:-1000000}
BASE=${SCALE_DIR:-/var/tmp}
POOL=${SCALE_POOL:-stagefs}
SAMPLE=${SCALE_SAMPLE:-500}
PYTHON=${PYTHON:-python3}

[[ $(id -u) -eq 0 ]] || { echo "rados-scalecheck: needs root (FUSE mounts, drop_caches)" >&2; exit 77; }
[[ -x $STAGEFS && -x $HELPER ]] || { echo "rados-scalecheck: build first (make)" >&2; exit 1; }

W=$BASE/stagefs-rscale
MNT=$W/mnt PID= CEPH_DIR= NAME=rscale$$
mkdir -p "$W"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
cleanup() {
	if [[ -n $PID ]]; then
		fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
	if [[ -n $CEPH_DIR ]]; then
		"$REPO/tools/dev/ceph-cluster.sh" stop "$CEPH_DIR" >/dev/null 2>&1 || true
		rm -rf "$CEPH_DIR"
	elif [[ -n ${CEPH_CONF:-} ]]; then
		rados -p "$POOL" ls 2>/dev/null | grep -E "^sfs\.(manifest|dataset)\.$NAME" |
			xargs -r -n 1 rados -p "$POOL" rm 2>/dev/null || true
	fi
	rm -rf "$W/cache" "$W/run" "$W/m.manifest" "$W"/piece.* "$W/blobs" "$W"/*.list
	[[ ${SCALE_KEEP:-0} == 1 ]] || rm -rf "$W/src-$N"
}
trap cleanup EXIT

if [[ -z ${CEPH_CONF:-} ]]; then
	CEPH_DIR=$W/ceph
	rm -rf "$CEPH_DIR"
	CEPH_CONF=$("$REPO/tools/dev/ceph-cluster.sh" start "$CEPH_DIR")
fi
export CEPH_CONF
R() { rados -p "$POOL" "$@"; }

# mount_sfs [FILL]: mount the dataset (manifest_fill=FILL, default no); sets PID, MOUNT_MS
mount_sfs() {
	scale_mount rados-scalecheck 600 "rados://$POOL/$NAME@1" \
		"ceph_conf=$CEPH_CONF,cache_dir=$W/cache,runtime_dir=$W/run,log_level=info,manifest_fill=${1:-no}"
}
umount_sfs() { fusermount3 -u "$MNT"; wait "$PID"; PID=; }
opened() { grep -o '[0-9]* of [0-9]* bytes fetched to open it' "$W/mount.log" | cut -d' ' -f1 || echo "whole"; }
stat_key() { "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], "n/a"))' "$MNT/.stagefs/stats" "$1"; }
status_kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$PID/status"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }

echo "rados-scalecheck: $N files, kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%d GiB", $2 / 1048576 }' /proc/meminfo)"
mkdir -p "$W/blobs"
t0=$(now_ms)
SIZE=$("$HELPER" "$N" "$W/m.manifest" "$W/blobs")
"$STAGEFS" publish -q --ceph-conf "$CEPH_CONF" "$W/blobs" "rados://$POOL/${NAME}b" >/dev/null
PIECE=$((32 * 1048576))
NPARTS=$(((SIZE + PIECE - 1) / PIECE))
split -b "$PIECE" -d -a 4 "$W/m.manifest" "$W/piece."
for ((i = 0; i < NPARTS; i++)); do R put "sfs.manifest.$NAME.1.$i" "$W/piece.$(printf %04d "$i")"; done
rm -f "$W"/piece.*
printf 'parts %d %d\n' "$NPARTS" "$SIZE" >"$W/head"
R put "sfs.manifest.$NAME.1" "$W/head"
echo "manifest of $SIZE bytes in $NPARTS objects stored in $(($(now_ms) - t0)) ms"
ENTRIES=$((N + (N + 999) / 1000 + 1))

SRC=$W/src-$N
if [[ ${SCALE_EXT4:-1} == 1 && ! -f $SRC/.complete ]]; then
	rm -rf "$SRC"
	t0=$(now_ms)
	"$PYTHON" "$REPO/tools/bench/genscale.py" "$SRC" --files "$N" --wide 0 --per-dir 1000
	touch "$SRC/.complete"
	echo "local tree generated in $(($(now_ms) - t0)) ms"
fi

FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

# timed_mount PREFIX: mount with caches dropped, then find with caches
# dropped; sets PREFIX_MS, PREFIX_OPEN, PREFIX_FIND, PREFIX_FETCHED, and
# leaves the mount up
timed_mount() {
	drop
	mount_sfs
	printf -v "$1_MS" %s "$MOUNT_MS"
	printf -v "$1_OPEN" %s "$(opened)"
	drop
	printf -v "$1_FIND" %s "$(tm find "$MNT")"
	printf -v "$1_FETCHED" %s "$(stat_key manifest_fetched_bytes)"
}

# first mount: nothing cached
rm -rf "$W/cache"
timed_mount FIRST
n=$(find "$MNT" | wc -l)
((n == ENTRIES)) || fail "the mount lists $n entries, expected $ENTRIES"
ANON=$(status_kb RssAnon) FILE=$(status_kb RssFile)
"$PYTHON" - "$MNT" "$W/blobs" "$N" "$SAMPLE" <<'PY' || fail "a sampled file reads back wrong"
import sys
m, blobs, n, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
want = [open("%s/b%02d" % (blobs, j), "rb").read() for j in range(16)]
for i in range(0, n, max(1, n // k)):
    p = "%s/d%05d/img_%08d.jpg" % (m, i // 1000, i)
    if open(p, "rb").read() != want[i % 16]:
        sys.exit("%s differs" % p)
PY
umount_sfs

# remount: the copy's parts are all there
timed_mount RE
umount_sfs

# the background fill (manifest_fill=yes) of a fresh copy: how long to complete
rm -rf "$W/cache"
mount_sfs yes
end=$((SECONDS + 1800))
until FILL=$(grep -o 'fetched in the background in [0-9]* ms' "$W/mount.log"); do
	((SECONDS < end)) || { fail "the background fill did not complete in 30 min"; break; }
	sleep 0.2
done
FILL_MS=${FILL##* in }
umount_sfs

FIND_EXT=
if [[ ${SCALE_EXT4:-1} == 1 ]]; then
	drop
	FIND_EXT=$(tm find "$SRC")
fi

printf '\n%-52s %14s %10s %6s\n' "$N files ($ENTRIES entries), manifest $SIZE B" stagefs local ratio
printf '%-52s %11s ms   (fetched %s B to open)\n' "first mount, exec to first answer" "$FIRST_MS" "$FIRST_OPEN"
printf '%-52s %11s ms   (fetched %s B to open)\n' "remount, exec to first answer" "$RE_MS" "$RE_OPEN"
printf '%-52s %11s ms %7s ms %6s\n' "find, first mount (parts fetched), caches dropped" "$FIRST_FIND" "${FIND_EXT:-n/a}" "$(ratio "$FIRST_FIND" "${FIND_EXT:-0}")"
printf '%-52s %11s ms %7s ms %6s\n' "find, remount, caches dropped" "$RE_FIND" "${FIND_EXT:-n/a}" "$(ratio "$RE_FIND" "${FIND_EXT:-0}")"
printf '%-52s %11s B\n' "manifest bytes fetched by the first mount's walk" "$FIRST_FETCHED"
printf '%-52s %11s B\n' "manifest bytes fetched by the remount's walk" "$RE_FETCHED"
printf '%-52s %14s\n' "manifest_fill=yes: the copy complete after" "${FILL_MS:-n/a}"
printf '%-52s %11s B   (RssFile %s B per entry: the mapped copy)\n' "daemon RssAnon per entry after the walk" \
	"$((ANON * 1024 / ENTRIES))" "$((FILE * 1024 / ENTRIES))"
((FAILS == 0)) || { echo "rados-scalecheck: $FAILS check(s) failed" >&2; exit 1; }
echo "rados-scalecheck: every check passed"
