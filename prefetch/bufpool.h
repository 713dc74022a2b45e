/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bufpool: chunk buffers carved from one memory region, and the chunks
 * filled recently, kept in them for a while.
 *
 * The I/O engine (prefetch/engine.c) fetches every chunk into a buffer of
 * this pool, writes the cache file from it and hands it to the readers
 * waiting for that chunk.  One region (mmap'ed once, page aligned) holds
 * every buffer, so the engine can register it with io_uring as a single
 * fixed buffer (io_uring_register_buffers) and the memory stays bounded.
 * Buffers are power-of-two multiples of BUFPOOL_MIN bytes, allocated by a
 * buddy allocator.
 *
 * Recent chunks: once a fill is done its buffer holds the chunk's verified
 * bytes; bufpool_publish() makes it findable by (content id, chunk index),
 * so the rest of the chunk is served to readers from memory rather than
 * read back from the cache file (or, after an O_DIRECT write, from disk).
 * Published buffers nobody holds are reused, least recently used first,
 * when an allocation needs room.  Content ids change whenever bytes may
 * (backend.h), so a published chunk is never stale.
 *
 * References: every buffer handed out carries one reference per holder; it
 * is reused only when no reference is left and it is not published (or is
 * the least recently used published one, unheld).  A holder may read a
 * buffer it holds; only the holder that got it from bufpool_get() writes
 * it, and only before publishing it.
 *
 * Thread safety: every call takes the pool's mutex; lookups are O(1).
 */
#ifndef STAGEFS_BUFPOOL_H
#define STAGEFS_BUFPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "htab.h"
#include "list.h"
#include "util.h"

#define BUFPOOL_MIN	(64u * 1024)	/* smallest buffer; alignment of all */

struct bufpool;

/* A buffer of the pool.  @data and @cap are read-only for holders. */
struct bufpool_buf {
	void *data;		/* BUFPOOL_MIN aligned */
	size_t cap;		/* bytes usable */
	/* the pool's own, protected by its mutex */
	int refs;
	uint32_t block;		/* first block in the region; UINT32_MAX: malloc'ed or a slice */
	struct bufpool_buf *parent;	/* a slice: the buffer it lies in (held), else NULL */
	uint8_t order;
	bool published;
	struct list_node lru;		/* published ones: on the pool's LRU */
	struct htab_node hnode;		/* published ones: in the pool's table */
	struct sfs_id id;
	uint32_t idx;
	size_t len;		/* bytes of the chunk held */
};

struct bufpool_stats {
	uint64_t region_bytes;
	uint64_t used_bytes;	/* in buffers held or published */
	uint64_t published;	/* buffers findable now */
	uint64_t lookups, hits;	/* bufpool_find() calls, and those that found */
	uint64_t reused;	/* published buffers reused for new allocations */
	uint64_t outside;	/* buffers malloc'ed outside the region */
};

/*
 * A pool over a region of @bytes, rounded down to a power of two times
 * BUFPOOL_MIN (at least BUFPOOL_MIN).  Returns 0 or -errno.  Free with
 * bufpool_destroy() once no buffer is held.
 */
int bufpool_create(size_t bytes, struct bufpool **out);
void bufpool_destroy(struct bufpool *p);
/* The region, for io_uring_register_buffers(); valid until destroy. */
void bufpool_region(const struct bufpool *p, void **base, size_t *len);
/* True if @b lies in the region (else it was malloc'ed: not registered). */
bool bufpool_in_region(const struct bufpool_buf *b);
/* True if a buffer of @len bytes can come from the region at all. */
bool bufpool_fits(const struct bufpool *p, size_t len);

/*
 * A buffer of at least @len bytes, held once by the caller.  Reuses the
 * least recently used published buffers nobody holds when the region is
 * full.  Where nothing can be freed, returns a buffer malloc'ed outside the
 * region if @may_malloc (bounded by the caller: readers waiting), else
 * NULL.  Release with bufpool_put().
 */
struct bufpool_buf *bufpool_get(struct bufpool *p, size_t len, bool may_malloc);
/*
 * A buffer over @len bytes at @off of @parent (held by the caller), held
 * once by the caller; it holds @parent until its own last put.  Its bytes
 * are @parent's: written by @parent's writer only, before either is handed
 * on.  Never published, 1-byte aligned (no O_DIRECT from it); in the
 * region where @parent is.  NULL without memory.
 */
struct bufpool_buf *bufpool_slice(struct bufpool *p, struct bufpool_buf *parent,
				  size_t off, size_t len);
/* Take one more reference on @b (a holder gives one to another). */
void bufpool_hold(struct bufpool *p, struct bufpool_buf *b);
/* Drop one reference; the last one of an unpublished buffer frees it. */
void bufpool_put(struct bufpool *p, struct bufpool_buf *b);
/*
 * @b (held by the caller) now holds the verified bytes of chunk @idx
 * (@len bytes) of content @id: make it findable.  An older buffer of the
 * same chunk stops being findable.  Buffers outside the region are not
 * published (they are freed at their last put).
 */
void bufpool_publish(struct bufpool *p, struct bufpool_buf *b,
		     const struct sfs_id *id, uint32_t idx, size_t len);
/*
 * Stop finding every chunk of content @id (its cache entry was evicted).
 * Returns how many were published.
 */
uint32_t bufpool_forget(struct bufpool *p, const struct sfs_id *id);
/* The published buffer of chunk @idx of @id, held for the caller, or NULL. */
struct bufpool_buf *bufpool_find(struct bufpool *p, const struct sfs_id *id,
				 uint32_t idx);
void bufpool_get_stats(struct bufpool *p, struct bufpool_stats *st);

#endif
