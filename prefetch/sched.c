/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched: the scheduler of background fetches (see prefetch.h for the
 * policy, docs/prefetch.md for the reasoning).
 *
 * Queues: one FIFO per (uid, class).  The next request is taken by strict
 * class order, weighted round robin over the uids that have work in that
 * class and are below prefetch_user_inflight, and only while demand +
 * background fetches in flight are below prefetch_inflight.  Who takes it:
 * the I/O engine (engine.c), which runs every fetch of the daemon on one
 * thread and asks pf_sched_next() whenever it has room; or, where the
 * engine cannot run (prefetch_io_uring = no, no io_uring), prefetch_inflight
 * worker threads each running one cache_read_prefetch() at a time.  This file calls
 * no other part of prefetch/: pf_submit() wakes the engine through the
 * hook prefetch.c set (s->kick), and prefetch.c makes and stops the
 * queues (pf_queues_*) around the other parts.
 *
 * The token bucket: tokens accrue at max_rate bytes/s up to a burst of an
 * eighth of a second (at least 1 MiB).  A warmup fetch of LEN bytes waits
 * until the bucket holds min(LEN, burst) and then takes LEN (the balance
 * may go negative).  A demand fetch only waits while the balance would fall
 * below minus one second's worth: readers borrow, so queued background work
 * never stands between a reader and the backend, yet a reader that outruns
 * the cap for long is held to it.  Readahead borrows half as far: a reader
 * may be waiting on the chunk it is fetching, and it must not queue behind
 * warmup for tokens.
 *
 * Locking: q->lock guards the queues, the users and the in-flight counts
 * (fields marked so); the bucket has its own lock; counters are atomics.
 * Lock order: owner locks (readahead, job, hint) before q->lock.
 */
#include "prefetch_i.h"

#include "log.h"
#include "policy.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pf_user {
	uint32_t uid;
	uint32_t weight;
	uint32_t inflight;			/* background fetches now */
	uint32_t credit[PF_NCLASS];		/* picks left in this turn */
	struct list_node q[PF_NCLASS];		/* FIFO of struct pf_req, by qnode */
};

struct pf_weight {
	uint32_t uid, weight;
	char ns[64];		/* namespace:NAME:WEIGHT: the tenant's; "" for a uid */
};

/* The scheduler's state (struct pf_sched's q). */
struct pf_queues {
	pthread_mutex_t lock;
	pthread_cond_t work;		/* a request was queued or a slot freed */
	/*
	 * Protected by lock; never shrinks.  An array, not htab.h: one entry
	 * per uid that ever queued (a handful), and the round robin walks it
	 * in index order at every pick anyway.
	 */
	struct pf_user **users;
	size_t nusers, users_cap;	/* protected by lock */
	size_t rr[PF_NCLASS];		/* protected by lock: next user to serve */
	uint64_t queued;		/* protected by lock */
	uint32_t bg_inflight;		/* protected by lock */
	uint32_t waiting;		/* protected by lock: idle workers */
	bool stop;			/* protected by lock */
	_Atomic uint32_t demand_inflight;
	_Atomic uint32_t has_waiters;	/* hint for pf_demand_end */
	_Atomic bool stopping;		/* stopping: background waits give up */

	pthread_t *workers;
	uint32_t nworkers;

	struct pf_weight *wt;		/* prefetch_weights, as written: a few */
	size_t nwt;

	pthread_mutex_t blk;		/* the token bucket */
	double tokens;			/* protected by blk */
	uint64_t last_ns;		/* protected by blk */
	double rate, burst, borrow;

	_Atomic uint64_t st_kind[PF_NKIND];	/* fetched, by enum pf_kind */
	_Atomic uint64_t st_demand, st_errors, st_cancelled, st_throttle_ns;
};

/* ---- the token bucket ---- */

