/*
 * backend_dir: a local, NFS or Lustre directory as an immutable dataset.
 *
 * At mount the tree is scanned once (metadata only: lstat, readlink) into a
 * manifest (manifest.h), the same indexed format a published RADOS dataset
 * uses, so all metadata operations are served by the same code.
 * A copy of that manifest is saved as CACHE_DIR/snapshots/<id>.manifest and
 * served from there, mapped (the daemon holds none of it); if
 * the source cannot be opened at the next mount (NFS server gone, directory
 * removed or unreadable) the snapshot is used instead and every cached byte
 * is still served.
 *
 * A file's content id is XXH3-128 of its path, size, mtime, ctime, device
 * and inode: any change to the file gives it a new cache file.  Names of
 * one file (st_nlink > 1, same device and inode) become hard links in the
 * manifest: one inode number, the source's nlink, one cache file.  Chunk reads
 * open the file by path and check that size, mtime and ctime still match the
 * snapshot; a file changed after the mount yields EIO (remount to see the
 * new version) instead of mixing two versions in the cache.
 */
#include "backend.h"

#include "config.h"
#include "inomap.h"
#include "log.h"
#include "manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

struct backend_dir {
	struct backend be;
	char *root;		/* absolute source path */
	bool offline;		/* serving a saved snapshot */
};

static struct backend_dir *to_dir(struct backend *be)
{
	return (struct backend_dir *)be;
}

static void content_id(const char *rel, const struct stat *st, struct sfs_id *out)
{
	XXH3_state_t s;
	XXH128_hash_t h;
	uint64_t meta[8] = {
		(uint64_t)st->st_size,
		(uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec,
		(uint64_t)st->st_ctim.tv_sec, (uint64_t)st->st_ctim.tv_nsec,
		(uint64_t)st->st_dev, (uint64_t)st->st_ino, 0x646972 /* "dir" */
	};

	XXH3_128bits_reset(&s);
	XXH3_128bits_update(&s, rel, strlen(rel));
	XXH3_128bits_update(&s, meta, sizeof(meta));
	h = XXH3_128bits_digest(&s);
	out->hi = h.high64;
	out->lo = h.low64;
}

static void attr_from_stat(const struct stat *st, struct sfs_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->mode = st->st_mode;
	a->nlink = (uint32_t)st->st_nlink;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
	a->size = S_ISREG(st->st_mode) || S_ISLNK(st->st_mode) ? (uint64_t)st->st_size : 0;
	a->atime = st->st_atim;
	a->mtime = st->st_mtim;
	a->ctime = st->st_ctim;
}

struct scan {
	struct manifest_builder *b;
	struct inomap links;	/* files with st_nlink > 1: their first name */
	uint64_t entries, bytes, skipped;
	int dev_err;
};

/* Add everything below directory fd @dfd (path @rel) to the builder. */
static int scan_dir(struct scan *sc, int dfd, const char *rel, int depth)
{
	DIR *d;
	struct dirent *de;
	int ret = 0;

	if (depth > 512)
		return -ELOOP;
	d = fdopendir(dfd);
	if (!d) {
		ret = -errno;
		close(dfd);
		return ret;
	}
	while ((errno = 0, de = readdir(d))) {
		char path[PATH_MAX];
		struct stat st;
		struct sfs_attr a;
		char target[PATH_MAX];
		const char *tgt = NULL;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "",
			     de->d_name) >= (int)sizeof(path)) {
			ret = -ENAMETOOLONG;
			break;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			ret = -errno;
			log_err("scan %s: %s", path, strerror(errno));
			break;
		}
		attr_from_stat(&st, &a);
		if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
			const char *first = inomap_first(&sc->links, st.st_dev,
							 st.st_ino, path, &ret);

			if (ret)
				break;
			if (first) {
				ret = manifest_builder_link(sc->b, path, first);
				if (ret) {
					log_err("scan %s: %s", path, strerror(-ret));
					break;
				}
				sc->entries++;
				continue;
			}
		}
		if (S_ISREG(st.st_mode)) {
			content_id(path, &st, &a.content);
			sc->bytes += (uint64_t)st.st_size;
		} else if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlinkat(dirfd(d), de->d_name, target,
					       sizeof(target) - 1);

			if (n < 0) {
				ret = -errno;
				break;
			}
			target[n] = '\0';
			tgt = target;
		} else if (!S_ISDIR(st.st_mode)) {
			log_warn("scan %s: not a file, directory or symlink: skipped", path);
			sc->skipped++;
			continue;
		}
		ret = manifest_builder_add(sc->b, path, &a, tgt, NULL, 0);
		if (ret) {
			log_err("scan %s: %s", path, strerror(-ret));
			break;
		}
		sc->entries++;
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub < 0) {
				ret = -errno;
				log_err("scan %s: %s", path, strerror(errno));
				break;
			}
			ret = scan_dir(sc, sub, path, depth + 1);
			if (ret)
				break;
		}
	}
	if (!ret && errno)
		ret = -errno;
	closedir(d);
	return ret;
}

