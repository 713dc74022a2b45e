/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log: one format-checked logger for the daemon and the tools.
 *
 * Messages go to stderr (foreground, tools) or syslog (daemonised), with a
 * syslog level.  The level is tested before the arguments are evaluated, so a
 * disabled debug line costs one comparison.  Thread safe: each message is one
 * write(2) (stderr) or one syslog(3) call.
 */
#ifndef STAGEFS_LOG_H
#define STAGEFS_LOG_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <syslog.h>

extern int log_level;	/* LOG_ERR .. LOG_DEBUG; messages above it are dropped */

/* Route messages to syslog(3) with @ident instead of stderr. */
void log_use_syslog(const char *ident);
/* Parse "error|warning|notice|info|debug"; returns the level or -1. */
int log_level_parse(const char *name);

void log_msg(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_at(lvl, ...)						\
	do {								\
		if ((lvl) <= log_level)					\
			log_msg((lvl), __VA_ARGS__);			\
	} while (0)

#define log_err(...)	log_at(LOG_ERR, __VA_ARGS__)
#define log_warn(...)	log_at(LOG_WARNING, __VA_ARGS__)
#define log_notice(...)	log_at(LOG_NOTICE, __VA_ARGS__)
#define log_info(...)	log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...)	log_at(LOG_DEBUG, __VA_ARGS__)

/*
 * Rate limits for the lines someone outside the daemon can cause (a peer,
 * a local user on the control socket, a scraper): at most @burst lines per
 * @interval_ms through one limit, the rest counted, and the next line let
 * through says how many were suppressed.  Static or embedded; needs no
 * release.  Thread safe.
 */
struct log_ratelimit {
	pthread_mutex_t lock;
	uint32_t interval_ms, burst;
	uint64_t begin_ms;	/* the current interval's start (monotonic); protected by lock */
	uint32_t printed;	/* in this interval; protected by lock */
	uint64_t missed;	/* suppressed since the last line printed; protected by lock */
	uint64_t missed_total;	/* suppressed ever; protected by lock */
};

#define LOG_RATELIMIT_INIT(ms, n)	\
	{ .lock = PTHREAD_MUTEX_INITIALIZER, .interval_ms = (ms), .burst = (n) }

/* Initialise an embedded limit (or use LOG_RATELIMIT_INIT). */
void log_ratelimit_init(struct log_ratelimit *rl, uint32_t interval_ms, uint32_t burst);
/*
 * May a line go out now?  true: yes, and *@missed is how many were
 * suppressed since the last one that went out (0 if none).  false: it is
 * counted as suppressed.
 */
bool log_ratelimit_ok(struct log_ratelimit *rl, uint64_t *missed);
/* Lines suppressed through @rl since it began. */
uint64_t log_ratelimit_suppressed(struct log_ratelimit *rl);

/* log_msg() through @rl; the line says how many were suppressed before it. */
void log_msg_limited(struct log_ratelimit *rl, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_limited(rl, lvl, ...)					\
	do {								\
		if ((lvl) <= log_level)					\
			log_msg_limited((rl), (lvl), __VA_ARGS__);	\
	} while (0)

#endif
