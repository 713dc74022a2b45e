/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bufpool: see bufpool.h.
 *
 * The region is 2^k blocks of BUFPOOL_MIN bytes.  A buffer of order o is 2^o
 * contiguous blocks starting at a multiple of 2^o (a buddy allocator: the
 * buddy of block i at order o is i ^ 2^o, and two free buddies merge).
 * Free blocks sit on one doubly linked list per order, threaded through
 * arrays indexed by block; free_order[i] is the order of the free block
 * starting at i (NONE when i starts none), which is all a merge needs.
 * The buffer header of an allocation starting at block i is bufs[i], so the
 * region needs no allocation per buffer.
 *
 * Published buffers are on an LRU list (list.h, most recent first) and in
 * a hash table keyed by (content id, chunk index) (htab.h, sized once at
 * create to one bucket per block), both through the buffer's own nodes:
 * publishing allocates nothing.
 *
 * Locking: p->lock guards everything but the constants (base, nblocks).
 */
#include "bufpool.h"

#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define NONE	UINT32_MAX
#define NO_ORDER 0xff
#define ALIGN	(2u << 20)

struct bufpool {
	pthread_mutex_t lock;
	char *base;			/* 2 MiB aligned, inside the mapping */
	size_t len;
	void *map;			/* the mapping: len + 2 MiB */
	uint32_t nblocks;
	uint8_t max_order;		/* the whole region */
	uint8_t *free_order;		/* per block */
	uint32_t *fnext, *fprev;	/* per block: free lists */
	uint32_t free_head[32];
	struct bufpool_buf *bufs;	/* per block: the header of a buffer there */
	struct list_node lru;		/* published: bufpool_buf.lru, most recent first */
	struct htab published;		/* (id, idx) -> bufpool_buf.hnode */
	struct bufpool_stats st;
};

/* ---- the buddy allocator (p->lock held) ---- */

static void free_add(struct bufpool *p, uint32_t i, uint8_t o)
{
	p->free_order[i] = o;
	p->fprev[i] = NONE;
	p->fnext[i] = p->free_head[o];
	if (p->free_head[o] != NONE)
		p->fprev[p->free_head[o]] = i;
	p->free_head[o] = i;
}

static void free_del(struct bufpool *p, uint32_t i)
{
	uint8_t o = p->free_order[i];

	if (p->fprev[i] != NONE)
		p->fnext[p->fprev[i]] = p->fnext[i];
	else
		p->free_head[o] = p->fnext[i];
	if (p->fnext[i] != NONE)
		p->fprev[p->fnext[i]] = p->fprev[i];
	p->free_order[i] = NO_ORDER;
}

static uint32_t blocks_alloc(struct bufpool *p, uint8_t order)
{
	uint8_t o = order;
	uint32_t i;

	while (o <= p->max_order && p->free_head[o] == NONE)
		o++;
	if (o > p->max_order)
		return NONE;
	i = p->free_head[o];
	free_del(p, i);
	while (o > order) {
		o--;
		free_add(p, i + (1u << o), o);	/* the upper half stays free */
	}
	return i;
}

static void blocks_free(struct bufpool *p, uint32_t i, uint8_t o)
{
	while (o < p->max_order) {
		uint32_t buddy = i ^ (1u << o);

		if (p->free_order[buddy] != o)
			break;
		free_del(p, buddy);
		i = MIN(i, buddy);
		o++;
	}
	free_add(p, i, o);
}

/* ---- published buffers (p->lock held) ---- */

struct buf_key {
	const struct sfs_id *id;
	uint32_t idx;
};

static uint64_t key_hash(const struct sfs_id *id, uint32_t idx)
{
	uint64_t h = id->lo ^ (id->hi * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)idx * 0xff51afd7ed558ccdULL);

	h ^= h >> 29;
	return h;
}

static bool buf_eq(const struct htab_node *n, const void *key)
{
	const struct bufpool_buf *b = htab_entry(n, struct bufpool_buf, hnode);
	const struct buf_key *k = key;

	return b->idx == k->idx && sfs_id_eq(&b->id, k->id);
}

/* The published buffer of chunk @idx of @id, or NULL. */
static struct bufpool_buf *published_find(struct bufpool *p, const struct sfs_id *id,
					  uint32_t idx)
{
	struct buf_key k = { id, idx };
	struct htab_node *n = htab_find(&p->published, key_hash(id, idx), buf_eq, &k);

	return n ? htab_entry(n, struct bufpool_buf, hnode) : NULL;
}

