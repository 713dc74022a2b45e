/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_table: the stats module's tables of who is counted (users, jobs,
 * reader threads, GPUs: struct stats_ent), their per-second rings, the
 * ticker that samples them and expires gone threads, stats_create /
 * stats_destroy, and snapshots.  Design, lifetime and lock order:
 * src/stats/stats_i.h.
 */
#include "stats_i.h"

#include "json.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK_EVERY	10	/* ticks between full liveness checks of a thread */

const unsigned stats_window_s[STATS_NWIN] = { 1, 10, 60 };
const char *const stats_window_name[STATS_NWIN] = { "1s", "10s", "60s" };

/* ---- small helpers ---- */

static uint32_t hash_str(const char *s, uint32_t seed)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return stats_mix32(h);
}

void stats_clean_name(char *dst, size_t len, const char *src)
{
	size_t o = 0;

	while (*src && o + 1 < len) {
		size_t n = json_utf8_seq(src);

		if (n > 1 && o + n < len) {
			memcpy(dst + o, src, n);
			o += n;
			src += n;
			continue;
		}
		dst[o++] = n == 1 && (unsigned char)*src >= 0x20 && *src != 0x7f ? *src : '_';
		src += n ? n : 1;
	}
	dst[o] = '\0';
}

static void node_totals(struct stats *st, uint64_t *v)
{
	memset(v, 0, sizeof(uint64_t) * STATS_NFIELDS);
	for (int s = 0; s < NSHARDS; s++)
		for (int i = 0; i < STATS_NFIELDS; i++)
			v[i] += atomic_load_explicit(&st->shard[s].c[i], memory_order_relaxed);
}

static void node_only_totals(struct stats *st, uint64_t *v)
{
	memset(v, 0, sizeof(uint64_t) * STATS_NODE_NFIELDS);
	for (int s = 0; s < NSHARDS; s++)
		for (int i = 0; i < STATS_NODE_NFIELDS; i++)
			v[i] += atomic_load_explicit(&st->shard[s].node_only[i],
						     memory_order_relaxed);
}

void stats_node_totals(struct stats *st, uint64_t total[STATS_NFIELDS],
		       uint64_t node_only[STATS_NODE_NFIELDS])
{
	if (!st) {
		memset(total, 0, sizeof(uint64_t) * STATS_NFIELDS);
		memset(node_only, 0, sizeof(uint64_t) * STATS_NODE_NFIELDS);
		return;
	}
	node_totals(st, total);
	node_only_totals(st, node_only);
}

static void ent_load(struct stats_ent *e, uint64_t *v)
{
	for (int i = 0; i < STATS_NFIELDS; i++)
		v[i] = atomic_load_explicit(&e->c[i], memory_order_relaxed);
}

/* ---- rings ---- */

static void ring_init(struct stats_ent *e, uint64_t t)
{
	e->ring_head = 0;
	e->ring_n = 1;
	e->ring_t[0] = t;
	memset(e->ring[0], 0, sizeof(e->ring[0]));
}

static void ring_push(struct stats_ent *e, uint64_t t, const uint64_t *v)
{
	e->ring_head = (e->ring_head + 1) % STATS_RING;
	if (e->ring_n < STATS_RING)
		e->ring_n++;
	e->ring_t[e->ring_head] = t;
	memcpy(e->ring[e->ring_head], v, sizeof(e->ring[0]));
}

/*
 * Rates of @e at @now given its totals @v now.  The base of window W is
 * the newest sample at least W old; an entity younger than W counted
 * nothing before it was created, so its base is zero at now - W (or at
 * @t0, the mount, if that is later).  Under tick_lock.
 */
