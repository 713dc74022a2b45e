/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch_i.h: what the parts of prefetch/ share and nobody else sees.
 *
 * A queued request names a file (struct pf_file: backend, attributes, cache
 * reference) and an owner (struct pf_owner: the readahead state, warmup job
 * or hint session that wants it).  Both are reference counted; each queued
 * or running request holds one reference on each, so an owner may be
 * released (file closed, client gone) while its requests are in flight.
 *
 * The arrows between the parts ("calls a function of"), each one way:
 *
 *   prefetch.c  --> sched.c, engine.c, hints.c, stage.c (make, stop, count)
 *   stage.c     --> job.c
 *   job.c       --> sched.c, engine.c (pf_forget)
 *   hints.c     --> sched.c
 *   readahead.c --> sched.c
 *   engine.c    --> sched.c, bufpool.c
 *   sched.c     --> nothing in prefetch/
 *
 *   - prefetch.c, the front, makes, wires and stops the parts and gathers
 *     their counters; nothing in prefetch/ calls it.  The parts share
 *     struct pf_sched (below) and read its fields (the cache, the
 *     options, the other parts' handles), which is no call.
 *   - readahead.c, job.c and hints.c are owners of requests: they call
 *     sched.c (pf_submit, pf_cancel, pf_file_*) and hear results through
 *     struct pf_owner's callbacks, never by name.  job.c is the walk job
 *     of WARMUP, CACHE_FD and epoch staging: stage.c runs each staging as
 *     a job.  In evict mode a job also has the engine drop the content's
 *     buffers (pf_forget).
 *   - engine.c is the scheduler's consumer: its thread pulls the next
 *     request (pf_sched_next, pf_bucket_try) and reports it done
 *     (pf_sched_release, pf_sched_finish).  sched.c never names the
 *     engine: pf_submit wakes its consumer through the hook s->kick, which
 *     prefetch.c points at pf_engine_kick (NULL when worker threads
 *     consume instead).  The scheduler and the engine are still the one
 *     loop of the design, a queue and the event loop that drains it, but
 *     the loop is closed at run time through that hook, not by a call
 *     from sched.c to engine.c.
 */
#ifndef STAGEFS_PREFETCH_I_H
#define STAGEFS_PREFETCH_I_H

#include "prefetch.h"

#include "list.h"

#include <pthread.h>
#include <stdatomic.h>

/* Queue classes in strict priority order: staging goes after everything. */
enum pf_class { PF_CLASS_READAHEAD, PF_CLASS_WARMUP, PF_CLASS_STAGE, PF_NCLASS };
enum pf_kind { PF_KIND_READAHEAD, PF_KIND_HINT, PF_KIND_WARMUP, PF_KIND_STAGE, PF_NKIND };

/*
 * Result of one request, given to its owner's ->done: PF_FETCHED (brought
 * in from the backend and stored), PF_PRESENT (nothing to do: present, or
 * filled meanwhile by someone else), or -errno (-ECANCELED: dropped
 * unstarted; -ENOSPC: fetched but the cache would not keep it).
 */
enum { PF_PRESENT = 0, PF_FETCHED = 1 };

struct pf_req;

struct pf_owner {
	_Atomic int refs;
	_Atomic bool cancelled;
	/*
	 * Optional: the request's backend fetch is over (or it never ran);
	 * what is left is writing the cache.  Once per request, before done.
	 */
	void (*released)(struct pf_owner *o, const struct pf_req *r);
	/* On the engine or a worker thread (or the cancelling thread for -ECANCELED). */
	void (*done)(struct pf_owner *o, const struct pf_req *r, int res);
	void (*free)(struct pf_owner *o);
};

static inline void pf_owner_get(struct pf_owner *o)
{
	atomic_fetch_add(&o->refs, 1);
}

static inline void pf_owner_put(struct pf_owner *o)
{
	if (atomic_fetch_sub(&o->refs, 1) == 1)
		o->free(o);
}

struct pf_file {
	_Atomic int refs;
	struct pf_sched *s;
	struct backend *be;
	struct sfs_attr attr;	/* backend inode numbers */
	struct cfile *cf;	/* our cache reference */
	bool nothrash;
	_Atomic bool failed;	/* a request for it failed (warmup counts files) */
	_Atomic bool fetched;	/* a request for it fetched a chunk (ditto) */
	char *path;		/* for failure messages; may be NULL */
};

struct pf_user;

struct pf_req {
	struct list_node qnode;	/* in its user's FIFO until picked (sched.c) */
	struct pf_file *f;
	struct pf_owner *o;
	struct pf_user *u;	/* set when picked: whose in-flight count */
	bool slot_freed;	/* pf_sched_release() was called */
	bool released;		/* the owner's ->released ran */
	uint32_t idx;
	uint32_t uid;
	uint8_t cls, kind;
	uint8_t oflags;		/* the owner's marks (pf_submit_quiet); sched.c never reads them */
};

/*
 * The prefetcher: prefetch.h's handle, one per daemon, made, wired and
 * stopped by prefetch.c (the front).  The parts read its fields; each
 * pointer is set before pf_sched_create() returns and stays until
 * pf_sched_destroy().
 */
struct pf_queues;
struct pf_engine;
struct pf_hints;
struct pf_stager;

struct pf_sched {
	struct pf_opts o;		/* with defaults filled in; o.weights NULL */
	struct cache *c;
	struct pf_queues *q;		/* sched.c: queues, rate cap, workers */
	struct pf_engine *engine;	/* engine.c; NULL: sched.c's workers fetch */
	struct pf_hints *hints;		/* hints.c: the hint sessions */
	struct pf_stager *stager;	/* stage.c: the epoch detector, stagings */
	/*
	 * The scheduler's hook to its consumer: background work was queued
	 * (pf_submit), look at the queues soon.  prefetch.c sets it to the
	 * engine's kick; NULL with worker threads (they wait on the
	 * scheduler's condition variable).
	 */
	void (*kick)(void *arg);
	void *kick_arg;
	_Atomic int jobs;		/* job.c: jobs running (warmup_jobs) */
};

static inline struct cache *pf_cache(struct pf_sched *s)
{
	return s->c;
}

static inline const struct pf_opts *pf_opts(struct pf_sched *s)
{
	return &s->o;
}

/* job.c counts its jobs (warmup_jobs) */
static inline void pf_jobs_add(struct pf_sched *s, int delta)
{
	atomic_fetch_add(&s->jobs, delta);
}

/* Rate-cap priorities: how far below zero a fetch may take the bucket. */
enum { BK_DEMAND, BK_READAHEAD, BK_WARMUP };

/*
 * A pf_file for regular file @a of @be: takes a cache reference.  @path is
 * copied (may be NULL).  Returns NULL on failure with *@err set.
 */
struct pf_file *pf_file_create(struct pf_sched *s, struct backend *be,
			       const struct sfs_attr *a, bool nothrash,
			       const char *path, int *err);
void pf_file_get(struct pf_file *f);
void pf_file_put(struct pf_file *f);

/*
 * Queue chunk @idx of @f for @o, charged to @uid.  Takes references on @f
 * and @o.  Returns 0 or -ENOMEM/-ESHUTDOWN (then nothing was queued and
 * ->done is not called).
 */
int pf_submit(struct pf_sched *s, struct pf_owner *o, struct pf_file *f,
	      uint32_t idx, uint32_t uid, enum pf_class cls, enum pf_kind kind);
/*
 * pf_submit() without waking the consumer, the request marked with the
 * owner's @oflags (struct pf_req): for a walk that queues many
 * requests in a row (job.c), which then calls pf_sched_kick() once for a
 * batch, and always before it waits or stops queueing.  Without it the
 * engine woke for each of a warmup's 30,000 small files, two context
 * switches a file.
 */
int pf_submit_quiet(struct pf_sched *s, struct pf_owner *o, struct pf_file *f,
		    uint32_t idx, uint32_t uid, enum pf_class cls, enum pf_kind kind,
		    uint8_t oflags);
/* Wake the consumer to look at the queues (what pf_submit() does after queueing). */
void pf_sched_kick(struct pf_sched *s);
/*
 * Mark @o cancelled and drop its queued requests now (each gets ->done with
 * -ECANCELED on this thread).  Requests in flight finish normally.
 */
void pf_cancel(struct pf_sched *s, struct pf_owner *o);

/* ---- sched.c, for engine.c (the engine thread) ---- */
/*
 * The next queued request that may start, with @demand_inflight readers'
 * fills running and at most @bg_cap background requests in flight (the
 * engine's limit while readers fetch): counted in flight
 * (pf_sched_finish() uncounts it), or NULL.
 */
struct pf_req *pf_sched_next(struct pf_sched *s, uint32_t demand_inflight,
			     uint32_t bg_cap);
/*
 * The backend part of a request from pf_sched_next() is over (the chunk is
 * verified and being written): its in-flight slot is free for the next
 * fetch, and its owner is told (->released).  Optional; pf_sched_finish()
 * does it otherwise.
 */
void pf_sched_release(struct pf_sched *s, struct pf_req *r);
/* A request from pf_sched_next() is over: counted, its owner told @res. */
void pf_sched_finish(struct pf_sched *s, struct pf_req *r, int res);
/*
 * The rate cap without waiting: takes @len bytes of tokens for a fetch of
 * priority @prio (BK_*) and returns 0, or returns how many ns to wait
 * before asking again (nothing taken).
 */
uint64_t pf_bucket_try(struct pf_sched *s, size_t len, int prio);
void pf_note_throttle(struct pf_sched *s, uint64_t ns);
void pf_note_demand_fetch(struct pf_sched *s);
/*
 * pf_sched_finish() of a request that waited for another's fetch (a pack
 * read's other files, engine.c): the fetch was counted once, with that
 * request; only an error or a cancel counts here.
 */
void pf_sched_finish_joined(struct pf_sched *s, struct pf_req *r, int res);

/* ---- sched.c: the scheduler's life, for prefetch.c ---- */

/*
 * The queues and the rate cap of @s (s->q), with prefetch_weights @weights
 * ("UID:WEIGHT,...", may be NULL).  0, or -errno with a message in @err.
 */
int pf_queues_create(struct pf_sched *s, const char *weights, char *err, size_t errlen);
/* Without the engine: s->o.inflight worker threads.  0 or -errno (@err). */
int pf_queues_start_workers(struct pf_sched *s, char *err, size_t errlen);
/* Nothing more is queued or started; background waits give up. */
void pf_queues_stop(struct pf_sched *s);
/* After pf_queues_stop(): the workers' last fetches end. */
void pf_queues_join_workers(struct pf_sched *s);
/* What is still queued is dropped (owners hear -ECANCELED); free s->q. */
void pf_queues_destroy(struct pf_sched *s);
void pf_queues_get_stats(struct pf_sched *s, struct pf_stats *st);

/* ---- hints.c, for prefetch.c ---- */

struct pf_hints *pf_hints_create(struct pf_sched *s);
/* Ends every session (cancelling their queued requests), frees. */
void pf_hints_destroy(struct pf_hints *h);
uint64_t pf_hints_count(struct pf_hints *h);

/* ---- stage.c, for prefetch.c ---- */

struct pf_stager *pf_stager_create(struct pf_sched *s);
/* Stop every staging and join its thread (the engine still runs). */
void pf_stager_destroy(struct pf_stager *g);
void pf_stager_get_stats(struct pf_stager *g, struct pf_stats *st);

/* ---- engine.c: every fetch as a pipeline on one thread (see there) ---- */

/* For prefetch.c.  Returns 0 or -errno with a message in @err (then run without it). */
int pf_engine_create(struct pf_sched *s, struct cache *c, const struct pf_opts *o,
		     struct pf_engine **out, char *err, size_t errlen);
/*
 * Background work was queued: the engine looks at the queues soon.  The
 * scheduler reaches it only through s->kick, which prefetch.c points here.
 */
void pf_engine_kick(struct pf_engine *e);
/*
 * For prefetch.c.  Stop starting work, let the fills in flight finish
 * (every buffer is free of the kernel and librados afterwards), join the
 * thread, free.  Readers' wants still queued get -ESHUTDOWN.  Accepts NULL.
 */
void pf_engine_destroy(struct pf_engine *e);
/* Adds the engine's counters to @st (for prefetch.c). */
void pf_engine_get_stats(struct pf_engine *e, struct pf_stats *st);
/* For job.c (evict): chunks of content @id are not served from the engine's buffers any more. */
void pf_forget(struct pf_sched *s, const struct sfs_id *id);

#endif
