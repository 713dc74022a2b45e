/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine: every backend fetch of the daemon, as a pipeline on one thread.
 *
 * One file on purpose (over the ~900 lines a file otherwise keeps to): it
 * is one state machine, the stages below, and its transitions read best
 * side by side.
 *
 * One engine thread owns an io_uring and every fill in flight (struct
 * fill: STYLE #7, one context per chunk, its buffer alongside).  A fill
 * goes through these stages, each a step of the cache's fill API
 * (src/cache/cache.h) or a transfer the engine starts and gets back later:
 *
 *   claim       cache_fill_claim(): present (done), busy (a cache_waiter is
 *               queued; it hands the fill back when the other filler is
 *               done), fetch, or check (first read after a start)
 *   throttled   waiting for backend_max_rate tokens (pf_bucket_try), timed
 *   nobuf       waiting for a buffer of the pool (background fills only)
 *   fetch       librados aio (backend aio_start: the completion callback on
 *               the librados thread only queues the fill and pokes the
 *               eventfd; where the node has a peer group, the chunk's owner
 *               is asked first, src/peer/peer.h), or an io_uring read of the
 *               dir:// source file (backend source_open)
 *   verify      on this thread: aio_finish checks the XXH3-128 the chunk is
 *               named by and hands it on (so nothing is hashed twice);
 *               dir:// bytes are hashed here; cache_fill_commit()
 *   serve       the buffer is published (below) and the readers waiting
 *               for the chunk are answered: they do not wait for the write;
 *               a background fill gives its fetch slot back
 *   write       io_uring writes of the cache file from the buffer: the
 *               aligned part through the O_DIRECT twin of the descriptor
 *               (not through the page cache), an unaligned tail (a file's
 *               last chunk) buffered, and with cache_sync an fdatasync,
 *               linked (IOSQE_IO_LINK) so it runs after both writes; at
 *               most ENG_MAX_WRITES fills write at once, others queue
 *   commit      cache_fill_written(): recorded, waiters woken
 *   check       a read-back (O_DIRECT where aligned) + cache_check_done()
 *
 * The published buffer (prefetch/bufpool.h) is handed to the readers who wanted
 * the chunk, and the READs that follow for the rest of the chunk are
 * served from memory.  Buffers come from one region
 * registered with io_uring_register_buffers (READ_FIXED/WRITE_FIXED); if
 * registration fails (memlock limit) the same region is used unregistered.
 * O_DIRECT is dropped for good where the filesystem refuses it (open or
 * write EINVAL: ramfs): buffered writes then.
 *
 * Work arrives three ways, all handed to this thread: readers' wants
 * (pf_want_submit, started at once at the highest priority, attached to the
 * fill of the same chunk when one is in flight), background requests of
 * the scheduler (pf_sched_next() whenever demand + background fills leave
 * room under prefetch_inflight: the scheduler's classes, per-uid fairness
 * and caps decide which), and fills handed back (backend completions, cache
 * waiters).  Foreign threads only queue on the inbox under e->lock and poke
 * an eventfd; the ring polls that eventfd (POLL_ADD, no buffer), so the
 * thread sleeps in one place: io_uring_submit_and_wait_timeout().  Each loop
 * turn handles every completion and every queued item, prepares their SQEs,
 * and submits once (STYLE #11).
 *
 * Yielding: the scheduler orders demand before background work, but the
 * OSD serves what reaches it in order, so background reads in flight
 * delay a reader's.  Each demand read is timed: with no background read
 * in flight it feeds a baseline (an EWMA per size class); with some, a
 * read slower than twice its baseline (plus 1 ms) halves bg_cap, the
 * background requests allowed in flight (at most once per baseline
 * time), and one within it adds one back, up to prefetch_inflight: AIMD
 * on the readers' latency.  After ENG_QUIET_NS without a demand read the
 * cap is lifted.
 *
 * Lifetimes: a fill's buffer is held by the fill from before its first
 * transfer until every CQE of it and the backend's done have come back;
 * a reader's want takes its own reference.  So no buffer is reused while
 * the kernel or librados may still write it.  At shutdown nothing new is
 * started, fills waiting (throttled, for a buffer, for another filler)
 * are dropped, those in flight finish, and only then are the ring and the
 * pool freed.
 *
 * Locking: e->lock guards the inbox; everything else belongs to the engine
 * thread, except the atomic counters.  Lock order: the cache's lock before
 * e->lock (a cache waiter runs under the cache's lock).
 */
#include "prefetch_i.h"

#include "bufpool.h"
#include "htab.h"
#include "list.h"
#include "log.h"
#include "packentry.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define ENG_DEPTH	256		/* SQ entries */
#define ENG_CQ_DEPTH	4096		/* CQ entries: room for every transfer in flight */
#define ENG_MAX_WRITES	64		/* cache writes in flight; more wait their turn */
#define ALIGN		4096		/* O_DIRECT: buffer, offset and length */
#define DIRECT_MIN	(256u << 10)	/* smaller files: written buffered */
#define TAG_POLL	0ULL		/* user_data of the eventfd poll */
#define OP_MASK		7ULL		/* low bits of a fill's user_data: */
enum { OP_SRC = 1, OP_WRITE, OP_SYNC, OP_CHECK, OP_OPEN };
#define MAX_HIT_RETRIES	3
#define ENG_MAX_OUTSIDE	4		/* background fills of chunks larger than the region */
#define ENG_LAT_CLASSES	5		/* demand read sizes: <=64K, 256K, 1M, 4M, more */
#define ENG_QUIET_NS	(2ull * 1000000000)	/* no demand read this long: background at full width */
#define ENG_PACK_RECENT	1024		/* packs read lately, remembered (direct mapped) */
#define ENG_PACK_HOLD_NS	(30ull * 1000000000)	/* ... for this long */

enum stage {
	FS_CLAIM,	/* to claim (again) */
	FS_WAIT,	/* another caller fills or checks the chunk */
	FS_THROTTLED,	/* claimed: waiting for rate-cap tokens */
	FS_NOBUF,	/* claimed: waiting for a buffer */
	FS_FETCH,	/* backend read in flight */
	FS_WRITEQ,	/* verified, served: waiting for a write slot */
	FS_WRITE,	/* cache write (+ fdatasync) in flight */
	FS_CHECK,	/* read-back in flight */
};

/*
 * A pack read (docs/manifest.md, "Packs"; docs/cache.md, "Pack entries"):
 * one fill of the pack's own cache entry (content id
 * manifest_pack_content(), one chunk), whose transfer is one backend read
 * of the whole pack.  Its bytes are checked against the pack's id and each
 * member's against its own chunk id, then written as one file: a member
 * costs the node no file, no write and no journal record of its own.
 * Background requests for other members of the pack wait on the fill
 * (@req) and end with it.  A reader of a member joins the fill once its
 * read has started (its want gets a slice of the pack's buffer); before
 * that the reader's file is fetched alone, at the reader's priority: no
 * reader waits behind a pack read held back.  A pack read for readers is
 * offered to the daemon once checked (pack_arrived(): it pushes the files
 * into the kernel's page cache from the buffer, and the entry is then
 * written with O_DIRECT); one not taken is written through the page
 * cache, for its files' OPENs to find.
 */
struct packread {
	uint32_t pack;
	struct manifest_pack pk;	/* its record: id, size (all of it is read) */
	bool buffered;		/* written through the page cache: readers follow */
	bool pushed;		/* taken by pack_arrived: written with O_DIRECT */
	uint32_t nreq, capreq;
	struct pf_req **req;	/* other members' requests, ended with the fill */
};

struct fill {
	struct list_node node;		/* in e->fills */
	struct htab_node hnode;		/* in e->byfill, by (cache file, chunk) */
	struct list_node qnode;		/* in e->inbox, e->held or e->wq (by stage) */
	struct pf_engine *e;
	struct pf_file *f;		/* reference */
	struct pf_req *req;		/* the background request served, or NULL */
	struct list_node wants;		/* readers waiting for it: pf_want.node */
	uint32_t idx, uid;
	int prio;			/* BK_* */
	enum stage stage;
	bool claimed;			/* holds a claim of the cache */
	bool checking;			/* the claim is a check */
	bool tokens;			/* rate-cap tokens taken */
	bool fetched;			/* the backend was read */
	bool from_peer;			/* ... or a peer sent the chunk (src/peer/peer.h) */
	bool direct;			/* the transfers in flight use O_DIRECT */
	bool served;			/* fl->buf holds the verified chunk, published */
	struct packread *pr;		/* a fill of a pack's entry: the pack read */
	uint64_t fetch_ns;		/* its backend read started */
	bool timed;			/* ... and counts in bg_fetching or the latency */
	bool bg_fetch;			/* ... as background work */
	bool alone;			/* ... as a demand read with no background in flight */
	uint8_t hit_retries;
	struct cache_fill claim;
	char opath[CACHE_REL_PATH_LEN];	/* a lazy claim's file, being opened */
	struct cache_waiter waiter;
	struct bufpool_buf *buf;	/* held */
	struct backend_aio *aio;
	int src_fd;			/* dir:// source being read, or -1 */
	off_t src_off;
	size_t src_got;
	int pending;			/* CQEs to come */
	size_t wrote;
	int err;
	uint64_t wait_until;		/* FS_THROTTLED: ns */
	uint64_t throttled_since;
};

struct pf_engine {
	struct pf_sched *s;
	struct cache *c;
	struct pf_opts o;
	struct io_uring ring;
	int efd;
	pthread_t thr;
	struct bufpool *pool;
	bool registered;		/* the pool's region is a fixed buffer */

	pthread_mutex_t lock;
	struct list_node inbox;		/* protected by lock: fills handed back */
	struct list_node wants_in;	/* protected by lock: readers' wants */
	bool stop;			/* protected by lock */
	_Atomic bool poked;		/* the eventfd was written since the last drain */
	_Atomic int nobuf;		/* fills waiting for a buffer */

	/* the engine thread's own */
	struct list_node fills;		/* every fill alive, newest first */
	struct htab byfill;		/* ... and by (cache file, chunk): fill_find() */
	uint32_t nfills, ndemand;
	/* yielding to readers at the backend (see "Yielding" above) */
	uint32_t bg_cap;		/* background requests allowed in flight */
	uint32_t bg_fetching;		/* background backend reads in flight */
	uint64_t lat_alone[ENG_LAT_CLASSES];	/* EWMA ns of a demand read alone */
	uint64_t last_demand_ns, last_cut_ns;
	uint32_t pool_fills;		/* fills holding a buffer of the region */
	uint32_t outside_fills;		/* fills holding one malloc'ed outside it */
	uint32_t writing;		/* fills in FS_WRITE */
	struct list_node wq;		/* FS_WRITEQ, oldest first */
	struct list_node held;		/* throttled or without a buffer, oldest first */
	bool stopping;
	bool direct_ok;			/* O_DIRECT transfers not refused */
	bool again;			/* the inbox got work from this thread */

	/* packs read lately: not read again for ENG_PACK_HOLD_NS */
	struct {
		const struct backend *be;
		uint32_t pack;
		bool done;		/* read; else only queued for readahead */
		uint64_t at;
		struct fill *fill;	/* the read of its entry in flight, or NULL */
	} recent[ENG_PACK_RECENT];
	struct pf_owner pack_owner;	/* of the readahead requests for packs */

	_Atomic uint64_t st_pack_reads, st_pack_bytes, st_pack_files;
	_Atomic uint64_t st_wakeups;	/* eventfd pokes handled */
	_Atomic uint64_t st_bg_cap, st_bg_cuts;
	_Atomic uint64_t st_ops, st_direct, st_fixed, st_submits, st_fills;
	_Atomic uint64_t st_max, st_inflight, st_demand, st_hits, st_async;
};

static __thread bool on_engine;

/* ---- hand-over from other threads ---- */

static void poke(struct pf_engine *e)
{
	uint64_t one = 1;

	if (atomic_exchange(&e->poked, true))
		return;
	if (write(e->efd, &one, sizeof(one)) < 0)
		log_warn("I/O engine: eventfd: %s", strerror(errno));
}

static void inbox_push(struct pf_engine *e, struct fill *fl)
{
	pthread_mutex_lock(&e->lock);
	list_add_tail(&e->inbox, &fl->qnode);
	pthread_mutex_unlock(&e->lock);
	if (on_engine)
		e->again = true;
	else
		poke(e);
}

/* The cache's lock is held: hand over, nothing else. */
static void waiter_fn(struct cache_waiter *w)
{
	struct fill *fl = (struct fill *)((char *)w - offsetof(struct fill, waiter));

	inbox_push(fl->e, fl);
}

/* A librados thread: hand over, nothing else. */
static void aio_done(void *arg)
{
	struct fill *fl = arg;

	inbox_push(fl->e, fl);
}

void pf_engine_kick(struct pf_engine *e)
{
	if (on_engine)
		e->again = true;
	else
		poke(e);
}

/* ---- the ring ---- */

static struct io_uring_sqe *get_sqe(struct pf_engine *e)
{
	struct io_uring_sqe *sqe;

	while (!(sqe = io_uring_get_sqe(&e->ring))) {
		io_uring_submit(&e->ring);	/* full: this turn's first batch goes now */
		atomic_fetch_add(&e->st_submits, 1);
	}
	return sqe;
}

/* Room for @n linked SQEs in one submission. */
static void sq_room(struct pf_engine *e, unsigned n)
{
	if (io_uring_sq_space_left(&e->ring) < n) {
		io_uring_submit(&e->ring);
		atomic_fetch_add(&e->st_submits, 1);
	}
}

static void arm_poll(struct pf_engine *e)
{
	struct io_uring_sqe *sqe = get_sqe(e);

	io_uring_prep_poll_add(sqe, e->efd, POLLIN);
	io_uring_sqe_set_data64(sqe, TAG_POLL);
}

/* A read or write of @len bytes at @off of @fd from @p (in fl->buf). */
static void prep_rw(struct pf_engine *e, struct fill *fl, int op, bool write, int fd,
		    void *p, size_t len, off_t off, bool direct, bool link)
{
	struct io_uring_sqe *sqe = get_sqe(e);
	bool fixed = e->registered && bufpool_in_region(fl->buf);

	if (fixed && write)
		io_uring_prep_write_fixed(sqe, fd, p, (unsigned)len, (uint64_t)off, 0);
	else if (fixed)
		io_uring_prep_read_fixed(sqe, fd, p, (unsigned)len, (uint64_t)off, 0);
	else if (write)
		io_uring_prep_write(sqe, fd, p, (unsigned)len, (uint64_t)off);
	else
		io_uring_prep_read(sqe, fd, p, (unsigned)len, (uint64_t)off);
	if (link)
		sqe->flags |= IOSQE_IO_LINK;
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)fl | (uint64_t)op);
	fl->pending++;
	if (fixed)
		atomic_fetch_add(&e->st_fixed, 1);
	if (direct)
		atomic_fetch_add(&e->st_direct, 1);
}

/* ---- fills ---- */

static void fill_claim(struct pf_engine *e, struct fill *fl);
static void want_start(struct pf_engine *e, struct pf_want *w);
static void pack_end(struct pf_engine *e, struct fill *fl, int res);
static void pack_fetch(struct pf_engine *e, struct fill *fl);
static void pack_done(struct pf_engine *e, struct fill *fl, int res);
static bool pack_slice_serve(struct pf_engine *e, struct bufpool_buf *b, struct pf_want *w);
static void fill_go(struct pf_engine *e, struct fill *fl);
static struct fill *fill_find(struct pf_engine *e, const struct cfile *cf, uint32_t idx);
static void fill_drop(struct pf_engine *e, struct fill *fl, int err);

static void set_prio(struct pf_engine *e, struct fill *fl, int prio)
{
	if ((fl->prio == BK_DEMAND) != (prio == BK_DEMAND))
		e->ndemand += prio == BK_DEMAND ? 1 : -1;
	fl->prio = prio;
	atomic_store(&e->st_demand, e->ndemand);
}

static uint64_t fill_hash(const struct cfile *cf, uint32_t idx)
{
	return htab_hash_u64((uint64_t)(uintptr_t)cf ^ ((uint64_t)idx << 48));
}

/* A new fill of chunk @idx of @f (whose reference it takes over). */
static struct fill *fill_new(struct pf_engine *e, struct pf_file *f, uint32_t idx,
			     uint32_t uid, int prio, struct pf_req *req)
{
	struct fill *fl;

	if (htab_reserve(&e->byfill, e->nfills + 1))
		return NULL;
	fl = calloc(1, sizeof(*fl));
	if (!fl)
		return NULL;
	htab_add(&e->byfill, &fl->hnode, fill_hash(f->cf, idx));
	fl->e = e;
	fl->f = f;
	fl->req = req;
	fl->idx = idx;
	fl->uid = uid;
	fl->prio = BK_WARMUP;
	set_prio(e, fl, prio);
	fl->src_fd = -1;
	fl->waiter.fn = waiter_fn;
	list_init(&fl->wants);
	list_add(&e->fills, &fl->node);
	e->nfills++;
	atomic_store(&e->st_inflight, e->nfills);
	if (e->nfills > atomic_load(&e->st_max))
		atomic_store(&e->st_max, e->nfills);
	return fl;
}

/* @fl took (+1) or gives back (-1) its buffer: count it where it lies. */
static void fill_count_buf(struct pf_engine *e, struct fill *fl, int d)
{
	if (bufpool_in_region(fl->buf))
		e->pool_fills += (uint32_t)d;
	else
		e->outside_fills += (uint32_t)d;
}

static void held_add(struct pf_engine *e, struct fill *fl)
{
	list_add_tail(&e->held, &fl->qnode);
	if (fl->stage == FS_NOBUF)
		atomic_fetch_add(&e->nobuf, 1);
}

/* Answer @w with the chunk in @b (held for it). */
static void want_serve(struct pf_engine *e, struct pf_want *w, struct bufpool_buf *b,
		       size_t len, bool fetched)
{
	bufpool_hold(e->pool, b);
	w->buf = b;
	w->data = b->data;
	w->len = len;
	w->res = 0;
	w->fetched = fetched;
	w->done(w);
}

/*
 * fl->buf holds the chunk's verified bytes: publish it and answer the
 * readers waiting, now, not after the cache write (which only reads the
 * buffer from here on).
 */
static void fill_serve(struct pf_engine *e, struct fill *fl)
{
	size_t len = backend_chunk_len(fl->f->attr.size, fl->f->be->chunk_size, fl->idx);
	struct list_node *n;

	if (fl->served)
		return;
	fl->served = true;
	bufpool_publish(e->pool, fl->buf, &fl->f->attr.content, fl->idx, len);
	while ((n = list_pop(&fl->wants))) {
		struct pf_want *w = list_entry(n, struct pf_want, node);

		if (!w->in_pack)
			want_serve(e, w, fl->buf, len, w->origin && fl->fetched);
		else if (!pack_slice_serve(e, fl->buf, w))
			want_start(e, w);	/* its file alone */
	}
	/*
	 * Its backend part is over: no more a fetch in flight, so the next
	 * one may start while this one is written (the buffers bound that).
	 */
	if (fl->prio == BK_DEMAND)
		set_prio(e, fl, BK_READAHEAD);
	if (fl->req) {
		pf_sched_release(e->s, fl->req);
		e->again = true;	/* room for background work */
	}
}

/*
 * The fill is over with @res (PF_FETCHED, PF_PRESENT or -errno); @bytes:
 * its buffer holds the chunk's verified bytes.  Readers get the bytes (or
 * the error; one whose fill was someone else's tries once more), the
 * request its result, and the fill is freed.
 */
static void fill_end(struct pf_engine *e, struct fill *fl, int res, bool bytes)
{
	struct list_node retry, *n;

	list_init(&retry);
	if (bytes)
		fill_serve(e, fl);
	if (fl->pr)
		pack_end(e, fl, res);
	while ((n = list_pop(&fl->wants))) {
		struct pf_want *w = list_entry(n, struct pf_want, node);

		if (!w->origin && !w->retried && !e->stopping) {
			w->retried = true;
			list_add(&retry, n);
		} else {
			w->res = res < 0 ? res : -EIO;
			w->done(w);
		}
	}
	if (fl->req)
		pf_sched_finish(e->s, fl->req, res);
	if (fl->fetched || fl->served)
		atomic_fetch_add(&e->st_fills, 1);
	set_prio(e, fl, BK_WARMUP);
	if (fl->buf)
		fill_count_buf(e, fl, -1);
	bufpool_put(e->pool, fl->buf);
	if (atomic_load(&e->nobuf))
		e->again = true;	/* a fill waiting may have a buffer now */
	list_del(&fl->node);
	htab_del(&e->byfill, &fl->hnode);
	e->nfills--;
	atomic_store(&e->st_inflight, e->nfills);
	pf_file_put(fl->f);
	free(fl);
	while ((n = list_pop(&retry)))
		want_start(e, list_entry(n, struct pf_want, node));
}

/* The claim is given up: the chunk is left as it was for others. */
static void fill_drop(struct pf_engine *e, struct fill *fl, int err)
{
	if (fl->claimed)
		cache_fill_abort(e->c, &fl->claim, err);
	fl->claimed = false;
	fill_end(e, fl, err, false);
}

static void write_done(struct pf_engine *e, struct fill *fl);

static void start_write(struct pf_engine *e, struct fill *fl)
{
	struct cache_fill *cl = &fl->claim;
	char *p = fl->buf->data;
	size_t head = 0;
	int dfd = -1;

	fl->stage = FS_WRITE;
	fl->wrote = 0;
	fl->err = 0;
	if (cl->fd < 0) {
		/*
		 * A lazy claim (a pack's entry): its cache file is created by
		 * an io_uring OPENAT, off this thread; the write follows at its
		 * completion (open_done()).
		 */
		int at = cache_fill_open_at(e->c, cl, fl->opath);

		if (at >= 0) {
			struct io_uring_sqe *sqe;

			sq_room(e, 1);
			sqe = get_sqe(e);
			io_uring_prep_openat(sqe, at, fl->opath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
			io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)fl | OP_OPEN);
			fl->pending++;
			return;
		}
		/* -EAGAIN: the cache opens it (with -EEXIST, it is open: nothing) */
		if ((fl->err = cache_fill_opened(e->c, cl, -1))) {
			write_done(e, fl);
			return;
		}
	}
	/*
	 * O_DIRECT keeps large files out of the page cache.  A small file
	 * goes in one buffered write: no O_DIRECT twin to open, no second
	 * write for an unaligned tail, and its reader (often soon: an epoch)
	 * finds its pages.  So does a pack's entry read for readers
	 * (readahead, epoch staging) that the daemon did not take
	 * (pack_arrived()): its files are copied from it at their OPENs.
	 */
	if (e->direct_ok && !(fl->pr && fl->pr->buffered && !fl->pr->pushed) &&
	    fl->f->attr.size >= DIRECT_MIN &&
	    cl->len >= ALIGN &&
	    !(cl->off % ALIGN) &&
	    !((uintptr_t)p % ALIGN) &&
	    (dfd = cache_fill_direct_fd(e->c, cl)) >= 0)
		head = cl->len & ~(size_t)(ALIGN - 1);
	fl->direct = head > 0;
	/* a write and what is linked after it go in one submission */
	sq_room(e, (head > 0) + (cl->len > head) + cl->sync);
	if (head)
		prep_rw(e, fl, OP_WRITE, true, dfd, p, head, cl->off, true,
			cl->len > head || cl->sync);
	if (cl->len > head)
		prep_rw(e, fl, OP_WRITE, true, cl->fd, p + head, cl->len - head,
			cl->off + (off_t)head, false, cl->sync);
	if (cl->sync) {
		struct io_uring_sqe *sqe = get_sqe(e);

		io_uring_prep_fsync(sqe, cl->fd, IORING_FSYNC_DATASYNC);
		io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)fl | OP_SYNC);
		fl->pending++;
	}
}

