/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uring: see uring.h for the contract, docs/fuse-uring.md for the design
 * and the figures.
 *
 * Entries and threads.  A queue (one per possible CPU, as the kernel
 * counts them) has per_q threads pinned to its CPU (uring_queue_depth),
 * and each thread owns one io_uring with THREAD_ENTRIES registered
 * entries.  A request holds its entry until its reply is committed, so
 * the entries bound the requests the daemon can hold: a cold READ handed
 * to the I/O engine holds one for the whole fetch (its thread is free
 * meanwhile).  When every entry of a queue is held, the kernel keeps that
 * CPU's next requests to itself, where the daemon cannot see (or count
 * as stall) their wait: each time that happens is counted
 * (uring_queue_full()), and per_q defaults to enough entries for many
 * more readers than the FUSE worker threads.
 *
 * Why one entry per thread: a thread busy in a handler cannot serve its
 * other entries, and the kernel gives the next request to the most
 * recently freed entry, which is likely another of that same busy
 * thread's (it served the last ones).  With 4 entries a thread, a single
 * reader's mixed warm/cold epoch took 2.4 s instead of 1.8 s; the same 32
 * entries a queue as 32 threads of one entry took 1.8 s.  So a thread
 * stuck in a slow handler (the first passthrough open of a big file
 * hashes all of it) holds only its own entry, and the kernel hands the
 * queue's next request to another thread.
 *
 * A request in hand: the kernel wrote the fuse_in_header to in_out, the
 * request's first argument (its fixed header, zero bytes for LOOKUP and
 * the like) to op_in and the rest to the payload buffer.  The thread
 * copies the three into one buffer, header | op header | payload, as
 * /dev/fuse would have delivered them, and calls
 * fuse_session_process_buf().  The op header's size is the header's len
 * less the other two.
 *
 * Its reply: libfuse calls the session's writev hook (fuse/session_io.c),
 * which calls uring_reply(), registered there by uring_create().  That
 * finds the entry by the reply's unique, copies the reply behind the out
 * header into the entry's payload buffer and commits it: at once if the
 * handler replied from the ring's own thread (the COMMIT_AND_FETCH goes
 * with the thread's next wait, one io_uring_enter), or, when it replied
 * from another thread (a READ the I/O engine answers), by marking the
 * entry and waking the ring's thread through its eventfd; the thread
 * commits every marked entry on its next turn.  Only the owning thread
 * ever submits to a ring: the kernel runs the next request's copy in the
 * task that submitted the entry, which must not be one that may sleep
 * elsewhere or exit.
 */
#include "uring.h"

#include "log.h"
#include "session_io.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * Protocol 7.42 (Linux 6.14) definitions that the system <linux/fuse.h>
 * (7.38) lacks.  The numbers and layouts are the kernel's ABI.
 */
#ifndef FUSE_OVER_IO_URING
#define FUSE_OVER_IO_URING	(1ULL << 41)
#endif
#ifndef FUSE_URING_IN_OUT_HEADER_SZ
#define FUSE_URING_IN_OUT_HEADER_SZ	128
#define FUSE_URING_OP_IN_OUT_SZ		128

struct fuse_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;	/* the request's unique */
	uint32_t payload_sz;	/* bytes in the payload buffer, either way */
	uint32_t padding;
	uint64_t reserved;
};

struct fuse_uring_req_header {
	char in_out[FUSE_URING_IN_OUT_HEADER_SZ];	/* fuse_in_header / fuse_out_header */
	char op_in[FUSE_URING_OP_IN_OUT_SZ];	/* the request's first argument */
	struct fuse_uring_ent_in_out ring_ent_in_out;
};

enum fuse_uring_cmd {
	FUSE_IO_URING_CMD_INVALID = 0,
	FUSE_IO_URING_CMD_REGISTER = 1,
	FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2,
};

/* in the SQE128's 80-byte command area */
struct fuse_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};
#endif

