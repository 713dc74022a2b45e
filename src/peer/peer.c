/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer: see peer.h.
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
#include "peer.h"

#include "list.h"
#include "log.h"
#include "peer_tls.h"
#include "safepath.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define BACKOFF_MIN_MS	1000
#define BACKOFF_MAX_MS	30000
#define LIST_MAX_BYTES	65536	/* a peers_file */
/* an idle connection older than this is closed, not reused: well before
 * the server's 60 s, so that a request never races the server's close */
#define IDLE_KEEP_MS	20000

/* lines a peer (or an impostor at its address) can cause */
static struct log_ratelimit handshake_rl = LOG_RATELIMIT_INIT(10000, 5);
static struct log_ratelimit bad_bytes_rl = LOG_RATELIMIT_INIT(10000, 5);

struct peer {
	char addr[32];			/* "a.b.c.d:port" */
	struct sockaddr_in sa;
	uint64_t seed;			/* rendezvous: the hash of addr */
	bool self;
	bool member;			/* protected by pg->lock */
	bool keep;			/* a reload names it: not reclaimed; protected by pg->lock */
	bool was_member;		/* before a reclaiming reload; protected by pg->lock */
	uint64_t backoff_until;		/* ms (monotonic); protected by pg->lock */
	unsigned int fails;		/* in a row; protected by pg->lock */
	/* the client thread's own */
	int idle[PEER_CONNS];		/* connections kept for the next request */
	SSL *idle_ssl[PEER_CONNS];	/* their TLS */
	uint64_t idle_since[PEER_CONNS];	/* ms, when each went idle */
	unsigned int nidle;
	unsigned int active;		/* requests holding a connection */
	struct list_node queue;		/* requests waiting for one */
	/* counters: see struct peer_stat */
	_Atomic uint64_t bytes_in, hits, failures, corrupt, fallbacks;
	_Atomic uint64_t bytes_out, served, refused;
};

enum rq_state { RQ_NEW, RQ_QUEUED, RQ_CONNECTING, RQ_HANDSHAKE, RQ_SEND, RQ_HDR, RQ_DATA };

struct preq {
	struct list_node node;		/* pg->inbox, then pg->live */
	struct list_node qnode;		/* p->queue while RQ_QUEUED */
	struct peer *p;
	struct sfs_id id;
	struct peer_loc loc;		/* where our manifest has it */
	void *buf;
	size_t len;
	uint64_t deadline;		/* ms (monotonic) */
	void (*done)(void *arg, int res);
	void *arg;
	enum rq_state st;
	uint32_t events;		/* what epoll waits for on fd */
	int fd;
	SSL *ssl;
	size_t sent, got;
	unsigned char msg[PEER_REQ_LEN];
	unsigned char hdr[PEER_REP_LEN];
};

struct peer_group {
	/* serializes reloads (SIGHUP, the control socket's PEERS reload=1) */
	pthread_mutex_t reload_lock;
	char *peers, *peers_file;	/* the last membership applied; protected by reload_lock */
	pthread_mutex_t lock;
	struct peer *p[PEER_MAX];	/* slots; protected by lock */
	unsigned int np;		/* protected by lock */
	/*
	 * A reload short of slots asks the client thread to free those of
	 * former members with no request left (reclaim_locked) and waits on
	 * reclaimed; both protected by lock.
	 */
	bool reclaim;
	pthread_cond_t reclaimed;
	struct peer *self;
	struct peer_key key;
	struct peer_tls *tls;		/* the client side's */
	uint64_t timeout_ms;
	struct list_node inbox;		/* protected by lock */
	bool stopping;			/* protected by lock */
	int efd, epfd;
	pthread_t thread;
	struct list_node live;		/* the client thread's: queued and active requests */
};

/* ---- membership ---- */

