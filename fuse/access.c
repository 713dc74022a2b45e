/* SPDX-License-Identifier: Apache-2.0 */
/*
 * access: dataset access rules, quota lookups and configuration reload.
 *
 * Access is decided per dataset from the current policy (policy.h): the
 * multi-dataset root lists, and lookup finds, only the datasets the caller
 * may read (a dataset the caller may not read does not exist for it:
 * ENOENT at LOOKUP and GETATTR, as for a name never configured); OPEN and
 * OPENDIR inside a dataset check again, so a dentry the kernel cached for
 * another user gives no access to data.  The kernel caches entries for all
 * users alike, so fuse/ops.c never lets it cache the root entry of a
 * dataset not open to all (access_open_to_all): every walk through it
 * comes here.  (Names the kernel cached inside a dataset can still be
 * stat()ed until their timeouts by a process already inside it, as its
 * working directory, when a reload takes its access away: names and sizes,
 * never bytes.)  Root may read everything.  Every refusal is logged once
 * per (uid, dataset) per minute.
 *
 * A single-dataset mount (`stagefs SOURCE MNT`) has no dataset rules.  On a
 * multi-dataset root every dataset comes from a [dataset NAME] section
 * (NAME@VERSION follows NAME's): a dataset whose section is gone from the
 * current policy is never treated as "no rules, everyone may read" but as
 * root's only, until its section comes back or it is unmounted.  So no
 * reload can widen access by dropping a section.
 *
 * Reload: SIGHUP wakes a thread (through a pipe: a signal handler does
 * nothing else) that re-reads the config file into a new policy.  A file
 * with an error, a file that cannot be read, a directory and a file with
 * no section or setting at all (which would drop every rule) are refused,
 * naming the path, and the old policy stays in force; a good one is
 * swapped in atomically.  Quotas, access rules and eviction policies
 * change; a user now over a lowered quota loses the excess at once (own
 * chunks, least recently used first: cache_enforce_quotas); datasets listed
 * anew are mounted; a dataset whose section is gone is logged, once per
 * reload, and is root's only until configured again (removing it takes a
 * remount).  Old policies are kept until exit (access_destroy) so a
 * request holding one never sees it freed.
 */
#include "access.h"

#include "cred.h"
#include "datasets.h"
#include "log.h"
#include "peerd.h"
#include "policy.h"
#include "stats/pods.h"
#include "stats/procinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t access_quota_of(void *arg, uint32_t uid, const char *tenant)
{
	struct sfs *fs = arg;
	const struct policy *p = atomic_load(&fs->policy);

	if (tenant)	/* a tenant the policy no longer names: no quota */
		return policy_tenant_ns(tenant) ? policy_quota_ns(p, policy_tenant_ns(tenant)) :
		       POLICY_UNLIMITED;
	return policy_quota(p, uid);
}

int access_ns_tenant(struct sfs *fs, const char *ns, uint32_t *id)
{
	char name[CACHE_TENANT_NAME_MAX];

	policy_ns_tenant(ns, name, sizeof(name));
	return cache_tenant_id(fs->cache, name, id);
}

/*
 * A pod's namespace with a [quota] rule is the tenant its reads are charged
 * to.  The pod is known by the reader's cgroup (as for namespace: allow
 * rules, which only root moves a process into), its namespace by what the
 * CSI plugin said (POD); a pod whose namespace is not known yet is charged
 * to its uid.
 */
uint32_t access_owner(struct sfs *fs, uint32_t uid, pid_t pid)
{
	static struct log_ratelimit rl = LOG_RATELIMIT_INIT(60000, 5);
	const struct policy *p = atomic_load(&fs->policy);
	char pod[PODS_UID_LEN + 1], ns[64];
	uint32_t id;
	int ret;

	if (!fs->cache || !policy_has_ns_quotas(p) || pid <= 0 || !procinfo_pod_of(pid, pod) ||
	    !pods_namespace(pod, ns) || !policy_ns_has_quota(p, ns))
		return cache_owner_of_uid(uid);
	ret = access_ns_tenant(fs, ns, &id);
	if (ret) {
		log_limited(&rl, LOG_WARNING, "cache: cannot record namespace %s's tenant (%s): its pod's reads are charged to uid %u",
			    ns, strerror(-ret), uid);
		return cache_owner_of_uid(uid);
	}
	return id;
}

/*
 * Any user can be refused at will, by every open or lookup, in turns over
 * two datasets as well as one (issue 27): 10 lines a minute at most, the
 * next one saying how many were suppressed.
 */
