#!/usr/bin/env bash
# s3:// sources against a real RADOS Gateway on the suite's cluster: a tree of objects, listed one directory at a time in the background (the mount answers at once, the same inodes after the walk; an unmount stops it; a large directory listed in key ranges at once, versioned or not, every entry once), (several chunks, small files, an empty one, names with spaces, '+' and UTF-8, a directory marker, an object named as a directory is) reads byte-exact, with keys from a root-only credentials file or the AWS_* environment; warmup fills the cache (no GET after); an object replaced under the mount gives EIO (logged, If-Match), its neighbours read right; on a versioned bucket replaced and deleted objects read as listed until a remount, and a directory whose keys are all deleted is gone after it; wrong keys, a missing bucket or prefix, a credentials file others can read, a bad endpoint and no keys at all fail the mount with a clear message; a dead gateway gives EIO within the timeout, and the same mount reads the file once it is back; through an endpoint that fails every other read (503 SlowDown, 500, 429, a reset, a cut body) every byte is still right.
# needs: ceph
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount
[[ -n ${CEPH_CONF:-} && -n ${STAGEFS_CEPH_DIR:-} ]] || skip "no Ceph cluster (tests/run.sh starts one with tools/dev/ceph-cluster.sh)"
command -v radosgw >/dev/null || skip "radosgw is not installed (./install-deps installs it): no S3 gateway to read"
"$STAGEFS" --version >/dev/null 2>&1 || die "stagefs does not run"
"$STAGEFS" -h 2>&1 | contains s3_endpoint || skip "this stagefs was built without libcurl and expat (no s3://)"
TOOL=$REPO/tools/dev/ceph-cluster.sh
PUT=$REPO/tools/dev/s3-put.sh
T=$TEST_TMPDIR B=b$$
FPID= LPID=
cleanup() {
	local rc=$?
	trap - ERR
	set +e
	[[ -z $FPID ]] || kill "$FPID" 2>/dev/null
	[[ -z $LPID ]] || kill "$LPID" 2>/dev/null
	"$TOOL" stop-rgw "$STAGEFS_CEPH_DIR" >/dev/null 2>&1
	(exit "$rc")
	_lib_on_exit
}
trap cleanup EXIT

URL=$("$TOOL" rgw "$STAGEFS_CEPH_DIR" 2>"$T/rgw.log") || die "no gateway: $(tail -3 "$T/rgw.log")"
CRED=$STAGEFS_CEPH_DIR/rgw/credentials
log "gateway on $URL"

# the tree: 3 MiB + a bit (4 chunks of 1 MiB), 40 small files, an empty one,
# names that need encoding; then a directory marker and an object "shadow"
# beside "shadow/inner.txt" (the directory wins, as in Mountpoint for S3)
S=$T/src
mkdir -p "$S/a/b" "$S/names" "$S/shadow"
head -c $((3 * 1048576 + 4097)) /dev/urandom >"$S/big.bin"
for i in $(seq 1 40); do head -c $((i * 997)) /dev/urandom >"$S/a/f$i"; done
: >"$S/empty"
echo "as it was" >"$S/a/b/note.txt"
echo "spaces and plus" >"$S/names/with space+plus.txt"
echo "utf-8" >"$S/names/grüße-日本.txt"
echo "inner" >"$S/shadow/inner.txt"
"$PUT" "$URL" "$CRED" "$B/data" "$S" 2>"$T/put.log" || die "cannot put the tree: $(cat "$T/put.log")"
: >"$T/zero"
"$PUT" "$URL" "$CRED" "$B/data/emptydir/" "$T/zero" || die "cannot put a directory marker"
echo "shadowed" >"$T/shadowed"
"$PUT" "$URL" "$CRED" "$B/data/shadow" "$T/shadowed" || die "cannot put an object named as a directory"
mkdir -p "$S/emptydir"

opts=("s3_endpoint=$URL" "s3_credentials_file=$CRED" chunk_size=1M)

