/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_gpuid: a GPU's node index from its PCI address, over a fake sysfs
 * tree: only NVIDIA display devices bound to the nvidia driver count, in
 * PCI address order, whatever case or domain width the address comes in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stats/gpuid.h"

static char root[PATH_MAX];

static void put(const char *dev, const char *file, const char *text)
{
	char p[PATH_MAX + 64];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", root, dev);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/%s/%s", root, dev, file);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void device(const char *dev, const char *vendor, const char *cls, const char *driver)
{
	char p[PATH_MAX + 64], t[128];

	put(dev, "vendor", vendor);
	put(dev, "class", cls);
	if (!driver)
		return;
	snprintf(p, sizeof(p), "%s/%s/driver", root, dev);
	snprintf(t, sizeof(t), "../../../bus/pci/drivers/%s", driver);
	assert_int_equal(symlink(t, p), 0);
}

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");

	(void)state;
	snprintf(root, sizeof(root), "%s/test_gpuid.XXXXXX", tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(root));
	device("0000:01:00.0", "0x10de\n", "0x030200\n", "nvidia");
	device("0000:02:00.0", "0x8086\n", "0x020000\n", "ixgbe");		/* a NIC */
	device("0000:3b:00.0", "0x10de\n", "0x030000\n", "nvidia");
	device("0000:3b:00.1", "0x10de\n", "0x040300\n", "snd_hda_intel");	/* its audio */
	device("0000:41:00.0", "0x10de\n", "0x030200\n", "vfio-pci");	/* given to a VM */
	device("0000:5e:00.0", "0x10de\n", "0x030200\n", NULL);		/* no driver */
	device("0001:1a:00.0", "0x10de\n", "0x030200\n", "nvidia");
	put("junk", "vendor", "0x10de\n");
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_normalize(void **state)
{
	char out[GPUID_BUS_LEN];

	(void)state;
	assert_int_equal(gpuid_normalize("0000:3B:00.0", out), 0);
	assert_string_equal(out, "0000:3b:00.0");
	assert_int_equal(gpuid_normalize("00000000:3B:00.0", out), 0);
	assert_string_equal(out, "0000:3b:00.0");
	assert_int_equal(gpuid_normalize("0000:3b:00.0x", out), -EINVAL);
	assert_int_equal(gpuid_normalize("3b:00.0", out), -EINVAL);
	assert_int_equal(gpuid_normalize("0000:3b:20.0", out), -EINVAL);
	assert_int_equal(gpuid_normalize("", out), -EINVAL);
}

static void test_index(void **state)
{
	(void)state;
	assert_int_equal(gpuid_index(root, "0000:01:00.0"), 0);
	assert_int_equal(gpuid_index(root, "0000:3B:00.0"), 1);
	assert_int_equal(gpuid_index(root, "00000001:1A:00.0"), 2);
	assert_int_equal(gpuid_index(root, "0000:41:00.0"), -ENOENT);	/* vfio */
	assert_int_equal(gpuid_index(root, "0000:5e:00.0"), -ENOENT);	/* unbound */
	assert_int_equal(gpuid_index(root, "0000:3b:00.1"), -ENOENT);	/* audio */
	assert_int_equal(gpuid_index(root, "0000:02:00.0"), -ENOENT);
	assert_int_equal(gpuid_index(root, "0000:99:00.0"), -ENOENT);
	assert_int_equal(gpuid_index(root, "GPU-1234"), -EINVAL);
	assert_int_equal(gpuid_index("/nonexistent/sysfs", "0000:01:00.0"), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalize),
		cmocka_unit_test(test_index),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
