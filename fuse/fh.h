/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fh: file handles of fuse/, shared by the op handlers (ops.c, read.c) and
 * no-open mode (noopen.c).
 *
 * struct fh is an open regular file: its attributes, cache entry, feed-rate
 * accounting and readahead state.  An OPEN creates one (fh_create) and its
 * RELEASE destroys it; in no-open mode (fuse/noopen.h) the kernel sends
 * neither, and noopen.c keeps one per inode (fh_create_noopen), charged to
 * no opener.  The fields are open: the READ path reads them on every
 * request.  struct vfh is an open .stagefs/ file, rendered at OPEN.
 */
#ifndef STAGEFS_FUSE_FH_H
#define STAGEFS_FUSE_FH_H

#include "fs.h"

#include "htab.h"
#include "stats/stats.h"
#include "prefetch/prefetch.h"

/* An open regular file. */
struct fh {
	struct sfs *fs;
	uint64_t id;		/* the handle the kernel has (fuse/handles.h); 0 in no-open mode */
	struct sfs_dataset *ds;
	struct sfs_attr attr;	/* attr.ino is the backend's inode */
	struct cfile *cf;
	/*
	 * A small file whose own cache file is not whole but whose pack is
	 * cached (docs/cache.md, "Pack entries"): READs are served from the
	 * pack's entry, at @poff; NULL otherwise.
	 */
	struct cfile *pcf;
	uint32_t poff;
	_Atomic bool pcf_gone;	/* ... not since a READ found the pack gone */
	bool passthrough;	/* the kernel reads the cache file: no READs */
	/*
	 * The last READ of this handle that failed with EIO (fuse/read.c):
	 * its range and when that stops being answered at once.  The kernel
	 * follows a failed readahead with a READ of the same page; without
	 * this a dead backend would cost a reader twice its timeout.
	 */
	_Atomic uint64_t fail_off, fail_end, fail_until_ms;
	/*
	 * Who the cache charges for what this open's READs bring in: the
	 * opener's tenant or uid (fuse/access.h, access_owner); 0: each
	 * READ's uid (no-open mode, root).
	 */
	uint32_t owner;
	struct stats_open so;	/* feed-rate accounting of this open */
	struct pf_ra *ra;	/* readahead state; NULL where none */
	/* passthrough opens counted by fuse/ptacct.c: protected by its lock */
	struct htab_node pa_node;	/* in its table of open handles */
	uint64_t pa_bytes;		/* bytes its hook saw read through this open */
	uint64_t pa_entries;		/* map entries of it drained */
	bool pa_mmapped;		/* the hook saw it mmap()ed */
};

/* An open virtual file: its content is rendered at open. */
struct vfh {
	char *data;
	size_t len;
};

/*
 * A handle on regular file @bino of @ds: its attributes and cache entry.
 * The caller sets the rest.  Returns 0 or -errno (-EISDIR for a non-file);
 * release with fh_destroy().
 */
int fh_create(struct sfs *fs, struct sfs_dataset *ds, uint64_t bino, struct fh **out);
/*
 * The handle READ uses for regular file @ino when the kernel sent no OPEN
 * (no-open mode): attributes, cache entry and readahead state, charged to
 * no opener.  Returns 0 or -errno (-ENOENT, -EISDIR for a non-file);
 * release with fh_destroy().
 */
int fh_create_noopen(struct sfs *fs, uint64_t ino, struct fh **out);
/* Release everything @fh holds, and @fh. */
void fh_destroy(struct sfs *fs, struct fh *fh);

/*
 * The open file behind handle @id of regular file @ino, READ by @req's
 * caller: one this daemon issued, or one an earlier daemon of the mount
 * gave the kernel (fuse/handles.h), made again here (its accounting and
 * readahead start over, charged to this caller) and adopted under @id.
 * NULL with *@err (-EBADF: no such handle).
 */
struct fh *fh_of(struct sfs *fs, fuse_req_t req, uint64_t ino, uint64_t id, int *err);

/*
 * .stagefs/ file @ino rendered for @req's caller into a new *@out.  0 or
 * -errno (-EACCES: another user's inode).  Free with vfh_destroy().
 */
int vfh_create(struct sfs *fs, fuse_req_t req, uint64_t ino, struct vfh **out);
void vfh_destroy(struct vfh *v);
/* The rendering behind handle @id of @ino, as fh_of() does for files. */
struct vfh *vfh_of(struct sfs *fs, fuse_req_t req, uint64_t ino, uint64_t id, int *err);

/*
 * handles_inherit()'s callback at a takeover (fuse/takeover.h): file
 * handle record @r of the daemon before (a struct handle_record) tells
 * passthrough how the kernel reads that open.  @arg: the struct sfs.
 */
struct handle_record;
void fh_inherit_record(void *arg, const struct handle_record *r);

#endif
