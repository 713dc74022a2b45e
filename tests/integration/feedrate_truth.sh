#!/usr/bin/env bash
# Feed-rate truth, DS-Analyzer's way: a reader measures its own bytes and its time blocked on data (cold, warm, mixed epochs) through every read path (passthrough as by default, exact with BPF and estimated, daemon path, no-open, FUSE over io_uring, the client library), and the daemon's per-job bytes (exact, or within 10 % where labelled estimated) and stall share (within 5 points) must agree.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
# FEED_PATHS="pt daemon ..." runs only those paths (debugging).
. "$(dirname "$0")/../lib.sh"
need_mount

READER=$REPO/tests/feedreader.py
LIB=$REPO/gpudirect/libstagefs.so
[[ -f $LIB ]] || die "$LIB is not built (make)"
export STAGEFS_LIB=$LIB
# a sanitizer build's library needs its runtime loaded first into Python
LIB_ENV=()
if ldd "$LIB" 2>/dev/null | contains libasan; then
	LIB_ENV=(LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0)
fi

T=$TEST_TMPDIR
K=1024 M=$((1024 * 1024))
# files: NF per epoch; epochs: cold = F[0, NF), warm = the same again,
# mixed = F[NF/2, NF/2 + NF): half of them warm, half cold.
NF=${FEED_FILES:-16}
SIZE=$((256 * K))
COMPUTE_MS=${FEED_COMPUTE_MS:-100}
# The client library pays a few ms per file to open a handle, set up its
# pinned pipeline and close it (warm, on this 2-vCPU VM): time the reader
# sees blocked that is no wait for data.  A longer step keeps that under
# the tolerance.
LIB_COMPUTE_MS=${FEED_LIB_COMPUTE_MS:-400}
# The backend cap makes a cold epoch lose a measurable share of its time:
# a reader borrows one second ahead of the cap, then waits for it.
RATE=$((M / 2))
mkdir -p "$T/src"
"$PYTHON" - "$T/src" $((2 * NF)) "$SIZE" <<'PY'
import os, random, sys
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(18)
for i in range(n):
    with open(os.path.join(d, "s%04d.bin" % i), "wb") as f:
        # sizes vary a little, so a count of files cannot pass for bytes
        f.write(rng.randbytes(size - rng.randrange(0, 4096)))
PY
mapfile -t ALL < <(cd "$T/src" && ls | sort)

# The uring path needs the kernel's switch; put it back afterwards.
HAVE_URING=
keep_uring_param && HAVE_URING=1

# check.py STATS READER JOB MODE WARM: compare the daemon's row of JOB in
# .stagefs/stats (a JSON file) with the reader's own figures.  What the
# reader lost waiting for data not in the cache is its time blocked in
# open/read/close beyond what the same calls cost it when every file was
# cached: WARM, the warm epoch's reader figures of the same path, gives
# that cost per file (local-disk reads after the page cache was dropped,
# FUSE round trips); on a loaded 2-vCPU VM it is a few ms a file.
cat >"$T/check.py" <<'PY'
import json, sys
stats, reader, job, mode, warm = sys.argv[1:6]
s = json.load(open(stats))
r = json.load(open(reader))
w = json.load(open(warm))
rows = [j for j in s["jobs"] if j["job"] == job]
if len(rows) != 1:
    sys.exit(f"{job}: {len(rows)} rows in .stagefs/stats jobs")
