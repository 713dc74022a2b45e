/*
 * dirscan: see dirscan.h.
 *
 * Threads share a stack of directory paths (relative to the root) under
 * sc->qlock; a worker pops one, reads it, pushes its subdirectories and
 * adds its entries to the manifest builder in batches under sc->block
 * (builder, hard-link map, stamps and totals).  The two locks are never
 * held together.  The first error stops every worker; the scan then fails
 * as a whole (a dataset with holes is never mounted).
 */
#include "dirscan.h"

#include "backend.h"
#include "inomap.h"
#include "log.h"
#include "manifest.h"
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

struct scan {
	int rootfd;
	const char *root;

	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	char **stack;		/* directories to read; protected by qlock */
	size_t n, cap;		/* protected by qlock */
	unsigned busy;		/* workers reading a directory; protected by qlock */
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

/* Record the state @st of directory @rel.  Under sc->block. */
static int stamp_add(struct scan *sc, const char *rel, const struct stat *st)
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

static void fail(struct scan *sc, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(struct scan *sc, int err, const char *fmt, ...)
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
static int batch_flush(struct scan *sc, struct batch *bt)
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

static int open_dir(struct scan *sc, const char *rel)
{
	struct open_how how = {
		.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
	};
	const char *p = rel[0] ? rel : ".";
	int fd = (int)syscall(SYS_openat2, sc->rootfd, p, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = openat(sc->rootfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int push(struct scan *sc, char *rel)
{
	int ret = 0;

	pthread_mutex_lock(&sc->qlock);
	if (sc->n == sc->cap) {
		size_t cap = sc->cap ? sc->cap * 2 : 256;
		char **ns = realloc(sc->stack, cap * sizeof(*ns));

		if (ns) {
			sc->stack = ns;
			sc->cap = cap;
		} else {
			ret = -ENOMEM;
		}
	}
	if (!ret) {
		sc->stack[sc->n++] = rel;
		pthread_cond_signal(&sc->qcond);
	}
	pthread_mutex_unlock(&sc->qlock);
	if (ret) {
		fail(sc, ret, "%s/%s: %s", sc->root, rel, strerror(-ret));
		free(rel);
	}
	return ret;
}

/* Read directory @rel: stamp it, batch its entries, push its subdirectories. */
static int scan_one(struct scan *sc, const char *rel, struct batch *bt)
{
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
		attr_from_stat(&st, &r->a);
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
			content_id(path, &st, &r->a.content);
			r->multi = st.st_nlink > 1;
			r->dev = st.st_dev;
			r->ino = st.st_ino;
		}
		bt->n++;
		if (S_ISDIR(st.st_mode)) {
			char *sub = strdup(path);

			ret = sub ? push(sc, sub) : -ENOMEM;
			if (!sub)
				fail(sc, ret, "%s/%s: %s", sc->root, path, strerror(-ret));
			if (ret)
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
	return ret;
}

/* The next directory to read, or NULL when the scan is over or failed. */
static char *pop(struct scan *sc)
{
	char *rel = NULL;

	pthread_mutex_lock(&sc->qlock);
	while (!sc->err && !sc->n && sc->busy)
		pthread_cond_wait(&sc->qcond, &sc->qlock);
	if (!sc->err && sc->n) {
		rel = sc->stack[--sc->n];
		sc->busy++;
	}
	pthread_mutex_unlock(&sc->qlock);
	return rel;
}

static void done_one(struct scan *sc)
{
	pthread_mutex_lock(&sc->qlock);
	if (!--sc->busy && !sc->n)
		pthread_cond_broadcast(&sc->qcond);
	pthread_mutex_unlock(&sc->qlock);
}

static void *worker(void *arg)
{
	struct scan *sc = arg;
	struct batch *bt = calloc(1, sizeof(*bt));
	char *rel;

	if (!bt) {
		fail(sc, -ENOMEM, "%s: %s", sc->root, strerror(ENOMEM));
		return NULL;
	}
	while ((rel = pop(sc))) {
		scan_one(sc, rel, bt);
		batch_clear(bt);
		free(rel);
		done_one(sc);
	}
	free(bt);
	return NULL;
}

int dirscan_run(int rootfd, const char *root, unsigned threads,
		uint32_t chunk_size, struct dirscan_result *out,
		char *err, size_t errlen)
{
	struct scan sc = { .rootfd = rootfd, .root = root };
	pthread_t *tids;
	struct stat st;
	struct sfs_attr a;
	unsigned started = 0;
	char *top;
	int ret;

	memset(out, 0, sizeof(*out));
	if (!threads)
		threads = 1;
	if (fstat(rootfd, &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", root, strerror(-ret));
		return ret;
	}
	sc.b = manifest_builder_create(chunk_size);
	tids = calloc(threads, sizeof(*tids));
	top = strdup("");
	if (!sc.b || !tids || !top) {
		manifest_builder_destroy(sc.b);
		free(tids);
		free(top);
		snprintf(err, errlen, "%s: %s", root, strerror(ENOMEM));
		return -ENOMEM;
	}
	pthread_mutex_init(&sc.qlock, NULL);
	pthread_cond_init(&sc.qcond, NULL);
	pthread_mutex_init(&sc.block, NULL);
	attr_from_stat(&st, &a);
	ret = manifest_builder_add(sc.b, "", &a, NULL, NULL, 0);
	if (!ret)
		sc.entries = 1;
	else
		free(top);
	if (!ret && !push(&sc, top)) {	/* push() frees @top on failure */
		for (; started < threads; started++)
			if (pthread_create(&tids[started], NULL, worker, &sc))
				break;
		if (!started)
			fail(&sc, -EAGAIN, "%s: cannot start a scan thread", root);
		else
			worker(&sc);	/* this thread helps too */
		for (unsigned i = 0; i < started; i++)
			pthread_join(tids[i], NULL);
	}
	if (!ret)
		ret = sc.err;
	if (ret && sc.msg[0])
		snprintf(err, errlen, "%s", sc.msg);
	else if (ret)
		snprintf(err, errlen, "%s: %s", root, strerror(-ret));
	if (!ret) {
		uint64_t ndirs = sc.dirs;

		memcpy(sc.stamps.p + 8, &ndirs, 8);
		ret = manifest_builder_finish(sc.b, 0, &out->manifest, &out->manifest_len);
		if (ret)
			snprintf(err, errlen, "%s: building the manifest: %s", root,
				 strerror(-ret));
	}
	for (size_t i = 0; i < sc.n; i++)
		free(sc.stack[i]);
	free(sc.stack);
	free(tids);
	manifest_builder_destroy(sc.b);
	inomap_release(&sc.links);
	pthread_mutex_destroy(&sc.qlock);
	pthread_cond_destroy(&sc.qcond);
	pthread_mutex_destroy(&sc.block);
	if (ret) {
		free(sc.stamps.p);
		return ret;
	}
	out->stamps = sc.stamps.p;
	out->stamps_len = sc.stamps.len;
	out->entries = sc.entries;
	out->bytes = sc.bytes;
	out->skipped = sc.skipped;
	out->dirs = sc.dirs;
	return 0;
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
