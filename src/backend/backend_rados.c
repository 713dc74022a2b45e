/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_rados: datasets stored in a Ceph pool ("rados://").
 *
 *   rados://POOL/NAME              latest published version of NAME
 *   rados://POOL/NAME@V            version V
 *   rados://POOL/NAMESPACE?plain   plain mode: the objects of a namespace as
 *   rados://POOL/?plain            files (the default namespace)
 *
 * Options after '?', joined by '&', override the [stagefs] settings:
 * conf=FILE, id=CLIENT, keyring=FILE, timeout=DURATION, ns=NAMESPACE
 * (published datasets in a namespace), chunk_size=SIZE (plain mode); the
 * grammar is sfs_rados_uri_parse()'s (rados.h), the same for publish and gc.
 *
 * Published datasets (docs/publish.md): the manifest is copied once per
 * version into CACHE_DIR/manifests/ and mapped from there
 * (dataset_open_local): a small one whole at the first mount, a larger one
 * part by part as the mount first touches each (src/manifest/manifest_lazy.h:
 * ranged reads of the manifest objects, so a mount answers after reading
 * its header and part table, whatever its size), and with manifest_fill
 * the rest in the background; a remount reuses every part already there.
 * Chunk k of a file is the object sfs.chunk.<id> named by the manifest.
 * Every chunk read is verified: XXH3-128 of the bytes must equal the id,
 * else -EIO and a log line naming the object; the bad bytes are never
 * reported as data.
 *
 * Plain mode: the namespace is listed into a manifest at create()
 * (backend_rados_plain.c).  A chunk read is one read op that also stats
 * the object: if its size or mtime no longer matches the listing the read
 * fails with -EIO instead of mixing old and new bytes.
 *
 * Every librados call is bounded by the timeouts set at connect (see
 * rados.h), so a dead OSD yields -EIO after rados_timeout, never a hang.
 * And a reader waits that long once, not once per attempt: an object whose
 * read just timed out fails at once for RB_TIMEOUT_HOLD_MS, since the
 * kernel reads a page again after its readahead failed, and each such
 * retry would otherwise wait the whole timeout again (a reader saw EIO
 * after 10 s with rados_timeout=5s).
 *
 * Threads: any FUSE thread may call in; the manifest is immutable and needs
 * no lock.  Asynchronous reads (aio_start/aio_finish): the librados
 * completion callback only calls the caller's done function, which hands
 * the read over to its owner (STYLE 8); the owner's thread then checks the
 * hash in aio_finish and passes the verified id on, so the bytes are hashed
 * once.
 *
 * Peer groups (src/peer/peer.h): when the daemon gave the backend its peer
 * group, an asynchronous read of a published chunk first asks the chunk's
 * owner (peer_fetch_start), unless this node owns it.  The peer client
 * checks the bytes against the chunk id before it reports them; on any
 * failure its callback starts the RADOS read itself (a librados call that
 * does not block), so the fill goes on as if the peer had not been asked,
 * having waited at most peer_timeout.  Plain mode is never shared: its
 * objects are named, not content-addressed, and could not be checked.
 */
#include "backend_rados_i.h"

#include "config.h"
#include "log.h"
#include "manifest/manifest.h"
#include "manifest/manifest_lazy.h"
#include "peer/peer.h"
#include "rados.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define RB_TIMEOUT_HOLD_MS	1000	/* how long an object that timed out fails at once */
/* manifests up to this size are copied whole at the first mount */
#define RB_WHOLE_MAX		(4u * 1024 * 1024)

/*
 * A failed chunk read is logged from a reader's request: any user can
 * repeat it as fast as they read (issue 27).  10 lines per 10 s, the next
 * one saying how many were suppressed.
 */
static struct log_ratelimit rl_read = LOG_RATELIMIT_INIT(10000, 10);

/* One chunk read in flight; its object name is allocated alongside. */
struct rread {
	struct rados_backend *rb;
	rados_completion_t c;
	rados_read_op_t op;		/* plain mode */
	void *buf;
	size_t len;
	struct sfs_id id;		/* expected XXH3-128 (published datasets) */
	uint64_t off;			/* where in the object */
	struct sfs_id key;		/* whose owner a peer group asks: id, or the pack's */
	bool packed;			/* one packed file's bytes, in its pack */
	bool pack;			/* a range of a pack: checked by the caller */
	/* plain mode: the listing's size and mtime, and the op's outputs */
	uint64_t want_size;
	time_t want_mtime;
	uint64_t got_size;
	time_t got_mtime;
	size_t bytes_read;
	int stat_rval, read_rval;
	uint32_t idx;
	void (*done)(void *arg);	/* async: the caller's hand-over */
	void *arg;
	rados_callback_t cb;		/* the completion to install (async) */
	bool from_peer;			/* a peer sent the chunk, verified */
	int start_err;			/* the fallback read could not start */
	char oid[];
};

