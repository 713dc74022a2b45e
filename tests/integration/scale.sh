#!/usr/bin/env bash
# 100,000 tiny files through dir://: every entry listed, a sample byte-compared, daemon RSS per entry bounded; the remount reuses the saved scan, a new file or a file changed in place makes the next mount scan again, dir_reuse_scan=no always scans; a names-only walk leaves few kernel inodes (readdirplus_max) and kernel_inodes_max bounds those a stat'ing walk leaves.
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

N=${SCALE_TEST_N:-100000}
RSS_MAX=400	# bytes of daemon memory per entry (tools/bench/scalecheck.sh's bound)
T=$TEST_TMPDIR src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
genscale() { "$PYTHON" "$REPO/tools/bench/genscale.py" "$@"; }
listing() { (cd "$1" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort); }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$(sfs_pid "$mnt")/status"; }
said() { grep -q "$1" "$(sfs_log "$mnt")"; }

log "generating $N files"
genscale "$src" --files "$N" --jobs 4
listing "$src" >"$T/src.list"
entries=$(($(wc -l <"$T/src.list") + 1))

# the daemon's own memory, for the per-entry figure: a mount of an empty tree
mkdir -p "$T/empty"
sfs_mount "dir://$T/empty" "$mnt" cache_dir="$T/cache0"
rss0=$(rss_kb)
sfs_umount "$mnt"

# Epoch staging is off throughout: the sample's reads look like an epoch,
# and the staging they start would cache files the in-place check below
# expects to be read from the source, as fast as the machine allows.
# --- first mount: a scan; every entry, a sample of bytes, memory -------------
sfs_mount "dir://$src" "$mnt" epoch_staging=off
# the mount answers while it scans (dir_scan_background): the end is logged
wait_for -t 120 said "scanned $src: $entries entries" || die "the first mount did not scan $entries entries: $(grep -i scan "$(sfs_log "$mnt")")"
listing "$mnt" >"$T/mnt.list"
cmp -s "$T/src.list" "$T/mnt.list" ||
	die "the mount lists $(wc -l <"$T/mnt.list") entries, the source $((entries - 1)): $(diff "$T/src.list" "$T/mnt.list" | head -3 | tr '\n' ' ')"
grep '/f' "$T/src.list" | awk 'NR % 331 == 7' >"$T/sample"
assert_ge "$(wc -l <"$T/sample")" 250 "sampled files"
(cd "$mnt" && xargs -a "$T/sample" "$PYTHON" "$REPO/tools/bench/genscale.py" "$mnt" --check) ||
	die "a sampled file read back wrong"
# the checker itself fails on wrong bytes
mkdir -p "$T/neg/d0000" && cp "$src/d0000/f0000001" "$T/neg/d0000/f0000000"
genscale "$T/neg" --check d0000/f0000000 2>/dev/null && die "genscale --check passed a file with another file's bytes"
rss1=$(rss_kb)
per=$(((rss1 - rss0) * 1024 / entries))
log "daemon RSS: $rss0 KiB empty, $rss1 KiB with $entries entries listed: $per B per entry"
if ldd "$STAGEFS" 2>/dev/null | contains libasan; then
	log "a sanitizer build (redzones, quarantine): the RSS bound is not checked"
else
	[[ $per -le $RSS_MAX ]] || die "daemon RSS $per B per entry, bound $RSS_MAX"
fi
sfs_umount "$mnt"
ls "$T/cache/snapshots/"*.dirs >/dev/null || die "no saved stamps after the scan"

# --- remount over the unchanged tree: the saved scan, no walk of the files ---
sfs_mount "dir://$src" "$mnt" epoch_staging=off
said "unchanged since its last scan ($entries entries)" || die "the remount scanned again: $(grep -i scan "$(sfs_log "$mnt")")"
said "scanned $src" && die "the remount scanned"
listing "$mnt" | cmp -s - "$T/src.list" || die "the remount lists other entries"
(cd "$mnt" && xargs -a "$T/sample" "$PYTHON" "$REPO/tools/bench/genscale.py" "$mnt" --check) ||
	die "a sampled file read back wrong after the remount"
sfs_umount "$mnt"