static void ring_rates(const struct stats_ent *e, uint64_t now, uint64_t t0,
		       const uint64_t *v, double rate[STATS_NWIN][STATS_NFIELDS])
{
	static const uint64_t zero[STATS_NFIELDS];

	for (int w = 0; w < STATS_NWIN; w++) {
		uint64_t want = (uint64_t)stats_window_s[w] * 1000000000ULL;
		uint64_t tb = now > t0 + want ? now - want : t0;
		const uint64_t *base = zero;
		double dt;

		for (unsigned i = 0; i < e->ring_n; i++) {
			unsigned j = (e->ring_head + STATS_RING - i) % STATS_RING;

			if (now >= e->ring_t[j] && now - e->ring_t[j] >= want) {
				tb = e->ring_t[j];
				base = e->ring[j];
				break;
			}
		}
		dt = now > tb ? (double)(now - tb) / 1e9 : 0;
		for (int f = 0; f < STATS_NFIELDS; f++)
			rate[w][f] = dt >= 0.001 && v[f] > base[f] ?
				     (double)(v[f] - base[f]) / dt : 0;
	}
}

/* ---- tables ---- */

static int table_init(struct table *t, uint32_t max)
{
	t->max = max;
	t->nbuckets = 64;
	while (t->nbuckets < max)
		t->nbuckets <<= 1;
	t->bucket = calloc(t->nbuckets, sizeof(*t->bucket));
	if (!t->bucket)
		return -ENOMEM;
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_init(&t->lock[i], NULL);
	return 0;
}

/* What identifies an entity of each kind. */
struct key {
	uint32_t uid;
	pid_t tid;
	int gpu;
	const char *job;
};

static bool ent_match(const struct stats_ent *e, enum stats_kind k, const struct key *key)
{
	switch (k) {
	case STATS_USER:
		return e->uid == key->uid;
	case STATS_JOB:
		return e->uid == key->uid && !strcmp(e->name, key->job);
	case STATS_PROC:
		return e->tid == key->tid && e->uid == key->uid &&
		       !atomic_load_explicit(&e->dead, memory_order_relaxed);
	case STATS_GPU:
		return e->gpu == key->gpu;
	default:
		return false;
	}
}

static uint32_t key_hash(enum stats_kind k, const struct key *key)
{
	switch (k) {
	case STATS_USER:
		return stats_mix32(key->uid);
	case STATS_JOB:
		return hash_str(key->job, key->uid);
	case STATS_PROC:
		return stats_mix32((uint64_t)(uint32_t)key->tid << 32 | key->uid);
	default:
		return stats_mix32((uint64_t)(unsigned)key->gpu);
	}
}

/* Find an entity and take a reference on it; NULL if there is none. */
static struct stats_ent *ent_find(struct stats *st, enum stats_kind k,
				  const struct key *key, uint32_t h)
{
	struct table *t = &st->tab[k];
	uint32_t b = h & (t->nbuckets - 1);
	struct stats_ent *e;

	pthread_mutex_lock(&t->lock[b % NSTRIPES]);
	for (e = t->bucket[b]; e; e = e->next)
		if (e->hash == h && ent_match(e, k, key))
			break;
	if (e)
		atomic_fetch_add(&e->refs, 1);
	pthread_mutex_unlock(&t->lock[b % NSTRIPES]);
	return e;
}


/* A new, unpublished entity with one reference and a zero baseline sample. */
static struct stats_ent *ent_new(enum stats_kind k, uint32_t h)
{
	size_t size = (sizeof(struct stats_ent) + 63) & ~(size_t)63;
	struct stats_ent *e = aligned_alloc(64, size);

	if (!e)
		return NULL;
	memset(e, 0, sizeof(*e));
	e->kind = k;
	e->hash = h;
	atomic_store(&e->refs, 1);
	atomic_store(&e->last_ms, now_ms());
	ring_init(e, now_ns());
	return e;
}

/* Free an entity that was never published, or was just unlinked. */
static void ent_free(struct stats_ent *e)
{
	stats_ent_put(e->user);
	stats_ent_put(e->job);
	free(e);
}

static void warn_full(struct stats *st, enum stats_kind k)
{
	static const char *const what[] = { "users", "jobs", "reader threads", "GPUs" };

	if (!atomic_exchange(&st->warned_full, true))
		log_warn("stats: the table of %s is full: some reads are counted node-wide only",
			 what[k]);
}

