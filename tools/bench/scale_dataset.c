/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scale_dataset: a published dataset of N files without publishing N files,
 * for rados:// at scale (rados-scalecheck.sh; the tests manifest_lazy and
 * peers_large).  `scale_dataset N MANIFEST BLOBDIR` writes
 * K = 16 small blobs, BLOBDIR/b00 .. BLOBDIR/b15 (1000 + 37 k bytes each),
 * and the manifest (format 2, version 1) of a tree of N files,
 * dNNNNN/img_NNNNNNNN.jpg, 1000 to a directory, file i holding the bytes
 * of blob i % K (so its chunk id is that blob's).  Publishing BLOBDIR as
 * another dataset of the same pool with the default chunk size stores the
 * only chunks the tree needs; the caller then stores MANIFEST itself as
 * sfs.manifest.NAME.1 (split as publish splits it) and checks any file i
 * against BLOBDIR/b(i % K).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "manifest/manifest.h"
#include "util.h"

#define K	16

int main(int argc, char **argv)
{
	struct sfs_attr d = { .mode = S_IFDIR | 0755, .uid = 0, .gid = 0 };
	struct sfs_attr f = { .mode = S_IFREG | 0644, .uid = 0, .gid = 0, .nlink = 1 };
	static char blob[K][1000 + 37 * K];
	size_t blen[K];
	struct sfs_id id[K];
	struct manifest_builder *b;
	char path[PATH_MAX];
	uint64_t n, len;
	int fd;

	if (argc != 4 || parse_uint(argv[1], &n) || n == 0) {
		fprintf(stderr, "usage: scale_dataset N MANIFEST BLOBDIR\n");
		return 2;
	}
	for (int k = 0; k < K; k++) {
		blen[k] = 1000 + 37 * (size_t)k;
		for (size_t j = 0; j < blen[k]; j++)
			blob[k][j] = (char)('a' + (j * 7 + (size_t)k * 13) % 26);
		snprintf(path, sizeof(path), "%s/b%02d", argv[3], k);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, blob[k], blen[k]) != (ssize_t)blen[k] || close(fd)) {
			fprintf(stderr, "scale_dataset: cannot write %s\n", path);
			return 1;
		}
		sfs_id_of(blob[k], blen[k], &id[k]);
	}
	b = manifest_builder_create(4 * 1024 * 1024);
	for (uint64_t i = 0; i < n; i++) {
		if (i % 1000 == 0) {
			snprintf(path, sizeof(path), "d%05" PRIu64, i / 1000);
			if (manifest_builder_add(b, path, &d, NULL, NULL, 0))
				return 1;
		}
		snprintf(path, sizeof(path), "d%05" PRIu64 "/img_%08" PRIu64 ".jpg",
			 i / 1000, i);
		f.size = blen[i % K];
		f.mtime.tv_sec = 1700000000 + (time_t)i;
		if (manifest_builder_add(b, path, &f, NULL, &id[i % K], 1))
			return 1;
	}
	fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || manifest_builder_write(b, 1, fd, &len) || close(fd)) {
		fprintf(stderr, "scale_dataset: cannot write %s\n", argv[2]);
		return 1;
	}
	manifest_builder_destroy(b);
	printf("%" PRIu64 "\n", len);
	return 0;
}
