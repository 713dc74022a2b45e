/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_htab: the intrusive hash table (htab.h) and list (list.h): add,
 * find, delete and growth with colliding and distinct hashes, the safe
 * walk while freeing, the integer hash, and the list's order, moves,
 * deletes, walks, splices and pops.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "htab.h"
#include "list.h"

struct item {
	uint64_t key;
	struct htab_node hnode;
	struct list_node lnode;
};

static bool item_eq(const struct htab_node *n, const void *key)
{
	return htab_entry(n, struct item, hnode)->key == *(const uint64_t *)key;
}

static struct item *find(struct htab *t, uint64_t key, uint64_t hash)
{
	struct htab_node *n = htab_find(t, hash, item_eq, &key);

	return n ? htab_entry(n, struct item, hnode) : NULL;
}

static void test_htab_basic(void **state)
{
	struct htab t;
	struct item it[3] = { { .key = 1 }, { .key = 2 }, { .key = 3 } };

	(void)state;
	assert_int_equal(htab_init(&t, 5), 0);
	assert_int_equal(t.nbuckets, 8);
	assert_null(find(&t, 1, 1));
	for (int i = 0; i < 3; i++)
		htab_add(&t, &it[i].hnode, it[i].key);
	assert_int_equal(t.n, 3);
	for (int i = 0; i < 3; i++)
		assert_ptr_equal(find(&t, it[i].key, it[i].key), &it[i]);
	/* same hash, other key: not found */
	assert_null(find(&t, 9, 1));
	htab_del(&t, &it[1].hnode);
	assert_int_equal(t.n, 2);
	assert_null(find(&t, 2, 2));
	assert_ptr_equal(find(&t, 3, 3), &it[2]);
	htab_release(&t);
	assert_null(t.buckets);
}

/* Every key hashes alike: one chain, told apart by the comparison. */
static void test_htab_collisions(void **state)
{
	enum { N = 100 };
	struct item *it = calloc(N, sizeof(*it));
	struct htab t;

	(void)state;
	assert_non_null(it);
	assert_int_equal(htab_init(&t, 16), 0);
	for (int i = 0; i < N; i++) {
		it[i].key = (uint64_t)i;
		htab_add(&t, &it[i].hnode, 42);
	}
	for (int i = 0; i < N; i++)
		assert_ptr_equal(find(&t, (uint64_t)i, 42), &it[i]);
	for (int i = 0; i < N; i += 2)
		htab_del(&t, &it[i].hnode);
	for (int i = 0; i < N; i++) {
		if (i % 2)
			assert_ptr_equal(find(&t, (uint64_t)i, 42), &it[i]);
		else
			assert_null(find(&t, (uint64_t)i, 42));
	}
	assert_int_equal(t.n, N / 2);
	htab_release(&t);
	free(it);
}

/* Growth keeps every entry findable; the safe walk sees each once. */
static void test_htab_grow_and_walk(void **state)
{
	enum { N = 5000 };
	struct htab t;
	size_t seen = 0;

	(void)state;
	assert_int_equal(htab_init(&t, 1), 0);
	for (uint64_t k = 0; k < N; k++) {
		struct item *it = calloc(1, sizeof(*it));

		assert_non_null(it);
		it->key = k;
		assert_int_equal(htab_reserve(&t, t.n + 1), 0);
		htab_add(&t, &it->hnode, k * 0x9e3779b97f4a7c15ULL);
	}
	assert_true(t.nbuckets >= N);
	assert_int_equal(t.nbuckets & (t.nbuckets - 1), 0);
	for (uint64_t k = 0; k < N; k++) {
		struct item *it = find(&t, k, k * 0x9e3779b97f4a7c15ULL);

		assert_non_null(it);
		assert_int_equal(it->key, k);
	}
	/* reserving what fits already changes nothing */
	size_t nb = t.nbuckets;
	assert_int_equal(htab_reserve(&t, N), 0);
	assert_int_equal(t.nbuckets, nb);
	htab_for_each_safe(&t, i, pos, tmp) {
		free(htab_entry(pos, struct item, hnode));
		seen++;
	}
	assert_int_equal(seen, N);
	htab_release(&t);
}

/* A zeroed table is empty and grows on the first reserve. */
static void test_htab_zeroed(void **state)
{
	struct htab t = HTAB_INIT;
	struct item it = { .key = 7 };

	(void)state;
	assert_null(find(&t, 7, 7));
	assert_int_equal(htab_reserve(&t, 3), 0);
	assert_int_equal(t.nbuckets, 4);
	htab_add(&t, &it.hnode, 7);
	assert_ptr_equal(find(&t, 7, 7), &it);
	htab_release(&t);
	htab_release(&t);	/* twice: harmless */
}

static uint64_t key_at(struct list_node *n)
{
	return list_entry(n, struct item, lnode)->key;
}

