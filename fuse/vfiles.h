/*
 * vfiles: the read-only files under MOUNTPOINT/.stagefs/ (hidden from
 * readdir, reachable by name, like JuiceFS's .stats), listed in
 * sfs_vfiles[] (fuse/fs.h):
 *
 *   stats     everything the node reports, one JSON object
 *   quota     per-user cache usage (sfs_quota_text, fuse/access.c)
 *   metrics   the same report as Prometheus text (also what the
 *             metrics_port and metrics_file exporters serve, fuse/metrics.h)
 *   socket    the control socket's path (sfs_ctlsock_text, fuse/ctlsock.c)
 *
 * Each file is rendered whole when it is opened (or looked up in no-open
 * mode), so a reader sees one consistent snapshot.  The key names of stats
 * and the metric names are an interface (tests, `stagefs top`, dashboards):
 * add, do not rename.
 */
#ifndef STAGEFS_FUSE_VFILES_H
#define STAGEFS_FUSE_VFILES_H

#include "fs.h"

/*
 * .stagefs/stats and .stagefs/metrics: take the node's report now and
 * render it as JSON or as Prometheus text into a malloc'ed buffer (the
 * caller frees *@out).  Return its length or -errno.
 */
int vfiles_stats_json(struct sfs *fs, char **out);
int vfiles_metrics_text(struct sfs *fs, char **out);

#endif
