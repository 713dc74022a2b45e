/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mountpoint: clearing a dead FUSE mount off the mount point at start.
 *
 * When a daemon dies (kill -9, a crash) its FUSE mount stays: the kernel
 * answers every request with ENOTCONN, but a stat() may still be served
 * from the attributes it cached, so mounting again "works" and stacks a
 * second mount on the dead one, which then needs its own unmount later.
 *
 * Here a dead mount is one that /proc/self/mountinfo shows as the topmost
 * mount on the mount point, of type fuse or fuse.*, and whose root answers
 * a statx() forced past the caches (AT_STATX_FORCE_SYNC) with ENOTCONN: the
 * kernel sends that GETATTR to no one once the daemon's /dev/fuse is
 * closed.  It is detached with umount2(MNT_DETACH) (root), else with
 * `fusermount3 -u -z` (an unprivileged mounter); processes still inside it
 * keep their ENOTCONN, new lookups see the directory beneath.  A live mount
 * (its daemon answers) and every other filesystem are never touched.
 */
#include "mountpoint.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define MAX_STACKED	16	/* dead mounts cleared at most, one on another */

extern char **environ;

/*
 * The filesystem type of the topmost mount on @mnt into @type ("" if
 * nothing is mounted there).  Returns 0 or -errno.
 */
static int top_mount_type(const char *mnt, char *type, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[8192];

	if (!f)
		return -errno;
	type[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		char path[PATH_MAX], fstype[256];
		const char *sep = strstr(line, " - ");

		if (sscanf(line, "%*u %*u %*u:%*u %*s %4095s", path) != 1 || !sep ||
		    sscanf(sep + 3, "%255s", fstype) != 1)
			continue;
		mountinfo_unescape(path);
		if (!strcmp(path, mnt))
			snprintf(type, len, "%s", fstype);	/* later lines: mounted later, on top */
	}
	fclose(f);
	return 0;
}

/* `fusermount3 -u -z @mnt`: 0 or -errno. */
static int fusermount_detach(const char *mnt)
{
	char *argv[] = { "fusermount3", "-u", "-z", (char *)mnt, NULL };
	pid_t pid;
	int st, ret;

	ret = posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ);
	if (ret)
		return -ret;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EPERM;
}

int mountpoint_clear_dead(const char *mnt, char *err, size_t errlen)
{
	char type[256];
	struct statx stx;
	int ret;

	for (int n = 0; n < MAX_STACKED; n++) {
		ret = top_mount_type(mnt, type, sizeof(type));
		if (ret) {
			snprintf(err, errlen, "/proc/self/mountinfo: %s", strerror(-ret));
			return ret;
		}
		if (strcmp(type, "fuse") && strncmp(type, "fuse.", 5))
			return 0;	/* nothing there, or not FUSE */
		if (statx(AT_FDCWD, mnt, AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, &stx) == 0 ||
		    errno != ENOTCONN)
			return 0;	/* alive (or failing otherwise): not ours to clear */
		log_notice("mount point %s: a dead %s mount is there (its daemon is gone: "
			   "ENOTCONN); detaching it (lazy unmount) before mounting", mnt, type);
		if (umount2(mnt, MNT_DETACH) < 0) {
			int e = errno;

			ret = fusermount_detach(mnt);
			if (ret) {
				snprintf(err, errlen, "%s: cannot detach the dead %s mount there: "
					 "%s (try fusermount3 -u -z %s)", mnt, type, strerror(e), mnt);
				return -e;
			}
		}
	}
	snprintf(err, errlen, "%s: more than %d dead mounts stacked there", mnt, MAX_STACKED);
	return -ELOOP;
}

int mountpoint_unmount(const char *mnt)
{
	if (umount2(mnt, MNT_DETACH) == 0)
		return 0;
	if (errno == EINVAL)
		return 0;	/* not mounted (any more) */
	return fusermount_detach(mnt);
}
