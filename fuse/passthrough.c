/* SPDX-License-Identifier: Apache-2.0 */
/*
 * passthrough: see passthrough.h for the contract, docs/passthrough.md for
 * the design and the figures.
 *
 * The hook build (libfuse without the API) goes through the session I/O
 * hooks of fuse/session_io.h: passthrough_create() registers an INIT reply
 * hook that asks for FUSE_PASSTHROUGH, and passthrough_open() names the
 * backing id of the calling thread's OPEN reply
 * (session_io_set_backing_id), which the writev hook patches in.  No reply
 * but INIT's and the chosen OPENs' is changed.
 *
 * Locking: pt->lock guards the inode table; registering a backing file and
 * verifying a cache file run outside it, with the inode marked busy so
 * that other opens of the same inode wait for the verdict.
 *
 * Backing ids outlive their opens: after the last RELEASE of an inode its
 * id stays registered ("idle"), so that the next open of the inode costs
 * no cache-file open(2), no whole-file check and no ioctl, only a stat(2)
 * of the cache file, compared with the one taken at registration (same
 * inode, same ctime: nobody wrote it since, not even our own refetch), and
 * a look at the index (every chunk still present and verified).  An idle
 * id holds no pin: eviction punches holes, which moves ctime, so the next
 * open registers anew.  It is closed at the inode's FORGET, when the check
 * fails, or when more than PT_IDLE_MAX are idle (least recently used
 * first).  The kernel keeps its own reference for every open file, so
 * closing an idle id never affects a reader.  An idle id does keep the
 * cache file's inode alive: eviction truncates a cache file before
 * unlinking it, so that its blocks are freed all the same.
 */
#include "passthrough.h"

#include "htab.h"
#include "list.h"
#include "log.h"
#include "session_io.h"
#include "stats/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * Protocol 7.40 (Linux 6.9) bits that the system <linux/fuse.h> (7.38)
 * lacks.  The numbers are the kernel's ABI and do not change.
 */
#ifndef FUSE_PASSTHROUGH
#define FUSE_PASSTHROUGH	(1ULL << 37)
#endif
#ifndef FUSE_DEV_IOC_MAGIC
#define FUSE_DEV_IOC_MAGIC	229
#endif
#ifndef FUSE_DEV_IOC_BACKING_OPEN
struct fuse_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define FUSE_DEV_IOC_BACKING_OPEN	_IOW(FUSE_DEV_IOC_MAGIC, 1, struct fuse_backing_map)
#define FUSE_DEV_IOC_BACKING_CLOSE	_IOW(FUSE_DEV_IOC_MAGIC, 2, uint32_t)
#endif

/*
 * Stacking depth we declare: our backing files live on a plain local
 * filesystem (depth 0), so FUSE sits at depth 1.  A cache_dir on a stacked
 * filesystem (overlayfs) makes registration fail with ELOOP: auto then
 * turns passthrough off.
 */
#define PT_MAX_STACK_DEPTH	1

#define PT_BUCKETS_MIN		4096	/* inode table; doubles as inodes grow */
/*
 * Idle backing ids kept.  Each holds an open file of the kernel's (not one
 * of our descriptors), and with it the cache file's inode in memory.
 */
#define PT_IDLE_MAX		65536

/* What the cache file was when its backing id was registered. */
struct pt_sig {
	dev_t dev;
	ino_t ino;
	struct timespec ctime;
};

/*
 * A FUSE inode with opens, or with an idle backing id, as far as this
 * daemon has answered them.  Protected by pt->lock, except the fields a
 * thread that set busy works on outside it (backing_id, sig).
 */
struct pt_inode {
	struct htab_node node;	/* in pt->inodes */
	struct list_node idle;	/* on pt->idle iff idle */
	uint64_t ino;
	struct cfile *cf;	/* pinned while pt_opens > 0 */
	int32_t backing_id;	/* > 0 while pt_opens > 0, or idle */
	struct pt_sig sig;	/* of the file behind backing_id */
	uint32_t pt_opens;	/* opens answered with passthrough */
	uint32_t daemon_opens;	/* opens answered on the daemon path */
	bool busy;		/* a thread is deciding; others wait */
	bool forgotten;		/* FORGET came while opens were left */
};