static void test_list(void **state)
{
	struct item it[4] = { { .key = 0 }, { .key = 1 }, { .key = 2 }, { .key = 3 } };
	struct list_node head;
	uint64_t order[4];
	int n = 0;

	(void)state;
	list_init(&head);
	assert_true(list_empty(&head));
	assert_null(list_first(&head));
	assert_null(list_last(&head));
	assert_false(list_linked(&it[0].lnode));
	list_add(&head, &it[0].lnode);		/* 0 */
	list_add(&head, &it[1].lnode);		/* 1 0 */
	list_add_tail(&head, &it[2].lnode);	/* 1 0 2 */
	list_add(&head, &it[3].lnode);		/* 3 1 0 2 */
	assert_true(list_linked(&it[0].lnode));
	assert_int_equal(key_at(list_first(&head)), 3);
	assert_int_equal(key_at(list_last(&head)), 2);
	list_move(&head, &it[0].lnode);		/* 0 3 1 2 */
	list_move(&head, &it[0].lnode);		/* already first: no change */
	list_for_each(pos, &head)
		order[n++] = key_at(pos);
	assert_int_equal(n, 4);
	assert_int_equal(order[0], 0);
	assert_int_equal(order[1], 3);
	assert_int_equal(order[2], 1);
	assert_int_equal(order[3], 2);
	n = 0;
	list_for_each_reverse(pos, &head)
		order[n++] = key_at(pos);
	assert_int_equal(order[0], 2);
	assert_int_equal(order[3], 0);
	list_del(&it[3].lnode);			/* 0 1 2 */
	assert_false(list_linked(&it[3].lnode));
	n = 0;
	list_for_each_reverse_safe(pos, tmp, &head) {
		order[n++] = key_at(pos);
		list_del(pos);
	}
	assert_int_equal(n, 3);
	assert_int_equal(order[0], 2);
	assert_int_equal(order[1], 1);
	assert_int_equal(order[2], 0);
	assert_true(list_empty(&head));
	list_add(&head, &it[1].lnode);
	list_for_each_safe(pos, tmp, &head)
		list_del(pos);
	assert_true(list_empty(&head));
}

/* Splice keeps order and empties the source; pop takes from the front. */
static void test_list_splice_pop(void **state)
{
	struct item it[5] = { { .key = 0 }, { .key = 1 }, { .key = 2 },
			      { .key = 3 }, { .key = 4 } };
	struct list_node a, b;
	uint64_t want[5] = { 0, 1, 2, 3, 4 };
	int n = 0;

	(void)state;
	list_init(&a);
	list_init(&b);
	list_splice_tail(&a, &b);		/* both empty: no change */
	assert_true(list_empty(&a));
	assert_null(list_pop(&a));
	list_add_tail(&a, &it[0].lnode);
	list_add_tail(&a, &it[1].lnode);	/* a: 0 1 */
	list_add_tail(&b, &it[2].lnode);
	list_add_tail(&b, &it[3].lnode);
	list_add_tail(&b, &it[4].lnode);	/* b: 2 3 4 */
	list_splice_tail(&a, &b);		/* a: 0 1 2 3 4 */
	assert_true(list_empty(&b));
	list_for_each(pos, &a)
		assert_int_equal(key_at(pos), want[n++]);
	assert_int_equal(n, 5);
	n = 0;
	list_for_each_reverse(pos, &a)
		assert_int_equal(key_at(pos), want[4 - n++]);
	/* into an empty head: the nodes move over whole */
	list_splice_tail(&b, &a);
	assert_true(list_empty(&a));
	for (n = 0; n < 5; n++) {
		struct list_node *p = list_pop(&b);

		assert_non_null(p);
		assert_int_equal(key_at(p), want[n]);
		assert_false(list_linked(p));
	}
	assert_null(list_pop(&b));
	assert_true(list_empty(&b));
}

/* A static head starts empty. */
static struct list_node static_head = LIST_INIT(static_head);

static void test_list_static(void **state)
{
	struct item it = { .key = 9 };

	(void)state;
	assert_true(list_empty(&static_head));
	list_add(&static_head, &it.lnode);
	assert_int_equal(key_at(list_first(&static_head)), 9);
	list_del(&it.lnode);
	assert_true(list_empty(&static_head));
}

/* Integer keys: sequential ones spread over the low bits the buckets use. */
static void test_htab_hash_u64(void **state)
{
	enum { N = 1024, NB = 256 };
	unsigned count[NB] = { 0 };

	(void)state;
	assert_int_equal(htab_hash_u64(0), 0);
	assert_true(htab_hash_u64(1) != htab_hash_u64(2));
	for (uint64_t k = 1; k <= N; k++)
		count[htab_hash_u64(k) & (NB - 1)]++;
	for (int i = 0; i < NB; i++)
		assert_true(count[i] <= 3 * N / NB);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_htab_basic),
		cmocka_unit_test(test_htab_collisions),
		cmocka_unit_test(test_htab_grow_and_walk),
		cmocka_unit_test(test_htab_zeroed),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_list_splice_pop),
		cmocka_unit_test(test_list_static),
		cmocka_unit_test(test_htab_hash_u64),
	};

	/* 0 pass, 1 fail: the runner's convention, not cmocka's failure count */
	return cmocka_run_group_tests_name("htab", tests, NULL, NULL) ? 1 : 0;
}
