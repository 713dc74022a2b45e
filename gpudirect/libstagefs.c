/*
 * libstagefs: client reads into host or GPU memory.  See libstagefs.h for
 * the API contract and docs/gpudirect.md for the design and measurements.
 *
 * The pipeline (sfs_read_device):
 *
 *   file range --O_DIRECT io_uring reads--> pinned slot k --cudaMemcpyAsync-->
 *   GPU, with up to nbuf slots in flight: while slot k's bytes cross PCIe,
 *   slots k+1.. are being filled from disk.  A slot goes FREE -> READING ->
 *   COPYING -> FREE; a COPYING slot is free again once its CUDA event fires
 *   (host mode copies with memcpy, so it is free at once).  The range is
 *   widened to 4 KiB alignment for O_DIRECT and the edges are trimmed when
 *   copying out.
 *
 * Reads go through the mount.  If the mount refuses O_DIRECT (open or the
 * first read fails with EINVAL) the handle falls back to buffered reads on
 * the same pipeline and counts it in odirect_fallbacks.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <liburing.h>

#ifdef CONFIG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "log.h"
#include "util.h"
#include "gpudirect/libstagefs.h"
#include "gpudirect/pinned.h"

#define SFS_ALIGN		4096
#define DEFAULT_NBUF		4
#define DEFAULT_BUFSIZE		(1 * MiB)

/* ---- process-wide counters (atomics) ---- */

static struct sfs_client_stats g_stats;
static uint64_t g_unlocked_pools;

#define STAT_ADD(field, n)	__atomic_add_fetch(&g_stats.field, (n), __ATOMIC_RELAXED)
#define STAT_SUB(field, n)	__atomic_sub_fetch(&g_stats.field, (n), __ATOMIC_RELAXED)

/* ---- cuFile (GPUDirect Storage), loaded at run time ---- */

#ifdef CONFIG_HAVE_CUDA
/*
 * The few cufile.h declarations we use, restated so that the header is never
 * needed (it is not installed here, nor in Debian).  Layouts from cufile.h
 * (GDS 1.x): a two-int error struct and a descriptor with a type, an
 * fd/handle union and an fs_ops pointer.
 */
typedef struct { int err; int cu_err; } cufile_error_t;
typedef struct {
	int type;			/* CU_FILE_HANDLE_TYPE_OPAQUE_FD */
	union { int fd; void *handle; } handle;
	const void *fs_ops;
} cufile_descr_t;
typedef void *cufile_handle_t;
#define CUFILE_HANDLE_TYPE_OPAQUE_FD	1

static struct {
	bool ok;
	cufile_error_t (*driver_open)(void);
	cufile_error_t (*handle_register)(cufile_handle_t *, cufile_descr_t *);
	void (*handle_deregister)(cufile_handle_t);
	ssize_t (*read)(cufile_handle_t, void *, size_t, off_t, off_t);
} cufile;
static pthread_once_t cufile_once = PTHREAD_ONCE_INIT;

static void cufile_load(void)
{
	const char *env = getenv("STAGEFS_CUFILE");
	void *h;

	if ((env && !strcmp(env, "0")) || !pinned_cuda_available())
		return;
	h = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		log_debug("libstagefs: no cuFile (%s): pinned pipeline", dlerror());
		return;
	}
	*(void **)&cufile.driver_open = dlsym(h, "cuFileDriverOpen");
	*(void **)&cufile.handle_register = dlsym(h, "cuFileHandleRegister");
	*(void **)&cufile.handle_deregister = dlsym(h, "cuFileHandleDeregister");
	*(void **)&cufile.read = dlsym(h, "cuFileRead");
	if (!cufile.driver_open || !cufile.handle_register ||
	    !cufile.handle_deregister || !cufile.read) {
		log_warn("libstagefs: libcufile.so.0 lacks cuFile symbols; not using it");
		dlclose(h);
		return;
	}
	if (cufile.driver_open().err != 0) {
		log_warn("libstagefs: cuFileDriverOpen failed; not using cuFile");
		dlclose(h);
		return;
	}
	cufile.ok = true;	/* h stays open for the life of the process */
	__atomic_store_n(&g_stats.cufile_loaded, 1, __ATOMIC_RELAXED);
}
#endif

/* ---- handles ---- */

enum slot_state { SLOT_FREE, SLOT_READING, SLOT_COPYING };

