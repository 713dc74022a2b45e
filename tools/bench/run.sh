#!/usr/bin/env bash
# tools/bench/run.sh - stagefs benchmarks: ratios against a baseline measured in
# SPDX-License-Identifier: Apache-2.0
# the same run.  Speed is measured here, not by timed tests.
#
#   tools/bench.sh [warm|smallfiles|passthrough|smallhot|uring|rados|publish|manifest|index|warmup|packs|cephfs|cfswalk|s3|hints|epoch|coldsmall|restart|peers|peertls|gpu|au|all]...
#
# (tools/bench.sh runs this script; tools/bench/NAME.sh runs one benchmark
# alone.)  Each benchmark is a script of its own, tools/bench/NAME.sh, on
# the shared library tools/bench/perf-lib.sh, as in git's t/perf; each
# says in its first lines what it measures and which knobs it reads, and
# --help gathers them:
#
#   @benchmarks
#
# Each prints a table; at the end one summary table of ratio vs target.  A
# sub-benchmark whose piece is not built yet prints "skipped: <why>".  The
# page cache is dropped before every timed read.  Needs root (FUSE mounts).
#
# Environment (sizes shrink for a quick run, e.g. BENCH_QUICK=1):
#   BENCH_DIR        parent of the scratch directory (default /var/tmp; must be
#                    the local disk the cache would live on)
#   BENCH_ROUNDS     rounds per measurement, the median is reported (default 3)
#   BENCH_T          rados/publish/warmup concurrency (default 16)
#   BENCH_STAGEFS    the stagefs binary (default ./stagefs; stagefs-CMD beside it)
#   BENCH_OSD_SIZE   apparent size of the throwaway OSD (default 48G, sparse)
#   BENCH_MOUNT_OPTS extra -o options for every stagefs mount (experiments)
#   BENCH_DROP       what "page cache dropped" drops: 3 (default: pages, dentries
#                    and inodes, so every file costs a LOOKUP too) or 1 (pages
#                    only: a later epoch, whose dentries the kernel still holds)
#   BENCH_KEEP=1     keep the scratch directory
#   BENCH_QUICK=1    small sizes everywhere (a smoke run of the harness)
#   @knobs

set -uo pipefail

# shellcheck source=tools/bench/perf-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/perf-lib.sh" || exit 1

# what `all` runs, in this order (peers runs peertls at its end)
ALL="warm smallfiles passthrough smallhot uring rados publish manifest index warmup packs cephfs cfswalk s3 hints epoch coldsmall restart peers gpu au"
# every benchmark, in the order --help lists them
NAMES="warm smallfiles passthrough smallhot uring rados publish manifest index warmup packs cephfs cfswalk s3 hints epoch coldsmall restart peers peertls gpu au"

# bench_doc NAME PART: from the header of tools/bench/NAME.sh, its first
# paragraph (PART 1: what it measures) or its second (PART 2: its knobs)
bench_doc() {
	awk -v part="$2" 'NR <= 3 { next } !/^#/ { exit } /^#$/ { p++; next } p == part { sub(/^# ?/, ""); print }' \
		"$BENCH_LIB_DIR/$1.sh"
}

# usage: this header, with each benchmark's own lines where it says so
usage() {
	local line n
	while IFS= read -r line; do
		case $line in
		'#!'* | *SPDX-License-Identifier*) ;;
		'#   @benchmarks') for n in $NAMES; do bench_doc "$n" 1; done ;;
		'#   @knobs') for n in $NAMES; do bench_doc "$n" 2; done ;;
		'#'*) line=${line#\#} && printf '%s\n' "${line# }" ;;
		*) break ;;
		esac
	done <"${BASH_SOURCE[0]}" >&2
	exit 2
}

main() {
	local b allv todo=()
	for b in "${@:-all}"; do
		case $b in
		all) read -ra allv <<<"$ALL"; todo+=("${allv[@]}") ;;
		-h | --help) usage ;;
		*)
			case " $NAMES " in
			*" $b "*) todo+=("$b") ;;
			*) printf 'bench.sh: unknown benchmark %s\n' "$b" >&2; usage ;;
			esac
			;;
		esac
	done
	bench_source "${todo[@]}" || exit 1
	bench_start
	for b in "${todo[@]}"; do
		bench_run "$b"
	done
	bench_summary
}

# one line, read whole before it runs: editing this file during a run is
# safe (and the benchmarks' files are all read before the first one runs)
main "$@"; exit $?
