#!/usr/bin/env bash
# tools/bench/aubench through a dir:// mount: samples and bytes read match the generated files for each workload, AU in [0,1], stagefs's job bytes match, a long run (-R) runs its steps and the steady-state AU is consistent, read with the client library (-g -1) the same, a wrong-sized file is an error, the search and its -H handshake are consistent.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
AUB=$REPO/tools/bench/aubench
[[ -x $AUB ]] || die "$AUB is not built (run make)"

T=$TEST_TMPDIR
src=$T/src mnt=$T/mnt
mkdir -p "$src"
# tiny datasets: unet3d samples 146.6 KB (1/1000), 40 files; resnet50
# records of 20 samples of 11,470 bytes, 10 files; cosmoflow 61 files of
# 28,300 bytes (an odd count: one file is left over each epoch)
"$AUB" gen -w unet3d -N 40 -z 1000 "$src" >"$T/gen.unet3d"
"$AUB" gen -w resnet50 -N 10 -k 20 -z 10 "$src" >"$T/gen.resnet50"
"$AUB" gen -w cosmoflow -N 61 -z 100 "$src" >"$T/gen.cosmoflow"
for f in "$src"/unet3d/*; do assert_eq "$(stat -c %s "$f")" 146600 "size of $f"; done
assert_eq "$(ls "$src/resnet50" | wc -l)" 10 "resnet50 record files"
assert_eq "$(stat -c %s "$src/resnet50/record_000003.tfrecord")" 229400 "record file size"
# every file's bytes differ (a content-addressed cache must not dedupe them)
assert_eq "$(md5sum "$src"/cosmoflow/* | cut -d' ' -f1 | sort -u | wc -l)" 61 "distinct cosmoflow files"

# passthrough=off and -D (page cache dropped before each epoch): the daemon
# sees every read, so its job row counts every byte the tool read
sfs_mount "dir://$src" "$mnt" passthrough=off

# check.py JSON SAMPLES BYTES N: the run's accounting against what the
# files and the dealing give (computed here, not taken from the tool)
cat >"$T/check.py" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
want_samples, want_bytes, want_n = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def fail(m):
    sys.exit("%s: %s" % (m, sys.argv[1]))
if r["n"] != want_n:
    fail("ran %d accelerators, want %d" % (r["n"], want_n))
if r["errors"]:
    fail("read errors")
if r["samples"] != want_samples or r["samples_expected"] != want_samples:
    fail("samples %d (tool expected %d), want %d" % (r["samples"], r["samples_expected"], want_samples))
if r["bytes"] != want_bytes or r["bytes_expected"] != want_bytes:
    fail("bytes %d (tool expected %d), want %d" % (r["bytes"], r["bytes_expected"], want_bytes))
if not (0 <= r["au_min"] <= r["au"] <= 1):
    fail("AU out of [0, 1]")
# AU is compute over wall: the compute is steps x compute time per batch
steps = want_samples // r["batch"]
if abs(r["compute_s"] - steps * r["compute"] * r["scale"]) > 1e-6 * steps:
    fail("compute_s is not steps x compute x scale")
if r["compute_s"] / r["n"] > r["wall_s"] * 1.001:
    fail("more compute than wall time")
if r["decided_by"] not in ("au", "au_steady"):
    fail("decided_by names no AU")
if r["passed"] != (r[r["decided_by"]] >= r["pass"]):
    fail("passed disagrees with the deciding AU and pass")
if len(r["epoch_au"]) != r["epochs"]:
    fail("epoch_au has not one entry an epoch")
# every accelerator runs as many steps: the samples over N batches
if r["steps"] * r["n"] * r["batch"] != want_samples:
    fail("steps is not each accelerator's share of the samples in batches")
if r["steps"] < r["min_run_steps"]:
    fail("fewer steps than -R asked")
# the steady state: the same compute over the wall time less each epoch's
# first-batch wait, per accelerator: so never below au (nor its min below
# au_min), and never above 1 (the waits and the compute take turns)
if not (0 <= r["au_steady_min"] <= r["au_steady"] <= 1):
    fail("au_steady out of [0, 1]")
if r["au_steady"] < r["au"] or r["au_steady_min"] < r["au_min"]:
    fail("leaving out the first-batch waits lowered AU")
# the first-batch waits are some of the waits (wait_s has 3 decimals)
if not (0 <= r["first_wait_s"] <= r["wait_s"] + 0.001):
    fail("first_wait_s not within [0, wait_s]")
PY

# job_bytes JOB: read_bytes of that job in the mount's stats
job_bytes() {
	stats_dump "$mnt" | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(j["read_bytes"] for j in d["jobs"] if j["job"] == sys.argv[1]))' "$1"
}

# run NAME SAMPLES BYTES N ARGS...: one run of N accelerators through the
# mount, checked
run() {
	local name=$1 samples=$2 bytes=$3 n=$4 out
	shift 4
	out=$(STAGEFS_JOB=au-$name "$AUB" run -n "$n" "$@" "$mnt") || die "aubench run $*: exit $?"
	log "$name: $out"
	printf '%s\n' "$out" >"$T/out.$name"
	"$PYTHON" "$T/check.py" "$out" "$samples" "$bytes" "$n" || die "$name accounting"
	# (files read whole only: of a file read in part the kernel's
	# readahead fetches more than the reader asked for; and a run without
	# -D reads some from the page cache)
	[[ ${PARTIAL:-}${LONG:-} ]] ||
		assert_eq "$(job_bytes "au-$name")" "$bytes" "$name: stagefs job read_bytes vs the tool's bytes"
}

# unet3d: 40 files, 2 accelerators, batch 2: 20 files each, 10 steps,
# 2 epochs: 80 samples of 146,600 bytes
run unet3d 80 $((80 * 146600)) 2 -w unet3d -b 2 -c 0.001 -e 2 -D
# resnet50: 10 records of 20 samples, 2 accelerators, batch 10: 5 records
# each = 100 samples = 10 steps; 3 epochs: 600 samples of 11,470 bytes
run resnet50 600 $((600 * 11470)) 2 -w resnet50 -k 20 -b 10 -c 0.001 -e 3 -D
# cosmoflow: 61 files, 3 accelerators (21, 20, 20 files), batch 1: every
# accelerator runs as many steps, 20 (the one dealt 21 leaves one unread):
# 60 samples an epoch
run cosmoflow $((2 * 60)) $((2 * 60 * 28300)) 3 -w cosmoflow -b 1 -c 0.0005 -e 2 -D
# resnet50 again, 3 accelerators: 4, 3, 3 records of 20 = 60 samples each,
# batch 8: 7 steps each, 56 samples an epoch (a record read in part)
PARTIAL=1 run resnet50-3 $((2 * 3 * 56)) $((2 * 3 * 56 * 11470)) 3 -w resnet50 -k 20 -b 8 -c 0.001 -e 2 -D -M 1
# -g -1: each sample read with the client library (the cache file the
# daemon hands over, O_DIRECT, the pinned pipeline) into host memory: the
# same accounting, and the job's bytes from the library's reports
run resnet50-lib 600 $((600 * 11470)) 2 -w resnet50 -k 20 -b 10 -c 0.001 -e 3 -D -g -1
grep -q '"read_via": "libstagefs, host memory", "compute_via": "sleep"' "$T/out.resnet50-lib" ||
	die "-g -1: not read through the library: $(cat "$T/out.resnet50-lib")"
for r in "$T"/out.*; do
	"$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1])
sys.exit(r["min_run_steps"] != 0 or r["decided_by"] != "au")' "$(cat "$r")" ||
		die "without -R and -A: min_run_steps 0 and the whole run's AU deciding: $(cat "$r")"
done

# a long run (-R 500, what MLPerf Storage asks): cosmoflow's 20 steps an
# epoch (3 accelerators, batch 1) need 25 epochs, not -e 2; the pass line
# held against au_steady (-A).  No -D (25 cache drops are slow under
# load), so stagefs's job row is not compared: the page cache serves some
LONG=1 run cosmoflow-long $((25 * 60)) $((25 * 60 * 28300)) 3 -w cosmoflow -b 1 -c 0.0005 -e 2 -R 500 -A au_steady
"$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1])
assert r["epochs"] == 25 and r["steps"] == 500 and r["min_run_steps"] == 500, r
assert r["decided_by"] == "au_steady", r' "$(cat "$T/out.cosmoflow-long")" ||
	die "long run: want 25 epochs, 500 steps, decided by au_steady: $(cat "$T/out.cosmoflow-long")"
# more steps than 1024 epochs give: not run, a usage error
rc=0
"$AUB" run -w cosmoflow -n 3 -b 1 -c 0 -R 30000 "$mnt" >/dev/null 2>"$T/long.err" || rc=$?
assert_eq "$rc" 2 "exit status of -R beyond 1024 epochs"
grep -q 'fewer than 30000 (-R)' "$T/long.err" || die "-R beyond 1024 epochs: $(cat "$T/long.err")"

# a file that is not the listed size is an error, not a short sample
cp -r "$src/cosmoflow" "$T/bad"
mkdir -p "$T/badroot" && mv "$T/bad" "$T/badroot/cosmoflow"
truncate -s 28299 "$T/badroot/cosmoflow/sample_000007.tfrecord"
head -c 28301 /dev/zero >"$T/badroot/cosmoflow/sample_000009.tfrecord"
rc=0
out=$("$AUB" run -w cosmoflow -n 1 -b 1 -c 0 -e 1 -L "$src" "$T/badroot" 2>"$T/bad.err") || rc=$?
assert_eq "$rc" 1 "exit status with wrong-sized files"
"$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); sys.exit(r["errors"] != 2 or r["samples"] != 59)' "$out" ||
	die "wrong-sized files: want 2 errors and 59 samples: $out"
grep -q 'sample_000007' "$T/bad.err" || die "the short file is not named: $(cat "$T/bad.err")"
# the same through the client library (-g -1)
rc=0
out=$("$AUB" run -w cosmoflow -n 1 -b 1 -c 0 -e 1 -g -1 -L "$src" "$T/badroot" 2>"$T/bad.err") || rc=$?
assert_eq "$rc" 1 "exit status with wrong-sized files, -g -1"
"$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); sys.exit(r["errors"] != 2 or r["samples"] != 59)' "$out" ||
	die "wrong-sized files, -g -1: want 2 errors and 59 samples: $out"
grep -q 'sample_000009' "$T/bad.err" || die "the long file is not named (-g -1): $(cat "$T/bad.err")"

# the search: each trial's accounting holds, the result is the largest
# passing N next to the smallest failing one (or the cap), both tried
"$AUB" search -w cosmoflow -b 1 -c 0.002 -e 1 -m 12 -M 4 "$mnt" >"$T/search.out" || die "search failed"
log "search: $(tail -1 "$T/search.out")"
"$PYTHON" - "$T/search.out" <<'PY' || die "search result inconsistent"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
trials = [l for l in lines if "trial" in l]
res = [l for l in lines if "result" in l]
assert len(res) == 1 and lines[-1] is res[0], "one result, last"
res = res[0]
assert res["trials"] == len(trials), "trial count"
assert res["max_n"] == 12, "max_n: 61 files, 4 steps of 1 allow 15, -m caps at 12"
by_n = {}
for t in trials:
    assert t["errors"] == 0 and t["samples"] == t["samples_expected"] and t["bytes"] == t["bytes_expected"], t
    assert 0 <= t["au"] <= 1 and t["passed"] == (t["au"] >= t["pass"]), t
    assert t["decided_by"] == "au" and t["au"] <= t["au_steady"] <= 1 and t["first_wait_s"] >= 0, t
    assert t["n"] not in by_n, "N %d tried twice" % t["n"]
    by_n[t["n"]] = t
assert trials[0]["n"] == 12, "the first trial is at the cap"
assert res["decided_by"] == "au" and res["min_run_steps"] == 0, "without -A, -R: the whole run's AU decides"
n = res["n"]
if n:
    assert by_n[n]["passed"] and abs(by_n[n]["au"] - res["au"]) < 1e-4, "result N passed with its AU"
    assert abs(by_n[n]["au_steady"] - res["au_steady"]) < 1e-4, "result au_steady is that trial's"
    assert abs(by_n[n]["first_wait_s"] - res["first_wait_s"]) < 1e-4, "result first_wait_s is that trial's"
    assert by_n[n]["steps"] == res["steps"], "result steps are that trial's"
    assert abs(by_n[n]["mb_per_s"] - res["mb_per_s"]) < 0.1, "result MB/s is that trial's"
if res["fail_n"]:
    assert res["fail_n"] == n + 1 and not by_n[n + 1]["passed"], "the next N failed"
    assert abs(by_n[n + 1]["au_steady"] - res["fail_au_steady"]) < 1e-4, "fail_au_steady is that trial's"
else:
    assert n == res["max_n"], "no failure: the result is the cap"
# no passing N above the result, no failing N below it
assert all(t["n"] <= n for t in trials if t["passed"]), "a larger N passed"
assert all(t["n"] > n for t in trials if not t["passed"]), "a smaller N failed"
PY

# -H: the caller prepares each trial; "go S" counts S seconds of staging
# (-P 0: the trial passes, so there is exactly one)
coproc AUBH { "$AUB" search -H -w unet3d -b 2 -c 0.001 -e 1 -n 2 -m 2 -M 1 -P 0 "$mnt"; }
# bash closes a coprocess's descriptors once it exits, which it may do
# before its last line is read: read from copies made while it waits for "go"
pid=$AUBH_PID
exec {rfd}<&"${AUBH[0]}" {wfd}>&"${AUBH[1]}"
read -r line <&"$rfd"
[[ $line == "prepare 2" ]] || die "-H: expected 'prepare 2', got '$line'"
echo "go 0.25" >&"$wfd"
read -r trial <&"$rfd"
read -r result <&"$rfd"
wait "$pid" || die "search -H exited $?"
exec {rfd}<&- {wfd}>&-
"$PYTHON" -c '
import json, sys
t, r = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert t["staging_s"] == 0.25 and t["wall_s"] >= 0.25, t
assert t["au"] <= t["compute_s"] / t["n"] / t["wall_s"] + 1e-3, t
assert t["au"] <= t["au_steady"] <= 1 and t["first_wait_s"] >= 0, t
assert r["trials"] == 1 and r["n"] == 2, r' "$trial" "$result" || die "-H staging: $trial $result"

sfs_umount "$mnt"
log "ok"
