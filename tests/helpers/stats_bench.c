/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_bench: what the feed-rate counters cost a READ.
 *
 *   tests/helpers/stats_bench [READS_PER_THREAD]
 *
 * For 1, 2, 4, ... up to 2 x the CPUs threads, each thread runs the READ
 * path's accounting (stats_read_begin + stats_read_end for a 128 KiB READ)
 * in a loop, while another thread takes a snapshot every 10 ms (as a
 * reader of .stagefs/stats or a Prometheus scrape would), in three modes:
 *   one-reader   every thread charges the same open file (one reader
 *                thread's record: the worst case for cache-line sharing)
 *   own-reader   each thread its own open file and reader record
 *   mutex        the naive alternative: one global mutex around plain
 *                counters, updated as often (the same fields)
 * and prints nanoseconds of wall time per READ over all threads (lower is
 * better; with more threads than CPUs it measures throughput, not latency).
 * Every mode reads the clock twice per READ, as the READ path does (the
 * stall and busy times need it).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stats/stats.h"
#include "util.h"

enum mode { ONE_READER, OWN_READER, MUTEX, NMODES };

static const char *const mode_name[NMODES] = { "one-reader", "own-reader", "mutex" };

struct ctx {
	struct stats *st;
	struct stats_open *so;
	enum mode mode;
	long n;
	pid_t pid;		/* fuse_req_ctx() has it: no getpid() per READ */
	uint32_t uid;
};

static pthread_mutex_t big_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t plain[3][STATS_NFIELDS];	/* node, user, job: under big_lock */
static _Atomic bool stop;

static void *worker(void *arg)
{
	struct ctx *c = arg;
	int file;

	for (long i = 0; i < c->n; i++) {
		uint64_t off = (uint64_t)i * 131072;

		if (c->mode == MUTEX) {
			uint64_t t0 = now_ns(), t1 = now_ns();

			pthread_mutex_lock(&big_lock);
			for (int k = 0; k < 3; k++) {
				plain[k][STATS_READS]++;
				plain[k][STATS_READ_BYTES] += 131072;
				plain[k][STATS_HITS]++;
				plain[k][STATS_READ_NS] += t1 - t0;
			}
			pthread_mutex_unlock(&big_lock);
			continue;
		}
		struct stats_read rd;

		stats_read_begin(c->st, &rd, &file, off, 131072, 4u << 20);
		stats_read_end(&rd, c->so, c->pid, c->uid, 131072);
	}
	return NULL;
}

static void *snapshotter(void *arg)
{
	struct stats *st = arg;

	while (!atomic_load(&stop)) {
		struct stats_snap *s;

		if (!stats_snapshot(st, &s))
			stats_snap_free(s);
		usleep(10000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	printf("%-12s %8s %14s\n", "mode", "threads", "ns/READ(wall)");
	for (int t = 1; t <= 2 * cpus; t *= 2) {
		for (int m = 0; m < NMODES; m++) {
			struct stats *st;
			struct stats_open *so = calloc((size_t)t, sizeof(*so));
			struct ctx *c = calloc((size_t)t, sizeof(*c));
			pthread_t *th = calloc((size_t)t, sizeof(*th)), snap;
			uint64_t t0, t1;

			if (!so || !c || !th || stats_create(NULL, &st))
				return 1;
			for (int i = 0; i < t; i++) {
				/* own-reader: a distinct reader record per thread */
				if (i == 0 || m == OWN_READER)
					stats_open_init(st, &so[i], getpid(), 1000 + (uint32_t)i);
				c[i] = (struct ctx){ st, m == OWN_READER ? &so[i] : &so[0],
						     (enum mode)m, n / t, getpid(),
						     1000 + (m == OWN_READER ? (uint32_t)i : 0) };
			}
			atomic_store(&stop, false);
			pthread_create(&snap, NULL, snapshotter, st);
			t0 = now_ns();
			for (int i = 0; i < t; i++)
				pthread_create(&th[i], NULL, worker, &c[i]);
			for (int i = 0; i < t; i++)
				pthread_join(th[i], NULL);
			t1 = now_ns();
			atomic_store(&stop, true);
			pthread_join(snap, NULL);
			printf("%-12s %8d %14.1f\n", mode_name[m], t,
			       (double)(t1 - t0) / (double)(n / t * t));
			for (int i = 0; i < t; i++)
				stats_open_release(st, &so[i]);
			stats_destroy(st);
			free(so);
			free(c);
			free(th);
		}
	}
	return 0;
}
