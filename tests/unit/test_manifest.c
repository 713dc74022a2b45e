/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_manifest: manifest build/open round trip, lookups, readdir order,
 * paths, totals, hard links (one inode, several names; what an old reader
 * sees; hostile link fields), truncation and byte-flip fuzzing, a 1 M-entry
 * open; the paged format: a damaged part found only when touched and
 * refused, the rest still served; files mapped with manifest_open_file()
 * (truncated ones refused at open), the streaming writer, and format 1
 * manifests still read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "manifest/manifest.h"
#include "manifest/manifest_i.h"
#include "util.h"

#include "manifest_v1.h"	/* a format 1 manifest, as the old builder wrote it */

#define XXH_INLINE_ALL
#include <xxhash.h>

#define CHUNK	(64u * 1024)
/* "ünïcødé.txt" in UTF-8 */
#define UNAME	"\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb8" "d" "\xc3\xa9" ".txt"

static struct sfs_attr mkattr(uint32_t mode, uint64_t size)
{
	struct sfs_attr a = {
		.mode = mode,
		.uid = 1000,
		.gid = 100,
		.size = size,
		.atime = { 1700000000, 1 },
		.mtime = { 1700000001, 999999999 },
		.ctime = { 1700000002, 0 },
	};

	return a;
}

static void fake_chunks(uint64_t size, uint32_t seed, struct sfs_id *ids,
			uint32_t *n)
{
	*n = (uint32_t)DIV_ROUND_UP(size, CHUNK);
	for (uint32_t i = 0; i < *n; i++) {
		ids[i].hi = 0x1111000000000000ULL + seed;
		ids[i].lo = i + 1;
	}
}

static void add_file(struct manifest_builder *b, const char *path, uint64_t size,
		     uint32_t seed)
{
	struct sfs_id ids[64];
	uint32_t n;
	struct sfs_attr a = mkattr(S_IFREG | 0644, size);

	fake_chunks(size, seed, ids, &n);
	assert_int_equal(manifest_builder_add(b, path, &a, NULL, ids, n), 0);
}

