/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuread: read a file through libstagefs (loaded with dlopen, exactly as
 * gpudirect/stagefs.py loads it) and write its bytes out, so a test can
 * compare sha256 with the source.
 *
 *   gpuread [-l LIB] [-m host|pinned|device] [-d DEV] [-b BYTES] [-o OUT]
 *           [-r N] [-s] FILE
 *
 *   -m host     sfs_read_host (buffered)
 *   -m pinned   sfs_read_device(.., -1): the O_DIRECT io_uring pinned pipeline
 *               into host memory (the default)
 *   -m device   sfs_read_device(.., DEV) into cudaMalloc memory, copied back;
 *               exits 77 when there is no CUDA or no GPU
 *   -b BYTES    request size (default 1000003: odd, so requests are unaligned)
 *   -r N        instead of copying out, N random (offset, length) requests
 *               checked against pread(2) of FILE; exit 1 on a mismatch
 *   -s          print sfs_client_stats to stderr at the end, and via=cache_fd
 *               or via=mount: where the handle's device reads went
 *   LIB defaults to $STAGEFS_LIB, else gpudirect/libstagefs.so next to the
 *   repository this program was built in.
 *
 * Exit: 0 ok, 1 failure, 2 usage, 77 skipped (device mode without a GPU).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CONFIG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "util.h"
#include "gpudirect/libstagefs.h"

static struct {
	__typeof__(sfs_client_open) *open;
	__typeof__(sfs_client_close) *close;
	__typeof__(sfs_client_size) *size;
	__typeof__(sfs_read_host) *read_host;
	__typeof__(sfs_read_device) *read_device;
	__typeof__(sfs_client_stats) *stats;
	__typeof__(sfs_client_via) *via;
} L;

enum mode { M_HOST, M_PINNED, M_DEVICE };

static void load(const char *lib)
{
	char path[PATH_MAX];
	void *h;

	if (!lib)
		lib = getenv("STAGEFS_LIB");
	if (!lib) {
		/* /proc/self/exe is REPO/tests/helpers/gpuread */
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 64);
		char *p;

		if (n < 0) {
			perror("gpuread: readlink /proc/self/exe");
			exit(1);
		}
		path[n] = 0;
		for (int i = 0; i < 3 && (p = strrchr(path, '/')); i++)
			*p = 0;
		strcat(path, "/gpudirect/libstagefs.so");
		lib = path;
	}
	h = dlopen(lib, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "gpuread: %s\n", dlerror());
		exit(1);
	}
#define SYM(f, name)							\
	do {								\
		*(void **)&L.f = dlsym(h, name);			\
		if (!L.f) {						\
			fprintf(stderr, "gpuread: %s: no %s\n", lib, name); \
			exit(1);					\
		}							\
	} while (0)
	SYM(open, "sfs_client_open");
	SYM(close, "sfs_client_close");
	SYM(size, "sfs_client_size");
	SYM(read_host, "sfs_read_host");
	SYM(read_device, "sfs_read_device");
	SYM(stats, "sfs_client_stats");
	SYM(via, "sfs_client_via");
#undef SYM
}

