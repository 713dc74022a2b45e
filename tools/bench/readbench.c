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
 *   readbench loop [-t THREADS] [-s SEED] [-b SIZE] [-c USEC] -S STOPFILE -o TRACE LIST
 *       read every file of LIST again and again, each reader in an order of
 *       its own (shuffled with SEED + its number; 0 keeps LIST's), until
 *       STOPFILE exists (looked for before each file), and time every call:
 *       each open, read and close.  TRACE gets one record per call, two
 *       native int64s: the call's end (CLOCK_REALTIME, ns, so it lines up
 *       with `date +%s%N`) and (duration in ns << 3) | (failed << 2) | op,
 *       op 0 open, 1 read, 2 close.  A pause of the filesystem shows as the
 *       calls it held (tools/bench.sh restart).  Errors are counted, the
 *       first few named on stderr with their time, and the readers go on.
 *
 * Prints one JSON object on stdout:
 *   {"mode": ..., "threads": T, "files": N, "bytes": B, "seconds": S,
 *    "bytes_per_s": ..., "files_per_s": ..., "io_seconds": W, "errors": E}
 * where io_seconds is the readers' time in open/read/close, summed: with
 * -c, the time the "training loop" stalled on its input (loop adds "calls").
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
	/* loop */
	const char *stop;		/* -S: the readers end once it exists */
	uint64_t seed;
	int64_t real_off_ns;		/* CLOCK_REALTIME - CLOCK_MONOTONIC */
	uint64_t calls;			/* timed, all readers (after the join) */
};

/* loop: one record per timed call (see the header) */
struct lrec {
	int64_t end_ns;
	int64_t dur_op;
};

struct lthread {
	struct job *j;
	unsigned long idx;
	struct lrec *r;
	size_t n, cap;
	pthread_t tid;
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

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void shuffle(char **v, size_t n, uint64_t seed);

/* loop: keep the record of one call that began at @t0 */
static void note_call(struct lthread *t, int64_t t0, int op, bool failed)
{
	int64_t t1 = mono_ns();

	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 65536;
		struct lrec *nr = realloc(t->r, cap * sizeof(*nr));

		if (!nr)
			return;	/* out of memory: the call goes untimed */
		t->r = nr;
		t->cap = cap;
	}
	t->r[t->n++] = (struct lrec){
		.end_ns = t1 + t->j->real_off_ns,
		.dur_op = ((t1 - t0) << 3) | (failed ? 4 : 0) | op,
	};
}

static void loop_error(struct job *j, const char *path, const char *call, int err)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (atomic_fetch_add(&j->errors, 1) < 5)
		fprintf(stderr, "readbench: %lld.%03ld: %s of %s: %s\n", (long long)ts.tv_sec,
			ts.tv_nsec / 1000000, call, path, strerror(err));
}

static void *loop_reader(void *arg)
{
	struct lthread *t = arg;
	struct job *j = t->j;
	char *buf = malloc(j->bufsize);
	char **order = malloc(j->npaths * sizeof(*order));

	if (!buf || !order) {
		atomic_fetch_add(&j->errors, 1);
		free(buf);
		free(order);
		return NULL;
	}
	memcpy(order, j->paths, j->npaths * sizeof(*order));
	for (uint64_t pass = 0;; pass++) {
		if (j->seed)
			shuffle(order, j->npaths, j->seed + t->idx + 1000 * pass);
		for (size_t i = 0; i < j->npaths; i++) {
			int64_t t0, total = 0;
			ssize_t n;
			int fd, err;

			if (access(j->stop, F_OK) == 0)
				goto out;
			t0 = mono_ns();
			fd = open(order[i], O_RDONLY | O_CLOEXEC);
			err = errno;
			note_call(t, t0, 0, fd < 0);
			if (fd < 0) {
				loop_error(j, order[i], "open", err);
				continue;
			}
			for (;;) {
				t0 = mono_ns();
				n = read(fd, buf, j->bufsize);
				err = errno;
				note_call(t, t0, 1, n < 0);
				if (n <= 0)
					break;
				total += n;
			}
			if (n < 0)
				loop_error(j, order[i], "read", err);
			t0 = mono_ns();
			err = close(fd) ? errno : 0;
			note_call(t, t0, 2, err != 0);
			if (err)
				loop_error(j, order[i], "close", err);
			if (n == 0 && !err) {
				atomic_fetch_add(&j->bytes, (uint64_t)total);
				atomic_fetch_add(&j->files, 1);
			}
			if (j->step_ns) {
				struct timespec ts = {
					.tv_sec = (time_t)(j->step_ns / 1000000000u),
					.tv_nsec = (long)(j->step_ns % 1000000000u),
				};

				while (nanosleep(&ts, &ts) && errno == EINTR)
					;
			}
		}
	}
out:
	free(order);
	free(buf);
	return NULL;
}

