/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlproto: see ctlproto.h and docs/control.md.
 */
#include "ctlproto.h"

#include "json.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

static bool needs_escape(unsigned char ch)
{
	return ch <= 0x20 || ch == 0x7f || ch == '%';
}

size_t ctl_escape(const char *in, char *out, size_t outlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0, w = 0;	/* needed, written */
	bool full = false;

	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		size_t need = needs_escape(*p) ? 3 : 1;

		/* once something does not fit nothing more is written: no half escapes */
		if (!full && w + need < outlen) {
			if (need == 3) {
				out[w] = '%';
				out[w + 1] = hex[*p >> 4];
				out[w + 2] = hex[*p & 15];
			} else {
				out[w] = (char)*p;
			}
			w += need;
		} else {
			full = true;
		}
		n += need;
	}
	if (outlen)
		out[w] = '\0';
	return n;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int ctl_unescape(char *s)
{
	char *w = s;

	for (char *r = s; *r; r++) {
		if (*r != '%') {
			*w++ = *r;
			continue;
		}
		int hi = hexval(r[1]), lo = hi < 0 ? -1 : hexval(r[2]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		*w++ = (char)(hi << 4 | lo);
		r += 2;
	}
	*w = '\0';
	return 0;
}

int ctl_parse(char *line, struct ctl_msg *m)
{
	char *p = line;

	m->argc = 0;
	while (*p) {
		char *word = p;

		while (*p && *p != ' ')
			p++;
		if (*p)
			*p++ = '\0';
		if (!*word)
			continue;	/* tolerate doubled blanks */
		if (m->argc == CTL_MAX_WORDS)
			return -E2BIG;
		if (ctl_unescape(word))
			return -EINVAL;
		m->argv[m->argc++] = word;
	}
	return m->argc ? 0 : -EINVAL;
}

const char *ctl_get(const struct ctl_msg *m, const char *key)
{
	size_t kl = strlen(key);

	for (int i = 1; i < m->argc; i++)
		if (!strncmp(m->argv[i], key, kl) && m->argv[i][kl] == '=')
			return m->argv[i] + kl + 1;
	return NULL;
}

int ctl_get_u64(const struct ctl_msg *m, const char *key, uint64_t *out)
{
	const char *v = ctl_get(m, key);

	if (!v)
		return -ENOENT;
	return parse_uint(v, out);
}

void ctl_conn_init(struct ctl_conn *c, int fd)
{
	c->fd = fd;
	c->start = c->end = 0;
}

/*
 * Read into @c's buffer: read(2), or with @fd recvmsg(2) taking a passed
 * descriptor into *@fd (a second one is closed).  Returns bytes or -errno.
 */
static ssize_t conn_recv(struct ctl_conn *c, int *fd)
{
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctrl;
	struct iovec iov = { c->buf + c->end, CTL_LINE_MAX - c->end };
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctrl.buf,
		.msg_controllen = sizeof(ctrl.buf),
	};
	ssize_t n;

	if (!fd) {
		n = read(c->fd, iov.iov_base, iov.iov_len);
		return n < 0 ? -errno : n;
	}
	n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		size_t k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int got;

			memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (*fd < 0)
				*fd = got;
			else
				close(got);	/* the protocol passes one at a time */
		}
	}
	return n;
}

static int read_line(struct ctl_conn *c, char **line, int timeout_ms, int *fd)
{
	uint64_t deadline = timeout_ms >= 0 ? now_ms() + (uint64_t)timeout_ms : 0;

	for (;;) {
		char *nl = memchr(c->buf + c->start, '\n', c->end - c->start);
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
		ssize_t n;
		int wait, r;

		if (nl) {
			int len = (int)(nl - (c->buf + c->start));

			*nl = '\0';
			if (len && nl[-1] == '\r')
				nl[-1] = '\0', len--;
			*line = c->buf + c->start;
			c->start = (size_t)(nl - c->buf) + 1;
			return len;
		}
		if (c->start > 0) {
			memmove(c->buf, c->buf + c->start, c->end - c->start);
			c->end -= c->start;
			c->start = 0;
		}
		if (c->end >= CTL_LINE_MAX)
			return -E2BIG;
		wait = -1;
		if (timeout_ms >= 0) {
			uint64_t now = now_ms();

			wait = now >= deadline ? 0 : (int)(deadline - now);
		}
		r = poll(&pfd, 1, wait);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -ETIMEDOUT;
		n = conn_recv(c, fd);
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -ECONNRESET;
		c->end += (size_t)n;
	}
}

int ctl_read_line(struct ctl_conn *c, char **line, int timeout_ms)
{
	return read_line(c, line, timeout_ms, NULL);
}