# --- keys from a credentials file: every byte, the names, the modes
M=$T/m
sfs_mount "s3://$B/data" "$M" "${opts[@]}" "cache_dir=$T/c1"
diff -r "$S" "$M" >"$T/diff" 2>&1 || die "the mount differs from the tree put: $(head -5 "$T/diff")"
[[ -d $M/emptydir && -d $M/shadow ]] || die "a directory marker or a directory named as an object is missing"
assert_eq "$(stat -c %a "$M/a/f3")" 444 "a file's mode"
assert_eq "$(stat -c %a "$M/a")" 555 "a directory's mode"
assert_eq "$(stat -c %s "$M/big.bin")" $((3 * 1048576 + 4097)) "big.bin's size"
contains "objects named as a directory is" "$(sfs_log "$M")" || die "the shadowed object was not logged"
contains "keys from profile 'default' of $CRED" "$(sfs_log "$M")" || die "where the keys came from is not logged"
"$STAGEFS" warmup --json "$M" >"$T/w.json" || die "warmup failed: $(cat "$T/w.json")"
r0=$(stat_get "$M" backend_reads)
drop_caches
diff -r "$S" "$M" >/dev/null || die "the mount differs after a warmup"
assert_eq "$(stat_get "$M" backend_reads)" "$r0" "GETs after a warmup"
sfs_umount "$M"
log "credentials file: byte-exact, names encoded, warmed, served from the cache"

# --- a bucket is listed one directory at a time, in the background: with
# the walk slowed (0.6 s a directory, one thread) the mount answers at
# once, the tree is the same during the walk and after, with the same inode
# numbers, and a file looked up during the walk costs no request of its own
# (the walk keeps what it listed); an unmount stops a walk still running.
# Through a proxy that logs every request and fails none.
"$PYTHON" "$REPO/tests/s3_faults.py" --upstream "$URL" --count "$T/nofaults" --every 0 \
	--log "$T/requests" >"$T/proxy.log" 2>&1 &
LPID=$!
wait_for -t 10 contains listening "$T/proxy.log" || die "the logging proxy did not start: $(cat "$T/proxy.log")"
LP=$(awk '$1 == "listening" { print $2; exit }' "$T/proxy.log")
[[ $LP =~ ^[0-9]+$ ]] || die "the logging proxy printed no port: $(cat "$T/proxy.log")"
W=$T/walking	# a mount point of its own: its own log
t0=$(date +%s%3N)
STAGEFS_TEST_SCAN_DELAY_US=600000 sfs_mount "s3://$B/data" "$W" "s3_endpoint=http://127.0.0.1:$LP" \
	"s3_credentials_file=$CRED" chunk_size=1M "cache_dir=$T/cw" dir_scan_threads=1
ls -i1 "$W/a" | LC_ALL=C sort -k2 >"$T/a.during"
t1=$(date +%s%3N)
contains "directories, " "$(sfs_log "$W")" && die "the walk ended before \`ls\` of a directory: nothing shows the mount answers early"
contains "listing in the background" "$(sfs_log "$W")" || die "no background listing: $(grep -i list "$(sfs_log "$W")")"
assert_gt 4000 "$((t1 - t0))" "ms from exec to \`ls\` of a/ during the walk"
assert_eq "$(wc -l <"$T/a.during")" 41 "entries of a/ listed during the walk"
stat -c '%i %s %n' "$W/a/b/note.txt" "$W/names/with space+plus.txt" >"$T/probe.during"
diff -r "$S" "$W" >"$T/diff" 2>&1 || die "the mount differs during the walk: $(head -5 "$T/diff")"
wait_for -t 30 contains "directories, " "$(sfs_log "$W")" || die "the walk did not end"
assert_eq "$(grep -c 'max-keys=1&' "$T/requests" || true)" 0 "listings of one key (a lookup asking S3) during the walk"
assert_ge "$(grep -c 'delimiter=%2F' "$T/requests" || true)" 6 "delimited listings (a directory each)"
contains "46 objects in 6 directories" "$(sfs_log "$W")" || die "the walk's count: $(grep "directories, " "$(sfs_log "$W")")"
drop_caches
ls -i1 "$W/a" | LC_ALL=C sort -k2 | cmp -s - "$T/a.during" || die "inode numbers of a/ changed when the walk ended"
stat -c '%i %s %n' "$W/a/b/note.txt" "$W/names/with space+plus.txt" | cmp -s - "$T/probe.during" ||
	die "inode numbers changed when the walk ended"
