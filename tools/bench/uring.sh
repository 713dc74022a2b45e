#!/usr/bin/env bash
# tools/bench/uring.sh - uring: FUSE over io_uring (-o uring=on) against /dev/fuse (uring=off)
# SPDX-License-Identifier: Apache-2.0
#
#   uring        warm (daemon path) and smallfiles (default, and the daemon path
#                with OPEN) with -o uring=on / uring=off: FUSE over io_uring against
#                /dev/fuse; sets fuse.enable_uring for the run, restores it after
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

bench_source warm smallfiles

bench_uring() {
	local n mode label off param=/sys/module/fuse/parameters/enable_uring orig
	hdr uring "-o uring=on vs uring=off: warm daemon path, small files"
	if ! has_option uring || [ ! -w "$param" ]; then
		row "warm, smallfiles" "n/a" "" ""
		skipped "n/a: no uring option, or no $param"
		return
	fi
	warm_prepare || { failed "preparing: $(rb_why)"; return; }
	small_prepare || { failed "preparing: $(rb_why)"; return; }
	orig=$(cat "$param")
	row "ratio to direct" "uring=off" "uring=on" "on/off"
	mode="passthrough=off,no_open=off"
	if measure_warm "$mode,uring=off"; then
		off=$W_RATIO
		if measure_warm "$mode,uring=on"; then
			row "warm ${BIG_MB}M, daemon path" "$off" "$W_RATIO" "$(ratio "$W_RATIO" "$off")"
			result "uring: warm, daemon path, on" "$(mbs "$W_FUSE")" "$(mbs "$W_DIRECT")" "$W_RATIO" ""
			result "uring: warm, daemon path, off" "" "" "$off" ""
		else
			failed "warm, uring=on: $(rb_why)"
		fi
	else
		failed "warm, uring=off: $(rb_why)"
	fi
	for n in $READERS; do
		for mode in "" "passthrough=off,no_open=off"; do
			label=${mode:+daemon path + OPEN}
			label=${label:-default}
			measure_small "${mode:+$mode,}uring=off" "$n" || { failed "$n rd, $label, off: $(rb_why)"; continue; }
			off=$S_RATIO
			measure_small "${mode:+$mode,}uring=on" "$n" || { failed "$n rd, $label, on: $(rb_why)"; continue; }
			row "small, $n rd, $label" "$off" "$S_RATIO" "$(ratio "$S_RATIO" "$off")"
			result "uring: small $n rd, $label, on" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" ""
			result "uring: small $n rd, $label, off" "" "" "$off" ""
		done
	done
	echo "$orig" >"$param"
}
