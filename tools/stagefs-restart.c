/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stagefs-restart: `stagefs restart [--wait SECONDS] MOUNTPOINT` restarts
 * the daemon of a supervised mount from the binary on disk, without ending
 * the mount: readers see a pause, never an error (docs/restart.md).
 *
 * The mount tells who to ask: MOUNTPOINT/.stagefs/stats (any user may read
 * it) has supervisor_pid, the supervisor that holds the mount's /dev/fuse
 * descriptor (0 where the mount is not supervised: then a restart would end
 * it, and this tool refuses), and daemon_generation, which each daemon that
 * takes the mount over raises.  The tool sends the supervisor SIGUSR2: it
 * runs the binary on disk in a check mode, asks the daemon to hand over,
 * and starts the new binary, which takes the mount over; or, where the
 * binary on disk refuses the mount's state, it logs why and the running
 * daemon stays.  So by default the tool then waits until the generation
 * has advanced, and says so (the new generation, the readers' pause, the
 * version now serving), or says after SECONDS that it has not (a refusal:
 * the reason is in the mount's log).
 *
 * The pid comes from the daemon that serves the mount, and is checked
 * before the signal goes: it must be a stagefs (its executable, or where
 * that cannot be read its comm), and it is held as a pidfd while the stats
 * are read again, so a supervisor that died and a pid recycled meanwhile
 * are told apart from the live supervisor (the daemon reports its parent:
 * the same pid again while the pidfd's process lives means it is that
 * process), and the signal goes to the process checked, never to another
 * that took its pid.
 *
 * --all restarts every supervised stagefs mount of this mount namespace, one
 * supervisor once, and names those it cannot restart without ending them;
 * with --binary PATH only those whose supervisor runs PATH: the package's
 * upgrade restarts the mounts of /usr/bin/stagefs, which it replaced, and
 * leaves alone a stagefs run from elsewhere (a build tree, /opt), which a
 * restart would not upgrade.
 *
 * Exit status: 0 restarted (with --wait 0: the supervisor was asked); 1 an
 * error (not a stagefs mount, the stats unreadable, the supervisor gone or
 * not ours to signal); 2 a usage error; 3 the mount is not supervised
 * (nothing was done); 4 no new daemon took the mount over within the wait
 * (the running daemon stays).
 */
#include "ctlproto.h"
#include "json.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DEFAULT_WAIT_S	60

enum {
	EXIT_OK = 0,
	EXIT_ERR = 1,
	EXIT_USAGE = 2,
	EXIT_UNSUPERVISED = 3,
	EXIT_NOT_TAKEN = 4,
};

static void usage(FILE *f)
{
	fprintf(f, "usage: stagefs restart [-w SECONDS] MOUNTPOINT\n"
		   "       stagefs restart [-w SECONDS] --all [--binary PATH]\n"
		   "\n"
		   "Restart the daemon of a supervised stagefs mount from the binary on disk\n"
		   "(after an upgrade) without ending the mount: readers pause, jobs go on.\n"
		   "Waits until the new daemon serves, then prints its generation, the\n"
		   "readers' pause and its version.\n"
		   "\n"
		   "    -w, --wait SECONDS    wait this long for the new daemon (default 60);\n"
		   "                          0: ask the supervisor and return\n"
		   "    -a, --all             every supervised stagefs mount of this node\n"
		   "    -b, --binary PATH     with --all: only those whose supervisor runs PATH\n"
		   "                          (the binary a package upgrade replaced)\n"
		   "    -h, --help            this text\n"
		   "\n"
		   "Exit status: 0 restarted; 1 an error; 2 usage; 3 the mount is not\n"
		   "supervised (left as it is); 4 no new daemon took over within the wait.\n");
}

static void err_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void err_msg(const char *fmt, ...)
{
	va_list ap;

	fputs("stagefs restart: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- the mount's stats ---- */


/* What a restart needs of the stats. */
struct state {
	bool has_supervisor;	/* the daemon reports supervisor_pid at all */
	uint64_t supervisor;
	uint64_t generation;
	uint64_t pause_ms;
	char version[64];
};

static int read_state(const char *mnt, struct state *st, char *err, size_t errlen)
{
	struct json_doc *doc;
	const struct json *r, *v;
	int ret = ctl_load_stats(mnt, &doc, err, errlen);

	if (ret)
		return ret;
	r = json_root(doc);
	*st = (struct state){ 0 };
	v = json_get(r, "supervisor_pid");
	st->has_supervisor = json_type(v) == JSON_NUMBER;
	st->supervisor = json_u64(v, 0);
	st->generation = json_u64(json_get(r, "daemon_generation"), 0);
	st->pause_ms = json_u64(json_get(r, "takeover_pause_ms"), 0);
	v = json_get(r, "version");
	snprintf(st->version, sizeof(st->version), "%s", json_str(v, "unknown"));
	ret = json_type(v) == JSON_STRING && st->generation ? 0 : -EINVAL;
	json_doc_free(doc);
	if (ret)
		snprintf(err, errlen, "%s/.stagefs/stats has no version or daemon_generation: "
			 "not a stagefs daemon's", mnt);
	return ret;
}

/* ---- /proc/self/mountinfo ---- */

struct mnt {
	char dir[PATH_MAX];
	char type[64];
};

/*
 * The mounts of this namespace in mountinfo order (later ones on top).
 * Returns how many (*@out: malloc'd), or -errno.
 */
static int list_mounts(struct mnt **out)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	struct mnt *v = NULL;
	size_t n = 0, cap = 0, lcap = 0;
	char *line = NULL;

	if (!f)
		return -errno;
	while (getline(&line, &lcap, f) > 0) {
		char *save = NULL, *tok, *dir = NULL, *type = NULL;
		int field = 0;
		bool dash = false;

		for (tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			field++;
			if (field == 5)
				dir = tok;
			else if (field > 6 && !dash && !strcmp(tok, "-"))
				dash = true;
			else if (dash) {
				type = tok;
				break;
			}
		}
		if (!dir || !type)
			continue;
		if (n == cap) {
			struct mnt *nv = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*v));

			if (!nv) {
				free(v);
				free(line);
				fclose(f);
				return -ENOMEM;
			}
			v = nv;
		}
		mountinfo_unescape(dir);
		snprintf(v[n].dir, sizeof(v[n].dir), "%s", dir);
		snprintf(v[n].type, sizeof(v[n].type), "%s", type);
		n++;
	}
	free(line);
	fclose(f);
	*out = v;
	return (int)n;
}

