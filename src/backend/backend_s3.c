/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_s3: the objects under a prefix of an S3 bucket as a dataset
 * ("s3://BUCKET[/PREFIX]"), in place: Ceph's RADOS Gateway, MinIO, AWS.
 *
 * Where the bucket is and whose keys sign for it: s3cred.c (the AWS CLI's
 * lookup order; key files root-only).
 *
 * Tree.  The listing at mount is the snapshot: keys are split at '/'
 * into directories, as `?plain` datasets and Mountpoint for S3 do; a key
 * ending in '/' (a "directory marker") is a directory.  A name that cannot
 * be a path (empty, '.', '..', longer than 255 bytes) is skipped, with
 * everything under it, as is an object whose name is also a directory's
 * ("a" beside "a/b"): both counted in the log.  Files are read-only (0444,
 * directories 0555), owned by root, with the object's LastModified as
 * their times.
 *
 * The listing is a walk: one directory a request series (ListObjectsV2
 * with delimiter=/, s3list.c), dir_scan_threads directories at once, by
 * dirscan over the source calls below, so a bucket of millions of keys is
 * listed many pages at a time instead of one page after another.  With
 * dir_scan_background (the default) the mount answers once the top
 * directory is listed, from the walk's live index (scanserve.c), with the
 * inode numbers its manifest will give; a file looked up before the walk
 * is through gets its attributes from a listing of its own key.  Nothing
 * is kept of a walk: S3 has no cheap "has this prefix changed?", so each
 * mount lists again, answering meanwhile, and an unmount stops it.
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
#include "dirscan.h"
#include "idmap.h"
#include "log.h"
#include "manifest/manifest.h"
#include "s3.h"
#include "scanserve.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
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

struct listed_attr {
	struct sfs_id content;
	uint64_t size;
	struct timespec mtime;
};

struct backend_s3 {
	struct backend be;
	struct s3_target t;
	struct s3_client *client;
	bool versioned;
	struct scanserve ss;	/* the walk while it runs, then its manifest */
	struct sfs_attr dir_attr;	/* every directory's: 0555, root's, the mount's time */
	uint64_t t0;		/* the mount's start, ms */
	unsigned walk_threads;
	struct s3_wide_budget wide;	/* threads a large directory's listing may add */
	/* the files listed so far: content id -> ETag and version; any thread */
	pthread_mutex_t lock;
	struct idmap etag_of;	/* content id -> index in etags */
	struct objver *etags;
	size_t netags, etags_cap;
	atomic_uint_fast64_t bad_names, shadowed;
	char walk_err[512];	/* the first listing that failed; under lock */
	/*
	 * While the walk runs, each file's attributes as listed (the XXH3 of
	 * its path -> index in listed_attr), so that a lookup before the walk
	 * is through costs no request; dropped when the walk ends (about 90
	 * bytes a file until then).  Under lock.
	 */
	struct idmap listed;
	struct listed_attr *listed_attr;
	size_t nlisted, listed_cap;
	bool listed_gone;
};

static struct backend_s3 *to_s3(struct backend *be)
{
	return (struct backend_s3 *)be;
}

/* ---- the bucket, walked one directory at a time ---- */

/* A name a key's part may be: not empty, '.', '..' or over NAME_MAX. */
static bool name_ok(const char *name, size_t n)
{
	return n && n <= NAME_MAX && !(n == 1 && name[0] == '.') &&
	       !(n == 2 && name[0] == '.' && name[1] == '.');
}

static void content_id(const struct backend_s3 *s, const char *rel, const char *etag,
		       const char *version, uint64_t size, struct sfs_id *out)
{
	char buf[8192];
	int n = snprintf(buf, sizeof(buf), "s3%c%s%c%s%c%s%s%c%s%c%s%c%" PRIu64, 0, s->t.endpoint,
			 0, s->t.bucket, 0, s->t.prefix, rel, 0, etag, 0,
			 version ? version : "", 0, size);

	sfs_id_of(buf, (size_t)MIN(n, (int)sizeof(buf)), out);
}

/*
 * A file listed: its content id, which reads will name, to the ETag and
 * version they check.  0 or -ENOMEM.
 */
