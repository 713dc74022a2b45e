/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_render: see stats_render.h.  The JSON and the Prometheus text of
 * one struct stats_report; each walks the feed-rate rows with its own
 * table of names (field_json, prom_job) and the daemon-wide table as given.
 */
#include "stats_render.h"

#include "json.h"
#include "util.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

/* May view @v show row @r?  GPU rows are per device, like node totals. */
static bool view_shows(const struct stats_view *v, const struct stats_row *r)
{
	return v->all || r->kind == STATS_GPU || r->uid == v->uid;
}

static double ratio_of(double a, double b)
{
	return b > 0 ? a / b : -1;
}

/* Stall over active time, at most 1 (stats_stall_ratio() for rates). */
static double stall_share(double stall, double active)
{
	double r = ratio_of(stall, active);

	return r > 1 ? 1 : r;
}

/* ---- JSON ---- */

/*
 * The Kubernetes namespace of job @job, "k8s:NAMESPACE/...": the daemon's
 * own names for pods (procinfo.h), which no reader can take, so the
 * namespace is the one the reader's cgroup says.  NULL where none (a pod
 * not named yet, "k8s:pod/UID", has none).
 */
static const char *job_namespace(const char *job, char *ns, size_t len)
{
	const char *slash;

	if (strncmp(job, "k8s:", 4) || !strncmp(job, "k8s:pod/", 8) ||
	    !(slash = strchr(job + 4, '/')) || (size_t)(slash - job - 4) >= len)
		return NULL;
	memcpy(ns, job + 4, (size_t)(slash - job - 4));
	ns[slash - job - 4] = '\0';
	return ns;
}

/* JSON names of the fields; NULL rate name: no per-second rate shown. */
static const struct {
	const char *name, *rate;
} field_json[STATS_NFIELDS] = {
	[STATS_READ_BYTES] = { "read_bytes", "read_bytes_per_s" },
	[STATS_FILES] = { "files_read", "files_per_s" },
	[STATS_OPENS] = { "opens", "opens_per_s" },
	[STATS_READS] = { "read_requests", "read_requests_per_s" },
	[STATS_READ_ERRORS] = { "read_errors", NULL },
	[STATS_HITS] = { "cache_hits", NULL },
	[STATS_MISSES] = { "cache_misses", NULL },
	[STATS_BACKEND_BYTES] = { "backend_bytes", "backend_bytes_per_s" },
	[STATS_STALL_NS] = { "stall_ns", NULL },
	[STATS_READ_NS] = { "read_ns", NULL },
	[STATS_PT_OPENS] = { "passthrough_opens", "passthrough_opens_per_s" },
	[STATS_PT_BYTES] = { "passthrough_bytes_estimated",
			     "passthrough_bytes_estimated_per_s" },
	[STATS_GPU_BYTES] = { "gpu_bytes", "gpu_bytes_per_s" },
	[STATS_CLIENT_BYTES] = { "client_read_bytes", "client_read_bytes_per_s" },
	[STATS_PT_READ_BYTES] = { "passthrough_read_bytes", "passthrough_read_bytes_per_s" },
	[STATS_READ_BYTES_EST] = { "read_bytes_estimated", "read_bytes_estimated_per_s" },
	[STATS_ACTIVE_NS] = { "active_ns", NULL },
};

static void json_ratio(FILE *f, double r)
{
	if (r < 0)
		fputs("null", f);
	else
		fprintf(f, "%.4f", r);
}

static void json_counts(FILE *f, const struct stats_row *r)
{
	for (int i = 0; i < STATS_NFIELDS; i++)
		fprintf(f, "\"%s\": %" PRIu64 ", ", field_json[i].name, r->total[i]);
	fputs("\"hit_ratio\": ", f);
	json_ratio(f, stats_hit_ratio(r->total));
	fputs(", \"stall_ratio\": ", f);
	json_ratio(f, stats_stall_ratio(r->total));
	fputs(", \"rates\": {", f);
	for (int w = 0; w < STATS_NWIN; w++) {
		const double *v = r->rate[w];

		fprintf(f, "%s\"%s\": {", w ? ", " : "", stats_window_name[w]);
		for (int i = 0; i < STATS_NFIELDS; i++)
			if (field_json[i].rate)
				fprintf(f, "\"%s\": %.1f, ", field_json[i].rate, v[i]);
		fputs("\"hit_ratio\": ", f);
		json_ratio(f, ratio_of(v[STATS_HITS], v[STATS_HITS] + v[STATS_MISSES]));
		fputs(", \"stall_ratio\": ", f);
		json_ratio(f, stall_share(v[STATS_STALL_NS], v[STATS_ACTIVE_NS]));
		fputc('}', f);
	}
	fputs("}", f);
}

