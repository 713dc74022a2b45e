#!/usr/bin/env bash
# The libFuzzer harnesses (tests/fuzz/: manifest reader, config loader, control messages, JSON, the peer protocol) replay their kept inputs and fuzz ~6 s each without a crash.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"

# FUZZ_SECONDS: per harness (default 6; tests/fuzz/run.sh by hand runs longer)
secs=${FUZZ_SECONDS:-6}
cc=${FUZZ_CC:-clang}
command -v "$cc" >/dev/null || skip "no $cc (the Debian package clang; ./configure --install-deps installs it)"
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n > 99; }\n' \
	>"$TEST_TMPDIR/probe.c"
"$cc" -fsanitize=fuzzer,address,undefined -o "$TEST_TMPDIR/probe" "$TEST_TMPDIR/probe.c" \
	>"$TEST_TMPDIR/probe.log" 2>&1 ||
	skip "$cc cannot link -fsanitize=fuzzer,address,undefined (libFuzzer: the Debian package libclang-rt-14-dev): $(tail -n 1 "$TEST_TMPDIR/probe.log")"

# the harnesses are built in the tree (make fuzz: tests/fuzz/obj/, ignored by git)
make -s -C "$REPO" -j"$(nproc)" fuzz FUZZ_CC="$cc" >"$TEST_TMPDIR/make.log" 2>&1 ||
	die "make fuzz failed: $(tail -n 20 "$TEST_TMPDIR/make.log")"
rc=0
FUZZ_WORK=$TEST_TMPDIR/work "$REPO/tests/fuzz/run.sh" "$secs" >"$TEST_TMPDIR/run.log" 2>&1 || rc=$?
cat "$TEST_TMPDIR/run.log"
if [[ $rc -ne 0 ]]; then
	for f in "$TEST_TMPDIR"/work/logs/*.log; do
		grep -q -E 'ERROR|runtime error' "$f" || continue
		echo "--- $f"
		grep -m 1 -B 5 -A 30 -E 'ERROR|runtime error' "$f" || true
	done
	die "a fuzzer crashed (rc=$rc); keep its input under tests/fuzz/corpus/HARNESS/ once fixed"
fi
n=$(grep -c 'no crash' "$TEST_TMPDIR/run.log" || true)
[[ $n -ge 4 ]] || die "expected 4 harnesses to run, $n did"
log "ok: $n harnesses, ${secs}s each, no crash"
