/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache: the node's chunk cache on local NVMe.
 *
 * Each dataset file that has cached bytes owns one sparse cache file,
 * CACHE_DIR/data/XX/<content id hex>, whose apparent size is the dataset
 * file's size and whose chunks sit at their own offsets.  A fully cached file
 * is therefore a plain file the kernel (FUSE passthrough) or a GPU reader
 * (O_DIRECT) can read directly.  Evicting a chunk punches a hole.  A pack
 * of small files is cached as an entry of its own, one chunk, which its
 * files are read from (src/packentry.h; docs/cache.md, "Pack entries").
 *
 * The index (which chunks are present, their hash, the uid charged,
 * last use) lives in memory and in an append-only journal,
 * CACHE_DIR/index/journal, of fixed-size checksummed records (docs/cache.md).
 * A chunk is recorded only after its bytes are written (and, with
 * cache_sync, made durable), so a crash at any point leaves no chunk marked
 * present that is not fully on disk; a torn journal tail is dropped at start.
 *
 * Integrity: a chunk's hash (cache_chunk_hash()) is taken when it is filled,
 * from the source's own check where the backend has one.  The first read
 * of a chunk after the daemon starts reads the whole chunk back and checks
 * the hash; a cache file whose ctime moved without the daemon writing it is
 * re-verified the same way.  A mismatch is counted, the chunk dropped and
 * refetched: a wrong byte is never served.
 *
 * Concurrency: one mutex (c->lock) guards the index; disk and backend I/O run
 * outside it.  A missing chunk is fetched once however many readers want it:
 * the first marks it FILLING, the others wait on c->cond (or queue a
 * cache_waiter).  The same fill is offered in steps to an I/O engine that
 * does the transfers itself (cache_fill_claim() and below).
 *
 * Capacity: cache_size and cache_free_ratio are enforced in filesystem blocks
 * before every fill by evicting least recently used chunks.  ENOSPC on a
 * write evicts and retries once, then serves the read without caching
 * ("bypass"); the reader never sees the error.
 */
#ifndef STAGEFS_CACHE_H
#define STAGEFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "list.h"
#include "util.h"

struct cache;
struct cfile;

struct cache_opts {
	const char *dir;
	uint64_t size_limit;	/* bytes; 0 = none */
	double free_ratio;	/* keep this share of the filesystem free */
	bool sync;		/* fdatasync data before journaling it */
	uint32_t fd_cache;	/* cache-file fds kept open */
};

/*
 * Where missing chunk data comes from: @fetch reads chunk @idx (exactly
 * @len bytes) into @buf and returns @len or -errno.  @uid is charged for
 * chunks this call brings in.
 */
struct cache_source {
	int (*fetch)(void *arg, uint32_t idx, void *buf, size_t len);
	void *arg;
	uint32_t uid;
	bool nothrash;		/* when full (or over quota) admit nothing, evict nothing */
};

/*
 * Quotas.  Every chunk is charged to the owner whose read or warmup brought
 * it in (a chunk later read by others stays charged to its first reader):
 * a uid, or a tenant (below).  A
 * fill by user U first keeps U within U's quota by evicting U's own least
 * recently used chunks; then, if the cache is full, it evicts in global LRU
 * order only chunks of U, of users without a quota, or of users over their
 * quota: another user's chunks within that user's quota are never pushed
 * out.  If no room can be made the read is served without caching.
 *
 * @fn(@arg, uid, tenant) returns the quota in bytes (UINT64_MAX: none) of
 * owner @uid: a user (@tenant NULL) or a tenant (@tenant its name, "" if
 * the tenants file lost it).  It is called under the cache lock, once per
 * owner until cache_quota_changed().
 */
void cache_set_quota_fn(struct cache *c,
			uint64_t (*fn)(void *arg, uint32_t uid, const char *tenant),
			void *arg);

/*
 * Tenants: owners that are not uids (cache_tenants.c).  A Kubernetes
 * namespace with a quota, "namespace:NAME", is charged as one owner
 * whatever uids its pods run as.  cache_tenant_id() gives @name's owner id
 * (CACHE_TENANT_FIRST..LAST; made and recorded durably in
 * CACHE_DIR/index/tenants on first use, the same across restarts): 0, or
 * -EINVAL (a name with spaces or too long), -ENOSPC (all ids used) or the
 * write's -errno.  No real uid is taken from that range: a reader whose uid
 * falls in it is charged as CACHE_UID_OVERFLOW (cache_owner_of_uid()).
 * cache_tenant_name() names a tenant id ("tenant#ID" and false if the file
 * lost it; false for a uid).
 */
