/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mountpoint: the mount point before we mount on it.  A FUSE mount whose
 * daemon was killed stays there, answering ENOTCONN, and a new mount would
 * stack on it silently (leaving the dead one for its own unmount later).
 * See mountpoint.c.
 */
#ifndef STAGEFS_FUSE_MOUNTPOINT_H
#define STAGEFS_FUSE_MOUNTPOINT_H

#include <stddef.h>

/*
 * Detach (lazy unmount) every dead FUSE mount stacked on @mnt (an absolute
 * path), with a notice in the log for each.  A live mount, or any other
 * filesystem, is left as it is.  Returns 0 (nothing dead there any more)
 * or -errno with the reason in @err.
 */
int mountpoint_clear_dead(const char *mnt, char *err, size_t errlen);
/*
 * Detach our mount at @mnt (a daemon that took the mount over: libfuse
 * did not mount it, so it cannot unmount it).  0 or -errno.
 */
int mountpoint_unmount(const char *mnt);

#endif
