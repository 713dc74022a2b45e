/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_idset: the content-id set: add/has/count, the zero id, duplicates,
 * growth over many ids, release and reuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>

#include "idset.h"
#include "util.h"

static struct sfs_id id_of(uint64_t i)
{
	struct sfs_id id;

	sfs_id_of(&i, sizeof(i), &id);
	return id;
}

static void test_basic(void **state)
{
	struct idset s = IDSET_INIT;
	struct sfs_id zero = { 0, 0 }, a = id_of(1), b = id_of(2);

	assert_false(idset_has(&s, &a));
	assert_false(idset_has(&s, &zero));
	assert_int_equal(idset_count(&s), 0);
	assert_int_equal(idset_add(&s, &a), 1);
	assert_int_equal(idset_add(&s, &a), 0);
	assert_true(idset_has(&s, &a));
	assert_false(idset_has(&s, &b));
	assert_int_equal(idset_add(&s, &zero), 1);
	assert_int_equal(idset_add(&s, &zero), 0);
	assert_true(idset_has(&s, &zero));
	assert_int_equal(idset_count(&s), 2);
	idset_release(&s);
	assert_int_equal(idset_count(&s), 0);
	assert_false(idset_has(&s, &a));
	assert_false(idset_has(&s, &zero));
	assert_int_equal(idset_add(&s, &b), 1);
	assert_true(idset_has(&s, &b));
	idset_release(&s);
}

static void test_many(void **state)
{
	struct idset s = IDSET_INIT;
	const uint64_t n = 200000;

	for (uint64_t i = 0; i < n; i++) {
		struct sfs_id id = id_of(i);

		assert_int_equal(idset_add(&s, &id), 1);
	}
	/* ids differing only in the high half land apart too */
	for (uint64_t i = 0; i < 1000; i++) {
		struct sfs_id id = { i + 1, 7 };

		assert_int_equal(idset_add(&s, &id), 1);
	}
	assert_int_equal(idset_count(&s), n + 1000);
	for (uint64_t i = 0; i < 2 * n; i++) {
		struct sfs_id id = id_of(i);

		assert_true(idset_has(&s, &id) == (i < n));
	}
	for (uint64_t i = 0; i < n; i += 7) {
		struct sfs_id id = id_of(i);

		assert_int_equal(idset_add(&s, &id), 0);
	}
	assert_int_equal(idset_count(&s), n + 1000);
	idset_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic),
		cmocka_unit_test(test_many),
	};

	return cmocka_run_group_tests_name("idset", tests, NULL, NULL) ? 1 : 0;
}
