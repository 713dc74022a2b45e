/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scanserve: a backend's index while its first scan runs in the background,
 * then the manifest that scan builds.
 *
 * A mount answers once the scan has read the top directory: until the
 * manifest is ready, metadata calls go to the scan's live index
 * (dirscan_live_*(), which gives the manifest's own inode numbers) under
 * ss->live held shared; a thread of ours waits for the scan, has the
 * backend keep and open its manifest (the @done callback: save it, map
 * it), then, holding ss->live exclusively, installs it in be->m and drops
 * the scan.  The kernel sees no change: the same inode numbers before and
 * after.  Calls the live index leaves to the manifest (-EAGAIN) wait for
 * it; after a failed scan they get -EIO, and the part read before the
 * failure is still served.
 *
 * Used by dir:// (dir_scan_background) and cephfs:// (a walk through
 * libcephfs); each calls scanserve_*() from its own backend ops, which
 * answer from be->m once the manifest is in.
 */
#ifndef STAGEFS_SCANSERVE_H
#define STAGEFS_SCANSERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "dirscan.h"

enum { SCANSERVE_READY, SCANSERVE_SCANNING, SCANSERVE_FAILED };

struct scanserve {
	struct backend *be;	/* be->m receives the manifest */
	const char *what;	/* the source, for messages */
	/*
	 * The scan is over (@r, its buffers now the callee's): keep what is
	 * to be kept and open the manifest in *@m.  0, or -errno with @err.
	 * Runs on the scan's thread.
	 */
	int (*done)(void *arg, struct dirscan_result *r, struct manifest **m,
		    char *err, size_t errlen);
	void *arg;

	atomic_int state;	/* SCANSERVE_*; changes under lock */
	pthread_rwlock_t live;	/* shared: a live call; exclusive: the switch */
	struct dirscan *scan;	/* while it is the index; protected by live */
	pthread_mutex_t lock;
	pthread_cond_t cond;	/* state left SCANSERVE_SCANNING */
	pthread_t thread;
	bool started;
	/* a scan nothing is kept from (s3://): stopped at destroy, not waited for */
	bool cancel_at_destroy;
};

struct sfs_config;

/* Scan threads: dir_scan_threads, or 4 per CPU we may run on, 8 to 64. */
unsigned scanserve_threads(const struct sfs_config *cfg);

/* Ready to serve be->m alone (no scan yet). */
void scanserve_init(struct scanserve *ss, struct backend *be, const char *what,
		    int (*done)(void *, struct dirscan_result *, struct manifest **,
				char *, size_t),
		    void *arg);

/*
 * Serve @scan (started, its top directory read; ours from now on) until
 * its manifest is in be->m.  0; or, when no thread can be started, the
 * scan is waited for here: 0 with the manifest in, or -EIO.
 */
int scanserve_start(struct scanserve *ss, struct dirscan *scan, char *err, size_t errlen);

/*
 * scanserve_start() with @background (dir_scan_background); without, the
 * scan waited for here: its result through @done, the manifest in be->m,
 * or -errno with @err.
 */
int scanserve_run(struct scanserve *ss, struct dirscan *scan, bool background,
		  char *err, size_t errlen);
/* Tests: STAGEFS_TEST_SCAN_DELAY_US, a scan thread's pause after each directory (0). */
unsigned scanserve_test_delay_us(void);
/* Is the manifest in be->m (or did the scan fail)?  Then no live calls. */
static inline bool scanserve_live(struct scanserve *ss)
{
	return atomic_load(&ss->state) != SCANSERVE_READY;
}

/*
 * The backend ops while scanserve_live(): the live index's answer, or
 * the manifest's once it is in.  statfs is -EAGAIN while the scan runs
 * (its totals are the finished scan's), -EIO after a failed one.
 */
int scanserve_getattr(struct scanserve *ss, uint64_t ino, struct sfs_attr *out);
int scanserve_lookup(struct scanserve *ss, uint64_t parent, const char *name,
		     struct sfs_attr *out);
int scanserve_readdir(struct scanserve *ss, uint64_t ino, struct sfs_dirlist *out);
int scanserve_readlink(struct scanserve *ss, uint64_t ino, char *buf, size_t size);
int scanserve_statfs(struct scanserve *ss, uint64_t *bytes, uint64_t *files);
int scanserve_path(struct scanserve *ss, uint64_t ino, char *buf, size_t len);

/*
 * Wait for a scan still running to end (finished, not cancelled: its saved
 * result is what makes the next mount quick; cancelled with
 * cancel_at_destroy), and free everything.
 */
void scanserve_destroy(struct scanserve *ss);

#endif