#define CACHE_TENANT_FIRST	0xfffe0000u
#define CACHE_TENANT_LAST	0xfffefffeu
#define CACHE_TENANT_NAME_MAX	80
#define CACHE_UID_OVERFLOW	65534u	/* the kernel's overflowuid, "nobody" */

static inline bool cache_owner_is_tenant(uint32_t id)
{
	return id >= CACHE_TENANT_FIRST && id <= CACHE_TENANT_LAST;
}

/* The owner a read by @uid is charged to, when no tenant is. */
static inline uint32_t cache_owner_of_uid(uint32_t uid)
{
	return cache_owner_is_tenant(uid) ? CACHE_UID_OVERFLOW : uid;
}

/* @owner where one was decided (not 0), else @uid's (the callers' "0: the uid"). */
static inline uint32_t cache_owner_or_uid(uint32_t owner, uint32_t uid)
{
	return owner ? owner : cache_owner_of_uid(uid);
}

int cache_tenant_id(struct cache *c, const char *name, uint32_t *id);
bool cache_tenant_name(struct cache *c, uint32_t id, char *buf, size_t len);
/* The quotas changed (config reload): ask @fn again. */
void cache_quota_changed(struct cache *c);
/*
 * Evict now what puts users over their quota (after cache_quota_changed(),
 * a quota may be below what a user holds): each such user's own chunks, least
 * recently used first, until within it.  Chunks being read and pinned
 * files stay; that user is trimmed again at their next fill.  Returns the
 * chunks evicted, and their bytes on disk in *@bytes (may be NULL).
 */
uint64_t cache_enforce_quotas(struct cache *c, uint64_t *bytes);

struct cache_usage {
	uint32_t uid;			/* the owner: a uid or a tenant id */
	char tenant[CACHE_TENANT_NAME_MAX];	/* a tenant's name; "" for a uid */
	uint64_t used_bytes;
	uint64_t chunks;
	uint64_t limit_bytes;	/* UINT64_MAX: no quota */
};

/* The quota of @uid in bytes (UINT64_MAX: none), as fills see it. */
uint64_t cache_user_limit(struct cache *c, uint32_t uid);

/* A malloc'ed snapshot of per-owner usage in *@out (*@n entries). */
int cache_get_usage(struct cache *c, struct cache_usage **out, size_t *n);

struct cache_stats {
	uint64_t hits;		/* chunk reads served from the cache */
	uint64_t misses;	/* chunks fetched from the source */
	uint64_t fetched_bytes;
	uint64_t fetch_errors;
	uint64_t corrupt;	/* chunks whose hash did not match: refetched */
	uint64_t bypass;	/* reads served without caching (no space) */
	uint64_t evicted;	/* chunks evicted */
	uint64_t outside_changes; /* cache files changed outside stagefs: re-verified */
	uint64_t used_bytes;	/* disk blocks held by present chunks */
	uint64_t limit_bytes;	/* current effective capacity */
	uint64_t chunks;	/* present chunks */
	uint64_t files;		/* cache files known */
	uint64_t loaded_chunks;	/* chunks found in the index at start */
	uint64_t load_ms;	/* time to load the index at start */
};

/*
 * Open (creating if needed) the cache directory: takes an exclusive lock on
 * it (a second daemon gets -EBUSY and a message), loads the journal.
 * Returns 0 or -errno with a message in @err.  Release with cache_destroy().
 */
int cache_create(const struct cache_opts *opts, struct cache **out,
		 char *err, size_t errlen);
/* Compact the journal, close everything, free.  Not while reads run. */
void cache_destroy(struct cache *c);

/*
 * Find or create the cache entry for a dataset file with content id @id,
 * @size bytes cut in @chunk_size chunks.  Returns a reference the caller
 * drops with cache_file_put().  A file seen again under the same id but
 * another size or chunk size is dropped and started afresh.
 */
int cache_file_get(struct cache *c, const struct sfs_id *id, uint64_t size,
		   uint32_t chunk_size, struct cfile **out);
void cache_file_put(struct cache *c, struct cfile *cf);

/*
 * Read @len bytes at @off of the dataset file into @buf, filling missing
 * chunks from @src.  Returns the bytes read (short only at end of file) or
 * -errno (-EIO when the source failed).
 */
ssize_t cache_read(struct cache *c, struct cfile *cf, uint64_t off, void *buf,
		   size_t len, const struct cache_source *src);

