/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlsock: the control socket's server (see ctlsock.h; the protocol is
 * docs/control.md, the parts are listed in ctlsock_i.h).
 *
 * Requests name paths relative to the mount root, as the client saw them
 * (ctl_find_mount).  Each connection's credential is taken once, at
 * accept, from the kernel (cred_from_socket: SO_PEERCRED and
 * SO_PEERGROUPS), and every request on it is checked against it.
 *
 * Limits, so that no user can starve another of connections (each is a
 * thread here): at most control_max_connections open, the last
 * ROOT_RESERVE of them for root only, and at most control_user_connections
 * per uid other than root.  One over a limit is refused at accept with an
 * ERR line naming the limit, before its HELLO (the client reads it as the
 * reply to its HELLO, ctl_hello).  A connection that holds no cache file
 * (CACHE_FD) and waits for a request longer than control_idle_timeout is
 * closed without a word: it is between requests, so the client library
 * sees the hangup before its next request and opens another.  A running
 * request (a WARMUP, a CACHE_FD being staged) is never idle.
 */
#include "ctlsock_i.h"

#include "log.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROOT_RESERVE	16	/* of control_max_connections: root's only */
#define HELLO_TIMEOUT_MS 30000

/*
 * Every line here a local user can cause at will (connect, refuse, idle
 * out, exhaust the daemon's descriptors or threads) goes through a limit of
 * its own kind: 10 lines per 10 s, the next one let through saying how
 * many were suppressed (issue 27).
 */
static struct log_ratelimit rl_idle = LOG_RATELIMIT_INIT(10000, 10);
static struct log_ratelimit rl_refused = LOG_RATELIMIT_INIT(10000, 10);
static struct log_ratelimit rl_accept = LOG_RATELIMIT_INIT(10000, 10);

/* Serve one request.  Returns 0 to go on, < 0 to close the connection. */
static int dispatch(struct ctlsock_client *cl, struct ctl_msg *m)
{
	const char *verb = m->argv[0];

	if (!strcmp(verb, "PING"))
		return ctl_sendf(cl->fd, "OK\n");
	if (!strcmp(verb, "WARMUP"))
		return ctljobs_warmup(cl, m);
	if (!strcmp(verb, "HINT"))
		return ctljobs_hint(cl, m);
	if (!strcmp(verb, "HINT_END"))
		return ctljobs_hint_end(cl, m);
	if (!strcmp(verb, "STATUS"))
		return ctljobs_status(cl);
	if (!strcmp(verb, "PEERS"))
		return ctlpeers_peers(cl, m);
	if (!strcmp(verb, "ACCESS"))
		return ctlk8s_access(cl, m);
	if (!strcmp(verb, "POD"))
		return ctlk8s_pod(cl, m);
	if (!strcmp(verb, "GPU_BYTES"))
		return handover_gpu_bytes(cl, m);
	if (!strcmp(verb, "CACHE_FD"))
		return handover_cache_fd(cl, m);
	if (!strcmp(verb, "CACHE_FD_CLOSE"))
		return handover_cache_fd_close(cl, m);
	if (!strcmp(verb, "CLIENT_READ"))
		return handover_client_read(cl, m);
	if (!strcmp(verb, "BYE"))
		return -ECONNRESET;
	return ctlconn_send_err(cl, EINVAL, "unknown request");
}

static int hello(struct ctlsock_client *cl)
{
	struct ctl_msg m;
	uint64_t ver = 0;
	char *line;
	int r = ctl_read_line(&cl->conn, &line, HELLO_TIMEOUT_MS);

	if (r < 0)
		return r;
	if (ctl_parse(line, &m) || strcmp(m.argv[0], "HELLO") ||
	    ctl_get_u64(&m, "version", &ver)) {
		ctlconn_send_err(cl, EPROTO, "expected HELLO version=N");
		return -EPROTO;
	}
	if (ver < 1) {
		ctlconn_send_err(cl, EPROTONOSUPPORT, "unsupported protocol version");
		return -EPROTO;
	}
	/* a newer client may speak down to version 1 */
	return ctl_sendf(cl->fd, "OK version=%d server=stagefs/%s uid=%u\n",
			 CTL_PROTO_VERSION, STAGEFS_VERSION, cl->cred.uid);
}

/* Take @cl off the list of connections.  Called with cs->lock held. */
static void client_unlink_locked(struct ctlsock *cs, struct ctlsock_client *cl)
{
	struct ctluser *u = ctluser_locked(cs, cl->cred.uid);

	list_del(&cl->node);
	cs->nclients--;
	if (u && u->conns)	/* found: it was added at accept */
		u->conns--;
}

/*
 * May a connection of @cred be opened now?  0 and counted, or -EAGAIN
 * with the reason in @why.  cs->lock held.
 */
