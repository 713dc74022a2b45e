/*
 * lra: LOOKUP readahead, done off the FUSE workers.
 *
 * After the LOOKUP of a small, fully cached file the reader's OPEN (or its
 * READ) follows at once, so fuse/ops.c starts reading the cache file into
 * the page cache then (docs/passthrough.md, "Small files with a cold page
 * cache").  readahead(2) of a 110 KiB cache file takes 30-40 us of CPU here
 * (page allocation, bio submission, the virtio notify).  Done by the worker
 * that answered the LOOKUP, it ran on the CPU the scheduler had just woken
 * the reader on, and the reader's OPEN waited for it.  A worker now only
 * queues the file; one thread per daemon does the readahead(2), on whatever
 * CPU is free, while the reader goes on.
 *
 * Only a hint: when the queue is full the file is not read ahead.
 */
#ifndef STAGEFS_FUSE_LRA_H
#define STAGEFS_FUSE_LRA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache.h"

struct lra;

/*
 * Start the thread.  @done counts the cache files read ahead (the
 * lookup_readaheads counter).  Returns 0 or -errno.
 */
int lra_create(struct cache *c, _Atomic uint64_t *done, struct lra **out);

/*
 * Queue @cf, taking over the caller's reference (cache_file_get()).
 * Returns false, with the reference dropped, when the queue is full.
 */
bool lra_push(struct lra *l, struct cfile *cf);

/* Stop the thread, drop what is still queued, free.  NULL is ignored. */
void lra_destroy(struct lra *l);

#endif
