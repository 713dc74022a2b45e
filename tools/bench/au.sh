#!/usr/bin/env bash
# tools/bench/au.sh - au: simulated accelerators kept busy (MLPerf Storage style, tools/bench/aubench)
# SPDX-License-Identifier: Apache-2.0
#
#   au           MLPerf-Storage-style: the most simulated accelerators kept at the
#                AU pass line (tools/bench/aubench: unet3d, resnet50, cosmoflow), reading
#                from the local disk, stagefs warm, stagefs cold (rados://; the
#                defaults, then epoch_staging=off), ceph-fuse over CephFS, and
#                copy-then-read (cp -r from CephFS)
#
#   BENCH_AU_MB      au: MB of data per workload (default 1400; quick 300)
#   BENCH_AU_EPOCHS  au: epochs per trial (default 2)
#   BENCH_AU_MAX_N   au: most accelerators tried (default 48)
#   BENCH_AU_WORKLOADS  au: which workloads (default "unet3d resnet50 cosmoflow")
#   BENCH_AU_STEPS   au: long trials, each accelerator at least this many steps
#                    (aubench -R; MLPerf Storage asks for 500; default: none,
#                    BENCH_AU_EPOCHS alone; with 500, a trial of 10-20 steps an
#                    epoch runs 25-50 epochs, not 2)
#   BENCH_AU_SYSTEMS au: which systems, in this order (default "local warm cold
#                    coldoff cephfuse copy"; e.g. "cold cephfuse" for a long run)
#   BENCH_AU_S_UNET3D, BENCH_AU_S_RESNET50, BENCH_AU_S_COSMOFLOW
#                    au: compute-time scale factor per workload (default 2, 4, 10)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_AU_MB:=300}"
AU_MB=${BENCH_AU_MB:-1400}
AU_EPOCHS=${BENCH_AU_EPOCHS:-2}
AU_MAX_N=${BENCH_AU_MAX_N:-48}
AU_STEPS=${BENCH_AU_STEPS:-}
AU_WORKLOADS=${BENCH_AU_WORKLOADS:-unet3d resnet50 cosmoflow}
AU_SYSTEMS=${BENCH_AU_SYSTEMS:-local warm cold coldoff cephfuse copy}

# Per workload: the arguments aubench gets (search and gen), and the size of
# one data file in bytes.  Scaled for a 2-vCPU VM (docs/benchmarks.md, "au"):
#   unet3d     samples 1/20 of 146.6 MB, batch 1 (compute per sample kept), S=2
#   resnet50   114.7 KB samples, 313 a record file, batch 40, S=4
#   cosmoflow  2.83 MB samples, batch 1, S=10
au_args() {
	case $1 in
	unet3d) echo "-b 1 -S ${BENCH_AU_S_UNET3D:-2}" ;;
	resnet50) echo "-k 313 -b 40 -S ${BENCH_AU_S_RESNET50:-4}" ;;
	cosmoflow) echo "-b 1 -S ${BENCH_AU_S_COSMOFLOW:-10}" ;;
	esac
}
au_gen_args() {
	case $1 in
	unet3d) echo "-z 20" ;;
	resnet50) echo "-k 313" ;;
	cosmoflow) echo "" ;;
	esac
}
# au_wants SYS: is SYS among BENCH_AU_SYSTEMS?
au_wants() { [[ " $AU_SYSTEMS " == *" $1 "* ]]; }

au_file_bytes() {
	case $1 in
	unet3d) echo 7330000 ;;
	resnet50) echo $((313 * 114700)) ;;
	cosmoflow) echo 2830000 ;;
	esac
}

# stagefs's job row against the tool's own figures (tools/bench/aubench_agree.py):
# au_row MNT JOB prints the row before a trial; au_agree MNT JOB BEFORE
# TRIAL prints the comparison after it (status 1: they disagree).
au_row() { "$PY" "$REPO/tools/bench/aubench_agree.py" row "$1" "$2" 2>>"$WORK/log/au.log"; }
au_agree() { "$PY" "$REPO/tools/bench/aubench_agree.py" check "$@" 2>>"$WORK/log/au.log"; }

