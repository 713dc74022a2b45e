/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_read: the synchronous read path (cache_read(), cache_read_prefetch()) that
 * the FUSE handlers without the I/O engine use: bring each chunk a read
 * touches to PRESENT and verified, fetching or checking it through the
 * steps of cache_fill.c on a per-thread scratch buffer, and copy out.
 *
 * A chunk served without caching (no room) stays in one of a few bypass
 * slots a little while, so the READs that follow for the rest of it do not
 * refetch it.
 *
 * Locking: c->lock, then c->bp_lock for the bypass slots (cache_i.h).
 */
#include "cache_i.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Copy @n bytes at @coff of a recently bypassed chunk; false if not held. */
static bool bypass_get(struct cache *c, const struct cfile *cf, uint32_t idx,
		       size_t coff, void *dst, size_t n)
{
	bool found = false;

	pthread_mutex_lock(&c->bp_lock);
	for (int i = 0; i < BYPASS_SLOTS; i++) {
		struct bypass_slot *b = &c->bp[i];

		if (b->stamp && b->idx == idx && sfs_id_eq(&b->id, &cf->id) &&
		    coff + n <= b->len) {
			memcpy(dst, (char *)b->buf + coff, n);
			b->stamp = ++c->bp_clock;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&c->bp_lock);
	return found;
}

static void bypass_put(struct cache *c, const struct cfile *cf, uint32_t idx,
		       const void *data, size_t len)
{
	struct bypass_slot *victim = &c->bp[0];

	pthread_mutex_lock(&c->bp_lock);
	for (int i = 0; i < BYPASS_SLOTS; i++)
		if (c->bp[i].stamp < victim->stamp)
			victim = &c->bp[i];
	if (victim->cap < len) {
		free(victim->buf);
		victim->buf = malloc(len);
		victim->cap = victim->buf ? len : 0;
	}
	if (victim->buf) {
		memcpy(victim->buf, data, len);
		victim->id = cf->id;
		victim->idx = idx;
		victim->len = len;
		victim->stamp = ++c->bp_clock;
	}
	pthread_mutex_unlock(&c->bp_lock);
}

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

struct scratch {
	size_t size;
	void *buf;
};

static void scratch_free(void *p)
{
	struct scratch *s = p;

	free(s->buf);
	free(s);
}

static void scratch_key_init(void)
{
	pthread_key_create(&scratch_key, scratch_free);
}

/* A per-thread buffer of at least @size bytes, kept for the thread's life. */
static void *scratch_get(size_t size)
{
	struct scratch *s;

	pthread_once(&scratch_once, scratch_key_init);
	s = pthread_getspecific(scratch_key);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		pthread_setspecific(scratch_key, s);
	}
	if (s->size < size) {
		void *nb;

		if (posix_memalign(&nb, 4096, size))
			return NULL;
		free(s->buf);
		s->buf = nb;
		s->size = size;
	}
	return s->buf;
}

/*
 * Bring chunk @idx of @cf to PRESENT+verified and copy @n bytes at @coff of
 * it to @dst (if @dst).  Returns @n (0 when @dst is NULL) or -errno.  With
 * @src NULL only a present, verified chunk is read (else -EAGAIN).  @fd is
 * a use of the cache file's descriptor the caller holds.
 */
