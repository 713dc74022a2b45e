/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics: the exporters of a mounted stagefs's report (docs/feedrate.md):
 * the Prometheus text of .stagefs/metrics (vfiles_metrics_text(),
 * fuse/vfiles.h) served outside the mount:
 *
 *   metrics_port = P    at http://127.0.0.1:P/metrics, served by one
 *                       thread polling up to 32 connections, each closed
 *                       2 s after its accept whatever it sent (localhost
 *                       only; everything to root and metrics_group, to
 *                       any other local user their own rows and the node
 *                       totals, as in .stagefs/metrics)
 *   metrics_file = F    rewritten every metrics_interval by a thread of its
 *                       own (no client of the port delays it), through
 *                       F.tmp and rename(2) so a reader (node_exporter's
 *                       textfile collector) never sees half a file; mode
 *                       0640, group metrics_group (everything); removed at unmount so
 *                       that no stale figures are exported
 *
 * Lifetime: metrics_start() starts the exporter threads that are
 * configured, once the mount answers; metrics_stop() stops them after the
 * session loop ended and before the scheduler goes (they read its
 * counters).  fs->stats is not theirs: fuse/daemon.c makes it before the
 * scheduler and frees it after everything that counts has stopped.
 */
#ifndef STAGEFS_FUSE_METRICS_H
#define STAGEFS_FUSE_METRICS_H

#include "fs.h"

/*
 * Start the exporters that fs->cfg asks for.  Returns 0, or -errno with a
 * message in @err (port in use, file not writable, unknown group).
 */
int metrics_start(struct sfs *fs, char *err, size_t errlen);
void metrics_stop(struct sfs *fs);

#endif
