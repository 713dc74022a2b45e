/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics: see metrics.h.
 *
 * Two threads, so that neither exporter can hold up the other:
 *
 *  - the textfile writer sleeps on an eventfd (stop) for metrics_interval,
 *    then rewrites metrics_file (mode 0640, group metrics_group): no
 *    client of the port can delay it.  It writes only in a directory only
 *    root (or the daemon's user) may change, following no link
 *    (safepath_write_file(): a new file of a random name, renamed over
 *    metrics_file; issue 27: through PATH.tmp with O_TRUNC, in a
 *    directory others could write, root truncated and chmodded any file
 *    they pointed a link at).  Another directory fails the mount, or, met
 *    later, is refused at each rewrite (logged, rate-limited) until it is
 *    fixed;
 *  - the HTTP server is one poll() loop over the listening socket, the stop
 *    eventfd and at most HTTP_MAX_CONNS non-blocking connections.  Each
 *    connection has one deadline, HTTP_DEADLINE_MS from its accept, for
 *    reading the request and writing the whole answer: a client that
 *    trickles a byte a second, or never reads, is closed at the deadline
 *    however many bytes it sends, and meanwhile the loop serves everyone
 *    else.  When all slots are taken a new connection takes the slot of
 *    the oldest one (which has the least time left anyway), so a client
 *    opening connections in a loop cannot lock the others out either.
 *
 * Who sees what on the port.  It listens on 127.0.0.1, where every local
 * user can connect, so each connection is identified: the kernel names
 * the owner of the client's socket (sock_diag, peer_uid() below: the same
 * exact-socket lookup `ss -e` makes).  Root and the members of
 * metrics_group (the daemon's group when unset) get everything; any other
 * user gets what they would read in MOUNT/.stagefs/metrics, their own
 * rows and the node totals; a connection whose owner cannot be found is
 * refused (403).  The textfile is everything, and mode 0640 to that group.
 *
 * Why not libmicrohttpd (docs/feedrate.md): one GET on localhost does not
 * need a new build and run-time dependency on every node; this loop is the
 * whole server and its bounds are the three constants below.
 */
#include "metrics.h"

#include "cred.h"
#include "log.h"
#include "safepath.h"
#include "stats/stats.h"
#include "vfiles.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define HTTP_DEADLINE_MS	2000	/* per request: read it, answer it */
#define HTTP_MAX_CONNS		32	/* connections served at once */
#define HTTP_REQ_MAX		4096	/* request line and headers */
#define HTTP_BACKLOG		64
#define TEXTFILE_MODE		0640	/* the metrics name every user and job */
#define PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct http_conn {
	int fd;			/* -1: a free slot */
	uint64_t deadline;	/* now_ms() at which it is closed, done or not */
	size_t got;		/* request bytes in req */
	char *out;		/* the whole answer once the request is read */
	bool known;		/* uid is the client socket's owner */
	uid_t uid;
	size_t outlen, sent;
	char req[HTTP_REQ_MAX];
};

struct metrics {
	struct sfs *fs;
	int lfd;		/* listening socket; -1 without metrics_port */
	int wake;		/* eventfd: written to stop both threads */
	gid_t gid;		/* metrics_file's group; (gid_t)-1 = the daemon's */
	pthread_t http, textfile;
	bool http_running, textfile_running;
	struct http_conn conns[HTTP_MAX_CONNS];	/* the HTTP thread's own */
};

/* ---- HTTP ---- */

/* Format the answer into c->out.  Returns 0 or -ENOMEM. */
static int http_answer(struct http_conn *c, int code, const char *reason,
		       const char *type, const char *body, size_t len, bool head)
{
	char hdr[512];
	int n = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n", code, reason, type, len);
	size_t total = (size_t)n + (head ? 0 : len);

	c->out = malloc(total ? total : 1);
	if (!c->out)
		return -ENOMEM;
	memcpy(c->out, hdr, (size_t)n);
	if (!head)
		memcpy(c->out + n, body, len);
	c->outlen = total;
	c->sent = 0;
	return 0;
}

/*
 * The uid owning the client end of loopback TCP connection @fd: the
 * kernel's exact-socket lookup over NETLINK_SOCK_DIAG.  Returns 0 or -errno.
 */
