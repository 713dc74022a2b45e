/*
 * ctlsock: see ctlsock.h; the protocol is docs/control.md.
 *
 * Requests name paths relative to the mount root, as the client saw them
 * (ctl_find_mount).  They are resolved here with backend lookups, checking
 * on the way what a read through the mount would check: the dataset's
 * access rules for the peer (sfs_may_read) and search permission on every
 * directory passed.  The walk (prefetch/warmup.c) checks the rest.
 *
 * A WARMUP's PATH lines are all read before the work starts, so progress
 * lines can flow while the client waits: a client never writes and waits
 * for us at the same time.
 *
 * CACHE_FD hands a client (the GPU client library) an O_RDONLY descriptor
 * of a file's cache file, after the same checks, once every chunk is
 * present and verified.  The file stays pinned (no chunk evicted) while
 * the connection holds the handle: until CACHE_FD_CLOSE or the connection
 * ends, whichever comes first.  A file that cannot be cached whole (quota,
 * a full cache, no-thrash, a backend error) is refused, never handed over
 * with holes: the client then reads through the mount.
 */
#include "ctlsock.h"

#include "cred.h"
#include "ctlproto.h"
#include "gpuid.h"
#include "log.h"
#include "prefetch/prefetch.h"
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CLIENTS	256
#define HELLO_TIMEOUT_MS 30000
#define MAX_HANDLES	4096	/* cache files one connection may hold pinned */

struct ctl_client;

struct sfs_ctlsock {
	struct sfs *fs;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int lfd;
	int wake[2];			/* stop the accept thread */
	pthread_t accept_thr;
	pthread_mutex_t lock;
	pthread_cond_t gone;		/* a client thread ended */
	struct ctl_client *clients;	/* protected by lock */
	unsigned nclients;		/* protected by lock */
	bool stopping;			/* protected by lock */
};

struct ctl_client {
	struct ctl_client *next, *prev;	/* protected by cs->lock */
	struct sfs_ctlsock *cs;
	int fd;
	struct cred cred;
	struct ctl_conn conn;
	/* a running WARMUP: where its progress goes */
	struct pf_job *job;
	bool job_streaming;		/* END seen: send PROGRESS on ticks */
	uint32_t progress_ms;
	uint64_t last_progress_ms;
	/* cache files handed over by CACHE_FD: pinned until closed */
	struct ctl_handle *handles;
	size_t nhandles, caphandles;
	uint64_t next_handle;
};

struct ctl_handle {
	uint64_t id;
	struct cfile *cf;		/* pinned (the pin holds its reference) */
};

/* ---- replies ---- */

static int send_err(struct ctl_client *cl, int err, const char *msg)
{
	char esc[1024];

	ctl_escape(msg, esc, sizeof(esc));
	return ctl_sendf(cl->fd, "ERR code=%s msg=%s\n", ctl_errname(err), esc);
}

static int send_fail(struct ctl_client *cl, const char *path, int err)
{
	char esc[PATH_MAX * 3 + 1], msg[256];

	ctl_escape(path, esc, sizeof(esc));
	/* ENOSPC from a fill is the cache's room, not (only) the disk's */
	ctl_escape(err == ENOSPC ? "no room in the cache (its cache_size, cache_free_ratio "
		   "or the user's quota: see limit_bytes and users in .stagefs/stats, and the "
		   "daemon's log)" : strerror(err), msg, sizeof(msg));
	return ctl_sendf(cl->fd, "FAIL path=%s code=%s msg=%s\n", esc, ctl_errname(err), msg);
}

static int send_progress(struct ctl_client *cl, const char *status)
{
	struct pf_job_progress p;

	pf_job_get_progress(cl->job, &p);
	return ctl_sendf(cl->fd,
			 "%s files=%" PRIu64 " chunks=%" PRIu64 " bytes=%" PRIu64
			 " cached_before=%" PRIu64 " cached_before_bytes=%" PRIu64
			 " cached_files=%" PRIu64 " fetched=%" PRIu64 " fetched_bytes=%" PRIu64
			 " failed=%" PRIu64 " failed_files=%" PRIu64 " done_chunks=%" PRIu64
			 " done_bytes=%" PRIu64 " evicted=%" PRIu64 " ms=%" PRIu64
			 " walk_done=%d\n",
			 status, p.files, p.chunks, p.bytes, p.cached_before,
			 p.cached_before_bytes, p.cached_files, p.fetched, p.fetched_bytes,
			 p.failed, p.failed_files, p.done_chunks, p.done_bytes, p.evicted,
			 p.elapsed_ms, p.walk_done);
}

