/* SPDX-License-Identifier: Apache-2.0 */
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
 * The source of a read is chosen when it starts: the cache file the daemon
 * handed over at open (f->cfd, O_DIRECT set with fcntl where the cache's
 * filesystem allows it), else the file through the mount, O_DIRECT (a
 * second open, made on first need) or buffered.  A source that refuses
 * O_DIRECT (EINVAL on the first read) is read buffered from then on, and
 * counted in odirect_fallbacks.
 *
 * The daemon's side (libstagefs_ctl.[ch]): the cache file comes with a pin,
 * held on one of the process's control connections to that mount.  While
 * ctlc_conn_alive() says the pin holds, reads go to the cache file; once
 * it does not (the daemon stopped), the handle closes it and reads through
 * the mount.  What a handle delivers is counted per mount for the daemon's
 * feed rate (ctlc_mount_add) and reported from the read path at most once
 * a second, when a process's last file of a mount is closed, and at exit.
 *
 * Fork: a handle remembers its process; in a child it lets go of what it
 * shares with the parent (forked_reset) before doing anything else.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <liburing.h>

#ifdef CONFIG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "ctlproto.h"
#include "log.h"
#include "util.h"
#include "gpudirect/libstagefs.h"
#include "gpudirect/libstagefs_ctl.h"
#include "gpudirect/pinned.h"

#define SFS_ALIGN		4096
#define DEFAULT_NBUF		4
#define DEFAULT_BUFSIZE		(1 * MiB)

/* ---- process-wide counters (atomics) ---- */

static struct sfs_client_stats g_stats;
static uint64_t g_unlocked_pools;

#define STAT_ADD(field, n)	__atomic_add_fetch(&g_stats.field, (n), __ATOMIC_RELAXED)
#define STAT_SUB(field, n)	__atomic_sub_fetch(&g_stats.field, (n), __ATOMIC_RELAXED)
#define STAT_SET(field, v)	__atomic_store_n(&g_stats.field, (v), __ATOMIC_RELAXED)

static bool env_off(const char *name)
{
	const char *v = getenv(name);

	return v && !strcmp(v, "0");
}

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

/*
 * Whether cuFile can move bytes from a disk to the GPU here.  It can
 * through the nvidia-fs module; without it, cuFile's compatibility mode
 * reads through its own pinned bounce buffers as the pipeline does, and
 * its driver's start cost a process about half a second on the lent H200
 * machine (docs/gpudirect.md).  STAGEFS_CUFILE=1 loads it anyway (a
 * kernel with PCI P2PDMA in place of nvidia-fs, or to compare), 0 never.
 */
static bool cufile_wanted(void)
{
	const char *env = getenv("STAGEFS_CUFILE");
	struct stat st;

	if (env && !strcmp(env, "0"))
		return false;
	if (env && !strcmp(env, "1"))
		return true;
	if (stat("/sys/module/nvidia_fs", &st) == 0)
		return true;
	log_debug("libstagefs: no nvidia-fs module: cuFile not loaded (STAGEFS_CUFILE=1 loads it)");
	return false;
}

/*
 * Filesystems on which cuFileHandleRegister failed once: the process does
 * not ask again for another file there (each refusal costs, and would log).
 */
#define CUFILE_REFUSED_MAX	8
static struct {
	pthread_mutex_t lock;
	unsigned n;
	dev_t dev[CUFILE_REFUSED_MAX];
} cufile_refused = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Was @dev noted as refused?  With @note, it is from now on. */
static bool cufile_refused_had(dev_t dev, bool note)
{
	bool found = false;

	pthread_mutex_lock(&cufile_refused.lock);
	for (unsigned i = 0; i < cufile_refused.n && !found; i++)
		found = cufile_refused.dev[i] == dev;
	if (note && !found && cufile_refused.n < CUFILE_REFUSED_MAX)
		cufile_refused.dev[cufile_refused.n++] = dev;
	pthread_mutex_unlock(&cufile_refused.lock);
	return found;
}

static void cufile_load(void)
{
	void *h;

	if (!pinned_cuda_available() || !cufile_wanted())
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
	bool direct;		/* the read in flight went to an O_DIRECT source */
};

