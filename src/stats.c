/*
 * stats: see stats.h.
 *
 * Layout.  Every counted thing (user, job, reader thread, GPU) is a struct
 * stats_ent in one of four hash tables.  A table's buckets are guarded by
 * NSTRIPES mutexes (bucket % NSTRIPES), taken only to find, insert or
 * unlink; counters are atomics written without locks.  Node-wide totals
 * live in NSHARDS cache-line-aligned shards, one picked per worker thread,
 * and are summed when read.
 *
 * Lifetime.  An entity is referenced by open files (reader threads), by
 * reader threads (their user and job) and by jobs (their user).  Only the
 * ticker frees, under tick_lock, an entity nobody references: a reader
 * thread gone for proc_keep_s (its counts are first folded into its user
 * and job, so their totals do not move), or, when a table is 7/8 full, the
 * least recently active users and jobs.  Snapshots also hold tick_lock, so
 * they never see a half-folded count.  Lock order: tick_lock, then a
 * stripe.
 *
 * Stall detection.  A fill of chunk i of file F adds 1 to the started
 * count and 1 to the running count of slot hash(F, i) of a small array.
 * A READ notes the slots of its chunks when it begins; it stalled if one
 * was running then, or if one was started while it ran (it fetched, or it
 * waited on another reader's fetch of a chunk it needed).  Slot collisions
 * can only make a READ look stalled, never hide one.
 */
#include "stats.h"

#include "json.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NSTRIPES	64
#define NSHARDS		16
#define FILL_SLOTS	4096	/* power of two */
#define FILL_SCAN	256	/* chunks of one READ looked at: a READ is <= 1 MiB, a chunk >= 4 KiB */
#define CHECK_EVERY	10	/* ticks between full liveness checks of a thread */

const unsigned stats_window_s[STATS_NWIN] = { 1, 10, 60 };
const char *const stats_window_name[STATS_NWIN] = { "1s", "10s", "60s" };

struct stats_ent {
	struct stats_ent *next;		/* hash chain: protected by the stripe lock */
	enum stats_kind kind;
	uint32_t hash;
	uint32_t uid;
	int gpu;
	pid_t tid, tgid;
	uint64_t start;			/* threads: 0 = could not be identified */
	char name[PROCINFO_JOB_MAX];	/* users: user name; jobs: job name */
	char comm[17];			/* threads */
	struct stats_ent *user, *job;	/* threads: both; jobs: user (references) */
	_Atomic uint32_t refs;
	_Atomic bool dead;		/* threads: gone (set by the ticker) */
	_Atomic uint64_t last_ms;	/* last activity */

	/* protected by st->tick_lock */
	uint64_t dead_ms;
	uint32_t check;			/* ticks until the next full liveness check */
	uint64_t agg[STATS_NFIELDS];	/* users, jobs: sum of their threads */
	unsigned ring_head, ring_n;
	uint64_t ring_t[STATS_RING];
	uint64_t ring[STATS_RING][STATS_NFIELDS];

	_Atomic uint64_t c[STATS_NFIELDS] __attribute__((aligned(64)));
};

struct table {
	struct stats_ent **bucket;
	uint32_t nbuckets;		/* power of two */
	uint32_t max;
	_Atomic uint32_t n;
	pthread_mutex_t lock[NSTRIPES];
};

struct shard {
	_Atomic uint64_t c[STATS_NFIELDS];
} __attribute__((aligned(128)));

struct stats {
	struct stats_opts opts;
	struct table tab[STATS_NKINDS];
	struct shard shard[NSHARDS];
	_Atomic uint32_t next_shard;
	_Atomic uint64_t fill[FILL_SLOTS];	/* started << 32 | running */
	_Atomic uint64_t untracked;
	_Atomic bool warned_full;
	uint64_t start_ns;

	pthread_mutex_t tick_lock;	/* rings, agg, freeing (see above) */
	struct stats_ent node;		/* node ring (its counters are the shards) */
	uint64_t ticks;