/*
 * Publish @e (holding one reference for the caller), unless an entity with
 * the same key appeared meanwhile: then @e is freed and that one returned,
 * referenced.  NULL (and @e freed) when the table is full.
 */
static struct stats_ent *ent_insert(struct stats *st, struct stats_ent *e,
				    const struct key *key)
{
	struct table *t = &st->tab[e->kind];
	uint32_t b = e->hash & (t->nbuckets - 1);
	struct stats_ent *o;
	bool linked = false;

	pthread_mutex_lock(&t->lock[b % NSTRIPES]);
	for (o = t->bucket[b]; o; o = o->next)
		if (o->hash == e->hash && ent_match(o, e->kind, key))
			break;
	if (o) {
		atomic_fetch_add(&o->refs, 1);
	} else if (atomic_load(&t->n) < t->max) {
		e->next = t->bucket[b];
		t->bucket[b] = e;
		atomic_fetch_add(&t->n, 1);
		linked = true;
	}
	pthread_mutex_unlock(&t->lock[b % NSTRIPES]);
	if (linked)
		return e;
	if (!o)
		warn_full(st, e->kind);
	ent_free(e);
	return o;
}

struct stats_ent *stats_user_get(struct stats *st, uint32_t uid)
{
	struct key key = { .uid = uid };
	uint32_t h = key_hash(STATS_USER, &key);
	struct stats_ent *e = ent_find(st, STATS_USER, &key, h);
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (e)
		return e;
	e = ent_new(STATS_USER, h);
	if (!e)
		return NULL;
	e->uid = uid;
	if (!getpwuid_r(uid, &pw, buf, sizeof(buf), &res) && res)
		stats_clean_name(e->name, sizeof(e->name), res->pw_name);
	else
		snprintf(e->name, sizeof(e->name), "%u", uid);
	return ent_insert(st, e, &key);
}

struct stats_ent *stats_job_get(struct stats *st, struct stats_ent *user,
				 const char *name)
{
	char clean[PROCINFO_JOB_MAX];
	struct key key = { .uid = user->uid, .job = clean };
	uint32_t h;
	struct stats_ent *e;

	stats_clean_name(clean, sizeof(clean), name && name[0] ? name : "unknown");
	h = key_hash(STATS_JOB, &key);
	e = ent_find(st, STATS_JOB, &key, h);
	if (e)
		return e;
	e = ent_new(STATS_JOB, h);
	if (!e)
		return NULL;
	e->uid = user->uid;
	memcpy(e->name, clean, sizeof(clean));
	atomic_fetch_add(&user->refs, 1);
	e->user = user;
	return ent_insert(st, e, &key);
}

static struct stats_ent *proc_get(struct stats *st, pid_t tid, uint32_t uid, bool known)
{
	struct key key = { .uid = uid, .tid = tid };
	uint32_t h = key_hash(STATS_PROC, &key);
	struct stats_ent *e = ent_find(st, STATS_PROC, &key, h), *user, *job;
	struct procinfo pi;

	if (e)
		return e;
	if (tid <= 0 || procinfo_read(tid, &pi)) {
		if (known)
			return NULL;
		/* gone already, or in another pid namespace (FUSE sends 0) */
		memset(&pi, 0, sizeof(pi));
		pi.tid = pi.tgid = tid;
		snprintf(pi.comm, sizeof(pi.comm), "?");
		snprintf(pi.job, sizeof(pi.job), "unknown");
	}
	user = stats_user_get(st, uid);
	if (!user)
		return NULL;
	job = stats_job_get(st, user, pi.job);
	if (!job) {
		stats_ent_put(user);
		return NULL;
	}
	e = ent_new(STATS_PROC, h);
	if (!e) {
		stats_ent_put(job);
		stats_ent_put(user);
		return NULL;
	}
	e->uid = uid;
	e->tid = tid;
	e->tgid = pi.tgid;
	e->start = pi.start;
	stats_clean_name(e->comm, sizeof(e->comm), pi.comm);
	e->user = user;
	e->job = job;
	e->check = CHECK_EVERY;
	return ent_insert(st, e, &key);
}

