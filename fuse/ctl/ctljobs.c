/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctljobs: the control socket's job requests (ctlsock_i.h, docs/control.md).
 *
 * WARMUP starts a walk job (prefetch/job.c) for the peer: its PATH
 * lines are all read before the work starts, so progress lines can flow
 * while the client waits (a client never writes and waits for us at the
 * same time); the paths are resolved with the peer's credential
 * (access_resolve: dataset rules and search permission on every directory
 * passed) and the job walks and checks the rest.  HINT starts an
 * epoch-order hint session (prefetch/hints.c) over resolved files,
 * HINT_END ends one, STATUS reports the scheduler's queues.
 */
#include "ctlsock_i.h"

#include "log.h"
#include "policy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a WARMUP is any user's to send, as often as they like (issue 27) */
static struct log_ratelimit rl_warmup = LOG_RATELIMIT_INIT(10000, 10);

static int send_progress(struct ctlsock_client *cl, const char *status)
{
	struct pf_job_progress p;

	pf_job_get_progress(cl->job, &p);
	return ctl_sendf(cl->fd,
			 "%s files=%" PRIu64 " chunks=%" PRIu64 " bytes=%" PRIu64
			 " cached_before=%" PRIu64 " cached_before_bytes=%" PRIu64
			 " cached_files=%" PRIu64 " fetched=%" PRIu64 " fetched_bytes=%" PRIu64
			 " failed=%" PRIu64 " failed_files=%" PRIu64 " done_chunks=%" PRIu64
			 " done_bytes=%" PRIu64 " evicted=%" PRIu64 " evict_skipped=%" PRIu64
			 " ms=%" PRIu64 " walk_done=%d\n",
			 status, p.files, p.chunks, p.bytes, p.cached_before,
			 p.cached_before_bytes, p.cached_files, p.fetched, p.fetched_bytes,
			 p.failed, p.failed_files, p.done_chunks, p.done_bytes, p.evicted,
			 p.evict_skipped, p.elapsed_ms, p.walk_done);
}

/* Send the failures recorded since last time.  0 or -errno (peer gone). */
static int flush_failures(struct ctlsock_client *cl)
{
	struct pf_job_failure *f;
	size_t n;
	int ret = 0;

	pf_job_take_failures(cl->job, &f, &n);
	for (size_t i = 0; i < n; i++) {
		if (!ret)
			ret = ctlconn_send_fail(cl, f[i].path, f[i].err);
		free(f[i].path);
	}
	free(f);
	return ret;
}

/* The job's tick: progress once the request is complete, and liveness. */
static bool job_tick(void *arg)
{
	struct ctlsock_client *cl = arg;

	if (!ctlconn_tick(cl))
		return false;
	if (!cl->job_streaming || now_ms() - cl->last_progress_ms < cl->progress_ms)
		return true;
	cl->last_progress_ms = now_ms();
	return !flush_failures(cl) && !send_progress(cl, "PROGRESS");
}

/*
 * The roots of a WARMUP's @paths for the peer, in order, into a malloc'ed
 * array (*@out, *@nout): a path that does not resolve is a root with ->err
 * set; the root of a multi-dataset mount is every dataset it lists.  The
 * roots point into @paths and the datasets.  0 or -ENOMEM.
 */
static int paths_to_roots(struct ctlsock_client *cl, char **paths, size_t n,
			  struct pf_job_root **out, size_t *nout)
{
	struct sfs *fs = cl->cs->fs;
	struct pf_job_root *v = NULL;
	size_t nv = 0, cap = 0;

	for (size_t i = 0; i < n; i++) {
		struct sfs_dataset *ds = NULL;
		uint64_t ino = 0;
		int ret = access_resolve(fs, &cl->cred, paths[i], &ds, &ino);
		/* the root of a multi-dataset mount stands for each dataset */
		uint32_t nds = !ret && !ds ? atomic_load(&fs->nds) : 1;

		for (uint32_t k = 0; k < nds; k++) {
			struct sfs_dataset *d = ds;
			struct pf_job_root r;

			if (ret) {
				r = (struct pf_job_root){ .path = paths[i][0] ? paths[i] : ".",
							  .err = -ret };
			} else if (d) {
				r = (struct pf_job_root){ .be = d->be, .ino = ino, .path = paths[i],
							  .nothrash = atomic_load(&d->nothrash) };
			} else {
				/* the root of a multi-dataset mount: every dataset it lists */
				d = fs->ds[k];
				if (d->hidden || !access_may_read(fs, &cl->cred, d))
					continue;
				r = (struct pf_job_root){ .be = d->be, .ino = SFS_ROOT_INO,
							  .path = d->name,
							  .nothrash = atomic_load(&d->nothrash) };
			}
			if (nv == cap) {
				struct pf_job_root *nr = realloc(v, (cap = cap ? cap * 2 : 16) *
								 sizeof(*nr));

				if (!nr) {
					free(v);
					return -ENOMEM;
				}
				v = nr;
			}
			v[nv++] = r;
		}
	}
	*out = v;
	*nout = nv;
	return 0;
}

