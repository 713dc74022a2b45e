/* SPDX-License-Identifier: Apache-2.0 */
/*
 * noopen: see noopen.h for the contract, docs/noopen.md for the design
 * and the figures.
 *
 * This file: the handshake and the per-inode handles.  The .stagefs/
 * files of the mode (rendered at LOOKUP through vfiles_table[], kept per
 * (file, user)) are noopen_vfile.c's, so that this file needs nothing of
 * fuse/vfiles.c, which reports whether the mode is active; the two share
 * struct noopen through noopen_i.h.
 *
 * Locking: no->lock guards the handle table, no->vlock the renderings
 * (noopen_vfile.c).  Handles are made and destroyed outside both (they
 * take the cache's and the prefetcher's locks).  A handle is only a cache
 * of what READ needs: one dropped early (a FORGET racing a new lookup of
 * the same inode) is made again at the next READ.
 *
 * The handshake runs in the main thread before the FUSE workers start, so
 * the request handlers it calls (through fuse_session_process_buf) run in
 * that thread too; the fields marked "handshake" are written only there.
 */
#include "noopen_i.h"

#include "fh.h"

#include "log.h"
#include "passthrough.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define NO_BUCKETS_MIN	1024	/* doubles as handles grow */
#define NO_PROBE_MS	10000	/* the probe's OPEN must arrive within this */

struct noopen_ent {
	struct htab_node node;		/* in no->table: protected by no->lock */
	uint64_t ino;
	struct fh *fh;
	uint32_t refs;			/* READs using fh: protected by no->lock */
	bool unlinked;			/* forgotten: protected by no->lock */
};

int noopen_create(struct sfs *fs, struct noopen **out)
{
	struct noopen *no = calloc(1, sizeof(*no));

	if (!no)
		return -ENOMEM;
	if (htab_init(&no->table, NO_BUCKETS_MIN)) {
		free(no);
		return -ENOMEM;
	}
	no->fs = fs;
	no->mode = fs->cfg.no_open;
	no->probe_efd = -1;
	pthread_mutex_init(&no->lock, NULL);
	pthread_mutex_init(&no->vlock, NULL);
	*out = no;
	return 0;
}

void noopen_destroy(struct noopen *no)
{
	if (!no)
		return;
	/* the probe's close() was answered by the workers before they ended */
	if (no->probe_started)
		pthread_join(no->probe, NULL);
	if (no->probe_efd >= 0)
		close(no->probe_efd);
	htab_for_each_safe(&no->table, i, pos, tmp) {
		struct noopen_ent *e = htab_entry(pos, struct noopen_ent, node);

		fh_destroy(no->fs, e->fh);
		free(e);
	}
	for (size_t i = 0; i < NO_VSLOTS; i++)
		free(no->vr[i].data);
	htab_release(&no->table);
	pthread_mutex_destroy(&no->lock);
	pthread_mutex_destroy(&no->vlock);
	free(no);
}

void noopen_init(struct noopen *no, struct fuse_conn_info *conn)
{
	if (!no)
		return;
	no->inited = true;
	no->capable = conn->capable & FUSE_CAP_NO_OPEN_SUPPORT;
	if (no->mode != CFG_OFF && (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)) {
		/* a new rendering of a .stagefs/ file (new mtime) drops the old pages */
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
		conn->want &= ~FUSE_CAP_EXPLICIT_INVAL_DATA;
	}
}

bool noopen_active(const struct noopen *no)
{
	return no && atomic_load(&no->active);
}

bool noopen_wanted(const struct noopen *no)
{
	return no && atomic_load(&no->wanted);
}

bool noopen_probe_open(struct noopen *no)
{
	if (!no || !atomic_exchange(&no->probing, false))
		return false;
	atomic_store(&no->active, true);
	return true;
}

void noopen_resume(struct noopen *no, bool active)
{
	if (!no)
		return;
	atomic_store(&no->wanted, active);
	atomic_store(&no->active, active);
	log_info("no_open: %s (as the daemon before this one had it)", active ? "on" : "off");
}

/* ---- the handshake ---- */

