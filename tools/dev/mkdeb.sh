#!/usr/bin/env bash
# mkdeb.sh: build the Debian packages (`make deb`).
# SPDX-License-Identifier: Apache-2.0
#
#   tools/dev/mkdeb.sh            build, then run lintian on the result
#
# dpkg-buildpackage runs debian/rules in a copy of the tree,
# $STAGEFS_DEB_DIR/stagefs (default build/deb/stagefs, ignored by git), so
# this tree's build and configuration (./configure --prefix, CUDA) are never
# touched.  Each run brings the copy up to date with the working tree (the
# files git lists, their mtimes kept) and builds without cleaning first, so
# only what changed is compiled again: the package reuses its own previous
# build, as tests/sanitize.sh does; when nothing changed at all since the
# last build (that passed lintian), its packages stand and nothing runs.
# The packages land in $STAGEFS_DEB_DIR; the last lines printed list them.
#
# Build profiles (DEB_BUILD_PROFILES, added to): pkg.stagefs.slurm when the
# tree has the Slurm plugin (slurm/) and its headers are installed;
# pkg.stagefs.nocuda to build without CUDA (see debian/rules).
# Environment: STAGEFS_DEB_DIR, LINTIAN=0 (skip lintian), JOBS (default:
# the CPU count), STAGEFS_DEB_VERSION (build the packages as this version:
# the copy gets it in VERSION and a changelog entry, the tree is not
# touched; tests/integration/deb.sh builds an upgrade so, in a
# STAGEFS_DEB_DIR of its own), STAGEFS_DEB_SEED (a STAGEFS_DEB_DIR built
# before, of the same tree as another version: a copy not there yet starts
# from its build, so that only the objects that print the version, which
# alone include version.h, are compiled again).
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
OUT=${STAGEFS_DEB_DIR:-$REPO/build/deb}
SRC=$OUT/stagefs
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

