/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inomap: (st_dev, st_ino) -> first path, for finding hard links in a walk.
 *
 * An intrusive hash table (htab.h) of entries that each hold their node,
 * key and path in one allocation (the path is copied in, as inomap.h
 * says); the table doubles at one entry per bucket, from 256 buckets.
 * Only files with st_nlink > 1 go in, so it stays small next to the tree.
 */
#include "inomap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define INOMAP_BUCKETS_MIN	256

struct inomap_ent {
	struct htab_node node;	/* in m->table */
	dev_t dev;
	ino_t ino;
	char path[];
};

struct ino_key {
	dev_t dev;
	ino_t ino;
};

static uint64_t ino_hash(dev_t dev, ino_t ino)
{
	uint64_t key[2] = { (uint64_t)dev, (uint64_t)ino };

	return XXH3_64bits(key, sizeof(key));
}

static bool ent_eq(const struct htab_node *n, const void *key)
{
	const struct inomap_ent *e = htab_entry(n, struct inomap_ent, node);
	const struct ino_key *k = key;

	return e->dev == k->dev && e->ino == k->ino;
}

const char *inomap_first(struct inomap *m, dev_t dev, ino_t ino,
			 const char *path, int *err)
{
	struct ino_key k = { dev, ino };
	uint64_t h = ino_hash(dev, ino);
	struct htab_node *n = htab_find(&m->table, h, ent_eq, &k);
	struct inomap_ent *e;
	size_t len;

	if (n)
		return htab_entry(n, struct inomap_ent, node)->path;
	len = strlen(path);
	if (htab_reserve(&m->table, MAX(m->table.n + 1, (size_t)INOMAP_BUCKETS_MIN))) {
		*err = -ENOMEM;
		return NULL;
	}
	e = malloc(sizeof(*e) + len + 1);
	if (!e) {
		*err = -ENOMEM;
		return NULL;
	}
	e->dev = dev;
	e->ino = ino;
	memcpy(e->path, path, len + 1);
	htab_add(&m->table, &e->node, h);
	return NULL;
}

void inomap_release(struct inomap *m)
{
	htab_for_each_safe(&m->table, i, pos, tmp)
		free(htab_entry(pos, struct inomap_ent, node));
	htab_release(&m->table);
}