/* Read [off, off+len) with @mode into host memory @dst via @dev (device mode). */
static ssize_t do_read(struct sfs_file *f, enum mode mode, int dev, void *devbuf,
		       int64_t off, size_t len, void *dst)
{
	ssize_t n;

	switch (mode) {
	case M_HOST:
		return L.read_host(f, off, len, dst);
	case M_PINNED:
		return L.read_device(f, off, len, dst, SFS_HOST_DEVICE);
	case M_DEVICE:
		n = L.read_device(f, off, len, devbuf, dev);
#ifdef CONFIG_HAVE_CUDA
		if (n > 0 && cudaMemcpy(dst, devbuf, (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess)
			return -EIO;
#endif
		return n;
	}
	return -EINVAL;
}

static void print_stats(const char *via)
{
	struct sfs_client_stats st;

	L.stats(&st);
	fprintf(stderr, "stats: host_read_bytes=%" PRIu64 " pinned_host_bytes=%" PRIu64
		" device0_bytes=%" PRIu64 " cufile_bytes=%" PRIu64 " direct_reads=%" PRIu64
		" buffered_reads=%" PRIu64 " odirect_fallbacks=%" PRIu64
		" pinned_bytes=%" PRIu64 " pinned_locked=%u cuda_available=%u cufile_loaded=%u"
		" fd_opens=%" PRIu64 " fd_fallbacks=%" PRIu64 " fd_last_error=%s fd_lost=%" PRIu64
		" fd_bytes=%" PRIu64 " reports=%" PRIu64 " report_errors=%" PRIu64 " via=%s\n",
		st.host_read_bytes, st.pinned_host_bytes, st.device_bytes[0], st.cufile_bytes,
		st.direct_reads, st.buffered_reads, st.odirect_fallbacks, st.pinned_bytes,
		st.pinned_locked, st.cuda_available, st.cufile_loaded, st.fd_opens,
		st.fd_fallbacks, st.fd_last_error ? strerrorname_np(st.fd_last_error) : "0",
		st.fd_lost, st.fd_bytes, st.reports, st.report_errors, via);
}

int main(int argc, char **argv)
{
	const char *lib = NULL, *outpath = NULL;
	enum mode mode = M_PINNED;
	size_t bs = 1000003;
	long nrand = 0;
	int dev = 0, c, rc = 0, outfd = 1;
	bool want_stats = false;
	struct sfs_file *f;
	void *devbuf = NULL;
	char *buf, *ref;
	int64_t size;

	while ((c = getopt(argc, argv, "l:m:d:b:o:r:s")) != -1) {
		switch (c) {
		case 'l': lib = optarg; break;
		case 'm':
			if (!strcmp(optarg, "host"))
				mode = M_HOST;
			else if (!strcmp(optarg, "pinned"))
				mode = M_PINNED;
			else if (!strcmp(optarg, "device"))
				mode = M_DEVICE;
			else
				goto usage;
			break;
		case 'd': dev = atoi(optarg); break;
		case 'b': bs = strtoull(optarg, NULL, 0); break;
		case 'o': outpath = optarg; break;
		case 'r': nrand = atol(optarg); break;
		case 's': want_stats = true; break;
		default: goto usage;
		}
	}
	if (optind != argc - 1 || bs == 0)
		goto usage;
	load(lib);

	if (mode == M_DEVICE) {
#ifdef CONFIG_HAVE_CUDA
		int n = 0;

		if (cudaGetDeviceCount(&n) != cudaSuccess || n <= dev) {
			printf("SKIP: no GPU %d (device mode)\n", dev);
			return 77;
		}
		if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&devbuf, bs) != cudaSuccess) {
			fprintf(stderr, "gpuread: cudaMalloc(%zu) on GPU %d failed\n", bs, dev);
			return 1;
		}
#else
		printf("SKIP: built without CUDA (device mode)\n");
		return 77;
#endif
	}

	c = L.open(argv[optind], &f);
	if (c < 0) {
		fprintf(stderr, "gpuread: %s: %s\n", argv[optind], strerror(-c));
		return 1;
	}
	size = L.size(f);
	buf = malloc(bs);
	ref = malloc(bs);
	if (!buf || !ref) {
		fprintf(stderr, "gpuread: out of memory\n");
		return 1;
	}

	if (nrand > 0) {
		int fd = open(argv[optind], O_RDONLY);
		unsigned seed = 12345;

		if (fd < 0) {
			perror("gpuread: open");
			return 1;
		}
		for (long i = 0; i < nrand && rc == 0; i++) {
			int64_t off = size ? (int64_t)((uint64_t)rand_r(&seed) * 7919 % (uint64_t)(size + 100)) : 0;
			size_t len = (size_t)rand_r(&seed) % bs + 1;
			ssize_t want = pread_full(fd, ref, len, off);
			ssize_t got = do_read(f, mode, dev, devbuf, off, len, buf);

			if (want < 0)
				want = 0;	/* pread past EOF: EINVAL never, 0 */
			if (got != want || memcmp(buf, ref, (size_t)want)) {
				fprintf(stderr, "gpuread: %s: request %ld off=%" PRId64
					" len=%zu: got %zd, want %zd%s\n", argv[optind], i, off,
					len, got, want, got == want ? " (bytes differ)" : "");
				rc = 1;
			}
		}
		close(fd);
	} else {
		if (outpath) {
			outfd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (outfd < 0) {
				perror("gpuread: open output");
				return 1;
			}
		}
		for (int64_t off = 0; off < size; ) {
			ssize_t n = do_read(f, mode, dev, devbuf, off, bs, buf);

			if (n <= 0) {
				fprintf(stderr, "gpuread: %s: read at %" PRId64 ": %s\n", argv[optind],
					off, n ? strerror((int)-n) : "unexpected end of file");
				rc = 1;
				break;
			}
			/* pwrite for a file, write for stdout (maybe a pipe) */
			if ((outpath ? pwrite_full(outfd, buf, (size_t)n, off)
				     : write(outfd, buf, (size_t)n)) != n) {
				perror("gpuread: write");
				rc = 1;
				break;
			}
			off += n;
		}
		/* a read at or past the end returns 0 */
		if (rc == 0 && do_read(f, mode, dev, devbuf, size, bs, buf) != 0) {
			fprintf(stderr, "gpuread: read at end of file did not return 0\n");
			rc = 1;
		}
		if (outpath)
			close(outfd);
	}
	if (want_stats)
		print_stats(L.via(f) == SFS_VIA_CACHE_FD ? "cache_fd" : "mount");
	L.close(f);
	free(buf);
	free(ref);
#ifdef CONFIG_HAVE_CUDA
	if (devbuf)
		cudaFree(devbuf);
#endif
	return rc;

usage:
	fprintf(stderr, "usage: gpuread [-l LIB] [-m host|pinned|device] [-d DEV] [-b BYTES] "
		"[-o OUT] [-r N] [-s] FILE\n");
	return 2;
}
