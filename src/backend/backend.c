/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend: scheme dispatch.  See backend.h.
 */
#include "backend.h"

#include "config.h"
#include "manifest/manifest.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct backend_ops *const backends[] = {
	&backend_dir_ops,
#ifdef CONFIG_HAVE_RADOS
	&backend_rados_ops,
#endif
#ifdef CONFIG_HAVE_CEPHFS
	&backend_cephfs_ops,
#endif
#ifdef CONFIG_HAVE_S3
	&backend_s3_ops,
#endif
};

int backend_open(const char *uri, const struct sfs_config *cfg,
		 struct backend **out, char *err, size_t errlen)
{
	char buf[4096];

	if (uri[0] == '/') {
		snprintf(buf, sizeof(buf), "dir://%s", uri);
		uri = buf;
	}
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		size_t n = strlen(backends[i]->scheme);

		if (!strncmp(uri, backends[i]->scheme, n) &&
		    !strncmp(uri + n, "://", 3))
			return backends[i]->create(uri, cfg, out, err, errlen);
	}
#ifndef CONFIG_HAVE_CEPHFS
	if (!strncmp(uri, "cephfs://", 9)) {
		snprintf(err, errlen, "%s: this stagefs was built without libcephfs (install libcephfs-dev, then ./configure && make)",
			 uri);
		return -ENOTSUP;
	}
#endif
#ifndef CONFIG_HAVE_S3
	if (!strncmp(uri, "s3://", 5)) {
		snprintf(err, errlen, "%s: this stagefs was built without libcurl and expat (install libcurl4-openssl-dev and libexpat1-dev, then ./configure && make)",
			 uri);
		return -ENOTSUP;
	}
#endif
	snprintf(err, errlen, "%s: unknown source scheme (expected dir:///PATH, rados://POOL/DATASET, cephfs://FSNAME/PATH or s3://BUCKET/PREFIX)",
		 uri);
	return -EINVAL;
}

struct sync_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
};

static void sync_done(void *arg)
{
	struct sync_wait *w = arg;

	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

int backend_read_chunk_aio(struct backend *be, const struct sfs_attr *file, uint32_t idx,
			   void *buf, size_t len)
{
	struct sync_wait w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };
	struct backend_aio *h;
	bool hashed;
	int r = be->ops->aio_start(be, file, idx, buf, len, sync_done, &w, &h);

	if (r)
		return r;
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	return be->ops->aio_finish(be, h, NULL, &hashed, NULL);
}

void backend_close(struct backend *be)
{
	if (be)
		be->ops->destroy(be);
}

int backend_manifest_getattr(struct backend *be, uint64_t ino, struct sfs_attr *out)
{
	return manifest_getattr(be->m, ino, out);
}

int backend_manifest_lookup(struct backend *be, uint64_t parent, const char *name,
			    struct sfs_attr *out)
{
	return manifest_lookup(be->m, parent, name, out);
}

int backend_manifest_readdir(struct backend *be, uint64_t ino, struct sfs_dirlist *out)
{
	return manifest_readdir(be->m, ino, out);
}

int backend_manifest_readlink(struct backend *be, uint64_t ino, char *buf, size_t size)
{
	return manifest_readlink(be->m, ino, buf, size);
}

int backend_manifest_statfs(struct backend *be, uint64_t *bytes, uint64_t *files)
{
	manifest_totals(be->m, bytes, files);
	return 0;
}
