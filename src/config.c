/*
 * config: see config.h.  The table below is the only place a setting is
 * described.
 */
#include "config.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum opt_type {
	OPT_STR,
	OPT_SIZE,
	OPT_UINT,
	OPT_BOOL,
	OPT_DURATION,
	OPT_RATIO,
	OPT_LOGLEVEL,
	OPT_AUTO,	/* enum cfg_auto: auto, on/yes or off/no */
};

struct opt {
	const char *name;
	enum opt_type type;
	size_t off;
	const char *def;	/* default, in the syntax a user would write */
	double min, max;	/* inclusive limits for numbers; 0/0 = none */
	const char *help;
};

#define O(f) offsetof(struct sfs_config, f)

static const struct opt opts[] = {
	{ "cache_dir", OPT_STR, O(cache_dir), "/var/cache/stagefs", 0, 0,
	  "directory on local NVMe holding the chunk cache (created 0700)" },
	{ "cache_size", OPT_SIZE, O(cache_size), "0", 0, 0,
	  "most bytes of disk the cache may use (real blocks); 0 = limited by cache_free_ratio only" },
	{ "cache_free_ratio", OPT_RATIO, O(cache_free_ratio), "0.10", 0, 0.95,
	  "share of the cache filesystem always left free" },
	{ "chunk_size", OPT_SIZE, O(chunk_size), "4M", 4 * 1024, 64 * 1024 * 1024,
	  "cache fill unit for dir:// sources (power of two)" },
	{ "cache_sync", OPT_BOOL, O(cache_sync), "no", 0, 0,
	  "fdatasync chunk data before recording it in the index; no: after a power cut, chunks whose bytes were lost fail their first-read check and are refetched" },
	{ "fd_cache", OPT_UINT, O(fd_cache), "0", 0, 1048576,
	  "cache-file descriptors kept open (bounded: never one per inode); 0 = from RLIMIT_NOFILE (raised to its hard limit at start): all but an eighth + 1024, at most 65536" },
	{ "threads", OPT_UINT, O(threads), "0", 0, 256,
	  "most FUSE worker threads; 0 = from the CPUs this process may run on (4 each, 16 to 64)" },
	{ "entry_timeout", OPT_DURATION, O(entry_timeout_ms), "1h", 0, 0,
	  "kernel dentry cache lifetime (datasets are immutable)" },
	{ "attr_timeout", OPT_DURATION, O(attr_timeout_ms), "1h", 0, 0,
	  "kernel attribute cache lifetime" },
	{ "read_ahead_kb", OPT_UINT, O(read_ahead_kb), "4096", 0, 65536,
	  "bdi read_ahead_kb set on the mount (larger READ requests)" },
	{ "max_read_kb", OPT_UINT, O(max_read_kb), "1024", 4, 1024,
	  "largest READ request in KiB" },
	{ "splice", OPT_BOOL, O(splice), "no", 0, 0,
	  "reply to cache hits by splicing from the cache file instead of copying" },
	{ "passthrough", OPT_AUTO, O(passthrough), "auto", 0, 0,
	  "let the kernel read fully cached files itself (FUSE passthrough); auto = where the kernel and privileges allow" },
	{ "passthrough_min_size", OPT_SIZE, O(passthrough_min_size), "0", 0, 0,
	  "files up to this size stay on the daemon path even when fully cached (keep_cache there makes hot re-reads cost no READ)" },
	{ "no_open", OPT_AUTO, O(no_open), "auto", 0, 0,
	  "read files with no OPEN or RELEASE request (FUSE no-open mode); auto = on a single-dataset mount where passthrough is not active" },
	{ "uring", OPT_AUTO, O(uring), "auto", 0, 0,
	  "take FUSE requests through io_uring, one queue per CPU (Linux >= 6.14); auto = where the kernel parameter fuse.enable_uring is Y, on = set it" },
	{ "lookup_readahead_max", OPT_SIZE, O(lookup_readahead_max), "1M", 0, 0,
	  "a fully cached file of at most this size is read into the page cache when it is looked up, overlapping the disk read with the OPEN and READ that follow; 0 = never" },
	{ "allow_other", OPT_BOOL, O(allow_other), "yes", 0, 0,
	  "let users other than the mounter read (access rules still apply)" },
	{ "runtime_dir", OPT_STR, O(runtime_dir), "/run/stagefs", 0, 0,
	  "directory for the control sockets" },
	{ "ceph_conf", OPT_STR, O(ceph_conf), "", 0, 0,
	  "ceph.conf for rados:// sources (default $CEPH_CONF, then /etc/ceph/ceph.conf)" },
	{ "client_id", OPT_STR, O(client_id), "admin", 0, 0,
	  "cephx client id (client.ID)" },
	{ "keyring", OPT_STR, O(keyring), "", 0, 0,
	  "cephx keyring path (default: from ceph.conf)" },
	{ "rados_timeout", OPT_DURATION, O(rados_timeout_ms), "30s", 1000, 0,
	  "bound on any RADOS operation; a reader gets EIO after it" },
	{ "log_level", OPT_LOGLEVEL, O(log_level), "notice", 0, 0,
	  "error, warning, notice, info or debug" },
	{ "log_file", OPT_STR, O(log_file), "", 0, 0,
	  "append log lines to this file (default: stderr in the foreground, syslog in the background)" },
	{ "prefetch_inflight", OPT_UINT, O(prefetch_inflight), "32", 1, 1024,
	  "backend fetches in flight at once: background work starts only while readers' fetches leave room" },
	{ "prefetch_user_inflight", OPT_UINT, O(prefetch_user_inflight), "16", 1, 1024,
	  "background (readahead, hint, warmup) fetches in flight for one user" },
	{ "backend_max_rate", OPT_SIZE, O(backend_max_rate), "0", 0, 0,
	  "bytes per second of all backend fetches (readers borrow ahead); 0 = no cap" },
	{ "prefetch_weights", OPT_STR, O(prefetch_weights), "", 0, 0,
	  "fair-share weights of users' background fetches, UID:WEIGHT,... (others 1)" },
	{ "readahead_max", OPT_UINT, O(readahead_max), "8", 0, 1024,
	  "most chunks fetched ahead of a sequential reader; 0 = no readahead" },
	{ "hint_window", OPT_UINT, O(hint_window), "64", 1, 1048576,
	  "files prefetched ahead of a reader that announced its order" },
	{ "hint_window_bytes", OPT_SIZE, O(hint_window_bytes), "2G", 0, 0,
	  "bytes prefetched ahead of a reader that announced its order" },
	{ "prefetch_io_uring", OPT_BOOL, O(prefetch_io_uring), "yes", 0, 0,
	  "run every fetch on one I/O engine thread: librados aio or io_uring source reads, O_DIRECT io_uring cache writes; no = a thread per fetch" },
	{ "prefetch_buffers", OPT_SIZE, O(prefetch_buffers), "128M", 1024 * 1024, 1024.0 * 1024 * 1024,
	  "memory of the I/O engine's chunk buffers, registered with io_uring; recently filled chunks are served from it" },
	/* feed-rate metrics (fuse/metrics.c, docs/feedrate.md) */
	{ "metrics_port", OPT_UINT, O(metrics_port), "0", 0, 65535,
	  "serve Prometheus metrics at http://127.0.0.1:PORT/metrics; 0 = off" },
	{ "metrics_file", OPT_STR, O(metrics_file), "", 0, 0,
	  "rewrite this file (node_exporter textfile collector) with the metrics; empty = off" },
	{ "metrics_interval", OPT_DURATION, O(metrics_interval_ms), "5s", 1000, 3600000,
	  "how often metrics_file is rewritten" },
};

