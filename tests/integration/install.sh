#!/usr/bin/env bash
# make install (DESTDIR, PREFIX=/usr/local) puts every piece where docs/packaging.md says: the daemon, the subcommands it finds beside itself, libstagefs.so.0 (soname, only the libstagefs.h functions exported) and its link and .pc, the header, Python modules, alert rules, a unit that systemd-analyze verifies, the 9 man pages where man finds them, stagefs.conf (kept on a second install) and its example; and a config with no dataset mounts an empty root that SIGHUP fills.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
command -v scdoc >/dev/null || skip "no scdoc (Debian package scdoc): make install builds the man pages"
[[ -f $REPO/config.mk ]] || skip "the tree is not configured"
T=$TEST_TMPDIR
D=$T/root P=/usr/local

make -s -C "$REPO" install DESTDIR="$D" PREFIX=$P >"$T/install.log" 2>&1 ||
	{ cat "$T/install.log" >&2; die "make install failed"; }
for f in bin/stagefs libexec/stagefs/stagefs-{publish,gc,warmup,top,quota,restart} lib/libstagefs.so.0 \
	 lib/pkgconfig/libstagefs.pc include/libstagefs.h share/stagefs/python/stagefs.py \
	 share/stagefs/python/stagefs_hints.py share/stagefs/prometheus/stagefs-alerts.yml \
	 lib/systemd/system/stagefs.service share/man/man8/stagefs.8 share/man/man5/stagefs.conf.5 \
	 share/man/man1/stagefs-{publish,warmup,top,quota}.1 share/man/man8/stagefs-{gc,restart}.8 share/man/man3/libstagefs.3; do
	[[ -f $D$P/$f ]] || die "make install did not install $P/$f"
done
[[ $(readlink "$D$P/lib/libstagefs.so") == libstagefs.so.0 ]] || die "lib/libstagefs.so is not a link to libstagefs.so.0"
readelf -d "$D$P/lib/libstagefs.so.0" | contains 'SONAME.*\[libstagefs.so.0\]' || die "libstagefs's soname is not libstagefs.so.0"
exports=$(nm -D --defined-only "$D$P/lib/libstagefs.so.0" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort | tr '\n' ' ')
want=$(grep -oE '\bsfs_[a-z_]+\(' "$REPO/gpudirect/libstagefs.h" | tr -d '(' | sort -u | tr '\n' ' ')
[[ $exports == "$want" ]] || die "libstagefs exports '$exports', libstagefs.h declares '$want'"
grep -q "^libdir=$P/lib$" "$D$P/lib/pkgconfig/libstagefs.pc" || die "libstagefs.pc: wrong libdir"
[[ -f $D/etc/stagefs/stagefs.conf && -f $D/etc/stagefs/stagefs.conf.example ]] || die "no /etc/stagefs/stagefs.conf or its example"
cmp -s "$D/etc/stagefs/stagefs.conf" "$REPO/conf/stagefs.conf.example" || die "stagefs.conf is not the example"
grep -q "^ExecStart=$P/bin/stagefs -f -o supervise=on -c /etc/stagefs/stagefs.conf /datasets$" "$D$P/lib/systemd/system/stagefs.service" ||
	die "the unit's ExecStart has the wrong paths: $(grep ExecStart= "$D$P/lib/systemd/system/stagefs.service")"
! grep -q '@[a-z]*@' "$D$P/lib/systemd/system/stagefs.service" || die "the unit has unfilled @...@"

# the subcommands are found beside the moved tree (BINDIR/../libexec/stagefs)
"$D$P/bin/stagefs" quota --help | contains "usage: stagefs quota" || die "stagefs quota not found from $D$P/bin"

# man: /usr/local/share/man is on man-db's path; here MANPATH points at DESTDIR
manpath 2>/dev/null | tr : '\n' | contains -x /usr/local/share/man ||
	log "note: /usr/local/share/man is not on this machine's manpath"
for p in stagefs stagefs.conf stagefs-publish stagefs-gc stagefs-warmup stagefs-top stagefs-quota stagefs-restart libstagefs; do
	f=$(MANPATH=$D$P/share/man man -w "$p" 2>/dev/null) || die "man -w $p: no page"
	[[ $f == "$D$P/share/man/"* ]] || die "man -w $p found $f"
done
MANPATH=$D$P/share/man man -P cat stagefs 2>/dev/null | contains "cache_dir" || die "man stagefs lacks the settings"
if command -v systemd-analyze >/dev/null; then
	sed "s|$P/bin/stagefs|$D$P/bin/stagefs|" "$D$P/lib/systemd/system/stagefs.service" >"$T/stagefs.service"
	v=$(MANPATH=$D$P/share/man: systemd-analyze verify "$T/stagefs.service" 2>&1) || true
	[[ -z $v ]] || die "systemd-analyze verify: $v"
fi

# a second install keeps the operator's config, refreshes the example
echo "# edited" >>"$D/etc/stagefs/stagefs.conf"
make -s -C "$REPO" install DESTDIR="$D" PREFIX=$P >>"$T/install.log" 2>&1 || die "second make install failed"
tail -n 1 "$D/etc/stagefs/stagefs.conf" | contains "^# edited$" || die "make install overwrote stagefs.conf"

# the installed config as the unit uses it: an empty root, filled by SIGHUP
need_mount
src=$T/src root=$T/datasets
mkdir -p "$src"
head -c 300000 /dev/urandom >"$src/f"
cp "$D/etc/stagefs/stagefs.conf" "$T/stagefs.conf"
sfs_mount "" "$root" -c "$T/stagefs.conf"
[[ -z $(ls -A "$root") ]] || die "the installed config mounted something: $(ls -A "$root")"
grep -q "configures no dataset yet" "$(sfs_log "$root")" || die "no notice about the empty config"
printf '[dataset d]\nsource = dir://%s\n' "$src" >>"$T/stagefs.conf"
kill -HUP "$(sfs_pid "$root")"
wait_for -t 20 test -f "$root/d/f" || die "SIGHUP did not mount the dataset added"
cmp "$src/f" "$root/d/f" || die "wrong bytes"
sfs_umount "$root"
# no config at all: still an error
mkdir -p "$T/none"
if "$STAGEFS" -f "$T/none" 2>"$T/err"; then die "a mount with no SOURCE and no -c succeeded"; fi
grep -q "no config file" "$T/err" || die "unclear error without SOURCE or -c: $(cat "$T/err")"
