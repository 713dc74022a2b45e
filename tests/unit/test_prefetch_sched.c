/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_prefetch_sched: the prefetch scheduler through prefetch/prefetch.h,
 * over a real dir:// backend and a real cache in a temp dir.
 *
 * What is checked is the policy prefetch.h promises: background work waits
 * while readers' (demand) fetches fill prefetch_inflight; queued readahead
 * goes before queued warmup; within a class the uids with work are served
 * weighted round robin (prefetch_weights); backend_max_rate is a token
 * bucket that background fetches wait for and readers borrow from; epoch
 * staging (prefetch/stage.c) goes after warmup, and its detector fires on
 * distinct opens only, declines a dataset larger than the user's quota
 * under auto, and is silent when off.
 *
 * How the order is seen: the scheduler runs with its worker threads
 * (io_uring off) and prefetch_inflight = 1, so fetches happen one at a
 * time, and the pf_opts fetch_begin hook (the daemon's accounting hook)
 * records which file and chunk each backend fetch is for.  The first fetch
 * is held in the hook while the test queues the rest, so the scheduler
 * chooses among everything queued.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cache/cache.h"
#include "config.h"
#include "log.h"
#include "prefetch/prefetch.h"
#include "util.h"

#define CS	(64u * 1024)	/* chunk_size of the dir:// backend */
#define NCHUNKS	16		/* chunks of each test file */
#define MAXLOG	256

struct tctx {
	char dir[PATH_MAX / 2];
	char src[PATH_MAX / 2 + 16];
	char cdir[PATH_MAX / 2 + 16];
	char uri[PATH_MAX];
	struct sfs_config cfg;
	struct backend *be;
	struct cache *c;
	struct pf_sched *s;

	/* the fetch log, filled by the fetch_begin hook */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool hold;			/* protected by lock: fetches wait in the hook */
	unsigned nlog;			/* protected by lock */
	const struct cfile *log_cf[MAXLOG];	/* protected by lock */
	uint32_t log_idx[MAXLOG];	/* protected by lock */
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void make_file(const char *dir, const char *name, uint64_t size)
{
	char p[PATH_MAX];
	char buf[4096];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, 0644), 0);	/* whatever the umask (the cache sets one) */
	for (uint64_t off = 0; off < size; off += sizeof(buf)) {
		size_t n = MIN(sizeof(buf), size - off);

		memset(buf, (int)(off / sizeof(buf)) ^ name[0], n);
		assert_int_equal(write(fd, buf, n), (ssize_t)n);
	}
	close(fd);
}

static void hook_begin(void *arg, const struct cfile *cf, uint32_t idx)
{
	struct tctx *t = arg;

	pthread_mutex_lock(&t->lock);
	if (t->nlog < MAXLOG) {
		t->log_cf[t->nlog] = cf;
		t->log_idx[t->nlog] = idx;
	}
	t->nlog++;
	pthread_cond_broadcast(&t->cond);
	while (t->hold)
		pthread_cond_wait(&t->cond, &t->lock);
	pthread_mutex_unlock(&t->lock);
}

