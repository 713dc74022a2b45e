/*
 * peerd: see peerd.h.
 *
 * No index: a request names where the asker's manifest has the chunk
 * (struct peer_loc: dataset tag, inode, chunk index), and the server looks
 * there in its own manifest of that dataset, which it has mounted too.
 * The chunk id there must be the one asked for, else "not here" (ENOENT):
 * the locator is only a hint, checked against the content address.  So a
 * mount with a peer group touches no more of its manifest than one
 * without, and holds nothing per chunk (a mount of ten million files used
 * to walk them all and hold a table of every chunk before it answered).
 *
 * Lock order: pd->lock (the connection count), pd->pace_lock and
 * pd->log_lock are leaves; the cache's locks are taken outside them.
 */
#include "peerd.h"

#include "daemon.h"
#include "log.h"
#include "manifest.h"
#include "peer.h"
#include "peer_proto.h"
#include "prefetch/prefetch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define IDLE_MS		60000	/* a connection with no request this long is closed */
#define REQ_MS		5000	/* a request's 96 bytes, once begun */
#define SEND_MS		30000	/* a reply, once begun */
#define LOGGED_MAX	256	/* sources logged once each */
#define SERVE_NICE	10
#define PER_SOURCE	(2 * PEER_CONNS)	/* connections from one address at once */

/* A chunk of a dataset mounted here. */
struct ient {
	uint64_t ino;
	uint32_t ds;
	uint32_t idx;
};

struct peerd {
	struct sfs *fs;
	int lfd;			/* listening socket */
	int stop_fd;			/* eventfd: stop */
	pthread_t accept_thread;
	bool started;

	pthread_mutex_t lock;
	pthread_cond_t idle;		/* nconns dropped to 0 */
	unsigned int nconns;		/* protected by lock */
	int conn_fd[PEERD_MAX_CONNS];	/* protected by lock; -1: free */
	uint32_t conn_src[PEERD_MAX_CONNS];	/* their source addresses; protected by lock */
	bool stopping;			/* protected by lock */

	pthread_mutex_t pace_lock;
	uint64_t pace_ns;		/* when the next reply may start; protected by pace_lock */
	uint64_t ns_per_byte_x1000;	/* 0: no cap */

	pthread_mutex_t log_lock;
	uint32_t logged[LOGGED_MAX];	/* sources logged; protected by log_lock */
	unsigned int nlogged;

	struct peer_replay *replay;
	bool corrupt;			/* peer_test_corrupt */
};

/* ---- the group ---- */

int peerd_group_create(struct sfs *fs, char *err, size_t errlen)
{
	const struct sfs_config *c = &fs->cfg;
	struct peer_opts o = {
		.listen = c->peer_listen,
		.peers = c->peers,
		.peers_file = c->peers_file,
		.key_file = c->peer_key_file,
		.timeout_ms = c->peer_timeout_ms,
	};

	fs->peers = NULL;
	if (!c->peer_listen || !*c->peer_listen) {
		if ((c->peers && *c->peers) || (c->peers_file && *c->peers_file))
			log_warn("peers or peers_file is set but peer_listen is not: this node is in no peer group");
		return 0;
	}
	return peer_group_create(&o, &fs->peers, err, errlen);
}

void peerd_group_destroy(struct sfs *fs)
{
	peer_group_destroy(fs->peers);
	fs->peers = NULL;
}

void peerd_reload(struct sfs *fs, const struct sfs_config *cfg)
{
	char err[512];

	if (!fs->peers)
		return;
	if (peer_group_reload(fs->peers, cfg->peers, cfg->peers_file, err, sizeof(err)))
		log_err("reload: peers: %s; the group stays as it was", err);
}

/* ---- finding a chunk ---- */

/*
 * Is chunk @id at @loc in a dataset mounted here?  Only a backend that can
 * ask peers (->peer_first: published rados://) has content-addressed
 * chunks to offer.  @loc is the network's: bounds-checked by the manifest
 * (an inode or index out of range is an error there), and what it names
 * must hash to @id.  Touches at most the one manifest part that holds
 * the inode, as a read of the file here would.
 */
static bool chunk_find(struct peerd *pd, const struct sfs_id *id,
		       const struct peer_loc *loc, struct ient *out)
{
	struct sfs *fs = pd->fs;
	uint32_t nds = atomic_load(&fs->nds);

	if (!loc->tag || !loc->ino)
		return false;
	for (uint32_t i = 0; i < nds; i++) {
		struct backend *be = fs->ds[i]->be;
		struct sfs_id got;

		if (!be->ops->peer_first || be->peer_tag != loc->tag)
			continue;
		/* manifest_chunk() refuses an inode or index out of range */
		if (loc->ino > manifest_nentries(be->m) ||
		    manifest_chunk(be->m, loc->ino, loc->idx, &got) ||
		    !sfs_id_eq(&got, id))
			continue;	/* another version, or a wrong locator */
		*out = (struct ient){ .ino = loc->ino, .ds = i, .idx = loc->idx };
		return true;
	}
	return false;
}

