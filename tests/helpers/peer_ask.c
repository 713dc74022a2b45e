/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_ask: hand-made requests to a node's peer server, as the tests play
 * a member (with the key) or someone without it.
 *
 *   peer_ask [-k KEYFILE] [-s SRCIP] HOST:PORT REQ...
 *
 * REQ is IDHEX:LEN:TAG:INO:IDX (IDHEX the 32 hex digits of a chunk id,
 * TAG in hex).  One TLS connection (src/peer/peer_tls.h) from SRCIP (default
 * any), keyed by KEYFILE's first line (default: a random key, so the
 * handshake must fail), then each request in turn on it.  Prints one line
 * per request: "status S len N ok|bad" (ok: the bytes hash to IDHEX), or
 * "handshake failed: WHY" once.  Exits 0 when every request was
 * answered, 3 when the handshake failed, 1 on a broken connection, 2 on
 * a usage error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/rand.h>

#include "peer/peer_proto.h"
#include "peer/peer_tls.h"
#include "util.h"

static int usage(void)
{
	fprintf(stderr, "usage: peer_ask [-k KEYFILE] [-s SRCIP] HOST:PORT IDHEX:LEN:TAGHEX:INO:IDX...\n");
	return 2;
}

static int io_all(SSL *ssl, void *buf, size_t len, bool wr)
{
	size_t done = 0;

	while (done < len) {
		int r = wr ? SSL_write(ssl, (char *)buf + done, (int)(len - done))
			   : SSL_read(ssl, (char *)buf + done, (int)(len - done));

		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *keyfile = NULL, *src = NULL;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct peer_key key;
	struct peer_tls *t;
	char err[512], host[64], *colon;
	struct timeval tv = { .tv_sec = 10 };
	SSL *ssl;
	int opt, fd, rc = 0;

	peer_tls_thread_init();
	while ((opt = getopt(argc, argv, "k:s:")) != -1) {
		if (opt == 'k')
			keyfile = optarg;
		else if (opt == 's')
			src = optarg;
		else
			return usage();
	}
	if (argc - optind < 2)
		return usage();
	snprintf(host, sizeof(host), "%s", argv[optind]);
	colon = strrchr(host, ':');
	if (!colon)
		return usage();
	*colon = '\0';
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return usage();
	if (keyfile) {
		if (peer_key_load(keyfile, &key, err, sizeof(err))) {
			fprintf(stderr, "peer_ask: %s\n", err);
			return 2;
		}
	} else {
		key.len = 64;
		RAND_bytes(key.k, (int)key.len);
	}
	if (peer_tls_create(&key, false, &t, err, sizeof(err))) {
		fprintf(stderr, "peer_ask: %s\n", err);
		return 2;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (src) {
		struct sockaddr_in me = { .sin_family = AF_INET };

		if (inet_pton(AF_INET, src, &me.sin_addr) != 1 ||
		    bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
			perror("peer_ask: bind");
			return 2;
		}
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("peer_ask: connect");
		return 1;
	}
	ssl = peer_tls_new(t, fd);
	if (SSL_connect(ssl) != 1 || !peer_tls_authenticated(ssl)) {
		unsigned long e = ERR_get_error();

		printf("handshake failed: %s\n", e ? ERR_reason_error_string(e) : "closed");
		rc = 3;
		goto out;
	}
	for (int i = optind + 1; i < argc; i++) {
		unsigned char req[PEER_REQ_LEN], rep[PEER_REP_LEN];
		struct sfs_id id, got;
		struct peer_loc loc;
		char idhex[33] = "";
		unsigned long long len, tag, ino, idx;
		int status;
		uint32_t n;
		void *buf;

		if (sscanf(argv[i], "%32[0-9a-f]:%llu:%llx:%llu:%llu", idhex, &len, &tag, &ino, &idx) != 5 ||
		    sfs_id_parse(idhex, &id)) {
			rc = usage();
			goto out;
		}
		loc = (struct peer_loc){ .tag = tag, .ino = ino, .idx = (uint32_t)idx };
		peer_req_encode(&id, (uint32_t)len, &loc, req);
		if (io_all(ssl, req, sizeof(req), true) || io_all(ssl, rep, sizeof(rep), false) ||
		    peer_rep_decode(rep, &status, &n)) {
			printf("connection broken\n");
			rc = 1;
			goto out;
		}
		buf = malloc(n ? n : 1);
		if (!buf || io_all(ssl, buf, n, false)) {
			printf("connection broken\n");
			free(buf);
			rc = 1;
			goto out;
		}
		sfs_id_of(buf, n, &got);
		printf("status %d len %" PRIu32 " %s\n", status, n,
		       n && sfs_id_eq(&got, &id) ? "ok" : "bad");
		free(buf);
	}
	SSL_shutdown(ssl);
out:
	SSL_free(ssl);
	close(fd);
	peer_tls_destroy(t);
	return rc;
}