#undef O

struct section_handler {
	const char *prefix;
	config_section_fn fn;
	void *arg;
};

static struct section_handler handlers[8];
static size_t nhandlers;

void config_add_section(const char *prefix, config_section_fn fn, void *arg)
{
	for (size_t i = 0; i < nhandlers; i++) {
		if (!strcmp(handlers[i].prefix, prefix)) {
			handlers[i].fn = fn;
			handlers[i].arg = arg;
			return;
		}
	}
	if (nhandlers < ARRAY_SIZE(handlers))
		handlers[nhandlers++] = (struct section_handler){ prefix, fn, arg };
}

static const struct opt *opt_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (!strcmp(opts[i].name, name))
			return &opts[i];
	return NULL;
}

bool config_has(const char *name)
{
	return opt_find(name) != NULL;
}

static int errf(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int errf(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -1;
}

static int check_range(const struct opt *o, double v, char *err, size_t len)
{
	if (o->min == 0 && o->max == 0)
		return 0;
	if (v < o->min || (o->max > 0 && v > o->max))
		return errf(err, len, "%s: %g is out of range [%g, %g]",
			    o->name, v, o->min, o->max);
	return 0;
}

static int opt_apply(struct sfs_config *cfg, const struct opt *o,
		     const char *value, char *err, size_t len)
{
	void *p = (char *)cfg + o->off;
	uint64_t u;
	bool b;
	char *end;

	switch (o->type) {
	case OPT_STR: {
		char *s = strdup(value);

		if (!s)
			return errf(err, len, "out of memory");
		free(*(char **)p);
		*(char **)p = s;
		return 0;
	}
	case OPT_SIZE:
		if (parse_size(value, &u))
			return errf(err, len, "%s: '%s' is not a size (like 512K, 4M, 100G)",
				    o->name, value);
		if (check_range(o, (double)u, err, len))
			return -1;
		*(uint64_t *)p = u;
		return 0;
	case OPT_UINT:
		if (parse_uint(value, &u))
			return errf(err, len, "%s: '%s' is not a whole number",
				    o->name, value);
		if (check_range(o, (double)u, err, len))
			return -1;
		*(uint32_t *)p = (uint32_t)u;
		return 0;
	case OPT_BOOL:
		if (parse_bool(value, &b))
			return errf(err, len, "%s: '%s' is not yes or no", o->name, value);
		*(bool *)p = b;
		return 0;
	case OPT_DURATION:
		if (parse_duration_ms(value, &u))
			return errf(err, len, "%s: '%s' is not a duration (like 500ms, 30s, 1h)",
				    o->name, value);
		if (check_range(o, (double)u, err, len))
			return -1;
		*(uint64_t *)p = u;
		return 0;
	case OPT_RATIO: {
		double d;
		size_t n = strlen(value);

		errno = 0;
		d = strtod(value, &end);
		if (n && value[n - 1] == '%' && end == value + n - 1 && end != value)
			d /= 100, end++;
		if (errno || end == value || *end || !(d >= 0))	/* NaN too */
			return errf(err, len, "%s: '%s' is not a ratio (like 0.1 or 10%%)",
				    o->name, value);
		if (check_range(o, d, err, len))
			return -1;
		*(double *)p = d;
		return 0;
	}
	case OPT_LOGLEVEL: {
		int l = log_level_parse(value);

		if (l < 0)
			return errf(err, len, "%s: '%s' is not one of error, warning, notice, info, debug",
				    o->name, value);
		*(int *)p = l;
		return 0;
	}
	case OPT_AUTO:
		if (!strcasecmp(value, "auto")) {
			*(enum cfg_auto *)p = CFG_AUTO;
			return 0;
		}
		if (parse_bool(value, &b))
			return errf(err, len, "%s: '%s' is not auto, on or off", o->name, value);
		*(enum cfg_auto *)p = b ? CFG_ON : CFG_OFF;
		return 0;
	}
	return errf(err, len, "%s: unknown type", o->name);
}

void config_init(struct sfs_config *cfg)
{
	char err[256];

	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		if (opt_apply(cfg, &opts[i], opts[i].def, err, sizeof(err))) {
			/* a bad default is a programming error */
			log_err("config default: %s", err);
			abort();
		}
	}
}