static int setup(void **state)
{
	const char *base = getenv("TMPDIR");
	struct tctx *t = calloc(1, sizeof(*t));
	struct cache_opts co = { .size_limit = 0, .fd_cache = 64 };
	char err[256];

	if (!t)
		return -1;
	snprintf(t->dir, sizeof(t->dir), "%s/test_prefetch_sched.XXXXXX",
		 base && *base ? base : "/tmp");
	if (!mkdtemp(t->dir))
		return -1;
	snprintf(t->src, sizeof(t->src), "%s/src", t->dir);
	snprintf(t->cdir, sizeof(t->cdir), "%s/cache", t->dir);
	snprintf(t->uri, sizeof(t->uri), "dir://%s", t->src);
	mkdir(t->src, 0755);
	chmod(t->src, 0755);
	make_file(t->src, "a", (uint64_t)NCHUNKS * CS);
	make_file(t->src, "b", (uint64_t)NCHUNKS * CS);
	make_file(t->src, "big", 48ull * CS);
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);

	config_init(&t->cfg);
	if (config_set(&t->cfg, "cache_dir", t->cdir, err, sizeof(err)) ||
	    config_set(&t->cfg, "chunk_size", "64K", err, sizeof(err)))
		return -1;
	if (backend_open(t->uri, &t->cfg, &t->be, err, sizeof(err))) {
		fprintf(stderr, "backend_open: %s\n", err);
		return -1;
	}
	/* a dir:// backend scans in the background: wait until its size is known */
	for (int i = 0; i < 1000; i++) {
		uint64_t bytes, files;

		if (t->be->ops->statfs(t->be, &bytes, &files) != -EAGAIN)
			break;
		usleep(10000);
	}
	co.dir = t->cdir;
	if (cache_create(&co, &t->c, err, sizeof(err))) {
		fprintf(stderr, "cache_create: %s\n", err);
		return -1;
	}
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tctx *t = *state;

	/* a failed test may have left fetches held: let them go, or this waits forever */
	pthread_mutex_lock(&t->lock);
	t->hold = false;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	if (t->s)
		pf_sched_destroy(t->s);
	cache_destroy(t->c);
	backend_close(t->be);
	config_release(&t->cfg);
	nftw(t->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
	free(t);
	return 0;
}

/*
 * A scheduler with one fetch at a time, on worker threads, hooked; an
 * epoch is @stage_files distinct opens (0: no epoch staging).
 */
static void start_staging(struct tctx *t, const char *weights, uint64_t max_rate,
			  uint32_t stage_files)
{
	struct pf_opts o = {
		.inflight = 1,
		.user_inflight = 1,
		.max_rate = max_rate,
		.weights = weights,
		.readahead_max = 8,
		.ra_slack = CS,
		.hint_window = 4,
		.hint_window_bytes = 64 * CS,
		.stage_files = stage_files,
		.stage_idle_ms = 30000,
		.io_uring = false,
		.fetch_begin = hook_begin,
		.account_arg = t,
	};
	char err[256];

	if (pf_sched_create(&o, t->c, &t->s, err, sizeof(err)))
		fail_msg("pf_sched_create: %s", err);
}

static void start(struct tctx *t, const char *weights, uint64_t max_rate)
{
	start_staging(t, weights, max_rate, 0);
}

static void lookup(struct tctx *t, const char *name, struct sfs_attr *a)
{
	int r = t->be->ops->lookup(t->be, SFS_ROOT_INO, name, a);

	if (r)
		fail_msg("lookup %s: %d", name, r);
}

/* The cache entry of @a: the pointer the hook sees for its fetches. */
static struct cfile *cfile_of(struct tctx *t, const struct sfs_attr *a)
{
	struct cfile *cf;

	assert_int_equal(cache_file_get(t->c, &a->content, a->size,
					t->be->chunk_size, &cf), 0);
	return cf;
}

/* A fetch-mode warmup job of file @name for @uid: both walks done. */
/* A warmup of @name by @uid, charged to @owner (0: @uid). */
static struct pf_job *warm_as(struct tctx *t, const char *name, uint32_t uid, uint32_t owner)
{
	struct pf_job_opts o = {
		.mode = PF_JOB_FETCH,
		.max_inflight = 4 * NCHUNKS,
		.cred = { .uid = uid, .gid = uid },
		.owner = owner,
	};
	struct pf_job_root root = { .be = t->be, .path = name };
	struct sfs_attr a;
	struct pf_job *j;

	lookup(t, name, &a);
	root.ino = a.ino;
	assert_int_equal(pf_job_create(t->s, &o, &j), 0);
	assert_int_equal(pf_job_run(j, &root, 1), 0);
	return j;
}

static struct pf_job *warm(struct tctx *t, const char *name, uint32_t uid)
{
	return warm_as(t, name, uid, 0);
}

