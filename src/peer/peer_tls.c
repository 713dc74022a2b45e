/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_tls: see peer_tls.h.
 */
#include "peer_tls.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/x509.h>

#define PSK_LABEL	"stagefs peer tls13 psk v1"
#define ID_LABEL	"stagefs peer key id v1"
#define ID_PREFIX	"stagefs-peer-1/"
#define ID_MAX		64
#define PSK_LEN		32	/* SHA-256: the hash of both suites offered */
#define READ_BUF	(64 * 1024)	/* bytes OpenSSL reads from the socket at once */
#define SUITES		"TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256"

/* why a server's handshake failed, kept on its SSL (ex data) */
enum why { WHY_NONE, WHY_NO_PSK, WHY_OTHER_KEY };

struct peer_tls {
	SSL_CTX *ctx;
	SSL_SESSION *sess;		/* the PSK, as OpenSSL wants it */
	unsigned char id[ID_MAX];
	size_t idlen;
	bool server;
};

static int ex_tls = -1, ex_why = -1;
static pthread_once_t ex_once = PTHREAD_ONCE_INIT;

static void ex_init(void)
{
	ex_tls = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	ex_why = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static struct peer_tls *tls_of(SSL *ssl)
{
	return SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ex_tls);
}

static void why_set(SSL *ssl, enum why w)
{
	SSL_set_ex_data(ssl, ex_why, (void *)(uintptr_t)w);
}

/* The client offers the group's PSK, for the SHA-256 suites only. */
static int use_session(SSL *ssl, const EVP_MD *md, const unsigned char **id,
		       size_t *idlen, SSL_SESSION **sess)
{
	struct peer_tls *t = tls_of(ssl);

	*sess = NULL;
	if (md && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(t->sess)))
		return 1;	/* a HelloRetryRequest chose another hash: no PSK for it */
	if (!SSL_SESSION_up_ref(t->sess))
		return 0;
	*sess = t->sess;
	*id = t->id;
	*idlen = t->idlen;
	return 1;
}

/* The server knows one identity: the group's. */
static int find_session(SSL *ssl, const unsigned char *id, size_t idlen,
			SSL_SESSION **sess)
{
	struct peer_tls *t = tls_of(ssl);

	*sess = NULL;
	if (idlen != t->idlen || CRYPTO_memcmp(id, t->id, idlen)) {
		why_set(ssl, idlen > sizeof(ID_PREFIX) - 1 &&
				     !memcmp(id, ID_PREFIX, sizeof(ID_PREFIX) - 1)
			     ? WHY_OTHER_KEY : WHY_NO_PSK);
		return 1;	/* no PSK: with no certificate, the handshake fails */
	}
	if (!SSL_SESSION_up_ref(t->sess))
		return 0;
	*sess = t->sess;
	return 1;
}

static void derive(const struct peer_key *key, const char *label, unsigned char out[32])
{
	unsigned int n = 32;

	HMAC(EVP_sha256(), key->k, (int)key->len, (const unsigned char *)label,
	     strlen(label), out, &n);
}

static int fail(char *err, size_t errlen, const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[256] = "";

	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	snprintf(err, errlen, "peer TLS: %s%s%s", what, *buf ? ": " : "", buf);
	return -EIO;
}

