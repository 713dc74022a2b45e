/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safepath: see safepath.h.
 */
#include "safepath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* "uid 1001 (alice)", or "uid 1001" where the name is not known */
static void owner_str(uid_t uid, char *buf, size_t len)
{
	struct passwd pw, *res = NULL;
	char tmp[1024];

	if (!getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) && res)
		snprintf(buf, len, "uid %u (%s)", (unsigned)uid, res->pw_name);
	else
		snprintf(buf, len, "uid %u", (unsigned)uid);
}

/*
 * May the daemon trust component @shown, whose lstat is @st?  @last: it is
 * the directory asked about (no sticky allowance; must be a directory
 * unless it is a link, which the resolved walk follows).
 */
static int component_ok(const char *shown, const struct stat *st, bool last,
			char *err, size_t errlen)
{
	uid_t me = geteuid();
	bool owner_ok = st->st_uid == 0 || st->st_uid == me;
	mode_t mode = st->st_mode & 07777;
	char who[128], trusted[64] = "root";

	if (me != 0)
		snprintf(trusted, sizeof(trusted), "root or uid %u (the daemon's)", (unsigned)me);

	if (S_ISLNK(st->st_mode)) {
		if (owner_ok)
			return 0;
		owner_str(st->st_uid, who, sizeof(who));
		snprintf(err, errlen, "%s is a symbolic link owned by %s: the daemon follows "
			 "links owned by %s only", shown, who, trusted);
		return -EPERM;
	}
	if (!S_ISDIR(st->st_mode)) {
		snprintf(err, errlen, "%s is not a directory", shown);
		return -ENOTDIR;
	}
	if (owner_ok && (!(mode & 022) || (!last && (mode & S_ISVTX))))
		return 0;
	owner_str(st->st_uid, who, sizeof(who));
	snprintf(err, errlen, "%s is owned by %s, mode %04o: a directory the daemon trusts "
		 "(and each one above it) must be owned by %s and writable by "
		 "nobody else%s", shown, who, (unsigned)mode, trusted,
		 last ? "" : " (or sticky, as /tmp is)");
	return -EPERM;
}

/* @path made absolute (against the working directory) into @buf. */
static int absolute(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
	char cwd[PATH_MAX];
	int n;

	if (!path[0]) {
		snprintf(err, errlen, "empty path");
		return -ENOENT;
	}
	if (path[0] == '/')
		n = snprintf(buf, len, "%s", path);
	else if (!getcwd(cwd, sizeof(cwd)))
		n = -1;
	else
		n = snprintf(buf, len, "%s/%s", cwd, path);
	if (n < 0 || (size_t)n >= len) {
		snprintf(err, errlen, "%s: %s", path, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	/* trailing slashes name the same directory */
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	return 0;
}

/*
 * lstat and judge each component of absolute @abs, from "/" down.  With
 * @create, a missing component is made (mode @mode) and judged after; a
 * link on the way is resolved and checked whole before anything is
 * created beyond it.
 */
static int walk(char *abs, bool create, mode_t mode, char *err, size_t errlen);

static int check_resolved(const char *abs, char *err, size_t errlen)
{
	char real[PATH_MAX];
	struct stat st;
	int ret;

	if (!realpath(abs, real)) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", abs, strerror(-ret));
		return ret;
	}
	ret = walk(real, false, 0, err, errlen);
	if (ret)
		return ret;
	/* the walk let a link through as the last component: not after realpath */
	if (lstat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s is not a directory", real);
		return -ENOTDIR;
	}
	return 0;
}

static int walk(char *abs, bool create, mode_t mode, char *err, size_t errlen)
{
	size_t len = strlen(abs);
	struct stat st;
	int ret;

	/* the components below "/" (walk_all() judged the root) */
	for (size_t i = 1; i <= len; i++) {
		char save;
		bool last;

		if (i < len && abs[i] != '/')
			continue;
		if (abs[i - 1] == '/')
			continue;	/* "//": an empty component */
		save = abs[i];
		abs[i] = '\0';
		last = i >= len;
		if (lstat(abs, &st) < 0 && create && errno == ENOENT) {
			if (mkdir(abs, mode) < 0 && errno != EEXIST) {
				ret = -errno;
				snprintf(err, errlen, "cannot create %s: %s", abs, strerror(-ret));
				abs[i] = save;
				return ret;
			}
		}
		if (lstat(abs, &st) < 0) {
			ret = -errno;
			snprintf(err, errlen, "%s: %s", abs, strerror(-ret));
			abs[i] = save;
			return ret;
		}
		ret = component_ok(abs, &st, last, err, errlen);
		if (!ret && create && !last && S_ISLNK(st.st_mode))
			ret = check_resolved(abs, err, errlen);
		abs[i] = save;
		if (ret)
			return ret;
	}
	return 0;
}

/* The root first (walk() starts below it), then the components. */
static int walk_all(char *abs, bool create, mode_t mode, char *err, size_t errlen)
{
	struct stat st;
	int ret;

	if (lstat("/", &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "/: %s", strerror(-ret));
		return ret;
	}
	ret = component_ok("/", &st, !strcmp(abs, "/"), err, errlen);
	if (ret || !strcmp(abs, "/"))
		return ret;
	return walk(abs, create, mode, err, errlen);
}

int safepath_check_dir(const char *path, char *err, size_t errlen)
{
	char abs[PATH_MAX];
	int ret;

	ret = absolute(path, abs, sizeof(abs), err, errlen);
	if (!ret)
		ret = walk_all(abs, false, 0, err, errlen);
	if (!ret)
		ret = check_resolved(abs, err, errlen);
	return ret;
}

int safepath_mkdir(const char *path, mode_t mode, char *err, size_t errlen)
{
	char abs[PATH_MAX];
	int ret;

	ret = absolute(path, abs, sizeof(abs), err, errlen);
	if (!ret)
		ret = walk_all(abs, true, mode, err, errlen);
	if (!ret)
		ret = check_resolved(abs, err, errlen);
	return ret;
}

int safepath_open_dir(const char *path, char *err, size_t errlen)
{
	struct stat st;
	int fd, ret;

	ret = safepath_check_dir(path, err, errlen);
	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-ret));
		return ret;
	}
	/* what was opened, judged once more: the checks above went by name */
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-ret));
	} else {
		ret = component_ok(path, &st, true, err, errlen);
	}
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

