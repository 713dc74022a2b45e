/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_table: the file table, content id -> struct cfile, and the life
 * of a struct cfile: created on first use (cache_file_get() or a journal
 * ADD), freed when nothing refers to it and it holds no data.
 *
 * An intrusive hash table (htab.h) through cfile.hnode, of a power-of-two
 * size that doubles when it holds as many files as buckets.  It is on the
 * READ hot path (every cache_file_get()): nothing is allocated but the
 * entry itself, and no lock is taken but c->lock, which the caller holds.
 *
 * Locking: everything here runs under c->lock (cache_i.h).
 */
#include "cache_i.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define TABLE_BUCKETS_MIN	1024

/* Content ids are XXH3-128 outputs: their low bits are uniform already. */
static uint64_t id_hash(const struct sfs_id *id)
{
	return id->lo ^ (id->hi >> 7);
}

static bool cfile_eq(const struct htab_node *n, const void *key)
{
	return sfs_id_eq(&htab_entry(n, struct cfile, hnode)->id, key);
}

int cache_table_init(struct cache *c)
{
	return htab_init(&c->files, TABLE_BUCKETS_MIN);
}

/* Close and free every file still in the table, then the table. */
void cache_table_release(struct cache *c)
{
	htab_for_each_safe(&c->files, i, pos, tmp) {
		struct cfile *cf = htab_entry(pos, struct cfile, hnode);

		if (cf->fd >= 0)
			close(cf->fd);
		if (cf->dfd >= 0)
			close(cf->dfd);
		free(cf->chunks);
		free(cf);
	}
	htab_release(&c->files);
}

struct cfile *cache_cfile_find(struct cache *c, const struct sfs_id *id)
{
	struct htab_node *n = htab_find(&c->files, id_hash(id), cfile_eq, id);

	return n ? htab_entry(n, struct cfile, hnode) : NULL;
}

struct cfile *cache_cfile_new(struct cache *c, const struct sfs_id *id,
			      uint64_t size, uint32_t chunk_size)
{
	struct cfile *cf;
	uint64_t n = size ? DIV_ROUND_UP(size, chunk_size) : 0;

	if (n > UINT32_MAX || !chunk_size)
		return NULL;
	if (htab_reserve(&c->files, c->files.n + 1))
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
	htab_add(&c->files, &cf->hnode, id_hash(id));
	c->st.files = c->files.n;
	return cf;
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
	htab_del(&c->files, &cf->hnode);
	c->st.files = c->files.n;
	free(cf->chunks);
	free(cf);
}
