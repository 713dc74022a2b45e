#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""gentree.py: write a deterministic test dataset tree for stagefs.

    gentree.py DIR [--big-mb 200] [--small 10000] [--chunk 4M[,1M...]] [--wide 2000] [--seed 1]

The same arguments always give the same tree (names, contents, sizes, modes,
owners, mtimes).  What it holds:

  deep/a/b/c/d/e/f/leaf.bin   nesting depth >= 5
  empty-dir/, deep/.../empty  empty directories
  edge/                       empty files, 1-byte files, and for each chunk
                              size C: files of C-1, C, C+1, 2C-1, 2C, 2C+1 bytes
  big.bin                     --big-mb MiB (0 = none)
  naïve café/ファイル 1.bin    UTF-8 and space names, plus other odd names
  links/                      relative, absolute, dangling symlinks, a symlink
                              to a directory, a symlink to a symlink, and two
                              hard links to one file (nlink 2)
  wide/                       --wide (2000) files in one directory
  small/dNN/fNNNNN.bin        --small files of 1-200 KiB (log-uniform sizes,
                              so ~37 KiB on average), over 100 directories
  perms/                      modes 0600 0640 0755 0444 0400, 0700 and 0555
                              dirs, owners 1234:5678 and 4321:8765

All mtimes are set with nanoseconds (directories last, bottom-up).

