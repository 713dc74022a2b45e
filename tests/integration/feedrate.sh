#!/usr/bin/env bash
# Feed rate: files of known sizes read by two real users, one tagged STAGEFS_JOB=train42, give exact per-user and per-job bytes and files in .stagefs/stats, Prometheus (HTTP, file, .stagefs/metrics; promtool and prometheus_client parse it), stagefs top --once --json, and top's screen under tmux.
# timeout: 240
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
command -v runuser >/dev/null || skip "runuser is not installed"
command -v curl >/dev/null || skip "curl is not installed"
"$PYTHON" -c 'import prometheus_client' 2>/dev/null || skip "python3-prometheus-client is not installed"

A=sfs_alice B=sfs_bob
need_users $A $B

T=$TEST_TMPDIR
# the test users must reach the mount point
chmod 755 "$T" "$(dirname "$T")"
src=$T/src mnt=$T/mnt prom=$T/prom/stagefs.prom
mkdir -p "$src/a" "$src/b" "$T/prom"
# alice: edge sizes around the 1 MiB chunk, and an empty file (opened, never read)
a_sizes=(1 4095 4096 65537 1048576 1048577 3145735 0)
b_sizes=(10 200000 2097152 999999)
for i in "${!a_sizes[@]}"; do head -c "${a_sizes[$i]}" /dev/urandom >"$src/a/f$i"; done
for i in "${!b_sizes[@]}"; do head -c "${b_sizes[$i]}" /dev/urandom >"$src/b/g$i"; done
chmod -R a+rX "$src"

port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# no_open=off: this test counts opens (no-open mode has none: noopen.sh)
sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=off no_open=off \
	metrics_port="$port" metrics_file="$prom" metrics_interval=1s
[[ -f $prom ]] || die "metrics_file $prom was not written at mount"

# Readers: each file opened once and read to EOF in 64 KiB reads, then
# read again from 0 through the same open (a file counts once per open).
cat >"$T/reader.py" <<'PY'
import os, sys
for path in sys.argv[1:]:
    with open(path, "rb", buffering=0) as f:
        n = 0
        while True:
            b = f.read(65536)
            if not b:
                break
            n += len(b)
        f.seek(0)
        f.read(4096)
    assert n == os.path.getsize(path), path
PY
runuser -u $A -- env STAGEFS_JOB=train42 "$PYTHON" "$T/reader.py" "$mnt"/a/f*
runuser -u $B -- "$PYTHON" "$T/reader.py" "$mnt"/b/g*

