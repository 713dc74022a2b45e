#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""epoch_reader.py: one epoch of a plain shuffled multi-worker reader.

What a PyTorch DataLoader over a map-style dataset of files does, without
torch: the sample list is every regular file under ROOT, shuffled with a
seeded permutation; WORKERS processes (forked, like DataLoader workers)
each take every WORKERS-th sample of the permutation, open the file, read
it whole and close it, and spend --compute seconds per sample (the model's
step).  No hints, no order told to anyone.

  epoch_reader.py ROOT [--workers N] [--seed S] [--compute SECS]
                  [--verify SRC] [--limit N]

--verify SRC compares every byte read with the same path under SRC (the
source tree) and fails on the first difference.  Prints one line of JSON:
files, bytes, seconds.  Exit 0, or 1 on an error or a mismatch.
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import time


def list_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".stagefs"))
        for f in sorted(files):
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(os.path.relpath(p, root))
    return out


def worker(args):
    root, verify, paths, compute = args
    n = 0
    for rel in paths:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        if verify is not None:
            with open(os.path.join(verify, rel), "rb") as f:
                want = f.read()
            if data != want:
                raise SystemExit("mismatch: %s (%d bytes read, %d expected)"
                                 % (rel, len(data), len(want)))
        n += len(data)
        if compute:
            time.sleep(compute)
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compute", type=float, default=0.0)
    ap.add_argument("--verify")
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()

    files = list_files(a.root)
    random.Random(a.seed).shuffle(files)
    if a.limit:
        files = files[:a.limit]
    w = max(1, a.workers)
    parts = [(a.root, a.verify, files[i::w], a.compute) for i in range(w)]
    t0 = time.monotonic()
    with mp.get_context("fork").Pool(w) as pool:
        total = sum(pool.map(worker, parts, chunksize=1))
    secs = time.monotonic() - t0
    print(json.dumps({"files": len(files), "bytes": total, "seconds": round(secs, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
