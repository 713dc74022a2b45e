/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend: where a dataset's bytes come from.
 *
 * A backend presents one immutable dataset snapshot as an inode tree and
 * reads its regular files chunk by chunk.  It is an ops table filled with
 * designated initializers (fio's ioengine_ops, Redis's ae_*): the directory
 * backend (backend_dir.c, "dir://") needs no cluster and keeps most tests
 * fast; the RADOS backend (backend_rados.c, "rados://") reads published,
 * content-addressed datasets.
 *
 * Inode numbers are the backend's own; 1 (SFS_ROOT_INO) is the dataset root.
 * Every call may come from any FUSE worker thread at the same time: backends
 * do their own locking.  Nothing here replies to FUSE; calls return 0 (or a
 * length) or -errno.
 *
 * The cache names a file's cache file by sfs_attr.content: a 128-bit id that
 * changes whenever the file's bytes may have changed (RADOS: XXH3-128 of the
 * chunk-id list; dir: XXH3-128 of path, size, mtime, ctime and inode).
 */
#ifndef STAGEFS_BACKEND_H
#define STAGEFS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#include "manifest/manifest.h"	/* struct sfs_attr, sfs_dirent, sfs_dirlist: the format's */
#include "util.h"

struct sfs_config;
struct peer_group;

struct backend;
struct backend_aio;	/* one asynchronous chunk read in flight */

struct backend_ops {
	const char *scheme;	/* "dir", "rados" */

	/*
	 * Open the dataset named by @uri (scheme included).  On failure returns
	 * -errno and a message fit for the user in @err.  The backend is
	 * released with ->destroy.
	 */
	int (*create)(const char *uri, const struct sfs_config *cfg,
		      struct backend **out, char *err, size_t errlen);
	void (*destroy)(struct backend *be);

	int (*getattr)(struct backend *be, uint64_t ino, struct sfs_attr *out);
	/* Look @name up in @parent.  Takes one lookup reference (see forget). */
	int (*lookup)(struct backend *be, uint64_t parent, const char *name,
		      struct sfs_attr *out);
	/* Drop @nlookup references taken by lookup.  Optional. */
	void (*forget)(struct backend *be, uint64_t ino, uint64_t nlookup);
	/* Snapshot directory @ino into @out (caller releases it). */
	int (*readdir)(struct backend *be, uint64_t ino, struct sfs_dirlist *out);
	/* Copy the symlink target (not NUL-terminated); returns its length. */
	int (*readlink)(struct backend *be, uint64_t ino, char *buf, size_t size);

	/*
	 * Read chunk @idx of regular file @file into @buf.  @len is the
	 * chunk's exact length (chunk_size, shorter for the last chunk).
	 * Returns @len or -errno; a backend that knows the chunk's hash (RADOS)
	 * verifies it and returns -EIO on a mismatch, never the bad bytes.
	 * Blocks for at most the backend's configured timeout.
	 */
	int (*read_chunk)(struct backend *be, const struct sfs_attr *file,
			  uint32_t idx, void *buf, size_t len);

	/*
	 * Optional asynchronous form of read_chunk, in two steps, for an
	 * engine that keeps many reads in flight on one thread.  ->aio_start
	 * begins reading chunk @idx into @buf (@len as for read_chunk) and
	 * returns 0 with a handle in *@out, or -errno (nothing started, @done
	 * never runs).  @done(@arg) then runs exactly once, possibly before
	 * aio_start returns and on a thread the daemon does not own
	 * (librados): it must only hand over.  Until then @buf may still be
	 * written.  The caller then calls ->aio_finish on its own thread: it
	 * checks the bytes as read_chunk does (-EIO, logged, on a bad one),
	 * releases the handle and returns @len or -errno.  Where the bytes
	 * were checked against their XXH3-128 (a content address), that hash
	 * is stored in *@hash and *@hashed set, so the caller need not hash
	 * them again.  *@from_peer is set when the bytes came from a member of
	 * the node's peer group (->peers) instead of the backend itself: they
	 * were checked against the chunk's content address all the same.
	 * ->destroy waits for every read started to be finished.
	 */
	int (*aio_start)(struct backend *be, const struct sfs_attr *file,
			 uint32_t idx, void *buf, size_t len,
			 void (*done)(void *arg), void *arg,
			 struct backend_aio **out);
	int (*aio_finish)(struct backend *be, struct backend_aio *h,
			  struct sfs_id *hash, bool *hashed, bool *from_peer);

	/*
	 * Optional, for datasets whose manifest has packs (be->m,
	 * manifest_file_pack()): begin reading bytes [@off, @off + @len) of
	 * pack @pack into @buf, as aio_start does a chunk; ->aio_finish ends
	 * it and checks only the length (*@hashed false): the caller checks
	 * each file in the range against its own chunk id.  A demand read of
	 * one packed file goes through aio_start, which reads its range alone.
	 */
	int (*pack_aio_start)(struct backend *be, uint32_t pack, uint64_t off,
			      size_t len, void *buf, void (*done)(void *arg),
			      void *arg, struct backend_aio **out);
	/*
	 * pack_aio_start() waited for, as read_chunk is aio_start waited
	 * for: @len or -errno (only the length checked).  With pack_aio_start.
	 */
	int (*read_pack)(struct backend *be, uint32_t pack, uint64_t off, size_t len,
			 void *buf);
	/*
	 * Optional: true when another member of the node's peer group owns
	 * pack @pack: that node reads it whole, this one asks it for files.
	 */
	bool (*pack_remote)(struct backend *be, uint32_t pack);

