/* SPDX-License-Identifier: Apache-2.0 */
/*
 * supervisor: a small process that keeps a mount alive across its
 * daemon's death.
 *
 * `stagefs` with supervise=on forks itself once more before any thread
 * exists: the parent becomes the supervisor, the child the daemon, which
 * mounts and hands the supervisor a duplicate of the /dev/fuse descriptor
 * and the takeover state (fuse/takeover.h).  While the supervisor holds
 * that descriptor, the kernel keeps the FUSE connection when the daemon
 * dies, and the readers' requests wait.  The supervisor then:
 *   - on the daemon's exit 0 (a clean unmount: fusermount3 -u, SIGTERM),
 *     exits 0: the mount is over;
 *   - on its death by a signal, or any other exit, starts a new daemon
 *     (the same command line, from the binary's path, so an upgraded
 *     package's) with the descriptor and the state: it takes the mount
 *     over (fuse/takeover.h) and the readers go on;
 *   - on SIGUSR2 (`stagefs restart MOUNTPOINT`, the package's upgrade),
 *     first runs the new binary to check that it can take the state over
 *     (the command line and config parse, the state's version is known);
 *     only then asks the daemon to hand over (SIGUSR2: it stops reading
 *     requests and exits TAKEOVER_EXIT_HANDOVER without unmounting) and
 *     starts the new one.  A refusal is logged and the running daemon
 *     stays;
 *   - forwards SIGTERM, SIGINT, SIGQUIT and SIGHUP to the daemon;
 *   - gives up after 8 deaths in a row of daemons that never served, or
 *     for less than 0.5 s (a daemon that cannot start, or a request that
 *     crashes every daemon it is sent to again), waiting 0.25 s to 4 s
 *     before each start from the third: it detaches the mount and closes
 *     the descriptor, so the waiting readers get ENOTCONN rather than wait
 *     for ever, and exits 1.
 * What it holds: the channel, the two descriptors, the command line.  It
 * runs no FUSE, cache or backend code.  Its pid is in
 * RUNTIME_DIR/supervisor.pid while it runs.
 */
#ifndef STAGEFS_FUSE_SUPERVISOR_H
#define STAGEFS_FUSE_SUPERVISOR_H

#include <stdbool.h>

/*
 * Become the supervisor of mount @mnt, forking the daemon, which returns
 * (with TAKEOVER_ENV_FD set for takeover_open()).  The supervisor never
 * returns.  @status_fd: the daemonizing parent's status pipe, which the
 * daemon keeps and the supervisor closes.  @pidfile: where to write the
 * supervisor's pid (NULL: nowhere).  @in_supervisor(@arg), if set, runs
 * in the supervisor once the daemon is forked (detaching its stdio).  Returns -errno in the caller if the
 * supervisor cannot be set up (the caller goes on unsupervised).
 */
int supervisor_start(char **argv, const char *mnt, int status_fd, const char *pidfile,
		     void (*in_supervisor)(void *arg), void *arg);

#endif
