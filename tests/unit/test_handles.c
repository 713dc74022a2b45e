/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_handles: the file handle numbers (fuse/handles.h): generation
 * tags, take and adopt, and the open files' records a daemon taking the
 * mount over reads: kept, cleared at take, slots reused, a torn record
 * and a record written twice skipped, an inherited record adopted on its
 * first READ.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuse/handles.h"

static void test_numbers(void **state)
{
	struct handles *h;
	int a = 1, b = 2;
	uint64_t ia, ib, open, adopted;

	(void)state;
	assert_int_equal(handles_create(0, &h), -EINVAL);
	assert_int_equal(handles_create(HANDLE_GEN_MAX + 1, &h), -EINVAL);
	assert_int_equal(handles_create(3, &h), 0);
	ia = handles_add(h, HANDLE_FILE, &a);
	ib = handles_add(h, HANDLE_DIR, &b);
	assert_true(ia && ib && ia != ib);
	assert_int_equal(ia >> HANDLE_GEN_SHIFT, 3);
	assert_false(handles_inherited(h, ia));
	assert_false(handles_inherited(h, 0));
	assert_true(handles_inherited(h, (2ULL << HANDLE_GEN_SHIFT) | 7));
	assert_ptr_equal(handles_get(h, ia, HANDLE_FILE), &a);
	assert_null(handles_get(h, ia, HANDLE_DIR));	/* the kind is checked */
	assert_null(handles_get(h, ia + 100, HANDLE_FILE));
	assert_null(handles_take(h, ib, HANDLE_FILE));
	assert_ptr_equal(handles_take(h, ib, HANDLE_DIR), &b);
	assert_null(handles_get(h, ib, HANDLE_DIR));
	handles_count(h, &open, &adopted);
	assert_int_equal(open, 1);
	assert_int_equal(adopted, 0);
	handles_destroy(h);
}

static void test_adopt(void **state)
{
	struct handles *h;
	int x = 1, y = 2;
	uint64_t old = (1ULL << HANDLE_GEN_SHIFT) | 42, open, adopted;

	(void)state;
	assert_int_equal(handles_create(2, &h), 0);
	assert_ptr_equal(handles_adopt(h, old, HANDLE_FILE, &x), &x);
	/* a second adopter of the same number gets the first one's */
	assert_ptr_equal(handles_adopt(h, old, HANDLE_FILE, &y), &x);
	handles_count(h, &open, &adopted);
	assert_int_equal(open, 1);
	assert_int_equal(adopted, 1);
	assert_ptr_equal(handles_take(h, old, HANDLE_FILE), &x);
	handles_count(h, &open, &adopted);
	assert_int_equal(open, 0);
	assert_int_equal(adopted, 0);
	handles_destroy(h);
}

struct seen {
	int n;
	struct handle_record r[8];
};

static void each(void *arg, const struct handle_record *r)
{
	struct seen *s = arg;

	if (s->n < 8)
		s->r[s->n] = *r;
	s->n++;
}

static void test_records(void **state)
{
	struct handles *h1, *h2, *h3;
	struct handle_record r, *map;
	struct seen seen = { 0 };
	int f1, f2, f3, x = 1;
	uint64_t a, b, c;

	(void)state;
	assert_int_equal(handles_create(1, &h1), 0);
	assert_int_equal(handles_records_create(h1, &f1), 0);
	a = handles_add(h1, HANDLE_FILE, &x);
	b = handles_add(h1, HANDLE_FILE, &x);
	c = handles_add(h1, HANDLE_FILE, &x);
	handles_record(h1, a, 100, 0);		/* the daemon path */
	handles_record(h1, b, 200, 5);		/* passthrough, backing id 5 */
	handles_record(h1, c, 300, 6);
	/* c closed: its record goes, and its slot is used again */
	assert_true(handles_take_record(h1, c, &r));
	assert_int_equal(r.ino, 300);
	assert_false(handles_take_record(h1, c, &r));
	handles_take(h1, c, HANDLE_FILE);
	c = handles_add(h1, HANDLE_FILE, &x);
	handles_record(h1, c, 301, 7);

	/* a torn record (no check word) and a copy of b's: both skipped */
	map = mmap(NULL, HANDLE_RECORDS_MAX * sizeof(*map), PROT_READ | PROT_WRITE,
		   MAP_SHARED, f1, 0);
	assert_true(map != MAP_FAILED);
	map[10] = map[1];
	map[11] = (struct handle_record){ .id = (1ULL << HANDLE_GEN_SHIFT) | 99, .ino = 9,
					  .backing_id = 1, .check = 12345 };
	munmap(map, HANDLE_RECORDS_MAX * sizeof(*map));

	/* the next daemon */
	assert_int_equal(handles_create(2, &h2), 0);
	assert_int_equal(handles_records_create(h2, &f2), 0);
	assert_int_equal(handles_inherit(h2, f1, each, &seen), 3);
	assert_int_equal(seen.n, 3);
	for (int i = 0; i < 3; i++) {
		const struct handle_record *s = &seen.r[i];

		if (s->id == a)
			assert_true(s->ino == 100 && s->backing_id == 0);
		else if (s->id == b)
			assert_true(s->ino == 200 && s->backing_id == 5);
		else
			assert_true(s->id == c && s->ino == 301 && s->backing_id == 7);
	}
	/* an inherited record without a READ yet: no handle, but known */
	assert_true(handles_inherited(h2, a));
	assert_null(handles_get(h2, a, HANDLE_FILE));
	/* its first READ adopts it under the same number */
	assert_ptr_equal(handles_adopt(h2, a, HANDLE_FILE, &x), &x);
	assert_ptr_equal(handles_get(h2, a, HANDLE_FILE), &x);

	/* and a third daemon still knows them: h2 copied them into its own */
	assert_int_equal(handles_create(3, &h3), 0);
	assert_int_equal(handles_records_create(h3, &f3), 0);
	seen.n = 0;
	assert_int_equal(handles_inherit(h3, f2, each, &seen), 3);
	/* RELEASE in h3 says how the kernel read b */
	assert_true(handles_take_record(h3, b, &r));
	assert_int_equal(r.backing_id, 5);
	assert_null(handles_take(h3, b, HANDLE_FILE));
	assert_false(handles_take_record(h3, b, &r));
	handles_destroy(h1);	/* closes each table's memfd */
	handles_destroy(h2);
	handles_destroy(h3);
	(void)f3;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_adopt),
		cmocka_unit_test(test_records),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
