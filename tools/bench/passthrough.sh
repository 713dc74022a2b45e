#!/usr/bin/env bash
# tools/bench/passthrough.sh - passthrough: warm and smallfiles with passthrough=off vs the default
# SPDX-License-Identifier: Apache-2.0
#
#   passthrough  warm + smallfiles with -o passthrough=off (no-open mode where the
#                daemon has it), with passthrough=off,no_open=off (the daemon path
#                with OPEN), and with the default
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

bench_source warm smallfiles

bench_passthrough() {
	local n off
	hdr passthrough "warm and smallfiles, -o passthrough=off vs the default"
	if ! has_option passthrough; then
		row "warm, smallfiles" "n/a" "" ""
		skipped "n/a: ./stagefs has no passthrough option yet"
		return
	fi
	warm_prepare || { failed "preparing: $(rb_why)"; return; }
	small_prepare || { failed "preparing: $(rb_why)"; return; }
	row "ratio to direct" "passthrough=off" "default" "default/off"
	if measure_warm "passthrough=off"; then
		off=$W_RATIO
		result "passthrough: warm, off" "$(mbs "$W_FUSE")" "$(mbs "$W_DIRECT")" "$off" ""
		if measure_warm ""; then
			row "warm ${BIG_MB}M sequential" "$off" "$W_RATIO" "$(ratio "$W_RATIO" "$off")"
			result "passthrough: warm, default" "$(mbs "$W_FUSE")" "$(mbs "$W_DIRECT")" "$W_RATIO" ">=0.9"
		else
			failed "warm, default: $(rb_why)"
		fi
	else
		failed "warm, passthrough=off: $(rb_why)"
	fi
	for n in $READERS; do
		if measure_small "passthrough=off" "$n"; then
			off=$S_RATIO
			result "passthrough: small $n rd, off$(has_option no_open && echo ' (no-open)')" \
				"$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$off" ">=0.75"
		else
			failed "smallfiles $n readers, passthrough=off: $(rb_why)"
			off=0
		fi
		if has_option no_open; then
			if measure_small "passthrough=off,no_open=off" "$n"; then
				result "passthrough: small $n rd, off + OPEN" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" ">=0.75"
			else
				failed "smallfiles $n readers, passthrough=off,no_open=off: $(rb_why)"
			fi
		fi
		if measure_small "" "$n"; then
			row "smallfiles, $n readers" "$off" "$S_RATIO" "$(ratio "$S_RATIO" "$off")"
			result "passthrough: small $n rd, default" "$(fps "$S_FUSE")" "$(fps "$S_DIRECT")" "$S_RATIO" ">=0.9"
		else
			failed "smallfiles $n readers, default: $(rb_why)"
		fi
	done
}