static int peer_uid(int fd, uid_t *uid)
{
	struct sockaddr_in self, peer;
	socklen_t len = sizeof(self);
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req;
	union {
		struct nlmsghdr nlh;
		char buf[1024];
	} ans;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	ssize_t n;
	int nl, ret;

	if (getsockname(fd, (struct sockaddr *)&self, &len))
		return -errno;
	len = sizeof(peer);
	if (getpeername(fd, (struct sockaddr *)&peer, &len))
		return -errno;
	if (self.sin_family != AF_INET || peer.sin_family != AF_INET)
		return -EAFNOSUPPORT;
	memset(&req, 0, sizeof(req));
	req.nlh.nlmsg_len = sizeof(req);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = AF_INET;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	/* the client's socket: its local end is our peer */
	req.r.id.idiag_sport = peer.sin_port;
	req.r.id.idiag_dport = self.sin_port;
	req.r.id.idiag_src[0] = peer.sin_addr.s_addr;
	req.r.id.idiag_dst[0] = self.sin_addr.s_addr;
	req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

	nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -errno;
	if (sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		ret = -errno;
		goto out_close;
	}
	do
		n = recv(nl, &ans, sizeof(ans), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		ret = -errno;
		goto out_close;
	}
	if (!NLMSG_OK(&ans.nlh, (size_t)n) || ans.nlh.nlmsg_type != SOCK_DIAG_BY_FAMILY ||
	    ans.nlh.nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
		ret = -ENOENT;
		goto out_close;
	}
	*uid = ((const struct inet_diag_msg *)NLMSG_DATA(&ans.nlh))->idiag_uid;
	ret = 0;
out_close:
	close(nl);
	return ret;
}

/* Does @uid get everything: root, or a member of metrics_group? */
static bool sees_all(const struct metrics *m, uid_t uid)
{
	gid_t want = m->gid != (gid_t)-1 ? m->gid : getegid();
	struct passwd pw, *res = NULL;
	gid_t groups[256];
	int n = (int)ARRAY_SIZE(groups);
	char buf[4096];

	if (uid == 0)
		return true;
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) || !res)
		return false;
	if (pw.pw_gid == want)
		return true;
	if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0)
		n = (int)ARRAY_SIZE(groups);	/* the first ones are filled */
	for (int i = 0; i < n; i++)
		if (groups[i] == want)
			return true;
	return false;
}

/* The request in c->req is complete: build its answer (GET or HEAD /metrics). */
static int http_route(struct metrics *m, struct http_conn *c)
{
	char *path, *sp, *body = NULL;
	bool head;
	int n, ret;

	sp = strchr(c->req, ' ');
	if (!sp)
		return http_answer(c, 400, "Bad Request", "text/plain", "bad request\n", 12, false);
	*sp = '\0';
	head = !strcmp(c->req, "HEAD");
	if (strcmp(c->req, "GET") && !head)
		return http_answer(c, 405, "Method Not Allowed", "text/plain", "GET /metrics\n", 13, false);
	path = sp + 1;
	path[strcspn(path, " ?\r\n")] = '\0';
	if (strcmp(path, "/metrics"))
		return http_answer(c, 404, "Not Found", "text/plain", "try /metrics\n", 13, head);
	if (!c->known)
		return http_answer(c, 403, "Forbidden", "text/plain", "who are you?\n", 13, head);
	if (sees_all(m, c->uid)) {
		n = vfiles_metrics_text(m->fs, NULL, &body);
	} else {
		/* what this user reads in MOUNT/.stagefs/metrics */
		struct cred cr;

		cred_init(&cr, c->uid, (uint32_t)-1, 0, NULL, 0);
		n = vfiles_metrics_text(m->fs, &cr, &body);
	}
	if (n < 0)
		return http_answer(c, 500, "Internal Server Error", "text/plain", "out of memory\n", 14, head);
	ret = http_answer(c, 200, "OK", PROM_CONTENT_TYPE, body, (size_t)n, head);
	free(body);
	return ret;
}

static void http_close(struct http_conn *c)
{
	close(c->fd);
	free(c->out);
	c->out = NULL;
	c->fd = -1;
}

/* Read what @c has sent; answer once the headers are in.  false: close it. */
static bool http_on_readable(struct metrics *m, struct http_conn *c)
{
	for (;;) {
		ssize_t r = recv(c->fd, c->req + c->got, sizeof(c->req) - 1 - c->got, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK;
		if (r == 0)
			break;	/* the client's end: answer what we have */
		c->got += (size_t)r;
		c->req[c->got] = '\0';
		if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n") ||
		    c->got == sizeof(c->req) - 1)
			break;
	}
	c->req[c->got] = '\0';
	return http_route(m, c) == 0;
}