static void sleep_s(double secs)
{
	struct timespec ts = {
		.tv_sec = (time_t)secs,
		.tv_nsec = (long)((secs - (double)(time_t)secs) * 1e9),
	};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

uint64_t pf_bucket_try(struct pf_sched *s, size_t len, int prio)
{
	struct pf_queues *q = s->q;

	uint64_t now = now_ns();
	double need;

	if (q->rate <= 0)
		return 0;
	pthread_mutex_lock(&q->blk);
	q->tokens += (double)(now - q->last_ns) * 1e-9 * q->rate;
	if (q->tokens > q->burst)
		q->tokens = q->burst;
	q->last_ns = now;
	/* how far below zero a fetch may take the balance, by priority */
	if (prio == BK_DEMAND)
		need = (double)len - q->borrow;
	else if (prio == BK_READAHEAD)
		need = (double)len - q->borrow / 2;
	else
		need = MIN((double)len, q->burst);
	if (q->tokens >= need) {
		q->tokens -= (double)len;
		pthread_mutex_unlock(&q->blk);
		return 0;
	}
	need -= q->tokens;
	pthread_mutex_unlock(&q->blk);
	return MAX((uint64_t)(need / q->rate * 1e9), (uint64_t)1);
}

void pf_note_throttle(struct pf_sched *s, uint64_t ns)
{
	struct pf_queues *q = s->q;

	atomic_fetch_add(&q->st_throttle_ns, ns);
}

/* Wait for @len bytes of tokens.  0, or -ECANCELED (background, stopping). */
static int bucket_take(struct pf_sched *s, size_t len, int prio)
{
	struct pf_queues *q = s->q;

	uint64_t t0 = 0, wait;

	while ((wait = pf_bucket_try(s, len, prio))) {
		if (prio != BK_DEMAND && atomic_load(&q->stopping))
			return -ECANCELED;	/* a low cap must not hold up shutdown */
		if (!t0)
			t0 = now_ns();
		/* short naps: a demand fetch may take the tokens meanwhile */
		sleep_s(MIN((double)wait * 1e-9, 0.05));
	}
	if (t0)
		pf_note_throttle(s, now_ns() - t0);
	return 0;
}

void pf_demand_begin(struct pf_sched *s, size_t len)
{
	struct pf_queues *q;

	if (!s)
		return;
	q = s->q;
	atomic_fetch_add(&q->demand_inflight, 1);
	atomic_fetch_add(&q->st_demand, 1);
	bucket_take(s, len, BK_DEMAND);
}

void pf_demand_end(struct pf_sched *s)
{
	struct pf_queues *q;

	if (!s)
		return;
	q = s->q;
	atomic_fetch_sub(&q->demand_inflight, 1);
	if (atomic_load(&q->has_waiters)) {
		pthread_mutex_lock(&q->lock);
		if (q->queued)
			pthread_cond_signal(&q->work);
		pthread_mutex_unlock(&q->lock);
	}
}

/* ---- files ---- */

struct pf_file *pf_file_create(struct pf_sched *s, struct backend *be,
			       const struct sfs_attr *a, bool nothrash,
			       const char *path, int *err)
{
	struct pf_file *f = calloc(1, sizeof(*f));
	int ret;

	if (!f) {
		*err = -ENOMEM;
		return NULL;
	}
	if (path && !(f->path = strdup(path))) {
		free(f);
		*err = -ENOMEM;
		return NULL;
	}
	ret = cache_file_get(s->c, &a->content, a->size, be->chunk_size, &f->cf);
	if (ret) {
		free(f->path);
		free(f);
		*err = ret;
		return NULL;
	}
	atomic_init(&f->refs, 1);
	f->s = s;
	f->be = be;
	f->attr = *a;
	f->nothrash = nothrash;
	return f;
}

void pf_file_get(struct pf_file *f)
{
	atomic_fetch_add(&f->refs, 1);
}

void pf_file_put(struct pf_file *f)
{
	if (!f || atomic_fetch_sub(&f->refs, 1) != 1)
		return;
	cache_file_put(f->s->c, f->cf);
	free(f->path);
	free(f);
}

/* ---- queues ---- */

/* @uid's weight: a uid's, or a tenant's (a namespace's, by its name). */
static uint32_t weight_of(struct pf_sched *s, uint32_t uid)
{
	struct pf_queues *q = s->q;
	char name[CACHE_TENANT_NAME_MAX];
	const char *ns = cache_owner_is_tenant(uid) && s->c &&
			 cache_tenant_name(s->c, uid, name, sizeof(name)) ?
			 policy_tenant_ns(name) : NULL;

	for (size_t i = 0; i < q->nwt; i++) {
		if (ns ? q->wt[i].ns[0] && !strcmp(q->wt[i].ns, ns) :
			 !q->wt[i].ns[0] && q->wt[i].uid == uid)
			return q->wt[i].weight;
	}
	return 1;
}

static struct pf_user *user_get_locked(struct pf_sched *s, uint32_t uid)
{
	struct pf_queues *q = s->q;
	struct pf_user *u;

	for (size_t i = 0; i < q->nusers; i++)
		if (q->users[i]->uid == uid)
			return q->users[i];
	if (q->nusers == q->users_cap) {
		size_t cap = q->users_cap ? q->users_cap * 2 : 8;
		struct pf_user **nu = realloc(q->users, cap * sizeof(*nu));

		if (!nu)
			return NULL;
		q->users = nu;
		q->users_cap = cap;
	}
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	u->weight = weight_of(s, uid);
	for (int c = 0; c < PF_NCLASS; c++) {
		u->credit[c] = u->weight;
		list_init(&u->q[c]);
	}
	q->users[q->nusers++] = u;
	return u;
}

static int submit(struct pf_sched *s, struct pf_owner *o, struct pf_file *f,
		  uint32_t idx, uint32_t uid, enum pf_class cls, enum pf_kind kind,
		  uint8_t oflags, bool kick)
{
	struct pf_queues *q = s->q;
	struct pf_req *r = calloc(1, sizeof(*r));
	struct pf_user *u;

	if (!r)
		return -ENOMEM;
	r->f = f;
	r->o = o;
	r->idx = idx;
	r->uid = uid;
	r->cls = (uint8_t)cls;
	r->kind = (uint8_t)kind;
	r->oflags = oflags;
	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		pthread_mutex_unlock(&q->lock);
		free(r);
		return -ESHUTDOWN;
	}
	u = user_get_locked(s, uid);
	if (!u) {
		pthread_mutex_unlock(&q->lock);
		free(r);
		return -ENOMEM;
	}
	pf_file_get(f);
	pf_owner_get(o);
	list_add_tail(&u->q[cls], &r->qnode);
	q->queued++;
	if (q->waiting)
		pthread_cond_signal(&q->work);
	pthread_mutex_unlock(&q->lock);
	if (kick)
		pf_sched_kick(s);
	return 0;
}

