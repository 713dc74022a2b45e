/* SPDX-License-Identifier: Apache-2.0 */
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
 *
 * The manifest is paged (format 2): its sections are cut into 64 KiB parts,
 * each with its own XXH3-64 in a part table.  Opening checks the header and
 * the part table only; an accessor that reads from a part verifies it the
 * first time, and a part that fails gives -EIO (logged once, naming the
 * manifest, its version and the part) to every access that touches it,
 * while the rest of the tree is still served.  Format 1 manifests (whole
 * sections) are still read, verified whole at open.
 */
#ifndef STAGEFS_MANIFEST_H
#define STAGEFS_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "util.h"

struct manifest;
struct manifest_builder;

/*
 * What the format says of an entry and a directory: the types every
 * backend answers with (src/backend/backend.h), defined here because the
 * format is what they are read from and built into.  Inode 1 is the
 * dataset's root.
 */
#define SFS_ROOT_INO	1ULL

struct sfs_attr {
	uint64_t ino;
	uint32_t mode;		/* S_IFMT bits | permission bits */
	uint32_t nlink;
	uint32_t uid, gid;
	uint64_t size;
	struct timespec atime, mtime, ctime;
	struct sfs_id content;	/* regular files: cache identity; else zero */
};

struct sfs_dirent {
	char *name;
	uint64_t ino;		/* may be 0 if unknown until lookup */
	uint32_t mode;		/* S_IFMT bits at least */
};

/* A snapshot of one directory, "." and ".." excluded, in a stable order. */
struct sfs_dirlist {
	size_t n;
	struct sfs_dirent *ent;
};

/* Free the names and the array of @dl (not @dl itself). */
void sfs_dirlist_release(struct sfs_dirlist *dl);


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

/*
 * Serialize into @fd instead, a regular file open for writing, from offset
 * 0 (pwrite: the file offset is not used); what it held beyond *@len bytes
 * is not truncated.  The manifest is written as it is made, through a small
 * buffer, so the builder never holds a second copy of it (what publish and
 * dir:// scans of 10 M entries need).  Returns 0 or -errno as
 * manifest_builder_finish(), or the write's -errno (-EIO for a short one).
 */
int manifest_builder_write(struct manifest_builder *b, uint64_t version,
			   int fd, uint64_t *len);

/*
 * Packs (see "Packs" below): add pack @id of @size bytes (1 .. chunk_size)
 * and get its index in *@index; then add the files stored in it with
 * manifest_builder_add_packed(): regular file @path (as with
 * manifest_builder_add(), one chunk, id @chunk: the XXH3-128 of its bytes,
 * 1 .. chunk_size of them) at offset @off of pack @pack.  Its content id is
 * the one an unpacked file of the same bytes gets.  Returns 0 or -errno
 * (-EINVAL: no such pack, outside it, or not one chunk).
 */
int manifest_builder_add_pack(struct manifest_builder *b, const struct sfs_id *id,
			      uint64_t size, uint32_t *index);
int manifest_builder_add_packed(struct manifest_builder *b, const char *path,
				const struct sfs_attr *attr, const struct sfs_id *chunk,
				uint32_t pack, uint32_t off);

/*
 * Change the dataset version recorded in the manifest file @fd (written by
 * manifest_builder_write()) to @version, fixing the header checksum: for a
 * publisher that lost the race for a version after freeing its builder.
 * Returns 0, -EINVAL (not a format 2 manifest) or the I/O's -errno.
 */
int manifest_file_set_version(int fd, uint64_t version);

/*
 * Bytes of memory the builder holds now (arrays, names, chunk ids; not
 * malloc's own overhead): for tools that report their footprint.
 */
size_t manifest_builder_mem(const struct manifest_builder *b);

/* ---- reading ---- */

/*
 * Validate and open a serialized manifest.  On success the manifest owns
 * @buf (freed by manifest_close() with free()) .  On failure @buf is still
 * the caller's and @err says what is wrong ("bad magic", "truncated entry
 * table", ...).  Returns 0 or -EINVAL/-ENOMEM.
 */
int manifest_open(void *buf, size_t len, struct manifest **out,
		  char *err, size_t errlen);

/*
 * Open the manifest stored in file @path: mapped read-only and shared, so
 * the daemon holds none of it in its own memory and every mount of the
 * same file shares its page cache.  Opening reads the header and the part
 * table only (format 2: constant time whatever the size); each part is
 * verified when first touched (see below).  The file must not be truncated
 * or written while open: keep it where only stagefs writes, write it under
 * a temporary name and rename it.  Returns 0 or -errno with @err set
 * (-ENOENT for a missing file, -EINVAL for a bad one).
 */
int manifest_open_file(const char *path, struct manifest **out,
		       char *err, size_t errlen);
void manifest_close(struct manifest *m);

