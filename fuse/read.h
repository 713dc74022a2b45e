/* SPDX-License-Identifier: Apache-2.0 */
/*
 * read: the FUSE READ handler; see read.c.
 */
#ifndef STAGEFS_FUSE_READ_H
#define STAGEFS_FUSE_READ_H

#include "fs.h"

struct fh;

/* FUSE READ (fuse_lowlevel_ops.read): replies to @req exactly once. */
void read_op(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi);

/*
 * At the OPEN of @fh (FUSE inode @ino), served from its pack's entry: put
 * the whole file in the kernel's page cache (FUSE_NOTIFY_STORE), counted
 * as a READ of it by the opener, so that its reads need no READ request.
 * Only for files of at most @max bytes; nothing when the entry does not
 * hold the pack any more (the READs then come).
 */
void read_push(fuse_req_t req, struct sfs *fs, struct fh *fh, fuse_ino_t ino, size_t max);
/* read_push()'s @max at OPEN: every file a pack holds (publish's --pack-max is at most this) */
#define READ_PUSH_MAX	(1u << 20)
/*
 * Charge the open of @fh as a read of the whole file from pages a push
 * left in the kernel's page cache (estimated; read_push_kept): at its
 * OPEN (read_push()) or its RELEASE (fuse/packpush.c).
 */
void read_push_charge_kept(struct sfs *fs, struct fh *fh);

#endif