say() { printf 'mkdeb: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

for c in dpkg-buildpackage dh; do
	command -v $c >/dev/null ||
		die "$c not found: apt-get install dpkg-dev debhelper dh-python (or ./configure --install-deps)"
done

# the version is VERSION's, and the changelog must say so
version=$(sed -n 1p "$REPO/VERSION")
clver=$(dpkg-parsechangelog -l "$REPO/debian/changelog" -S Version) ||
	die "cannot read debian/changelog"
[[ $clver == "$version" ]] ||
	die "debian/changelog is at $clver, VERSION at $version: add a changelog entry (dch -v $version)"

# The files to copy, one a line, relative to $REPO.
source_files() {
	if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git -C "$REPO" ls-files -co --exclude-standard |
		while IFS= read -r f; do
			[[ -f $REPO/$f || -L $REPO/$f ]] && printf '%s\n' "$f"
		done
	else
		(cd "$REPO" && find . -path ./build -prune -o -path ./.sanitize -prune -o \
			-path ./tests/out -prune -o -type f -print | sed 's|^\./||')
	fi
}

t0=$SECONDS
seed=${STAGEFS_DEB_SEED:-}
if [[ -n $seed && ! -e $SRC && -d $seed/stagefs && -f $seed/.recipe && -f $seed/.version ]]; then
	mkdir -p "$OUT" || die "cannot create $OUT"
	cp -a "$seed/stagefs" "$SRC" && cp -p "$seed/.recipe" "$seed/.version" "$OUT/" ||
		die "cannot copy the build in $seed to $SRC"
	say "starting from the build in $seed"
fi
mkdir -p "$SRC" || die "cannot create $SRC"
# the build's time is the copy's: a file edited while it runs is newer
touch "$OUT/.building"
list=$OUT/.files new=$(mktemp) || die "mktemp failed"
source_files >"$new" || die "listing the tree failed"
# Up to date: the same files as the last good build, none newer than it
# (mtimes: a file edited, checked out or copied in is newer), the same
# recipe (below): the packages of that build stand, lintian's verdict too.
fresh=0
if [[ -f $OUT/.built && -f $list ]] && cmp -s <(sort "$list") <(sort "$new"); then
	fresh=1
	while IFS= read -r f; do
		if [[ $REPO/$f -nt $OUT/.built ]]; then fresh=0; break; fi
	done <"$new"
fi
# files gone from the tree go from the copy (the Makefile uses wildcards)
if [[ -f $list ]]; then
	comm -23 <(sort "$list") <(sort "$new") |
	while IFS= read -r f; do rm -f -- "$SRC/$f"; done
fi
# a file the tree does not list (a build output) is kept: it is the copy's build
tar -C "$REPO" --verbatim-files-from -T "$new" -cf - | tar -C "$SRC" -xpf - ||
	die "copying the tree to $SRC failed"
mv "$new" "$list"
if [[ -n ${STAGEFS_DEB_VERSION:-} ]]; then
	[[ $STAGEFS_DEB_VERSION =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] ||
		die "STAGEFS_DEB_VERSION=$STAGEFS_DEB_VERSION is not a Debian version"
	printf '%s\n' "$STAGEFS_DEB_VERSION" >"$SRC/VERSION"
	# the tree's top entry's maintainer, its date + 1 day (lintian wants a
	# later one): the same file each run
	cldate=$(dpkg-parsechangelog -l "$REPO/debian/changelog" -S Date)
	cldate=$(LC_ALL=C date -R -u -d "$cldate + 1 day") || die "cannot read the changelog's date"
	{
		printf 'stagefs (%s) unstable; urgency=medium\n\n' "$STAGEFS_DEB_VERSION"
		printf '  * Built as %s from the tree at %s (STAGEFS_DEB_VERSION).\n\n' \
			"$STAGEFS_DEB_VERSION" "$version"
		printf ' -- %s  %s\n\n' "$(dpkg-parsechangelog -l "$REPO/debian/changelog" -S Maintainer)" \
			"$cldate"
		cat "$REPO/debian/changelog"
	} >"$SRC/debian/changelog" || die "cannot write $SRC/debian/changelog"
fi

profiles=${DEB_BUILD_PROFILES:-}
if [[ -d $SRC/slurm && -e /usr/include/slurm/spank.h && " $profiles " != *" pkg.stagefs.slurm "* ]]; then
	profiles="${profiles:+$profiles }pkg.stagefs.slurm"
fi
# Objects depend on their sources, config.h and version.h, not on the
# flags: a change of the build's recipe or flags starts the copy's build
# afresh.  The version is not part of the recipe: configure writes it to
# version.h, which make follows.
recipe=$( (cat "$SRC/Makefile" "$SRC/configure" "$SRC/debian/rules"
	   echo "$profiles ${DEB_BUILD_OPTIONS:-}"; dpkg-buildflags --export=sh) | sha256sum)
debver=${STAGEFS_DEB_VERSION:-$version}
if [[ $fresh == 1 && -f $OUT/.recipe && $(cat "$OUT/.recipe") == "$recipe" ]] &&
   [[ -f $OUT/.version && $(cat "$OUT/.version") == "$debver" ]] &&
   ls "$OUT"/stagefs_*.changes >/dev/null 2>&1; then
	say "up to date: nothing changed since the packages were built"
	cat "$OUT/lintian.log" >&2 2>/dev/null
	[[ ! -f $OUT/lintian.log ]] || say "lintian: no errors (as built)"
	ls "$OUT"/*.deb
	exit 0
fi
rm -f "$OUT/.built"
if [[ ! -f $OUT/.recipe || $(cat "$OUT/.recipe") != "$recipe" ]]; then
	say "new build recipe or flags: building from clean"
	make -s -C "$SRC" distclean >/dev/null 2>&1
	rm -rf "$SRC/debian/.debhelper" "$SRC"/debian/*.debhelper* "$SRC/debian/tmp" "$SRC/debian/files"
fi
# debian/files lists the packages built, each with its version, for
# dpkg-genchanges: a build as another version starts it afresh
if [[ ! -f $OUT/.version || $(cat "$OUT/.version") != "$debver" ]]; then
	rm -f "$SRC/debian/files"
fi
# dh skips configure and build after a build stamp: run them each time
# (configure keeps config.h when nothing changed, make rebuilds what did)
rm -f "$SRC/debian/debhelper-build-stamp" "$SRC"/debian/*.debhelper.log
rm -f "$OUT/.recipe" "$OUT/.version" "$OUT"/*.deb "$OUT"/*.ddeb "$OUT"/*.changes "$OUT"/*.buildinfo
say "building in $SRC${profiles:+ (profiles: $profiles)}"
(cd "$SRC" && DEB_BUILD_PROFILES=$profiles DEB_BUILD_OPTIONS="parallel=$JOBS ${DEB_BUILD_OPTIONS:-}" \
	dpkg-buildpackage -b -uc -us --no-pre-clean) >"$OUT/build.log" 2>&1 || {
	tail -n 40 "$OUT/build.log" >&2
	die "dpkg-buildpackage failed (the whole log: $OUT/build.log)"
}
printf '%s\n' "$recipe" >"$OUT/.recipe"
printf '%s\n' "$debver" >"$OUT/.version"
say "built in $((SECONDS - t0)) s"

changes=$(ls "$OUT"/stagefs_*.changes 2>/dev/null | head -n 1)
[[ -n $changes ]] || die "no .changes file in $OUT"
if [[ ${LINTIAN:-1} != 0 ]] && command -v lintian >/dev/null; then
	t1=$SECONDS
	lintian --fail-on error "$changes" >"$OUT/lintian.log" 2>&1
	rc=$?
	cat "$OUT/lintian.log" >&2
	((rc == 0)) || die "lintian reports errors ($OUT/lintian.log)"
	say "lintian: no errors ($((SECONDS - t1)) s)"
elif [[ ${LINTIAN:-1} != 0 ]]; then
	say "lintian not installed: the packages are not checked"
fi
# a run with LINTIAN=0 leaves no verdict: the next one checks again
if [[ ${LINTIAN:-1} != 0 ]]; then mv "$OUT/.building" "$OUT/.built"; else rm -f "$OUT/lintian.log"; fi
ls "$OUT"/*.deb
