#!/usr/bin/env bash
# stagefs warmup stages a whole tree; with the source renamed away every byte reads back right with zero backend reads, and a second warmup fetches nothing.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
gentree "$src" --small 600 --big-mb 40 --chunk 1M
sfs_mount "dir://$src" "$mnt" chunk_size=1M

# jget FILE KEY: one integer (or the length of a list) from a JSON object
jget() {
	"$PYTHON" -c 'import json, sys
v = json.load(open(sys.argv[1]))[sys.argv[2]]
print(len(v) if isinstance(v, list) else int(v))' "$1" "$2"
}

log "the socket file and the virtual file that names it"
sock=$(cat "$mnt/.stagefs/socket")
[[ -S $sock ]] || die ".stagefs/socket names $sock, which is not a socket"
[[ $(stat -c %a "$sock") == 622 ]] || die "socket mode is $(stat -c %a "$sock"), expected 622"
[[ $(stat -c %a "$(dirname "$sock")") == 755 ]] || die "runtime dir mode is not 755"

"$STAGEFS" warmup --check --json "$mnt" >"$TEST_TMPDIR/check0.json"
chunks=$(jget "$TEST_TMPDIR/check0.json" chunks)
assert_gt "$chunks" 0 "chunks in the tree"
assert_eq "$(jget "$TEST_TMPDIR/check0.json" cached_before)" 0 "cached before any read"

log "warmup of the whole mount ($chunks chunks)"
reads0=$(stat_get "$mnt" backend_reads)
"$STAGEFS" warmup --json "$mnt" >"$TEST_TMPDIR/w1.json"
cat "$TEST_TMPDIR/w1.json" >&2
assert_eq "$(jget "$TEST_TMPDIR/w1.json" failed)" 0 "failed chunks"
assert_eq "$(jget "$TEST_TMPDIR/w1.json" chunks)" "$chunks" "chunks warmed"
assert_eq "$(jget "$TEST_TMPDIR/w1.json" fetched)" "$chunks" "chunks fetched"
reads1=$(stat_get "$mnt" backend_reads)
assert_eq $((reads1 - reads0)) "$chunks" "backend reads of the warmup"
assert_eq "$(stat_get "$mnt" warmup_fetches)" "$chunks" "warmup_fetches"

"$STAGEFS" warmup --check --json "$mnt" >"$TEST_TMPDIR/check1.json"
assert_eq "$(jget "$TEST_TMPDIR/check1.json" cached_before)" "$chunks" "cached after warmup"
assert_eq "$(jget "$TEST_TMPDIR/check1.json" cached_files)" \
	"$(jget "$TEST_TMPDIR/check1.json" files)" "files fully cached"

log "source renamed away: everything must come from the cache"
mv "$src" "$src.away"
drop_caches
treecmp "$src.away" "$mnt" --jobs 4
assert_eq $(($(stat_get "$mnt" backend_reads) - reads1)) 0 "backend reads after the warmup"
assert_eq "$(stat_get "$mnt" backend_errors)" 0 "backend errors"

log "a second warmup finds everything cached and fetches nothing"
"$STAGEFS" warmup --json "$mnt" >"$TEST_TMPDIR/w2.json"
assert_eq "$(jget "$TEST_TMPDIR/w2.json" fetched)" 0 "second warmup fetched"
assert_eq "$(jget "$TEST_TMPDIR/w2.json" cached_before)" "$chunks" "second warmup cached_before"

log "evict one directory, then check shows it gone"
"$STAGEFS" warmup --evict --json "$mnt/small" >"$TEST_TMPDIR/ev.json"
ev=$(jget "$TEST_TMPDIR/ev.json" evicted)
assert_gt "$ev" 0 "evicted chunks"
"$STAGEFS" warmup --check --json "$mnt" >"$TEST_TMPDIR/check2.json"
assert_eq "$(jget "$TEST_TMPDIR/check2.json" cached_before)" $((chunks - ev)) "cached after evict"

log "with the source gone a warmup of the evicted part fails, names what, exits 1"
rc=0
"$STAGEFS" warmup --json "$mnt/small/d00" >"$TEST_TMPDIR/w3.json" 2>"$TEST_TMPDIR/w3.err" || rc=$?
assert_eq "$rc" 1 "exit status of a failing warmup"
assert_gt "$(jget "$TEST_TMPDIR/w3.json" failed)" 0 "failed chunks"
grep -q "small/d00/" "$TEST_TMPDIR/w3.err" || die "the failing paths are not named: $(cat "$TEST_TMPDIR/w3.err")"
mv "$src.away" "$src"

log "a path outside any mount is a usage error"
rc=0
"$STAGEFS" warmup "$TEST_TMPDIR" 2>/dev/null || rc=$?
assert_eq "$rc" 2 "exit status for a path outside a mount"

sfs_umount "$mnt"
[[ ! -e $sock ]] || die "the socket $sock is left after unmount"