/* The small tree used by most tests, added in a scrambled order. */
static void build_small(void **buf, size_t *len)
{
	struct manifest_builder *b = manifest_builder_create(CHUNK);
	struct sfs_attr d = mkattr(S_IFDIR | 0755, 4096);
	struct sfs_attr l = mkattr(S_IFLNK | 0777, 0);

	assert_non_null(b);
	add_file(b, "a/b/f1", 3 * CHUNK + 1, 1);
	assert_int_equal(manifest_builder_add(b, "a/b", &d, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_add(b, "a", &d, NULL, NULL, 0), 0);
	add_file(b, "a/b/f0", CHUNK, 2);
	add_file(b, "a/b/f2", CHUNK - 1, 3);
	add_file(b, "file with space", 10, 4);
	add_file(b, UNAME, 5, 5);
	add_file(b, "zero", 0, 6);
	assert_int_equal(manifest_builder_add(b, "empty", &d, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_add(b, "link", &l, "a/b/f1", NULL, 0), 0);
	assert_int_equal(manifest_builder_add(b, "Z", &d, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_add(b, "", &d, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_finish(b, 7, buf, len), 0);
	manifest_builder_destroy(b);
}

static struct manifest *open_small(void)
{
	void *buf;
	size_t len;
	struct manifest *m;
	char err[128];

	build_small(&buf, &len);
	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	return m;
}

static uint64_t ino_of(struct manifest *m, const char *path)
{
	struct sfs_attr a;
	char tmp[512], *save, *tok;
	uint64_t ino = SFS_ROOT_INO;

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (tok = strtok_r(tmp, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (manifest_lookup(m, ino, tok, &a))
			return 0;
		ino = a.ino;
	}
	return ino;
}

static void test_round_trip(void **state)
{
	struct manifest *m = open_small();
	struct sfs_attr a;
	struct sfs_id id, want;
	char buf[64];
	uint64_t ino;

	assert_int_equal(manifest_chunk_size(m), CHUNK);
	assert_int_equal(manifest_version(m), 7);
	assert_int_equal(manifest_nentries(m), 12);

	assert_int_equal(manifest_getattr(m, SFS_ROOT_INO, &a), 0);
	assert_true(S_ISDIR(a.mode));
	/* root: a, empty, Z -> 2 + 3 */
	assert_int_equal(a.nlink, 5);

	ino = ino_of(m, "a/b/f1");
	assert_int_not_equal(ino, 0);
	assert_int_equal(manifest_getattr(m, ino, &a), 0);
	assert_int_equal(a.ino, ino);
	assert_int_equal(a.mode, S_IFREG | 0644);
	assert_int_equal(a.size, 3 * CHUNK + 1);
	assert_int_equal(a.uid, 1000);
	assert_int_equal(a.gid, 100);
	assert_int_equal(a.nlink, 1);
	assert_int_equal(a.atime.tv_sec, 1700000000);
	assert_int_equal(a.atime.tv_nsec, 1);
	assert_int_equal(a.mtime.tv_nsec, 999999999);
	assert_int_equal(a.ctime.tv_sec, 1700000002);
	assert_int_equal(manifest_nchunks(m, ino), 4);
	for (uint32_t i = 0; i < 4; i++) {
		assert_int_equal(manifest_chunk(m, ino, i, &id), 0);
		assert_true(id.hi == 0x1111000000000001ULL && id.lo == i + 1);
	}
	assert_int_equal(manifest_chunk(m, ino, 4, &id), -EINVAL);
	{
		struct sfs_id ids[4];
		uint32_t n;

		fake_chunks(3 * CHUNK + 1, 1, ids, &n);
		manifest_content_id(3 * CHUNK + 1, ids, n, &want);
		assert_true(sfs_id_eq(&a.content, &want));
	}

	/* chunk-size +-1 */
	assert_int_equal(manifest_nchunks(m, ino_of(m, "a/b/f0")), 1);
	assert_int_equal(manifest_nchunks(m, ino_of(m, "a/b/f2")), 1);

	ino = ino_of(m, "zero");
	assert_int_equal(manifest_getattr(m, ino, &a), 0);
	assert_int_equal(a.size, 0);
	assert_int_equal(manifest_nchunks(m, ino), 0);
	manifest_content_id(0, NULL, 0, &want);
	assert_true(sfs_id_eq(&a.content, &want));

	ino = ino_of(m, "link");
	assert_int_equal(manifest_getattr(m, ino, &a), 0);
	assert_true(S_ISLNK(a.mode));
	assert_int_equal(a.size, 6);
	assert_int_equal(manifest_readlink(m, ino, buf, sizeof(buf)), 6);
	assert_memory_equal(buf, "a/b/f1", 6);
	assert_int_equal(manifest_readlink(m, ino, buf, 3), 3);
	assert_int_equal(manifest_readlink(m, SFS_ROOT_INO, buf, sizeof(buf)), -EINVAL);

	ino = ino_of(m, "a");
	assert_int_equal(manifest_getattr(m, ino, &a), 0);
	assert_int_equal(a.nlink, 3);
	assert_int_not_equal(ino_of(m, "file with space"), 0);
	assert_int_not_equal(ino_of(m, UNAME), 0);

	manifest_close(m);
}

static void test_lookup(void **state)
{
	struct manifest *m = open_small();
	struct sfs_attr a;
	uint64_t f1 = ino_of(m, "a/b/f1");

	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "nope", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "a/b", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "A", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "zero0", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "0", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "\xff", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, f1, "x", &a), -ENOTDIR);
	assert_int_equal(manifest_lookup(m, 0, "a", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, 1000, "a", &a), -ENOENT);
	assert_int_equal(manifest_getattr(m, 0, &a), -ENOENT);
	assert_int_equal(manifest_getattr(m, 13, &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, ino_of(m, "empty"), "x", &a), -ENOENT);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "Z", &a), 0);
	assert_true(S_ISDIR(a.mode));
	manifest_close(m);
}

static void test_readdir(void **state)
{
	static const char *const want[] = {
		"Z", "a", "empty", "file with space", "link", "zero",
		UNAME,
	};
	struct manifest *m = open_small();
	struct sfs_dirlist dl;
	struct sfs_attr a;

	assert_int_equal(manifest_readdir(m, SFS_ROOT_INO, &dl), 0);
	assert_int_equal(dl.n, ARRAY_SIZE(want));
	for (size_t i = 0; i < dl.n; i++) {
		assert_string_equal(dl.ent[i].name, want[i]);
		assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, want[i], &a), 0);
		assert_int_equal(a.ino, dl.ent[i].ino);
		assert_int_equal(a.mode, dl.ent[i].mode);
	}
	sfs_dirlist_release(&dl);

	assert_int_equal(manifest_readdir(m, ino_of(m, "a/b"), &dl), 0);
	assert_int_equal(dl.n, 3);
	assert_string_equal(dl.ent[0].name, "f0");
	assert_string_equal(dl.ent[1].name, "f1");
	assert_string_equal(dl.ent[2].name, "f2");
	sfs_dirlist_release(&dl);

	assert_int_equal(manifest_readdir(m, ino_of(m, "empty"), &dl), 0);
	assert_int_equal(dl.n, 0);
	assert_int_equal(manifest_readdir(m, ino_of(m, "zero"), &dl), -ENOTDIR);
	manifest_close(m);
}

