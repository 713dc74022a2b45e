/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dirscan: see dirscan.h.
 *
 * Threads share a heap of directories to read (struct ldir), ordered
 * breadth first, under sc->qlock; a worker pops one, reads it, adds its
 * entries to the manifest builder in batches under sc->block (builder,
 * hard-link map, stamps and totals), then, under sc->qlock again, records
 * the directory's sorted names, pushes its subdirectories and moves the read
 * prefix on (prefix_advance()).  The two locks are never held together.
 * The first error stops every worker; the scan then fails as a whole (a
 * dataset with holes is never saved or switched to).
 *
 * This file is the scan; the live index is dirscan_live.c, the check of
 * saved stamps dirscan_stamps.c, what they share dirscan_i.h.
 *
 * The live index, all under sc->qlock: sc->canon lists the directories in
 * the manifest's breadth-first order as far as it is known (a directory is
 * appended when its parent enters the prefix, with its own entry index);
 * sc->canon[0..sc->prefix) are read, with the entry index of their first
 * child.  A directory's names, types and children are written by the
 * worker that read it before it is marked L_DONE and never change after;
 * every ldir lives until dirscan_destroy().  Live calls copy what they
 * need under the lock and stat the source outside it.
 */
#include "dirscan_i.h"

#include "backend.h"
#include "manifest/inomap.h"
#include "log.h"
#include "manifest/manifest.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define BATCH		1024	/* entries added to the builder per lock */

struct rec {
	char *path;
	char *target;		/* symlinks */
	struct sfs_attr a;
	dev_t dev;
	ino_t ino;
	bool multi;		/* regular file with st_nlink > 1 */
};

struct batch {
	struct rec r[BATCH];
	size_t n;
};

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

	/*
	 * A file with several names: whichever name a worker meets first
	 * becomes the manifest's file, so its id must not depend on the name
	 * (device and inode number say which file it is).
	 */
	if (st->st_nlink > 1)
		rel = "";
	XXH3_128bits_reset(&s);
	XXH3_128bits_update(&s, rel, strlen(rel));
	XXH3_128bits_update(&s, meta, sizeof(meta));
	h = XXH3_128bits_digest(&s);
	out->hi = h.high64;
	out->lo = h.low64;
}

void dirscan_attr_of(const char *rel, const struct stat *st, struct sfs_attr *a)
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
	if (S_ISREG(st->st_mode))
		content_id(rel, st, &a->content);
}

static int growbuf_put(struct growbuf *g, const void *p, size_t len)
{
	if (g->len + len > g->cap) {
		size_t cap = g->cap ? g->cap : 4096;
		char *np;

		while (cap < g->len + len)
			cap *= 2;
		np = realloc(g->p, cap);
		if (!np)
			return -ENOMEM;
		g->p = np;
		g->cap = cap;
	}
	memcpy(g->p + g->len, p, len);
	g->len += len;
	return 0;
}

/* Append @p to the array *@arr of *@n (room *@cap).  Returns 0 or -ENOMEM. */
static int vec_push(struct ldir ***arr, size_t *n, size_t *cap, struct ldir *p)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;
		struct ldir **na = realloc(*arr, nc * sizeof(*na));

		if (!na)
			return -ENOMEM;
		*arr = na;
		*cap = nc;
	}
	(*arr)[(*n)++] = p;
	return 0;
}

/* Record the state @st of directory @rel.  Under sc->block. */
static int stamp_add(struct dirscan *sc, const char *rel, const struct stat *st)
{
	unsigned char f[STAMP_FIX];
	uint64_t ino = (uint64_t)st->st_ino;
	int64_t ms = st->st_mtim.tv_sec, cs = st->st_ctim.tv_sec;
	uint32_t mn = (uint32_t)st->st_mtim.tv_nsec, cn = (uint32_t)st->st_ctim.tv_nsec;
	uint16_t plen = (uint16_t)strlen(rel);
	int ret;

	if (!sc->stamps.len) {
		uint32_t hdr[4] = { STAMP_MAGIC, 0, 0, 0 };

		ret = growbuf_put(&sc->stamps, hdr, sizeof(hdr));
		if (ret)
			return ret;
	}
	memcpy(f, &ino, 8);
	memcpy(f + 8, &ms, 8);
	memcpy(f + 16, &mn, 4);
	memcpy(f + 20, &cs, 8);
	memcpy(f + 28, &cn, 4);
	memcpy(f + 32, &plen, 2);
	ret = growbuf_put(&sc->stamps, f, sizeof(f));
	if (!ret)
		ret = growbuf_put(&sc->stamps, rel, plen);
	if (!ret)
		sc->dirs++;
	return ret;
}

