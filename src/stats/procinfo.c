/* SPDX-License-Identifier: Apache-2.0 */
/*
 * procinfo: see procinfo.h.  Plain reads of small /proc files; the
 * environment is scanned in pieces, so a huge environment costs time once
 * but no memory.
 */
#include "procinfo.h"

#include "pods.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Read up to @len - 1 bytes of /proc file @path into @buf, NUL-terminated. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = pread_full(fd, buf, len - 1, 0);
	close(fd);
	if (n < 0)
		return n == -ENOENT ? -ESRCH : n;
	buf[n] = '\0';
	return n;
}

/*
 * Fields of /proc/TID/stat: comm (2), state (3), pgrp (5), starttime (22).
 * @state may be NULL.
 */
static int read_stat(pid_t tid, struct procinfo *pi, char *state)
{
	char path[64], buf[1024], *p, *q;
	size_t cl;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)tid);
	n = read_small(path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	/* comm may hold spaces and parentheses: it ends at the last ')' */
	p = strchr(buf, '(');
	q = strrchr(buf, ')');
	if (!p || !q || q[1] != ' ')
		return -EINVAL;
	cl = MIN((size_t)(q - p - 1), sizeof(pi->comm) - 1);
	memcpy(pi->comm, p + 1, cl);
	pi->comm[cl] = '\0';
	if (state)
		*state = q[2];
	p = q + 2;
	for (int field = 3; field < 22; field++) {
		if (field == 5)
			pi->pgid = (pid_t)strtol(p, NULL, 10);
		p = strchr(p, ' ');
		if (!p)
			return -EINVAL;
		p++;
	}
	pi->start = strtoull(p, NULL, 10);
	return 0;
}

static pid_t read_tgid(pid_t tid)
{
	char path[64], buf[512], *p;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return tid;
	p = strstr(buf, "\nTgid:");
	return p ? (pid_t)strtol(p + 6, NULL, 10) : tid;
}

/*
 * Find @name=VALUE in /proc/TID/environ; copy VALUE into @out.  Returns
 * true if found.  Entries are NUL-separated; the file is read in pieces
 * and an entry cut by a piece boundary is carried over (only its first
 * bytes matter: the name and up to @len bytes of value).
 */
static bool env_lookup(pid_t tid, const char *name, char *out, size_t len)
{
	char path[64], buf[8192];
	size_t nl = strlen(name), have = 0;
	bool skipping = false, found = false;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - have);
		size_t start = 0, end;

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		end = have + (size_t)r;
		for (size_t i = 0; i < end; i++) {
			if (buf[i] != '\0')
				continue;
			if (!skipping && i - start > nl && !memcmp(buf + start, name, nl) &&
			    buf[start + nl] == '=') {
				snprintf(out, len, "%.*s", (int)(i - start - nl - 1),
					 buf + start + nl + 1);
				found = true;	/* the first one, as getenv() */
				goto out;
			}
			skipping = false;
			start = i + 1;
		}
		/* carry the unfinished entry; an over-long one is skipped */
		have = end - start;
		if (have == sizeof(buf)) {
			skipping = true;
			have = 0;
		} else {
			memmove(buf, buf + start, have);
		}
	}
out:
	close(fd);
	return found;
}

/* The cgroup v2 path ("0::PATH") of @tid into @out; false if none. */
static bool read_cgroup(pid_t tid, char *out, size_t len)
{
	char path[64], buf[4096], *line, *save = NULL;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)tid);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return false;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "0::", 3)) {
			snprintf(out, len, "%s", line + 3);
			return true;
		}
	}
	return false;
}

static bool has_prefix(const char *s, size_t n, const char *prefix)
{
	size_t pl = strlen(prefix);

	return n >= pl && !memcmp(s, prefix, pl);
}

static bool has_suffix(const char *s, size_t n, const char *suffix)
{
	size_t sl = strlen(suffix);

	return n >= sl && !memcmp(s + n - sl, suffix, sl);
}

/* A systemd unit every process of a user or of the system may share. */
static bool generic_unit(const char *s, size_t n)
{
	return has_suffix(s, n, ".slice") ||
	       (n == 10 && !memcmp(s, "init.scope", 10)) ||
	       (has_prefix(s, n, "session-") && has_suffix(s, n, ".scope")) ||
	       (has_prefix(s, n, "user@") && has_suffix(s, n, ".service"));
}

/*
 * The pod uid in cgroup path component @c (@n bytes) into @uid (37 bytes):
 * kubelet's systemd driver names a pod's slice kubepods[-QOS]-pod<UID>.slice
 * with the uid's '-' written '_'; its cgroupfs driver names it pod<UID>.
 */
static bool pod_component(const char *c, size_t n, char *uid)
{
	const char *u = NULL;

	if (n == 3 + PODS_UID_LEN && !memcmp(c, "pod", 3))
		u = c + 3;
	else if (n > 4 + PODS_UID_LEN + 6 && has_prefix(c, n, "kubepods") &&
		 has_suffix(c, n, ".slice") && !memcmp(c + n - 6 - PODS_UID_LEN - 4, "-pod", 4))
		u = c + n - 6 - PODS_UID_LEN;
	if (!u)
		return false;
	for (int i = 0; i < PODS_UID_LEN; i++)
		uid[i] = u[i] == '_' ? '-' : u[i];
	uid[PODS_UID_LEN] = '\0';
	return pods_uid_valid(uid);
}

