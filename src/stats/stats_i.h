/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_i.h: what the two halves of the stats module share; not for other
 * modules.  src/stats/stats.c counts (the read path, the client library's
 * reports); src/stats/stats_table.c keeps the tables of users, jobs, reader
 * threads and GPUs, runs the ticker and takes snapshots.
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
 */
#ifndef STAGEFS_STATS_I_H
#define STAGEFS_STATS_I_H

#include "stats.h"

#include <pthread.h>

#define NSTRIPES	64
#define NSHARDS		16
#define FILL_SLOTS	4096	/* power of two */

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
	/*
	 * threads: their activity (stats.c, thread_span()), written with c[]:
	 * the end of their latest event, and of their latest stalled READ
	 */
	_Atomic uint64_t last_ev_ns;
	_Atomic uint64_t stall_end_ns;
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
	_Atomic uint64_t node_only[STATS_NODE_NFIELDS];
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


static inline void stats_add_fields(_Atomic uint64_t *c, const uint64_t *v)
{
	for (int i = 0; i < STATS_NFIELDS; i++)
		if (v[i])
			atomic_fetch_add_explicit(&c[i], v[i], memory_order_relaxed);
}

/* A 64 -> 32 bit hash (the finalizer of MurmurHash3). */
static inline uint32_t stats_mix32(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (uint32_t)x;
}

static inline uint64_t stats_ms_of(uint64_t ns)
{
	return ns / 1000000;
}

/* Drop a reference taken by a *_get below (NULL: nothing). */
static inline void stats_ent_put(struct stats_ent *e)
{
	if (e)
		atomic_fetch_sub(&e->refs, 1);
}

/*
 * Copy @src into @dst as printable, valid UTF-8 (each other byte becomes
 * '_'), so names are safe in JSON and in Prometheus labels.
 */
void stats_clean_name(char *dst, size_t len, const char *src);

/*
 * The entity of each kind, found or created, with a reference for the
 * caller (stats_ent_put); NULL when its table is full or out of memory.
 * A reader thread is identified from /proc on first sight; a job takes
 * its own reference on @user; its @name is cleaned here (NULL or "":
 * "unknown").
 */
struct stats_ent *stats_user_get(struct stats *st, uint32_t uid);
struct stats_ent *stats_job_get(struct stats *st, struct stats_ent *user, const char *name);
struct stats_ent *stats_proc_get(struct stats *st, pid_t tid, uint32_t uid);
struct stats_ent *stats_gpu_get(struct stats *st, int gpu);
/* stats_proc_get(), but NULL for a new thread /proc cannot identify (gone). */
struct stats_ent *stats_proc_get_known(struct stats *st, pid_t tid, uint32_t uid);

#endif
