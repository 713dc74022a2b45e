/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handover: the control socket's requests from the client library
 * (gpudirect/, ctlsock_i.h, docs/control.md).
 *
 * CACHE_FD hands the client an O_RDONLY descriptor of a file's cache file,
 * after the checks a read through the mount would make (access_resolve,
 * then read permission for the peer's credential), once every chunk is
 * present and verified.  The file stays pinned (no chunk evicted) while
 * the connection holds the handle: until CACHE_FD_CLOSE or the connection
 * ends, whichever comes first.  A file that cannot be cached whole (quota,
 * a full cache, no-thrash, a backend error) is refused, never handed over
 * with holes: the client then reads through the mount.
 *
 * CLIENT_READ and GPU_BYTES: the library reports bytes it read from cache
 * files itself and copied to GPUs, counted for the peer (src/stats/stats.h): its
 * uid and pid from the socket's credential, never from the message.  What
 * a uid reports can never move a counter beyond what it could have read
 * (issue 27: a loop of CACHE_FD + CACHE_FD_CLOSE refilled the allowance
 * every time, and one user had 10.4 TB of reads accepted in 5 s).  The
 * ledger (struct ctluser, per uid because the library reports on
 * whichever of its connections is idle, also after the handles are
 * closed) bounds a report two ways:
 *
 *  - by hand-over: every CLIENT_READ of a uid together at most the sizes
 *    of the files granted to it, its files= at most the grants.  A file
 *    is granted at its CACHE_FD, but once per window per (uid, file)
 *    (struct handover_grant): the window is the time reading the file at
 *    client_report_rate takes, and within it a further hand-over is
 *    granted only while the uid holds more handles of the file at once
 *    than it was granted (readers in parallel: each handle may read the
 *    file once, which is all the library counts per handle).  Closing and
 *    reopening refills nothing.  The chunks a hand-over counts as cache
 *    hits (stats_client_stage()) go with its grant too.
 *  - by time: each kind at most client_report_rate bytes a second (a
 *    token bucket per uid and kind holding REPORT_BURST_S seconds of it,
 *    full at the uid's first report): no client can claim more than the
 *    node's disks could have read, however many files it was handed.
 *
 * Every GPU_BYTES together at most the grants plus what the uid read
 * through the mount (its READs in src/stats/stats.h), and the time bound.  A
 * report beyond either bound is refused with ERANGE and counted nowhere,
 * so no client can make a counter of another's, or the node's, jump or
 * wrap; the node's share of self-reported bytes is shown apart
 * (client_reported_bytes, fuse/vfiles.c).
 */
#include "ctlsock_i.h"

#include "stats/gpuid.h"
#include "log.h"
#include "packentry.h"
#include "stats/stats.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HANDLES	4096	/* cache files one connection may hold pinned */
#define GRANTS_PER_USER	16384	/* files one uid may hold grants of at once */
#define REPORT_BURST_S	2	/* seconds of client_report_rate a bucket holds */

/*
 * A file granted to a uid (the header comment): in cs->grants, keyed by
 * (uid, content id), protected by cs->lock.  Freed once no handle of the
 * uid holds it and its window is over (then it is as if never granted),
 * or when the server stops.
 */
struct handover_grant {
	struct htab_node node;
	uint32_t uid;
	struct sfs_id id;	/* the file's content */
	uint32_t open;		/* handles of it the uid holds now */
	uint32_t granted;	/* grants in this window (held handles included) */
	uint64_t since_ms;	/* the window's start (now_ms()) */
	uint64_t window_ms;	/* reading the file at client_report_rate takes this long */
};

struct grant_key {
	uint32_t uid;
	const struct sfs_id *id;
};

static uint64_t grant_hash(uint32_t uid, const struct sfs_id *id)
{
	return htab_hash_u64(id->hi ^ id->lo ^ ((uint64_t)uid * 0x9e3779b97f4a7c15ULL));
}

static bool grant_eq(const struct htab_node *n, const void *key)
{
	const struct handover_grant *g = htab_entry(n, struct handover_grant, node);
	const struct grant_key *k = key;

	return g->uid == k->uid && sfs_id_eq(&g->id, k->id);
}

static uint64_t report_rate(const struct ctlsock *cs)
{
	return MAX(cs->fs->cfg.client_report_rate, 1);
}

/* Free @u's grants that no handle holds and whose window is over. */
static void grants_expire_locked(struct ctlsock *cs, struct ctluser *u, uint64_t now)
{
	htab_for_each_safe(&cs->grants, i, pos, tmp) {
		struct handover_grant *g = htab_entry(pos, struct handover_grant, node);

		if (g->uid != u->uid || g->open || now - g->since_ms < g->window_ms)
			continue;
		htab_del(&cs->grants, pos);
		free(g);
		u->grants--;
	}
}

/*
 * A hand-over of the file with content @id, @size bytes, to @u: its
 * handle joins the (uid, file) grant, and *@granted says whether the
 * file's bytes are granted again (the header comment).  Returns the grant
 * the handle keeps (grant_put() at its close), or NULL where none could be
 * recorded: then nothing is granted (this uid's reports of it are refused,
 * nobody else's).  cs->lock held.
 */
static struct handover_grant *grant_locked(struct ctlsock *cs, struct ctluser *u,
					   const struct sfs_id *id, uint64_t size, uint64_t now,
					   bool *granted)
{
	struct grant_key k = { u->uid, id };
	uint64_t h = grant_hash(u->uid, id), rate = report_rate(cs);
	struct htab_node *n = htab_find(&cs->grants, h, grant_eq, &k);
	struct handover_grant *g;

	*granted = false;
	if (n) {
		g = htab_entry(n, struct handover_grant, node);
	} else {
		if (u->grants >= GRANTS_PER_USER)
			grants_expire_locked(cs, u, now);
		if (u->grants >= GRANTS_PER_USER || htab_reserve(&cs->grants, cs->grants.n + 1))
			return NULL;
		g = calloc(1, sizeof(*g));
		if (!g)
			return NULL;
		g->uid = u->uid;
		g->id = *id;
		/* ceil(size / rate) seconds, in ms, without overflow */
		g->window_ms = MAX(1, size / rate * 1000 + DIV_ROUND_UP(size % rate * 1000, rate));
		g->since_ms = now;
		htab_add(&cs->grants, &g->node, h);
		u->grants++;
	}
	if (now - g->since_ms >= g->window_ms) {
		/* a new window: the handles still held were granted in theirs */
		g->since_ms = now;
		g->granted = g->open;
	}
	g->open++;
	if (g->open > g->granted) {
		g->granted++;
		*granted = true;
	}
	return g;
}

/* A handle of @g closed.  cs->lock held. */
static void grant_put_locked(struct handover_grant *g)
{
	if (g && g->open)
		g->open--;
}

void handover_grants_free(struct ctlsock *cs)
{
	htab_for_each_safe(&cs->grants, i, pos, tmp)
		free(htab_entry(pos, struct handover_grant, node));
	htab_release(&cs->grants);
}

/*
 * Refill @u's buckets for the time since their last refill: at most
 * REPORT_BURST_S seconds of client_report_rate each, full at first.
 * cs->lock held.
 */
static void tokens_refill_locked(struct ctlsock *cs, struct ctluser *u, uint64_t now)
{
	uint64_t rate = report_rate(cs), cap = rate * REPORT_BURST_S, add;

	if (!u->tokens_ms) {
		u->read_tokens = u->gpu_tokens = cap;
	} else if (now > u->tokens_ms) {
		add = now - u->tokens_ms >= REPORT_BURST_S * 1000 ? cap :
		      (now - u->tokens_ms) * rate / 1000;
		u->read_tokens = MIN(cap, u64_add_sat(u->read_tokens, add));
		u->gpu_tokens = MIN(cap, u64_add_sat(u->gpu_tokens, add));
	} else {
		/* the same ms: a rate lowered by a reload still caps them */
		u->read_tokens = MIN(cap, u->read_tokens);
		u->gpu_tokens = MIN(cap, u->gpu_tokens);
		return;
	}
	u->read_tokens = MIN(cap, u->read_tokens);
	u->gpu_tokens = MIN(cap, u->gpu_tokens);
	u->tokens_ms = now;
}

/*
 * The node index of the GPU at PCI address @pci (src/stats/gpuid.h), or -errno.
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
 * Bytes user @uid read through the mount so far: its READs (read_bytes
 * less what the library reported itself).  A snapshot: only taken when a
 * GPU_BYTES report is more than the cache files handed over cover.
 */
static uint64_t mount_read_bytes(struct stats *st, uint32_t uid)
{
	struct stats_snap *snap;
	uint64_t n = 0;

	if (!st || stats_snapshot(st, &snap))
		return 0;
	for (size_t i = 0; i < snap->nrows; i++) {
		const struct stats_row *r = &snap->rows[i];

		if (r->kind == STATS_USER && r->uid == uid) {
			if (r->total[STATS_READ_BYTES] > r->total[STATS_CLIENT_BYTES])
				n = r->total[STATS_READ_BYTES] - r->total[STATS_CLIENT_BYTES];
			break;
		}
	}
	stats_snap_free(snap);
	return n;
}

/* Refuse a report beyond the ledger (logged, rate-limited). */
static int refuse_report(struct ctlsock_client *cl, const char *verb, uint64_t bytes,
			 uint64_t bound)
{
	static _Atomic uint64_t logged;
	int lvl = ctlconn_log_level(&logged);
	char msg[256];

	log_at(lvl, "control: uid %u pid %d: %s of %" PRIu64 " bytes refused: more than "
	       "it was handed (%" PRIu64 " bytes left to report)", cl->cred.uid,
	       (int)cl->cred.pid, verb, bytes, bound);
	snprintf(msg, sizeof(msg), "%s: %" PRIu64 " bytes is more than this user was handed "
		 "(%" PRIu64 " left to report): not counted", verb, bytes, bound);
	return ctlconn_send_err(cl, ERANGE, msg);
}

/* Refuse a report beyond the time bound (logged, rate-limited). */
static int refuse_rate(struct ctlsock_client *cl, const char *verb, uint64_t bytes,
		       uint64_t tokens)
{
	static struct log_ratelimit rl = LOG_RATELIMIT_INIT(10000, 1);
	uint64_t rate = report_rate(cl->cs);
	char msg[320];

	log_limited(&rl, LOG_NOTICE, "control: uid %u pid %d: %s of %" PRIu64 " bytes refused: "
		    "more than client_report_rate (%" PRIu64 " bytes a second) allows now "
		    "(%" PRIu64 ")", cl->cred.uid, (int)cl->cred.pid, verb, bytes, rate, tokens);
	snprintf(msg, sizeof(msg), "%s: %" PRIu64 " bytes is more than this user could have "
		 "read by now (client_report_rate %" PRIu64 " bytes a second, %" PRIu64
		 " left): not counted", verb, bytes, rate, tokens);
	return ctlconn_send_err(cl, ERANGE, msg);
}

/*
 * The GPU client library reports bytes it copied to a GPU (src/stats/stats.h).
 * With pci=, the device's PCI address, the row is the node's index of that
 * GPU (src/stats/gpuid.h): the client's ordinal depends on its
 * CUDA_VISIBLE_DEVICES.
 */
int handover_gpu_bytes(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	const char *pci = ctl_get(m, "pci");
	struct ctlsock *cs = cl->cs;
	uint64_t gpu, bytes, gpu_before = 0, handed = 0, tokens = 0;
	struct ctluser *u;
	bool ok = false, over_rate = false;
	int ret;

	if (ctl_get_u64(m, "gpu", &gpu) || ctl_get_u64(m, "bytes", &bytes) || gpu > 65535)
		return ctlconn_send_err(cl, EINVAL, "GPU_BYTES needs gpu=N (0-65535) bytes=N");
	if (pci) {
		int idx = gpu_index_of(pci);

		if (idx >= 0)
			gpu = (uint64_t)idx;
		else
			log_debug("control: GPU %s: %s: counted as the client's GPU %" PRIu64,
				  pci, strerror(-idx), gpu);
	}
	/* at most what the uid was granted or read through the mount, and its rate */
	pthread_mutex_lock(&cs->lock);
	u = ctluser_locked(cs, cl->cred.uid);
	if (u) {
		tokens_refill_locked(cs, u, now_ms());
		tokens = u->gpu_tokens;
	}
	if (u && bytes > u->gpu_tokens) {
		over_rate = true;
	} else if (u && u64_add_sat(u->gpu, bytes) <= u->handed) {
		u->gpu += bytes;
		u->gpu_tokens -= bytes;
		ok = true;
	} else if (u) {
		gpu_before = u->gpu;
		handed = u->handed;
	}
	pthread_mutex_unlock(&cs->lock);
	if (!u)
		return ctlconn_send_err(cl, ENOMEM, "out of memory");
	if (over_rate)
		return refuse_rate(cl, "GPU_BYTES", bytes, tokens);
	if (!ok) {
		/* bytes read through the mount (no lock held: a snapshot) */
		uint64_t bound = u64_add_sat(handed, mount_read_bytes(cs->fs->stats, cl->cred.uid));

		pthread_mutex_lock(&cs->lock);
		u = ctluser_locked(cs, cl->cred.uid);
		/* what others of this uid reported meanwhile counts too */
		if (u && u64_add_sat(u->gpu, bytes) <= bound && bytes <= u->gpu_tokens) {
			u->gpu += bytes;
			u->gpu_tokens -= bytes;
			ok = true;
		}
		pthread_mutex_unlock(&cs->lock);
		if (!ok)
			return refuse_report(cl, "GPU_BYTES", bytes,
					     bound > gpu_before ? bound - gpu_before : 0);
	}
	/* the uid is the peer's: a client cannot charge another user */
	ret = stats_gpu_account(cl->cs->fs->stats, cl->cred.pid, cl->cred.uid,
				ctl_get(m, "job"), (int)gpu, bytes);
	if (ret)
		return ctlconn_send_err(cl, -ret, "cannot account the bytes");
	return ctl_sendf(cl->fd, "OK\n");
}

/* A CACHE_FD's fetches: go on while the daemon runs and the client waits. */
static bool tick(void *arg)
{
	return ctlconn_tick(arg);
}

/*
 * Bring every missing chunk of file @ino of @ds in: a warmup of that one
 * file for the peer (charged to @owner, its uid or its pod's namespace,
 * scheduled and rate-capped like `stagefs warmup`).  *@p is the job's
 * last progress.  Returns 0,
 * the errno of the first chunk that could not be fetched or kept
 * (-ENOSPC: the cache would not keep it), or -ECONNRESET when the peer
 * left or the daemon stops.
 */
static int stage_file(struct ctlsock_client *cl, struct sfs_dataset *ds, uint64_t ino,
		      const char *path, uint32_t owner, struct pf_job_progress *p)
{
	struct pf_job_opts o = {
		.mode = PF_JOB_FETCH,
		.cred = cl->cred,
		.owner = owner,
		.tick = tick,
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
	struct pf_job *j;
	size_t nfails;
	int ret;

	ret = pf_job_create(cl->cs->fs->pf, &o, &j);
	if (ret)
		return ret;
	ret = pf_job_run(j, &root, 1);
	while (!ret && !pf_job_wait(j, 100)) {
		if (!ctlconn_tick(cl))
			ret = -ECONNRESET;
	}
	if (ret == -ECANCELED)
		ret = -ECONNRESET;
	pf_job_get_progress(j, p);
	pf_job_take_failures(j, &fails, &nfails);
	if (!ret && nfails)
		ret = -fails[0].err;
	for (size_t i = 0; i < nfails; i++)
		free(fails[i].path);
	free(fails);
	pf_job_destroy(j);
	return ret;
}

static int handle_add(struct ctlsock_client *cl, struct cfile *cf, uint64_t *id)
{
	if (cl->nhandles == cl->caphandles) {
		size_t cap = cl->caphandles ? cl->caphandles * 2 : 16;
		struct handover_handle *nh = realloc(cl->handles, cap * sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		cl->handles = nh;
		cl->caphandles = cap;
	}
	*id = ++cl->next_handle;
	cl->handles[cl->nhandles++] = (struct handover_handle){ .id = *id, .cf = cf };
	return 0;
}

/* Unpin and forget handle @id (and leave its grant).  0 or -ENOENT. */
static int handle_drop(struct ctlsock_client *cl, uint64_t id)
{
	for (size_t i = 0; i < cl->nhandles; i++) {
		if (cl->handles[i].id != id)
			continue;
		pthread_mutex_lock(&cl->cs->lock);
		grant_put_locked(cl->handles[i].grant);
		pthread_mutex_unlock(&cl->cs->lock);
		cache_file_unpin(cl->cs->fs->cache, cl->handles[i].cf);
		cl->handles[i] = cl->handles[--cl->nhandles];
		return 0;
	}
	return -ENOENT;
}

void handover_release(struct ctlsock_client *cl)
{
	pthread_mutex_lock(&cl->cs->lock);
	for (size_t i = 0; i < cl->nhandles; i++)
		grant_put_locked(cl->handles[i].grant);
	pthread_mutex_unlock(&cl->cs->lock);
	for (size_t i = 0; i < cl->nhandles; i++)
		cache_file_unpin(cl->cs->fs->cache, cl->handles[i].cf);
	free(cl->handles);
	cl->handles = NULL;
	cl->nhandles = cl->caphandles = 0;
}

static int send_refusal(struct ctlsock_client *cl, const char *path, int err)
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
	return ctlconn_send_err(cl, err, msg);
}

/*
 * CACHE_FD path=P: check P for the peer as a read through the mount would
 * be checked, stage it whole, verify it, pin it, and send an O_RDONLY
 * descriptor of its cache file with the reply.
 */
int handover_cache_fd(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	struct sfs *fs = cl->cs->fs;
	const char *path = ctl_get(m, "path");
	struct sfs_dataset *ds;
	struct pf_job_progress p = { 0 };
	uint64_t ino, id, t0, t1, missing;
	struct ctluser *u;
	struct sfs_attr a;
	struct cfile *cf;
	bool granted = false;
	uint32_t owner;
	int fd = -1, ret;

	if (!path)
		return ctlconn_send_err(cl, EINVAL, "CACHE_FD needs path=P");
	if (cl->nhandles >= MAX_HANDLES)
		return send_refusal(cl, path, EMFILE);
	ret = access_resolve(fs, &cl->cred, path, &ds, &ino);
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
	owner = access_owner(fs, cl->cred.uid, cl->cred.pid);	/* a pod's: its namespace */
	pf_hint_open(fs->pf, sfs_ino(fs, ds, ino), cl->cred.uid, cl->cred.pid);
	pf_stage_open(fs->pf, ds->be, ds->name, atomic_load(&ds->epoch_staging),
		      cl->cred.uid, cl->cred.gid, owner, ino);
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
	t0 = now_ns();
	ret = stage_file(cl, ds, ino, path, owner, &p);
	if (ret == -ECONNRESET)
		goto out_unpin;
	/*
	 * The descriptor the cache verified, reopened read-only: the holder
	 * can never change what others are served, and nothing that may have
	 * replaced the file's name since is handed over (issue 27).
	 */
	if (!ret && cache_file_present(fs->cache, cf) < cache_file_nchunks(cf)) {
		/* a small file cached in its pack's entry: a file of its own */
		int r = packentry_fill_file(fs->cache, ds->be, &a, cf, owner);

		if (r && r != -ENOENT)
			ret = r;
	}
	if (!ret)
		ret = cache_file_open_verified_ro(fs->cache, cf, &fd);
	if (!ret && p.cached_before < p.chunks) {
		/*
		 * Chunks just fetched are dirty in the page cache, and the
		 * library reads with O_DIRECT, which would first wait for their
		 * writeback: start it and wait here, where the wait is seen.
		 */
		(void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE |
				      SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
	}
	/*
	 * The open waited this long for the file: a stall if it was not all
	 * cached (charged below, once it is known whether the file's chunks
	 * count as hits: only with a grant).
	 */
	t1 = now_ns();
	missing = p.chunks - MIN(p.cached_before, p.chunks);
	if (!ret) {
		ret = handle_add(cl, cf, &id);
		if (ret)
			close(fd);
	}
	if (ret) {
		log_debug("control: uid %u: no cache file for %s: %s", cl->cred.uid, path,
			  strerror(-ret));
		stats_client_stage(fs->stats, cl->cred.pid, cl->cred.uid, t0, t1, missing,
				   missing, p.fetched_bytes);
		cache_file_unpin(fs->cache, cf);
		return send_refusal(cl, path, -ret);
	}
	/*
	 * Grant and charge before the descriptor goes: the library may report
	 * what it read from it on another connection at once, and a report
	 * counted before the open that made it would stretch the job's time.
	 */
	pthread_mutex_lock(&cl->cs->lock);
	u = ctluser_locked(cl->cs, cl->cred.uid);
	if (u) {	/* what the uid may report (else: nothing) */
		struct handover_handle *h = &cl->handles[cl->nhandles - 1];	/* just added */

		h->grant = grant_locked(cl->cs, u, &a.content, a.size, now_ms(), &granted);
		if (granted) {
			u->handed = u64_add_sat(u->handed, a.size);
			u->handed_files = u64_add_sat(u->handed_files, 1);
		}
	}
	pthread_mutex_unlock(&cl->cs->lock);
	stats_client_stage(fs->stats, cl->cred.pid, cl->cred.uid, t0, t1,
			   granted ? p.chunks : missing, missing, p.fetched_bytes);
	ret = ctl_sendf_fd(cl->fd, fd,
			   "OK handle=%" PRIu64 " size=%" PRIu64 " ino=%" PRIu64 " chunk_size=%u"
			   " fetched=%" PRIu64 " fd=1\n", id, a.size, sfs_ino(fs, ds, ino),
			   ds->be->chunk_size, p.fetched_bytes);
	close(fd);
	if (ret) {
		handle_drop(cl, id);	/* the peer is gone: so is its descriptor (and the grant's hold) */
		return ret;
	}
	stats_client_open(fs->stats, cl->cred.pid, cl->cred.uid);
	return 0;

out_unpin:
	cache_file_unpin(fs->cache, cf);
	return ret;
}

int handover_cache_fd_close(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	uint64_t id;

	if (ctl_get_u64(m, "handle", &id))
		return ctlconn_send_err(cl, EINVAL, "CACHE_FD_CLOSE needs handle=N");
	if (handle_drop(cl, id))
		return ctlconn_send_err(cl, ENOENT, "no such handle on this connection");
	return ctl_sendf(cl->fd, "OK\n");
}

/* The client library read bytes from cache files itself (src/stats/stats.h). */
int handover_client_read(struct ctlsock_client *cl, const struct ctl_msg *m)
{
	struct ctlsock *cs = cl->cs;
	uint64_t bytes, files = 0, left = 0, tokens = 0;
	struct ctluser *u;
	bool ok = false, over_rate = false;
	int ret;

	if (ctl_get_u64(m, "bytes", &bytes) ||
	    (ctl_get(m, "files") && ctl_get_u64(m, "files", &files)))
		return ctlconn_send_err(cl, EINVAL, "CLIENT_READ needs bytes=N [files=N] [job=J]");
	/* at most the bytes and files the uid was granted, and its rate */
	pthread_mutex_lock(&cs->lock);
	u = ctluser_locked(cs, cl->cred.uid);
	if (u) {
		tokens_refill_locked(cs, u, now_ms());
		tokens = u->read_tokens;
		ok = u64_add_sat(u->client_read, bytes) <= u->handed &&
		     u64_add_sat(u->client_files, files) <= u->handed_files;
		over_rate = ok && bytes > u->read_tokens;
		ok = ok && !over_rate;
		if (ok) {
			u->client_read += bytes;
			u->client_files += files;
			u->read_tokens -= bytes;
		}
		left = u->handed - u->client_read;
	}
	pthread_mutex_unlock(&cs->lock);
	if (!u)
		return ctlconn_send_err(cl, ENOMEM, "out of memory");
	if (over_rate)
		return refuse_rate(cl, "CLIENT_READ", bytes, tokens);
	if (!ok)
		return refuse_report(cl, "CLIENT_READ", bytes, left);
	ret = stats_client_account(cl->cs->fs->stats, cl->cred.pid, cl->cred.uid,
				   ctl_get(m, "job"), bytes, files);
	if (ret)
		return ctlconn_send_err(cl, -ret, "cannot account the bytes");
	return ctl_sendf(cl->fd, "OK\n");
}
