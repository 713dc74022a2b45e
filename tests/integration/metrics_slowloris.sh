#!/usr/bin/env bash
# Metrics exporters under a hostile client: one trickling a byte a second and 40 idle connections on metrics_port delay no scrape beyond the deadline and no rewrite of metrics_file; the trickler is cut off at its request deadline; metrics_file is mode 0640 in metrics_group, and an unknown group fails the mount.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
command -v curl >/dev/null || skip "curl is not installed"
command -v groupadd >/dev/null || skip "groupadd is not installed"

G=sfs_scrape
getent group $G >/dev/null || groupadd $G
gid=$(getent group $G | cut -d: -f3)

T=$TEST_TMPDIR
src=$T/src mnt=$T/mnt prom=$T/prom/stagefs.prom
mkdir -p "$src" "$mnt" "$T/prom"
head -c 100000 /dev/urandom >"$src/f"
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# an unknown group is refused at mount, naming it
if timeout 20 "$STAGEFS" -f -o "cache_dir=$T/c0,runtime_dir=$T/r0,metrics_file=$prom,metrics_group=sfs_no_such_group" \
	"dir://$src" "$mnt" </dev/null >"$T/bad.out" 2>&1; then
	fusermount3 -u -z "$mnt" 2>/dev/null || true
	die "metrics_group=sfs_no_such_group was accepted"
fi
mountpoint -q "$mnt" && die "stagefs mounted with an unknown metrics_group"
grep -q "sfs_no_such_group" "$T/bad.out" || die "the refusal does not name the group: $(cat "$T/bad.out")"

sfs_mount "dir://$src" "$mnt" metrics_port="$port" metrics_file="$prom" \
	metrics_interval=1s metrics_group=$G
cat "$mnt/f" >/dev/null

perm_ok() {
	local st
	st=$(stat -c '%a %g' "$prom")
	[[ $st == "640 $gid" ]] || die "metrics_file is '$st' (mode gid); expected '640 $gid'"
}
perm_ok

# The hostile client: 40 connections that never send, one that trickles
# "GET /metrics ..." a byte a second for 15 s.  It writes how long the
# trickled connection lived before the server closed it (or "never").
cat >"$T/slowloris.py" <<'PY'
import os, socket, sys
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
import hostile
port, out = int(sys.argv[1]), sys.argv[2]
idle = []
for _ in range(40):
    try:
        idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError:
        pass    # a full accept queue: fine, the point is the others
print(f"{len(idle)} idle connections open", flush=True)
open(out, "w").write(hostile.trickle(port, 15) + "\n")
PY
"$PYTHON" "$T/slowloris.py" "$port" "$T/closed" &
hpid=$!
sleep 1	# let the hostile connections in first

now_ms() { date +%s%3N; }
mtime() { stat -c %.3Y "$prom"; }
# For 8 s: a scrape every second answers in full within 3 s, and the
# textfile is rewritten (metrics_interval=1s) at least every 3 s.
last_m=$(mtime) last_change=$(now_ms) end=$(($(now_ms) + 8000))
n=0
while (($(now_ms) < end)); do
	t0=$(now_ms)
	curl -sS --max-time 3 -o "$T/scrape" "http://127.0.0.1:$port/metrics" ||
		die "a scrape failed with a slow client on the port"
	took=$(($(now_ms) - t0))
	grep -q '^stagefs_read_bytes_total' "$T/scrape" || die "the scrape has no stagefs_read_bytes_total"
	((took <= 2500)) || die "a scrape took ${took} ms with a slow client on the port"
	n=$((n + 1))
	m=$(mtime)
	if [[ $m != "$last_m" ]]; then
		last_m=$m last_change=$(now_ms)
	fi
	(($(now_ms) - last_change <= 3000)) ||
		die "metrics_file was not rewritten for $(($(now_ms) - last_change)) ms (metrics_interval=1s)"
	perm_ok
	sleep 1
done
log "$n scrapes answered with a slow client and 40 idle connections on the port"
wait_pid_exit $hpid 30 || die "the hostile client did not finish"
closed=$(cat "$T/closed")
log "the trickling connection was closed after ${closed} s"
[[ $closed != never ]] || die "the server never closed a connection trickling a byte a second"
"$PYTHON" -c "import sys; sys.exit(0 if float('$closed') <= 4.0 else 1)" ||
	die "the trickling connection lived ${closed} s; the request deadline is 2 s"

sfs_umount "$mnt"
[[ ! -e $prom ]] || die "metrics_file was left behind after unmount"