# --- a new file: its directory's mtime changed, the next mount scans ---------
echo "new" >"$src/d0042/new-file"
sfs_mount "dir://$src" "$mnt" epoch_staging=off
said 'scanning again: directory "d0042": mtime changed' || die "a new file did not make the mount scan: $(grep -i scan "$(sfs_log "$mnt")")"
[[ $(cat "$mnt/d0042/new-file") == new ]] || die "the new file is not served"
sfs_umount "$mnt"

# --- a file rewritten in place: not seen by the stamps, never served stale ---
f=d0007/f0007003
printf 'rewritten in place\n' >"$src/$f"
sfs_mount "dir://$src" "$mnt" epoch_staging=off
said "unchanged since its last scan" || die "expected the saved scan (an in-place change is invisible to the stamps)"
rc=0
cat "$mnt/$f" >/dev/null 2>"$T/err" || rc=$?
[[ $rc -ne 0 ]] && grep -q "Input/output error" "$T/err" || die "a file changed in place was served (rc $rc): $(cat "$T/err")"
said "changed since it was mounted" || die "no log line for the changed file"
sfs_umount "$mnt"
sfs_mount "dir://$src" "$mnt" epoch_staging=off
said "no saved scan: scanning" || die "the mount after the EIO did not scan: $(grep -i scan "$(sfs_log "$mnt")")"
[[ $(cat "$mnt/$f") == "rewritten in place" ]] || die "the new content of $f is not served after the scan"
sfs_umount "$mnt"

# --- forced: dir_reuse_scan=no scans an unchanged tree ---------------------
sfs_mount "dir://$src" "$mnt" dir_reuse_scan=no
wait_for -t 120 said "scanned $src" || die "dir_reuse_scan=no did not scan"
sfs_umount "$mnt"
# ... and a chunk_size other than the saved scan's scans too
sfs_mount "dir://$src" "$mnt" chunk_size=1M
said "scanned with chunk_size 4194304, now 1048576" || die "another chunk_size reused the scan: $(grep -i scan "$(sfs_log "$mnt")")"
sfs_umount "$mnt"
# --- the kernel's inodes after a walk: bounded by kernel_inodes_max ----------
slab() { awk '$1 == "fuse_inode" { print $2 }' /proc/slabinfo; }
sfs_mount "dir://$src" "$mnt" kernel_inodes_max=20000
if grep -q "pruning needs 7.45" "$(sfs_log "$mnt")"; then
	log "this kernel cannot prune: kernel_inodes_max not checked"
else
	listing "$src" >"$T/src.list"	# with d0042/new-file
	drop_caches
	listing "$mnt" | cmp -s - "$T/src.list" || die "the bounded mount lists other entries"
	# a names-only walk: short READDIRPLUS replies (readdirplus_max) make few inodes
	ki=$(stat_get "$mnt" kernel_inodes)
	log "a names-only walk of $entries entries left $ki inodes in the kernel"
	[[ $ki -lt $((entries / 4)) ]] || die "a names-only walk left $ki inodes in the kernel (readdirplus_max)"
	# a walk that stats every entry: pruned down to the bound
	s0=$(slab)
	find "$mnt" -printf '%s\n' >/dev/null
	wait_for -t 10 eval '[[ $(stat_get "$mnt" kernel_inodes) -le 20000 ]]' ||
		die "kernel_inodes $(stat_get "$mnt" kernel_inodes) > 20000 after the walk"
	s1=$(slab)
	log "walk of $entries entries with kernel_inodes_max=20000: $(stat_get "$mnt" kernel_prunes) prunes, fuse_inode slab +$((s1 - s0)), kernel_inodes $(stat_get "$mnt" kernel_inodes)"
	assert_gt "$(stat_get "$mnt" kernel_prunes)" 0 "kernel_prunes"
	[[ $((s1 - s0)) -le 25000 ]] || die "the kernel holds $((s1 - s0)) more FUSE inodes after the walk, bound 20000"
	# pruned entries are looked up again, right
	(cd "$mnt" && xargs -a "$T/sample" "$PYTHON" "$REPO/tools/bench/genscale.py" "$mnt" --check) ||
		die "a sampled file read back wrong after its inode was pruned"
fi
sfs_umount "$mnt"
log "ok: $entries entries, $per B of daemon memory each"
