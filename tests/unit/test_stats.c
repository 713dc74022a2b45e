/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_stats: the feed-rate counters: the job rule, /proc identification of
 * processes and threads, exact per-user/job/process/GPU accounting (files
 * once per open, chunk hits and misses, stalls on own and others' fetches),
 * folding of gone threads, the node-only counters, rates, the JSON and
 * Prometheus renderers (the feed-rate rows and the daemon-wide table of a
 * report, and what one user's view of it shows), active time and the stall
 * share (idle gaps, overlapping READs, passthrough reads reported by the
 * hook or estimated at open), and exact totals under 8 threads hammering
 * one reader while snapshots run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"
#include "stats/pods.h"
#include "stats/procinfo.h"
#include "stats/stats.h"
#include "stats/stats_render.h"
#include "util.h"

#define UID	4242	/* no such user here: the name is the number */
#define CHUNK	(1u << 20)

static void test_job_rule(void **state)
{
	static const struct {
		const char *env, *cg, *want;
	} cases[] = {
		{ "train42", "/system.slice/docker-1.scope", "train42" },
		{ "", "/system.slice/docker-1.scope", "cgroup:docker-1.scope" },
		{ NULL, "/system.slice/slurmstepd.scope/job_123/step_0/user/task_0", "slurm:job_123" },
		{ NULL, "/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope",
		  "cgroup:cri-containerd-ab.scope" },	/* "1" is no pod uid */
		/* kubelet's systemd driver: the uid's '-' as '_' */
		{ NULL, "/kubepods.slice/kubepods-besteffort.slice/"
			"kubepods-besteffort-pod1f0e2d3c_aaaa_bbbb_cccc_0123456789ab.slice/cri-containerd-ab.scope",
		  "k8s:pod/1f0e2d3c-aaaa-bbbb-cccc-0123456789ab" },
		{ NULL, "/kubepods.slice/kubepods-pod1f0e2d3c_aaaa_bbbb_cccc_0123456789ab.slice/x.scope",
		  "k8s:pod/1f0e2d3c-aaaa-bbbb-cccc-0123456789ab" },
		/* its cgroupfs driver; and as seen from a container's cgroup namespace */
		{ NULL, "/kubepods/burstable/pod1f0e2d3c-aaaa-bbbb-cccc-0123456789ab/0a1b2c",
		  "k8s:pod/1f0e2d3c-aaaa-bbbb-cccc-0123456789ab" },
		{ NULL, "/../../kubepods/pod1f0e2d3c-aaaa-bbbb-cccc-0123456789ab/0a1b2c",
		  "k8s:pod/1f0e2d3c-aaaa-bbbb-cccc-0123456789ab" },
		/* a pod's STAGEFS_JOB stays under its pod (its namespace, once named) */
		{ "mine", "/kubepods/pod1f0e2d3c-aaaa-bbbb-cccc-0123456789ab/0a",
		  "k8s:pod/1f0e2d3c-aaaa-bbbb-cccc-0123456789ab/mine" },
		/* nobody poses as a pod */
		{ "k8s:vision/train-a", "/system.slice/docker-1.scope", "cgroup:docker-1.scope" },
		{ "k8s:vision/train-a", "/kubepods/pod1f0e2d3c-aaaa-bbbb-cccc-0123456789ab/0a",
		  "k8s:pod/1f0e2d3c-aaaa-bbbb-cccc-0123456789ab" },
		{ NULL, "/kubepods/podXf0e2d3c-aaaa-bbbb-cccc-0123456789ab/0a1b2c", "cgroup:0a1b2c" },
		/* a pod's name where a user may name cgroups (a delegated subtree) is none */
		{ NULL, "/user.slice/user-1000.slice/user@1000.service/"
			"kubepods-pod1f0e2d3c_aaaa_bbbb_cccc_0123456789ab.slice/x.scope", "cgroup:x.scope" },
		{ NULL, "/system.slice/pod1f0e2d3c-aaaa-bbbb-cccc-0123456789ab/0a1b2c", "cgroup:0a1b2c" },
		{ NULL, "/kubepods/pod1F0E2D3C-AAAA-BBBB-CCCC-0123456789AB/0a1b2c", "cgroup:0a1b2c" },
		{ NULL, "/user.slice/user-1000.slice/session-3.scope", "pgid:77" },
		{ NULL, "/user.slice/user-1000.slice/user@1000.service", "pgid:77" },
		{ NULL, "/user.slice/user-1000.slice/user@1000.service/app.slice/trainer.service",
		  "cgroup:trainer.service" },
		{ NULL, "/init.scope", "pgid:77" },
		{ NULL, "/system.slice", "pgid:77" },
		{ NULL, "/", "pgid:77" },
		{ NULL, "", "pgid:77" },
		{ NULL, NULL, "pgid:77" },
		{ NULL, "/a/job_12x", "cgroup:job_12x" },
	};
	char out[PROCINFO_JOB_MAX];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		procinfo_job_rule(cases[i].env, cases[i].cg, 77, out, sizeof(out));
		if (strcmp(out, cases[i].want))
			fail_msg("case %zu: got %s, want %s", i, out, cases[i].want);
	}
	procinfo_job_rule("abcdefghij", NULL, 1, out, 5);
	assert_string_equal(out, "abcd");
}

/* The pods the CSI plugin names: checked names, replaced, forgotten, bounded. */
static void test_pods(void **state)
{
	const char *u = "1f0e2d3c-aaaa-bbbb-cccc-0123456789ab";
	char out[PROCINFO_JOB_MAX], uid[PODS_UID_LEN + 1];

	(void)state;
	assert_false(pods_job(u, out, sizeof(out)));
	assert_int_equal(pods_set(u, "vision", "train-0"), 0);
	assert_true(pods_job(u, out, sizeof(out)));
	assert_string_equal(out, "k8s:vision/train-0");
	assert_int_equal(pods_set(u, "vision", "train-1.a"), 0);	/* replaced */
	assert_true(pods_job(u, out, sizeof(out)));
	assert_string_equal(out, "k8s:vision/train-1.a");
	assert_int_equal(pods_set("1F0E2D3C-aaaa-bbbb-cccc-0123456789ab", "v", "p"), -EINVAL);
	assert_int_equal(pods_set("1f0e2d3c-aaaa-bbbb-cccc-0123456789a", "v", "p"), -EINVAL);
	assert_int_equal(pods_set(u, "Vision", "p"), -EINVAL);
	assert_int_equal(pods_set(u, "v", "p/../x"), -EINVAL);
	assert_int_equal(pods_set(u, "v", "p q"), -EINVAL);
	assert_int_equal(pods_set(u, "v", ""), -EINVAL);
	assert_int_equal(pods_forget(u), 0);
	assert_int_equal(pods_forget(u), -ENOENT);
	assert_false(pods_job(u, out, sizeof(out)));
	for (int i = 0; i < PODS_MAX; i++) {
		snprintf(uid, sizeof(uid), "%08x-0000-0000-0000-000000000000", i);
		assert_int_equal(pods_set(uid, "n", "p"), 0);
	}
	assert_int_equal(pods_set(u, "n", "p"), -ENOSPC);
	for (int i = 0; i < PODS_MAX; i++) {
		snprintf(uid, sizeof(uid), "%08x-0000-0000-0000-000000000000", i);
		assert_int_equal(pods_forget(uid), 0);
	}
	assert_int_equal(pods_set(u, "n", "p"), 0);
	assert_int_equal(pods_forget(u), 0);
}

static pid_t spawn_with_job(const char *job)
{
	char env[256];
	char *const envp[] = { env, "PATH=/usr/bin:/bin", NULL };
	pid_t pid;

	snprintf(env, sizeof(env), "STAGEFS_JOB=%s", job);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execle("/bin/sleep", "sleep", "30", (char *)NULL, envp);
		_exit(127);
	}
	/*
	 * Wait until it is sleep with its environment: exec sets the comm a
	 * little before the new environment is readable in /proc.
	 */
	for (int i = 0; i < 1000; i++) {
		struct procinfo pi;

		if (!procinfo_read(pid, &pi) && !strcmp(pi.job, job))
			return pid;
		usleep(2000);
	}
	fail_msg("child %d never showed STAGEFS_JOB=%s", (int)pid, job);
	return -1;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static void *tid_thread(void *arg)
{
	pid_t *tid = arg;

	*tid = gettid();
	return NULL;
}

static void test_procinfo(void **state)
{
	struct procinfo pi, self;
	pthread_t th;
	pid_t tid = 0, child;

	assert_int_equal(procinfo_read(getpid(), &self), 0);
	assert_int_equal(self.tgid, getpid());
	assert_int_equal(self.pgid, getpgrp());
	assert_true(self.start > 0);
	assert_true(self.job[0] != '\0');
	assert_true(procinfo_alive(getpid(), getpid(), self.start));
	assert_false(procinfo_alive(getpid(), getpid(), self.start + 1));

	child = spawn_with_job("unit \"job\"");
	assert_int_equal(procinfo_read(child, &pi), 0);
	assert_string_equal(pi.job, "unit \"job\"");
	assert_int_equal(pi.tgid, child);
	assert_true(procinfo_alive(child, child, pi.start));
	reap(child);
	assert_false(procinfo_alive(child, child, pi.start));
	assert_false(procinfo_running(child, child));
	assert_int_equal(procinfo_read(child, &pi), -ESRCH);

	/* a thread's job is its process's; its tgid is the process */
	pthread_create(&th, NULL, tid_thread, &tid);
	pthread_join(th, NULL);
	assert_int_equal(procinfo_read(gettid(), &pi), 0);
	assert_int_equal(pi.tgid, getpid());
	assert_string_equal(pi.job, self.job);
}

/* ---- stats ---- */

static struct stats *mkstats(uint32_t keep_s)
{
	struct stats_opts o = { .no_ticker = true, .proc_keep_s = keep_s };
	struct stats *st = NULL;

	assert_int_equal(stats_create(&o, &st), 0);
	return st;
}

static struct stats_snap *snap(struct stats *st)
{
	struct stats_snap *s = NULL;

	assert_int_equal(stats_snapshot(st, &s), 0);
	return s;
}

static const struct stats_row *row(const struct stats_snap *s, enum stats_kind k,
				   uint32_t uid, const char *job)
{
	for (size_t i = 0; i < s->nrows; i++) {
		const struct stats_row *r = &s->rows[i];

		if (r->kind == k && (k == STATS_GPU || r->uid == uid) &&
		    (!job || !strcmp(r->job, job)))
			return r;
	}
	return NULL;
}

/* One READ of @n bytes at @off by @pid through @so, fetching @fetch chunks. */
static void do_read(struct stats *st, struct stats_open *so, const void *file,
		    pid_t pid, uint32_t uid, uint64_t off, ssize_t n, int fetch)
{
	struct stats_read rd;

	stats_read_begin(st, &rd, file, off, n > 0 ? (size_t)n : 4096, CHUNK);
	for (int i = 0; i < fetch; i++) {
		stats_fetch_begin(st, file, (uint32_t)(off / CHUNK) + (uint32_t)i);
		stats_fetch_end(st, file, (uint32_t)(off / CHUNK) + (uint32_t)i, CHUNK);
	}
	stats_read_end(&rd, so, pid, uid, n);
}

static void test_accounting(void **state)
{
	struct stats *st = mkstats(0);
	struct stats_open a, b;
	struct stats_snap *s;
	const struct stats_row *u, *j, *p, *n;
	struct procinfo self;
	int file;

	assert_int_equal(procinfo_read(getpid(), &self), 0);
	stats_open_init(st, &a, getpid(), UID);
	stats_open_init(st, &b, getpid(), UID);
	/* a: 3 READs, the first spanning two chunks and fetching one */
	do_read(st, &a, &file, getpid(), UID, CHUNK - 100, 1000, 1);
	do_read(st, &a, &file, getpid(), UID, CHUNK + 900, 4096, 0);
	do_read(st, &a, &file, getpid(), UID, 10 * CHUNK, 0, 0);	/* EOF */
	/* b: an EOF READ only, then an error */
	do_read(st, &b, &file, getpid(), UID, 0, 0, 0);
	do_read(st, &b, &file, getpid(), UID, 0, -EIO, 0);
	stats_open_passthrough(st, &b, 12345, CHUNK, false);	/* reads reported apart */

	usleep(2000);	/* rates need a millisecond of history */
	s = snap(st);
	u = row(s, STATS_USER, UID, NULL);
	j = row(s, STATS_JOB, UID, self.job);
	p = row(s, STATS_PROC, UID, NULL);
	n = &s->node;
	assert_non_null(u);
	assert_non_null(j);
	assert_non_null(p);
	assert_string_equal(u->user, "4242");
	assert_string_equal(j->user, "4242");
	assert_int_equal(p->pid, getpid());
	assert_true(p->alive);
	for (const struct stats_row *r = u; r; r = r == u ? j : r == j ? p : r == p ? n : NULL) {
		assert_int_equal(r->total[STATS_READ_BYTES], 5096);
		assert_int_equal(r->total[STATS_FILES], 1);	/* b never got a byte */
		assert_int_equal(r->total[STATS_OPENS], 2);
		assert_int_equal(r->total[STATS_READS], 5);
		assert_int_equal(r->total[STATS_READ_ERRORS], 1);
		assert_int_equal(r->total[STATS_HITS], 2);	/* 3 pieces, 1 fetched */
		assert_int_equal(r->total[STATS_MISSES], 1);
		assert_int_equal(r->total[STATS_BACKEND_BYTES], CHUNK);
		assert_int_equal(r->total[STATS_PT_OPENS], 1);
		assert_int_equal(r->total[STATS_PT_BYTES], 12345);
		assert_true(r->total[STATS_STALL_NS] > 0);
		assert_true(r->total[STATS_STALL_NS] < r->total[STATS_READ_NS]);
		assert_true(r->rate[STATS_W60][STATS_READ_BYTES] > 0);
	}
	assert_true(stats_hit_ratio(n->total) > 0.66 && stats_hit_ratio(n->total) < 0.67);
	assert_int_equal(s->untracked_reads, 0);
	stats_snap_free(s);

	/* a fetch outside any READ (warmup) is node-wide only */
	stats_fetch_begin(st, &file, 99);
	stats_fetch_end(st, &file, 99, 777);
	s = snap(st);
	assert_int_equal(s->node.total[STATS_BACKEND_BYTES], CHUNK + 777);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_BACKEND_BYTES], CHUNK);
	stats_snap_free(s);

	stats_open_release(st, &a);
	stats_open_release(st, &b);
	stats_destroy(st);
}

