/* SPDX-License-Identifier: Apache-2.0 */
/*
 * supervisor: see supervisor.h.
 *
 * One thread, one loop: poll() on a signalfd (SIGCHLD and the signals it
 * forwards, blocked) and on the current daemon's channel (its state
 * messages).  Each daemon gets a channel of its own, so a dead daemon's
 * end closes with it.
 */
#include "supervisor.h"

#include "takeover.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * A daemon that dies before it served, or this soon after, counts toward
 * giving up: a request that crashes every daemon it is sent to again
 * (FUSE_NOTIFY_RESEND) must not loop for ever.
 */
#define QUICK_DEATH_MS	500
#define MAX_QUICK	8	/* ... this many in a row: give up */

struct sup {
	char **argv;
	char exe[PATH_MAX];	/* the binary's path (an upgrade replaces the file) */
	const char *mnt;
	const char *pidfile;
	sigset_t old_mask;
	int sfd;		/* signalfd */
	pid_t child;		/* 0: none running */
	int chan;		/* our end of the child's channel */
	int fuse_fd, state_fd;	/* -1 until the first daemon sent them */
	int recs_fd;		/* the running daemon's handle records, or -1 */
	uint64_t started_ms;
	uint64_t ready_ms;	/* the daemon sent its state: it serves (0: not yet) */
	uint64_t down_ms;	/* when the last daemon ended (or was asked to hand over) */
	unsigned quick;		/* deaths in a row soon after a start */
	bool handover;		/* the child was asked to hand over */
	bool stopping;		/* a stop signal was forwarded */
};

static void sup_exit(struct sup *s, int code)
{
	if (s->pidfile)
		unlink(s->pidfile);
	exit(code);
}

/* Take the state (and the first time the descriptor) from the child's message. */
static void take_message(struct sup *s)
{
	int fds[TAKEOVER_MAX_FDS] = { -1, -1, -1 };
	int n = takeover_msg_recv(s->chan, fds, MSG_DONTWAIT);

	if (n == -EPROTO) {
		log_warn("supervisor: a malformed message from the daemon, ignored");
		return;
	}
	if (n <= 0) {
		if (n == 0 || (n != -EAGAIN && n != -EINTR)) {
			close(s->chan);	/* the daemon is gone: SIGCHLD follows */
			s->chan = -1;
		}
		return;
	}
	if (n >= 2) {
		if (s->fuse_fd < 0)
			s->fuse_fd = fds[0];
		else
			close(fds[0]);	/* the same connection: ours stays */
	}
	if (n == 3) {
		/* the new daemon's records: it copied the old ones in */
		if (s->recs_fd >= 0)
			close(s->recs_fd);
		s->recs_fd = fds[2];
	}
	if (s->state_fd >= 0)
		close(s->state_fd);
	s->state_fd = fds[n == 1 ? 0 : 1];
	if (!s->ready_ms)
		s->ready_ms = now_ms();
}

static int send_state(int chan, int fuse_fd, int state_fd, int recs_fd)
{
	int fds[TAKEOVER_MAX_FDS] = { fuse_fd, state_fd, recs_fd };

	return takeover_msg_send(chan, fds, recs_fd >= 0 ? 3 : 2);
}

/*
 * Start the binary on the same command line with a new channel.  @mode:
 * "1" takes the mount over, "check" only checks that it could.  Returns
 * its pid and our end of its channel, or -errno.
 */
