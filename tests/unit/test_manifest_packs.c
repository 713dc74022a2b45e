/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_manifest_packs: small files stored in packs (docs/manifest.md,
 * "Packs"): the builder's pack and member tables read back (each file's
 * pack and offset, each pack's members in offset order, content ids as if
 * unpacked, a hard link to a packed file), the builder's refusals, crafted
 * records with valid checksums (a member naming another file, a file
 * outside its pack, a pack larger than a chunk, a content id not of the
 * file's chunk) refused with EIO, an old reader's refusal of the incompat
 * flag, and 20,000 byte-flipped packed manifests walked under the
 * sanitizers.  Also the order `stagefs publish` adds in: a hard link to a
 * packed file given before the file (which waits for its pack to be
 * flushed), and a pack of an earlier version named again for only some
 * of its old members.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "manifest/manifest.h"
#include "manifest/manifest_i.h"
#include "util.h"

#define CHUNK	(64u * 1024)

static struct sfs_attr mkattr(uint32_t mode, uint64_t size)
{
	struct sfs_attr a = {
		.mode = mode,
		.uid = 1000,
		.gid = 100,
		.size = size,
		.mtime = { 1700000001, 5 },
	};

	return a;
}

static struct sfs_id fake_id(uint64_t seed)
{
	struct sfs_id id = { 0xabcd000000000000ULL + seed, 0x5555000000000000ULL ^ seed };

	return id;
}

/*
 * d/a (3000 B at 0 of pack 0), d/b (5000 B at 4096 of pack 0), d/c (100 B
 * at 0 of pack 1), e (700 B at 20000 of pack 0, added after b: members are
 * in offset order whatever the order added), big (200 KiB, 4 chunks, not
 * packed), d/link (a hard link to d/b), and an empty file.
 */
static void build_packed(void **buf, size_t *len)
{
	struct manifest_builder *b = manifest_builder_create(CHUNK);
	struct sfs_attr dir = mkattr(S_IFDIR | 0755, 0);
	struct sfs_id p0 = fake_id(100), p1 = fake_id(101), big[4], id;
	uint32_t i0, i1;

	assert_non_null(b);
	assert_int_equal(manifest_builder_add(b, "d", &dir, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_add_pack(b, &p0, 30000, &i0), 0);
	assert_int_equal(manifest_builder_add_pack(b, &p1, 100, &i1), 0);
	assert_int_equal(i0, 0);
	assert_int_equal(i1, 1);
	id = fake_id(1);
	assert_int_equal(manifest_builder_add_packed(b, "d/a", &(struct sfs_attr){
		.mode = S_IFREG | 0644, .size = 3000 }, &id, 0, 0), 0);
	id = fake_id(5);
	assert_int_equal(manifest_builder_add_packed(b, "e", &(struct sfs_attr){
		.mode = S_IFREG | 0644, .size = 700 }, &id, 0, 20000), 0);
	id = fake_id(2);
	assert_int_equal(manifest_builder_add_packed(b, "d/b", &(struct sfs_attr){
		.mode = S_IFREG | 0600, .size = 5000 }, &id, 0, 4096), 0);
	id = fake_id(3);
	assert_int_equal(manifest_builder_add_packed(b, "d/c", &(struct sfs_attr){
		.mode = S_IFREG | 0644, .size = 100 }, &id, 1, 0), 0);
	for (int k = 0; k < 4; k++)
		big[k] = fake_id(50 + (uint64_t)k);
	{
		struct sfs_attr a = mkattr(S_IFREG | 0644, 200 * 1024);

		assert_int_equal(manifest_builder_add(b, "big", &a, NULL, big, 4), 0);
	}
	{
		struct sfs_attr a = mkattr(S_IFREG | 0644, 0);

		assert_int_equal(manifest_builder_add(b, "empty", &a, NULL, NULL, 0), 0);
	}
	assert_int_equal(manifest_builder_link(b, "d/link", "d/b"), 0);
	assert_int_equal(manifest_builder_finish(b, 7, buf, len), 0);
	manifest_builder_destroy(b);
}

static struct manifest *open_packed(void)
{
	struct manifest *m;
	void *buf;
	size_t len;
	char err[200];

	build_packed(&buf, &len);
	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	return m;
}

static uint64_t ino_of(struct manifest *m, const char *path)
{
	struct sfs_attr a;
	uint64_t ino = SFS_ROOT_INO;
	char tmp[256], *save = NULL;

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *c = strtok_r(tmp, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		assert_int_equal(manifest_lookup(m, ino, c, &a), 0);
		ino = a.ino;
	}
	return ino;
}

static void test_round_trip(void **state)
{
	struct manifest *m = open_packed();
	struct manifest_pack pk;
	struct manifest_member mb;
	struct sfs_attr a;
	struct sfs_id id, want, p0 = fake_id(100);
	uint32_t pack, off;
	static const struct { const char *path; uint32_t pack, off; uint64_t size, seed; } f[] = {
		{ "d/a", 0, 0, 3000, 1 }, { "d/b", 0, 4096, 5000, 2 },
		{ "d/c", 1, 0, 100, 3 }, { "e", 0, 20000, 700, 5 },
	};

	(void)state;
	assert_int_equal(manifest_npacks(m), 2);
	for (size_t i = 0; i < ARRAY_SIZE(f); i++) {
		uint64_t ino = ino_of(m, f[i].path);

		assert_int_equal(manifest_file_pack(m, ino, &pack, &off, NULL), 0);
		assert_int_equal(pack, f[i].pack);
		assert_int_equal(off, f[i].off);
		/* its one chunk id is its own bytes' hash; content as unpacked */
		assert_int_equal(manifest_nchunks(m, ino), 1);
		assert_int_equal(manifest_chunk(m, ino, 0, &id), 0);
		want = fake_id(f[i].seed);
		assert_true(sfs_id_eq(&id, &want));
		assert_int_equal(manifest_getattr(m, ino, &a), 0);
		assert_int_equal(a.size, f[i].size);
		manifest_content_id(f[i].size, &want, 1, &want);
		assert_true(sfs_id_eq(&a.content, &want));
	}
	/* the hard link reads its file's place */
	assert_int_equal(manifest_file_pack(m, ino_of(m, "d/link"), &pack, &off, NULL), 0);
	assert_int_equal(off, 4096);
	/* not packed, not a file */
	assert_int_equal(manifest_file_pack(m, ino_of(m, "big"), &pack, &off, NULL), -ENODATA);
	assert_int_equal(manifest_file_pack(m, ino_of(m, "empty"), &pack, &off, NULL), -ENODATA);
	assert_int_equal(manifest_file_pack(m, ino_of(m, "d"), &pack, &off, NULL), -EINVAL);
	/* and the pack's record with it */
	assert_int_equal(manifest_file_pack(m, ino_of(m, "e"), &pack, &off, &pk), 0);
	assert_true(sfs_id_eq(&pk.id, &p0));
	assert_int_equal(pk.size, 30000);

	assert_int_equal(manifest_pack(m, 0, &pk), 0);
	assert_true(sfs_id_eq(&pk.id, &p0));
	assert_int_equal(pk.size, 30000);
	assert_int_equal(pk.nmembers, 3);	/* a, b (once, not its link), e */
	{
		static const uint32_t offs[] = { 0, 4096, 20000 };
		static const char *const paths[] = { "d/a", "d/b", "e" };

		for (uint32_t j = 0; j < 3; j++) {
			assert_int_equal(manifest_pack_member(m, 0, j, &mb), 0);
			assert_int_equal(mb.off, offs[j]);
			assert_int_equal(mb.ino, manifest_getattr(m, ino_of(m, paths[j]), &a) ? 0 : a.ino);
			assert_true(sfs_id_eq(&mb.content, &a.content));
			assert_int_equal(mb.size, a.size);
		}
	}
	assert_int_equal(manifest_pack_member(m, 0, 3, &mb), -ENOENT);
	assert_int_equal(manifest_pack(m, 1, &pk), 0);
	assert_int_equal(pk.nmembers, 1);
	assert_int_equal(manifest_pack(m, 2, &pk), -ENOENT);
	assert_int_equal(manifest_verify(m, NULL), 0);
	manifest_close(m);
}

/*
 * Publish walks x/a, x/b (a name of x/a), then flushes the pack: the link
 * reaches the builder before its file, and resolves at finish.  Pack 1
 * is an earlier version's, of which only the member at 9000 is kept.
 */
static void test_publish_order(void **state)
{
	struct manifest_builder *b = manifest_builder_create(CHUNK);
	struct sfs_attr dir = mkattr(S_IFDIR | 0755, 0), fa = mkattr(S_IFREG | 0644, 2000);
	struct sfs_attr fc = mkattr(S_IFREG | 0644, 300), ga, gb;
	struct sfs_id pid = fake_id(200), old = fake_id(201), ida = fake_id(7), idc = fake_id(8);
	struct manifest_member mb;
	struct manifest_pack pk;
	struct manifest *m;
	uint32_t i0, i1, pack, off;
	char err[200];
	void *buf;
	size_t len;

	(void)state;
	assert_non_null(b);
	assert_int_equal(manifest_builder_add(b, "x", &dir, NULL, NULL, 0), 0);
	assert_int_equal(manifest_builder_link(b, "x/b", "x/a"), 0);
	assert_int_equal(manifest_builder_add_pack(b, &pid, 2000, &i0), 0);
	assert_int_equal(manifest_builder_add_packed(b, "x/a", &fa, &ida, i0, 0), 0);
	assert_int_equal(manifest_builder_add_pack(b, &old, 40000, &i1), 0);
	assert_int_equal(manifest_builder_add_packed(b, "x/c", &fc, &idc, i1, 9000), 0);
	assert_int_equal(manifest_builder_finish(b, 2, &buf, &len), 0);
	manifest_builder_destroy(b);
	assert_int_equal(manifest_open(buf, len, &m, err, sizeof(err)), 0);
	assert_int_equal(manifest_verify(m, NULL), 0);

	assert_int_equal(manifest_getattr(m, ino_of(m, "x/a"), &ga), 0);
	assert_int_equal(manifest_getattr(m, ino_of(m, "x/b"), &gb), 0);
	assert_int_equal(ga.ino, gb.ino);
	assert_int_equal(gb.nlink, 2);
	assert_true(sfs_id_eq(&ga.content, &gb.content));
	assert_int_equal(manifest_file_pack(m, ino_of(m, "x/b"), &pack, &off, NULL), 0);
	assert_int_equal(pack, i0);
	assert_int_equal(off, 0);
	assert_int_equal(manifest_pack(m, i0, &pk), 0);
	assert_int_equal(pk.nmembers, 1);	/* the file once, not its link */
	assert_int_equal(manifest_pack_member(m, i0, 0, &mb), 0);
	assert_int_equal(mb.ino, ga.ino);

	assert_int_equal(manifest_pack(m, i1, &pk), 0);
	assert_true(sfs_id_eq(&pk.id, &old));
	assert_int_equal(pk.size, 40000);
	assert_int_equal(pk.nmembers, 1);
	assert_int_equal(manifest_pack_member(m, i1, 0, &mb), 0);
	assert_int_equal(mb.off, 9000);
	assert_int_equal(mb.size, 300);
	assert_true(sfs_id_eq(&mb.chunk, &idc));
	manifest_close(m);
}

static void test_builder_errors(void **state)
{
	struct manifest_builder *b = manifest_builder_create(CHUNK);
	struct sfs_id p = fake_id(9), id = fake_id(10);
	struct sfs_attr f = { .mode = S_IFREG | 0644, .size = 100 };
	struct sfs_attr d = { .mode = S_IFDIR | 0755 };
	uint32_t i;

	(void)state;
	assert_int_equal(manifest_builder_add_pack(b, &p, 0, &i), -EINVAL);
	assert_int_equal(manifest_builder_add_pack(b, &p, CHUNK + 1, &i), -EINVAL);
	assert_int_equal(manifest_builder_add_packed(b, "x", &f, &id, 0, 0), -EINVAL);	/* no pack yet */
	assert_int_equal(manifest_builder_add_pack(b, &p, 1000, &i), 0);
	assert_int_equal(manifest_builder_add_packed(b, "x", &f, &id, 1, 0), -EINVAL);	/* no pack 1 */
	assert_int_equal(manifest_builder_add_packed(b, "x", &f, &id, 0, 901), -EINVAL);	/* past its end */
	assert_int_equal(manifest_builder_add_packed(b, "x", &d, &id, 0, 0), -EINVAL);	/* a directory */
	f.size = 0;
	assert_int_equal(manifest_builder_add_packed(b, "x", &f, &id, 0, 0), -EINVAL);	/* empty */
	f.size = 900;
	assert_int_equal(manifest_builder_add_packed(b, "x", &f, &id, 0, 100), 0);
	assert_int_equal(manifest_builder_add_packed(b, "x", &f, &id, 0, 100), -EEXIST);
	manifest_builder_destroy(b);
}

/* The manifest of build_packed() with @patch applied and every checksum redone. */
static struct manifest *open_patched(void (*patch)(uint8_t *b, size_t len, struct manifest *m),
				     int want_open)
{
	struct manifest *m, *ref = open_packed();
	void *buf;
	size_t len;
	char err[200];
	int rc;

	build_packed(&buf, &len);
	patch(buf, len, ref);
	manifest_close(ref);
	manifest_reseal(buf, len);
	rc = manifest_open(buf, len, &m, err, sizeof(err));
	assert_int_equal(rc, want_open);
	if (rc) {
		print_message("refused: %s\n", err);
		free(buf);
		return NULL;
	}
	return m;
}

static uint8_t *pack_rec(uint8_t *b, uint32_t i)
{
	return b + ld64(b + H2_PACK_OFF) + (uint64_t)i * MF_PACK_SIZE;
}

static uint8_t *member_rec(uint8_t *b, uint32_t j)
{
	return b + ld64(b + H2_MEM_OFF) + (uint64_t)j * MF_MEMBER_SIZE;
}

static uint8_t *entry_rec(uint8_t *b, uint64_t ino)
{
	uint32_t es = ld32(b + H_ENTSIZE);
	uint64_t per = mf2_per_part(es, ld32(b + H2_PARTSHIFT)), i = ino - 1;

	return b + ld64(b + H2_ENT_OFF) + ((i / per) << ld32(b + H2_PARTSHIFT)) + (i % per) * es;
}

/* member 0 of pack 0 names d/c (a file of pack 1) */
static void patch_member_other(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len;
	st32(member_rec(b, 0) + M_ENTRY, (uint32_t)(ino_of(ref, "d/c") - 1));
}

/* member 0 of pack 0 names the big, unpacked file */
static void patch_member_unpacked(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len;
	st32(member_rec(b, 0) + M_ENTRY, (uint32_t)(ino_of(ref, "big") - 1));
}

/* member 1 of pack 0 names the hard link d/link instead of d/b */
static void patch_member_link(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len;
	/* lookup answers with the inode's entry: d/link's own is d/a's + 3 (a b c link) */
	st32(member_rec(b, 1) + M_ENTRY, (uint32_t)(ino_of(ref, "d/a") - 1 + 3));
}

/* pack 0 grows past a chunk */
static void patch_pack_big(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len, (void)ref;
	st64(pack_rec(b, 0) + P_SIZE, CHUNK + 1);
}

/* pack 1's member run runs past the member table */
static void patch_pack_run(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len, (void)ref;
	st32(pack_rec(b, 1) + P_COUNT, 2);
}

/* e lies past its pack's end (its member record moved with it) */
static void patch_entry_outside(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len;
	st32(entry_rec(b, ino_of(ref, "e")) + E_PACK_OFF, 29500);
	st32(member_rec(b, 2) + M_OFF, 29500);
}

/* d/a's content id is big's: a pack fill must not write big's cache entry */
static void patch_content(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len;
	memcpy(entry_rec(b, ino_of(ref, "d/a")) + E_CONTENT,
	       entry_rec(b, ino_of(ref, "big")) + E_CONTENT, MF_ID_SIZE);
}

/* e claims pack 3 of 2 */
static void patch_entry_pack(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len;
	st32(entry_rec(b, ino_of(ref, "e")) + E_PACK, 3);
}

/* an unknown incompat bit: a reader that does not know it refuses */
static void patch_incompat(uint8_t *b, size_t len, struct manifest *ref)
{
	(void)len, (void)ref;
	st32(b + H_INCOMPAT, MF_INCOMPAT_PACKS | (1u << 5));
}

static void test_hostile(void **state)
{
	struct manifest *m;
	struct manifest_member mb;
	struct manifest_pack pk;
	uint32_t pack, off;

	(void)state;
	log_level = LOG_CRIT;
	m = open_patched(patch_member_other, 0);
	assert_int_equal(manifest_pack_member(m, 0, 0, &mb), -EIO);
	assert_int_equal(manifest_pack_member(m, 0, 1, &mb), 0);	/* the rest is served */
	manifest_close(m);

	m = open_patched(patch_member_unpacked, 0);
	assert_int_equal(manifest_pack_member(m, 0, 0, &mb), -EIO);
	manifest_close(m);

	m = open_patched(patch_member_link, 0);
	assert_int_equal(manifest_pack_member(m, 0, 1, &mb), -EIO);
	manifest_close(m);

	m = open_patched(patch_pack_big, 0);
	assert_int_equal(manifest_pack(m, 0, &pk), -EIO);
	assert_int_equal(manifest_pack_member(m, 0, 0, &mb), -EIO);
	assert_int_equal(manifest_file_pack(m, ino_of(m, "d/a"), &pack, &off, NULL), -EIO);
	assert_int_equal(manifest_pack(m, 1, &pk), 0);
	manifest_close(m);

	m = open_patched(patch_pack_run, 0);
	assert_int_equal(manifest_pack(m, 1, &pk), -EIO);
	manifest_close(m);

	m = open_patched(patch_entry_outside, 0);
	assert_int_equal(manifest_file_pack(m, ino_of(m, "e"), &pack, &off, NULL), -EIO);
	assert_int_equal(manifest_pack_member(m, 0, 2, &mb), -EIO);
	manifest_close(m);

	m = open_patched(patch_content, 0);
	assert_int_equal(manifest_pack_member(m, 0, 0, &mb), -EIO);
	manifest_close(m);

	m = open_patched(patch_entry_pack, 0);
	{
		struct sfs_attr a;

		assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "e", &a), -EIO);
	}
	manifest_close(m);

	assert_null(open_patched(patch_incompat, -EINVAL));
	log_level = LOG_NOTICE;
}

