/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stagefs top: the node's GPU feed rate, live, like top(1).
 *
 *   stagefs top [-d SECONDS] MOUNTPOINT      refresh every SECONDS (1) until q or ^C
 *   stagefs top --once MOUNTPOINT            one screen, then exit
 *   stagefs top --once --json MOUNTPOINT     the feed-rate part of the stats as JSON
 *
 * It reads MOUNTPOINT/.stagefs/stats (the daemon renders it at each open,
 * for the reader: root sees every user's rows, anyone else the node totals
 * and their own; so no socket and no privileges are needed) and
 * parses it with src/json: tools/ never depends on fuse/.  The screen
 * shows the node's feed rate (bytes and files per second over 1 s, 10 s and
 * 60 s), hit ratio, stall share, backend rate, cache use, warmup progress
 * where the daemon reports it, then one row per user, per Kubernetes
 * namespace (its jobs summed: "ns:NAME"), per job and per GPU, busiest
 * first, then one per member of the node's peer group (bytes in and
 * out, hits, failures, fallbacks) where it has one.  Rates include reads
 * through passthrough opens, counted exactly where the daemon's BPF hook
 * runs; a rate marked ~ includes estimated bytes (read_bytes_estimated:
 * passthrough opens charged their file size at open).
 *
 * The terminal is drawn with plain ANSI sequences on the alternate screen;
 * on exit, q, ^C (SIGINT), SIGTERM or SIGHUP the screen, cursor and tty
 * modes are restored.
 *
 * --json writes one object: "mount", "time" (Unix seconds), "uptime_s",
 * "cache" {"used_bytes", "limit_bytes"}, "warmup" (where reported),
 * "passthrough_accounting" (where reported: "bpf", "estimate" or "off"), and
 * "node", "users", "jobs", "processes", "gpus" exactly as in the stats
 * (exact integer counts), "namespaces" (each namespace's job rows summed:
 * "namespace", the counts of "jobs", "hit_ratio", "stall_ratio" and
 * "rates" of their sums), and "peers" where the stats have it.  Exit status: 0, or 1 when the stats cannot be
 * read or parsed (the reason on stderr), 2 for a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "ctlproto.h"
#include "json.h"
#include "util.h"


static volatile sig_atomic_t quit, resized;
static struct termios saved_tio;
static bool tio_saved, screen_on;

static void usage(FILE *f)
{
	fprintf(f, "usage: stagefs top [-d SECONDS] [--once [--json]] MOUNTPOINT\n"
		   "\n"
		   "Show the node's feed rate (bytes and files per second reaching readers),\n"
		   "cache hit ratio, stall share and per-user, per-namespace, per-job and\n"
		   "per-GPU rows, refreshed every SECONDS (default 1).  Quit with q or ^C.\n"
		   "\n"
		   "    -d, --delay SECONDS   refresh interval (0.2 to 3600)\n"
		   "    -1, --once            print one screen and exit\n"
		   "    -j, --json            with --once: print the feed-rate stats as JSON\n"
		   "    -h, --help            this text\n");
}

/* ---- reading the stats ---- */


/* ---- namespaces: their jobs summed ---- */

static double rate(const struct json *o, const char *win, const char *key);

/*
 * The counts summed, the ratios of the sums: a namespace's hit ratio is
 * its jobs' hits over their hits and misses, its stall share their stall
 * over their active time, as the daemon computes a user's.
 */
static const char *const ns_counts[] = {
	"read_bytes", "files_read", "opens", "cache_hits", "cache_misses", "backend_bytes",
	"stall_ns", "active_ns", "gpu_bytes", "read_bytes_estimated",
};
static const char *const ns_rates[] = {
	"read_bytes_per_s", "files_per_s", "backend_bytes_per_s", "gpu_bytes_per_s",
	"read_bytes_estimated_per_s",
};
static const char *const ns_windows[] = { "1s", "10s", "60s" };

