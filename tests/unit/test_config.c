/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config: defaults, config_set for every type and its limits,
 * config_load of good and bad INI files (errors as "PATH:LINE: ..."), the
 * generated example re-parsing to the defaults, section handlers,
 * config_validate and --help.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "config.h"
#include "util.h"

static char tmpdir[PATH_MAX];
static int nfile;

static int group_setup(void **state)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/test_config.XXXXXX",
		 base && *base ? base : "/tmp");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	char path[PATH_MAX + 32];

	for (int i = 0; i < nfile; i++) {
		snprintf(path, sizeof(path), "%s/%d.conf", tmpdir, i);
		unlink(path);
	}
	rmdir(tmpdir);
	return 0;
}

/* Write @text to a new file; returns its path (static buffer, per call). */
static const char *write_conf(const char *text)
{
	static char path[PATH_MAX + 32];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d.conf", tmpdir, nfile++);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

/* Expect config_load to fail with "PATH:LINE: " followed by @what somewhere. */
static void load_fails_at(const char *text, int line, const char *what)
{
	struct sfs_config cfg;
	char err[512], want[PATH_MAX + 64];
	const char *path = write_conf(text);

	config_init(&cfg);
	err[0] = '\0';
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:%d: ", path, line);
	if (strncmp(err, want, strlen(want)))
		fail_msg("error \"%s\" does not start with \"%s\"", err, want);
	if (what && !strstr(err, what))
		fail_msg("error \"%s\" does not mention \"%s\"", err, what);
	config_release(&cfg);
}

/* A section handler that accepts anything and counts its calls. */
static int count_section(void *arg, const char *section, const char *name,
			 const char *value, char *err, size_t errlen)
{
	(*(int *)arg)++;
	return 0;
}

/* ---- defaults ---- */

static void assert_defaults(const struct sfs_config *c)
{
	assert_string_equal(c->cache_dir, "/var/cache/stagefs");
	assert_int_equal(c->cache_size, 0);
	assert_true(c->cache_free_ratio > 0.0999 && c->cache_free_ratio < 0.1001);
	assert_int_equal(c->chunk_size, 4 * MiB);
	assert_false(c->cache_sync);	/* the first-read check catches lost writes */
	assert_int_equal(c->fd_cache, 0);	/* from RLIMIT_NOFILE at start */
	assert_int_equal(c->threads, 0);	/* from the CPU count at start */
	assert_int_equal(c->entry_timeout_ms, 3600000);
	assert_int_equal(c->attr_timeout_ms, 3600000);
	assert_int_equal(c->read_ahead_kb, 4096);
	assert_int_equal(c->max_read_kb, 1024);
	assert_true(c->splice);
	assert_int_equal(c->passthrough, CFG_AUTO);
	assert_true(c->allow_other);
	assert_string_equal(c->runtime_dir, "/run/stagefs");
	assert_string_equal(c->ceph_conf, "");
	assert_string_equal(c->client_id, "admin");
	assert_string_equal(c->keyring, "");
	assert_int_equal(c->rados_timeout_ms, 30000);
	assert_int_equal(c->log_level, LOG_NOTICE);
	assert_string_equal(c->log_file, "");
}

static void test_defaults(void **state)
{
	struct sfs_config cfg;
	char err[256];

	config_init(&cfg);
	assert_defaults(&cfg);
	assert_int_equal(config_validate(&cfg, err, sizeof(err)), 0);
	config_release(&cfg);
	assert_null(cfg.cache_dir);
	assert_null(cfg.log_file);
	config_release(&cfg);	/* twice is harmless */
}

/* ---- config_set ---- */

static void set_ok(struct sfs_config *cfg, const char *name, const char *value)
{
	char err[256] = "";

	if (config_set(cfg, name, value, err, sizeof(err)))
		fail_msg("config_set(%s, \"%s\") failed: %s", name, value, err);
}

/* A refused value leaves the setting as it was and names it in the error. */
static void set_bad(struct sfs_config *cfg, const char *name, const char *value)
{
	struct sfs_config before = *cfg;
	char err[256] = "";

	if (config_set(cfg, name, value, err, sizeof(err)) != -1)
		fail_msg("config_set(%s, \"%s\") accepted", name, value);
	if (!strstr(err, name))
		fail_msg("config_set(%s, \"%s\"): error \"%s\" does not name the setting",
			 name, value, err);
	/* strings are pointers: compare the numbers only */
	assert_int_equal(before.cache_size, cfg->cache_size);
	assert_int_equal(before.chunk_size, cfg->chunk_size);
	assert_int_equal(before.fd_cache, cfg->fd_cache);
	assert_int_equal(before.threads, cfg->threads);
	assert_int_equal(before.read_ahead_kb, cfg->read_ahead_kb);
	assert_int_equal(before.max_read_kb, cfg->max_read_kb);
	assert_int_equal(before.entry_timeout_ms, cfg->entry_timeout_ms);
	assert_int_equal(before.rados_timeout_ms, cfg->rados_timeout_ms);
	assert_int_equal(before.log_level, cfg->log_level);
	assert_int_equal(before.cache_sync, cfg->cache_sync);
	assert_true(before.cache_free_ratio == cfg->cache_free_ratio);
}

static void test_set_str(void **state)
{
	struct sfs_config cfg;

	config_init(&cfg);
	set_ok(&cfg, "cache_dir", "/nvme/cache");
	assert_string_equal(cfg.cache_dir, "/nvme/cache");
	set_ok(&cfg, "cache_dir", "/other");	/* the old copy is freed */
	assert_string_equal(cfg.cache_dir, "/other");
	set_ok(&cfg, "runtime_dir", "/run/x");
	set_ok(&cfg, "ceph_conf", "/etc/ceph/other.conf");
	set_ok(&cfg, "client_id", "stagefs");
	set_ok(&cfg, "keyring", "");
	set_ok(&cfg, "log_file", "/var/log/stagefs.log");
	assert_string_equal(cfg.runtime_dir, "/run/x");
	assert_string_equal(cfg.ceph_conf, "/etc/ceph/other.conf");
	assert_string_equal(cfg.client_id, "stagefs");
	assert_string_equal(cfg.keyring, "");
	assert_string_equal(cfg.log_file, "/var/log/stagefs.log");
	config_release(&cfg);
}

static void test_set_size(void **state)
{
	struct sfs_config cfg;

	config_init(&cfg);
	set_ok(&cfg, "cache_size", "100G");
	assert_int_equal(cfg.cache_size, 100 * GiB);
	set_ok(&cfg, "cache_size", "1.5T");
	assert_int_equal(cfg.cache_size, 1536 * GiB);
	set_ok(&cfg, "cache_size", "0");
	assert_int_equal(cfg.cache_size, 0);
	/* the docs' "at most 2^63 - 1", exactly (a double cannot hold it) */
	set_ok(&cfg, "cache_size", "9223372036854775807");
	assert_int_equal(cfg.cache_size, INT64_MAX);
	set_ok(&cfg, "cache_size", "8191P");
	assert_int_equal(cfg.cache_size, 8191ULL << 50);
	set_bad(&cfg, "cache_size", "9223372036854775808");
	set_bad(&cfg, "cache_size", "8192P");
	set_bad(&cfg, "cache_size", "18446744073709551616");
	set_bad(&cfg, "cache_size", "-1");
	set_bad(&cfg, "cache_size", "lots");
	set_bad(&cfg, "cache_size", "");

	/* chunk_size: [4K, 64M] */
	set_ok(&cfg, "chunk_size", "4K");
	assert_int_equal(cfg.chunk_size, 4 * KiB);
	set_ok(&cfg, "chunk_size", "64K");
	assert_int_equal(cfg.chunk_size, 64 * KiB);
	set_ok(&cfg, "chunk_size", "64M");
	assert_int_equal(cfg.chunk_size, 64 * MiB);
	set_ok(&cfg, "chunk_size", "1M");
	assert_int_equal(cfg.chunk_size, MiB);
	set_bad(&cfg, "chunk_size", "4095");
	set_bad(&cfg, "chunk_size", "1K");
	set_bad(&cfg, "chunk_size", "128M");
	set_bad(&cfg, "chunk_size", "0");
	set_bad(&cfg, "chunk_size", "4Q");
	assert_int_equal(cfg.chunk_size, MiB);
	config_release(&cfg);
}

static void test_set_uint(void **state)
{
	struct sfs_config cfg;

	config_init(&cfg);
	/* threads: [0, 256], 0 = from the CPU count */
	set_ok(&cfg, "threads", "0");
	assert_int_equal(cfg.threads, 0);
	set_ok(&cfg, "threads", "1");
	assert_int_equal(cfg.threads, 1);
	set_ok(&cfg, "threads", "256");
	assert_int_equal(cfg.threads, 256);
	set_bad(&cfg, "threads", "257");
	set_bad(&cfg, "threads", "-1");
	set_bad(&cfg, "threads", "1.5");
	set_bad(&cfg, "threads", "8x");
	set_bad(&cfg, "threads", "");
	set_bad(&cfg, "threads", "many");
	set_bad(&cfg, "threads", "4294967312");		/* 2^32 + 16: no wrap */
	set_bad(&cfg, "threads", "18446744073709551616");	/* 2^64 */
	assert_int_equal(cfg.threads, 256);

	/* fd_cache: [0, 1048576]; 1..15 are refused by config_validate */
	set_ok(&cfg, "fd_cache", "0");
	set_ok(&cfg, "fd_cache", "16");
	set_ok(&cfg, "fd_cache", "1048576");
	assert_int_equal(cfg.fd_cache, 1048576);
	set_bad(&cfg, "fd_cache", "1048577");
	set_bad(&cfg, "fd_cache", "-1");

	/* read_ahead_kb: [0, 65536] */
	set_ok(&cfg, "read_ahead_kb", "0");
	assert_int_equal(cfg.read_ahead_kb, 0);
	set_ok(&cfg, "read_ahead_kb", "65536");
	set_bad(&cfg, "read_ahead_kb", "65537");

	/* max_read_kb: [4, 1024] */
	set_ok(&cfg, "max_read_kb", "4");
	set_ok(&cfg, "max_read_kb", "1024");
	assert_int_equal(cfg.max_read_kb, 1024);
	set_bad(&cfg, "max_read_kb", "3");
	set_bad(&cfg, "max_read_kb", "1025");
	config_release(&cfg);
}

static void test_set_bool(void **state)
{
	struct sfs_config cfg;

	config_init(&cfg);
	set_ok(&cfg, "cache_sync", "no");
	assert_false(cfg.cache_sync);
	set_ok(&cfg, "cache_sync", "ON");
	assert_true(cfg.cache_sync);
	set_ok(&cfg, "splice", "off");
	assert_false(cfg.splice);
	set_ok(&cfg, "allow_other", "0");
	assert_false(cfg.allow_other);
	set_bad(&cfg, "splice", "maybe");
	set_bad(&cfg, "splice", "");
	set_bad(&cfg, "allow_other", "2");
	assert_false(cfg.splice);
	config_release(&cfg);
}

static void test_set_duration(void **state)
{
	struct sfs_config cfg;

	config_init(&cfg);
	set_ok(&cfg, "entry_timeout", "0");
	assert_int_equal(cfg.entry_timeout_ms, 0);
	set_ok(&cfg, "entry_timeout", "500ms");
	assert_int_equal(cfg.entry_timeout_ms, 500);
	set_ok(&cfg, "attr_timeout", "2m");
	assert_int_equal(cfg.attr_timeout_ms, 120000);
	set_bad(&cfg, "attr_timeout", "soon");
	set_bad(&cfg, "attr_timeout", "-1s");

	/* rados_timeout: at least 1 s, no upper bound */
	set_ok(&cfg, "rados_timeout", "1s");
	assert_int_equal(cfg.rados_timeout_ms, 1000);
	set_ok(&cfg, "rados_timeout", "1000ms");
	set_ok(&cfg, "rados_timeout", "24h");
	assert_int_equal(cfg.rados_timeout_ms, 24 * 3600000ULL);
	set_bad(&cfg, "rados_timeout", "999ms");
	set_bad(&cfg, "rados_timeout", "0");
	set_bad(&cfg, "rados_timeout", "0.5");
	assert_int_equal(cfg.rados_timeout_ms, 24 * 3600000ULL);
	config_release(&cfg);
}

static void test_set_ratio(void **state)
{
	struct sfs_config cfg;

	config_init(&cfg);
	set_ok(&cfg, "cache_free_ratio", "0.25");
	assert_true(cfg.cache_free_ratio == 0.25);
	set_ok(&cfg, "cache_free_ratio", "0");
	assert_true(cfg.cache_free_ratio == 0);
	set_ok(&cfg, "cache_free_ratio", "10%");
	assert_true(cfg.cache_free_ratio > 0.0999 && cfg.cache_free_ratio < 0.1001);
	set_ok(&cfg, "cache_free_ratio", "0.95");
	set_ok(&cfg, "cache_free_ratio", "95%");
	set_bad(&cfg, "cache_free_ratio", "0.96");
	set_bad(&cfg, "cache_free_ratio", "96%");
	set_bad(&cfg, "cache_free_ratio", "1");
	set_bad(&cfg, "cache_free_ratio", "-0.1");
	set_bad(&cfg, "cache_free_ratio", "-5%");
	set_bad(&cfg, "cache_free_ratio", "");
	set_bad(&cfg, "cache_free_ratio", "half");
	set_bad(&cfg, "cache_free_ratio", "0.1x");
	set_bad(&cfg, "cache_free_ratio", "10%%");
	set_bad(&cfg, "cache_free_ratio", "nan");
	config_release(&cfg);
}

/* A lone "%" is no ratio: it used to be read as 0 (no space kept free). */
static void test_set_ratio_lone_percent(void **state)
{
	struct sfs_config cfg;

	config_init(&cfg);
	set_bad(&cfg, "cache_free_ratio", "%");
	set_bad(&cfg, "cache_free_ratio", " %");
	config_release(&cfg);
}

static void test_set_loglevel(void **state)
{
	static const struct { const char *name; int level; } lv[] = {
		{ "error", LOG_ERR }, { "warning", LOG_WARNING },
		{ "notice", LOG_NOTICE }, { "info", LOG_INFO },
		{ "debug", LOG_DEBUG }, { "DEBUG", LOG_DEBUG },
	};
	struct sfs_config cfg;

	config_init(&cfg);
	for (size_t i = 0; i < ARRAY_SIZE(lv); i++) {
		set_ok(&cfg, "log_level", lv[i].name);
		assert_int_equal(cfg.log_level, lv[i].level);
	}
	set_bad(&cfg, "log_level", "verbose");
	set_bad(&cfg, "log_level", "7");
	set_bad(&cfg, "log_level", "");
	assert_int_equal(cfg.log_level, LOG_DEBUG);
	config_release(&cfg);
}

static void test_set_auto(void **state)
{
	struct sfs_config cfg;

	config_init(&cfg);
	set_ok(&cfg, "passthrough", "on");
	assert_int_equal(cfg.passthrough, CFG_ON);
	set_ok(&cfg, "passthrough", "off");
	assert_int_equal(cfg.passthrough, CFG_OFF);
	set_ok(&cfg, "passthrough", "AUTO");
	assert_int_equal(cfg.passthrough, CFG_AUTO);
	set_ok(&cfg, "passthrough", "yes");
	assert_int_equal(cfg.passthrough, CFG_ON);
	set_ok(&cfg, "passthrough", "0");
	assert_int_equal(cfg.passthrough, CFG_OFF);
	set_bad(&cfg, "passthrough", "sometimes");
	set_bad(&cfg, "passthrough", "");
	assert_int_equal(cfg.passthrough, CFG_OFF);
	config_release(&cfg);
}

static void test_set_unknown(void **state)
{
	struct sfs_config cfg;
	char err[256] = "";

	config_init(&cfg);
	assert_int_equal(config_set(&cfg, "cache_dirr", "/x", err, sizeof(err)), -1);
	assert_string_equal(err, "unknown setting 'cache_dirr'");
	assert_int_equal(config_set(&cfg, "", "1", err, sizeof(err)), -1);
	assert_int_equal(config_set(&cfg, "CACHE_DIR", "/x", err, sizeof(err)), -1);
	assert_string_equal(cfg.cache_dir, "/var/cache/stagefs");
	assert_true(config_has("cache_dir"));
	assert_true(config_has("rados_timeout"));
	assert_false(config_has("cache_dirr"));
	assert_false(config_has(""));
	/* a tiny error buffer is truncated, not overrun */
	char small[8];

	memset(small, 'x', sizeof(small));
	assert_int_equal(config_set(&cfg, "threads", "257", small, 4), -1);
	assert_int_equal(strlen(small), 3);
	assert_int_equal(small[4], 'x');
	config_release(&cfg);
}

/* ---- config_validate ---- */

static void test_validate(void **state)
{
	struct sfs_config cfg;
	char err[256];

	config_init(&cfg);
	set_ok(&cfg, "chunk_size", "96K");	/* in range, not a power of two */
	assert_int_equal(config_validate(&cfg, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "chunk_size"));
	set_ok(&cfg, "chunk_size", "128K");
	assert_int_equal(config_validate(&cfg, err, sizeof(err)), 0);
	set_ok(&cfg, "cache_dir", "relative/dir");
	assert_int_equal(config_validate(&cfg, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "cache_dir"));
	set_ok(&cfg, "cache_dir", "");
	assert_int_equal(config_validate(&cfg, err, sizeof(err)), -1);
	set_ok(&cfg, "cache_dir", "/var/cache/stagefs");
	set_ok(&cfg, "fd_cache", "15");
	assert_int_equal(config_validate(&cfg, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "fd_cache"));
	set_ok(&cfg, "fd_cache", "0");
	assert_int_equal(config_validate(&cfg, err, sizeof(err)), 0);
	config_release(&cfg);
}

/* config_set(@name, @value) is refused with exactly @want as its message. */
static void set_bad_says(const char *name, const char *value, const char *want)
{
	struct sfs_config cfg;
	char err[256] = "";

	config_init(&cfg);
	assert_int_equal(config_set(&cfg, name, value, err, sizeof(err)), -1);
	if (strcmp(err, want))
		fail_msg("config_set(%s, \"%s\"): \"%s\", want \"%s\"", name, value, err, want);
	config_release(&cfg);
}

/* Range errors print integers as a user writes them, never 4.29497e+09. */
static void test_range_messages(void **state)
{
	set_bad_says("threads", "4294967296", "threads: 4294967296 is out of range [0, 256]");
	set_bad_says("fd_cache", "99999999999", "fd_cache: 99999999999 is out of range [0, 1048576]");
	set_bad_says("chunk_size", "1K", "chunk_size: 1024 is out of range [4K, 64M]");
	set_bad_says("chunk_size", "1T", "chunk_size: 1099511627776 is out of range [4K, 64M]");
	set_bad_says("prefetch_buffers", "2G",
		     "prefetch_buffers: 2147483648 is out of range [1M, 1G]");
	set_bad_says("rados_timeout", "500ms", "rados_timeout: 500ms is out of range (at least 1s)");
	set_bad_says("metrics_interval", "2h", "metrics_interval: 2h is out of range [1s, 1h]");
	set_bad_says("cache_size", "9223372036854775808",
		     "cache_size: '9223372036854775808' is out of range "
		     "(at most 9223372036854775807 bytes, 2^63 - 1)");
}

/* ---- config_load ---- */

static void test_load_good(void **state)
{
	struct sfs_config cfg;
	char err[512] = "";
	const char *path = write_conf(
		"# a comment\n"
		"; another comment\n"
		"cache_size = 1G        ; keys before any section are [stagefs]'s\n"
		"\n"
		"[stagefs]\n"
		"cache_dir=/nvme/stagefs\n"
		"chunk_size   =   1M   \n"
		"threads = 32\n"
		"cache_free_ratio = 5%\n"
		"cache_sync = on\n"
		"entry_timeout = 10s\n"
		"log_level = debug\n"
		"client_id = reader ; inline comments need a ';' after a blank\n"
		"\n"
		"[stagefs]\n"
		"threads = 8\n");	/* repeated: the later one wins */

	config_init(&cfg);
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), 0);
	assert_int_equal(cfg.cache_size, GiB);
	assert_string_equal(cfg.cache_dir, "/nvme/stagefs");
	assert_int_equal(cfg.chunk_size, MiB);
	assert_int_equal(cfg.threads, 8);
	assert_true(cfg.cache_free_ratio > 0.0499 && cfg.cache_free_ratio < 0.0501);
	assert_true(cfg.cache_sync);
	assert_int_equal(cfg.entry_timeout_ms, 10000);
	assert_int_equal(cfg.log_level, LOG_DEBUG);
	assert_string_equal(cfg.client_id, "reader");
	/* untouched settings keep their defaults */
	assert_int_equal(cfg.fd_cache, 0);
	assert_string_equal(cfg.runtime_dir, "/run/stagefs");

	/* -o overrides applied after the file win */
	set_ok(&cfg, "threads", "4");
	assert_int_equal(cfg.threads, 4);
	config_release(&cfg);

	/* a file with only [stagefs] in it is fine: it says "the defaults" */
	config_init(&cfg);
	assert_int_equal(config_load(&cfg, write_conf("# nothing set\n[stagefs]\n"),
				     err, sizeof(err)), 0);
	assert_defaults(&cfg);
	config_release(&cfg);
}

