/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_util: parse_size, parse_duration_ms, parse_bool, fmt_size, sfs_id hex
 * round trip and parse errors, hashes (either XXH3 code path), pread_full/pwrite_full and mkdir_p.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define TiB	(1024ULL * GiB)

/* ---- a private temp dir per test ---- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int setup_tmp(void **state)
{
	const char *base = getenv("TMPDIR");
	char *dir = malloc(PATH_MAX);

	snprintf(dir, PATH_MAX, "%s/test_util.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir)) {
		free(dir);
		return -1;
	}
	*state = dir;
	return 0;
}

static int teardown_tmp(void **state)
{
	char *dir = *state;

	chmod(dir, 0700);
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
	return 0;
}

/* ---- parse_size ---- */

static uint64_t size_ok(const char *s)
{
	uint64_t v = 0xdeadbeef;

	if (parse_size(s, &v) != 0)
		fail_msg("parse_size(\"%s\") failed", s);
	return v;
}

static void size_bad(const char *s)
{
	uint64_t v = 0xdeadbeef;
	int r = parse_size(s, &v);

	if (r != -EINVAL && r != -ERANGE)
		fail_msg("parse_size(\"%s\") = %d, value %llu: expected -EINVAL or -ERANGE",
			 s, r, (unsigned long long)v);
	assert_int_equal(v, 0xdeadbeef);	/* untouched on error */
}

/* Counts a peer states stop at UINT64_MAX, never wrap to small ones. */
static void test_u64_add_sat(void **state)
{
	(void)state;
	assert_int_equal(u64_add_sat(2, 3), 5);
	assert_true(u64_add_sat(UINT64_MAX - 1, 1) == UINT64_MAX);
	assert_true(u64_add_sat(UINT64_MAX - 1, 2) == UINT64_MAX);
	assert_true(u64_add_sat(UINT64_MAX, UINT64_MAX) == UINT64_MAX);
}

static void test_parse_size(void **state)
{
	assert_int_equal(size_ok("0"), 0);
	assert_int_equal(size_ok("4096"), 4096);
	assert_int_equal(size_ok("512k"), 512 * KiB);
	assert_int_equal(size_ok("512K"), 512 * KiB);
	assert_int_equal(size_ok("4M"), 4 * MiB);
	assert_int_equal(size_ok("4m"), 4 * MiB);
	assert_int_equal(size_ok("4MB"), 4 * MiB);
	assert_int_equal(size_ok("4MiB"), 4 * MiB);
	assert_int_equal(size_ok("4mib"), 4 * MiB);
	assert_int_equal(size_ok("1.5G"), 1536 * MiB);
	assert_int_equal(size_ok("100G"), 100 * GiB);
	assert_int_equal(size_ok("1.5T"), 1536 * GiB);
	assert_int_equal(size_ok("2T"), 2 * TiB);
	assert_int_equal(size_ok("1P"), 1024 * TiB);
	assert_int_equal(size_ok("10b"), 10);
	assert_int_equal(size_ok("10B"), 10);
	assert_int_equal(size_ok("  64K"), 64 * KiB);	/* leading blanks */
	assert_int_equal(size_ok("64K  "), 64 * KiB);	/* trailing blanks */
	assert_int_equal(size_ok("0.5K"), 512);
	assert_int_equal(size_ok("1.5"), 2);		/* rounded, not truncated */

	size_bad("");
	size_bad("   ");
	size_bad("M");
	size_bad("abc");
	size_bad("-1");
	size_bad(" -1M");
	size_bad("4X");
	size_bad("4MM");
	size_bad("4Mx");
	size_bad("4iB");
	size_bad("4M B");
	size_bad("1.2.3");
	size_bad("16384P");		/* 2^64: does not fit */
	size_bad("17179869184G");	/* 2^64 */
	size_bad("inf");
}

/*
 * util.c says it accepts "4 M"; a blank between number and unit is what
 * people type in a config file.
 */
static void test_parse_size_blank_before_unit(void **state)
{
	assert_int_equal(size_ok("4 M"), 4 * MiB);
	assert_int_equal(size_ok("100 GiB"), 100 * GiB);
}

/*
 * Values strtod accepts but that are no size must not turn into a huge
 * number: "nan" went through every check and llround(NaN) became 2^63;
 * anything from 2^63 to 2^64 overflowed llround the same way.
 */
