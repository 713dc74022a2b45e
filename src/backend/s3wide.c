/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3wide: one large S3 "directory" listed by several requests at once.
 *
 * A listing is a series: each page names where the next begins (its
 * continuation token), so a directory of 9 M keys is 9,000 requests one
 * after another, minutes at a real endpoint's tens of milliseconds a page.
 * S3 also starts a listing after any key (start-after, or key-marker for
 * versions), so the key space can be cut into ranges listed at once; what
 * it does not say is where the keys are.  So the cut is guessed from what
 * the listing has shown so far, and refined as it goes:
 *
 *  - a directory is listed as one range from its start; one that is still
 *    going after SPLIT_PAGES pages is large, and the rest of its range,
 *    after the last key seen, is cut (s3_split_points()): where the last
 *    key's prefix moves up by one byte, just above the position the last
 *    page's names varied in (after a page from "img_001000.jpg" to
 *    "img_001999.jpg": "img_002" ... "img_009", a page's worth each, and
 *    the rest after "img_009" as one more range, cut again in its turn),
 *    the bytes taken from those the names used there;
 *  - the range that was cut keeps its first piece, and the others wait in
 *    a queue for the threads the mount allows (struct s3_wide_budget: in
 *    all, over every directory being listed); each is cut again the same
 *    way once it proves large, while a thread is free to take a piece;
 *  - a range ends at a key (taken with it), so a cut point needs to be no
 *    key at all: the ranges stay contiguous whatever the keys are, and a
 *    poor guess costs a short or empty range, never a key missed or seen
 *    twice.  A common prefix (subdirectory) whose keys straddle a cut is
 *    reported by both ranges; the caller keeps one.
 *
 * Entries go to the caller's callbacks one call at a time, under a lock.
 */
#include "s3.h"

#ifdef CONFIG_HAVE_S3

#include "log.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPLIT_PAGES	2	/* pages a range lists before it may be cut */
#define SPLIT_MAX	16	/* cut points at a time */
#define WIDE_THREADS_MAX 64
#define SEEN_DEPTH	64	/* name bytes whose values a range records */

/* ---- where to cut ---- */

static int key_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

size_t s3_split_points(const char *after, const char *upto, size_t plen, size_t vary,
		       const char *chars, char (*out)[S3_SPLIT_KEY], size_t max)
{
	size_t alen = strlen(after), from = plen, n = 0;

	if (plen > alen || alen >= S3_SPLIT_KEY)
		return 0;
	/* below the part @after and @upto share, nothing lies between them */
	if (upto) {
		size_t c = 0;

		while (after[c] && after[c] == upto[c])
			c++;
		from = MAX(from, c);
	}
	/*
	 * The deepest position above @vary with room after @after's byte:
	 * each range there is about as many keys as one step of @vary's
	 * position times the names below it, a few pages where names count up.
	 */
	for (size_t p = MIN(vary, alen); p-- > from && !n;) {
		for (const char *c = chars; *c && n < max; c++) {
			if ((unsigned char)*c <= (unsigned char)after[p])
				continue;
			memcpy(out[n], after, p);
			out[n][p] = *c;
			out[n][p + 1] = '\0';
			if (upto && strcmp(out[n], upto) > 0)
				break;	/* and every larger byte */
			n++;
		}
	}
	qsort(out, n, sizeof(out[0]), key_cmp);
	return n;
}

/* ---- the listing ---- */

struct range {
	struct range *next;
	char *after;	/* keys after this ("": from the start) ... */
	char *upto;	/* ... up to and with this (NULL: no end) */
};

struct wide {
	const struct s3_target *t;
	bool versions;
	const char *prefix;
	size_t plen;
	struct s3_wide_budget *b;
	int (*fn)(void *arg, const struct s3_object *o);
	int (*on_prefix)(void *arg, const char *prefix);
	void *arg;

	pthread_mutex_t lock;	/* the queue, the counts, the callbacks */
	pthread_cond_t cond;	/* a range queued, or one finished */
	struct range *queue;
	unsigned queued, busy, idle;
	pthread_t threads[WIDE_THREADS_MAX];
	unsigned nthreads;
	int ret;
	char *err;
	size_t errlen;
};

