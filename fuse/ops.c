/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops: the FUSE low-level operations of a read-only dataset mount.
 *
 * Metadata comes from the backend (in memory: a manifest), data through the
 * node cache: a READ is answered from the cache file, and a missing chunk is
 * fetched from the backend once (src/cache/cache_fill.c's claim coordinates
 * concurrent readers).
 * The dataset is immutable, so entries and attributes carry long timeouts
 * and open files keep the kernel page cache (keep_cache); the inodes the
 * kernel keeps are counted at each entry reply and FORGET and bounded by
 * fuse/kinodes.h.
 *
 * READ is fuse/read.c's (read_op); file handles are fuse/fh.h's.  In
 * no-open mode (fuse/noopen.h) the kernel sends no OPEN and no RELEASE for
 * regular files, and .stagefs/ files are rendered at LOOKUP.
 *
 * Every request is replied to exactly once, by its handler or, for a READ
 * handed to the engine, by read.c's aread_reply(); helpers return -errno.
 */
#include "fs.h"

#include "access.h"
#include "datasets.h"
#include "fh.h"
#include "packentry.h"
#include "packpush.h"
#include "handles.h"
#include "kinodes.h"
#include "read.h"

#include "cred.h"
#include "log.h"
#include "noopen.h"
#include "passthrough.h"
#include "pushmap.h"
#include "ptacct.h"
#include "stats/stats.h"
#include "vfiles.h"
#include "prefetch/prefetch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct sfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void attr_to_stat(const struct sfs_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink ? a->nlink : 1;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_blksize = 128 * 1024;
	st->st_atim = a->atime;
	st->st_mtim = a->mtime;
	st->st_ctim = a->ctime;
}

static void virt_attr(struct sfs *fs, uint64_t ino, struct sfs_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = ino;
	a->mtime.tv_sec = a->atime.tv_sec = a->ctime.tv_sec =
		(time_t)(wall_s() - (now_ms() - fs->start_ms) / 1000);
	if (ino == SFS_CTL_DIR_INO || ino == FUSE_ROOT_ID) {
		a->mode = S_IFDIR | 0555;
		a->nlink = 2;
	} else {
		a->mode = S_IFREG | 0444;
		a->nlink = 1;
		a->size = 0;	/* direct_io: read until EOF */
	}
}

/*
 * No-open mode: .stagefs/ file @idx as user @uid sees it has the size and
 * mtime of @uid's latest rendering, or of a new one for caller @cr when @cr
 * is given (LOOKUP; @cr->uid is @uid).
 */
static int vfile_attr(struct sfs *fs, int idx, const struct cred *cr, uint32_t uid,
		      struct sfs_attr *a)
{
	int ret;

	if (!noopen_wanted(fs->no))
		return 0;
	ret = cr ? noopen_vfile_render(fs->no, idx, cr, &a->size, &a->mtime) :
		   noopen_vfile_attr(fs->no, idx, uid, &a->size, &a->mtime);
	a->ctime = a->mtime;
	return ret;
}

static int do_getattr(struct sfs *fs, uint64_t ino, struct sfs_attr *a)
{
	struct sfs_dataset *ds;
	uint64_t bino;
	int ret;

	if (ino >= SFS_VIRT_BASE) {
		if (ino != SFS_CTL_DIR_INO && ino != SFS_NOOPEN_PROBE_INO &&
		    vfiles_index(ino) < 0)
			return -ENOENT;
		virt_attr(fs, ino, a);
		if (vfiles_index(ino) >= 0)
			return vfile_attr(fs, vfiles_index(ino), NULL, vfiles_uid(ino), a);
		return 0;
	}
	if (sfs_is_multi_root(fs, ino)) {
		virt_attr(fs, ino, a);
		a->nlink = 2 + atomic_load(&fs->nds);
		return 0;
	}
	ds = sfs_ds(fs, ino, &bino);
	if (!ds)
		return -ENOENT;
	ret = ds->be->ops->getattr(ds->be, bino, a);
	if (!ret)
		a->ino = sfs_ino(fs, ds, a->ino);
	return ret;
}

