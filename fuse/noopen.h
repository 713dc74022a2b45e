/* SPDX-License-Identifier: Apache-2.0 */
/*
 * noopen: FUSE no-open mode: files are read with no OPEN and no RELEASE.
 *
 * When a filesystem answers OPEN with ENOSYS, the kernel stops sending OPEN
 * and RELEASE for every regular file of the connection from then on, and
 * keeps their page cache across opens (keep_cache is implied).  A small
 * file then costs one READ round trip where it cost OPEN, READ and RELEASE,
 * and a hot re-read costs none.  The price, and how this module pays it:
 *
 *  - No per-open state.  A READ carries the reader's pid and uid but no
 *    file handle (fi->fh is 0), so READ finds a per-inode handle in a table
 *    (noopen_get()): made at the inode's first READ, dropped at its FORGET.
 *    Feed-rate accounting charges each READ to its reader as before; a READ
 *    at offset 0 counts a file read and advances the order hints (it is
 *    where a reader starts a file); "opens" stay 0.  Readahead state is
 *    per inode instead of per open.
 *  - No passthrough (the backing file is set in the OPEN reply).  So the
 *    mode is for mounts where passthrough is off or unavailable.
 *  - No access check at open: a page cached for one user would be served
 *    to another without asking.  So the mode is refused on multi-dataset
 *    mounts, the only ones with access rules.
 *  - .stagefs/ files are rendered at open and served with direct_io.  In
 *    this mode they are rendered at LOOKUP instead: their dentries get a
 *    zero timeout, so every path walk to one (every open) looks it up
 *    again, and the reply carries the new rendering's size and a new mtime,
 *    which makes the kernel drop the pages of the previous one
 *    (FUSE_AUTO_INVAL_DATA).  READs are served from the latest rendering
 *    for the inode's user: each user looks these files up as inodes of
 *    their own (fuse/vfiles.h), so the page cache of one, which the kernel
 *    serves without asking, only ever holds that user's renderings.
 *
 * The switch happens at start-up, before the mount is reported ready:
 * noopen_handshake() opens .stagefs/.no_open on the mount from a helper
 * thread while the main thread answers the requests that causes (the FUSE
 * workers do not run yet), and the OPEN of that file gets ENOSYS.  So no
 * OPEN of a dataset file ever reaches the daemon in this mode.
 *
 * Setting: no_open=auto|on|off (auto: on for single-dataset mounts where
 * passthrough is not active).  docs/noopen.md has the figures.
 *
 * Lifetime: noopen_create() before the session is mounted; noopen_init()
 * from the INIT handler; noopen_handshake() after passthrough_handshake(),
 * before the session loop; noopen_destroy() after the loop ended and before
 * the prefetcher and the cache are stopped (handles hold references on both).
 */
#ifndef STAGEFS_FUSE_NOOPEN_H
#define STAGEFS_FUSE_NOOPEN_H

#include "fs.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct noopen;
struct noopen_ent;
struct fh;
struct cred;

/* Returns 0 or -ENOMEM; release with noopen_destroy(). */
int noopen_create(struct sfs *fs, struct noopen **out);
void noopen_destroy(struct noopen *no);

/* From the INIT handler: note whether the kernel supports no-open. */
void noopen_init(struct noopen *no, struct fuse_conn_info *conn);

/*
 * Decide, and switch the kernel to no-open mode where decided (see the
 * top).  Answers the kernel's INIT first if nobody has.  no_open=on returns
 * -EOPNOTSUPP with the reason in @err when the mode cannot be had (the
 * caller fails the mount); auto logs the reason once and returns 0.
 */
/*
 * A daemon taking the mount over (fuse/takeover.h): the kernel switched,
 * or did not, for the daemon before; take its word (@active) instead of
 * probing again.
 */
void noopen_resume(struct noopen *no, bool active);
int noopen_handshake(struct noopen *no, struct fuse_session *se, char *err,
		     size_t errlen);

/* True once the kernel was switched to no-open mode. */
bool noopen_active(const struct noopen *no);
/*
 * True from the start of a handshake that may switch: .stagefs/ files are
 * then rendered at LOOKUP and their dentries not cached.
 */
bool noopen_wanted(const struct noopen *no);

/*
 * The OPEN of .stagefs/.no_open: true if it is the handshake's probe and
 * must get ENOSYS (the mode is active from then on); false for any other
 * open of it, which is refused.
 */
bool noopen_probe_open(struct noopen *no);

/*
 * The handle of regular file @ino for a READ without an open: *@fh is
 * valid until noopen_put(@no, *@ent).  Returns 0 or -errno.
 */
int noopen_get(struct noopen *no, uint64_t ino, struct noopen_ent **ent,
	       struct fh **fh);
void noopen_put(struct noopen *no, struct noopen_ent *ent);
/* The kernel forgot @ino: drop its handle (once no READ uses it). */
void noopen_forget(struct noopen *no, uint64_t ino);

/*
 * .stagefs/ file @idx (of vfiles_table[], fuse/vfiles.h) as one user sees
 * it, through their own inode SFS_CTL_FILE_INO(@idx, uid):
 * noopen_vfile_render() renders it now for caller @cr (LOOKUP) and keeps
 * it as @cr->uid's; noopen_vfile_attr() gives @uid's current rendering
 * (size 0 if none is kept).  Both set its size and a modification time
 * that differs from every earlier rendering's.  Return 0 or -errno.
 */
int noopen_vfile_render(struct noopen *no, int idx, const struct cred *cr,
			uint64_t *size, struct timespec *mtime);
int noopen_vfile_attr(struct noopen *no, int idx, uint32_t uid, uint64_t *size,
		      struct timespec *mtime);
/*
 * Copy up to @size bytes at @off of @uid's current rendering of @idx into
 * @buf; 0 bytes if none is kept.  Never another user's rendering.
 */
ssize_t noopen_vfile_read(struct noopen *no, int idx, uint32_t uid, uint64_t off,
			  void *buf, size_t size);

#endif