j = rows[0]
est = j.get("read_bytes_estimated", 0)
got, want = j["read_bytes"], r["bytes"]
stall_d = j["stall_ns"] / j["active_ns"] if j.get("active_ns") else None
warm_cost = w["blocked_ns"] / w["files"] * r["files"]
lost = max(0, r["blocked_ns"] - warm_cost)
stall_r = lost / r["wall_ns"]
print(f"{job}: reader {want} B, {r['files']} files, blocked {r['blocked_ns'] / 1e6:.0f} ms "
      f"({warm_cost / 1e6:.0f} ms of it warm cost) of {r['wall_ns'] / 1e6:.0f} ms: "
      f"stall {100 * stall_r:.1f}%; daemon {got} B ({est} estimated), files_read "
      f"{j['files_read']}, stall {'-' if stall_d is None else f'{100 * stall_d:.1f}%'} "
      f"({j['stall_ns'] / 1e6:.0f} of {j.get('active_ns', 0) / 1e6:.0f} ms), "
      f"hits {j['cache_hits']} misses {j['cache_misses']}")
bad = []
if mode == "exact":
    if est:
        bad.append(f"{est} bytes estimated where the count must be exact")
    if got != want:
        bad.append(f"read_bytes {got} != the reader's {want}")
else:
    if est == 0:
        bad.append("no bytes labelled estimated on an estimating path")
    if abs(got - want) > 0.10 * want:
        bad.append(f"read_bytes {got} not within 10% of the reader's {want}")
if j["files_read"] != r["files"]:
    bad.append(f"files_read {j['files_read']} != the reader's {r['files']}")
if stall_d is None:
    bad.append("no active time: the stall share is undefined")
elif abs(stall_d - stall_r) > 0.05:
    bad.append(f"stall {100 * stall_d:.1f}% not within 5 points of the reader's {100 * stall_r:.1f}%")
if bad:
    print("  " + "\n  ".join(bad))
    sys.exit(1)
PY

FAILS=0
# epoch PATH VIA PHASE FILES...: drop the page cache, read FILES as job
# PATH-PHASE, and keep the reader's figures and the daemon's once settled.
epoch() {
	local path=$1 via=$2 phase=$3 job="$1-$3" want
	shift 3
	drop_caches
	local args=()
	for f in "$@"; do args+=("$MNT/$f"); done
	local ms=$COMPUTE_MS env=()
	[[ $via == lib ]] && ms=$LIB_COMPUTE_MS env=("${LIB_ENV[@]}")
	env "${env[@]}" STAGEFS_JOB=$job "$PYTHON" "$READER" --via "$via" --compute-ms "$ms" \
		"${args[@]}" >"$T/$job.reader"
	want=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes"])' "$T/$job.reader")
	# RELEASE (and with it the last passthrough figures) reaches the daemon
	# after close() returned: wait until the row has settled.
	rm -f "$T/settle"
	wait_for -t 15 job_settled "$job" "$want" "$#" || log "$job: the daemon's row did not settle in 15 s"
	stats_dump "$MNT" >"$T/$job.stats"
}
# check PATH PHASE MODE
check() {
	local job="$1-$2"
	"$PYTHON" "$T/check.py" "$T/$job.stats" "$T/$job.reader" "$job" "$3" "$T/$1-warm.reader" ||
		FAILS=$((FAILS + 1))
}

