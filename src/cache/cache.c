/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache: the chunk cache's API (cache.h for the design and guarantees,
 * docs/cache.md for the on-disk layout): create and destroy, file handles,
 * verification before a file is handed out whole, pins, eviction on
 * request, quotas and usage.  The parts it is made of are listed, with the
 * lock rules, in cache_i.h.
 */
#include "cache_i.h"

#include "log.h"
#include "safepath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int cache_file_get(struct cache *c, const struct sfs_id *id, uint64_t size,
		   uint32_t chunk_size, struct cfile **out)
{
	struct cfile *cf;

	pthread_mutex_lock(&c->lock);
	cf = cache_cfile_find(c, id);
	if (cf && (cf->size != size || cf->chunk_size != chunk_size) &&
	    !cf->refs && !cf->fd_users) {
		/* same content id, other shape: start over */
		char path[PATH_MAX];

		cache_cfile_forget_chunks(c, cf);
		cache_fd_close_locked(c, cf);
		cache_cfile_path(c, id, path, sizeof(path));
		unlink(path);
		cache_cfile_maybe_free(c, cf);
		cf = NULL;
	}
	if (!cf)
		cf = cache_cfile_new(c, id, size, chunk_size);
	if (!cf) {
		pthread_mutex_unlock(&c->lock);
		return -ENOMEM;
	}
	if (cf->size != size || cf->chunk_size != chunk_size) {
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	cf->refs++;
	pthread_mutex_unlock(&c->lock);
	*out = cf;
	return 0;
}

void cache_file_put(struct cache *c, struct cfile *cf)
{
	pthread_mutex_lock(&c->lock);
	cf->refs--;
	cache_cfile_maybe_free(c, cf);
	pthread_mutex_unlock(&c->lock);
}

uint32_t cache_file_nchunks(const struct cfile *cf)
{
	return cf->nchunks;
}

uint32_t cache_file_present(struct cache *c, struct cfile *cf)
{
	uint32_t n;

	pthread_mutex_lock(&c->lock);
	n = cf->present;
	pthread_mutex_unlock(&c->lock);
	return n;
}

bool cache_chunk_present(struct cache *c, struct cfile *cf, uint32_t idx)
{
	bool p;

	pthread_mutex_lock(&c->lock);
	p = idx < cf->nchunks && cf->chunks[idx].state == CH_PRESENT;
	pthread_mutex_unlock(&c->lock);
	return p;
}

/* cache_file_verify(); on success with @out, the fd use is handed back. */
static int file_verify(struct cache *c, struct cfile *cf, int *out)
{
	static const struct cache_source none = { 0 };
	int fd, ret = 0;

	pthread_mutex_lock(&c->lock);
	if (cf->present != cf->nchunks)
		ret = -ENODATA;
	pthread_mutex_unlock(&c->lock);
	if (ret || !cf->nchunks)
		return ret;
	ret = cache_fd_acquire(c, cf, &fd);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < cf->nchunks && !ret; i++) {
		bool need;

		pthread_mutex_lock(&c->lock);
		need = cf->chunks[i].state != CH_PRESENT || !cf->chunks[i].verified;
		if (cf->chunks[i].state == CH_ABSENT)
			ret = -ENODATA;
		else if (!need)
			/* the outside reader's use is the only one we will see */
			cache_lru_touch(c, &cf->chunks[i]);
		pthread_mutex_unlock(&c->lock);
		if (ret || !need)
			continue;
		/* cache_chunk_read() with no source: a present chunk is checked, an
		 * absent one is not fetched */
		pthread_mutex_lock(&c->lock);
		bool absent = cf->chunks[i].state == CH_ABSENT;
		pthread_mutex_unlock(&c->lock);
		if (absent) {
			ret = -ENODATA;
			break;
		}
		ssize_t r = cache_chunk_read(c, cf, fd, i, 0, NULL, 0, &none);

		if (r < 0)
			ret = r == -EIO || r == -ENOSYS ? -ENODATA : (int)r;
	}
	if (!ret) {
		pthread_mutex_lock(&c->lock);
		if (cf->present != cf->nchunks)
			ret = -ENODATA;
		pthread_mutex_unlock(&c->lock);
	}
	if (ret || !out)
		cache_fd_release(c, cf);
	else
		*out = fd;
	return ret;
}

int cache_file_verify(struct cache *c, struct cfile *cf)
{
	return file_verify(c, cf, NULL);
}

int cache_file_verify_fd(struct cache *c, struct cfile *cf, int *fd)
{
	if (!cf->nchunks)
		return -ENODATA;	/* no descriptor to hand back */
	return file_verify(c, cf, fd);
}