static void test_path(void **state)
{
	static const char *const paths[] = {
		"a", "a/b", "a/b/f0", "a/b/f1", "a/b/f2", "empty", "link", "Z",
		"file with space",
	};
	struct manifest *m = open_small();
	char buf[256];

	assert_int_equal(manifest_path(m, SFS_ROOT_INO, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		int n = manifest_path(m, ino_of(m, paths[i]), buf, sizeof(buf));

		assert_int_equal(n, (int)strlen(paths[i]));
		assert_string_equal(buf, paths[i]);
	}
	assert_int_equal(manifest_path(m, ino_of(m, "a/b/f1"), buf, 6), -ERANGE);
	assert_int_equal(manifest_path(m, ino_of(m, "a/b/f1"), buf, 7), 6);
	assert_int_equal(manifest_path(m, 99, buf, sizeof(buf)), -ENOENT);
	manifest_close(m);
}

static void test_totals(void **state)
{
	struct manifest *m = open_small();
	uint64_t bytes, files;

	manifest_totals(m, &bytes, &files);
	assert_int_equal(bytes, (3 * CHUNK + 1) + CHUNK + (CHUNK - 1) + 10 + 5 + 0);
	assert_int_equal(files, 12);
	manifest_close(m);
}

static void test_builder_errors(void **state)
{
	struct manifest_builder *b = manifest_builder_create(CHUNK);
	struct sfs_attr d = mkattr(S_IFDIR | 0755, 0);
	struct sfs_attr f = mkattr(S_IFREG | 0644, 1);
	struct sfs_attr fifo = mkattr(S_IFIFO | 0644, 0);
	struct sfs_id ids[2] = { { 1, 1 }, { 2, 2 } };
	char longname[300];
	void *buf;
	size_t len;

	assert_null(manifest_builder_create(1000));
	assert_int_equal(manifest_builder_add(b, "d", &d, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_add(b, "d", &d, NULL, NULL, 0), -EEXIST);
	assert_int_equal(manifest_builder_add(b, "d", &f, NULL, NULL, 0), -EEXIST);
	assert_int_equal(manifest_builder_add(b, "/x", &f, NULL, NULL, 0), -EINVAL);
	assert_int_equal(manifest_builder_add(b, "x/", &f, NULL, NULL, 0), -EINVAL);
	assert_int_equal(manifest_builder_add(b, "d//x", &f, NULL, NULL, 0), -EINVAL);
	assert_int_equal(manifest_builder_add(b, "d/./x", &f, NULL, NULL, 0), -EINVAL);
	assert_int_equal(manifest_builder_add(b, "..", &f, NULL, NULL, 0), -EINVAL);
	assert_int_equal(manifest_builder_add(b, "", &f, NULL, NULL, 0), -EINVAL);
	assert_int_equal(manifest_builder_add(b, "p", &fifo, NULL, NULL, 0), -EINVAL);
	assert_int_equal(manifest_builder_add(b, "l", &f, "t", NULL, 0), -EINVAL);
	assert_int_equal(manifest_builder_add(b, "f", &f, NULL, ids, 2), -EINVAL);
	memset(longname, 'n', 256);
	longname[256] = '\0';
	assert_int_equal(manifest_builder_add(b, longname, &f, NULL, NULL, 0), -ENAMETOOLONG);
	longname[255] = '\0';
	assert_int_equal(manifest_builder_add(b, longname, &f, NULL, ids, 1), 0);
	assert_int_equal(manifest_builder_add(b, "d/x", &f, NULL, ids, 1), 0);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), 0);
	free(buf);

	/* parent missing */
	assert_int_equal(manifest_builder_add(b, "q/x", &f, NULL, NULL, 0), 0);
	log_level = LOG_CRIT;
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), -ENOENT);
	manifest_builder_destroy(b);

	/* parent is a file */
	b = manifest_builder_create(CHUNK);
	assert_int_equal(manifest_builder_add(b, "f", &f, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_add(b, "f/x", &f, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), -ENOTDIR);
	log_level = LOG_NOTICE;
	manifest_builder_destroy(b);

	/* an empty builder gives just a root */
	b = manifest_builder_create(CHUNK);
	assert_int_equal(manifest_builder_finish(b, 3, &buf, &len), 0);
	{
		struct manifest *m;
		struct sfs_attr a;

		assert_int_equal(manifest_open(buf, len, &m, NULL, 0), 0);
		assert_int_equal(manifest_nentries(m), 1);
		assert_int_equal(manifest_getattr(m, 1, &a), 0);
		assert_true(S_ISDIR(a.mode));
		manifest_close(m);
	}
	manifest_builder_destroy(b);
}

static void test_deterministic(void **state)
{
	void *b1, *b2;
	size_t l1, l2;

	build_small(&b1, &l1);
	build_small(&b2, &l2);
	assert_int_equal(l1, l2);
	assert_memory_equal(b1, b2, l1);
	free(b1);
	free(b2);
}

