# SPDX-License-Identifier: Apache-2.0
"""stagefs: ctypes binding of libstagefs (gpudirect/libstagefs.h).

    import stagefs
    with stagefs.open("/mnt/data/train/shard-0001.tar") as f:
        head = f.read(0, 4096)                  # bytes, buffered read through the mount
        buf = bytearray(1 << 20)
        n = f.read_into(0, buf)                 # pinned O_DIRECT pipeline, from the
                                                # cache file (f.via == "cache_fd")
        f.read_device(0, nbytes, tensor.data_ptr(), tensor.device.index)
    print(stagefs.stats())

The library is found in $STAGEFS_LIB, else next to this file, else in
PREFIX/lib of an installed tree (`make install`), else by the dynamic
loader ("libstagefs.so.0", as the Debian package installs it, then
"libstagefs.so").  Errors raise OSError with the errno the
library returned.  A File serialises its own calls; use one per thread.
"""
import ctypes
import errno as _errno
import os

__all__ = ["File", "open", "stats", "stats_fd_last_error", "HOST_DEVICE"]

HOST_DEVICE = -1
_MAX_DEVICES = 16


class _Stats(ctypes.Structure):
    _fields_ = [
        ("host_read_bytes", ctypes.c_uint64),
        ("pinned_host_bytes", ctypes.c_uint64),
        ("device_bytes", ctypes.c_uint64 * _MAX_DEVICES),
        ("cufile_bytes", ctypes.c_uint64),
        ("direct_reads", ctypes.c_uint64),
        ("buffered_reads", ctypes.c_uint64),
        ("odirect_fallbacks", ctypes.c_uint64),
        ("pinned_bytes", ctypes.c_uint64),
        ("pinned_locked", ctypes.c_uint32),
        ("cuda_available", ctypes.c_uint32),
        ("cufile_loaded", ctypes.c_uint32),
        ("fd_last_error", ctypes.c_int32),
        ("fd_opens", ctypes.c_uint64),
        ("fd_fallbacks", ctypes.c_uint64),
        ("fd_lost", ctypes.c_uint64),
        ("fd_bytes", ctypes.c_uint64),
        ("reports", ctypes.c_uint64),
        ("report_errors", ctypes.c_uint64),
    ]


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.environ.get("STAGEFS_LIB"),
                 os.path.join(here, "libstagefs.so"),
                 # installed: PREFIX/share/stagefs/python -> PREFIX/lib
                 os.path.join(here, "..", "..", "..", "lib", "libstagefs.so"),
                 # the package (libstagefs0): the loader's own directories
                 "libstagefs.so.0",
                 "libstagefs.so"):
        if not cand:
            continue
        try:
            lib = ctypes.CDLL(cand)
            break
        except OSError:
            continue
    else:
        raise OSError(_errno.ENOENT, "libstagefs.so not found (set STAGEFS_LIB)")
    vp, sz, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64
    lib.sfs_client_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp)]
    lib.sfs_client_open.restype = ctypes.c_int
    lib.sfs_client_close.argtypes = [vp]
    lib.sfs_client_close.restype = None
    lib.sfs_client_size.argtypes = [vp]
    lib.sfs_client_size.restype = i64
    lib.sfs_read_host.argtypes = [vp, i64, sz, vp]
    lib.sfs_read_host.restype = ctypes.c_ssize_t
    lib.sfs_read_device.argtypes = [vp, i64, sz, vp, ctypes.c_int]
    lib.sfs_read_device.restype = ctypes.c_ssize_t
    lib.sfs_client_stats.argtypes = [ctypes.POINTER(_Stats)]
    lib.sfs_client_stats.restype = None
    lib.sfs_client_via.argtypes = [vp]
    lib.sfs_client_via.restype = ctypes.c_int
    return lib


_lib = _load()


def _check(n, what):
    if n < 0:
        raise OSError(-n, "%s: %s" % (what, os.strerror(-n)))
    return n


class File:
    """A file inside a stagefs mount, opened for reading."""

    def __init__(self, path):
        self.path = os.fsdecode(path)
        h = ctypes.c_void_p()
        _check(_lib.sfs_client_open(os.fsencode(path), ctypes.byref(h)),
               "sfs_client_open(%s)" % self.path)
        self._h = h

    @property
    def size(self):
        return _lib.sfs_client_size(self._handle())

    @property
    def via(self):
        """Where read_into/read_device read from: "cache_fd" (the NVMe
        cache file the daemon handed over) or "mount" (through FUSE)."""
        return "cache_fd" if _lib.sfs_client_via(self._handle()) == 1 else "mount"

    def _handle(self):
        if self._h is None:
            raise ValueError("I/O operation on closed stagefs.File")
        return self._h

    def read(self, off, length):
        """Up to length bytes at off (fewer only at end of file), as bytes."""
        buf = ctypes.create_string_buffer(max(length, 1))
        n = _check(_lib.sfs_read_host(self._handle(), off, length, buf),
                   "sfs_read_host(%s)" % self.path)
        return buf.raw[:n]

    def read_into(self, off, buf):
        """Fill a writable buffer (bytearray, memoryview, numpy array...)
        from off through the pinned pipeline; returns the bytes read."""
        mv = memoryview(buf).cast("B")
        if mv.readonly:
            raise TypeError("read_into needs a writable buffer")
        if not mv.contiguous:
            raise TypeError("read_into needs a contiguous buffer")
        if len(mv) == 0:
            return 0
        addr = ctypes.addressof((ctypes.c_char * len(mv)).from_buffer(mv))
        return _check(_lib.sfs_read_device(self._handle(), off, len(mv), addr,
                                           HOST_DEVICE),
                      "sfs_read_device(%s)" % self.path)

    def read_device(self, off, length, ptr, device):
        """Read into GPU memory at integer address ptr (e.g. a torch
        tensor's data_ptr()) on GPU device; device -1 means host memory at
        ptr.  Returns the bytes read; OSError(ENODEV) without a GPU."""
        return _check(_lib.sfs_read_device(self._handle(), off, length,
                                           ctypes.c_void_p(ptr), device),
                      "sfs_read_device(%s)" % self.path)

    def close(self):
        if self._h is not None:
            _lib.sfs_client_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def open(path):
    """Open path (a file in a stagefs mount); returns a File."""
    return File(path)


def stats():
    """Process-wide libstagefs counters as a dict (device_bytes is a list)."""
    st = _Stats()
    _lib.sfs_client_stats(ctypes.byref(st))
    d = {name: getattr(st, name) for name, _ in _Stats._fields_}
    d["device_bytes"] = list(st.device_bytes)
    return d


def stats_fd_last_error():
    """The errno name of the daemon's last refusal to hand over a cache
    file ("" if none), e.g. "ENOSPC" for a file that cannot be cached whole."""
    e = stats()["fd_last_error"]
    return _errno.errorcode.get(e, str(e)) if e else ""
