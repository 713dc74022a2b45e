#!/usr/bin/env bash
# The man pages (man/*.scd) build with scdoc and render with no groff warning; every option each program's --help lists (stagefs and its subcommands: flags and settings) and every subcommand is in its page, so the pages cannot lag the code.
# timeout: 60
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
command -v scdoc >/dev/null || skip "no scdoc (Debian package scdoc)"
command -v groff >/dev/null || skip "no groff (Debian package groff-base)"
need_stagefs
T=$TEST_TMPDIR
bindir=$(dirname "$STAGEFS")

n=0
for scd in "$REPO"/man/*.scd; do
	page=$(basename "$scd" .scd)
	scdoc <"$scd" >"$T/$page" || die "scdoc failed on man/$page.scd"
	w=$(LC_ALL=C.UTF-8 groff -k -Tutf8 -man -ww -z "$T/$page" 2>&1) || die "groff failed on $page"
	[[ -z $w ]] || die "groff warns about $page: $w"
	# the rendered text, hyphenation off, for the option checks
	LC_ALL=C.UTF-8 MANWIDTH=200 groff -k -Tutf8 -man -rHY=0 -rLL=200n "$T/$page" 2>/dev/null |
		sed 's/\x1b\[[0-9;]*m//g; s/.\x08//g' >"$T/$page.txt"
	n=$((n + 1))
done
((n >= 9)) || die "only $n man pages in man/"
for p in stagefs.8 stagefs.conf.5 stagefs-publish.1 stagefs-gc.8 stagefs-warmup.1 stagefs-top.1 stagefs-quota.1 stagefs-restart.8 libstagefs.3; do
	[[ -s $T/$p.txt ]] || die "no man page $p"
done

# in_page PAGE WORD: WORD appears in PAGE's text as a word of its own
in_page() { grep -qE -- "(^|[^A-Za-z0-9_-])$2([^A-Za-z0-9_-]|$)" "$T/$1.txt"; }

# options_of HELP: the -x and --long options a --help text lists
options_of() { grep -oE -- '(^|[ ,[])--?[A-Za-z0-9][A-Za-z0-9-]*' <<<"$1" | sed 's/^[ ,[]//' | sort -u; }

checked=0
help=$("$STAGEFS" --help)
for o in $(options_of "$(sed -n '/^options:/,/^settings/p' <<<"$help")"); do
	in_page stagefs.8 "$o" || die "stagefs --help lists $o; stagefs(8) does not"
	checked=$((checked + 1))
done
for s in $(sed -n 's/^    -o \([a-z_0-9]*\)=.*/\1/p' <<<"$help"); do
	in_page stagefs.8 "$s" || die "setting $s (stagefs --help) is not in stagefs(8)"
	in_page stagefs.conf.5 "$s" || die "setting $s (stagefs --help) is not in stagefs.conf(5)"
	checked=$((checked + 1))
done
for c in $(sed -n '/^commands:/,/^$/s/^    \([a-z]*\) .*/\1/p' <<<"$help"); do
	in_page stagefs.8 "$c" || die "command $c (stagefs --help) is not in stagefs(8)"
	sec=1; [[ $c == gc || $c == restart ]] && sec=8
	[[ -s $T/stagefs-$c.$sec.txt ]] || die "command $c has no page stagefs-$c($sec)"
	h=$("$bindir/stagefs-$c" --help) || die "stagefs-$c --help failed"
	for o in $(options_of "$h"); do
		in_page "stagefs-$c.$sec" "$o" || die "stagefs $c --help lists $o; stagefs-$c($sec) does not"
		checked=$((checked + 1))
	done
done
# the library's functions
for f in $(grep -oE '^[a-z].*\b(sfs_[a-z_]+)\(' "$REPO/gpudirect/libstagefs.h" | grep -oE 'sfs_[a-z_]+' | sort -u); do
	in_page libstagefs.3 "$f" || die "libstagefs.h declares $f; libstagefs(3) does not describe it"
	checked=$((checked + 1))
done
log "$n pages render cleanly; $checked options, settings and functions found in them"
