/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cred: the credentials module: cred_init (groups copied, truncated,
 * unknown), group membership, the default_permissions mode check, and
 * SO_PEERCRED + SO_PEERGROUPS over a real socketpair.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cred.h"

static void test_init(void **state)
{
	gid_t g[] = { 10, 20, 30 };
	struct cred cr;

	cred_init(&cr, 1000, 100, 42, g, 3);
	assert_int_equal(cr.uid, 1000);
	assert_int_equal(cr.gid, 100);
	assert_int_equal(cr.pid, 42);
	assert_int_equal(cr.ngroups, 3);
	assert_int_equal(cr.groups[2], 30);

	cred_init(&cr, 1000, 100, 0, NULL, -1);
	assert_int_equal(cr.ngroups, -1);
	assert_true(cred_in_group(&cr, 100));
	assert_false(cred_in_group(&cr, 10));
}

static void test_init_truncates(void **state)
{
	gid_t *g = calloc(CRED_MAX_GROUPS + 10, sizeof(*g));
	struct cred cr;

	assert_non_null(g);
	for (int i = 0; i < CRED_MAX_GROUPS + 10; i++)
		g[i] = (gid_t)(5000 + i);
	cred_init(&cr, 1, 1, 1, g, CRED_MAX_GROUPS + 10);
	assert_int_equal(cr.ngroups, CRED_MAX_GROUPS);
	assert_true(cred_in_group(&cr, 5000 + CRED_MAX_GROUPS - 1));
	assert_false(cred_in_group(&cr, 5000 + CRED_MAX_GROUPS));
	free(g);
}

static void test_in_group(void **state)
{
	gid_t g[] = { 10, 20 };
	struct cred cr;

	cred_init(&cr, 1000, 100, 0, g, 2);
	assert_true(cred_in_group(&cr, 100));
	assert_true(cred_in_group(&cr, 10));
	assert_true(cred_in_group(&cr, 20));
	assert_false(cred_in_group(&cr, 30));
	cred_init(&cr, 1000, 100, 0, g, 0);
	assert_false(cred_in_group(&cr, 10));
}

static void test_may_access(void **state)
{
	gid_t g[] = { 20 };
	struct cred cr, root;

	cred_init(&cr, 1000, 100, 0, g, 1);
	cred_init(&root, 0, 0, 0, NULL, 0);
	/* owner bits for the owner, even when group or other would allow more */
	assert_true(cred_may_access(&cr, 1000, 5, 0400, CRED_MAY_READ));
	assert_false(cred_may_access(&cr, 1000, 100, 0077, CRED_MAY_READ));
	/* group bits through the primary and a supplementary group */
	assert_true(cred_may_access(&cr, 1, 100, 0040, CRED_MAY_READ));
	assert_true(cred_may_access(&cr, 1, 20, 0050, CRED_MAY_READ | CRED_MAY_EXEC));
	assert_false(cred_may_access(&cr, 1, 20, 0040, CRED_MAY_READ | CRED_MAY_EXEC));
	assert_false(cred_may_access(&cr, 1, 20, 0004, CRED_MAY_READ));
	/* other bits */
	assert_true(cred_may_access(&cr, 1, 1, 0001, CRED_MAY_EXEC));
	assert_false(cred_may_access(&cr, 1, 1, 0770, CRED_MAY_READ));
	/* every bit of the mask is needed */
	assert_false(cred_may_access(&cr, 1000, 1, 0400, CRED_MAY_READ | CRED_MAY_WRITE));
	/* root may everything */
	assert_true(cred_may_access(&root, 1, 1, 0, CRED_MAY_READ | CRED_MAY_EXEC));
}

static void test_from_socket(void **state)
{
	gid_t mine[CRED_MAX_GROUPS];
	int sv[2], n;
	struct cred cr;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(cred_from_socket(&cr, sv[0]), 0);
	assert_int_equal(cr.uid, geteuid());
	assert_int_equal(cr.gid, getegid());
	assert_int_equal(cr.pid, getpid());
	n = getgroups(CRED_MAX_GROUPS, mine);
	if (n >= 0 && cr.ngroups > 0) {
		/* SO_PEERGROUPS (Linux >= 4.13): the process's own groups */
		assert_int_equal(cr.ngroups, n);
		for (int i = 0; i < n; i++)
			assert_true(cred_in_group(&cr, mine[i]));
	}
	assert_true(cred_in_group(&cr, getegid()));
	close(sv[0]);
	close(sv[1]);
}

/*
 * More supplementary groups than a credential keeps (root only: in a child
 * that sets 300 groups, since the socketpair's peer is its creator).
 */
static void test_from_socket_many_groups(void **state)
{
	pid_t pid;
	int status;

	if (geteuid() != 0)
		skip();
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		gid_t g[300];
		struct cred cr;
		int sv[2];

		for (int i = 0; i < 300; i++)
			g[i] = (gid_t)(7000 + i);
		if (setgroups(300, g) || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) ||
		    cred_from_socket(&cr, sv[0]))
			_exit(2);
		_exit(cr.ngroups == CRED_MAX_GROUPS && cred_in_group(&cr, 7000) &&
		      !cred_in_group(&cr, 7000 + CRED_MAX_GROUPS) ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_from_socket_not_unix(void **state)
{
	int fd = dup(STDERR_FILENO);
	struct cred cr;

	assert_true(fd >= 0);
	/* not a socket: no credential */
	assert_true(cred_from_socket(&cr, fd) < 0);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init),
		cmocka_unit_test(test_init_truncates),
		cmocka_unit_test(test_in_group),
		cmocka_unit_test(test_may_access),
		cmocka_unit_test(test_from_socket),
		cmocka_unit_test(test_from_socket_many_groups),
		cmocka_unit_test(test_from_socket_not_unix),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
