/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fh: see fh.h.
 */
#include "fh.h"

#include "access.h"
#include "handles.h"
#include "packentry.h"
#include "passthrough.h"
#include "vfiles.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

int fh_create(struct sfs *fs, struct sfs_dataset *ds, uint64_t bino, struct fh **out)
{
	struct fh *fh = calloc(1, sizeof(*fh));
	int ret;

	if (!fh)
		return -ENOMEM;
	fh->fs = fs;
	fh->ds = ds;
	ret = ds->be->ops->getattr(ds->be, bino, &fh->attr);
	if (!ret && !S_ISREG(fh->attr.mode))
		ret = -EISDIR;
	if (!ret)
		ret = cache_file_get(fs->cache, &fh->attr.content, fh->attr.size,
				     ds->be->chunk_size, &fh->cf);
	if (ret) {
		free(fh);
		return ret;
	}
	if (fh->attr.size && cache_file_present(fs->cache, fh->cf) < cache_file_nchunks(fh->cf))
		(void)packentry_get(fs->cache, ds->be, &fh->attr, &fh->pcf, &fh->poff);
	*out = fh;
	return 0;
}

void fh_destroy(struct sfs *fs, struct fh *fh)
{
	stats_open_release(fs->stats, &fh->so);
	pf_ra_release(fh->ra);
	if (fh->pcf)
		cache_file_put(fs->cache, fh->pcf);
	cache_file_put(fs->cache, fh->cf);
	free(fh);
}

int fh_create_noopen(struct sfs *fs, uint64_t ino, struct fh **out)
{
	struct sfs_dataset *ds;
	struct fh *fh;
	uint64_t bino;
	int ret;

	ds = sfs_ds(fs, ino, &bino);
	if (!ds)
		return -ENOENT;
	ret = fh_create(fs, ds, bino, &fh);
	if (ret)
		return ret;
	/* so stays empty: no opener; READs are charged to their readers */
	if (!fh->pcf)
		fh->ra = pf_ra_create(fs->pf, ds->be, &fh->attr, atomic_load(&ds->nothrash));
	*out = fh;
	return 0;
}

struct fh *fh_of(struct sfs *fs, fuse_req_t req, uint64_t ino, uint64_t id, int *err)
{
	struct fh *fh = handles_get(fs->handles, id, HANDLE_FILE), *got;
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	*err = 0;
	if (fh)
		return fh;
	if (!handles_inherited(fs->handles, id)) {
		*err = -EBADF;
		return NULL;
	}
	*err = fh_create_noopen(fs, ino, &fh);
	if (*err)
		return NULL;
	stats_open_init(fs->stats, &fh->so, ctx->pid, ctx->uid);
	fh->id = id;
	got = handles_adopt(fs->handles, id, HANDLE_FILE, fh);
	if (got != fh)
		fh_destroy(fs, fh);
	if (!got)
		*err = -ENOMEM;
	return got;
}

int vfh_create(struct sfs *fs, fuse_req_t req, uint64_t ino, struct vfh **out)
{
	struct vfh *v;
	struct cred cr;
	int n;

	/* the groups decide which datasets' sources it shows (multi only) */
	access_req_cred(req, fs->multi, &cr);
	/*
	 * rendered for the opener, who looked up an inode of their own (a
	 * dentry is looked up again at every walk); another user's inode,
	 * reached otherwise (/proc/PID/fd), is refused, so its pages never
	 * hold a rendering of someone else's
	 */
	if (vfiles_index(ino) < 0)
		return -EINVAL;
	if (cr.uid != vfiles_uid(ino))
		return -EACCES;
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	n = vfiles_table[vfiles_index(ino)].render(fs, &cr, &v->data);
	if (n < 0) {
		free(v);
		return n;
	}
	v->len = (size_t)n;
	*out = v;
	return 0;
}

void vfh_destroy(struct vfh *v)
{
	if (!v)
		return;
	free(v->data);
	free(v);
}

struct vfh *vfh_of(struct sfs *fs, fuse_req_t req, uint64_t ino, uint64_t id, int *err)
{
	struct vfh *v = handles_get(fs->handles, id, HANDLE_VFILE), *got;

	*err = 0;
	if (v)
		return v;
	if (!handles_inherited(fs->handles, id)) {
		*err = -EBADF;
		return NULL;
	}
	*err = vfh_create(fs, req, ino, &v);
	if (*err)
		return NULL;
	got = handles_adopt(fs->handles, id, HANDLE_VFILE, v);
	if (got != v)
		vfh_destroy(v);
	if (!got)
		*err = -ENOMEM;
	return got;
}

void fh_inherit_record(void *arg, const struct handle_record *r)
{
	struct sfs *fs = arg;
	struct sfs_dataset *ds;
	struct sfs_attr attr;
	struct cfile *cf = NULL;
	uint64_t bino;

	if (r->backing_id > 0) {
		ds = sfs_ds(fs, r->ino, &bino);
		if (!ds || ds->be->ops->getattr(ds->be, bino, &attr) ||
		    cache_file_get(fs->cache, &attr.content, attr.size, ds->be->chunk_size, &cf))
			cf = NULL;	/* counted all the same: new opens share its id */
	}
	passthrough_adopt(fs->pt, r->ino, r->backing_id, cf);
	if (cf)
		cache_file_put(fs->cache, cf);
}