static struct rados_backend *RB(struct backend *be)
{
	return (struct rados_backend *)be;
}

/* ---- published datasets ---- */

/*
 * Remove the copies of this dataset's older versions (a mount still using
 * one keeps its mapping), and downloads left by a daemon that died more
 * than an hour ago.
 */
static void local_prune(const char *dir, const char *key, uint64_t version)
{
	size_t klen = strlen(key);
	struct dirent *de;
	struct stat st;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		uint64_t v;
		char *end;

		if (!strncmp(de->d_name, ".fetch.", 7)) {
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    (uint64_t)st.st_mtime + 3600 < wall_s())
				unlinkat(dirfd(d), de->d_name, 0);
			continue;
		}
		if (strncmp(de->d_name, key, klen) || de->d_name[klen] != '.')
			continue;
		errno = 0;
		v = strtoull(de->d_name + klen + 1, &end, 10);
		if (errno || *end != '.' || v >= version)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			log_info("rados: removed the cached manifest %s/%s (version %" PRIu64 " is newer)",
				 dir, de->d_name, version);
	}
	closedir(d);
}

/*
 * Download the whole manifest rb->ml into @path: under a temporary name in
 * the same directory, flushed, then renamed.  Returns 0 or -errno (@err).
 */
static int local_fetch(struct rados_backend *rb, const char *dir,
		       const char *path, char *err, size_t errlen)
{
	char tmp[PATH_MAX], msg[256];
	uint64_t t0 = now_ms();
	int fd, rc;

	if (snprintf(tmp, sizeof(tmp), "%s/.fetch.XXXXXX", dir) >= (int)sizeof(tmp))
		return errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		return errf(err, errlen, rc, "cannot create a file in %s: %s", dir,
			    strerror(-rc));
	}
	rc = sfs_rados_manifest_fetch(rb->io, &rb->ml, fd, msg, sizeof(msg));
	if (rc)
		errf(err, errlen, rc, "%s (pool '%s')", msg, rb->pool);
	if (!rc && fsync(fd) < 0) {
		rc = -errno;
		errf(err, errlen, rc, "%s: fsync: %s", tmp, strerror(-rc));
	}
	close(fd);
	if (!rc && rename(tmp, path) < 0) {
		rc = -errno;
		errf(err, errlen, rc, "cannot rename %s to %s: %s", tmp, path, strerror(-rc));
	}
	if (rc) {
		unlink(tmp);
		return rc;
	}
	log_info("rados: %s@%" PRIu64 ": manifest copied to %s (%" PRIu64 " bytes in %" PRIu64 " ms)",
		 rb->name, rb->ml.version, path, rb->ml.size, now_ms() - t0);
	return 0;
}

/* manifest_remote.read: ranged reads of the manifest's objects */
static int lazy_read(void *arg, void *buf, size_t len, uint64_t off,
		     char *err, size_t errlen)
{
	struct rados_backend *rb = arg;
	int rc = sfs_rados_manifest_pread(rb->io, &rb->ml, buf, len, off, err, errlen);

	return rc == -ETIMEDOUT ? -EIO : rc;
}

/*
 * Open the copy at @path filled on demand (manifest_lazy.h).  Returns 0,
 * -ENOTSUP (a format 1 manifest: copy it whole), -EAGAIN (the cache
 * directory cannot hold it) or another -errno with @err.
 */
static int local_lazy(struct rados_backend *rb, const char *path,
		      const char *label, bool fill, char *err, size_t errlen)
{
	struct manifest_remote r = { .read = lazy_read, .arg = rb };
	uint64_t t0 = now_ms(), got;
	char msg[256];
	int rc;

	rc = manifest_lazy_open(path, rb->ml.size, &r, label, fill, &rb->be.m, &got,
				msg, sizeof(msg));
	if (rc == 0) {
		log_info("rados: %s@%" PRIu64 ": manifest mapped from %s, parts fetched when first touched (%" PRIu64 " of %" PRIu64 " bytes fetched to open it, %" PRIu64 " ms)",
			 rb->name, rb->ml.version, path, got, rb->ml.size, now_ms() - t0);
		return 0;
	}
	if (rc == -ENOTSUP)
		return rc;
	if (rc == -ENOENT || rc == -EIO || rc == -ETIMEDOUT || rc == -ENOMEM)
		return errf(err, errlen, rc == -ENOMEM ? rc : -EIO, "%s (pool '%s')", msg, rb->pool);
	if (rc == -EINVAL)
		return errf(err, errlen, -EIO, "%s@%" PRIu64 ": bad manifest: %s",
			    rb->name, rb->ml.version, msg);
	log_warn("rados: %s@%" PRIu64 ": cannot keep the manifest in the cache directory (%s): reading it into memory",
		 rb->name, rb->ml.version, msg);
	return -EAGAIN;
}

