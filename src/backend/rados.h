/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rados: the librados pieces shared by the rados:// backend and
 * `stagefs publish`: connecting with bounded timeouts and clear errors, the
 * object names of the pool layout, and reading/writing manifests and the
 * dataset pointer.
 *
 * Pool layout (docs/manifest.md, docs/publish.md), all in one namespace:
 *   sfs.chunk.<32 hex>      chunk data, named by XXH3-128 of its bytes;
 *                           shared by every dataset and version in the pool
 *   sfs.pack.<32 hex>       small files stored together (a pack, at most a
 *                           chunk), named and shared the same way
 *   sfs.manifest.NAME.V     manifest of NAME@V (<= 32 MiB), or a head
 *                           "parts N SIZE\n" for sfs.manifest.NAME.V.0 ...
 *   sfs.dataset.NAME        "V\n": the latest version of NAME, plus an
 *                           xattr sfs.version (20-digit V) that keeps
 *                           concurrent updates monotonic
 *
 * Everything here is synchronous and bounded by the timeouts set at connect
 * (rados_osd_op_timeout, rados_mon_op_timeout, client_mount_timeout): no call
 * blocks forever on a dead cluster.  Prefix sfs_rados_ (rados_ is librados's).
 */
#ifndef STAGEFS_RADOS_H
#define STAGEFS_RADOS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <rados/librados.h>

#include "util.h"

struct sfs_config;

#define SFS_RADOS_CHUNK_PREFIX		"sfs.chunk."
#define SFS_RADOS_PACK_PREFIX		"sfs.pack."
#define SFS_RADOS_MANIFEST_PREFIX	"sfs.manifest."
#define SFS_RADOS_DATASET_PREFIX	"sfs.dataset."
#define SFS_RADOS_VERSION_XATTR		"sfs.version"
/* on chunks and packs: the time publish last found the object already there */
#define SFS_RADOS_SEEN_XATTR		"sfs.seen"
/* manifests larger than this are split into parts of this size */
#define SFS_RADOS_PART_SIZE		(32u * 1024 * 1024)
/* dataset names: [A-Za-z0-9_-], 1 to this many bytes */
#define SFS_RADOS_NAME_MAX		100
/* big enough for any object name built here */
#define SFS_RADOS_OID_MAX		192

/*
 * Chunk freshness, the rule that lets `stagefs gc` run beside a publish
 * (docs/gc.md): when publish finds a chunk it needs already stored with an
 * object mtime older than this, it rewrites the chunk's sfs.seen xattr
 * (which sets the mtime to now) before it counts the chunk as stored; gc
 * never removes a chunk whose mtime is within its grace period, and gives
 * the grace period a floor of this plus the longest publish it protects.
 */
#define SFS_RADOS_FRESHEN_S		600

/* What an object name in a stagefs pool is. */
enum sfs_rados_kind {
	SFS_RADOS_OTHER,	/* not named the way stagefs names objects */
	SFS_RADOS_CHUNK,	/* sfs.chunk.<id> */
	SFS_RADOS_MANIFEST,	/* sfs.manifest.NAME.V, or a part .V.PART */
	SFS_RADOS_DATASET,	/* sfs.dataset.NAME */
	SFS_RADOS_PACK,		/* sfs.pack.<id> */
};

struct sfs_rados_oid {
	enum sfs_rados_kind kind;
	struct sfs_id id;			/* CHUNK, PACK */
	char name[SFS_RADOS_NAME_MAX + 1];	/* MANIFEST, DATASET */
	uint64_t version;			/* MANIFEST */
	int64_t part;				/* MANIFEST: -1 for the head (or only) object */
};

struct sfs_rados_opts {
	const char *conf;	/* ceph.conf; NULL/"": $CEPH_CONF, then /etc/ceph/ceph.conf */
	const char *client_id;	/* cephx id without "client."; NULL/"": admin */
	const char *keyring;	/* NULL/"": whatever ceph.conf says */
	uint64_t timeout_ms;	/* every mon/osd op and the mount; 0: 30 s */
};

/*
 * The Ceph connection options every rados tool takes (publish, gc), for
 * its getopt_long table: --ceph-conf FILE, --id CLIENT, --keyring FILE,
 * --timeout DURATION.  The tool includes <getopt.h>.
 */
enum {
	SFS_RADOS_OPT_CONF = 0x1000, SFS_RADOS_OPT_ID, SFS_RADOS_OPT_KEYRING,
	SFS_RADOS_OPT_TIMEOUT,
};
#define SFS_RADOS_LONGOPTS \
	{ "ceph-conf", required_argument, NULL, SFS_RADOS_OPT_CONF }, \
	{ "id", required_argument, NULL, SFS_RADOS_OPT_ID }, \
	{ "keyring", required_argument, NULL, SFS_RADOS_OPT_KEYRING }, \
	{ "timeout", required_argument, NULL, SFS_RADOS_OPT_TIMEOUT }
/*
 * Take getopt's option @opt with @arg into @o.  Returns 1 if it was one of
 * SFS_RADOS_LONGOPTS, 0 if not, -EINVAL for a bad value (message in @err).
 */
int sfs_rados_cli_opt(int opt, const char *arg, struct sfs_rados_opts *o,
		      char *err, size_t errlen);

/* Fill @o from the [stagefs] settings (pointers into @cfg). */
void sfs_rados_opts_from_config(struct sfs_rados_opts *o,
				const struct sfs_config *cfg);

/*
 * A rados:// URI, the one grammar of the mount, publish and gc:
 *
 *   rados://POOL[/PATH][?OPT[&OPT]...]
 *
 * PATH is NAME or NAME@VERSION (a published dataset; @name and @version
 * set, the name checked by sfs_rados_name_ok()), or with the option plain a
 * namespace (then ns is PATH).  OPT is plain, ns=NAMESPACE, conf=FILE,
 * id=CLIENT, keyring=FILE, timeout=DURATION or chunk_size=SIZE (a power of
 * two, 4K to 64M).  What a caller does not take (a version for publish, a
 * path for gc) it refuses itself.  Strings point into @copy: release with
 * sfs_rados_uri_release().
 */
struct sfs_rados_uri {
	char *pool;
	char *path;		/* after "POOL/", "@VERSION" cut ("" for "POOL/"); NULL: no '/' */
	char *name;		/* published: PATH without "@VERSION"; else NULL */
	uint64_t version;	/* NAME@VERSION; 0: none given */
	bool plain;
	const char *ns, *conf, *id, *keyring;	/* NULL: not given */
	uint64_t timeout_ms, chunk_size;	/* 0: not given */
	char *copy;		/* owns the strings above */
};
/* Parse @uri into @u.  0, or -EINVAL/-ENOMEM with a message in @err. */
int sfs_rados_uri_parse(const char *uri, struct sfs_rados_uri *u, char *err, size_t errlen);
void sfs_rados_uri_release(struct sfs_rados_uri *u);
/*
 * One connection option of a URI (conf=, id=, keyring=, timeout=), @key
 * with value @v (NULL: none given), into @u; the grammar every Ceph source
 * URI shares (rados://, cephfs://).  1 taken, 0 not one of them, -EINVAL
 * for a bad timeout.  @v must outlive @u.
 */
int sfs_rados_uri_conn_opt(struct sfs_rados_uri *u, const char *key, const char *v);
/* The connection options @u gives (conf, id, keyring, timeout) over @o's. */
void sfs_rados_uri_opts(const struct sfs_rados_uri *u, struct sfs_rados_opts *o);

/*
 * Create a cluster handle, read the configuration, set the timeouts and
 * connect.  On success *@out is connected; release it with rados_shutdown().
 * On failure returns -errno and a message naming what failed, e.g.
 * "cannot connect to the cluster at [v2:...] (/x/ceph.conf) as client.admin:
 *  Permission denied (bad key?)".
 */
int sfs_rados_connect(const struct sfs_rados_opts *o, rados_t *out,
		      char *err, size_t errlen);

/*
 * Open an I/O context on @pool, namespace @nspace (NULL/"" = default).
 * Release with rados_ioctx_destroy().  -ENOENT: "pool 'x' does not exist".
 */
int sfs_rados_ioctx(rados_t cl, const char *pool, const char *nspace,
		    rados_ioctx_t *out, char *err, size_t errlen);

/* True if @name is a valid dataset name. */
bool sfs_rados_name_ok(const char *name);

/*
 * Wait for aio completion @c (and its callback), release it, and return its
 * result: the op's byte count or -errno.
 */
int sfs_rados_aio_reap(rados_completion_t c);

/*
 * Add to @op a write_full of @len bytes at @buf, hinted as the objects
 * stagefs writes are: written once, then only ever read whole and in order
 * (the hint `rados bench write` gives its objects).  BlueStore then keeps
 * one checksum per blob rather than per 4 KiB, which makes the whole-object
 * reads of a cold cache cheaper for the OSD (docs/publish.md).
 */
void sfs_rados_write_immutable(rados_write_op_t op, const void *buf,
			       size_t len);

/* Object names.  @out must hold SFS_RADOS_OID_MAX bytes. */
void sfs_rados_chunk_oid(const struct sfs_id *id, char *out);
void sfs_rados_pack_oid(const struct sfs_id *id, char *out);
void sfs_rados_manifest_oid(const char *name, uint64_t version, char *out);
void sfs_rados_dataset_oid(const char *name, char *out);
/* The object name of part @part of a split manifest. */
void sfs_rados_part_oid(const char *name, uint64_t version, uint64_t part,
			char *out);

/*
 * Classify object name @oid into *@out and return its kind.  Only names
 * spelled exactly as the functions above build them count (lowercase hex,
 * no leading zeros, a valid dataset name); anything else is
 * SFS_RADOS_OTHER, so a tool that removes objects never touches it.
 */
enum sfs_rados_kind sfs_rados_oid_parse(const char *oid, struct sfs_rados_oid *out);

/*
 * Latest published version of dataset @name, from its pointer object.
 * Returns 0, -ENOENT (never published) or -errno (-EIO: bad pointer).
 */
int sfs_rados_latest(rados_ioctx_t io, const char *name, uint64_t *version);

/* Where the bytes of one published manifest lie in the pool. */
struct sfs_rados_mlayout {
	char name[SFS_RADOS_NAME_MAX + 1];
	uint64_t version;
	uint64_t size;		/* the manifest's bytes */
	uint64_t nparts;	/* 0: the head object is the manifest itself */
	uint64_t head_size;	/* the head object's size and mtime, which */
	time_t head_mtime;	/* change if the pool is made again */
};

/*
 * Find the manifest of @name@@version: one read op on its head object (stat
 * and its first bytes), whatever the manifest's size.  Returns 0, -ENOENT
 * if the version does not exist, -EIO for a bad head object, else -errno;
 * every error with a message in @err.
 */
int sfs_rados_manifest_layout(rados_ioctx_t io, const char *name,
			      uint64_t version, struct sfs_rados_mlayout *out,
			      char *err, size_t errlen);

/*
 * Read @len bytes at @off of the manifest @l into @buf: ranged reads of the
 * objects the range spans, several in flight.  Bounded by the connection's
 * timeouts (-ETIMEDOUT).  Not validated.  Returns 0, -EIO for an object
 * missing or shorter than the head says, else -errno, with @err.
 */
int sfs_rados_manifest_pread(rados_ioctx_t io, const struct sfs_rados_mlayout *l,
			     void *buf, size_t len, uint64_t off,
			     char *err, size_t errlen);

/*
 * Read the serialized manifest of @name@@version (one object or a head and
 * its parts).  On success *@buf is malloc'ed (caller frees) and holds *@len
 * bytes; it is not validated (see manifest_open()).  Errors as
 * sfs_rados_manifest_layout() and sfs_rados_manifest_pread().
 */
int sfs_rados_manifest_read(rados_ioctx_t io, const char *name,
			    uint64_t version, void **buf, size_t *len,
			    char *err, size_t errlen);

/*
 * Copy the whole manifest @l into @fd (a regular file, written from offset
 * 0 with pwrite), one object at a time, so that no more than one 32 MiB
 * part is ever in memory.  Not validated.  Errors as
 * sfs_rados_manifest_pread(), or the write's.
 */
int sfs_rados_manifest_fetch(rados_ioctx_t io, const struct sfs_rados_mlayout *l,
			     int fd, char *err, size_t errlen);

/*
 * Store a serialized manifest, the first @len bytes of file @fd (read with
 * pread, one 32 MiB part at a time: for a builder that streamed it there),
 * as @name@@version, claiming the version with an exclusive create:
 * returns -EEXIST if someone else has it.  Larger than
 * SFS_RADOS_PART_SIZE: the head is claimed first, then the parts written.
 */
int sfs_rados_manifest_write_fd(rados_ioctx_t io, const char *name,
				 uint64_t version, int fd, uint64_t len,
				 char *err, size_t errlen);

/*
 * Point @name at @version unless it already points at a newer one (then
 * *@newer, if given, is set and 0 returned).  Returns 0 or -errno.
 */
int sfs_rados_set_latest(rados_ioctx_t io, const char *name, uint64_t version,
			 bool *newer);

#endif
