/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlsock: the daemon's control socket.
 *
 * A Unix stream socket, RUNTIME_DIR/<XXH3-64 of the mount point>.sock,
 * speaks the protocol of docs/control.md (src/ctlproto.h): warmup, check and
 * evict of trees and file lists, and epoch-order hints.  Each request is
 * answered for the peer's credential (src/cred.h: SO_PEERCRED and
 * SO_PEERGROUPS), with the same access rules as reads through the mount
 * (dataset rules: access_may_read; file modes: as default_permissions).
 * MOUNTPOINT/.stagefs/socket holds the socket's path so clients find it
 * from any path in the mount.
 *
 * One accept thread, one thread per connection (at most 256 at once): a
 * client waiting on a long warmup holds only its own thread, never a FUSE
 * worker.
 */
#ifndef STAGEFS_FUSE_CTLSOCK_H
#define STAGEFS_FUSE_CTLSOCK_H

#include "fuse/fs.h"

/*
 * Create the socket and start serving.  A socket that cannot be created
 * (runtime_dir not writable, path too long) is logged and the daemon runs
 * without one: returns 0 either way unless out of memory.  Stopped by
 * ctlsock_stop().
 */
int ctlsock_start(struct sfs *fs);
/* Close the socket, end every connection (cancelling its work), unlink. */
void ctlsock_stop(struct sfs *fs);
/* .stagefs/socket: the socket path and "\n"; -ENOENT without a socket. */
int ctlsock_text(struct sfs *fs, char **out);

#endif