struct fetcher {
	struct stats *st;
	const void *file;
	uint32_t idx;
};

static void *fetch_thread(void *arg)
{
	struct fetcher *f = arg;

	stats_fetch_begin(f->st, f->file, f->idx);
	usleep(1000);
	stats_fetch_end(f->st, f->file, f->idx, 100);
	return NULL;
}

static void test_stall_on_others(void **state)
{
	struct stats *st = mkstats(0);
	struct stats_open so;
	struct stats_read rd;
	struct stats_snap *s;
	pthread_t th;
	int file, other;
	struct fetcher f = { st, &file, 3 };

	stats_open_init(st, &so, getpid(), UID);
	/* a hit on a chunk nobody fetches: no stall */
	do_read(st, &so, &file, getpid(), UID, 0, 100, 0);
	s = snap(st);
	assert_int_equal(s->node.total[STATS_STALL_NS], 0);
	stats_snap_free(s);

	/* a fill of another file's chunk does not make this READ stall */
	f.file = &other;
	stats_read_begin(st, &rd, &file, 3ull * CHUNK, 100, CHUNK);
	pthread_create(&th, NULL, fetch_thread, &f);
	pthread_join(th, NULL);
	stats_read_end(&rd, &so, getpid(), UID, 100);
	s = snap(st);
	assert_int_equal(s->node.total[STATS_STALL_NS], 0);
	stats_snap_free(s);

	/* another thread's fill of our chunk, begun while we ran: a stall */
	f.file = &file;
	stats_read_begin(st, &rd, &file, 3ull * CHUNK, 100, CHUNK);
	pthread_create(&th, NULL, fetch_thread, &f);
	pthread_join(th, NULL);
	stats_read_end(&rd, &so, getpid(), UID, 100);
	s = snap(st);
	assert_true(s->node.total[STATS_STALL_NS] >= 1000000);
	/* it was not our miss */
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_MISSES], 0);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_HITS], 3);
	assert_int_equal(s->node.total[STATS_MISSES], 2);
	stats_snap_free(s);

	/* a fill running when we begin: a stall */
	stats_fetch_begin(st, &file, 5);
	stats_read_begin(st, &rd, &file, 5ull * CHUNK, 100, CHUNK);
	stats_read_end(&rd, &so, getpid(), UID, 100);
	stats_fetch_end(st, &file, 5, -EIO);
	s = snap(st);
	assert_int_equal(s->node.total[STATS_READS], 4);
	assert_true(s->node.total[STATS_STALL_NS] > 1000000);
	/* the failed fetch: no miss, a node-only backend error */
	assert_int_equal(s->node.total[STATS_MISSES], 2);
	assert_int_equal(s->node_only[STATS_NODE_BACKEND_ERRORS], 1);
	stats_snap_free(s);
	stats_open_release(st, &so);
	stats_destroy(st);
}

