/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_spank_fair: the Slurm plugin's share of a node's 255 peer places
 * between the jobs running on it (slurm/spank_fair.c, issue 27): a job of
 * 400 nodes and two of 20 get 215, 20 and 20; equal jobs split evenly, the
 * lower job ids taking the odd places; what a small job leaves goes to the
 * big ones; an address two jobs share counts once and costs neither a
 * place; the outcome does not depend on the order the lists come in; the
 * left-out counts include the nodes past a list's cap.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slurm/spank_fair.h"

#define PLACES	255

/* what the tests allocate, freed after the last one (free_all) */
static void **allocs;
static size_t nallocs, capallocs;

static void *keep(void *p)
{
	assert_non_null(p);
	if (nallocs == capallocs) {
		capallocs = capallocs ? 2 * capallocs : 1024;
		allocs = realloc(allocs, capallocs * sizeof(*allocs));
		assert_non_null(allocs);
	}
	allocs[nallocs++] = p;
	return p;
}

static int free_all(void **state)
{
	while (nallocs)
		free(allocs[--nallocs]);
	free(allocs);
	return 0;
}

/*
 * The addresses of nodes [first, first + n) of a made-up fabric: node k is
 * 10.(k / 65536).(k / 256 % 256).(k % 256):785.
 */
static const char **addrs(unsigned first, size_t n)
{
	const char **v = keep(calloc(n ? n : 1, sizeof(*v)));

	for (size_t i = 0; i < n; i++) {
		unsigned k = first + (unsigned)i;
		char *a = keep(malloc(32));

		snprintf(a, 32, "10.%u.%u.%u:785", k / 65536, k / 256 % 256, k % 256);
		v[i] = a;
	}
	return v;
}

static struct fair_job job(uint32_t id, const char **v, size_t n)
{
	return (struct fair_job){ .jobid = id, .addrs = v, .naddrs = n };
}

static const struct fair_job *find(const struct fair_job *jobs, size_t n, uint32_t id)
{
	for (size_t i = 0; i < n; i++)
		if (jobs[i].jobid == id)
			return &jobs[i];
	fail_msg("job %u is missing", id);
	return NULL;
}

/* no address twice in the group, and every one from some job's list */
static void check_group(const char **group, size_t n, const struct fair_job *jobs, size_t njobs)
{
	for (size_t i = 0; i < n; i++) {
		bool listed = false;

		for (size_t k = 0; k < i; k++)
			assert_string_not_equal(group[i], group[k]);
		for (size_t j = 0; j < njobs && !listed; j++)
			for (size_t a = 0; a < jobs[j].naddrs && !listed; a++)
				listed = !strcmp(jobs[j].addrs[a], group[i]);
		assert_true(listed);
	}
}

static size_t count_from(const char **group, size_t n, const char **v, size_t nv)
{
	size_t c = 0;

	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < nv; k++)
			c += !strcmp(group[i], v[k]);
	return c;
}

/* the case: one tenant's 400 nodes no longer push out two jobs of 20 */
static void test_big_and_two_small(void **state)
{
	const char **big = addrs(0, 400), **s1 = addrs(1000, 20), **s2 = addrs(2000, 20);
	/* the big job first, as a directory may list it */
	struct fair_job jobs[] = { job(7, big, 400), job(9, s1, 20), job(8, s2, 20) };
	const char *group[PLACES];
	size_t n = fair_select(jobs, 3, PLACES, group);

	assert_int_equal(n, PLACES);
	check_group(group, n, jobs, 3);
	assert_int_equal(find(jobs, 3, 9)->in, 20);
	assert_int_equal(find(jobs, 3, 9)->left_out, 0);
	assert_int_equal(find(jobs, 3, 8)->in, 20);
	assert_int_equal(find(jobs, 3, 8)->left_out, 0);
	assert_int_equal(find(jobs, 3, 7)->taken, 215);
	assert_int_equal(find(jobs, 3, 7)->in, 215);
	assert_int_equal(find(jobs, 3, 7)->left_out, 185);
	/* the big job's first 215 nodes, in its list's order */
	assert_int_equal(count_from(group, n, big, 215), 215);
	/* the old rule (directory order, first 255) would have kept no small job */
	assert_int_equal(count_from(group, n, s1, 20) + count_from(group, n, s2, 20), 40);
	/* sorted by job id */
	assert_int_equal(jobs[0].jobid, 7);
	assert_int_equal(jobs[2].jobid, 9);
}

/* equal needs split evenly; the odd places go to the lowest job ids */
static void test_equal_jobs(void **state)
{
	struct fair_job jobs[] = {
		job(30, addrs(0, 300), 300), job(10, addrs(1000, 300), 300),
		job(20, addrs(2000, 300), 300), job(40, addrs(3000, 300), 300),
	};
	const char *group[PLACES];
	size_t n = fair_select(jobs, 4, PLACES, group);

	/* 255 = 4 * 63 + 3 */
	assert_int_equal(n, PLACES);
	assert_int_equal(find(jobs, 4, 10)->taken, 64);
	assert_int_equal(find(jobs, 4, 20)->taken, 64);
	assert_int_equal(find(jobs, 4, 30)->taken, 64);
	assert_int_equal(find(jobs, 4, 40)->taken, 63);
	assert_int_equal(find(jobs, 4, 40)->left_out, 300 - 63);
}

