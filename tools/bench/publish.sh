#!/usr/bin/env bash
# tools/bench/publish.sh - publish: stagefs publish vs rados bench write
# SPDX-License-Identifier: Apache-2.0
#
#   publish      `stagefs publish` MB/s / `rados bench write` at the same concurrency
#
#   BENCH_PUBLISH_MB publish: MiB per round (default 1024)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_PUBLISH_MB:=128}"
PUB_MB=${BENCH_PUBLISH_MB:-1024}

bench_publish() {
	local d=$WORK/publish r a b t0 ms bytes rs=() as=() bs=()
	hdr publish "$PUB_MB MiB of new data per round, 4 MiB chunks, $T in flight"
	[ -x "$(dirname "$STAGEFS")/stagefs-publish" ] || { skipped "stagefs-publish is not built"; return; }
	need_cluster || { skipped "$CLUSTER_WHY"; return; }
	row "" "rados bench" "publish" "ratio"
	for r in $(seq "$ROUNDS"); do
		rm -rf "$d" && mkdir -p "$d/src"
		# new random data each round: publish never uploads a chunk twice
		gen_files "$d/src" $((PUB_MB / 64)) $((64 << 20)) 4 || { skipped "could not write the data"; return; }
		bytes=$(du -sb "$d/src" | cut -f1)
		drop_caches
		a=$(rados_bench_bw 600 write -b 4M -t "$T" --max-objects $((PUB_MB / 4)) --run-name "pb-$r") ||
			{ skipped "rados bench write failed"; return; }
		drop_caches
		t0=$(now_ms)
		publish_set "$d/src" "bench-publish-$r" 4M || { skipped "stagefs publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
		ms=$(($(now_ms) - t0))
		b=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
		row "round $r" "$(mbs "$a")" "$(mbs "$b")" "$(ratio "$b" "$a")"
		as+=("$a") bs+=("$b") rs+=("$(ratio "$b" "$a")")
	done
	rm -rf "$d"
	a=$(median "${as[@]}") b=$(median "${bs[@]}")
	row "median of $ROUNDS" "$(mbs "$a")" "$(mbs "$b")" "$(median "${rs[@]}")"
	result "publish: 4M chunks, j=$T" "$(mbs "$b")" "$(mbs "$a")" "$(median "${rs[@]}")" ""
}
