/* SPDX-License-Identifier: Apache-2.0 */
/*
 * aubench: accelerator utilization (AU) of simulated training jobs, after
 * MLPerf Storage's DLIO.  tools/bench.sh (section "au") times it; it
 * reads any directory, with read(2), or with stagefs's client library
 * into a GPU's memory (-g, below).
 *
 *   aubench gen -w WORKLOAD [-N COUNT] [-z SCALE] [-k PER_FILE] DIR
 *       write WORKLOAD's dataset into DIR/WORKLOAD/: COUNT files of
 *       pseudo-random bytes, each file's bytes unique (a content-addressed
 *       cache must not deduplicate them), then fdatasync.
 *
 *   aubench run -w WORKLOAD -n N [options] DIR
 *       one run with N simulated accelerators; one JSON line.
 *
 *   aubench search -w WORKLOAD [options] DIR
 *       the largest N whose AU is at or above the pass line: one JSON line
 *       per trial ({"trial": ...}), then {"result": ...}.
 *
 * Workloads (MLPerf Storage v1/v2 H100 configurations):
 *
 *   name       sample     samples/file batch compute/batch pass  readers
 *   unet3d     146.6 MB   1            7     0.323 s       0.90  4
 *   resnet50   114.7 KB   1251         400   0.224 s       0.90  8
 *   cosmoflow  2.83 MB    1            1     0.0035 s      0.70  4
 *
 * The model of one accelerator (one DLIO rank): its share of the epoch's
 * files (the file list shuffled per epoch with the seed and the epoch
 * number, dealt round-robin to the accelerators; each runs as many steps
 * as the one dealt the fewest samples can, the rest is left unread), T
 * reader threads that
 * take the next file of that share and read its samples in order (one
 * read(2) per sample; a file of one sample is read whole in reads of at most
 * 4 MiB: open, read, close), and a training loop that waits until the next
 * batch's samples have been read, then "computes" (sleeps) for the compute
 * time times the scale factor -S.  Readers run at most T x -p batches
 * ahead of the training loop (-p 2 by default: PyTorch's prefetch_factor,
 * batches per worker).  A partial last batch of an epoch is dropped, as
 * DLIO does.  All accelerators start each epoch together (an epoch ends at
 * a barrier).
 *
 * With -g DEV the readers read each sample with libstagefs's
 * sfs_read_device() (docs/gpudirect.md: the cache file handed over by a
 * stagefs mount, else the file) into device memory of GPU DEV, and each
 * step occupies that GPU for its compute time (tools/bench/aubgpu.c: a
 * spin kernel on a stream of the accelerator's own; a sleep where the
 * kernel does not load).  -g -1 reads into host memory through the same
 * pipeline and sleeps.  "read_via" and "compute_via" say which.
 *
 *   AU = compute time / wall time, per accelerator; the run's AU is their
 *   mean (DLIO's train_au_mean_percentage), its min is printed too.
 *
 * The first batch of every epoch is waited for whatever the storage (the
 * readers start with the epoch, nothing is read ahead of it), and in a
 * short run that wait alone can decide whether AU passes.  So each run
 * reports two AUs: "au", of the whole run (the one MLPerf Storage
 * states), and "au_steady" (its min: "au_steady_min"), the same compute
 * over the wall time less each epoch's wait for its first batch (a
 * staging time, -H "go SECONDS", stays in it); that wait, summed over
 * accelerators and epochs as "wait_s" is, is "first_wait_s".  au_steady >= au by construction (the same compute over
 * less time, per accelerator) and <= 1 (an epoch's wall time holds its
 * waits and its compute, one after the other).  The pass line is held
 * against au unless -A au_steady says otherwise; "decided_by" names the
 * one that decided "passed" (and, in search, every trial).
 *
 * -R STEPS makes a long run: epochs repeat, past -e, until every
 * accelerator has run at least STEPS steps (MLPerf Storage asks for 500):
 * a figure over many steps, less at the mercy of one slow batch;
 * "steps" is the fewest steps an accelerator computed, "min_run_steps"
 * the STEPS asked (0 without -R).  The epochs needed are counted before
 * the run from the dealing; if 1024 epochs do not give STEPS steps, the
 * run is not made (status 2).  Each epoch still starts with a batch
 * waited for, so the first batches weigh in au as one step in an epoch's
 * steps: only more steps an epoch (more data, a smaller batch) make them
 * weigh less; au_steady says what they cost.  A long run decides on au
 * too, unless -A au_steady is given.
 *
 * Wall time counts from each epoch's start to its barrier; -D drops the page
 * cache (sync; drop_caches = 3, as root) before each epoch, outside the
 * wall time, so that a dataset smaller than RAM is read from the storage
 * under test each epoch as one larger than RAM would be.
 *
 * Scaling (this tool runs on small machines): -S multiplies the compute
 * time, -z divides the sample size (gen only; run and search take the
 * sizes of the files found), -b sets another batch size and keeps the
 * compute time per sample (unless -c sets the time per batch), so that a
 * small dataset still gives each accelerator many steps an epoch (the
 * first batch of an epoch is always waited for).  An accelerator then
 * wants sample_bytes * batch / (compute * S) bytes/s at 100 % AU; a system
 * that keeps N of them busy keeps about N / (S * z) real ones busy, if it
 * scales linearly.
 *
 * search: the first trial is at N = -n START (default: the most the data
 * allows, at most -m, default 64; the data allows N while each accelerator
 * gets -M, default 10, steps an epoch): far past the knee, throughput alone
 * bounds AU, so after a failure at H with AU a the next trial is at
 * floor(H * a / pass) when that lies between the largest passing and the
 * smallest failing N tried, else at their midpoint; after a pass at L
 * with no failure yet, at 2L.  It ends when they are adjacent.  With -H, before
 * each trial aubench writes "prepare N" on stdout and reads a line from
 * stdin (-L LISTDIR takes the file names and sizes from LISTDIR/WORKLOAD,
 * so DIR may be mounted or filled only by the caller's preparation; a file
 * read back with another size is a read error): "go" starts the trial, "go SECONDS" starts it and counts SECONDS of
 * idle accelerators into the wall time (staging done by the caller before
 * training could start, e.g. copy-then-read), "stop" ends the search.
 *
 * The readers' own figures, for checking what a storage system reports
 * about them (stagefs's job row: tools/bench/aubench_agree.py): bytes read
 * (every byte read(2) returned; "partial_files" counts files left before
 * their end, of which a kernel's readahead may fetch more, "opened_bytes"
 * the sizes of the files opened, the most that could be read), each reader
 * thread's time blocked in open, read and close ("reader_blocked_s"), and
 * its active time counted as stagefs counts a reader thread's: each call's
 * own time plus the gap since the thread's previous call, unless that gap
 * is longer than -G (stagefs's stall_idle_gap, 2 s).  "reader_lost_s" is
 * the blocked time beyond what reading costs when the storage does not
 * make the reader wait: per epoch, the blocked time less the cheapest
 * epoch's blocked time per byte times the epoch's bytes (on a cache that
 * the first epoch fills, the later epochs are the cheap ones; with one
 * epoch nothing is subtracted).  "reader_stall" = lost / active, summed
 * over reader threads: the share of the readers' time lost waiting, the
 * figure stagefs's stall_ratio (stall_ns / active_ns) states.  Per epoch:
 * "epoch_bytes", "epoch_blocked_s", "epoch_active_s".
 *
 * Exit status: 0, 1 on a read error (the run is reported with errors > 0),
 * 2 on a usage error (or too little data for -R).
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpudirect/libstagefs.h"
#include "tools/bench/aubgpu.h"

#define AUB_MAX_N	256	/* accelerators */
#define AUB_MAX_T	64	/* readers per accelerator */
#define AUB_READ_MAX	(4u << 20)
#define AUB_MAX_EPOCHS	1024	/* a run's epochs, -R's included */