void cache_file_fd_release(struct cache *c, struct cfile *cf)
{
	cache_fd_release(c, cf);
}

int cache_file_open_verified_ro(struct cache *c, struct cfile *cf, int *out)
{
	struct stat a, b;
	char proc[64];
	int fd, ro, ret;

	ret = cache_file_verify_fd(c, cf, &fd);
	if (ret)
		return ret;
	/*
	 * A new open file description (its own offset and flags, read-only)
	 * of the inode behind @fd, whatever its name leads to now.
	 */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	ro = open(proc, O_RDONLY | O_CLOEXEC | O_NOATIME);
	if (ro < 0 && errno == EPERM)	/* O_NOATIME: not the file's owner */
		ro = open(proc, O_RDONLY | O_CLOEXEC);
	if (ro < 0)
		ret = -errno;
	else if (fstat(fd, &a) < 0 || fstat(ro, &b) < 0)
		ret = -errno;
	else if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		ret = -ESTALE;	/* no /proc, or not ours: never something else */
	cache_fd_release(c, cf);
	if (ret) {
		if (ro >= 0)
			close(ro);
		return ret;
	}
	*out = ro;
	return 0;
}

bool cache_file_all_verified(struct cache *c, struct cfile *cf)
{
	bool ok;

	pthread_mutex_lock(&c->lock);
	ok = cf->present == cf->nchunks;
	for (uint32_t i = 0; ok && i < cf->nchunks; i++)
		ok = cf->chunks[i].state == CH_PRESENT && cf->chunks[i].verified;
	for (uint32_t i = 0; ok && i < cf->nchunks; i++)
		cache_lru_touch(c, &cf->chunks[i]);
	pthread_mutex_unlock(&c->lock);
	return ok;
}

int cache_file_prefetch_range(struct cache *c, struct cfile *cf, uint64_t off, size_t len)
{
	int fd, ret;

	if (!cf->nchunks || !cache_file_all_verified(c, cf))
		return -ENODATA;
	ret = cache_fd_acquire(c, cf, &fd);
	if (ret)
		return ret;
	/* only starts the I/O: the reader's page cache lookups wait for it */
	if (readahead(fd, (off_t)off, len) < 0)
		ret = -errno;
	cache_fd_release(c, cf);
	return ret;
}

int cache_file_prefetch(struct cache *c, struct cfile *cf)
{
	return cache_file_prefetch_range(c, cf, 0, (size_t)cf->size);
}

void cache_file_pin(struct cache *c, struct cfile *cf)
{
	pthread_mutex_lock(&c->lock);
	cf->pins++;
	cf->refs++;
	pthread_mutex_unlock(&c->lock);
}

void cache_file_unpin(struct cache *c, struct cfile *cf)
{
	pthread_mutex_lock(&c->lock);
	cf->pins--;
	cf->refs--;
	cache_cfile_maybe_free(c, cf);
	pthread_mutex_unlock(&c->lock);
}

int cache_file_path(struct cache *c, const struct cfile *cf, char *buf, size_t len)
{
	if (len < strlen(c->data_dir) + 2 * SFS_ID_HEX_LEN)
		return -ENAMETOOLONG;
	cache_cfile_path(c, &cf->id, buf, len);
	return 0;
}

/* Drop the idle chunks of @cf charged to @uid (any, if @any).  c->lock held. */
static uint32_t evict_locked(struct cache *c, struct cfile *cf, bool any, uint32_t uid,
			     uint32_t *skipped)
{
	uint32_t n = 0, others = 0;

	for (uint32_t i = 0; i < cf->nchunks; i++) {
		struct cchunk *ch = &cf->chunks[i];

		if (ch->state != CH_PRESENT)
			continue;
		if (!any && ch->owner != uid) {
			others++;
			continue;
		}
		if (cf->pins || ch->readers)
			continue;
		cache_chunk_drop(c, ch, true);
		c->st.evicted++;
		n++;
	}
	if (skipped)
		*skipped = others;
	return n;
}

uint32_t cache_file_evict(struct cache *c, struct cfile *cf)
{
	uint32_t n;

	pthread_mutex_lock(&c->lock);
	n = evict_locked(c, cf, true, 0, NULL);
	pthread_mutex_unlock(&c->lock);
	return n;
}

uint32_t cache_file_evict_owned(struct cache *c, struct cfile *cf, uint32_t uid,
				uint32_t *skipped)
{
	uint32_t n;

	pthread_mutex_lock(&c->lock);
	n = evict_locked(c, cf, false, uid, skipped);
	pthread_mutex_unlock(&c->lock);
	return n;
}

