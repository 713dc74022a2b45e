/*
 * engine: the background workers' cache disk I/O through one io_uring.
 *
 * The cache (src/cache.c) writes each filled chunk and, once per chunk after
 * a start, reads it back to check its hash.  For the scheduler's worker
 * threads those two transfers are handed here through the cache's I/O hook
 * (cache_set_io); other threads (FUSE workers filling on demand) keep the
 * cache's pwrite/pread, since the hook answers them -ENOSYS.
 *
 * One engine thread owns the ring.  A worker puts a request (struct
 * eng_req, on its stack: STYLE #7, one context per I/O) on the submission
 * list, pokes an eventfd and sleeps on the request's semaphore.  The engine
 * thread waits for completions only; the eventfd read is itself an SQE, so
 * a poke is a completion too.  Each loop turn it takes every request waiting,
 * prepares their SQEs (a write is linked to its fdatasync: IOSQE_IO_LINK +
 * IORING_FSYNC_DATASYNC, one round trip), handles every completion ready,
 * and submits once (STYLE #11).
 *
 * O_DIRECT: transfers go through a second descriptor of the same cache file
 * opened O_DIRECT (via /proc/self/fd), so staging a dataset does not fill the
 * page cache with cache-file pages next to the FUSE pages of the same bytes.
 * It needs the buffer, offset and length aligned to 4096 (the cache's
 * scratch buffers and chunk offsets are; the last chunk of a file usually is
 * not, and a read is rounded up within the buffer's room).  Anything
 * unaligned, and everything once the filesystem refused O_DIRECT (EINVAL,
 * e.g. tmpfs), uses the buffered descriptor: the fallback is per request
 * and silent.
 *
 * Not done: fixed (registered) buffers.  The data lives in the cache's
 * per-thread scratch buffers, which the cache frees and reallocates
 * (growing to a larger chunk size, thread exit); registering them would pin
 * pages that may be unmapped under the registration.  Using registered
 * buffers needs the cache to take its scratch buffers from the engine.
 */
#include "prefetch_i.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define ENG_ALIGN	4096
#define ENG_DEPTH	128
#define TAG_EVENTFD	1ULL	/* user_data of the armed eventfd read */

enum { OP_WRITE, OP_READ };

struct eng_req {
	struct eng_req *next;
	int op;
	int fd;			/* O_DIRECT or buffered descriptor */
	bool direct;
	void *buf;
	size_t len;		/* bytes to transfer (rounded up for direct reads) */
	off_t off;
	bool sync;		/* writes: fdatasync after */
	int pending;		/* CQEs still to come: engine thread only */
	ssize_t res;
	int sync_res;
	sem_t done;
};

struct pf_engine {
	struct io_uring ring;
	int efd;
	uint64_t efd_val;		/* engine thread: target of the eventfd read */
	pthread_t thr;
	pthread_mutex_t lock;
	struct eng_req *head, *tail;	/* protected by lock */
	bool stop;			/* protected by lock */
	_Atomic bool direct_ok;		/* O_DIRECT has not been refused */
	_Atomic uint64_t st_ops, st_submits, st_direct;
};

static __thread bool on_worker;

void pf_engine_thread_is_worker(void)
{
	on_worker = true;
}

static void arm_eventfd(struct pf_engine *e)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);

	if (!sqe) {
		io_uring_submit(&e->ring);
		sqe = io_uring_get_sqe(&e->ring);
	}
	io_uring_prep_read(sqe, e->efd, &e->efd_val, sizeof(e->efd_val), 0);
	io_uring_sqe_set_data64(sqe, TAG_EVENTFD);
}

static struct io_uring_sqe *get_sqe(struct pf_engine *e)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);

	while (!sqe) {
		io_uring_submit(&e->ring);
		sqe = io_uring_get_sqe(&e->ring);
	}
	return sqe;
}

static void prep(struct pf_engine *e, struct eng_req *r)
{
	struct io_uring_sqe *sqe;

	/* a write and its linked fsync must go in one submission */
	if (r->op == OP_WRITE && r->sync && io_uring_sq_space_left(&e->ring) < 2)
		io_uring_submit(&e->ring);
	sqe = get_sqe(e);
	if (r->op == OP_WRITE)
		io_uring_prep_write(sqe, r->fd, r->buf, (unsigned)r->len, (uint64_t)r->off);
	else
		io_uring_prep_read(sqe, r->fd, r->buf, (unsigned)r->len, (uint64_t)r->off);
	io_uring_sqe_set_data(sqe, r);
	r->pending = 1;
	if (r->op == OP_WRITE && r->sync) {
		sqe->flags |= IOSQE_IO_LINK;
		sqe = get_sqe(e);
		io_uring_prep_fsync(sqe, r->fd, IORING_FSYNC_DATASYNC);
		/* the fsync's completion is told apart by the low bit */
		io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)r | 1);
		r->pending = 2;
	}
}