#define URING_PARAM	"/sys/module/fuse/parameters/enable_uring"
#define TAG_EFD		1	/* user_data of the eventfd poll */
#define TAG_ENT		16	/* user_data of entry i's command: TAG_ENT + i */
#define THREAD_ENTRIES	1	/* entries per ring thread: see the top */

struct uring_worker;

/* One registered ring entry: a request the kernel can hand to the daemon. */
struct uring_ent {
	struct uring_worker *w;		/* its owner: the only thread submitting it */
	unsigned idx;			/* in w->ent[] */
	struct fuse_uring_req_header *hdr;	/* registered with the kernel */
	char *payload;			/* registered, u->payload_sz bytes */
	struct iovec iov[2];
	_Atomic uint64_t unique;	/* request in hand, 0 = none */
	_Atomic bool commit_ready;	/* its reply was written by another thread */
	uint64_t async_commit;		/* ... for this unique */
	uint32_t last_cmd;		/* the command in flight, to repeat on EAGAIN */
	uint64_t last_commit;
};

/* Per queue: how many of its entries hold a request, and how often all did. */
struct uring_queue {
	_Atomic unsigned held;
	_Atomic uint64_t full;
};

struct uring_worker {
	struct uring *u;
	unsigned qid;
	pthread_t tid;
	bool started;
	struct io_uring ring;
	bool ring_ok;
	bool refused;			/* the kernel refused a REGISTER */
	int efd;			/* wakes the thread: async commit or stop */
	char *req;			/* the request rebuilt for libfuse */
	struct uring_ent *ent;		/* u->depth entries */
};

struct uring {
	struct sfs *fs;
	struct fuse_session *se;
	enum cfg_auto mode;
	bool offered;			/* the kernel's INIT had FUSE_OVER_IO_URING */
	bool negotiated;		/* our INIT reply had it */
	_Atomic bool active;		/* every ring entry is registered */
	_Atomic bool stopping;
	size_t payload_sz;
	unsigned nq, per_q, nw, depth;
	struct uring_worker *w;
	struct uring_queue *q;		/* nq */
	pthread_mutex_t lock;		/* start-up: registered, failed */
	pthread_cond_t cond;
	unsigned registered, failed, refused;
	int first_err;
	_Atomic uint64_t requests;	/* requests that came from a ring */
};

static __thread struct uring_worker *self;	/* the ring this thread owns */

static int read_param(void)
{
	char c = 0;
	int fd = open(URING_PARAM, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	return c == 'Y' || c == 'y' || c == '1';
}

static int write_param(void)
{
	int fd = open(URING_PARAM, O_WRONLY | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, "Y", 1) != 1)
		ret = -errno;
	close(fd);
	return ret;
}

static uint32_t uring_init_reply(struct uring *u, uint64_t kernel_flags,
				 uint32_t max_write, uint32_t max_pages);
static bool uring_reply(struct uring *u, const struct iovec *iov, int count,
			ssize_t *ret);

/* The session I/O hooks (fuse/session_io.h). */
static void hook_init_reply(void *arg, struct session_io_init *init)
{
	init->flags2 |= uring_init_reply(arg, init->kernel_flags, init->max_write,
					 init->max_pages);
}

static bool hook_reply(void *arg, const struct iovec *iov, int count, ssize_t *ret)
{
	return uring_reply(arg, iov, count, ret);
}

