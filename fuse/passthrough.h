/* SPDX-License-Identifier: Apache-2.0 */
/*
 * passthrough: FUSE passthrough for fully cached files.
 *
 * A file whose cache file holds every chunk, each verified against its hash
 * since the daemon started, is handed to the kernel at OPEN: the cache file
 * is registered as the open's backing file and the kernel reads it itself,
 * so no READ for that open reaches the daemon.  Partially cached files stay
 * on the daemon path; the first open after a file became complete goes
 * passthrough.  Files no larger than passthrough_min_size (default 0: every
 * non-empty file may go) stay on the daemon path too.  docs/passthrough.md
 * has the design, the guarantees and the figures.
 *
 * Two builds:
 *  - libfuse >= 3.17 (CONFIG_FUSE_PASSTHROUGH_API): FUSE_CAP_PASSTHROUGH,
 *    fuse_passthrough_open() and fi->backing_id.
 *  - libfuse 3.14-3.16 have no API, so the session's I/O is hooked
 *    (fuse/session_io.h): the hooks add FUSE_PASSTHROUGH to the INIT
 *    reply and FOPEN_PASSTHROUGH + backing_id to the OPEN replies that
 *    passthrough_open() chose, and the backing files are registered with
 *    the FUSE_DEV_IOC_BACKING_OPEN ioctl on /dev/fuse directly.
 *
 * The kernel lets an inode be open either through the page cache (daemon
 * path) or through one backing file, never both at once (a mismatching open
 * fails with EIO in the opener).  So this module keeps a table of the
 * inodes it has seen open: while an inode has daemon-path opens, new opens
 * stay on the daemon path; while it has passthrough opens, new opens share
 * its one backing id.  The table holds open inodes, and inodes whose backing
 * id is kept registered after their last RELEASE for the next open ("idle",
 * at most 65,536, closed at FORGET).
 *
 * Lifetime: passthrough_create() after session_io_create() (it registers
 * its INIT hook there) and before the session is mounted,
 * passthrough_attach() right after fuse_session_mount(),
 * passthrough_handshake() before the session loop starts (it answers the
 * kernel's INIT and decides), passthrough_destroy() after the loop ended.
 */
#ifndef STAGEFS_FUSE_PASSTHROUGH_H
#define STAGEFS_FUSE_PASSTHROUGH_H

#include "fs.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct passthrough;

/*
 * Create the passthrough state of @fs for mode fs->cfg.passthrough.  With
 * passthrough=off it does nothing later but count nothing.  Returns 0 or
 * -ENOMEM; release with passthrough_destroy().
 */
int passthrough_create(struct sfs *fs, struct passthrough **out);
/* Unpin what is still pinned and free.  After the session loop only. */
void passthrough_destroy(struct passthrough *pt);

/*
 * Note the mounted session @se's /dev/fuse descriptor (backing files are
 * registered on it).  Right after fuse_session_mount().  Returns 0.
 */
int passthrough_attach(struct passthrough *pt, struct fuse_session *se);

/*
 * Called from the INIT handler (sfs_init): ask for FUSE_PASSTHROUGH where
 * the kernel offers it and the mode allows it.
 */
void passthrough_init(struct passthrough *pt, struct fuse_conn_info *conn);

/*
 * Read and answer the kernel's INIT on @se (the first request), then check
 * that backing files can be registered.  passthrough=auto turns itself off
 * with one log line where they cannot; passthrough=on returns -EOPNOTSUPP
 * (kernel) or -EPERM (privileges) with the reason in @err, and the caller
 * fails the mount.  Returns 0 otherwise.
 */
int passthrough_handshake(struct passthrough *pt, struct fuse_session *se,
			  char *err, size_t errlen);

/* True once the handshake enabled passthrough, until a registration fails. */
bool passthrough_active(const struct passthrough *pt);

/* Backing ids kept registered with no open (see passthrough_release()). */
uint32_t passthrough_idle_ids(struct passthrough *pt);

/*
 * Decide how the open of FUSE inode @ino, a regular file of @size bytes
 * whose cache entry is @cf (NULL: it is read through the daemon, e.g. from
 * its pack's entry), is served.  Returns 1 when it goes passthrough:
 * the backing id is set for the reply (fi->backing_id, or the reply hook),
 * @cf is pinned and the counters are charged; 0 for the daemon path; or
 * -ENOMEM.  An open that got 0 or 1 is recorded and must be undone with
 * passthrough_release(pt, ino, <1 or 0>) when it is released, and also when
 * its OPEN reply fails.  May block while the cache file is verified (the
 * first passthrough open of a file after a restart reads it whole).
 */
int passthrough_open(struct passthrough *pt, fuse_req_t req, uint64_t ino,
		     struct cfile *cf, uint64_t size, struct fuse_file_info *fi);
void passthrough_release(struct passthrough *pt, uint64_t ino, bool was_passthrough);

/*
 * The kernel forgot FUSE inode @ino: close its idle backing id, if any
 * (or, with a RELEASE still to come, at that RELEASE).
 */
void passthrough_forget(struct passthrough *pt, uint64_t ino);

/*
 * A daemon taking the mount over (fuse/takeover.h): the daemon before
 * answered an OPEN of @ino with @backing_id (0: the daemon path) and the
 * kernel still has it open.  Count it as passthrough_open() would have, so
 * that new opens of @ino match the kernel's mode; @cf (a reference the
 * caller keeps) is pinned while passthrough opens last.  After
 * passthrough_handshake().
 */
void passthrough_adopt(struct passthrough *pt, uint64_t ino, int32_t backing_id,
		       struct cfile *cf);

/* The backing id @ino's passthrough opens share now; 0: none. */
int32_t passthrough_backing_id(struct passthrough *pt, uint64_t ino);

#endif
