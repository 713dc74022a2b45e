/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rados: object names of the pool layout: built names parse back to
 * what built them, and every near miss (uppercase hex, leading zeros, a bad
 * dataset name, version 0, trailing bytes) is "not ours", so gc never
 * removes it.  No cluster needed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "backend/rados.h"
#include "util.h"

static void test_round_trip(void **state)
{
	struct sfs_rados_oid o;
	struct sfs_id id = { 0x0123456789abcdefULL, 0xfedcba9876543210ULL };
	char oid[SFS_RADOS_OID_MAX];

	sfs_rados_chunk_oid(&id, oid);
	assert_string_equal(oid, "sfs.chunk.0123456789abcdeffedcba9876543210");
	assert_int_equal(sfs_rados_oid_parse(oid, &o), SFS_RADOS_CHUNK);
	assert_true(sfs_id_eq(&o.id, &id));

	sfs_rados_pack_oid(&id, oid);
	assert_string_equal(oid, "sfs.pack.0123456789abcdeffedcba9876543210");
	assert_int_equal(sfs_rados_oid_parse(oid, &o), SFS_RADOS_PACK);
	assert_true(sfs_id_eq(&o.id, &id));

	sfs_rados_manifest_oid("img-net_1", 12, oid);
	assert_int_equal(sfs_rados_oid_parse(oid, &o), SFS_RADOS_MANIFEST);
	assert_string_equal(o.name, "img-net_1");
	assert_int_equal(o.version, 12);
	assert_int_equal(o.part, -1);

	sfs_rados_part_oid("x", 3, 0, oid);
	assert_string_equal(oid, "sfs.manifest.x.3.0");
	assert_int_equal(sfs_rados_oid_parse(oid, &o), SFS_RADOS_MANIFEST);
	assert_string_equal(o.name, "x");
	assert_int_equal(o.version, 3);
	assert_int_equal(o.part, 0);
	sfs_rados_part_oid("x", 3, 44, oid);
	assert_int_equal(sfs_rados_oid_parse(oid, &o), SFS_RADOS_MANIFEST);
	assert_int_equal(o.part, 44);

	sfs_rados_dataset_oid("ds", oid);
	assert_int_equal(sfs_rados_oid_parse(oid, &o), SFS_RADOS_DATASET);
	assert_string_equal(o.name, "ds");
}

static void test_not_ours(void **state)
{
	static const char *const other[] = {
		"", "sfs", "sfs.chunk.", "sfs.chunk.0123",
		"sfs.chunk.0123456789ABCDEFfedcba9876543210",	/* uppercase */
		"sfs.chunk.0123456789abcdeffedcba98765432100",	/* 33 digits */
		"sfs.chunk.0123456789abcdeffedcba987654321g",
		"sfs.pack.", "sfs.pack.0123",
		"sfs.pack.0123456789ABCDEFfedcba9876543210",	/* uppercase */
		"sfs.pack.0123456789abcdeffedcba98765432100",	/* 33 digits */
		"sfs.packs.0123456789abcdeffedcba9876543210",
		"sfs.manifest.", "sfs.manifest.x", "sfs.manifest.x.",
		"sfs.manifest.x.0", "sfs.manifest.x.01", "sfs.manifest.x.1.",
		"sfs.manifest.x.1.01", "sfs.manifest.x.1.2.3", "sfs.manifest.x.1x",
		"sfs.manifest.a b.1", "sfs.manifest..1", "sfs.manifest.x.-1",
		"sfs.manifest.x.99999999999999999999999",
		"sfs.dataset.", "sfs.dataset.a.b", "sfs.dataset.a/b",
		"x/sfs.chunk.0123456789abcdeffedcba9876543210", "images/0001.jpg",
		"x/sfs.pack.0123456789abcdeffedcba9876543210",
	};
	struct sfs_rados_oid o;
	char longname[SFS_RADOS_OID_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(other); i++) {
		if (sfs_rados_oid_parse(other[i], &o) != SFS_RADOS_OTHER)
			fail_msg("'%s' parsed as a stagefs object", other[i]);
		assert_int_equal(o.kind, SFS_RADOS_OTHER);
	}
	/* a dataset name one byte too long */
	memset(longname, 0, sizeof(longname));
	strcpy(longname, "sfs.dataset.");
	memset(longname + strlen(longname), 'n', SFS_RADOS_NAME_MAX + 1);
	assert_int_equal(sfs_rados_oid_parse(longname, &o), SFS_RADOS_OTHER);
	longname[strlen(longname) - 1] = '\0';
	assert_int_equal(sfs_rados_oid_parse(longname, &o), SFS_RADOS_DATASET);
}

/* One grammar for the mount, publish and gc (sfs_rados_uri_parse). */
static void test_uri(void **state)
{
	struct sfs_rados_uri u;
	char err[256];

	(void)state;
	assert_int_equal(sfs_rados_uri_parse("rados://pool/imagenet@3?conf=/x.conf&id=bob&keyring=/k&timeout=5s&ns=vision",
					     &u, err, sizeof(err)), 0);
	assert_string_equal(u.pool, "pool");
	assert_string_equal(u.name, "imagenet");
	assert_int_equal(u.version, 3);
	assert_false(u.plain);
	assert_string_equal(u.ns, "vision");
	assert_string_equal(u.conf, "/x.conf");
	assert_string_equal(u.id, "bob");
	assert_string_equal(u.keyring, "/k");
	assert_int_equal(u.timeout_ms, 5000);
	{
		struct sfs_rados_opts o = { .conf = "/etc/ceph/ceph.conf", .timeout_ms = 30000 };

		sfs_rados_uri_opts(&u, &o);
		assert_string_equal(o.conf, "/x.conf");
		assert_string_equal(o.client_id, "bob");
		assert_int_equal(o.timeout_ms, 5000);
	}
	sfs_rados_uri_release(&u);

	/* a pool alone (gc), and the plain mode's namespace */
	assert_int_equal(sfs_rados_uri_parse("rados://pool", &u, err, sizeof(err)), 0);
	assert_null(u.path);
	assert_null(u.name);
	sfs_rados_uri_release(&u);
	assert_int_equal(sfs_rados_uri_parse("rados://pool/objs/a?plain&chunk_size=1M", &u, err, sizeof(err)), 0);
	assert_true(u.plain);
	assert_string_equal(u.ns, "objs/a");
	assert_int_equal(u.chunk_size, 1 << 20);
	sfs_rados_uri_release(&u);

	/* refused, saying why */
	static const char *const bad[] = {
		"rados:///name", "file://pool/x", "rados://pool/x@0", "rados://pool/x@-1",
		"rados://pool/x@3y", "rados://pool/bad name", "rados://pool/x?what=1",
		"rados://pool/x?timeout=0", "rados://pool/x?chunk_size=3000",
		"rados://pool/ns?plain&ns=other",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(sfs_rados_uri_parse(bad[i], &u, err, sizeof(err)), -EINVAL);
		assert_true(err[0] != '\0');
		sfs_rados_uri_release(&u);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_not_ours),
		cmocka_unit_test(test_uri),
	};

	return cmocka_run_group_tests_name("rados", tests, NULL, NULL) ? 1 : 0;
}
