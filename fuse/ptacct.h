/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptacct: how the feed rate counts reads through passthrough opens, which
 * never reach the daemon (docs/feedrate.md).
 *
 * Two ways, chosen at mount by passthrough_accounting:
 *  - bpf: an eBPF program (fuse/bpf/ptread.bpf.c) on the kernel's
 *    passthrough read and splice functions counts, for this mount only,
 *    the bytes, calls and time of each (file handle, reader thread).  This
 *    module drains its map every second and at the RELEASE of a handle,
 *    and charges them to the reader thread like READs served from the
 *    cache (stats_passthrough_read()): exact, but for mmap()ed reads,
 *    which no hook sees (an mmap()ed open is charged, at RELEASE, the
 *    rest of its file size, as an estimate).
 *  - estimate: each passthrough open is charged its file size at open
 *    (stats_open_passthrough() with estimate), marked estimated.
 * With passthrough inactive, nothing is read through it ("off").
 *
 * Lifetime: ptacct_create() once the mount serves requests (loading takes
 * 60-230 ms, which neither INIT's reply nor the rings may wait for), its
 * handle then published in fs->pa (read with ptacct_of()), and
 * ptacct_settle(); ptacct_destroy() after the session loop ended.  NULL
 * (no handle) behaves as estimate: a passthrough open served before the
 * handle is published is estimated and never registered, and the hook's
 * reports of such a handle are dropped, so that nothing counts twice.
 */
#ifndef STAGEFS_FUSE_PTACCT_H
#define STAGEFS_FUSE_PTACCT_H

#include "fs.h"

struct fh;

/* @fs's handle, as published (NULL until then, or without one). */
static inline struct ptacct *ptacct_of(struct sfs *fs)
{
	return atomic_load_explicit(&fs->pa, memory_order_acquire);
}

/*
 * Load and attach the BPF program where passthrough may be used and
 * passthrough_accounting allows it.  Returns 0 and *@out (NULL where
 * nothing is loaded: passthrough=off or accounting=estimate), or -errno
 * with *@out NULL and the reason in @why: that is not an error yet,
 * ptacct_settle() decides.  Release with ptacct_destroy().
 */
int ptacct_create(struct sfs *fs, struct ptacct **out, char *why, size_t len);
/*
 * After ptacct_create() and publishing its handle in fs->pa: with passthrough off, the
 * program is detached (its hooks cost syscalls).  Logs one line saying how
 * passthrough reads are counted and why.  @load_ret and @why are
 * ptacct_create()'s.  Returns 0, or -errno with a message in @err where
 * passthrough_accounting=bpf, passthrough is active and the program could
 * not be had (the mount then fails).
 */
int ptacct_settle(struct sfs *fs, int load_ret, const char *why, char *err, size_t errlen);
/* Drain what is left, detach and unload.  @pa may be NULL. */
void ptacct_destroy(struct ptacct *pa);

/* "bpf", "estimate" or "off" for @fs (.stagefs/stats "passthrough_accounting"). */
const char *ptacct_mode(struct sfs *fs);
/*
 * The BPF hook in use: "fentry" (on the kernel's passthrough functions) or
 * "syscalls" (the syscall and io_uring tracepoints, where fentry is
 * refused); "" without.
 */
const char *ptacct_hook(const struct ptacct *pa);
/* True where the reads of passthrough opens are counted exactly (bpf). */
bool ptacct_exact(const struct ptacct *pa);
/* Reads the BPF program dropped (its map was full); 0 without one. */
uint64_t ptacct_lost(struct ptacct *pa);

/*
 * The passthrough open @fh starts (after stats_open_passthrough()): its
 * reads will be charged to its readers.  No-op unless exact.
 */
void ptacct_open(struct ptacct *pa, struct fh *fh);
/*
 * The passthrough open @fh is released: charge what its readers read
 * since the last drain (and, if it was mmap()ed, the estimate of the
 * rest), then forget it.  Call before fh_destroy().  No-op unless exact.
 */
void ptacct_release(struct ptacct *pa, struct fh *fh);

#endif
