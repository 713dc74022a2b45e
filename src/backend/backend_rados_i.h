/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_rados_i.h: what backend_rados.c (published datasets, reads,
 * the backend's life) and backend_rados_plain.c (plain mode: a
 * namespace's objects listed into a manifest) share.  Not for use outside
 * src/backend/.
 */
#ifndef STAGEFS_BACKEND_RADOS_I_H
#define STAGEFS_BACKEND_RADOS_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <rados/librados.h>

#include "backend.h"
#include "osdmap_refresh.h"
#include "rados.h"

/* objects that timed out lately, and for how long they fail at once */
#define RB_TIMEOUT_SLOTS	32

struct rados_backend {
	struct backend be;		/* first: struct backend * casts to this */
	rados_t cl;
	struct osdmap_refresh *maps;	/* after a read timed out */
	rados_ioctx_t io;
	bool plain;
	char *pool;
	char *nspace;
	char *name;			/* dataset name; NULL in plain mode */
	uint64_t version;
	struct sfs_rados_mlayout ml;	/* where the manifest lies in the pool */

	pthread_mutex_t lock;
	pthread_cond_t idle;		/* inflight dropped to 0 */
	uint64_t inflight;		/* async reads started, not finished; protected by lock */
	bool stopping;			/* protected by lock */
	/* reads that timed out: the oid's hash and when the hold ends */
	struct {
		uint64_t oid_hash;
		uint64_t until_ms;
	} timed_out[RB_TIMEOUT_SLOTS];	/* protected by lock */
	unsigned int timed_out_next;	/* protected by lock */
};

/*
 * Plain mode: list @rb's namespace, stat every object, and build the
 * manifest into rb->be.m, chunked by @chunk_size.  0 or -errno with a
 * message in @err.
 */
int rb_plain_build(struct rados_backend *rb, uint32_t chunk_size, char *err, size_t errlen);

#endif
