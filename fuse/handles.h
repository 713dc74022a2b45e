/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handles: the file handles (fuse_file_info.fh) this daemon gives the
 * kernel, as numbers rather than pointers, so that a daemon that takes a
 * mount over (fuse/takeover.h) can tell a handle it issued from one the
 * kernel got from the daemon before it.
 *
 * A handle is (generation << HANDLE_GEN_SHIFT) | serial: the generation
 * is this daemon's place in the mount's line of daemons (1 for the one
 * that mounted, +1 at each takeover), the serial counts up from 1.  The
 * kernel hands back what it was given, so a handle of another generation
 * is one the kernel still holds from an earlier daemon: the caller
 * rebuilds what it needs from the request (the inode and the caller) and
 * adopts it under that number (handles_adopt), so that its RELEASE frees
 * it.  Nobody but the kernel can send a handle: a user cannot forge one.
 *
 * Lifetime: the kernel sends no RELEASE while a request on the handle is
 * in flight, so handles_get() needs no reference: what it returns lives
 * until the handle's RELEASE, which calls handles_take().
 *
 * Locking: an internal mutex, a leaf.
 */
#ifndef STAGEFS_FUSE_HANDLES_H
#define STAGEFS_FUSE_HANDLES_H

#include <stdbool.h>
#include <stdint.h>

#define HANDLE_GEN_SHIFT	44	/* 2^44 handles per daemon, 2^20 daemons */
#define HANDLE_GEN_MAX		((1u << 20) - 1)
#define HANDLE_GEN_LIMIT	(HANDLE_GEN_MAX + 1u)

enum handle_kind { HANDLE_FILE = 1, HANDLE_DIR, HANDLE_VFILE };

struct handles;

/* A table for generation @gen (1..HANDLE_GEN_MAX).  Returns 0 or -errno. */
int handles_create(uint32_t gen, struct handles **out);
/* Frees the table, not what its handles point to. */
void handles_destroy(struct handles *h);

/* A new handle for @ptr of @kind; 0 if out of memory. */
uint64_t handles_add(struct handles *h, enum handle_kind kind, void *ptr);
/* What handle @id points to if it is of @kind, else NULL. */
void *handles_get(struct handles *h, uint64_t id, enum handle_kind kind);
/* Remove handle @id (of @kind) and return what it pointed to, or NULL. */
void *handles_take(struct handles *h, uint64_t id, enum handle_kind kind);
/* True if @id was issued by an earlier daemon of this mount. */
bool handles_inherited(const struct handles *h, uint64_t id);
/*
 * Put @ptr under inherited handle @id.  If another thread adopted @id
 * first, return its pointer (the caller frees @ptr); else @ptr.  NULL: out
 * of memory (the caller frees @ptr).
 */
void *handles_adopt(struct handles *h, uint64_t id, enum handle_kind kind, void *ptr);
/* Handles open now, and of them the adopted ones. */
void handles_count(struct handles *h, uint64_t *open, uint64_t *adopted);

/*
 * The record of an open regular file a next daemon needs: its inode, and
 * the backing id its OPEN was answered with (0: the daemon path).  The
 * kernel fails an open that mixes the two on one inode, so a daemon taking
 * the mount over must know them for the files open at the takeover.
 *
 * They are kept in a table in a memfd (fuse/takeover.h hands it to the
 * supervisor), written under the handles' lock before the OPEN reply and
 * cleared at RELEASE.  Each record carries a check word: one torn by a
 * daemon killed while writing it fails the check and is skipped (its OPEN
 * was not answered yet, so the kernel sends it again).  Capacity
 * HANDLE_RECORDS_MAX; past it, opens go unrecorded (logged once).
 */
#define HANDLE_RECORDS_MAX	(1u << 20)

struct handle_record {
	uint64_t id;
	uint64_t ino;
	int32_t backing_id;
	uint32_t check;
};

/* Keep records in a new memfd: 0 (*@fd: the memfd, kept by @h) or -errno. */
int handles_records_create(struct handles *h, int *fd);
/* Record file handle @id's inode and backing id (before the OPEN reply). */
void handles_record(struct handles *h, uint64_t id, uint64_t ino, int32_t backing_id);
/*
 * A takeover: read the records of the daemon before from its memfd @fd,
 * keep each under its handle (copied into our own records) and call
 * @each(@arg, record) for it.  Returns how many, or -errno.
 */
long handles_inherit(struct handles *h, int fd,
		     void (*each)(void *arg, const struct handle_record *r), void *arg);
/*
 * Remove the record of @id and say what it was: true with *@r filled, or
 * false (no record).  At RELEASE, with handles_take().
 */
bool handles_take_record(struct handles *h, uint64_t id, struct handle_record *r);

#endif