/* A tree with hard links: a file with three names and one with two. */
static void build_links(void **buf, size_t *len)
{
	struct manifest_builder *b = manifest_builder_create(CHUNK);
	struct sfs_attr d = mkattr(S_IFDIR | 0755, 4096);

	assert_non_null(b);
	/* links before and after their file, from deeper and shallower dirs */
	assert_int_equal(manifest_builder_link(b, "top", "d/e/data"), 0);
	assert_int_equal(manifest_builder_add(b, "d", &d, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_add(b, "d/e", &d, NULL, NULL, 0), 0);
	add_file(b, "d/e/data", 2 * CHUNK + 7, 1);
	assert_int_equal(manifest_builder_link(b, "d/twin", "d/e/data"), 0);
	add_file(b, "d/one", 100, 2);
	add_file(b, "d/pair-a", 5, 3);
	assert_int_equal(manifest_builder_link(b, "d/pair-b", "d/pair-a"), 0);
	assert_int_equal(manifest_builder_finish(b, 2, buf, len), 0);
	manifest_builder_destroy(b);
}

static uint32_t hdr32(const void *buf, size_t off)
{
	uint32_t v;

	memcpy(&v, (const uint8_t *)buf + off, 4);
	return le32toh(v);
}

static uint64_t hdr64(const void *buf, size_t off)
{
	uint64_t v;

	memcpy(&v, (const uint8_t *)buf + off, 8);
	return le64toh(v);
}

static void reseal(uint8_t *b, size_t len);

static void test_links(void **state)
{
	static const char *const names[] = { "top", "d/e/data", "d/twin" };
	struct manifest *m;
	struct sfs_attr a, first;
	struct sfs_dirlist dl;
	struct sfs_id id0, id;
	uint64_t ino, bytes;
	char path[64];
	void *buf;
	size_t len;

	/* a tree without links keeps the v1 record and no flag */
	build_small(&buf, &len);
	assert_int_equal(hdr32(buf, 36), 104);
	assert_int_equal(hdr32(buf, 28), 0);
	free(buf);

	build_links(&buf, &len);
	assert_int_equal(hdr32(buf, 8), MF_FORMAT_VERSION);	/* no new version for links */
	assert_int_equal(hdr32(buf, 36), 112);	/* entry size: + inode field */
	assert_int_equal(hdr32(buf, 28), 1);	/* compat flag: hard links */
	assert_int_equal(hdr32(buf, 24), 0);	/* nothing incompatible */
	assert_int_equal(manifest_open(buf, len, &m, NULL, 0), 0);

	ino = ino_of(m, "top");
	assert_int_not_equal(ino, 0);
	/* "top" comes first in entry order, so it holds the inode */
	assert_int_equal(manifest_path(m, ino, path, sizeof(path)), 3);
	assert_string_equal(path, "top");
	assert_int_equal(manifest_getattr(m, ino, &first), 0);
	assert_int_equal(first.nlink, 3);
	assert_int_equal(first.size, 2 * CHUNK + 7);
	assert_int_equal(first.mode, S_IFREG | 0644);
	assert_int_equal(manifest_nchunks(m, ino), 3);
	assert_int_equal(manifest_chunk(m, ino, 0, &id0), 0);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		const char *slash = strrchr(names[i], '/');
		char dir[64] = "";

		if (slash)
			snprintf(dir, sizeof(dir), "%.*s", (int)(slash - names[i]), names[i]);
		assert_int_equal(ino_of(m, names[i]), ino);
		assert_int_equal(manifest_lookup(m, ino_of(m, dir),
						 slash ? slash + 1 : names[i], &a), 0);
		assert_int_equal(a.ino, ino);
		assert_int_equal(a.nlink, 3);
		assert_int_equal(a.size, first.size);
		assert_int_equal(a.mtime.tv_nsec, first.mtime.tv_nsec);
		assert_true(sfs_id_eq(&a.content, &first.content));
	}
	/* the other group, and a file with one name */
	assert_int_equal(ino_of(m, "d/pair-a"), ino_of(m, "d/pair-b"));
	assert_int_not_equal(ino_of(m, "d/pair-a"), ino);
	assert_int_equal(manifest_getattr(m, ino_of(m, "d/pair-b"), &a), 0);
	assert_int_equal(a.nlink, 2);
	assert_int_equal(manifest_getattr(m, ino_of(m, "d/one"), &a), 0);
	assert_int_equal(a.nlink, 1);

	/* readdir reports the shared inode for every name */
	assert_int_equal(manifest_readdir(m, ino_of(m, "d"), &dl), 0);
	assert_int_equal(dl.n, 5);	/* e one pair-a pair-b twin */
	for (size_t i = 0; i < dl.n; i++) {
		assert_int_equal(manifest_lookup(m, ino_of(m, "d"), dl.ent[i].name, &a), 0);
		assert_int_equal(dl.ent[i].ino, a.ino);
		assert_int_equal(dl.ent[i].mode & S_IFMT, a.mode & S_IFMT);
	}
	sfs_dirlist_release(&dl);

	/* the data is in the chunk table and the totals once */
	assert_int_equal(manifest_nids(m), 3 + 1 + 1);
	manifest_totals(m, &bytes, NULL);
	assert_int_equal(bytes, (2 * CHUNK + 7) + 100 + 5);
	for (uint64_t i = 0; i < manifest_nids(m); i++) {
		manifest_id(m, i, &id);
		assert_false(sfs_id_is_zero(&id));
	}
	manifest_id(m, manifest_nids(m), &id);
	assert_true(sfs_id_is_zero(&id));
	manifest_close(m);

	/*
	 * What a reader that does not know the inode field sees: zero it and
	 * every name is a file of its own, with the same bytes, chunks,
	 * content id (one cache file) and nlink.
	 */
	build_links(&buf, &len);
	{
		uint64_t eoff = hdr64(buf, H2_ENT_OFF), n = hdr64(buf, 48);

		for (uint64_t i = 0; i < n; i++)
			memset((uint8_t *)buf + eoff + i * 112 + 104, 0, 4);
		reseal(buf, len);
	}
	assert_int_equal(manifest_open(buf, len, &m, NULL, 0), 0);
	assert_int_not_equal(ino_of(m, "top"), ino_of(m, "d/twin"));
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		ino = ino_of(m, names[i]);
		assert_int_equal(manifest_getattr(m, ino, &a), 0);
		assert_int_equal(a.nlink, 3);
		assert_true(sfs_id_eq(&a.content, &first.content));
		assert_int_equal(manifest_nchunks(m, ino), 3);
		assert_int_equal(manifest_chunk(m, ino, 0, &id), 0);
		assert_true(sfs_id_eq(&id, &id0));
	}
	manifest_close(m);
}

/* Point the inode field of entry "d/@name" at @to: its lookup is -EIO. */
static void bad_link(const char *name, uint32_t to)
{
	struct manifest *m;
	struct sfs_attr a;
	uint8_t *b;
	size_t len;
	uint64_t eoff, soff, n;
	int hit = 0;

	build_links((void **)&b, &len);
	eoff = hdr64(b, H2_ENT_OFF);
	soff = hdr64(b, H2_STR_OFF);
	n = hdr64(b, 48);
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *p = b + eoff + i * 112;
		uint32_t v = htole32(to);

		if (hdr32(p, 72) == strlen(name) &&
		    !memcmp(b + soff + hdr64(p, 64), name, strlen(name))) {
			memcpy(p + 104, &v, 4);
			hit++;
		}
	}
	assert_int_equal(hit, 1);
	reseal(b, len);
	assert_int_equal(manifest_open(b, len, &m, NULL, 0), 0);
	assert_int_equal(manifest_lookup(m, ino_of(m, "d"), name, &a), -EIO);
	manifest_close(m);
}

