/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fs: the mounted filesystem's state and the FUSE low-level operations.
 *
 * One struct sfs per daemon: the settings, the dataset backend, the node's
 * chunk cache and the counters behind .stagefs/stats (fs->stats).  fuse/ops.c answers
 * the kernel; every op handler is the only place that replies to its
 * request (helpers return -errno), as in libfuse's passthrough_ll.
 */
#ifndef STAGEFS_FUSE_FS_H
#define STAGEFS_FUSE_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "cache/cache.h"
#include "config.h"

struct peer_group;
struct peerd;

/*
 * Inode numbers.  Inodes above SFS_VIRT_BASE are the daemon's own
 * (.stagefs and its files).  With one dataset (`stagefs SOURCE MNT`) the
 * backend's inode numbers are used as they are.  With a mount root of many
 * datasets, inode 1 is the root listing the datasets, and dataset k's
 * inode i is ((k + 1) << SFS_DS_SHIFT) | i: 2^40 inodes per dataset.
 */
#define SFS_DS_SHIFT	40
#define SFS_DS_MASK	((1ULL << SFS_DS_SHIFT) - 1)
#define SFS_MAX_DATASETS 4096
#define SFS_VIRT_BASE	(1ULL << 62)
#define SFS_CTL_DIR_INO	(SFS_VIRT_BASE + 1)
#define SFS_CTL_DIR_NAME ".stagefs"
/*
 * Inode of the i-th file of vfiles_table[] (fuse/vfiles.h) as user @uid
 * sees it: each user has inodes of their own, so the kernel's page cache
 * of one never holds a rendering made for another.
 */
#define SFS_CTL_FILE_SHIFT 4
#define SFS_CTL_FILE_MAX (1u << SFS_CTL_FILE_SHIFT)	/* files in .stagefs/ */
#define SFS_CTL_FILE_INO(i, uid) \
	(SFS_VIRT_BASE + (1ULL << 40) + ((uint64_t)(uid) << SFS_CTL_FILE_SHIFT) + (i))
/*
 * .stagefs/.no_open: a regular file the daemon opens on its own mount at
 * start-up to switch the kernel into no-open mode (fuse/noopen.h).  Not
 * listed; a later open by anyone else is refused.
 */
#define SFS_NOOPEN_PROBE_NAME ".no_open"
#define SFS_NOOPEN_PROBE_INO (SFS_VIRT_BASE + 0x10000)

struct passthrough;
struct ptacct;
struct session_io;
struct noopen;
struct packpush;
struct uring;

/* One mounted dataset: immutable once published in fs->ds. */
struct sfs_dataset {
	char *name;		/* directory name under a multi-dataset root */
	char *source;		/* URI as configured */
	struct backend *be;
	bool hidden;		/* NAME@VERSION opened on demand: not listed */
	uint32_t index;
	char *rule_name;	/* whose [dataset] rules apply: NAME of NAME@V */
	_Atomic bool nothrash;	/* eviction policy; follows config reloads */
	_Atomic int epoch_staging;	/* enum cfg_auto; follows config reloads */
};

struct sfs {
	struct sfs_config cfg;
	const char *mountpoint;
	bool multi;		/* mount root lists datasets */
	struct sfs_dataset *ds[SFS_MAX_DATASETS];	/* append-only */
	_Atomic uint32_t nds;
	pthread_mutex_t ds_lock;	/* serializes appends to ds[] */
	struct policy *_Atomic policy;	/* quotas and access; swapped on SIGHUP */
	const char *config_path;
	struct cache *cache;
	struct fuse_session *se;
	struct session_io *sio;		/* fuse/session_io.h: session I/O hooks */
	struct passthrough *pt;		/* fuse/passthrough.h */
	/* fuse/ptacct.h (ptacct_of()); NULL: passthrough reads estimated */
	struct ptacct *_Atomic pa;
	struct noopen *no;		/* fuse/noopen.h */
	struct uring *ur;		/* fuse/uring.h; NULL: /dev/fuse only */
	struct kinodes *ki;		/* fuse/kinodes.h: the kernel's inodes, bounded */
	struct pushmap *pushed;		/* fuse/pushmap.h: files the kernel holds from a push */
	struct packpush *pp;		/* fuse/packpush.h: packs' files pushed as they arrive; NULL: off */
	bool splice_write;		/* the session splices notify_store data (INIT) */
	struct handles *handles;	/* fuse/handles.h: the file handles given out */
	struct takeover *tko;		/* fuse/takeover.h: the supervisor's channel, or NULL */
	uint32_t generation;		/* 1 for the daemon that mounted, +1 per takeover */
	uint64_t takeover_pause_ms;	/* the last takeover: old daemon's end to serving */
	pid_t supervisor_pid;		/* our parent when supervised, else 0 */
	struct pf_sched *pf;		/* background fetches (prefetch/prefetch.h) */
	struct ctlsock *ctl;		/* control socket (fuse/ctl/ctlsock.h) */
	struct stats *stats;		/* counts READs, opens, fetches (src/stats/stats.h) */
	struct metrics *metrics;	/* their exporters (fuse/metrics.h) */
	struct peer_group *peers;	/* the node's peer group (src/peer/peer.h), or NULL */
	struct peerd *peerd;		/* its server (fuse/peerd.h), or NULL */
	/* READs handed to the I/O engine, not answered yet: unmount waits for 0 */
	_Atomic uint64_t reads_in_engine;
	uint64_t start_ms;
	double entry_timeout, attr_timeout;	/* seconds */
};

extern const struct fuse_lowlevel_ops sfs_ops;

/*
 * The dataset owning FUSE inode @ino and the backend's inode number for it;
 * NULL if there is none (a virtual inode, the multi root, no such dataset).
 */
static inline struct sfs_dataset *sfs_ds(struct sfs *fs, uint64_t ino,
					 uint64_t *bino)
{
	uint64_t k;

	if (ino >= SFS_VIRT_BASE)
		return NULL;
	if (!fs->multi) {
		*bino = ino;
		return atomic_load(&fs->nds) ? fs->ds[0] : NULL;
	}
	k = ino >> SFS_DS_SHIFT;
	if (k == 0 || k > atomic_load(&fs->nds))
		return NULL;
	*bino = ino & SFS_DS_MASK;
	return fs->ds[k - 1];
}

/* The FUSE inode of backend inode @bino of @ds. */
static inline uint64_t sfs_ino(const struct sfs *fs, const struct sfs_dataset *ds,
			       uint64_t bino)
{
	return fs->multi ? ((uint64_t)(ds->index + 1) << SFS_DS_SHIFT) | bino : bino;
}

/* True for the root of a multi-dataset mount (a virtual directory). */
static inline bool sfs_is_multi_root(const struct sfs *fs, uint64_t ino)
{
	return fs->multi && ino == FUSE_ROOT_ID;
}

#endif
