/* SPDX-License-Identifier: Apache-2.0 */
/*
 * packpush: a pack's files stored in the kernel's page cache as the pack
 * arrives; see packpush.h.
 */
#include "packpush.h"

#include "fh.h"
#include "list.h"
#include "log.h"
#include "noopen.h"
#include "packentry.h"
#include "pushmap.h"
#include "read.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Packs waiting at most: each holds one of the engine's buffers. */
#define PACKPUSH_QUEUE	8

struct packpush {
	struct sfs *fs;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct list_node q;	/* struct pf_pack.node */
	unsigned n;
	bool closed;
	bool started;
	pthread_t thr;
};

/* The dataset served by backend @be, or NULL. */
static struct sfs_dataset *ds_of(struct sfs *fs, const struct backend *be)
{
	uint32_t n = atomic_load(&fs->nds);

	for (uint32_t i = 0; i < n; i++)
		if (fs->ds[i]->be == be)
			return fs->ds[i];
	return NULL;
}

/* Store each file of @p whose inode the kernel holds; returns how many. */
static uint32_t push_pack(struct sfs *fs, const struct pf_pack *p)
{
	struct sfs_dataset *ds = ds_of(fs, p->be);
	struct manifest_member mb;
	uint32_t n = 0;
	uint64_t ino;
	int ret;

	if (!ds || !p->be->m)
		return 0;
	for (uint32_t j = 0; (ret = manifest_pack_member(p->be->m, p->pack, j, &mb)) != -ENOENT; j++) {
		/* -EIO: a bad record (logged), not checked with the pack: not pushed */
		if (ret || !mb.size || mb.size > READ_PUSH_MAX || mb.off + mb.size > p->len)
			continue;
		ino = sfs_ino(fs, ds, mb.ino);
		if (pushmap_has(fs->pushed, ino))
			continue;
		/* a fresh vector each time: the copy advances it */
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT((size_t)mb.size);

		bv.buf[0].mem = (char *)p->data + mb.off;
		ret = fuse_lowlevel_notify_store(fs->se, ino, 0, &bv, 0);
		if (ret)	/* -ENOENT: the kernel holds no such inode (not looked up) */
			continue;
		/*
		 * Marked once stored: an OPEN that finds the mark charges the
		 * file at once and expects no READ.  (A FORGET between the
		 * store and the mark leaves a mark with no pages: that file's
		 * next reads come as READs, served and charged again.)
		 */
		pushmap_add(fs->pushed, ino);
		n++;
	}
	return n;
}

static void *packpush_thread(void *arg)
{
	struct packpush *pp = arg;
	struct sfs *fs = pp->fs;
	struct pf_pack *p;
	uint32_t n;

	pthread_setname_np(pthread_self(), "sfs-packpush");
	pthread_mutex_lock(&pp->lock);
	for (;;) {
		while (!pp->closed && list_empty(&pp->q))
			pthread_cond_wait(&pp->cond, &pp->lock);
		if (pp->closed)
			break;
		p = list_entry(list_pop(&pp->q), struct pf_pack, node);
		pp->n--;
		pthread_mutex_unlock(&pp->lock);
		n = push_pack(fs, p);
		stats_node_add(fs->stats, STATS_NODE_PACK_PUSHES, n);
		pf_pack_release(fs->pf, p);
		pthread_mutex_lock(&pp->lock);
	}
	pthread_mutex_unlock(&pp->lock);
	return NULL;
}

int packpush_create(struct sfs *fs, struct packpush **out)
{
	struct packpush *pp;
	int ret;

	*out = NULL;
	if (!fs->cfg.pack_push)
		return 0;
	pp = calloc(1, sizeof(*pp));
	if (!pp)
		return -ENOMEM;
	pp->fs = fs;
	pthread_mutex_init(&pp->lock, NULL);
	pthread_cond_init(&pp->cond, NULL);
	list_init(&pp->q);
	ret = pthread_create(&pp->thr, NULL, packpush_thread, pp);
	if (ret) {
		pthread_cond_destroy(&pp->cond);
		pthread_mutex_destroy(&pp->lock);
		free(pp);
		return -ret;
	}
	pp->started = true;
	*out = pp;
	return 0;
}

bool packpush_arrived(void *arg, struct pf_pack *p)
{
	struct packpush *pp = arg;
	struct sfs *fs;
	bool took = false;

	if (!pp)
		return false;
	fs = pp->fs;
	/* no-open mode counts reads at their READ: a pushed file has none */
	if (!fs->se || !fs->pushed || noopen_active(fs->no))
		return false;
	pthread_mutex_lock(&pp->lock);
	if (!pp->closed && pp->n < PACKPUSH_QUEUE) {
		list_add_tail(&pp->q, &p->node);
		pp->n++;
		took = true;
		pthread_cond_signal(&pp->cond);
	}
	pthread_mutex_unlock(&pp->lock);
	return took;
}

void packpush_close(struct packpush *pp)
{
	struct list_node left;
	struct pf_pack *p;

	if (!pp)
		return;
	list_init(&left);
	pthread_mutex_lock(&pp->lock);
	pp->closed = true;
	list_splice_tail(&left, &pp->q);
	pp->n = 0;
	pthread_cond_signal(&pp->cond);
	pthread_mutex_unlock(&pp->lock);
	if (pp->started)
		pthread_join(pp->thr, NULL);
	pp->started = false;
	while (!list_empty(&left)) {
		p = list_entry(list_pop(&left), struct pf_pack, node);
		pf_pack_release(pp->fs->pf, p);
	}
}

void packpush_destroy(struct packpush *pp)
{
	if (!pp)
		return;
	packpush_close(pp);
	pthread_cond_destroy(&pp->cond);
	pthread_mutex_destroy(&pp->lock);
	free(pp);
}

void packpush_release(struct sfs *fs, struct fh *fh, uint64_t ino)
{
	if (fh->passthrough || !fs->pushed || !fh->attr.size || fh->attr.size > READ_PUSH_MAX ||
	    atomic_load(&fh->so.delivered) || !packentry_maybe(fh->ds->be, &fh->attr) ||
	    !pushmap_has(fs->pushed, ino))
		return;
	read_push_charge_kept(fs, fh);
}