struct sfs_file {
	pthread_mutex_t lock;	/* serialises every call on the handle */
	pid_t pid;		/* the process that opened it (see forked_reset) */
	char *path;		/* absolute, for the open through the mount */
	int fd;			/* through the mount, buffered; -1: not open (yet) */
	int dfd;		/* through the mount, O_DIRECT; -1: none (yet) */
	bool dfd_tried;
	int cfd;		/* the cache file the daemon handed over, or -1 */
	bool cfd_direct;	/* O_DIRECT is set on cfd */
	struct ctlc_mount *mount;	/* its daemon, for reports; NULL outside a mount */
	struct ctlc_conn *conn;	/* where cfd's pin is (a reference), or NULL */
	uint64_t pin;		/* the pin's handle on conn */
	bool delivered;		/* a byte came out of cfd: the file was read */
	uint64_t cfd_counted;	/* bytes of cfd counted to report (<= size) */
	uint64_t cfd_gpu_counted;	/* ... of them to GPUs (<= size) */
	int64_t size;
	bool sized;		/* size is final (what sfs_client_size says) */
	size_t nbuf, bufsize;
	int rfd;		/* the source of the read in progress */
	bool rdirect;		/* ... is O_DIRECT */
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
	int cufile_fd;		/* the descriptor cfh was registered for */
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

/*
 * Ask the daemon of the mount holding @path for its cache file.  On
 * success f->cfd, f->conn and f->pin are set; otherwise the handle reads
 * through the mount.  f->mount is set whenever @path is in a stagefs mount.
 */
static void cache_fd_setup(struct sfs_file *f, const char *path, const struct stat *st)
{
	char root[PATH_MAX], rel[PATH_MAX], why[512] = "";
	int r, fl;

	r = ctl_find_mount(path, root, sizeof(root), rel, sizeof(rel));
	if (!r) {
		f->mount = ctlc_mount_get(root);
		r = f->mount ? ctlc_mount_socket(f->mount) : -ENOMEM;
		if (r == -ENOENT)
			snprintf(why, sizeof(why), "the mount has no control socket");
	} else if (r == -ENOENT) {
		snprintf(why, sizeof(why), "not in a stagefs mount");
	}
	if (!r)
		r = ctlc_cache_fd(f->mount, rel, st, &f->cfd, &f->conn, &f->pin, why,
				 sizeof(why));
	if (r) {
		STAT_ADD(fd_fallbacks, 1);
		STAT_SET(fd_last_error, -r);
		log_debug("libstagefs: %s: reading through the mount: %s", path,
			  why[0] ? why : strerror(-r));
		return;
	}
	STAT_ADD(fd_opens, 1);
	if (env_off("STAGEFS_ODIRECT"))
		return;
	fl = fcntl(f->cfd, F_GETFL);
	if (fl >= 0 && fcntl(f->cfd, F_SETFL, fl | O_DIRECT) == 0) {
		f->cfd_direct = true;
	} else {
		log_debug("libstagefs: %s: the cache file takes no O_DIRECT (%s): buffered reads",
			  path, strerror(errno));
		STAT_ADD(odirect_fallbacks, 1);
	}
}

/*
 * @path made absolute against the current directory, nothing else: the
 * same file opens later whatever the process's directory is then.
 */
static int abs_path(const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX];

