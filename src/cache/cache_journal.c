/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_journal: the cache's on-disk index, CACHE_DIR/LAYOUT and
 * CACHE_DIR/index/journal.  An on-disk contract of its own: docs/cache.md
 * ("The journal", "Crash safety") is its long form.
 *
 * Format.  LAYOUT holds "stagefs-cache 2\n"; a layout-1 directory (same
 * records, hkind always 0) is taken over and its LAYOUT rewritten; anything
 * else is refused.  The journal is a sequence of fixed 64-byte records
 * (struct jrec, host byte order): magic "SFJ1", type ADD (chunk present)
 * or DEL (chunk gone), hkind (what the hash is), the content id, the file's
 * size and chunk size, the chunk index, its hash, length and charged uid,
 * and an XXH3-64 of the 56 bytes before it.
 *
 * Guarantees.
 *  - An ADD is appended only after the chunk's bytes were written (and with
 *    cache_sync made durable); a DEL only after its hole was punched.  The
 *    callers (cache_fill.c, cache_lru.c) keep that order; this file only
 *    appends.  Appends are plain write(2), never fsynced: a lost ADD costs a
 *    refetch, a lost DEL leaves a recorded hole the first-read check catches.
 *  - Loading replays the records in order and stops at the first one whose
 *    magic or crc is wrong, or at a partial record; the file is truncated to
 *    the good prefix (a torn tail).  Every chunk loaded starts unverified.
 *  - Compaction rewrites one ADD per present chunk, least recent first (a
 *    reload rebuilds the same LRU order), atomically: written aside,
 *    fsynced, renamed over.  The old or the new journal survives a crash;
 *    both are valid histories.
 *
 * Locking: cache_journal_append() and cache_journal_compact() run under
 * c->lock (cache_i.h); cache_journal_load() and cache_journal_open() run in
 * cache_create(), before any other thread can see the cache.
 */
#include "cache_i.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CACHE_LAYOUT	"stagefs-cache 2\n"
#define CACHE_LAYOUT_1	"stagefs-cache 1\n"	/* upgraded in place at start */
#define JREC_MAGIC	0x53464a31u	/* "SFJ1" */

struct jrec {
	uint32_t magic;
	uint8_t type;
	uint8_t hkind;		/* enum hash_kind; 0 in layout 1 */
	uint8_t pad[2];
	uint64_t id_hi, id_lo;
	uint64_t file_size;
	uint32_t chunk_size;
	uint32_t idx;
	uint64_t hash;
	uint32_t len;
	uint32_t owner;
	uint64_t crc;		/* XXH3-64 of the bytes before it */
};

_Static_assert(sizeof(struct jrec) == 64, "journal record is 64 bytes");

static void jrec_fill(struct jrec *r, int type, const struct cfile *cf,
		      const struct cchunk *ch)
{
	memset(r, 0, sizeof(*r));
	r->magic = JREC_MAGIC;
	r->type = (uint8_t)type;
	r->hkind = ch->hkind;
	r->id_hi = cf->id.hi;
	r->id_lo = cf->id.lo;
	r->file_size = cf->size;
	r->chunk_size = cf->chunk_size;
	r->idx = ch->idx;
	r->hash = ch->hash;
	r->len = (uint32_t)cache_chunk_len(cf, ch->idx);
	r->owner = ch->owner;
	r->crc = sfs_hash64(r, offsetof(struct jrec, crc));
}

void cache_journal_append(struct cache *c, int type, const struct cfile *cf,
			  const struct cchunk *ch)
{
	struct jrec r;

	jrec_fill(&r, type, cf, ch);
	if (c->journal_fd < 0)
		return;
	if (write(c->journal_fd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
		/* losing a record only costs a refetch after a restart */
		log_warn("cache journal write failed: %s", strerror(errno));
		return;
	}
	c->journal_recs++;
}

int cache_journal_open(struct cache *c)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/index/journal", c->dir);
	c->journal_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (c->journal_fd < 0)
		return -errno;
	return 0;
}