struct aub_workload {
	const char *name;
	uint64_t sample;	/* bytes */
	unsigned per_file;	/* samples per file */
	unsigned batch;
	double compute;		/* seconds per batch */
	double pass;		/* AU pass line */
	unsigned threads;	/* readers per accelerator */
	const char *ext;
};

static const struct aub_workload aub_workloads[] = {
	{ "unet3d", 146600000, 1, 7, 0.323, 0.90, 4, "npz" },
	{ "resnet50", 114700, 1251, 400, 0.224, 0.90, 8, "tfrecord" },
	{ "cosmoflow", 2830000, 1, 1, 0.0035, 0.70, 4, "tfrecord" },
};

struct aub_opts {
	const struct aub_workload *wl;
	const char *dir;		/* DIR/WORKLOAD */
	unsigned threads, batch, prefetch, epochs, per_file, min_steps;
	unsigned run_steps;		/* -R: steps each accelerator runs at least (0: -e decides) */
	bool by_steady;			/* -A au_steady: the pass line is held against au_steady */
	double compute, scale, pass;
	uint64_t seed;
	bool drop;
	unsigned start, max;		/* search */
	bool handshake;
	double idle_gap;		/* -G: a reader idle longer is not active */
	bool lib;			/* -g: samples read with libstagefs ... */
	int dev;			/* ... into GPU dev's memory (-1: host memory) */
};

struct aub_file {
	char *path;
	uint64_t size;
};

struct aub_set {
	struct aub_file *v;
	size_t n;
};

struct aub_run;

/* One simulated accelerator.  The counters are protected by @lock. */
struct aub_acc {
	struct aub_run *run;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t *files;		/* indexes into the set: this epoch's share */
	size_t nfiles;
	size_t next_file;	/* protected by lock */
	uint64_t target;	/* samples this epoch: steps * batch */
	uint64_t issued;	/* samples a reader has claimed */
	uint64_t delivered;	/* samples read */
	uint64_t consumed;	/* batches computed */
	unsigned readers;	/* reader threads still running */
	bool stop;
	/* results, all epochs; first_wait_s: the waits for each epoch's first batch */
	double compute_s, wall_s, wait_s, first_wait_s;
	uint64_t steps;		/* batches computed */
	/* the readers' calls (struct aub_io), added as each reader ends; protected by lock */
	double blocked_s, active_s;
	uint64_t calls, partial, opened;
	atomic_uint_fast64_t bytes, samples, errors;
	void *stream;		/* the training steps' on the GPU (-g DEV) */
};

/*
 * One reader thread's time in the calls that can block on data (open,
 * read, close), and its active time as stagefs counts a reader thread's
 * (docs/feedrate.md, "Stall share"): each call's own time, plus the gap
 * since the thread's previous call unless that gap is longer than
 * o->idle_gap (stagefs's stall_idle_gap).  Local to its thread.
 */
struct aub_io {
	double blocked, active, last_end;	/* last_end < 0: no call yet */
	uint64_t calls, partial;		/* partial: files left before their end */
	uint64_t opened;			/* the sizes of the files opened */
};

struct aub_run {
	const struct aub_opts *o;
	const struct aub_set *set;
	struct aub_acc *acc;
	unsigned n;
};

static double aub_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void aub_sleep(double s)
{
	struct timespec ts;

	if (s <= 0)
		return;
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* splitmix64: a fixed PRNG so orders and data never depend on libc. */
static uint64_t aub_rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void aub_shuffle(size_t *v, size_t n, uint64_t seed)
{
	uint64_t s = seed;

	for (size_t i = n; i > 1; i--) {
		size_t k = (size_t)(aub_rng(&s) % i);
		size_t t = v[i - 1];

		v[i - 1] = v[k];
		v[k] = t;
	}
}

/* ------------------------------------------------------------------------ */
/* the dataset */

static int aub_cmp_file(const void *a, const void *b)
{
	return strcmp(((const struct aub_file *)a)->path, ((const struct aub_file *)b)->path);
}

static void aub_set_release(struct aub_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].path);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

/*
 * Load the regular, non-empty files of @dir (not recursive), sorted by
 * name, with their sizes; with @readdir_, their paths are the same names
 * under @readdir_ (listed in one place, read in another).  Returns 0 or -errno; release with aub_set_release().
 */
static int aub_set_load(struct aub_set *s, const char *dir, const char *readdir_)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t cap = 0;
	int err = 0;

	memset(s, 0, sizeof(*s));
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		struct stat st;
		char *p;

		if (e->d_name[0] == '.')
			continue;
		if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) {
			err = -ENOMEM;
			break;
		}
		if (stat(p, &st) || !S_ISREG(st.st_mode) || st.st_size == 0) {
			free(p);
			continue;
		}
		if (readdir_) {
			free(p);
			if (asprintf(&p, "%s/%s", readdir_, e->d_name) < 0) {
				err = -ENOMEM;
				break;
			}
		}
		if (s->n == cap) {
			struct aub_file *nv = realloc(s->v, (cap ? cap * 2 : 256) * sizeof(*nv));

			if (!nv) {
				free(p);
				err = -ENOMEM;
				break;
			}
			s->v = nv;
			cap = cap ? cap * 2 : 256;
		}
		s->v[s->n].path = p;
		s->v[s->n].size = (uint64_t)st.st_size;
		s->n++;
	}
	closedir(d);
	if (err) {
		aub_set_release(s);
		return err;
	}
	qsort(s->v, s->n, sizeof(*s->v), aub_cmp_file);
	return s->n ? 0 : -ENOENT;
}