static void sfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct sfs *fs = userdata;

	if (fs->cfg.splice) {
		if (conn->capable & FUSE_CAP_SPLICE_WRITE)
			conn->want |= FUSE_CAP_SPLICE_WRITE;
		if (conn->capable & FUSE_CAP_SPLICE_MOVE)
			conn->want |= FUSE_CAP_SPLICE_MOVE;
	}
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	if (fs->cfg.readdirplus == CFG_OFF)
		conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
	else if (fs->cfg.readdirplus == CFG_ON)
		conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	passthrough_init(fs->pt, conn);
	noopen_init(fs->no, conn);
	kinodes_start(fs->ki, fs->se, conn->proto_minor);
	/* max_pages follows max_write in libfuse 3.14: ask for 1 MiB requests */
	conn->max_write = fs->cfg.max_read_kb * 1024;
	conn->max_read = fs->cfg.max_read_kb * 1024;
	conn->max_readahead = MAX(fs->cfg.read_ahead_kb, fs->cfg.max_read_kb) * 1024;
	/*
	 * Readahead READs are the kernel's background requests, 12 in flight
	 * by default: 3 files of 4 MiB.  The engine answers READs without
	 * holding a thread, so let many more reach it (cold reads of many
	 * files at once keep that many fills in flight).
	 */
	conn->max_background = 128;
	conn->congestion_threshold = 96;
	fs->splice_write = conn->want & FUSE_CAP_SPLICE_WRITE;
	log_info("FUSE session: proto %u.%u, max_read %u, max_readahead %u, max_background %u, splice %s",
		 conn->proto_major, conn->proto_minor, conn->max_read,
		 conn->max_readahead, conn->max_background,
		 conn->want & FUSE_CAP_SPLICE_WRITE ? "on" : "off");
}

/* The dataset whose root directory is FUSE inode @ino under a multi root, or NULL. */
static struct sfs_dataset *dataset_root_of(struct sfs *fs, uint64_t ino)
{
	struct sfs_dataset *ds;
	uint64_t bino;

	if (!fs->multi)
		return NULL;
	ds = sfs_ds(fs, ino, &bino);
	return ds && bino == SFS_ROOT_INO ? ds : NULL;
}

/*
 * Whether the kernel may cache the entry and attributes of inode @ino.
 * Not those of the root of a dataset that some users may not read: the
 * kernel's caches are shared by all users, and a user who may not read a
 * dataset must not find it by name (LOOKUP and GETATTR answer ENOENT), so
 * each walk through it and each stat of it is asked again.
 */
static bool may_cache(struct sfs *fs, uint64_t ino)
{
	struct sfs_dataset *ds = dataset_root_of(fs, ino);

	return !ds || access_open_to_all(fs, ds);
}

static void fill_entry(struct sfs *fs, const struct sfs_attr *a,
		       struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = a->ino;
	e->attr_timeout = fs->attr_timeout;
	e->entry_timeout = fs->entry_timeout;
	/*
	 * looked up again at every open: each user gets their own inode (and,
	 * in no-open mode, a new rendering)
	 */
	if (vfiles_index(a->ino) >= 0)
		e->entry_timeout = 0;
	if (!may_cache(fs, a->ino))
		e->entry_timeout = e->attr_timeout = 0;
	attr_to_stat(a, &e->attr);
}

/* @name in @parent, for the process behind @req (.stagefs/ files are per user). */
static int do_lookup(struct sfs *fs, fuse_req_t req, fuse_ino_t parent, const char *name,
		     struct sfs_attr *a)
{
	struct sfs_dataset *ds;
	uint64_t bino;
	int ret;

