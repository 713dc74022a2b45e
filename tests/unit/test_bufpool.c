/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_bufpool: the engine's chunk buffers: buddy allocation and merging
 * within the region, alignment, the malloc fallback outside it, published
 * chunks found by (content id, index), reuse of the least recently used
 * unheld ones under pressure and never of held ones, slices that hold
 * their parent (published or not) until their last put, and many threads
 * at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prefetch/bufpool.h"
#include "log.h"
#include "util.h"

#define M	BUFPOOL_MIN

static struct sfs_id id_of(uint64_t n)
{
	return (struct sfs_id){ 0xabcd000000000000ULL | n, n * 7 + 1 };
}

static struct bufpool *pool(size_t bytes)
{
	struct bufpool *p = NULL;

	assert_int_equal(bufpool_create(bytes, &p), 0);
	return p;
}

static void test_buddy(void **state)
{
	struct bufpool *p = pool(16 * M + 12345);	/* rounded down to 16 blocks */
	struct bufpool_buf *b[17], *big, *x;
	struct bufpool_stats st;
	void *base;
	size_t len;

	bufpool_region(p, &base, &len);
	assert_int_equal(len, 16 * M);
	for (int i = 0; i < 16; i++) {
		b[i] = bufpool_get(p, i ? M : 1, false);
		assert_non_null(b[i]);
		assert_true(bufpool_in_region(b[i]));
		assert_int_equal(b[i]->cap, M);
		assert_int_equal((uintptr_t)b[i]->data % M, 0);
		assert_true((char *)b[i]->data >= (char *)base &&
			    (char *)b[i]->data + M <= (char *)base + len);
		memset(b[i]->data, i, M);
	}
	assert_null(bufpool_get(p, M, false));
	b[16] = bufpool_get(p, M, true);	/* outside the region */
	assert_non_null(b[16]);
	assert_false(bufpool_in_region(b[16]));
	bufpool_get_stats(p, &st);
	assert_int_equal(st.used_bytes, 16 * M);
	assert_int_equal(st.outside, 1);
	for (int i = 0; i < 16; i++)
		assert_int_equal(((unsigned char *)b[i]->data)[M - 1], i);
	for (int i = 0; i < 17; i++)
		bufpool_put(p, b[i]);
	bufpool_get_stats(p, &st);
	assert_int_equal(st.used_bytes, 0);
	assert_int_equal(st.outside, 0);

	/* everything merged back: the whole region in one buffer */
	big = bufpool_get(p, 16 * M, false);
	assert_non_null(big);
	assert_ptr_equal(big->data, base);
	assert_null(bufpool_get(p, 1, false));
	bufpool_put(p, big);

	/* halves, quarters: a freed half serves two quarters */
	b[0] = bufpool_get(p, 8 * M, false);
	b[1] = bufpool_get(p, 5 * M, false);	/* rounded up to 8 */
	assert_non_null(b[0]);
	assert_non_null(b[1]);
	assert_int_equal(b[1]->cap, 8 * M);
	assert_null(bufpool_get(p, M, false));
	bufpool_put(p, b[0]);
	b[2] = bufpool_get(p, 4 * M, false);
	b[3] = bufpool_get(p, 3 * M + 1, false);
	assert_non_null(b[2]);
	assert_non_null(b[3]);
	assert_null(bufpool_get(p, M, false));
	bufpool_put(p, b[1]);
	bufpool_put(p, b[2]);
	bufpool_put(p, b[3]);

	/* bigger than the region: always outside, whatever may_malloc says */
	x = bufpool_get(p, 17 * M, false);
	assert_non_null(x);
	assert_false(bufpool_in_region(x));
	assert_true(x->cap >= 17 * M);
	bufpool_put(p, x);
	bufpool_destroy(p);
}

