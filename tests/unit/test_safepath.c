/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_safepath: which directories the daemon trusts (src/safepath.h):
 * its own and root's, not writable by others, sticky parents allowed;
 * refused, naming the component, its owner and mode: a directory others
 * may write (sticky or not), one under a parent others may write, one
 * another user owns, a link another user owns, a link leading under
 * another user's directory; safepath_mkdir() creates nothing under a
 * directory it does not trust; missing and non-directory paths;
 * safepath_write_file() follows no link planted at the temporary name or
 * at the file's name and writes nothing in a directory others may write.
 * The cases with another owner need root (chown); as another user they
 * are skipped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safepath.h"

#define OTHER	4321	/* a uid that is neither root nor us */

static char base[PATH_MAX];
static char err[1024];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int setup(void **state)
{
	const char *t = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/test_safepath.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(base))
		return -1;
	err[0] = '\0';
	return 0;
}

static int teardown(void **state)
{
	nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static const char *p(const char *rel)
{
	static char buf[4][PATH_MAX + 64];
	static int n;

	n = (n + 1) % 4;
	if (strlen(base) + strlen(rel) + 2 > sizeof(buf[n]))
		fail_msg("path too long");
	strcpy(buf[n], base);
	strcat(buf[n], "/");
	strcat(buf[n], rel);
	return buf[n];
}

static void mk(const char *rel, mode_t mode)
{
	assert_int_equal(mkdir(p(rel), 0700), 0);
	assert_int_equal(chmod(p(rel), mode), 0);
}

static bool root(void)
{
	if (geteuid() == 0)
		return true;
	print_message("not root: the other-owner cases are skipped\n");
	return false;
}

/* the error names @what */
static void says(const char *what)
{
	if (!strstr(err, what))
		fail_msg("message %s does not say %s", err, what);
}

static void test_own_dirs(void **state)
{
	int fd;

	assert_int_equal(safepath_check_dir(base, err, sizeof(err)), 0);
	mk("a", 0755);
	mk("a/b", 0700);
	assert_int_equal(safepath_check_dir(p("a/b"), err, sizeof(err)), 0);
	/* trailing slashes and "//" name the same directory */
	assert_int_equal(safepath_check_dir(p("a//b/"), err, sizeof(err)), 0);
	fd = safepath_open_dir(p("a/b"), err, sizeof(err));
	assert_true(fd >= 0);
	close(fd);
	/* a sticky directory others may write is fine above, not as the directory */
	mk("sticky", 01777);
	mk("sticky/mine", 0700);
	assert_int_equal(safepath_check_dir(p("sticky/mine"), err, sizeof(err)), 0);
	assert_int_equal(safepath_check_dir(p("sticky"), err, sizeof(err)), -EPERM);
	says(p("sticky"));
	says("mode 1777");
}

static void test_writable(void **state)
{
	int fd;

	mk("open", 0777);
	assert_int_equal(safepath_check_dir(p("open"), err, sizeof(err)), -EPERM);
	says(p("open"));
	says("mode 0777");
	fd = safepath_open_dir(p("open"), err, sizeof(err));
	assert_int_equal(fd, -EPERM);
	/* group-writable counts too */
	mk("grp", 0770);
	assert_int_equal(safepath_check_dir(p("grp"), err, sizeof(err)), -EPERM);
	/* a parent others may write (not sticky): everything below is theirs */
	mk("open/sub", 0700);
	assert_int_equal(safepath_check_dir(p("open/sub"), err, sizeof(err)), -EPERM);
	says(p("open"));
	says("or sticky");
}

static void test_other_owner(void **state)
{
	if (!root())
		return;
	mk("hers", 0700);
	assert_int_equal(chown(p("hers"), OTHER, OTHER), 0);
	assert_int_equal(safepath_check_dir(p("hers"), err, sizeof(err)), -EPERM);
	says(p("hers"));
	says("uid 4321");
	says("mode 0700");
	/* root's directory inside hers: she can rename it away */
	mk("hers/cache", 0700);
	assert_int_equal(safepath_check_dir(p("hers/cache"), err, sizeof(err)), -EPERM);
	says("uid 4321");
}

static void test_links(void **state)
{
	mk("real", 0700);
	assert_int_equal(symlink(p("real"), p("link")), 0);
	assert_int_equal(safepath_check_dir(p("link"), err, sizeof(err)), 0);
	mk("real/sub", 0700);
	assert_int_equal(safepath_check_dir(p("link/sub"), err, sizeof(err)), 0);
	/* a link to a directory others may write */
	mk("open", 0777);
	assert_int_equal(symlink(p("open"), p("toopen")), 0);
	assert_int_equal(safepath_check_dir(p("toopen"), err, sizeof(err)), -EPERM);
	says(p("open"));
	/* a dangling link */
	assert_int_equal(symlink(p("nothere"), p("dangling")), 0);
	assert_int_equal(safepath_check_dir(p("dangling"), err, sizeof(err)), -ENOENT);
	if (!root())
		return;
	/* her link, in a sticky directory as /tmp is, to a directory of root's */
	mk("sticky", 01777);
	assert_int_equal(symlink(p("real"), p("sticky/herlink")), 0);
	assert_int_equal(lchown(p("sticky/herlink"), OTHER, OTHER), 0);
	assert_int_equal(safepath_check_dir(p("sticky/herlink"), err, sizeof(err)), -EPERM);
	says(p("sticky/herlink"));
	says("symbolic link owned by uid 4321");
	/* root's link to under her directory */
	mk("hers", 0755);
	mk("hers/d", 0700);
	assert_int_equal(chown(p("hers"), OTHER, OTHER), 0);
	assert_int_equal(symlink(p("hers/d"), p("tohers")), 0);
	assert_int_equal(safepath_check_dir(p("tohers"), err, sizeof(err)), -EPERM);
	says(p("hers"));
	says("uid 4321");
}

static void test_mkdir(void **state)
{
	struct stat st;

	assert_int_equal(safepath_mkdir(p("x/y/z"), 0700, err, sizeof(err)), 0);
	assert_int_equal(stat(p("x/y/z"), &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	/* existing: fine again */
	assert_int_equal(safepath_mkdir(p("x/y/z"), 0700, err, sizeof(err)), 0);
	/* under a directory others may write: refused before creating anything */
	mk("open", 0777);
	assert_int_equal(safepath_mkdir(p("open/c/d"), 0700, err, sizeof(err)), -EPERM);
	says(p("open"));
	assert_int_equal(access(p("open/c"), F_OK), -1);
	/* through a link into it: nothing created there either */
	assert_int_equal(symlink(p("open"), p("toopen")), 0);
	assert_int_equal(safepath_mkdir(p("toopen/c/d"), 0700, err, sizeof(err)), -EPERM);
	assert_int_equal(access(p("open/c"), F_OK), -1);
	/* a file on the way */
	assert_int_equal(close(open(p("file"), O_CREAT | O_WRONLY, 0600)), 0);
	assert_int_equal(safepath_mkdir(p("file/d"), 0700, err, sizeof(err)), -ENOTDIR);
	assert_int_equal(safepath_check_dir(p("file"), err, sizeof(err)), -ENOTDIR);
	says("not a directory");
	assert_int_equal(safepath_check_dir(p("missing"), err, sizeof(err)), -ENOENT);
	says(p("missing"));
	if (!root())
		return;
	/* the existing directory is hers: refused, not taken over */
	mk("hers", 0700);
	assert_int_equal(chown(p("hers"), OTHER, OTHER), 0);
	assert_int_equal(safepath_mkdir(p("hers"), 0700, err, sizeof(err)), -EPERM);
	assert_int_equal(safepath_mkdir(p("hers/c"), 0700, err, sizeof(err)), -EPERM);
	assert_int_equal(access(p("hers/c"), F_OK), -1);
}

static void slurp(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW);
	ssize_t n;

	assert_true(fd >= 0);
	n = read(fd, buf, len - 1);
	assert_true(n >= 0);
	buf[n] = '\0';
	close(fd);
}

static void test_write_file(void **state)
{
	struct stat st;
	char got[64];
	int fd;

	/* the victim: a file a link will point at */
	fd = open(p("victim"), O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "precious", 8), 8);
	close(fd);
	mk("d", 0755);
	/* a link at the old temporary name and one at the file's own name */
	assert_int_equal(symlink(p("victim"), p("d/m.prom.tmp")), 0);
	assert_int_equal(symlink(p("victim"), p("d/m.prom")), 0);
	assert_int_equal(safepath_write_file(p("d/m.prom"), "new\n", 4, 0640, (gid_t)-1,
					     err, sizeof(err)), 0);
	slurp(p("victim"), got, sizeof(got));
	assert_string_equal(got, "precious");
	assert_int_equal(stat(p("victim"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	/* the link at the name was replaced, not followed */
	assert_int_equal(lstat(p("d/m.prom"), &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0640);
	slurp(p("d/m.prom"), got, sizeof(got));
	assert_string_equal(got, "new\n");
	/* the one at the old temporary name was not touched */
	assert_int_equal(lstat(p("d/m.prom.tmp"), &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	/* rewritten: still one file, nothing left over but the planted link */
	assert_int_equal(safepath_write_file(p("d/m.prom"), "again\n", 6, 0640, (gid_t)-1,
					     err, sizeof(err)), 0);
	slurp(p("d/m.prom"), got, sizeof(got));
	assert_string_equal(got, "again\n");
	/* in a directory others may write: nothing written */
	mk("open", 0777);
	assert_int_equal(symlink(p("victim"), p("open/m.prom")), 0);
	assert_int_equal(safepath_write_file(p("open/m.prom"), "x", 1, 0640, (gid_t)-1,
					     err, sizeof(err)), -EPERM);
	says(p("open"));
	slurp(p("victim"), got, sizeof(got));
	assert_string_equal(got, "precious");
	assert_int_equal(safepath_unlink(p("open/m.prom"), err, sizeof(err)), -EPERM);
	assert_int_equal(lstat(p("open/m.prom"), &st), 0);
	/* removing a name removes the name, never what a link leads to */
	assert_int_equal(safepath_unlink(p("d/m.prom.tmp"), err, sizeof(err)), 0);
	assert_int_equal(access(p("victim"), F_OK), 0);
	assert_int_equal(safepath_unlink(p("d/m.prom"), err, sizeof(err)), 0);
	assert_int_equal(lstat(p("d/m.prom"), &st), -1);
	assert_int_equal(safepath_unlink(p("d/m.prom"), err, sizeof(err)), 0);
	/* a name that is no file */
	assert_int_equal(safepath_write_file(p("d/"), "x", 1, 0640, (gid_t)-1, err,
					     sizeof(err)), -EINVAL);
}

static void test_split(void **state)
{
	char dir[PATH_MAX];

	assert_string_equal(safepath_split("/a/b/c.prom", dir, sizeof(dir)), "c.prom");
	assert_string_equal(dir, "/a/b");
	assert_string_equal(safepath_split("/c", dir, sizeof(dir)), "c");
	assert_string_equal(dir, "/");
	assert_string_equal(safepath_split("c", dir, sizeof(dir)), "c");
	assert_string_equal(dir, ".");
	assert_null(safepath_split("/a/b/", dir, sizeof(dir)));
	assert_null(safepath_split("/a/..", dir, sizeof(dir)));
	assert_null(safepath_split("", dir, sizeof(dir)));
	assert_null(safepath_split("/a/b", dir, 2));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_own_dirs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_links, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mkdir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_file, setup, teardown),
		cmocka_unit_test(test_split),
	};

	printf("test_safepath: trusted directories, refusals naming the path, mkdir, "
	       "writes that follow no link\n");
	fflush(stdout);
	return cmocka_run_group_tests_name("safepath", tests, NULL, NULL);
}
