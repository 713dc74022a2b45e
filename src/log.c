/*
 * log: see log.h.  Each message is formatted into a stack buffer and written
 * with a single write(2) so that lines from different threads never mix.
 */
#include "log.h"

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

void log_msg(int level, const char *fmt, ...)
{
	static const char *const tag[] = {
		[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
		[LOG_ERR] = "error", [LOG_WARNING] = "warning",
		[LOG_NOTICE] = "notice", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
	};
	char buf[2048];
	va_list ap;
	int n;

	va_start(ap, fmt);
	if (use_syslog) {
		vsyslog(level, fmt, ap);
		va_end(ap);
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
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	/* best effort: nothing useful can be done if stderr is gone */
	if (write(STDERR_FILENO, buf, (size_t)n) < 0)
		return;
}