int peer_tls_create(const struct peer_key *key, bool server, struct peer_tls **out,
		    char *err, size_t errlen)
{
	static const unsigned char aes128gcm[2] = { 0x13, 0x01 };
	unsigned char psk[PSK_LEN], kid[32];
	const SSL_CIPHER *cipher;
	struct peer_tls *t;
	SSL *tmp = NULL;
	int rc;

	pthread_once(&ex_once, ex_init);
	if (ex_tls < 0 || ex_why < 0)
		return fail(err, errlen, "no ex data index");
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->server = server;
	t->ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!t->ctx) {
		rc = fail(err, errlen, "SSL_CTX_new");
		goto out_free;
	}
	SSL_CTX_set_ex_data(t->ctx, ex_tls, t);
	if (!SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_max_proto_version(t->ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(t->ctx, SUITES)) {
		rc = fail(err, errlen, "TLS 1.3 settings");
		goto out_free;
	}
	/*
	 * No resumption, no tickets, no early data: every connection is a
	 * full PSK-(EC)DHE handshake, so nothing recorded can be replayed.
	 * Nothing but the PSK authenticates: a certificate, were one ever
	 * offered, fails verification against an empty store.
	 */
	SSL_CTX_set_options(t->ctx, SSL_OP_NO_TICKET | SSL_OP_NO_COMPRESSION |
				    SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE
#ifdef SSL_OP_ENABLE_KTLS
				    | SSL_OP_ENABLE_KTLS
#endif
			    );
	SSL_CTX_set_num_tickets(t->ctx, 0);
	SSL_CTX_set_max_early_data(t->ctx, 0);
	SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_OFF);
	if (!server)
		SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
				 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/*
	 * A chunk is 64 records of 16 KiB: read up to four at a time, not a
	 * header and a body at a time (two syscalls a record; a larger
	 * buffer measured no faster: what OpenSSL keeps is moved to its
	 * start between records).  The callers read until OpenSSL would
	 * block, so nothing read ahead is left behind a quiet socket.
	 */
	SSL_CTX_set_read_ahead(t->ctx, 1);
	SSL_CTX_set_default_read_buffer_len(t->ctx, READ_BUF);
	if (server)
		SSL_CTX_set_psk_find_session_callback(t->ctx, find_session);
	else
		SSL_CTX_set_psk_use_session_callback(t->ctx, use_session);

	tmp = SSL_new(t->ctx);
	cipher = tmp ? SSL_CIPHER_find(tmp, aes128gcm) : NULL;
	t->sess = SSL_SESSION_new();
	derive(key, PSK_LABEL, psk);
	if (!cipher || !t->sess || !SSL_SESSION_set1_master_key(t->sess, psk, sizeof(psk)) ||
	    !SSL_SESSION_set_cipher(t->sess, cipher) ||
	    !SSL_SESSION_set_protocol_version(t->sess, TLS1_3_VERSION)) {
		explicit_bzero(psk, sizeof(psk));
		rc = fail(err, errlen, "the pre-shared key");
		goto out_free;
	}
	explicit_bzero(psk, sizeof(psk));
	SSL_free(tmp);
	tmp = NULL;
	derive(key, ID_LABEL, kid);
	t->idlen = (size_t)snprintf((char *)t->id, sizeof(t->id), ID_PREFIX);
	for (int i = 0; i < 8; i++)
		t->idlen += (size_t)snprintf((char *)t->id + t->idlen, sizeof(t->id) - t->idlen,
					     "%02x", kid[i]);
	*out = t;
	return 0;

out_free:
	SSL_free(tmp);
	peer_tls_destroy(t);
	return rc;
}

void peer_tls_destroy(struct peer_tls *t)
{
	if (!t)
		return;
	SSL_SESSION_free(t->sess);
	SSL_CTX_free(t->ctx);
	free(t);
}

SSL *peer_tls_new(struct peer_tls *t, int fd)
{
	SSL *ssl = SSL_new(t->ctx);

	if (!ssl)
		return NULL;
	if (fd >= 0 && !SSL_set_fd(ssl, fd)) {
		SSL_free(ssl);
		ERR_clear_error();
		return NULL;
	}
	why_set(ssl, WHY_NONE);
	if (t->server)
		SSL_set_accept_state(ssl);
	else
		SSL_set_connect_state(ssl);
	return ssl;
}

bool peer_tls_authenticated(SSL *ssl)
{
	X509 *cert;
	bool ok;

	if (SSL_version(ssl) != TLS1_3_VERSION || !SSL_session_reused(ssl))
		return false;	/* a PSK handshake is a "resumption" to OpenSSL */
	cert = SSL_get1_peer_certificate(ssl);
	ok = cert == NULL;
	X509_free(cert);
	return ok;
}

const char *peer_tls_why(SSL *ssl)
{
	switch ((enum why)(uintptr_t)SSL_get_ex_data(ssl, ex_why)) {
	case WHY_OTHER_KEY:
		return "a stagefs peer with another group's key";
	case WHY_NO_PSK:
		return "no group key offered (an unknown identity: not a stagefs peer of this group)";
	default:
		return "no group key shown (a TLS client without it, a forged binder, or a broken handshake)";
	}
}

int peer_tls_want(SSL *ssl, int ret, short *events)
{
	int e = SSL_get_error(ssl, ret), err = errno;

	ERR_clear_error();
	switch (e) {
	case SSL_ERROR_WANT_READ:
		*events = POLLIN;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*events = POLLOUT;
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		return -ECONNRESET;
	case SSL_ERROR_SYSCALL:
		return err && err != EAGAIN ? -err : -ECONNRESET;
	default:
		return -EPROTO;
	}
}

void peer_tls_thread_init(void)
{
	sigset_t set;

	/* a SIGPIPE raised on this thread stays pending, never delivered */
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

bool peer_tls_ktls_send(SSL *ssl)
{
#ifdef SSL_OP_ENABLE_KTLS
	return BIO_get_ktls_send(SSL_get_wbio(ssl)) > 0;
#else
	(void)ssl;
	return false;
#endif
}
