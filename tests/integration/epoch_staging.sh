#!/usr/bin/env bash
# A plain shuffled multi-worker reader (no hints) makes the daemon stage the rest of the dataset in the background: staged bytes in the stats, most reads hit, every byte right, then all of it cached; with epoch_staging=off nothing is staged.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

T=$TEST_TMPDIR
src=$T/src
# 400 files of 40 KiB and 16 of 200 KiB (four 64 KiB chunks): ~19 MiB
"$PYTHON" - "$src" <<'EOF'
import os, random, sys
r = random.Random(19)
root = sys.argv[1]
for i in range(416):
    d = os.path.join(root, "d%02d" % (i % 8))
    os.makedirs(d, exist_ok=True)
    size = 200 * 1024 if i % 26 == 0 else 40 * 1024
    with open(os.path.join(d, "img%04d.jpg" % i), "wb") as f:
        f.write(r.randbytes(size))
EOF
nfiles=$(find "$src" -type f | wc -l)
chunks=$(find "$src" -type f -printf '%s\n' | awk '{ n += int(($1 + 65535) / 65536) } END { print n }')
READER=$REPO/tools/bench/epoch_reader.py

# reader MNT: one shuffled epoch by 2 workers spending 10 ms per sample,
# every byte compared with the source
reader() {
	"$PYTHON" "$READER" "$1" --workers 2 --compute 0.01 --seed 7 --verify "$src" \
		>"$T/epoch.json" || die "the reader failed: $(cat "$T/epoch.json")"
	cat "$T/epoch.json" >&2
}

log "staging on (auto: the dataset fits the cache, no quota)"
mnt=$T/mnt
sfs_mount "dir://$src" "$mnt" chunk_size=64K epoch_staging_files=32 epoch_staging_idle=5s
reader "$mnt"
assert_eq "$(stat_get "$mnt" epoch_stagings_started)" 1 "stagings started"
assert_gt "$(stat_get "$mnt" stage_fetches)" 0 "chunks staged"
assert_gt "$(stat_get "$mnt" epoch_staged_bytes)" 0 "bytes staged"
demand=$(stat_get "$mnt" demand_fetches)
log "demand fetches $demand of $chunks chunks"
# the first 32 files are read before the staging starts; most of the rest
# must have been staged before the reader came to them
[[ $demand -lt $((chunks / 2)) ]] || die "readers fetched $demand of $chunks chunks themselves"
assert_gt "$(cache_served "$mnt")" $((nfiles / 2)) "reads served from the cache"
complete() { [[ $(stat_get "$mnt" epoch_stagings_complete) -eq 1 ]]; }
wait_for complete || die "the staging did not complete: $(stats_dump "$mnt")"
assert_eq "$(stat_get "$mnt" epoch_stagings_active)" 0 "stagings running after it completed"
grep -q "epoch staging: dataset .*, uid 0: read as an epoch" "$(sfs_log "$mnt")" ||
	die "no log line for the start"
grep -q "epoch staging: dataset .*, uid 0: complete" "$(sfs_log "$mnt")" ||
	die "no log line for the end"
"$STAGEFS" warmup --check --json "$mnt" >"$T/check.json"
"$PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["cached_before"] == d["chunks"] == int(sys.argv[2]) else
         "cached %d of %d chunks (%s expected)" % (d["cached_before"], d["chunks"], sys.argv[2]))' \
	"$T/check.json" "$chunks" || die "the dataset is not all cached after the epoch"
# staged + demand = every chunk, each fetched once
assert_eq $(($(stat_get "$mnt" stage_fetches) + demand + $(stat_get "$mnt" readahead_fetches))) \
	"$chunks" "chunks fetched in all"

log "the second epoch, with the source renamed away: all from the cache"
mv "$src" "$src.away"
drop_caches
reads=$(stat_get "$mnt" backend_reads)
"$PYTHON" "$READER" "$mnt" --workers 2 --seed 8 --verify "$src.away" >"$T/epoch2.json" ||
	die "the second epoch failed: $(cat "$T/epoch2.json")"
assert_eq $(($(stat_get "$mnt" backend_reads) - reads)) 0 "backend reads in the second epoch"
mv "$src.away" "$src"
sfs_umount "$mnt"

log "the readers stop after 40 files: so does the staging"
rm -rf "$T/cache"
# a slow backend (2 MiB/s) keeps the staging from finishing first; with
# passthrough off the kernel sends no OPEN where it has no-open mode, and
# the first READ of each file is what the detector counts
sfs_mount "dir://$src" "$mnt" chunk_size=64K epoch_staging_files=32 epoch_staging_idle=1s \
	backend_max_rate=2M passthrough=off
log "no-open mode: $(stat_get "$mnt" no_open)"
"$PYTHON" "$READER" "$mnt" --workers 2 --seed 9 --limit 40 --verify "$src" >"$T/part.json" ||
	die "the partial epoch failed: $(cat "$T/part.json")"
stopped() { [[ $(stat_get "$mnt" epoch_stagings_stopped) -eq 1 ]]; }
wait_for stopped || die "the staging did not stop: $(grep 'epoch staging' "$(sfs_log "$mnt")")"
grep -q "epoch staging: dataset .*, uid 0: stopped: its readers stopped" "$(sfs_log "$mnt")" ||
	die "no log line for the stop: $(grep 'epoch staging' "$(sfs_log "$mnt")")"
assert_eq "$(stat_get "$mnt" epoch_stagings_active)" 0 "stagings running after the stop"
staged=$(stat_get "$mnt" stage_fetches)
[[ $staged -lt $((chunks / 2)) ]] || die "$staged of $chunks chunks staged after the readers stopped"
sleep 1.5
assert_eq "$(stat_get "$mnt" stage_fetches)" "$staged" "chunks staged after the stop"
sfs_umount "$mnt"

log "staging off: the same epoch stages nothing"
rm -rf "$T/cache"
sfs_mount "dir://$src" "$mnt" chunk_size=64K epoch_staging_files=32 epoch_staging=off
reader "$mnt"
assert_eq "$(stat_get "$mnt" epoch_stagings_started)" 0 "stagings started with off"
assert_eq "$(stat_get "$mnt" stage_fetches)" 0 "chunks staged with off"
assert_eq "$(stat_get "$mnt" epoch_staged_bytes)" 0 "bytes staged with off"
assert_ge "$(stat_get "$mnt" demand_fetches)" $((chunks - $(stat_get "$mnt" readahead_fetches))) \
	"demand fetches with off"
! grep -q "epoch staging" "$(sfs_log "$mnt")" || die "epoch staging logged with off"
sfs_umount "$mnt"
echo "ok: a shuffled epoch staged the dataset ($demand of $chunks chunks on demand); off staged nothing"
