/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest_lazy: see manifest_lazy.h.
 *
 * Design.  struct mlazy is the manifest_source of one open manifest: the
 * copy's fd (written with pwrite; the reader maps the same file, so the
 * bytes are visible to it through the page cache the moment pwrite
 * returns), the marks file mapped shared and writable, and the header's
 * section layout, so a fill can turn a run of parts into one contiguous
 * byte range.  A part's mark is set (a release store) only after its bytes
 * are written; the reader's hash decides anyway.
 *
 * Locking: z->lock protects busy[] and failed[]; the marks are single
 * bytes read and written atomically without it (another process may write
 * them too).  The remote read and the pwrite run unlocked: a thread that
 * touches a part being fetched waits on z->done, which the fetcher
 * broadcasts when it ends, whatever the outcome.
 */
#include "manifest_lazy.h"

#include "log.h"
#include "manifest.h"
#include "manifest_i.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LZ_BUSY		16	/* fetches in flight at once per manifest */
#define LZ_FAILED	8	/* failed ranges remembered */
#define LZ_HOLD_MS	1000	/* how long a failed range fails at once */
#define LZ_AHEAD	64	/* parts fetched at once by a walk, at most */

/* a lookup can ask for a part that fails, as often as it likes (issue 27) */
static struct log_ratelimit rl_fetch = LOG_RATELIMIT_INIT(10000, 10);

/* The sections, as the header gives them (bounds checked). */
struct lz_layout {
	uint32_t shift;
	int nsec;		/* 3, or 5 with packs */
	uint64_t nparts, tab_off;
	uint64_t part0[MF2_NSEC + 1];	/* first part of each section; [nsec] = nparts */
	uint64_t off[MF2_NSEC], len[MF2_NSEC];
};

struct mlazy {
	int fd;				/* the copy, read-write */
	uint8_t *marks;			/* nparts bytes, mapped shared */
	struct lz_layout l;
	struct manifest_remote r;
	char label[128];
	_Atomic uint64_t fetched;	/* bytes read from the remote */
	pthread_mutex_t lock;
	pthread_cond_t done;		/* a fetch ended */
	struct { uint64_t lo, hi; bool used; } busy[LZ_BUSY];	/* protected by lock */
	struct { uint64_t lo, hi, until_ms; } failed[LZ_FAILED];	/* protected by lock */
	unsigned int failed_next;	/* protected by lock */
	bool open_failed;		/* a fetch failed during manifest_open_fd() */
	/* the background fill (manifest_lazy_open's @fill) */
	pthread_t filler;
	bool filling;			/* the thread runs */
	bool stop;			/* protected by lock */
	pthread_cond_t wake;		/* stop was set */
};

int manifest_lazy_marks_path(const char *path, char *out, size_t outlen)
{
	return snprintf(out, outlen, "%s.parts", path) >= (int)outlen ? -ENAMETOOLONG : 0;
}

/*
 * The layout in the @hn header bytes at @h of a manifest of @size bytes.
 * Only what the fills need, bounds checked; manifest_open_fd() checks the
 * rest (and the header's checksum).  0, -ENOTSUP (format 1) or -EINVAL.
 */
static int layout_parse(const uint8_t *h, size_t hn, uint64_t size,
			struct lz_layout *l, char *err, size_t errlen)
{
	uint64_t p = 0;

