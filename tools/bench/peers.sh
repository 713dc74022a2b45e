#!/usr/bin/env bash
# tools/bench/peers.sh - peers: a group of daemons sharing their chunks (docs/fleet.md)
# SPDX-License-Identifier: Apache-2.0
#
#   peers        BENCH_PEER_NODES (4) daemons in one peer group on 127.0.0.2..,
#                a dataset from a Ceph cluster made remote (OSD replies delayed)
#                and narrow (a link shared fairly: backend_max_rate LINK/N per
#                node, LINK for a node alone): backend bytes per dataset byte;
#                sharded warmup with peers / N nodes warming independently, and
#                / one node alone; a cold epoch on N nodes with / without
#                peers; the transport (tools/bench/peerbench) / iperf3 on loopback;
#                then peertls
#
#   BENCH_PEER_NODES peers: daemons in the group (default 4)
#   BENCH_PEER_MB    peers: dataset size in MiB, 4 MiB files (default 256)
#   BENCH_PEER_LINK  peers: the storage link's bytes/s (default 48M)
#   BENCH_PEER_CHUNK peers: chunk size (default 1M: with 4M chunks, 256 MiB is
#                    64 chunks, and one owner may get a third more than its share)
#   BENCH_PEER_DELAY_MS  peers: most ms injected into each OSD reply (default 4)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

bench_source peertls