int uring_create(struct sfs *fs, struct uring **out, char *err, size_t errlen)
{
	struct uring *u;
	int on, ret;

	*out = NULL;
	if (fs->cfg.uring == CFG_OFF)
		return 0;
#ifdef CONFIG_FUSE_PASSTHROUGH_API
	/* that build does not hook the session's I/O (fuse/passthrough.h) */
	if (fs->cfg.uring == CFG_ON) {
		snprintf(err, errlen, "uring=on needs the libfuse 3.14-3.16 build of stagefs");
		return -EOPNOTSUPP;
	}
	log_info("uring: off (not in builds against libfuse >= 3.17)");
	return 0;
#endif
	on = read_param();
	if (on == 0 && fs->cfg.uring == CFG_ON) {
		on = write_param();
		if (on == 0) {
			log_notice("uring: set the kernel parameter %s to Y", URING_PARAM);
			on = 1;
		}
	}
	if (on <= 0) {
		if (fs->cfg.uring == CFG_ON) {
			snprintf(err, errlen, "uring=on, but %s: %s", URING_PARAM,
				 on ? strerror(-on) : "N");
			return on ? on : -EOPNOTSUPP;
		}
		log_info("uring: off (%s is %s)", URING_PARAM, on ? "missing" : "N");
		return 0;
	}
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->fs = fs;
	u->mode = fs->cfg.uring;
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->cond, NULL);
	ret = session_io_register(fs->sio, &(struct session_io_hooks){
		.init_reply = hook_init_reply, .reply = hook_reply, .arg = u });
	if (ret) {
		pthread_cond_destroy(&u->cond);
		pthread_mutex_destroy(&u->lock);
		free(u);
		return ret;
	}
	*out = u;
	return 0;
}

/*
 * The INIT reply hook (fuse/session_io.h): @kernel_flags is what the kernel
 * offered; returns the flags2 bits to add to the reply (0 or
 * FUSE_OVER_IO_URING's).  Notes the reply's max_write and max_pages, which
 * size the ring buffers.
 */
static uint32_t uring_init_reply(struct uring *u, uint64_t kernel_flags,
				 uint32_t max_write, uint32_t max_pages)
{
	size_t sz;

	if (!u)
		return 0;
	u->offered = kernel_flags & FUSE_OVER_IO_URING;
	if (!u->offered)
		return 0;
	/* the kernel wants room for the largest WRITE and the largest READ */
	sz = MAX((size_t)max_write, (size_t)max_pages * 4096);
	u->payload_sz = MAX(sz, (size_t)8192);
	u->negotiated = true;
	return (uint32_t)(FUSE_OVER_IO_URING >> 32);
}

bool uring_active(const struct uring *u)
{
	return u && atomic_load(&u->active);
}

uint64_t uring_requests(const struct uring *u)
{
	return u ? atomic_load(&u->requests) : 0;
}

uint64_t uring_queue_full(const struct uring *u)
{
	uint64_t n = 0;

	for (unsigned i = 0; u && u->q && i < u->nq; i++)
		n += atomic_load(&u->q[i].full);
	return n;
}

unsigned uring_entries(const struct uring *u)
{
	return uring_active(u) ? u->nw * u->depth : 0;
}

/* ---- one ring ---- */

/* Prepare @e's command @cmd; submitted with the owner's next wait. */
static struct io_uring_sqe *cmd_sqe(struct uring_ent *e, uint32_t cmd, uint64_t commit_id)
{
	struct uring_worker *w = e->w;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
	struct fuse_uring_cmd_req *cr;

	if (!sqe)
		return NULL;	/* cannot happen: the SQ has room for every entry and the poll */
	memset(sqe, 0, 2 * sizeof(*sqe));	/* SQE128 */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fuse_session_fd(w->u->se);
	sqe->cmd_op = cmd;
	sqe->user_data = TAG_ENT + e->idx;
	if (cmd == FUSE_IO_URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	}
	cr = (struct fuse_uring_cmd_req *)sqe->cmd;
	cr->commit_id = commit_id;
	cr->qid = (uint16_t)w->qid;
	e->last_cmd = cmd;
	e->last_commit = commit_id;
	return sqe;
}

/* @e's reply is in its buffers: commit it and fetch the next request. */
static void commit_ent(struct uring_ent *e, uint64_t unique)
{
	atomic_fetch_sub(&e->w->u->q[e->w->qid].held, 1);
	cmd_sqe(e, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, unique);
}

