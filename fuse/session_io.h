/* SPDX-License-Identifier: Apache-2.0 */
/*
 * session_io: the FUSE session's I/O hooks for the libfuse 3.14-3.16
 * build, which both FUSE passthrough (fuse/passthrough.h) and FUSE over
 * io_uring (fuse/uring.h) need and neither owns.
 *
 * libfuse 3.14 knows neither feature, so the session's I/O goes through
 * fuse_session_custom_io(): the read hook notes, per worker thread, the
 * request the thread is on (unique, opcode) and the kernel's INIT flags;
 * the writev hook lets the registered modules add bits to the INIT reply,
 * adds FOPEN_PASSTHROUGH + backing_id to the OPEN reply the thread's
 * request chose (session_io_set_backing_id), and offers every reply to the
 * modules that may send it elsewhere (a ring's request is answered on the
 * ring).  Modules register their hooks here; this file calls them and
 * never names them, so the arrows run one way: passthrough.c -> here,
 * uring.c -> here.
 *
 * Why a thread-local works: libfuse's multi-threaded loop reads a request
 * and handles it on the same worker thread, and the handlers reply before
 * they return.  A ring worker notes its requests itself
 * (session_io_note_request) before handing them to libfuse.  Splice
 * receive would hide requests from the read hook, so SPLICE_READ is never
 * asked for (passthrough_init).
 *
 * Builds against libfuse >= 3.17 (CONFIG_FUSE_PASSTHROUGH_API) install no
 * hooks: passthrough uses libfuse's API and uring is unavailable there.
 *
 * Lifetime: session_io_create() before the modules are created (they
 * register from their _create), session_io_attach() right after
 * fuse_session_mount() and before the first request is read,
 * session_io_destroy() after the session ended.
 */
#ifndef STAGEFS_FUSE_SESSION_IO_H
#define STAGEFS_FUSE_SESSION_IO_H

#include "fs.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct session_io;

/* The INIT reply about to go out, as the hooks see it. */
struct session_io_init {
	uint64_t kernel_flags;		/* INIT request flags | flags2 << 32 */
	uint32_t max_write;		/* of the reply */
	uint32_t max_pages;		/* of the reply; 0: not set */
	uint32_t flags2;		/* out: bits to add to the reply's flags2 */
	uint32_t max_stack_depth;	/* out: 0 = leave as it is */
};

struct session_io_hooks {
	/* The INIT reply (main thread, before any worker).  May be NULL. */
	void (*init_reply)(void *arg, struct session_io_init *init);
	/*
	 * Any reply: if this module sends it (a ring's request), send it, set
	 * *@ret to the bytes "written" and return true; else return false and
	 * the reply goes to /dev/fuse.  May be NULL.
	 */
	bool (*reply)(void *arg, const struct iovec *iov, int count, ssize_t *ret);
	void *arg;
};

/* Returns 0 or -ENOMEM; release with session_io_destroy(). */
int session_io_create(struct session_io **out);
void session_io_destroy(struct session_io *sio);

/*
 * Call @h (copied) from the hooks.  Before session_io_attach() only.
 * Returns 0 or -ENOSPC.  Registering is what makes the hooks installed.
 */
int session_io_register(struct session_io *sio, const struct session_io_hooks *h);

/*
 * Install the hooks on the mounted session @se (libfuse 3.14-3.16 build;
 * a no-op otherwise).  The session's userdata
 * must be the struct sfs whose ->sio is @sio.  Must run before the first request is read.  Returns 0 or -errno.
 */
int session_io_attach(struct session_io *sio, struct fuse_session *se);
/* True once session_io_attach() installed the hooks. */
bool session_io_hooked(const struct session_io *sio);
/* The kernel's INIT flags (| flags2 << 32) as the read hook saw them; 0 before. */
uint64_t session_io_kernel_flags(const struct session_io *sio);

/*
 * The kernel's INIT request as the read hook saw it (for a daemon that
 * takes the mount over, fuse/takeover.h): copies up to @len bytes to
 * @buf and returns its length, or 0 before INIT.
 */
size_t session_io_init_request(const struct session_io *sio, void *buf, size_t len);
/*
 * A daemon taking a mount over: the kernel sends no second INIT, so the
 * first read returns @req (an INIT the kernel sent the first daemon) and
 * its reply goes nowhere, which puts libfuse and the hooks in the state
 * the kernel negotiated.  Before session_io_attach(), which then hooks the
 * session even where no module registered.  0 or -EINVAL (too long).
 */
int session_io_replay_init(struct session_io *sio, const void *req, size_t len);

/*
 * The calling thread is about to hand libfuse request @unique (a ring's
 * worker): what the read hook notes for requests from /dev/fuse.
 */
void session_io_note_request(uint64_t unique, uint32_t opcode);
/* The calling thread's OPEN reply goes passthrough with backing id @id. */
void session_io_set_backing_id(int32_t id);

#endif
