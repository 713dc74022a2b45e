#!/usr/bin/env bash
# libstagefs reads the cache files the daemon hands over (CACHE_FD): every size class and unaligned requests match the source byte for byte, an unallowed user gets ENOENT (a hidden dataset) and no descriptor, a file over quota falls back to the mount, pins hold until unpinned, and the bytes read show exactly per job in .stagefs/stats.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

GPUREAD=$REPO/tests/helpers/gpuread
LIB=$REPO/gpudirect/libstagefs.so
[[ -x $GPUREAD ]] || die "$GPUREAD is not built (make test-progs)"
[[ -f $LIB ]] || die "$LIB is not built (make)"
export STAGEFS_LIB=$LIB

IN=sfs_gpu_in OUT=sfs_gpu_out
need_users $IN $OUT

T=$TEST_TMPDIR
chmod 755 "$T" "$(dirname "$T")"
mkdir -p "$T/data/sub" "$T/out"
chunk=$((1024 * 1024))
sizes=(0 1 4095 4096 4097 $((chunk - 1)) $chunk $((chunk + 1)) $((5 * chunk + 3)))
"$PYTHON" - "$T/data" "${sizes[@]}" <<'PY'
import os, random, sys
d = sys.argv[1]
rng = random.Random(11)
for i, size in enumerate(int(s) for s in sys.argv[2:]):
    with open(os.path.join(d, "sub" if i % 2 else "", "f%02d-%d.bin" % (i, size)), "wb") as f:
        f.write(rng.randbytes(size))
# over the 6M quota: cannot be cached whole
with open(os.path.join(d, "big.bin"), "wb") as f:
    f.write(rng.randbytes(8 * 1024 * 1024 + 5))
# readable by its owner only
with open(os.path.join(d, "private.bin"), "wb") as f:
    f.write(rng.randbytes(5000))
PY
chmod -R a+rX "$T/data"
chmod 600 "$T/data/private.bin"

cat >"$T/stagefs.conf" <<EOF
[stagefs]
chunk_size = 1M

[quota]
default = 6M

[dataset d]
source = dir://$T/data
allow = user:$IN
EOF
MNT=$T/mnt
sfs_mount "" "$MNT" -c "$T/stagefs.conf"