static void *probe_main(void *arg)
{
	struct noopen *no = arg;
	uint64_t one = 1;
	int fd = open(no->probe_path, O_RDONLY | O_CLOEXEC);

	atomic_store(&no->probe_err, fd < 0 ? errno : 0);
	if (write(no->probe_efd, &one, sizeof(one)) < 0) {
		/* an eventfd write of 1 cannot fail */
	}
	/* FLUSH (answered ENOSYS once the workers run: no flush handler) */
	if (fd >= 0)
		close(fd);
	return NULL;
}

static bool init_done(struct noopen *no)
{
	return no->inited;
}

static bool probe_returned(struct noopen *no)
{
	return no->probe_done;
}

/*
 * Answer requests in this thread until @done(no), for at most @ms.
 * Returns 0, -ETIMEDOUT, or -errno when the session ended or failed.
 */
static int serve_until(struct noopen *no, struct fuse_session *se,
		       bool (*done)(struct noopen *), int ms)
{
	struct fuse_buf fbuf = { .mem = NULL };
	uint64_t end = now_ms() + (uint64_t)ms;
	int ret = 0;

	while (!done(no)) {
		struct pollfd p[2] = {
			{ .fd = fuse_session_fd(se), .events = POLLIN },
			{ .fd = no->probe_efd, .events = POLLIN },
		};
		uint64_t now = now_ms();
		int n;

		if (fuse_session_exited(se)) {
			ret = -ENOTCONN;
			break;
		}
		if (now >= end) {
			ret = -ETIMEDOUT;
			break;
		}
		n = poll(p, no->probe_efd >= 0 ? 2 : 1, (int)(end - now));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			break;
		}
		if (n > 0 && no->probe_efd >= 0 && (p[1].revents & POLLIN)) {
			uint64_t v;

			if (read(no->probe_efd, &v, sizeof(v)) == sizeof(v))
				no->probe_done = true;
			continue;
		}
		if (n > 0 && p[0].revents) {
			ret = fuse_session_receive_buf(se, &fbuf);
			if (ret == -EINTR || ret == -EAGAIN) {
				ret = 0;
				continue;
			}
			if (ret <= 0) {
				ret = ret < 0 ? ret : -ENOTCONN;
				break;
			}
			fuse_session_process_buf(se, &fbuf);
			ret = 0;
		}
	}
	free(fbuf.mem);
	return ret;
}

/* Open the probe on our own mount from a thread that takes no signals. */
static int probe_start(struct noopen *no)
{
	sigset_t all, old;
	int ret;

	snprintf(no->probe_path, sizeof(no->probe_path), "%s/%s/%s",
		 no->fs->mountpoint, SFS_CTL_DIR_NAME, SFS_NOOPEN_PROBE_NAME);
	no->probe_efd = eventfd(0, EFD_CLOEXEC);
	if (no->probe_efd < 0)
		return -errno;
	atomic_store(&no->probing, true);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&no->probe, NULL, probe_main, no);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		atomic_store(&no->probing, false);
		return ret;
	}
	no->probe_started = true;
	return 0;
}