/*
 * Open the manifest of @version from its copy in the cache directory,
 * CACHE_DIR/manifests/KEY.V.STAMP, KEY naming the cluster (fsid), pool,
 * namespace and dataset, STAMP the head object's size and mtime (so a pool
 * recreated and published again gives a new copy).  The copy is mapped,
 * not read: mounts of one version share its page cache.  A manifest larger
 * than RB_WHOLE_MAX is copied part by part as the mount touches it (the
 * copy has a KEY.V.STAMP.parts beside it); a smaller one, or a format 1
 * one, whole at the first mount.  Returns 0, -EAGAIN (no usable cache
 * directory: read it into memory instead) or another -errno with @err.
 */
static int dataset_open_local(struct rados_backend *rb, const struct sfs_config *cfg,
			      const char *label, char *err, size_t errlen)
{
	char dir[PATH_MAX], path[PATH_MAX], mpath[PATH_MAX], key[17];
	char fsid[64] = "", msg[256];
	uint64_t version = rb->ml.version, h;
	XXH3_state_t st;
	int rc;

	if (!cfg || !cfg->cache_dir || !cfg->cache_dir[0])
		return -EAGAIN;
	if (rados_cluster_fsid(rb->cl, fsid, sizeof(fsid) - 1) < 0)
		fsid[0] = '\0';
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, fsid, strlen(fsid) + 1);
	XXH3_64bits_update(&st, rb->pool, strlen(rb->pool) + 1);
	XXH3_64bits_update(&st, rb->nspace, strlen(rb->nspace) + 1);
	XXH3_64bits_update(&st, rb->name, strlen(rb->name) + 1);
	snprintf(key, sizeof(key), "%016" PRIx64, XXH3_64bits_digest(&st));
	{
		uint64_t stamp[2] = { htole64(rb->ml.head_size), htole64((uint64_t)rb->ml.head_mtime) };

		h = XXH3_64bits(stamp, sizeof(stamp));
	}
	if (snprintf(dir, sizeof(dir), "%s/manifests", cfg->cache_dir) >= (int)sizeof(dir) - 64 ||
	    snprintf(path, sizeof(path), "%s/%s.%" PRIu64 ".%016" PRIx64, dir, key,
		     version, h) >= (int)sizeof(path) ||
	    manifest_lazy_marks_path(path, mpath, sizeof(mpath)))
		return -EAGAIN;

	/* a whole copy (no marks beside it) from an earlier mount */
	if (access(mpath, F_OK) < 0) {
		rc = manifest_open_file(path, &rb->be.m, msg, sizeof(msg));
		if (rc == 0) {
			log_info("rados: %s@%" PRIu64 ": manifest mapped from %s", rb->name,
				 version, path);
			return 0;
		}
		if (rc != -ENOENT) {
			log_warn("rados: %s@%" PRIu64 ": cached manifest %s is unusable (%s): downloading it again",
				 rb->name, version, path, msg);
			unlink(path);
		}
	}
	rc = mkdir_p(dir, 0700);
	if (rc) {
		log_warn("rados: %s@%" PRIu64 ": cannot create %s (%s): reading the manifest into memory",
			 rb->name, version, dir, strerror(-rc));
		return -EAGAIN;
	}
	rc = -ENOTSUP;
	if (rb->ml.size > RB_WHOLE_MAX)
		rc = local_lazy(rb, path, label, cfg->manifest_fill, err, errlen);
	if (rc != -ENOTSUP) {
		if (rc == 0)
			local_prune(dir, key, version);
		return rc;
	}
	rc = local_fetch(rb, dir, path, err, errlen);
	if (rc == -ENOENT || rc == -EIO || rc == -ETIMEDOUT || rc == -ENOMEM)
		return rc == -ETIMEDOUT ? -EIO : rc;
	if (rc) {
		log_warn("rados: %s@%" PRIu64 ": cannot keep the manifest in %s (%s): reading it into memory",
			 rb->name, version, dir, err);
		return -EAGAIN;
	}
	local_prune(dir, key, version);
	rc = manifest_open_file(path, &rb->be.m, msg, sizeof(msg));
	if (rc) {
		unlink(path);
		return errf(err, errlen, -EIO, "%s@%" PRIu64 ": bad manifest: %s",
			    rb->name, version, msg);
	}
	return 0;
}

