/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config: the daemon's settings as one table.
 *
 * Every setting has one row in the table in config.c: name, type, offset in
 * struct sfs_config, default, limits and help.  The INI parser (libinih), the
 * `-o name=value` command-line overrides, `--help`, the shipped
 * conf/stagefs.conf.example and the settings reference in
 * docs/configuration.md are all driven by that table, so they cannot
 * disagree (tests/integration/gendocs.sh fails when a committed copy is
 * stale).  Errors name the file and line ("stagefs.conf:12: ...").
 *
 * Settings live in the [stagefs] section.  Other sections ([quota],
 * [dataset NAME]) are handed to section handlers registered by the modules
 * that own them.
 */
#ifndef STAGEFS_CONFIG_H
#define STAGEFS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A setting that is on, off, or decided at run time (OPT_AUTO). */
enum cfg_auto {
	CFG_OFF,
	CFG_ON,
	CFG_AUTO,
};

/* passthrough_accounting: how reads through passthrough opens are counted. */
enum cfg_ptacct {
	CFG_PTACCT_AUTO,	/* bpf where it loads, else estimate */
	CFG_PTACCT_BPF,		/* exactly (fuse/ptacct.c); the mount fails without */
	CFG_PTACCT_ESTIMATE,	/* the file size at open */
};

struct sfs_config {
	/* cache */
	char *cache_dir;
	uint64_t cache_size;		/* bytes; 0 = bounded only by cache_free_ratio */
	double cache_free_ratio;	/* share of the cache filesystem kept free */
	uint64_t chunk_size;		/* bytes, power of two */
	bool cache_sync;		/* fdatasync chunk data before recording it */
	uint32_t fd_cache;		/* cache-file descriptors kept open; 0 = auto */
	/* fuse */
	uint32_t threads;		/* max FUSE worker threads; 0 = from nproc */
	uint64_t entry_timeout_ms;
	uint64_t attr_timeout_ms;
	uint32_t read_ahead_kb;		/* bdi read_ahead_kb set after mounting */
	uint32_t max_read_kb;		/* largest READ request */
	bool splice;			/* reply to cache hits with splice */
	enum cfg_auto passthrough;	/* FUSE passthrough for fully cached files */
	uint64_t passthrough_min_size;	/* files up to this size stay on the daemon path */
	int passthrough_accounting;	/* enum cfg_ptacct */
	uint64_t stall_idle_gap_ms;	/* a longer gap between a reader's events is idle */
	enum cfg_auto no_open;		/* FUSE no-open mode (fuse/noopen.h) */
	enum cfg_auto supervise;	/* a supervisor keeps the mount (fuse/supervisor.h) */
	enum cfg_auto uring;		/* FUSE over io_uring (fuse/uring.h) */
	unsigned uring_queue_depth;	/* ring entries (threads) per queue; 0 = auto */
	uint64_t lookup_readahead_max;	/* cached files up to this size are read ahead at LOOKUP */
	bool xattrs;			/* serve user.stagefs.*; no: ENOSYS, the kernel stops asking */
	uint32_t dir_scan_threads;	/* dir:// scan threads; 0 = from the CPUs */
	bool dir_reuse_scan;		/* dir://: reuse the saved scan of an unchanged tree */
	bool dir_scan_background;	/* dir://: answer while the first scan runs */
	uint32_t kernel_inodes_max;	/* inodes the kernel keeps for the mount; 0 = unbounded */
	enum cfg_auto readdirplus;	/* READDIRPLUS: auto = the kernel's adaptive mode */
	uint32_t readdirplus_max;	/* entries per READDIRPLUS reply; 0 = as many as fit */
	bool allow_other;
	char *runtime_dir;
	uint32_t control_max_connections;	/* control-socket connections, all users */
	uint32_t control_user_connections;	/* ... of one uid other than root */
	uint64_t control_idle_timeout_ms;	/* idle connection closed after; 0 = never */
	uint64_t client_report_rate;		/* bytes/s one uid's CLIENT_READs (GPU_BYTES) may add */
	/* ceph */
	char *ceph_conf;
	char *client_id;
	char *keyring;
	uint64_t rados_timeout_ms;	/* osd/mon op timeout: bound on a reader's EIO */
	uint32_t cephfs_threads;	/* cephfs://: threads for libcephfs's calls */
	bool cephfs_direct_reads;	/* cephfs://: read the data pool's objects, past the client */
	char *s3_endpoint;		/* s3://: the endpoint URL ("": $AWS_ENDPOINT_URL..., AWS) */
	char *s3_region;
	char *s3_profile;
	char *s3_credentials_file;
	uint32_t s3_connections;	/* s3://: requests in flight */
	bool manifest_fill;		/* rados://: fetch a large manifest's untouched parts in the background */
	/* misc */
	int log_level;
	char *log_file;
	/* prefetch (prefetch/prefetch.h) */
	uint32_t prefetch_inflight;	/* demand + background fetches in flight */
	uint32_t prefetch_user_inflight;	/* background fetches of one uid */
	uint64_t backend_max_rate;	/* bytes/s of all backend fetches; 0 = no cap */
	char *prefetch_weights;		/* "UID:WEIGHT,..." fair-share weights */
	uint32_t readahead_max;		/* chunks read ahead of a sequential reader */
	uint32_t hint_window;		/* files prefetched ahead of a hinted reader */
	uint64_t hint_window_bytes;	/* bytes prefetched ahead of a hinted reader */
	enum cfg_auto epoch_staging;	/* stage a dataset read as an epoch ([dataset] may override) */
	uint32_t epoch_staging_files;	/* distinct files opened that make an epoch */
	uint64_t epoch_staging_idle_ms;	/* no open this long: its readers stopped */
	bool prefetch_io_uring;		/* every fetch through the I/O engine */
	bool pack_push;			/* a pack's files pushed as it arrives (fuse/packpush.h) */
	uint64_t prefetch_buffers;	/* the engine's buffer region, bytes */
	/* feed-rate metrics (fuse/metrics.c) */
	uint32_t metrics_port;		/* 127.0.0.1:PORT/metrics; 0 = off */
	char *metrics_file;		/* textfile-collector file; "" = off */
	uint64_t metrics_interval_ms;	/* how often metrics_file is rewritten */
	char *metrics_group;		/* metrics_file's group; "" = the daemon's */

