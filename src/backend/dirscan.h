/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dirscan: scan a directory tree into a manifest with several threads, and
 * tell cheaply whether the tree has changed since.
 *
 * The dir:// backend's metadata (backend_dir.c).  A scan takes one lstat per
 * entry; on a disk, NFS or Lustre those wait on I/O or on the server, so
 * the scan spreads directories over @threads workers (a shared heap of
 * directories, breadth first; each worker reads one directory, fstatat()s
 * its entries and hands them to the manifest builder in batches under the
 * builder's lock).  Entry order does not matter: the builder sorts at finish.
 *
 * Besides the manifest a scan records a stamp of every directory: its path,
 * inode number, mtime and ctime, taken from the open directory before its
 * entries are read.  Adding, removing or renaming an entry changes its
 * directory's mtime and ctime, so dirscan_unchanged() over the stamps (one
 * stat per directory, no readdir, no stat of any file) tells whether the
 * tree's set of names may have changed.  What it cannot see, by design: a
 * file's contents, size, times, mode or owner changed in place (no name
 * added or removed), and a change whose new times equal the recorded ones
 * (a clock or timestamp granularity coarser than the change rate, a
 * directory's times set back with utimensat, an NFS client's attribute cache
 * still holding the old times).  Callers say so in their docs and offer a
 * full rescan.
 *
 * Directories are opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
 * under the root's descriptor, so a directory swapped for a symlink during
 * the scan is refused, not followed out of the tree.
 *
 * Serving while scanning.  The manifest numbers entries breadth-first from
 * the root, each directory's children consecutive and in bytewise name
 * order (manifest_i.h), so the inode numbers of a directory's children are
 * known as soon as that directory and every directory before it in that
 * order have been read: they need only the counts of those directories'
 * children, never the rest of the tree.  The workers therefore take
 * directories in breadth-first order (a heap ordered by depth, then by
 * parent's order, then by name), and the scan keeps, for every directory
 * read, its children's sorted names and types; the read prefix of that
 * order is the part of the tree already known.  dirscan_live_*() answer
 * lookups, readdirs, getattrs and readlinks in that part with exactly the
 * inode numbers and attributes the finished manifest will give (attributes
 * are taken from the source at the call, as the scan takes them), and wait
 * for the scan to reach anything past it.  So a mount can answer at once,
 * and the switch to the manifest changes nothing the kernel holds.  The
 * price: about the names once more (name, 4-byte offset, 1-byte type per
 * entry) until the manifest replaces them.  Two cases are left to the
 * manifest (-EAGAIN): a directory holding a file with several names (a hard
 * link's inode number is that of its first name in the whole tree) and
 * anything asked after the scan has ended.  A scan that fails (a directory
 * that cannot be read, removed or swapped during the scan) stops; the part
 * already known is still served and everything else gives -EIO, never an
 * empty or partial listing.
 *
 * The manifest is a function of the tree only, not of the threads' timing:
 * the builder sorts, and a file with several names gets a content id that
 * does not depend on which name the scan met first.
 */
#ifndef STAGEFS_DIRSCAN_H
#define STAGEFS_DIRSCAN_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

struct dirscan_result {
	void *manifest;		/* serialized manifest (manifest.h); free() */
	size_t manifest_len;
	void *stamps;		/* the directories' stamps, for dirscan_unchanged(); free() */
	size_t stamps_len;
	uint64_t entries, bytes, skipped, dirs;
};

struct dirscan;

/*
 * Start scanning the tree under the directory @rootfd (duplicated: @rootfd
 * stays the caller's; its path @root is only for messages, and is copied)
 * with @threads workers (at least 1) into a manifest of @chunk_size chunks,
 * each worker sleeping @delay_us after each directory (0; for tests that
 * need a slow scan).  Returns once the root directory has been read, 0 with
 * *@out set (release it with dirscan_destroy()), or -errno with a message
 * in @err (nothing to release).
 */
int dirscan_start(int rootfd, const char *root, unsigned threads,
		  uint32_t chunk_size, unsigned delay_us, struct dirscan **out,
		  char *err, size_t errlen);

/*
 * Another source than a local directory (CephFS through libcephfs, say):
 * the same scan, threads, manifest and live index over calls of the
 * source's own, with no stamps (the source says cheaply whether its tree
 * changed, or not at all).  Each call may come from any worker thread,
 * several at once; @rel is relative to the root ("" is the root).
 */
struct dirscan_entry {
	const char *name;	/* valid until the next readdir call on the directory */
	struct sfs_attr a;	/* as the manifest records it (content id set for files) */
	bool skip;		/* not a file, directory or symlink: not listed */
	bool multi;		/* a regular file with several names ... */
	uint64_t dev, ino;	/* ... known by these across the tree */
};

struct dirscan_source {
	const char *root;	/* for messages */
	void *arg;
	/* open directory @rel: 0 with *@dir set, or -errno */
	int (*opendir)(void *arg, const char *rel, void **dir);
	/*
	 * The next entry of @dir (never "." or ".."): 1 with *@e filled (a
	 * symlink's target in @target, @tlen bytes), 0 at the end, or -errno.
	 */
	int (*readdir)(void *arg, void *dir, const char *rel, struct dirscan_entry *e,
		       char *target, size_t tlen);
	void (*closedir)(void *arg, void *dir);
	/*
	 * @rel's attributes now, as readdir gives them: 0 or -errno (live
	 * index).  @type (S_IFREG, S_IFDIR, S_IFLNK) is what the scan saw; a
	 * source that cannot tell cheaply may take it as given.
	 */
	int (*getattr)(void *arg, const char *rel, uint32_t type, struct sfs_attr *a);
	/* @rel's target: its length, or -errno (live index) */
	int (*readlink)(void *arg, const char *rel, char *buf, size_t size);
};

/*
 * dirscan_start() over @src (copied; its arg must live until
 * dirscan_destroy()), whose root has attributes @root_attr.
 */
int dirscan_start_source(const struct dirscan_source *src, const struct sfs_attr *root_attr,
			 unsigned threads, uint32_t chunk_size, unsigned delay_us,
			 struct dirscan **out, char *err, size_t errlen);

/*
 * Wait for the scan to end and build its manifest.  Returns 0 with @out
 * filled (the caller frees its two buffers; no stamps from a
 * dirscan_start_source() scan), or -errno with a message in
 * @err naming the entry that failed.  Call once.  The dirscan_live_*()
 * calls keep working, during and after, until dirscan_destroy().
 */
int dirscan_finish(struct dirscan *s, struct dirscan_result *out,
		   char *err, size_t errlen);

/*
 * Stop the scan if it is still reading directories (dirscan_finish() then
 * fails with -ECANCELED; once all are read, the build is waited for) and
 * free everything.  NULL is fine.
 */
void dirscan_destroy(struct dirscan *s);

/*
 * Make a scan still reading directories stop soon (dirscan_finish() then
 * fails with -ECANCELED); once every directory is read, nothing.  Any
 * thread, any time before dirscan_destroy().
 */
void dirscan_cancel(struct dirscan *s);

/* Scan in one call: dirscan_start(), dirscan_finish(), dirscan_destroy(). */
int dirscan_run(int rootfd, const char *root, unsigned threads,
		uint32_t chunk_size, struct dirscan_result *out,
		char *err, size_t errlen);

/*
 * The part of the tree already scanned, with the finished manifest's inode
 * numbers (manifest.h), for any thread at any time between
 * dirscan_start() and dirscan_destroy().  Each waits while what it is asked
 * about lies past the part read, and returns -EAGAIN where the manifest
 * must answer instead (see above), -EIO where the scan failed before
 * reaching it, else what the backend op of that name returns
 * (backend.h).  Attributes come from the source now, as the scan takes
 * them.
 */
int dirscan_live_getattr(struct dirscan *s, uint64_t ino, struct sfs_attr *out);
int dirscan_live_lookup(struct dirscan *s, uint64_t parent, const char *name,
			struct sfs_attr *out);
int dirscan_live_readdir(struct dirscan *s, uint64_t ino, struct sfs_dirlist *out);
int dirscan_live_readlink(struct dirscan *s, uint64_t ino, char *buf, size_t size);
/* Path of @ino relative to the root, as manifest_path(). */
int dirscan_live_path(struct dirscan *s, uint64_t ino, char *buf, size_t size);

/*
 * Whether every directory recorded in @stamps (@len bytes from a
 * dirscan_run() of the same tree, possibly read back from a file) still has
 * the recorded inode number, mtime and ctime under @rootfd.  Uses up to
 * @threads threads.  Returns 0 if unchanged, 1 if something changed (@why
 * says what, e.g. "d0012: mtime changed"), or -EINVAL for stamps that are
 * not well formed.
 */
int dirscan_unchanged(int rootfd, const void *stamps, size_t len,
		      unsigned threads, char *why, size_t whylen);

#endif
