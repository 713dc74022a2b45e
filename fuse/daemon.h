/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon: the daemon's counters and its side of prefetch/, and the one
 * place that counts a backend fetch.
 *
 * daemon_start() makes the feed-rate counters (fs->stats, src/stats/stats.h) and
 * builds the scheduler of backend fetches (prefetch/prefetch.h) from the
 * prefetch_* settings; daemon_stop() frees both, last, since everything
 * else that runs counts into fs->stats.  Every backend fetch
 * of chunk data the daemon makes is counted here, whoever makes it: the
 * scheduler's engine and workers (readers' fetches included, with the
 * engine) through the pf_opts fetch_begin/fetch_end hooks, and a reader's
 * own fetch without the engine (fuse/read.c) by calling daemon_fetch_begin
 * and daemon_fetch_end around it, into the feed-rate counters
 * (stats_fetch_begin/end, src/stats/stats.h): a success is a node-wide miss
 * (the backend_reads of .stagefs/stats) and backend_bytes, a failure
 * STATS_NODE_BACKEND_ERRORS (backend_errors).  A chunk a member of the
 * peer group sent instead (@peer) is neither: src/peer/peer.c counts it.
 */
#ifndef STAGEFS_FUSE_DAEMON_H
#define STAGEFS_FUSE_DAEMON_H

#include "fs.h"

/*
 * Make fs->stats, then start the scheduler in fs->pf.  Returns 0 or -errno
 * with a message in @err (then neither exists).  daemon_stop() destroys
 * both, after the FUSE loop, the metrics exporters and the control socket
 * ended.
 */
int daemon_start(struct sfs *fs, char *err, size_t errlen);
void daemon_stop(struct sfs *fs);

/*
 * Around one backend fetch of chunk @idx of cache entry @cf, on the thread
 * that fetches: @res is the byte count read or -errno; @peer: a peer sent
 * the chunk instead of the backend.
 */
void daemon_fetch_begin(struct sfs *fs, const struct cfile *cf, uint32_t idx);
void daemon_fetch_end(struct sfs *fs, const struct cfile *cf, uint32_t idx, int res,
		      bool peer);

#endif