	if (hn < 16 || memcmp(h + H_MAGIC, MF_MAGIC, 8))
		return errf(err, errlen, -EINVAL, "bad magic (not a stagefs manifest)");
	if (ld32(h + H_FORMAT) == MF_FORMAT_V1)
		return errf(err, errlen, -ENOTSUP, "a format 1 manifest");
	if (ld32(h + H_FORMAT) != MF_FORMAT_VERSION || hn < MF2_HEADER_SIZE)
		return errf(err, errlen, -EINVAL, "unsupported manifest format version %u",
			    ld32(h + H_FORMAT));
	l->shift = ld32(h + H2_PARTSHIFT);
	l->tab_off = ld64(h + H2_TAB_OFF);
	l->nparts = ld64(h + H2_NPARTS);
	if (l->shift < MF2_PART_SHIFT_MIN || l->shift > MF2_PART_SHIFT_MAX ||
	    l->tab_off > size || l->nparts == 0 || l->nparts > (size - l->tab_off) / 8)
		return errf(err, errlen, -EINVAL, "bad part table");
	l->nsec = mf2_nsec(ld32(h + H_INCOMPAT));
	for (int s = 0; s < l->nsec; s++) {
		l->off[s] = ld64(h + mf2_sec_off_at(s));
		l->len[s] = ld64(h + mf2_sec_len_at(s));
		if (l->off[s] > size || l->len[s] > size - l->off[s])
			return errf(err, errlen, -EINVAL, "a section lies outside the manifest");
		l->part0[s] = p;
		p += mf2_nparts(l->len[s], l->shift);
	}
	l->part0[l->nsec] = p;
	if (p != l->nparts)
		return errf(err, errlen, -EINVAL, "part count does not match the sections");
	return 0;
}

/* Section of part @p, and the part's bytes. */
static int part_range(const struct lz_layout *l, uint64_t p, uint64_t *off,
		      uint64_t *len)
{
	int s = 0;
	uint64_t at;

	while (s + 1 < l->nsec && p >= l->part0[s + 1])
		s++;
	at = (p - l->part0[s]) << l->shift;

	*off = l->off[s] + at;
	*len = MIN(l->len[s] - at, 1ull << l->shift);
	return s;
}

static bool marked(const struct mlazy *z, uint64_t p)
{
	return __atomic_load_n(&z->marks[p], __ATOMIC_ACQUIRE) != 0;
}

/* A fetch covering @p is in flight.  Called with z->lock held. */
static bool busy_has(const struct mlazy *z, uint64_t p)
{
	for (int i = 0; i < LZ_BUSY; i++)
		if (z->busy[i].used && z->busy[i].lo <= p && p <= z->busy[i].hi)
			return true;
	return false;
}

/* A fetch covering @p failed less than LZ_HOLD_MS ago.  z->lock held. */
static bool failed_lately(const struct mlazy *z, uint64_t p)
{
	uint64_t now = now_ms();

	for (int i = 0; i < LZ_FAILED; i++)
		if (z->failed[i].until_ms > now && z->failed[i].lo <= p && p <= z->failed[i].hi)
			return true;
	return false;
}

/* Read parts @lo..@hi (one section) from the remote into the copy; mark them. */
static int fetch(struct mlazy *z, uint64_t lo, uint64_t hi)
{
	uint64_t off, len, hoff, hlen, n;
	char msg[256];
	void *buf;
	ssize_t w;
	int rc;

	part_range(&z->l, lo, &off, &len);
	part_range(&z->l, hi, &hoff, &hlen);
	n = hoff + hlen - off;
	buf = malloc(n);
	if (!buf)
		return -ENOMEM;
	rc = z->r.read(z->r.arg, buf, n, off, msg, sizeof(msg));
	if (rc) {
		log_limited(&rl_fetch, LOG_ERR, "%s: cannot fetch parts %" PRIu64 "..%" PRIu64 " of the manifest (bytes %" PRIu64 "..%" PRIu64 "): %s",
			    z->label, lo, hi, off, off + n, msg);
		goto out_free;
	}
	atomic_fetch_add_explicit(&z->fetched, n, memory_order_relaxed);
	w = pwrite_full(z->fd, buf, n, (off_t)off);
	if (w != (ssize_t)n) {
		rc = w < 0 ? (int)w : -EIO;
		log_limited(&rl_fetch, LOG_ERR, "%s: cannot write parts %" PRIu64 "..%" PRIu64 " into the manifest copy: %s",
			    z->label, lo, hi, strerror(-rc));
		goto out_free;
	}
	for (uint64_t p = lo; p <= hi; p++)
		__atomic_store_n(&z->marks[p], 1, __ATOMIC_RELEASE);
out_free:
	free(buf);
	return rc;
}