	/* peer groups (src/peer/peer.h, fuse/peerd.h, docs/fleet.md) */
	char *peers;			/* "HOST:PORT, ..." the static group */
	char *peers_file;		/* one HOST:PORT a line, reread on SIGHUP */
	char *peer_listen;		/* this node's HOST:PORT; "" = no peers */
	char *peer_key_file;		/* the group's shared secret, root-only */
	uint64_t peer_timeout_ms;	/* a peer's answer, before the backend is asked */
	uint64_t peer_serve_max_mbps;	/* MB/s served to peers; 0 = no cap */
	bool peer_test_corrupt;		/* tests only: serve peers wrong bytes */
};

/* Where a setting came from, for error messages. */
struct config_origin {
	const char *file;	/* NULL for the command line */
	int line;
};

/*
 * A handler for a section other than [stagefs].  Returns 0, or -1 after
 * writing a message (without file:line, which the caller adds) into @err.
 */
typedef int (*config_section_fn)(void *arg, const char *section,
				 const char *name, const char *value,
				 char *err, size_t errlen);

/* Fill @cfg with the defaults.  Strings are heap copies: config_release(). */
void config_init(struct sfs_config *cfg);
void config_release(struct sfs_config *cfg);

/* Register a handler for sections whose name starts with @prefix. */
void config_add_section(const char *prefix, config_section_fn fn, void *arg);

/* The largest config file config_load() reads. */
#define CONFIG_MAX_BYTES	(1024 * 1024)

/*
 * Parse the INI file @path into @cfg.  Returns 0, or -1 with
 * "path:line: what is wrong" (or "path: what is wrong") in @err.
 *
 * Never fails open: a directory, a file that cannot be read, an empty file
 * (no [section] and no setting, comments aside), a line longer than inih's
 * buffer, a section name longer than inih's, and a section other than
 * [stagefs] given twice ("[dataset X] repeats the section of line N") are
 * all refused, at their own line.  On failure @cfg and the registered
 * section handlers' state may be partly filled: the caller throws them
 * away and keeps what it had (a reload keeps the old rules).
 */
int config_load(struct sfs_config *cfg, const char *path, char *err, size_t errlen);

/*
 * config_load() of @len bytes of INI text at @buf (need not be
 * NUL-terminated); @name stands for the file in messages.
 */
int config_load_buffer(struct sfs_config *cfg, const char *name, const char *buf,
		       size_t len, char *err, size_t errlen);

/* Apply one "name=value" (from -o).  Returns 0, or -1 with a message. */
int config_set(struct sfs_config *cfg, const char *name, const char *value,
	       char *err, size_t errlen);

/* True if @name is a setting in the table. */
bool config_has(const char *name);

/* Check cross-field rules after everything is applied. */
int config_validate(const struct sfs_config *cfg, char *err, size_t errlen);

/* Print the option list for --help (one line per setting). */
void config_print_help(FILE *f);
/* Print a complete commented example config (conf/stagefs.conf.example). */
void config_print_example(FILE *f);

/*
 * The markers around the generated part of docs/configuration.md: every
 * line from CONFIG_MD_BEGIN to CONFIG_MD_END is config_print_markdown()'s,
 * the rest of the page is hand-written (tools/dev/gendocs.sh splices it in).
 */
#define CONFIG_MD_BEGIN	"<!-- generated by `stagefs --print-config=markdown` from src/config.c: edit the table there, then run `make docs` -->"
#define CONFIG_MD_END	"<!-- end of generated settings -->"

/*
 * Print the settings reference in markdown, CONFIG_MD_BEGIN to CONFIG_MD_END
 * inclusive: one table per group of settings, one row per setting.
 */
void config_print_markdown(FILE *f);

/*
 * The same reference in scdoc(5), for the man pages stagefs(8) and
 * stagefs.conf(5) (man/NAME.scd, spliced in by tools/dev/gendocs.sh like the
 * markdown): CONFIG_SCD_BEGIN to CONFIG_SCD_END inclusive, one subsection
 * per group, one entry per setting.
 */
#define CONFIG_SCD_BEGIN	"; generated by `stagefs --print-config=scdoc` from src/config.c: edit the table there, then run `make docs`"
#define CONFIG_SCD_END	"; end of generated settings"
void config_print_scdoc(FILE *f);

#endif