struct other_reader {
	struct stats *st;
	struct stats_open *so;
};

static void *other_reader_thread(void *arg)
{
	struct other_reader *o = arg;
	int file;

	do_read(o->st, o->so, &file, gettid(), UID, 0, 20, 0);
	return NULL;
}

static void test_threads_and_gone(void **state)
{
	struct stats *st = mkstats(1);
	struct stats_open so, co;
	struct other_reader o = { st, &so };
	struct stats_snap *s;
	const struct stats_row *p;
	pthread_t th;
	pid_t child;
	int file;

	/* a READ by another thread of the opener's process: its own record */
	stats_open_init(st, &so, getpid(), UID);
	do_read(st, &so, &file, getpid(), UID, 0, 10, 0);
	pthread_create(&th, NULL, other_reader_thread, &o);
	pthread_join(th, NULL);
	s = snap(st);
	p = row(s, STATS_PROC, UID, NULL);
	assert_int_equal(p->threads, 2);
	assert_int_equal(p->total[STATS_READ_BYTES], 30);
	assert_int_equal(p->total[STATS_FILES], 1);
	stats_snap_free(s);

	/* a child process with its own job */
	child = spawn_with_job("train42");
	stats_open_init(st, &co, child, UID + 1);
	do_read(st, &co, &file, child, UID + 1, 0, 300, 0);
	stats_open_release(st, &co);

	s = snap(st);
	assert_int_equal(row(s, STATS_JOB, UID + 1, "train42")->total[STATS_READ_BYTES], 300);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_READ_BYTES], 30);
	assert_int_equal(s->nkind[STATS_PROC], 2);	/* threads merged */
	assert_int_equal(s->nkind[STATS_USER], 2);
	stats_snap_free(s);

	/* the child goes: its row stays for proc_keep_s, its counts for good */
	reap(child);
	stats_tick(st);
	s = snap(st);
	assert_false(row(s, STATS_PROC, UID + 1, NULL)->alive);
	stats_snap_free(s);
	usleep(1100 * 1000);
	stats_tick(st);
	s = snap(st);
	assert_null(row(s, STATS_PROC, UID + 1, NULL));
	assert_int_equal(s->nkind[STATS_PROC], 1);
	assert_int_equal(row(s, STATS_JOB, UID + 1, "train42")->total[STATS_READ_BYTES], 300);
	assert_int_equal(row(s, STATS_JOB, UID + 1, "train42")->total[STATS_FILES], 1);
	assert_int_equal(row(s, STATS_USER, UID + 1, NULL)->total[STATS_OPENS], 1);
	assert_int_equal(s->node.total[STATS_READ_BYTES], 330);
	stats_snap_free(s);

	/* a reader that cannot be identified (another pid namespace: pid 0) */
	do_read(st, NULL, &file, 0, UID + 2, 0, 5, 0);
	s = snap(st);
	assert_string_equal(row(s, STATS_JOB, UID + 2, NULL)->job, "unknown");
	stats_snap_free(s);

	/* pid 0: a peer in another pid namespace; NULL job: "unknown" */
	assert_int_equal(stats_gpu_account(st, 0, UID, "train42", 1, 1000), 0);
	assert_int_equal(stats_gpu_account(st, 0, UID, NULL, 0, 24), 0);
	assert_int_equal(stats_gpu_account(st, 0, UID, NULL, -1, 24), -EINVAL);
	s = snap(st);
	assert_int_equal(s->nkind[STATS_GPU], 2);
	assert_int_equal(row(s, STATS_GPU, 0, NULL)->gpu, 0);
	assert_int_equal(row(s, STATS_GPU, 0, NULL)->total[STATS_GPU_BYTES], 24);
	assert_int_equal(row(s, STATS_JOB, UID, "train42")->total[STATS_GPU_BYTES], 1000);
	assert_int_equal(row(s, STATS_JOB, UID, "unknown")->total[STATS_GPU_BYTES], 24);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_GPU_BYTES], 1024);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_READ_BYTES], 30);
	assert_int_equal(s->node.total[STATS_GPU_BYTES], 1024);
	stats_snap_free(s);
	stats_open_release(st, &so);
	stats_destroy(st);
}