	if (parent >= SFS_VIRT_BASE) {
		for (size_t i = 0; parent == SFS_CTL_DIR_INO && i < vfiles_count; i++) {
			if (!strcmp(name, vfiles_table[i].name)) {
				struct cred cr;

				/* the groups only where it is rendered here */
				access_req_cred(req, noopen_wanted(fs->no), &cr);
				virt_attr(fs, SFS_CTL_FILE_INO(i, cr.uid), a);
				return vfile_attr(fs, (int)i, &cr, cr.uid, a);
			}
		}
		if (parent == SFS_CTL_DIR_INO && !strcmp(name, SFS_NOOPEN_PROBE_NAME)) {
			virt_attr(fs, SFS_NOOPEN_PROBE_INO, a);
			return 0;
		}
		return -ENOENT;
	}
	if (parent == FUSE_ROOT_ID && !strcmp(name, SFS_CTL_DIR_NAME)) {
		virt_attr(fs, SFS_CTL_DIR_INO, a);
		return 0;
	}
	if (sfs_is_multi_root(fs, parent)) {
		ds = datasets_lookup(fs, name);
		if (!ds)
			return -ENOENT;
		ret = ds->be->ops->getattr(ds->be, SFS_ROOT_INO, a);
		if (!ret)
			a->ino = sfs_ino(fs, ds, a->ino);
		return ret;
	}
	ds = sfs_ds(fs, parent, &bino);
	if (!ds)
		return -ENOENT;
	ret = ds->be->ops->lookup(ds->be, bino, name, a);
	if (!ret)
		a->ino = sfs_ino(fs, ds, a->ino);
	return ret;
}

static void do_forget(struct sfs *fs, fuse_ino_t ino, uint64_t nlookup)
{
	struct sfs_dataset *ds;
	uint64_t bino;

	ds = sfs_ds(fs, ino, &bino);
	if (!ds)
		return;
	noopen_forget(fs->no, ino);
	passthrough_forget(fs->pt, ino);
	pushmap_forget(fs->pushed, ino);
	if (ds->be->ops->forget)
		ds->be->ops->forget(ds->be, bino, nlookup);
}

/* Access to the dataset holding @ino (or named @name under the multi root). */
static int check_access(struct sfs *fs, fuse_req_t req, fuse_ino_t ino,
			const char *name)
{
	struct sfs_dataset *ds = NULL;
	uint64_t bino;

	if (ino >= SFS_VIRT_BASE || !fs->multi)
		return 0;
	if (sfs_is_multi_root(fs, ino)) {
		if (name && strcmp(name, SFS_CTL_DIR_NAME))
			ds = datasets_lookup(fs, name);
	} else {
		ds = sfs_ds(fs, ino, &bino);
	}
	return ds ? access_check_req(fs, req, ds) : 0;
}

/*
 * At the LOOKUP of a small regular file: start reading its cache file into
 * the page cache (if whole and verified), since an OPEN and a READ, or
 * passthrough reads, usually follow at once.  The disk read then overlaps
 * those round trips instead of following them.  Done before the reply, so
 * that the I/O starts as early as it can: the reader would wait for it
 * anyway (docs/passthrough.md, "Small files with a cold page cache").
 */
static void lookup_readahead(struct sfs *fs, const struct sfs_attr *a)
{
	struct sfs_dataset *ds;
	struct cfile *cf;
	uint64_t bino;

	if (!S_ISREG(a->mode) || !a->size || a->size > fs->cfg.lookup_readahead_max)
		return;
	ds = sfs_ds(fs, a->ino, &bino);
	if (!ds || cache_file_get(fs->cache, &a->content, a->size,
				  ds->be->chunk_size, &cf))
		return;
	if (!cache_file_prefetch(fs->cache, cf)) {
		stats_node_add(fs->stats, STATS_NODE_LOOKUP_READAHEADS, 1);
	} else if (cache_file_present(fs->cache, cf) < cache_file_nchunks(cf)) {
		/* in its pack's entry, maybe: the range there */
		struct sfs_attr ba = *a;
		struct cfile *pcf;
		uint32_t poff;

		ba.ino = bino;
		if (!packentry_get(fs->cache, ds->be, &ba, &pcf, &poff)) {
			if (!cache_file_prefetch_range(fs->cache, pcf, poff, (size_t)a->size))
				stats_node_add(fs->stats, STATS_NODE_LOOKUP_READAHEADS, 1);
			cache_file_put(fs->cache, pcf);
		}
	}
	cache_file_put(fs->cache, cf);
}