static void json_rows(FILE *f, const struct stats_snap *s, const struct stats_view *v,
		      enum stats_kind k, const char *key, const char *indent)
{
	bool first = true;

	fprintf(f, ",\n%s\"%s\": [", indent, key);
	for (size_t i = 0; i < s->nrows; i++) {
		const struct stats_row *r = &s->rows[i];
		char ns[64];

		if (r->kind != k || !view_shows(v, r))
			continue;
		fprintf(f, "%s\n%s  {", first ? "" : ",", indent);
		first = false;
		switch (k) {
		case STATS_GPU:
			fprintf(f, "\"gpu\": %d, ", r->gpu);
			break;
		case STATS_PROC:
			fprintf(f, "\"pid\": %d, \"comm\": ", (int)r->pid);
			json_write_str(f, r->comm);
			fprintf(f, ", \"threads\": %u, \"alive\": %s, ", r->threads,
				r->alive ? "true" : "false");
			/* fall through */
		case STATS_JOB:
			fputs("\"job\": ", f);
			json_write_str(f, r->job);
			fputs(", ", f);
			if (job_namespace(r->job, ns, sizeof(ns))) {
				fputs("\"namespace\": ", f);
				json_write_str(f, ns);
				fputs(", ", f);
			}
			/* fall through */
		case STATS_USER:
			fputs("\"user\": ", f);
			json_write_str(f, r->user);
			fprintf(f, ", \"uid\": %u, ", r->uid);
			break;
		default:
			break;
		}
		json_counts(f, r);
		fputc('}', f);
	}
	fprintf(f, "%s%s]", first ? "" : "\n", first ? "" : indent);
}

/* The feed-rate members: "node", "users", "jobs", "processes", "gpus". */
static void json_feed(FILE *f, const struct stats_snap *s, const struct stats_view *v,
		      const char *indent)
{
	fprintf(f, "%s\"node\": {\"uptime_ms\": %" PRIu64 ", \"untracked_reads\": %" PRIu64 ", ",
		indent, s->uptime_ms, s->untracked_reads);
	json_counts(f, &s->node);
	fputc('}', f);
	json_rows(f, s, v, STATS_USER, "users", indent);
	json_rows(f, s, v, STATS_JOB, "jobs", indent);
	json_rows(f, s, v, STATS_PROC, "processes", indent);
	json_rows(f, s, v, STATS_GPU, "gpus", indent);
}

/* The peer group's members: "peers": [ {...}, ... ], */
static void json_peers(FILE *f, const struct peer_stat *p, size_t n)
{
	fputs("  \"peers\": [", f);
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "%s\n    {\"addr\": ", i ? "," : "");
		json_write_str(f, p[i].addr);
		fprintf(f, ", \"self\": %s, \"member\": %s, \"backoff\": %s, \"down\": %s, "
			"\"bytes_in\": %" PRIu64 ", \"hits\": %" PRIu64 ", "
			"\"failures\": %" PRIu64 ", \"corrupt\": %" PRIu64 ", "
			"\"fallbacks\": %" PRIu64 ", \"bytes_out\": %" PRIu64 ", "
			"\"served\": %" PRIu64 ", \"refused\": %" PRIu64 "}",
			p[i].self ? "true" : "false", p[i].member ? "true" : "false",
			p[i].backoff ? "true" : "false", p[i].down ? "true" : "false",
			p[i].bytes_in, p[i].hits,
			p[i].failures, p[i].corrupt, p[i].fallbacks, p[i].bytes_out,
			p[i].served, p[i].refused);
	}
	fputs(n ? "\n  ],\n" : "],\n", f);
}

void stats_render_json(const struct stats_report *r, FILE *f)
{
	fputs("{\n", f);
	for (size_t i = 0; i < r->nmetrics; i++) {
		const struct stats_metric *m = &r->metrics[i];

		fprintf(f, "  \"%s\": ", m->key);
		if (m->type == STATS_TEXT || m->type == STATS_INFO)
			json_write_str(f, m->text ? m->text : "");
		else
			fprintf(f, "%" PRIu64, m->value);
		fputs(",\n", f);
	}
	if (r->peers)
		json_peers(f, r->peers, r->npeers);
	if (r->feed) {
		json_feed(f, r->feed, &r->view, "  ");
	} else {
		fputs("  \"node\": null, \"feedrate_error\": ", f);
		json_write_str(f, strerror(-r->feed_error));
	}
	fputs("\n}\n", f);
}

/* ---- Prometheus ---- */

