/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rados: see rados.h.  Connection setup and the pool-layout objects; the
 * data path (chunk reads, chunk uploads) lives with its users.
 */
#include "rados.h"

#include "config.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_CONF		"/etc/ceph/ceph.conf"
#define DEFAULT_TIMEOUT_MS	30000
/* aio pieces when reading or writing a large object */
#define IO_PIECE		SFS_RADOS_PART_SIZE
#define IO_INFLIGHT		4
/* manifest copies: 4 MiB reads, IO_INFLIGHT of one object at a time */
#define FETCH_PIECE		(4u * 1024 * 1024)

void sfs_rados_opts_from_config(struct sfs_rados_opts *o,
				const struct sfs_config *cfg)
{
	o->conf = cfg->ceph_conf;
	o->client_id = cfg->client_id;
	o->keyring = cfg->keyring;
	o->timeout_ms = cfg->rados_timeout_ms;
}

static bool empty(const char *s)
{
	return !s || !*s;
}

static int set_timeouts(rados_t cl, uint64_t ms)
{
	static const char *const keys[] = {
		"rados_osd_op_timeout", "rados_mon_op_timeout",
		"client_mount_timeout",
	};
	char v[32];

	/* these options are whole seconds in Ceph 16 ("1.5" is refused) */
	snprintf(v, sizeof(v), "%llu", (unsigned long long)MAX(1, DIV_ROUND_UP(ms, 1000)));
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		int rc = rados_conf_set(cl, keys[i], v);

		if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * Ceph's clients gather log entries in memory at levels up to 5 for the
 * subsystems a read passes through (debug_client = 0/5, ...), to dump
 * them if the process crashes: a formatted entry per operation, 15 % of
 * a cephfs:// walk's time here.  Off by default, before the config file
 * is read: a ceph.conf or CEPH_ARGS that sets one wins.
 */
static void quiet_logs(rados_t cl)
{
	static const char *const subsys[] = {
		"debug_client", "debug_ms", "debug_objecter", "debug_objectcacher",
		"debug_rados", "debug_monc", "debug_auth", "debug_striper",
	};

	for (size_t i = 0; i < ARRAY_SIZE(subsys); i++)
		(void)rados_conf_set(cl, subsys[i], "0/0");
}

int sfs_rados_cli_opt(int opt, const char *arg, struct sfs_rados_opts *o,
		      char *err, size_t errlen)
{
	uint64_t v;

	switch (opt) {
	case SFS_RADOS_OPT_CONF:
		o->conf = arg;
		return 1;
	case SFS_RADOS_OPT_ID:
		o->client_id = arg;
		return 1;
	case SFS_RADOS_OPT_KEYRING:
		o->keyring = arg;
		return 1;
	case SFS_RADOS_OPT_TIMEOUT:
		if (parse_duration_ms(arg, &v) || v < 1000) {
			snprintf(err, errlen, "--timeout: '%s' is not a duration of at least 1s", arg);
			return -EINVAL;
		}
		o->timeout_ms = v;
		return 1;
	}
	return 0;
}

int sfs_rados_connect(const struct sfs_rados_opts *o, rados_t *out,
		      char *err, size_t errlen)
{
	const char *id = empty(o->client_id) ? "admin" : o->client_id;
	const char *conf = o->conf;
	uint64_t tmo = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
	char mon[256] = "?";
	rados_t cl;
	int rc;

	*out = NULL;
	if (empty(conf))
		conf = getenv("CEPH_CONF");
	if (empty(conf))
		conf = DEFAULT_CONF;
	if (access(conf, R_OK) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot read the Ceph configuration %s: %s",
			 conf, strerror(-rc));
		return rc;
	}
	if (!empty(o->keyring) && access(o->keyring, R_OK) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot read the keyring %s: %s",
			 o->keyring, strerror(-rc));
		return rc;
	}

	rc = rados_create(&cl, id);
	if (rc < 0) {
		snprintf(err, errlen, "cannot create a librados handle for client.%s: %s",
			 id, strerror(-rc));
		return rc;
	}
	quiet_logs(cl);
	rc = rados_conf_read_file(cl, conf);
	if (rc < 0) {
		snprintf(err, errlen, "cannot parse the Ceph configuration %s: %s",
			 conf, strerror(-rc));
		goto out_shutdown;
	}
	/* like the ceph tools: CEPH_ARGS overrides the file, -o overrides both */
	rc = rados_conf_parse_env(cl, NULL);
	if (rc < 0) {
		snprintf(err, errlen, "cannot parse CEPH_ARGS (\"%s\"): %s",
			 getenv("CEPH_ARGS") ?: "", strerror(-rc));
		goto out_shutdown;
	}
	if (!empty(o->keyring)) {
		rc = rados_conf_set(cl, "keyring", o->keyring);
		if (rc < 0) {
			snprintf(err, errlen, "cannot use the keyring %s: %s",
				 o->keyring, strerror(-rc));
			goto out_shutdown;
		}
	}
	rc = set_timeouts(cl, tmo);
	if (rc < 0) {
		snprintf(err, errlen, "cannot set the librados timeouts: %s",
			 strerror(-rc));
		goto out_shutdown;
	}
	if (rados_conf_get(cl, "mon_host", mon, sizeof(mon)) < 0 || !mon[0])
		snprintf(mon, sizeof(mon), "(no mon_host)");

	rc = rados_connect(cl);
	if (rc < 0) {
		const char *hint = "";

		if (rc == -EPERM || rc == -EACCES) {
			rc = -EACCES;
			hint = " (bad key?)";
		} else if (rc == -ETIMEDOUT || rc == -EINTR) {
			rc = -ETIMEDOUT;
			hint = " (is the cluster running?)";
		} else if (rc == -ENOENT) {
			hint = " (no keyring found for this client?)";
		}
		snprintf(err, errlen,
			 "cannot connect to the cluster at %s (%s) as client.%s: %s%s",
			 mon, conf, id, strerror(-rc), hint);
		goto out_shutdown;
	}
	*out = cl;
	return 0;