void pf_sched_kick(struct pf_sched *s)
{
	/* the consumer's hook (prefetch.c: the engine's kick) */
	if (s->kick)
		s->kick(s->kick_arg);
}

int pf_submit(struct pf_sched *s, struct pf_owner *o, struct pf_file *f,
	      uint32_t idx, uint32_t uid, enum pf_class cls, enum pf_kind kind)
{
	return submit(s, o, f, idx, uid, cls, kind, 0, true);
}

int pf_submit_quiet(struct pf_sched *s, struct pf_owner *o, struct pf_file *f,
		    uint32_t idx, uint32_t uid, enum pf_class cls, enum pf_kind kind,
		    uint8_t oflags)
{
	return submit(s, o, f, idx, uid, cls, kind, oflags, false);
}

/*
 * The next request to start, by class, then weighted round robin over the
 * uids below their cap.  NULL if none may start.
 */
static struct pf_req *pick_locked(struct pf_sched *s, struct pf_user **uout)
{
	struct pf_queues *q = s->q;

	for (int c = 0; c < PF_NCLASS; c++) {
		size_t n = q->nusers;

		for (size_t k = 0; k < n; k++) {
			size_t pos = (q->rr[c] + k) % n;
			struct pf_user *u = q->users[pos];
			struct pf_req *r;

			if (list_empty(&u->q[c]) || u->inflight >= s->o.user_inflight)
				continue;
			r = list_entry(list_pop(&u->q[c]), struct pf_req, qnode);
			q->queued--;
			if (--u->credit[c] == 0 || list_empty(&u->q[c])) {
				/* this uid's turn is over: the next one's begins */
				u->credit[c] = u->weight;
				q->rr[c] = (pos + 1) % n;
			} else {
				q->rr[c] = pos;
			}
			r->u = u;
			*uout = u;
			return r;
		}
	}
	return NULL;
}