static void fail(struct dirscan *sc, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(struct dirscan *sc, int err, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&sc->qlock);
	if (!sc->err) {
		sc->err = err;
		va_start(ap, fmt);
		vsnprintf(sc->msg, sizeof(sc->msg), fmt, ap);
		va_end(ap);
	}
	pthread_cond_broadcast(&sc->qcond);
	pthread_cond_broadcast(&sc->lcond);
	pthread_mutex_unlock(&sc->qlock);
}

static void batch_clear(struct batch *bt)
{
	for (size_t i = 0; i < bt->n; i++) {
		free(bt->r[i].path);
		free(bt->r[i].target);
	}
	bt->n = 0;
}

/* Hand @bt to the builder.  Returns 0 or -errno (after fail()). */
static int batch_flush(struct dirscan *sc, struct batch *bt)
{
	const char *bad = NULL;
	int ret = 0;

	pthread_mutex_lock(&sc->block);
	for (size_t i = 0; i < bt->n && !ret; i++) {
		struct rec *r = &bt->r[i];

		bad = r->path;
		if (r->multi) {
			const char *first = inomap_first(&sc->links, r->dev, r->ino,
							 r->path, &ret);

			if (ret)
				break;
			if (first) {
				ret = manifest_builder_link(sc->b, r->path, first);
				sc->entries += !ret;
				continue;
			}
		}
		ret = manifest_builder_add(sc->b, r->path, &r->a, r->target, NULL, 0);
		if (!ret) {
			sc->entries++;
			if (S_ISREG(r->a.mode))
				sc->bytes += r->a.size;
		}
	}
	pthread_mutex_unlock(&sc->block);
	if (ret)
		fail(sc, ret, "%s/%s: %s", sc->root, bad, strerror(-ret));
	batch_clear(bt);
	return ret;
}

