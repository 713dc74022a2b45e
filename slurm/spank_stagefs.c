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
#include <pwd.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

SPANK_PLUGIN(stagefs, 1);

#define DEFAULT_STATEDIR	"/run/stagefs/slurm"
#define DEFAULT_WAIT_S		300
#define DEFAULT_MAX_WAIT_S	3600
#define FEED_TIMEOUT_MS		10000	/* reading .stagefs/stats */
#define KILL_GRACE_MS		5000	/* after a warmup's own deadline */
#define OPT_PATHS_MAX		4096
#define STATE_PATH_MAX		(PATH_MAX + 300)	/* STATEDIR/JOBID.NODE.reported */

/* ---- the administrator's settings: plugstack.conf arguments ---- */

static struct {
	char mount[PATH_MAX];
	char socket[PATH_MAX];
	char statedir[PATH_MAX];
	unsigned wait_s, max_wait_s;
	bool onfail_fail;
	bool shard_all;		/* every node stages all of the data */
	bool ok;		/* parsed without error, and mount= given */
} conf;

/* Parse the plugstack.conf arguments into conf.  0, or -1 (logged). */
static int conf_parse(int ac, char **av)
{
	memset(&conf, 0, sizeof(conf));
	snprintf(conf.statedir, sizeof(conf.statedir), "%s", DEFAULT_STATEDIR);
	conf.wait_s = DEFAULT_WAIT_S;
	conf.max_wait_s = DEFAULT_MAX_WAIT_S;
	for (int i = 0; i < ac; i++) {
		const char *a = av[i], *eq = strchr(a, '=');
		size_t kl = eq ? (size_t)(eq - a) : strlen(a);
		const char *v = eq ? eq + 1 : "";
		uint64_t n;

#define KEY(k) (kl == strlen(k) && !strncmp(a, k, kl))
		if (KEY("mount") || KEY("socket") || KEY("statedir")) {
			char *dst = KEY("mount") ? conf.mount : KEY("socket") ? conf.socket
									     : conf.statedir;

			if (v[0] != '/' || strlen(v) >= PATH_MAX) {
				slurm_error("stagefs: plugstack.conf: %.*s= wants an absolute path, not '%s'",
					    (int)kl, a, v);
				return -1;
			}
			strcpy(dst, v);
			/* "/datasets/" and "/datasets" are the same mount */
			for (size_t l = strlen(dst); l > 1 && dst[l - 1] == '/'; l--)
				dst[l - 1] = '\0';
		} else if (KEY("wait") || KEY("max_wait")) {
			if (parse_uint(v, &n) || !n || n > 7 * 86400) {
				slurm_error("stagefs: plugstack.conf: %.*s= wants seconds (1 to 604800), not '%s'",
					    (int)kl, a, v);
				return -1;
			}
			*(KEY("wait") ? &conf.wait_s : &conf.max_wait_s) = (unsigned)n;
		} else if (KEY("shard")) {
			if (strcmp(v, "node") && strcmp(v, "all")) {
				slurm_error("stagefs: plugstack.conf: shard= is node or all, not '%s'", v);
				return -1;
			}
			conf.shard_all = !strcmp(v, "all");
		} else if (KEY("onfail")) {
			if (strcmp(v, "run") && strcmp(v, "fail")) {
				slurm_error("stagefs: plugstack.conf: onfail= is run or fail, not '%s'", v);
				return -1;
			}
			conf.onfail_fail = !strcmp(v, "fail");
		} else {
			slurm_error("stagefs: plugstack.conf: unknown argument '%s' (known: mount= socket= statedir= wait= max_wait= onfail= shard=)",
				    a);
			return -1;
		}
#undef KEY
	}
	if (!conf.mount[0]) {
		slurm_error("stagefs: plugstack.conf: mount=PATH (the node's stagefs mount) is missing");
		return -1;
	}
	if (conf.wait_s > conf.max_wait_s)
		conf.wait_s = conf.max_wait_s;
	conf.ok = true;
	return 0;
}

/* ---- the user's options ---- */

