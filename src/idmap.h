/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idmap: a hash map from 128-bit content ids (struct sfs_id) to a 64-bit
 * value, for walks over many files: `stagefs publish` remembers where in
 * which pack it stored each small file's bytes, so an identical file is
 * named at that place instead of being stored again.  Open addressing with
 * linear probing, at most half full (48 bytes of table a key at worst); the
 * zero id is kept aside, so any id can be a key.  Not thread safe: one
 * owner.
 */
#ifndef STAGEFS_IDMAP_H
#define STAGEFS_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct idmap_ent {
	struct sfs_id id;
	uint64_t val;
};

struct idmap {
	struct idmap_ent *v;
	size_t n, cap;		/* cap: 0 or a power of two; n excludes the zero id */
	bool has_zero;
	uint64_t zero_val;
};

#define IDMAP_INIT	{ NULL, 0, 0, false, 0 }

/* Map @id to @val (replacing what it mapped to).  0 or -ENOMEM. */
int idmap_put(struct idmap *m, const struct sfs_id *id, uint64_t val);
/* What @id maps to, into *@val: true, or false if @id is not there. */
bool idmap_get(const struct idmap *m, const struct sfs_id *id, uint64_t *val);
/* Number of ids in @m. */
size_t idmap_count(const struct idmap *m);
/* Free what @m holds; it is empty (and reusable) afterwards. */
void idmap_release(struct idmap *m);

#endif
