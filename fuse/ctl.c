/*
 * ctl: the read-only files under MOUNTPOINT/.stagefs/ (hidden from readdir,
 * reachable by name, like JuiceFS's .stats).
 *
 * .stagefs/stats is one JSON object, rendered when the file is opened, so a
 * reader sees one consistent snapshot.  Key names are part of the interface
 * (tests and `stagefs top` parse them); add keys, do not rename them.
 */
#include "fs.h"
#include "json.h"

#include "access.h"
#include "ctlsock.h"
#include "metrics.h"
#include "noopen.h"
#include "passthrough.h"
#include "uring.h"
#include "prefetch/prefetch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define LD(x) atomic_load(&fs->ctr.x)

/* The background fetches' counters (prefetch/prefetch.h), each line "key: N,". */
static void prefetch_stats(struct sfs *fs, FILE *f)
{
	struct pf_stats ps;

	pf_get_stats(fs->pf, &ps);
	fprintf(f,
		"  \"readahead_fetches\": %" PRIu64 ",\n"
		"  \"hint_fetches\": %" PRIu64 ",\n"
		"  \"warmup_fetches\": %" PRIu64 ",\n"
		"  \"demand_fetches\": %" PRIu64 ",\n"
		"  \"prefetch_errors\": %" PRIu64 ",\n"
		"  \"prefetch_cancelled\": %" PRIu64 ",\n"
		"  \"prefetch_queued\": %" PRIu64 ",\n"
		"  \"prefetch_inflight\": %" PRIu64 ",\n"
		"  \"demand_inflight\": %" PRIu64 ",\n"
		"  \"backend_throttle_ms\": %" PRIu64 ",\n"
		"  \"hint_sessions\": %" PRIu64 ",\n"
		"  \"warmup_jobs\": %" PRIu64 ",\n"
		"  \"uring_ops\": %" PRIu64 ",\n"
		"  \"uring_direct_ops\": %" PRIu64 ",\n"
		"  \"uring_fixed_ops\": %" PRIu64 ",\n"
		"  \"uring_submits\": %" PRIu64 ",\n"
		"  \"engine_fills\": %" PRIu64 ",\n"
		"  \"engine_inflight\": %" PRIu64 ",\n"
		"  \"engine_max_inflight\": %" PRIu64 ",\n"
		"  \"engine_buffer_bytes\": %" PRIu64 ",\n"
		"  \"engine_registered\": %" PRIu64 ",\n"
		"  \"buffer_hits\": %" PRIu64 ",\n"
		"  \"async_reads\": %" PRIu64 ",\n",
		ps.readahead_fetches, ps.hint_fetches, ps.warmup_fetches,
		ps.demand_fetches, ps.fetch_errors, ps.cancelled, ps.queued,
		ps.inflight, ps.demand_inflight, ps.throttle_ms, ps.hint_sessions,
		ps.warmup_jobs, ps.uring_ops, ps.uring_direct, ps.uring_fixed,
		ps.uring_submits, ps.engine_fills, ps.engine_inflight,
		ps.engine_max_inflight, ps.engine_buffer_bytes, ps.engine_registered,
		ps.buffer_hits, ps.async_reads);
}

int sfs_stats_json(struct sfs *fs, char **out)
{
	struct cache_stats cs;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	struct sfs_dataset *ds0 = atomic_load(&fs->nds) ? fs->ds[0] : NULL;

	cache_get_stats(fs->cache, &cs);
	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;
	fputs("{\n", f);
	prefetch_stats(fs, f);
	fprintf(f, "  \"version\": \"%s\",\n  \"source\": ", STAGEFS_VERSION);
	json_write_str(f, ds0 ? ds0->be->uri : "");
	fprintf(f,
		",\n"
		"  \"uptime_s\": %" PRIu64 ",\n"
		"  \"chunk_size\": %u,\n"
		"  \"read_requests\": %" PRIu64 ",\n"
		"  \"read_bytes\": %" PRIu64 ",\n"
		"  \"read_errors\": %" PRIu64 ",\n"
		"  \"opens\": %" PRIu64 ",\n"
		"  \"open_requests\": %" PRIu64 ",\n"
		"  \"passthrough_active\": %d,\n"
		"  \"no_open\": %d,\n"
		"  \"passthrough_opens\": %" PRIu64 ",\n"
		"  \"passthrough_bytes_estimate\": %" PRIu64 ",\n"
		"  \"passthrough_reused\": %" PRIu64 ",\n"
		"  \"passthrough_idle_ids\": %u,\n"
		"  \"lookup_readaheads\": %" PRIu64 ",\n"
		"  \"fuse_uring_active\": %d,\n"
		"  \"fuse_uring_requests\": %" PRIu64 ",\n"
		"  \"cache_hits\": %" PRIu64 ",\n"
		"  \"cache_misses\": %" PRIu64 ",\n"
		"  \"corrupt_chunks\": %" PRIu64 ",\n"
		"  \"bypass_reads\": %" PRIu64 ",\n"
		"  \"evicted_chunks\": %" PRIu64 ",\n"
		"  \"backend_reads\": %" PRIu64 ",\n"
		"  \"backend_bytes\": %" PRIu64 ",\n"
		"  \"backend_errors\": %" PRIu64 ",\n"
		"  \"stall_ms\": %" PRIu64 ",\n"
		"  \"cache_used_bytes\": %" PRIu64 ",\n"
		"  \"cache_limit_bytes\": %" PRIu64 ",\n"
		"  \"cache_chunks\": %" PRIu64 ",\n"
		"  \"cache_files\": %" PRIu64 ",\n"
		"  \"cache_loaded_chunks\": %" PRIu64 ",\n"
		"  \"cache_load_ms\": %" PRIu64 ",\n",
		(now_ms() - fs->start_ms) / 1000,
		ds0 ? ds0->be->chunk_size : 0,
		LD(read_requests), LD(read_bytes), LD(read_errors), LD(opens),
		LD(open_requests),
		passthrough_active(fs->pt), noopen_active(fs->no),
		LD(passthrough_opens), LD(passthrough_bytes), LD(passthrough_reused),
		passthrough_idle_ids(fs->pt), LD(lookup_readaheads),
		uring_active(fs->ur), uring_requests(fs->ur),
		cs.hits, cs.misses, cs.corrupt, cs.bypass, cs.evicted,
		LD(backend_reads), LD(backend_bytes), LD(backend_errors),
		LD(stall_ns) / 1000000,
		cs.used_bytes, cs.limit_bytes == UINT64_MAX ? 0 : cs.limit_bytes,
		cs.chunks, cs.files, cs.loaded_chunks, cs.load_ms);
	sfs_metrics_json(fs, f);	/* "node", "users", "jobs", ... */
	fputs("\n}\n", f);
	if (fclose(f)) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	return (int)len;
}

const struct sfs_vfile sfs_vfiles[] = {
	{ "stats", sfs_stats_json },
	{ "quota", access_quota_text },
	{ "metrics", sfs_metrics_text },	/* Prometheus text format */
	{ "socket", ctlsock_text },	/* the control socket's path */
};

const size_t sfs_nvfiles = ARRAY_SIZE(sfs_vfiles);