# au_cold_ceph: a cold OSD (bluestore cache dropped; restarted if that fails)
au_cold_ceph() {
	[ -n "$CLUSTER_DIR" ] || return 0
	timeout 30 ceph tell osd.0 cache drop >>"$WORK/log/au.log" 2>&1 || osd_restart
}

# Before each trial of system SYS (au_prep_SYS WORKLOAD N): make the state
# that system starts from; AU_STAGING = seconds of staging to count.
au_prep_local() { AU_STAGING=0; }
au_prep_warm() { AU_STAGING=0; }
au_prep_cold() {
	local d=$WORK/au
	AU_STAGING=0
	mountpoint -q "$d/cold" && sfs_umount "$d/cold"
	rm -rf "$d/cold-cache"
	au_cold_ceph
	drop_caches
	sfs_mount "$AU_SRC" "$d/cold" "cache_dir=$d/cold-cache$AU_MOPTS${AU_COLD_OPTS:-}"
}
# the same with epoch staging off: is the default ever worse?
au_prep_coldoff() { AU_COLD_OPTS=,epoch_staging=off au_prep_cold "$@"; }
au_prep_cephfuse() {
	AU_STAGING=0
	"$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$WORK/au/cephfs" >>"$WORK/log/au.log" 2>&1
	au_cold_ceph
	drop_caches
	"$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$WORK/au/cephfs" >>"$WORK/log/au.log" 2>&1
}
au_prep_copy() {
	local d=$WORK/au t0
	au_prep_cephfuse || return 1
	rm -rf "$d/copy" && mkdir -p "$d/copy"
	drop_caches
	# the staging a user would do: cp -r from CephFS, written to disk
	t0=$(now_ms)
	cp -r "$d/cephfs/$1" "$d/copy/$1" && sync || return 1
	AU_STAGING=$(awk -v ms="$(($(now_ms) - t0))" 'BEGIN { printf "%.3f", ms / 1000 }')
}