out_shutdown:
	rados_shutdown(cl);
	return rc;
}

int sfs_rados_ioctx(rados_t cl, const char *pool, const char *nspace,
		    rados_ioctx_t *out, char *err, size_t errlen)
{
	int rc = rados_ioctx_create(cl, pool, out);

	if (rc == -ENOENT) {
		snprintf(err, errlen, "pool '%s' does not exist", pool);
		return rc;
	}
	if (rc < 0) {
		snprintf(err, errlen, "cannot open pool '%s': %s", pool,
			 strerror(-rc));
		return rc;
	}
	rados_ioctx_set_namespace(*out, empty(nspace) ? NULL : nspace);
	return 0;
}

bool sfs_rados_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > SFS_RADOS_NAME_MAX)
		return false;
	/* no '.': sfs.manifest.NAME.V.PART must parse one way only */
	return strspn(name, "abcdefghijklmnopqrstuvwxyz"
			    "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
			    "0123456789_-") == n;
}

int sfs_rados_aio_reap(rados_completion_t c)
{
	int r;

	rados_aio_wait_for_complete_and_cb(c);
	r = rados_aio_get_return_value(c);
	rados_aio_release(c);
	return r;
}

void sfs_rados_write_immutable(rados_write_op_t op, const void *buf,
			       size_t len)
{
	rados_write_op_set_alloc_hint2(op, len, len,
				       LIBRADOS_ALLOC_HINT_FLAG_SEQUENTIAL_WRITE |
				       LIBRADOS_ALLOC_HINT_FLAG_SEQUENTIAL_READ |
				       LIBRADOS_ALLOC_HINT_FLAG_APPEND_ONLY |
				       LIBRADOS_ALLOC_HINT_FLAG_IMMUTABLE);
	rados_write_op_write_full(op, buf, len);
}

void sfs_rados_chunk_oid(const struct sfs_id *id, char *out)
{
	char hex[SFS_ID_HEX_LEN + 1];

	sfs_id_hex(id, hex);
	snprintf(out, SFS_RADOS_OID_MAX, SFS_RADOS_CHUNK_PREFIX "%s", hex);
}

void sfs_rados_pack_oid(const struct sfs_id *id, char *out)
{
	char hex[SFS_ID_HEX_LEN + 1];

	sfs_id_hex(id, hex);
	snprintf(out, SFS_RADOS_OID_MAX, SFS_RADOS_PACK_PREFIX "%s", hex);
}

void sfs_rados_manifest_oid(const char *name, uint64_t version, char *out)
{
	snprintf(out, SFS_RADOS_OID_MAX, SFS_RADOS_MANIFEST_PREFIX "%s.%" PRIu64,
		 name, version);
}

