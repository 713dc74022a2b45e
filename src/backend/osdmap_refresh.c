/* SPDX-License-Identifier: Apache-2.0 */
/* osdmap_refresh: see osdmap_refresh.h. */
#include "osdmap_refresh.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REFRESH_GAP_NS	(1000ull * 1000 * 1000)	/* at most one a second */

struct osdmap_refresh {
	rados_t cl;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool wanted, stopping;
	char what[128];
};

static void *refresh_main(void *arg)
{
	struct osdmap_refresh *r = arg;
	bool told = false;

	pthread_mutex_lock(&r->lock);
	while (!r->stopping) {
		uint64_t next;
		int rc;

		if (!r->wanted) {
			pthread_cond_wait(&r->cond, &r->lock);
			continue;
		}
		r->wanted = false;
		pthread_mutex_unlock(&r->lock);
		rc = rados_wait_for_latest_osdmap(r->cl);
		if (rc < 0) {
			log_warn("%s: asking the monitors for the latest OSD map: %s",
				 r->what, strerror(-rc));
		} else if (!told) {
			log_notice("%s: an OSD operation timed out: asking the monitors for the latest OSD map after each such timeout (at most once a second), so that an OSD back up is found",
				   r->what);
			told = true;
		}
		pthread_mutex_lock(&r->lock);
		next = now_ns() + REFRESH_GAP_NS;
		while (!r->stopping && now_ns() < next)
			cond_wait_until_ns(&r->cond, &r->lock, next);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int osdmap_refresh_start(rados_t cl, const char *what, struct osdmap_refresh **out)
{
	struct osdmap_refresh *r = calloc(1, sizeof(*r));
	int rc;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->cl = cl;
	snprintf(r->what, sizeof(r->what), "%s", what);
	pthread_mutex_init(&r->lock, NULL);
	rc = -cond_init_monotonic(&r->cond);
	if (rc == 0)
		rc = -pthread_create(&r->thread, NULL, refresh_main, r);
	if (rc < 0) {
		pthread_mutex_destroy(&r->lock);
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void osdmap_refresh_ask(struct osdmap_refresh *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->wanted = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

void osdmap_refresh_stop(struct osdmap_refresh *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