struct passthrough {
	struct sfs *fs;
	enum cfg_auto mode;
	int fuse_fd;
	uint64_t min_size;	/* passthrough_min_size: smaller files stay on the daemon path */
	bool test_refuse;	/* STAGEFS_TEST_NO_PASSTHROUGH=1 */
	/*
	 * Set while the kernel's INIT is handled, in the main thread, before
	 * any worker exists; read-only afterwards.
	 */
	bool offered;		/* the kernel offers FUSE_PASSTHROUGH */
	bool asked;		/* our INIT reply asks for it */
	bool active;		/* the handshake enabled it: opens are tracked */
	atomic_bool broken;	/* a registration failed: no more tries */

	pthread_mutex_t lock;
	pthread_cond_t cond;	/* an inode stopped being busy */
	struct htab inodes;	/* protected by lock: struct pt_inode, by ino */
	struct list_node idle;	/* protected by lock: idle ids, most recent first */
	uint32_t nidle;		/* protected by lock */
};

/* The INIT reply hook (fuse/session_io.h): ask for passthrough. */
static void init_reply(void *arg, struct session_io_init *init)
{
	struct passthrough *pt = arg;

	if (pt->asked) {
		init->flags2 |= (uint32_t)(FUSE_PASSTHROUGH >> 32);
		init->max_stack_depth = PT_MAX_STACK_DEPTH;
	}
}

int passthrough_create(struct sfs *fs, struct passthrough **out)
{
	struct passthrough *pt = calloc(1, sizeof(*pt));
	const char *env = getenv("STAGEFS_TEST_NO_PASSTHROUGH");

	if (!pt)
		return -ENOMEM;
	if (htab_init(&pt->inodes, PT_BUCKETS_MIN)) {
		free(pt);
		return -ENOMEM;
	}
	pt->fs = fs;
	pt->mode = fs->cfg.passthrough;
	pt->fuse_fd = -1;
	pt->min_size = fs->cfg.passthrough_min_size;
	pt->test_refuse = env && env[0] && strcmp(env, "0");
	pthread_mutex_init(&pt->lock, NULL);
	pthread_cond_init(&pt->cond, NULL);
	list_init(&pt->idle);
	if (pt->mode != CFG_OFF) {
		struct session_io_hooks h = { .init_reply = init_reply, .arg = pt };
		int ret = session_io_register(fs->sio, &h);

		if (ret) {
			passthrough_destroy(pt);
			return ret;
		}
	}
	*out = pt;
	return 0;
}

void passthrough_destroy(struct passthrough *pt)
{
	if (!pt)
		return;
	htab_for_each_safe(&pt->inodes, i, pos, tmp) {
		struct pt_inode *e = htab_entry(pos, struct pt_inode, node);

		/* the backing ids go with the /dev/fuse descriptor */
		if (e->pt_opens)
			cache_file_unpin(pt->fs->cache, e->cf);
		free(e);
	}
	htab_release(&pt->inodes);
	pthread_cond_destroy(&pt->cond);
	pthread_mutex_destroy(&pt->lock);
	free(pt);
}

bool passthrough_active(const struct passthrough *pt)
{
	return pt && pt->active && !atomic_load(&pt->broken);
}

uint32_t passthrough_idle_ids(struct passthrough *pt)
{
	uint32_t n;

	if (!pt)
		return 0;
	pthread_mutex_lock(&pt->lock);
	n = pt->nidle;
	pthread_mutex_unlock(&pt->lock);
	return n;
}

int passthrough_attach(struct passthrough *pt, struct fuse_session *se)
{
	if (pt)
		pt->fuse_fd = fuse_session_fd(se);
	return 0;
}

