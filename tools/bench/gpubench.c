/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpubench: the GPU feed rate of libstagefs against its ceilings, measured
 * in one process on one file, as tools/bench.sh's `gpu` runs it.
 *
 *   gpubench [-d DEV] [-b BYTES] [-r ROUNDS] [-D] FILE
 *   gpubench -p [-d DEV]      exit 0 if GPU DEV is usable, else 77
 *
 * FILE is a file in a stagefs mount.  Each round times four phases over
 * the whole file, into GPU DEV (default 0):
 *
 *   disk   O_DIRECT io_uring reads of FILE's cache file (the descriptor the
 *          daemon hands over, CACHE_FD), as many in flight and as large as
 *          the library's pinned buffers (STAGEFS_PINNED_BUFS x
 *          STAGEFS_PINNED_BUF_SIZE), into memory and no further;
 *   h2d    cudaMemcpyAsync of that many bytes from page-locked host memory
 *          to the GPU, one buffer at a time on one stream;
 *   feed   sfs_read_device() of the file in BYTES requests (default 64M):
 *          what a data loader gets;
 *   naive  read(2) through the mount into pageable malloc'ed memory, then
 *          cudaMemcpy, BYTES at a time.
 *
 * and the ratios feed / min(disk, h2d) (target >= 0.9) and feed / naive
 * (target >= 2).  Before the rounds, the handle's first device read (4 KiB:
 * the pipeline's set-up, and cuFile's once per process) is timed alone
 * (first_read_ms).  With -D the page cache is dropped before the disk, feed
 * and naive phases (root only).  The file is opened once before the rounds
 * (that stages it whole and verifies it), so every phase reads a warm
 * node cache.
 *
 * Prints one JSON object on stdout with the median of each rate (bytes/s)
 * and of each per-round ratio, the library's source (via) and whether
 * cuFile carried the feed.  Exit: 0, 1 on an error, 2 usage, 77 when there
 * is no GPU (it prints "skipped: no GPU").
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <liburing.h>

#include "ctlproto.h"
#include "util.h"
#include "gpudirect/libstagefs.h"

#define MAX_ROUNDS	32

struct opts {
	int dev;
	size_t req;		/* feed and naive request size */
	int rounds;
	bool drop;
	const char *path;
	size_t nbuf, bufsize;	/* the library's pipeline, for the disk phase */
};

static double secs(void)
{
	return (double)now_ns() / 1e9;
}

static __attribute__((noreturn)) void die(const char *what, int err)
{
	fprintf(stderr, "gpubench: %s: %s\n", what, strerror(err));
	exit(1);
}

static void cuda_check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "gpubench: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

static void drop_caches(const struct opts *o)
{
	int fd;

	if (!o->drop)
		return;
	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "3", 1) != 1)
		die("drop_caches (-D needs root)", errno);
	close(fd);
}

static size_t env_size(const char *name, size_t def)
{
	const char *s = getenv(name);
	uint64_t v;

	return s && *s && !parse_size(s, &v) && v ? (size_t)v : def;
}

/* FILE's cache file from its daemon, as the library gets it.  Returns the fd. */
static int cache_fd(const char *path, int64_t *size)
{
	char root[PATH_MAX], rel[PATH_MAX], sock[108], line[PATH_MAX * 3 + 32], err[256];
	struct ctl_conn *c = malloc(sizeof(*c));
	struct ctl_msg m;
	uint64_t v;
	char *reply;
	int s, fd, r;

	if (!c)
		die("malloc", ENOMEM);
	r = ctl_find_mount(path, root, sizeof(root), rel, sizeof(rel));
	if (!r)
		r = ctl_socket_of(root, sock, sizeof(sock));
	if (r)
		die("no stagefs control socket for the file", -r);
	s = ctl_connect(sock);
	if (s < 0)
		die(sock, -s);
	ctl_conn_init(c, s);
	r = ctl_hello(c, err, sizeof(err));
	if (r) {
		fprintf(stderr, "gpubench: %s\n", err);
		exit(1);
	}
	strcpy(line, "CACHE_FD path=");
	ctl_escape(rel, line + strlen(line), sizeof(line) - strlen(line));
	r = ctl_sendf(s, "%s\n", line);
	if (!r)
		r = ctl_read_line_fd(c, &reply, -1, &fd);
	if (r < 0)
		die("CACHE_FD", -r);
	if (ctl_parse(reply, &m))
		die("CACHE_FD: unreadable reply", EPROTO);
	if (strcmp(m.argv[0], "OK") || fd < 0) {
		fprintf(stderr, "gpubench: the daemon did not hand over %s: %s\n", rel,
			ctl_get(&m, "msg") ? ctl_get(&m, "msg") : "no descriptor");
		exit(1);
	}
	if (ctl_get_u64(&m, "size", &v))
		die("CACHE_FD reply without size", EPROTO);
	*size = (int64_t)v;
	/* the socket stays open (leaked on purpose): it holds the file's pin */
	return fd;
}

