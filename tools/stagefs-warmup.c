/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stagefs-warmup: stage datasets in a node's cache before a job reads them
 * (`stagefs warmup ...`), report how much is cached (--check), drop it
 * (--evict), or announce the order a job will read files in (--order).
 *
 * The work is done by the daemon that serves the mount: this tool finds the
 * mount holding its PATHs (the first directory up with .stagefs/socket),
 * sends one request over the control socket (docs/control.md) and shows the
 * daemon's progress: a bar redrawn in place on a terminal, a plain line
 * about every second otherwise, and a summary, or with --json one JSON
 * object on stdout.  The daemon charges what it fetches to the caller's uid
 * and checks the caller may read every path, as a read would.
 *
 * Exit status: 0 when everything in scope is cached (or checked, evicted,
 * hinted), 1 if anything failed (each failing path is named on stderr),
 * 2 for a usage error.
 */
#include "ctlproto.h"
#include "json.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum mode { M_FETCH, M_CHECK, M_EVICT, M_ORDER };

struct opts {
	enum mode mode;
	uint32_t threads;
	const char *shard;
	const char *list;
	const char *order;
	uint32_t window;
	const char *scope;
	bool json, quiet;
};

struct summary {
	uint64_t files, chunks, bytes, cached_before, cached_before_bytes;
	uint64_t cached_files, fetched, fetched_bytes, failed, failed_files;
	uint64_t done_chunks, done_bytes, evicted, evict_skipped, ms;
	bool walk_done;
};

struct failure {
	char *path;
	char *code;
	char *msg;
};

static struct failure *failures;
static size_t nfailures;
static bool bar_drawn;

#define MAX_RESUMES	100	/* daemon restarts a warmup goes on across */
#define RESUME_WAIT_MS	60000	/* for the new daemon's control socket */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: stagefs warmup [options] PATH...\n"
		"       stagefs warmup --order LIST [--window N] [PATH]\n"
		"\n"
		"Stage files of a stagefs mount in this node's cache: whole trees,\n"
		"single files or a list.  The daemon serving the mount does the work,\n"
		"below readers and fairly shared with other users' warmups.\n"
		"\n"
		"options:\n"
		"  -t, --threads N       chunk fetches in flight for this warmup\n"
		"                        (default: twice the daemon's per-user limit)\n"
		"  -s, --shard I/N       only shard I of N of the chunks (0 <= I < N), so\n"
		"                        N nodes split a dataset: a chunk is in shard\n"
		"                        hash(content id, chunk index) %% N\n"
		"  -f, --from-file LIST  also every path listed in LIST, one a line,\n"
		"                        relative to the mount root or absolute ('-': stdin)\n"
		"  -c, --check           report how much is cached; fetch nothing\n"
		"  -e, --evict           drop the cached chunks of these files\n"
		"  -o, --order LIST      announce that this job (its session id) reads the\n"
		"                        files of LIST in that order: the daemon keeps a\n"
		"                        window of them cached ahead of the reader\n"
		"  -w, --window N        with --order: files ahead (default: hint_window)\n"
		"      --scope S         with --order: which openers move the window: sid\n"
		"                        (default: this terminal or batch session), pgid, uid\n"
		"  -j, --json            print one JSON summary object on stdout\n"
		"  -q, --quiet           no progress output\n"
		"  -h, --help            this text\n"
		"\n"
		"An interrupted warmup resumes where it stopped: cached chunks are not\n"
		"fetched again.  Exit status 1 if anything could not be staged.\n");
}

/* ---- output ---- */

static void fmt_rate(double bytes_per_s, char *buf, size_t len)
{
	snprintf(buf, len, "%.1f MB/s", bytes_per_s / 1e6);
}