/* What the client library reports over the control socket. */
static void test_client_reports(void **state)
{
	struct stats *st = mkstats(60);
	struct stats_snap *s;
	const struct stats_row *p;
	pid_t child = spawn_with_job("jobA");

	/* charged like the peer's own READs: its process, user and job */
	stats_client_open(st, child, UID);
	assert_int_equal(stats_client_account(st, child, UID, NULL, 1000, 1), 0);
	assert_int_equal(stats_client_account(st, child, UID, "jobA", 24, 0), 0);
	assert_int_equal(stats_gpu_account(st, child, UID, NULL, 2, 4096), 0);
	/* a job the library names (STAGEFS_JOB set after exec): no process row */
	assert_int_equal(stats_client_account(st, child, UID, "late", 50, 1), 0);
	assert_int_equal(stats_gpu_account(st, child, UID, "late", 2, 10), 0);
	assert_int_equal(stats_gpu_account(st, child, UID, NULL, 70000, 1), -EINVAL);
	/* a pod's job name is the daemon's to give: charged as the peer's own */
	assert_int_equal(stats_client_account(st, child, UID, "k8s:vision/train-a", 7, 0), 0);
	assert_int_equal(stats_client_account(st, 0, UID, "k8s:vision/train-a", 3, 0), 0);
	s = snap(st);
	assert_null(row(s, STATS_JOB, UID, "k8s:vision/train-a"));
	assert_int_equal(row(s, STATS_JOB, UID, "unknown")->total[STATS_CLIENT_BYTES], 3);
	stats_snap_free(s);
	s = snap(st);
	p = row(s, STATS_PROC, UID, NULL);
	assert_non_null(p);
	assert_int_equal(p->pid, child);
	assert_int_equal(p->total[STATS_READ_BYTES], 1031);
	assert_int_equal(p->total[STATS_CLIENT_BYTES], 1031);
	assert_int_equal(p->total[STATS_FILES], 1);
	assert_int_equal(p->total[STATS_GPU_BYTES], 4096);
	assert_int_equal(p->total[STATS_READS], 0);
	assert_int_equal(p->total[STATS_OPENS], 1);
	assert_int_equal(s->node.total[STATS_OPENS], 1);
	assert_int_equal(s->node_only[STATS_NODE_CLIENT_OPENS], 1);
	assert_int_equal(row(s, STATS_JOB, UID, "jobA")->total[STATS_CLIENT_BYTES], 1031);
	assert_int_equal(row(s, STATS_JOB, UID, "jobA")->total[STATS_GPU_BYTES], 4096);
	assert_int_equal(row(s, STATS_JOB, UID, "late")->total[STATS_READ_BYTES], 50);
	assert_int_equal(row(s, STATS_JOB, UID, "late")->total[STATS_FILES], 1);
	assert_int_equal(row(s, STATS_JOB, UID, "late")->total[STATS_GPU_BYTES], 10);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_CLIENT_BYTES], 1084);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_FILES], 2);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_GPU_BYTES], 4106);
	assert_int_equal(row(s, STATS_GPU, 0, NULL)->gpu, 2);
	assert_int_equal(row(s, STATS_GPU, 0, NULL)->total[STATS_GPU_BYTES], 4106);
	assert_int_equal(s->nkind[STATS_GPU], 1);
	assert_int_equal(s->node.total[STATS_READ_BYTES], 1084);
	assert_int_equal(s->node.total[STATS_CLIENT_BYTES], 1084);
	assert_int_equal(s->node.total[STATS_GPU_BYTES], 4106);
	stats_snap_free(s);
	reap(child);
	stats_destroy(st);
}

struct node_adder {
	struct stats *st;
	enum stats_node_field f;
};

static void *node_add_thread(void *arg)
{
	struct node_adder *a = arg;

	for (int i = 0; i < 1000; i++)
		stats_node_add(a->st, a->f, 3);
	return NULL;
}

/*
 * Node-only counters: summed over the shards of many threads, in a
 * snapshot and in stats_node_totals() alike, charged to no row.
 */