static void snapshot_path(const struct sfs_config *cfg, const char *root,
			  char *buf, size_t len)
{
	struct sfs_id id;
	char hex[SFS_ID_HEX_LEN + 1];

	sfs_id_of(root, strlen(root), &id);
	sfs_id_hex(&id, hex);
	snprintf(buf, len, "%s/snapshots/%s.manifest", cfg->cache_dir, hex);
}

static int snapshot_save(const struct sfs_config *cfg, const char *root,
			 const void *buf, size_t len)
{
	char path[PATH_MAX], dir[PATH_MAX];
	int ret;

	snprintf(dir, sizeof(dir), "%s/snapshots", cfg->cache_dir);
	ret = mkdir_p(dir, 0700);
	if (ret)
		return ret;
	snapshot_path(cfg, root, path, sizeof(path));
	return write_file_atomic(path, buf, len, 0600, true);
}

/* The saved snapshot, mapped (manifest_open_file). */
static int snapshot_load(const struct sfs_config *cfg, const char *root,
			 struct manifest **out, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int ret;

	snapshot_path(cfg, root, path, sizeof(path));
	ret = manifest_open_file(path, out, err, errlen);
	if (ret == -ENOENT && err && errlen)
		err[0] = '\0';	/* no snapshot: nothing more to say */
	return ret;
}

static int dir_scan(struct backend_dir *d, const struct sfs_config *cfg,
		    int rootfd, char *err, size_t errlen)
{
	struct scan sc = { 0 };
	struct stat st;
	struct sfs_attr a;
	void *buf = NULL;
	size_t len = 0;
	uint64_t t0 = now_ms();
	int ret;

	if (fstat(rootfd, &st) < 0) {
		ret = -errno;
		close(rootfd);
		return ret;
	}
	sc.b = manifest_builder_create(d->be.chunk_size);
	if (!sc.b) {
		close(rootfd);
		return -ENOMEM;
	}
	attr_from_stat(&st, &a);
	ret = manifest_builder_add(sc.b, "", &a, NULL, NULL, 0);
	if (!ret)
		ret = scan_dir(&sc, rootfd, "", 0);
	else
		close(rootfd);
	if (!ret)
		ret = manifest_builder_finish(sc.b, 0, &buf, &len);
	manifest_builder_destroy(sc.b);
	inomap_release(&sc.links);
	if (ret) {
		snprintf(err, errlen, "scanning %s failed: %s", d->root, strerror(-ret));
		return ret;
	}
	ret = snapshot_save(cfg, d->root, buf, len);
	if (ret)
		log_warn("cannot save the snapshot of %s in the cache: %s (offline remounts will not work)",
			 d->root, strerror(-ret));
	/* served from the saved file, mapped: the daemon keeps no copy */
	if (!ret && snapshot_load(cfg, d->root, &d->be.m, NULL, 0) == 0) {
		free(buf);
	} else {
		ret = manifest_open(buf, len, &d->be.m, err, errlen);
		if (ret) {
			free(buf);
			return ret;
		}
	}
	log_info("scanned %s: %" PRIu64 " entries, %" PRIu64 " bytes in %" PRIu64 " ms",
		 d->root, sc.entries, sc.bytes, now_ms() - t0);
	return 0;
}

static int dir_create(const char *uri, const struct sfs_config *cfg,
		      struct backend **out, char *err, size_t errlen)
{
	const char *path = uri + strlen("dir://");
	struct backend_dir *d;
	int rootfd, ret;