/*
 * Make chunk @idx present without copying it out (warmup, readahead).
 * Returns 0 (also when already present) or -errno.
 */
int cache_read_prefetch(struct cache *c, struct cfile *cf, uint32_t idx,
	       const struct cache_source *src);

uint32_t cache_file_nchunks(const struct cfile *cf);
/* Number of chunks of @cf present now. */
uint32_t cache_file_present(struct cache *c, struct cfile *cf);
bool cache_chunk_present(struct cache *c, struct cfile *cf, uint32_t idx);

/*
 * Make sure every chunk of @cf is present and matches its hash, reading
 * back (and hashing) any chunk not verified since the daemon started.
 * Returns 0 when the whole file is cached and verified, -ENODATA when some
 * chunk is missing (a corrupt one is dropped, so it is missing afterwards),
 * or -errno.  Used before handing the cache file to the kernel (FUSE
 * passthrough) or to a client (GPU path), which read it without us: so it
 * also counts as a use of every chunk for eviction (LRU).
 */
int cache_file_verify(struct cache *c, struct cfile *cf);
/*
 * cache_file_verify(), and on 0 a use of the cache file's descriptor in
 * *@fd (opened read-write, shared with the cache's own I/O: never close
 * it), valid until cache_file_fd_release(@c, @cf).  An empty file gives
 * -ENODATA.  For a caller that hands the verified file on (FUSE
 * passthrough registers it) without opening its path again.
 */
int cache_file_verify_fd(struct cache *c, struct cfile *cf, int *fd);
void cache_file_fd_release(struct cache *c, struct cfile *cf);
/*
 * cache_file_verify(), and on 0 a new O_RDONLY descriptor (the caller's to
 * close) of the very file that was verified: the cache's descriptor
 * reopened through /proc/self/fd, never the cache file's path opened
 * again (a name can be made to lead elsewhere; the descriptor cannot).
 * For a caller that hands the file to someone who must not write it (the
 * client library, CACHE_FD).  An empty file gives -ENODATA.
 */
int cache_file_open_verified_ro(struct cache *c, struct cfile *cf, int *fd);

/*
 * True when every chunk of @cf is present and was verified since the daemon
 * started; counts as a use of each (LRU) like cache_file_verify(), but reads
 * and opens nothing, and does not look at the cache file's ctime: for a
 * caller that checks the file itself (a kept passthrough backing file).
 */
bool cache_file_all_verified(struct cache *c, struct cfile *cf);

/*
 * Start reading the whole cache file of @cf into the page cache
 * (readahead(2)) if every chunk is present and verified, opening its
 * descriptor into the fd cache: for a file about to be read (a LOOKUP of a
 * small file), so the disk read overlaps the reader's next round trips.
 * Never waits for the data; counts as a use of every chunk (LRU).  Returns
 * 0, -ENODATA (not whole or not verified: nothing done) or -errno.
 */
int cache_file_prefetch(struct cache *c, struct cfile *cf);
/* cache_file_prefetch() of @len bytes at @off only (a file in a pack's entry). */
int cache_file_prefetch_range(struct cache *c, struct cfile *cf, uint64_t off, size_t len);

/*
 * Pin @cf: while pinned none of its chunks is evicted, because a reader we
 * do not see (the kernel through passthrough, a client holding the fd) may
 * be reading the cache file.  Every pin is undone with cache_file_unpin().
 */
void cache_file_pin(struct cache *c, struct cfile *cf);
void cache_file_unpin(struct cache *c, struct cfile *cf);

/* Path of @cf's cache file (may not exist yet).  Returns 0 or -ENAMETOOLONG. */
int cache_file_path(struct cache *c, const struct cfile *cf, char *buf, size_t len);

/* Drop every unpinned, idle chunk of @cf.  Returns the chunks dropped. */
uint32_t cache_file_evict(struct cache *c, struct cfile *cf);
/*
 * cache_file_evict() of the chunks charged to user @uid only: a user may
 * drop its own chunks, never another's (their quota holds them).  Sets
 * *@skipped (may be NULL) to the present chunks of @cf charged to others,
 * which stay.  Returns the chunks dropped.
 */
uint32_t cache_file_evict_owned(struct cache *c, struct cfile *cf, uint32_t uid,
				uint32_t *skipped);

void cache_get_stats(struct cache *c, struct cache_stats *st);

