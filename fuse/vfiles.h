/*
 * vfiles: the read-only files under MOUNTPOINT/.stagefs/ (hidden from
 * readdir, reachable by name, like JuiceFS's .stats), listed in
 * vfiles_table[]:
 *
 *   stats     everything the node reports, one JSON object
 *   quota     per-user cache usage (access_quota_text, fuse/access.c)
 *   metrics   the same report as Prometheus text (also what the
 *             metrics_port and metrics_file exporters serve, fuse/metrics.h)
 *   socket    the control socket's path (ctlsock_text, fuse/ctlsock.c)
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
 * A read-only file in MOUNTPOINT/.stagefs/.  ->render writes its whole
 * content, as of now, into a malloc'ed buffer (the caller frees *@out) and
 * returns its length or -errno.  It runs at open, so one open sees one
 * consistent snapshot.  Entry 0 is "stats"; entry i's inode is
 * SFS_CTL_FILE_INO(i) (fuse/fs.h).
 */
struct vfiles_file {
	const char *name;
	int (*render)(struct sfs *fs, char **out);
};

extern const struct vfiles_file vfiles_table[];
extern const size_t vfiles_count;

/* The index in vfiles_table[] of virtual inode @ino, or -1. */
static inline int vfiles_index(uint64_t ino)
{
	if (ino < SFS_CTL_FILE_INO(0) || ino >= SFS_CTL_FILE_INO(vfiles_count))
		return -1;
	return (int)(ino - SFS_CTL_FILE_INO(0));
}

/*
 * .stagefs/stats and .stagefs/metrics: take the node's report now and
 * render it as JSON or as Prometheus text into a malloc'ed buffer (the
 * caller frees *@out).  Return its length or -errno.
 */
int vfiles_stats_json(struct sfs *fs, char **out);
int vfiles_metrics_text(struct sfs *fs, char **out);

#endif
