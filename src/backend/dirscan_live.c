/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dirscan_live: the live index of a scan still running (dirscan.h,
 * dirscan_live_*): lookups, listings and attributes of the part already
 * read, with the finished manifest's inode numbers, all under sc->qlock
 * (the rules are at the top of dirscan.c); the source is stat'ed outside
 * the lock.
 */
#include "dirscan_i.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Under qlock: where in sc->canon the directory of entry index @idx is, or -1. */
static ssize_t canon_find(const struct dirscan *sc, uint64_t idx)
{
	size_t lo = 0, hi = sc->ncanon;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (sc->canon[mid]->self < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < sc->ncanon && sc->canon[lo]->self == idx ? (ssize_t)lo : -1;
}

/*
 * Under qlock: the read directory listing entry index @idx (> 0), with
 * the entry's position among its children in *@pos, or NULL if that part
 * is not read yet.  Children ranges are consecutive in canon order.
 */
static struct ldir *prefix_find(const struct dirscan *sc, uint64_t idx, uint32_t *pos)
{
	size_t lo = 0, hi = sc->prefix;
	struct ldir *l;

	if (!hi || !idx)
		return NULL;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (sc->canon[mid]->start <= idx)
			lo = mid;
		else
			hi = mid;
	}
	l = sc->canon[lo];
	if (l->start > idx || idx - l->start >= l->n)
		return NULL;
	*pos = (uint32_t)(idx - l->start);
	return l;
}

/*
 * Under qlock: wait for more of the tree to be read.  Returns 0 (look
 * again), -EIO (the scan failed or was cancelled first) or -EAGAIN (it is
 * over: what was asked is not in the live index, ask the manifest).
 */
static int live_wait(struct dirscan *sc)
{
	if (sc->err)
		return -EIO;
	if (sc->walked)
		return -EAGAIN;
	pthread_cond_wait(&sc->lcond, &sc->qlock);
	return 0;
}

/* Under qlock: the directory of inode @ino, once read. */
static int live_dir(struct dirscan *sc, uint64_t ino, struct ldir **out)
{
	if (!ino)
		return -ENOENT;
	for (;;) {
		ssize_t k = canon_find(sc, ino - 1);
		uint32_t pos;
		int ret;

		if (k >= 0 && (size_t)k < sc->prefix) {
			*out = sc->canon[k];
			return 0;
		}
		/* read, and not in canon: not a directory */
		if (k < 0 && prefix_find(sc, ino - 1, &pos))
			return -ENOTDIR;
		ret = live_wait(sc);
		if (ret)
			return ret;
	}
}

static int join(char *buf, size_t size, const char *dir, const char *name)
{
	int n = snprintf(buf, size, "%s%s%s", dir, dir[0] ? "/" : "", name);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : n;
}

/* Under qlock: the path of inode @ino and its S_IFMT bits, once read. */
static int live_entry(struct dirscan *sc, uint64_t ino, char *buf, size_t size,
		      uint32_t *type)
{
	if (!ino)
		return -ENOENT;
	if (ino == SFS_ROOT_INO) {
		*type = S_IFDIR;
		return join(buf, size, "", "");
	}
	for (;;) {
		uint32_t pos;
		struct ldir *l = prefix_find(sc, ino - 1, &pos);
		int ret;

		if (l) {
			*type = (uint32_t)l->type[pos] << 12;
			return join(buf, size, l->path, l->names + l->off[pos]);
		}
		ret = live_wait(sc);
		if (ret)
			return ret;
	}
}

/*
 * The attributes of @rel (type @type in the live index) as the scan takes
 * them, with inode number @ino.  A file with several names is left to the
 * manifest (its inode number is that of its first name in the tree).
 */
