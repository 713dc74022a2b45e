#!/usr/bin/env bash
# tools/bench/device-check.sh - the whole GPU-machine check of issue 33, in one command, with a report
# SPDX-License-Identifier: Apache-2.0
#
#   tools/bench/device-check.sh [--rehearse] [--out DIR] [--budget SECS] [--carry DIR]
#
# Runs on a bare machine that reaches no package registry, as root, from
# what tools/dev/device-prep.sh put in .device/ (--carry DIR): unpacks the
# carried Debian packages with dpkg -x into a private prefix (never into /),
# runs the carried binaries with LD_LIBRARY_PATH set for them alone, then:
#
#   facts     kernel, runtime (gVisor, Firecracker), CPUs, memory, disk,
#             glibc, /dev/fuse, io_uring, fuse.enable_uring, driver, CUDA, GPU
#   gpu       a warm cache file into GPU memory with sfs_read_device
#             (gpubench): / min(disk, pinned H2D) (>= 0.9) and / read() +
#             cudaMemcpy (>= 2), the cache on the machine's disk and on a
#             tmpfs; the mount's per-GPU rows of .stagefs/stats against the
#             bytes gpubench fed
#   warm      warm reads through the mount with 1, 4 and 16 readers, large
#             files and 110 KiB files, in each mode the daemon offers
#             (default/passthrough, the daemon path, FUSE over io_uring),
#             against direct reads of the cache files in the same run
#   cold      cold reads from a dir:// source on the machine's disk, 16
#             readers, against direct reads of the source
#   au        aubench's resnet50 search: the most simulated accelerators at
#             the pass line reading through the mount with the client
#             library into GPU memory, each step a real GPU step (-g 0),
#             against read(2) of the same files on the machine's disk
#
# Each step is skipped, with the reason, when it cannot run (no GPU, no
# /dev/fuse, ...) or when fewer seconds are left of --budget (default 540)
# than it needs; each runs under its own time limit.  --rehearse (or no
# GPU) skips the GPU steps and shrinks the data, so that the same script
# runs to its end on a 2-vCPU VM: docs/benchmarks.md, docs/testing.md.
# The report goes to DIR/report.md (default $OUT, else /tmp/devcheck) and
# to stdout; the logs to DIR/logs.txt.  Exit 0 when it reached its end.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
REHEARSE=0
ODIR=${OUT:-/tmp/devcheck}
BUDGET=540
CARRY=$REPO/.device
while [ $# -gt 0 ]; do
	case $1 in
	--rehearse) REHEARSE=1 ;;
	--out) ODIR=$2; shift ;;
	--budget) BUDGET=$2; shift ;;
	--carry) CARRY=$(cd "$2" && pwd -P) || exit 2; shift ;;
	-h | --help) sed -n '3,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
	*) echo "device-check: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
T0=$SECONDS
mkdir -p "$ODIR" || exit 1
REPORT=$ODIR/report.md
LOGS=$ODIR/logs.txt
: >"$LOGS"

. "$HERE/perf-lib.sh" || exit 1
[ "$(id -u)" = 0 ] || { echo "device-check: needs root (FUSE mounts, drop_caches, tmpfs)" >&2; exit 1; }
[ -f "$CARRY/MANIFEST" ] || { echo "device-check: no $CARRY/MANIFEST: run tools/dev/device-prep.sh here first" >&2; exit 1; }

left() { echo $((BUDGET - (SECONDS - T0))); }
say() { printf '%s\n' "$*"; }

# ---------------------------------------------------------------------------
# the carried files

trap cleanup EXIT
trap 'exit 130' INT TERM
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/stagefs-devcheck.XXXXXX") || exit 1
mkdir -p "$WORK/log" "$WORK/wbin"
P=$WORK/prefix
UNPACK=ok
for f in "$CARRY"/deb/*.deb; do
	dpkg -x "$f" "$P" 2>>"$LOGS" || UNPACK="dpkg -x failed on ${f##*/}"
