/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_peerproto: libFuzzer harness for the peer transport (src/peer/peer_tls.c,
 * src/peer/peer_proto.c): the bytes another machine sends a node's peer server
 * and its client.
 *
 * The first byte picks what the rest is:
 *   0 mod 3  frames: a request (48 bytes, padded with zeros) and a reply
 *            header (the next 16), decoded as the two sides do after the
 *            handshake; a decoded request must encode back to itself.
 *   1 mod 3  what a client sends a server (a ClientHello and on): fed to a
 *            server keyed by the harness's key over memory BIOs.
 *   2 mod 3  what a server sends back to a client's ClientHello: fed to
 *            a client keyed the same way.
 * Without the key no input can finish a handshake that peer_tls calls
 * authenticated: one that does is a finding (__builtin_trap).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "peer/peer_proto.h"
#include "peer/peer_tls.h"

#define KEY "fuzz-key-fuzz-key-fuzz-key-fuzz-key"

static struct peer_tls *srv, *cli;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void frames(const uint8_t *data, size_t size)
{
	unsigned char req[PEER_REQ_LEN] = { 0 }, rep[PEER_REP_LEN] = { 0 }, again[PEER_REQ_LEN];
	struct peer_req_msg m;
	int status;
	uint32_t len;

	memcpy(req, data, MIN(size, sizeof(req)));
	if (size > sizeof(req))
		memcpy(rep, data + sizeof(req), MIN(size - sizeof(req), sizeof(rep)));
	if (peer_req_decode(req, &m) == 0) {
		peer_req_encode(&m.id, m.len, &m.loc, again);
		/* op and the rest are what the server checks; the fields must round-trip */
		if (memcmp(again + 8, req + 8, PEER_REQ_LEN - 8))
			__builtin_trap();
	}
	if (peer_rep_decode(rep, &status, &len) == 0 && (status < 0 || status > 4095))
		__builtin_trap();
}

/* One side of a handshake, fed @data as all the other side ever sends. */
static void handshake(struct peer_tls *t, const uint8_t *data, size_t size)
{
	BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
	SSL *ssl = peer_tls_new(t, -1);

	if (!in || !out || !ssl) {
		BIO_free(in);
		BIO_free(out);
		SSL_free(ssl);
		return;
	}
	BIO_set_mem_eof_return(in, -1);	/* no more bytes: "would block" */
	SSL_set_bio(ssl, in, out);	/* ssl owns both now */
	if (size)
		BIO_write(in, data, (int)size);
	if (SSL_do_handshake(ssl) == 1 && peer_tls_authenticated(ssl))
		__builtin_trap();	/* authenticated without the key */
	SSL_free(ssl);
	ERR_clear_error();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256];

	if (!srv) {
		struct peer_key k = { .len = sizeof(KEY) - 1 };

		memcpy(k.k, KEY, k.len);
		if (peer_tls_create(&k, true, &srv, err, sizeof(err)) ||
		    peer_tls_create(&k, false, &cli, err, sizeof(err)))
			__builtin_trap();
	}
	if (!size)
		return 0;
	switch (data[0] % 3) {
	case 0:
		frames(data + 1, size - 1);
		break;
	case 1:
		handshake(srv, data + 1, size - 1);
		break;
	default:
		handshake(cli, data + 1, size - 1);
		break;
	}
	return 0;
}