/* The OPENAT of a lazy claim's cache file ended: @res, its descriptor or -errno. */
static void open_done(struct pf_engine *e, struct fill *fl, int res)
{
	fl->err = cache_fill_opened(e->c, &fl->claim, res);
	if (fl->err)
		write_done(e, fl);
	else
		start_write(e, fl);
}

static void write_done(struct pf_engine *e, struct fill *fl)
{
	ssize_t res = fl->err ? fl->err : (ssize_t)fl->wrote;
	int st;

	if (fl->err == -EINVAL && fl->direct) {
		log_notice("I/O engine: an O_DIRECT write was refused (EINVAL): buffered writes from now on");
		e->direct_ok = false;
		start_write(e, fl);
		return;
	}
	st = cache_fill_written(e->c, &fl->claim, res);	/* short: ENOSPC */
	if (st == CACHE_WRITE) {
		start_write(e, fl);	/* room was made: once more */
		return;
	}
	fl->claimed = false;
	fill_end(e, fl, st == CACHE_STORED ? PF_FETCHED : -ENOSPC, true);
	/* its write slot goes to the oldest write waiting */
	e->writing--;
	if (!list_empty(&e->wq)) {
		fl = list_entry(list_pop(&e->wq), struct fill, qnode);
		e->writing++;
		start_write(e, fl);
	}
}