static struct {
	bool given;			/* --stagefs */
	char paths[OPT_PATHS_MAX];	/* its argument: PATH[,PATH...] */
	unsigned wait_s;		/* --stagefs-wait, 0: conf's */
	int onfail;			/* --stagefs-onfail: -1 conf's, 0 run, 1 fail */
	int shard_all;			/* --stagefs-shard: -1 conf's, 0 node, 1 all */
} opt = { .onfail = -1, .shard_all = -1 };

enum { OPT_STAGE, OPT_WAIT, OPT_ONFAIL, OPT_SHARD };

/*
 * Check a --stagefs argument: comma-separated paths relative to the mount
 * root (or absolute, under it: checked where the mount is known), no ".."
 * component, at most SPANK_MAX_PATHS.  0 or -1 with @why set.
 */
static int check_paths(const char *arg, const char **why)
{
	size_t n = 0;
	const char *p = arg;

	if (!*arg || strlen(arg) >= OPT_PATHS_MAX) {
		*why = "wants DATASET[/PATH][,...], relative to the stagefs mount";
		return -1;
	}
	while (*p) {
		size_t len = strcspn(p, ",");
		const char *c = p, *end = p + len;

		if (!len) {
			*why = "has an empty path";
			return -1;
		}
		if (++n > SPANK_MAX_PATHS) {
			*why = "names more than 64 paths";
			return -1;
		}
		while (c < end) {
			size_t cl = strcspn(c, "/,");

			if (cl == 2 && c[0] == '.' && c[1] == '.') {
				*why = "may not go up ('..')";
				return -1;
			}
			c += cl + (c + cl < end);
		}
		p = *end ? end + 1 : end;
	}
	return 0;
}

static int opt_cb(int val, const char *arg, int remote)
{
	const char *why = NULL;
	uint64_t n;

	switch (val) {
	case OPT_STAGE:
		if (!arg || check_paths(arg, &why))
			break;
		snprintf(opt.paths, sizeof(opt.paths), "%s", arg);
		opt.given = true;
		return 0;
	case OPT_WAIT:
		if (!arg || parse_uint(arg, &n) || !n || n > 7 * 86400) {
			why = "wants seconds (1 to 604800)";
			break;
		}
		opt.wait_s = (unsigned)n;
		return 0;
	case OPT_ONFAIL:
		if (arg && (!strcmp(arg, "run") || !strcmp(arg, "fail"))) {
			opt.onfail = !strcmp(arg, "fail");
			return 0;
		}
		why = "is run or fail";
		break;
	case OPT_SHARD:
		if (arg && (!strcmp(arg, "node") || !strcmp(arg, "all"))) {
			opt.shard_all = !strcmp(arg, "all");
			return 0;
		}
		why = "is node or all";
		break;
	}
	slurm_error("stagefs: --%s=%s %s", val == OPT_STAGE ? "stagefs" :
		    val == OPT_WAIT ? "stagefs-wait" : val == OPT_ONFAIL ? "stagefs-onfail" :
		    "stagefs-shard", arg ? arg : "", why);
	return -1;
}

static struct spank_option options[] = {
	{ "stagefs", "DATASET[/PATH][,...]",
	  "stage these paths of the node's stagefs mount on each node of the job "
	  "(its share: shard NODE/NNODES) before the job starts", 1, OPT_STAGE, opt_cb },
	{ "stagefs-wait", "SECONDS",
	  "wait at most this long for --stagefs's staging on each node; "
	  "the rest is then read on demand", 1, OPT_WAIT, opt_cb },
	{ "stagefs-onfail", "run|fail",
	  "if --stagefs's staging fails or times out on a node: run the job anyway "
	  "(reads go to the backend), or fail its tasks there", 1, OPT_ONFAIL, opt_cb },
	{ "stagefs-shard", "node|all",
	  "what --stagefs stages on each node: its share (shard NODE/NNODES, the "
	  "default), or all of it (every node reads every file)", 1, OPT_SHARD, opt_cb },
	SPANK_OPTIONS_TABLE_END
};