done
LIBS=$P/usr/lib/x86_64-linux-gnu:$P/usr/lib/x86_64-linux-gnu/ceph:$P/lib/x86_64-linux-gnu:$CARRY/lib
for b in "$CARRY"/bin/*; do
	printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$LIBS" "$b" \
		>"$WORK/wbin/${b##*/}"
	chmod +x "$WORK/wbin/${b##*/}"
done
# a machine whose glibc is older than the carried libstdc++ wants (2.36)
# has its own: use that one
LIBNOTE="carried libraries in use"
if ! "$WORK/wbin/stagefs" --version >/dev/null 2>>"$LOGS"; then
	rm -f "$P"/usr/lib/x86_64-linux-gnu/libstdc++.so.6*
	LIBNOTE="the machine's libstdc++ in place of the carried one"
	"$WORK/wbin/stagefs" --version >/dev/null 2>>"$LOGS" || LIBNOTE="the daemon does not start: $(tail -1 "$LOGS")"
fi
# fuse3's package puts fusermount3 in /bin, which dpkg -x unpacks as a
# directory of its own (not the usr-merged symlink): without it every
# unmount fails and each daemon waits to be killed
if ! command -v fusermount3 >/dev/null; then
	for d in "$P/bin" "$P/usr/bin"; do
		[ -x "$d/fusermount3" ] && PATH=$PATH:$d && break
	done
fi
FUSERMOUNT=$(command -v fusermount3 || echo "not found: unmounts fall back to umount -l")
STAGEFS=$WORK/wbin/stagefs RB=$WORK/wbin/readbench GB=$WORK/wbin/gpubench AUB=$WORK/wbin/aubench

# ---------------------------------------------------------------------------
# facts

RUNTIME=unknown
if grep -qi gvisor /proc/version 2>/dev/null || dmesg 2>/dev/null | grep -ci gvisor >/dev/null; then
	RUNTIME=gVisor
elif uname -r | grep -c -- '-fc' >/dev/null || grep -qi firecracker /proc/cmdline /sys/class/dmi/id/* 2>/dev/null ||
	grep -q 'virtio_mmio.device=' /proc/cmdline 2>/dev/null; then
	RUNTIME=Firecracker
elif systemd-detect-virt -q 2>/dev/null; then
	RUNTIME=$(systemd-detect-virt 2>/dev/null)
fi
URING=$(python3 - <<'PY' 2>&1
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, params)	# io_uring_setup(4, &params)
if fd >= 0:
    os.close(fd); print("yes")
else:
    print("no (%s)" % os.strerror(ctypes.get_errno()))
PY
)
[ -r /proc/sys/kernel/io_uring_disabled ] && URING="$URING, io_uring_disabled=$(cat /proc/sys/kernel/io_uring_disabled)"
if [ -c /dev/fuse ] && python3 -c 'import os; os.close(os.open("/dev/fuse", os.O_RDWR))' 2>>"$LOGS"; then
	FUSE=yes
else
	FUSE="no ($([ -e /dev/fuse ] && echo 'cannot open /dev/fuse' || echo 'no /dev/fuse'))"
fi
GPU=no GPUWHY=
if [ "$REHEARSE" = 1 ]; then
	GPUWHY="--rehearse"
elif ! command -v nvidia-smi >/dev/null; then
	GPUWHY="no nvidia-smi"
elif ! "$GB" -p >/dev/null 2>>"$LOGS"; then
	GPUWHY="gpubench -p: no usable GPU ($(tail -1 "$LOGS"))"
else
	GPU=yes
fi
facts() {
	say "# stagefs device check (issue 33)"
	say
	say "$(date -u +%FT%TZ), $([ "$REHEARSE" = 1 ] && echo 'REHEARSAL (GPU steps skipped)' || echo 'on the lent machine'), budget ${BUDGET} s"
	say
	say "## Machine"
	say '```'
	say "carried        $(sed -n 's/^commit //p' "$CARRY/MANIFEST"), $(sed -n 's/^size //p' "$CARRY/MANIFEST"); $(sed -n 's/^needs //p' "$CARRY/MANIFEST"); unpack $UNPACK; $LIBNOTE"
	say "kernel         $(uname -srvm)"
	say "runtime        $RUNTIME"
	say "os             $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}"), glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2)"
	say "cpus           $(nproc) ($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1))"
	say "memory         $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), memlock $(ulimit -l)"
	say "disk           $WORK: $(stat -f -c %T "$WORK"), $(df -h --output=avail "$WORK" | tail -1 | tr -d ' ') free"
	say "/dev/fuse      $FUSE"
	say "fusermount3    $FUSERMOUNT"
	say "io_uring       $URING"
	say "fuse.uring     $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo 'no parameter (kernel < 6.14 or fuse without it)')"
	say "daemon opts    passthrough $(has_option passthrough && echo yes || echo no), uring $(has_option uring && echo yes || echo no)"
	if command -v nvidia-smi >/dev/null; then
		say "nvidia-smi     $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2 | tr '\n' ';')"
		say "cuda (driver)  $(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
	else
		say "nvidia-smi     not found"
	fi
	say "nvcc           $(command -v nvcc >/dev/null && nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p' || echo 'not found'); gpubench built with $(sed -n 's/^cuda //p' "$CARRY/MANIFEST")"
	say "libcufile      $(ldconfig -p 2>/dev/null | grep -c libcufile.so | sed 's/^0$/not in ldconfig/; s/^[1-9].*/in ldconfig/')"
	say "GPU steps      $([ "$GPU" = yes ] && echo run || echo "skipped: $GPUWHY")"
	machine_notes
	say '```'
}