static void arm_efd(struct uring_worker *w)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

	if (!sqe)
		return;
	memset(sqe, 0, 2 * sizeof(*sqe));
	io_uring_prep_poll_multishot(sqe, w->efd, POLLIN);
	sqe->user_data = TAG_EFD;
}

static int worker_setup(struct uring_worker *w)
{
	struct uring *u = w->u;
	struct io_uring_params p = { .flags = IORING_SETUP_SQE128 };
	struct io_uring_cqe *cqe;
	unsigned sq = 4;
	int ret;

	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0)
		return -errno;
	w->ent = calloc(u->depth, sizeof(*w->ent));
	w->req = malloc(sizeof(struct fuse_in_header) + FUSE_URING_OP_IN_OUT_SZ + u->payload_sz);
	if (!w->ent || !w->req)
		return -ENOMEM;
	for (unsigned i = 0; i < u->depth; i++) {
		struct uring_ent *e = &w->ent[i];

		e->w = w;
		e->idx = i;
		/* lazily backed: the kernel writes only what a request carries */
		e->hdr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		e->payload = mmap(NULL, u->payload_sz, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (e->hdr == MAP_FAILED)
			e->hdr = NULL;
		if (e->payload == MAP_FAILED)
			e->payload = NULL;
		if (!e->hdr || !e->payload)
			return -ENOMEM;
		e->iov[0] = (struct iovec){ e->hdr, sizeof(*e->hdr) };
		e->iov[1] = (struct iovec){ e->payload, u->payload_sz };
	}
	/* one command per entry and the eventfd's poll, at most, in the SQ */
	while (sq < u->depth + 1)
		sq *= 2;
	ret = io_uring_queue_init_params(sq, &w->ring, &p);
	if (ret)
		return ret;
	w->ring_ok = true;
	arm_efd(w);
	for (unsigned i = 0; i < u->depth; i++)
		if (!cmd_sqe(&w->ent[i], FUSE_IO_URING_CMD_REGISTER, 0))
			return -EIO;
	ret = io_uring_submit(&w->ring);
	if (ret < 0)
		return ret;
	{
		/* tests/integration/uring_start.sh: widen the window below */
		const char *d = getenv("STAGEFS_TEST_URING_REGISTER_DELAY_US");

		if (d)
			usleep((useconds_t)strtoul(d, NULL, 10));
	}
	/*
	 * REGISTER is issued inline: a refusal is in the CQ already.  The
	 * kernel then turns io_uring off for the connection and serves it
	 * through /dev/fuse.  Anything else there is the worker loop's and
	 * stays: the last queue's REGISTER makes the connection ready, and
	 * the kernel may hand a request it held (a stat of the mount point
	 * during start-up) to this entry at once.  Consuming that CQE here
	 * lost the request, and whoever sent it waited forever.
	 */
	if (io_uring_peek_cqe(&w->ring, &cqe) == 0 && cqe->user_data >= TAG_ENT &&
	    cqe->res < 0 && cqe->res != -EAGAIN && cqe->res != -EINTR) {
		ret = cqe->res;
		io_uring_cqe_seen(&w->ring, cqe);
		w->refused = true;
		return ret;
	}
	return 0;
}

static void pin_to_queue_cpu(struct uring_worker *w)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(w->qid, &set);
	/* a cpuset without this CPU: the thread runs where it may */
	if (sched_setaffinity(0, sizeof(set), &set))
		log_debug("uring: queue %u: cannot pin to its CPU: %s", w->qid, strerror(errno));
}