void sfs_rados_part_oid(const char *name, uint64_t version, uint64_t part,
			char *out)
{
	snprintf(out, SFS_RADOS_OID_MAX,
		 SFS_RADOS_MANIFEST_PREFIX "%s.%" PRIu64 ".%" PRIu64,
		 name, version, part);
}

void sfs_rados_dataset_oid(const char *name, char *out)
{
	snprintf(out, SFS_RADOS_OID_MAX, SFS_RADOS_DATASET_PREFIX "%s", name);
}

/* Parse a decimal u64 that fills [s, end) exactly. */
static int parse_u64(const char *s, const char *end, uint64_t *v)
{
	uint64_t x = 0;

	if (s == end)
		return -EINVAL;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9' || x > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		x = x * 10 + (uint64_t)(*s - '0');
	}
	*v = x;
	return 0;
}

enum sfs_rados_kind sfs_rados_oid_parse(const char *oid, struct sfs_rados_oid *o)
{
	static const size_t cpl = sizeof(SFS_RADOS_CHUNK_PREFIX) - 1,
			    ppl = sizeof(SFS_RADOS_PACK_PREFIX) - 1,
			    mpl = sizeof(SFS_RADOS_MANIFEST_PREFIX) - 1,
			    dpl = sizeof(SFS_RADOS_DATASET_PREFIX) - 1;
	char again[SFS_RADOS_OID_MAX];
	const char *p, *dot, *dot2, *end = oid + strlen(oid);

	memset(o, 0, sizeof(*o));
	o->part = -1;
	if (!strncmp(oid, SFS_RADOS_CHUNK_PREFIX, cpl)) {
		if (strlen(oid + cpl) != SFS_ID_HEX_LEN ||
		    sfs_id_parse(oid + cpl, &o->id))
			return o->kind = SFS_RADOS_OTHER;
		sfs_rados_chunk_oid(&o->id, again);
		return o->kind = strcmp(again, oid) ? SFS_RADOS_OTHER : SFS_RADOS_CHUNK;
	}
	if (!strncmp(oid, SFS_RADOS_PACK_PREFIX, ppl)) {
		if (strlen(oid + ppl) != SFS_ID_HEX_LEN ||
		    sfs_id_parse(oid + ppl, &o->id))
			return o->kind = SFS_RADOS_OTHER;
		sfs_rados_pack_oid(&o->id, again);
		return o->kind = strcmp(again, oid) ? SFS_RADOS_OTHER : SFS_RADOS_PACK;
	}
	if (!strncmp(oid, SFS_RADOS_DATASET_PREFIX, dpl)) {
		p = oid + dpl;
		if ((size_t)(end - p) > SFS_RADOS_NAME_MAX)
			return o->kind = SFS_RADOS_OTHER;
		memcpy(o->name, p, (size_t)(end - p));
		return o->kind = sfs_rados_name_ok(o->name) ? SFS_RADOS_DATASET
							   : SFS_RADOS_OTHER;
	}
	if (strncmp(oid, SFS_RADOS_MANIFEST_PREFIX, mpl))
		return o->kind = SFS_RADOS_OTHER;
	/* NAME has no '.', so the first dot ends it */
	p = oid + mpl;
	dot = strchr(p, '.');
	if (!dot || (size_t)(dot - p) > SFS_RADOS_NAME_MAX)
		return o->kind = SFS_RADOS_OTHER;
	memcpy(o->name, p, (size_t)(dot - p));
	dot2 = strchr(dot + 1, '.');
	if (!sfs_rados_name_ok(o->name) ||
	    parse_u64(dot + 1, dot2 ? dot2 : end, &o->version) || o->version == 0)
		return o->kind = SFS_RADOS_OTHER;
	if (dot2) {
		uint64_t part;

		if (parse_u64(dot2 + 1, end, &part) || part > INT64_MAX)
			return o->kind = SFS_RADOS_OTHER;
		o->part = (int64_t)part;
		sfs_rados_part_oid(o->name, o->version, part, again);
	} else {
		sfs_rados_manifest_oid(o->name, o->version, again);
	}
	/* the same spelling back: no leading zeros, nothing after */
	return o->kind = strcmp(again, oid) ? SFS_RADOS_OTHER : SFS_RADOS_MANIFEST;
}