# ---------------------------------------------------------------------------
# steps: each in its own process group, killed at its limit

# sizes: the lent machine (16 cores, NVMe), or this VM in rehearsal
if [ "$REHEARSE" = 1 ] || [ "$GPU" = no ]; then
	BIG_MB=${DC_BIG_MB:-128} LARGE_N=${DC_LARGE_N:-4} LARGE_MB=${DC_LARGE_MB:-32} SMALL_N=${DC_SMALL_N:-800}
	READERS=${DC_READERS:-1 4 16} GPU_ROUNDS=1 AU_FILES=${DC_AU_FILES:-8} AU_Z=${DC_AU_Z:-40} AU_MAX=${DC_AU_MAX:-4}
	AU_START=${DC_AU_START:-1}
	LIM_GPU=40 LIM_WARM=100 LIM_COLD=40 LIM_AU=60	# each takes under a tenth of that here
else
	BIG_MB=${DC_BIG_MB:-2048} LARGE_N=${DC_LARGE_N:-16} LARGE_MB=${DC_LARGE_MB:-256} SMALL_N=${DC_SMALL_N:-10000}
	READERS=${DC_READERS:-1 4 16} GPU_ROUNDS=3 AU_FILES=${DC_AU_FILES:-32} AU_Z=${DC_AU_Z:-1} AU_MAX=${DC_AU_MAX:-32}
	AU_START=${DC_AU_START:-4}	# 1 would run 96 steps of 0.224 s
	LIM_GPU=130 LIM_WARM=200 LIM_COLD=60 LIM_AU=120
fi
SMALL_KB=110
ROUNDS=1

# a daemon that outlives its unmount is waited for this long, described in
# the logs and killed (perf-lib's sfs_umount): the lent machine's first run
# lost 30 s at each of its unmounts
export BENCH_UMOUNT_WAIT=${DC_UMOUNT_WAIT:-8}

