/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pinned: page-locked host buffer pool.  See pinned.h for the contract.
 *
 * Allocation order: cudaHostAlloc (CUDA build, GPU present) -> one
 * posix_memalign block + mlock -> the same block unlocked.  One contiguous
 * block keeps mlock to a single call and makes the memory use exact.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include <liburing.h>

#ifdef CONFIG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "log.h"
#include "util.h"
#include "gpudirect/pinned.h"

struct pinned_pool {
	void *base;
	size_t bufsize;
	unsigned nbuf;
	bool locked, cuda, registered;
	struct io_uring *ring;
	pthread_mutex_t lock;
	unsigned in_use;	/* protected by lock */
	unsigned char *busy;	/* protected by lock; one flag per buffer */
};

#ifdef CONFIG_HAVE_CUDA
static bool cuda_avail;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

static void cuda_probe(void)
{
	int n = 0;	/* left unwritten when there is no driver */
	cudaError_t e = cudaGetDeviceCount(&n);

	cuda_avail = e == cudaSuccess && n > 0;
	if (!cuda_avail)
		log_debug("pinned: no usable GPU (cuda error %d, %d devices): host memory",
			  (int)e, n);
}
#endif

bool pinned_cuda_available(void)
{
#ifdef CONFIG_HAVE_CUDA
	pthread_once(&cuda_once, cuda_probe);
	return cuda_avail;
#else
	return false;
#endif
}

int pinned_pool_create(size_t nbuf, size_t bufsize, struct io_uring *ring,
		       struct pinned_pool **out)
{
	struct pinned_pool *p;
	size_t total;
	int err;

	if (!nbuf || !bufsize || nbuf > 1024)
		return -EINVAL;
	bufsize = DIV_ROUND_UP(bufsize, PINNED_ALIGN) * PINNED_ALIGN;
	if (bufsize > SIZE_MAX / nbuf)
		return -EINVAL;
	total = nbuf * bufsize;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->busy = calloc(nbuf, 1);
	if (!p->busy) {
		err = -ENOMEM;
		goto out_free_pool;
	}
	p->nbuf = nbuf;
	p->bufsize = bufsize;
	pthread_mutex_init(&p->lock, NULL);

#ifdef CONFIG_HAVE_CUDA
	if (pinned_cuda_available()) {
		cudaError_t e = cudaHostAlloc(&p->base, total, cudaHostAllocPortable);

		if (e == cudaSuccess) {
			p->cuda = p->locked = true;
		} else {
			log_warn("pinned: cudaHostAlloc(%zu) failed (cuda error %d); using mlock",
				 total, (int)e);
			p->base = NULL;
		}
	}
#endif
	if (!p->base) {
		err = posix_memalign(&p->base, PINNED_ALIGN, total);
		if (err) {
			p->base = NULL;
			err = -err;
			goto out_free_busy;
		}
		if (mlock(p->base, total) == 0) {
			p->locked = true;
		} else {
			err = errno;
			log_warn("pinned: mlock of %zu bytes failed (%s); buffers are not locked "
				 "(raise RLIMIT_MEMLOCK / ulimit -l)", total, strerror(err));
		}
	}

	if (ring) {
		struct iovec *iov = calloc(nbuf, sizeof(*iov));

		if (!iov) {
			err = -ENOMEM;
			goto out_free_base;
		}
		for (size_t i = 0; i < nbuf; i++) {
			iov[i].iov_base = (char *)p->base + i * bufsize;
			iov[i].iov_len = bufsize;
		}
		err = io_uring_register_buffers(ring, iov, nbuf);
		free(iov);
		if (err == 0) {
			p->registered = true;
			p->ring = ring;
		} else {
			log_warn("pinned: io_uring_register_buffers(%zu x %zu) failed (%s); "
				 "plain reads instead of READ_FIXED", nbuf, bufsize, strerror(-err));
		}
	}
	*out = p;
	return 0;

out_free_base:
#ifdef CONFIG_HAVE_CUDA
	if (p->cuda)
		cudaFreeHost(p->base);
	else
#endif
		free(p->base);
out_free_busy:
	free(p->busy);
out_free_pool:
	free(p);
	return err;
}

void pinned_pool_destroy(struct pinned_pool *p)
{
	if (!p)
		return;
	if (p->registered)
		io_uring_unregister_buffers(p->ring);
#ifdef CONFIG_HAVE_CUDA
	if (p->cuda) {
		cudaFreeHost(p->base);
	} else
#endif
	{
		if (p->locked)
			munlock(p->base, (size_t)p->nbuf * p->bufsize);
		free(p->base);
	}
	pthread_mutex_destroy(&p->lock);
	free(p->busy);
	free(p);
}

void pinned_pool_forget(struct pinned_pool *p)
{
	if (!p)
		return;
	if (!p->cuda)
		free(p->base);	/* the child's copy; mlock is not inherited */
	free(p->busy);
	free(p);
}

int pinned_pool_get(struct pinned_pool *p, void **buf)
{
	int idx = -EBUSY;

	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < p->nbuf; i++) {
		if (!p->busy[i]) {
			p->busy[i] = 1;
			p->in_use++;
			idx = (int)i;
			break;
		}
	}
	pthread_mutex_unlock(&p->lock);
	if (idx >= 0)
		*buf = pinned_pool_buf(p, idx);
	return idx;
}

void pinned_pool_put(struct pinned_pool *p, int idx)
{
	if (idx < 0 || (unsigned)idx >= p->nbuf)
		return;
	pthread_mutex_lock(&p->lock);
	if (p->busy[idx]) {
		p->busy[idx] = 0;
		p->in_use--;
	}
	pthread_mutex_unlock(&p->lock);
}

void *pinned_pool_buf(const struct pinned_pool *p, int idx)
{
	return (char *)p->base + (size_t)idx * p->bufsize;
}

bool pinned_pool_registered(const struct pinned_pool *p)
{
	return p->registered;
}

void pinned_pool_stats(struct pinned_pool *p, struct pinned_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->bytes = (uint64_t)p->nbuf * p->bufsize;
	st->nbuf = p->nbuf;
	st->bufsize = p->bufsize;
	st->locked = p->locked;
	st->cuda = p->cuda;
	st->registered = p->registered;
	pthread_mutex_lock(&p->lock);
	st->in_use = p->in_use;
	pthread_mutex_unlock(&p->lock);
}