/*
 * The hash the index records for a chunk: the low 64 bits of the XXH3-128
 * of its bytes (sfs_id_of()), which is the content address a RADOS chunk
 * object is named by.  A fill whose bytes a backend already checked against
 * their XXH3-128 passes that on, so no byte is hashed twice.
 */
uint64_t cache_chunk_hash(const void *buf, size_t len);

/* ---- asynchronous fills: an I/O engine doing the transfers itself ----
 *
 * cache_read()/cache_read_prefetch() fetch and write on the calling thread.  An
 * engine that keeps many fills in flight on one thread (prefetch/engine.c)
 * takes the same path in steps instead, doing each transfer itself (the
 * descriptors, offset and length are in struct cache_fill):
 *
 *   cache_fill_claim()      ABSENT -> FILLING by this caller (CACHE_FETCH),
 *                           PRESENT but not verified since the start ->
 *                           CHECKING (CACHE_CHECK); CACHE_HIT: nothing to do;
 *                           CACHE_BUSY: someone else fills or checks it
 *   fetch the chunk ...     then cache_fill_commit() with its hash:
 *                           CACHE_WRITE (room reserved under the quota and
 *                           no-thrash rules: write it) or CACHE_BYPASS (no
 *                           room: the chunk is absent again; serve the bytes
 *                           from the buffer and keep nothing)
 *   write it (+fdatasync    then cache_fill_written() with the result:
 *   when f->sync) ...       CACHE_STORED (journaled, verified, waiters
 *                           woken), CACHE_WRITE (the disk was full: room
 *                           was made, write once more) or CACHE_BYPASS
 *   read it back (CHECK)    then cache_check_done(): CACHE_HIT (verified:
 *                           the buffer holds the chunk) or CACHE_CORRUPT
 *                           (dropped, counted: claim again to refetch)
 *   on any failure          cache_fill_abort(): the claim is undone
 *
 * Every claim that returned CACHE_FETCH or CACHE_CHECK ends in exactly one
 * of CACHE_STORED, CACHE_BYPASS, cache_check_done() or cache_fill_abort();
 * until then the caller holds a use of the descriptors (never closed under
 * it) and other readers of the chunk wait.  The guarantees of the
 * synchronous path hold, since it is built on the same steps: one fetch
 * however many ask, the record appended only after cache_fill_written()
 * reported the bytes (and their fdatasync) done, no chunk served that is
 * not verified, ENOSPC bypass.  The buffer is the caller's throughout.
 *
 * Thread safety: any thread; each claim is used by one thread at a time.
 */
enum {
	CACHE_HIT = 0,		/* present and verified */
	CACHE_FETCH,		/* claimed: fetch it */
	CACHE_CHECK,		/* claimed: read it back to verify it */
	CACHE_BUSY,		/* another caller fills or checks it */
	CACHE_WRITE,		/* write the chunk (again) */
	CACHE_STORED,		/* written and recorded */
	CACHE_BYPASS,		/* not kept: no room */
	CACHE_CORRUPT,		/* failed its check: dropped */
};

/* One claimed chunk.  The caller embeds it in its I/O context. */
struct cache_fill {
	/* set by cache_fill_claim(); read-only for the caller */
	int fd;			/* the cache file, buffered */
	off_t off;		/* the chunk's offset in it */
	size_t len;		/* the chunk's length */
	bool sync;		/* cache_sync: fdatasync after the write */
	/* the cache's own */
	struct cfile *cf;
	uint32_t idx;
	uint8_t kind;		/* CACHE_FETCH or CACHE_CHECK */
	bool nothrash;
	bool own_fd;		/* the claim took an fd use */
	bool reserved;		/* room is charged to the chunk's owner */
	uint8_t write_tries;
	uint64_t hash;
	uint64_t need;		/* bytes charged */
};

/*
 * Waits for a chunk that another caller fills or checks (CACHE_BUSY).
 * @fn runs once, when that chunk's state changes, on the thread that
 * changed it and with the cache's lock held: it must only hand over (queue
 * and wake), never call into the cache.  The caller then claims again.
 */
struct cache_waiter {
	void (*fn)(struct cache_waiter *w);
	/* the cache's own; zeroed (as calloc leaves it) before the first claim */
	struct list_node node;		/* in c->waiters while queued */
	const struct cfile *cf;
	uint32_t idx;
};

/*
 * Claim chunk @idx of @cf for a fill charged to @uid (@nothrash: the
 * dataset's policy).  Returns CACHE_HIT, CACHE_FETCH or CACHE_CHECK (@f
 * set up: go on with the steps above), CACHE_BUSY (@w, if not NULL, is
 * queued: see struct cache_waiter), or -errno (the cache file cannot be
 * opened).  Counts as a use of the chunk for eviction.
 */