/* Send what the socket takes of c->out.  false: close it (done or failed). */
static bool http_on_writable(struct http_conn *c)
{
	while (c->sent < c->outlen) {
		ssize_t n = send(c->fd, c->out + c->sent, c->outlen - c->sent,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK;
		c->sent += (size_t)n;
	}
	return false;
}

/* Accept one connection into a free slot, or the oldest connection's. */
static void http_accept(struct metrics *m)
{
	struct http_conn *slot = NULL;
	int fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	for (int i = 0; i < HTTP_MAX_CONNS; i++) {
		struct http_conn *c = &m->conns[i];

		if (c->fd < 0) {
			slot = c;
			break;
		}
		if (!slot || c->deadline < slot->deadline)
			slot = c;
	}
	if (slot->fd >= 0)
		http_close(slot);
	slot->fd = fd;
	slot->got = 0;
	slot->known = peer_uid(fd, &slot->uid) == 0;
	slot->deadline = now_ms() + HTTP_DEADLINE_MS;
}

static void *http_main(void *arg)
{
	struct metrics *m = arg;
	struct pollfd p[2 + HTTP_MAX_CONNS];
	int slot_of[2 + HTTP_MAX_CONNS];

	for (int i = 0; i < HTTP_MAX_CONNS; i++)
		m->conns[i].fd = -1;
	for (;;) {
		uint64_t now = now_ms(), next = UINT64_MAX;
		nfds_t n = 2;
		int timeout;

		p[0] = (struct pollfd){ .fd = m->wake, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = m->lfd, .events = POLLIN };
		for (int i = 0; i < HTTP_MAX_CONNS; i++) {
			struct http_conn *c = &m->conns[i];

			if (c->fd < 0)
				continue;
			if (now >= c->deadline) {
				http_close(c);
				continue;
			}
			next = MIN(next, c->deadline);
			slot_of[n] = i;
			p[n++] = (struct pollfd){
				.fd = c->fd, .events = c->out ? POLLOUT : POLLIN,
			};
		}
		timeout = next == UINT64_MAX ? -1 : (int)(next - now);
		if (poll(p, n, timeout) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		for (nfds_t k = 2; k < n; k++) {
			struct http_conn *c = &m->conns[slot_of[k]];
			bool keep = true;

			if (!p[k].revents)
				continue;
			if (!c->out && (p[k].revents & (POLLIN | POLLHUP | POLLERR)))
				keep = http_on_readable(m, c);
			/* the answer is usually sent in the same turn */
			if (keep && c->out)
				keep = http_on_writable(c);
			if (!keep)
				http_close(c);
		}
		if (p[1].revents & POLLIN)
			http_accept(m);
	}
	for (int i = 0; i < HTTP_MAX_CONNS; i++)
		if (m->conns[i].fd >= 0)
			http_close(&m->conns[i]);
	return NULL;
}

static int listen_local(uint32_t port, char *err, size_t errlen)
{
	struct sockaddr_in sa = {
		.sin_family = AF_INET,
		.sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	};
	int one = 1, ret;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "metrics_port: socket: %s", strerror(-ret));
		return ret;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, HTTP_BACKLOG)) {
		ret = -errno;
		snprintf(err, errlen, "metrics_port: cannot listen on 127.0.0.1:%u: %s",
			 port, strerror(-ret));
		close(fd);
		return ret;
	}
	return fd;
}

/* ---- textfile ---- */

/*
 * Rewrite metrics_file (safepath_write_file()).  Returns 0 or -errno with
 * a message in @err.
 */
static int textfile_write(struct metrics *m, char *err, size_t errlen)
{
	char *body = NULL;
	int n, ret;

	n = vfiles_metrics_text(m->fs, NULL, &body);
	if (n < 0) {
		snprintf(err, errlen, "%s", strerror(-n));
		return n;
	}
	/* whatever the umask: the scraper's group reads it, others do not */
	ret = safepath_write_file(m->fs->cfg.metrics_file, body, (size_t)n, TEXTFILE_MODE,
				  m->gid, err, errlen);
	free(body);
	return ret;
}

static void *textfile_main(void *arg)
{
	static struct log_ratelimit rl = LOG_RATELIMIT_INIT(60000, 1);
	struct metrics *m = arg;
	uint64_t next = now_ms() + m->fs->cfg.metrics_interval_ms;
	char err[PATH_MAX + 512];

	for (;;) {
		struct pollfd p = { .fd = m->wake, .events = POLLIN };
		uint64_t now = now_ms();
		int ret;

		if (now < next) {
			if (poll(&p, 1, (int)(next - now)) < 0 && errno != EINTR)
				break;
			if (p.revents)
				break;
			continue;
		}
		ret = textfile_write(m, err, sizeof(err));
		if (ret)
			log_limited(&rl, LOG_WARNING, "metrics_file %s: not written: %s "
				    "(will keep trying)", m->fs->cfg.metrics_file, err);
		next = now_ms() + m->fs->cfg.metrics_interval_ms;
	}
	return NULL;
}

