#!/usr/bin/env bash
# Bad configs and options are refused with a clear message (FILE:LINE for INI files); --help, --version and --print-config work.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src" "$mnt"
printf 'data\n' >"$src/f"
base_o="cache_dir=$TEST_TMPDIR/cache,runtime_dir=$TEST_TMPDIR/run"

# must_fail WHAT REGEX... -- ARGS: stagefs ARGS must exit non-zero within
# 20 s, print a match for each (extended) regex on stderr, and mount nothing.
must_fail() {
	local what=$1 rc=0 s
	shift
	local want=()
	while [[ $1 != -- ]]; do
		want+=("$1")
		shift
	done
	shift
	timeout 20 "$STAGEFS" "$@" </dev/null >"$TEST_TMPDIR/out" 2>"$TEST_TMPDIR/err" || rc=$?
	if mountpoint -q "$mnt"; then
		fusermount3 -u -z "$mnt"
		die "$what: stagefs mounted (rc=$rc); expected a refusal"
	fi
	[[ $rc -ne 0 ]] || die "$what: exited 0; expected a refusal"
	[[ $rc -ne 124 ]] || die "$what: still running after 20 s; expected a refusal"
	for s in "${want[@]}"; do
		grep -qE -- "$s" "$TEST_TMPDIR/err" ||
			die "$what: stderr lacks '$s'; stderr was: $(cat "$TEST_TMPDIR/err") stdout was: $(cat "$TEST_TMPDIR/out")"
	done
	log "ok: $what (rc=$rc): $(head -n 1 "$TEST_TMPDIR/err")"
}

ini() { printf '%s\n' "$@" >"$TEST_TMPDIR/$cfgname"; }

# A bad value on line 7.
cfgname="bad-value.ini"
ini "# stagefs test config" "" "[stagefs]" "# a comment" "log_level = info" \
    "cache_size = 10G" "chunk_size = banana" "threads = 4"
must_fail "bad value on line 7" "$TEST_TMPDIR/bad-value.ini:7:" chunk_size -- \
	-f -c "$TEST_TMPDIR/bad-value.ini" -o "$base_o" "dir://$src" "$mnt"

cfgname="out-of-range.ini"
ini "[stagefs]" "threads = 100000"
must_fail "out-of-range value" "$TEST_TMPDIR/out-of-range.ini:2:" threads -- \
	-f -c "$TEST_TMPDIR/out-of-range.ini" -o "$base_o" "dir://$src" "$mnt"

cfgname="unknown-key.ini"
ini "[stagefs]" "log_level = info" "no_such_setting = 1"
must_fail "unknown key" "$TEST_TMPDIR/unknown-key.ini:3:" no_such_setting -- \
	-f -c "$TEST_TMPDIR/unknown-key.ini" -o "$base_o" "dir://$src" "$mnt"

cfgname="unknown-section.ini"
ini "[stagefs]" "log_level = info" "" "[nonsense]" "x = 1"
must_fail "unknown section" "$TEST_TMPDIR/unknown-section.ini:[45]:" nonsense -- \
	-f -c "$TEST_TMPDIR/unknown-section.ini" -o "$base_o" "dir://$src" "$mnt"

cfgname="malformed.ini"
ini "[stagefs]" "log_level = info" "this line has no equals sign"
must_fail "malformed line" "$TEST_TMPDIR/malformed.ini:3:" -- \
	-f -c "$TEST_TMPDIR/malformed.ini" -o "$base_o" "dir://$src" "$mnt"

must_fail "missing config file" "$TEST_TMPDIR/no-such.ini" -- \
	-f -c "$TEST_TMPDIR/no-such.ini" -o "$base_o" "dir://$src" "$mnt"

# What is not a config file is refused, naming the path (issue 17: the INI
# reader read a directory as an empty file, and an empty file as "no rules").
mkdir "$TEST_TMPDIR/conf.d"
must_fail "-c DIRECTORY" "$TEST_TMPDIR/conf.d: is a directory" -- \
	-f -c "$TEST_TMPDIR/conf.d" -o "$base_o" "dir://$src" "$mnt"
: >"$TEST_TMPDIR/empty.ini"
must_fail "empty config file" "$TEST_TMPDIR/empty.ini: .*empty" -- \
	-f -c "$TEST_TMPDIR/empty.ini" -o "$base_o" "dir://$src" "$mnt"
cfgname="comments.ini"
ini "# [dataset a]" "; allow = uid:1"
must_fail "config file of comments only" "$TEST_TMPDIR/comments.ini: .*empty" -- \
	-f -c "$TEST_TMPDIR/comments.ini" -o "$base_o" "dir://$src" "$mnt"
must_fail "unreadable config file" "/proc/self/mem: cannot read" -- \
	-f -c /proc/self/mem -o "$base_o" "dir://$src" "$mnt"

# A repeated [dataset X] is an error naming both lines, not a silent merge.
cfgname="dup.ini"
ini "[dataset a]" "source = dir://$src" "allow = uid:1" "" "[dataset b]" "source = dir://$src" \
    "" "[dataset a]" "allow = *"