/* The mount (the last one: on top) whose directory holds @path, or NULL. */
static const struct mnt *mount_of(const struct mnt *v, int n, const char *path)
{
	const struct mnt *best = NULL;
	size_t blen = 0;

	for (int i = 0; i < n; i++) {
		size_t l = strlen(v[i].dir);

		if (!strcmp(v[i].dir, "/"))
			l = 0;
		else if (strncmp(path, v[i].dir, l) || (path[l] && path[l] != '/'))
			continue;
		if (!best || l >= blen) {
			best = &v[i];
			blen = l;
		}
	}
	return best;
}

/* ---- the supervisor ---- */

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

static int pidfd_signal(int pidfd, pid_t pid, int sig)
{
#ifdef SYS_pidfd_send_signal
	if (pidfd >= 0)
		return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
#endif
	(void)pidfd;
	return kill(pid, sig);
}

/* Whether @pidfd's process has ended (without a pidfd: whether @pid is gone). */
static bool proc_gone(int pidfd, pid_t pid)
{
	if (pidfd >= 0) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };

		return poll(&p, 1, 0) == 1;
	}
	return kill(pid, 0) < 0 && errno == ESRCH;
}

/*
 * Whether process @pid is a stagefs: the name of its executable (an upgrade
 * leaves "/usr/bin/stagefs (deleted)"), or where that cannot be read (not
 * ours), its comm.  @what gets what it is, for the message; @exe the
 * executable's path where known ("" otherwise).
 */