int ctl_read_line_fd(struct ctl_conn *c, char **line, int timeout_ms, int *fd)
{
	int r;

	*fd = -1;
	r = read_line(c, line, timeout_ms, fd);
	if (r < 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return r;
}

/* Send @buf in full; the first send carries @pass (SCM_RIGHTS) if >= 0. */
static int send_all(int fd, int pass, const char *buf, size_t len)
{
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctrl;
	size_t off = 0;

	while (off < len) {
		struct iovec iov = { (char *)buf + off, len - off };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t w;

		if (pass >= 0) {
			struct cmsghdr *cm;

			memset(&ctrl, 0, sizeof(ctrl));
			mh.msg_control = ctrl.buf;
			mh.msg_controllen = sizeof(ctrl.buf);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &pass, sizeof(int));
		}
		w = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		pass = -1;	/* sent with the bytes just accepted */
		off += (size_t)w;
	}
	return 0;
}

static int vsend(int fd, int pass, const char *fmt, va_list ap)
{
	char stackbuf[4096], *buf = stackbuf;
	va_list ap2;
	int n, ret;

	va_copy(ap2, ap);
	n = vsnprintf(stackbuf, sizeof(stackbuf), fmt, ap);
	if (n < 0) {
		va_end(ap2);
		return -EINVAL;
	}
	if ((size_t)n >= sizeof(stackbuf)) {
		buf = malloc((size_t)n + 1);
		if (!buf) {
			va_end(ap2);
			return -ENOMEM;
		}
		vsnprintf(buf, (size_t)n + 1, fmt, ap2);
	}
	va_end(ap2);
	ret = send_all(fd, pass, buf, (size_t)n);
	if (buf != stackbuf)
		free(buf);
	return ret;
}

int ctl_sendf(int fd, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = vsend(fd, -1, fmt, ap);
	va_end(ap);
	return ret;
}

int ctl_sendf_fd(int fd, int pass, const char *fmt, ...)
{
	va_list ap;
	int ret;

	if (pass < 0)
		return -EBADF;
	va_start(ap, fmt);
	ret = vsend(fd, pass, fmt, ap);
	va_end(ap);
	return ret;
}

const char *ctl_errname(int err)
{
	static __thread char unnamed[16];
	const char *s = err > 0 ? strerrorname_np(err) : NULL;

	if (s)
		return s;
	snprintf(unnamed, sizeof(unnamed), "E%d", err);
	return unnamed;
}

int ctl_errno_of(const char *name)
{
	for (int e = 1; e < 200; e++) {
		const char *s = strerrorname_np(e);

		if (s && !strcmp(s, name))
			return e;
	}
	if (name[0] == 'E' && name[1] >= '0' && name[1] <= '9')
		return atoi(name + 1);
	return EIO;
}

/* ---- clients ---- */

int ctl_abspath(const char *path, char *out, size_t outlen)
{
	char tmp[PATH_MAX * 2];
	size_t n = 0;
	char *save = NULL;

	if (path[0] == '/') {
		if (strlen(path) >= sizeof(tmp))
			return -ENAMETOOLONG;
		strcpy(tmp, path);
	} else {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		if ((size_t)snprintf(tmp, sizeof(tmp), "%s/%s", cwd, path) >= sizeof(tmp))
			return -ENAMETOOLONG;
	}
	if (outlen < 2)
		return -ENAMETOOLONG;
	out[0] = '\0';
	for (char *c = strtok_r(tmp, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, "..")) {
			char *slash = strrchr(out, '/');

			if (slash)
				*slash = '\0';
			n = strlen(out);
			continue;
		}
		size_t cl = strlen(c);

		if (n + 1 + cl + 1 > outlen)
			return -ENAMETOOLONG;
		out[n++] = '/';
		memcpy(out + n, c, cl + 1);
		n += cl;
	}
	if (!n)
		strcpy(out, "/");
	return 0;
}

static bool has_socket_file(const char *dir)
{
	char p[PATH_MAX + 32];

	if ((size_t)snprintf(p, sizeof(p), "%s%s" CTL_SOCKET_VFILE, dir,
			     strcmp(dir, "/") ? "/" : "") >= sizeof(p))
		return false;
	return access(p, F_OK) == 0;
}

/* Walk up from absolute, normal @abs to the mount root; 0 or -ENOENT. */
static int walk_up(const char *abs, char *root, size_t rootlen)
{
	char cur[PATH_MAX];

	if (strlen(abs) >= sizeof(cur))
		return -ENAMETOOLONG;
	strcpy(cur, abs);
	for (;;) {
		if (has_socket_file(cur)) {
			if (strlen(cur) >= rootlen)
				return -ENAMETOOLONG;
			strcpy(root, cur);
			return 0;
		}
		if (!strcmp(cur, "/"))
			return -ENOENT;
		char *slash = strrchr(cur, '/');

		if (slash == cur)
			cur[1] = '\0';
		else
			*slash = '\0';
	}
}

