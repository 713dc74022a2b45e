#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""loader_epoch.py: one epoch of a CPU-bound PyTorch DataLoader over files.

What an image-classification input pipeline does with a directory of
small images, with torch's own DataLoader: a map-style dataset of every
regular file under ROOT, shuffled by a seeded generator, WORKERS worker
processes, each sample opened, read whole and closed, then turned into a
3 x SIZE x SIZE float tensor the way a training transform would (the
bytes as an 8-bit image, converted to float, normalized, a random crop
resized with bilinear interpolation, a random flip), batches of BATCH
collated and handed to the main process.  The files of the benchmarks are
random bytes, not JPEGs, so there is no decode: the transform stands in
for the CPU work per sample that keeps the loader's workers busy, which is
what makes the epoch CPU-bound, so that what a file system costs in CPU
per file shows in the epoch's time.

  loader_epoch.py ROOT [--workers N] [--seed S] [--batch B] [--size PX]
                  [--limit N]

Prints one line of JSON: files, bytes, seconds (the epoch, from the first
batch asked for to the last one received), torch (its version).  Exit 0;
1 on an error; 3 when torch cannot be imported (the message says why).
"""
import argparse
import json
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset
except ImportError as e:  # Debian: python3-torch
    print("loader_epoch.py: no torch for %s: %s" % (sys.executable, e), file=sys.stderr)
    sys.exit(3)  # not 2: argparse exits 2 on bad arguments

from epoch_reader import list_files  # noqa: E402 (the same samples as the plain reader's)


class Files(Dataset):
    """Each sample: (the file as a 3 x size x size tensor, its byte count)."""

    def __init__(self, paths, size):
        self.paths = paths
        self.size = size

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            data = f.read()
        n = len(data)
        side = max(int((n // 3) ** 0.5), 8)
        need = 3 * side * side  # a file under 192 bytes is padded with zeros
        px = torch.frombuffer(bytearray(data[:need].ljust(need, b"\0")), dtype=torch.uint8)
        img = px.view(3, side, side).float().div_(255.0)
        img = img.sub_(0.45).div_(0.225)
        # a random crop of 60-100 % of each side, resized, maybe flipped
        g = torch.Generator().manual_seed(i)
        c = max(int(side * (0.6 + 0.4 * torch.rand(1, generator=g).item())), 4)
        y = int(torch.randint(0, side - c + 1, (1,), generator=g))
        x = int(torch.randint(0, side - c + 1, (1,), generator=g))
        img = F.interpolate(img[None, :, y:y + c, x:x + c], size=(self.size, self.size),
                            mode="bilinear", align_corners=False)[0]
        if torch.rand(1, generator=g).item() < 0.5:
            img = img.flip(2)
        return img, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()

    paths = [os.path.join(a.root, rel) for rel in list_files(a.root)]
    if not paths:
        print("loader_epoch.py: no files under %s" % a.root, file=sys.stderr)
        return 1
    g = torch.Generator().manual_seed(a.seed)
    if a.limit:
        keep = torch.randperm(len(paths), generator=g)[:a.limit].tolist()
        paths = [paths[i] for i in sorted(keep)]
    # prefetch_factor only with workers (torch 1.13 refuses it without)
    more = {"prefetch_factor": 2} if a.workers else {}
    dl = DataLoader(Files(paths, a.size), batch_size=a.batch, shuffle=True,
                    generator=g, num_workers=a.workers, **more)
    files = nbytes = 0
    t0 = time.monotonic()
    for imgs, ns in dl:
        if imgs.shape[1:] != (3, a.size, a.size):
            print("loader_epoch.py: a batch of shape %s" % (tuple(imgs.shape),), file=sys.stderr)
            return 1
        files += len(ns)
        nbytes += int(ns.sum())
    secs = time.monotonic() - t0
    print(json.dumps({"files": files, "bytes": nbytes, "seconds": round(secs, 3),
                      "torch": torch.__version__}))
    return 0 if files == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main())
