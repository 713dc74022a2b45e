#!/usr/bin/env bash
# The Debian packages: `make deb` builds them (lintian: no errors) and apt-get installs them; the man pages resolve (`man -w stagefs`...) and the unit passes systemd-analyze verify; the installed daemon mounts a dir:// dataset through `mount -t fuse.stagefs` and serves its bytes, to the subcommands, to a C program built against libstagefs-dev and to python3-stagefs; the unit's command with the installed default config mounts an empty root that its reload fills; an upgrade (`dpkg -i` of the same tree built as another version) has both supervised mounts take the new binary over while readers check every byte: no error, the new version serving, the daemon generation advanced; a purge leaves no file, unit, config or cache behind.
# timeout: 420
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_root
need_fuse
for c in dpkg-buildpackage dh apt-get; do
	command -v $c >/dev/null || skip "no $c (packages dpkg-dev, debhelper: ./configure --install-deps)"
done
command -v mount.fuse3 >/dev/null || skip "no mount.fuse3 (package fuse3)"
PKGS=(stagefs libstagefs0 libstagefs-dev python3-stagefs stagefs-csi)
for p in "${PKGS[@]}"; do
	# a package this test did not install is not this test's to purge
	if dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | contains -v '^not-installed$'; then
		skip "package $p is already on this machine: not touching it"
	fi
done

T=$TEST_TMPDIR
APT=(apt-get -o DPkg::Lock::Timeout=600 -y -q)
# the installed programs only: not a build tree's on PATH
SYSPATH=/usr/sbin:/usr/bin:/sbin:/bin
installed=0 daemon=
deb_cleanup() {
	set +e
	[[ -n $daemon ]] && kill -TERM "$daemon" 2>/dev/null && sleep 1
	for m in "$T/mnt" "$T/datasets"; do
		mountpoint -q "$m" && fusermount3 -u -z "$m"
	done
	if ((installed)); then
		dpkg --purge "${PKGS[@]}" >>"$T/apt.log" 2>&1
	fi
}
trap 'rc=$?; deb_cleanup; (exit $rc); _lib_on_exit' EXIT
# the runner's timeout sends SIGTERM: purge then too
trap 'exit 143' TERM INT

# --- build (incremental after the first time: tools/dev/mkdeb.sh)
t0=$SECONDS
make -s -C "$REPO" deb >"$T/mkdeb.log" 2>&1 || { tail -n 40 "$T/mkdeb.log" >&2; die "make deb failed"; }
grep -q "lintian: no errors" "$T/mkdeb.log" || command -v lintian >/dev/null ||
	log "lintian is not installed: the packages were not checked"
out=${STAGEFS_DEB_DIR:-$REPO/build/deb}
debs=()
for p in "${PKGS[@]}"; do
	f=$(ls "$out/${p}_"*.deb 2>/dev/null | head -n 1)
	[[ -n $f ]] || die "make deb made no $p package"
	debs+=("$f")
done
log "make deb: $((SECONDS - t0)) s; $(grep -c '^[EW]: ' "$T/mkdeb.log" || true) lintian errors/warnings"
! grep -q '^E: ' "$T/mkdeb.log" || die "lintian errors: $(grep '^E: ' "$T/mkdeb.log")"
# The upgrade: the same tree as another version, in a build directory of its
# own that starts from the first one's build (only the objects that print
# the version are compiled again); lintian has seen the same tree above.
v1=$(sed -n 1p "$REPO/VERSION")
v2=$v1+upgrade1
t0=$SECONDS
STAGEFS_DEB_DIR=$out-upgrade STAGEFS_DEB_SEED=$out STAGEFS_DEB_VERSION=$v2 LINTIAN=0 \
	make -s -C "$REPO" deb >"$T/mkdeb2.log" 2>&1 ||
	{ tail -n 40 "$T/mkdeb2.log" >&2; die "make deb of $v2 failed"; }
debs2=()
for p in "${PKGS[@]}"; do
	f=$out-upgrade/${p}_${v2}_$(dpkg --print-architecture).deb
	[[ $p == python3-stagefs || $p == stagefs-csi ]] && f=$out-upgrade/${p}_${v2}_all.deb
	[[ -f $f ]] || die "make deb of $v2 made no $f"
	debs2+=("$f")
done
log "make deb of $v2: $((SECONDS - t0)) s"

