/* SPDX-License-Identifier: Apache-2.0 */
/*
 * readahead: fetch chunks ahead of a sequential reader of one open file.
 *
 * The kernel already reads ahead within its readahead window (read_ahead_kb)
 * and sends those READs in parallel; this works a level below, in whole
 * chunks, so the backend fetch of chunk N+1.. overlaps the reader's use of
 * chunk N.
 *
 * Detection: a READ is sequential when it starts within ra_slack bytes of the
 * frontier (the furthest end read so far).  The slack absorbs the kernel's
 * parallel readahead READs arriving out of order on different FUSE workers.
 * From the second sequential READ on, chunks up to WINDOW past the reader's
 * chunk are queued at readahead priority; WINDOW starts at 2 (1 where
 * readahead_max is 1) and doubles each time the reader enters a new chunk, up
 * to readahead_max.  A READ away from the frontier is random access: the
 * window collapses and nothing is queued until the reader is sequential
 * again.  Nothing is queued past the last chunk, or for chunks present.
 *
 * State is per open file handle and guarded by ra->lock; it holds a
 * reference on the file and is reference counted as the owner of its
 * queued requests, so pf_ra_release() never waits for a fetch.
 */
#include "prefetch_i.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>

struct pf_ra {
	struct pf_owner o;
	struct pf_sched *s;
	struct pf_file *f;
	pthread_mutex_t lock;
	uint64_t frontier;	/* protected by lock */
	uint32_t seq;		/* protected by lock: sequential READs in a row */
	uint32_t window;	/* protected by lock: chunks; 0 = not reading ahead */
	uint32_t next;		/* protected by lock: first chunk not yet queued */
	uint32_t cur;		/* protected by lock: the reader's chunk */
	uint32_t nchunks;
};

static void ra_done(struct pf_owner *o, const struct pf_req *r, int res)
{
	(void)o;
	(void)r;
	(void)res;
}

static void ra_free(struct pf_owner *o)
{
	struct pf_ra *ra = (struct pf_ra *)o;

	pf_file_put(ra->f);
	pthread_mutex_destroy(&ra->lock);
	free(ra);
}

struct pf_ra *pf_ra_create(struct pf_sched *s, struct backend *be,
			   const struct sfs_attr *a, bool nothrash)
{
	struct pf_ra *ra;
	uint64_t nchunks;
	int err;

	if (!s || !pf_opts(s)->readahead_max || !be->chunk_size)
		return NULL;
	nchunks = DIV_ROUND_UP(a->size, be->chunk_size);
	if (nchunks < 2)
		return NULL;
	ra = calloc(1, sizeof(*ra));
	if (!ra)
		return NULL;
	ra->f = pf_file_create(s, be, a, nothrash, NULL, &err);
	if (!ra->f) {
		free(ra);
		return NULL;
	}
	atomic_init(&ra->o.refs, 1);
	ra->o.done = ra_done;
	ra->o.free = ra_free;
	ra->s = s;
	ra->nchunks = (uint32_t)nchunks;
	pthread_mutex_init(&ra->lock, NULL);
	return ra;
}

void pf_ra_read(struct pf_ra *ra, uint64_t off, size_t size, uint32_t uid)
{
	const struct pf_opts *po;
	uint32_t csize, cur, last, max;
	uint64_t end;

	if (!ra || !size)
		return;
	po = pf_opts(ra->s);
	csize = ra->f->be->chunk_size;
	end = off + size;
	max = MIN(po->readahead_max, ra->nchunks);
	pthread_mutex_lock(&ra->lock);
	if (off + po->ra_slack >= ra->frontier && off <= ra->frontier + po->ra_slack) {
		ra->seq++;
		ra->frontier = MAX(ra->frontier, end);
	} else {
		/* random access: stop reading ahead */
		ra->seq = 0;
		ra->window = 0;
		ra->frontier = end;
	}
	if (ra->seq < 2) {
		pthread_mutex_unlock(&ra->lock);
		return;
	}
	cur = (uint32_t)((ra->frontier - 1) / csize);
	if (!ra->window) {
		ra->window = MIN(2u, max);
		ra->next = cur + 1;
		ra->cur = cur;
	} else if (cur > ra->cur) {
		ra->window = MIN(ra->window * 2, max);
		ra->cur = cur;
	}
	if (ra->next < cur + 1)
		ra->next = cur + 1;
	last = (uint32_t)MIN((uint64_t)cur + ra->window, (uint64_t)ra->nchunks - 1);
	for (; ra->next <= last; ra->next++) {
		if (cache_chunk_present(pf_cache(ra->s), ra->f->cf, ra->next))
			continue;
		if (pf_submit(ra->s, &ra->o, ra->f, ra->next, uid, PF_CLASS_READAHEAD,
			      PF_KIND_READAHEAD))
			break;
	}
	pthread_mutex_unlock(&ra->lock);
}

void pf_ra_release(struct pf_ra *ra)
{
	if (!ra)
		return;
	pf_cancel(ra->s, &ra->o);
	pf_owner_put(&ra->o);
}
