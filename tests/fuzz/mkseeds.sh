#!/usr/bin/env bash
# Write the fuzzers' seed corpora from real inputs: tests/fuzz/mkseeds.sh [OUTDIR]
# SPDX-License-Identifier: Apache-2.0
#
# OUTDIR (default tests/fuzz/seeds) gets one directory per harness:
#   manifest/  manifests the publish builder writes (mkseed_manifest) and,
#              where a FUSE mount is possible (root, /dev/fuse), the dir://
#              snapshot a real mount of a small tree saves in its cache;
#   config/    conf/stagefs.conf.example, the [quota]/[dataset] example of
#              docs/configuration.md, the configs the integration tests
#              write, the INI texts of tests/unit/test_config.c and
#              test_policy.c;
#   ctlproto/  the messages of tests/unit/test_ctlproto.c and of
#              docs/control.md, one file per message and one stream of all;
#   json/      the .stagefs/stats of that real mount, and the documents of
#              tests/unit/test_json.c;
#   peerproto/ a request and replies in the frame format, and a TLS 1.3
#              ClientHello with an external PSK (openssl s_client's, caught
#              on a loopback socket) for the server side.
# Needs `make fuzz` first (tests/fuzz/mkseed_manifest, ./stagefs).  Prints
# how many seeds each got.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$REPO/tests/fuzz/seeds}
PY=${PYTHON:-python3}
rm -rf "$OUT"
mkdir -p "$OUT"/{manifest,config,ctlproto,json,peerproto}

# manifests as the publish tool builds them
"$REPO/tests/fuzz/mkseed_manifest" "$OUT/manifest"

# C string literals of the unit tests, split by what they look like
"$PY" - "$REPO" "$OUT" <<'PY'
import ast, os, re, sys
repo, out = sys.argv[1:]
lit = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
def strings(path):
    """Adjacent C string literals joined, escapes decoded, as bytes."""
    text = open(path, encoding="utf-8").read()
    res, pos = [], 0
    for m in re.finditer(r'(?:"(?:[^"\\\n]|\\.)*"\s*)+', text):
        parts = lit.findall(m.group(0))
        s = "".join(parts)
        # C's \x escapes and octal are Python's too (for these files)
        try:
            b = ast.literal_eval('b"' + s.encode("utf-8").decode("latin-1").replace('"', '\\"').replace('\\\\"', '\\"') + '"')
        except Exception:
            continue
        res.append(b)
    return res
def save(kind, name, data):
    with open(os.path.join(out, kind, name), "wb") as f:
        f.write(data)
n = 0
for t in ("test_config.c", "test_policy.c"):
    for i, b in enumerate(strings(os.path.join(repo, "tests/unit", t))):
        if b"=" in b and b"\n" in b:
            save("config", f"{t[:-2]}-{i}.conf", b); n += 1
msgs = []
for i, b in enumerate(strings(os.path.join(repo, "tests/unit/test_ctlproto.c"))):
    if re.match(rb"^[A-Z][A-Z_]{1,}( |\n|$)", b):
        msgs.append(b)
for m in re.finditer(r"`([A-Z][A-Z_]{2,}(?: [^`]*)?)`|^    ([A-Z][A-Z_]{2,}(?: .*)?)$",
                     open(os.path.join(repo, "docs/control.md"), encoding="utf-8").read(), re.M):
    msgs.append((m.group(1) or m.group(2)).encode() + b"\n")
for i, b in enumerate(msgs):
    save("ctlproto", f"msg-{i}", b if b.endswith(b"\n") else b + b"\n")
save("ctlproto", "session", b"".join(x if x.endswith(b"\n") else x + b"\n" for x in msgs))
for i, b in enumerate(strings(os.path.join(repo, "tests/unit/test_json.c"))):
    if re.match(rb"^\s*[\[{\"0-9tfn-]", b):
        save("json", f"test_json-{i}.json", b)
# the [quota] / [dataset] example of docs/configuration.md
doc = open(os.path.join(repo, "docs/configuration.md"), encoding="utf-8").read()
m = re.search(r"\n((?:    .*\n|\n)*?    \[quota\]\n(?:    .*\n|\n)*)", doc)
if m:
    save("config", "configuration-md.conf",
         "".join(l[4:] + "\n" for l in m.group(1).splitlines()).encode())
