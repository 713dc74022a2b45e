/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ctlproto: the control-socket protocol helpers: escaping round trips
 * (every byte value), truncation never splitting an escape, parsing of
 * words and KEY=VALUE pairs, the line reader over a socketpair (split and
 * joined lines, over-long lines, end of stream, timeouts), descriptor
 * passing (received by ctl_read_line_fd, never installed by ctl_read_line),
 * errno names and path normalization.
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
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctlproto.h"

static void test_escape_round_trip(void **state)
{
	char in[256], out[1024];

	(void)state;
	for (int i = 1; i < 256; i++)
		in[i - 1] = (char)i;
	in[255] = '\0';
	size_t n = ctl_escape(in, out, sizeof(out));

	assert_int_equal(n, strlen(out));
	/* no byte that splits or ends a word is left as such */
	for (const char *p = out; *p; p++)
		assert_true((unsigned char)*p > 0x20 && *p != 0x7f);
	assert_null(strchr(out, ' '));
	assert_int_equal(ctl_unescape(out), 0);
	assert_string_equal(out, in);
}

static void test_escape_names(void **state)
{
	char out[256];

	(void)state;
	ctl_escape("naïve café/ファイル 1.bin", out, sizeof(out));
	assert_string_equal(out, "naïve%20café/ファイル%201.bin");
	ctl_escape("100%\tdone\n", out, sizeof(out));
	assert_string_equal(out, "100%25%09done%0A");
	assert_int_equal(ctl_unescape(out), 0);
	assert_string_equal(out, "100%\tdone\n");
}

static void test_escape_truncation(void **state)
{
	char out[6];

	(void)state;
	/* "a%20b" needs 5 bytes + NUL: fits; "a  b" needs 7 + NUL: cut before an escape */
	assert_int_equal(ctl_escape("a b", out, sizeof(out)), 5);
	assert_string_equal(out, "a%20b");
	assert_int_equal(ctl_escape("ab  b", out, sizeof(out)), 9);
	assert_string_equal(out, "ab%20");
	assert_int_equal(ctl_escape("abc  b", out, sizeof(out)), 10);
	assert_string_equal(out, "abc");	/* never half an escape */
}

static void test_unescape_errors(void **state)
{
	char a[] = "abc%2", b[] = "%zz", c[] = "%", d[] = "%41%62";

	(void)state;
	assert_int_equal(ctl_unescape(a), -EINVAL);
	assert_int_equal(ctl_unescape(b), -EINVAL);
	assert_int_equal(ctl_unescape(c), -EINVAL);
	assert_int_equal(ctl_unescape(d), 0);
	assert_string_equal(d, "Ab");
}

static void test_parse(void **state)
{
	char line[] = "WARMUP  mode=fetch shard=1/3 path=a%20b%3Dc empty= threads=8";
	struct ctl_msg m;
	uint64_t v;

	(void)state;
	assert_int_equal(ctl_parse(line, &m), 0);
	assert_int_equal(m.argc, 6);
	assert_string_equal(m.argv[0], "WARMUP");
	assert_string_equal(ctl_get(&m, "mode"), "fetch");
	assert_string_equal(ctl_get(&m, "shard"), "1/3");
	assert_string_equal(ctl_get(&m, "path"), "a b=c");
	assert_string_equal(ctl_get(&m, "empty"), "");
	assert_null(ctl_get(&m, "mod"));
	assert_null(ctl_get(&m, "WARMUP"));
	assert_int_equal(ctl_get_u64(&m, "threads", &v), 0);
	assert_int_equal(v, 8);
	assert_int_equal(ctl_get_u64(&m, "mode", &v), -EINVAL);
	assert_int_equal(ctl_get_u64(&m, "nope", &v), -ENOENT);
}

static void test_parse_errors(void **state)
{
	char empty[] = "   ", bad[] = "PATH a%g", many[CTL_MAX_WORDS * 2 + 8];
	struct ctl_msg m;

	(void)state;
	assert_int_equal(ctl_parse(empty, &m), -EINVAL);
	assert_int_equal(ctl_parse(bad, &m), -EINVAL);
	memset(many, 0, sizeof(many));
	for (int i = 0; i < CTL_MAX_WORDS + 1; i++)
		strcat(many, "x ");
	assert_int_equal(ctl_parse(many, &m), -E2BIG);
}