# au_search SYS WORKLOAD DIR MNT START: aubench's search through the -H
# handshake, the system prepared before each trial; prints a row per trial.
# Sets AU_N, AU_AU, AU_MBS, AU_SPS (the result) and AU_ROW (the line for
# the result's N: tool and stagefs figures).  MNT: a stagefs mount whose
# job row to read ("" for none); each of its trials adds to AU_AGREE or
# AU_DISAGREE.
au_search() {
	local sys=$1 wl=$2 dir=$3 mnt=$4 start=$5 line n before agree job=au-$1-$2 rfd wfd pid
	local -A rows=()
	AU_N=0 AU_AU=0 AU_MBS=0 AU_SPS=0 AU_ROW=
	# shellcheck disable=SC2046
	coproc AUBC { STAGEFS_JOB=$job exec "$AUB" search -H -w "$wl" $(au_args "$wl") -e "$AU_EPOCHS" ${AU_STEPS:+-R "$AU_STEPS"} -D -L "$WORK/au/data" \
		-m "$AU_MAX_N" ${start:+-n "$start"} "$dir" 2>>"$WORK/log/aubench.err"; }
	# bash unsets AUBC when the coprocess exits: keep copies of its fds
	pid=$AUBC_PID
	if [ -z "${AUBC[0]:-}" ]; then	# it has exited already: a usage error
		printf '    %s: aubench failed: %s\n' "$sys" "$(tail -1 "$WORK/log/aubench.err")"
		return
	fi
	exec {rfd}<&"${AUBC[0]}" {wfd}>&"${AUBC[1]}"
	while IFS= read -r line <&"$rfd"; do
		printf '%s %s\n' "$sys" "$line" >>"$WORK/log/au.json"
		case $line in
		prepare*)
			n=${line#prepare }
			if "au_prep_$sys" "$wl" "$n" >>"$WORK/log/au.log" 2>&1; then
				[ -z "$mnt" ] || before=$(au_row "$mnt" "$job") || before=
				echo "go $AU_STAGING" >&"$wfd"
			else
				printf '  %s: preparing the trial failed (see log/au.log)\n' "$sys"
				echo stop >&"$wfd"
			fi
			;;
		'{"trial"'*)
			n=$(jget "$line" n)
			rows[$n]=$(printf '%-9s N=%-3s AU %-6s (epoch 1 %-6s) %5.0f MB/s  wait %6.1f s' \
				"$sys" "$n" "$(jget "$line" au)" "$(sed -n 's/.*"epoch_au": \[\([0-9.]*\).*/\1/p' <<<"$line")" \
				"$(jget "$line" mb_per_s)" "$(jget "$line" wait_s)")
			# a long trial: its steady-state AU (each epoch's first-batch wait left out) too
			[ -z "$AU_STEPS" ] || rows[$n]+=$(printf '  steady %s (%s steps)' "$(jget "$line" au_steady)" "$(jget "$line" steps)")
			printf '    %s%s\n' "${rows[$n]}" "$(awk -v s="$(jget "$line" staging_s)" 'BEGIN { if (s > 0) printf "  (copy %.1f s)", s }')"
			if [ -n "$mnt" ]; then
				if [ -z "$before" ]; then
					agree="stagefs's row unreadable (log/au.log)"
					AU_DISAGREE=$((AU_DISAGREE + 1))
				elif agree=$(au_agree "$mnt" "$job" "$before" "$line"); then
					AU_AGREE=$((AU_AGREE + 1))
				else
					AU_DISAGREE=$((AU_DISAGREE + 1))
				fi
				printf '      %s\n' "$agree"
				rows[$n]+=$'\n'"      $agree"
			fi
			[ "$(jget "$line" errors)" = 0 ] || printf '    read errors: %s\n' "$(tail -1 "$WORK/log/aubench.err")"
			;;
		'{"result"'*)
			AU_N=$(jget "$line" n) AU_AU=$(jget "$line" au) AU_MBS=$(jget "$line" mb_per_s) AU_SPS=$(jget "$line" samples_per_s)
			[ "$(jget "$line" fail_n)" != 0 ] || AU_N=">=$AU_N"
			# none passed: show the AU of the smallest N tried (1)
			[ "$AU_N" != 0 ] || AU_AU="$(jget "$line" fail_au) at N=$(jget "$line" fail_n)"
			;;
		esac
	done
	exec {rfd}<&- {wfd}>&-
	wait "$pid" 2>/dev/null
	AU_ROW=${rows[${AU_N#>=}]:-}
}

bench_au() {
	local d=$WORK/au wl sys n start cnt mb=$AU_MB line nlocal nwarm ncold ncoldoff nfuse ncopy sums=() dir mnt s b w y a m p
	AU_AGREE=0 AU_DISAGREE=0
	hdr au "simulated accelerators kept busy at the pass line (tools/bench/aubench; MLPerf Storage workloads, scaled)"
	[ -x "$AUB" ] || make -C "$REPO" -s tools/bench/aubench >&2 || { skipped "tools/bench/aubench does not build"; return; }
	mkdir -p "$d/data"
	for wl in $AU_WORKLOADS; do
		cnt=$((mb * 1000000 / $(au_file_bytes "$wl")))
		log "au: writing $wl: $cnt files ($mb MB)"
		# shellcheck disable=SC2046
		"$AUB" gen -w "$wl" -N "$cnt" $(au_gen_args "$wl") "$d/data" >>"$WORK/log/au.log" ||
			{ skipped "aubench gen failed"; return; }
	done
	printf '  dataset: %s MB per workload (%s in all; %s GiB RAM), %s epochs%s, page cache dropped before every epoch\n' \
		"$mb" "$(du -sh "$d/data" | cut -f1)" "$(awk '/MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)" "$AU_EPOCHS" \
		"${AU_STEPS:+ or more, to $AU_STEPS steps an accelerator (-R)}"
	for wl in $AU_WORKLOADS; do
		printf '  %-9s aubench %s (gen %s), pass %s\n' "$wl" "$(au_args "$wl")" "$(au_gen_args "$wl")" \
			"$([ $wl = cosmoflow ] && echo 0.70 || echo 0.90)"
	done
	# the sources: Ceph (rados:// and CephFS) where there is one
	AU_SRC= AU_MOPTS= AU_FS=
	if need_rados; then
		log "au: publishing the dataset"
		if publish_set "$d/data" au 4M; then
			AU_SRC=rados://$POOL/au AU_MOPTS=",ceph_conf=$CEPH_CONF"
		else
			printf '  note: stagefs publish failed: no stagefs cold\n'
		fi
		if "$CLUSTER_SH" fs "$CLUSTER_DIR" >>"$WORK/log/au.log" 2>&1 &&
			"$CLUSTER_SH" mount-fs "$CLUSTER_DIR" "$d/cephfs" >>"$WORK/log/au.log" 2>&1; then
			log "au: copying the dataset into CephFS"
			if cp -r "$d/data/." "$d/cephfs/" && sync; then
				AU_FS=1
			else
				printf '  note: copying into CephFS failed: no ceph-fuse or copy-then-read\n'
			fi
		else
			printf '  note: no CephFS (%s): no ceph-fuse or copy-then-read (ceph-mds, ceph-fuse installed?)\n' \
				"$(grep -h 'error' "$WORK/log/au.log" | tail -1)"
		fi
	else
		printf '  note: %s: stagefs warm from a dir:// source; no cold, ceph-fuse or copy-then-read\n' "$RADOS_WHY"
	fi
	# the warm mount: the same source as cold, its cache filled once
	if au_wants warm; then
		log "au: filling the warm cache"
		sfs_mount "${AU_SRC:-dir://$d/data}" "$d/warm" "cache_dir=$d/warm-cache${AU_SRC:+$AU_MOPTS}$(fill_opts)" ||
			{ failed "warm mount failed"; return; }
		list_files "$d/data" "$d/warm" "$d/warm.list"
		rb bytes_per_s files -t 8 -s 0 "$d/warm.list" >/dev/null &&
			cache_paths "$d/warm-cache" "$d/warm.list" /dev/null 2>"$WORK/log/rb.err" ||
			{ failed "filling the warm cache: $(rb_why)"; sfs_umount "$d/warm"; return; }
		sfs_umount "$d/warm"
		sfs_mount "${AU_SRC:-dir://$d/data}" "$d/warm" "cache_dir=$d/warm-cache${AU_SRC:+$AU_MOPTS}" ||
			{ failed "warm mount failed"; return; }
		# the first read after a start verifies the chunks: not timed
		rb bytes_per_s files -t 8 -s 0 "$d/warm.list" >/dev/null ||
			{ failed "warm: $(rb_why)"; sfs_umount "$d/warm"; return; }
	fi

	for wl in $AU_WORKLOADS; do
		printf '  %s:\n' "$wl"
		nlocal=- nwarm=- ncold=- ncoldoff=- nfuse=- ncopy=-
		start=
		for sys in $AU_SYSTEMS; do
			case $sys in
			local) dir=$d/data mnt= ;;
			warm) dir=$d/warm mnt=$d/warm ;;
			cold | coldoff) [ -n "$AU_SRC" ] || continue; dir=$d/cold mnt=$d/cold ;;
			cephfuse) [ -n "$AU_FS" ] || continue; dir=$d/cephfs mnt= ;;
			copy) [ -n "$AU_FS" ] || continue; dir=$d/copy mnt= ;;
			esac
			drop_caches
			au_search "$sys" "$wl" "$dir" "$mnt" "$start"
			printf '  %-9s largest N %-5s AU %s  %s MB/s  %s samples/s\n' "$sys" "$AU_N" "$AU_AU" "$AU_MBS" "$AU_SPS"
			sums+=("$wl|$sys|$AU_N|$AU_AU|$AU_MBS|$AU_SPS|$AU_ROW")
			case $sys in
			local) nlocal=${AU_N#>=}; start=$nlocal ;;
			warm) nwarm=${AU_N#>=} ;;
			cold) ncold=${AU_N#>=}; mountpoint -q "$d/cold" && sfs_umount "$d/cold" ;;
			coldoff) ncoldoff=${AU_N#>=}; mountpoint -q "$d/cold" && sfs_umount "$d/cold" ;;
			cephfuse) nfuse=${AU_N#>=} ;;
			copy) ncopy=${AU_N#>=} ;;
			esac
			[ "$start" != 0 ] || start=
		done
		[ "$nwarm" = - ] || [ "$nlocal" = - ] ||
			result "au $wl: warm / local disk (N)" "N=$nwarm" "N=$nlocal" "$(ratio "$nwarm" "$nlocal")" ">=0.9"
		[ "$ncold" = - ] || [ "$ncoldoff" = - ] ||
			result "au $wl: cold / cold with staging off (N)" "N=$ncold" "N=$ncoldoff" "$(ratio "$ncold" "$ncoldoff")" ">=1"
		[ "$ncold" = - ] || [ "$nfuse" = - ] ||
			result "au $wl: cold / ceph-fuse (N)" "N=$ncold" "N=$nfuse" "$(ratio "$ncold" "$nfuse")" ">=2"
		[ "$ncold" = - ] || [ "$ncopy" = - ] ||
			result "au $wl: cold / copy-then-read (N)" "N=$ncold" "N=$ncopy" "$(ratio "$ncold" "$ncopy")" ""
	done
	! au_wants warm || sfs_umount "$d/warm"
	[ -z "$AU_FS" ] || "$CLUSTER_SH" umount-fs "$CLUSTER_DIR" "$d/cephfs" >>"$WORK/log/au.log" 2>&1
	printf '\n  largest N at the pass line (AU, MB/s, samples/s at that N)\n'
	printf '  %-10s %-22s %-22s %-22s %-22s %-22s %-22s\n' workload "local disk" "stagefs warm" "stagefs cold" \
		"cold, staging off" "ceph-fuse" "copy-then-read"
	for wl in $AU_WORKLOADS; do
		line=$(printf '  %-10s' "$wl")
		for sys in local warm cold coldoff cephfuse copy; do
			s=-
			for b in "${sums[@]}"; do
				IFS='|' read -r w y n a m p _ <<<"$b"
				[ "$w|$y" = "$wl|$sys" ] || continue
				if [ "$n" = 0 ]; then
					s="0 (AU ${a% at*} at ${a#* at N=})"
				else
					s=$(printf '%s (%.2f, %.0f, %.0f)' "$n" "$a" "$m" "$p")
				fi
			done
			line+=$(printf ' %-22s' "$s")
		done
		printf '%s\n' "$line"
	done
	printf '\n  at that N, stagefs'"'"'s job row against the tool (tools/bench/aubench_agree.py: bytes exact, or within 10 %% where\n'
	printf '  estimated; stall share = stall_ns / active_ns between the readers'"'"' lost and blocked shares of their active\n'
	printf '  time, plus or minus 5 points; docs/benchmarks.md):\n'
	for b in "${sums[@]}"; do
		IFS='|' read -r w y _ <<<"$b"
		line=${b#*|*|*|*|*|*|}	# the row and its comparison: two lines
		case $y in warm | cold | coldoff) [ -z "$line" ] || printf '    %-9s %s\n' "$w" "$line" ;; esac
	done
	printf '  stagefs'"'"'s figures agree with the tool'"'"'s in %s of %s stagefs trials\n' "$AU_AGREE" $((AU_AGREE + AU_DISAGREE))
}
