/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main: the `stagefs` command.
 *
 *   stagefs [options] SOURCE MOUNTPOINT     mount a dataset (the daemon)
 *   stagefs [options] -c CONFIG MOUNTPOINT  every [dataset NAME] of CONFIG
 *   stagefs publish|gc|warmup|top|quota|restart ... run stagefs-CMD (git style)
 *
 * Start-up order matters: without -f the process forks first, before any
 * thread exists (librados and the FUSE loop start threads, and fork keeps
 * only the caller), and the parent waits on a pipe until the child has
 * opened the cache, opened the dataset and mounted, or has failed.  So the
 * parent's exit status and message tell the truth about the mount, as
 * `mount` users expect.
 */
#include "fs.h"

#include "access.h"
#include "fuse/ctl/ctlsock.h"
#include "daemon.h"
#include "datasets.h"
#include "fh.h"
#include "handles.h"
#include "kinodes.h"
#include "packpush.h"
#include "pushmap.h"

#include "log.h"
#include "metrics.h"
#include "mountpoint.h"
#include "noopen.h"
#include "passthrough.h"
#include "peerd.h"
#include "ptacct.h"
#include "policy.h"
#include "safepath.h"
#include "session_io.h"
#include "supervisor.h"
#include "takeover.h"
#include "uring.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

/* The subcommands (tools/stagefs-NAME.c), with their --help line. */
static const struct subcommand {
	const char *name, *args, *what;
} subcommands[] = {
	{ "publish", "DIR rados://POOL/NAME",
	  "put a directory into Ceph as a dataset's next version" },
	{ "gc", "[--keep N] rados://POOL",
	  "drop old versions, then the chunks no version names" },
	{ "warmup", "[--shard I/N] PATH...",
	  "stage files of a mount in this node's cache" },
	{ "top", "[--once [--json]] MOUNTPOINT",
	  "live feed rate, hit ratio and stall per user, job, GPU" },
	{ "quota", "[--json] MOUNTPOINT",
	  "each user's share of the node cache" },
	{ "restart", "[-w SECONDS] MOUNTPOINT",
	  "restart a supervised mount's daemon, keeping the mount" },
};

/* FUSE mount options passed through to the kernel/libfuse as they are. */
static const char *const fuse_passthrough_opts[] = {
	"allow_root", "auto_unmount", "fsname", "subtype", "noatime",
	"nodev", "nosuid", "max_read", "blkdev", "noexec", "exec",
	"sync", "async", "dirsync",
};

/*
 * What mount(8) and mount.fuse3 pass on from an /etc/fstab line that means
 * nothing to stagefs, or nothing beyond what it always does: accepted and
 * dropped (as are x-* and comment=).  A dataset mount is always read-only,
 * nosuid and nodev, so "rw", "suid" and "dev" change nothing: mount.fuse3
 * adds "dev,suid" to every line that does not say nodev/nosuid, and no
 * set-user-ID bit or device node a publisher put into a dataset is honoured.
 */
static const char *const mount_ignored_opts[] = {
	"rw", "ro", "suid", "dev", "defaults", "auto", "noauto", "user",
	"nouser", "users", "owner", "group", "_netdev", "nofail", "atime",
	"relatime", "norelatime", "strictatime", "nostrictatime", "diratime",
	"nodiratime", "lazytime", "nolazytime", "iversion", "noiversion",
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: stagefs [options] SOURCE MOUNTPOINT\n"
		"       stagefs [options] -c CONFIG MOUNTPOINT   (every [dataset NAME] of CONFIG)\n"
		"       stagefs COMMAND [ARGS]                  (stagefs COMMAND --help)\n"
		"\n"
		"Mount an immutable dataset read-only, cached in chunks on local disk.\n"
		"\n"
		"commands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(subcommands); i++) {
		char left[64];

		snprintf(left, sizeof(left), "%s %s", subcommands[i].name, subcommands[i].args);
		fprintf(f, "    %-34s %s\n", left, subcommands[i].what);
	}
	fprintf(f,
		"\n"
		"SOURCE:\n"
		"    dir:///PATH                 a local, NFS or Lustre directory (or just /PATH)\n"
		"    rados://POOL/NAME[@VERSION] a dataset published with `stagefs publish`\n"
		"    rados://POOL/NAMESPACE?plain  every object in a namespace as a file\n"
		"    cephfs://FS/PATH[@SNAPSHOT] a CephFS directory or snapshot, through libcephfs\n"
		"    s3://BUCKET[/PREFIX]        the objects under a prefix of an S3 bucket\n"
		"\n"
		"options:\n"
		"    -f, --foreground            stay in the foreground\n"
		"    -d, --debug                 foreground, log_level=debug\n"
		"    -c, --config FILE           read settings from FILE (INI, section [stagefs])\n"
		"    -o OPT[,OPT...]             settings as name=value (override the file)\n"
		"    -h, --help                  this text\n"
		"    -V, --version               print the version\n"
		"        --check                 with -c CONFIG: read it, say what is wrong (FILE:LINE), exit\n"
		"        --print-config[=ini|markdown|scdoc]  print a complete example config,\n"
		"                                or the settings reference of docs/configuration.md\n"
		"                                or of the man pages\n"
		"\n"
		"settings (-o name=value, or name = value in the config file):\n");
	config_print_help(f);
	fprintf(f, "\nFUSE mount options passed through with -o:");
	for (size_t i = 0; i < ARRAY_SIZE(fuse_passthrough_opts); i++)
		fprintf(f, " %s", fuse_passthrough_opts[i]);
	fprintf(f, "\nfstab options accepted and ignored (the mount is always ro,nosuid,nodev):");
	for (size_t i = 0; i < ARRAY_SIZE(mount_ignored_opts); i++)
		fprintf(f, " %s", mount_ignored_opts[i]);
	fprintf(f, " x-* comment=*\n"
		"/etc/fstab: SOURCE MOUNTPOINT fuse.stagefs OPTIONS 0 0 (mount.fuse3 runs `stagefs`)\n"
		"\nUnmount with `fusermount3 -u MOUNTPOINT`, SIGTERM or SIGINT.\n"
		"Manual: stagefs(8), stagefs.conf(5), stagefs-COMMAND(1 or 8), libstagefs(3).\n");
}

