/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scanserve: see scanserve.h.
 *
 * Locking: ss->live (a writer-preferring rwlock, so that the switch never
 * waits behind a stream of live calls) guards ss->scan; ss->lock and
 * ss->cond the moves of ss->state out of SCANSERVE_SCANNING.  be->m is
 * stored with release order under ss->live held exclusively, before state
 * says READY, so a caller that saw READY sees the manifest.
 */
#include "scanserve.h"

#include "config.h"
#include "log.h"
#include "manifest/manifest.h"

#include <errno.h>
#include <malloc.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

unsigned scanserve_threads(const struct sfs_config *cfg)
{
	cpu_set_t set;
	int n = 0;

	if (cfg->dir_scan_threads)
		return cfg->dir_scan_threads;
	if (!sched_getaffinity(0, sizeof(set), &set))
		n = CPU_COUNT(&set);
	return (unsigned)MIN(MAX(4 * n, 8), 64);
}

void scanserve_init(struct scanserve *ss, struct backend *be, const char *what,
		    int (*done)(void *, struct dirscan_result *, struct manifest **,
				char *, size_t),
		    void *arg)
{
	pthread_rwlockattr_t ra;

	memset(ss, 0, sizeof(*ss));
	ss->be = be;
	ss->what = what;
	ss->done = done;
	ss->arg = arg;
	atomic_init(&ss->state, SCANSERVE_READY);
	pthread_mutex_init(&ss->lock, NULL);
	pthread_cond_init(&ss->cond, NULL);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&ss->live, &ra);
	pthread_rwlockattr_destroy(&ra);
}

static void set_state(struct scanserve *ss, int state)
{
	pthread_mutex_lock(&ss->lock);
	atomic_store(&ss->state, state);
	pthread_cond_broadcast(&ss->cond);
	pthread_mutex_unlock(&ss->lock);
}

/* The thread that waits for the scan and switches to its manifest. */
static void *scanner(void *arg)
{
	struct scanserve *ss = arg;
	struct dirscan_result r;
	struct dirscan *done;
	struct manifest *m = NULL;
	char err[1024] = "";
	int ret;

	ret = dirscan_finish(ss->scan, &r, err, sizeof(err));
	if (!ret)
		ret = ss->done(ss->arg, &r, &m, err, sizeof(err));
	if (ret) {
		if (ret != -ECANCELED)
			log_err("scan of %s failed: %s; what was scanned before is still served, the rest gives EIO; remount to scan again",
				ss->what, err);
		/* ss->scan stays: it still serves the part it read */
		set_state(ss, SCANSERVE_FAILED);
		return NULL;
	}
	manifest_set_name(m, ss->be->uri);
	pthread_rwlock_wrlock(&ss->live);
	__atomic_store_n(&ss->be->m, m, __ATOMIC_RELEASE);
	done = ss->scan;
	ss->scan = NULL;
	pthread_rwlock_unlock(&ss->live);
	set_state(ss, SCANSERVE_READY);
	dirscan_destroy(done);
	/* the builder's memory, freed in the scan threads' arenas, back to the system */
	malloc_trim(0);
	return NULL;
}

int scanserve_start(struct scanserve *ss, struct dirscan *scan, char *err, size_t errlen)
{
	ss->scan = scan;
	atomic_store(&ss->state, SCANSERVE_SCANNING);
	if (!pthread_create(&ss->thread, NULL, scanner, ss)) {
		ss->started = true;
		return 0;
	}
	/* no thread: wait for the scan here */
	scanner(ss);
	if (atomic_load(&ss->state) == SCANSERVE_READY)
		return 0;
	snprintf(err, errlen, "%s: the scan failed (see the log)", ss->what);
	dirscan_destroy(ss->scan);
	ss->scan = NULL;
	return -EIO;
}

int scanserve_run(struct scanserve *ss, struct dirscan *scan, bool background,
		  char *err, size_t errlen)
{
	struct dirscan_result r;
	int ret;

	if (background)
		return scanserve_start(ss, scan, err, errlen);
	ret = dirscan_finish(scan, &r, err, errlen);
	dirscan_destroy(scan);
	if (!ret)
		ret = ss->done(ss->arg, &r, &ss->be->m, err, errlen);
	if (!ret)
		manifest_set_name(ss->be->m, ss->be->uri);
	return ret;
}