static void log_refusal(uint32_t uid, const struct sfs_dataset *ds, bool gone)
{
	static struct log_ratelimit rl = LOG_RATELIMIT_INIT(60000, 10);

	log_limited(&rl, LOG_NOTICE, "access denied: uid %u may not read dataset %s%s", uid,
		    ds->rule_name[0] ? ds->rule_name : ds->source,
		    gone ? " (no longer configured: root only)" : "");
}

/*
 * The [dataset] rules of @ds under policy @p: NULL with *@gone false on a
 * single-dataset mount (no rules: everyone); NULL with *@gone true for a
 * dataset of a multi-dataset root whose section @p no longer has.
 */
static const struct policy_dataset *rules_of(struct sfs *fs, const struct policy *p,
					     const struct sfs_dataset *ds, bool *gone)
{
	const struct policy_dataset *pd;

	*gone = false;
	if (!fs->multi)
		return NULL;	/* a single-source mount has no dataset rules */
	pd = policy_dataset(p, ds->rule_name);
	*gone = !pd;
	return pd;
}

/*
 * A namespace:NAME rule and a reader in a pod: the pod's cgroup (which
 * only root moves a process into, under kubelet's root) names its uid, and
 * the CSI plugin named its namespace (POD).  The reader's thread is
 * blocked in the request while its cgroup is read, so its pid is its own.
 */
static bool reader_ns_may_read(const struct policy_dataset *pd, const struct cred *cr)
{
	char uid[PODS_UID_LEN + 1], ns[64];

	return pd && policy_has_ns_rules(pd) && cr->pid > 0 && procinfo_pod_of(cr->pid, uid) &&
	       pods_namespace(uid, ns) && policy_ns_may_read(pd, ns);
}

bool access_may_read(struct sfs *fs, const struct cred *cr, struct sfs_dataset *ds)
{
	bool gone;
	const struct policy_dataset *pd = rules_of(fs, atomic_load(&fs->policy), ds, &gone);

	if (cr->uid == 0 || (!gone && policy_may_read(pd, cr)))
		return true;
	if (!gone && reader_ns_may_read(pd, cr))
		return true;
	log_refusal(cr->uid, ds, gone);
	return false;
}

int access_ns_check(struct sfs *fs, const char *name, const char *ns, char *why,
		    size_t len)
{
	static struct log_ratelimit rl = LOG_RATELIMIT_INIT(60000, 20);
	const struct policy_dataset *pd;
	struct sfs_dataset *ds;
	bool gone;

	if (!fs->multi) {
		snprintf(why, len, "this daemon serves one dataset, not a root of named ones (stagefs -c CONF ROOT)");
		return -ENOENT;
	}
	if (ns[0] && !policy_ns_valid(ns)) {
		snprintf(why, len, "'%s' is not a Kubernetes namespace name", ns);
		return -EINVAL;
	}
	ds = datasets_lookup(fs, name);
	if (!ds) {
		snprintf(why, len, "no dataset '%s' on this node (stagefs.conf has no [dataset %s], or no such version)",
			 name, name);
		return -ENOENT;
	}
	pd = rules_of(fs, atomic_load(&fs->policy), ds, &gone);
	if (!gone && policy_ns_may_read(pd, ns))
		return 0;
	if (!ns[0])
		snprintf(why, len, "dataset '%s' is not open to all, and the pod's namespace is not known (the CSIDriver needs podInfoOnMount: true)",
			 ds->rule_name);
	else
		snprintf(why, len, "namespace '%s' may not read dataset '%s' (stagefs.conf: [dataset %s] allow)",
			 ns, ds->rule_name, ds->rule_name);
	log_limited(&rl, LOG_NOTICE, "access: %s", why);
	return -EACCES;
}

bool access_open_to_all(struct sfs *fs, const struct sfs_dataset *ds)
{
	bool gone;
	const struct policy_dataset *pd = rules_of(fs, atomic_load(&fs->policy), ds, &gone);

	return !fs->multi || (pd && pd->allow_all);
}

void access_req_cred(fuse_req_t req, bool groups, struct cred *cr)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t g[CRED_MAX_GROUPS];
	int n = -1;

	if (groups) {
		/* libfuse reads them from /proc: only when a rule needs them */
		n = fuse_req_getgroups(req, ARRAY_SIZE(g), g);
		if (n > (int)ARRAY_SIZE(g))
			n = ARRAY_SIZE(g);
		if (n < 0)
			n = 0;
	}
	cred_init(cr, ctx->uid, ctx->gid, ctx->pid, g, n);
}