/* Entry @e handed us a request: rebuild it as /dev/fuse gives it, handle it. */
static void handle_request(struct uring_ent *e)
{
	struct uring_worker *w = e->w;
	struct uring *u = w->u;
	const struct fuse_in_header *in = (const void *)e->hdr->in_out;
	const struct fuse_uring_ent_in_out *eio = &e->hdr->ring_ent_in_out;
	struct fuse_in_header *rin = (void *)w->req;
	size_t psz = eio->payload_sz, opsz;
	struct fuse_buf fbuf = { .mem = w->req };

	atomic_fetch_add(&u->requests, 1);
	if (atomic_fetch_add(&u->q[w->qid].held, 1) + 1 == u->per_q * u->depth)
		atomic_fetch_add(&u->q[w->qid].full, 1);
	atomic_store(&e->unique, eio->commit_id);
	if (in->len < sizeof(*in) + psz || in->len - sizeof(*in) - psz > FUSE_URING_OP_IN_OUT_SZ ||
	    psz > u->payload_sz || eio->commit_id != in->unique) {
		struct fuse_out_header out = { .len = sizeof(out), .error = -EIO,
					       .unique = eio->commit_id };
		struct iovec iov = { &out, sizeof(out) };
		ssize_t n;

		log_err("uring: malformed request (opcode %u, len %u, payload %zu): EIO",
			  in->opcode, in->len, psz);
		uring_reply(u, &iov, 1, &n);
		return;
	}
	opsz = in->len - sizeof(*in) - psz;
	memcpy(rin, in, sizeof(*in));
	memcpy(w->req + sizeof(*in), e->hdr->op_in, opsz);
	memcpy(w->req + sizeof(*in) + opsz, e->payload, psz);
	fbuf.size = in->len;
	session_io_note_request(in->unique, in->opcode);
	fuse_session_process_buf(u->se, &fbuf);
}

static void worker_started(struct uring_worker *w, int err)
{
	struct uring *u = w->u;

	pthread_mutex_lock(&u->lock);
	if (err) {
		u->failed++;
		u->refused += w->refused;
		if (!u->first_err)
			u->first_err = err;
	} else {
		u->registered++;
	}
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
}

