/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pushmap: which kernel inodes hold their file's pages from a push at
 * OPEN; see pushmap.h.
 */
#include "pushmap.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

struct pushmap {
	_Atomic(_Atomic uint64_t *) slot;	/* NULL until the first push */
	uint64_t mask;
};

/* A 64-bit mix (splitmix64's finalizer): neighbouring inodes spread out. */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

struct pushmap *pushmap_create(uint64_t slots)
{
	struct pushmap *pm = calloc(1, sizeof(*pm));
	uint64_t n = 4096;

	if (!pm)
		return NULL;
	while (n < slots && n < (1ULL << 30))
		n <<= 1;
	pm->mask = n - 1;
	return pm;
}

void pushmap_destroy(struct pushmap *pm)
{
	_Atomic uint64_t *s;

	if (!pm)
		return;
	s = atomic_load(&pm->slot);
	if (s)
		munmap(s, (pm->mask + 1) * sizeof(*s));
	free(pm);
}

/* The table, mapped at the first push; NULL if it cannot be. */
static _Atomic uint64_t *table(struct pushmap *pm, bool make)
{
	_Atomic uint64_t *s = atomic_load_explicit(&pm->slot, memory_order_acquire);
	_Atomic uint64_t *expect = NULL;
	size_t len = (pm->mask + 1) * sizeof(*s);
	void *m;

	if (s || !make)
		return s;
	/* anonymous zero pages: memory only for the slots touched */
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	if (!atomic_compare_exchange_strong(&pm->slot, &expect, (_Atomic uint64_t *)m)) {
		munmap(m, len);
		return expect;
	}
	return m;
}

bool pushmap_has(struct pushmap *pm, uint64_t ino)
{
	_Atomic uint64_t *s = table(pm, false);

	return s && ino && atomic_load_explicit(&s[mix(ino) & pm->mask], memory_order_relaxed) == ino;
}

void pushmap_add(struct pushmap *pm, uint64_t ino)
{
	_Atomic uint64_t *s = table(pm, true);

	if (s && ino)
		atomic_store_explicit(&s[mix(ino) & pm->mask], ino, memory_order_relaxed);
}

void pushmap_forget(struct pushmap *pm, uint64_t ino)
{
	_Atomic uint64_t *s = table(pm, false);
	uint64_t cur = ino;

	if (s && ino)
		atomic_compare_exchange_strong_explicit(&s[mix(ino) & pm->mask], &cur, 0,
							memory_order_relaxed, memory_order_relaxed);
}
