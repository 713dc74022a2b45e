#!/usr/bin/env bash
# Mounting the way a node's boot does: an /etc/fstab-style mount through mount.fuse3 ("fuse.stagefs", options after SOURCE MOUNTPOINT, fstab-only words such as _netdev and x-systemd.* dropped) is ro,nosuid,nodev even though mount.fuse3 asks for dev,suid, reads right bytes, and is supervised (a killed daemon is replaced); an unknown option still fails with no mount; under systemd's Type=notify protocol the daemon sends READY=1 with its pid only once the mount answers, and STOPPING=1 when it goes; conf/stagefs.service passes systemd-analyze verify.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
command -v mount.fuse3 >/dev/null || skip "no mount.fuse3 (package fuse3)"

T=$TEST_TMPDIR
src=$T/src mnt=$T/mnt
mkdir -p "$src/d" "$mnt"
head -c 3000000 /dev/urandom >"$src/d/file"
printf '#!/bin/sh\necho hi\n' >"$src/d/tool"
chmod 4755 "$src/d/tool"	# set-user-ID in the source: must not count on the mount
want=$(sha256 "$src/d/file")
opts="cache_dir=$T/cache,runtime_dir=$T/run,log_level=$SFS_LOG_LEVEL"

# --- fstab: "SOURCE MNT fuse.stagefs OPTS 0 0" ends as `mount.fuse3 SOURCE MNT -o OPTS -t stagefs`;
# "TYPE#SOURCE" is the same with the program's path.  mount.fuse3 adds dev,suid.
mount.fuse3 "$STAGEFS#dir://$src" "$mnt" \
	-o "defaults,_netdev,nofail,x-systemd.automount,x-systemd.mount-timeout=30,relatime,comment=x,$opts" \
	>"$T/fstab.log" 2>&1 || { cat "$T/fstab.log" >&2; die "mount.fuse3 failed"; }
mountpoint -q "$mnt" || die "not mounted after mount.fuse3 returned"
flags=$(awk -v m="$mnt" '$2 == m { print $4 }' /proc/mounts)
log "mount flags: $flags"
for f in ro nosuid nodev; do
	[[ ,$flags, == *,$f,* ]] || { fusermount3 -u "$mnt"; die "mount is not $f: $flags"; }
done
[[ $(sha256 "$mnt/d/file") == "$want" ]] || { fusermount3 -u "$mnt"; die "wrong bytes through the fstab-style mount"; }
[[ -u $mnt/d/tool ]] || { fusermount3 -u "$mnt"; die "the set-user-ID bit should still show in the mode"; }
# a boot's mount is supervised (supervise=auto: on without -f): a daemon
# killed under it is replaced and the mount goes on
sup=$(stat_get "$mnt" supervisor_pid)
[[ $sup -gt 0 ]] || { fusermount3 -u "$mnt"; die "the fstab-style mount is not supervised"; }
kill -KILL "$(pgrep -P "$sup" -x stagefs | head -1)"
[[ $(sha256 "$mnt/d/file") == "$want" ]] || { fusermount3 -u "$mnt"; die "wrong bytes after the daemon was killed"; }
assert_eq "$(stat_get "$mnt" daemon_generation)" 2 "daemon generation after a kill"
wait_for -t 10 fusermount3 -u "$mnt" || die "cannot unmount"
# the daemon (forked by mount.fuse3) goes away with its mount
gone() { ! pgrep -f -- "cache_dir=$T/cach[e]" >/dev/null; }	# [e]: not this pgrep's own bash
wait_for -t 10 gone || die "daemon still running after unmount"

# --- an unknown option is still an error, named, and nothing is mounted
if mount.fuse3 "$STAGEFS#dir://$src" "$mnt" -o "$opts,no_such_setting=1" >"$T/bad.log" 2>&1; then
	fusermount3 -u "$mnt" 2>/dev/null
	die "an unknown option was accepted"
fi
grep -q "no_such_setting" "$T/bad.log" || { cat "$T/bad.log" >&2; die "the error does not name the option"; }
! mountpoint -q "$mnt" || die "mounted despite the bad option"

# --- sd_notify: READY=1 only once the mount answers, STOPPING=1 at the end
"$PYTHON" - "$T/notify.sock" "$mnt" "$T/notes" <<'PY' &
import os, socket, sys
path, mnt, out = sys.argv[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(60)
with open(out, "w") as f:
    while True:
        msg = s.recv(4096).decode()
        # was the mount there when READY came?  (stat of its stats file)
        ok = os.path.exists(os.path.join(mnt, ".stagefs", "stats"))
        f.write("%s|mounted=%d\n" % (msg.replace("\n", ";"), ok))
        f.flush()
        if "STOPPING=1" in msg:
            break
PY
listener=$!
wait_for -t 10 test -S "$T/notify.sock" || die "the test's notify socket did not appear"
NOTIFY_SOCKET=$T/notify.sock sfs_mount "dir://$src" "$mnt"
pid=$(sfs_pid "$mnt")
wait_for -t 10 grep -q READY=1 "$T/notes" || die "no READY=1 from the daemon"
line=$(grep READY=1 "$T/notes")
log "notify: $line"
[[ $line == *"MAINPID=$pid;"* ]] || die "READY=1 without MAINPID=$pid: $line"
[[ $line == *"STATUS=mounted on $mnt"* ]] || die "READY=1 without its STATUS: $line"
[[ $line == *"|mounted=1" ]] || die "READY=1 came before the mount answered: $line"
[[ $(sha256 "$mnt/d/file") == "$want" ]] || die "wrong bytes"
kill -TERM "$pid"
sfs_wait_exit "$mnt"
wait "$listener" || die "the notify listener failed"
grep -q "STOPPING=1" "$T/notes" || die "no STOPPING=1 at shutdown"

# --- the shipped unit file, with this build's paths (its man: pages are
# not installed here: tests/integration/deb.sh verifies the unit with them)
if command -v systemd-analyze >/dev/null; then
	sed -e "s|@bindir@|$(dirname "$STAGEFS")|g" -e 's|@sysconfdir@|/etc|g' \
		-e '/^Documentation=/s/ *man:stagefs[^ ]*//g' \
		"$REPO/conf/stagefs.service.in" >"$T/stagefs.service"
	out=$(systemd-analyze verify "$T/stagefs.service" 2>&1) || true
	[[ -z $out ]] || die "systemd-analyze verify: $out"
else
	log "no systemd-analyze here: the unit file is not checked"
fi
echo "PASS: fstab-style mount ro,nosuid,nodev; bad option refused; READY=1 after the mount, STOPPING=1 at the end"
