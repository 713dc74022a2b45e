/* SPDX-License-Identifier: Apache-2.0 */
/*
 * read: the FUSE READ handler; see read.c.
 */
#ifndef STAGEFS_FUSE_READ_H
#define STAGEFS_FUSE_READ_H

#include "fs.h"

/* FUSE READ (fuse_lowlevel_ops.read): replies to @req exactly once. */
void read_op(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi);

#endif