/* ------------------------------------------------------------------------ */
/* one run */

/* Samples in file @f: whole file for one sample per file, else size/sample. */
static uint64_t aub_file_samples(const struct aub_opts *o, const struct aub_file *f)
{
	return o->per_file == 1 ? 1 : f->size / o->wl->sample;
}

/*
 * Claim one sample slot: blocks while the reader would be more than
 * o->prefetch batches ahead of the training loop.  Returns false when the
 * epoch's target is reached (nothing more to read).
 */
static bool aub_claim(struct aub_acc *a)
{
	const struct aub_opts *o = a->run->o;
	bool ok;

	pthread_mutex_lock(&a->lock);
	while (!a->stop && a->issued < a->target &&
	       a->issued >= (a->consumed + (uint64_t)o->prefetch * o->threads) * o->batch)
		pthread_cond_wait(&a->cond, &a->lock);
	ok = !a->stop && a->issued < a->target;
	if (ok)
		a->issued++;
	pthread_mutex_unlock(&a->lock);
	return ok;
}

static void aub_deliver(struct aub_acc *a, uint64_t nsamples)
{
	pthread_mutex_lock(&a->lock);
	a->delivered += nsamples;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

/* Give back a claimed slot that could not be filled (read error). */
static void aub_unclaim(struct aub_acc *a)
{
	pthread_mutex_lock(&a->lock);
	a->issued--;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

/* Count one call that ran from @t0 to @t1 (seconds, aub_now()). */
static void aub_io_note(struct aub_io *io, double idle_gap, double t0, double t1)
{
	if (io->last_end >= 0 && t0 - io->last_end <= idle_gap)
		io->active += t0 - io->last_end;
	io->active += t1 - t0;
	io->blocked += t1 - t0;
	io->last_end = t1;
	io->calls++;
}

static void aub_read_error(struct aub_acc *a, const char *path, int err)
{
	if (atomic_fetch_add(&a->errors, 1) < 5)
		fprintf(stderr, "aubench: %s: %s\n", path, strerror(err));
}

/* -g DEV with a GPU: samples into its memory, steps on it */
static bool aub_on_gpu(const struct aub_opts *o)
{
	return o->lib && o->dev >= 0;
}

/*
 * Where a reader's bytes come from: read(2) of the file, or the client
 * library into host or GPU memory (-g).  A handle is an fd or a struct
 * sfs_file.
 */
struct aub_src {
	int (*open)(const char *path, void **h);
	/* the next bytes (at @off) into @buf: > 0, 0 at the end, -errno */
	ssize_t (*read)(void *h, uint64_t off, char *buf, size_t len, int dev);
	/* is @off the file's end? (a file of one sample must end there) */
	bool (*at_end)(void *h, uint64_t off, char *buf);
	void (*close)(void *h);
};

static int fd_open(const char *path, void **h)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	*h = (void *)(intptr_t)fd;
	return 0;
}

static ssize_t fd_read(void *h, uint64_t off, char *buf, size_t len, int dev)
{
	ssize_t r = read((int)(intptr_t)h, buf, len);

	(void)off;
	(void)dev;
	return r < 0 ? -errno : r;
}

static bool fd_at_end(void *h, uint64_t off, char *buf)
{
	(void)off;
	return read((int)(intptr_t)h, buf, 1) == 0;
}

static void fd_close(void *h)
{
	close((int)(intptr_t)h);
}

static const struct aub_src aub_src_fd = { fd_open, fd_read, fd_at_end, fd_close };

static int lib_open(const char *path, void **h)
{
	return sfs_client_open(path, (struct sfs_file **)h);
}

static ssize_t lib_read(void *h, uint64_t off, char *buf, size_t len, int dev)
{
	return sfs_read_device(h, (int64_t)off, len, buf, dev);
}

static bool lib_at_end(void *h, uint64_t off, char *buf)
{
	(void)buf;
	return (uint64_t)sfs_client_size(h) == off;
}

static void lib_close(void *h)
{
	sfs_client_close(h);
}

static const struct aub_src aub_src_lib = { lib_open, lib_read, lib_at_end, lib_close };

/*
 * Read one file's samples (claiming a slot for each) from @src into @buf,
 * timing each call in @io; false to stop.
 */
static bool aub_read_file(struct aub_acc *a, const struct aub_src *src,
			  const struct aub_file *f, char *buf, struct aub_io *io)
{
	const struct aub_opts *o = a->run->o;
	uint64_t n = aub_file_samples(o, f), off = 0, chunk, i;
	double t0;
	ssize_t r;
	void *h;
	int err;

	if (!aub_claim(a))
		return false;
	t0 = aub_now();
	err = -src->open(f->path, &h);
	aub_io_note(io, o->idle_gap, t0, aub_now());
	if (err) {
		aub_read_error(a, f->path, err);
		aub_unclaim(a);
		return true;
	}
	io->opened += f->size;
	for (i = 0; i < n; i++) {
		uint64_t want = o->per_file == 1 ? f->size : o->wl->sample, got = 0;

		err = EIO;	/* a short file */
		if (i && !aub_claim(a))
			break;
		while (got < want) {
			chunk = want - got < AUB_READ_MAX ? want - got : AUB_READ_MAX;
			t0 = aub_now();
			r = src->read(h, off + got, buf, chunk, o->dev);
			if (r < 0)
				err = (int)-r;
			aub_io_note(io, o->idle_gap, t0, aub_now());
			if (r == -EINTR)
				continue;
			if (r <= 0)
				break;
			got += (uint64_t)r;
		}
		/* a file of one sample must end there: else it is not the listed file */
		if (got == want && o->per_file == 1) {
			t0 = aub_now();
			if (!src->at_end(h, off + got, buf))
				got++;
			aub_io_note(io, o->idle_gap, t0, aub_now());
		}
		if (got != want) {
			aub_read_error(a, f->path, err);
			aub_unclaim(a);
			break;
		}
		off += got;
		atomic_fetch_add(&a->bytes, got);
		atomic_fetch_add(&a->samples, 1);
		aub_deliver(a, 1);
	}
	if (i < n)
		io->partial++;
	t0 = aub_now();
	src->close(h);
	aub_io_note(io, o->idle_gap, t0, aub_now());
	return true;
}

static void *aub_reader(void *arg)
{
	struct aub_acc *a = arg;
	const struct aub_opts *o = a->run->o;
	char *buf = aub_on_gpu(o) ? aubgpu_alloc(AUB_READ_MAX) : malloc(AUB_READ_MAX);
	struct aub_io io = { .last_end = -1 };
	size_t i;

	if (!buf) {
		atomic_fetch_add(&a->errors, 1);
		i = SIZE_MAX;
	}
	while (buf) {
		pthread_mutex_lock(&a->lock);
		i = a->next_file < a->nfiles ? a->next_file++ : SIZE_MAX;
		pthread_mutex_unlock(&a->lock);
		if (i == SIZE_MAX)
			break;
		if (!aub_read_file(a, o->lib ? &aub_src_lib : &aub_src_fd,
				   &a->run->set->v[a->files[i]], buf, &io))
			break;
	}
	if (aub_on_gpu(o))
		aubgpu_free(buf);
	else
		free(buf);
	pthread_mutex_lock(&a->lock);
	a->blocked_s += io.blocked;
	a->active_s += io.active;
	a->calls += io.calls;
	a->partial += io.partial;
	a->opened += io.opened;
	a->readers--;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

/* The training loop of one accelerator for one epoch. */
static void *aub_trainer(void *arg)
{
	struct aub_acc *a = arg;
	const struct aub_opts *o = a->run->o;
	uint64_t steps = a->target / o->batch;
	double c = o->compute * o->scale;

	for (uint64_t s = 0; s < steps; s++) {
		double t = aub_now();
		bool dead;

		pthread_mutex_lock(&a->lock);
		while (a->delivered < (s + 1) * o->batch && a->readers && !a->stop)
			pthread_cond_wait(&a->cond, &a->lock);
		/* every reader has given up (errors): the rest never comes */
		dead = a->delivered < (s + 1) * o->batch;
		pthread_mutex_unlock(&a->lock);
		t = aub_now() - t;
		a->wait_s += t;
		if (s == 0)
			a->first_wait_s += t;
		if (dead)
			break;
		/* a real step on the GPU (-g DEV), or a sleep */
		if (!aub_on_gpu(o) || aubgpu_compute(&a->stream, c))
			aub_sleep(c);
		a->compute_s += c;
		a->steps++;
		pthread_mutex_lock(&a->lock);
		a->consumed = s + 1;
		pthread_cond_broadcast(&a->cond);
		pthread_mutex_unlock(&a->lock);
	}
	return NULL;
}

static int aub_drop_caches(void)
{
	int fd, err = 0;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "3", 1) != 1)
		err = -errno;
	close(fd);
	return err;
}