/* O_DIRECT reads of @fd, @o->nbuf in flight of @o->bufsize.  Returns bytes/s. */
static double phase_disk(const struct opts *o, int fd, int64_t size)
{
	struct io_uring ring;
	struct iovec *iov = calloc(o->nbuf, sizeof(*iov));
	int64_t next = 0, done = 0;
	unsigned inflight = 0;
	double t0;
	int r;

	if (!iov)
		die("calloc", ENOMEM);
	r = io_uring_queue_init((unsigned)o->nbuf * 2, &ring, 0);
	if (r)
		die("io_uring_queue_init", -r);
	for (size_t i = 0; i < o->nbuf; i++) {
		if (posix_memalign(&iov[i].iov_base, 4096, o->bufsize))
			die("posix_memalign", ENOMEM);
		iov[i].iov_len = o->bufsize;
	}
	r = io_uring_register_buffers(&ring, iov, (unsigned)o->nbuf);
	t0 = secs();
	for (size_t i = 0; i < o->nbuf && next < size; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		if (r == 0)
			io_uring_prep_read_fixed(sqe, fd, iov[i].iov_base, (unsigned)o->bufsize,
						 next, (int)i);
		else
			io_uring_prep_read(sqe, fd, iov[i].iov_base, (unsigned)o->bufsize, next);
		io_uring_sqe_set_data64(sqe, i);
		next += (int64_t)o->bufsize;
		inflight++;
	}
	io_uring_submit(&ring);
	while (inflight) {
		struct io_uring_cqe *cqe;
		size_t i;
		int res;

		if (io_uring_wait_cqe(&ring, &cqe))
			continue;
		i = (size_t)io_uring_cqe_get_data64(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		inflight--;
		if (res < 0)
			die("O_DIRECT read of the cache file", -res);
		done += res;
		if (next < size) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			if (r == 0)
				io_uring_prep_read_fixed(sqe, fd, iov[i].iov_base,
							 (unsigned)o->bufsize, next, (int)i);
			else
				io_uring_prep_read(sqe, fd, iov[i].iov_base,
						   (unsigned)o->bufsize, next);
			io_uring_sqe_set_data64(sqe, i);
			next += (int64_t)o->bufsize;
			inflight++;
			io_uring_submit(&ring);
		}
	}
	t0 = secs() - t0;
	if (done != size)
		die("short read of the cache file", EIO);
	if (r == 0)
		io_uring_unregister_buffers(&ring);
	io_uring_queue_exit(&ring);
	for (size_t i = 0; i < o->nbuf; i++)
		free(iov[i].iov_base);
	free(iov);
	return (double)size / t0;
}

/* Pinned host to device, one buffer at a time.  Returns bytes/s. */
static double phase_h2d(const struct opts *o, void *dbuf, int64_t size)
{
	cudaStream_t st;
	void *h;
	double t0;

	cuda_check(cudaHostAlloc(&h, o->bufsize, cudaHostAllocPortable), "cudaHostAlloc");
	memset(h, 1, o->bufsize);
	cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
	t0 = secs();
	for (int64_t off = 0; off < size; off += (int64_t)o->bufsize) {
		size_t n = (size_t)MIN((int64_t)o->bufsize, size - off);

		cuda_check(cudaMemcpyAsync(dbuf, h, n, cudaMemcpyHostToDevice, st),
			   "cudaMemcpyAsync");
	}
	cuda_check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
	t0 = secs() - t0;
	cudaStreamDestroy(st);
	cudaFreeHost(h);
	return (double)size / t0;
}

/* The library into the GPU.  Returns bytes/s. */
static double phase_feed(const struct opts *o, struct sfs_file *f, void *dbuf, int64_t size)
{
	double t0 = secs();

	for (int64_t off = 0; off < size; ) {
		ssize_t n = sfs_read_device(f, off, o->req, dbuf, o->dev);

		if (n <= 0)
			die("sfs_read_device", n ? (int)-n : EIO);
		off += n;
	}
	return (double)size / (secs() - t0);
}

