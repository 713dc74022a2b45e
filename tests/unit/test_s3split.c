/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_s3split: where a large S3 directory's listing is cut.  A counter's
 * names cut at the shallowest digits first; an end key bounds the cuts
 * (a cut that is a prefix of it is still before it); too few cuts asked
 * for keeps the widest; nothing to cut gives none; and over random keys
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
		"d/img_01", "d/img_02", "d/img_03", "d/img_04", "d/img_05", "d/img_06", "d/img_07",
		"d/img_1", "d/img_2", "d/img_3", "d/img_4", "d/img_5", "d/img_6", "d/img_7",
		"d/img_8", "d/img_9",
	};
	size_t n;

	(void)state;
	n = s3_split_points("d/img_000999.jpg", NULL, 2, "0123456789", pts, 16);
	assert_int_equal(n, 16);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(pts[i], want[i]);
	/* fewer: the widest ranges, the top digit's */
	n = s3_split_points("d/img_000999.jpg", NULL, 2, "0123456789", pts, 4);
	assert_int_equal(n, 4);
	assert_string_equal(pts[0], "d/img_1");
	assert_string_equal(pts[3], "d/img_4");
}

static void test_bounded(void **state)
{
	static const char *const want[] = {
		"d/a6", "d/a7", "d/a8", "d/a9", "d/aa", "d/ab", "d/ac", "d/b", "d/c",
	};
	size_t n;

	(void)state;
	n = s3_split_points("d/a5", "d/c2", 2, "0123456789abc", pts, 64);
	assert_int_equal(n, 9);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(pts[i], want[i]);
	/* the directory's prefix is never cut into, nor is anything past the last byte */
	assert_int_equal(s3_split_points("d/zz", NULL, 2, "abz", pts, 64), 0);
	assert_int_equal(s3_split_points("d/", NULL, 2, "abc", pts, 64), 0);
	assert_int_equal(s3_split_points("d/a", "d/a", 2, "abc", pts, 64), 0);
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
		n = s3_split_points(after, bounded ? upto : NULL, 2, chars, pts, 1 + rand_r(&seed) % 40);
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
