/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kinodes: a bound on the inodes (and dentries) the kernel keeps for the
 * mount, kernel_inodes_max.
 *
 * Every LOOKUP or READDIRPLUS entry the daemon answers gives the kernel an
 * inode and a dentry that it keeps, once unused, until memory pressure
 * reclaims them: about 1.1 KiB of slab per entry (fuse_inode 896 B, dentry
 * 192 B), 9 GB after a walk of 10 M entries.  entry_timeout and
 * attr_timeout do not free them: an expired FUSE dentry is only revalidated
 * at its next use (the kernel deletes expired dentries at their last dput
 * only for virtiofs, `delete_stale`).  So the daemon counts the inodes the
 * kernel holds a lookup reference to (+1 per entry reply, -nlookup per
 * FORGET) and, above kernel_inodes_max, asks the kernel to drop the oldest
 * (in the order first looked up) with FUSE_NOTIFY_PRUNE (protocol 7.45,
 * Linux 6.18; the kernel prunes the unused dentries of each inode, and an
 * inode nothing else holds is evicted, which sends its FORGET), until 90 %
 * of the bound is left.  An inode in use (an open file, a process's cwd, a
 * directory with cached children) survives the prune; it is asked again
 * later.  An evicted inode loses its page cache: the next read of that file
 * goes to the daemon (the cache file, not the source).
 *
 * Cost: 32-64 bytes of a hash table (16 a slot, at most half full) and 8
 * of a queue per inode the kernel holds (bounded by the setting), a mutex taken once per LOOKUP reply and
 * once per READDIRPLUS reply.  With kernel_inodes_max = 0, or a kernel older
 * than protocol 7.45, nothing is counted and nothing is pruned.
 *
 * Thread safety: every function may be called from any thread; one thread
 * of this module sends the prunes.
 */
#ifndef STAGEFS_FUSE_KINODES_H
#define STAGEFS_FUSE_KINODES_H

#include <stddef.h>
#include <stdint.h>

struct kinodes;
struct fuse_session;

/* A tracker for at most @max kernel inodes (0: off).  NULL on ENOMEM. */
struct kinodes *kinodes_create(uint64_t max);
/* Stops the prune thread; frees everything.  NULL is fine. */
void kinodes_destroy(struct kinodes *k);

/*
 * Start counting and pruning on @se, whose kernel speaks FUSE 7.@minor
 * (from INIT).  Below 7.45 it logs once and stays off.
 */
void kinodes_start(struct kinodes *k, struct fuse_session *se, unsigned minor);

/* The kernel is about to get one lookup reference to each of @ino[0..@n). */
void kinodes_add(struct kinodes *k, const uint64_t *ino, size_t n);
/* FORGET: the kernel dropped @nlookup references to @ino. */
void kinodes_forget(struct kinodes *k, uint64_t ino, uint64_t nlookup);
/* BATCH_FORGET: kinodes_forget() of each of @f[0..@n), under one lock. */
struct fuse_forget_data;
void kinodes_forget_batch(struct kinodes *k, const struct fuse_forget_data *f, size_t n);

/* Inodes the kernel holds a reference to, as counted; prunes asked so far. */
uint64_t kinodes_count(struct kinodes *k);
uint64_t kinodes_pruned(struct kinodes *k);

#endif