static void exec_subcommand(const char *cmd, int argc, char **argv)
{
	char self[PATH_MAX], path[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	(void)argc;
	if (n > 0) {
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		snprintf(path, sizeof(path), "%s/stagefs-%s", self, cmd);
		execv(path, argv);
		/* an installed tree moved as a whole: BINDIR/../libexec/stagefs */
		snprintf(path, sizeof(path), "%s/../libexec/stagefs/stagefs-%s", self, cmd);
		execv(path, argv);
	}
	snprintf(path, sizeof(path), "%s/stagefs-%s", CONFIG_LIBEXECDIR, cmd);
	execv(path, argv);
	fprintf(stderr, "stagefs: cannot run stagefs-%s: %s\n", cmd, strerror(errno));
	exit(127);
}

static void redirect_stdio(const struct sfs_config *cfg);

/* The command line as given, for the supervisor (kept for the process's life). */
static char **argv0;

/* ---- a planned handover (SIGUSR2 from the supervisor) ---- */

static struct fuse_session *handover_se;
static volatile sig_atomic_t handover;

static void on_sigusr2(int sig)
{
	(void)sig;
	handover = 1;
	if (handover_se)
		fuse_session_exit(handover_se);
}

static void stdio_detach(void *cfg)
{
	redirect_stdio(cfg);
}

/*
 * A daemon that took the mount over loads the passthrough accounting while
 * it serves (60-230 ms of BPF loading is no pause for readers to wait out):
 * opens before it is published are estimated (ptacct.h).  Where
 * passthrough_accounting=bpf cannot be had it is too late to fail the
 * mount, which the first daemon mounted with it: logged as an error.
 */
static void *late_ptacct(void *arg)
{
	struct sfs *fs = arg;
	char why[512], err[1024];
	struct ptacct *pa;
	int load;

	load = ptacct_create(fs, &pa, why, sizeof(why));
	atomic_store_explicit(&fs->pa, pa, memory_order_release);
	if (ptacct_settle(fs, load, why, err, sizeof(err)))
		log_err("%s: passthrough reads are estimated until the next mount", err);
	return NULL;
}

/* ---- daemonizing with a status pipe ---- */

static int status_fd = -1;

/*
 * Fork; the parent waits for the child's verdict on a pipe and exits with
 * it (on a failure, once the child has exited).  Returns in the child only.
 */
static void daemonize_begin(void)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0) {
		perror("stagefs: pipe");
		exit(1);
	}
	pid = fork();
	if (pid < 0) {
		perror("stagefs: fork");
		exit(1);
	}
	if (pid > 0) {
		char msg[4096];
		size_t got = 0;
		ssize_t r;

		close(p[1]);
		while (got < sizeof(msg) - 1 &&
		       (r = read(p[0], msg + got, sizeof(msg) - 1 - got)) > 0)
			got += (size_t)r;
		msg[got] = '\0';
		if (got > 0 && msg[0] == '0')
			_exit(0);
		if (got > 1)
			fprintf(stderr, "%s\n", msg + 1);
		else
			fprintf(stderr, "stagefs: the daemon exited during start-up\n");
		/* gone, with its cache lock, before a retry may start */
		waitpid(pid, NULL, 0);
		_exit(1);
	}
	close(p[0]);
	status_fd = p[1];
	setsid();
}

/* Tell the waiting parent how start-up went (no-op in the foreground). */
static void daemonize_end(bool ok, const char *msg)
{
	char buf[4096];
	int n;

	if (status_fd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "%c%s", ok ? '0' : '1', msg ? msg : "");
	if (write(status_fd, buf, (size_t)MIN(n, (int)sizeof(buf) - 1)) < 0) {
		/* the parent is gone: nobody to tell */
	}
	close(status_fd);
	status_fd = -1;
}

static void __attribute__((format(printf, 1, 2), noreturn)) fail(const char *fmt, ...)
{
	char msg[4096];
	va_list ap;
	int n;

	n = snprintf(msg, sizeof(msg), "stagefs: ");
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	va_end(ap);
	if (status_fd >= 0)
		daemonize_end(false, msg);
	else
		fprintf(stderr, "%s\n", msg);
	exit(1);
}

