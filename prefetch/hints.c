/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hints: prefetch files in the order a job announced it will read them.
 *
 * A training job knows its epoch's file order before it starts (a sampler's
 * permutation).  It hands the list to the daemon (HINT on the control
 * socket: `stagefs warmup --order LIST`, tools/stagefs_hints.py), which
 * keeps a hint session: the list, a cursor (the reader's position) and the
 * files queued ahead of it.  At most `window` files and `window_bytes`
 * bytes past the cursor are queued, in list order, at readahead priority:
 * the cache holds what the reader needs next, not the whole epoch.
 *
 * The cursor follows opens: when a process of the session's uid (and, by
 * scope, of the hinting process's session id or process group: DataLoader
 * workers are forked, so they share both) opens the first occurrence at or
 * after the cursor of a hinted file, within a bounded lookahead, the cursor
 * moves past it and more files are queued.  Opens that match nothing
 * (other files, out-of-order repeats) change nothing.  A session ends when
 * the reader passes its last file, when the client ends it, when a new
 * session of the same uid and scope replaces it, or after an hour without
 * progress.
 *
 * Locking: h->lock guards the session list and every session's cursor and
 * queue state; it is taken before the scheduler's lock.  A session is the
 * owner of its queued requests (reference counted), so ending it only
 * cancels what has not started.
 */
#include "prefetch_i.h"

#include "htab.h"
#include "list.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SESSION_IDLE_MS	(3600ULL * 1000)
#define MAX_SESSIONS	1024
#define NO_POS		UINT32_MAX

/* any user opens and ends hint sessions at will (HINT, issue 27) */
static struct log_ratelimit rl_hints = LOG_RATELIMIT_INIT(10000, 10);
static struct log_ratelimit rl_hints_end = LOG_RATELIMIT_INIT(10000, 10);

struct pf_session {
	struct pf_owner o;
	struct list_node node;		/* in h->sessions: protected by h->lock */
	uint64_t id;
	struct pf_hint_opts opts;
	struct pf_hint_file *files;
	uint32_t n;
	uint64_t *sizes;		/* bytes of files[i] once queued */
	/*
	 * A multimap key -> positions in list order, built once: open
	 * addressing over uint32_t positions (hashed by htab_hash_u64), not
	 * htab.h's table, which would add a 16-byte node per position of an
	 * epoch of millions of files.
	 */
	uint32_t *chain;		/* next position of the same key */
	uint32_t *slots;		/* hash of keys: first position + 1 */
	uint32_t nslots;
	uint32_t cursor, issued;	/* protected by h->lock */
	uint64_t bytes_ahead;		/* protected by h->lock */
	uint64_t last_ms;		/* protected by h->lock */
};

struct pf_hints {
	struct pf_sched *s;
	pthread_mutex_t lock;
	struct list_node sessions;	/* protected by lock: newest first */
	uint64_t next_id;		/* protected by lock */
	_Atomic uint64_t count;
};

struct pf_hints *pf_hints_create(struct pf_sched *s)
{
	struct pf_hints *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->s = s;
	h->next_id = 1;
	list_init(&h->sessions);
	pthread_mutex_init(&h->lock, NULL);
	return h;
}

uint64_t pf_hints_count(struct pf_hints *h)
{
	return h ? atomic_load(&h->count) : 0;
}

static void session_done(struct pf_owner *o, const struct pf_req *r, int res)
{
	(void)o;
	(void)r;
	(void)res;
}

static void session_free(struct pf_owner *o)
{
	struct pf_session *ss = (struct pf_session *)o;

	free(ss->files);
	free(ss->sizes);
	free(ss->chain);
	free(ss->slots);
	free(ss);
}

static uint32_t slot_of(const struct pf_session *ss, uint64_t key)
{
	return (uint32_t)htab_hash_u64(key) & (ss->nslots - 1);
}

