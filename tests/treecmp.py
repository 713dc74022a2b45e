#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""treecmp.py: compare a stagefs mount with its source tree, byte for byte.

    treecmp.py SRC MNT [--jobs 8] [--no-content] [--shuffle SEED] [--max-diffs 20]

Walks both trees without following symlinks and compares:
  - the names in every directory (readdir), and that MNT's root does not list
    the hidden control directory .stagefs;
  - for every entry: file type (from lstat, and the d_type readdir gave),
    mode, uid, gid, mtime to the nanosecond; size for files and symlinks;
    nlink for regular files and directories; symlink targets;
  - hard links: regular files share an inode number on MNT exactly when
    they share (st_dev, st_ino) in SRC (the names of one file are one inode,
    different files are different inodes);
  - the full content of every regular file (sha256 of both sides, read in
    1 MiB blocks by a pool of --jobs threads), and that as many bytes were
    read as lstat promised.

Prints the first --max-diffs differences, then
"N entries, N bytes compared, N differences"; exits 1 on any difference,
2 on a usage error.
"""
import argparse
import concurrent.futures as cf
import hashlib
import os
import random
import stat
import sys

BLOCK = 1 << 20
HIDDEN = ".stagefs"


def kind(mode):
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"),
                       (stat.S_ISLNK, "symlink"), (stat.S_ISCHR, "chardev"),
                       (stat.S_ISBLK, "blockdev"), (stat.S_ISFIFO, "fifo"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "unknown"


def dirent_kind(e):
    """The type readdir reported (Python falls back to lstat on DT_UNKNOWN)."""
    if e.is_symlink():
        return "symlink"
    if e.is_dir(follow_symlinks=False):
        return "dir"
    if e.is_file(follow_symlinks=False):
        return "file"
    return None  # some other type; lstat tells which


def digest(path):
    """Return (sha256 hex, bytes read) or raise OSError."""
    h = hashlib.sha256()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(BLOCK)
            if not b:
                break
            h.update(b)
            n += len(b)
    return h.hexdigest(), n


class Cmp:
    def __init__(self, src, mnt, args):
        self.src = src
        self.mnt = mnt
        self.args = args
        self.diffs = []
        self.entries = 0
        self.bytes = 0
        self.files = []  # relative paths of regular files present on both sides
        self.src_inos = {}  # (st_dev, st_ino) in SRC -> (first path, its st_ino on MNT)
        self.mnt_inos = {}  # st_ino on MNT -> (first path, its (st_dev, st_ino) in SRC)

    def diff(self, rel, what):
        self.diffs.append(f"{rel or '.'}: {what}")

    def scan(self, rel, side):
        base = self.src if side == "src" else self.mnt
        out = {}
        with os.scandir(os.path.join(base, rel) if rel else base) as it:
            for e in it:
                out[e.name] = e
        return out

    def compare_attrs(self, rel, a, b):
        ka, kb = kind(a.st_mode), kind(b.st_mode)
        if ka != kb:
            self.diff(rel, f"type {ka} != {kb}")
            return False
        if stat.S_IMODE(a.st_mode) != stat.S_IMODE(b.st_mode):
            self.diff(rel, f"mode {stat.S_IMODE(a.st_mode):04o} != {stat.S_IMODE(b.st_mode):04o}")
        if a.st_uid != b.st_uid:
            self.diff(rel, f"uid {a.st_uid} != {b.st_uid}")
        if a.st_gid != b.st_gid:
            self.diff(rel, f"gid {a.st_gid} != {b.st_gid}")
        if a.st_mtime_ns != b.st_mtime_ns:
            self.diff(rel, f"mtime_ns {a.st_mtime_ns} != {b.st_mtime_ns}")
        if ka in ("file", "symlink") and a.st_size != b.st_size:
            self.diff(rel, f"size {a.st_size} != {b.st_size}")
        if ka in ("file", "dir") and a.st_nlink != b.st_nlink:
            self.diff(rel, f"nlink {a.st_nlink} != {b.st_nlink}")
        return True

    def walk(self, rel):
        try:
            sa = self.scan(rel, "src")
        except OSError as e:
            self.diff(rel, f"cannot list source: {e}")
            return
        try:
            sb = self.scan(rel, "mnt")
        except OSError as e:
            self.diff(rel, f"cannot list mount: {e}")
            return
        if not rel and HIDDEN in sb:
            self.diff(HIDDEN, "listed by readdir at the mount root (must be hidden)")
            del sb[HIDDEN]
        for name in sorted(sa.keys() - sb.keys()):
            self.diff(os.path.join(rel, name), "missing from the mount")
        for name in sorted(sb.keys() - sa.keys()):
            self.diff(os.path.join(rel, name), "only in the mount")
        for name in sorted(sa.keys() & sb.keys()):
            r = os.path.join(rel, name)
            self.entries += 1
            try:
                a = sa[name].stat(follow_symlinks=False)
            except OSError as e:
                self.diff(r, f"lstat source: {e}")
                continue
            try:
                b = os.lstat(os.path.join(self.mnt, r))
            except OSError as e:
                self.diff(r, f"lstat mount: {e}")
                continue
            dk = dirent_kind(sb[name])
            if dk is not None and dk != kind(b.st_mode):
                self.diff(r, f"readdir says {dk}, lstat says {kind(b.st_mode)}")
            if not self.compare_attrs(r, a, b):
                continue
            if stat.S_ISLNK(a.st_mode):
                self.compare_link(r)
            elif stat.S_ISDIR(a.st_mode):
                self.walk(r)
            elif stat.S_ISREG(a.st_mode):
                self.files.append(r)
                self.compare_inode(r, a, b)

    def compare_inode(self, rel, a, b):
        """Names of one source file are one mount inode, and only they."""
        key = (a.st_dev, a.st_ino)
        first, ino = self.src_inos.setdefault(key, (rel, b.st_ino))
        if ino != b.st_ino:
            self.diff(rel, f"hard link of {first} in the source, but inode {b.st_ino} != {ino} on the mount")
        first, src = self.mnt_inos.setdefault(b.st_ino, (rel, key))
        if src != key:
            self.diff(rel, f"shares inode {b.st_ino} with {first} on the mount, but not in the source")

    def compare_link(self, rel):
        try:
            ta = os.readlink(os.path.join(self.src, rel))
            tb = os.readlink(os.path.join(self.mnt, rel))
        except OSError as e:
            self.diff(rel, f"readlink: {e}")
            return
        if ta != tb:
            self.diff(rel, f"symlink target {ta!r} != {tb!r}")

    def compare_file(self, rel):
        """Runs in a worker thread; returns (rel, problem or None, bytes)."""
        try:
            ha, na = digest(os.path.join(self.src, rel))
        except OSError as e:
            return rel, f"read source: {e}", 0
        try:
            hb, nb = digest(os.path.join(self.mnt, rel))
        except OSError as e:
            return rel, f"read mount: {e}", 0
        if na != nb:
            return rel, f"read {na} bytes from the source, {nb} from the mount", na
        if ha != hb:
            return rel, f"content differs (sha256 {ha[:16]}... != {hb[:16]}...)", na
        return rel, None, na

    def compare_contents(self):
        files = list(self.files)
        if self.args.shuffle is not None:
            random.Random(self.args.shuffle).shuffle(files)
        with cf.ThreadPoolExecutor(max_workers=self.args.jobs) as ex:
            for rel, problem, n in ex.map(self.compare_file, files):
                self.bytes += n
                if problem:
                    self.diff(rel, problem)

    def run(self):
        try:
            a, b = os.lstat(self.src), os.lstat(self.mnt)
        except OSError as e:
            self.diff("", str(e))
            return
        self.compare_attrs("", a, b)
        self.walk("")
        if not self.args.no_content:
            self.compare_contents()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("mnt")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--no-content", action="store_true", help="compare metadata only")
    ap.add_argument("--shuffle", type=int, metavar="SEED",
                    help="read the files in a random order")
    ap.add_argument("--max-diffs", type=int, default=20)
    args = ap.parse_args()
    for p in (args.src, args.mnt):
        if not os.path.isdir(p):
            print(f"treecmp: {p} is not a directory", file=sys.stderr)
            return 2
    c = Cmp(args.src, args.mnt, args)
    c.run()
    for d in c.diffs[:args.max_diffs]:
        print(f"treecmp: {d}")
    if len(c.diffs) > args.max_diffs:
        print(f"treecmp: ... and {len(c.diffs) - args.max_diffs} more")
    print(f"{c.entries} entries, {c.bytes} bytes compared, {len(c.diffs)} differences")
    return 1 if c.diffs else 0


if __name__ == "__main__":
    sys.exit(main())
