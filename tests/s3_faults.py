#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""s3_faults.py: an S3 endpoint that fails on purpose, in front of a real one.

    s3_faults.py [--listen PORT] --upstream http://127.0.0.1:UPORT --count FILE
                 [--every N] [--faults 503,500,429,reset,short] [--log FILE]
                 [--delay-ms MS]

Forwards every request to the upstream gateway unchanged (the Host header
included, so that SigV4 signatures made for this address still hold), except
that every Nth ranged GET (default 2nd) gets a fault instead, taking the
kinds in turn:

  503    HTTP 503 with an S3 <Code>SlowDown</Code> body (throttling)
  500    HTTP 500 <Code>InternalError</Code>
  429    HTTP 429 (too many requests)
  reset  the connection closed with no answer
  short  the upstream's answer, headers and all, but cut off halfway through
         its body, then the connection closed

FILE gets the number of faults injected so far after each one; --every 0
injects none.  --log FILE gets a line for each request: its method and its
path with the query; and "CONNECTION" for each connection a client opens.
--delay-ms holds each request that long first, as a distant endpoint would.  Runs until killed.  For tests/rados/s3_source.sh: every read must still return the
right bytes, through the client's retries.
"""
import argparse
import http.client
import http.server
import socket
import socketserver
import sys
import threading
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, default=0,
                    help="port; 0 (default) lets the kernel choose one")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--count", required=True)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--faults", default="503,500,429,reset,short")
    ap.add_argument("--log")
    ap.add_argument("--delay-ms", type=float, default=0,
                    help="wait this long before passing each request on (a distant endpoint)")
    a = ap.parse_args()
    up = urllib.parse.urlsplit(a.upstream)
    kinds = a.faults.split(",")
    lock = threading.Lock()
    state = {"ranged": 0, "faults": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def setup(self):
            super().setup()
            if a.log:
                with lock, open(a.log, "a") as f:
                    f.write("CONNECTION\n")

        def fault(self):
            """The fault to inject for this request, or None."""
            if a.log:
                with lock, open(a.log, "a") as f:
                    f.write("%s %s\n" % (self.command, self.path))
            if self.command != "GET" or "Range" not in self.headers or not a.every:
                return None
            with lock:
                state["ranged"] += 1
                if state["ranged"] % a.every:
                    return None
                kind = kinds[state["faults"] % len(kinds)]
                state["faults"] += 1
                n = state["faults"]
            with open(a.count, "w") as f:
                f.write("%d\n" % n)
            return kind

        def reply_error(self, status, code):
            body = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code>'
                    '<Message>injected by s3_faults.py</Message></Error>' % code).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def forward(self, cut=False):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
            headers = {k: v for k, v in self.headers.items()}
            conn.request(self.command, self.path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            conn.close()
            self.send_response(r.status, r.reason)
            for k, v in r.getheaders():
                if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if cut:
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(data)

        def do(self):
            if a.delay_ms:
                time.sleep(a.delay_ms / 1000)
            kind = self.fault()
            if kind == "503":
                self.reply_error(503, "SlowDown")
            elif kind == "500":
                self.reply_error(500, "InternalError")
            elif kind == "429":
                self.reply_error(429, "TooManyRequests")
            elif kind == "reset":
                # shutdown: close() alone leaves the socket open while
                # the handler's file objects still refer to it
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            elif kind == "short":
                self.forward(cut=True)
            else:
                self.forward()

        do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = do

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", a.listen), Handler)
    # the port is printed: a fixed one can be any client's ephemeral port
    print("listening %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
