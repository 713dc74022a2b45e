/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stage: when a user reads a dataset as an epoch, stage the rest of it in
 * the background, with no hint from the reader.
 *
 * A shuffled DataLoader opens every file of the dataset once per epoch, in
 * an order nobody told us: readahead sees one small file at a time and
 * every file is a demand fetch, while a warmup of the same dataset runs
 * many fetches at once.  This module notices the pattern and runs that
 * warmup itself.
 *
 * The detector, per (dataset, uid): a window of the files the uid opened
 * in the dataset.  Each open of a regular file (OPEN, the first READ of a
 * file in no-open mode, a client library's CACHE_FD) counts; the window
 * holds the set of distinct files and the number of opens.  When the set
 * reaches stage_files (epoch_staging_files) files with re-opens at most a
 * quarter of that, it is an epoch; as soon as the re-opens pass a quarter
 * of stage_files, or no open came for stage_idle_ms, the window starts
 * over.  A reader of a small working set, or one that re-reads a few files
 * often, never fires it.  The window's set is an open-addressed array of
 * 2 * stage_files slots, made when the first file is counted and freed
 * when the window fires or is given up: what an idle (dataset, uid) costs
 * is its 100-byte record.  Jobs of one uid share a detector and a staging:
 * the cache charges and limits by uid.
 *
 * When it fires: with epoch_staging = auto the dataset's bytes
 * (backend statfs) must fit the user's share of the cache, min(their
 * quota, the cache's capacity), else it is declined (logged) and not
 * looked at again while the readers go on; with `on` that test is skipped.  A
 * thread then runs a walk job (job.c, opts.stage) over the dataset
 * for the uid, with the uid's credential (primary group only: a file only
 * a supplementary group may read is left to the reader), so:
 *   - its requests are queued at PF_CLASS_STAGE, after demand fetches,
 *     readahead, hints and warmup, within prefetch_user_inflight and
 *     backend_max_rate, as any background work;
 *   - its chunks are charged to the uid, and admitted only where they fit
 *     the uid's quota and the cache with no eviction at all (nothrash), so
 *     staging never pushes out another user's chunks, nor the reader's own;
 *   - chunks present, or being fetched by the readers, are not fetched
 *     twice.
 * It stops when the dataset is staged (complete), when the uid opened
 * nothing in the dataset for stage_idle_ms (the readers stopped), when a
 * staged chunk did not fit (no room), or
 * at shutdown; each start and stop is one log line saying why.  After a
 * staging that completed or ran out of room, and after a decline, the
 * detector rests while the readers go on (until a pause of stage_idle_ms,
 * at most REST_MS), then counts again: a next epoch runs a new job, which
 * only walks the metadata when everything is still cached.
 *
 * Bounds: 4,096 (dataset, uid) pairs are followed, 64 of one uid; 16
 * stagings run at once, 4 of one uid, so no user can take the table or
 * every staging from the others.
 *
 * Locking: g->lock guards the table of detectors and each one's state.
 * Deciding to stage takes c->lock under it (the quota and the capacity,
 * once per epoch seen); nothing else is taken under it.  A staging thread
 * takes it only to read and set its own record.  Threads: one per staging
 * running (at most MAX_STAGINGS), joined by the next staging of the same
 * record or by pf_stager_destroy().
 */
#include "prefetch_i.h"

#include "config.h"
#include "htab.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TRACKS		4096	/* (dataset, uid) pairs followed */
#define MAX_STAGINGS		16	/* stagings running at once */
#define MAX_USER_TRACKS		64	/* ... of one uid: no user fills the table */
#define MAX_USER_STAGINGS	4	/* ... or takes every staging slot */
#define REST_MS			(10 * 60 * 1000ULL)
#define TICK_MS			100

enum track_state {
	T_DETECT,	/* counting opens */
	T_STAGING,	/* a thread stages the dataset */
	T_ENDED,	/* the thread is done: join it, then detect */
	T_RESTING,	/* staged, declined or out of room: nothing until rest_until */
};

enum stop_why { WHY_NONE, WHY_IDLE, WHY_FULL, WHY_SHUTDOWN };