static void sfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct sfs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct sfs_attr a;
	int ret = check_access(fs, req, parent, name);

	if (ret == -EACCES && sfs_is_multi_root(fs, parent)) {
		/*
		 * A dataset the caller may not read does not exist for it, as
		 * in the root's listing.  Not a negative entry: the kernel
		 * would cache it for every user.
		 */
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!ret)
		ret = do_lookup(fs, req, parent, name, &a);

	if (ret == -ENOENT && !sfs_is_multi_root(fs, parent)) {
		/*
		 * negative entries are as immutable as the rest, except in a
		 * mount root of datasets, where a reload (SIGHUP) may add one
		 */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = fs->entry_timeout;
		fuse_reply_entry(req, &e);
		return;
	}
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	fill_entry(fs, &a, &e);
	lookup_readahead(fs, &a);
	kinodes_add(fs->ki, &e.ino, 1);
	if (fuse_reply_entry(req, &e))	/* not delivered: no reference taken */
		kinodes_forget(fs->ki, e.ino, 1);
}

static void sfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	kinodes_forget(fs_of(req)->ki, ino, nlookup);
	do_forget(fs_of(req), ino, nlookup);
	fuse_reply_none(req);
}

static void sfs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	struct sfs *fs = fs_of(req);

	kinodes_forget_batch(fs->ki, forgets, count);
	for (size_t i = 0; i < count; i++)
		do_forget(fs, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void sfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = fs_of(req);
	struct sfs_dataset *root_of = dataset_root_of(fs, ino);
	struct sfs_attr a;
	struct stat st;
	int ret;

	/* a dataset's root, for a caller who may not read it: as LOOKUP */
	if (root_of && access_check_req(fs, req, root_of))
		ret = -ENOENT;
	else
		ret = do_getattr(fs, ino, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	attr_to_stat(&a, &st);
	fuse_reply_attr(req, &st, ino >= SFS_VIRT_BASE ? 1.0 :
				  may_cache(fs, ino) ? fs->attr_timeout : 0);
}

static void sfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct sfs *fs = fs_of(req);
	struct sfs_dataset *ds;
	char buf[PATH_MAX + 1];
	uint64_t bino;
	int n;

	ds = sfs_ds(fs, ino, &bino);
	if (!ds) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	n = ds->be->ops->readlink(ds->be, bino, buf, sizeof(buf) - 1);
	if (n < 0) {
		fuse_reply_err(req, -n);
		return;
	}
	buf[n] = '\0';
	fuse_reply_readlink(req, buf);
}

/* ---- directories ---- */

/* The multi-dataset root: every listed dataset as a directory. */
static int list_datasets(struct sfs *fs, fuse_req_t req, struct sfs_dirlist *dl)
{
	uint32_t n = atomic_load(&fs->nds);

	dl->ent = calloc(n ? n : 1, sizeof(*dl->ent));
	if (!dl->ent)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct sfs_dataset *ds = fs->ds[i];

		if (ds->hidden || access_check_req(fs, req, ds))
			continue;	/* users see only the datasets they may read */
		dl->ent[dl->n].name = strdup(ds->name);
		if (!dl->ent[dl->n].name)
			return -ENOMEM;
		dl->ent[dl->n].ino = sfs_ino(fs, ds, SFS_ROOT_INO);
		dl->ent[dl->n].mode = S_IFDIR;
		dl->n++;
	}
	return 0;
}

/*
 * The listing of directory @ino for the caller of @req, into a new *@out:
 * what OPENDIR hands out, and what a READDIR on a handle of an earlier
 * daemon (fuse/handles.h) builds again.  Returns 0 or -errno.
 */
static int dirlist_build(struct sfs *fs, fuse_req_t req, fuse_ino_t ino,
			 struct sfs_dirlist **out)
{
	struct sfs_dirlist *dl = calloc(1, sizeof(*dl));
	int ret = 0;

