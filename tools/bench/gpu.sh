#!/usr/bin/env bash
# tools/bench/gpu.sh - gpu: libstagefs into GPU memory, against the ceilings of the same run
# SPDX-License-Identifier: Apache-2.0
#
#   gpu          the warm 2 GiB file into GPU memory with libstagefs (tools/bench/gpubench):
#                feed rate / min(disk, pinned H2D), and / read() + cudaMemcpy,
#                all measured in the same run; "skipped: no GPU" without one
#
#   BENCH_GPU_DEV    gpu: the CUDA device (default 0)
#   BENCH_GPU_REQ    gpu: sfs_read_device request size (default 64M)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

bench_source warm
GPU_DEV=${BENCH_GPU_DEV:-0}
GPU_REQ=${BENCH_GPU_REQ:-64M}

bench_gpu() {
	local d=$WORK/warm out rc feed disk h2d naive lo
	hdr gpu "$BIG_MB MiB file, warm stagefs cache, into GPU $GPU_DEV: sfs_read_device / min(disk, pinned H2D), / read() + cudaMemcpy"
	if [ ! -x "$GB" ]; then
		if ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1; then
			skipped "tools/bench/gpubench is not built (configure found no CUDA toolkit)"
		else
			skipped "no GPU"
		fi
		return
	fi
	"$GB" -p -d "$GPU_DEV" >/dev/null || { skipped "no GPU"; return; }
	warm_prepare || { failed "preparing: $(rb_why)"; return; }
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache" || { failed "mount failed"; return; }
	out=$("$GB" -d "$GPU_DEV" -b "$GPU_REQ" -r "$ROUNDS" -D "$d/mnt/big" 2>"$WORK/log/gpubench.err")
	rc=$?
	sfs_umount "$d/mnt"
	case $rc in
	0) ;;
	77) skipped "no GPU"; return ;;
	*) failed "gpubench: $(tail -1 "$WORK/log/gpubench.err")"; return ;;
	esac
	sed -n 's/^gpubench: /  /p' "$WORK/log/gpubench.err"
	feed=$(jget "$out" feed_bytes_per_s) disk=$(jget "$out" disk_bytes_per_s)
	h2d=$(jget "$out" h2d_bytes_per_s) naive=$(jget "$out" naive_bytes_per_s)
	lo=$(awk -v a="$disk" -v b="$h2d" 'BEGIN { print (a + 0 < b + 0) ? a : b }')
	row "" "feed" "baseline" "ratio"
	row "vs min(disk, pinned H2D) (median)" "$(mbs "$feed")" "$(mbs "$lo")" "$(jget "$out" feed_vs_min_disk_h2d)"
	row "vs read() + cudaMemcpy (median)" "$(mbs "$feed")" "$(mbs "$naive")" "$(jget "$out" feed_vs_naive)"
	row "source: $(sed -n 's/.*"via": "\([a-z_]*\)".*/\1/p' <<<"$out"), cuFile bytes $(jget "$out" cufile_bytes)" "" "" ""
	result "gpu: feed / min(disk, H2D)" "$(mbs "$feed")" "$(mbs "$lo")" \
		"$(jget "$out" feed_vs_min_disk_h2d)" ">=0.9"
	result "gpu: feed / read()+cudaMemcpy" "$(mbs "$feed")" "$(mbs "$naive")" \
		"$(jget "$out" feed_vs_naive)" ">=2"
}
