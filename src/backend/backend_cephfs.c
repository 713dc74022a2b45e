/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_cephfs: a CephFS directory, or a snapshot of one, as a dataset
 * ("cephfs://FSNAME/PATH[@SNAPSHOT]"), read through libcephfs, Ceph's own
 * client library: no kernel client, no ceph-fuse, no copy into RADOS.
 *
 * Connection.  The cluster is reached exactly as rados:// reaches it
 * (sfs_rados_connect(): ceph_conf, client_id, keyring, rados_timeout, the
 * same messages), and the file system is mounted on that handle
 * (ceph_create_from_rados(), ceph_select_filesystem()).
 *
 * Metadata.  At mount the tree under PATH (or PATH/.snap/SNAPSHOT) is
 * walked once with readdirplus (one MDS reply carries a directory's names
 * and attributes) into a manifest (manifest.h), the format every other
 * source is served from, so lookups, getattrs and listings never reach
 * the MDS again.  The walk is dirscan's (dirscan.h, over this file's
 * source calls): dir_scan_threads directories at once, breadth first, and
 * with dir_scan_background the mount answers once the top directory is
 * read, from the walk's live index until the manifest is in
 * (scanserve.h).  Regular files, directories and symlinks are kept; a
 * file with several names is one inode with hard links; other types are
 * skipped (counted in the log).
 *
 * Identity.  A file's content id (the cache's name for its bytes) is the
 * XXH3-128 of the cluster's fsid, the file system's name, the inode
 * number, the snapshot id (a snapshot's files have their own), size,
 * mtime, ctime and the inode's change version: any change gives the file
 * a new cache file, and two clusters never share one.
 *
 * Reads.  A file whose objects the walk mapped (cephfs_objs.h) is read
 * from them directly, asynchronously, into the caller's buffer: no thread
 * waits for it, and librados's OSD timeout (rados_timeout) bounds it.
 * What libcephfs must do runs on a pool of threads (its calls block), at
 * most cephfs_threads at once: a read through the client (opening the
 * file by path, reading the chunk into a buffer of its own and copying it
 * out once finished), and the version check after a direct read of a
 * live tree.  Outside a snapshot, the file's attributes are read after the
 * read: unless its content id is still the one mounted, the read fails
 * with EIO (logged), so a file changed under the mount is never mixed into
 * the cache; a remount serves the new version.  A snapshot is immutable
 * and read without the checks, so its direct reads never reach the pool.
 * The pool's work is bounded by rados_timeout too: a thread stuck on a
 * dead OSD or MDS is abandoned (its buffer is its own, so a late answer
 * writes nowhere it should not) and the read fails with ETIMEDOUT, then
 * EIO to the reader.
 */
#include "backend.h"

#ifdef CONFIG_HAVE_CEPHFS

#include "cephfs_objs.h"
#include "config.h"
#include "dirscan.h"
#include "log.h"
#include "manifest/manifest.h"
#include "osdmap_refresh.h"
#include "rados.h"
#include "scanserve.h"

#include <cephfs/libcephfs.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define CFS_WANT	(CEPH_STATX_BASIC_STATS | CEPH_STATX_VERSION)
#define CFS_THREADS_MAX	64

/*
 * A read's states: RQ_OSD while its objects are read directly (no
 * thread waits; librados's OSD timeout bounds it), RQ_QUEUED and
 * RQ_RUNNING while the pool has it, then RQ_DONE, or RQ_TIMEDOUT when the
 * watchdog answered for the pool.
 */
enum { RQ_OSD, RQ_QUEUED, RQ_RUNNING, RQ_DONE, RQ_TIMEDOUT };

/* One chunk read (struct backend_aio to the engine). */
struct backend_aio {
	struct backend_aio *next;	/* queue, or the pool's list of all */
	struct backend_aio *all_next, *all_prev;
	struct backend_cephfs *c;
	struct sfs_attr file;
	uint32_t idx;
	size_t len;
	void *buf;			/* the caller's: written in RQ_OSD, or by the pool while RQ_RUNNING */
	void (*done)(void *arg);
	void *arg;
	uint64_t deadline_ms;
	int state, res;
	int refs;			/* the caller's, the backend's (the direct read's, then the pool's) */
	struct cfsobj_aread *ar;	/* RQ_OSD */
	uint64_t cino;			/* read directly: the CephFS inode, for the check */
	bool check_only;		/* the pool checks the version of bytes read directly */
};

struct backend_cephfs {
	struct backend be;
	rados_t rados;
	struct osdmap_refresh *maps;	/* after a direct read timed out */
	struct ceph_mount_info *cm;
	char *fs_name;
	char *root;		/* in the file system: /PATH or /PATH/.snap/SNAP */
	bool snapshot;
	char fsid[64];
	uint64_t timeout_ms;
	uint64_t snapid;	/* the root's: a snapshot's id, or CEPH_NOSNAP */

	/* direct reads (see the top): the walk's record, then the map */
	bool direct;			/* cephfs_direct_reads, until RADOS refuses */
	struct cfsobj_builder *objs_b;	/* during the walk */
	struct cfsobj_map *_Atomic objs;
	struct cfsobj_reader *rd;
	atomic_bool told_missing, told_layout, told_corrupt;

	/* the walk (see the top) */
	struct scanserve ss;
	char *cache_dir;
	char stamp[400];	/* the tree's when the walk began ... */
	bool stamped;		/* ... if it could be taken */
	uint64_t walk_t0;
	unsigned walk_threads;

	pthread_mutex_t lock;
	pthread_cond_t work;	/* queue not empty, or stopping */
	pthread_cond_t tick;	/* the watchdog's sleep (CLOCK_MONOTONIC) */
	struct backend_aio *qhead, *qtail;
	struct backend_aio *all;	/* queued and running, for the watchdog */
	unsigned osd_reads;		/* in RQ_OSD */
	pthread_cond_t osd_idle;	/* osd_reads fell to 0 */
	bool stopping;
	unsigned nthreads;	/* started */
	pthread_t threads[CFS_THREADS_MAX];
	pthread_t watchdog;
	bool watchdog_started;
};

static struct log_ratelimit rl_read = LOG_RATELIMIT_INIT(10000, 10);

static struct backend_cephfs *to_cfs(struct backend *be)
{
	return (struct backend_cephfs *)be;
}

/* ---- identity and attributes ---- */

static void content_id(const struct backend_cephfs *c, const struct ceph_statx *st,
		       struct sfs_id *out)
{
	char buf[sizeof(c->fsid) + 256 + 10 * sizeof(uint64_t)];
	uint64_t v[10] = {
		st->stx_ino, (uint64_t)st->stx_dev /* the snapshot id */, st->stx_size,
		(uint64_t)st->stx_mtime.tv_sec, (uint64_t)st->stx_mtime.tv_nsec,
		(uint64_t)st->stx_ctime.tv_sec, (uint64_t)st->stx_ctime.tv_nsec,
		st->stx_version, 0x63657068 /* "ceph" */, 1,
	};
	size_t n = 0, l;

	l = strnlen(c->fsid, sizeof(c->fsid) - 1) + 1;
	memcpy(buf, c->fsid, l);
	n += l;
	l = strnlen(c->fs_name, 255) + 1;
	memcpy(buf + n, c->fs_name, l);
	n += l;
	memcpy(buf + n, v, sizeof(v));
	n += sizeof(v);
	sfs_id_of(buf, n, out);
}

static void attr_from_statx(const struct backend_cephfs *c, const struct ceph_statx *st,
			    struct sfs_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->mode = st->stx_mode;
	a->uid = st->stx_uid;
	a->gid = st->stx_gid;
	a->size = S_ISDIR(st->stx_mode) ? 0 : st->stx_size;
	a->atime = st->stx_atime;
	a->mtime = st->stx_mtime;
	a->ctime = st->stx_ctime;
	a->nlink = S_ISDIR(st->stx_mode) ? 0 : st->stx_nlink;
	if (S_ISREG(st->stx_mode))
		content_id(c, st, &a->content);
}

/* ---- the walk: dirscan's, over these calls (struct dirscan_source) ---- */

struct cfs_dir {
	int fd;			/* the directory: entries are stat'ed relative to it */
	struct ceph_dir_result *d;
	struct dirent de;	/* the entry handed out last: its name lives here */
};

/* @rel (relative to the root, "" the root) as a path in the file system. */
static int cfs_path(const struct backend_cephfs *c, const char *rel, char *buf, size_t size)
{
	if ((size_t)snprintf(buf, size, "%s%s%s", c->root, rel[0] ? "/" : "", rel) < size)
		return 0;
	return -ENAMETOOLONG;
}

static int src_opendir(void *arg, const char *rel, void **out)
{
	struct backend_cephfs *c = arg;
	char path[PATH_MAX];
	struct cfs_dir *d;
	int r = cfs_path(c, rel, path, sizeof(path));

	if (r)
		return r;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->fd = ceph_open(c->cm, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
	if (d->fd < 0) {
		r = d->fd;
		free(d);
		return r;
	}
	r = ceph_fdopendir(c->cm, d->fd, &d->d);
	if (r < 0) {
		ceph_close(c->cm, d->fd);
		free(d);
		return r;
	}
	*out = d;
	return 0;
}

/*
 * Where the file @in (inode @ino, content id @content) keeps its bytes, for
 * direct reads: its layout, from what the client holds (no request).  The
 * client's layout call leaves out a pool namespace, and asking for it
 * (the ceph.file.layout.pool_namespace vxattr) is an MDS request a file,
 * which made the walk 6.7 times slower; a file in a namespace has no
 * object of its name outside it, so its direct read finds none and goes
 * through the client (cfs_read_direct()).
 */
static void record_objects(struct backend_cephfs *c, struct Inode *in, uint64_t ino,
			   const struct sfs_id *content)
{
	struct ceph_file_layout fl;
	struct cfsobj_layout l;

	ceph_ll_file_layout(c->cm, in, &fl);
	l = (struct cfsobj_layout){ .stripe_unit = fl.fl_stripe_unit,
				    .stripe_count = fl.fl_stripe_count,
				    .object_size = fl.fl_object_size,
				    .pool = (int64_t)(int32_t)fl.fl_pg_pool };
	if (cfsobj_builder_add(c->objs_b, content, ino, &l) == -EINVAL &&
	    !atomic_exchange(&c->told_layout, true))
		log_info("%s: a file's layout is not a striping stagefs follows: such files are read through the client",
			 c->be.uri);
}

static int src_readdir(void *arg, void *dir, const char *rel, struct dirscan_entry *e,
		       char *target, size_t tlen)
{
	struct backend_cephfs *c = arg;
	struct cfs_dir *d = dir;
	struct ceph_statx st;
	struct Inode *in = NULL;
	uint64_t ino = 0;	/* a file's, as readdir gave it */
	int r;

	(void)rel;
	for (;;) {
		r = ceph_readdirplus_r(c->cm, d->d, &d->de, &st, CFS_WANT, AT_SYMLINK_NOFOLLOW,
				       c->objs_b ? &in : NULL);
		if (r <= 0)
			return r;
		if (strcmp(d->de.d_name, ".") && strcmp(d->de.d_name, ".."))
			break;
		if (in)
			ceph_ll_put(c->cm, in);
		in = NULL;
	}
	r = 1;
	memset(e, 0, sizeof(*e));
	e->name = d->de.d_name;
	if (!S_ISREG(st.stx_mode) && !S_ISDIR(st.stx_mode) && !S_ISLNK(st.stx_mode)) {
		e->skip = true;
		goto out;
	}
	if (S_ISREG(st.stx_mode)) {
		ino = st.stx_ino;
		/*
		 * readdirplus gives what the MDS has; a file another client
		 * is writing has its size and times in that client's caps.
		 * A statx of our own asks for them (the MDS recalls the
		 * writer's): local where we hold the caps already, the
		 * common case; one name under the open directory, no walk
		 * from the root.
		 */
		r = ceph_statxat(c->cm, d->fd, d->de.d_name, &st, CFS_WANT, AT_SYMLINK_NOFOLLOW);
		if (r < 0)
			goto out;
		r = 1;
		if (!S_ISREG(st.stx_mode)) {
			r = -EAGAIN;	/* replaced during the walk */
			goto out;
		}
		e->multi = st.stx_nlink > 1;
		e->dev = (uint64_t)st.stx_dev;
		e->ino = st.stx_ino;
	} else if (S_ISLNK(st.stx_mode)) {
		r = ceph_readlinkat(c->cm, d->fd, d->de.d_name, target, tlen - 1);
		if (r < 0)
			goto out;
		target[r] = '\0';
		r = 1;
	}
	attr_from_statx(c, &st, &e->a);
	/* the inode readdir gave is the one the name has now */
	if (in && S_ISREG(st.stx_mode) && ino == st.stx_ino)
		record_objects(c, in, ino, &e->a.content);
out:
	if (in)
		ceph_ll_put(c->cm, in);
	return r;
}

static void src_closedir(void *arg, void *dir)
{
	struct backend_cephfs *c = arg;
	struct cfs_dir *d = dir;

	ceph_closedir(c->cm, d->d);
	ceph_close(c->cm, d->fd);	/* fdopendir's closedir leaves it open */
	free(d);
}

static int src_getattr(void *arg, const char *rel, uint32_t type, struct sfs_attr *a)
{
	struct backend_cephfs *c = arg;
	struct ceph_statx st;
	char path[PATH_MAX];
	int r = cfs_path(c, rel, path, sizeof(path));

	(void)type;	/* asked: a type changed during the walk is an error */
	if (!r)
		r = ceph_statx(c->cm, path, &st, CFS_WANT, AT_SYMLINK_NOFOLLOW);
	if (r < 0)
		return r;
	attr_from_statx(c, &st, a);
	/* the manifest counts a directory's links itself: the MDS's count, as it will */
	if (S_ISDIR(st.stx_mode))
		a->nlink = st.stx_nlink;
	return 0;
}

static int src_readlink(void *arg, const char *rel, char *buf, size_t size)
{
	struct backend_cephfs *c = arg;
	char path[PATH_MAX];
	int r = cfs_path(c, rel, path, sizeof(path));

	return r ? r : ceph_readlink(c->cm, path, buf, size);
}

/* Start walking the tree: 0 once its top directory is read, with *@out set. */
static int cfs_walk_start(struct backend_cephfs *c, struct dirscan **out, char *err,
			  size_t errlen)
{
	const struct dirscan_source src = {
		.root = c->be.uri,
		.arg = c,
		.opendir = src_opendir,
		.readdir = src_readdir,
		.closedir = src_closedir,
		.getattr = src_getattr,
		.readlink = src_readlink,
	};
	struct ceph_statx st;
	struct sfs_attr a;
	int ret;

	ret = ceph_statx(c->cm, c->root, &st, CFS_WANT, 0);
	if (ret < 0) {
		snprintf(err, errlen, "cephfs://%s%s: %s%s", c->fs_name, c->root, strerror(-ret),
			 c->snapshot && ret == -ENOENT ? " (no such snapshot?)" : "");
		return ret;
	}
	if (!S_ISDIR(st.stx_mode)) {
		snprintf(err, errlen, "cephfs://%s%s: not a directory", c->fs_name, c->root);
		return -ENOTDIR;
	}
	attr_from_statx(c, &st, &a);
	c->walk_t0 = now_ms();
	return dirscan_start_source(&src, &a, c->walk_threads, c->be.chunk_size,
				    scanserve_test_delay_us(), out, err, errlen);
}

/* ---- the saved walk ---- */

/*
 * CACHE_DIR/snapshots/<key>@ext, key = XXH3-128 of the cluster's fsid, the
 * file system, the root and the chunk size: another cluster's or another
 * tree's walk is never taken for this one.
 */
static void saved_path(const struct backend_cephfs *c, const char *cache_dir,
		       const char *ext, char *buf, size_t len)
{
	char key[PATH_MAX + 128], hex[SFS_ID_HEX_LEN + 1];
	struct sfs_id id;
	int n;

	n = snprintf(key, sizeof(key), "cephfs%c%s%c%s%c%s%c%u", 0, c->fsid, 0, c->fs_name, 0,
		     c->root, 0, c->be.chunk_size);
	sfs_id_of(key, (size_t)MIN(n, (int)sizeof(key)), &id);
	sfs_id_hex(&id, hex);
	snprintf(buf, len, "%s/snapshots/%s%s", cache_dir, hex, ext);
}

/*
 * What says the tree is as walked, without walking it: a snapshot's root
 * (inode, snapshot id, ctime; a snapshot never changes), or a live tree's
 * recursive statistics, which CephFS keeps on every directory
 * (ceph.dir.rctime: the newest ctime below, which any write, create,
 * remove, rename, chmod or chown moves; ceph.dir.rbytes, ceph.dir.rentries).
 */
static int tree_stamp(struct backend_cephfs *c, char *buf, size_t len)
{
	static const char *const rstat[] = { "ceph.dir.rctime", "ceph.dir.rbytes",
					     "ceph.dir.rentries" };
	struct ceph_statx st;
	size_t n;
	int r;

	r = ceph_statx(c->cm, c->root, &st, CFS_WANT, 0);
	if (r < 0)
		return r;
	n = (size_t)snprintf(buf, len, "%" PRIu64 " %" PRIu64 " %lld.%09ld", st.stx_ino,
			     (uint64_t)st.stx_dev, (long long)st.stx_ctime.tv_sec,
			     st.stx_ctime.tv_nsec);
	if (c->snapshot)
		return 0;
	for (size_t i = 0; i < 3; i++) {
		char v[64];

		r = ceph_getxattr(c->cm, c->root, rstat[i], v, sizeof(v) - 1);
		if (r < 0)
			return r;
		v[r] = '\0';
		n += (size_t)snprintf(buf + n, n < len ? len - n : 0, " %s", v);
	}
	return n < len ? 0 : -ENAMETOOLONG;
}

/* The stamp file: "SFSCFS1 INO SIZE MTIME_NS STAMP\n" of the manifest file it goes with. */
static int stamp_line(const char *manifest, const char *stamp, char *buf, size_t len)
{
	struct stat st;

	if (stat(manifest, &st) < 0)
		return -errno;
	snprintf(buf, len, "SFSCFS1 %" PRIu64 " %" PRIu64 " %" PRId64 " %s\n", (uint64_t)st.st_ino,
		 (uint64_t)st.st_size,
		 (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, stamp);
	return 0;
}

/*
 * Serve direct reads from the map of @m's files, @tag (the stamp line of
 * @m's file; "" for a walk not saved) in @buf (@len bytes, ours), or from
 * the saved one (@buf NULL).  Without a map, reads go through the client.
 */
static void objs_open(struct backend_cephfs *c, const char *cache_dir, const char *tag,
		      const struct manifest *m, void *buf, size_t len)
{
	struct cfsobj_map *map = NULL;
	char path[PATH_MAX], err[256];
	int r;

	if (buf) {
		r = cfsobj_map_open(buf, len, false, m, tag, &map, err, sizeof(err));
	} else {
		saved_path(c, cache_dir, ".cephfs-objs", path, sizeof(path));
		r = cfsobj_map_open_file(path, m, tag, &map, err, sizeof(err));
	}
	if (r) {
		log_info("%s: no usable map of the files' objects (%s)", c->be.uri, err);
		return;
	}
	log_info("%s: %" PRIu64 " files read from their objects directly (any other through the client)",
		 c->be.uri, cfsobj_map_count(map));
	cfsobj_map_close(atomic_exchange(&c->objs, map));
}

static void objs_load(struct backend_cephfs *c, const char *cache_dir, const char *tag,
		      const struct manifest *m)
{
	if (c->direct)
		objs_open(c, cache_dir, tag, m, NULL, 0);
}

/* Open the saved walk in *@m if its stamp is @stamp: 0, or -errno (walk then). */
static int saved_load(struct backend_cephfs *c, const char *cache_dir, const char *stamp,
		      struct manifest **m)
{
	char mpath[PATH_MAX], spath[PATH_MAX], want[512], have[512] = "", err[256];
	FILE *f;
	int ret;

	saved_path(c, cache_dir, ".cephfs", mpath, sizeof(mpath));
	saved_path(c, cache_dir, ".cephfs-stamp", spath, sizeof(spath));
	f = fopen(spath, "re");
	if (!f)
		return -errno;
	if (!fgets(have, sizeof(have), f))
		have[0] = '\0';
	fclose(f);
	ret = stamp_line(mpath, stamp, want, sizeof(want));
	if (ret)
		return ret;
	if (strcmp(have, want))
		return -ESTALE;
	ret = manifest_open_file(mpath, m, err, sizeof(err));
	if (ret)
		log_warn("%s: the saved walk %s: %s (walking again)", c->be.uri, mpath, err);
	else
		objs_load(c, cache_dir, want, *m);
	return ret;
}

/*
 * Save the walk @buf (@len bytes) with @stamp and open it in *@m: the
 * manifest, the map of its files' objects (tagged with the manifest
 * file's stamp line), then the stamp, which makes them count.
 */
static int saved_store(struct backend_cephfs *c, const char *cache_dir, const char *stamp,
		       const void *buf, size_t len, struct manifest **m)
{
	char mpath[PATH_MAX], spath[PATH_MAX], opath[PATH_MAX], dir[PATH_MAX], line[512];
	char err[256];
	void *obuf = NULL;
	size_t olen = 0;
	int ret;

	snprintf(dir, sizeof(dir), "%s/snapshots", cache_dir);
	saved_path(c, cache_dir, ".cephfs", mpath, sizeof(mpath));
	saved_path(c, cache_dir, ".cephfs-stamp", spath, sizeof(spath));
	saved_path(c, cache_dir, ".cephfs-objs", opath, sizeof(opath));
	ret = mkdir_p(dir, 0700);
	if (!ret)
		ret = write_file_atomic(mpath, buf, len, 0600, true);
	if (!ret)
		ret = stamp_line(mpath, stamp, line, sizeof(line));
	if (!ret) {
		ret = manifest_open_file(mpath, m, err, sizeof(err));
		if (ret)
			log_warn("%s: the walk just saved %s: %s", c->be.uri, mpath, err);
	}
	if (ret)
		return ret;
	if (c->objs_b && !cfsobj_builder_build(c->objs_b, *m, line, &obuf, &olen)) {
		if (write_file_atomic(opath, obuf, olen, 0600, true))
			unlink(opath);
		free(obuf);
	}
	ret = write_file_atomic(spath, line, strlen(line), 0600, true);
	if (ret) {
		manifest_close(*m);
		*m = NULL;
		return ret;
	}
	objs_load(c, cache_dir, line, *m);
	return 0;
}

/* The walk's record of objects is in a map now, or never will be. */
static void objs_walked(struct backend_cephfs *c)
{
	cfsobj_builder_destroy(c->objs_b);
	c->objs_b = NULL;
}

/*
 * The walk is over (scanserve's callback, or cfs_index() itself): saved
 * (unless the tree changed during it: then the next mount walks again)
 * and served from the file, mapped, as dir:// serves its scan, so that
 * the daemon holds none of it; else from @r's buffer.
 */
static int cfs_walked(void *arg, struct dirscan_result *r, struct manifest **m, char *err,
		      size_t errlen)
{
	struct backend_cephfs *c = arg;
	char again[sizeof(c->stamp)];
	int ret;

	log_notice("%s: %" PRIu64 " entries in %" PRIu64 " directories, %" PRIu64 " bytes%s, walked in %" PRIu64 " ms (%u threads)",
		   c->be.uri, r->entries, r->dirs, r->bytes,
		   r->skipped ? " (devices, fifos and sockets skipped)" : "",
		   now_ms() - c->walk_t0, c->walk_threads);
	free(r->stamps);
	if (c->stamped && !tree_stamp(c, again, sizeof(again)) && !strcmp(again, c->stamp)) {
		ret = saved_store(c, c->cache_dir, c->stamp, r->manifest, r->manifest_len, m);
		if (ret)
			log_warn("%s: cannot save the walk: %s", c->be.uri, strerror(-ret));
		else {
			free(r->manifest);
			objs_walked(c);
			return 0;
		}
	}
	ret = manifest_open(r->manifest, r->manifest_len, m, err, errlen);
	if (ret) {
		free(r->manifest);
	} else if (c->objs_b) {
		void *obuf;
		size_t olen;

		if (!cfsobj_builder_build(c->objs_b, *m, "", &obuf, &olen))
			objs_open(c, c->cache_dir, "", *m, obuf, olen);
	}
	objs_walked(c);
	return ret;
}

/*
 * The tree's index: the saved walk where its stamp still holds (and
 * dir_reuse_scan), else a walk, saved for the next mount; with
 * dir_scan_background the mount answers while it runs.
 */
static int cfs_index(struct backend_cephfs *c, const struct sfs_config *cfg, char *err,
		     size_t errlen)
{
	struct dirscan *scan;
	uint64_t t0 = now_ms();
	int ret;

	c->stamped = !tree_stamp(c, c->stamp, sizeof(c->stamp));
	if (c->stamped && cfg->dir_reuse_scan &&
	    !saved_load(c, cfg->cache_dir, c->stamp, &c->be.m) && c->direct &&
	    !atomic_load(&c->objs)) {
		/* no map of its objects (walked with direct reads off, or lost): again */
		log_info("%s: the saved walk has no map of the files' objects: walking again",
			 c->be.uri);
		manifest_close(c->be.m);
		c->be.m = NULL;
	}
	if (c->be.m) {
		log_notice("%s: the tree is as walked before (%s): index reused in %" PRIu64 " ms",
			   c->be.uri, c->snapshot ? "a snapshot" : "ceph.dir.rctime, rbytes, rentries",
			   now_ms() - t0);
		manifest_set_name(c->be.m, c->be.uri);
		return 0;
	}
	c->walk_threads = scanserve_threads(cfg);
	if (c->direct && !(c->objs_b = cfsobj_builder_create()))
		return -ENOMEM;
	ret = cfs_walk_start(c, &scan, err, errlen);
	if (ret)
		return ret;
	ret = scanserve_run(&c->ss, scan, cfg->dir_scan_background, err, errlen);
	if (!ret && c->ss.started)
		log_info("%s: walking in the background (%u threads); answering meanwhile",
			 c->be.uri, c->walk_threads);
	return ret;
}

/* ---- reads ---- */

/*
 * @file's path in the file system (the root's, then its own): 0 or -errno
 * (then @buf holds "", or the path cut short: something to log).
 */
static int file_path(struct backend_cephfs *c, const struct sfs_attr *file, char *buf,
		     size_t size)
{
	char rel[PATH_MAX];
	int r = scanserve_path(&c->ss, file->ino, rel, sizeof(rel));

	if (r < 0) {
		buf[0] = '\0';
		return r;
	}
	return (size_t)snprintf(buf, size, "%s/%s", c->root, rel) < size ? 0 : -ENAMETOOLONG;
}

/*
 * Is @st (asked for with result @r; -ENOENT, -ESTALE: the file is gone)
 * still the version mounted as @file, at @path?  0, or -EIO (logged).
 */
static int version_is(struct backend_cephfs *c, int r, const struct ceph_statx *st,
		      const struct sfs_attr *file, const char *path)
{
	struct sfs_id id;

	if (r < 0 && r != -ENOENT && r != -ESTALE) {
		log_limited(&rl_read, LOG_ERR, "cephfs://%s%s: statx: %s", c->fs_name, path,
			    strerror(-r));
		return -EIO;
	}
	if (!r) {
		content_id(c, st, &id);
		if (sfs_id_eq(&id, &file->content))
			return 0;
	}
	log_limited(&rl_read, LOG_ERR,
		    "cephfs://%s%s changed since it was mounted: remount to see the new version",
		    c->fs_name, path);
	return -EIO;
}

/* Is the file open at @fd still the version mounted as @file?  0, or -EIO (logged). */
static int check_version(struct backend_cephfs *c, int fd, const struct sfs_attr *file,
			 const char *path)
{
	struct ceph_statx st;

	if (c->snapshot)
		return 0;
	return version_is(c, ceph_fstatx(c->cm, fd, &st, CFS_WANT, 0), &st, file, path);
}

/*
 * The same of inode @ino, read directly: the client answers from the
 * capabilities it holds, or asks the MDS (which recalls a writer's), as
 * for an open file.
 */
static int check_version_ino(struct backend_cephfs *c, uint64_t ino, const struct sfs_attr *file)
{
	vinodeno_t vino = { .ino = { ino }, .snapid = { CEPH_NOSNAP } };
	struct ceph_statx st;
	struct Inode *in;
	char path[PATH_MAX * 2];	/* only for a message: not cleared for every read */
	int r;

	r = ceph_ll_lookup_vino(c->cm, vino, &in);
	if (!r) {
		r = ceph_ll_getattr(c->cm, in, &st, CFS_WANT, 0, ceph_mount_perms(c->cm));
		ceph_ll_put(c->cm, in);
	}
	if (!r) {
		struct sfs_id id;

		/* the common case, before a path is built for a message */
		content_id(c, &st, &id);
		if (sfs_id_eq(&id, &file->content))
			return 0;
	}
	file_path(c, file, path, sizeof(path));
	return version_is(c, r, &st, file, path);
}

/*
 * Can @file be read from its objects?  1 with its CephFS inode number and
 * layout in @ino and @l, or 0: read it through the client.
 */
static int direct_lookup(struct backend_cephfs *c, const struct sfs_attr *file, uint64_t *ino,
			 struct cfsobj_layout *l)
{
	struct cfsobj_map *map = atomic_load(&c->objs);
	int r;

	if (!map || !__atomic_load_n(&c->direct, __ATOMIC_RELAXED))
		return 0;
	r = cfsobj_map_find(map, file->ino, ino, l);
	if (r == -EBADMSG && !atomic_exchange(&c->told_corrupt, true))
		log_err("%s: the map of the files' objects is corrupt in places (the cache's disk?): those files are read through the client",
			c->be.uri);
	return r == 1;
}

/*
 * What a direct read of @file that gave @r means: @r (its length), -ENOENT
 * (read it through the client) or -EIO (logged).
 */
static int direct_result(struct backend_cephfs *c, const struct sfs_attr *file, int r)
{
	char path[PATH_MAX * 2];

	if (r >= 0)
		return r;
	/*
	 * A 17th data pool, or operations librados could not make (its
	 * completions): the client reads these files.
	 */
	if (r == -ENOSPC || r == -ENOMEM)
		return -ENOENT;
	if (r == -ENOENT) {
		if (!atomic_exchange(&c->told_missing, true))
			log_info("%s: a file has no object where its data would be (a hole, data kept inline, or a pool namespace): such reads go through the client",
				 c->be.uri);
		return -ENOENT;
	}
	if (r == -EPERM || r == -EACCES) {
		/* this client may not read the data pool itself: the client reads */
		if (__atomic_exchange_n(&c->direct, false, __ATOMIC_RELAXED))
			log_warn("%s: reading the data pool directly: %s (the key's OSD caps?); reading through the client from now on",
				 c->be.uri, strerror(-r));
		return -ENOENT;
	}
	file_path(c, file, path, sizeof(path));
	log_limited(&rl_read, LOG_ERR, "cephfs://%s%s: reading its objects: %s", c->fs_name, path,
		    strerror(-r));
	return -EIO;
}

/* Read chunk @idx (@len bytes) of @file into @buf through the client, on this thread.  @len or -errno. */
static int cfs_read(struct backend_cephfs *c, const struct sfs_attr *file, uint32_t idx,
		    void *buf, size_t len)
{
	char path[PATH_MAX * 2];
	uint64_t off = (uint64_t)idx * c->be.chunk_size;
	size_t done = 0;
	int fd, r;

	r = file_path(c, file, path, sizeof(path));
	if (r < 0)
		return r;
	fd = ceph_open(c->cm, path, O_RDONLY | O_NOFOLLOW, 0);
	if (fd < 0) {
		log_limited(&rl_read, LOG_ERR, "cephfs://%s%s: open: %s", c->fs_name, path,
			    strerror(-fd));
		return -EIO;
	}
	r = 0;
	while (!r && done < len) {
		int n = ceph_read(c->cm, fd, (char *)buf + done, (int64_t)(len - done),
				  (int64_t)(off + done));

		if (n < 0) {
			log_limited(&rl_read, LOG_ERR, "cephfs://%s%s: read: %s", c->fs_name, path,
				    strerror(-n));
			r = -EIO;
		} else if (n == 0) {
			log_limited(&rl_read, LOG_ERR,
				    "cephfs://%s%s: short read (truncated since it was mounted?)",
				    c->fs_name, path);
			r = -EIO;
		}
		done += n > 0 ? (size_t)n : 0;
	}
	/*
	 * One check, after the read: a change before it or during it has
	 * moved the inode's version (which only grows) by now.
	 */
	if (!r)
		r = check_version(c, fd, file, path);
	ceph_close(c->cm, fd);
	return r ? r : (int)len;
}

/* The pool's part of @h, on a pool thread, into @bounce: @h->len or -errno. */
static int pool_read(struct backend_cephfs *c, struct backend_aio *h, void *bounce)
{
	int r;

	if (h->check_only) {
		/* as above: one check, after the read (direct, this time) */
		r = check_version_ino(c, h->cino, &h->file);
		return r ? r : (int)h->len;
	}
	return bounce ? cfs_read(c, &h->file, h->idx, bounce, h->len) : -ENOMEM;
}

static void aio_put_locked(struct backend_aio *h)
{
	if (--h->refs == 0)
		free(h);
}

static void all_unlink(struct backend_cephfs *c, struct backend_aio *h)
{
	if (h->all_prev)
		h->all_prev->all_next = h->all_next;
	else if (c->all == h)
		c->all = h->all_next;
	if (h->all_next)
		h->all_next->all_prev = h->all_prev;
	h->all_next = h->all_prev = NULL;
}

static void *pool_thread(void *arg)
{
	struct backend_cephfs *c = arg;
	void *bounce = malloc(c->be.chunk_size);

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct backend_aio *h;
		int res;

		while (!c->qhead && !c->stopping)
			pthread_cond_wait(&c->work, &c->lock);
		if (!c->qhead)
			break;
		h = c->qhead;
		c->qhead = h->next;
		if (!c->qhead)
			c->qtail = NULL;
		h->state = RQ_RUNNING;
		pthread_mutex_unlock(&c->lock);
		res = pool_read(c, h, bounce);
		pthread_mutex_lock(&c->lock);
		if (h->state == RQ_RUNNING) {
			if (res > 0 && !h->check_only)
				memcpy(h->buf, bounce, h->len);
			h->res = res;
			h->state = RQ_DONE;
			all_unlink(c, h);
			pthread_mutex_unlock(&c->lock);
			h->done(h->arg);
			pthread_mutex_lock(&c->lock);
		}
		aio_put_locked(h);	/* timed out meanwhile: the watchdog answered */
	}
	pthread_mutex_unlock(&c->lock);
	free(bounce);
	return NULL;
}

/* Fails reads past their deadline with -ETIMEDOUT, every 100 ms. */
static void *watchdog_thread(void *arg)
{
	struct backend_cephfs *c = arg;

	pthread_mutex_lock(&c->lock);
	while (!c->stopping || c->all) {
		struct backend_aio *late = NULL, *h, *next;
		uint64_t now = now_ms();

		for (h = c->all; h; h = next) {
			next = h->all_next;
			if (h->deadline_ms > now && !c->stopping)
				continue;
			if (h->state == RQ_QUEUED) {
				/* out of the queue: the pool never sees it */
				struct backend_aio **p = &c->qhead, *prev = NULL;

				while (*p && *p != h) {
					prev = *p;
					p = &(*p)->next;
				}
				if (*p) {
					*p = h->next;
					if (c->qtail == h)
						c->qtail = prev;
					h->refs--;	/* the pool's */
				}
			}
			h->state = RQ_TIMEDOUT;
			h->res = -ETIMEDOUT;
			all_unlink(c, h);
			h->next = late;
			late = h;
		}
		for (h = late; h; h = next) {
			next = h->next;
			pthread_mutex_unlock(&c->lock);
			if (!c->stopping)
				log_limited(&rl_read, LOG_ERR,
					    "%s: a read got no answer in %" PRIu64 " ms (rados_timeout): EIO",
					    c->be.uri, c->timeout_ms);
			h->done(h->arg);
			pthread_mutex_lock(&c->lock);
		}
		if (c->stopping && !c->all)
			break;
		cond_wait_until_ns(&c->tick, &c->lock, now_ns() + 100 * 1000000ull);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Hand @h to the pool and its watchdog (c->lock held). */
static void pool_queue_locked(struct backend_cephfs *c, struct backend_aio *h)
{
	h->state = RQ_QUEUED;
	h->next = NULL;
	if (c->qtail)
		c->qtail->next = h;
	else
		c->qhead = h;
	c->qtail = h;
	h->all_next = c->all;
	h->all_prev = NULL;
	if (c->all)
		c->all->all_prev = h;
	c->all = h;
	pthread_cond_signal(&c->work);
}

/*
 * Every object of @h's read has answered (librados's thread): a snapshot's
 * bytes are done; a live tree's go to the pool for the version check,
 * which may wait on the MDS and so never runs here; what must be read
 * through the client goes to the pool too.
 */
static void direct_done(void *arg)
{
	struct backend_aio *h = arg;
	struct backend_cephfs *c = h->c;
	int raw = cfsobj_aread_end(h->ar);
	int r = direct_result(c, &h->file, raw);

	h->ar = NULL;
	if (raw == -ETIMEDOUT)	/* the map may be stale: osdmap_refresh.h */
		osdmap_refresh_ask(c->maps);
	pthread_mutex_lock(&c->lock);
	if (r == -ENOENT || (r > 0 && !c->snapshot)) {
		h->check_only = r > 0;
		if (!c->stopping) {
			pool_queue_locked(c, h);
			goto out;
		}
		r = -ESHUTDOWN;
	}
	h->res = r;
	h->state = RQ_DONE;
	pthread_mutex_unlock(&c->lock);
	h->done(h->arg);
	pthread_mutex_lock(&c->lock);
	aio_put_locked(h);	/* the direct read's */
out:
	if (--c->osd_reads == 0)
		pthread_cond_broadcast(&c->osd_idle);
	pthread_mutex_unlock(&c->lock);
}

static int cfs_aio_start(struct backend *be, const struct sfs_attr *file, uint32_t idx,
			 void *buf, size_t len, void (*done)(void *arg), void *arg,
			 struct backend_aio **out)
{
	struct backend_cephfs *c = to_cfs(be);
	struct backend_aio *h = calloc(1, sizeof(*h));
	struct cfsobj_layout l;

	if (!h)
		return -ENOMEM;
	h->c = c;
	h->file = *file;
	h->idx = idx;
	h->len = len;
	h->buf = buf;
	h->done = done;
	h->arg = arg;
	h->refs = 2;
	h->deadline_ms = now_ms() + c->timeout_ms;
	pthread_mutex_lock(&c->lock);
	if (c->stopping) {
		pthread_mutex_unlock(&c->lock);
		free(h);
		return -ESHUTDOWN;
	}
	*out = h;
	if (direct_lookup(c, file, &h->cino, &l)) {
		/*
		 * Straight into the caller's buffer, no thread waiting: the
		 * answer comes on librados's thread (direct_done()).
		 */
		h->state = RQ_OSD;
		c->osd_reads++;
		pthread_mutex_unlock(&c->lock);
		if (!cfsobj_aread_start(c->rd, h->cino, &l, (uint64_t)idx * c->be.chunk_size, buf,
					len, direct_done, h, &h->ar))
			return 0;	/* direct_done() may have run already */
		pthread_mutex_lock(&c->lock);
		if (--c->osd_reads == 0)	/* nothing started: the client reads it */
			pthread_cond_broadcast(&c->osd_idle);
	}
	pool_queue_locked(c, h);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int cfs_aio_finish(struct backend *be, struct backend_aio *h, struct sfs_id *hash,
			  bool *hashed, bool *from_peer)
{
	struct backend_cephfs *c = to_cfs(be);
	int res;

	(void)hash;
	*hashed = false;
	if (from_peer)
		*from_peer = false;
	pthread_mutex_lock(&c->lock);
	res = h->res;
	aio_put_locked(h);
	pthread_mutex_unlock(&c->lock);
	return res == -ETIMEDOUT ? -EIO : res;
}

/* ---- setup ---- */

/*
 * cephfs://FSNAME[/PATH][@SNAPSHOT][?OPT&...]: @fs, @path ("/" at least)
 * and @snap (NULL: none) point into @copy; OPT as rados:// takes them
 * (conf=, id=, keyring=, timeout=) into @o.
 */
static int parse_uri(const char *uri, char **copy, char **fs, char **path, char **snap,
		     struct sfs_rados_opts *o, char *err, size_t errlen)
{
	char *s, *q, *at, *slash;

	*copy = s = strdup(uri + strlen("cephfs://"));
	if (!s)
		return -ENOMEM;
	q = strchr(s, '?');
	if (q) {
		struct sfs_rados_uri cu = { 0 };
		char *save;

		*q++ = '\0';
		for (char *opt = strtok_r(q, "&", &save); opt; opt = strtok_r(NULL, "&", &save)) {
			char *v = strchr(opt, '=');

			if (v)
				*v++ = '\0';
			if (sfs_rados_uri_conn_opt(&cu, opt, v) <= 0) {
				snprintf(err, errlen, "%s: unknown or bad option '%s' (expected conf=, id=, keyring=, timeout=)",
					 uri, opt);
				return -EINVAL;
			}
		}
		sfs_rados_uri_opts(&cu, o);
	}
	slash = strchr(s, '/');
	if (slash)
		*slash = '\0';
	*fs = s;
	if (!s[0] || strchr(s, '@')) {
		snprintf(err, errlen, "%s: expected cephfs://FSNAME/PATH[@SNAPSHOT]", uri);
		return -EINVAL;
	}
	*path = slash ? slash + 1 : (char *)"";
	at = strrchr(*path, '@');
	*snap = NULL;
	if (at) {
		*at = '\0';
		*snap = at + 1;
		if (!(*snap)[0] || strchr(*snap, '/')) {
			snprintf(err, errlen, "%s: bad snapshot name", uri);
			return -EINVAL;
		}
	}
	for (char *p = *path; *p; p++)
		if ((p[0] == '.' && (p == *path || p[-1] == '/') &&
		     (p[1] == '/' || !p[1] || (p[1] == '.' && (p[2] == '/' || !p[2])))) ||
		    (p[0] == '/' && p[1] == '/')) {
			snprintf(err, errlen, "%s: the path may not hold '.', '..' or '//'", uri);
			return -EINVAL;
		}
	return 0;
}

static void cfs_destroy(struct backend *be);

static int cfs_create(const char *uri, const struct sfs_config *cfg, struct backend **out,
		      char *err, size_t errlen)
{
	struct backend_cephfs *c;
	struct sfs_rados_opts o;
	char *copy = NULL, *fs, *path, *snap;
	size_t n;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->be.ops = &backend_cephfs_ops;
	c->be.chunk_size = (uint32_t)cfg->chunk_size;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->work, NULL);
	pthread_cond_init(&c->osd_idle, NULL);
	cond_init_monotonic(&c->tick);
	scanserve_init(&c->ss, &c->be, uri, cfs_walked, c);
	sfs_rados_opts_from_config(&o, cfg);
	ret = parse_uri(uri, &copy, &fs, &path, &snap, &o, err, errlen);
	if (ret)
		goto out;
	c->be.uri = strdup(uri);
	c->ss.what = c->be.uri;
	c->cache_dir = strdup(cfg->cache_dir);
	c->fs_name = strdup(fs);
	n = strlen(path) + (snap ? strlen(snap) + 8 : 0) + 3;
	c->root = malloc(n);
	if (!c->be.uri || !c->cache_dir || !c->fs_name || !c->root) {
		ret = -ENOMEM;
		goto out;
	}
	while (path[0] && path[strlen(path) - 1] == '/')
		path[strlen(path) - 1] = '\0';
	snprintf(c->root, n, "/%s%s%s", path, snap ? (path[0] ? "/.snap/" : ".snap/") : "",
		 snap ? snap : "");
	c->snapshot = snap != NULL;
	c->timeout_ms = o.timeout_ms ? o.timeout_ms : 30000;

	ret = sfs_rados_connect(&o, &c->rados, err, errlen);
	if (ret)
		goto out;
	ret = osdmap_refresh_start(c->rados, uri, &c->maps);
	if (ret) {
		snprintf(err, errlen, "%s: cannot start a thread: %s", uri, strerror(-ret));
		goto out;
	}
	ret = rados_cluster_fsid(c->rados, c->fsid, sizeof(c->fsid));
	if (ret < 0) {
		snprintf(err, errlen, "%s: cannot read the cluster's fsid: %s", uri, strerror(-ret));
		goto out;
	}
	ret = ceph_create_from_rados(&c->cm, c->rados);
	if (!ret)
		ret = ceph_select_filesystem(c->cm, c->fs_name);
	if (ret) {
		snprintf(err, errlen, "%s: cannot create a CephFS client: %s", uri, strerror(-ret));
		goto out;
	}
	ret = ceph_mount(c->cm, "/");
	if (ret) {
		snprintf(err, errlen, "%s: cannot mount the file system '%s': %s%s", uri, c->fs_name,
			 strerror(-ret),
			 ret == -ENOENT ? " (no such file system? `ceph fs ls` lists them)" : "");
		goto out;
	}
	{
		struct ceph_statx st;

		/* the snapshot id reads are made at (a snapshot's files have it as st_dev) */
		ret = ceph_statx(c->cm, c->root, &st, CEPH_STATX_INO, 0);
		c->snapid = ret ? CEPH_NOSNAP : (uint64_t)st.stx_dev;
	}
	c->direct = cfg->cephfs_direct_reads;
	if (c->direct && cfsobj_reader_create(c->rados, c->snapid, &c->rd)) {
		ret = -ENOMEM;
		goto out;
	}
	ret = cfs_index(c, cfg, err, errlen);
	if (ret)
		goto out;
	for (unsigned i = 0; i < MIN(cfg->cephfs_threads, (unsigned)CFS_THREADS_MAX); i++) {
		ret = -pthread_create(&c->threads[i], NULL, pool_thread, c);
		if (ret) {
			snprintf(err, errlen, "%s: cannot start a read thread: %s", uri, strerror(-ret));
			goto out;
		}
		c->nthreads++;
	}
	ret = -pthread_create(&c->watchdog, NULL, watchdog_thread, c);
	if (ret) {
		snprintf(err, errlen, "%s: cannot start a thread: %s", uri, strerror(-ret));
		goto out;
	}
	c->watchdog_started = true;
	free(copy);
	*out = &c->be;
	return 0;
out:
	free(copy);
	cfs_destroy(&c->be);
	return ret;
}

static void cfs_destroy(struct backend *be)
{
	struct backend_cephfs *c = to_cfs(be);

	scanserve_destroy(&c->ss);	/* a walk still running: waited for, it uses the client */
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	/* reads at the OSDs: librados answers each within its OSD timeout */
	while (c->osd_reads)
		pthread_cond_wait(&c->osd_idle, &c->lock);
	pthread_cond_broadcast(&c->work);
	pthread_cond_broadcast(&c->tick);
	pthread_mutex_unlock(&c->lock);
	if (c->watchdog_started)
		pthread_join(c->watchdog, NULL);	/* every read answered */
	for (unsigned i = 0; i < c->nthreads; i++) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 2;
		if (pthread_timedjoin_np(c->threads[i], NULL, &ts)) {
			/*
			 * A read still waits on the cluster (a dead OSD): the
			 * client, the index and this struct stay for it.
			 */
			for (unsigned j = i; j < c->nthreads; j++)
				pthread_detach(c->threads[j]);
			log_warn("%s: a read is still waiting on the cluster at unmount; its client is left as it is",
				 be->uri ? be->uri : "cephfs");
			return;
		}
	}
	cfsobj_map_close(atomic_load(&c->objs));
	cfsobj_builder_destroy(c->objs_b);
	cfsobj_reader_destroy(c->rd);
	osdmap_refresh_stop(c->maps);
	if (c->cm) {
		ceph_unmount(c->cm);
		ceph_release(c->cm);
	}
	if (c->rados)
		rados_shutdown(c->rados);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->osd_idle);
	pthread_cond_destroy(&c->tick);
	if (be->m)
		manifest_close(be->m);
	free(c->fs_name);
	free(c->root);
	free(c->cache_dir);
	free(be->uri);
	free(c);
}

static int cfs_getattr(struct backend *be, uint64_t ino, struct sfs_attr *out)
{
	return scanserve_getattr(&to_cfs(be)->ss, ino, out);
}

static int cfs_lookup(struct backend *be, uint64_t parent, const char *name,
		      struct sfs_attr *out)
{
	return scanserve_lookup(&to_cfs(be)->ss, parent, name, out);
}

static int cfs_readdir(struct backend *be, uint64_t ino, struct sfs_dirlist *out)
{
	return scanserve_readdir(&to_cfs(be)->ss, ino, out);
}

static int cfs_readlink(struct backend *be, uint64_t ino, char *buf, size_t size)
{
	return scanserve_readlink(&to_cfs(be)->ss, ino, buf, size);
}

static int cfs_statfs(struct backend *be, uint64_t *bytes, uint64_t *files)
{
	return scanserve_statfs(&to_cfs(be)->ss, bytes, files);
}

const struct backend_ops backend_cephfs_ops = {
	.scheme = "cephfs",
	.create = cfs_create,
	.destroy = cfs_destroy,
	.getattr = cfs_getattr,
	.lookup = cfs_lookup,
	.readdir = cfs_readdir,
	.readlink = cfs_readlink,
	.read_chunk = backend_read_chunk_aio,
	.aio_start = cfs_aio_start,
	.aio_finish = cfs_aio_finish,
	.statfs = cfs_statfs,
};

#endif /* CONFIG_HAVE_CEPHFS */
