/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_i.h: what the two halves of the peer group share: peer.c (the
 * membership, the owner of a chunk, back-offs, counters, create and
 * destroy) and peer_client.c (the client thread that asks owners for
 * chunks).  Not for use outside src/peer/.
 *
 * Locks: pg->reload_lock serializes reloads; pg->lock guards the
 * membership, the back-offs and the inbox, a leaf.  Fields marked "the
 * client thread's own" are touched by that thread only (and by destroy
 * after it has joined).
 */
#ifndef STAGEFS_PEER_I_H
#define STAGEFS_PEER_I_H

#include <pthread.h>
#include <stdatomic.h>

#include <openssl/ssl.h>

#include "list.h"
#include "peer.h"
#include "peer_tls.h"

struct peer {
	char addr[32];			/* "a.b.c.d:port" */
	struct sockaddr_in sa;
	uint64_t seed;			/* rendezvous: the hash of addr */
	bool self;
	bool member;			/* protected by pg->lock */
	bool keep;			/* a reload names it: not reclaimed; protected by pg->lock */
	bool was_member;		/* before a reclaiming reload; protected by pg->lock */
	uint64_t backoff_until;		/* ms (monotonic); protected by pg->lock */
	unsigned int fails;		/* in a row; protected by pg->lock */
	/* the client thread's own */
	int idle[PEER_CONNS];		/* connections kept for the next request */
	SSL *idle_ssl[PEER_CONNS];	/* their TLS */
	uint64_t idle_since[PEER_CONNS];	/* ms, when each went idle */
	unsigned int nidle;
	unsigned int active;		/* requests holding a connection */
	struct list_node queue;		/* requests waiting for one */
	/* counters: see struct peer_stat */
	_Atomic uint64_t bytes_in, hits, failures, corrupt, fallbacks;
	_Atomic uint64_t bytes_out, served, refused;
};

enum rq_state { RQ_NEW, RQ_QUEUED, RQ_CONNECTING, RQ_HANDSHAKE, RQ_SEND, RQ_HDR, RQ_DATA };

struct preq {
	struct list_node node;		/* pg->inbox, then pg->live */
	struct list_node qnode;		/* p->queue while RQ_QUEUED */
	struct peer *p;
	struct sfs_id id;
	struct peer_loc loc;		/* where our manifest has it */
	void *buf;
	size_t len;
	uint64_t deadline;		/* ms (monotonic) */
	void (*done)(void *arg, int res);
	void *arg;
	enum rq_state st;
	uint32_t events;		/* what epoll waits for on fd */
	int fd;
	SSL *ssl;
	size_t sent, got;
	unsigned char msg[PEER_REQ_LEN];
	unsigned char hdr[PEER_REP_LEN];
};

struct peer_group {
	/* serializes reloads (SIGHUP, the control socket's PEERS reload=1) */
	pthread_mutex_t reload_lock;
	char *peers, *peers_file;	/* the last membership applied; protected by reload_lock */
	pthread_mutex_t lock;
	struct peer *p[PEER_MAX];	/* slots; protected by lock */
	unsigned int np;		/* protected by lock */
	/*
	 * A reload short of slots asks the client thread to free those of
	 * former members with no request left (reclaim_locked) and waits on
	 * reclaimed; both protected by lock.
	 */
	bool reclaim;
	pthread_cond_t reclaimed;
	struct peer *self;
	struct peer_key key;
	struct peer_tls *tls;		/* the client side's */
	uint64_t timeout_ms;
	struct list_node inbox;		/* protected by lock */
	bool stopping;			/* protected by lock */
	int efd, epfd;
	pthread_t thread;
	struct list_node live;		/* the client thread's: queued and active requests */
};

/*
 * peer_client.c; peer.c uses it, never the reverse: the client thread
 * reads the membership and the back-offs (under pg->lock) but calls
 * nothing of peer.c.
 */
/* Wake the client thread (its eventfd). */
void peer_poke(struct peer_group *pg);
/* @p failed a request (-errno @err): skip it for a back-off. */
void peer_backoff(struct peer_group *pg, struct peer *p, int err);
/* @p answered: its back-off is over. */
void peer_recovered(struct peer_group *pg, struct peer *p);
/* The client thread (pthread_create'd by peer_group_create). */
void *peer_client_main(void *arg);
/* Close a connection: a close_notify if it can go now, then the socket. */
void peer_conn_close(int fd, SSL *ssl);

#endif
