/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest_scale: the paged manifest at scale, without a cluster or a mount:
 * `manifest_scale N FILE` builds a synthetic tree of N files (directories of
 * 1000, one chunk id each, as `stagefs publish` adds them) with the builder,
 * streams it into FILE (manifest_builder_write), then maps it
 * (manifest_open_file) and times the open, 1000 random lookups and a walk
 * of every directory (readdir + getattr of each entry).  Prints one JSON
 * line: the builder's peak RSS per entry (getrusage, over the process's
 * RSS before building), the open time, and RssAnon / RssFile (KiB) after
 * the open and after the walk.  RssFile is the mapped manifest: page cache,
 * shared with every mount of the file and reclaimable.  For
 * docs/benchmarks.md; FILE is left for the caller to remove.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "manifest/manifest.h"
#include "util.h"

static long maxrss_kib(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return r.ru_maxrss;
}

/* RssAnon and RssFile of this process, KiB. */
static void rss(long *anon, long *file)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	*anon = *file = 0;
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "RssAnon: %ld", anon);
		sscanf(line, "RssFile: %ld", file);
	}
	if (f)
		fclose(f);
}

int main(int argc, char **argv)
{
	struct sfs_attr d = { .mode = S_IFDIR | 0755, .uid = 1000, .gid = 1000 };
	struct sfs_attr f = { .mode = S_IFREG | 0644, .uid = 1000, .gid = 1000,
			      .nlink = 1, .size = 29000 };
	struct manifest_builder *b;
	struct manifest *m;
	uint64_t n, ndirs, len, t0, t_build, t_open, t_look, t_walk, walked = 0;
	long rss0, peak, a0, f0, a1, f1;
	char path[64], err[256];
	struct sfs_id id;
	unsigned seed = 1;
	int fd, rc;

	if (argc != 3 || parse_uint(argv[1], &n) || n == 0) {
		fprintf(stderr, "usage: manifest_scale N FILE\n");
		return 2;
	}
	mallopt(M_MMAP_THRESHOLD, 256 * 1024);	/* as stagefs publish does */
	ndirs = DIV_ROUND_UP(n, 1000);
	rss0 = maxrss_kib();
	t0 = now_ns();
	b = manifest_builder_create(4 * 1024 * 1024);
	for (uint64_t i = 0; i < n; i++) {
		if (i % 1000 == 0) {
			snprintf(path, sizeof(path), "d%05" PRIu64, i / 1000);
			if (manifest_builder_add(b, path, &d, NULL, NULL, 0))
				return 1;
		}
		snprintf(path, sizeof(path), "d%05" PRIu64 "/img_%08" PRIu64 ".jpg",
			 i / 1000, i);
		id.hi = i * 0x9e3779b97f4a7c15ULL;
		id.lo = ~i;
		f.mtime.tv_sec = 1700000000 + (time_t)i;
		if (manifest_builder_add(b, path, &f, NULL, &id, 1))
			return 1;
	}
	fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (rc = manifest_builder_write(b, 1, fd, &len))) {
		fprintf(stderr, "manifest_scale: cannot write %s\n", argv[2]);
		return 1;
	}
	manifest_builder_destroy(b);
	close(fd);
	t_build = now_ns() - t0;
	peak = maxrss_kib() - rss0;

	/* what a mount does: map it; the page cache keeps the file we just wrote */
	rss(&a0, &f0);
	t0 = now_ns();
	if (manifest_open_file(argv[2], &m, err, sizeof(err))) {
		fprintf(stderr, "manifest_scale: %s\n", err);
		return 1;
	}
	t_open = now_ns() - t0;

	t0 = now_ns();
	for (int k = 0; k < 1000; k++) {
		uint64_t i = (uint64_t)rand_r(&seed) * 7919 % n;
		struct sfs_attr dir, a;

		snprintf(path, sizeof(path), "d%05" PRIu64, i / 1000);
		if (manifest_lookup(m, SFS_ROOT_INO, path, &dir))
			return 1;
		snprintf(path, sizeof(path), "img_%08" PRIu64 ".jpg", i);
		if (manifest_lookup(m, dir.ino, path, &a) || a.mtime.tv_sec != 1700000000 + (time_t)i)
			return 1;
	}
	t_look = now_ns() - t0;
	rss(&a1, &f1);
	printf("{\"entries\": %" PRIu64 ", \"manifest_bytes\": %" PRIu64
	       ", \"build_s\": %.1f, \"builder_peak_b_per_entry\": %.1f"
	       ", \"open_ms\": %.3f, \"lookup_us\": %.1f"
	       ", \"after_open_anon_kib\": %ld, \"after_open_file_kib\": %ld",
	       n + ndirs + 1, len, t_build / 1e9,
	       (double)peak * 1024 / (double)(n + ndirs + 1), t_open / 1e6,
	       t_look / 1e3 / 1000, a1 - a0, f1);

	t0 = now_ns();
	{
		struct sfs_dirlist root, dl;
		struct sfs_attr a;

		if (manifest_readdir(m, SFS_ROOT_INO, &root))
			return 1;
		for (size_t i = 0; i < root.n; i++) {
			if (manifest_readdir(m, root.ent[i].ino, &dl))
				return 1;
			for (size_t k = 0; k < dl.n; k++) {
				if (manifest_getattr(m, dl.ent[k].ino, &a))
					return 1;
				walked++;
			}
			sfs_dirlist_release(&dl);
		}
		sfs_dirlist_release(&root);
	}
	t_walk = now_ns() - t0;
	rss(&a1, &f1);
	printf(", \"walked\": %" PRIu64 ", \"walk_s\": %.2f"
	       ", \"after_walk_anon_kib\": %ld, \"after_walk_file_kib\": %ld"
	       ", \"verify_bad_parts\": %d}\n",
	       walked, t_walk / 1e9, a1 - a0, f1, manifest_verify(m, NULL) ? 1 : 0);
	manifest_close(m);
	return walked == n ? 0 : 1;
}
