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
 * The live index, all under sc->qlock: sc->canon lists the directories in
 * the manifest's breadth-first order as far as it is known (a directory is
 * appended when its parent enters the prefix, with its own entry index);
 * sc->canon[0..sc->prefix) are read, with the entry index of their first
 * child.  A directory's names, types and children are written by the
 * worker that read it before it is marked L_DONE and never change after;
 * every ldir lives until dirscan_destroy().  Live calls copy what they
 * need under the lock and stat the source outside it.
 */
#include "dirscan.h"

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
#define STAMP_MAGIC	0x31534453u	/* "SDS1" */
#define STAMP_HDR	16	/* magic, 0, count */
#define STAMP_FIX	34	/* ino, mtime s/ns, ctime s/ns, path length */

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

struct growbuf {
	char *p;
	size_t len, cap;
};

enum { L_QUEUED, L_READING, L_DONE };

/* One directory of the tree.  See the top of the file for who writes what. */
struct ldir {
	struct ldir *parent;	/* NULL for the root */
	char *path;		/* relative to the root; "" for the root */
	uint32_t name_at;	/* its last component: path + name_at */
	uint32_t depth;
	uint8_t state;		/* L_*; protected by qlock */
	bool multi;		/* holds a file with several names */
	uint64_t self;		/* its entry index, once in sc->canon */
	uint64_t start;		/* its first child's entry index, once in the prefix */
	uint32_t n;		/* its children in the manifest */
	char *names;		/* their names, NUL-terminated, back to back */
	uint32_t *off;		/* child i (name order) is names + off[i] */
	uint8_t *type;		/* child i's S_IFMT >> 12 */
	struct ldir **subs;	/* its subdirectories, in name order */
	uint32_t *subat;	/* their positions among the children */
	uint32_t nsubs;
};

struct dirscan {
	int rootfd;		/* ours (dup) */
	char *root;
	unsigned delay_us;
	unsigned nthreads;
	pthread_t *tids;

	pthread_mutex_t qlock;
	pthread_cond_t qcond;	/* work to do, or the scan is over */
	pthread_cond_t lcond;	/* the prefix grew, or the scan is over */
	struct ldir **heap;	/* directories to read; protected by qlock */
	size_t n, cap;		/* protected by qlock */
	struct ldir **all;	/* every ldir, to free them; protected by qlock */
	size_t nall, capall;	/* protected by qlock */
	struct ldir **canon;	/* breadth-first order, as known; protected by qlock */
	size_t ncanon, capcanon, prefix;	/* protected by qlock */
	uint64_t next_start;	/* first child index of canon[prefix]; protected by qlock */
	unsigned busy;		/* workers reading a directory; protected by qlock */
	bool walked;		/* every directory read; protected by qlock */
	int err;		/* the first error; protected by qlock */
	char msg[600];		/* its message; protected by qlock */

	pthread_mutex_t block;
	struct manifest_builder *b;	/* protected by block */
	struct inomap links;		/* protected by block */
	struct growbuf stamps;		/* protected by block */
	uint64_t dirs, entries, bytes, skipped;	/* protected by block */
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

/* The attributes a scan records for @rel, whose lstat is @st. */
static void attr_of(const char *rel, const struct stat *st, struct sfs_attr *a)
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

/* Open @rel under the root, refusing symlinks anywhere in it. */
static int open_beneath(struct dirscan *sc, const char *rel, int flags)
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
	return open_beneath(sc, rel, O_RDONLY | O_DIRECTORY);
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
		struct rec *r;

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
		r = &bt->r[bt->n];
		memset(r, 0, sizeof(*r));
		attr_of(path, &st, &r->a);
		r->path = strdup(path);
		r->target = S_ISLNK(st.st_mode) ? strdup(target) : NULL;
		if (!r->path || (S_ISLNK(st.st_mode) && !r->target)) {
			free(r->path);
			free(r->target);
			ret = -ENOMEM;
			fail(sc, ret, "%s/%s: %s", sc->root, path, strerror(-ret));
			break;
		}
		if (S_ISREG(st.st_mode)) {
			r->multi = st.st_nlink > 1;
			r->dev = st.st_dev;
			r->ino = st.st_ino;
		}
		bt->n++;
		ret = listing_add(ls, de->d_name, st.st_mode, r->multi);
		if (ret) {
			fail(sc, ret, "%s/%s: %s", sc->root, path, strerror(-ret));
			break;
		}
		if (bt->n == BATCH && (ret = batch_flush(sc, bt)))
			break;
	}
	if (!ret && errno) {
		ret = -errno;
		fail(sc, ret, "%s/%s: readdir: %s", sc->root, rel, strerror(-ret));
	}
	closedir(d);
	if (!ret)
		ret = batch_flush(sc, bt);
	if (!ret && (ret = listing_sort(ls)))
		fail(sc, ret, "%s/%s: %s", sc->root, rel, strerror(-ret));
	if (!ret && sc->delay_us)
		usleep(sc->delay_us);
	return ret;
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
		int ret = scan_one(sc, l, bt, &ls);

		batch_clear(bt);
		done_one(sc, l, &ls, ret);
	}
	free(bt);
	return NULL;
}

/* Make a scan still reading directories stop soon; after that, nothing. */
static void dirscan_cancel(struct dirscan *sc)
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
	close(sc->rootfd);
	free(sc->root);
	free(sc);
}


