/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peerbench: the peer transport's throughput, as tools/bench.sh peers times
 * it: this program is a member of a peer group (src/peer/peer.h) that asks
 * another member for chunks the way a daemon's fills do.
 *
 *   peerbench [-t INFLIGHT] [-r ROUNDS] KEYFILE SELF PEER DATASET
 *
 * SELF (HOST:PORT, not listened on) and PEER form the group; DATASET is a
 * published rados:// dataset PEER has mounted (librados finds the cluster
 * as for `stagefs publish`): its manifest is read whole, and each distinct
 * chunk is asked with the place its manifest has it (a request names one,
 * src/peer/peer_proto.h).  The chunks PEER owns (about half) are asked of it,
 * INFLIGHT at a time (default 16), ROUNDS times (default 1); the client
 * thread checks each against its content address as for a daemon.  Prints
 * one JSON object:
 *   {"chunks": N, "bytes": B, "seconds": S, "bytes_per_s": ..., "requests_per_s": ...,
 *    "errors": E}
 * and exits 1 if any chunk failed, 2 on a usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "config.h"
#include "manifest/manifest.h"
#include "peer/peer.h"
#include "util.h"

struct slot {
	void *buf;
	size_t len;
	bool busy;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static unsigned int busy, errors;
static uint64_t bytes;

static void done(void *arg, int res)
{
	struct slot *s = arg;

	pthread_mutex_lock(&lock);
	if (res < 0)
		errors++;
	else
		bytes += (uint64_t)res;
	s->busy = false;
	busy--;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

static void usage(void)
{
	fprintf(stderr, "usage: peerbench [-t INFLIGHT] [-r ROUNDS] KEYFILE SELF PEER DATASET\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct sfs_id *ids = NULL;
	struct peer_loc *locs = NULL;
	size_t *lens = NULL, n = 0, cap = 0, maxlen = 0, asked = 0;
	struct sfs_config cfg;
	struct backend *be;
	unsigned int inflight = 16, rounds = 1;
	struct peer_group *pg;
	struct slot *slots;
	char err[512], peers[300];
	uint64_t t0, ns, nent;
	int c;

	while ((c = getopt(argc, argv, "t:r:")) != -1) {
		if (c == 't')
			inflight = (unsigned int)atoi(optarg);
		else if (c == 'r')
			rounds = (unsigned int)atoi(optarg);
		else
			usage();
	}
	if (argc - optind != 4 || inflight < 1 || inflight > 256 || rounds < 1)
		usage();
	config_init(&cfg);
	free(cfg.cache_dir);
	cfg.cache_dir = NULL;	/* the manifest read whole, kept nowhere */
	if (backend_open(argv[optind + 3], &cfg, &be, err, sizeof(err))) {
		fprintf(stderr, "peerbench: %s\n", err);
		return 1;
	}
	if (!be->peer_tag) {
		fprintf(stderr, "peerbench: %s: not a published rados:// dataset\n", argv[optind + 3]);
		return 2;
	}
	nent = manifest_nentries(be->m);
	for (uint64_t ino = 1; ino <= nent; ino++) {
		struct sfs_attr a;
		uint32_t nc;

		if (manifest_getattr(be->m, ino, &a) || a.ino != ino || !S_ISREG(a.mode))
			continue;
		nc = manifest_nchunks(be->m, ino);
		for (uint32_t k = 0; k < nc; k++) {
			bool dup = false;

			if (n == cap) {
				cap = cap ? cap * 2 : 1024;
				ids = realloc(ids, cap * sizeof(*ids));
				lens = realloc(lens, cap * sizeof(*lens));
				locs = realloc(locs, cap * sizeof(*locs));
				if (!ids || !lens || !locs)
					return 1;
			}
			if (manifest_chunk(be->m, ino, k, &ids[n]))
				break;
			for (size_t i = 0; i < n && !dup; i++)	/* a bench's few hundred chunks */
				dup = sfs_id_eq(&ids[i], &ids[n]);
			if (dup)
				continue;
			lens[n] = backend_chunk_len(a.size, be->chunk_size, k);
			locs[n] = (struct peer_loc){ be->peer_tag, ino, k };
			maxlen = MAX(maxlen, lens[n]);
			n++;
		}
	}
	backend_close(be);
	config_release(&cfg);
	snprintf(peers, sizeof(peers), "%s", argv[optind + 2]);
	{
		struct peer_opts o = {
			.listen = argv[optind + 1],
			.peers = peers,
			.key_file = argv[optind],
			.timeout_ms = 30000,
		};

		if (peer_group_create(&o, &pg, err, sizeof(err))) {
			fprintf(stderr, "peerbench: %s\n", err);
			return 1;
		}
	}
	slots = calloc(inflight, sizeof(*slots));
	for (unsigned int i = 0; i < inflight; i++)
		slots[i].buf = malloc(maxlen ? maxlen : 1);
	t0 = now_ns();
	for (unsigned int r = 0; r < rounds; r++) {
		for (size_t i = 0; i < n; i++) {
			unsigned int k;

			if (peer_owns(pg, &ids[i]))
				continue;
			pthread_mutex_lock(&lock);
			while (busy == inflight)
				pthread_cond_wait(&cond, &lock);
			for (k = 0; slots[k].busy; k++)
				;
			slots[k].busy = true;
			busy++;
			pthread_mutex_unlock(&lock);
			if (peer_fetch_start(pg, &ids[i], &ids[i], &locs[i], slots[k].buf, lens[i], done,
					     &slots[k])) {
				done(&slots[k], -EIO);
				continue;
			}
			asked++;
		}
	}
	pthread_mutex_lock(&lock);
	while (busy)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	ns = now_ns() - t0;
	printf("{\"chunks\": %zu, \"bytes\": %llu, \"seconds\": %.3f, \"bytes_per_s\": %.0f, \"requests_per_s\": %.0f, \"errors\": %u}\n",
	       asked, (unsigned long long)bytes, (double)ns / 1e9,
	       (double)bytes / ((double)ns / 1e9), (double)asked / ((double)ns / 1e9), errors);
	peer_group_destroy(pg);
	for (unsigned int i = 0; i < inflight; i++)
		free(slots[i].buf);
	free(slots);
	free(ids);
	free(lens);
	free(locs);
	return errors ? 1 : 0;
}