static void test_links_hostile(void **state)
{
	log_level = LOG_CRIT;
	/* entry order: 0 root, 1 d, 2 top, 3 e, 4 one, 5 pair-a, 6 pair-b,
	 * 7 twin, 8 data */
	bad_link("twin", 7);		/* itself */
	bad_link("twin", 8);		/* a later entry */
	bad_link("twin", 1);		/* a directory */
	bad_link("twin", 6);		/* another link (a chain) */
	bad_link("twin", 1000);		/* out of range */
	bad_link("e", 4);		/* a directory as a link */
	log_level = LOG_NOTICE;
}

static void test_links_errors(void **state)
{
	struct manifest_builder *b = manifest_builder_create(CHUNK);
	struct sfs_attr d = mkattr(S_IFDIR | 0755, 0);
	struct sfs_attr l = mkattr(S_IFLNK | 0777, 0);
	void *buf;
	size_t len;

	assert_int_equal(manifest_builder_add(b, "dir", &d, NULL, NULL, 0), 0);
	add_file(b, "f", 10, 1);
	assert_int_equal(manifest_builder_add(b, "sym", &l, "f", NULL, 0), 0);
	assert_int_equal(manifest_builder_link(b, "f", "f"), -EINVAL);
	assert_int_equal(manifest_builder_link(b, "g", "f"), 0);
	assert_int_equal(manifest_builder_link(b, "g", "f"), -EEXIST);
	assert_int_equal(manifest_builder_link(b, "f", "dir"), -EEXIST);
	assert_int_equal(manifest_builder_link(b, "", "f"), -EINVAL);
	assert_int_equal(manifest_builder_link(b, "x", ""), -EINVAL);
	assert_int_equal(manifest_builder_link(b, "x/../y", "f"), -EINVAL);
	assert_int_equal(manifest_builder_link(b, "dir/h", "/f"), -EINVAL);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), 0);
	free(buf);

	log_level = LOG_CRIT;
	assert_int_equal(manifest_builder_link(b, "h1", "nosuch"), 0);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), -ENOENT);
	manifest_builder_destroy(b);

	b = manifest_builder_create(CHUNK);
	assert_int_equal(manifest_builder_add(b, "dir", &d, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_link(b, "h", "dir"), 0);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), -EINVAL);
	manifest_builder_destroy(b);

	b = manifest_builder_create(CHUNK);
	assert_int_equal(manifest_builder_add(b, "sym", &l, "x", NULL, 0), 0);
	assert_int_equal(manifest_builder_link(b, "h", "sym"), 0);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), -EINVAL);
	manifest_builder_destroy(b);

	b = manifest_builder_create(CHUNK);
	add_file(b, "f", 10, 1);
	assert_int_equal(manifest_builder_link(b, "g", "f"), 0);
	assert_int_equal(manifest_builder_link(b, "h", "g"), 0);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), -EINVAL);
	manifest_builder_destroy(b);

	/* a link in a directory that is missing */
	b = manifest_builder_create(CHUNK);
	add_file(b, "f", 10, 1);
	assert_int_equal(manifest_builder_link(b, "nodir/g", "f"), 0);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), -ENOENT);
	manifest_builder_destroy(b);
	log_level = LOG_NOTICE;
}

static void truncations(void (*build)(void **, size_t *))
{
	void *buf;
	size_t len;
	char err[128];

	build(&buf, &len);
	for (size_t n = 0; n < len; n++) {
		void *copy = malloc(n + 1);
		struct manifest *m = (void *)1;

		memcpy(copy, buf, n);
		assert_int_not_equal(manifest_open(copy, n, &m, err, sizeof(err)), 0);
		assert_null(m);
		assert_true(err[0] != '\0');
		free(copy);
	}
	free(buf);
}

static void test_truncation(void **state)
{
	truncations(build_small);
	truncations(build_links);
}

/* Recompute every checksum, as a hostile writer would. */
static void reseal(uint8_t *b, size_t len)
{
	manifest_reseal(b, len);
}

/* Touch everything reachable through the accessors. */
static void walk_all(struct manifest *m)
{
	uint64_t n = manifest_nentries(m), bytes, files;
	char buf[4096];

	manifest_totals(m, &bytes, &files);
	for (uint64_t i = 0; i <= manifest_nids(m); i++) {
		struct sfs_id id;

		manifest_id(m, i, &id);
	}
	for (uint64_t ino = 0; ino <= n + 1; ino++) {
		struct sfs_attr a;
		struct sfs_dirlist dl;
		struct sfs_id id;
		uint32_t nc;

		(void)manifest_getattr(m, ino, &a);
		(void)manifest_readlink(m, ino, buf, sizeof(buf));
		(void)manifest_path(m, ino, buf, sizeof(buf));
		nc = manifest_nchunks(m, ino);
		for (uint32_t i = 0; i < nc && i < 8; i++)
			(void)manifest_chunk(m, ino, i, &id);
		(void)manifest_chunk(m, ino, nc, &id);
		if (manifest_readdir(m, ino, &dl) == 0) {
			for (size_t i = 0; i < dl.n; i++)
				(void)manifest_lookup(m, ino, dl.ent[i].name, &a);
			sfs_dirlist_release(&dl);
		}
		(void)manifest_lookup(m, ino, "f1", &a);
		(void)manifest_lookup(m, ino, "twin", &a);
		(void)manifest_lookup(m, ino, "zzz", &a);
	}
}