static void complete(struct pf_engine *e, struct io_uring_cqe *cqe)
{
	uint64_t tag = io_uring_cqe_get_data64(cqe);
	struct eng_req *r = (struct eng_req *)(uintptr_t)(tag & ~1ULL);

	if (tag & 1)
		r->sync_res = cqe->res;
	else
		r->res = cqe->res;
	if (--r->pending == 0)
		sem_post(&r->done);
}

static void *engine_main(void *arg)
{
	struct pf_engine *e = arg;
	unsigned inflight = 0;

	arm_eventfd(e);
	io_uring_submit(&e->ring);
	for (;;) {
		struct io_uring_cqe *cqe;
		struct eng_req *list;
		bool poked = false, stop;
		int ret = io_uring_wait_cqe(&e->ring, &cqe);

		if (ret == -EINTR)
			continue;
		if (ret < 0) {
			log_err("io_uring engine: wait: %s", strerror(-ret));
			break;
		}
		do {
			if (io_uring_cqe_get_data64(cqe) == TAG_EVENTFD) {
				poked = true;
			} else {
				complete(e, cqe);
				inflight--;
			}
			io_uring_cqe_seen(&e->ring, cqe);
		} while (io_uring_peek_cqe(&e->ring, &cqe) == 0);

		pthread_mutex_lock(&e->lock);
		list = e->head;
		e->head = e->tail = NULL;
		stop = e->stop;
		pthread_mutex_unlock(&e->lock);
		bool queued = list || (poked && !stop);

		for (; list; list = list->next) {
			prep(e, list);
			inflight += (unsigned)list->pending;
		}
		if (poked && !stop)
			arm_eventfd(e);
		if (stop && !inflight)
			break;
		if (queued) {
			io_uring_submit(&e->ring);	/* everything of this turn at once */
			atomic_fetch_add(&e->st_submits, 1);
		}
	}
	return NULL;
}

/* Queue @r for the engine thread and wait for it.  Returns r->res. */
static ssize_t run(struct pf_engine *e, struct eng_req *r)
{
	uint64_t one = 1;

	sem_init(&r->done, 0, 0);
	r->next = NULL;
	pthread_mutex_lock(&e->lock);
	if (e->stop) {
		pthread_mutex_unlock(&e->lock);
		sem_destroy(&r->done);
		return -ENOSYS;
	}
	if (e->tail)
		e->tail->next = r;
	else
		e->head = r;
	e->tail = r;
	pthread_mutex_unlock(&e->lock);
	if (write(e->efd, &one, sizeof(one)) < 0)
		log_warn("io_uring engine: eventfd: %s", strerror(errno));
	while (sem_wait(&r->done) < 0 && errno == EINTR)
		;
	sem_destroy(&r->done);
	atomic_fetch_add(&e->st_ops, 1);
	return r->res;
}

static bool aligned(const void *buf, size_t len, off_t off)
{
	return !((uintptr_t)buf % ENG_ALIGN) && !(len % ENG_ALIGN) && !(off % ENG_ALIGN);
}

/* An O_DIRECT descriptor of the file behind @fd, or -1. */
static int open_direct(struct pf_engine *e, int fd, int flags)
{
	char path[64];
	int dfd;

	if (!atomic_load(&e->direct_ok))
		return -1;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	dfd = open(path, flags | O_DIRECT | O_CLOEXEC);
	if (dfd < 0 && errno == EINVAL) {
		log_info("io_uring engine: the cache filesystem refuses O_DIRECT: buffered I/O");
		atomic_store(&e->direct_ok, false);
	}
	return dfd;
}

