/* SPDX-License-Identifier: Apache-2.0 */
/*
 * readbench: the reader that tools/bench.sh times.
 *
 *   readbench seq [-b SIZE] FILE...
 *       read each FILE front to back, one after the other, with read(2) into
 *       one SIZE buffer (default 1M): a training job streaming a shard.
 *
 *   readbench files [-t THREADS] [-s SEED] [-b SIZE] [-n COUNT] LIST
 *       read the files named in LIST (one path a line; "-" = stdin) in a
 *       shuffled order, THREADS readers (default 1) taking the next file from
 *       a shared cursor: open, read to EOF, close, like a DataLoader's
 *       workers.  The shuffle depends only on SEED (default 1) and the number
 *       of lines, so two LISTs whose lines correspond (the mount's paths and
 *       the cache files behind them) are read in the same order.  -s 0 keeps
 *       LIST's order.  -n reads only the first COUNT files of that order.
 *       -P prints that order (one path a line) and reads nothing: the list
 *       to hand to a prefetcher as an order hint.  -c USEC makes each reader
 *       spend USEC after every file (sleeping, as a training step waits on
 *       the GPU), so a prefetcher has time to hide the source's latency.
 *
 * Prints one JSON object on stdout:
 *   {"mode": ..., "threads": T, "files": N, "bytes": B, "seconds": S,
 *    "bytes_per_s": ..., "files_per_s": ..., "io_seconds": W, "errors": E}
 * where io_seconds is the readers' time in open/read/close, summed: with
 * -c, the time the "training loop" stalled on its input.
 * and exits 1 if any file could not be opened or read (errors > 0), 2 on a
 * usage error.  It never writes: caches are the caller's business (bench.sh
 * drops the page cache before each run).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256

struct job {
	char **paths;
	size_t npaths;
	size_t bufsize;
	atomic_size_t next;		/* next index into paths */
	atomic_uint_fast64_t bytes;
	atomic_uint_fast64_t files;
	atomic_uint_fast64_t errors;
	atomic_uint_fast64_t io_ns;	/* time in open/read/close, all readers */
	uint64_t step_ns;		/* -c: "compute" after each file */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end || v == 0 || v > (1ULL << 30))
		return -EINVAL;
	*out = (size_t)v;
	return 0;
}

/* Read @path to EOF into @buf; returns bytes read or -errno. */
static int64_t read_file(const char *path, char *buf, size_t bufsize)
{
	int64_t total = 0;
	ssize_t n;
	int fd, err;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while ((n = read(fd, buf, bufsize)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = errno;
			close(fd);
			return -err;
		}
		total += n;
	}
	close(fd);
	return total;
}

static void *reader(void *arg)
{
	struct job *j = arg;
	char *buf = malloc(j->bufsize);
	size_t i;

	if (!buf) {
		atomic_fetch_add(&j->errors, 1);
		return NULL;
	}
	while ((i = atomic_fetch_add(&j->next, 1)) < j->npaths) {
		double t = now_s();
		int64_t n = read_file(j->paths[i], buf, j->bufsize);

		atomic_fetch_add(&j->io_ns, (uint64_t)((now_s() - t) * 1e9));
		if (j->step_ns) {
			struct timespec ts = {
				.tv_sec = (time_t)(j->step_ns / 1000000000u),
				.tv_nsec = (long)(j->step_ns % 1000000000u),
			};

			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
		}

		if (n < 0) {
			/* name the first few; the count says the rest */
			if (atomic_fetch_add(&j->errors, 1) < 5)
				fprintf(stderr, "readbench: %s: %s\n", j->paths[i],
					strerror((int)-n));
			continue;
		}
		atomic_fetch_add(&j->bytes, (uint64_t)n);
		atomic_fetch_add(&j->files, 1);
	}
	free(buf);
	return NULL;
}