static int dataset_open(struct rados_backend *rb, const struct sfs_config *cfg,
			uint64_t version, char *err, size_t errlen)
{
	char msg[256], label[256];
	void *buf;
	size_t len;
	int rc;

	if (!version) {
		rc = sfs_rados_latest(rb->io, rb->name, &version);
		if (rc == -ENOENT)
			return errf(err, errlen, rc,
				    "dataset '%s' not found in pool '%s'%s%s (no object sfs.dataset.%s)",
				    rb->name, rb->pool, rb->nspace[0] ? " namespace " : "",
				    rb->nspace, rb->name);
		if (rc < 0)
			return errf(err, errlen, rc == -ETIMEDOUT ? -EIO : rc,
				    "cannot read the version of dataset '%s': %s",
				    rb->name, strerror(-rc));
	}
	rc = sfs_rados_manifest_layout(rb->io, rb->name, version, &rb->ml, msg, sizeof(msg));
	if (rc)
		return errf(err, errlen, rc == -ETIMEDOUT ? -EIO : rc, "%s (pool '%s')",
			    msg, rb->pool);
	snprintf(label, sizeof(label), "rados://%s/%s%s%s@%" PRIu64, rb->pool,
		 rb->name, rb->nspace[0] ? "?ns=" : "", rb->nspace, version);
	rc = dataset_open_local(rb, cfg, label, err, errlen);
	if (rc == -EAGAIN) {
		rc = sfs_rados_manifest_read(rb->io, rb->name, version, &buf, &len,
					     msg, sizeof(msg));
		if (rc)
			return errf(err, errlen, rc == -ETIMEDOUT ? -EIO : rc,
				    "%s (pool '%s')", msg, rb->pool);
		rc = manifest_open(buf, len, &rb->be.m, msg, sizeof(msg));
		if (rc) {
			free(buf);
			return errf(err, errlen, -EIO, "%s@%" PRIu64 ": bad manifest: %s",
				    rb->name, version, msg);
		}
	}
	if (rc)
		return rc;
	manifest_set_name(rb->be.m, label);
	if (manifest_version(rb->be.m) != version)
		return errf(err, errlen, -EIO,
			    "%s@%" PRIu64 ": the manifest says it is version %" PRIu64,
			    rb->name, version, manifest_version(rb->be.m));
	if (manifest_format(rb->be.m) == 1)
		log_notice("%s: a format 1 manifest, verified whole at every mount; publish the dataset again for the paged format",
			   label);
	rb->version = version;
	if (!rb->plain)
		rb->be.peer_tag = XXH3_64bits(label, strlen(label)) | 1;	/* never 0 */
	return 0;
}

/* ---- reads ---- */

/* A read of @oid timed out: fail the next ones at once for a while. */
static void timeout_note(struct rados_backend *rb, const char *oid)
{
	uint64_t h = XXH3_64bits(oid, strlen(oid));

	pthread_mutex_lock(&rb->lock);
	rb->timed_out[rb->timed_out_next].oid_hash = h;
	rb->timed_out[rb->timed_out_next].until_ms = now_ms() + RB_TIMEOUT_HOLD_MS;
	rb->timed_out_next = (rb->timed_out_next + 1) % RB_TIMEOUT_SLOTS;
	pthread_mutex_unlock(&rb->lock);
}

/* Did a read of @oid time out less than RB_TIMEOUT_HOLD_MS ago? */
static bool timeout_held(struct rados_backend *rb, const char *oid)
{
	uint64_t h = XXH3_64bits(oid, strlen(oid)), now = now_ms();
	bool held = false;

	pthread_mutex_lock(&rb->lock);
	for (unsigned int i = 0; i < RB_TIMEOUT_SLOTS && !held; i++)
		held = rb->timed_out[i].oid_hash == h && rb->timed_out[i].until_ms > now;
	pthread_mutex_unlock(&rb->lock);
	return held;
}

