/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_s3split: where a large S3 directory's listing is cut.  A counter's
 * names cut one digit above where a page's names vary, or higher where
 * there is no room; an end key bounds the cuts (one equal to it makes a
 * range of one key); fewer cuts asked for keeps the first; nothing to
 * cut gives none; and over random keys
 * and bounds, the cuts ascend strictly, each after the start and not
 * after the end, so the ranges they make hold every key once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config.h"
#include "backend/s3.h"

#ifdef CONFIG_HAVE_S3

static char pts[64][S3_SPLIT_KEY];

static void test_counter(void **state)
{
	static const char *const want[] = {
		"d/img_002", "d/img_003", "d/img_004", "d/img_005", "d/img_006", "d/img_007",
		"d/img_008", "d/img_009",
	};
	size_t n;

	(void)state;
	/* a page from img_001000 to img_001999: its names vary at byte 9 */
	n = s3_split_points("d/img_001999.jpg", NULL, 2, 9, "0123456789", pts, 16);
	assert_int_equal(n, 8);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(pts[i], want[i]);
	/* fewer asked for: the first ones, the rest one range */
	n = s3_split_points("d/img_001999.jpg", NULL, 2, 9, "0123456789", pts, 3);
	assert_int_equal(n, 3);
	assert_string_equal(pts[0], "d/img_002");
	assert_string_equal(pts[2], "d/img_004");
	/* no room above: the next position up */
	n = s3_split_points("d/img_009999.jpg", NULL, 2, 9, "0123456789", pts, 16);
	assert_int_equal(n, 9);
	assert_string_equal(pts[0], "d/img_01");
	assert_string_equal(pts[8], "d/img_09");
}

static void test_bounded(void **state)
{
	size_t n;

	(void)state;
	/* names vary at byte 4: cuts at byte 3, below "d/c2" */
	n = s3_split_points("d/a5x", "d/a9", 2, 4, "0123456789abc", pts, 64);
	assert_int_equal(n, 4);
	assert_string_equal(pts[0], "d/a6");
	assert_string_equal(pts[3], "d/a9");	/* the end itself: a range of one key */
	/* nothing between @after and @upto at that depth: the next position up */
	n = s3_split_points("d/a9x", "d/c2", 2, 4, "0123456789abc", pts, 64);
	assert_int_equal(n, 3);
	assert_string_equal(pts[0], "d/aa");
	assert_string_equal(pts[2], "d/ac");
	/* the directory's prefix is never cut into, nor is anything past the last byte */
	assert_int_equal(s3_split_points("d/zz", NULL, 2, 3, "abz", pts, 64), 0);
	assert_int_equal(s3_split_points("d/", NULL, 2, 2, "abc", pts, 64), 0);
	assert_int_equal(s3_split_points("d/a", "d/a", 2, 3, "abc", pts, 64), 0);
}

static void test_random(void **state)
{
	static const char alpha[] = "-.0123456789_abcdefxyz";
	unsigned seed = 11;

	(void)state;
	for (int round = 0; round < 5000; round++) {
		char after[24] = "p/", upto[24] = "p/", chars[sizeof(alpha)];
		size_t la = 1 + (size_t)rand_r(&seed) % 12, lu = 1 + (size_t)rand_r(&seed) % 12;
		size_t nc = 0, n;
		bool bounded = rand_r(&seed) % 2;

		for (size_t i = 0; i < la; i++)
			after[2 + i] = alpha[rand_r(&seed) % (sizeof(alpha) - 1)];
		for (size_t i = 0; i < lu; i++)
			upto[2 + i] = alpha[rand_r(&seed) % (sizeof(alpha) - 1)];
		if (bounded && strcmp(upto, after) <= 0)
			continue;
		for (size_t i = 0; i < sizeof(alpha) - 1; i++)
			if (rand_r(&seed) % 3)
				chars[nc++] = alpha[i];
		chars[nc] = '\0';
		n = s3_split_points(after, bounded ? upto : NULL, 2, 2 + (size_t)rand_r(&seed) % 14,
				    chars, pts, 1 + rand_r(&seed) % 40);
		for (size_t i = 0; i < n; i++) {
			assert_true(strcmp(pts[i], after) > 0);
			assert_true(!bounded || strcmp(pts[i], upto) <= 0);
			assert_true(!i || strcmp(pts[i - 1], pts[i]) < 0);
			assert_memory_equal(pts[i], "p/", 2);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counter),
		cmocka_unit_test(test_bounded),
		cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests_name("s3split", tests, NULL, NULL) ? 1 : 0;
}

#else

int main(void)
{
	puts("s3split: built without S3 sources");
	return 0;
}

#endif