static void prom_label(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void prom_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Per (user, job) counters: the job rows. */
static const struct {
	enum stats_field field;
	const char *name, *help;
	double scale;		/* 0: an integer count */
} prom_job[] = {
	{ STATS_READ_BYTES, "stagefs_read_bytes_total",
	  "Bytes delivered to readers: READ replies, passthrough reads (exact, or estimated: "
	  "stagefs_read_bytes_estimated_total) and client-library reads of cache files.", 0 },
	{ STATS_READ_BYTES_EST, "stagefs_read_bytes_estimated_total",
	  "Of stagefs_read_bytes_total, the bytes that are estimated (passthrough opens "
	  "charged their file size at open); 0 where every byte was counted.", 0 },
	{ STATS_PT_READ_BYTES, "stagefs_passthrough_read_bytes_total",
	  "Of stagefs_read_bytes_total, the bytes read through FUSE passthrough opens.", 0 },
	{ STATS_FILES, "stagefs_files_read_total",
	  "Opens through which at least one byte was read (samples delivered).", 0 },
	{ STATS_OPENS, "stagefs_opens_total", "Opens of regular files.", 0 },
	{ STATS_READS, "stagefs_read_requests_total", "READ requests served.", 0 },
	{ STATS_READ_ERRORS, "stagefs_read_errors_total", "READ requests that failed.", 0 },
	{ STATS_HITS, "stagefs_cache_hits_total",
	  "Chunks READs found in the node cache.", 0 },
	{ STATS_MISSES, "stagefs_cache_misses_total",
	  "Chunks READs had to fetch from the backend.", 0 },
	{ STATS_BACKEND_BYTES, "stagefs_backend_bytes_total",
	  "Bytes fetched from the backend for these READs.", 0 },
	{ STATS_STALL_NS, "stagefs_stall_seconds_total",
	  "Time readers had a READ in flight waiting on data not cached yet (overlaps once).", 1e-9 },
	{ STATS_ACTIVE_NS, "stagefs_active_seconds_total",
	  "Time readers were busy reading (gaps between their events up to stall_idle_gap); "
	  "stall share = stall / active.", 1e-9 },
	{ STATS_READ_NS, "stagefs_read_seconds_total",
	  "Time READs spent in the daemon.", 1e-9 },
	{ STATS_PT_OPENS, "stagefs_passthrough_opens_total",
	  "Opens served by FUSE passthrough (their reads bypass the daemon).", 0 },
	{ STATS_PT_BYTES, "stagefs_passthrough_read_bytes_estimated_total",
	  "Estimated bytes read through passthrough opens (file size at open).", 0 },
	{ STATS_GPU_BYTES, "stagefs_job_gpu_bytes_total",
	  "Bytes the GPU client library copied to GPU memory for this job.", 0 },
	{ STATS_CLIENT_BYTES, "stagefs_client_read_bytes_total",
	  "Bytes the client library read itself from cache files the daemon handed it "
	  "(part of stagefs_read_bytes_total).", 0 },
};

static void prom_value(FILE *f, uint64_t v, double scale)
{
	if (scale)
		fprintf(f, " %.9f\n", (double)v * scale);
	else
		fprintf(f, " %" PRIu64 "\n", v);
}

/* The feed-rate families: per (user, job), per GPU, node-wide. */
static void prom_feed(FILE *f, const struct stats_snap *s, const struct stats_view *v)
{
	for (size_t m = 0; m < ARRAY_SIZE(prom_job); m++) {
		prom_family(f, prom_job[m].name, "counter", prom_job[m].help);
		for (size_t i = 0; i < s->nrows; i++) {
			const struct stats_row *r = &s->rows[i];
			char ns[64];

			if (r->kind != STATS_JOB || !view_shows(v, r))
				continue;
			fprintf(f, "%s{user=", prom_job[m].name);
			prom_label(f, r->user);
			fputs(",job=", f);
			prom_label(f, r->job);
			if (job_namespace(r->job, ns, sizeof(ns))) {
				fputs(",namespace=", f);
				prom_label(f, ns);
			}
			fputc('}', f);
			prom_value(f, r->total[prom_job[m].field], prom_job[m].scale);
		}
	}
	prom_family(f, "stagefs_gpu_bytes_total", "counter",
		    "Bytes the GPU client library copied to this GPU's memory.");
	for (size_t i = 0; i < s->nrows; i++)
		if (s->rows[i].kind == STATS_GPU)
			fprintf(f, "stagefs_gpu_bytes_total{gpu=\"%d\"} %" PRIu64 "\n",
				s->rows[i].gpu, s->rows[i].total[STATS_GPU_BYTES]);
	prom_family(f, "stagefs_fetched_bytes_total", "counter",
		    "Bytes fetched from the backend for any reason (READs, warmup, readahead).");
	fprintf(f, "stagefs_fetched_bytes_total %" PRIu64 "\n",
		s->node.total[STATS_BACKEND_BYTES]);
	prom_family(f, "stagefs_feed_bytes_per_second", "gauge",
		    "Bytes per second delivered to readers (stagefs_read_bytes_total), over the window.");
	for (int w = 0; w < STATS_NWIN; w++)
		fprintf(f, "stagefs_feed_bytes_per_second{window=\"%s\"} %.1f\n",
			stats_window_name[w], s->node.rate[w][STATS_READ_BYTES]);
	prom_family(f, "stagefs_feed_files_per_second", "gauge",
		    "Files (opens with a byte read) per second, over the window.");
	for (int w = 0; w < STATS_NWIN; w++)
		fprintf(f, "stagefs_feed_files_per_second{window=\"%s\"} %.3f\n",
			stats_window_name[w], s->node.rate[w][STATS_FILES]);
	prom_family(f, "stagefs_untracked_reads_total", "counter",
		    "READs whose reader could not be identified (counted node-wide only).");
	fprintf(f, "stagefs_untracked_reads_total %" PRIu64 "\n", s->untracked_reads);
	prom_family(f, "stagefs_uptime_seconds", "gauge", "Seconds since the mount.");
	fprintf(f, "stagefs_uptime_seconds %.3f\n", (double)s->uptime_ms / 1000.0);
}

/* The table's rows that have a Prometheus name. */
static void prom_table(FILE *f, const struct stats_metric *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!m[i].prom || m[i].type == STATS_TEXT)
			continue;
		if (m[i].type == STATS_INFO) {
			prom_family(f, m[i].prom, "gauge", m[i].help);
			fprintf(f, "%s{%s=", m[i].prom, m[i].label);
			prom_label(f, m[i].text ? m[i].text : "");
			fputs("} 1\n", f);
			continue;
		}
		prom_family(f, m[i].prom, m[i].type == STATS_COUNTER ? "counter" : "gauge",
			    m[i].help);
		fputs(m[i].prom, f);
		prom_value(f, m[i].value, m[i].prom_scale);
	}
}

