/*
 * prefetch_i.h: what the parts of prefetch/ share and nobody else sees.
 *
 * A queued request names a file (struct pf_file: backend, attributes, cache
 * reference) and an owner (struct pf_owner: the readahead state, warmup job
 * or hint session that wants it).  Both are reference counted; each queued
 * or running request holds one reference on each, so an owner may be
 * released (file closed, client gone) while its requests are in flight.
 */
#ifndef STAGEFS_PREFETCH_I_H
#define STAGEFS_PREFETCH_I_H

#include "prefetch.h"

#include <pthread.h>
#include <stdatomic.h>

enum pf_class { PF_CLASS_READAHEAD, PF_CLASS_WARMUP, PF_NCLASS };
enum pf_kind { PF_KIND_READAHEAD, PF_KIND_HINT, PF_KIND_WARMUP };

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
	/* On a worker thread (or the cancelling thread for -ECANCELED). */
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
	char *path;		/* for failure messages; may be NULL */
};

struct pf_req {
	struct pf_req *next;
	struct pf_file *f;
	struct pf_owner *o;
	uint32_t idx;
	uint32_t uid;
	uint8_t cls, kind;
};

/*
 * A pf_file for regular file @a of @be: takes a cache reference.  @path is
 * copied (may be NULL).  Returns NULL on failure with *@err set.
 */
struct pf_file *pf_file_create(struct pf_sched *s, struct backend *be,
			       const struct sfs_attr *a, bool nothrash,
			       const char *path, int *err);
void pf_file_get(struct pf_file *f);
void pf_file_put(struct pf_file *f);

struct cache *pf_cache(struct pf_sched *s);
const struct pf_opts *pf_opts(struct pf_sched *s);

/*
 * Queue chunk @idx of @f for @o, charged to @uid.  Takes references on @f
 * and @o.  Returns 0 or -ENOMEM/-ESHUTDOWN (then nothing was queued and
 * ->done is not called).
 */
int pf_submit(struct pf_sched *s, struct pf_owner *o, struct pf_file *f,
	      uint32_t idx, uint32_t uid, enum pf_class cls, enum pf_kind kind);
/*
 * Mark @o cancelled and drop its queued requests now (each gets ->done with
 * -ECANCELED on this thread).  Requests in flight finish normally.
 */
void pf_cancel(struct pf_sched *s, struct pf_owner *o);

/* hints.c, for sched.c */
struct pf_hints;
struct pf_hints *pf_hints_create(struct pf_sched *s);
void pf_hints_destroy(struct pf_hints *h);
struct pf_hints *pf_sched_hints(struct pf_sched *s);
uint64_t pf_hints_count(struct pf_hints *h);

/* engine.c: the io_uring engine behind the cache's I/O hook */
struct pf_engine;
extern const struct cache_io_ops pf_engine_io;	/* arg: the engine */
int pf_engine_create(struct pf_engine **out, char *err, size_t errlen);
/* After every thread that used it is gone. */
void pf_engine_destroy(struct pf_engine *e);
/* The calling thread is a scheduler worker: its cache I/O goes to the ring. */
void pf_engine_thread_is_worker(void);
void pf_engine_get_stats(struct pf_engine *e, uint64_t *ops, uint64_t *direct,
			 uint64_t *submits);

/* warmup.c counts its jobs here */
void pf_jobs_add(struct pf_sched *s, int delta);

#endif
