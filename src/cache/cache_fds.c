/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_fds: the cache files on disk (CACHE_DIR/data/XX/<id>) and the
 * descriptors kept open on them.
 *
 * A file's descriptor is opened on first use and kept on an LRU (c->fds)
 * of at most fd_cache descriptors (O_DIRECT twins count); idle ones beyond
 * that are closed, least recent first, and running out of descriptors
 * closes half of the idle ones and retries once.  cache_fd_acquire() takes
 * a use (the descriptor stays open until cache_fd_release()) and notices
 * what happened to the file behind the cache's back: a file deleted or
 * vanished has its chunks forgotten (refetched), one whose ctime moved
 * without our own write has them re-verified.  Our own writes (fills,
 * holes punched, the sizing of a new file) are bracketed by cf->writers
 * and recorded (cache_note_own_write()), so only outside ones count.
 *
 * Locking: c->lock guards the list and every cfile field touched here;
 * open(2), fstat(2) and ftruncate(2) run outside it (cache_i.h).
 */
#include "cache_i.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cache_cfile_relpath(const struct sfs_id *id, char buf[CACHE_REL_PATH_LEN])
{
	char hex[SFS_ID_HEX_LEN + 1];

	sfs_id_hex(id, hex);
	snprintf(buf, CACHE_REL_PATH_LEN, "%.2s/%s", hex, hex);
}

void cache_cfile_path(const struct cache *c, const struct sfs_id *id,
		      char *buf, size_t len)
{
	char rel[CACHE_REL_PATH_LEN];

	cache_cfile_relpath(id, rel);
	snprintf(buf, len, "%s/%s", c->data_dir, rel);
}

/* Close @cf's O_DIRECT twin, if open (it counts in nfds). */
static void dfd_close_locked(struct cache *c, struct cfile *cf)
{
	if (cf->dfd < 0)
		return;
	close(cf->dfd);
	cf->dfd = -1;
	c->nfds--;
}

void cache_fd_close_locked(struct cache *c, struct cfile *cf)
{
	if (cf->fd < 0)
		return;
	close(cf->fd);
	cf->fd = -1;
	dfd_close_locked(c, cf);
	/* ctime_seen stays: an outside write while closed is still noticed */
	list_del(&cf->fd_lru);
	c->nfds--;
}

/* Close idle descriptors (O_DIRECT twins count) down to @keep, LRU first. */
static void fd_trim_to_locked(struct cache *c, uint32_t keep)
{
	list_for_each_reverse_safe(pos, prev, &c->fds) {
		struct cfile *cf = list_entry(pos, struct cfile, fd_lru);

		if (c->nfds <= keep)
			break;
		if (!cf->fd_users)
			cache_fd_close_locked(c, cf);
	}
}

/* Close idle descriptors beyond the configured bound. */
void cache_fd_trim_locked(struct cache *c)
{
	fd_trim_to_locked(c, c->opts.fd_cache);
}

/*
 * open(2) of a cache file failed with @err: out of descriptors (the
 * process's or the system's) is answered by closing half of the idle ones,
 * and the caller retries once.  True if it should.
 */
static bool fd_shed(struct cache *c, int err)
{
	if (err != EMFILE && err != ENFILE)
		return false;
	pthread_mutex_lock(&c->lock);
	log_notice("cache: out of file descriptors (%s) with %u cache files open: "
		   "closing half of them", strerror(err), c->nfds);
	fd_trim_to_locked(c, c->nfds / 2);
	pthread_mutex_unlock(&c->lock);
	return true;
}

/* Mark every present chunk of @cf unverified (its file changed under us). */
static void cfile_distrust(struct cfile *cf)
{
	for (uint32_t i = 0; i < cf->nchunks; i++)
		cf->chunks[i].verified = false;
}

/* Forget every chunk of @cf (its cache file vanished).  c->lock held. */
void cache_cfile_forget_chunks(struct cache *c, struct cfile *cf)
{
	for (uint32_t i = 0; i < cf->nchunks; i++)
		if (cf->chunks[i].state == CH_PRESENT && !cf->chunks[i].readers)
			cache_chunk_drop(c, &cf->chunks[i], false);
}