/* "HOST:PORT" or "HOST" (PEER_PORT_DEFAULT), IPv4. */
static int addr_parse(const char *tok, struct sockaddr_in *sa, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;
	char host[256];
	const char *colon = strrchr(tok, ':');
	size_t hlen = colon ? (size_t)(colon - tok) : strlen(tok);
	uint64_t port = PEER_PORT_DEFAULT;
	int rc;

	if (hlen == 0 || hlen >= sizeof(host) ||
	    (colon && (parse_uint(colon + 1, &port) || port == 0 || port > 65535))) {
		snprintf(err, errlen, "'%s': expected HOST:PORT or HOST (port %d)", tok,
			 PEER_PORT_DEFAULT);
		return -EINVAL;
	}
	memcpy(host, tok, hlen);
	host[hlen] = '\0';
	rc = getaddrinfo(host, NULL, &hints, &ai);
	if (rc) {
		snprintf(err, errlen, "'%s': %s", tok, gai_strerror(rc));
		return -EINVAL;
	}
	memcpy(sa, ai->ai_addr, sizeof(*sa));
	sa->sin_port = htons((uint16_t)port);
	freeaddrinfo(ai);
	return 0;
}

static void addr_str(const struct sockaddr_in *sa, char out[32])
{
	char ip[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip));
	snprintf(out, 32, "%s:%u", ip, (unsigned)ntohs(sa->sin_port));
}

static bool addr_eq(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* Append the HOST:PORT tokens of @s (commas, blanks, lines; '#' comments). */
static int list_parse(const char *s, struct sockaddr_in *v, size_t *n,
		      char *err, size_t errlen)
{
	while (s && *s) {
		char tok[300];
		size_t k;

		s += strspn(s, ", \t\r\n");
		if (*s == '#') {
			s += strcspn(s, "\n");
			continue;
		}
		k = strcspn(s, ", \t\r\n#");
		if (!k)
			continue;
		if (k >= sizeof(tok)) {
			snprintf(err, errlen, "peer address too long");
			return -EINVAL;
		}
		if (*n >= PEER_MAX) {
			snprintf(err, errlen, "more than %d peers", PEER_MAX);
			return -E2BIG;
		}
		memcpy(tok, s, k);
		tok[k] = '\0';
		s += k;
		if (addr_parse(tok, &v[*n], err, errlen))
			return -EINVAL;
		(*n)++;
	}
	return 0;
}

static int file_parse(const char *path, struct sockaddr_in *v, size_t *n,
		      char *err, size_t errlen)
{
	struct stat st = { 0 };
	char *buf, e[256], dir[PATH_MAX], why[PATH_MAX + 256];
	ssize_t len;
	int fd, rc;

	/*
	 * The file names whom this node asks for chunks: only root (or the
	 * daemon's user) may write it, as for the key.  A peer named by
	 * someone else could not forge chunks (they are hash-checked) but
	 * would see which chunks this node reads and could stall its misses.
	 * So may its directory, and every one above (issue 27,
	 * src/safepath.h): else another user could swap the file; and the
	 * file itself is opened following no link, and not waiting on a FIFO.
	 */
	if (!safepath_split(path, dir, sizeof(dir))) {
		snprintf(err, errlen, "peers_file %s: names no file", path);
		return -EINVAL;
	}
	rc = safepath_check_dir(dir, why, sizeof(why));
	if (rc == -ENOENT) {
		log_notice("peers_file %s does not exist (yet): no members from it", path);
		return 0;
	}
	if (rc) {
		snprintf(err, errlen, "peers_file %s: %s%s", path,
			 rc == -EPERM ? "its directory is not one only root may change: " : "",
			 why);
		return rc;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0 && errno == ENOENT) {
		/* a scheduler writes it at its first job: none yet is no members yet */
		log_notice("peers_file %s does not exist (yet): no members from it", path);
		return 0;
	}
	if (fd < 0 && errno == ELOOP) {
		snprintf(err, errlen, "peers_file %s: is a symbolic link: the daemon reads "
			 "the file itself only (name the file the link leads to)", path);
		return -EPERM;
	}
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "peers_file %s: %s", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 022)) {
		snprintf(err, errlen, "peers_file %s: must be a regular file owned by root (or "
			 "the daemon's user) and writable by nobody else (owner %u, mode %04o)",
			 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	buf = malloc(LIST_MAX_BYTES + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	len = read(fd, buf, LIST_MAX_BYTES + 1);
	close(fd);
	if (len < 0 || len > LIST_MAX_BYTES) {
		free(buf);
		snprintf(err, errlen, "peers_file %s: %s", path,
			 len < 0 ? "cannot read it" : "larger than 64 KiB");
		return -EINVAL;
	}
	buf[len] = '\0';
	rc = list_parse(buf, v, n, e, sizeof(e));
	if (rc)
		snprintf(err, errlen, "peers_file %s: %s", path, e);
	free(buf);
	return rc;
}

static struct peer *slot_new(const struct sockaddr_in *sa)
{
	struct peer *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->sa = *sa;
	addr_str(sa, p->addr);
	p->seed = XXH3_64bits(p->addr, strlen(p->addr));
	list_init(&p->queue);
	return p;
}

static void poke(struct peer_group *pg);

/*
 * Under pg->lock, from a reload short of slots: have the client thread
 * free the slots that @v (@n addresses, the new membership) does not
 * name and that no request uses, and wait for it (at most 2 s).  Members
 * leaving with this reload stop being members first (they are leaving
 * anyway), so a group can be replaced by another whole; their counters go
 * with their slots.  If the reload still fails, reclaim_undo_locked()
 * gives the group back its members, but for those already freed.
 */
static void reclaim_wait_locked(struct peer_group *pg, const struct sockaddr_in *v, size_t n)
{
	uint64_t until;

	if (pg->efd < 0)
		return;		/* no client thread yet: nothing was ever a member */
	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];

		p->keep = p->self;
		for (size_t j = 0; j < n && !p->keep; j++)
			p->keep = addr_eq(&p->sa, &v[j]);
		p->was_member = p->member;
		if (!p->keep)
			p->member = false;
	}
	pg->reclaim = true;
	poke(pg);
	until = now_ns() + 2000000000ULL;
	while (pg->reclaim && cond_wait_until_ns(&pg->reclaimed, &pg->lock, until) == 0)
		;
}