/*
 * Write @fl's chunk now, or once a write slot is free: the writes in
 * flight are bounded (ENG_MAX_WRITES), whatever the chunk size.
 */
static void queue_write(struct pf_engine *e, struct fill *fl)
{
	if (e->writing < ENG_MAX_WRITES) {
		e->writing++;
		start_write(e, fl);
		return;
	}
	fl->stage = FS_WRITEQ;
	list_add_tail(&e->wq, &fl->qnode);
}

/* Size class of a read of @len bytes, for its latency baseline. */
static int lat_class(size_t len)
{
	int k = 0;

	for (size_t lim = 64 << 10; len > lim && k < ENG_LAT_CLASSES - 1; lim <<= 2)
		k++;
	return k;
}

/* @fl's backend read starts now. */
static void fetch_timed(struct pf_engine *e, struct fill *fl)
{
	fl->timed = true;
	fl->fetch_ns = now_ns();
	fl->bg_fetch = fl->prio != BK_DEMAND;
	fl->alone = !fl->bg_fetch && !e->bg_fetching;
	if (fl->bg_fetch)
		e->bg_fetching++;
	else
		e->last_demand_ns = fl->fetch_ns;
}

/* @fl's backend read of @len bytes ended: a demand read adjusts bg_cap. */
static void fetch_untimed(struct pf_engine *e, struct fill *fl, size_t len)
{
	uint64_t now = now_ns(), lat, *base;

	if (!fl->timed)
		return;
	fl->timed = false;
	if (fl->bg_fetch) {
		e->bg_fetching--;
		return;
	}
	lat = now - fl->fetch_ns;
	base = &e->lat_alone[lat_class(len)];
	e->last_demand_ns = now;
	if (fl->alone && !e->bg_fetching) {
		*base = *base ? (7 * *base + lat) / 8 : lat;
		return;
	}
	if (!*base)
		return;		/* nothing to compare with yet */
	if (lat > 2 * *base + 1000000) {
		if (now - e->last_cut_ns > *base && e->bg_cap > 1) {
			e->bg_cap /= 2;
			e->last_cut_ns = now;
			atomic_fetch_add(&e->st_bg_cuts, 1);
		}
	} else if (e->bg_cap < e->o.inflight) {
		e->bg_cap++;
	}
	atomic_store(&e->st_bg_cap, e->bg_cap);
}

