#!/usr/bin/env bash
# Mounting on a mount point whose daemon was killed (kill -9) detaches the dead mount with a notice and mounts once; a live mount there is left alone.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src"
printf 'hello\n' >"$src/f"
# mounts MNT: how many mounts /proc/self/mountinfo shows on MNT
mounts() { awk -v m="$1" '$5 == m' /proc/self/mountinfo | wc -l; }

sfs_mount "dir://$src" "$mnt"
mnt=$(_canon "$mnt")
[[ $(cat "$mnt/f") == hello ]]
stat "$mnt" >/dev/null	# the kernel caches the root's attributes
pid=$(sfs_pid "$mnt")
kill -KILL "$pid"
wait_pid_exit "$pid" || die "the daemon survived kill -9"
unset "SFS_PID[$mnt]"
assert_eq "$(mounts "$mnt")" 1 "mounts on $mnt after kill -9"
# With FUSE over io_uring the kernel answers ECANCELED while it still tears
# down the dead daemon's rings, ENOTCONN once the connection is gone.
dead() {
	err=$(ls "$mnt" 2>&1) && die "the dead mount answered: $err"
	[[ $err == *"not connected"* ]]
}
wait_for -t 10 dead || die "the dead mount: expected ENOTCONN, got: $err"

# Mount again: sfs_mount would refuse a mount point that is one.
logf=$TEST_TMPDIR/again.log
"$STAGEFS" -f -o "cache_dir=$TEST_TMPDIR/cache,runtime_dir=$TEST_TMPDIR/run" \
	"dir://$src" "$mnt" </dev/null >"$logf" 2>&1 &
pid=$!
SFS_PID[$mnt]=$pid
SFS_LOG[$mnt]=$logf
wait_for -t "$SFS_MOUNT_TIMEOUT" _ready "$mnt" || die "the new mount never answered: $(cat "$logf")"
grep -q "mount point $mnt: a dead fuse.stagefs mount is there" "$logf" ||
	die "no notice about the dead mount: $(cat "$logf")"
assert_eq "$(mounts "$mnt")" 1 "mounts on $mnt after mounting again (the dead one stacked under?)"
[[ $(cat "$mnt/f") == hello ]] || die "the new mount does not serve the file"

# A live mount is not cleared: a second daemon leaves the first one serving.
rc=0
timeout 5 "$STAGEFS" -f -o "cache_dir=$TEST_TMPDIR/cache2,runtime_dir=$TEST_TMPDIR/run2" \
	"dir://$src" "$mnt" </dev/null >"$TEST_TMPDIR/live.log" 2>&1 || rc=$?
grep -q "a dead .* mount is there" "$TEST_TMPDIR/live.log" && die "a live mount was taken for dead: $(cat "$TEST_TMPDIR/live.log")"
_pid_gone "$pid" && die "the live daemon is gone"
[[ $(cat "$mnt/f") == hello ]] || die "the live mount stopped serving (rc=$rc)"

sfs_umount "$mnt"
assert_eq "$(mounts "$mnt")" 0 "mounts on $mnt after the unmount"
echo "ok: a dead mount detached with a notice, mounted once; a live one left alone"
