/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cephfs_objs: where a CephFS file's bytes lie in the data pool, and
 * reading them there with librados, past the CephFS client.
 *
 * A CephFS file's data is in RADOS objects named "INO.OBJNO" (the inode
 * number in hex, the object's number as 8 hex digits) in the pool its
 * layout names; the layout (stripe unit, stripe count, object size) says
 * which byte of the file is where, as Ceph's Striper computes it.  The
 * walk (backend_cephfs.c) learns every file's inode number and layout from
 * the client it already asks for the file's attributes; this module keeps
 * them by the manifest's inode number (8 bytes a file, saved beside the
 * manifest and mapped, as the manifest is), so that a chunk read is one
 * RADOS read per object it touches and no call to the CephFS client:
 * no path walk, no open, no close, none of the client's one big lock.
 *
 * What it cannot read is left to the client, never guessed: a layout with
 * a pool namespace (not in the legacy layout the client hands out), one
 * whose numbers do not describe a striping, a file whose inode number
 * does not fit, and at read time a missing object (a hole the size of an
 * object, or a file system that keeps small files' data inline in the
 * inode) all answer "not here" (-ENOENT), and the caller reads through
 * libcephfs.
 *
 * The saved map is in the machine's byte order (the cache is this node's)
 * and carries a tag, the caller's name for the manifest it goes with: a
 * map whose tag or entry count differ from the manifest's is refused.
 * Its entries are checked in blocks (XXH3-64), each the first time one of
 * its entries is asked for: a flipped bit sends a file to the client,
 * never to another file's objects.
 */
#ifndef STAGEFS_CEPHFS_OBJS_H
#define STAGEFS_CEPHFS_OBJS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rados/librados.h>

#include "util.h"

struct manifest;

struct cfsobj_layout {
	uint32_t stripe_unit, stripe_count, object_size, reserved;
	int64_t pool;
};

/* Does @l describe a striping this module can follow? */
bool cfsobj_layout_ok(const struct cfsobj_layout *l);

/* One piece of a file range: @len bytes at @obj_off in object @objno, at @buf_off of the range. */
struct cfsobj_extent {
	uint64_t objno, obj_off;
	size_t buf_off, len;
};

/*
 * The pieces of [@off, @off + @len) under @l (cfsobj_layout_ok()), in file
 * order, into @out (room for @max): how many there are (more than @max:
 * call again with more room).  At most @len / stripe_unit + 2.
 */
size_t cfsobj_extents(const struct cfsobj_layout *l, uint64_t off, size_t len,
		      struct cfsobj_extent *out, size_t max);

/* ---- the walk's record ---- */

struct cfsobj_builder;

struct cfsobj_builder *cfsobj_builder_create(void);
void cfsobj_builder_destroy(struct cfsobj_builder *b);
/*
 * The file whose content id is @content is inode @ino laid out as @l.  Any
 * thread.  0; -EINVAL when it cannot be read directly (see the top: it is
 * then left out, and read through the client); -ENOMEM.
 */
int cfsobj_builder_add(struct cfsobj_builder *b, const struct sfs_id *content, uint64_t ino,
		       const struct cfsobj_layout *l);
/* Files added so far. */
size_t cfsobj_builder_count(struct cfsobj_builder *b);
/*
 * The map of @m's files (by their content ids), tagged @tag, into a new
 * buffer *@buf of *@len bytes (free() it).  0 or -errno.
 */
int cfsobj_builder_build(struct cfsobj_builder *b, const struct manifest *m, const char *tag,
			 void **buf, size_t *len);

/* ---- a map ---- */

struct cfsobj_map;

/*
 * Open the map in @buf (@len bytes; the map's from now on: free()d, or
 * munmap()ed if @mapped) for @m, tagged @tag.  0, or -errno (@buf released)
 * with a reason in @err.
 */
int cfsobj_map_open(void *buf, size_t len, bool mapped, const struct manifest *m,
		    const char *tag, struct cfsobj_map **out, char *err, size_t errlen);
/* cfsobj_map_open() of the file @path, mapped. */
int cfsobj_map_open_file(const char *path, const struct manifest *m, const char *tag,
			 struct cfsobj_map **out, char *err, size_t errlen);
void cfsobj_map_close(struct cfsobj_map *map);
/* Files with a place in @map. */
uint64_t cfsobj_map_count(const struct cfsobj_map *map);
/*
 * Where manifest inode @mino's bytes lie: 1 with *@ino, *@l; 0: not
 * recorded; -EBADMSG: the map's block holding it is corrupt.  Either of
 * the last two: read it through the client.
 */
int cfsobj_map_find(const struct cfsobj_map *map, uint64_t mino, uint64_t *ino,
		    struct cfsobj_layout *l);

/* ---- reading ---- */

struct cfsobj_reader;

/*
 * Reads through @rados (the caller's; it must outlive the reader) at
 * snapshot @snapid (CEPH_NOSNAP: the head).  0 or -ENOMEM.
 */
int cfsobj_reader_create(rados_t rados, uint64_t snapid, struct cfsobj_reader **out);
void cfsobj_reader_destroy(struct cfsobj_reader *rd);
/* A read in flight (cfsobj_aread_start()). */
struct cfsobj_aread;

/*
 * Start reading [@off, @off + @len) of inode @ino (laid out as @l) into
 * @buf, every object it touches at once; @cb(@arg) runs once every object
 * has answered, on librados's thread, or on this one before this returns.
 * 0 with *@out set before @cb can run (then cfsobj_aread_end() it, from
 * @cb or after it), or -errno with nothing started: -ENOSPC when the
 * file's pool is past the 16 a reader keeps open (read it through the
 * client), -ENOMEM.  Any thread.
 */
int cfsobj_aread_start(struct cfsobj_reader *rd, uint64_t ino, const struct cfsobj_layout *l,
		       uint64_t off, void *buf, size_t len, void (*cb)(void *arg), void *arg,
		       struct cfsobj_aread **out);
/*
 * The result of the read @ar, which is freed: @len (bytes past an
 * object's end read as zeros, as CephFS gives them), -ENOENT when an
 * object is missing (read it through the client), or another -errno from
 * RADOS (-ETIMEDOUT past the connection's OSD timeout, which bounds every
 * read).
 */
int cfsobj_aread_end(struct cfsobj_aread *ar);

#endif
