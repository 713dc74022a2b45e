/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vfiles: see vfiles.h.
 *
 * .stagefs/stats and .stagefs/metrics render one report (struct
 * stats_report, src/stats/stats_render.h), taken once per rendering by
 * report_render(): the feed-rate snapshot (src/stats/stats.h) and the table of
 * daemon-wide figures below, gathered from the node totals of that
 * snapshot (the daemon has no other counters of READs, opens and backend
 * fetches), the cache (cache_get_stats), the prefetcher (pf_get_stats) and
 * the state of passthrough, no-open mode and FUSE over io_uring.  Each row names its
 * JSON key once and, where an operator may alert on it, its Prometheus
 * metric; the table's order is the order of the keys in .stagefs/stats.
 *
 * The reader's view (vfiles.h, "who sees what") is decided here, once per
 * rendering, from the caller's credential: the renderer gets it as the
 * report's struct stats_view and leaves out other users' rows itself; the
 * "source" row is blanked unless the caller may read that dataset.
 */
#include "vfiles.h"

#include "access.h"
#include "cred.h"
#include "fuse/ctl/ctlsock.h"
#include "kinodes.h"
#include "manifest/manifest.h"
#include "noopen.h"
#include "passthrough.h"
#include "peer/peer.h"
#include "ptacct.h"
#include "stats/stats.h"
#include "stats/stats_render.h"
#include "uring.h"
#include "version.h"
#include "prefetch/prefetch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Rows of the table: JSON only, a counter, a gauge, a string. */
#define JSON_ONLY(k, v)		{ .key = (k), .value = (v) }
#define COUNTER(k, p, h, v)	{ .key = (k), .prom = (p), .type = STATS_COUNTER, .help = (h), .value = (v) }
#define GAUGE(k, p, h, v)	{ .key = (k), .prom = (p), .type = STATS_GAUGE, .help = (h), .value = (v) }
#define TEXT(k, s)		{ .key = (k), .type = STATS_TEXT, .text = (s) }
#define INFO(k, p, l, h, s)	{ .key = (k), .prom = (p), .type = STATS_INFO, .label = (l), .help = (h), .text = (s) }

/*
 * @a - @b, or 0: for a part of a node total counted apart (the client
 * library's bytes and opens), since the two are separate relaxed adds that
 * a snapshot may see one of.
 */
