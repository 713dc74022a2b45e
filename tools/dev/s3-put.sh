#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools/dev/s3-put.sh - put a directory tree into an S3 bucket, for the tests
# and benchmarks of s3:// sources (docs/s3.md), with curl alone: signed by
# curl's --aws-sigv4, many uploads in one curl process over kept-alive
# connections (--parallel).
#
#   tools/dev/s3-put.sh URL CREDENTIALS BUCKET/PREFIX DIR   create the bucket
#       if needed, then put every regular file under DIR as PREFIX/RELPATH
#   tools/dev/s3-put.sh URL CREDENTIALS BUCKET/KEY FILE     put one object
#   tools/dev/s3-put.sh --rm URL CREDENTIALS BUCKET/KEY     delete one object
#   tools/dev/s3-put.sh --versioned URL CREDENTIALS BUCKET   create the bucket
#       (if needed) with versioning on
#   tools/dev/s3-put.sh --get N URL CREDENTIALS BUCKET/PREFIX DIR   GET the
#       objects put from DIR, in a shuffled order, N at once (curl --parallel),
#       to nowhere; prints the seconds it took (the gateway's own rate)
#
# URL is the endpoint (http://127.0.0.1:PORT, path-style names);
# CREDENTIALS an AWS-style file whose [default] profile has the keys
# (tools/dev/ceph-cluster.sh rgw writes one).  Exits non-zero, naming the
# first key, if any request did not succeed.

set -euo pipefail

PROG=${0##*/}
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
usage() { awk 'NR > 2 && /^#/ { sub(/^# ?/, ""); print; next } NR > 2 { exit }' "$0" >&2; exit 2; }

rm_mode=0 get=0 nargs=4
case ${1:-} in
--rm | --versioned) rm_mode=${1#--}; nargs=3; shift ;;
--get) get=${2:-}; shift 2 || usage ;;
esac
[ $# -eq "$nargs" ] || usage
case $get in ''|*[!0-9]*) usage ;; esac
url=${1%/} cred=$2 target=$3 src=${4:-}
bucket=${target%%/*}
prefix=
[ "$bucket" = "$target" ] || prefix=${target#*/}
[ -n "$src" ] && [ -f "$src" ] || prefix=${prefix%/}	# a key may end in '/' (a directory marker)
[ -r "$cred" ] || die "$cred: cannot read it"
ak=$(sed -n 's/^aws_access_key_id *= *//p' "$cred" | head -n 1)
sk=$(sed -n 's/^aws_secret_access_key *= *//p' "$cred" | head -n 1)
[ -n "$ak" ] && [ -n "$sk" ] || die "$cred: no aws_access_key_id and aws_secret_access_key"

# curl reads its options from a file (-K): the keys never reach argv
cfg=$(mktemp)
trap 'rm -f "$cfg"' EXIT
chmod 600 "$cfg"
printf 'user = "%s:%s"\naws-sigv4 = "aws:amz:us-east-1:s3"\nsilent\nshow-error\n' "$ak" "$sk" >"$cfg"
printf 'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n' >>"$cfg"

enc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe="/~"))' "$1"; }

if [ "$rm_mode" = versioned ]; then
    code=$(curl -K "$cfg" -X PUT -o /dev/null -w '%{http_code}' "$url/$bucket")
    [ "$code" = 200 ] || [ "$code" = 409 ] || die "cannot create bucket $bucket: HTTP $code"
    code=$(curl -K "$cfg" -X PUT -o /dev/null -w '%{http_code}' --data-binary \
        '<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>' \
        "$url/$bucket?versioning=")
    [ "$code" = 200 ] || die "cannot turn versioning on for $bucket: HTTP $code"
    exit 0
fi
if [ "$rm_mode" = rm ]; then
    code=$(curl -K "$cfg" -X DELETE -o /dev/null -w '%{http_code}' "$url/$bucket/$(enc "$prefix")")
    [ "$code" = 204 ] || [ "$code" = 200 ] || die "DELETE $bucket/$prefix: HTTP $code"
    exit 0
fi

if [ "$get" != 0 ]; then
    [ -d "$src" ] || die "$src is not a directory"
    list=$(mktemp)
    trap 'rm -f "$cfg" "$list"' EXIT
    python3 - "$src" "$url/$bucket" "$prefix" >"$list" <<'EOF'
import os, random, sys, urllib.parse
root, base, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
keys = []
for dp, dns, fns in os.walk(root):
    for f in fns:
        key = os.path.relpath(os.path.join(dp, f), root)
        keys.append(prefix + "/" + key if prefix else key)
random.Random(1).shuffle(keys)
for k in keys:
    print('url = "%s"' % (base + "/" + urllib.parse.quote(k, safe="/~")))
    print('output = "/dev/null"')
EOF
    t0=$(date +%s.%N)
    codes=$(curl -K "$cfg" --no-progress-meter --parallel --parallel-max "$get" -K "$list" -w '%{http_code}\n')
    t1=$(date +%s.%N)
    bad=$(printf '%s\n' "$codes" | awk '$1 != 200' | head -n 1)
    [ -z "$bad" ] || die "a GET failed: HTTP $bad"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
    exit 0
fi

if [ -f "$src" ]; then
    [ -n "$prefix" ] || die "a single file needs BUCKET/KEY"
    # --data-binary, not -T: -T appends the file's name to a key ending in '/'
    code=$(curl -K "$cfg" -X PUT --data-binary "@$src" -H 'Content-Type: application/octet-stream' \
        -o /dev/null -w '%{http_code}' "$url/$bucket/$(enc "$prefix")")
    [ "$code" = 200 ] || die "PUT $bucket/$prefix: HTTP $code"
    exit 0
fi
[ -d "$src" ] || die "$src is neither a file nor a directory"

# the bucket (200: made; 409: it is ours already)
code=$(curl -K "$cfg" -X PUT -o /dev/null -w '%{http_code}' "$url/$bucket")
[ "$code" = 200 ] || [ "$code" = 409 ] || die "cannot create bucket $bucket: HTTP $code"

# one curl, every file: "upload-file" and "url" pairs in a config file
list=$(mktemp)
trap 'rm -f "$cfg" "$list"' EXIT
python3 - "$src" "$url/$bucket" "$prefix" >"$list" <<'EOF'
import os, sys, urllib.parse
root, base, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
def q(s):
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'
for dp, dns, fns in os.walk(root):
    dns.sort()
    for f in sorted(fns):
        p = os.path.join(dp, f)
        if not os.path.isfile(p) or os.path.islink(p):
            continue
        key = os.path.relpath(p, root)
        if prefix:
            key = prefix + "/" + key
        print("upload-file = " + q(p))
        print("url = " + q(base + "/" + urllib.parse.quote(key, safe="/~")))
        print('output = "/dev/null"')
EOF
codes=$(curl -K "$cfg" --no-progress-meter --parallel --parallel-max 16 -K "$list" -w '%{http_code} %{url}\n')
bad=$(printf '%s\n' "$codes" | awk '$1 != 200' | head -n 1)
[ -z "$bad" ] || die "upload failed: $bad"
printf '%s\n' "$codes" | awk 'END { printf "%d objects put\n", NR }' >&2