must_fail "repeated [dataset a]" "$TEST_TMPDIR/dup.ini:8: \\[dataset a\\] repeats the section of line 1" -- \
	-f -c "$TEST_TMPDIR/dup.ini" -o "$base_o" "$mnt"

# A very long line is reported at its own line, not one further down.
cfgname="long.ini"
ini "[stagefs]" "log_level = info" "client_id = $(printf '%0300d' 7)" "threads = 4"
must_fail "very long line" "$TEST_TMPDIR/long.ini:3: line longer than" -- \
	-f -c "$TEST_TMPDIR/long.ini" -o "$base_o" "dir://$src" "$mnt"

# Range errors print integers as written, not 4.29497e+09.
cfgname="range.ini"
ini "[stagefs]" "threads = 4294967296"
must_fail "range error prints an integer" "$TEST_TMPDIR/range.ini:2: threads: 4294967296 is out of range \\[0, 256\\]" -- \
	-f -c "$TEST_TMPDIR/range.ini" -o "$base_o" "dir://$src" "$mnt"
grep -q 'e+' "$TEST_TMPDIR/err" && die "range error in floating point: $(cat "$TEST_TMPDIR/err")"
cfgname="size64.ini"
ini "[stagefs]" "cache_size = 9223372036854775808"
must_fail "a size of 2^63" "$TEST_TMPDIR/size64.ini:2: cache_size: .*at most 9223372036854775807" -- \
	-f -c "$TEST_TMPDIR/size64.ini" -o "$base_o" "dir://$src" "$mnt"

# -o.
must_fail "bad -o size" chunk_size -- -f -o "$base_o,chunk_size=abc" "dir://$src" "$mnt"
must_fail "-o size below the minimum" chunk_size -- -f -o "$base_o,chunk_size=1K" "dir://$src" "$mnt"
must_fail "-o size not a power of two" chunk_size -- -f -o "$base_o,chunk_size=96K" "dir://$src" "$mnt"
must_fail "bad -o bool" allow_other -- -f -o "$base_o,allow_other=maybe" "dir://$src" "$mnt"
must_fail "bad -o duration" rados_timeout -- -f -o "$base_o,rados_timeout=soon" "dir://$src" "$mnt"
must_fail "bad -o log level" log_level -- -f -o "$base_o,log_level=loud" "dir://$src" "$mnt"
must_fail "unknown -o" no_such_option -- -f -o "$base_o,no_such_option=1" "dir://$src" "$mnt"
must_fail "relative cache_dir" cache_dir -- -f -o "cache_dir=relative/cache,runtime_dir=$TEST_TMPDIR/run" "dir://$src" "$mnt"

# Sources and mount points.
must_fail "missing source directory (foreground)" "$TEST_TMPDIR/no-such-src" -- \
	-f -o "$base_o" "dir://$TEST_TMPDIR/no-such-src" "$mnt"
must_fail "missing source directory (background)" "$TEST_TMPDIR/no-such-src" -- \
	-o "$base_o" "dir://$TEST_TMPDIR/no-such-src" "$mnt"
must_fail "missing mount point" "$TEST_TMPDIR/no-such-mnt" -- \
	-f -o "$base_o" "dir://$src" "$TEST_TMPDIR/no-such-mnt"
must_fail "unknown source scheme" "ftp" -- -f -o "$base_o" "ftp://host/x" "$mnt"
must_fail "missing arguments" . -- -f -o "$base_o"

# --help lists every setting in the option table (src/config.c).  While
# someone edits the table, a binary older than it cannot know the new rows:
# then the table is the binary's own, as --print-config prints it.
rc=0
"$STAGEFS" --help >"$TEST_TMPDIR/help" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || die "--help exited $rc: $(cat "$TEST_TMPDIR/help")"
if [[ $REPO/src/config.c -nt $STAGEFS ]]; then
	log "note: src/config.c is newer than $STAGEFS; taking the settings from --print-config"
	mapfile -t names < <("$STAGEFS" --print-config | sed -n 's/^[#;]*[[:space:]]*\([a-z0-9_]*\)[[:space:]]*=.*/\1/p')
else
	mapfile -t names < <(sed -n 's/^[[:space:]]*{ *"\([a-z0-9_]*\)", *OPT_.*/\1/p' "$REPO/src/config.c")