int sfs_rados_latest(rados_ioctx_t io, const char *name, uint64_t *version)
{
	char oid[SFS_RADOS_OID_MAX], buf[32];
	int n;

	sfs_rados_dataset_oid(name, oid);
	n = rados_read(io, oid, buf, sizeof(buf) - 1, 0);
	if (n < 0)
		return n;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	if (parse_u64(buf, buf + n, version) || *version == 0) {
		log_err("rados: %s does not hold a version number", oid);
		return -EIO;
	}
	return 0;
}

/*
 * Read [off, off + len) of @oid into @buf in pieces of @piece bytes,
 * IO_INFLIGHT in flight.  Returns 0, -EIO if the object is shorter, or -errno.
 */
static int read_pieces_at(rados_ioctx_t io, const char *oid, char *buf,
			  size_t len, uint64_t off, size_t piece)
{
	rados_completion_t c[IO_INFLIGHT];
	size_t want[IO_INFLIGHT];
	size_t npieces = DIV_ROUND_UP(len, piece), next = 0, done = 0;
	int rc = 0;

	while (done < npieces) {
		/* start pieces while there is room and no error */
		while (!rc && next < npieces && next - done < IO_INFLIGHT) {
			size_t k = next % IO_INFLIGHT;
			uint64_t at = (uint64_t)next * piece;
			size_t n = MIN(piece, len - at);
			int r;

			rados_aio_create_completion2(NULL, NULL, &c[k]);
			r = rados_aio_read(io, oid, c[k], buf + at, n, off + at);
			if (r < 0) {
				rados_aio_release(c[k]);
				rc = r;
				break;
			}
			want[k] = n;
			next++;
		}
		if (done == next)
			break;
		{
			size_t k = done % IO_INFLIGHT;
			int r;

			r = sfs_rados_aio_reap(c[k]);
			if (!rc && r < 0)
				rc = r;
			else if (!rc && (size_t)r != want[k])
				rc = -EIO;
			done++;
		}
	}
	return rc;
}

/* "parts N SIZE\n" */
static int parse_head(const char *b, size_t len, uint64_t *nparts, uint64_t *size)
{
	const char *p = b + 6, *end = b + len, *sp;

	while (end > p && end[-1] == '\n')
		end--;
	sp = memchr(p, ' ', (size_t)(end - p));
	if (!sp || parse_u64(p, sp, nparts) || parse_u64(sp + 1, end, size))
		return -EINVAL;
	if (*nparts == 0 || *nparts != DIV_ROUND_UP(*size, SFS_RADOS_PART_SIZE))
		return -EINVAL;
	return 0;
}

/* a head object is "parts N SIZE\n": 6 + 20 + 1 + 20 + 1 bytes at most */
#define HEAD_MAX	64

int sfs_rados_manifest_layout(rados_ioctx_t io, const char *name,
			      uint64_t version, struct sfs_rados_mlayout *out,
			      char *err, size_t errlen)
{
	char oid[SFS_RADOS_OID_MAX], head[HEAD_MAX];
	rados_read_op_t op;
	size_t got = 0;
	int rc, stat_rval = 0, read_rval = 0;

	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->version = version;
	sfs_rados_manifest_oid(name, version, oid);
	/* one round trip: the head's size and mtime and its first bytes */
	op = rados_create_read_op();
	if (!op) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rados_read_op_stat(op, &out->head_size, &out->head_mtime, &stat_rval);
	rados_read_op_read(op, 0, sizeof(head), head, &got, &read_rval);
	rc = rados_read_op_operate(op, io, oid, 0);
	rados_release_read_op(op);
	if (rc == 0)
		rc = stat_rval < 0 ? stat_rval : read_rval < 0 ? read_rval : 0;
	if (rc == -ENOENT) {
		snprintf(err, errlen, "%s@%" PRIu64 " does not exist (no object %s)",
			 name, version, oid);
		return rc;
	}
	if (rc < 0) {
		snprintf(err, errlen, "cannot read %s: %s", oid, strerror(-rc));
		return rc;
	}
	if (out->head_size > SFS_RADOS_PART_SIZE || got > out->head_size) {
		snprintf(err, errlen, "%s: bad manifest head object", oid);
		return -EIO;
	}
	if (got < 6 || memcmp(head, "parts ", 6)) {
		out->size = out->head_size;	/* a one-object manifest */
		return 0;
	}
	if (out->head_size > HEAD_MAX || got != out->head_size ||
	    parse_head(head, got, &out->nparts, &out->size)) {
		snprintf(err, errlen, "%s: bad manifest head object", oid);
		return -EIO;
	}
	return 0;
}