static void test_parse_size_nan_and_overflow(void **state)
{
	uint64_t v;

	size_bad("nan");
	size_bad("NaN");
	size_bad("9000P");		/* 1.01e19 > 2^63 */
	size_bad("8192P");		/* exactly 2^63 */
	assert_int_equal(parse_size("8191P", &v), 0);
	assert_int_equal(v, 8191ULL * 1024 * TiB);
}

/* ---- parse_duration_ms ---- */

static uint64_t dur_ok(const char *s)
{
	uint64_t v = 0xdeadbeef;

	if (parse_duration_ms(s, &v) != 0)
		fail_msg("parse_duration_ms(\"%s\") failed", s);
	return v;
}

static void dur_bad(const char *s)
{
	uint64_t v = 0xdeadbeef;
	int r = parse_duration_ms(s, &v);

	if (r != -EINVAL && r != -ERANGE)
		fail_msg("parse_duration_ms(\"%s\") = %d, value %llu: expected an error",
			 s, r, (unsigned long long)v);
	assert_int_equal(v, 0xdeadbeef);
}

static void test_parse_duration(void **state)
{
	assert_int_equal(dur_ok("0"), 0);
	assert_int_equal(dur_ok("30"), 30000);
	assert_int_equal(dur_ok("30s"), 30000);
	assert_int_equal(dur_ok("1.5s"), 1500);
	assert_int_equal(dur_ok("500ms"), 500);
	assert_int_equal(dur_ok("2m"), 120000);
	assert_int_equal(dur_ok("2min"), 120000);
	assert_int_equal(dur_ok("1h"), 3600000);
	assert_int_equal(dur_ok("0.5h"), 1800000);

	dur_bad("");
	dur_bad("s");
	dur_bad("soon");
	dur_bad("-1");
	dur_bad("-1s");
	dur_bad("5d");
	dur_bad("5 s");
	dur_bad("5S");
	dur_bad("10sec");
	dur_bad("1ms ");
}

/* "nan" and absurdly large values must be refused, not become 2^63 ms. */
static void test_parse_duration_nan_and_overflow(void **state)
{
	dur_bad("nan");
	dur_bad("inf");
	dur_bad("1e300");
	dur_bad("1e20h");
}

/* ---- parse_bool ---- */

static void test_parse_bool(void **state)
{
	static const char *const yes[] = { "1", "yes", "YES", "Yes", "true", "TRUE", "on", "On" };
	static const char *const no[] = { "0", "no", "NO", "false", "False", "off", "OFF" };
	static const char *const bad[] = { "", "2", "y", "n", "maybe", "yess", "on ", " on", "enable" };
	bool b;

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		b = false;
		assert_int_equal(parse_bool(yes[i], &b), 0);
		assert_true(b);
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		b = true;
		assert_int_equal(parse_bool(no[i], &b), 0);
		assert_false(b);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		b = true;
		if (parse_bool(bad[i], &b) != -EINVAL)
			fail_msg("parse_bool(\"%s\") accepted", bad[i]);
		assert_true(b);
	}
}

/* ---- fmt_size ---- */

static void test_fmt_size(void **state)
{
	char buf[32];

	assert_string_equal(fmt_size(0, buf, sizeof(buf)), "0 B");
	assert_string_equal(fmt_size(1023, buf, sizeof(buf)), "1023 B");
	assert_string_equal(fmt_size(1024, buf, sizeof(buf)), "1.00 KiB");
	assert_string_equal(fmt_size(1536 * MiB, buf, sizeof(buf)), "1.50 GiB");
	assert_string_equal(fmt_size(2 * TiB, buf, sizeof(buf)), "2.00 TiB");
	assert_string_equal(fmt_size(UINT64_MAX, buf, sizeof(buf)), "16384.00 PiB");
	/* a short buffer is truncated, never overrun */
	memset(buf, 'x', sizeof(buf));
	fmt_size(1536 * MiB, buf, 4);
	assert_string_equal(buf, "1.5");
	assert_int_equal(buf[4], 'x');
}

/* ---- sfs_id ---- */

