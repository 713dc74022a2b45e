/* SPDX-License-Identifier: Apache-2.0 */
/*
 * datasets: the datasets a daemon serves.
 *
 * fs->ds[] is append-only: a dataset, once published (fs->nds incremented
 * after the slot is written), stays for the daemon's life, so readers index
 * it without a lock.  Appends are serialized by fs->ds_lock.  NAME@VERSION of
 * a configured rados:// dataset is opened on its first lookup.
 */
#include "datasets.h"

#include "log.h"
#include "peerd.h"
#include "policy.h"
#include "takeover.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sfs_dataset *find_locked(struct sfs *fs, const char *name)
{
	uint32_t n = atomic_load(&fs->nds);

	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(fs->ds[i]->name, name))
			return fs->ds[i];
	return NULL;
}

struct sfs_dataset *datasets_find(struct sfs *fs, const char *name)
{
	return find_locked(fs, name);
}

/* @ds and its strings (not its backend). */
static void dataset_free(struct sfs_dataset *ds)
{
	free(ds->rule_name);
	free(ds->name);
	free(ds->source);
	free(ds);
}

int datasets_add(struct sfs *fs, const char *name, const char *source,
		    bool hidden, struct sfs_dataset **out, char *err, size_t errlen)
{
	struct sfs_dataset *ds;
	uint32_t n;
	int ret;

	ds = calloc(1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->name = strdup(name);
	ds->source = strdup(source);
	ds->hidden = hidden;
	ds->rule_name = strndup(name, strcspn(name, "@"));
	if (!ds->name || !ds->source || !ds->rule_name) {
		ret = -ENOMEM;
		goto out_free;
	}
	ret = backend_open(source, &fs->cfg, &ds->be, err, errlen);
	if (ret)
		goto out_free;
	pthread_mutex_lock(&fs->ds_lock);
	n = atomic_load(&fs->nds);
	if (find_locked(fs, name)) {
		pthread_mutex_unlock(&fs->ds_lock);
		snprintf(err, errlen, "dataset %s is listed twice", name);
		ret = -EEXIST;
		goto out_close;
	}
	if (n >= SFS_MAX_DATASETS) {
		pthread_mutex_unlock(&fs->ds_lock);
		snprintf(err, errlen, "too many datasets (at most %d)", SFS_MAX_DATASETS);
		ret = -ENOSPC;
		goto out_close;
	}
	ds->index = n;
	{
		const struct policy_dataset *pd =
			policy_dataset(atomic_load(&fs->policy), ds->rule_name);

		atomic_store(&ds->nothrash, pd && pd->evict == EVICT_NOTHRASH);
		atomic_store(&ds->epoch_staging, pd && pd->epoch_staging >= 0 ?
			     pd->epoch_staging : (int)fs->cfg.epoch_staging);
	}
	/* before it is published: no fill may start without the group */
	if (fs->peers)
		ds->be->peers = fs->peers;
	fs->ds[n] = ds;
	atomic_store(&fs->nds, n + 1);
	pthread_mutex_unlock(&fs->ds_lock);
	peerd_dataset_added(fs, ds);
	/* its index is in node ids now: a daemon taking over must know it */
	if (fs->multi)
		takeover_publish(fs);
	if (out)
		*out = ds;
	return 0;

out_close:
	backend_close(ds->be);
out_free:
	dataset_free(ds);
	return ret;
}

void datasets_destroy(struct sfs *fs)
{
	uint32_t n = atomic_load(&fs->nds);

	for (uint32_t i = 0; i < n; i++) {
		backend_close(fs->ds[i]->be);
		dataset_free(fs->ds[i]);
		fs->ds[i] = NULL;
	}
	atomic_store(&fs->nds, 0);
}

struct sfs_dataset *datasets_lookup(struct sfs *fs, const char *name)
{
	struct sfs_dataset *ds = datasets_find(fs, name), *base;
	char base_name[256], src[4096], err[1024];
	const char *at = strchr(name, '@');

	if (ds || !at || at == name || (size_t)(at - name) >= sizeof(base_name))
		return ds;
	memcpy(base_name, name, (size_t)(at - name));
	base_name[at - name] = '\0';
	base = datasets_find(fs, base_name);
	if (!base || strncmp(base->source, "rados://", 8) || strchr(base->source, '@') ||
	    strchr(base->source, '?'))
		return NULL;
	for (const char *p = at + 1; *p; p++)
		if (*p < '0' || *p > '9')
			return NULL;
	snprintf(src, sizeof(src), "%s%s", base->source, at);
	if (datasets_add(fs, name, src, true, &ds, err, sizeof(err))) {
		/* a lost race with another lookup of the same name is fine */
		ds = datasets_find(fs, name);
		if (!ds)
			log_info("dataset %s: %s", name, err);
	}
	return ds;
}
