#!/usr/bin/env bash
# tools/bench/restart.sh - restart: the pause readers see when a supervised daemon is replaced
# SPDX-License-Identifier: Apache-2.0
#
#   restart      a supervised mount (supervise=on, defaults otherwise) of a dir://
#                dataset of small and medium files, cache warm: looping readers
#                (readbench loop) time every open, read and close while the
#                daemon is SIGKILLed BENCH_RESTART_KILLS times, against the same
#                readers with no kill: p50/p99/max of the calls and of the worst
#                call per takeover (the pause), the daemon's takeover_pause_ms;
#                one epoch (page cache dropped) with a SIGKILL in its middle /
#                without; the same pauses for planned restarts (SIGUSR2 to the
#                supervisor); and where a takeover's time goes, from the log
#
#   BENCH_RESTART_KILLS  restart: SIGKILLs under the looping readers (default 20)
#   BENCH_RESTART_PLANNED  restart: planned restarts, SIGUSR2 (default 20)
#   BENCH_RESTART_N  restart: small files, 64 KiB; a tenth as many medium ones,
#                    1 MiB (default 3000)
#   BENCH_RESTART_READERS  restart: reader threads (default 4)
#   BENCH_RESTART_BASE_S  restart: seconds of looping readers with no restart,
#                    the baseline (default 10)
#   BENCH_RESTART_GAP_MS  restart: how long each new daemon serves before the
#                    next kill, plus 0-400 ms at random (default 700; under 500
#                    the supervisor counts quick deaths and backs off)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_RESTART_KILLS:=5}" "${BENCH_RESTART_PLANNED:=5}" "${BENCH_RESTART_N:=1000}"
RS_KILLS=${BENCH_RESTART_KILLS:-20}
RS_PLANNED=${BENCH_RESTART_PLANNED:-20}
RS_N=${BENCH_RESTART_N:-3000}
RS_READERS=${BENCH_RESTART_READERS:-4}
RS_GAP_MS=${BENCH_RESTART_GAP_MS:-700}
RS_STATS=$REPO/tools/bench/restart_stats.py

RS_D=				# $WORK/restart
RS_MNT=				# its mount
RS_SUP=				# the supervisor's pid
RS_LOG=				# the mount's log (supervisor and every daemon)
RS_GEN=1			# the daemon generation serving now
RS_WHY=

# rs_daemon: the daemon the supervisor runs now
rs_daemon() { pgrep -P "$RS_SUP" -x stagefs | head -1; }

# rs_took_over GEN: wait (30 s at most) until daemon generation GEN said it
# took the mount over
rs_took_over() {
	local end=$((SECONDS + 30))
	until grep -q "took the mount .* over (daemon generation $1) " "$RS_LOG"; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.02
	done
}

# rs_takeover KILL|USR2: replace the daemon once (SIGKILL to it, or SIGUSR2
# to the supervisor), note the time in $RS_D/events, wait until the next
# generation serves and then RS_GAP_MS and a bit more.  1 (RS_WHY) if not.
rs_takeover() {
	local pid=$RS_SUP
	if [ "$1" = KILL ]; then
		pid=$(rs_daemon)
		[ -n "$pid" ] || { RS_WHY="no daemon under supervisor $RS_SUP"; return 1; }
	fi
	printf '%s %s\n' "$(date +%s%N)" "$1" >>"$RS_D/events"
	kill -"$1" "$pid"
	RS_GEN=$((RS_GEN + 1))
	if ! rs_took_over "$RS_GEN"; then
		printf '  SIG%s: no daemon generation %s took the mount over within 30 s; log tail:\n' "$1" "$RS_GEN"
		tail -15 "$RS_LOG" | sed 's/^/    /'
		RS_WHY="SIG$1: no daemon generation $RS_GEN took the mount over within 30 s"
		return 1
	fi
	sleep "$(awk -v g="$RS_GAP_MS" -v r="$RANDOM" 'BEGIN { printf "%.3f", (g + r % 400) / 1000 }')"
}

# rs_hang_report PID: what a reader that does not end waits on
rs_hang_report() {
	local t
	printf '  readers still running 60 s after the stop (pid %s); their threads wait in:\n' "$1"
	for t in /proc/"$1"/task/*; do
		printf '    %s: %s\n' "${t##*/}" "$(tr '\n' ' ' <"$t/wchan" 2>/dev/null)"
		sed 's/^/      /' "$t/stack" 2>/dev/null | head -8
	done
	printf '  daemon now: %s; log tail:\n' "$(rs_daemon)"
	tail -15 "$RS_LOG" | sed 's/^/    /'
}

