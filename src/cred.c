/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cred: see cred.h.
 */
#include "cred.h"

#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59	/* Linux 4.13; older headers lack it */
#endif

void cred_init(struct cred *cr, uint32_t uid, uint32_t gid, pid_t pid,
	       const gid_t *groups, int ngroups)
{
	cr->uid = uid;
	cr->gid = gid;
	cr->pid = pid;
	if (ngroups < 0) {
		cr->ngroups = -1;
		return;
	}
	cr->ngroups = MIN(ngroups, CRED_MAX_GROUPS);
	for (int i = 0; i < cr->ngroups; i++)
		cr->groups[i] = (uint32_t)groups[i];
}

int cred_from_socket(struct cred *cr, int fd)
{
	gid_t groups[CRED_MAX_GROUPS];
	socklen_t gl = sizeof(groups);
	struct ucred uc;
	socklen_t ul = sizeof(uc);
	int n = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) < 0)
		return -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0) {
		n = (int)(gl / sizeof(gid_t));
	} else if (errno == ERANGE) {
		/* more groups than we keep: take the first CRED_MAX_GROUPS */
		socklen_t need = gl;
		gid_t *all = need ? malloc(need) : NULL;

		if (all && getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, all, &need) == 0) {
			n = MIN((int)(need / sizeof(gid_t)), CRED_MAX_GROUPS);
			memcpy(groups, all, (size_t)n * sizeof(gid_t));
		}
		free(all);
	}
	cred_init(cr, uc.uid, uc.gid, uc.pid, groups, n);
	return 0;
}

bool cred_in_group(const struct cred *cr, uint32_t gid)
{
	if (cr->gid == gid)
		return true;
	for (int i = 0; i < cr->ngroups; i++)
		if (cr->groups[i] == gid)
			return true;
	return false;
}

bool cred_may_access(const struct cred *cr, uint32_t uid, uint32_t gid,
		     uint32_t mode, int mask)
{
	uint32_t bits;

	if (cr->uid == 0)
		return true;
	if (cr->uid == uid)
		bits = (mode >> 6) & 7;
	else if (cred_in_group(cr, gid))
		bits = (mode >> 3) & 7;
	else
		bits = mode & 7;
	return ((int)bits & mask) == mask;
}