/* manifest_source.fill */
static int lz_fill(void *arg, uint64_t part, uint64_t off, uint64_t len, bool again)
{
	struct mlazy *z = arg;
	uint64_t hi, o, l;
	int slot, s, rc;

	(void)off;
	(void)len;
	if (part >= z->l.nparts)
		return -EIO;
	if (!again && marked(z, part))
		return 0;
	pthread_mutex_lock(&z->lock);
	for (;;) {
		if (!again && marked(z, part)) {
			pthread_mutex_unlock(&z->lock);
			return 0;
		}
		if (failed_lately(z, part)) {
			pthread_mutex_unlock(&z->lock);
			return -EIO;
		}
		slot = -1;
		if (!busy_has(z, part))
			for (int i = 0; i < LZ_BUSY && slot < 0; i++)
				if (!z->busy[i].used)
					slot = i;
		if (slot >= 0)
			break;
		/* someone fetches it (bounded by the remote's timeout): theirs will do */
		pthread_cond_wait(&z->done, &z->lock);
		again = false;
	}
	/*
	 * A walk: the parts just before are here, so fetch on, twice as many
	 * as are there behind it (a readahead window that doubles, up to
	 * LZ_AHEAD); a lone touch fetches its part alone.
	 */
	s = part_range(&z->l, part, &o, &l);
	hi = part;
	if (!again) {
		uint64_t behind = 0, ahead;

		while (behind < LZ_AHEAD && part - behind > z->l.part0[s] &&
		       marked(z, part - behind - 1))
			behind++;
		ahead = MIN(2 * behind, (uint64_t)LZ_AHEAD);
		while (hi + 1 < z->l.part0[s + 1] && hi + 1 - part < ahead &&
		       !marked(z, hi + 1) && !busy_has(z, hi + 1))
			hi++;
	}
	z->busy[slot].lo = part;
	z->busy[slot].hi = hi;
	z->busy[slot].used = true;
	pthread_mutex_unlock(&z->lock);

	rc = fetch(z, part, hi);

	pthread_mutex_lock(&z->lock);
	z->busy[slot].used = false;
	if (rc) {
		unsigned int k = z->failed_next++ % LZ_FAILED;

		z->failed[k].lo = part;
		z->failed[k].hi = hi;
		z->failed[k].until_ms = now_ms() + LZ_HOLD_MS;
		z->open_failed = true;
	}
	pthread_cond_broadcast(&z->done);
	pthread_mutex_unlock(&z->lock);
	return rc;
}

/* manifest_source.fetched */
static uint64_t lz_fetched(void *arg)
{
	struct mlazy *z = arg;

	return atomic_load_explicit(&z->fetched, memory_order_relaxed);
}

/*
 * Wait @ms on z->wake unless asked to stop; true if asked.  z->lock held.
 */
static bool fill_nap(struct mlazy *z, uint64_t ms)
{
	uint64_t until = now_ns() + ms * 1000000ULL;

	while (!z->stop && cond_wait_until_ns(&z->wake, &z->lock, until) == 0)
		;
	return z->stop;
}

/*
 * The background fill: the parts nobody fetched yet, in file order, up to
 * LZ_AHEAD a fetch, one fetch at a time and only while no reader's fetch
 * is in flight (they come first).  After a failure it waits, doubling up to
 * a minute, and tries again; it ends when every part is there or at close.
 */
