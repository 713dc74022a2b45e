/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pods: the Kubernetes pods this node's CSI plugin has published volumes
 * to (docs/kubernetes.md), by pod uid: their namespace and name, so that a
 * reader found in a pod's cgroup (procinfo.h, rule "k8s:pod/UID") is
 * counted under the job "k8s:NAMESPACE/NAME".  Process-wide, bounded
 * (PODS_MAX), thread safe; filled by the control socket's POD request
 * (root only).
 */
#ifndef STAGEFS_PODS_H
#define STAGEFS_PODS_H

#include <stdbool.h>
#include <stddef.h>

#define PODS_MAX	4096
#define PODS_UID_LEN	36	/* 8-4-4-4-12 hex digits */

/* Is @uid a pod uid as Kubernetes writes it (lowercase, 8-4-4-4-12)? */
bool pods_uid_valid(const char *uid);

/*
 * Remember pod @uid as @ns/@name (replacing what was there).  0, -EINVAL
 * (a bad uid, namespace or name) or -ENOSPC (PODS_MAX pods known).
 */
int pods_set(const char *uid, const char *ns, const char *name);
/* Forget pod @uid (its volumes are gone).  0 or -ENOENT. */
int pods_forget(const char *uid);
/* The namespace of pod @uid into @ns (64 bytes); false if not known. */
bool pods_namespace(const char *uid, char *ns);
/* "k8s:NS/NAME" of pod @uid into @out; false if not known. */
bool pods_job(const char *uid, char *out, size_t len);

#endif
