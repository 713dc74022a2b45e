/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_client: the plugin's conversations with the node's stagefs daemon,
 * run as the job's user in the child spank_asuser.c makes.
 *
 * client_warmup() is `stagefs warmup --shard I/N PATH...` without the
 * terminal: one WARMUP request on the control socket (docs/control.md),
 * followed to its DONE or to the deadline; the daemon checks every path
 * against the peer's credentials and charges the fetches to its quota.
 * client_feed() reads the mount's .stagefs/stats as that user (who sees
 * their own job rows, docs/feedrate.md) and picks the job's row.  Each
 * writes one line of KEY=VALUE words, escaped like the control protocol,
 * for the plugin to parse.
 */
#include "spank_stagefs_i.h"

#include "ctlproto.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STATS_MAX	(64u << 20)	/* bytes of .stagefs/stats we read at most */

/* The keys of WARMUP's PROGRESS/DONE that the result carries on. */
static const char *const warmup_keys[] = {
	"files", "chunks", "bytes", "cached_before_bytes", "fetched_bytes",
	"failed", "failed_files", "ms",
};

/* The fields of a job's row that the feed summary uses. */
static const char *const feed_keys[] = {
	"read_bytes", "files_read", "cache_hits", "cache_misses", "stall_ns",
	"active_ns", "backend_bytes", "gpu_bytes", "passthrough_opens",
	"read_bytes_estimated",
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void client_put_word(char *line, size_t len, const char *key, const char *val)
{
	char esc[SPANK_LINE_MAX];
	size_t n = strlen(line);

	ctl_escape(val, esc, sizeof(esc));
	if (n < len)
		snprintf(line + n, len - n, " %s=%s", key, esc);
}

void client_put_u64(char *line, size_t len, const char *key, uint64_t v)
{
	size_t n = strlen(line);

	if (n < len)
		snprintf(line + n, len - n, " %s=%" PRIu64, key, v);
}

uint64_t client_msg_u64(const struct ctl_msg *m, const char *key)
{
	uint64_t v = 0;

	ctl_get_u64(m, key, &v);
	return v;
}

static int send_line(int fd, const char *line)
{
	size_t n = strlen(line), off = 0;

	while (off < n) {
		ssize_t w = write(fd, line + off, n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return write(fd, "\n", 1) == 1 ? 0 : -1;
}

static int warmup_error(int fd, const char *fmt, const char *a, int err)
{
	char msg[1024], line[SPANK_LINE_MAX] = "STAGED status=error";

	snprintf(msg, sizeof(msg), fmt, a, strerror(err));
	client_put_word(line, sizeof(line), "msg", msg);
	return send_line(fd, line);
}

int client_warmup(void *arg, int fd)
{
	const struct client_warmup *w = arg;
	uint64_t deadline = mono_ms() + (uint64_t)w->timeout_ms;
	uint64_t v[sizeof(warmup_keys) / sizeof(warmup_keys[0])] = { 0 };
	char sock[PATH_MAX], err[512], line[SPANK_LINE_MAX];
	char fail_path[1024] = "", fail_msg[256] = "";
	const char *status = "timeout";
	struct ctl_conn *conn;
	int sfd, ret;

	if (w->socket[0]) {
		snprintf(sock, sizeof(sock), "%s", w->socket);
	} else {
		ret = ctl_socket_of(w->mount, sock, sizeof(sock));
		if (ret)
			return warmup_error(fd, "%s/" CTL_SOCKET_VFILE ": %s (is stagefs mounted there?)",
					    w->mount, -ret);
	}
	sfd = ctl_connect(sock);
	if (sfd < 0)
		return warmup_error(fd, "cannot connect to %s: %s", sock, -sfd);
	conn = malloc(sizeof(*conn));
	if (!conn) {
		close(sfd);
		return warmup_error(fd, "%s%s", "", ENOMEM);
	}
	ctl_conn_init(conn, sfd);
	if (ctl_hello(conn, err, sizeof(err))) {
		snprintf(line, sizeof(line), "STAGED status=error");
		client_put_word(line, sizeof(line), "msg", err);
		goto out_send;
	}
	ret = ctl_sendf(sfd, "WARMUP mode=fetch shard=%u/%u progress_ms=1000\n",
			w->shard_i, w->shard_n);
	for (size_t i = 0; !ret && i < w->npaths; i++) {
		char esc[PATH_MAX * 3 + 1];

		if (ctl_escape(w->paths[i], esc, sizeof(esc)) >= sizeof(esc))
			ret = -ENAMETOOLONG;
		else
			ret = ctl_sendf(sfd, "PATH %s\n", esc);
	}
	if (!ret)
		ret = ctl_sendf(sfd, "END\n");
	if (ret) {
		close(sfd);
		free(conn);
		return warmup_error(fd, "sending the request to %s: %s", sock, -ret);
	}
	for (;;) {
		uint64_t now = mono_ms();
		struct ctl_msg m;
		char *l;
		int n;

		if (now >= deadline)
			break;
		n = ctl_read_line(conn, &l, (int)(deadline - now));
		if (n == -ETIMEDOUT)
			break;
		if (n < 0) {
			snprintf(line, sizeof(line), "STAGED status=error");
			snprintf(err, sizeof(err), "the daemon went away during the warmup (%s)",
				 strerror(-n));
			client_put_word(line, sizeof(line), "msg", err);
			goto out_send;
		}
		if (ctl_parse(l, &m))
			continue;
		if (!strcmp(m.argv[0], "PROGRESS") || !strcmp(m.argv[0], "DONE")) {
			for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
				ctl_get_u64(&m, warmup_keys[i], &v[i]);
			if (!strcmp(m.argv[0], "DONE")) {
				status = v[5] || v[6] ? "failed" : "ok";
				break;
			}
		} else if (!strcmp(m.argv[0], "FAIL") && !fail_path[0]) {
			const char *p = ctl_get(&m, "path"), *msg = ctl_get(&m, "msg");

			snprintf(fail_path, sizeof(fail_path), "%s", p && *p ? p : ".");
			snprintf(fail_msg, sizeof(fail_msg), "%s", msg ? msg : "failed");
		} else if (!strcmp(m.argv[0], "ERR")) {
			const char *msg = ctl_get(&m, "msg");

			snprintf(line, sizeof(line), "STAGED status=error");
			snprintf(err, sizeof(err), "the daemon refused the warmup: %s",
				 msg ? msg : "error");
			client_put_word(line, sizeof(line), "msg", err);
			goto out_send;
		}
	}
	snprintf(line, sizeof(line), "STAGED status=%s", status);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		client_put_u64(line, sizeof(line), warmup_keys[i], v[i]);
	if (fail_path[0]) {
		client_put_word(line, sizeof(line), "fail_path", fail_path);
		client_put_word(line, sizeof(line), "fail_msg", fail_msg);
	}
out_send:
	/* closing the socket cancels what is left of a timed-out warmup */
	close(sfd);
	free(conn);
	return send_line(fd, line);
}

static int feed_error(int fd, const char *what, const char *path, int err)
{
	char msg[PATH_MAX + 256], line[SPANK_LINE_MAX] = "FEED error";

	snprintf(msg, sizeof(msg), "%s %s: %s", what, path, strerror(err));
	client_put_word(line, sizeof(line), "msg", msg);
	return send_line(fd, line);
}

int client_feed(void *arg, int fd)
{
	const struct client_feed *f = arg;
	char path[PATH_MAX + 32], err[256], line[SPANK_LINE_MAX] = "FEED found=0";
	const struct json *jobs;
	struct json_doc *doc;
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	int sfd, ret;

	snprintf(path, sizeof(path), "%s/.stagefs/stats", f->mount);
	if (!buf)
		return feed_error(fd, "reading", path, ENOMEM);
	sfd = open(path, O_RDONLY | O_CLOEXEC);
	if (sfd < 0) {
		ret = errno;
		free(buf);
		return feed_error(fd, "opening", path, ret);
	}
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb = cap < STATS_MAX ? realloc(buf, cap * 2) : NULL;

			if (!nb) {
				close(sfd);
				free(buf);
				return feed_error(fd, "reading", path, E2BIG);
			}
			buf = nb;
			cap *= 2;
		}
		n = read(sfd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = errno;
			close(sfd);
			free(buf);
			return feed_error(fd, "reading", path, ret);
		}
		if (!n)
			break;
		len += (size_t)n;
	}
	close(sfd);
	ret = json_parse(buf, len, &doc, err, sizeof(err));
	free(buf);
	if (ret)
		return feed_error(fd, "parsing", path, -ret);
	jobs = json_get(json_root(doc), "jobs");
	for (size_t i = 0; jobs && i < json_len(jobs); i++) {
		const struct json *row = json_at(jobs, i);
		const char *name = json_str(json_get(row, "job"), NULL);

		if (!name || strcmp(name, f->job) ||
		    json_u64(json_get(row, "uid"), (uint64_t)-1) != (uint64_t)f->uid)
			continue;
		snprintf(line, sizeof(line), "FEED found=1");
		for (size_t k = 0; k < sizeof(feed_keys) / sizeof(feed_keys[0]); k++)
			client_put_u64(line, sizeof(line), feed_keys[k],
				json_u64(json_get(row, feed_keys[k]), 0));
		break;
	}
	json_doc_free(doc);
	return send_line(fd, line);
}
