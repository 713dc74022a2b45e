/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idmap: content id -> 64-bit value, open addressing (idmap.h).  The ids
 * are XXH3-128 outputs, so their bits are already uniform: the slot is
 * (lo ^ hi) & (cap - 1), as in idset.c, whose set this is with a value.
 */
#include "idmap.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot_of(const struct idmap_ent *v, size_t cap, const struct sfs_id *id)
{
	size_t mask = cap - 1, i = (size_t)(id->lo ^ id->hi) & mask;

	while (!sfs_id_is_zero(&v[i].id) && !sfs_id_eq(&v[i].id, id))
		i = (i + 1) & mask;
	return i;
}

static int grow(struct idmap *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 4096;
	struct idmap_ent *nv = calloc(ncap, sizeof(*nv));

	if (!nv)
		return -ENOMEM;
	for (size_t k = 0; k < m->cap; k++)
		if (!sfs_id_is_zero(&m->v[k].id))
			nv[slot_of(nv, ncap, &m->v[k].id)] = m->v[k];
	free(m->v);
	m->v = nv;
	m->cap = ncap;
	return 0;
}

int idmap_put(struct idmap *m, const struct sfs_id *id, uint64_t val)
{
	size_t i;

	if (sfs_id_is_zero(id)) {
		m->has_zero = true;
		m->zero_val = val;
		return 0;
	}
	if ((m->n + 1) * 2 > m->cap && grow(m))
		return -ENOMEM;
	i = slot_of(m->v, m->cap, id);
	if (sfs_id_is_zero(&m->v[i].id)) {
		m->v[i].id = *id;
		m->n++;
	}
	m->v[i].val = val;
	return 0;
}

bool idmap_get(const struct idmap *m, const struct sfs_id *id, uint64_t *val)
{
	size_t i;

	if (sfs_id_is_zero(id)) {
		if (m->has_zero)
			*val = m->zero_val;
		return m->has_zero;
	}
	if (!m->cap)
		return false;
	i = slot_of(m->v, m->cap, id);
	if (sfs_id_is_zero(&m->v[i].id))
		return false;
	*val = m->v[i].val;
	return true;
}

size_t idmap_count(const struct idmap *m)
{
	return m->n + (m->has_zero ? 1 : 0);
}

void idmap_release(struct idmap *m)
{
	free(m->v);
	*m = (struct idmap)IDMAP_INIT;
}
