/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_peer: the peer protocol and group (src/peer/peer_proto.c, src/peer/peer_tls.c,
 * src/peer/peer.c): requests encoded and decoded, the old clear-text formats
 * told apart; TLS 1.3 with the group key: two ends with it agree, a
 * wrong key, a client without a PSK and a server with a certificate
 * instead of the key are all refused; the key file's mode rules, and rendezvous ownership: spread over
 * the members, and a member joining moves chunks only to itself; a
 * peers_file reread, and refused when others may write it; a peer that
 * refuses the connection is reported failed and skipped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peer/peer.h"
#include "peer/peer_proto.h"
#include "peer/peer_tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#define KEY "0123456789abcdef0123456789abcdef"

static char dir[] = "/tmp/test_peer.XXXXXX";

static void write_key(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

static void key_of(struct peer_key *k, const char *s)
{
	memset(k, 0, sizeof(*k));
	k->len = strlen(s);
	memcpy(k->k, s, k->len);
}

static void test_request(void **state)
{
	struct sfs_id id = { 0x1122334455667788ULL, 0x99aabbccddeeff00ULL };
	struct peer_loc loc = { 0xfeedfacecafebeefULL, 1234567, 89 };
	unsigned char msg[PEER_REQ_LEN];
	struct peer_req_msg m;

	peer_req_encode(&id, 4 << 20, &loc, msg);
	assert_memory_equal(msg, "SFP3", 4);
	assert_int_equal(peer_req_decode(msg, &m), 0);
	assert_int_equal(m.op, PEER_OP_GET);
	assert_true(sfs_id_eq(&m.id, &id));
	assert_int_equal(m.len, 4 << 20);
	assert_true(m.loc.tag == loc.tag && m.loc.ino == loc.ino && m.loc.idx == loc.idx);
	assert_false(peer_req_legacy(msg));
	msg[0] ^= 1;
	assert_int_equal(peer_req_decode(msg, &m), -EBADMSG);
	/* the clear-text requests of before (SFP1, SFP2) are told apart, never decoded */
	memcpy(msg, "SFP1", 4);
	assert_true(peer_req_legacy(msg));
	assert_int_equal(peer_req_decode(msg, &m), -EBADMSG);
	memcpy(msg, "SFP2", 4);
	assert_true(peer_req_legacy(msg));
	assert_int_equal(peer_req_decode(msg, &m), -EBADMSG);
}

static void test_reply(void **state)
{
	unsigned char r[PEER_REP_LEN];
	int st;
	uint32_t len;

	peer_rep_encode(0, 12345, r);
	assert_int_equal(peer_rep_decode(r, &st, &len), 0);
	assert_int_equal(st, 0);
	assert_int_equal(len, 12345);
	peer_rep_encode(ENOENT, 12345, r);
	assert_int_equal(peer_rep_decode(r, &st, &len), 0);
	assert_int_equal(st, ENOENT);
	assert_int_equal(len, 0);
	r[1] ^= 1;
	assert_int_equal(peer_rep_decode(r, &st, &len), -EBADMSG);
}

/* ---- TLS: two ends over a socketpair, the server on a thread ---- */

struct srv {
	SSL_CTX *plain;		/* a server of its own (a certificate), or NULL */
	struct peer_tls *t;
	int fd;
	int ok;			/* SSL_accept's result, and authenticated */
	char why[160];
	char got[8];
};

static void *srv_main(void *arg)
{
	struct srv *v = arg;
	SSL *ssl = v->plain ? SSL_new(v->plain) : peer_tls_new(v->t, v->fd);

	if (v->plain)
		SSL_set_fd(ssl, v->fd);
	v->ok = SSL_accept(ssl) == 1 && (v->plain || peer_tls_authenticated(ssl));
	if (!v->ok && !v->plain)
		snprintf(v->why, sizeof(v->why), "%s", peer_tls_why(ssl));
	if (v->ok)
		SSL_read(ssl, v->got, 4);
	SSL_free(ssl);
	shutdown(v->fd, SHUT_RDWR);
	return NULL;
}

/* A client with @ssl over a socketpair against @v: SSL_connect's result, authenticated. */
static int tls_pair(SSL_CTX *cctx, struct peer_tls *ct, struct srv *v)
{
	int sv[2], ok;
	pthread_t th;
	SSL *ssl;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	v->fd = sv[1];
	assert_int_equal(pthread_create(&th, NULL, srv_main, v), 0);
	if (cctx) {
		ssl = SSL_new(cctx);
		SSL_set_fd(ssl, sv[0]);
	} else {
		ssl = peer_tls_new(ct, sv[0]);
	}
	assert_non_null(ssl);
	ok = SSL_connect(ssl) == 1 && (cctx || peer_tls_authenticated(ssl));
	if (ok)
		assert_int_equal(SSL_write(ssl, "SFP3", 4), 4);
	SSL_free(ssl);
	shutdown(sv[0], SHUT_RDWR);
	pthread_join(th, NULL);
	close(sv[0]);
	close(sv[1]);
	ERR_clear_error();
	return ok;
}

/* A self-signed server: someone at a member's address without the key. */
static SSL_CTX *impostor_ctx(void)
{
	SSL_CTX *c = SSL_CTX_new(TLS_server_method());
	EVP_PKEY *pk = EVP_EC_gen("P-256");
	X509 *x = X509_new();

	assert_non_null(c);
	assert_non_null(pk);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, pk);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
				   (const unsigned char *)"impostor", -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(x));
	assert_true(X509_sign(x, pk, EVP_sha256()) > 0);
	assert_int_equal(SSL_CTX_use_certificate(c, x), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(c, pk), 1);
	X509_free(x);
	EVP_PKEY_free(pk);
	return c;
}