/* Per member of the peer group: stagefs_peer_*{peer="HOST:PORT"}. */
static void prom_peers(FILE *f, const struct peer_stat *p, size_t n)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} fam[] = {
#define PF(n, h, f) { "stagefs_peer_" n, h, offsetof(struct peer_stat, f) }
		PF("bytes_in_total", "Chunk bytes this peer sent us, verified (backend bytes saved).", bytes_in),
		PF("hits_total", "Chunks this peer sent us, verified.", hits),
		PF("failures_total", "Our requests this peer failed (timeout, refusal, hang-up, wrong bytes).", failures),
		PF("corrupt_total", "Chunks this peer sent with wrong bytes (dropped).", corrupt),
		PF("fallbacks_total", "Our requests to this peer that ended at the backend.", fallbacks),
		PF("bytes_out_total", "Chunk bytes we sent this peer.", bytes_out),
		PF("served_total", "Chunks we sent this peer.", served),
		PF("refused_total", "Requests from this peer's address we refused (bad key, replay).", refused),
#undef PF
	};

	for (size_t k = 0; k < ARRAY_SIZE(fam); k++) {
		prom_family(f, fam[k].name, "counter", fam[k].help);
		for (size_t i = 0; i < n; i++) {
			if (p[i].self)
				continue;
			fprintf(f, "%s{peer=", fam[k].name);
			prom_label(f, p[i].addr);
			fprintf(f, "} %" PRIu64 "\n",
				*(const uint64_t *)((const char *)&p[i] + fam[k].off));
		}
	}
	/*
	 * Up unless failing: a back-off ends and the peer is tried again, so
	 * "in a back-off" flaps while a peer stays down; "its last request
	 * failed" holds until it answers.  Members only: one that left goes.
	 */
	prom_family(f, "stagefs_peer_up", "gauge",
		    "1 unless this member is failing: our last request to it failed and none has succeeded since.");
	for (size_t i = 0; i < n; i++) {
		if (p[i].self || !p[i].member)
			continue;
		fputs("stagefs_peer_up{peer=", f);
		prom_label(f, p[i].addr);
		fprintf(f, "} %d\n", !p[i].down);
	}
}

void stats_render_prom(const struct stats_report *r, FILE *f)
{
	if (r->feed)
		prom_feed(f, r->feed, &r->view);
	prom_table(f, r->metrics, r->nmetrics);
	if (r->peers)
		prom_peers(f, r->peers, r->npeers);
}