/* The backend read ended: @res bytes, or -errno; @hash if it checked one. */
static void fetch_done(struct pf_engine *e, struct fill *fl, int res,
		       const struct sfs_id *hash)
{
	size_t len = fl->claim.len;
	int st;

	fetch_untimed(e, fl, len);
	if (e->o.fetch_end)
		e->o.fetch_end(e->o.account_arg, fl->f->cf, fl->idx, res, fl->from_peer);
	if (res != (int)len) {
		fill_drop(e, fl, res < 0 ? res : -EIO);
		return;
	}
	if (!fl->req)
		pf_note_demand_fetch(e->s);
	st = cache_fill_commit(e->c, &fl->claim,
			       hash ? hash->lo : cache_chunk_hash(fl->buf->data, len));
	if (st == CACHE_BYPASS) {
		/* no room: readers are served from the buffer all the same */
		fl->claimed = false;
		fill_end(e, fl, -ENOSPC, true);
		return;
	}
	fill_serve(e, fl);
	queue_write(e, fl);
}

static void prep_src_read(struct pf_engine *e, struct fill *fl)
{
	prep_rw(e, fl, OP_SRC, false, fl->src_fd, (char *)fl->buf->data + fl->src_got,
		fl->claim.len - fl->src_got, fl->src_off + (off_t)fl->src_got, false, false);
}

static void src_read_done(struct pf_engine *e, struct fill *fl, int res)
{
	struct backend *be = fl->f->be;

	if (res > 0) {
		fl->src_got += (size_t)res;
		if (fl->src_got < fl->claim.len) {
			prep_src_read(e, fl);	/* a short read: the rest */
			return;
		}
	}
	res = be->ops->source_close(be, &fl->f->attr, fl->src_fd,
				    res < 0 ? res : (ssize_t)fl->src_got, fl->claim.len);
	fl->src_fd = -1;
	fetch_done(e, fl, res, NULL);
}

static void start_fetch(struct pf_engine *e, struct fill *fl)
{
	struct backend *be = fl->f->be;
	int r;

	if (fl->pr) {
		pack_fetch(e, fl);
		return;
	}
	fl->stage = FS_FETCH;
	fl->fetched = true;
	fl->from_peer = false;	/* aio_finish says */
	fetch_timed(e, fl);
	if (e->o.fetch_begin)
		e->o.fetch_begin(e->o.account_arg, fl->f->cf, fl->idx);
	if (be->ops->source_open) {
		r = be->ops->source_open(be, &fl->f->attr, fl->idx, fl->claim.len,
					 &fl->src_fd, &fl->src_off);
		if (r) {
			fetch_done(e, fl, r, NULL);
			return;
		}
		fl->src_got = 0;
		prep_src_read(e, fl);
	} else if (be->ops->aio_start) {
		r = be->ops->aio_start(be, &fl->f->attr, fl->idx, fl->buf->data,
				       fl->claim.len, aio_done, fl, &fl->aio);
		if (r)
			fetch_done(e, fl, r, NULL);
	} else {
		/* a backend with no asynchronous read (none in the tree) blocks us */
		fetch_done(e, fl, be->ops->read_chunk(be, &fl->f->attr, fl->idx,
						      fl->buf->data, fl->claim.len), NULL);
	}
}

static void start_check(struct pf_engine *e, struct fill *fl)
{
	struct cache_fill *cl = &fl->claim;
	size_t rlen = cl->len;
	int fd = cl->fd, dfd;

	fl->stage = FS_CHECK;
	fl->direct = false;
	if (e->direct_ok && !(cl->off % ALIGN) &&
	    DIV_ROUND_UP(cl->len, ALIGN) * ALIGN <= fl->buf->cap &&
	    (dfd = cache_fill_direct_fd(e->c, cl)) >= 0) {
		fd = dfd;
		rlen = DIV_ROUND_UP(cl->len, ALIGN) * ALIGN;	/* EOF shortens it */
		fl->direct = true;
	}
	prep_rw(e, fl, OP_CHECK, false, fd, fl->buf->data, rlen, cl->off, fl->direct, false);
}

static void check_read_done(struct pf_engine *e, struct fill *fl, int res)
{
	if (res == -EINVAL && fl->direct) {
		log_notice("I/O engine: an O_DIRECT read was refused (EINVAL): buffered transfers from now on");
		e->direct_ok = false;
		start_check(e, fl);
		return;
	}
	if (res > (int)fl->claim.len)
		res = (int)fl->claim.len;
	fl->claimed = false;
	if (cache_check_done(e->c, &fl->claim, fl->buf->data, res) == CACHE_HIT) {
		fill_end(e, fl, PF_PRESENT, true);
		return;
	}
	/* corrupt on disk: dropped, so claim it again to refetch */
	fl->checking = false;
	fill_claim(e, fl);
}

/*
 * Claimed: take tokens (fetches), a buffer, and start the transfer; or
 * wait on e->held for what is missing.
 */