int sfs_rados_manifest_pread(rados_ioctx_t io, const struct sfs_rados_mlayout *l,
			     void *buf, size_t len, uint64_t off,
			     char *err, size_t errlen)
{
	char oid[SFS_RADOS_OID_MAX];
	char *b = buf;

	if (off > l->size || len > l->size - off) {
		snprintf(err, errlen, "%s@%" PRIu64 ": read past the manifest's end",
			 l->name, l->version);
		return -EINVAL;
	}
	while (len) {
		uint64_t part = l->nparts ? off / SFS_RADOS_PART_SIZE : 0;
		uint64_t poff = l->nparts ? off % SFS_RADOS_PART_SIZE : off;
		size_t n = (size_t)MIN((uint64_t)len, (l->nparts ? SFS_RADOS_PART_SIZE : l->size) - poff);
		int rc;

		if (l->nparts)
			sfs_rados_part_oid(l->name, l->version, part, oid);
		else
			sfs_rados_manifest_oid(l->name, l->version, oid);
		/* the objects of a manifest never change: a short read is damage */
		rc = read_pieces_at(io, oid, b, n, poff, FETCH_PIECE);
		if (rc) {
			snprintf(err, errlen, "cannot read manifest %s %s: %s%s",
				 l->nparts ? "part" : "object", oid, strerror(-rc),
				 l->nparts && (rc == -ENOENT || rc == -EIO) ?
				 " (publish still running or interrupted?)" : "");
			return rc == -ENOENT ? -EIO : rc;
		}
		b += n;
		off += n;
		len -= n;
	}
	return 0;
}

int sfs_rados_manifest_read(rados_ioctx_t io, const char *name,
			    uint64_t version, void **bufp, size_t *lenp,
			    char *err, size_t errlen)
{
	struct sfs_rados_mlayout l;
	char *buf;
	int rc;

	*bufp = NULL;
	*lenp = 0;
	rc = sfs_rados_manifest_layout(io, name, version, &l, err, errlen);
	if (rc)
		return rc;
	if (l.size > SIZE_MAX - 1 || !(buf = malloc(MAX(l.size, (uint64_t)1)))) {
		snprintf(err, errlen, "%s@%" PRIu64 ": cannot allocate %" PRIu64 " bytes",
			 name, version, l.size);
		return -ENOMEM;
	}
	rc = sfs_rados_manifest_pread(io, &l, buf, (size_t)l.size, 0, err, errlen);
	if (rc) {
		free(buf);
		return rc;
	}
	*bufp = buf;
	*lenp = l.size;
	return 0;
}

int sfs_rados_manifest_fetch(rados_ioctx_t io, const struct sfs_rados_mlayout *l,
			     int fd, char *err, size_t errlen)
{
	size_t step = (size_t)MIN(l->size, (uint64_t)SFS_RADOS_PART_SIZE);
	char *buf;
	int rc = 0;

	/* one part at a time: the daemon never holds more than 32 MiB of it */
	buf = malloc(MAX(step, (size_t)1));
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint64_t off = 0; off < l->size; off += step) {
		size_t n = (size_t)MIN((uint64_t)step, l->size - off);
		ssize_t w;

		rc = sfs_rados_manifest_pread(io, l, buf, n, off, err, errlen);
		if (rc)
			break;
		w = pwrite_full(fd, buf, n, (off_t)off);
		if (w != (ssize_t)n) {
			rc = w < 0 ? (int)w : -EIO;
			snprintf(err, errlen, "cannot write the manifest copy: %s", strerror(-rc));
			break;
		}
	}
	free(buf);
	return rc;
}

/* Exclusive create of @oid holding @buf. */
static int create_excl(rados_ioctx_t io, const char *oid, const void *buf,
		       size_t len)
{
	rados_write_op_t op = rados_create_write_op();
	int rc;

	if (!op)
		return -ENOMEM;
	rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
	sfs_rados_write_immutable(op, buf, len);
	rc = rados_write_op_operate(op, io, oid, NULL, 0);
	rados_release_write_op(op);
	return rc;
}