int dirscan_open_beneath(struct dirscan *sc, const char *rel, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
	};
	const char *p = rel[0] ? rel : ".";
	int fd = (int)syscall(SYS_openat2, sc->rootfd, p, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = openat(sc->rootfd, p, flags | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int open_dir(struct dirscan *sc, const char *rel)
{
	return dirscan_open_beneath(sc, rel, O_RDONLY | O_DIRECTORY);
}

/* ---- the heap of directories to read, breadth first ---- */

/* Whether @a comes before @b in the manifest's breadth-first order. */
static bool bfs_before(const struct ldir *a, const struct ldir *b)
{
	if (a->depth != b->depth)
		return a->depth < b->depth;
	while (a->parent != b->parent) {
		a = a->parent;
		b = b->parent;
	}
	return strcmp(a->path + a->name_at, b->path + b->name_at) < 0;
}

/* Under qlock. */
static int heap_push(struct dirscan *sc, struct ldir *l)
{
	size_t i;
	int ret = vec_push(&sc->heap, &sc->n, &sc->cap, l);

	if (ret)
		return ret;
	for (i = sc->n - 1; i > 0; ) {
		size_t up = (i - 1) / 2;

		if (!bfs_before(sc->heap[i], sc->heap[up]))
			break;
		sc->heap[i] = sc->heap[up];
		sc->heap[up] = l;
		i = up;
	}
	return 0;
}

/* Under qlock, with sc->n > 0. */
static struct ldir *heap_pop(struct dirscan *sc)
{
	struct ldir *top = sc->heap[0], *last = sc->heap[--sc->n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= sc->n)
			break;
		if (c + 1 < sc->n && bfs_before(sc->heap[c + 1], sc->heap[c]))
			c++;
		if (!bfs_before(sc->heap[c], last))
			break;
		sc->heap[i] = sc->heap[c];
		i = c;
	}
	if (sc->n)
		sc->heap[i] = last;
	return top;
}

/* A new directory @name under @parent (NULL: the root), owned by sc->all.  Under qlock. */
static struct ldir *ldir_new(struct dirscan *sc, struct ldir *parent, const char *name)
{
	struct ldir *l = calloc(1, sizeof(*l));
	size_t plen = parent ? strlen(parent->path) : 0;

	if (!l)
		return NULL;
	l->parent = parent;
	l->depth = parent ? parent->depth + 1 : 0;
	l->path = malloc(plen + strlen(name) + 2);
	if (!l->path || vec_push(&sc->all, &sc->nall, &sc->capall, l)) {
		free(l->path);
		free(l);
		return NULL;
	}
	if (plen)
		sprintf(l->path, "%s/%s", parent->path, name);
	else
		strcpy(l->path, name);
	l->name_at = (uint32_t)(strlen(l->path) - strlen(name));
	return l;
}

static void ldir_free(struct ldir *l)
{
	free(l->path);
	free(l->names);
	free(l->off);
	free(l->type);
	free(l->subs);
	free(l->subat);
	free(l);
}

/*
 * Under qlock: move the read prefix of sc->canon on as far as it goes,
 * giving each directory its first child's index and appending its
 * subdirectories with their own.  Returns 0 or -ENOMEM.
 */
static int prefix_advance(struct dirscan *sc)
{
	bool moved = false;
	int ret = 0;

	while (sc->prefix < sc->ncanon && sc->canon[sc->prefix]->state == L_DONE) {
		struct ldir *l = sc->canon[sc->prefix];

		l->start = sc->next_start;
		for (uint32_t j = 0; j < l->nsubs && !ret; j++) {
			l->subs[j]->self = l->start + l->subat[j];
			ret = vec_push(&sc->canon, &sc->ncanon, &sc->capcanon, l->subs[j]);
		}
		if (ret)
			break;
		sc->next_start += l->n;
		sc->prefix++;
		moved = true;
	}
	if (moved)
		pthread_cond_broadcast(&sc->lcond);
	return ret;
}

/* ---- reading one directory ---- */

struct listing {
	struct growbuf names;	/* NUL-terminated, in readdir order */
	uint32_t *off;		/* of each name, then sorted */
	uint8_t *type;
	size_t n, cap;
	bool multi;
};

static int listing_add(struct listing *ls, const char *name, uint32_t mode, bool multi)
{
	uint32_t at = (uint32_t)ls->names.len;
	int ret;

	if (ls->names.len > UINT32_MAX - NAME_MAX - 1)
		return -EFBIG;
	if (ls->n == ls->cap) {
		size_t cap = ls->cap ? ls->cap * 2 : 64;
		uint32_t *no = realloc(ls->off, cap * sizeof(*no));
		uint8_t *nt;

		if (!no)
			return -ENOMEM;
		ls->off = no;
		nt = realloc(ls->type, cap);
		if (!nt)
			return -ENOMEM;
		ls->type = nt;
		ls->cap = cap;
	}
	ret = growbuf_put(&ls->names, name, strlen(name) + 1);
	if (ret)
		return ret;
	ls->off[ls->n] = at;
	ls->type[ls->n] = (uint8_t)((mode & S_IFMT) >> 12);
	ls->n++;
	ls->multi |= multi;
	return 0;
}

static int off_cmp(const void *a, const void *b, void *names)
{
	return strcmp((const char *)names + *(const uint32_t *)a,
		      (const char *)names + *(const uint32_t *)b);
}

/* Sort @ls by name, its types with it.  Returns 0 or -ENOMEM. */
static int listing_sort(struct listing *ls)
{
	uint32_t *orig;
	uint8_t *type;

	if (ls->n < 2)
		return 0;
	orig = malloc(ls->n * sizeof(*orig));
	type = malloc(ls->n);
	if (!orig || !type) {
		free(orig);
		free(type);
		return -ENOMEM;
	}
	memcpy(orig, ls->off, ls->n * sizeof(*orig));
	qsort_r(ls->off, ls->n, sizeof(*ls->off), off_cmp, ls->names.p);
	/* orig[] is in increasing offset order: find each sorted one's type */
	for (size_t i = 0; i < ls->n; i++) {
		size_t lo = 0, hi = ls->n;

		while (lo + 1 < hi) {
			size_t mid = (lo + hi) / 2;

			if (orig[mid] <= ls->off[i])
				lo = mid;
			else
				hi = mid;
		}
		type[i] = ls->type[lo];
	}
	free(orig);
	free(ls->type);
	ls->type = type;
	return 0;
}

/*
 * Hand @l the sorted listing @ls and make its subdirectories.  Under qlock
 * (ldir_new).  Returns 0 or -ENOMEM; @ls is emptied either way.
 */
static int listing_give(struct dirscan *sc, struct ldir *l, struct listing *ls)
{
	uint32_t nsubs = 0;
	int ret = 0;

	for (size_t i = 0; i < ls->n; i++)
		nsubs += ls->type[i] == (S_IFDIR >> 12);
	if (nsubs) {
		l->subs = malloc(nsubs * sizeof(*l->subs));
		l->subat = malloc(nsubs * sizeof(*l->subat));
		if (!l->subs || !l->subat) {
			ret = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < ls->n; i++) {
			struct ldir *sub;

			if (ls->type[i] != (S_IFDIR >> 12))
				continue;
			sub = ldir_new(sc, l, ls->names.p + ls->off[i]);
			if (!sub) {
				ret = -ENOMEM;
				goto out;
			}
			l->subat[l->nsubs] = (uint32_t)i;
			l->subs[l->nsubs++] = sub;
		}
	}
	l->n = (uint32_t)ls->n;
	l->names = ls->names.p;
	l->off = ls->off;
	l->type = ls->type;
	l->multi = ls->multi;
	memset(ls, 0, sizeof(*ls));
	return 0;
out:
	free(ls->names.p);
	free(ls->off);
	free(ls->type);
	memset(ls, 0, sizeof(*ls));
	return ret;
}

/*
 * Entry @name of the directory being read, at @path, with attributes @a
 * (a symlink's @target; a regular file with several names: @multi, known
 * by @dev and @ino): into the batch and the directory's listing, the
 * batch handed on when full.  Returns 0 or -errno (after fail()).
 */
static int batch_add(struct dirscan *sc, struct batch *bt, struct listing *ls,
		     const char *path, const char *name, const struct sfs_attr *a,
		     const char *target, bool multi, dev_t dev, ino_t ino)
{
	struct rec *r = &bt->r[bt->n];
	int ret;

	memset(r, 0, sizeof(*r));
	r->a = *a;
	r->path = strdup(path);
	r->target = S_ISLNK(a->mode) ? strdup(target) : NULL;
	if (!r->path || (S_ISLNK(a->mode) && !r->target)) {
		free(r->path);
		free(r->target);
		fail(sc, -ENOMEM, "%s/%s: %s", sc->root, path, strerror(ENOMEM));
		return -ENOMEM;
	}
	if (S_ISREG(a->mode)) {
		r->multi = multi;
		r->dev = dev;
		r->ino = ino;
	}
	bt->n++;
	ret = listing_add(ls, name, a->mode, r->multi);
	if (ret) {
		fail(sc, ret, "%s/%s: %s", sc->root, path, strerror(-ret));
		return ret;
	}
	return bt->n == BATCH ? batch_flush(sc, bt) : 0;
}

/* What ends reading directory @rel (@ret so far): the last batch, the sorted listing. */
static int scan_done(struct dirscan *sc, const char *rel, struct batch *bt,
		     struct listing *ls, int ret)
{
	if (!ret)
		ret = batch_flush(sc, bt);
	if (!ret && (ret = listing_sort(ls)))
		fail(sc, ret, "%s/%s: %s", sc->root, rel, strerror(-ret));
	if (!ret && sc->delay_us)
		usleep(sc->delay_us);
	return ret;
}

/* Read directory @l: stamp it, batch its entries, list them for the live index. */
static int scan_one(struct dirscan *sc, struct ldir *l, struct batch *bt,
		    struct listing *ls)
{
	const char *rel = l->path;
	struct stat st;
	struct dirent *de;
	DIR *d;
	int dfd, ret = 0;

	dfd = open_dir(sc, rel);
	if (dfd < 0) {
		fail(sc, dfd, "%s/%s: %s", sc->root, rel, strerror(-dfd));
		return dfd;
	}
	/* before reading: a change made after this shows in the stamp */
	if (fstat(dfd, &st) < 0) {
		ret = -errno;
		close(dfd);
		fail(sc, ret, "%s/%s: %s", sc->root, rel, strerror(-ret));
		return ret;
	}
	pthread_mutex_lock(&sc->block);
	ret = stamp_add(sc, rel, &st);
	pthread_mutex_unlock(&sc->block);
	d = ret ? NULL : fdopendir(dfd);
	if (!d) {
		ret = ret ? ret : -errno;
		close(dfd);
		fail(sc, ret, "%s/%s: %s", sc->root, rel, strerror(-ret));
		return ret;
	}
	while ((errno = 0, de = readdir(d))) {
		char path[PATH_MAX], target[PATH_MAX];
		struct sfs_attr a;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "",
			     de->d_name) >= (int)sizeof(path)) {
			ret = -ENAMETOOLONG;
			fail(sc, ret, "%s/%s/%s: %s", sc->root, rel, de->d_name, strerror(-ret));
			break;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			ret = -errno;
			fail(sc, ret, "%s/%s: %s", sc->root, path, strerror(-ret));
			break;
		}
		target[0] = '\0';
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlinkat(dirfd(d), de->d_name, target,
					       sizeof(target) - 1);

			if (n < 0) {
				ret = -errno;
				fail(sc, ret, "%s/%s: %s", sc->root, path, strerror(-ret));
				break;
			}
			target[n] = '\0';
		} else if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
			log_warn("scan %s/%s: not a file, directory or symlink: skipped",
				 sc->root, path);
			pthread_mutex_lock(&sc->block);
			sc->skipped++;
			pthread_mutex_unlock(&sc->block);
			continue;
		}
		dirscan_attr_of(path, &st, &a);
		ret = batch_add(sc, bt, ls, path, de->d_name, &a, target, st.st_nlink > 1,
				st.st_dev, st.st_ino);
		if (ret)
			break;
	}
	if (!ret && errno) {
		ret = -errno;
		fail(sc, ret, "%s/%s: readdir: %s", sc->root, rel, strerror(-ret));
	}
	closedir(d);
	return scan_done(sc, rel, bt, ls, ret);
}

