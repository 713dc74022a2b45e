#!/usr/bin/env bash
# A 1 M-entry manifest (tests/helpers/manifest_scale): built within 150 B per entry, mapped in under 1 s, every entry listed and read with under 30 B per entry of anonymous memory (the mapped file is page cache), every part verified good.
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"

helper=$REPO/tests/helpers/manifest_scale
[[ -x $helper ]] || die "$helper is not built (make test-progs)"
N=${MANIFEST_SCALE_N:-1000000}
# a sanitizer build's shadow memory and redzones are not the builder's
san=0
ldd "$helper" 2>/dev/null | contains -E 'lib(asan|clang_rt\.asan)' && san=1

out=$("$helper" "$N" "$TEST_TMPDIR/m.manifest") || die "manifest_scale $N failed: $out"
log "$out"
rm -f "$TEST_TMPDIR/m.manifest"
"$PYTHON" - "$out" "$N" "$san" <<'PY' || die "out of bounds: $out"
import json, sys
d, n, san = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
bad = []
if d["walked"] != n:
    bad.append(f"walked {d['walked']} of {n} files")
if d["open_ms"] >= 1000 * (5 if san else 1):
    bad.append(f"open took {d['open_ms']} ms")
anon = d["after_walk_anon_kib"] * 1024 / d["entries"]
if anon > 30 and not san:
    bad.append(f"{anon:.1f} B of anonymous memory per entry after the walk")
if d["builder_peak_b_per_entry"] > 150 and not san:
    bad.append(f"the builder peaked at {d['builder_peak_b_per_entry']} B per entry")
if d["verify_bad_parts"]:
    bad.append("manifest_verify found bad parts")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
