/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pinned: a fixed pool of page-locked host buffers, the staging area between
 * NVMe (io_uring O_DIRECT reads) and GPU memory (cudaMemcpyAsync).
 *
 * Memory comes from cudaHostAlloc when stagefs was built with CUDA and a GPU
 * is usable at run time (the copy engine can then DMA straight from it);
 * otherwise from posix_memalign(4096) locked with mlock, or left unlocked
 * with a warning if RLIMIT_MEMLOCK refuses (the data path still works, only
 * slower and swappable).  When the caller passes an io_uring, the buffers
 * are also registered with it as fixed buffers, buffer index == pool index,
 * so reads can use IORING_OP_READ_FIXED; a refusal (memlock again) is a
 * warning, not an error: pinned_pool_stats() says what was obtained.
 *
 * Every buffer is page aligned and @bufsize is rounded up to a page, so any
 * buffer is a valid O_DIRECT target.  get/put are thread safe; everything
 * else belongs to the pool's owner.
 */
#ifndef STAGEFS_PINNED_H
#define STAGEFS_PINNED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct io_uring;
struct pinned_pool;

#define PINNED_ALIGN	4096

struct pinned_stats {
	uint64_t bytes;		/* total buffer memory held */
	unsigned nbuf;		/* buffers in the pool */
	size_t bufsize;		/* bytes per buffer (page multiple) */
	unsigned in_use;	/* buffers handed out by get and not yet put */
	bool locked;		/* page-locked (cudaHostAlloc or mlock) */
	bool cuda;		/* allocated with cudaHostAlloc */
	bool registered;	/* registered with the ring as fixed buffers */
};

/*
 * True if this build has CUDA and the runtime sees at least one GPU.  Any
 * runtime error (no driver: 35) means false.  The answer is computed once.
 */
bool pinned_cuda_available(void);

/*
 * Create a pool of @nbuf buffers of @bufsize bytes (rounded up to a page).
 * @ring may be NULL; if not, it must outlive the pool and the buffers stay
 * registered with it until pinned_pool_destroy().  Returns 0 and the pool in
 * *@out (release with pinned_pool_destroy), or -EINVAL/-ENOMEM.
 */
int pinned_pool_create(size_t nbuf, size_t bufsize, struct io_uring *ring,
		       struct pinned_pool **out);
/* Unregister, unlock and free everything.  NULL is a no-op. */
void pinned_pool_destroy(struct pinned_pool *p);
/*
 * In a child after fork(): drop the pool inherited from the parent without
 * touching what the two processes share: the io_uring it is registered
 * with (unregistering would unregister the parent's buffers) and CUDA
 * host memory (CUDA is unusable in a forked child; that mapping is left
 * alone).  Private copies (the malloc'ed block, bookkeeping) are freed.
 * NULL is a no-op.
 */
void pinned_pool_forget(struct pinned_pool *p);

/*
 * Take a free buffer: returns its index (0..nbuf-1) and its address in
 * *@buf, or -EBUSY if all are in use.  The buffer is the caller's until
 * pinned_pool_put(); the index is the fixed-buffer index for READ_FIXED.
 */
int pinned_pool_get(struct pinned_pool *p, void **buf);
/* Give buffer @idx back. */
void pinned_pool_put(struct pinned_pool *p, int idx);
/* Address of buffer @idx (valid until pinned_pool_destroy). */
void *pinned_pool_buf(const struct pinned_pool *p, int idx);
bool pinned_pool_registered(const struct pinned_pool *p);
void pinned_pool_stats(struct pinned_pool *p, struct pinned_stats *st);

#endif
