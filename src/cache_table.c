/*
 * cache_table: the file table, content id -> struct cfile, and the life
 * of a struct cfile: created on first use (cache_file_get() or a journal
 * ADD), freed when nothing refers to it and it holds no data.
 *
 * A chained hash table of a power-of-two size that doubles when it holds
 * as many files as buckets.  It is on the READ hot path (every
 * cache_file_get()): no allocation but the entry's own.
 *
 * Locking: everything here runs under c->lock (cache_i.h).
 */
#include "cache_i.h"

#include <errno.h>
#include <stdlib.h>

static size_t bucket_of(const struct cache *c, const struct sfs_id *id)
{
	return (size_t)(id->lo ^ (id->hi >> 7)) & (c->nbuckets - 1);
}

struct cfile *cache_cfile_find(struct cache *c, const struct sfs_id *id)
{
	for (struct cfile *cf = c->buckets[bucket_of(c, id)]; cf; cf = cf->hnext)
		if (sfs_id_eq(&cf->id, id))
			return cf;
	return NULL;
}

static int table_grow(struct cache *c)
{
	size_t nb = c->nbuckets * 2;
	struct cfile **b = calloc(nb, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < c->nbuckets; i++) {
		struct cfile *cf = c->buckets[i];

		while (cf) {
			struct cfile *next = cf->hnext;
			size_t k = (size_t)(cf->id.lo ^ (cf->id.hi >> 7)) & (nb - 1);

			cf->hnext = b[k];
			b[k] = cf;
			cf = next;
		}
	}
	free(c->buckets);
	c->buckets = b;
	c->nbuckets = nb;
	return 0;
}

struct cfile *cache_cfile_new(struct cache *c, const struct sfs_id *id,
			       uint64_t size, uint32_t chunk_size)
{
	struct cfile *cf;
	uint64_t n = size ? DIV_ROUND_UP(size, chunk_size) : 0;
	size_t b;

	if (n > UINT32_MAX || !chunk_size)
		return NULL;
	if (c->nfiles >= c->nbuckets && table_grow(c))
		return NULL;
	cf = calloc(1, sizeof(*cf));
	if (!cf)
		return NULL;
	cf->chunks = n ? calloc(n, sizeof(*cf->chunks)) : NULL;
	if (n && !cf->chunks) {
		free(cf);
		return NULL;
	}
	cf->id = *id;
	cf->size = size;
	cf->chunk_size = chunk_size;
	cf->nchunks = (uint32_t)n;
	cf->fd = -1;
	cf->dfd = -1;
	for (uint32_t i = 0; i < cf->nchunks; i++) {
		cf->chunks[i].file = cf;
		cf->chunks[i].idx = i;
	}
	b = bucket_of(c, id);
	cf->hnext = c->buckets[b];
	c->buckets[b] = cf;
	c->nfiles++;
	c->st.files = c->nfiles;
	return cf;
}

static void cfile_unhash(struct cache *c, struct cfile *cf)
{
	struct cfile **pp = &c->buckets[bucket_of(c, &cf->id)];

	while (*pp && *pp != cf)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = cf->hnext;
	c->nfiles--;
	c->st.files = c->nfiles;
}

/* Free @cf if nothing refers to it and it holds no data. */
void cache_cfile_maybe_free(struct cache *c, struct cfile *cf)
{
	if (cf->refs || cf->present || cf->fd_users || cf->pins)
		return;
	for (uint32_t i = 0; i < cf->nchunks; i++)
		if (cf->chunks[i].state != CH_ABSENT)
			return;
	cache_fd_close_locked(c, cf);
	cfile_unhash(c, cf);
	free(cf->chunks);
	free(cf);
}
