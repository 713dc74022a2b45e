/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idset: a hash set of content ids.  The ids are XXH3-128 outputs, so their
 * low bits are already uniform: the slot is (lo ^ hi) & (cap - 1).
 *
 * Not the intrusive table (htab.h) on purpose: an id is a 16-byte value
 * with no struct around it to embed a node in, and `stagefs gc` holds
 * millions of them.  Stored inline, an id costs 32 bytes of table and no
 * allocation; through htab it would cost an allocation and a node each.
 */
#include "idset.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot_of(const struct sfs_id *v, size_t cap, const struct sfs_id *id)
{
	size_t mask = cap - 1, i = (size_t)(id->lo ^ id->hi) & mask;

	while (!sfs_id_is_zero(&v[i]) && !sfs_id_eq(&v[i], id))
		i = (i + 1) & mask;
	return i;
}

static int grow(struct idset *s)
{
	size_t ncap = s->cap ? s->cap * 2 : 4096;
	struct sfs_id *nv = calloc(ncap, sizeof(*nv));

	if (!nv)
		return -ENOMEM;
	for (size_t k = 0; k < s->cap; k++)
		if (!sfs_id_is_zero(&s->v[k]))
			nv[slot_of(nv, ncap, &s->v[k])] = s->v[k];
	free(s->v);
	s->v = nv;
	s->cap = ncap;
	return 0;
}

int idset_add(struct idset *s, const struct sfs_id *id)
{
	size_t i;

	if (sfs_id_is_zero(id)) {
		if (s->has_zero)
			return 0;
		s->has_zero = true;
		return 1;
	}
	if ((s->n + 1) * 2 > s->cap && grow(s))
		return -ENOMEM;
	i = slot_of(s->v, s->cap, id);
	if (!sfs_id_is_zero(&s->v[i]))
		return 0;
	s->v[i] = *id;
	s->n++;
	return 1;
}

bool idset_has(const struct idset *s, const struct sfs_id *id)
{
	if (sfs_id_is_zero(id))
		return s->has_zero;
	if (!s->cap)
		return false;
	return !sfs_id_is_zero(&s->v[slot_of(s->v, s->cap, id)]);
}

size_t idset_count(const struct idset *s)
{
	return s->n + (s->has_zero ? 1 : 0);
}

void idset_release(struct idset *s)
{
	free(s->v);
	s->v = NULL;
	s->n = 0;
	s->cap = 0;
	s->has_zero = false;
}
