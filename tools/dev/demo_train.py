#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""demo_train.py: read a dataset the way a training loop does, and time it.

    demo_train.py ROOT [--epochs 2] [--workers 4] [--sums FILE] [--drop-caches]
                       [--label TEXT]... [--results FILE] [--torch | --no-torch]
                       [--progress FILE] [--json FILE]

Each epoch reads every file under ROOT once, in a new shuffled order, with
WORKERS readers: a torch DataLoader (worker processes, batches of 32) when
torch can be imported, otherwise a pool of threads doing the same.  A sample
is the whole file's bytes (an image-sized file, or a large shard read in
4 MiB pieces); nothing is decoded, so the figures are the input pipeline's
feed rate, not a model's.

--sums FILE    "crc32 size relpath" lines: every sample's bytes are checked,
               and every epoch must yield each listed file exactly once
--drop-caches  drop the page cache before each epoch (root), so an epoch's
               figure shows where the bytes came from (stagefs's cache or
               its source), not RAM
--label TEXT   a name for epoch 1, 2, ... in the summary (repeatable)
--results FILE append one "samples/s MB/s label" line per epoch to FILE, so
               a caller running several invocations can compare them
--stats FILE   the mount's .stagefs/stats (default ROOT/.stagefs/stats when
               ROOT is a stagefs mount): after each epoch, what stagefs
               counted for this job over the epoch (bytes per second, cache
               hit ratio, stall share) is printed beside what the loop
               measured.  The job is $STAGEFS_JOB (set it before starting
               this script: the daemon reads it from the environment a
               process was started with); without it, the user's row.
--torch        the torch DataLoader or nothing: exit 1 if torch cannot be
               imported (--no-torch: reader threads even where it can)
--progress FILE  after each sample, FILE holds "EPOCH SAMPLES" (the epoch,
               from 1, and the samples it has yielded so far), so that a
               caller can act in the middle of an epoch (tests/integration/
               restart_torch.sh kills stagefs's daemon there)
--json FILE    write what was done and found: the loader, the pids that read
               the samples (the DataLoader's worker processes, or this one
               for threads), and per epoch its samples, bytes, seconds and
               the wrong, missing and repeated samples

Prints one line per epoch and a summary table; exits 1 if a file could not
be read, a checksum did not match, or (with --sums) a file was missing from
an epoch or came twice.
"""
import argparse
import json
import os
import random
import sys
import time
import zlib

PIECE = 4 << 20


def read_sample(path):
    """Read one file; return (bytes, crc32)."""
    crc, n = 0, 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(PIECE)
            if not b:
                break
            crc = zlib.crc32(b, crc)
            n += len(b)
    return n, crc


def list_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        out.extend(os.path.join(d, f) for f in sorted(files))
    return out


class FeedRow:
    """This job's (or user's) row in the mount's .stagefs/stats."""

    KEYS = ("read_bytes", "read_bytes_estimated", "files_read", "cache_hits",
            "cache_misses", "stall_ns", "active_ns")

    def __init__(self, path):
        self.path = path
        self.job = os.environ.get("STAGEFS_JOB")
        self.uid = os.getuid()

    def read(self):
        with open(self.path) as f:
            s = json.load(f)
        if self.job:
            rows = [r for r in s.get("jobs", []) if r.get("job") == self.job and r.get("uid") == self.uid]
        else:
            rows = [r for r in s.get("users", []) if r.get("uid") == self.uid]
        r = rows[0] if rows else {}
        row = {k: r.get(k, 0) for k in self.KEYS}
        row["daemon_generation"] = s.get("daemon_generation", 1)
        return row, s.get("passthrough_accounting")

    def settled(self, timeout=5.0):
        """The row once it stops moving: RELEASEs and the once-a-second
        passthrough figures reach the daemon just after the reads."""
        prev, _ = self.read()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(1.1)
            cur, acct = self.read()
            if cur == prev:
                return cur, acct
            prev = cur
        return prev, acct


def feed_summary(before, after, acct, dt):
    if after["daemon_generation"] != before["daemon_generation"]:
        # a supervised mount's daemon was restarted: the rows start afresh
        return (f"- (the daemon was restarted: generation {before['daemon_generation']} -> "
                f"{after['daemon_generation']}, and each daemon counts afresh)")
    d = {k: after[k] - before[k] for k in after}
    hits, miss = d["cache_hits"], d["cache_misses"]
    hit = f"{100 * hits / (hits + miss):5.1f}%" if hits + miss else "    -"
    stall = f"{100 * d['stall_ns'] / d['active_ns']:5.1f}%" if d["active_ns"] else "    -"
    est = "~" if d["read_bytes_estimated"] else " "
    return (f"{est}{d['read_bytes'] / 1e6 / dt:6.0f} MB/s  {d['files_read'] / dt:7.0f} files/s  "
            f"hit {hit}  stall {stall}")


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


# --- the two loaders: same work, same order rule ------------------------------

def epoch_threads(files, workers, seed):
    from concurrent.futures import ThreadPoolExecutor
    order = list(files)
    random.Random(seed).shuffle(order)
    with ThreadPoolExecutor(workers) as ex:
        for path, (n, crc) in zip(order, ex.map(read_sample, order, chunksize=16)):
            yield path, n, crc, os.getpid()