	if (path[0] != '/') {
		snprintf(err, errlen, "%s: expected dir:///ABSOLUTE/PATH", uri);
		return -EINVAL;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->be.ops = &backend_dir_ops;
	d->be.chunk_size = (uint32_t)cfg->chunk_size;
	d->be.uri = strdup(uri);
	d->root = strdup(path);
	if (!d->be.uri || !d->root) {
		ret = -ENOMEM;
		goto out_free;
	}
	/* strip trailing slashes so the snapshot key is stable */
	for (size_t n = strlen(d->root); n > 1 && d->root[n - 1] == '/'; n--)
		d->root[n - 1] = '\0';

	rootfd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd >= 0) {
		ret = dir_scan(d, cfg, rootfd, err, errlen);
		if (ret)
			goto out_free;
	} else {
		int e = errno;
		char serr[256] = "";

		ret = snapshot_load(cfg, d->root, &d->be.m, serr, sizeof(serr));
		if (ret) {
			snprintf(err, errlen, "%s: %s%s%s", d->root, strerror(e),
				 serr[0] ? " (saved snapshot: " : "", serr[0] ? serr : "");
			if (serr[0])
				strncat(err, ")", errlen - strlen(err) - 1);
			ret = -e;
			goto out_free;
		}
		d->offline = true;
		d->be.chunk_size = manifest_chunk_size(d->be.m);
		log_notice("source %s is unavailable (%s): serving its snapshot from the cache; uncached data reads fail with EIO",
			   d->root, strerror(e));
	}
	manifest_set_name(d->be.m, d->be.uri);
	*out = &d->be;
	return 0;

out_free:
	free(d->root);
	free(d->be.uri);
	free(d);
	return ret;
}

static void dir_destroy(struct backend *be)
{
	struct backend_dir *d = to_dir(be);

	manifest_close(d->be.m);
	free(d->root);
	free(d->be.uri);
	free(d);
}

/* The source path of @file, for logs.  Returns 0 or -errno. */
static int source_path(struct backend_dir *d, const struct sfs_attr *file,
		       char *path, size_t len)
{
	char rel[PATH_MAX];
	int ret = manifest_path(d->be.m, file->ino, rel, sizeof(rel));

	if (ret < 0)
		return ret;
	snprintf(path, len, "%s/%s", d->root, rel);
	return 0;
}

static int dir_source_open(struct backend *be, const struct sfs_attr *file,
			   uint32_t idx, size_t len, int *fdp, off_t *off)
{
	struct backend_dir *d = to_dir(be);
	char path[PATH_MAX * 2];
	struct stat st;
	int fd, ret;

	ret = source_path(d, file, path, sizeof(path));
	if (ret < 0)
		return ret;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		ret = errno;
		log_err("source %s: %s", path, strerror(ret));
		return -EIO;
	}
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != file->size ||
	    st.st_mtim.tv_sec != file->mtime.tv_sec ||
	    st.st_mtim.tv_nsec != file->mtime.tv_nsec ||
	    st.st_ctim.tv_sec != file->ctime.tv_sec ||
	    st.st_ctim.tv_nsec != file->ctime.tv_nsec) {
		log_err("source %s changed since it was mounted: remount to see the new version",
			path);
		close(fd);
		return -EIO;
	}
	*off = (off_t)idx * be->chunk_size;
	posix_fadvise(fd, *off, (off_t)len, POSIX_FADV_SEQUENTIAL);
	*fdp = fd;
	return 0;
}

static int dir_source_close(struct backend *be, const struct sfs_attr *file,
			    int fd, ssize_t res, size_t len)
{
	char path[PATH_MAX * 2] = "?";

	close(fd);
	if (res == (ssize_t)len)
		return (int)len;
	source_path(to_dir(be), file, path, sizeof(path));
	if (res < 0)
		log_err("source %s: read: %s", path, strerror((int)-res));
	else
		log_err("source %s: short read (file truncated since mount?)", path);
	return -EIO;
}

static int dir_read_chunk(struct backend *be, const struct sfs_attr *file,
			  uint32_t idx, void *buf, size_t len)
{
	off_t off;
	int fd, ret;

	ret = dir_source_open(be, file, idx, len, &fd, &off);
	if (ret)
		return ret;
	return dir_source_close(be, file, fd, pread_full(fd, buf, len, off), len);
}

const struct backend_ops backend_dir_ops = {
	.scheme = "dir",
	.create = dir_create,
	.destroy = dir_destroy,
	.getattr = backend_manifest_getattr,
	.lookup = backend_manifest_lookup,
	.readdir = backend_manifest_readdir,
	.readlink = backend_manifest_readlink,
	.read_chunk = dir_read_chunk,
	.source_open = dir_source_open,
	.source_close = dir_source_close,
	.statfs = backend_manifest_statfs,
};
