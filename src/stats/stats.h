/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats: the node's feed rate: how many bytes and files reach the training
 * processes and GPUs, per user, per job, per process and per GPU, how often
 * the cache had the data, and how long readers waited for data it had not.
 *
 * What is counted (docs/feedrate.md has the full story):
 *  - read_bytes: bytes delivered to readers: what READ requests returned,
 *    plus what the client library reports it read itself from cache files
 *    the daemon handed it (client_read_bytes, stats_client_account()).
 *    read_requests: READ requests only, every one the daemon answers from
 *    a dataset file (fuse/read.c brackets each with stats_read_begin/end),
 *    failed ones also in read_errors.  Reads the kernel serves from its
 *    page cache (keep_cache) or from a passthrough backing file never reach
 *    the daemon and are not in these.
 *  - files_read: opens through which at least one byte was read, counted
 *    once per open, at its first READ that returned data, or reported by
 *    the client library for its handles.  opens: every open of a regular
 *    file, through the mount or by the client library (stats_client_open).
 *  - cache_hits / cache_misses: chunk level, counted here: each chunk a
 *    READ touches is a hit (stats_read_end), except the chunks that READ
 *    fetched from the backend itself (misses).  Node-wide, misses and
 *    backend_bytes are every successful backend fetch, counted when it
 *    ends (stats_fetch_end), for a READ or for nobody's (warmup,
 *    readahead); the node cache's own hits and misses (cache_get_stats)
 *    are counted apart, in src/cache/cache_read.c and src/cache/cache_fill.c.
 *  - Passthrough reads never reach the daemon.  Where a kernel hook sees
 *    them (fuse/ptacct.c) they are reported with stats_passthrough_read()
 *    and counted exactly, as hits with no stall; otherwise
 *    stats_open_passthrough() charges the file's size at open as an
 *    estimate, kept apart in read_bytes_estimated.  pt_read_bytes: the
 *    part of read_bytes read through passthrough (exact or estimated).
 *    passthrough_opens, passthrough_bytes_est: those opens and the sum of
 *    their files' sizes at open.
 *  - active_ns: per reader thread, the time it was busy reading: the time
 *    between its consecutive events (OPEN, a READ's begin and end,
 *    RELEASE, a client-library report, passthrough reads drained with the
 *    end of their last call), except gaps longer than idle_gap_ns; a READ
 *    in flight is always active.  Users, jobs, processes and the node sum
 *    their threads'.
 *  - stall_ns: per reader thread, the time it had a READ in flight that
 *    waited on data not in the cache yet (it fetched a chunk, or a chunk
 *    it needed was being fetched when it began or began being fetched
 *    while it ran); overlapping READs of one thread count once.
 *    stall_ratio = stall_ns / active_ns: the share of the readers' time
 *    lost waiting for data.  read_ns: every READ's time in the daemon
 *    (summed, overlaps and all).
 *  - gpu_bytes: bytes the client library reports it copied to GPU memory
 *    (stats_gpu_account()), whichever way it read them.  A byte read from a
 *    handed-over cache file into a GPU is in read_bytes, client_read_bytes
 *    and gpu_bytes; one read through the mount into a GPU is in read_bytes
 *    (its READ) and gpu_bytes.
 *
 * Who: a READ is charged to the thread FUSE names in the request (its
 * pid and uid).  Threads are identified once, from /proc (procinfo.h:
 * process, start time, job rule) and cached in a bounded table; entries
 * whose thread is gone are folded into their user and job and dropped a
 * minute later.  Users are keyed by uid, jobs by (uid, job name), GPUs by
 * device index.  Per-process rows merge the threads of one process.
 *
 * Cost on the read path: a READ adds relaxed atomic increments to its
 * reader thread's own record (found through the open file, so no lookup
 * when the opener reads) and to one of several node shards picked per
 * worker thread, two clock reads, and an atomic load per chunk touched.
 * No lock is taken, none is shared by all READs.  User and job totals are
 * the sums of their threads', made when a snapshot is taken.
 *
 * Node-only counters (enum stats_node_field): figures of the daemon that
 * no reader is charged and no rate is kept for (failed fetches, OPENs
 * received, ...), counted on the same shards (stats_node_add()) and read
 * with the node totals (stats_node_totals(), stats_snap.node_only).
 *
 * Rates: a ticker thread samples every total once a second into a ring of
 * STATS_RING samples; the rate over W seconds is (now - the sample W s
 * ago) / elapsed time, using what exists for younger records.
 *
 * This module counts and takes snapshots (stats_snapshot()); turning a
 * snapshot into JSON or Prometheus text is src/stats/stats_render.h's job.
 */