/* Finish a read: the result for the caller (@len or -EIO). */
static int rread_result(struct rread *rr, int rc)
{
	struct rados_backend *rb = rr->rb;
	struct sfs_id got;

	if (rc < 0) {
		log_limited(&rl_read, LOG_ERR, "rados: reading %s from pool '%s' failed: %s",
			    rr->oid, rb->pool, strerror(-rc));
		if (rc == -ETIMEDOUT) {
			timeout_note(rb, rr->oid);
			osdmap_refresh_ask(rb->maps);	/* osdmap_refresh.h */
		}
		return -EIO;
	}
	if (rb->plain) {
		if (rr->stat_rval < 0 || rr->read_rval < 0) {
			log_limited(&rl_read, LOG_ERR, "rados: reading %s from pool '%s' failed: %s",
				    rr->oid, rb->pool, strerror(-(rr->stat_rval < 0 ? rr->stat_rval
									 : rr->read_rval)));
			return -EIO;
		}
		if (rr->got_size != rr->want_size || rr->got_mtime != rr->want_mtime) {
			log_limited(&rl_read, LOG_ERR, "rados: object %s in pool '%s' changed since it was listed (size %" PRIu64 " -> %" PRIu64 "); remount to see the new version",
				    rr->oid, rb->pool, rr->want_size, rr->got_size);
			return -EIO;
		}
		if (rr->bytes_read != rr->len) {
			log_limited(&rl_read, LOG_ERR, "rados: short read from %s: %zu of %zu bytes",
				    rr->oid, rr->bytes_read, rr->len);
			return -EIO;
		}
		return (int)rr->len;
	}
	if ((size_t)rc != rr->len) {
		log_limited(&rl_read, LOG_ERR, "rados: %s object %s in pool '%s' holds %d bytes at %" PRIu64 ", expected %zu",
			    rr->pack || rr->packed ? "pack" : "chunk", rr->oid, rb->pool, rc,
			    rr->off, rr->len);
		return -EIO;
	}
	if (rr->pack)
		return (int)rr->len;
	sfs_id_of(rr->buf, rr->len, &got);
	if (!sfs_id_eq(&got, &rr->id)) {
		char hex[SFS_ID_HEX_LEN + 1];

		sfs_id_hex(&got, hex);
		if (rr->packed)
			log_limited(&rl_read, LOG_ERR, "rados: pack object %s in pool '%s' is corrupt (%zu bytes at %" PRIu64 " hash to %s)",
				    rr->oid, rb->pool, rr->len, rr->off, hex);
		else
			log_limited(&rl_read, LOG_ERR, "rados: chunk object %s in pool '%s' is corrupt (its data hashes to %s)",
				    rr->oid, rb->pool, hex);
		return -EIO;
	}
	return (int)rr->len;
}

static void rread_free(struct rread *rr)
{
	if (rr->op)
		rados_release_read_op(rr->op);
	if (rr->c)
		rados_aio_release(rr->c);
	free(rr);
}

/* librados thread: hand the read back to its owner, nothing else. */
static void rread_complete_cb(rados_completion_t c, void *arg)
{
	struct rread *rr = arg;

	rr->done(rr->arg);	/* rr may be finished and freed from here on */
}

/* A read of @len bytes at @off of object @oid into @buf; NULL on ENOMEM. */
static struct rread *rread_new(struct rados_backend *rb, const char *oid, void *buf,
			       size_t len, uint64_t off, rados_callback_t cb,
			       void (*done)(void *arg), void *arg)
{
	size_t oidlen = strlen(oid);
	struct rread *rr = calloc(1, sizeof(*rr) + oidlen + 1);

	if (!rr)
		return NULL;
	memcpy(rr->oid, oid, oidlen + 1);
	rr->rb = rb;
	rr->buf = buf;
	rr->len = len;
	rr->off = off;
	rr->cb = cb;
	rr->done = done;
	rr->arg = arg;
	return rr;
}

/*
 * Prepare the read of chunk @idx of @file (nothing started).  @cb NULL:
 * synchronous (the caller waits on rr->c); else @cb runs on completion and
 * calls @done(@arg).  Returns 0 with *@out set, or -errno.
 */
static int rread_prepare(struct rados_backend *rb, const struct sfs_attr *file,
			 uint32_t idx, void *buf, size_t len, rados_callback_t cb,
			 void (*done)(void *arg), void *arg, struct rread **out)
{
	struct sfs_attr a;
	struct rread *rr;
	char path[PATH_MAX];
	struct sfs_id id = { 0, 0 }, key = { 0, 0 };
	struct manifest_pack pk;
	uint32_t pack = 0, poff = 0;
	bool packed = false;
	int rc;

	rc = manifest_getattr(rb->be.m, file->ino, &a);
	if (rc)
		return rc;
	if (!S_ISREG(a.mode))
		return -EINVAL;
	if (len == 0 || len != backend_chunk_len(a.size, rb->be.chunk_size, idx))
		return -EINVAL;
	if (rb->plain) {
		rc = manifest_path(rb->be.m, file->ino, path, sizeof(path));
		if (rc < 0)
			return rc == -ERANGE ? -ENAMETOOLONG : rc;
	} else {
		rc = manifest_chunk(rb->be.m, file->ino, idx, &id);
		if (rc) {
			log_limited(&rl_read, LOG_ERR,
				    "rados: %s@%" PRIu64 ": no chunk id for chunk %u of inode %" PRIu64,
				    rb->name, rb->version, idx, file->ino);
			return -EIO;
		}
		rc = manifest_file_pack(rb->be.m, file->ino, &pack, &poff, &pk);
		if (rc == 0) {
			sfs_rados_pack_oid(&pk.id, path);
			packed = true;
			key = pk.id;
		} else if (rc == -ENODATA) {
			sfs_rados_chunk_oid(&id, path);
			key = id;
		} else {
			return -EIO;
		}
	}

	rr = rread_new(rb, path, buf, len, poff, cb, done, arg);
	if (!rr)
		return -ENOMEM;
	rr->id = id;
	rr->packed = packed;
	rr->key = key;
	rr->want_size = a.size;
	rr->want_mtime = a.mtime.tv_sec;
	rr->idx = idx;
	*out = rr;
	return 0;
}

