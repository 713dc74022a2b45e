#!/usr/bin/env bash
# sanitize.sh: the test suite under AddressSanitizer, LeakSanitizer and UBSan.
# SPDX-License-Identifier: Apache-2.0
#
#   tests/sanitize.sh                the whole suite (make check-sanitizers)
#   tests/sanitize.sh tree erofs     just these (names as tests/run.sh takes them)
#   tests/sanitize.sh --unit         only the unit tests (what `make check` adds)
#
# The sanitizer build (./configure --enable-sanitizers) lives in a copy of
# the tree, $STAGEFS_SANITIZE_DIR (default .sanitize/ in the repository,
# ignored by git), so the normal build is never touched.  Each run brings
# the copy up to date with the working tree (the files git lists: tracked
# and untracked, not ignored; their mtimes kept, so make rebuilds only what
# changed; without git the copy is made afresh) and builds what it runs.
# The tests run through the copy's tests/run.sh, which fails a test on any
# sanitizer report from any of its processes and gives LeakSanitizer
# tests/lsan.supp (see docs/testing.md, "Sanitizers").
#
# Environment: what tests/run.sh takes (STAGEFS_TEST_OUT defaults to
# tests/out/sanitize here; STAGEFS is ignored: the copy's binary is tested),
# CC (the compiler, default gcc), JOBS (make -j, default: the CPU count).
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
BUILD=${STAGEFS_SANITIZE_DIR:-$REPO/.sanitize}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

say() { printf 'sanitize.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# The files to copy, one a line, relative to $REPO; empty without git.
source_files() {
	git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1 || return 0
	git -C "$REPO" ls-files -co --exclude-standard |
	while IFS= read -r f; do
		# a tracked file deleted in the working tree is not copied
		[[ -f $REPO/$f || -L $REPO/$f ]] && printf '%s\n' "$f"
	done
}

# Bring $BUILD up to date with the working tree.
sync_tree() {
	local list=$BUILD/.sanitize-files new
	mkdir -p "$BUILD" || die "cannot create $BUILD"
	new=$(mktemp) || die "mktemp failed"
	source_files >"$new" || die "git ls-files failed"
	if [[ -s $new ]]; then
		# files gone from the tree go from the copy (the Makefile uses wildcards)
		if [[ -f $list ]]; then
			comm -23 <(sort "$list") <(sort "$new") |
			while IFS= read -r f; do rm -f -- "$BUILD/$f"; done
		fi
		tar -C "$REPO" --verbatim-files-from -T "$new" -cf - |
			tar -C "$BUILD" -xpf - || die "copying the tree to $BUILD failed"
		mv "$new" "$list"
	else
		# no git: a fresh copy, without the build outputs
		rm -f "$new"
		say "no git work tree: copying $REPO afresh"
		rm -rf --one-file-system "${BUILD:?}"
		mkdir -p "$BUILD"
		tar -C "$REPO" --exclude=./.sanitize --exclude=./tests/out -cf - . |
			tar -C "$BUILD" -xpf - || die "copying the tree to $BUILD failed"
		rm -f "$BUILD/config.mk" "$BUILD/config.h" "$BUILD/version.h"
		make -s -C "$BUILD" clean >/dev/null 2>&1
	fi
}

configure() {
	if [[ -f $BUILD/config.mk && $BUILD/config.mk -nt $BUILD/configure ]] &&
	   grep -q '^SANFLAGS=-fsanitize' "$BUILD/config.mk"; then
		return 0
	fi
	say "configuring $BUILD with --enable-sanitizers"
	(cd "$BUILD" && ./configure --enable-sanitizers >/dev/null) ||
		die "./configure --enable-sanitizers failed (see $BUILD/config.log)"
}

main() {
	local unit=0 t0 targets=() tests=() f
	if [[ ${1:-} == -h || ${1:-} == --help ]]; then
		sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
	fi
	if [[ ${1:-} == --unit ]]; then
		unit=1
		shift
	fi
	t0=$SECONDS
	sync_tree
	configure
	if ((unit)); then
		for f in "$BUILD"/tests/unit/test_*.c; do
			targets+=("tests/unit/$(basename "$f" .c)")
			tests+=("${f%.c}")	# absolute: not the working tree's build
		done
	else
		targets=(test-progs)
		tests=("$@")
	fi
	say "building ${targets[*]} in $BUILD (make -j$JOBS)"
	make -s -C "$BUILD" -j"$JOBS" "${targets[@]}" || die "the sanitizer build failed"
	say "built in $((SECONDS - t0)) s; running the tests"
	unset STAGEFS
	STAGEFS_TEST_OUT=${STAGEFS_TEST_OUT:-$REPO/tests/out/sanitize} \
		exec "$BUILD/tests/run.sh" "${tests[@]}"
}

main "$@"