void peerd_dataset_added(struct sfs *fs, struct sfs_dataset *ds)
{
	if (!fs->peers)
		return;
	ds->be->peers = fs->peers;	/* served from now: chunk_find() looks at fs->ds */
}

/* ---- one connection ---- */

/* Log a refusal of @from once per source (then only count it). */
static void log_once(struct peerd *pd, const struct sockaddr_in *from, const char *why)
{
	char ip[INET_ADDRSTRLEN];
	bool seen = false;

	peer_note_refused(pd->fs->peers, from);
	pthread_mutex_lock(&pd->log_lock);
	for (unsigned int i = 0; i < pd->nlogged && !seen; i++)
		seen = pd->logged[i] == from->sin_addr.s_addr;
	if (!seen && pd->nlogged < LOGGED_MAX)
		pd->logged[pd->nlogged++] = from->sin_addr.s_addr;
	pthread_mutex_unlock(&pd->log_lock);
	if (seen)
		return;
	inet_ntop(AF_INET, &from->sin_addr, ip, sizeof(ip));
	log_warn("peer server: refused a request from %s: %s (logged once per source)",
		 ip, why);
}

/* Wait up to @ms for @fd to be ready for @ev.  Returns 0, -ETIMEDOUT, -errno. */
static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r;

	do {
		r = poll(&p, 1, ms);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r ? 0 : -ETIMEDOUT;
}

/* Read exactly @len bytes; the first within @first_ms, the rest within REQ_MS. */
static int recv_full(int fd, void *buf, size_t len, int first_ms)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r;
		int rc = wait_fd(fd, POLLIN, got ? REQ_MS : first_ms);

		if (rc)
			return rc;
		r = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		got += (size_t)r;
	}
	return 0;
}

static int send_full(int fd, struct iovec *iov, int n)
{
	uint64_t deadline = now_ms() + SEND_MS;

	while (n) {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			uint64_t now = now_ms();
			int rc;

			if (now >= deadline)
				return -ETIMEDOUT;
			rc = wait_fd(fd, POLLOUT, (int)(deadline - now));
			if (rc)
				return rc;
			continue;
		}
		if (r < 0)
			return -errno;
		while (n && (size_t)r >= iov->iov_len) {
			r -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n) {
			iov->iov_base = (char *)iov->iov_base + r;
			iov->iov_len -= (size_t)r;
		}
	}
	return 0;
}