static void hold(struct tctx *t, bool on)
{
	pthread_mutex_lock(&t->lock);
	t->hold = on;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

/* Wait (up to 10 s) until the hook has seen @n fetches. */
static void wait_fetches(struct tctx *t, unsigned n)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&t->lock);
	while (t->nlog < n)
		if (pthread_cond_timedwait(&t->cond, &t->lock, &ts)) {
			pthread_mutex_unlock(&t->lock);
			fail_msg("only %u of %u fetches within 10 s", t->nlog, n);
		}
	pthread_mutex_unlock(&t->lock);
}

static void job_finish(struct pf_job *j, uint64_t want_fetched)
{
	struct pf_job_progress p;

	assert_true(pf_job_wait(j, 10000));
	pf_job_get_progress(j, &p);
	assert_int_equal(p.failed, 0);
	assert_int_equal(p.fetched, want_fetched);
	pf_job_destroy(j);
}

/* How many of the fetches [from, to) of the log were of @cf. */
static unsigned count_of(struct tctx *t, const struct cfile *cf, unsigned from, unsigned to)
{
	unsigned n = 0;

	for (unsigned i = from; i < to; i++)
		n += t->log_cf[i] == cf;
	return n;
}

/*
 * Two users warm a file each: the fetches alternate between them (equal
 * weights), so neither waits for the other's whole job.
 */
static void test_fair_share_equal(void **state)
{
	struct tctx *t = *state;
	struct sfs_attr a, b;
	struct cfile *ca, *cb;
	struct pf_job *ja, *jb;

	lookup(t, "a", &a);
	lookup(t, "b", &b);
	ca = cfile_of(t, &a);
	cb = cfile_of(t, &b);
	start(t, NULL, 0);
	hold(t, true);
	ja = warm(t, "a", 1001);
	wait_fetches(t, 1);		/* a's first chunk is held in the hook */
	jb = warm(t, "b", 1002);
	hold(t, false);
	job_finish(ja, NCHUNKS);
	job_finish(jb, NCHUNKS);

	assert_int_equal(t->nlog, 2 * NCHUNKS);
	assert_ptr_equal(t->log_cf[0], ca);
	/* while both have work, neither gets more than one fetch ahead */
	for (unsigned i = 1; i <= 2 * NCHUNKS - 2; i++) {
		int na = (int)count_of(t, ca, 1, i + 1);
		int nb = (int)count_of(t, cb, 1, i + 1);

		if (na - nb > 1 || nb - na > 1)
			fail_msg("after %u fetches: %d of uid 1001, %d of uid 1002", i, na, nb);
	}
	cache_file_put(t->c, ca);
	cache_file_put(t->c, cb);
}

/*
 * With prefetch_weights @weights, a warmup of "a" by @ua charged to @oa and
 * one of "b" by @ub charged to @ob (0: their uids), b's queued while a's
 * first fetch is held: how many of the 12 fetches after it were a's (the
 * rest, checked, b's).
 */
static unsigned share_of_a(struct tctx *t, const char *weights, uint32_t ua, uint32_t oa,
			   uint32_t ub, uint32_t ob)
{
	struct sfs_attr a, b;
	struct cfile *ca, *cb;
	struct pf_job *ja, *jb;
	unsigned na;

	lookup(t, "a", &a);
	lookup(t, "b", &b);
	ca = cfile_of(t, &a);
	cb = cfile_of(t, &b);
	start(t, weights, 0);
	hold(t, true);
	ja = warm_as(t, "a", ua, oa);
	wait_fetches(t, 1);
	jb = warm_as(t, "b", ub, ob);
	hold(t, false);
	job_finish(ja, NCHUNKS);
	job_finish(jb, NCHUNKS);

	assert_int_equal(t->nlog, 2 * NCHUNKS);
	na = count_of(t, ca, 1, 13);
	assert_int_equal(count_of(t, cb, 1, 13), 12 - na);
	cache_file_put(t->c, ca);
	cache_file_put(t->c, cb);
	return na;
}

