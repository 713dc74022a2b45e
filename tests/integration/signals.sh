#!/usr/bin/env bash
# SIGTERM/SIGINT and fusermount3 -u end a foreground daemon cleanly (exit 0, unmounted); background mode returns only once the mount works.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src/d"
head -c 3000000 /dev/urandom >"$src/d/file"
want=$(sha256 "$src/d/file")

check_mount_works() {
	[[ $(sha256 "$mnt/d/file") == "$want" ]] || die "wrong content through $mnt"
}

# Signals to a foreground daemon, idle.
for sig in TERM INT; do
	sfs_mount "dir://$src" "$mnt" chunk_size=1M
	check_mount_works
	log "sending SIG$sig to $(sfs_pid "$mnt")"
	kill -s "$sig" "$(sfs_pid "$mnt")"
	sfs_wait_exit "$mnt"
	[[ ! -e $mnt/d/file ]] || die "files still visible at $mnt after SIG$sig"
done

# SIGTERM while a file is open on the mount: still exits 0 and unmounts.
sfs_mount "dir://$src" "$mnt" chunk_size=1M
exec 3<"$mnt/d/file"
head -c 1000 <&3 >/dev/null
kill -s TERM "$(sfs_pid "$mnt")"
sfs_wait_exit "$mnt"
exec 3<&-

# fusermount3 -u.
sfs_mount "dir://$src" "$mnt" chunk_size=1M
check_mount_works
sfs_umount "$mnt"

# Background mode: the parent exits 0 only once the mount is ready, so no
# waiting here: the mount must work the moment it returns.
"$STAGEFS" -o "cache_dir=$TEST_TMPDIR/cache,runtime_dir=$TEST_TMPDIR/run,chunk_size=1M" \
	"dir://$src" "$mnt" </dev/null >"$TEST_TMPDIR/bg.log" 2>&1 ||
	die "background stagefs exited $?: $(cat "$TEST_TMPDIR/bg.log")"
mountpoint -q "$mnt" || die "background stagefs returned before $mnt was mounted"
timeout 10 cat "$mnt/.stagefs/stats" >/dev/null || die "stats not readable right after background start"
check_mount_works
bgpid=$(pgrep -f -- "$mnt" | head -n 1) || die "cannot find the background daemon"
[[ -n $bgpid ]] || die "cannot find the background daemon"
log "background daemon is pid $bgpid"
[[ $(ps -o sid= -p "$bgpid" | tr -d ' ') == "$bgpid" ]] ||
	log "note: background daemon is not a session leader"
fusermount3 -u "$mnt"
wait_for -t 20 _pid_gone "$bgpid" || die "background daemon $bgpid still running 20 s after fusermount3 -u"
! mountpoint -q "$mnt" || die "$mnt still mounted"

# Background mode, SIGTERM.
"$STAGEFS" -o "cache_dir=$TEST_TMPDIR/cache,runtime_dir=$TEST_TMPDIR/run" \
	"dir://$src" "$mnt" </dev/null >"$TEST_TMPDIR/bg.log" 2>&1 ||
	die "background stagefs exited $?: $(cat "$TEST_TMPDIR/bg.log")"
check_mount_works
bgpid=$(pgrep -f -- "$mnt" | head -n 1)
kill -TERM "$bgpid"
wait_for -t 20 _pid_gone "$bgpid" || die "background daemon $bgpid ignored SIGTERM for 20 s"
not_mounted() { ! mountpoint -q "$1"; }
wait_for -t 5 not_mounted "$mnt" || die "$mnt still mounted after SIGTERM"