# rs_loop NAME KIND COUNT: the looping readers for a while, with COUNT
# takeovers of KIND (KILL, USR2, or none: BENCH_RESTART_BASE_S seconds of
# nothing).  Leaves $RS_D/trace.NAME, $RS_D/events.NAME and the readers'
# JSON in RS_OUT.  1 (RS_WHY) on a failed takeover, a reader's error or
# readers that do not end.
rs_loop() {
	local name=$1 kind=$2 count=$3 pid i rc=0
	rm -f "$RS_D/stop" "$RS_D/events"
	: >"$RS_D/events"
	"$RB" loop -t "$RS_READERS" -s 1 -S "$RS_D/stop" -o "$RS_D/trace.$name" "$RS_D/mnt.list" \
		>"$RS_D/loop.$name.json" 2>"$RS_D/loop.$name.err" &
	pid=$!
	sleep 1
	if [ "$kind" = none ]; then
		sleep "$RS_BASE_S"
	else
		for ((i = 1; i <= count; i++)); do
			rs_takeover "$kind" || { rc=1; break; }
		done
	fi
	touch "$RS_D/stop"
	if ! wait_gone "$pid" 60; then
		rs_hang_report "$pid"
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		RS_WHY="readers hung after $name (see above)"
		return 1
	fi
	wait "$pid" 2>/dev/null
	mv "$RS_D/events" "$RS_D/events.$name"
	RS_OUT=$(cat "$RS_D/loop.$name.json")
	if [ "$(jget "$RS_OUT" errors)" != 0 ] || [ -s "$RS_D/loop.$name.err" ]; then
		printf '  readers saw errors during %s (times: epoch s):\n' "$name"
		sed 's/^/    /' "$RS_D/loop.$name.err" | head -6
		RS_WHY="${RS_WHY:+$RS_WHY; }$(jget "$RS_OUT" errors) read errors during $name: $(head -1 "$RS_D/loop.$name.err")"
		return 1
	fi
	return "$rc"
}

# rs_epoch ROUND KILL_AFTER_MS: one read of the whole dataset (page cache
# dropped), a SIGKILL of the daemon KILL_AFTER_MS into it (0: none); sets
# RS_EP_S (the readers' seconds)
rs_epoch() {
	local r=$1 at=$2 pid out
	drop_caches
	"$RB" files -t "$RS_READERS" -s "$r" "$RS_D/mnt.list" >"$RS_D/epoch.json" 2>"$RS_D/epoch.err" &
	pid=$!
	if [ "$at" -gt 0 ]; then
		sleep "$(awk -v m="$at" 'BEGIN { printf "%.3f", m / 1000 }')"
		rs_takeover KILL || { wait_gone "$pid" 60 || kill -KILL "$pid" 2>/dev/null; return 1; }
	fi
	if ! wait_gone "$pid" 120; then
		rs_hang_report "$pid"
		kill -KILL "$pid" 2>/dev/null
		RS_WHY="an epoch did not end in 120 s"
		return 1
	fi
	wait "$pid" 2>/dev/null
	out=$(cat "$RS_D/epoch.json")
	if [ "$(jget "$out" errors)" != 0 ] || [ "$(jget "$out" files)" != "$RS_FILES" ]; then
		RS_WHY="the epoch read $(jget "$out" files) of $RS_FILES files, $(jget "$out" errors) errors: $(head -1 "$RS_D/epoch.err")"
		return 1
	fi
	RS_EP_S=$(jget "$out" seconds)
}

# rs_row LABEL A B RATIO [NOTE]: row, with room for "p50 / p99 / max"
rs_row() {
	printf '  %-30s %22s %22s %7s' "${1-}" "${2-}" "${3-}" "${4-}"
	[ -z "${5-}" ] || printf '  %s' "$5"
	printf '\n'
}

# ms3 A B C: "A / B / C", milliseconds, 3 significant digits, no exponent
ms3() {
	awk -v a="$1" -v b="$2" -v c="$3" 'function f(x) { return x < 1 ? sprintf("%.3f", x) : x < 10 ? sprintf("%.2f", x) : x < 100 ? sprintf("%.1f", x) : sprintf("%.0f", x) }
		BEGIN { printf "%s / %s / %s", f(a), f(b), f(c) }'
}