int access_check_req(struct sfs *fs, fuse_req_t req, struct sfs_dataset *ds)
{
	struct cred cr;
	bool gone;

	access_req_cred(req, policy_needs_groups(rules_of(fs, atomic_load(&fs->policy),
							  ds, &gone)), &cr);
	return access_may_read(fs, &cr, ds) ? 0 : -EACCES;
}

int access_resolve(struct sfs *fs, const struct cred *cr, const char *rel,
		   struct sfs_dataset **ds, uint64_t *ino)
{
	char buf[PATH_MAX], *save = NULL, *comp;
	struct sfs_attr a;
	int ret;

	if (strlen(rel) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, rel);
	comp = strtok_r(buf, "/", &save);
	if (fs->multi) {
		if (!comp) {
			*ds = NULL;
			return 0;
		}
		*ds = datasets_lookup(fs, comp);
		if (!*ds)
			return -ENOENT;
		comp = strtok_r(NULL, "/", &save);
	} else {
		*ds = atomic_load(&fs->nds) ? fs->ds[0] : NULL;
		if (!*ds)
			return -ENOENT;
	}
	/* under a multi root a dataset the peer may not read does not exist, as in the mount */
	if (!access_may_read(fs, cr, *ds))
		return fs->multi ? -ENOENT : -EACCES;
	struct backend *be = (*ds)->be;

	*ino = SFS_ROOT_INO;
	ret = be->ops->getattr(be, *ino, &a);
	for (; !ret && comp; comp = strtok_r(NULL, "/", &save)) {
		if (!strcmp(comp, "."))
			continue;
		if (!strcmp(comp, ".."))
			return -EINVAL;	/* clients send normal paths */
		if (!S_ISDIR(a.mode))
			return S_ISLNK(a.mode) ? -ELOOP : -ENOTDIR;
		if (!cred_may_access(cr, a.uid, a.gid, a.mode, CRED_MAY_EXEC))
			return -EACCES;
		ret = be->ops->lookup(be, *ino, comp, &a);
		if (!ret) {
			if (be->ops->forget)
				be->ops->forget(be, a.ino, 1);
			*ino = a.ino;
		}
	}
	return ret;
}

int access_quota_text(struct sfs *fs, const struct cred *cr, char **out)
{
	bool all = !cr || cr->uid == 0;
	/* a pod's reader sees its namespace's line too */
	uint32_t mine = all ? 0 : access_owner(fs, cr->uid, cr->pid);
	struct cache_usage *u;
	size_t n;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int ret = cache_get_usage(fs->cache, &u, &n);

	if (ret)
		return ret;
	f = open_memstream(&buf, &len);
	if (!f) {
		free(u);
		return -ENOMEM;
	}
	fprintf(f, "# uid\tuser\tused_bytes\tlimit_bytes\tchunks\n");
	for (size_t i = 0; i < n; i++) {
		struct passwd pw, *pwp = NULL;
		char pbuf[4096];
		const char *name = "-";

		if (!all && u[i].uid != cr->uid && u[i].uid != mine)
			continue;	/* another user's usage is theirs to see */
		if (u[i].tenant[0])
			name = u[i].tenant;	/* "namespace:NAME" */
		else if (!getpwuid_r(u[i].uid, &pw, pbuf, sizeof(pbuf), &pwp) && pwp)
			name = pw.pw_name;
		if (u[i].limit_bytes == UINT64_MAX)
			fprintf(f, "%u\t%s\t%" PRIu64 "\tnone\t%" PRIu64 "\n", u[i].uid,
				name, u[i].used_bytes, u[i].chunks);
		else
			fprintf(f, "%u\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n",
				u[i].uid, name, u[i].used_bytes,
				u[i].limit_bytes, u[i].chunks);
	}
	free(u);
	if (fclose(f)) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	return (int)len;
}

/* ---- reload ---- */

static int hup_pipe[2] = { -1, -1 };
/* held through a reload; access_destroy() takes it for good */
static pthread_mutex_t reload_lock = PTHREAD_MUTEX_INITIALIZER;
/* the policies reloads replaced, freed at exit; protected by reload_lock */
static struct policy **retired;
static size_t nretired;

static void on_sighup(int sig)
{
	char c = (char)sig;

	/* async-signal-safe: just wake the reload thread */
	if (write(hup_pipe[1], &c, 1) < 0) {
		/* a reload is already pending */
	}
}

/*
 * Apply policy @np (just swapped in) to the datasets mounted: eviction
 * policies follow it; the kernel forgets the names of datasets under a
 * multi root (a name it cached while the dataset was open to all would let
 * a user now refused find it); and each dataset whose [dataset] section @np
 * no longer has is said to be root's only.  Returns how many such datasets.
 */