struct pf_req *pf_sched_next(struct pf_sched *s, uint32_t demand_inflight,
			     uint32_t bg_cap)
{
	struct pf_queues *q = s->q;
	struct pf_user *u;
	struct pf_req *r = NULL;

	pthread_mutex_lock(&q->lock);
	demand_inflight += atomic_load(&q->demand_inflight);	/* readers' own fetches */
	if (!q->stop && q->bg_inflight + demand_inflight < s->o.inflight &&
	    q->bg_inflight < bg_cap &&
	    (r = pick_locked(s, &u))) {
		q->bg_inflight++;
		u->inflight++;
	}
	pthread_mutex_unlock(&q->lock);
	return r;
}

static void req_finish(struct pf_sched *s, struct pf_req *r, int res);

static void req_release_owner(struct pf_req *r)
{
	if (r->released)
		return;
	r->released = true;
	if (r->o->released)
		r->o->released(r->o, r);
}

void pf_sched_release(struct pf_sched *s, struct pf_req *r)
{
	struct pf_queues *q = s->q;

	if (r->slot_freed)
		return;
	r->slot_freed = true;
	pthread_mutex_lock(&q->lock);
	q->bg_inflight--;
	r->u->inflight--;
	pthread_mutex_unlock(&q->lock);
	req_release_owner(r);
}

/* @r is over with @res; @fetch: a fetch it made counts under its kind. */
static void sched_finish(struct pf_sched *s, struct pf_req *r, int res, bool fetch)
{
	struct pf_queues *q = s->q;

	if (res == PF_FETCHED || res == -ENOSPC) {
		if (fetch)	/* fetched, kept or not */
			atomic_fetch_add(&q->st_kind[r->kind], 1);
	} else if (res == -ECANCELED) {
		atomic_fetch_add(&q->st_cancelled, 1);
	} else if (res < 0) {
		atomic_fetch_add(&q->st_errors, 1);
	}
	pf_sched_release(s, r);
	req_finish(s, r, res);
}

void pf_sched_finish(struct pf_sched *s, struct pf_req *r, int res)
{
	sched_finish(s, r, res, true);
}

void pf_sched_finish_joined(struct pf_sched *s, struct pf_req *r, int res)
{
	sched_finish(s, r, res, false);
}

void pf_note_demand_fetch(struct pf_sched *s)
{
	struct pf_queues *q = s->q;

	atomic_fetch_add(&q->st_demand, 1);
}

static void req_finish(struct pf_sched *s, struct pf_req *r, int res)
{
	req_release_owner(r);
	r->o->done(r->o, r, res);
	pf_owner_put(r->o);
	pf_file_put(r->f);
	free(r);
}

void pf_cancel(struct pf_sched *s, struct pf_owner *o)
{
	struct pf_queues *q = s->q;
	struct list_node dropped, *n;

	list_init(&dropped);
	atomic_store(&o->cancelled, true);
	pthread_mutex_lock(&q->lock);
	for (size_t i = 0; i < q->nusers; i++) {
		struct pf_user *u = q->users[i];

		for (int c = 0; c < PF_NCLASS; c++) {
			list_for_each_safe(pos, tmp, &u->q[c]) {
				struct pf_req *r = list_entry(pos, struct pf_req, qnode);

				if (r->o != o)
					continue;
				list_del(pos);
				list_add(&dropped, pos);
				q->queued--;
			}
		}
	}
	pthread_mutex_unlock(&q->lock);
	while ((n = list_pop(&dropped))) {
		struct pf_req *r = list_entry(n, struct pf_req, qnode);

		atomic_fetch_add(&q->st_cancelled, 1);
		req_finish(s, r, -ECANCELED);
	}
}

/* ---- workers ---- */

struct fetch_ctx {
	struct pf_sched *s;
	struct pf_file *f;
	int prio;
	bool fetched;
};