# rs_report NAME LABEL: the rows of one kind of takeover against the baseline
# ($RS_D/trace.base); sets RS_P99 (the pause's p99, ms) and RS_BP99 (the
# baseline's worst call per window, p99)
rs_report() {
	local name=$1 label=$2 k b w
	k=$("$PY" "$RS_STATS" calls "$RS_D/trace.$name" --events "$RS_D/events.$name")
	w=$(jget "$k" window_ms)
	b=$("$PY" "$RS_STATS" calls "$RS_D/trace.base" --every "$w")
	rs_row "" "no restart" "$label" "ratio"
	rs_row "call: p50 / p99 / max, ms" "$(ms3 "$(jget "$b" p50_ms)" "$(jget "$b" p99_ms)" "$(jget "$b" max_ms)")" \
		"$(ms3 "$(jget "$k" p50_ms)" "$(jget "$k" p99_ms)" "$(jget "$k" max_ms)")" \
		"$(ratio "$(jget "$k" p99_ms)" "$(jget "$b" p99_ms)")" "$(jget "$k" calls) vs $(jget "$b" calls) calls; ratio of the p99s"
	rs_row "worst call per ${w} ms window" "$(ms3 "$(jget "$b" pause_p50_ms)" "$(jget "$b" pause_p99_ms)" "$(jget "$b" pause_max_ms)")" \
		"$(ms3 "$(jget "$k" pause_p50_ms)" "$(jget "$k" pause_p99_ms)" "$(jget "$k" pause_max_ms)")" \
		"$(ratio "$(jget "$k" pause_p99_ms)" "$(jget "$b" pause_p99_ms)")" \
		"the pause: p50 / p99 / max over $(jget "$k" windows) takeovers (an open $(jget "$k" worst_open), read $(jget "$k" worst_read), close $(jget "$k" worst_close))"
	RS_P99=$(jget "$k" pause_p99_ms) RS_BP99=$(jget "$b" pause_p99_ms)
	printf '  readers: %s files read, %s calls failed; the slowest call ended at %s (no restart) and %s (%s)\n' \
		"$(jget "$RS_OUT" files)" "$(jget "$k" failed)" "$(date -d "@$(jget "$b" max_end_s)" +%T.%3N)" \
		"$(date -d "@$(jget "$k" max_end_s)" +%T.%3N)" "$label"
}

# rs_daemon_pauses FIRST LAST KIND: the daemon's takeover_pause_ms of
# generations FIRST..LAST and where the time went, from the log
rs_daemon_pauses() {
	local out j
	out=$("$PY" "$RS_STATS" log "$RS_LOG" "$1" "$2" "$3")
	j=$(head -1 <<<"$out")
	rs_row "daemon's takeover_pause_ms" "" "$(ms3 "$(jget "$j" p50_ms)" "$(jget "$j" p99_ms)" "$(jget "$j" max_ms)")" "" \
		"p50 / p99 / max of $(jget "$j" n)"
	printf '    %s\n' "$(sed -n 2p <<<"$out")"
	tail -n +3 <<<"$out"
}