/* One range being listed. */
struct rstate {
	struct wide *w;
	struct range *r;
	unsigned pages;
	bool past;		/* the page went past r->upto: the range is done */
	char first[S3_SPLIT_KEY], last[S3_SPLIT_KEY];	/* the page's */
	bool any;
	/* the bytes seen at each of a name's first SEEN_DEPTH positions */
	uint64_t seen[SEEN_DEPTH][4];
};

static void range_free(struct range *r)
{
	if (r) {
		free(r->after);
		free(r->upto);
		free(r);
	}
}

/* An entry of the page: the range's, or past its end. */
static bool in_range(struct rstate *rs, const char *key)
{
	size_t n = strlen(key);

	if (rs->r->upto && strcmp(key, rs->r->upto) > 0) {
		rs->past = true;
		return false;
	}
	for (size_t p = rs->w->plen; p < n && p < rs->w->plen + SEEN_DEPTH; p++) {
		unsigned char c = (unsigned char)key[p];

		rs->seen[p - rs->w->plen][c >> 6] |= UINT64_C(1) << (c & 63);
	}
	if (n < S3_SPLIT_KEY) {
		if (!rs->any || strcmp(key, rs->first) < 0)
			memcpy(rs->first, key, n + 1);
		if (!rs->any || strcmp(key, rs->last) > 0)
			memcpy(rs->last, key, n + 1);
		rs->any = true;
	}
	return true;
}

static int range_object(void *arg, const struct s3_object *o)
{
	struct rstate *rs = arg;
	int r;

	if (!in_range(rs, o->key))
		return 0;
	pthread_mutex_lock(&rs->w->lock);
	r = rs->w->fn(rs->w->arg, o);
	pthread_mutex_unlock(&rs->w->lock);
	return r;
}

static int range_prefix(void *arg, const char *prefix)
{
	struct rstate *rs = arg;
	int r;

	if (!in_range(rs, prefix))
		return 0;
	pthread_mutex_lock(&rs->w->lock);
	r = rs->w->on_prefix(rs->w->arg, prefix);
	pthread_mutex_unlock(&rs->w->lock);
	return r;
}

static void *wide_thread(void *arg);

/* Queue @n cuts of @rs's range: the pieces after the first; @rs keeps the first. */
static int cut(struct rstate *rs, char (*pts)[S3_SPLIT_KEY], size_t n)
{
	struct wide *w = rs->w;
	struct range *pieces = NULL, **tail = &pieces;
	char *first_end;
	size_t i;

	first_end = strdup(pts[0]);
	if (!first_end)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		struct range *r = calloc(1, sizeof(*r));

		if (!r)
			break;
		r->after = strdup(pts[i]);
		r->upto = i + 1 < n ? strdup(pts[i + 1]) : rs->r->upto ? strdup(rs->r->upto) : NULL;
		if (!r->after || (!r->upto && (i + 1 < n || rs->r->upto))) {
			range_free(r);
			break;
		}
		*tail = r;
		tail = &r->next;
	}
	if (i < n) {
		while (pieces) {
			struct range *next = pieces->next;

			range_free(pieces);
			pieces = next;
		}
		free(first_end);
		return -ENOMEM;
	}
	log_debug("s3://%s/%s: a large listing: %zu more ranges, from %s", w->t->bucket, w->prefix,
		  n, pts[0] + w->plen);
	free(rs->r->upto);
	rs->r->upto = first_end;
	pthread_mutex_lock(&w->lock);
	*tail = w->queue;
	w->queue = pieces;
	w->queued += (unsigned)n;
	/* threads for those no idle one takes, as the budget allows */
	for (unsigned spawned = 0; w->idle + spawned < w->queued && w->nthreads < WIDE_THREADS_MAX;
	     spawned++) {
		unsigned used = atomic_load(&w->b->used);

		if (used >= w->b->max ||
		    !atomic_compare_exchange_strong(&w->b->used, &used, used + 1))
			break;
		if (pthread_create(&w->threads[w->nthreads], NULL, wide_thread, w)) {
			atomic_fetch_sub(&w->b->used, 1);
			break;
		}
		w->nthreads++;
	}
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