/*
 * Read directory @l of a source (dirscan_start_source()): as scan_one(),
 * through the source's calls, with no stamp.
 */
static int scan_one_source(struct dirscan *sc, struct ldir *l, struct batch *bt,
			   struct listing *ls)
{
	const struct dirscan_source *src = &sc->src;
	const char *rel = l->path;
	struct dirscan_entry e;
	char path[PATH_MAX], target[PATH_MAX];
	void *d;
	int r, ret = 0;

	r = src->opendir(src->arg, rel, &d);
	if (r < 0) {
		fail(sc, r, "%s/%s: %s", sc->root, rel, strerror(-r));
		return r;
	}
	pthread_mutex_lock(&sc->block);
	sc->dirs++;
	pthread_mutex_unlock(&sc->block);
	while ((r = src->readdir(src->arg, d, rel, &e, target, sizeof(target))) > 0) {
		if (e.skip) {
			pthread_mutex_lock(&sc->block);
			sc->skipped++;
			pthread_mutex_unlock(&sc->block);
			continue;
		}
		if (snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "",
			     e.name) >= (int)sizeof(path)) {
			ret = -ENAMETOOLONG;
			fail(sc, ret, "%s/%s/%s: %s", sc->root, rel, e.name, strerror(-ret));
			break;
		}
		ret = batch_add(sc, bt, ls, path, e.name, &e.a, target, e.multi, (dev_t)e.dev,
				(ino_t)e.ino);
		if (ret)
			break;
	}
	if (r < 0 && !ret) {
		ret = r;
		fail(sc, ret, "%s/%s: readdir: %s", sc->root, rel, strerror(-ret));
	}
	src->closedir(src->arg, d);
	return scan_done(sc, rel, bt, ls, ret);
}