int sfs_rados_manifest_write_fd(rados_ioctx_t io, const char *name,
				 uint64_t version, int fd, uint64_t len,
				 char *err, size_t errlen)
{
	char oid[SFS_RADOS_OID_MAX], head[64];
	uint64_t nparts = DIV_ROUND_UP(len, SFS_RADOS_PART_SIZE);
	char *buf;
	int rc = 0;

	buf = malloc((size_t)MIN(MAX(len, (uint64_t)1), (uint64_t)SFS_RADOS_PART_SIZE));
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	sfs_rados_manifest_oid(name, version, oid);
	if (len <= SFS_RADOS_PART_SIZE) {
		ssize_t r = pread_full(fd, buf, (size_t)len, 0);

		if (r != (ssize_t)len) {
			rc = r < 0 ? (int)r : -EIO;
			snprintf(err, errlen, "cannot read the manifest back: %s", strerror(-rc));
		} else {
			rc = create_excl(io, oid, buf, (size_t)len);
			if (rc < 0 && rc != -EEXIST)
				snprintf(err, errlen, "cannot write %s: %s", oid, strerror(-rc));
		}
		free(buf);
		return rc;
	}
	/* claim the version first: only the claimer ever writes these parts */
	snprintf(head, sizeof(head), "parts %" PRIu64 " %" PRIu64 "\n", nparts, len);
	rc = create_excl(io, oid, head, strlen(head));
	if (rc < 0 && rc != -EEXIST)
		snprintf(err, errlen, "cannot write %s: %s", oid, strerror(-rc));
	/* one part at a time from the file: never more than 32 MiB in memory */
	for (uint64_t i = 0; !rc && i < nparts; i++) {
		uint64_t off = i * SFS_RADOS_PART_SIZE;
		size_t n = (size_t)MIN((uint64_t)SFS_RADOS_PART_SIZE, len - off);
		ssize_t r = pread_full(fd, buf, n, (off_t)off);
		rados_write_op_t op;

		sfs_rados_part_oid(name, version, i, oid);
		if (r != (ssize_t)n) {
			rc = r < 0 ? (int)r : -EIO;
			snprintf(err, errlen, "cannot read the manifest back: %s", strerror(-rc));
			break;
		}
		op = rados_create_write_op();
		if (!op) {
			rc = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			break;
		}
		sfs_rados_write_immutable(op, buf, n);
		rc = rados_write_op_operate(op, io, oid, NULL, 0);
		rados_release_write_op(op);
		if (rc < 0)
			snprintf(err, errlen, "cannot write %s: %s", oid, strerror(-rc));
	}
	free(buf);
	return rc;
}

int sfs_rados_set_latest(rados_ioctx_t io, const char *name, uint64_t version,
			 bool *newer)
{
	char oid[SFS_RADOS_OID_MAX], text[32], padded[32];
	rados_write_op_t op;
	int rc;

	if (newer)
		*newer = false;
	sfs_rados_dataset_oid(name, oid);
	snprintf(text, sizeof(text), "%" PRIu64 "\n", version);
	/* zero-padded, so the OSD's string comparison is numeric */
	snprintf(padded, sizeof(padded), "%020" PRIu64, version);

	/* a few rounds at most: a racing first publish can make either path fail */
	for (int round = 0; round < 8; round++) {
		op = rados_create_write_op();
		if (!op)
			return -ENOMEM;
		/* proceeds only if our version > the stored one ("" if none);
		 * -ENOENT if the pointer does not exist yet */
		rados_write_op_cmpxattr(op, SFS_RADOS_VERSION_XATTR,
					LIBRADOS_CMPXATTR_OP_GT, padded, strlen(padded));
		rados_write_op_write_full(op, text, strlen(text));
		rados_write_op_setxattr(op, SFS_RADOS_VERSION_XATTR, padded,
					strlen(padded));
		rc = rados_write_op_operate(op, io, oid, NULL, 0);
		rados_release_write_op(op);
		if (rc == -ECANCELED) {
			if (newer)
				*newer = true;
			return 0;
		}
		if (rc != -ENOENT)
			return rc;

		/* first version: create the pointer */
		op = rados_create_write_op();
		if (!op)
			return -ENOMEM;
		rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
		rados_write_op_write_full(op, text, strlen(text));
		rados_write_op_setxattr(op, SFS_RADOS_VERSION_XATTR, padded,
					strlen(padded));
		rc = rados_write_op_operate(op, io, oid, NULL, 0);
		rados_release_write_op(op);
		if (rc != -EEXIST)
			return rc;
	}
	return rc;
}

