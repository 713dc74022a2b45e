/* SPDX-License-Identifier: Apache-2.0 */
/*
 * datasets: the datasets a daemon serves, published append-only in fs->ds
 * (see datasets.c).
 */
#ifndef STAGEFS_FUSE_DATASETS_H
#define STAGEFS_FUSE_DATASETS_H

#include "fs.h"

/*
 * Open dataset @name from @source and publish it in fs->ds.  Returns 0 or
 * -errno with a message in @err.
 */
int datasets_add(struct sfs *fs, const char *name, const char *source,
		    bool hidden, struct sfs_dataset **out, char *err, size_t errlen);
/*
 * Close and free every dataset (at exit, when no request or thread uses
 * them any more).
 */
void datasets_destroy(struct sfs *fs);
/* Find a published dataset by name; NULL if none. */
struct sfs_dataset *datasets_find(struct sfs *fs, const char *name);
/*
 * Like datasets_find, but NAME@VERSION of a configured rados:// dataset
 * is opened on first use (and stays, hidden from the root listing).
 */
struct sfs_dataset *datasets_lookup(struct sfs *fs, const char *name);

#endif
