/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_asuser: run a piece of the plugin's work as the job's user.
 *
 * The plugin is called as root (the job prolog and epilog, slurmstepd
 * before it drops privileges), but the daemon must see the job's user: it
 * decides what a control-socket client may stage, and charges what it
 * fetches to a quota, from the peer's credentials as of connect(2)
 * (SO_PEERCRED, SO_PEERGROUPS; docs/control.md).  So everything that talks
 * to the daemon or reads the mount runs in a child that has given up root
 * for good, with the job's groups, gid and uid, before it opens anything;
 * a child that cannot become the user does nothing.  The parent bounds the
 * work: it waits for one result line on a pipe at most until the deadline,
 * then kills the child (a WARMUP whose client goes away is cancelled by the
 * daemon) and waits at most a second more for it to die: a child stuck in
 * a FUSE request of a hung daemon cannot die before the daemon answers,
 * and is left to be reaped later.  So a hung daemon or mount never holds
 * up a job or slurmstepd past the deadline.
 */
#include "spank_stagefs_i.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_NOT_USER	111	/* the child could not become the user */

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* In the child: become @u for good.  0 or -1. */
static int become_user(const struct spank_user *u)
{
	uid_t r, e, s;
	gid_t rg, eg, sg;

	if (setgroups((size_t)u->ngids, u->gids) || setresgid(u->gid, u->gid, u->gid) ||
	    setresuid(u->uid, u->uid, u->uid))
		return -1;
	if (getresuid(&r, &e, &s) || r != u->uid || e != u->uid || s != u->uid ||
	    getresgid(&rg, &eg, &sg) || rg != u->gid || eg != u->gid || sg != u->gid)
		return -1;
	/* root must be gone for good, not only set aside */
	if (u->uid && (!setuid(0) || !seteuid(0)))
		return -1;
	return 0;
}

static void child(const struct spank_user *u, int (*fn)(void *, int), void *arg, int fd,
		  pid_t parent)
{
	signal(SIGPIPE, SIG_IGN);
	if (become_user(u))
		_exit(EXIT_NOT_USER);
	/*
	 * slurmstepd or the prolog going away takes the work with it; set
	 * after the uid change, which clears it, and too late if the parent
	 * is already gone
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(1);
	_exit(fn(arg, fd) ? 1 : 0);
}

int asuser_run(const struct spank_user *u, int (*fn)(void *arg, int fd), void *arg,
	       int timeout_ms, char *out, size_t outlen)
{
	uint64_t deadline = mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	size_t n = 0;
	int p[2], status = 0, ret = 0;
	bool eof = false;
	pid_t pid, parent;

	if (outlen)
		out[0] = '\0';
	if (pipe2(p, O_CLOEXEC))
		return -errno;
	parent = getpid();
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		close(p[0]);
		close(p[1]);
		return ret;
	}
	if (!pid) {
		close(p[0]);
		child(u, fn, arg, p[1], parent);
	}
	close(p[1]);

	while (!eof) {
		uint64_t now = mono_ms();
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		ssize_t got;
		int pr;

		if (now >= deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		pr = poll(&pfd, 1, (int)(deadline - now));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			continue;	/* the deadline check above ends it */
		if (n + 1 >= outlen) {
			char sink[512];

			got = read(p[0], sink, sizeof(sink));
		} else {
			got = read(p[0], out + n, outlen - 1 - n);
			if (got > 0)
				n += (size_t)got;
		}
		if (got < 0 && errno == EINTR)
			continue;
		eof = got <= 0;
	}
	close(p[0]);
	if (ret) {
		kill(pid, SIGKILL);
		/*
		 * A child blocked on a FUSE request that its daemon already
		 * took (a hung daemon) dies only once the daemon answers: wait
		 * a little, then leave it; init or slurmstepd's end reaps it.
		 */
		for (int i = 0; i < 20 && !waitpid(pid, &status, WNOHANG); i++)
			usleep(50 * 1000);
	} else {
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	if (outlen) {
		out[n] = '\0';
		/* one line: the first */
		out[strcspn(out, "\n")] = '\0';
	}
	if (!ret && WIFEXITED(status) && WEXITSTATUS(status) == EXIT_NOT_USER)
		return -EPERM;
	if (!ret && !out[0])
		return -EIO;	/* it died without a word */
	return ret;
}
