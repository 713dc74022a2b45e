/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_client: the client thread of a peer group (peer_i.h), which asks
 * chunks of their owners.
 *
 * The client thread's state machine, one struct preq per chunk asked
 * (STYLE #7), its connection inside it while it has one:
 *
 *   queued      waiting for one of the peer's PEER_CONNS connections
 *   connecting  a new non-blocking connect (EPOLLOUT), or an idle
 *               connection taken (checked with MSG_PEEK: not closed)
 *   handshake   TLS 1.3 with the group's key (src/peer/peer_tls.h): both
 *               ends prove it before the request is sent
 *   send        the 48-byte request (EPOLLOUT while it does not fit)
 *   header      the 16-byte reply header (EPOLLIN)
 *   data        the chunk, straight into the caller's buffer (EPOLLIN)
 *
 * then hashed, and reported with the connection kept idle for the next
 * request to that peer; any failure closes the connection.  OpenSSL is
 * driven non-blocking: each state calls SSL_* until it would block and
 * waits for what it asked (peer_tls_want), reading until it would block
 * so that bytes OpenSSL holds in a record are never left behind a
 * quiet socket.  The deadline
 * is checked on every loop turn (epoll_wait sleeps at most until the
 * nearest one), so no request is reported later than its deadline plus a
 * loop turn.
 */
#include "peer_i.h"

#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>

/* an idle connection older than this is closed, not reused: well before
 * the server's 60 s, so that a request never races the server's close */
#define IDLE_KEEP_MS	20000
#define BACKOFF_MIN_MS	1000
#define BACKOFF_MAX_MS	30000

/* lines a peer (or an impostor at its address) can cause */
static struct log_ratelimit handshake_rl = LOG_RATELIMIT_INIT(10000, 5);
static struct log_ratelimit bad_bytes_rl = LOG_RATELIMIT_INIT(10000, 5);

/* ---- back-offs, and waking the thread ---- */

void peer_poke(struct peer_group *pg)
{
	uint64_t one = 1;

	if (write(pg->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("peer: eventfd: %s", strerror(errno));
}

/*
 * @p failed a request.  Requests that were in flight when its back-off
 * began fail too: only a failure after a back-off ended (the peer was
 * tried again) makes the next one longer.
 */
void peer_backoff(struct peer_group *pg, struct peer *p, int err)
{
	uint64_t now = now_ms();
	unsigned int ms, fails;

	pthread_mutex_lock(&pg->lock);
	if (p->backoff_until > now) {
		pthread_mutex_unlock(&pg->lock);
		return;
	}
	fails = ++p->fails;
	ms = fails > 6 ? BACKOFF_MAX_MS : MIN(BACKOFF_MIN_MS << (fails - 1), BACKOFF_MAX_MS);
	p->backoff_until = now + ms;
	pthread_mutex_unlock(&pg->lock);
	if (fails == 1)
		log_warn("peer %s: %s; its chunks come from the backend for %u ms",
			 p->addr, strerror(-err), ms);
	else
		log_info("peer %s: %s again; skipped for %u ms", p->addr, strerror(-err), ms);
}

void peer_recovered(struct peer_group *pg, struct peer *p)
{
	bool was;

	pthread_mutex_lock(&pg->lock);
	was = p->fails != 0;
	p->fails = 0;
	pthread_mutex_unlock(&pg->lock);
	if (was)
		log_notice("peer %s: answering again", p->addr);
}



/* ---- requests ---- */

static void rq_start(struct peer_group *pg, struct preq *rq);

void peer_conn_close(int fd, SSL *ssl)
{
	if (ssl) {
		if (SSL_is_init_finished(ssl))
			SSL_shutdown(ssl);	/* non-blocking: best effort */
		SSL_free(ssl);
		ERR_clear_error();
	}
	close(fd);
}

/* Release @rq's connection (kept idle if @keep) and start the next waiting. */
static void conn_release(struct peer_group *pg, struct preq *rq, bool keep)
{
	struct peer *p = rq->p;

	if (rq->fd >= 0) {
		epoll_ctl(pg->epfd, EPOLL_CTL_DEL, rq->fd, NULL);
		if (keep && rq->ssl && p->nidle < PEER_CONNS) {
			p->idle_since[p->nidle] = now_ms();
			p->idle_ssl[p->nidle] = rq->ssl;
			p->idle[p->nidle++] = rq->fd;
		} else {
			peer_conn_close(rq->fd, rq->ssl);
		}
		rq->fd = -1;
		rq->ssl = NULL;
	}
	if (rq->st != RQ_QUEUED && rq->st != RQ_NEW)
		p->active--;
	else if (rq->st == RQ_QUEUED)
		list_del(&rq->qnode);
	while (p->active < PEER_CONNS && !list_empty(&p->queue)) {
		struct preq *next = list_entry(list_pop(&p->queue), struct preq, qnode);

		next->st = RQ_NEW;
		rq_start(pg, next);
	}
}

/*
 * End @rq: @res is its length (verified) or -errno.  @peer_fault: the
 * peer is to blame (back-off).  Reports it and frees it.
 */
static void rq_end(struct peer_group *pg, struct preq *rq, int res, bool peer_fault)
{
	struct peer *p = rq->p;

	list_del(&rq->node);
	/* a whole reply read (a chunk, or a refusal of one) leaves the connection clean */
	conn_release(pg, rq, res >= 0 || (res == -ENOENT && rq->st == RQ_HDR));
	if (res >= 0) {
		atomic_fetch_add(&p->hits, 1);
		atomic_fetch_add(&p->bytes_in, rq->len);
		peer_recovered(pg, p);
	} else {
		atomic_fetch_add(&p->fallbacks, 1);
		if (peer_fault) {
			atomic_fetch_add(&p->failures, 1);
			peer_backoff(pg, p, res);
		}
	}
	rq->done(rq->arg, res);
	free(rq);
}

static int watch(struct peer_group *pg, struct preq *rq, uint32_t events, bool add)
{
	struct epoll_event ev = { .events = events, .data.ptr = rq };

	if (!add && rq->events == events)
		return 0;
	if (epoll_ctl(pg->epfd, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, rq->fd, &ev) < 0)
		return -errno;
	rq->events = events;
	return 0;
}

/*
 * After an SSL call returned @ret <= 0: wait for what OpenSSL asks (0) or
 * end @rq as failed (-errno, already ended).
 */
static int rq_want(struct peer_group *pg, struct preq *rq, int ret)
{
	short want;
	int rc = peer_tls_want(rq->ssl, ret, &want);

	if (!rc)
		rc = watch(pg, rq, want == POLLOUT ? EPOLLOUT : EPOLLIN, false);
	if (rc)
		rq_end(pg, rq, rc, true);
	return rc;
}

/* An idle connection to @p still open (its TLS in *@ssl), or -1. */
static int idle_take(struct peer *p, SSL **ssl)
{
	uint64_t now = now_ms();

	while (p->nidle) {
		int fd = p->idle[--p->nidle];
		char c;
		ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

		*ssl = p->idle_ssl[p->nidle];
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    p->idle_since[p->nidle] + IDLE_KEEP_MS > now)
			return fd;
		/* closed by the peer, or a close_notify, or what we did not ask */
		peer_conn_close(fd, *ssl);
	}
	*ssl = NULL;
	return -1;
}

static int conn_new(struct peer_group *pg, struct peer *p)
{
	struct sockaddr_in me = pg->self->sa;
	int one = 1, fd;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* from our own address: the server tells members apart by it */
	me.sin_port = 0;
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	if (connect(fd, (struct sockaddr *)&p->sa, sizeof(p->sa)) < 0 &&
	    errno != EINPROGRESS) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

static void rq_start(struct peer_group *pg, struct preq *rq)
{
	struct peer *p = rq->p;
	int fd, rc;

	if (p->active >= PEER_CONNS) {
		rq->st = RQ_QUEUED;
		list_add_tail(&p->queue, &rq->qnode);
		return;
	}
	p->active++;
	peer_req_encode(&rq->id, (uint32_t)rq->len, &rq->loc, rq->msg);
	fd = idle_take(p, &rq->ssl);
	rq->st = fd >= 0 ? RQ_SEND : RQ_CONNECTING;
	if (fd < 0)
		fd = conn_new(pg, p);
	if (fd < 0) {
		rq->st = RQ_CONNECTING;
		rq_end(pg, rq, fd, true);
		return;
	}
	rq->fd = fd;
	rc = watch(pg, rq, EPOLLOUT, true);
	if (rc)
		rq_end(pg, rq, rc, false);
}

/* Read what has come for @rq (until OpenSSL would block); ends it when done or failed. */
static void rq_readable(struct peer_group *pg, struct preq *rq)
{
	for (;;) {
		int r;

		ERR_clear_error();
		if (rq->st == RQ_HDR)
			r = SSL_read(rq->ssl, rq->hdr + rq->got, (int)(PEER_REP_LEN - rq->got));
		else
			r = SSL_read(rq->ssl, (char *)rq->buf + rq->got,
				     (int)MIN(rq->len - rq->got, (size_t)INT_MAX));
		if (r <= 0) {
			rq_want(pg, rq, r);
			return;
		}
		rq->got += (size_t)r;
		if (rq->st == RQ_HDR && rq->got == PEER_REP_LEN) {
			int status;
			uint32_t len;

			if (peer_rep_decode(rq->hdr, &status, &len)) {
				rq_end(pg, rq, -EBADMSG, true);
				return;
			}
			if (status) {
				log_debug("peer %s: refused a chunk: %s", rq->p->addr,
					  strerror(status));
				/*
				 * ENOENT: it has not mounted that dataset; it serves
				 * others, so no back-off (the connection is fine too)
				 */
				rq_end(pg, rq, -status, status != ENOENT);
				return;
			}
			if (len != rq->len) {
				rq_end(pg, rq, -EBADMSG, true);
				return;
			}
			rq->st = RQ_DATA;
			rq->got = 0;
		} else if (rq->st == RQ_DATA && rq->got == rq->len) {
			struct sfs_id got;

			sfs_id_of(rq->buf, rq->len, &got);
			if (!sfs_id_eq(&got, &rq->id)) {
				char hex[SFS_ID_HEX_LEN + 1];

				sfs_id_hex(&rq->id, hex);
				atomic_fetch_add(&rq->p->corrupt, 1);
				log_limited(&bad_bytes_rl, LOG_ERR,
					    "peer %s sent wrong bytes for chunk %s: dropped, read from the backend",
					    rq->p->addr, hex);
				rq_end(pg, rq, -EIO, true);
				return;
			}
			rq_end(pg, rq, (int)rq->len, false);
			return;
		}
	}
}

/* Drive @rq's connection, handshake and request as far as they go now. */
static void rq_event(struct peer_group *pg, struct preq *rq, uint32_t ev)
{
	int r;

	if (rq->st == RQ_CONNECTING) {
		int e = 0;
		socklen_t l = sizeof(e);

		if (getsockopt(rq->fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
			e = errno;
		if (e) {
			rq_end(pg, rq, -e, true);
			return;
		}
		rq->ssl = peer_tls_new(pg->tls, rq->fd);
		if (!rq->ssl) {
			rq_end(pg, rq, -ENOMEM, false);
			return;
		}
		rq->st = RQ_HANDSHAKE;
	}
	if (rq->st == RQ_HANDSHAKE) {
		ERR_clear_error();
		r = SSL_connect(rq->ssl);
		if (r <= 0) {
			short want;
			int rc = peer_tls_want(rq->ssl, r, &want);

			if (!rc) {
				if (watch(pg, rq, want == POLLOUT ? EPOLLOUT : EPOLLIN, false))
					rq_end(pg, rq, -EIO, false);
				return;
			}
			log_limited(&handshake_rl, LOG_WARNING,
				    "peer %s: no TLS session with the group's key (%s): another key, an older stagefs, or not a stagefs peer; reading from the backend",
				    rq->p->addr, strerror(-rc));
			rq_end(pg, rq, -ECONNREFUSED, true);
			return;
		}
		if (!peer_tls_authenticated(rq->ssl)) {
			log_limited(&handshake_rl, LOG_WARNING,
				    "peer %s: a TLS session not keyed by the group's key: closed unused",
				    rq->p->addr);
			rq_end(pg, rq, -EACCES, true);
			return;
		}
		rq->st = RQ_SEND;
	}
	if (rq->st == RQ_SEND) {
		ERR_clear_error();
		r = SSL_write(rq->ssl, rq->msg + rq->sent, (int)(PEER_REQ_LEN - rq->sent));
		if (r <= 0) {
			rq_want(pg, rq, r);
			return;
		}
		rq->sent += (size_t)r;
		if (rq->sent < PEER_REQ_LEN)
			return;
		rq->st = RQ_HDR;
		rq->got = 0;
		if (watch(pg, rq, EPOLLIN, false))
			rq_end(pg, rq, -EIO, false);
		return;
	}
	(void)ev;
	rq_readable(pg, rq);
}

/*
 * On the client thread, once the inbox's requests are started (so every
 * request of a slot is counted in its active or queue, or still waits in
 * the inbox): free the slots a reload asked for (reclaim_wait_locked).
 */
static void reclaim(struct peer_group *pg)
{
	struct peer *gone[PEER_MAX];
	unsigned int ngone = 0, kept = 0;
	struct list_node *n;

	pthread_mutex_lock(&pg->lock);
	if (!pg->reclaim) {
		pthread_mutex_unlock(&pg->lock);
		return;
	}
	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];
		bool used = p->self || p->member || p->keep || p->active || !list_empty(&p->queue);

		for (n = pg->inbox.next; n != &pg->inbox && !used; n = n->next)
			used = list_entry(n, struct preq, node)->p == p;
		if (used)
			pg->p[kept++] = p;
		else
			gone[ngone++] = p;
	}
	pg->np = kept;
	pg->reclaim = false;
	pthread_cond_broadcast(&pg->reclaimed);
	pthread_mutex_unlock(&pg->lock);
	for (unsigned int i = 0; i < ngone; i++) {
		while (gone[i]->nidle) {
			gone[i]->nidle--;
			peer_conn_close(gone[i]->idle[gone[i]->nidle], gone[i]->idle_ssl[gone[i]->nidle]);
		}
		free(gone[i]);
	}
	if (ngone)
		log_info("peer group: forgot %u former members", ngone);
}

/* End every request past its deadline; the time to the nearest other, ms. */
static int expire(struct peer_group *pg)
{
	uint64_t now = now_ms(), next = UINT64_MAX;
	struct list_node *n, *nx;

	for (n = pg->live.next; n != &pg->live; n = nx) {
		struct preq *rq = list_entry(n, struct preq, node);

		nx = n->next;
		if (rq->deadline <= now) {
			/* a request that never got a connection is not the peer's fault */
			bool fault = rq->st != RQ_QUEUED;

			log_debug("peer %s: no answer within %" PRIu64 " ms", rq->p->addr,
				  pg->timeout_ms);
			rq_end(pg, rq, -ETIMEDOUT, fault);
			nx = pg->live.next;	/* rq_end may have started queued ones */
		} else if (rq->deadline < next) {
			next = rq->deadline;
		}
	}
	return next == UINT64_MAX ? -1 : (int)MIN(next - now + 1, 60000);
}

void *peer_client_main(void *arg)
{
	struct peer_group *pg = arg;
	struct epoll_event ev[64];
	bool stopping = false;

	peer_tls_thread_init();

	for (;;) {
		struct list_node got;
		int timeout = expire(pg), n;

		if (stopping && list_empty(&pg->live))
			break;
		n = epoll_wait(pg->epfd, ev, 64, timeout);
		for (int i = 0; i < n; i++) {
			if (!ev[i].data.ptr) {
				uint64_t v;

				if (read(pg->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					log_warn("peer: eventfd: %s", strerror(errno));
				continue;
			}
			rq_event(pg, ev[i].data.ptr, ev[i].events);
		}
		list_init(&got);
		pthread_mutex_lock(&pg->lock);
		list_splice_tail(&got, &pg->inbox);
		stopping = pg->stopping;
		pthread_mutex_unlock(&pg->lock);
		while (!list_empty(&got)) {
			struct preq *rq = list_entry(list_pop(&got), struct preq, node);

			list_add_tail(&pg->live, &rq->node);
			rq_start(pg, rq);
		}
		reclaim(pg);
		if (stopping) {
			while (!list_empty(&pg->live))
				rq_end(pg, list_entry(list_first(&pg->live), struct preq, node),
				       -ESHUTDOWN, false);
		}
	}
	/* the idle connections' close_notify is written here, SIGPIPE blocked */
	pthread_mutex_lock(&pg->lock);
	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];

		while (p->nidle) {
			p->nidle--;
			peer_conn_close(p->idle[p->nidle], p->idle_ssl[p->nidle]);
		}
	}
	pthread_mutex_unlock(&pg->lock);
	return NULL;
}