static void reclaim_undo_locked(struct peer_group *pg)
{
	for (unsigned int i = 0; i < pg->np; i++)
		if (pg->p[i]->was_member)
			pg->p[i]->member = true;
}

/* Under pg->lock: the slot of @sa, or NULL. */
static struct peer *slot_find_locked(struct peer_group *pg, const struct sockaddr_in *sa)
{
	for (unsigned int i = 0; i < pg->np; i++)
		if (addr_eq(&pg->p[i]->sa, sa))
			return pg->p[i];
	return NULL;
}

/* Under pg->reload_lock: see peer_group_reload(). */
static int reload_locked(struct peer_group *pg, const char *peers,
			 const char *peers_file, char *err, size_t errlen)
{
	struct sockaddr_in *v;
	struct peer *fresh[PEER_MAX];
	size_t n = 0, nfresh = 0, members = 0;
	int rc;

	v = calloc(PEER_MAX, sizeof(*v));
	if (!v)
		return -ENOMEM;
	rc = list_parse(peers, v, &n, err, errlen);
	if (!rc && peers_file && *peers_file)
		rc = file_parse(peers_file, v, &n, err, errlen);
	if (rc)
		goto out;
	/* a group larger than a node can hold is refused before anything moves */
	for (size_t i = 0; i < n; i++) {
		bool dup = addr_eq(&v[i], &pg->self->sa);

		for (size_t j = 0; j < i && !dup; j++)
			dup = addr_eq(&v[i], &v[j]);
		members += !dup;
	}
	if (members + 1 > PEER_MAX) {
		snprintf(err, errlen, "more than %d peers", PEER_MAX);
		rc = -E2BIG;
		goto out;
	}
	members = 0;
	/* slots for addresses not known yet: made here, published under the lock */
	for (size_t i = 0; i < n; i++) {
		bool known;

		pthread_mutex_lock(&pg->lock);
		known = slot_find_locked(pg, &v[i]) != NULL;
		pthread_mutex_unlock(&pg->lock);
		for (size_t j = 0; j < nfresh && !known; j++)
			known = addr_eq(&fresh[j]->sa, &v[i]);
		if (known)
			continue;
		fresh[nfresh] = slot_new(&v[i]);
		if (!fresh[nfresh]) {
			while (nfresh)
				free(fresh[--nfresh]);
			snprintf(err, errlen, "out of memory");
			rc = -ENOMEM;
			goto out;
		}
		nfresh++;
	}
	pthread_mutex_lock(&pg->lock);
	if (pg->np + nfresh > PEER_MAX) {
		reclaim_wait_locked(pg, v, n);
		if (pg->np + nfresh > PEER_MAX)
			reclaim_undo_locked(pg);
	}
	if (pg->np + nfresh > PEER_MAX) {
		pthread_mutex_unlock(&pg->lock);
		for (size_t j = 0; j < nfresh; j++)
			free(fresh[j]);
		snprintf(err, errlen, "more than %d peers known, former members still in use; retry",
			 PEER_MAX);
		rc = -E2BIG;
		goto out;
	}
	for (size_t j = 0; j < nfresh; j++)
		pg->p[pg->np++] = fresh[j];
	for (unsigned int i = 0; i < pg->np; i++)
		pg->p[i]->member = pg->p[i]->self;
	for (size_t i = 0; i < n; i++)
		slot_find_locked(pg, &v[i])->member = true;
	for (unsigned int i = 0; i < pg->np; i++)
		members += pg->p[i]->member;
	pthread_mutex_unlock(&pg->lock);
	log_notice("peer group: %zu members (this node %s)", members, pg->self->addr);
out:
	free(v);
	return rc;
}