void passthrough_init(struct passthrough *pt, struct fuse_conn_info *conn)
{
	if (!pt)
		return;
#ifdef CONFIG_FUSE_PASSTHROUGH_API
	pt->offered = conn->capable & FUSE_CAP_PASSTHROUGH;
#else
	pt->offered = session_io_kernel_flags(pt->fs->sio) & FUSE_PASSTHROUGH;
	/* the read hook must see every request */
	conn->want &= ~FUSE_CAP_SPLICE_READ;
#endif
	if (pt->test_refuse)
		pt->offered = false;
	pt->asked = pt->mode != CFG_OFF && pt->offered;
	if (pt->asked) {
		/* the kernel refuses passthrough together with writeback cache */
		conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
#ifdef CONFIG_FUSE_PASSTHROUGH_API
		conn->want |= FUSE_CAP_PASSTHROUGH;
#endif
	}
}

/* True if this process has CAP_SYS_ADMIN in its effective set. */
static bool have_sys_admin(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long eff = 0;

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	return eff & (1ULL << 21);	/* CAP_SYS_ADMIN */
}

/* Register @fd as a backing file.  Returns the id (> 0) or -errno. */
static int backing_open(struct passthrough *pt, fuse_req_t req, int fd)
{
#ifdef CONFIG_FUSE_PASSTHROUGH_API
	if (req) {
		/* libfuse logs the error itself and returns 0 */
		int id = fuse_passthrough_open(req, fd);

		return id > 0 ? id : -EPERM;
	}
#endif
	struct fuse_backing_map map = { .fd = fd };
	int id = ioctl(pt->fuse_fd, FUSE_DEV_IOC_BACKING_OPEN, &map);

	if (id < 0)
		return -errno;
	return id > 0 ? id : -EIO;
}

static void backing_close(struct passthrough *pt, int32_t id)
{
	uint32_t arg = (uint32_t)id;

	/*
	 * The raw ioctl in both builds: fuse_passthrough_close() needs a live
	 * request, and an OPEN whose reply failed has none left.
	 */
	if (ioctl(pt->fuse_fd, FUSE_DEV_IOC_BACKING_CLOSE, &arg) < 0)
		log_warn("passthrough: closing backing id %d: %s", id, strerror(errno));
}

/*
 * Try to register a file of the cache filesystem as a backing file, as
 * every passthrough open will.  Returns 0, -EOPNOTSUPP when no probe file
 * could be made (decided at the first open instead), or the -errno of the
 * registration.
 */
