#!/usr/bin/env bash
# A real Slurm on localhost (munged, slurmctld, two slurmd: nodes n1 and n2) with the SPANK plugin: a user's 2-node sbatch --stagefs job has each node stage its shard (as that user) and finds all its data cached before it reads, its tasks carry STAGEFS_JOB, its feed summary names the job, its nodes are the daemon's peer group while it runs (peers_file, PEERS) and are not after it, only root may change the group; a dataset the user may not read is not staged and --stagefs-onfail=fail fails the job; a staging longer than --stagefs-wait is cut short and the job runs, as it does when the daemon hangs; srun takes the option too; --stagefs-shard=all stages everything on every node; past 255 peers the places are shared fairly between the jobs and the job, the peers_file and slurmd's log say who lost how many; bad option values fail at submission.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
for c in munged slurmctld slurmd sbatch scontrol sinfo; do
	command -v "$c" >/dev/null ||
		skip "$c is not installed (Debian packages munge, slurmctld, slurmd, slurm-client; ./configure --install-deps)"
done
PLUGIN=$REPO/slurm/spank_stagefs.so
grep -qx 'HAVE_SLURM=y' "$REPO/config.mk" 2>/dev/null && [[ -f $PLUGIN ]] ||
	skip "the SPANK plugin is not built (configure found no libslurm-dev, or --without-slurm)"
# Slurm's programs are not built with the sanitizers' runtimes: they cannot load it
! grep -q '^SANFLAGS=-fsanitize' "$REPO/config.mk" ||
	skip "the plugin is built with sanitizers (tests/sanitize.sh), which Slurm's processes cannot load"
need_users sfs_alice

T=$TEST_TMPDIR
S=$T/slurm
# the job's user must reach the mount, the munge socket, the config, the plugin
chmod 755 "$T" "$(dirname "$T")"
mkdir -p "$S"/{munge,state,spool,log,jobs} "$S/munge/seed"
chmod 700 "$S/state"
chown sfs_alice "$S/jobs"
cp "$PLUGIN" "$S/spank_stagefs.so"
cp "$STAGEFS" "$S/stagefs"
for t in "$REPO"/stagefs-*; do cp "$t" "$S/"; done
chmod 755 "$S" "$S"/stagefs* "$S/spank_stagefs.so"

# --- the data and the mount ----------------------------------------------------

mkdir -p "$T/data/train/sub" "$T/data/secret"
for i in 1 2 3 4 5 6; do head -c $((1024 * 1024 + i * 4099)) /dev/urandom >"$T/data/train/f$i"; done
for i in 1 2 3; do head -c $((i * 70000)) /dev/urandom >"$T/data/train/sub/s$i"; done
for i in 1 2; do head -c $((1024 * 1024)) /dev/urandom >"$T/data/secret/f$i"; done
mkdir -p "$T/data/big"
for i in 1 2 3 4; do head -c $((12 * 1024 * 1024)) /dev/urandom >"$T/data/big/f$i"; done
chmod -R a+rX "$T/data"
# the peer group: the plugin writes the daemon's peers_file with the job's
# nodes.  n1 and n2 both name this machine, which the plugin resolves
# (peer_host=localhost) to 127.0.0.1, and the daemon listens on 127.0.0.2:
# so the job's nodes show as a member besides the daemon itself while a job
# runs, and as gone after it (dir:// datasets never ask peers)
PEER_PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])')
(umask 077 && "$PYTHON" -c "import secrets; print(secrets.token_hex(32))" >"$T/peer.key")
PEERS_FILE=$S/peers.d/peers
mkdir -p "$S/peers.d"
chmod 755 "$S/peers.d"
cat >"$T/stagefs.conf" <<EOC
[stagefs]
chunk_size = 1M
peer_listen = 127.0.0.2:$PEER_PORT
peer_key_file = $T/peer.key
peers_file = $PEERS_FILE
# slow enough that big/ (48 MiB) takes ~3 s to stage: longer than a 1 s wait
backend_max_rate = 16M