/*
 * Expect config_load(@path) to be refused with "@path: " and @what: no
 * line number, since the file as a whole is what is wrong.  @cfg untouched.
 */
static void load_refused(const char *path, const char *what)
{
	struct sfs_config cfg;
	char err[512] = "", want[PATH_MAX + 64];

	config_init(&cfg);
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: ", path);
	if (strncmp(err, want, strlen(want)))
		fail_msg("error \"%s\" does not start with \"%s\"", err, want);
	if (!strstr(err, what))
		fail_msg("error \"%s\" does not mention \"%s\"", err, what);
	assert_defaults(&cfg);
	config_release(&cfg);
}

/*
 * What is not a config file is refused, never read as "no settings": a
 * reload of an emptied file must not drop the access rules (issue 17).
 */
static void test_load_not_a_config(void **state)
{
	char dir[PATH_MAX + 32];

	/* -c DIRECTORY: the INI reader used to read it as an empty file */
	snprintf(dir, sizeof(dir), "%s/a-directory.conf", tmpdir);
	assert_int_equal(mkdir(dir, 0700), 0);
	load_refused(dir, "is a directory");
	rmdir(dir);

	/* empty, blank, comments only */
	load_refused(write_conf(""), "empty");
	load_refused(write_conf("\n   \n\t\n"), "empty");
	load_refused(write_conf("# [dataset a]\n; allow = uid:1\n"), "empty");

	/* opened but unreadable (EIO at offset 0) */
	load_refused("/proc/self/mem", "cannot read");
}