static int bg_fetch(void *arg, uint32_t idx, void *buf, size_t len)
{
	struct fetch_ctx *x = arg;
	struct backend *be = x->f->be;
	int r;

	r = bucket_take(x->s, len, x->prio);
	if (r)
		return r;
	if (x->s->o.fetch_begin)
		x->s->o.fetch_begin(x->s->o.account_arg, x->f->cf, idx);
	r = be->ops->read_chunk(be, &x->f->attr, idx, buf, len);
	if (x->s->o.fetch_end)
		x->s->o.fetch_end(x->s->o.account_arg, x->f->cf, idx, r, false);
	if (r == (int)len)
		x->fetched = true;
	else
		atomic_fetch_add(&x->s->q->st_errors, 1);
	return r;
}

static int run_req(struct pf_sched *s, struct pf_req *r)
{
	struct pf_queues *q = s->q;
	struct fetch_ctx x = {
		.s = s,
		.f = r->f,
		.prio = r->cls == PF_CLASS_READAHEAD ? BK_READAHEAD : BK_WARMUP,	/* stage too */
	};
	struct cache_source src = {
		.fetch = bg_fetch,
		.arg = &x,
		.uid = r->uid,
		.nothrash = r->f->nothrash,
	};
	int ret;

	if (atomic_load(&r->o->cancelled)) {
		atomic_fetch_add(&q->st_cancelled, 1);
		return -ECANCELED;
	}
	ret = cache_read_prefetch(s->c, r->f->cf, r->idx, &src);
	if (ret < 0)
		return ret;
	if (!x.fetched)
		return PF_PRESENT;
	atomic_fetch_add(&q->st_kind[r->kind], 1);
	/* fetched, but a full cache (or no-thrash policy) may not keep it */
	if (!cache_chunk_present(s->c, r->f->cf, r->idx))
		return -ENOSPC;
	return PF_FETCHED;
}

/* Without the engine: one worker thread per fetch in flight. */
static void *worker_main(void *arg)
{
	struct pf_sched *s = arg;
	struct pf_queues *q = s->q;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct pf_req *r = NULL;
		struct pf_user *u = NULL;
		int res;

		while (!q->stop) {
			if (q->bg_inflight + atomic_load(&q->demand_inflight) < s->o.inflight &&
			    (r = pick_locked(s, &u)))
				break;
			/* timed: a demand fetch ending does not always wake us */
			q->waiting++;
			atomic_store(&q->has_waiters, q->waiting);
			cond_wait_until_ns(&q->work, &q->lock, now_ns() + 100000000ULL);
			q->waiting--;
			atomic_store(&q->has_waiters, q->waiting);
		}
		if (!r)
			break;
		q->bg_inflight++;
		u->inflight++;
		pthread_mutex_unlock(&q->lock);

		res = run_req(s, r);
		req_finish(s, r, res);

		pthread_mutex_lock(&q->lock);
		q->bg_inflight--;
		u->inflight--;
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* ---- life ---- */

static int parse_weights(struct pf_queues *q, const char *spec, char *err, size_t errlen)
{
	const char *p = spec;

	while (p && *p) {
		unsigned long uid = 0, w;
		char *end, ns[64] = "";
		struct pf_weight *nw;

		while (*p == ' ' || *p == ',')
			p++;
		if (!*p)
			break;
		errno = 0;
		if (!strncmp(p, "namespace:", 10)) {
			size_t n = strcspn(p + 10, ":");

			if (n >= sizeof(ns) || p[10 + n] != ':')
				goto bad;
			memcpy(ns, p + 10, n);
			ns[n] = '\0';
			if (!policy_ns_valid(ns))
				goto bad;
			p += 10 + n + 1;
		} else {
			uid = strtoul(p, &end, 10);
			if (end == p || *end != ':' || errno)
				goto bad;
			p = end + 1;
		}
		w = strtoul(p, &end, 10);
		if (end == p || errno || w < 1 || w > 1000)
			goto bad;
		p = end;
		nw = realloc(q->wt, (q->nwt + 1) * sizeof(*nw));
		if (!nw)
			return -ENOMEM;
		q->wt = nw;
		q->wt[q->nwt] = (struct pf_weight){ (uint32_t)uid, (uint32_t)w, "" };
		memcpy(q->wt[q->nwt++].ns, ns, sizeof(ns));
		if (*p && *p != ',' && *p != ' ')
			goto bad;
	}
	return 0;
bad:
	snprintf(err, errlen, "prefetch_weights: expected UID:WEIGHT or namespace:NAME:WEIGHT, "
		 "comma-separated, with weights 1-1000, got '%s'", spec);
	return -EINVAL;
}

int pf_queues_create(struct pf_sched *s, const char *weights, char *err, size_t errlen)
{
	struct pf_queues *q = calloc(1, sizeof(*q));
	int ret;

	if (!q) {
		snprintf(err, errlen, "prefetch: out of memory");
		return -ENOMEM;
	}
	ret = parse_weights(q, weights, err, errlen);
	if (ret) {
		free(q->wt);
		free(q);
		return ret;
	}
	pthread_mutex_init(&q->lock, NULL);
	cond_init_monotonic(&q->work);
	pthread_mutex_init(&q->blk, NULL);
	if (s->o.max_rate) {
		q->rate = (double)s->o.max_rate;
		q->burst = MAX(q->rate / 8, (double)MiB);
		q->borrow = q->rate;
		q->tokens = q->burst;
		q->last_ns = now_ns();
	}
	s->q = q;
	return 0;
}

int pf_queues_start_workers(struct pf_sched *s, char *err, size_t errlen)
{
	struct pf_queues *q = s->q;
	int ret;

	q->workers = calloc(s->o.inflight, sizeof(*q->workers));
	if (!q->workers) {
		snprintf(err, errlen, "prefetch: out of memory");
		return -ENOMEM;
	}
	for (; q->nworkers < s->o.inflight; q->nworkers++) {
		ret = -pthread_create(&q->workers[q->nworkers], NULL, worker_main, s);
		if (ret) {
			snprintf(err, errlen, "prefetch: cannot start workers: %s",
				 strerror(-ret));
			return ret;
		}
	}
	return 0;
}

void pf_queues_stop(struct pf_sched *s)
{
	struct pf_queues *q = s->q;

	atomic_store(&q->stopping, true);
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->lock);
}