/*
 * In the prolog and epilog the options come from the job's environment,
 * not through their callbacks.  0 (with opt set) or -1 (a bad value, logged).
 */
static int opts_from_env(spank_t sp)
{
	for (size_t i = 0; options[i].name; i++) {
		char *arg = NULL;

		if (spank_option_getopt(sp, &options[i], &arg) != ESPANK_SUCCESS)
			continue;
		if (opt_cb(options[i].val, arg, 1))
			return -1;
	}
	return 0;
}

static unsigned wait_s(void)
{
	unsigned w = opt.wait_s ? opt.wait_s : conf.wait_s;

	return w < conf.max_wait_s ? w : conf.max_wait_s;
}

static bool onfail_fail(void)
{
	return opt.onfail < 0 ? conf.onfail_fail : opt.onfail;
}

static bool shard_all(void)
{
	return opt.shard_all < 0 ? conf.shard_all : opt.shard_all;
}

/* ---- the job ---- */

/* The job's user, its groups from the user database (prolog, epilog). */
static int user_of_job(spank_t sp, struct spank_user *u)
{
	struct passwd pw, *pwp = NULL;
	char buf[16384];
	int n = (int)(sizeof(u->gids) / sizeof(u->gids[0]));

	memset(u, 0, sizeof(*u));
	if (spank_get_item(sp, S_JOB_UID, &u->uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &u->gid) != ESPANK_SUCCESS)
		return -1;
	if (getpwuid_r(u->uid, &pw, buf, sizeof(buf), &pwp) || !pwp ||
	    getgrouplist(pw.pw_name, u->gid, u->gids, &n) < 0) {
		/* no such user here, or too many groups: the primary one only */
		u->gids[0] = u->gid;
		n = 1;
	}
	u->ngids = n;
	return 0;
}

/* The same in slurmstepd, which has the groups Slurm gave the job. */
static int user_of_step(spank_t sp, struct spank_user *u)
{
	gid_t *gids = NULL;
	int n = 0;

	memset(u, 0, sizeof(*u));
	if (spank_get_item(sp, S_JOB_UID, &u->uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &u->gid) != ESPANK_SUCCESS)
		return -1;
	if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &gids, &n) != ESPANK_SUCCESS || !gids)
		n = 0;
	if (n > (int)(sizeof(u->gids) / sizeof(u->gids[0])))
		n = (int)(sizeof(u->gids) / sizeof(u->gids[0]));
	if (n)
		memcpy(u->gids, gids, (size_t)n * sizeof(gid_t));
	else
		u->gids[n++] = u->gid;
	u->ngids = n;
	return 0;
}

/*
 * This node's name in Slurm: slurmd puts SLURMD_NODENAME in the prolog's
 * and epilog's environment, and slurmstepd in its own (the job's
 * environment may carry the batch node's).  Several slurmd on one machine
 * (MULTIPLE_SLURMD) are several nodes.  Static storage.
 */
static const char *this_node(void)
{
	static char name[256];
	const char *n = getenv("SLURMD_NODENAME");

	if (n && *n)
		snprintf(name, sizeof(name), "%s", n);
	else if (gethostname(name, sizeof(name)))
		snprintf(name, sizeof(name), "localhost");
	name[sizeof(name) - 1] = '\0';
	return name;
}

/*
 * This node's index in the job's node list and the list's length, from the
 * prolog's environment (slurmd's prolog sets SLURM_NODELIST, the job's
 * nodes, and SLURMD_NODENAME).  0, or -1 (then 0/1: the node stages
 * everything).
 */
