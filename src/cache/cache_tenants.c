/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_tenants: owners that are not uids, and their ids on disk.
 *
 * A Kubernetes namespace with a quota ("namespace:vision") is charged as one
 * owner whatever uids its pods run as.  The journal records a chunk's
 * owner as 32 bits (cache_journal.c), so a tenant gets an owner id of its
 * own, CACHE_TENANT_FIRST + n, the n-th tenant this cache has met; ids are
 * never reused.  CACHE_DIR/index/tenants names them:
 *
 *   stagefs-tenants 1
 *   4294836224 namespace:vision
 *   4294836225 namespace:nlp
 *
 * A new line is written and made durable (fdatasync) before its id is
 * returned, so no journal record charges an id the file does not name.  At
 * start a line that is not well formed ends the file: it and what follows
 * are cut off (logged), and their chunks stay charged to ids without a
 * name, shown as "tenant#ID" and held to no quota, until they leave.
 *
 * Locking: c->tenant_lock (a leaf, cache_i.h) guards the table; the
 * append runs under it, never under c->lock.
 */
#include "cache_i.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TENANTS_MAGIC	"stagefs-tenants 1"

/* Printable, no space, within CACHE_TENANT_NAME_MAX: what a line can hold. */
static bool name_ok(const char *name)
{
	size_t n = strlen(name);

	if (!n || n >= CACHE_TENANT_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (name[i] <= ' ' || name[i] > '~')
			return false;
	return true;
}

static int table_add(struct cache *c, const char *name)
{
	char **nt = realloc(c->tenants, (c->ntenants + 1) * sizeof(*nt));

	if (!nt)
		return -ENOMEM;
	c->tenants = nt;
	if (!(nt[c->ntenants] = strdup(name)))
		return -ENOMEM;
	c->ntenants++;
	return 0;
}

int cache_tenants_load(struct cache *c)
{
	char path[PATH_MAX], line[CACHE_TENANT_NAME_MAX + 32];
	unsigned lineno = 0;
	long good = 0;
	bool bad = false;
	FILE *f;
	int ret = 0;

	snprintf(path, sizeof(path), "%s/index/tenants", c->dir);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	while (fgets(line, sizeof(line), f)) {
		char name[CACHE_TENANT_NAME_MAX];
		unsigned long id;
		int used = 0;

		lineno++;
		if (lineno == 1) {
			if (strcmp(line, TENANTS_MAGIC "\n")) {
				log_warn("cache: %s: not a tenants file: replaced", path);
				bad = true;
				break;
			}
			good = ftell(f);
			continue;
		}
		_Static_assert(CACHE_TENANT_NAME_MAX == 80, "the %79s below");
		if (sscanf(line, "%lu %79s%n", &id, name, &used) != 2 ||
		    line[used] != '\n' || !name_ok(name) ||
		    id != CACHE_TENANT_FIRST + c->ntenants || id > CACHE_TENANT_LAST) {
			log_warn("cache: %s:%u: not well formed: this line and the rest dropped",
				 path, lineno);
			bad = true;
			break;
		}
		ret = table_add(c, name);
		if (ret)
			break;
		good = ftell(f);
	}
	fclose(f);
	/* as the journal's torn tail: a later line must not land after it */
	if (!ret && bad && truncate(path, good) < 0)
		ret = -errno;
	return ret;
}

void cache_tenants_release(struct cache *c)
{
	for (size_t i = 0; i < c->ntenants; i++)
		free(c->tenants[i]);
	free(c->tenants);
	c->tenants = NULL;
	c->ntenants = 0;
}

/* Append @name as the next id's line, durably.  tenant_lock held. */
static int append(struct cache *c, const char *name)
{
	char path[PATH_MAX], line[CACHE_TENANT_NAME_MAX + 32];
	int fd, n, ret = 0;
	struct stat st;

	snprintf(path, sizeof(path), "%s/index/tenants", c->dir);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto out;
	}
	n = 0;
	if (st.st_size == 0)
		n = snprintf(line, sizeof(line), TENANTS_MAGIC "\n");
	n += snprintf(line + n, sizeof(line) - (size_t)n, "%lu %s\n",
		      (unsigned long)(CACHE_TENANT_FIRST + c->ntenants), name);
	if (write(fd, line, (size_t)n) != n || fdatasync(fd) < 0)
		ret = errno ? -errno : -EIO;
out:
	close(fd);
	return ret;
}

int cache_tenant_id(struct cache *c, const char *name, uint32_t *id)
{
	int ret = 0;

	if (!name_ok(name))
		return -EINVAL;
	pthread_mutex_lock(&c->tenant_lock);
	for (size_t i = 0; i < c->ntenants; i++) {
		if (!strcmp(c->tenants[i], name)) {
			*id = CACHE_TENANT_FIRST + (uint32_t)i;
			goto out;
		}
	}
	if (CACHE_TENANT_FIRST + c->ntenants > CACHE_TENANT_LAST) {
		ret = -ENOSPC;
		goto out;
	}
	ret = append(c, name);
	if (!ret)
		ret = table_add(c, name);
	if (!ret) {
		*id = CACHE_TENANT_FIRST + (uint32_t)(c->ntenants - 1);
		log_info("cache: %s is charged as owner %u", name, *id);
	}
out:
	pthread_mutex_unlock(&c->tenant_lock);
	return ret;
}

bool cache_tenant_name(struct cache *c, uint32_t id, char *buf, size_t len)
{
	bool found = false;

	if (!cache_owner_is_tenant(id))
		return false;
	pthread_mutex_lock(&c->tenant_lock);
	if (id - CACHE_TENANT_FIRST < c->ntenants) {
		snprintf(buf, len, "%s", c->tenants[id - CACHE_TENANT_FIRST]);
		found = true;
	}
	pthread_mutex_unlock(&c->tenant_lock);
	if (!found)
		snprintf(buf, len, "tenant#%u", id);
	return found;
}