struct slot {
	enum slot_state state;
	void *buf;
	int64_t foff;		/* file offset of the read (aligned) */
	size_t want, got;
	bool direct;		/* the read in flight went to the O_DIRECT fd */
};

struct sfs_file {
	pthread_mutex_t lock;	/* serialises every call on the handle */
	int fd;			/* buffered */
	int dfd;		/* O_DIRECT, or -1 */
	int64_t size;
	size_t nbuf, bufsize;
	/* the pipeline, set up by the first sfs_read_device */
	bool piped;
	struct io_uring ring;
	struct pinned_pool *pool;
	bool pool_locked;
	struct slot *slots;
#ifdef CONFIG_HAVE_CUDA
	int cuda_dev;		/* device of stream/events, -1 if none */
	cudaStream_t stream;
	cudaEvent_t *ev;
	bool cufile_tried;
	bool cufile_ok;
	cufile_handle_t cfh;
#endif
};

static size_t env_size(const char *name, size_t def, size_t lo, size_t hi)
{
	const char *s = getenv(name);
	uint64_t v;

	if (!s || !*s)
		return def;
	if (parse_size(s, &v) || v < lo || v > hi) {
		log_warn("libstagefs: ignoring %s=%s (want %zu..%zu)", name, s, lo, hi);
		return def;
	}
	return v;
}

int sfs_client_open(const char *path, struct sfs_file **out)
{
	struct sfs_file *f;
	const char *env;
	struct stat st;
	int err;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		err = -errno;
		goto out_free;
	}
	if (fstat(f->fd, &st) < 0) {
		err = -errno;
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		goto out_close;
	}
	f->size = st.st_size;
	/*
	 * TODO(fd passing): ask the daemon over the control socket for the
	 * cache file's fd (docs/control.md, when it has such a request) and
	 * read the NVMe file directly.  Until then, and as the fallback
	 * after, O_DIRECT through the mount.
	 */
	env = getenv("STAGEFS_ODIRECT");
	if (env && !strcmp(env, "0"))
		f->dfd = -1;	/* buffered on request (tests, odd mounts) */
	else
		f->dfd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	if (f->dfd < 0) {
		log_debug("libstagefs: %s: no O_DIRECT (%s): buffered reads",
			  path, strerror(errno));
		STAT_ADD(odirect_fallbacks, 1);
	}
	f->nbuf = env_size("STAGEFS_PINNED_BUFS", DEFAULT_NBUF, 2, 64);
	f->bufsize = env_size("STAGEFS_PINNED_BUF_SIZE", DEFAULT_BUFSIZE,
			      SFS_ALIGN, 256 * MiB);
	f->bufsize = DIV_ROUND_UP(f->bufsize, SFS_ALIGN) * SFS_ALIGN;
#ifdef CONFIG_HAVE_CUDA
	f->cuda_dev = -1;
#endif
	pthread_mutex_init(&f->lock, NULL);
	*out = f;
	return 0;

out_close:
	close(f->fd);
out_free:
	free(f);
	return err;
}

#ifdef CONFIG_HAVE_CUDA
static void cuda_teardown(struct sfs_file *f)
{
	int prev = 0;

	if (f->cuda_dev < 0)
		return;
	cudaGetDevice(&prev);
	cudaSetDevice(f->cuda_dev);
	cudaStreamSynchronize(f->stream);
	for (size_t i = 0; i < f->nbuf; i++)
		cudaEventDestroy(f->ev[i]);
	cudaStreamDestroy(f->stream);
	cudaSetDevice(prev);
	f->cuda_dev = -1;
}

/* Stream and per-slot events on @device (current device already set). */
static int cuda_setup(struct sfs_file *f, int device)
{
	size_t i;

	if (f->cuda_dev == device)
		return 0;
	cuda_teardown(f);
	if (!f->ev) {
		f->ev = calloc(f->nbuf, sizeof(*f->ev));
		if (!f->ev)
			return -ENOMEM;
	}
	if (cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking) != cudaSuccess)
		return -EIO;
	for (i = 0; i < f->nbuf; i++) {
		if (cudaEventCreateWithFlags(&f->ev[i], cudaEventDisableTiming) != cudaSuccess)
			goto out_events;
	}
	f->cuda_dev = device;
	return 0;

out_events:
	while (i-- > 0)
		cudaEventDestroy(f->ev[i]);
	cudaStreamDestroy(f->stream);
	return -EIO;
}
#endif

