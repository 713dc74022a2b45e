/*
 * peer_proto: see peer_proto.h.
 */
#include "peer_proto.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#define REQ_MAGIC	0x32504653U	/* "SFP2" */
#define REQ_V1_MAGIC	0x31504653U	/* "SFP1" */
#define REP_MAGIC	0x31524653U	/* "SFR1" */
#define MAC_OFF		72

/* nonces: 2^14 buckets of 8: 131072 requests per window of 60 s */
#define RP_BUCKETS	(1U << 14)
#define RP_WAYS		8

struct rp_slot {
	uint64_t n0, n1;	/* the nonce */
	uint64_t until_ms;	/* remembered until; 0: free */
};

struct peer_replay {
	pthread_mutex_t lock;
	struct rp_slot slot[RP_BUCKETS][RP_WAYS];	/* protected by lock */
};

static void st32(unsigned char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void st64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static uint32_t ld32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t ld64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

uint64_t peer_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int peer_key_load(const char *path, struct peer_key *key, char *err, size_t errlen)
{
	char line[PEER_KEY_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t len;
	int fd;

	memset(key, 0, sizeof(*key));
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		snprintf(err, errlen, "peer_key_file %s: %s", path, strerror(e));
		return -e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(err, errlen, "peer_key_file %s: not a regular file", path);
		return -EPERM;
	}
	if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 077)) {
		close(fd);
		snprintf(err, errlen,
			 "peer_key_file %s: must be owned by root and not accessible to group or others (it is uid %u, mode %04o): chmod 600 it",
			 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "peer_key_file %s: cannot read it", path);
		return -EIO;
	}
	line[n] = '\0';
	len = strcspn(line, "\r\n");
	while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	if (len < PEER_KEY_MIN || len > PEER_KEY_MAX) {
		explicit_bzero(line, sizeof(line));
		snprintf(err, errlen,
			 "peer_key_file %s: the key (its first line) must have %d to %d characters",
			 path, PEER_KEY_MIN, PEER_KEY_MAX);
		return -EINVAL;
	}
	memcpy(key->k, line, len);
	key->len = len;
	explicit_bzero(line, sizeof(line));
	return 0;
}

void peer_key_wipe(struct peer_key *key)
{
	explicit_bzero(key, sizeof(*key));
}

static void mac_of(const struct peer_key *key, const unsigned char *msg,
		   unsigned char out[PEER_MAC_LEN])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	HMAC(EVP_sha256(), key->k, (int)key->len, msg, MAC_OFF, md, &mdlen);
	memcpy(out, md, PEER_MAC_LEN);
	explicit_bzero(md, sizeof(md));
}

int peer_req_encode(const struct peer_key *key, const struct sfs_id *id,
		    uint32_t len, const struct peer_loc *loc,
		    unsigned char out[PEER_REQ_LEN])
{
	memset(out, 0, PEER_REQ_LEN);
	st32(out, REQ_MAGIC);
	st32(out + 4, PEER_OP_GET);
	st64(out + 8, peer_wall_ms());
	if (RAND_bytes(out + 16, 16) != 1)
		return -EIO;
	st64(out + 32, id->hi);
	st64(out + 40, id->lo);
	st32(out + 48, len);
	st32(out + 52, loc->idx);
	st64(out + 56, loc->ino);
	st64(out + 64, loc->tag);
	mac_of(key, out, out + MAC_OFF);
	return 0;
}

int peer_req_decode(const struct peer_key *key, const unsigned char in[PEER_REQ_LEN],
		    struct peer_req_msg *m)
{
	unsigned char mac[PEER_MAC_LEN];

	if (ld32(in) != REQ_MAGIC)
		return -EBADMSG;
	mac_of(key, in, mac);
	if (CRYPTO_memcmp(mac, in + MAC_OFF, PEER_MAC_LEN))
		return -EACCES;
	m->op = ld32(in + 4);
	m->ts_ms = ld64(in + 8);
	memcpy(m->nonce, in + 16, 16);
	m->id.hi = ld64(in + 32);
	m->id.lo = ld64(in + 40);
	m->len = ld32(in + 48);
	m->loc.idx = ld32(in + 52);
	m->loc.ino = ld64(in + 56);
	m->loc.tag = ld64(in + 64);
	return 0;
}

bool peer_req_v1(const unsigned char in[4])
{
	return ld32(in) == REQ_V1_MAGIC;
}

void peer_rep_encode(int status, uint32_t len, unsigned char out[PEER_REP_LEN])
{
	memset(out, 0, PEER_REP_LEN);
	st32(out, REP_MAGIC);
	st32(out + 4, (uint32_t)status);
	st32(out + 8, status ? 0 : len);
}

int peer_rep_decode(const unsigned char in[PEER_REP_LEN], int *status, uint32_t *len)
{
	uint32_t s;

	if (ld32(in) != REP_MAGIC)
		return -EBADMSG;
	s = ld32(in + 4);
	if (s > 4095)
		return -EBADMSG;
	*status = (int)s;
	*len = ld32(in + 8);
	return 0;
}

int peer_replay_create(struct peer_replay **out)
{
	struct peer_replay *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	*out = r;
	return 0;
}

void peer_replay_destroy(struct peer_replay *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->lock);
	free(r);
}

bool peer_replay_check(struct peer_replay *r, const struct peer_req_msg *m,
		       uint64_t now)
{
	uint64_t n0, n1;
	struct rp_slot *b, *free_slot = NULL;

	if (m->ts_ms + PEER_SKEW_MS < now || m->ts_ms > now + PEER_SKEW_MS)
		return false;
	memcpy(&n0, m->nonce, 8);
	memcpy(&n1, m->nonce + 8, 8);
	pthread_mutex_lock(&r->lock);
	b = r->slot[(n0 ^ (n1 >> 17)) % RP_BUCKETS];
	for (int i = 0; i < RP_WAYS; i++) {
		if (b[i].until_ms > now && b[i].n0 == n0 && b[i].n1 == n1) {
			pthread_mutex_unlock(&r->lock);
			return false;	/* seen */
		}
		if (b[i].until_ms <= now && !free_slot)
			free_slot = &b[i];
	}
	if (free_slot) {
		free_slot->n0 = n0;
		free_slot->n1 = n1;
		/* its time is within the skew: past this it is refused anyway */
		free_slot->until_ms = m->ts_ms + PEER_SKEW_MS + 1;
	}
	pthread_mutex_unlock(&r->lock);
	return free_slot != NULL;
}