/* A section other than [stagefs] given twice is an error naming both lines. */
static void test_load_duplicate_sections(void **state)
{
	static int calls;	/* the handlers stay registered after the test */

	config_add_section("dataset", count_section, &calls);
	config_add_section("quota", count_section, &calls);
	load_fails_at("[dataset a]\nsource = dir:///a\n\n[dataset b]\nsource = dir:///b\n"
		      "[dataset a]\nsource = dir:///c\n", 6,
		      "[dataset a] repeats the section of line 1");
	/* blanks after "dataset" do not make another section */
	load_fails_at("[dataset a]\nsource = dir:///a\n[dataset \t a]\n", 3,
		      "repeats the section of line 1");
	/* even an empty repeat */
	load_fails_at("[quota]\n[stagefs]\n[quota]\ndefault = 1G\n", 3,
		      "[quota] repeats the section of line 1");
	/* an indented "[...]" after a setting is a continuation, not a section */
	load_fails_at("[dataset a]\nsource = dir:///a\n  [dataset a]\n[dataset a]\n", 4,
		      "line 1");
	/* a name inih would truncate (and so merge with another) is refused */
	load_fails_at("[stagefs]\nthreads = 2\n"
		      "[dataset aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n"
		      "source = dir:///a\n", 3, "section name longer than");
	assert_true(calls > 0);
}