const char *safepath_split(const char *path, char *dir, size_t dirlen)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t n;

	if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
		return NULL;
	if (!slash) {
		if (dirlen < 2)
			return NULL;
		strcpy(dir, ".");
		return base;
	}
	n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= dirlen)
		return NULL;
	memcpy(dir, path, n);
	dir[n] = '\0';
	return base;
}

/* A fresh name for a temporary file beside @base (NAME_MAX-safe). */
static void tmp_name(const char *base, char *buf, size_t len)
{
	uint64_t r = 0;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&r ^ (uint64_t)time(NULL);
	if (strlen(base) > 200)
		base = "stagefs";
	snprintf(buf, len, ".%s.%016llx.tmp", base, (unsigned long long)r);
}

int safepath_write_file(const char *path, const void *buf, size_t len, mode_t mode,
			gid_t gid, char *err, size_t errlen)
{
	char dir[PATH_MAX], tmp[NAME_MAX + 1];
	const char *base = safepath_split(path, dir, sizeof(dir));
	int dfd, fd = -1, ret = 0;
	size_t done = 0;

	if (!base) {
		snprintf(err, errlen, "%s: names no file", path);
		return -EINVAL;
	}
	dfd = safepath_open_dir(dir, err, errlen);
	if (dfd < 0)
		return dfd;
	for (int tries = 0; fd < 0 && tries < 8; tries++) {
		tmp_name(base, tmp, sizeof(tmp));
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s/%s: %s", dir, tmp, strerror(-ret));
		close(dfd);
		return ret;
	}
	/* the group before the mode: never a moment readable by the old group */
	if (gid != (gid_t)-1 && fchown(fd, (uid_t)-1, gid) < 0)
		ret = -errno;
	else if (fchmod(fd, mode) < 0)
		ret = -errno;
	while (!ret && done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			ret = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	if (close(fd) < 0 && !ret)
		ret = -errno;
	if (!ret && renameat(dfd, tmp, dfd, base) < 0)
		ret = -errno;
	if (ret) {
		snprintf(err, errlen, "%s: %s", path, strerror(-ret));
		unlinkat(dfd, tmp, 0);
	}
	close(dfd);
	return ret;
}

int safepath_unlink(const char *path, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	const char *base = safepath_split(path, dir, sizeof(dir));
	int dfd, ret = 0;

	if (!base) {
		snprintf(err, errlen, "%s: names no file", path);
		return -EINVAL;
	}
	dfd = safepath_open_dir(dir, err, errlen);
	if (dfd < 0)
		return dfd == -ENOENT ? 0 : dfd;
	if (unlinkat(dfd, base, 0) < 0 && errno != ENOENT) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-ret));
	}
	close(dfd);
	return ret;
}