static int rel_of(const char *root, const char *abs, char *rel, size_t rellen)
{
	size_t rl = strlen(root);
	const char *r;

	if (!strcmp(root, "/"))
		rl = 0;
	if (strncmp(abs, root, rl) || (abs[rl] && abs[rl] != '/'))
		return -EXDEV;
	r = abs + rl;
	while (*r == '/')
		r++;
	if (strlen(r) >= rellen)
		return -ENAMETOOLONG;
	strcpy(rel, r);
	return 0;
}

int ctl_find_mount(const char *path, char *root, size_t rootlen,
		   char *rel, size_t rellen)
{
	char abs[PATH_MAX], real[PATH_MAX], rroot[PATH_MAX];
	int ret = ctl_abspath(path, abs, sizeof(abs));

	if (ret)
		return ret;
	ret = walk_up(abs, root, rootlen);
	if (ret)
		return ret;
	/* a symlink inside the dataset that stays inside it: use its target */
	if (realpath(abs, real) && !walk_up(real, rroot, sizeof(rroot)) &&
	    !strcmp(rroot, root))
		return rel_of(root, real, rel, rellen);
	return rel_of(root, abs, rel, rellen);
}

int ctl_socket_of(const char *root, char *out, size_t outlen)
{
	char p[PATH_MAX + 32];
	ssize_t n;
	int fd;

	snprintf(p, sizeof(p), "%s%s" CTL_SOCKET_VFILE, root, strcmp(root, "/") ? "/" : "");
	/*
	 * Empty: no control socket yet.  A daemon answers on its mount a
	 * moment before it binds the socket; a script that mounts and then
	 * runs `stagefs warmup` at once must not fail for that.
	 */
	for (int tries = 0;; tries++) {
		fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		n = read(fd, out, outlen - 1);
		close(fd);
		if (n < 0)
			return -errno;
		while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
			n--;
		out[n] = '\0';
		if (n || tries == CTL_SOCKET_WAIT_MS / 20)
			return n ? 0 : -ENOENT;
		usleep(20 * 1000);
	}
}

int ctl_connect(const char *sockpath)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, e;

	if (strlen(sockpath) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, sockpath);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int ctl_hello(struct ctl_conn *c, char *err, size_t errlen)
{
	struct ctl_msg m;
	char *line;
	int ret;

	ret = ctl_sendf(c->fd, "HELLO version=%d\n", CTL_PROTO_VERSION);
	/*
	 * A daemon that refuses the connection (a limit) says why and closes
	 * before reading our HELLO: then the send fails (EPIPE), but its ERR
	 * is there to read.
	 */
	if (!ret || ret == -EPIPE || ret == -ECONNRESET)
		ret = ctl_read_line(c, &line, ret ? 1000 : 30000);
	if (ret < 0) {
		snprintf(err, errlen, "control socket: %s", strerror(-ret));
		return ret;
	}
	if (ctl_parse(line, &m)) {
		snprintf(err, errlen, "control socket: unreadable reply");
		return -EPROTO;
	}
	if (strcmp(m.argv[0], "OK")) {
		const char *msg = ctl_get(&m, "msg"), *code = ctl_get(&m, "code");

		snprintf(err, errlen, "daemon refused: %s", msg ? msg : m.argv[0]);
		return code ? -ctl_errno_of(code) : -EPROTO;
	}
	return 0;
}

int ctl_load_stats(const char *mnt, struct json_doc **doc, char *err, size_t errlen)
{
	char path[PATH_MAX + 32], msg[256];
	size_t len = 0, cap = 1 << 16;
	char *buf;
	int fd, ret;

	snprintf(path, sizeof(path), "%s/.stagefs/stats", mnt);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-ret));
		return ret;
	}
	buf = malloc(cap);
	for (;;) {
		ssize_t n;

		if (!buf) {
			close(fd);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		if (len == cap) {
			char *nb = cap >= CTL_STATS_MAX ? NULL : realloc(buf, cap * 2);

			if (!nb) {
				free(buf);
				close(fd);
				snprintf(err, errlen, "%s: larger than %u bytes", path, CTL_STATS_MAX);
				return -E2BIG;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			free(buf);
			close(fd);
			snprintf(err, errlen, "%s: %s", path, strerror(-ret));
			return ret;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	ret = json_parse(buf, len, doc, msg, sizeof(msg));
	if (ret)
		snprintf(err, errlen, "%s: not the JSON expected: %s", path, msg);
	free(buf);
	return ret;
}
