#!/usr/bin/env bash
# libstagefs (gpudirect/): files of every size class read from a mount with gpuread (host, pinned pipeline from the handed-over cache file, random requests, buffered) and the Python binding match the source sha256.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

GPUREAD=$REPO/tests/helpers/gpuread
LIB=$REPO/gpudirect/libstagefs.so
[[ -x $GPUREAD ]] || die "$GPUREAD is not built (make test-progs)"
[[ -f $LIB ]] || die "$LIB is not built (make)"
export STAGEFS_LIB=$LIB

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt out=$TEST_TMPDIR/out
mkdir -p "$src/sub" "$out"
chunk=$((2 * 1024 * 1024))
sizes=(0 1 4095 4096 4097 $((1024 * 1024 - 1)) $((chunk - 1)) $chunk $((chunk + 1)) $((9 * 1024 * 1024 + 3)))
"$PYTHON" - "$src" "${sizes[@]}" <<'PY'
import os, random, sys
d = sys.argv[1]
rng = random.Random(7)
for i, size in enumerate(int(s) for s in sys.argv[2:]):
    with open(os.path.join(d, "sub" if i % 2 else "", "f%02d-%d.bin" % (i, size)), "wb") as f:
        f.write(rng.randbytes(size))
PY

sfs_mount "dir://$src" "$mnt" chunk_size=2M

files=()
while IFS= read -r rel; do files+=("$rel"); done < <(cd "$src" && find . -type f -printf '%P\n' | sort)
[[ ${#files[@]} -eq ${#sizes[@]} ]] || die "expected ${#sizes[@]} files, found ${#files[@]}"

read_all() {
	# read_all PASS: every file in host and pinned mode and random requests
	local rel want got mode
	for rel in "${files[@]}"; do
		want=$(sha256 "$src/$rel")
		for mode in host pinned; do
			"$GPUREAD" -m "$mode" -o "$out/x" "$mnt/$rel" ||
				die "$1: gpuread -m $mode $rel failed"
			got=$(sha256 "$out/x")
			[[ $got == "$want" ]] || die "$1: gpuread -m $mode $rel: wrong sha256"
		done
		# whole-buffer requests too, not only odd-sized ones
		"$GPUREAD" -m pinned -b 4194304 -o "$out/x" "$mnt/$rel" ||
			die "$1: gpuread -m pinned -b 4M $rel failed"
		[[ $(sha256 "$out/x") == "$want" ]] || die "$1: gpuread -b 4M $rel: wrong sha256"
		"$GPUREAD" -m pinned -r 40 -b 3000000 "$mnt/$rel" ||
			die "$1: random pinned requests on $rel differ from pread"
	done
	log "$1: ${#files[@]} files ok through gpuread (host, pinned, random)"
}

read_all cold
drop_caches
read_all warm

# device mode: runs on a GPU node, skips (77) here
rc=0
"$GPUREAD" -m device -o "$out/x" "$mnt/${files[-1]}" || rc=$?
case $rc in
0) [[ $(sha256 "$out/x") == $(sha256 "$src/${files[-1]}") ]] || die "device mode: wrong sha256"
   log "device mode: ok on GPU 0" ;;
77) log "device mode: no GPU here (skipped that part)" ;;
*) die "gpuread -m device failed (rc=$rc)" ;;
esac

"$GPUREAD" -m pinned -s -o "$out/x" "$mnt/${files[-1]}" 2>"$out/stats" ||
	die "gpuread -s failed"
log "$(cat "$out/stats")"
grep -q "pinned_host_bytes=$((9 * 1024 * 1024 + 3)) " "$out/stats" ||
	die "pinned_host_bytes does not count the file: $(cat "$out/stats")"

# the buffered fallback of the pipeline (what a mount refusing O_DIRECT gets)
for rel in "${files[@]}"; do
	STAGEFS_ODIRECT=0 "$GPUREAD" -m pinned -s -o "$out/x" "$mnt/$rel" 2>"$out/stats" ||
		die "STAGEFS_ODIRECT=0 gpuread $rel failed"
	[[ $(sha256 "$out/x") == $(sha256 "$src/$rel") ]] ||
		die "STAGEFS_ODIRECT=0 gpuread $rel: wrong sha256"
	grep -q " direct_reads=0 " "$out/stats" || die "STAGEFS_ODIRECT=0 still read with O_DIRECT"
done
log "buffered pipeline: ok"

PYTHONPATH=$REPO/gpudirect "$PYTHON" - "$src" "$mnt" "${files[@]}" <<'PY'
import ctypes, hashlib, os, sys
import stagefs

src, mnt, files = sys.argv[1], sys.argv[2], sys.argv[3:]
bad = 0
for rel in files:
    with open(f"{src}/{rel}", "rb") as f:
        data = f.read()
    want = hashlib.sha256(data).hexdigest()
    with stagefs.open(f"{mnt}/{rel}") as f:
        assert f.size == len(data), (rel, f.size, len(data))
        # the daemon handed over the cache file (an empty file needs none)
        if f.via != ("cache_fd" if data else "mount"):
            print(f"{rel}: reads go via {f.via}"); bad += 1
        # read(): buffered, in 1 MiB + 1 pieces
        got = b"".join(f.read(o, (1 << 20) + 1) for o in range(0, f.size, (1 << 20) + 1))
        if hashlib.sha256(got).hexdigest() != want:
            print(f"{rel}: read: wrong sha256"); bad += 1
        # read_into(): the pinned pipeline, whole file, then an unaligned view
        buf = bytearray(len(data))
        n = f.read_into(0, buf)
        if n != len(data) or hashlib.sha256(buf).hexdigest() != want:
            print(f"{rel}: read_into: {n} bytes, wrong sha256"); bad += 1
        if len(data) > 8193:
            b2 = bytearray(8000)
            n = f.read_into(4097, memoryview(b2)[3:])
            if n != 7997 or bytes(b2[3:]) != data[4097:4097 + 7997]:
                print(f"{rel}: read_into at 4097: wrong bytes"); bad += 1
        if f.read(len(data), 10) != b"" or f.read_into(len(data), bytearray(10)) != 0:
            print(f"{rel}: a read at end of file did not return nothing"); bad += 1
        # read_device(-1) is the host mode of the device path
        buf = bytearray(max(len(data), 1))
        addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
        n = f.read_device(0, len(data), addr, stagefs.HOST_DEVICE)
        if n != len(data) or hashlib.sha256(bytes(buf[:n])).hexdigest() != want:
            print(f"{rel}: read_device(-1): wrong bytes"); bad += 1
st = stagefs.stats()
print("python: %d files, %d wrong; stats %s" % (len(files), bad,
      {k: v for k, v in st.items() if k != "device_bytes"}))
if st["fd_opens"] != sum(1 for rel in files if os.path.getsize(f"{src}/{rel}")):
    print("fd_opens %d: not every non-empty file got its cache file" % st["fd_opens"]); bad += 1
if stagefs.stats_fd_last_error() != "":
    print("a refusal: %s" % stagefs.stats_fd_last_error()); bad += 1
sys.exit(1 if bad else 0)
PY

sfs_umount "$mnt"
