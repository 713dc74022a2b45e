/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_render: the two texts a stagefs node reports itself in, both from
 * one snapshot: the JSON object of MOUNT/.stagefs/stats and the Prometheus
 * text exposition (format 0.0.4) of .stagefs/metrics, the metrics_port
 * endpoint and the metrics_file (docs/feedrate.md).
 *
 * Design.  Everything a node reports is one struct stats_report, taken
 * once per rendering: the feed-rate snapshot of src/stats/stats.h (node, users,
 * jobs, processes, GPUs) and a table of daemon-wide figures, one struct
 * stats_metric (name, help, type, value) each, that the daemon gathers
 * from its own counters, the cache's and the prefetcher's (fuse/vfiles.c).
 * Both renderers walk the same report, so a figure is named once, in its
 * row, and shows in both texts with the same value.  Counting lives in
 * src/stats/stats.c; this module only reads a report.
 *
 * Guarantees.
 *  - JSON: one object.  The table's rows first, in table order, one member
 *    per line ("  \"key\": value,"): tools/bench/ and tools/dev/demo.sh read
 *    them line by line, tests and `stagefs top` by name.  Then "peers"
 *    (the members of the node's peer group, one object each, where it has
 *    one), then "node", "users", "jobs", "processes", "gpus" (or "node":
 *    null and "feedrate_error" when the feed-rate snapshot failed).  Strings are
 *    written with json_write_str() (src/json.h).
 *  - Who sees what: a report renders the rows of one user (or all), as its
 *    view says, filtered here from the snapshot, before any text is
 *    written; the node totals are the same for every viewer.
 *  - Prometheus: every family has HELP and TYPE; counters end in _total;
 *    label values escape backslash, quote and newline.  Table rows with no
 *    Prometheus name are JSON only.  Peer rows are stagefs_peer_*_total
 *    families labelled peer="HOST:PORT".
 *  - Peer rows name nodes, never users: every viewer sees them.
 */
#ifndef STAGEFS_STATS_RENDER_H
#define STAGEFS_STATS_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "peer/peer.h"
#include "stats.h"

enum stats_mtype {
	STATS_COUNTER,		/* only grows (Prometheus: a counter, NAME_total) */
	STATS_GAUGE,		/* a level now */
	STATS_TEXT,		/* a string (JSON only) */
	STATS_INFO,		/* a string; Prometheus: NAME{label="text"} 1 */
};

/* One daemon-wide figure: a row of the report's table. */
struct stats_metric {
	const char *key;	/* member of .stagefs/stats */
	const char *prom;	/* Prometheus name; NULL: JSON only */
	enum stats_mtype type;
	const char *help;	/* Prometheus HELP text (rows with ->prom) */
	uint64_t value;		/* counters and gauges */
	double prom_scale;	/* Prometheus shows value * prom_scale (ms -> s); 0: value */
	const char *text;	/* STATS_TEXT, STATS_INFO: the string */
	const char *label;	/* STATS_INFO: the Prometheus label that holds it */
};

/*
 * Whose rows of the feed rate a rendering shows.  The node totals, the
 * daemon-wide table and the GPU rows (per device: they name no user, job
 * or process) are always shown; rows of users, jobs and processes only
 * with @all or when they are @uid's.  A zeroed view shows uid 0's rows:
 * forgetting to set it hides rows, it never shows another user's.
 */
struct stats_view {
	bool all;		/* every row: root, the operator's exporters */
	uint32_t uid;		/* otherwise: only this user's rows */
};

/* Everything a node reports, as of one moment.  The caller owns it all. */
struct stats_report {
	const struct stats_metric *metrics;	/* daemon-wide, in JSON order */
	size_t nmetrics;
	const struct stats_snap *feed;		/* feed rate; NULL: see feed_error */
	int feed_error;				/* -errno why there is no feed */
	struct stats_view view;			/* whose rows it shows */
	const struct peer_stat *peers;		/* the peer group's members; NULL: none */
	size_t npeers;
};

/*
 * Write @r as the JSON object of .stagefs/stats (braces included) to @f,
 * with the rows r->view lets it show.
 */
void stats_render_json(const struct stats_report *r, FILE *f);

/*
 * Write @r as the Prometheus text exposition to @f: the feed-rate families
 * (per user and job, per GPU, node-wide) where r->feed is set, then the
 * table's rows that have a Prometheus name (docs/feedrate.md lists them);
 * the per (user, job) families only with the rows r->view lets it show.
 */
void stats_render_prom(const struct stats_report *r, FILE *f);

#endif