/*
 * A run's figures.  The readers' (blocked, active, lost, stall) are what
 * a storage system's per-reader stall share is checked against
 * (docs/benchmarks.md, "stagefs's own figures"): lost is the time blocked
 * beyond what the cheapest epoch's calls cost per byte (with one epoch,
 * all of it), stall = lost / active.
 */
struct aub_result {
	unsigned n;
	double au, au_min, wall, compute, wait, mbps, sps, staging;
	double au_steady, au_steady_min, first_wait;
	uint64_t steps;		/* the fewest batches an accelerator computed */
	uint64_t samples, samples_expected, bytes, bytes_expected, errors;
	double blocked, active, lost, stall;
	uint64_t calls, partial, opened;
	double epoch_au[AUB_MAX_EPOCHS], epoch_blocked[AUB_MAX_EPOCHS], epoch_active[AUB_MAX_EPOCHS];
	uint64_t epoch_bytes[AUB_MAX_EPOCHS];
	unsigned epochs;
};

/* The AU the pass line is held against: au, or au_steady with -A au_steady. */
static double aub_decider(const struct aub_opts *o, const struct aub_result *r)
{
	return o->by_steady ? r->au_steady : r->au;
}

/* Sums over the accelerators of @r: bytes read, blocked and active time. */
static void aub_io_sum(const struct aub_run *r, uint64_t *bytes, double *blocked, double *active)
{
	*bytes = 0;
	*blocked = *active = 0;
	for (unsigned k = 0; k < r->n; k++) {
		*bytes += atomic_load(&r->acc[k].bytes);
		*blocked += r->acc[k].blocked_s;
		*active += r->acc[k].active_s;
	}
}

/*
 * The readers' time lost waiting for the storage: per epoch, the time
 * blocked beyond the cheapest epoch's cost per byte (an epoch of cached
 * data, on a cache that fills in the first), summed.  With one epoch
 * there is nothing to compare with: all of the blocked time.
 */
static double aub_lost(const struct aub_result *res)
{
	unsigned ne = res->epochs < AUB_MAX_EPOCHS ? res->epochs : AUB_MAX_EPOCHS;
	double per_byte = -1, lost = 0;

	for (unsigned e = 0; ne > 1 && e < ne; e++) {
		double c;

		if (!res->epoch_bytes[e])
			continue;
		c = res->epoch_blocked[e] / (double)res->epoch_bytes[e];
		if (per_byte < 0 || c < per_byte)
			per_byte = c;
	}
	if (per_byte < 0)
		return res->blocked;
	for (unsigned e = 0; e < ne; e++) {
		double l = res->epoch_blocked[e] - per_byte * (double)res->epoch_bytes[e];

		lost += l > 0 ? l : 0;
	}
	return lost;
}

/*
 * Deal this epoch's shuffled files to the accelerators and size each one's
 * target; returns the samples expected over all of them and adds their
 * bytes to *@bytes.
 */
static uint64_t aub_deal(struct aub_run *r, size_t *order, unsigned epoch, uint64_t *bytes)
{
	const struct aub_opts *o = r->o;
	const struct aub_set *set = r->set;
	uint64_t expect = 0, steps = UINT64_MAX;

	for (size_t i = 0; i < set->n; i++)
		order[i] = i;
	aub_shuffle(order, set->n, o->seed * 1000003u + epoch);
	for (unsigned k = 0; k < r->n; k++) {
		struct aub_acc *a = &r->acc[k];
		uint64_t have = 0;

		a->nfiles = 0;
		for (size_t i = k; i < set->n; i += r->n) {
			a->files[a->nfiles++] = order[i];
			have += aub_file_samples(o, &set->v[order[i]]);
		}
		if (have / o->batch < steps)
			steps = have / o->batch;
	}
	/*
	 * Every accelerator runs as many steps (DLIO gives each rank
	 * samples / ranks): one with more would leave the others idle at the
	 * epoch's barrier, an AU loss that has nothing to do with the storage.
	 */
	for (unsigned k = 0; k < r->n; k++) {
		struct aub_acc *a = &r->acc[k];
		uint64_t left;

		a->target = steps * o->batch;
		a->next_file = a->issued = a->delivered = a->consumed = 0;
		a->readers = o->threads;
		a->stop = false;
		expect += a->target;
		/* the bytes of the first target samples in file order */
		left = a->target;
		for (size_t i = 0; i < a->nfiles && left; i++) {
			const struct aub_file *f = &set->v[a->files[i]];
			uint64_t ns = aub_file_samples(o, f);

			if (ns > left)
				ns = left;
			*bytes += o->per_file == 1 ? f->size : ns * o->wl->sample;
			left -= ns;
		}
	}
	return expect;
}

