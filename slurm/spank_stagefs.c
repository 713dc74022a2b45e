/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_stagefs: a Slurm SPANK plugin that stages a job's data on each of
 * its nodes before the job's tasks start, names the job in the feed rate,
 * and reports the job's feed at its end (docs/slurm.md).
 *
 *   sbatch -N 4 --stagefs=imagenet/train train.sh
 *
 * Where each part runs, and as whom:
 *
 * - Options (--stagefs, --stagefs-wait, --stagefs-onfail, --stagefs-shard)
 *   are registered
 *   in slurm_spank_init() in every context that parses them: sbatch and
 *   salloc (allocator; they see only what spank_option_register() adds),
 *   srun (local) and slurmstepd (remote).  Their callbacks check the
 *   values, so a mistake fails at submission.
 * - Staging is slurm_spank_job_prolog(): slurmd runs it as root once per
 *   job on every node of the allocation (at allocation time with
 *   PrologFlags=Alloc, else before the job's first step lands on the
 *   node), and no task of the job starts on that node before it returns.
 *   The node's share is shard NODE/NNODES (the node's index in the job's
 *   node list, the prolog's SLURM_NODELIST, and the list's length), so the
 *   nodes of a job split the data between them (`stagefs warmup --shard`,
 *   docs/control.md), or all of it with --stagefs-shard=all.  The
 *   WARMUP is sent by a child that has become the job's user (groups, gid,
 *   uid; spank_asuser.c): the daemon decides from the peer's credentials
 *   what may be staged and whose quota pays, so the plugin can never stage
 *   what the user may not read.  The wait is bounded (--stagefs-wait,
 *   capped by the administrator's max_wait); a warmup still running then
 *   is cancelled and the rest is read on demand.  The prolog never fails:
 *   Slurm drains a node whose prolog fails, and a user's bad path must not
 *   take a node out.  Its outcome goes to a root-only state file,
 *   STATEDIR/JOBID.NODE.
 * - slurmstepd (remote context) reads that file while still root
 *   (slurm_spank_init_post_opt), and the job's first step on the node
 *   prints the outcome into the job's output.  Each task gets STAGEFS_JOB
 *   (slurm_spank_task_init, unless the job set its own), so the daemon
 *   charges its reads to the job (docs/feedrate.md).  If staging failed or
 *   timed out and the job asked for --stagefs-onfail=fail, every task on
 *   that node fails before it starts (exit status 1): the job fails as a
 *   program that exits 1 does, not as a step launch failure, which Slurm
 *   may count against the node.
 * - When a step's last task on the node has exited (slurm_spank_task_exit,
 *   still in time for srun to show it), the job's row of the node's feed
 *   rate (bytes, rate, hit ratio, stall), read as the user, goes to the
 *   job's output; at the job's end on each node
 *   (slurm_spank_job_epilog) to slurmd's log, and the state file goes.
 * - With peers_file= in plugstack.conf, every job's prolog adds the
 *   job's nodes to the node's peer group and its epilog takes them out
 *   again (spank_peers.c): the group is the union of the nodes of the
 *   jobs running on the node (past 255, shared fairly between them), so
 *   the nodes of a job share their cached chunks (docs/fleet.md).  A
 *   step whose job has nodes left out says so in the job's output, once
 *   per change.
 *
 * Everything that talks to the daemon or reads the mount runs in a child
 * with a deadline, so a hung daemon never holds up slurmd or slurmstepd
 * beyond it (spank_asuser.c).
 */
#include "spank_stagefs_i.h"

#include "ctlproto.h"
#include "util.h"

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

SPANK_PLUGIN(stagefs, 1);

#define FEED_TIMEOUT_MS		10000	/* reading .stagefs/stats */
#define KILL_GRACE_MS		5000	/* after a warmup's own deadline */