static void walk_packs(struct manifest *m)
{
	uint32_t np = manifest_npacks(m), pack, off;

	for (uint32_t p = 0; p < np && p < 8; p++) {
		struct manifest_pack pk;
		struct manifest_member mb;

		(void)manifest_pack(m, p, &pk);
		for (uint32_t j = 0; j < 6; j++)
			(void)manifest_pack_member(m, p, j, &mb);
	}
	for (uint64_t ino = 1; ino <= manifest_nentries(m) + 1; ino++) {
		struct sfs_attr a;
		struct sfs_dirlist dl;
		struct sfs_id id;

		(void)manifest_getattr(m, ino, &a);
		(void)manifest_file_pack(m, ino, &pack, &off, NULL);
		(void)manifest_chunk(m, ino, 0, &id);
		if (manifest_readdir(m, ino, &dl) == 0)
			sfs_dirlist_release(&dl);
	}
}

static void test_fuzz(void **state)
{
	void *buf;
	size_t len;
	unsigned seed = 2718;
	uint64_t lo;
	int opened = 0;

	(void)state;
	build_packed(&buf, &len);
	lo = ld64((uint8_t *)buf + H2_PACK_OFF);
	log_level = LOG_CRIT;
	for (int it = 0; it < 20000; it++) {
		uint8_t *copy = malloc(len);
		struct manifest *m;
		int flips = 1 + rand_r(&seed) % 4;

		memcpy(copy, buf, len);
		for (int f = 0; f < flips; f++) {
			size_t at = (size_t)rand_r(&seed) % len;

			/* half of them in the header, the pack and the member tables */
			if (rand_r(&seed) % 2)
				at = rand_r(&seed) % 3 ? lo + at % (len - lo) : at % MF2_HEADER_SIZE;
			copy[at] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
		}
		if (it % 4 != 0)
			manifest_reseal(copy, len);
		if (manifest_open(copy, len, &m, NULL, 0) == 0) {
			opened++;
			walk_packs(m);
			manifest_close(m);
		} else {
			free(copy);
		}
	}
	log_level = LOG_NOTICE;
	print_message("fuzz: %d of 20000 damaged packed manifests opened and were walked\n",
		      opened);
	assert_true(opened > 1000);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_publish_order),
		cmocka_unit_test(test_builder_errors),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_fuzz),
	};

	/* 0 pass, 1 fail: the runner's convention, not cmocka's failure count */
	return cmocka_run_group_tests_name("manifest_packs", tests, NULL, NULL) ? 1 : 0;
}
