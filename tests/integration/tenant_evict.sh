#!/usr/bin/env bash
# `stagefs warmup --evict` by one user drops only that user's chunks and says how many of others' it kept; another user's cached data stays, and root's evict drops everything.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

A=sfs_ten_a B=sfs_ten_b
need_users $A $B

T=$TEST_TMPDIR
chmod 755 "$T" "$(dirname "$T")"
mkdir -p "$T/data"
MiB=$((1024 * 1024))
for i in 1 2 3; do head -c $MiB /dev/urandom >"$T/data/f$i"; done
chmod -R a+rX "$T/data"

MNT=$T/mnt
sfs_mount "dir://$T/data" "$MNT" chunk_size=1M
usage() { # usage USER -> used bytes from `stagefs quota --json`
	"$STAGEFS" quota --json "$MNT" | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(u["used_bytes"] for u in d["users"] if u["user"] == sys.argv[1]))' "$1"
}
# jget FILE KEY: a number from `stagefs warmup --json`
jget() { "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# B's reads bring f1 and f2 in (charged to B), A's bring f3 in
for i in 1 2; do as $B cat "$MNT/f$i" | cmp - "$T/data/f$i" || die "$B: f$i"; done
as $A cat "$MNT/f3" | cmp - "$T/data/f3" || die "$A: f3"
as $A cat "$MNT/f1" | cmp - "$T/data/f1" || die "$A: f1"	# stays charged to B
assert_eq "$(usage $B)" $((2 * MiB)) "$B's usage"
assert_eq "$(usage $A)" $MiB "$A's usage"

# A evicts the whole mount: only its own chunk goes
as $A "$STAGEFS" warmup --evict --json "$MNT" >"$T/ea.json" 2>"$T/ea.err" ||
	die "$A's evict failed: $(cat "$T/ea.err")"
assert_eq "$(jget "$T/ea.json" evicted)" 1 "chunks $A evicted"
assert_eq "$(jget "$T/ea.json" evict_skipped)" 2 "chunks of $B's $A's evict kept"
assert_eq "$(usage $B)" $((2 * MiB)) "$B's usage after $A's evict"
assert_eq "$(usage $A)" 0 "$A's usage after its evict"
assert_eq "$(stat_get "$MNT" cache_chunks)" 2 "chunks cached after $A's evict"
# the text summary says so
as $A "$STAGEFS" warmup --evict "$MNT" >"$T/ea.txt" 2>&1 || die "$A's second evict failed"
grep -q "evicted 0 chunks of 3 files .*, 2 chunks kept: other users'" "$T/ea.txt" ||
	die "the summary does not say what was kept: $(cat "$T/ea.txt")"
# B's data is still served from the cache
hits=$(stat_get "$MNT" cache_misses)
as $B cat "$MNT/f1" | cmp - "$T/data/f1" || die "$B: f1 after the evict"
assert_eq "$(stat_get "$MNT" cache_misses)" "$hits" "misses when $B read f1 again"

# root drops every user's chunks
"$STAGEFS" warmup --evict --json "$MNT" >"$T/er.json" 2>"$T/er.err" || die "root's evict failed: $(cat "$T/er.err")"
assert_eq "$(jget "$T/er.json" evicted)" 2 "chunks root evicted"
assert_eq "$(jget "$T/er.json" evict_skipped)" 0 "chunks root's evict kept"
assert_eq "$(usage $B)" 0 "$B's usage after root's evict"
sfs_umount "$MNT"
echo "ok: a user's evict drops its own chunks only, root's drops all"