diff -r "$S" "$W" >/dev/null || die "the mount differs after the walk"
sfs_umount "$W"
log "first answer: \`ls\` of a/ $((t1 - t0)) ms after exec, the walk still running; the same tree and inodes after it; $(grep -vc '^CONNECTION' "$T/requests") requests, none for a lookup"
# a walk's requests reuse their connections: a thread's listings, one after
# another, on one connection (2 walk threads and the mount's own thread)
: >"$T/requests"
sfs_mount "s3://$B/data" "$W" "s3_endpoint=http://127.0.0.1:$LP" "s3_credentials_file=$CRED" \
	chunk_size=1M "cache_dir=$T/cw" dir_scan_threads=2
wait_for -t 30 contains "directories, " "$(sfs_log "$W")" || die "the second walk did not end"
nl=$(grep -c 'list-type=2\|versioning=' "$T/requests" || true)
nc=$(grep -c '^CONNECTION' "$T/requests" || true)
assert_ge "$nl" 8 "listing requests of a walk of 6 directories"
((nc < 4)) || die "$nc connections for $nl listing requests by 3 threads: connections are not reused"
sfs_umount "$W"
log "a walk: $nl listing requests on $nc connections"
# a large directory is listed in key ranges at once: with 5 keys a page,
# a/ (41 entries) is cut after its second page; every entry once
: >"$T/requests"
STAGEFS_TEST_S3_PAGE_KEYS=5 sfs_mount "s3://$B/data" "$W" "s3_endpoint=http://127.0.0.1:$LP" \
	"s3_credentials_file=$CRED" chunk_size=1M "cache_dir=$T/cw2" dir_scan_threads=2 log_level=debug
wait_for -t 30 contains "directories, " "$(sfs_log "$W")" || die "the wide walk did not end"
contains "46 objects in 6 directories" "$(sfs_log "$W")" || die "the wide walk's count: $(grep "directories, " "$(sfs_log "$W")")"
contains "a large listing: 6 more ranges, from f2" "$(sfs_log "$W")" ||
	die "a/ was not cut where expected: $(grep 'large listing' "$(sfs_log "$W")")"
nr=$(grep -c 'start-after=' "$T/requests" || true)
assert_ge "$nr" 6 "listings of a range (start-after)"
diff -r "$S" "$W" >"$T/diff" 2>&1 || die "the widely listed mount differs: $(head -5 "$T/diff")"
sfs_umount "$W"
kill "$LPID"
LPID=
log "a large directory: listed in ranges at once ($nr range requests), every entry once"
STAGEFS_TEST_SCAN_DELAY_US=3000000 sfs_mount "s3://$B/data" "$W" "${opts[@]}" "cache_dir=$T/cw" \
	dir_scan_threads=1
t0=$(date +%s%3N)
sfs_umount "$W"
t1=$(date +%s%3N)
assert_gt 8000 "$((t1 - t0))" "ms to unmount during a walk of 6 directories at 3 s each"
log "an unmount during the walk: $((t1 - t0)) ms"

# --- keys from the environment; an object replaced under the mount
AWS_ACCESS_KEY_ID=$(sed -n 's/^aws_access_key_id = //p' "$CRED") \
AWS_SECRET_ACCESS_KEY=$(sed -n 's/^aws_secret_access_key = //p' "$CRED") \
AWS_SHARED_CREDENTIALS_FILE=$T/none AWS_CONFIG_FILE=$T/none \
	sfs_mount "s3://$B/data/a" "$M" "s3_endpoint=$URL" chunk_size=1M "cache_dir=$T/c2"
