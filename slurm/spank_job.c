/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_job: who and where the job is, and what its prolog leaves its
 * steps.
 *
 * The job's user comes from Slurm (uid, gid) with its groups from the user
 * database in the prolog and epilog (as initgroups gives them), or as Slurm
 * gave them to slurmstepd.  The node is SLURMD_NODENAME, which slurmd sets
 * for the prolog and epilog and slurmstepd for itself; its index in the
 * job's node list makes its shard.  The state file, STATEDIR/JOBID.NODE,
 * is one line (the prolog's STAGED result and its context), written
 * atomically by the prolog as root and read by the job's steps while they
 * are still root; the directory is trusted only if it is root's alone.
 */
#include "spank_stagefs_i.h"

#include "ctlproto.h"
#include "util.h"

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int job_user_from_db(spank_t sp, struct spank_user *u)
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

int job_user_from_step(spank_t sp, struct spank_user *u)
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

const char *job_node(void)
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

int job_node_shard(uint32_t *idx, uint32_t *cnt, char *node, size_t nodelen)
{
	const char *list = getenv("SLURM_JOB_NODELIST"), *me = job_node();
	hostlist_t hl;
	int i, n;

	if (!list)
		list = getenv("SLURM_NODELIST");
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

uint64_t job_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void job_name(uint32_t jobid, char *out, size_t len)
{
	/* what the cgroup rule names a Slurm job: one row either way */
	snprintf(out, len, "slurm:job_%" PRIu32, jobid);
}

void job_state_path(uint32_t jobid, const char *suffix, char *out, size_t len)
{
	char node[256];

	snprintf(node, sizeof(node), "%s", job_node());
	for (char *c = node; *c; c++)
		if (*c == '/' || (c == node && *c == '.'))
			*c = '_';
	snprintf(out, len, "%s/%" PRIu32 ".%s%s", conf.statedir, jobid, node, suffix);
}

/* ---- the state file: what the prolog found, for the steps ---- */

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

int job_statedir_ready(void)
{
	int ret = mkdir_p(conf.statedir, 0700);

	return ret ? ret : statedir_check();
}

int job_state_write(uint32_t jobid, const char *line)
{
	char path[STATE_PATH_MAX];
	int ret = job_statedir_ready();

	if (ret)
		return ret;
	/* a requeued job runs again under its id: its outcome is told again */
	job_state_path(jobid, ".reported", path, sizeof(path));
	unlink(path);
	job_state_path(jobid, "", path, sizeof(path));
	return write_file_atomic(path, line, strlen(line), 0600, false);
}

int job_state_read(uint32_t jobid, char *buf, size_t len, struct ctl_msg *m)
{
	char path[STATE_PATH_MAX];
	ssize_t n;
	int fd;

	fd = statedir_check();
	if (fd)
		return fd;
	job_state_path(jobid, "", path, sizeof(path));
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