# job_settled JOB WANT FILES: the row of JOB counts exactly WANT bytes, none
# estimated, in FILES files (nothing is left to come: every read and
# RELEASE is in), or has at least 90 % of WANT bytes and did not change
# since the previous call (estimated passthrough figures: RELEASE and the
# once-a-second drain come after close() returned).
job_settled() {
	local now
	now=$(stats_dump "$MNT" | "$PYTHON" -c '
import json, sys
s = json.load(sys.stdin)
want, files = int(sys.argv[2]), int(sys.argv[3])
rows = [j for j in s["jobs"] if j["job"] == sys.argv[1]]
if rows and rows[0]["read_bytes"] >= want * 0.9:
    j = rows[0]
    if (j["read_bytes"] == want and j["files_read"] == files and
            not j.get("read_bytes_estimated")):
        print("exact")
    else:
        print(j["read_bytes"], j.get("read_bytes_estimated", 0), j["files_read"],
              j.get("active_ns"), j["stall_ns"])
' "$1" "$2" "$3")
	[[ $now == exact ]] && return 0
	[[ -n $now && $now == "$(cat "$T/settle" 2>/dev/null)" ]] && return 0
	echo "$now" >"$T/settle"
	# estimated figures come with the once-a-second drain; the rest with
	# the reads and RELEASE
	local est
	read -r _ est _ <<<"$now"
	[[ -n $est && $est != 0 ]] && sleep 1.2 || sleep 0.3
	return 1
}

# three_epochs PATH VIA MODE_WARM: cold, warm, mixed on a fresh mount
three_epochs() {
	local path=$1 via=$2 warm=$3 half=$((NF / 2))
	epoch "$path" "$via" cold "${ALL[@]:0:NF}"
	epoch "$path" "$via" warm "${ALL[@]:0:NF}"
	epoch "$path" "$via" mixed "${ALL[@]:half:NF}"
	check "$path" cold exact
	check "$path" warm "$warm"
	check "$path" mixed "$warm"
}

MNT=$T/mnt
# run_path PATH VIA WARM OPTS...: mount with OPTS and read three epochs;
# WARM is how exact warm reads must be: exact, estimated, or acct (exact
# if the daemon says its passthrough accounting is bpf, else estimated).
run_path() {
	local path=$1 via=$2 warm=$3 acct
	shift 3
	[[ " ${FEED_PATHS:-pt ptbpf ptest daemon noopen uring lib} " == *" $path "* ]] || return 0
	rm -rf "$T/cache-$path"
	sfs_mount "dir://$T/src" "$MNT" chunk_size=1M backend_max_rate=$RATE \
		cache_dir="$T/cache-$path" lookup_readahead_max=0 "$@"
	acct=$(stats_dump "$MNT" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin).get("passthrough_accounting", "none"))')
	[[ $path == pt ]] && PT_ACCT=$acct
	log "--- $path ($*): passthrough accounting $acct"
	if [[ $warm == acct ]]; then
		[[ $acct == bpf ]] && warm=exact || {
			warm=estimated
			log "NOTE: the eBPF accounting is not in use here ($acct): warm passthrough reads are checked as estimated"
		}
	fi
	three_epochs "$path" "$via" "$warm"
	sfs_umount "$MNT"
}

# passthrough as configured by default (auto: exact where the kernel takes
# the cheap fentry hook, else estimated)
PT_ACCT=
run_path pt posix acct passthrough=on no_open=off uring=off passthrough_accounting=auto
# passthrough counted exactly, whatever hook it takes
if grep -q '^HAVE_BPF=y' "$REPO/config.mk" 2>/dev/null; then
	run_path ptbpf posix exact passthrough=on no_open=off uring=off passthrough_accounting=bpf
else
	log "SKIPPED the ptbpf path: this build has no BPF support (./configure says why)"
fi
# passthrough, estimated (the fallback), unless pt was just that
if [[ $PT_ACCT != estimate ]]; then
	run_path ptest posix estimated passthrough=on no_open=off uring=off passthrough_accounting=estimate
fi
# the daemon path
run_path daemon posix exact passthrough=off no_open=off uring=off
# no-open mode
run_path noopen posix exact passthrough=off no_open=on uring=off
# FUSE over io_uring
if [[ -n $HAVE_URING || " ${FEED_PATHS:-uring} " != *" uring "* ]]; then
	run_path uring posix exact passthrough=off no_open=off uring=on
else
	log "SKIPPED the uring path: $URING_PARAM is missing (this kernel has no FUSE over io_uring)"
fi
# the client library: cache files handed over, read through pinned buffers
# (its longer steps let the cap's tokens pile up: a lower cap keeps it cold)
RATE=$((M / 4)) run_path lib lib exact passthrough=off no_open=off uring=off

((FAILS == 0)) || die "$FAILS epochs disagree with their readers (above)"
log "every path agrees with its reader"
