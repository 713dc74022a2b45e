/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy: see policy.h.
 */
#include "policy.h"

#include "config.h"
#include "cred.h"
#include "util.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct policy *policy_create(void)
{
	struct policy *p = calloc(1, sizeof(*p));

	if (p)
		p->quota_default = POLICY_UNLIMITED;
	return p;
}

void policy_destroy(struct policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nds; i++) {
		free(p->ds[i].source);
		free(p->ds[i].allow);
	}
	free(p->ds);
	free(p->quota);
	free(p);
}

bool policy_ns_valid(const char *ns)
{
	size_t n = strlen(ns);

	if (n < 1 || n > 63 || ns[0] == '-' || ns[n - 1] == '-')
		return false;
	for (const char *c = ns; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-'))
			return false;
	return true;
}

/* Parse "user:NAME", "group:NAME", "uid:N", "gid:N", "namespace:NAME". */
static int parse_principal(const char *s, struct policy_rule *r, char *err, size_t len)
{
	const char *colon = strchr(s, ':');
	char kind[16];
	const char *name;
	char *end;

	if (!colon || (size_t)(colon - s) >= sizeof(kind)) {
		snprintf(err, len, "'%s': expected user:NAME, group:NAME, uid:N, gid:N or namespace:NAME", s);
		return -1;
	}
	memcpy(kind, s, (size_t)(colon - s));
	kind[colon - s] = '\0';
	name = colon + 1;
	if (!*name) {
		snprintf(err, len, "'%s': missing name", s);
		return -1;
	}
	memset(r, 0, sizeof(*r));
	if (!strcmp(kind, "uid") || !strcmp(kind, "gid")) {
		unsigned long v = strtoul(name, &end, 10);

		if (*end || end == name || v > UINT32_MAX) {
			snprintf(err, len, "'%s': not a number", s);
			return -1;
		}
		r->group = kind[0] == 'g';
		r->id = (uint32_t)v;
		return 0;
	}
	if (!strcmp(kind, "user")) {
		struct passwd *pw = getpwnam(name);

		if (!pw) {
			snprintf(err, len, "unknown user '%s'", name);
			return -1;
		}
		r->id = pw->pw_uid;
		return 0;
	}
	if (!strcmp(kind, "namespace")) {
		if (!policy_ns_valid(name)) {
			snprintf(err, len, "'%s': not a Kubernetes namespace name (a-z, 0-9, '-', at most 63)", s);
			return -1;
		}
		snprintf(r->ns, sizeof(r->ns), "%s", name);
		return 0;
	}
	if (!strcmp(kind, "group")) {
		struct group *gr = getgrnam(name);

		if (!gr) {
			snprintf(err, len, "unknown group '%s'", name);
			return -1;
		}
		r->group = true;
		r->id = gr->gr_gid;
		return 0;
	}
	snprintf(err, len, "'%s': expected user:NAME, group:NAME, uid:N, gid:N or namespace:NAME", s);
	return -1;
}

static int quota_section(void *arg, const char *section, const char *name,
			 const char *value, char *err, size_t len)
{
	struct policy *p = arg;
	struct policy_rule r, *nq;
	uint64_t bytes;
	char principal[300], val[128];

	if (strcmp(section, "quota")) {
		snprintf(err, len, "unknown section [%s]", section);
		return -1;
	}
	/*
	 * inih splits "name: value" as well as "name = value", so the line
	 * "user:alice = 2T" arrives as name "user", value "alice = 2T".
	 */
	if (!strcmp(name, "user") || !strcmp(name, "group") || !strcmp(name, "namespace") ||
	    !strcmp(name, "uid") || !strcmp(name, "gid")) {
		const char *eq = strchr(value, '=');
		size_t n;

		if (!eq) {
			snprintf(err, len, "expected %s:NAME = SIZE", name);
			return -1;
		}
		n = (size_t)(eq - value);
		while (n && (value[n - 1] == ' ' || value[n - 1] == '\t'))
			n--;
		snprintf(principal, sizeof(principal), "%s:%.*s", name, (int)n, value);
		eq++;
		while (*eq == ' ' || *eq == '\t')
			eq++;
		snprintf(val, sizeof(val), "%s", eq);
		name = principal;
		value = val;
	}
	if (!strcasecmp(value, "none") || !strcasecmp(value, "unlimited"))
		bytes = POLICY_UNLIMITED;
	else if (parse_size(value, &bytes)) {
		snprintf(err, len, "%s: '%s' is not a size (like 100G) or 'none'", name, value);
		return -1;
	}
	if (!strcmp(name, "default")) {
		p->quota_default = bytes;
		return 0;
	}
	if (parse_principal(name, &r, err, len))
		return -1;
	r.bytes = bytes;
	for (size_t i = 0; i < p->nquota; i++) {
		if (p->quota[i].group == r.group && p->quota[i].id == r.id &&
		    !strcmp(p->quota[i].ns, r.ns)) {
			p->quota[i].bytes = bytes;
			return 0;
		}
	}
	nq = realloc(p->quota, (p->nquota + 1) * sizeof(*nq));
	if (!nq) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	p->quota = nq;
	p->quota[p->nquota++] = r;
	return 0;
}

static struct policy_dataset *dataset_get(struct policy *p, const char *name)
{
	struct policy_dataset *nd;

	for (size_t i = 0; i < p->nds; i++)
		if (!strcmp(p->ds[i].name, name))
			return &p->ds[i];
	nd = realloc(p->ds, (p->nds + 1) * sizeof(*nd));
	if (!nd)
		return NULL;
	p->ds = nd;
	nd = &p->ds[p->nds++];
	memset(nd, 0, sizeof(*nd));
	snprintf(nd->name, sizeof(nd->name), "%s", name);
	nd->allow_all = true;
	nd->epoch_staging = -1;
	return nd;
}

static int dataset_section(void *arg, const char *section, const char *name,
			   const char *value, char *err, size_t len)
{
	struct policy *p = arg;
	const char *dsname = section + strlen("dataset");
	struct policy_dataset *d;

	if (*dsname != ' ' && *dsname != '\t') {
		snprintf(err, len, "unknown section [%s]", section);
		return -1;
	}
	while (*dsname == ' ' || *dsname == '\t')
		dsname++;
	if (!*dsname || strchr(dsname, '/') || strchr(dsname, '@') ||
	    !strcmp(dsname, ".") || !strcmp(dsname, "..") || dsname[0] == '.' ||
	    strlen(dsname) >= sizeof(d->name)) {
		snprintf(err, len, "[%s]: expected [dataset NAME] with a plain NAME", section);
		return -1;
	}
	d = dataset_get(p, dsname);
	if (!d) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	if (!strcmp(name, "source")) {
		free(d->source);
		d->source = strdup(value);
		return d->source ? 0 : -1;
	}
	if (!strcmp(name, "policy")) {
		if (!strcmp(value, "lru"))
			d->evict = EVICT_LRU;
		else if (!strcmp(value, "nothrash") || !strcmp(value, "no-thrash"))
			d->evict = EVICT_NOTHRASH;
		else {
			snprintf(err, len, "policy: '%s' is not lru or nothrash", value);
			return -1;
		}
		return 0;
	}
	if (!strcmp(name, "epoch_staging")) {
		if (!strcmp(value, "auto"))
			d->epoch_staging = CFG_AUTO;
		else if (!strcmp(value, "on") || !strcmp(value, "yes"))
			d->epoch_staging = CFG_ON;
		else if (!strcmp(value, "off") || !strcmp(value, "no"))
			d->epoch_staging = CFG_OFF;
		else {
			snprintf(err, len, "epoch_staging: '%s' is not auto, on or off", value);
			return -1;
		}
		return 0;
	}
	if (!strcmp(name, "allow")) {
		char *copy = strdup(value), *save = NULL;

		if (!copy)
			return -1;
		free(d->allow);
		d->allow = NULL;
		d->nallow = 0;
		d->allow_all = false;
		for (char *tok = strtok_r(copy, ", \t", &save); tok;
		     tok = strtok_r(NULL, ", \t", &save)) {
			struct policy_rule r, *na;

			if (!strcmp(tok, "*") || !strcmp(tok, "all")) {
				d->allow_all = true;
				continue;
			}
			if (parse_principal(tok, &r, err, len)) {
				free(copy);
				return -1;
			}
			na = realloc(d->allow, (d->nallow + 1) * sizeof(*na));
			if (!na) {
				free(copy);
				return -1;
			}
			d->allow = na;
			d->allow[d->nallow++] = r;
		}
		free(copy);
		return 0;
	}
	snprintf(err, len, "[%s]: unknown key '%s' (expected source, allow, policy, epoch_staging)",
		 section, name);
	return -1;
}

void policy_register(struct policy *p)
{
	config_add_section("quota", quota_section, p);
	config_add_section("dataset", dataset_section, p);
}

const struct policy_dataset *policy_dataset(const struct policy *p, const char *name)
{
	if (!p)
		return NULL;
	for (size_t i = 0; i < p->nds; i++)
		if (!strcmp(p->ds[i].name, name))
			return &p->ds[i];
	return NULL;
}

uint64_t policy_quota(const struct policy *p, uint32_t uid)
{
	uint64_t best = 0;
	bool have_group = false;
	struct passwd pw, *pwp = NULL;
	char buf[4096];
	gid_t groups[256];
	int ngroups = ARRAY_SIZE(groups);

	if (!p)
		return POLICY_UNLIMITED;
	for (size_t i = 0; i < p->nquota; i++)
		if (!p->quota[i].group && !p->quota[i].ns[0] && p->quota[i].id == uid)
			return p->quota[i].bytes;
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &pwp) == 0 && pwp &&
	    getgrouplist(pw.pw_name, pw.pw_gid, groups, &ngroups) >= 0) {
		for (size_t i = 0; i < p->nquota; i++) {
			if (!p->quota[i].group)
				continue;
			for (int k = 0; k < ngroups; k++) {
				if (groups[k] == p->quota[i].id) {
					have_group = true;
					best = MAX(best, p->quota[i].bytes);
				}
			}
		}
	}
	return have_group ? best : p->quota_default;
}

