/*
 * fs: the mounted filesystem's state and the FUSE low-level operations.
 *
 * One struct sfs per daemon: the settings, the dataset backend, the node's
 * chunk cache and the counters behind .stagefs/stats.  fuse/ops.c answers
 * the kernel; every op handler is the only place that replies to its
 * request (helpers return -errno), as in libfuse's passthrough_ll.
 */
#ifndef STAGEFS_FUSE_FS_H
#define STAGEFS_FUSE_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <stdatomic.h>
#include <stdint.h>

#include "backend.h"
#include "cache.h"
#include "config.h"

/*
 * Inodes above SFS_VIRT_BASE are the daemon's own (.stagefs and its files);
 * the backend's inode numbers are manifest indexes and stay far below.
 */
#define SFS_VIRT_BASE	(1ULL << 62)
#define SFS_CTL_DIR_INO	(SFS_VIRT_BASE + 1)
#define SFS_CTL_STATS_INO (SFS_VIRT_BASE + 2)
#define SFS_CTL_DIR_NAME ".stagefs"

struct sfs_counters {
	_Atomic uint64_t read_requests;
	_Atomic uint64_t read_bytes;
	_Atomic uint64_t read_errors;
	_Atomic uint64_t opens;
	_Atomic uint64_t backend_reads;
	_Atomic uint64_t backend_bytes;
	_Atomic uint64_t backend_errors;
	_Atomic uint64_t stall_ns;	/* time readers waited on backend fetches */
};

struct sfs {
	struct sfs_config cfg;
	const char *source;
	const char *mountpoint;
	struct backend *be;
	struct cache *cache;
	struct fuse_session *se;
	struct sfs_counters ctr;
	uint64_t start_ms;
	double entry_timeout, attr_timeout;	/* seconds */
};

extern const struct fuse_lowlevel_ops sfs_ops;

/*
 * Render .stagefs/stats (JSON) into a malloc'ed buffer.  Returns its length
 * or -errno; the caller frees *@out.
 */
int sfs_stats_json(struct sfs *fs, char **out);

#endif