STEPN=0
step() {	# step NAME LIMIT_S FUNCTION: run it unless the budget is short
	local name=$1 lim=$2 pid
	shift 2
	CUR=$name
	STEPN=$((STEPN + 1))
	# started with a third of its limit left at least, and cut to what is left
	if [ "$(left)" -lt $((lim / 3)) ]; then
		hdr "$name" "not started"
		skipped "budget: $(left) s left, the step wants up to $lim s"
		SUMMARY_ALL+=("${SUMMARY[@]: -1}")
		return
	fi
	[ "$(left)" -ge "$lim" ] || lim=$(left)
	log "step $name (limit $lim s, $(left) s left)"
	set -m
	SUMFILE=$WORK/sum.$STEPN
	: >"$SUMFILE"
	( "$@"; touch "$SUMFILE.done" ) &
	pid=$!
	set +m
	# the watchdog holds no descriptor of the report's pipe, and its sleep
	# goes with it
	(
		exec >/dev/null 2>&1
		sleep "$lim" &
		trap 'kill $! 2>/dev/null; exit 0' TERM
		wait $!
		kill -TERM -- -"$pid"
		sleep 5
		kill -KILL -- -"$pid"
	) &
	local dog=$!
	wait "$pid"
	kill -TERM "$dog" 2>/dev/null
	wait "$dog" 2>/dev/null
	# the rows a step wrote stay, also when it was stopped
	mapfile -t -O "${#SUMMARY_ALL[@]}" SUMMARY_ALL <"$SUMFILE"
	SUMFILE=
	if [ ! -f "$WORK/sum.$STEPN.done" ]; then
		# killed: its mounts and daemons go with it
		grep -o " $WORK/[^ ]*" /proc/mounts | while read -r m; do fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m"; done
		SUMMARY_ALL+=("$name|FAILED: stopped at its $lim s limit|||| ")
		echo "  FAILED: stopped at its $lim s limit"
	fi
}
SUMMARY_ALL=()

# perf-lib's result/skipped/failed, each row also written at once to the
# running step's file (a step runs in a subshell and may be stopped)
SUMFILE=
eval "_pl_$(declare -f result)"
eval "_pl_$(declare -f skipped)"
eval "_pl_$(declare -f failed)"
result() { _pl_result "$@"; _sum_keep; }
skipped() { _pl_skipped "$@"; _sum_keep; }
failed() { _pl_failed "$@"; _sum_keep; }
_sum_keep() { [ -z "$SUMFILE" ] || printf '%s\n' "${SUMMARY[@]: -1}" >>"$SUMFILE"; }

need_fuse() { [ "$FUSE" = yes ] || { skipped "no FUSE: $FUSE"; return 1; }; }

# prep_big DIR: DIR/src/big (BIG_MB), staged into DIR/cache through a mount
prep_big() {
	local d=$1
	mkdir -p "$d/src"
	gen_big "$d/src/big" "$BIG_MB" || return 1
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache$(fill_opts)" || return 1
	rb bytes_per_s seq "$d/mnt/big" >/dev/null
	local rc=$?
	sfs_umount "$d/mnt"
	return $rc
}

