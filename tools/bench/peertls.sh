#!/usr/bin/env bash
# tools/bench/peertls.sh - peertls: the peer transport, TLS 1.3 / the clear-text one it replaced
# SPDX-License-Identifier: Apache-2.0
#
#   peertls      the peer transport, TLS 1.3 (this build) / the clear-text
#                transport it replaced (commit BENCH_PEER_PLAIN_REV, built from
#                this checkout's history into the run's directory, or the
#                build in BENCH_PEER_PLAIN): tools/bench/peerbench against a daemon
#                serving from its warm cache, 1 and 16 chunks in flight,
#                interleaved, median of 3;
#                a node's own reads while it serves 3 askers flat out (and
#                with peer_serve_max_mbps=50) / alone
#
#   BENCH_PEER_MB, BENCH_PEER_CHUNK  peertls: as in peers
#   BENCH_PEER_PLAIN peertls: a build of the clear-text transport to use (a tree with
#                    stagefs and its peerbench built)
#   BENCH_PEER_PLAIN_REV  peertls: the commit to build it from (default 5538a86)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

PLAIN_REV=${BENCH_PEER_PLAIN_REV:-5538a86}	# the last commit with the clear-text peer transport

# plain_build DIR: a build of PLAIN_REV (stagefs, its peerbench) in DIR, or
# BENCH_PEER_PLAIN's.  Sets PLAIN_DIR and PLAIN_PB (its peerbench: in
# tools/ in a tree from before tools/bench/, in tools/bench/ after), or
# PLAIN_WHY and returns 1.
plain_build() {
	local pb
	if [ -n "${BENCH_PEER_PLAIN:-}" ]; then
		PLAIN_DIR=$BENCH_PEER_PLAIN
	else
		PLAIN_DIR=$1
		git -C "$REPO" rev-parse -q --verify "$PLAIN_REV^{commit}" >/dev/null ||
			{ PLAIN_WHY="commit $PLAIN_REV (the clear-text transport) is not in this checkout: set BENCH_PEER_PLAIN to a build of it"; return 1; }
		if [ ! -x "$PLAIN_DIR/tools/peerbench" ] && [ ! -x "$PLAIN_DIR/tools/bench/peerbench" ]; then
			mkdir -p "$PLAIN_DIR"
			log "building the clear-text transport ($PLAIN_REV) in $PLAIN_DIR"
			git -C "$REPO" archive "$PLAIN_REV" | tar -x -C "$PLAIN_DIR" || { PLAIN_WHY="git archive $PLAIN_REV failed"; return 1; }
			pb=tools/bench/peerbench
			[ -e "$PLAIN_DIR/$pb.c" ] || pb=tools/peerbench
			(cd "$PLAIN_DIR" && ./configure --disable-cuda && make -j"$(nproc)" stagefs "$pb") \
				>"$WORK/log/plain-build.log" 2>&1 ||
				{ PLAIN_WHY="building $PLAIN_REV failed (log/plain-build.log)"; return 1; }
		fi
	fi
	PLAIN_PB=$PLAIN_DIR/tools/bench/peerbench
	[ -x "$PLAIN_PB" ] || PLAIN_PB=$PLAIN_DIR/tools/peerbench
	[ -x "$PLAIN_DIR/stagefs" ] && [ -x "$PLAIN_PB" ] ||
		{ PLAIN_WHY="no stagefs and peerbench (tools/ or tools/bench/) in $PLAIN_DIR"; return 1; }
}

# pid_cpu_ms PID: user + system CPU time of PID (all its threads) so far, ms
pid_cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print int(($12 + $13) * 1000 / hz) }' "/proc/$1/stat"; }