/* One transfer, whole: loops over short transfers (rare; buffered only). */
static ssize_t transfer(struct pf_engine *e, int op, int fd, void *buf, size_t len,
			size_t cap, off_t off, bool sync)
{
	struct eng_req r = { .op = op, .buf = buf, .off = off, .sync = sync };
	size_t want = len;
	int dfd = -1;

	if (op == OP_READ && len % ENG_ALIGN && cap >= DIV_ROUND_UP(len, ENG_ALIGN) * ENG_ALIGN)
		want = DIV_ROUND_UP(len, ENG_ALIGN) * ENG_ALIGN;	/* EOF shortens it */
	if (aligned(buf, want, off))
		dfd = open_direct(e, fd, op == OP_WRITE ? O_WRONLY : O_RDONLY);
	r.direct = dfd >= 0;
	r.fd = r.direct ? dfd : fd;
	r.len = r.direct ? want : len;
	run(e, &r);
	if (r.direct) {
		close(dfd);
		atomic_fetch_add(&e->st_direct, 1);
		if (r.res == -EINVAL) {
			/* refused after all (alignment rules of this device) */
			atomic_store(&e->direct_ok, false);
			return transfer(e, op, fd, buf, len, cap, off, sync);
		}
	}
	if (r.res < 0)
		return r.res;
	if (op == OP_READ)
		return (ssize_t)MIN((size_t)r.res, len);
	if ((size_t)r.res < len) {
		/* a short write (no space for the rest?): finish it plainly */
		ssize_t w = pwrite_full(fd, (char *)buf + r.res, len - (size_t)r.res,
					off + r.res);

		if (w < 0)
			return w;
		if (sync && fdatasync(fd) < 0)
			return -errno;
		return r.res + w;
	}
	if (sync && r.sync_res < 0)
		return r.sync_res;
	return (ssize_t)len;
}

static ssize_t eng_write_chunk(void *arg, int fd, const void *buf, size_t len,
			       off_t off, bool sync)
{
	if (!on_worker)
		return -ENOSYS;	/* readers' own fills keep the cache's path */
	return transfer(arg, OP_WRITE, fd, (void *)buf, len, len, off, sync);
}

static ssize_t eng_read_chunk(void *arg, int fd, void *buf, size_t len, size_t cap,
			      off_t off)
{
	if (!on_worker)
		return -ENOSYS;
	return transfer(arg, OP_READ, fd, buf, len, cap, off, false);
}

const struct cache_io_ops pf_engine_io = {
	.write_chunk = eng_write_chunk,
	.read_chunk = eng_read_chunk,
};

int pf_engine_create(struct pf_engine **out, char *err, size_t errlen)
{
	struct pf_engine *e = calloc(1, sizeof(*e));
	int ret;

	if (!e)
		return -ENOMEM;
	pthread_mutex_init(&e->lock, NULL);
	atomic_init(&e->direct_ok, true);
	e->efd = eventfd(0, EFD_CLOEXEC);
	if (e->efd < 0) {
		ret = -errno;
		snprintf(err, errlen, "eventfd: %s", strerror(-ret));
		goto out_free;
	}
	ret = io_uring_queue_init(ENG_DEPTH, &e->ring, 0);
	if (ret) {
		snprintf(err, errlen, "io_uring_queue_init: %s", strerror(-ret));
		goto out_close;
	}
	ret = -pthread_create(&e->thr, NULL, engine_main, e);
	if (ret) {
		snprintf(err, errlen, "engine thread: %s", strerror(-ret));
		goto out_ring;
	}
	*out = e;
	return 0;

out_ring:
	io_uring_queue_exit(&e->ring);
out_close:
	close(e->efd);
out_free:
	pthread_mutex_destroy(&e->lock);
	free(e);
	return ret;
}

void pf_engine_destroy(struct pf_engine *e)
{
	uint64_t one = 1;

	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stop = true;
	pthread_mutex_unlock(&e->lock);
	if (write(e->efd, &one, sizeof(one)) < 0)
		log_warn("io_uring engine: eventfd: %s", strerror(errno));
	pthread_join(e->thr, NULL);
	log_info("io_uring engine: %" PRIu64 " transfers (%" PRIu64 " O_DIRECT) in %"
		 PRIu64 " submissions", atomic_load(&e->st_ops), atomic_load(&e->st_direct),
		 atomic_load(&e->st_submits));
	io_uring_queue_exit(&e->ring);
	close(e->efd);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

void pf_engine_get_stats(struct pf_engine *e, uint64_t *ops, uint64_t *direct,
			 uint64_t *submits)
{
	*ops = e ? atomic_load(&e->st_ops) : 0;
	*direct = e ? atomic_load(&e->st_direct) : 0;
	*submits = e ? atomic_load(&e->st_submits) : 0;
}
