/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peerd: the daemon's side of its peer group (src/peer/peer.h): the group
 * itself, made from the settings, and the server that sends this node's
 * chunks to the other members (docs/fleet.md).
 *
 * The server listens on peer_listen (if the port cannot be bound, the
 * mount goes on and the accept thread tries again).  An accept thread
 * starts one thread per connection, which runs at nice 10 so that the
 * node's own readers come first: a TLS 1.3 handshake keyed by the group's
 * key (src/peer/peer_tls.h) within 2 s of the accept, then one request at a
 * time (src/peer/peer_proto.h), its chunk looked up at the place it names in
 * the manifest of a dataset this node has mounted.  Only such a chunk is
 * sent: from the cache, or, on a miss, read from the backend once (the
 * cache's single flight: a reader or another peer wanting it meanwhile
 * waits for the same fetch), cached, and sent, paced to
 * peer_serve_max_mbps.  The server never asks a peer itself, so two
 * owners can never wait on each other.
 *
 * A connection without the key never gets past the handshake, and holds
 * its slot 2 s at most, in pools that keep members' slots for members;
 * an old clear-text request (SFP1, SFP2) gets ENOENT at once.  Refusals
 * are counted per member and logged at most five per 10 s of each kind.
 * A chunk this node does not have gets ENOENT; no file name, path or
 * dataset name is ever read from or written to the network.
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