/*
 * The epochs of a run of @r: at least o->epochs, and with -R as many more
 * as it takes every accelerator to run at least o->run_steps steps (each
 * epoch's dealing decides its steps, the same for every accelerator: it
 * is done ahead here, as aub_run() will do it).  0 if AUB_MAX_EPOCHS
 * epochs are not enough; *@steps: the steps each accelerator will run.
 */
static unsigned aub_plan_epochs(struct aub_run *r, size_t *order, uint64_t *steps)
{
	const struct aub_opts *o = r->o;
	uint64_t bytes = 0;
	unsigned e;

	*steps = 0;
	for (e = 0; e < o->epochs || *steps < o->run_steps; e++) {
		if (e == AUB_MAX_EPOCHS)
			return 0;
		*steps += aub_deal(r, order, e, &bytes) / ((uint64_t)r->n * o->batch);
	}
	return e;
}

/*
 * Run @n accelerators for o->epochs epochs over @set (with -R, as many
 * more as it takes: aub_plan_epochs()); @staging seconds of idle time are
 * added to every accelerator's wall time.  Fills @res; returns 0, or
 * -errno if threads could not be started or -R cannot be met.
 */
static int aub_run(const struct aub_opts *o, const struct aub_set *set, unsigned n,
		   double staging, struct aub_result *res)
{
	struct aub_run r = { .o = o, .set = set, .n = n };
	pthread_t *tids = NULL;
	size_t *order = NULL;
	int err = 0;
	double t_all = 0;

	memset(res, 0, sizeof(*res));
	res->n = n;
	res->staging = staging;
	r.acc = calloc(n, sizeof(*r.acc));
	order = calloc(set->n, sizeof(*order));
	tids = calloc((size_t)n * (o->threads + 1), sizeof(*tids));
	if (!r.acc || !order || !tids) {
		err = -ENOMEM;
		goto out_free;
	}
	for (unsigned k = 0; k < n; k++) {
		struct aub_acc *a = &r.acc[k];

		a->run = &r;
		pthread_mutex_init(&a->lock, NULL);
		pthread_cond_init(&a->cond, NULL);
		a->files = calloc(set->n / n + 1, sizeof(*a->files));
		if (!a->files) {
			err = -ENOMEM;
			goto out_release;
		}
		a->wall_s = staging;
	}
	res->epochs = aub_plan_epochs(&r, order, &res->steps);
	if (!res->epochs) {
		fprintf(stderr, "aubench: %u accelerators get %" PRIu64 " steps each in %u epochs,"
			" fewer than %u (-R): too little data\n", n, res->steps, AUB_MAX_EPOCHS,
			o->run_steps);
		err = -E2BIG;
		goto out_release;
	}
	for (unsigned e = 0; e < res->epochs; e++) {
		double t0, dt, comp0 = 0, comp1 = 0, blk0, blk1, act0, act1;
		uint64_t b0, b1;
		size_t nt = 0;

		if (o->drop && (err = aub_drop_caches())) {
			fprintf(stderr, "aubench: drop_caches: %s\n", strerror(-err));
			goto out_release;
		}
		res->samples_expected += aub_deal(&r, order, e, &res->bytes_expected);
		for (unsigned k = 0; k < n; k++)
			comp0 += r.acc[k].compute_s;
		aub_io_sum(&r, &b0, &blk0, &act0);
		t0 = aub_now();
		for (unsigned k = 0; k < n && !err; k++) {
			if (pthread_create(&tids[nt], NULL, aub_trainer, &r.acc[k])) {
				err = -EAGAIN;
				break;
			}
			nt++;
			for (unsigned t = 0; t < o->threads; t++) {
				if (pthread_create(&tids[nt], NULL, aub_reader, &r.acc[k])) {
					err = -EAGAIN;
					break;
				}
				nt++;
			}
		}
		if (err) {
			for (unsigned k = 0; k < n; k++) {
				pthread_mutex_lock(&r.acc[k].lock);
				r.acc[k].stop = true;
				pthread_cond_broadcast(&r.acc[k].cond);
				pthread_mutex_unlock(&r.acc[k].lock);
			}
		}
		for (size_t i = 0; i < nt; i++)
			pthread_join(tids[i], NULL);
		if (err) {
			fprintf(stderr, "aubench: cannot start %u x %u threads\n", n, o->threads + 1);
			goto out_release;
		}
		dt = aub_now() - t0;
		t_all += dt;
		for (unsigned k = 0; k < n; k++) {
			r.acc[k].wall_s += dt;
			comp1 += r.acc[k].compute_s;
		}
		aub_io_sum(&r, &b1, &blk1, &act1);
		if (e < AUB_MAX_EPOCHS) {
			res->epoch_au[e] = (comp1 - comp0) / ((double)n * (dt + (e ? 0 : staging)));
			res->epoch_bytes[e] = b1 - b0;
			res->epoch_blocked[e] = blk1 - blk0;
			res->epoch_active[e] = act1 - act0;
		}
	}
	res->au_min = res->au_steady_min = 1;
	res->steps = UINT64_MAX;
	for (unsigned k = 0; k < n; k++) {
		struct aub_acc *a = &r.acc[k];
		double au = a->wall_s > 0 ? a->compute_s / a->wall_s : 0;
		/*
		 * The steady state: each epoch's first batch, which nothing
		 * read ahead of (the readers start with the epoch), not
		 * waited for.  Never below au: the same compute over less
		 * time; never above 1: the wall time holds the waits and the
		 * compute one after the other.
		 */
		double steady_wall = a->wall_s - a->first_wait_s;
		double au_steady = steady_wall > 0 ? a->compute_s / steady_wall : 0;

		res->au += au / n;
		if (au < res->au_min)
			res->au_min = au;
		res->au_steady += au_steady / n;
		if (au_steady < res->au_steady_min)
			res->au_steady_min = au_steady;
		if (a->steps < res->steps)
			res->steps = a->steps;
		res->compute += a->compute_s;
		res->wait += a->wait_s;
		res->first_wait += a->first_wait_s;
		res->bytes += atomic_load(&a->bytes);
		res->samples += atomic_load(&a->samples);
		res->errors += atomic_load(&a->errors);
		res->blocked += a->blocked_s;
		res->active += a->active_s;
		res->calls += a->calls;
		res->partial += a->partial;
		res->opened += a->opened;
	}
	res->lost = aub_lost(res);
	res->stall = res->active > 0 ? res->lost / res->active : 0;
	res->wall = t_all + staging;
	res->mbps = res->wall > 0 ? (double)res->bytes / res->wall / 1e6 : 0;
	res->sps = res->wall > 0 ? (double)res->samples / res->wall : 0;
out_release:
	for (unsigned k = 0; k < n; k++) {
		free(r.acc[k].files);
		aubgpu_stream_done(r.acc[k].stream);
		pthread_mutex_destroy(&r.acc[k].lock);
		pthread_cond_destroy(&r.acc[k].cond);
	}
out_free:
	free(tids);
	free(order);
	free(r.acc);
	return err;
}

