/* SPDX-License-Identifier: Apache-2.0 */
/*
 * htab: the out-of-line part of the intrusive hash table (htab.h):
 * creating, growing and releasing the bucket array.
 */
#include "htab.h"

#include <errno.h>
#include <stdlib.h>

static size_t pow2_at_least(size_t n)
{
	size_t p = 1;

	while (p < n)
		p *= 2;
	return p;
}

int htab_init(struct htab *t, size_t nbuckets)
{
	t->nbuckets = pow2_at_least(nbuckets ? nbuckets : 1);
	t->n = 0;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	if (!t->buckets) {
		t->nbuckets = 0;
		return -ENOMEM;
	}
	return 0;
}

void htab_release(struct htab *t)
{
	free(t->buckets);
	t->buckets = NULL;
	t->nbuckets = 0;
	t->n = 0;
}

int htab_reserve(struct htab *t, size_t n)
{
	size_t nb = t->nbuckets ? t->nbuckets : 1;
	struct htab_node **b;

	if (n <= t->nbuckets)
		return 0;
	while (nb < n)
		nb *= 2;
	b = calloc(nb, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct htab_node *node = t->buckets[i];

		while (node) {
			struct htab_node *next = node->next;
			size_t k = node->hash & (nb - 1);

			node->next = b[k];
			b[k] = node;
			node = next;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = nb;
	return 0;
}
