/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stagefs-quota: `stagefs quota [--json] MOUNTPOINT` shows how much of the
 * node's cache each user holds, against their quota.
 *
 * It reads MOUNTPOINT/.stagefs/quota (one tab-separated line per user,
 * rendered by the daemon when the file is opened), so it needs no socket and
 * works for any user who can see the mount.  The daemon renders it for the
 * reader: root gets every user's line, anyone else their own.
 */
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: stagefs quota [--json] MOUNTPOINT\n"
		   "Show each user's share of the node cache behind MOUNTPOINT.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool json = false, first = true;
	char path[4096], line[1024];
	FILE *f;
	int c;

	while ((c = getopt_long(argc, argv, "jh", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 1) {
		usage(stderr);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/.stagefs/quota", argv[optind]);
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "stagefs quota: %s: %s (is %s a stagefs mount?)\n",
			path, strerror(errno), argv[optind]);
		return 1;
	}
	if (json)
		printf("{\"users\": [");
	else
		printf("%-8s %-16s %12s %12s %6s %10s\n", "UID", "USER", "USED", "QUOTA",
		       "USE%", "CHUNKS");
	while (fgets(line, sizeof(line), f)) {
		unsigned uid;
		char user[256], used_s[32], limit_s[32], chunks_s[32];
		unsigned long long used, limit = 0, chunks;
		bool unlimited;
		char a[32], b[32];

		if (line[0] == '#')
			continue;
		if (sscanf(line, "%u\t%255s\t%31s\t%31s\t%31s", &uid, user, used_s,
			   limit_s, chunks_s) != 5)
			continue;
		used = strtoull(used_s, NULL, 10);
		chunks = strtoull(chunks_s, NULL, 10);
		unlimited = !strcmp(limit_s, "none");
		if (!unlimited)
			limit = strtoull(limit_s, NULL, 10);
		if (json) {
			printf("%s\n  {\"uid\": %u, \"user\": \"%s\", \"used_bytes\": %llu, "
			       "\"limit_bytes\": %s%s, \"chunks\": %llu}",
			       first ? "" : ",", uid, user, used,
			       unlimited ? "null" : limit_s, "", chunks);
		} else {
			char pct[16] = "-";

			if (!unlimited && limit)
				snprintf(pct, sizeof(pct), "%.1f", 100.0 * (double)used / (double)limit);
			printf("%-8u %-16s %12s %12s %6s %10llu\n", uid, user,
			       fmt_size(used, a, sizeof(a)),
			       unlimited ? "none" : fmt_size(limit, b, sizeof(b)), pct, chunks);
		}
		first = false;
	}
	if (json)
		printf("%s]}\n", first ? "" : "\n");
	fclose(f);
	return 0;
}