static void test_tls(void **state)
{
	struct peer_tls *srv_t, *cli_t, *other_t;
	struct peer_key k, other;
	struct srv v;
	SSL_CTX *plain_cli, *imp;
	char err[256];

	key_of(&k, KEY);
	key_of(&other, KEY "x");
	assert_int_equal(peer_tls_create(&k, true, &srv_t, err, sizeof(err)), 0);
	assert_int_equal(peer_tls_create(&k, false, &cli_t, err, sizeof(err)), 0);
	assert_int_equal(peer_tls_create(&other, false, &other_t, err, sizeof(err)), 0);

	/* the same key: both ends authenticated, the request arrives */
	v = (struct srv){ .t = srv_t };
	assert_true(tls_pair(NULL, cli_t, &v));
	assert_true(v.ok);
	assert_memory_equal(v.got, "SFP3", 4);

	/* another group's key: refused, and the server can say so */
	v = (struct srv){ .t = srv_t };
	assert_false(tls_pair(NULL, other_t, &v));
	assert_false(v.ok);
	assert_non_null(strstr(v.why, "another group's key"));

	/* a TLS client with no PSK at all (what anyone can run) */
	plain_cli = SSL_CTX_new(TLS_client_method());
	v = (struct srv){ .t = srv_t };
	assert_false(tls_pair(plain_cli, NULL, &v));
	assert_false(v.ok);
	assert_non_null(strstr(v.why, "no group key"));
	SSL_CTX_free(plain_cli);

	/* an impostor at a member's address, with a certificate and no key:
	 * the client never completes, so it never sends a request */
	imp = impostor_ctx();
	v = (struct srv){ .plain = imp };
	assert_false(tls_pair(NULL, cli_t, &v));
	assert_int_equal(v.got[0], 0);
	SSL_CTX_free(imp);

	peer_tls_destroy(srv_t);
	peer_tls_destroy(cli_t);
	peer_tls_destroy(other_t);
}