/* Pace replies to peer_serve_max_mbps: wait for this one's turn. */
static void pace(struct peerd *pd, size_t len)
{
	uint64_t now, start;

	if (!pd->ns_per_byte_x1000)
		return;
	pthread_mutex_lock(&pd->pace_lock);
	now = now_ns();
	start = MAX(now, pd->pace_ns);
	pd->pace_ns = start + (uint64_t)len * pd->ns_per_byte_x1000 / 1000;
	pthread_mutex_unlock(&pd->pace_lock);
	if (start > now) {
		struct timespec ts = {
			.tv_sec = (time_t)((start - now) / 1000000000ULL),
			.tv_nsec = (long)((start - now) % 1000000000ULL),
		};

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
}

struct serve_src {
	struct sfs *fs;
	struct backend *be;
	struct sfs_attr attr;
	struct cfile *cf;
};

/* The cache's source for a chunk a peer asked and this node lacks. */
static int serve_fetch(void *arg, uint32_t idx, void *buf, size_t len)
{
	struct serve_src *s = arg;
	int r;

	pf_demand_begin(s->fs->pf, len);	/* backend_max_rate holds for peers too */
	daemon_fetch_begin(s->fs, s->cf, idx);
	/* read_chunk never asks a peer: an owner reads the backend itself */
	r = s->be->ops->read_chunk(s->be, &s->attr, idx, buf, len);
	daemon_fetch_end(s->fs, s->cf, idx, r, false);
	pf_demand_end(s->fs->pf);
	return r;
}

/* Chunk @e into @buf (@len bytes) from the cache, filling it on a miss. */
static int serve_read(struct peerd *pd, const struct ient *e, void *buf, size_t len)
{
	struct sfs *fs = pd->fs;
	struct sfs_dataset *ds;
	struct serve_src s = { .fs = fs };
	struct cache_source src = { .fetch = serve_fetch, .arg = &s, .uid = 0 };
	ssize_t n;
	int rc;

	if (e->ds >= atomic_load(&fs->nds))
		return -ENOENT;
	ds = fs->ds[e->ds];
	s.be = ds->be;
	src.nothrash = atomic_load(&ds->nothrash);
	rc = s.be->ops->getattr(s.be, e->ino, &s.attr);
	if (rc)
		return rc;
	if (len != backend_chunk_len(s.attr.size, s.be->chunk_size, e->idx))
		return -EINVAL;
	rc = cache_file_get(fs->cache, &s.attr.content, s.attr.size, s.be->chunk_size, &s.cf);
	if (rc)
		return rc;
	n = cache_read(fs->cache, s.cf, (uint64_t)e->idx * s.be->chunk_size, buf, len, &src);
	cache_file_put(fs->cache, s.cf);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EIO;
}

struct conn {
	struct peerd *pd;
	int fd;
	int slot;
	struct sockaddr_in from;
};

/* Give connection slot @slot (socket @fd) back: closes @fd. */
static void slot_release(struct peerd *pd, int slot, int fd)
{
	pthread_mutex_lock(&pd->lock);
	pd->conn_fd[slot] = -1;
	close(fd);
	if (--pd->nconns == 0)
		pthread_cond_broadcast(&pd->idle);
	pthread_mutex_unlock(&pd->lock);
}

static void conn_end(struct conn *c)
{
	slot_release(c->pd, c->slot, c->fd);
	free(c);
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct peerd *pd = c->pd;
	const struct peer_key *key = peer_group_key(pd->fs->peers);
	void *buf = NULL;
	size_t bufcap = 0;

	/* below the node's own readers (setpriority on a thread id: this thread) */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), SERVE_NICE);
	for (;;) {
		unsigned char req[PEER_REQ_LEN], rep[PEER_REP_LEN];
		struct peer_req_msg m;
		struct iovec iov[2];
		struct ient e;
		int rc, status = 0;

		if (recv_full(c->fd, req, PEER_REQ_V1_LEN, IDLE_MS))
			break;
		if (peer_req_v1(req)) {
			/* an older node (SFP1, no locator): "not here", it reads its backend */
			log_once(pd, &c->from, "an older stagefs (protocol SFP1, no locator): upgrade it");
			peer_rep_encode(ENOENT, 0, rep);
			iov[0] = (struct iovec){ .iov_base = rep, .iov_len = sizeof(rep) };
			if (send_full(c->fd, iov, 1))
				break;
			continue;
		}
		if (recv_full(c->fd, req + PEER_REQ_V1_LEN, sizeof(req) - PEER_REQ_V1_LEN, REQ_MS))
			break;
		rc = peer_req_decode(key, req, &m);
		if (rc) {
			log_once(pd, &c->from, rc == -EACCES ? "wrong key (bad MAC)"
							     : "not the stagefs peer protocol");
			break;
		}
		if (!peer_replay_check(pd->replay, &m, peer_wall_ms())) {
			log_once(pd, &c->from,
				 "replayed, or stamped more than 30 s off this node's clock");
			break;
		}
		if (m.op != PEER_OP_GET || m.len == 0 || m.len > 64 * MiB)
			status = EINVAL;
		else if (!chunk_find(pd, &m.id, &m.loc, &e))
			status = ENOENT;	/* not there in a dataset mounted here */
		if (!status && bufcap < m.len) {
			free(buf);
			bufcap = 0;
			buf = malloc(m.len);
			if (!buf)
				status = ENOMEM;
			else
				bufcap = m.len;
		}
		if (!status) {
			rc = serve_read(pd, &e, buf, m.len);
			status = rc ? (rc == -ENOENT || rc == -EINVAL ? -rc : EIO) : 0;
		}
		if (!status && pd->corrupt)
			((unsigned char *)buf)[m.len / 2] ^= 0x5a;	/* tests only */
		peer_rep_encode(status, m.len, rep);
		iov[0] = (struct iovec){ .iov_base = rep, .iov_len = sizeof(rep) };
		iov[1] = (struct iovec){ .iov_base = buf, .iov_len = status ? 0 : m.len };
		if (!status)
			pace(pd, m.len);
		if (send_full(c->fd, iov, status ? 1 : 2))
			break;
		if (!status)
			peer_note_served(pd->fs->peers, &c->from, m.len);
	}
	free(buf);
	conn_end(c);
	return NULL;
}

/* ---- the listener ---- */