static int node_shard(uint32_t *idx, uint32_t *cnt, char *node, size_t nodelen)
{
	const char *list = getenv("SLURM_JOB_NODELIST"), *me = this_node();

	if (!list)
		list = getenv("SLURM_NODELIST");
	hostlist_t hl;
	int i, n;

	*idx = 0;
	*cnt = 1;
	snprintf(node, nodelen, "%s", me);
	if (!list)
		return -1;
	hl = slurm_hostlist_create(list);
	if (!hl)
		return -1;
	i = slurm_hostlist_find(hl, me);
	n = slurm_hostlist_count(hl);
	slurm_hostlist_destroy(hl);
	if (i < 0 || n <= 0 || i >= n) {
		slurm_info("stagefs: %s is not in the job's nodes %s", me, list);
		return -1;
	}
	*idx = (uint32_t)i;
	*cnt = (uint32_t)n;
	return 0;
}

static uint64_t realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void job_name(uint32_t jobid, char *out, size_t len)
{
	/* what the cgroup rule names a Slurm job: one row either way */
	snprintf(out, len, "slurm:job_%" PRIu32, jobid);
}

/* STATEDIR/JOBID.NODE[SUFFIX]: a node name never holds '/' nor starts with '.' */
static void state_path(uint32_t jobid, const char *suffix, char *out, size_t len)
{
	char node[256];

	snprintf(node, sizeof(node), "%s", this_node());
	for (char *c = node; *c; c++)
		if (*c == '/' || (c == node && *c == '.'))
			*c = '_';
	snprintf(out, len, "%s/%" PRIu32 ".%s%s", conf.statedir, jobid, node, suffix);
}

/* ---- the state file: what the prolog found, for the steps ---- */

/* The state file's one line: the child's STAGED line and the context. */
/*
 * The state directory is trusted only if nobody but root can write in it:
 * a file a user planted there would tell a step its data was staged, or
 * let a user pick another job's outcome.  0, or -EPERM (or -errno).
 */