/* The next directory to read, or NULL when the scan is over or failed. */
static struct ldir *pop(struct dirscan *sc)
{
	struct ldir *l = NULL;

	pthread_mutex_lock(&sc->qlock);
	while (!sc->err && !sc->n && sc->busy)
		pthread_cond_wait(&sc->qcond, &sc->qlock);
	if (!sc->err && sc->n) {
		l = heap_pop(sc);
		l->state = L_READING;
		sc->busy++;
	} else if (!sc->err && !sc->walked) {
		sc->walked = true;
		pthread_cond_broadcast(&sc->lcond);
	}
	pthread_mutex_unlock(&sc->qlock);
	return l;
}

/* @l was read (@ret 0, its listing in @ls) or failed. */
static void done_one(struct dirscan *sc, struct ldir *l, struct listing *ls, int ret)
{
	pthread_mutex_lock(&sc->qlock);
	if (!ret && !sc->err) {
		ret = listing_give(sc, l, ls);
		for (uint32_t j = 0; !ret && j < l->nsubs; j++)
			ret = heap_push(sc, l->subs[j]);
		if (!ret) {
			l->state = L_DONE;
			ret = prefix_advance(sc);
		}
		if (ret && !sc->err) {
			sc->err = ret;
			snprintf(sc->msg, sizeof(sc->msg), "%s/%s: %s", sc->root,
				 l->path, strerror(-ret));
			pthread_cond_broadcast(&sc->lcond);
		}
		pthread_cond_broadcast(&sc->qcond);
	}
	if (!--sc->busy && !sc->n)
		pthread_cond_broadcast(&sc->qcond);
	pthread_mutex_unlock(&sc->qlock);
	free(ls->names.p);
	free(ls->off);
	free(ls->type);
	memset(ls, 0, sizeof(*ls));
}

