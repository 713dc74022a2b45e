/* SPDX-License-Identifier: Apache-2.0 */
/*
 * packpush: the small files of a pack read for readers, stored in the
 * kernel's page cache as the pack arrives.
 *
 * A pack read for readers (a reader's miss, readahead, epoch staging: the
 * engine's pf_opts.pack_arrived) brings in a few hundred files that this
 * epoch's readers open soon.  Before, the pack's cache entry was written
 * through the page cache so that each file's OPEN could copy its range
 * from the entry's pages into the file's (fuse/read.c, read_push()): every
 * byte was copied twice and held twice in memory, and the first copy, of
 * the whole pack, ran on io_uring's workers at the kernel's page
 * allocation speed.  Now one thread here stores each file of the pack
 * whose inode the kernel holds straight from the engine's buffer
 * (FUSE_NOTIFY_STORE, one copy), marks it in the pushmap, and the entry
 * is written with O_DIRECT.  The file's OPEN then finds it pushed and
 * copies nothing; a file the kernel did not hold (not looked up yet,
 * evicted) is pushed at its OPEN from the entry as before, read from the
 * cache device.
 *
 * What a push puts in the page cache is only ever the file's own bytes,
 * checked against its chunk id (the engine checks the pack and each
 * member before it offers the pack), and the kernel serves it only
 * through an OPEN the daemon allowed (fuse/access.h): no access rule is
 * skipped.  Not in no-open mode (fuse/noopen.h: its reads are counted at
 * their READ, and a pushed file has none), nor for files over
 * READ_PUSH_MAX.
 *
 * Feed rate: an OPEN of a file pushed here is charged as one pushed at an
 * earlier OPEN (read_push_kept, estimated); an open made before its pack
 * arrived whose reads all found the pushed pages is charged the same way
 * at its RELEASE (packpush_release()).
 *
 * At most PACKPUSH_QUEUE packs wait (each holds one of the engine's
 * buffers); the engine writes the entry of a pack not taken through the
 * page cache, as before.
 *
 * Lifetime: packpush_create() before daemon_start() (the engine's hook
 * gets the handle); packpush_close() once the FUSE loop has ended and
 * before the session and the pushmap go (packs waiting are released,
 * later ones refused); packpush_destroy() after daemon_stop().
 */
#ifndef STAGEFS_FUSE_PACKPUSH_H
#define STAGEFS_FUSE_PACKPUSH_H

#include "fs.h"
#include "prefetch/prefetch.h"

#include <stdbool.h>
#include <stdint.h>

struct packpush;
struct fh;

/* 0, or -errno (no thread); *@out stays NULL when pack_push is off. */
int packpush_create(struct sfs *fs, struct packpush **out);
/* Stop taking packs; release those waiting; join the thread.  NULL is fine. */
void packpush_close(struct packpush *pp);
void packpush_destroy(struct packpush *pp);

/* pf_opts.pack_arrived (@arg: the packpush). */
bool packpush_arrived(void *arg, struct pf_pack *p);

/*
 * RELEASE of @fh (FUSE inode @ino), read through the daemon: if no READ
 * of it delivered data and its pages came from a push, charge the file
 * as read from the page cache (estimated).
 */
void packpush_release(struct sfs *fs, struct fh *fh, uint64_t ino);

#endif