void pf_queues_join_workers(struct pf_sched *s)
{
	struct pf_queues *q = s->q;

	for (uint32_t i = 0; i < q->nworkers; i++)
		pthread_join(q->workers[i], NULL);
	q->nworkers = 0;
}

void pf_queues_destroy(struct pf_sched *s)
{
	struct pf_queues *q = s->q;

	/* what is still queued is dropped: owners hear -ECANCELED */
	for (size_t i = 0; i < q->nusers; i++) {
		struct pf_user *u = q->users[i];

		for (int c = 0; c < PF_NCLASS; c++) {
			struct list_node *n;

			while ((n = list_pop(&u->q[c])))
				req_finish(s, list_entry(n, struct pf_req, qnode), -ECANCELED);
		}
		free(u);
	}
	free(q->users);
	free(q->workers);
	free(q->wt);
	pthread_mutex_destroy(&q->blk);
	pthread_cond_destroy(&q->work);
	pthread_mutex_destroy(&q->lock);
	free(q);
	s->q = NULL;
}

void pf_queues_get_stats(struct pf_sched *s, struct pf_stats *st)
{
	struct pf_queues *q = s->q;

	st->readahead_fetches = atomic_load(&q->st_kind[PF_KIND_READAHEAD]);
	st->hint_fetches = atomic_load(&q->st_kind[PF_KIND_HINT]);
	st->warmup_fetches = atomic_load(&q->st_kind[PF_KIND_WARMUP]);
	st->stage_fetches = atomic_load(&q->st_kind[PF_KIND_STAGE]);
	st->demand_fetches = atomic_load(&q->st_demand);
	st->fetch_errors = atomic_load(&q->st_errors);
	st->cancelled = atomic_load(&q->st_cancelled);
	st->throttle_ms = atomic_load(&q->st_throttle_ns) / 1000000;
	st->demand_inflight = atomic_load(&q->demand_inflight);
	pthread_mutex_lock(&q->lock);
	st->queued = q->queued;
	st->inflight = q->bg_inflight;
	pthread_mutex_unlock(&q->lock);
}