#ifndef STAGEFS_STATS_H
#define STAGEFS_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "procinfo.h"

enum stats_field {
	STATS_READ_BYTES,
	STATS_FILES,
	STATS_OPENS,
	STATS_READS,
	STATS_READ_ERRORS,
	STATS_HITS,
	STATS_MISSES,
	STATS_BACKEND_BYTES,
	STATS_STALL_NS,
	STATS_READ_NS,
	STATS_PT_OPENS,
	STATS_PT_BYTES,		/* estimated */
	STATS_GPU_BYTES,
	STATS_CLIENT_BYTES,	/* read by the client library itself (also in READ_BYTES) */
	STATS_PT_READ_BYTES,	/* read through passthrough opens (also in READ_BYTES) */
	STATS_READ_BYTES_EST,	/* of READ_BYTES, the part that is estimated */
	STATS_ACTIVE_NS,	/* reader threads' active time */
	STATS_NFIELDS
};

/*
 * Counted node-wide only: no reader is charged, no rate is kept.  Each
 * says who counts it.
 */
enum stats_node_field {
	STATS_NODE_OPEN_REQUESTS,	/* OPENs of dataset files received (fuse/ops.c) */
	STATS_NODE_CLIENT_OPENS,	/* of STATS_OPENS, the client library's (stats_client_open) */
	STATS_NODE_BACKEND_ERRORS,	/* backend fetches that failed (stats_fetch_end) */
	STATS_NODE_PT_REUSED,		/* passthrough opens on a kept backing id (fuse/passthrough.c) */
	STATS_NODE_LOOKUP_READAHEADS,	/* cache files read ahead at LOOKUP (fuse/ops.c) */
	STATS_NODE_READ_PUSHES,		/* files put in the page cache at OPEN (fuse/read.c) */
	STATS_NODE_PUSH_KEPT,		/* OPENs of a pushed file the kernel still held (fuse/read.c) */
	STATS_NODE_PACK_PUSHES,		/* files put in the page cache as their pack arrived (fuse/packpush.c) */
	STATS_NODE_NFIELDS
};

enum stats_window { STATS_W1, STATS_W10, STATS_W60, STATS_NWIN };

enum stats_kind { STATS_USER, STATS_JOB, STATS_PROC, STATS_GPU, STATS_NKINDS };

#define STATS_RING	62	/* per-second samples kept: the 60 s window and its ends */

struct stats;
struct stats_ent;	/* a user, job, reader thread or GPU: reference counted */

struct stats_opts {
	uint32_t max_procs;	/* reader threads tracked at once (default 4096) */
	uint32_t max_jobs;	/* (default 4096) */
	uint32_t max_users;	/* (default 1024) */
	uint32_t max_gpus;	/* (default 256) */
	uint32_t proc_keep_s;	/* a gone thread's row stays this long (default 60) */
	uint64_t idle_gap_ns;	/* a longer gap between a thread's events is idle (default 2 s) */
	bool no_ticker;		/* tests: call stats_tick() by hand */
};

/*
 * Create the counters and start the ticker thread.  @opts may be NULL for
 * the defaults.  Returns 0 or -errno; release with stats_destroy(), after
 * the last call into it has returned.
 */
int stats_create(const struct stats_opts *opts, struct stats **out);
void stats_destroy(struct stats *st);

/* Take one per-second sample now and expire gone threads (the ticker's job). */
void stats_tick(struct stats *st);

/* ---- the read path (fuse/ops.c opens, fuse/read.c READs) ---- */

/* Per-open state, embedded in the open file's handle. */
struct stats_open {
	struct stats_ent *proc;		/* the opener's thread; a reference */
	_Atomic bool delivered;		/* a READ through this open returned data */
	bool estimated;			/* its file charged as an estimate at open */
	uint64_t open_ns;		/* when it was opened (CLOCK_MONOTONIC) */
};

/*
 * Record an open of a regular file by thread @pid of user @uid in @so.
 * Never fails: a reader that cannot be identified is counted node-wide
 * only.  Undo with stats_open_release() when the open is released.
 * @st may be NULL (nothing counted).
 */
void stats_open_init(struct stats *st, struct stats_open *so, pid_t pid,
		     uint32_t uid);
void stats_open_release(struct stats *st, struct stats_open *so);
/* The opener's thread id (as FUSE named it), or 0 where it was not identified. */
pid_t stats_open_tid(const struct stats_open *so);

/*
 * The open in @so (after stats_open_init) is served by FUSE passthrough,
 * of a file of @size bytes cut in @chunk_size chunks.  With @estimate
 * (nothing will report its reads) the whole file is charged now, as read
 * and estimated (read_bytes_estimated), its chunks as hits, and the open's
 * life as active time at its release; without, only the open is counted
 * and its reads come with stats_passthrough_read().
 */