/* prefetch_weights 1001:3: uid 1001 gets three fetches to uid 1002's one. */
static void test_fair_share_weighted(void **state)
{
	/* the 12 fetches after the held one: 9 of 1001's, 3 of 1002's (+-1) */
	unsigned na = share_of_a(*state, "1001:3", 1001, 0, 1002, 0);

	if (na < 8 || na > 10)
		fail_msg("%u of the first 12 fetches were uid 1001's (weight 3), want 8-10", na);
}

/*
 * prefetch_weights namespace:vision:3: a namespace's tenant gets three
 * fetches to another's one, whatever uid its pods run as (both 1001 here).
 */
static void test_fair_share_namespace(void **state)
{
	static const char *const bad[] = {
		"namespace:Vision:3", "namespace:vision", "namespace::3", "namespace:vision:0",
		"namespace:vision:3x",
	};
	struct tctx *t = *state;
	struct pf_opts o = { .inflight = 1, .user_inflight = 1, .io_uring = false };
	struct pf_sched *s;
	uint32_t vision, nlp;
	char err[256];
	unsigned na;

	/* a bad namespace weight is refused with the setting's name */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.weights = bad[i];
		if (!pf_sched_create(&o, t->c, &s, err, sizeof(err)))
			fail_msg("prefetch_weights '%s' was taken", bad[i]);
		assert_non_null(strstr(err, "prefetch_weights"));
	}
	assert_int_equal(cache_tenant_id(t->c, "namespace:vision", &vision), 0);
	assert_int_equal(cache_tenant_id(t->c, "namespace:nlp", &nlp), 0);
	na = share_of_a(t, "1001:7, namespace:vision:3", 1001, vision, 1001, nlp);
	if (na < 8 || na > 10)
		fail_msg("%u of the first 12 fetches were namespace vision's (weight 3), want 8-10", na);
}

/* Queued readahead goes before queued warmup, whoever queued first. */
static void test_readahead_before_warmup(void **state)
{
	struct tctx *t = *state;
	struct sfs_attr a, b;
	struct cfile *ca, *cb;
	struct pf_job *ja;
	struct pf_ra *ra;
	unsigned nra, first_a = 0;

	lookup(t, "a", &a);
	lookup(t, "b", &b);
	ca = cfile_of(t, &a);
	cb = cfile_of(t, &b);
	start(t, NULL, 0);
	hold(t, true);
	ja = warm(t, "a", 1001);
	wait_fetches(t, 1);
	/* a sequential reader of b (two READs in a row): readahead is queued */
	ra = pf_ra_create(t->s, t->be, &b, false);
	assert_non_null(ra);
	pf_ra_read(ra, 0, CS / 2, 1001);
	pf_ra_read(ra, CS / 2, CS / 2, 1001);
	hold(t, false);
	job_finish(ja, NCHUNKS);
	pf_ra_release(ra);
	pf_sched_destroy(t->s);		/* the readahead fetches are over */
	t->s = NULL;

	nra = count_of(t, cb, 0, MIN(t->nlog, MAXLOG));
	assert_true(nra >= 1);
	assert_ptr_equal(t->log_cf[0], ca);
	for (unsigned i = 1; i < t->nlog; i++) {
		if (t->log_cf[i] == ca) {
			first_a = i;
			break;
		}
	}
	/* every readahead fetch came before warmup's second one */
	assert_int_equal(count_of(t, cb, 1, first_a), nra);
	cache_file_put(t->c, ca);
	cache_file_put(t->c, cb);
}

/*
 * Readers' fetches count against prefetch_inflight: while one is in flight
 * (inflight = 1) no background fetch starts; when it ends, the job runs.
 */
static void test_demand_before_background(void **state)
{
	struct tctx *t = *state;
	struct pf_stats st;
	struct pf_job *ja;

	start(t, NULL, 0);
	pf_demand_begin(t->s, CS);
	ja = warm(t, "a", 1001);
	usleep(300 * 1000);	/* the workers look at the queue every 100 ms at least */
	pf_get_stats(t->s, &st);
	assert_int_equal(t->nlog, 0);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.demand_inflight, 1);
	assert_int_equal(st.queued, NCHUNKS);
	pf_demand_end(t->s);
	job_finish(ja, NCHUNKS);
	assert_int_equal(t->nlog, NCHUNKS);
	pf_get_stats(t->s, &st);
	assert_int_equal(st.warmup_fetches, NCHUNKS);
	assert_int_equal(st.demand_fetches, 1);
}