static size_t reload_apply_datasets(struct sfs *fs, const struct policy *np)
{
	size_t gone_n = 0;

	for (uint32_t i = 0; i < atomic_load(&fs->nds); i++) {
		struct sfs_dataset *ds = fs->ds[i];
		bool gone;
		const struct policy_dataset *pd = rules_of(fs, np, ds, &gone);

		atomic_store(&ds->nothrash, pd && pd->evict == EVICT_NOTHRASH);
		atomic_store(&ds->epoch_staging, pd && pd->epoch_staging >= 0 ?
			     pd->epoch_staging : (int)fs->cfg.epoch_staging);
		if (fs->multi && fs->se)	/* -ENOENT: not cached; nothing to do */
			fuse_lowlevel_notify_inval_entry(fs->se, FUSE_ROOT_ID, ds->name,
							 strlen(ds->name));
		if (!gone || ds->hidden)
			continue;	/* NAME@VERSION goes with NAME */
		gone_n++;
		log_warn("reload: dataset %s is mounted but no longer configured in %s: "
			 "root only until [dataset %s] is back or it is unmounted",
			 ds->name, fs->config_path, ds->name);
	}
	return gone_n;
}

static void reload(struct sfs *fs)
{
	struct sfs_config cfg;
	struct policy *np, *old = atomic_load(&fs->policy);
	char err[1024];
	size_t added = 0, gone_n;
	uint64_t evicted_bytes = 0;
	uint64_t evicted;

	if (!fs->config_path) {
		log_notice("SIGHUP: no config file (-c) to reload");
		return;
	}
	np = policy_create();
	if (!np)
		return;
	config_init(&cfg);
	policy_register(np);
	/*
	 * config_load() refuses a directory, an unreadable or an empty file
	 * (an empty file would drop every rule): the old rules stay.
	 */
	if (config_load(&cfg, fs->config_path, err, sizeof(err))) {
		log_err("reload refused: %s; the current configuration stays in force", err);
		policy_destroy(np);
		config_release(&cfg);
		policy_register(old);
		return;
	}
	peerd_reload(fs, &cfg);
	config_release(&cfg);
	atomic_store(&fs->policy, np);
	/* old policies stay allocated: a request may still be reading one */
	{
		struct policy **nr = realloc(retired, (nretired + 1) * sizeof(*nr));

		if (nr) {
			retired = nr;
			retired[nretired++] = old;
		}
	}
	gone_n = reload_apply_datasets(fs, np);
	for (size_t i = 0; fs->multi && i < np->nds; i++) {
		if (!np->ds[i].source || datasets_find(fs, np->ds[i].name))
			continue;
		if (datasets_add(fs, np->ds[i].name, np->ds[i].source, false, NULL,
				    err, sizeof(err)))
			log_err("reload: dataset %s: %s", np->ds[i].name, err);
		else
			added++;
	}
	cache_quota_changed(fs->cache);
	evicted = cache_enforce_quotas(fs->cache, &evicted_bytes);
	if (evicted)
		log_notice("reload: evicted %" PRIu64 " chunks (%" PRIu64
			   " bytes) of users over their new quota",
			   evicted, evicted_bytes);
	log_notice("reloaded %s: %zu quota rules, %zu datasets (%zu new, %zu no longer configured)",
		   fs->config_path, np->nquota, np->nds, added, gone_n);
}

static void *reload_thread(void *arg)
{
	struct sfs *fs = arg;
	char c;

	while (read(hup_pipe[0], &c, 1) > 0) {
		pthread_mutex_lock(&reload_lock);
		reload(fs);
		pthread_mutex_unlock(&reload_lock);
	}
	return NULL;
}

void access_destroy(struct sfs *fs)
{
	/* a reload still running ends first; none starts afterwards */
	pthread_mutex_lock(&reload_lock);
	for (size_t i = 0; i < nretired; i++)
		policy_destroy(retired[i]);
	free(retired);
	retired = NULL;
	nretired = 0;
	policy_destroy(atomic_exchange(&fs->policy, NULL));
}

int access_reload_start(struct sfs *fs)
{
	struct sigaction sa = { .sa_handler = on_sighup };
	pthread_t t;

	if (pipe2(hup_pipe, O_CLOEXEC) < 0)
		return -errno;
	fcntl(hup_pipe[1], F_SETFL, O_NONBLOCK);
	/* libfuse's handlers treat SIGHUP as "exit"; here it means reload */
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGHUP, &sa, NULL) < 0)
		return -errno;
	if (pthread_create(&t, NULL, reload_thread, fs))
		return -EAGAIN;
	pthread_detach(t);
	return 0;
}
