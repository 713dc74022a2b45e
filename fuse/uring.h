/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uring: FUSE over io_uring (Linux >= 6.14) for the libfuse 3.14 build.
 *
 * With it, the kernel hands each request to a ring entry of the queue of
 * the CPU the requesting process runs on, and the daemon answers and
 * fetches the next request with one IORING_OP_URING_CMD
 * (COMMIT_AND_FETCH) instead of a writev(2) and a read(2) on /dev/fuse.
 * The worker threads of a queue are pinned to its CPU, so a reader's
 * request wakes a thread on the reader's own CPU rather than one sleeping
 * on another.  docs/fuse-uring.md has the design and the figures.
 *
 * libfuse 3.14 knows nothing of it: uring_create() registers with the
 * session I/O hooks (fuse/session_io.h), which add FUSE_OVER_IO_URING to
 * the INIT reply and send every reply whose request came from a ring back
 * to it; the workers here rebuild
 * each ring request into the contiguous buffer that
 * fuse_session_process_buf() parses, so every handler is unchanged.
 * FORGET and INTERRUPT still come through /dev/fuse (the kernel sends them
 * there), and so does everything before the rings are registered: the
 * libfuse loop keeps running beside the rings.
 *
 * Option uring=auto|on|off: auto uses it when the kernel offers it in INIT
 * (module parameter fuse.enable_uring=Y); on also sets that parameter
 * before mounting and fails the mount if io_uring cannot be used; off
 * never asks.  Builds against libfuse >= 3.17 (no session hook) log that
 * it is unavailable.
 *
 * Lifetime: uring_create() before the mount (with uring=on it enables the
 * kernel parameter; after session_io_create()), the INIT reply hook,
 * uring_start() once passthrough_handshake() has answered INIT (the kernel
 * takes ring commands only then) and before the no-open probe (the kernel
 * holds every request until each queue has an entry), uring_destroy() after the unmount (it stops
 * the threads; the unmount has already ended their ring entries).
 */
#ifndef STAGEFS_FUSE_URING_H
#define STAGEFS_FUSE_URING_H

#include "fs.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct uring;

/* Returns 0 or -errno; with uring=on, @err says why it cannot be had. */
int uring_create(struct sfs *fs, struct uring **out, char *err, size_t errlen);
void uring_destroy(struct uring *u);

/*
 * Start the queue threads and register their ring entries.  Returns 0
 * (also when io_uring is not to be used: the log says why) or, with
 * uring=on, -errno and @err.
 */
int uring_start(struct uring *u, struct fuse_session *se, char *err, size_t errlen);

bool uring_active(const struct uring *u);
uint64_t uring_requests(const struct uring *u);
/*
 * Times every entry of a queue held a request (the kernel then keeps the
 * queue's next requests to itself, unseen), summed over the queues.
 */
uint64_t uring_queue_full(const struct uring *u);
/* Ring entries registered (0 while the rings are not in use). */
unsigned uring_entries(const struct uring *u);

#endif