/* ---- options ---- */

struct cli {
	bool foreground;
	bool debug;
	bool check;		/* --check: read the settings, say what is wrong, exit */
	const char *config;
	char *fuse_opts;	/* comma list passed to libfuse */
	char **sets;		/* "name=value" from -o, in order */
	size_t nsets;
	const char *source;
	const char *mountpoint;
};

static bool is_ignored_mount_opt(const char *name)
{
	if (!strncmp(name, "x-", 2) || !strncmp(name, "comment=", 8))
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(mount_ignored_opts); i++)
		if (!strcmp(name, mount_ignored_opts[i]))
			return true;
	return false;
}

static bool is_fuse_opt(const char *name)
{
	size_t n = strcspn(name, "=");

	for (size_t i = 0; i < ARRAY_SIZE(fuse_passthrough_opts); i++)
		if (strlen(fuse_passthrough_opts[i]) == n &&
		    !strncmp(name, fuse_passthrough_opts[i], n))
			return true;
	return false;
}

static void append_fuse_opt(struct cli *cli, const char *opt)
{
	size_t old = cli->fuse_opts ? strlen(cli->fuse_opts) : 0;
	char *s = realloc(cli->fuse_opts, old + strlen(opt) + 2);

	if (!s)
		fail("out of memory");
	if (old)
		s[old++] = ',';
	strcpy(s + old, opt);
	cli->fuse_opts = s;
}

static void add_o(struct cli *cli, char *arg)
{
	char *save = NULL;

	for (char *tok = strtok_r(arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (is_ignored_mount_opt(tok))
			continue;
		if (is_fuse_opt(tok)) {
			append_fuse_opt(cli, tok);
			continue;
		}
		cli->sets = realloc(cli->sets, (cli->nsets + 1) * sizeof(*cli->sets));
		if (!cli->sets)
			fail("out of memory");
		cli->sets[cli->nsets++] = tok;
	}
}

static void parse_cli(int argc, char **argv, struct cli *cli)
{
	static const struct option longopts[] = {
		{ "foreground", no_argument, NULL, 'f' },
		{ "debug", no_argument, NULL, 'd' },
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "print-config", optional_argument, NULL, 'P' },
		{ "check", no_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "fdc:o:hVs", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			cli->foreground = true;
			break;
		case 'd':
			cli->foreground = cli->debug = true;
			break;
		case 'c':
			cli->config = optarg;
			break;
		case 'o':
			add_o(cli, optarg);
			break;
		case 's':
			/* libfuse's single-threaded flag: accepted, ignored */
			break;
		case 'C':
			cli->check = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("stagefs %s (libfuse %s)\n", STAGEFS_VERSION,
			       fuse_pkgversion());
			exit(0);
		case 'P':
			if (optarg && !strcmp(optarg, "markdown"))
				config_print_markdown(stdout);
			else if (optarg && !strcmp(optarg, "scdoc"))
				config_print_scdoc(stdout);
			else if (!optarg || !strcmp(optarg, "ini"))
				config_print_example(stdout);
			else
				fail("--print-config=%s: expected ini, markdown or scdoc", optarg);
			exit(0);
		default:
			fprintf(stderr, "Try 'stagefs --help'.\n");
			exit(2);
		}
	}
	if (cli->check && argc == optind) {
		if (!cli->config) {
			fprintf(stderr, "stagefs: --check needs -c CONFIG\n");
			exit(2);
		}
		return;
	}
	if (argc - optind == 1) {
		/* a mount root of the datasets listed in the config */
		cli->mountpoint = argv[optind];
		return;
	}
	if (argc - optind != 2) {
		fprintf(stderr, "stagefs: expected SOURCE MOUNTPOINT (or -c CONFIG MOUNTPOINT)\n"
				"Try 'stagefs --help'.\n");
		exit(2);
	}
	/* an empty SOURCE also means "the datasets of the config file" */
	cli->source = argv[optind][0] ? argv[optind] : NULL;
	cli->mountpoint = argv[optind + 1];
}

static void apply_settings(struct sfs *fs, struct cli *cli)
{
	char err[1024];

	config_init(&fs->cfg);
	fs->policy = policy_create();
	if (!fs->policy)
		fail("out of memory");
	policy_register(fs->policy);
	if (cli->config && config_load(&fs->cfg, cli->config, err, sizeof(err))) {
		fprintf(stderr, "stagefs: %s\n", err);
		exit(1);
	}
	for (size_t i = 0; i < cli->nsets; i++) {
		char *eq = strchr(cli->sets[i], '=');
		const char *val = "yes";

		if (eq) {
			*eq = '\0';
			val = eq + 1;
		} else if (!strncmp(cli->sets[i], "no", 2) && config_has(cli->sets[i] + 2)) {
			/* -o nosplice style negation of a boolean */
			cli->sets[i] += 2;
			val = "no";
		}
		if (config_set(&fs->cfg, cli->sets[i], val, err, sizeof(err))) {
			fprintf(stderr, "stagefs: -o %s: %s\n", cli->sets[i], err);
			exit(1);
		}
	}
	if (cli->debug)
		fs->cfg.log_level = LOG_DEBUG;
	if (config_validate(&fs->cfg, err, sizeof(err))) {
		fprintf(stderr, "stagefs: %s%s%s\n", cli->config ? cli->config : "",
			cli->config ? ": " : "", err);
		exit(1);
	}
	log_level = fs->cfg.log_level;
}