/* A line longer than inih's buffer is refused at its own line number. */
static void test_load_long_line(void **state)
{
	char text[1024];

	snprintf(text, sizeof(text), "[stagefs]\nthreads = 4\nclient_id = %0300d\n"
		 "threads = 1000\n", 7);
	load_fails_at(text, 3, "line longer than");
	/* the longest line that fits is read whole */
	snprintf(text, sizeof(text), "[stagefs]\nclient_id = %0186d\nthreads = 2\n", 7);
	{
		struct sfs_config cfg;
		char err[512] = "";

		config_init(&cfg);
		assert_int_equal(config_load(&cfg, write_conf(text), err, sizeof(err)), 0);
		assert_int_equal(strlen(cfg.client_id), 186);
		assert_int_equal(cfg.threads, 2);
		config_release(&cfg);
	}
	/* an error before the long line is the one reported */
	snprintf(text, sizeof(text), "[stagefs]\nthreads = 999\nclient_id = %0300d\n", 7);
	load_fails_at(text, 2, "threads");
}

/* config_load_buffer: the same parser on bytes, NUL-free or not. */
static void test_load_buffer(void **state)
{
	static const char text[] = "[stagefs]\nthreads = 3\n\0threads = 9\n";
	struct sfs_config cfg;
	char err[512] = "";

	config_init(&cfg);
	/* the last line needs no newline */
	assert_int_equal(config_load_buffer(&cfg, "buf", text, 21, err, sizeof(err)), 0);
	assert_int_equal(cfg.threads, 3);
	/* the text after a NUL on its line is not seen, as inih does */
	assert_int_equal(config_load_buffer(&cfg, "buf", text, sizeof(text) - 1, err,
					    sizeof(err)), 0);
	assert_int_equal(cfg.threads, 3);
	assert_int_equal(config_load_buffer(&cfg, "buf", text, 0, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "buf: "));
	config_release(&cfg);
}