static void *worker(void *arg)
{
	struct dirscan *sc = arg;
	struct batch *bt = calloc(1, sizeof(*bt));
	struct listing ls = { 0 };
	struct ldir *l;

	if (!bt) {
		fail(sc, -ENOMEM, "%s: %s", sc->root, strerror(ENOMEM));
		return NULL;
	}
	while ((l = pop(sc))) {
		int ret = sc->src.opendir ? scan_one_source(sc, l, bt, &ls) :
			  scan_one(sc, l, bt, &ls);

		batch_clear(bt);
		done_one(sc, l, &ls, ret);
	}
	free(bt);
	return NULL;
}

void dirscan_cancel(struct dirscan *sc)
{
	pthread_mutex_lock(&sc->qlock);
	/* once every directory is read, building the manifest is worth the wait */
	if (!sc->walked && !sc->err) {
		sc->err = -ECANCELED;
		snprintf(sc->msg, sizeof(sc->msg), "%s: scan cancelled",
			 sc->root ? sc->root : "");
	}
	pthread_cond_broadcast(&sc->qcond);
	pthread_cond_broadcast(&sc->lcond);
	pthread_mutex_unlock(&sc->qlock);
}

void dirscan_destroy(struct dirscan *sc)
{
	if (!sc)
		return;
	dirscan_cancel(sc);
	for (unsigned i = 0; i < sc->nthreads; i++)
		pthread_join(sc->tids[i], NULL);
	for (size_t i = 0; i < sc->nall; i++)
		ldir_free(sc->all[i]);
	free(sc->all);
	free(sc->heap);
	free(sc->canon);
	free(sc->tids);
	manifest_builder_destroy(sc->b);
	inomap_release(&sc->links);
	free(sc->stamps.p);
	pthread_mutex_destroy(&sc->qlock);
	pthread_cond_destroy(&sc->qcond);
	pthread_cond_destroy(&sc->lcond);
	pthread_mutex_destroy(&sc->block);
	if (sc->rootfd >= 0)
		close(sc->rootfd);
	free(sc->root);
	free(sc);
}


/*
 * Start @sc (its rootfd or src set) on the root of attributes @a: workers
 * up, back once the root is read.  Frees @sc on failure.
 */
static int start(struct dirscan *sc, const char *root, const struct sfs_attr *a,
		 unsigned threads, uint32_t chunk_size, unsigned delay_us,
		 struct dirscan **out, char *err, size_t errlen)
{
	struct ldir *top;
	int ret;

	if (!threads)
		threads = 1;
	sc->delay_us = delay_us;
	pthread_mutex_init(&sc->qlock, NULL);
	pthread_cond_init(&sc->qcond, NULL);
	pthread_cond_init(&sc->lcond, NULL);
	pthread_mutex_init(&sc->block, NULL);
	sc->root = strdup(root);
	sc->b = manifest_builder_create(chunk_size);
	sc->tids = calloc(threads, sizeof(*sc->tids));
	if (!sc->root || !sc->b || !sc->tids)
		goto nomem_destroy;
	/* the root: entry 0, its children from index 1 */
	ret = manifest_builder_add(sc->b, "", a, NULL, NULL, 0);
	if (ret) {
		dirscan_destroy(sc);
		snprintf(err, errlen, "%s: %s", root, strerror(-ret));
		return ret;
	}
	sc->entries = 1;
	sc->next_start = 1;
	pthread_mutex_lock(&sc->qlock);
	top = ldir_new(sc, NULL, "");
	ret = top ? heap_push(sc, top) : -ENOMEM;
	if (!ret)
		ret = vec_push(&sc->canon, &sc->ncanon, &sc->capcanon, top);
	pthread_mutex_unlock(&sc->qlock);
	if (ret)
		goto nomem_destroy;
	for (; sc->nthreads < threads; sc->nthreads++)
		if (pthread_create(&sc->tids[sc->nthreads], NULL, worker, sc))
			break;
	if (!sc->nthreads) {
		dirscan_destroy(sc);
		snprintf(err, errlen, "%s: cannot start a scan thread", root);
		return -EAGAIN;
	}
	/* ready when the root is read: its listing is served from then on */
	pthread_mutex_lock(&sc->qlock);
	while (!sc->err && !sc->prefix)
		pthread_cond_wait(&sc->lcond, &sc->qlock);
	ret = sc->err;
	if (ret)
		snprintf(err, errlen, "%s", sc->msg);
	pthread_mutex_unlock(&sc->qlock);
	if (ret) {
		dirscan_destroy(sc);
		return ret;
	}
	*out = sc;
	return 0;

nomem_destroy:
	dirscan_destroy(sc);
	snprintf(err, errlen, "%s: %s", root, strerror(ENOMEM));
	return -ENOMEM;
}