void config_release(struct sfs_config *cfg)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		if (opts[i].type == OPT_STR) {
			char **p = (char **)((char *)cfg + opts[i].off);

			free(*p);
			*p = NULL;
		}
	}
}

int config_set(struct sfs_config *cfg, const char *name, const char *value,
	       char *err, size_t errlen)
{
	const struct opt *o = opt_find(name);

	if (!o)
		return errf(err, errlen, "unknown setting '%s'", name);
	return opt_apply(cfg, o, value, err, errlen);
}

struct parse_ctx {
	struct sfs_config *cfg;
	char msg[512];
	bool failed;
};

static int config_ini_line(void *user, const char *section, const char *name,
		       const char *value)
{
	struct parse_ctx *ctx = user;
	int rc = -1;

	if (ctx->failed)
		return 0;
	if (!section[0] || !strcmp(section, "stagefs")) {
		rc = config_set(ctx->cfg, name, value, ctx->msg, sizeof(ctx->msg));
	} else {
		for (size_t i = 0; i < nhandlers; i++) {
			size_t pl = strlen(handlers[i].prefix);

			if (strncmp(section, handlers[i].prefix, pl))
				continue;
			rc = handlers[i].fn(handlers[i].arg, section, name, value,
					    ctx->msg, sizeof(ctx->msg));
			goto out;
		}
		snprintf(ctx->msg, sizeof(ctx->msg), "unknown section [%s]", section);
	}
out:
	if (rc) {
		ctx->failed = true;
		return 0;
	}
	return 1;
}