int peer_group_reload(struct peer_group *pg, const char *peers,
		      const char *peers_file, char *err, size_t errlen)
{
	char *np = strdup(peers ? peers : ""), *nf = strdup(peers_file ? peers_file : "");
	int rc = -ENOMEM;

	if (!np || !nf) {
		snprintf(err, errlen, "out of memory");
		goto out_free;
	}
	pthread_mutex_lock(&pg->reload_lock);
	rc = reload_locked(pg, np, nf, err, errlen);
	if (!rc) {
		/* what a later peer_group_reread() reads again */
		free(pg->peers);
		free(pg->peers_file);
		pg->peers = np;
		pg->peers_file = nf;
		np = nf = NULL;
	}
	pthread_mutex_unlock(&pg->reload_lock);
out_free:
	free(np);
	free(nf);
	return rc;
}

void peer_group_peers_file(struct peer_group *pg, char *out, size_t len)
{
	pthread_mutex_lock(&pg->reload_lock);
	snprintf(out, len, "%s", pg->peers_file ? pg->peers_file : "");
	pthread_mutex_unlock(&pg->reload_lock);
}

int peer_group_reread(struct peer_group *pg, char *err, size_t errlen)
{
	int rc;

	pthread_mutex_lock(&pg->reload_lock);
	rc = reload_locked(pg, pg->peers, pg->peers_file, err, errlen);
	pthread_mutex_unlock(&pg->reload_lock);
	return rc;
}

/* Under pg->lock: the live member that owns @id (highest score). */
static struct peer *owner_locked(struct peer_group *pg, const struct sfs_id *id,
				 uint64_t now)
{
	struct peer *best = NULL;
	uint64_t best_score = 0;
	uint64_t key[2] = { htole64(id->hi), htole64(id->lo) };

	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];
		uint64_t score;

		if (!p->member || (!p->self && p->backoff_until > now))
			continue;
		score = XXH3_64bits_withSeed(key, sizeof(key), p->seed);
		if (!best || score > best_score) {
			best = p;
			best_score = score;
		}
	}
	return best;
}

/* ---- the client thread ---- */

static void poke(struct peer_group *pg)
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
static void backoff(struct peer_group *pg, struct peer *p, int err)
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

static void recovered(struct peer_group *pg, struct peer *p)
{
	bool was;

	pthread_mutex_lock(&pg->lock);
	was = p->fails != 0;
	p->fails = 0;
	pthread_mutex_unlock(&pg->lock);
	if (was)
		log_notice("peer %s: answering again", p->addr);
}

static void rq_start(struct peer_group *pg, struct preq *rq);