sum() { local s=0 x; for x in "$@"; do s=$((s + x)); done; echo $s; }
nonzero() { local n=0 x; for x in "$@"; do ((x > 0)) && n=$((n + 1)); done; echo $n; }
cat >"$T/expect.json" <<EOF
{"$A": {"job": "train42", "read_bytes": $(sum "${a_sizes[@]}"), "files_read": $(nonzero "${a_sizes[@]}"), "opens": ${#a_sizes[@]}},
 "$B": {"job": null, "read_bytes": $(sum "${b_sizes[@]}"), "files_read": $(nonzero "${b_sizes[@]}"), "opens": ${#b_sizes[@]}}}
EOF
log "expected: $(cat "$T/expect.json")"

# check.py KIND FILE: compare one output with expect.json; prints what it saw.
cat >"$T/check.py" <<'PY'
import json, sys
kind, path, expect = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
fields = ("read_bytes", "files_read", "opens")

def fail(msg):
    sys.exit(f"{kind}: {msg}")

if kind in ("stats", "top"):
    d = json.load(open(path))
    node = d["node"]
    for f in fields:
        want = sum(e[f] for e in expect.values())
        if node[f] != want:
            fail(f"node {f} = {node[f]}, want {want}")
    users = {u["user"]: u for u in d["users"]}
    jobs = [j for j in d["jobs"]]
    procs = d["processes"]
    for user, e in expect.items():
        u = users.get(user) or fail(f"no user {user} in {list(users)}")
        mine = [j for j in jobs if j["user"] == user]
        for f in fields:
            if u[f] != e[f]:
                fail(f"user {user} {f} = {u[f]}, want {e[f]}")
            if sum(j[f] for j in mine) != e[f]:
                fail(f"jobs of {user}: {f} sums to {sum(j[f] for j in mine)}, want {e[f]}")
            if sum(p[f] for p in procs if p["user"] == user) != e[f]:
                fail(f"processes of {user}: {f} does not sum to {e[f]}")
        if e["job"]:
            if [j["job"] for j in mine] != [e["job"]]:
                fail(f"jobs of {user}: {[j['job'] for j in mine]}, want only {e['job']}")
        elif any(j["job"] == "train42" for j in mine):
            fail(f"{user} has a train42 job it never declared")
        if u["cache_misses"] < 1 or u["backend_bytes"] < 1 or u["stall_ns"] < 1:
            fail(f"user {user}: cold reads show no miss, backend bytes or stall: {u}")
        for w in ("1s", "10s", "60s"):
            if not isinstance(u["rates"][w]["read_bytes_per_s"], (int, float)):
                fail(f"user {user}: no {w} rate")
    print(f"{kind}: users {[(u, users[u]['read_bytes'], users[u]['files_read']) for u in expect]}, "
          f"jobs {[(j['user'], j['job'], j['read_bytes']) for j in jobs]}")
else:
    from prometheus_client.parser import text_string_to_metric_families
    text = open(path).read()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    names = {"read_bytes": "stagefs_read_bytes", "files_read": "stagefs_files_read",
             "opens": "stagefs_opens"}
    for want_fam in ("stagefs_read_bytes", "stagefs_files_read", "stagefs_cache_hits",
                     "stagefs_cache_misses", "stagefs_backend_bytes", "stagefs_stall_seconds",
                     "stagefs_gpu_bytes", "stagefs_cache_used_bytes", "stagefs_cache_limit_bytes",
                     # what an operator alerts on, from the daemon-wide table (fuse/vfiles.c)
                     "stagefs_backend_errors", "stagefs_backend_reads", "stagefs_corrupt_chunks",
                     "stagefs_evicted_chunks", "stagefs_bypass_reads", "stagefs_node_read_errors",
                     "stagefs_prefetch_errors", "stagefs_prefetch_queued", "stagefs_prefetch_inflight"):
        if want_fam not in fams:
            fail(f"no metric family {want_fam}: {sorted(fams)}")
    if fams["stagefs_read_bytes"].type != "counter":
        fail("stagefs_read_bytes_total is not a counter")
    if fams["stagefs_cache_used_bytes"].samples[0].value <= 0:
        fail("stagefs_cache_used_bytes is not positive")
    for user, e in expect.items():
        for f, fam in names.items():
            got = {s.labels["job"]: s.value for s in fams[fam].samples
                   if s.name == fam + "_total" and s.labels.get("user") == user}
            if sum(got.values()) != e[f]:
                fail(f"{fam}_total of {user}: {got}, want a sum of {e[f]}")
            if e["job"] and list(got) != [e["job"]]:
                fail(f"{fam}_total of {user}: jobs {list(got)}, want {e['job']}")
    print(f"{kind}: ok, {len(fams)} families")
PY
check() { "$PYTHON" "$T/check.py" "$1" "$2" "$T/expect.json" || die "$1 output is wrong (see above)"; }

stats_dump "$mnt" >"$T/stats.json"
check stats "$T/stats.json"

# Prometheus over HTTP: the content type, the text, parsed twice
curl -sS -D "$T/headers" -o "$T/http.prom" "http://127.0.0.1:$port/metrics"
grep -qi '^content-type: text/plain; version=0.0.4' "$T/headers" ||
	die "wrong content type: $(cat "$T/headers")"
check prom "$T/http.prom"
if command -v promtool >/dev/null; then
	promtool check metrics <"$T/http.prom" || die "promtool check metrics failed"
	log "promtool check metrics: ok"
else
	log "promtool is not installed (Debian package prometheus): only prometheus_client parsed the text"
fi
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/nothing")
assert_eq "$code" 404 "GET /nothing"
ss -Hltn "sport = :$port" | contains "127.0.0.1:$port" || die "metrics_port is not bound to 127.0.0.1"
! ss -Hltn "sport = :$port" | contains -v "127.0.0.1:$port" || die "metrics_port listens beyond 127.0.0.1"

# the textfile-collector file catches up within metrics_interval
file_ok() { "$PYTHON" "$T/check.py" prom "$prom" "$T/expect.json" >/dev/null 2>&1; }
wait_for -t 10 file_ok || check prom "$prom"
check prom "$prom"
cp "$mnt/.stagefs/metrics" "$T/vfile.prom"
check prom "$T/vfile.prom"

# stagefs top --once --json, and --once as text
"$STAGEFS" top --once --json "$mnt" >"$T/top.json"
check top "$T/top.json"
"$STAGEFS" top --once "$mnt" >"$T/top.txt"
for w in $A $B train42 feed; do grep -q "$w" "$T/top.txt" || die "stagefs top --once shows no $w: $(cat "$T/top.txt")"; done

# the live view under tmux: rows for both users and the job, then q restores the terminal
sock=$T/tmux.sock
tmux -S "$sock" new-session -d -s top -x 200 -y 50 "$STAGEFS top $mnt; echo top-exited-\$?; sleep 30"
screen_has() { tmux -S "$sock" capture-pane -p -t top | contains "$1"; }
for w in "$A" "$B" train42 "files/s"; do
	wait_for -t 10 screen_has "$w" || {
		tmux -S "$sock" capture-pane -p -t top >&2
		die "stagefs top's screen never showed $w"
	}
done
tmux -S "$sock" capture-pane -p -t top >"$T/screen.txt"
log "top screen: $(head -3 "$T/screen.txt")"
tmux -S "$sock" send-keys -t top q
wait_for -t 10 screen_has top-exited-0 || {
	tmux -S "$sock" capture-pane -p -t top >&2
	die "stagefs top did not exit 0 on q"
}
# back on the normal screen: top's rows are gone from view
screen_has train42 && die "the alternate screen was not left on exit"
tmux -S "$sock" kill-server

sfs_umount "$mnt"
[[ ! -e $prom ]] || die "metrics_file was left behind after unmount"

# Passthrough opens (where the kernel and privileges allow them): the reads
# bypass the daemon; they are counted exactly by the BPF hook, or as the
# file size at open, marked estimated.  f6 is fully cached by now.
for acct in auto estimate; do
	sfs_mount "dir://$src" "$mnt" chunk_size=1M passthrough=auto no_open=off \
		passthrough_accounting=$acct
	for i in 1 2; do
		drop_caches
		runuser -u $A -- env STAGEFS_JOB=train42 "$PYTHON" "$T/reader.py" "$mnt/a/f6"
	done
	stats_dump "$mnt" >"$T/stats2.json"
	cp "$mnt/.stagefs/metrics" "$T/pt.prom"
	"$PYTHON" - "$T/stats2.json" "$T/pt.prom" "$A" "${a_sizes[6]}" "$acct" <<'PY' ||
import json, sys
from prometheus_client.parser import text_string_to_metric_families
d, user, size, acct = json.load(open(sys.argv[1])), sys.argv[3], int(sys.argv[4]), sys.argv[5]
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[2]).read())}
job = [j for j in d["jobs"] if j["user"] == user and j["job"] == "train42"][0]
pt, mode = job["passthrough_opens"], d["passthrough_accounting"]
print(f"passthrough_active {d['passthrough_active']}, accounting {mode}: job opens {job['opens']}, "
      f"passthrough opens {pt}, read_bytes {job['read_bytes']} "
      f"(passthrough {job['passthrough_read_bytes']}, estimated {job['read_bytes_estimated']}), "
      f"files_read {job['files_read']}, stall_ratio {job['stall_ratio']}")
assert job["opens"] == 2
assert pt == d["passthrough_opens"], "the old node-wide counter disagrees"
assert job["passthrough_bytes_estimated"] == pt * size
info = {s.labels["mode"]: s.value for s in fams["stagefs_passthrough_accounting_info"].samples}
assert info == {mode: 1}, info
if not d["passthrough_active"]:
    assert mode == "off" and pt == 0
    sys.exit(0)
assert pt >= 1, "passthrough is active but no open went through it"
assert mode in ("bpf", "estimate") and (acct == "auto" or mode == acct), mode
# the reader reads the file whole, then 4096 bytes again from 0 through the
# same open: the daemon path's page cache serves those, passthrough reads
# them from the cache file (seen by the hook, not by the estimate)
want = pt * (size + 4096 if mode == "bpf" else size) + (2 - pt) * size
assert job["read_bytes"] == want, (job["read_bytes"], want)
assert job["passthrough_read_bytes"] == want - (2 - pt) * size
assert job["read_bytes_estimated"] == (0 if mode == "bpf" else pt * size)
assert job["files_read"] == 2
# warm reads: no stall; the readers' time was active
assert job["active_ns"] > 0 and job["stall_ns"] == 0 and job["stall_ratio"] == 0, job
# the old top-level key counts READs only
assert d["read_bytes"] == (2 - pt) * size, d["read_bytes"]
est = sum(s.value for s in fams["stagefs_read_bytes_estimated"].samples
          if s.labels.get("job") == "train42" and s.name.endswith("_total"))
assert est == job["read_bytes_estimated"], est
PY
		die "passthrough reads are not counted as they should be ($acct)"
	"$STAGEFS" top --once "$mnt" >"$T/top2.txt"
	grep -q "passthrough .* opens (\(bpf\|estimate\)" "$T/top2.txt" ||
		die "stagefs top does not say how passthrough reads are counted: $(cat "$T/top2.txt")"
	sfs_umount "$mnt"
done