int config_load(struct sfs_config *cfg, const char *path, char *err, size_t errlen)
{
	struct parse_ctx ctx = { .cfg = cfg };
	int line = ini_parse(path, config_ini_line, &ctx);

	if (line == -1)
		return errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
	if (line == -2)
		return errf(err, errlen, "%s: out of memory", path);
	if (line > 0) {
		if (!ctx.failed)
			snprintf(ctx.msg, sizeof(ctx.msg),
				 "syntax error (expected 'name = value' or '[section]')");
		return errf(err, errlen, "%s:%d: %s", path, line, ctx.msg);
	}
	return 0;
}

int config_validate(const struct sfs_config *cfg, char *err, size_t errlen)
{
	if (cfg->chunk_size & (cfg->chunk_size - 1))
		return errf(err, errlen, "chunk_size must be a power of two");
	if (!cfg->cache_dir[0] || cfg->cache_dir[0] != '/')
		return errf(err, errlen, "cache_dir must be an absolute path");
	if (cfg->fd_cache && cfg->fd_cache < 16)
		return errf(err, errlen, "fd_cache must be 0 (auto) or at least 16");
	if (cfg->passthrough == CFG_ON && cfg->no_open == CFG_ON)
		return errf(err, errlen, "passthrough=on and no_open=on exclude each other "
			    "(passthrough is set up at OPEN)");
	return 0;
}

static const char *type_hint(enum opt_type t)
{
	switch (t) {
	case OPT_STR: return "STR";
	case OPT_SIZE: return "SIZE";
	case OPT_UINT: return "N";
	case OPT_BOOL: return "BOOL";
	case OPT_DURATION: return "TIME";
	case OPT_RATIO: return "RATIO";
	case OPT_LOGLEVEL: return "LEVEL";
	case OPT_AUTO: return "auto|on|off";
	}
	return "?";
}

void config_print_help(FILE *f)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		char left[64];

		snprintf(left, sizeof(left), "%s=%s", opts[i].name,
			 type_hint(opts[i].type));
		fprintf(f, "    -o %-24s %s (default: %s)\n", left, opts[i].help,
			opts[i].def[0] ? opts[i].def : "none");
	}
}

void config_print_example(FILE *f)
{
	fprintf(f, "# stagefs configuration (INI).  Generated from the option table:\n"
		   "# `stagefs --print-config` writes this file.  Every setting can also\n"
		   "# be given on the command line as -o name=value, which wins.\n\n"
		   "[stagefs]\n");
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		fprintf(f, "# %s (%s)\n", opts[i].help, type_hint(opts[i].type));
		fprintf(f, "#%s = %s\n\n", opts[i].name, opts[i].def);
	}
}
