#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""stagefs-csi: the CSI node plugin of stagefs (csi/README.md).

    stagefs-csi [--endpoint unix:///csi/csi.sock] [--root /datasets]
                [--node-id NAME] [--driver-name stagefs.io]

Speaks the CSI spec's gRPC (csi/proto/csi.proto, v1.12.0) on a unix socket:
the Identity service and the Node service, no Controller (datasets are
named, not provisioned).  NodePublishVolume bind-mounts the dataset's
directory of the node daemon's root (ROOT/NAME, or ROOT/NAME@VERSION) onto
the pod's target path, read-only, after asking the daemon (ACCESS on its
control socket) whether the pod's namespace may read it;
NodeUnpublishVolume unmounts it, from /proc/self/mountinfo alone, so that a
dead daemon or a stale FUSE mount never blocks it.  Both are idempotent, as
kubelet retries them.
"""
import argparse
import concurrent.futures
import ctypes
import errno
import logging
import os
import re
import signal
import socket
import stat
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))  # through /usr/bin/stagefs-csi
import csi_pb2 as pb  # noqa: E402  (generated from csi/proto/csi.proto by make)

VERSION = "0.1.0"
log = logging.getLogger("stagefs-csi")

# pod information kubelet adds to volume_context with podInfoOnMount
POD_NS = "csi.storage.k8s.io/pod.namespace"
POD_NAME = "csi.storage.k8s.io/pod.name"
POD_UID = "csi.storage.k8s.io/pod.uid"

TARGET_UID_RE = re.compile(r"/pods/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/volumes/")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")
VERSION_RE = re.compile(r"^[0-9]{1,19}$")

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 1, 2, 4, 32, 4096
MNT_DETACH = 2
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                       ctypes.c_void_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class Fail(Exception):
    """A call's gRPC status and message."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code
        self.msg = msg


def sys_mount(src, dst, flags):
    if libc.mount(src.encode() if src else None, dst.encode(), None, flags, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), dst)


def sys_umount(path, flags=0):
    if libc.umount2(path.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def unescape_mountinfo(s):
    """mountinfo writes space, tab, newline and backslash as \\ooo."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounts():
    """(mount point, root in its file system, major:minor, fstype) of this namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a = line.split()
            sep = a.index("-")
            out.append((unescape_mountinfo(a[4]), unescape_mountinfo(a[3]), a[2], a[sep + 1]))
    return out


def mounted_at(path):
    """The topmost mount at @path (as mounts() gives it), or None."""
    found = None
    for m in mounts():
        if m[0] == path:
            found = m
    return found


class Daemon:
    """The node daemon: its root and its control socket (docs/control.md)."""

    def __init__(self, root, timeout=5.0):
        self.root = root
        self.timeout = timeout

    def _socket_path(self):
        # a stale FUSE root fails at once (ENOTCONN), a live one answers
        with open(os.path.join(self.root, ".stagefs", "socket")) as f:
            return f.read().strip()

    def _connect(self):
        """A connection past HELLO: (socket, its file).  The caller closes the socket."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._socket_path())
            f = s.makefile("rwb")
            f.write(b"HELLO version=1\n")
            f.flush()
            hello = f.readline().decode()
            if not hello.startswith("OK"):
                raise OSError(errno.EPROTO, "the daemon refused HELLO: " + hello.strip())
        except BaseException:
            s.close()
            raise
        return s, f

    def ask(self, line):
        """Send one request; the reply line's words as (status, {key: value})."""
        s, f = self._connect()
        try:
            f.write(line.encode() + b"\n")
            f.flush()
            reply = f.readline().decode().rstrip("\n")
        finally:
            s.close()
        return parse_reply(reply)

    def warmup(self, dataset, ns="", quota_only=True):
        """WARMUP of a whole dataset, to its end, charged to namespace ns
        (refused where ns has no quota, with quota_only): the final line,
        as ask() gives it."""
        s, f = self._connect()
        try:
            who = ""
            if ns:
                who = " namespace=%s%s" % (quote(ns), " quota_only=1" if quota_only else "")
            f.write(("WARMUP mode=fetch progress_ms=1000%s\nPATH %s\nEND\n" % (who, quote(dataset))).encode())
            f.flush()
            # PROGRESS every second while it runs; a dead daemon closes the socket
            s.settimeout(None)
            while True:
                line = f.readline().decode().rstrip("\n")
                if not line:
                    raise OSError(errno.ECONNRESET, "the daemon closed the connection")
                status, kv = parse_reply(line)
                if status in ("DONE", "ERR"):
                    return status, kv
        finally:
            s.close()

    def root_dev(self):
        """major:minor of the daemon's mount at its root, or None."""
        m = mounted_at(self.root)
        return m[2] if m else None


def quote(s):
    """ctl_escape: bytes <= 0x20, 0x7f and '%' as %XX."""
    out = []
    for b in s.encode():
        out.append("%%%02X" % b if b <= 0x20 or b == 0x7F or b == 0x25 else chr(b))
    return "".join(out)


def parse_reply(line):
    """A reply line's words: (status, {key: value}), values unescaped."""
    words = line.split(" ")
    return words[0], {k: unquote(v) for k, _, v in (w.partition("=") for w in words[1:])}


def unquote(s):
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), s)