struct nsrow {
	const char *name;	/* the stats' own string */
	uint64_t count[ARRAY_SIZE(ns_counts)];
	double rate[ARRAY_SIZE(ns_windows)][ARRAY_SIZE(ns_rates)];
	unsigned jobs;
};

/* The job rows of @r grouped by "namespace": *@out (free()), their number. */
static size_t ns_sum(const struct json *r, struct nsrow **out)
{
	const struct json *jobs = json_get(r, "jobs");
	size_t n = 0, cap = 0;
	struct nsrow *v = NULL;

	for (size_t i = 0; i < json_len(jobs); i++) {
		const struct json *j = json_at(jobs, i);
		const char *ns = json_str(json_get(j, "namespace"), NULL);
		struct nsrow *x = NULL;

		if (!ns)
			continue;
		for (size_t k = 0; k < n && !x; k++)
			if (!strcmp(v[k].name, ns))
				x = &v[k];
		if (!x) {
			if (n == cap) {
				struct nsrow *nv = realloc(v, (cap = cap ? 2 * cap : 8) * sizeof(*v));

				if (!nv)
					break;
				v = nv;
			}
			x = &v[n++];
			memset(x, 0, sizeof(*x));
			x->name = ns;
		}
		x->jobs++;
		for (size_t c = 0; c < ARRAY_SIZE(ns_counts); c++)
			x->count[c] += json_u64(json_get(j, ns_counts[c]), 0);
		for (size_t w = 0; w < ARRAY_SIZE(ns_windows); w++)
			for (size_t c = 0; c < ARRAY_SIZE(ns_rates); c++)
				x->rate[w][c] += rate(j, ns_windows[w], ns_rates[c]);
	}
	*out = v;
	return n;
}

static uint64_t ns_count(const struct nsrow *x, const char *key)
{
	for (size_t c = 0; c < ARRAY_SIZE(ns_counts); c++)
		if (!strcmp(ns_counts[c], key))
			return x->count[c];
	return 0;
}

static double ns_rate(const struct nsrow *x, const char *win, const char *key)
{
	for (size_t w = 0; w < ARRAY_SIZE(ns_windows); w++)
		for (size_t c = 0; c < ARRAY_SIZE(ns_rates); c++)
			if (!strcmp(ns_windows[w], win) && !strcmp(ns_rates[c], key))
				return x->rate[w][c];
	return 0;
}

/* -1 where there is nothing to divide */
static double ns_hit(const struct nsrow *x)
{
	uint64_t h = ns_count(x, "cache_hits"), m = ns_count(x, "cache_misses");

	return h + m ? (double)h / (double)(h + m) : -1;
}

static double ns_stall(const struct nsrow *x)
{
	uint64_t st = ns_count(x, "stall_ns"), act = ns_count(x, "active_ns");

	return act ? MIN((double)st / (double)act, 1.0) : -1;
}

static void json_ratio_or_null(double v)
{
	if (v < 0)
		fputs("null", stdout);
	else
		printf("%.4f", v);
}

static void print_ns_json(const struct json *r)
{
	struct nsrow *v;
	size_t n = ns_sum(r, &v);

	fputs(",\"namespaces\":[", stdout);
	for (size_t i = 0; i < n; i++) {
		printf("%s{\"namespace\":", i ? "," : "");
		json_write_str(stdout, v[i].name);
		printf(",\"jobs\":%u", v[i].jobs);
		for (size_t c = 0; c < ARRAY_SIZE(ns_counts); c++)
			printf(",\"%s\":%" PRIu64, ns_counts[c], v[i].count[c]);
		fputs(",\"hit_ratio\":", stdout);
		json_ratio_or_null(ns_hit(&v[i]));
		fputs(",\"stall_ratio\":", stdout);
		json_ratio_or_null(ns_stall(&v[i]));
		fputs(",\"rates\":{", stdout);
		for (size_t w = 0; w < ARRAY_SIZE(ns_windows); w++) {
			printf("%s\"%s\":{", w ? "," : "", ns_windows[w]);
			for (size_t c = 0; c < ARRAY_SIZE(ns_rates); c++)
				printf("%s\"%s\":%.1f", c ? "," : "", ns_rates[c], v[i].rate[w][c]);
			fputc('}', stdout);
		}
		fputs("}}", stdout);
	}
	fputc(']', stdout);
	free(v);
}