static void *accept_main(void *arg)
{
	struct peerd *pd = arg;

	for (;;) {
		struct pollfd p[2] = {
			{ .fd = pd->lfd, .events = POLLIN },
			{ .fd = pd->stop_fd, .events = POLLIN },
		};
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		pthread_attr_t at;
		pthread_t t;
		struct conn *c;
		int fd, one = 1, slot = -1;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_err("peer server: poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		fd = accept4(pd->lfd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				usleep(10000);	/* EMFILE: let some close */
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		pthread_mutex_lock(&pd->lock);
		if (pd->nconns < PEERD_MAX_CONNS && !pd->stopping) {
			unsigned int same = 0;

			/* one address (a member asks on at most PEER_CONNS) cannot take them all */
			for (int i = 0; i < PEERD_MAX_CONNS; i++) {
				if (pd->conn_fd[i] < 0) {
					if (slot < 0)
						slot = i;
				} else if (pd->conn_src[i] == from.sin_addr.s_addr) {
					same++;
				}
			}
			if (same >= PER_SOURCE)
				slot = -1;
		}
		if (slot >= 0) {
			pd->conn_fd[slot] = fd;
			pd->conn_src[slot] = from.sin_addr.s_addr;
			pd->nconns++;
		}
		pthread_mutex_unlock(&pd->lock);
		if (slot < 0) {
			close(fd);	/* the asker falls back; its back-off spares us */
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			slot_release(pd, slot, fd);
			continue;
		}
		c->pd = pd;
		c->fd = fd;
		c->slot = slot;
		c->from = from;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, conn_main, c))
			conn_end(c);
		pthread_attr_destroy(&at);
	}
	return NULL;
}

int peerd_start(struct sfs *fs, char *err, size_t errlen)
{
	const struct sockaddr_in *me;
	struct peerd *pd;
	int one = 1, rc;

	if (!fs->peers)
		return 0;
	me = peer_group_self(fs->peers);
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	pd->fs = fs;
	pd->lfd = pd->stop_fd = -1;
	pd->corrupt = fs->cfg.peer_test_corrupt;
	if (fs->cfg.peer_serve_max_mbps)
		pd->ns_per_byte_x1000 = 1000000 / fs->cfg.peer_serve_max_mbps;	/* 1e9/1e6 * 1000 */
	for (int i = 0; i < PEERD_MAX_CONNS; i++)
		pd->conn_fd[i] = -1;
	pthread_mutex_init(&pd->lock, NULL);
	pthread_cond_init(&pd->idle, NULL);
	pthread_mutex_init(&pd->pace_lock, NULL);
	pthread_mutex_init(&pd->log_lock, NULL);
	rc = peer_replay_create(&pd->replay);
	if (rc)
		goto out_free;
	pd->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	pd->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (pd->lfd < 0 || pd->stop_fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "peer server: %s", strerror(-rc));
		goto out_free;
	}
	setsockopt(pd->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(pd->lfd, (const struct sockaddr *)me, sizeof(*me)) < 0 ||
	    listen(pd->lfd, 128) < 0) {
		char a[INET_ADDRSTRLEN];

		rc = -errno;
		inet_ntop(AF_INET, &me->sin_addr, a, sizeof(a));
		snprintf(err, errlen, "peer_listen %s:%u: %s", a, (unsigned)ntohs(me->sin_port),
			 strerror(-rc));
		goto out_free;
	}
	rc = -pthread_create(&pd->accept_thread, NULL, accept_main, pd);
	if (rc) {
		snprintf(err, errlen, "peer server thread: %s", strerror(-rc));
		goto out_free;
	}
	pd->started = true;
	fs->peerd = pd;
	log_notice("peer server: listening on %s:%u",
		   inet_ntoa(me->sin_addr), (unsigned)ntohs(me->sin_port));
	return 0;

out_free:
	if (pd->lfd >= 0)
		close(pd->lfd);
	if (pd->stop_fd >= 0)
		close(pd->stop_fd);
	peer_replay_destroy(pd->replay);
	free(pd);
	return rc;
}

void peerd_stop(struct sfs *fs)
{
	struct peerd *pd = fs->peerd;
	uint64_t one = 1;

	if (!pd)
		return;
	if (write(pd->stop_fd, &one, sizeof(one)) < 0)
		log_warn("peer server: eventfd: %s", strerror(errno));
	pthread_join(pd->accept_thread, NULL);
	pthread_mutex_lock(&pd->lock);
	pd->stopping = true;
	for (int i = 0; i < PEERD_MAX_CONNS; i++)
		if (pd->conn_fd[i] >= 0)
			shutdown(pd->conn_fd[i], SHUT_RDWR);
	/* a connection in a backend read ends within rados_timeout */
	while (pd->nconns)
		pthread_cond_wait(&pd->idle, &pd->lock);
	pthread_mutex_unlock(&pd->lock);
	close(pd->lfd);
	close(pd->stop_fd);
	peer_replay_destroy(pd->replay);
	pthread_mutex_destroy(&pd->lock);
	pthread_cond_destroy(&pd->idle);
	pthread_mutex_destroy(&pd->pace_lock);
	pthread_mutex_destroy(&pd->log_lock);
	free(pd);
	fs->peerd = NULL;
}
