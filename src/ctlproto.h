/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlproto: the control-socket protocol, shared by the daemon
 * (fuse/ctl/ctlsock.c) and its clients (tools/stagefs-warmup.c, the GPU client
 * library, tools/stagefs_hints.py speaks it too).  docs/control.md is the
 * specification; this module holds what both sides need to agree on.
 *
 * The protocol is line-based text over a Unix stream socket.  A line is at
 * most CTL_LINE_MAX bytes ending in "\n", made of words separated by one
 * space.  The first word is a verb (requests) or a status (replies); the
 * others are KEY=VALUE pairs, or for PATH lines the path itself.  A word
 * never contains a byte <= 0x20, 0x7f or '%' as such: those are written as
 * %XX (ctl_escape), so any file name fits in one word.
 *
 * Clients find the socket from any path inside a mount: the mount root has
 * a hidden file .stagefs/socket whose content is the socket's path
 * (ctl_find_mount, ctl_socket_of).
 *
 * Nothing here keeps state across calls except struct ctl_conn, the
 * caller's buffered reader.
 */
#ifndef STAGEFS_CTLPROTO_H
#define STAGEFS_CTLPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CTL_PROTO_VERSION	1
#define CTL_LINE_MAX		65536	/* bytes, "\n" included */
#define CTL_MAX_WORDS		64
/* Relative to a mount root: holds the control socket's path. */
#define CTL_SOCKET_VFILE	".stagefs/socket"

/*
 * Percent-encode @in into @out (@outlen bytes, NUL-terminated, truncated if
 * short).  Returns the length the full encoding needs, without the NUL,
 * like snprintf.
 */
size_t ctl_escape(const char *in, char *out, size_t outlen);
/* Decode %XX in place.  Returns 0, or -EINVAL for a malformed escape. */
int ctl_unescape(char *s);

/* A parsed line: words point into the caller's line buffer, unescaped. */
struct ctl_msg {
	int argc;
	char *argv[CTL_MAX_WORDS];
};

/*
 * Split @line (modified in place, no "\n") into words and unescape each.
 * Returns 0, -EINVAL (bad escape, empty line) or -E2BIG (too many words).
 */
int ctl_parse(char *line, struct ctl_msg *m);
/* The value of KEY=VALUE word @key (words 1..argc-1), or NULL. */
const char *ctl_get(const struct ctl_msg *m, const char *key);
/* ctl_get as a number; returns 0, -ENOENT (absent) or -EINVAL. */
int ctl_get_u64(const struct ctl_msg *m, const char *key, uint64_t *out);

/*
 * A buffered line reader over a socket.  Embedded in the caller's struct;
 * ctl_conn_init() does not take ownership of @fd.
 */
struct ctl_conn {
	int fd;
	size_t start, end;
	char buf[CTL_LINE_MAX + 1];
};

void ctl_conn_init(struct ctl_conn *c, int fd);
/*
 * Read the next line.  *@line points into @c's buffer (no "\n", NUL
 * terminated) and stays valid until the next call.  @timeout_ms < 0 waits
 * forever.  Returns the line's length, -ETIMEDOUT, -ECONNRESET at end of
 * stream, -E2BIG for an over-long line, or -errno.
 */
int ctl_read_line(struct ctl_conn *c, char **line, int timeout_ms);
/*
 * ctl_read_line for clients that may be sent a descriptor (ctl_sendf_fd):
 * *@fd is the descriptor that came with the bytes this call read (it is
 * O_CLOEXEC and the caller's to close), or -1.  The protocol attaches one
 * only to a one-line reply, so it belongs to the line returned.  A second
 * descriptor in the same call is closed.  If the kernel had to drop one
 * (MSG_CTRUNC: the caller is at RLIMIT_NOFILE) the line is still returned,
 * with *@fd == -1.  On error nothing is held (*@fd == -1).
 *
 * The daemon reads with ctl_read_line(): read(2) never installs a
 * descriptor a peer sends (the kernel drops it).
 */
int ctl_read_line_fd(struct ctl_conn *c, char **line, int timeout_ms, int *fd);

/*
 * Send a formatted line (the format supplies the "\n") in full; never
 * raises SIGPIPE.  Returns 0 or -errno (-EPIPE: the peer went away).
 */
int ctl_sendf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * ctl_sendf with descriptor @pass attached to the line (SCM_RIGHTS, with
 * its first byte): the peer gets its own descriptor for the same open file;
 * the caller keeps @pass and closes it when it likes.  Returns 0 or -errno.
 */
int ctl_sendf_fd(int fd, int pass, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "ENOENT" for ENOENT ("E123" if unnamed).  Static storage. */
const char *ctl_errname(int err);
/* Inverse of ctl_errname: the errno, or EIO if the name is unknown. */
int ctl_errno_of(const char *name);

/* ---- clients ---- */

/*
 * Make @path absolute (against the current directory) and normal: no "//",
 * "." or ".." components, no trailing "/".  Symlinks are not resolved.
 * Returns 0 or -ENAMETOOLONG/-errno.
 */
int ctl_abspath(const char *path, char *out, size_t outlen);

/*
 * Find the stagefs mount holding @path: walk up from @path to the first
 * directory that has CTL_SOCKET_VFILE.  Writes the mount root to @root and
 * @path relative to it ("" for the root itself) to @rel.  A path that
 * resolves (realpath) inside the same mount is used resolved, so symlinks
 * within the dataset work.  Returns 0, -ENOENT if @path is in no stagefs
 * mount, or -errno.
 */
int ctl_find_mount(const char *path, char *root, size_t rootlen,
		   char *rel, size_t rellen);
/*
 * Read the socket path of the mount at @root.  Returns 0 or -errno;
 * -ENOENT if the mount has no control socket, after waiting up to
 * CTL_SOCKET_WAIT_MS for one (a daemon binds it just after it starts
 * answering on the mount).
 */
#define CTL_SOCKET_WAIT_MS	2000
int ctl_socket_of(const char *root, char *out, size_t outlen);
/*
 * Read the mount @mnt's .stagefs/stats (as the caller may see it) and
 * parse it into *@doc (json_doc_free()).  Returns 0 or -errno with the message
 * in @err: -E2BIG past CTL_STATS_MAX bytes, json_parse()'s error for what
 * is not JSON.
 */
#define CTL_STATS_MAX	(32u << 20)
struct json_doc;
int ctl_load_stats(const char *mnt, struct json_doc **doc, char *err, size_t errlen);
/* Connect to the socket at @sockpath.  Returns the fd or -errno. */
int ctl_connect(const char *sockpath);
/*
 * Say HELLO on @c and check the daemon speaks our version.  Returns 0, or
 * -errno with the daemon's or our message in @err.
 */
int ctl_hello(struct ctl_conn *c, char *err, size_t errlen);

#endif