files=()
while IFS= read -r rel; do files+=("$rel"); done < <(cd "$T/data" && find . -name 'f*.bin' -printf '%P\n' | sort)
[[ ${#files[@]} -eq ${#sizes[@]} ]] || die "expected ${#sizes[@]} files, found ${#files[@]}"

# st KEY FILE: one number from gpuread -s's stats line
st() { sed -n "s/.* $1=\\([^ ]*\\).*/\\1/p" "$2"; }

# --- every size class through the cache file, as root (root may read everything) ---
whole=0 nonempty=0 rand=0
for rel in "${files[@]}"; do
	size=$(stat -c %s "$T/data/$rel")
	STAGEFS_JOB=gpujob-whole "$GPUREAD" -m pinned -s -o "$T/out/x" "$MNT/d/$rel" 2>"$T/out/stats" ||
		die "gpuread $rel failed: $(cat "$T/out/stats")"
	cmp "$T/out/x" "$T/data/$rel" || die "$rel: the bytes differ from the source"
	if [[ $size -eq 0 ]]; then
		[[ $(st via "$T/out/stats") == mount ]] || die "$rel: an empty file needs no cache file"
		continue
	fi
	[[ $(st via "$T/out/stats") == cache_fd ]] || die "$rel: not read from the cache file: $(cat "$T/out/stats")"
	assert_eq "$(st fd_opens "$T/out/stats")" 1 "$rel: fd_opens"
	assert_eq "$(st fd_bytes "$T/out/stats")" "$size" "$rel: fd_bytes"
	assert_eq "$(st buffered_reads "$T/out/stats")" 0 "$rel: buffered reads (the cache is on a local disk: O_DIRECT)"
	assert_gt "$(st direct_reads "$T/out/stats")" 0 "$rel: O_DIRECT reads"
	whole=$((whole + size)) nonempty=$((nonempty + 1))

	# unaligned offsets and lengths, compared with pread of the source
	STAGEFS_JOB=gpujob-rand "$GPUREAD" -m pinned -s -r 25 -b 3000000 "$MNT/d/$rel" 2>"$T/out/stats" ||
		die "random requests on $rel differ: $(cat "$T/out/stats")"
	[[ $(st via "$T/out/stats") == cache_fd ]] || die "$rel: random requests not from the cache file"
	# the library reports a handle's bytes at most once (the daemon takes
	# no more than the file's size per handed-over file): re-read ranges
	# of the random requests are not counted again
	fdb=$(st fd_bytes "$T/out/stats")
	rand=$((rand + (fdb < size ? fdb : size)))
done
log "size classes: ${#files[@]} files, $whole bytes whole and $rand in random requests from cache files"

# many small pinned buffers: several reads in flight against the copies
big=f08-$((5 * chunk + 3)).bin
STAGEFS_JOB=gpujob-rand STAGEFS_PINNED_BUFS=3 STAGEFS_PINNED_BUF_SIZE=65536 \
	"$GPUREAD" -m pinned -s -b 4194304 -o "$T/out/x" "$MNT/d/$big" 2>"$T/out/stats" || die "3 x 64K buffers failed"
cmp "$T/out/x" "$T/data/$big" || die "3 x 64K buffers: wrong bytes"
assert_eq "$(st pinned_bytes "$T/out/stats")" $((3 * 65536)) "pinned pool size"
rand=$((rand + $(st fd_bytes "$T/out/stats")))

# --- a file that cannot be cached whole (over the 6M quota) reads through the mount ---
"$GPUREAD" -m pinned -s -o "$T/out/x" "$MNT/d/big.bin" 2>"$T/out/stats" || die "gpuread big.bin failed"
cmp "$T/out/x" "$T/data/big.bin" || die "big.bin: wrong bytes through the mount"
[[ $(st via "$T/out/stats") == mount ]] || die "big.bin should have been refused: $(cat "$T/out/stats")"
[[ $(st fd_last_error "$T/out/stats") == ENOSPC ]] || die "big.bin: refusal $(st fd_last_error "$T/out/stats"), want ENOSPC"
assert_eq "$(st fd_fallbacks "$T/out/stats")" 1 "big.bin: fd_fallbacks"
STAGEFS_FD_PASSING=0 "$GPUREAD" -m pinned -s -o "$T/out/x" "$MNT/d/${files[3]}" 2>"$T/out/stats" ||
	die "STAGEFS_FD_PASSING=0 failed"
cmp "$T/out/x" "$T/data/${files[3]}" || die "STAGEFS_FD_PASSING=0: wrong bytes"
[[ $(st via "$T/out/stats") == mount ]] || die "STAGEFS_FD_PASSING=0 still asked for the cache file"
log "fallbacks: over quota (ENOSPC) and STAGEFS_FD_PASSING=0 read through the mount"

# --- access: the daemon checks the peer like the mount does ---
err=$(as $OUT "$GPUREAD" -m pinned -o /dev/null "$MNT/d/${files[2]}" 2>&1) && die "$OUT read a dataset it is not allowed"
# refused by the daemon and through the mount alike: a dataset the user
# may not read does not exist for it (ENOENT)
[[ $err == *"No such file"* ]] || die "$OUT: unexpected error: $err"
as $IN "$GPUREAD" -m pinned -s -o /dev/null "$MNT/d/${files[2]}" 2>"$T/out/stats" || die "$IN could not read"
[[ $(st via "$T/out/stats") == cache_fd ]] || die "$IN: not from the cache file"
in_bytes=$(st fd_bytes "$T/out/stats")

SOCK=$(cat "$MNT/.stagefs/socket")
cat >"$T/proto.py" <<'PY'
# proto.py SOCK CMD...: speak the control protocol, check replies and descriptors.
import array, os, socket, sys

def conn(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    assert req(s, "HELLO version=1")[0].startswith("OK ")
    return s

def req(s, line):
    """Send a request; its reply line and the descriptors that came with it."""
    s.sendall(line.encode() + b"\n")
    data, fds = b"", []
    while not data.endswith(b"\n"):
        msg, anc, flags, _ = s.recvmsg(65536, socket.CMSG_SPACE(16))
        if not msg:
            raise SystemExit("connection closed after " + line)
        data += msg
        for level, typ, blob in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(blob[:len(blob) - len(blob) % a.itemsize])
                fds += list(a)
    return data.decode().rstrip("\n"), fds

def kv(reply):
    return dict(w.split("=", 1) for w in reply.split()[1:] if "=" in w)

def evicted(path, rel):
    s = conn(path)
    s.sendall(b"WARMUP mode=evict\nPATH " + rel.encode() + b"\nEND\n")
    buf = b""
    while b"\nDONE " not in b"\n" + buf:
        b = s.recv(65536)
        if not b:
            raise SystemExit("no DONE for the evict")
        buf += b
    done = [l for l in buf.decode().split("\n") if l.startswith("DONE ")][0]
    s.close()
    return int(kv(done)["evicted"])

sock, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if cmd == "refused":            # refused REL CODE: ERR CODE and no descriptor
    s = conn(sock)
    reply, fds = req(s, "CACHE_FD path=" + args[0])
    if fds or not reply.startswith("ERR ") or kv(reply).get("code") != args[1]:
        raise SystemExit("CACHE_FD %s: got %r with %d descriptor(s), want ERR code=%s"
                         % (args[0], reply, len(fds), args[1]))
elif cmd == "readonly":         # readonly REL SRC: the descriptor has SRC's bytes, cannot write
    s = conn(sock)
    reply, fds = req(s, "CACHE_FD path=" + args[0])
    if not reply.startswith("OK ") or len(fds) != 1:
        raise SystemExit("CACHE_FD %s: %r, %d descriptor(s)" % (args[0], reply, len(fds)))
    want = open(args[1], "rb").read()
    if int(kv(reply)["size"]) != len(want) or os.pread(fds[0], len(want) + 1, 0) != want:
        raise SystemExit("the cache file's bytes differ from the source")
    try:
        os.pwrite(fds[0], b"x", 0)
        raise SystemExit("the descriptor is writable")
    except OSError:
        pass
    if os.fstat(fds[0]).st_mode & 0o077:
        raise SystemExit("the cache file is readable by others: %o" % os.fstat(fds[0]).st_mode)
    if os.getuid():
        # nor can it be reopened for writing (or at all) through /proc
        try:
            os.close(os.open("/proc/self/fd/%d" % fds[0], os.O_RDWR))
            raise SystemExit("the cache file could be reopened read-write")
        except PermissionError:
            pass
elif cmd == "pins":             # pins REL: evict fails while pinned, works after unpin / disconnect
    s = conn(sock)
    reply, fds = req(s, "CACHE_FD path=" + args[0])
    h = kv(reply)["handle"]
    n = evicted(sock, args[0])
    if n:
        raise SystemExit("%d chunk(s) evicted while pinned" % n)
    if req(s, "CACHE_FD_CLOSE handle=" + h)[0] != "OK":
        raise SystemExit("CACHE_FD_CLOSE failed")
    if req(s, "CACHE_FD_CLOSE handle=" + h)[0].split()[:2] != ["ERR", "code=ENOENT"]:
        raise SystemExit("a second CACHE_FD_CLOSE should be ENOENT")
    n = evicted(sock, args[0])
    if n < 1:
        raise SystemExit("nothing evicted once unpinned")
    reply, fds = req(s, "CACHE_FD path=" + args[0])       # fetched again, pinned again
    if not reply.startswith("OK ") or int(kv(reply)["fetched"]) != int(kv(reply)["size"]):
        raise SystemExit("CACHE_FD after evict: %r" % reply)
    if evicted(sock, args[0]):
        raise SystemExit("evicted while pinned (2)")
    s.close()                                              # the connection ends: unpinned
    for _ in range(100):
        if evicted(sock, args[0]):
            break
        os.system("sleep 0.05")
    else:
        raise SystemExit("still pinned after the connection closed")
elif cmd == "gpu":              # gpu: GPU_BYTES with a job and with a PCI address that is no GPU
    s = conn(sock)
    for line in ("GPU_BYTES gpu=3 bytes=1000 job=gpujob-gpu",
                 "GPU_BYTES gpu=3 bytes=24 pci=0000:ff:1f.7 job=gpujob-gpu",
                 "CLIENT_READ bytes=5 files=1 job=gpujob-gpu"):
        if req(s, line)[0] != "OK":
            raise SystemExit(line + " refused")
    if not req(s, "GPU_BYTES gpu=70000 bytes=1")[0].startswith("ERR code=EINVAL"):
        raise SystemExit("a bad GPU index was taken")
else:
    raise SystemExit("unknown command " + cmd)
PY
proto() { "$PYTHON" "$T/proto.py" "$SOCK" "$@"; }
as $OUT "$PYTHON" "$T/proto.py" "$SOCK" refused "d/${files[2]}" ENOENT || die "$OUT got a cache file"
as $IN "$PYTHON" "$T/proto.py" "$SOCK" refused d/private.bin EACCES || die "$IN got a mode 0600 file of root's"
as $IN "$PYTHON" "$T/proto.py" "$SOCK" readonly "d/${files[4]}" "$T/data/${files[4]}" || die "$IN: bad cache file"
proto refused d/nothere ENOENT || die "a missing file"
proto refused d/sub EISDIR || die "a directory"
proto readonly d/private.bin "$T/data/private.bin" || die "root: bad cache file"
grep -q "access denied: uid $(id -u $OUT) may not read dataset d" "$(sfs_log "$MNT")" ||
	die "the refusal was not logged"
log "access: $OUT refused (ENOENT: a hidden dataset, no descriptor), $IN refused a 0600 file, descriptors read-only"

proto pins "d/${files[6]}" || die "pins"
log "pins: held while the handle is open, dropped by CACHE_FD_CLOSE and by the connection's end"

# --- the counts: exact per job in .stagefs/stats and the metrics ---
proto gpu || die "GPU_BYTES"
stats_dump "$MNT" >"$T/stats.json"
"$STAGEFS" top --once --json "$MNT" >"$T/top.json"
timeout 10 cat "$MNT/.stagefs/metrics" >"$T/metrics.txt"
"$PYTHON" - "$T/stats.json" "$T/top.json" "$T/metrics.txt" "$whole" "$nonempty" "${#files[@]}" "$rand" "$in_bytes" <<'PY' ||
import json, sys
stats, top, metrics = (open(p).read() for p in sys.argv[1:4])
whole, nonempty, nfiles, rand, in_bytes = map(int, sys.argv[4:])
d, t = json.loads(stats), json.loads(top)
def job(name):
    rows = [j for j in d["jobs"] if j["job"] == name and j["user"] == "root"]
    if len(rows) != 1:
        sys.exit("no single job row %s: %s" % (name, [(j["user"], j["job"]) for j in d["jobs"]]))
    return rows[0]
def want(what, got, exp):
    if got != exp:
        sys.exit("%s: %s, want %s" % (what, got, exp))
w, r, g = job("gpujob-whole"), job("gpujob-rand"), job("gpujob-gpu")
want("gpujob-whole client_read_bytes", w["client_read_bytes"], whole)
want("gpujob-whole read_bytes (nothing read through the mount)", w["read_bytes"], whole)
want("gpujob-whole files_read", w["files_read"], nonempty)
want("gpujob-whole opens (the empty file through the mount)", w["opens"], nfiles)
want("gpujob-whole read_requests", w["read_requests"], 0)
want("gpujob-rand client_read_bytes", r["client_read_bytes"], rand)
want("gpujob-gpu gpu_bytes", g["gpu_bytes"], 1024)
want("gpujob-gpu client_read_bytes", g["client_read_bytes"], 5)
gpus = {x["gpu"]: x["gpu_bytes"] for x in d["gpus"]}
want("GPU rows", gpus, {3: 1024})
want("node client_read_bytes", d["node"]["client_read_bytes"], whole + rand + 5 + in_bytes)
inrow = [u for u in d["users"] if u["user"] == "sfs_gpu_in"]
want("sfs_gpu_in client_read_bytes", inrow[0]["client_read_bytes"] if inrow else None, in_bytes)
want("top --json gpus", {x["gpu"]: x["gpu_bytes"] for x in t["gpus"]}, {3: 1024})
for line in ('stagefs_client_read_bytes_total{user="root",job="gpujob-whole"} %d' % whole,
             'stagefs_job_gpu_bytes_total{user="root",job="gpujob-gpu"} 1024',
             'stagefs_gpu_bytes_total{gpu="3"} 1024'):
    if line + "\n" not in metrics:
        sys.exit("metrics lack %r" % line)
print("stats: whole %d, random %d, GPU 3 %d bytes: exact" % (whole, rand, gpus[3]))
PY
	die "the counts in .stagefs/stats are wrong (see above)"

sfs_umount "$MNT"
