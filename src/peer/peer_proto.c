/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_proto: see peer_proto.h.
 */
#include "peer_proto.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REQ_MAGIC	0x33504653U	/* "SFP3" */
#define REQ_V2_MAGIC	0x32504653U	/* "SFP2" */
#define REQ_V1_MAGIC	0x31504653U	/* "SFP1" */
#define REP_MAGIC	0x31524653U	/* "SFR1" */

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

void peer_req_encode(const struct sfs_id *id, uint32_t len, const struct peer_loc *loc,
		     unsigned char out[PEER_REQ_LEN])
{
	memset(out, 0, PEER_REQ_LEN);
	st32(out, REQ_MAGIC);
	st32(out + 4, PEER_OP_GET);
	st64(out + 8, id->hi);
	st64(out + 16, id->lo);
	st32(out + 24, len);
	st32(out + 28, loc->idx);
	st64(out + 32, loc->ino);
	st64(out + 40, loc->tag);
}

int peer_req_decode(const unsigned char in[PEER_REQ_LEN], struct peer_req_msg *m)
{
	if (ld32(in) != REQ_MAGIC)
		return -EBADMSG;
	m->op = ld32(in + 4);
	m->id.hi = ld64(in + 8);
	m->id.lo = ld64(in + 16);
	m->len = ld32(in + 24);
	m->loc.idx = ld32(in + 28);
	m->loc.ino = ld64(in + 32);
	m->loc.tag = ld64(in + 40);
	return 0;
}

bool peer_req_legacy(const unsigned char in[4])
{
	uint32_t m = ld32(in);

	return m == REQ_V1_MAGIC || m == REQ_V2_MAGIC;
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
