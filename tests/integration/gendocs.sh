#!/usr/bin/env bash
# The committed conf/stagefs.conf.example, docs/configuration.md and the settings of man/stagefs.8.scd and man/stagefs.conf.5.scd are what the binary generates from its option table.
# timeout: 30
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"

[[ -x $STAGEFS ]] || die "no $STAGEFS (run make)"
"$REPO/tools/dev/gendocs.sh" --check "$STAGEFS" ||
	die "generated files are stale: run \`make docs\` and commit them"
exit 0