static void fuzz(void (*build)(void **, size_t *), unsigned seed)
{
	void *buf;
	size_t len;
	int opened = 0;

	build(&buf, &len);
	log_level = LOG_CRIT;	/* corrupt entries are logged at LOG_ERR */
	for (int it = 0; it < 20000; it++) {
		uint8_t *copy = malloc(len);
		struct manifest *m;
		int flips = 1 + rand_r(&seed) % 4;

		memcpy(copy, buf, len);
		for (int f = 0; f < flips; f++) {
			size_t at = (size_t)rand_r(&seed) % len;

			/* bias toward the header and the entry table */
			if (rand_r(&seed) % 2)
				at %= MIN(len, (size_t)MF2_HEADER_SIZE + 12 * 112);
			copy[at] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
			if (rand_r(&seed) % 4 == 0)
				copy[at] = (uint8_t)rand_r(&seed);
		}
		if (it % 4 != 0)
			reseal(copy, len);
		if (manifest_open(copy, len, &m, NULL, 0) == 0) {
			opened++;
			walk_all(m);
			manifest_close(m);
		} else {
			free(copy);
		}
	}
	log_level = LOG_NOTICE;
	print_message("fuzz: %d of 20000 damaged manifests opened and were walked\n",
		      opened);
	assert_true(opened > 1000);
	free(buf);
}

static void test_fuzz(void **state)
{
	fuzz(build_small, 12345);
	fuzz(build_links, 54321);
}

static void test_big(void **state)
{
	const uint32_t ndirs = 1000, per = 999;
	struct manifest_builder *b = manifest_builder_create(4 * 1024 * 1024);
	struct sfs_attr d = mkattr(S_IFDIR | 0755, 0);
	struct sfs_attr f = mkattr(S_IFREG | 0644, 1234);
	struct sfs_id id = { 0xabc, 0xdef };
	struct manifest *m;
	struct sfs_attr a;
	char path[64], err[128];
	uint64_t t0, t1, t2;
	void *buf;
	size_t len;

	t0 = now_ns();
	/* files first, directories last: the builder must not care */
	for (uint32_t i = 0; i < ndirs; i++) {
		for (uint32_t j = 0; j < per; j++) {
			snprintf(path, sizeof(path), "dir%04u/img_%07u.jpg", i, j * 7919 % 1000003);
			f.size = 1000 + j;
			assert_int_equal(manifest_builder_add(b, path, &f, NULL, &id, 1), 0);
		}
	}
	for (uint32_t i = 0; i < ndirs; i++) {
		snprintf(path, sizeof(path), "dir%04u", i);
		assert_int_equal(manifest_builder_add(b, path, &d, NULL, NULL, 0), 0);
	}
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), 0);
	manifest_builder_destroy(b);
	t1 = now_ns();

	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "dir0500", &a), 0);
	assert_int_equal(manifest_lookup(m, a.ino, "img_0039595.jpg", &a), 0);
	t2 = now_ns();
	assert_int_equal(a.size, 1005);

	print_message("big: %llu entries, %.1f MiB, build %.0f ms, open+lookup %.1f ms\n",
		      (unsigned long long)manifest_nentries(m), (double)len / MiB,
		      (t1 - t0) / 1e6, (t2 - t1) / 1e6);
	assert_int_equal(manifest_nentries(m), 1 + ndirs + (uint64_t)ndirs * per);
	assert_true(t2 - t1 < 500000000ULL);
	manifest_close(m);
}

/* Format 1 manifests (published before format 2) are still read. */
static void test_v1(void **state)
{
	struct manifest *m;
	struct sfs_attr a, f1;
	struct sfs_dirlist dl;
	struct sfs_id id;
	char buf[64];
	void *copy = malloc(sizeof(manifest_v1_small));

	memcpy(copy, manifest_v1_small, sizeof(manifest_v1_small));
	assert_int_equal(manifest_open(copy, sizeof(manifest_v1_small), &m, buf,
				       sizeof(buf)), 0);
	assert_int_equal(manifest_format(m), 1);
	assert_int_equal(manifest_version(m), 7);
	assert_int_equal(manifest_verify(m, NULL), 0);
	assert_int_equal(manifest_getattr(m, ino_of(m, "a/b/f1"), &f1), 0);
	assert_int_equal(f1.size, 3 * CHUNK + 1);
	assert_int_equal(f1.nlink, 2);
	assert_int_equal(ino_of(m, "a/twin"), f1.ino);
	assert_int_equal(manifest_chunk(m, f1.ino, 3, &id), 0);
	assert_true(id.hi == 0x1111000000000001ULL && id.lo == 4);
	assert_int_equal(manifest_readlink(m, ino_of(m, "link"), buf, sizeof(buf)), 6);
	assert_memory_equal(buf, "a/b/f1", 6);
	assert_int_equal(manifest_readdir(m, SFS_ROOT_INO, &dl), 0);
	assert_int_equal(dl.n, 5);	/* a empty file with space link zero */
	sfs_dirlist_release(&dl);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "nope", &a), -ENOENT);
	manifest_close(m);

	/* damage is still found at open, as format 1 always was */
	copy = malloc(sizeof(manifest_v1_small));
	memcpy(copy, manifest_v1_small, sizeof(manifest_v1_small));
	((uint8_t *)copy)[sizeof(manifest_v1_small) - 1] ^= 1;
	assert_int_equal(manifest_open(copy, sizeof(manifest_v1_small), &m, buf,
				       sizeof(buf)), -EINVAL);
	assert_string_equal(buf, "string table checksum mismatch");
	free(copy);
}

#define PG_DIRS		40
#define PG_PER		500

