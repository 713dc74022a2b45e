/*
 * manifest: the binary, versioned, indexed description of one immutable
 * dataset tree (names, types, modes, owners, sizes, times, symlink targets,
 * per-file content ids and chunk lists).
 *
 * The same format serves both sources: `stagefs publish` writes one into
 * RADOS per dataset version, and the dir:// backend builds one in memory from
 * a scan of the source directory (and keeps a copy in the cache, so a
 * remount still works when the source is gone).  The reader works directly
 * on the serialized bytes: lookups are binary searches inside a directory's
 * contiguous, name-sorted children, so a 10 M-entry manifest opens without
 * building any in-memory tree.  The on-disk layout is documented in
 * docs/manifest.md.
 *
 * Inode numbers are entry indexes + 1; the root is entry 0, inode 1.  A
 * regular file with several names (hard links) has one entry per name; all
 * of them report the inode number, nlink and attributes of the first name
 * in entry order.
 *
 * Every field read from the buffer is bounds-checked: a truncated, fuzzed or
 * hostile manifest is rejected by manifest_open() or yields -EIO from the
 * accessor, never a crash or an out-of-bounds read.
 */
#ifndef STAGEFS_MANIFEST_H
#define STAGEFS_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "util.h"

struct manifest;
struct manifest_builder;

/* ---- building ---- */

/* A new empty builder for a dataset cut in @chunk_size chunks. NULL on ENOMEM. */
struct manifest_builder *manifest_builder_create(uint32_t chunk_size);
void manifest_builder_destroy(struct manifest_builder *b);

/*
 * Add one entry.  @path is relative to the dataset root, '/'-separated, no
 * leading slash; "" is the root itself (added implicitly if never given).
 * Parents must be added before children or be added later: the builder
 * sorts at finish.  From @attr it takes mode, nlink, uid, gid, size, atime,
 * mtime, ctime and content (ino is ignored).  @target is the symlink target
 * (symlinks only, else NULL).  @chunks/@nchunks is the file's chunk-id list
 * (may be 0 chunks when the source reads by path, as dir:// does).
 * Returns 0 or -errno (-EEXIST for a duplicate path, -EINVAL for a bad one).
 */
int manifest_builder_add(struct manifest_builder *b, const char *path,
			 const struct sfs_attr *attr, const char *target,
			 const struct sfs_id *chunks, uint32_t nchunks);

/*
 * Add @path as one more name of the regular file @target: a hard link.
 * @target is a path given to manifest_builder_add() before or after this
 * call (not another link).  Every name of the file then has one inode
 * number, the file's attributes and chunks, and nlink = the number of its
 * names (or the nlink given for @target, if larger).  Returns 0 or -errno
 * (-EEXIST for a duplicate path, -EINVAL for a bad one); a @target that is
 * missing or not a regular file fails manifest_builder_finish().
 */
int manifest_builder_link(struct manifest_builder *b, const char *path,
			  const char *target);

/*
 * Serialize.  On success *@buf (malloc'ed, caller frees) holds *@len bytes.
 * Returns 0 or -errno (-ENOENT if a parent directory or a link's file is
 * missing, -EINVAL if a link names something other than a regular file).
 * May be called again, e.g. for the next version.
 */
int manifest_builder_finish(struct manifest_builder *b, uint64_t version,
			    void **buf, size_t *len);

/* ---- reading ---- */

/*
 * Validate and open a serialized manifest.  On success the manifest owns
 * @buf (freed by manifest_close() with free()) .  On failure @buf is still
 * the caller's and @err says what is wrong ("bad magic", "truncated entry
 * table", ...).  Returns 0 or -EINVAL/-ENOMEM.
 */
int manifest_open(void *buf, size_t len, struct manifest **out,
		  char *err, size_t errlen);
void manifest_close(struct manifest *m);

uint32_t manifest_chunk_size(const struct manifest *m);
uint64_t manifest_version(const struct manifest *m);
uint64_t manifest_nentries(const struct manifest *m);
/* Sum of regular-file sizes and number of entries. */
void manifest_totals(const struct manifest *m, uint64_t *bytes, uint64_t *files);

int manifest_getattr(const struct manifest *m, uint64_t ino, struct sfs_attr *out);
int manifest_lookup(const struct manifest *m, uint64_t parent, const char *name,
		    struct sfs_attr *out);
int manifest_readdir(const struct manifest *m, uint64_t ino, struct sfs_dirlist *out);
/* Symlink target into @buf (not NUL-terminated); returns its length or -errno. */
int manifest_readlink(const struct manifest *m, uint64_t ino, char *buf, size_t size);
/* Number of chunk ids recorded for @ino (0 for dir:// manifests). */
uint32_t manifest_nchunks(const struct manifest *m, uint64_t ino);
int manifest_chunk(const struct manifest *m, uint64_t ino, uint32_t idx,
		   struct sfs_id *id);
/*
 * The chunk table: every chunk id any file of the manifest names (a file's
 * ids are a run of it; runs may repeat ids).  manifest_id() gives id @i,
 * @i < manifest_nids(), or a zero id past the end.  For garbage collection.
 */
uint64_t manifest_nids(const struct manifest *m);
void manifest_id(const struct manifest *m, uint64_t i, struct sfs_id *id);
/* Path of @ino relative to the root, NUL-terminated; returns its length or -errno. */
int manifest_path(const struct manifest *m, uint64_t ino, char *buf, size_t size);

/* Content id of a file from its chunk-id list: XXH3-128 over size and ids. */
void manifest_content_id(uint64_t size, const struct sfs_id *chunks,
			 uint32_t nchunks, struct sfs_id *out);

#endif
