/*
 * metrics: see metrics.h.  The exporter is one thread polling an eventfd
 * (stop), the listening socket and, where a metrics_file is set, a timer.
 * It answers one HTTP connection at a time with a 2 s I/O deadline per
 * connection: a scraper on localhost needs no more, and a stuck client
 * cannot hold the thread longer than that.
 */
#include "metrics.h"

#include "log.h"
#include "stats.h"
#include "vfiles.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define HTTP_TIMEOUT_S	2
#define PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct metrics {
	struct sfs *fs;
	int lfd;		/* listening socket; -1 without metrics_port */
	int wake;		/* eventfd: written to stop the thread */
	pthread_t thread;
	bool running;
};

/* Write all of @buf to socket @fd.  Returns 0 or -errno. */
static int send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static void reply(int fd, int code, const char *reason, const char *type,
		  const char *body, size_t len, bool head)
{
	char hdr[512];
	int n = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n", code, reason, type, len);

	if (send_all(fd, hdr, (size_t)n) == 0 && !head)
		send_all(fd, body, len);
}

/* Answer one connection: GET (or HEAD) /metrics; anything else is an error. */
static void serve_one(struct metrics *m)
{
	struct timeval tv = { .tv_sec = HTTP_TIMEOUT_S };
	char req[4096], *path, *sp, *body = NULL;
	size_t got = 0;
	bool head;
	int fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
	int n;

	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	/* the request line and headers; the body of a GET is empty */
	while (got < sizeof(req) - 1) {
		ssize_t r = recv(fd, req + got, sizeof(req) - 1 - got, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[got] = '\0';
	sp = strchr(req, ' ');
	if (!sp) {
		reply(fd, 400, "Bad Request", "text/plain", "bad request\n", 12, false);
		goto out;
	}
	*sp = '\0';
	head = !strcmp(req, "HEAD");
	if (strcmp(req, "GET") && !head) {
		reply(fd, 405, "Method Not Allowed", "text/plain", "GET /metrics\n", 13, false);
		goto out;
	}
	path = sp + 1;
	path[strcspn(path, " ?\r\n")] = '\0';
	if (strcmp(path, "/metrics")) {
		reply(fd, 404, "Not Found", "text/plain", "try /metrics\n", 13, head);
		goto out;
	}
	n = vfiles_metrics_text(m->fs, &body);
	if (n < 0)
		reply(fd, 500, "Internal Server Error", "text/plain", "out of memory\n", 14, head);
	else
		reply(fd, 200, "OK", PROM_CONTENT_TYPE, body, (size_t)n, head);
	free(body);
out:
	close(fd);
}

/* Rewrite metrics_file through FILE.tmp and rename.  Returns 0 or -errno. */
static int write_file(struct sfs *fs)
{
	char *body = NULL;
	int n, ret;

	n = vfiles_metrics_text(fs, &body);
	if (n < 0)
		return n;
	/* 0644 whatever the daemon's umask: node_exporter must read the file */
	ret = write_file_atomic(fs->cfg.metrics_file, body, (size_t)n, 0644, false);
	free(body);
	return ret;
}

static void *exporter_main(void *arg)
{
	struct metrics *m = arg;
	struct sfs *fs = m->fs;
	bool file = fs->cfg.metrics_file[0] != '\0';
	uint64_t next = now_ms() + fs->cfg.metrics_interval_ms;
	bool warned = false;

	for (;;) {
		struct pollfd p[2] = {
			{ .fd = m->wake, .events = POLLIN },
			{ .fd = m->lfd, .events = POLLIN },
		};
		uint64_t now = now_ms();
		int timeout = file ? (int)(next > now ? next - now : 0) : -1;

		if (poll(p, m->lfd >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		if (m->lfd >= 0 && (p[1].revents & POLLIN))
			serve_one(m);
		if (file && now_ms() >= next) {
			int ret = write_file(fs);

			if (ret && !warned)
				log_warn("metrics_file %s: %s (will keep trying)",
					 fs->cfg.metrics_file, strerror(-ret));
			warned = ret != 0;
			next = now_ms() + fs->cfg.metrics_interval_ms;
		}
	}
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
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "metrics_port: socket: %s", strerror(-ret));
		return ret;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16)) {
		ret = -errno;
		snprintf(err, errlen, "metrics_port: cannot listen on 127.0.0.1:%u: %s",
			 port, strerror(-ret));
		close(fd);
		return ret;
	}
	return fd;
}

int metrics_start(struct sfs *fs, char *err, size_t errlen)
{
	struct metrics *m;
	int ret;

	ret = stats_create(NULL, &fs->stats);
	if (ret) {
		snprintf(err, errlen, "feed-rate counters: %s", strerror(-ret));
		return ret;
	}
	if (!fs->cfg.metrics_port && !fs->cfg.metrics_file[0])
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		snprintf(err, errlen, "metrics: out of memory");
		goto out_stats;
	}
	m->fs = fs;
	m->lfd = -1;
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
		/* once now: a bad path fails the mount instead of a log line */
		ret = write_file(fs);
		if (ret) {
			snprintf(err, errlen, "metrics_file %s: %s", fs->cfg.metrics_file,
				 strerror(-ret));
			goto out_close_listen;
		}
	}
	ret = -pthread_create(&m->thread, NULL, exporter_main, m);
	if (ret) {
		snprintf(err, errlen, "metrics: cannot start a thread: %s", strerror(-ret));
		goto out_unlink;
	}
	m->running = true;
	fs->metrics = m;
	if (fs->cfg.metrics_port)
		log_info("metrics: http://127.0.0.1:%u/metrics", fs->cfg.metrics_port);
	if (fs->cfg.metrics_file[0])
		log_info("metrics: %s every %" PRIu64 " ms", fs->cfg.metrics_file,
			 fs->cfg.metrics_interval_ms);
	return 0;

out_unlink:
	if (fs->cfg.metrics_file[0])
		unlink(fs->cfg.metrics_file);
out_close_listen:
	if (m->lfd >= 0)
		close(m->lfd);
out_close_wake:
	close(m->wake);
out_free:
	free(m);
out_stats:
	stats_destroy(fs->stats);
	fs->stats = NULL;
	return ret;
}

void metrics_stop(struct sfs *fs)
{
	struct metrics *m = fs->metrics;

	if (m) {
		uint64_t one = 1;

		if (write(m->wake, &one, sizeof(one)) != sizeof(one))
			log_warn("metrics: cannot wake the exporter: %s", strerror(errno));
		pthread_join(m->thread, NULL);
		if (m->lfd >= 0)
			close(m->lfd);
		close(m->wake);
		if (fs->cfg.metrics_file[0] && unlink(fs->cfg.metrics_file) && errno != ENOENT)
			log_warn("metrics_file %s: %s", fs->cfg.metrics_file, strerror(errno));
		free(m);
		fs->metrics = NULL;
	}
	stats_destroy(fs->stats);
	fs->stats = NULL;
}