static void test_id_round_trip(void **state)
{
	char hex[SFS_ID_HEX_LEN + 1];
	struct sfs_id a, b;
	uint64_t x = 0x9e3779b97f4a7c15ULL;

	for (int i = 0; i < 1000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		a.hi = x;
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		a.lo = i % 7 ? x : 0;	/* some zero halves: leading zeros matter */
		memset(hex, 'Z', sizeof(hex));
		sfs_id_hex(&a, hex);
		assert_int_equal(strlen(hex), SFS_ID_HEX_LEN);
		for (int k = 0; k < SFS_ID_HEX_LEN; k++)
			assert_non_null(strchr("0123456789abcdef", hex[k]));
		assert_int_equal(sfs_id_parse(hex, &b), 0);
		assert_true(sfs_id_eq(&a, &b));
	}

	a = (struct sfs_id){ 0x0123456789abcdefULL, 0xfedcba9876543210ULL };
	sfs_id_hex(&a, hex);
	assert_string_equal(hex, "0123456789abcdeffedcba9876543210");
	/* upper case parses too */
	assert_int_equal(sfs_id_parse("0123456789ABCDEFFEDCBA9876543210", &b), 0);
	assert_true(sfs_id_eq(&a, &b));

	a = (struct sfs_id){ 0, 0 };
	sfs_id_hex(&a, hex);
	assert_string_equal(hex, "00000000000000000000000000000000");
	assert_true(sfs_id_is_zero(&a));
	a.lo = 1;
	assert_false(sfs_id_is_zero(&a));
	b = (struct sfs_id){ 1, 0 };
	assert_false(sfs_id_eq(&a, &b));
}

static void test_id_parse_errors(void **state)
{
	static const char *const bad[] = {
		"",
		"0",
		"0123456789abcdeffedcba987654321",	/* 31 digits */
		"0123456789abcdeffedcba98765432100",	/* 33 digits */
		"0123456789abcdeffedcba987654321g",
		"g123456789abcdeffedcba9876543210",
		"0123456789abcdef fedcba987654321",
		"0x23456789abcdeffedcba9876543210",
		" 0123456789abcdeffedcba987654321",
		"0123456789abcdeffedcba9876543210\n",
		"-123456789abcdeffedcba9876543210",
	};
	struct sfs_id id = { 42, 43 };

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		if (sfs_id_parse(bad[i], &id) != -EINVAL)
			fail_msg("sfs_id_parse(\"%s\") accepted", bad[i]);
		assert_int_equal(id.hi, 42);	/* untouched */
		assert_int_equal(id.lo, 43);
	}
}

static void test_hashes(void **state)
{
	static const char text[] = "stagefs";
	XXH128_hash_t h = XXH3_128bits(text, strlen(text));
	struct sfs_id id, id2;

	sfs_id_of(text, strlen(text), &id);
	assert_int_equal(id.hi, h.high64);
	assert_int_equal(id.lo, h.low64);
	sfs_id_of(text, strlen(text) - 1, &id2);
	assert_false(sfs_id_eq(&id, &id2));
	assert_int_equal(sfs_hash64(text, strlen(text)), XXH3_64bits(text, strlen(text)));
	assert_int_equal(sfs_hash64(NULL, 0), XXH3_64bits(NULL, 0));
}

/*
 * The hashes whatever code path computes them (src/xxh_avx2.h): every
 * length from 0 to 2,100 (each of XXH3's short-input branches, the
 * stripe and block edges), longer and unaligned buffers up to 4 MiB + 3,
 * against the baseline code inlined here.  The test is compiled without
 * -mavx2, so its XXH3 is the SSE2 (or the target's own) code.
 */
static void test_hashes_any_path(void **state)
{
	size_t big = (4u << 20) + 3, lens[] = { 4095, 4096, 65536, 65537, 1u << 20, 4u << 20 };
	unsigned char *buf = malloc(big);
	uint64_t x = 0x9e3779b97f4a7c15ULL;

	assert_non_null(buf);
	for (size_t i = 0; i < big; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (unsigned char)x;
	}
	if (!sfs_hash_avx2())
		print_message("note: this CPU or build has no AVX2 path: both sides run the same code\n");
	for (size_t len = 0; len <= 2100; len++) {
		XXH128_hash_t h = XXH3_128bits(buf + 1, len);
		struct sfs_id id;

		sfs_id_of(buf + 1, len, &id);
		assert_int_equal(id.hi, h.high64);
		assert_int_equal(id.lo, h.low64);
		assert_int_equal(sfs_hash64(buf + 3, len), XXH3_64bits(buf + 3, len));
	}
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
		for (size_t off = 0; off < 4; off++) {
			XXH128_hash_t h = XXH3_128bits(buf + off, lens[k]);
			struct sfs_id id;

			sfs_id_of(buf + off, lens[k], &id);
			assert_int_equal(id.hi, h.high64);
			assert_int_equal(id.lo, h.low64);
			assert_int_equal(sfs_hash64(buf + off, lens[k]), XXH3_64bits(buf + off, lens[k]));
		}
	free(buf);
}