static int range_page(void *arg, bool truncated)
{
	struct rstate *rs = arg;
	struct wide *w = rs->w;
	char chars[257];
	bool want;
	int ret;

	if (atomic_load(&w->b->stop))
		return -ECANCELED;	/* the mount is going away */
	if (rs->past)
		return 1;	/* the rest is another range's */
	pthread_mutex_lock(&w->lock);
	ret = w->ret;
	/* cut only where a thread could take a piece now */
	want = truncated && ++rs->pages >= SPLIT_PAGES && rs->any && w->queued == 0 &&
	       (w->idle > 0 || (w->nthreads < WIDE_THREADS_MAX &&
				atomic_load(&w->b->used) < w->b->max));
	pthread_mutex_unlock(&w->lock);
	if (ret)
		return 1;	/* another range failed: stop here */
	if (want) {
		char (*pts)[S3_SPLIT_KEY] = malloc(SPLIT_MAX * sizeof(*pts));
		size_t d = 0, n = 0;

		if (!pts)
			return -ENOMEM;
		/*
		 * The bytes names use where the page's first and last part:
		 * those seen there, in any page of the range so far.
		 */
		while (rs->first[d] && rs->first[d] == rs->last[d])
			d++;
		if (d >= w->plen && d < w->plen + SEEN_DEPTH) {
			for (unsigned c = 1; c < 256; c++)
				if (rs->seen[d - w->plen][c >> 6] & (UINT64_C(1) << (c & 63)))
					chars[n++] = (char)c;
		}
		chars[n] = '\0';
		n = n ? s3_split_points(rs->last, rs->r->upto, w->plen, d, chars, pts, SPLIT_MAX)
		      : 0;
		ret = n ? cut(rs, pts, n) : 0;
		free(pts);
		if (ret < 0)
			return ret;
	}
	rs->any = false;
	return 0;
}

static int list_one(struct wide *w, struct range *r, char *err, size_t errlen)
{
	struct rstate *rs = calloc(1, sizeof(*rs));
	struct s3_list_opts o = { 0 };
	int ret;

	if (!rs)
		return -ENOMEM;
	rs->w = w;
	rs->r = r;
	o.start_after = r->after;
	o.page_keys = w->b->page_keys;
	o.on_page = range_page;
	ret = s3_list_range(w->t, w->versions, w->prefix, &o, range_object, range_prefix, rs,
			    err, errlen);
	free(rs);
	return ret;
}

/* Take ranges from the queue until none is left and none is being listed. */
static void work(struct wide *w)
{
	char err[512];

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct range *r;
		int ret;

		while (!w->queue && w->busy && !w->ret) {
			w->idle++;
			pthread_cond_wait(&w->cond, &w->lock);
			w->idle--;
		}
		if (!w->queue || w->ret)
			break;
		r = w->queue;
		w->queue = r->next;
		w->queued--;
		w->busy++;
		pthread_mutex_unlock(&w->lock);
		ret = list_one(w, r, err, sizeof(err));
		range_free(r);
		pthread_mutex_lock(&w->lock);
		w->busy--;
		if (ret && !w->ret) {
			w->ret = ret;
			snprintf(w->err, w->errlen, "%s", ret == -ECANCELED && !err[0] ?
				 "stopped: the mount is going away" : err);
		}
		pthread_cond_broadcast(&w->cond);
	}
	pthread_mutex_unlock(&w->lock);
}

static void *wide_thread(void *arg)
{
	struct wide *w = arg;

	work(w);
	atomic_fetch_sub(&w->b->used, 1);
	return NULL;
}

int s3_list_wide(const struct s3_target *t, bool versions, const char *prefix,
		 struct s3_wide_budget *b,
		 int (*fn)(void *arg, const struct s3_object *o),
		 int (*on_prefix)(void *arg, const char *prefix), void *arg,
		 char *err, size_t errlen)
{
	struct wide w = {
		.t = t, .versions = versions, .prefix = prefix, .plen = strlen(prefix), .b = b,
		.fn = fn, .on_prefix = on_prefix, .arg = arg, .err = err, .errlen = errlen,
	};
	struct range *r = calloc(1, sizeof(*r));

	err[0] = '\0';
	if (!r || !(r->after = strdup(""))) {
		free(r);
		return -ENOMEM;
	}
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	w.queue = r;
	w.queued = 1;
	work(&w);
	for (unsigned i = 0; i < w.nthreads; i++)
		pthread_join(w.threads[i], NULL);
	while (w.queue) {	/* left by a failure */
		r = w.queue->next;
		range_free(w.queue);
		w.queue = r;
	}
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
	return w.ret > 0 ? 0 : w.ret;
}

#endif /* CONFIG_HAVE_S3 */
