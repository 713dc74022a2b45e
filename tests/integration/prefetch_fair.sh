#!/usr/bin/env bash
# Two users' warmups share the backend fairly (round robin by uid): a warmup started later is not queued behind an earlier one, and a non-root user gets EACCES for files it may not read.
# timeout: 200
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"

as() { local u=$1; shift; setpriv --reuid="$u" --regid="$u" --clear-groups "$@"; }
# other users must reach the mount, the socket and the binaries: let them
# through (search only) the directories above
for d in "$TEST_TMPDIR" "$(dirname "$STAGEFS")"; do
	while [[ $d != / ]]; do
		chmod o+x "$d"
		d=$(dirname "$d")
	done
done
as 1001 test -x "$STAGEFS" || skip "uid 1001 cannot run $STAGEFS"
src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src/a" "$src/b" "$src/secret"
for i in $(seq -w 1 24); do
	head -c $((4 * 1024 * 1024)) /dev/urandom >"$src/a/f$i.bin"
	head -c $((4 * 1024 * 1024)) /dev/urandom >"$src/b/f$i.bin"
done
head -c 4096 /dev/urandom >"$src/secret/key.bin"
chmod 600 "$src/secret/key.bin"
chmod -R a+rX "$src/a" "$src/b"

# 192 MiB at 24 MB/s; 2 fetches in flight per user
sfs_mount "dir://$src" "$mnt" chunk_size=1M backend_max_rate=24M prefetch_user_inflight=2
jget() { "$PYTHON" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$1" "$2"; }
stat_ge() { [[ $(stat_get "$1" "$2") -ge $3 ]]; }

log "user 1001 starts first, user 1002 a moment later"
as 1001 "$STAGEFS" warmup --threads 64 --json "$mnt/a" >"$TEST_TMPDIR/a.json" 2>/dev/null &
apid=$!
wait_for -t 30 stat_ge "$mnt" warmup_fetches 8 || die "the first warmup does not start"
as 1002 "$STAGEFS" warmup --json "$mnt/b" >"$TEST_TMPDIR/b.json" 2>/dev/null &
bpid=$!
wait_pid_exit "$apid" 60 || die "the first warmup does not finish"
assert_eq "$WAIT_RC" 0 "first warmup exit status"
"$STAGEFS" warmup --check --json "$mnt/b" >"$TEST_TMPDIR/bcheck.json"
bdone=$(jget "$TEST_TMPDIR/bcheck.json" cached_before)
btotal=$(jget "$TEST_TMPDIR/bcheck.json" chunks)
log "when user 1001's warmup ended, user 1002 had $bdone of $btotal chunks"
# fair share: about half the bandwidth since it started (~60% of its data);
# first come, first served would leave it near 0
assert_ge $((bdone * 4)) "$btotal" "user 1002's share while both ran"
wait_pid_exit "$bpid" 60 || die "the second warmup does not finish"
assert_eq "$WAIT_RC" 0 "second warmup exit status"
assert_eq "$(jget "$TEST_TMPDIR/b.json" failed)" 0 "second warmup failures"

log "access: a user who may not read a file cannot stage it"
rc=0
as 1001 "$STAGEFS" warmup --json "$mnt/secret" >"$TEST_TMPDIR/s.json" 2>"$TEST_TMPDIR/s.err" || rc=$?
assert_eq "$rc" 1 "exit status of a refused warmup"
grep -q "secret/key.bin" "$TEST_TMPDIR/s.err" || die "the refused file is not named: $(cat "$TEST_TMPDIR/s.err")"
"$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["failures"][0]["error"]=="EACCES", d' "$TEST_TMPDIR/s.json"
"$STAGEFS" warmup --check --json "$mnt/secret" >"$TEST_TMPDIR/sc.json"
assert_eq "$(jget "$TEST_TMPDIR/sc.json" cached_before)" 0 "chunks of the refused file cached"
sfs_umount "$mnt"
