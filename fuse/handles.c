/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handles: see handles.h.  An htab of entries keyed by handle number.
 */
#include "handles.h"

#include "htab.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct hent {
	struct htab_node node;
	uint64_t id;
	void *ptr;
	enum handle_kind kind;
	bool adopted;
	int32_t rec;		/* its slot in the records + 1; 0: none */
};

struct handles {
	uint64_t gen;
	pthread_mutex_t lock;
	struct htab tab;	/* protected by lock */
	uint64_t next;		/* protected by lock */
	uint64_t n, nadopted;	/* protected by lock */
	/* the records (see handles.h): a free list of slots; protected by lock */
	struct handle_record *recs;
	int recs_fd;
	uint32_t *free_slots, nfree, used, cap_free;
	bool full_logged;
};

static uint32_t rec_check(const struct handle_record *r)
{
	uint64_t x = r->id * 0x9E3779B97F4A7C15ULL ^ r->ino * 0xC2B2AE3D27D4EB4FULL ^
		     (uint64_t)(uint32_t)r->backing_id * 0x165667B19E3779F9ULL;

	return (uint32_t)(x ^ x >> 32) | 1;	/* never 0: an empty slot */
}

int handles_create(uint32_t gen, struct handles **out)
{
	struct handles *h;

	if (!gen || gen > HANDLE_GEN_MAX)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	if (htab_init(&h->tab, 256)) {
		free(h);
		return -ENOMEM;
	}
	pthread_mutex_init(&h->lock, NULL);
	h->gen = gen;
	h->next = 1;
	h->recs_fd = -1;
	*out = h;
	return 0;
}