static int index_build(struct pf_session *ss)
{
	uint32_t *last;

	ss->nslots = 16;
	while (ss->nslots < 2 * ss->n)
		ss->nslots *= 2;
	ss->slots = calloc(ss->nslots, sizeof(*ss->slots));
	ss->chain = malloc(ss->n * sizeof(*ss->chain));
	last = malloc(ss->nslots * sizeof(*last));	/* last position per slot */
	if (!ss->slots || !ss->chain || !last) {
		free(last);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ss->n; i++) {
		uint32_t k = slot_of(ss, ss->files[i].key);

		ss->chain[i] = NO_POS;
		while (ss->slots[k] && ss->files[ss->slots[k] - 1].key != ss->files[i].key)
			k = (k + 1) & (ss->nslots - 1);
		if (!ss->slots[k])
			ss->slots[k] = i + 1;
		else
			ss->chain[last[k]] = i;
		last[k] = i;
	}
	free(last);
	return 0;
}

/* First position >= cursor holding @key, or NO_POS. */
static uint32_t find_pos(const struct pf_session *ss, uint64_t key)
{
	uint32_t k = slot_of(ss, key), p;

	while (ss->slots[k] && ss->files[ss->slots[k] - 1].key != key)
		k = (k + 1) & (ss->nslots - 1);
	if (!ss->slots[k])
		return NO_POS;
	for (p = ss->slots[k] - 1; p != NO_POS && p < ss->cursor; p = ss->chain[p])
		;
	return p;
}

/* Queue hinted file @p.  Under h->lock. */
static void issue_one(struct pf_hints *h, struct pf_session *ss, uint32_t p)
{
	const struct pf_hint_file *hf = &ss->files[p];
	struct cache *c = pf_cache(h->s);
	struct sfs_attr a;
	struct pf_file *f;
	uint32_t nch;
	int err;

	ss->sizes[p] = 0;
	if (hf->be->ops->getattr(hf->be, hf->bino, &a) || !S_ISREG(a.mode))
		return;
	ss->sizes[p] = a.size;
	ss->bytes_ahead += a.size;
	f = pf_file_create(h->s, hf->be, &a, hf->nothrash, NULL, &err);
	if (!f)
		return;
	nch = (uint32_t)DIV_ROUND_UP(a.size, hf->be->chunk_size);
	for (uint32_t idx = 0; idx < nch; idx++) {
		if (cache_chunk_present(c, f->cf, idx))
			continue;
		if (pf_submit(h->s, &ss->o, f, idx,
			      cache_owner_or_uid(ss->opts.owner, ss->opts.uid),
			      PF_CLASS_READAHEAD,
			      PF_KIND_HINT))
			break;
	}
	pf_file_put(f);
}

static void fill_window(struct pf_hints *h, struct pf_session *ss)
{
	while (ss->issued < ss->n && ss->issued - ss->cursor < ss->opts.window &&
	       ss->bytes_ahead < ss->opts.window_bytes)
		issue_one(h, ss, ss->issued++);
}

static void advance(struct pf_session *ss, uint32_t to)
{
	for (uint32_t p = ss->cursor; p < to && p < ss->issued; p++)
		ss->bytes_ahead -= ss->sizes[p];
	ss->cursor = to;
	if (ss->issued < to) {
		ss->issued = to;
		ss->bytes_ahead = 0;
	}
}

/* Unlink @ss (under h->lock), cancel what it queued, drop the list's ref. */
static void session_end_locked(struct pf_hints *h, struct pf_session *ss)
{
	list_del(&ss->node);
	atomic_fetch_sub(&h->count, 1);
	pf_cancel(h->s, &ss->o);
	pf_owner_put(&ss->o);
}

int pf_hint_start(struct pf_sched *s, const struct pf_hint_opts *o,
		  struct pf_hint_file *files, size_t n, uint64_t *id)
{
	struct pf_hints *h = s->hints;
	const struct pf_opts *po = pf_opts(s);
	struct pf_session *ss;
	uint64_t now = now_ms();
	size_t live = 0;

