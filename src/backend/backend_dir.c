/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_dir: a local, NFS or Lustre directory as an immutable dataset.
 *
 * At mount the tree is scanned once (metadata only: lstat, readlink), by
 * several threads (dirscan.h), into a manifest (manifest.h), the same
 * indexed format a published RADOS dataset uses, so all metadata operations
 * are served by the same code.  With dir_scan_background the mount answers
 * once the top directory is read, from the scan's live index until the
 * manifest is ready (scanserve.h).  A copy of that manifest is
 * saved as CACHE_DIR/snapshots/<id>.manifest and served from there,
 * mapped (the daemon holds none of it), and a stamp of every
 * directory (inode number, mtime, ctime) as <id>.dirs.  At the next mount,
 * if no directory's stamp changed (dir_reuse_scan), the saved manifest is
 * served without a scan; if the source cannot be opened at all (NFS server
 * gone, directory removed or unreadable) the saved manifest is used
 * instead and every cached byte is still served.  What the stamps cannot
 * see is in dirscan.h; a file found changed in place at a read removes
 * them, so the mount after that scans again.
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
#include "dirscan.h"
#include "log.h"
#include "manifest/manifest.h"
#include "scanserve.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct backend_dir {
	struct backend be;
	char *root;		/* absolute source path */
	char *cache_dir;
	bool offline;		/* serving a saved snapshot */
	char *stamps;		/* the saved scan's stamp file */
	atomic_bool stale;	/* stamps removed: a file changed in place */

	struct scanserve ss;	/* a first scan in the background (dir_scan_background) */
	uint64_t scan_t0;
	unsigned scan_threads;
};

static struct backend_dir *to_dir(struct backend *be)
{
	return (struct backend_dir *)be;
}

/* CACHE_DIR/snapshots/<XXH3-128 of the root path><@ext> */
static void snapshot_path(const char *cache_dir, const char *root,
			  const char *ext, char *buf, size_t len)
{
	struct sfs_id id;
	char hex[SFS_ID_HEX_LEN + 1];

	sfs_id_of(root, strlen(root), &id);
	sfs_id_hex(&id, hex);
	snprintf(buf, len, "%s/snapshots/%s%s", cache_dir, hex, ext);
}

/*
 * The stamp file (<id>.dirs) that lets a mount reuse <id>.manifest: which
 * manifest file it goes with (inode number, size and mtime of the file as
 * written: a later scan renames a new file over it), the chunk size it was
 * scanned with, and the directories' stamps (dirscan.h).  The manifest's
 * bytes are checked by manifest_open(), as for any manifest, not here: the
 * reuse costs no pass over them.
 */
struct stamp_hdr {
	char magic[8];		/* STAMP_FILE_MAGIC */
	uint32_t chunk_size;
	uint32_t zero;
	uint64_t manifest_ino;
	uint64_t manifest_len;
	int64_t manifest_mtime_ns;
};

#define STAMP_FILE_MAGIC	"SFSDIRS2"

/*
 * A source file that cannot be read is logged from a reader's request:
 * whoever can read (or owns) the file can repeat it at will (issue 27).
 * 10 lines per 10 s, the next one saying how many were suppressed.
 */
static struct log_ratelimit rl_source = LOG_RATELIMIT_INIT(10000, 10);

static int64_t mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* Read the whole of @path (at most @max bytes).  Returns 0 or -errno. */
static int read_whole(const char *path, size_t max, void **out, size_t *outlen)
{
	struct stat st;
	void *buf;
	int fd, ret = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		ret = -EINVAL;
		goto out_close;
	}
	buf = malloc((size_t)st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out_close;
	}
	if (pread_full(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
		free(buf);
		ret = -EIO;
		goto out_close;
	}
	*out = buf;
	*outlen = (size_t)st.st_size;
out_close:
	close(fd);
	return ret;
}

/*
 * Save the scan's manifest (for offline mounts and reuse) and its stamps
 * (for reuse).  The manifest goes first: a crash between the two leaves
 * stamps naming another manifest's hash, which are then not used.
 */
