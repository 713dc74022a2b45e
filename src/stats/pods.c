/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pods: pod uid -> namespace/name (pods.h).  A node runs at most a few
 * hundred pods (kubelet's default limit is 110), so a flat array searched
 * under one lock is enough, and it is looked at once per reader thread,
 * not per READ.
 */
#include "pods.h"

#include "policy.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct pod {
	char uid[PODS_UID_LEN + 1];
	char ns[64];
	char name[254];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pod pods[PODS_MAX];
static size_t npods;

bool pods_uid_valid(const char *uid)
{
	if (strlen(uid) != PODS_UID_LEN)
		return false;
	for (int i = 0; i < PODS_UID_LEN; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		char c = uid[i];

		if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return true;
}

/* A pod name: an RFC 1123 subdomain (a-z, 0-9, '-', '.'), at most 253. */
static bool name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 253)
		return false;
	for (const char *c = s; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '.'))
			return false;
	return true;
}

static struct pod *find(const char *uid)
{
	for (size_t i = 0; i < npods; i++)
		if (!strcmp(pods[i].uid, uid))
			return &pods[i];
	return NULL;
}

int pods_set(const char *uid, const char *ns, const char *name)
{
	struct pod *p;

	if (!pods_uid_valid(uid) || !policy_ns_valid(ns) || !name_valid(name))
		return -EINVAL;
	pthread_mutex_lock(&lock);
	p = find(uid);
	if (!p && npods == PODS_MAX) {
		pthread_mutex_unlock(&lock);
		return -ENOSPC;
	}
	if (!p)
		p = &pods[npods++];
	snprintf(p->uid, sizeof(p->uid), "%s", uid);
	snprintf(p->ns, sizeof(p->ns), "%s", ns);
	snprintf(p->name, sizeof(p->name), "%s", name);
	pthread_mutex_unlock(&lock);
	return 0;
}

int pods_forget(const char *uid)
{
	struct pod *p;

	pthread_mutex_lock(&lock);
	p = find(uid);
	if (p)
		*p = pods[--npods];
	pthread_mutex_unlock(&lock);
	return p ? 0 : -ENOENT;
}

bool pods_namespace(const char *uid, char *ns)
{
	struct pod *p;

	pthread_mutex_lock(&lock);
	p = find(uid);
	if (p)
		memcpy(ns, p->ns, sizeof(p->ns));
	pthread_mutex_unlock(&lock);
	return p != NULL;
}

bool pods_job(const char *uid, char *out, size_t len)
{
	struct pod *p;

	pthread_mutex_lock(&lock);
	p = find(uid);
	if (p)
		snprintf(out, len, "k8s:%s/%s", p->ns, p->name);
	pthread_mutex_unlock(&lock);
	return p != NULL;
}