struct track {
	struct pf_stager *g;
	struct backend *be;
	const char *name;		/* the dataset's, for log lines */
	uint32_t uid, gid;
	uint32_t owner;			/* charged: a tenant, or the uid */
	/* protected by g->lock */
	enum track_state state;
	uint64_t last_open_ms;
	uint64_t rest_until_ms;
	bool rest;			/* T_ENDED: rest next, not detect */
	uint32_t opens, distinct;
	uint64_t *seen;			/* bino + 1; 0 = empty; NULL until needed */
	bool joinable;
	pthread_t thread;
	/* the staging thread's own */
	enum stop_why why;
};

struct pf_stager {
	struct pf_sched *s;
	pthread_mutex_t lock;
	struct track **t;		/* protected by lock */
	size_t n, cap;			/* protected by lock */
	uint32_t running;		/* protected by lock */
	bool stop;			/* protected by lock */
	_Atomic uint64_t st_started, st_complete, st_stopped, st_declined;
	_Atomic uint64_t st_files, st_bytes;
};

struct pf_stager *pf_stager_create(struct pf_sched *s)
{
	struct pf_stager *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->s = s;
	pthread_mutex_init(&g->lock, NULL);
	return g;
}

void pf_stager_get_stats(struct pf_stager *g, struct pf_stats *st)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	st->stage_active = g->running;
	pthread_mutex_unlock(&g->lock);
	st->stage_started = atomic_load(&g->st_started);
	st->stage_complete = atomic_load(&g->st_complete);
	st->stage_stopped = atomic_load(&g->st_stopped);
	st->stage_declined = atomic_load(&g->st_declined);
	st->staged_files = atomic_load(&g->st_files);
	st->staged_bytes = atomic_load(&g->st_bytes);
}

static uint32_t seen_slots(const struct pf_stager *g)
{
	uint32_t n = 16;

	while (n < 2 * pf_opts(g->s)->stage_files)
		n *= 2;
	return n;
}

static void window_reset(struct track *t)
{
	free(t->seen);
	t->seen = NULL;
	t->opens = t->distinct = 0;
}

/* Add @bino to the window.  True if it was not in it. */
static bool window_add(struct track *t, uint64_t bino)
{
	uint32_t n = seen_slots(t->g), i;

	if (!t->seen && !(t->seen = calloc(n, sizeof(*t->seen))))
		return false;	/* no memory: count nothing */
	for (i = (uint32_t)htab_hash_u64(bino) & (n - 1);; i = (i + 1) & (n - 1)) {
		if (t->seen[i] == bino + 1)
			return false;
		if (!t->seen[i])
			break;
	}
	t->seen[i] = bino + 1;	/* never full: distinct < stage_files < n */
	return true;
}

static struct track *track_get_locked(struct pf_stager *g, struct backend *be,
				      const char *name, uint32_t uid, uint32_t gid,
				      uint32_t owner)
{
	struct track *t;
	uint32_t mine = 0;

	if (!name || !*name)
		name = be->uri;	/* a single-dataset mount */
	for (size_t i = 0; i < g->n; i++) {
		if (g->t[i]->uid != uid)
			continue;
		if (g->t[i]->be == be && g->t[i]->owner == owner)
			return g->t[i];
		mine++;
	}
	if (g->n >= MAX_TRACKS || mine >= MAX_USER_TRACKS)
		return NULL;
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		struct track **nt = realloc(g->t, cap * sizeof(*nt));

		if (!nt)
			return NULL;
		g->t = nt;
		g->cap = cap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->g = g;
	t->be = be;
	t->name = name;
	t->uid = uid;
	t->gid = gid;
	t->owner = owner;
	g->t[g->n++] = t;
	return t;
}

/* The staging job's tick: false stops it (t->why says why). */
static bool stage_tick(void *arg)
{
	struct track *t = arg;
	struct pf_stager *g = t->g;
	uint64_t idle_ms;

	if (t->why != WHY_NONE)
		return false;
	pthread_mutex_lock(&g->lock);
	idle_ms = now_ms() - t->last_open_ms;
	if (g->stop)
		t->why = WHY_SHUTDOWN;
	else if (idle_ms > pf_opts(g->s)->stage_idle_ms)
		t->why = WHY_IDLE;
	pthread_mutex_unlock(&g->lock);
	return t->why == WHY_NONE;
}

/* Refresh *@p from @j and add what it staged since to the counters. */
static void count_progress(struct pf_stager *g, struct pf_job *j, struct pf_job_progress *p)
{
	uint64_t files = p->fetched_files, bytes = p->fetched_bytes;

	pf_job_get_progress(j, p);
	atomic_fetch_add(&g->st_files, p->fetched_files - files);
	atomic_fetch_add(&g->st_bytes, p->fetched_bytes - bytes);
}

