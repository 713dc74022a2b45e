#!/usr/bin/env bash
# kill -9 during fills (a reader's, then an engine warmup's), then restart: every byte right, whole chunks not fetched again; truncated and deleted cache files are refetched, never served.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

T=$TEST_TMPDIR
mkdir -p "$T/src"
head -c $((96 * 1024 * 1024)) /dev/urandom >"$T/src/big"
for i in $(seq 1 20); do head -c $((300 * 1024)) /dev/urandom >"$T/src/s$i"; done
MNT=$T/mnt
opts=(chunk_size=1M cache_sync=yes)
TOTAL=$((96 + 20)) # chunks

sfs_mount "dir://$T/src" "$MNT" "${opts[@]}"
# fill in the background, kill -9 the daemon in the middle of it
(cat "$MNT/big" >/dev/null 2>&1 || true) &
reader=$!
wait_for -t 30 bash -c "[[ \$(cat '$MNT/.stagefs/stats' | grep -o '\"backend_reads\": [0-9]*' | grep -o '[0-9]*$') -ge 20 ]]"
pid=$(sfs_pid "$MNT")
kill -9 "$pid"
wait "$reader" || true
fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
wait_pid_exit "$pid" || true
unset "SFS_PID[$(cd "$MNT" && pwd -P)]" 2>/dev/null || true

sfs_mount "dir://$T/src" "$MNT" "${opts[@]}"
loaded=$(stat_get "$MNT" cache_loaded_chunks)
log "chunks kept across kill -9: $loaded"
assert_gt "$loaded" 0 "no chunk survived kill -9"
treecmp "$T/src" "$MNT"
fetched=$(stat_get "$MNT" backend_reads)
log "refetched after restart: $fetched of $TOTAL chunks"
[[ $((fetched + loaded)) -le $TOTAL ]] || die "whole chunks were fetched again: $fetched fetched + $loaded kept > $TOTAL"
assert_eq "$(stat_get "$MNT" corrupt_chunks)" 0 "corrupt chunks after a clean kill -9"
sfs_umount "$MNT"

# kill -9 while the I/O engine has many fills in flight (a warmup, cache_sync
# off: the default): nothing recorded that is not whole, nothing whole lost
rm -rf "$T/cache-w"
sfs_mount "dir://$T/src" "$MNT" chunk_size=1M "cache_dir=$T/cache-w" backend_max_rate=100M
"$STAGEFS" warmup --quiet -t 32 "$MNT" >/dev/null 2>&1 &
warm=$!
wait_for -t 30 bash -c "[[ \$(cat '$MNT/.stagefs/stats' | grep -o '\"warmup_fetches\": [0-9]*' | grep -o '[0-9]*$') -ge 20 ]]"
inflight=$(stat_get "$MNT" engine_inflight)
pid=$(sfs_pid "$MNT")
kill -9 "$pid"
wait "$warm" || true
fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
wait_pid_exit "$pid" || true
unset "SFS_PID[$(cd "$MNT" && pwd -P)]" 2>/dev/null || true
sfs_mount "dir://$T/src" "$MNT" chunk_size=1M "cache_dir=$T/cache-w"
wloaded=$(stat_get "$MNT" cache_loaded_chunks)
log "kill -9 with $inflight engine fills in flight: $wloaded chunks kept"
assert_gt "$wloaded" 0 "no chunk survived kill -9 of the engine"
treecmp "$T/src" "$MNT"
wfetched=$(stat_get "$MNT" backend_reads)
[[ $((wfetched + wloaded)) -le $TOTAL ]] || die "whole chunks were fetched again: $wfetched fetched + $wloaded kept > $TOTAL"
assert_eq "$(stat_get "$MNT" corrupt_chunks)" 0 "corrupt chunks after kill -9 of the engine"
sfs_umount "$MNT"

# while stopped: truncate one cache file, delete another, corrupt a third
mapfile -t files < <(find "$T/cache/data" -type f -size +200k | sort)
[[ ${#files[@]} -ge 3 ]] || die "expected cache files, found ${#files[@]}"
truncate -s 100000 "${files[0]}"
rm -f "${files[1]}"
flip_bytes "${files[2]}" 4096 64
sfs_mount "dir://$T/src" "$MNT" "${opts[@]}"
treecmp "$T/src" "$MNT"
assert_ge "$(stat_get "$MNT" corrupt_chunks)" 1 "damage was not detected"
sfs_umount "$MNT"

# under a running mount: delete the whole cache directory; reads keep working
sfs_mount "dir://$T/src" "$MNT" "${opts[@]}" "cache_dir=$T/cache2"
cmp "$MNT/s1" "$T/src/s1"
rm -rf "$T/cache2/data"
drop_caches
for i in $(seq 2 20); do cmp "$MNT/s$i" "$T/src/s$i" || die "read after cache dir removal failed"; done
[[ -d $T/cache2/data ]] || die "cache data directory was not recreated"
assert_eq "$(stat_get "$MNT" read_errors)" 0 "reader errors"
sfs_umount "$MNT"
echo "ok: kill -9 kept $loaded chunks, refetched $fetched; damaged cache files were refetched"