class Plugin:
    def __init__(self, args):
        self.args = args
        self.daemon = Daemon(args.root)
        self.locks = {}
        self.locks_lock = threading.Lock()
        self.warming = {}

    def lock_of(self, target):
        with self.locks_lock:
            return self.locks.setdefault(target, threading.Lock())

    # ---- Identity ----

    def GetPluginInfo(self, req, ctx):
        return pb.GetPluginInfoResponse(name=self.args.driver_name, vendor_version=VERSION)

    def GetPluginCapabilities(self, req, ctx):
        return pb.GetPluginCapabilitiesResponse(capabilities=[])

    def Probe(self, req, ctx):
        try:
            status, _ = self.daemon.ask("PING")
            ready = status == "OK"
        except OSError as e:
            log.warning("probe: the daemon at %s does not answer: %s", self.args.root, e)
            ready = False
        return pb.ProbeResponse(ready={"value": ready})

    # ---- Node ----

    def NodeGetCapabilities(self, req, ctx):
        return pb.NodeGetCapabilitiesResponse(capabilities=[])

    def NodeGetInfo(self, req, ctx):
        return pb.NodeGetInfoResponse(node_id=self.args.node_id)

    def _dataset_of(self, req):
        vc = dict(req.volume_context)
        name = vc.get("dataset") or req.volume_id
        version = vc.get("version", "")
        if not NAME_RE.match(name) or name in (".", "..") or "@" in name:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT,
                       "volume attribute dataset: '%s' is not a dataset name" % name)
        if version and not VERSION_RE.match(version):
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT,
                       "volume attribute version: '%s' is not a version number" % version)
        return name + ("@" + version if version else "")

    def _pod_of(self, req, target):
        """(namespace, name, uid) of the pod kubelet publishes for, from the
        pod information podInfoOnMount adds to volume_context; ("", "", "")
        if there is none or it cannot be believed.  An inline volume's
        attributes are written by the pod's author, and kubelet writes its
        pod information over them only with podInfoOnMount: so it counts
        only if its uid is the pod uid in the target path, which kubelet
        makes and no pod spec can know beforehand (the API server gives a
        pod its uid when it is created)."""
        vc = req.volume_context
        ns, name, uid = vc.get(POD_NS, ""), vc.get(POD_NAME, ""), vc.get(POD_UID, "")
        if not (ns or name or uid):
            return "", "", ""
        m = TARGET_UID_RE.search(target)
        if not m or m.group(1) != uid:
            log.warning("publish on %s: pod information (namespace %r, uid %r) not believed: "
                        "its uid is not the target's pod (%s); is podInfoOnMount off?",
                        target, ns, uid, m.group(1) if m else "none in the path")
            return "", "", ""
        return ns, name, uid

    def _check_access(self, dataset, ns):
        try:
            status, kv = self.daemon.ask("ACCESS dataset=%s%s" % (
                quote(dataset), " namespace=" + quote(ns) if ns else ""))
        except OSError as e:
            raise Fail(grpc.StatusCode.UNAVAILABLE,
                       "the stagefs daemon at %s does not answer: %s" % (self.args.root, e))
        if status == "OK" and kv.get("allowed") == "1":
            return
        if status == "OK":
            raise Fail(grpc.StatusCode.PERMISSION_DENIED, kv.get("reason", "not allowed"))
        if kv.get("code") == "ENOENT":
            raise Fail(grpc.StatusCode.NOT_FOUND, kv.get("msg", "no such dataset"))
        raise Fail(grpc.StatusCode.INTERNAL, "ACCESS: %s %s" % (status, kv))

    def _tell_pod(self, line):
        """POD: the daemon names the pod's readers' job (k8s:NS/NAME).  Best effort."""
        try:
            status, kv = self.daemon.ask(line)
            if status != "OK":
                log.warning("%s: the daemon said %s %s", line, status, kv)
        except OSError as e:
            log.warning("%s: the daemon does not answer: %s", line, e)

    def NodePublishVolume(self, req, ctx):
        target = req.target_path
        if not req.volume_id:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is missing")
        if not target or not os.path.isabs(target) or "\0" in target:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "target_path must be an absolute path")
        target = os.path.normpath(target)
        if not req.HasField("volume_capability") or req.volume_capability.HasField("block"):
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT,
                       "stagefs volumes are file systems (volumeMode: Filesystem), not block devices")
        dataset = self._dataset_of(req)
        ns, pod_name, uid = self._pod_of(req, target)
        pod = "%s/%s" % (ns or "?", pod_name or "?")
        self._check_access(dataset, ns)
        src = os.path.join(self.args.root, dataset)
        dev = self.daemon.root_dev()
        if dev is None:
            raise Fail(grpc.StatusCode.UNAVAILABLE, "the stagefs root %s is not mounted" % self.args.root)
        with self.lock_of(target):
            m = mounted_at(target)
            if m and m[2] == dev and m[1] == "/" + dataset:
                log.info("publish %s for %s: already at %s", dataset, pod, target)
                return pb.NodePublishVolumeResponse()
            if m:
                # another mount, or this dataset from a daemon mount that
                # is gone (a stale FUSE connection): replace it
                log.info("publish %s: %s holds a stale or other mount (%s, dev %s); replacing it",
                         dataset, target, m[1], m[2])
                self._umount_all(target)
            try:
                st = os.stat(src)
            except OSError as e:
                raise Fail(grpc.StatusCode.NOT_FOUND if e.errno == errno.ENOENT
                           else grpc.StatusCode.UNAVAILABLE, "%s: %s" % (src, e.strerror))
            if not stat.S_ISDIR(st.st_mode):
                raise Fail(grpc.StatusCode.NOT_FOUND, "%s is not a dataset directory" % src)
            try:
                os.makedirs(target, mode=0o750, exist_ok=True)
                sys_mount(src, target, MS_BIND)
                try:
                    sys_mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
                except OSError:
                    sys_umount(target, MNT_DETACH)
                    raise
            except OSError as e:
                raise Fail(grpc.StatusCode.INTERNAL, "bind mount %s on %s: %s" % (src, target, e.strerror))
        log.info("published %s on %s for pod %s (read-only)", dataset, target, pod)
        if ns and pod_name:  # believed: uid is the target path's, a pod uid
            self._tell_pod("POD uid=%s namespace=%s name=%s" % (uid, quote(ns), quote(pod_name)))
        self._warmup(req.volume_context.get("warmup", ""), dataset, pod, ns)
        return pb.NodePublishVolumeResponse()

    def _warmup(self, how, dataset, pod, ns):
        """volumeAttributes warmup: "wait" (before the pod's containers start,
        for at most --warmup-wait seconds), "background", or nothing.  Charged
        to the pod's namespace; one with no quota is refused by the daemon
        unless --allow-warmup (then charged to root)."""
        if how not in ("wait", "background"):
            return
        if not ns and not self.args.allow_warmup:
            log.info("warmup of %s for %s: the pod's namespace is not known (podInfoOnMount)", dataset, pod)
            return
        with self.locks_lock:
            # one warmup per dataset and namespace: each is charged its own
            t = self.warming.get((dataset, ns))
            if t is None or not t.is_alive():
                t = threading.Thread(target=self._warm, args=(dataset, pod, ns), daemon=True)
                self.warming[(dataset, ns)] = t
                t.start()
        if how == "wait":
            t.join(self.args.warmup_wait)
            if t.is_alive():
                log.info("warmup of %s for %s: still running after %ds; the pod starts",
                         dataset, pod, self.args.warmup_wait)

    def _warm(self, dataset, pod, ns):
        t0 = time.monotonic()
        try:
            status, kv = self.daemon.warmup(dataset, ns, quota_only=not self.args.allow_warmup)
        except OSError as e:
            log.warning("warmup of %s for %s: %s", dataset, pod, e)
            return
        log.info("warmup of %s for %s: %s %s in %.1f s", dataset, pod, status,
                 " ".join("%s=%s" % i for i in sorted(kv.items())), time.monotonic() - t0)

    def _umount_all(self, target):
        """Unmount every mount stacked at @target; a busy or stale one lazily."""
        for _ in range(16):
            if not mounted_at(target):
                return
            try:
                sys_umount(target)
            except OSError as e:
                if e.errno in (errno.EINVAL, errno.ENOENT):
                    return
                sys_umount(target, MNT_DETACH)
        raise Fail(grpc.StatusCode.INTERNAL, "%s: still mounted after 16 unmounts" % target)

    def NodeUnpublishVolume(self, req, ctx):
        target = req.target_path
        if not req.volume_id:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is missing")
        if not target or not os.path.isabs(target):
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "target_path must be an absolute path")
        target = os.path.normpath(target)
        with self.lock_of(target):
            try:
                self._umount_all(target)
            except OSError as e:
                raise Fail(grpc.StatusCode.INTERNAL, "unmount %s: %s" % (target, e.strerror))
            try:
                os.rmdir(target)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise Fail(grpc.StatusCode.INTERNAL, "rmdir %s: %s" % (target, e.strerror))
        log.info("unpublished %s (volume %s)", target, req.volume_id)
        m = TARGET_UID_RE.search(target)
        if m:
            self._tell_pod("POD uid=%s gone=1" % m.group(1))
        return pb.NodeUnpublishVolumeResponse()


