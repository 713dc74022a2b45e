/*
 * fuzz_peerproto: libFuzzer harness for the peer wire protocol
 * (src/peer_proto.c), the bytes another machine sends a node's peer server
 * and its client.
 *
 * Each input is cut into a request (80 bytes, padded with zeros) and a
 * reply header (the next 16).  The request is tried as it is and with its
 * MAC made right under the harness's key, so that mutations reach the
 * decoder past the MAC; a request whose MAC was not made right must be
 * refused (a forged tag would be a finding).  A decoded request then goes
 * through the replay window twice: the second time it must be refused.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "peer_proto.h"

#define KEY "fuzz-key-fuzz-key-fuzz-key-fuzz-key"

static struct peer_replay *replay;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char req[PEER_REQ_LEN] = { 0 }, rep[PEER_REP_LEN] = { 0 };
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	struct peer_key k = { .len = sizeof(KEY) - 1 };
	struct peer_req_msg m;
	bool forged;
	int status, rc;
	uint32_t len;

	if (!replay && peer_replay_create(&replay))
		return 0;
	memcpy(k.k, KEY, k.len);
	memcpy(req, data, size < sizeof(req) ? size : sizeof(req));
	if (size > sizeof(req))
		memcpy(rep, data + sizeof(req), MIN(size - sizeof(req), sizeof(rep)));

	/* as it is: only a request whose tag is right may pass */
	HMAC(EVP_sha256(), k.k, (int)k.len, req, 72, md, &mdlen);
	forged = memcmp(md, req + 72, PEER_MAC_LEN) != 0;
	rc = peer_req_decode(&k, req, &m);
	if (rc == 0 && forged)
		__builtin_trap();
	/* with its tag made right */
	memcpy(req + 72, md, PEER_MAC_LEN);
	rc = peer_req_decode(&k, req, &m);
	if (rc == 0) {
		uint64_t now = m.ts_ms;

		if (peer_replay_check(replay, &m, now) && peer_replay_check(replay, &m, now))
			__builtin_trap();	/* accepted twice */
	}
	if (peer_rep_decode(rep, &status, &len) == 0 && (status < 0 || status > 4095))
		__builtin_trap();
	return 0;
}
