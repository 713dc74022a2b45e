/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer: see peer.h.
 *
 * This file: the membership (the settings and peers_file parsed, slots
 * kept and reclaimed), the owner of a chunk, back-offs, counters, create
 * and destroy; the client thread is peer_client.c, what both share
 * peer_i.h.
 */
#include "peer_i.h"

#include "log.h"
#include "safepath.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define LIST_MAX_BYTES	65536	/* a peers_file */

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
	peer_poke(pg);
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

/* ---- the API ---- */

int peer_fetch_start(struct peer_group *pg, const struct sfs_id *key,
		     const struct sfs_id *id, const struct peer_loc *loc, void *buf,
		     size_t len, void (*done)(void *arg, int res), void *arg)
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
	owner = pg->stopping ? NULL : owner_locked(pg, key, now);
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
	peer_poke(pg);
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

/* Free @pg and what it holds, its client thread not running (never started, or joined). */
static void pg_free(struct peer_group *pg)
{
	if (pg->efd >= 0)
		close(pg->efd);
	if (pg->epfd >= 0)
		close(pg->epfd);
	for (unsigned int i = 0; i < pg->np; i++) {
		struct peer *p = pg->p[i];

		while (p->nidle) {	/* none once the thread has ended */
			p->nidle--;
			peer_conn_close(p->idle[p->nidle], p->idle_ssl[p->nidle]);
		}
		free(p);
	}
	peer_tls_destroy(pg->tls);
	peer_key_wipe(&pg->key);
	pthread_mutex_destroy(&pg->lock);
	pthread_mutex_destroy(&pg->reload_lock);
	pthread_cond_destroy(&pg->reclaimed);
	free(pg->peers);
	free(pg->peers_file);
	free(pg);
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
	rc = -pthread_create(&pg->thread, NULL, peer_client_main, pg);
	if (rc) {
		snprintf(err, errlen, "peer client thread: %s", strerror(-rc));
		goto out_free;
	}
	*out = pg;
	return 0;

out_free:
	pg_free(pg);
	return rc;
}

void peer_group_destroy(struct peer_group *pg)
{
	if (!pg)
		return;
	pthread_mutex_lock(&pg->lock);
	pg->stopping = true;
	pthread_mutex_unlock(&pg->lock);
	peer_poke(pg);
	pthread_join(pg->thread, NULL);	/* it closed the idle connections */
	pg_free(pg);
}