	if (!dl)
		return -ENOMEM;
	if (ino == SFS_CTL_DIR_INO) {
		dl->ent = calloc(vfiles_count, sizeof(*dl->ent));
		for (size_t i = 0; dl->ent && i < vfiles_count; i++) {
			dl->ent[i].name = strdup(vfiles_table[i].name);
			if (!dl->ent[i].name)
				break;
			dl->ent[i].ino = SFS_CTL_FILE_INO(i, fuse_req_ctx(req)->uid);
			dl->ent[i].mode = S_IFREG;
			dl->n++;
		}
		if (dl->n != vfiles_count)
			ret = -ENOMEM;
	} else if (ino >= SFS_VIRT_BASE) {
		ret = -ENOTDIR;
	} else if (sfs_is_multi_root(fs, ino)) {
		ret = list_datasets(fs, req, dl);
	} else if ((ret = check_access(fs, req, ino, NULL))) {
		/* refused */
	} else {
		uint64_t bino;
		struct sfs_dataset *ds = sfs_ds(fs, ino, &bino);

		ret = ds ? ds->be->ops->readdir(ds->be, bino, dl) : -ENOENT;
		for (size_t i = 0; !ret && i < dl->n; i++)
			if (dl->ent[i].ino)
				dl->ent[i].ino = sfs_ino(fs, ds, dl->ent[i].ino);
	}
	if (ret) {
		sfs_dirlist_release(dl);
		free(dl);
		return ret;
	}
	*out = dl;
	return 0;
}

static void dirlist_free(struct sfs_dirlist *dl)
{
	sfs_dirlist_release(dl);
	free(dl);
}

static void sfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = fs_of(req);
	struct sfs_dirlist *dl;
	int ret = dirlist_build(fs, req, ino, &dl);

	if (!ret && !(fi->fh = handles_add(fs->handles, HANDLE_DIR, dl))) {
		dirlist_free(dl);
		ret = -ENOMEM;
	}
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	/*
	 * the multi root's listing depends on who asks (and .stagefs/'s inode
	 * numbers): never cache them
	 */
	fi->cache_readdir = !sfs_is_multi_root(fs, ino) && ino != SFS_CTL_DIR_INO;
	fi->keep_cache = fi->cache_readdir;
	if (fuse_reply_open(req, fi) == -ENOENT)
		dirlist_free(handles_take(fs->handles, fi->fh, HANDLE_DIR));
}

/*
 * The listing behind handle @fh of directory @ino: one of ours, or one an
 * earlier daemon gave the kernel, built again and adopted.  NULL (with
 * *@err): none.
 */
