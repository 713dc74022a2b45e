#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""genscale.py: write a tree of many tiny files, fast, for the scale checks.

    genscale.py DIR --files N [--wide W] [--per-dir 1000] [--jobs 2]

DIR/wide/ holds W files (default N/10, for `ls -l` of one big directory);
the other N - W files go in DIR/dNNNN/ directories of --per-dir files each.
File dNNNN/fNNNNNN holds its own relative path and a newline (10-20 bytes),
so every file's content differs and any file can be checked without a copy
of the tree: `genscale.py DIR --check PATH...` exits 1 naming the first
file (under DIR, e.g. a mount of the tree) whose bytes differ.  The same
arguments give the same names and contents; times are left as created.
"""
import argparse
import os
import sys
from multiprocessing import Pool


def content(rel):
    return (rel + "\n").encode()


def layout(files, wide, per_dir):
    """(directory, first index, count) of every directory of the tree."""
    dirs = [("wide", 0, wide)] if wide else []
    rest, i = files - wide, 0
    while rest > 0:
        n = min(per_dir, rest)
        dirs.append(("d%04d" % i, i * per_dir, n))
        rest -= n
        i += 1
    return dirs


def write_dir(args):
    root, d, first, n = args
    path = os.path.join(root, d)
    os.makedirs(path, exist_ok=True)
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        for k in range(first, first + n):
            name = "f%07d" % k
            fd = os.open(name, flags, 0o644, dir_fd=dfd)
            os.write(fd, content(d + "/" + name))
            os.close(fd)
    finally:
        os.close(dfd)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--files", type=int, default=0)
    ap.add_argument("--wide", type=int, default=-1)
    ap.add_argument("--per-dir", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--check", nargs="*", metavar="PATH",
                    help="paths relative to DIR whose bytes to check")
    a = ap.parse_args()
    if a.check is not None:
        for rel in a.check:
            with open(os.path.join(a.dir, rel), "rb") as f:
                got = f.read()
            if got != content(rel):
                print("genscale: %s: %d bytes differ from the expected %r"
                      % (rel, len(got), content(rel)), file=sys.stderr)
                return 1
        return 0
    wide = a.files // 10 if a.wide < 0 else a.wide
    if a.files <= 0 or wide > a.files or a.per_dir <= 0:
        ap.error("--files N > 0, --wide W <= N, --per-dir > 0")
    os.makedirs(a.dir, exist_ok=True)
    work = [(a.dir, d, first, n) for d, first, n in layout(a.files, wide, a.per_dir)]
    with Pool(max(1, a.jobs)) as p:
        total = sum(p.imap_unordered(write_dir, work, chunksize=4))
    assert total == a.files
    return 0


if __name__ == "__main__":
    sys.exit(main())