static void test_read_line(void **state)
{
	struct ctl_conn *c = malloc(sizeof(*c));
	char *line, *big;
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ctl_conn_init(c, sv[0]);
	/* two lines in one write, one line in two writes, a CRLF */
	assert_int_equal(ctl_sendf(sv[1], "HELLO version=1\nPING\npar"), 0);
	assert_int_equal(ctl_read_line(c, &line, 1000), 15);
	assert_string_equal(line, "HELLO version=1");
	/* the next line came with the first read: it is served from the
	 * buffer, with a descriptor that has nothing to read behind it */
	{
		int fd = c->fd, empty[2];

		assert_int_equal(pipe(empty), 0);
		c->fd = empty[0];
		assert_int_equal(ctl_read_line(c, &line, 0), 4);
		assert_string_equal(line, "PING");
		/* and no full line is left buffered: the empty pipe times out */
		assert_int_equal(ctl_read_line(c, &line, 0), -ETIMEDOUT);
		c->fd = fd;
		close(empty[0]);
		close(empty[1]);
	}
	assert_int_equal(ctl_read_line(c, &line, 50), -ETIMEDOUT);
	assert_int_equal(ctl_sendf(sv[1], "tial\r\n"), 0);
	assert_int_equal(ctl_read_line(c, &line, 1000), 7);
	assert_string_equal(line, "partial");

	/* a line longer than the limit */
	big = malloc(CTL_LINE_MAX + 16);
	memset(big, 'x', CTL_LINE_MAX + 8);
	big[CTL_LINE_MAX + 8] = '\0';
	if (fork() == 0) {
		ctl_sendf(sv[1], "%s\n", big);
		_exit(0);
	}
	assert_int_equal(ctl_read_line(c, &line, 5000), -E2BIG);
	close(sv[1]);
	close(sv[0]);

	/* end of stream */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ctl_conn_init(c, sv[0]);
	close(sv[1]);
	assert_int_equal(ctl_read_line(c, &line, 1000), -ECONNRESET);
	/* and writing to a peer that is gone is -EPIPE, not SIGPIPE */
	assert_int_equal(ctl_sendf(sv[0], "PING\n"), -EPIPE);
	close(sv[0]);
	free(big);
	free(c);
}

/* Descriptors open in this process now. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* the DIR's own */
}

static void test_pass_fd(void **state)
{
	struct ctl_conn *c = malloc(sizeof(*c));
	char *line, buf[8];
	int sv[2], pp[2], fd, before;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(pipe(pp), 0);
	ctl_conn_init(c, sv[0]);
	assert_int_equal(ctl_sendf_fd(sv[1], -1, "OK\n"), -EBADF);

	/* the reader gets its own descriptor of the same pipe, close-on-exec */
	assert_int_equal(ctl_sendf_fd(sv[1], pp[0], "OK handle=%d\n", 7), 0);
	assert_int_equal(ctl_read_line_fd(c, &line, 1000, &fd), 11);
	assert_string_equal(line, "OK handle=7");
	assert_true(fd >= 0 && fd != pp[0]);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(write(pp[1], "abc", 3), 3);
	assert_int_equal(read(fd, buf, sizeof(buf)), 3);
	close(fd);

	/* a line without one gives -1; so does a line already buffered */
	assert_int_equal(ctl_sendf(sv[1], "ERR code=EACCES\nOK\n"), 0);
	assert_int_equal(ctl_read_line_fd(c, &line, 1000, &fd), 15);
	assert_int_equal(fd, -1);
	assert_int_equal(ctl_read_line_fd(c, &line, 1000, &fd), 2);
	assert_int_equal(fd, -1);

	/* the daemon's reader (read(2)) never installs a descriptor sent to it */
	before = count_fds();
	assert_int_equal(ctl_sendf_fd(sv[1], pp[0], "PING\n"), 0);
	assert_int_equal(ctl_read_line(c, &line, 1000), 4);
	assert_string_equal(line, "PING");
	assert_int_equal(count_fds(), before);

	/* an error leaves nothing held */
	assert_int_equal(ctl_read_line_fd(c, &line, 20, &fd), -ETIMEDOUT);
	assert_int_equal(fd, -1);
	close(sv[1]);
	assert_int_equal(ctl_read_line_fd(c, &line, 1000, &fd), -ECONNRESET);
	assert_int_equal(fd, -1);
	assert_int_equal(count_fds(), before - 1);
	close(sv[0]);
	close(pp[0]);
	close(pp[1]);
	free(c);
}