class FileDataset:  # a torch-style map dataset (no torch import needed here)
    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        n, crc = read_sample(self.files[i])
        return self.files[i], n, crc, os.getpid()  # the pid: a worker's


def keep_list(batch):
    return batch


def epoch_torch(files, workers, seed):
    import torch
    from torch.utils.data import DataLoader
    g = torch.Generator()
    g.manual_seed(seed)
    dl = DataLoader(FileDataset(files), batch_size=32, shuffle=True, generator=g,
                    num_workers=workers, collate_fn=keep_list, prefetch_factor=4)
    for batch in dl:
        yield from batch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sums")
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--results")
    ap.add_argument("--stats")
    ap.add_argument("--progress")
    ap.add_argument("--json")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--torch", action="store_true", help="the torch DataLoader, or exit 1")
    which.add_argument("--no-torch", action="store_true", help="use threads even if torch is there")
    a = ap.parse_args()

    loader, epoch, torch_version = "threads", epoch_threads, None
    if not a.no_torch:
        try:
            import torch
            loader, epoch, torch_version = "torch DataLoader", epoch_torch, torch.__version__
        except ImportError as err:
            if a.torch:
                sys.exit(f"demo_train: --torch, but torch cannot be imported: {err}")

    files = list_files(a.root)
    if not files:
        sys.exit(f"demo_train: no files under {a.root}")
    want = {}
    if a.sums:
        with open(a.sums) as f:
            for line in f:
                crc, size, rel = line.rstrip("\n").split(" ", 2)
                want[rel] = (int(size), int(crc))
    classes = {os.path.relpath(os.path.dirname(p), a.root) for p in files}
    total = sum(os.stat(p).st_size for p in files)
    print(f"dataset: {len(files)} files, {total / 1e6:.0f} MB, {len(classes)} directories; "
          f"{a.workers} readers ({loader}), {a.epochs} epoch{'s' if a.epochs != 1 else ''}")

    feed = None
    stats = a.stats or os.path.join(a.root, ".stagefs", "stats")
    if a.stats or os.path.exists(stats):
        feed = FeedRow(stats)

    progress = os.open(a.progress, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if a.progress else None
    report = {"loader": loader, "torch": torch_version, "workers": a.workers, "pid": os.getpid(),
              "files": len(files), "bytes": total, "checked": len(want), "epochs": []}
    readers = set()
    results, bad = [], 0
    for e in range(a.epochs):
        if a.drop_caches:
            drop_caches()
        if feed:
            before, _ = feed.settled(timeout=3.0)
        t0 = time.monotonic()
        n = nbytes = wrong = repeated = 0
        seen = set()
        try:
            for path, size, crc, pid in epoch(files, a.workers, a.seed + e):
                n += 1
                nbytes += size
                readers.add(pid)
                rel = os.path.relpath(path, a.root)
                if rel in seen:
                    repeated += 1
                seen.add(rel)
                if rel in want and want[rel] != (size, crc):
                    wrong += 1
                    if bad + wrong <= 5:
                        print(f"  WRONG DATA: {rel}: {size} bytes, crc32 {crc}; "
                              f"want {want[rel][0]} bytes, crc32 {want[rel][1]}")
                if progress is not None:
                    os.pwrite(progress, (f"{e + 1} {n}".ljust(23) + "\n").encode(), 0)
        except OSError as err:
            sys.exit(f"demo_train: read failed: {err}")
        dt = time.monotonic() - t0
        missing = sum(1 for rel in want if rel not in seen)
        if missing or repeated:
            print(f"  epoch {e + 1}: {missing} listed file(s) never came, {repeated} came again")
        bad += wrong + missing + repeated
        label = a.label[e] if e < len(a.label) else f"epoch {e + 1}"
        summary = ""
        if feed:
            after, acct = feed.settled()
            summary = feed_summary(before, after, acct, dt)
        results.append((label, n, nbytes, dt, summary))
        report["epochs"].append({"label": label, "samples": n, "bytes": nbytes, "seconds": round(dt, 3),
                                 "wrong": wrong, "missing": missing, "repeated": repeated})
        print(f"  epoch {e + 1} ({label}): {n} samples, {nbytes / 1e6:.0f} MB in {dt:.2f} s: "
              f"{n / dt:.0f} samples/s, {nbytes / 1e6 / dt:.0f} MB/s")
        if summary:
            print(f"    stagefs counted: {summary}")

    if a.results:
        with open(a.results, "a") as f:
            for label, n, nbytes, dt, summary in results:
                f.write(f"{n / dt:.0f} {nbytes / 1e6 / dt:.0f} {label}\t{summary}\n")
    print()
    print(f"  {'epoch':<44} {'samples/s':>10} {'MB/s':>8} {'x epoch 1':>10}")
    for label, n, nbytes, dt, _ in results:
        print(f"  {label:<44} {n / dt:>10.0f} {nbytes / 1e6 / dt:>8.0f} "
              f"{results[0][3] / dt:>10.2f}")
    if want:
        print(f"  checked {len(want)} files against their crc32: "
              f"{'all correct' if not bad else f'{bad} WRONG, missing or repeated'}")
    if a.json:
        report["readers"] = sorted(readers)
        with open(a.json, "w") as f:
            json.dump(report, f)
            f.write("\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
