/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util: small helpers shared by every module: sizes and durations as people
 * write them, 128-bit content ids and their hex form, clocks, full-length
 * pread/pwrite.  No state, no allocation unless stated.
 */
#ifndef STAGEFS_UTIL_H
#define STAGEFS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))
#define MIN(a, b)	((a) < (b) ? (a) : (b))
#define MAX(a, b)	((a) > (b) ? (a) : (b))
#define DIV_ROUND_UP(n, d)	(((n) + (d) - 1) / (d))

/* a + b, or UINT64_MAX where that would wrap: for counts a peer states. */
static inline uint64_t u64_add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

#define KiB	(1024ULL)
#define MiB	(1024ULL * KiB)
#define GiB	(1024ULL * MiB)

/* A 128-bit content id (XXH3-128), used for chunk objects and cache files. */
struct sfs_id {
	uint64_t hi, lo;
};

#define SFS_ID_HEX_LEN	32	/* without the terminating NUL */

/* Write the 32 lowercase hex digits of @id and a NUL into @out. */
void sfs_id_hex(const struct sfs_id *id, char out[SFS_ID_HEX_LEN + 1]);
/* Parse 32 hex digits; returns 0 or -EINVAL. */
int sfs_id_parse(const char *hex, struct sfs_id *id);
bool sfs_id_is_zero(const struct sfs_id *id);
bool sfs_id_eq(const struct sfs_id *a, const struct sfs_id *b);
/* XXH3-128 of a buffer as an sfs_id. */
void sfs_id_of(const void *buf, size_t len, struct sfs_id *id);
/* XXH3-64 of a buffer: the per-chunk hash recorded in the cache index. */
uint64_t sfs_hash64(const void *buf, size_t len);
/* Do sfs_id_of() and sfs_hash64() run XXH3's AVX2 code (src/xxh_avx2.h)? */
bool sfs_hash_avx2(void);

/*
 * Parse "4M", "100G", "1.5T", "512k", "4096" (binary units) into bytes.
 * Returns 0 or -EINVAL/-ERANGE.
 */
int parse_size(const char *s, uint64_t *out);
/* Parse "30", "30s", "500ms", "2m", "1h" into milliseconds. */
int parse_duration_ms(const char *s, uint64_t *out);
/*
 * Parse a whole decimal number: no sign, nothing after it, no overflow.
 * Returns 0 or -EINVAL.  Ranges are the caller's.
 */
int parse_uint(const char *s, uint64_t *out);
/* Parse "yes/no/true/false/on/off/1/0". */
int parse_bool(const char *s, bool *out);
/* Format @bytes as "1.50 GiB" into @buf. Returns @buf. */
char *fmt_size(uint64_t bytes, char *buf, size_t len);

uint64_t now_ns(void);		/* CLOCK_MONOTONIC */
uint64_t now_ms(void);

/*
 * Deadlines on now_ns()'s clock (CLOCK_MONOTONIC), so that a step of the
 * wall clock neither cuts a wait short nor stretches it.  Init a
 * condition variable with cond_init_monotonic() to wait on it with
 * cond_wait_until_ns(), which returns 0 when signalled (or spuriously)
 * and ETIMEDOUT once @deadline_ns has passed.
 */
#include <pthread.h>
int cond_init_monotonic(pthread_cond_t *c);
int cond_wait_until_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t deadline_ns);
uint64_t wall_s(void);		/* CLOCK_REALTIME seconds */

/* pread/pwrite that loop over short transfers and EINTR.  Return bytes
 * transferred (less than @len only at end of file) or -errno. */
ssize_t pread_full(int fd, void *buf, size_t len, off_t off);
ssize_t pwrite_full(int fd, const void *buf, size_t len, off_t off);

/*
 * Replace @path with @len bytes of @buf, all or nothing: written to
 * "@path.tmp" (mode @mode, whatever the umask), fsync'ed if @durable, then
 * renamed over @path.  On failure the temporary file is removed and @path
 * is as it was.  Returns 0 or -errno.
 */
int write_file_atomic(const char *path, const void *buf, size_t len,
		      mode_t mode, bool durable);
/* The same, the file's group set to @gid first ((gid_t)-1: left as created). */
int write_file_atomic_owned(const char *path, const void *buf, size_t len,
			    mode_t mode, gid_t gid, bool durable);

/* mkdir -p with @mode for each created component.  Returns 0 or -errno. */
int mkdir_p(const char *path, mode_t mode);

/* Format a message into @err (@len bytes) and return @rc: "return errf(...)". */
int errf(char *err, size_t len, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Tell the service manager our state, e.g. "READY=1": the sd_notify(3)
 * protocol, one datagram to the socket $NOTIFY_SOCKET names (a path, or
 * '@' for the abstract namespace).  Without NOTIFY_SOCKET it does nothing
 * and returns 0; else 0 or -errno.
 */
int sfs_sd_notify(const char *state);

/* Undo /proc/self/mountinfo's octal escapes (\040 for a space) in @s, in place. */
void mountinfo_unescape(char *s);

#endif
