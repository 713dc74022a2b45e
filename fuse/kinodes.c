/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kinodes: see kinodes.h.
 *
 * The counts live in an open-addressing table (linear probing, deletion by
 * backward shift) keyed by node id, grown by doubling at half load; the
 * order of first lookup in a FIFO of node ids.  A node id stays in the FIFO
 * after its FORGET (a stale slot): the prune thread drops stale slots as it
 * meets them, and sends every live one it meets to the kernel and back to
 * the FIFO's tail, so that an inode the kernel kept (in use) is asked again
 * after all the others.  The FIFO is also swept when stale slots outnumber
 * live ones.  k->lock guards both and is a leaf; the kernel is written to
 * outside it.
 */
#include "kinodes.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#define PRUNE_NOTIFY	9	/* FUSE_NOTIFY_PRUNE, 7.45: not in fuse.h 7.38 */
#define PRUNE_BATCH	512	/* node ids per notification (the kernel's batch) */
#define PRUNE_PASS	8192	/* node ids per pass before looking at the counts again */

struct prune_out {		/* struct fuse_notify_prune_out */
	uint32_t count;
	uint32_t padding;
	uint64_t spare;
};

struct slot {
	uint64_t ino;		/* 0: empty */
	uint64_t count;		/* lookup references the kernel holds */
};

struct kinodes {
	uint64_t max;
	struct fuse_session *se;
	pthread_t thread;
	bool started;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;		/* protected by lock */
	struct slot *tab;	/* protected by lock */
	size_t tcap, live;	/* protected by lock */
	uint64_t *q;		/* the FIFO; protected by lock */
	size_t qcap, qhead, qn;	/* protected by lock */

	_Atomic bool on;
	_Atomic uint64_t count, pruned;
};

static size_t slot_of(const struct kinodes *k, uint64_t ino)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> 17) & (k->tcap - 1);
}

static struct slot *find(struct kinodes *k, uint64_t ino)
{
	for (size_t i = slot_of(k, ino);; i = (i + 1) & (k->tcap - 1)) {
		if (k->tab[i].ino == ino)
			return &k->tab[i];
		if (!k->tab[i].ino)
			return NULL;
	}
}

static void put(struct slot *tab, size_t cap, struct slot s)
{
	size_t i = (size_t)((s.ino * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);

	while (tab[i].ino)
		i = (i + 1) & (cap - 1);
	tab[i] = s;
}

static int grow_table(struct kinodes *k)
{
	size_t cap = k->tcap ? k->tcap * 2 : 4096;
	struct slot *tab = calloc(cap, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < k->tcap; i++)
		if (k->tab[i].ino)
			put(tab, cap, k->tab[i]);
	free(k->tab);
	k->tab = tab;
	k->tcap = cap;
	return 0;
}

/* Remove slot @s, shifting back the run after it. */
static void del(struct kinodes *k, struct slot *s)
{
	size_t i = (size_t)(s - k->tab), j = i;

	for (;;) {
		size_t home;

		j = (j + 1) & (k->tcap - 1);
		if (!k->tab[j].ino)
			break;
		home = slot_of(k, k->tab[j].ino);
		/* move j back to i unless its home lies cyclically in (i, j] */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			k->tab[i] = k->tab[j];
			i = j;
		}
	}
	k->tab[i].ino = 0;
	k->tab[i].count = 0;
	k->live--;
}

static int q_push(struct kinodes *k, uint64_t ino)
{
	if (k->qn == k->qcap) {
		size_t cap = k->qcap ? k->qcap * 2 : 4096;
		uint64_t *q = malloc(cap * sizeof(*q));

		if (!q)
			return -ENOMEM;
		for (size_t i = 0; i < k->qn; i++)
			q[i] = k->q[(k->qhead + i) & (k->qcap - 1)];
		free(k->q);
		k->q = q;
		k->qcap = cap;
		k->qhead = 0;
	}
	k->q[(k->qhead + k->qn) & (k->qcap - 1)] = ino;
	k->qn++;
	return 0;
}