static void fill_go(struct pf_engine *e, struct fill *fl)
{
	const struct backend *be = fl->f->be;
	size_t len = fl->claim.len;

	/* a chunk a peer will send is no backend traffic: no rate-cap tokens */
	if (!fl->checking && !fl->tokens && !fl->pr && be->ops->peer_first &&
	    be->ops->peer_first(fl->f->be, &fl->f->attr, fl->idx))
		fl->tokens = true;
	if (!fl->checking && !fl->tokens) {
		uint64_t wait = pf_bucket_try(e->s, len, fl->prio), now = now_ns();

		if (wait) {
			if (!fl->throttled_since)
				fl->throttled_since = now;
			fl->stage = FS_THROTTLED;
			fl->wait_until = now + wait;
			held_add(e, fl);
			return;
		}
		fl->tokens = true;
		if (fl->throttled_since)
			pf_note_throttle(e->s, now - fl->throttled_since);
	}
	if (!fl->buf) {
		/*
		 * Every buffer is held.  Fills holding some will free them
		 * without anyone's help: wait for that (so fills are bounded
		 * by the region, and fetches by the cache writes).  If readers
		 * hold them all, they may be waiting for this very fill: a
		 * reader's fill then takes one from outside the region
		 * (bounded by the READs outstanding).  A chunk larger than
		 * the whole region (prefetch_buffers set below the chunk
		 * size) always takes one outside: at most ENG_MAX_OUTSIDE
		 * background fills at once do.
		 */
		if (!bufpool_fits(e->pool, len) && list_empty(&fl->wants) &&
		    e->outside_fills >= ENG_MAX_OUTSIDE)
			fl->buf = NULL;	/* prefetch_buffers is below the chunk size */
		else
			fl->buf = bufpool_get(e->pool, len,
					      !list_empty(&fl->wants) && !e->pool_fills);
		if (fl->buf)
			fill_count_buf(e, fl, 1);
		if (!fl->buf) {
			fl->stage = FS_NOBUF;
			held_add(e, fl);
			return;
		}
	}
	if (fl->checking)
		start_check(e, fl);
	else
		start_fetch(e, fl);
}

/* Present and verified, but readers want the bytes and no buffer has them. */
static void read_present(struct pf_engine *e, struct fill *fl)
{
	size_t len = backend_chunk_len(fl->f->attr.size, fl->f->be->chunk_size, fl->idx);
	struct bufpool_buf *b = bufpool_find(e->pool, &fl->f->attr.content, fl->idx);
	ssize_t r;

	if (b) {
		if (fl->buf)
			fill_count_buf(e, fl, -1);
		bufpool_put(e->pool, fl->buf);
		fl->buf = b;
		fill_count_buf(e, fl, 1);
		fill_end(e, fl, PF_PRESENT, true);
		return;
	}
	if (!fl->buf) {
		fl->buf = bufpool_get(e->pool, len, true);
		if (fl->buf)
			fill_count_buf(e, fl, 1);
	}
	if (!fl->buf) {
		fill_end(e, fl, -ENOMEM, false);
		return;
	}
	/* rare (a race with a fill that just ended): a plain read here */
	r = cache_read_cached(e->c, fl->f->cf, (uint64_t)fl->idx * fl->f->be->chunk_size,
			      fl->buf->data, len);
	if (r == (ssize_t)len)
		fill_end(e, fl, PF_PRESENT, true);
	else if (r == -EAGAIN && fl->hit_retries++ < MAX_HIT_RETRIES)
		fill_claim(e, fl);	/* evicted or distrusted meanwhile */
	else
		fill_end(e, fl, r < 0 ? (int)r : -EIO, false);
}

static bool unwanted(struct pf_engine *e, struct fill *fl)
{
	if (!list_empty(&fl->wants))
		return false;
	if (e->stopping)
		return true;
	if (!fl->req || !atomic_load(&fl->req->o->cancelled))
		return false;
	/* a pack read another request waits for is still wanted */
	for (uint32_t k = 0; fl->pr && k < fl->pr->nreq; k++)
		if (!atomic_load(&fl->pr->req[k]->o->cancelled))
			return false;
	return true;
}

static void fill_claim(struct pf_engine *e, struct fill *fl)
{
	int r;

	fl->stage = FS_CLAIM;
	if (unwanted(e, fl)) {
		fill_end(e, fl, -ECANCELED, false);
		return;
	}
	/* a pack's entry is created by an io_uring OPENAT once its bytes are in */
	r = fl->pr ? cache_fill_claim_lazy(e->c, fl->f->cf, fl->idx, fl->uid,
					   fl->f->nothrash, &fl->claim) : CACHE_BUSY;
	if (r == CACHE_BUSY)
		r = cache_fill_claim(e->c, fl->f->cf, fl->idx, fl->uid, fl->f->nothrash,
				     &fl->claim, &fl->waiter);
	switch (r) {
	case CACHE_HIT:
		if (!list_empty(&fl->wants))
			read_present(e, fl);
		else
			fill_end(e, fl, PF_PRESENT, false);
		return;
	case CACHE_BUSY:
		fl->stage = FS_WAIT;	/* waiter_fn hands it back */
		return;
	case CACHE_CHECK:
	case CACHE_FETCH:
		fl->claimed = true;
		fl->checking = r == CACHE_CHECK;
		fill_go(e, fl);
		return;
	default:
		fill_end(e, fl, r, false);
	}
}

/* ---- pack reads (struct packread) ---- */

/* The slot of pack @pack of @be in e->recent. */
static size_t recent_slot(const struct backend *be, uint32_t pack)
{
	uint64_t h = ((uint64_t)(uintptr_t)be >> 4) * 0x9e3779b97f4a7c15ULL ^ pack;

	return (size_t)((h ^ h >> 29) % ENG_PACK_RECENT);
}

/* Was pack @pack of @be read (@done) or queued lately? */
static bool recent_has(struct pf_engine *e, const struct backend *be, uint32_t pack,
		       bool done)
{
	size_t i = recent_slot(be, pack);

	return e->recent[i].be == be && e->recent[i].pack == pack &&
	       (e->recent[i].done || !done) && now_ns() - e->recent[i].at < ENG_PACK_HOLD_NS;
}

static void recent_put(struct pf_engine *e, const struct backend *be, uint32_t pack,
		       bool done, struct fill *fl)
{
	size_t i = recent_slot(be, pack);

	e->recent[i].be = be;
	e->recent[i].pack = pack;
	e->recent[i].done = done;
	e->recent[i].at = now_ns();
	e->recent[i].fill = fl;
}

/* The fill of pack @pack's entry in flight, if its slot still knows it. */
static struct fill *recent_fill(struct pf_engine *e, const struct backend *be,
				uint32_t pack)
{
	size_t i = recent_slot(be, pack);

	return e->recent[i].be == be && e->recent[i].pack == pack ? e->recent[i].fill : NULL;
}

static void pack_owner_done(struct pf_owner *o, const struct pf_req *r, int res)
{
	(void)o, (void)r, (void)res;
}

static void pack_owner_free(struct pf_owner *o)
{
	(void)o;
}

/*
 * A reader missed packed file @f: queue a readahead request for its pack,
 * once, when the cache has room for the pack without evicting anything
 * (its other files are fetched for readers to come, never at the cost of
 * what is cached).
 */
static void pack_readahead(struct pf_engine *e, struct pf_file *f, uint32_t uid)
{
	struct backend *be = f->be;
	struct manifest_pack pk;
	struct cache_stats cs;
	uint32_t pack, off;

	if (!be->ops->pack_aio_start || !be->m || !e->o.readahead_max ||
	    manifest_file_pack(be->m, f->attr.ino, &pack, &off, &pk) ||
	    recent_has(e, be, pack, false) ||
	    (be->ops->pack_remote && be->ops->pack_remote(be, pack)))
		return;
	cache_get_stats(e->c, &cs);
	if (cs.limit_bytes && cs.used_bytes + 2 * pk.size > cs.limit_bytes)
		return;
	recent_put(e, be, pack, false, NULL);
	(void)pf_submit(e->s, &e->pack_owner, f, 0, uid, PF_CLASS_READAHEAD,
			PF_KIND_READAHEAD);
}

/* Request @r waits for pack read @fl and ends with it; its slot is free now. */
static void pack_join(struct pf_engine *e, struct fill *fl, struct pf_req *r)
{
	struct packread *pr = fl->pr;

	if (pr->nreq == pr->capreq) {
		uint32_t cap = pr->capreq ? 2 * pr->capreq : 16;
		struct pf_req **n = realloc(pr->req, cap * sizeof(*n));

		if (!n) {
			pf_sched_finish(e->s, r, -ENOMEM);
			return;
		}
		pr->req = n;
		pr->capreq = cap;
	}
	pr->req[pr->nreq++] = r;
	pf_sched_release(e->s, r);
	e->again = true;	/* its slot may start another pack's read */
}

/*
 * Background request @r names a packed file: fill its pack's entry (one
 * read of the whole pack), or wait for the fill in flight, or end at once
 * when the pack is cached.  Returns false when @r is to be served as a
 * plain fill of its own file (not packed, a peer's pack, a pack read lately
 * and not kept).
 */