static void test_key_file(void **state)
{
	char path[256], err[512];
	struct peer_key k;

	snprintf(path, sizeof(path), "%s/key", dir);
	write_key(path, KEY "\n", 0600);
	assert_int_equal(peer_key_load(path, &k, err, sizeof(err)), 0);
	assert_int_equal(k.len, strlen(KEY));
	assert_memory_equal(k.k, KEY, k.len);
	write_key(path, KEY "\n", 0640);
	assert_int_equal(peer_key_load(path, &k, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "mode 0640"));
	write_key(path, KEY "\n", 0604);
	assert_int_equal(peer_key_load(path, &k, err, sizeof(err)), -EPERM);
	write_key(path, "short\n", 0600);
	assert_int_equal(peer_key_load(path, &k, err, sizeof(err)), -EINVAL);
	snprintf(path, sizeof(path), "%s/none", dir);
	assert_int_equal(peer_key_load(path, &k, err, sizeof(err)), -ENOENT);
}

static struct peer_group *group(const char *peers)
{
	char key[256], err[512];
	struct peer_group *pg = NULL;
	struct peer_opts o = {
		.listen = "127.0.0.1:1",
		.peers = peers,
		.key_file = key,
		.timeout_ms = 2000,
	};

	snprintf(key, sizeof(key), "%s/key", dir);
	write_key(key, KEY "\n", 0600);
	assert_int_equal(peer_group_create(&o, &pg, err, sizeof(err)), 0);
	return pg;
}

static struct sfs_id id_n(uint64_t n)
{
	struct sfs_id id;

	sfs_id_of(&n, sizeof(n), &id);
	return id;
}

#define NIDS 4000

static void test_rendezvous(void **state)
{
	struct peer_group *pg = group("127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:3");
	static bool mine3[NIDS];
	unsigned int n3 = 0, n4 = 0;
	char err[256];

	for (int i = 0; i < NIDS; i++) {
		struct sfs_id id = id_n((uint64_t)i);

		mine3[i] = peer_owns(pg, &id);
		n3 += mine3[i];
	}
	/* a third each, give or take */
	assert_true(n3 > NIDS / 3 - 200 && n3 < NIDS / 3 + 200);
	assert_int_equal(peer_group_reload(pg, "127.0.0.1:2, 127.0.0.1:3, 127.0.0.1:4", NULL,
					   err, sizeof(err)), 0);
	for (int i = 0; i < NIDS; i++) {
		struct sfs_id id = id_n((uint64_t)i);
		bool mine = peer_owns(pg, &id);

		/* a member joining takes chunks; it never moves others' to us */
		assert_true(!mine || mine3[i]);
		n4 += mine;
	}
	assert_true(n4 > NIDS / 4 - 200 && n4 < NIDS / 4 + 200);
	/* a bad list leaves the group as it was */
	assert_int_not_equal(peer_group_reload(pg, "127.0.0.1:2, nonsense", NULL, err, sizeof(err)), 0);
	peer_group_destroy(pg);
}

static size_t members(struct peer_group *pg)
{
	struct peer_stat *v;
	size_t n, m = 0;

	assert_int_equal(peer_group_stats(pg, &v, &n), 0);
	for (size_t i = 0; i < n; i++)
		m += v[i].member;
	free(v);
	return m;
}

/*
 * A scheduler's peers_file: none yet is no members; rewritten and reread
 * (peer_group_reread) it changes the group; one that others may write is
 * refused and the group stays.
 */
static void test_peers_file(void **state)
{
	char key[256], path[256], err[512];
	struct peer_group *pg = NULL;
	struct peer_opts o = {
		.listen = "127.0.0.1:1",
		.peers_file = path,
		.key_file = key,
		.timeout_ms = 2000,
	};

	snprintf(key, sizeof(key), "%s/key", dir);
	write_key(key, KEY "\n", 0600);
	snprintf(path, sizeof(path), "%s/peers", dir);
	unlink(path);
	assert_int_equal(peer_group_create(&o, &pg, err, sizeof(err)), 0);
	assert_int_equal(members(pg), 1);
	write_key(path, "# job 7\n127.0.0.1:2 # n2\n127.0.0.1:3 # n3\n", 0644);
	assert_int_equal(peer_group_reread(pg, err, sizeof(err)), 0);
	assert_int_equal(members(pg), 3);
	write_key(path, "127.0.0.1:4\n", 0666);
	assert_int_equal(peer_group_reread(pg, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "writable by nobody else"));
	assert_int_equal(members(pg), 3);
	write_key(path, "127.0.0.1:4\n", 0620);
	assert_int_equal(peer_group_reread(pg, err, sizeof(err)), -EPERM);
	write_key(path, "# no job\n", 0644);
	assert_int_equal(peer_group_reread(pg, err, sizeof(err)), 0);
	assert_int_equal(members(pg), 1);
	peer_group_destroy(pg);
}