void cache_set_quota_fn(struct cache *c,
			uint64_t (*fn)(void *arg, uint32_t uid, const char *tenant),
			void *arg)
{
	pthread_mutex_lock(&c->lock);
	c->quota_fn = fn;
	c->quota_arg = arg;
	c->quota_gen++;
	pthread_mutex_unlock(&c->lock);
}

void cache_quota_changed(struct cache *c)
{
	pthread_mutex_lock(&c->lock);
	c->quota_gen++;
	pthread_mutex_unlock(&c->lock);
}

uint64_t cache_enforce_quotas(struct cache *c, uint64_t *bytes)
{
	uint64_t chunks = 0, b = 0;

	pthread_mutex_lock(&c->lock);
	cache_quota_enforce_locked(c, &chunks, &b);
	pthread_mutex_unlock(&c->lock);
	if (bytes)
		*bytes = b;
	return chunks;
}

uint64_t cache_user_limit(struct cache *c, uint32_t uid)
{
	struct owner *o;
	uint64_t limit;

	pthread_mutex_lock(&c->lock);
	o = cache_owner_get(c, uid);
	limit = o ? cache_owner_limit(c, o) : UINT64_MAX;
	pthread_mutex_unlock(&c->lock);
	return limit;
}

int cache_get_usage(struct cache *c, struct cache_usage **out, size_t *n)
{
	struct cache_usage *u;

	pthread_mutex_lock(&c->lock);
	u = calloc(c->nowners ? c->nowners : 1, sizeof(*u));
	if (!u) {
		pthread_mutex_unlock(&c->lock);
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->nowners; i++) {
		u[i].uid = c->owners[i]->uid;
		if (cache_owner_is_tenant(u[i].uid))
			cache_tenant_name(c, u[i].uid, u[i].tenant, sizeof(u[i].tenant));
		u[i].used_bytes = c->owners[i]->used;
		u[i].chunks = c->owners[i]->chunks;
		u[i].limit_bytes = cache_owner_limit(c, c->owners[i]);
	}
	*n = c->nowners;
	pthread_mutex_unlock(&c->lock);
	*out = u;
	return 0;
}

void cache_get_stats(struct cache *c, struct cache_stats *st)
{
	pthread_mutex_lock(&c->lock);
	cache_effective_limit(c, true);
	*st = c->st;
	pthread_mutex_unlock(&c->lock);
}

static int take_lock(struct cache *c, char *err, size_t errlen)
{
	char path[PATH_MAX], pid[32] = "";
	int e;

	snprintf(path, sizeof(path), "%s/lock", c->dir);
	c->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->lock_fd < 0) {
		e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	if (flock(c->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		e = errno;
		if (pread(c->lock_fd, pid, sizeof(pid) - 1, 0) < 0)
			pid[0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		snprintf(err, errlen,
			 "cache directory %s is in use by another stagefs daemon%s%s%s",
			 c->dir, pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "");
		return e == EWOULDBLOCK ? -EBUSY : -e;
	}
	snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(c->lock_fd, 0) < 0 ||
	    pwrite(c->lock_fd, pid, strlen(pid), 0) < 0)
		log_warn("%s: cannot record pid: %s", path, strerror(errno));
	return 0;
}

/*
 * ext4 without a journal keeps an inode freed in the last 5 minutes out of
 * reuse while its inode-table block is dirty, and scans past every such
 * inode on each create (fs/ext4/ialloc.c: recently_deleted()).  A cache
 * that evicts and fills thousands of small files pays that on every fill
 * (measured: 14-18 % of all CPU on a cold read of 128 KiB files right after
 * 8,000 deletions).  Nothing to change here; tell the operator.
 */
static void note_filesystem(const char *dir)
{
	char sys[64], link[PATH_MAX];
	struct statfs sf;
	struct stat st;
	struct dirent *de;
	bool journal = false;
	const char *name;
	size_t len;
	ssize_t n;
	DIR *d;

	if (statfs(dir, &sf) < 0 || sf.f_type != EXT4_SUPER_MAGIC || stat(dir, &st) < 0)
		return;
	snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u", major(st.st_dev), minor(st.st_dev));
	n = readlink(sys, link, sizeof(link) - 1);
	if (n <= 0)
		return;
	link[n] = '\0';
	name = strrchr(link, '/');
	name = name ? name + 1 : link;
	len = strlen(name);
	d = opendir("/proc/fs/jbd2");	/* one "DEV-INODE" entry per journal in use */
	if (!d)
		return;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, name, len) && de->d_name[len] == '-')
			journal = true;
	closedir(d);
	if (!journal)
		log_notice("cache %s: ext4 on %s has no journal; creating cache files gets slow "
			   "after many evictions (ext4 skips recently freed inodes); a cache "
			   "filesystem made with mkfs.ext4's defaults or XFS avoids it", dir, name);
}