Content: every 64 KiB block is a slice of a seeded 4 MiB random pool starting
at a pseudo-random offset, with the block's (file, block) number stamped in its
first 16 bytes.  So writing is fast (no per-byte generation), nothing
compresses, and no two blocks, hence no two chunks, are alike.
"""
import argparse
import hashlib
import os
import random
import struct
import sys

BLOCK = 64 * 1024
POOL = 4 * 1024 * 1024
BASE_NS = 1_600_000_000 * 10**9  # 2020-09-13


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(s[:-1]) * mult[s[-1]]
    return int(s)


class Gen:
    def __init__(self, root, seed):
        self.root = root
        self.rng = random.Random(seed)
        self.pool = random.Random(seed * 7919 + 1).randbytes(POOL + BLOCK)
        self.fileno = 0
        self.mtimes = {}  # path -> ns, applied at the end
        self.nfiles = 0
        self.nbytes = 0
        self.is_root = os.geteuid() == 0

    def path(self, rel):
        return os.path.normpath(os.path.join(self.root, rel))

    def content(self, size):
        """Yield the blocks of a new file of @size bytes."""
        self.fileno += 1
        fid = self.fileno
        for i, off in enumerate(range(0, size, BLOCK)):
            n = min(BLOCK, size - off)
            h = hashlib.blake2b(struct.pack("<QQ", fid, i), digest_size=8).digest()
            start = int.from_bytes(h, "little") % POOL
            stamp = struct.pack("<QQ", fid, i)
            blk = stamp + self.pool[start + 16:start + BLOCK]
            yield blk[:n]

    def mtime(self):
        return BASE_NS + self.rng.randrange(0, 10**8) * 10**9 + self.rng.randrange(1, 10**9)

    def mkdir(self, rel, mode=0o755):
        p = self.path(rel)
        os.makedirs(p, exist_ok=True)
        os.chmod(p, mode)
        self.mtimes[p] = self.mtime()

    def file(self, rel, size, mode=0o644, owner=None):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb", buffering=0) as f:
            for blk in self.content(size):
                f.write(blk)
        os.chmod(p, mode)
        if owner and self.is_root:
            os.chown(p, *owner)
        self.mtimes[p] = self.mtime()
        self.nfiles += 1
        self.nbytes += size

    def symlink(self, rel, target, owner=None):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(target, p)
        if owner and self.is_root:
            os.lchown(p, *owner)
        self.mtimes[p] = self.mtime()

    def finish(self):
        # Directories made implicitly (by makedirs) get an mtime too; sorted,
        # because readdir order differs between filesystems.
        for d in sorted(os.path.normpath(d) for d, _, _ in os.walk(self.root)):
            if d not in self.mtimes:
                self.mtimes[d] = self.mtime()
        # Files and links first, then directories deepest first, so that
        # nothing written later bumps an mtime already set.
        items = sorted(self.mtimes.items(), key=lambda kv: (os.path.isdir(kv[0]) and
                                                             not os.path.islink(kv[0]),
                                                             -kv[0].count(os.sep)))
        for p, ns in items:
            os.utime(p, ns=(ns, ns), follow_symlinks=False)


def build(args):
    g = Gen(args.dir, args.seed)
    chunks = [parse_size(c) for c in args.chunk.split(",")]

    # Nesting, empty dirs.
    deep = "deep/a/b/c/d/e/f"
    g.mkdir("deep")
    for i in range(1, 8):
        g.mkdir("/".join(deep.split("/")[:i + 1]))
    g.file(deep + "/leaf.bin", 12345)
    g.file("deep/a/b/mid.bin", 70000)
    g.mkdir("deep/a/b/c/empty")
    g.mkdir("empty-dir")

    # Size edges.
    g.mkdir("edge")
    for i in range(3):
        g.file(f"edge/empty{i}", 0)
    for i in range(3):
        g.file(f"edge/one{i}", 1)
    g.file("edge/block-1", BLOCK - 1)
    g.file("edge/block+1", BLOCK + 1)
    for c in sorted(set(chunks)):
        tag = f"{c >> 20}M" if c % (1 << 20) == 0 else f"{c >> 10}K"
        for name, size in (("c-1", c - 1), ("c", c), ("c+1", c + 1),
                           ("2c-1", 2 * c - 1), ("2c", 2 * c), ("2c+1", 2 * c + 1)):
            g.file(f"edge/{tag}-{name}", size)

    if args.big_mb > 0:
        g.file("big.bin", args.big_mb << 20)

    # Names.
    g.mkdir("naïve café")
    g.file("naïve café/ファイル 1.bin", 3000)
    g.file("naïve café/ Ünïcödé  spaces ", 17)
    g.file("names/-leading-dash", 5)
    g.file("names/quote'\"back\\slash", 6)
    g.file("names/" + "L" * 255, 7)
    g.file("names/.hidden", 8)
    g.file("names/emoji-\U0001F600.txt", 9)

    # A wide directory (readdir continues over many replies) and a hard link.
    if args.wide > 0:
        for i in range(args.wide):
            g.file(f"wide/{i:05d}-" + "w" * (i % 97), i % 3)
    g.file("links/hard-a", 2222)
    os.link(g.path("links/hard-a"), g.path("links/hard-b"))

    # Symlinks.
    g.mkdir("links")
    g.symlink("links/rel-file", "../deep/a/b/mid.bin")
    g.symlink("links/abs-file", "/etc/hostname")
    g.symlink("links/dangling", "no/such/target")
    g.symlink("links/dir", "../deep/a", owner=(1234, 5678))
    g.symlink("links/link-to-link", "rel-file")
    g.symlink("links/utf8-ターゲット", "../naïve café/ファイル 1.bin")

    # Modes and owners.
    g.mkdir("perms")
    for mode in (0o600, 0o640, 0o755, 0o444, 0o400):
        g.file(f"perms/f{mode:04o}", 1000 + mode, mode=mode)
    g.file("perms/owned-1234", 4096, mode=0o640, owner=(1234, 5678))
    g.file("perms/owned-4321", 10, mode=0o600, owner=(4321, 8765))
    g.file("perms/private/inside", 100)
    g.mkdir("perms/private", 0o700)
    g.file("perms/readonly-dir/inside", 100)
    g.mkdir("perms/readonly-dir", 0o555)
    g.mkdir("perms/other-owner")
    if g.is_root:
        os.chown(g.path("perms/other-owner"), 1234, 5678)

    # Many small files.
    if args.small > 0:
        ndirs = min(100, args.small)
        for d in range(ndirs):
            g.mkdir(f"small/d{d:02d}")
        lo, hi = 1024, 200 * 1024
        for i in range(args.small):
            size = int(lo * (hi / lo) ** g.rng.random())
            g.file(f"small/d{i % ndirs:02d}/f{i:05d}.bin", size)
        g.mkdir("small")

    g.mkdir(".")
    g.finish()
    return g


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--big-mb", type=int, default=200)
    ap.add_argument("--small", type=int, default=10000)
    ap.add_argument("--chunk", default="4M",
                    help="chunk size(s) whose boundaries get edge files, comma separated")
    ap.add_argument("--wide", type=int, default=2000,
                    help="files in one directory (wide/)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if os.path.exists(args.dir) and os.listdir(args.dir):
        sys.exit(f"gentree: {args.dir} exists and is not empty")
    os.makedirs(args.dir, exist_ok=True)
    g = build(args)
    if not g.is_root:
        print("gentree: not root: files keep the caller's owner", file=sys.stderr)
    print(f"gentree: {g.nfiles} files, {g.nbytes} bytes in {args.dir}")


if __name__ == "__main__":
    main()
