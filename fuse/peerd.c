/* SPDX-License-Identifier: Apache-2.0 */
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
 * Connection slots (struct slot), in three pools, so that no one without
 * the key can take what members need:
 *   pending, members   a connection from a member's address, before its
 *                      TLS handshake is done: PENDING_MEMBERS in all,
 *                      PEER_CONNS from one address (what one member asks
 *                      on at once)
 *   pending, others    from any other address: PENDING_OTHERS in all,
 *                      PENDING_OTHER_PER_SOURCE from one
 *   authenticated      after the handshake proved the group key:
 *                      PEERD_MAX_CONNS in all, PER_SOURCE from one
 * A pending connection has HANDSHAKE_MS from its accept to an
 * authenticated session, however slowly its bytes come; then it is
 * closed.  Only a key holder ever holds an authenticated slot.
 *
 * Lock order: pd->lock (the slots), pd->pace_lock are leaves; the cache's
 * locks and the group's (peer_group_member) are taken outside them.
 */
#include "peerd.h"

#include "daemon.h"
#include "packentry.h"
#include "log.h"
#include "manifest/manifest.h"
#include "peer/peer.h"
#include "peer/peer_proto.h"
#include "peer/peer_tls.h"
#include "prefetch/prefetch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
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
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>

#define IDLE_MS		60000	/* a connection with no request this long is closed */
#define REQ_MS		5000	/* a request's 48 bytes, once begun */
#define SEND_MS		30000	/* a reply, once begun */
#define HANDSHAKE_MS	2000	/* from accept to an authenticated session */
#define SERVE_NICE	10
#define PER_SOURCE	(2 * PEER_CONNS)	/* authenticated connections from one address */
#define PENDING_MEMBERS	128	/* handshakes from members' addresses at once */
#define PENDING_OTHERS	64	/* handshakes from other addresses at once */
#define PENDING_OTHER_PER_SOURCE PEER_CONNS	/* a member not in our list yet (a reload) */
#define NSLOTS		(PEERD_MAX_CONNS + PENDING_MEMBERS + PENDING_OTHERS)
#define BIND_RETRY_MIN_MS 1000
#define BIND_RETRY_MAX_MS 30000

/* A chunk of a dataset mounted here. */
struct ient {
	uint64_t ino;
	uint32_t ds;
	uint32_t idx;
};

enum slot_state { SLOT_FREE, SLOT_PENDING, SLOT_AUTH };

struct slot {
	int fd;
	uint32_t src;			/* source address, network order */
	enum slot_state state;
	bool member;			/* from a member's address (its pending pool) */
};

struct peerd {
	struct sfs *fs;
	struct peer_tls *tls;		/* the server side's (src/peer/peer_tls.h) */
	int lfd;			/* listening socket; -1 until bound */
	int stop_fd;			/* eventfd: stop */
	struct sockaddr_in me;		/* peer_listen */
	pthread_t accept_thread;

	pthread_mutex_t lock;
	pthread_cond_t idle;		/* nconns dropped to 0 */
	unsigned int nconns;		/* slots used; protected by lock */
	unsigned int nauth, npend_member, npend_other;	/* protected by lock */
	struct slot slot[NSLOTS];	/* protected by lock */
	bool stopping;			/* protected by lock */

	pthread_mutex_t pace_lock;
	uint64_t pace_ns;		/* when the next reply may start; protected by pace_lock */
	uint64_t ns_per_byte_x1000;	/* 0: no cap */