static int statedir_check(void)
{
	struct stat st;

	if (lstat(conf.statedir, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if (st.st_uid != 0 || (st.st_mode & 022))
		return -EPERM;
	return 0;
}

static int state_write(uint32_t jobid, const char *line)
{
	char path[STATE_PATH_MAX];
	int ret = mkdir_p(conf.statedir, 0700);

	if (!ret)
		ret = statedir_check();
	if (ret)
		return ret;
	/* a requeued job runs again under its id: its outcome is told again */
	state_path(jobid, ".reported", path, sizeof(path));
	unlink(path);
	state_path(jobid, "", path, sizeof(path));
	return write_file_atomic(path, line, strlen(line), 0600, false);
}

/* Read the state file into @buf and parse it into @m.  0 or -errno. */
static int state_read(uint32_t jobid, char *buf, size_t len, struct ctl_msg *m)
{
	char path[STATE_PATH_MAX];
	ssize_t n;
	int fd;

	fd = statedir_check();
	if (fd)
		return fd;
	state_path(jobid, "", path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return n ? -errno : -ENODATA;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return ctl_parse(buf, m) || strcmp(m->argv[0], "STAGED") ? -EINVAL : 0;
}

static uint64_t msg_u64(const struct ctl_msg *m, const char *key)
{
	uint64_t v = 0;

	ctl_get_u64(m, key, &v);
	return v;
}

/* ---- job_script context: the prolog and the epilog ---- */

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	const char *paths[SPANK_MAX_PATHS];
	char buf[OPT_PATHS_MAX], node[256], why[PATH_MAX + 64];
	char res[SPANK_LINE_MAX], line[SPANK_LINE_MAX + OPT_PATHS_MAX * 3 + 1024];
	struct client_warmup w = { 0 };
	struct spank_user u;
	uint32_t jobid = 0, idx, cnt;
	size_t np = 0, ml;
	char *save = NULL;
	int ret;

	if (conf_parse(ac, av) || opts_from_env(sp) || !opt.given)
		return 0;	/* never fail: that would drain the node */
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS || user_of_job(sp, &u)) {
		slurm_error("stagefs: prolog: cannot tell the job's id or user; not staging");
		return 0;
	}
	if (shard_all()) {
		idx = 0;
		cnt = 1;
		snprintf(node, sizeof(node), "%s", this_node());
	} else if (node_shard(&idx, &cnt, node, sizeof(node))) {
		slurm_info("stagefs: job %" PRIu32 ": cannot place node %s in the job's node list; it stages all of the data",
			   jobid, node);
	}

	/* the paths, relative to the mount root; an absolute one must be under it */
	snprintf(buf, sizeof(buf), "%s", opt.paths);
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
	w.timeout_ms = (int)wait_s() * 1000;
	slurm_info("stagefs: job %" PRIu32 ": staging %s (shard %" PRIu32 "/%" PRIu32
		   ") as uid %u, waiting at most %u s", jobid, opt.paths, idx, cnt,
		   (unsigned)u.uid, wait_s());
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
	client_put_u64(line, sizeof(line), "wait", wait_s());
	client_put_u64(line, sizeof(line), "t_end_ms", realtime_ms());
	snprintf(why, sizeof(why), "%" PRIu32 "/%" PRIu32, idx, cnt);
	client_put_word(line, sizeof(line), "shard", why);
	client_put_word(line, sizeof(line), "paths", opt.paths);
	client_put_word(line, sizeof(line), "node", node);
	slurm_info("stagefs: job %" PRIu32 ": %s", jobid, line);
	strncat(line, "\n", sizeof(line) - strlen(line) - 1);
	ret = state_write(jobid, line);
	if (ret)
		slurm_error("stagefs: job %" PRIu32 ": cannot write the state file in %s: %s",
			    jobid, conf.statedir, ret == -EPERM ?
			    "the directory must be root's and writable by nobody else" :
			    strerror(-ret));
	return 0;
}

/*
 * The feed summary of @job (uid @u) on this node since @since_ms (wall
 * clock), as one sentence in @out.  Reads served by FUSE passthrough never
 * reach the daemon: they count as cached (a file is handed to passthrough
 * only whole in the cache) and their bytes are the daemon's estimate
 * (docs/feedrate.md).  0, or -1 with the reason in @out.
 */
static int feed_summary(const struct spank_user *u, uint32_t jobid, const char *job,
			uint64_t since_ms, const char *node, char *out, size_t len)
{
	struct client_feed f = { .mount = conf.mount, .job = job, .uid = u->uid };
	char res[SPANK_LINE_MAX], b[32], bk[32], hit[96], pt[96] = "";
	struct ctl_msg m;
	uint64_t bytes, hits, misses, stall, rd, files, pto, now = realtime_ms();
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
	if (!msg_u64(&m, "found")) {
		snprintf(out, len, "stagefs: job %" PRIu32 " (%s) on %s: read nothing through stagefs",
			 jobid, job, node);
		return 0;
	}
	pto = msg_u64(&m, "passthrough_opens");
	bytes = msg_u64(&m, "read_bytes") + msg_u64(&m, "passthrough_bytes_estimated");
	files = msg_u64(&m, "files_read") + pto;
	hits = msg_u64(&m, "cache_hits");
	misses = msg_u64(&m, "cache_misses");
	stall = msg_u64(&m, "stall_ns");
	rd = msg_u64(&m, "read_ns");
	secs = since_ms && now > since_ms ? (double)(now - since_ms) / 1000 : 0;
	fmt_size(bytes, b, sizeof(b));
	fmt_size(msg_u64(&m, "backend_bytes"), bk, sizeof(bk));
	if (hits + misses)
		snprintf(hit, sizeof(hit), "hit ratio %.1f%%",
			 100.0 * (double)hits / (double)(hits + misses));
	else
		snprintf(hit, sizeof(hit), "hit ratio %s", pto ? "100.0%" : "-");
	if (pto)
		snprintf(pt, sizeof(pt), ", %" PRIu64 " of them by passthrough (bytes estimated)",
			 pto);
	snprintf(out, len,
		 "stagefs: job %" PRIu32 " (%s) on %s: read %s in %" PRIu64 " files%s,"
		 " %.1f MB/s over %.1f s, %s (%s from the backend), stalled %.3f s (%.1f%% of read time)",
		 jobid, job, node, b, files, pt, secs > 0 ? (double)bytes / secs / 1e6 : 0, secs,
		 hit, bk, (double)stall / 1e9, rd ? 100.0 * (double)stall / (double)rd : 0);
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
	if (!opts_from_env(sp) && opt.given && !user_of_job(sp, &u)) {
		if (!state_read(jobid, buf, sizeof(buf), &m))
			since = msg_u64(&m, "t_end_ms");
		job_name(jobid, job, sizeof(job));
		feed_summary(&u, jobid, job, since, this_node(), out, sizeof(out));
		slurm_info("%s", out);
	}
	state_path(jobid, "", path, sizeof(path));
	unlink(path);
	state_path(jobid, ".reported", path, sizeof(path));
	unlink(path);
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
} step;

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();

	if (ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL || ctx == S_CTX_REMOTE)
		for (size_t i = 0; options[i].name; i++)
			if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS)
				slurm_error("stagefs: cannot register --%s", options[i].name);
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
	step.start_ms = realtime_ms();
	if (!step.is_step || !opt.given)
		return 0;
	/* still root here: the state file is root's */
	ret = state_read(jobid, step.line, sizeof(step.line), &step.m);
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
	state_path(jobid, ".reported", path, sizeof(path));
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
	char b[32], f[32], c[32], then[256];

	if (!node || !*node)
		node = this_node();
	if (!paths || !*paths)
		paths = opt.paths;
	snprintf(then, sizeof(then), onfail_fail() ?
		 "its tasks there fail (--stagefs-onfail=fail)" :
		 "the job runs and reads what is not cached from the backend (--stagefs-onfail=fail stops it)");
	if (!st || !strcmp(st, "error")) {
		const char *msg = ctl_get(m, "msg");

		slurm_error("stagefs: staging %s on %s failed: %s; %s", paths, node,
			    msg ? msg : "unknown error", then);
		return;
	}
	fmt_size(msg_u64(m, "bytes"), b, sizeof(b));
	fmt_size(msg_u64(m, "fetched_bytes"), f, sizeof(f));
	fmt_size(msg_u64(m, "cached_before_bytes"), c, sizeof(c));
	if (!strcmp(st, "ok")) {
		slurm_spank_log("stagefs: staged %s (shard %s) on %s before the job started: %" PRIu64
				" files, %s in %.1f s (%s fetched, %s already cached)",
				paths, shard ? shard : "0/1", node,
				msg_u64(m, "files"), b, (double)msg_u64(m, "ms") / 1000, f, c);
	} else if (!strcmp(st, "timeout")) {
		slurm_error("stagefs: staging %s (shard %s) on %s did not finish in %" PRIu64
			    " s (--stagefs-wait): %s of %s fetched, %s were cached already; %s",
			    paths, shard ? shard : "0/1", node, msg_u64(m, "wait"),
			    f, b, c, then);
	} else {
		const char *fp = ctl_get(m, "fail_path"), *fm = ctl_get(m, "fail_msg");

		slurm_error("stagefs: staging %s (shard %s) on %s: %" PRIu64 " file(s) or path(s)"
			    " could not be staged, %" PRIu64 " chunk(s) (first: %s: %s); %s",
			    paths, shard ? shard : "0/1", node,
			    msg_u64(m, "failed_files"), msg_u64(m, "failed"), fp ? fp : "?",
			    fm ? fm : "?", then);
	}
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	if (!spank_remote(sp) || !opt.given)
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
	if (opt.given && step.failed && onfail_fail()) {
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

	if (!spank_remote(sp) || !conf.ok || !step.is_step || !opt.given)
		return 0;
	if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS ||
	    ++step.exited < ntasks)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS || user_of_step(sp, &u))
		return 0;
	if (spank_getenv(sp, "STAGEFS_JOB", job, sizeof(job)) != ESPANK_SUCCESS || !job[0])
		job_name(jobid, job, sizeof(job));
	feed_summary(&u, jobid, job, step.have_state ? msg_u64(&step.m, "t_end_ms") : step.start_ms,
		     this_node(), out, sizeof(out));
	slurm_spank_log("%s", out);
	return 0;
}