/*
 * backend_max_rate: background fetches wait for tokens (48 chunks of 64K =
 * 3 MiB at 4 MiB/s with a 1 MiB burst take at least 0.5 s) and the wait is
 * counted in throttle_ms.
 */
static void test_rate_cap_background(void **state)
{
	struct tctx *t = *state;
	struct pf_stats st;
	struct pf_job *j;
	uint64_t t0;

	start(t, NULL, 4 * MiB);
	t0 = now_ns();
	j = warm(t, "big", 1001);
	job_finish(j, 48);
	if (now_ns() - t0 < 400 * 1000 * 1000ull)
		fail_msg("3 MiB at a 4 MiB/s cap (1 MiB burst) took %.3f s, want >= 0.4 s",
			 (double)(now_ns() - t0) / 1e9);
	pf_get_stats(t->s, &st);
	assert_true(st.throttle_ms >= 300);
}

/*
 * Readers borrow up to one second of the rate ahead, and background work
 * then waits until the balance is paid back.
 */
static void test_rate_cap_demand_borrows(void **state)
{
	struct tctx *t = *state;
	struct pf_job *j;
	uint64_t t0, dt;

	start(t, NULL, 4 * MiB);
	/* 1 MiB of burst in the bucket: 4 MiB more than that is one second's borrow */
	t0 = now_ns();
	pf_demand_begin(t->s, 4 * MiB);
	dt = now_ns() - t0;
	pf_demand_end(t->s);
	if (dt > 100 * 1000 * 1000ull)
		fail_msg("a reader within its borrow waited %.3f s", (double)dt / 1e9);
	/* the balance is -3 MiB: a reader may go to -4 MiB, so 2 MiB waits ~0.25 s */
	t0 = now_ns();
	pf_demand_begin(t->s, 2 * MiB);
	dt = now_ns() - t0;
	pf_demand_end(t->s);
	if (dt < 150 * 1000 * 1000ull)
		fail_msg("a reader past its borrow waited only %.3f s", (double)dt / 1e9);
	/* now about -4 MiB: a warmup chunk waits for the balance to reach 64K (~1 s) */
	t0 = now_ns();
	j = warm(t, "a", 1001);
	wait_fetches(t, 1);
	dt = now_ns() - t0;
	if (dt < 700 * 1000 * 1000ull)
		fail_msg("background started %.3f s after readers borrowed 1 s ahead",
			 (double)dt / 1e9);
	pf_job_destroy(j);
}

/* Wait (up to 10 s) until the stats' @field reaches @n. */
#define WAIT_STAT(t, field, n) do {						\
	struct pf_stats st_;							\
	uint64_t end_ = now_ms() + 10000;					\
										\
	for (;;) {								\
		pf_get_stats((t)->s, &st_);					\
		if (st_.field >= (n))						\
			break;							\
		if (now_ms() > end_)						\
			fail_msg(#field " is %" PRIu64 " after 10 s, want %" PRIu64,	\
				 (uint64_t)st_.field, (uint64_t)(n));		\
		usleep(20 * 1000);						\
	}									\
} while (0)

/*
 * An epoch of uid 1001 (two distinct opens here) stages the whole dataset,
 * after the warmup queued before it: every chunk of the warmup's file is
 * fetched before any chunk only the staging wants, and nothing twice.
 */