/* ---- job_script context: the prolog and the epilog ---- */

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	const char *paths[SPANK_MAX_PATHS];
	char buf[OPT_PATHS_MAX], node[256], why[PATH_MAX + 64];
	char res[SPANK_LINE_MAX], line[SPANK_LINE_MAX + OPT_PATHS_MAX * 3 + 1024];
	char peers[SPANK_LINE_MAX] = "";
	struct client_warmup w = { 0 };
	struct spank_user u;
	uint32_t jobid = 0, idx, cnt;
	size_t np = 0, ml;
	char *save = NULL;
	bool peers_failed = false;
	int ret;

	/* never fail: that would drain the node */
	if (conf_parse(ac, av) || spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
		return 0;
	/* every job's nodes join the group, before any staging asks a peer */
	if (conf.peers_file[0]) {
		peers_failed = peers_job_start(jobid, peers, sizeof(peers)) != 0;
		if (peers_failed)
			slurm_error("stagefs: job %" PRIu32 " on %s: the job's nodes are not the peer group: %s",
				    jobid, job_node(), peers);
		else
			slurm_info("stagefs: job %" PRIu32 " on %s: %s", jobid, job_node(), peers);
	}
	if (conf_opts_from_env(sp) || !conf_opt.given)
		return 0;
	if (job_user_from_db(sp, &u)) {
		slurm_error("stagefs: prolog: cannot tell the job's id or user; not staging");
		return 0;
	}
	if (conf_shard_all()) {
		idx = 0;
		cnt = 1;
		snprintf(node, sizeof(node), "%s", job_node());
	} else if (job_node_shard(&idx, &cnt, node, sizeof(node))) {
		slurm_info("stagefs: job %" PRIu32 ": cannot place node %s in the job's node list; it stages all of the data",
			   jobid, node);
	}

	/* the paths, relative to the mount root; an absolute one must be under it */
	snprintf(buf, sizeof(buf), "%s", conf_opt.paths);
	ml = strlen(conf.mount);
	for (char *p = strtok_r(buf, ",", &save); p && np < SPANK_MAX_PATHS;
	     p = strtok_r(NULL, ",", &save)) {
		if (p[0] == '/') {
			if (strncmp(p, conf.mount, ml) || (p[ml] && p[ml] != '/')) {
				snprintf(res, sizeof(res), "STAGED status=error");
				snprintf(why, sizeof(why), "%.*s is not under the stagefs mount %s",
					 PATH_MAX / 2, p, conf.mount);
				client_put_word(res, sizeof(res), "msg", why);
				goto out_state;
			}
			p += ml;
		}
		while (*p == '/')
			p++;
		paths[np++] = p;
	}

	w.mount = conf.mount;
	w.socket = conf.socket;
	w.paths = paths;
	w.npaths = np;
	w.shard_i = idx;
	w.shard_n = cnt;
	w.timeout_ms = (int)conf_wait_s() * 1000;
	slurm_info("stagefs: job %" PRIu32 ": staging %s (shard %" PRIu32 "/%" PRIu32
		   ") as uid %u, waiting at most %u s", jobid, conf_opt.paths, idx, cnt,
		   (unsigned)u.uid, conf_wait_s());
	ret = asuser_run(&u, client_warmup, &w, w.timeout_ms + KILL_GRACE_MS, res, sizeof(res));
	if (ret || strncmp(res, "STAGED ", 7)) {
		snprintf(res, sizeof(res), "STAGED status=error");
		client_put_word(res, sizeof(res), "msg",
				ret == -EPERM ? "the staging helper could not become the job's user" :
				ret == -ETIMEDOUT ? "the staging helper hung past its deadline and was killed" :
				"the staging helper died without a result");
	}
out_state:
	snprintf(line, sizeof(line), "%s", res);
	client_put_u64(line, sizeof(line), "wait", conf_wait_s());
	client_put_u64(line, sizeof(line), "t_end_ms", job_now_ms());
	snprintf(why, sizeof(why), "%" PRIu32 "/%" PRIu32, idx, cnt);
	client_put_word(line, sizeof(line), "shard", why);
	client_put_word(line, sizeof(line), "paths", conf_opt.paths);
	client_put_word(line, sizeof(line), "node", node);
	if (peers_failed)
		client_put_word(line, sizeof(line), "peers_err", peers);
	slurm_info("stagefs: job %" PRIu32 ": %s", jobid, line);
	strncat(line, "\n", sizeof(line) - strlen(line) - 1);
	ret = job_state_write(jobid, line);
	if (ret)
		slurm_error("stagefs: job %" PRIu32 ": cannot write the state file in %s: %s",
			    jobid, conf.statedir, ret == -EPERM ?
			    "the directory must be root's and writable by nobody else" :
			    strerror(-ret));
	return 0;
}

