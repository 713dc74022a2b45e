/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch: every backend fetch of the daemon.
 *
 * One prefetcher per daemon (struct pf_sched, made by prefetch.c: the name
 * is its scheduler's, the handle is the whole) holds the queues of chunk
 * requests (sched.c) and the I/O engine (engine.c) that runs every fetch
 * as a pipeline on one thread: backend read (librados aio, or io_uring for
 * dir:// sources), verify, O_DIRECT write of the cache file through
 * io_uring from registered buffers, record.  Three kinds of work reach the
 * backend:
 *
 *   demand     a reader waits now: a FUSE READ that missed the cache hands
 *              the chunks it needs to the engine (pf_want_submit) and is
 *              answered from the engine thread when they are in, so no
 *              FUSE worker waits for the backend.  Never queued: started
 *              at once, ahead of everything else.
 *   readahead  chunks ahead of a sequential reader (pf_ra_*), and files ahead
 *              of a reader that announced its order (pf_hint_*).
 *   warmup     whole trees staged on request (pf_job_*, `stagefs warmup`).
 *   stage      the rest of a dataset that a user is reading as an epoch
 *              (many distinct files opened, few re-opened), staged by the
 *              daemon on its own (pf_stage_open, epoch_staging).
 *
 * Priorities are strict: a background request is started only while demand
 * fetches in flight plus background ones are below prefetch_inflight, and
 * queued readahead always goes before queued warmup, and warmup before
 * staging.  Within a class the
 * uids that have work are served weighted round robin (weight from
 * prefetch_weights, default 1), each uid capped at prefetch_user_inflight
 * background fetches, so one user's warmup of a huge dataset cannot starve
 * another's.  backend_max_rate caps the bytes per second of all backend
 * fetches with a token bucket: background fetches wait for tokens, demand
 * fetches may borrow up to one second ahead, so a reader is never starved
 * by queued background work.
 *
 * Chunks land in the cache through the cache's fill steps (src/cache/cache.h): a
 * chunk already present is not fetched again, and one being fetched is
 * waited for, never fetched twice.  Without io_uring (prefetch_io_uring =
 * no, or a kernel or sandbox that refuses it) the scheduler falls back to
 * prefetch_inflight worker threads calling cache_read_prefetch(), and readers fetch
 * on their own threads through cache_read().  docs/prefetch.md has the
 * whole design.
 *
 * Threads: the pf_* calls are thread safe.  pf_want_*, pf_demand_* and
 * pf_ra_read run on FUSE workers and never block on backend I/O
 * (pf_demand_begin may sleep for the rate cap: that is the cap).
 */
#ifndef STAGEFS_PREFETCH_H
#define STAGEFS_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend/backend.h"
#include "cache/cache.h"
#include "cred.h"
#include "list.h"

/* The prefetcher (prefetch.c); see the top. */
struct pf_sched;

/* A checked pack in one of the engine's buffers (pf_opts.pack_arrived). */
struct pf_pack {
	struct backend *be;
	uint32_t pack;
	const void *data;	/* its bytes: the pack's id and each member checked */
	size_t len;
	void *buf;		/* the engine's */
	struct list_node node;	/* the taker's, while it holds @p */
};

struct pf_opts {
	uint32_t inflight;	/* demand + background fetches in flight */
	uint32_t user_inflight;	/* background fetches of one uid */
	uint64_t max_rate;	/* bytes/s of all backend fetches; 0 = no cap */
	const char *weights;	/* "UID:WEIGHT,..." (others weigh 1) */
	uint32_t readahead_max;	/* chunks; 0 = no readahead */
	uint64_t ra_slack;	/* bytes a read may land off the sequential frontier */
	uint32_t hint_window;	/* files prefetched ahead of a hinted reader */
	uint64_t hint_window_bytes;
	uint32_t stage_files;	/* distinct files opened that make an epoch */
	uint32_t stage_idle_ms;	/* no open for this long: the readers stopped */
	bool io_uring;		/* the I/O engine (else worker threads) */
	uint64_t buffer_bytes;	/* the engine's buffer region (registered) */
	/*
	 * Around every backend fetch of chunk @idx of cache entry @cf made by
	 * the engine or a worker (readers' included, with the engine), on that
	 * thread: lets the daemon count it.  @res is the byte count or -errno;
	 * @peer: a member of the peer group sent the bytes, not the backend
	 * (src/backend/backend.h, aio_finish).  Either may be NULL.
	 */
	void (*fetch_begin)(void *arg, const struct cfile *cf, uint32_t idx);
	void (*fetch_end)(void *arg, const struct cfile *cf, uint32_t idx, int res,
			  bool peer);
	void *account_arg;
	/*
	 * A pack read for readers (readahead, epoch staging) arrived and
	 * was checked: @p (the engine's) holds its bytes.  Called on the
	 * engine thread, so it must not block: true when the daemon took
	 * @p (released later with pf_pack_release(), any thread), false
	 * when it did not.  A pack taken is written to the cache with
	 * O_DIRECT (its files' bytes reach the page cache from @p); one
	 * not taken, through the page cache as before.  May be NULL.
	 */
	bool (*pack_arrived)(void *arg, struct pf_pack *p);
	void *pack_arg;
};

struct pf_stats {
	uint64_t readahead_fetches;	/* chunks fetched for readahead */
	uint64_t hint_fetches;		/* chunks fetched ahead of hinted readers */
	uint64_t warmup_fetches;	/* chunks fetched by warmup jobs */
	uint64_t stage_fetches;		/* chunks fetched by epoch staging */
	uint64_t demand_fetches;	/* chunks readers fetched themselves */
	uint64_t fetch_errors;		/* background fetches that failed */
	uint64_t cancelled;		/* requests dropped unstarted */
	uint64_t queued;		/* requests waiting now */
	uint64_t inflight;		/* background fetches now */
	uint64_t demand_inflight;	/* reader fetches now */
	uint64_t throttle_ms;		/* time fetches waited for backend_max_rate */
	uint64_t hint_sessions;		/* live hint sessions */
	uint64_t warmup_jobs;		/* running warmup jobs */
	uint64_t uring_ops;		/* transfers through io_uring (cache and dir:// source) */
	uint64_t uring_direct;		/* ... of which O_DIRECT */
	uint64_t uring_fixed;		/* ... of which from registered buffers */
	uint64_t uring_submits;		/* io_uring_enter calls that submitted */
	uint64_t engine_fills;		/* chunks the engine brought in or checked */
	uint64_t engine_wakeups;	/* times another thread woke the engine */
	uint64_t pack_reads;		/* pack reads (docs/manifest.md, "Packs") */
	uint64_t pack_bytes;		/* ... their bytes */
	uint64_t pack_files;		/* files they brought in, each checked */
	uint64_t background_cap;	/* background fetches allowed in flight now */
	uint64_t background_cuts;	/* times a slow demand read halved it */
	uint64_t engine_inflight;	/* fills in flight now */
	uint64_t engine_max_inflight;	/* most fills in flight at once */
	uint64_t engine_buffer_bytes;	/* the buffer region */
	uint64_t engine_registered;	/* 1: the region is registered with io_uring */
	uint64_t buffer_hits;		/* READ pieces served from a recently filled chunk */
	uint64_t async_reads;		/* READs answered from the engine thread */
	/* epoch staging (stage.c) */
	uint64_t stage_active;		/* stagings running now */
	uint64_t stage_started;		/* stagings started */
	uint64_t stage_complete;	/* ... that left the whole dataset cached */
	uint64_t stage_stopped;		/* ... stopped: readers idle, no room, errors, shutdown */
	uint64_t stage_declined;	/* epochs seen but not staged (larger than the share) */
	uint64_t staged_files;		/* files a staging fetched chunks of */
	uint64_t staged_bytes;		/* bytes staging fetched */
};

/*
 * Start the prefetcher over cache @c (prefetch.c): the scheduler, the
 * engine or, without it, worker threads, hint sessions, epoch staging.  Returns 0 or
 * -errno with a message in @err.  Stop with pf_sched_destroy().
 */
int pf_sched_create(const struct pf_opts *o, struct cache *c,
		    struct pf_sched **out, char *err, size_t errlen);
/*
 * Drop queued requests, wait for the fetches in flight, join the workers,
 * free.  Readahead states and jobs still held must not be used afterwards
 * (the daemon calls this after the FUSE loop and the control socket ended).
 */
void pf_sched_destroy(struct pf_sched *s);
void pf_get_stats(struct pf_sched *s, struct pf_stats *st);

/*
 * Demand hooks, around every backend fetch a reader does (fuse/read.c
 * fetch_chunk).  begin waits for the rate cap (borrowing) and counts the
 * fetch in flight; end undoes that.  Both accept a NULL scheduler.
 */
void pf_demand_begin(struct pf_sched *s, size_t len);
void pf_demand_end(struct pf_sched *s);

/* ---- readers (engine.c) ---- */

/*
 * One chunk a READ needs, on the reader's side (embedded in its request
 * context).  The caller sets the first block; the engine fills in the
 * results, then calls ->done once, on the engine thread: done may reply to
 * FUSE and release wants, nothing that blocks.
 */
struct pf_want {
	struct backend *be;
	const struct sfs_attr *attr;	/* backend inode numbers; valid until done */
	struct cfile *cf;		/* the caller's cache reference */
	uint32_t idx, uid;
	bool nothrash;
	void (*done)(struct pf_want *w);
	void *arg;
	/* results */
	int res;			/* 0: @data holds the chunk; -errno */
	const void *data;		/* the whole chunk, @len bytes */
	size_t len;
	bool fetched;			/* its fill read the backend: this READ's miss */
	/* the engine's */
	struct list_node node;		/* on the engine's inbox or a fill's wants */
	void *buf;
	bool origin;			/* its fill was started for it */
	bool retried;
	bool in_pack;			/* waits for its pack's read: ... */
	uint32_t poff, plen;		/* ... for these bytes of it */
};

/* True if the daemon runs the engine (else readers use cache_read()). */
bool pf_has_engine(struct pf_sched *s);
/*
 * The chunk @w names, if it was filled (or checked) recently and is still
 * in the engine's buffers: true with @w->data and @w->len set, to be
 * released with pf_want_release().  Never blocks.
 */
bool pf_want_peek(struct pf_sched *s, struct pf_want *w);
/*
 * Hand @n wants to the engine, at the highest priority.  Returns 0, then
 * each ->done runs once; or -ENOSYS (no engine: nothing queued).
 */
int pf_want_submit(struct pf_sched *s, struct pf_want **w, size_t n);
/* Release what a peeked or done want holds.  Any thread. */
void pf_want_release(struct pf_sched *s, struct pf_want *w);
/* Release a pack taken from pf_opts.pack_arrived.  Any thread. */
void pf_pack_release(struct pf_sched *s, struct pf_pack *p);
/* Count a READ answered from the engine thread. */
void pf_note_async_read(struct pf_sched *s);

/* ---- readahead (readahead.c) ---- */

struct pf_ra;

/*
 * Readahead state of one open file: @a (backend inode numbers) of
 * dataset @be.  Returns NULL where readahead cannot help (a file of one
 * chunk, readahead off, no memory): pf_ra_read/pf_ra_release accept NULL.
 * Released with pf_ra_release().
 */
struct pf_ra *pf_ra_create(struct pf_sched *s, struct backend *be,
			   const struct sfs_attr *a, bool nothrash);
/* A READ of @size bytes at @off by @uid: detect the pattern, queue ahead. */
void pf_ra_read(struct pf_ra *ra, uint64_t off, size_t size, uint32_t uid);
/* The file was closed: queued readahead is dropped.  Never blocks. */
void pf_ra_release(struct pf_ra *ra);

/*
 * ---- walk jobs (job.c) ----
 *
 * One job walks trees or files of datasets and counts, queues or evicts
 * their chunks: WARMUP (fuse/ctl/ctljobs.c), a CACHE_FD hand-over
 * (fuse/ctl/handover.c) and each epoch staging (stage.c) are jobs.
 */

enum pf_job_mode { PF_JOB_FETCH, PF_JOB_CHECK, PF_JOB_EVICT };

struct pf_job;

struct pf_job_opts {
	enum pf_job_mode mode;
	uint32_t shard_i, shard_n;	/* chunks with hash % n == i; n = 0: all */
	uint32_t max_inflight;		/* this job's fetches at once; 0 = default */
	/*
	 * Epoch staging (stage.c): queue at the lowest class, count as
	 * staging, admit chunks only where they fit with no eviction.
	 */
	bool stage;
	struct cred cred;		/* checked (src/cred.h), and charged (its uid) */
	/*
	 * Charged instead of cred.uid when not 0: a tenant (a namespace's
	 * owner id, src/cache/cache.h) or a uid.
	 */
	uint32_t owner;
	/*
	 * Called every ~@tick_ms while the job walks or waits, on the thread
	 * that called pf_job_run/pf_job_wait.  Returning false cancels the
	 * job (the client went away).  May be NULL.
	 */
	bool (*tick)(void *arg);
	void *tick_arg;
	uint32_t tick_ms;
};

struct pf_job_progress {
	uint64_t files, chunks, bytes;	/* in scope, found so far */
	uint64_t cached_before;		/* chunks already present when seen */
	uint64_t cached_before_bytes;
	uint64_t cached_files;		/* files with every in-scope chunk present */
	uint64_t fetched, fetched_bytes;	/* brought in by this job */
	uint64_t fetched_files;		/* files it brought a chunk of in */
	uint64_t nospace;		/* fetched, but the cache would not keep them */
	uint64_t failed;		/* chunks that could not be fetched/stored */
	uint64_t failed_files;		/* files with a failure (incl. unreadable) */
	uint64_t done_chunks, done_bytes;	/* settled, whichever way */
	uint64_t evicted;		/* chunks dropped (evict mode) */
	uint64_t evict_skipped;		/* chunks kept: charged to another user */
	uint64_t elapsed_ms;
	bool walk_done;			/* every PATH walked: totals are final */
};

/* One failure, for the client's message: relative path and errno. */
struct pf_job_failure {
	char *path;
	int err;
};

int pf_job_create(struct pf_sched *s, const struct pf_job_opts *o,
		  struct pf_job **out);
/* One tree or file a job covers. */
struct pf_job_root {
	struct backend *be;
	uint64_t ino;		/* backend inode */
	const char *path;	/* how the client names it, for failures */
	bool nothrash;		/* passed to the cache */
	int err;		/* not 0: @path did not resolve (errno), a failure */
};

/*
 * Walk @roots[0..@n), twice, on this thread: the first walk counts what is
 * in scope (and evicts, in evict mode), then the totals are final
 * (walk_done in the progress); in fetch mode the second walk queues the
 * missing chunks, blocking while the job has max_inflight requests
 * outstanding.  A root with ->err set is recorded as a failure in its
 * place.  Returns when both walks are over (then pf_job_wait() for
 * the fetches): 0, -ECANCELED, or the -errno of the first root that could
 * not be walked (each such failure is also recorded, once).
 */
int pf_job_run(struct pf_job *j, const struct pf_job_root *roots, size_t n);
/*
 * Wait up to @ms for every queued request to settle.  Returns true when
 * all have (the job is complete).
 */
bool pf_job_wait(struct pf_job *j, uint32_t ms);
void pf_job_get_progress(struct pf_job *j, struct pf_job_progress *p);
/*
 * Move failures recorded since the last call to *@out (malloc'ed array of
 * *@n; the caller frees each path and the array).  At most 1000 are kept
 * per job: the counts stay exact.
 */
void pf_job_take_failures(struct pf_job *j, struct pf_job_failure **out, size_t *n);
/* Drop what is still queued; requests in flight finish on their own. */
void pf_job_cancel(struct pf_job *j);
/* Cancel if not done, and drop the caller's reference. */
void pf_job_destroy(struct pf_job *j);

/* ---- order hints (hints.c) ---- */

enum pf_hint_scope { PF_SCOPE_SID, PF_SCOPE_PGID, PF_SCOPE_UID };

/* One file of a hinted order, resolved by the daemon. */
struct pf_hint_file {
	struct backend *be;
	uint64_t bino;		/* backend inode */
	uint64_t key;		/* the FUSE inode a reader opens */
	bool nothrash;
};

struct pf_hint_opts {
	uint32_t uid;		/* whose opens it follows */
	uint32_t owner;		/* charged for its fetches: a tenant or a uid; 0: @uid */
	enum pf_hint_scope scope;
	pid_t scope_id;		/* the hinting process's sid or pgid */
	uint32_t window;	/* files ahead; 0 = the daemon's hint_window */
	uint64_t window_bytes;	/* 0 = the daemon's hint_window_bytes */
};

/*
 * Start a hint session over @files[0..@n) (the array is taken over, freed
 * by the session).  A live session of the same uid and scope is replaced.
 * The first window is queued at once.  Returns 0 and the session's id in
 * *@id, or -errno (then @files was freed too).
 */
int pf_hint_start(struct pf_sched *s, const struct pf_hint_opts *o,
		  struct pf_hint_file *files, size_t n, uint64_t *id);
/* End session @id (of @uid, or any uid for root).  0 or -ENOENT/-EPERM. */
int pf_hint_end(struct pf_sched *s, uint64_t id, uint32_t uid);
/*
 * FUSE inode @key was opened by @pid of @uid: advance the sessions that
 * expect it and queue the next files.  Cheap when there are no sessions.
 */
void pf_hint_open(struct pf_sched *s, uint64_t key, uint32_t uid, pid_t pid);

/* ---- epoch staging (stage.c) ---- */

/*
 * Regular file @bino of dataset @be (called @name in log lines; both live
 * as long as the scheduler) was opened by @uid (primary group @gid), with
 * the dataset's epoch_staging @mode (CFG_OFF, CFG_ON, CFG_AUTO).  Feeds
 * the per (dataset, uid, owner) epoch detector; when it fires, a thread
 * stages the rest of the dataset for @uid at the lowest priority, charged
 * to @owner (a tenant, or 0: @uid).  Never blocks
 * on I/O: a lock, a short search and a hash probe.
 */
void pf_stage_open(struct pf_sched *s, struct backend *be, const char *name,
		   int mode, uint32_t uid, uint32_t gid, uint32_t owner, uint64_t bino);

#endif
