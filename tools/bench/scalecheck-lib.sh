#!/usr/bin/env bash
# scalecheck-lib.sh: what scalecheck.sh (dir://) and rados-scalecheck.sh (rados://) share; sourced, not run.
# SPDX-License-Identifier: Apache-2.0
#
# Needs STAGEFS, W (the work directory) and MNT set by the caller.

now_ms() { date +%s%3N; }

# tm CMD...: run CMD, print its wall time in ms (its output discarded)
tm() { local t0; t0=$(now_ms); "$@" >/dev/null; echo $(($(now_ms) - t0)); }

# scale_mount WHO LIMIT_S SOURCE OPTS: start the daemon on SOURCE with -o
# OPTS (its log in $W/mount.log) and wait until MNT answers, at most
# LIMIT_S seconds; sets PID and MOUNT_MS.  Exits (naming WHO) if the
# daemon dies or the mount never answers.
scale_mount() {
	local who=$1 limit=$2 src=$3 opts=$4 t0 end
	mkdir -p "$MNT"
	t0=$(now_ms)
	"$STAGEFS" -f -o "$opts" "$src" "$MNT" </dev/null >"$W/mount.log" 2>&1 &
	PID=$!
	end=$((SECONDS + limit))
	until mountpoint -q "$MNT" && stat "$MNT/.stagefs/stats" >/dev/null 2>&1; do
		kill -0 "$PID" 2>/dev/null || { cat "$W/mount.log" >&2; echo "$who: the daemon exited" >&2; exit 1; }
		((SECONDS < end)) || { echo "$who: no mount after $((limit / 60)) min" >&2; exit 1; }
		sleep 0.01
	done
	MOUNT_MS=$(($(now_ms) - t0))
}