static void test_load_errors(void **state)
{
	struct sfs_config cfg;
	char err[512] = "", want[PATH_MAX + 64];

	/* a bad value on a known line */
	load_fails_at("[stagefs]\n"
		      "threads = 8\n"
		      "\n"
		      "# comment\n"
		      "threads = 1000\n", 5, "threads");
	load_fails_at("[stagefs]\nchunk_size = 4Q\n", 2, "chunk_size");
	load_fails_at("cache_sync = perhaps\n", 1, "cache_sync");
	/* unknown key */
	load_fails_at("[stagefs]\ncache_dir = /x\ncache_szie = 1G\n", 3,
		      "unknown setting 'cache_szie'");
	/* unknown section */
	load_fails_at("[stagefs]\nthreads = 2\n\n[nosuch]\nx = 1\n", 5,
		      "unknown section [nosuch]");
	/* malformed lines */
	load_fails_at("[stagefs]\nthreads 8\n", 2, "syntax error");
	load_fails_at("[stagefs\nthreads = 8\n", 1, "syntax error");
	load_fails_at("[stagefs]\nthreads = 2\njust words\n", 3, "syntax error");
	/* "#" is a comment only at the start of a line */
	load_fails_at("[stagefs]\nthreads = 8 # eight\n", 2, "threads");
	/* the first error is the one reported, later lines are not applied */
	config_init(&cfg);
	const char *path = write_conf("threads = 257\nthreads = 4\nbad line\n");

	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:1: ", path);
	assert_int_equal(strncmp(err, want, strlen(want)), 0);
	assert_int_equal(cfg.threads, 0);
	config_release(&cfg);

	/* a missing file */
	config_init(&cfg);
	snprintf(want, sizeof(want), "%s/does-not-exist.conf", tmpdir);
	assert_int_equal(config_load(&cfg, want, err, sizeof(err)), -1);
	assert_int_equal(strncmp(err, want, strlen(want)), 0);
	assert_non_null(strstr(err, "No such file"));
	config_release(&cfg);
}