/* ---- clocks ---- */

static void test_clocks(void **state)
{
	uint64_t a = now_ns(), ms = now_ms();

	usleep(2000);
	assert_true(now_ns() - a >= 2000000ULL);
	assert_true(now_ms() >= ms + 2);
	assert_true(wall_s() > 1600000000ULL);
}

/* ---- pread_full / pwrite_full ---- */

static void test_pread_pwrite(void **state)
{
	const char *dir = *state;
	size_t len = 3 * MiB + 17;
	char path[PATH_MAX];
	unsigned char *a = malloc(len), *b = malloc(len);
	int fd;

	assert_non_null(a);
	assert_non_null(b);
	for (size_t i = 0; i < len; i++)
		a[i] = (unsigned char)(i * 31 + (i >> 11));
	snprintf(path, sizeof(path), "%s/f", dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);

	/* write at an offset past EOF: a hole, then the data */
	assert_int_equal(pwrite_full(fd, a, len, 4096), (ssize_t)len);
	assert_int_equal(pread_full(fd, b, len, 4096), (ssize_t)len);
	assert_memory_equal(a, b, len);

	/* the hole reads as zeros */
	memset(b, 0xff, 4096);
	assert_int_equal(pread_full(fd, b, 4096, 0), 4096);
	for (int i = 0; i < 4096; i++)
		assert_int_equal(b[i], 0);

	/* short only at end of file */
	assert_int_equal(pread_full(fd, b, len, 4096 + len - 100), 100);
	assert_memory_equal(b, a + len - 100, 100);
	assert_int_equal(pread_full(fd, b, 10, 4096 + len), 0);
	assert_int_equal(pread_full(fd, b, 10, 1LL << 40), 0);

	/* zero-length calls do nothing */
	assert_int_equal(pwrite_full(fd, a, 0, 0), 0);
	assert_int_equal(pread_full(fd, b, 0, 0), 0);
	close(fd);

	/* errors come back as -errno */
	assert_int_equal(pread_full(fd, b, 10, 0), -EBADF);
	assert_int_equal(pwrite_full(fd, a, 10, 0), -EBADF);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite_full(fd, a, 10, 0), -EBADF);
	assert_int_equal(pread_full(fd, b, 10, -1), -EINVAL);
	close(fd);
	fd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_int_equal(pread_full(fd, b, 10, 0), -EISDIR);
	close(fd);
	free(a);
	free(b);
}

/* ---- mkdir_p ---- */

static void assert_dir_mode(const char *path, mode_t mode)
{
	struct stat st;

	if (stat(path, &st) < 0)
		fail_msg("%s: %s", path, strerror(errno));
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, mode);
}