static int snapshot_save(const char *cache_dir, uint32_t chunk_size,
			 const char *root, const struct dirscan_result *r)
{
	char path[PATH_MAX], dir[PATH_MAX];
	struct stamp_hdr h = { .magic = STAMP_FILE_MAGIC };
	struct stat st;
	char *buf;
	int ret;

	snprintf(dir, sizeof(dir), "%s/snapshots", cache_dir);
	ret = mkdir_p(dir, 0700);
	if (ret)
		return ret;
	snapshot_path(cache_dir, root, ".manifest", path, sizeof(path));
	ret = write_file_atomic(path, r->manifest, r->manifest_len, 0600, true);
	if (ret)
		return ret;
	if (stat(path, &st) < 0)
		return -errno;
	h.chunk_size = chunk_size;
	h.manifest_ino = (uint64_t)st.st_ino;
	h.manifest_len = (uint64_t)st.st_size;
	h.manifest_mtime_ns = mtime_ns(&st);
	buf = malloc(sizeof(h) + r->stamps_len);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), r->stamps, r->stamps_len);
	snapshot_path(cache_dir, root, ".dirs", path, sizeof(path));
	ret = write_file_atomic(path, buf, sizeof(h) + r->stamps_len, 0600, true);
	free(buf);
	return ret;
}

/* The saved snapshot, mapped (manifest_open_file). */
static int snapshot_load(const char *cache_dir, const char *root,
			 struct manifest **out, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int ret;

	snapshot_path(cache_dir, root, ".manifest", path, sizeof(path));
	ret = manifest_open_file(path, out, err, errlen);
	if (ret == -ENOENT && err && errlen)
		err[0] = '\0';	/* no snapshot: nothing more to say */
	return ret;
}

/*
 * Reuse the saved scan of @d->root if its stamps match (same chunk size,
 * same manifest bytes, every directory's inode number, mtime and ctime
 * unchanged).  Returns 0 with d->be.m set, or 1 (a new scan is needed,
 * logged with the reason).
 */
static int dir_reuse(struct backend_dir *d, const struct sfs_config *cfg, int rootfd)
{
	char path[PATH_MAX], why[PATH_MAX + 512] = "", merr[256];
	struct stamp_hdr h;
	struct stat mst;
	void *st = NULL;
	size_t stlen = 0;
	uint64_t t0 = now_ms(), t1, t2;
	int ret;

	snapshot_path(d->cache_dir, d->root, ".dirs", path, sizeof(path));
	ret = read_whole(path, SIZE_MAX, &st, &stlen);
	if (ret == -ENOENT) {
		log_info("%s: no saved scan: scanning", d->root);
		return 1;
	}
	if (ret || stlen < sizeof(h)) {
		snprintf(why, sizeof(why), "%s: %s", path, ret ? strerror(-ret) : "truncated");
		goto rescan;
	}
	memcpy(&h, st, sizeof(h));
	if (memcmp(h.magic, STAMP_FILE_MAGIC, sizeof(h.magic))) {
		snprintf(why, sizeof(why), "%s: not a stamp file", path);
		goto rescan;
	}
	if (h.chunk_size != cfg->chunk_size) {
		snprintf(why, sizeof(why), "scanned with chunk_size %u, now %" PRIu64,
			 h.chunk_size, cfg->chunk_size);
		goto rescan;
	}
	ret = dirscan_unchanged(rootfd, (char *)st + sizeof(h), stlen - sizeof(h),
				scanserve_threads(cfg), why, sizeof(why));
	if (ret < 0)
		snprintf(why, sizeof(why), "%s: bad stamps", path);
	if (ret)
		goto rescan;
	t1 = now_ms();
	snapshot_path(d->cache_dir, d->root, ".manifest", path, sizeof(path));
	if (stat(path, &mst) < 0 || (uint64_t)mst.st_ino != h.manifest_ino ||
	    (uint64_t)mst.st_size != h.manifest_len || mtime_ns(&mst) != h.manifest_mtime_ns) {
		snprintf(why, sizeof(why), "%s is not the manifest the stamps were saved with", path);
		goto rescan;
	}
	/* mapped, not read: its parts are verified as they are touched */
	ret = manifest_open_file(path, &d->be.m, merr, sizeof(merr));
	if (ret) {
		snprintf(why, sizeof(why), "%s: %s", path, merr[0] ? merr : strerror(-ret));
		goto rescan;
	}
	t2 = now_ms();
	log_info("%s: unchanged since its last scan (%" PRIu64 " entries): reused it in %" PRIu64 " ms (stamps checked %" PRIu64 ", manifest mapped %" PRIu64 ")",
		 d->root, manifest_nentries(d->be.m), t2 - t0, t1 - t0, t2 - t1);
	free(st);
	return 0;

rescan:
	log_notice("%s: scanning again: %s", d->root, why);
	free(st);
	return 1;
}