#define NS_TENANT	"namespace:"

void policy_ns_tenant(const char *ns, char *buf, size_t len)
{
	snprintf(buf, len, NS_TENANT "%s", ns);
}

const char *policy_tenant_ns(const char *tenant)
{
	return strncmp(tenant, NS_TENANT, strlen(NS_TENANT)) ? NULL : tenant + strlen(NS_TENANT);
}

/* Namespace @ns's [quota] rule, or NULL. */
static const struct policy_rule *ns_quota_rule(const struct policy *p, const char *ns)
{
	for (size_t i = 0; p && ns && i < p->nquota; i++)
		if (p->quota[i].ns[0] && !strcmp(p->quota[i].ns, ns))
			return &p->quota[i];
	return NULL;
}

uint64_t policy_quota_ns(const struct policy *p, const char *ns)
{
	const struct policy_rule *r = ns_quota_rule(p, ns);

	return r ? r->bytes : POLICY_UNLIMITED;
}

bool policy_ns_has_quota(const struct policy *p, const char *ns)
{
	return ns_quota_rule(p, ns) != NULL;
}

bool policy_has_ns_quotas(const struct policy *p)
{
	for (size_t i = 0; p && i < p->nquota; i++)
		if (p->quota[i].ns[0])
			return true;
	return false;
}