def handler(service, plugin, methods):
    """A generic handler for @service, each method's messages from csi_pb2."""
    def wrap(name):
        fn = getattr(plugin, name)

        def call(req, ctx):
            try:
                return fn(req, ctx)
            except Fail as f:
                log.warning("%s: %s: %s", name, f.code.name, f.msg)
                ctx.abort(f.code, f.msg)
        return call

    table = {}
    for name in methods:
        req = getattr(pb, name + "Request")
        resp = getattr(pb, name + "Response")
        table[name] = grpc.unary_unary_rpc_method_handler(
            wrap(name), request_deserializer=req.FromString,
            response_serializer=resp.SerializeToString)
    return grpc.method_handlers_generic_handler(service, table)


def unimplemented(service, names):
    """The Node calls stagefs does not offer: UNIMPLEMENTED with a reason."""
    def call(req, ctx):
        ctx.abort(grpc.StatusCode.UNIMPLEMENTED, "stagefs volumes are published, not staged or expanded")
    table = {n: grpc.unary_unary_rpc_method_handler(call, request_deserializer=lambda b: b,
                                                     response_serializer=lambda b: b)
             for n in names}
    return grpc.method_handlers_generic_handler(service, table)


def main():
    ap = argparse.ArgumentParser(description="stagefs CSI node plugin")
    ap.add_argument("--endpoint", default=os.environ.get("CSI_ENDPOINT", "unix:///csi/csi.sock"))
    ap.add_argument("--root", default="/datasets", help="the node daemon's root (stagefs -c CONF ROOT)")
    ap.add_argument("--node-id", default=os.environ.get("NODE_NAME") or socket.gethostname())
    ap.add_argument("--driver-name", default="stagefs.io")
    ap.add_argument("--allow-warmup", action="store_true",
                    help="honour volumeAttributes warmup for namespaces without a cache quota too (charged to root)")
    ap.add_argument("--warmup-wait", type=int, default=90,
                    help="seconds a publish with warmup=wait waits for the warmup (kubelet's own limit is about 2 min)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="stagefs-csi %(asctime)s %(levelname)s: %(message)s")
    if not args.endpoint.startswith("unix://"):
        ap.error("--endpoint must be unix:///PATH")
    path = args.endpoint[len("unix://"):]
    if os.path.exists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            ap.error("%s exists and is not a socket" % path)
        os.unlink(path)  # a socket left by a previous run
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    plugin = Plugin(args)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((
        handler("csi.v1.Identity", plugin, ["GetPluginInfo", "GetPluginCapabilities", "Probe"]),
        handler("csi.v1.Node", plugin,
                ["NodeGetCapabilities", "NodeGetInfo", "NodePublishVolume", "NodeUnpublishVolume"]),
        unimplemented("csi.v1.Node", ["NodeStageVolume", "NodeUnstageVolume",
                                      "NodeGetVolumeStats", "NodeExpandVolume"]),
    ))
    old = os.umask(0o077)  # the socket: root's (kubelet and the registrar run as root)
    server.add_insecure_port("unix://" + path)
    os.umask(old)
    server.start()
    log.info("serving %s on %s (root %s, node %s)", args.driver_name, path, args.root, args.node_id)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    stop.wait()
    server.stop(5).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
