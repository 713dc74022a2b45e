/*
 * ctl: the read-only files under MOUNTPOINT/.stagefs/ (hidden from readdir,
 * reachable by name, like JuiceFS's .stats).
 *
 * .stagefs/stats is one JSON object, rendered when the file is opened, so a
 * reader sees one consistent snapshot.  Key names are part of the interface
 * (tests and `stagefs top` parse them); add keys, do not rename them.
 */
#include "fs.h"

#include "metrics.h"
#include "passthrough.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define LD(x) atomic_load(&fs->ctr.x)

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
	fprintf(f,
		"{\n"
		"  \"version\": \"%s\",\n"
		"  \"source\": \"%s\",\n"
		"  \"uptime_s\": %" PRIu64 ",\n"
		"  \"chunk_size\": %u,\n"
		"  \"read_requests\": %" PRIu64 ",\n"
		"  \"read_bytes\": %" PRIu64 ",\n"
		"  \"read_errors\": %" PRIu64 ",\n"
		"  \"opens\": %" PRIu64 ",\n"
		"  \"passthrough_active\": %d,\n"
		"  \"passthrough_opens\": %" PRIu64 ",\n"
		"  \"passthrough_bytes_estimate\": %" PRIu64 ",\n"
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
		STAGEFS_VERSION, ds0 ? ds0->be->uri : "", (now_ms() - fs->start_ms) / 1000,
		ds0 ? ds0->be->chunk_size : 0,
		LD(read_requests), LD(read_bytes), LD(read_errors), LD(opens),
		passthrough_active(fs->pt), LD(passthrough_opens), LD(passthrough_bytes),
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
	{ "quota", sfs_quota_text },
	{ "metrics", sfs_metrics_text },	/* Prometheus text format */
};

const size_t sfs_nvfiles = ARRAY_SIZE(sfs_vfiles);
