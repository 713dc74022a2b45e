/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_lru: who is charged for what, and what leaves when room is needed.
 *
 * Every present chunk is on two LRU lists: the cache's (c->lru) and its
 * owner's (the uid charged, owner->lru); most recent first.  A fill
 * reserves its bytes with cache_reserve_locked(): within its owner's quota
 * first (the owner's own chunks go), then within the cache's capacity,
 * pushing out only chunks cache.h's quota rules allow.  The capacity is
 * cache_size and what the filesystem has (our bytes + free - the
 * cache_free_ratio reserve), sampled at most every 100 ms on the fast path.
 *
 * A chunk leaves with cache_chunk_drop(): hole punched first, DEL record
 * appended after (cache_journal.c).  Pinned files, chunks being read and
 * chunks in FILLING or CHECKING never leave.
 *
 * Locking: everything here runs under c->lock (cache_i.h).
 */
#include "cache_i.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Below this the filesystem leaves the cache no useful room: warn once. */
#define FS_CRAMPED	(256ull << 20)

#define FS_CAP_MAX_AGE_NS	(100 * 1000000ull)	/* statvfs at most 10/s on the fast path */

/*
 * The owner record of @uid, made on first use (a linear search: a node has
 * few users).  Out of memory, the first owner is charged instead; NULL
 * only when there is none.
 */
struct owner *cache_owner_get(struct cache *c, uint32_t uid)
{
	struct owner *o, **no;

	for (size_t i = 0; i < c->nowners; i++)
		if (c->owners[i]->uid == uid)
			return c->owners[i];
	o = calloc(1, sizeof(*o));
	no = o ? realloc(c->owners, (c->nowners + 1) * sizeof(*no)) : NULL;
	if (!no) {
		/* charge the first owner rather than fail a read */
		free(o);
		return c->nowners ? c->owners[0] : NULL;
	}
	o->uid = uid;
	list_init(&o->lru);
	c->owners = no;
	c->owners[c->nowners++] = o;
	return o;
}

/* @o's quota, asked of the quota function once per cache_quota_changed(). */
uint64_t cache_owner_limit(struct cache *c, struct owner *o)
{
	if (o->gen != c->quota_gen) {
		char name[CACHE_TENANT_NAME_MAX];
		bool tenant = cache_owner_is_tenant(o->uid);

		if (tenant && !cache_tenant_name(c, o->uid, name, sizeof(name)))
			name[0] = '\0';
		o->limit = c->quota_fn ? c->quota_fn(c->quota_arg, o->uid, tenant ? name : NULL) :
			   UINT64_MAX;
		o->gen = c->quota_gen;
	}
	return o->limit;
}

/* Take @ch (present) off the cache's LRU and its owner's. */
void cache_lru_unlink(struct cchunk *ch)
{
	list_del(&ch->lru);
	if (list_linked(&ch->own_lru))
		list_del(&ch->own_lru);
}

/* Put @ch at the front (most recent) of both LRUs. */
void cache_lru_push(struct cache *c, struct cchunk *ch)
{
	list_add(&c->lru, &ch->lru);
	if (ch->own)
		list_add(&ch->own->lru, &ch->own_lru);
}

/* @ch was used: move it to the front. */
void cache_lru_touch(struct cache *c, struct cchunk *ch)
{
	if (c->lru.next == &ch->lru)
		return;
	cache_lru_unlink(ch);
	cache_lru_push(c, ch);
}

/* Charge (or refund, @delta < 0) bytes to @o and the cache. */
void cache_account(struct cache *c, struct owner *o, int64_t delta, int64_t chunks)
{
	c->st.used_bytes += (uint64_t)delta;
	c->st.chunks += (uint64_t)chunks;
	if (o) {
		o->used += (uint64_t)delta;
		o->chunks += (uint64_t)chunks;
	}
}

/*
 * Others' data on the cache filesystem leaves the cache (almost) no room
 * under cache_free_ratio: fills bypass the cache and warmups fail with
 * ENOSPC.  Say why once, and once more when room comes back (hysteresis:
 * below 256 MiB, above 512 MiB).  c->lock held.
 */
static void note_cramped(struct cache *c, uint64_t avail, uint64_t reserve)
{
	char a[32], r[32], u[32];

	/* a cache_size below it is the operator's choice, not a shortage */
	bool short_of_own = !c->opts.size_limit || c->fs_cap < c->opts.size_limit;

	if (!c->fs_cramped && c->fs_cap < FS_CRAMPED && short_of_own) {
		c->fs_cramped = true;
		log_warn("cache %s: room for only %s: the filesystem has %s free and "
			 "cache_free_ratio=%.2f keeps %s of it free; what does not fit is read "
			 "past the cache and not staged by warmups (free space on it, or "
			 "lower cache_free_ratio)",
			 c->dir, fmt_size(c->fs_cap, u, sizeof(u)), fmt_size(avail, a, sizeof(a)),
			 c->opts.free_ratio, fmt_size(reserve, r, sizeof(r)));
	} else if (c->fs_cramped && c->fs_cap > 2 * FS_CRAMPED) {
		c->fs_cramped = false;
		log_notice("cache %s: room again (%s free on the filesystem)", c->dir,
			   fmt_size(avail, a, sizeof(a)));
	}
}

/*
 * The most the cache may hold: cache_size, and what the filesystem has
 * (our bytes + free - cache_free_ratio's reserve).  Our own writes and
 * evictions move "used" and "free" by the same amount, so the sum holds
 * between samples: with !@exact a sample up to 100 ms old is used, which
 * keeps statvfs() off every fill; room taken by others since is what the
 * ENOSPC bypass is for.  Callers ask @exact before evicting.  c->lock held.
 */
uint64_t cache_effective_limit(struct cache *c, bool exact)
{
	struct statvfs sv;
	uint64_t limit = c->opts.size_limit ? c->opts.size_limit : UINT64_MAX;
	uint64_t now = now_ns();

	if (exact || !c->fs_cap_ns || now - c->fs_cap_ns > FS_CAP_MAX_AGE_NS) {
		c->fs_cap = UINT64_MAX;
		/* a filesystem that reports no size (ramfs) is bounded by cache_size alone */
		if (statvfs(c->dir, &sv) == 0 && sv.f_blocks) {
			uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
			uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
			uint64_t reserve = (uint64_t)((double)total * c->opts.free_ratio);

			c->fs_cap = c->st.used_bytes + (avail > reserve ? avail - reserve : 0);
			note_cramped(c, avail, reserve);
		}
		c->fs_cap_ns = now;
	}
	limit = MIN(limit, c->fs_cap);
	c->st.limit_bytes = limit;
	return limit;
}

/*
 * Drop a present chunk: with @punch, punch its hole (through a temporary
 * descriptor when the fd cache holds none), then journal it.  c->lock held.
 */
void cache_chunk_drop(struct cache *c, struct cchunk *ch, bool punch)
{
	struct cfile *cf = ch->file;
	size_t len = cache_chunk_len(cf, ch->idx);

	if (punch) {
		char path[PATH_MAX];
		int fd = cf->fd;

		if (fd < 0) {
			cache_cfile_path(c, &cf->id, path, sizeof(path));
			fd = open(path, O_RDWR | O_CLOEXEC);
		}
		if (fd >= 0) {
			if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				      (off_t)ch->idx * cf->chunk_size, (off_t)len) < 0 &&
			    errno != EOPNOTSUPP)
				log_warn("cache: punching a hole failed: %s", strerror(errno));
			if (!cf->writers)
				cache_note_own_write(cf, fd);
			if (fd != cf->fd)
				close(fd);
		}
	}
	cache_lru_unlink(ch);
	ch->state = CH_ABSENT;
	ch->verified = false;
	cf->present--;
	cache_account(c, ch->own, -(int64_t)cache_alloc_size(len), -1);
	cache_journal_append(c, JREC_DEL, cf, ch);
}

