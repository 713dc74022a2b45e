#!/usr/bin/env bash
# Every kind of write to the mount (write, create, mkdir, rm, mv, touch, chmod, chown, truncate, links) fails with EROFS.
# timeout: 60
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
need_mount

src=$TEST_TMPDIR/src mnt=$TEST_TMPDIR/mnt
mkdir -p "$src/dir/sub" "$src/emptydir"
printf 'hello stagefs\n' >"$src/file"
printf 'x' >"$src/dir/sub/deep"
ln -s file "$src/link"
sum_before=$(sha256 "$src/file")

sfs_mount "dir://$src" "$mnt" chunk_size=64K

# System calls, by errno.
"$PYTHON" - "$mnt" <<'PY'
import errno, os, sys
m = sys.argv[1]
p = lambda *a: os.path.join(m, *a)
ops = {
    "open existing O_WRONLY": lambda: os.open(p("file"), os.O_WRONLY),
    "open existing O_RDWR": lambda: os.open(p("file"), os.O_RDWR),
    "open existing O_APPEND": lambda: os.open(p("file"), os.O_WRONLY | os.O_APPEND),
    "open O_TRUNC": lambda: os.open(p("file"), os.O_WRONLY | os.O_TRUNC),
    "create new file": lambda: os.open(p("new"), os.O_WRONLY | os.O_CREAT, 0o644),
    "create O_EXCL in subdir": lambda: os.open(p("dir", "new"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
    "mkdir": lambda: os.mkdir(p("newdir")),
    "mkdir in subdir": lambda: os.mkdir(p("dir", "sub", "newdir")),
    "unlink": lambda: os.unlink(p("file")),
    "unlink symlink": lambda: os.unlink(p("link")),
    "unlink deep": lambda: os.unlink(p("dir", "sub", "deep")),
    "rmdir": lambda: os.rmdir(p("emptydir")),
    "rename file": lambda: os.rename(p("file"), p("file2")),
    "rename dir": lambda: os.rename(p("dir"), p("dir2")),
    "rename over existing": lambda: os.rename(p("file"), p("dir", "sub", "deep")),
    "utime (touch)": lambda: os.utime(p("file")),
    "utime with times": lambda: os.utime(p("file"), (1, 1)),
    "chmod": lambda: os.chmod(p("file"), 0o777),
    "chmod dir": lambda: os.chmod(p("dir"), 0o700),
    "chown": lambda: os.chown(p("file"), 1, 1),
    "truncate path": lambda: os.truncate(p("file"), 0),
    "symlink": lambda: os.symlink("file", p("newlink")),
    "hard link": lambda: os.link(p("file"), p("hardlink")),
    "mknod fifo": lambda: os.mkfifo(p("fifo")),
}
bad = 0
for name, op in ops.items():
    try:
        r = op()
        if isinstance(r, int):
            os.close(r)
        print(f"{name}: succeeded, expected EROFS")
        bad += 1
    except OSError as e:
        if e.errno != errno.EROFS:
            print(f"{name}: {errno.errorcode.get(e.errno, e.errno)} ({e.strerror}), expected EROFS")
            bad += 1
        elif e.strerror != "Read-only file system":
            print(f"{name}: strerror {e.strerror!r}")
            bad += 1
# ftruncate / write on a read-only fd: opening for write is refused, so
# check that the read-only fd cannot be used to change anything either.
fd = os.open(p("file"), os.O_RDONLY)
for name, op in (("write on O_RDONLY fd", lambda: os.write(fd, b"x")),
                 ("ftruncate on O_RDONLY fd", lambda: os.ftruncate(fd, 0))):
    try:
        op()
        print(f"{name}: succeeded")
        bad += 1
    except OSError as e:
        if e.errno not in (errno.EBADF, errno.EINVAL, errno.EROFS):
            print(f"{name}: unexpected {errno.errorcode.get(e.errno)}")
            bad += 1
os.close(fd)
print(f"{len(ops)} write operations tried, {bad} wrong")
sys.exit(1 if bad else 0)
PY

# The tools people use, by message.
check_msg() {
	local out
	if out=$("$@" 2>&1); then
		die "'$*' succeeded on a read-only mount"
	fi
	[[ $out == *"Read-only file system"* ]] || die "'$*': expected 'Read-only file system', got: $out"
}
check_msg sh -c "echo x >'$mnt/file'"
check_msg sh -c "echo x >>'$mnt/file'"
check_msg sh -c "echo x >'$mnt/created'"
check_msg touch "$mnt/file"
check_msg touch "$mnt/created"
check_msg mkdir "$mnt/newdir"
check_msg rm -f "$mnt/file"
check_msg rm -rf "$mnt/dir"
check_msg mv "$mnt/file" "$mnt/moved"
check_msg chmod 600 "$mnt/file"
check_msg truncate -s 0 "$mnt/file"
check_msg ln -s x "$mnt/newlink"

# Nothing changed, on either side.
[[ $(sha256 "$mnt/file") == "$sum_before" ]] || die "content of file changed through the mount"
[[ $(sha256 "$src/file") == "$sum_before" ]] || die "source file changed"
[[ -f $src/dir/sub/deep && -d $src/emptydir && -L $src/link ]] || die "source tree changed"
[[ ! -e $src/new && ! -e $src/newdir && ! -e $src/created ]] || die "something was created in the source"
treecmp "$src" "$mnt"

sfs_umount "$mnt"