void stats_open_passthrough(struct stats *st, struct stats_open *so, uint64_t size,
			    uint32_t chunk_size, bool estimate);
/*
 * The open in @so (after stats_open_init) is of a file of @size bytes that
 * the kernel's page cache holds whole already (fuse/pushmap.h): its reads
 * will not reach the daemon, so it is charged now as an estimated
 * passthrough open is (read and estimated, its chunks as hits, the open's
 * life as active time), with no passthrough field.
 */
void stats_open_cached(struct stats *st, struct stats_open *so, uint64_t size,
		       uint32_t chunk_size);

/*
 * Reads through the passthrough open @so that a kernel hook saw (fuse/ptacct.c):
 * thread @tid of process @tgid, user @uid (@tid 0: unknown, charged to the
 * opener; a thread of the opener's process too, since it has its job and
 * may be gone by the time this is reported) read
 * @bytes in @calls calls, which took @busy_ns in all, the last ending at
 * @last_ns (CLOCK_MONOTONIC).  Charged like READs served from the cache:
 * read_bytes, files_read at the open's first byte, one hit per call and
 * per @chunk_size boundary crossed (calls + bytes / chunk_size), no stall,
 * and active time up to @last_ns.  @estimated: the bytes are an estimate
 * (read_bytes_estimated too).
 */
void stats_passthrough_read(struct stats *st, struct stats_open *so, pid_t tid,
			    pid_t tgid, uint32_t uid, uint64_t bytes, uint64_t calls, uint64_t busy_ns,
			    uint64_t last_ns, uint32_t chunk_size, bool estimated);

/* One READ in flight, on the READ handler's stack. */
struct stats_read {
	struct stats *st;
	struct stats_read *outer;	/* the thread's previous one (nesting) */
	uint64_t t0;
	const void *file;
	uint32_t first, last;		/* chunks the READ may touch */
	uint64_t off;
	uint32_t chunk_size;
	uint64_t fills0;		/* fill starts seen at begin */
	bool pending;			/* a fill was running at begin */
	bool detached;			/* ends on another thread */
	uint32_t misses;		/* chunks this READ fetched */
	uint64_t backend_bytes;
	struct stats_ent *reader;	/* stats_read_reader()'s (a reference), or NULL */
};

/*
 * Bracket one READ of @len bytes at @off of the cache file @file (any
 * pointer that names the file's cache entry), cut in @chunk_size chunks.
 * stats_read_end() charges @n (the bytes returned, or -errno) to thread
 * @pid, or to the opener in @so if @pid cannot be identified.
 */
void stats_read_begin(struct stats *st, struct stats_read *rd, const void *file,
		      uint64_t off, size_t len, uint32_t chunk_size);
void stats_read_end(struct stats_read *rd, struct stats_open *so, pid_t pid,
		    uint32_t uid, ssize_t n);
/*
 * Find now, on this thread, whom stats_read_end(@rd, @so, @pid, @uid)
 * will charge: a thread's first READ reads /proc (procinfo_read), which
 * the I/O engine's thread must not do.  Call it before handing the READ
 * over; the same arguments must then go to stats_read_end().
 */
void stats_read_reader(struct stats_read *rd, struct stats_open *so, pid_t pid,
		       uint32_t uid);
/*
 * A READ begun and looked up that will not reach stats_read_end() (it
 * goes another way after all): let go of what stats_read_reader() holds.
 */
void stats_read_drop_reader(struct stats_read *rd);
/*
 * The READ of @rd will be answered by another thread (the I/O engine): it
 * stops being this thread's current READ now; stats_read_end() may then
 * run on any thread.  Fetches made for it elsewhere are charged with
 * stats_read_fetched().
 */
void stats_read_detach(struct stats_read *rd);
/* A fetch of @bytes made for @rd's READ by another thread (its miss). */
void stats_read_fetched(struct stats_read *rd, uint64_t bytes);
/*
 * @rd's READ waited for a fill it did not find done (the engine answered it
 * once the chunk was in, whoever fetched it): its time is a stall, even
 * where the fill had left the backend before the READ began.
 */
void stats_read_waited(struct stats_read *rd);

/*
 * Bracket a backend fetch of chunk @idx of @file (any thread).  A fetch
 * made inside stats_read_begin/end on the same thread is charged to that
 * READ's reader.  @bytes is what the fetch returned (or -errno): a success
 * is a node-wide miss and backend_bytes, a failure STATS_NODE_BACKEND_ERRORS;
 * STATS_FETCH_NONE ends the bracket counting nothing (the chunk came from
 * elsewhere: a peer of the group).
 */
