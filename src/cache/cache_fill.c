/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_fill: a chunk's fill, in steps (cache.h: cache_fill_claim() and
 * below), for an I/O engine that does the transfers itself and for the
 * synchronous path (cache_read.c) alike.
 *
 * A claim moves a chunk to FILLING (absent) or CHECKING (present, not yet
 * verified); the claimer then owns it until commit/written, check_done or
 * abort moves it back to PRESENT or ABSENT and wakes the threads waiting on
 * c->cond and the async cache_waiters of that chunk.  The ADD record is
 * appended only in cache_fill_written(), after the bytes are written.
 *
 * Locking: c->lock around each step; the transfers run outside it.  A
 * waiter's fn runs under c->lock (cache_i.h).
 */
#include "cache_i.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

uint64_t cache_chunk_hash(const void *buf, size_t len)
{
	struct sfs_id id;

	sfs_id_of(buf, len, &id);
	return id.lo;
}

static uint64_t hash_of_kind(int kind, const void *buf, size_t len)
{
	return kind == HK_XXH3_64 ? sfs_hash64(buf, len) : cache_chunk_hash(buf, len);
}

/*
 * Chunk @idx of @cf left FILLING or CHECKING: wake the threads waiting on
 * c->cond and hand every async waiter of that chunk back.  c->lock held.
 */
static void wake_locked(struct cache *c, const struct cfile *cf, uint32_t idx)
{
	pthread_cond_broadcast(&c->cond);
	list_for_each_safe(pos, tmp, &c->waiters) {
		struct cache_waiter *w = list_entry(pos, struct cache_waiter, node);

		if (w->cf != cf || w->idx != idx)
			continue;
		list_del(&w->node);
		w->cf = NULL;
		w->fn(w);	/* may be reused by its owner from here on */
	}
}

bool cache_waiter_cancel(struct cache *c, struct cache_waiter *w)
{
	bool found = false;

	pthread_mutex_lock(&c->lock);
	if (list_linked(&w->node)) {
		list_del(&w->node);
		w->cf = NULL;
		found = true;
	}
	pthread_mutex_unlock(&c->lock);
	return found;
}

/* Decide what chunk @idx of @cf needs and claim it (cache.h).  c->lock held. */
int cache_claim_locked(struct cache *c, struct cfile *cf, uint32_t idx,
		       uint32_t uid, bool nothrash, struct cache_fill *f)
{
	struct cchunk *ch = &cf->chunks[idx];

	switch (ch->state) {
	case CH_FILLING:
	case CH_CHECKING:
		return CACHE_BUSY;
	case CH_PRESENT:
		cache_lru_touch(c, ch);
		if (ch->verified)
			return CACHE_HIT;
		/* present but not checked since start (or distrusted) */
		ch->state = CH_CHECKING;
		f->kind = CACHE_CHECK;
		break;
	default:
		ch->state = CH_FILLING;
		ch->owner = uid;
		ch->own = cache_owner_get(c, uid);
		f->kind = CACHE_FETCH;
		break;
	}
	f->cf = cf;
	f->idx = idx;
	f->off = (off_t)idx * cf->chunk_size;
	f->len = cache_chunk_len(cf, idx);
	f->sync = c->opts.sync;
	f->nothrash = nothrash;
	f->own_fd = false;
	f->reserved = false;
	f->write_tries = 0;
	f->hash = 0;
	f->need = 0;
	return f->kind;
}

/* The claim is over: give back the descriptor use it took. */
static void claim_end(struct cache *c, struct cache_fill *f)
{
	if (f->own_fd)
		cache_fd_release(c, f->cf);
	f->own_fd = false;
}

int cache_fill_claim(struct cache *c, struct cfile *cf, uint32_t idx,
		     uint32_t uid, bool nothrash, struct cache_fill *f,
		     struct cache_waiter *w)
{
	int fd, ret;

	if (idx >= cf->nchunks)
		return -EINVAL;
	ret = cache_fd_acquire(c, cf, &fd);
	if (ret)
		return ret;
	pthread_mutex_lock(&c->lock);
	ret = cache_claim_locked(c, cf, idx, uid, nothrash, f);
	if (ret == CACHE_BUSY && w) {
		w->cf = cf;
		w->idx = idx;
		list_add(&c->waiters, &w->node);
	}
	pthread_mutex_unlock(&c->lock);
	if (ret == CACHE_FETCH || ret == CACHE_CHECK) {
		f->fd = fd;
		f->own_fd = true;
		return ret;
	}
	cache_fd_release(c, cf);
	return ret;
}