/* Remove metrics_file (its name only, in a trusted directory only). */
static void textfile_remove(struct sfs *fs)
{
	char err[PATH_MAX + 512];

	if (safepath_unlink(fs->cfg.metrics_file, err, sizeof(err)))
		log_warn("metrics_file %s: not removed: %s", fs->cfg.metrics_file, err);
}

/*
 * metrics_group: a group name or a number; "" = the daemon's own group
 * (*@gid = -1, no chown).  Returns 0 or -errno with a message in @err.
 */
static int resolve_group(const char *name, gid_t *gid, char *err, size_t errlen)
{
	struct group gr, *res = NULL;
	char buf[4096], *end;
	unsigned long v;
	int rc;

	*gid = (gid_t)-1;
	if (!name || !name[0])
		return 0;
	rc = getgrnam_r(name, &gr, buf, sizeof(buf), &res);
	if (!rc && res) {
		*gid = res->gr_gid;
		return 0;
	}
	errno = 0;
	v = strtoul(name, &end, 10);
	if (!*end && !errno && v < (gid_t)-1) {
		*gid = (gid_t)v;
		return 0;
	}
	snprintf(err, errlen, "metrics_group: no group '%s'%s%s", name,
		 rc ? ": " : "", rc ? strerror(rc) : "");
	return rc ? -rc : -EINVAL;
}

/* ---- lifetime ---- */

/* Write to the stop eventfd: both threads see it and leave. */
static void wake_all(struct metrics *m)
{
	uint64_t one = 1;

	if (write(m->wake, &one, sizeof(one)) != sizeof(one))
		log_warn("metrics: cannot wake the exporters: %s", strerror(errno));
}

int metrics_start(struct sfs *fs, char *err, size_t errlen)
{
	struct metrics *m;
	int ret;

	if (!fs->cfg.metrics_port && !fs->cfg.metrics_file[0])
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "metrics: out of memory");
		return -ENOMEM;
	}
	m->fs = fs;
	m->lfd = -1;
	ret = resolve_group(fs->cfg.metrics_group, &m->gid, err, errlen);
	if (ret)
		goto out_free;
	m->wake = eventfd(0, EFD_CLOEXEC);
	if (m->wake < 0) {
		ret = -errno;
		snprintf(err, errlen, "metrics: eventfd: %s", strerror(-ret));
		goto out_free;
	}
	if (fs->cfg.metrics_port) {
		m->lfd = listen_local(fs->cfg.metrics_port, err, errlen);
		if (m->lfd < 0) {
			ret = m->lfd;
			goto out_close_wake;
		}
	}
	if (fs->cfg.metrics_file[0]) {
		char why[PATH_MAX + 512];

		/* once now: a bad path, directory or group fails the mount, not a log line */
		ret = textfile_write(m, why, sizeof(why));
		if (ret) {
			snprintf(err, errlen, "metrics_file %s: %s", fs->cfg.metrics_file, why);
			goto out_close_listen;
		}
		ret = -pthread_create(&m->textfile, NULL, textfile_main, m);
		if (ret)
			goto out_no_thread;
		m->textfile_running = true;
	}
	if (m->lfd >= 0) {
		ret = -pthread_create(&m->http, NULL, http_main, m);
		if (ret)
			goto out_no_thread;
		m->http_running = true;
	}
	fs->metrics = m;
	if (fs->cfg.metrics_port)
		log_info("metrics: http://127.0.0.1:%u/metrics", fs->cfg.metrics_port);
	if (fs->cfg.metrics_file[0])
		log_info("metrics: %s every %" PRIu64 " ms", fs->cfg.metrics_file,
			 fs->cfg.metrics_interval_ms);
	return 0;

out_no_thread:
	snprintf(err, errlen, "metrics: cannot start a thread: %s", strerror(-ret));
	wake_all(m);
	if (m->textfile_running)
		pthread_join(m->textfile, NULL);
	if (fs->cfg.metrics_file[0])
		textfile_remove(fs);
out_close_listen:
	if (m->lfd >= 0)
		close(m->lfd);
out_close_wake:
	close(m->wake);
out_free:
	free(m);
	return ret;
}

void metrics_stop(struct sfs *fs)
{
	struct metrics *m = fs->metrics;

	if (m) {
		wake_all(m);
		if (m->http_running)
			pthread_join(m->http, NULL);
		if (m->textfile_running)
			pthread_join(m->textfile, NULL);
		if (m->lfd >= 0)
			close(m->lfd);
		close(m->wake);
		if (fs->cfg.metrics_file[0])
			textfile_remove(fs);
		free(m);
		fs->metrics = NULL;
	}
}
