/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_ctlproto: libFuzzer harness for the control-message parser
 * (src/ctlproto.c): the line reader the daemon runs on every connection of
 * its control socket, and the word splitter and %XX decoder behind it.
 *
 * The input is a byte stream as a client could send it.  It goes through a
 * socketpair into ctl_read_line() (line framing, CTL_LINE_MAX, "\r\n"),
 * and each line through ctl_parse(), the KEY=VALUE lookups the daemon and
 * the clients make, and ctl_errno_of().  Checked beyond "no crash": every
 * parsed word survives ctl_escape() + ctl_unescape() unchanged, and an
 * escaped word holds no byte <= 0x20, 0x7f or '%' except as %XX, as
 * docs/control.md specifies.  Seeds: the messages of
 * tests/unit/test_ctlproto.c and docs/control.md (tests/fuzz/mkseeds.sh).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctlproto.h"

#define MAX_STREAM	(192 * 1024)	/* fits a socketpair's buffer */

static const char *const keys[] = {
	"bytes", "code", "files", "gpu", "handle", "ino", "job", "mode", "msg",
	"path", "pci", "progress_ms", "scope", "session", "shard", "size",
	"skipped", "threads", "version", "walk_done", "window", "window_bytes",
};

static void check_word(const char *w)
{
	static char esc[3 * CTL_LINE_MAX + 1], back[3 * CTL_LINE_MAX + 1];
	size_t n = ctl_escape(w, esc, sizeof(esc));

	if (n != strlen(esc))
		__builtin_trap();	/* it fitted: the whole encoding */
	for (const char *p = esc; *p; p++) {
		unsigned char c = (unsigned char)*p;

		if (c <= 0x20 || c == 0x7f)
			__builtin_trap();
		if (c == '%' && !(p[1] && p[2]))
			__builtin_trap();
	}
	memcpy(back, esc, n + 1);
	if (ctl_unescape(back) || strcmp(back, w))
		__builtin_trap();	/* escape and unescape are inverses */
}

static void one_line(char *line)
{
	struct ctl_msg m;
	uint64_t v;

	if (ctl_parse(line, &m))
		return;
	for (int i = 0; i < m.argc; i++)
		check_word(m.argv[i]);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		(void)ctl_get(&m, keys[i]);
		(void)ctl_get_u64(&m, keys[i], &v);
	}
	if (m.argc > 1)
		(void)ctl_errno_of(m.argv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ctl_conn c;
	int sv[2];
	size_t off = 0;
	char *line;

	if (size > MAX_STREAM)
		size = MAX_STREAM;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		abort();
	while (off < size) {
		ssize_t w = write(sv[1], data + off, size - off);

		if (w <= 0)
			abort();	/* the buffer holds MAX_STREAM */
		off += (size_t)w;
	}
	shutdown(sv[1], SHUT_WR);
	ctl_conn_init(&c, sv[0]);
	for (;;) {
		int r = ctl_read_line(&c, &line, 1000);

		if (r < 0)
			break;	/* the end, or an over-long line (the daemon hangs up) */
		one_line(line);
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