static void *stage_main(void *arg)
{
	struct track *t = arg;
	struct pf_stager *g = t->g;
	struct pf_job_opts o = {
		.mode = PF_JOB_FETCH,
		.stage = true,
		.tick = stage_tick,
		.tick_arg = t,
		.tick_ms = TICK_MS,
	};
	struct pf_job_root root = {
		.be = t->be,
		.ino = SFS_ROOT_INO,
		.path = t->name,
		.nothrash = true,
	};
	struct pf_job_progress p = { 0 };
	struct pf_job *j;
	char b1[32], b2[32];
	const char *why;
	bool complete = false;
	int ret;

	cred_init(&o.cred, t->uid, t->gid, 0, NULL, 0);
	o.owner = t->owner;
	ret = pf_job_create(g->s, &o, &j);
	if (ret) {
		log_warn("epoch staging: dataset %s, uid %u: cannot start: %s", t->name,
			 t->uid, strerror(-ret));
		t->why = WHY_SHUTDOWN;
		goto out;
	}
	pf_job_run(j, &root, 1);
	for (;;) {
		bool settled = pf_job_wait(j, TICK_MS);

		count_progress(g, j, &p);
		if (p.nospace && t->why == WHY_NONE)
			t->why = WHY_FULL;
		if (settled)
			break;
		if (!stage_tick(t))
			pf_job_cancel(j);	/* what is in flight finishes */
	}
	count_progress(g, j, &p);
	pf_job_destroy(j);
	complete = t->why == WHY_NONE && p.walk_done && !p.failed && !p.failed_files;
	atomic_fetch_add(complete ? &g->st_complete : &g->st_stopped, 1);
	switch (t->why) {
	case WHY_IDLE:
		why = "stopped: its readers stopped";
		break;
	case WHY_FULL:
		why = "stopped: no room left in the user's quota or the cache";
		break;
	case WHY_SHUTDOWN:
		why = "stopped: shutting down";
		break;
	default:
		why = complete ? "complete" : "ended: some files could not be staged";
		break;
	}
	log_notice("epoch staging: dataset %s, uid %u: %s; %" PRIu64 " files, %s staged "
		   "in %.1f s (%s of %" PRIu64 " files were cached before)",
		   t->name, t->uid, why, p.fetched_files,
		   fmt_size(p.fetched_bytes, b1, sizeof(b1)), (double)p.elapsed_ms / 1000,
		   fmt_size(p.cached_before_bytes, b2, sizeof(b2)), p.files);
out:
	pthread_mutex_lock(&g->lock);
	g->running--;
	t->state = T_ENDED;
	/*
	 * Staged (or out of room): this epoch needs nothing more.  Rest while
	 * its readers go on (a pause of stage_idle_ms ends it), at most
	 * REST_MS, then look again: their next epoch may find chunks gone.
	 */
	t->rest = complete || t->why == WHY_FULL;
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

/* Under g->lock: the stagings of @uid running now. */
static uint32_t running_of(const struct pf_stager *g, uint32_t uid)
{
	uint32_t n = 0;

	for (size_t i = 0; i < g->n; i++)
		n += g->t[i]->uid == uid && g->t[i]->state == T_STAGING;
	return n;
}

/*
 * Under g->lock: the window of @t says epoch.  Decide, and start the
 * staging thread.
 */
static void fire_locked(struct pf_stager *g, struct track *t, int mode)
{
	struct cache_stats cs;
	uint64_t bytes = 0, files = 0, quota, share;
	char b1[32], b2[32];
	int sret, ret;

	window_reset(t);
	if (g->running >= MAX_STAGINGS || running_of(g, t->uid) >= MAX_USER_STAGINGS)
		return;	/* the window starts over: tried again later */
	sret = t->be->ops->statfs ? t->be->ops->statfs(t->be, &bytes, &files) : -ENOTSUP;
	if (sret == -EAGAIN) {
		/*
		 * The size is not known yet (a dir:// dataset's first scan
		 * runs): not a decline; the window counts again and the next
		 * epoch-like window asks again.
		 */
		log_debug("epoch staging: dataset %s, uid %u: read as an epoch; its size is not known yet",
			  t->name, t->uid);
		return;
	}
	quota = cache_user_limit(pf_cache(g->s), t->owner);
	cache_get_stats(pf_cache(g->s), &cs);
	share = MIN(quota, cs.limit_bytes);
	if (mode == CFG_AUTO && (sret || bytes > share)) {
		atomic_fetch_add(&g->st_declined, 1);
		t->state = T_RESTING;
		t->rest_until_ms = now_ms() + REST_MS;
		if (sret)
			log_notice("epoch staging: dataset %s, uid %u: read as an epoch, not "
				   "staged: its size is unknown (epoch_staging = on stages it "
				   "anyway)", t->name, t->uid);
		else
			log_notice("epoch staging: dataset %s, uid %u: read as an epoch, not "
				   "staged: %s is more than the user's share of the cache (%s)",
				   t->name, t->uid, fmt_size(bytes, b1, sizeof(b1)),
				   fmt_size(share, b2, sizeof(b2)));
		return;
	}
	t->why = WHY_NONE;
	t->state = T_STAGING;
	ret = -pthread_create(&t->thread, NULL, stage_main, t);
	if (ret) {
		t->state = T_DETECT;
		log_warn("epoch staging: cannot start a thread: %s", strerror(-ret));
		return;
	}
	t->joinable = true;
	g->running++;
	atomic_fetch_add(&g->st_started, 1);
	log_notice("epoch staging: dataset %s, uid %u: read as an epoch (%u distinct files "
		   "opened): staging the rest of it (dataset %s, the user's share %s)",
		   t->name, t->uid, pf_opts(g->s)->stage_files,
		   sret ? "size unknown" : fmt_size(bytes, b1, sizeof(b1)),
		   share == UINT64_MAX ? "unlimited" : fmt_size(share, b2, sizeof(b2)));
}

void pf_stage_open(struct pf_sched *s, struct backend *be, const char *name,
		   int mode, uint32_t uid, uint32_t gid, uint32_t owner, uint64_t bino)
{
	struct pf_stager *g = s ? s->stager : NULL;
	uint32_t want;
	struct track *t;
	pthread_t old = 0;
	bool join = false;
	uint64_t now;

	if (!g || mode == CFG_OFF || !(want = pf_opts(s)->stage_files))
		return;
	pthread_mutex_lock(&g->lock);
	/*
	 * Under the lock: read before it, a thread that waited for the lock
	 * would hold a time older than the last open another thread noted,
	 * and now - last_open_ms would wrap into "idle", ending a rest.
	 */
	now = now_ms();
	if (g->stop || !(t = track_get_locked(g, be, name, uid, gid,
							 cache_owner_or_uid(owner, uid))))
		goto out;
	if (t->state == T_STAGING) {
		t->last_open_ms = now;
		goto out;
	}
	if (t->state == T_ENDED) {
		/* its thread has returned or is about to: join it outside the lock */
		old = t->thread;
		join = t->joinable;
		t->joinable = false;
		t->state = t->rest ? T_RESTING : T_DETECT;
		t->rest_until_ms = now + REST_MS;
		t->last_open_ms = now;
		window_reset(t);
	}
	if (t->state == T_RESTING) {
		/* until the readers pause, or REST_MS */
		if (now < t->rest_until_ms &&
		    now - t->last_open_ms <= pf_opts(s)->stage_idle_ms) {
			t->last_open_ms = now;
			goto out;
		}
		t->state = T_DETECT;
		window_reset(t);
	}
	if (t->opens && now - t->last_open_ms > pf_opts(s)->stage_idle_ms)
		window_reset(t);
	t->last_open_ms = now;
	t->gid = gid;
	t->opens++;
	if (window_add(t, bino))
		t->distinct++;
	if ((uint64_t)(t->opens - t->distinct) * 4 > want)
		window_reset(t);	/* too many re-opens for an epoch */
	else if (t->distinct >= want)
		fire_locked(g, t, mode);
out:
	pthread_mutex_unlock(&g->lock);
	if (join)
		pthread_join(old, NULL);
}

void pf_stager_destroy(struct pf_stager *g)
{
	pthread_mutex_lock(&g->lock);
	g->stop = true;
	pthread_mutex_unlock(&g->lock);
	/* no track is added or started once stop is set: the table is ours */
	for (size_t i = 0; i < g->n; i++) {
		struct track *t = g->t[i];

		if (t->joinable)
			pthread_join(t->thread, NULL);
		free(t->seen);
		free(t);
	}
	free(g->t);
	pthread_mutex_destroy(&g->lock);
	free(g);
}
