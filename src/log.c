/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log: see log.h.  Each message is formatted into a stack buffer and written
 * with a single write(2) so that lines from different threads never mix.
 */
#include "log.h"
#include "util.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int log_level = LOG_NOTICE;
static bool use_syslog;

void log_use_syslog(const char *ident)
{
	openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	use_syslog = true;
}

int log_level_parse(const char *name)
{
	static const struct { const char *name; int level; } levels[] = {
		{ "error", LOG_ERR }, { "warning", LOG_WARNING },
		{ "notice", LOG_NOTICE }, { "info", LOG_INFO },
		{ "debug", LOG_DEBUG },
	};

	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		if (!strcasecmp(name, levels[i].name))
			return levels[i].level;
	return -1;
}

static void log_vmsg(int level, const char *suffix, const char *fmt, va_list ap)
{
	static const char *const tag[] = {
		[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
		[LOG_ERR] = "error", [LOG_WARNING] = "warning",
		[LOG_NOTICE] = "notice", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
	};
	char buf[2048];
	int n;

	if (use_syslog) {
		if (suffix && *suffix) {
			vsnprintf(buf, sizeof(buf), fmt, ap);
			syslog(level, "%s%s", buf, suffix);
		} else {
			vsyslog(level, fmt, ap);
		}
		return;
	}
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	n = snprintf(buf, sizeof(buf), "stagefs %02d:%02d:%02d.%03ld %s: ",
		     tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
		     tag[level & 7]);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	if (suffix && *suffix) {
		n += snprintf(buf + n, sizeof(buf) - (size_t)n - 1, "%s", suffix);
		if (n > (int)sizeof(buf) - 2)
			n = (int)sizeof(buf) - 2;
	}
	buf[n++] = '\n';
	/* best effort: nothing useful can be done if stderr is gone */
	if (write(STDERR_FILENO, buf, (size_t)n) < 0)
		return;
}

void log_msg(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, NULL, fmt, ap);
	va_end(ap);
}

/* ---- rate limits ---- */

void log_ratelimit_init(struct log_ratelimit *rl, uint32_t interval_ms, uint32_t burst)
{
	*rl = (struct log_ratelimit){ .interval_ms = interval_ms, .burst = burst };
	pthread_mutex_init(&rl->lock, NULL);
}

bool log_ratelimit_ok(struct log_ratelimit *rl, uint64_t *missed)
{
	uint64_t now = now_ms();
	bool ok;

	pthread_mutex_lock(&rl->lock);
	if (!rl->begin_ms || now - rl->begin_ms >= rl->interval_ms) {
		rl->begin_ms = now ? now : 1;
		rl->printed = 0;
	}
	ok = rl->printed < rl->burst;
	if (ok) {
		rl->printed++;
		*missed = rl->missed;
		rl->missed = 0;
	} else {
		rl->missed++;
		rl->missed_total++;
	}
	pthread_mutex_unlock(&rl->lock);
	return ok;
}

uint64_t log_ratelimit_suppressed(struct log_ratelimit *rl)
{
	uint64_t n;

	pthread_mutex_lock(&rl->lock);
	n = rl->missed_total;
	pthread_mutex_unlock(&rl->lock);
	return n;
}

void log_msg_limited(struct log_ratelimit *rl, int level, const char *fmt, ...)
{
	char suffix[96] = "";
	uint64_t missed;
	va_list ap;

	if (!log_ratelimit_ok(rl, &missed))
		return;
	if (missed)
		snprintf(suffix, sizeof(suffix), " (%llu similar lines suppressed before this one)",
			 (unsigned long long)missed);
	va_start(ap, fmt);
	log_vmsg(level, suffix, fmt, ap);
	va_end(ap);
}