	pthread_t ticker;
	bool ticker_running;
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cond;
	bool stop;			/* protected by stop_lock */
};

/* The READ being served by this thread, for stats_fetch_end(). */
static __thread struct stats_read *cur_read;
static __thread int my_shard = -1;

/* ---- small helpers ---- */

static uint32_t mix32(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (uint32_t)x;
}

static uint32_t hash_str(const char *s, uint32_t seed)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return mix32(h);
}

/*
 * Copy @src into @dst as printable, valid UTF-8 (each other byte becomes
 * '_'), so names are safe in JSON and in Prometheus labels.
 */
static void clean_name(char *dst, size_t len, const char *src)
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

static void add_fields(_Atomic uint64_t *c, const uint64_t *v)
{
	for (int i = 0; i < STATS_NFIELDS; i++)
		if (v[i])
			atomic_fetch_add_explicit(&c[i], v[i], memory_order_relaxed);
}

static struct shard *shard_of(struct stats *st)
{
	if (my_shard < 0)
		my_shard = (int)(atomic_fetch_add(&st->next_shard, 1) % NSHARDS);
	return &st->shard[my_shard];
}

static void node_add(struct stats *st, const uint64_t *v)
{
	add_fields(shard_of(st)->c, v);
}

static void node_totals(struct stats *st, uint64_t *v)
{
	memset(v, 0, sizeof(uint64_t) * STATS_NFIELDS);
	for (int s = 0; s < NSHARDS; s++)
		for (int i = 0; i < STATS_NFIELDS; i++)
			v[i] += atomic_load_explicit(&st->shard[s].c[i], memory_order_relaxed);
}

static void ent_load(struct stats_ent *e, uint64_t *v)
{
	for (int i = 0; i < STATS_NFIELDS; i++)
		v[i] = atomic_load_explicit(&e->c[i], memory_order_relaxed);
}