static uint64_t q_pop(struct kinodes *k)
{
	uint64_t ino = k->q[k->qhead];

	k->qhead = (k->qhead + 1) & (k->qcap - 1);
	k->qn--;
	return ino;
}

/* Under k->lock: whether the prune thread has work. */
static bool want_pass(const struct kinodes *k)
{
	return k->live > k->max || k->qn > 2 * k->live + 65536;
}

void kinodes_add(struct kinodes *k, const uint64_t *ino, size_t n)
{
	bool wake = false;

	if (!k || !n || !atomic_load_explicit(&k->on, memory_order_relaxed))
		return;
	pthread_mutex_lock(&k->lock);
	for (size_t i = 0; i < n; i++) {
		struct slot *s;

		if (!ino[i])
			continue;
		s = find(k, ino[i]);
		if (s) {
			s->count++;
			continue;
		}
		if ((k->live + 1) * 2 > k->tcap && grow_table(k))
			continue;	/* not counted: never pruned, as without the bound */
		if (q_push(k, ino[i]))
			continue;
		put(k->tab, k->tcap, (struct slot){ ino[i], 1 });
		k->live++;
	}
	atomic_store(&k->count, k->live);
	wake = want_pass(k);
	if (wake)
		pthread_cond_signal(&k->cond);
	pthread_mutex_unlock(&k->lock);
}

/* Under k->lock. */
static void forget_locked(struct kinodes *k, uint64_t ino, uint64_t nlookup)
{
	struct slot *s = find(k, ino);

	if (!s)
		return;
	if (s->count > nlookup)
		s->count -= nlookup;
	else
		del(k, s);
}

void kinodes_forget(struct kinodes *k, uint64_t ino, uint64_t nlookup)
{
	if (!k || !atomic_load_explicit(&k->on, memory_order_relaxed))
		return;
	pthread_mutex_lock(&k->lock);
	forget_locked(k, ino, nlookup);
	atomic_store(&k->count, k->live);
	pthread_mutex_unlock(&k->lock);
}

void kinodes_forget_batch(struct kinodes *k, const struct fuse_forget_data *f, size_t n)
{
	if (!k || !n || !atomic_load_explicit(&k->on, memory_order_relaxed))
		return;
	pthread_mutex_lock(&k->lock);
	for (size_t i = 0; i < n; i++)
		forget_locked(k, f[i].ino, f[i].nlookup);
	atomic_store(&k->count, k->live);
	pthread_mutex_unlock(&k->lock);
}

/* Send one FUSE_NOTIFY_PRUNE.  Returns 0 or -errno. */
static int send_prune(struct kinodes *k, const uint64_t *ids, uint32_t n)
{
	struct prune_out po = { .count = n };
	struct fuse_out_header oh = {
		.len = (uint32_t)(sizeof(oh) + sizeof(po) + n * sizeof(*ids)),
		.error = PRUNE_NOTIFY,
		.unique = 0,
	};
	struct iovec iov[3] = {
		{ &oh, sizeof(oh) }, { &po, sizeof(po) },
		{ (void *)ids, n * sizeof(*ids) },
	};
	ssize_t w = writev(fuse_session_fd(k->se), iov, 3);

	if (w < 0)
		return -errno;
	return w == (ssize_t)oh.len ? 0 : -EIO;
}

/* Under k->lock: wait up to @ms for a signal. */
static void nap(struct kinodes *k, long ms)
{
	cond_wait_until_ns(&k->cond, &k->lock, now_ns() + (uint64_t)ms * 1000000ULL);
}