/*
 * The scan @r of d->root, begun at @t0 with @threads threads, is done:
 * save it, and open the manifest in *@m.  Returns 0 or -errno with @err set.
 */
static int dir_scanned(struct backend_dir *d, struct dirscan_result *r,
		       uint64_t t0, unsigned threads, struct manifest **m,
		       char *err, size_t errlen)
{
	int ret;

	log_info("scanned %s: %" PRIu64 " entries in %" PRIu64 " directories, %" PRIu64 " bytes in %" PRIu64 " ms (%u threads)",
		 d->root, r->entries, r->dirs, r->bytes, now_ms() - t0, threads);
	ret = snapshot_save(d->cache_dir, d->be.chunk_size, d->root, r);
	if (ret)
		log_warn("cannot save the snapshot of %s in the cache: %s (remounts will scan again, offline remounts will not work)",
			 d->root, strerror(-ret));
	free(r->stamps);
	/* served from the saved file, mapped: the daemon keeps no copy */
	if (!ret && snapshot_load(d->cache_dir, d->root, m, NULL, 0) == 0) {
		free(r->manifest);
	} else {
		ret = manifest_open(r->manifest, r->manifest_len, m, err, errlen);
		if (ret)
			free(r->manifest);
	}
	/* the builder's memory, freed in the scan threads' arenas, back to the system */
	malloc_trim(0);
	return ret;
}

static int dir_scan(struct backend_dir *d, const struct sfs_config *cfg,
		    int rootfd, char *err, size_t errlen)
{
	struct dirscan_result r;
	unsigned threads = scanserve_threads(cfg);
	uint64_t t0 = now_ms();
	int ret;

	ret = dirscan_run(rootfd, d->root, threads, d->be.chunk_size, &r, err, errlen);
	if (ret)
		return ret;
	return dir_scanned(d, &r, t0, threads, &d->be.m, err, errlen);
}

/* scanserve's callback: the background scan is over. */
static int dir_scan_done(void *arg, struct dirscan_result *r, struct manifest **m,
			 char *err, size_t errlen)
{
	struct backend_dir *d = arg;
	int ret = dir_scanned(d, r, d->scan_t0, d->scan_threads, m, err, errlen);

	/*
	 * A read that found a file changed in place meanwhile dropped the
	 * stamps before they were saved: drop the new ones too.
	 */
	if (!ret && atomic_load(&d->stale) && unlink(d->stamps) < 0 && errno != ENOENT)
		log_warn("%s: %s (the next mount may reuse a stale scan)",
			 d->stamps, strerror(errno));
	return ret;
}

/* Start scanning d->root in the background; 0 once its top directory is read. */
static int dir_scan_start(struct backend_dir *d, const struct sfs_config *cfg,
			  int rootfd, char *err, size_t errlen)
{
	struct dirscan *scan;
	int ret;

	d->scan_threads = scanserve_threads(cfg);
	d->scan_t0 = now_ms();
	ret = dirscan_start(rootfd, d->root, d->scan_threads, d->be.chunk_size,
			    scanserve_test_delay_us(), &scan, err, errlen);
	if (ret)
		return ret;
	ret = scanserve_start(&d->ss, scan, err, errlen);
	if (!ret && d->ss.started)
		log_info("%s: scanning in the background (%u threads); answering meanwhile",
			 d->root, d->scan_threads);
	return ret;
}

