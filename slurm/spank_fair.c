/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_fair: the max-min fair share of a node's peer group between the
 * jobs running on it; see spank_fair.h.
 */
#include "spank_fair.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int job_cmp(const void *a, const void *b)
{
	const struct fair_job *x = a, *y = b;

	return x->jobid < y->jobid ? -1 : x->jobid > y->jobid;
}

static bool in_group(const char *const *group, size_t n, const char *addr)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(group[i], addr))
			return true;
	return false;
}

size_t fair_select(struct fair_job *jobs, size_t njobs, size_t max, const char **group)
{
	size_t n = 0;
	bool more = true;

	if (njobs > 1)
		qsort(jobs, njobs, sizeof(*jobs), job_cmp);
	for (size_t j = 0; j < njobs; j++)
		jobs[j].taken = jobs[j].next_ = 0;
	/* round-robin: each job brings in its next node not yet in, if any */
	while (n < max && more) {
		more = false;
		for (size_t j = 0; j < njobs && n < max; j++) {
			struct fair_job *fj = &jobs[j];

			while (fj->next_ < fj->naddrs) {
				const char *a = fj->addrs[fj->next_++];

				if (in_group(group, n, a))
					continue;	/* already in: costs nothing */
				group[n++] = a;
				fj->taken++;
				more = true;
				break;
			}
		}
	}
	for (size_t j = 0; j < njobs; j++) {
		struct fair_job *fj = &jobs[j];

		fj->in = 0;
		for (size_t i = 0; i < fj->naddrs; i++)
			fj->in += in_group(group, n, fj->addrs[i]);
		fj->left_out = fj->naddrs - fj->in + fj->unlisted;
	}
	return n;
}