static struct sfs_dirlist *dirlist_of(struct sfs *fs, fuse_req_t req, fuse_ino_t ino,
				      uint64_t fh, int *err)
{
	struct sfs_dirlist *dl = handles_get(fs->handles, fh, HANDLE_DIR), *got;

	*err = 0;
	if (dl || !handles_inherited(fs->handles, fh)) {
		if (!dl)
			*err = -EBADF;
		return dl;
	}
	*err = dirlist_build(fs, req, ino, &dl);
	if (*err)
		return NULL;
	got = handles_adopt(fs->handles, fh, HANDLE_DIR, dl);
	if (got != dl)
		dirlist_free(dl);
	if (!got)
		*err = -ENOMEM;
	return got;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct sfs *fs = fs_of(req);
	int err;
	struct sfs_dirlist *dl = dirlist_of(fs, req, ino, fi->fh, &err);
	char *buf;

	if (!dl) {
		fuse_reply_err(req, -err);
		return;
	}
	buf = malloc(size);
	/* the inodes a READDIRPLUS reply hands the kernel (>= 152 bytes each) */
	uint64_t *ids = plus ? malloc((size / 152 + 1) * sizeof(*ids)) : NULL;
	size_t pos = 0, nids = 0;

	if (!buf || (plus && !ids)) {
		free(buf);
		free(ids);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* offsets: 1 = ".", 2 = "..", 2 + i + 1 = dl->ent[i] */
	/*
	 * A short READDIRPLUS reply: the kernel asks for the rest with plain
	 * READDIR unless entries of the directory were used meanwhile
	 * (readdirplus=auto), so a names-only walk instantiates few inodes
	 * while `ls -l` still gets attributes (config.c, readdirplus_max).
	 */
	size_t cap = plus && fs->cfg.readdirplus_max ? fs->cfg.readdirplus_max : SIZE_MAX;

	for (off_t i = off; (size_t)i < dl->n + 2 && nids < cap; i++) {
		struct stat st = { 0 };
		const char *name;
		size_t need;

		if (i == 0) {
			name = ".";
			st.st_ino = ino;
			st.st_mode = S_IFDIR;
		} else if (i == 1) {
			name = "..";
			st.st_ino = FUSE_ROOT_ID;
			st.st_mode = S_IFDIR;
		} else {
			const struct sfs_dirent *de = &dl->ent[i - 2];

			name = de->name;
			st.st_ino = de->ino;
			st.st_mode = de->mode;
		}
		if (plus) {
			struct fuse_entry_param e;
			struct sfs_attr a;

			if (i < 2) {
				memset(&e, 0, sizeof(e));
				e.attr = st;
			} else {
				int ret = do_lookup(fs, req, ino, name, &a);

				if (ret) {
					if (!pos) {
						free(buf);
						free(ids);
						fuse_reply_err(req, -ret);
						return;
					}
					break;
				}
				fill_entry(fs, &a, &e);
			}
			need = fuse_add_direntry_plus(req, buf + pos, size - pos,
						      name, &e, i + 1);
			if (need > size - pos) {
				/* undo the lookup reference of an entry not sent */
				if (i >= 2)
					do_forget(fs, e.ino, 1);
				break;
			}
			if (i >= 2)
				ids[nids++] = e.ino;
		} else {
			need = fuse_add_direntry(req, buf + pos, size - pos, name,
						 &st, i + 1);
			if (need > size - pos)
				break;
		}
		pos += need;
	}
	kinodes_add(fs->ki, ids, nids);
	if (fuse_reply_buf(req, buf, pos))	/* not delivered: no references taken */
		for (size_t i = 0; i < nids; i++)
			kinodes_forget(fs->ki, ids[i], 1);
	free(buf);
	free(ids);
}

static void sfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void sfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void sfs_releasedir(fuse_req_t req, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	struct sfs_dirlist *dl = handles_take(fs_of(req)->handles, fi->fh, HANDLE_DIR);

	(void)ino;
	if (dl)
		dirlist_free(dl);
	fuse_reply_err(req, 0);
}

/* ---- files ---- */

static void sfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = fs_of(req);
	struct fh *fh;
	int ret;

	if ((fi->flags & O_ACCMODE) != O_RDONLY ||
	    (fi->flags & (O_TRUNC | O_APPEND | O_CREAT))) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (ino == SFS_NOOPEN_PROBE_INO) {
		/* ENOSYS switches the kernel to no-open mode (fuse/noopen.h) */
		fuse_reply_err(req, noopen_probe_open(fs->no) ? ENOSYS : EACCES);
		return;
	}
	if (vfiles_index(ino) >= 0) {
		struct vfh *v;

		ret = vfh_create(fs, req, ino, &v);
		if (!ret && !(fi->fh = handles_add(fs->handles, HANDLE_VFILE, v))) {
			vfh_destroy(v);
			ret = -ENOMEM;
		}
		if (ret) {
			fuse_reply_err(req, -ret);
			return;
		}
		fi->direct_io = 1;
		if (fuse_reply_open(req, fi) == -ENOENT)
			vfh_destroy(handles_take(fs->handles, fi->fh, HANDLE_VFILE));
		return;
	}
	uint64_t bino;
	struct sfs_dataset *ds = sfs_ds(fs, ino, &bino);

	if (!ds) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	stats_node_add(fs->stats, STATS_NODE_OPEN_REQUESTS, 1);
	ret = access_check_req(fs, req, ds);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (noopen_active(fs->no)) {
		/* sent before the switch took effect: it switches again */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	ret = fh_create(fs, ds, bino, &fh);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	/* the number first: the passthrough accounting knows an open by it */
	fh->id = fi->fh = handles_add(fs->handles, HANDLE_FILE, fh);
	if (!fh->id) {
		fh_destroy(fs, fh);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* a file served from its pack's entry is read through the daemon */
	ret = passthrough_open(fs->pt, req, ino, fh->pcf ? NULL : fh->cf, fh->attr.size, fi);
	if (ret < 0) {
		handles_take(fs->handles, fh->id, HANDLE_FILE);
		fh_destroy(fs, fh);
		fuse_reply_err(req, -ret);
		return;
	}
	fh->passthrough = ret > 0;
	if (fh->passthrough)	/* the kernel drops the pages of a push at this open */
		pushmap_forget(fs->pushed, ino);
	fh->owner = access_owner(fs, fuse_req_ctx(req)->uid, fuse_req_ctx(req)->pid);
	stats_open_init(fs->stats, &fh->so, fuse_req_ctx(req)->pid,
			fuse_req_ctx(req)->uid);
	if (fh->passthrough) {
		struct ptacct *pa = ptacct_of(fs);

		stats_open_passthrough(fs->stats, &fh->so, fh->attr.size, ds->be->chunk_size,
				       !ptacct_exact(pa));
		ptacct_open(pa, fh);
	}
	if (!fh->passthrough && !fh->pcf)
		fh->ra = pf_ra_create(fs->pf, ds->be, &fh->attr, atomic_load(&ds->nothrash));
	pf_hint_open(fs->pf, ino, fuse_req_ctx(req)->uid, fuse_req_ctx(req)->pid);
	pf_stage_open(fs->pf, ds->be, ds->name, atomic_load(&ds->epoch_staging),
		      fuse_req_ctx(req)->uid, fuse_req_ctx(req)->gid, fh->owner, bino);
	/* before the reply: a next daemon must know how the kernel reads it */
	handles_record(fs->handles, fh->id, ino,
		       fh->passthrough ? passthrough_backing_id(fs->pt, ino) : 0);
	/* the kernel fails a passthrough open that asks for keep_cache (EIO) */
	fi->keep_cache = !fh->passthrough;
	if (!fh->passthrough && fh->pcf)
		read_push(req, fs, fh, ino, READ_PUSH_MAX);
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) == -ENOENT) {
		handles_take(fs->handles, fi->fh, HANDLE_FILE);
		if (fh->passthrough)
			ptacct_release(ptacct_of(fs), fh);
		passthrough_release(fs->pt, ino, fh->passthrough);
		fh_destroy(fs, fh);
	}
}