/* read(2) into pageable memory, then cudaMemcpy.  Returns bytes/s. */
static double phase_naive(const struct opts *o, void *dbuf, int64_t size)
{
	char *buf = malloc(o->req);
	int64_t done = 0;
	double t0;
	int fd;

	if (!buf)
		die("malloc", ENOMEM);
	fd = open(o->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(o->path, errno);
	t0 = secs();
	for (;;) {
		ssize_t n = read(fd, buf, o->req);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("read", errno);
		if (n == 0)
			break;
		cuda_check(cudaMemcpy(dbuf, buf, (size_t)n, cudaMemcpyHostToDevice), "cudaMemcpy");
		done += n;
	}
	t0 = secs() - t0;
	close(fd);
	free(buf);
	if (done != size)
		die("short read through the mount", EIO);
	return (double)size / t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	struct opts o = { .dev = 0, .req = 64 * MiB, .rounds = 3 };
	double disk[MAX_ROUNDS], h2d[MAX_ROUNDS], feed[MAX_ROUNDS], naive[MAX_ROUNDS];
	double r_min[MAX_ROUNDS], r_naive[MAX_ROUNDS];
	struct sfs_client_stats cs;
	struct sfs_file *f;
	int64_t size, csize;
	uint64_t v;
	void *dbuf;
	double first_ms;
	int c, n = 0, cfd;

	bool probe = false;

	while ((c = getopt(argc, argv, "d:b:r:Dp")) != -1) {
		switch (c) {
		case 'd': o.dev = atoi(optarg); break;
		case 'b':
			if (parse_size(optarg, &v) || !v)
				goto usage;
			o.req = (size_t)v;
			break;
		case 'r': o.rounds = atoi(optarg); break;
		case 'D': o.drop = true; break;
		case 'p': probe = true; break;
		default: goto usage;
		}
	}
	if (probe && optind == argc && o.dev >= 0) {
		if (cudaGetDeviceCount(&n) != cudaSuccess || n <= o.dev) {
			printf("skipped: no GPU\n");
			return 77;
		}
		return 0;
	}
	if (optind != argc - 1 || o.rounds < 1 || o.rounds > MAX_ROUNDS || o.dev < 0)
		goto usage;
	o.path = argv[optind];
	o.nbuf = env_size("STAGEFS_PINNED_BUFS", 4);
	o.bufsize = DIV_ROUND_UP(env_size("STAGEFS_PINNED_BUF_SIZE", MiB), 4096) * 4096;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= o.dev) {
		printf("skipped: no GPU\n");
		return 77;
	}
	cuda_check(cudaSetDevice(o.dev), "cudaSetDevice");
	cuda_check(cudaMalloc(&dbuf, MAX(o.req, o.bufsize)), "cudaMalloc");

	/* opening stages and verifies the file: not timed */
	c = sfs_client_open(o.path, &f);
	if (c)
		die(o.path, -c);
	size = sfs_client_size(f);
	if (sfs_client_via(f) != SFS_VIA_CACHE_FD)
		fprintf(stderr, "gpubench: warning: the library reads %s through the mount "
			"(no cache file from the daemon)\n", o.path);
	cfd = cache_fd(o.path, &csize);
	if (csize != size)
		die("the cache file's size differs", ESTALE);
	{
		int fl = fcntl(cfd, F_GETFL);

		if (fl < 0 || fcntl(cfd, F_SETFL, fl | O_DIRECT) < 0)
			die("O_DIRECT on the cache file", errno);
	}

	/*
	 * The handle's first device read sets up its pipeline (ring, pinned
	 * pool, stream) and, once per process, cuFile: timed on its own, so
	 * that the rounds measure the steady state and the set-up is seen.
	 */
	{
		double t0 = secs();
		ssize_t n0 = sfs_read_device(f, 0, (size_t)MIN(size, 4096), dbuf, o.dev);

		if (size > 0 && n0 <= 0)
			die("sfs_read_device", n0 ? (int)-n0 : EIO);
		first_ms = (secs() - t0) * 1e3;
	}
	for (int r = 0; r < o.rounds; r++) {
		drop_caches(&o);
		disk[r] = phase_disk(&o, cfd, size);
		h2d[r] = phase_h2d(&o, dbuf, size);
		drop_caches(&o);
		feed[r] = phase_feed(&o, f, dbuf, size);
		drop_caches(&o);
		naive[r] = phase_naive(&o, dbuf, size);
		r_min[r] = feed[r] / MIN(disk[r], h2d[r]);
		r_naive[r] = feed[r] / naive[r];
		fprintf(stderr, "gpubench: round %d: disk %.0f MB/s, h2d %.0f MB/s, feed %.0f MB/s, "
			"naive %.0f MB/s\n", r + 1, disk[r] / 1e6, h2d[r] / 1e6, feed[r] / 1e6,
			naive[r] / 1e6);
	}
	sfs_client_stats(&cs);
	printf("{\"bytes\": %" PRId64 ", \"rounds\": %d, \"device\": %d, \"request\": %zu, "
	       "\"pinned_bufs\": %zu, \"pinned_buf_size\": %zu, \"via\": \"%s\", "
	       "\"cufile_bytes\": %" PRIu64 ", \"disk_bytes_per_s\": %.0f, "
	       "\"h2d_bytes_per_s\": %.0f, \"feed_bytes_per_s\": %.0f, "
	       "\"naive_bytes_per_s\": %.0f, \"feed_vs_min_disk_h2d\": %.3f, "
	       "\"feed_vs_naive\": %.3f, \"first_read_ms\": %.1f, \"cufile_loaded\": %u}\n",
	       size, o.rounds, o.dev, o.req, o.nbuf, o.bufsize,
	       sfs_client_via(f) == SFS_VIA_CACHE_FD ? "cache_fd" : "mount", cs.cufile_bytes,
	       median(disk, o.rounds), median(h2d, o.rounds), median(feed, o.rounds),
	       median(naive, o.rounds), median(r_min, o.rounds), median(r_naive, o.rounds),
	       first_ms, cs.cufile_loaded);
	sfs_client_close(f);
	close(cfd);
	cudaFree(dbuf);
	return 0;

usage:
	fprintf(stderr, "usage: gpubench [-d DEV] [-b BYTES] [-r ROUNDS] [-D] FILE | -p [-d DEV]\n");
	return 2;
}
