/*
 * lra: LOOKUP readahead, done off the FUSE workers (see lra.h).
 *
 * A ring of cache-file references under one mutex; the thread takes
 * everything queued at once and reads each ahead outside the lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "lra.h"

/* Files queued at most: readers outrunning the thread by more than this
 * many LOOKUPs gain nothing from the oldest ones. */
#define LRA_DEPTH 256

struct lra {
	struct cache *cache;
	_Atomic uint64_t *done;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;		/* under lock */
	unsigned head, n;	/* under lock */
	struct cfile *q[LRA_DEPTH];
};

static void *lra_main(void *arg)
{
	struct lra *l = arg;
	struct cfile *batch[LRA_DEPTH];
	unsigned n;

	pthread_mutex_lock(&l->lock);
	for (;;) {
		while (!l->n && !l->stop)
			pthread_cond_wait(&l->cond, &l->lock);
		if (l->stop)
			break;
		for (n = 0; l->n; n++, l->n--) {
			batch[n] = l->q[l->head];
			l->head = (l->head + 1) % LRA_DEPTH;
		}
		pthread_mutex_unlock(&l->lock);
		for (unsigned i = 0; i < n; i++) {
			if (!cache_file_prefetch(l->cache, batch[i]))
				atomic_fetch_add(l->done, 1);
			cache_file_put(l->cache, batch[i]);
		}
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

int lra_create(struct cache *c, _Atomic uint64_t *done, struct lra **out)
{
	struct lra *l = calloc(1, sizeof(*l));
	int ret;

	if (!l)
		return -ENOMEM;
	l->cache = c;
	l->done = done;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->cond, NULL);
	ret = pthread_create(&l->thread, NULL, lra_main, l);
	if (ret) {
		pthread_cond_destroy(&l->cond);
		pthread_mutex_destroy(&l->lock);
		free(l);
		return -ret;
	}
	pthread_setname_np(l->thread, "sfs-lookup-ra");
	*out = l;
	return 0;
}

bool lra_push(struct lra *l, struct cfile *cf)
{
	bool queued = false;

	pthread_mutex_lock(&l->lock);
	if (l->n < LRA_DEPTH && !l->stop) {
		l->q[(l->head + l->n++) % LRA_DEPTH] = cf;
		queued = true;
	}
	pthread_mutex_unlock(&l->lock);
	if (queued)	/* after the unlock: woken, it would block on the mutex */
		pthread_cond_signal(&l->cond);
	else
		cache_file_put(l->cache, cf);
	return queued;
}

void lra_destroy(struct lra *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->lock);
	pthread_join(l->thread, NULL);
	for (; l->n; l->n--) {
		cache_file_put(l->cache, l->q[l->head]);
		l->head = (l->head + 1) % LRA_DEPTH;
	}
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->lock);
	free(l);
}