static void sfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = fs_of(req);

	if (vfiles_index(ino) >= 0) {
		vfh_destroy(handles_take(fs->handles, fi->fh, HANDLE_VFILE));
	} else {
		struct handle_record r;
		bool rec = handles_take_record(fs->handles, fi->fh, &r);
		struct fh *fh = handles_take(fs->handles, fi->fh, HANDLE_FILE);

		/*
		 * NULL: an earlier daemon's open that this one never read
		 * through (a passthrough open, or no READ since the takeover):
		 * its record says how the kernel reads it
		 */
		if (!fh) {
			if (rec)
				passthrough_release(fs->pt, ino, r.backing_id > 0);
			fuse_reply_err(req, 0);
			return;
		}

		/* its readers' last passthrough reads, before the open's accounting goes */
		if (fh->passthrough)
			ptacct_release(ptacct_of(fs), fh);
		/* an adopted handle: its record says how the kernel read it */
		passthrough_release(fs->pt, ino, fh->passthrough || (rec && r.backing_id > 0));
		if (fs->pp)	/* read from pages its pack's arrival stored */
			packpush_release(fs, fh, ino);
		fh_destroy(fs, fh);
	}
	fuse_reply_err(req, 0);
}

static void sfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct sfs *fs = fs_of(req);
	struct statvfs sv = { 0 };
	uint64_t bytes = 0, files = 0;

	for (uint32_t i = 0; i < atomic_load(&fs->nds); i++) {
		struct backend *be = fs->ds[i]->be;
		uint64_t b = 0, f = 0;

		if (fs->ds[i]->hidden || !be->ops->statfs)
			continue;
		be->ops->statfs(be, &b, &f);
		bytes += b;
		files += f;
	}
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = (fsblkcnt_t)DIV_ROUND_UP(bytes, 4096);
	sv.f_files = (fsfilcnt_t)files;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

/*
 * ---- extended attributes: a few read-only facts about the cache ----
 *
 * Only with xattrs=yes.  Otherwise the first GETXATTR and the first
 * LISTXATTR are answered ENOSYS: the kernel then sets the connection's
 * no_getxattr / no_listxattr and fails every later call with EOPNOTSUPP
 * without a request (fs/fuse/xattr.c), so that `ls -l`'s two probes per
 * file (security.selinux, system.posix_acl_access) cost no round trip.
 */

