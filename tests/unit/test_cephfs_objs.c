/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cephfs_objs: where a CephFS file's bytes lie.  The striping of
 * Ceph's default layout and of a striped one against pieces worked out by
 * hand; random layouts and ranges: the pieces cover the range once, in
 * order, each inside its object and one stripe unit's worth of the
 * formula, no two on the same object bytes; too little room is said, not
 * overrun.  The map: files found by manifest inode with their inode and
 * layout, a hard link's names all found, a file not recorded and a
 * directory not found; layouts that are not stripings and inode numbers
 * that do not fit are refused; a map of another walk, a truncated one and
 * a corrupt layout are refused with a reason; a bit flipped in an entry
 * makes its block's files "corrupt", not another file's.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "backend/cephfs_objs.h"
#include "manifest/manifest.h"
#include "util.h"

#define K 1024u
#define M (1024u * 1024u)

static void expect(const struct cfsobj_extent *x, uint64_t objno, uint64_t obj_off,
		   size_t buf_off, size_t len)
{
	assert_int_equal(x->objno, objno);
	assert_int_equal(x->obj_off, obj_off);
	assert_int_equal(x->buf_off, buf_off);
	assert_int_equal(x->len, len);
}

static void test_default_layout(void **state)
{
	struct cfsobj_layout l = { 4 * M, 1, 4 * M, 0, 2 };
	struct cfsobj_extent x[4];

	(void)state;
	assert_true(cfsobj_layout_ok(&l));
	assert_int_equal(cfsobj_extents(&l, 0, 4 * M, x, 4), 1);
	expect(&x[0], 0, 0, 0, 4 * M);
	/* a chunk across two objects */
	assert_int_equal(cfsobj_extents(&l, 3 * M, 2 * M, x, 4), 2);
	expect(&x[0], 0, 3 * M, 0, M);
	expect(&x[1], 1, 0, M, M);
	/* far into the file: object 0x30 */
	assert_int_equal(cfsobj_extents(&l, 192ull * M + 5, 100, x, 4), 1);
	expect(&x[0], 48, 5, 0, 100);
}

static void test_striped(void **state)
{
	/* 64 KiB units over 3 objects of 256 KiB: 4 units an object */
	struct cfsobj_layout l = { 64 * K, 3, 256 * K, 0, 2 };
	struct cfsobj_extent x[8];

	(void)state;
	assert_int_equal(cfsobj_extents(&l, 32 * K, 128 * K, x, 8), 3);
	expect(&x[0], 0, 32 * K, 0, 32 * K);
	expect(&x[1], 1, 0, 32 * K, 64 * K);
	expect(&x[2], 2, 0, 96 * K, 32 * K);
	/* unit 3 is the second unit of object 0; unit 12 opens object set 1 */
	assert_int_equal(cfsobj_extents(&l, 192 * K, 64 * K, x, 8), 1);
	expect(&x[0], 0, 64 * K, 0, 64 * K);
	assert_int_equal(cfsobj_extents(&l, 12 * 64 * K + 7, 10, x, 8), 1);
	expect(&x[0], 3, 7, 0, 10);
	/* too little room: the count, nothing written past it */
	memset(x, 0xa5, sizeof(x));
	assert_int_equal(cfsobj_extents(&l, 0, M, x, 2), 16);
	assert_int_equal(x[2].objno, 0xa5a5a5a5a5a5a5a5ull);
}