# gpu_on WHERE DIR: gpubench on a staged file; per-GPU stats rows checked
gpu_on() {
	local where=$1 d=$2 out rc feed lo g0 g1 want
	prep_big "$d" || { failed "$where: staging: $(rb_why)"; return; }
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache" || { failed "$where: mount failed"; return; }
	if [ "$GPU" != yes ]; then
		row "$where: staged $BIG_MB MiB, mounted" "ok" "" ""
		sfs_umount "$d/mnt"
		skipped "GPU feed, cache on $where: $GPUWHY"
		return
	fi
	g0=$(gpu_bytes "$d/mnt")
	out=$("$GB" -d 0 -b 64M -r "$GPU_ROUNDS" -D "$d/mnt/big" 2>"$WORK/log/gpubench.err")
	rc=$?
	g1=$(gpu_bytes "$d/mnt")
	# the first device read with cuFile loaded anyway: what its start
	# costs a process where nvidia-fs is missing (docs/gpudirect.md)
	local cuf=
	if [ $rc = 0 ] && [ "$where" = tmpfs ] && ldconfig -p 2>/dev/null | grep -q libcufile.so; then
		cuf=$(STAGEFS_CUFILE=1 "$GB" -d 0 -b 64M -r 1 "$d/mnt/big" 2>>"$LOGS")
	fi
	sfs_umount "$d/mnt"
	cat "$WORK/log/gpubench.err" >>"$LOGS"
	[ $rc = 0 ] || { failed "$where: gpubench rc $rc: $(tail -1 "$WORK/log/gpubench.err")"; return; }
	printf '  %s\n' "$out"
	sed -n 's/^gpubench: /  /p' "$WORK/log/gpubench.err"
	feed=$(jget "$out" feed_bytes_per_s)
	lo=$(awk -v a="$(jget "$out" disk_bytes_per_s)" -v b="$(jget "$out" h2d_bytes_per_s)" 'BEGIN { print (a + 0 < b + 0) ? a : b }')
	row "" "feed" "baseline" "ratio"
	row "$where: / min(disk, pinned H2D)" "$(mbs "$feed")" "$(mbs "$lo")" "$(jget "$out" feed_vs_min_disk_h2d)"
	row "$where: / read()+cudaMemcpy" "$(mbs "$feed")" "$(mbs "$(jget "$out" naive_bytes_per_s)")" "$(jget "$out" feed_vs_naive)"
	result "gpu $where: feed / min(disk, H2D)" "$(mbs "$feed")" "$(mbs "$lo")" "$(jget "$out" feed_vs_min_disk_h2d)" ">=0.9"
	result "gpu $where: feed / read()+cudaMemcpy" "$(mbs "$feed")" "$(mbs "$(jget "$out" naive_bytes_per_s)")" "$(jget "$out" feed_vs_naive)" ">=2"
	row "$where: first device read" "$(jget "$out" first_read_ms) ms" "" "" "cuFile loaded: $(jget "$out" cufile_loaded)"
	[ -z "$cuf" ] || row "$where: the same, STAGEFS_CUFILE=1" "$(jget "$cuf" first_read_ms) ms" "" "" \
		"cuFile loaded: $(jget "$cuf" cufile_loaded), cuFile bytes $(jget "$cuf" cufile_bytes), feed $(mbs "$(jget "$cuf" feed_bytes_per_s)")"
	# the daemon takes at most a file's size per handed-over file
	# (docs/control.md, CLIENT_READ): the rounds read one handle's file
	# again and again, so the rows say its size once
	want=$(jget "$out" bytes)
	row "$where: stats gpus[] / file (want 1)" "$((g1 - g0))" "$want" "$(ratio $((g1 - g0)) "$want")" "via $(sed -n 's/.*"via": "\([a-z_]*\)".*/\1/p' <<<"$out"), cuFile bytes $(jget "$out" cufile_bytes)"
	result "gpu $where: stats GPU rows / file size" "$((g1 - g0))" "$want" "$(ratio $((g1 - g0)) "$want")" ""
}
# gpu_bytes MNT: the sum of gpu_bytes over the "gpus" rows of .stagefs/stats
gpu_bytes() {
	timeout 10 cat "$1/.stagefs/stats" 2>/dev/null | python3 -c '
import json, sys
try:
    s = json.load(sys.stdin)
except ValueError:
    print(0); sys.exit()
def rows(o):
    if isinstance(o, dict):
        if isinstance(o.get("gpus"), list):
            return o["gpus"]
        for v in o.values():
            r = rows(v)
            if r is not None:
                return r
    return None
print(sum(int(r.get("gpu_bytes", 0)) for r in rows(s) or []))'
}

step_gpu() {
	local t
	hdr gpu "$BIG_MB MiB file, warm cache, into GPU 0 with sfs_read_device (gpubench, $GPU_ROUNDS rounds)"
	need_fuse || return
	# tmpfs first: the disk bounds both the feed and read()+cudaMemcpy on
	# the machine's disk, so only a cache in memory tests the pipeline
	t=$WORK/gpu-tmpfs
	mkdir -p "$t"
	if mount -t tmpfs -o size=$((BIG_MB * 2 + 256))m stagefs-devcheck "$t" 2>>"$LOGS"; then
		gpu_on tmpfs "$t"
		umount -l "$t"
	else
		skipped "tmpfs: mount -t tmpfs failed"
	fi
	gpu_on disk "$WORK/gpu-disk"
}