static int probe_backing(struct passthrough *pt)
{
	int fd = open(pt->fs->cfg.cache_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	int id;

	if (fd < 0)
		return -EOPNOTSUPP;
	id = backing_open(pt, NULL, fd);
	close(fd);
	if (id < 0)
		return id;
	backing_close(pt, id);
	return 0;
}

int passthrough_handshake(struct passthrough *pt, struct fuse_session *se,
			  char *err, size_t errlen)
{
	struct fuse_buf fbuf = { .mem = NULL };
	const char *why = NULL;
	int ret;

	if (!pt || (pt->mode == CFG_OFF && !session_io_hooked(pt->fs->sio)))
		return 0;
	/*
	 * The kernel queued INIT when it mounted: answer it here, so that the
	 * verdict is known before the mount is reported up, and before
	 * uring_start() (the kernel takes ring commands only after INIT).
	 */
	do {
		ret = fuse_session_receive_buf(se, &fbuf);
	} while (ret == -EINTR || ret == -EAGAIN);
	if (ret <= 0 || fuse_session_exited(se)) {
		free(fbuf.mem);
		snprintf(err, errlen, "no INIT from the kernel: %s",
			 ret < 0 ? strerror(-ret) : "connection closed");
		return ret < 0 ? ret : -EIO;
	}
	fuse_session_process_buf(se, &fbuf);
	free(fbuf.mem);
	if (fuse_session_exited(se)) {
		snprintf(err, errlen, "the kernel's INIT failed");
		return -EIO;
	}
	if (pt->mode == CFG_OFF)
		return 0;

	if (!pt->offered) {
		why = pt->test_refuse ? "STAGEFS_TEST_NO_PASSTHROUGH is set" :
		      "the kernel does not offer FUSE_PASSTHROUGH";
		ret = -EOPNOTSUPP;
	} else {
		ret = probe_backing(pt);
		if (ret == -EPERM)
			why = have_sys_admin() ?
			      "the kernel did not enable it on this mount" :
			      "registering backing files needs CAP_SYS_ADMIN";
		else if (ret == -ELOOP)
			why = "cache_dir is on a stacked filesystem";
		else if (ret && ret != -EOPNOTSUPP)
			why = strerror(-ret);
		if (ret == -EOPNOTSUPP)
			ret = 0;
	}
	if (why) {
		if (pt->mode == CFG_ON) {
			snprintf(err, errlen, "passthrough=on, but %s", why);
			return ret;
		}
		log_notice("passthrough: off (%s)", why);
		return 0;
	}
	pt->active = true;
	log_info("passthrough: on (fully cached, verified files are read by the kernel)");
	return 0;
}

/* ---- opens ---- */

static bool inode_eq(const struct htab_node *n, const void *key)
{
	return htab_entry(n, struct pt_inode, node)->ino == *(const uint64_t *)key;
}

/* The entry of @ino, created if @create.  pt->lock held. */
static struct pt_inode *inode_get(struct passthrough *pt, uint64_t ino, bool create)
{
	uint64_t h = htab_hash_u64(ino);
	struct htab_node *n = htab_find(&pt->inodes, h, inode_eq, &ino);
	struct pt_inode *e;

	if (n)
		return htab_entry(n, struct pt_inode, node);
	if (!create || !(e = calloc(1, sizeof(*e))))
		return NULL;
	e->ino = ino;
	/* doubles once inodes outnumber buckets; if it cannot, chains grow */
	(void)htab_reserve(&pt->inodes, pt->inodes.n + 1);
	htab_add(&pt->inodes, &e->node, h);
	return e;
}

/* Free @e once nothing refers to it.  pt->lock held. */
static void inode_maybe_free(struct passthrough *pt, struct pt_inode *e)
{
	if (e->pt_opens || e->daemon_opens || e->busy || e->backing_id > 0)
		return;
	htab_del(&pt->inodes, &e->node);
	free(e);
}

/*
 * Make @cf a backing file: pin it, check it is whole and verified, and
 * register the descriptor the check used (the cache's own, from its fd
 * cache: opening the path again cost a second path walk per open).
 * Returns the backing id (> 0), with @cf pinned, or -errno, with nothing
 * held.  -ENODATA means "not fully cached".
 */
static int backing_setup(struct passthrough *pt, fuse_req_t req, struct cfile *cf,
			 struct pt_sig *sig)
{
	struct cache *c = pt->fs->cache;
	struct stat st;
	int fd, ret;

	/* pinned first: nothing may be evicted between the check and the use */
	cache_file_pin(c, cf);
	ret = cache_file_verify_fd(c, cf, &fd);
	if (ret)
		goto out_unpin;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto out_release_fd;
	}
	*sig = (struct pt_sig){ st.st_dev, st.st_ino, st.st_ctim };
	/*
	 * The kernel keeps its own reference to the file: no descriptor per
	 * open file.  Passthrough opens read it with the FUSE file's flags
	 * (read-only), not with this descriptor's.
	 */
	ret = backing_open(pt, req, fd);
	if (ret < 0) {
		if (!atomic_exchange(&pt->broken, true))
			log_warn("passthrough: cannot register a backing file (%s): off from now on",
				 strerror(-ret));
		goto out_release_fd;
	}
	cache_file_fd_release(c, cf);
	return ret;

out_release_fd:
	cache_file_fd_release(c, cf);
out_unpin:
	cache_file_unpin(c, cf);
	return ret;
}

