#!/usr/bin/env bash
# Stopped with work in flight (a hint session prefetching, a warmup, files and .stagefs/ files open, after SIGHUP reloads), the daemon exits 0 and unmounts; run under tests/sanitize.sh, with no sanitizer report.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

T=$TEST_TMPDIR
mkdir -p "$T/d/h" "$T/d/w"
for i in $(seq -w 1 24); do
	head -c $((3 * 1024 * 1024)) /dev/urandom >"$T/d/h/f$i"
	head -c $((2 * 1024 * 1024)) /dev/urandom >"$T/d/w/g$i"
done
CONF=$T/stagefs.conf
cat >"$CONF" <<EOC
[stagefs]
chunk_size = 1M

[dataset d]
source = dir://$T/d
EOC
MNT=$T/mnt

# one pass: busy the daemon, then stop it with SIG ($1) or fusermount3 -u
busy_stop() {
	local how=$1 pid wpid
	rm -rf "$T/cache"
	# a slow backend keeps the hint session and the warmup in flight
	sfs_mount "" "$MNT" -c "$CONF" passthrough=off hint_window=8 backend_max_rate=4M
	pid=$(sfs_pid "$MNT")
	printf '%s\n' "$MNT"/d/h/f* | shuf >"$T/order"
	"$STAGEFS" warmup --order "$T/order" --quiet >/dev/null
	"$STAGEFS" warmup --quiet "$MNT/d/w" >/dev/null 2>&1 &
	wpid=$!
	kill -HUP "$pid"
	kill -HUP "$pid"
	wait_for grep -q "reloaded" "$(sfs_log "$MNT")" || die "no reload logged"
	# files open across the stop: a data file and a virtual one
	# (not a hinted file: opening the order's last one ends the session)
	exec 7<"$MNT/d/w/g01" 8<"$MNT/.stagefs/stats"
	head -c 100 <&7 >/dev/null
	head -c 100 <&8 >/dev/null
	[[ $(stat_get "$MNT" hint_sessions) -ge 1 ]] || die "no hint session live at the stop"
	log "stopping pid $pid ($how) with a hint session, a warmup and open files"
	if [[ $how == umount ]]; then
		exec 7<&- 8<&-
		sfs_umount "$MNT"
	else
		kill -"$how" "$pid"
		sfs_wait_exit "$MNT"
		exec 7<&- 8<&-
	fi
	wait "$wpid" 2>/dev/null || true
}

busy_stop TERM
busy_stop INT
busy_stop umount
echo "ok: stopped 3 times with work in flight, exit 0 each time"
