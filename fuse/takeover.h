/* SPDX-License-Identifier: Apache-2.0 */
/*
 * takeover: the daemon's side of a supervised mount (fuse/supervisor.h):
 * what it gives the supervisor to keep, and how a new daemon takes the
 * mount over from that.
 *
 * The supervisor keeps, for the life of the mount, a duplicate of the
 * /dev/fuse descriptor, so that a daemon's death (SIGKILL, a crash, a
 * planned restart) does not end the FUSE connection, and the takeover
 * state: a versioned record of what the kernel was told and what its node
 * ids mean, which the daemon sends at mount and again when it changes:
 *   - the kernel's INIT request (the new daemon replays it through
 *     session_io_replay_init(): the kernel sends no second INIT);
 *   - the daemon's generation (fuse/handles.h: file handles the kernel
 *     holds from an earlier daemon are told apart and adopted);
 *   - whether the kernel switched to no-open mode (fuse/noopen.h);
 *   - the mount point (the new daemon unmounts it on a clean stop);
 *   - on a multi-dataset mount, the datasets in their index order, as node
 *     ids embed the index (fuse/fs.h): the new daemon adds them in that
 *     order before any other.
 * Node ids of a dataset are its backend's inode numbers, the same in every
 * daemon that opens the same source (manifest order, dir:// inode map);
 * lookup counts start over (a FORGET of a node the new daemon never
 * counted is ignored); .stagefs/ inodes are fixed numbers.
 *
 * The new daemon then asks the kernel to send again the requests the old
 * one had read and not answered (FUSE_NOTIFY_RESEND, Linux 6.9+).  On a
 * kernel without it, those requests stay unanswered: their callers wait
 * until the mount is aborted (docs/restart.md); every later request is
 * served.
 *
 * The channel: a SOCK_SEQPACKET socket the supervisor passes in the
 * environment (STAGEFS_SUPERVISOR_FD; STAGEFS_TAKEOVER=1 for a daemon that
 * takes over).  Each message is one record; the descriptor rides with it
 * in SCM_RIGHTS.
 */
#ifndef STAGEFS_FUSE_TAKEOVER_H
#define STAGEFS_FUSE_TAKEOVER_H

#include "fs.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TAKEOVER_ENV_FD		"STAGEFS_SUPERVISOR_FD"
#define TAKEOVER_ENV_RESUME	"STAGEFS_TAKEOVER"
#define TAKEOVER_ENV_DOWN_MS	"STAGEFS_TAKEOVER_DOWN_MS"	/* now_ms() the daemon before ended */
/* exit statuses the supervisor reads */
#define TAKEOVER_EXIT_HANDOVER	75	/* handed over on purpose: start the next daemon */
#define TAKEOVER_EXIT_REFUSED	76	/* cannot take this state over (a newer or older format) */

struct takeover;

/*
 * One message of the channel, either way: a type word and 1 to
 * TAKEOVER_MAX_FDS descriptors (SCM_RIGHTS): the /dev/fuse one, the state
 * and the handle records, or the state alone.  Send: 0 or -errno.
 * Receive (@flags: recvmsg's, e.g. MSG_DONTWAIT) into @fds: how many
 * descriptors came, 0 at the channel's end, -EPROTO for a message that is
 * not one of these (what came with it closed), or -errno.
 */
#define TAKEOVER_MAX_FDS	3
int takeover_msg_send(int chan, const int *fds, int nfds);
int takeover_msg_recv(int chan, int *fds, int flags);

/*
 * The daemon's channel to its supervisor, from the environment; *@out is
 * NULL where the daemon is not supervised.  A daemon that takes over
 * receives the state and the descriptor here.  Returns 0 or -errno with
 * the reason in @err (TAKEOVER_EXIT_REFUSED is then the exit status).
 */
int takeover_open(struct sfs *fs, struct takeover **out, char *err, size_t errlen);
void takeover_close(struct takeover *t);

/* This daemon takes a mount over (the state was received). */
bool takeover_resuming(const struct takeover *t);
/* The mount's /dev/fuse descriptor the supervisor kept (resuming only). */
int takeover_fuse_fd(const struct takeover *t);
/* The mount point the first daemon mounted (resuming only). */
const char *takeover_mountpoint(const struct takeover *t);
/* Whether the kernel is in no-open mode (resuming only). */
bool takeover_noopen(const struct takeover *t);
/* Whether it is now (once the handshake decided): the next state says so. */
void takeover_set_noopen(struct takeover *t, bool active);
/*
 * The datasets of a multi-dataset mount in index order (resuming only):
 * *@names and *@sources, @n of them, owned by @t.
 */
void takeover_datasets(const struct takeover *t, const char *const **names,
		       const char *const **sources, const bool **hidden, uint32_t *n);
/* now_ms() when the daemon before ended (resuming only; 0: unknown). */
uint64_t takeover_down_ms(const struct takeover *t);
/* The kernel's INIT request to replay (resuming only): its length, or 0. */
size_t takeover_init_request(const struct takeover *t, const void **req);

/*
 * The handle records this daemon keeps (fuse/handles.h), sent to the
 * supervisor with the first state: @fd, owned by the handles table.
 */
void takeover_set_records(struct takeover *t, int fd);
/* The records of the daemon before (resuming), or -1. */
int takeover_old_records(const struct takeover *t);

/*
 * Send the supervisor the state, with the /dev/fuse descriptor the first
 * time.  Called once the mount is up, and again whenever the state changes
 * (a dataset added).  Returns 0 or -errno (logged).
 */
int takeover_publish(struct sfs *fs);

/*
 * Ask the kernel to send again what the daemon before had read and not
 * answered.  Returns 0, or -errno (-EINVAL: the kernel has no
 * FUSE_NOTIFY_RESEND): logged either way.
 */
int takeover_resend(struct sfs *fs);

#endif
