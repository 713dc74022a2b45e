/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlk8s: what the CSI plugin asks and tells (docs/kubernetes.md,
 * docs/control.md).  Root only: the answers are the node's policy, the
 * pod names become other users' job labels, and the plugin runs as root
 * beside the daemon.
 *
 *   ACCESS dataset=NAME[@VERSION] [namespace=NS]   may NS's pods read it?
 *   OK allowed=1
 *   OK allowed=0 reason=...         (no such dataset: ERR code=ENOENT)
 *
 *   POD uid=UID namespace=NS name=NAME     a pod got a volume: its readers
 *   POD uid=UID gone=1                     are counted as k8s:NS/NAME
 *   OK
 */
#include "ctlsock_i.h"

#include "log.h"
#include "stats/pods.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static struct log_ratelimit rl = LOG_RATELIMIT_INIT(10000, 10);

/* Root or the daemon's own user: true; else ERR sent (*@ret) and false. */
static bool privileged(struct ctlsock_client *cl, const char *verb, int *ret)
{
	if (cl->cred.uid == 0 || cl->cred.uid == geteuid())
		return true;
	log_limited(&rl, LOG_NOTICE, "control: uid %u may not send %s (root only)",
		    (unsigned)cl->cred.uid, verb);
	*ret = ctlconn_send_err(cl, EPERM, "only root may send this request");
	return false;
}

int ctlk8s_access(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	const char *name = ctl_get(m, "dataset"), *ns = ctl_get(m, "namespace");
	char why[512], esc[1600];
	int r;

	if (!privileged(cl, "ACCESS", &r))
		return r;
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

int ctlk8s_pod(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	const char *uid = ctl_get(m, "uid"), *gone = ctl_get(m, "gone");
	const char *ns = ctl_get(m, "namespace"), *name = ctl_get(m, "name");
	int r;

	if (!privileged(cl, "POD", &r))
		return r;
	if (!uid || !pods_uid_valid(uid))
		return ctlconn_send_err(cl, EINVAL, "POD needs uid=UID, a pod's uid");
	if (gone && !strcmp(gone, "1")) {
		pods_forget(uid);
		return ctl_sendf(cl->fd, "OK\n");
	}
	if (!ns || !name)
		return ctlconn_send_err(cl, EINVAL, "POD needs namespace=NS and name=NAME (or gone=1)");
	r = pods_set(uid, ns, name);
	if (r)
		return ctlconn_send_err(cl, -r, r == -ENOSPC ? "too many pods known" :
					"a bad namespace or pod name");
	return ctl_sendf(cl->fd, "OK\n");
}