/*
 * Only PRESENT chunks go.  A CHECKING one is still on the LRU lists while
 * its bytes are read back outside the lock: evicting it punched the hole
 * under the checker, which then marked it present and verified off every
 * list (served as zeros later) or dropped it a second time (NULL lru_unlink).
 */
static bool evictable(const struct cchunk *ch)
{
	return ch->state == CH_PRESENT && !ch->readers && !ch->file->pins;
}

/* Evict @ch (present, evictable).  c->lock held. */
static void evict_chunk(struct cache *c, struct cchunk *ch)
{
	struct cfile *cf = ch->file;
	char path[PATH_MAX];

	if (cf->present == 1 && !cf->fd_users) {
		/*
		 * Last chunk: remove the whole cache file.  Truncated first: an
		 * idle passthrough backing id may still hold the inode, and its
		 * blocks must be freed now, not when that id is closed.  (No one
		 * reads through it: a passthrough open pins the file.)
		 */
		cache_fd_close_locked(c, cf);
		cache_cfile_path(c, &cf->id, path, sizeof(path));
		if (truncate(path, 0) < 0 && errno != ENOENT)
			log_warn("cache: truncating %s failed: %s", path, strerror(errno));
		unlink(path);
		cf->ctime_valid = false;
		cache_chunk_drop(c, ch, false);
	} else {
		cache_chunk_drop(c, ch, true);
	}
	c->st.evicted++;
	cache_cfile_maybe_free(c, cf);
}