static void dir_destroy(struct backend *be);

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
	d->cache_dir = strdup(cfg->cache_dir);
	d->stamps = malloc(PATH_MAX);
	scanserve_init(&d->ss, &d->be, d->root, dir_scan_done, d);
	if (!d->be.uri || !d->root || !d->cache_dir || !d->stamps) {
		ret = -ENOMEM;
		goto out_free;
	}
	/* strip trailing slashes so the snapshot key is stable */
	for (size_t n = strlen(d->root); n > 1 && d->root[n - 1] == '/'; n--)
		d->root[n - 1] = '\0';
	snapshot_path(d->cache_dir, d->root, ".dirs", d->stamps, PATH_MAX);

	rootfd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd >= 0) {
		ret = 1;
		if (cfg->dir_reuse_scan)
			ret = dir_reuse(d, cfg, rootfd);
		if (ret && cfg->dir_scan_background)
			ret = dir_scan_start(d, cfg, rootfd, err, errlen);
		else if (ret)
			ret = dir_scan(d, cfg, rootfd, err, errlen);
		close(rootfd);
		if (ret)
			goto out_free;
	} else {
		int e = errno;
		char serr[256] = "";

		ret = snapshot_load(d->cache_dir, d->root, &d->be.m, serr, sizeof(serr));
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
	if (!d->ss.started)	/* else the scanner names it */
		manifest_set_name(d->be.m, d->be.uri);
	*out = &d->be;
	return 0;

out_free:
	dir_destroy(&d->be);	/* no scanner was started: a failure comes before */
	return ret;
}

static void dir_destroy(struct backend *be)
{
	struct backend_dir *d = to_dir(be);

	scanserve_destroy(&d->ss);
	manifest_close(d->be.m);
	free(d->cache_dir);
	free(d->stamps);
	free(d->root);
	free(d->be.uri);
	free(d);
}

/* ---- metadata: the live index while a background scan runs, then the manifest ---- */

static int dir_getattr(struct backend *be, uint64_t ino, struct sfs_attr *out)
{
	return scanserve_getattr(&to_dir(be)->ss, ino, out);
}

static int dir_lookup(struct backend *be, uint64_t parent, const char *name,
		      struct sfs_attr *out)
{
	return scanserve_lookup(&to_dir(be)->ss, parent, name, out);
}

static int dir_readdir(struct backend *be, uint64_t ino, struct sfs_dirlist *out)
{
	return scanserve_readdir(&to_dir(be)->ss, ino, out);
}

static int dir_readlink(struct backend *be, uint64_t ino, char *buf, size_t size)
{
	return scanserve_readlink(&to_dir(be)->ss, ino, buf, size);
}

static int dir_statfs(struct backend *be, uint64_t *bytes, uint64_t *files)
{
	return scanserve_statfs(&to_dir(be)->ss, bytes, files);
}

/* @ino's path relative to the root, as manifest_path(). */
static int dir_relpath(struct backend_dir *d, uint64_t ino, char *buf, size_t len)
{
	return scanserve_path(&d->ss, ino, buf, len);
}

/* The source path of @file, for logs.  Returns 0 or -errno. */
static int source_path(struct backend_dir *d, const struct sfs_attr *file,
		       char *path, size_t len)
{
	char rel[PATH_MAX];
	int ret = dir_relpath(d, file->ino, rel, sizeof(rel));

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
		log_limited(&rl_source, LOG_ERR, "source %s: %s", path, strerror(ret));
		return -EIO;
	}
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != file->size ||
	    st.st_mtim.tv_sec != file->mtime.tv_sec ||
	    st.st_mtim.tv_nsec != file->mtime.tv_nsec ||
	    st.st_ctim.tv_sec != file->ctime.tv_sec ||
	    st.st_ctim.tv_nsec != file->ctime.tv_nsec) {
		log_limited(&rl_source, LOG_ERR,
			    "source %s changed since it was mounted: remount to see the new version",
			    path);
		close(fd);
		/*
		 * Changed in place, which the directory stamps cannot see:
		 * drop them, so that the next mount scans again.
		 */
		if (d->stamps && !atomic_exchange(&d->stale, true) &&
		    unlink(d->stamps) < 0 && errno != ENOENT)
			log_warn("%s: %s (the next mount may reuse a stale scan)",
				 d->stamps, strerror(errno));
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
		log_limited(&rl_source, LOG_ERR, "source %s: read: %s", path, strerror((int)-res));
	else
		log_limited(&rl_source, LOG_ERR, "source %s: short read (file truncated since mount?)",
			    path);
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
	.getattr = dir_getattr,
	.lookup = dir_lookup,
	.readdir = dir_readdir,
	.readlink = dir_readlink,
	.read_chunk = dir_read_chunk,
	.source_open = dir_source_open,
	.source_close = dir_source_close,
	.statfs = dir_statfs,
};
