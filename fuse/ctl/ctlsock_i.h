/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlsock_i.h: what the parts of the control socket share and nobody else
 * sees.
 *
 *   ctlsock.c   the server: listening socket, accept thread, one thread
 *               per connection, HELLO, dispatch of requests
 *   ctlconn.c   one connection's helpers: replies, liveness, PATH lists
 *   ctluser.c   the record per uid: connection count, report ledger
 *   ctljobs.c   the job requests: WARMUP, HINT, HINT_END, STATUS
 *   ctlpeers.c  PEERS: the peer group, and its reread (root only)
 *   ctlk8s.c    ACCESS and POD, the CSI plugin's (root only)
 *   handover.c  the client library's requests: CACHE_FD, CACHE_FD_CLOSE
 *               (descriptor hand-over), CLIENT_READ, GPU_BYTES
 *
 * A connection (struct ctlsock_client) is used by its own thread only,
 * apart from the list links and the server's stopping flag, which the
 * server's lock protects.  Each handler returns 0 to go on serving the
 * connection or -errno to close it (the peer is gone, or the request was
 * unreadable); a refusal is sent as ERR and returns 0.
 */
#ifndef STAGEFS_FUSE_CTLSOCK_I_H
#define STAGEFS_FUSE_CTLSOCK_I_H

#include "ctlsock.h"

#include "fuse/access.h"
#include "cred.h"
#include "ctlproto.h"
#include "htab.h"
#include "list.h"
#include "prefetch/prefetch.h"

#include <stdatomic.h>
#include <sys/un.h>

struct ctlsock_client;

/*
 * What the server keeps per uid (ctluser.c finds or adds it; it lives as
 * long as the server, a few dozen bytes per user that ever connected).
 * conns is the connection limits' count; the rest is the ledger that
 * bounds the client library's reports (handover.c): a uid may report as
 * read from cache files at most the sizes of the files granted to it (a
 * file is granted at its hand-over, again only once reading it at
 * client_report_rate could have ended: struct handover_grant), and as
 * copied to GPUs at most that plus what it read through the mount; and
 * either kind at most client_report_rate a second (the token buckets).
 * Every field: protected by cs->lock.
 */
struct ctluser {
	uint32_t uid;
	unsigned conns;			/* connections open now */
	uint64_t handed;		/* bytes of the files granted (CACHE_FD) */
	uint64_t handed_files;		/* ... and how many grants */
	uint64_t client_read;		/* bytes CLIENT_READ reported, accepted */
	uint64_t client_files;		/* files= CLIENT_READ reported, accepted */
	uint64_t gpu;			/* bytes GPU_BYTES reported, accepted */
	uint64_t read_tokens;		/* bytes CLIENT_READ may add now */
	uint64_t gpu_tokens;		/* bytes GPU_BYTES may add now */
	uint64_t tokens_ms;		/* their last refill (now_ms()); 0: never (full) */
	uint32_t grants;		/* its entries in cs->grants */
};

struct handover_grant;

struct ctlsock {
	struct sfs *fs;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int lfd;
	int wake[2];			/* stop the accept thread */
	pthread_t accept_thr;
	pthread_mutex_t lock;
	pthread_cond_t gone;		/* a client thread ended */
	struct list_node clients;	/* protected by lock: ctlsock_client.node */
	unsigned nclients;		/* protected by lock */
	struct ctluser *users;	/* protected by lock */
	size_t nusers, capusers;	/* protected by lock */
	struct htab grants;		/* protected by lock: struct handover_grant (handover.c) */
	bool stopping;			/* protected by lock */
	/* limits (src/config.h), set at start */
	unsigned max_conns, user_conns;
	uint64_t idle_ms;		/* 0: never */
};

/* A cache file handed over by CACHE_FD (handover.c). */
struct handover_handle {
	uint64_t id;
	struct cfile *cf;		/* pinned (the pin holds its reference) */
	struct handover_grant *grant;	/* its uid's grant of the file, or NULL; cs->lock */
};