int noopen_handshake(struct noopen *no, struct fuse_session *se, char *err,
		     size_t errlen)
{
	const char *why = NULL;
	char buf[PATH_MAX + 128];
	int ret;

	if (!no || no->mode == CFG_OFF)
		return 0;
	if (no->fs->multi) {
		/* main.c refuses no_open=on here */
		log_info("no_open: off (access rules are checked at open on a mount of many datasets)");
		return 0;
	}
	if (no->mode == CFG_AUTO && passthrough_active(no->fs->pt)) {
		log_info("no_open: off (passthrough is on: it is set up at open)");
		return 0;
	}
	/* from here on, .stagefs/ files are rendered at LOOKUP, never cached */
	atomic_store(&no->wanted, true);
	ret = serve_until(no, se, init_done, NO_PROBE_MS);
	if (ret) {
		snprintf(err, errlen, "no INIT from the kernel: %s", strerror(-ret));
		return ret;
	}
	if (!no->capable) {
		why = "the kernel does not offer FUSE_NO_OPEN_SUPPORT";
		ret = -EOPNOTSUPP;
		goto out_off;
	}
	ret = probe_start(no);
	if (ret) {
		why = strerror(-ret);
		goto out_off;
	}
	ret = serve_until(no, se, probe_returned, NO_PROBE_MS);
	/* a late probe OPEN is refused: the kernel must not switch after this */
	atomic_store(&no->probing, false);
	if (noopen_active(no)) {
		log_info("no_open: on (files are read with no OPEN or RELEASE)");
		return 0;
	}
	if (ret == -ENOTCONN)
		return ret;
	if (ret)
		why = ret == -ETIMEDOUT ? "the probe's OPEN did not arrive" : strerror(-ret);
	else if (atomic_load(&no->probe_err)) {
		snprintf(buf, sizeof(buf), "opening %s: %s", no->probe_path,
			 strerror(atomic_load(&no->probe_err)));
		why = buf;
	} else {
		why = "the probe was opened without an OPEN";
	}
	ret = -EOPNOTSUPP;
out_off:
	atomic_store(&no->wanted, false);
	if (no->mode == CFG_ON) {
		snprintf(err, errlen, "no_open=on, but %s", why);
		return ret;
	}
	log_notice("no_open: off (%s)", why);
	return 0;
}

/* ---- handles for READs without an open ---- */

static bool ent_eq(const struct htab_node *n, const void *key)
{
	return htab_entry(n, struct noopen_ent, node)->ino == *(const uint64_t *)key;
}

/* no->lock held */
static struct noopen_ent *ent_find(struct noopen *no, uint64_t ino)
{
	struct htab_node *n = htab_find(&no->table, htab_hash_u64(ino), ent_eq, &ino);

	return n ? htab_entry(n, struct noopen_ent, node) : NULL;
}

/* no->lock held */
static void ent_unlink(struct noopen *no, struct noopen_ent *e)
{
	htab_del(&no->table, &e->node);
	e->unlinked = true;
}

int noopen_get(struct noopen *no, uint64_t ino, struct noopen_ent **ent,
	       struct fh **fh)
{
	struct noopen_ent *e;
	struct fh *mine;
	int ret;

	pthread_mutex_lock(&no->lock);
	e = ent_find(no, ino);
	if (e)
		goto out_ref;
	pthread_mutex_unlock(&no->lock);

	ret = fh_create_noopen(no->fs, ino, &mine);
	if (ret)
		return ret;

	pthread_mutex_lock(&no->lock);
	e = ent_find(no, ino);
	if (e) {
		/* another READ of the inode made one meanwhile */
		e->refs++;
		pthread_mutex_unlock(&no->lock);
		fh_destroy(no->fs, mine);
		*ent = e;
		*fh = e->fh;
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		pthread_mutex_unlock(&no->lock);
		fh_destroy(no->fs, mine);
		return -ENOMEM;
	}
	e->ino = ino;
	e->fh = mine;
	/* doubles once handles outnumber buckets; if it cannot, chains grow */
	(void)htab_reserve(&no->table, no->table.n + 1);
	htab_add(&no->table, &e->node, htab_hash_u64(ino));
out_ref:
	e->refs++;
	pthread_mutex_unlock(&no->lock);
	*ent = e;
	*fh = e->fh;
	return 0;
}

void noopen_put(struct noopen *no, struct noopen_ent *e)
{
	bool last;

	if (!e)
		return;
	pthread_mutex_lock(&no->lock);
	last = --e->refs == 0 && e->unlinked;
	pthread_mutex_unlock(&no->lock);
	if (last) {
		fh_destroy(no->fs, e->fh);
		free(e);
	}
}

void noopen_forget(struct noopen *no, uint64_t ino)
{
	struct noopen_ent *e;
	bool idle = false;

	if (!noopen_active(no))
		return;
	pthread_mutex_lock(&no->lock);
	e = ent_find(no, ino);
	if (e) {
		ent_unlink(no, e);
		idle = e->refs == 0;
	}
	pthread_mutex_unlock(&no->lock);
	if (idle) {
		fh_destroy(no->fs, e->fh);
		free(e);
	}
}
