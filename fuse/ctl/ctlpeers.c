/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlpeers: the control socket's PEERS request (ctlsock_i.h,
 * docs/control.md): the node's peer group as the daemon uses it, and, for
 * root only, a reread of its peers_file.
 *
 * A scheduler integration (the Slurm plugin, docs/slurm.md) rewrites
 * peers_file at each job's start and end and asks for the reread here
 * rather than by SIGHUP: the answer says whether the file was taken (a
 * file with a bad line, or one someone other than root may write, is
 * refused and the group stays as it was), and nothing but the membership
 * is reloaded.  Who may change the group: root (or the daemon's user),
 * told by the kernel (SO_PEERCRED), never anyone who can reach the socket;
 * what a user may do is read the membership, as .stagefs/stats shows it.
 */
#include "ctlsock_i.h"

#include "log.h"
#include "peer/peer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "OK members=N self=ADDR peers=ADDR,... peers_file=PATH" (this node included). */
static int send_members(struct ctlsock_client *cl, struct peer_group *pg)
{
	struct peer_stat *v;
	char list[PEER_MAX * 24] = "", self[32] = "", file[PATH_MAX], esc[PATH_MAX * 3 + 1];
	size_t n, members = 0, len = 0;
	int rc = peer_group_stats(pg, &v, &n);

	if (rc)
		return ctlconn_send_err(cl, -rc, "cannot read the peer group");
	for (size_t i = 0; i < n; i++) {
		if (v[i].self)
			snprintf(self, sizeof(self), "%s", v[i].addr);
		if (!v[i].member)
			continue;
		members++;
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
					len ? "," : "", v[i].addr);
	}
	free(v);
	peer_group_peers_file(pg, file, sizeof(file));
	ctl_escape(file, esc, sizeof(esc));
	return ctl_sendf(cl->fd, "OK members=%zu self=%s peers=%s peers_file=%s\n", members, self,
			 list, esc);
}

int ctlpeers_peers(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	/* any user may ask, as often as they like (issue 27) */
	static struct log_ratelimit rl = LOG_RATELIMIT_INIT(10000, 10);
	struct peer_group *pg = cl->cs->fs->peers;
	const char *reload = ctl_get(m, "reload");
	char err[1024];
	int rc;

	if (!pg)
		return ctlconn_send_err(cl, ENOENT, "this node is in no peer group (peer_listen is not set)");
	if (!reload || !strcmp(reload, "0"))
		return send_members(cl, pg);
	if (strcmp(reload, "1"))
		return ctlconn_send_err(cl, EINVAL, "reload is 0 or 1");
	if (cl->cred.uid != 0 && cl->cred.uid != geteuid()) {
		log_limited(&rl, LOG_NOTICE,
			    "control: uid %u may not reload the peer group (root only)",
			    (unsigned)cl->cred.uid);
		return ctlconn_send_err(cl, EPERM, "only root may change the peer group");
	}
	rc = peer_group_reread(pg, err, sizeof(err));
	if (rc) {
		log_err("control: peer group reread refused: %s; the group stays as it was", err);
		return ctlconn_send_err(cl, -rc, err);
	}
	return send_members(cl, pg);
}
