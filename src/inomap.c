/*
 * inomap: (st_dev, st_ino) -> first path, for finding hard links in a walk.
 *
 * Linear probing over a power-of-two table kept at most half full; only
 * files with st_nlink > 1 go in, so it stays small next to the tree.
 */
#include "inomap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

struct inomap_slot {
	dev_t dev;
	ino_t ino;
	char *path;		/* NULL: empty slot */
};

static size_t slot_of(const struct inomap_slot *slots, size_t cap, dev_t dev,
		      ino_t ino)
{
	uint64_t key[2] = { (uint64_t)dev, (uint64_t)ino };
	size_t i = (size_t)XXH3_64bits(key, sizeof(key)) & (cap - 1);

	while (slots[i].path && (slots[i].dev != dev || slots[i].ino != ino))
		i = (i + 1) & (cap - 1);
	return i;
}

static int grow(struct inomap *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 256;
	struct inomap_slot *ns = calloc(ncap, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].path)
			ns[slot_of(ns, ncap, m->slots[i].dev, m->slots[i].ino)] =
				m->slots[i];
	free(m->slots);
	m->slots = ns;
	m->cap = ncap;
	return 0;
}

const char *inomap_first(struct inomap *m, dev_t dev, ino_t ino,
			 const char *path, int *err)
{
	struct inomap_slot *s;

	if ((m->n + 1) * 2 > m->cap && grow(m)) {
		*err = -ENOMEM;
		return NULL;
	}
	s = &m->slots[slot_of(m->slots, m->cap, dev, ino)];
	if (s->path)
		return s->path;
	s->path = strdup(path);
	if (!s->path) {
		*err = -ENOMEM;
		return NULL;
	}
	s->dev = dev;
	s->ino = ino;
	m->n++;
	return NULL;
}

void inomap_release(struct inomap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i].path);
	free(m->slots);
	m->slots = NULL;
	m->n = 0;
	m->cap = 0;
}
