/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_stagefs_i.h: what the parts of the Slurm plugin share
 * (docs/slurm.md).  spank_stagefs.c holds the SPANK entry points;
 * spank_conf.c the plugstack.conf arguments and the user's options;
 * spank_job.c the job's user, node and shard, and the state its prolog
 * leaves its steps; spank_asuser.c runs a piece of work as the job's user
 * in a child process with a deadline; spank_client.c is that work: a
 * WARMUP over the control socket, or the job's row of .stagefs/stats;
 * spank_peers.c makes the job's nodes the node's peer group.
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

#include <slurm/spank.h>

struct ctl_msg;

/* ---- spank_conf.c ---- */

#define CONF_STATEDIR		"/run/stagefs/slurm"
#define CONF_WAIT_S		300
#define CONF_MAX_WAIT_S		3600
/* the daemon's default peer port: below 1024, so no user can take it first */
#define CONF_PEER_PORT		785
#define OPT_PATHS_MAX		4096	/* bytes of a --stagefs argument */

/* The administrator's settings: the plugstack.conf arguments. */
struct conf {
	char mount[PATH_MAX];
	char socket[PATH_MAX];
	char statedir[PATH_MAX];
	unsigned wait_s, max_wait_s;
	bool onfail_fail;
	bool shard_all;		/* every node stages all of the data */
	char peers_file[PATH_MAX];	/* the daemon's peers_file; "": no peer groups */
	unsigned peer_port;		/* every node's peer_listen port (CONF_PEER_PORT) */
	char peer_host[256];		/* a node's peer address; %n: its name */
	bool ok;		/* parsed without error, and mount= given */
};
extern struct conf conf;

/* The user's options. */
struct conf_opt {
	bool given;			/* --stagefs */
	char paths[OPT_PATHS_MAX];	/* its argument: PATH[,PATH...] */
	unsigned wait_s;		/* --stagefs-wait, 0: conf's */
	int onfail;			/* --stagefs-onfail: -1 conf's, 0 run, 1 fail */
	int shard_all;			/* --stagefs-shard: -1 conf's, 0 node, 1 all */
};
extern struct conf_opt conf_opt;

/* Parse the plugstack.conf arguments into conf.  0, or -1 (logged). */
int conf_parse(int ac, char **av);
/* Register the options (slurm_spank_init, in every context that parses them). */
void conf_register_options(spank_t sp);
/*
 * In the prolog and epilog the options come from the job's environment,
 * not through their callbacks.  0 (conf_opt set) or -1 (a bad value, logged).
 */
int conf_opts_from_env(spank_t sp);
/* The effective wait (s), failure policy and sharding: the user's, within conf's. */
unsigned conf_wait_s(void);
bool conf_onfail_fail(void);
bool conf_shard_all(void);

/* Who the work runs as: the job's user, never root's rights. */
struct spank_user {
	uid_t uid;
	gid_t gid;
	gid_t gids[1024];	/* supplementary groups */
	int ngids;
};

/* ---- spank_job.c ---- */

#define STATE_PATH_MAX		(PATH_MAX + 300)	/* STATEDIR/JOBID.NODE.reported */

/* The job's user, its groups from the user database (prolog, epilog).  0 or -1. */
int job_user_from_db(spank_t sp, struct spank_user *u);
/* The same in slurmstepd, with the groups Slurm gave the job.  0 or -1. */
int job_user_from_step(spank_t sp, struct spank_user *u);
/*
 * This node's name in Slurm: slurmd puts SLURMD_NODENAME in the prolog's
 * and epilog's environment, and slurmstepd in its own (the job's
 * environment may carry the batch node's).  Several slurmd on one machine
 * (MULTIPLE_SLURMD) are several nodes.  Static storage.
 */
const char *job_node(void);
/*
 * This node's index in the job's node list and the list's length, from the
 * prolog's environment (SLURM_NODELIST, the job's nodes); the node's name
 * into @node.  0, or -1 (then 0/1: the node stages everything).
 */
int job_node_shard(uint32_t *idx, uint32_t *cnt, char *node, size_t nodelen);
/* The wall clock in ms. */
uint64_t job_now_ms(void);
/* The job's name in the feed rate: what the cgroup rule names a Slurm job. */
void job_name(uint32_t jobid, char *out, size_t len);
/* STATEDIR/JOBID.NODE@suffix: a node name never holds '/' nor starts with '.' */
void job_state_path(uint32_t jobid, const char *suffix, char *out, size_t len);
/* Write the state file's one line (and forget it was reported).  0 or -errno. */
int job_state_write(uint32_t jobid, const char *line);
/*
 * Read the state file into @buf and parse it into @m.  0, -EPERM (the
 * directory is not root's alone), -EINVAL (not a STAGED line) or -errno.
 */
int job_state_read(uint32_t jobid, char *buf, size_t len, struct ctl_msg *m);

/*
 * The state directory, made (0700) if missing and trusted only if it is
 * root's alone.  0, -EPERM or -errno.
 */
int job_statedir_ready(void);

/* ---- spank_peers.c ---- */

/*
 * The node's peer group is the union of the nodes of the jobs running on
 * it (peers_file= given): at a job's start, add its nodes
 * (SLURM_JOB_NODELIST), at its end take them out, and have the daemon
 * reread its peers_file.  Run as root in a child with a deadline.  0 with
 * a summary in @msg, or -1 with the reason in @msg.
 */
int peers_job_start(uint32_t jobid, char *msg, size_t len);
int peers_job_end(uint32_t jobid, char *msg, size_t len);
/*
 * In slurmstepd as root, at each step's start: if the node's peer group
 * leaves out some of the job's nodes (past PEERS_MAX, shared fairly between
 * the jobs on the node), and that count was not told the job yet, a
 * sentence for the job's output in @msg; else "".
 */
void peers_step_check(uint32_t jobid, char *msg, size_t len);

/* ---- spank_asuser.c ---- */

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

/* ---- spank_client.c ---- */

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
/* The number in word KEY=N of @m, or 0. */
uint64_t client_msg_u64(const struct ctl_msg *m, const char *key);

#endif