int cache_fill_claim_lazy(struct cache *c, struct cfile *cf, uint32_t idx,
			  uint32_t uid, bool nothrash, struct cache_fill *f)
{
	int ret;

	if (cf->nchunks != 1 || idx)
		return cache_fill_claim(c, cf, idx, uid, nothrash, f, NULL);
	pthread_mutex_lock(&c->lock);
	if (cf->fd >= 0 || cf->chunks[0].state != CH_ABSENT) {
		/* open already (a use costs no syscall), or not a fetch */
		pthread_mutex_unlock(&c->lock);
		return cache_fill_claim(c, cf, idx, uid, nothrash, f, NULL);
	}
	ret = cache_claim_locked(c, cf, idx, uid, nothrash, f);
	pthread_mutex_unlock(&c->lock);
	if (ret == CACHE_FETCH)
		f->fd = -1;
	return ret;
}

int cache_fill_open_at(struct cache *c, struct cache_fill *f, char rel[CACHE_REL_PATH_LEN])
{
	bool open;

	if (f->fd >= 0)
		return -EEXIST;
	pthread_mutex_lock(&c->lock);
	open = f->cf->fd >= 0;
	pthread_mutex_unlock(&c->lock);
	if (open || c->data_dfd < 0)
		return -EAGAIN;
	cache_cfile_relpath(&f->cf->id, rel);
	return c->data_dfd;
}

int cache_fill_opened(struct cache *c, struct cache_fill *f, int fd)
{
	int ret;

	if (f->fd >= 0) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	/*
	 * Not opened (a fan-out directory removed, out of descriptors) or not
	 * asked to: the synchronous open, which makes the directories again
	 * and sheds idle descriptors, decides.
	 */
	ret = fd >= 0 ? cache_fd_adopt(c, f->cf, fd, &f->fd) :
			cache_fd_acquire(c, f->cf, &f->fd);
	if (ret) {
		f->fd = -1;
		return ret;
	}
	f->own_fd = true;
	return 0;
}

int cache_fill_direct_fd(struct cache *c, struct cache_fill *f)
{
	struct cfile *cf = f->cf;
	char path[64];
	int dfd;

	pthread_mutex_lock(&c->lock);
	dfd = cf->dfd;
	pthread_mutex_unlock(&c->lock);
	if (dfd >= 0 || !atomic_load(&c->direct_ok))
		return dfd >= 0 ? dfd : -1;
	/* the same inode as f->fd, whatever happened to the path since */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", f->fd);
	dfd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (dfd < 0) {
		int e = errno;

		/* out of descriptors or memory: this time only; else for good */
		if (e != EMFILE && e != ENFILE && e != ENOMEM && e != EINTR &&
		    atomic_exchange(&c->direct_ok, false))
			log_info("cache %s: %s: buffered I/O", c->dir,
				 e == EINVAL ? "the filesystem refuses O_DIRECT" : strerror(e));
		return -1;
	}
	pthread_mutex_lock(&c->lock);
	if (cf->dfd >= 0) {
		close(dfd);
		dfd = cf->dfd;
	} else {
		cf->dfd = dfd;	/* our fd use keeps cf->fd, and so this, open */
		c->nfds++;
		cache_fd_trim_locked(c);
	}
	pthread_mutex_unlock(&c->lock);
	return dfd;
}

int cache_fill_commit(struct cache *c, struct cache_fill *f, uint64_t hash)
{
	struct cfile *cf = f->cf;
	struct cchunk *ch = &cf->chunks[f->idx];

	f->hash = hash;
	f->need = cache_alloc_size(f->len);
	pthread_mutex_lock(&c->lock);
	c->st.misses++;
	c->st.fetched_bytes += f->len;
	f->reserved = cache_reserve_locked(c, ch->own, f->need, f->nothrash);
	if (!f->reserved) {
		/* no room (quota, no-thrash, full): served, not kept */
		c->st.bypass++;
		ch->state = CH_ABSENT;
		wake_locked(c, cf, f->idx);
		pthread_mutex_unlock(&c->lock);
		claim_end(c, f);
		return CACHE_BYPASS;
	}
	cf->writers++;
	pthread_mutex_unlock(&c->lock);
	return CACHE_WRITE;
}