/* Start the RADOS read @rr was prepared for.  Returns 0 or -errno. */
static int rread_submit(struct rread *rr)
{
	struct rados_backend *rb = rr->rb;
	int rc;

	if (timeout_held(rb, rr->oid)) {
		log_debug("rados: %s timed out just now: failing at once", rr->oid);
		return -EIO;
	}
	rc = rados_aio_create_completion2(rr->cb ? rr : NULL, rr->cb, &rr->c);
	if (rc < 0)
		return rc;
	if (rb->plain) {
		rr->op = rados_create_read_op();
		if (!rr->op)
			return -ENOMEM;
		/* stat and read in one op: both see the same object version */
		rados_read_op_stat(rr->op, &rr->got_size, &rr->got_mtime, &rr->stat_rval);
		rados_read_op_read(rr->op, (uint64_t)rr->idx * rb->be.chunk_size, rr->len,
				   rr->buf, &rr->bytes_read, &rr->read_rval);
		rc = rados_aio_read_op_operate(rr->op, rb->io, rr->c, rr->oid, 0);
	} else {
		rc = rados_aio_read(rb->io, rr->oid, rr->c, rr->buf, rr->len, rr->off);
	}
	if (rc < 0) {
		log_limited(&rl_read, LOG_ERR, "rados: cannot start reading %s: %s", rr->oid,
			    strerror(-rc));
		return -EIO;
	}
	return 0;
}

/*
 * The peer client's thread: the owner answered (@res: the chunk, verified)
 * or not (then read it from RADOS now; the completion hands it over).
 */
static void rread_peer_done(void *arg, int res)
{
	struct rread *rr = arg;

	if (res == (int)rr->len) {
		rr->from_peer = true;
		rr->done(rr->arg);	/* rr may be finished and freed from here on */
		return;
	}
	res = rread_submit(rr);
	if (res) {
		rr->start_err = res;
		rr->done(rr->arg);
	}
}

/* Start prepared synchronous read @rr, wait for it, free it: its result. */
static int rread_wait(struct rread *rr)
{
	int rc = rread_submit(rr);

	if (rc) {
		rread_free(rr);
		return rc;
	}
	rados_aio_wait_for_complete_and_cb(rr->c);
	rc = rread_result(rr, rados_aio_get_return_value(rr->c));
	rread_free(rr);
	return rc;
}

static int rb_read_chunk(struct backend *be, const struct sfs_attr *file,
			 uint32_t idx, void *buf, size_t len)
{
	struct rread *rr;
	int rc = rread_prepare(RB(be), file, idx, buf, len, NULL, NULL, NULL, &rr);

	return rc ? rc : rread_wait(rr);
}

/* An async read begins: counted, so destroy() waits for it; -ESHUTDOWN if stopping. */
static int inflight_begin(struct rados_backend *rb)
{
	int rc = 0;

	pthread_mutex_lock(&rb->lock);
	if (rb->stopping)
		rc = -ESHUTDOWN;
	else
		rb->inflight++;
	pthread_mutex_unlock(&rb->lock);
	return rc;
}

static void inflight_end(struct rados_backend *rb)
{
	pthread_mutex_lock(&rb->lock);
	if (--rb->inflight == 0)
		pthread_cond_broadcast(&rb->idle);
	pthread_mutex_unlock(&rb->lock);
}

static int rb_aio_start(struct backend *be, const struct sfs_attr *file,
			uint32_t idx, void *buf, size_t len,
			void (*done)(void *arg), void *arg,
			struct backend_aio **out)
{
	struct rados_backend *rb = RB(be);
	struct rread *rr;
	int rc;

