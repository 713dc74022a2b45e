/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pushmap: the inodes whose whole file the daemon stored in the kernel's
 * page cache at an OPEN (fuse/read.c, read_push()), so that the next OPEN
 * of the same kernel inode does not store it again.
 *
 * A file served from its pack's cache entry is pushed at its OPEN and
 * opened with keep_cache: its reads then need no READ request.  Pushing it
 * at every OPEN costs the daemon a read of the range and a copy into pages
 * the kernel most likely still holds: on an epoch over files already in
 * the page cache that was two thirds of the epoch's time.  The kernel's
 * pages of an inode live at most as long as the inode, and the kernel
 * sends FORGET when it evicts one; so a pushed inode is remembered until
 * its FORGET.  Pages reclaimed while the inode stays are read with READ
 * requests, served from the pack entry as for any file not pushed: the
 * map only saves work, and whatever it says, every byte a reader gets is
 * right.
 *
 * The map is a direct-mapped table of inode numbers (8 bytes a slot,
 * allocated at the first push, zeroed pages the kernel gives on touch): a
 * collision forgets the older inode, which is then pushed again at its
 * next OPEN.  Lock-free; every function may be called from any thread.
 */
#ifndef STAGEFS_FUSE_PUSHMAP_H
#define STAGEFS_FUSE_PUSHMAP_H

#include <stdbool.h>
#include <stdint.h>

struct pushmap;

/* A map of about @slots inodes (rounded up to a power of two, at least 4,096). */
struct pushmap *pushmap_create(uint64_t slots);
void pushmap_destroy(struct pushmap *pm);

/* Was @ino pushed since its last FORGET (as far as the map remembers)? */
bool pushmap_has(struct pushmap *pm, uint64_t ino);
/* @ino was pushed whole.  Without memory for the table it is not remembered. */
void pushmap_add(struct pushmap *pm, uint64_t ino);
/* FORGET of @ino: the kernel evicted it, with its pages. */
void pushmap_forget(struct pushmap *pm, uint64_t ino);

#endif