/* splitmix64: a tiny, fixed PRNG so the order never depends on libc. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void shuffle(char **v, size_t n, uint64_t seed)
{
	uint64_t s = seed;

	for (size_t i = n; i > 1; i--) {
		size_t k = (size_t)(rng_next(&s) % i);
		char *t = v[i - 1];

		v[i - 1] = v[k];
		v[k] = t;
	}
}

/* Read LIST into a NULL-free array; returns the count or -errno. */
static ssize_t load_list(const char *list, char ***out)
{
	FILE *f = strcmp(list, "-") ? fopen(list, "re") : stdin;
	char *line = NULL, **v = NULL;
	size_t cap = 0, n = 0, lcap = 0;
	ssize_t len;

	if (!f)
		return -errno;
	while ((len = getline(&line, &lcap, f)) >= 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (len == 0)
			continue;
		if (n == cap) {
			char **nv = realloc(v, (cap ? cap * 2 : 1024) * sizeof(*v));

			if (!nv)
				goto out_nomem;
			v = nv;
			cap = cap ? cap * 2 : 1024;
		}
		v[n] = strdup(line);
		if (!v[n])
			goto out_nomem;
		n++;
	}
	free(line);
	if (f != stdin)
		fclose(f);
	*out = v;
	return (ssize_t)n;

out_nomem:
	free(line);
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	if (f != stdin)
		fclose(f);
	return -ENOMEM;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: readbench seq [-b SIZE] FILE...\n"
		"       readbench files [-t THREADS] [-s SEED] [-b SIZE] [-n COUNT] [-c USEC] [-P] LIST\n"
		"Reads and prints {bytes_per_s, files_per_s, ...} as JSON.\n");
}

int main(int argc, char **argv)
{
	struct job j = { .bufsize = 1 << 20 };
	pthread_t tids[MAX_THREADS];
	unsigned long threads = 1, count = 0;
	uint64_t seed = 1;
	const char *mode;
	double t0, dt;
	int opt;
	bool seq, print_order = false;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	mode = argv[1];
	seq = !strcmp(mode, "seq");
	if (!seq && strcmp(mode, "files")) {
		usage(stderr);
		return 2;
	}
	optind = 2;
	while ((opt = getopt(argc, argv, "b:t:s:n:c:P")) != -1) {
		switch (opt) {
		case 'b':
			if (parse_size(optarg, &j.bufsize)) {
				fprintf(stderr, "readbench: bad size '%s'\n", optarg);
				return 2;
			}
			break;
		case 't':
			threads = strtoul(optarg, NULL, 10);
			if (threads < 1 || threads > MAX_THREADS) {
				fprintf(stderr, "readbench: -t wants 1..%d\n", MAX_THREADS);
				return 2;
			}
			break;
		case 's':
			seed = strtoull(optarg, NULL, 10);
			break;
		case 'n':
			count = strtoul(optarg, NULL, 10);
			break;
		case 'c':
			j.step_ns = strtoull(optarg, NULL, 10) * 1000u;
			break;
		case 'P':
			print_order = true;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	if (seq) {
		j.paths = &argv[optind];
		j.npaths = (size_t)(argc - optind);
		threads = 1;
	} else {
		ssize_t n = load_list(argv[optind], &j.paths);

		if (n < 0) {
			fprintf(stderr, "readbench: %s: %s\n", argv[optind], strerror((int)-n));
			return 2;
		}
		j.npaths = (size_t)n;
		if (seed)
			shuffle(j.paths, j.npaths, seed);
		if (count && count < j.npaths)
			j.npaths = count;
		if (print_order) {
			for (size_t i = 0; i < j.npaths; i++)
				printf("%s\n", j.paths[i]);
			return fflush(stdout) ? 1 : 0;
		}
	}

	t0 = now_s();
	for (unsigned long i = 0; i < threads; i++)
		if (pthread_create(&tids[i], NULL, reader, &j)) {
			fprintf(stderr, "readbench: cannot start thread %lu\n", i);
			threads = i;
			atomic_fetch_add(&j.errors, 1);
			break;
		}
	for (unsigned long i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	dt = now_s() - t0;
	if (dt <= 0)
		dt = 1e-9;

	printf("{\"mode\": \"%s\", \"threads\": %lu, \"files\": %" PRIu64
	       ", \"bytes\": %" PRIu64 ", \"seconds\": %.6f, \"bytes_per_s\": %.0f"
	       ", \"files_per_s\": %.1f, \"io_seconds\": %.6f, \"errors\": %" PRIu64 "}\n",
	       mode, threads, (uint64_t)atomic_load(&j.files),
	       (uint64_t)atomic_load(&j.bytes), dt,
	       (double)atomic_load(&j.bytes) / dt,
	       (double)atomic_load(&j.files) / dt,
	       (double)atomic_load(&j.io_ns) / 1e9,
	       (uint64_t)atomic_load(&j.errors));
	return atomic_load(&j.errors) ? 1 : 0;
}
