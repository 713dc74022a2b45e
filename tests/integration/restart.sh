#!/usr/bin/env bash
# A supervised daemon killed (SIGKILL, SIGABRT, SIGSEGV) 20 times per read path (the daemon's, passthrough, no-open; io_uring is refused) under readers that check every byte: a new daemon takes the mount over each time, no reader sees an error or a wrong byte, none is left waiting; the client library's programs read right across 20; a warmup goes on across two deaths; a multi-dataset root keeps its node ids; a planned restart (SIGUSR2) hands over, a clean unmount ends it.
# timeout: 400
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

T=$TEST_TMPDIR
KILLS=${RESTART_KILLS:-20}
"$PYTHON" - "$T/src" <<'EOF'
import os, random, sys
r = random.Random(7)
for i in range(120):
    d = os.path.join(sys.argv[1], "d%d" % (i % 4))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%03d" % i), "wb") as f:
        f.write(r.randbytes(r.choice([4096, 70000, 300000, 1100000])))
EOF
READER=$REPO/tests/verify_reader.py
sigs=(KILL ABRT SEGV)
# a build under the sanitizers (tests/sanitize.sh) reports a SIGSEGV as a crash
[[ $(nm -D "$STAGEFS" 2>/dev/null) != *__asan_init* ]] || sigs=(KILL ABRT KILL)

# daemon_of SUPERVISOR: the daemon it runs now
daemon_of() { pgrep -P "$1" -x stagefs | head -1; }
took_over() { grep -q "took the mount .* over (daemon generation $2) " "$1"; }

# run_path NAME OPTION...: mount supervised, read, kill KILLS times
run_path() {
	local name=$1 mnt=$T/mnt-$1 sup d old logf gen i sig rc=0
	shift
	rm -rf "$T/cache-$name"
	sfs_mount "dir://$T/src" "$mnt" supervise=on "cache_dir=$T/cache-$name" \
		backend_max_rate=40M chunk_size=256K "$@"
	sup=$(sfs_pid "$mnt")
	logf=$(sfs_log "$mnt")
	rm -f "$T/stop"
	"$PYTHON" "$READER" --threads 4 "$mnt" "$T/src" "$T/stop" >"$T/reader-$name.json" &
	local reader=$!
	for ((i = 1; i <= KILLS; i++)); do
		# each daemon serves >= 0.5 s: shorter lives in a row are a crash
		# loop to the supervisor, which backs off and then gives up
		sleep "0.$((RANDOM % 11 + 55))"
		old=$(daemon_of "$sup")
		[[ -n $old ]] || die "$name: no daemon under supervisor $sup"
		sig=${sigs[$((i % 3))]}
		# cold again now and then: the kernel's pages, and chunks the next
		# daemon must fetch while readers wait
		((i % 5)) || echo 3 >/proc/sys/vm/drop_caches
		kill -"$sig" "$old"
		gen=$((i + 1))
		wait_for -t 30 took_over "$logf" "$gen" ||
			{ tail -30 "$logf" >&2; die "$name: kill $i (SIG$sig): no daemon took over"; }
	done
	# a planned restart: the binary is checked, the daemon hands over
	old=$(daemon_of "$sup")
	kill -USR2 "$sup"
	wait_for -t 30 took_over "$logf" $((KILLS + 2)) || die "$name: the planned restart did not happen"
	grep -q "handing .* over to the next daemon" "$logf" || die "$name: the daemon did not hand over"
	sleep 0.5
	touch "$T/stop"
	# every request answered: the readers end
	wait_for -t 60 bash -c "! kill -0 $reader 2>/dev/null" || die "$name: readers still waiting 60 s after the last takeover"
	wait "$reader" || rc=$?
	log "$name: $(cat "$T/reader-$name.json")"
	assert_eq "$rc" 0 "$name: readers across $KILLS kills ($(cat "$T/reader-$name.json"))"
	d=$(daemon_of "$sup")
	assert_eq "$(stat_get "$mnt" daemon_generation)" $((KILLS + 2)) "$name: daemon generation"
	[[ $d != "$old" ]] || die "$name: the same daemon after the planned restart"
	sfs_umount "$mnt"
	mountpoint -q "$mnt" && die "$name: still mounted after a clean unmount"
	true
}

run_path daemon passthrough=off no_open=off
run_path passthrough passthrough=on no_open=off
run_path noopen passthrough=off no_open=on
# The client library (gpudirect/): programs that open files through it
# (handed cache files, the pinned pipeline) while the daemon dies
GPUREAD=$REPO/tests/helpers/gpuread
C=$T/mnt-client
sfs_mount "dir://$T/src" "$C" supervise=on "cache_dir=$T/cache-client" chunk_size=256K
sup=$(sfs_pid "$C")
logf=$(sfs_log "$C")
mapfile -t cfiles < <(cd "$T/src" && find . -type f -printf '%P\n' | sort | head -40)
rm -f "$T/stop" "$T/client.fail"
(
	n=0
	until [[ -e $T/stop ]]; do
		for rel in "${cfiles[@]}"; do
			[[ -e $T/stop ]] && break
			if ! "$GPUREAD" -m pinned -o "$T/client.out" "$C/$rel" 2>>"$T/client.err" ||
				! cmp -s "$T/client.out" "$T/src/$rel"; then
				echo "$rel" >>"$T/client.fail"
			fi
			n=$((n + 1))
		done
	done
	echo "$n" >"$T/client.n"
) &
client=$!
for ((i = 1; i <= KILLS; i++)); do
	sleep 0.55 # >= 0.5 s a daemon, as above
	kill -KILL "$(daemon_of "$sup")"
	wait_for -t 30 took_over "$logf" $((i + 1)) || die "client: kill $i: no daemon took over"
