#!/usr/bin/env bash
# stagefs warmup output: a progress bar redrawn with \r on a terminal (pty via script), plain lines otherwise, and --json that python parses.
# timeout: 200
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
command -v script >/dev/null || skip "script(1) (util-linux) is not installed"

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src/data"
for i in $(seq -w 1 12); do
	head -c $((4 * 1024 * 1024)) /dev/urandom >"$src/data/f$i.bin"
done
# 48 MiB at 16 MB/s: about 3 s of progress
sfs_mount "dir://$src" "$mnt" chunk_size=1M backend_max_rate=16M

log "on a pseudo-terminal"
script -qefc "$STAGEFS warmup $mnt/data" /dev/null >"$TEST_TMPDIR/tty.out" </dev/null
od -c "$TEST_TMPDIR/tty.out" | sed -n 1,20p >&2
"$PYTHON" - "$TEST_TMPDIR/tty.out" <<'PY'
import re, sys
out = open(sys.argv[1], "rb").read().decode()
bars = re.findall(r"\r\[[#.]{30}\] +\d+%", out)
assert len(bars) >= 3, "expected a bar redrawn at least 3 times: %r" % out[-600:]
assert "MB/s" in out and "ETA" in out, out[-600:]
assert re.search(r"\[#{30}\] 100%", out), "no final full bar: %r" % out[-600:]
assert re.search(r"\n12 files, 48 chunks", out.replace("\r\n", "\n")), "no summary: %r" % out[-600:]
PY

log "plain progress lines when not on a terminal"
"$STAGEFS" warmup --evict "$mnt/data" >/dev/null 2>&1
"$STAGEFS" warmup "$mnt/data" >"$TEST_TMPDIR/plain.out" 2>"$TEST_TMPDIR/plain.err"
cat "$TEST_TMPDIR/plain.err" >&2
grep -q $'\r' "$TEST_TMPDIR/plain.err" && die "carriage returns in non-terminal output"
n=$(grep -c '^warmup: [0-9]*% ' "$TEST_TMPDIR/plain.err")
assert_ge "$n" 2 "progress lines"
grep -q '^12 files, 48 chunks' "$TEST_TMPDIR/plain.out" || die "no summary on stdout"

log "--json"
"$STAGEFS" warmup --evict "$mnt/data" >/dev/null 2>&1
"$STAGEFS" warmup --json --quiet "$mnt/data" >"$TEST_TMPDIR/j.out" 2>"$TEST_TMPDIR/j.err"
[[ ! -s $TEST_TMPDIR/j.err ]] || die "--quiet printed: $(cat "$TEST_TMPDIR/j.err")"
"$PYTHON" - "$TEST_TMPDIR/j.out" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read())
for k in ("files", "chunks", "bytes", "cached_before", "fetched", "failed", "seconds"):
    assert k in d, (k, d)
assert d["files"] == 12 and d["chunks"] == 48 and d["bytes"] == 48 << 20, d
assert d["fetched"] == 48 and d["cached_before"] == 0 and d["failed"] == 0, d
assert d["seconds"] > 1.0, d	# the rate cap held it to ~3 s
PY
"$STAGEFS" warmup --check --json "$mnt/data/f01.bin" >"$TEST_TMPDIR/c.out"
"$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["files"]==1 and d["cached_before"]==4, d' "$TEST_TMPDIR/c.out"
sfs_umount "$mnt"