/*
 * inih (as built by Debian) treats an indented line after a "name = value"
 * line as a continuation of that value.  Pin the behaviour so that a change
 * of library build is noticed, and the documentation stays right.
 */
static void test_load_indented_continuation(void **state)
{
	struct sfs_config cfg;
	char err[512] = "";

	load_fails_at("[stagefs]\nlog_level = info\n    threads = 4\n", 3, "log_level");

	/* after a string setting the continuation is silently taken as its value */
	config_init(&cfg);
	assert_int_equal(config_load(&cfg, write_conf("client_id = a\n  keyring = /k\n"),
				     err, sizeof(err)), 0);
	assert_string_equal(cfg.client_id, "keyring = /k");
	assert_string_equal(cfg.keyring, "");
	config_release(&cfg);
}

/* ---- the generated example ---- */

/* Number of settings: one --help line each. */
static size_t nsettings(void)
{
	char *text = NULL;
	size_t len, n = 0;
	FILE *f = open_memstream(&text, &len);

	config_print_help(f);
	fclose(f);
	for (char *p = text; (p = strstr(p, "    -o ")); p++)
		n++;
	free(text);
	return n;
}

static char *example_text(size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);

	assert_non_null(f);
	config_print_example(f);
	fclose(f);
	return text;
}

static void test_example_reparses(void **state)
{
	struct sfs_config cfg;
	char err[512] = "";
	size_t len, nset = 0;
	char *text = example_text(&len);
	char *uncommented = malloc(len + 1), *o = uncommented;

	/* as generated: every setting commented out */
	config_init(&cfg);
	if (config_load(&cfg, write_conf(text), err, sizeof(err)))
		fail_msg("example does not parse: %s", err);
	assert_defaults(&cfg);
	config_release(&cfg);

	/* uncomment every "#name = value" line: the defaults, spelled out */
	for (char *line = text; *line; ) {
		char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line + 1) : strlen(line);
		char name[64];

		if (line[0] == '#' && sscanf(line + 1, "%63[a-z0-9_] =", name) == 1 &&
		    config_has(name)) {
			memcpy(o, line + 1, n - 1);
			o += n - 1;
			nset++;
		} else {
			memcpy(o, line, n);
			o += n;
		}
		line += n;
	}
	*o = '\0';
	assert_int_equal(nset, nsettings());	/* one per setting */
	config_init(&cfg);
	set_ok(&cfg, "threads", "3");	/* the file must set it back */
	if (config_load(&cfg, write_conf(uncommented), err, sizeof(err)))
		fail_msg("uncommented example does not parse: %s", err);
	assert_defaults(&cfg);
	config_release(&cfg);
	free(uncommented);
	free(text);
}