fi
[[ ${#names[@]} -ge 10 ]] || die "could not read the option table (found ${#names[@]} names)"
for n in "${names[@]}"; do
	grep -qw -- "$n" "$TEST_TMPDIR/help" || die "--help does not mention '$n'"
done
log "ok: --help lists all ${#names[@]} settings"

# --version prints the version from version.h.
version=$(sed -n 's/^#define STAGEFS_VERSION "\(.*\)"/\1/p' "$REPO/version.h")
out=$("$STAGEFS" --version 2>&1) || die "--version exited non-zero: $out"
[[ -n $version && $out == *"$version"* ]] || die "--version printed '$out', expected it to contain '$version'"
log "ok: --version: $out"

# --print-config parses back cleanly: as printed (all commented out), and with
# every setting uncommented.  cache_dir and runtime_dir are pointed at the
# test's directories in the file and with -o, which wins over the file.
"$STAGEFS" --print-config >"$TEST_TMPDIR/example.ini" || die "--print-config exited non-zero"
[[ -s $TEST_TMPDIR/example.ini ]] || die "--print-config printed nothing"
for n in "${names[@]}"; do
	grep -qw -- "$n" "$TEST_TMPDIR/example.ini" || die "--print-config does not mention '$n'"
done
"$PYTHON" - "$TEST_TMPDIR/example.ini" "$TEST_TMPDIR/uncommented.ini" "$TEST_TMPDIR" <<'PY'
import re, sys
src, dst, tmp = sys.argv[1:]
out, n, settings = [], 0, True
for line in open(src):
    # the commented [dataset NAME] and [quota] examples at the end stay so
    if re.match(r"^[#;]\s*\[", line):
        settings = False
    m = re.match(r"^[#;]\s*([a-z0-9_]+)\s*=(.*)$", line)
    if m and settings:
        line = f"{m.group(1)} ={m.group(2)}\n"
        n += 1
    k = re.match(r"^\s*([a-z0-9_]+)\s*=", line)
    if k and k.group(1) == "cache_dir":
        line = f"cache_dir = {tmp}/cache\n"
    elif k and k.group(1) == "runtime_dir":
        line = f"runtime_dir = {tmp}/run\n"
    out.append(line)
if n < 10:
    sys.exit(f"only {n} commented settings found in the example")
open(dst, "w").write("".join(out))
PY
for cfg in example.ini uncommented.ini; do
	sfs_mount "dir://$src" "$mnt" -c "$TEST_TMPDIR/$cfg"
	[[ $(cat "$mnt/f") == data ]] || die "$cfg: wrong content through the mount"
	sfs_umount "$mnt"
	log "ok: mounted with $cfg"
done

# A good file that sets something, and -o wins over it.
cfgname="good.ini"
ini "; a comment" "[stagefs]" "chunk_size = 128K" "log_level = debug" "cache_dir = /nonexistent/never/used"
sfs_mount "dir://$src" "$mnt" -c "$TEST_TMPDIR/good.ini"
[[ $(cat "$mnt/f") == data ]] || die "good.ini: wrong content"
[[ ! -e /nonexistent/never/used ]] || die "cache_dir from the file was used although -o cache_dir was given"
sfs_umount "$mnt"
log "ok: good.ini"

# SIGHUP with the file emptied, or turned into a directory, or with a
# [dataset] repeated: the reload is refused and the old rules stay (it
# used to be "reloaded ...: 0 datasets", every allow list dropped).
mkdir -p "$TEST_TMPDIR/ds"
printf 'x\n' >"$TEST_TMPDIR/ds/f"
cfgname="reload.ini"
ini "[dataset a]" "source = dir://$TEST_TMPDIR/ds" "allow = uid:0"
sfs_mount "" "$mnt" -c "$TEST_TMPDIR/reload.ini"
pid=$(sfs_pid "$mnt") sfslog=$(sfs_log "$mnt")
n=0
hup_refused() {
	local what=$1 want=$2
	n=$((n + 1))
	kill -HUP "$pid"
	wait_for eval '[[ $(grep -c "reload refused" "$sfslog") -ge $n ]]' ||
		die "SIGHUP with $what: no refusal; log: $(tail -n 3 "$sfslog")"
	grep "reload refused" "$sfslog" | tail -n 1 | contains -E -- "$want" ||
		die "SIGHUP with $what: $(grep "reload refused" "$sfslog" | tail -n 1); want '$want'"
	! grep -q "reloaded " "$sfslog" || die "SIGHUP with $what was taken: $(grep "reloaded " "$sfslog")"
	[[ $(cat "$mnt/a/f") == x ]] || die "after SIGHUP with $what: dataset a unreadable"
	log "ok: SIGHUP with $what refused, old rules in force"
}
: >"$TEST_TMPDIR/reload.ini"
hup_refused "an empty file" "reload.ini: .*empty"
ini "[dataset a]" "source = dir://$TEST_TMPDIR/ds" "allow = uid:0" "[dataset a]" "allow = *"
hup_refused "[dataset a] twice" "reload.ini:4: .*line 1"
rm "$TEST_TMPDIR/reload.ini"
mkdir "$TEST_TMPDIR/reload.ini"
hup_refused "a directory" "reload.ini: is a directory"
sfs_umount "$mnt"

# A size of 2^63 - 1, the docs' "at most", is taken (it was refused: a
# double cannot hold it).
cfgname="size63.ini"
ini "[stagefs]" "cache_size = 9223372036854775807" "hint_window_bytes = 9223372036854775807"
sfs_mount "dir://$src" "$mnt" -c "$TEST_TMPDIR/size63.ini"
[[ $(cat "$mnt/f") == data ]] || die "size63.ini: wrong content"
sfs_umount "$mnt"
log "ok: size63.ini (cache_size = 2^63 - 1)"
