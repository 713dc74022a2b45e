/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_i.h: what the cache's files share and nobody else sees.  The
 * public API and its guarantees are in cache.h; the on-disk layout in
 * docs/cache.md.
 *
 * The files, one job each:
 *   cache.c          the API: create/destroy, file handles, verify, pin,
 *                    evict, quotas and usage
 *   cache_journal.c  the on-disk index: LAYOUT and the journal (its format
 *                    and crash guarantees are stated there)
 *   cache_lru.c      owners, the chunk LRUs, capacity and eviction
 *   cache_fds.c      cache files on disk and the descriptor LRU
 *   cache_table.c    the file table (content id -> struct cfile)
 *   cache_fill.c     the fill in steps (claim, commit, written, check, abort)
 *                    and the waiters
 *   cache_read.c     the synchronous read path, the bypass slots
 *   cache_tenants.c  owners that are not uids (namespaces), their names on disk
 *
 * THE ONE CIRCLE (by design; tests/integration/arrows.sh allows no other
 * in the tree): cache_lru.c, cache_fds.c, cache_journal.c and
 * cache_table.c call each other.  Evicting a chunk (cache_lru.c) closes
 * its file's descriptor (cache_fds.c), records the departure in the
 * journal (cache_journal.c) and may free the file (cache_table.c);
 * loading the journal (cache_journal.c) rebuilds the table and the LRU;
 * a cache file found gone or replaced (cache_fds.c) drops its chunks
 * (cache_lru.c).  All of it under c->lock, one state machine of the
 * chunk's life in four files by the resource each touches.
 *
 * LOCK RULES
 *
 *   c->lock     guards everything reachable from struct cache that is not
 *               marked otherwise: the file table, every chunk's state, the
 *               LRU and descriptor lists, owners, counters (c->st), the
 *               journal descriptor, quota state.  Functions named *_locked,
 *               and those whose comment says "c->lock held", are called
 *               with it; the others take it themselves.
 *   c->bp_lock  guards the bypass slots only; a leaf.
 *   c->tenant_lock  guards the tenant table only; a leaf.
 *
 *   Lock order: c->lock, then c->bp_lock (cache_chunk_read() looks in the
 *   bypass slots under c->lock) or c->tenant_lock (an owner's quota asks
 *   for its tenant's name).  No other lock is taken under either;
 *   the quota function (cache_set_quota_fn) and an async waiter's fn run
 *   under c->lock and must take none of the cache's locks.
 *
 *   No disk or backend I/O under c->lock, except the hole punch of an
 *   eviction (with its fstat) and the 64-byte journal append that records
 *   a chunk's arrival or departure.  A chunk in FILLING or CHECKING belongs
 *   to the thread that claimed it: only it changes the chunk's hash and
 *   state, and others wait on c->cond (or a cache_waiter).
 *
 *   c->direct_ok is atomic.  c->dir, c->data_dir, c->opts and c->lock_fd
 *   are set at create and only read after.
 */
#ifndef STAGEFS_CACHE_I_H
#define STAGEFS_CACHE_I_H

#include "cache.h"
#include "htab.h"
#include "list.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define ALLOC_UNIT	4096ULL

enum chunk_state {
	CH_ABSENT,
	CH_FILLING,	/* one thread is fetching it; others wait */
	CH_PRESENT,
	CH_CHECKING,	/* one thread is re-verifying it; others wait */
};

struct owner;

/* Every field: protected by c->lock. */
struct cchunk {
	struct list_node lru;		/* on c->lru iff PRESENT */
	struct list_node own_lru;	/* on own->lru iff PRESENT and own */
	struct owner *own;			/* charged user */
	struct cfile *file;
	uint64_t hash;		/* XXH3-64 of the chunk's bytes */
	uint32_t idx;
	uint32_t owner;		/* uid charged */
	uint16_t readers;	/* hits reading it now: not evictable */
	uint8_t state;
	bool verified;		/* checked against hash since daemon start */
	uint8_t hkind;		/* enum hash_kind of @hash */
};

/*
 * What a chunk's recorded hash is.  Records written by layout 1 hold
 * XXH3-64; everything filled since holds cache_chunk_hash() (the low half
 * of XXH3-128).  The kind is the journal record's first pad byte.
 */
enum hash_kind { HK_XXH3_64 = 0, HK_XXH3_128_LO = 1 };

struct cfile {
	/* id, size, chunk_size, nchunks and chunks: fixed at cache_cfile_new() */
	struct htab_node hnode;		/* in c->files, under its id */
	struct list_node fd_lru;	/* on c->fds iff fd >= 0 */
	struct sfs_id id;
	uint64_t size;
	uint32_t chunk_size;
	uint32_t nchunks;
	/* the rest: protected by c->lock */
	uint32_t present;
	int refs;
	int fd;
	int dfd;		/* O_DIRECT twin of fd, or -1; closed with it */
	int fd_users;
	int writers;		/* our own writes in flight: ctime is ours */
	int pins;		/* outside readers: no eviction */
	uint64_t wgen;		/* bumped by each of our own writes */
	struct timespec ctime_seen;
	bool ctime_valid;
	struct cchunk *chunks;
};

/* A user or tenant the cache charges chunks to.  Every field: protected by c->lock. */
struct owner {
	uint32_t uid;		/* or a tenant id (cache_owner_is_tenant) */
	uint32_t gen;		/* quota_gen when limit was asked */
	uint64_t used;		/* bytes of present (or reserved) chunks */
	uint64_t chunks;
	uint64_t limit;
	struct list_node lru;	/* this user's chunks (cchunk.own_lru), most recent first */
};

/*
 * A chunk served without caching (no room) stays in memory a little while:
 * the READ requests that follow for the rest of it must not refetch it.
 */
#define BYPASS_SLOTS 8

struct bypass_slot {
	struct sfs_id id;
	uint32_t idx;
	size_t len;
	void *buf;		/* chunk_size bytes, kept for reuse */
	size_t cap;
	uint64_t stamp;		/* 0 = empty */
};

struct cache {
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* chunk state changes; waits on lock */
	char *dir;			/* set at create, then read-only */
	char *data_dir;			/* set at create, then read-only */
	int data_dfd;			/* data_dir, O_PATH, or -1; set at create */
	int lock_fd;			/* set at create, then read-only */
	int journal_fd;			/* protected by lock */
	uint64_t journal_recs;		/* protected by lock */
	struct cache_opts opts;		/* set at create, then read-only */

	struct htab files;		/* protected by lock: id -> cfile (cache_table.c) */
	struct list_node lru;		/* protected by lock: cchunk.lru, most recent first */
	struct list_node fds;		/* protected by lock: cfile.fd_lru, most recent first */
	uint32_t nfds;			/* protected by lock; O_DIRECT twins count */

	struct cache_stats st;		/* protected by lock */

	struct owner **owners;		/* protected by lock */
	size_t nowners;			/* protected by lock */
	uint64_t (*quota_fn)(void *arg, uint32_t uid, const char *tenant);	/* protected by lock */
	void *quota_arg;		/* protected by lock */
	uint32_t quota_gen;		/* protected by lock */

	pthread_mutex_t tenant_lock;	/* a leaf: guards tenants, ntenants */
	char **tenants;			/* names of owner ids CACHE_TENANT_FIRST.. */
	size_t ntenants;

	pthread_mutex_t bp_lock;	/* a leaf: guards bp[] and bp_clock */
	struct bypass_slot bp[BYPASS_SLOTS];
	uint64_t bp_clock;

	struct list_node waiters;	/* protected by lock: cache_waiter.node */
	_Atomic bool direct_ok;		/* O_DIRECT not refused yet */

	/* protected by lock: what the filesystem allows us (cache_effective_limit) */
	uint64_t fs_cap;		/* used + free - reserve, at fs_cap_ns */
	uint64_t fs_cap_ns;		/* 0: never sampled */
	bool fs_cramped;		/* fs_cap below FS_CRAMPED: said so */
};


/* Bytes @len occupies on disk: whole filesystem blocks. */
static inline uint64_t cache_alloc_size(size_t len)
{
	return (len + ALLOC_UNIT - 1) / ALLOC_UNIT * ALLOC_UNIT;
}

/* Length of chunk @idx of @cf (the last one may be short). */
static inline size_t cache_chunk_len(const struct cfile *cf, uint32_t idx)
{
	uint64_t off = (uint64_t)idx * cf->chunk_size;

	return (size_t)MIN((uint64_t)cf->chunk_size, cf->size - off);
}

/* cache_table.c: the file table (c->lock held) */
int cache_table_init(struct cache *c);
void cache_table_release(struct cache *c);
struct cfile *cache_cfile_find(struct cache *c, const struct sfs_id *id);
struct cfile *cache_cfile_new(struct cache *c, const struct sfs_id *id,
			      uint64_t size, uint32_t chunk_size);
void cache_cfile_maybe_free(struct cache *c, struct cfile *cf);

/* cache_tenants.c: at create and destroy */
int cache_tenants_load(struct cache *c);
void cache_tenants_release(struct cache *c);

/* cache_lru.c: owners, LRUs, capacity and eviction (c->lock held) */
struct owner *cache_owner_get(struct cache *c, uint32_t uid);
uint64_t cache_owner_limit(struct cache *c, struct owner *o);
void cache_lru_unlink(struct cchunk *ch);
void cache_lru_push(struct cache *c, struct cchunk *ch);
void cache_lru_touch(struct cache *c, struct cchunk *ch);
void cache_account(struct cache *c, struct owner *o, int64_t delta, int64_t chunks);
uint64_t cache_effective_limit(struct cache *c, bool exact);
void cache_chunk_drop(struct cache *c, struct cchunk *ch, bool punch);
bool cache_evict_one(struct cache *c, const struct owner *self);
bool cache_reserve_locked(struct cache *c, struct owner *o, uint64_t bytes,
			  bool nothrash);
void cache_quota_enforce_locked(struct cache *c, uint64_t *chunks, uint64_t *bytes);

/* cache_fds.c: cache files and their descriptors */
/* XX/<32 hex>: a cache file's path under c->data_dir (c->data_dfd) */
void cache_cfile_relpath(const struct sfs_id *id, char buf[CACHE_REL_PATH_LEN]);
void cache_cfile_path(const struct cache *c, const struct sfs_id *id,
		      char *buf, size_t len);
void cache_fd_close_locked(struct cache *c, struct cfile *cf);
void cache_fd_trim_locked(struct cache *c);
void cache_cfile_forget_chunks(struct cache *c, struct cfile *cf);
int cache_fd_acquire(struct cache *c, struct cfile *cf, int *out);
int cache_fd_adopt(struct cache *c, struct cfile *cf, int fd, int *out);
void cache_fd_release(struct cache *c, struct cfile *cf);
void cache_note_own_write(struct cfile *cf, int fd);

/* cache_journal.c: the on-disk index */
enum { JREC_ADD = 1, JREC_DEL = 2 };
int cache_layout_check(const char *dir, char *err, size_t errlen);
int cache_journal_load(struct cache *c);
int cache_journal_compact(struct cache *c);
int cache_journal_open(struct cache *c);
void cache_journal_append(struct cache *c, int type, const struct cfile *cf,
			  const struct cchunk *ch);

/* cache_fill.c: the fill in steps */
int cache_claim_locked(struct cache *c, struct cfile *cf, uint32_t idx,
		       uint32_t uid, bool nothrash, struct cache_fill *f);

/* cache_read.c: the synchronous read path */
ssize_t cache_chunk_read(struct cache *c, struct cfile *cf, int fd, uint32_t idx,
			 size_t coff, void *dst, size_t n,
			 const struct cache_source *src);

#endif
