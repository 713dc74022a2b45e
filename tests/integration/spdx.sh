#!/usr/bin/env bash
# Every source file of the tree (C, shell, Python, the Makefile and configure) says its license in its first five lines: SPDX-License-Identifier.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
command -v git >/dev/null || skip "no git"
git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1 || skip "$REPO is not a git checkout (the file list comes from git ls-files)"
missing=()
n=0
while IFS= read -r f; do
	case $f in
	*.c | *.h | *.sh | *.py | Makefile | configure | install-deps | .ci/run) ;;
	*) continue ;;
	esac
	[[ -f $REPO/$f ]] || continue
	n=$((n + 1))
	head -n 5 "$REPO/$f" | contains "SPDX-License-Identifier: " || missing+=("$f")
done < <(git -C "$REPO" ls-files)
[[ ${#missing[@]} -eq 0 ]] || die "no SPDX-License-Identifier in the first 5 lines of: ${missing[*]}"
assert_gt "$n" 200 "source files checked"
log "ok: $n source files name their license"