# --- install
t0=$SECONDS
installed=1
"${APT[@]}" install "${debs[@]}" >"$T/apt.log" 2>&1 || { tail -n 30 "$T/apt.log" >&2; die "apt-get install failed"; }
log "installed in $((SECONDS - t0)) s"
dpkg -L "${PKGS[@]}" | sort -u >"$T/files"
[[ -x /usr/bin/stagefs && -f /etc/stagefs/stagefs.conf && -f /lib/systemd/system/stagefs.service ]] ||
	die "the package lacks the daemon, its config or its unit"
# stagefs-csi: the plugin and its message classes from the package
PATH=$SYSPATH stagefs-csi --help | contains -- --endpoint || die "stagefs-csi --help"
help=$(PATH=$SYSPATH stagefs --help)
for t in publish gc warmup top quota restart; do
	[[ -x /usr/libexec/stagefs/stagefs-$t ]] || die "no /usr/libexec/stagefs/stagefs-$t"
	grep -q "^    $t " <<<"$help" || die "stagefs --help does not name $t"
done
PATH=$SYSPATH stagefs-does-not-exist 2>/dev/null && die "PATH is not the system's"

# man pages, and the unit with them in place
for page in stagefs stagefs.conf.5 stagefs-publish stagefs-gc stagefs-warmup stagefs-top stagefs-quota stagefs-restart libstagefs.3; do
	f=$(man -w "${page%.[0-9]}" 2>/dev/null | head -n 1) || die "man -w ${page%.[0-9]}: no page"
	[[ $f == /usr/share/man/* ]] || die "man -w $page found $f, not the package's"
done
log "man -w stagefs: $(man -w stagefs)"
if command -v systemd-analyze >/dev/null; then
	v=$(systemd-analyze verify /lib/systemd/system/stagefs.service 2>&1) || true
	[[ -z $v ]] || die "systemd-analyze verify: $v"
fi
# not enabled, not started on install (it would mount /datasets under a node's jobs)
[[ ! -e /etc/systemd/system/multi-user.target.wants/stagefs.service ]] || die "the unit was enabled on install"

# --- mount -t fuse.stagefs: mount(8) -> mount.fuse3 -> stagefs on its PATH
src=$T/src mnt=$T/mnt
mkdir -p "$src/d" "$mnt"
head -c 5000000 /dev/urandom >"$src/d/file"
head -c 12345 /dev/urandom >"$src/d/small"
# more for the readers across the upgrade
for i in $(seq 10 29); do head -c $(((RANDOM % 8 + 1) * 37000)) /dev/urandom >"$src/d/r$i"; done
want=$(sha256 "$src/d/file")
PATH=$SYSPATH mount -t fuse.stagefs "dir://$src" "$mnt" \
	-o "_netdev,cache_dir=$T/cache,runtime_dir=$T/run,chunk_size=1M" >"$T/mount.log" 2>&1 ||
	{ cat "$T/mount.log" >&2; die "mount -t fuse.stagefs failed"; }
mountpoint -q "$mnt" || die "not mounted after mount returned"
# in the background, supervise=auto is on: a supervisor and its daemon
pid=$(stat_get "$mnt" supervisor_pid)
[[ $pid != 0 ]] || die "mount -t fuse.stagefs made no supervised mount"
exe=$(readlink "/proc/$pid/exe")
[[ $exe == /usr/bin/stagefs ]] || die "the mount's supervisor is $exe, not the installed /usr/bin/stagefs"
d=$(pgrep -P "$pid" -x stagefs | head -n 1)
[[ -n $d && $(readlink "/proc/$d/exe") == /usr/bin/stagefs ]] || die "no daemon of /usr/bin/stagefs under supervisor $pid"
PATH=$SYSPATH stagefs warmup -q "$mnt/d" || die "the installed stagefs warmup failed"
[[ $(sha256 "$mnt/d/file") == "$want" ]] || die "wrong bytes through the installed daemon"
cmp "$src/d/small" "$mnt/d/small" || die "wrong bytes (small file)"
PATH=$SYSPATH stagefs top --once --json "$mnt" >"$T/top.json" || die "stagefs top --once --json failed"

# libstagefs-dev: a C program built against the header, the link and the .pc
cat >"$T/rd.c" <<'C'
#include <libstagefs.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	struct sfs_file *f;
	int64_t size;
	char *buf;
	if (sfs_client_open(argv[1], &f))
		return 2;
	size = sfs_client_size(f);
	buf = malloc(size);
	if (!buf || sfs_read_device(f, 0, size, buf, SFS_HOST_DEVICE) != size)
		return 3;
	fwrite(buf, 1, size, stdout);
	sfs_client_close(f);
	return 0;
}
C
# shellcheck disable=SC2046
cc -o "$T/rd" "$T/rd.c" $(pkg-config --cflags --libs libstagefs) || die "cannot build against libstagefs-dev"
ldd "$T/rd" | contains -E "libstagefs.so.0 => (/usr)?/lib/[^ ]+/libstagefs.so.0 " || die "rd does not load the packaged libstagefs.so.0: $(ldd "$T/rd")"
"$T/rd" "$mnt/d/file" >"$T/rd.out" || die "the libstagefs program failed"
[[ $(sha256 "$T/rd.out") == "$want" ]] || die "wrong bytes through libstagefs"

# python3-stagefs: the module and the library from the system's paths
env -u PYTHONPATH -u STAGEFS_LIB /usr/bin/python3 - "$mnt/d/file" "$want" <<'PY' || die "python3-stagefs failed"
import hashlib, sys
import stagefs, stagefs_hints
path, want = sys.argv[1:]
assert stagefs.__file__.startswith("/usr/lib/python3/dist-packages/"), stagefs.__file__
with stagefs.open(path) as f:
    buf = bytearray(f.size)
    assert f.read_into(0, buf) == f.size
    head = f.read(0, 4096)
    via = f.via
assert hashlib.sha256(buf).hexdigest() == want, "wrong bytes"
assert head == bytes(buf[:4096])
maps = open("/proc/self/maps").read()
assert "/usr/lib/x86_64-linux-gnu/libstagefs.so.0" in maps or "/libstagefs.so.0" in maps, "libstagefs.so.0 not loaded"
print("python3-stagefs: read", len(buf), "bytes from the", via)
PY

# --- the unit's own command with the installed default config: an empty
# root until a dataset is configured, then the unit's reload mounts it
start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/stagefs.service)
reload=$(sed -n 's/^ExecReload=//p' /lib/systemd/system/stagefs.service)
[[ $start == "/usr/bin/stagefs -f -o supervise=on -c /etc/stagefs/stagefs.conf /datasets" ]] || die "unexpected ExecStart: $start"
grep -qx 'NotifyAccess=all' /lib/systemd/system/stagefs.service || die "the unit's NotifyAccess is not all (its daemon is the main process's child)"
[[ -n $reload ]] || die "the unit has no ExecReload"
root=$T/datasets
mkdir -p "$root"
# shellcheck disable=SC2086
${start% /datasets} "$root" >"$T/unit.log" 2>&1 &
daemon=$!
wait_for -t 20 _ready "$root" || { cat "$T/unit.log" >&2; die "the unit's command did not mount $root"; }
[[ -z $(ls -A "$root") ]] || die "the default config mounted something: $(ls -A "$root")"
# the notice comes once the mount is set up, a moment after it answers
wait_for -t 10 grep -q "configures no dataset yet" "$T/unit.log" || die "no notice about the empty config: $(cat "$T/unit.log")"
printf '\n[dataset d]\nsource = dir://%s\n' "$src/d" >>/etc/stagefs/stagefs.conf
# shellcheck disable=SC2086
${reload//\$MAINPID/$daemon} || die "the unit's reload failed"
wait_for -t 20 test -f "$root/d/file" || { cat "$T/unit.log" >&2; die "the reload did not mount [dataset d]"; }
[[ $(sha256 "$root/d/file") == "$want" ]] || die "wrong bytes under the unit's mount"
[[ $(stat_get "$root" supervisor_pid) == "$daemon" ]] || die "the unit's command is not supervised by its main process $daemon"

# --- the upgrade, under readers that check every byte on both mounts: the
# new package's postinst has each supervised mount of /usr/bin/stagefs take
# the new binary over (stagefs restart); neither mount ends
# stat_text MNT KEY: a string of the stats (stat_get reads numbers)
stat_text() { stats_dump "$1" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }
declare -A gen
for m in "$mnt" "$root"; do
	gen[$m]=$(stat_get "$m" daemon_generation)
	[[ $(stat_text "$m" version) == "$v1" ]] || die "$m: version $(stat_text "$m" version), not $v1"
done
rm -f "$T/stop"
"$PYTHON" "$REPO/tests/verify_reader.py" --threads 2 "$mnt/d" "$src/d" "$T/stop" >"$T/reader-mnt.json" &
r1=$!
"$PYTHON" "$REPO/tests/verify_reader.py" --threads 2 "$root/d" "$src/d" "$T/stop" >"$T/reader-unit.json" &
r2=$!
sleep 1
t0=$SECONDS
dpkg -i "${debs2[@]}" >"$T/upgrade.log" 2>&1 || { cat "$T/upgrade.log" >&2; die "dpkg -i of $v2 failed"; }
log "dpkg -i of $v2 (readers on both mounts): $((SECONDS - t0)) s"
grep -F -e "stagefs:" -e "$T/" "$T/upgrade.log" >&2 || true
sleep 0.5
touch "$T/stop"
rc1=0 rc2=0
wait "$r1" || rc1=$?
wait "$r2" || rc2=$?
log "readers across the upgrade: mount -t: $(cat "$T/reader-mnt.json"); the unit's: $(cat "$T/reader-unit.json")"
assert_eq "$rc1" 0 "readers of the mount -t mount across the upgrade ($(cat "$T/reader-mnt.json"))"
assert_eq "$rc2" 0 "readers of the unit's mount across the upgrade ($(cat "$T/reader-unit.json"))"
for m in "$mnt" "$root"; do
	grep -q "^$m: restarted: daemon generation " "$T/upgrade.log" ||
		die "the upgrade did not restart $m: $(cat "$T/upgrade.log")"
	[[ $(stat_text "$m" version) == "$v2" ]] || die "$m: version $(stat_text "$m" version) after the upgrade, not $v2"
	assert_gt "$(stat_get "$m" daemon_generation)" "${gen[$m]}" "$m: daemon generation after the upgrade"
done
# the same supervisors (the mounts never ended), now with daemons of the new file
for s in "$pid" "$daemon"; do
	[[ $(readlink "/proc/$s/exe") == "/usr/bin/stagefs (deleted)" ]] ||
		die "supervisor $s: $(readlink "/proc/$s/exe"), not the replaced /usr/bin/stagefs"
	d=$(pgrep -P "$s" -x stagefs | head -n 1)
	[[ -n $d && $(readlink "/proc/$d/exe") == /usr/bin/stagefs ]] ||
		die "supervisor $s has no daemon of the new /usr/bin/stagefs"
done
# the installed subcommand by hand: a supervised mount restarts again
g=$(stat_get "$root" daemon_generation)
PATH=$SYSPATH stagefs restart "$root" >"$T/restart.out" || die "stagefs restart $root failed: $(cat "$T/restart.out")"
grep -q "^$root: restarted: daemon generation $((g + 1)) (was $g), takeover pause [0-9]* ms, stagefs $v2\$" "$T/restart.out" ||
	die "stagefs restart printed: $(cat "$T/restart.out")"
wait_for -t 10 fusermount3 -u "$mnt" || die "cannot unmount $mnt"
wait_for -t 10 eval "! kill -0 $pid 2>/dev/null" || die "the supervisor of $mnt still running after unmount"
kill -TERM "$daemon"
wait_pid_exit "$daemon" 20 || die "the unit's daemon did not stop on SIGTERM"
[[ $WAIT_RC == 0 ]] || die "the unit's daemon exited $WAIT_RC on SIGTERM"
daemon=
! mountpoint -q "$root" || die "$root still mounted after SIGTERM"
[[ -d /var/cache/stagefs ]] || die "the default cache_dir /var/cache/stagefs was not used"

# --- purge: nothing of the packages is left
t0=$SECONDS
installed=0
dpkg --purge "${PKGS[@]}" >>"$T/apt.log" 2>&1 || { tail -n 30 "$T/apt.log" >&2; die "dpkg --purge failed"; }
log "purged in $((SECONDS - t0)) s"
for p in "${PKGS[@]}"; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[[ -z $st || $st == not-installed ]] || die "$p is still $st after purge"
done
left=()
while IFS= read -r f; do
	[[ -e $f || -L $f ]] || continue
	# directories other packages share (/usr/bin, /lib/systemd/system, ...)
	[[ -d $f && $f != *stagefs* ]] && continue
	left+=("$f")
done <"$T/files"
for f in /etc/stagefs /var/cache/stagefs /run/stagefs \
	 /etc/systemd/system/multi-user.target.wants/stagefs.service \
	 /var/lib/systemd/deb-systemd-helper-enabled/stagefs.service.dsh-also \
	 /var/lib/systemd/deb-systemd-helper-masked/stagefs.service; do
	[[ -e $f ]] && left+=("$f")
done
compgen -G '/usr/lib/python3/dist-packages/__pycache__/stagefs*' >/dev/null &&
	left+=(/usr/lib/python3/dist-packages/__pycache__/stagefs*)
((${#left[@]} == 0)) || die "left behind after purge: ${left[*]}"
man -w stagefs >/dev/null 2>&1 && die "man stagefs still finds a page after purge: $(man -w stagefs)"
log "purge left nothing behind ($(wc -l <"$T/files") paths checked)"