static void test_random_ranges(void **state)
{
	static const uint32_t units[] = { 4 * K, 64 * K, 1 * M, 4 * M };
	unsigned seed = 7;

	(void)state;
	for (int round = 0; round < 2000; round++) {
		struct cfsobj_layout l = { 0 };
		struct cfsobj_extent x[600];
		uint64_t off;
		size_t len, n, at = 0;

		l.stripe_unit = units[rand_r(&seed) % 4];
		l.stripe_count = 1 + rand_r(&seed) % 5;
		l.object_size = l.stripe_unit * (1 + rand_r(&seed) % 4);
		assert_true(cfsobj_layout_ok(&l));
		off = (uint64_t)rand_r(&seed) % (64 * M);
		len = 1 + (size_t)rand_r(&seed) % (2 * M);
		n = cfsobj_extents(&l, off, len, x, 600);
		assert_true(n <= len / l.stripe_unit + 2);
		for (size_t i = 0; i < n; i++) {
			uint64_t cur = off + x[i].buf_off, su = l.stripe_unit;
			uint64_t b = cur / su, stripe = b / l.stripe_count;
			uint64_t per = l.object_size / su;

			assert_int_equal(x[i].buf_off, at);	/* in order, no gap */
			assert_true(x[i].len > 0);
			assert_true(x[i].obj_off + x[i].len <= l.object_size);
			/* its first byte where the formula puts it */
			assert_int_equal(x[i].objno, stripe / per * l.stripe_count + b % l.stripe_count);
			assert_int_equal(x[i].obj_off, stripe % per * su + cur % su);
			/* no two pieces on the same bytes of one object */
			for (size_t j = 0; j < i; j++)
				assert_true(x[j].objno != x[i].objno ||
					    x[j].obj_off + x[j].len <= x[i].obj_off ||
					    x[i].obj_off + x[i].len <= x[j].obj_off);
			at += x[i].len;
		}
		assert_int_equal(at, len);
	}
}