/* The next component of cgroup path @c: its start, its length in *@n; NULL at the end. */
static const char *next_part(const char *c, size_t *n)
{
	while (c && *c == '/')
		c++;
	if (!c || !*c)
		return NULL;
	*n = strcspn(c, "/");
	return c;
}

bool procinfo_pod_uid(const char *cgroup, char *uid)
{
	bool root_seen = false;
	size_t n = 0;

	for (const char *c = next_part(cgroup, &n); c; c = next_part(c + n, &n)) {
		if (!root_seen) {
			/*
			 * Only under kubelet's own root (as seen from a cgroup
			 * namespace: after "..") is a component a pod's: a user
			 * may name a cgroup of a subtree delegated to it as it
			 * likes.
			 */
			if (n == 2 && !memcmp(c, "..", 2))
				continue;
			if (!((n == 8 && !memcmp(c, "kubepods", 8)) ||
			      (n == 14 && !memcmp(c, "kubepods.slice", 14))))
				return false;
			root_seen = true;
		} else if (pod_component(c, n, uid)) {
			return true;
		}
	}
	return false;
}

bool procinfo_pod_of(pid_t tid, char *uid)
{
	char cg[PATH_MAX];

	return tid > 0 && read_cgroup(tid, cg, sizeof(cg)) && procinfo_pod_uid(cg, uid);
}

void procinfo_job_rule(const char *env_job, const char *cgroup, pid_t pgid,
		       char *out, size_t len)
{
	char uid[PODS_UID_LEN + 1];
	const char *last = NULL, *c;
	size_t lastn = 0, n = 0;

	/* "k8s:" names are the daemon's: a process cannot pose as a pod */
	if (env_job && !strncmp(env_job, "k8s:", 4))
		env_job = NULL;
	if (procinfo_pod_uid(cgroup, uid)) {
		/* a pod's own name for its job stays inside its namespace */
		if (env_job && env_job[0])
			snprintf(out, len, "k8s:pod/%s/%s", uid, env_job);
		else
			snprintf(out, len, "k8s:pod/%s", uid);
		return;
	}
	if (env_job && env_job[0]) {
		snprintf(out, len, "%s", env_job);
		return;
	}
	for (c = next_part(cgroup, &n); c; c = next_part(c + n, &n)) {
		if (n > 4 && !memcmp(c, "job_", 4) && strspn(c + 4, "0123456789") == n - 4) {
			snprintf(out, len, "slurm:%.*s", (int)n, c);
			return;
		}
		last = c;
		lastn = n;
	}
	if (last && !generic_unit(last, lastn)) {
		snprintf(out, len, "cgroup:%.*s", (int)lastn, last);
		return;
	}
	snprintf(out, len, "pgid:%d", (int)pgid);
}

int procinfo_read(pid_t tid, struct procinfo *pi)
{
	char env[PROCINFO_JOB_MAX], cg[PATH_MAX];
	bool have_env, have_cg;
	int ret;

	memset(pi, 0, sizeof(*pi));
	pi->tid = tid;
	ret = read_stat(tid, pi, NULL);
	if (ret)
		return ret;
	pi->tgid = read_tgid(tid);
	have_env = env_lookup(tid, PROCINFO_ENV_JOB, env, sizeof(env));
	have_cg = read_cgroup(tid, cg, sizeof(cg));
	procinfo_job_rule(have_env ? env : NULL, have_cg ? cg : NULL, pi->pgid,
			  pi->job, sizeof(pi->job));
	/*
	 * A pod the CSI plugin told us about: by its namespace and name, or
	 * its namespace and STAGEFS_JOB; else by its uid alone.
	 */
	if (!strncmp(pi->job, "k8s:pod/", 8)) {
		char named[PROCINFO_JOB_MAX], ns[64], uid[PODS_UID_LEN + 1];
		const char *own = pi->job + 8 + PODS_UID_LEN;

		memcpy(uid, pi->job + 8, PODS_UID_LEN);
		uid[PODS_UID_LEN] = '\0';
		if (*own == '/' && pods_namespace(uid, ns))
			snprintf(named, sizeof(named), "k8s:%s/%s", ns, own + 1);
		else if (*own == '/' || !pods_job(uid, named, sizeof(named)))
			snprintf(named, sizeof(named), "k8s:pod/%s", uid);
		memcpy(pi->job, named, sizeof(named));
	}
	return 0;
}

bool procinfo_running(pid_t tgid, pid_t tid)
{
	return syscall(SYS_tgkill, tgid, tid, 0) == 0 || errno != ESRCH;
}

bool procinfo_alive(pid_t tgid, pid_t tid, uint64_t start)
{
	struct procinfo pi;
	char state = 0;

	if (!procinfo_running(tgid, tid))
		return false;
	/* a zombie still takes signals: look at its state, and at its start time */
	if (read_stat(tid, &pi, &state))
		return false;
	return state != 'Z' && state != 'X' && pi.start == start;
}
