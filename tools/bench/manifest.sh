#!/usr/bin/env bash
# tools/bench/manifest.sh - manifest: a paged manifest mounted, walked; the builder; small-file publish
# SPDX-License-Identifier: Apache-2.0
#
#   manifest     a published dataset of BENCH_MANIFEST_N empty files: mount time
#                (first, with the manifest copy, and again), the daemon's memory
#                per entry after the mount and after `find` (RssAnon against a
#                daemon mounting a one-file dataset; the mapped manifest,
#                RssFile, is page cache, shared and reclaimable: shown apart),
#                the publisher's peak RSS per entry; and files/s publishing
#                BENCH_MANIFEST_PUB_N unique 4 KiB files / `rados bench write
#                -b 4K` objects/s at the same concurrency
#
#   BENCH_MANIFEST_N manifest: entries of the mounted dataset (default 1000000)
#   BENCH_MANIFEST_PUB_N  manifest: unique small files published (default 100000)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_MANIFEST_N:=20000}" "${BENCH_MANIFEST_PUB_N:=2000}"
MF_N=${BENCH_MANIFEST_N:-1000000}
MF_PUB_N=${BENCH_MANIFEST_PUB_N:-100000}

# mf_tree DIR N [SIZE]: N files (SIZE bytes of random data, default empty)
# in directories of 1000
mf_tree() {
	"$PY" - "$1" "$2" "${3:-0}" <<'PY'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    if i % 1000 == 0:
        d = os.path.join(root, "d%05d" % (i // 1000))
        os.makedirs(d, exist_ok=True)
    fd = os.open(os.path.join(d, "f%06d" % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if size:
        os.write(fd, os.urandom(size))
    os.close(fd)
PY
}

# mf_mem PID: "RssAnon RssFile Pss" in KiB
mf_mem() {
	local a f p
	a=$(awk '/^RssAnon:/ { print $2 }' "/proc/$1/status")
	f=$(awk '/^RssFile:/ { print $2 }' "/proc/$1/status")
	p=$(awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null)
	echo "${a:-0} ${f:-0} ${p:-0}"
}

# mf_per KIB N: bytes per entry
mf_per() { awk -v k="$1" -v n="$2" 'BEGIN { printf "%.1f", k * 1024 / n }'; }

bench_manifest() {
	local d=$WORK/manifest n=$MF_N ents pid base t0 ms mb b0 m1 a f p a0 out files iops fps
	hdr manifest "rados:// dataset of $n empty files; publish of $MF_PUB_N x 4 KiB, $T in flight"
	need_rados || { skipped "$RADOS_WHY"; return; }
	mkdir -p "$d/src" "$d/empty"
	log "manifest: writing $n empty files"
	mf_tree "$d/src" "$n" || { skipped "could not write the tree"; return; }
	ents=$((n + (n + 999) / 1000 + 1))

	# the publisher's peak, against one that publishes nothing
	b0=$(/usr/bin/time -f %M -o "$d/time0" "$STAGEFS" publish -q "$d/empty" "rados://$POOL/mf-empty" >/dev/null 2>&1 && cat "$d/time0") ||
		{ skipped "stagefs publish failed"; return; }
	log "manifest: publishing $n entries"
	t0=$(now_ms)
	/usr/bin/time -f %M -o "$d/time1" "$STAGEFS" publish -q -j "$T" "$d/src" "rados://$POOL/mf" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "stagefs publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
	ms=$(($(now_ms) - t0))
	m1=$(tail -1 "$d/time1")
	row "" "value" "" ""
	row "publish $n entries" "$((ms / 1000)) s" "" ""
	row "publisher peak RSS / entry" "$(mf_per $((m1 - b0)) "$ents") B" "" "" "($((m1 / 1024)) MiB peak, $((b0 / 1024)) MiB with no entries)"
	result "manifest: publisher peak per entry" "$(mf_per $((m1 - b0)) "$ents") B" "150 B" \
		"$(awk -v a="$(mf_per $((m1 - b0)) "$ents")" 'BEGIN { printf "%.2f", a / 150 }')" "<1.01"

	# a daemon with a one-file dataset: what the daemon costs without entries
	sfs_mount "rados://$POOL/probe" "$d/mnt0" "cache_dir=$d/cache0,ceph_conf=$CEPH_CONF" || { skipped "mount failed"; return; }
	read -r a0 _ _ <<<"$(mf_mem "${MNT_PID[$d/mnt0]}")"

	sfs_mount "rados://$POOL/mf" "$d/mnt" "cache_dir=$d/cache,ceph_conf=$CEPH_CONF" || { skipped "mount failed"; return; }
	row "first mount (manifest copied)" "$MOUNT_MS ms" "" "" "($(du -k "$d"/cache/manifests/* | awk '{ s += $1 } END { printf "%.0f", s / 1024 }') MiB manifest)"
	sfs_umount "$d/mnt"
	drop_caches
	sfs_mount "rados://$POOL/mf" "$d/mnt" "cache_dir=$d/cache,ceph_conf=$CEPH_CONF" || { skipped "mount failed"; return; }
	pid=${MNT_PID[$d/mnt]}
	row "mount again (copy mapped, cold)" "$MOUNT_MS ms" "" ""
	result "manifest: mount, $n entries" "$MOUNT_MS ms" "1000 ms" "$(ratio "$MOUNT_MS" 1000)" "<1"
	read -r a f p <<<"$(mf_mem "$pid")"
	row "after mount: anon / entry" "$(mf_per $((a - a0)) "$ents") B" "" "" "(RssAnon $((a / 1024)) MiB, one-file daemon $((a0 / 1024)) MiB; RssFile $((f / 1024)) MiB, Pss $((p / 1024)) MiB)"
	t0=$(now_ms)
	files=$(find "$d/mnt" | wc -l)
	ms=$(($(now_ms) - t0))
	[ "$files" = "$ents" ] || { failed "find listed $files entries, not $ents"; sfs_umount "$d/mnt"; sfs_umount "$d/mnt0"; return; }
	read -r a f p <<<"$(mf_mem "$pid")"
	row "find, $files entries" "$ms ms" "" ""
	row "after find: anon / entry" "$(mf_per $((a - a0)) "$ents") B" "" "" "(RssAnon $((a / 1024)) MiB; RssFile $((f / 1024)) MiB: the manifest paged in, shared, reclaimable)"
	result "manifest: daemon anon per entry after find" "$(mf_per $((a - a0)) "$ents") B" "30 B" \
		"$(awk -v a="$(mf_per $((a - a0)) "$ents")" 'BEGIN { printf "%.2f", a / 30 }')" "<1.01"
	sfs_umount "$d/mnt"
	sfs_umount "$d/mnt0"
	retire "$d/src" "$d/cache" "$d/cache0"

	# small unique files: publish files/s against rados bench objects/s
	mkdir -p "$d/small"
	log "manifest: writing $MF_PUB_N unique 4 KiB files"
	mf_tree "$d/small" "$MF_PUB_N" 4096 || { skipped "could not write the small files"; return; }
	cat "$d"/small/*/* >/dev/null 2>&1 || find "$d/small" -type f -exec cat {} + >/dev/null
	out=$(rados bench -p "$POOL" 20 write -b 4096 -t "$T" --run-name mf-bench 2>&1) ||
		{ skipped "rados bench write failed"; return; }
	iops=$(printf '%s\n' "$out" | awk -F: '/^Average IOPS/ { gsub(/ /, "", $2); print $2 }')
	rados -p "$POOL" cleanup --run-name mf-bench >/dev/null 2>&1
	t0=$(now_ms)
	# --pack-max 0: one object a file, as the baseline writes (packed, see packs)
	"$STAGEFS" publish -q -j "$T" --pack-max 0 "$d/small" "rados://$POOL/mf-small" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "stagefs publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
	ms=$(($(now_ms) - t0))
	fps=$(awk -v n="$MF_PUB_N" -v ms="$ms" 'BEGIN { printf "%.0f", n * 1000 / (ms ? ms : 1) }')
	row "" "rados bench" "publish" "ratio"
	row "4 KiB objects / files per s" "$iops" "$fps" "$(ratio "$fps" "$iops")"
	result "manifest: publish 4K files one object each, j=$T" "$(fps "$fps")" "$(fps "$iops")" "$(ratio "$fps" "$iops")" ">=0.8"
	retire "$d"
}
