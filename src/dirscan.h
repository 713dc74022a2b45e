/*
 * dirscan: scan a directory tree into a manifest with several threads, and
 * tell cheaply whether the tree has changed since.
 *
 * The dir:// backend's metadata (backend_dir.c).  A scan takes one lstat per
 * entry; on a disk, NFS or Lustre those wait on I/O or on the server, so
 * dirscan_run() spreads directories over @threads workers (a shared stack of
 * directory paths, depth first; each worker reads one directory, fstatat()s
 * its entries and hands them to the manifest builder in one batch under the
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
 */
#ifndef STAGEFS_DIRSCAN_H
#define STAGEFS_DIRSCAN_H

#include <stddef.h>
#include <stdint.h>

struct dirscan_result {
	void *manifest;		/* serialized manifest (manifest.h); free() */
	size_t manifest_len;
	void *stamps;		/* the directories' stamps, for dirscan_unchanged(); free() */
	size_t stamps_len;
	uint64_t entries, bytes, skipped, dirs;
};

/*
 * Scan the tree under the directory @rootfd (its path @root is only for
 * messages; @rootfd stays the caller's) with @threads workers (at least 1)
 * into a manifest of @chunk_size chunks.  Returns 0 with @out filled (the
 * caller frees its two buffers), or -errno with a message in @err naming the
 * entry that failed.
 */
int dirscan_run(int rootfd, const char *root, unsigned threads,
		uint32_t chunk_size, struct dirscan_result *out,
		char *err, size_t errlen);

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
