/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch: the front of the prefetcher (prefetch.h): its options, its
 * parts made and wired in order, stopped in the order their threads
 * need, and its counters gathered.
 *
 * The parts (prefetch_i.h says who calls whom):
 *
 *   sched.c      the queues, the rate cap, the worker threads without the
 *                engine
 *   engine.c     every fetch of the daemon on one thread, the scheduler's
 *                consumer; its kick is the scheduler's hook (s->kick), set
 *                here, so the scheduler never calls the engine by name
 *   hints.c      the hint sessions
 *   stage.c      the epoch detector and its stagings (jobs of job.c)
 *
 * Only this file calls the parts' create, destroy and stats functions;
 * none of them calls this file.
 */
#include "prefetch_i.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void kick_engine(void *arg)
{
	pf_engine_kick(arg);
}

int pf_sched_create(const struct pf_opts *o, struct cache *c,
		    struct pf_sched **out, char *err, size_t errlen)
{
	struct pf_sched *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->o = *o;
	s->c = c;
	if (!s->o.inflight)
		s->o.inflight = 1;
	if (!s->o.user_inflight)
		s->o.user_inflight = s->o.inflight;
	s->o.weights = NULL;	/* the scheduler keeps them parsed */
	ret = pf_queues_create(s, o->weights, err, errlen);
	if (ret) {
		free(s);
		return ret;
	}
	s->hints = pf_hints_create(s);
	if (!s->hints) {
		ret = -ENOMEM;
		snprintf(err, errlen, "prefetch: out of memory");
		goto out_destroy;
	}
	s->stager = pf_stager_create(s);
	if (!s->stager) {
		ret = -ENOMEM;
		snprintf(err, errlen, "prefetch: out of memory");
		goto out_destroy;
	}
	if (o->io_uring) {
		char eerr[256];

		ret = pf_engine_create(s, c, &s->o, &s->engine, eerr, sizeof(eerr));
		if (ret)
			log_warn("prefetch: no I/O engine (%s): a worker thread per fetch", eerr);
	}
	if (s->engine) {
		s->kick_arg = s->engine;
		s->kick = kick_engine;
		*out = s;
		return 0;
	}
	ret = pf_queues_start_workers(s, err, errlen);
	if (ret)
		goto out_destroy;
	*out = s;
	return 0;

out_destroy:
	pf_sched_destroy(s);
	return ret;
}

void pf_sched_destroy(struct pf_sched *s)
{
	if (!s)
		return;
	pf_queues_stop(s);
	/* stagings end while the engine (or the workers) still finish fetches */
	if (s->stager)
		pf_stager_destroy(s->stager);
	pf_queues_join_workers(s);
	/* fills in flight finish; nothing new starts */
	pf_engine_destroy(s->engine);
	/* hint sessions first: ending one cancels its requests in the queues */
	if (s->hints)
		pf_hints_destroy(s->hints);
	pf_queues_destroy(s);
	free(s);
}

void pf_get_stats(struct pf_sched *s, struct pf_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!s)
		return;
	pf_queues_get_stats(s, st);
	st->warmup_jobs = (uint64_t)atomic_load(&s->jobs);
	st->hint_sessions = pf_hints_count(s->hints);
	pf_stager_get_stats(s->stager, st);
	pf_engine_get_stats(s->engine, st);	/* adds to demand_inflight */
}