int cache_fill_claim(struct cache *c, struct cfile *cf, uint32_t idx,
		     uint32_t uid, bool nothrash, struct cache_fill *f,
		     struct cache_waiter *w);
/*
 * cache_fill_claim() that opens nothing: a CACHE_FETCH claim of a file of
 * one chunk whose cache file is not open leaves f->fd at -1, for the
 * caller to open (or create) that file off its thread, e.g. with
 * IORING_OP_OPENAT, before it writes: cache_fill_open_at(), then
 * cache_fill_opened().  Any other claim is cache_fill_claim()'s (no
 * waiter).  An engine claiming a pack's hundred members thus makes no
 * syscall per member until their bytes are in.
 */
int cache_fill_claim_lazy(struct cache *c, struct cfile *cf, uint32_t idx,
			  uint32_t uid, bool nothrash, struct cache_fill *f);
#define CACHE_REL_PATH_LEN	40
/*
 * Where to open the cache file of a lazy claim: fills @rel with its path
 * relative to the returned directory descriptor, to be opened with
 * O_RDWR | O_CREAT | O_CLOEXEC, mode 0600.  -EEXIST: f->fd is set, nothing
 * to open; -EAGAIN: open it with cache_fill_opened(c, f, -1) instead (the
 * file is open already, or the directory could not be held).
 */
int cache_fill_open_at(struct cache *c, struct cache_fill *f, char rel[CACHE_REL_PATH_LEN]);
/*
 * The caller's open of a lazy claim's file ended with @fd (taken over), or
 * -errno, or was not made (-1): in the last two cases the cache opens it
 * itself.  Returns 0 (f->fd set: the claim holds a use of it, as any
 * claim) or -errno (end the claim: cache_fill_written() with the error or
 * cache_fill_abort()).
 */
int cache_fill_opened(struct cache *c, struct cache_fill *f, int fd);
/*
 * Take @w off its chunk if it is still queued.  Returns true if it was
 * (its fn will not run), false if its fn has run already.
 */
bool cache_waiter_cancel(struct cache *c, struct cache_waiter *w);

/*
 * An O_DIRECT descriptor of @f's cache file, opened on first use and kept
 * with the buffered one (valid until the claim ends), or -1 where the
 * filesystem refuses O_DIRECT (ramfs) or the file cannot be opened again:
 * then use f->fd.  Once refused, it is not asked again.
 */
int cache_fill_direct_fd(struct cache *c, struct cache_fill *f);

/*
 * The fetch of a CACHE_FETCH claim brought f->len bytes whose
 * cache_chunk_hash() is @hash.  Returns CACHE_WRITE or CACHE_BYPASS (the
 * claim is over).  Counts the fetch (misses, fetched_bytes).
 */
int cache_fill_commit(struct cache *c, struct cache_fill *f, uint64_t hash);
/*
 * The write after CACHE_WRITE ended: @res is f->len (and, with f->sync,
 * its fdatasync succeeded) or -errno (a short write is -ENOSPC).  Returns
 * CACHE_STORED, CACHE_WRITE (write again) or CACHE_BYPASS; after
 * CACHE_STORED and CACHE_BYPASS the claim is over.
 */
int cache_fill_written(struct cache *c, struct cache_fill *f, ssize_t res);
/*
 * The read-back of a CACHE_CHECK claim ended: @res bytes (or -errno) are
 * in @buf.  Returns CACHE_HIT (verified) or CACHE_CORRUPT (the chunk was
 * dropped and counted: claim again to refetch it).  The claim is over.
 */
int cache_check_done(struct cache *c, struct cache_fill *f, const void *buf,
		     ssize_t res);
/*
 * Give a claim up (fetch failed, out of buffers, shutting down).  A fill
 * leaves the chunk absent (counted in fetch_errors unless @err is
 * -ECANCELED); a check leaves it present and unverified.  Waiters wake.
 */
void cache_fill_abort(struct cache *c, struct cache_fill *f, int err);

/*
 * Copy @len bytes at @off of @cf into @buf if every chunk they touch is
 * present and verified; never fetches, checks or waits.  Returns @len (or
 * less at end of file), or -EAGAIN when a chunk needs a fill or a check
 * (go through the engine), or -errno.
 */
ssize_t cache_read_cached(struct cache *c, struct cfile *cf, uint64_t off,
			  void *buf, size_t len);

#endif