static void test_publish_and_reuse(void **state)
{
	struct bufpool *p = pool(4 * M);
	struct bufpool_buf *b[4], *f, *g;
	struct sfs_id id = id_of(1);
	struct bufpool_stats st;

	/* four published chunks fill the region */
	for (uint32_t i = 0; i < 4; i++) {
		b[i] = bufpool_get(p, M, false);
		memset(b[i]->data, 'a' + (int)i, 100);
		bufpool_publish(p, b[i], &id, i, 100);
	}
	assert_null(bufpool_find(p, &id, 9));
	f = bufpool_find(p, &id, 2);
	assert_ptr_equal(f, b[2]);
	assert_int_equal(f->len, 100);
	assert_int_equal(((char *)f->data)[99], 'c');
	bufpool_put(p, f);
	for (int i = 0; i < 4; i++)
		bufpool_put(p, b[i]);	/* the fills are done; still findable */
	bufpool_get_stats(p, &st);
	assert_int_equal(st.published, 4);
	assert_int_equal(st.used_bytes, 4 * M);

	/* chunk 0 is read (recently used) and held; 1 is the oldest unheld */
	f = bufpool_find(p, &id, 0);
	assert_non_null(f);
	g = bufpool_get(p, M, false);
	assert_non_null(g);
	assert_null(bufpool_find(p, &id, 1));	/* reused */
	assert_ptr_equal(g, b[1]);
	/* 2 and 3 go next; 0 is held and stays */
	bufpool_put(p, g);
	g = bufpool_get(p, 2 * M, false);	/* needs 2 contiguous: 2+3 */
	assert_non_null(g);
	assert_null(bufpool_find(p, &id, 2));
	assert_null(bufpool_find(p, &id, 3));
	assert_null(bufpool_get(p, 2 * M, false));	/* 0 is held */
	bufpool_get_stats(p, &st);
	assert_int_equal(st.reused, 3);
	assert_int_equal(((char *)f->data)[0], 'a');
	bufpool_put(p, g);

	/* a chunk published again: the newer buffer is found, the older freed */
	g = bufpool_get(p, M, false);
	memset(g->data, 'z', 100);
	bufpool_publish(p, g, &id, 0, 100);
	bufpool_put(p, g);
	bufpool_put(p, f);	/* the old one, unpublished and unheld: freed */
	f = bufpool_find(p, &id, 0);
	assert_ptr_equal(f, g);
	assert_int_equal(((char *)f->data)[0], 'z');
	bufpool_put(p, f);
	bufpool_get_stats(p, &st);
	assert_int_equal(st.published, 1);
	assert_int_equal(st.used_bytes, M);

	/* another content id, same index: another chunk */
	struct sfs_id id2 = id_of(2);

	assert_null(bufpool_find(p, &id2, 0));
	/* forgetting a content id: none of its chunks is found any more */
	g = bufpool_get(p, M, false);
	bufpool_publish(p, g, &id2, 5, 10);
	bufpool_put(p, g);
	assert_int_equal(bufpool_forget(p, &id2), 1);
	assert_null(bufpool_find(p, &id2, 5));
	assert_non_null(f = bufpool_find(p, &id, 0));	/* others stay */
	bufpool_put(p, f);
	/* outside buffers are never published */
	g = bufpool_get(p, 64 * M, false);
	bufpool_publish(p, g, &id2, 0, 10);
	assert_null(bufpool_find(p, &id2, 0));
	bufpool_put(p, g);
	bufpool_destroy(p);
}

struct worker {
	pthread_t th;
	struct bufpool *p;
	unsigned seed;
	int bad;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < 20000; i++) {
		uint32_t idx = (uint32_t)(rand_r(&w->seed) % 64);
		struct sfs_id id = id_of(idx % 5);
		struct bufpool_buf *b = bufpool_find(w->p, &id, idx);

		if (b) {
			/* a published chunk holds its own bytes until nobody holds it */
			if (((uint32_t *)b->data)[0] != idx || b->len != 1000 + idx)
				w->bad++;
			bufpool_put(w->p, b);
			continue;
		}
		b = bufpool_get(w->p, (rand_r(&w->seed) % 3 + 1) * M / 2, i % 7 == 0);
		if (!b)
			continue;
		((uint32_t *)b->data)[0] = idx;
		bufpool_publish(w->p, b, &id, idx, 1000 + idx);
		bufpool_put(w->p, b);
	}
	return NULL;
}