/* loop: run the readers until the stop file exists, write TRACE */
static int run_loop(struct job *j, unsigned long threads, const char *trace, double *dt)
{
	struct lthread *ts = calloc(threads, sizeof(*ts));
	struct timespec rt;
	unsigned long started = 0;
	double t0 = now_s();
	FILE *f;
	int ret = 0;

	if (!ts)
		return -ENOMEM;
	clock_gettime(CLOCK_REALTIME, &rt);
	j->real_off_ns = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - mono_ns();
	for (unsigned long i = 0; i < threads; i++) {
		ts[i] = (struct lthread){ .j = j, .idx = i };
		if (pthread_create(&ts[i].tid, NULL, loop_reader, &ts[i])) {
			fprintf(stderr, "readbench: cannot start thread %lu\n", i);
			atomic_fetch_add(&j->errors, 1);
			break;
		}
		started++;
	}
	for (unsigned long i = 0; i < started; i++) {
		pthread_join(ts[i].tid, NULL);
		j->calls += ts[i].n;
	}
	*dt = now_s() - t0;
	f = fopen(trace, "we");
	if (!f) {
		ret = -errno;
	} else {
		for (unsigned long i = 0; i < started; i++)
			if (ts[i].n && fwrite(ts[i].r, sizeof(*ts[i].r), ts[i].n, f) != ts[i].n)
				ret = -EIO;
		if (fclose(f) && !ret)
			ret = -EIO;
	}
	for (unsigned long i = 0; i < started; i++)
		free(ts[i].r);
	free(ts);
	return ret;
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
		"       readbench loop [-t THREADS] [-s SEED] [-b SIZE] [-c USEC] -S STOPFILE -o TRACE LIST\n"
		"Reads and prints {bytes_per_s, files_per_s, ...} as JSON.\n");
}

int main(int argc, char **argv)
{
	struct job j = { .bufsize = 1 << 20 };
	pthread_t tids[MAX_THREADS];
	unsigned long threads = 1, count = 0;
	uint64_t seed = 1;
	const char *mode, *trace = NULL;
	double t0, dt = 0;
	int opt;
	bool seq, loop, print_order = false;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	mode = argv[1];
	seq = !strcmp(mode, "seq");
	loop = !strcmp(mode, "loop");
	if (!seq && !loop && strcmp(mode, "files")) {
		usage(stderr);
		return 2;
	}
	optind = 2;
	while ((opt = getopt(argc, argv, "b:t:s:n:c:PS:o:")) != -1) {
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
		case 'S':
			j.stop = optarg;
			break;
		case 'o':
			trace = optarg;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc || (loop && (!j.stop || !trace))) {
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
		if (loop) {
			int ret;

			if (!j.npaths) {
				fprintf(stderr, "readbench: %s names no file\n", argv[optind]);
				return 2;
			}
			j.seed = seed;
			ret = run_loop(&j, threads, trace, &dt);
			if (ret)
				fprintf(stderr, "readbench: %s: %s\n", trace, strerror(-ret));
			printf("{\"mode\": \"loop\", \"threads\": %lu, \"files\": %" PRIu64
			       ", \"bytes\": %" PRIu64 ", \"seconds\": %.6f, \"files_per_s\": %.1f"
			       ", \"calls\": %" PRIu64 ", \"errors\": %" PRIu64 "}\n",
			       threads, (uint64_t)atomic_load(&j.files), (uint64_t)atomic_load(&j.bytes),
			       dt, (double)atomic_load(&j.files) / (dt > 0 ? dt : 1e-9),
			       j.calls, (uint64_t)atomic_load(&j.errors));
			return ret || atomic_load(&j.errors) ? 1 : 0;
		}
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