	/* what anyone who reaches the port can make us log: a few a minute */
	struct log_ratelimit rl_refused, rl_full, rl_legacy;
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

struct conn {
	struct peerd *pd;
	int fd;
	int slot;
	SSL *ssl;
	struct sockaddr_in from;
	char ip[INET_ADDRSTRLEN];
};

/* A refusal of @c: counted for its member, logged within a rate limit. */
static void refused(struct conn *c, struct log_ratelimit *rl, const char *why)
{
	peer_note_refused(c->pd->fs->peers, &c->from);
	log_limited(rl, LOG_WARNING, "peer server: refused %s: %s", c->ip, why);
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

/* Wait, until @deadline (ms), for what OpenSSL asked after @ret.  0 or -errno. */
static int tls_wait(struct conn *c, int ret, uint64_t deadline)
{
	short ev;
	uint64_t now;
	int rc = peer_tls_want(c->ssl, ret, &ev);

	if (rc)
		return rc;
	now = now_ms();
	if (now >= deadline)
		return -ETIMEDOUT;
	return wait_fd(c->fd, ev, (int)MIN(deadline - now, (uint64_t)INT_MAX));
}

/*
 * Read a request: its first byte within @first_ms (an idle connection),
 * all of it within REQ_MS of that.  0 or -errno.
 */
static int tls_recv_full(struct conn *c, void *buf, size_t len, int first_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)first_ms;
	size_t got = 0;

	while (got < len) {
		int r, rc;

		ERR_clear_error();
		r = SSL_read(c->ssl, (char *)buf + got, (int)(len - got));
		if (r > 0) {
			if (!got)
				deadline = now_ms() + REQ_MS;
			got += (size_t)r;
			continue;
		}
		rc = tls_wait(c, r, deadline);
		if (rc)
			return rc;
	}
	return 0;
}

static int tls_send_full(struct conn *c, const void *buf, size_t len)
{
	uint64_t deadline = now_ms() + SEND_MS;
	size_t sent = 0;

	while (sent < len) {
		int r, rc;

		ERR_clear_error();
		r = SSL_write(c->ssl, (const char *)buf + sent,
			      (int)MIN(len - sent, (size_t)INT_MAX));
		if (r > 0) {
			sent += (size_t)r;
			continue;
		}
		rc = tls_wait(c, r, deadline);
		if (rc)
			return rc;
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

/* A pack this node owns, read whole for a peer (struct cache_source's arg). */
struct serve_pack {
	struct sfs *fs;
	struct backend *be;
	uint32_t pack;
	struct manifest_pack pk;
	struct cfile *pcf;
};

/*
 * The cache's source for a pack's entry: the whole pack, in one backend
 * read, checked (the pack against its id, each file against its own).
 */
static int serve_pack_fetch(void *arg, uint32_t idx, void *buf, size_t len)
{
	struct serve_pack *p = arg;
	int r;

	if (idx || len != p->pk.size)
		return -EINVAL;
	pf_demand_begin(p->fs->pf, len);
	daemon_fetch_begin(p->fs, p->pcf, 0);
	r = p->be->ops->read_pack(p->be, p->pack, 0, len, buf);
	if (r == (int)len && packentry_check(p->be, p->pack, &p->pk, buf) < 0)
		r = -EIO;
	daemon_fetch_end(p->fs, p->pcf, 0, r, false);
	pf_demand_end(p->fs->pf);
	return r;
}

/*
 * Small file @s->attr, if stored in a pack: its bytes from the pack's
 * entry, which this node (the pack's owner) fills whole at the first file
 * a peer asks for, or joins the fill in flight.  -ENOENT when not packed
 * or the pack could not be read.
 */
static int serve_packed(struct serve_src *s, void *buf, size_t len)
{
	struct serve_pack p = { .fs = s->fs, .be = s->be };
	struct cache_source src = { .fetch = serve_pack_fetch, .arg = &p, .uid = 0 };
	uint32_t poff;
	ssize_t n;

	if (!s->be->ops->read_pack ||
	    packentry_open(s->fs->cache, s->be, &s->attr, &p.pcf, &poff, &p.pack, &p.pk))
		return -ENOENT;
	n = cache_read(s->fs->cache, p.pcf, poff, buf, len, &src);
	cache_file_put(s->fs->cache, p.pcf);
	/* not read (a dead OSD, a damaged pack): the file alone, then */
	return n == (ssize_t)len ? 0 : -ENOENT;
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
	if (!e->idx) {
		rc = serve_packed(&s, buf, len);
		if (rc != -ENOENT)
			return rc;
	}
	rc = cache_file_get(fs->cache, &s.attr.content, s.attr.size, s.be->chunk_size, &s.cf);
	if (rc)
		return rc;
	n = cache_read(fs->cache, s.cf, (uint64_t)e->idx * s.be->chunk_size, buf, len, &src);
	cache_file_put(fs->cache, s.cf);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EIO;
}


/*
 * A client from before TLS (SFP1, SFP2: their magic where a ClientHello
 * would start): "not here", so that it reads its backend without backing
 * off, and close at once.
 */
static void legacy_refuse(struct conn *c)
{
	unsigned char rep[PEER_REP_LEN], junk[128];

	refused(c, &c->pd->rl_legacy,
		"an older stagefs (clear-text protocol SFP1/SFP2): upgrade the group's nodes together");
	peer_rep_encode(ENOENT, 0, rep);
	(void)!send(c->fd, rep, sizeof(rep), MSG_NOSIGNAL | MSG_DONTWAIT);
	/* what it sent is read, so that the close is a FIN, not a reset */
	while (recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
}

/*
 * From accept to an authenticated session, within HANDSHAKE_MS whatever
 * the client does.  true: @c may be served.
 */
static bool handshake(struct conn *c)
{
	uint64_t deadline = now_ms() + HANDSHAKE_MS;
	unsigned char first[4];
	ssize_t n;
	int r, rc;

	/* TLS begins with a handshake record (22); the old protocols with "SFP" */
	for (;;) {
		uint64_t now = now_ms();

		if (now >= deadline)
			return refused(c, &c->pd->rl_refused, "no handshake within 2 s"), false;
		rc = wait_fd(c->fd, POLLIN, (int)(deadline - now));
		if (rc)
			return refused(c, &c->pd->rl_refused, "no handshake within 2 s"), false;
		n = recv(c->fd, first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
		if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
			return false;	/* closed before a word */
		if (n > 0 && first[0] == 0x16)
			break;
		if (n > 0 && first[0] != 'S')
			return refused(c, &c->pd->rl_refused, "not the stagefs peer protocol (not TLS)"), false;
		if (n == (ssize_t)sizeof(first)) {
			if (peer_req_legacy(first))
				legacy_refuse(c);
			else
				refused(c, &c->pd->rl_refused, "not the stagefs peer protocol");
			return false;
		}
		usleep(1000);	/* a few bytes of a magic: the rest is on its way */
	}
	c->ssl = peer_tls_new(c->pd->tls, c->fd);
	if (!c->ssl)
		return false;
	for (;;) {
		ERR_clear_error();
		r = SSL_accept(c->ssl);
		if (r == 1)
			break;
		rc = tls_wait(c, r, deadline);
		if (rc) {
			refused(c, &c->pd->rl_refused, rc == -ETIMEDOUT ? "no handshake within 2 s"
									 : peer_tls_why(c->ssl));
			return false;
		}
	}
	if (!peer_tls_authenticated(c->ssl)) {
		refused(c, &c->pd->rl_refused, "a TLS session not keyed by the group's key");
		return false;
	}
	return true;
}

/* Move @c's slot from pending to authenticated.  false: no room, close it. */
static bool slot_promote(struct peerd *pd, struct conn *c)
{
	struct slot *sl = &pd->slot[c->slot];
	unsigned int same = 0;
	bool ok;

	pthread_mutex_lock(&pd->lock);
	for (int i = 0; i < NSLOTS; i++)
		if (pd->slot[i].state == SLOT_AUTH && pd->slot[i].src == sl->src)
			same++;
	ok = pd->nauth < PEERD_MAX_CONNS && same < PER_SOURCE;
	if (ok) {
		if (sl->member)
			pd->npend_member--;
		else
			pd->npend_other--;
		sl->state = SLOT_AUTH;
		pd->nauth++;
	}
	pthread_mutex_unlock(&pd->lock);
	return ok;
}

/* Give slot @i back: closes its socket. */
static void slot_free(struct peerd *pd, int i)
{
	struct slot *sl = &pd->slot[i];

	pthread_mutex_lock(&pd->lock);
	if (sl->state == SLOT_AUTH)
		pd->nauth--;
	else if (sl->member)
		pd->npend_member--;
	else
		pd->npend_other--;
	sl->state = SLOT_FREE;
	close(sl->fd);
	sl->fd = -1;
	if (--pd->nconns == 0)
		pthread_cond_broadcast(&pd->idle);
	pthread_mutex_unlock(&pd->lock);
}

/* End @c: a close_notify if it can go, its slot given back, @c freed. */
static void conn_end(struct conn *c)
{
	if (c->ssl) {
		if (SSL_is_init_finished(c->ssl))
			SSL_shutdown(c->ssl);	/* best effort */
		SSL_free(c->ssl);
		ERR_clear_error();
	}
	slot_free(c->pd, c->slot);
	free(c);
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct peerd *pd = c->pd;
	unsigned char *buf = NULL;	/* the reply header, then the chunk */
	size_t bufcap = 0;

	/* below the node's own readers (setpriority on a thread id: this thread) */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), SERVE_NICE);
	peer_tls_thread_init();
	if (!handshake(c))
		goto out;
	if (!slot_promote(pd, c)) {
		log_limited(&pd->rl_full, LOG_WARNING,
			    "peer server: %s: all %d member connections (or %d from it) in use: closed",
			    c->ip, PEERD_MAX_CONNS, PER_SOURCE);
		goto out;
	}
	for (;;) {
		unsigned char req[PEER_REQ_LEN];
		struct peer_req_msg m;
		struct ient e;
		int rc, status = 0;

		if (tls_recv_full(c, req, sizeof(req), IDLE_MS))
			break;
		if (peer_req_decode(req, &m)) {
			/* a key holder that speaks something else: not worth a reply */
			refused(c, &pd->rl_refused, "a request not in the SFP3 format");
			break;
		}
		if (m.op != PEER_OP_GET || m.len == 0 || m.len > 64 * MiB)
			status = EINVAL;
		else if (!chunk_find(pd, &m.id, &m.loc, &e))
			status = ENOENT;	/* not there in a dataset mounted here */
		if (!status && bufcap < PEER_REP_LEN + (size_t)m.len) {
			free(buf);
			bufcap = 0;
			buf = malloc(PEER_REP_LEN + (size_t)m.len);
			if (!buf)
				status = ENOMEM;
			else
				bufcap = PEER_REP_LEN + (size_t)m.len;
		}
		if (!status) {
			rc = serve_read(pd, &e, buf + PEER_REP_LEN, m.len);
			status = rc ? (rc == -ENOENT || rc == -EINVAL ? -rc : EIO) : 0;
		}
		if (!status && pd->corrupt)
			buf[PEER_REP_LEN + m.len / 2] ^= 0x5a;	/* tests only */
		if (status) {
			unsigned char rep[PEER_REP_LEN];

			peer_rep_encode(status, 0, rep);
			if (tls_send_full(c, rep, sizeof(rep)))
				break;
			continue;
		}
		peer_rep_encode(0, m.len, buf);
		pace(pd, m.len);
		if (tls_send_full(c, buf, PEER_REP_LEN + (size_t)m.len))
			break;
		peer_note_served(pd->fs->peers, &c->from, m.len);
	}
out:
	free(buf);
	conn_end(c);
	return NULL;
}

/* ---- the listener ---- */

/*
 * Take a slot for a connection from @from, in the pool its address
 * belongs to (@member).  Returns the slot or -1 (that pool is full).
 */
static int slot_take(struct peerd *pd, int fd, const struct sockaddr_in *from, bool member)
{
	uint32_t src = from->sin_addr.s_addr;
	unsigned int same = 0;
	int slot = -1;

	pthread_mutex_lock(&pd->lock);
	if (pd->stopping)
		goto out;
	for (int i = 0; i < NSLOTS; i++) {
		if (pd->slot[i].state == SLOT_FREE) {
			if (slot < 0)
				slot = i;
		} else if (pd->slot[i].state == SLOT_PENDING && pd->slot[i].src == src) {
			same++;
		}
	}
	if (member ? pd->npend_member >= PENDING_MEMBERS || same >= PEER_CONNS
		   : pd->npend_other >= PENDING_OTHERS || same >= PENDING_OTHER_PER_SOURCE)
		slot = -1;
	if (slot >= 0) {
		pd->slot[slot] = (struct slot){ .fd = fd, .src = src, .state = SLOT_PENDING,
						.member = member };
		if (member)
			pd->npend_member++;
		else
			pd->npend_other++;
		pd->nconns++;
	}
out:
	pthread_mutex_unlock(&pd->lock);
	return slot;
}

/* Bind and listen on peer_listen.  0 or -errno. */
static int listen_try(struct peerd *pd)
{
	int one = 1, fd, rc;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&pd->me, sizeof(pd->me)) < 0 ||
	    listen(fd, 128) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	pd->lfd = fd;
	return 0;
}

static void accept_one(struct peerd *pd)
{
	struct sockaddr_in from;
	socklen_t fl = sizeof(from);
	pthread_attr_t at;
	pthread_t t;
	struct conn *c;
	int fd, one = 1, slot;
	bool member;

	fd = accept4(pd->lfd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0) {
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			usleep(10000);	/* EMFILE: let some close */
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	member = peer_group_member(pd->fs->peers, &from);
	slot = slot_take(pd, fd, &from, member);
	if (slot < 0) {
		char ip[INET_ADDRSTRLEN];

		inet_ntop(AF_INET, &from.sin_addr, ip, sizeof(ip));
		peer_note_refused(pd->fs->peers, &from);
		log_limited(&pd->rl_full, LOG_WARNING,
			    "peer server: %s: too many handshakes under way from %s: closed",
			    ip, member ? "members" : "addresses not in the group");
		close(fd);	/* the asker falls back; its back-off spares us */
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		slot_free(pd, slot);
		return;
	}
	c->pd = pd;
	c->fd = fd;
	c->slot = slot;
	c->from = from;
	inet_ntop(AF_INET, &from.sin_addr, c->ip, sizeof(c->ip));
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &at, conn_main, c))
		conn_end(c);
	pthread_attr_destroy(&at);
}

/*
 * The accept thread.  Until peer_listen is bound (someone holds the port,
 * or the address is not up yet) it tries again, 1 s doubling to 30 s: the
 * node mounts and reads from its backend meanwhile, asking the other
 * members as ever; they skip it while it does not answer.
 */
static void *accept_main(void *arg)
{
	struct peerd *pd = arg;
	int retry_ms = BIND_RETRY_MIN_MS, rc;
	char a[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &pd->me.sin_addr, a, sizeof(a));
	while (pd->lfd < 0) {
		struct pollfd p = { .fd = pd->stop_fd, .events = POLLIN };

		if (poll(&p, 1, retry_ms) > 0)
			return NULL;
		rc = listen_try(pd);
		if (!rc) {
			log_notice("peer server: listening on %s:%u at last", a,
				   (unsigned)ntohs(pd->me.sin_port));
			break;
		}
		retry_ms = MIN(retry_ms * 2, BIND_RETRY_MAX_MS);
	}
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = pd->lfd, .events = POLLIN },
			{ .fd = pd->stop_fd, .events = POLLIN },
		};

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_err("peer server: poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		accept_one(pd);
	}
	return NULL;
}