static void *lz_filler(void *arg)
{
	struct mlazy *z = arg;
	uint64_t p = 0, backoff = LZ_HOLD_MS, t0 = now_ms(), bytes0 = lz_fetched(z);
	int slot, s;

	pthread_mutex_lock(&z->lock);
	while (!z->stop && p < z->l.nparts) {
		uint64_t hi, o, l;
		bool readers = false;
		int rc;

		if (marked(z, p) || busy_has(z, p)) {
			p++;
			continue;
		}
		for (int i = 0; i < LZ_BUSY; i++)
			readers |= z->busy[i].used;
		if (readers) {
			fill_nap(z, 10);
			continue;
		}
		slot = 0;	/* all free */
		s = part_range(&z->l, p, &o, &l);
		hi = p;
		while (hi + 1 < z->l.part0[s + 1] && hi + 1 - p < LZ_AHEAD &&
		       !marked(z, hi + 1))
			hi++;
		z->busy[slot].lo = p;
		z->busy[slot].hi = hi;
		z->busy[slot].used = true;
		pthread_mutex_unlock(&z->lock);
		rc = fetch(z, p, hi);
		pthread_mutex_lock(&z->lock);
		z->busy[slot].used = false;
		pthread_cond_broadcast(&z->done);
		if (rc) {
			if (fill_nap(z, backoff))
				break;
			backoff = MIN(backoff * 2, 60000ull);
			continue;
		}
		backoff = LZ_HOLD_MS;
		p = hi + 1;
	}
	if (p >= z->l.nparts)
		log_info("%s: the manifest copy is complete (%" PRIu64 " bytes fetched in the background in %" PRIu64 " ms)",
			 z->label, lz_fetched(z) - bytes0, now_ms() - t0);
	pthread_mutex_unlock(&z->lock);
	return NULL;
}

/* manifest_source.release */
static void lz_release(void *arg)
{
	struct mlazy *z = arg;

	if (z->filling) {
		pthread_mutex_lock(&z->lock);
		z->stop = true;
		pthread_cond_broadcast(&z->wake);
		pthread_mutex_unlock(&z->lock);
		pthread_join(z->filler, NULL);	/* within one remote read */
	}
	pthread_cond_destroy(&z->wake);
	munmap(z->marks, z->l.nparts);
	close(z->fd);
	pthread_cond_destroy(&z->done);
	pthread_mutex_destroy(&z->lock);
	free(z);
}

/*
 * A temporary file beside @path (".fetch.XXXXXX", which the backend
 * prunes), open read-write: its fd, or -errno.
 */