static void test_layout_ok(void **state)
{
	struct cfsobj_layout bad[] = {
		{ 0, 1, 4 * M, 0, 1 },		/* no unit */
		{ 4 * M, 0, 4 * M, 0, 1 },	/* no stripes */
		{ 3 * M, 1, 4 * M, 0, 1 },	/* an object is not whole units */
		{ 4 * M, 1, 4 * M, 0, -1 },	/* no pool */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(cfsobj_layout_ok(&bad[i]));
}

/* A manifest: a/ (dir), a/f, a/g (not recorded), h (a second name of a/f), big */
static struct manifest *small_manifest(struct sfs_id ids[3])
{
	struct manifest_builder *b = manifest_builder_create(M);
	struct sfs_attr a = { 0 };
	struct manifest *m;
	char err[128];
	void *buf;
	size_t len;

	a.mode = S_IFDIR | 0755;
	assert_int_equal(manifest_builder_add(b, "a", &a, NULL, NULL, 0), 0);
	a.mode = S_IFREG | 0644;
	for (int i = 0; i < 3; i++) {
		uint64_t v = 100 + (uint64_t)i;

		sfs_id_of(&v, sizeof(v), &ids[i]);
		a.content = ids[i];
		a.size = 1000 * (uint64_t)(i + 1);
		assert_int_equal(manifest_builder_add(b, i == 0 ? "a/f" : i == 1 ? "a/g" : "big",
						      &a, NULL, NULL, 0), 0);
	}
	assert_int_equal(manifest_builder_link(b, "h", "a/f"), 0);
	assert_int_equal(manifest_builder_finish(b, 1, &buf, &len), 0);
	manifest_builder_destroy(b);
	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	return m;
}

static uint64_t ino_of(struct manifest *m, const char *path)
{
	struct sfs_attr a;
	uint64_t at = 1;
	char part[64];

	while (*path) {
		const char *slash = strchr(path, '/');
		size_t n = slash ? (size_t)(slash - path) : strlen(path);

		memcpy(part, path, n);
		part[n] = '\0';
		assert_int_equal(manifest_lookup(m, at, part, &a), 0);
		at = a.ino;
		path += n + (slash != NULL);
	}
	return at;
}

static void test_map(void **state)
{
	struct cfsobj_layout def = { 4 * M, 1, 4 * M, 0, 3 }, str = { 64 * K, 4, M, 0, 5 }, got;
	struct cfsobj_builder *b = cfsobj_builder_create();
	struct sfs_id ids[3];
	struct manifest *m = small_manifest(ids);
	struct cfsobj_map *map;
	char err[128];
	uint64_t ino;
	void *buf;
	size_t len;

	(void)state;
	assert_non_null(b);
	assert_int_equal(cfsobj_builder_add(b, &ids[0], 0x10000000001ull, &def), 0);
	assert_int_equal(cfsobj_builder_add(b, &ids[2], 0x10000000003ull, &str), 0);
	/* what cannot be read directly is not recorded */
	str.object_size = 100 * K;
	assert_int_equal(cfsobj_builder_add(b, &ids[1], 0x10000000002ull, &str), -EINVAL);
	str.object_size = M;
	assert_int_equal(cfsobj_builder_add(b, &ids[1], 1ull << 48, &def), -EINVAL);
	assert_int_equal(cfsobj_builder_count(b), 2);

	assert_int_equal(cfsobj_builder_build(b, m, "walk 1", &buf, &len), 0);
	assert_int_equal(cfsobj_map_open(buf, len, false, m, "walk 1", &map, err, sizeof(err)), 0);
	assert_int_equal(cfsobj_map_count(map), 2);
	assert_int_equal(cfsobj_map_find(map, ino_of(m, "a/f"), &ino, &got), 1);
	assert_int_equal(ino, 0x10000000001ull);
	assert_memory_equal(&got, &def, sizeof(got));
	assert_true(cfsobj_map_find(map, ino_of(m, "h"), &ino, &got));	/* the same inode */
	assert_int_equal(ino, 0x10000000001ull);
	assert_true(cfsobj_map_find(map, ino_of(m, "big"), &ino, &got));
	assert_int_equal(ino, 0x10000000003ull);
	assert_memory_equal(&got, &str, sizeof(got));
	assert_false(cfsobj_map_find(map, ino_of(m, "a/g"), &ino, &got));
	assert_false(cfsobj_map_find(map, ino_of(m, "a"), &ino, &got));
	assert_false(cfsobj_map_find(map, 0, &ino, &got));
	assert_false(cfsobj_map_find(map, 1000, &ino, &got));
	cfsobj_map_close(map);

	/* another walk's map, a truncated one, a corrupt layout */
	assert_int_equal(cfsobj_builder_build(b, m, "walk 1", &buf, &len), 0);
	assert_int_equal(cfsobj_map_open(buf, len, false, m, "walk 2", &map, err, sizeof(err)),
			 -ESTALE);
	assert_int_equal(cfsobj_builder_build(b, m, "walk 1", &buf, &len), 0);
	assert_int_equal(cfsobj_map_open(buf, len - 8, false, m, "walk 1", &map, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(cfsobj_builder_build(b, m, "walk 1", &buf, &len), 0);
	/* the layouts, then one checksum (6 entries: one block), then the entries */
	memset((char *)buf + len - (manifest_nentries(m) + 1) * 8 - 2 * sizeof(struct cfsobj_layout),
	       0, 4);
	assert_int_equal(cfsobj_map_open(buf, len, false, m, "walk 1", &map, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "layout"));

	/* a bit flipped in an entry: its block's files are not found, never elsewhere */
	assert_int_equal(cfsobj_builder_build(b, m, "walk 1", &buf, &len), 0);
	((unsigned char *)buf)[len - 8 * (manifest_nentries(m) - ino_of(m, "big") + 1)] ^= 4;
	assert_int_equal(cfsobj_map_open(buf, len, false, m, "walk 1", &map, err, sizeof(err)), 0);
	assert_int_equal(cfsobj_map_find(map, ino_of(m, "big"), &ino, &got), -EBADMSG);
	assert_int_equal(cfsobj_map_find(map, ino_of(m, "a/f"), &ino, &got), -EBADMSG);
	cfsobj_map_close(map);

	cfsobj_builder_destroy(b);
	manifest_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_layout),
		cmocka_unit_test(test_striped),
		cmocka_unit_test(test_random_ranges),
		cmocka_unit_test(test_layout_ok),
		cmocka_unit_test(test_map),
	};

	return cmocka_run_group_tests_name("cephfs_objs", tests, NULL, NULL) ? 1 : 0;
}
