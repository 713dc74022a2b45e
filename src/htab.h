/* SPDX-License-Identifier: Apache-2.0 */
/*
 * htab: an intrusive chained hash table (in the spirit of git's hashmap.h
 * and the Linux kernel's hlist).
 *
 * The caller embeds a struct htab_node in its own struct, computes the
 * 64-bit hash of the key itself and supplies the key comparison; the table
 * keeps only an array of bucket heads (a power of two) and the chains
 * through the nodes, so adding an entry allocates nothing.  The node keeps
 * the entry's hash: chains are compared by hash before the caller's
 * comparison is called, and growing rehashes without asking the caller.
 * The bucket is the hash's low bits: a hash whose low bits are not uniform
 * must be mixed by the caller first.
 *
 * Contract:
 *  - htab_init() before use (0 or -ENOMEM), or start from HTAB_INIT (a
 *    zeroed table: empty, answered by htab_find(), grown by htab_reserve()
 *    before the first add); htab_release() frees the bucket
 *    array only: the entries are the caller's, to free before or after
 *    (htab_for_each_safe() walks them while they are freed).
 *  - The table never grows by itself: htab_reserve() before an add grows it
 *    (doubling) to hold that many entries at one per bucket, and fails with
 *    -ENOMEM leaving the table as it was.  A table sized once at init may
 *    hold any number of entries, its chains just grow longer.
 *  - htab_add() does not look for a duplicate: htab_find() first if the key
 *    may be there.  htab_del() takes a node that is in the table.
 *  - No locking here: whoever owns the table says which lock guards it and
 *    holds that lock around every call, including htab_find().
 */
#ifndef STAGEFS_HTAB_H
#define STAGEFS_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct htab_node {
	struct htab_node *next;		/* the bucket's chain */
	uint64_t hash;
};

struct htab {
	struct htab_node **buckets;
	size_t nbuckets;		/* a power of two */
	size_t n;			/* entries */
};

#define HTAB_INIT	{ NULL, 0, 0 }

/* The struct of type @type whose member @member is at @ptr. */
#define htab_entry(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* An empty table of @nbuckets buckets (rounded up to a power of two). */
int htab_init(struct htab *t, size_t nbuckets);
/* Free the bucket array (not the entries); @t is zeroed. */
void htab_release(struct htab *t);
/* Grow so that @n entries fit one per bucket.  0 or -ENOMEM. */
int htab_reserve(struct htab *t, size_t n);

/*
 * A hash for an integer key (an inode number, a uid): Fibonacci hashing,
 * the product's top 32 bits brought down to the low bits the bucket uses.
 */
static inline uint64_t htab_hash_u64(uint64_t key)
{
	return (key * 0x9e3779b97f4a7c15ULL) >> 32;
}

static inline struct htab_node **htab_bucket(const struct htab *t, uint64_t hash)
{
	return &t->buckets[hash & (t->nbuckets - 1)];
}

/* Add @node under @hash (at the head of its chain). */
static inline void htab_add(struct htab *t, struct htab_node *node, uint64_t hash)
{
	struct htab_node **b = htab_bucket(t, hash);

	node->hash = hash;
	node->next = *b;
	*b = node;
	t->n++;
}

/*
 * The entry under @hash for which @eq(node, @key) is true, or NULL.
 * Inline, so a constant @eq is inlined too.
 */
static inline struct htab_node *htab_find(const struct htab *t, uint64_t hash,
					  bool (*eq)(const struct htab_node *node,
						     const void *key),
					  const void *key)
{
	if (!t->nbuckets)
		return NULL;
	for (struct htab_node *n = *htab_bucket(t, hash); n; n = n->next)
		if (n->hash == hash && eq(n, key))
			return n;
	return NULL;
}

/* Take @node (in the table) out. */
static inline void htab_del(struct htab *t, struct htab_node *node)
{
	struct htab_node **pp = htab_bucket(t, node->hash);

	while (*pp && *pp != node)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = node->next;
		node->next = NULL;
		t->n--;
	}
}

/* Every entry, in no particular order; the loop may free @pos. */
#define htab_for_each_safe(t, i, pos, tmp) \
	for (size_t i = 0; i < (t)->nbuckets; i++) \
		for (struct htab_node *pos = (t)->buckets[i], \
		     *tmp = pos ? pos->next : NULL; pos; \
		     pos = tmp, tmp = pos ? pos->next : NULL)

#endif