int dirscan_start(int rootfd, const char *root, unsigned threads,
		  uint32_t chunk_size, unsigned delay_us, struct dirscan **out,
		  char *err, size_t errlen)
{
	struct dirscan *sc;
	struct stat st;
	struct sfs_attr a;
	struct ldir *top;
	int ret;

	if (!threads)
		threads = 1;
	if (fstat(rootfd, &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", root, strerror(-ret));
		return ret;
	}
	sc = calloc(1, sizeof(*sc));
	if (!sc)
		goto nomem;
	sc->rootfd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
	if (sc->rootfd < 0) {
		ret = -errno;
		free(sc);
		snprintf(err, errlen, "%s: %s", root, strerror(-ret));
		return ret;
	}
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
	attr_of("", &st, &a);
	ret = manifest_builder_add(sc->b, "", &a, NULL, NULL, 0);
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
nomem:
	snprintf(err, errlen, "%s: %s", root, strerror(ENOMEM));
	return -ENOMEM;
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
	{
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

/* ---- the live index ---- */

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

	fd = open_beneath(sc, rel, O_PATH | O_NOFOLLOW);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		ret = -errno;
	close(fd);
	if (ret)
		return ret;
	if ((st.st_mode & S_IFMT) != type) {
		log_err("source %s/%s changed type during the scan: remount to see the new version",
			sc->root, rel);
		return -EIO;
	}
	if (S_ISREG(st.st_mode) && st.st_nlink > 1)
		return -EAGAIN;
	attr_of(rel, &st, out);
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
	fd = open_beneath(sc, rel, O_PATH | O_NOFOLLOW);
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

/* ---- checking ---- */

struct check {
	int rootfd;
	const unsigned char **rec;	/* each record's start */
	size_t n;
	size_t next;			/* protected by lock */
	int changed;			/* protected by lock */
	char why[PATH_MAX + 100];	/* protected by lock */
	pthread_mutex_t lock;
};

static void check_one(struct check *ck, const unsigned char *f)
{
	char path[PATH_MAX];
	uint64_t ino;
	int64_t ms, cs;
	uint32_t mn, cn;
	uint16_t plen;
	struct stat st;
	const char *what = NULL;
	int e = 0;

	memcpy(&ino, f, 8);
	memcpy(&ms, f + 8, 8);
	memcpy(&mn, f + 16, 4);
	memcpy(&cs, f + 20, 8);
	memcpy(&cn, f + 28, 4);
	memcpy(&plen, f + 32, 2);
	memcpy(path, f + STAMP_FIX, plen);
	path[plen] = '\0';
	if (fstatat(ck->rootfd, path, &st,
		    AT_SYMLINK_NOFOLLOW | (plen ? 0 : AT_EMPTY_PATH)) < 0)
		e = errno;
	else if (!S_ISDIR(st.st_mode))
		what = "no longer a directory";
	else if ((uint64_t)st.st_ino != ino)
		what = "replaced (inode number changed)";
	else if (st.st_mtim.tv_sec != ms || (uint32_t)st.st_mtim.tv_nsec != mn)
		what = "mtime changed";
	else if (st.st_ctim.tv_sec != cs || (uint32_t)st.st_ctim.tv_nsec != cn)
		what = "ctime changed";
	if (!e && !what)
		return;
	pthread_mutex_lock(&ck->lock);
	if (!ck->changed) {
		ck->changed = 1;
		snprintf(ck->why, sizeof(ck->why), "directory \"%s\": %s",
			 plen ? path : ".", e ? strerror(e) : what);
	}
	pthread_mutex_unlock(&ck->lock);
}

static void *check_worker(void *arg)
{
	struct check *ck = arg;

	for (;;) {
		size_t i, end;

		pthread_mutex_lock(&ck->lock);
		i = ck->next;
		end = ck->changed ? i : MIN(ck->n, i + 64);
		ck->next = end;
		pthread_mutex_unlock(&ck->lock);
		if (i == end)
			return NULL;
		for (; i < end; i++)
			check_one(ck, ck->rec[i]);
	}
}

int dirscan_unchanged(int rootfd, const void *stamps, size_t len,
		      unsigned threads, char *why, size_t whylen)
{
	const unsigned char *p = stamps;
	struct check ck = { .rootfd = rootfd };
	pthread_t tids[64];
	unsigned started = 0;
	uint32_t magic;
	uint64_t n;
	size_t off = STAMP_HDR;

	if (len < STAMP_HDR)
		return -EINVAL;
	memcpy(&magic, p, 4);
	memcpy(&n, p + 8, 8);
	if (magic != STAMP_MAGIC || n == 0 || n > (len - STAMP_HDR) / STAMP_FIX)
		return -EINVAL;
	ck.rec = malloc(n * sizeof(*ck.rec));
	if (!ck.rec)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		uint16_t plen;

		if (len - off < STAMP_FIX)
			goto bad;
		memcpy(&plen, p + off + 32, 2);
		if (plen >= PATH_MAX || len - off - STAMP_FIX < plen ||
		    memchr(p + off + STAMP_FIX, '\0', plen))
			goto bad;
		ck.rec[i] = p + off;
		off += STAMP_FIX + plen;
	}
	if (off != len)
		goto bad;
	ck.n = n;
	pthread_mutex_init(&ck.lock, NULL);
	threads = MIN(MIN(threads, ARRAY_SIZE(tids)), (unsigned)(n / 256));
	for (; started < threads; started++)
		if (pthread_create(&tids[started], NULL, check_worker, &ck))
			break;
	check_worker(&ck);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	pthread_mutex_destroy(&ck.lock);
	free(ck.rec);
	if (ck.changed)
		snprintf(why, whylen, "%s", ck.why);
	return ck.changed;
bad:
	free(ck.rec);
	return -EINVAL;
}