/*
 * Where the parts of a mapped manifest come from when its file does not
 * hold them yet (a copy filled on demand, src/manifest/manifest_lazy.h).  Before an
 * accessor hashes part @part, bytes [@off, @off + @len) of the file, the
 * reader calls @fill; if the part then fails its checksum it calls @fill
 * again with @again set (fetch it even if it is marked present: a torn or
 * damaged local copy) and hashes once more before it refuses the part.
 * @fill returns 0 or -errno (logged by the source); on an error the access
 * fails with EIO and the part is not marked bad, so a later touch tries
 * again.  @fill is called from any thread, concurrently, and must return
 * within a bounded time.  @fetched (optional): bytes fetched so far.
 * @release (optional): called by manifest_close() with @arg.
 */
struct manifest_source {
	int (*fill)(void *arg, uint64_t part, uint64_t off, uint64_t len, bool again);
	uint64_t (*fetched)(void *arg);
	void (*release)(void *arg);
	void *arg;
};

/*
 * As manifest_open_file(), for the file open at @fd (not kept: the caller
 * closes it), whose missing parts @src fills (NULL: none missing).  The
 * header and the part table must already be in the file.  On success the
 * manifest owns @src->arg (@release at close); on failure the caller does.
 */
int manifest_open_fd(int fd, const struct manifest_source *src,
		     struct manifest **out, char *err, size_t errlen);

/* Bytes its source fetched for the manifest so far (0 without a source). */
uint64_t manifest_fetched_bytes(const struct manifest *m);

/*
 * Name the manifest in log lines ("pool/NAME", "dir:///data"); at most 127
 * bytes kept.  Call before the manifest is shared between threads.
 */
void manifest_set_name(struct manifest *m, const char *name);

/* The format version of the manifest: 1 (verified whole at open) or 2 (paged). */
uint32_t manifest_format(const struct manifest *m);

/*
 * Verify every part now (format 2; format 1 was verified at open).
 * Returns 0, or -EIO with the number of bad parts in *@bad_parts (if
 * given); each bad part is logged once.  For tools that need all of it,
 * such as gc, which must not take a bad part's ids for missing ones.
 */
int manifest_verify(struct manifest *m, uint64_t *bad_parts);

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
 * @i < manifest_nids(), or a zero id past the end or in a bad part (so call
 * manifest_verify() first).  For garbage collection.
 */
uint64_t manifest_nids(const struct manifest *m);
void manifest_id(const struct manifest *m, uint64_t i, struct sfs_id *id);
/*
 * Packs (docs/manifest.md): small files stored together in one object of
 * at most chunk_size bytes, named by the XXH3-128 of its bytes.  A packed
 * file has one chunk id (the XXH3-128 of its own bytes, which name no
 * object) and lies at an offset of its pack; its content id is what it
 * would be unpacked.  Manifests without packs have none (npacks 0).
 */
struct manifest_pack {
	struct sfs_id id;	/* object sfs.pack.<id hex> */
	uint64_t size;		/* 1 .. chunk_size bytes */
	uint32_t nmembers;
};

struct manifest_member {
	uint64_t ino;		/* the file (the inode of its first name) */
	uint32_t off;		/* where its bytes start in the pack */
	uint64_t size;		/* its bytes there, 1 .. chunk_size */
	struct sfs_id chunk;	/* their XXH3-128 */
	struct sfs_id content;	/* its content id: of @size and @chunk */
};

uint32_t manifest_npacks(const struct manifest *m);
/*
 * The content id under which the node's cache keeps pack @pack_id whole
 * (docs/cache.md, "Pack entries"): the XXH3-128 of the pack's id with a
 * seed of its own, so that no dataset file's content id (the XXH3-128 of a
 * chunk-id list) can name the same cache entry.
 */
void manifest_pack_content(const struct sfs_id *pack_id, struct sfs_id *out);
/* Pack @pack (< manifest_npacks()): 0, -ENOENT past the end, -EIO. */
int manifest_pack(const struct manifest *m, uint32_t pack, struct manifest_pack *out);
/*
 * Where regular file @ino lies: 0 with its pack in *@pack, its offset in
 * *@off (its bytes are [off, off + size) of the pack, inside it) and, if
 * @pk is not NULL, the pack's record in *@pk; -ENODATA when it is not
 * packed (its chunks are objects), -EINVAL for no regular file, -EIO for a
 * corrupt record.
 */
int manifest_file_pack(const struct manifest *m, uint64_t ino, uint32_t *pack,
		       uint32_t *off, struct manifest_pack *pk);
/*
 * Member @j of pack @pack, in increasing offset order: 0, -ENOENT past the
 * last, -EIO for a record that does not name a file of the pack at that
 * offset whose content id its chunk gives (a crafted manifest cannot make
 * a pack fill another file's cache entry).
 */
int manifest_pack_member(const struct manifest *m, uint32_t pack, uint32_t j,
			 struct manifest_member *out);

/* Path of @ino relative to the root, NUL-terminated; returns its length or -errno. */
int manifest_path(const struct manifest *m, uint64_t ino, char *buf, size_t size);

/* Content id of a file from its chunk-id list: XXH3-128 over size and ids. */
void manifest_content_id(uint64_t size, const struct sfs_id *chunks,
			 uint32_t nchunks, struct sfs_id *out);

#endif