/* ---- mount helpers ---- */

/*
 * Descriptors: raise RLIMIT_NOFILE's soft limit to the hard one, as
 * servers do, and size the cache's descriptor budget (fd_cache) from it.
 * Kept open, a small cache file costs no open(2) at its next LOOKUP
 * readahead or read: 20,000 x 110 KiB files, 1 reader, page cache
 * dropped, read 13 % faster with 16,384 than with 1,024.  An eighth of
 * the limit plus 1024 stays for FUSE, librados's sockets (one per OSD it
 * talks to), the log and the control socket.  fd_cache=0 means all that;
 * an explicit value above it is lowered, with a notice.
 */
static uint32_t size_fd_cache(uint32_t want)
{
	struct rlimit rl;
	uint64_t cur, budget;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return want ? want : 1024;
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit up = { rl.rlim_max, rl.rlim_max };

		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl.rlim_cur = rl.rlim_max;
	}
	cur = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX / 2 : (uint64_t)rl.rlim_cur;
	budget = cur > cur / 8 + 1024 + 16 ? cur - cur / 8 - 1024 : 16;
	budget = MIN(budget, want ? 1048576 : 65536);
	if (want > budget) {
		log_notice("fd_cache=%u is more than RLIMIT_NOFILE (%" PRIu64 ") leaves room for: "
			   "using %" PRIu64 " (raise LimitNOFILE= or ulimit -n)", want, cur, budget);
		return (uint32_t)budget;
	}
	if (want)
		return want;
	log_info("fd_cache: %" PRIu64 " cache-file descriptors (RLIMIT_NOFILE %" PRIu64 ")",
		 budget, cur);
	if (budget < 1024)
		log_notice("only %" PRIu64 " cache-file descriptors (RLIMIT_NOFILE %" PRIu64 "): "
			   "small cached files are reopened often; raise LimitNOFILE= or ulimit -n",
			   budget, cur);
	return (uint32_t)budget;
}

/*
 * The threads=0 default: 4 worker threads per CPU this process may run on
 * (a READ that misses waits on the backend, one that hits mostly copies),
 * at least 16 (the fixed default this replaces), at most 64.
 */
static uint32_t default_threads(void)
{
	cpu_set_t set;
	int n = 0;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0)
		n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	return (uint32_t)MIN(MAX(4 * n, 16), 64);
}

/*
 * Raise the mount's bdi read_ahead_kb so the kernel sends large READs.  The
 * bdi is found through /proc/self/mountinfo, not stat(2) of the mount point,
 * which would wait on this very daemon.
 */
static void set_read_ahead(struct sfs *fs)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[8192], path[128];
	unsigned maj = 0, min = 0;
	bool found = false;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char mnt[PATH_MAX];
		unsigned a, b;

		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mnt) != 3)
			continue;
		if (!strcmp(mnt, fs->mountpoint) && strstr(line, " - fuse.stagefs ")) {
			maj = a;
			min = b;
			found = true;
		}
	}
	fclose(f);
	if (!found) {
		log_warn("cannot find the mount in mountinfo: read_ahead_kb left as is");
		return;
	}
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
	f = fopen(path, "w");
	if (!f || fprintf(f, "%u\n", fs->cfg.read_ahead_kb) < 0 || fclose(f)) {
		log_warn("%s: %s (reads stay in small requests)", path, strerror(errno));
		return;
	}
	log_info("%s = %u", path, fs->cfg.read_ahead_kb);
}

