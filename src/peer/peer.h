/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer: a node's peer group, and its side that asks the others for chunks.
 *
 * A group is a list of nodes (HOST:PORT, IPv4), this one included: the
 * `peers` setting, plus a `peers_file` a scheduler integration writes,
 * reread on SIGHUP (peer_group_reload).  Every chunk has one owner among
 * the live members, chosen by rendezvous (highest random weight) hashing of
 * its content address: score(member, chunk) = XXH3-64 of the chunk id
 * seeded with the hash of the member's address, highest wins.  A member
 * joining or leaving moves only the chunks it wins or won, about 1/n.
 *
 * A node keeps a slot, with its counters, for every address it knew
 * (PEER_MAX at most); a reload that needs room frees the slots of former
 * members that no request uses any more.
 *
 * A member is live unless it is in a back-off: a peer that timed out,
 * refused, hung up or sent wrong bytes is skipped for 1 s, doubling up to
 * 30 s while it keeps failing, and its chunks go to the next member in
 * their order.  A peer that answers ENOENT (it has not mounted that
 * dataset) is not skipped: the chunk comes from the backend.  After the back-off it is asked again (a restarted peer
 * rejoins by itself).
 *
 * Asking (peer_fetch_start): only where the owner is another live member.
 * One client thread owns every connection: an epoll loop, non-blocking
 * sockets bound to this node's own address (so that the server sees who
 * asks), up to PEER_CONNS connections per peer, each kept for the next
 * request.  Each request has a deadline, peer_timeout after it was asked:
 * past it the request is dropped and reported failed, so the caller's
 * fallback to the backend starts then at the latest.  Bytes are checked on
 * the client thread against the content address before they are reported:
 * a chunk reported good hashes (XXH3-128) to its id.
 *
 * Counters per member (bytes in and out, hits, failures, corrupt chunks,
 * fallbacks, requests served and refused) are atomics anyone may read
 * (peer_group_stats).
 *
 * Threads: peer_fetch_start() from any thread; the done function runs on
 * the client thread and must only hand over (it may start a backend read,
 * which does not block).  Locks: pg->reload_lock serializes reloads;
 * pg->lock guards the membership and the inbox, a leaf.
 */
#ifndef STAGEFS_PEER_H
#define STAGEFS_PEER_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peer_proto.h"
#include "util.h"

#define PEER_MAX	256	/* members of a group, this node included */
#define PEER_CONNS	16	/* connections to one peer at once */

struct peer_group;

struct peer_opts {
	const char *listen;	/* this node, HOST:PORT */
	const char *peers;	/* "HOST:PORT, ..." (may be NULL or "") */
	const char *peers_file;	/* one HOST:PORT a line (may be NULL or "") */
	const char *key_file;
	uint64_t timeout_ms;
};

/*
 * Load the key, resolve the members and start the client thread.  Returns
 * 0 or -errno with a message in @err.  Release with peer_group_destroy(),
 * after every read that may have asked a peer has finished (the backends
 * are closed).
 */
int peer_group_create(const struct peer_opts *o, struct peer_group **out,
		      char *err, size_t errlen);
void peer_group_destroy(struct peer_group *pg);

/*
 * Replace the membership with @peers plus the lines of @peers_file (this
 * node is always a member); short of slots (PEER_MAX addresses known), the
 * client thread first frees those of former members no request uses.  The file must be root's (or the daemon's
 * user's) and writable by nobody else, else -EPERM.  On an error (-errno,
 * message in @err) the group stays as it was.  Counters of members that
 * stay are kept.  Reloads are serialized.
 */
int peer_group_reload(struct peer_group *pg, const char *peers,
		      const char *peers_file, char *err, size_t errlen);
/*
 * Read the last @peers and @peers_file applied again (a scheduler
 * rewrote the file): peer_group_reload() with them.
 */
int peer_group_reread(struct peer_group *pg, char *err, size_t errlen);
/* The peers_file last applied into @out ("" if none). */
void peer_group_peers_file(struct peer_group *pg, char *out, size_t len);

/* The group's key (the server's TLS, fuse/peerd.c) and this node's address (valid until destroy). */
const struct peer_key *peer_group_key(const struct peer_group *pg);
const struct sockaddr_in *peer_group_self(const struct peer_group *pg);

/*
 * Ask the owner of chunk @id (@len bytes), which this node's manifest has
 * at @loc, for it, into @buf.  The owner is the owner of @key: @id, or for
 * a file stored in a pack the pack's id, so that one node reads each pack
 * from the backend and serves its files.  Returns
 * -ENOENT when this node owns it (or no other member is live): read it
 * from the backend.  Returns 0 when asked: @done(@arg, @res) then runs
 * exactly once on the client thread, @res being @len (@buf holds the
 * chunk, verified) or -errno (the peer failed, timed out or the group is
 * shutting down: @buf may hold anything; read it from the backend), at the
 * latest peer_timeout after this call.
 */
int peer_fetch_start(struct peer_group *pg, const struct sfs_id *key,
		     const struct sfs_id *id, const struct peer_loc *loc, void *buf,
		     size_t len, void (*done)(void *arg, int res), void *arg);

/* Is this node the owner of chunk (or pack) @id among the live members now? */
bool peer_owns(struct peer_group *pg, const struct sfs_id *id);

/* The server (fuse/peerd.c) counts what it does for the member at @from. */
void peer_note_served(struct peer_group *pg, const struct sockaddr_in *from,
		      uint64_t bytes);
/*
 * Is @from's address (the port aside) a member's, this node's included?
 * The server keeps handshake slots for members' addresses.
 */
bool peer_group_member(struct peer_group *pg, const struct sockaddr_in *from);
/* A connection or request from @from refused (no key, an old protocol, no room): counted. */
void peer_note_refused(struct peer_group *pg, const struct sockaddr_in *from);

/* One member's counters, as of a peer_group_stats() call. */
struct peer_stat {
	char addr[32];		/* "a.b.c.d:port" */
	bool self;
	bool member;		/* in the group now (false: left, counters kept until the room is needed) */
	bool backoff;		/* skipped now */
	bool down;		/* our last request to it failed, none has succeeded since */
	uint64_t bytes_in;	/* chunk bytes it sent us, verified */
	uint64_t hits;		/* chunks it sent us, verified */
	uint64_t failures;	/* our requests it failed: timeout, refusal, hang-up, bad bytes */
	uint64_t corrupt;	/* of which chunks with wrong bytes */
	uint64_t fallbacks;	/* our requests to it that ended at the backend */
	uint64_t bytes_out;	/* chunk bytes we sent it */
	uint64_t served;	/* chunks we sent it */
	uint64_t refused;	/* its requests we refused */
};

/* A malloc'ed array of every member's counters, *@n of them. */
int peer_group_stats(struct peer_group *pg, struct peer_stat **out, size_t *n);

#endif