static void *worker_main(void *arg)
{
	struct uring_worker *w = arg;
	struct uring *u = w->u;
	unsigned live = u->depth;	/* entries the kernel has not ended */
	char name[16];
	int ret;

	snprintf(name, sizeof(name), "sfs-ring%u", w->qid);
	pthread_setname_np(pthread_self(), name);
	pin_to_queue_cpu(w);
	self = w;
	ret = worker_setup(w);
	worker_started(w, ret);
	if (ret)
		return NULL;

	while (!atomic_load(&u->stopping) && live) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		/* submits what is prepared (commits, a re-armed poll), then waits */
		ret = io_uring_submit_and_wait(&w->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			log_err("uring: queue %u: %s", w->qid, strerror(-ret));
			break;
		}
		io_uring_for_each_cqe(&w->ring, head, cqe) {
			struct uring_ent *e;

			seen++;
			if (cqe->user_data == TAG_EFD) {
				uint64_t v;

				if (read(w->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					log_warn("uring: eventfd: %s", strerror(errno));
				if (!(cqe->flags & IORING_CQE_F_MORE))
					arm_efd(w);
				continue;
			}
			if (cqe->user_data < TAG_ENT || cqe->user_data - TAG_ENT >= u->depth)
				continue;
			e = &w->ent[cqe->user_data - TAG_ENT];
			if (cqe->res == -EAGAIN || cqe->res == -EINTR) {
				/* the same command again */
				cmd_sqe(e, e->last_cmd, e->last_commit);
				continue;
			}
			if (cqe->res < 0) {
				/* ENOTCONN, ECANCELED: the connection is going away */
				if (cqe->res != -ENOTCONN && cqe->res != -ECANCELED)
					log_err("uring: queue %u: %s", w->qid, strerror(-cqe->res));
				if (live)
					live--;
				continue;
			}
			handle_request(e);
		}
		io_uring_cq_advance(&w->ring, seen);
		/* replies other threads wrote (they woke the eventfd) */
		for (unsigned i = 0; i < u->depth; i++)
			if (atomic_exchange(&w->ent[i].commit_ready, false))
				commit_ent(&w->ent[i], w->ent[i].async_commit);
	}
	return NULL;
}

/* ---- replies ---- */

/* The entry holding request @unique, or NULL (it came from /dev/fuse). */
static struct uring_ent *find_ent(struct uring *u, uint64_t unique)
{
	if (self && self->u == u)
		for (unsigned j = 0; j < u->depth; j++)
			if (atomic_load(&self->ent[j].unique) == unique)
				return &self->ent[j];
	for (unsigned i = 0; i < u->nw; i++)
		for (unsigned j = 0; u->w[i].ent && j < u->depth; j++)
			if (atomic_load(&u->w[i].ent[j].unique) == unique)
				return &u->w[i].ent[j];
	return NULL;
}

/*
 * The reply hook (fuse/session_io.h): if the reply in @iov answers a
 * request that came from a ring, commit it there, set *@ret to the bytes
 * "written" and return true; otherwise return false (the reply goes to
 * /dev/fuse).
 */
static bool uring_reply(struct uring *u, const struct iovec *iov, int count,
			ssize_t *ret)
{
	const struct fuse_out_header *out = iov[0].iov_base;
	struct fuse_out_header *oh;
	struct uring_ent *e;
	size_t len = 0;
	int err = out->error;

	if (!u || !u->nw || !out->unique)
		return false;	/* notifications go to /dev/fuse */
	e = find_ent(u, out->unique);
	if (!e)
		return false;	/* a request read from /dev/fuse */
	for (int i = 1; i < count; i++) {
		if (len + iov[i].iov_len > u->payload_sz) {
			log_err("uring: a %zu-byte reply does not fit the ring's %zu bytes",
				  len + iov[i].iov_len, u->payload_sz);
			err = -EIO;
			len = 0;
			break;
		}
		memcpy(e->payload + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	oh = (void *)e->hdr->in_out;
	oh->len = (uint32_t)(sizeof(*oh) + len);
	oh->error = err;
	oh->unique = out->unique;
	e->hdr->ring_ent_in_out.payload_sz = (uint32_t)len;
	atomic_store(&e->unique, 0);
	if (e->w == self) {
		/* submitted with this thread's next wait */
		commit_ent(e, out->unique);
	} else {
		uint64_t one = 1;

		e->async_commit = out->unique;
		atomic_store(&e->commit_ready, true);
		if (write(e->w->efd, &one, sizeof(one)) < 0)
			log_err("uring: waking queue %u: %s", e->w->qid, strerror(errno));
	}
	*ret = (ssize_t)(sizeof(*oh) + len);
	return true;
}

/* ---- start and stop ---- */

static unsigned possible_cpus(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	unsigned a, b, n = 0;
	int c;

	if (!f)
		return (unsigned)sysconf(_SC_NPROCESSORS_CONF);
	/* "0-1", "0-3,8-11", "0" */
	while (fscanf(f, "%u", &a) == 1) {
		b = a;
		c = fgetc(f);
		if (c == '-') {
			if (fscanf(f, "%u", &b) != 1)
				break;
			c = fgetc(f);
		}
		n = MAX(n, b + 1);
		if (c != ',')
			break;
	}
	fclose(f);
	return n ? n : 1;
}

/*
 * uring_queue_depth=0: the FUSE worker threads' share of a queue, and at
 * least 64 a queue up to 512 in all.  A cold READ holds its entry for the
 * whole fetch, and a LOOKUP or OPEN behind a full queue waits with it:
 * 64 covers what the kernel lets wait in the background (max_background,
 * 128) on a small node.
 */
static unsigned uring_auto_depth(unsigned threads, unsigned nq)
{
	return MAX(MAX(2u, threads / nq), MIN(64u, 512u / nq));
}

int uring_start(struct uring *u, struct fuse_session *se, char *err, size_t errlen)
{
	const char *why = NULL;
	bool refused;
	int ret;

	if (!u)
		return 0;
	if (!u->offered)
		why = "the kernel did not offer FUSE_OVER_IO_URING at INIT";
	else if (!u->negotiated)
		why = "the INIT reply was not hooked";
	if (why)
		goto off;
	u->se = se;
	/* the kernel makes one queue per possible CPU and needs every one */
	u->nq = possible_cpus();
	u->per_q = u->fs->cfg.uring_queue_depth;
	if (!u->per_q)
		u->per_q = uring_auto_depth(u->fs->cfg.threads, u->nq);
	u->depth = THREAD_ENTRIES;
	u->nw = u->nq * u->per_q;
	u->w = calloc(u->nw, sizeof(*u->w));
	u->q = calloc(u->nq, sizeof(*u->q));
	if (!u->w || !u->q) {
		u->nw = 0;
		why = "out of memory";
		goto off;
	}
	for (unsigned i = 0; i < u->nw; i++) {
		u->w[i].u = u;
		u->w[i].qid = i / u->per_q;
		u->w[i].efd = -1;
		ret = pthread_create(&u->w[i].tid, NULL, worker_main, &u->w[i]);
		if (ret) {
			worker_started(&u->w[i], -ret);
			continue;
		}
		u->w[i].started = true;
	}
	pthread_mutex_lock(&u->lock);
	while (u->registered + u->failed < u->nw)
		pthread_cond_wait(&u->cond, &u->lock);
	ret = u->first_err;
	refused = u->refused == u->failed;
	pthread_mutex_unlock(&u->lock);
	if (ret && refused && u->mode != CFG_ON) {
		/* the kernel went back to /dev/fuse for this connection */
		log_notice("uring: off (the kernel refused the ring entries: %s)", strerror(-ret));
		return 0;
	}
	if (ret) {
		/*
		 * An entry that never reached the kernel leaves its queue
		 * without one, and the kernel would hold every request.
		 */
		snprintf(err, errlen, "uring: setting up the ring entries: %s", strerror(-ret));
		return ret;
	}
	atomic_store(&u->active, true);
	log_info("uring: on (%u queues, %u threads and entries each, %zu KiB per entry)",
		 u->nq, u->per_q * u->depth, u->payload_sz / 1024);
	return 0;
off:
	if (u->mode == CFG_ON) {
		snprintf(err, errlen, "uring=on, but %s", why);
		return -EOPNOTSUPP;
	}
	log_notice("uring: off (%s)", why);
	return 0;
}

static void uring_stop(struct uring *u)
{
	if (!u || !u->w)
		return;
	atomic_store(&u->stopping, true);
	for (unsigned i = 0; i < u->nw; i++) {
		uint64_t one = 1;

		if (u->w[i].efd >= 0 && write(u->w[i].efd, &one, sizeof(one)) < 0)
			log_warn("uring: stopping queue %u: %s", u->w[i].qid, strerror(errno));
	}
	for (unsigned i = 0; i < u->nw; i++)
		if (u->w[i].started)
			pthread_join(u->w[i].tid, NULL);
	atomic_store(&u->active, false);
}

void uring_destroy(struct uring *u)
{
	if (!u)
		return;
	uring_stop(u);
	for (unsigned i = 0; u->w && i < u->nw; i++) {
		struct uring_worker *w = &u->w[i];

		/* closing the ring cancels the entries' commands */
		if (w->ring_ok)
			io_uring_queue_exit(&w->ring);
		for (unsigned j = 0; w->ent && j < u->depth; j++) {
			if (w->ent[j].hdr)
				munmap(w->ent[j].hdr, 4096);
			if (w->ent[j].payload)
				munmap(w->ent[j].payload, u->payload_sz);
		}
		free(w->ent);
		free(w->req);
		if (w->efd >= 0)
			close(w->efd);
	}
	free(u->w);
	free(u->q);
	pthread_cond_destroy(&u->cond);
	pthread_mutex_destroy(&u->lock);
	free(u);
}