static int admit_locked(struct ctlsock *cs, const struct cred *cred, char *why, size_t len)
{
	bool root = cred->uid == 0;
	unsigned room = root ? cs->max_conns : cs->max_conns - ROOT_RESERVE;
	struct ctluser *u;

	if (cs->stopping) {
		snprintf(why, len, "the daemon is stopping");
		return -EAGAIN;
	}
	if (cs->nclients >= room) {
		snprintf(why, len, "too many control connections: %u open, the limit is %u "
			 "(control_max_connections, %u of them kept for root); retry later",
			 cs->nclients, cs->max_conns, ROOT_RESERVE);
		return -EAGAIN;
	}
	u = ctluser_locked(cs, cred->uid);
	if (!u) {
		snprintf(why, len, "out of memory");
		return -EAGAIN;
	}
	if (!root && u->conns >= cs->user_conns) {
		snprintf(why, len, "too many control connections: uid %u has %u open, the limit "
			 "per user is %u (control_user_connections); close some and retry",
			 cred->uid, u->conns, cs->user_conns);
		return -EAGAIN;
	}
	u->conns++;
	cs->nclients++;
	return 0;
}

static void *client_main(void *arg)
{
	struct ctlsock_client *cl = arg;
	struct ctlsock *cs = cl->cs;

	ctl_conn_init(&cl->conn, cl->fd);
	if (!hello(cl)) {
		for (;;) {
			struct ctl_msg m;
			char *line;
			int r = ctl_read_line(&cl->conn, &line, ctlconn_idle_ms(cl));

			if (r == -ETIMEDOUT)
				log_limited(&rl_idle, LOG_DEBUG,
					    "control: uid %u pid %d: idle for %" PRIu64 " ms: closed",
					    cl->cred.uid, (int)cl->cred.pid, cs->idle_ms);
			if (r < 0)
				break;
			if (!r)
				continue;
			if (ctl_parse(line, &m)) {
				if (ctlconn_send_err(cl, EINVAL, "unreadable request"))
					break;
				continue;
			}
			if (dispatch(cl, &m) < 0)
				break;
		}
	}
	handover_release(cl);
	close(cl->fd);
	pthread_mutex_lock(&cs->lock);
	client_unlink_locked(cs, cl);
	pthread_cond_broadcast(&cs->gone);
	pthread_mutex_unlock(&cs->lock);
	free(cl);
	return NULL;
}

static void start_client(struct ctlsock *cs, int fd)
{
	struct ctlsock_client *cl;
	char why[256], esc[768];
	pthread_attr_t at;
	pthread_t t;
	int ret;

	cl = calloc(1, sizeof(*cl));
	if (!cl) {
		close(fd);
		return;
	}
	ret = cred_from_socket(&cl->cred, fd);
	if (ret) {
		log_limited(&rl_accept, LOG_WARNING, "control: SO_PEERCRED: %s", strerror(-ret));
		close(fd);
		free(cl);
		return;
	}
	cl->cs = cs;
	cl->fd = fd;
	pthread_mutex_lock(&cs->lock);
	ret = admit_locked(cs, &cl->cred, why, sizeof(why));
	if (ret) {
		pthread_mutex_unlock(&cs->lock);
		log_limited(&rl_refused, LOG_NOTICE, "control: uid %u pid %d refused: %s",
			    cl->cred.uid, (int)cl->cred.pid, why);
		ctl_escape(why, esc, sizeof(esc));
		/* a new socket's buffer is empty: this cannot block */
		ctl_sendf(fd, "ERR code=%s msg=%s\n", ctl_errname(-ret), esc);
		close(fd);
		free(cl);
		return;
	}
	list_add(&cs->clients, &cl->node);
	pthread_mutex_unlock(&cs->lock);

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	if (pthread_create(&t, &at, client_main, cl)) {
		log_limited(&rl_accept, LOG_WARNING, "control: cannot start a connection thread");
		pthread_mutex_lock(&cs->lock);
		client_unlink_locked(cs, cl);
		pthread_mutex_unlock(&cs->lock);
		close(fd);
		free(cl);
	}
	pthread_attr_destroy(&at);
}

static void *accept_main(void *arg)
{
	struct ctlsock *cs = arg;

	for (;;) {
		struct pollfd p[2] = {
			{ .fd = cs->lfd, .events = POLLIN },
			{ .fd = cs->wake[0], .events = POLLIN },
		};
		int fd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_err("control: poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		fd = accept4(cs->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
				log_limited(&rl_accept, LOG_WARNING, "control: accept: %s",
					    strerror(errno));
			continue;
		}
		start_client(cs, fd);
	}
	return NULL;
}

/* ---- life ---- */

