/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_proto: the requests and replies between the nodes of a peer group,
 * the one thing both sides (src/peer/peer.c asks, fuse/peerd.c serves) share.
 *
 * Every byte of it travels inside TLS 1.3 (src/peer/peer_tls.h): the channel
 * authenticates both ends with the group's key, keeps each request to the
 * one connection and server it was sent on, and encrypts the chunks.  So
 * the frames carry no MAC, time or nonce of their own.  One request at a
 * time per connection (a connection is kept and reused for the next):
 *
 *   request  (PEER_REQ_LEN = 48 bytes, little endian)
 *     0  magic "SFP3"        4  op (PEER_OP_GET)
 *     8  chunk id hi, lo: the XXH3-128 content address of the chunk
 *    24  len: the chunk's length
 *    28  idx   32  ino   40  tag: where the asker's manifest has the chunk
 *        (struct peer_loc)
 *
 *   reply    (PEER_REP_LEN = 16 bytes, then len bytes of the chunk)
 *     0  magic "SFR1"        4  status: 0 or an errno value
 *     8  len (0 unless status is 0)    12  zero
 *
 * The locator lets the server find the chunk in its own copy of the
 * manifest without an index of every chunk (a mount of ten million files
 * must not walk them all): it checks that its manifest of the dataset
 * @tag names chunk @id at (@ino, @idx), and answers ENOENT otherwise (a
 * dataset or version it has not mounted, a stale locator).  No file or
 * dataset name crosses, no uid: the tag is a hash (peer_loc).  The asker
 * checks the chunk's bytes against the content address it asked by, so
 * not even a member holding the key can make it cache wrong bytes.
 *
 * Versions: SFP1 and SFP2 were sent in the clear, each request signed
 * with an HMAC of the group key but good on any member (an impostor
 * listening on a member's address could replay them to another).  A
 * server sees their magic where a TLS ClientHello would start
 * (peer_req_legacy), answers ENOENT at once and closes (an old asker
 * reads its backend, no back-off); an old server hangs up on a
 * ClientHello (the new asker backs off that peer and reads its backend).
 * A mixed-version group reads from Ceph; upgrade a group's nodes together.
 *
 * The key is the first line of a root-only file (peer_key_load); the TLS
 * pre-shared key is derived from it (peer_tls.c).
 */
#ifndef STAGEFS_PEER_PROTO_H
#define STAGEFS_PEER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define PEER_REQ_LEN	48
#define PEER_REP_LEN	16
#define PEER_OP_GET	1
#define PEER_PORT_DEFAULT 785	/* below 1024: no unprivileged user can take it */
#define PEER_KEY_MIN	32	/* characters of a key */
#define PEER_KEY_MAX	256

struct peer_key {
	unsigned char k[PEER_KEY_MAX];
	size_t len;
};

/*
 * Where the asker's manifest has a chunk: the dataset and version (@tag,
 * backend_peer_tag(); 0: none), the file's inode and the chunk's index.
 * Untrusted on the server: only a hint that the chunk id must confirm.
 */
struct peer_loc {
	uint64_t tag;
	uint64_t ino;
	uint32_t idx;
};

/* A request, decoded. */
struct peer_req_msg {
	uint32_t op;
	struct sfs_id id;
	uint32_t len;
	struct peer_loc loc;
};

/*
 * Read the key from the first line of @path.  Refuses (-EPERM, with a
 * message in @err) a file that is not a regular file owned by root or by
 * this process's user, or whose mode lets group or others read or write it,
 * and a key shorter than PEER_KEY_MIN characters (-EINVAL).
 */
int peer_key_load(const char *path, struct peer_key *key, char *err, size_t errlen);
/* Forget the key's bytes. */
void peer_key_wipe(struct peer_key *key);

/* Encode a GET of chunk @id (@len bytes), found at @loc, into @out. */
void peer_req_encode(const struct sfs_id *id, uint32_t len, const struct peer_loc *loc,
		     unsigned char out[PEER_REQ_LEN]);
/*
 * Do the first 4 bytes a client sent say SFP1 or SFP2 (the clear-text
 * protocols before TLS)?
 */
bool peer_req_legacy(const unsigned char in[4]);
/*
 * Decode @in into @m.  Returns 0, or -EBADMSG (not this protocol's magic).
 * Any op and values: the caller checks them.
 */
int peer_req_decode(const unsigned char in[PEER_REQ_LEN], struct peer_req_msg *m);

void peer_rep_encode(int status, uint32_t len, unsigned char out[PEER_REP_LEN]);
/* Returns 0 with *@status (0..4095) and *@len set, or -EBADMSG. */
int peer_rep_decode(const unsigned char in[PEER_REP_LEN], int *status, uint32_t *len);

#endif