/* How the readers read: "read(2)", "libstagefs, host memory", "libstagefs, GPU N". */
static const char *aub_read_via(const struct aub_opts *o)
{
	static char via[48];

	if (!o->lib)
		return "read(2)";
	if (o->dev < 0)
		return "libstagefs, host memory";
	snprintf(via, sizeof(via), "libstagefs, GPU %d", o->dev);
	return via;
}

static void aub_print(const char *kind, const struct aub_opts *o, const struct aub_result *r)
{
	printf("{\"%s\": \"%s\", \"n\": %u, \"au\": %.4f, \"au_min\": %.4f"
	       ", \"au_steady\": %.4f, \"au_steady_min\": %.4f, \"first_wait_s\": %.4f"
	       ", \"steps\": %" PRIu64 ", \"min_run_steps\": %u, \"pass\": %.2f"
	       ", \"decided_by\": \"%s\", \"passed\": %s, \"mb_per_s\": %.1f, \"samples_per_s\": %.1f"
	       ", \"samples\": %" PRIu64 ", \"samples_expected\": %" PRIu64
	       ", \"bytes\": %" PRIu64 ", \"bytes_expected\": %" PRIu64
	       ", \"wall_s\": %.3f, \"compute_s\": %.3f, \"wait_s\": %.3f, \"staging_s\": %.3f"
	       ", \"epochs\": %u, \"threads\": %u, \"batch\": %u, \"compute\": %.6f"
	       ", \"scale\": %g, \"errors\": %" PRIu64 ", \"read_via\": \"%s\""
	       ", \"compute_via\": \"%s\", \"epoch_au\": [",
	       kind, o->wl->name, r->n, r->au, r->au_min, r->au_steady, r->au_steady_min,
	       r->first_wait, r->steps, o->run_steps, o->pass, o->by_steady ? "au_steady" : "au",
	       aub_decider(o, r) >= o->pass && !r->errors ? "true" : "false", r->mbps, r->sps,
	       r->samples, r->samples_expected, r->bytes, r->bytes_expected,
	       r->wall, r->compute, r->wait, r->staging, r->epochs, o->threads, o->batch,
	       o->compute, o->scale, r->errors, aub_read_via(o),
	       aub_on_gpu(o) ? aubgpu_compute_via() : "sleep");
	for (unsigned e = 0; e < r->epochs && e < AUB_MAX_EPOCHS; e++)
		printf("%s%.4f", e ? ", " : "", r->epoch_au[e]);
	printf("], \"read_calls\": %" PRIu64 ", \"partial_files\": %" PRIu64
	       ", \"opened_bytes\": %" PRIu64
	       ", \"reader_blocked_s\": %.4f, \"reader_active_s\": %.4f"
	       ", \"reader_lost_s\": %.4f, \"reader_stall\": %.4f, \"idle_gap\": %g"
	       ", \"epoch_bytes\": [", r->calls, r->partial, r->opened, r->blocked,
	       r->active, r->lost, r->stall, o->idle_gap);
	for (unsigned e = 0; e < r->epochs && e < AUB_MAX_EPOCHS; e++)
		printf("%s%" PRIu64, e ? ", " : "", r->epoch_bytes[e]);
	printf("], \"epoch_blocked_s\": [");
	for (unsigned e = 0; e < r->epochs && e < AUB_MAX_EPOCHS; e++)
		printf("%s%.4f", e ? ", " : "", r->epoch_blocked[e]);
	printf("], \"epoch_active_s\": [");
	for (unsigned e = 0; e < r->epochs && e < AUB_MAX_EPOCHS; e++)
		printf("%s%.4f", e ? ", " : "", r->epoch_active[e]);
	printf("]}\n");
	fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* search */

/*
 * The most accelerators of which each gets at least o->min_steps full
 * batches an epoch, whatever the shuffle deals it (files dealt round-robin:
 * each gets at least floor(files / N) of them, of at least the smallest
 * file's samples).  Fewer steps and the first batch of an epoch, which is
 * always waited for, would weigh in AU more than the storage does.
 */
static unsigned aub_max_n(const struct aub_opts *o, const struct aub_set *set)
{
	uint64_t least = UINT64_MAX;
	unsigned best = 0;

	for (size_t i = 0; i < set->n; i++) {
		uint64_t ns = aub_file_samples(o, &set->v[i]);

		if (ns < least)
			least = ns;
	}
	for (unsigned n = 1; n <= AUB_MAX_N && n <= set->n; n++)
		if ((set->n / n) * least >= (uint64_t)o->batch * o->min_steps)
			best = n;
	return best;
}

/* -H: announce trial @n, read the caller's answer; false to stop. */
static bool aub_handshake(unsigned n, double *staging)
{
	char line[128];

	printf("prepare %u\n", n);
	fflush(stdout);
	*staging = 0;
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "go", 2))
		return false;
	if (line[2] == ' ')
		*staging = strtod(line + 3, NULL);
	return true;
}