contains "keys from the AWS_ACCESS_KEY_ID environment" "$(sfs_log "$M")" || die "the environment's keys were not used"
cmp "$M/f1" "$S/a/f1" || die "f1 with the environment's keys"
head -c 5000 /dev/urandom >"$T/new"
"$PUT" "$URL" "$CRED" "$B/data/a/f7" "$T/new" || die "cannot replace f7"
if cat "$M/f7" >"$T/out" 2>"$T/err"; then
	die "an object replaced under the mount was served ($(cmp -s "$T/out" "$T/new" && echo new || echo old) bytes)"
fi
contains "Input/output error" "$T/err" || die "f7: $(cat "$T/err")"
contains "replaced since it was listed" "$(sfs_log "$M")" || die "the replacement was not logged"
cmp "$M/f8" "$S/a/f8" || die "a neighbour of the replaced object reads wrong"
sfs_umount "$M"
sfs_mount "s3://$B/data/a" "$M" "${opts[@]}" "cache_dir=$T/c2"
cmp "$M/f7" "$T/new" || die "a new mount does not serve the new f7"
sfs_umount "$M"
cp "$T/new" "$S/a/f7"	# the tree as the bucket has it now
log "environment keys; a replaced object gives EIO, a remount serves it"

# --- a versioned bucket: the versions listed are read, whatever comes after
V=v$$
"$PUT" --versioned "$URL" "$CRED" "$V" || die "cannot make a versioned bucket"
"$PUT" "$URL" "$CRED" "$V" "$S/a" 2>/dev/null || die "cannot put into the versioned bucket"
sfs_mount "s3://$V" "$M" "${opts[@]}" "cache_dir=$T/c4"
contains "a versioned bucket" "$(sfs_log "$M")" || die "the bucket's versioning was not seen"
"$PUT" "$URL" "$CRED" "$V/f9" "$T/new" || die "cannot replace f9"
"$PUT" --rm "$URL" "$CRED" "$V/f10" || die "cannot delete f10"
"$PUT" --rm "$URL" "$CRED" "$V/b/note.txt" || die "cannot delete b/note.txt"	# b/ holds nothing now
cmp "$M/f9" "$S/a/f9" || die "a versioned object replaced under the mount does not read as listed"
cmp "$M/f10" "$S/a/f10" || die "a versioned object deleted under the mount does not read as listed"
diff -r "$S/a" "$M" >/dev/null || die "the versioned bucket's mount differs from the tree put"
sfs_umount "$M"
# mounted again, its listing cut into ranges (key-marker) as above
STAGEFS_TEST_S3_PAGE_KEYS=5 sfs_mount "s3://$V" "$M" "${opts[@]}" "cache_dir=$T/c4" log_level=debug
contains "a large listing" "$(sfs_log "$M")" || die "the versioned listing was not cut"
cmp "$M/f9" "$T/new" || die "a new mount does not serve f9's new version"
[[ ! -e $M/f10 ]] || die "a new mount still shows a deleted object"
[[ ! -e $M/b ]] || die "a new mount shows a directory whose every key is deleted"
(cd "$S/a" && find . -type f ! -name f10 ! -path ./b/note.txt | sort) >"$T/want.v"
(cd "$M" && find . -type f | sort) | cmp -s - "$T/want.v" || die "the versioned bucket listed in ranges: $(cd "$M" && find . | head)"
sfs_umount "$M"
log "versioned bucket: replaced and deleted objects read as listed until a remount; a directory of deleted keys gone then"

# --- a flaky endpoint: every 2nd ranged GET fails (503 SlowDown, 500, 429,
# a reset connection, a body cut off): every byte still right, by retrying
"$PYTHON" "$REPO/tests/s3_faults.py" --upstream "$URL" --count "$T/faults" \
	>"$T/faults.log" 2>&1 &