static uint64_t ms_of(uint64_t ns)
{
	return ns / 1000000;
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
		return mix32(key->uid);
	case STATS_JOB:
		return hash_str(key->job, key->uid);
	case STATS_PROC:
		return mix32((uint64_t)(uint32_t)key->tid << 32 | key->uid);
	default:
		return mix32((uint64_t)(unsigned)key->gpu);
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

static void ent_put(struct stats_ent *e)
{
	if (e)
		atomic_fetch_sub(&e->refs, 1);
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
	ent_put(e->user);
	ent_put(e->job);
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

static struct stats_ent *user_get(struct stats *st, uint32_t uid)
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
		clean_name(e->name, sizeof(e->name), res->pw_name);
	else
		snprintf(e->name, sizeof(e->name), "%u", uid);
	return ent_insert(st, e, &key);
}

/* The job @name (cleaned here) of @uid; takes its own reference on @user. */
static struct stats_ent *job_get(struct stats *st, struct stats_ent *user,
				 const char *name)
{
	char clean[PROCINFO_JOB_MAX];
	struct key key = { .uid = user->uid, .job = clean };
	uint32_t h;
	struct stats_ent *e;

	clean_name(clean, sizeof(clean), name && name[0] ? name : "unknown");
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

/* The reader thread @tid of @uid, identified on first sight; referenced. */
static struct stats_ent *proc_get(struct stats *st, pid_t tid, uint32_t uid)
{
	struct key key = { .uid = uid, .tid = tid };
	uint32_t h = key_hash(STATS_PROC, &key);
	struct stats_ent *e = ent_find(st, STATS_PROC, &key, h), *user, *job;
	struct procinfo pi;

	if (e)
		return e;
	if (tid <= 0 || procinfo_read(tid, &pi)) {
		/* gone already, or in another pid namespace (FUSE sends 0) */
		memset(&pi, 0, sizeof(pi));
		pi.tid = pi.tgid = tid;
		snprintf(pi.comm, sizeof(pi.comm), "?");
		snprintf(pi.job, sizeof(pi.job), "unknown");
	}
	user = user_get(st, uid);
	if (!user)
		return NULL;
	job = job_get(st, user, pi.job);
	if (!job) {
		ent_put(user);
		return NULL;
	}
	e = ent_new(STATS_PROC, h);
	if (!e) {
		ent_put(job);
		ent_put(user);
		return NULL;
	}
	e->uid = uid;
	e->tid = tid;
	e->tgid = pi.tgid;
	e->start = pi.start;
	clean_name(e->comm, sizeof(e->comm), pi.comm);
	e->user = user;
	e->job = job;
	e->check = CHECK_EVERY;
	return ent_insert(st, e, &key);
}

/* ---- the read path ---- */

void stats_open_init(struct stats *st, struct stats_open *so, pid_t pid,
		     uint32_t uid)
{
	uint64_t v[STATS_NFIELDS] = { [STATS_OPENS] = 1 };

	so->proc = NULL;
	atomic_store(&so->delivered, false);
	if (!st)
		return;
	so->proc = proc_get(st, pid, uid);
	if (so->proc)
		add_fields(so->proc->c, v);
	node_add(st, v);
}

void stats_open_release(struct stats *st, struct stats_open *so)
{
	if (so->proc) {
		atomic_store_explicit(&so->proc->last_ms, now_ms(), memory_order_relaxed);
		ent_put(so->proc);
		so->proc = NULL;
	}
}

void stats_open_passthrough(struct stats *st, struct stats_open *so, uint64_t size)
{
	uint64_t v[STATS_NFIELDS] = { [STATS_PT_OPENS] = 1, [STATS_PT_BYTES] = size };

	if (!st)
		return;
	if (so->proc)
		add_fields(so->proc->c, v);
	node_add(st, v);
}

static _Atomic uint64_t *fill_slot(struct stats *st, const void *file, uint32_t idx)
{
	return &st->fill[mix32((uint64_t)(uintptr_t)file ^ ((uint64_t)idx << 40) ^ idx) &
			 (FILL_SLOTS - 1)];
}

/* Sum of fill starts on @rd's chunks; sets *@running if one is running. */
static uint64_t fills_seen(struct stats_read *rd, bool *running)
{
	uint64_t sum = 0;

	for (uint32_t i = rd->first; i <= rd->last; i++) {
		uint64_t s = atomic_load_explicit(fill_slot(rd->st, rd->file, i),
						  memory_order_acquire);

		sum += s >> 32;
		if (running && (s & 0xffffffffu))
			*running = true;
	}
	return sum;
}

void stats_read_begin(struct stats *st, struct stats_read *rd, const void *file,
		      uint64_t off, size_t len, uint32_t chunk_size)
{
	rd->st = st;
	if (!st)
		return;
	rd->t0 = now_ns();
	rd->file = file;
	rd->off = off;
	rd->chunk_size = chunk_size ? chunk_size : UINT32_MAX;
	rd->first = (uint32_t)(off / rd->chunk_size);
	rd->last = (uint32_t)((off + (len ? len : 1) - 1) / rd->chunk_size);
	if (rd->last - rd->first >= FILL_SCAN)
		rd->last = rd->first + FILL_SCAN - 1;
	rd->misses = 0;
	rd->backend_bytes = 0;
	rd->pending = false;
	rd->detached = false;
	rd->fills0 = fills_seen(rd, &rd->pending);
	rd->outer = cur_read;
	cur_read = rd;
}

void stats_read_end(struct stats_read *rd, struct stats_open *so, pid_t pid,
		    uint32_t uid, ssize_t n)
{
	struct stats *st = rd->st;
	uint64_t v[STATS_NFIELDS] = { 0 }, t1;
	struct stats_ent *p, *ref = NULL;

	if (!st)
		return;
	if (!rd->detached)
		cur_read = rd->outer;
	t1 = now_ns();
	v[STATS_READS] = 1;
	v[STATS_READ_NS] = t1 - rd->t0;
	if (rd->pending || rd->misses || fills_seen(rd, NULL) != rd->fills0)
		v[STATS_STALL_NS] = t1 - rd->t0;
	if (n < 0) {
		v[STATS_READ_ERRORS] = 1;
	} else if (n > 0) {
		uint64_t pieces = (rd->off + (uint64_t)n - 1) / rd->chunk_size -
				  rd->off / rd->chunk_size + 1;

		v[STATS_READ_BYTES] = (uint64_t)n;
		v[STATS_HITS] = pieces > rd->misses ? pieces - rd->misses : 0;
		/* load first: no write to the shared line once delivered */
		if (so && !atomic_load_explicit(&so->delivered, memory_order_relaxed) &&
		    !atomic_exchange_explicit(&so->delivered, true, memory_order_relaxed))
			v[STATS_FILES] = 1;
	}
	/* node-wide misses and backend bytes were counted by stats_fetch_end */
	node_add(st, v);
	v[STATS_MISSES] = rd->misses;
	v[STATS_BACKEND_BYTES] = rd->backend_bytes;

	p = so ? so->proc : NULL;
	if (!p || p->tid != pid || p->uid != uid) {
		/* not the opener (another thread or process): find the reader */
		ref = proc_get(st, pid, uid);
		if (ref)
			p = ref;
	}
	if (p) {
		add_fields(p->c, v);
		if (ms_of(t1) != atomic_load_explicit(&p->last_ms, memory_order_relaxed))
			atomic_store_explicit(&p->last_ms, ms_of(t1), memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&st->untracked, 1, memory_order_relaxed);
	}
	ent_put(ref);
}

void stats_read_detach(struct stats_read *rd)
{
	if (!rd->st || rd->detached)
		return;
	cur_read = rd->outer;
	rd->detached = true;
}

bool stats_read_stalled(struct stats_read *rd)
{
	return rd->st && (rd->pending || rd->misses || fills_seen(rd, NULL) != rd->fills0);
}

void stats_read_fetched(struct stats_read *rd, uint64_t bytes)
{
	rd->misses++;
	rd->backend_bytes += bytes;
}

void stats_fetch_begin(struct stats *st, const void *file, uint32_t idx)
{
	if (st)
		atomic_fetch_add(fill_slot(st, file, idx), (1ULL << 32) + 1);
}

void stats_fetch_end(struct stats *st, const void *file, uint32_t idx, ssize_t bytes)
{
	uint64_t v[STATS_NFIELDS] = { 0 };

	if (!st)
		return;
	atomic_fetch_sub(fill_slot(st, file, idx), 1);
	if (bytes < 0)
		return;
	v[STATS_MISSES] = 1;
	v[STATS_BACKEND_BYTES] = (uint64_t)bytes;
	node_add(st, v);
	if (cur_read && cur_read->st == st) {
		cur_read->misses++;
		cur_read->backend_bytes += (uint64_t)bytes;
	}
}

/*
 * Charge @v to the library's peer: @pid's reader record (see stats.h) or,
 * for a @job other than its own, user @uid and that job.  0 or -ENOSPC.
 */
static int charge_peer(struct stats *st, pid_t pid, uint32_t uid, const char *job,
		       const uint64_t *v)
{
	struct stats_ent *p = pid > 0 ? proc_get(st, pid, uid) : NULL, *user, *j = NULL;
	char clean[PROCINFO_JOB_MAX];

	if (job)
		clean_name(clean, sizeof(clean), job[0] ? job : "unknown");
	if (p && (!job || !strcmp(p->job->name, clean))) {
		add_fields(p->c, v);
		atomic_store_explicit(&p->last_ms, now_ms(), memory_order_relaxed);
		ent_put(p);
		return 0;
	}
	ent_put(p);
	user = user_get(st, uid);
	if (user)
		j = job_get(st, user, job);
	if (user)
		add_fields(user->c, v);
	if (j)
		add_fields(j->c, v);
	ent_put(j);
	ent_put(user);
	return user && j ? 0 : -ENOSPC;
}

int stats_client_account(struct stats *st, pid_t pid, uint32_t uid, const char *job,
			 uint64_t bytes, uint64_t files)
{
	uint64_t v[STATS_NFIELDS] = {
		[STATS_READ_BYTES] = bytes,
		[STATS_CLIENT_BYTES] = bytes,
		[STATS_FILES] = files,
	};

	if (!st)
		return 0;
	node_add(st, v);
	return charge_peer(st, pid, uid, job, v);
}

void stats_client_open(struct stats *st, pid_t pid, uint32_t uid)
{
	uint64_t v[STATS_NFIELDS] = { [STATS_OPENS] = 1 };

	if (!st)
		return;
	node_add(st, v);
	charge_peer(st, pid, uid, NULL, v);
}

int stats_gpu_account(struct stats *st, pid_t pid, uint32_t uid, const char *job,
		      int gpu, uint64_t bytes)
{
	uint64_t v[STATS_NFIELDS] = { [STATS_GPU_BYTES] = bytes };
	struct key key = { .gpu = gpu };
	struct stats_ent *g;
	uint32_t h;
	int ret;

	if (!st)
		return 0;
	if (gpu < 0 || gpu > 65535)
		return -EINVAL;
	node_add(st, v);
	h = key_hash(STATS_GPU, &key);
	g = ent_find(st, STATS_GPU, &key, h);
	if (!g && (g = ent_new(STATS_GPU, h))) {
		g->gpu = gpu;
		g = ent_insert(st, g, &key);
	}
	if (g) {
		add_fields(g->c, v);
		atomic_store_explicit(&g->last_ms, now_ms(), memory_order_relaxed);
	}
	ret = charge_peer(st, pid, uid, job, v);
	ent_put(g);
	return g ? ret : -ENOSPC;
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
				alive = ms_of(now) - atomic_load(&e->last_ms) <
					st->opts.proc_keep_s * 1000ULL;
			} else if (--e->check == 0) {
				e->check = CHECK_EVERY;
				alive = procinfo_alive(e->tgid, e->tid, e->start);
			} else {
				alive = procinfo_running(e->tgid, e->tid);
			}
			if (!alive) {
				atomic_store(&e->dead, true);
				e->dead_ms = ms_of(now);
			}
		}
		if (atomic_load(&e->dead) &&
		    ms_of(now) - e->dead_ms >= st->opts.proc_keep_s * 1000ULL &&
		    ent_unlink_idle(st, e)) {
			ent_load(e, v);
			add_fields(e->user->c, v);
			add_fields(e->job->c, v);
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
		struct timespec ts;

		next += 1000000000ULL;
		if (next < now_ns())
			next = now_ns();	/* we fell behind: no burst of ticks */
		ts.tv_sec = (time_t)(next / 1000000000ULL);
		ts.tv_nsec = (long)(next % 1000000000ULL);
		while (!st->stop && pthread_cond_timedwait(&st->stop_cond, &st->stop_lock, &ts) == 0)
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
	pthread_condattr_t ca;
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
	if (table_init(&st->tab[STATS_USER], st->opts.max_users) ||
	    table_init(&st->tab[STATS_JOB], st->opts.max_jobs) ||
	    table_init(&st->tab[STATS_PROC], st->opts.max_procs) ||
	    table_init(&st->tab[STATS_GPU], st->opts.max_gpus))
		goto out_free;
	st->start_ns = now_ns();
	ring_init(&st->node, st->start_ns);
	pthread_mutex_init(&st->tick_lock, NULL);
	pthread_mutex_init(&st->stop_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st->stop_cond, &ca);
	pthread_condattr_destroy(&ca);
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
	s->uptime_ms = ms_of(now - st->start_ns);
	s->untracked_reads = atomic_load(&st->untracked);
	node_totals(st, s->node.total);
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
	return v[STATS_READ_NS] ? (double)v[STATS_STALL_NS] / (double)v[STATS_READ_NS] : -1;
}
