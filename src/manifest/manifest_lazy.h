/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest_lazy: a local copy of a remote format 2 manifest, filled part
 * by part on first touch, so that opening one costs the same at 10 entries
 * and at 10 M (docs/manifest.md, "The local copy").
 *
 * The copy is a sparse file of the manifest's full size, PATH, holding the
 * header and the part table from the start, and beside it PATH.parts, one
 * byte per part (1: the part's bytes are in the file), both shared by every
 * mount and daemon that opens the same PATH.  The manifest reader
 * (manifest_source) asks for each part before it hashes it; a part that is
 * not marked present is read from the remote with one ranged read, written
 * into the file and marked.  The marks are hints, the part table is the
 * truth: a part marked present that fails its checksum (a torn write, a
 * crash between the data and the mark, local damage) is read once more
 * from the remote before it is refused.
 *
 * Guarantees: concurrent touches of one part in one process fetch it once
 * (the others wait for that fetch); a fetch that fails makes the touches of
 * the same parts fail at once for a second rather than each wait for the
 * remote again, so a dead remote costs a reader one remote timeout; the
 * remote read is the only wait and is bounded by the caller's reader.
 * Sequential touches (a walk) fetch a window that doubles up to 4 MiB of a
 * section at a time; a lone touch (a lookup) fetches its 64 KiB part alone.
 */
#ifndef STAGEFS_MANIFEST_LAZY_H
#define STAGEFS_MANIFEST_LAZY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct manifest;

/* Reads @len bytes at @off of the remote manifest; 0 or -errno with @err. */
struct manifest_remote {
	int (*read)(void *arg, void *buf, size_t len, uint64_t off,
		    char *err, size_t errlen);
	void *arg;	/* must outlive the manifest */
};

/*
 * Open the copy of a remote manifest of @size bytes at @path, creating it
 * (header and part table read from @r, the rest left as holes) if it or its
 * marks are missing or do not match @size.  @label names the manifest in
 * log lines.  @fill: a thread fetches the parts nobody touched, one fetch
 * at a time and only while no reader's fetch is in flight, until the copy
 * is complete or the manifest closed (which waits for its fetch: at most
 * one remote timeout).  On success *@out is the manifest (manifest_close() releases
 * the copy's state too) and *@fetched_at_open the bytes read from @r by
 * this call.  Returns 0, -ENOTSUP (the remote manifest is not format 2:
 * copy it whole), -EINVAL (a bad manifest; the copy is removed) or another
 * -errno, with @err.
 */
int manifest_lazy_open(const char *path, uint64_t size,
		       const struct manifest_remote *r, const char *label,
		       bool fill, struct manifest **out, uint64_t *fetched_at_open,
		       char *err, size_t errlen);

/* The marks file of the copy at @path: "@path.parts", into @out. */
int manifest_lazy_marks_path(const char *path, char *out, size_t outlen);

#endif
