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
 * worker threads each running one cache_fill() at a time.
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
 * Locking: s->lock guards the queues, the users and the in-flight counts
 * (fields marked so); the bucket has its own lock; counters are atomics.
 * Lock order: owner locks (readahead, job, hint) before s->lock.
 */
#include "prefetch_i.h"

#include "log.h"
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
};

struct pf_sched {
	struct pf_opts o;
	char *weights;
	struct cache *c;

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
	_Atomic bool stopping;		/* destroy: background waits give up */

	pthread_t *workers;
	uint32_t nworkers;

	struct pf_weight *wt;		/* prefetch_weights, as written: a few */
	size_t nwt;

	struct pf_stager *stager;	/* epoch staging (stage.c) */
	pthread_mutex_t blk;		/* the token bucket */
	double tokens;			/* protected by blk */
	uint64_t last_ns;		/* protected by blk */
	double rate, burst, borrow;

	struct pf_hints *hints;
	struct pf_engine *engine;	/* NULL: the cache's own pwrite/pread */

	_Atomic uint64_t st_kind[PF_NKIND];	/* fetched, by enum pf_kind */
	_Atomic uint64_t st_demand, st_errors, st_cancelled, st_throttle_ns;
	_Atomic int jobs;
};

struct cache *pf_cache(struct pf_sched *s)
{
	return s->c;
}

const struct pf_opts *pf_opts(struct pf_sched *s)
{
	return &s->o;
}

struct pf_hints *pf_sched_hints(struct pf_sched *s)
{
	return s->hints;
}

struct pf_stager *pf_sched_stager(struct pf_sched *s)
{
	return s->stager;
}

void pf_jobs_add(struct pf_sched *s, int delta)
{
	atomic_fetch_add(&s->jobs, delta);
}

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
	uint64_t now = now_ns();
	double need;

	if (s->rate <= 0)
		return 0;
	pthread_mutex_lock(&s->blk);
	s->tokens += (double)(now - s->last_ns) * 1e-9 * s->rate;
	if (s->tokens > s->burst)
		s->tokens = s->burst;
	s->last_ns = now;
	/* how far below zero a fetch may take the balance, by priority */
	if (prio == BK_DEMAND)
		need = (double)len - s->borrow;
	else if (prio == BK_READAHEAD)
		need = (double)len - s->borrow / 2;
	else
		need = MIN((double)len, s->burst);
	if (s->tokens >= need) {
		s->tokens -= (double)len;
		pthread_mutex_unlock(&s->blk);
		return 0;
	}
	need -= s->tokens;
	pthread_mutex_unlock(&s->blk);
	return MAX((uint64_t)(need / s->rate * 1e9), (uint64_t)1);
}

void pf_note_throttle(struct pf_sched *s, uint64_t ns)
{
	atomic_fetch_add(&s->st_throttle_ns, ns);
}