static int tmp_create(const char *path, char *tmp, size_t tmplen)
{
	const char *slash = strrchr(path, '/');
	int dlen = slash ? (int)(slash - path) : 1;
	int fd;

	if (snprintf(tmp, tmplen, "%.*s/.fetch.XXXXXX", dlen, slash ? path : ".") >= (int)tmplen)
		return -ENAMETOOLONG;
	fd = mkostemp(tmp, O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/*
 * Create the copy: header and part table from the remote, the rest holes;
 * the marks, all zero.  Written under temporary names, then renamed (marks
 * first: a copy is never seen without marks that match it).  On success
 * *@fd and *@mfd are open read-write on them.
 */
static int copy_create(const char *path, const char *mpath, uint64_t size,
		       const struct manifest_remote *r, struct lz_layout *l,
		       int *fd, int *mfd, uint64_t *fetched, char *err, size_t errlen)
{
	char tmp[PATH_MAX], mtmp[PATH_MAX], msg[256];
	uint8_t *buf;
	size_t hn = (size_t)MIN(size, (uint64_t)MF_HEADER_MAX);
	ssize_t w;
	int rc;

	*fd = *mfd = -1;
	buf = malloc(MF_HEADER_MAX);
	if (!buf)
		return errf(err, errlen, -ENOMEM, "out of memory");
	rc = r->read(r->arg, buf, hn, 0, msg, sizeof(msg));
	if (rc) {
		errf(err, errlen, rc, "%s", msg);
		goto out_free;
	}
	*fetched += hn;
	rc = layout_parse(buf, hn, size, l, err, errlen);
	if (rc)
		goto out_free;
	rc = tmp_create(path, tmp, sizeof(tmp));
	if (rc < 0) {
		errf(err, errlen, rc, "cannot create a file beside %s: %s", path, strerror(-rc));
		goto out_free;
	}
	*fd = rc;
	w = ftruncate(*fd, (off_t)size) < 0 ? -errno : pwrite_full(*fd, buf, hn, 0);
	if (w != (ssize_t)hn) {
		rc = w < 0 ? (int)w : -EIO;
		errf(err, errlen, rc, "cannot write %s: %s", tmp, strerror(-rc));
		goto out_unlink;
	}
	free(buf);
	buf = malloc(l->nparts * 8);
	if (!buf) {
		rc = errf(err, errlen, -ENOMEM, "out of memory");
		goto out_unlink;
	}
	rc = r->read(r->arg, buf, l->nparts * 8, l->tab_off, msg, sizeof(msg));
	if (rc) {
		errf(err, errlen, rc, "%s", msg);
		goto out_unlink;
	}
	*fetched += l->nparts * 8;
	w = pwrite_full(*fd, buf, l->nparts * 8, (off_t)l->tab_off);
	if (w == (ssize_t)(l->nparts * 8) && fsync(*fd) < 0)
		w = -errno;
	if (w != (ssize_t)(l->nparts * 8)) {
		rc = w < 0 ? (int)w : -EIO;
		errf(err, errlen, rc, "cannot write %s: %s", tmp, strerror(-rc));
		goto out_unlink;
	}
	rc = tmp_create(path, mtmp, sizeof(mtmp));
	if (rc < 0) {
		errf(err, errlen, rc, "cannot create a file beside %s: %s", path, strerror(-rc));
		goto out_unlink;
	}
	*mfd = rc;
	rc = 0;
	if (ftruncate(*mfd, (off_t)l->nparts) < 0 || rename(mtmp, mpath) < 0) {
		rc = -errno;
		errf(err, errlen, rc, "cannot create %s: %s", mpath, strerror(-rc));
		unlink(mtmp);
		goto out_unlink;
	}
	if (rename(tmp, path) < 0) {
		rc = -errno;
		errf(err, errlen, rc, "cannot rename %s to %s: %s", tmp, path, strerror(-rc));
		unlink(mpath);
		goto out_unlink;
	}
	free(buf);
	return 0;

out_unlink:
	unlink(tmp);
	if (*fd >= 0)
		close(*fd);
	if (*mfd >= 0)
		close(*mfd);
	*fd = *mfd = -1;
out_free:
	free(buf);
	return rc;
}

/*
 * Open an existing copy and its marks; -ENOENT if either is missing, -EINVAL
 * if they do not match @size (the caller makes a new one).
 */
static int copy_existing(const char *path, const char *mpath, uint64_t size,
			 struct lz_layout *l, int *fd, int *mfd, char *err,
			 size_t errlen)
{
	uint8_t hdr[MF_HEADER_MAX];
	struct stat st, mst;
	ssize_t n;
	int rc;

	*fd = open(path, O_RDWR | O_CLOEXEC);
	if (*fd < 0)
		return -errno;
	*mfd = open(mpath, O_RDWR | O_CLOEXEC);
	if (*mfd < 0) {
		rc = -errno;
		goto out_close;
	}
	rc = -EINVAL;
	if (fstat(*fd, &st) < 0 || fstat(*mfd, &mst) < 0 || (uint64_t)st.st_size != size) {
		errf(err, errlen, rc, "not %" PRIu64 " bytes", size);
		goto out_close;
	}
	n = pread(*fd, hdr, (size_t)MIN(size, (uint64_t)sizeof(hdr)), 0);
	if (n < 0 || (rc = layout_parse(hdr, (size_t)n, size, l, err, errlen)))
		goto out_close;
	if ((uint64_t)mst.st_size != l->nparts) {
		rc = errf(err, errlen, -EINVAL, "its marks do not match");
		goto out_close;
	}
	return 0;

out_close:
	close(*fd);
	if (*mfd >= 0)
		close(*mfd);
	*fd = *mfd = -1;
	return rc == -ENOTSUP ? -EINVAL : rc;
}

/* Map the marks and open the manifest over the copy. */
static int lz_open(int fd, int mfd, const struct lz_layout *l,
		   const struct manifest_remote *r, const char *label, bool fill,
		   struct manifest **out, uint64_t *fetched, bool *remote_failed,
		   char *err, size_t errlen)
{
	struct manifest_source src;
	struct mlazy *z;
	int rc;

	z = calloc(1, sizeof(*z));
	if (!z)
		return errf(err, errlen, -ENOMEM, "out of memory");
	z->marks = mmap(NULL, l->nparts, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (z->marks == MAP_FAILED) {
		rc = -errno;
		free(z);
		return errf(err, errlen, rc, "mmap of the marks: %s", strerror(-rc));
	}
	z->fd = fd;
	atomic_init(&z->fetched, *fetched);	/* the header and part table, if read now */
	z->l = *l;
	z->r = *r;
	snprintf(z->label, sizeof(z->label), "%s", label);
	pthread_mutex_init(&z->lock, NULL);
	pthread_cond_init(&z->done, NULL);
	cond_init_monotonic(&z->wake);
	src = (struct manifest_source){
		.fill = lz_fill, .fetched = lz_fetched, .release = lz_release, .arg = z,
	};
	rc = manifest_open_fd(fd, &src, out, err, errlen);
	if (rc) {
		*remote_failed = z->open_failed;
		z->fd = -1;	/* the caller's */
		lz_release(z);
		return rc;
	}
	manifest_set_name(*out, label);
	*fetched = lz_fetched(z);
	if (fill) {
		z->filling = pthread_create(&z->filler, NULL, lz_filler, z) == 0;
		if (!z->filling)
			log_warn("%s: cannot start the manifest's background fill: parts come when touched",
				 label);
	}
	return 0;
}

int manifest_lazy_open(const char *path, uint64_t size,
		       const struct manifest_remote *r, const char *label,
		       bool fill, struct manifest **out, uint64_t *fetched_at_open,
		       char *err, size_t errlen)
{
	char mpath[PATH_MAX], msg[256];
	struct lz_layout l;
	bool created = false, remote_failed = false;
	int fd, mfd, rc;

	*out = NULL;
	*fetched_at_open = 0;
	if (manifest_lazy_marks_path(path, mpath, sizeof(mpath)))
		return errf(err, errlen, -ENAMETOOLONG, "%s: path too long", path);
	rc = copy_existing(path, mpath, size, &l, &fd, &mfd, msg, sizeof(msg));
	if (rc && rc != -ENOENT) {
		log_warn("%s: the manifest copy %s is unusable (%s): making it again", label, path, msg);
		unlink(path);
	}
again:
	if (rc) {
		rc = copy_create(path, mpath, size, r, &l, &fd, &mfd, fetched_at_open,
				 err, errlen);
		if (rc)
			return rc;
		created = true;
	}
	rc = lz_open(fd, mfd, &l, r, label, fill, out, fetched_at_open, &remote_failed,
		     msg, sizeof(msg));
	close(mfd);
	if (rc == 0)
		return 0;
	close(fd);
	if (remote_failed)
		return errf(err, errlen, -EIO, "cannot fetch the manifest's first part");
	unlink(path);
	unlink(mpath);
	if (!created) {
		log_warn("%s: the manifest copy %s is unusable (%s): making it again", label, path, msg);
		goto again;
	}
	return errf(err, errlen, rc == -ENOMEM ? rc : -EINVAL, "%s", msg);
}