int cache_fill_written(struct cache *c, struct cache_fill *f, ssize_t res)
{
	struct cfile *cf = f->cf;
	struct cchunk *ch = &cf->chunks[f->idx];

	if (res >= 0 && res != (ssize_t)f->len)
		res = -ENOSPC;
	if ((res == -ENOSPC || res == -EDQUOT) && f->write_tries++ == 0) {
		/* the disk filled under us: make room and try once more */
		pthread_mutex_lock(&c->lock);
		for (int k = 0; k < 8 && cache_evict_one(c, ch->own); k++)
			;
		pthread_mutex_unlock(&c->lock);
		return CACHE_WRITE;
	}
	if (res < 0 && res != -ENOSPC && res != -EDQUOT)
		log_warn("cache: writing chunk %u of %016" PRIx64 "%016" PRIx64 " failed: %s",
			 f->idx, cf->id.hi, cf->id.lo, strerror((int)-res));

	pthread_mutex_lock(&c->lock);
	cf->writers--;
	if (res >= 0) {
		ch->hash = f->hash;
		ch->hkind = HK_XXH3_128_LO;
		ch->state = CH_PRESENT;
		ch->verified = true;
		cf->present++;
		cache_account(c, ch->own, 0, 1);
		cache_lru_push(c, ch);
		/* only now: the bytes (and with cache_sync their fdatasync) are done */
		cache_journal_append(c, JREC_ADD, cf, ch);
		cache_note_own_write(cf, f->fd);
	} else {
		cache_account(c, ch->own, -(int64_t)f->need, 0);
		c->st.bypass++;
		ch->state = CH_ABSENT;
		/* a partly written chunk is a hole again, never served */
		fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, f->off,
			  (off_t)f->len);
		cache_note_own_write(cf, f->fd);
	}
	wake_locked(c, cf, f->idx);
	pthread_mutex_unlock(&c->lock);
	claim_end(c, f);
	return res >= 0 ? CACHE_STORED : CACHE_BYPASS;
}

int cache_check_done(struct cache *c, struct cache_fill *f, const void *buf,
		     ssize_t res)
{
	struct cfile *cf = f->cf;
	struct cchunk *ch = &cf->chunks[f->idx];
	/* hash and hkind do not change while we hold the chunk CHECKING */
	bool ok = res == (ssize_t)f->len && hash_of_kind(ch->hkind, buf, f->len) == ch->hash;
	int ret;

	pthread_mutex_lock(&c->lock);
	if (ok) {
		ch->state = CH_PRESENT;
		ch->verified = true;
		c->st.hits++;
		ret = CACHE_HIT;
	} else {
		log_warn("cache: chunk %u of %016" PRIx64 "%016" PRIx64
			 " is corrupt on disk (%s): refetching", f->idx,
			 cf->id.hi, cf->id.lo,
			 res < 0 ? strerror((int)-res) :
			 res != (ssize_t)f->len ? "short" : "hash mismatch");
		c->st.corrupt++;
		ch->state = CH_PRESENT;
		cache_chunk_drop(c, ch, false);
		ret = CACHE_CORRUPT;
	}
	wake_locked(c, cf, f->idx);
	pthread_mutex_unlock(&c->lock);
	claim_end(c, f);
	return ret;
}

void cache_fill_abort(struct cache *c, struct cache_fill *f, int err)
{
	struct cfile *cf = f->cf;
	struct cchunk *ch = &cf->chunks[f->idx];

	pthread_mutex_lock(&c->lock);
	if (f->kind == CACHE_CHECK) {
		ch->state = CH_PRESENT;		/* still unverified */
	} else {
		ch->state = CH_ABSENT;
		if (err != -ECANCELED)
			c->st.fetch_errors++;
	}
	wake_locked(c, cf, f->idx);
	pthread_mutex_unlock(&c->lock);
	claim_end(c, f);
}