static void fmt_eta(double secs, char *buf, size_t len)
{
	unsigned long s = (unsigned long)(secs + 0.5);

	if (secs < 0)
		snprintf(buf, len, "--:--");
	else if (s >= 3600)
		snprintf(buf, len, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
	else
		snprintf(buf, len, "%lu:%02lu", s / 60, s % 60);
}

static void clear_bar(void)
{
	if (bar_drawn) {
		fputs("\r\033[K", stderr);
		bar_drawn = false;
	}
}

static void show_progress(const struct opts *o, const struct summary *s, bool tty)
{
	static uint64_t last_line_ms;
	double secs = (double)s->ms / 1000.0;
	double rate = secs > 0 ? (double)s->fetched_bytes / secs : 0;
	double frac = s->bytes ? (double)s->done_bytes / (double)s->bytes : 0;
	double eta = -1;
	char done[32], total[32], r[32], e[32], bar[41];
	int fill;

	if (o->quiet)
		return;
	if (s->walk_done && rate > 0)
		eta = (double)(s->bytes - MIN(s->done_bytes, s->bytes)) / rate;
	fmt_size(s->done_bytes, done, sizeof(done));
	fmt_size(s->bytes, total, sizeof(total));
	fmt_rate(rate, r, sizeof(r));
	fmt_eta(eta, e, sizeof(e));
	if (tty) {
		fill = (int)(frac * 30 + 0.5);
		for (int i = 0; i < 30; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[30] = '\0';
		fprintf(stderr, "\r[%s] %3.0f%%  %" PRIu64 " files%s  %s/%s  %s  ETA %s\033[K",
			bar, frac * 100, s->files, s->walk_done ? "" : "+", done, total, r, e);
		fflush(stderr);
		bar_drawn = true;
		return;
	}
	if (s->ms - last_line_ms < 1000 && last_line_ms)
		return;
	last_line_ms = s->ms ? s->ms : 1;
	if (o->mode != M_FETCH) {
		fprintf(stderr, "warmup: %s %" PRIu64 " files so far\n",
			o->mode == M_CHECK ? "checked" : "evicted", s->files);
		return;
	}
	fprintf(stderr, "warmup: %.0f%% %" PRIu64 " files%s %s/%s fetched %" PRIu64
		" chunks %s ETA %s\n", frac * 100, s->files, s->walk_done ? "" : " (walking)",
		done, total, s->fetched, r, e);
}

static void print_summary(const struct opts *o, const struct summary *s)
{
	double secs = (double)s->ms / 1000.0;
	/* chunks someone else brought in during the warmup (a reader, another
	 * job, a file with the same content earlier in this one) */
	uint64_t settled = s->cached_before + s->fetched + s->failed;
	uint64_t meanwhile = o->mode == M_FETCH && s->chunks > settled ? s->chunks - settled : 0;
	char a[32], b[32], c[32], r[32];

	if (o->json) {
		printf("{\"mode\": \"%s\", \"files\": %" PRIu64 ", \"chunks\": %" PRIu64
		       ", \"bytes\": %" PRIu64 ", \"cached_before\": %" PRIu64
		       ", \"cached_before_bytes\": %" PRIu64 ", \"cached_files\": %" PRIu64
		       ", \"fetched\": %" PRIu64 ", \"fetched_bytes\": %" PRIu64
		       ", \"failed\": %" PRIu64 ", \"failed_files\": %" PRIu64
		       ", \"evicted\": %" PRIu64 ", \"evict_skipped\": %" PRIu64
		       ", \"cached_meanwhile\": %" PRIu64 ", \"seconds\": %.3f, \"shard\": ",
		       o->mode == M_CHECK ? "check" : o->mode == M_EVICT ? "evict" : "fetch",
		       s->files, s->chunks, s->bytes, s->cached_before, s->cached_before_bytes,
		       s->cached_files, s->fetched, s->fetched_bytes, s->failed,
		       s->failed_files, s->evicted, s->evict_skipped, meanwhile, secs);
		if (o->shard)
			json_write_str(stdout, o->shard);
		else
			fputs("null", stdout);
		fputs(", \"failures\": [", stdout);
		for (size_t i = 0; i < nfailures; i++) {
			fputs(i ? ", {\"path\": " : "{\"path\": ", stdout);
			json_write_str(stdout, failures[i].path);
			fputs(", \"error\": ", stdout);
			json_write_str(stdout, failures[i].code);
			fputs("}", stdout);
		}
		fputs("]}\n", stdout);
		return;
	}
	fmt_size(s->bytes, a, sizeof(a));
	switch (o->mode) {
	case M_CHECK:
		fmt_size(s->cached_before_bytes, b, sizeof(b));
		printf("cached: %" PRIu64 "/%" PRIu64 " files, %" PRIu64 "/%" PRIu64
		       " chunks, %s/%s (%.1f%%)\n", s->cached_files, s->files,
		       s->cached_before, s->chunks, b, a,
		       s->bytes ? 100.0 * (double)s->cached_before_bytes / (double)s->bytes : 100.0);
		break;
	case M_EVICT:
		printf("evicted %" PRIu64 " chunks of %" PRIu64 " files (%s in scope)",
		       s->evicted, s->files, a);
		if (s->evict_skipped)	/* a user evicts only its own chunks */
			printf(", %" PRIu64 " chunks kept: other users'", s->evict_skipped);
		putchar('\n');
		break;
	default:
		fmt_size(s->fetched_bytes, b, sizeof(b));
		fmt_size(s->cached_before_bytes, c, sizeof(c));
		fmt_rate(secs > 0 ? (double)s->fetched_bytes / secs : 0, r, sizeof(r));
		printf("%" PRIu64 " files, %" PRIu64 " chunks, %s in %.1f s: fetched %" PRIu64
		       " chunks (%s) at %s, %" PRIu64 " already cached (%s), %" PRIu64
		       " failed\n", s->files, s->chunks, a, secs, s->fetched, b, r,
		       s->cached_before, c, s->failed);
	}
}

/* ---- talking to the daemon ---- */

static void parse_summary(const struct ctl_msg *m, struct summary *s)
{
	static const struct {
		const char *key;
		size_t off;
	} keys[] = {
#define K(x) { #x, offsetof(struct summary, x) }
		K(files), K(chunks), K(bytes), K(cached_before), K(cached_before_bytes),
		K(cached_files), K(fetched), K(fetched_bytes), K(failed), K(failed_files),
		K(done_chunks), K(done_bytes), K(evicted), K(evict_skipped), K(ms),
#undef K
	};
	uint64_t v;

	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (!ctl_get_u64(m, keys[i].key, &v))
			*(uint64_t *)((char *)s + keys[i].off) = v;
	s->walk_done = !ctl_get_u64(m, "walk_done", &v) && v;
}

static void note_failure(const char *root, const struct ctl_msg *m, bool print)
{
	const char *path = ctl_get(m, "path"), *code = ctl_get(m, "code");
	const char *msg = ctl_get(m, "msg");
	char full[PATH_MAX * 2];
	struct failure *nf;

	snprintf(full, sizeof(full), "%s%s%s", root, path && *path ? "/" : "",
		 path ? path : "");
	if (print) {
		clear_bar();
		fprintf(stderr, "stagefs warmup: %s: %s\n", full, msg ? msg : code ? code : "failed");
	}
	nf = realloc(failures, (nfailures + 1) * sizeof(*nf));
	if (!nf)
		return;
	failures = nf;
	failures[nfailures].path = strdup(full);
	failures[nfailures].code = strdup(code ? code : "EIO");
	failures[nfailures].msg = strdup(msg ? msg : "");
	if (failures[nfailures].path && failures[nfailures].code && failures[nfailures].msg)
		nfailures++;
}

static int send_path(int fd, const char *rel)
{
	char esc[PATH_MAX * 3 + 1];

	if (ctl_escape(rel, esc, sizeof(esc)) >= sizeof(esc))
		return -ENAMETOOLONG;
	return ctl_sendf(fd, "PATH %s\n", esc);
}

/* ---- paths ---- */

struct strv {
	char **v;
	size_t n, cap;
};

static int strv_push(struct strv *sv, const char *s)
{
	if (sv->n == sv->cap) {
		size_t cap = sv->cap ? sv->cap * 2 : 64;
		char **nv = realloc(sv->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		sv->v = nv;
		sv->cap = cap;
	}
	sv->v[sv->n] = strdup(s);
	return sv->v[sv->n++] ? 0 : -ENOMEM;
}

static void strv_free(struct strv *sv)
{
	for (size_t i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
}

static int read_list(const char *file, struct strv *out)
{
	FILE *f = strcmp(file, "-") ? fopen(file, "re") : stdin;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int ret = 0;

	if (!f)
		return -errno;
	while ((n = getline(&line, &cap, f)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (!n)
			continue;
		if (strv_push(out, line)) {
			ret = -ENOMEM;
			break;
		}
	}
	free(line);
	if (f != stdin)
		fclose(f);
	return ret;
}

/*
 * The path relative to mount root @root for a list entry: relative entries
 * are relative to the root already, absolute ones must lie under it.
 */
static int list_rel(const char *root, const char *entry, char *rel, size_t rellen)
{
	char joined[PATH_MAX * 2], abs[PATH_MAX], eroot[PATH_MAX];
	size_t rl = strlen(root);
	int ret;

	if (entry[0] != '/') {
		snprintf(joined, sizeof(joined), "%s/%s", root, entry);
		ret = ctl_abspath(joined, abs, sizeof(abs));
		if (ret)
			return ret;
		if (strncmp(abs, root, rl) || (abs[rl] && abs[rl] != '/'))
			return -EXDEV;	/* ".." out of the mount */
		snprintf(rel, rellen, "%s", abs[rl] ? abs + rl + 1 : "");
		return 0;
	}
	ret = ctl_abspath(entry, abs, sizeof(abs));
	if (ret)
		return ret;
	if (!strncmp(abs, root, rl) && (abs[rl] == '/' || !abs[rl])) {
		snprintf(rel, rellen, "%s", abs[rl] ? abs + rl + 1 : "");
		return 0;
	}
	/* under the root only through a symlink, or elsewhere */
	ret = ctl_find_mount(entry, eroot, sizeof(eroot), rel, rellen);
	if (ret)
		return ret;
	return strcmp(eroot, root) ? -EXDEV : 0;
}

static void on_sigint(int sig)
{
	(void)sig;
	if (bar_drawn) {
		static const char nl[] = "\n";

		if (write(STDERR_FILENO, nl, 1) < 0) {
			/* nothing to do */
		}
	}
	_exit(130);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "shard", required_argument, NULL, 's' },
		{ "from-file", required_argument, NULL, 'f' },
		{ "check", no_argument, NULL, 'c' },
		{ "evict", no_argument, NULL, 'e' },
		{ "order", required_argument, NULL, 'o' },
		{ "window", required_argument, NULL, 'w' },
		{ "scope", required_argument, NULL, 'S' },
		{ "json", no_argument, NULL, 'j' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .mode = M_FETCH };
	struct strv list = { 0 };
	struct summary sum = { 0 };
	char root[PATH_MAX] = "", rel[PATH_MAX], sock[PATH_MAX], err[512];
	struct ctl_conn *conn = NULL;
	bool tty, got_done = false;
	int c, fd = -1, ret, rc;
	unsigned resumes = 0;
	char r3[PATH_MAX];

	while ((c = getopt_long(argc, argv, "t:s:f:ceo:w:jqh", longopts, NULL)) != -1) {
		char *end;
		unsigned long v;

		switch (c) {
		case 't':
		case 'w':
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg || !v || v > 1000000) {
				fprintf(stderr, "stagefs warmup: --%s wants a positive number\n",
					c == 't' ? "threads" : "window");
				return 2;
			}
			if (c == 't')
				o.threads = (uint32_t)v;
			else
				o.window = (uint32_t)v;
			break;
		case 's': {
			unsigned i, n;
			char extra;

			if (sscanf(optarg, "%u/%u%c", &i, &n, &extra) != 2 || !n || i >= n) {
				fprintf(stderr, "stagefs warmup: --shard wants I/N with 0 <= I < N\n");
				return 2;
			}
			o.shard = optarg;
			break;
		}
		case 'f':
			o.list = optarg;
			break;
		case 'c':
			o.mode = M_CHECK;
			break;
		case 'e':
			o.mode = M_EVICT;
			break;
		case 'o':
			o.mode = M_ORDER;
			o.order = optarg;
			break;
		case 'S':
			o.scope = optarg;
			break;
		case 'j':
			o.json = true;
			break;
		case 'q':
			o.quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (o.mode == M_ORDER && (o.list || o.shard)) {
		fprintf(stderr, "stagefs warmup: --order takes its paths from its LIST only\n");
		return 2;
	}
	if (optind == argc && !o.list && o.mode != M_ORDER) {
		usage(stderr);
		return 2;
	}
	if ((o.list && (ret = read_list(o.list, &list))) ||
	    (o.order && (ret = read_list(o.order, &list)))) {
		fprintf(stderr, "stagefs warmup: %s: %s\n", o.list ? o.list : o.order,
			strerror(-ret));
		rc = 2;
		goto out;
	}

	/* the mount: from the PATHs, else the list's first absolute entry, else . */
	for (int i = optind; i < argc; i++) {
		char r2[PATH_MAX];

		ret = ctl_find_mount(argv[i], r2, sizeof(r2), rel, sizeof(rel));
		if (ret) {
			fprintf(stderr, "stagefs warmup: %s: %s\n", argv[i],
				ret == -ENOENT ? "not in a stagefs mount (or does not exist)"
					       : strerror(-ret));
			rc = 2;
			goto out;
		}
		if (root[0] && strcmp(root, r2)) {
			fprintf(stderr, "stagefs warmup: %s and %s are in different mounts: "
				"run one warmup per mount\n", root, r2);
			rc = 2;
			goto out;
		}
		strcpy(root, r2);
	}
	for (size_t i = 0; !root[0] && i < list.n; i++)
		if (list.v[i][0] == '/' &&
		    !ctl_find_mount(list.v[i], root, sizeof(root), rel, sizeof(rel)))
			break;
	if (!root[0] && ctl_find_mount(".", root, sizeof(root), rel, sizeof(rel))) {
		fprintf(stderr, "stagefs warmup: cannot tell which stagefs mount the list "
			"is for: give a PATH in it, or run from inside it\n");
		rc = 2;
		goto out;
	}
again:
	ret = ctl_socket_of(root, sock, sizeof(sock));
	if (ret) {
		fprintf(stderr, "stagefs warmup: %s/" CTL_SOCKET_VFILE ": %s\n", root,
			strerror(-ret));
		rc = 1;
		goto out;
	}
	fd = ctl_connect(sock);
	/* resuming: the new daemon binds its socket a moment after it serves */
	for (int i = 0; fd < 0 && resumes && i < RESUME_WAIT_MS / 100; i++) {
		usleep(100000);
		fd = ctl_connect(sock);
	}
	if (fd < 0) {
		fprintf(stderr, "stagefs warmup: cannot connect to %s: %s\n", sock,
			strerror(-fd));
		rc = 1;
		goto out;
	}
	if (!conn)
		conn = malloc(sizeof(*conn));
	if (!conn) {
		rc = 1;
		goto out;
	}
	ctl_conn_init(conn, fd);
	if (ctl_hello(conn, err, sizeof(err))) {
		fprintf(stderr, "stagefs warmup: %s\n", err);
		rc = 1;
		goto out;
	}
	tty = isatty(STDERR_FILENO) && !o.quiet;
	signal(SIGINT, on_sigint);
	signal(SIGPIPE, SIG_IGN);

	/* the request */
	if (o.mode == M_ORDER) {
		char scope[64] = "", window[64] = "";

		if (o.scope)
			snprintf(scope, sizeof(scope), " scope=%s", o.scope);
		if (o.window)
			snprintf(window, sizeof(window), " window=%u", o.window);
		ret = ctl_sendf(fd, "HINT%s%s\n", scope, window);
	} else {
		char shard[64] = "", threads[64] = "";

		if (o.shard)
			snprintf(shard, sizeof(shard), " shard=%s", o.shard);
		if (o.threads)
			snprintf(threads, sizeof(threads), " threads=%u", o.threads);
		ret = ctl_sendf(fd, "WARMUP mode=%s%s%s progress_ms=%d\n",
				o.mode == M_CHECK ? "check" : o.mode == M_EVICT ? "evict" : "fetch",
				shard, threads, tty ? 200 : 1000);
	}
	/* with --order, PATHs only say which mount: the order is LIST's */
	for (int i = optind; !ret && o.mode != M_ORDER && i < argc; i++) {
		char r2[PATH_MAX];

		ret = ctl_find_mount(argv[i], r2, sizeof(r2), rel, sizeof(rel));
		if (!ret)
			ret = send_path(fd, rel);
	}
	for (size_t i = 0; !ret && i < list.n; i++) {
		ret = list_rel(root, list.v[i], rel, sizeof(rel));
		if (ret) {
			fprintf(stderr, "stagefs warmup: %s: %s\n", list.v[i],
				ret == -EXDEV ? "not in the mount at the list's root" :
				strerror(-ret));
			rc = 2;
			goto out;
		}
		ret = send_path(fd, rel);
	}
	if (!ret)
		ret = ctl_sendf(fd, "END\n");
	if (ret) {
		fprintf(stderr, "stagefs warmup: sending the request: %s\n", strerror(-ret));
		rc = 1;
		goto out;
	}

	/* the replies */
	for (;;) {
		struct ctl_msg m;
		char *line;
		int n = ctl_read_line(conn, &line, -1);

		if (n < 0 && o.mode != M_ORDER && resumes < MAX_RESUMES &&
		    !ctl_find_mount(root, r3, sizeof(r3), rel, sizeof(rel))) {
			/*
			 * The daemon restarted (a supervised mount, docs/restart.md):
			 * ask the new one again.  What is cached is skipped, so the
			 * warmup goes on from where it was.
			 */
			clear_bar();
			if (!o.quiet)
				fprintf(stderr, "stagefs warmup: the daemon restarted (%s): "
					"resuming\n", strerror(-n));
			close(fd);
			fd = -1;
			resumes++;
			goto again;
		}
		if (n < 0) {
			clear_bar();
			fprintf(stderr, "stagefs warmup: the daemon went away (%s)\n",
				strerror(-n));
			rc = 1;
			goto out;
		}
		if (ctl_parse(line, &m))
			continue;
		if (!strcmp(m.argv[0], "PROGRESS")) {
			parse_summary(&m, &sum);
			show_progress(&o, &sum, tty);
		} else if (!strcmp(m.argv[0], "FAIL")) {
			note_failure(root, &m, nfailures < 50 || !o.json);
		} else if (!strcmp(m.argv[0], "DONE")) {
			parse_summary(&m, &sum);
			/* chunks a reader filled during the warmup settle unseen */
			sum.done_bytes = sum.bytes;
			got_done = true;
			break;
		} else if (!strcmp(m.argv[0], "OK") && o.mode == M_ORDER) {
			uint64_t id = 0, files = 0, skipped = 0;

			ctl_get_u64(&m, "session", &id);
			ctl_get_u64(&m, "files", &files);
			ctl_get_u64(&m, "skipped", &skipped);
			if (o.json)
				printf("{\"session\": %" PRIu64 ", \"files\": %" PRIu64
				       ", \"skipped\": %" PRIu64 "}\n", id, files, skipped);
			else
				printf("hint session %" PRIu64 ": %" PRIu64 " files in order%s\n",
				       id, files, skipped ? " (some skipped: see above)" : "");
			ctl_sendf(fd, "BYE\n");
			rc = 0;
			goto out;
		} else if (!strcmp(m.argv[0], "ERR")) {
			const char *msg = ctl_get(&m, "msg");

			clear_bar();
			fprintf(stderr, "stagefs warmup: the daemon refused: %s\n",
				msg ? msg : "error");
			rc = 1;
			goto out;
		}
	}
	ctl_sendf(fd, "BYE\n");
	close(fd);
	fd = -1;
	if (tty && got_done) {
		show_progress(&o, &sum, tty);	/* the final state stays on screen */
		fputc('\n', stderr);
		bar_drawn = false;
	}
	print_summary(&o, &sum);
	if (sum.failed || sum.failed_files) {
		fprintf(stderr, "stagefs warmup: %" PRIu64 " chunk(s) failed, %" PRIu64
			" file(s) affected%s\n", sum.failed, sum.failed_files,
			nfailures ? ":" : "");
		for (size_t i = 0; i < nfailures && i < 20; i++)
			fprintf(stderr, "  %s: %s\n", failures[i].path,
				failures[i].msg[0] ? failures[i].msg : failures[i].code);
		if (nfailures > 20)
			fprintf(stderr, "  ... and %zu more\n", nfailures - 20);
		rc = 1;
		goto out;
	}
	rc = 0;
out:
	free(conn);
	if (fd >= 0)
		close(fd);
	strv_free(&list);
	return rc;
}