struct stats_ent *stats_proc_get(struct stats *st, pid_t tid, uint32_t uid)
{
	return proc_get(st, tid, uid, false);
}

struct stats_ent *stats_proc_get_known(struct stats *st, pid_t tid, uint32_t uid)
{
	return proc_get(st, tid, uid, true);
}

struct stats_ent *stats_gpu_get(struct stats *st, int gpu)
{
	struct key key = { .gpu = gpu };
	uint32_t h = key_hash(STATS_GPU, &key);
	struct stats_ent *g = ent_find(st, STATS_GPU, &key, h);

	if (g)
		return g;
	g = ent_new(STATS_GPU, h);
	if (!g)
		return NULL;
	g->gpu = gpu;
	return ent_insert(st, g, &key);
}

/* ---- ticker ---- */

/* Every entity of kind @k, in *@out (malloc'ed).  Under tick_lock. */
static int collect(struct stats *st, enum stats_kind k, struct stats_ent ***out,
		   size_t *n)
{
	struct table *t = &st->tab[k];
	size_t cap = atomic_load(&t->n) + 16, cnt = 0;
	struct stats_ent **v = malloc(cap * sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (uint32_t s = 0; s < NSTRIPES; s++) {
		pthread_mutex_lock(&t->lock[s]);
		for (uint32_t b = s; b < t->nbuckets; b += NSTRIPES) {
			for (struct stats_ent *e = t->bucket[b]; e; e = e->next) {
				if (cnt == cap) {
					struct stats_ent **nv = realloc(v, 2 * cap * sizeof(*v));

					if (!nv) {
						pthread_mutex_unlock(&t->lock[s]);
						free(v);
						return -ENOMEM;
					}
					v = nv;
					cap *= 2;
				}
				v[cnt++] = e;
			}
		}
		pthread_mutex_unlock(&t->lock[s]);
	}
	*out = v;
	*n = cnt;
	return 0;
}

/* Unlink @e if nobody references it.  Under tick_lock.  True if unlinked. */
static bool ent_unlink_idle(struct stats *st, struct stats_ent *e)
{
	struct table *t = &st->tab[e->kind];
	uint32_t b = e->hash & (t->nbuckets - 1);
	bool done = false;

	pthread_mutex_lock(&t->lock[b % NSTRIPES]);
	if (!atomic_load(&e->refs)) {
		for (struct stats_ent **pp = &t->bucket[b]; *pp; pp = &(*pp)->next) {
			if (*pp == e) {
				*pp = e->next;
				atomic_fetch_sub(&t->n, 1);
				done = true;
				break;
			}
		}
	}
	pthread_mutex_unlock(&t->lock[b % NSTRIPES]);
	return done;
}

/* agg of every user and job := the sum of its threads.  Under tick_lock. */
static void aggregate(struct stats_ent **users, size_t nu, struct stats_ent **jobs,
		      size_t nj, struct stats_ent **procs, size_t np)
{
	for (size_t i = 0; i < nu; i++)
		memset(users[i]->agg, 0, sizeof(users[i]->agg));
	for (size_t i = 0; i < nj; i++)
		memset(jobs[i]->agg, 0, sizeof(jobs[i]->agg));
	for (size_t i = 0; i < np; i++) {
		uint64_t v[STATS_NFIELDS];

		ent_load(procs[i], v);
		for (int f = 0; f < STATS_NFIELDS; f++) {
			procs[i]->user->agg[f] += v[f];
			procs[i]->job->agg[f] += v[f];
		}
	}
}

/* Totals of @e now: its own counters, plus its threads' for users and jobs. */
static void ent_totals(struct stats_ent *e, uint64_t *v)
{
	ent_load(e, v);
	if (e->kind == STATS_USER || e->kind == STATS_JOB)
		for (int f = 0; f < STATS_NFIELDS; f++)
			v[f] += e->agg[f];
}

static int cmp_last_ms(const void *a, const void *b)
{
	uint64_t x = atomic_load(&(*(struct stats_ent *const *)a)->last_ms);
	uint64_t y = atomic_load(&(*(struct stats_ent *const *)b)->last_ms);

	return x < y ? -1 : x > y;
}

/* Drop the least recently active unreferenced entities of a 7/8 full table. */
static void trim(struct stats *st, struct stats_ent **v, size_t n, enum stats_kind k)
{
	struct table *t = &st->tab[k];

	if (atomic_load(&t->n) <= t->max / 8 * 7)
		return;
	qsort(v, n, sizeof(*v), cmp_last_ms);
	for (size_t i = 0; i < n && atomic_load(&t->n) > t->max / 4 * 3; i++) {
		if (ent_unlink_idle(st, v[i])) {
			ent_free(v[i]);
			v[i] = NULL;
		}
	}
}

static void tick_locked(struct stats *st)
{
	struct stats_ent **k[STATS_NKINDS] = { 0 };
	size_t n[STATS_NKINDS] = { 0 };
	uint64_t now = now_ns(), v[STATS_NFIELDS];
	bool ok = true;

	st->ticks++;
	node_totals(st, v);
	ring_push(&st->node, now, v);

	for (int i = 0; i < STATS_NKINDS; i++)
		ok = ok && !collect(st, (enum stats_kind)i, &k[i], &n[i]);
	if (!ok)
		goto out;

	/* reader threads: liveness, then fold and free the long gone */
	for (size_t i = 0; i < n[STATS_PROC]; i++) {
		struct stats_ent *e = k[STATS_PROC][i];
		bool alive;

		if (!atomic_load(&e->dead)) {
			if (!e->start) {
				alive = stats_ms_of(now) - atomic_load(&e->last_ms) <
					st->opts.proc_keep_s * 1000ULL;
			} else if (--e->check == 0) {
				e->check = CHECK_EVERY;
				alive = procinfo_alive(e->tgid, e->tid, e->start);
			} else {
				alive = procinfo_running(e->tgid, e->tid);
			}
			if (!alive) {
				atomic_store(&e->dead, true);
				e->dead_ms = stats_ms_of(now);
			}
		}
		if (atomic_load(&e->dead) &&
		    stats_ms_of(now) - e->dead_ms >= st->opts.proc_keep_s * 1000ULL &&
		    ent_unlink_idle(st, e)) {
			ent_load(e, v);
			stats_add_fields(e->user->c, v);
			stats_add_fields(e->job->c, v);
			ent_free(e);
			k[STATS_PROC][i] = k[STATS_PROC][--n[STATS_PROC]];
			i--;
		}
	}
	for (size_t i = 0; i < n[STATS_PROC]; i++) {
		ent_load(k[STATS_PROC][i], v);
		ring_push(k[STATS_PROC][i], now, v);
	}
	aggregate(k[STATS_USER], n[STATS_USER], k[STATS_JOB], n[STATS_JOB],
		  k[STATS_PROC], n[STATS_PROC]);
	for (int kind = STATS_USER; kind < STATS_NKINDS; kind++) {
		if (kind == STATS_PROC)
			continue;
		for (size_t i = 0; i < n[kind]; i++) {
			ent_totals(k[kind][i], v);
			ring_push(k[kind][i], now, v);
		}
	}
	/* jobs first: they hold references on users */
	trim(st, k[STATS_JOB], n[STATS_JOB], STATS_JOB);
	trim(st, k[STATS_USER], n[STATS_USER], STATS_USER);
out:
	for (int i = 0; i < STATS_NKINDS; i++)
		free(k[i]);
}

void stats_tick(struct stats *st)
{
	pthread_mutex_lock(&st->tick_lock);
	tick_locked(st);
	pthread_mutex_unlock(&st->tick_lock);
}

static void *ticker_main(void *arg)
{
	struct stats *st = arg;
	uint64_t next = st->start_ns;

	pthread_mutex_lock(&st->stop_lock);
	while (!st->stop) {
		next += 1000000000ULL;
		if (next < now_ns())
			next = now_ns();	/* we fell behind: no burst of ticks */
		while (!st->stop && cond_wait_until_ns(&st->stop_cond, &st->stop_lock, next) == 0)
			;
		if (st->stop)
			break;
		pthread_mutex_unlock(&st->stop_lock);
		stats_tick(st);
		pthread_mutex_lock(&st->stop_lock);
	}
	pthread_mutex_unlock(&st->stop_lock);
	return NULL;
}

int stats_create(const struct stats_opts *opts, struct stats **out)
{
	struct stats *st = aligned_alloc(128, (sizeof(*st) + 127) & ~(size_t)127);
	int ret = -ENOMEM;

	if (!st)
		return -ENOMEM;
	memset(st, 0, sizeof(*st));
	if (opts)
		st->opts = *opts;
	if (!st->opts.max_procs)
		st->opts.max_procs = 4096;
	if (!st->opts.max_jobs)
		st->opts.max_jobs = 4096;
	if (!st->opts.max_users)
		st->opts.max_users = 1024;
	if (!st->opts.max_gpus)
		st->opts.max_gpus = 256;
	if (!st->opts.proc_keep_s)
		st->opts.proc_keep_s = 60;
	if (!st->opts.idle_gap_ns)
		st->opts.idle_gap_ns = 2000000000ULL;
	if (table_init(&st->tab[STATS_USER], st->opts.max_users) ||
	    table_init(&st->tab[STATS_JOB], st->opts.max_jobs) ||
	    table_init(&st->tab[STATS_PROC], st->opts.max_procs) ||
	    table_init(&st->tab[STATS_GPU], st->opts.max_gpus))
		goto out_free;
	st->start_ns = now_ns();
	ring_init(&st->node, st->start_ns);
	pthread_mutex_init(&st->tick_lock, NULL);
	pthread_mutex_init(&st->stop_lock, NULL);
	cond_init_monotonic(&st->stop_cond);
	if (!st->opts.no_ticker) {
		ret = -pthread_create(&st->ticker, NULL, ticker_main, st);
		if (ret)
			goto out_free;
		st->ticker_running = true;
	}
	*out = st;
	return 0;

out_free:
	for (int i = 0; i < STATS_NKINDS; i++)
		free(st->tab[i].bucket);
	free(st);
	return ret;
}

void stats_destroy(struct stats *st)
{
	if (!st)
		return;
	if (st->ticker_running) {
		pthread_mutex_lock(&st->stop_lock);
		st->stop = true;
		pthread_cond_signal(&st->stop_cond);
		pthread_mutex_unlock(&st->stop_lock);
		pthread_join(st->ticker, NULL);
	}
	/* every entity goes: no need to drop the references between them */
	for (int k = 0; k < STATS_NKINDS; k++) {
		struct table *t = &st->tab[k];

		for (uint32_t b = 0; b < t->nbuckets; b++) {
			while (t->bucket[b]) {
				struct stats_ent *e = t->bucket[b];

				t->bucket[b] = e->next;
				free(e);
			}
		}
		free(t->bucket);
	}
	pthread_mutex_destroy(&st->tick_lock);
	free(st);
}

/* ---- snapshots ---- */

static int cmp_row(const void *a, const void *b)
{
	const struct stats_row *x = a, *y = b;

	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	switch (x->kind) {
	case STATS_GPU:
		return x->gpu < y->gpu ? -1 : x->gpu > y->gpu;
	case STATS_PROC:
		if (x->pid != y->pid)
			return x->pid < y->pid ? -1 : 1;
		break;
	default:
		break;
	}
	if (x->uid != y->uid)
		return x->uid < y->uid ? -1 : 1;
	return strcmp(x->job, y->job);
}

static void row_fill(struct stats_row *r, struct stats_ent *e, uint64_t now, uint64_t t0)
{
	memset(r, 0, sizeof(*r));
	r->kind = e->kind;
	r->uid = e->uid;
	r->gpu = e->gpu;
	ent_totals(e, r->total);
	ring_rates(e, now, t0, r->total, r->rate);
	switch (e->kind) {
	case STATS_USER:
		snprintf(r->user, sizeof(r->user), "%s", e->name);
		break;
	case STATS_JOB:
		snprintf(r->user, sizeof(r->user), "%s", e->user->name);
		memcpy(r->job, e->name, sizeof(r->job));
		break;
	case STATS_PROC:
		snprintf(r->user, sizeof(r->user), "%s", e->user->name);
		memcpy(r->job, e->job->name, sizeof(r->job));
		memcpy(r->comm, e->comm, sizeof(r->comm));
		r->pid = e->tgid;
		r->threads = 1;
		r->alive = !atomic_load(&e->dead);
		break;
	default:
		break;
	}
}

int stats_snapshot(struct stats *st, struct stats_snap **out)
{
	struct stats_ent **k[STATS_NKINDS] = { 0 };
	size_t n[STATS_NKINDS] = { 0 }, total = 0, o = 0;
	struct stats_snap *s = calloc(1, sizeof(*s));
	uint64_t now;
	int ret = 0;

	if (!s)
		return -ENOMEM;
	pthread_mutex_lock(&st->tick_lock);
	for (int i = 0; i < STATS_NKINDS && !ret; i++) {
		ret = collect(st, (enum stats_kind)i, &k[i], &n[i]);
		total += n[i];
	}
	if (!ret) {
		s->rows = calloc(total ? total : 1, sizeof(*s->rows));
		ret = s->rows ? 0 : -ENOMEM;
	}
	if (ret)
		goto out_unlock;
	now = now_ns();
	aggregate(k[STATS_USER], n[STATS_USER], k[STATS_JOB], n[STATS_JOB],
		  k[STATS_PROC], n[STATS_PROC]);
	s->uptime_ms = stats_ms_of(now - st->start_ns);
	s->untracked_reads = atomic_load(&st->untracked);
	node_totals(st, s->node.total);
	node_only_totals(st, s->node_only);
	ring_rates(&st->node, now, st->start_ns, s->node.total, s->node.rate);
	for (int i = 0; i < STATS_NKINDS; i++)
		for (size_t j = 0; j < n[i]; j++)
			row_fill(&s->rows[o++], k[i][j], now, st->start_ns);
out_unlock:
	pthread_mutex_unlock(&st->tick_lock);
	for (int i = 0; i < STATS_NKINDS; i++)
		free(k[i]);
	if (ret) {
		stats_snap_free(s);
		return ret;
	}
	qsort(s->rows, o, sizeof(*s->rows), cmp_row);
	/* merge the threads of one process (same pid and uid) */
	s->nrows = 0;
	for (size_t i = 0; i < o; i++) {
		struct stats_row *d = s->nrows ? &s->rows[s->nrows - 1] : NULL;
		struct stats_row *r = &s->rows[i];

		if (d && r->kind == STATS_PROC && d->kind == STATS_PROC &&
		    d->pid == r->pid && d->uid == r->uid) {
			for (int f = 0; f < STATS_NFIELDS; f++) {
				d->total[f] += r->total[f];
				for (int w = 0; w < STATS_NWIN; w++)
					d->rate[w][f] += r->rate[w][f];
			}
			d->threads++;
			d->alive = d->alive || r->alive;
			continue;
		}
		if (s->nrows != i)
			s->rows[s->nrows] = *r;
		s->nrows++;
	}
	for (size_t i = 0; i < s->nrows; i++)
		s->nkind[s->rows[i].kind]++;
	*out = s;
	return 0;
}

void stats_snap_free(struct stats_snap *snap)
{
	if (!snap)
		return;
	free(snap->rows);
	free(snap);
}

double stats_hit_ratio(const uint64_t *v)
{
	uint64_t d = v[STATS_HITS] + v[STATS_MISSES];

	return d ? (double)v[STATS_HITS] / (double)d : -1;
}

double stats_stall_ratio(const uint64_t *v)
{
	if (!v[STATS_ACTIVE_NS])
		return -1;
	if (v[STATS_STALL_NS] >= v[STATS_ACTIVE_NS])
		return 1;
	return (double)v[STATS_STALL_NS] / (double)v[STATS_ACTIVE_NS];
}