static void test_node_only(void **state)
{
	struct stats *st = mkstats(0);
	struct node_adder a[4];
	pthread_t th[4];
	uint64_t total[STATS_NFIELDS], node_only[STATS_NODE_NFIELDS];
	struct stats_snap *s;
	int file;

	for (int i = 0; i < 4; i++) {
		a[i] = (struct node_adder){ st, i % 2 ? STATS_NODE_PT_REUSED
						      : STATS_NODE_LOOKUP_READAHEADS };
		assert_int_equal(pthread_create(&th[i], NULL, node_add_thread, &a[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	stats_node_add(st, STATS_NODE_OPEN_REQUESTS, 1);
	stats_fetch_begin(st, &file, 1);
	stats_fetch_end(st, &file, 1, -EIO);
	stats_fetch_begin(st, &file, 1);
	stats_fetch_end(st, &file, 1, 4096);
	stats_node_add(NULL, STATS_NODE_OPEN_REQUESTS, 1);	/* no counters: nothing */

	s = snap(st);
	stats_node_totals(st, total, node_only);
	assert_memory_equal(total, s->node.total, sizeof(total));
	assert_memory_equal(node_only, s->node_only, sizeof(node_only));
	assert_int_equal(node_only[STATS_NODE_PT_REUSED], 6000);
	assert_int_equal(node_only[STATS_NODE_LOOKUP_READAHEADS], 6000);
	assert_int_equal(node_only[STATS_NODE_OPEN_REQUESTS], 1);
	assert_int_equal(node_only[STATS_NODE_BACKEND_ERRORS], 1);
	assert_int_equal(node_only[STATS_NODE_CLIENT_OPENS], 0);
	assert_int_equal(total[STATS_MISSES], 1);
	assert_int_equal(total[STATS_BACKEND_BYTES], 4096);
	assert_int_equal(total[STATS_OPENS], 0);
	assert_int_equal(s->nrows, 0);
	stats_snap_free(s);

	stats_node_totals(NULL, total, node_only);
	for (int i = 0; i < STATS_NFIELDS; i++)
		assert_int_equal(total[i], 0);
	for (int i = 0; i < STATS_NODE_NFIELDS; i++)
		assert_int_equal(node_only[i], 0);
	stats_destroy(st);
}

/* A daemon-wide table as fuse/vfiles.c gathers one: each kind of row. */
static const struct stats_metric table[] = {
	{ .key = "version", .type = STATS_TEXT, .text = "0.1 \"x\"" },
	{ .key = "hint_fetches", .value = 12 },		/* JSON only */
	{ .key = "backend_errors", .prom = "stagefs_backend_errors_total",
	  .type = STATS_COUNTER, .help = "Chunk fetches that failed.", .value = 3 },
	{ .key = "prefetch_queued", .prom = "stagefs_prefetch_queued",
	  .type = STATS_GAUGE, .help = "Requests waiting now.", .value = 9 },
	{ .key = "backend_throttle_ms", .prom = "stagefs_backend_throttle_seconds_total",
	  .type = STATS_COUNTER, .help = "Time waited.", .value = 1500, .prom_scale = 1e-3 },
	{ .key = "cache_used_bytes", .prom = "stagefs_cache_used_bytes",
	  .type = STATS_GAUGE, .help = "Disk bytes held by cached chunks.", .value = 4096 },
	{ .key = "cache_limit_bytes", .prom = "stagefs_cache_limit_bytes",
	  .type = STATS_GAUGE, .help = "Current cache capacity in bytes (0: unknown).", .value = 0 },
	{ .key = "passthrough_accounting", .prom = "stagefs_passthrough_accounting_info",
	  .type = STATS_INFO, .label = "mode", .help = "How passthrough reads are counted.",
	  .text = "bpf" },
};

/*
 * The report of @s (NULL: no feed, as after a failed snapshot) and the
 * table, as @v sees it.
 */
static char *render_view(struct stats_snap *s, bool prom, struct stats_view v)
{
	struct stats_report rep = {
		.metrics = table,
		.nmetrics = sizeof(table) / sizeof(table[0]),
		.feed = s,
		.feed_error = s ? 0 : -ENOMEM,
		.view = v,
	};
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (prom)
		stats_render_prom(&rep, f);
	else
		stats_render_json(&rep, f);
	fclose(f);
	return buf;
}

/* ... as root sees it: every row. */
static char *render(struct stats_snap *s, bool prom)
{
	return render_view(s, prom, (struct stats_view){ .all = true });
}

static void test_render(void **state)
{
	struct stats *st = mkstats(0);
	struct stats_open so;
	struct stats_snap *s;
	struct json_doc *doc = NULL;
	const struct json *r, *jobs, *job = NULL;
	char err[128], *text, line[512];
	pid_t child = spawn_with_job("we\"ird\\job\n\xff");
	int file;

	stats_open_init(st, &so, child, UID);
	do_read(st, &so, &file, child, UID, 0, 123456789, 2);
	stats_gpu_account(st, 0, UID, "x", 3, 77);
	stats_client_account(st, child, UID, NULL, 5000, 1);
	s = snap(st);
	text = render(s, false);
	if (json_parse(text, strlen(text), &doc, err, sizeof(err)))
		fail_msg("%s\n%s", err, text);
	r = json_root(doc);
	assert_true(json_u64(json_get(json_get(r, "node"), "read_bytes"), 0) == 123456789 + 5000);
	assert_non_null(json_get(json_get(json_get(r, "node"), "rates"), "10s"));
	jobs = json_get(r, "jobs");
	for (size_t i = 0; i < json_len(jobs); i++)
		if (!strcmp(json_str(json_get(json_at(jobs, i), "job"), ""), "we\"ird\\job__"))
			job = json_at(jobs, i);
	assert_non_null(job);
	assert_true(json_u64(json_get(job, "read_bytes"), 0) == 123456789 + 5000);
	assert_true(json_u64(json_get(job, "client_read_bytes"), 0) == 5000);
	assert_true(json_u64(json_get(job, "files_read"), 0) == 2);
	assert_true(json_u64(json_get(job, "cache_misses"), 0) == 2);
	assert_string_equal(json_str(json_get(job, "user"), ""), "4242");
	assert_int_equal(json_len(json_get(r, "users")), 1);
	assert_int_equal(json_len(json_get(r, "processes")), 1);
	assert_true(json_u64(json_get(json_at(json_get(r, "gpus"), 0), "gpu_bytes"), 0) == 77);
	json_doc_free(doc);
	free(text);

	text = render(s, true);
	snprintf(line, sizeof(line),
		 "stagefs_read_bytes_total{user=\"4242\",job=\"we\\\"ird\\\\job__\"} 123461789\n");
	if (!strstr(text, line))
		fail_msg("no line %s in\n%s", line, text);
	assert_non_null(strstr(text, "# TYPE stagefs_read_bytes_total counter\n"));
	assert_non_null(strstr(text, "# HELP stagefs_files_read_total "));
	assert_non_null(strstr(text, "stagefs_gpu_bytes_total{gpu=\"3\"} 77\n"));
	assert_non_null(strstr(text, "stagefs_client_read_bytes_total{user=\"4242\",job=\"x\"} 0\n"));
	assert_non_null(strstr(text, "# TYPE stagefs_client_read_bytes_total counter\n"));
	assert_non_null(strstr(text, "stagefs_cache_used_bytes 4096\n"));
	assert_non_null(strstr(text, "stagefs_cache_limit_bytes 0\n"));
	assert_non_null(strstr(text, "stagefs_fetched_bytes_total 2097152\n"));
	/* every line is a comment or NAME{...} VALUE / NAME VALUE */
	for (char *l = text, *e; *l; l = e + 1) {
		e = strchr(l, '\n');
		assert_non_null(e);
		assert_true(e > l);
		assert_true(l[0] == '#' || (l[0] >= 'a' && l[0] <= 'z'));
	}
	free(text);
	stats_snap_free(s);
	stats_open_release(st, &so);
	reap(child);
	stats_destroy(st);
}

/*
 * A user's view: their own user, job and process rows, the node totals
 * and the GPU rows; no row of another user in either text, whatever the
 * other's names.  A zeroed view is uid 0's.
 */
static void test_render_view(void **state)
{
	struct stats *st = mkstats(0);
	struct stats_open so_a, so_b;
	struct stats_snap *s;
	struct json_doc *doc = NULL;
	const struct json *r;
	char err[128], *text;
	pid_t ca = spawn_with_job("jobA"), cb = spawn_with_job("secretjobB");
	int file;

	stats_open_init(st, &so_a, ca, UID);
	stats_open_init(st, &so_b, cb, UID + 1);
	do_read(st, &so_a, &file, ca, UID, 0, 1000, 1);
	do_read(st, &so_b, &file, cb, UID + 1, 0, 2000, 0);
	stats_gpu_account(st, cb, UID + 1, NULL, 5, 77);
	s = snap(st);

	text = render_view(s, false, (struct stats_view){ .uid = UID });
	if (json_parse(text, strlen(text), &doc, err, sizeof(err)))
		fail_msg("%s\n%s", err, text);
	r = json_root(doc);
	/* the node totals are everyone's */
	assert_true(json_u64(json_get(json_get(r, "node"), "read_bytes"), 0) == 3000);
	assert_int_equal(json_len(json_get(r, "users")), 1);
	assert_int_equal(json_u64(json_get(json_at(json_get(r, "users"), 0), "uid"), 0), UID);
	assert_int_equal(json_len(json_get(r, "jobs")), 1);
	assert_string_equal(json_str(json_get(json_at(json_get(r, "jobs"), 0), "job"), ""), "jobA");
	assert_int_equal(json_len(json_get(r, "processes")), 1);
	assert_int_equal(json_u64(json_get(json_at(json_get(r, "processes"), 0), "pid"), 0), ca);
	assert_int_equal(json_len(json_get(r, "gpus")), 1);
	assert_null(strstr(text, "secretjobB"));
	/* uid and name of the other user; a bare 4243 may be a pid or a time */
	assert_null(strstr(text, "\"uid\": 4243"));
	assert_null(strstr(text, "\"4243\""));
	json_doc_free(doc);
	free(text);

	text = render_view(s, true, (struct stats_view){ .uid = UID });
	assert_non_null(strstr(text, "stagefs_read_bytes_total{user=\"4242\",job=\"jobA\"} 1000\n"));
	assert_non_null(strstr(text, "stagefs_gpu_bytes_total{gpu=\"5\"} 77\n"));
	assert_non_null(strstr(text, "# TYPE stagefs_read_bytes_total counter\n"));
	assert_null(strstr(text, "secretjobB"));
	assert_null(strstr(text, "user=\"4243\""));
	free(text);

	/* zeroed: uid 0's rows, of which there are none */
	text = render_view(s, false, (struct stats_view){ 0 });
	assert_null(strstr(text, "jobA"));
	assert_null(strstr(text, "secretjobB"));
	assert_non_null(strstr(text, "\"node\": {"));
	free(text);

	/* all: both */
	text = render(s, true);
	assert_non_null(strstr(text, "jobA"));
	assert_non_null(strstr(text, "secretjobB"));
	free(text);

	stats_snap_free(s);
	stats_open_release(st, &so_a);
	stats_open_release(st, &so_b);
	reap(ca);
	reap(cb);
	stats_destroy(st);
}

/* The daemon-wide table: in both texts, each row as its kind says. */
static void test_render_table(void **state)
{
	struct stats *st = mkstats(0);
	struct stats_snap *s = snap(st);
	struct json_doc *doc = NULL;
	const struct json *r;
	char err[128], *text;

	text = render(s, false);
	if (json_parse(text, strlen(text), &doc, err, sizeof(err)))
		fail_msg("%s\n%s", err, text);
	r = json_root(doc);
	assert_string_equal(json_str(json_get(r, "version"), ""), "0.1 \"x\"");
	assert_true(json_u64(json_get(r, "hint_fetches"), 0) == 12);
	assert_true(json_u64(json_get(r, "backend_errors"), 0) == 3);
	assert_true(json_u64(json_get(r, "backend_throttle_ms"), 0) == 1500);
	assert_non_null(json_get(r, "node"));
	/* one row a line: tools/bench/ and tools/dev/demo.sh read them so */
	assert_non_null(strstr(text, "\n  \"backend_errors\": 3,\n"));
	assert_non_null(strstr(text, "\n  \"version\": \"0.1 \\\"x\\\"\",\n"));
	assert_string_equal(json_str(json_get(r, "passthrough_accounting"), ""), "bpf");
	/* the new per-row fields, in the node and its rates */
	assert_non_null(json_get(json_get(r, "node"), "active_ns"));
	assert_non_null(json_get(json_get(r, "node"), "read_bytes_estimated"));
	assert_non_null(json_get(json_get(r, "node"), "passthrough_read_bytes"));
	assert_non_null(json_get(json_get(json_get(json_get(r, "node"), "rates"), "10s"),
				 "read_bytes_estimated_per_s"));
	json_doc_free(doc);
	free(text);

	text = render(s, true);
	assert_non_null(strstr(text, "# TYPE stagefs_backend_errors_total counter\n"
				     "stagefs_backend_errors_total 3\n"));
	assert_non_null(strstr(text, "# HELP stagefs_backend_errors_total Chunk fetches that failed.\n"));
	assert_non_null(strstr(text, "# TYPE stagefs_prefetch_queued gauge\n"
				     "stagefs_prefetch_queued 9\n"));
	assert_non_null(strstr(text, "\nstagefs_backend_throttle_seconds_total 1.500000000\n"));
	assert_non_null(strstr(text, "# TYPE stagefs_passthrough_accounting_info gauge\n"
				     "stagefs_passthrough_accounting_info{mode=\"bpf\"} 1\n"));
	assert_non_null(strstr(text, "# TYPE stagefs_active_seconds_total counter\n"));
	assert_non_null(strstr(text, "# TYPE stagefs_read_bytes_estimated_total counter\n"));
	assert_null(strstr(text, "hint_fetches"));
	assert_null(strstr(text, "version"));
	assert_non_null(strstr(text, "stagefs_read_bytes_total"));
	free(text);
	stats_snap_free(s);

	/* no feed-rate snapshot: the JSON says why, Prometheus has the table */
	text = render(NULL, false);
	if (json_parse(text, strlen(text), &doc, err, sizeof(err)))
		fail_msg("%s\n%s", err, text);
	r = json_root(doc);
	assert_non_null(json_get(r, "node"));
	assert_null(json_get(r, "users"));
	assert_non_null(json_str(json_get(r, "feedrate_error"), NULL));
	assert_true(json_u64(json_get(r, "backend_errors"), 0) == 3);
	json_doc_free(doc);
	free(text);
	text = render(NULL, true);
	assert_non_null(strstr(text, "stagefs_backend_errors_total 3\n"));
	assert_null(strstr(text, "stagefs_read_bytes_total"));
	free(text);
	stats_destroy(st);
}


/* ---- active time and the stall share ---- */

static struct stats *mkstats_gap(uint64_t gap_ns)
{
	struct stats_opts o = { .no_ticker = true, .idle_gap_ns = gap_ns };
	struct stats *st = NULL;

	assert_int_equal(stats_create(&o, &st), 0);
	return st;
}

/* A fetch that takes @ms, made by the READ in flight on this thread. */
static void slow_fetch(struct stats *st, const void *file, uint32_t idx, unsigned ms)
{
	stats_fetch_begin(st, file, idx);
	usleep(ms * 1000);
	stats_fetch_end(st, file, idx, CHUNK);
}

static void test_active_passthrough(void **state)
{
	struct stats *st = mkstats_gap(2000000000ULL);
	const uint64_t s1 = 1000000000ULL;
	struct stats_open so;
	struct stats_snap *s;
	const struct stats_row *u;
	uint64_t t;

	stats_open_init(st, &so, getpid(), UID);
	stats_open_passthrough(st, &so, 10 * CHUNK, CHUNK, false);
	t = so.open_ns;
	/* the hook's reports, at set times after the open */
	stats_passthrough_read(st, &so, getpid(), getpid(), UID, 3 * CHUNK, 3, s1 / 2, t + s1, CHUNK, false);
	stats_passthrough_read(st, &so, getpid(), getpid(), UID, CHUNK / 2, 2, s1 / 10, t + s1 + s1 / 2,
			       CHUNK, false);
	/* 8.5 s later: an idle gap; only the calls' own 0.1 s count */
	stats_passthrough_read(st, &so, getpid(), getpid(), UID, 100, 1, s1 / 10, t + 10 * s1, CHUNK, false);
	/* an EOF-only report (no bytes) counts nothing */
	stats_passthrough_read(st, &so, getpid(), getpid(), UID, 0, 0, 5, t + 11 * s1, CHUNK, false);
	stats_open_release(st, &so);	/* now, before the last report's end: adds nothing */

	s = snap(st);
	u = row(s, STATS_USER, UID, NULL);
	assert_non_null(u);
	for (const struct stats_row *r = u; r; r = r == u ? &s->node : NULL) {
		assert_int_equal(r->total[STATS_READ_BYTES], 3 * CHUNK + CHUNK / 2 + 100);
		assert_int_equal(r->total[STATS_PT_READ_BYTES], 3 * CHUNK + CHUNK / 2 + 100);
		assert_int_equal(r->total[STATS_READ_BYTES_EST], 0);
		assert_int_equal(r->total[STATS_PT_BYTES], 10 * CHUNK);
		assert_int_equal(r->total[STATS_FILES], 1);
		assert_int_equal(r->total[STATS_READS], 0);	/* no READ reached the daemon */
		assert_int_equal(r->total[STATS_HITS], (3 + 3) + (2 + 0) + (1 + 0));
		assert_int_equal(r->total[STATS_MISSES], 0);
		assert_int_equal(r->total[STATS_STALL_NS], 0);
		assert_int_equal(r->total[STATS_ACTIVE_NS], s1 + s1 / 2 + s1 / 10);
		assert_true(stats_stall_ratio(r->total) == 0);
	}
	stats_snap_free(s);
	stats_destroy(st);
}

static void test_active_estimate(void **state)
{
	struct stats *st = mkstats_gap(2000000000ULL);
	struct stats_open so;
	struct stats_snap *s;
	const struct stats_row *u;

	stats_open_init(st, &so, getpid(), UID);
	stats_open_passthrough(st, &so, 3 * CHUNK + 5, CHUNK, true);
	usleep(30000);
	stats_open_release(st, &so);
	s = snap(st);
	u = row(s, STATS_USER, UID, NULL);
	assert_non_null(u);
	/* the whole file, estimated: the bound is what was opened */
	assert_int_equal(u->total[STATS_READ_BYTES], 3 * CHUNK + 5);
	assert_int_equal(u->total[STATS_READ_BYTES_EST], 3 * CHUNK + 5);
	assert_int_equal(u->total[STATS_PT_READ_BYTES], 3 * CHUNK + 5);
	assert_int_equal(u->total[STATS_FILES], 1);
	assert_int_equal(u->total[STATS_HITS], 4);
	/* the open's life is active, with no stall */
	assert_true(u->total[STATS_ACTIVE_NS] >= 30000000);
	assert_int_equal(u->total[STATS_STALL_NS], 0);
	stats_snap_free(s);

	/* an empty file: opened, nothing read, nothing estimated */
	stats_open_init(st, &so, getpid(), UID);
	stats_open_passthrough(st, &so, 0, CHUNK, true);
	stats_open_release(st, &so);
	s = snap(st);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_FILES], 1);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_PT_OPENS], 2);
	stats_snap_free(s);
	stats_destroy(st);
}