static void test_help(void **state)
{
	char *text = NULL;
	size_t len;
	FILE *f = open_memstream(&text, &len);

	config_print_help(f);
	fclose(f);
	assert_non_null(strstr(text, "-o cache_dir=STR"));
	assert_non_null(strstr(text, "-o cache_size=SIZE"));
	assert_non_null(strstr(text, "-o threads=N"));
	assert_non_null(strstr(text, "-o cache_free_ratio=RATIO"));
	assert_non_null(strstr(text, "-o rados_timeout=TIME"));
	assert_non_null(strstr(text, "-o log_level=LEVEL"));
	assert_non_null(strstr(text, "(default: 4M)"));
	assert_non_null(strstr(text, "(default: none)"));	/* empty strings */
	size_t lines = 0;

	for (char *p = text; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, nsettings());	/* one line per setting */
	assert_true(lines >= 21);
	free(text);
}

/* ---- section handlers ---- */

struct seen {
	int calls;
	char section[64], name[64], value[64];
};

static int dataset_section(void *arg, const char *section, const char *name,
			   const char *value, char *err, size_t errlen)
{
	struct seen *s = arg;

	s->calls++;
	snprintf(s->section, sizeof(s->section), "%s", section);
	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->value, sizeof(s->value), "%s", value);
	if (!strcmp(name, "source") && strncmp(value, "dir://", 6) &&
	    strncmp(value, "rados://", 8)) {
		snprintf(err, errlen, "[%s] source: '%s' is not a dir:// or rados:// URI",
			 section, value);
		return -1;
	}
	return 0;
}