/* ---- --json ---- */

static void print_json(const char *mnt, const struct json *r)
{
	static const char *const keys[] = { "node", "users", "jobs", "processes", "gpus" };
	const char *const opt[] = { "peers" };
	const struct json *v;

	fputs("{\"mount\":", stdout);
	json_write_str(stdout, mnt);
	printf(",\"time\":%lld,\"uptime_s\":", (long long)time(NULL));
	json_write(stdout, json_get(r, "uptime_s"));
	fputs(",\"cache\":{\"used_bytes\":", stdout);
	json_write(stdout, json_get(r, "cache_used_bytes"));
	fputs(",\"limit_bytes\":", stdout);
	json_write(stdout, json_get(r, "cache_limit_bytes"));
	fputc('}', stdout);
	if ((v = json_get(r, "warmup"))) {
		fputs(",\"warmup\":", stdout);
		json_write(stdout, v);
	}
	if ((v = json_get(r, "passthrough_accounting"))) {
		fputs(",\"passthrough_accounting\":", stdout);
		json_write(stdout, v);
	}
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		printf(",\"%s\":", keys[i]);
		json_write(stdout, json_get(r, keys[i]));
	}
	print_ns_json(r);
	for (size_t i = 0; i < ARRAY_SIZE(opt); i++) {
		if ((v = json_get(r, opt[i]))) {
			printf(",\"%s\":", opt[i]);
			json_write(stdout, v);
		}
	}
	fputs("}\n", stdout);
}

/* ---- the screen ---- */

static double rate(const struct json *o, const char *win, const char *key)
{
	return json_num(json_get(json_get(json_get(o, "rates"), win), key), 0);
}

static const char *fmt_rate(double bps, char *buf, size_t len)
{
	if (bps >= 1e9)
		snprintf(buf, len, "%.2f GB/s", bps / 1e9);
	else if (bps >= 1e6)
		snprintf(buf, len, "%.1f MB/s", bps / 1e6);
	else if (bps >= 1e3)
		snprintf(buf, len, "%.1f kB/s", bps / 1e3);
	else
		snprintf(buf, len, "%.0f B/s", bps);
	return buf;
}

static const char *fmt_pct(const struct json *v, char *buf, size_t len)
{
	if (json_type(v) != JSON_NUMBER)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", json_num(v, 0) * 100);
	return buf;
}

/* The screen's lines go into a buffer: one write per frame, no flicker. */
struct screen {
	char *buf;
	size_t len;
	FILE *f;
	int rows, cols, line;
};

static void put(struct screen *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct screen *s, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	if (s->line >= s->rows)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > s->cols && s->cols > 0)
		line[s->cols] = '\0';
	fputs(line, s->f);
	fputs(screen_on ? "\033[K\r\n" : "\n", s->f);
	s->line++;
}

/* Row order: busiest over 10 s first, then most bytes in total. */
static int cmp_busy(const void *a, const void *b)
{
	const struct json *x = *(const struct json *const *)a;
	const struct json *y = *(const struct json *const *)b;
	double rx = rate(x, "10s", "read_bytes_per_s") + rate(x, "10s", "gpu_bytes_per_s");
	double ry = rate(y, "10s", "read_bytes_per_s") + rate(y, "10s", "gpu_bytes_per_s");
	double tx = json_num(json_get(x, "read_bytes"), 0), ty = json_num(json_get(y, "read_bytes"), 0);

	if (rx != ry)
		return rx > ry ? -1 : 1;
	return tx > ty ? -1 : tx < ty;
}

static size_t sorted(const struct json *arr, const struct json ***out)
{
	size_t n = json_len(arr);

	*out = calloc(n ? n : 1, sizeof(**out));
	if (!*out)
		return 0;
	for (size_t i = 0; i < n; i++)
		(*out)[i] = json_at(arr, i);
	qsort(*out, n, sizeof(**out), cmp_busy);
	return n;
}