/*
 * Churn: a node whose jobs go through more than PEER_MAX other nodes
 * forgets former members to make room; it never forgets a member.
 */
static void test_churn(void **state)
{
	struct peer_group *pg = group("");
	static char list[PEER_MAX * 24];
	struct peer_stat *v;
	char err[512];
	size_t n;

	for (int round = 0; round < 3; round++) {
		size_t len = 0;

		for (int i = 2; i <= PEER_MAX; i++)
			len += (size_t)snprintf(list + len, sizeof(list) - len, "127.0.%d.1:%d,",
						round + 1, i);
		assert_int_equal(peer_group_reload(pg, list, NULL, err, sizeof(err)), 0);
		assert_int_equal(members(pg), PEER_MAX);
	}
	assert_int_equal(peer_group_stats(pg, &v, &n), 0);
	assert_int_equal(n, PEER_MAX);
	for (size_t i = 0; i < n; i++)
		assert_true(v[i].member);
	free(v);
	/* one more than fits: refused, the group as it was */
	{
		size_t len = 0;

		for (int i = 1; i < PEER_MAX; i++)
			len += (size_t)snprintf(list + len, sizeof(list) - len, "127.0.9.%d:1,", i);
		snprintf(list + len, sizeof(list) - len, "127.0.10.1:1");
		assert_int_equal(peer_group_reload(pg, list, NULL, err, sizeof(err)), -E2BIG);
		assert_int_equal(members(pg), PEER_MAX);
	}
	peer_group_destroy(pg);
}

struct done_box {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int res;
	bool done;
};

static void done_fn(void *arg, int res)
{
	struct done_box *b = arg;

	pthread_mutex_lock(&b->lock);
	b->res = res;
	b->done = true;
	pthread_cond_signal(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

static void test_refused_peer(void **state)
{
	/* 127.0.0.1:9 (discard) is closed here: connections are refused */
	struct peer_group *pg = group("127.0.0.1:9");
	struct done_box b = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false };
	static char buf[4096];
	struct peer_stat *st;
	size_t n;
	int i, rc = -ENOENT;

	for (i = 0; i < 100 && rc; i++) {
		struct sfs_id id = id_n((uint64_t)i + 100000);

		rc = peer_fetch_start(pg, &id, &id, &(struct peer_loc){ 1, 2, 0 }, buf, sizeof(buf), done_fn, &b);
	}
	assert_int_equal(rc, 0);
	pthread_mutex_lock(&b.lock);
	while (!b.done)
		pthread_cond_wait(&b.cond, &b.lock);
	pthread_mutex_unlock(&b.lock);
	assert_true(b.res < 0);
	/* skipped now: every chunk is ours */
	for (i = 0; i < 100; i++) {
		struct sfs_id id = id_n((uint64_t)i);

		assert_true(peer_owns(pg, &id));
	}
	assert_int_equal(peer_group_stats(pg, &st, &n), 0);
	assert_int_equal(n, 2);
	assert_true(st[1].backoff);
	assert_true(st[1].down);
	assert_false(st[0].down);
	assert_int_equal(st[1].failures, 1);
	assert_int_equal(st[1].fallbacks, 1);
	free(st);
	peer_group_destroy(pg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request),
		cmocka_unit_test(test_reply),
		cmocka_unit_test(test_tls),
		cmocka_unit_test(test_key_file),
		cmocka_unit_test(test_rendezvous),
		cmocka_unit_test(test_peers_file),
		cmocka_unit_test(test_churn),
		cmocka_unit_test(test_refused_peer),
	};
	int rc;

	if (!mkdtemp(dir))
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	{
		char path[300];

		snprintf(path, sizeof(path), "%s/key", dir);
		unlink(path);
		rmdir(dir);
	}
	return rc;
}
