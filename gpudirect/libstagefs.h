/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libstagefs: the client library a training job links (or loads through
 * gpudirect/stagefs.py) to read files of a stagefs mount into host or GPU
 * memory.  docs/gpudirect.md has the design and how to measure it.
 *
 * sfs_read_device() is the fast path: the file is read with O_DIRECT
 * io_uring reads into a small pool of pinned host buffers (gpudirect/
 * pinned.h, registered with the ring as fixed buffers) while the previous
 * buffers are copied to the GPU with cudaMemcpyAsync on the handle's
 * stream, so the disk and the PCIe copy engine are busy at the same time.
 * When libcufile.so.0 can be loaded (GPUDirect Storage) it is used instead,
 * falling back to the pipeline on any cuFile error.  Device -1 means "host
 * memory through the same pipeline", which is how a machine without a GPU
 * tests everything but the copy engine.
 *
 * Data source: at open, the library asks the stagefs daemon over its
 * control socket for the file's cache file (docs/control.md, CACHE_FD).
 * The daemon checks the caller's access as a read through the mount would
 * be checked, brings every missing chunk in, verifies and pins the file,
 * and hands over a read-only descriptor: sfs_read_device() then reads the
 * NVMe cache file itself, with no FUSE round trip.  Where that is not
 * possible (no daemon, an older daemon, a file that cannot be cached whole,
 * STAGEFS_FD_PASSING=0) the handle reads through the mount instead, O_DIRECT
 * when the mount accepts it.  sfs_read_host() always reads through the
 * mount.  What the library read from cache files and copied to GPUs is
 * reported to the daemon's feed-rate counters (docs/feedrate.md), at most
 * once a second and at close.
 *
 * Processes: a handle belongs to the process that opened it.  Used in a
 * child after fork() it drops what it shares with the parent (the cache
 * file's pin, ring, buffers, CUDA stream) and reads through the mount with
 * its own pipeline; open files again in the child to get cache files.  (A
 * handle another thread was using at the moment of fork() stays locked in
 * the child: do not use it there.)
 *
 * Thread safety: a handle serialises its own calls (one lock); use one
 * handle per thread for parallel reads.  sfs_client_stats() is process wide
 * and may be called from any thread.
 *
 * All functions return 0 / a byte count, or -errno; they never exit or
 * print except through the stagefs logger at warning level.
 */
#ifndef STAGEFS_LIBSTAGEFS_H
#define STAGEFS_LIBSTAGEFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SFS_HOST_DEVICE		(-1)	/* device argument: host memory */
#define SFS_MAX_DEVICES		16	/* devices counted in sfs_client_stats */

/* sfs_client_via(): where sfs_read_device() reads a handle's bytes from. */
#define SFS_VIA_MOUNT		0	/* through the FUSE mount */
#define SFS_VIA_CACHE_FD	1	/* the NVMe cache file the daemon handed over */

struct sfs_file;

/*
 * Open @path, a file inside a stagefs mount (any regular file works: outside
 * a mount, or without the daemon's help, it is read as it is).  The daemon
 * stages the whole file before this returns (see above), so an open of a
 * file not cached yet takes as long as fetching it.
 *
 * Environment: STAGEFS_PINNED_BUFS (default 4) buffers of
 * STAGEFS_PINNED_BUF_SIZE (default 1M, bytes or 4M-style) per handle,
 * allocated on the first sfs_read_device(); STAGEFS_FD_PASSING=0 never asks
 * the daemon for the cache file; STAGEFS_CUFILE=0 disables cuFile;
 * STAGEFS_ODIRECT=0 makes the pipeline use buffered reads; STAGEFS_JOB names
 * the job the library's reports are counted under (default: the daemon's
 * job rule for this process).
 * Returns 0 and a handle in *@out (release with sfs_client_close), or -errno
 * (-EACCES when the caller may not read the file).
 */
int sfs_client_open(const char *path, struct sfs_file **out);
/*
 * Close the handle: unpin its cache file, report what is left to report,
 * free its buffers, stream and ring.  NULL is a no-op.
 */
void sfs_client_close(struct sfs_file *f);
/* The file's size in bytes (fixed: datasets are immutable). */
int64_t sfs_client_size(const struct sfs_file *f);
/* SFS_VIA_CACHE_FD or SFS_VIA_MOUNT: where the next sfs_read_device() reads. */
int sfs_client_via(const struct sfs_file *f);

/*
 * Read up to @len bytes at @off into host memory @dst with buffered reads
 * through the mount.  Returns the bytes read (less than @len only at end of
 * file) or -errno.
 */
ssize_t sfs_read_host(struct sfs_file *f, int64_t off, size_t len, void *dst);

/*
 * Read up to @len bytes at @off into @dev_ptr on GPU @device (a device
 * pointer from cudaMalloc), or, with @device == SFS_HOST_DEVICE, into host
 * memory @dev_ptr through the same pinned O_DIRECT pipeline.  Returns when
 * the data is in place (the copy stream is synchronised).  Returns the bytes
 * read (less than @len only at end of file) or -errno: -ENODEV for a
 * device >= 0 when the library has no CUDA or the runtime sees no GPU.
 */
ssize_t sfs_read_device(struct sfs_file *f, int64_t off, size_t len,
			void *dev_ptr, int device);

/* Process-wide counters, since load. */
struct sfs_client_stats {
	uint64_t host_read_bytes;		/* sfs_read_host */
	uint64_t pinned_host_bytes;		/* sfs_read_device(.., -1) */
	uint64_t device_bytes[SFS_MAX_DEVICES];	/* copied to GPU n (any path) */
	uint64_t cufile_bytes;			/* of which through cuFile */
	uint64_t direct_reads;			/* O_DIRECT io_uring reads */
	uint64_t buffered_reads;		/* pipeline reads without O_DIRECT */
	uint64_t odirect_fallbacks;		/* sources that fell back to buffered */
	uint64_t pinned_bytes;			/* pinned pool memory held now */
	uint32_t pinned_locked;			/* 1 if every pool is page-locked */
	uint32_t cuda_available;		/* 1 if built with CUDA and a GPU is seen */
	uint32_t cufile_loaded;			/* 1 if libcufile.so.0 was loaded */
	/* added with fd passing (the struct only grows at the end) */
	int32_t fd_last_error;			/* errno of the last refusal, 0 if none */
	uint64_t fd_opens;			/* opens that got the cache file */
	uint64_t fd_fallbacks;			/* opens that read through the mount */
	uint64_t fd_lost;			/* handles that lost their cache file */
	uint64_t fd_bytes;			/* sfs_read_device bytes from cache files */
	uint64_t reports;			/* reports the daemon accepted */
	uint64_t report_errors;			/* reports that failed (counts kept) */
};

/* Fill @st (sizeof checked by the caller's ABI: the struct only grows at the end). */
void sfs_client_stats(struct sfs_client_stats *st);

#ifdef __cplusplus
}
#endif

#endif