/* A daemon that refuses says why and closes first: HELLO's EPIPE hides nothing. */
static void test_hello_refused(void **state)
{
	struct ctl_conn *c = malloc(sizeof(*c));
	char err[256];
	int sv[2];

	(void)state;
	assert_non_null(c);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(ctl_sendf(sv[1], "ERR code=EAGAIN msg=too%%20many%%20connections\n"), 0);
	close(sv[1]);
	ctl_conn_init(c, sv[0]);
	assert_int_equal(ctl_hello(c, err, sizeof(err)), -EAGAIN);
	assert_string_equal(err, "daemon refused: too many connections");
	close(sv[0]);
	free(c);
}

static void test_errnames(void **state)
{
	(void)state;
	assert_string_equal(ctl_errname(ENOENT), "ENOENT");
	assert_string_equal(ctl_errname(EACCES), "EACCES");
	assert_int_equal(ctl_errno_of("ENOENT"), ENOENT);
	assert_int_equal(ctl_errno_of("ECANCELED"), ECANCELED);
	assert_int_equal(ctl_errno_of(ctl_errname(4000)), 4000);
	assert_int_equal(ctl_errno_of("EWHATEVER"), EIO);
}

static void test_abspath(void **state)
{
	char out[PATH_MAX], cwd[PATH_MAX], want[PATH_MAX + 8];

	(void)state;
	assert_int_equal(ctl_abspath("/a//b/./c/../d/", out, sizeof(out)), 0);
	assert_string_equal(out, "/a/b/d");
	assert_int_equal(ctl_abspath("/../..", out, sizeof(out)), 0);
	assert_string_equal(out, "/");
	assert_int_equal(ctl_abspath("/", out, sizeof(out)), 0);
	assert_string_equal(out, "/");
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(ctl_abspath("x/y", out, sizeof(out)), 0);
	snprintf(want, sizeof(want), "%s/x/y", strcmp(cwd, "/") ? cwd : "");
	assert_string_equal(out, want);
	assert_int_equal(ctl_abspath("/abc/def", out, 6), -ENAMETOOLONG);
}

struct late_writer {
	char path[PATH_MAX];
	int delay_ms;
};

static void *late_write(void *arg)
{
	struct late_writer *w = arg;
	int fd;

	usleep(w->delay_ms * 1000);
	fd = open(w->path, O_WRONLY | O_TRUNC);
	if (fd >= 0) {
		if (write(fd, "/run/x.sock\n", 12) != 12)
			abort();
		close(fd);
	}
	return NULL;
}

/* An empty socket file (a daemon just starting) is waited for, not taken for none */
static void test_socket_of_waits(void **state)
{
	char dir[] = "/tmp/test_ctlproto.XXXXXX", sub[256], out[PATH_MAX];
	struct late_writer w = { .delay_ms = 200 };
	struct timespec t0, t1;
	pthread_t th;
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/.stagefs", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(w.path, sizeof(w.path), "%s/socket", sub);
	fd = open(w.path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	/* written 200 ms late: found */
	assert_int_equal(pthread_create(&th, NULL, late_write, &w), 0);
	assert_int_equal(ctl_socket_of(dir, out, sizeof(out)), 0);
	assert_string_equal(out, "/run/x.sock");
	pthread_join(th, NULL);
	/* never written: -ENOENT, after the wait and not much more */
	fd = open(w.path, O_WRONLY | O_TRUNC);
	close(fd);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(ctl_socket_of(dir, out, sizeof(out)), -ENOENT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms >= CTL_SOCKET_WAIT_MS - 50 && ms < CTL_SOCKET_WAIT_MS + 2000);
	/* no such file: at once */
	unlink(w.path);
	assert_int_equal(ctl_socket_of(dir, out, sizeof(out)), -ENOENT);
	rmdir(sub);
	rmdir(dir);
}

static void test_find_mount_outside(void **state)
{
	char root[PATH_MAX], rel[PATH_MAX];

	(void)state;
	/* /proc is no stagefs mount, and neither is anything above it */
	assert_int_equal(ctl_find_mount("/proc/self", root, sizeof(root), rel, sizeof(rel)),
			 -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape_round_trip),
		cmocka_unit_test(test_escape_names),
		cmocka_unit_test(test_escape_truncation),
		cmocka_unit_test(test_unescape_errors),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_read_line),
		cmocka_unit_test(test_pass_fd),
		cmocka_unit_test(test_hello_refused),
		cmocka_unit_test(test_errnames),
		cmocka_unit_test(test_abspath),
		cmocka_unit_test(test_find_mount_outside),
		cmocka_unit_test(test_socket_of_waits),
	};

	printf("test_ctlproto: escaping, parsing, the line reader, errno names, paths\n");
	fflush(stdout);
	return cmocka_run_group_tests_name("ctlproto", tests, NULL, NULL);
}