	/* counted first, so destroy() waits for a completion already racing us */
	rc = inflight_begin(rb);
	if (rc)
		return rc;
	rc = rread_prepare(rb, file, idx, buf, len, rread_complete_cb, done, arg, &rr);
	if (!rc && rb->be.peers && !rb->plain &&
	    !peer_fetch_start(rb->be.peers, &rr->key, &rr->id,
			      &(struct peer_loc){ be->peer_tag, file->ino, idx },
			      buf, len, rread_peer_done, rr)) {
		*out = (struct backend_aio *)rr;	/* done() may have run already */
		return 0;
	}
	if (!rc) {
		rc = rread_submit(rr);
		if (rc)
			rread_free(rr);
	}
	if (rc) {
		inflight_end(rb);
		return rc;
	}
	*out = (struct backend_aio *)rr;	/* done() may have run already */
	return 0;
}

/* Start a read of bytes [@off, @off + @len) of pack @pack: no peer, no check. */
/*
 * Prepare the read of bytes [@off, @off + @len) of pack @pack (nothing
 * started); @cb as rread_prepare()'s.  0 with *@out set, or -errno.
 */
static int pack_rread_prepare(struct rados_backend *rb, uint32_t pack, uint64_t off,
			      size_t len, void *buf, rados_callback_t cb,
			      void (*done)(void *arg), void *arg, struct rread **out)
{
	struct manifest_pack pk;
	char oid[SFS_RADOS_OID_MAX];

	if (rb->plain)
		return -EINVAL;
	if (manifest_pack(rb->be.m, pack, &pk))
		return -EIO;
	if (len == 0 || off > pk.size || len > pk.size - off)
		return -EINVAL;
	sfs_rados_pack_oid(&pk.id, oid);
	*out = rread_new(rb, oid, buf, len, off, cb, done, arg);
	if (!*out)
		return -ENOMEM;
	(*out)->pack = true;
	return 0;
}

static int rb_read_pack(struct backend *be, uint32_t pack, uint64_t off, size_t len,
			void *buf)
{
	struct rread *rr;
	int rc = pack_rread_prepare(RB(be), pack, off, len, buf, NULL, NULL, NULL, &rr);

	return rc ? rc : rread_wait(rr);
}

static int rb_pack_aio_start(struct backend *be, uint32_t pack, uint64_t off,
			     size_t len, void *buf, void (*done)(void *arg),
			     void *arg, struct backend_aio **out)
{
	struct rados_backend *rb = RB(be);
	struct rread *rr;
	int rc;

	rc = pack_rread_prepare(rb, pack, off, len, buf, rread_complete_cb, done, arg, &rr);
	if (rc)
		return rc;
	rc = inflight_begin(rb);
	if (!rc) {
		rc = rread_submit(rr);
		if (rc)
			inflight_end(rb);
	}
	if (rc) {
		rread_free(rr);
		return rc;
	}
	*out = (struct backend_aio *)rr;	/* done() may have run already */
	return 0;
}

static int rb_aio_finish(struct backend *be, struct backend_aio *h,
			 struct sfs_id *hash, bool *hashed, bool *from_peer)
{
	struct rados_backend *rb = RB(be);
	struct rread *rr = (struct rread *)h;
	int res;

	*from_peer = rr->from_peer;
	if (rr->from_peer) {
		res = (int)rr->len;	/* the peer client checked it hashes to rr->id */
	} else if (rr->start_err) {
		res = -EIO;
	} else {
		/* done() ran, but the callback may not have returned: let it */
		rados_aio_wait_for_complete_and_cb(rr->c);
		res = rread_result(rr, rados_aio_get_return_value(rr->c));
	}
	*hashed = res >= 0 && !rb->plain && !rr->pack;
	if (*hashed)
		*hash = rr->id;		/* rread_result checked the bytes hash to it */
	rread_free(rr);
	inflight_end(rb);
	return res;
}

static bool rb_peer_first(struct backend *be, const struct sfs_attr *file, uint32_t idx)
{
	struct rados_backend *rb = RB(be);
	struct manifest_pack pk;
	struct sfs_id id;
	uint32_t pack, off;

	if (!be->peers || rb->plain || manifest_chunk(be->m, file->ino, idx, &id))
		return false;
	if (!manifest_file_pack(be->m, file->ino, &pack, &off, &pk))
		id = pk.id;	/* a packed file is asked of its pack's owner */
	return !peer_owns(be->peers, &id);
}

/* Does another member of the peer group own pack @pack (and read it)? */
static bool rb_pack_remote(struct backend *be, uint32_t pack)
{
	struct manifest_pack pk;

	if (!be->peers || RB(be)->plain || manifest_pack(be->m, pack, &pk))
		return false;
	return !peer_owns(be->peers, &pk.id);
}

/* ---- metadata: backend_manifest_* (src/backend/backend.c) read be.m ---- */

/* ---- lifetime ---- */