/* Close a connection: a close_notify if it can go now, then the socket. */
static void conn_close(int fd, SSL *ssl)
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
			conn_close(rq->fd, rq->ssl);
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
		recovered(pg, p);
	} else {
		atomic_fetch_add(&p->fallbacks, 1);
		if (peer_fault) {
			atomic_fetch_add(&p->failures, 1);
			backoff(pg, p, res);
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
		conn_close(fd, *ssl);
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
			conn_close(gone[i]->idle[gone[i]->nidle], gone[i]->idle_ssl[gone[i]->nidle]);
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

static void *client_main(void *arg)
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
			conn_close(p->idle[p->nidle], p->idle_ssl[p->nidle]);
		}
	}
	pthread_mutex_unlock(&pg->lock);
	return NULL;
}

/* ---- the API ---- */

int peer_fetch_start(struct peer_group *pg, const struct sfs_id *id,
		     const struct peer_loc *loc, void *buf, size_t len,
		     void (*done)(void *arg, int res), void *arg)
{
	struct peer *owner;
	struct preq *rq;
	uint64_t now = now_ms();

	if (len == 0 || len > UINT32_MAX)
		return -EINVAL;
	rq = calloc(1, sizeof(*rq));
	if (!rq)
		return -ENOMEM;
	pthread_mutex_lock(&pg->lock);
	owner = pg->stopping ? NULL : owner_locked(pg, id, now);
	if (!owner || owner->self) {
		pthread_mutex_unlock(&pg->lock);
		free(rq);
		return -ENOENT;
	}
	rq->p = owner;
	rq->id = *id;
	rq->loc = *loc;
	rq->buf = buf;
	rq->len = len;
	rq->deadline = now + pg->timeout_ms;
	rq->done = done;
	rq->arg = arg;
	rq->fd = -1;
	rq->st = RQ_NEW;
	list_add_tail(&pg->inbox, &rq->node);
	pthread_mutex_unlock(&pg->lock);
	poke(pg);
	return 0;
}

bool peer_owns(struct peer_group *pg, const struct sfs_id *id)
{
	struct peer *owner;

	pthread_mutex_lock(&pg->lock);
	owner = owner_locked(pg, id, now_ms());
	pthread_mutex_unlock(&pg->lock);
	return !owner || owner->self;
}

void peer_note_served(struct peer_group *pg, const struct sockaddr_in *from,
		      uint64_t bytes)
{
	pthread_mutex_lock(&pg->lock);
	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];

		if (!p->self && p->sa.sin_addr.s_addr == from->sin_addr.s_addr) {
			atomic_fetch_add(&p->served, 1);
			atomic_fetch_add(&p->bytes_out, bytes);
			break;
		}
	}
	pthread_mutex_unlock(&pg->lock);
}

bool peer_group_member(struct peer_group *pg, const struct sockaddr_in *from)
{
	bool found = false;

	pthread_mutex_lock(&pg->lock);
	for (unsigned int i = 0; i < pg->np && !found; i++)
		found = pg->p[i]->member && pg->p[i]->sa.sin_addr.s_addr == from->sin_addr.s_addr;
	pthread_mutex_unlock(&pg->lock);
	return found;
}

void peer_note_refused(struct peer_group *pg, const struct sockaddr_in *from)
{
	pthread_mutex_lock(&pg->lock);
	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];

		if (!p->self && p->sa.sin_addr.s_addr == from->sin_addr.s_addr) {
			atomic_fetch_add(&p->refused, 1);
			break;
		}
	}
	pthread_mutex_unlock(&pg->lock);
}

int peer_group_stats(struct peer_group *pg, struct peer_stat **out, size_t *n)
{
	struct peer_stat *v;
	uint64_t now = now_ms();

	v = calloc(PEER_MAX, sizeof(*v));
	if (!v)
		return -ENOMEM;
	pthread_mutex_lock(&pg->lock);
	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];

		memcpy(v[i].addr, p->addr, sizeof(v[i].addr));
		v[i].self = p->self;
		v[i].member = p->member;
		v[i].backoff = !p->self && p->backoff_until > now;
		v[i].down = !p->self && p->fails > 0;
		v[i].bytes_in = atomic_load(&p->bytes_in);
		v[i].hits = atomic_load(&p->hits);
		v[i].failures = atomic_load(&p->failures);
		v[i].corrupt = atomic_load(&p->corrupt);
		v[i].fallbacks = atomic_load(&p->fallbacks);
		v[i].bytes_out = atomic_load(&p->bytes_out);
		v[i].served = atomic_load(&p->served);
		v[i].refused = atomic_load(&p->refused);
	}
	*n = pg->np;
	pthread_mutex_unlock(&pg->lock);
	*out = v;
	return 0;
}