/*
 * Can the idle id of @e serve an open of @cf again?  Pins @cf and returns
 * true when every chunk is still present and verified and the cache file
 * is the one registered, untouched since (see the top); otherwise returns
 * false with nothing held.  @e is busy (its fields are ours).
 */
static bool backing_reusable(struct passthrough *pt, struct pt_inode *e,
			     struct cfile *cf)
{
	struct cache *c = pt->fs->cache;
	char path[PATH_MAX];
	struct stat st;

	cache_file_pin(c, cf);
	if (cache_file_all_verified(c, cf) &&
	    !cache_file_path(c, cf, path, sizeof(path)) && !stat(path, &st) &&
	    st.st_dev == e->sig.dev && st.st_ino == e->sig.ino &&
	    st.st_ctim.tv_sec == e->sig.ctime.tv_sec &&
	    st.st_ctim.tv_nsec == e->sig.ctime.tv_nsec)
		return true;
	cache_file_unpin(c, cf);
	return false;
}

static void idle_unlink(struct passthrough *pt, struct pt_inode *e)
{
	list_del(&e->idle);
	pt->nidle--;
}

int passthrough_open(struct passthrough *pt, fuse_req_t req, uint64_t ino,
		     struct cfile *cf, uint64_t size, struct fuse_file_info *fi)
{
	struct pt_inode *e;
	int id;

	if (!pt || !pt->active)
		return 0;	/* untracked: the kernel never sees a backing file */
	pthread_mutex_lock(&pt->lock);
	e = inode_get(pt, ino, true);
	if (!e) {
		pthread_mutex_unlock(&pt->lock);
		return -ENOMEM;
	}
	while (e->busy)
		pthread_cond_wait(&pt->cond, &pt->lock);
	if (e->backing_id > 0 && e->pt_opens) {
		/* the inode is in passthrough mode: same backing file */
		e->pt_opens++;
		id = e->backing_id;
		pthread_mutex_unlock(&pt->lock);
		goto out_passthrough;
	}
	if (e->daemon_opens || !cf || !size || size <= pt->min_size ||
	    atomic_load(&pt->broken)) {
		/*
		 * Through the page cache: the kernel would refuse a mix; an
		 * empty file has nothing to read; passthrough_min_size keeps
		 * small files where keep_cache serves hot re-reads without a
		 * backing file (docs/passthrough.md).
		 */
		e->daemon_opens++;
		pthread_mutex_unlock(&pt->lock);
		return 0;
	}
	e->busy = true;
	if (e->backing_id > 0)
		idle_unlink(pt, e);
	pthread_mutex_unlock(&pt->lock);

	id = -ENOENT;
	if (e->backing_id > 0) {
		/* registered by an earlier open and kept since */
		if (backing_reusable(pt, e, cf)) {
			id = e->backing_id;
			stats_node_add(pt->fs->stats, STATS_NODE_PT_REUSED, 1);
		} else {
			backing_close(pt, e->backing_id);
			e->backing_id = 0;
		}
	}
	if (id < 0)
		id = backing_setup(pt, req, cf, &e->sig);

	pthread_mutex_lock(&pt->lock);
	e->busy = false;
	pthread_cond_broadcast(&pt->cond);
	if (id < 0) {
		if (id != -ENODATA)
			log_debug("passthrough: inode %llu stays on the daemon path: %s",
				  (unsigned long long)ino, strerror(-id));
		e->daemon_opens++;
		pthread_mutex_unlock(&pt->lock);
		return 0;
	}
	e->backing_id = id;
	e->cf = cf;
	e->pt_opens = 1;
	pthread_mutex_unlock(&pt->lock);

out_passthrough:
#ifdef CONFIG_FUSE_PASSTHROUGH_API
	fi->backing_id = id;
#else
	session_io_set_backing_id(id);
#endif
	return 1;
}