bench_restart() {
	local d=$WORK/restart r k ep0='' ep1 er=() e0s=() e1s=() eds=() g0 g1 kp99 kb up0
	RS_BASE_S=${BENCH_RESTART_BASE_S:-10}
	hdr restart "supervised dir:// mount, $RS_N x 64 KiB + $((RS_N / 10)) x 1 MiB, cache warm, $RS_READERS reader threads: $RS_KILLS SIGKILLs, an epoch with one, $RS_PLANNED planned restarts"
	has_option supervise || { skipped "this stagefs has no supervise option"; return; }
	RS_D=$d RS_MNT=$d/mnt RS_GEN=1 RS_WHY=
	up0=$(cut -d' ' -f1-3 /proc/loadavg)
	mkdir -p "$d/src/small" "$d/src/medium"
	log "restart: writing $RS_N + $((RS_N / 10)) files"
	if ! gen_files "$d/src/small" "$RS_N" $((64 << 10)) 30 || ! gen_files "$d/src/medium" $((RS_N / 10)) $((1 << 20)) 3; then
		skipped "could not write the data"
		return
	fi
	list_files "$d/src" "$RS_MNT" "$d/mnt.list"
	RS_FILES=$(wc -l <"$d/mnt.list")
	sfs_mount "dir://$d/src" "$RS_MNT" "supervise=on,cache_dir=$d/cache,log_level=info" ||
		{ failed "mount failed"; return; }
	RS_SUP=${MNT_PID[$RS_MNT]} RS_LOG=$MOUNT_LOG
	[ -n "$(rs_daemon)" ] || { failed "no daemon under the supervisor $RS_SUP"; sfs_umount "$RS_MNT"; return; }
	log "restart: filling the cache"
	if ! rb files_per_s files -t "$RS_READERS" "$d/mnt.list" >/dev/null ||
		! cache_paths "$d/cache" "$d/mnt.list" "$d/cache.list" 2>"$WORK/log/rb.err" ||
		! rb files_per_s files -t "$RS_READERS" "$d/mnt.list" >/dev/null; then
		failed "filling the cache: $(rb_why)"
		sfs_umount "$RS_MNT"
		return
	fi

	# 1. SIGKILLs under looping readers, against the same readers alone
	log "restart: $RS_BASE_S s of looping readers, then $RS_KILLS SIGKILLs under them"
	if ! rs_loop base none 0 || ! rs_loop kill KILL "$RS_KILLS"; then
		failed "$RS_WHY"
		sfs_umount "$RS_MNT"
		return
	fi
	printf '  SIGKILL of the daemon, %s times, readers looping (page cache hot):\n' "$RS_KILLS"
	rs_report kill "SIGKILL x$RS_KILLS"
	kp99=$RS_P99 kb=$RS_BP99
	result "restart: SIGKILL pause p99 (s)" "$kp99 ms" "" "$(awk -v m="$kp99" 'BEGIN { printf "%.2f", m / 1000 }')" "<1"
	result "restart: SIGKILL pause p99 / none" "$kp99 ms" "$kb ms" "$(ratio "$kp99" "$kb")" ""
	rs_daemon_pauses 2 "$RS_GEN" crash

	# 2. an epoch with a SIGKILL in its middle, against one without
	log "restart: $ROUNDS epochs without and with a SIGKILL in the middle"
	g0=$((RS_GEN + 1))
	printf '\n'
	row "one epoch, page cache dropped" "no kill" "SIGKILL mid-way" "ratio"
	for r in $(seq "$ROUNDS"); do
		# which goes first alternates by round (the kill lands half-way
		# through the last epoch without one)
		for k in $((r % 2)) $((1 - r % 2)); do
			if [ "$k" = 1 ]; then
				rs_epoch "$r" 0 || { failed "epoch: $RS_WHY"; sfs_umount "$RS_MNT"; return; }
				ep0=$RS_EP_S
			else
				rs_epoch "$r" "$(awk -v s="${ep0:-1}" 'BEGIN { printf "%.0f", s * 500 }')" ||
					{ failed "epoch with a SIGKILL: $RS_WHY"; sfs_umount "$RS_MNT"; return; }
				ep1=$RS_EP_S
			fi
		done
		row "round $r$([ $((r % 2)) = 0 ] && printf ', kill first')" "$(printf '%.2f s' "$ep0")" "$(printf '%.2f s' "$ep1")" "$(ratio "$ep1" "$ep0")" \
			"$(awk -v a="$ep0" -v b="$ep1" 'BEGIN { printf "%+.0f ms", (b - a) * 1000 }')"
		e0s+=("$ep0") e1s+=("$ep1") er+=("$(ratio "$ep1" "$ep0")")
		eds+=("$(awk -v a="$ep0" -v b="$ep1" 'BEGIN { printf "%.0f", (b - a) * 1000 }')")
	done
	g1=$RS_GEN
	ep0=$(median "${e0s[@]}") ep1=$(median "${e1s[@]}")
	row "median of $ROUNDS" "$(printf '%.2f s' "$ep0")" "$(printf '%.2f s' "$ep1")" "$(median "${er[@]}")" \
		"$(printf '%+.0f ms' "$(median "${eds[@]}")"); $RS_FILES files, $((RS_N * 64 / 1024 + RS_N / 10)) MiB"
	result "restart: epoch, SIGKILL / none" "$(printf '%.2f s' "$ep1")" "$(printf '%.2f s' "$ep0")" "$(median "${er[@]}")" ""
	rs_daemon_pauses "$g0" "$g1" crash

	# 3. planned restarts under looping readers
	log "restart: $RS_PLANNED planned restarts (SIGUSR2) under looping readers"
	g0=$((RS_GEN + 1))
	if ! rs_loop planned USR2 "$RS_PLANNED"; then
		failed "$RS_WHY"
		sfs_umount "$RS_MNT"
		return
	fi
	printf '\n  planned restart (SIGUSR2 to the supervisor), %s times, readers looping:\n' "$RS_PLANNED"
	rs_report planned "SIGUSR2 x$RS_PLANNED"
	result "restart: SIGUSR2 pause p99 (s)" "$RS_P99 ms" "" "$(awk -v m="$RS_P99" 'BEGIN { printf "%.2f", m / 1000 }')" "<1"
	result "restart: SIGUSR2 pause p99 / none" "$RS_P99 ms" "$RS_BP99 ms" "$(ratio "$RS_P99" "$RS_BP99")" ""
	rs_daemon_pauses "$g0" "$RS_GEN" planned

	[ "$(stat_get "$RS_MNT" daemon_generation)" = "$RS_GEN" ] ||
		printf '  note: daemon_generation is %s, %s takeovers were asked for\n' "$(stat_get "$RS_MNT" daemon_generation)" $((RS_GEN - 1))
	printf '  load average %s at the start, %s at the end (2 vCPUs: the readers, the daemon starting and the old one ending share them)\n' \
		"$up0" "$(cut -d' ' -f1-3 /proc/loadavg)"
	sfs_umount "$RS_MNT"
	retire "$d/cache"
	rm -rf "$d/src"
	# BENCH_KEEP=1 keeps the traces, the kills' times and the readers' output
	[ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$d"
}
