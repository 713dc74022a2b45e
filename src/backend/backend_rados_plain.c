/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_rados_plain: plain mode of rados:// (backend_rados.c): the
 * objects of a namespace, written by other tools, served as files.  The
 * namespace is listed once at create (rados_nobjects_list) and every
 * object stat'ed, RB_STAT_INFLIGHT aio stats in flight; '/' in object
 * names makes directories (a name that is also a directory prefix, or
 * that is not a valid path, is skipped with a warning).  The content id is
 * XXH3-128 of pool, namespace, name, size and mtime; a read checks the
 * object's size and mtime against the listing (backend_rados.c).
 */
#include "backend_rados_i.h"

#include "log.h"
#include "manifest/manifest.h"
#include "util.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define RB_STAT_INFLIGHT	64


struct pobj {
	char *name;
	uint64_t size;
	time_t mtime;
	int rc;
};

static void plain_content_id(const struct rados_backend *rb, const char *name,
			     uint64_t size, time_t mtime, struct sfs_id *out)
{
	XXH3_state_t st;
	XXH128_hash_t h;
	uint64_t v;

	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, rb->pool, strlen(rb->pool) + 1);
	XXH3_128bits_update(&st, rb->nspace, strlen(rb->nspace) + 1);
	XXH3_128bits_update(&st, name, strlen(name) + 1);
	v = htole64(size);
	XXH3_128bits_update(&st, &v, sizeof(v));
	v = htole64((uint64_t)mtime);
	XXH3_128bits_update(&st, &v, sizeof(v));
	h = XXH3_128bits_digest(&st);
	out->hi = h.high64;
	out->lo = h.low64;
}

static int plain_list(struct rados_backend *rb, struct pobj **out, size_t *nout,
		      char *err, size_t errlen)
{
	rados_list_ctx_t lc;
	struct pobj *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	rc = rados_nobjects_list_open(rb->io, &lc);
	if (rc < 0)
		return errf(err, errlen, rc, "cannot list pool '%s': %s",
			    rb->pool, strerror(-rc));
	for (;;) {
		const char *entry, *key, *ns;
		size_t elen, klen, nslen;

		rc = rados_nobjects_list_next2(lc, &entry, &key, &ns, &elen,
					       &klen, &nslen);
		if (rc == -ENOENT) {
			rc = 0;
			break;
		}
		if (rc < 0) {
			errf(err, errlen, rc, "cannot list pool '%s': %s",
			     rb->pool, strerror(-rc));
			break;
		}
		if (klen) {
			log_warn("rados: skipping object '%.*s' (it has a locator key)",
				 (int)elen, entry);
			continue;
		}
		if (memchr(entry, '\0', elen)) {
			log_warn("rados: skipping an object whose name contains NUL");
			continue;
		}
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 1024;
			struct pobj *nv = realloc(v, ncap * sizeof(*v));

			if (!nv) {
				rc = errf(err, errlen, -ENOMEM, "out of memory");
				break;
			}
			v = nv;
			cap = ncap;
		}
		v[n].name = strndup(entry, elen);
		if (!v[n].name) {
			rc = errf(err, errlen, -ENOMEM, "out of memory");
			break;
		}
		n++;
	}
	rados_nobjects_list_close(lc);
	if (rc) {
		while (n)
			free(v[--n].name);
		free(v);
		return rc;
	}
	*out = v;
	*nout = n;
	return 0;
}

/* Stat every object, RB_STAT_INFLIGHT at a time. */
static int plain_stat(struct rados_backend *rb, struct pobj *v, size_t n,
		      char *err, size_t errlen)
{
	rados_completion_t c[RB_STAT_INFLIGHT];
	size_t next = 0, done = 0;
	int rc = 0;

	while (done < n) {
		while (!rc && next < n && next - done < RB_STAT_INFLIGHT) {
			size_t k = next % RB_STAT_INFLIGHT;
			int r;

			rados_aio_create_completion2(NULL, NULL, &c[k]);
			r = rados_aio_stat(rb->io, v[next].name, c[k], &v[next].size,
					   &v[next].mtime);
			if (r < 0) {
				rados_aio_release(c[k]);
				rc = errf(err, errlen, r, "cannot stat '%s': %s",
					  v[next].name, strerror(-r));
				break;
			}
			next++;
		}
		if (done == next)
			break;
		v[done].rc = sfs_rados_aio_reap(c[done % RB_STAT_INFLIGHT]);
		if (!rc && v[done].rc < 0 && v[done].rc != -ENOENT)
			rc = errf(err, errlen, v[done].rc == -ETIMEDOUT ? -EIO : v[done].rc,
				  "cannot stat '%s': %s", v[done].name,
				  strerror(-v[done].rc));
		done++;
	}
	return rc;
}

