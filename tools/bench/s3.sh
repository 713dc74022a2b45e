#!/usr/bin/env bash
# tools/bench/s3.sh - s3: a dataset read where it lives in an S3 bucket
# SPDX-License-Identifier: Apache-2.0
#
#   s3           BENCH_S3_N (8,000; quick 1,000) ImageNet-like files of
#                BENCH_S3_KB (60-220) KB in 100 directories, put into a bucket
#                of a RADOS Gateway on the lab cluster (tools/dev/s3-put.sh)
#                and published to rados:// as well: one cold shuffled epoch
#                (tools/bench/epoch_reader.py, BENCH_EPOCH_WORKERS (8)
#                readers; OSD cache dropped, page cache dropped, the listing
#                not timed) through stagefs s3://BUCKET/PREFIX (empty cache on
#                a fresh ext4, as in packs), against s3fs over the same
#                bucket, stagefs over the published copy (rados://), and the
#                gateway's own rate: the same GETs by curl, 16 at once, cold
#
#   BENCH_S3_N   s3: number of files (default 8000)
#   BENCH_S3_KB  s3: their sizes, MIN-MAX KB (default 60-220)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec "$(dirname "$0")/run.sh" "$(basename "$0" .sh)" "$@"	# alone: tools/bench.sh NAME

[ "$QUICK" = 1 ] && : "${BENCH_S3_N:=1000}"
S3_N=${BENCH_S3_N:-8000}
S3_KB=${BENCH_S3_KB:-60-220}

bench_s3() {
	local d=$WORK/s3 n=$S3_N r x url cred
	local ss=() fs=() rs=() gs=()
	hdr s3 "$n files of $S3_KB KB in a RADOS Gateway bucket: s3:// against s3fs and rados://"
	need_rados || { skipped "$RADOS_WHY"; return; }
	[ -n "$CLUSTER_DIR" ] || { skipped "needs the benchmark's own lab cluster (a gateway is added to it)"; return; }
	"$STAGEFS" --help 2>&1 | grep -c s3_endpoint >/dev/null || { skipped "stagefs built without libcurl and expat"; return; }
	command -v s3fs >/dev/null || { skipped "s3fs is not installed (the baseline)"; return; }
	mkdir -p "$d/mnt" "$d/s3fs"
	image_tree "$d/src" "$n" "${S3_KB%-*}" "${S3_KB#*-}" 37 || { skipped "could not write the files"; return; }
	url=$("$CLUSTER_SH" rgw "$CLUSTER_DIR" 2>>"$WORK/log/s3.log") || { skipped "no gateway: $(tail -1 "$WORK/log/s3.log")"; return; }
	cred=$CLUSTER_DIR/rgw/credentials
	log "s3: putting the files into bucket bs3"
	"$REPO/tools/dev/s3-put.sh" "$url" "$cred" bs3/train "$d/src" >>"$WORK/log/s3.log" 2>&1 ||
		{ skipped "could not put the files: $(tail -1 "$WORK/log/s3.log")"; return; }
	"$STAGEFS" publish -q -j "$T" "$d/src" "rados://$POOL/bs3" >>"$WORK/log/publish.log" 2>&1 ||
		{ skipped "publish failed: $(tail -1 "$WORK/log/publish.log")"; return; }
	(umask 077; printf '%s:%s\n' "$(sed -n 's/^aws_access_key_id = //p' "$cred")" \
		"$(sed -n 's/^aws_secret_access_key = //p' "$cred")" >"$d/s3fs.passwd")

	local mb=$(((n * 280 >> 10) + 1024))
	sfs_epoch() {	# sfs_epoch SRC SEED: a cold epoch through a fresh stagefs mount
		sfs_cold_epoch "$1" "$d/mnt" "$d/cache" "$mb" "$2" "$n" "s3_endpoint=$url,s3_credentials_file=$cred"
	}
	s3fs_epoch() {	# s3fs_epoch SEED: the same through s3fs (no disk cache: its default)
		cold_start "$d/cache" "$mb"
		s3fs bs3 "$d/s3fs" -o "url=$url,use_path_request_style,passwd_file=$d/s3fs.passwd,ro,parallel_count=8" \
			>>"$WORK/log/s3.log" 2>&1 || return 1
		ls -R "$d/s3fs/train" >/dev/null
		drop_caches
		x=$(epoch_fps "$d/s3fs/train" "$1" "$n")
		fusermount3 -u "$d/s3fs" 2>/dev/null || umount -l "$d/s3fs"
		[ -n "$x" ] && echo "$x"
	}
	gw_rate() {	# gw_rate: files/s of curl's GETs of every object, 16 at once
		local sec
		cold_start "$d/cache" "$mb"
		sec=$("$REPO/tools/dev/s3-put.sh" --get 16 "$url" "$cred" bs3/train "$d/src" 2>>"$WORK/log/s3.log") || return 1
		awk -v n="$n" -v s="$sec" 'BEGIN { printf "%.0f\n", n / s }'
	}
	row "" "s3://" "s3fs" "rados://" "curl GETs"
	for r in $(seq "$ROUNDS"); do
		x=$(sfs_epoch "s3://bs3/train" "$r") || { cachefs_gone "$d/cache"; skipped "the s3:// epoch failed: $(tail -1 "$WORK/log/epoch.err")"; return; }
		ss+=("$x")
		x=$(s3fs_epoch "$r") || { cachefs_gone "$d/cache"; skipped "the s3fs epoch failed: $(tail -1 "$WORK/log/epoch.err")"; return; }
		fs+=("$x")
		x=$(sfs_epoch "rados://$POOL/bs3" "$r") || { cachefs_gone "$d/cache"; skipped "the rados:// epoch failed"; return; }
		rs+=("$x")
		x=$(gw_rate) || { cachefs_gone "$d/cache"; skipped "the gateway's GETs failed"; return; }
		gs+=("$x")
		row "round $r" "$(fps "${ss[-1]}")" "$(fps "${fs[-1]}")" "$(fps "${rs[-1]}")" "$(fps "${gs[-1]}")"
	done
	"$CLUSTER_SH" stop-rgw "$CLUSTER_DIR" >>"$WORK/log/s3.log" 2>&1
	cachefs_gone "$d/cache"
	result "cold epoch, s3://, vs s3fs" "$(fps "$(median "${ss[@]}")")" "$(fps "$(median "${fs[@]}")")" \
		"$(ratio "$(median "${ss[@]}")" "$(median "${fs[@]}")")" ""
	result "cold epoch, s3://, vs rados:// (published)" "$(fps "$(median "${ss[@]}")")" "$(fps "$(median "${rs[@]}")")" \
		"$(ratio "$(median "${ss[@]}")" "$(median "${rs[@]}")")" ""
	result "cold epoch, s3://, vs the gateway's GETs (curl)" "$(fps "$(median "${ss[@]}")")" "$(fps "$(median "${gs[@]}")")" \
		"$(ratio "$(median "${ss[@]}")" "$(median "${gs[@]}")")" ""
}