static bool is_stagefs(pid_t pid, char *what, size_t wlen, char *exe, size_t elen)
{
	char path[64], buf[PATH_MAX];
	ssize_t n;
	FILE *f;

	exe[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	n = readlink(path, buf, sizeof(buf) - 1);
	if (n > 0) {
		const char *base;
		size_t l;

		buf[n] = '\0';
		l = strlen(buf);
		if (l > 10 && !strcmp(buf + l - 10, " (deleted)"))
			buf[l - 10] = '\0';
		snprintf(exe, elen, "%s", buf);
		snprintf(what, wlen, "%s", buf);
		base = strrchr(buf, '/');
		return !strcmp(base ? base + 1 : buf, "stagefs");
	}
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	f = fopen(path, "re");
	if (!f) {
		snprintf(what, wlen, "no such process");
		return false;
	}
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	snprintf(what, wlen, "a process named %s", buf);
	return !strcmp(buf, "stagefs");
}

static const char *const log_hint =
	"the daemon's log says why (journalctl -u stagefs for the unit; the "
	"log_file setting, or syslog for a mount in the background; stderr "
	"for one with -f)";

static const char *const sup_hint =
	"mount it with -o supervise=on (the default without -f; the systemd unit "
	"sets it): a supervised mount's daemon can be restarted, this one only "
	"by unmounting";

/*
 * Restart the daemon of the stagefs mount at @mnt (a mount point, resolved).
 * @quiet_unsupervised: say it in a line rather than as an error (--all).
 * @binary: only where the supervisor runs it (NULL: any stagefs).
 * @done/@ndone: supervisors already asked in this run (--all).
 */
static int restart_one(const char *mnt, double wait_s, bool quiet_unsupervised,
		       const char *binary, uint64_t *done, size_t *ndone)
{
	char err[PATH_MAX + 512], what[PATH_MAX + 64], exe[PATH_MAX];
	struct state st, st2;
	uint64_t start, deadline;
	int pidfd, ret;
	pid_t pid;

	ret = read_state(mnt, &st, err, sizeof(err));
	if (ret == -ENOTCONN && quiet_unsupervised) {
		printf("%s: dead (%s): its daemon is gone and nobody took it over: left "
		       "as it is\n", mnt, strerror(ENOTCONN));
		return EXIT_OK;
	}
	if (ret == -ENOTCONN) {
		err_msg("%s: the mount's daemon is gone and nobody took it over (%s): "
			"nothing to restart; unmount it (fusermount3 -u -z %s) and mount "
			"it again", mnt, strerror(ENOTCONN), mnt);
		return EXIT_ERR;
	}
	if (ret == -ENOENT) {
		err_msg("%s: not a stagefs mount (no .stagefs/stats)", mnt);
		return EXIT_ERR;
	}
	if (ret) {
		err_msg("%s", err);
		return EXIT_ERR;
	}
	if (!st.has_supervisor) {
		if (quiet_unsupervised) {
			printf("%s: its daemon (stagefs %s) predates supervised mounts: left "
			       "as it is\n", mnt, st.version);
			return EXIT_OK;
		}
		err_msg("%s: its daemon (stagefs %s) predates supervised mounts: "
			"restarting it would end the mount", mnt, st.version);
		return EXIT_UNSUPERVISED;
	}
	if (!st.supervisor) {
		if (quiet_unsupervised) {
			printf("%s: not supervised: left as it is (stagefs %s, daemon "
			       "generation %" PRIu64 "); %s\n", mnt, st.version, st.generation,
			       sup_hint);
			return EXIT_OK;
		}
		err_msg("%s: not supervised, so its daemon cannot be restarted without "
			"ending the mount; %s", mnt, sup_hint);
		return EXIT_UNSUPERVISED;
	}
	if (st.supervisor > INT_MAX) {
		err_msg("%s: supervisor_pid %" PRIu64 " is not a pid", mnt, st.supervisor);
		return EXIT_ERR;
	}
	pid = (pid_t)st.supervisor;
	for (size_t i = 0; done && i < *ndone; i++)
		if (done[i] == st.supervisor) {
			printf("%s: the same supervisor (pid %d) as a mount restarted above\n",
			       mnt, (int)pid);
			return EXIT_OK;
		}

	/* hold the process before checking it: the signal goes to the one checked */
	pidfd = pidfd_open_(pid);
	if (pidfd < 0 && errno == ESRCH) {
		err_msg("%s: its supervisor (pid %d) is gone: the mount ends with its "
			"daemon", mnt, (int)pid);
		return EXIT_ERR;
	}
	if (pidfd < 0 && errno != ENOSYS) {
		err_msg("%s: pidfd_open of the supervisor (pid %d): %s", mnt, (int)pid,
			strerror(errno));
		return EXIT_ERR;
	}
	if (!is_stagefs(pid, what, sizeof(what), exe, sizeof(exe))) {
		err_msg("%s: supervisor_pid %d is not a stagefs (%s): the supervisor is "
			"gone and the mount ends with its daemon; not signalling it",
			mnt, (int)pid, what);
		ret = EXIT_ERR;
		goto out;
	}
	if (binary && strcmp(exe, binary)) {
		printf("%s: its supervisor (pid %d) runs %s, not %s: left as it is\n", mnt,
		       (int)pid, exe[0] ? exe : what, binary);
		ret = EXIT_OK;
		goto out;
	}
	/* the daemon names its parent: still this pid, while our process lives */
	ret = read_state(mnt, &st2, err, sizeof(err));
	if (ret) {
		err_msg("%s", err);
		ret = EXIT_ERR;
		goto out;
	}
	if (st2.supervisor != st.supervisor || proc_gone(pidfd, pid)) {
		err_msg("%s: the supervisor changed while it was checked (pid %d, now %" PRIu64
			"): not signalling; try again", mnt, (int)pid, st2.supervisor);
		ret = EXIT_ERR;
		goto out;
	}
	if (st2.generation != st.generation)
		st = st2;	/* a takeover in between: wait for the next */
	if (pidfd_signal(pidfd, pid, SIGUSR2) < 0) {
		if (errno == EPERM)
			err_msg("%s: not allowed to signal its supervisor (pid %d, %s): "
				"run stagefs restart as root", mnt, (int)pid, what);
		else
			err_msg("%s: signalling its supervisor (pid %d): %s", mnt, (int)pid,
				strerror(errno));
		ret = EXIT_ERR;
		goto out;
	}
	if (done)
		done[(*ndone)++] = st.supervisor;
	if (wait_s <= 0) {
		printf("%s: asked the supervisor (pid %d) to restart the daemon (generation "
		       "%" PRIu64 ", stagefs %s) from %s\n", mnt, (int)pid, st.generation,
		       st.version, exe[0] ? exe : "the binary on disk");
		ret = EXIT_OK;
		goto out;
	}

	start = now_ms();
	deadline = start + (uint64_t)(wait_s * 1000.0);
	for (;;) {
		usleep(100000);
		/* during the takeover this waits, as every reader does */
		ret = read_state(mnt, &st2, err, sizeof(err));
		if (ret == -ENOTCONN) {
			err_msg("%s: the mount ended during the restart (%s): %s", mnt,
				strerror(ENOTCONN), log_hint);
			ret = EXIT_ERR;
			goto out;
		}
		if (!ret && st2.generation > st.generation) {
			printf("%s: restarted: daemon generation %" PRIu64 " (was %" PRIu64
			       "), takeover pause %" PRIu64 " ms, stagefs %s",
			       mnt, st2.generation, st.generation, st2.pause_ms, st2.version);
			if (strcmp(st2.version, st.version))
				printf(" (was %s)", st.version);
			printf("\n");
			ret = EXIT_OK;
			goto out;
		}
		if (proc_gone(pidfd, pid)) {
			err_msg("%s: the supervisor (pid %d) exited during the restart: %s",
				mnt, (int)pid, log_hint);
			ret = EXIT_ERR;
			goto out;
		}
		if (now_ms() >= deadline)
			break;
	}
	err_msg("%s: no new daemon took the mount over within %g s (daemon generation "
		"still %" PRIu64 "): the running daemon (stagefs %s) stays and serves. "
		"%s may have refused the mount's state or failed to start: %s",
		mnt, wait_s, st.generation, st.version, exe[0] ? exe : "The binary on disk",
		log_hint);
	ret = EXIT_NOT_TAKEN;
out:
	if (pidfd >= 0)
		close(pidfd);
	return ret;
}

/* The mount point @arg names, resolved into @out.  Returns 0 or an exit status. */
static int resolve_mount(const char *arg, char *out, size_t outlen)
{
	char path[PATH_MAX];
	const struct mnt *m;
	struct mnt *v = NULL;
	int n, ret = EXIT_OK;

	if (!realpath(arg, path)) {
		if (errno == ENOTCONN)
			err_msg("%s: the mount's daemon is gone and nobody took it over (%s): "
				"nothing to restart; unmount it (fusermount3 -u -z %s) and "
				"mount it again", arg, strerror(errno), arg);
		else
			err_msg("%s: %s", arg, strerror(errno));
		return EXIT_ERR;
	}
	n = list_mounts(&v);
	if (n < 0) {
		err_msg("/proc/self/mountinfo: %s", strerror(-n));
		return EXIT_ERR;
	}
	m = mount_of(v, n, path);
	if (!m || strcmp(m->type, "fuse.stagefs")) {
		err_msg("%s: not a stagefs mount (%s is on a %s file system mounted on %s)",
			arg, path, m ? m->type : "unknown", m ? m->dir : "?");
		ret = EXIT_ERR;
	} else if (strcmp(m->dir, path)) {
		err_msg("%s: not a mount point: it is inside the stagefs mount %s "
			"(stagefs restart %s)", arg, m->dir, m->dir);
		ret = EXIT_ERR;
	} else {
		snprintf(out, outlen, "%s", path);
	}
	free(v);
	return ret;
}

static int restart_all(double wait_s, const char *binary)
{
	struct mnt *v = NULL;
	uint64_t *done;
	size_t ndone = 0;
	int n, worst = EXIT_OK, found = 0;

	n = list_mounts(&v);
	if (n < 0) {
		err_msg("/proc/self/mountinfo: %s", strerror(-n));
		return EXIT_ERR;
	}
	done = calloc((size_t)n + 1, sizeof(*done));
	if (!done) {
		free(v);
		err_msg("out of memory");
		return EXIT_ERR;
	}
	for (int i = 0; i < n; i++) {
		int r;

		if (strcmp(v[i].type, "fuse.stagefs"))
			continue;
		/* a mount with another mounted over it is not reachable here */
		if (mount_of(v, n, v[i].dir) != &v[i])
			continue;
		found++;
		r = restart_one(v[i].dir, wait_s, true, binary, done, &ndone);
		/* the worst outcome: an error over a refusal */
		if (r == EXIT_ERR || (r == EXIT_NOT_TAKEN && worst == EXIT_OK))
			worst = r;
		fflush(stdout);
	}
	if (!found)
		printf("no stagefs mount\n");
	free(done);
	free(v);
	return worst;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "wait", required_argument, NULL, 'w' },
		{ "all", no_argument, NULL, 'a' },
		{ "binary", required_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char mnt[PATH_MAX], binary[PATH_MAX], *end;
	double wait_s = DEFAULT_WAIT_S;
	bool all = false, by_binary = false;
	int c, ret;

	while ((c = getopt_long(argc, argv, "w:ab:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'w':
			errno = 0;
			wait_s = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(wait_s) || wait_s < 0 ||
			    wait_s > 86400) {
				err_msg("--wait %s: not a number of seconds (0 to 86400)", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'a':
			all = true;
			break;
		case 'b':
			/* as /proc/PID/exe names it: resolved */
			if (!realpath(optarg, binary)) {
				err_msg("--binary %s: %s", optarg, strerror(errno));
				return EXIT_ERR;
			}
			by_binary = true;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (argc - optind != (all ? 0 : 1) || (by_binary && !all)) {
		usage(stderr);
		return EXIT_USAGE;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (all)
		return restart_all(wait_s, by_binary ? binary : NULL);
	ret = resolve_mount(argv[optind], mnt, sizeof(mnt));
	if (ret)
		return ret;
	return restart_one(mnt, wait_s, false, NULL, NULL, NULL);
}