static void test_stall_share(void **state)
{
	struct stats *st = mkstats_gap(5000000ULL);	/* 5 ms */
	struct stats_read a, b;
	struct stats_open so;
	struct stats_snap *s;
	const struct stats_row *u;
	uint64_t act0, stall0, t0;
	int file;

	stats_open_init(st, &so, getpid(), UID);
	/* one cold READ (a 20 ms fetch), then warm ones back to back */
	do_read(st, &so, &file, getpid(), UID, 0, 4096, 0);
	stats_read_begin(st, &a, &file, CHUNK, 4096, CHUNK);
	slow_fetch(st, &file, 1, 20);
	stats_read_end(&a, &so, getpid(), UID, 4096);
	for (int i = 0; i < 10; i++)
		do_read(st, &so, &file, getpid(), UID, (uint64_t)i * 4096, 4096, 0);
	s = snap(st);
	u = row(s, STATS_USER, UID, NULL);
	assert_true(u->total[STATS_STALL_NS] >= 20000000);
	assert_true(u->total[STATS_STALL_NS] <= u->total[STATS_ACTIVE_NS]);
	assert_true(u->total[STATS_STALL_NS] <= u->total[STATS_READ_NS]);
	/* nearly all of this reader's time was the cold READ */
	assert_true(stats_stall_ratio(u->total) > 0.5 && stats_stall_ratio(u->total) <= 1);
	act0 = u->total[STATS_ACTIVE_NS];
	stall0 = u->total[STATS_STALL_NS];
	stats_snap_free(s);

	/* an idle gap (30 ms > 5 ms): not active */
	usleep(30000);
	t0 = now_ns();
	do_read(st, &so, &file, getpid(), UID, 0, 4096, 0);
	s = snap(st);
	u = row(s, STATS_USER, UID, NULL);
	assert_true(u->total[STATS_ACTIVE_NS] - act0 <= now_ns() - t0);
	assert_int_equal(u->total[STATS_STALL_NS], stall0);
	act0 = u->total[STATS_ACTIVE_NS];
	stats_snap_free(s);

	/* two stalled READs of one thread at once (readahead): their time counts once */
	t0 = now_ns();
	stats_read_begin(st, &a, &file, 8ull * CHUNK, 4096, CHUNK);
	stats_read_begin(st, &b, &file, 9ull * CHUNK, 4096, CHUNK);
	slow_fetch(st, &file, 9, 20);	/* b's */
	stats_fetch_begin(st, &file, 8);	/* a's chunk, by someone else */
	stats_fetch_end(st, &file, 8, CHUNK);
	stats_read_end(&b, &so, getpid(), UID, 4096);
	stats_read_end(&a, &so, getpid(), UID, 4096);
	t0 = now_ns() - t0;	/* the wall time both READs were open */
	s = snap(st);
	u = row(s, STATS_USER, UID, NULL);
	{
		uint64_t stall = u->total[STATS_STALL_NS] - stall0;
		uint64_t act = u->total[STATS_ACTIVE_NS] - act0;

		print_message("two overlapping stalled READs: stall %.1f ms, active %.1f ms, "
			      "read time %.1f ms in all\n", stall / 1e6, act / 1e6,
			      u->total[STATS_READ_NS] / 1e6);
		/* at most the wall time, not the sum of the two (>= 40 ms) */
		assert_true(stall >= 20000000 && stall <= t0);
		assert_true(act >= stall);
	}
	assert_true(stats_stall_ratio(u->total) > 0.5 && stats_stall_ratio(u->total) <= 1);
	stats_snap_free(s);
	stats_open_release(st, &so);
	stats_destroy(st);
}