ssize_t cache_chunk_read(struct cache *c, struct cfile *cf, int fd, uint32_t idx,
			 size_t coff, void *dst, size_t n,
			 const struct cache_source *src)
{
	struct cchunk *ch = &cf->chunks[idx];
	off_t base = (off_t)idx * cf->chunk_size;
	struct cache_fill f;
	void *scratch = NULL;
	ssize_t r;
	int st;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		if (ch->state == CH_PRESENT && ch->verified) {
			cache_lru_touch(c, ch);
			if (!dst) {
				pthread_mutex_unlock(&c->lock);
				return 0;
			}
			ch->readers++;
			pthread_mutex_unlock(&c->lock);
			r = pread_full(fd, dst, n, base + (off_t)coff);
			pthread_mutex_lock(&c->lock);
			ch->readers--;
			if (r == (ssize_t)n) {
				c->st.hits++;
				pthread_mutex_unlock(&c->lock);
				return r;
			}
			/* short or failed: let the check path decide */
			ch->verified = false;
			continue;
		}
		if (ch->state == CH_ABSENT && dst && bypass_get(c, cf, idx, coff, dst, n)) {
			c->st.bypass++;
			pthread_mutex_unlock(&c->lock);
			return (ssize_t)n;
		}
		if (!src || (ch->state == CH_ABSENT && !src->fetch)) {
			pthread_mutex_unlock(&c->lock);
			return src ? -ENOSYS : -EAGAIN;
		}
		st = cache_claim_locked(c, cf, idx, src->uid, src->nothrash, &f);
		if (st == CACHE_BUSY) {
			pthread_cond_wait(&c->cond, &c->lock);
			continue;
		}
		if (st == CACHE_HIT)
			continue;
		f.fd = fd;
		pthread_mutex_unlock(&c->lock);

		scratch = scratch_get(cf->chunk_size);
		if (!scratch) {
			cache_fill_abort(c, &f, -ENOMEM);
			return -ENOMEM;
		}
		if (st == CACHE_CHECK) {
			r = pread_full(fd, scratch, f.len, f.off);
			if (cache_check_done(c, &f, scratch, r) == CACHE_HIT)
				break;
			/* dropped: fetch it again */
			pthread_mutex_lock(&c->lock);
			continue;
		}
		r = src->fetch(src->arg, idx, scratch, f.len);
		if (r != (ssize_t)f.len) {
			if (r >= 0)
				r = -EIO;
			cache_fill_abort(c, &f, (int)r);
			return r;
		}
		st = cache_fill_commit(c, &f, cache_chunk_hash(scratch, f.len));
		while (st == CACHE_WRITE) {
			ssize_t w = pwrite_full(fd, scratch, f.len, f.off);

			if (w == (ssize_t)f.len && f.sync && fdatasync(fd) < 0)
				w = -errno;
			st = cache_fill_written(c, &f, w);
		}
		if (st == CACHE_BYPASS)
			bypass_put(c, cf, idx, scratch, f.len);
		break;
	}
	if (dst)
		memcpy(dst, (char *)scratch + coff, n);
	return dst ? (ssize_t)n : 0;
}

ssize_t cache_read(struct cache *c, struct cfile *cf, uint64_t off, void *buf,
		   size_t len, const struct cache_source *src)
{
	size_t done = 0;
	int fd, ret;

	if (off >= cf->size || !len)
		return 0;
	len = (size_t)MIN((uint64_t)len, cf->size - off);
	ret = cache_fd_acquire(c, cf, &fd);
	if (ret)
		return ret;
	while (done < len) {
		uint64_t pos = off + done;
		uint32_t idx = (uint32_t)(pos / cf->chunk_size);
		size_t coff = (size_t)(pos % cf->chunk_size);
		size_t n = MIN(len - done, (size_t)cf->chunk_size - coff);
		ssize_t r = cache_chunk_read(c, cf, fd, idx, coff, (char *)buf + done, n, src);

		if (r < 0) {
			/*
			 * No short read before end of file: FUSE takes one as
			 * the end of the file and shrinks the size it caches.
			 */
			cache_fd_release(c, cf);
			return r;
		}
		done += n;
	}
	cache_fd_release(c, cf);
	return (ssize_t)done;
}

/* cache_read without a source: cache_chunk_read() answers -EAGAIN for a miss. */
ssize_t cache_read_cached(struct cache *c, struct cfile *cf, uint64_t off,
			  void *buf, size_t len)
{
	return cache_read(c, cf, off, buf, len, NULL);
}

int cache_read_prefetch(struct cache *c, struct cfile *cf, uint32_t idx,
	       const struct cache_source *src)
{
	int fd, ret;
	ssize_t r;

	if (idx >= cf->nchunks)
		return -EINVAL;
	ret = cache_fd_acquire(c, cf, &fd);
	if (ret)
		return ret;
	r = cache_chunk_read(c, cf, fd, idx, 0, NULL, 0, src);
	cache_fd_release(c, cf);
	return r < 0 ? (int)r : 0;
}