struct ctlsock_client {
	struct list_node node;		/* in cs->clients; protected by cs->lock */
	struct ctlsock *cs;
	int fd;
	struct cred cred;		/* the peer's, from connect() (src/cred.h) */
	struct ctl_conn conn;
	/* a running WARMUP: where its progress goes (ctljobs.c) */
	struct pf_job *job;
	bool job_streaming;		/* END seen: send PROGRESS on ticks */
	uint32_t progress_ms;
	uint64_t last_progress_ms;
	/* cache files handed over by CACHE_FD: pinned until closed (handover.c) */
	struct handover_handle *handles;
	size_t nhandles, caphandles;
	uint64_t next_handle;
};

/* ---- ctluser.c: the records per uid, for ctlsock.c and handover.c ---- */

/*
 * The record of @uid, added if new (then zeroed but for uid).  NULL: no
 * memory.  cs->lock held; the pointer is valid until the lock is dropped.
 */
struct ctluser *ctluser_locked(struct ctlsock *cs, uint32_t uid);
/* The server stops (no connection left, no lock needed): the records are freed. */
void ctluser_free_all(struct ctlsock *cs);

/* ---- ctlconn.c ---- */

/*
 * The level to log something a peer can make happen at will (a refusal):
 * LOG_NOTICE at most once every 10 s per @last (a static of the caller),
 * LOG_DEBUG otherwise, so no client can flood the log.
 */
int ctlconn_log_level(_Atomic uint64_t *last);
/* Send "ERR code=... msg=@msg".  0 or -errno (peer gone). */
int ctlconn_send_err(struct ctlsock_client *cl, int err, const char *msg);
/* Send "FAIL path=@path code=... msg=...".  0 or -errno (peer gone). */
int ctlconn_send_fail(struct ctlsock_client *cl, const char *path, int err);
/*
 * How long to wait for @cl's next line, in ms: control_idle_timeout, or
 * -1 (forever) while it holds cache files (closing would drop their pins)
 * or when there is no timeout.
 */
int ctlconn_idle_ms(const struct ctlsock_client *cl);
/* False once the peer hung up. */
bool ctlconn_alive(struct ctlsock_client *cl);
/* Should the connection's work go on?  False once the daemon stops or the peer left. */
bool ctlconn_tick(struct ctlsock_client *cl);
/*
 * Read PATH lines up to END into a malloc'ed array of strings (released
 * with ctlconn_free_paths()).  Returns the count, or -errno (the connection
 * is unusable or the request bad: then ERR was sent where possible).
 */
ssize_t ctlconn_read_paths(struct ctlsock_client *cl, char ***out);
void ctlconn_free_paths(char **v, size_t n);

/* ---- ctljobs.c ---- */

int ctljobs_warmup(struct ctlsock_client *cl, const struct ctl_msg *m);
int ctljobs_hint(struct ctlsock_client *cl, const struct ctl_msg *m);
int ctljobs_hint_end(struct ctlsock_client *cl, const struct ctl_msg *m);
int ctljobs_status(struct ctlsock_client *cl);

/* ---- ctlk8s.c ---- */

int ctlk8s_access(struct ctlsock_client *cl, const struct ctl_msg *m);
int ctlk8s_pod(struct ctlsock_client *cl, const struct ctl_msg *m);

/* ---- ctlpeers.c ---- */

int ctlpeers_peers(struct ctlsock_client *cl, const struct ctl_msg *m);

/* ---- handover.c ---- */

int handover_cache_fd(struct ctlsock_client *cl, const struct ctl_msg *m);
int handover_cache_fd_close(struct ctlsock_client *cl, const struct ctl_msg *m);
int handover_client_read(struct ctlsock_client *cl, const struct ctl_msg *m);
int handover_gpu_bytes(struct ctlsock_client *cl, const struct ctl_msg *m);
/* The connection ends: every cache file it held is unpinned. */
void handover_release(struct ctlsock_client *cl);
/* The server stops (no connection left): the grants are freed. */
void handover_grants_free(struct ctlsock *cs);

#endif