#define STATS_FETCH_NONE	((ssize_t)INT64_MIN)
void stats_fetch_begin(struct stats *st, const void *file, uint32_t idx);
void stats_fetch_end(struct stats *st, const void *file, uint32_t idx, ssize_t bytes);

/* Add @n to node-only counter @f (a relaxed add on this thread's shard; @st may be NULL). */
void stats_node_add(struct stats *st, enum stats_node_field f, uint64_t n);

/*
 * Reports of the client library (gpudirect/), made over the control socket
 * by process @pid of user @uid (its SO_PEERCRED).  With @job NULL the bytes
 * are charged like @pid's READs: to its reader record, so its process, its
 * user and its job by the job rule see them.  With a @job (the library's
 * STAGEFS_JOB, set after exec) they go to user @uid and that job, and to no
 * process row unless it is @pid's own job.  Each returns 0, or -ENOSPC
 * when a table is full (then counted where possible, node-wide always).
 */

/*
 * The library read @bytes itself from cache files the daemon handed it
 * (no READ request saw them), through @files handles that delivered their
 * first byte since the last report.  They count as read_bytes and
 * files_read, and as client_read_bytes.
 */
int stats_client_account(struct stats *st, pid_t pid, uint32_t uid, const char *job,
			 uint64_t bytes, uint64_t files);

/*
 * The library opened a file by asking for its cache file (CACHE_FD), not
 * through the mount: one of @pid's opens, as a FUSE OPEN would count.
 */
void stats_client_open(struct stats *st, pid_t pid, uint32_t uid);

/*
 * The library's open of a file by its cache file (CACHE_FD) took from @t0
 * to @t1 (CLOCK_MONOTONIC) in the daemon, which staged the file's @chunks
 * chunks, @missing of which were not in the cache when it looked
 * (@fetched_bytes came from the backend for it).  Charged to @pid's reader
 * record like a READ's chunks: hits and misses, backend_bytes, active
 * time, and the whole span as a stall when anything was missing.  The
 * node's misses and backend_bytes are counted by the fetches themselves.
 */
void stats_client_stage(struct stats *st, pid_t pid, uint32_t uid, uint64_t t0,
			uint64_t t1, uint64_t chunks, uint64_t missing,
			uint64_t fetched_bytes);

/*
 * The library copied @bytes to GPU @gpu (the node's index of the device,
 * 0-65535): gpu_bytes of the GPU's row and of the reader's rows.
 * -EINVAL for a bad index.
 */
int stats_gpu_account(struct stats *st, pid_t pid, uint32_t uid, const char *job,
		      int gpu, uint64_t bytes);

/* ---- reading the counters ---- */

struct stats_row {
	enum stats_kind kind;
	uint32_t uid;			/* users, jobs, processes */
	char user[PROCINFO_JOB_MAX];	/* user name, or the uid in decimal */
	char job[PROCINFO_JOB_MAX];	/* jobs, processes */
	int gpu;			/* GPUs */
	pid_t pid;			/* processes: the process (tgid) */
	char comm[17];			/* processes */
	uint32_t threads;		/* processes: reader threads merged */
	bool alive;			/* processes */
	uint64_t total[STATS_NFIELDS];
	double rate[STATS_NWIN][STATS_NFIELDS];	/* per second */
};

struct stats_snap {
	uint64_t uptime_ms;
	uint64_t untracked_reads;	/* READs no reader could be found for */
	struct stats_row node;
	uint64_t node_only[STATS_NODE_NFIELDS];
	struct stats_row *rows;		/* users, jobs, processes, GPUs, in that order */
	size_t nrows;
	size_t nkind[STATS_NKINDS];
};

/*
 * A consistent snapshot of every counter, exact as of now, and the rates
 * as of now.  Returns 0 or -ENOMEM; free with stats_snap_free().
 */
int stats_snapshot(struct stats *st, struct stats_snap **out);
void stats_snap_free(struct stats_snap *snap);

/*
 * The node totals alone, as of now: what a snapshot's node.total and
 * node_only hold, without the tables, so it cannot fail.  @st NULL: zeros.
 */
void stats_node_totals(struct stats *st, uint64_t total[STATS_NFIELDS],
		       uint64_t node_only[STATS_NODE_NFIELDS]);

extern const unsigned stats_window_s[STATS_NWIN];
extern const char *const stats_window_name[STATS_NWIN];

/*
 * hits / (hits + misses) and stall / active time of @v (at most 1);
 * negative if undefined.
 */
double stats_hit_ratio(const uint64_t *v);
double stats_stall_ratio(const uint64_t *v);

#endif
