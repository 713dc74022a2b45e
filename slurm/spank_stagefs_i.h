/*
 * spank_stagefs_i.h: what the parts of the Slurm plugin share
 * (docs/slurm.md).  spank_stagefs.c holds the SPANK entry points and the
 * plugin's settings; spank_asuser.c runs a piece of work as the job's user
 * in a child process with a deadline; spank_client.c is that work: a
 * WARMUP over the control socket, or the job's row of .stagefs/stats.
 */
#ifndef STAGEFS_SPANK_STAGEFS_I_H
#define STAGEFS_SPANK_STAGEFS_I_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* the most paths one --stagefs names (comma-separated) */
#define SPANK_MAX_PATHS		64
/* one result line from the child, escaped words (docs/control.md framing) */
#define SPANK_LINE_MAX		4096

/* Who the work runs as: the job's user, never root's rights. */
struct spank_user {
	uid_t uid;
	gid_t gid;
	gid_t gids[1024];	/* supplementary groups */
	int ngids;
};

/*
 * Run @fn(@arg, @fd) in a child process that has become @u (groups, gid and
 * uid, all three of real, effective and saved, checked) and write at most
 * one line of result to @fd.  The parent waits at most @timeout_ms, then
 * kills the child; the line (without "\n") lands in @out.  Returns 0 with a
 * line, -ETIMEDOUT (killed; @out holds what it had written), -EPERM (it
 * could not become @u: it did nothing), or -errno.  Never runs @fn as root
 * unless @u is root.
 */
int asuser_run(const struct spank_user *u, int (*fn)(void *arg, int fd), void *arg,
	       int timeout_ms, char *out, size_t outlen);

/* A WARMUP of @paths (relative to the mount root) in shard @shard_i/@shard_n. */
struct client_warmup {
	const char *mount;		/* the stagefs mount root */
	const char *socket;		/* its control socket, or "" to ask the mount */
	const char *const *paths;
	size_t npaths;
	uint32_t shard_i, shard_n;
	int timeout_ms;			/* the whole request, connect included */
};

/*
 * As the job's user (asuser_run): stage @arg (struct client_warmup *) and
 * write one line to @fd:
 *   STAGED status=ok|failed|timeout files=N chunks=N bytes=N
 *          cached_before_bytes=N fetched_bytes=N failed=N failed_files=N
 *          ms=N [fail_path=P fail_msg=M]
 *   STAGED status=error msg=M
 * Returns 0.
 */
int client_warmup(void *arg, int fd);

/* The job's row of MOUNT/.stagefs/stats, read as the job's user. */
struct client_feed {
	const char *mount;
	const char *job;		/* the job's name in the feed rate */
	uid_t uid;
};

/*
 * As the job's user: find @arg's (struct client_feed *) row under "jobs"
 * and write one line to @fd:
 *   FEED found=1 read_bytes=N files_read=N cache_hits=N cache_misses=N
 *        stall_ns=N read_ns=N backend_bytes=N gpu_bytes=N passthrough_opens=N
 *        passthrough_bytes_estimated=N
 *   FEED found=0
 *   FEED error msg=M
 * Returns 0.
 */
int client_feed(void *arg, int fd);

/* Append " KEY=VALUE" to the line in @line (@len bytes), VALUE escaped. */
void client_put_word(char *line, size_t len, const char *key, const char *val);
/* Append " KEY=N". */
void client_put_u64(char *line, size_t len, const char *key, uint64_t v);

#endif