bench_peertls() {
	local d=$WORK/peertls mb=${BENCH_PEER_MB:-256} chunk=${BENCH_PEER_CHUNK:-1M} port uri r
	local n1=() n16=() p1=() p16=() mn1 mn16 mp1 mp16 ktls
	hdr peertls "the peer transport, TLS 1.3 (this build) / clear text ($PLAIN_REV): tools/bench/peerbench against a daemon's warm cache, $mb MiB of 4 MiB files in $chunk chunks, loopback"
	[ -x "$PB" ] || { skipped "tools/bench/peerbench is not built"; return; }
	need_rados || { skipped "$RADOS_WHY"; return; }
	plain_build "$WORK/plain" || { skipped "$PLAIN_WHY"; return; }
	mkdir -p "$d/src"
	gen_files "$d/src" $((mb / 4)) $((4 << 20)) 8 || { skipped "could not write the data"; return; }
	uri="rados://$POOL/bench-peertls?ns=bench-peertls"
	"$STAGEFS" publish -q -j "$T" --chunk-size "$chunk" "$d/src" "$uri" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "stagefs publish failed"; return; }
	port=$((20000 + RANDOM % 20000))
	(umask 077 && "$PY" -c "import secrets; print(secrets.token_hex(32))" >"$d/key")
	# two groups of two: an asker (peerbench) and a server, each side's build
	printf '[stagefs]\npeers = 127.0.0.11:%s, 127.0.0.12:%s\npeer_key_file = %s\n' "$port" "$port" "$d/key" >"$d/tls.conf"
	printf '[stagefs]\npeers = 127.0.0.13:%s, 127.0.0.14:%s\npeer_key_file = %s\n' "$port" "$port" "$d/key" >"$d/plain.conf"
	MOUNT_CONF=$d/tls.conf sfs_mount "$uri" "$d/mt" "cache_dir=$d/ct,ceph_conf=$CEPH_CONF,peer_listen=127.0.0.12:$port" ||
		{ skipped "mount failed"; return; }
	MOUNT_CONF=$d/plain.conf STAGEFS=$PLAIN_DIR/stagefs sfs_mount "$uri" "$d/mp" \
		"cache_dir=$d/cp,ceph_conf=$CEPH_CONF,peer_listen=127.0.0.14:$port" ||
		{ skipped "mount of the clear-text build failed"; sfs_umount "$d/mt"; return; }
	timeout 300 cat "$d/mt"/*/* "$d/mp"/*/* >/dev/null 2>&1	# both caches warm
	# pbx PEERBENCH DAEMON_PID SELF PEER INFLIGHT ROUNDS: "bytes/s cpu-ms/GB"
	# (the CPU time of the server daemon and of the asker together per GB moved)
	pbx() {
		local out c0 c1
		c0=$(pid_cpu_ms "$2")
		out=$("$PY" -c '
import json, resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
j = json.loads(r.stdout or "{}")
print(j.get("bytes_per_s", 0), j.get("bytes", 0), int((u.ru_utime + u.ru_stime) * 1000))' \
			"$1" -t "$5" -r "$6" "$d/key" "$3" "$4" "$uri" 2>>"$WORK/log/peerbench.err")
		c1=$(pid_cpu_ms "$2")
		set -- $out
		awk -v r="$1" -v b="$2" -v c=$(($3 + c1 - c0)) 'BEGIN { printf "%.0f %.0f\n", r, (b > 0) ? c / (b / 1e9) : 0 }'
	}
	local tp=${MNT_PID[$d/mt]} pp=${MNT_PID[$d/mp]} x ct=() cp=()
	for r in 1 2 3; do
		x=$(pbx "$PB" "$tp" "127.0.0.11:$port" "127.0.0.12:$port" 1 4); n1+=("${x% *}")
		x=$(pbx "$PLAIN_PB" "$pp" "127.0.0.13:$port" "127.0.0.14:$port" 1 4); p1+=("${x% *}")
		x=$(pbx "$PB" "$tp" "127.0.0.11:$port" "127.0.0.12:$port" 16 8); n16+=("${x% *}") ct+=("${x#* }")
		x=$(pbx "$PLAIN_PB" "$pp" "127.0.0.13:$port" "127.0.0.14:$port" 16 8); p16+=("${x% *}") cp+=("${x#* }")
	done
	ktls=no
	grep -q '^tls ' /proc/modules 2>/dev/null && ktls="module loaded"
	sfs_umount "$d/mt"
	sfs_umount "$d/mp"
	retire "$d/ct" "$d/cp"
	mn1=$(median "${n1[@]}") mp1=$(median "${p1[@]}") mn16=$(median "${n16[@]}") mp16=$(median "${p16[@]}")
	row "" "TLS 1.3" "clear text" "ratio"
	row "1 chunk in flight" "$(mbs "${mn1:-0}")" "$(mbs "${mp1:-0}")" "$(ratio "${mn1:-0}" "${mp1:-0}")" "median of 3, interleaved"
	row "16 chunks in flight" "$(mbs "${mn16:-0}")" "$(mbs "${mp16:-0}")" "$(ratio "${mn16:-0}" "${mp16:-0}")" "kernel TLS: $ktls"
	row "CPU ms per GB, both ends, 16" "$(median "${ct[@]}")" "$(median "${cp[@]}")" "$(ratio "$(median "${ct[@]}")" "$(median "${cp[@]}")")" "server daemon + asker"
	result "peers: TLS / clear text, 1 in flight" "$(mbs "${mn1:-0}")" "$(mbs "${mp1:-0}")" "$(ratio "${mn1:-0}" "${mp1:-0}")" ">=0.8"
	result "peers: TLS / clear text, 16 in flight" "$(mbs "${mn16:-0}")" "$(mbs "${mp16:-0}")" "$(ratio "${mn16:-0}" "${mp16:-0}")" ">=0.8"
}