bool policy_needs_groups(const struct policy_dataset *ds)
{
	if (!ds || ds->allow_all)
		return false;
	for (size_t i = 0; i < ds->nallow; i++)
		if (ds->allow[i].group)
			return true;
	return false;
}

bool policy_may_read(const struct policy_dataset *ds, const struct cred *cr)
{
	if (!ds || ds->allow_all || cr->uid == 0)
		return true;
	for (size_t i = 0; i < ds->nallow; i++) {
		const struct policy_rule *r = &ds->allow[i];

		if (r->ns[0])
			continue;	/* a pod's namespace: checked at publish */
		if (!r->group && r->id == cr->uid)
			return true;
		if (r->group && cred_in_group(cr, r->id))
			return true;
	}
	return false;
}

bool policy_has_ns_rules(const struct policy_dataset *ds)
{
	for (size_t i = 0; ds && i < ds->nallow; i++)
		if (ds->allow[i].ns[0])
			return true;
	return false;
}

bool policy_ns_may_read(const struct policy_dataset *ds, const char *ns)
{
	if (!ds || ds->allow_all)
		return true;
	if (!ns[0])
		return false;
	for (size_t i = 0; i < ds->nallow; i++)
		if (ds->allow[i].ns[0] && !strcmp(ds->allow[i].ns, ns))
			return true;
	return false;
}
