/*
 * uring: see uring.h for the contract, docs/fuse-uring.md for the design
 * and the figures.
 *
 * One ring entry per thread.  A queue (one per possible CPU, as the kernel
 * counts them) has per_q threads pinned to its CPU, and each thread owns
 * one io_uring with one registered entry: a thread busy in a slow handler
 * (the first passthrough open of a big file hashes all of it) holds only
 * its own entry, and the kernel hands the queue's next request to another
 * of its threads (it gives requests to the most recently freed entry).
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
 * copies the reply behind the out header into the payload buffer and commits it: at once if the handler replied from the
 * ring's own thread (the COMMIT_AND_FETCH goes with the thread's next
 * wait, one io_uring_enter), or, when it replied from another thread (a
 * READ the I/O engine answers), by waking the ring's thread through its
 * eventfd.  Only the owning thread ever submits to a ring: the kernel runs
 * the next request's copy in the task that submitted the entry, which must
 * not be one that may sleep elsewhere or exit.
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
#define TAG_ENT		1	/* user_data of the entry's command */
#define TAG_EFD		2	/* user_data of the eventfd poll */

struct uring_worker {
	struct uring *u;
	unsigned qid;
	pthread_t tid;
	bool started;
	struct io_uring ring;
	bool ring_ok;
	bool refused;			/* the kernel refused its REGISTER */
	int efd;			/* wakes the thread: async commit or stop */
	struct fuse_uring_req_header *hdr;	/* registered with the kernel */
	char *payload;			/* registered, u->payload_sz bytes */
	struct iovec iov[2];
	char *req;			/* the request rebuilt for libfuse */
	_Atomic uint64_t unique;	/* request in hand, 0 = none */
	_Atomic bool commit_ready;	/* its reply was written by another thread */
	uint64_t async_commit;		/* ... for this unique */
	uint32_t last_cmd;		/* the command in flight, to repeat on EAGAIN */
	uint64_t last_commit;
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
	unsigned nq, per_q, nw;
	struct uring_worker *w;
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

/* ---- one ring ---- */

static struct io_uring_sqe *cmd_sqe(struct uring_worker *w, uint32_t cmd, uint64_t commit_id)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
	struct fuse_uring_cmd_req *cr;