# the configs the integration tests write (cat >...conf <<EOF ... EOF)
for t in sorted(os.listdir(os.path.join(repo, "tests/integration"))):
    text = open(os.path.join(repo, "tests/integration", t), encoding="utf-8").read()
    for i, m in enumerate(re.finditer(r"cat >\S*conf\"? <<'?EOF'?\n(.*?)\nEOF\n", text, re.S)):
        save("config", f"{t[:-3]}-{i}.conf", m.group(1).encode() + b"\n")
PY
cp "$REPO/conf/stagefs.conf.example" "$OUT/config/stagefs.conf.example"

# the peer transport: frames (mode byte 0), a ClientHello (mode byte 1)
"$PY" - "$OUT/peerproto" <<'PY'
import os, socket, struct, subprocess, sys
out = sys.argv[1]
def save(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
req = struct.pack("<4sIQQIIQQ", b"SFP3", 1, 0x1122334455667788, 0x99aabbccddeeff00,
                  1 << 20, 3, 42, 0xfeedfacecafebeef)
save("get", b"\0" + req + struct.pack("<4sIII", b"SFR1", 0, 1 << 20, 0))
save("refused", b"\0" + req + struct.pack("<4sIII", b"SFR1", 2, 0, 0))
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
ls.settimeout(5)
try:
    p = subprocess.Popen(["openssl", "s_client", "-connect", "127.0.0.1:%d" % ls.getsockname()[1],
                          "-tls1_3", "-psk_identity", "stagefs-peer-1/0011223344556677",
                          "-psk", "00" * 32], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c, _ = ls.accept()
    c.settimeout(5)
    hello = c.recv(65536)
    c.close()
    p.kill()
    p.wait()
    save("clienthello", b"\1" + hello)
except (OSError, socket.timeout) as e:
    print("mkseeds: no ClientHello seed (openssl s_client: %s)" % e)
PY

# a real mount: its dir:// snapshot manifest and its .stagefs/stats
real_mount() {
	local t mnt stagefs=${STAGEFS:-$REPO/stagefs}
	[[ $(id -u) == 0 && -c /dev/fuse ]] && command -v fusermount3 >/dev/null ||
		{ echo "mkseeds: no FUSE mount here (needs root and /dev/fuse): no real snapshot or stats seed"; return 0; }
	[[ -x $stagefs ]] || { echo "mkseeds: no $stagefs (make): no real snapshot or stats seed"; return 0; }
	t=$(mktemp -d "${TMPDIR:-/tmp}/mkseeds.XXXXXX")
	mnt=$t/mnt
	mkdir -p "$t/src/a/b" "$mnt"
	printf 'hello\n' >"$t/src/a/f"
	head -c 300000 /dev/urandom >"$t/src/a/b/big"
	ln -s a/f "$t/src/link"
	ln "$t/src/a/f" "$t/src/a/hard"
	if "$stagefs" -o "cache_dir=$t/cache,runtime_dir=$t/run,chunk_size=64K" \
		"dir://$t/src" "$mnt" </dev/null >"$t/log" 2>&1; then
		for _ in $(seq 100); do [[ -e $mnt/.stagefs/stats ]] && break; sleep 0.1; done
		cat "$mnt/a/f" "$mnt/a/b/big" >/dev/null || true
		cp "$mnt/.stagefs/stats" "$OUT/json/stagefs-stats.json" || true
		fusermount3 -u "$mnt" || fusermount3 -u -z "$mnt" || true
		cp "$t"/cache/snapshots/*.manifest "$OUT/manifest/" 2>/dev/null || true
	else
		echo "mkseeds: mounting failed: $(tail -n 1 "$t/log")"
	fi
	rm -rf "$t"
}
real_mount
for d in "$OUT"/*/; do
	printf 'mkseeds: %-9s %3d seeds\n' "$(basename "$d")" "$(find "$d" -type f | wc -l)"
done