static void test_slices(void **state)
{
	struct bufpool *p = pool(2 * M);
	struct bufpool_buf *pk, *s1, *s2, *g;
	struct bufpool_stats st;
	struct sfs_id id = id_of(3);

	(void)state;
	pk = bufpool_get(p, 2 * M, false);	/* the whole region */
	assert_non_null(pk);
	for (size_t i = 0; i < 2 * M; i++)
		((unsigned char *)pk->data)[i] = (unsigned char)(i * 7);
	s1 = bufpool_slice(p, pk, 1000, 29000);
	s2 = bufpool_slice(p, pk, M + 17, 5);
	assert_non_null(s1);
	assert_non_null(s2);
	assert_ptr_equal(s1->data, (char *)pk->data + 1000);
	assert_int_equal(s1->cap, 29000);
	assert_true(bufpool_in_region(s1));
	assert_int_equal(((unsigned char *)s2->data)[0], (unsigned char)((M + 17) * 7));
	/* a slice is never published: nothing finds it */
	bufpool_publish(p, s1, &id, 0, 29000);
	assert_null(bufpool_find(p, &id, 0));
	/* the parent's own put leaves it held by its slices: no room */
	bufpool_put(p, pk);
	assert_null(bufpool_get(p, M, false));
	bufpool_hold(p, s1);	/* a reader served from it */
	bufpool_put(p, s1);
	bufpool_put(p, s2);
	assert_null(bufpool_get(p, M, false));
	bufpool_put(p, s1);	/* the last one: the parent is free */
	bufpool_get_stats(p, &st);
	assert_int_equal(st.used_bytes, 0);
	assert_int_equal(st.outside, 0);
	g = bufpool_get(p, 2 * M, false);
	assert_non_null(g);
	/* a published parent stays findable after its slices are gone */
	bufpool_publish(p, g, &id, 1, 100);
	s1 = bufpool_slice(p, g, 0, 100);
	bufpool_put(p, g);
	bufpool_put(p, s1);
	g = bufpool_find(p, &id, 1);
	assert_non_null(g);
	bufpool_put(p, g);
	/* and a slice of a buffer outside the region frees it at the end */
	g = bufpool_get(p, 4 * M, true);
	assert_false(bufpool_in_region(g));
	s1 = bufpool_slice(p, g, 3 * M, M);
	assert_false(bufpool_in_region(s1));
	bufpool_put(p, g);
	bufpool_get_stats(p, &st);
	assert_int_equal(st.outside, 1);
	bufpool_put(p, s1);
	bufpool_get_stats(p, &st);
	assert_int_equal(st.outside, 0);
	bufpool_destroy(p);
}

static void test_threads(void **state)
{
	struct bufpool *p = pool(32 * M);
	struct worker w[4];
	struct bufpool_stats st;

	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .p = p, .seed = (unsigned)i + 1 };
		assert_int_equal(pthread_create(&w[i].th, NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(w[i].th, NULL);
		assert_int_equal(w[i].bad, 0);
	}
	bufpool_get_stats(p, &st);
	assert_true(st.hits > 0);
	assert_true(st.reused > 0);
	assert_int_equal(st.outside, 0);
	assert_true(st.used_bytes <= 32 * M);
	bufpool_destroy(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buddy),
		cmocka_unit_test(test_publish_and_reuse),
		cmocka_unit_test(test_slices),
		cmocka_unit_test(test_threads),
	};

	printf("test_bufpool: chunk buffers of the I/O engine: buddy allocation, published chunks, reuse\n");
	fflush(stdout);
	log_level = LOG_ERR;
	return cmocka_run_group_tests_name("bufpool", tests, NULL, NULL);
}