/* open(2) an existing cache file; out of descriptors, shed some and retry once */
static int cfile_reopen(struct cache *c, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0 && fd_shed(c, errno))
		fd = open(path, O_RDWR | O_CLOEXEC);
	return fd;
}

/*
 * Give @fd, @cf's cache file just opened by the create path, @cf's size.
 * ftruncate(2) moves ctime even to the same size, and a file found there
 * with no chunk in the index (a sibling created it a moment ago, or its
 * descriptor was closed before any fill completed) may have a ctime
 * recorded already: so only where the size is wrong, and as a write of
 * ours, so that no cache_fd_acquire() takes it for an outside change.
 */
static int cfile_size_fd(struct cache *c, struct cfile *cf, int fd)
{
	struct stat st;
	int ret = 0;

	if (fstat(fd, &st) == 0 && st.st_size == (off_t)cf->size)
		return 0;
	/*
	 * A new, empty file of one chunk: that chunk's fill writes it whole
	 * and so sizes it; a failed fill leaves it short and the chunk absent.
	 * (Most small files: one ftruncate and its inode update fewer each.)
	 */
	if (st.st_size == 0 && cf->nchunks == 1)
		return 0;
	pthread_mutex_lock(&c->lock);
	cf->writers++;
	pthread_mutex_unlock(&c->lock);
	if (ftruncate(fd, (off_t)cf->size) < 0)
		ret = -errno;
	pthread_mutex_lock(&c->lock);
	cf->writers--;
	cache_note_own_write(cf, fd);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/*
 * Open @cf's cache file, creating it (sized) if needed.  @had_chunks: the
 * index held chunks of it when the caller looked; without any there is no
 * vanished file to notice, so go straight to O_CREAT (a cold fill creates
 * one file per small object: one path walk fewer each).
 */
static int cfile_open_fd(struct cache *c, struct cfile *cf, bool had_chunks, int *out)
{
	char path[PATH_MAX];
	int fd, ret;

	cache_cfile_path(c, &cf->id, path, sizeof(path));
	if (!had_chunks)
		goto create;
	fd = cfile_reopen(c, path);
	if (fd >= 0)
		goto out;
	if (errno != ENOENT)
		return -errno;
	pthread_mutex_lock(&c->lock);
	if (cf->present && cf->fd >= 0) {
		/*
		 * Not vanished: another thread created it after our open failed,
		 * and filled chunks through its descriptor since.  Open it again.
		 */
		pthread_mutex_unlock(&c->lock);
		fd = cfile_reopen(c, path);
		if (fd >= 0)
			goto out;
		if (errno != ENOENT)
			return -errno;
		pthread_mutex_lock(&c->lock);
	}
	if (cf->present) {
		log_warn("cache file %s vanished: refetching its chunks", path);
		cache_cfile_forget_chunks(c, cf);
	}
	pthread_mutex_unlock(&c->lock);
create:
	for (int tries = 0; tries < 2; tries++) {
		int e;

		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd >= 0)
			break;
		e = errno;
		if (!tries && fd_shed(c, e))
			continue;
		if (e != ENOENT)
			return -e;
		/* the cache directory (or its fan-out dir) was removed: rebuild */
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s", path);
		*strrchr(dir, '/') = '\0';
		int r = mkdir_p(dir, 0700);

		if (r)
			return r;
	}
	if (fd < 0)
		return -errno;
	ret = cfile_size_fd(c, cf, fd);
	if (ret) {
		close(fd);
		return ret;
	}
out:
	*out = fd;
	return 0;
}

/*
 * Take a use of @cf's descriptor (opening it if needed) and notice outside
 * writers by its ctime.  Pair with cache_fd_release().
 */
static int fd_acquire(struct cache *c, struct cfile *cf, int opened, int *out);

int cache_fd_acquire(struct cache *c, struct cfile *cf, int *out)
{
	return fd_acquire(c, cf, -1, out);
}