/* ---- concurrency ---- */

#define NTHREADS	8
#define NREADS		200000

struct hammer {
	struct stats *st;
	struct stats_open *so;
	pid_t pid;
	uint64_t ns;
};

static void *hammer_thread(void *arg)
{
	struct hammer *h = arg;
	uint64_t t0 = now_ns();
	int file;

	for (int i = 0; i < NREADS; i++) {
		struct stats_read rd;

		stats_read_begin(h->st, &rd, &file, (uint64_t)i * 131072, 131072, CHUNK);
		stats_read_end(&rd, h->so, h->pid, UID, 131072);
	}
	h->ns = now_ns() - t0;
	return NULL;
}

static _Atomic bool stop_snap;

static void *snap_thread(void *arg)
{
	struct stats *st = arg;

	while (!atomic_load(&stop_snap)) {
		struct stats_snap *s = NULL;

		stats_tick(st);
		if (!stats_snapshot(st, &s))
			stats_snap_free(s);
	}
	return NULL;
}

static void test_concurrent_exact(void **state)
{
	struct stats *st = mkstats(0);
	struct stats_open so;
	struct hammer h[NTHREADS];
	pthread_t th[NTHREADS], sn;
	struct stats_snap *s;
	uint64_t ns = 0;

	stats_open_init(st, &so, getpid(), UID);
	atomic_store(&stop_snap, false);
	pthread_create(&sn, NULL, snap_thread, st);
	for (int i = 0; i < NTHREADS; i++) {
		h[i] = (struct hammer){ st, &so, getpid(), 0 };
		pthread_create(&th[i], NULL, hammer_thread, &h[i]);
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], NULL);
		ns += h[i].ns;
	}
	atomic_store(&stop_snap, true);
	pthread_join(sn, NULL);
	s = snap(st);
	assert_true(row(s, STATS_USER, UID, NULL)->total[STATS_READS] == (uint64_t)NTHREADS * NREADS);
	assert_true(row(s, STATS_USER, UID, NULL)->total[STATS_READ_BYTES] ==
		    (uint64_t)NTHREADS * NREADS * 131072);
	assert_true(s->node.total[STATS_READS] == (uint64_t)NTHREADS * NREADS);
	assert_int_equal(row(s, STATS_USER, UID, NULL)->total[STATS_FILES], 1);
	print_message("stats_read_begin+end: %.0f ns per READ, %d threads on one reader\n",
		      (double)ns / ((double)NTHREADS * NREADS), NTHREADS);
	stats_snap_free(s);
	stats_open_release(st, &so);
	stats_destroy(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_job_rule),
		cmocka_unit_test(test_pods),
		cmocka_unit_test(test_procinfo),
		cmocka_unit_test(test_accounting),
		cmocka_unit_test(test_stall_on_others),
		cmocka_unit_test(test_threads_and_gone),
		cmocka_unit_test(test_client_reports),
		cmocka_unit_test(test_node_only),
		cmocka_unit_test(test_render),
		cmocka_unit_test(test_render_view),
		cmocka_unit_test(test_render_table),
		cmocka_unit_test(test_active_passthrough),
		cmocka_unit_test(test_active_estimate),
		cmocka_unit_test(test_stall_share),
		cmocka_unit_test(test_concurrent_exact),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