void handles_destroy(struct handles *h)
{
	if (!h)
		return;
	htab_for_each_safe(&h->tab, i, pos, tmp)
		free(htab_entry(pos, struct hent, node));
	htab_release(&h->tab);
	if (h->recs)
		munmap(h->recs, HANDLE_RECORDS_MAX * sizeof(*h->recs));
	if (h->recs_fd >= 0)
		close(h->recs_fd);
	free(h->free_slots);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

static bool eq(const struct htab_node *n, const void *key)
{
	return htab_entry(n, struct hent, node)->id == *(const uint64_t *)key;
}

static struct hent *find_locked(struct handles *h, uint64_t id)
{
	struct htab_node *n = htab_find(&h->tab, htab_hash_u64(id), eq, &id);

	return n ? htab_entry(n, struct hent, node) : NULL;
}

static int insert_locked(struct handles *h, uint64_t id, enum handle_kind kind,
			 void *ptr, bool adopted)
{
	struct hent *e;

	if (htab_reserve(&h->tab, (size_t)h->n + 1) < 0 && !h->tab.nbuckets)
		return -ENOMEM;
	e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->id = id;
	e->ptr = ptr;
	e->kind = kind;
	e->adopted = adopted;
	e->rec = 0;
	htab_add(&h->tab, &e->node, htab_hash_u64(id));
	h->n++;
	h->nadopted += adopted;
	return 0;
}

uint64_t handles_add(struct handles *h, enum handle_kind kind, void *ptr)
{
	uint64_t id;

	pthread_mutex_lock(&h->lock);
	id = (h->gen << HANDLE_GEN_SHIFT) | h->next;
	if (insert_locked(h, id, kind, ptr, false))
		id = 0;
	else
		h->next = (h->next + 1) & ((1ULL << HANDLE_GEN_SHIFT) - 1);
	if (!h->next)
		h->next = 1;
	pthread_mutex_unlock(&h->lock);
	return id;
}

void *handles_get(struct handles *h, uint64_t id, enum handle_kind kind)
{
	struct hent *e;
	void *ptr = NULL;

	pthread_mutex_lock(&h->lock);
	e = find_locked(h, id);
	if (e && e->kind == kind)
		ptr = e->ptr;
	pthread_mutex_unlock(&h->lock);
	return ptr;
}

static void rec_clear_locked(struct handles *h, struct hent *e)
{
	if (!e->rec)
		return;
	memset(&h->recs[e->rec - 1], 0, sizeof(h->recs[0]));
	h->free_slots[h->nfree++] = (uint32_t)(e->rec - 1);
	e->rec = 0;
}

void *handles_take(struct handles *h, uint64_t id, enum handle_kind kind)
{
	struct hent *e;
	void *ptr = NULL;

	pthread_mutex_lock(&h->lock);
	e = find_locked(h, id);
	if (e && e->kind == kind) {
		rec_clear_locked(h, e);
		ptr = e->ptr;
		htab_del(&h->tab, &e->node);
		h->n--;
		h->nadopted -= e->adopted;
		free(e);
	}
	pthread_mutex_unlock(&h->lock);
	return ptr;
}

bool handles_inherited(const struct handles *h, uint64_t id)
{
	return id && (id >> HANDLE_GEN_SHIFT) != h->gen;
}

void *handles_adopt(struct handles *h, uint64_t id, enum handle_kind kind, void *ptr)
{
	struct hent *e;
	void *ret;

	pthread_mutex_lock(&h->lock);
	e = find_locked(h, id);
	if (e && e->kind == kind && !e->ptr) {
		/* an inherited record, made a handle on its first READ */
		e->ptr = ptr;
		e->adopted = true;
		h->nadopted++;
		ret = ptr;
	} else if (e)
		ret = e->kind == kind ? e->ptr : NULL;
	else
		ret = insert_locked(h, id, kind, ptr, true) ? NULL : ptr;
	pthread_mutex_unlock(&h->lock);
	return ret;
}

void handles_count(struct handles *h, uint64_t *open, uint64_t *adopted)
{
	pthread_mutex_lock(&h->lock);
	*open = h->n;
	*adopted = h->nadopted;
	pthread_mutex_unlock(&h->lock);
}

int handles_records_create(struct handles *h, int *fd)
{
	size_t len = HANDLE_RECORDS_MAX * sizeof(*h->recs);
	void *map;
	int mfd;

	mfd = memfd_create("stagefs-handles", MFD_CLOEXEC);
	if (mfd < 0)
		return -errno;
	/* sparse: only the pages of slots used are ever allocated */
	if (ftruncate(mfd, (off_t)len) < 0) {
		close(mfd);
		return -errno;
	}
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (map == MAP_FAILED) {
		close(mfd);
		return -errno;
	}
	pthread_mutex_lock(&h->lock);
	h->recs = map;
	h->recs_fd = mfd;
	pthread_mutex_unlock(&h->lock);
	*fd = mfd;
	return 0;
}

/* A slot for a new record: lowest never used, or freed.  -1: full. */
static int slot_get_locked(struct handles *h)
{
	if (h->nfree)
		return (int)h->free_slots[--h->nfree];
	if (h->used == HANDLE_RECORDS_MAX)
		return -1;
	if (h->used == h->cap_free) {
		/* room for every slot used so far to be freed */
		uint32_t cap = h->cap_free ? h->cap_free * 2 : 1024;
		uint32_t *nf = realloc(h->free_slots, cap * sizeof(*nf));

		if (!nf)
			return -1;
		h->free_slots = nf;
		h->cap_free = cap;
	}
	return (int)h->used++;
}

static void rec_put_locked(struct handles *h, struct hent *e, uint64_t ino, int32_t backing_id)
{
	struct handle_record r = { .id = e->id, .ino = ino, .backing_id = backing_id };
	int slot;

	if (!h->recs)
		return;
	if (e->rec) {
		slot = e->rec - 1;
	} else {
		slot = slot_get_locked(h);
		if (slot < 0) {
			if (!h->full_logged)
				log_warn("takeover: more than %u files open: the next ones are not "
					 "recorded for a daemon that would take the mount over",
					 HANDLE_RECORDS_MAX);
			h->full_logged = true;
			return;
		}
		e->rec = slot + 1;
	}
	r.check = rec_check(&r);
	/* the check word last: a record read without it is one being written */
	h->recs[slot].check = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	h->recs[slot].id = r.id;
	h->recs[slot].ino = r.ino;
	h->recs[slot].backing_id = r.backing_id;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	h->recs[slot].check = r.check;
}

void handles_record(struct handles *h, uint64_t id, uint64_t ino, int32_t backing_id)
{
	struct hent *e;

	pthread_mutex_lock(&h->lock);
	e = find_locked(h, id);
	if (e)
		rec_put_locked(h, e, ino, backing_id);
	pthread_mutex_unlock(&h->lock);
}

long handles_inherit(struct handles *h, int fd,
		     void (*each)(void *arg, const struct handle_record *r), void *arg)
{
	size_t len = HANDLE_RECORDS_MAX * sizeof(struct handle_record);
	const struct handle_record *old;
	struct stat st;
	long n = 0;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((size_t)st.st_size != len)
		return -EPROTO;
	old = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (old == MAP_FAILED)
		return -errno;
	for (size_t i = 0; i < HANDLE_RECORDS_MAX; i++) {
		struct handle_record r = old[i];
		struct hent *e;

		if (!r.check || r.check != rec_check(&r) || !r.id || !handles_inherited(h, r.id))
			continue;	/* empty, torn, or not a handle the kernel could hold */
		pthread_mutex_lock(&h->lock);
		e = find_locked(h, r.id);
		if (e || insert_locked(h, r.id, HANDLE_FILE, NULL, false)) {
			pthread_mutex_unlock(&h->lock);
			continue;	/* twice (a move cut short), or no memory */
		}
		e = find_locked(h, r.id);
		rec_put_locked(h, e, r.ino, r.backing_id);
		pthread_mutex_unlock(&h->lock);
		each(arg, &r);
		n++;
	}
	munmap((void *)old, len);
	return n;
}

bool handles_take_record(struct handles *h, uint64_t id, struct handle_record *r)
{
	struct hent *e;
	bool got = false;

	pthread_mutex_lock(&h->lock);
	e = find_locked(h, id);
	if (e && e->rec) {
		*r = h->recs[e->rec - 1];
		got = true;
		rec_clear_locked(h, e);
	}
	pthread_mutex_unlock(&h->lock);
	return got;
}