static void redirect_stdio(const struct sfs_config *cfg)
{
	int fd = open("/dev/null", O_RDWR);

	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		if (!cfg->log_file[0])
			dup2(fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	if (!cfg->log_file[0])
		log_use_syslog("stagefs");
}

static void open_log_file(const struct sfs_config *cfg)
{
	int fd;

	if (!cfg->log_file[0])
		return;
	fd = open(cfg->log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		fail("log_file %s: %s", cfg->log_file, strerror(errno));
	dup2(fd, STDERR_FILENO);
	close(fd);
}

/*
 * runtime_dir holds the control socket every user connects to: someone
 * else's directory (or one she may write, or reaches through her link)
 * would let her put her own socket in its place and answer the tools and
 * the client library as the daemon.  Created 0755 (others must reach the
 * socket) where missing, refused where it cannot be trusted (issue 27,
 * src/safepath.h); ctlsock_start() then binds in it.
 */
static int runtime_dir_prepare(const char *dir, char *err, size_t errlen)
{
	char why[1536];
	struct stat st;
	bool existed = lstat(dir, &st) == 0;
	int ret;

	ret = safepath_mkdir(dir, 0755, why, sizeof(why));
	if (!ret && !existed && chmod(dir, 0755) < 0)
		snprintf(why, sizeof(why), "%.1024s: %s", dir, strerror(-(ret = -errno)));
	if (ret)
		snprintf(err, errlen, "runtime_dir %.256s: %s", dir, why);
	return ret;
}

int main(int argc, char **argv)
{
	struct cli cli = { 0 };
	struct sfs fs = { 0 };
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *lcfg;
	struct cache_opts copts;
	char mnt[PATH_MAX], err[2048], fsname[PATH_MAX + 32], pt_why[512];
	struct stat st;
	struct ptacct *pa;
	int ret, pt_load;
	bool supervised, resuming, checking, want_sup, bg_cmdline, late_pa_started = false;
	pthread_t late_pa;
	const char *mode;

	/* parse_cli() cuts the -o strings up: a supervisor re-runs the original */
	argv0 = calloc((size_t)argc + 1, sizeof(*argv0));

	for (int i = 0; argv0 && i < argc; i++)
		if (!(argv0[i] = strdup(argv[i])))
			fail("out of memory");
	if (!argv0)
		fail("out of memory");
	if (argc > 1)
		for (size_t i = 0; i < ARRAY_SIZE(subcommands); i++)
			if (!strcmp(argv[1], subcommands[i].name))
				exec_subcommand(argv[1], argc - 1, argv + 1);

	parse_cli(argc, argv, &cli);
	apply_settings(&fs, &cli);
	if (cli.check) {
		/* apply_settings exited with FILE:LINE on anything wrong */
		printf("%s: ok: %zu dataset%s\n", cli.config, fs.policy->nds,
		       fs.policy->nds == 1 ? "" : "s");
		exit(0);
	}
	if (!fs.cfg.threads)
		fs.cfg.threads = default_threads();

	/* started by a supervisor: it went to the background already, if at all */
	supervised = getenv(TAKEOVER_ENV_FD) != NULL;
	mode = getenv(TAKEOVER_ENV_RESUME);
	checking = supervised && mode && !strcmp(mode, "check");
	resuming = supervised && mode && (!strcmp(mode, "1") || checking);
	bg_cmdline = !cli.foreground;	/* the command line the supervisor re-runs */
	if (supervised)
		cli.foreground = true;
	if (!realpath(cli.mountpoint, mnt))
		fail("mount point %s: %s", cli.mountpoint, strerror(errno));
	/* a dead daemon's mount there would stay under ours (not the one we take over) */
	if (!resuming && mountpoint_clear_dead(mnt, err, sizeof(err)))
		fail("%s", err);
	if (stat(mnt, &st) < 0)
		fail("mount point %s: %s", cli.mountpoint, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		fail("mount point %s: not a directory", cli.mountpoint);
	fs.mountpoint = mnt;
	fs.multi = !cli.source;
	pthread_mutex_init(&fs.ds_lock, NULL);
	/*
	 * A config with no dataset yet (the one a package installs) mounts an
	 * empty root: a reload adds each [dataset NAME] configured later, so
	 * the service starts cleanly before anyone has configured it.
	 */
	if (fs.multi && !cli.config)
		fail("no SOURCE given and no config file (-c) to list datasets");
	if (fs.multi && fs.cfg.no_open == CFG_ON)
		fail("no_open=on needs a single-dataset mount (SOURCE MOUNTPOINT): "
		     "access rules are checked at open");
	if (fs.cfg.no_open == CFG_ON)
		fs.cfg.passthrough = CFG_OFF;	/* it needs OPEN */
	fs.start_ms = now_ms();
	fs.entry_timeout = (double)fs.cfg.entry_timeout_ms / 1000.0;
	fs.attr_timeout = (double)fs.cfg.attr_timeout_ms / 1000.0;
	fs.ki = kinodes_create(fs.cfg.kernel_inodes_max);
	/* the kernel holds at most kernel_inodes_max inodes (when bounded) */
	fs.pushed = pushmap_create(fs.cfg.kernel_inodes_max ? fs.cfg.kernel_inodes_max : 1u << 20);
	if (!fs.ki || !fs.pushed)
		fail("out of memory");

	if (!cli.foreground)
		daemonize_begin();
	open_log_file(&fs.cfg);
	/*
	 * A daemon started by the supervisor of a mount in the background has
	 * its stdio, /dev/null: it logs to syslog as the first daemon did, or
	 * a takeover's lines (and a refusal's reason) would go nowhere.
	 */
	if (supervised && bg_cmdline && !fs.cfg.log_file[0])
		log_use_syslog("stagefs");
	want_sup = !supervised && (fs.cfg.supervise == CFG_ON ||
				   (fs.cfg.supervise == CFG_AUTO && status_fd >= 0));
	/*
	 * A daemon's end strands the requests on its rings: FUSE_NOTIFY_RESEND
	 * (Linux 6.18) sends again only what was read from /dev/fuse.  So a
	 * supervised mount keeps /dev/fuse (docs/restart.md).
	 */
	if (want_sup && fs.cfg.uring == CFG_ON) {
		if (fs.cfg.supervise == CFG_ON)
			fail("supervise=on and uring=on cannot be had together: a daemon's "
			     "end would strand the requests on its rings (docs/restart.md)");
		log_notice("supervise: off (uring=on: a daemon's end would strand the "
			   "requests on its rings)");
		want_sup = false;
	}
	if ((want_sup || supervised) && fs.cfg.uring == CFG_AUTO) {
		if (!supervised)
			log_info("uring: off (supervised: a daemon's end would strand the "
				 "requests on its rings)");
		fs.cfg.uring = CFG_OFF;
	}
	if (want_sup) {
		/* returns in the daemon only */
		ret = supervisor_start(argv0, mnt, status_fd, NULL,
				       status_fd >= 0 ? stdio_detach : NULL, &fs.cfg);
		if (ret)
			log_warn("supervise: cannot start the supervisor (%s): a crash of "
				 "this daemon will end the mount", strerror(-ret));
	}
	ret = takeover_open(&fs, &fs.tko, err, sizeof(err));
	if (fs.tko)
		fs.supervisor_pid = getppid();
	if (ret) {
		if (ret == -EPROTO) {
			fprintf(stderr, "stagefs: %s\n", err);
			log_err("%s", err);
			exit(TAKEOVER_EXIT_REFUSED);
		}
		fail("%s", err);
	}
	if (!fs.generation)
		fs.generation = 1;	/* takeover_open() set it where resuming */
	if (handles_create(fs.generation, &fs.handles))
		fail("out of memory");
	if (fs.tko && !checking) {
		int rfd;

		ret = handles_records_create(fs.handles, &rfd);
		if (ret)
			fail("takeover: cannot keep the open files' records: %s", strerror(-ret));
		takeover_set_records(fs.tko, rfd);
	}
	if (checking) {
		/* the supervisor asks whether this binary could take the mount over */
		log_info("takeover check: this stagefs can take %s over", mnt);
		exit(0);
	}

	copts = (struct cache_opts){
		.dir = fs.cfg.cache_dir,
		.size_limit = fs.cfg.cache_size,
		.free_ratio = fs.cfg.cache_free_ratio,
		.sync = fs.cfg.cache_sync,
		.fd_cache = size_fd_cache(fs.cfg.fd_cache),
	};
	if (runtime_dir_prepare(fs.cfg.runtime_dir, err, sizeof(err)))
		fail("%s", err);
	ret = cache_create(&copts, &fs.cache, err, sizeof(err));
	if (ret)
		fail("%s", err);
	/* before the datasets: their backends ask the group */
	if (peerd_group_create(&fs, err, sizeof(err)))
		fail("%s", err);
	if (!fs.multi) {
		ret = datasets_add(&fs, "", cli.source, false, NULL, err, sizeof(err));
		if (ret)
			fail("%s", err);
	}
	if (fs.multi && takeover_resuming(fs.tko)) {
		const char *const *names, *const *sources;
		const bool *hidden;
		uint32_t n;

		/* node ids embed the index: the order the kernel knows first */
		takeover_datasets(fs.tko, &names, &sources, &hidden, &n);
		for (uint32_t i = 0; i < n; i++) {
			const struct policy_dataset *pd = policy_dataset(fs.policy, names[i]);
			const char *src = pd && pd->source && !hidden[i] ? pd->source : sources[i];

			ret = datasets_add(&fs, names[i], src, hidden[i], NULL, err, sizeof(err));
			if (ret)
				fail("takeover: dataset %s (index %u): %s", names[i], i, err);
		}
	}
	for (size_t i = 0; fs.multi && i < fs.policy->nds; i++) {
		const struct policy_dataset *pd = &fs.policy->ds[i];

		if (fs.tko && takeover_resuming(fs.tko) && datasets_find(&fs, pd->name))
			continue;	/* added above, in its place */
		if (!pd->source)
			fail("%s: [dataset %s] has no source", cli.config, pd->name);
		ret = datasets_add(&fs, pd->name, pd->source, false,
				      NULL, err, sizeof(err));
		if (ret)
			fail("dataset %s: %s", pd->name, err);
	}
	cache_set_quota_fn(fs.cache, access_quota_of, &fs);
	ret = packpush_create(&fs, &fs.pp);	/* the engine offers it packs */
	if (ret)
		fail("pack pushes: %s", strerror(-ret));
	if (daemon_start(&fs, err, sizeof(err)))
		fail("%s", err);
	if (peerd_start(&fs, err, sizeof(err)))
		fail("%s", err);

	snprintf(fsname, sizeof(fsname), "max_read=%u,fsname=stagefs:%s,subtype=stagefs",
		 fs.cfg.max_read_kb * 1024, fs.multi ? "datasets" : fs.ds[0]->be->uri);
	for (size_t i = 0; fsname[i]; i++)
		if (fsname[i] == ',' && strncmp(fsname + i, ",subtype", 8) &&
		    strncmp(fsname + i, ",fsname", 7))
			fsname[i] = '_';	/* a comma would split the option */
	if (fuse_opt_add_arg(&args, argv[0]) ||
	    fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, "ro,nosuid,nodev,default_permissions,noatime") ||
	    fuse_opt_add_arg(&args, "-o") || fuse_opt_add_arg(&args, fsname))
		fail("out of memory");
	if (fs.cfg.allow_other &&
	    (fuse_opt_add_arg(&args, "-o") || fuse_opt_add_arg(&args, "allow_other")))
		fail("out of memory");
	if (cli.fuse_opts &&
	    (fuse_opt_add_arg(&args, "-o") || fuse_opt_add_arg(&args, cli.fuse_opts)))
		fail("out of memory");

	if (session_io_create(&fs.sio) || passthrough_create(&fs, &fs.pt) ||
	    noopen_create(&fs, &fs.no))
		fail("out of memory");
	/* before the mount: INIT, sent at mount, offers io_uring or not */
	if (uring_create(&fs, &fs.ur, err, sizeof(err)))
		fail("%s", err);
	fs.se = fuse_session_new(&args, &sfs_ops, sizeof(sfs_ops), &fs);
	if (!fs.se)
		fail("cannot create the FUSE session (bad mount option?)");
	if (fuse_set_signal_handlers(fs.se))
		fail("cannot install signal handlers");
	if (fs.tko) {
		struct sigaction sa = { .sa_handler = on_sigusr2 };

		handover_se = fs.se;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGUSR2, &sa, NULL) < 0)
			fail("cannot install the SIGUSR2 handler");
	}
	/* the daemon chdir()s to /: remember the file by its absolute path */
	fs.config_path = cli.config ? realpath(cli.config, NULL) : NULL;
	if (access_reload_start(&fs))
		fail("cannot start the reload thread");
	if (takeover_resuming(fs.tko)) {
		char devfd[32];
		const void *init;
		size_t init_len = takeover_init_request(fs.tko, &init);

		/* libfuse takes /dev/fd/N as the connection, and mounts nothing */
		snprintf(devfd, sizeof(devfd), "/dev/fd/%d", takeover_fuse_fd(fs.tko));
		if (!init_len || session_io_replay_init(fs.sio, init, init_len))
			fail("takeover: the state has no usable INIT request");
		if (fuse_session_mount(fs.se, devfd))
			fail("takeover: cannot use the mount's FUSE descriptor");
	} else if (fuse_session_mount(fs.se, mnt)) {
		fail("cannot mount %s (is /dev/fuse there, and are you root?)", mnt);
	}
	ret = session_io_attach(fs.sio, fs.se);
	if (!ret)
		ret = passthrough_attach(fs.pt, fs.se);
	if (ret) {
		fuse_session_unmount(fs.se);
		fail("cannot hook the FUSE session for passthrough: %s", strerror(-ret));
	}

	/*
	 * The rings before the no-open probe: once INIT said io_uring, the
	 * kernel holds every request until each queue has an entry.
	 */
	if (takeover_resuming(fs.tko))
		noopen_resume(fs.no, takeover_noopen(fs.tko));
	if (passthrough_handshake(fs.pt, fs.se, err, sizeof(err)) ||
	    uring_start(fs.ur, fs.se, err, sizeof(err)) ||
	    (!takeover_resuming(fs.tko) && noopen_handshake(fs.no, fs.se, err, sizeof(err)))) {
		fuse_session_unmount(fs.se);
		uring_destroy(fs.ur);
		fail("%s", err);
	}
	if (takeover_resuming(fs.tko) && takeover_old_records(fs.tko) >= 0) {
		/* the files open at the takeover: how the kernel reads each */
		long n = handles_inherit(fs.handles, takeover_old_records(fs.tko),
					 fh_inherit_record, &fs);

		if (n < 0)
			log_warn("takeover: cannot read the open files' records: %s",
				 strerror((int)-n));
		else
			log_info("takeover: %ld files open through the daemon before", n);
	}
	set_read_ahead(&fs);
	if (metrics_start(&fs, err, sizeof(err))) {
		fuse_session_unmount(fs.se);
		fail("%s", err);
	}
	ctlsock_start(&fs);
	/*
	 * Last, as loading the BPF program takes 60-230 ms here: neither
	 * INIT's reply nor the rings may wait for it (a request sent before
	 * the rings are up then waits forever), nor the files and sockets a
	 * mount is expected to have once it answers.  Passthrough opens
	 * served before it is published are estimated (ptacct.h).
	 */
	if (takeover_resuming(fs.tko)) {
		/*
		 * A takeover: readers are waiting, and the daemon before had the
		 * program or its verdict; load it while serving.
		 */
		ret = -pthread_create(&late_pa, NULL, late_ptacct, &fs);
		if (ret)
			log_warn("passthrough accounting: cannot start its loader: %s: "
				 "passthrough reads are estimated", strerror(-ret));
		late_pa_started = !ret;
	} else {
		pt_load = ptacct_create(&fs, &pa, pt_why, sizeof(pt_why));
		atomic_store_explicit(&fs.pa, pa, memory_order_release);
		if (ptacct_settle(&fs, pt_load, pt_why, err, sizeof(err))) {
			fuse_session_unmount(fs.se);
			uring_destroy(fs.ur);
			fail("%s", err);
		}
	}
	for (uint32_t i = 0; i < fs.nds; i++)
		log_notice("mounted %s on %s%s%s (cache %s, chunk %u KiB)",
			   fs.ds[i]->be->uri, mnt, fs.multi ? "/" : "", fs.ds[i]->name,
			   fs.cfg.cache_dir, fs.ds[i]->be->chunk_size / 1024);
	if (!fs.nds)
		log_notice("mounted %s, empty: %s configures no dataset yet; it stays "
			   "empty until a [dataset NAME] with a source is added and the "
			   "daemon reloads (SIGHUP, systemctl reload stagefs)", mnt, cli.config);

	if (!cli.foreground) {
		if (chdir("/") < 0)
			log_warn("chdir /: %s", strerror(errno));
		redirect_stdio(&fs.cfg);
	}
	daemonize_end(true, NULL);
	if (takeover_resuming(fs.tko)) {
		uint64_t down = takeover_down_ms(fs.tko);

		fs.takeover_pause_ms = down && down <= now_ms() ? now_ms() - down : 0;
		log_notice("took the mount %s over (daemon generation %u) %" PRIu64 " ms after "
			   "the daemon before ended", mnt, fs.generation, fs.takeover_pause_ms);
		log_notice("takeover: hint sessions (stagefs warmup --order) and epoch stagings "
			   "of the daemon before are not carried over: send the hints again; "
			   "stagings start again at the readers' next epoch-like opens");
		takeover_resend(&fs);
	}
	takeover_set_noopen(fs.tko, noopen_active(fs.no));
	takeover_publish(&fs);
	{
		/* systemd's Type=notify (conf/stagefs.service); MAINPID for a forked daemon */
		char note[PATH_MAX + 64];

		/*
		 * supervised: the supervisor is the service's main process, for
		 * the first daemon (forked by it: `supervised` was false when it
		 * was computed) as for those that took over; fs.tko is the
		 * channel to it in both
		 */
		snprintf(note, sizeof(note), "READY=1\nMAINPID=%d\nSTATUS=mounted on %s%s",
			 (int)(fs.tko ? getppid() : getpid()), mnt,
			 fs.nds ? "" : " (no dataset configured yet)");
		ret = sfs_sd_notify(note);
		if (ret)
			log_warn("NOTIFY_SOCKET: cannot tell the service manager: %s", strerror(-ret));
	}

	lcfg = fuse_loop_cfg_create();
	fuse_loop_cfg_set_clone_fd(lcfg, 0);
	log_info("up to %u FUSE worker threads", fs.cfg.threads);
	fuse_loop_cfg_set_max_threads(lcfg, fs.cfg.threads);
	/*
	 * A worker that is never idle-limited is never destroyed.  With half
	 * the pool as the idle limit, libfuse 3.14 ended a thread each time a
	 * burst left more idle and started one at the next burst: 765
	 * clone()s per 20,000 small files read by 4 readers.
	 */
	fuse_loop_cfg_set_idle_threads(lcfg, fs.cfg.threads);
	ret = fuse_session_loop_mt(fs.se, lcfg);
	fuse_loop_cfg_destroy(lcfg);
	/* READs handed to the I/O engine are answered before the session goes */
	for (unsigned n = 0; atomic_load(&fs.reads_in_engine); n++) {
		if (n % 5000 == 4999)
			log_notice("waiting for %" PRIu64 " READs the I/O engine is answering",
				   atomic_load(&fs.reads_in_engine));
		usleep(1000);
	}

	kinodes_destroy(fs.ki);	/* its thread writes to the session */
	fs.ki = NULL;
	packpush_close(fs.pp);	/* so does its thread, and it marks the pushmap */
	pushmap_destroy(fs.pushed);
	fs.pushed = NULL;
	if (handover) {
		/* the supervisor starts the next daemon on the same connection */
		log_notice("handing %s over to the next daemon", mnt);
	} else {
		log_notice("unmounting %s", mnt);
		sfs_sd_notify("STOPPING=1");
		if (takeover_resuming(fs.tko))
			mountpoint_unmount(mnt);	/* libfuse never mounted it */
		else
			fuse_session_unmount(fs.se);
	}
	uring_destroy(fs.ur);
	fuse_remove_signal_handlers(fs.se);
	fuse_session_destroy(fs.se);
	if (late_pa_started)
		pthread_join(late_pa, NULL);
	ptacct_destroy(fs.pa);	/* its last reads count into fs.stats */
	passthrough_destroy(fs.pt);
	session_io_destroy(fs.sio);
	noopen_destroy(fs.no);
	handles_destroy(fs.handles);
	metrics_stop(&fs);
	ctlsock_stop(&fs);
	peerd_stop(&fs);
	daemon_stop(&fs);
	packpush_destroy(fs.pp);	/* after the engine, which offers it packs */
	access_destroy(&fs);
	datasets_destroy(&fs);
	peerd_group_destroy(&fs);
	cache_destroy(fs.cache);
	fuse_opt_free_args(&args);
	config_release(&fs.cfg);
	free((char *)fs.config_path);
	free(cli.fuse_opts);
	free(cli.sets);
	takeover_close(fs.tko);
	if (handover)
		return TAKEOVER_EXIT_HANDOVER;
	return ret < 0 ? 1 : 0;
}
