/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cred: who asks.  A caller's uid, primary gid and supplementary groups,
 * and the permission checks every decision about a caller goes through.
 *
 * A credential comes from the kernel, never from a process id looked up
 * later (a pid can be reused between the request and the lookup):
 *   - a control-socket peer: SO_PEERCRED (uid, gid, pid as of connect())
 *     and SO_PEERGROUPS (its supplementary groups), cred_from_socket();
 *   - a FUSE request: fuse_req_ctx() and fuse_req_getgroups(), read by
 *     fuse/ (src/ includes no FUSE header) and handed to cred_init().
 * The pid is kept for accounting and hint scopes, and for one permission
 * decision: a namespace:NAME rule asks which Kubernetes pod a FUSE
 * request's reader is in (its cgroup, fuse/access.c), read while the
 * reader's thread is blocked in that request.
 *
 * Groups may be unknown (ngroups < 0: a FUSE request whose groups were not
 * asked for because no rule needed them): then only uid and gid match.
 * At most CRED_MAX_GROUPS supplementary groups are kept.
 *
 * No state, no allocation: a struct cred is a plain value, copied freely.
 */
#ifndef STAGEFS_CRED_H
#define STAGEFS_CRED_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CRED_MAX_GROUPS	256

/* POSIX permission bits for cred_may_access()'s @mask. */
#define CRED_MAY_READ	4
#define CRED_MAY_WRITE	2
#define CRED_MAY_EXEC	1	/* search, on a directory */

struct cred {
	uint32_t uid, gid;
	pid_t pid;			/* for accounting and hints only; 0 if unknown */
	int ngroups;			/* -1: supplementary groups not known */
	uint32_t groups[CRED_MAX_GROUPS];
};

/*
 * Fill @cr from plain values: @groups[0..@ngroups) (extra ones beyond
 * CRED_MAX_GROUPS are dropped); @ngroups < 0 marks the groups unknown.
 */
void cred_init(struct cred *cr, uint32_t uid, uint32_t gid, pid_t pid,
	       const gid_t *groups, int ngroups);

/*
 * Fill @cr for the peer of connected Unix socket @fd (SO_PEERCRED and
 * SO_PEERGROUPS).  Returns 0 or -errno (SO_PEERCRED failed).  A kernel
 * without SO_PEERGROUPS (before 4.13) gives a credential without
 * supplementary groups (ngroups 0).
 */
int cred_from_socket(struct cred *cr, int fd);

/* True if @gid is @cr's primary group or one of its supplementary groups. */
bool cred_in_group(const struct cred *cr, uint32_t gid);

/*
 * POSIX permission check of an object owned by @uid:@gid with mode @mode
 * for @cr, as the kernel's default_permissions does: @mask of
 * CRED_MAY_READ | CRED_MAY_WRITE | CRED_MAY_EXEC.  Root may everything.
 */
bool cred_may_access(const struct cred *cr, uint32_t uid, uint32_t gid,
		     uint32_t mode, int mask);

#endif
