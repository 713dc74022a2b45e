/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dirscan_i.h: what the three files of a directory scan share: dirscan.c
 * (the scan), dirscan_live.c (the live index answered while it runs) and
 * dirscan_stamps.c (the check of the saved stamps).  Not for use outside
 * src/backend/.  The locking rules are at the top of dirscan.c.
 */
#ifndef STAGEFS_DIRSCAN_I_H
#define STAGEFS_DIRSCAN_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "dirscan.h"
#include "manifest/inomap.h"
#include "manifest/manifest.h"

/* the stamps file: a header, then one record per directory */
#define STAMP_MAGIC	0x31534453u	/* "SDS1" */
#define STAMP_HDR	16	/* magic, 0, count */
#define STAMP_FIX	34	/* ino, mtime s/ns, ctime s/ns, path length */

struct growbuf {
	char *p;
	size_t len, cap;
};

enum { L_QUEUED, L_READING, L_DONE };

/* One directory of the tree.  See the top of the file for who writes what. */
struct ldir {
	struct ldir *parent;	/* NULL for the root */
	char *path;		/* relative to the root; "" for the root */
	uint32_t name_at;	/* its last component: path + name_at */
	uint32_t depth;
	uint8_t state;		/* L_*; protected by qlock */
	bool multi;		/* holds a file with several names */
	uint64_t self;		/* its entry index, once in sc->canon */
	uint64_t start;		/* its first child's entry index, once in the prefix */
	uint32_t n;		/* its children in the manifest */
	char *names;		/* their names, NUL-terminated, back to back */
	uint32_t *off;		/* child i (name order) is names + off[i] */
	uint8_t *type;		/* child i's S_IFMT >> 12 */
	struct ldir **subs;	/* its subdirectories, in name order */
	uint32_t *subat;	/* their positions among the children */
	uint32_t nsubs;
};

struct dirscan {
	int rootfd;		/* ours (dup); -1 with a source */
	struct dirscan_source src;	/* dirscan_start_source(); src.opendir NULL otherwise */
	char *root;
	unsigned delay_us;
	unsigned nthreads;
	pthread_t *tids;

	pthread_mutex_t qlock;
	pthread_cond_t qcond;	/* work to do, or the scan is over */
	pthread_cond_t lcond;	/* the prefix grew, or the scan is over */
	struct ldir **heap;	/* directories to read; protected by qlock */
	size_t n, cap;		/* protected by qlock */
	struct ldir **all;	/* every ldir, to free them; protected by qlock */
	size_t nall, capall;	/* protected by qlock */
	struct ldir **canon;	/* breadth-first order, as known; protected by qlock */
	size_t ncanon, capcanon, prefix;	/* protected by qlock */
	uint64_t next_start;	/* first child index of canon[prefix]; protected by qlock */
	unsigned busy;		/* workers reading a directory; protected by qlock */
	bool walked;		/* every directory read; protected by qlock */
	int err;		/* the first error; protected by qlock */
	char msg[600];		/* its message; protected by qlock */

	pthread_mutex_t block;
	struct manifest_builder *b;	/* protected by block */
	struct inomap links;		/* protected by block */
	struct growbuf stamps;		/* protected by block */
	uint64_t dirs, entries, bytes, skipped;	/* protected by block */
};

/* The attributes a scan records for @rel, whose lstat is @st. */
void dirscan_attr_of(const char *rel, const struct stat *st, struct sfs_attr *a);
/* Open @rel under the root, refusing symlinks anywhere in it.  An fd or -errno. */
int dirscan_open_beneath(struct dirscan *sc, const char *rel, int flags);

#endif