int ctljobs_warmup(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	struct sfs *fs = cl->cs->fs;
	struct pf_job_opts o = {
		.cred = cl->cred,
		.tick = job_tick,
		.tick_arg = cl,
		.tick_ms = 100,
	};
	const char *mode = ctl_get(m, "mode"), *shard = ctl_get(m, "shard");
	const char *ns = ctl_get(m, "namespace");
	struct pf_job_root *roots;
	size_t nroots;
	uint64_t v;
	char **paths;
	ssize_t n;
	int ret;

	if (!mode || !strcmp(mode, "fetch"))
		o.mode = PF_JOB_FETCH;
	else if (!strcmp(mode, "check"))
		o.mode = PF_JOB_CHECK;
	else if (!strcmp(mode, "evict"))
		o.mode = PF_JOB_EVICT;
	else
		return ctlconn_send_err(cl, EINVAL, "mode must be fetch, check or evict");
	if (shard && (sscanf(shard, "%u/%u", &o.shard_i, &o.shard_n) != 2 ||
		      !o.shard_n || o.shard_i >= o.shard_n))
		return ctlconn_send_err(cl, EINVAL, "shard must be I/N with 0 <= I < N");
	if (!ns) {
		o.owner = access_owner(fs, cl->cred.uid, cl->cred.pid);	/* a pod's: its namespace */
	} else {
		/*
		 * Charged to a namespace (the CSI plugin's warmup for a pod):
		 * root's to ask, as POD is; with no quota there, to root.
		 */
		if (cl->cred.uid != 0)
			return ctlconn_send_err(cl, EPERM, "only root may charge a warmup to a namespace");
		if (!policy_ns_valid(ns))
			return ctlconn_send_err(cl, EINVAL, "namespace: not a Kubernetes namespace name");
		if (!policy_ns_has_quota(atomic_load(&fs->policy), ns)) {
			if (ctl_get(m, "quota_only"))	/* the plugin's default */
				return ctlconn_send_err(cl, EPERM,
							"namespace has no cache quota ([quota] namespace:NAME): its warmup would be charged to no one");
		} else if ((ret = access_ns_tenant(fs, ns, &o.owner))) {
			return ctlconn_send_err(cl, -ret, "cannot record the namespace's cache account");
		}
	}
	if (!ctl_get_u64(m, "threads", &v))
		o.max_inflight = (uint32_t)MIN(v, 4096);
	cl->progress_ms = 500;
	if (!ctl_get_u64(m, "progress_ms", &v))
		cl->progress_ms = (uint32_t)MAX(MIN(v, 60000), 50);

	n = ctlconn_read_paths(cl, &paths);
	if (n < 0)
		return (int)n;
	if (!fs->pf) {
		ctlconn_free_paths(paths, (size_t)n);
		return ctlconn_send_err(cl, ENOTSUP, "prefetch is not running");
	}
	if (paths_to_roots(cl, paths, (size_t)n, &roots, &nroots)) {
		ctlconn_free_paths(paths, (size_t)n);
		return ctlconn_send_err(cl, ENOMEM, "out of memory");
	}
	ret = pf_job_create(fs->pf, &o, &cl->job);
	if (ret) {
		free(roots);
		ctlconn_free_paths(paths, (size_t)n);
		return ctlconn_send_err(cl, -ret, "cannot start the job");
	}
	cl->job_streaming = true;
	cl->last_progress_ms = 0;
	log_limited(&rl_warmup, LOG_INFO, "control: uid %u pid %d: %s of %zd path(s)%s%s%s%s",
		    cl->cred.uid, (int)cl->cred.pid, mode ? mode : "fetch", n,
		    shard ? ", shard " : "", shard ? shard : "",
		    ns ? ", for namespace " : "", ns ? ns : "");
	pf_job_run(cl->job, roots, nroots);
	free(roots);
	ctlconn_free_paths(paths, (size_t)n);
	ret = 0;
	while (!pf_job_wait(cl->job, cl->progress_ms)) {
		if (!job_tick(cl)) {
			ret = -ECONNRESET;
			break;
		}
	}
	if (!ret) {
		ret = flush_failures(cl);
		if (!ret)
			ret = send_progress(cl, "DONE");
	}
	pf_job_destroy(cl->job);
	cl->job = NULL;
	cl->job_streaming = false;
	return ret;
}