/* Send the failures recorded since last time.  0 or -errno (peer gone). */
static int flush_failures(struct ctl_client *cl)
{
	struct pf_job_failure *f;
	size_t n;
	int ret = 0;

	pf_job_take_failures(cl->job, &f, &n);
	for (size_t i = 0; i < n; i++) {
		if (!ret)
			ret = send_fail(cl, f[i].path, f[i].err);
		free(f[i].path);
	}
	free(f);
	return ret;
}

static bool peer_alive(struct ctl_client *cl)
{
	struct pollfd p = { .fd = cl->fd, .events = POLLRDHUP };

	return !(poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

/* The job's tick: progress once the request is complete, and liveness. */
static bool job_tick(void *arg)
{
	struct ctl_client *cl = arg;
	bool stopping;

	pthread_mutex_lock(&cl->cs->lock);
	stopping = cl->cs->stopping;
	pthread_mutex_unlock(&cl->cs->lock);
	if (stopping || !peer_alive(cl))
		return false;
	if (!cl->job_streaming || now_ms() - cl->last_progress_ms < cl->progress_ms)
		return true;
	cl->last_progress_ms = now_ms();
	return !flush_failures(cl) && !send_progress(cl, "PROGRESS");
}

/* ---- paths ---- */

/*
 * Resolve @rel (relative to the mount root, "" for the root) for @cr.
 * Sets *@ds (NULL for the root of a multi-dataset mount) and *@ino (the
 * backend inode).  Returns 0 or -errno.
 */
static int resolve(struct sfs *fs, const struct cred *cr, const char *rel,
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
		*ds = sfs_dataset_lookup(fs, comp);
		if (!*ds)
			return -ENOENT;
		comp = strtok_r(NULL, "/", &save);
	} else {
		*ds = atomic_load(&fs->nds) ? fs->ds[0] : NULL;
		if (!*ds)
			return -ENOENT;
	}
	if (!sfs_may_read(fs, cr, *ds))
		return -EACCES;
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

/*
 * Read PATH lines up to END into a malloc'ed array of strings.  Returns
 * the count, or -errno (the connection is unusable or the request bad:
 * then ERR was sent where possible).
 */
static ssize_t read_paths(struct ctl_client *cl, char ***out)
{
	char **v = NULL;
	size_t n = 0, cap = 0;

	for (;;) {
		struct ctl_msg m;
		char *line;
		int r = ctl_read_line(&cl->conn, &line, -1);

		if (r < 0)
			goto fail;
		if (ctl_parse(line, &m)) {
			send_err(cl, EINVAL, "unreadable line");
			r = -EINVAL;
			goto fail;
		}
		if (!strcmp(m.argv[0], "END"))
			break;
		if (strcmp(m.argv[0], "PATH") || m.argc > 2) {
			send_err(cl, EINVAL, "expected PATH <path> or END");
			r = -EINVAL;
			goto fail;
		}
		if (n == cap) {
			char **nv = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*nv));

			if (!nv) {
				r = -ENOMEM;
				goto fail;
			}
			v = nv;
		}
		v[n] = strdup(m.argc > 1 ? m.argv[1] : "");
		if (!v[n]) {
			r = -ENOMEM;
			goto fail;
		}
		n++;
		continue;
fail:
		while (n)
			free(v[--n]);
		free(v);
		return r;
	}
	*out = v;
	return (ssize_t)n;
}