static void test_stage_after_warmup(void **state)
{
	struct tctx *t = *state;
	struct sfs_attr a, b, big;
	struct cfile *ca;
	struct pf_stats st;
	struct pf_job *ja;
	unsigned last_a = 0, first_other = UINT32_MAX;

	lookup(t, "a", &a);
	lookup(t, "b", &b);
	lookup(t, "big", &big);
	ca = cfile_of(t, &a);
	start_staging(t, NULL, 0, 2);
	hold(t, true);
	ja = warm(t, "a", 1001);
	wait_fetches(t, 1);
	pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1001, 1001, 0, b.ino);
	pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1001, 1001, 0, big.ino);
	WAIT_STAT(t, stage_started, 1);
	hold(t, false);
	job_finish(ja, NCHUNKS);
	WAIT_STAT(t, stage_complete, 1);
	pf_get_stats(t->s, &st);
	assert_int_equal(st.stage_active, 0);
	assert_int_equal(st.warmup_fetches, NCHUNKS);
	assert_int_equal(st.stage_fetches, NCHUNKS + 48);	/* b and big */
	assert_int_equal(st.staged_files, 2);
	assert_int_equal(st.staged_bytes, (NCHUNKS + 48) * (uint64_t)CS);
	assert_int_equal(t->nlog, 2 * NCHUNKS + 48);
	for (unsigned i = 0; i < t->nlog; i++) {
		if (t->log_cf[i] == ca)
			last_a = i;
		else if (first_other == UINT32_MAX)
			first_other = i;
	}
	assert_true(last_a < first_other);
	cache_file_put(t->c, ca);
}

static uint64_t quota_fn(void *arg, uint32_t uid, const char *tenant)
{
	(void)arg;
	(void)tenant;
	return uid == 1002 ? MiB : UINT64_MAX;
}

/*
 * The detector: re-opens of a few files never make an epoch, nor does
 * anything with epoch_staging off; under auto a user whose quota is below
 * the dataset (5 MiB) is declined, one without a quota is staged.
 */
static void test_stage_detector(void **state)
{
	struct tctx *t = *state;
	struct pf_stats st;

	cache_set_quota_fn(t->c, quota_fn, NULL);
	start_staging(t, NULL, 0, 4);
	for (int i = 0; i < 40; i++)	/* two files, over and over */
		pf_stage_open(t->s, t->be, "t", CFG_ON, 1001, 1001, 0, 100 + i % 2);
	for (int i = 0; i < 40; i++)	/* an epoch, but off */
		pf_stage_open(t->s, t->be, "t", CFG_OFF, 1003, 1003, 0, 100 + i);
	pf_get_stats(t->s, &st);
	assert_int_equal(st.stage_started, 0);
	assert_int_equal(st.stage_declined, 0);

	for (int i = 0; i < 4; i++)
		pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1002, 1002, 0, 100 + i);
	pf_get_stats(t->s, &st);
	assert_int_equal(st.stage_declined, 1);
	assert_int_equal(st.stage_started, 0);
	/* declined: no look again while the readers go on */
	for (int i = 0; i < 8; i++)
		pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1002, 1002, 0, 200 + i);
	pf_get_stats(t->s, &st);
	assert_int_equal(st.stage_declined, 1);

	/* three distinct and one re-open: not yet; the fourth distinct: now */
	pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1003, 1003, 0, 100);
	pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1003, 1003, 0, 101);
	pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1003, 1003, 0, 101);
	pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1003, 1003, 0, 102);
	pf_get_stats(t->s, &st);
	assert_int_equal(st.stage_started, 0);
	pf_stage_open(t->s, t->be, "t", CFG_AUTO, 1003, 1003, 0, 103);
	WAIT_STAT(t, stage_complete, 1);
	pf_get_stats(t->s, &st);
	assert_int_equal(st.stage_started, 1);
	assert_int_equal(st.stage_fetches, 2 * NCHUNKS + 48);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_fair_share_equal),
		T(test_fair_share_weighted),
		T(test_fair_share_namespace),
		T(test_readahead_before_warmup),
		T(test_demand_before_background),
		T(test_rate_cap_background),
		T(test_rate_cap_demand_borrows),
		T(test_stage_after_warmup),
		T(test_stage_detector),
#undef T
	};

	printf("test_prefetch_sched: fair share, class order, demand first, backend_max_rate token bucket\n");
	fflush(stdout);
	log_level = LOG_CRIT;
	return cmocka_run_group_tests_name("prefetch_sched", tests, NULL, NULL);
}