[dataset train]
source = dir://$T/data/train

[dataset big]
source = dir://$T/data/big

[dataset secret]
source = dir://$T/data/secret
allow = user:root
EOC
MNT=$T/mnt
sfs_mount "" "$MNT" -c "$T/stagefs.conf"

# --- munge and Slurm, on ports nobody else uses ---------------------------------

read -r CTLD_PORT PORT1 PORT2 < <("$PYTHON" -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

head -c 1024 /dev/urandom >"$S/munge/munge.key"
chmod 400 "$S/munge/munge.key"
chmod 755 "$S/munge"
export SLURM_CONF=$S/slurm.conf
cat >"$SLURM_CONF" <<EOC
ClusterName=sfstest
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.sock
CryptoType=crypto/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
PrologFlags=Alloc
PlugStackConfig=$S/plugstack.conf
# two nodes on this machine (Debian's Slurm has MULTIPLE_SLURMD), one stagefs mount
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$PORT1 CPUs=1
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$PORT2 CPUs=1
PartitionName=debug Nodes=n[1-2] Default=YES State=UP
EOC
chmod 644 "$SLURM_CONF"
cat >"$S/plugstack.conf" <<EOC
required $S/spank_stagefs.so mount=$MNT statedir=$S/staged wait=30 peers_file=$PEERS_FILE peer_port=$PEER_PORT peer_host=localhost
EOC
chmod 644 "$S/plugstack.conf"

pidof_file() { [[ -s $1 ]] && cat "$1"; }
stop_slurm() {
	local f pid
	# slurmd and slurmctld first, munged last (they authenticate through it)
	for f in "$S/slurmd-n1.pid" "$S/slurmd-n2.pid" "$S/slurmctld.pid" "$S/munge/munged.pid"; do
		pid=$(pidof_file "$f") || continue
		kill -TERM "$pid" 2>/dev/null || continue
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
}
on_exit() {
	local rc=$?
	# a stopped daemon would not hear the unmount
	kill -CONT "$(sfs_pid "$MNT")" 2>/dev/null || true
	stop_slurm
	if [[ $rc -ne 0 && $rc -ne 77 ]]; then
		for f in "$S"/log/*.log; do
			[[ -f $f ]] && sed "s|^|    $(basename "$f"): |" "$f" | tail -40 >&2
		done
	fi
	(exit "$rc")
	_lib_on_exit
}
trap on_exit EXIT

munged --key-file="$S/munge/munge.key" --socket="$S/munge/munge.sock" \
	--pid-file="$S/munge/munged.pid" --log-file="$S/log/munged.log" \
	--seed-file="$S/munge/seed/munge.seed" -f
wait_for -t 10 test -S "$S/munge/munge.sock" || die "munged did not start"
slurmctld
slurmd -N n1
slurmd -N n2
nodes_idle() { [[ $(sinfo -h -o '%D %t' 2>/dev/null) == "2 idle" ]]; }
wait_for -t 30 nodes_idle || die "the nodes did not come up idle: $(sinfo 2>&1)"
log "slurm up: slurmctld :$CTLD_PORT, slurmd n1 :$PORT1, n2 :$PORT2"

# --- helpers ---------------------------------------------------------------------

job_field() { scontrol show job -o "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
job_done() {
	case $(job_field "$1" JobState) in
	COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;;
	*) return 1 ;;
	esac
}
submit() { # submit SBATCH-ARGS... -> job id
	as sfs_alice env -u TMPDIR SLURM_CONF="$SLURM_CONF" sbatch --parsable -D "$S/jobs" \
		-o "$S/jobs/%j.out" "$@"
}
user_used() { # bytes of the cache charged to USER
	"$STAGEFS" quota --json "$MNT" | "$PYTHON" -c '
import json, sys
print(sum(u["used_bytes"] for u in json.load(sys.stdin)["users"] if u["user"] == sys.argv[1]))' "$1"
}
train_bytes=$(find "$T/data/train" -type f -printf '%s\n' | awk '{s += $1} END {print s}')

# --- 1. a 2-node job: each node stages its shard, the job finds it all cached ------

cat >"$S/jobs/train.sh" <<EOS
#!/bin/bash
set -e
# on each node, before its tasks read anything: what is cached of its shard
# (the batch script may start before the other node's prolog is done; a
# node's tasks never start before its own)
srun -l bash -c 'echo "task on \$SLURMD_NODENAME: STAGEFS_JOB=\$STAGEFS_JOB"
	$S/stagefs warmup --check --json --shard \$SLURM_NODEID/2 $MNT/train >check.\$SLURM_JOB_ID.\$SLURM_NODEID.json'
cd $MNT/train
find . -type f | sort | xargs sha256sum >$S/jobs/read.\$SLURM_JOB_ID.sha
# the peer group while the job runs: the file the plugin wrote, the daemon's view
cp $PEERS_FILE $S/jobs/peers.\$SLURM_JOB_ID
cp $MNT/.stagefs/stats $S/jobs/stats.\$SLURM_JOB_ID.json
EOS
chmod 755 "$S/jobs/train.sh"
(cd "$T/data/train" && find . -type f | sort | xargs sha256sum) >"$T/src.sha"

[[ $(user_used sfs_alice) -eq 0 ]] || die "sfs_alice has cached data before any job"
j1=$(submit -N2 --stagefs=train "$S/jobs/train.sh")
log "job $j1 submitted"
wait_for -t 40 job_done "$j1" || die "job $j1 did not finish: $(scontrol show job "$j1")"
out=$(cat "$S/jobs/$j1.out")
printf '%s\n' "$out" | sed 's/^/    job: /' >&2
[[ $(job_field "$j1" JobState) == COMPLETED ]] || die "job $j1 did not complete: $(job_field "$j1" JobState)"

# each node staged its own shard, as the user; together, all of it, once
"$PYTHON" - "$j1" "$train_bytes" "$S/log/slurmd-n1.log" "$S/log/slurmd-n2.log" <<'EOF' ||
import re, sys
job, size = sys.argv[1], int(sys.argv[2])
got = {}
for node, log in (("n1", sys.argv[3]), ("n2", sys.argv[4])):
    lines = [l for l in open(log) if f"stagefs: job {job}: STAGED " in l]
    assert len(lines) == 1, (node, lines)
    kv = dict(w.split("=", 1) for w in lines[0].split("STAGED ", 1)[1].split())
    print("    prolog on", node, kv, file=sys.stderr)
    assert kv["status"] == "ok" and kv["node"] == node, kv
    got[kv["shard"]] = kv
assert set(got) == {"0/2", "1/2"}, got
assert sum(int(k["bytes"]) for k in got.values()) == size, got
assert sum(int(k["fetched_bytes"]) for k in got.values()) == size, got
assert all(int(k["bytes"]) > 0 for k in got.values()), got
EOF
	die "the two nodes did not stage disjoint shards covering the dataset"
"$PYTHON" - "$S/jobs/check.$j1".{0,1}.json <<'EOF' || die "a node's shard was not staged before its tasks ran"
import json, sys
chunks = 0
for f in sys.argv[1:]:
    c = json.load(open(f))
    print("    check before reading:", c, file=sys.stderr)
    assert c["chunks"] > 0 and c["cached_before"] == c["chunks"], c
    assert c["cached_files"] == c["files"], c
    chunks += c["chunks"]
assert chunks == 15, chunks
EOF
used=$(user_used sfs_alice)
assert_ge "$used" "$train_bytes" "cache bytes charged to sfs_alice (the warmup ran as the job's user)"
for n in 1 2; do
	i=$((n - 1))
	grep -q "stagefs: staged train (shard $i/2) on n$n before the job started: [0-9]* files" <<<"$out" ||
		die "the job's output does not say node n$n staged its shard"
	grep -q "task on n$n: STAGEFS_JOB=slurm:job_$j1\$" <<<"$out" ||
		die "the task on n$n has no STAGEFS_JOB=slurm:job_$j1"
done
# the bytes it read are the dataset's
cmp "$S/jobs/read.$j1.sha" "$T/src.sha" || die "job $j1 read other bytes than the dataset's"
# the feed summary names the job; every chunk it read came from the cache
sum=$(grep "^stagefs: job $j1 (slurm:job_$j1) on n1: read " <<<"$out" | tail -1) ||
	die "no feed summary naming job $j1 in its output"
[[ $sum == *"hit ratio 100.0%"* && $sum == *"(0 B from the backend)"* ]] || die "job $j1 missed the cache: $sum"
"$PYTHON" - "$j1" "$(id -u sfs_alice)" "$train_bytes" <<EOF || die "the daemon's job row is wrong"
import json, sys
d = json.load(open("$MNT/.stagefs/stats"))
job, uid, size = "slurm:job_" + sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [r for r in d["jobs"] if r["job"] == job and r["uid"] == uid]
assert len(rows) == 1, d["jobs"]
r = rows[0]
print("    job row:", {k: r[k] for k in ("read_bytes", "cache_hits", "cache_misses", "passthrough_opens",
                                      "passthrough_bytes_estimated", "backend_bytes")}, file=sys.stderr)
# whole cached files are read through FUSE passthrough (estimated bytes), the rest hit
assert r["read_bytes"] + r["passthrough_bytes_estimated"] >= size, r
assert r["cache_hits"] + r["passthrough_opens"] > 0, r
assert r["cache_misses"] == 0 and r["backend_bytes"] == 0, r
EOF
for n in 1 2; do
	wait_for -t 10 grep -q "stagefs: job $j1 (slurm:job_$j1) on n$n: read " "$S/log/slurmd-n$n.log" ||
		die "the epilog on n$n did not log the job's feed summary"
done

# the job's nodes were the daemon's peer group while it ran, and are not after it
peer_members() { # the daemon's members other than itself, from its stats (or FILE)
	"$PYTHON" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join(sorted(p["addr"] for p in d["peers"] if p["member"] and not p["self"])))' "${1:-$MNT/.stagefs/stats}"
}
job_peer=127.0.0.1:$PEER_PORT
# (each node lists the job's other nodes: n1's list has n2, n2's has n1)
grep -Eqx "$job_peer # (n1 n2|n2 n1)" "$S/jobs/peers.$j1" ||
	die "the peers_file during job $j1 does not name its nodes n1 and n2: $(cat "$S/jobs/peers.$j1")"
got=$(peer_members "$S/jobs/stats.$j1.json")
[[ $got == "$job_peer" ]] || die "the daemon's peers during job $j1: expected $job_peer, got '$got'"
for n in 1 2; do
	grep -q "stagefs: job $j1 on n$n: the daemon's peer group: 2 member(s): 127.0.0.2:$PEER_PORT,$job_peer" \
		"$S/log/slurmd-n$n.log" || die "the prolog on n$n did not make the job's nodes the peer group"
done
no_job_peers() { [[ -z $(peer_members) ]] && ! grep -q '^[0-9]' "$PEERS_FILE"; }
wait_for -t 10 no_job_peers ||
	die "the peer group was not restored after job $j1: $(peer_members); $(cat "$PEERS_FILE")"
grep -q "stagefs: job $j1 ended on n[12]: the daemon's peer group: 1 member(s): 127.0.0.2:$PEER_PORT\$" "$S"/log/slurmd-n*.log ||
	die "no epilog restored the peer group after job $j1"
[[ $(stat -c '%U %a' "$PEERS_FILE") == "root 644" ]] || die "the peers_file is not root's 0644: $(stat -c '%U %a' "$PEERS_FILE")"

# only root may change the group: a user's PEERS reload=1 is refused, and the
# daemon takes no peers_file that someone else may write
cat >"$T/peers.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
f = s.makefile("rb")
for line in ("HELLO version=1", sys.argv[2]):
    s.sendall(line.encode() + b"\n")
    got = f.readline().decode().strip()
print(got)
PY
SOCK=$(cat "$MNT/.stagefs/socket")
got=$(as sfs_alice "$PYTHON" "$T/peers.py" "$SOCK" "PEERS reload=1")
[[ $got == "ERR code=EPERM "* ]] || die "a user's PEERS reload=1 was not refused: $got"
got=$(as sfs_alice "$PYTHON" "$T/peers.py" "$SOCK" "PEERS")
[[ $got == "OK members=1 self=127.0.0.2:$PEER_PORT peers=127.0.0.2:$PEER_PORT peers_file=$PEERS_FILE" ]] ||
	die "a user cannot read the group: $got"
cp -p "$PEERS_FILE" "$T/peers.saved"
echo "127.0.0.9:$PEER_PORT" >>"$PEERS_FILE"
chmod 666 "$PEERS_FILE"
got=$("$PYTHON" "$T/peers.py" "$SOCK" "PEERS reload=1")
[[ $got == "ERR code=EPERM msg=peers_file"*"writable%20by%20nobody%20else"* ]] ||
	die "the daemon took a peers_file anyone may write: $got"
[[ -z $(peer_members) ]] || die "a refused peers_file changed the group: $(peer_members)"
cp -p "$T/peers.saved" "$PEERS_FILE"

# --- 2. a dataset the user may not read is not staged; onfail=fail fails the job --

before=$(stat_get "$MNT" backend_reads)
j2=$(submit -N1 --stagefs=secret --stagefs-onfail=fail --wrap "touch $S/jobs/ran.\$SLURM_JOB_ID")
wait_for -t 40 job_done "$j2" || die "job $j2 did not finish"
out=$(cat "$S/jobs/$j2.out")
printf '%s\n' "$out" | sed 's/^/    job: /' >&2
[[ $(job_field "$j2" JobState) == FAILED ]] || die "job $j2 should have failed: $(job_field "$j2" JobState)"
[[ ! -e $S/jobs/ran.$j2 ]] || die "job $j2's task ran although staging failed and it asked for onfail=fail"
grep -q "stagefs: staging secret (shard 0/1) on n[12]: .*(first: secret: No such file or directory)" <<<"$out" ||
	die "job $j2's output does not say why staging failed"
assert_eq "$(stat_get "$MNT" backend_reads)" "$before" "backend reads for a dataset sfs_alice may not read"
wait_for -t 10 nodes_idle || die "the nodes are not idle after a failed staging: $(sinfo -h -o '%n %t %E')"

# --- 3. the wait is bounded: the job starts, reads the rest on demand ------------

j4=$(submit -N1 --stagefs=big --stagefs-wait=1 --wrap "cat $MNT/big/f* | sha256sum")
wait_for -t 40 job_done "$j4" || die "job $j4 did not finish"
out=$(cat "$S/jobs/$j4.out")
printf '%s\n' "$out" | sed 's/^/    job: /' >&2
[[ $(job_field "$j4" JobState) == COMPLETED ]] || die "job $j4 did not run after its staging timed out"
grep -q "stagefs: staging big (shard 0/1) on n[12] did not finish in 1 s (--stagefs-wait): .* fetched, .*; the job runs and reads what is not cached from the backend" <<<"$out" ||
	die "job $j4's output does not say its staging timed out"
grep -qx "$(cat "$T/data/big/f"* | sha256sum)" <<<"$out" || die "job $j4 read other bytes than big/'s"
sum=$(grep "^stagefs: job $j4 (slurm:job_$j4) on n[12]: read [0-9.]* MiB in 4 files" <<<"$out") ||
	die "no feed summary for job $j4"
# what was not staged it waited for (fetched by its reads, readahead, or the
# cancelled warmup's last fetches)
[[ $sum != *"stalled 0.000 s"* ]] || die "job $j4's summary shows no wait for data: $sum"

# a hung daemon holds the job up no longer than its wait (+5 s to kill the
# staging helper, +5 s for the peer group's helper)
dpid=$(sfs_pid "$MNT")
kill -STOP "$dpid"
t0=$SECONDS
j7=$(submit -N1 --stagefs=train --stagefs-wait=2 --wrap "echo started")
prolog_done() { grep -q "stagefs: job $j7: STAGED" "$S"/log/slurmd-n*.log; }
wait_for -t 25 prolog_done || { kill -CONT "$dpid"; die "job $j7's prolog did not end with the daemon stopped"; }
kill -CONT "$dpid"
assert_ge 17 $((SECONDS - t0)) "seconds job $j7's prolog took with the daemon stopped"
wait_for -t 40 job_done "$j7" || die "job $j7 did not finish"
out=$(cat "$S/jobs/$j7.out")
printf '%s\n' "$out" | sed 's/^/    job: /' >&2
[[ $(job_field "$j7" JobState) == COMPLETED ]] || die "job $j7 did not run after its staging hung"
grep -q "stagefs: staging train on n[12] failed: the staging helper hung past its deadline and was killed" <<<"$out" ||
	die "job $j7's output does not say its staging hung"
grep -q "stagefs: the job's nodes are not the peer group on n[12] (.*): the peer group helper hung past its deadline" <<<"$out" ||
	die "job $j7's output does not say its nodes are not the peer group"

# --- 4. srun takes the option too; data already cached is not fetched again ------

# (an absolute path under the mount is the same as train/sub)
# The task prints the hash of what it read: srun's output comes back
# through slurmstepd's I/O forwarding, which this Slurm (22.05) has cut
# short as a step ended ("io error with slurmstepd", 127 of 137 KiB came
# back once); such a cut is tried once more
srun_s2() {
	as sfs_alice env -u TMPDIR SLURM_CONF="$SLURM_CONF" srun -N1 -D "$S/jobs" --stagefs="$MNT/train/sub" \
		sha256sum "$MNT/train/sub/s2" >"$T/srun.out" 2>"$T/srun.err" || die "srun failed: $(cat "$T/srun.err")"
}
srun_s2
if contains "io error with slurmstepd" "$T/srun.err"; then
	log "srun: Slurm's I/O forwarding was cut short ($(grep -m1 'error' "$T/srun.err")): once more"
	srun_s2
fi
sed 's/^/    srun: /' "$T/srun.err" >&2
[[ $(cut -d' ' -f1 "$T/srun.out") == "$(sha256sum <"$T/data/train/sub/s2" | cut -d' ' -f1)" ]] ||
	die "srun's task read other bytes: $(cat "$T/srun.out")"
grep -q "stagefs: staged $MNT/train/sub (shard 0/1) on n[12] before the job started: 3 files, .* (0 B fetched, .* already cached)" "$T/srun.err" ||
	die "srun does not say its data was staged"
grep -q "^stagefs: job [0-9]* (slurm:job_[0-9]*) on n[12]: read 136.72 KiB in 1 files" "$T/srun.err" ||
	die "srun shows no feed summary"

# an srun --stagefs in a job submitted without it cannot stage: it says so, runs
j6=$(submit -N1 --wrap "srun --stagefs=train/sub echo ran")
wait_for -t 40 job_done "$j6" || die "job $j6 did not finish"
out=$(cat "$S/jobs/$j6.out")
[[ $(job_field "$j6" JobState) == COMPLETED ]] || die "job $j6 did not complete"
grep -q "error: stagefs: staging train/sub on n[12] failed: no staging was done for this job here: --stagefs acts when the job starts" <<<"$out" ||
	die "job $j6 does not say why its step's --stagefs did nothing: $out"
grep -qx ran <<<"$out" || die "job $j6's step did not run"

# --- 5. --stagefs-shard=all: every node stages all of it ---------------------------

# ... and more nodes than the group's 255 places (issue 27): lists planted
# in the state directory, as two big jobs' would be, job 1's and this one's
# (held until they are there), 300 made-up nodes each, share them fairly
j5=$(submit -H -N2 --stagefs=train/sub --stagefs-shard=all --wrap "cp $PEERS_FILE $S/jobs/peers.\$SLURM_JOB_ID")
for j in 1 "$j5"; do
	"$PYTHON" - "$j" "$PEER_PORT" >"$S/staged/peers/$j.n9" <<'EOF'
import sys
job, port = int(sys.argv[1]), sys.argv[2]
print(f"# job {job}: planted by the test")
for i in range(300):
    print(f"10.{97 + (job == 1)}.{i // 256}.{i % 256}:{port} # f{job}x{i}")
EOF
done
scontrol release "$j5"
wait_for -t 40 job_done "$j5" || die "job $j5 did not finish"
for n in 1 2; do
	grep -q "stagefs: job $j5: STAGED status=ok files=3 .* shard=0/1 paths=train/sub node=n$n" \
		"$S/log/slurmd-n$n.log" || die "n$n did not stage all of train/sub for job $j5"
done
out=$(cat "$S/jobs/$j5.out")
printf '%s\n' "$out" | sed 's/^/    job: /' >&2
# job 1 brings in one node a round before job $j5: 128 places, 172 of its 300
# out; job $j5 has 127 places, 1 of them for n1 and n2 (one address)
pf=$S/jobs/peers.$j5
grep -qxF "# left out: job 1: 172 of its 300 other node(s); 2 job(s) share the 255 places" "$pf" ||
	die "the peers_file does not say job 1 lost 172 nodes: $(grep '^#' "$pf")"
grep -Eqx "# left out: job $j5: 174 of its 30[12] other node\(s\); 2 job\(s\) share the 255 places" "$pf" ||
	die "the peers_file does not say job $j5 lost 174 nodes: $(grep '^#' "$pf")"
assert_eq "$(grep -c '^10\.98\.' "$pf")" 128 "job 1's nodes in the peers_file"
assert_eq "$(grep -c '^10\.97\.' "$pf")" 126 "job $j5's planted nodes in the peers_file"
grep -Eqx "127\.0\.0\.1:$PEER_PORT # (n1 n2|n2 n1|n1|n2)" "$pf" || die "job $j5's own nodes are not in the peers_file"
grep -q "stagefs: job $j5 on n[12]: the daemon's peer group: 256 member(s): .*; past 255 members, the places are shared between the jobs here: job 1 lost 172 of its 300 other nodes, job $j5 lost 174 of its 30[12] other nodes\$" \
	"$S"/log/slurmd-n*.log || die "slurmd's log does not say which jobs lost nodes"
grep -Eq "^stagefs: the peer group on n1 leaves out 174 of this job's 30[12] other node\(s\): 2 job\(s\) here share its 255 places" <<<"$out" ||
	die "job $j5's output does not say how many of its nodes the peer group leaves out"
rm -f "$S/staged/peers/1.n9" "$S/staged/peers/$j5.n9"

# --- 6. a bad value fails at submission -------------------------------------------

err=$(submit --stagefs=train --stagefs-wait=soon --wrap true 2>&1) && die "sbatch took --stagefs-wait=soon"
log "sbatch said: $err"
[[ $err == *"stagefs-wait=soon wants seconds"* ]] || die "unexpected sbatch error: $err"
err=$(submit --stagefs=../etc --wrap true 2>&1) && die "sbatch took --stagefs=../etc"
[[ $err == *"may not go up"* ]] || die "unexpected sbatch error: $err"

stop_slurm
log "ok"