/* 20,000 files in 40 directories: many parts of every section. */
static void build_paged(void **buf, size_t *len)
{
	struct manifest_builder *b = manifest_builder_create(CHUNK);
	struct sfs_attr d = mkattr(S_IFDIR | 0755, 0);
	struct sfs_attr l = mkattr(S_IFLNK | 0777, 0);
	char path[64], tgt[64];

	for (int i = 0; i < PG_DIRS; i++) {
		snprintf(path, sizeof(path), "dir%02d", i);
		assert_int_equal(manifest_builder_add(b, path, &d, NULL, NULL, 0), 0);
		for (int j = 0; j < PG_PER; j++) {
			snprintf(path, sizeof(path), "dir%02d/file-with-a-longish-name-%05d", i, j);
			add_file(b, path, 1 + (uint64_t)j * 1000, (uint32_t)(i * PG_PER + j));
		}
		snprintf(path, sizeof(path), "dir%02d/sym", i);
		snprintf(tgt, sizeof(tgt), "file-with-a-longish-name-%05d", i);
		assert_int_equal(manifest_builder_add(b, path, &l, tgt, NULL, 0), 0);
	}
	assert_int_equal(manifest_builder_finish(b, 9, buf, len), 0);
	manifest_builder_destroy(b);
}

/* Byte offset of part @p of @m's bytes @b (format 2), and its length. */
static uint64_t part_at(const uint8_t *b, uint64_t p, uint64_t *plen)
{
	uint32_t shift = hdr32(b, H2_PARTSHIFT);
	uint64_t esize = hdr32(b, H_ENTSIZE), n = hdr64(b, H_NENTRIES);
	uint64_t sec[3][2] = {
		{ hdr64(b, H2_ENT_OFF), mf2_ent_len(n, (uint32_t)esize, shift) },
		{ hdr64(b, H2_CHK_OFF), hdr64(b, H2_CHK_LEN) },
		{ hdr64(b, H2_STR_OFF), hdr64(b, H2_STR_LEN) },
	};

	for (int i = 0; i < 3; i++) {
		uint64_t np = mf2_nparts(sec[i][1], shift);

		if (p < np) {
			*plen = MIN(sec[i][1] - (p << shift), 1ull << shift);
			return sec[i][0] + (p << shift);
		}
		p -= np;
	}
	fail();
	return 0;
}

/*
 * A damaged part is found when an access first touches it, that access and
 * every later one touching it fail with EIO, and everything else is served.
 */
static void test_paged_corrupt(void **state)
{
	struct manifest *m;
	struct sfs_attr a;
	struct sfs_dirlist dl;
	struct sfs_id id;
	uint8_t *buf;
	size_t len;
	uint64_t plen, off, nparts, epp, chk0, str0, bad, d7, d30, ino;
	char path[64], err[128];

	build_paged((void **)&buf, &len);
	nparts = hdr64(buf, H2_NPARTS);
	epp = mf2_per_part(hdr32(buf, H_ENTSIZE), hdr32(buf, H2_PARTSHIFT));
	chk0 = mf2_nparts(mf2_ent_len(hdr64(buf, H_NENTRIES), hdr32(buf, H_ENTSIZE),
				      hdr32(buf, H2_PARTSHIFT)), hdr32(buf, H2_PARTSHIFT));
	str0 = chk0 + mf2_nparts(hdr64(buf, H2_CHK_LEN), hdr32(buf, H2_PARTSHIFT));
	print_message("paged: %zu bytes, %llu parts (%llu entry, %llu chunk, %llu string)\n",
		      len, (unsigned long long)nparts, (unsigned long long)chk0,
		      (unsigned long long)(str0 - chk0), (unsigned long long)(nparts - str0));
	assert_true(chk0 >= 20 && str0 - chk0 >= 4 && nparts - str0 >= 10);

	/* intact: every entry reachable, verify finds nothing */
	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	assert_int_equal(manifest_format(m), 2);
	for (int i = 0; i < PG_DIRS; i += 13) {
		snprintf(path, sizeof(path), "dir%02d/file-with-a-longish-name-%05d", i, PG_PER - 1);
		assert_int_not_equal(ino_of(m, path), 0);
	}
	assert_int_equal(manifest_verify(m, &bad), 0);
	assert_int_equal(bad, 0);
	manifest_close(m);

	/* damage entry part 10 (in the middle of some directory's run) */
	build_paged((void **)&buf, &len);
	off = part_at(buf, 10, &plen);
	buf[off + plen / 2] ^= 0x40;
	log_level = LOG_CRIT;
	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	/* the entries of part 10 are indexes [10 * epp, 11 * epp): find whose */
	ino = 10 * epp + epp / 2 + 1;
	assert_int_equal(manifest_getattr(m, ino, &a), -EIO);
	assert_int_equal(manifest_getattr(m, ino, &a), -EIO);	/* and again */
	assert_int_equal(manifest_getattr(m, ino - epp, &a), 0);	/* part 9 */
	assert_int_equal(manifest_getattr(m, ino + epp, &a), 0);	/* part 11 */
	/* the directory whose children are in part 10 cannot be listed; others can */
	d7 = d30 = 0;
	for (int i = 0; i < PG_DIRS; i++) {
		snprintf(path, sizeof(path), "dir%02d", i);
		assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, path, &a), 0);
		if (manifest_readdir(m, a.ino, &dl) == 0) {
			assert_int_equal(dl.n, PG_PER + 1);
			sfs_dirlist_release(&dl);
			d30++;
		} else {
			d7++;
		}
	}
	assert_true(d7 >= 1 && d7 <= 2);
	assert_int_equal(d7 + d30, PG_DIRS);
	assert_int_equal(manifest_verify(m, &bad), -EIO);
	assert_int_equal(bad, 1);
	manifest_close(m);

	/* damage a chunk part: only chunk ids in it fail */
	build_paged((void **)&buf, &len);
	off = part_at(buf, chk0 + 1, &plen);
	buf[off] ^= 1;
	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	{
		int good = 0, eio = 0;

		for (uint64_t i = 2; i <= manifest_nentries(m); i += 7) {
			assert_int_equal(manifest_getattr(m, i, &a), 0);
			if (!S_ISREG(a.mode) || !manifest_nchunks(m, i))
				continue;
			if (manifest_chunk(m, i, 0, &id) == 0)
				good++;
			else
				eio++;
		}
		assert_true(good > 100 && eio > 10);
	}
	manifest_id(m, (chk0 + 1 - chk0) * 4096 + 3, &id);	/* in the bad part */
	assert_true(sfs_id_is_zero(&id));
	manifest_close(m);

	/* damage a string part: the names in it fail, the rest are found */
	build_paged((void **)&buf, &len);
	off = part_at(buf, str0 + 3, &plen);
	memset(buf + off + 100, 'X', 8);
	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	{
		int good = 0, eio = 0;

		for (int i = 0; i < PG_DIRS; i++) {
			snprintf(path, sizeof(path), "dir%02d", i);
			assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, path, &a), 0);
			if (manifest_readdir(m, a.ino, &dl) == 0) {
				sfs_dirlist_release(&dl);
				good++;
			} else {
				eio++;
			}
		}
		/* 64 KiB of ~35-byte names: those of four or five directories */
		assert_true(eio >= 1 && eio <= 5 && good + eio == PG_DIRS);
	}
	manifest_close(m);
	log_level = LOG_NOTICE;
}