static uint64_t minus(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* What caller @cr (NULL: the operator) may see of the report's rows. */
static struct stats_view view_of(const struct cred *cr)
{
	if (!cr || cr->uid == 0)
		return (struct stats_view){ .all = true };
	return (struct stats_view){ .uid = cr->uid };
}

/*
 * Take the node's report now and render it with @render, as caller @cr
 * (NULL: the operator) may see it, into a malloc'ed buffer (*@out, the
 * caller frees).  Without a feed-rate snapshot the JSON says why
 * ("feedrate_error"); with @need_feed it is an error instead.  Returns the
 * length or -errno.
 */
static int report_render(struct sfs *fs, const struct cred *cr,
			 void (*render)(const struct stats_report *, FILE *),
			 bool need_feed, char **out)
{
	struct sfs_dataset *ds0 = atomic_load(&fs->nds) ? fs->ds[0] : NULL;
	struct stats_view view = view_of(cr);
	/* a dataset's source is shown only to who may read the dataset */
	bool show_source = ds0 && (view.all || access_may_read(fs, cr, ds0));
	struct stats_snap *feed = NULL;
	uint64_t tot[STATS_NFIELDS], nod[STATS_NODE_NFIELDS];
	struct stats_report rep;
	struct cache_stats cs;
	struct pf_stats ps;
	struct peer_stat *peers = NULL;
	size_t npeers = 0;
	struct {
		uint64_t bytes_in, hits, failures, corrupt, fallbacks;
		uint64_t bytes_out, served, refused, member, backoff;
	} psum = { 0 };
	uint64_t mfetched = 0;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int ret;

	for (size_t i = 0; i < atomic_load(&fs->nds); i++)
		if (fs->ds[i]->be->m)
			mfetched += manifest_fetched_bytes(fs->ds[i]->be->m);
	ret = fs->stats ? stats_snapshot(fs->stats, &feed) : -ENODEV;
	if (ret && need_feed)
		return ret;
	if (feed) {
		memcpy(tot, feed->node.total, sizeof(tot));
		memcpy(nod, feed->node_only, sizeof(nod));
	} else {
		stats_node_totals(fs->stats, tot, nod);
	}
	cache_get_stats(fs->cache, &cs);
	pf_get_stats(fs->pf, &ps);
	if (fs->peers && !peer_group_stats(fs->peers, &peers, &npeers)) {
		for (size_t i = 0; i < npeers; i++) {
			psum.bytes_in += peers[i].bytes_in;
			psum.hits += peers[i].hits;
			psum.failures += peers[i].failures;
			psum.corrupt += peers[i].corrupt;
			psum.fallbacks += peers[i].fallbacks;
			psum.bytes_out += peers[i].bytes_out;
			psum.served += peers[i].served;
			psum.refused += peers[i].refused;
			psum.member += peers[i].member && !peers[i].self;
			psum.backoff += peers[i].member && peers[i].backoff;
		}
	}

	const struct stats_metric m[] = {
		/* the background fetches and the I/O engine (prefetch/prefetch.h) */
		JSON_ONLY("readahead_fetches", ps.readahead_fetches),
		JSON_ONLY("hint_fetches", ps.hint_fetches),
		JSON_ONLY("warmup_fetches", ps.warmup_fetches),
		JSON_ONLY("stage_fetches", ps.stage_fetches),
		JSON_ONLY("demand_fetches", ps.demand_fetches),
		COUNTER("prefetch_errors", "stagefs_prefetch_errors_total",
			"Background fetches (readahead, hints, warmup, staging) that failed.", ps.fetch_errors),
		COUNTER("prefetch_cancelled", "stagefs_prefetch_cancelled_total",
			"Background fetch requests dropped before they started.", ps.cancelled),
		GAUGE("prefetch_queued", "stagefs_prefetch_queued",
		      "Background fetch requests waiting in the queue now.", ps.queued),
		GAUGE("prefetch_inflight", "stagefs_prefetch_inflight",
		      "Background fetches in flight now.", ps.inflight),
		GAUGE("demand_inflight", "stagefs_demand_inflight",
		      "Fetches for waiting readers in flight now.", ps.demand_inflight),
		{ .key = "backend_throttle_ms", .prom = "stagefs_backend_throttle_seconds_total",
		  .type = STATS_COUNTER, .value = ps.throttle_ms, .prom_scale = 1e-3,
		  .help = "Time fetches waited for the backend_max_rate cap." },
		JSON_ONLY("hint_sessions", ps.hint_sessions),
		JSON_ONLY("warmup_jobs", ps.warmup_jobs),
		JSON_ONLY("uring_ops", ps.uring_ops),
		JSON_ONLY("uring_direct_ops", ps.uring_direct),
		JSON_ONLY("uring_fixed_ops", ps.uring_fixed),
		JSON_ONLY("uring_submits", ps.uring_submits),
		JSON_ONLY("engine_fills", ps.engine_fills),
		JSON_ONLY("engine_wakeups", ps.engine_wakeups),
		GAUGE("background_cap", "stagefs_background_cap",
		      "Background fetches allowed in flight now (lowered while readers' fetches are slow).",
		      ps.background_cap),
		COUNTER("background_cuts", "stagefs_background_cuts_total",
			"Times a slow demand fetch halved the background fetches allowed in flight.",
			ps.background_cuts),
		COUNTER("pack_reads", "stagefs_pack_reads_total",
			"Reads of whole packs into their cache entries.", ps.pack_reads),
		COUNTER("pack_bytes", "stagefs_pack_read_bytes_total",
			"Bytes those pack reads read.", ps.pack_bytes),
		COUNTER("pack_files", "stagefs_pack_files_total",
			"Small files pack reads brought in, each checked.", ps.pack_files),
		JSON_ONLY("engine_inflight", ps.engine_inflight),
		JSON_ONLY("engine_max_inflight", ps.engine_max_inflight),
		JSON_ONLY("engine_buffer_bytes", ps.engine_buffer_bytes),
		JSON_ONLY("engine_registered", ps.engine_registered),
		JSON_ONLY("buffer_hits", ps.buffer_hits),
		JSON_ONLY("async_reads", ps.async_reads),
		GAUGE("epoch_stagings_active", "stagefs_epoch_stagings_active",
		      "Datasets being staged now because a user reads them as an epoch.",
		      ps.stage_active),
		JSON_ONLY("epoch_stagings_started", ps.stage_started),
		JSON_ONLY("epoch_stagings_complete", ps.stage_complete),
		JSON_ONLY("epoch_stagings_stopped", ps.stage_stopped),
		JSON_ONLY("epoch_stagings_declined", ps.stage_declined),
		JSON_ONLY("epoch_staged_files", ps.staged_files),
		COUNTER("epoch_staged_bytes", "stagefs_epoch_staged_bytes_total",
			"Bytes staged because a user read a dataset as an epoch.", ps.staged_bytes),

		/* the daemon */
		TEXT("version", STAGEFS_VERSION),
		TEXT("source", show_source ? ds0->be->uri : ""),
		JSON_ONLY("uptime_s", (now_ms() - fs->start_ms) / 1000),
		GAUGE("daemon_generation", "stagefs_daemon_generation",
		      "1 for the daemon that mounted, +1 at each takeover (docs/restart.md).",
		      fs->generation),
		COUNTER("daemon_restarts", "stagefs_daemon_restarts_total",
			"Daemons that took the mount over after a crash or a planned restart; "
			"carried across restarts.", fs->generation - 1),
		{ .key = "takeover_pause_ms", .prom = "stagefs_takeover_pause_seconds",
		  .type = STATS_GAUGE, .value = fs->takeover_pause_ms, .prom_scale = 1e-3,
		  .help = "The last takeover: from the daemon before's end to this one serving." },
		/* 0 once the supervisor is gone (our parent is then a reaper) */
		JSON_ONLY("supervisor_pid", fs->supervisor_pid && getppid() == fs->supervisor_pid ?
			  (uint64_t)fs->supervisor_pid : 0),
		JSON_ONLY("chunk_size", ds0 ? ds0->be->chunk_size : 0),

		/* the FUSE requests and the kernel paths around them */
		JSON_ONLY("read_requests", tot[STATS_READS]),
		JSON_ONLY("read_bytes", minus(minus(tot[STATS_READ_BYTES], tot[STATS_CLIENT_BYTES]),
					      tot[STATS_PT_READ_BYTES])),
		COUNTER("read_errors", "stagefs_node_read_errors_total",
			"READ requests that failed, node-wide (stagefs_read_errors_total is per job).",
			tot[STATS_READ_ERRORS]),
		/*
		 * what clients reported themselves (fuse/ctl/handover.c): bounded,
		 * not seen; refused reports are in neither
		 */
		COUNTER("client_reported_bytes", "stagefs_client_reported_bytes_total",
			"Of the bytes delivered to readers, those the client library reported "
			"itself (CLIENT_READ, accepted): no READ saw them.",
			tot[STATS_CLIENT_BYTES]),
		COUNTER("client_reported_gpu_bytes", "stagefs_client_reported_gpu_bytes_total",
			"Bytes the client library reported copied to GPUs (GPU_BYTES, accepted): "
			"all of the GPU rows are self-reported.", tot[STATS_GPU_BYTES]),
		JSON_ONLY("opens", minus(tot[STATS_OPENS], nod[STATS_NODE_CLIENT_OPENS])),
		JSON_ONLY("open_requests", nod[STATS_NODE_OPEN_REQUESTS]),
		GAUGE("passthrough_active", "stagefs_passthrough_active",
		      "1 while opens may be served by FUSE passthrough.",
		      (uint64_t)passthrough_active(fs->pt)),
		GAUGE("no_open", "stagefs_no_open_active",
		      "1 while the kernel sends no OPEN (no-open mode).",
		      (uint64_t)noopen_active(fs->no)),
		INFO("passthrough_accounting", "stagefs_passthrough_accounting_info", "mode",
		     "How reads through passthrough opens are counted: bpf (exactly), estimate "
		     "(the file size at open) or off (passthrough is not active).",
		     ptacct_mode(fs)),
		TEXT("passthrough_bpf_hook", ptacct_hook(ptacct_of(fs))),
		JSON_ONLY("passthrough_bpf_lost", ptacct_lost(ptacct_of(fs))),
		JSON_ONLY("passthrough_opens", tot[STATS_PT_OPENS]),
		JSON_ONLY("passthrough_bytes_estimate", tot[STATS_PT_BYTES]),
		JSON_ONLY("passthrough_reused", nod[STATS_NODE_PT_REUSED]),
		JSON_ONLY("passthrough_idle_ids", passthrough_idle_ids(fs->pt)),
		JSON_ONLY("lookup_readaheads", nod[STATS_NODE_LOOKUP_READAHEADS]),
		JSON_ONLY("read_pushes", nod[STATS_NODE_READ_PUSHES]),
		JSON_ONLY("read_push_kept", nod[STATS_NODE_PUSH_KEPT]),
		JSON_ONLY("pack_pushes", nod[STATS_NODE_PACK_PUSHES]),
		JSON_ONLY("kernel_inodes", kinodes_count(fs->ki)),
		JSON_ONLY("kernel_prunes", kinodes_pruned(fs->ki)),
		GAUGE("fuse_uring_active", "stagefs_fuse_uring_active",
		      "1 while FUSE requests arrive over io_uring.", (uint64_t)uring_active(fs->ur)),
		JSON_ONLY("fuse_uring_requests", uring_requests(fs->ur)),
		GAUGE("fuse_uring_entries", "stagefs_fuse_uring_entries",
		      "FUSE io_uring entries registered: the requests the daemon can hold at once.",
		      uring_entries(fs->ur)),
		COUNTER("fuse_uring_queue_full", "stagefs_fuse_uring_queue_full_total",
			"Times every io_uring entry of a CPU's queue held a request: the kernel "
			"then kept that CPU's next requests, and their wait is not in stall_ns.",
			uring_queue_full(fs->ur)),

		/* the node cache (src/cache/cache.h) and the backend fetches */
		JSON_ONLY("cache_hits", cs.hits),
		JSON_ONLY("cache_misses", cs.misses),
		COUNTER("corrupt_chunks", "stagefs_corrupt_chunks_total",
			"Cached chunks whose hash did not match (refetched).", cs.corrupt),
		COUNTER("cache_outside_changes", "stagefs_cache_outside_changes_total",
			"Cache files found changed outside stagefs (their chunks re-verified).",
			cs.outside_changes),
		COUNTER("bypass_reads", "stagefs_bypass_reads_total",
			"Reads served without caching (no cache space).", cs.bypass),
		COUNTER("evicted_chunks", "stagefs_evicted_chunks_total",
			"Chunks evicted from the node cache.", cs.evicted),
		COUNTER("backend_reads", "stagefs_backend_reads_total",
			"Chunk fetches from the backend that succeeded, for any reason.",
			tot[STATS_MISSES]),
		JSON_ONLY("backend_bytes", tot[STATS_BACKEND_BYTES]),
		COUNTER("backend_errors", "stagefs_backend_errors_total",
			"Chunk fetches from the backend that failed.",
			nod[STATS_NODE_BACKEND_ERRORS]),
		JSON_ONLY("stall_ms", tot[STATS_STALL_NS] / 1000000),
		JSON_ONLY("manifest_fetched_bytes", mfetched),
		GAUGE("cache_used_bytes", "stagefs_cache_used_bytes",
		      "Disk bytes held by cached chunks.", cs.used_bytes),
		GAUGE("cache_limit_bytes", "stagefs_cache_limit_bytes",
		      "Current cache capacity in bytes (0: unknown).",
		      cs.limit_bytes == UINT64_MAX ? 0 : cs.limit_bytes),
		GAUGE("cache_chunks", "stagefs_cache_chunks",
		      "Chunks present in the node cache.", cs.chunks),
		GAUGE("cache_files", "stagefs_cache_files",
		      "Cache files known to the node cache.", cs.files),
		JSON_ONLY("cache_loaded_chunks", cs.loaded_chunks),
		JSON_ONLY("cache_load_ms", cs.load_ms),

		/* the peer group (src/peer/peer.h, fuse/peerd.h): sums over the peers */
		GAUGE("peer_members", "stagefs_peer_members",
		      "Other members of the node's peer group.", psum.member),
		GAUGE("peer_backoff", "stagefs_peer_backoff",
		      "Members skipped now after failing (their chunks come from the backend).",
		      psum.backoff),
		COUNTER("peer_bytes_in", "stagefs_peer_saved_bytes_total",
			"Chunk bytes peers sent this node, verified: backend bytes saved.",
			psum.bytes_in),
		JSON_ONLY("peer_hits", psum.hits),
		JSON_ONLY("peer_failures", psum.failures),
		JSON_ONLY("peer_corrupt", psum.corrupt),
		JSON_ONLY("peer_fallbacks", psum.fallbacks),
		JSON_ONLY("peer_bytes_out", psum.bytes_out),
		JSON_ONLY("peer_served", psum.served),
		JSON_ONLY("peer_refused", psum.refused),
	};

	rep = (struct stats_report){
		.metrics = m,
		.nmetrics = ARRAY_SIZE(m),
		.feed = feed,
		.feed_error = ret,
		.view = view,
		.peers = peers,
		.npeers = npeers,
	};
	f = open_memstream(&buf, &len);
	if (!f) {
		ret = -ENOMEM;
		goto out_free_feed;
	}
	render(&rep, f);
	if (fclose(f)) {
		free(buf);
		ret = -ENOMEM;
		goto out_free_feed;
	}
	*out = buf;
	ret = (int)len;
out_free_feed:
	stats_snap_free(feed);
	free(peers);
	return ret;
}

static int vfiles_stats_json(struct sfs *fs, const struct cred *cr, char **out)
{
	return report_render(fs, cr, stats_render_json, false, out);
}

int vfiles_metrics_text(struct sfs *fs, const struct cred *cr, char **out)
{
	return report_render(fs, cr, stats_render_prom, true, out);
}

/* .stagefs/socket: the same path for everyone. */
static int socket_text(struct sfs *fs, const struct cred *cr, char **out)
{
	(void)cr;
	return ctlsock_text(fs, out);
}

const struct vfiles_file vfiles_table[] = {
	{ "stats", vfiles_stats_json },
	{ "quota", access_quota_text },
	{ "metrics", vfiles_metrics_text },	/* Prometheus text format */
	{ "socket", socket_text },	/* the control socket's path */
};

const size_t vfiles_count = ARRAY_SIZE(vfiles_table);

_Static_assert(ARRAY_SIZE(vfiles_table) <= SFS_CTL_FILE_MAX,
	       "each file's index fits in its inode number (fuse/fs.h)");
