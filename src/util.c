/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util: see util.h.
 */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "xxh_avx2.h"

void sfs_id_hex(const struct sfs_id *id, char out[SFS_ID_HEX_LEN + 1])
{
	snprintf(out, SFS_ID_HEX_LEN + 1, "%016llx%016llx",
		 (unsigned long long)id->hi, (unsigned long long)id->lo);
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int sfs_id_parse(const char *hex, struct sfs_id *id)
{
	uint64_t v[2] = { 0, 0 };

	for (int i = 0; i < SFS_ID_HEX_LEN; i++) {
		int d = hexval((unsigned char)hex[i]);

		if (d < 0)
			return -EINVAL;
		v[i / 16] = (v[i / 16] << 4) | (uint64_t)d;
	}
	if (hex[SFS_ID_HEX_LEN] != '\0')
		return -EINVAL;
	id->hi = v[0];
	id->lo = v[1];
	return 0;
}

bool sfs_id_is_zero(const struct sfs_id *id)
{
	return !id->hi && !id->lo;
}

bool sfs_id_eq(const struct sfs_id *a, const struct sfs_id *b)
{
	return a->hi == b->hi && a->lo == b->lo;
}

/*
 * XXH3's AVX2 code where this build has it and the CPU runs it
 * (src/xxh_avx2.h): asked once, before main(), so that no thread races
 * the choice.  STAGEFS_XXH3_PORTABLE=1 in the environment keeps the
 * baseline code (to compare the two; the hashes are the same).
 */
static bool hash_avx2;

__attribute__((constructor)) static void hash_pick(void)
{
	const char *env = getenv("STAGEFS_XXH3_PORTABLE");

	if (!xxh_avx2_built || (env && *env && strcmp(env, "0")))
		return;
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	hash_avx2 = __builtin_cpu_supports("avx2");
#endif
}

bool sfs_hash_avx2(void)
{
	return hash_avx2;
}

void sfs_id_of(const void *buf, size_t len, struct sfs_id *id)
{
	XXH128_hash_t h;

	if (hash_avx2) {
		xxh_avx2_128(buf, len, &id->lo, &id->hi);
		return;
	}
	h = XXH3_128bits(buf, len);
	id->hi = h.high64;
	id->lo = h.low64;
}

uint64_t sfs_hash64(const void *buf, size_t len)
{
	return hash_avx2 ? xxh_avx2_64(buf, len) : XXH3_64bits(buf, len);
}

int parse_size(const char *s, uint64_t *out)
{
	const char *digits_end;
	char *end;
	double v;
	uint64_t mult = 1, u;

	while (isspace((unsigned char)*s))
		s++;
	if (!*s || *s == '-')
		return -EINVAL;
	for (digits_end = s; isdigit((unsigned char)*digits_end); digits_end++)
		;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -EINVAL;
	if (end != digits_end)
		digits_end = NULL;	/* a fraction or an exponent: go by the double */
	while (isspace((unsigned char)*end))
		end++;
	switch (tolower((unsigned char)*end)) {
	case '\0':
		break;
	case 'k': mult = KiB; end++; break;
	case 'm': mult = MiB; end++; break;
	case 'g': mult = GiB; end++; break;
	case 't': mult = 1024 * GiB; end++; break;
	case 'p': mult = 1024 * 1024 * GiB; end++; break;
	case 'b': break;
	default:
		return -EINVAL;
	}
	/* accept "4M", "4MB", "4MiB", "4 M" style suffixes */
	if (*end == 'i' || *end == 'I')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	while (isspace((unsigned char)*end))
		end++;
	if (*end)
		return -EINVAL;
	if (digits_end) {
		/* a whole number is exact: 2^63 - 1 is the limit, not a double's */
		errno = 0;
		u = strtoull(s, NULL, 10);
		if (errno || u > INT64_MAX / mult)
			return -ERANGE;
		*out = u * mult;
		return 0;
	}
	if (!(v * (double)mult < 9223372036854775808.0))	/* NaN too; llround's range */
		return -ERANGE;
	*out = (uint64_t)llround(v * (double)mult);
	return 0;
}

int parse_duration_ms(const char *s, uint64_t *out)
{
	char *end;
	double v;
	double mult = 1000;	/* plain numbers are seconds */

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !(v >= 0 && v <= 1e12))	/* NaN, inf, > 30,000 years */
		return -EINVAL;
	if (!strcmp(end, "") || !strcmp(end, "s"))
		mult = 1000;
	else if (!strcmp(end, "ms"))
		mult = 1;
	else if (!strcmp(end, "m") || !strcmp(end, "min"))
		mult = 60000;
	else if (!strcmp(end, "h"))
		mult = 3600000;
	else
		return -EINVAL;
	*out = (uint64_t)llround(v * mult);
	return 0;
}

int parse_uint(const char *s, uint64_t *out)
{
	const char *p = s;
	char *end;
	uint64_t v;

	while (isspace((unsigned char)*p))
		p++;
	if (*p == '-')
		return -EINVAL;	/* strtoull would wrap it */
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "yes", "true", "on" };
	static const char *const no[] = { "0", "no", "false", "off" };

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

char *fmt_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024 && u + 1 < ARRAY_SIZE(unit)) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.2f %s", v, unit[u]);
	return buf;
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t now_ms(void)
{
	return now_ns() / 1000000ULL;
}

uint64_t wall_s(void)
{
	return (uint64_t)time(NULL);
}

ssize_t pread_full(int fd, void *buf, size_t len, off_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done,
				  off + (off_t)done);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

ssize_t pwrite_full(int fd, const void *buf, size_t len, off_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done,
				   off + (off_t)done);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)n;
	}
	return (ssize_t)done;
}

int write_file_atomic(const char *path, const void *buf, size_t len,
		      mode_t mode, bool durable)
{
	return write_file_atomic_owned(path, buf, len, mode, (gid_t)-1, durable);
}

int write_file_atomic_owned(const char *path, const void *buf, size_t len,
			    mode_t mode, gid_t gid, bool durable)
{
	char tmp[PATH_MAX];
	int fd, ret = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	/* the group before the mode: never a moment readable by the old group */
	if (gid != (gid_t)-1 && fchown(fd, (uid_t)-1, gid) < 0)
		ret = -errno;
	else if (fchmod(fd, mode) < 0)
		ret = -errno;
	else if (pwrite_full(fd, buf, len, 0) != (ssize_t)len)
		ret = -EIO;
	else if (durable && fsync(fd) < 0)
		ret = -errno;
	if (close(fd) < 0 && !ret)
		ret = -errno;
	if (!ret && rename(tmp, path) < 0)
		ret = -errno;
	if (ret)
		unlink(tmp);
	return ret;
}

int mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0) {
		struct stat st;

		if (errno != EEXIST)
			return -errno;
		if (stat(tmp, &st) < 0)
			return -errno;
		if (!S_ISDIR(st.st_mode))
			return -ENOTDIR;
	}
	return 0;
}

int sfs_sd_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = path ? strlen(path) : 0;
	int fd, ret = 0;

	if (!n)
		return 0;
	if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

int errf(char *err, size_t len, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return rc;
}

int cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t ca;
	int rc;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
	return rc;
}

int cond_wait_until_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t deadline_ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(deadline_ns / 1000000000ULL),
		.tv_nsec = (long)(deadline_ns % 1000000000ULL),
	};

	return pthread_cond_timedwait(c, m, &ts);
}

void mountinfo_unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}