void sfs_client_close(struct sfs_file *f)
{
	if (!f)
		return;
#ifdef CONFIG_HAVE_CUDA
	cuda_teardown(f);
	free(f->ev);
	if (f->cufile_ok)
		cufile.handle_deregister(f->cfh);
#endif
	if (f->piped) {
		struct pinned_stats st;

		pinned_pool_stats(f->pool, &st);
		STAT_SUB(pinned_bytes, st.bytes);
		if (!f->pool_locked)
			__atomic_sub_fetch(&g_unlocked_pools, 1, __ATOMIC_RELAXED);
		pinned_pool_destroy(f->pool);	/* unregisters: before the ring goes */
		io_uring_queue_exit(&f->ring);
		free(f->slots);
	}
	if (f->dfd >= 0)
		close(f->dfd);
	close(f->fd);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

int64_t sfs_client_size(const struct sfs_file *f)
{
	return f->size;
}

/* Clamp [off, off+len) to the file; returns the new length or -EINVAL. */
static ssize_t clamp(const struct sfs_file *f, int64_t off, size_t len)
{
	if (off < 0)
		return -EINVAL;
	if (off >= f->size)
		return 0;
	return (ssize_t)MIN((uint64_t)len, (uint64_t)(f->size - off));
}

ssize_t sfs_read_host(struct sfs_file *f, int64_t off, size_t len, void *dst)
{
	ssize_t n = clamp(f, off, len);

	if (n <= 0)
		return n;
	n = pread_full(f->fd, dst, (size_t)n, off);
	if (n > 0)
		STAT_ADD(host_read_bytes, (uint64_t)n);
	return n;
}

static int pipe_setup(struct sfs_file *f)
{
	struct pinned_stats st;
	int err;

	err = io_uring_queue_init(f->nbuf * 2, &f->ring, 0);
	if (err)
		return err;
	err = pinned_pool_create(f->nbuf, f->bufsize, &f->ring, &f->pool);
	if (err)
		goto out_ring;
	f->slots = calloc(f->nbuf, sizeof(*f->slots));
	if (!f->slots) {
		err = -ENOMEM;
		goto out_pool;
	}
	pinned_pool_stats(f->pool, &st);
	f->pool_locked = st.locked;
	STAT_ADD(pinned_bytes, st.bytes);
	if (!st.locked)
		__atomic_add_fetch(&g_unlocked_pools, 1, __ATOMIC_RELAXED);
	f->piped = true;
	return 0;

out_pool:
	pinned_pool_destroy(f->pool);
out_ring:
	io_uring_queue_exit(&f->ring);
	return err;
}

/* Queue the read of the rest of slot @idx (from s->got on). */
static void queue_read(struct sfs_file *f, int idx)
{
	struct slot *s = &f->slots[idx];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
	int fd = f->dfd >= 0 ? f->dfd : f->fd;
	char *buf = (char *)s->buf + s->got;
	unsigned n = (unsigned)(s->want - s->got);
	off_t off = s->foff + (off_t)s->got;

	/* The ring has 2 * nbuf entries and at most nbuf reads in flight. */
	if (pinned_pool_registered(f->pool))
		io_uring_prep_read_fixed(sqe, fd, buf, n, off, idx);
	else
		io_uring_prep_read(sqe, fd, buf, n, off);
	io_uring_sqe_set_data64(sqe, (uint64_t)idx);
	s->direct = f->dfd >= 0;
	if (s->direct)
		STAT_ADD(direct_reads, 1);
	else
		STAT_ADD(buffered_reads, 1);
}

/* Hand slot @idx's useful bytes to the destination; frees host slots. */
static int deliver(struct sfs_file *f, int idx, int64_t off, int64_t end,
		   char *dst, int device)
{
	struct slot *s = &f->slots[idx];
	int64_t lo = MAX(s->foff, off);
	int64_t hi = MIN(s->foff + (int64_t)s->got, end);
	const char *src = (const char *)s->buf + (lo - s->foff);
	size_t n = hi > lo ? (size_t)(hi - lo) : 0;

	if (device < 0) {
		if (n)
			memcpy(dst + (lo - off), src, n);
		s->state = SLOT_FREE;
		pinned_pool_put(f->pool, idx);
		return 0;
	}
#ifdef CONFIG_HAVE_CUDA
	if (n && cudaMemcpyAsync(dst + (lo - off), src, n, cudaMemcpyHostToDevice,
				 f->stream) != cudaSuccess)
		return -EIO;
	if (cudaEventRecord(f->ev[idx], f->stream) != cudaSuccess)
		return -EIO;
	s->state = SLOT_COPYING;
	return 0;
#else
	return -ENODEV;
#endif
}

/* Wait for (@block) or poll COPYING slots and free those done. */
static int retire_copies(struct sfs_file *f, bool block)
{
#ifdef CONFIG_HAVE_CUDA
	for (size_t i = 0; i < f->nbuf; i++) {
		struct slot *s = &f->slots[i];
		cudaError_t e;

		if (s->state != SLOT_COPYING)
			continue;
		e = block ? cudaEventSynchronize(f->ev[i]) : cudaEventQuery(f->ev[i]);
		if (e == cudaErrorNotReady)
			continue;
		s->state = SLOT_FREE;
		pinned_pool_put(f->pool, (int)i);
		if (e != cudaSuccess)
			return -EIO;
		if (block)
			return 0;	/* one is enough to make progress */
	}
#endif
	return 0;
}

/*
 * The pipeline over [off, off+len), already clamped to the file.  Returns
 * @len or -errno; on error it still drains every read and copy in flight, so
 * the slots are all FREE when it returns.
 */
static ssize_t pipe_read(struct sfs_file *f, int64_t off, size_t len,
			 char *dst, int device)
{
	const int64_t end = off + (int64_t)len;
	const int64_t a1 = MIN(DIV_ROUND_UP(end, SFS_ALIGN) * SFS_ALIGN,
			       DIV_ROUND_UP(f->size, SFS_ALIGN) * SFS_ALIGN);
	int64_t next = off & ~(int64_t)(SFS_ALIGN - 1);
	unsigned reading = 0, copying = 0;
	int err = 0;

	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned queued = 0;
		int r;

		if (copying) {
			r = retire_copies(f, false);
			if (r && !err)
				err = r;
		}
		copying = 0;
		for (size_t i = 0; i < f->nbuf; i++)
			copying += f->slots[i].state == SLOT_COPYING;

		while (!err && next < a1) {
			void *buf;
			int idx = pinned_pool_get(f->pool, &buf);
			struct slot *s;

			if (idx < 0)
				break;
			s = &f->slots[idx];
			s->state = SLOT_READING;
			s->buf = buf;
			s->foff = next;
			s->want = (size_t)MIN((int64_t)f->bufsize, a1 - next);
			s->got = 0;
			queue_read(f, idx);
			next += (int64_t)s->want;
			queued++;
			reading++;
		}
		if (queued) {
			r = io_uring_submit(&f->ring);
			if (r < 0) {
				/* nothing was queued to the kernel: undo */
				for (size_t i = 0; i < f->nbuf; i++) {
					if (f->slots[i].state == SLOT_READING) {
						f->slots[i].state = SLOT_FREE;
						pinned_pool_put(f->pool, (int)i);
					}
				}
				reading = 0;
				if (!err)
					err = r;
			}
		}

		if (reading) {
			struct slot *s;
			int idx, res;

			r = io_uring_wait_cqe(&f->ring, &cqe);
			if (r == -EINTR)
				continue;
			if (r < 0)
				return r;	/* the ring is unusable; cannot drain */
			idx = (int)io_uring_cqe_get_data64(cqe);
			res = cqe->res;
			io_uring_cqe_seen(&f->ring, cqe);
			s = &f->slots[idx];

			if (res == -EINVAL && s->direct) {
				/* the mount refused O_DIRECT: buffered from now on */
				if (f->dfd >= 0) {
					log_debug("libstagefs: O_DIRECT read refused: buffered reads");
					close(f->dfd);
					f->dfd = -1;
					STAT_ADD(odirect_fallbacks, 1);
				}
			} else if (res == -EINTR || res == -EAGAIN) {
				/* retry as is */
			} else if (res < 0 || (res == 0 && s->foff + (int64_t)s->got < f->size)) {
				/* an error, or the file shrank: it is not immutable */
				if (!err)
					err = res < 0 ? res : -EIO;
				s->state = SLOT_FREE;
				pinned_pool_put(f->pool, idx);
				reading--;
				continue;
			} else {
				s->got += (size_t)res;
			}
			if (!err && s->got < s->want && s->foff + (int64_t)s->got < f->size &&
			    res != 0) {
				queue_read(f, idx);
				r = io_uring_submit(&f->ring);
				if (r >= 0)
					continue;
				err = r;
			}
			reading--;
			if (err) {
				s->state = SLOT_FREE;
				pinned_pool_put(f->pool, idx);
				continue;
			}
			r = deliver(f, idx, off, end, dst, device);
			if (r) {
				err = r;
				s->state = SLOT_FREE;
				pinned_pool_put(f->pool, idx);
			}
			copying += s->state == SLOT_COPYING;
		} else if (copying) {
			r = retire_copies(f, true);
			if (r && !err)
				err = r;
		} else if (next >= a1 || err) {
			break;
		}
	}
	return err ? err : (ssize_t)len;
}

