/* SPDX-License-Identifier: Apache-2.0 */
/*
 * noopen_vfile: the .stagefs/ files in no-open mode (noopen.h, the
 * noopen_vfile_* calls): rendered at LOOKUP through vfiles_table[]
 * (fuse/vfiles.h) and kept per (file, user) until the next one.
 *
 * Renderings are kept in NO_VSLOTS slots, the least recently used one
 * reused when all are taken; a READ finds its rendering by the file and
 * the user its inode belongs to, so a slot reused for another user is
 * never read for the first (the first reads an empty file until its next
 * LOOKUP).  no->vlock guards the slots; a rendering runs outside it.
 *
 * A file of its own so that the arrows run one way: this file -> vfiles.c
 * (the renderers) -> noopen.c (noopen_active, for the report).
 */
#include "noopen_i.h"

#include "cred.h"
#include "util.h"
#include "vfiles.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A modification time later than every one given before.  vlock held. */
static void next_mtime(struct noopen *no, struct timespec *t)
{
	clock_gettime(CLOCK_REALTIME, t);
	if (t->tv_sec < no->vlast.tv_sec ||
	    (t->tv_sec == no->vlast.tv_sec && t->tv_nsec <= no->vlast.tv_nsec)) {
		*t = no->vlast;
		if (++t->tv_nsec == 1000000000L) {
			t->tv_sec++;
			t->tv_nsec = 0;
		}
	}
	no->vlast = *t;
}

/* The slot of (@idx, @uid), or NULL.  vlock held. */
static struct vrender *vslot_find(struct noopen *no, int idx, uint32_t uid)
{
	for (size_t i = 0; i < NO_VSLOTS; i++) {
		struct vrender *v = &no->vr[i];

		if (v->have && v->idx == idx && v->uid == uid)
			return v;
	}
	return NULL;
}

/* The slot for (@idx, @uid): its own, a free one or the least recently used.  vlock held. */
static struct vrender *vslot_take(struct noopen *no, int idx, uint32_t uid)
{
	struct vrender *v = vslot_find(no, idx, uid), *lru = &no->vr[0];

	if (v)
		return v;
	for (size_t i = 0; i < NO_VSLOTS; i++) {
		v = &no->vr[i];
		if (!v->have)
			return v;
		if (v->used < lru->used)
			lru = v;
	}
	return lru;
}

int noopen_vfile_render(struct noopen *no, int idx, const struct cred *cr,
			uint64_t *size, struct timespec *mtime)
{
	struct vrender *v;
	char *data = NULL, *old;
	int n = vfiles_table[idx].render(no->fs, cr, &data);

	if (n < 0)
		return n;
	pthread_mutex_lock(&no->vlock);
	v = vslot_take(no, idx, cr->uid);
	old = v->data;
	v->data = data;
	v->len = (size_t)n;
	v->have = true;
	v->idx = idx;
	v->uid = cr->uid;
	v->used = ++no->vclock;
	next_mtime(no, &v->mtime);
	*size = v->len;
	*mtime = v->mtime;
	pthread_mutex_unlock(&no->vlock);
	free(old);
	return 0;
}

int noopen_vfile_attr(struct noopen *no, int idx, uint32_t uid, uint64_t *size,
		      struct timespec *mtime)
{
	struct vrender *v;

	pthread_mutex_lock(&no->vlock);
	v = vslot_find(no, idx, uid);
	if (v) {
		*size = v->len;
		*mtime = v->mtime;
	} else {
		/* its slot was reused: empty until the next LOOKUP renders it */
		*size = 0;
		next_mtime(no, mtime);
	}
	pthread_mutex_unlock(&no->vlock);
	return 0;
}

ssize_t noopen_vfile_read(struct noopen *no, int idx, uint32_t uid, uint64_t off,
			  void *buf, size_t size)
{
	struct vrender *v;
	size_t n = 0;

	pthread_mutex_lock(&no->vlock);
	v = vslot_find(no, idx, uid);
	if (v && off < v->len) {
		n = MIN(size, v->len - (size_t)off);
		memcpy(buf, v->data + off, n);
		v->used = ++no->vclock;
	}
	pthread_mutex_unlock(&no->vlock);
	return (ssize_t)n;
}