	if (path[0] == '/') {
		if (strlen(path) >= len)
			return -ENAMETOOLONG;
		strcpy(out, path);
		return 0;
	}
	if (!getcwd(cwd, sizeof(cwd)))
		return -errno;
	if ((size_t)snprintf(out, len, "%s/%s", cwd, path) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * Open the file through the mount, once: at open when there is no cache
 * file, else on first need (sfs_read_host, or the daemon went away).
 * 0 or -errno.  f->lock held, or the handle not published yet.
 */
static int mount_open(struct sfs_file *f)
{
	struct stat st;
	int fd, err;

	if (f->fd >= 0)
		return 0;
	fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		goto out_close;
	}
	if (f->sized && st.st_size != f->size) {
		/* sfs_client_size() said otherwise: not the file we opened */
		err = -ESTALE;
		goto out_close;
	}
	f->size = st.st_size;
	f->sized = true;
	__atomic_store_n(&f->fd, fd, __ATOMIC_RELEASE);
	return 0;

out_close:
	close(fd);
	return err;
}

int sfs_client_open(const char *path, struct sfs_file **out)
{
	struct sfs_file *f;
	struct stat st;
	int err;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = f->cfd = f->dfd = -1;
	f->pid = getpid();
	f->path = malloc(PATH_MAX);
	if (!f->path) {
		err = -ENOMEM;
		goto out_free;
	}
	err = abs_path(path, f->path, PATH_MAX);
	if (err)
		goto out_free;
	f->nbuf = env_size("STAGEFS_PINNED_BUFS", DEFAULT_NBUF, 2, 64);
	f->bufsize = env_size("STAGEFS_PINNED_BUF_SIZE", DEFAULT_BUFSIZE,
			      SFS_ALIGN, 256 * MiB);
	f->bufsize = DIV_ROUND_UP(f->bufsize, SFS_ALIGN) * SFS_ALIGN;
#ifdef CONFIG_HAVE_CUDA
	f->cuda_dev = -1;
	f->cufile_fd = -1;
#endif
	/*
	 * The cache file first: the daemon checks access as the mount would,
	 * and a file read that way is never opened through the mount.  An
	 * empty file has nothing to read, so no cache file to ask for.
	 */
	if (!env_off("STAGEFS_FD_PASSING")) {
		if (stat(f->path, &st) < 0) {
			err = -errno;
			goto out_free;
		}
		if (S_ISREG(st.st_mode) && st.st_size > 0) {
			f->size = st.st_size;
			cache_fd_setup(f, f->path, &st);
			f->sized = f->cfd >= 0;
		}
	}
	if (f->cfd < 0) {
		err = mount_open(f);
		if (err)
			goto out_free;
	}
	if (f->mount) {
		ctlc_mount_hold(f->mount);
	}
	pthread_mutex_init(&f->lock, NULL);
	*out = f;
	return 0;

out_free:
	free(f->path);
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

static void cufile_drop(struct sfs_file *f)
{
	if (f->cufile_ok)
		cufile.handle_deregister(f->cfh);
	f->cufile_ok = f->cufile_tried = false;
	f->cufile_fd = -1;
}
#endif

/* The pipeline's pool, ring and slots go (and their memory from the counts). */
static void pipe_teardown(struct sfs_file *f, bool forked)
{
	struct pinned_stats st;

	if (!f->piped)
		return;
	pinned_pool_stats(f->pool, &st);
	STAT_SUB(pinned_bytes, st.bytes);
	if (!f->pool_locked)
		__atomic_sub_fetch(&g_unlocked_pools, 1, __ATOMIC_RELAXED);
	if (forked)
		pinned_pool_forget(f->pool);	/* the ring's buffers are the parent's too */
	else
		pinned_pool_destroy(f->pool);	/* unregisters: before the ring goes */
	io_uring_queue_exit(&f->ring);
	free(f->slots);
	f->slots = NULL;
	f->piped = false;
}

/* Stop reading the cache file: its pin is gone, or is going. */
static void cache_fd_drop(struct sfs_file *f)
{
	if (f->cfd < 0)
		return;
#ifdef CONFIG_HAVE_CUDA
	if (f->cufile_fd == f->cfd)
		cufile_drop(f);
#endif
	close(f->cfd);
	f->cfd = -1;
	if (f->conn && f->pid == getpid())
		ctlc_drop_pin(f->conn, f->pin);
	f->conn = NULL;
}

/*
 * The first call in a child after fork(): let go of what the handle shares
 * with the parent without touching it: the pin (the parent's connection's),
 * the ring and its registered buffers, CUDA objects (unusable in a forked
 * child; left as they are).  The child then reads through the mount with
 * a pipeline of its own.
 */
static void forked_reset(struct sfs_file *f)
{
	f->conn = NULL;		/* the parent's; mount_reap drops our copy of its socket */
	if (f->cfd >= 0) {
		close(f->cfd);
		f->cfd = -1;
		STAT_ADD(fd_lost, 1);
	}
	pipe_teardown(f, true);
#ifdef CONFIG_HAVE_CUDA
	f->cuda_dev = -1;
	f->cufile_ok = f->cufile_tried = false;
	f->cufile_fd = -1;
#endif
	f->pid = getpid();
}

void sfs_client_close(struct sfs_file *f)
{
	if (!f)
		return;
	if (f->pid != getpid())
		forked_reset(f);
	cache_fd_drop(f);
#ifdef CONFIG_HAVE_CUDA
	cuda_teardown(f);
	free(f->ev);
	cufile_drop(f);
#endif
	pipe_teardown(f, false);
	if (f->dfd >= 0)
		close(f->dfd);
	if (f->fd >= 0)
		close(f->fd);
	if (f->mount) {
		/* a process's last file of a mount closed: report now */
		ctlc_mount_report(f->mount, ctlc_mount_unhold(f->mount));
	}
	pthread_mutex_destroy(&f->lock);
	free(f->path);
	free(f);
}

int64_t sfs_client_size(const struct sfs_file *f)
{
	return f->size;
}

int sfs_client_via(const struct sfs_file *f)
{
	return f->cfd >= 0 ? SFS_VIA_CACHE_FD : SFS_VIA_MOUNT;
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
	int fd = __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE), err;

	if (n <= 0)
		return n;
	if (fd < 0) {
		/* read through the cache file so far: open the mount now */
		pthread_mutex_lock(&f->lock);
		err = mount_open(f);
		fd = f->fd;
		pthread_mutex_unlock(&f->lock);
		if (err)
			return err;
	}
	n = pread_full(fd, dst, (size_t)n, off);
	if (n > 0)
		STAT_ADD(host_read_bytes, (uint64_t)n);
	return n;
}

/*
 * Pick the source of the next pipeline read: the cache file while its pin
 * holds, else the mount (O_DIRECT unless refused or turned off).  0, or
 * -errno when the mount cannot be opened.
 */
static int choose_source(struct sfs_file *f)
{
	int err;

	if (f->cfd >= 0 && !ctlc_conn_alive(f->conn)) {
		log_warn("libstagefs: the stagefs daemon dropped its pins (stopped?): "
			 "reading through the mount");
		STAT_ADD(fd_lost, 1);
		cache_fd_drop(f);
	}
	if (f->cfd >= 0) {
		f->rfd = f->cfd;
		f->rdirect = f->cfd_direct;
		return 0;
	}
	err = mount_open(f);
	if (err)
		return err;
	if (!f->dfd_tried) {
		char self[64];

		f->dfd_tried = true;
		if (env_off("STAGEFS_ODIRECT")) {
			STAT_ADD(odirect_fallbacks, 1);
		} else {
			/* a second open of the same file, whatever its path is now */
			snprintf(self, sizeof(self), "/proc/self/fd/%d", f->fd);
			f->dfd = open(self, O_RDONLY | O_CLOEXEC | O_DIRECT);
			if (f->dfd < 0) {
				log_debug("libstagefs: no O_DIRECT through the mount (%s): "
					  "buffered reads", strerror(errno));
				STAT_ADD(odirect_fallbacks, 1);
			}
		}
	}
	f->rfd = f->dfd >= 0 ? f->dfd : f->fd;
	f->rdirect = f->dfd >= 0;
	return 0;
}

/* The source refused an O_DIRECT read (EINVAL): read it buffered from now on. */
static void drop_direct(struct sfs_file *f)
{
	if (!f->rdirect)
		return;
	log_debug("libstagefs: O_DIRECT read refused: buffered reads");
	STAT_ADD(odirect_fallbacks, 1);
	f->rdirect = false;
	if (f->rfd == f->cfd) {
		int fl = fcntl(f->cfd, F_GETFL);

		if (fl >= 0 && fcntl(f->cfd, F_SETFL, fl & ~O_DIRECT) == 0)
			f->cfd_direct = false;
		return;
	}
	if (f->rfd == f->dfd) {
		close(f->dfd);
		f->dfd = -1;
		f->rfd = f->fd;
	}
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
	char *buf = (char *)s->buf + s->got;
	unsigned n = (unsigned)(s->want - s->got);
	off_t off = s->foff + (off_t)s->got;

	/* The ring has 2 * nbuf entries and at most nbuf reads in flight. */
	if (pinned_pool_registered(f->pool))
		io_uring_prep_read_fixed(sqe, f->rfd, buf, n, off, idx);
	else
		io_uring_prep_read(sqe, f->rfd, buf, n, off);
	io_uring_sqe_set_data64(sqe, (uint64_t)idx);
	s->direct = f->rdirect;
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
				/* the source refused O_DIRECT: buffered from now on */
				drop_direct(f);
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
/*
 * cuFile path, on the source choose_source() picked if it is O_DIRECT: the
 * cache file (real GPUDirect Storage from the NVMe) or the mount (cuFile's
 * compatibility mode: FUSE has no GDS).  Returns bytes, or < 0 to fall back
 * to the pipeline.
 */
static ssize_t cufile_read(struct sfs_file *f, int64_t off, size_t len,
			   void *dev_ptr)
{
	ssize_t n;

	pthread_once(&cufile_once, cufile_load);
	if (!cufile.ok || !f->rdirect)
		return -ENOTSUP;
	if (f->cufile_tried && f->cufile_fd != f->rfd)
		cufile_drop(f);	/* the source changed */
	if (!f->cufile_tried) {
		cufile_descr_t d = { .type = CUFILE_HANDLE_TYPE_OPAQUE_FD };
		struct stat st;
		bool known = fstat(f->rfd, &st) == 0;

		f->cufile_tried = true;
		f->cufile_fd = f->rfd;
		if (known && cufile_refused_had(st.st_dev, false)) {
			f->cufile_ok = false;
		} else {
			d.handle.fd = f->rfd;
			f->cufile_ok = cufile.handle_register(&f->cfh, &d).err == 0;
			if (!f->cufile_ok && (!known || !cufile_refused_had(st.st_dev, true)))
				log_warn("libstagefs: cuFileHandleRegister failed on device %u:%u: "
					 "the pinned pipeline for its files",
					 known ? major(st.st_dev) : 0, known ? minor(st.st_dev) : 0);
		}
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

/*
 * Count @n bytes just delivered to @device (SFS_HOST_DEVICE: host memory),
 * read from the cache file when @via_cfd: for sfs_client_stats() and for
 * the daemon's feed rate (reported by ctlc_mount_report()).
 */
static void account(struct sfs_file *f, bool via_cfd, int device, uint64_t n)
{
	uint64_t files = 0, cb = 0, gb = device >= 0 ? n : 0;

	if (device >= 0 && device < SFS_MAX_DEVICES)
		STAT_ADD(device_bytes[device], n);
	else if (device < 0)
		STAT_ADD(pinned_host_bytes, n);
	if (via_cfd) {
		/*
		 * The daemon takes at most a file's size per handed-over
		 * file (docs/control.md, CLIENT_READ): bytes read again
		 * through the same handle are not reported.
		 */
		uint64_t size = f->size > 0 ? (uint64_t)f->size : 0;

		STAT_ADD(fd_bytes, n);
		files = !f->delivered;
		f->delivered = true;
		cb = MIN(n, size - MIN(f->cfd_counted, size));
		f->cfd_counted += cb;
		if (gb) {
			gb = MIN(gb, size - MIN(f->cfd_gpu_counted, size));
			f->cfd_gpu_counted += gb;
		}
	}
	if (f->mount)
		ctlc_mount_add(f->mount, cb, files, device, gb);
}

ssize_t sfs_read_device(struct sfs_file *f, int64_t off, size_t len,
			void *dev_ptr, int device)
{
	ssize_t n = clamp(f, off, len);
	bool via_cfd;
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
	if (f->pid != getpid())
		forked_reset(f);
	if (!f->piped) {
		err = pipe_setup(f);
		if (err) {
			n = err;
			goto out_unlock;
		}
	}
	err = choose_source(f);
	if (err) {
		n = err;
		goto out_unlock;
	}
	via_cfd = f->cfd >= 0;
#ifdef CONFIG_HAVE_CUDA
	if (device >= 0) {
		int prev = 0;

		cudaGetDevice(&prev);
		if (cudaSetDevice(device) != cudaSuccess) {
			n = -ENODEV;
			goto out_unlock;
		}
		ctlc_note_pci(device);
		ssize_t r = cufile_read(f, off, (size_t)n, dev_ptr);

		if (r < 0) {
			err = cuda_setup(f, device);
			r = err ? err : pipe_read(f, off, (size_t)n, dev_ptr, device);
			if (r >= 0 && cudaStreamSynchronize(f->stream) != cudaSuccess)
				r = -EIO;
		}
		cudaSetDevice(prev);
		n = r;
		if (n > 0)
			account(f, via_cfd, device, (uint64_t)n);
		goto out_unlock;
	}
#endif
	n = pipe_read(f, off, (size_t)n, dev_ptr, SFS_HOST_DEVICE);
	if (n > 0)
		account(f, via_cfd, SFS_HOST_DEVICE, (uint64_t)n);
out_unlock:
	pthread_mutex_unlock(&f->lock);
	if (n > 0 && f->mount)
		ctlc_mount_report(f->mount, false);
	return n;
}

void sfs_client_stats(struct sfs_client_stats *st)
{
#define LD(x)	__atomic_load_n(&g_stats.x, __ATOMIC_RELAXED)
	memset(st, 0, sizeof(*st));
	st->host_read_bytes = LD(host_read_bytes);
	st->pinned_host_bytes = LD(pinned_host_bytes);
	for (int i = 0; i < SFS_MAX_DEVICES; i++)
		st->device_bytes[i] = LD(device_bytes[i]);
	st->cufile_bytes = LD(cufile_bytes);
	st->direct_reads = LD(direct_reads);
	st->buffered_reads = LD(buffered_reads);
	st->odirect_fallbacks = LD(odirect_fallbacks);
	st->pinned_bytes = LD(pinned_bytes);
	st->pinned_locked = __atomic_load_n(&g_unlocked_pools, __ATOMIC_RELAXED) == 0;
	st->cuda_available = pinned_cuda_available();
	st->cufile_loaded = LD(cufile_loaded);
	st->fd_last_error = LD(fd_last_error);
	st->fd_opens = LD(fd_opens);
	st->fd_fallbacks = LD(fd_fallbacks);
	st->fd_lost = LD(fd_lost);
	st->fd_bytes = LD(fd_bytes);
	ctlc_stats(&st->reports, &st->report_errors);
#undef LD
}