static void free_paths(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* ---- requests ---- */

/*
 * The roots of a WARMUP's @paths for the peer, in order, into a malloc'ed
 * array (*@out, *@nout): a path that does not resolve is a root with ->err
 * set; the root of a multi-dataset mount is every dataset it lists.  The
 * roots point into @paths and the datasets.  0 or -ENOMEM.
 */
static int paths_to_roots(struct ctl_client *cl, char **paths, size_t n,
			  struct pf_job_root **out, size_t *nout)
{
	struct sfs *fs = cl->cs->fs;
	struct pf_job_root *v = NULL;
	size_t nv = 0, cap = 0;

	for (size_t i = 0; i < n; i++) {
		struct sfs_dataset *ds;
		uint64_t ino;
		int ret = resolve(fs, &cl->cred, paths[i], &ds, &ino);
		uint32_t k = 0, nds = ds || ret ? 1 : atomic_load(&fs->nds);

		for (; k < nds; k++) {
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
				if (d->hidden || !sfs_may_read(fs, &cl->cred, d))
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

static int handle_warmup(struct ctl_client *cl, const struct ctl_msg *m)
{
	struct sfs *fs = cl->cs->fs;
	struct pf_job_opts o = {
		.cred = cl->cred,
		.tick = job_tick,
		.tick_arg = cl,
		.tick_ms = 100,
	};
	const char *mode = ctl_get(m, "mode"), *shard = ctl_get(m, "shard");
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
		return send_err(cl, EINVAL, "mode must be fetch, check or evict");
	if (shard && (sscanf(shard, "%u/%u", &o.shard_i, &o.shard_n) != 2 ||
		      !o.shard_n || o.shard_i >= o.shard_n))
		return send_err(cl, EINVAL, "shard must be I/N with 0 <= I < N");
	if (!ctl_get_u64(m, "threads", &v))
		o.max_inflight = (uint32_t)MIN(v, 4096);
	cl->progress_ms = 500;
	if (!ctl_get_u64(m, "progress_ms", &v))
		cl->progress_ms = (uint32_t)MAX(MIN(v, 60000), 50);

	n = read_paths(cl, &paths);
	if (n < 0)
		return (int)n;
	if (!fs->pf) {
		free_paths(paths, (size_t)n);
		return send_err(cl, ENOTSUP, "prefetch is not running");
	}
	if (paths_to_roots(cl, paths, (size_t)n, &roots, &nroots)) {
		free_paths(paths, (size_t)n);
		return send_err(cl, ENOMEM, "out of memory");
	}
	ret = pf_job_create(fs->pf, &o, &cl->job);
	if (ret) {
		free(roots);
		free_paths(paths, (size_t)n);
		return send_err(cl, -ret, "cannot start the job");
	}
	cl->job_streaming = true;
	cl->last_progress_ms = 0;
	log_info("control: uid %u pid %d: %s of %zd path(s)%s%s", cl->cred.uid,
		 (int)cl->cred.pid, mode ? mode : "fetch", n, shard ? ", shard " : "",
		 shard ? shard : "");
	pf_job_run(cl->job, roots, nroots);
	free(roots);
	free_paths(paths, (size_t)n);
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

static int handle_hint(struct ctl_client *cl, const struct ctl_msg *m)
{
	struct sfs *fs = cl->cs->fs;
	struct pf_hint_opts o = { .uid = cl->cred.uid, .scope = PF_SCOPE_SID };
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
		return send_err(cl, EINVAL, "scope must be sid, pgid or uid");
	o.scope_id = o.scope == PF_SCOPE_PGID ? getpgid(cl->cred.pid) : getsid(cl->cred.pid);
	if (!ctl_get_u64(m, "window", &v))
		o.window = (uint32_t)MIN(v, 1u << 20);
	if (!ctl_get_u64(m, "window_bytes", &v))
		o.window_bytes = v;

	n = read_paths(cl, &paths);
	if (n < 0)
		return (int)n;
	if (!fs->pf) {
		free_paths(paths, (size_t)n);
		return send_err(cl, ENOTSUP, "prefetch is not running");
	}
	files = calloc((size_t)n + 1, sizeof(*files));
	if (!files) {
		free_paths(paths, (size_t)n);
		return send_err(cl, ENOMEM, "out of memory");
	}
	for (ssize_t i = 0; i < n; i++) {
		struct sfs_dataset *ds;
		uint64_t ino;
		int r = resolve(fs, &cl->cred, paths[i], &ds, &ino);

		if (!r && !ds)
			r = -EISDIR;
		if (r) {
			/* the first few are named; the count is exact */
			if (skipped++ < 20 && !ret)
				ret = send_fail(cl, paths[i], -r);
			continue;
		}
		files[nf++] = (struct pf_hint_file){
			.be = ds->be,
			.bino = ino,
			.key = sfs_ino(fs, ds, ino),
			.nothrash = atomic_load(&ds->nothrash),
		};
	}
	free_paths(paths, (size_t)n);
	if (ret) {
		free(files);
		return ret;
	}
	if (!nf) {
		free(files);
		return send_err(cl, ENOENT, "no hinted path could be resolved");
	}
	ret = pf_hint_start(fs->pf, &o, files, nf, &id);
	if (ret)
		return send_err(cl, -ret, "cannot start the hint session");
	return ctl_sendf(cl->fd, "OK session=%" PRIu64 " files=%zu skipped=%zu window=%u\n",
			 id, nf, skipped, o.window ? o.window : fs->cfg.hint_window);
}

static int handle_hint_end(struct ctl_client *cl, const struct ctl_msg *m)
{
	uint64_t id;
	int ret;

	if (ctl_get_u64(m, "session", &id))
		return send_err(cl, EINVAL, "HINT_END needs session=ID");
	ret = pf_hint_end(cl->cs->fs->pf, id, cl->cred.uid);
	if (ret)
		return send_err(cl, -ret, ret == -EPERM ? "not your session" : "no such session");
	return ctl_sendf(cl->fd, "OK\n");
}

static int handle_status(struct ctl_client *cl)
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

/*
 * The node index of the GPU at PCI address @pci (src/gpuid.h), or -errno.
 * Looked up in sysfs once per address: GPUs do not come and go under a
 * running daemon, and every client reports every second.
 */
static int gpu_index_of(const char *pci)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static struct {
		char bus[GPUID_BUS_LEN];
		int idx;
	} known[64];			/* protected by lock */
	static unsigned nknown;		/* protected by lock */
	char bus[GPUID_BUS_LEN];
	int idx;

	if (gpuid_normalize(pci, bus))
		return -EINVAL;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nknown; i++) {
		if (!strcmp(known[i].bus, bus)) {
			idx = known[i].idx;
			pthread_mutex_unlock(&lock);
			return idx;
		}
	}
	pthread_mutex_unlock(&lock);
	idx = gpuid_index(GPUID_SYSFS, bus);
	pthread_mutex_lock(&lock);
	if (nknown < ARRAY_SIZE(known)) {
		strcpy(known[nknown].bus, bus);
		known[nknown++].idx = idx;
	}
	pthread_mutex_unlock(&lock);
	return idx;
}

/*
 * The GPU client library reports bytes it copied to a GPU (src/stats.h).
 * With pci=, the device's PCI address, the row is the node's index of that
 * GPU (src/gpuid.h): the client's ordinal depends on its
 * CUDA_VISIBLE_DEVICES.
 */
static int handle_gpu_bytes(struct ctl_client *cl, const struct ctl_msg *m)
{
	const char *pci = ctl_get(m, "pci");
	uint64_t gpu, bytes;
	int ret;

	if (ctl_get_u64(m, "gpu", &gpu) || ctl_get_u64(m, "bytes", &bytes) || gpu > 65535)
		return send_err(cl, EINVAL, "GPU_BYTES needs gpu=N (0-65535) bytes=N");
	if (pci) {
		int idx = gpu_index_of(pci);

		if (idx >= 0)
			gpu = (uint64_t)idx;
		else
			log_debug("control: GPU %s: %s: counted as the client's GPU %" PRIu64,
				  pci, strerror(-idx), gpu);
	}
	/* the uid is the peer's: a client cannot charge another user */
	ret = stats_gpu_account(cl->cs->fs->stats, cl->cred.pid, cl->cred.uid,
				ctl_get(m, "job"), (int)gpu, bytes);
	if (ret)
		return send_err(cl, -ret, "cannot account the bytes");
	return ctl_sendf(cl->fd, "OK\n");
}

/* ---- handing cache files to the client library ---- */

/* A CACHE_FD's fetches: go on while the daemon runs and the client waits. */
static bool peer_tick(void *arg)
{
	struct ctl_client *cl = arg;
	bool stopping;

	pthread_mutex_lock(&cl->cs->lock);
	stopping = cl->cs->stopping;
	pthread_mutex_unlock(&cl->cs->lock);
	return !stopping && peer_alive(cl);
}

/*
 * Bring every missing chunk of file @ino of @ds in: a warmup of that one
 * file for the peer (charged to its uid, scheduled and rate-capped like
 * `stagefs warmup`).  *@fetched is the bytes it brought in.  Returns 0,
 * the errno of the first chunk that could not be fetched or kept
 * (-ENOSPC: the cache would not keep it), or -ECONNRESET when the peer
 * left or the daemon stops.
 */
static int stage_file(struct ctl_client *cl, struct sfs_dataset *ds, uint64_t ino,
		      const char *path, uint64_t *fetched)
{
	struct pf_job_opts o = {
		.mode = PF_JOB_FETCH,
		.cred = cl->cred,
		.tick = peer_tick,
		.tick_arg = cl,
		.tick_ms = 100,
	};
	struct pf_job_root root = {
		.be = ds->be,
		.ino = ino,
		.path = path,
		.nothrash = atomic_load(&ds->nothrash),
	};
	struct pf_job_failure *fails;
	struct pf_job_progress p;
	struct pf_job *j;
	size_t nfails;
	int ret;

	ret = pf_job_create(cl->cs->fs->pf, &o, &j);
	if (ret)
		return ret;
	ret = pf_job_run(j, &root, 1);
	while (!ret && !pf_job_wait(j, 100)) {
		if (!peer_tick(cl))
			ret = -ECONNRESET;
	}
	if (ret == -ECANCELED)
		ret = -ECONNRESET;
	pf_job_get_progress(j, &p);
	pf_job_take_failures(j, &fails, &nfails);
	if (!ret && nfails)
		ret = -fails[0].err;
	for (size_t i = 0; i < nfails; i++)
		free(fails[i].path);
	free(fails);
	pf_job_destroy(j);
	*fetched = p.fetched_bytes;
	return ret;
}

static int handle_add(struct ctl_client *cl, struct cfile *cf, uint64_t *id)
{
	if (cl->nhandles == cl->caphandles) {
		size_t cap = cl->caphandles ? cl->caphandles * 2 : 16;
		struct ctl_handle *nh = realloc(cl->handles, cap * sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		cl->handles = nh;
		cl->caphandles = cap;
	}
	*id = ++cl->next_handle;
	cl->handles[cl->nhandles++] = (struct ctl_handle){ .id = *id, .cf = cf };
	return 0;
}

/* Unpin and forget handle @id.  0 or -ENOENT. */
static int handle_drop(struct ctl_client *cl, uint64_t id)
{
	for (size_t i = 0; i < cl->nhandles; i++) {
		if (cl->handles[i].id != id)
			continue;
		cache_file_unpin(cl->cs->fs->cache, cl->handles[i].cf);
		cl->handles[i] = cl->handles[--cl->nhandles];
		return 0;
	}
	return -ENOENT;
}

/* The connection ends: every file it held is unpinned. */
static void handles_release(struct ctl_client *cl)
{
	for (size_t i = 0; i < cl->nhandles; i++)
		cache_file_unpin(cl->cs->fs->cache, cl->handles[i].cf);
	free(cl->handles);
	cl->handles = NULL;
	cl->nhandles = cl->caphandles = 0;
}

static int send_refusal(struct ctl_client *cl, const char *path, int err)
{
	char msg[PATH_MAX + 256];
	const char *why;

	switch (err) {
	case ENOSPC:
	case EDQUOT:
	case ENODATA:
		why = "cannot be cached whole (quota, cache full or no-thrash policy): "
		      "read it through the mount";
		break;
	default:
		why = strerror(err);
		break;
	}
	snprintf(msg, sizeof(msg), "%s: %s", path[0] ? path : ".", why);
	return send_err(cl, err, msg);
}

/*
 * CACHE_FD path=P: check P for the peer as a read through the mount would
 * be checked, stage it whole, verify it, pin it, and send an O_RDONLY
 * descriptor of its cache file with the reply.
 */
static int handle_cache_fd(struct ctl_client *cl, const struct ctl_msg *m)
{
	struct sfs *fs = cl->cs->fs;
	const char *path = ctl_get(m, "path");
	char cpath[PATH_MAX];
	struct sfs_dataset *ds;
	uint64_t ino, id, fetched = 0;
	struct sfs_attr a;
	struct cfile *cf;
	int fd, ret;

	if (!path)
		return send_err(cl, EINVAL, "CACHE_FD needs path=P");
	if (cl->nhandles >= MAX_HANDLES)
		return send_refusal(cl, path, EMFILE);
	ret = resolve(fs, &cl->cred, path, &ds, &ino);
	if (!ret && !ds)
		ret = -EISDIR;
	if (!ret)
		ret = ds->be->ops->getattr(ds->be, ino, &a);
	if (!ret && !S_ISREG(a.mode))
		ret = S_ISDIR(a.mode) ? -EISDIR : -EINVAL;
	if (!ret && !cred_may_access(&cl->cred, a.uid, a.gid, a.mode, CRED_MAY_READ))
		ret = -EACCES;
	if (ret)
		return send_refusal(cl, path, -ret);
	/*
	 * The client opens the file this way instead of through the mount:
	 * hinted readers advance now, so prefetching moves on while this file
	 * is staged; the open is counted once it is handed over.
	 */
	pf_hint_open(fs->pf, sfs_ino(fs, ds, ino), cl->cred.uid, cl->cred.pid);
	if (!a.size) {	/* nothing to read, and maybe no cache file at all */
		stats_client_open(fs->stats, cl->cred.pid, cl->cred.uid);
		return ctl_sendf(cl->fd, "OK handle=0 size=0 ino=%" PRIu64 " chunk_size=%u"
				 " fetched=0 fd=0\n", sfs_ino(fs, ds, ino), ds->be->chunk_size);
	}

	ret = cache_file_get(fs->cache, &a.content, a.size, ds->be->chunk_size, &cf);
	if (ret)
		return send_refusal(cl, path, -ret);
	/* pinned before the fetches: they must not evict each other's chunks */
	cache_file_pin(fs->cache, cf);
	cache_file_put(fs->cache, cf);
	ret = stage_file(cl, ds, ino, path, &fetched);
	if (ret == -ECONNRESET)
		goto out_unpin;
	if (!ret)
		ret = cache_file_verify(fs->cache, cf);
	if (!ret)
		ret = cache_file_path(fs->cache, cf, cpath, sizeof(cpath));
	if (!ret) {
		/* read-only: the holder can never change what others are served */
		fd = open(cpath, O_RDONLY | O_CLOEXEC | O_NOATIME);
		if (fd < 0 && errno == EPERM)	/* O_NOATIME: not the file's owner */
			fd = open(cpath, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			ret = -errno;
	}
	if (!ret) {
		ret = handle_add(cl, cf, &id);
		if (ret)
			close(fd);
	}
	if (ret) {
		log_debug("control: uid %u: no cache file for %s: %s", cl->cred.uid, path,
			  strerror(-ret));
		cache_file_unpin(fs->cache, cf);
		return send_refusal(cl, path, -ret);
	}
	ret = ctl_sendf_fd(cl->fd, fd,
			   "OK handle=%" PRIu64 " size=%" PRIu64 " ino=%" PRIu64 " chunk_size=%u"
			   " fetched=%" PRIu64 " fd=1\n", id, a.size, sfs_ino(fs, ds, ino),
			   ds->be->chunk_size, fetched);
	close(fd);
	if (ret)
		handle_drop(cl, id);	/* the peer is gone: so is its descriptor */
	else
		stats_client_open(fs->stats, cl->cred.pid, cl->cred.uid);
	return ret;

out_unpin:
	cache_file_unpin(fs->cache, cf);
	return ret;
}

static int handle_cache_fd_close(struct ctl_client *cl, const struct ctl_msg *m)
{
	uint64_t id;

	if (ctl_get_u64(m, "handle", &id))
		return send_err(cl, EINVAL, "CACHE_FD_CLOSE needs handle=N");
	if (handle_drop(cl, id))
		return send_err(cl, ENOENT, "no such handle on this connection");
	return ctl_sendf(cl->fd, "OK\n");
}

/* The client library read bytes from cache files itself (src/stats.h). */
static int handle_client_read(struct ctl_client *cl, const struct ctl_msg *m)
{
	uint64_t bytes, files = 0;
	int ret;

	if (ctl_get_u64(m, "bytes", &bytes) ||
	    (ctl_get(m, "files") && ctl_get_u64(m, "files", &files)))
		return send_err(cl, EINVAL, "CLIENT_READ needs bytes=N [files=N] [job=J]");
	ret = stats_client_account(cl->cs->fs->stats, cl->cred.pid, cl->cred.uid,
				   ctl_get(m, "job"), bytes, files);
	if (ret)
		return send_err(cl, -ret, "cannot account the bytes");
	return ctl_sendf(cl->fd, "OK\n");
}

/* Serve one request.  Returns 0 to go on, < 0 to close the connection. */
static int dispatch(struct ctl_client *cl, struct ctl_msg *m)
{
	const char *verb = m->argv[0];

	if (!strcmp(verb, "PING"))
		return ctl_sendf(cl->fd, "OK\n");
	if (!strcmp(verb, "WARMUP"))
		return handle_warmup(cl, m);
	if (!strcmp(verb, "HINT"))
		return handle_hint(cl, m);
	if (!strcmp(verb, "HINT_END"))
		return handle_hint_end(cl, m);
	if (!strcmp(verb, "STATUS"))
		return handle_status(cl);
	if (!strcmp(verb, "GPU_BYTES"))
		return handle_gpu_bytes(cl, m);
	if (!strcmp(verb, "CACHE_FD"))
		return handle_cache_fd(cl, m);
	if (!strcmp(verb, "CACHE_FD_CLOSE"))
		return handle_cache_fd_close(cl, m);
	if (!strcmp(verb, "CLIENT_READ"))
		return handle_client_read(cl, m);
	if (!strcmp(verb, "BYE"))
		return -ECONNRESET;
	return send_err(cl, EINVAL, "unknown request");
}

static int hello(struct ctl_client *cl)
{
	struct ctl_msg m;
	uint64_t ver = 0;
	char *line;
	int r = ctl_read_line(&cl->conn, &line, HELLO_TIMEOUT_MS);

	if (r < 0)
		return r;
	if (ctl_parse(line, &m) || strcmp(m.argv[0], "HELLO") ||
	    ctl_get_u64(&m, "version", &ver)) {
		send_err(cl, EPROTO, "expected HELLO version=N");
		return -EPROTO;
	}
	if (ver < 1) {
		send_err(cl, EPROTONOSUPPORT, "unsupported protocol version");
		return -EPROTO;
	}
	/* a newer client may speak down to version 1 */
	return ctl_sendf(cl->fd, "OK version=%d server=stagefs/%s uid=%u\n",
			 CTL_PROTO_VERSION, STAGEFS_VERSION, cl->cred.uid);
}

/* Take @cl off the list of connections.  Called with cs->lock held. */
static void client_unlink_locked(struct sfs_ctlsock *cs, struct ctl_client *cl)
{
	if (cl->prev)
		cl->prev->next = cl->next;
	else
		cs->clients = cl->next;
	if (cl->next)
		cl->next->prev = cl->prev;
	cs->nclients--;
}

static void *client_main(void *arg)
{
	struct ctl_client *cl = arg;
	struct sfs_ctlsock *cs = cl->cs;

	ctl_conn_init(&cl->conn, cl->fd);
	if (!hello(cl)) {
		for (;;) {
			struct ctl_msg m;
			char *line;
			int r = ctl_read_line(&cl->conn, &line, -1);

			if (r < 0)
				break;
			if (!r)
				continue;
			if (ctl_parse(line, &m)) {
				if (send_err(cl, EINVAL, "unreadable request"))
					break;
				continue;
			}
			if (dispatch(cl, &m) < 0)
				break;
		}
	}
	handles_release(cl);
	close(cl->fd);
	pthread_mutex_lock(&cs->lock);
	client_unlink_locked(cs, cl);
	pthread_cond_broadcast(&cs->gone);
	pthread_mutex_unlock(&cs->lock);
	free(cl);
	return NULL;
}

static void start_client(struct sfs_ctlsock *cs, int fd)
{
	struct ctl_client *cl;
	pthread_attr_t at;
	pthread_t t;
	int ret;

	cl = calloc(1, sizeof(*cl));
	if (!cl) {
		close(fd);
		return;
	}
	ret = cred_from_socket(&cl->cred, fd);
	if (ret) {
		log_warn("control: SO_PEERCRED: %s", strerror(-ret));
		close(fd);
		free(cl);
		return;
	}
	cl->cs = cs;
	cl->fd = fd;
	pthread_mutex_lock(&cs->lock);
	if (cs->nclients >= MAX_CLIENTS || cs->stopping) {
		pthread_mutex_unlock(&cs->lock);
		ctl_sendf(fd, "ERR code=EAGAIN msg=too%%20many%%20connections\n");
		close(fd);
		free(cl);
		return;
	}
	cl->next = cs->clients;
	if (cs->clients)
		cs->clients->prev = cl;
	cs->clients = cl;
	cs->nclients++;
	pthread_mutex_unlock(&cs->lock);

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	if (pthread_create(&t, &at, client_main, cl)) {
		log_warn("control: cannot start a connection thread");
		pthread_mutex_lock(&cs->lock);
		client_unlink_locked(cs, cl);
		pthread_mutex_unlock(&cs->lock);
		close(fd);
		free(cl);
	}
	pthread_attr_destroy(&at);
}

static void *accept_main(void *arg)
{
	struct sfs_ctlsock *cs = arg;

	for (;;) {
		struct pollfd p[2] = {
			{ .fd = cs->lfd, .events = POLLIN },
			{ .fd = cs->wake[0], .events = POLLIN },
		};
		int fd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_err("control: poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		fd = accept4(cs->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
				log_warn("control: accept: %s", strerror(errno));
			continue;
		}
		start_client(cs, fd);
	}
	return NULL;
}

/* ---- life ---- */

int sfs_ctlsock_start(struct sfs *fs)
{
	struct sfs_ctlsock *cs = calloc(1, sizeof(*cs));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *dir = fs->cfg.runtime_dir;
	uint64_t h = sfs_hash64(fs->mountpoint, strlen(fs->mountpoint));
	struct stat st;
	bool existed;
	int ret;

	if (!cs)
		return -ENOMEM;
	cs->fs = fs;
	cs->lfd = cs->wake[0] = cs->wake[1] = -1;
	pthread_mutex_init(&cs->lock, NULL);
	pthread_cond_init(&cs->gone, NULL);
	if ((size_t)snprintf(cs->path, sizeof(cs->path), "%s/%016" PRIx64 ".sock", dir, h) >=
	    sizeof(cs->path)) {
		log_warn("control socket: %s/...sock is longer than a socket path may be: "
			 "no control socket (stagefs warmup will not work)", dir);
		goto out_free;
	}
	/*
	 * The directory others must reach to connect: searchable by all.  The
	 * process umask is 077 (the cache is private), hence the chmod.
	 */
	existed = stat(dir, &st) == 0;
	ret = mkdir_p(dir, 0755);
	if (!ret && !existed && chmod(dir, 0755) < 0)
		ret = -errno;
	if (ret) {
		log_warn("control socket: runtime_dir %s: %s: no control socket", dir,
			 strerror(-ret));
		goto out_free;
	}
	strcpy(sa.sun_path, cs->path);
	cs->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cs->lfd < 0)
		goto out_errno;
	/*
	 * A socket left by a daemon that died: nobody answers it.  One that
	 * answers belongs to a live daemon on this mount point (mounted over):
	 * take the name over; its clients keep their connections.
	 */
	if (unlink(cs->path) == 0)
		log_info("control socket: replaced a stale %s", cs->path);
	if (bind(cs->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out_errno;
	/*
	 * 0622: connect(2) on a Unix socket needs write permission on the
	 * socket file and nothing else, so everyone may connect (each request
	 * is then checked against the peer's SO_PEERCRED uid and gid, as reads
	 * through the mount are).  Read permission means nothing for a socket;
	 * it is left off so nothing suggests the file could be read for data.
	 */
	if (chmod(cs->path, 0622) < 0)
		goto out_unlink;
	if (listen(cs->lfd, 64) < 0 || pipe2(cs->wake, O_CLOEXEC) < 0)
		goto out_unlink;
	ret = pthread_create(&cs->accept_thr, NULL, accept_main, cs);
	if (ret) {
		errno = ret;
		goto out_unlink;
	}
	fs->ctl = cs;
	log_info("control socket %s", cs->path);
	return 0;

out_unlink:
	ret = errno;
	unlink(cs->path);
	errno = ret;
out_errno:
	log_warn("control socket %s: %s: no control socket", cs->path, strerror(errno));
out_free:
	if (cs->lfd >= 0)
		close(cs->lfd);
	if (cs->wake[0] >= 0) {
		close(cs->wake[0]);
		close(cs->wake[1]);
	}
	free(cs);
	return 0;
}

void sfs_ctlsock_stop(struct sfs *fs)
{
	struct sfs_ctlsock *cs = fs->ctl;
	struct timespec ts;

	if (!cs)
		return;
	pthread_mutex_lock(&cs->lock);
	cs->stopping = true;
	pthread_mutex_unlock(&cs->lock);
	if (write(cs->wake[1], "x", 1) < 0)
		log_warn("control: wake: %s", strerror(errno));
	pthread_join(cs->accept_thr, NULL);
	close(cs->lfd);
	unlink(cs->path);

	/* wake every connection thread: reads end, jobs see the peer gone */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	pthread_mutex_lock(&cs->lock);
	for (struct ctl_client *cl = cs->clients; cl; cl = cl->next)
		shutdown(cl->fd, SHUT_RDWR);
	while (cs->nclients) {
		if (pthread_cond_timedwait(&cs->gone, &cs->lock, &ts) == ETIMEDOUT) {
			log_warn("control: %u connection(s) did not end; leaving them",
				 cs->nclients);
			pthread_mutex_unlock(&cs->lock);
			fs->ctl = NULL;
			return;	/* their threads still use cs: leak it */
		}
	}
	pthread_mutex_unlock(&cs->lock);
	close(cs->wake[0]);
	close(cs->wake[1]);
	pthread_mutex_destroy(&cs->lock);
	pthread_cond_destroy(&cs->gone);
	fs->ctl = NULL;
	free(cs);
}

int sfs_ctlsock_text(struct sfs *fs, char **out)
{
	char *s;
	int n;

	if (!fs->ctl)
		return -ENOENT;
	n = asprintf(&s, "%s\n", fs->ctl->path);
	if (n < 0)
		return -ENOMEM;
	*out = s;
	return n;
}