FPID=$!
wait_for -t 10 contains listening "$T/faults.log" || die "the faulty endpoint did not start: $(cat "$T/faults.log")"
FP=$(awk '$1 == "listening" { print $2; exit }' "$T/faults.log")
[[ $FP =~ ^[0-9]+$ ]] || die "the faulty endpoint printed no port: $(cat "$T/faults.log")"
sfs_mount "s3://$B/data" "$M" "s3_endpoint=http://127.0.0.1:$FP" "s3_credentials_file=$CRED" \
	chunk_size=1M "cache_dir=$T/c5"
diff -r "$S" "$M" >"$T/diff" 2>&1 || die "through a flaky endpoint the mount differs: $(head -3 "$T/diff")"
assert_ge "$(cat "$T/faults")" 20 "faults injected"
sfs_umount "$M"
kill "$FPID"
FPID=
log "flaky endpoint: $(cat "$T/faults") faults injected, every byte right"

# --- what the mount refuses, and why
mkdir -p "$T/bad"
cp "$CRED" "$T/wrong"
sed -i 's/^aws_secret_access_key = .*/aws_secret_access_key = wrongwrongwrongwrong/' "$T/wrong"
cp "$CRED" "$T/open"
chmod 644 "$T/open"
for bad in "s3://$B/data|$T/wrong|access denied" "s3://nosuch$$/x|$CRED|no such bucket" \
	"s3://$B/nodir$$|$CRED|nothing under the prefix" "s3://$B/data|$T/open|chmod 600" \
	"s3://$B/../x|$CRED|may not hold" "s3://$B/data?endpoint=ftp://x|$CRED|not an http" \
	"s3://$B/data|$T/missing|No such file"; do
	IFS='|' read -r uri cf want <<<"$bad"
	if AWS_ACCESS_KEY_ID= timeout 60 "$STAGEFS" -f -o "s3_endpoint=$URL,s3_credentials_file=$cf,cache_dir=$T/cb,runtime_dir=$T/rb" \
		"$uri" "$T/bad" >"$T/bad.out" 2>&1; then
		die "$uri mounted"
	fi
	contains "$want" "$T/bad.out" || die "$uri: expected '$want', got: $(tail -2 "$T/bad.out")"
done
if HOME=$T AWS_ACCESS_KEY_ID= AWS_SHARED_CREDENTIALS_FILE= AWS_CONFIG_FILE= timeout 60 \
	"$STAGEFS" -f -o "s3_endpoint=$URL,cache_dir=$T/cb,runtime_dir=$T/rb" "s3://$B/data" "$T/bad" \
	>"$T/bad.out" 2>&1; then
	die "a mount with no keys anywhere succeeded"
fi
contains "no S3 credentials" "$T/bad.out" || die "no keys: $(tail -2 "$T/bad.out")"
log "bad sources refused with a reason"

# --- a dead gateway: an uncached read fails within the timeout (a read
# through the page cache is the kernel's readahead, then its READ of the
# page, which the daemon fails at once: the same range just failed)
sfs_mount "s3://$B/data?timeout=3s" "$M" "${opts[@]}" "cache_dir=$T/c3"
cmp "$M/a/f2" "$S/a/f2" || die "f2 reads wrong before the gateway stops"
"$TOOL" stop-rgw "$STAGEFS_CEPH_DIR" >/dev/null 2>&1 || die "cannot stop the gateway"
expect_eio 4500 "f3 with the gateway down (timeout=3s)" cat "$M/a/f3"
ls "$M/a" >/dev/null || die "the mount stopped answering"
cmp "$M/a/f2" "$S/a/f2" || die "a cached file does not read with the gateway down"
log "gateway down: cached files still read"
# the gateway back: the file that failed reads right, with no remount
"$TOOL" rgw "$STAGEFS_CEPH_DIR" >/dev/null 2>>"$T/rgw.log" || die "the gateway did not start again: $(tail -3 "$T/rgw.log")"
cmp "$M/a/f3" "$S/a/f3" || die "f3 does not read right once the gateway is back"
log "gateway back: f3 reads right on the same mount"
sfs_umount "$M"