/*
 * cache_fd_acquire() with @fd, the cache file that the caller opened (or
 * created) itself by its path, as cfile_open_fd() would with no chunks
 * held: taken over (closed if the file is open already).
 */
int cache_fd_adopt(struct cache *c, struct cfile *cf, int fd, int *out)
{
	return fd_acquire(c, cf, fd, out);
}

static int fd_acquire(struct cache *c, struct cfile *cf, int opened, int *out)
{
	struct stat st;
	int fd = -1, ret;

	pthread_mutex_lock(&c->lock);
	if (cf->fd < 0) {
		bool had_chunks = cf->present > 0;

		pthread_mutex_unlock(&c->lock);
		if (opened >= 0) {
			ret = cfile_size_fd(c, cf, opened);
			if (ret) {
				close(opened);
				return ret;
			}
			fd = opened;
			opened = -1;
		} else {
			ret = cfile_open_fd(c, cf, had_chunks, &fd);
			if (ret)
				return ret;
		}
		pthread_mutex_lock(&c->lock);
		if (cf->fd >= 0) {
			close(fd);
		} else {
			cf->fd = fd;
			list_add(&c->fds, &cf->fd_lru);
			c->nfds++;
		}
	} else {
		list_move(&c->fds, &cf->fd_lru);
	}
	cf->fd_users++;
	fd = cf->fd;
	cache_fd_trim_locked(c);
	if (opened >= 0)
		close(opened);	/* open already: ours was not needed */
	/* a write of ours between here and fstat() must not look foreign */
	uint64_t wgen = cf->wgen;
	bool ours_in_flight = cf->writers > 0;

	pthread_mutex_unlock(&c->lock);

	int sr = fstat(fd, &st);

	if (sr == 0 && st.st_nlink == 0) {
		/* the cache file was deleted under us: start a new one */
		pthread_mutex_lock(&c->lock);
		log_warn("cache file of %016" PRIx64 "%016" PRIx64
			 " was deleted: refetching its chunks", cf->id.hi, cf->id.lo);
		cache_cfile_forget_chunks(c, cf);
		cf->ctime_valid = false;
		if (cf->fd_users == 1 && !cf->writers) {
			cf->fd_users--;
			cache_fd_close_locked(c, cf);
			pthread_mutex_unlock(&c->lock);
			return fd_acquire(c, cf, -1, out);
		}
		pthread_mutex_unlock(&c->lock);
	} else if (sr == 0) {
		pthread_mutex_lock(&c->lock);
		if (cf->writers || ours_in_flight || cf->wgen != wgen) {
			/* our own fill moved ctime: judge it later */
		} else if (cf->ctime_valid &&
		    (st.st_ctim.tv_sec != cf->ctime_seen.tv_sec ||
		     st.st_ctim.tv_nsec != cf->ctime_seen.tv_nsec)) {
			log_notice("cache file of %016" PRIx64 "%016" PRIx64
				   " changed outside stagefs: re-verifying it",
				   cf->id.hi, cf->id.lo);
			c->st.outside_changes++;
			cfile_distrust(cf);
		}
		if (!cf->writers && !ours_in_flight && cf->wgen == wgen) {
			cf->ctime_seen = st.st_ctim;
			cf->ctime_valid = true;
		}
		pthread_mutex_unlock(&c->lock);
	}
	*out = fd;
	return 0;
}

void cache_fd_release(struct cache *c, struct cfile *cf)
{
	pthread_mutex_lock(&c->lock);
	/* the O_DIRECT twin serves fills and checks only: one descriptor a file when idle */
	if (!--cf->fd_users)
		dfd_close_locked(c, cf);
	cache_fd_trim_locked(c);
	pthread_mutex_unlock(&c->lock);
}

/* After our own write to @fd, remember its new ctime.  c->lock held. */
void cache_note_own_write(struct cfile *cf, int fd)
{
	struct stat st;

	cf->wgen++;
	if (fstat(fd, &st) == 0) {
		cf->ctime_seen = st.st_ctim;
		cf->ctime_valid = true;
	}
}