bench_peers() {
	local d=$WORK/peers n=${BENCH_PEER_NODES:-4} mb=${BENCH_PEER_MB:-256}
	local link=${BENCH_PEER_LINK:-48M} delay=${BENCH_PEER_DELAY_MS:-4} chunk=${BENCH_PEER_CHUNK:-1M} cbytes
	local linkb cap port uri bytes i t0 ms t1 tind tpeer tall be bind bpeer ball pin e1 e0 wargs
	local list=
	linkb=$(numfmt --from=iec "$link") || { skipped "bad BENCH_PEER_LINK"; return; }
	cbytes=$(numfmt --from=iec "$chunk") || { skipped "bad BENCH_PEER_CHUNK"; return; }
	cap=$((linkb / n))
	hdr peers "$n nodes, $mb MiB dataset (4 MiB files, $chunk chunks), OSD replies delayed <= $delay ms, a $link/s link shared fairly ($((cap / 1000000)) MB/s a node; all of it for a node alone)"
	[ -x "$PB" ] || { skipped "tools/bench/peerbench is not built"; return; }
	need_rados || { skipped "$RADOS_WHY"; return; }
	"$STAGEFS" --help 2>&1 | grep -c -- "-o peer_listen=" >/dev/null || { skipped "this stagefs has no peer groups"; return; }
	mkdir -p "$d/src"
	gen_files "$d/src" $((mb / 4)) $((4 << 20)) 8 || { skipped "could not write the data"; return; }
	bytes=$(du -sb --apparent-size "$d/src" | cut -f1)
	uri="rados://$POOL/bench-peers?ns=bench-peers"
	"$STAGEFS" publish -q -j "$T" --chunk-size "$chunk" "$d/src" "$uri" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "stagefs publish failed"; return; }
	port=$((20000 + RANDOM % 20000))
	for ((i = 1; i <= n; i++)); do
		list+="${list:+, }127.0.0.$((i + 1)):$port"
	done
	(umask 077 && "$PY" -c "import secrets; print(secrets.token_hex(32))" >"$d/key")
	printf '[stagefs]\npeers = %s\npeer_key_file = %s\npeer_timeout = 10s\n' "$list" "$d/key" >"$d/peers.conf"
	printf '[stagefs]\n' >"$d/solo.conf"
	MOUNT_CEPH_ARGS="--ms_inject_delay_type=osd --ms_inject_delay_probability=1 --ms_inject_delay_max=$(awk -v m="$delay" 'BEGIN { print m / 1000 }')"
	wargs=-q
	"$STAGEFS" warmup --help 2>&1 | grep -c -- '--threads' >/dev/null && wargs="-q -t $T"
	# nodes CONF CAP K: mount nodes 1..K (cold caches) with CONF
	nodes() {
		local k pl
		retire "$d"/c[0-9]*
		drop_caches
		for ((k = 1; k <= $3; k++)); do
			pl=
			[ "$1" = "$d/solo.conf" ] || pl=",peer_listen=127.0.0.$((k + 1)):$port"
			MOUNT_CONF=$1 sfs_mount "$uri" "$d/m$k" \
				"cache_dir=$d/c$k,ceph_conf=$CEPH_CONF,backend_max_rate=$2$pl" ||
				return 1
		done
	}
	unmount() { local k; for ((k = 1; k <= $1; k++)); do sfs_umount "$d/m$k"; done; }
	backend_sum() { local k s=0; for ((k = 1; k <= $1; k++)); do s=$((s + $(stat_get "$d/m$k" "$2"))); done; echo "$s"; }
	# all K [--shard]: stagefs warmup on nodes 1..K at once; with --shard,
	# each node first its shard (node j: shard j-1 of K), then the rest,
	# as each node of a job would do it (no barrier between the two)
	all() {
		local k=$1 j pids=() rc=0
		for ((j = 1; j <= k; j++)); do
			# shellcheck disable=SC2086
			if [ "${2:-}" = --shard ]; then
				"$STAGEFS" warmup $wargs --shard "$((j - 1))/$k" "$d/m$j" &&
					"$STAGEFS" warmup $wargs "$d/m$j"
			else
				"$STAGEFS" warmup $wargs "$d/m$j"
			fi >"$WORK/log/peers-warmup.$j.log" 2>&1 &
			pids+=($!)
		done
		for j in "${pids[@]}"; do wait "$j" || rc=1; done
		return $rc
	}
	row "" "time" "backend bytes" "per byte"
	# one node alone, the whole link
	nodes "$d/solo.conf" "$linkb" 1 || { skipped "mount failed"; return; }
	t0=$(now_ms)
	all 1 || { skipped "warmup failed"; unmount 1; return; }
	t1=$(($(now_ms) - t0))
	be=$(backend_sum 1 backend_bytes)
	unmount 1
	row "one node alone" "$((t1)) ms" "$be" "$(ratio "$be" "$bytes")"
	# n nodes, no peers: each its share of the link
	nodes "$d/solo.conf" "$cap" "$n" || { skipped "mount failed"; unmount "$n"; return; }
	t0=$(now_ms)
	all "$n" || { skipped "warmup failed"; unmount "$n"; return; }
	tind=$(($(now_ms) - t0))
	bind=$(backend_sum "$n" backend_bytes)
	unmount "$n"
	row "$n nodes, independent" "$tind ms" "$bind" "$(ratio "$bind" "$bytes")"
	# n nodes, one group: each its shard (from Ceph, through the owners), then the rest (from peers)
	nodes "$d/peers.conf" "$cap" "$n" || { skipped "mount failed"; unmount "$n"; return; }
	t0=$(now_ms)
	all "$n" --shard || { skipped "warmup failed"; unmount "$n"; return; }
	tpeer=$(($(now_ms) - t0))
	bpeer=$(backend_sum "$n" backend_bytes)
	pin=$(backend_sum "$n" peer_bytes_in)
	row "$n nodes, peers, --shard i/$n + rest" "$tpeer ms" "$bpeer" "$(ratio "$bpeer" "$bytes")"
	row "" "" "from peers: $pin" ""
	unmount "$n"
	# the same group, every node warming everything at once (no shards)
	nodes "$d/peers.conf" "$cap" "$n" || { skipped "mount failed"; unmount "$n"; return; }
	t0=$(now_ms)
	all "$n" || { skipped "warmup failed"; unmount "$n"; return; }
	tall=$(($(now_ms) - t0))
	ball=$(backend_sum "$n" backend_bytes)
	row "$n nodes, peers, no shards" "$tall ms" "$ball" "$(ratio "$ball" "$bytes")"
	# the transport, node 1 serving from its (page-)cached copy, against iperf3
	# interleaved with iperf3 over the same loopback, 3 times (the machine
	# is noisy), iperf3 writing chunk-sized buffers as the server does
	local pbr1 pbr ipf1 ipf16 r a1=() a16=() b1=() b16=()
	iperf() {	# iperf STREAMS: bytes/s over loopback, 127.0.0.9 -> 127.0.0.2
		local p=$((port + 1)) out
		iperf3 -s -1 -B 127.0.0.2 -p "$p" >/dev/null 2>&1 &
		sleep 0.5
		out=$(iperf3 -c 127.0.0.2 -B 127.0.0.9 -p "$p" -t 3 -l "$cbytes" -P "$1" -J 2>/dev/null)
		wait
		"$PY" -c 'import json, sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8))' <<<"$out"
	}
	pb() { jget "$("$PB" -t "$1" -r "$2" "$d/key" "127.0.0.9:$port" "127.0.0.2:$port" "$uri" 2>>"$WORK/log/peerbench.err")" bytes_per_s; }
	timeout 60 cat "$d/c1"/data/*/* >/dev/null 2>&1
	for r in 1 2 3; do
		if command -v iperf3 >/dev/null; then
			a1+=("$(iperf 1)") a16+=("$(iperf 16)")
		fi
		b1+=("$(pb 1 4)") b16+=("$(pb 16 8)")
	done
	pbr1=$(median "${b1[@]}") pbr=$(median "${b16[@]}")
	[ ${#a1[@]} = 0 ] || ipf1=$(median "${a1[@]}") ipf16=$(median "${a16[@]}")
	# local readers first: node 1's own reads of its cached copy (page cache
	# dropped, 4 readers) alone, then while 3 askers pull from it flat out,
	# then the same with peer_serve_max_mbps=50 on node 1
	local loc0 loc1 loc2 srv1 srv2
	list_files "$d/src" "$d/m1" "$d/files.1"
	under_load() {	# under_load: sets LOC (node 1's read bytes/s) and SRV (served bytes/s)
		local k lp=() o0 t
		# from the other members' addresses: node 1 counts what it serves them
		for k in 3 4 5; do
			"$PB" -t 16 -r 100000 "$d/key" "127.0.0.$k:$((port + 7))" "127.0.0.2:$port" "$uri" >/dev/null 2>&1 &
			lp+=($!)
		done
		sleep 1
		drop_caches
		o0=$(stat_get "$d/m1" peer_bytes_out) t=$(now_ms)
		LOC=$(rb bytes_per_s files -t 4 -s 1 "$d/files.1")
		SRV=$((($(stat_get "$d/m1" peer_bytes_out) - o0) * 1000 / ($(now_ms) - t + 1)))
		kill "${lp[@]}" 2>/dev/null
		wait "${lp[@]}" 2>/dev/null
	}
	drop_caches
	loc0=$(rb bytes_per_s files -t 4 -s 1 "$d/files.1")
	under_load
	loc1=$LOC srv1=$SRV
	sfs_umount "$d/m1"
	MOUNT_CONF=$d/peers.conf sfs_mount "$uri" "$d/m1" \
		"cache_dir=$d/c1,ceph_conf=$CEPH_CONF,backend_max_rate=$cap,peer_listen=127.0.0.2:$port,peer_serve_max_mbps=50" ||
		{ failed "remount of node 1"; unmount "$n"; return; }
	under_load
	loc2=$LOC srv2=$SRV
	unmount "$n"
	row "transport: peerbench -t 1 / -t 16" "$(mbs "${pbr1:-0}")" "$(mbs "${pbr:-0}")" "" "median of 3, chunks checked on arrival"
	row "iperf3 -l $chunk, 1 / 16 streams" "$(mbs "${ipf1:-0}")" "$(mbs "${ipf16:-0}")" "" "median of 3, interleaved"
	row "node 1 reads its copy: alone" "$(mbs "${loc0:-0}")" "" ""
	row "... while serving 3 askers" "$(mbs "${loc1:-0}")" "served $(mbs "${srv1:-0}")" "$(ratio "${loc1:-0}" "${loc0:-0}")"
	row "... the same, peer_serve_max_mbps=50" "$(mbs "${loc2:-0}")" "served $(mbs "${srv2:-0}")" "$(ratio "${loc2:-0}" "${loc0:-0}")"
	# a cold epoch: every node reads the whole dataset, shuffled, with / without peers
	list_files "$d/src" "$d/mX" "$d/files"
	epoch() {	# epoch CONF: ms until n cold nodes have read everything
		local k pids=() t
		nodes "$1" "$cap" "$n" || return 1
		t=$(now_ms)
		for ((k = 1; k <= n; k++)); do
			sed "s|$d/mX|$d/m$k|" "$d/files" >"$d/files.$k"
			"$RB" files -t 4 -s "$k" "$d/files.$k" >/dev/null 2>>"$WORK/log/rb.err" &
			pids+=($!)
		done
		for k in "${pids[@]}"; do wait "$k" || { unmount "$n"; return 1; }; done
		EPOCH_MS=$(($(now_ms) - t))
		EPOCH_BE=$(backend_sum "$n" backend_bytes)
		unmount "$n"
	}
	epoch "$d/solo.conf" || { failed "epoch without peers: $(rb_why)"; return; }
	e0=$EPOCH_MS b=$EPOCH_BE
	epoch "$d/peers.conf" || { failed "epoch with peers: $(rb_why)"; return; }
	e1=$EPOCH_MS
	row "cold epoch, $n nodes, no peers" "$e0 ms" "$b" "$(ratio "$b" "$bytes")"
	row "cold epoch, $n nodes, peers" "$e1 ms" "$EPOCH_BE" "$(ratio "$EPOCH_BE" "$bytes")"
	retire "$d"/c[0-9]*
	MOUNT_CEPH_ARGS=
	result "peers: backend bytes per byte, $n nodes" "$(ratio "$bpeer" "$bytes")" "$(ratio "$bind" "$bytes")" "$(ratio "$bpeer" "$bytes")" "<1.06"
	result "peers: sharded warmup vs $n independent" "${tpeer} ms" "${tind} ms" "$(ratio "$tpeer" "$tind")" "<0.36"
	CUR=peertls
	bench_peertls
	result "peers: sharded warmup vs one node alone" "${tpeer} ms" "${t1} ms" "$(ratio "$tpeer" "$t1")" "<1.31"
	result "peers: cold epoch vs without peers" "${e1} ms" "${e0} ms" "$(ratio "$e1" "$e0")" ""
	result "peers: every node warming, no shards, vs one node" "${tall} ms" "${t1} ms" "$(ratio "$tall" "$t1")" ""
	result "peers: local reads while serving / alone" "$(mbs "${loc1:-0}")" "$(mbs "${loc0:-0}")" "$(ratio "${loc1:-0}" "${loc0:-0}")" ""
	result "peers: the same, serving capped at 50 MB/s" "$(mbs "${loc2:-0}")" "$(mbs "${loc0:-0}")" "$(ratio "${loc2:-0}" "${loc0:-0}")" ""
	[ -z "${ipf16:-}" ] || {
		result "peers: transport vs iperf3, 1 stream" "$(mbs "${pbr1:-0}")" "$(mbs "$ipf1")" "$(ratio "${pbr1:-0}" "$ipf1")" ""
		result "peers: transport vs iperf3, 16 streams" "$(mbs "${pbr:-0}")" "$(mbs "$ipf16")" "$(ratio "${pbr:-0}" "$ipf16")" ""
	}
}
