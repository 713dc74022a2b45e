# SPDX-License-Identifier: Apache-2.0
"""hostile.py: the client moves of the multi-tenant tests' attackers.

The integration tests that play a hostile tenant (tenant_ctlconn.sh,
tenant_hostile.sh, metrics_slowloris.sh) write their attacker as a small
Python script; the moves they share live here, so that each test says what
it tries and checks, not how to speak to the daemon:

    sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
    import hostile
"""
import socket
import time
import urllib.parse


def ctl_hello(path):
    """Connect to the control socket at PATH and say HELLO.

    Returns (sock, line): the connected socket and the daemon's first reply
    line, decoded ("OK ..." when admitted, "ERR code=... msg=..." when
    refused).  A daemon that refuses the connection may close it before our
    HELLO is sent; its reason is there to read all the same.  The caller
    closes the socket.
    """
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    try:
        s.sendall(b"HELLO version=1\n")
    except OSError:
        pass                    # refused before our HELLO: the reason is there to read
    return s, s.makefile("rb").readline().decode()


def refusal(line):
    """'CODE: message' of an "ERR code=CODE msg=MESSAGE" line (escapes undone)."""
    kv = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
    return kv.get("code", "") + ": " + urllib.parse.unquote(kv.get("msg", line.strip()))


def hold(path, n):
    """Open N control connections to PATH, saying HELLO on each.

    Returns (held, refused, msg): the admitted sockets (still open), how
    many were refused, and the first refusal as refusal() words it.
    """
    held, refused, msg = [], 0, ""
    for _ in range(n):
        s, line = ctl_hello(path)
        if line.startswith("OK "):
            held.append(s)
            continue
        refused += 1
        if not msg:
            msg = refusal(line)
        s.close()
    return held, refused, msg


def closed_by_peer(socks):
    """How many of SOCKS the daemon has closed (a read returns EOF now)."""
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            closed += s.recv(1) == b""
        except BlockingIOError:
            pass
    return closed


def trickle(port, limit_s):
    """Send "GET /metrics ..." to 127.0.0.1:PORT one byte a second.

    Returns how long the connection lived before the server closed it, as
    "%.2f" seconds, or "never" if it was still open after LIMIT_S seconds
    (or once the whole request was sent).
    """
    t = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    try:
        for b in b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"x" * 64:
            try:
                t.send(bytes([b]))
                t.settimeout(1.0)
                if t.recv(4096) == b"":
                    return "%.2f" % (time.monotonic() - t0)
            except socket.timeout:
                pass
            except OSError:
                return "%.2f" % (time.monotonic() - t0)
            if time.monotonic() - t0 > limit_s:
                break
        return "never"
    finally:
        t.close()