done
sleep 0.5
touch "$T/stop"
wait "$client"
[[ ! -e $T/client.fail ]] || die "client library reads failed across restarts: $(sort -u "$T/client.fail" | head -5) $(tail -5 "$T/client.err")"
log "client library: $(cat "$T/client.n") files read across $KILLS kills"
assert_gt "$(cat "$T/client.n")" 40 "client library reads"
sfs_umount "$C"

# A warmup across two daemon deaths: the command asks the new daemon again
# and what was cached is skipped, so it ends with the whole dataset cached.
W=$T/mnt-warm
sfs_mount "dir://$T/src" "$W" supervise=on "cache_dir=$T/cache-warm" backend_max_rate=20M chunk_size=256K
sup=$(sfs_pid "$W")
logf=$(sfs_log "$W")
"$STAGEFS" warmup --json "$W" >"$T/warm.json" 2>"$T/warm.err" &
warm=$!
for i in 1 2; do
	sleep 0.6
	kill -KILL "$(daemon_of "$sup")"
	wait_for -t 30 took_over "$logf" $((i + 1)) || die "warmup: kill $i: no daemon took over"
done
rc=0
wait "$warm" || rc=$?
assert_eq "$rc" 0 "the warmup across two restarts ($(cat "$T/warm.err" "$T/warm.json"))"
grep -q "the daemon restarted" "$T/warm.err" || die "the warmup did not say it resumed: $(cat "$T/warm.err")"
"$STAGEFS" warmup --check --json "$W" >"$T/check.json" || die "warmup --check failed"
"$PYTHON" -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["cached_files"] == j["files"] == 120, j' \
	"$T/check.json" || die "not all cached after the warmup: $(cat "$T/check.json")"
sfs_umount "$W"

# A multi-dataset root: node ids embed each dataset's index, which is the
# order the first daemon added them in.  "late" comes first in the config
# after a reload, so a new daemon reading the config alone would number it
# 1, not 3: the takeover state must keep the first daemon's order.
mkdir -p "$T/late"
for i in $(seq 10 29); do head -c $((50000 + i)) /dev/urandom >"$T/late/l$i"; done
CONF=$T/multi.conf
printf '[dataset a]\nsource = dir://%s\n\n[dataset b]\nsource = dir://%s\n' "$T/src" "$T/src" >"$CONF"
M=$T/mnt-multi
sfs_mount "" "$M" -c "$CONF" supervise=on "cache_dir=$T/cache-multi"
sup=$(sfs_pid "$M")
logf=$(sfs_log "$M")
printf '[dataset late]\nsource = dir://%s\n\n' "$T/late" | cat - "$CONF" >"$CONF.new"
mv "$CONF.new" "$CONF"
kill -HUP "$sup"
wait_for test -d "$M/late" || die "multi: the reload did not add dataset late"
ino_before=$(stat -c %i "$M/late/l13")
rm -f "$T/stop"
"$PYTHON" "$READER" --threads 2 "$M/late" "$T/late" "$T/stop" >"$T/reader-multi.json" &
reader=$!
for i in 1 2 3; do
	sleep 0.55 # >= 0.5 s a daemon, as above
	kill -KILL "$(daemon_of "$sup")"
	wait_for -t 30 took_over "$logf" $((i + 1)) || die "multi: kill $i: no daemon took over"
done
sleep 0.5
touch "$T/stop"
rc=0
wait "$reader" || rc=$?
assert_eq "$rc" 0 "multi: readers of a dataset added by a reload ($(cat "$T/reader-multi.json"))"
assert_eq "$(stat -c %i "$M/late/l13")" "$ino_before" "multi: the inode number of late/l13"
cmp "$M/late/l17" "$T/late/l17" || die "multi: late/l17 differs after the takeovers"
cmp "$M/b/d1/f001" "$T/src/d1/f001" || die "multi: b/d1/f001 differs after the takeovers"
sfs_umount "$M"

# io_uring: a daemon's end strands the requests on its rings (the kernel
# resends only /dev/fuse's), so a supervised mount refuses uring=on and
# turns uring=auto off even where the kernel has the rings on
rc=0
"$STAGEFS" -f -o supervise=on,uring=on,cache_dir=$T/cache-u,runtime_dir=$T/run-u \
	"dir://$T/src" "$T/mnt-daemon" >"$T/u.out" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && grep -q "supervise=on and uring=on cannot be had together" "$T/u.out" ||
	die "supervise=on with uring=on was not refused: rc $rc, $(cat "$T/u.out")"
log "ok"
