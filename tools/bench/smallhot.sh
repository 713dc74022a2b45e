#!/usr/bin/env bash
# tools/bench/smallhot.sh - smallhot: small files with the page cache hot
# SPDX-License-Identifier: Apache-2.0
#
#   smallhot     smallfiles with the page cache hot (both sides read once first):
#                default, passthrough=off (no-open) and the daemon path with OPEN
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

bench_source smallfiles

bench_smallhot() {
	local n mode label
	hdr smallhot "$SMALL_N files of $SMALL_KB KiB, shuffled, page cache hot (read once first on both sides)"
	small_prepare || { failed "preparing: $(rb_why)"; return; }
	row "" "cache files" "mount" "ratio"
	for n in $READERS; do
		for mode in "" "passthrough=off" "passthrough=off,no_open=off"; do
			case $mode in
			"") label=default ;;
			passthrough=off) label="passthrough=off" ;;
			*) has_option no_open || continue; label="daemon path + OPEN" ;;
			esac
			measure_small "$mode" "$n" hot || { failed "$n readers, $label: $(rb_why)"; continue; }
			row "median of $ROUNDS, $n rd, $label" "$(fps "$S_DIRECT")" "$(fps "$S_FUSE")" "$S_RATIO"
			result "smallhot: $n rd, $label" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" ""
		done
	done
}