/* manifest_builder_write() into a file, manifest_open_file(), truncations. */
static void test_file(void **state)
{
	char dir[] = "/tmp/test_manifest.XXXXXX", path[128], err[160];
	struct manifest *m;
	struct sfs_attr a;
	struct manifest_builder *b;
	void *buf;
	size_t len;
	uint64_t flen;
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/m", dir);

	/* the streamed file has the bytes finish() gives */
	build_paged(&buf, &len);
	b = manifest_builder_create(CHUNK);
	{
		struct sfs_attr d = mkattr(S_IFDIR | 0755, 0);
		struct sfs_attr l = mkattr(S_IFLNK | 0777, 0);
		char p[64], t[64];

		for (int i = 0; i < PG_DIRS; i++) {
			snprintf(p, sizeof(p), "dir%02d", i);
			assert_int_equal(manifest_builder_add(b, p, &d, NULL, NULL, 0), 0);
			for (int j = 0; j < PG_PER; j++) {
				snprintf(p, sizeof(p), "dir%02d/file-with-a-longish-name-%05d", i, j);
				add_file(b, p, 1 + (uint64_t)j * 1000, (uint32_t)(i * PG_PER + j));
			}
			snprintf(p, sizeof(p), "dir%02d/sym", i);
			snprintf(t, sizeof(t), "file-with-a-longish-name-%05d", i);
			assert_int_equal(manifest_builder_add(b, p, &l, t, NULL, 0), 0);
		}
	}
	print_message("file: builder holds %zu bytes for %d entries\n",
		      manifest_builder_mem(b), 1 + PG_DIRS * (PG_PER + 2));
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(manifest_builder_write(b, 9, fd, &flen), 0);
	manifest_builder_destroy(b);
	assert_int_equal(flen, len);
	{
		void *got = malloc(len);

		assert_int_equal(pread_full(fd, got, len, 0), (ssize_t)len);
		assert_memory_equal(got, buf, len);
		free(got);
	}
	assert_int_equal(manifest_open_file(path, &m, err, sizeof(err)), 0);
	assert_int_equal(manifest_version(m), 9);
	assert_int_not_equal(ino_of(m, "dir39/file-with-a-longish-name-00499"), 0);
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "dir40", &a), -ENOENT);
	assert_int_equal(manifest_verify(m, NULL), 0);
	manifest_close(m);

	/* a publisher that lost the race for version 9 takes 11 in the file */
	assert_int_equal(manifest_file_set_version(fd, 11), 0);
	assert_int_equal(manifest_open_file(path, &m, err, sizeof(err)), 0);
	assert_int_equal(manifest_version(m), 11);
	assert_int_not_equal(ino_of(m, "dir07/sym"), 0);
	manifest_close(m);

	/* truncated files are refused at open, whatever is cut */
	for (size_t cut = 1; cut < len; cut = cut < 64 ? cut + 1 : cut * 3 / 2) {
		assert_int_equal(ftruncate(fd, (off_t)(len - cut)), 0);
		m = (void *)1;
		err[0] = '\0';
		assert_int_not_equal(manifest_open_file(path, &m, err, sizeof(err)), 0);
		assert_null(m);
		assert_true(err[0] != '\0');
	}
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(manifest_open_file(path, &m, err, sizeof(err)), -EINVAL);
	close(fd);
	unlink(path);
	assert_int_equal(manifest_open_file(path, &m, err, sizeof(err)), -ENOENT);
	rmdir(dir);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_lookup),
		cmocka_unit_test(test_readdir),
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_totals),
		cmocka_unit_test(test_builder_errors),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_v1),
		cmocka_unit_test(test_paged_corrupt),
		cmocka_unit_test(test_file),
		cmocka_unit_test(test_links),
		cmocka_unit_test(test_links_hostile),
		cmocka_unit_test(test_links_errors),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_fuzz),
		cmocka_unit_test(test_big),
	};

	/* 0 pass, 1 fail: the runner's convention, not cmocka's failure count */
	return cmocka_run_group_tests_name("manifest", tests, NULL, NULL) ? 1 : 0;
}
