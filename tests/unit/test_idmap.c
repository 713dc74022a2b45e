/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_idmap: the content-id map: put/get/count, replacing a value, the
 * zero id, ids that differ in one half only, growth over many ids with
 * every value kept, release and reuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "idmap.h"
#include "util.h"

static struct sfs_id id_of(uint64_t i)
{
	struct sfs_id id;

	sfs_id_of(&i, sizeof(i), &id);
	return id;
}

static void test_basic(void **state)
{
	struct idmap m = IDMAP_INIT;
	struct sfs_id a = id_of(1), b = id_of(2), zero = { 0, 0 };
	uint64_t v = 0;

	(void)state;
	assert_false(idmap_get(&m, &a, &v));
	assert_false(idmap_get(&m, &zero, &v));
	assert_int_equal(idmap_put(&m, &a, 11), 0);
	assert_true(idmap_get(&m, &a, &v));
	assert_int_equal(v, 11);
	assert_false(idmap_get(&m, &b, &v));
	assert_int_equal(idmap_put(&m, &a, 12), 0);	/* replaced, not added */
	assert_true(idmap_get(&m, &a, &v));
	assert_int_equal(v, 12);
	assert_int_equal(idmap_count(&m), 1);
	assert_int_equal(idmap_put(&m, &zero, UINT64_MAX), 0);
	assert_true(idmap_get(&m, &zero, &v));
	assert_int_equal(v, UINT64_MAX);
	assert_int_equal(idmap_count(&m), 2);
	idmap_release(&m);
	assert_int_equal(idmap_count(&m), 0);
	assert_false(idmap_get(&m, &a, &v));
	assert_false(idmap_get(&m, &zero, &v));
	assert_int_equal(idmap_put(&m, &b, 5), 0);	/* reusable */
	assert_true(idmap_get(&m, &b, &v));
	assert_int_equal(v, 5);
	idmap_release(&m);
}

static void test_many(void **state)
{
	struct idmap m = IDMAP_INIT;
	const uint64_t n = 200000;
	uint64_t v;

	(void)state;
	for (uint64_t i = 0; i < n; i++) {
		struct sfs_id id = id_of(i);

		assert_int_equal(idmap_put(&m, &id, i * 3), 0);
	}
	/* ids that differ only in the high half, or only in the low one */
	for (uint64_t i = 0; i < 1000; i++) {
		struct sfs_id x = { 7, i + 1 }, y = { i + 1, 7 };

		assert_int_equal(idmap_put(&m, &x, i), 0);
		assert_int_equal(idmap_put(&m, &y, i + 5000), 0);
	}
	assert_int_equal(idmap_count(&m), n + 1999);	/* {7,7} twice */
	for (uint64_t i = 0; i < 2 * n; i++) {
		struct sfs_id id = id_of(i);

		v = 0;
		assert_true(idmap_get(&m, &id, &v) == (i < n));
		if (i < n)
			assert_int_equal(v, i * 3);
	}
	for (uint64_t i = 0; i < 1000; i++) {
		struct sfs_id x = { 7, i + 1 }, y = { i + 1, 7 };

		if (i == 6)
			continue;	/* x = y = {7, 7}: y's value replaced x's */
		assert_true(idmap_get(&m, &x, &v));
		assert_int_equal(v, i);
		assert_true(idmap_get(&m, &y, &v));
		assert_int_equal(v, i + 5000);
	}
	idmap_release(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic),
		cmocka_unit_test(test_many),
	};

	return cmocka_run_group_tests_name("idmap", tests, NULL, NULL) ? 1 : 0;
}
