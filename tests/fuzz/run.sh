#!/usr/bin/env bash
# Run the libFuzzer harnesses: tests/fuzz/run.sh [SECONDS] [HARNESS...]
# SPDX-License-Identifier: Apache-2.0
#
# Builds them (make fuzz), writes the seed corpora from real inputs
# (tests/fuzz/mkseeds.sh), replays the kept regression inputs of
# tests/fuzz/corpus/HARNESS/, then fuzzes each harness (default: all of
# tests/fuzz/fuzz_*) for SECONDS seconds (default 60), one after the other.
# New inputs collect in $FUZZ_WORK/corpus/HARNESS (default
# tests/fuzz/work), so a later run goes on from there; a crash leaves its
# input in $FUZZ_WORK/artifacts/ and the log in $FUZZ_WORK/logs/.
#
# Prints one line per harness: executions, seconds, corpus size, result.
# Exits 0 when nothing crashed, 1 otherwise.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SECS=${1:-60}
shift || true
WORK=${FUZZ_WORK:-$REPO/tests/fuzz/work}
if [[ $# -gt 0 ]]; then
	harnesses=("$@")
else
	harnesses=()
	for c in "$REPO"/tests/fuzz/fuzz_*.c; do
		h=$(basename "$c" .c)
		harnesses+=("${h#fuzz_}")
	done
fi
[[ $SECS =~ ^[0-9]+$ && $SECS -gt 0 ]] || { echo "run.sh: SECONDS must be a positive number" >&2; exit 2; }

make -s -C "$REPO" fuzz
mkdir -p "$WORK"/{corpus,artifacts,logs}
"$REPO/tests/fuzz/mkseeds.sh" "$WORK/seeds" | sed 's/^/  /'

failed=0
for h in "${harnesses[@]}"; do
	bin=$REPO/tests/fuzz/fuzz_$h
	keep=$REPO/tests/fuzz/corpus/$h
	log=$WORK/logs/$h.log
	mkdir -p "$WORK/corpus/$h"
	[[ -x $bin ]] || { echo "run.sh: no harness $bin" >&2; exit 2; }
	# the regression inputs first, each run once
	if [[ -d $keep ]] && compgen -G "$keep/*" >/dev/null; then
		if ! "$bin" -runs=0 "$keep"/* >"$WORK/logs/$h.regress.log" 2>&1; then
			echo "FAIL $h: a kept regression input crashes again (see $WORK/logs/$h.regress.log)"
			failed=1
			continue
		fi
	fi
	dirs=("$WORK/corpus/$h")
	[[ -d $WORK/seeds/$h ]] && dirs+=("$WORK/seeds/$h")
	[[ -d $keep ]] && dirs+=("$keep")
	rc=0
	"$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
		-print_final_stats=1 -artifact_prefix="$WORK/artifacts/$h-" \
		"${dirs[@]}" >"$log" 2>&1 || rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	ncorp=$(find "$WORK/corpus/$h" -type f | wc -l)
	if [[ $rc -eq 0 ]]; then
		printf '%-9s %10s executions in %ss, corpus %s: no crash\n' "$h" "${runs:-?}" "$SECS" "$ncorp"
	else
		printf '%-9s %10s executions: CRASH (rc=%d), input in %s, log %s\n' "$h" "${runs:-?}" \
			"$rc" "$(ls -t "$WORK/artifacts/$h-"* 2>/dev/null | head -n 1)" "$log"
		grep -m 5 -E 'ERROR|SUMMARY|runtime error' "$log" | sed 's/^/    /' || true
		failed=1
	fi
done
exit $failed