# warm_pair LABEL OPTS N MNTLIST CACHELIST UNIT: one mount, N readers, direct vs mount
warm_pair() {
	local label=$1 opts=$2 n=$3 d=$4 unit=$5 key a b
	key=bytes_per_s
	[ "$unit" = f ] && key=files_per_s
	drop_caches
	a=$(rb "$key" files -t "$n" -b 1M "$d/cache.list") || return 1
	drop_caches
	b=$(rb "$key" files -t "$n" -b 1M "$d/mnt.list") || return 1
	local fa fb
	if [ "$unit" = f ]; then fa=$(fps "$a") fb=$(fps "$b"); else fa=$(mbs "$a") fb=$(mbs "$b"); fi
	row "$label, $n rd" "$fa" "$fb" "$(ratio "$b" "$a")"
	result "warm $label, $n rd" "$fb" "$fa" "$(ratio "$b" "$a")" ">=0.9"
}

# warm_set NAME: stage DIR/src into DIR/cache, then every mode x READERS
warm_set() {
	local name=$1 d=$WORK/$1 unit=B mode opts label n
	[ "$name" = small ] && unit=f
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache$(fill_opts)" || { failed "$name: mount failed"; return; }
	if ! rb files_per_s files -t 4 "$d/mnt.list" >/dev/null ||
		! cache_paths "$d/cache" "$d/mnt.list" "$d/cache.list" 2>"$WORK/log/rb.err"; then
		sfs_umount "$d/mnt"
		failed "$name: staging: $(rb_why)"
		return
	fi
	sfs_umount "$d/mnt"
	row "" "direct" "mount" "ratio"
	for mode in default daemon uring; do
		case $mode in
		default) opts= label="$name, default$(has_option passthrough && echo ' (passthrough=auto)')" ;;
		daemon)
			has_option passthrough || continue	# the default is the daemon path
			opts="passthrough=off,no_open=off" label="$name, daemon path" ;;
		uring)
			if ! has_option uring || [ ! -w /sys/module/fuse/parameters/enable_uring ]; then
				skipped "$name, FUSE over io_uring: no uring option or no fuse.enable_uring"
				continue
			fi
			opts="passthrough=off,no_open=off,uring=on" label="$name, FUSE io_uring"
			has_option passthrough || opts="uring=on" ;;
		esac
		sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache${opts:+,$opts}" || { failed "$label: mount failed"; continue; }
		rb files_per_s files -t 4 "$d/mnt.list" >/dev/null	# first read verifies: not timed
		for n in $READERS; do
			warm_pair "$label" "$opts" "$n" "$d" "$unit" || failed "$label, $n rd: $(rb_why)"
		done
		sfs_umount "$d/mnt"
	done
}

step_warm() {
	local orig
	hdr warm "warm reads through the mount vs the cache files, readers: $READERS"
	need_fuse || return
	orig=$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)
	mkdir -p "$WORK/large/src"
	for i in $(seq "$LARGE_N"); do gen_big "$WORK/large/src/f$i" "$LARGE_MB" || { failed "writing"; return; }; done
	say "  large: $LARGE_N files of $LARGE_MB MiB"
	warm_set large
	gen_files "$WORK/small/src" "$SMALL_N" $((SMALL_KB * 1024)) || { failed "writing"; return; }
	say "  small: $SMALL_N files of $SMALL_KB KiB"
	warm_set small
	[ -z "$orig" ] || echo "$orig" >/sys/module/fuse/parameters/enable_uring 2>/dev/null
}

step_cold() {
	local name d a b unit key fa fb n=16
	hdr cold "cold reads from dir:// on the machine's disk, $n readers, vs direct reads of the source"
	need_fuse || return
	[ -d "$WORK/large/src" ] && [ -d "$WORK/small/src" ] || { skipped "no data (the warm step did not run)"; return; }
	row "" "direct" "mount" "ratio"
	for name in large small; do
		d=$WORK/$name unit=B key=bytes_per_s
		[ "$name" = small ] && unit=f key=files_per_s
		(cd "$d/src" && find . -type f | LC_ALL=C sort | sed "s|^\\.|$d/src|") >"$d/src.list"
		drop_caches
		a=$(rb "$key" files -t $n -b 1M "$d/src.list") || { failed "$name direct: $(rb_why)"; continue; }
		retire "$d/cache"
		drop_caches
		sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/coldcache" || { failed "$name: mount failed"; continue; }
		b=$(rb "$key" files -t $n -b 1M "$d/mnt.list") || { sfs_umount "$d/mnt"; failed "$name: $(rb_why)"; continue; }
		sfs_umount "$d/mnt"
		if [ "$unit" = f ]; then fa=$(fps "$a") fb=$(fps "$b"); else fa=$(mbs "$a") fb=$(mbs "$b"); fi
		row "cold $name, $n rd" "$fa" "$fb" "$(ratio "$b" "$a")"
		result "cold $name, $n rd" "$fb" "$fa" "$(ratio "$b" "$a")" ""
	done
}

