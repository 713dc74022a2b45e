/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safepath: may the daemon trust a local directory?  (issue 27,
 * docs/security.md "Local files the daemon trusts")
 *
 * The daemon keeps its cache, its control socket and the files it writes
 * or reads for the operator (metrics_file, peers_file) in directories.  A
 * directory is trusted when nobody but root and the daemon's own user can
 * change what its names lead to: it and every directory above it are owned
 * by root or the daemon's euid and writable by nobody else.  Two
 * allowances:
 *  - a directory above (never the directory itself) may be writable by
 *    others if it is sticky (/tmp, 1777): others can add names there but
 *    cannot remove or rename names they do not own;
 *  - a symbolic link on the way is followed only if root or the daemon's
 *    user owns it (a link in a sticky directory may be anyone's); where it
 *    leads is checked like the rest: the path is walked as given (lstat of
 *    each component) and again as realpath(3) resolves it.
 * Anything else is refused, naming the component, its owner and its mode.
 * The checks cannot race with an attacker: once every component is
 * trusted, only root or the daemon's user could change them.
 */
#ifndef STAGEFS_SAFEPATH_H
#define STAGEFS_SAFEPATH_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Check directory @path as above (it must exist and be a directory).
 * Returns 0, or -errno with a message naming the offending component in
 * @err: -EPERM for an owner or mode others could use, -ENOENT, -ENOTDIR,
 * -ELOOP, ... for a path that is not there.  The daemon's user is
 * geteuid().
 */
int safepath_check_dir(const char *path, char *err, size_t errlen);

/*
 * mkdir -p @path (each created component with @mode), trusting nothing on
 * the way: every existing component is checked before anything is created
 * under it, every created one after, then @path as safepath_check_dir().
 * Returns 0 or -errno with a message in @err.
 */
int safepath_mkdir(const char *path, mode_t mode, char *err, size_t errlen);

/*
 * An O_RDONLY|O_DIRECTORY descriptor of trusted directory @path (checked
 * as safepath_check_dir(), then the descriptor's own owner and mode once
 * more), for openat(2) and friends.  Returns the descriptor or -errno with
 * a message in @err.
 */
int safepath_open_dir(const char *path, char *err, size_t errlen);

/*
 * Replace file @path with @len bytes of @buf, all or nothing, in a trusted
 * directory (safepath_open_dir() of its directory), following no link:
 * written to a new file of a random name there (O_CREAT|O_EXCL|O_NOFOLLOW,
 * so nothing found under that name is opened), its group set to @gid
 * ((gid_t)-1: left) and then its mode to @mode through the descriptor,
 * then renamed over @path (a link found there is replaced, never
 * followed).  Returns 0 or -errno with a message in @err.
 */
int safepath_write_file(const char *path, const void *buf, size_t len, mode_t mode,
			gid_t gid, char *err, size_t errlen);

/*
 * Remove the name @path (never what a link there leads to) from its
 * directory, if that is trusted.  0 (also when there was none) or -errno
 * with a message in @err.
 */
int safepath_unlink(const char *path, char *err, size_t errlen);

/*
 * Split @path into its directory (into @dir, "." for a bare name) and its
 * last component (returned, pointing into @path).  NULL (-EINVAL) for a
 * path that names no file: empty, ending in '/', ".", "..", or too long.
 */
const char *safepath_split(const char *path, char *dir, size_t dirlen);

#endif