/* "~" where the rate of @o over @win includes estimated bytes, else " ". */
static const char *est_mark(const struct json *o, const char *win)
{
	return rate(o, win, "read_bytes_estimated_per_s") > 0 ? "~" : " ";
}

static void entity_row(struct screen *s, const char *who, const char *job,
		       const struct json *o)
{
	char r1[32], r10[32], be[32], hit[16], stall[16], tot[32], gpu[32];

	put(s, "%-12.12s %-22.22s %10s%s %10s%s %8.1f %8s %7s %11s %9s%s %11s", who, job,
	    fmt_rate(rate(o, "1s", "read_bytes_per_s"), r1, sizeof(r1)), est_mark(o, "1s"),
	    fmt_rate(rate(o, "10s", "read_bytes_per_s"), r10, sizeof(r10)), est_mark(o, "10s"),
	    rate(o, "10s", "files_per_s"),
	    fmt_pct(json_get(o, "hit_ratio"), hit, sizeof(hit)),
	    fmt_pct(json_get(o, "stall_ratio"), stall, sizeof(stall)),
	    fmt_rate(rate(o, "10s", "backend_bytes_per_s"), be, sizeof(be)),
	    fmt_size(json_u64(json_get(o, "read_bytes"), 0), tot, sizeof(tot)),
	    json_u64(json_get(o, "read_bytes_estimated"), 0) ? "~" : " ",
	    fmt_rate(rate(o, "10s", "gpu_bytes_per_s"), gpu, sizeof(gpu)));
}

