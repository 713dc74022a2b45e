/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon: see daemon.h.
 */
#include "daemon.h"

#include "packpush.h"

#include "prefetch/prefetch.h"
#include "stats/stats.h"

#include <stdio.h>
#include <string.h>

void daemon_fetch_begin(struct sfs *fs, const struct cfile *cf, uint32_t idx)
{
	stats_fetch_begin(fs->stats, cf, idx);
}

void daemon_fetch_end(struct sfs *fs, const struct cfile *cf, uint32_t idx, int res,
		      bool peer)
{
	/* a chunk a peer sent is no backend read: the peer group counts it */
	if (peer && res >= 0)
		stats_fetch_end(fs->stats, cf, idx, STATS_FETCH_NONE);
	else
		stats_fetch_end(fs->stats, cf, idx, res);
}

/* The scheduler's hooks (struct pf_opts): the same counting. */
static void pf_fetch_begin(void *arg, const struct cfile *cf, uint32_t idx)
{
	daemon_fetch_begin(arg, cf, idx);
}

static void pf_fetch_end(void *arg, const struct cfile *cf, uint32_t idx, int res,
			 bool peer)
{
	daemon_fetch_end(arg, cf, idx, res, peer);
}

int daemon_start(struct sfs *fs, char *err, size_t errlen)
{
	const struct sfs_config *c = &fs->cfg;
	struct pf_opts o = {
		.inflight = c->prefetch_inflight,
		.user_inflight = c->prefetch_user_inflight,
		.max_rate = c->backend_max_rate,
		.weights = c->prefetch_weights,
		.readahead_max = c->readahead_max,
		/* the kernel's parallel readahead READs arrive out of order */
		.ra_slack = MAX(2ULL * MAX(c->read_ahead_kb, c->max_read_kb) * KiB, MiB),
		.hint_window = c->hint_window,
		.hint_window_bytes = c->hint_window_bytes,
		.stage_files = c->epoch_staging_files,
		.stage_idle_ms = (uint32_t)MIN(c->epoch_staging_idle_ms, UINT32_MAX),
		.io_uring = c->prefetch_io_uring,
		.buffer_bytes = c->prefetch_buffers,
		.fetch_begin = pf_fetch_begin,
		.fetch_end = pf_fetch_end,
		.account_arg = fs,
		.pack_arrived = fs->pp ? packpush_arrived : NULL,
		.pack_arg = fs->pp,
	};
	struct stats_opts so = { .idle_gap_ns = c->stall_idle_gap_ms * 1000000ULL };
	int ret;

	ret = stats_create(&so, &fs->stats);
	if (ret) {
		snprintf(err, errlen, "feed-rate counters: %s", strerror(-ret));
		return ret;
	}
	ret = pf_sched_create(&o, fs->cache, &fs->pf, err, errlen);
	if (ret) {
		stats_destroy(fs->stats);
		fs->stats = NULL;
	}
	return ret;
}

void daemon_stop(struct sfs *fs)
{
	/* the scheduler's last fills count into fs->stats */
	pf_sched_destroy(fs->pf);
	fs->pf = NULL;
	stats_destroy(fs->stats);
	fs->stats = NULL;
}
