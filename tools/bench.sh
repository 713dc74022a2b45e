#!/usr/bin/env bash
# tools/bench.sh - the benchmarks' entry point: tools/bench/run.sh, kept here
# SPDX-License-Identifier: Apache-2.0
# because docs, scripts and habits call it by this name (docs/benchmarks.md).
#
#   tools/bench.sh [NAME...|all]      as tools/bench/run.sh; --help lists them
exec "$(dirname "${BASH_SOURCE[0]}")/bench/run.sh" "$@"
