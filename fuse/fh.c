/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fh: see fh.h.
 */
#include "fh.h"

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
	*out = fh;
	return 0;
}

void fh_destroy(struct sfs *fs, struct fh *fh)
{
	stats_open_release(fs->stats, &fh->so);
	pf_ra_release(fh->ra);
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
	fh->ra = pf_ra_create(fs->pf, ds->be, &fh->attr, atomic_load(&ds->nothrash));
	*out = fh;
	return 0;
}