static void *prune_main(void *arg)
{
	struct kinodes *k = arg;
	uint64_t ids[PRUNE_BATCH];
	size_t low = k->max - k->max / 10, before = 0;
	bool pruning = false;	/* from above max down to low */
	long backoff = 2;	/* ms after a batch; longer while nothing goes */

	pthread_mutex_lock(&k->lock);
	while (!k->stop) {
		size_t budget, want;
		uint32_t n = 0;
		int ret;

		pruning = k->live > k->max || (pruning && k->live > low);
		if (!pruning && !want_pass(k)) {
			pthread_cond_wait(&k->cond, &k->lock);
			continue;
		}
		want = pruning ? MIN(k->live - low, (size_t)PRUNE_BATCH) : 0;
		/*
		 * Oldest first: stale slots go, live ones go back to the tail,
		 * the first @want of them are pruned.
		 */
		for (budget = MIN(k->qn, (size_t)PRUNE_PASS); budget && k->qn; budget--) {
			uint64_t ino;

			if (n == want && k->qn <= 2 * k->live + 65536)
				break;
			ino = q_pop(k);
			if (!find(k, ino))
				continue;
			q_push(k, ino);	/* cannot fail: q_pop() made room */
			if (n < want)
				ids[n++] = ino;
		}
		if (!n) {
			if (pruning)
				nap(k, 100);
			continue;
		}
		/* inodes in use survive a prune: do not spin on them */
		backoff = k->live >= before ? MIN(backoff * 2, 1000) : 2;
		before = k->live;
		pthread_mutex_unlock(&k->lock);
		ret = send_prune(k, ids, n);
		pthread_mutex_lock(&k->lock);
		if (ret) {
			log_warn("kernel_inodes_max: FUSE_NOTIFY_PRUNE refused (%s): the kernel's inodes are no longer bounded",
				 strerror(-ret));
			atomic_store(&k->on, false);
			break;
		}
		atomic_fetch_add(&k->pruned, n);
		/* the evictions' FORGETs come through other threads: let them count */
		nap(k, backoff);
	}
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

struct kinodes *kinodes_create(uint64_t max)
{
	struct kinodes *k = calloc(1, sizeof(*k));

	if (!k)
		return NULL;
	k->max = max;
	pthread_mutex_init(&k->lock, NULL);
	cond_init_monotonic(&k->cond);
	return k;
}

void kinodes_start(struct kinodes *k, struct fuse_session *se, unsigned minor)
{
	if (!k || !k->max || k->started)
		return;
	if (minor < 45) {
		log_notice("kernel_inodes_max: the kernel speaks FUSE 7.%u, pruning needs 7.45 (Linux 6.18): the kernel's inodes are bounded by its own reclaim only",
			   minor);
		return;
	}
	pthread_mutex_lock(&k->lock);
	if (grow_table(k)) {
		pthread_mutex_unlock(&k->lock);
		return;
	}
	pthread_mutex_unlock(&k->lock);
	k->se = se;
	if (pthread_create(&k->thread, NULL, prune_main, k)) {
		log_warn("kernel_inodes_max: cannot start the prune thread: not bounded");
		return;
	}
	k->started = true;
	atomic_store(&k->on, true);
	log_info("kernel_inodes_max: keeping at most %llu inodes in the kernel (FUSE_NOTIFY_PRUNE)",
		 (unsigned long long)k->max);
}

void kinodes_destroy(struct kinodes *k)
{
	if (!k)
		return;
	atomic_store(&k->on, false);
	if (k->started) {
		pthread_mutex_lock(&k->lock);
		k->stop = true;
		pthread_cond_broadcast(&k->cond);
		pthread_mutex_unlock(&k->lock);
		pthread_join(k->thread, NULL);
	}
	pthread_mutex_destroy(&k->lock);
	pthread_cond_destroy(&k->cond);
	free(k->tab);
	free(k->q);
	free(k);
}

uint64_t kinodes_count(struct kinodes *k)
{
	return k ? atomic_load(&k->count) : 0;
}

uint64_t kinodes_pruned(struct kinodes *k)
{
	return k ? atomic_load(&k->pruned) : 0;
}