/* A name usable as a path: components of 1..255 bytes, no "." or "..". */
static bool plain_name_ok(const char *name)
{
	const char *s = name;

	for (;;) {
		const char *e = strchrnul(s, '/');
		size_t n = (size_t)(e - s);

		if (n == 0 || n > 255 || (s[0] == '.' && (n == 1 || (n == 2 && s[1] == '.'))))
			return false;
		if (!*e)
			return true;
		s = e + 1;
	}
}

int rb_plain_build(struct rados_backend *rb, uint32_t chunk_size,
		       char *err, size_t errlen)
{
	struct manifest_builder *b;
	struct pobj *v = NULL;
	size_t n = 0, nfiles = 0;
	struct sfs_attr dir = {
		.mode = S_IFDIR | 0555,
	};
	uint64_t t0 = now_ms();
	void *buf;
	size_t len;
	int rc;

	dir.mtime.tv_sec = dir.ctime.tv_sec = dir.atime.tv_sec = (time_t)wall_s();
	rc = plain_list(rb, &v, &n, err, errlen);
	if (rc)
		return rc;
	rc = plain_stat(rb, v, n, err, errlen);
	if (rc)
		goto out_free;

	b = manifest_builder_create(chunk_size);
	if (!b) {
		rc = errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	rc = manifest_builder_add(b, "", &dir, NULL, NULL, 0);
	/* directories implied by '/' in names */
	for (size_t i = 0; !rc && i < n; i++) {
		char *s = v[i].name;

		if (v[i].rc)
			continue;
		if (!plain_name_ok(s)) {
			log_warn("rados: skipping object '%s': not a valid path", s);
			v[i].rc = -EINVAL;
			continue;
		}
		for (char *p = strchr(s, '/'); p; p = strchr(p + 1, '/')) {
			int r;

			*p = '\0';
			r = manifest_builder_add(b, s, &dir, NULL, NULL, 0);
			*p = '/';
			if (r == -EEXIST)
				continue;
			if (r) {
				log_warn("rados: skipping object '%s': not a valid path", s);
				v[i].rc = r;
				break;
			}
		}
	}
	for (size_t i = 0; !rc && i < n; i++) {
		struct sfs_attr a = { .mode = S_IFREG | 0444, .nlink = 1 };
		int r;

		if (v[i].rc)
			continue;
		a.size = v[i].size;
		a.atime.tv_sec = a.mtime.tv_sec = a.ctime.tv_sec = v[i].mtime;
		plain_content_id(rb, v[i].name, v[i].size, v[i].mtime, &a.content);
		r = manifest_builder_add(b, v[i].name, &a, NULL, NULL, 0);
		if (r == -EEXIST)
			log_warn("rados: skipping object '%s': a directory of that name comes from other objects",
				 v[i].name);
		else if (r == -ENOMEM)
			rc = errf(err, errlen, r, "out of memory");
		else if (r)
			log_warn("rados: skipping object '%s': not a valid path (%s)",
				 v[i].name, strerror(-r));
		else
			nfiles++;
	}
	if (!rc) {
		rc = manifest_builder_finish(b, 0, &buf, &len);
		if (rc)
			errf(err, errlen, rc, "cannot build the object tree: %s",
			     strerror(-rc));
	}
	manifest_builder_destroy(b);
	if (!rc) {
		char msg[256];

		rc = manifest_open(buf, len, &rb->be.m, msg, sizeof(msg));
		if (rc) {
			free(buf);
			errf(err, errlen, -EIO, "cannot open the object tree: %s", msg);
			rc = -EIO;
		}
	}
	if (!rc)
		log_info("rados://%s/%s?plain: %zu objects listed, %zu files, in %" PRIu64 " ms",
			 rb->pool, rb->nspace, n, nfiles, now_ms() - t0);
out_free:
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
	return rc;
}