int cache_create(const struct cache_opts *opts, struct cache **out,
		 char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct cache *c;
	uint64_t t0 = now_ns();
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->opts = *opts;
	c->lock_fd = c->journal_fd = c->data_dfd = -1;
	c->dir = strdup(opts->dir);
	snprintf(path, sizeof(path), "%s/data", opts->dir);
	c->data_dir = strdup(path);
	if (!c->dir || !c->data_dir || cache_table_init(c)) {
		ret = -ENOMEM;
		goto out_free;
	}
	c->opts.dir = c->dir;
	list_init(&c->lru);
	c->quota_gen = 1;
	list_init(&c->fds);
	atomic_init(&c->direct_ok, true);
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->bp_lock, NULL);
	pthread_mutex_init(&c->tenant_lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	list_init(&c->waiters);

	umask(umask(0077) | 0077);
	/*
	 * Another user's directory (or one she may write, or reaches through
	 * her link) would let her replace what the cache serves: refused,
	 * never chmodded and used (issue 27, src/safepath.h).
	 */
	{
		char why[PATH_MAX + 256];

		ret = safepath_mkdir(c->dir, 0700, why, sizeof(why));
		if (ret) {
			snprintf(err, errlen, "cache_dir %s: %s", c->dir, why);
			goto out_free;
		}
	}
	/* the same for what is in it: left from a time it was open to others? */
	for (int i = 0; i < 2; i++) {
		char sub[PATH_MAX], why[PATH_MAX + 256];

		snprintf(sub, sizeof(sub), "%s/%s", c->dir, i ? "data" : "index");
		ret = safepath_mkdir(sub, 0700, why, sizeof(why));
		if (ret) {
			snprintf(err, errlen, "cache_dir %s: %s", c->dir, why);
			goto out_free;
		}
	}
	/* whatever umask created it with, the cache is private */
	if (chmod(c->dir, 0700) < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", c->dir, strerror(errno));
		goto out_free;
	}
	ret = take_lock(c, err, errlen);
	if (ret)
		goto out_unlock;	/* the lock file may be open, not locked */
	ret = cache_layout_check(c->dir, err, errlen);
	if (ret)
		goto out_unlock;
	note_filesystem(c->dir);
	ret = cache_tenants_load(c);
	if (ret) {
		snprintf(err, errlen, "cache tenants in %s: %s", c->dir, strerror(-ret));
		goto out_unlock;
	}
	ret = cache_journal_load(c);
	if (ret) {
		snprintf(err, errlen, "cache index in %s: %s", c->dir, strerror(-ret));
		goto out_unlock;
	}
	c->st.loaded_chunks = c->st.chunks;
	if (c->journal_recs > 2 * c->st.chunks + 1024) {
		ret = cache_journal_compact(c);
		if (ret)
			log_warn("cache: compacting the journal failed: %s", strerror(-ret));
	}
	ret = cache_journal_open(c);
	if (ret) {
		snprintf(err, errlen, "cache journal in %s: %s", c->dir, strerror(-ret));
		goto out_unlock;
	}
	/* for the fills that create their cache files through io_uring (lazy claims) */
	c->data_dfd = open(c->data_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	c->st.load_ms = (now_ns() - t0) / 1000000;
	cache_effective_limit(c, true);
	log_info("cache %s: %" PRIu64 " chunks in %" PRIu64 " files (%" PRIu64
		 " bytes) loaded in %" PRIu64 " ms", c->dir, c->st.chunks,
		 (uint64_t)c->files.n, c->st.used_bytes, c->st.load_ms);
	*out = c;
	return 0;

out_unlock:
	close(c->lock_fd);
out_free:
	cache_tenants_release(c);
	cache_table_release(c);
	free(c->data_dir);
	free(c->dir);
	free(c);
	return ret;
}

void cache_destroy(struct cache *c)
{
	int ret;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	ret = cache_journal_compact(c);
	if (ret)
		log_warn("cache: compacting the journal failed: %s", strerror(-ret));
	pthread_mutex_unlock(&c->lock);
	if (c->journal_fd >= 0)
		close(c->journal_fd);
	cache_table_release(c);
	for (size_t i = 0; i < c->nowners; i++)
		free(c->owners[i]);
	free(c->owners);
	cache_tenants_release(c);
	for (int i = 0; i < BYPASS_SLOTS; i++)
		free(c->bp[i].buf);
	close(c->lock_fd);
	if (c->data_dfd >= 0)
		close(c->data_dfd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c->data_dir);
	free(c->dir);
	free(c);
}
