/*
 * stats_render: the feed-rate snapshot (src/stats.h) as text: the JSON
 * members of .stagefs/stats and the Prometheus text exposition (format
 * 0.0.4) of .stagefs/metrics, the metrics_port endpoint and the
 * metrics_file (docs/feedrate.md).  Counting lives in src/stats.c; this
 * module only reads a snapshot.
 */
#ifndef STAGEFS_STATS_RENDER_H
#define STAGEFS_STATS_RENDER_H

#include <stdio.h>

#include "cache.h"
#include "stats.h"

/*
 * Write the snapshot as JSON object members (no braces): "node", "users",
 * "jobs", "processes", "gpus", each line starting with @indent.  The
 * caller adds the surrounding object.
 */
void stats_render_json(const struct stats_snap *snap, FILE *f, const char *indent);

/*
 * Write the Prometheus text exposition (format 0.0.4) of @snap and the
 * cache figures in @cs (may be NULL) to @f: names, labels and escaping
 * per the Prometheus conventions (docs/feedrate.md lists the metrics).
 */
void stats_render_prom(const struct stats_snap *snap, const struct cache_stats *cs,
		       FILE *f);

#endif