static int aub_search(const struct aub_opts *o, const struct aub_set *set)
{
	/* indexed by N: a trial ran at N */
	bool tried[AUB_MAX_N + 1] = { false }, passed;
	struct aub_result res, best = { 0 }, fail = { 0 };
	unsigned n = o->start, lo = 0, hi = o->max + 1, trials = 0;
	int rc = 0;

	for (;;) {
		double staging = 0;

		if (o->handshake && !aub_handshake(n, &staging))
			break;
		if (aub_run(o, set, n, staging, &res))
			return 2;
		trials++;
		aub_print("trial", o, &res);
		if (res.errors) {
			rc = 1;
			break;
		}
		passed = aub_decider(o, &res) >= o->pass;
		tried[n] = 1;
		if (passed) {
			lo = n;
			best = res;
		} else {
			hi = n;
			fail = res;
		}
		if (hi == lo + 1)
			break;
		if (hi > o->max) {
			n = lo * 2 > o->max ? o->max : lo * 2;
		} else if (!passed) {
			/* throughput bounds AU: N * AU is about constant past the knee */
			unsigned g = (unsigned)floor(hi * aub_decider(o, &res) / o->pass);

			n = g > lo && g < hi ? g : lo + (hi - lo) / 2;
		} else {
			n = lo + (hi - lo) / 2;
		}
		if (n < 1 || n > o->max || tried[n])
			break;
	}
	printf("{\"result\": \"%s\", \"n\": %u, \"au\": %.4f, \"au_steady\": %.4f"
	       ", \"first_wait_s\": %.4f, \"steps\": %" PRIu64 ", \"mb_per_s\": %.1f"
	       ", \"samples_per_s\": %.1f, \"pass\": %.2f, \"decided_by\": \"%s\", \"trials\": %u"
	       ", \"fail_n\": %u, \"fail_au\": %.4f, \"fail_au_steady\": %.4f"
	       ", \"min_run_steps\": %u, \"max_n\": %u, \"scale\": %g}\n",
	       o->wl->name, lo, best.au, best.au_steady, best.first_wait, best.steps, best.mbps,
	       best.sps, o->pass, o->by_steady ? "au_steady" : "au", trials,
	       hi <= o->max ? hi : 0, hi <= o->max ? fail.au : 0.0,
	       hi <= o->max ? fail.au_steady : 0.0, o->run_steps, o->max, o->scale);
	fflush(stdout);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* gen */

static int aub_gen_file(const char *path, uint64_t size, uint64_t seed)
{
	uint64_t *buf = malloc(1u << 20), s = seed, left = size;
	int fd, err = 0;

	if (!buf)
		return -ENOMEM;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = -errno;
		goto out_free;
	}
	while (left) {
		size_t n = left < (1u << 20) ? (size_t)left : (1u << 20);

		for (size_t i = 0; i < (n + 7) / 8; i++)
			buf[i] = aub_rng(&s);
		if (write(fd, buf, n) != (ssize_t)n) {
			err = errno ? -errno : -EIO;
			break;
		}
		left -= n;
	}
	if (!err && fdatasync(fd))
		err = -errno;
	if (close(fd) && !err)
		err = -errno;
out_free:
	free(buf);
	return err;
}

struct aub_gen {
	const char *dir;
	const struct aub_workload *wl;
	uint64_t size;
	unsigned count, next, per_file;
	uint64_t seed;
	pthread_mutex_t lock;
	int err;
};

static void *aub_gen_worker(void *arg)
{
	struct aub_gen *g = arg;

	for (;;) {
		unsigned i;
		char path[4096];
		int err;

		pthread_mutex_lock(&g->lock);
		i = g->err ? g->count : g->next++;
		pthread_mutex_unlock(&g->lock);
		if (i >= g->count)
			break;
		snprintf(path, sizeof(path), "%s/%s_%06u.%s", g->dir,
			 g->per_file == 1 ? "sample" : "record", i, g->wl->ext);
		err = aub_gen_file(path, g->size, g->seed * 0x100000001b3ULL + i + 1);
		if (err) {
			pthread_mutex_lock(&g->lock);
			if (!g->err) {
				g->err = err;
				fprintf(stderr, "aubench: %s: %s\n", path, strerror(-err));
			}
			pthread_mutex_unlock(&g->lock);
		}
	}
	return NULL;
}

static int aub_gen_run(const struct aub_opts *o, unsigned count, double zscale)
{
	struct aub_gen g = { .dir = o->dir, .wl = o->wl, .count = count,
			     .per_file = o->per_file, .seed = o->seed };
	uint64_t sample = (uint64_t)((double)o->wl->sample / zscale);
	pthread_t t[2];

	if (sample == 0)
		return -EINVAL;
	g.size = sample * o->per_file;
	pthread_mutex_init(&g.lock, NULL);
	if (mkdir(o->dir, 0755) && errno != EEXIST)
		return -errno;
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, aub_gen_worker, &g);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&g.lock);
	if (!g.err)
		printf("{\"gen\": \"%s\", \"files\": %u, \"file_bytes\": %" PRIu64
		       ", \"sample_bytes\": %" PRIu64 ", \"samples\": %" PRIu64
		       ", \"bytes\": %" PRIu64 "}\n", o->wl->name, count, g.size, sample,
		       (uint64_t)count * o->per_file, (uint64_t)count * g.size);
	return g.err;
}

/* ------------------------------------------------------------------------ */

static void aub_usage(FILE *f)
{
	fprintf(f,
		"usage: aubench gen -w WORKLOAD [-N COUNT] [-z SCALE] [-k PER_FILE] [-s SEED] DIR\n"
		"       aubench run -w WORKLOAD -n N [options] DIR\n"
		"       aubench search -w WORKLOAD [-n START] [-m MAX] [-H] [options] DIR\n"
		"options: -t READERS -b BATCH -c COMPUTE_S -S SCALE -p PREFETCH -e EPOCHS\n"
		"         -P PASS -k SAMPLES_PER_FILE -s SEED -z SIZE_SCALE -M MIN_STEPS\n"
		"         -R RUN_STEPS (a long run: more epochs than -e until every accelerator\n"
		"            has run RUN_STEPS steps; MLPerf Storage asks for 500)\n"
		"         -A au|au_steady (the AU held against PASS: the whole run's, the default,\n"
		"            or the one without each epoch's first-batch wait)\n"
		"         -G IDLE_GAP_S (a reader idle longer is not active; default 2)\n"
		"         -D (drop caches per epoch) -L LISTDIR (list LISTDIR/WORKLOAD, read DIR/WORKLOAD)\n"
		"         -g DEV (read samples with libstagefs into GPU DEV's memory, and compute\n"
		"            each step on it; -1: into host memory, steps sleep)\n"
		"WORKLOAD: unet3d resnet50 cosmoflow; files are read from DIR/WORKLOAD/\n");
}

static bool aub_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = (unsigned)v;
	return true;
}

static bool aub_double(const char *s, double lo, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo) || !isfinite(v))
		return false;
	*out = v;
	return true;
}

