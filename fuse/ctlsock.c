/*
 * ctlsock: the control socket's server (see ctlsock.h; the protocol is
 * docs/control.md, the parts are listed in ctlsock_i.h).
 *
 * Requests name paths relative to the mount root, as the client saw them
 * (ctl_find_mount).  Each connection's credential is taken once, at
 * accept, from the kernel (cred_from_socket: SO_PEERCRED and
 * SO_PEERGROUPS), and every request on it is checked against it.
 */
#include "ctlsock_i.h"

#include "log.h"

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

#define MAX_CLIENTS	256
#define HELLO_TIMEOUT_MS 30000

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
	if (cl->prev)
		cl->prev->next = cl->next;
	else
		cs->clients = cl->next;
	if (cl->next)
		cl->next->prev = cl->prev;
	cs->nclients--;
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
			int r = ctl_read_line(&cl->conn, &line, -1);

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
		log_warn("control: SO_PEERCRED: %s", strerror(-ret));
		close(fd);
		free(cl);
		return;
	}
	cl->cs = cs;
	cl->fd = fd;
	pthread_mutex_lock(&cs->lock);
	if (cs->nclients >= MAX_CLIENTS || cs->stopping) {
		pthread_mutex_unlock(&cs->lock);
		ctl_sendf(fd, "ERR code=EAGAIN msg=too%%20many%%20connections\n");
		close(fd);
		free(cl);
		return;
	}
	cl->next = cs->clients;
	if (cs->clients)
		cs->clients->prev = cl;
	cs->clients = cl;
	cs->nclients++;
	pthread_mutex_unlock(&cs->lock);

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	if (pthread_create(&t, &at, client_main, cl)) {
		log_warn("control: cannot start a connection thread");
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
				log_warn("control: accept: %s", strerror(errno));
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
	pthread_mutex_init(&cs->lock, NULL);
	pthread_cond_init(&cs->gone, NULL);
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
	struct timespec ts;

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
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	pthread_mutex_lock(&cs->lock);
	for (struct ctlsock_client *cl = cs->clients; cl; cl = cl->next)
		shutdown(cl->fd, SHUT_RDWR);
	while (cs->nclients) {
		if (pthread_cond_timedwait(&cs->gone, &cs->lock, &ts) == ETIMEDOUT) {
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
