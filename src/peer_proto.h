/*
 * peer_proto: the wire protocol between the nodes of a peer group, the one
 * thing both sides of it (src/peer.c asks, fuse/peerd.c serves) share.
 *
 * A small binary protocol over TCP, one request at a time per connection
 * (a connection is kept and reused for the next request):
 *
 *   request  (PEER_REQ_LEN = 96 bytes, little endian)
 *     0  magic "SFP2"        4  op (PEER_OP_GET)
 *     8  ts: sender's wall clock, ms since the epoch
 *    16  nonce: 16 random bytes
 *    32  chunk id hi, lo: the XXH3-128 content address of the chunk
 *    48  len: the chunk's length
 *    52  idx   56  ino   64  tag: where the asker's manifest has the chunk
 *        (struct peer_loc)
 *    72  HMAC-SHA256 under the group's key of bytes 0..71 (first 24 bytes)
 *
 *   reply    (PEER_REP_LEN = 16 bytes, then len bytes of the chunk)
 *     0  magic "SFR1"        4  status: 0 or an errno value
 *     8  len (0 unless status is 0)    12  zero
 *
 * The locator lets the server find the chunk in its own copy of the
 * manifest without an index of every chunk (a mount of ten million files
 * must not walk them all): it checks that its manifest of the dataset
 * @tag names chunk @id at (@ino, @idx), and answers ENOENT otherwise (a
 * dataset or version it has not mounted, a forged or stale locator).  No
 * file or dataset name crosses, no uid: the tag is a hash (peer_loc).
 *
 * Versions: the magic is the protocol's version.  SFP1 (80 bytes, the
 * same without the locator, its MAC at 56) was served from an index of
 * every chunk; a server now reads an SFP1 request's 80 bytes and answers
 * ENOENT (the old asker reads from its backend, no back-off), and an SFP1
 * server hangs up on an SFP2 request (the new asker backs off that peer
 * and reads from its backend).  Upgrade a group's nodes together.
 * The reply is not authenticated: its bytes are checked against the content
 * address they were asked by, and a forged refusal only sends the asker to
 * the backend.  A request is accepted once (peer_replay_check): its time
 * within PEER_SKEW_MS of the server's clock and its nonce not seen within
 * that window.
 *
 * The MAC is HMAC-SHA256 (OpenSSL), cut to 24 bytes (a 192-bit tag), and
 * compared in constant time.  The key is the first line of a root-only file
 * (peer_key_load).
 */
#ifndef STAGEFS_PEER_PROTO_H
#define STAGEFS_PEER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define PEER_REQ_LEN	96
#define PEER_REQ_V1_LEN	80	/* an SFP1 request (answered ENOENT) */
#define PEER_REP_LEN	16
#define PEER_MAC_LEN	24
#define PEER_OP_GET	1
#define PEER_SKEW_MS	30000	/* a request's clock may be this far off */
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
	uint64_t ts_ms;
	unsigned char nonce[16];
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

/*
 * Encode a GET of chunk @id (@len bytes), found at @loc, into @out, stamped
 * now with a fresh nonce and MAC'ed with @key.  Returns 0 or -EIO (no
 * random bytes).
 */
int peer_req_encode(const struct peer_key *key, const struct sfs_id *id,
		    uint32_t len, const struct peer_loc *loc,
		    unsigned char out[PEER_REQ_LEN]);
/* Do the first 4 bytes of a request say SFP1 (the older protocol)? */
bool peer_req_v1(const unsigned char in[4]);
/*
 * Decode @in into @m if its magic and MAC are right (any op; the caller
 * checks it).  Returns 0, -EBADMSG (not our protocol) or -EACCES (bad MAC).
 * Does not look at the time or the nonce: see peer_replay_check().
 */
int peer_req_decode(const struct peer_key *key, const unsigned char in[PEER_REQ_LEN],
		    struct peer_req_msg *m);

void peer_rep_encode(int status, uint32_t len, unsigned char out[PEER_REP_LEN]);
/* Returns 0 with *@status and *@len set, or -EBADMSG. */
int peer_rep_decode(const unsigned char in[PEER_REP_LEN], int *status, uint32_t *len);

/*
 * The nonces a server has accepted lately.  peer_replay_check() accepts a
 * request (true) once: when its time is within PEER_SKEW_MS of @now_ms
 * (wall clock) and its nonce was not accepted before within that window.
 * When the table is too full to remember the nonce it refuses (the asker
 * falls back to the backend): replays are never let through.
 * Thread-safe.  Release with peer_replay_destroy().
 */
struct peer_replay;
int peer_replay_create(struct peer_replay **out);
void peer_replay_destroy(struct peer_replay *r);
bool peer_replay_check(struct peer_replay *r, const struct peer_req_msg *m,
		       uint64_t now_ms);

/* Wall clock in ms (the requests' stamps). */
uint64_t peer_wall_ms(void);

#endif