# au_search DIR ARGS...: aubench's search on DIR; prints its result line
au_search() {
	local dir=$1
	shift
	"$AUB" search -w resnet50 -e 1 -D -n "$AU_START" -m "$AU_MAX" "$@" "$dir" 2>>"$LOGS" | tee -a "$LOGS" | grep '"result"'
}

step_au() {
	local d=$WORK/au g=-1 a b via
	hdr au "simulated accelerators (aubench, resnet50) at the pass line: through the mount into GPU memory vs read(2) of the local disk"
	need_fuse || return
	[ "$GPU" = yes ] && g=0
	mkdir -p "$d/src"
	"$AUB" gen -w resnet50 -N "$AU_FILES" -z "$AU_Z" "$d/src" >>"$LOGS" 2>&1 || { failed "aubench gen"; return; }
	say "  $AU_FILES files of resnet50 records (samples 1/$AU_Z of 114.7 KB), batch 400, compute 0.224 s a batch, pass 0.90, page cache dropped each epoch"
	# staged first: the warm figure (a cold one is the backend's)
	list_files "$d/src" "$d/mnt" "$d/mnt.list"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache$(fill_opts)" || { failed "mount failed"; return; }
	if ! rb files_per_s files -t 4 "$d/mnt.list" >/dev/null; then
		sfs_umount "$d/mnt"
		failed "staging: $(rb_why)"
		return
	fi
	sfs_umount "$d/mnt"
	sfs_mount "dir://$d/src" "$d/mnt" "cache_dir=$d/cache" || { failed "mount failed"; return; }
	a=$(au_search "$d/mnt" -g "$g") || { sfs_umount "$d/mnt"; failed "aubench search -g $g: $(tail -1 "$LOGS")"; return; }
	sfs_umount "$d/mnt"
	via=$(grep -o '"compute_via": "[^"]*"' "$LOGS" | tail -1 | cut -d'"' -f4)
	b=$(au_search "$d/src") || { failed "aubench search on the disk: $(tail -1 "$LOGS")"; return; }
	row "" "mount, -g $g" "disk, read(2)" "ratio"
	row "accelerators at the pass line" "$(jget "$a" n)" "$(jget "$b" n)" "$(ratio "$(jget "$a" n)" "$(jget "$b" n)")" "compute: ${via:-?}"
	result "au resnet50: N at the pass line, GPU path vs disk" "$(jget "$a" n)" "$(jget "$b" n)" \
		"$(ratio "$(jget "$a" n)" "$(jget "$b" n)")" ">=0.9"
}

main() {
	local uring0
	# uring=on sets fuse.enable_uring; put it back also after a stopped step
	uring0=$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)
	facts
	step gpu "$LIM_GPU" step_gpu
	step warm "$LIM_WARM" step_warm
	step cold "$LIM_COLD" step_cold
	[ -z "$uring0" ] || echo "$uring0" >/sys/module/fuse/parameters/enable_uring 2>/dev/null
	step au "$LIM_AU" step_au
	# each step runs in a subshell: its kills are counted from the logs
	SUMMARY_ALL+=("daemons killed after unmount|$(grep -c '^sfs_umount: .* is still running' "$LOGS")|||| (waited ${BENCH_UMOUNT_WAIT} s each; logs.txt says why)")
	SUMMARY=("${SUMMARY_ALL[@]}")
	ROUNDS="1 (gpu: $GPU_ROUNDS)"
	bench_summary
	say
	say "finished in $((SECONDS - T0)) s of a ${BUDGET} s budget"
}

main 2>>"$LOGS" | tee "$REPORT"
exit 0