static bool pack_start(struct pf_engine *e, struct pf_req *r)
{
	struct backend *be = r->f->be;
	int prio = r->cls == PF_CLASS_READAHEAD ? BK_READAHEAD : BK_WARMUP;
	struct manifest_pack pk;
	struct packread *pr;
	struct sfs_attr a = { .mode = S_IFREG | 0400 };
	struct pf_file *pf;
	struct fill *fl;
	uint32_t pack, off;
	int err = 0;

	if (!be->ops->pack_aio_start || !be->m || r->idx ||
	    manifest_file_pack(be->m, r->f->attr.ino, &pack, &off, &pk) ||
	    pk.size > be->chunk_size ||
	    (be->ops->pack_remote && be->ops->pack_remote(be, pack)))
		return false;	/* (a peer's pack: its files are asked of that peer) */
	fl = recent_fill(e, be, pack);
	if (fl) {
		pack_join(e, fl, r);
		return true;
	}
	manifest_pack_content(&pk.id, &a.content);
	a.size = pk.size;
	pf = pf_file_create(e->s, be, &a, r->f->nothrash, NULL, &err);
	if (!pf)
		return false;
	fl = fill_find(e, pf->cf, 0);
	if (fl && fl->pr) {
		pf_file_put(pf);
		pack_join(e, fl, r);
		return true;
	}
	if (cache_chunk_present(e->c, pf->cf, 0) ||
	    (r->o != &e->pack_owner && cache_chunk_present(e->c, r->f->cf, 0))) {
		/* the pack is cached, or this file alone: nothing to read */
		pf_file_put(pf);
		pf_sched_finish(e->s, r, PF_PRESENT);
		return true;
	}
	pr = recent_has(e, be, pack, true) ? NULL : calloc(1, sizeof(*pr));
	fl = pr ? fill_new(e, pf, 0, r->uid, prio, r) : NULL;
	if (!fl) {
		/* read lately and not kept (no room): the file alone */
		free(pr);
		pf_file_put(pf);
		return false;
	}
	pr->pack = pack;
	pr->pk = pk;
	/* a warmup's packs are read later, an epoch's (readahead, staging) now */
	pr->buffered = r->cls != PF_CLASS_WARMUP;
	fl->pr = pr;
	recent_put(e, be, pack, true, fl);
	fill_claim(e, fl);
	return true;
}

/*
 * Pack read @fl is over with @res: the requests that waited for it end
 * with it, a copy named twice in the pack counted once.
 */
static void pack_end(struct pf_engine *e, struct fill *fl, int res)
{
	struct packread *pr = fl->pr;
	size_t i = recent_slot(fl->f->be, pr->pack);

	fl->pr = NULL;
	if (e->recent[i].fill == fl)
		e->recent[i].fill = NULL;
	/* from the last: those before it are not ended yet */
	for (uint32_t k = pr->nreq; k-- > 0;) {
		struct pf_req *r = pr->req[k];
		bool again = fl->req && r->f->cf == fl->req->f->cf;

		for (uint32_t j = 0; j < k && !again; j++)
			again = pr->req[j]->f->cf == r->f->cf;
		pf_sched_finish_joined(e->s, r, again && res == PF_FETCHED ? PF_PRESENT : res);
	}
	free(pr->req);
	free(pr);
}

/* The pack read's fill has its tokens and a buffer: start the read. */
static void pack_fetch(struct pf_engine *e, struct fill *fl)
{
	struct packread *pr = fl->pr;
	struct backend *be = fl->f->be;
	int r;

	fl->stage = FS_FETCH;
	fl->fetched = true;
	fl->from_peer = false;
	if (e->o.fetch_begin)
		e->o.fetch_begin(e->o.account_arg, fl->f->cf, fl->idx);
	atomic_fetch_add(&e->st_pack_reads, 1);
	atomic_fetch_add(&e->st_pack_bytes, pr->pk.size);
	fetch_timed(e, fl);
	r = be->ops->pack_aio_start(be, pr->pack, 0, pr->pk.size, fl->buf->data,
				    aio_done, fl, &fl->aio);
	if (r)
		pack_done(e, fl, r);
}

/*
 * Pack read @fl for readers is in and checked: offer it to the daemon,
 * which stores its files in the kernel's page cache from the buffer; the
 * entry then needs no pages of its own (pf_opts.pack_arrived).
 */
static void pack_arrived(struct pf_engine *e, struct fill *fl)
{
	struct pf_pack *p;

	if (!e->o.pack_arrived || !(p = calloc(1, sizeof(*p))))
		return;
	p->be = fl->f->be;
	p->pack = fl->pr->pack;
	p->data = fl->buf->data;
	p->len = fl->pr->pk.size;
	p->buf = fl->buf;
	bufpool_hold(e->pool, fl->buf);
	if (e->o.pack_arrived(e->o.pack_arg, p)) {
		fl->pr->pushed = true;
		return;
	}
	bufpool_put(e->pool, fl->buf);
	free(p);
}

/* A holder outside the engine gives buffer @b back: a fill may wait for one. */
static void buf_give_back(struct pf_engine *e, struct bufpool_buf *b)
{
	bufpool_put(e->pool, b);
	if (!atomic_load(&e->nobuf))
		return;
	if (on_engine)
		e->again = true;
	else
		poke(e);
}

void pf_pack_release(struct pf_sched *s, struct pf_pack *p)
{
	buf_give_back(s->engine, p->buf);
	free(p);
}

/* The pack read ended (@res: the pack's length, or -errno). */
static void pack_done(struct pf_engine *e, struct fill *fl, int res)
{
	struct packread *pr = fl->pr;
	int n;

	if (res >= 0 && (uint64_t)res != pr->pk.size)
		res = -EIO;
	if (res >= 0) {
		n = packentry_check(fl->f->be, pr->pack, &pr->pk, fl->buf->data);
		if (n < 0) {
			res = n;
		} else {
			atomic_fetch_add(&e->st_pack_files, (uint64_t)n);
			if (pr->buffered)
				pack_arrived(e, fl);
			fetch_done(e, fl, res, &pr->pk.id);
			return;
		}
	}
	fetch_done(e, fl, res, NULL);
}

/*
 * Reader @w of a member of a pack gets its slice (w->poff, w->plen) of
 * the pack's bytes in @b, no copy.  false when no slice could be made.
 */
static bool pack_slice_serve(struct pf_engine *e, struct bufpool_buf *b, struct pf_want *w)
{
	struct bufpool_buf *sl = bufpool_slice(e->pool, b, w->poff, w->plen);

	if (!sl)
		return false;
	w->in_pack = false;
	want_serve(e, w, sl, w->plen, false);
	bufpool_put(e->pool, sl);
	return true;
}

/*
 * Reader @w of chunk 0 of a packed file: join its pack's read if that is
 * in flight (started: never behind a background read held back), or take
 * its slice of the pack's bytes if they are in the engine's buffers.
 * Returns false when the file is to be fetched alone.
 */
static bool pack_want(struct pf_engine *e, struct pf_want *w)
{
	struct backend *be = w->be;
	struct manifest_pack pk;
	struct bufpool_buf *b;
	struct sfs_id id;
	struct fill *fl;
	uint32_t pack, off;
	bool ok;

	if (w->idx || !be->ops->pack_aio_start || !be->m ||
	    manifest_file_pack(be->m, w->attr->ino, &pack, &off, &pk) ||
	    w->attr->size > pk.size - off)
		return false;
	w->origin = false;
	w->poff = off;
	w->plen = (uint32_t)w->attr->size;
	fl = recent_fill(e, be, pack);
	if (!fl) {
		/* read lately: its buffer may still hold it */
		manifest_pack_content(&pk.id, &id);
		b = bufpool_find(e->pool, &id, 0);
		ok = b && b->len == pk.size && pack_slice_serve(e, b, w);
		if (b)
			bufpool_put(e->pool, b);
		return ok;
	}
	if (fl->served)
		return pack_slice_serve(e, fl->buf, w);
	if (fl->stage != FS_FETCH && fl->stage != FS_CHECK)
		return false;
	w->in_pack = true;
	list_add(&fl->wants, &w->node);
	set_prio(e, fl, BK_DEMAND);	/* a reader waits for it */
	return true;
}

/* ---- work arriving ---- */

struct fill_key {
	const struct cfile *cf;
	uint32_t idx;
};

static bool fill_eq(const struct htab_node *n, const void *key)
{
	const struct fill *fl = htab_entry(n, struct fill, hnode);
	const struct fill_key *k = key;

	return fl->idx == k->idx && fl->f->cf == k->cf;
}