static void rb_free(struct rados_backend *rb)
{
	manifest_close(rb->be.m);
	osdmap_refresh_stop(rb->maps);
	if (rb->io)
		rados_ioctx_destroy(rb->io);
	if (rb->cl)
		rados_shutdown(rb->cl);
	pthread_cond_destroy(&rb->idle);
	pthread_mutex_destroy(&rb->lock);
	free(rb->pool);
	free(rb->nspace);
	free(rb->name);
	free(rb->be.uri);
	free(rb);
}

static void rb_destroy(struct backend *be)
{
	struct rados_backend *rb = RB(be);

	pthread_mutex_lock(&rb->lock);
	rb->stopping = true;
	/* every started read completes within the op timeout; its owner finishes it */
	while (rb->inflight)
		pthread_cond_wait(&rb->idle, &rb->lock);
	pthread_mutex_unlock(&rb->lock);
	rb_free(rb);
}

static int rb_create(const char *uri, const struct sfs_config *cfg,
		     struct backend **out, char *err, size_t errlen)
{
	struct rados_backend *rb;
	struct sfs_rados_opts o;
	struct sfs_rados_uri u;
	uint32_t plain_chunk;
	int rc;

	*out = NULL;
	rc = sfs_rados_uri_parse(uri, &u, err, errlen);
	if (rc)
		goto out_uri;
	if (!u.path) {
		rc = errf(err, errlen, -EINVAL,
			  "%s: expected rados://POOL/NAME[@VERSION] or rados://POOL/NAMESPACE?plain", uri);
		goto out_uri;
	}
	if (!u.plain && !*u.name) {
		rc = errf(err, errlen, -EINVAL, "%s: no dataset name after the pool", uri);
		goto out_uri;
	}
	sfs_rados_opts_from_config(&o, cfg);
	sfs_rados_uri_opts(&u, &o);
	plain_chunk = (uint32_t)(u.chunk_size ? u.chunk_size : cfg->chunk_size);

	rb = calloc(1, sizeof(*rb));
	if (!rb) {
		rc = errf(err, errlen, -ENOMEM, "out of memory");
		goto out_uri;
	}
	pthread_mutex_init(&rb->lock, NULL);
	pthread_cond_init(&rb->idle, NULL);
	rb->be.ops = &backend_rados_ops;
	rb->plain = u.plain;
	rb->be.uri = strdup(uri);
	rb->pool = strdup(u.pool);
	rb->nspace = strdup(u.ns ? u.ns : "");
	rb->name = u.name ? strdup(u.name) : NULL;
	if (!rb->be.uri || !rb->pool || !rb->nspace || (u.name && !rb->name)) {
		rc = errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}

	rc = sfs_rados_connect(&o, &rb->cl, err, errlen);
	if (rc)
		goto out_free;
	rc = osdmap_refresh_start(rb->cl, rb->be.uri, &rb->maps);
	if (rc) {
		errf(err, errlen, rc, "cannot start a thread: %s", strerror(-rc));
		goto out_free;
	}
	rc = sfs_rados_ioctx(rb->cl, rb->pool, rb->nspace, &rb->io, err, errlen);
	if (rc)
		goto out_free;
	if (rb->plain)
		rc = rb_plain_build(rb, plain_chunk, err, errlen);
	else
		rc = dataset_open(rb, cfg, u.version, err, errlen);
	if (rc)
		goto out_free;
	rb->be.chunk_size = manifest_chunk_size(rb->be.m);
	if (rb->plain)
		log_notice("%s: %" PRIu64 " entries (plain objects), chunk size %u",
			   uri, manifest_nentries(rb->be.m), rb->be.chunk_size);
	else
		log_notice("%s: %s@%" PRIu64 ", %" PRIu64 " entries, chunk size %u",
			   uri, rb->name, rb->version, manifest_nentries(rb->be.m),
			   rb->be.chunk_size);
	sfs_rados_uri_release(&u);
	*out = &rb->be;
	return 0;

out_free:
	rb_free(rb);
out_uri:
	sfs_rados_uri_release(&u);
	return rc;
}

const struct backend_ops backend_rados_ops = {
	.scheme = "rados",
	.create = rb_create,
	.destroy = rb_destroy,
	.getattr = backend_manifest_getattr,
	.lookup = backend_manifest_lookup,
	.readdir = backend_manifest_readdir,
	.readlink = backend_manifest_readlink,
	.read_chunk = rb_read_chunk,
	.aio_start = rb_aio_start,
	.aio_finish = rb_aio_finish,
	.pack_aio_start = rb_pack_aio_start,
	.read_pack = rb_read_pack,
	.pack_remote = rb_pack_remote,
	.peer_first = rb_peer_first,
	.statfs = backend_manifest_statfs,
};
