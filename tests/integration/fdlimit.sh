#!/usr/bin/env bash
# Descriptors: the daemon raises RLIMIT_NOFILE's soft limit to the hard one and sizes fd_cache from it (notices when it must lower a setting or has few); with far more cached files than descriptors every file reads right, twice.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src
for i in $(seq 0 599); do
	mkdir -p "$src/d$((i % 10))"
	head -c $((1000 + i * 37)) /dev/urandom >"$src/d$((i % 10))/f$i"
done

# run_case NAME HARD SOFT [ARG...]: mount under these limits, read all twice
run_case() {
	local name=$1 hard=$2 soft=$3 mnt=$TEST_TMPDIR/mnt-$1 pid limit
	shift 3
	ulimit -Sn "$soft" && ulimit -Hn "$hard" || skip "cannot set RLIMIT_NOFILE"
	sfs_mount "dir://$src" "$mnt" "cache_dir=$TEST_TMPDIR/cache-$name" log_level=info "$@"
	pid=$(sfs_pid "$mnt")
	limit=$(awk '/^Max open files/ { print $4 }' "/proc/$pid/limits")
	assert_eq "$limit" "$hard" "$name: the daemon's soft RLIMIT_NOFILE"
	for pass in 1 2; do
		drop_caches
		for f in "$src"/d*/f*; do
			cmp -s "$f" "$mnt${f#"$src"}" || die "$name: pass $pass: wrong bytes in ${f#"$src"}"
		done
	done
	assert_eq "$(stat_get "$mnt" read_errors)" 0 "$name: read_errors"
	assert_eq "$(stat_get "$mnt" cache_files)" 600 "$name: cache_files"
	sfs_umount "$mnt"
}

# soft 1024, hard 2048: raised to 2048; auto = 2048 - 2048/8 - 1024 = 768
(
	run_case auto 2048 1024
	grep -q "fd_cache: 768 cache-file descriptors (RLIMIT_NOFILE 2048)" "$(sfs_log "$TEST_TMPDIR/mnt-auto")" ||
		die "auto: no 'fd_cache: 768' line in the log"
	grep -q "only 768 cache-file descriptors" "$(sfs_log "$TEST_TMPDIR/mnt-auto")" ||
		die "auto: no notice about few descriptors"
) || exit $?

# 400 descriptors in all and fd_cache=100000 asked: lowered to 16, said so
(
	run_case low 400 400 fd_cache=100000
	grep -q "fd_cache=100000 is more than RLIMIT_NOFILE (400) leaves room for: using 16" \
		"$(sfs_log "$TEST_TMPDIR/mnt-low")" || die "low: no notice about lowering fd_cache"
) || exit $?

echo "ok: RLIMIT_NOFILE raised, fd_cache sized from it, 600 files read right with 16 to 768 descriptors"
