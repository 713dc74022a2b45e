/* SPDX-License-Identifier: Apache-2.0 */
/*
 * access: who may read what through the mount and the control socket,
 * per-user cache quotas, and the configuration reload that changes both.
 *
 * Access is decided per dataset from the current policy (src/policy.h) for
 * a caller's credential (src/cred.h): built from the FUSE request here
 * (access_req_cred), or from the control socket's peer (cred_from_socket).
 * Every refusal is logged once per (uid, dataset) per minute.  See
 * access.c for the design.
 */
#ifndef STAGEFS_FUSE_ACCESS_H
#define STAGEFS_FUSE_ACCESS_H

#include "fs.h"

struct cred;

/*
 * The cache quota of owner @uid (a user, or the tenant named @tenant) under
 * the current policy (the cache's quota callback).
 */
uint64_t access_quota_of(void *fs, uint32_t uid, const char *tenant);

/*
 * The owner the cache charges for what thread @pid of user @uid brings in:
 * its pod's namespace where that has a [quota] rule (a tenant,
 * src/cache/cache.h), else @uid.
 */
uint32_t access_owner(struct sfs *fs, uint32_t uid, pid_t pid);

/* The owner id of namespace @ns's tenant (src/cache/cache.h): 0 or -errno. */
int access_ns_tenant(struct sfs *fs, const char *ns, uint32_t *id);

/*
 * May caller @cr (src/cred.h) read dataset @ds?  Refusals are logged.
 */
bool access_may_read(struct sfs *fs, const struct cred *cr, struct sfs_dataset *ds);

/*
 * May the pods of Kubernetes namespace @ns (src/policy.h; "" not known)
 * read dataset @name (NAME or NAME@VERSION) of this multi-dataset root?
 * 0 yes; -EACCES no, -ENOENT no such dataset, with the reason in @why.
 * Asked by the CSI plugin before it publishes a volume (ACCESS,
 * docs/control.md); refusals are logged.
 */
int access_ns_check(struct sfs *fs, const char *name, const char *ns, char *why,
		    size_t len);

/*
 * True if everyone may read dataset @ds under the current policy: a
 * single-dataset mount, or a [dataset] section without an allow list.
 * (What the kernel may cache for all users alike.)
 */
bool access_open_to_all(struct sfs *fs, const struct sfs_dataset *ds);

/*
 * The credential of the process behind FUSE request @req (src/cred.h); its
 * supplementary groups only with @groups (libfuse reads them from /proc,
 * so they are asked for only when a rule needs them; else unknown).
 */
void access_req_cred(fuse_req_t req, bool groups, struct cred *cr);

/*
 * Resolve @rel (relative to the mount root, "" for the root) for caller @cr
 * as a read through the mount would be checked: the dataset's access rules
 * (access_may_read) and search permission on every directory passed.  Sets
 * *@ds (NULL for the root of a multi-dataset mount) and *@ino (the backend
 * inode).  Returns 0 or -errno.
 */
int access_resolve(struct sfs *fs, const struct cred *cr, const char *rel,
		   struct sfs_dataset **ds, uint64_t *ino);

/*
 * access_may_read for the process behind FUSE request @req.  Returns 0 or
 * -EACCES.
 */
int access_check_req(struct sfs *fs, fuse_req_t req, struct sfs_dataset *ds);

/* Start the thread that reloads quotas and access rules on SIGHUP. */
int access_reload_start(struct sfs *fs);
/*
 * At exit: wait for a reload in progress, refuse later ones (the reload
 * thread blocks), free the policy and those reloads replaced.
 */
void access_destroy(struct sfs *fs);

/*
 * .stagefs/quota: per-user cache usage, one tab-separated line per user,
 * as caller @cr may see it: root (or @cr NULL) every user's line, anyone
 * else their own only.  A vfiles_file render function (fuse/vfiles.h).
 */
int access_quota_text(struct sfs *fs, const struct cred *cr, char **out);

#endif