static void test_sections(void **state)
{
	struct seen ds = { 0 }, ds2 = { 0 };
	struct sfs_config cfg;
	char err[512] = "";
	const char *path;

	config_add_section("dataset", dataset_section, &ds);
	path = write_conf("[stagefs]\n"
			  "threads = 2\n"
			  "[dataset imagenet]\n"
			  "source = dir:///data/imagenet\n"
			  "[stagefs]\n"
			  "threads = 3\n");
	config_init(&cfg);
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), 0);
	assert_int_equal(ds.calls, 1);
	assert_string_equal(ds.section, "dataset imagenet");
	assert_string_equal(ds.name, "source");
	assert_string_equal(ds.value, "dir:///data/imagenet");
	assert_int_equal(cfg.threads, 3);	/* [stagefs] again after it */
	config_release(&cfg);

	/* the handler's error gets the file and line in front */
	load_fails_at("[dataset a]\nsource = dir:///a\n\n[dataset b]\nsource = ftp://b\n",
		      5, "[dataset b] source: 'ftp://b' is not");

	/* registering the same prefix again replaces the handler */
	config_add_section("dataset", dataset_section, &ds2);
	ds.calls = 0;
	config_init(&cfg);
	assert_int_equal(config_load(&cfg, write_conf("[dataset x]\nsource = rados://p/x\n"),
				     err, sizeof(err)), 0);
	assert_int_equal(ds.calls, 0);
	assert_int_equal(ds2.calls, 1);
	config_release(&cfg);

	/* a second prefix */
	struct seen q = { 0 };

	config_add_section("quota", dataset_section, &q);
	config_init(&cfg);
	assert_int_equal(config_load(&cfg, write_conf("[quota]\nuser.1000 = 10G\n"),
				     err, sizeof(err)), 0);
	assert_int_equal(q.calls, 1);
	assert_string_equal(q.name, "user.1000");
	config_release(&cfg);

	/* sections nobody registered are still refused */
	load_fails_at("[dataset y]\nsource = dir:///y\n[other]\nk = v\n", 4,
		      "unknown section [other]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_set_str),
		cmocka_unit_test(test_set_size),
		cmocka_unit_test(test_set_uint),
		cmocka_unit_test(test_set_bool),
		cmocka_unit_test(test_set_duration),
		cmocka_unit_test(test_set_ratio),
		cmocka_unit_test(test_set_ratio_lone_percent),
		cmocka_unit_test(test_set_loglevel),
		cmocka_unit_test(test_set_auto),
		cmocka_unit_test(test_set_unknown),
		cmocka_unit_test(test_validate),
		cmocka_unit_test(test_range_messages),
		cmocka_unit_test(test_load_good),
		cmocka_unit_test(test_load_errors),
		cmocka_unit_test(test_load_indented_continuation),
		cmocka_unit_test(test_load_not_a_config),
		cmocka_unit_test(test_load_duplicate_sections),
		cmocka_unit_test(test_load_long_line),
		cmocka_unit_test(test_load_buffer),
		cmocka_unit_test(test_example_reparses),
		cmocka_unit_test(test_help),
		cmocka_unit_test(test_sections),
	};

	printf("test_config: defaults, config_set per type and limits, INI loading and errors, example, sections\n");
	fflush(stdout);
	return cmocka_run_group_tests_name("config", tests, group_setup, group_teardown);
}
