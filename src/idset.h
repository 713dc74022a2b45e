/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idset: a set of 128-bit content ids (struct sfs_id), for walks over many
 * chunks: `stagefs publish` remembers the chunks it has handled in a run,
 * `stagefs gc` marks the chunks that manifests name.  Open addressing with
 * linear probing, at most half full; the zero id is kept aside, so any id
 * can be stored.  Not thread safe: one owner.
 */
#ifndef STAGEFS_IDSET_H
#define STAGEFS_IDSET_H

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

struct idset {
	struct sfs_id *v;
	size_t n, cap;		/* cap: 0 or a power of two; n excludes the zero id */
	bool has_zero;
};

#define IDSET_INIT	{ NULL, 0, 0, false }

/* Insert @id.  Returns 1 if it was new, 0 if already there, -ENOMEM. */
int idset_add(struct idset *s, const struct sfs_id *id);
/* True if @id is in @s. */
bool idset_has(const struct idset *s, const struct sfs_id *id);
/* Number of ids in @s. */
size_t idset_count(const struct idset *s);
/* Free what @s holds; it is empty (and reusable) afterwards. */
void idset_release(struct idset *s);

#endif
