/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handles: see handles.h.  An htab of entries keyed by handle number.
 */
#include "handles.h"

#include "htab.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct hent {
	struct htab_node node;
	uint64_t id;
	void *ptr;
	enum handle_kind kind;
	bool adopted;
};

struct handles {
	uint64_t gen;
	pthread_mutex_t lock;
	struct htab tab;	/* protected by lock */
	uint64_t next;		/* protected by lock */
	uint64_t n, nadopted;	/* protected by lock */
};

int handles_create(uint32_t gen, struct handles **out)
{
	struct handles *h;

	if (!gen || gen > HANDLE_GEN_MAX)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	if (htab_init(&h->tab, 256)) {
		free(h);
		return -ENOMEM;
	}
	pthread_mutex_init(&h->lock, NULL);
	h->gen = gen;
	h->next = 1;
	*out = h;
	return 0;
}

void handles_destroy(struct handles *h)
{
	if (!h)
		return;
	htab_for_each_safe(&h->tab, i, pos, tmp)
		free(htab_entry(pos, struct hent, node));
	htab_release(&h->tab);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

static bool eq(const struct htab_node *n, const void *key)
{
	return htab_entry(n, struct hent, node)->id == *(const uint64_t *)key;
}

static struct hent *find_locked(struct handles *h, uint64_t id)
{
	struct htab_node *n = htab_find(&h->tab, htab_hash_u64(id), eq, &id);

	return n ? htab_entry(n, struct hent, node) : NULL;
}

static int insert_locked(struct handles *h, uint64_t id, enum handle_kind kind,
			 void *ptr, bool adopted)
{
	struct hent *e;

	if (htab_reserve(&h->tab, (size_t)h->n + 1) < 0 && !h->tab.nbuckets)
		return -ENOMEM;
	e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->id = id;
	e->ptr = ptr;
	e->kind = kind;
	e->adopted = adopted;
	htab_add(&h->tab, &e->node, htab_hash_u64(id));
	h->n++;
	h->nadopted += adopted;
	return 0;
}

uint64_t handles_add(struct handles *h, enum handle_kind kind, void *ptr)
{
	uint64_t id;

	pthread_mutex_lock(&h->lock);
	id = (h->gen << HANDLE_GEN_SHIFT) | h->next;
	if (insert_locked(h, id, kind, ptr, false))
		id = 0;
	else
		h->next = (h->next + 1) & ((1ULL << HANDLE_GEN_SHIFT) - 1);
	if (!h->next)
		h->next = 1;
	pthread_mutex_unlock(&h->lock);
	return id;
}

void *handles_get(struct handles *h, uint64_t id, enum handle_kind kind)
{
	struct hent *e;
	void *ptr = NULL;

	pthread_mutex_lock(&h->lock);
	e = find_locked(h, id);
	if (e && e->kind == kind)
		ptr = e->ptr;
	pthread_mutex_unlock(&h->lock);
	return ptr;
}

void *handles_take(struct handles *h, uint64_t id, enum handle_kind kind)
{
	struct hent *e;
	void *ptr = NULL;

	pthread_mutex_lock(&h->lock);
	e = find_locked(h, id);
	if (e && e->kind == kind) {
		ptr = e->ptr;
		htab_del(&h->tab, &e->node);
		h->n--;
		h->nadopted -= e->adopted;
		free(e);
	}
	pthread_mutex_unlock(&h->lock);
	return ptr;
}

bool handles_inherited(const struct handles *h, uint64_t id)
{
	return id && (id >> HANDLE_GEN_SHIFT) != h->gen;
}

void *handles_adopt(struct handles *h, uint64_t id, enum handle_kind kind, void *ptr)
{
	struct hent *e;
	void *ret;

	pthread_mutex_lock(&h->lock);
	e = find_locked(h, id);
	if (e)
		ret = e->kind == kind ? e->ptr : NULL;
	else
		ret = insert_locked(h, id, kind, ptr, true) ? NULL : ptr;
	pthread_mutex_unlock(&h->lock);
	return ret;
}

void handles_count(struct handles *h, uint64_t *open, uint64_t *adopted)
{
	pthread_mutex_lock(&h->lock);
	*open = h->n;
	*adopted = h->nadopted;
	pthread_mutex_unlock(&h->lock);
}
