/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pushmap: the inodes pushed whole at OPEN (fuse/pushmap.h): nothing
 * remembered before the first push, remembered until FORGET, a FORGET of
 * another inode changes nothing, a collision forgets the older inode and
 * never answers yes for an inode not pushed, and inode 0 is never in it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fuse/pushmap.h"

static void test_add_forget(void **state)
{
	struct pushmap *pm = pushmap_create(0);

	(void)state;
	assert_non_null(pm);
	assert_false(pushmap_has(pm, 42));
	pushmap_forget(pm, 42);		/* before the table exists: nothing */
	pushmap_add(pm, 42);
	assert_true(pushmap_has(pm, 42));
	assert_false(pushmap_has(pm, 43));
	pushmap_forget(pm, 43);
	assert_true(pushmap_has(pm, 42));
	pushmap_forget(pm, 42);
	assert_false(pushmap_has(pm, 42));
	pushmap_add(pm, 0);
	assert_false(pushmap_has(pm, 0));
	pushmap_destroy(pm);
	pushmap_destroy(NULL);
}

/* Many more inodes than slots: every yes is an inode pushed and not forgotten. */
static void test_collisions(void **state)
{
	enum { N = 20000 };
	struct pushmap *pm = pushmap_create(4096);
	unsigned yes = 0;

	(void)state;
	assert_non_null(pm);
	for (uint64_t i = 1; i <= N; i += 2)
		pushmap_add(pm, i);
	for (uint64_t i = 1; i <= N; i++) {
		bool has = pushmap_has(pm, i);

		if (!(i & 1))
			assert_false(has);
		yes += has;
	}
	/* the last ones pushed are there; at most one a slot */
	assert_true(pushmap_has(pm, N - 1));
	assert_true(yes > 1000 && yes <= 4096);
	/* forgetting an inode whose slot another took keeps the other */
	for (uint64_t i = 1; i <= N; i += 2)
		if (!pushmap_has(pm, i))
			pushmap_forget(pm, i);
	assert_true(pushmap_has(pm, N - 1));
	pushmap_destroy(pm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_forget),
		cmocka_unit_test(test_collisions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
