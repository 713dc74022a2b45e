#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""cephfs_tree.py: write genscale.py's tree of tiny files into CephFS, fast.

    cephfs_tree.py --conf CEPH_CONF [--fs cephfs] PATH --files N [--wide W]
                   [--per-dir 1000] [--jobs 4] [--empty]
    cephfs_tree.py --conf CEPH_CONF [--fs cephfs] PATH --rm

The same names and contents as `genscale.py DIR --files N` (so
`genscale.py MNT --check` checks a mount of it), written through
libcephfs (Debian's python3-cephfs), one client a process: no FUSE
between.  --empty: the same names, no bytes (no data object a file:
creates only, several times faster; for metadata benchmarks).
"""
import argparse
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from genscale import content, layout  # noqa: E402

ARGS = None


def set_args(a):
    global ARGS
    ARGS = a


def mount():
    import cephfs
    fs = cephfs.LibCephFS(conffile=ARGS.conf)
    fs.init()
    fs.mount(filesystem_name=ARGS.fs.encode())
    return fs


def mkdirs(fs, path):
    cur = ""
    for part in path.strip("/").split("/"):
        cur += "/" + part
        try:
            fs.mkdir(cur, 0o755)
        except Exception as e:  # cephfs.ObjectExists
            if "exist" not in str(e).lower():
                raise


def write_dirs(batch):
    fs = mount()
    try:
        for d, first, n in batch:
            path = ARGS.path.rstrip("/") + "/" + d
            mkdirs(fs, path)
            for i in range(first, first + n):
                rel = "%s/f%07d" % (d, i)  # as genscale.py names them
                fd = fs.open(path + "/f%07d" % i, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                if not ARGS.empty:
                    fs.write(fd, content(rel), 0)
                fs.close(fd)
    finally:
        fs.unmount()
        fs.shutdown()
    return sum(n for _, _, n in batch)


def rm_tree(fs, path):
    d = fs.opendir(path)
    names = []
    while True:
        e = fs.readdir(d)
        if e is None:
            break
        if e.d_name not in (b".", b".."):
            names.append((e.d_name.decode(), e.is_dir()))
    fs.closedir(d)
    for name, is_dir in names:
        p = path + "/" + name
        if is_dir:
            rm_tree(fs, p)
        else:
            fs.unlink(p)
    fs.rmdir(path)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--conf", required=True)
    ap.add_argument("--fs", default="cephfs")
    ap.add_argument("--files", type=int, default=0)
    ap.add_argument("--wide", type=int, default=None)
    ap.add_argument("--per-dir", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--empty", action="store_true")
    ap.add_argument("--rm", action="store_true")
    ARGS = ap.parse_args()
    if ARGS.rm:
        fs = mount()
        try:
            rm_tree(fs, ARGS.path)
        except Exception as e:
            if "no such" not in str(e).lower() and "not found" not in str(e).lower():
                raise
        fs.unmount()
        fs.shutdown()
        return 0
    wide = ARGS.files // 10 if ARGS.wide is None else ARGS.wide
    dirs = layout(ARGS.files, wide, ARGS.per_dir)
    fs = mount()
    mkdirs(fs, ARGS.path)
    fs.unmount()
    fs.shutdown()
    batches = [dirs[i::ARGS.jobs] for i in range(ARGS.jobs)]
    # spawned, not forked: a Ceph client does not survive a fork
    with multiprocessing.get_context("spawn").Pool(ARGS.jobs, initializer=set_args,
                                                   initargs=(ARGS,)) as p:
        done = sum(p.map(write_dirs, batches))
    # CephFS propagates recursive statistics up the tree lazily (seconds):
    # wait until the root's count has them all, so that a mount right
    # after sees a settled tree (cephfs:// saves a walk only then)
    fs = mount()
    want, got = done + len(dirs), -1
    for _ in range(600):
        got = int(fs.getxattr(ARGS.path, "ceph.dir.rentries").decode())
        if got >= want:
            break
        time.sleep(0.1)
    fs.unmount()
    fs.shutdown()
    print("%d files in %d directories (ceph.dir.rentries %d)" % (done, len(dirs), got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