int ctljobs_hint(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	struct sfs *fs = cl->cs->fs;
	struct pf_hint_opts o = {
		.uid = cl->cred.uid,
		.owner = access_owner(cl->cs->fs, cl->cred.uid, cl->cred.pid),	/* a pod's: its namespace */
		.scope = PF_SCOPE_SID,
	};
	const char *scope = ctl_get(m, "scope");
	struct pf_hint_file *files;
	size_t nf = 0, skipped = 0;
	uint64_t v, id;
	char **paths;
	ssize_t n;
	int ret = 0;

	if (scope && !strcmp(scope, "pgid"))
		o.scope = PF_SCOPE_PGID;
	else if (scope && !strcmp(scope, "uid"))
		o.scope = PF_SCOPE_UID;
	else if (scope && strcmp(scope, "sid"))
		return ctlconn_send_err(cl, EINVAL, "scope must be sid, pgid or uid");
	o.scope_id = o.scope == PF_SCOPE_PGID ? getpgid(cl->cred.pid) : getsid(cl->cred.pid);
	if (!ctl_get_u64(m, "window", &v))
		o.window = (uint32_t)MIN(v, 1u << 20);
	if (!ctl_get_u64(m, "window_bytes", &v))
		o.window_bytes = v;

	n = ctlconn_read_paths(cl, &paths);
	if (n < 0)
		return (int)n;
	if (!fs->pf) {
		ctlconn_free_paths(paths, (size_t)n);
		return ctlconn_send_err(cl, ENOTSUP, "prefetch is not running");
	}
	files = calloc((size_t)n + 1, sizeof(*files));
	if (!files) {
		ctlconn_free_paths(paths, (size_t)n);
		return ctlconn_send_err(cl, ENOMEM, "out of memory");
	}
	for (ssize_t i = 0; i < n; i++) {
		struct sfs_dataset *ds;
		uint64_t ino;
		int r = access_resolve(fs, &cl->cred, paths[i], &ds, &ino);

		if (!r && !ds)
			r = -EISDIR;
		if (r) {
			/* the first few are named; the count is exact */
			if (skipped++ < 20 && !ret)
				ret = ctlconn_send_fail(cl, paths[i], -r);
			continue;
		}
		files[nf++] = (struct pf_hint_file){
			.be = ds->be,
			.bino = ino,
			.key = sfs_ino(fs, ds, ino),
			.nothrash = atomic_load(&ds->nothrash),
		};
	}
	ctlconn_free_paths(paths, (size_t)n);
	if (ret) {
		free(files);
		return ret;
	}
	if (!nf) {
		free(files);
		return ctlconn_send_err(cl, ENOENT, "no hinted path could be resolved");
	}
	ret = pf_hint_start(fs->pf, &o, files, nf, &id);
	if (ret)
		return ctlconn_send_err(cl, -ret, "cannot start the hint session");
	return ctl_sendf(cl->fd, "OK session=%" PRIu64 " files=%zu skipped=%zu window=%u\n",
			 id, nf, skipped, o.window ? o.window : fs->cfg.hint_window);
}

int ctljobs_hint_end(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	uint64_t id;
	int ret;

	if (ctl_get_u64(m, "session", &id))
		return ctlconn_send_err(cl, EINVAL, "HINT_END needs session=ID");
	ret = pf_hint_end(cl->cs->fs->pf, id, cl->cred.uid);
	if (ret)
		return ctlconn_send_err(cl, -ret, ret == -EPERM ? "not your session" : "no such session");
	return ctl_sendf(cl->fd, "OK\n");
}

int ctljobs_status(struct ctlsock_client *cl)
{
	struct pf_stats st;

	pf_get_stats(cl->cs->fs->pf, &st);
	return ctl_sendf(cl->fd,
			 "OK queued=%" PRIu64 " inflight=%" PRIu64 " demand_inflight=%" PRIu64
			 " warmup_jobs=%" PRIu64 " hint_sessions=%" PRIu64
			 " readahead_fetches=%" PRIu64 " hint_fetches=%" PRIu64
			 " warmup_fetches=%" PRIu64 " demand_fetches=%" PRIu64 "\n",
			 st.queued, st.inflight, st.demand_inflight, st.warmup_jobs,
			 st.hint_sessions, st.readahead_fetches, st.hint_fetches,
			 st.warmup_fetches, st.demand_fetches);
}
