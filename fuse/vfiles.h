/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vfiles: the read-only files under MOUNTPOINT/.stagefs/ (hidden from
 * readdir, reachable by name, like JuiceFS's .stats), listed in
 * vfiles_table[]:
 *
 *   stats     everything the node reports, one JSON object
 *   quota     per-user cache usage (access_quota_text, fuse/access.c)
 *   metrics   the same report as Prometheus text (also what the
 *             metrics_port and metrics_file exporters serve, fuse/metrics.h)
 *   socket    the control socket's path (ctlsock_text, fuse/ctl/ctlsock.c)
 *
 * Each file is rendered whole when it is opened (or looked up in no-open
 * mode), so a reader sees one consistent snapshot.  The key names of stats
 * and the metric names are an interface (tests, `stagefs top`, dashboards):
 * add, do not rename.
 *
 * Who sees what.  A file is rendered for its reader's credentials
 * (src/cred.h): root sees everything; any other user sees the node totals
 * and their own rows only (their user, jobs and processes in stats and
 * metrics, their line in quota), and the "source" of a dataset only if
 * they may read it.  The exporters outside the mount (fuse/metrics.h)
 * render the operator's view, everything.  So that the kernel never shows
 * one user's rendering to another, each user reaches these files through
 * inodes of their own (SFS_CTL_FILE_INO(i, uid), fuse/fs.h): the page
 * cache of an inode only ever holds its user's renderings
 * (docs/feedrate.md).
 */
#ifndef STAGEFS_FUSE_VFILES_H
#define STAGEFS_FUSE_VFILES_H

#include "fs.h"

struct cred;

/*
 * A read-only file in MOUNTPOINT/.stagefs/.  ->render writes its whole
 * content, as of now and as caller @cr may see it (NULL: the operator's
 * view, everything), into a malloc'ed buffer (the caller frees *@out) and
 * returns its length or -errno.  It runs at open, so one open sees one
 * consistent snapshot.  Entry 0 is "stats"; entry i's inode for user uid
 * is SFS_CTL_FILE_INO(i, uid) (fuse/fs.h).
 */
struct vfiles_file {
	const char *name;
	int (*render)(struct sfs *fs, const struct cred *cr, char **out);
};

extern const struct vfiles_file vfiles_table[];
extern const size_t vfiles_count;

/* The index in vfiles_table[] of virtual inode @ino, or -1. */
static inline int vfiles_index(uint64_t ino)
{
	uint64_t rel = ino - SFS_CTL_FILE_INO(0, 0);

	if (ino < SFS_CTL_FILE_INO(0, 0) || (rel >> (32 + SFS_CTL_FILE_SHIFT)))
		return -1;
	rel &= SFS_CTL_FILE_MAX - 1;
	return rel < vfiles_count ? (int)rel : -1;
}

/* The user whose view virtual inode @ino shows (vfiles_index(@ino) >= 0). */
static inline uint32_t vfiles_uid(uint64_t ino)
{
	return (uint32_t)((ino - SFS_CTL_FILE_INO(0, 0)) >> SFS_CTL_FILE_SHIFT);
}

/*
 * .stagefs/metrics: take the node's report now and render it as
 * Prometheus text, as @cr may see it (NULL:
 * everything), into a malloc'ed buffer (the caller frees *@out).  Return
 * its length or -errno.
 */
int vfiles_metrics_text(struct sfs *fs, const struct cred *cr, char **out);

#endif