static const char *fmt_ratio(double v, char *buf, size_t len)
{
	if (v < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", v * 100);
	return buf;
}

/* Busiest over 10 s first, then most bytes in total, as cmp_busy(). */
static int cmp_ns(const void *a, const void *b)
{
	const struct nsrow *x = a, *y = b;
	double rx = ns_rate(x, "10s", "read_bytes_per_s") + ns_rate(x, "10s", "gpu_bytes_per_s");
	double ry = ns_rate(y, "10s", "read_bytes_per_s") + ns_rate(y, "10s", "gpu_bytes_per_s");
	uint64_t tx = ns_count(x, "read_bytes"), ty = ns_count(y, "read_bytes");

	if (rx != ry)
		return rx > ry ? -1 : 1;
	return tx > ty ? -1 : tx < ty;
}

/* A row per namespace, "ns:NAME", its jobs summed (ns_sum()). */
static void ns_table(struct screen *s, const struct json *r)
{
	char who[80], jobs[32], r1[32], r10[32], be[32], hit[16], stall[16], tot[32], gpu[32];
	struct nsrow *v;
	size_t n = ns_sum(r, &v);

	if (n)
		qsort(v, n, sizeof(*v), cmp_ns);
	for (size_t i = 0; i < n; i++) {
		const struct nsrow *x = &v[i];

		snprintf(who, sizeof(who), "ns:%s", x->name);
		snprintf(jobs, sizeof(jobs), "(%u job%s)", x->jobs, x->jobs == 1 ? "" : "s");
		put(s, "%-12.12s %-22.22s %10s%s %10s%s %8.1f %8s %7s %11s %9s%s %11s", who, jobs,
		    fmt_rate(ns_rate(x, "1s", "read_bytes_per_s"), r1, sizeof(r1)),
		    ns_rate(x, "1s", "read_bytes_estimated_per_s") > 0 ? "~" : " ",
		    fmt_rate(ns_rate(x, "10s", "read_bytes_per_s"), r10, sizeof(r10)),
		    ns_rate(x, "10s", "read_bytes_estimated_per_s") > 0 ? "~" : " ",
		    ns_rate(x, "10s", "files_per_s"),
		    fmt_ratio(ns_hit(x), hit, sizeof(hit)),
		    fmt_ratio(ns_stall(x), stall, sizeof(stall)),
		    fmt_rate(ns_rate(x, "10s", "backend_bytes_per_s"), be, sizeof(be)),
		    fmt_size(ns_count(x, "read_bytes"), tot, sizeof(tot)),
		    ns_count(x, "read_bytes_estimated") ? "~" : " ",
		    fmt_rate(ns_rate(x, "10s", "gpu_bytes_per_s"), gpu, sizeof(gpu)));
	}
	free(v);
}

static void draw(struct screen *s, const char *mnt, const struct json *r, const char *error)
{
	const struct json *node = json_get(r, "node"), **rows;
	char a[32], b[32], c[32], d[32], e[32], u[32], l[32], now[16];
	uint64_t up = json_u64(json_get(r, "uptime_s"), 0);
	uint64_t used = json_u64(json_get(r, "cache_used_bytes"), 0);
	uint64_t limit = json_u64(json_get(r, "cache_limit_bytes"), 0);
	time_t t = time(NULL);
	size_t n;

	strftime(now, sizeof(now), "%H:%M:%S", localtime(&t));
	if (screen_on)
		fputs("\033[H", s->f);
	put(s, "stagefs top - %s   up %" PRIu64 "d %02" PRIu64 ":%02" PRIu64 ":%02" PRIu64
	    "   %s%s", mnt, up / 86400, up / 3600 % 24, up / 60 % 60, up % 60, now,
	    screen_on ? "   (q quits)" : "");
	if (error) {
		put(s, "error: %s", error);
		goto out;
	}
	if (!node) {
		put(s, "this daemon reports no feed rate (no \"node\" in .stagefs/stats)");
		goto out;
	}
	put(s, "feed    1s: %s%-10s %8.1f files/s   10s: %s%-10s %8.1f files/s   60s: %s%-10s %8.1f files/s",
	    est_mark(node, "1s")[0] == '~' ? "~" : "",
	    fmt_rate(rate(node, "1s", "read_bytes_per_s"), a, sizeof(a)),
	    rate(node, "1s", "files_per_s"),
	    est_mark(node, "10s")[0] == '~' ? "~" : "",
	    fmt_rate(rate(node, "10s", "read_bytes_per_s"), b, sizeof(b)),
	    rate(node, "10s", "files_per_s"),
	    est_mark(node, "60s")[0] == '~' ? "~" : "",
	    fmt_rate(rate(node, "60s", "read_bytes_per_s"), c, sizeof(c)),
	    rate(node, "60s", "files_per_s"));
	put(s, "cache   chunk hit %s (10s %s, prefetch's misses too)   stall %s (10s %s)   backend %s   used %s of %s",
	    fmt_pct(json_get(node, "hit_ratio"), a, sizeof(a)),
	    fmt_pct(json_get(json_get(json_get(node, "rates"), "10s"), "hit_ratio"), b, sizeof(b)),
	    fmt_pct(json_get(node, "stall_ratio"), c, sizeof(c)),
	    fmt_pct(json_get(json_get(json_get(node, "rates"), "10s"), "stall_ratio"), d, sizeof(d)),
	    fmt_rate(rate(node, "10s", "backend_bytes_per_s"), e, sizeof(e)),
	    fmt_size(used, u, sizeof(u)), limit ? fmt_size(limit, l, sizeof(l)) : "?");
	put(s, "total   %s in %" PRIu64 " files read (%s from cache files), %" PRIu64
	    " opens; passthrough %s in %" PRIu64 " opens (%s%s%s); GPUs %s",
	    fmt_size(json_u64(json_get(node, "read_bytes"), 0), a, sizeof(a)),
	    json_u64(json_get(node, "files_read"), 0),
	    fmt_size(json_u64(json_get(node, "client_read_bytes"), 0), d, sizeof(d)),
	    json_u64(json_get(node, "opens"), 0),
	    fmt_size(json_u64(json_get(node, "passthrough_read_bytes"), 0), b, sizeof(b)),
	    json_u64(json_get(node, "passthrough_opens"), 0),
	    json_str(json_get(r, "passthrough_accounting"), "?"),
	    json_u64(json_get(node, "read_bytes_estimated"), 0) ? ", ~" : "",
	    json_u64(json_get(node, "read_bytes_estimated"), 0) ?
	    fmt_size(json_u64(json_get(node, "read_bytes_estimated"), 0), e, sizeof(e)) : "",
	    fmt_size(json_u64(json_get(node, "gpu_bytes"), 0), c, sizeof(c)));
	if (json_get(r, "warmup_jobs")) {
		put(s, "warmup  %" PRIu64 " jobs, %" PRIu64 " chunks fetched, %" PRIu64
		    " queued, %" PRIu64 " in flight",
		    json_u64(json_get(r, "warmup_jobs"), 0),
		    json_u64(json_get(r, "warmup_fetches"), 0),
		    json_u64(json_get(r, "prefetch_queued"), 0),
		    json_u64(json_get(r, "prefetch_inflight"), 0));
	}
	put(s, "%s", "");
	put(s, "%-12s %-22s %11s %11s %8s %8s %7s %11s %10s %11s", "USER", "JOB", "1s", "10s",
	    "files/s", "read hit", "stall", "backend", "read", "GPU 10s");
	n = sorted(json_get(r, "users"), &rows);
	for (size_t i = 0; rows && i < n; i++)
		entity_row(s, json_str(json_get(rows[i], "user"), "?"), "(all jobs)", rows[i]);
	free(rows);
	ns_table(s, r);
	n = sorted(json_get(r, "jobs"), &rows);
	for (size_t i = 0; rows && i < n; i++)
		entity_row(s, json_str(json_get(rows[i], "user"), "?"),
			   json_str(json_get(rows[i], "job"), "?"), rows[i]);
	free(rows);
	n = json_len(json_get(r, "gpus"));
	if (n) {
		put(s, "%s", "");
		put(s, "%-6s %12s %12s %12s", "GPU", "1s", "10s", "total");
		for (size_t i = 0; i < n; i++) {
			const struct json *g = json_at(json_get(r, "gpus"), i);

			put(s, "%-6" PRIu64 " %12s %12s %12s", json_u64(json_get(g, "gpu"), 0),
			    fmt_rate(rate(g, "1s", "gpu_bytes_per_s"), a, sizeof(a)),
			    fmt_rate(rate(g, "10s", "gpu_bytes_per_s"), b, sizeof(b)),
			    fmt_size(json_u64(json_get(g, "gpu_bytes"), 0), c, sizeof(c)));
		}
	}
	n = json_len(json_get(r, "peers"));
	if (n) {
		put(s, "%s", "");
		put(s, "peers   %s saved from the backend; %" PRIu64 " of %" PRIu64
		    " members skipped now",
		    fmt_size(json_u64(json_get(r, "peer_bytes_in"), 0), a, sizeof(a)),
		    json_u64(json_get(r, "peer_backoff"), 0),
		    json_u64(json_get(r, "peer_members"), 0));
		put(s, "%-21s %-8s %11s %8s %8s %8s %9s %11s %8s %8s", "PEER", "STATE", "in",
		    "hits", "fail", "corrupt", "fallback", "out", "served", "refused");
		for (size_t i = 0; i < n; i++) {
			const struct json *p = json_at(json_get(r, "peers"), i);
			const char *st = json_bool(json_get(p, "self"), false) ? "self" :
					 !json_bool(json_get(p, "member"), false) ? "left" :
					 json_bool(json_get(p, "backoff"), false) ? "backoff" : "live";

			put(s, "%-21s %-8s %11s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %9" PRIu64
			    " %11s %8" PRIu64 " %8" PRIu64,
			    json_str(json_get(p, "addr"), "?"), st,
			    fmt_size(json_u64(json_get(p, "bytes_in"), 0), a, sizeof(a)),
			    json_u64(json_get(p, "hits"), 0), json_u64(json_get(p, "failures"), 0),
			    json_u64(json_get(p, "corrupt"), 0), json_u64(json_get(p, "fallbacks"), 0),
			    fmt_size(json_u64(json_get(p, "bytes_out"), 0), b, sizeof(b)),
			    json_u64(json_get(p, "served"), 0), json_u64(json_get(p, "refused"), 0));
		}
	}
out:
	if (screen_on)
		fputs("\033[J", s->f);
}

/* ---- the terminal ---- */

static void restore_terminal(void)
{
	if (screen_on) {
		fputs("\033[?25h\033[?1049l", stdout);
		fflush(stdout);
		screen_on = false;
	}
	if (tio_saved) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
		tio_saved = false;
	}
}

