/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_s3: the objects under a prefix of an S3 bucket as a dataset
 * ("s3://BUCKET[/PREFIX]"), in place: Ceph's RADOS Gateway, MinIO, AWS.
 *
 * Where the bucket is and whose keys sign for it: s3cred.c (the AWS CLI's
 * lookup order; key files root-only).
 *
 * Tree.  The listing at mount (ListObjectsV2, s3list.c) is the snapshot:
 * keys are split at '/' into directories, as `?plain` datasets and
 * Mountpoint for S3 do; a key ending in '/' (a "directory marker") is a
 * directory.  A key that cannot be a path (an empty part, '.', '..', a
 * part longer than 255 bytes) is skipped, as is an object whose name is
 * also a directory ("a" beside "a/b"): both counted in the log.  Files are
 * read-only (0444, directories 0555), owned by root, with the object's
 * LastModified as their times.
 *
 * Identity.  An object's ETag, as listed, is its version: a file's
 * content id (the cache's name for its bytes) is the XXH3-128 of the
 * endpoint, bucket, key, ETag, version id and size, and every ranged GET
 * carries If-Match with that ETag, so an object replaced under the mount
 * gives EIO (logged), never bytes of two versions; a remount serves the
 * new one.  On a versioned bucket the listing is of versions and each
 * GET names the version listed (versionId=): the mount is immutable, an
 * object replaced under it still reads as it was listed.
 *
 * Reads.  Each chunk is one ranged GET, many in flight on the client's
 * thread (s3http.c), retried within the deadline (rados_timeout, or the
 * URI's timeout=): a dead endpoint gives EIO within it.
 */
#include "backend.h"

#ifdef CONFIG_HAVE_S3

#include "config.h"
#include "idmap.h"
#include "log.h"
#include "manifest/manifest.h"
#include "s3.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* What a file's reads name: the ETag listed, and the version (or NULL). */
struct objver {
	char *etag, *version;
};

struct backend_aio {
	struct s3_get g;
	void (*done)(void *arg);
	void *arg;
	char key[];
};

struct backend_s3 {
	struct backend be;
	struct s3_target t;
	struct s3_client *client;
	struct idmap etag_of;	/* content id -> index in etags */
	struct objver *etags;
	size_t netags;
	bool versioned;
};

static struct backend_s3 *to_s3(struct backend *be)
{
	return (struct backend_s3 *)be;
}

/* ---- the listing, as a tree ---- */

struct obj {
	char *rel;		/* the key without the prefix */
	uint64_t size;
	struct timespec mtime;
	char *etag;
	char *version;		/* or NULL */
};

struct listing {
	struct backend_s3 *s;
	struct obj *objs;
	size_t nobjs, cap;
	struct idmap dirset;	/* XXH3 of a directory's path */
	char **dirs;
	size_t ndirs, dcap;
	uint64_t bad_names, bytes;
};

/* Record directory @p (@n bytes) and its parents: 0 or -ENOMEM. */
static int dir_add(struct listing *l, const char *p, size_t n)
{
	while (n) {
		struct sfs_id id;
		uint64_t v;
		const char *slash;

		sfs_id_of(p, n, &id);
		if (idmap_get(&l->dirset, &id, &v))
			return 0;	/* so are its parents */
		if (l->ndirs == l->dcap) {
			size_t cap = l->dcap ? l->dcap * 2 : 64;
			char **d = realloc(l->dirs, cap * sizeof(*d));

			if (!d)
				return -ENOMEM;
			l->dirs = d;
			l->dcap = cap;
		}
		if (!(l->dirs[l->ndirs] = strndup(p, n)) || idmap_put(&l->dirset, &id, 1) < 0)
			return -ENOMEM;
		l->ndirs++;
		slash = memrchr(p, '/', n);
		n = slash ? (size_t)(slash - p) : 0;
	}
	return 0;
}

/* A key's path parts: none empty, '.', '..' or over NAME_MAX. */
static bool rel_ok(const char *rel, size_t n)
{
	const char *p = rel, *end = rel + n;

	if (!n)
		return false;
	while (p <= end) {
		const char *slash = memchr(p, '/', (size_t)(end - p));
		size_t l = slash ? (size_t)(slash - p) : (size_t)(end - p);

		if (l == 0 || l > NAME_MAX || (l == 1 && p[0] == '.') ||
		    (l == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!slash)
			break;
		p = slash + 1;
	}
	return true;
}

static int on_object(void *arg, const struct s3_object *o)
{
	struct listing *l = arg;
	size_t plen = strlen(l->s->t.prefix), n;
	const char *rel = o->key + plen, *slash;
	struct obj *ob;

	if (strncmp(o->key, l->s->t.prefix, plen))
		return 0;	/* not asked for: a server that ignores the prefix */
	n = strlen(rel);
	if (!n)
		return 0;	/* the prefix's own marker */
	if (rel[n - 1] == '/') {
		if (!rel_ok(rel, n - 1)) {
			l->bad_names++;
			return 0;
		}
		return dir_add(l, rel, n - 1);
	}
	if (!rel_ok(rel, n)) {
		l->bad_names++;
		return 0;
	}
	slash = memrchr(rel, '/', n);
	if (slash && dir_add(l, rel, (size_t)(slash - rel)))
		return -ENOMEM;
	if (l->nobjs == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct obj *v = realloc(l->objs, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->objs = v;
		l->cap = cap;
	}
	ob = &l->objs[l->nobjs];
	ob->rel = strdup(rel);
	ob->etag = strdup(o->etag);
	ob->version = o->version ? strdup(o->version) : NULL;
	ob->size = o->size;
	ob->mtime = o->mtime;
	if (!ob->rel || !ob->etag || (o->version && !ob->version)) {
		free(ob->rel);
		free(ob->etag);
		free(ob->version);
		return -ENOMEM;
	}
	l->nobjs++;
	l->bytes += o->size;
	return 0;
}

static void content_id(const struct backend_s3 *s, const struct obj *o, struct sfs_id *out)
{
	char buf[8192];
	int n = snprintf(buf, sizeof(buf), "s3%c%s%c%s%c%s%s%c%s%c%s%c%" PRIu64, 0, s->t.endpoint,
			 0, s->t.bucket, 0, s->t.prefix, o->rel, 0, o->etag, 0,
			 o->version ? o->version : "", 0, o->size);

	sfs_id_of(buf, (size_t)MIN(n, (int)sizeof(buf)), out);
}

static void listing_release(struct listing *l)
{
	for (size_t i = 0; i < l->nobjs; i++) {
		free(l->objs[i].rel);
		free(l->objs[i].etag);
		free(l->objs[i].version);
	}
	free(l->objs);
	for (size_t i = 0; i < l->ndirs; i++)
		free(l->dirs[i]);
	free(l->dirs);
	idmap_release(&l->dirset);
}

static int s3_index(struct backend_s3 *s, char *err, size_t errlen)
{
	struct listing l = { .s = s, .dirset = IDMAP_INIT };
	struct manifest_builder *b = NULL;
	struct sfs_attr a = { 0 };
	struct timespec now;
	uint64_t t0 = now_ms(), shadowed = 0;
	void *buf = NULL;
	size_t len = 0;
	int ret;

	ret = s3_versioning(&s->t, &s->versioned, err, errlen);
	if (!ret)
		ret = s3_list(&s->t, s->versioned, on_object, &l, err, errlen);
	if (ret)
		goto out;
	if (s->t.prefix[0] && !l.nobjs && !l.ndirs) {
		snprintf(err, errlen, "%s: nothing under the prefix '%s' (no such directory?)",
			 s->be.uri, s->t.prefix);
		ret = -ENOENT;
		goto out;
	}
	b = manifest_builder_create(s->be.chunk_size);
	s->etags = calloc(l.nobjs ? l.nobjs : 1, sizeof(*s->etags));
	if (!b || !s->etags) {
		ret = -ENOMEM;
		goto out;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	a.mode = S_IFDIR | 0555;
	a.atime = a.mtime = a.ctime = now;
	ret = manifest_builder_add(b, "", &a, NULL, NULL, 0);
	for (size_t i = 0; !ret && i < l.ndirs; i++)
		ret = manifest_builder_add(b, l.dirs[i], &a, NULL, NULL, 0);
	for (size_t i = 0; !ret && i < l.nobjs; i++) {
		struct obj *o = &l.objs[i];
		struct sfs_id pid;
		uint64_t v;

		sfs_id_of(o->rel, strlen(o->rel), &pid);
		if (idmap_get(&l.dirset, &pid, &v)) {
			shadowed++;
			continue;
		}
		memset(&a, 0, sizeof(a));
		a.mode = S_IFREG | 0444;
		a.nlink = 1;
		a.size = o->size;
		a.atime = a.mtime = a.ctime = o->mtime;
		content_id(s, o, &a.content);
		ret = manifest_builder_add(b, o->rel, &a, NULL, NULL, 0);
		if (!ret && !idmap_get(&s->etag_of, &a.content, &v)) {
			ret = idmap_put(&s->etag_of, &a.content, s->netags) < 0 ? -ENOMEM : 0;
			if (!ret) {
				s->etags[s->netags].etag = o->etag;
				s->etags[s->netags++].version = o->version;
				o->etag = o->version = NULL;
			}
		}
	}
	if (ret) {
		snprintf(err, errlen, "%s: cannot build the tree: %s", s->be.uri, strerror(-ret));
		goto out;
	}
	ret = manifest_builder_finish(b, 1, &buf, &len);
	if (!ret)
		ret = manifest_open(buf, len, &s->be.m, err, errlen);
	if (ret) {
		free(buf);
		if (!err[0])
			snprintf(err, errlen, "%s: cannot build the index: %s", s->be.uri, strerror(-ret));
		goto out;
	}
	manifest_set_name(s->be.m, s->be.uri);
	log_notice("%s: %zu objects, %" PRIu64 " bytes, listed in %" PRIu64 " ms (%s, region %s, keys from %s%s)",
		   s->be.uri, l.nobjs - (size_t)shadowed, l.bytes, now_ms() - t0, s->t.endpoint,
		   s->t.region, s->t.cred_source,
		   s->versioned ? "; a versioned bucket: the versions listed are read" : "");
	if (l.bad_names || shadowed)
		log_warn("%s: skipped %" PRIu64 " keys that are no path (an empty part, '.', '..', a part over 255 bytes) and %" PRIu64 " objects named as a directory is",
			 s->be.uri, l.bad_names, shadowed);
out:
	manifest_builder_destroy(b);
	listing_release(&l);
	return ret;
}

/* ---- reads ---- */

static void get_done(struct s3_get *g)
{
	struct backend_aio *h = (struct backend_aio *)g;

	h->done(h->arg);
}

static int s3b_aio_start(struct backend *be, const struct sfs_attr *file, uint32_t idx,
			 void *buf, size_t len, void (*done)(void *arg), void *arg,
			 struct backend_aio **out)
{
	struct backend_s3 *s = to_s3(be);
	size_t plen = strlen(s->t.prefix);
	struct backend_aio *h;
	uint64_t e;
	int r;

	if (!idmap_get(&s->etag_of, &file->content, &e))
		return -EIO;
	h = malloc(sizeof(*h) + plen + PATH_MAX);
	if (!h)
		return -ENOMEM;
	memset(h, 0, sizeof(*h));
	memcpy(h->key, s->t.prefix, plen);
	r = manifest_path(be->m, file->ino, h->key + plen, PATH_MAX);
	if (r < 0) {
		free(h);
		return r;
	}
	h->done = done;
	h->arg = arg;
	h->g.key = h->key;
	h->g.etag = s->etags[e].etag;
	h->g.version = s->etags[e].version;
	h->g.off = (uint64_t)idx * be->chunk_size;
	h->g.len = len;
	h->g.buf = buf;
	h->g.done = get_done;
	r = s3_client_get(s->client, &h->g);
	if (r) {
		free(h);
		return r;
	}
	*out = h;
	return 0;
}

static int s3b_aio_finish(struct backend *be, struct backend_aio *h, struct sfs_id *hash,
			  bool *hashed, bool *from_peer)
{
	int res = h->g.res;

	(void)be;
	(void)hash;
	*hashed = false;
	if (from_peer)
		*from_peer = false;
	free(h);
	return res < 0 ? -EIO : res;
}

/* ---- setup ---- */

static void s3b_destroy(struct backend *be);

static int s3b_create(const char *uri, const struct sfs_config *cfg, struct backend **out,
		      char *err, size_t errlen)
{
	struct backend_s3 *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->be.ops = &backend_s3_ops;
	s->be.chunk_size = (uint32_t)cfg->chunk_size;
	s->etag_of = (struct idmap)IDMAP_INIT;
	err[0] = '\0';
	s->be.uri = strdup(uri);
	if (!s->be.uri) {
		free(s);
		return -ENOMEM;
	}
	ret = s3_target_resolve(&s->t, uri, cfg, err, errlen);
	if (!ret)
		ret = s3_index(s, err, errlen);
	if (!ret)
		ret = s3_client_start(&s->t, &s->client, err, errlen);
	if (ret) {
		if (!err[0])
			snprintf(err, errlen, "%s: %s", uri, strerror(-ret));
		s3b_destroy(&s->be);
		return ret;
	}
	*out = &s->be;
	return 0;
}

static void s3b_destroy(struct backend *be)
{
	struct backend_s3 *s = to_s3(be);

	s3_client_stop(s->client);	/* every read ends first */
	if (be->m)
		manifest_close(be->m);
	for (size_t i = 0; i < s->netags; i++) {
		free(s->etags[i].etag);
		free(s->etags[i].version);
	}
	free(s->etags);
	idmap_release(&s->etag_of);
	s3_target_release(&s->t);
	free(be->uri);
	free(s);
}

const struct backend_ops backend_s3_ops = {
	.scheme = "s3",
	.create = s3b_create,
	.destroy = s3b_destroy,
	.getattr = backend_manifest_getattr,
	.lookup = backend_manifest_lookup,
	.readdir = backend_manifest_readdir,
	.readlink = backend_manifest_readlink,
	.read_chunk = backend_read_chunk_aio,
	.aio_start = s3b_aio_start,
	.aio_finish = s3b_aio_finish,
	.statfs = backend_manifest_statfs,
};

#endif /* CONFIG_HAVE_S3 */
