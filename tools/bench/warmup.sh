#!/usr/bin/env bash
# tools/bench/warmup.sh - warmup: stagefs warmup vs rados bench seq and cp -r of a cold mount
# SPDX-License-Identifier: Apache-2.0
#
#   warmup       `stagefs warmup` / `rados bench seq`, and / `cp -r` of a cold mount
#
#   BENCH_WARMUP_ARGS  extra arguments for `stagefs warmup`
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

bench_warmup() {
	local d=$WORK/warmup r a b c t w t0 ms bytes sbytes=0 src mopts base wargs shm=/dev/shm/stagefs-bench.$$
	local small_n=2000 small_size=$((110 << 10))	# the dataset's small files, and the baseline's
	local rs=() cs=() bs=() as=() ts=() ws=()
	hdr warmup "stagefs warmup -t $T of a cold mount vs rados bench seq -t $T and cp -r"
	[ -x "$(dirname "$STAGEFS")/stagefs-warmup" ] || { skipped "stagefs-warmup is not built yet"; return; }
	mkdir -p "$d/src"
	gen_files "$d/src" $((R4M_N / 2)) $((4 << 20)) 16 || { skipped "could not write the data"; return; }
	gen_files "$d/src/small" "$small_n" "$small_size" 20 || { skipped "could not write the data"; return; }
	bytes=$(du -sb --apparent-size "$d/src" | cut -f1)
	if need_rados; then
		publish_set "$d/src" bench-warmup 4M || { skipped "stagefs publish failed"; return; }
		src=rados://$POOL/bench-warmup mopts="ceph_conf=$CEPH_CONF" base="rados bench"
		# The baseline reads objects of the same sizes: one run of
		# 4 MiB objects and one of 110 KiB ones.
		sbytes=$(du -sb --apparent-size "$d/src/small" | cut -f1)
		rados_bench_bw 600 write -b 4M -t "$T" --max-objects $(((bytes - sbytes) >> 22)) --no-cleanup --run-name wb >/dev/null &&
			rados_bench_bw 600 write -b "$small_size" -t "$T" --max-objects "$small_n" --no-cleanup --run-name wbs >/dev/null ||
			{ skipped "rados bench write failed"; return; }
	else
		printf '  note: %s; warming a dir:// source instead, baseline = reading the source\n' "$RADOS_WHY"
		src=dir://$d/src mopts="" base="source read"
		list_files "$d/src" "$d/src" "$d/src.list"
	fi
	cold() {	# a cold start: empty cache, cold OSD, no page cache
		retire "$d/cache" "$d/cp" "$shm"
		[ -z "$CLUSTER_DIR" ] || [ "$base" != "rados bench" ] || osd_restart
		drop_caches
	}
	baseline() {
		if [ "$base" = "rados bench" ]; then
			local big small
			big=$(rados_bench_bw 600 seq -t "$T" --run-name wb) &&
				small=$(rados_bench_bw 600 seq -t "$T" --run-name wbs) || return 1
			# the bytes of both over the time both took
			awk -v b="$((bytes - sbytes))" -v s="$sbytes" -v bb="$big" -v sb="$small" \
				'BEGIN { printf "%.0f\n", (b + s) / (b / bb + s / sb) }'
		else
			rb bytes_per_s files -t "$T" -s 0 "$d/src.list"
		fi
	}
	warmup() {	# warmup CACHE_DIR: sets WU (bytes/s)
		sfs_mount "$src" "$d/mnt" "cache_dir=$1${mopts:+,$mopts}" || return 1
		t0=$(now_ms)
		# shellcheck disable=SC2086
		"$STAGEFS" warmup $wargs ${BENCH_WARMUP_ARGS:-} "$d/mnt" >"$WORK/log/warmup.$r.log" 2>&1 ||
			{ echo "stagefs warmup failed: $(tail -1 "$WORK/log/warmup.$r.log")" >"$WORK/log/rb.err"; sfs_umount "$d/mnt"; return 1; }
		ms=$(($(now_ms) - t0))
		sfs_umount "$d/mnt"
		WU=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
	}
	wargs=-q
	"$STAGEFS" warmup --help 2>&1 | grep -c -- '--threads' >/dev/null && wargs="-q -t $T"
	# A warmup reads every byte from the source *and* writes it to the
	# cache.  Here the OSD and the cache share one disk, so the second
	# baseline is the source read with the same bytes written to the cache
	# disk at the same time (4 dd, O_DIRECT): about the most this machine
# allows.
	# The last column has the cache on tmpfs, as if on a device of its own.
	row "" "$base" "+cache write" "cp -r"
	row "" "warmup" "warmup, tmpfs" ""
	for r in $(seq "$ROUNDS"); do
		cold
		a=$(baseline) || { skipped "$base failed: $(rb_why)"; return; }
		cold
		mkdir -p "$d/cache"
		t0=$(now_ms)
		for w in 0 1 2 3; do	# 4 writers: a queue depth like the engine's
			dd if=/dev/zero of="$d/cache/dd$w" bs=4M count=$((bytes >> 24)) oflag=direct status=none &
		done
		baseline >/dev/null || { wait; skipped "$base failed: $(rb_why)"; return; }
		wait
		ms=$(($(now_ms) - t0))
		w=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
		cold
		sfs_mount "$src" "$d/mnt" "cache_dir=$d/cache${mopts:+,$mopts}" || { skipped "mount failed"; return; }
		t0=$(now_ms)
		cp -r "$d/mnt/." "$d/cp" || { skipped "cp -r failed"; sfs_umount "$d/mnt"; return; }
		ms=$(($(now_ms) - t0))
		c=$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1000 / (ms ? ms : 1) }')
		sfs_umount "$d/mnt"
		cold
		warmup "$d/cache" || { skipped "$(rb_why)"; return; }
		b=$WU
		cold
		warmup "$shm" || { skipped "$(rb_why)"; rm -rf "$shm"; return; }
		t=$WU
		rm -rf "$shm"
		row "round $r" "$(mbs "$a")" "$(mbs "$w")" "$(mbs "$c")"
		row "" "$(mbs "$b")" "$(mbs "$t")" ""
		as+=("$a") ws+=("$w") cs+=("$c") bs+=("$b") ts+=("$t") rs+=("$(ratio "$b" "$a")")
	done
	rm -rf "$d/cp" "$d/cache"
	[ "$base" != "rados bench" ] || {
		rados -p "$POOL" cleanup --run-name wb >/dev/null 2>&1
		rados -p "$POOL" cleanup --run-name wbs >/dev/null 2>&1
	}
	a=$(median "${as[@]}") w=$(median "${ws[@]}") c=$(median "${cs[@]}") b=$(median "${bs[@]}") t=$(median "${ts[@]}")
	row "median of $ROUNDS" "$(mbs "$a")" "$(mbs "$w")" "$(mbs "$c")"
	row "" "$(mbs "$b")" "$(mbs "$t")" ""
	result "warmup vs $base" "$(mbs "$b")" "$(mbs "$a")" "$(median "${rs[@]}")" ">=0.95"
	result "warmup vs $base + cache write" "$(mbs "$b")" "$(mbs "$w")" "$(ratio "$b" "$w")" ""
	result "warmup, cache on tmpfs, vs $base" "$(mbs "$t")" "$(mbs "$a")" "$(ratio "$t" "$a")" ">=0.95"
	result "warmup vs cp -r" "$(mbs "$b")" "$(mbs "$c")" "$(ratio "$b" "$c")" ""
}
