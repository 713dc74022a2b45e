#!/usr/bin/env bash
# The GPU-machine check of issue 33 rehearsed here: device-prep.sh fills a carry folder, device-check.sh --rehearse runs from it to its end and writes its report.
# timeout: 150
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -x $REPO/tools/bench/gpubench ]] || skip "tools/bench/gpubench is not built (configure found no CUDA)"
[[ -x $REPO/tools/bench/readbench && -x $REPO/tests/helpers/uring_read ]] ||
	die "readbench or uring_read is not built (make all test-progs)"
command -v fusermount3 >/dev/null || skip "fusermount3 is missing"

# no packages: the suite reaches no archive, and this machine has the
# libraries (the full rehearsal, with them: docs/benchmarks.md)
"$REPO/tools/dev/device-prep.sh" --no-build --no-debs --dir "$TEST_TMPDIR/carry" >"$TEST_TMPDIR/prep.log" 2>&1 ||
	{ cat "$TEST_TMPDIR/prep.log"; die "device-prep.sh failed"; }
grep -q '^size ' "$TEST_TMPDIR/carry/MANIFEST" || die "no MANIFEST"

out=$TEST_TMPDIR/out
DC_LARGE_N=2 DC_LARGE_MB=16 DC_SMALL_N=300 DC_BIG_MB=64 BENCH_DIR=$TEST_TMPDIR \
	"$REPO/tools/bench/device-check.sh" --rehearse --budget 100 --carry "$TEST_TMPDIR/carry" --out "$out" ||
	die "device-check.sh exited $?"
r=$out/report.md
[[ -s $r ]] || die "no report"
for want in '^## Machine' '^/dev/fuse      yes' '^== gpu' 'skipped: GPU feed, cache on disk: --rehearse' \
	'tmpfs: staged 64 MiB, mounted' 'warm large, default.*, 16 rd' 'warm small, .*, 1 rd' \
	'cold small, 16 rd' 'accelerators at the pass line  *[0-9]' '^== summary' '^finished in [0-9]* s of a 100 s budget' \
	'^fusermount3    /' 'daemons killed after unmount  *0 '; do
	grep -q -- "$want" "$r" || die "the report lacks /$want/"
done
! grep -n 'FAILED' "$r" || die "a step failed (above); logs: $(tail -20 "$out/logs.txt")"
# nothing left behind: no mount, no daemon, no scratch directory
! grep -q "$TEST_TMPDIR/stagefs-devcheck" /proc/mounts || die "a mount was left"
! ls -d "$TEST_TMPDIR"/stagefs-devcheck.* 2>/dev/null || die "the scratch directory was left"
log "rehearsal passed"