int ctlsock_start(struct sfs *fs)
{
	struct ctlsock *cs = calloc(1, sizeof(*cs));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *dir = fs->cfg.runtime_dir;
	uint64_t h = sfs_hash64(fs->mountpoint, strlen(fs->mountpoint));
	struct stat st;
	bool existed;
	int ret;

	if (!cs)
		return -ENOMEM;
	cs->fs = fs;
	cs->lfd = cs->wake[0] = cs->wake[1] = -1;
	cs->max_conns = MAX(fs->cfg.control_max_connections, 2 * ROOT_RESERVE);
	/* one user can never take every connection others may use */
	cs->user_conns = MIN(fs->cfg.control_user_connections, cs->max_conns - ROOT_RESERVE);
	cs->idle_ms = fs->cfg.control_idle_timeout_ms;
	list_init(&cs->clients);
	pthread_mutex_init(&cs->lock, NULL);
	cond_init_monotonic(&cs->gone);
	if ((size_t)snprintf(cs->path, sizeof(cs->path), "%s/%016" PRIx64 ".sock", dir, h) >=
	    sizeof(cs->path)) {
		log_warn("control socket: %s/...sock is longer than a socket path may be: "
			 "no control socket (stagefs warmup will not work)", dir);
		goto out_free;
	}
	/*
	 * The directory others must reach to connect: searchable by all.  The
	 * process umask is 077 (the cache is private), hence the chmod.
	 */
	existed = stat(dir, &st) == 0;
	ret = mkdir_p(dir, 0755);
	if (!ret && !existed && chmod(dir, 0755) < 0)
		ret = -errno;
	if (ret) {
		log_warn("control socket: runtime_dir %s: %s: no control socket", dir,
			 strerror(-ret));
		goto out_free;
	}
	strcpy(sa.sun_path, cs->path);
	cs->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cs->lfd < 0)
		goto out_errno;
	/*
	 * A socket left by a daemon that died: nobody answers it.  One that
	 * answers belongs to a live daemon on this mount point (mounted over):
	 * take the name over; its clients keep their connections.
	 */
	if (unlink(cs->path) == 0)
		log_info("control socket: replaced a stale %s", cs->path);
	if (bind(cs->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out_errno;
	/*
	 * 0622: connect(2) on a Unix socket needs write permission on the
	 * socket file and nothing else, so everyone may connect (each request
	 * is then checked against the peer's credential, src/cred.h, as reads
	 * through the mount are).  Read permission means nothing for a socket;
	 * it is left off so nothing suggests the file could be read for data.
	 */
	if (chmod(cs->path, 0622) < 0)
		goto out_unlink;
	if (listen(cs->lfd, 64) < 0 || pipe2(cs->wake, O_CLOEXEC) < 0)
		goto out_unlink;
	ret = pthread_create(&cs->accept_thr, NULL, accept_main, cs);
	if (ret) {
		errno = ret;
		goto out_unlink;
	}
	fs->ctl = cs;
	log_info("control socket %s", cs->path);
	return 0;

out_unlink:
	ret = errno;
	unlink(cs->path);
	errno = ret;
out_errno:
	log_warn("control socket %s: %s: no control socket", cs->path, strerror(errno));
out_free:
	if (cs->lfd >= 0)
		close(cs->lfd);
	if (cs->wake[0] >= 0) {
		close(cs->wake[0]);
		close(cs->wake[1]);
	}
	free(cs);
	return 0;
}

void ctlsock_stop(struct sfs *fs)
{
	struct ctlsock *cs = fs->ctl;
	uint64_t until;

	if (!cs)
		return;
	pthread_mutex_lock(&cs->lock);
	cs->stopping = true;
	pthread_mutex_unlock(&cs->lock);
	if (write(cs->wake[1], "x", 1) < 0)
		log_warn("control: wake: %s", strerror(errno));
	pthread_join(cs->accept_thr, NULL);
	close(cs->lfd);
	unlink(cs->path);

	/* wake every connection thread: reads end, jobs see the peer gone */
	until = now_ns() + 30 * 1000000000ULL;
	pthread_mutex_lock(&cs->lock);
	list_for_each(pos, &cs->clients)
		shutdown(list_entry(pos, struct ctlsock_client, node)->fd, SHUT_RDWR);
	while (cs->nclients) {
		if (cond_wait_until_ns(&cs->gone, &cs->lock, until) == ETIMEDOUT) {
			log_warn("control: %u connection(s) did not end; leaving them",
				 cs->nclients);
			pthread_mutex_unlock(&cs->lock);
			fs->ctl = NULL;
			return;	/* their threads still use cs: leak it */
		}
	}
	pthread_mutex_unlock(&cs->lock);
	close(cs->wake[0]);
	close(cs->wake[1]);
	pthread_mutex_destroy(&cs->lock);
	pthread_cond_destroy(&cs->gone);
	fs->ctl = NULL;
	handover_grants_free(cs);
	ctluser_free_all(cs);
	free(cs);
}

int ctlsock_text(struct sfs *fs, char **out)
{
	char *s;
	int n;

	if (!fs->ctl)
		return -ENOENT;
	n = asprintf(&s, "%s\n", fs->ctl->path);
	if (n < 0)
		return -ENOMEM;
	*out = s;
	return n;
}
