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

#endif
