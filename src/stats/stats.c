/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats: see stats.h.  This file counts: the read path (opens, READs,
 * backend fetches), the client library's reports and the node-only
 * counters.  The tables of who
 * is counted, the ticker and snapshots are src/stats/stats_table.c's; what both
 * share, and the lock rules, is in src/stats/stats_i.h.
 *
 * Stall detection.  A fill of chunk i of file F adds 1 to the started
 * count and 1 to the running count of slot hash(F, i) of a small array.
 * A READ notes the slots of its chunks when it begins; it stalled if one
 * was running then, or if one was started while it ran (it fetched, or it
 * waited on another reader's fetch of a chunk it needed).  Slot collisions
 * can only make a READ look stalled, never hide one.
 *
 * Active time.  Each reader thread keeps the end of its latest event
 * (last_ev_ns) and of its latest stalled READ (stall_end_ns), both moved
 * forward only, with a compare-and-swap on the cache line its counters
 * are added to anyway (thread_span()).  An event that ends at t1 adds the
 * time from the previous end to t1 when the gap before it began is at
 * most the idle gap, else only its own span; a stalled READ adds to
 * stall_ns the part of its span after the previous stalled READ's end.
 * Events are taken in the order they end, so overlapping READs of one
 * thread (the kernel's readahead sends several at once) count once; a
 * READ that began before an earlier-ending one of the same thread, after
 * an idle gap, counts only from that one's end (active time is kept at
 * least the stall time, so the share never exceeds 1).
 */
#include "stats_i.h"

#include "util.h"

#include <errno.h>
#include <string.h>

#define FILL_SCAN	256	/* chunks of one READ looked at: a READ is <= 1 MiB, a chunk >= 4 KiB */

/* The READ being served by this thread, for stats_fetch_end(). */
static __thread struct stats_read *cur_read;
static __thread int my_shard = -1;

/* This worker thread's node shard. */
static struct shard *shard_of(struct stats *st)
{
	if (my_shard < 0)
		my_shard = (int)(atomic_fetch_add(&st->next_shard, 1) % NSHARDS);
	return &st->shard[my_shard];
}

/* Add @v to the node-wide totals. */
static void node_add(struct stats *st, const uint64_t *v)
{
	stats_add_fields(shard_of(st)->c, v);
}

/* ---- active time ---- */

/*
 * Thread @p was busy over [@t0, @t1] (an instant when equal): returns the
 * time to add to its active_ns (see the top of this file).  With @stalled
 * (a READ that waited on data), *@stall gets the time to add to its
 * stall_ns.  Relaxed atomics only: the counts are sums, not a timeline.
 */
static uint64_t thread_span(struct stats *st, struct stats_ent *p, uint64_t t0,
			    uint64_t t1, bool stalled, uint64_t *stall)
{
	uint64_t prev = atomic_load_explicit(&p->last_ev_ns, memory_order_relaxed), act;

	while (prev < t1 && !atomic_compare_exchange_weak_explicit(&p->last_ev_ns, &prev, t1,
								    memory_order_relaxed,
								    memory_order_relaxed))
		;
	if (prev >= t1)
		act = 0;
	else if (prev >= t0 || (prev && t0 - prev <= st->opts.idle_gap_ns))
		act = t1 - prev;
	else
		act = t1 - t0;
	if (stalled) {
		uint64_t se = atomic_load_explicit(&p->stall_end_ns, memory_order_relaxed);

		while (se < t1 && !atomic_compare_exchange_weak_explicit(&p->stall_end_ns, &se, t1,
									  memory_order_relaxed,
									  memory_order_relaxed))
			;
		*stall = se >= t1 ? 0 : t1 - MAX(se, t0);
		act = MAX(act, *stall);
	}
	return act;
}

/* An instant event of thread @p now (open, release, a client report): its active time. */
static void thread_event(struct stats *st, struct stats_ent *p, uint64_t t0, uint64_t t1)
{
	uint64_t v[STATS_NFIELDS] = { 0 };

	v[STATS_ACTIVE_NS] = thread_span(st, p, t0, t1, false, NULL);
	if (!v[STATS_ACTIVE_NS])
		return;
	stats_add_fields(p->c, v);
	node_add(st, v);
}

/* ---- the read path ---- */

void stats_open_init(struct stats *st, struct stats_open *so, pid_t pid,
		     uint32_t uid)
{
	uint64_t v[STATS_NFIELDS] = { [STATS_OPENS] = 1 };

	so->proc = NULL;
	so->estimated = false;
	atomic_store(&so->delivered, false);
	if (!st)
		return;
	so->open_ns = now_ns();
	so->proc = stats_proc_get(st, pid, uid);
	if (so->proc) {
		stats_add_fields(so->proc->c, v);
		thread_event(st, so->proc, so->open_ns, so->open_ns);
	}
	node_add(st, v);
}

void stats_open_release(struct stats *st, struct stats_open *so)
{
	uint64_t t = now_ns();

	if (so->proc) {
		/* an open charged as an estimate was, as far as we know, read all along */
		thread_event(st, so->proc, so->estimated ? so->open_ns : t, t);
		atomic_store_explicit(&so->proc->last_ms, stats_ms_of(t), memory_order_relaxed);
		stats_ent_put(so->proc);
		so->proc = NULL;
	}
}

pid_t stats_open_tid(const struct stats_open *so)
{
	return so->proc ? so->proc->tid : 0;
}

/* Chunks a passthrough read of @bytes in @calls touched: see stats_passthrough_read(). */
static uint64_t pt_hits(uint64_t bytes, uint64_t calls, uint32_t chunk_size)
{
	return calls + (chunk_size ? bytes / chunk_size : 0);
}

/*
 * Charge the whole file of @so, @size bytes in @chunk_size chunks, as read
 * now and estimated, into @v (added by the caller): its reads will not
 * reach the daemon.
 */
static void open_estimate(struct stats_open *so, uint64_t size, uint32_t chunk_size,
			  uint64_t *v)
{
	v[STATS_READ_BYTES] = size;
	v[STATS_READ_BYTES_EST] = size;
	v[STATS_FILES] = 1;
	v[STATS_HITS] = chunk_size ? (size + chunk_size - 1) / chunk_size : 1;
	atomic_store_explicit(&so->delivered, true, memory_order_relaxed);
	so->estimated = true;
}

void stats_open_passthrough(struct stats *st, struct stats_open *so, uint64_t size,
			    uint32_t chunk_size, bool estimate)
{
	uint64_t v[STATS_NFIELDS] = { [STATS_PT_OPENS] = 1, [STATS_PT_BYTES] = size };

	if (!st)
		return;
	if (estimate && size) {
		open_estimate(so, size, chunk_size, v);
		v[STATS_PT_READ_BYTES] = size;
	}
	if (so->proc)
		stats_add_fields(so->proc->c, v);
	node_add(st, v);
}

void stats_open_cached(struct stats *st, struct stats_open *so, uint64_t size,
		       uint32_t chunk_size)
{
	uint64_t v[STATS_NFIELDS] = { 0 };

	if (!st || !size)
		return;
	open_estimate(so, size, chunk_size, v);
	if (so->proc)
		stats_add_fields(so->proc->c, v);
	node_add(st, v);
}

void stats_passthrough_read(struct stats *st, struct stats_open *so, pid_t tid,
			    pid_t tgid, uint32_t uid, uint64_t bytes, uint64_t calls, uint64_t busy_ns,
			    uint64_t last_ns, uint32_t chunk_size, bool estimated)
{
	uint64_t v[STATS_NFIELDS] = { 0 };
	struct stats_ent *p = so ? so->proc : NULL, *ref = NULL;

	if (!st || (!bytes && !calls))
		return;
	v[STATS_READ_BYTES] = bytes;
	v[STATS_PT_READ_BYTES] = bytes;
	if (estimated)
		v[STATS_READ_BYTES_EST] = bytes;
	if (bytes) {
		v[STATS_HITS] = pt_hits(bytes, calls, chunk_size);
		if (so && !atomic_load_explicit(&so->delivered, memory_order_relaxed) &&
		    !atomic_exchange_explicit(&so->delivered, true, memory_order_relaxed))
			v[STATS_FILES] = 1;
	}
	/*
	 * Reported up to a second late: the reader (an io_uring worker, a
	 * short-lived thread) may be exiting by then, and /proc no longer says
	 * its job.  A thread of the opener's process has the opener's job:
	 * it is charged to the opener's record.  Another process is looked up;
	 * one that is gone is charged to the opener too.
	 */
	if (tid > 0 && (!p || ((p->tid != tid || p->uid != uid) &&
			       (p->tgid != tgid || p->uid != uid)))) {
		ref = p ? stats_proc_get_known(st, tid, uid) : stats_proc_get(st, tid, uid);
		if (ref)
			p = ref;
	}
	if (p) {
		if (busy_ns > last_ns)
			busy_ns = last_ns;
		v[STATS_ACTIVE_NS] = thread_span(st, p, last_ns - busy_ns, last_ns, false, NULL);
		stats_add_fields(p->c, v);
		atomic_store_explicit(&p->last_ms, now_ms(), memory_order_relaxed);
	}
	node_add(st, v);
	stats_ent_put(ref);
}

static _Atomic uint64_t *fill_slot(struct stats *st, const void *file, uint32_t idx)
{
	return &st->fill[stats_mix32((uint64_t)(uintptr_t)file ^ ((uint64_t)idx << 40) ^ idx) &
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
	rd->reader = NULL;
	rd->pending = false;
	rd->detached = false;
	rd->fills0 = fills_seen(rd, &rd->pending);
	rd->outer = cur_read;
	cur_read = rd;
}

void stats_read_reader(struct stats_read *rd, struct stats_open *so, pid_t pid,
		       uint32_t uid)
{
	struct stats_ent *p = so ? so->proc : NULL;

	if (rd->st && !rd->reader && (!p || p->tid != pid || p->uid != uid))
		rd->reader = stats_proc_get(rd->st, pid, uid);
}

void stats_read_drop_reader(struct stats_read *rd)
{
	if (rd->reader) {
		stats_ent_put(rd->reader);
		rd->reader = NULL;
	}
}

void stats_read_end(struct stats_read *rd, struct stats_open *so, pid_t pid,
		    uint32_t uid, ssize_t n)
{
	struct stats *st = rd->st;
	uint64_t v[STATS_NFIELDS] = { 0 }, t1, stall = 0;
	struct stats_ent *p, *ref = NULL;
	bool stalled;

	if (!st)
		return;
	if (!rd->detached)
		cur_read = rd->outer;
	t1 = now_ns();
	v[STATS_READS] = 1;
	v[STATS_READ_NS] = t1 - rd->t0;
	stalled = rd->pending || rd->misses || fills_seen(rd, NULL) != rd->fills0;
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

	p = so ? so->proc : NULL;
	if (rd->reader) {
		ref = p = rd->reader;	/* found at the READ's start */
	} else if (!p || p->tid != pid || p->uid != uid) {
		/* not the opener (another thread or process): find the reader */
		ref = stats_proc_get(st, pid, uid);
		if (ref)
			p = ref;
	}
	if (p) {
		v[STATS_ACTIVE_NS] = thread_span(st, p, rd->t0, t1, stalled, &stall);
		v[STATS_STALL_NS] = stall;
	} else {
		/* charged to nobody: the READ's own time, node-wide */
		v[STATS_ACTIVE_NS] = t1 - rd->t0;
		v[STATS_STALL_NS] = stalled ? t1 - rd->t0 : 0;
	}
	/* node-wide misses and backend bytes were counted by stats_fetch_end */
	node_add(st, v);
	v[STATS_MISSES] = rd->misses;
	v[STATS_BACKEND_BYTES] = rd->backend_bytes;

	if (p) {
		stats_add_fields(p->c, v);
		if (stats_ms_of(t1) != atomic_load_explicit(&p->last_ms, memory_order_relaxed))
			atomic_store_explicit(&p->last_ms, stats_ms_of(t1), memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&st->untracked, 1, memory_order_relaxed);
	}
	stats_ent_put(ref);
}

void stats_read_detach(struct stats_read *rd)
{
	if (!rd->st || rd->detached)
		return;
	cur_read = rd->outer;
	rd->detached = true;
}

void stats_read_waited(struct stats_read *rd)
{
	rd->pending = true;
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
	if (bytes == STATS_FETCH_NONE)
		return;
	if (bytes < 0) {
		stats_node_add(st, STATS_NODE_BACKEND_ERRORS, 1);
		return;
	}
	v[STATS_MISSES] = 1;
	v[STATS_BACKEND_BYTES] = (uint64_t)bytes;
	node_add(st, v);
	if (cur_read && cur_read->st == st) {
		cur_read->misses++;
		cur_read->backend_bytes += (uint64_t)bytes;
	}
}

void stats_node_add(struct stats *st, enum stats_node_field f, uint64_t n)
{
	if (st)
		atomic_fetch_add_explicit(&shard_of(st)->node_only[f], n, memory_order_relaxed);
}

/*
 * stats_add_fields that stops at UINT64_MAX instead of wrapping: for the
 * client library's reports, the only counts a peer states itself (the
 * daemon bounds them too, fuse/ctl/handover.c), so that no report can make a
 * counter look reset.
 */
static void add_fields_sat(_Atomic uint64_t *c, const uint64_t *v)
{
	for (int i = 0; i < STATS_NFIELDS; i++) {
		uint64_t old, sum;

		if (!v[i])
			continue;
		old = atomic_load_explicit(&c[i], memory_order_relaxed);
		do {
			sum = u64_add_sat(old, v[i]);
		} while (!atomic_compare_exchange_weak_explicit(&c[i], &old, sum,
								memory_order_relaxed,
								memory_order_relaxed));
	}
}

/*
 * Charge @v to the library's peer: @pid's reader record (see stats.h) or,
 * for a @job other than its own, user @uid and that job.  0 or -ENOSPC.
 */
static int charge_peer(struct stats *st, pid_t pid, uint32_t uid, const char *job,
		       const uint64_t *v)
{
	struct stats_ent *p = pid > 0 ? stats_proc_get(st, pid, uid) : NULL, *user, *j = NULL;
	char clean[PROCINFO_JOB_MAX];

	if (job)
		stats_clean_name(clean, sizeof(clean), job[0] ? job : "unknown");
	/* "k8s:" names are the daemon's for pods: a client names only its own */
	if (job && !strncmp(clean, "k8s:", 4) && !(p && !strcmp(p->job->name, clean))) {
		job = p ? NULL : "unknown";
	}
	if (p && (!job || !strcmp(p->job->name, clean))) {
		uint64_t t = now_ns();

		add_fields_sat(p->c, v);
		thread_event(st, p, t, t);
		atomic_store_explicit(&p->last_ms, stats_ms_of(t), memory_order_relaxed);
		stats_ent_put(p);
		return 0;
	}
	stats_ent_put(p);
	user = stats_user_get(st, uid);
	if (user)
		j = stats_job_get(st, user, job);
	if (user)
		add_fields_sat(user->c, v);
	if (j)
		add_fields_sat(j->c, v);
	stats_ent_put(j);
	stats_ent_put(user);
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
	add_fields_sat(shard_of(st)->c, v);
	return charge_peer(st, pid, uid, job, v);
}

void stats_client_open(struct stats *st, pid_t pid, uint32_t uid)
{
	uint64_t v[STATS_NFIELDS] = { [STATS_OPENS] = 1 };

	if (!st)
		return;
	add_fields_sat(shard_of(st)->c, v);
	stats_node_add(st, STATS_NODE_CLIENT_OPENS, 1);
	charge_peer(st, pid, uid, NULL, v);
}

void stats_client_stage(struct stats *st, pid_t pid, uint32_t uid, uint64_t t0,
			uint64_t t1, uint64_t chunks, uint64_t missing,
			uint64_t fetched_bytes)
{
	uint64_t v[STATS_NFIELDS] = { 0 }, node[STATS_NFIELDS] = { 0 }, stall = 0;
	struct stats_ent *p;

	if (!st || pid <= 0 || t1 < t0)
		return;
	p = stats_proc_get(st, pid, uid);
	if (!p)
		return;
	if (missing > chunks)
		missing = chunks;
	v[STATS_HITS] = node[STATS_HITS] = chunks - missing;
	v[STATS_MISSES] = missing;
	v[STATS_BACKEND_BYTES] = fetched_bytes;
	v[STATS_ACTIVE_NS] = thread_span(st, p, t0, t1, missing > 0, &stall);
	v[STATS_STALL_NS] = stall;
	node[STATS_ACTIVE_NS] = v[STATS_ACTIVE_NS];
	node[STATS_STALL_NS] = stall;
	add_fields_sat(p->c, v);
	add_fields_sat(shard_of(st)->c, node);
	atomic_store_explicit(&p->last_ms, stats_ms_of(t1), memory_order_relaxed);
	stats_ent_put(p);
}

int stats_gpu_account(struct stats *st, pid_t pid, uint32_t uid, const char *job,
		      int gpu, uint64_t bytes)
{
	uint64_t v[STATS_NFIELDS] = { [STATS_GPU_BYTES] = bytes };
	struct stats_ent *g;
	int ret;

	if (!st)
		return 0;
	if (gpu < 0 || gpu > 65535)
		return -EINVAL;
	add_fields_sat(shard_of(st)->c, v);
	g = stats_gpu_get(st, gpu);
	if (g) {
		add_fields_sat(g->c, v);
		atomic_store_explicit(&g->last_ms, now_ms(), memory_order_relaxed);
	}
	ret = charge_peer(st, pid, uid, job, v);
	stats_ent_put(g);
	return g ? ret : -ENOSPC;
}
