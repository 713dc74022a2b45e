#!/usr/bin/env bash
# dir:// first scan in the background (dir_scan_background): with the scan slowed, `ls` of the top of 150,000 entries answers before the scan ends, a walk during the scan matches the source (treecmp), the inode numbers given during the scan are the finished manifest's, a sample is byte-compared, the remount reuses the saved scan, and a directory removed before the scan reaches it gives EIO, never an empty listing.
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

N=${SCAN_LIVE_N:-150000}
T=$TEST_TMPDIR src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
genscale() { "$PYTHON" "$REPO/tools/bench/genscale.py" "$@"; }
said() { grep -q "$1" "$(sfs_log "$mnt")"; }
now_ms() { date +%s%3N; }

log "generating $N files"
genscale "$src" --files "$N" --jobs 2
entries=$(($(find "$src" | wc -l)))

# --- the first mount answers while it scans ----------------------------------
# A test-only knob slows each directory of the scan by 30 ms (two threads,
# ~150 directories: at least 2 s more), so that "before the end" is certain.
t0=$(now_ms)
STAGEFS_TEST_SCAN_DELAY_US=30000 sfs_mount "dir://$src" "$mnt" dir_scan_threads=2
t1=$(now_ms)
ls -i1 "$mnt" | LC_ALL=C sort -k2 >"$T/top.during"
t2=$(now_ms)
said "scanned $src" && die "the scan ended before \`ls\` of the top: nothing shows that the mount answers early"
n=$(wc -l <"$T/top.during")
assert_eq "$n" "$(find "$src" -mindepth 1 -maxdepth 1 | wc -l)" "entries of the top listed during the scan"
log "ready $((t1 - t0)) ms after exec; \`ls\` of the top ($n entries) took $((t2 - t1)) ms, the scan still running"
assert_gt 1000 "$((t2 - t1))" "ms for \`ls\` of the top during the scan"
# early files, and one deep in the breadth-first order (waits for the scan)
probe=(d0000 d0001/f0001000 d0002/f0002999 wide/f0000007)
stat -c '%i %n' "${probe[@]/#/$mnt/}" >"$T/probe.during"

# a whole walk during the scan (it waits where the scan has not been yet)
treecmp "$src" "$mnt" --no-content --max-diffs 5 >"$T/treecmp" 2>&1 ||
	die "the mount differs from its source during the scan: $(tail -6 "$T/treecmp")"
log "treecmp during the scan: $(tail -1 "$T/treecmp")"
wait_for -t 120 said "scanned $src: $entries entries" ||
	die "the scan did not end with $entries entries: $(grep -i scan "$(sfs_log "$mnt")")"
log "scan ended $(($(now_ms) - t0)) ms after exec: $(grep -o 'in [0-9]* ms ([0-9]* threads)' "$(sfs_log "$mnt")")"

# the manifest now answers, with the inode numbers the kernel was given
drop_caches
ls -i1 "$mnt" | LC_ALL=C sort -k2 | cmp -s - "$T/top.during" ||
	die "inode numbers of the top changed when the scan ended: $(ls -i1 "$mnt" | LC_ALL=C sort -k2 | diff - "$T/top.during" | head -4 | tr '\n' ' ')"
stat -c '%i %n' "${probe[@]/#/$mnt/}" | cmp -s - "$T/probe.during" ||
	die "inode numbers changed when the scan ended: $(stat -c '%i %n' "${probe[@]/#/$mnt/}" | diff - "$T/probe.during" | tr '\n' ' ')"

# a sample of files, byte for byte
find "$src" -type f -printf '%P\n' | awk 'NR % 487 == 3' >"$T/sample"
assert_ge "$(wc -l <"$T/sample")" 250 "sampled files"
(cd "$mnt" && xargs -a "$T/sample" "$PYTHON" "$REPO/tools/bench/genscale.py" "$mnt" --check) ||
	die "a sampled file read back wrong"
sfs_umount "$mnt"

# --- the remount reuses the scan saved at its end ---------------------------
sfs_mount "dir://$src" "$mnt"
said "unchanged since its last scan ($entries entries)" || die "the remount scanned again: $(grep -i scan "$(sfs_log "$mnt")")"
[[ $(find "$mnt" | wc -l) -eq $entries ]] || die "the remount lists other entries"
sfs_umount "$mnt"

# --- a directory gone before the scan reaches it: EIO, not an empty listing ---
small=$T/small
for i in $(seq -w 0 29); do
	mkdir -p "$small/d$i" && echo "$i" >"$small/d$i/f"
done
STAGEFS_TEST_SCAN_DELAY_US=100000 sfs_mount "dir://$small" "$mnt" dir_scan_threads=1 cache_dir="$T/cache-small"
ls "$mnt" | contains -x d29 || die "the top's listing lacks d29"
rm -rf "$small/d29"	# last in breadth-first order: read ~3 s from now
[[ $(cat "$mnt/d00/f") == 00 ]] || die "d00/f, read before the failure, is not served"
rc=0
out=$(ls "$mnt/d29" 2>"$T/err") || rc=$?
[[ $rc -ne 0 && -z $out ]] || die "ls of a directory the scan could not read: rc $rc, listed '$out'"
grep -q "Input/output error" "$T/err" || die "ls of the unreadable directory: $(cat "$T/err"), expected EIO"
said "scan of $small failed: $small/d29: No such file or directory" ||
	die "the failed scan is not logged: $(grep -i scan "$(sfs_log "$mnt")")"
# what was read before the failure is still served
[[ $(cat "$mnt/d01/f") == 01 ]] || die "d01/f is not served after the failed scan"
sfs_umount "$mnt"
ls "$T/cache-small/snapshots/"*.dirs >/dev/null 2>&1 && die "a failed scan was saved"
log "ok"
