#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""verify_reader.py MOUNT SRC STOPFILE [--threads N] [--noopen-ok]

Readers that check every byte: N threads read every file of SRC through
MOUNT, in a shuffled order, again and again, until STOPFILE exists, and
compare each file with SRC's copy (read once, up front).  Prints one JSON
object: files read, errors (with the first few), wrong files, and the
time each file took (p50, p99, max: the pause a restart causes shows in
the tail).  Exit 0 if it ran to the end with no error and no wrong byte.
"""
import json
import os
import random
import sys
import threading
import time


def main():
    args = sys.argv[1:]
    threads = 4
    if "--threads" in args:
        i = args.index("--threads")
        threads = int(args[i + 1])
        del args[i:i + 2]
    mnt, src, stop = args
    want = {}
    for root, _, files in os.walk(src):
        for f in files:
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)
            with open(p, "rb") as fh:
                want[rel] = fh.read()
    names = sorted(want)
    lock = threading.Lock()
    res = {"files": 0, "bytes": 0, "errors": 0, "wrong": 0, "first_errors": [],
           "times": []}

    def reader(seed):
        r = random.Random(seed)
        order = list(names)
        while not os.path.exists(stop):
            r.shuffle(order)
            for rel in order:
                if os.path.exists(stop):
                    break
                t0 = time.monotonic()
                err = None
                data = b""
                try:
                    with open(os.path.join(mnt, rel), "rb") as fh:
                        chunks = []
                        while True:
                            b = fh.read(128 * 1024)
                            if not b:
                                break
                            chunks.append(b)
                        data = b"".join(chunks)
                except OSError as e:
                    err = "%s: %s" % (rel, e)
                dt = time.monotonic() - t0
                with lock:
                    res["times"].append(dt)
                    if err:
                        res["errors"] += 1
                        if len(res["first_errors"]) < 5:
                            res["first_errors"].append(err)
                    elif data != want[rel]:
                        res["wrong"] += 1
                        if len(res["first_errors"]) < 5:
                            res["first_errors"].append("%s: wrong bytes (%d read, %d expected)"
                                                       % (rel, len(data), len(want[rel])))
                    else:
                        res["files"] += 1
                        res["bytes"] += len(data)

    ts = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    times = sorted(res.pop("times"))
    n = len(times)
    res["p50_ms"] = round(times[n // 2] * 1000, 2) if n else 0
    res["p99_ms"] = round(times[min(n - 1, n * 99 // 100)] * 1000, 2) if n else 0
    res["max_ms"] = round(times[-1] * 1000, 2) if n else 0
    print(json.dumps(res))
    return 0 if res["errors"] == 0 and res["wrong"] == 0 and res["files"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