/* Close the least recently used idle ids beyond PT_IDLE_MAX.  pt->lock held. */
static void idle_trim(struct passthrough *pt, int32_t *ids, size_t *n, size_t cap)
{
	while (pt->nidle > PT_IDLE_MAX && *n < cap) {
		struct pt_inode *e = list_entry(list_last(&pt->idle), struct pt_inode, idle);

		idle_unlink(pt, e);
		ids[(*n)++] = e->backing_id;
		e->backing_id = 0;
		inode_maybe_free(pt, e);
	}
}

void passthrough_release(struct passthrough *pt, uint64_t ino, bool was_passthrough)
{
	struct pt_inode *e;
	struct cfile *cf = NULL;
	int32_t ids[2];
	size_t n = 0;

	if (!pt || !pt->active)
		return;
	pthread_mutex_lock(&pt->lock);
	e = inode_get(pt, ino, false);
	if (!e) {
		pthread_mutex_unlock(&pt->lock);
		return;
	}
	if (!was_passthrough) {
		if (e->daemon_opens)	/* 0: an open of a daemon before not known here */
			e->daemon_opens--;
	} else if (e->pt_opens && --e->pt_opens == 0) {
		/*
		 * The kernel dropped the inode's backing file before RELEASE:
		 * the id may be closed, or kept idle for the next open.
		 */
		cf = e->cf;
		e->cf = NULL;
		if (e->forgotten || atomic_load(&pt->broken)) {
			ids[n++] = e->backing_id;
			e->backing_id = 0;
			e->forgotten = false;
		} else {
			list_add(&pt->idle, &e->idle);
			pt->nidle++;
			idle_trim(pt, ids, &n, 1);
		}
	}
	inode_maybe_free(pt, e);
	pthread_mutex_unlock(&pt->lock);
	for (size_t i = 0; i < n; i++)
		backing_close(pt, ids[i]);
	if (cf)
		cache_file_unpin(pt->fs->cache, cf);
}

void passthrough_forget(struct passthrough *pt, uint64_t ino)
{
	struct pt_inode *e;
	int32_t id = 0;

	if (!pt || !pt->active)
		return;
	pthread_mutex_lock(&pt->lock);
	e = inode_get(pt, ino, false);
	while (e && e->busy) {
		pthread_cond_wait(&pt->cond, &pt->lock);
		e = inode_get(pt, ino, false);
	}
	if (e && e->pt_opens) {
		/* a RELEASE still to come (it may be handled after the FORGET) */
		e->forgotten = true;
	} else if (e && e->backing_id > 0) {
		idle_unlink(pt, e);
		id = e->backing_id;
		e->backing_id = 0;
		inode_maybe_free(pt, e);
	}
	pthread_mutex_unlock(&pt->lock);
	if (id > 0)
		backing_close(pt, id);
}

void passthrough_adopt(struct passthrough *pt, uint64_t ino, int32_t backing_id,
		       struct cfile *cf)
{
	struct pt_inode *e;

	if (!pt || !pt->active)
		return;
	pthread_mutex_lock(&pt->lock);
	e = inode_get(pt, ino, true);
	if (!e) {
		pthread_mutex_unlock(&pt->lock);
		return;
	}
	if (backing_id <= 0) {
		e->daemon_opens++;
	} else if (e->pt_opens) {
		e->pt_opens++;	/* the kernel has one backing file per inode */
	} else {
		e->backing_id = backing_id;
		e->cf = cf;
		if (cf)
			cache_file_pin(pt->fs->cache, cf);
		e->pt_opens = 1;
	}
	pthread_mutex_unlock(&pt->lock);
}

int32_t passthrough_backing_id(struct passthrough *pt, uint64_t ino)
{
	struct pt_inode *e;
	int32_t id = 0;

	if (!pt || !pt->active)
		return 0;
	pthread_mutex_lock(&pt->lock);
	e = inode_get(pt, ino, false);
	if (e && e->pt_opens)
		id = e->backing_id;
	pthread_mutex_unlock(&pt->lock);
	return id;
}
