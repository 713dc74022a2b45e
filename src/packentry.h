/* SPDX-License-Identifier: Apache-2.0 */
/*
 * packentry: where a small file stored in a pack lies in the node's cache.
 *
 * A pack read (prefetch/engine.c) caches the pack whole, as one cache entry
 * of its own (content id manifest_pack_content(), one chunk): its files get
 * no cache file each (docs/cache.md, "Pack entries").  A packed file is
 * therefore cached when its own cache file is whole or when its pack's
 * entry holds the pack; the readers (fuse/read.c), the warmup walk
 * (prefetch/job.c), peers (fuse/peerd.c) and the cached-ness xattr ask here.
 */
#ifndef STAGEFS_PACKENTRY_H
#define STAGEFS_PACKENTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "cache/cache.h"
#include "manifest/manifest.h"

/* Can regular file @a of @be lie in a pack at all?  No lookup: for hot paths. */
bool packentry_maybe(const struct backend *be, const struct sfs_attr *a);
/*
 * The cache entry of the pack regular file @a (a->ino: @be's inode) lies
 * in, if that entry holds the pack (checked or not yet): 0 with a
 * reference in *@pcf (cache_file_put()) and the file's offset in the pack
 * in *@poff; -ENOENT when the file is not packed or its pack not cached.
 */
int packentry_get(struct cache *c, struct backend *be, const struct sfs_attr *a,
		  struct cfile **pcf, uint32_t *poff);
/*
 * packentry_get() whether or not the entry holds the pack: 0 with a
 * reference in *@pcf, the file's offset in *@poff, its pack and the pack's
 * record in *@pack and *@pk; -ENOENT when the file is not packed.
 */
int packentry_open(struct cache *c, struct backend *be, const struct sfs_attr *a,
		   struct cfile **pcf, uint32_t *poff, uint32_t *pack,
		   struct manifest_pack *pk);
/*
 * Check @pk->size bytes of pack @pack at @buf against the pack's id and
 * each file's bytes in it against that file's chunk id.  Returns the files
 * checked, or -EIO (logged: "pack N is corrupt").
 */
int packentry_check(struct backend *be, uint32_t pack, const struct manifest_pack *pk,
		    const void *buf);
/*
 * Make small file @a's own cache entry @cf whole from its pack's entry: a
 * copy of its range (no backend read), checked against the file's own
 * chunk id before it is stored, charged to @uid.  For a reader that needs
 * a file of its own (the client library's CACHE_FD hand-over).  0 (also
 * when @cf is whole already), -ENOENT when the pack is not cached, -EIO.
 */
int packentry_fill_file(struct cache *c, struct backend *be, const struct sfs_attr *a,
			struct cfile *cf, uint32_t uid);
/* Is chunk @idx of file @a (its own cache entry @cf) cached, here or in its pack? */
bool packentry_chunk_cached(struct cache *c, struct backend *be,
			    const struct sfs_attr *a, struct cfile *cf, uint32_t idx);

#endif
