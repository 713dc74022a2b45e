/*
 * peerd: the daemon's side of its peer group (src/peer.h): the group
 * itself, made from the settings, and the server that sends this node's
 * chunks to the other members (docs/fleet.md).
 *
 * The server listens on peer_listen.  An accept thread starts one thread
 * per connection (at most PEERD_MAX_CONNS, and 32 from one address), which
 * runs at nice 10 so that the node's own readers come first, and answers
 * one request at a time
 * (src/peer_proto.h): the request's MAC under the group key, then its time
 * and nonce (no replay), then its chunk id looked up in the index of the
 * content addresses of the datasets this node has mounted.  Only such a
 * chunk is sent: from the cache, or, on a miss, read from the backend
 * once (the cache's single flight: a reader or another peer wanting it
 * meanwhile waits for the same fetch), cached, and sent, paced to
 * peer_serve_max_mbps.  The server never asks a peer itself, so two
 * owners can never wait on each other.
 *
 * A request with a bad MAC, a stale time or a replayed nonce gets no
 * answer at all: the connection is closed and the source logged once
 * (then counted in "refused").  A chunk id this node does not have gets
 * ENOENT; no file name, path or dataset name is ever read from or written
 * to the network.
 */
#ifndef STAGEFS_FUSE_PEERD_H
#define STAGEFS_FUSE_PEERD_H

#include "fs.h"

#define PEERD_MAX_CONNS	256

/*
 * Make fs->peers from the peer_* settings, or leave it NULL where
 * peer_listen is empty.  Before the datasets are added.  Returns 0 or
 * -errno with a message in @err.
 */
int peerd_group_create(struct sfs *fs, char *err, size_t errlen);
/* After datasets_destroy(): the backends no longer use the group. */
void peerd_group_destroy(struct sfs *fs);

/*
 * Dataset @ds was added (datasets_add): its backend learns the group and
 * its chunks are indexed for the server.  No-op without a group.
 */
void peerd_dataset_added(struct sfs *fs, struct sfs_dataset *ds);

/*
 * Start the server (fs->peerd) once the scheduler runs.  No-op without a
 * group.  Returns 0 or -errno with a message in @err.  peerd_stop() ends
 * every connection and thread, before daemon_stop().
 */
int peerd_start(struct sfs *fs, char *err, size_t errlen);
void peerd_stop(struct sfs *fs);

/* SIGHUP: the membership from the new settings @cfg (fuse/access.c). */
void peerd_reload(struct sfs *fs, const struct sfs_config *cfg);

#endif
