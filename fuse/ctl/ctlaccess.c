/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlaccess: ACCESS, the question the CSI plugin asks before it publishes
 * a volume into a pod (docs/kubernetes.md): may the pods of namespace NS
 * read dataset NAME?  Root only: the answer is the node's policy, and the
 * plugin runs as root beside the daemon.
 *
 *   ACCESS dataset=NAME[@VERSION] [namespace=NS]
 *   OK allowed=1
 *   OK allowed=0 reason=...         (no such dataset: ERR code=ENOENT)
 */
#include "ctlsock_i.h"

#include "log.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

int ctlaccess_access(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	static struct log_ratelimit rl = LOG_RATELIMIT_INIT(10000, 10);
	const char *name = ctl_get(m, "dataset"), *ns = ctl_get(m, "namespace");
	char why[512], esc[1600];
	int r;

	if (cl->cred.uid != 0 && cl->cred.uid != geteuid()) {
		log_limited(&rl, LOG_NOTICE, "control: uid %u may not ask ACCESS (root only)",
			    (unsigned)cl->cred.uid);
		return ctlconn_send_err(cl, EPERM, "only root may ask ACCESS");
	}
	if (!name || !name[0] || strchr(name, '/') || name[0] == '.')
		return ctlconn_send_err(cl, EINVAL, "ACCESS needs dataset=NAME");
	r = access_ns_check(cl->cs->fs, name, ns ? ns : "", why, sizeof(why));
	if (r == -EACCES) {
		ctl_escape(why, esc, sizeof(esc));
		return ctl_sendf(cl->fd, "OK allowed=0 reason=%s\n", esc);
	}
	if (r)
		return ctlconn_send_err(cl, -r, why);
	return ctl_sendf(cl->fd, "OK allowed=1\n");
}
