/*
 * cache: the node's chunk cache on local NVMe.
 *
 * Each dataset file that has cached bytes owns one sparse cache file,
 * CACHE_DIR/data/XX/<content id hex>, whose apparent size is the dataset
 * file's size and whose chunks sit at their own offsets.  A fully cached file
 * is therefore a plain file the kernel (FUSE passthrough) or a GPU reader
 * (O_DIRECT) can read directly.  Evicting a chunk punches a hole.
 *
 * The index (which chunks are present, their XXH3-64 hash, the uid charged,
 * last use) lives in memory and in an append-only journal,
 * CACHE_DIR/index/journal, of fixed-size checksummed records (docs/cache.md).
 * A chunk is recorded only after its bytes are written (and, with
 * cache_sync, made durable), so a crash at any point leaves no chunk marked
 * present that is not fully on disk; a torn journal tail is dropped at start.
 *
 * Integrity: a chunk's hash is computed when it is filled (and checked
 * against the source's own hash where the backend has one).  The first read
 * of a chunk after the daemon starts reads the whole chunk back and checks
 * the hash; a cache file whose ctime moved without the daemon writing it is
 * re-verified the same way.  A mismatch is counted, the chunk dropped and
 * refetched: a wrong byte is never served.
 *
 * Concurrency: one mutex (c->lock) guards the index; disk and backend I/O run
 * outside it.  A missing chunk is fetched once however many readers want it:
 * the first marks it FILLING, the others wait on c->cond.
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
 * Quotas.  Every chunk is charged to the uid whose read or warmup brought it
 * in (a chunk later read by others stays charged to its first reader).  A
 * fill by user U first keeps U within U's quota by evicting U's own least
 * recently used chunks; then, if the cache is full, it evicts in global LRU
 * order only chunks of U, of users without a quota, or of users over their
 * quota: another user's chunks within that user's quota are never pushed
 * out.  If no room can be made the read is served without caching.
 *
 * @fn(@arg, uid) returns the quota in bytes (UINT64_MAX: none).  It is
 * called under the cache lock, once per user until cache_quota_changed().
 */
void cache_set_quota_fn(struct cache *c, uint64_t (*fn)(void *arg, uint32_t uid),
			void *arg);
/* The quotas changed (config reload): ask @fn again. */
void cache_quota_changed(struct cache *c);

struct cache_usage {
	uint32_t uid;
	uint64_t used_bytes;
	uint64_t chunks;
	uint64_t limit_bytes;	/* UINT64_MAX: no quota */
};

/* A malloc'ed snapshot of per-user usage in *@out (*@n entries). */
int cache_get_usage(struct cache *c, struct cache_usage **out, size_t *n);

struct cache_stats {
	uint64_t hits;		/* chunk reads served from the cache */
	uint64_t misses;	/* chunks fetched from the source */
	uint64_t fetched_bytes;
	uint64_t fetch_errors;
	uint64_t corrupt;	/* chunks whose hash did not match: refetched */
	uint64_t bypass;	/* reads served without caching (no space) */
	uint64_t evicted;	/* chunks evicted */
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
int cache_fill(struct cache *c, struct cfile *cf, uint32_t idx,
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
 * True when every chunk of @cf is present and was verified since the daemon
 * started; counts as a use of each (LRU) like cache_file_verify(), but reads
 * and opens nothing, and does not look at the cache file's ctime: for a
 * caller that checks the file itself (a kept passthrough backing file).
 */
bool cache_file_all_verified(struct cache *c, struct cfile *cf);

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

void cache_get_stats(struct cache *c, struct cache_stats *st);

/*
 * An optional engine for the cache's two bulk disk transfers: writing a
 * filled chunk (then fdatasync when @sync) and reading a whole chunk back to
 * check its hash.  @buf is 4096-aligned with room for @cap >= @len bytes;
 * @off is the chunk's offset.  Each returns the bytes transferred or -errno,
 * or -ENOSYS to decline (the cache then uses pwrite/fdatasync and pread, the
 * default).  Called from any thread that reads or fills, outside the lock.
 */
struct cache_io_ops {
	ssize_t (*write_chunk)(void *arg, int fd, const void *buf, size_t len,
			       off_t off, bool sync);
	ssize_t (*read_chunk)(void *arg, int fd, void *buf, size_t len, size_t cap,
			      off_t off);
};

/* Install @ops with @arg (NULL: the default) before reads or fills start. */
void cache_set_io(struct cache *c, const struct cache_io_ops *ops, void *arg);

#endif
