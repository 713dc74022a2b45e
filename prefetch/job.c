/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job: the walk job (pf_job_*): stage whole trees, files or lists in the
 * cache, or report or drop what is cached of them.  Its users: WARMUP
 * (`stagefs warmup`, fuse/ctl/ctljobs.c), a CACHE_FD hand-over (one file,
 * fuse/ctl/handover.c) and epoch staging (stage.c, opts.stage).
 *
 * A job walks the dataset through the backend (readdir, lookup: metadata is
 * in memory for both backends) on the calling thread, twice: the first walk
 * counts what is in scope and what is cached already (so progress has a
 * total and an ETA from the start; check and evict need only this walk),
 * the second queues every chunk still missing at warmup priority, charged
 * to the caller's uid.  Evict drops only the chunks charged to the caller
 * (root: every one): no user can push out another's chunks; the others'
 * are counted as evict_skipped.
 * The job keeps at most max_inflight requests queued or fetching (a request
 * whose chunk is fetched and only being written does not count: the I/O
 * engine's buffers bound those), so a walk over ten million files holds a
 * bounded queue, and stops when its caller goes away (tick returns false).  The walk checks POSIX permissions for the
 * caller (src/cred.h) the way the kernel's default_permissions does for reads through
 * the mount: search on directories walked through, read on files.
 *
 * Chunks present when the walk reaches them are counted as cached_before and
 * not queued, so an interrupted warmup resumes where it stopped; a chunk
 * filled meanwhile by a reader is settled without counting as fetched.
 *
 * A staging job (opts.stage, prefetch/stage.c) is the same walk queued at
 * the lowest class, over files whose chunks are admitted only where they
 * fit with no eviction (nothrash), so it can never push anything out.
 *
 * --shard I/N keeps the chunks with XXH3(content id, chunk index) % N == I:
 * N nodes given I = 0..N-1 split a dataset's chunks exactly, whatever the
 * order or speed of their walks, as long as they see the same content ids
 * (always for rados://; for dir:// on a shared filesystem the id includes
 * the file's device and inode numbers as this node sees them).  A small
 * file stored in a pack goes with its pack (XXH3 of the pack id): the
 * engine reads a pack whole for the first of its files a job asks for.
 */
#include "prefetch_i.h"

#include "idset.h"
#include "packentry.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FAILURES	1000
/*
 * The queueing walk wakes the engine once for this many requests, or
 * after JOB_KICK_NS, and always before it waits for room or leaves a
 * directory's files: woken for each, the engine ran for one request and
 * slept again, two context switches a file (13,000 of them in a warmup
 * of 30,000 packed 29 KB files).
 */
#define JOB_KICK_BATCH	32
#define JOB_KICK_NS	1000000ULL

/*
 * A request that takes no slot of the job's window (pf_req.oflags): a
 * small file of the pack the walk's previous request read.  The engine
 * joins it to that pack's read (it ends with the read), so it is no
 * fetch of its own.  Taking a slot, each one made the walker wait for
 * the engine to pull and join it: a wait and a wake every few files.
 */
#define JOB_REQ_NOSLOT	1

struct pf_job {
	struct pf_owner o;
	struct pf_sched *s;
	struct pf_job_opts opts;
	uint32_t max;
	uint64_t start_ms;
	uint64_t last_tick_ms;
	bool queueing;			/* second walk: queue, count nothing */
	uint32_t unkicked;		/* the walker's: queued since the last kick */
	uint64_t unkicked_ns;		/* ... the first of them queued then */
	const struct backend *last_be;	/* the walker's: the pack its last */
	uint32_t last_pack;		/* request with a slot asked for, if any */
	struct idset links;		/* hard-linked files seen this walk
					 * (backend, inode): one name each */

	pthread_mutex_t lock;
	pthread_cond_t cond;		/* a request settled */
	uint32_t outstanding;		/* protected by lock: queued or running */
	uint32_t fetching;		/* protected by lock: ... not yet released */
	uint32_t sleepers;		/* protected by lock: threads waiting on cond */
	struct pf_job_progress p;	/* protected by lock */
	struct pf_job_failure *fails;	/* protected by lock: not yet taken */
	size_t nfails, capfails;	/* protected by lock */
	uint64_t fails_kept;		/* protected by lock */
};

/* ---- the job as owner of requests ---- */

/* Who the cache charges for what @j brings in (struct pf_job_opts). */
static uint32_t job_owner(const struct pf_job *j)
{
	return cache_owner_or_uid(j->opts.owner, j->opts.cred.uid);
}

static void record_failure_locked(struct pf_job *j, const char *path, int err)
{
	j->p.failed_files++;
	if (j->fails_kept >= MAX_FAILURES)
		return;
	if (j->nfails == j->capfails) {
		size_t cap = j->capfails ? j->capfails * 2 : 16;
		struct pf_job_failure *nf = realloc(j->fails, cap * sizeof(*nf));

		if (!nf)
			return;
		j->fails = nf;
		j->capfails = cap;
	}
	j->fails[j->nfails].path = strdup(path ? path : "?");
	j->fails[j->nfails].err = err;
	if (j->fails[j->nfails].path) {
		j->nfails++;
		j->fails_kept++;
	}
}

static void job_done(struct pf_owner *o, const struct pf_req *r, int res)
{
	struct pf_job *j = (struct pf_job *)o;
	uint64_t len = backend_chunk_len(r->f->attr.size, r->f->be->chunk_size, r->idx);

	pthread_mutex_lock(&j->lock);
	j->outstanding--;	/* ->released came first: fetching too */
	if (res != -ECANCELED) {
		j->p.done_chunks++;
		j->p.done_bytes += len;
	}
	if (res == PF_FETCHED) {
		j->p.fetched++;
		j->p.fetched_bytes += len;
		if (!atomic_exchange(&r->f->fetched, true))
			j->p.fetched_files++;
	} else if (res < 0 && res != -ECANCELED) {
		if (res == -ENOSPC)
			j->p.nospace++;
		j->p.failed++;
		if (!atomic_exchange(&r->f->failed, true))
			record_failure_locked(j, r->f->path, -res);
	}
	/* pf_job_wait() waits for the last one; wait_room() for job_released() */
	if (j->sleepers && !j->outstanding)
		pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

/* The request's fetch is over (only its cache write may be left): room. */
static void job_released(struct pf_owner *o, const struct pf_req *r)
{
	struct pf_job *j = (struct pf_job *)o;

	pthread_mutex_lock(&j->lock);
	if (!(r->oflags & JOB_REQ_NOSLOT))
		j->fetching--;
	/*
	 * Wake the walker when a quarter of its window is free, not at each
	 * slot: one wake a batch instead of one a file (small files
	 * complete by the thousand a second).  wait_room() also wakes by
	 * itself every 100 ms.
	 */
	if (j->sleepers && j->fetching <= j->max - (j->max + 3) / 4)
		pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

static void job_free(struct pf_owner *o)
{
	struct pf_job *j = (struct pf_job *)o;

	for (size_t i = 0; i < j->nfails; i++)
		free(j->fails[i].path);
	free(j->fails);
	idset_release(&j->links);
	pthread_cond_destroy(&j->cond);
	pthread_mutex_destroy(&j->lock);
	free(j);
}

int pf_job_create(struct pf_sched *s, const struct pf_job_opts *o,
		  struct pf_job **out)
{
	struct pf_job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	atomic_init(&j->o.refs, 1);
	j->o.released = job_released;
	j->o.done = job_done;
	j->o.free = job_free;
	j->s = s;
	j->opts = *o;
	if (j->opts.shard_n && j->opts.shard_i >= j->opts.shard_n) {
		free(j);
		return -EINVAL;
	}
	j->max = o->max_inflight ? o->max_inflight : 2 * pf_opts(s)->user_inflight;
	if (!j->opts.tick_ms)
		j->opts.tick_ms = 500;
	j->start_ms = j->last_tick_ms = now_ms();
	pthread_mutex_init(&j->lock, NULL);
	cond_init_monotonic(&j->cond);
	if (!o->stage)
		pf_jobs_add(s, 1);	/* warmup_jobs: what clients asked for */
	*out = j;
	return 0;
}

static bool cancelled(struct pf_job *j)
{
	return atomic_load(&j->o.cancelled);
}

void pf_job_cancel(struct pf_job *j)
{
	pf_cancel(j->s, &j->o);
}

void pf_job_destroy(struct pf_job *j)
{
	if (!j)
		return;
	pf_job_cancel(j);
	if (!j->opts.stage)
		pf_jobs_add(j->s, -1);
	pf_owner_put(&j->o);
}

/* Let the caller speak (progress, liveness) at most every tick_ms. */
static void maybe_tick(struct pf_job *j)
{
	uint64_t now;

	if (!j->opts.tick)
		return;
	now = now_ms();
	if (now - j->last_tick_ms < j->opts.tick_ms)
		return;
	j->last_tick_ms = now;
	if (!j->opts.tick(j->opts.tick_arg))
		pf_job_cancel(j);
}

/* The walker: wake the engine for the requests it queued quietly. */
static void job_kick(struct pf_job *j)
{
	if (!j->unkicked)
		return;
	j->unkicked = 0;
	pf_sched_kick(j->s);
}

/* Reserve one outstanding request, waiting for room.  0 or -ECANCELED. */
static int wait_room(struct pf_job *j)
{
	pthread_mutex_lock(&j->lock);
	if (j->fetching >= j->max && j->unkicked) {
		pthread_mutex_unlock(&j->lock);
		job_kick(j);	/* what it waits for must be started first */
		pthread_mutex_lock(&j->lock);
	}
	while (j->fetching >= j->max && !cancelled(j)) {
		j->sleepers++;
		cond_wait_until_ns(&j->cond, &j->lock, now_ns() + 100000000ULL);
		j->sleepers--;
		pthread_mutex_unlock(&j->lock);
		maybe_tick(j);
		pthread_mutex_lock(&j->lock);
	}
	if (cancelled(j)) {
		pthread_mutex_unlock(&j->lock);
		return -ECANCELED;
	}
	j->outstanding++;
	j->fetching++;
	pthread_mutex_unlock(&j->lock);
	return 0;
}

/*
 * Is chunk @idx of file @a in the job's shard?  A packed file (@pk: its
 * pack's record, else NULL) goes with its pack (keyed by the pack's id,
 * index UINT32_MAX), so one node reads each pack whole and no two read
 * the same one.
 */
static bool in_shard(const struct pf_job *j, const struct sfs_attr *a, uint32_t idx,
		     const struct manifest_pack *pk)
{
	struct {
		uint64_t hi, lo;
		uint32_t idx;
	} __attribute__((packed)) key = { a->content.hi, a->content.lo, idx };

	if (!j->opts.shard_n)
		return true;
	if (pk) {
		key.hi = pk->id.hi;
		key.lo = pk->id.lo;
		key.idx = UINT32_MAX;
	}
	return sfs_hash64(&key, sizeof(key)) % j->opts.shard_n == j->opts.shard_i;
}

/* Record a failure (once: the counting walk records, the queueing one not). */
static void job_fail(struct pf_job *j, const char *path, int err)
{
	if (j->queueing)
		return;	/* the first walk recorded it */
	pthread_mutex_lock(&j->lock);
	record_failure_locked(j, path, err);
	pthread_mutex_unlock(&j->lock);
}

static int do_file(struct pf_job *j, struct backend *be, const struct sfs_attr *a,
		   const char *path, bool nothrash)
{
	struct cache *c = pf_cache(j->s);
	uint32_t csize = be->chunk_size;
	uint32_t nch = (uint32_t)DIV_ROUND_UP(a->size, csize);
	uint64_t in = 0, in_bytes = 0, cb = 0, cb_bytes = 0;
	struct manifest_pack pk;
	uint32_t pack = 0, pk_off;
	bool packed, engine_pack, ride;
	struct pf_file *f;
	int err = 0;

	if (a->nlink > 1) {
		/* another name of a file this walk has had: once, as du counts */
		struct sfs_id key = { (uint64_t)(uintptr_t)be, a->ino };
		int r;

		pthread_mutex_lock(&j->lock);
		r = idset_add(&j->links, &key);
		pthread_mutex_unlock(&j->lock);
		if (r == 0)
			return 0;
	}
	if (!cred_may_access(&j->opts.cred, a->uid, a->gid, a->mode, CRED_MAY_READ)) {
		job_fail(j, path, EACCES);
		return 0;
	}
	f = pf_file_create(j->s, be, a, nothrash || j->opts.stage, path, &err);
	if (!f) {
		job_fail(j, path, -err);
		return 0;
	}
	/*
	 * A small file's pack, looked up once where something goes by it:
	 * the shard, and (queueing for the engine) whether it rides.
	 */
	packed = (j->opts.shard_n || (j->queueing && j->s->engine)) && packentry_maybe(be, a) &&
		 !manifest_file_pack(be->m, a->ino, &pack, &pk_off, &pk);
	for (uint32_t idx = 0; idx < nch; idx++) {
		uint64_t len = backend_chunk_len(a->size, csize, idx);

		if (!in_shard(j, a, idx, packed ? &pk : NULL))
			continue;
		in++;
		in_bytes += len;
		if (packentry_chunk_cached(c, be, a, f->cf, idx)) {
			cb++;
			cb_bytes += len;
		}
	}
	if (!in && nch) {
		pf_file_put(f);	/* no chunk of it in this shard */
		return 0;
	}
	if (!nch && j->opts.shard_n && j->opts.shard_i) {
		pf_file_put(f);	/* empty files count in shard 0 */
		return 0;
	}
	if (j->queueing)
		goto queue;
	pthread_mutex_lock(&j->lock);
	j->p.files++;
	j->p.chunks += in;
	j->p.bytes += in_bytes;
	j->p.cached_before += cb;
	j->p.cached_before_bytes += cb_bytes;
	if (cb == in)
		j->p.cached_files++;
	if (j->opts.mode != PF_JOB_FETCH) {
		j->p.done_chunks += in;
		j->p.done_bytes += in_bytes;
	}
	pthread_mutex_unlock(&j->lock);

	if (j->opts.mode == PF_JOB_EVICT) {
		/* the caller's own chunks only (root: every one) */
		uint32_t skipped = 0, n = j->opts.cred.uid == 0 ? cache_file_evict(c, f->cf) :
			cache_file_evict_owned(c, f->cf, job_owner(j), &skipped);
		struct cfile *pcf;
		uint32_t poff;

		/* a small file's pack goes with it, and so do the pack's other files */
		if (!packentry_get(c, be, a, &pcf, &poff)) {
			n += j->opts.cred.uid == 0 ? cache_file_evict(c, pcf) :
				cache_file_evict_owned(c, pcf, job_owner(j), &skipped);
			cache_file_put(c, pcf);
		}

		if (!skipped)	/* and from the engine's memory, unless others' stay */
			pf_forget(j->s, &a->content);
		pthread_mutex_lock(&j->lock);
		j->p.evicted += n;
		j->p.evict_skipped += skipped;
		pthread_mutex_unlock(&j->lock);
	}
	pf_file_put(f);
	return 0;

queue:
	/*
	 * A small file of the pack asked for last joins that read and takes
	 * no slot.  Only the I/O engine reads packs whole: sched.c's worker
	 * threads (prefetch_io_uring=no) fetch each file alone.
	 */
	engine_pack = packed && j->s->engine;
	ride = engine_pack && j->last_be == be && j->last_pack == pack;
	for (uint32_t idx = 0; idx < nch; idx++) {
		if (!in_shard(j, a, idx, packed ? &pk : NULL))
			continue;
		if (packentry_chunk_cached(c, be, a, f->cf, idx)) {
			/* present before, or brought in since by anyone: settled */
			pthread_mutex_lock(&j->lock);
			j->p.done_chunks++;
			j->p.done_bytes += backend_chunk_len(a->size, csize, idx);
			pthread_mutex_unlock(&j->lock);
			continue;
		}
		if (ride) {
			pthread_mutex_lock(&j->lock);
			j->outstanding++;
			pthread_mutex_unlock(&j->lock);
		} else {
			err = wait_room(j);
			if (err)
				break;
		}
		err = pf_submit_quiet(j->s, &j->o, f, idx, job_owner(j),
				      j->opts.stage ? PF_CLASS_STAGE : PF_CLASS_WARMUP,
				      j->opts.stage ? PF_KIND_STAGE : PF_KIND_WARMUP,
				      ride ? JOB_REQ_NOSLOT : 0);
		if (!err) {
			uint64_t now = now_ns();

			j->last_be = engine_pack ? be : NULL;
			j->last_pack = pack;
			if (!j->unkicked++)
				j->unkicked_ns = now;
			if (j->unkicked >= JOB_KICK_BATCH || now - j->unkicked_ns >= JOB_KICK_NS)
				job_kick(j);
		} else {
			pthread_mutex_lock(&j->lock);
			j->outstanding--;
			if (!ride)
				j->fetching--;
			j->p.failed++;
			if (!atomic_exchange(&f->failed, true))
				record_failure_locked(j, path, -err);
			pthread_mutex_unlock(&j->lock);
			break;
		}
	}
	pf_file_put(f);
	return err == -ECANCELED ? err : 0;
}

/* A directory waiting to be listed. */
struct pending_dir {
	uint64_t ino;
	char *path;
};

static char *join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	char *p = malloc(dl + nl + 2);

	if (!p)
		return NULL;
	memcpy(p, dir, dl);
	if (dl)
		p[dl++] = '/';
	memcpy(p + dl, name, nl + 1);
	return p;
}

static int walk_dir(struct pf_job *j, struct backend *be, uint64_t root,
		    const char *root_path, bool nothrash)
{
	struct pending_dir *stack = NULL;
	size_t n = 0, cap = 0;
	/*
	 * Epoch staging walks backwards (last name first, at every level): a
	 * reader going through the dataset in order starts at the front, so
	 * staging starts where it is not, and they meet in the middle rather
	 * than staging fetching what the reader asks for next.
	 */
	bool rev = j->opts.stage;
	int ret = 0;

	stack = malloc(sizeof(*stack) * 16);
	if (!stack)
		return -ENOMEM;
	cap = 16;
	stack[n].ino = root;
	stack[n].path = strdup(root_path);
	if (!stack[n].path) {
		free(stack);
		return -ENOMEM;
	}
	n++;
	while (n && !ret) {
		struct pending_dir d = stack[--n];
		struct sfs_dirlist dl = { 0 };
		size_t first_sub = n;
		int r = be->ops->readdir(be, d.ino, &dl);

		if (r) {
			job_fail(j, d.path, -r);
			free(d.path);
			continue;
		}
		for (size_t k = 0; k < dl.n && !ret; k++) {
			size_t i = rev ? dl.n - 1 - k : k;
			struct sfs_attr a;
			char *p;

			maybe_tick(j);
			if (cancelled(j)) {
				ret = -ECANCELED;
				break;
			}
			r = be->ops->lookup(be, d.ino, dl.ent[i].name, &a);
			if (r) {
				p = join(d.path, dl.ent[i].name);
				job_fail(j, p ? p : d.path, -r);
				free(p);
				continue;
			}
			if (be->ops->forget)
				be->ops->forget(be, a.ino, 1);
			if (!S_ISREG(a.mode) && !S_ISDIR(a.mode))
				continue;	/* symlinks and specials: nothing to stage */
			p = join(d.path, dl.ent[i].name);
			if (!p) {
				ret = -ENOMEM;
				break;
			}
			if (S_ISREG(a.mode)) {
				ret = do_file(j, be, &a, p, nothrash);
				free(p);
				continue;
			}
			if (!cred_may_access(&j->opts.cred, a.uid, a.gid, a.mode,
					     CRED_MAY_READ | CRED_MAY_EXEC)) {
				job_fail(j, p, EACCES);
				free(p);
				continue;
			}
			if (n == cap) {
				struct pending_dir *ns = realloc(stack, cap * 2 * sizeof(*ns));

				if (!ns) {
					free(p);
					ret = -ENOMEM;
					break;
				}
				stack = ns;
				cap *= 2;
			}
			stack[n].ino = a.ino;
			stack[n].path = p;
			n++;
		}
		/* subdirectories were pushed in walk order: pop them in it */
		for (size_t lo = first_sub, hi = n; hi > lo + 1; lo++, hi--) {
			struct pending_dir t = stack[lo];

			stack[lo] = stack[hi - 1];
			stack[hi - 1] = t;
		}
		job_kick(j);	/* a directory's files queued: start them */
		sfs_dirlist_release(&dl);
		free(d.path);
	}
	while (n)
		free(stack[--n].path);
	free(stack);
	return ret;
}

/*
 * Walk the tree or file at backend inode @ino of @be, the way the current
 * walk does (count, or queue).  0, -ECANCELED or -errno for @ino itself.
 */
static int job_add(struct pf_job *j, struct backend *be, uint64_t ino,
		   const char *path, bool nothrash)
{
	struct sfs_attr a;
	int ret;

	if (cancelled(j))
		return -ECANCELED;
	ret = be->ops->getattr(be, ino, &a);
	if (ret) {
		job_fail(j, path, -ret);
		return ret;
	}
	if (S_ISREG(a.mode))
		return do_file(j, be, &a, path, nothrash);
	if (!S_ISDIR(a.mode))
		return 0;
	if (!cred_may_access(&j->opts.cred, a.uid, a.gid, a.mode,
			     CRED_MAY_READ | CRED_MAY_EXEC)) {
		job_fail(j, path, EACCES);
		return -EACCES;
	}
	ret = walk_dir(j, be, ino, path, nothrash);
	if (ret && ret != -ECANCELED)
		job_fail(j, path, -ret);
	return ret;
}

/* The counting walk is over.  True if the queueing walk follows. */
static bool walk_done(struct pf_job *j)
{
	pthread_mutex_lock(&j->lock);
	j->p.walk_done = true;
	idset_release(&j->links);	/* the second walk meets them again */
	pthread_mutex_unlock(&j->lock);
	j->queueing = j->opts.mode == PF_JOB_FETCH;
	return j->queueing;
}

int pf_job_run(struct pf_job *j, const struct pf_job_root *roots, size_t n)
{
	int first = 0;

	for (bool queue = false;; queue = true) {
		for (size_t i = 0; i < n; i++) {
			const struct pf_job_root *r = &roots[i];
			int ret;

			if (r->err) {
				job_fail(j, r->path, r->err);
				continue;
			}
			ret = job_add(j, r->be, r->ino, r->path, r->nothrash);

			job_kick(j);	/* a file named alone, or what a stop left */
			if (ret == -ECANCELED)
				return ret;
			if (ret && !first)
				first = ret;
		}
		/* count first (totals for progress), then queue */
		if (queue || !walk_done(j))
			return first;
	}
}

bool pf_job_wait(struct pf_job *j, uint32_t ms)
{
	uint64_t until = now_ns() + (uint64_t)ms * 1000000ULL;
	bool done;

	pthread_mutex_lock(&j->lock);
	while (j->outstanding) {
		int r;

		j->sleepers++;
		r = cond_wait_until_ns(&j->cond, &j->lock, until);
		j->sleepers--;
		if (r == ETIMEDOUT)
			break;
	}
	done = !j->outstanding;
	pthread_mutex_unlock(&j->lock);
	return done;
}

void pf_job_get_progress(struct pf_job *j, struct pf_job_progress *p)
{
	pthread_mutex_lock(&j->lock);
	*p = j->p;
	pthread_mutex_unlock(&j->lock);
	p->elapsed_ms = now_ms() - j->start_ms;
}

void pf_job_take_failures(struct pf_job *j, struct pf_job_failure **out, size_t *n)
{
	pthread_mutex_lock(&j->lock);
	*out = j->fails;
	*n = j->nfails;
	j->fails = NULL;
	j->nfails = j->capfails = 0;
	pthread_mutex_unlock(&j->lock);
}