static int etag_add(struct backend_s3 *s, const struct sfs_id *content, const char *etag,
		    const char *version)
{
	uint64_t v;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	if (idmap_get(&s->etag_of, content, &v))
		goto out;
	if (s->netags == s->etags_cap) {
		size_t cap = s->etags_cap ? s->etags_cap * 2 : 1024;
		struct objver *e = realloc(s->etags, cap * sizeof(*e));

		if (!e) {
			ret = -ENOMEM;
			goto out;
		}
		s->etags = e;
		s->etags_cap = cap;
	}
	s->etags[s->netags].etag = strdup(etag);
	s->etags[s->netags].version = version ? strdup(version) : NULL;
	if (!s->etags[s->netags].etag || (version && !s->etags[s->netags].version) ||
	    idmap_put(&s->etag_of, content, s->netags) < 0) {
		free(s->etags[s->netags].etag);
		free(s->etags[s->netags].version);
		ret = -ENOMEM;
		goto out;
	}
	s->netags++;
out:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

/* A file listed with attributes @a, its path's id @pid: kept for src_getattr(). */
static int listed_add(struct backend_s3 *s, const struct sfs_id *pid, const struct sfs_attr *a)
{
	uint64_t v;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	if (s->listed_gone || idmap_get(&s->listed, pid, &v))
		goto out;
	if (s->nlisted == s->listed_cap) {
		size_t cap = s->listed_cap ? s->listed_cap * 2 : 1024;
		struct listed_attr *la = realloc(s->listed_attr, cap * sizeof(*la));

		if (!la) {
			ret = -ENOMEM;
			goto out;
		}
		s->listed_attr = la;
		s->listed_cap = cap;
	}
	if (idmap_put(&s->listed, pid, s->nlisted) < 0) {
		ret = -ENOMEM;
		goto out;
	}
	s->listed_attr[s->nlisted++] = (struct listed_attr){
		.content = a->content, .size = a->size, .mtime = a->mtime,
	};
out:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

/* The walk is over: what it listed is in the manifest now. */
static void listed_drop(struct backend_s3 *s)
{
	pthread_mutex_lock(&s->lock);
	s->listed_gone = true;
	idmap_release(&s->listed);
	free(s->listed_attr);
	s->listed_attr = NULL;
	s->nlisted = s->listed_cap = 0;
	pthread_mutex_unlock(&s->lock);
}

/* One entry of a directory listed: a file, or a subdirectory (etag NULL). */
struct s3_ent {
	char *name;
	char *etag, *version;
	uint64_t size;
	struct timespec mtime;
};

struct s3_dir {
	struct backend_s3 *s;
	char *prefix;		/* the whole key prefix, ending in '/' (or the bucket's "") */
	size_t plen;
	struct s3_ent *v;
	size_t n, cap, next;	/* next: the entry readdir gives next */
};

static int ent_add(struct s3_dir *d, const char *name, size_t n, const struct s3_object *o)
{
	struct s3_ent *e;

	if (!name_ok(name, n)) {
		atomic_fetch_add(&d->s->bad_names, 1);
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		struct s3_ent *v = realloc(d->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		d->v = v;
		d->cap = cap;
	}
	e = &d->v[d->n];
	memset(e, 0, sizeof(*e));
	e->name = strndup(name, n);
	if (o) {
		e->etag = strdup(o->etag);
		e->version = o->version ? strdup(o->version) : NULL;
		e->size = o->size;
		e->mtime = o->mtime;
	}
	if (!e->name || (o && (!e->etag || (o->version && !e->version)))) {
		free(e->name);
		free(e->etag);
		free(e->version);
		return -ENOMEM;
	}
	d->n++;
	return 0;
}

static int dir_on_prefix(void *arg, const char *pfx)
{
	struct s3_dir *d = arg;
	const char *name = pfx + d->plen, *slash;

	if (strncmp(pfx, d->prefix, d->plen))
		return 0;	/* not asked for: a server that ignores the prefix */
	slash = strchr(name, '/');
	return ent_add(d, name, slash ? (size_t)(slash - name) : strlen(name), NULL);
}

static int dir_on_object(void *arg, const struct s3_object *o)
{
	struct s3_dir *d = arg;
	const char *name = o->key + d->plen, *slash;

	if (strncmp(o->key, d->prefix, d->plen))
		return 0;	/* not asked for: a server that ignores the prefix */
	if (!*name)
		return 0;	/* this directory's own marker ("dir/") */
	slash = strchr(name, '/');
	if (slash)	/* a server that ignores the delimiter: its subdirectory */
		return dir_on_prefix(arg, o->key);
	return ent_add(d, name, strlen(name), o);
}

/* By name; a directory first where a file has its name. */
static int ent_cmp(const void *a, const void *b)
{
	const struct s3_ent *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->etag != NULL) - (y->etag != NULL);
}

static void ent_free(struct s3_ent *e)
{
	free(e->name);
	free(e->etag);
	free(e->version);
}

static void walk_failed(struct backend_s3 *s, const char *msg)
{
	pthread_mutex_lock(&s->lock);
	if (!s->walk_err[0])
		snprintf(s->walk_err, sizeof(s->walk_err), "%s", msg);
	pthread_mutex_unlock(&s->lock);
}

/* The subdirectories a listing of only the latest versions shows (struct s3_dir's prefix). */
struct live_dirs {
	struct s3_dir *d;
	char **names;
	size_t n, cap;
};

static int live_on_prefix(void *arg, const char *pfx)
{
	struct live_dirs *l = arg;
	const char *name = pfx + l->d->plen, *slash;
	char **v;

	if (strncmp(pfx, l->d->prefix, l->d->plen) || !*name)
		return 0;
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		v = realloc(l->names, l->cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->names = v;
	}
	slash = strchr(name, '/');
	l->names[l->n] = strndup(name, slash ? (size_t)(slash - name) : strlen(name));
	return l->names[l->n++] ? 0 : -ENOMEM;
}

static int live_on_object(void *arg, const struct s3_object *o)
{
	struct live_dirs *l = arg;

	/* a server that ignores the delimiter: a deeper key names its subdirectory */
	if (!strncmp(o->key, l->d->prefix, l->d->plen) && strchr(o->key + l->d->plen, '/'))
		return live_on_prefix(arg, o->key);
	return 0;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * On a versioned bucket: keep only the subdirectories of @d that hold a
 * key whose latest version is not a delete marker.  ListObjectVersions
 * gives a prefix all of whose keys are deleted among its common prefixes;
 * ListObjectsV2 of the latest versions does not, so it is asked too (a
 * second listing of the directory, only where the first found any).
 */
static int drop_deleted_dirs(struct backend_s3 *s, struct s3_dir *d, char *err, size_t errlen)
{
	struct live_dirs l = { .d = d };
	size_t w = 0;
	bool any = false;
	int ret;

	for (size_t i = 0; i < d->n && !any; i++)
		any = !d->v[i].etag;
	if (!any)
		return 0;
	ret = s3_list_wide(&s->t, false, d->prefix, &s->wide, live_on_object, live_on_prefix, &l,
			   err, errlen);
	if (!ret) {
		if (l.n)
			qsort(l.names, l.n, sizeof(*l.names), name_cmp);
		for (size_t i = 0; i < d->n; i++) {
			const char *name = d->v[i].name;

			if (!d->v[i].etag &&
			    !(l.n && bsearch(&name, l.names, l.n, sizeof(*l.names), name_cmp))) {
				ent_free(&d->v[i]);
				continue;
			}
			d->v[w++] = d->v[i];
		}
		d->n = w;
	}
	for (size_t i = 0; i < l.n; i++)
		free(l.names[i]);
	free(l.names);
	return ret;
}

/*
 * Directory @rel: every page of its listing (delimiter=/), at once, so
 * that a file named as a subdirectory is (its object "a" and keys "a/...",
 * rarely neighbours in key order) can be left out: the directory wins, as
 * with Mountpoint for S3.
 */
static int src_opendir(void *arg, const char *rel, void **out)
{
	struct backend_s3 *s = arg;
	struct s3_dir *d = calloc(1, sizeof(*d));
	char err[512];
	size_t w = 0;
	int ret;

	if (!d)
		return -ENOMEM;
	d->s = s;
	if (asprintf(&d->prefix, "%s%s%s", s->t.prefix, rel, rel[0] ? "/" : "") < 0) {
		free(d);
		return -ENOMEM;
	}
	d->plen = strlen(d->prefix);
	ret = s3_list_wide(&s->t, s->versioned, d->prefix, &s->wide, dir_on_object, dir_on_prefix,
			   d, err, sizeof(err));
	if (!ret && s->versioned)
		ret = drop_deleted_dirs(s, d, err, sizeof(err));
	if (ret) {
		log_err("%s: listing /%s: %s", s->be.uri, rel, err);
		walk_failed(s, err);
		goto fail;
	}
	if (d->n)
		qsort(d->v, d->n, sizeof(*d->v), ent_cmp);
	for (size_t i = 0; i < d->n; i++) {
		if (w && !strcmp(d->v[w - 1].name, d->v[i].name)) {
			/* a second prefix of one name (ignored delimiter), or a file shadowed */
			if (d->v[i].etag)
				atomic_fetch_add(&s->shadowed, 1);
			ent_free(&d->v[i]);
			continue;
		}
		d->v[w++] = d->v[i];
	}
	d->n = w;
	*out = d;
	return 0;
fail:
	for (size_t i = 0; i < d->n; i++)
		ent_free(&d->v[i]);
	free(d->v);
	free(d->prefix);
	free(d);
	return ret;
}

static void file_attr(struct backend_s3 *s, const char *rel, const struct s3_ent *e,
		      struct sfs_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->mode = S_IFREG | 0444;
	a->nlink = 1;
	a->size = e->size;
	a->atime = a->mtime = a->ctime = e->mtime;
	content_id(s, rel, e->etag, e->version, e->size, &a->content);
}

static int src_readdir(void *arg, void *dir, const char *rel, struct dirscan_entry *e,
		       char *target, size_t tlen)
{
	struct backend_s3 *s = arg;
	struct s3_dir *d = dir;
	struct s3_ent *en;
	char path[PATH_MAX];
	int r;

	(void)target;
	(void)tlen;
	if (d->next == d->n)
		return 0;
	en = &d->v[d->next++];
	memset(e, 0, sizeof(*e));
	e->name = en->name;
	if (!en->etag) {
		e->a = s->dir_attr;
		return 1;
	}
	r = snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "", en->name);
	if (r < 0 || (size_t)r >= sizeof(path))
		return -ENAMETOOLONG;
	file_attr(s, path, en, &e->a);
	r = etag_add(s, &e->a.content, en->etag, en->version);
	if (!r) {
		struct sfs_id pid;

		sfs_id_of(path, strlen(path), &pid);
		r = listed_add(s, &pid, &e->a);
	}
	return r ? r : 1;
}

static void src_closedir(void *arg, void *dir)
{
	struct s3_dir *d = dir;

	(void)arg;
	for (size_t i = 0; i < d->n; i++)
		ent_free(&d->v[i]);
	free(d->v);
	free(d->prefix);
	free(d);
}

struct one {
	const char *key;
	struct s3_ent e;
	bool found;
	int ret;
};

static int one_object(void *arg, const struct s3_object *o)
{
	struct one *x = arg;

	if (strcmp(o->key, x->key))
		return 0;
	x->e.etag = strdup(o->etag);
	x->e.version = o->version ? strdup(o->version) : NULL;
	x->e.size = o->size;
	x->e.mtime = o->mtime;
	x->found = x->e.etag && (!o->version || x->e.version);
	return x->found ? 0 : -ENOMEM;
}

/*
 * A directory is a prefix, with nothing of its own to ask for; a file's
 * attributes are what the walk listed, or, where its directory was read
 * but this file not yet returned, the first key listed under its own key
 * (it sorts first).  Once the walk is over its attributes are dropped
 * (s3_walked()) just before its manifest replaces the live index: a
 * lookup that reached the index in between is sent to the manifest
 * (-EAGAIN: scanserve waits for it), never to S3.
 */
static int src_getattr(void *arg, const char *rel, uint32_t type, struct sfs_attr *a)
{
	struct backend_s3 *s = arg;
	struct one x = { 0 };
	char key[PATH_MAX + 1024], err[512];
	int r;

	struct sfs_id pid;
	uint64_t v;
	bool hit, gone;

	if (type == S_IFDIR) {
		*a = s->dir_attr;
		return 0;
	}
	sfs_id_of(rel, strlen(rel), &pid);
	pthread_mutex_lock(&s->lock);
	gone = s->listed_gone;
	hit = !gone && idmap_get(&s->listed, &pid, &v);
	if (hit) {
		const struct listed_attr *la = &s->listed_attr[v];

		memset(a, 0, sizeof(*a));
		a->mode = S_IFREG | 0444;
		a->nlink = 1;
		a->size = la->size;
		a->atime = a->mtime = a->ctime = la->mtime;
		a->content = la->content;
	}
	pthread_mutex_unlock(&s->lock);
	if (hit)
		return 0;
	if (gone)
		return -EAGAIN;
	r = snprintf(key, sizeof(key), "%s%s", s->t.prefix, rel);
	if (r < 0 || (size_t)r >= sizeof(key))
		return -ENAMETOOLONG;
	x.key = key;
	r = s3_list_dir(&s->t, s->versioned, key, 1, one_object, NULL, &x, err, sizeof(err));
	if (r) {
		log_err("%s: asking for /%s: %s", s->be.uri, rel, err);
		r = -EIO;
	} else if (!x.found) {
		r = -ENOENT;	/* deleted since the walk listed it */
	} else {
		file_attr(s, rel, &x.e, a);
		r = etag_add(s, &a->content, x.e.etag, x.e.version);
	}
	free(x.e.etag);
	free(x.e.version);
	return r;
}

static int src_readlink(void *arg, const char *rel, char *buf, size_t size)
{
	(void)arg;
	(void)rel;
	(void)buf;
	(void)size;
	return -EINVAL;	/* S3 has no symlinks */
}

struct any {
	const char *prefix;
};

/* Any key under the prefix but its own marker: 1, which stops the listing. */
static int any_object(void *arg, const struct s3_object *o)
{
	const struct any *a = arg;

	return strcmp(o->key, a->prefix) ? 1 : 0;
}

/* The walk is over: its manifest, served from memory (nothing to check it against later). */
static int s3_walked(void *arg, struct dirscan_result *r, struct manifest **m, char *err,
		     size_t errlen)
{
	struct backend_s3 *s = arg;
	uint64_t bad = atomic_load(&s->bad_names), shadowed = atomic_load(&s->shadowed);
	int ret;

	free(r->stamps);
	ret = manifest_open(r->manifest, r->manifest_len, m, err, errlen);
	if (ret) {
		free(r->manifest);
		return ret;	/* the live index goes on serving, with what it listed */
	}
	listed_drop(s);	/* the manifest replaces the live index next */
	log_notice("%s: %" PRIu64 " objects in %" PRIu64 " directories, %" PRIu64 " bytes, listed in %" PRIu64 " ms by %u threads (%s, region %s, keys from %s%s)",
		   s->be.uri, r->entries - r->dirs, r->dirs, r->bytes, now_ms() - s->t0,
		   s->walk_threads, s->t.endpoint, s->t.region, s->t.cred_source,
		   s->versioned ? "; a versioned bucket: the versions listed are read" : "");
	if (bad || shadowed)
		log_warn("%s: skipped %" PRIu64 " names that are no path (an empty part, '.', '..', a part over 255 bytes) and %" PRIu64 " objects named as a directory is",
			 s->be.uri, bad, shadowed);
	return 0;
}

/* Tests: STAGEFS_TEST_S3_PAGE_KEYS, keys a listing page asks for (0: 1,000). */
static unsigned test_page_keys(void)
{
	const char *v = getenv("STAGEFS_TEST_S3_PAGE_KEYS");

	return v ? (unsigned)strtoul(v, NULL, 10) : 0;
}

/*
 * The tree: the bucket walked one directory at a time, by walk_threads
 * listings at once (dirscan over s3_list_dir()); the mount answers once
 * the top directory is listed, from the walk's live index, and from its
 * manifest when it ends (dir_scan_background; else the mount waits).
 */
static int s3_index(struct backend_s3 *s, const struct sfs_config *cfg, char *err,
		    size_t errlen)
{
	const struct dirscan_source src = {
		.root = s->be.uri,
		.arg = s,
		.opendir = src_opendir,
		.readdir = src_readdir,
		.closedir = src_closedir,
		.getattr = src_getattr,
		.readlink = src_readlink,
	};
	struct dirscan *scan;
	struct timespec now;
	int ret;

	ret = s3_versioning(&s->t, &s->versioned, err, errlen);
	if (ret)
		return ret;
	if (s->t.prefix[0]) {	/* anything under it?  (also: the bucket, the keys) */
		struct any a = { .prefix = s->t.prefix };

		ret = s3_list_dir(&s->t, s->versioned, s->t.prefix, 0, any_object, NULL, &a,
				  err, errlen);
		if (ret < 0)
			return ret;
		if (!ret) {
			snprintf(err, errlen, "%s: nothing under the prefix '%s' (no such directory?)",
				 s->be.uri, s->t.prefix);
			return -ENOENT;
		}
	}
	clock_gettime(CLOCK_REALTIME, &now);
	s->dir_attr.mode = S_IFDIR | 0555;
	s->dir_attr.nlink = 1;	/* while the walk runs: "not counted" (the index counts them) */
	s->dir_attr.atime = s->dir_attr.mtime = s->dir_attr.ctime = now;
	s->walk_threads = scanserve_threads(cfg);
	/* a large directory is listed by as many more (s3wide.c) */
	s->wide.max = s->walk_threads;
	s->wide.page_keys = test_page_keys();
	ret = dirscan_start_source(&src, &s->dir_attr, s->walk_threads, s->be.chunk_size,
				   scanserve_test_delay_us(), &scan, err, errlen);
	if (ret) {
		pthread_mutex_lock(&s->lock);
		if (s->walk_err[0])	/* S3's own reason beats the scan's */
			snprintf(err, errlen, "%s", s->walk_err);
		pthread_mutex_unlock(&s->lock);
		return ret;
	}
	ret = scanserve_run(&s->ss, scan, cfg->dir_scan_background, err, errlen);
	if (!ret && s->ss.started)
		log_info("%s: listing in the background (%u threads); answering meanwhile",
			 s->be.uri, s->walk_threads);
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
	struct objver ov;
	uint64_t e;
	int r;

	pthread_mutex_lock(&s->lock);	/* the walk may be growing etags */
	r = idmap_get(&s->etag_of, &file->content, &e);
	if (r)
		ov = s->etags[e];	/* the strings stay until destroy */
	pthread_mutex_unlock(&s->lock);
	if (!r)
		return -EIO;
	h = malloc(sizeof(*h) + plen + PATH_MAX);
	if (!h)
		return -ENOMEM;
	memset(h, 0, sizeof(*h));
	memcpy(h->key, s->t.prefix, plen);
	r = scanserve_path(&s->ss, file->ino, h->key + plen, PATH_MAX);
	if (r < 0) {
		free(h);
		return r;
	}
	h->done = done;
	h->arg = arg;
	h->g.key = h->key;
	h->g.etag = ov.etag;
	h->g.version = ov.version;
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
	s->listed = (struct idmap)IDMAP_INIT;
	s->t0 = now_ms();
	pthread_mutex_init(&s->lock, NULL);
	atomic_init(&s->bad_names, 0);
	atomic_init(&s->shadowed, 0);
	err[0] = '\0';
	s->be.uri = strdup(uri);
	if (!s->be.uri) {
		pthread_mutex_destroy(&s->lock);
		free(s);
		return -ENOMEM;
	}
	scanserve_init(&s->ss, &s->be, s->be.uri, s3_walked, s);
	s->ss.cancel_at_destroy = true;	/* nothing is kept of a walk */
	ret = s3_target_resolve(&s->t, uri, cfg, err, errlen);
	if (!ret)
		ret = s3_client_start(&s->t, &s->client, err, errlen);
	if (!ret)
		ret = s3_index(s, cfg, err, errlen);
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

	atomic_store(&s->wide.stop, true);	/* a large directory's listing too */
	scanserve_destroy(&s->ss);	/* a walk still running: stopped */
	s3_client_stop(s->client);	/* every read ends first */
	if (be->m)
		manifest_close(be->m);
	for (size_t i = 0; i < s->netags; i++) {
		free(s->etags[i].etag);
		free(s->etags[i].version);
	}
	free(s->etags);
	idmap_release(&s->etag_of);
	idmap_release(&s->listed);
	free(s->listed_attr);
	pthread_mutex_destroy(&s->lock);
	s3_target_release(&s->t);
	free(be->uri);
	free(s);
}

/* ---- the tree: the walk's live index, then its manifest (scanserve.h) ---- */

static int s3b_getattr(struct backend *be, uint64_t ino, struct sfs_attr *out)
{
	return scanserve_getattr(&to_s3(be)->ss, ino, out);
}

static int s3b_lookup(struct backend *be, uint64_t parent, const char *name,
		      struct sfs_attr *out)
{
	return scanserve_lookup(&to_s3(be)->ss, parent, name, out);
}

static int s3b_readdir(struct backend *be, uint64_t ino, struct sfs_dirlist *out)
{
	return scanserve_readdir(&to_s3(be)->ss, ino, out);
}

static int s3b_readlink(struct backend *be, uint64_t ino, char *buf, size_t size)
{
	return scanserve_readlink(&to_s3(be)->ss, ino, buf, size);
}

static int s3b_statfs(struct backend *be, uint64_t *bytes, uint64_t *files)
{
	return scanserve_statfs(&to_s3(be)->ss, bytes, files);
}

const struct backend_ops backend_s3_ops = {
	.scheme = "s3",
	.create = s3b_create,
	.destroy = s3b_destroy,
	.getattr = s3b_getattr,
	.lookup = s3b_lookup,
	.readdir = s3b_readdir,
	.readlink = s3b_readlink,
	.read_chunk = backend_read_chunk_aio,
	.aio_start = s3b_aio_start,
	.aio_finish = s3b_aio_finish,
	.statfs = s3b_statfs,
};

#endif /* CONFIG_HAVE_S3 */