/*
 * The feed summary of @job (uid @u) on this node since @since_ms (wall
 * clock), as one sentence in @out, from the job's row: bytes and files
 * read (reads through FUSE passthrough included, exact or estimated: the
 * sentence says when part is estimated), the cache hit ratio, and the
 * stall share of the readers' active time (docs/feedrate.md).  0, or -1
 * with the reason in @out.
 */
static int feed_summary(const struct spank_user *u, uint32_t jobid, const char *job,
			uint64_t since_ms, const char *node, char *out, size_t len)
{
	struct client_feed f = { .mount = conf.mount, .job = job, .uid = u->uid };
	char res[SPANK_LINE_MAX], b[32], bk[32], hit[96], pt[96] = "";
	struct ctl_msg m;
	uint64_t bytes, est, hits, misses, stall, act, files, pto, now = job_now_ms();
	double secs;
	int ret = asuser_run(u, client_feed, &f, FEED_TIMEOUT_MS, res, sizeof(res));

	if (ret || ctl_parse(res, &m) || strcmp(m.argv[0], "FEED")) {
		snprintf(out, len, "stagefs: job %" PRIu32 " on %s: no feed summary (%s)", jobid,
			 node, ret == -ETIMEDOUT ? "the stagefs mount did not answer in time" :
			 "the stats could not be read");
		return -1;
	}
	if (m.argc > 1 && !strcmp(m.argv[1], "error")) {
		const char *msg = ctl_get(&m, "msg");

		snprintf(out, len, "stagefs: job %" PRIu32 " on %s: no feed summary: %s", jobid,
			 node, msg ? msg : "error");
		return -1;
	}
	if (!client_msg_u64(&m, "found")) {
		snprintf(out, len, "stagefs: job %" PRIu32 " (%s) on %s: read nothing through stagefs",
			 jobid, job, node);
		return 0;
	}
	pto = client_msg_u64(&m, "passthrough_opens");
	bytes = client_msg_u64(&m, "read_bytes");
	est = client_msg_u64(&m, "read_bytes_estimated");
	files = client_msg_u64(&m, "files_read");
	hits = client_msg_u64(&m, "cache_hits");
	misses = client_msg_u64(&m, "cache_misses");
	stall = client_msg_u64(&m, "stall_ns");
	act = client_msg_u64(&m, "active_ns");
	secs = since_ms && now > since_ms ? (double)(now - since_ms) / 1000 : 0;
	fmt_size(bytes, b, sizeof(b));
	fmt_size(client_msg_u64(&m, "backend_bytes"), bk, sizeof(bk));
	if (hits + misses)
		snprintf(hit, sizeof(hit), "hit ratio %.1f%%",
			 100.0 * (double)hits / (double)(hits + misses));
	else
		snprintf(hit, sizeof(hit), "hit ratio -");
	if (pto) {
		char e[32];

		fmt_size(est, e, sizeof(e));
		snprintf(pt, sizeof(pt), ", %" PRIu64 " opens by passthrough%s%s%s", pto,
			 est ? " (" : "", est ? e : "", est ? " estimated)" : "");
	}
	snprintf(out, len,
		 "stagefs: job %" PRIu32 " (%s) on %s: read %s in %" PRIu64 " files%s,"
		 " %.1f MB/s over %.1f s, %s (%s from the backend), stalled %.3f s (%.1f%% of the readers' time)",
		 jobid, job, node, b, files, pt, secs > 0 ? (double)bytes / secs / 1e6 : 0, secs,
		 hit, bk, (double)stall / 1e9, act ? 100.0 * (double)stall / (double)act : 0);
	return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	char buf[SPANK_LINE_MAX], path[STATE_PATH_MAX], job[64], out[1024];
	struct spank_user u;
	struct ctl_msg m;
	uint32_t jobid = 0;
	uint64_t since = 0;	/* ms */

	if (conf_parse(ac, av) || spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
		return 0;
	if (!conf_opts_from_env(sp) && conf_opt.given && !job_user_from_db(sp, &u)) {
		if (!job_state_read(jobid, buf, sizeof(buf), &m))
			since = client_msg_u64(&m, "t_end_ms");
		job_name(jobid, job, sizeof(job));
		feed_summary(&u, jobid, job, since, job_node(), out, sizeof(out));
		slurm_info("%s", out);
	}
	job_state_path(jobid, "", path, sizeof(path));
	unlink(path);
	job_state_path(jobid, ".reported", path, sizeof(path));
	unlink(path);
	job_state_path(jobid, ".peers", path, sizeof(path));
	unlink(path);
	/* the job's nodes leave the group: the next job is not pinned to them */
	if (conf.peers_file[0]) {
		if (peers_job_end(jobid, out, sizeof(out)))
			slurm_error("stagefs: job %" PRIu32 " on %s: the peer group was not restored: %s",
				    jobid, job_node(), out);
		else if (out[0])
			slurm_info("stagefs: job %" PRIu32 " ended on %s: %s", jobid, job_node(), out);
	}
	return 0;
}

/* ---- remote context: slurmstepd ---- */

static struct {
	bool is_step;			/* a step with tasks (not the extern step) */
	bool have_state;		/* the prolog's result was read */
	bool report;			/* this step says how staging went */
	bool failed;			/* staging did not complete on this node */
	char line[SPANK_LINE_MAX];	/* the state file's line, parsed into m */
	struct ctl_msg m;
	uint64_t start_ms;		/* wall clock */
	uint32_t exited;		/* tasks of the step that exited here */
	char peers_cut[1024];		/* the job's nodes the peer group leaves out */
} step;

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();

	if (ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL || ctx == S_CTX_REMOTE)
		conf_register_options(sp);
	if (ctx == S_CTX_REMOTE)
		conf_parse(ac, av);
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	char path[STATE_PATH_MAX];
	uint32_t jobid = 0, stepid = 0;
	int fd, ret;

	if (!spank_remote(sp) || !conf.ok)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
		return 0;
	step.is_step = stepid != SLURM_EXTERN_CONT;
	step.start_ms = job_now_ms();
	/* any job, --stagefs or not: the group is every job's */
	if (step.is_step && conf.peers_file[0])
		peers_step_check(jobid, step.peers_cut, sizeof(step.peers_cut));
	if (!step.is_step || !conf_opt.given)
		return 0;
	/* still root here: the state file is root's */
	ret = job_state_read(jobid, step.line, sizeof(step.line), &step.m);
	step.have_state = !ret;
	if (ret) {
		char why[PATH_MAX + 128];

		step.failed = true;
		if (ret == -ENOENT)
			snprintf(why, sizeof(why), "no staging was done for this job here: --stagefs acts when the job starts (give it to sbatch, salloc, or the srun that makes the job), with the plugin loaded by slurmd");
		else
			snprintf(why, sizeof(why), "the staging result in %s cannot be used: %s",
				 conf.statedir, ret == -EPERM ? "the directory is not root's alone" :
				 strerror(-ret));
		snprintf(step.line, sizeof(step.line), "STAGED status=error");
		client_put_word(step.line, sizeof(step.line), "msg", why);
		ctl_parse(step.line, &step.m);
	} else {
		const char *st = ctl_get(&step.m, "status");

		step.failed = !st || strcmp(st, "ok");
	}
	/* the first step of the job on this node tells how staging went */
	job_state_path(jobid, ".reported", path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	step.report = fd >= 0 || (ret == -ENOENT);
	if (fd >= 0)
		close(fd);
	return 0;
}

/* Tell the job how staging went on this node (its first step does). */
static void report_staging(void)
{
	const struct ctl_msg *m = &step.m;
	const char *st = ctl_get(m, "status"), *node = ctl_get(m, "node");
	const char *paths = ctl_get(m, "paths"), *shard = ctl_get(m, "shard");
	const char *peers_err = ctl_get(m, "peers_err");
	char b[32], f[32], c[32], then[256];

	if (!node || !*node)
		node = job_node();
	if (peers_err)
		slurm_error("stagefs: the job's nodes are not the peer group on %s (each node reads from the backend what it lacks): %s",
			    node, peers_err);
	if (!paths || !*paths)
		paths = conf_opt.paths;
	snprintf(then, sizeof(then), conf_onfail_fail() ?
		 "its tasks there fail (--stagefs-onfail=fail)" :
		 "the job runs and reads what is not cached from the backend (--stagefs-onfail=fail stops it)");
	if (!st || !strcmp(st, "error")) {
		const char *msg = ctl_get(m, "msg");

		slurm_error("stagefs: staging %s on %s failed: %s; %s", paths, node,
			    msg ? msg : "unknown error", then);
		return;
	}
	fmt_size(client_msg_u64(m, "bytes"), b, sizeof(b));
	fmt_size(client_msg_u64(m, "fetched_bytes"), f, sizeof(f));
	fmt_size(client_msg_u64(m, "cached_before_bytes"), c, sizeof(c));
	if (!strcmp(st, "ok")) {
		slurm_spank_log("stagefs: staged %s (shard %s) on %s before the job started: %" PRIu64
				" files, %s in %.1f s (%s fetched, %s already cached)",
				paths, shard ? shard : "0/1", node,
				client_msg_u64(m, "files"), b, (double)client_msg_u64(m, "ms") / 1000, f, c);
	} else if (!strcmp(st, "timeout")) {
		slurm_error("stagefs: staging %s (shard %s) on %s did not finish in %" PRIu64
			    " s (--stagefs-wait): %s of %s fetched, %s were cached already; %s",
			    paths, shard ? shard : "0/1", node, client_msg_u64(m, "wait"),
			    f, b, c, then);
	} else {
		const char *fp = ctl_get(m, "fail_path"), *fm = ctl_get(m, "fail_msg");

		slurm_error("stagefs: staging %s (shard %s) on %s: %" PRIu64 " file(s) or path(s)"
			    " could not be staged, %" PRIu64 " chunk(s) (first: %s: %s); %s",
			    paths, shard ? shard : "0/1", node,
			    client_msg_u64(m, "failed_files"), client_msg_u64(m, "failed"), fp ? fp : "?",
			    fm ? fm : "?", then);
	}
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	if (!spank_remote(sp))
		return 0;
	if (step.peers_cut[0])
		slurm_spank_log("stagefs: %s", step.peers_cut);
	if (!conf_opt.given)
		return 0;
	if (!conf.ok)
		slurm_error("stagefs: the plugin's plugstack.conf line on this node is wrong (slurmd's log says why): --stagefs did nothing");
	else if (step.is_step && step.report)
		report_staging();
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	char job[256];
	uint32_t jobid = 0;

	if (!spank_remote(sp) || !conf.ok || !step.is_step)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) == ESPANK_SUCCESS) {
		job_name(jobid, job, sizeof(job));
		/* a job that names itself keeps its name */
		spank_setenv(sp, "STAGEFS_JOB", job, 0);
	}
	if (conf_opt.given && step.failed && conf_onfail_fail()) {
		slurm_error("stagefs: the job's data is not staged on this node and the job asked for --stagefs-onfail=fail: not starting the task");
		return -1;
	}
	return 0;
}

/*
 * The job's feed on this node, after the step's last task here has exited:
 * still in time for srun to show it (it stops reading the step's output
 * once the tasks' exits are in, before slurm_spank_exit runs).
 */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	char job[256], out[1024];
	uint32_t jobid = 0, ntasks = 0;
	struct spank_user u;

	if (!spank_remote(sp) || !conf.ok || !step.is_step || !conf_opt.given)
		return 0;
	if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS ||
	    ++step.exited < ntasks)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS || job_user_from_step(sp, &u))
		return 0;
	if (spank_getenv(sp, "STAGEFS_JOB", job, sizeof(job)) != ESPANK_SUCCESS || !job[0])
		job_name(jobid, job, sizeof(job));
	feed_summary(&u, jobid, job, step.have_state ? client_msg_u64(&step.m, "t_end_ms") : step.start_ms,
		     job_node(), out, sizeof(out));
	slurm_spank_log("%s", out);
	return 0;
}
