/* SPDX-License-Identifier: Apache-2.0 */
/*
 * noopen_i.h: what noopen.c (the handshake, the per-inode handles) and
 * noopen_vfile.c (the .stagefs/ renderings of the mode) share: struct
 * noopen.  noopen.c makes and frees all of it, the renderings' lock and
 * slots included; noopen_vfile.c only uses them.
 */
#ifndef STAGEFS_FUSE_NOOPEN_I_H
#define STAGEFS_FUSE_NOOPEN_I_H

#include "noopen.h"

#include "htab.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#define NO_VSLOTS	1024	/* .stagefs/ renderings kept: (file, user) pairs */

/* The latest rendering of a .stagefs/ file for one user (a slot). */
struct vrender {
	char *data;
	size_t len;
	bool have;			/* the slot is taken */
	int idx;			/* of vfiles_table[] */
	uint32_t uid;			/* whose view it is */
	uint64_t used;			/* no->vclock at the last render or read */
	struct timespec mtime;
};

struct noopen {
	struct sfs *fs;
	enum cfg_auto mode;

	/* handshake */
	bool inited;			/* the kernel's INIT was answered */
	bool capable;			/* ... and offered FUSE_NO_OPEN_SUPPORT */
	int probe_efd;			/* the probe thread's open returned */
	bool probe_done;
	pthread_t probe;
	bool probe_started;
	char probe_path[PATH_MAX];
	_Atomic int probe_err;		/* errno of the probe's open; 0 = opened */

	_Atomic bool wanted;
	_Atomic bool probing;		/* the probe's OPEN gets ENOSYS */
	_Atomic bool active;

	pthread_mutex_t lock;
	struct htab table;		/* protected by lock: handles, by inode */

	pthread_mutex_t vlock;
	struct vrender vr[NO_VSLOTS];	/* protected by vlock */
	uint64_t vclock;		/* protected by vlock: ticks at each use */
	struct timespec vlast;		/* protected by vlock: last mtime given */
};

#endif