static const char *const xattr_names[] = {
	"user.stagefs.content",	/* cache identity (hex) */
	"user.stagefs.cached",	/* "PRESENT/TOTAL" chunks */
	"user.stagefs.source",	/* the dataset URI */
};

static int xattr_value(struct sfs *fs, fuse_ino_t ino, const char *name,
		       char *buf, size_t len)
{
	struct sfs_dataset *ds;
	struct sfs_attr a;
	uint64_t bino;
	int ret;

	ds = sfs_ds(fs, ino, &bino);
	if (!ds)
		return -ENODATA;
	ret = ds->be->ops->getattr(ds->be, bino, &a);
	if (ret)
		return ret;
	if (!strcmp(name, "user.stagefs.source"))
		return snprintf(buf, len, "%s", ds->be->uri);
	if (!S_ISREG(a.mode))
		return -ENODATA;
	if (!strcmp(name, "user.stagefs.content")) {
		sfs_id_hex(&a.content, buf);
		return SFS_ID_HEX_LEN;
	}
	if (!strcmp(name, "user.stagefs.cached")) {
		struct cfile *cf;
		uint32_t present, total;

		ret = cache_file_get(fs->cache, &a.content, a.size,
				     ds->be->chunk_size, &cf);
		if (ret)
			return ret;
		present = cache_file_present(fs->cache, cf);
		total = cache_file_nchunks(cf);
		cache_file_put(fs->cache, cf);
		if (present < total) {
			/* a small file whose pack is cached is cached */
			struct cfile *pcf;
			uint32_t poff;

			if (!packentry_get(fs->cache, ds->be, &a, &pcf, &poff)) {
				present = total;
				cache_file_put(fs->cache, pcf);
			}
		}
		return snprintf(buf, len, "%u/%u", present, total);
	}
	return -ENODATA;
}

static void sfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 size_t size)
{
	char buf[4200];
	int n;

	if (!fs_of(req)->cfg.xattrs) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	n = xattr_value(fs_of(req), ino, name, buf, sizeof(buf));
	if (n < 0)
		fuse_reply_err(req, -n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else if ((size_t)n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void sfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct sfs *fs = fs_of(req);
	char buf[256];
	size_t pos = 0;
	struct sfs_attr a;

	if (!fs->cfg.xattrs) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (ino < SFS_VIRT_BASE && !do_getattr(fs, ino, &a)) {
		for (size_t i = 0; i < ARRAY_SIZE(xattr_names); i++) {
			if (!S_ISREG(a.mode) && strcmp(xattr_names[i], "user.stagefs.source"))
				continue;
			size_t l = strlen(xattr_names[i]) + 1;

			memcpy(buf + pos, xattr_names[i], l);
			pos += l;
		}
	}
	if (size == 0)
		fuse_reply_xattr(req, pos);
	else if (pos > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, pos);
}

/* ---- everything that would modify the dataset ---- */

static void sfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			int to_set, struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		      size_t size, off_t off, struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void sfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			  off_t offset, off_t length, struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops sfs_ops = {
	.init = sfs_init,
	.lookup = sfs_lookup,
	.forget = sfs_forget,
	.forget_multi = sfs_forget_multi,
	.getattr = sfs_getattr,
	.readlink = sfs_readlink,
	.opendir = sfs_opendir,
	.readdir = sfs_readdir,
	.readdirplus = sfs_readdirplus,
	.releasedir = sfs_releasedir,
	.open = sfs_open,
	.read = read_op,
	.release = sfs_release,
	.statfs = sfs_statfs,
	.getxattr = sfs_getxattr,
	.listxattr = sfs_listxattr,
	.setattr = sfs_setattr,
	.mknod = sfs_mknod,
	.mkdir = sfs_mkdir,
	.unlink = sfs_unlink,
	.rmdir = sfs_unlink,
	.symlink = sfs_symlink,
	.rename = sfs_rename,
	.link = sfs_link,
	.write = sfs_write,
	.create = sfs_create,
	.setxattr = sfs_setxattr,
	.removexattr = sfs_removexattr,
	.fallocate = sfs_fallocate,
};