/* ---- rados:// URIs ---- */

void sfs_rados_uri_release(struct sfs_rados_uri *u)
{
	free(u->copy);
	u->copy = NULL;
}

void sfs_rados_uri_opts(const struct sfs_rados_uri *u, struct sfs_rados_opts *o)
{
	if (u->conf)
		o->conf = u->conf;
	if (u->id)
		o->client_id = u->id;
	if (u->keyring)
		o->keyring = u->keyring;
	if (u->timeout_ms)
		o->timeout_ms = u->timeout_ms;
}

int sfs_rados_uri_conn_opt(struct sfs_rados_uri *u, const char *key, const char *v)
{
	if (!v)
		return 0;
	if (!strcmp(key, "conf"))
		u->conf = v;
	else if (!strcmp(key, "id"))
		u->id = v;
	else if (!strcmp(key, "keyring"))
		u->keyring = v;
	else if (!strcmp(key, "timeout"))
		return parse_duration_ms(v, &u->timeout_ms) || u->timeout_ms == 0 ? -EINVAL : 1;
	else
		return 0;
	return 1;
}

int sfs_rados_uri_parse(const char *uri, struct sfs_rados_uri *u, char *err, size_t errlen)
{
	char *p, *q, *slash, *tok, *save;
	int rc;

	memset(u, 0, sizeof(*u));
	if (strncmp(uri, "rados://", 8))
		return errf(err, errlen, -EINVAL, "%s: not a rados:// URI", uri);
	u->copy = strdup(uri + 8);
	if (!u->copy)
		return errf(err, errlen, -ENOMEM, "out of memory");
	p = u->copy;
	q = strchr(p, '?');
	if (q)
		*q++ = '\0';
	slash = strchr(p, '/');
	if (slash) {
		*slash = '\0';
		u->path = slash + 1;
	}
	if (!*p)
		return errf(err, errlen, -EINVAL, "%s: no pool after rados://", uri);
	u->pool = p;

	for (tok = q ? strtok_r(q, "&", &save) : NULL; tok;
	     tok = strtok_r(NULL, "&", &save)) {
		char *v = strchr(tok, '=');

		if (v)
			*v++ = '\0';
		if (!strcmp(tok, "plain") && (!v || !strcmp(v, "1") || !strcmp(v, "yes"))) {
			u->plain = true;
		} else if (v && !strcmp(tok, "ns")) {
			u->ns = v;
		} else if ((rc = sfs_rados_uri_conn_opt(u, tok, v)) != 0) {
			if (rc < 0)
				return errf(err, errlen, -EINVAL, "%s: bad timeout '%s'", uri, v);
		} else if (v && !strcmp(tok, "chunk_size")) {
			if (parse_size(v, &u->chunk_size) || u->chunk_size < 4096 ||
			    u->chunk_size > 64 * MiB ||
			    (u->chunk_size & (u->chunk_size - 1)))
				return errf(err, errlen, -EINVAL,
					    "%s: chunk_size must be a power of two from 4K to 64M", uri);
		} else {
			return errf(err, errlen, -EINVAL,
				    "%s: unknown option '%s' (known: plain, ns, conf, id, keyring, timeout, chunk_size)",
				    uri, tok);
		}
	}

	if (u->plain) {
		if (u->ns)
			return errf(err, errlen, -EINVAL,
				    "%s: in plain mode the namespace is the path", uri);
		u->ns = u->path ? u->path : "";
		return 0;
	}
	if (!u->path || !*u->path)
		return 0;	/* a pool alone (gc) */
	u->name = u->path;
	p = strchr(u->path, '@');
	if (p) {
		char *end;

		*p++ = '\0';	/* path and name: NAME */
		errno = 0;
		u->version = strtoull(p, &end, 10);
		if (errno || !*p || *end || *p == '-' || u->version == 0)
			return errf(err, errlen, -EINVAL, "%s: bad version '%s'", uri, p);
	}
	if (!sfs_rados_name_ok(u->name))
		return errf(err, errlen, -EINVAL,
			    "%s: bad dataset name '%s' (letters, digits, '_' and '-', at most %d)",
			    uri, u->name, SFS_RADOS_NAME_MAX);
	return 0;
}
