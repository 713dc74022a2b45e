/*
 * metrics: the feed-rate counters (src/stats.h) of a mounted stagefs and the
 * ways to read them (docs/feedrate.md):
 *
 *   .stagefs/stats      JSON: "node", "users", "jobs", "processes", "gpus"
 *                       after the older keys (sfs_metrics_json)
 *   .stagefs/metrics    the Prometheus text format (sfs_metrics_text)
 *   metrics_port = P    the same at http://127.0.0.1:P/metrics, served by
 *                       one small thread (localhost only: no auth here)
 *   metrics_file = F    the same rewritten every metrics_interval, through
 *                       F.tmp and rename(2) so a reader (node_exporter's
 *                       textfile collector) never sees half a file; removed
 *                       at unmount so that no stale figures are exported
 *
 * Lifetime: sfs_metrics_start() creates fs->stats (before any request can
 * arrive) and starts the exporter thread where one is configured;
 * sfs_metrics_stop() stops it and frees fs->stats, after the session loop
 * ended and before the cache is destroyed.
 */
#ifndef STAGEFS_FUSE_METRICS_H
#define STAGEFS_FUSE_METRICS_H

#include "fs.h"

#include <stdio.h>

/*
 * Create fs->stats and start the exporters that fs->cfg asks for.  Returns
 * 0, or -errno with a message in @err (port in use, file not writable).
 */
int sfs_metrics_start(struct sfs *fs, char *err, size_t errlen);
void sfs_metrics_stop(struct sfs *fs);

/* Write the feed-rate members of .stagefs/stats (no braces, no final comma). */
void sfs_metrics_json(struct sfs *fs, FILE *f);

/*
 * Render the Prometheus text into a malloc'ed buffer (the caller frees
 * *@out).  Returns its length or -errno.  The .stagefs/metrics renderer.
 */
int sfs_metrics_text(struct sfs *fs, char **out);

#endif
