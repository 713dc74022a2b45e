/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inomap: the first path seen of each (st_dev, st_ino), so that a tree walk
 * (stagefs publish, the dir:// scan) can record the other names of a file
 * with st_nlink > 1 as hard links (manifest_builder_link()) instead of as
 * copies.  An intrusive hash table (htab.h); paths are copied in.  Not
 * thread safe: one walk owns it.
 */
#ifndef STAGEFS_INOMAP_H
#define STAGEFS_INOMAP_H

#include <sys/types.h>

#include "htab.h"

struct inomap {
	struct htab table;	/* of struct inomap_ent (inomap.c) */
};

#define INOMAP_INIT	{ HTAB_INIT }

/*
 * The first path recorded for (@dev, @ino), or NULL: then @path is recorded
 * for it.  The returned string belongs to @m and lives until
 * inomap_release().  *@err is set to -ENOMEM (and NULL returned) if @path
 * could not be recorded; it is left alone otherwise.
 */
const char *inomap_first(struct inomap *m, dev_t dev, ino_t ino,
			 const char *path, int *err);

/* Free everything @m holds; it is empty (and reusable) afterwards. */
void inomap_release(struct inomap *m);

#endif