static void on_signal(int sig)
{
	if (sig == SIGWINCH)
		resized = 1;
	else
		quit = 1;
}

static void setup_terminal(void)
{
	struct sigaction sa = { .sa_handler = on_signal };
	struct termios tio;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGWINCH, &sa, NULL);
	atexit(restore_terminal);
	if (isatty(STDIN_FILENO) && !tcgetattr(STDIN_FILENO, &saved_tio)) {
		tio = saved_tio;
		tio.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		tio.c_cc[VMIN] = 0;
		tio.c_cc[VTIME] = 0;
		if (!tcsetattr(STDIN_FILENO, TCSANOW, &tio))
			tio_saved = true;
	}
	if (isatty(STDOUT_FILENO)) {
		fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);
		screen_on = true;
	}
}

static void term_size(int *rows, int *cols)
{
	struct winsize ws;

	*rows = 1000;
	*cols = 0;	/* no limit when not a terminal */
	if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_row && ws.ws_col) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	}
}

/* Draw one frame of @mnt to stdout.  Returns 0, or -errno if the stats failed. */
static int frame(const char *mnt, bool tty)
{
	struct screen s = { 0 };
	struct json_doc *doc = NULL;
	char err[PATH_MAX + 512];
	int ret = ctl_load_stats(mnt, &doc, err, sizeof(err));

	s.f = open_memstream(&s.buf, &s.len);
	if (!s.f) {
		json_doc_free(doc);
		return -ENOMEM;
	}
	term_size(&s.rows, &s.cols);
	if (!tty)
		s.cols = 0;
	draw(&s, mnt, doc ? json_root(doc) : NULL, ret ? err : NULL);
	fclose(s.f);
	fwrite(s.buf, 1, s.len, stdout);
	fflush(stdout);
	free(s.buf);
	json_doc_free(doc);
	if (ret && !tty)
		fprintf(stderr, "stagefs top: %s\n", err);
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "delay", required_argument, NULL, 'd' },
		{ "once", no_argument, NULL, '1' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool once = false, json = false;
	double delay = 1.0;
	const char *mnt;
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "d:1jh", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			delay = strtod(optarg, &end);
			if (*end || !(delay >= 0.2 && delay <= 3600)) {
				fprintf(stderr, "stagefs top: -d: expected 0.2 to 3600 seconds\n");
				return 2;
			}
			break;
		case '1':
			once = true;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 1 || (json && !once)) {
		usage(stderr);
		return 2;
	}
	mnt = argv[optind];

	if (json) {
		struct json_doc *doc;
		char err[PATH_MAX + 512];

		if (ctl_load_stats(mnt, &doc, err, sizeof(err))) {
			fprintf(stderr, "stagefs top: %s\n", err);
			return 1;
		}
		print_json(mnt, json_root(doc));
		json_doc_free(doc);
		return 0;
	}
	if (once)
		return frame(mnt, false) ? 1 : 0;

	setup_terminal();
	while (!quit) {
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
		uint64_t until = now_ms() + (uint64_t)(delay * 1000);

		frame(mnt, true);
		while (!quit && !resized && now_ms() < until) {
			int n = poll(&p, tio_saved ? 1 : 0, (int)(until - now_ms()));
			char ch;

			if (n > 0 && read(STDIN_FILENO, &ch, 1) == 1) {
				if (ch == 'q' || ch == 'Q' || ch == 3)
					quit = 1;
				else
					break;	/* any other key: redraw now */
			}
		}
		resized = 0;
	}
	restore_terminal();
	return 0;
}
