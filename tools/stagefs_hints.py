#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""stagefs_hints: tell the stagefs daemon the order a job will read files in.

The daemon then keeps a window of the next files cached ahead of the reader
(docs/prefetch.md, "Epoch-order hints"); it follows the reader by its opens,
so nothing else changes in the job.  This module speaks the control-socket
protocol (docs/control.md) with the standard library only.

Plain Python (no torch needed):

    from stagefs_hints import send_order, HintedOrder
    order = list(range(len(paths)))
    random.shuffle(order)
    send_order(paths[i] for i in order)          # returns the session id
    # or wrap any iterable of indices; the order is sent when iterated:
    for i in HintedOrder(order, paths):
        read(paths[i])

With PyTorch (Debian python3-torch), wrap the sampler of a DataLoader:

    sampler = StagefsHintSampler(RandomSampler(ds), paths=ds.paths)
    loader = DataLoader(ds, sampler=sampler, num_workers=8)

Each epoch's __iter__ draws the inner sampler's order, sends it, then yields
it.  DataLoader workers are forked from the process that sent the hint, so
they share its session id: the default scope "sid" matches their opens.

From the shell: python3 stagefs_hints.py [--window N] LIST  (LIST: one path
a line, '-' for stdin), like `stagefs warmup --order LIST`.
"""
import os
import socket
import sys

PROTO_VERSION = 1
SOCKET_VFILE = os.path.join(".stagefs", "socket")

__all__ = ["StagefsError", "find_mount", "HintClient", "send_order",
           "HintedOrder"]


class StagefsError(Exception):
    """The daemon refused a request, or no stagefs mount was found."""


def _escape(path):
    """Percent-encode bytes <= 0x20, 0x7f and '%' (docs/control.md)."""
    raw = os.fsencode(path)
    out = bytearray()
    for b in raw:
        if b <= 0x20 or b == 0x7F or b == 0x25:
            out += b"%%%02X" % b
        else:
            out.append(b)
    return bytes(out)


def _unescape(word):
    out = bytearray()
    i = 0
    while i < len(word):
        if word[i] == 0x25 and i + 2 < len(word):
            out.append(int(word[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(word[i])
            i += 1
    return out.decode("utf-8", "replace")


def _parse(line):
    words = line.rstrip(b"\r\n").split(b" ")
    kv = {}
    for w in words[1:]:
        if b"=" in w:
            k, v = w.split(b"=", 1)
            kv[k.decode()] = _unescape(v)
    return words[0].decode(), kv


def _abspath(path):
    return os.path.normpath(os.path.join(os.getcwd(), os.fspath(path)))


def find_mount(path):
    """(mount root, path relative to it) of the stagefs mount holding path."""
    p = _abspath(path)
    cur = p
    while True:
        if os.path.exists(os.path.join(cur, SOCKET_VFILE)):
            break
        parent = os.path.dirname(cur)
        if parent == cur:
            raise StagefsError("%s is not in a stagefs mount" % path)
        cur = parent
    real = os.path.realpath(p)
    for cand in (real, p):
        if cand == cur or cand.startswith(cur.rstrip("/") + "/"):
            return cur, os.path.relpath(cand, cur) if cand != cur else ""
    return cur, os.path.relpath(p, cur)


class HintClient:
    """One connection to the daemon of the mount holding `path`."""

    def __init__(self, path="."):
        self.root, _ = find_mount(path)
        with open(os.path.join(self.root, SOCKET_VFILE)) as f:
            sock_path = f.read().strip()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sock_path)
        self.rfile = self.sock.makefile("rb")
        status, kv = self._request(b"HELLO version=%d" % PROTO_VERSION)
        if status != "OK":
            raise StagefsError("daemon refused HELLO: %s" % kv.get("msg"))

    def _send(self, data):
        self.sock.sendall(data)

    def _request(self, line):
        self._send(line + b"\n")
        return self._reply()

    def _reply(self):
        line = self.rfile.readline()
        if not line:
            raise StagefsError("the daemon closed the connection")
        return _parse(line)

    def _rel(self, path):
        p = _abspath(path)
        r = self.root.rstrip("/")
        if p == self.root:
            return ""
        if p.startswith(r + "/"):
            return p[len(r) + 1:]
        root, rel = find_mount(p)	# reached through a symlink?
        if root != self.root:
            raise StagefsError("%s is not in the mount %s" % (p, self.root))
        return rel

    def hint(self, paths, window=None, scope=None):
        """Send an order (paths absolute, or relative to the current directory).

        Returns (session id, files hinted, paths skipped)."""
        head = b"HINT"
        if window:
            head += b" window=%d" % int(window)
        if scope:
            head += b" scope=" + scope.encode()
        buf = [head + b"\n"]
        for p in paths:
            buf.append(b"PATH " + _escape(self._rel(p)) + b"\n")
            if len(buf) >= 4096:
                self._send(b"".join(buf))
                buf = []
        buf.append(b"END\n")
        self._send(b"".join(buf))
        skipped = []
        while True:
            status, kv = self._reply()
            if status == "FAIL":
                skipped.append((kv.get("path"), kv.get("code")))
            elif status == "OK":
                return int(kv["session"]), int(kv["files"]), int(kv.get("skipped", 0))
            else:
                raise StagefsError("HINT refused: %s" % kv.get("msg", status))

    def end(self, session):
        status, kv = self._request(b"HINT_END session=%d" % session)
        if status != "OK":
            raise StagefsError("HINT_END refused: %s" % kv.get("msg", status))

    def close(self):
        try:
            self._send(b"BYE\n")
        except OSError:
            pass
        self.rfile.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def send_order(paths, window=None, scope=None):
    """Send the order of `paths` (an iterable) to their mount's daemon.

    Returns the hint session id.  Paths must all be in one mount."""
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise StagefsError("empty order")
    with HintClient(os.path.dirname(_abspath(paths[0])) or "/") as c:
        return c.hint(paths, window=window, scope=scope)[0]


class HintedOrder:
    """An iterable of indices that announces its order when iterated.

    indices: any iterable of ints (re-iterated each epoch if it can be);
    paths: a sequence mapping an index to its file."""

    def __init__(self, indices, paths, window=None, scope=None):
        self.indices = indices
        self.paths = paths
        self.window = window
        self.scope = scope
        self.session = None

    def __iter__(self):
        order = list(self.indices)
        try:
            self.session = send_order((self.paths[i] for i in order),
                                      window=self.window, scope=self.scope)
        except (OSError, StagefsError) as e:
            # hints are an optimisation: never fail the job over them
            print("stagefs_hints: order not sent: %s" % e, file=sys.stderr)
        return iter(order)

    def __len__(self):
        return len(self.indices)


try:
    import torch.utils.data as _tud
except ImportError:  # torch is optional
    _tud = None

if _tud is not None:
    class StagefsHintSampler(_tud.Sampler):
        """Wraps a sampler; each epoch's order is sent to stagefs first."""

        def __init__(self, sampler, paths, window=None, scope=None):
            self.sampler = sampler
            self.paths = paths
            self.window = window
            self.scope = scope

        def __iter__(self):
            return iter(HintedOrder(self.sampler, self.paths,
                                    self.window, self.scope))

        def __len__(self):
            return len(self.sampler)

    __all__.append("StagefsHintSampler")


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="send a file order to stagefs")
    ap.add_argument("--window", type=int)
    ap.add_argument("--scope", choices=("sid", "pgid", "uid"))
    ap.add_argument("list", help="file with one path a line, - for stdin")
    a = ap.parse_args(argv)
    f = sys.stdin if a.list == "-" else open(a.list)
    paths = [l.rstrip("\n") for l in f if l.strip()]
    sid = send_order(paths, window=a.window, scope=a.scope)
    print("hint session %d: %d files in order" % (sid, len(paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
