/* SPDX-License-Identifier: Apache-2.0 */
/*
 * osdmap_refresh: ask the monitors for the latest OSD map after an OSD
 * operation timed out, on a thread of its own.
 *
 * librados (Ceph 16) does not always learn that an OSD came back.  A
 * client whose first operations to an OSD were sent while it was down
 * times out every later one too, long after the OSD is up again, and never
 * asks the monitors for a newer map (measured with librados alone: reads
 * still timed out 36 s after the OSD was back; the same client having read
 * once before the outage read again at once).  stagefs meets it whenever a
 * source's first read of an OSD falls in an outage: a cephfs:// mount
 * reads no object until a file is read, and the client's walk goes to the
 * MDS.  rados_wait_for_latest_osdmap() ends it, but waits for the
 * monitors (up to rados_mon_op_timeout), so neither librados's callback
 * thread nor a reader may call it: osdmap_refresh_ask() only wakes this
 * thread, which asks at most once a second.
 *
 * Prefix osdmap_refresh_.
 */
#ifndef STAGEFS_OSDMAP_REFRESH_H
#define STAGEFS_OSDMAP_REFRESH_H

#include <rados/librados.h>

struct osdmap_refresh;

/* Start the thread for @cl; @what names the source in the log.  0 or -errno. */
int osdmap_refresh_start(rados_t cl, const char *what, struct osdmap_refresh **out);

/* An operation on @r's connection timed out: refresh the map soon.  Any
 * thread, librados's too; never blocks for long.  NULL @r: nothing. */
void osdmap_refresh_ask(struct osdmap_refresh *r);

/* Stop and join the thread (before rados_shutdown() of its connection);
 * waits for a request in flight, at most rados_mon_op_timeout.  NULL: nothing. */
void osdmap_refresh_stop(struct osdmap_refresh *r);

#endif