int peerd_start(struct sfs *fs, char *err, size_t errlen)
{
	struct peerd *pd;
	char a[INET_ADDRSTRLEN];
	int rc;

	if (!fs->peers)
		return 0;
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	pd->fs = fs;
	pd->lfd = pd->stop_fd = -1;
	pd->me = *peer_group_self(fs->peers);
	pd->corrupt = fs->cfg.peer_test_corrupt;
	if (fs->cfg.peer_serve_max_mbps)
		pd->ns_per_byte_x1000 = 1000000 / fs->cfg.peer_serve_max_mbps;	/* 1e9/1e6 * 1000 */
	for (int i = 0; i < NSLOTS; i++)
		pd->slot[i].fd = -1;
	pthread_mutex_init(&pd->lock, NULL);
	pthread_cond_init(&pd->idle, NULL);
	pthread_mutex_init(&pd->pace_lock, NULL);
	log_ratelimit_init(&pd->rl_refused, 10000, 5);
	log_ratelimit_init(&pd->rl_full, 10000, 5);
	log_ratelimit_init(&pd->rl_legacy, 10000, 5);
	rc = peer_tls_create(peer_group_key(fs->peers), true, &pd->tls, err, errlen);
	if (rc)
		goto out_free;
	pd->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (pd->stop_fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "peer server: %s", strerror(-rc));
		goto out_free;
	}
	inet_ntop(AF_INET, &pd->me.sin_addr, a, sizeof(a));
	rc = listen_try(pd);
	if (rc)
		/* the peer tier failing never fails the mount */
		log_warn("peer server: peer_listen %s:%u: %s; serving no peers until it can bind (trying again, 1 s doubling to 30 s)%s",
			 a, (unsigned)ntohs(pd->me.sin_port), strerror(-rc),
			 rc == -EADDRINUSE ? "; if another program holds the port, take a port below 1024, which no user can hold" : "");
	rc = -pthread_create(&pd->accept_thread, NULL, accept_main, pd);
	if (rc) {
		snprintf(err, errlen, "peer server thread: %s", strerror(-rc));
		goto out_free;
	}
	fs->peerd = pd;
	if (pd->lfd >= 0)
		log_notice("peer server: listening on %s:%u (TLS 1.3, the group's key)", a,
			   (unsigned)ntohs(pd->me.sin_port));
	return 0;

out_free:
	if (pd->lfd >= 0)
		close(pd->lfd);
	if (pd->stop_fd >= 0)
		close(pd->stop_fd);
	peer_tls_destroy(pd->tls);
	pthread_mutex_destroy(&pd->lock);
	pthread_cond_destroy(&pd->idle);
	pthread_mutex_destroy(&pd->pace_lock);
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
	for (int i = 0; i < NSLOTS; i++)
		if (pd->slot[i].state != SLOT_FREE)
			shutdown(pd->slot[i].fd, SHUT_RDWR);
	/* a connection in a backend read ends within rados_timeout */
	while (pd->nconns)
		pthread_cond_wait(&pd->idle, &pd->lock);
	pthread_mutex_unlock(&pd->lock);
	if (pd->lfd >= 0)
		close(pd->lfd);
	close(pd->stop_fd);
	peer_tls_destroy(pd->tls);
	pthread_mutex_destroy(&pd->lock);
	pthread_cond_destroy(&pd->idle);
	pthread_mutex_destroy(&pd->pace_lock);
	free(pd);
	fs->peerd = NULL;
}
