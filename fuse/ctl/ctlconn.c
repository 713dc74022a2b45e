/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctlconn: one control-socket connection's helpers (ctlsock_i.h): replies
 * in the protocol's format (src/ctlproto.h, docs/control.md), the peer's
 * liveness, and the PATH lists of WARMUP and HINT.
 */
#include "ctlsock_i.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#define LOG_INTERVAL_MS	10000

int ctlconn_log_level(_Atomic uint64_t *last)
{
	uint64_t now = now_ms(), prev = atomic_load_explicit(last, memory_order_relaxed);

	if (now - prev < LOG_INTERVAL_MS && prev)
		return LOG_DEBUG;
	return atomic_compare_exchange_strong(last, &prev, now) ? LOG_NOTICE : LOG_DEBUG;
}

int ctlconn_send_err(struct ctlsock_client *cl, int err, const char *msg)
{
	char esc[1024];

	ctl_escape(msg, esc, sizeof(esc));
	return ctl_sendf(cl->fd, "ERR code=%s msg=%s\n", ctl_errname(err), esc);
}

int ctlconn_send_fail(struct ctlsock_client *cl, const char *path, int err)
{
	char esc[PATH_MAX * 3 + 1], msg[256];

	ctl_escape(path, esc, sizeof(esc));
	/* ENOSPC from a fill is the cache's room, not (only) the disk's */
	ctl_escape(err == ENOSPC ? "no room in the cache (its cache_size, cache_free_ratio "
		   "or the user's quota: see limit_bytes and users in .stagefs/stats, and the "
		   "daemon's log)" : strerror(err), msg, sizeof(msg));
	return ctl_sendf(cl->fd, "FAIL path=%s code=%s msg=%s\n", esc, ctl_errname(err), msg);
}

bool ctlconn_alive(struct ctlsock_client *cl)
{
	struct pollfd p = { .fd = cl->fd, .events = POLLRDHUP };

	return !(poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

bool ctlconn_tick(struct ctlsock_client *cl)
{
	bool stopping;

	pthread_mutex_lock(&cl->cs->lock);
	stopping = cl->cs->stopping;
	pthread_mutex_unlock(&cl->cs->lock);
	return !stopping && ctlconn_alive(cl);
}

int ctlconn_idle_ms(const struct ctlsock_client *cl)
{
	uint64_t ms = cl->cs->idle_ms;

	if (!ms || cl->nhandles)
		return -1;
	return (int)MIN(ms, (uint64_t)INT32_MAX);
}

ssize_t ctlconn_read_paths(struct ctlsock_client *cl, char ***out)
{
	char **v = NULL;
	size_t n = 0, cap = 0;

	for (;;) {
		struct ctl_msg m;
		char *line;
		/* a list that stops coming is an idle connection too */
		int r = ctl_read_line(&cl->conn, &line, ctlconn_idle_ms(cl));

		if (r < 0)
			goto fail;
		if (ctl_parse(line, &m)) {
			ctlconn_send_err(cl, EINVAL, "unreadable line");
			r = -EINVAL;
			goto fail;
		}
		if (!strcmp(m.argv[0], "END"))
			break;
		if (strcmp(m.argv[0], "PATH") || m.argc > 2) {
			ctlconn_send_err(cl, EINVAL, "expected PATH <path> or END");
			r = -EINVAL;
			goto fail;
		}
		if (n == cap) {
			char **nv = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*nv));

			if (!nv) {
				r = -ENOMEM;
				goto fail;
			}
			v = nv;
		}
		v[n] = strdup(m.argc > 1 ? m.argv[1] : "");
		if (!v[n]) {
			r = -ENOMEM;
			goto fail;
		}
		n++;
		continue;
fail:
		while (n)
			free(v[--n]);
		free(v);
		return r;
	}
	*out = v;
	return (ssize_t)n;
}

void ctlconn_free_paths(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}
