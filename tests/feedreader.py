#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""feedreader.py: a training-loop reader that measures its own feed rate.

    feedreader.py [--via posix|lib] [--compute-ms MS] [--bs BYTES] FILE...

The reader side of the feed-rate validation (DS-Analyzer's method: the
training process measures what it received and how long it sat blocked
waiting for it, and the storage system's figures are checked against that).
Each FILE is opened, read to its end, closed, then "computed on" for
--compute-ms (a sleep, as a GPU step would be).  The reader times every
call that can block on data: open (a cold open through the client library
stages the whole file), each read, close.

--via posix  open(2)/read(2) through the mount, BS bytes a call (default)
--via lib    the client library (gpudirect/stagefs.py): the file's cache
             file handed over by the daemon, read through the pinned
             O_DIRECT pipeline into host memory (sfs_read_device, device -1)

Prints one JSON object: files, bytes, blocked_ns (time in those calls),
wall_ns (first open to last close, compute between files included) and
stall (blocked_ns / wall_ns).  Exits 1 if a file reads short.
"""
import argparse
import json
import os
import sys
import time


def read_posix(path, bs):
    blocked = n = 0
    t = time.monotonic_ns()
    fd = os.open(path, os.O_RDONLY)
    blocked += time.monotonic_ns() - t
    try:
        while True:
            t = time.monotonic_ns()
            b = os.read(fd, bs)
            blocked += time.monotonic_ns() - t
            if not b:
                break
            n += len(b)
    finally:
        t = time.monotonic_ns()
        os.close(fd)
        blocked += time.monotonic_ns() - t
    return n, blocked


def read_lib(path, bs, stagefs):
    blocked = n = 0
    buf = bytearray(bs)
    t = time.monotonic_ns()
    f = stagefs.open(path)
    blocked += time.monotonic_ns() - t
    try:
        if f.via != "cache_fd":
            sys.exit(f"feedreader: {path}: the library read through the mount "
                     f"({f.via}), not from a handed-over cache file")
        while True:
            t = time.monotonic_ns()
            k = f.read_into(n, buf)
            blocked += time.monotonic_ns() - t
            if k <= 0:
                break
            n += k
    finally:
        t = time.monotonic_ns()
        f.close()
        blocked += time.monotonic_ns() - t
    return n, blocked


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--via", choices=("posix", "lib"), default="posix")
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--bs", type=int, default=1 << 20)
    a = ap.parse_args()

    stagefs = None
    if a.via == "lib":
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path.insert(0, os.path.join(repo, "gpudirect"))
        os.environ.setdefault("STAGEFS_LIB", os.path.join(repo, "gpudirect", "libstagefs.so"))
        import stagefs as mod
        stagefs = mod

    nbytes = blocked = 0
    t0 = time.monotonic_ns()
    for i, path in enumerate(a.files):
        if i and a.compute_ms:
            time.sleep(a.compute_ms / 1000)
        if stagefs:
            n, b = read_lib(path, a.bs, stagefs)
        else:
            n, b = read_posix(path, a.bs)
        if n != os.path.getsize(path):
            sys.exit(f"feedreader: {path}: read {n} bytes of {os.path.getsize(path)}")
        nbytes += n
        blocked += b
    wall = time.monotonic_ns() - t0
    print(json.dumps({"files": len(a.files), "bytes": nbytes, "blocked_ns": blocked,
                      "wall_ns": wall, "stall": blocked / wall if wall else 0.0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