/*
 * May a fill charged to @self push out @ch?  Its own chunks, those of users
 * without a quota and those of users over their quota: yes.  Another user's
 * chunks within that user's quota: never.
 */
static bool may_push_out(struct cache *c, const struct owner *self,
			 const struct cchunk *ch)
{
	struct owner *o = ch->own;
	uint64_t limit;

	if (!o || o == self)
		return true;
	limit = cache_owner_limit(c, o);
	return limit == UINT64_MAX || o->used > limit;
}

/* Evict the least recently used chunk @self may push out.  c->lock held. */
bool cache_evict_one(struct cache *c, const struct owner *self)
{
	list_for_each_reverse(pos, &c->lru) {
		struct cchunk *ch = list_entry(pos, struct cchunk, lru);

		if (evictable(ch) && may_push_out(c, self, ch)) {
			evict_chunk(c, ch);
			return true;
		}
	}
	return false;
}

/* Evict @o's own least recently used chunk.  c->lock held. */
static bool evict_own(struct cache *c, struct owner *o)
{
	list_for_each_reverse(pos, &o->lru) {
		struct cchunk *ch = list_entry(pos, struct cchunk, own_lru);

		if (evictable(ch)) {
			evict_chunk(c, ch);
			return true;
		}
	}
	return false;
}

/*
 * Bring every user back within their quota: each one over it loses their
 * own least recently used chunks until within it.  Chunks being read and
 * pinned files stay (that user is trimmed again at their next fill).
 * Counts the chunks and bytes evicted into *@chunks and *@bytes.  c->lock
 * held.
 */
void cache_quota_enforce_locked(struct cache *c, uint64_t *chunks, uint64_t *bytes)
{
	for (size_t i = 0; i < c->nowners; i++) {
		struct owner *o = c->owners[i];
		uint64_t quota = cache_owner_limit(c, o), before;

		while (o->used > quota) {
			before = o->used;
			if (!evict_own(c, o))
				break;
			(*chunks)++;
			*bytes += before - o->used;
		}
	}
}

/*
 * Reserve @bytes charged to @o: within @o's quota first (its own chunks
 * go), then within the cache's capacity (see may_push_out).  With
 * @nothrash nothing is evicted: a full cache admits nothing more.
 * c->lock held.
 */
bool cache_reserve_locked(struct cache *c, struct owner *o, uint64_t bytes,
			  bool nothrash)
{
	uint64_t limit;

	if (o) {
		uint64_t quota = cache_owner_limit(c, o);

		while (o->used + bytes > quota)
			if (nothrash || !evict_own(c, o))
				return false;
	}
	/* a recent sample where it fits; the filesystem asked again where not */
	for (bool exact = false;; exact = true) {
		limit = cache_effective_limit(c, exact);
		if (c->st.used_bytes + bytes <= limit)
			break;
		if (!exact)
			continue;
		/* evicting from the same filesystem also frees room there */
		if (nothrash || !cache_evict_one(c, o))
			return false;
	}
	cache_account(c, o, (int64_t)bytes, 0);
	return true;
}