	/*
	 * Optional, for sources that are plain files (dir://): chunk @idx of
	 * @file lies as is at *@off of the file ->source_open opens for the
	 * caller, who reads it itself (through io_uring).  Checks that the
	 * file is still the version mounted; returns 0 with *@fd and *@off
	 * set, or -errno (logged).  The caller then passes what its read of
	 * @len bytes returned (the byte count or -errno) to ->source_close,
	 * which closes @fd and returns @len, or -EIO (logged) for a failed or
	 * short read.
	 */
	int (*source_open)(struct backend *be, const struct sfs_attr *file,
			   uint32_t idx, size_t len, int *fd, off_t *off);
	int (*source_close)(struct backend *be, const struct sfs_attr *file,
			    int fd, ssize_t res, size_t len);

	/*
	 * Optional: true when ->aio_start of chunk @idx of @file will ask a
	 * member of the peer group (->peers) for it first, not the backend,
	 * as things stand now.  The engine takes no backend_max_rate tokens
	 * for such a fill: the cap is on the storage network's bytes.
	 */
	bool (*peer_first)(struct backend *be, const struct sfs_attr *file, uint32_t idx);

	/* Optional: dataset totals for statfs (bytes, files). */
	int (*statfs)(struct backend *be, uint64_t *bytes, uint64_t *files);
	/* Optional: extended attributes, with getxattr(2)/listxattr(2) rules. */
	ssize_t (*getxattr)(struct backend *be, uint64_t ino, const char *name,
			    void *buf, size_t size);
	ssize_t (*listxattr)(struct backend *be, uint64_t ino, char *buf,
			     size_t size);
};

/* Every backend embeds this as its first member. */
struct backend {
	const struct backend_ops *ops;
	uint32_t chunk_size;	/* fixed for the dataset's lifetime */
	char *uri;		/* as given, for logs and stats */
	struct manifest *m;	/* the dataset's tree (both backends keep one) */
	/*
	 * The node's peer group (src/peer/peer.h), set by the daemon right after
	 * backend_open() where chunks may be shared, or NULL.  A backend whose
	 * chunks are content-addressed (published rados:// datasets) asks the
	 * chunk's owner in ->aio_start before reading it itself; others ignore
	 * it.  It outlives the backend.
	 */
	struct peer_group *peers;
	/*
	 * The dataset and version as a peer group names it in a request
	 * (struct peer_loc): a hash of the pool, namespace, name and version,
	 * the same on every node; 0 for a backend that does not share chunks.
	 */
	uint64_t peer_tag;
};

/*
 * The metadata ops of a backend whose tree is ->m (src/manifest/manifest.h): both
 * backends point their ops table at these.
 */
int backend_manifest_getattr(struct backend *be, uint64_t ino, struct sfs_attr *out);
int backend_manifest_lookup(struct backend *be, uint64_t parent, const char *name,
			    struct sfs_attr *out);
int backend_manifest_readdir(struct backend *be, uint64_t ino, struct sfs_dirlist *out);
int backend_manifest_readlink(struct backend *be, uint64_t ino, char *buf, size_t size);
int backend_manifest_statfs(struct backend *be, uint64_t *bytes, uint64_t *files);

/*
 * ->read_chunk of a backend whose reads are asynchronous (->aio_start,
 * ->aio_finish): one started and waited for, so that whatever bounds an
 * asynchronous read (the backend's timeout) bounds this one too.
 */
int backend_read_chunk_aio(struct backend *be, const struct sfs_attr *file, uint32_t idx,
			   void *buf, size_t len);

/*
 * Open the backend whose scheme prefixes @uri ("dir:///data",
 * "rados://pool/name").  A bare absolute path means dir://.
 * Returns 0 or -errno with a message in @err.
 */
int backend_open(const char *uri, const struct sfs_config *cfg,
		 struct backend **out, char *err, size_t errlen);
void backend_close(struct backend *be);

/* Length of chunk @idx of a file of @size bytes cut in @chunk_size pieces. */
static inline size_t backend_chunk_len(uint64_t size, uint32_t chunk_size,
				       uint32_t idx)
{
	uint64_t off = (uint64_t)idx * chunk_size;

	if (off >= size)
		return 0;
	return (size_t)(size - off < chunk_size ? size - off : chunk_size);
}

extern const struct backend_ops backend_dir_ops;
#ifdef CONFIG_HAVE_RADOS
extern const struct backend_ops backend_rados_ops;
#endif
#ifdef CONFIG_HAVE_CEPHFS
extern const struct backend_ops backend_cephfs_ops;
#endif
#ifdef CONFIG_HAVE_S3
extern const struct backend_ops backend_s3_ops;
#endif

#endif