	if (!n || n >= NO_POS) {
		free(files);
		return -EINVAL;
	}
	ss = calloc(1, sizeof(*ss));
	if (!ss) {
		free(files);
		return -ENOMEM;
	}
	atomic_init(&ss->o.refs, 1);
	ss->o.done = session_done;
	ss->o.free = session_free;
	ss->opts = *o;
	if (!ss->opts.window)
		ss->opts.window = po->hint_window ? po->hint_window : 64;
	if (!ss->opts.window_bytes)
		ss->opts.window_bytes = po->hint_window_bytes ? po->hint_window_bytes : UINT64_MAX;
	ss->files = files;
	ss->n = (uint32_t)n;
	ss->sizes = calloc(n, sizeof(*ss->sizes));
	if (!ss->sizes || index_build(ss)) {
		session_free(&ss->o);
		return -ENOMEM;
	}
	ss->last_ms = now;

	pthread_mutex_lock(&h->lock);
	list_for_each_safe(pos, tmp, &h->sessions) {
		struct pf_session *old = list_entry(pos, struct pf_session, node);

		if ((old->opts.uid == o->uid && old->opts.scope == o->scope &&
		     old->opts.scope_id == o->scope_id) ||
		    now - old->last_ms > SESSION_IDLE_MS) {
			session_end_locked(h, old);
			continue;
		}
		live++;
	}
	if (live >= MAX_SESSIONS) {
		pthread_mutex_unlock(&h->lock);
		session_free(&ss->o);
		return -EAGAIN;
	}
	ss->id = h->next_id++;
	list_add(&h->sessions, &ss->node);
	atomic_fetch_add(&h->count, 1);
	fill_window(h, ss);
	*id = ss->id;
	pthread_mutex_unlock(&h->lock);
	log_limited(&rl_hints, LOG_INFO, "hint session %" PRIu64 ": uid %u, %zu files, window %u files",
		    ss->id, o->uid, n, ss->opts.window);
	return 0;
}

int pf_hint_end(struct pf_sched *s, uint64_t id, uint32_t uid)
{
	struct pf_hints *h = s->hints;
	int ret = -ENOENT;

	pthread_mutex_lock(&h->lock);
	list_for_each(pos, &h->sessions) {
		struct pf_session *ss = list_entry(pos, struct pf_session, node);

		if (ss->id != id)
			continue;
		if (uid && ss->opts.uid != uid) {
			ret = -EPERM;
			break;
		}
		session_end_locked(h, ss);
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&h->lock);
	return ret;
}

void pf_hint_open(struct pf_sched *s, uint64_t key, uint32_t uid, pid_t pid)
{
	struct pf_hints *h;
	pid_t sid = -2, pgid = -2;

	if (!s || !(h = s->hints) || !atomic_load(&h->count))
		return;
	pthread_mutex_lock(&h->lock);
	list_for_each_safe(node, tmp, &h->sessions) {
		struct pf_session *ss = list_entry(node, struct pf_session, node);
		uint32_t pos, reach;

		if (ss->opts.uid != uid)
			continue;
		if (ss->opts.scope == PF_SCOPE_SID) {
			if (sid == -2)
				sid = getsid(pid);
			if (sid != ss->opts.scope_id)
				continue;
		} else if (ss->opts.scope == PF_SCOPE_PGID) {
			if (pgid == -2)
				pgid = getpgid(pid);
			if (pgid != ss->opts.scope_id)
				continue;
		}
		pos = find_pos(ss, key);
		reach = MAX(4 * ss->opts.window, 1024u);
		if (pos == NO_POS || pos - ss->cursor >= reach)
			continue;
		advance(ss, pos + 1);
		ss->last_ms = now_ms();
		if (ss->cursor >= ss->n) {
			log_limited(&rl_hints_end, LOG_INFO,
				    "hint session %" PRIu64 ": the reader passed its last file", ss->id);
			session_end_locked(h, ss);
			continue;
		}
		fill_window(h, ss);
	}
	pthread_mutex_unlock(&h->lock);
}

void pf_hints_destroy(struct pf_hints *h)
{
	pthread_mutex_lock(&h->lock);
	list_for_each_safe(pos, tmp, &h->sessions)
		session_end_locked(h, list_entry(pos, struct pf_session, node));
	pthread_mutex_unlock(&h->lock);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
