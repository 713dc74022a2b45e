/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_tls: the channel between the nodes of a peer group: TLS 1.3
 * (OpenSSL), authenticated by the group's key as an external pre-shared
 * key (RFC 8446 s.2.2, s.4.2.11), with an (EC)DHE exchange on top.
 *
 * What it gives, and why this and not certificates:
 *  - Mutual authentication: the client's PSK binder and the server's
 *    Finished each prove that end holds the group key; an end without it
 *    fails the handshake and never sees a request (an impostor listening
 *    on a member's address gets a ClientHello, nothing it can replay).
 *  - Freshness: every connection has its own traffic keys (the ECDHE
 *    share, and both randoms), so a request is good on the one connection
 *    and server it was sent to.  No early data, no tickets, no resumption.
 *  - Confidentiality: chunks of private datasets are encrypted on the
 *    wire (AES-128-GCM, or ChaCha20-Poly1305 where a peer prefers it), and
 *    forward secret: a key stolen later decrypts no recorded session.
 * A group is one key that root puts on every node (peer_key_file), and
 * the group changes with every job (peers_file): a certificate per node
 * would need a CA on every cluster and gives nothing more for a group
 * whose members all trust each other equally.
 *
 * The key file's line is not used as the PSK directly: the PSK is
 * HMAC-SHA256(line, "stagefs peer tls13 psk v1"), and the identity a
 * client names is "stagefs-peer-1/" and the first 8 bytes of
 * HMAC-SHA256(line, "stagefs peer key id v1") in hex, so that a server
 * can tell "another group's key" from "no key" in its log without the
 * identity saying anything about the key.
 *
 * Use: one peer_tls per side (the client thread's, the server's);
 * peer_tls_new() for each connection, then SSL_connect/SSL_accept and
 * SSL_read/SSL_write on a non-blocking socket, driven by the caller's
 * poll or epoll.  peer_tls_authenticated() must be true before anything
 * is sent or served.  Thread safe after create (an SSL_CTX is).
 * OpenSSL writes to the socket with write(2): a thread driving a
 * connection blocks SIGPIPE first (peer_tls_thread_init), so that a peer
 * gone away is an EPIPE, not the end of the process.
 */
#ifndef STAGEFS_PEER_TLS_H
#define STAGEFS_PEER_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

#include "peer_proto.h"

struct peer_tls;

/*
 * A context for the server (@server) or the client side, keyed by @key
 * (copied: the caller may wipe it).  Returns 0 or -errno with a message in
 * @err.  Release with peer_tls_destroy() after every SSL made from it.
 */
int peer_tls_create(const struct peer_key *key, bool server, struct peer_tls **out,
		    char *err, size_t errlen);
void peer_tls_destroy(struct peer_tls *t);

/*
 * A TLS connection over the connected socket @fd (not taken: close it
 * after SSL_free), or with no BIO yet if @fd < 0 (SSL_set_bio), in the
 * connect or accept state.  NULL on no memory.
 */
SSL *peer_tls_new(struct peer_tls *t, int fd);

/*
 * After a handshake that returned 1: did both ends prove the group key
 * (the PSK was used, TLS 1.3, no certificate)?  A connection for which
 * this is false is closed unused.
 */
bool peer_tls_authenticated(SSL *ssl);

/* Why a handshake failed, in words for a log line (the server side). */
const char *peer_tls_why(SSL *ssl);

/*
 * After an SSL call on @ssl returned @ret <= 0: 0 and the events to wait
 * for in *@events (POLLIN or POLLOUT) when it would block, else -errno
 * (-ECONNRESET for a close or a reset by the peer, -EPROTO for a TLS
 * failure).  Clears the thread's OpenSSL error queue.
 */
int peer_tls_want(SSL *ssl, int ret, short *events);

/* Block SIGPIPE in the calling thread (see above).  Call it on every thread that drives a connection. */
void peer_tls_thread_init(void);

/* Is kernel TLS sending this connection's records (SSL_OP_ENABLE_KTLS)? */
bool peer_tls_ktls_send(SSL *ssl);

#endif