int main(int argc, char **argv)
{
	struct aub_opts o = { .prefetch = 2, .epochs = 3, .scale = 1, .seed = 1,
			      .max = 64, .min_steps = 10, .idle_gap = 2 };
	unsigned threads = 0, batch = 0, per_file = 0, count = 0, tmp;
	double compute = -1, pass = -1, zscale = 1;
	const char *mode, *wl = NULL, *listdir = NULL;
	struct aub_set set;
	struct aub_result res;
	char *dir;
	int opt, rc;
	unsigned cap;
	bool n_set = false;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		aub_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	mode = argv[1];
	if (strcmp(mode, "gen") && strcmp(mode, "run") && strcmp(mode, "search")) {
		aub_usage(stderr);
		return 2;
	}
	optind = 2;
	while ((opt = getopt(argc, argv, "w:n:m:t:b:c:S:p:e:P:k:s:z:N:M:R:A:L:G:g:DH")) != -1) {
		bool ok = true;

		switch (opt) {
		case 'w': wl = optarg; break;
		case 'n': ok = aub_uint(optarg, 1, AUB_MAX_N, &o.start); n_set = true; break;
		case 'm': ok = aub_uint(optarg, 1, AUB_MAX_N, &o.max); break;
		case 't': ok = aub_uint(optarg, 1, AUB_MAX_T, &threads); break;
		case 'b': ok = aub_uint(optarg, 1, 1u << 20, &batch); break;
		case 'c': ok = aub_double(optarg, 0, &compute); break;
		case 'S': ok = aub_double(optarg, 1e-6, &o.scale); break;
		case 'p': ok = aub_uint(optarg, 1, 1024, &o.prefetch); break;
		case 'e': ok = aub_uint(optarg, 1, 64, &o.epochs); break;
		case 'P': ok = aub_double(optarg, 0, &pass) && pass <= 1; break;
		case 'k': ok = aub_uint(optarg, 1, 1u << 24, &per_file); break;
		case 's': ok = aub_uint(optarg, 0, UINT32_MAX, &tmp); o.seed = tmp; break;
		case 'z': ok = aub_double(optarg, 1, &zscale); break;
		case 'N': ok = aub_uint(optarg, 1, 1u << 24, &count); break;
		case 'M': ok = aub_uint(optarg, 1, 1u << 24, &o.min_steps); break;
		case 'R': ok = aub_uint(optarg, 1, 1u << 24, &o.run_steps); break;
		case 'A':
			ok = !strcmp(optarg, "au") || !strcmp(optarg, "au_steady");
			o.by_steady = ok && !strcmp(optarg, "au_steady");
			break;
		case 'G': ok = aub_double(optarg, 0, &o.idle_gap); break;
		case 'g': {
			char *end;
			long v = strtol(optarg, &end, 10);

			ok = *optarg && !*end && v >= -1 && v < 1024;
			o.lib = true;
			o.dev = (int)v;
			break;
		}
		case 'D': o.drop = true; break;
		case 'L': listdir = optarg; break;
		case 'H': o.handshake = true; break;
		default: ok = false; break;
		}
		if (!ok) {
			if (opt != '?')
				fprintf(stderr, "aubench: bad value for -%c: '%s'\n", opt, optarg);
			aub_usage(stderr);
			return 2;
		}
	}
	for (size_t i = 0; wl && i < sizeof(aub_workloads) / sizeof(aub_workloads[0]); i++)
		if (!strcmp(wl, aub_workloads[i].name))
			o.wl = &aub_workloads[i];
	if (!o.wl || optind != argc - 1) {
		fprintf(stderr, "aubench: %s\n", !o.wl ? "-w WORKLOAD: unet3d, resnet50 or cosmoflow" :
			"one DIR expected");
		aub_usage(stderr);
		return 2;
	}
	o.threads = threads ? threads : o.wl->threads;
	o.batch = batch ? batch : o.wl->batch;
	/* a batch size of one's own keeps the compute time per sample */
	o.compute = compute >= 0 ? compute : o.wl->compute * o.batch / o.wl->batch;
	o.pass = pass >= 0 ? pass : o.wl->pass;
	o.per_file = per_file ? per_file : o.wl->per_file;
	if (asprintf(&dir, "%s/%s", argv[optind], o.wl->name) < 0)
		return 2;
	o.dir = dir;
	if (aub_on_gpu(&o) && strcmp(mode, "gen")) {
		char why[256];

		if (aubgpu_open(o.dev, why, sizeof(why))) {
			fprintf(stderr, "aubench: -g %d: %s\n", o.dev, why);
			rc = 2;
			goto out;
		}
	}

	if (!strcmp(mode, "gen")) {
		if (!count) {
			fprintf(stderr, "aubench gen: -N COUNT is required\n");
			rc = 2;
			goto out;
		}
		rc = aub_gen_run(&o, count, zscale);
		if (rc)
			fprintf(stderr, "aubench gen: %s\n", strerror(-rc));
		rc = rc ? 1 : 0;
		goto out;
	}
	if (!strcmp(mode, "run") && !n_set) {
		fprintf(stderr, "aubench run: -n N is required\n");
		rc = 2;
		goto out;
	}
	/*
	 * The sample size of a packed file is the workload's, divided by the
	 * size scale gen used (-z): a record file holds per_file samples.
	 */
	if (listdir) {
		char *ld;

		if (asprintf(&ld, "%s/%s", listdir, o.wl->name) < 0) {
			rc = 2;
			goto out;
		}
		rc = aub_set_load(&set, ld, dir);
		free(ld);
	} else {
		rc = aub_set_load(&set, dir, NULL);
	}
	if (rc) {
		fprintf(stderr, "aubench: %s: %s\n", dir, rc == -ENOENT ? "no data files" : strerror(-rc));
		rc = 2;
		goto out;
	}
	if (o.per_file > 1) {
		static struct aub_workload w;

		w = *o.wl;
		w.sample = set.v[0].size / o.per_file;
		if (!w.sample) {
			fprintf(stderr, "aubench: %s is smaller than %u samples\n", set.v[0].path, o.per_file);
			rc = 2;
			goto out_set;
		}
		o.wl = &w;
	}
	cap = aub_max_n(&o, &set);
	if (!strcmp(mode, "run")) {
		if (o.start > cap)
			fprintf(stderr, "aubench: warning: with %u accelerators some get fewer than"
				" %u steps an epoch (at most %u get them)\n", o.start, o.min_steps, cap);
		rc = aub_run(&o, &set, o.start, 0, &res);
		if (!rc)
			aub_print("run", &o, &res);
		rc = rc ? 2 : res.errors ? 1 : 0;
	} else if (cap == 0) {
		fprintf(stderr, "aubench: %s: too little data for %u steps of %u samples\n",
			dir, o.min_steps, o.batch);
		rc = 2;
	} else {
		if (o.max > cap)
			o.max = cap;
		if (!o.start || o.start > o.max)
			o.start = o.max;
		rc = aub_search(&o, &set);
	}
out_set:
	aub_set_release(&set);
out:
	free(dir);
	return rc;
}