static int live_attr(struct dirscan *sc, const char *rel, uint64_t ino,
		     uint32_t type, struct sfs_attr *out)
{
	struct stat st;
	int fd, ret = 0;

	if (sc->src.opendir) {
		ret = sc->src.getattr(sc->src.arg, rel, type, out);
	} else {
		fd = dirscan_open_beneath(sc, rel, O_PATH | O_NOFOLLOW);
		if (fd < 0)
			return fd;
		if (fstat(fd, &st) < 0)
			ret = -errno;
		close(fd);
		if (!ret)
			dirscan_attr_of(rel, &st, out);
	}
	if (ret)
		return ret;
	if ((out->mode & S_IFMT) != type) {
		log_err("source %s/%s changed type during the scan: remount to see the new version",
			sc->root, rel);
		return -EIO;
	}
	if (S_ISREG(out->mode) && out->nlink > 1)
		return -EAGAIN;
	out->ino = ino;
	return 0;
}

int dirscan_live_getattr(struct dirscan *sc, uint64_t ino, struct sfs_attr *out)
{
	char rel[PATH_MAX];
	uint32_t type;
	int ret;

	pthread_mutex_lock(&sc->qlock);
	ret = live_entry(sc, ino, rel, sizeof(rel), &type);
	pthread_mutex_unlock(&sc->qlock);
	if (ret < 0)
		return ret;
	return live_attr(sc, rel, ino, type, out);
}

int dirscan_live_lookup(struct dirscan *sc, uint64_t parent, const char *name,
			struct sfs_attr *out)
{
	char rel[PATH_MAX];
	struct ldir *l;
	uint64_t ino = 0;
	uint32_t type = 0;
	int ret;

	pthread_mutex_lock(&sc->qlock);
	ret = live_dir(sc, parent, &l);
	if (!ret) {
		size_t lo = 0, hi = l->n;

		ret = -ENOENT;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			int c = strcmp(l->names + l->off[mid], name);

			if (!c) {
				ino = l->start + mid + 1;
				type = (uint32_t)l->type[mid] << 12;
				ret = join(rel, sizeof(rel), l->path, name);
				break;
			}
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
	}
	pthread_mutex_unlock(&sc->qlock);
	if (ret < 0)
		return ret;
	return live_attr(sc, rel, ino, type, out);
}

int dirscan_live_readdir(struct dirscan *sc, uint64_t ino, struct sfs_dirlist *out)
{
	struct ldir *l;
	int ret;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&sc->qlock);
	ret = live_dir(sc, ino, &l);
	if (!ret && l->multi)
		ret = -EAGAIN;	/* hard links' inode numbers: the manifest's */
	if (!ret && l->n) {
		out->ent = calloc(l->n, sizeof(*out->ent));
		if (!out->ent)
			ret = -ENOMEM;
		for (uint32_t i = 0; !ret && i < l->n; i++) {
			struct sfs_dirent *e = &out->ent[i];

			e->name = strdup(l->names + l->off[i]);
			if (!e->name) {
				ret = -ENOMEM;
				break;
			}
			e->ino = l->start + i + 1;
			e->mode = (uint32_t)l->type[i] << 12;
			out->n++;
		}
	}
	pthread_mutex_unlock(&sc->qlock);
	if (ret)
		sfs_dirlist_release(out);
	return ret;
}

int dirscan_live_readlink(struct dirscan *sc, uint64_t ino, char *buf, size_t size)
{
	char rel[PATH_MAX];
	uint32_t type;
	ssize_t n;
	int fd, ret;

	pthread_mutex_lock(&sc->qlock);
	ret = live_entry(sc, ino, rel, sizeof(rel), &type);
	pthread_mutex_unlock(&sc->qlock);
	if (ret < 0)
		return ret;
	if (type != S_IFLNK)
		return -EINVAL;
	if (sc->src.opendir)
		return sc->src.readlink(sc->src.arg, rel, buf, size);
	fd = dirscan_open_beneath(sc, rel, O_PATH | O_NOFOLLOW);
	if (fd < 0)
		return fd;
	n = readlinkat(fd, "", buf, size);
	ret = n < 0 ? -errno : (int)n;
	close(fd);
	return ret;
}

int dirscan_live_path(struct dirscan *sc, uint64_t ino, char *buf, size_t size)
{
	uint32_t type;
	int ret;

	pthread_mutex_lock(&sc->qlock);
	ret = live_entry(sc, ino, buf, size, &type);
	pthread_mutex_unlock(&sc->qlock);
	return ret;
}