static void release_locked(struct bufpool *p, struct bufpool_buf *b)
{
	if (b->parent) {
		struct bufpool_buf *parent = b->parent;

		free(b);
		if (--parent->refs == 0 && !parent->published)
			release_locked(p, parent);
		return;
	}
	if (b->block == NONE) {
		p->st.outside--;
		free(b->data);
		free(b);
		return;
	}
	p->st.used_bytes -= b->cap;
	blocks_free(p, b->block, b->order);
}

/* Stop finding @b; free it if nobody holds it. */
static void unpublish_locked(struct bufpool *p, struct bufpool_buf *b)
{
	htab_del(&p->published, &b->hnode);
	list_del(&b->lru);
	b->published = false;
	p->st.published--;
	if (!b->refs)
		release_locked(p, b);
}

/* Free the least recently used published buffer nobody holds. */
static bool reuse_one(struct bufpool *p)
{
	list_for_each_reverse(pos, &p->lru) {
		struct bufpool_buf *b = list_entry(pos, struct bufpool_buf, lru);

		if (!b->refs) {
			unpublish_locked(p, b);
			p->st.reused++;
			return true;
		}
	}
	return false;
}

/* ---- the API ---- */

int bufpool_create(size_t bytes, struct bufpool **out)
{
	struct bufpool *p = calloc(1, sizeof(*p));
	uint32_t n = 1;
	uint8_t order = 0;

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	list_init(&p->lru);
	while ((uint64_t)n * 2 * BUFPOOL_MIN <= bytes && order < 24) {
		n *= 2;
		order++;
	}
	p->nblocks = n;
	p->max_order = order;
	p->len = (size_t)n * BUFPOOL_MIN;
	/* aligned for O_DIRECT and for huge pages (fewer pages to pin) */
	p->map = mmap(NULL, p->len + ALIGN, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p->map == MAP_FAILED) {
		pthread_mutex_destroy(&p->lock);
		free(p);
		return -ENOMEM;
	}
	p->base = (char *)(((uintptr_t)p->map + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
	madvise(p->base, p->len, MADV_HUGEPAGE);	/* a hint */
	p->free_order = malloc(n);
	p->fnext = malloc(n * sizeof(*p->fnext));
	p->fprev = malloc(n * sizeof(*p->fprev));
	p->bufs = calloc(n, sizeof(*p->bufs));
	if (!p->free_order || !p->fnext || !p->fprev || !p->bufs ||
	    htab_init(&p->published, MAX(64u, n))) {
		bufpool_destroy(p);
		return -ENOMEM;
	}
	memset(p->free_order, NO_ORDER, n);
	for (size_t o = 0; o < ARRAY_SIZE(p->free_head); o++)
		p->free_head[o] = NONE;
	free_add(p, 0, order);
	p->st.region_bytes = p->len;
	*out = p;
	return 0;
}

void bufpool_destroy(struct bufpool *p)
{
	if (!p)
		return;
	if (p->published.buckets) {
		while (!list_empty(&p->lru)) {
			struct bufpool_buf *b = list_entry(list_first(&p->lru),
							   struct bufpool_buf, lru);

			if (b->refs)
				log_warn("bufpool: a buffer is still held at destroy");
			b->refs = 0;
			unpublish_locked(p, b);
		}
		if (p->st.used_bytes || p->st.outside)
			log_warn("bufpool: %zu bytes still held at destroy",
				 (size_t)p->st.used_bytes);
	}
	pthread_mutex_destroy(&p->lock);
	if (p->map)
		munmap(p->map, p->len + ALIGN);
	free(p->free_order);
	free(p->fnext);
	free(p->fprev);
	free(p->bufs);
	htab_release(&p->published);
	free(p);
}

void bufpool_region(const struct bufpool *p, void **base, size_t *len)
{
	*base = p->base;
	*len = p->len;
}

bool bufpool_in_region(const struct bufpool_buf *b)
{
	if (b->parent)
		b = b->parent;
	return b->block != NONE;
}

bool bufpool_fits(const struct bufpool *p, size_t len)
{
	return len <= p->len;
}

static struct bufpool_buf *outside_buf(struct bufpool *p, size_t len)
{
	struct bufpool_buf *b = calloc(1, sizeof(*b));
	size_t cap = (len + BUFPOOL_MIN - 1) / BUFPOOL_MIN * BUFPOOL_MIN;

	if (!b || posix_memalign(&b->data, BUFPOOL_MIN, cap)) {
		free(b);
		return NULL;
	}
	b->cap = cap;
	b->refs = 1;
	b->block = NONE;
	pthread_mutex_lock(&p->lock);
	p->st.outside++;
	pthread_mutex_unlock(&p->lock);
	return b;
}

struct bufpool_buf *bufpool_get(struct bufpool *p, size_t len, bool may_malloc)
{
	struct bufpool_buf *b;
	uint8_t order = 0;
	uint32_t i;

	while (((size_t)BUFPOOL_MIN << order) < len && order < 31)
		order++;
	if (order > p->max_order)
		return outside_buf(p, len);	/* never fits: the region is too small */
	pthread_mutex_lock(&p->lock);
	while ((i = blocks_alloc(p, order)) == NONE)
		if (!reuse_one(p))
			break;
	if (i == NONE) {
		pthread_mutex_unlock(&p->lock);
		return may_malloc ? outside_buf(p, len) : NULL;
	}
	b = &p->bufs[i];
	memset(b, 0, sizeof(*b));
	b->data = p->base + (size_t)i * BUFPOOL_MIN;
	b->cap = (size_t)BUFPOOL_MIN << order;
	b->refs = 1;
	b->block = i;
	b->order = order;
	p->st.used_bytes += b->cap;
	pthread_mutex_unlock(&p->lock);
	return b;
}

struct bufpool_buf *bufpool_slice(struct bufpool *p, struct bufpool_buf *parent,
				  size_t off, size_t len)
{
	struct bufpool_buf *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->data = (char *)parent->data + off;
	b->cap = len;
	b->refs = 1;
	b->block = NONE;
	b->parent = parent;
	pthread_mutex_lock(&p->lock);
	parent->refs++;
	pthread_mutex_unlock(&p->lock);
	return b;
}

void bufpool_hold(struct bufpool *p, struct bufpool_buf *b)
{
	pthread_mutex_lock(&p->lock);
	b->refs++;
	pthread_mutex_unlock(&p->lock);
}

void bufpool_put(struct bufpool *p, struct bufpool_buf *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&p->lock);
	if (--b->refs == 0 && !b->published)
		release_locked(p, b);
	pthread_mutex_unlock(&p->lock);
}

void bufpool_publish(struct bufpool *p, struct bufpool_buf *b,
		     const struct sfs_id *id, uint32_t idx, size_t len)
{
	struct bufpool_buf *o;

	if (b->block == NONE || len > b->cap)
		return;
	pthread_mutex_lock(&p->lock);
	if (b->published) {
		pthread_mutex_unlock(&p->lock);
		return;
	}
	o = published_find(p, id, idx);
	if (o)
		unpublish_locked(p, o);
	b->id = *id;
	b->idx = idx;
	b->len = len;
	b->published = true;
	htab_add(&p->published, &b->hnode, key_hash(id, idx));
	list_add(&p->lru, &b->lru);
	p->st.published++;
	pthread_mutex_unlock(&p->lock);
}

uint32_t bufpool_forget(struct bufpool *p, const struct sfs_id *id)
{
	uint32_t n = 0;

	pthread_mutex_lock(&p->lock);
	list_for_each_safe(pos, next, &p->lru) {
		struct bufpool_buf *b = list_entry(pos, struct bufpool_buf, lru);

		if (sfs_id_eq(&b->id, id)) {
			unpublish_locked(p, b);
			n++;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

struct bufpool_buf *bufpool_find(struct bufpool *p, const struct sfs_id *id,
				 uint32_t idx)
{
	struct bufpool_buf *b;

	pthread_mutex_lock(&p->lock);
	p->st.lookups++;
	b = published_find(p, id, idx);
	if (b) {
		b->refs++;
		p->st.hits++;
		list_move(&p->lru, &b->lru);
	}
	pthread_mutex_unlock(&p->lock);
	return b;
}

void bufpool_get_stats(struct bufpool *p, struct bufpool_stats *st)
{
	pthread_mutex_lock(&p->lock);
	*st = p->st;
	pthread_mutex_unlock(&p->lock);
}