/* Replay the journal into the in-memory index.  A torn tail is cut off. */
int cache_journal_load(struct cache *c)
{
	char path[PATH_MAX];
	size_t bufsz = 1 << 20, good = 0;
	struct jrec *buf;
	ssize_t n;
	off_t off = 0;
	int fd, ret = 0;

	snprintf(path, sizeof(path), "%s/index/journal", c->dir);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	buf = malloc(bufsz);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while ((n = pread_full(fd, buf, bufsz, off)) > 0) {
		size_t nrec = (size_t)n / sizeof(struct jrec);
		bool torn = false;

		for (size_t i = 0; i < nrec; i++) {
			struct jrec *r = &buf[i];
			struct sfs_id id = { r->id_hi, r->id_lo };
			struct cfile *cf;
			struct cchunk *ch;

			if (r->magic != JREC_MAGIC ||
			    r->crc != sfs_hash64(r, offsetof(struct jrec, crc))) {
				torn = true;
				break;
			}
			good++;
			cf = cache_cfile_find(c, &id);
			if (cf && (cf->size != r->file_size || cf->chunk_size != r->chunk_size)) {
				/* same id, other shape: the older entry is void */
				for (uint32_t k = 0; k < cf->nchunks; k++)
					if (cf->chunks[k].state == CH_PRESENT) {
						cache_lru_unlink(&cf->chunks[k]);
						cf->chunks[k].state = CH_ABSENT;
						cache_account(c, cf->chunks[k].own,
							-(int64_t)cache_alloc_size(cache_chunk_len(cf, k)), -1);
					}
				cf->present = 0;
				cache_cfile_maybe_free(c, cf);
				cf = NULL;
			}
			if (!cf && r->type == JREC_ADD)
				cf = cache_cfile_new(c, &id, r->file_size, r->chunk_size);
			if (!cf || r->idx >= cf->nchunks)
				continue;
			ch = &cf->chunks[r->idx];
			if (r->type == JREC_ADD && ch->state != CH_PRESENT &&
			    r->len == cache_chunk_len(cf, r->idx)) {
				ch->state = CH_PRESENT;
				ch->hash = r->hash;
				ch->hkind = r->hkind;
				ch->owner = r->owner;
				ch->own = cache_owner_get(c, r->owner);
				ch->verified = false;
				cf->present++;
				cache_lru_push(c, ch);
				cache_account(c, ch->own, (int64_t)cache_alloc_size(r->len), 1);
			} else if (r->type == JREC_DEL && ch->state == CH_PRESENT) {
				cache_lru_unlink(ch);
				ch->state = CH_ABSENT;
				cf->present--;
				cache_account(c, ch->own, -(int64_t)cache_alloc_size(r->len), -1);
				cache_cfile_maybe_free(c, cf);
			}
		}
		if (torn || (size_t)n % sizeof(struct jrec)) {
			log_warn("cache journal: torn record after %zu good ones, discarding the tail",
				 good);
			if (ftruncate(fd, (off_t)(good * sizeof(struct jrec))) < 0)
				ret = -errno;
			break;
		}
		off += n;
		if ((size_t)n < bufsz)
			break;
	}
	if (n < 0)
		ret = (int)n;
	c->journal_recs = good;
	free(buf);
	close(fd);
	return ret;
}

/*
 * Rewrite the journal with one ADD per present chunk, least recent first, so
 * a reload rebuilds the same LRU order.  Atomic: written aside, fsynced,
 * renamed over.
 */
int cache_journal_compact(struct cache *c)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	size_t cap = 4096, n = 0;
	struct jrec *buf;
	int fd, ret = 0;

	snprintf(path, sizeof(path), "%s/index/journal", c->dir);
	snprintf(tmp, sizeof(tmp), "%s/index/journal.tmp", c->dir);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	buf = malloc(cap * sizeof(*buf));
	if (!buf) {
		ret = -ENOMEM;
		goto out_close;
	}
	list_for_each_reverse(pos, &c->lru) {
		struct cchunk *ch = list_entry(pos, struct cchunk, lru);

		jrec_fill(&buf[n++], JREC_ADD, ch->file, ch);
		if (n == cap) {
			ssize_t w = write(fd, buf, n * sizeof(*buf));

			if (w != (ssize_t)(n * sizeof(*buf))) {
				ret = w < 0 ? -errno : -EIO;
				goto out_free;
			}
			n = 0;
		}
	}
	if (n && write(fd, buf, n * sizeof(*buf)) != (ssize_t)(n * sizeof(*buf))) {
		ret = -errno ? -errno : -EIO;
		goto out_free;
	}
	if (fsync(fd) < 0 || rename(tmp, path) < 0) {
		ret = -errno;
		goto out_free;
	}
	c->journal_recs = c->st.chunks;
out_free:
	free(buf);
out_close:
	close(fd);
	if (ret)
		unlink(tmp);
	return ret;
}

/* Write LAYOUT as @dir's layout, atomically (aside, fsynced, renamed over). */
static int write_layout(const char *dir)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/LAYOUT", dir);
	return write_file_atomic(path, CACHE_LAYOUT, strlen(CACHE_LAYOUT), 0600, true);
}

/*
 * Layout 2 differs from 1 only in the hash its records carry (the record's
 * hkind byte, 0 in layout 1, tells them apart), so a layout-1 directory is
 * taken over as is; LAYOUT then says 2, and a daemon of layout 1 refuses
 * the directory instead of distrusting every chunk filled since.
 */
int cache_layout_check(const char *dir, char *err, size_t errlen)
{
	char path[PATH_MAX], buf[64] = "";
	int fd, ret;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/LAYOUT", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			goto fail_errno;
		ret = write_layout(dir);
		if (ret)
			snprintf(err, errlen, "%s: %s", path, strerror(-ret));
		return ret;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n >= 0 && !strcmp(buf, CACHE_LAYOUT))
		return 0;
	if (n >= 0 && !strcmp(buf, CACHE_LAYOUT_1)) {
		ret = write_layout(dir);
		if (ret)
			snprintf(err, errlen, "%s: upgrading to layout 2: %s", path,
				 strerror(-ret));
		else
			log_notice("cache %s: layout 1 upgraded to 2", dir);
		return ret;
	}
	snprintf(err, errlen, "%s: not a stagefs cache of layout 2 (%s)", dir,
		 n < 0 ? "unreadable" : "other layout");
	return -EINVAL;
fail_errno:
	ret = -errno;
	snprintf(err, errlen, "%s: %s", path, strerror(errno));
	return ret;
}