const struct peer_key *peer_group_key(const struct peer_group *pg)
{
	return &pg->key;
}

const struct sockaddr_in *peer_group_self(const struct peer_group *pg)
{
	return &pg->self->sa;
}

int peer_group_create(const struct peer_opts *o, struct peer_group **out,
		      char *err, size_t errlen)
{
	struct peer_group *pg;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	struct sockaddr_in sa;
	char e[512];
	int rc;

	if (addr_parse(o->listen, &sa, e, sizeof(e))) {
		snprintf(err, errlen, "peer_listen %s", e);
		return -EINVAL;
	}
	if (!o->key_file || !*o->key_file) {
		snprintf(err, errlen, "peer_listen is set but peer_key_file is not");
		return -EINVAL;
	}
	pg = calloc(1, sizeof(*pg));
	if (!pg)
		return -ENOMEM;
	pthread_mutex_init(&pg->reload_lock, NULL);
	pthread_mutex_init(&pg->lock, NULL);
	cond_init_monotonic(&pg->reclaimed);
	list_init(&pg->inbox);
	list_init(&pg->live);
	pg->efd = pg->epfd = -1;
	pg->timeout_ms = o->timeout_ms;
	rc = peer_key_load(o->key_file, &pg->key, err, errlen);
	if (rc)
		goto out_free;
	rc = peer_tls_create(&pg->key, false, &pg->tls, err, errlen);
	if (rc)
		goto out_free;
	pg->self = slot_new(&sa);
	if (!pg->self) {
		rc = -ENOMEM;
		goto out_free;
	}
	pg->self->self = pg->self->member = true;
	pg->p[pg->np++] = pg->self;
	rc = peer_group_reload(pg, o->peers, o->peers_file, e, sizeof(e));
	if (rc) {
		snprintf(err, errlen, "peers: %s", e);
		goto out_free;
	}
	pg->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pg->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (pg->efd < 0 || pg->epfd < 0 ||
	    epoll_ctl(pg->epfd, EPOLL_CTL_ADD, pg->efd, &ev) < 0) {
		rc = -errno;
		snprintf(err, errlen, "peer client: %s", strerror(-rc));
		goto out_free;
	}
	rc = -pthread_create(&pg->thread, NULL, client_main, pg);
	if (rc) {
		snprintf(err, errlen, "peer client thread: %s", strerror(-rc));
		goto out_free;
	}
	*out = pg;
	return 0;

out_free:
	if (pg->efd >= 0)
		close(pg->efd);
	if (pg->epfd >= 0)
		close(pg->epfd);
	for (unsigned int i = 0; i < pg->np; i++)
		free(pg->p[i]);
	peer_tls_destroy(pg->tls);
	peer_key_wipe(&pg->key);
	pthread_mutex_destroy(&pg->lock);
	pthread_mutex_destroy(&pg->reload_lock);
	pthread_cond_destroy(&pg->reclaimed);
	free(pg->peers);
	free(pg->peers_file);
	free(pg);
	return rc;
}

void peer_group_destroy(struct peer_group *pg)
{
	if (!pg)
		return;
	pthread_mutex_lock(&pg->lock);
	pg->stopping = true;
	pthread_mutex_unlock(&pg->lock);
	poke(pg);
	pthread_join(pg->thread, NULL);
	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];

		while (p->nidle) {
			p->nidle--;
			conn_close(p->idle[p->nidle], p->idle_ssl[p->nidle]);
		}
		free(p);
	}
	peer_tls_destroy(pg->tls);
	close(pg->efd);
	close(pg->epfd);
	peer_key_wipe(&pg->key);
	pthread_mutex_destroy(&pg->lock);
	pthread_mutex_destroy(&pg->reload_lock);
	pthread_cond_destroy(&pg->reclaimed);
	free(pg->peers);
	free(pg->peers_file);
	free(pg);
}
