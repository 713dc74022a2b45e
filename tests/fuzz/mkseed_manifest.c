/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkseed_manifest: write the manifest seeds of fuzz_manifest.
 *
 * usage: mkseed_manifest DIR
 *
 * Writes DIR/published.manifest, a manifest as `stagefs publish` makes one
 * (chunk ids per file, a symlink, a hard link, nested directories, a
 * non-ASCII name), built with the manifest builder the publish tool and the
 * unit tests use; and DIR/empty.manifest, the root alone.  (The dir://
 * snapshots of a real mount come from tests/fuzz/mkseeds.sh.)  Exits 0 or 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "manifest/manifest.h"
#include "util.h"

#define CHUNK	(64 * 1024)

static struct sfs_attr attr(uint32_t mode, uint64_t size)
{
	struct sfs_attr a = { .mode = mode, .nlink = 1, .uid = 1000, .gid = 1000,
			      .size = size };

	a.mtime.tv_sec = a.ctime.tv_sec = a.atime.tv_sec = 1700000000;
	return a;
}

static int add_file(struct manifest_builder *b, const char *path, uint64_t size,
		    uint32_t seed)
{
	struct sfs_id ids[8];
	uint32_t n = (uint32_t)((size + CHUNK - 1) / CHUNK);
	struct sfs_attr a = attr(S_IFREG | 0644, size);

	for (uint32_t i = 0; i < n && i < 8; i++) {
		uint32_t key[2] = { seed, i };

		sfs_id_of(key, sizeof(key), &ids[i]);
	}
	manifest_content_id(size, ids, n, &a.content);
	return manifest_builder_add(b, path, &a, NULL, ids, n);
}

static int write_one(const char *dir, const char *name, struct manifest_builder *b)
{
	char path[4096];
	void *buf;
	size_t len;
	FILE *f;
	int r = manifest_builder_finish(b, 3, &buf, &len);

	if (r) {
		fprintf(stderr, "mkseed_manifest: %s: %s\n", name, strerror(-r));
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
		perror(path);
		free(buf);
		return -1;
	}
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	struct sfs_attr d = attr(S_IFDIR | 0755, 4096), l = attr(S_IFLNK | 0777, 6);
	struct manifest_builder *b;
	int bad = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: mkseed_manifest DIR\n");
		return 1;
	}
	b = manifest_builder_create(CHUNK);
	if (!b)
		return 1;
	bad |= manifest_builder_add(b, "", &d, NULL, NULL, 0);
	bad |= manifest_builder_add(b, "train", &d, NULL, NULL, 0);
	bad |= manifest_builder_add(b, "train/n01", &d, NULL, NULL, 0);
	bad |= add_file(b, "train/n01/img0.jpg", 3 * CHUNK + 17, 1);
	bad |= add_file(b, "train/n01/img1.jpg", CHUNK, 2);
	bad |= add_file(b, "train/n01/caf\xc3\xa9 1.bin", 10, 3);
	bad |= add_file(b, "zero", 0, 4);
	bad |= manifest_builder_add(b, "latest", &l, "train", NULL, 0);
	bad |= manifest_builder_link(b, "train/img0-again.jpg", "train/n01/img0.jpg");
	bad |= manifest_builder_add(b, "empty", &d, NULL, NULL, 0);
	if (bad || write_one(argv[1], "published.manifest", b))
		return 1;
	manifest_builder_destroy(b);
	b = manifest_builder_create(CHUNK);
	if (!b || write_one(argv[1], "empty.manifest", b))
		return 1;
	manifest_builder_destroy(b);
	return 0;
}