/* Wait for @len bytes of tokens.  0, or -ECANCELED (background, stopping). */
static int bucket_take(struct pf_sched *s, size_t len, int prio)
{
	uint64_t t0 = 0, wait;

	while ((wait = pf_bucket_try(s, len, prio))) {
		if (prio != BK_DEMAND && atomic_load(&s->stopping))
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
	if (!s)
		return;
	atomic_fetch_add(&s->demand_inflight, 1);
	atomic_fetch_add(&s->st_demand, 1);
	bucket_take(s, len, BK_DEMAND);
}

void pf_demand_end(struct pf_sched *s)
{
	if (!s)
		return;
	atomic_fetch_sub(&s->demand_inflight, 1);
	if (atomic_load(&s->has_waiters)) {
		pthread_mutex_lock(&s->lock);
		if (s->queued)
			pthread_cond_signal(&s->work);
		pthread_mutex_unlock(&s->lock);
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

static uint32_t weight_of(struct pf_sched *s, uint32_t uid)
{
	for (size_t i = 0; i < s->nwt; i++)
		if (s->wt[i].uid == uid)
			return s->wt[i].weight;
	return 1;
}

static struct pf_user *user_get_locked(struct pf_sched *s, uint32_t uid)
{
	struct pf_user *u;

	for (size_t i = 0; i < s->nusers; i++)
		if (s->users[i]->uid == uid)
			return s->users[i];
	if (s->nusers == s->users_cap) {
		size_t cap = s->users_cap ? s->users_cap * 2 : 8;
		struct pf_user **nu = realloc(s->users, cap * sizeof(*nu));

		if (!nu)
			return NULL;
		s->users = nu;
		s->users_cap = cap;
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
	s->users[s->nusers++] = u;
	return u;
}

int pf_submit(struct pf_sched *s, struct pf_owner *o, struct pf_file *f,
	      uint32_t idx, uint32_t uid, enum pf_class cls, enum pf_kind kind)
{
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
	pthread_mutex_lock(&s->lock);
	if (s->stop) {
		pthread_mutex_unlock(&s->lock);
		free(r);
		return -ESHUTDOWN;
	}
	u = user_get_locked(s, uid);
	if (!u) {
		pthread_mutex_unlock(&s->lock);
		free(r);
		return -ENOMEM;
	}
	pf_file_get(f);
	pf_owner_get(o);
	list_add_tail(&u->q[cls], &r->qnode);
	s->queued++;
	if (s->waiting)
		pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	if (s->engine)
		pf_engine_kick(s->engine);
	return 0;
}

/*
 * The next request to start, by class, then weighted round robin over the
 * uids below their cap.  NULL if none may start.
 */
static struct pf_req *pick_locked(struct pf_sched *s, struct pf_user **uout)
{
	for (int c = 0; c < PF_NCLASS; c++) {
		size_t n = s->nusers;

		for (size_t k = 0; k < n; k++) {
			size_t pos = (s->rr[c] + k) % n;
			struct pf_user *u = s->users[pos];
			struct pf_req *r;

			if (list_empty(&u->q[c]) || u->inflight >= s->o.user_inflight)
				continue;
			r = list_entry(list_pop(&u->q[c]), struct pf_req, qnode);
			s->queued--;
			if (--u->credit[c] == 0 || list_empty(&u->q[c])) {
				/* this uid's turn is over: the next one's begins */
				u->credit[c] = u->weight;
				s->rr[c] = (pos + 1) % n;
			} else {
				s->rr[c] = pos;
			}
			r->u = u;
			*uout = u;
			return r;
		}
	}
	return NULL;
}

struct pf_req *pf_sched_next(struct pf_sched *s, uint32_t demand_inflight)
{
	struct pf_user *u;
	struct pf_req *r = NULL;

	pthread_mutex_lock(&s->lock);
	demand_inflight += atomic_load(&s->demand_inflight);	/* readers' own fetches */
	if (!s->stop && s->bg_inflight + demand_inflight < s->o.inflight &&
	    (r = pick_locked(s, &u))) {
		s->bg_inflight++;
		u->inflight++;
	}
	pthread_mutex_unlock(&s->lock);
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
	if (r->slot_freed)
		return;
	r->slot_freed = true;
	pthread_mutex_lock(&s->lock);
	s->bg_inflight--;
	r->u->inflight--;
	pthread_mutex_unlock(&s->lock);
	req_release_owner(r);
}

void pf_sched_finish(struct pf_sched *s, struct pf_req *r, int res)
{

	if (res == PF_FETCHED || res == -ENOSPC)
		atomic_fetch_add(&s->st_kind[r->kind], 1);	/* fetched, kept or not */
	else if (res == -ECANCELED)
		atomic_fetch_add(&s->st_cancelled, 1);
	else if (res < 0)
		atomic_fetch_add(&s->st_errors, 1);
	pf_sched_release(s, r);
	req_finish(s, r, res);
}

struct pf_engine *pf_sched_engine(struct pf_sched *s)
{
	return s->engine;
}

bool pf_sched_stopping(struct pf_sched *s)
{
	return atomic_load(&s->stopping);
}

void pf_note_demand_fetch(struct pf_sched *s)
{
	atomic_fetch_add(&s->st_demand, 1);
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
	struct list_node dropped, *n;

	list_init(&dropped);
	atomic_store(&o->cancelled, true);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nusers; i++) {
		struct pf_user *u = s->users[i];

		for (int c = 0; c < PF_NCLASS; c++) {
			list_for_each_safe(pos, tmp, &u->q[c]) {
				struct pf_req *r = list_entry(pos, struct pf_req, qnode);

				if (r->o != o)
					continue;
				list_del(pos);
				list_add(&dropped, pos);
				s->queued--;
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
	while ((n = list_pop(&dropped))) {
		struct pf_req *r = list_entry(n, struct pf_req, qnode);

		atomic_fetch_add(&s->st_cancelled, 1);
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
		atomic_fetch_add(&x->s->st_errors, 1);
	return r;
}

static int run_req(struct pf_sched *s, struct pf_req *r)
{
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
		atomic_fetch_add(&s->st_cancelled, 1);
		return -ECANCELED;
	}
	ret = cache_fill(s->c, r->f->cf, r->idx, &src);
	if (ret < 0)
		return ret;
	if (!x.fetched)
		return PF_PRESENT;
	atomic_fetch_add(&s->st_kind[r->kind], 1);
	/* fetched, but a full cache (or no-thrash policy) may not keep it */
	if (!cache_chunk_present(s->c, r->f->cf, r->idx))
		return -ENOSPC;
	return PF_FETCHED;
}

/* Without the engine: one worker thread per fetch in flight. */
static void *worker_main(void *arg)
{
	struct pf_sched *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct pf_req *r = NULL;
		struct pf_user *u = NULL;
		int res;

		while (!s->stop) {
			if (s->bg_inflight + atomic_load(&s->demand_inflight) < s->o.inflight &&
			    (r = pick_locked(s, &u)))
				break;
			struct timespec ts;

			/* timed: a demand fetch ending does not always wake us */
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			s->waiting++;
			atomic_store(&s->has_waiters, s->waiting);
			pthread_cond_timedwait(&s->work, &s->lock, &ts);
			s->waiting--;
			atomic_store(&s->has_waiters, s->waiting);
		}
		if (!r)
			break;
		s->bg_inflight++;
		u->inflight++;
		pthread_mutex_unlock(&s->lock);

		res = run_req(s, r);
		req_finish(s, r, res);

		pthread_mutex_lock(&s->lock);
		s->bg_inflight--;
		u->inflight--;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ---- life ---- */

static int parse_weights(struct pf_sched *s, const char *spec, char *err, size_t errlen)
{
	const char *p = spec;

	while (p && *p) {
		unsigned long uid, w;
		char *end;
		struct pf_weight *nw;

		while (*p == ' ' || *p == ',')
			p++;
		if (!*p)
			break;
		errno = 0;
		uid = strtoul(p, &end, 10);
		if (end == p || *end != ':' || errno)
			goto bad;
		p = end + 1;
		w = strtoul(p, &end, 10);
		if (end == p || errno || w < 1 || w > 1000)
			goto bad;
		p = end;
		nw = realloc(s->wt, (s->nwt + 1) * sizeof(*nw));
		if (!nw)
			return -ENOMEM;
		s->wt = nw;
		s->wt[s->nwt++] = (struct pf_weight){ (uint32_t)uid, (uint32_t)w };
		if (*p && *p != ',' && *p != ' ')
			goto bad;
	}
	return 0;
bad:
	snprintf(err, errlen, "prefetch_weights: expected UID:WEIGHT[,UID:WEIGHT...] "
		 "with weights 1-1000, got '%s'", spec);
	return -EINVAL;
}

int pf_sched_create(const struct pf_opts *o, struct cache *c,
		    struct pf_sched **out, char *err, size_t errlen)
{
	struct pf_sched *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->o = *o;
	s->c = c;
	if (!s->o.inflight)
		s->o.inflight = 1;
	if (!s->o.user_inflight)
		s->o.user_inflight = s->o.inflight;
	ret = parse_weights(s, o->weights, err, errlen);
	if (ret)
		goto out_free;
	s->o.weights = NULL;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_mutex_init(&s->blk, NULL);
	if (o->max_rate) {
		s->rate = (double)o->max_rate;
		s->burst = MAX(s->rate / 8, (double)MiB);
		s->borrow = s->rate;
		s->tokens = s->burst;
		s->last_ns = now_ns();
	}
	s->hints = pf_hints_create(s);
	if (!s->hints) {
		ret = -ENOMEM;
		snprintf(err, errlen, "prefetch: out of memory");
		goto out_destroy;
	}
	s->stager = pf_stager_create(s);
	if (!s->stager) {
		ret = -ENOMEM;
		snprintf(err, errlen, "prefetch: out of memory");
		goto out_destroy;
	}
	if (o->io_uring) {
		char eerr[256];

		ret = pf_engine_create(s, c, &s->o, &s->engine, eerr, sizeof(eerr));
		if (ret)
			log_warn("prefetch: no I/O engine (%s): a worker thread per fetch", eerr);
	}
	if (s->engine) {
		*out = s;
		return 0;
	}
	s->workers = calloc(s->o.inflight, sizeof(*s->workers));
	if (!s->workers) {
		ret = -ENOMEM;
		snprintf(err, errlen, "prefetch: out of memory");
		goto out_destroy;
	}
	for (; s->nworkers < s->o.inflight; s->nworkers++) {
		ret = -pthread_create(&s->workers[s->nworkers], NULL, worker_main, s);
		if (ret) {
			snprintf(err, errlen, "prefetch: cannot start workers: %s",
				 strerror(-ret));
			goto out_destroy;
		}
	}
	*out = s;
	return 0;

out_destroy:
	pf_sched_destroy(s);
	return ret;
out_free:
	free(s->wt);
	free(s);
	return ret;
}

void pf_sched_destroy(struct pf_sched *s)
{
	if (!s)
		return;
	atomic_store(&s->stopping, true);
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_broadcast(&s->work);
	pthread_mutex_unlock(&s->lock);
	/* stagings end while the engine (or the workers) still finish fetches */
	if (s->stager)
		pf_stager_destroy(s->stager);
	for (uint32_t i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	/* fills in flight finish; nothing new starts */
	pf_engine_destroy(s->engine);
	/* hint sessions first: ending one cancels its requests in s->users */
	if (s->hints)
		pf_hints_destroy(s->hints);
	/* what is still queued is dropped: owners hear -ECANCELED */
	for (size_t i = 0; i < s->nusers; i++) {
		struct pf_user *u = s->users[i];

		for (int c = 0; c < PF_NCLASS; c++) {
			struct list_node *n;

			while ((n = list_pop(&u->q[c])))
				req_finish(s, list_entry(n, struct pf_req, qnode), -ECANCELED);
		}
		free(u);
	}
	free(s->users);
	free(s->workers);
	free(s->wt);
	pthread_mutex_destroy(&s->blk);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void pf_get_stats(struct pf_sched *s, struct pf_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!s)
		return;
	st->readahead_fetches = atomic_load(&s->st_kind[PF_KIND_READAHEAD]);
	st->hint_fetches = atomic_load(&s->st_kind[PF_KIND_HINT]);
	st->warmup_fetches = atomic_load(&s->st_kind[PF_KIND_WARMUP]);
	st->stage_fetches = atomic_load(&s->st_kind[PF_KIND_STAGE]);
	st->demand_fetches = atomic_load(&s->st_demand);
	st->fetch_errors = atomic_load(&s->st_errors);
	st->cancelled = atomic_load(&s->st_cancelled);
	st->throttle_ms = atomic_load(&s->st_throttle_ns) / 1000000;
	st->demand_inflight = atomic_load(&s->demand_inflight);
	st->warmup_jobs = (uint64_t)atomic_load(&s->jobs);
	st->hint_sessions = pf_hints_count(s->hints);
	pf_stager_get_stats(s->stager, st);
	pf_engine_get_stats(s->engine, st);
	pthread_mutex_lock(&s->lock);
	st->queued = s->queued;
	st->inflight = s->bg_inflight;
	pthread_mutex_unlock(&s->lock);
}