int dirscan_start(int rootfd, const char *root, unsigned threads,
		  uint32_t chunk_size, unsigned delay_us, struct dirscan **out,
		  char *err, size_t errlen)
{
	struct dirscan *sc;
	struct stat st;
	struct sfs_attr a;
	int ret;

	if (fstat(rootfd, &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", root, strerror(-ret));
		return ret;
	}
	sc = calloc(1, sizeof(*sc));
	if (!sc) {
		snprintf(err, errlen, "%s: %s", root, strerror(ENOMEM));
		return -ENOMEM;
	}
	sc->rootfd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
	if (sc->rootfd < 0) {
		ret = -errno;
		free(sc);
		snprintf(err, errlen, "%s: %s", root, strerror(-ret));
		return ret;
	}
	dirscan_attr_of("", &st, &a);
	return start(sc, root, &a, threads, chunk_size, delay_us, out, err, errlen);
}

int dirscan_start_source(const struct dirscan_source *src, const struct sfs_attr *root_attr,
			 unsigned threads, uint32_t chunk_size, unsigned delay_us,
			 struct dirscan **out, char *err, size_t errlen)
{
	struct dirscan *sc = calloc(1, sizeof(*sc));

	if (!sc) {
		snprintf(err, errlen, "%s: %s", src->root, strerror(ENOMEM));
		return -ENOMEM;
	}
	sc->rootfd = -1;
	sc->src = *src;
	return start(sc, src->root, root_attr, threads, chunk_size, delay_us, out, err, errlen);
}

int dirscan_finish(struct dirscan *sc, struct dirscan_result *out,
		   char *err, size_t errlen)
{
	int ret;

	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < sc->nthreads; i++)
		pthread_join(sc->tids[i], NULL);
	sc->nthreads = 0;
	pthread_mutex_lock(&sc->qlock);
	ret = sc->err;
	if (ret)
		snprintf(err, errlen, "%s", sc->msg);
	pthread_mutex_unlock(&sc->qlock);
	if (ret)
		return ret;
	/* the workers are gone: block's fields are ours */
	if (sc->stamps.p) {
		uint64_t ndirs = sc->dirs;

		memcpy(sc->stamps.p + 8, &ndirs, 8);
	}
	ret = manifest_builder_finish(sc->b, 0, &out->manifest, &out->manifest_len);
	if (ret) {
		snprintf(err, errlen, "%s: building the manifest: %s", sc->root,
			 strerror(-ret));
		return ret;
	}
	/* its memory is not needed for live answers: give it back now */
	manifest_builder_destroy(sc->b);
	sc->b = NULL;
	inomap_release(&sc->links);
	memset(&sc->links, 0, sizeof(sc->links));
	out->stamps = sc->stamps.p;
	out->stamps_len = sc->stamps.len;
	memset(&sc->stamps, 0, sizeof(sc->stamps));
	out->entries = sc->entries;
	out->bytes = sc->bytes;
	out->skipped = sc->skipped;
	out->dirs = sc->dirs;
	return 0;
}

int dirscan_run(int rootfd, const char *root, unsigned threads,
		uint32_t chunk_size, struct dirscan_result *out,
		char *err, size_t errlen)
{
	struct dirscan *sc;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = dirscan_start(rootfd, root, threads, chunk_size, 0, &sc, err, errlen);
	if (ret)
		return ret;
	ret = dirscan_finish(sc, out, err, errlen);
	dirscan_destroy(sc);
	return ret;
}