static pid_t spawn(struct sup *s, const char *mode, int *chan_out)
{
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	if (send_state(sv[0], s->fuse_fd, s->state_fd, s->recs_fd)) {
		close(sv[0]);
		close(sv[1]);
		return -EIO;
	}
	pid = fork();
	if (pid < 0) {
		close(sv[0]);
		close(sv[1]);
		return -errno;
	}
	if (!pid) {
		char num[32];
		int fd = fcntl(sv[1], F_DUPFD, 3);	/* without FD_CLOEXEC */

		snprintf(num, sizeof(num), "%d", fd);
		setenv(TAKEOVER_ENV_FD, num, 1);
		setenv(TAKEOVER_ENV_RESUME, mode, 1);
		snprintf(num, sizeof(num), "%" PRIu64, s->down_ms);
		setenv(TAKEOVER_ENV_DOWN_MS, num, 1);
		sigprocmask(SIG_SETMASK, &s->old_mask, NULL);
		execv(s->exe, s->argv);
		fprintf(stderr, "stagefs: supervisor: cannot run %s: %s\n", s->exe, strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	*chan_out = sv[0];
	return pid;
}

static void give_up(struct sup *s, const char *why)
{
	log_err("supervisor: %s: giving the mount %s up (readers get ENOTCONN)", why, s->mnt);
	if (umount2(s->mnt, MNT_DETACH) < 0 && errno != EINVAL)
		log_warn("supervisor: umount %s: %s", s->mnt, strerror(errno));
	if (s->fuse_fd >= 0)
		close(s->fuse_fd);	/* the last descriptor: the connection ends */
	sup_exit(s, 1);
}

static void start_daemon(struct sup *s)
{
	int chan;
	pid_t pid = spawn(s, "1", &chan);

	if (pid < 0) {
		give_up(s, "cannot start a daemon");
		return;
	}
	s->child = pid;
	s->chan = chan;
	s->started_ms = now_ms();
	s->ready_ms = 0;
	s->handover = false;
	log_notice("supervisor: daemon %d takes the mount %s over", (int)pid, s->mnt);
}

/* The daemon @status ended with: what next. */
static void daemon_ended(struct sup *s, int status)
{
	bool quick;

	s->child = 0;
	if (!s->handover)
		s->down_ms = now_ms();
	if (s->chan >= 0) {
		take_message(s);	/* a last state it sent before dying */
		if (s->chan >= 0)
			close(s->chan);
		s->chan = -1;
	}
	quick = !s->ready_ms || now_ms() - s->ready_ms < QUICK_DEATH_MS;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		log_info("supervisor: the daemon unmounted %s: done", s->mnt);
		sup_exit(s, 0);
	}
	if (s->fuse_fd < 0 || s->state_fd < 0) {
		/* it died before the mount was up: nothing to keep */
		sup_exit(s, WIFEXITED(status) ? WEXITSTATUS(status) : 1);
	}
	if (s->stopping) {
		/* asked to stop, and it did not unmount cleanly (already detached?) */
		log_notice("supervisor: the daemon stopped with %s %d: detaching %s",
			   WIFEXITED(status) ? "status" : "signal",
			   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), s->mnt);
		if (umount2(s->mnt, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
			log_warn("supervisor: umount %s: %s", s->mnt, strerror(errno));
		sup_exit(s, 1);
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == TAKEOVER_EXIT_HANDOVER && s->handover) {
		s->quick = 0;
	} else {
		if (WIFSIGNALED(status))
			log_err("supervisor: the daemon was killed by signal %d (%s)",
				WTERMSIG(status), strsignal(WTERMSIG(status)));
		else
			log_err("supervisor: the daemon exited with status %d", WEXITSTATUS(status));
		s->quick = quick ? s->quick + 1 : 0;
		if (s->quick >= MAX_QUICK) {
			give_up(s, "8 daemons in a row died before they served for 0.5 s");
			return;
		}
		if (s->quick > 2)
			usleep(250000u << MIN(s->quick - 3, 4u));	/* 0.25 s .. 4 s */
	}
	start_daemon(s);
}

/* SIGUSR2: check the binary on disk, then have the daemon hand over. */
static void planned_restart(struct sup *s)
{
	int chan, status;
	pid_t pid;

	if (!s->child || s->handover || s->fuse_fd < 0) {
		log_notice("supervisor: no daemon to restart now");
		return;
	}
	pid = spawn(s, "check", &chan);
	if (pid < 0) {
		log_err("supervisor: cannot run %s to check it: %s", s->exe, strerror((int)-pid));
		return;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	close(chan);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		log_err("supervisor: %s cannot take the mount over (%s %d: see its message "
			"above): the running daemon stays", s->exe,
			WIFEXITED(status) ? "exit status" : "signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return;
	}
	log_notice("supervisor: restarting the daemon of %s from %s", s->mnt, s->exe);
	s->handover = true;
	s->down_ms = now_ms();
	kill(s->child, SIGUSR2);
}

static void loop(struct sup *s)
{
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = s->sfd, .events = POLLIN },
			{ .fd = s->chan, .events = POLLIN },
		};
		struct signalfd_siginfo si;

		if (poll(p, s->chan >= 0 ? 2 : 1, -1) < 0) {
			if (errno != EINTR)
				give_up(s, "poll failed");
			continue;
		}
		if (s->chan >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
			take_message(s);
		if (!(p[0].revents & POLLIN) || read(s->sfd, &si, sizeof(si)) != sizeof(si))
			continue;
		switch (si.ssi_signo) {
		case SIGCHLD: {
			int status;
			pid_t pid;

			while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
				if (pid == s->child)
					daemon_ended(s, status);
			break;
		}
		case SIGUSR2:
			planned_restart(s);
			break;
		case SIGTERM:
		case SIGINT:
		case SIGQUIT:
			s->stopping = true;
			/* fall through */
		default:
			if (s->child)
				kill(s->child, (int)si.ssi_signo);
			else if (s->stopping)
				give_up(s, "stopped between two daemons");
			break;
		}
	}
}

int supervisor_start(char **argv, const char *mnt, int status_fd, const char *pidfile,
		     void (*in_supervisor)(void *arg), void *arg)
{
	static struct sup s;
	sigset_t mask;
	ssize_t n;
	int sv[2];
	pid_t pid;

	s = (struct sup){ .argv = argv, .mnt = mnt, .pidfile = pidfile, .chan = -1,
			  .fuse_fd = -1, .state_fd = -1, .recs_fd = -1 };
	n = readlink("/proc/self/exe", s.exe, sizeof(s.exe) - 1);
	if (n <= 0 || (size_t)n >= sizeof(s.exe) - 1)
		return -ENAMETOOLONG;
	s.exe[n] = '\0';
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGQUIT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGUSR2);
	/* blocked before the fork: no signal is lost between it and the signalfd */
	sigprocmask(SIG_BLOCK, &mask, &s.old_mask);
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		sigprocmask(SIG_SETMASK, &s.old_mask, NULL);
		close(sv[0]);
		close(sv[1]);
		return err;
	}
	if (!pid) {
		char num[16];

		sigprocmask(SIG_SETMASK, &s.old_mask, NULL);
		close(sv[0]);
		snprintf(num, sizeof(num), "%d", sv[1]);
		setenv(TAKEOVER_ENV_FD, num, 1);
		return 0;
	}
	close(sv[1]);
	if (status_fd >= 0)
		close(status_fd);	/* the daemon tells the waiting parent */
	if (in_supervisor)
		in_supervisor(arg);
	s.sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (s.sfd < 0) {
		/* cannot supervise: be a plain parent that waits */
		int status;

		waitpid(pid, &status, 0);
		exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
	}
	s.child = pid;
	s.chan = sv[0];
	s.started_ms = now_ms();
	if (pidfile) {
		FILE *f = fopen(pidfile, "we");

		if (f) {
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
	}
	log_info("supervisor %d: daemon %d serves %s", (int)getpid(), (int)pid, mnt);
	loop(&s);
	return 0;
}