/* what the small jobs do not need goes to the ones that need more (max-min) */
static void test_leftover_to_big(void **state)
{
	struct fair_job jobs[] = {
		job(1, addrs(0, 5), 5), job(2, addrs(1000, 200), 200),
		job(3, addrs(2000, 60), 60), job(4, addrs(3000, 100), 100),
	};
	const char *group[PLACES];
	size_t n = fair_select(jobs, 4, PLACES, group);

	/* 5 + 60 whole; 190 left for two: 95 each */
	assert_int_equal(n, PLACES);
	assert_int_equal(find(jobs, 4, 1)->taken, 5);
	assert_int_equal(find(jobs, 4, 3)->taken, 60);
	assert_int_equal(find(jobs, 4, 2)->taken, 95);
	assert_int_equal(find(jobs, 4, 4)->taken, 95);
	assert_int_equal(find(jobs, 4, 2)->left_out, 105);
	assert_int_equal(find(jobs, 4, 4)->left_out, 5);

	/* room for all: every node is in, no one left out */
	struct fair_job few[] = { job(5, addrs(0, 100), 100), job(6, addrs(1000, 100), 100) };

	n = fair_select(few, 2, PLACES, group);
	assert_int_equal(n, 200);
	assert_int_equal(few[0].left_out + few[1].left_out, 0);

	/* none at all */
	assert_int_equal(fair_select(NULL, 0, PLACES, group), 0);
}

/* shared nodes count once and cost neither job a place */
static void test_duplicates(void **state)
{
	const char **a = addrs(0, 300), **b = addrs(150, 300);	/* 150 nodes in common */
	const char **same = keep(calloc(4, sizeof(*same)));
	struct fair_job jobs[] = { job(1, a, 300), job(2, b, 300) };
	const char *group[PLACES];
	size_t n = fair_select(jobs, 2, PLACES, group);

	assert_int_equal(n, PLACES);
	check_group(group, n, jobs, 2);
	/* each brings in its share: job 1 nodes 0..127, job 2 nodes 150..276 */
	assert_int_equal(jobs[0].taken, 128);
	assert_int_equal(jobs[1].taken, 127);
	/* job 2's are job 1's too: they count for both, once in the group */
	assert_int_equal(jobs[0].in, 255);
	assert_int_equal(jobs[0].left_out, 45);
	assert_int_equal(jobs[1].in, 127);
	assert_int_equal(jobs[1].left_out, 173);

	/* a job whose nodes are all another's: no place more, all in */
	struct fair_job sub[] = { job(3, a, 100), job(4, addrs(0, 50), 50) };

	n = fair_select(sub, 2, PLACES, group);
	assert_int_equal(n, 100);
	assert_int_equal(sub[0].taken + sub[1].taken, 100);
	assert_int_equal(sub[0].in, 100);
	assert_int_equal(sub[1].in, 50);
	assert_int_equal(sub[1].left_out, 0);

	/* two nodes at one address (peer_host=localhost): one place, both in */
	same[0] = same[1] = same[2] = "127.0.0.1:785";
	same[3] = "127.0.0.2:785";
	struct fair_job one[] = { job(5, same, 4) };

	n = fair_select(one, 1, PLACES, group);
	assert_int_equal(n, 2);
	assert_int_equal(one[0].in, 4);
	assert_int_equal(one[0].left_out, 0);
}

/* the same lists in any order make the same group */
static void test_order_independent(void **state)
{
	const char **v[5] = { addrs(0, 400), addrs(100, 30), addrs(5000, 90),
			      addrs(7000, 1), addrs(9000, 250) };
	size_t len[5] = { 400, 30, 90, 1, 250 };
	const char *ref[PLACES], *group[PLACES];
	struct fair_job jobs[5];
	size_t nref = 0;
	unsigned seed = 27;

	for (int round = 0; round < 50; round++) {
		size_t perm[5] = { 0, 1, 2, 3, 4 }, n;

		for (size_t i = 4; i > 0; i--) {	/* Fisher-Yates, a fixed seed */
			size_t k = (size_t)rand_r(&seed) % (i + 1), t = perm[i];

			perm[i] = perm[k];
			perm[k] = t;
		}
		for (size_t i = 0; i < 5; i++)
			jobs[i] = job(100 + (uint32_t)perm[i], v[perm[i]], len[perm[i]]);
		n = fair_select(jobs, 5, PLACES, group);
		assert_int_equal(n, PLACES);
		if (!round) {
			memcpy(ref, group, sizeof(ref));
			nref = n;
		}
		assert_int_equal(n, nref);
		for (size_t i = 0; i < n; i++)
			assert_string_equal(group[i], ref[i]);
		/* the 1-node and 30-node jobs are whole (30 shares 30 with the big one) */
		assert_int_equal(find(jobs, 5, 103)->left_out, 0);
		assert_int_equal(find(jobs, 5, 101)->left_out, 0);
	}
}

/* nodes past a list's cap are counted as left out; a smaller max is honoured */
static void test_unlisted_and_max(void **state)
{
	struct fair_job jobs[] = { job(1, addrs(0, 255), 255), job(2, addrs(1000, 3), 3) };
	const char *group[10];
	size_t n;

	jobs[0].unlisted = 144;		/* a 400-node job: itself and 144 past the cap */
	n = fair_select(jobs, 2, 10, group);
	assert_int_equal(n, 10);
	assert_int_equal(jobs[0].taken, 7);
	assert_int_equal(jobs[1].taken, 3);
	assert_int_equal(jobs[0].left_out, 255 - 7 + 144);
	assert_int_equal(jobs[1].left_out, 0);
	n = fair_select(jobs, 2, 0, group);
	assert_int_equal(n, 0);
	assert_int_equal(jobs[0].left_out, 255 + 144);
	assert_int_equal(jobs[1].left_out, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_big_and_two_small),
		cmocka_unit_test(test_equal_jobs),
		cmocka_unit_test(test_leftover_to_big),
		cmocka_unit_test(test_duplicates),
		cmocka_unit_test(test_order_independent),
		cmocka_unit_test(test_unlisted_and_max),
	};

	return cmocka_run_group_tests(tests, NULL, free_all);
}