unsigned scanserve_test_delay_us(void)
{
	const char *env = getenv("STAGEFS_TEST_SCAN_DELAY_US");

	return env ? (unsigned)strtoul(env, NULL, 10) : 0;
}

void scanserve_destroy(struct scanserve *ss)
{
	if (ss->started) {
		if (ss->cancel_at_destroy) {
			pthread_rwlock_rdlock(&ss->live);
			if (ss->scan)
				dirscan_cancel(ss->scan);
			pthread_rwlock_unlock(&ss->live);
		} else if (atomic_load(&ss->state) == SCANSERVE_SCANNING) {
			log_notice("%s: waiting for the scan to end, so that the next mount can reuse it",
				   ss->what);
		}
		pthread_join(ss->thread, NULL);
		ss->started = false;
	}
	dirscan_destroy(ss->scan);	/* a failed scan's */
	ss->scan = NULL;
	pthread_rwlock_destroy(&ss->live);
	pthread_mutex_destroy(&ss->lock);
	pthread_cond_destroy(&ss->cond);
}

/* Wait until the manifest is in be->m.  0, or -EIO if the scan failed. */
static int wait_manifest(struct scanserve *ss)
{
	int st;

	pthread_mutex_lock(&ss->lock);
	while ((st = atomic_load(&ss->state)) == SCANSERVE_SCANNING)
		pthread_cond_wait(&ss->cond, &ss->lock);
	pthread_mutex_unlock(&ss->lock);
	return st == SCANSERVE_READY ? 0 : -EIO;
}

/*
 * Run @live_call on the scan while it is the index; where it cannot
 * answer (-EAGAIN), wait for the manifest and fall through to the
 * caller's manifest op.
 */
#define LIVE(ss, live_call)						\
	do {								\
		if (scanserve_live(ss)) {				\
			int r_ = -EAGAIN;				\
									\
			pthread_rwlock_rdlock(&(ss)->live);		\
			if ((ss)->scan)					\
				r_ = live_call;				\
			pthread_rwlock_unlock(&(ss)->live);		\
			if (r_ != -EAGAIN)				\
				return r_;				\
			r_ = wait_manifest(ss);				\
			if (r_)						\
				return r_;				\
		}							\
	} while (0)

int scanserve_getattr(struct scanserve *ss, uint64_t ino, struct sfs_attr *out)
{
	LIVE(ss, dirscan_live_getattr(ss->scan, ino, out));
	return backend_manifest_getattr(ss->be, ino, out);
}

int scanserve_lookup(struct scanserve *ss, uint64_t parent, const char *name,
		     struct sfs_attr *out)
{
	LIVE(ss, dirscan_live_lookup(ss->scan, parent, name, out));
	return backend_manifest_lookup(ss->be, parent, name, out);
}

int scanserve_readdir(struct scanserve *ss, uint64_t ino, struct sfs_dirlist *out)
{
	LIVE(ss, dirscan_live_readdir(ss->scan, ino, out));
	return backend_manifest_readdir(ss->be, ino, out);
}

int scanserve_readlink(struct scanserve *ss, uint64_t ino, char *buf, size_t size)
{
	LIVE(ss, dirscan_live_readlink(ss->scan, ino, buf, size));
	return backend_manifest_readlink(ss->be, ino, buf, size);
}

int scanserve_statfs(struct scanserve *ss, uint64_t *bytes, uint64_t *files)
{
	int st = atomic_load(&ss->state);

	/* the totals are the finished scan's: unknown until then */
	if (st != SCANSERVE_READY)
		return st == SCANSERVE_SCANNING ? -EAGAIN : -EIO;
	return backend_manifest_statfs(ss->be, bytes, files);
}

int scanserve_path(struct scanserve *ss, uint64_t ino, char *buf, size_t len)
{
	LIVE(ss, dirscan_live_path(ss->scan, ino, buf, len));
	return manifest_path(ss->be->m, ino, buf, len);
}
