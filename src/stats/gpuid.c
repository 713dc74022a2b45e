/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuid: see gpuid.h.
 */
#include "gpuid.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NVIDIA_VENDOR	0x10de

int gpuid_normalize(const char *bus_id, char out[GPUID_BUS_LEN])
{
	unsigned dom, bus, dev, fn;
	int used = 0;

	/* scanf's %x would also take "0x" prefixes and signs */
	if (strspn(bus_id, "0123456789abcdefABCDEF:.") != strlen(bus_id))
		return -EINVAL;
	if (sscanf(bus_id, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &used) != 4 ||
	    bus_id[used] || dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
		return -EINVAL;
	snprintf(out, GPUID_BUS_LEN, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return 0;
}

/* The number in sysfs file @dir/@name ("0x10de\n"), or -1. */
static long read_hex(const char *sysfs, const char *dev, const char *name)
{
	char path[PATH_MAX], buf[32];
	FILE *f;
	long v = -1;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s/%s", sysfs, dev, name) >= sizeof(path))
		return -1;
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f))
		v = strtol(buf, NULL, 16);
	fclose(f);
	return v;
}

/* An NVIDIA display controller bound to the nvidia driver (NVML sees it). */
static bool is_nvidia_gpu(const char *sysfs, const char *dev)
{
	char path[PATH_MAX], link[PATH_MAX];
	const char *drv;
	ssize_t n;

	if (read_hex(sysfs, dev, "vendor") != NVIDIA_VENDOR ||
	    (read_hex(sysfs, dev, "class") >> 16) != 0x03)
		return false;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s/driver", sysfs, dev) >= sizeof(path))
		return false;
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = '\0';
	drv = strrchr(link, '/');
	return !strcmp(drv ? drv + 1 : link, "nvidia");
}

int gpuid_index(const char *sysfs, const char *bus_id)
{
	char want[GPUID_BUS_LEN], name[GPUID_BUS_LEN];
	struct dirent *e;
	bool found = false;
	int before = 0, ret;
	DIR *d;

	ret = gpuid_normalize(bus_id, want);
	if (ret)
		return ret;
	d = opendir(sysfs);
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		int c;

		/* sysfs names are already normal; anything else is no device */
		if (gpuid_normalize(e->d_name, name) || strcmp(name, e->d_name))
			continue;
		c = strcmp(name, want);
		if (c > 0 || !is_nvidia_gpu(sysfs, name))
			continue;
		if (c == 0)
			found = true;
		else
			before++;
	}
	closedir(d);
	return found ? before : -ENOENT;
}