/* The newest fill of chunk @idx of @cf, or NULL. */
static struct fill *fill_find(struct pf_engine *e, const struct cfile *cf, uint32_t idx)
{
	struct fill_key k = { cf, idx };
	struct htab_node *n = htab_find(&e->byfill, fill_hash(cf, idx), fill_eq, &k);

	return n ? htab_entry(n, struct fill, hnode) : NULL;
}

static void want_fail(struct pf_want *w, int err)
{
	w->res = err;
	w->done(w);
}

static void want_start(struct pf_engine *e, struct pf_want *w)
{
	struct bufpool_buf *b;
	struct pf_file *f;
	struct fill *fl;
	uint32_t uid;
	bool miss;
	int err = 0;

	w->in_pack = false;
	if (e->stopping) {
		want_fail(w, -ESHUTDOWN);
		return;
	}
	fl = fill_find(e, w->cf, w->idx);
	if (fl && fl->served) {
		/* verified, being written: the bytes are there */
		want_serve(e, w, fl->buf, fl->claim.len, false);
		return;
	}
	if (fl) {
		/* one fill however many ask; a reader waits: it goes first now */
		w->origin = false;
		list_add(&fl->wants, &w->node);
		set_prio(e, fl, BK_DEMAND);
		if (fl->stage == FS_THROTTLED)
			fl->wait_until = 0;	/* may borrow now */
		return;
	}
	b = bufpool_find(e->pool, &w->attr->content, w->idx);
	if (b) {
		want_serve(e, w, b, b->len, false);
		bufpool_put(e->pool, b);	/* find's hold; the want has its own */
		return;
	}
	if (pack_want(e, w))
		return;		/* its pack's read is in flight: a slice of it */
	f = pf_file_create(e->s, w->be, w->attr, w->nothrash, NULL, &err);
	fl = f ? fill_new(e, f, w->idx, w->uid, BK_DEMAND, NULL) : NULL;
	if (!fl) {
		pf_file_put(f);
		want_fail(w, err ? err : -ENOMEM);
		return;
	}
	/*
	 * A miss of a packed file queues its pack; the claim may end the fill
	 * (and answer @w) at once, so what that needs is taken before it.
	 */
	uid = w->uid;
	miss = f->be->ops->pack_aio_start && f->be->m && manifest_npacks(f->be->m) &&
	       !cache_chunk_present(e->c, f->cf, w->idx);
	if (miss)
		pf_file_get(f);
	w->origin = true;
	list_add(&fl->wants, &w->node);
	fill_claim(e, fl);
	if (miss) {
		pack_readahead(e, f, uid);
		pf_file_put(f);
	}
}

static void inbox_fill(struct pf_engine *e, struct fill *fl)
{
	struct sfs_id id;
	bool hashed = false;
	int res;

	switch (fl->stage) {
	case FS_WAIT:		/* the other filler is done */
		fill_claim(e, fl);
		break;
	case FS_FETCH:		/* librados is done with the buffer */
		res = fl->f->be->ops->aio_finish(fl->f->be, fl->aio, &id, &hashed,
						 &fl->from_peer);
		fl->aio = NULL;
		if (fl->pr)
			pack_done(e, fl, res);
		else
			fetch_done(e, fl, res, hashed ? &id : NULL);
		break;
	default:
		log_err("I/O engine: fill handed back in stage %d", fl->stage);
	}
}

/* Take what other threads (and this one, meanwhile) queued and handle it. */
static void drain(struct pf_engine *e)
{
	struct list_node fills, wants, *n;
	bool stop;

	list_init(&fills);
	list_init(&wants);
	atomic_store(&e->poked, false);
	pthread_mutex_lock(&e->lock);
	list_splice_tail(&fills, &e->inbox);
	list_splice_tail(&wants, &e->wants_in);
	stop = e->stop;
	pthread_mutex_unlock(&e->lock);
	if (stop && !e->stopping) {
		e->stopping = true;
		/* fills waiting on another filler stop waiting */
		list_for_each_safe(pos, tmp, &e->fills) {
			struct fill *fl = list_entry(pos, struct fill, node);

			if (fl->stage == FS_WAIT && list_empty(&fl->wants) &&
			    cache_waiter_cancel(e->c, &fl->waiter))
				fill_end(e, fl, -ECANCELED, false);
		}
	}
	/* oldest first; each taken off before it is handled (it may queue again) */
	while ((n = list_pop(&wants)))
		want_start(e, list_entry(n, struct pf_want, node));
	while ((n = list_pop(&fills)))
		inbox_fill(e, list_entry(n, struct fill, qnode));
}

/* Retry the fills waiting for tokens or a buffer. */
static void retry_held(struct pf_engine *e)
{
	struct list_node held, *n;
	uint64_t now = now_ns();

	list_init(&held);
	list_splice_tail(&held, &e->held);	/* those still waiting queue again */
	while ((n = list_pop(&held))) {
		struct fill *fl = list_entry(n, struct fill, qnode);

		if (fl->stage == FS_NOBUF)
			atomic_fetch_sub(&e->nobuf, 1);
		if (unwanted(e, fl))
			fill_drop(e, fl, -ECANCELED);
		else if (fl->stage == FS_THROTTLED && fl->wait_until > now)
			held_add(e, fl);
		else
			fill_go(e, fl);
	}
}

/* How long the fills parked for the rate cap may sleep (UINT64_MAX: no limit). */
static uint64_t held_wait(struct pf_engine *e)
{
	uint64_t now = now_ns(), next = UINT64_MAX;

	list_for_each(pos, &e->held) {
		struct fill *fl = list_entry(pos, struct fill, qnode);

		if (fl->stage == FS_THROTTLED)
			next = MIN(next, fl->wait_until > now ? fl->wait_until - now : 1);
	}
	return next;
}

static void start_background(struct pf_engine *e)
{
	struct pf_req *r;

	if (!e->ndemand && now_ns() - e->last_demand_ns > ENG_QUIET_NS &&
	    e->bg_cap != e->o.inflight) {
		e->bg_cap = e->o.inflight;	/* no reader lately: full width */
		atomic_store(&e->st_bg_cap, e->bg_cap);
	}
	while (!e->stopping && (r = pf_sched_next(e->s, e->ndemand, e->bg_cap))) {
		struct fill *fl;

		if (atomic_load(&r->o->cancelled)) {
			pf_sched_finish(e->s, r, -ECANCELED);
			continue;
		}
		if (pack_start(e, r))
			continue;
		pf_file_get(r->f);
		fl = fill_new(e, r->f, r->idx, r->uid,
			      r->cls == PF_CLASS_READAHEAD ? BK_READAHEAD : BK_WARMUP, r);
		if (!fl) {
			pf_file_put(r->f);
			pf_sched_finish(e->s, r, -ENOMEM);
			continue;
		}
		fill_claim(e, fl);
	}
}

static void handle_cqe(struct pf_engine *e, const struct io_uring_cqe *cqe)
{
	uint64_t tag = io_uring_cqe_get_data64(cqe);
	struct fill *fl = (struct fill *)(uintptr_t)(tag & ~OP_MASK);
	int res = cqe->res;

	if (tag == TAG_POLL) {
		uint64_t v;

		if (read(e->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			log_warn("I/O engine: eventfd: %s", strerror(errno));
		atomic_fetch_add(&e->st_wakeups, 1);
		if (!e->stopping || e->nfills)
			arm_poll(e);
		return;
	}
	atomic_fetch_add(&e->st_ops, 1);
	fl->pending--;
	switch (tag & OP_MASK) {
	case OP_SRC:
		src_read_done(e, fl, res);
		break;
	case OP_WRITE:
	case OP_SYNC:
		if (res < 0) {
			/* -ECANCELED: a link broke on a short write, which counts short */
			if (res != -ECANCELED && !fl->err)
				fl->err = res;
		} else if ((tag & OP_MASK) == OP_WRITE) {
			fl->wrote += (size_t)res;
		}
		if (!fl->pending)
			write_done(e, fl);
		break;
	case OP_CHECK:
		check_read_done(e, fl, res);
		break;
	case OP_OPEN:
		open_done(e, fl, res);
		break;
	}
}

static void *engine_main(void *arg)
{
	struct pf_engine *e = arg;

	on_engine = true;
	arm_poll(e);
	for (;;) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts;
		unsigned head, n = 0;
		uint64_t wait;
		int ret;

		io_uring_for_each_cqe(&e->ring, head, cqe) {
			handle_cqe(e, cqe);
			n++;
		}
		io_uring_cq_advance(&e->ring, n);
		do {
			/* handling work may make more: fills handed back, buffers freed */
			e->again = false;
			drain(e);
			retry_held(e);
			start_background(e);
		} while (e->again);
		if (e->stopping && !e->nfills)
			break;
		wait = held_wait(e);
		/*
		 * Sleep until a completion: every SQE of this turn goes in this
		 * one call; other threads' work arrives as the eventfd's poll.
		 */
		if (io_uring_sq_ready(&e->ring))
			atomic_fetch_add(&e->st_submits, 1);
		if (wait != UINT64_MAX) {
			ts.tv_sec = (long long)(wait / 1000000000);
			ts.tv_nsec = (long long)(wait % 1000000000);
			ret = io_uring_submit_and_wait_timeout(&e->ring, &cqe, 1, &ts, NULL);
		} else {
			ret = io_uring_submit_and_wait(&e->ring, 1);
		}
		if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EBUSY) {
			log_err("I/O engine: io_uring: %s", strerror(-ret));
			usleep(1000);
		}
	}
	return NULL;
}

