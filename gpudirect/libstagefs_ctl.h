/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libstagefs_ctl: the client library's side of the control socket
 * (docs/control.md): the cache files the daemon hands over, their pins,
 * and the reports of what was read.  Internal to libstagefs.so (module
 * prefix ctlc_, hidden symbols); libstagefs.c is its only user.
 *
 * A process keeps one struct ctlc_mount per stagefs mount it reads from
 * (found by the mount root, never freed) and a small pool of control
 * connections per mount, shared by its handles.  A connection carries one
 * request at a time; a thread that needs one takes an idle one or opens
 * another, up to CTLC_MAX_CONNS, so one slow CACHE_FD (a cold file being
 * fetched) does not hold up other threads' opens.  The daemon keeps a
 * cache file pinned while the connection it was asked on stays open and
 * the pin is not dropped, so a connection is closed only once no pin is
 * held on it.  A connection that breaks (a request failed, or the socket
 * hung up: the daemon stopped) takes its pins with it, and
 * ctlc_conn_alive() says so.  After fork() a child never uses its
 * parent's connections: it drops its copies of their sockets and opens
 * its own.
 */
#ifndef STAGEFS_LIBSTAGEFS_CTL_H
#define STAGEFS_LIBSTAGEFS_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define CTLC_HIDDEN	__attribute__((visibility("hidden")))
#define CTLC_MAX_CONNS	8	/* control connections per mount and process */

struct ctlc_mount;
struct ctlc_conn;

/* The mount rooted at @root, created on first use (never freed).  NULL: no memory. */
CTLC_HIDDEN struct ctlc_mount *ctlc_mount_get(const char *root);
/*
 * Find @m's control socket (its .stagefs/socket), once; after a failure
 * it is looked for again only 30 s later.  0, -ENOENT (none) or -errno.
 */
CTLC_HIDDEN int ctlc_mount_socket(struct ctlc_mount *m);
/* A handle of @m opened / closed; close returns true for the process's last one. */
CTLC_HIDDEN void ctlc_mount_hold(struct ctlc_mount *m);
CTLC_HIDDEN bool ctlc_mount_unhold(struct ctlc_mount *m);

/*
 * CACHE_FD for @rel (relative to @m's root), the regular file @st
 * describes.  Returns 0 with the descriptor in *@fd (the caller's to
 * close) and the pin in *@conn and *@pin (drop it with ctlc_drop_pin), or
 * -errno with the reason in @why: the daemon's refusal, -EOPNOTSUPP for a
 * daemon that has no CACHE_FD, -ESTALE when the daemon resolved @rel to
 * another file than @st, or the connection's error.  Blocks while the
 * daemon stages the file.
 */
CTLC_HIDDEN int ctlc_cache_fd(struct ctlc_mount *m, const char *rel, const struct stat *st,
			      int *fd, struct ctlc_conn **conn, uint64_t *pin,
			      char *why, size_t whylen);
/* True while the daemon still holds the pins made on @c (cheap: one poll). */
CTLC_HIDDEN bool ctlc_conn_alive(struct ctlc_conn *c);
/* Drop pin @pin on @c, now or when @c is next idle; @c may go with it. */
CTLC_HIDDEN void ctlc_drop_pin(struct ctlc_conn *c, uint64_t pin);

/*
 * Count what a handle of @m delivered: @client_bytes read from cache files
 * through @files handles that delivered their first byte, @gpu_bytes
 * copied to GPU @device (ignored for a device < 0 or >= SFS_MAX_DEVICES).
 */
CTLC_HIDDEN void ctlc_mount_add(struct ctlc_mount *m, uint64_t client_bytes,
				uint64_t files, int device, uint64_t gpu_bytes);
/* CUDA device @device's PCI address, for GPU_BYTES (call with it current). */
CTLC_HIDDEN void ctlc_note_pci(int device);
/*
 * Report @m's counts to its daemon (CLIENT_READ, GPU_BYTES) when @force or
 * a second has passed since the last report, on an idle connection (none
 * idle: next time).  Counts a daemon could not take are kept for the next
 * report.  At exit every mount reports.
 */
CTLC_HIDDEN void ctlc_mount_report(struct ctlc_mount *m, bool force);
/* Reports the daemon accepted, and that failed (process-wide). */
CTLC_HIDDEN void ctlc_stats(uint64_t *reports, uint64_t *errors);

#endif