static void test_mkdir_p(void **state)
{
	const char *dir = *state;
	char path[PATH_MAX], sub[PATH_MAX + 16];
	mode_t old = umask(0);
	int fd;

	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	assert_int_equal(mkdir_p(path, 0700), 0);
	assert_dir_mode(path, 0700);
	snprintf(sub, sizeof(sub), "%s/a", dir);
	assert_dir_mode(sub, 0700);		/* every created component */
	assert_int_equal(mkdir_p(path, 0700), 0);	/* exists: fine */

	/* trailing and doubled slashes */
	snprintf(path, sizeof(path), "%s/x//y/", dir);
	assert_int_equal(mkdir_p(path, 0750), 0);
	snprintf(path, sizeof(path), "%s/x/y", dir);
	assert_dir_mode(path, 0750);

	/* an existing component keeps its mode */
	snprintf(path, sizeof(path), "%s/a/b/c/d", dir);
	assert_int_equal(mkdir_p(path, 0755), 0);
	assert_dir_mode(path, 0755);
	snprintf(sub, sizeof(sub), "%s/a/b", dir);
	assert_dir_mode(sub, 0700);

	/* a regular file in the middle */
	snprintf(path, sizeof(path), "%s/file", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(sub, sizeof(sub), "%s/file/sub", dir);
	assert_int_equal(mkdir_p(sub, 0700), -ENOTDIR);

	/* no permission */
	if (geteuid() != 0) {
		snprintf(path, sizeof(path), "%s/ro", dir);
		assert_int_equal(mkdir(path, 0500), 0);
		snprintf(sub, sizeof(sub), "%s/ro/sub", dir);
		assert_int_equal(mkdir_p(sub, 0700), -EACCES);
	}

	/* too long */
	char *lng = malloc(PATH_MAX + 10);

	memset(lng, 'a', PATH_MAX + 9);
	lng[0] = '/';
	lng[PATH_MAX + 9] = '\0';
	assert_int_equal(mkdir_p(lng, 0700), -ENAMETOOLONG);
	free(lng);
	umask(old);
}

/*
 * `mkdir -p FILE` fails when FILE exists and is not a directory; mkdir_p
 * took EEXIST from the last mkdir(2) as success and returned 0, so a caller
 * believes a directory is there.
 */
static void test_mkdir_p_existing_file(void **state)
{
	const char *dir = *state;
	char path[PATH_MAX];
	int fd, r;

	snprintf(path, sizeof(path), "%s/plain", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	r = mkdir_p(path, 0700);
	if (r != -EEXIST && r != -ENOTDIR)
		fail_msg("mkdir_p(existing regular file) = %d, expected -EEXIST or -ENOTDIR", r);
}

static void test_parse_uint(void **state)
{
	static const char *const bad[] = {
		"", "-1", " -1", "1x", "0x10", "1.5", "18446744073709551616",
	};
	uint64_t v;

	(void)state;
	assert_int_equal(parse_uint("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(parse_uint("42", &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(parse_uint("18446744073709551615", &v), 0);
	assert_true(v == UINT64_MAX);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse_uint(bad[i], &v) != -EINVAL)
			fail_msg("parse_uint(\"%s\") accepted", bad[i]);
}

static void test_write_file_atomic(void **state)
{
	const char *dir = *state;
	char path[PATH_MAX], tmp[PATH_MAX + 8], buf[16] = { 0 };
	struct stat st;
	mode_t um;
	int fd;

	snprintf(path, sizeof(path), "%s/f", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	/* the mode holds whatever the umask */
	um = umask(077);
	assert_int_equal(write_file_atomic(path, "first", 5, 0644, true), 0);
	umask(um);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	/* replaced whole, no temporary left */
	assert_int_equal(write_file_atomic(path, "2nd", 3, 0600, false), 0);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread_full(fd, buf, sizeof(buf), 0), 3);
	close(fd);
	assert_memory_equal(buf, "2nd", 3);
	assert_int_equal(access(tmp, F_OK), -1);
	/* a failure leaves nothing behind */
	snprintf(path, sizeof(path), "%s/no/such/dir/f", dir);
	assert_int_equal(write_file_atomic(path, "x", 1, 0600, true), -ENOENT);
}

/* A limit lets @burst lines out per interval and counts the rest. */
static void test_log_ratelimit(void **state)
{
	struct log_ratelimit rl;
	uint64_t missed = 99;
	unsigned int ok = 0;

	(void)state;
	log_ratelimit_init(&rl, 200, 3);
	for (int i = 0; i < 1000; i++)
		if (log_ratelimit_ok(&rl, &missed))
			ok++;
	assert_int_equal(ok, 3);
	assert_int_equal(missed, 0);
	assert_int_equal(log_ratelimit_suppressed(&rl), 997);
	usleep(250 * 1000);
	/* the next interval: the first line says what was dropped */
	assert_true(log_ratelimit_ok(&rl, &missed));
	assert_int_equal(missed, 997);
	assert_true(log_ratelimit_ok(&rl, &missed));
	assert_int_equal(missed, 0);
	pthread_mutex_destroy(&rl.lock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_u64_add_sat),
		cmocka_unit_test(test_log_ratelimit),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_parse_size_blank_before_unit),
		cmocka_unit_test(test_parse_size_nan_and_overflow),
		cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_parse_duration_nan_and_overflow),
		cmocka_unit_test(test_parse_uint),
		cmocka_unit_test(test_parse_bool),
		cmocka_unit_test(test_fmt_size),
		cmocka_unit_test(test_id_round_trip),
		cmocka_unit_test(test_id_parse_errors),
		cmocka_unit_test(test_hashes),
		cmocka_unit_test(test_hashes_any_path),
		cmocka_unit_test(test_clocks),
		cmocka_unit_test_setup_teardown(test_pread_pwrite, setup_tmp, teardown_tmp),
		cmocka_unit_test_setup_teardown(test_mkdir_p, setup_tmp, teardown_tmp),
		cmocka_unit_test_setup_teardown(test_mkdir_p_existing_file, setup_tmp, teardown_tmp),
		cmocka_unit_test_setup_teardown(test_write_file_atomic, setup_tmp, teardown_tmp),
	};

	printf("test_util: size/duration/bool parsing, ids and hashes, full pread/pwrite, mkdir_p\n");
	fflush(stdout);
	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