/* ---- the API ---- */

bool pf_has_engine(struct pf_sched *s)
{
	return s && s->engine;
}

bool pf_want_peek(struct pf_sched *s, struct pf_want *w)
{
	struct pf_engine *e = s ? s->engine : NULL;
	struct bufpool_buf *b;

	if (!e || !(b = bufpool_find(e->pool, &w->attr->content, w->idx)))
		return false;
	w->buf = b;
	w->data = b->data;
	w->len = b->len;
	w->res = 0;
	w->fetched = false;
	atomic_fetch_add(&e->st_hits, 1);
	return true;
}

int pf_want_submit(struct pf_sched *s, struct pf_want **w, size_t n)
{
	struct pf_engine *e = s ? s->engine : NULL;

	if (!e)
		return -ENOSYS;
	pthread_mutex_lock(&e->lock);
	if (e->stop) {
		pthread_mutex_unlock(&e->lock);
		return -ESHUTDOWN;
	}
	for (size_t i = 0; i < n; i++) {
		w[i]->res = -EINPROGRESS;
		w[i]->buf = NULL;
		w[i]->data = NULL;
		w[i]->fetched = w[i]->origin = w[i]->retried = false;
		list_add_tail(&e->wants_in, &w[i]->node);
	}
	pthread_mutex_unlock(&e->lock);
	poke(e);
	return 0;
}

void pf_want_release(struct pf_sched *s, struct pf_want *w)
{
	struct pf_engine *e = s->engine;

	if (!w->buf)
		return;
	buf_give_back(e, w->buf);
	w->buf = NULL;
	w->data = NULL;
}

void pf_forget(struct pf_sched *s, const struct sfs_id *id)
{
	struct pf_engine *e = s ? s->engine : NULL;

	if (e)
		bufpool_forget(e->pool, id);
}

void pf_note_async_read(struct pf_sched *s)
{
	struct pf_engine *e = s->engine;

	if (e)
		atomic_fetch_add(&e->st_async, 1);
}

int pf_engine_create(struct pf_sched *s, struct cache *c, const struct pf_opts *o,
		     struct pf_engine **out, char *err, size_t errlen)
{
	struct pf_engine *e = calloc(1, sizeof(*e));
	struct iovec iov;
	int ret;

	if (!e)
		return -ENOMEM;
	e->s = s;
	e->c = c;
	e->o = *o;
	e->direct_ok = true;
	e->bg_cap = o->inflight;
	atomic_init(&e->st_bg_cap, o->inflight);
	atomic_init(&e->pack_owner.refs, 1);	/* the engine's: never freed */
	e->pack_owner.done = pack_owner_done;
	e->pack_owner.free = pack_owner_free;
	list_init(&e->fills);
	list_init(&e->inbox);
	list_init(&e->wants_in);
	list_init(&e->wq);
	list_init(&e->held);
	pthread_mutex_init(&e->lock, NULL);
	e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->efd < 0) {
		ret = -errno;
		snprintf(err, errlen, "eventfd: %s", strerror(-ret));
		goto out_free;
	}
	ret = bufpool_create(o->buffer_bytes, &e->pool);
	if (ret) {
		snprintf(err, errlen, "%" PRIu64 " bytes of buffers: %s",
			 o->buffer_bytes, strerror(-ret));
		goto out_close;
	}
	/* completions wait for our next io_uring_enter: no interrupts needed */
	struct io_uring_params p = {
		.flags = IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN,
		.cq_entries = ENG_CQ_DEPTH,
	};

	ret = io_uring_queue_init_params(ENG_DEPTH, &e->ring, &p);
	if (ret == -EINVAL) {
		p = (struct io_uring_params){ .flags = IORING_SETUP_CQSIZE,
					      .cq_entries = ENG_CQ_DEPTH };
		ret = io_uring_queue_init_params(ENG_DEPTH, &e->ring, &p);
	}
	if (ret) {
		snprintf(err, errlen, "io_uring_queue_init: %s", strerror(-ret));
		goto out_pool;
	}
	bufpool_region(e->pool, &iov.iov_base, &iov.iov_len);
	ret = io_uring_register_buffers(&e->ring, &iov, 1);
	e->registered = ret == 0;
	if (ret)
		log_notice("I/O engine: cannot register %zu MiB of buffers with io_uring (%s): plain buffers",
			   iov.iov_len >> 20, strerror(-ret));
	ret = -pthread_create(&e->thr, NULL, engine_main, e);
	if (ret) {
		snprintf(err, errlen, "engine thread: %s", strerror(-ret));
		goto out_ring;
	}
	log_info("I/O engine: %zu MiB of buffers%s, up to %u fills in flight",
		 iov.iov_len >> 20, e->registered ? " (registered)" : "", o->inflight);
	*out = e;
	return 0;

out_ring:
	io_uring_queue_exit(&e->ring);
out_pool:
	bufpool_destroy(e->pool);
	htab_release(&e->byfill);
out_close:
	close(e->efd);
out_free:
	pthread_mutex_destroy(&e->lock);
	free(e);
	return ret;
}

void pf_engine_destroy(struct pf_engine *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stop = true;
	pthread_mutex_unlock(&e->lock);
	atomic_store(&e->poked, false);
	poke(e);
	pthread_join(e->thr, NULL);
	log_info("I/O engine: %" PRIu64 " fills, %" PRIu64 " transfers (%" PRIu64
		 " O_DIRECT, %" PRIu64 " from registered buffers) in %" PRIu64
		 " submissions, at most %" PRIu64 " fills in flight",
		 atomic_load(&e->st_fills), atomic_load(&e->st_ops),
		 atomic_load(&e->st_direct), atomic_load(&e->st_fixed),
		 atomic_load(&e->st_submits), atomic_load(&e->st_max));
	/* no fill is left: neither the kernel nor librados holds a buffer */
	io_uring_queue_exit(&e->ring);
	bufpool_destroy(e->pool);
	htab_release(&e->byfill);
	close(e->efd);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

void pf_engine_get_stats(struct pf_engine *e, struct pf_stats *st)
{
	struct bufpool_stats bs;

	if (!e)
		return;
	bufpool_get_stats(e->pool, &bs);
	st->uring_ops = atomic_load(&e->st_ops);
	st->uring_direct = atomic_load(&e->st_direct);
	st->uring_fixed = atomic_load(&e->st_fixed);
	st->uring_submits = atomic_load(&e->st_submits);
	st->engine_fills = atomic_load(&e->st_fills);
	st->engine_wakeups = atomic_load(&e->st_wakeups);
	st->pack_reads = atomic_load(&e->st_pack_reads);
	st->pack_bytes = atomic_load(&e->st_pack_bytes);
	st->pack_files = atomic_load(&e->st_pack_files);
	st->background_cap = atomic_load(&e->st_bg_cap);
	st->background_cuts = atomic_load(&e->st_bg_cuts);
	st->engine_inflight = atomic_load(&e->st_inflight);
	st->engine_max_inflight = atomic_load(&e->st_max);
	st->engine_buffer_bytes = bs.region_bytes;
	st->engine_registered = e->registered;
	st->buffer_hits = atomic_load(&e->st_hits);
	st->async_reads = atomic_load(&e->st_async);
	st->demand_inflight += atomic_load(&e->st_demand);
}
