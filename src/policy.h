/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy: who may read which dataset, how much cache each user may hold,
 * and how each dataset's chunks are admitted and evicted.  Parsed from the
 * config file's [quota] and [dataset NAME] sections:
 *
 *   [quota]
 *   default = 100G            ; every user without a rule (none = unlimited)
 *   user:alice = 2T
 *   group:vision = 5T         ; each member without a user: rule
 *   namespace:vision = 5T     ; the pods of a Kubernetes namespace, together
 *
 *   [dataset imagenet]
 *   source = rados://datasets/imagenet
 *   allow = user:alice, group:vision, namespace:vision   ; absent = everyone
 *   policy = lru | nothrash
 *   epoch_staging = auto | on | off   ; absent = the epoch_staging setting
 *
 * A struct policy is immutable once built; SIGHUP builds a new one and the
 * daemon swaps the pointer (old ones live until exit, so a reader never
 * sees a freed policy).  User and group names are resolved when the file is
 * read: an unknown name is an error with file:line.
 */
#ifndef STAGEFS_POLICY_H
#define STAGEFS_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cred;

#define POLICY_UNLIMITED UINT64_MAX

enum evict_policy {
	EVICT_LRU,		/* least recently used chunk goes first */
	EVICT_NOTHRASH,		/* once full, keep what is cached, admit nothing */
};

struct policy_rule {
	bool group;		/* gid rule, else uid rule (unless ns is set) */
	uint32_t id;
	uint64_t bytes;		/* quota rules only */
	char ns[64];		/* a Kubernetes namespace rule: its name; "" otherwise */
};

struct policy_dataset {
	char name[256];
	char *source;
	struct policy_rule *allow;	/* NULL/0 with allow_all */
	size_t nallow;
	bool allow_all;
	enum evict_policy evict;
	int epoch_staging;		/* enum cfg_auto; -1: not set here */
};

struct policy {
	uint64_t quota_default;
	struct policy_rule *quota;	/* user:, group: and namespace: rules */
	size_t nquota;
	struct policy_dataset *ds;
	size_t nds;
	const char *file;		/* for messages */
};

/* A new empty policy (everyone may read, no quotas).  NULL on ENOMEM. */
struct policy *policy_create(void);
void policy_destroy(struct policy *p);

/*
 * Make the next config_load() fill @p from [quota] and [dataset NAME]
 * sections (registers config section handlers).
 */
void policy_register(struct policy *p);

/* The dataset rules for @name, or NULL. */
const struct policy_dataset *policy_dataset(const struct policy *p, const char *name);

/*
 * The cache quota of @uid in bytes (POLICY_UNLIMITED if none): its user:
 * rule, else the largest group: rule among its groups, else the default.
 */
uint64_t policy_quota(const struct policy *p, uint32_t uid);

/*
 * Kubernetes namespaces as tenants ([quota] namespace:NAME = SIZE): the
 * cache a namespace's pods may hold together, whatever uids they run as
 * (POLICY_UNLIMITED without a rule); whether @ns has such a rule; whether
 * any namespace has one.  A pod of a namespace with a rule is charged to
 * the namespace's account, not to its uid (docs/kubernetes.md).
 */
uint64_t policy_quota_ns(const struct policy *p, const char *ns);
/*
 * The cache's name for namespace @ns's tenant, "namespace:NS", into @buf;
 * and back: the namespace a tenant name is of, or NULL for another kind.
 */
void policy_ns_tenant(const char *ns, char *buf, size_t len);
const char *policy_tenant_ns(const char *tenant);
bool policy_ns_has_quota(const struct policy *p, const char *ns);
bool policy_has_ns_quotas(const struct policy *p);

/*
 * May caller @cr (src/cred.h) read dataset @ds?  Root always may.  @ds NULL
 * (no rules) allows everyone.  Group rules match @cr's primary group and,
 * where known, its supplementary groups.
 */
bool policy_may_read(const struct policy_dataset *ds, const struct cred *cr);

/*
 * May the pods of Kubernetes namespace @ns read dataset @ds (a
 * namespace:NAME rule, or no rules, or allow = *)?  @ns "" (not known)
 * matches no namespace rule.  The CSI plugin asks before it publishes a
 * volume (docs/kubernetes.md).
 */
bool policy_ns_may_read(const struct policy_dataset *ds, const char *ns);

/* Does @ds's allow list name a namespace? */
bool policy_has_ns_rules(const struct policy_dataset *ds);

/* A Kubernetes namespace name (an RFC 1123 label: a-z, 0-9, '-', <= 63)? */
bool policy_ns_valid(const char *ns);

/* True if @ds's allow list needs the caller's supplementary groups. */
bool policy_needs_groups(const struct policy_dataset *ds);

#endif