	if (!sqe)
		return NULL;	/* cannot happen: one command in flight at most */
	memset(sqe, 0, 2 * sizeof(*sqe));	/* SQE128 */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fuse_session_fd(w->u->se);
	sqe->cmd_op = cmd;
	sqe->user_data = TAG_ENT;
	if (cmd == FUSE_IO_URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)w->iov;
		sqe->len = 2;
	}
	cr = (struct fuse_uring_cmd_req *)sqe->cmd;
	cr->commit_id = commit_id;
	cr->qid = (uint16_t)w->qid;
	w->last_cmd = cmd;
	w->last_commit = commit_id;
	return sqe;
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
	int ret;

	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0)
		return -errno;
	/* lazily backed: the kernel writes only what a request carries */
	w->hdr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w->payload = mmap(NULL, u->payload_sz, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w->req = malloc(sizeof(struct fuse_in_header) + FUSE_URING_OP_IN_OUT_SZ + u->payload_sz);
	if (w->hdr == MAP_FAILED || w->payload == MAP_FAILED || !w->req) {
		if (w->hdr == MAP_FAILED)
			w->hdr = NULL;
		if (w->payload == MAP_FAILED)
			w->payload = NULL;
		return -ENOMEM;
	}
	w->iov[0] = (struct iovec){ w->hdr, sizeof(*w->hdr) };
	w->iov[1] = (struct iovec){ w->payload, u->payload_sz };
	ret = io_uring_queue_init_params(4, &w->ring, &p);
	if (ret)
		return ret;
	w->ring_ok = true;
	arm_efd(w);
	if (!cmd_sqe(w, FUSE_IO_URING_CMD_REGISTER, 0))
		return -EIO;
	ret = io_uring_submit(&w->ring);
	if (ret < 0)
		return ret;
	/*
	 * REGISTER is issued inline: a refusal is in the CQ already.  The
	 * kernel then turns io_uring off for the connection and serves it
	 * through /dev/fuse.
	 */
	while (io_uring_peek_cqe(&w->ring, &cqe) == 0) {
		ret = cqe->user_data == TAG_ENT ? cqe->res : 0;
		io_uring_cqe_seen(&w->ring, cqe);
		if (ret < 0) {
			w->refused = true;
			return ret;
		}
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

/* The ring handed us a request: rebuild it as /dev/fuse gives it, handle it. */
static void handle_request(struct uring_worker *w)
{
	struct uring *u = w->u;
	const struct fuse_in_header *in = (const void *)w->hdr->in_out;
	const struct fuse_uring_ent_in_out *eio = &w->hdr->ring_ent_in_out;
	struct fuse_in_header *rin = (void *)w->req;
	size_t psz = eio->payload_sz, opsz;
	struct fuse_buf fbuf = { .mem = w->req };

	atomic_fetch_add(&u->requests, 1);
	atomic_store(&w->unique, eio->commit_id);
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
	memcpy(w->req + sizeof(*in), w->hdr->op_in, opsz);
	memcpy(w->req + sizeof(*in) + opsz, w->payload, psz);
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

	while (!atomic_load(&u->stopping)) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		bool stop = false;

		/* submits what is prepared (a commit, a re-armed poll), then waits */
		ret = io_uring_submit_and_wait(&w->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			log_err("uring: queue %u: %s", w->qid, strerror(-ret));
			break;
		}
		io_uring_for_each_cqe(&w->ring, head, cqe) {
			seen++;
			if (cqe->user_data == TAG_EFD) {
				uint64_t v;

				if (read(w->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					log_warn("uring: eventfd: %s", strerror(errno));
				if (!(cqe->flags & IORING_CQE_F_MORE))
					arm_efd(w);
				continue;
			}
			if (cqe->res == -EAGAIN || cqe->res == -EINTR) {
				/* the same command again */
				cmd_sqe(w, w->last_cmd, w->last_commit);
				continue;
			}
			if (cqe->res < 0) {
				/* ENOTCONN, ECANCELED: the connection is going away */
				if (cqe->res != -ENOTCONN && cqe->res != -ECANCELED)
					log_err("uring: queue %u: %s", w->qid, strerror(-cqe->res));
				stop = true;
				continue;
			}
			handle_request(w);
		}
		io_uring_cq_advance(&w->ring, seen);
		if (stop)
			break;
		/* a reply another thread wrote (it woke the eventfd) */
		if (atomic_exchange(&w->commit_ready, false))
			cmd_sqe(w, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, w->async_commit);
	}
	return NULL;
}

/* ---- replies ---- */

static struct uring_worker *find_worker(struct uring *u, uint64_t unique)
{
	if (self && self->u == u && atomic_load(&self->unique) == unique)
		return self;
	for (unsigned i = 0; i < u->nw; i++)
		if (atomic_load(&u->w[i].unique) == unique)
			return &u->w[i];
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
	struct uring_worker *w;
	size_t len = 0;
	int err = out->error;

	if (!u || !u->nw || !out->unique)
		return false;	/* notifications go to /dev/fuse */
	w = find_worker(u, out->unique);
	if (!w)
		return false;	/* a request read from /dev/fuse */
	for (int i = 1; i < count; i++) {
		if (len + iov[i].iov_len > u->payload_sz) {
			log_err("uring: a %zu-byte reply does not fit the ring's %zu bytes",
				  len + iov[i].iov_len, u->payload_sz);
			err = -EIO;
			len = 0;
			break;
		}
		memcpy(w->payload + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	oh = (void *)w->hdr->in_out;
	oh->len = (uint32_t)(sizeof(*oh) + len);
	oh->error = err;
	oh->unique = out->unique;
	w->hdr->ring_ent_in_out.payload_sz = (uint32_t)len;
	atomic_store(&w->unique, 0);
	if (w == self) {
		/* submitted with this thread's next wait */
		cmd_sqe(w, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, out->unique);
	} else {
		uint64_t one = 1;

		w->async_commit = out->unique;
		atomic_store(&w->commit_ready, true);
		if (write(w->efd, &one, sizeof(one)) < 0)
			log_err("uring: waking queue %u: %s", w->qid, strerror(errno));
	}
	*ret = (ssize_t)(sizeof(*oh) + len);
	return true;
}

/* ---- start and stop ---- */

/*
 * Entries (threads) per queue.  A READ the I/O engine answers later keeps
 * its entry while the chunk comes from the backend, and the kernel holds
 * the queue's next request until an entry is free: cold READs of a few
 * files, one 4 MiB fetch each, then stall the LOOKUPs and OPENs of every
 * other reader on that CPU (measured: the AU benchmark's resnet50 readers
 * waited up to 1.3 s in open(2) with 8 entries a queue, docs/fuse-uring.md).
 * So by default a queue has room for what the kernel lets wait in the
 * background (max_background, 128, mostly from one CPU on a small node):
 * at least 64, at most 512 over all queues, and never fewer than threads
 * spread over the queues.
 */
static unsigned uring_queue_depth(const struct sfs_config *c, unsigned nq)
{
	if (c->uring_queue_depth)
		return MAX(2u, c->uring_queue_depth);
	return MAX(MAX(2u, c->threads / nq), MIN(64u, MAX(2u, 512u / nq)));
}

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
	u->per_q = uring_queue_depth(&u->fs->cfg, u->nq);
	u->nw = u->nq * u->per_q;
	u->w = calloc(u->nw, sizeof(*u->w));
	if (!u->w) {
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
	log_info("uring: on (%u queues, %u threads each, %zu KiB per entry)",
		 u->nq, u->per_q, u->payload_sz / 1024);
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

		/* closing the ring cancels the entry's command */
		if (w->ring_ok)
			io_uring_queue_exit(&w->ring);
		if (w->hdr)
			munmap(w->hdr, 4096);
		if (w->payload)
			munmap(w->payload, u->payload_sz);
		free(w->req);
		if (w->efd >= 0)
			close(w->efd);
	}
	free(u->w);
	pthread_cond_destroy(&u->cond);
	pthread_mutex_destroy(&u->lock);
	free(u);
}