#ifdef CONFIG_HAVE_CUDA
/* cuFile path: returns bytes, or < 0 to fall back to the pipeline. */
static ssize_t cufile_read(struct sfs_file *f, int64_t off, size_t len,
			   void *dev_ptr)
{
	ssize_t n;

	pthread_once(&cufile_once, cufile_load);
	if (!cufile.ok || f->dfd < 0)
		return -ENOTSUP;
	if (!f->cufile_tried) {
		cufile_descr_t d = { .type = CUFILE_HANDLE_TYPE_OPAQUE_FD };

		f->cufile_tried = true;
		d.handle.fd = f->dfd;
		f->cufile_ok = cufile.handle_register(&f->cfh, &d).err == 0;
		if (!f->cufile_ok)
			log_warn("libstagefs: cuFileHandleRegister failed: pinned pipeline");
	}
	if (!f->cufile_ok)
		return -ENOTSUP;
	n = cufile.read(f->cfh, dev_ptr, len, off, 0);
	if (n != (ssize_t)len) {
		log_warn("libstagefs: cuFileRead returned %zd for %zu bytes: pinned pipeline",
			 n, len);
		return -EIO;
	}
	STAT_ADD(cufile_bytes, (uint64_t)n);
	return n;
}
#endif

ssize_t sfs_read_device(struct sfs_file *f, int64_t off, size_t len,
			void *dev_ptr, int device)
{
	ssize_t n = clamp(f, off, len);
	int err;

	if (device < SFS_HOST_DEVICE)
		return -EINVAL;
#ifdef CONFIG_HAVE_CUDA
	if (device >= 0 && !pinned_cuda_available())
		return -ENODEV;
#else
	if (device >= 0)
		return -ENODEV;
#endif
	if (n <= 0)
		return n;

	pthread_mutex_lock(&f->lock);
	if (!f->piped) {
		err = pipe_setup(f);
		if (err) {
			n = err;
			goto out_unlock;
		}
	}
#ifdef CONFIG_HAVE_CUDA
	if (device >= 0) {
		int prev = 0;

		cudaGetDevice(&prev);
		if (cudaSetDevice(device) != cudaSuccess) {
			n = -ENODEV;
			goto out_unlock;
		}
		ssize_t r = cufile_read(f, off, (size_t)n, dev_ptr);

		if (r < 0) {
			err = cuda_setup(f, device);
			r = err ? err : pipe_read(f, off, (size_t)n, dev_ptr, device);
			if (r >= 0 && cudaStreamSynchronize(f->stream) != cudaSuccess)
				r = -EIO;
		}
		cudaSetDevice(prev);
		n = r;
		if (n > 0 && device < SFS_MAX_DEVICES)
			STAT_ADD(device_bytes[device], (uint64_t)n);
		goto out_unlock;
	}
#endif
	n = pipe_read(f, off, (size_t)n, dev_ptr, SFS_HOST_DEVICE);
	if (n > 0)
		STAT_ADD(pinned_host_bytes, (uint64_t)n);
out_unlock:
	pthread_mutex_unlock(&f->lock);
	return n;
}

void sfs_client_stats(struct sfs_client_stats *st)
{
	uint64_t *dst = (uint64_t *)st;
	const uint64_t *src = (const uint64_t *)&g_stats;
	size_t nwords = offsetof(struct sfs_client_stats, pinned_locked) / sizeof(uint64_t);

	for (size_t i = 0; i < nwords; i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	st->pinned_locked = __atomic_load_n(&g_unlocked_pools, __ATOMIC_RELAXED) == 0;
	st->cuda_available = pinned_cuda_available();
	st->cufile_loaded = __atomic_load_n(&g_stats.cufile_loaded, __ATOMIC_RELAXED);
}
