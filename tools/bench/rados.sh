#!/usr/bin/env bash
# tools/bench/rados.sh - rados: cold reads through the mount vs rados bench seq
# SPDX-License-Identifier: Apache-2.0
#
#   rados        cold reads through the mount (empty cache, OSD restarted) /
#                `rados bench seq` at the same concurrency; 4 MiB and 128 KiB objects
#
#   BENCH_RADOS_4M_N, BENCH_RADOS_128K_N   objects per size (default 384, 8192)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_RADOS_4M_N:=32}" "${BENCH_RADOS_128K_N:=512}"
R4M_N=${BENCH_RADOS_4M_N:-384}
R128K_N=${BENCH_RADOS_128K_N:-8192}

# rados_size LABEL BYTES N TARGET
rados_size() {
	local label=$1 size=$2 n=$3 target=$4 d=$WORK/rados-$1 r a b t cdir got rs=() as=() bs=() ts=() shm=/dev/shm/stagefs-bench.$$
	mkdir -p "$d/src"
	log "rados $label: writing and publishing $n files of $label"
	gen_files "$d/src" "$n" "$size" 64 || return 1
	publish_set "$d/src" "bench-$label" "$label" || { skipped "$label: stagefs publish failed"; return 0; }
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	rados_bench_bw 600 write -b "$size" -O "$size" -t "$T" --max-objects "$n" \
		--no-cleanup --run-name "rb-$label" >/dev/null || { skipped "$label: rados bench write failed"; return 0; }
	for r in $(seq "$ROUNDS"); do
		osd_restart || { skipped "$label: OSD restart failed"; return 0; }
		drop_caches
		a=$(rados_bench_bw 600 seq -t "$T" --run-name "rb-$label") || { skipped "$label: rados bench seq failed"; return 0; }
		# once with the cache on disk, once on tmpfs: the OSD and the cache
		# share this machine's one disk, a node's NVMe is not the OSDs' disk
		got=()
		for cdir in "$d/cache" "$shm"; do
			retire "$cdir"
			osd_restart || { skipped "$label: OSD restart failed"; return 0; }
			drop_caches
			sfs_mount "rados://$POOL/bench-$label" "$d/mnt" "cache_dir=$cdir,ceph_conf=$CEPH_CONF" ||
				{ skipped "$label: mount failed"; return 0; }
			got+=("$(rb bytes_per_s files -t "$T" -s "$r" "$d/mnt.list")") ||
				{ failed "$label: $(rb_why)"; sfs_umount "$d/mnt"; rm -rf "$shm"; return 0; }
			sfs_umount "$d/mnt"
			retire "$cdir"
		done
		b=${got[0]} t=${got[1]}
		row5 "round $r, $label" "$(mbs "$a")" "$(mbs "$b")" "$(mbs "$t")" "$(ratio "$b" "$a")"
		as+=("$a") bs+=("$b") ts+=("$t") rs+=("$(ratio "$b" "$a")")
	done
	rados -p "$POOL" cleanup --run-name "rb-$label" >/dev/null 2>&1
	a=$(median "${as[@]}") b=$(median "${bs[@]}") t=$(median "${ts[@]}")
	row5 "median of $ROUNDS, $label x $n, t=$T" "$(mbs "$a")" "$(mbs "$b")" "$(mbs "$t")" "$(median "${rs[@]}")"
	result "rados: cold $label, t=$T" "$(mbs "$b")" "$(mbs "$a")" "$(median "${rs[@]}")" "$target"
	result "rados: cold $label, cache on tmpfs" "$(mbs "$t")" "$(mbs "$a")" "$(ratio "$t" "$a")" "$target"
	return 0
}

bench_rados() {
	hdr rados "cold reads (empty cache, OSD restarted) vs rados bench seq, $T in flight"
	need_rados || { skipped "$RADOS_WHY"; return; }
	row5 "" "rados bench" "mount" "tmpfs cache" "ratio"
	rados_size 4M $((4 << 20)) "$R4M_N" ">=0.9"
	rados_size 128K $((128 << 10)) "$R128K_N" ">=0.8"
}
