/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libstagefs_ctl: see libstagefs_ctl.h; the protocol is docs/control.md.
 *
 * Locks: g_lock guards the list of mounts and the PCI addresses; m->lock a
 * mount's connections, their busy/refs/closing fields, its handle count
 * and its counts to report.  A connection's socket and reader belong to
 * the thread that marked it busy.  Order: g_lock, then m->lock; no I/O is
 * done under either.  fork() takes both (pthread_atfork), so a child never
 * inherits them held.
 */
#include "gpudirect/libstagefs_ctl.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CONFIG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "ctlproto.h"
#include "list.h"
#include "log.h"
#include "stats/procinfo.h"
#include "util.h"
#include "gpudirect/libstagefs.h"

#define REPORT_MS		1000	/* at most one report a second (and at close) */
#define REQ_TIMEOUT_MS		30000	/* a request other than CACHE_FD */
#define SOCKET_RETRY_MS		30000	/* look for a mount's socket again after */

/* One control connection (docs/control.md). */
struct ctlc_conn {
	struct list_node node;		/* in m->conns: protected by m->lock */
	struct ctlc_mount *m;
	int fd;
	pid_t pid;			/* the process that connected */
	_Atomic bool dead;		/* broken: the daemon dropped its pins */
	bool used;			/* a request was answered on it (busy holder's) */
	bool busy;			/* protected by m->lock: a request in flight */
	unsigned refs;			/* protected by m->lock: handles pinned here */
	uint64_t *closing;		/* protected by m->lock: pins to drop when idle */
	size_t nclosing, capclosing;
	struct ctl_conn rd;		/* used by the busy holder only */
};

/* A stagefs mount this process reads from. */
struct ctlc_mount {
	struct list_node node;		/* in g_mounts: protected by g_lock */
	char root[PATH_MAX];
	pthread_mutex_t lock;
	pthread_cond_t idle;		/* a connection became idle or was opened */
	/* the rest is protected by lock */
	char sock[108];			/* the socket's path; "" until found, then fixed */
	uint64_t sock_retry_ms;		/* none found: look again after this */
	struct list_node conns;		/* struct ctlc_conn, newest first */
	unsigned nconns, opening;
	unsigned handles;		/* open handles of this mount */
	bool no_cache_fd;		/* an older daemon */
	uint64_t client_bytes, client_files;	/* to report */
	uint64_t gpu_bytes[SFS_MAX_DEVICES];
	uint64_t last_report_ms;
};

static _Atomic uint64_t g_reports, g_report_errors;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* protected by g_lock; never freed, added at the head only */
static struct list_node g_mounts = LIST_INIT(g_mounts);
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

#ifdef CONFIG_HAVE_CUDA
static char g_pci[SFS_MAX_DEVICES][16];	/* PCI address of device n; protected by g_lock */
#endif

static void atfork_prepare(void)
{
	pthread_mutex_lock(&g_lock);
	list_for_each(pos, &g_mounts)
		pthread_mutex_lock(&list_entry(pos, struct ctlc_mount, node)->lock);
}

static void atfork_release(void)
{
	list_for_each(pos, &g_mounts)
		pthread_mutex_unlock(&list_entry(pos, struct ctlc_mount, node)->lock);
	pthread_mutex_unlock(&g_lock);
}

/*
 * The counts not reported yet are the parent's: it reports them.  The
 * parent's threads that were opening connections do not exist here.
 */
static void atfork_child(void)
{
	list_for_each(pos, &g_mounts) {
		struct ctlc_mount *m = list_entry(pos, struct ctlc_mount, node);

		m->opening = 0;
		m->client_bytes = m->client_files = 0;
		memset(m->gpu_bytes, 0, sizeof(m->gpu_bytes));
		m->last_report_ms = 0;
	}
	atfork_release();
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_release, atfork_child);
}

struct ctlc_mount *ctlc_mount_get(const char *root)
{
	struct ctlc_mount *m = NULL;

	pthread_once(&atfork_once, atfork_register);
	pthread_mutex_lock(&g_lock);
	list_for_each(pos, &g_mounts) {
		struct ctlc_mount *o = list_entry(pos, struct ctlc_mount, node);

		if (!strcmp(o->root, root)) {
			m = o;
			break;
		}
	}
	if (!m && strlen(root) < sizeof(m->root) && (m = calloc(1, sizeof(*m)))) {
		strcpy(m->root, root);
		pthread_mutex_init(&m->lock, NULL);
		pthread_cond_init(&m->idle, NULL);
		list_init(&m->conns);
		list_add(&g_mounts, &m->node);
	}
	pthread_mutex_unlock(&g_lock);
	return m;
}

int ctlc_mount_socket(struct ctlc_mount *m)
{
	char sock[sizeof(m->sock)];
	bool known;
	int r = 0;

	pthread_mutex_lock(&m->lock);
	known = m->sock[0];
	if (!known && now_ms() < m->sock_retry_ms)
		r = -ENOENT;
	pthread_mutex_unlock(&m->lock);
	if (r || known)
		return r;
	r = ctl_socket_of(m->root, sock, sizeof(sock));
	pthread_mutex_lock(&m->lock);
	if (!r)
		strcpy(m->sock, sock);
	else
		m->sock_retry_ms = now_ms() + SOCKET_RETRY_MS;
	pthread_mutex_unlock(&m->lock);
	return r;
}

static void conn_free(struct ctlc_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->closing);
	free(c);
}

/* Take @c off @m's list if it is on it.  m->lock held. */
static void conn_unlink_locked(struct ctlc_mount *m, struct ctlc_conn *c)
{
	if (!list_linked(&c->node))
		return;
	list_del(&c->node);
	m->nconns--;
}

/* Close and free @c if it is broken and nobody uses it.  m->lock held. */
static void conn_maybe_free_locked(struct ctlc_mount *m, struct ctlc_conn *c)
{
	if (!atomic_load(&c->dead) || c->busy || c->refs)
		return;
	conn_unlink_locked(m, c);
	conn_free(c);
}

/*
 * Drop connections that are broken and unused, and, in a child after
 * fork(), every connection of the parent: closing the child's copy of the
 * socket leaves the parent's connection (and its pins) alone.  One still
 * referenced by inherited handles is unlinked but kept for them (they
 * never use it: its pid is not theirs).  m->lock held.
 */
static void mount_reap_locked(struct ctlc_mount *m)
{
	pid_t me = getpid();

	list_for_each_safe(pos, tmp, &m->conns) {
		struct ctlc_conn *c = list_entry(pos, struct ctlc_conn, node);

		if (c->pid != me) {
			atomic_store(&c->dead, true);
			conn_unlink_locked(m, c);
			close(c->fd);
			c->fd = -1;
			if (!c->refs)
				conn_free(c);
			continue;
		}
		conn_maybe_free_locked(m, c);
	}
}

/*
 * Is idle connection @c still open at the daemon's end?  A daemon closes
 * a connection that holds no pin after control_idle_timeout, and all of
 * them when it stops: the hangup is seen here, before a request is lost
 * on it.  Marks @c dead if not.  m->lock held (@c is not busy).
 */
static bool conn_open_locked(struct ctlc_conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };

	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
		atomic_store(&c->dead, true);
		return false;
	}
	return true;
}

/* Connect to @m's daemon and say HELLO.  Returns the connection or NULL, *@err set. */
static struct ctlc_conn *conn_open(struct ctlc_mount *m, int *err)
{
	struct ctlc_conn *c = calloc(1, sizeof(*c));
	char msg[256];
	int fd;

	if (!c) {
		*err = -ENOMEM;
		return NULL;
	}
	fd = ctl_connect(m->sock);
	if (fd < 0) {
		log_debug("libstagefs: connect %s: %s", m->sock, strerror(-fd));
		*err = fd;
		free(c);
		return NULL;
	}
	ctl_conn_init(&c->rd, fd);
	*err = ctl_hello(&c->rd, msg, sizeof(msg));
	if (*err) {
		log_debug("libstagefs: %s: %s", m->sock, msg);
		close(fd);
		free(c);
		return NULL;
	}
	c->fd = fd;
	c->pid = getpid();
	c->m = m;
	return c;
}

/*
 * Take an idle connection of @m for one request (opening one if fewer
 * than CTLC_MAX_CONNS are open), waiting for one when @wait.  0 and *@out (give
 * it back with conn_release), -EBUSY (all busy, !@wait) or -errno.
 */
static int conn_acquire(struct ctlc_mount *m, bool wait, struct ctlc_conn **out)
{
	struct ctlc_conn *c;
	int err = 0;

	pthread_mutex_lock(&m->lock);
	for (;;) {
		unsigned live = 0;

		mount_reap_locked(m);
		c = NULL;
		list_for_each(pos, &m->conns) {
			struct ctlc_conn *o = list_entry(pos, struct ctlc_conn, node);

			if (atomic_load(&o->dead))
				continue;	/* kept for the pins of its handles only */
			if (!o->busy && !conn_open_locked(o))
				continue;	/* the daemon closed it (idle, or stopped) */
			live++;
			if (!o->busy) {
				c = o;
				break;
			}
		}
		if (c) {
			c->busy = true;
			pthread_mutex_unlock(&m->lock);
			*out = c;
			return 0;
		}
		if (live + m->opening < CTLC_MAX_CONNS)
			break;
		if (!wait) {
			pthread_mutex_unlock(&m->lock);
			return -EBUSY;
		}
		pthread_cond_wait(&m->idle, &m->lock);
	}
	m->opening++;
	pthread_mutex_unlock(&m->lock);
	c = conn_open(m, &err);
	pthread_mutex_lock(&m->lock);
	m->opening--;
	if (c) {
		c->busy = true;
		list_add(&m->conns, &c->node);
		m->nconns++;
	}
	pthread_cond_broadcast(&m->idle);
	pthread_mutex_unlock(&m->lock);
	if (!c)
		return err;
	*out = c;
	return 0;
}

/*
 * One request on @c (held): send @line, read the final reply.  Returns 0
 * for OK (parsed into @msg, valid until @c's next request), the errno of an
 * ERR as -errno (its message in @why), or -errno of the connection, which
 * is then dead.  With @fd, a descriptor sent with the reply lands in *@fd.
 */
static int conn_call(struct ctlc_conn *c, const char *line, int timeout_ms,
		     struct ctl_msg *msg, int *fd, char *why, size_t whylen)
{
	const char *code, *text;
	char *reply;
	int r;

	if (fd)
		*fd = -1;
	why[0] = '\0';
	r = ctl_sendf(c->fd, "%s\n", line);
	if (!r)
		r = fd ? ctl_read_line_fd(&c->rd, &reply, timeout_ms, fd) :
			 ctl_read_line(&c->rd, &reply, timeout_ms);
	if (r >= 0 && ctl_parse(reply, msg))
		r = -EPROTO;
	if (r >= 0)
		c->used = true;
	if (r >= 0 && !strcmp(msg->argv[0], "OK"))
		return 0;
	if (fd && *fd >= 0) {
		close(*fd);	/* only an OK carries one */
		*fd = -1;
	}
	if (r >= 0 && !strcmp(msg->argv[0], "ERR")) {
		code = ctl_get(msg, "code");
		text = ctl_get(msg, "msg");
		snprintf(why, whylen, "%s", text ? text : "refused");
		return code ? -ctl_errno_of(code) : -EIO;
	}
	/* a failed, late or odd reply: the conversation is lost */
	atomic_store(&c->dead, true);
	snprintf(why, whylen, "control socket: %s", strerror(r < 0 ? -r : EPROTO));
	return r < 0 ? r : -EPROTO;
}

/* CACHE_FD_CLOSE @id on @c (held).  Errors only mean the pin is gone anyway. */
static void conn_unpin(struct ctlc_conn *c, uint64_t id)
{
	struct ctl_msg msg;
	char line[64], why[128];
	int r;

	snprintf(line, sizeof(line), "CACHE_FD_CLOSE handle=%llu", (unsigned long long)id);
	r = conn_call(c, line, REQ_TIMEOUT_MS, &msg, NULL, why, sizeof(why));
	if (r)
		log_debug("libstagefs: CACHE_FD_CLOSE %llu: %s", (unsigned long long)id, why);
}

/* Give @c back: first drop the pins queued while it was busy. */
static void conn_release(struct ctlc_conn *c)
{
	struct ctlc_mount *m = c->m;

	for (;;) {
		uint64_t id;

		pthread_mutex_lock(&m->lock);
		if (!c->nclosing || atomic_load(&c->dead)) {
			c->nclosing = 0;
			c->busy = false;
			pthread_cond_broadcast(&m->idle);
			conn_maybe_free_locked(m, c);
			pthread_mutex_unlock(&m->lock);
			return;
		}
		id = c->closing[--c->nclosing];
		pthread_mutex_unlock(&m->lock);
		conn_unpin(c, id);
	}
}

/* True while the daemon still holds the pins made on @c (a reference is held). */
bool ctlc_conn_alive(struct ctlc_conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };

	if (c->pid != getpid() || atomic_load(&c->dead))
		return false;
	/* the fd stays open while we hold a reference; only a hangup matters */
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
		atomic_store(&c->dead, true);
		return false;
	}
	return true;
}

/* Drop a handle's pin on @c (its reference included). */
void ctlc_drop_pin(struct ctlc_conn *c, uint64_t id)
{
	struct ctlc_mount *m = c->m;

	pthread_mutex_lock(&m->lock);
	c->refs--;
	if (atomic_load(&c->dead) || c->pid != getpid()) {
		/* gone with the connection (or the parent's: not ours to drop) */
		conn_maybe_free_locked(m, c);
		pthread_mutex_unlock(&m->lock);
		return;
	}
	if (c->busy) {
		/* another thread's request is on it: it drops the pin after */
		if (c->nclosing == c->capclosing) {
			size_t cap = c->capclosing ? c->capclosing * 2 : 8;
			uint64_t *nc = realloc(c->closing, cap * sizeof(*nc));

			if (!nc) {
				/* the pin lasts until the connection ends */
				pthread_mutex_unlock(&m->lock);
				return;
			}
			c->closing = nc;
			c->capclosing = cap;
		}
		c->closing[c->nclosing++] = id;
		pthread_mutex_unlock(&m->lock);
		return;
	}
	c->busy = true;
	pthread_mutex_unlock(&m->lock);
	conn_unpin(c, id);
	conn_release(c);
}

/*
 * CACHE_FD for @rel (relative to @m's root), the file @st describes.
 * Returns 0 with the descriptor in *@fd and the pin (@c referenced, id)
 * in *@conn / *@id, or -errno with the reason in @why.
 */
int ctlc_cache_fd(struct ctlc_mount *m, const char *rel, const struct stat *st,
		  int *fd, struct ctlc_conn **conn, uint64_t *id, char *why, size_t whylen)
{
	char line[PATH_MAX * 3 + 32];
	const size_t pre = sizeof("CACHE_FD path=") - 1;
	uint64_t handle = 0, got, ino;
	struct ctl_msg msg;
	struct ctlc_conn *c;
	bool no_verb;
	int r;

	pthread_mutex_lock(&m->lock);
	no_verb = m->no_cache_fd;
	pthread_mutex_unlock(&m->lock);
	if (no_verb) {
		snprintf(why, whylen, "the daemon cannot hand over cache files (older version)");
		return -EOPNOTSUPP;
	}
	memcpy(line, "CACHE_FD path=", pre);
	if (ctl_escape(rel, line + pre, sizeof(line) - pre) >= sizeof(line) - pre) {
		snprintf(why, whylen, "path too long for the control socket");
		return -ENAMETOOLONG;
	}
	for (int tries = 0;; tries++) {
		bool reused;

		r = conn_acquire(m, true, &c);
		if (r) {
			snprintf(why, whylen, "control socket %s: %s", m->sock, strerror(-r));
			return r;
		}
		reused = c->used;
		r = conn_call(c, line, -1, &msg, fd, why, whylen);
		/*
		 * A connection the daemon closed as idle just as we sent
		 * (the check in conn_acquire came first): once more on
		 * another.  Nothing was pinned on it.
		 */
		if (!r || !atomic_load(&c->dead) || !reused || tries)
			break;
		conn_release(c);
	}
	if (r == -EINVAL && !strcmp(why, "unknown request")) {
		pthread_mutex_lock(&m->lock);
		m->no_cache_fd = true;
		pthread_mutex_unlock(&m->lock);
		snprintf(why, whylen, "the daemon cannot hand over cache files (older version)");
		r = -EOPNOTSUPP;
	}
	if (!r && (ctl_get_u64(&msg, "handle", &handle) || ctl_get_u64(&msg, "size", &got))) {
		snprintf(why, whylen, "unreadable CACHE_FD reply");
		r = -EPROTO;
	}
	if (!r && (got != (uint64_t)st->st_size ||
		   (!ctl_get_u64(&msg, "ino", &ino) && ino != (uint64_t)st->st_ino))) {
		/* not the file stat() found (a symlink resolved otherwise?) */
		snprintf(why, whylen, "the daemon resolved the path to another file");
		r = -ESTALE;
	}
	if (!r && *fd < 0) {
		/* the kernel dropped it: we are at RLIMIT_NOFILE (MSG_CTRUNC) */
		snprintf(why, whylen, "no descriptor came with the reply (too many open files?)");
		r = -EMFILE;
	}
	if (r) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		if (handle && !atomic_load(&c->dead))
			conn_unpin(c, handle);
		conn_release(c);
		return r;
	}
	pthread_mutex_lock(&m->lock);
	c->refs++;
	pthread_mutex_unlock(&m->lock);
	conn_release(c);
	*conn = c;
	*id = handle;
	return 0;
}

void ctlc_mount_add(struct ctlc_mount *m, uint64_t client_bytes, uint64_t files,
		      int device, uint64_t gpu_bytes)
{
	pthread_mutex_lock(&m->lock);
	m->client_bytes += client_bytes;
	m->client_files += files;
	if (device >= 0 && device < SFS_MAX_DEVICES)
		m->gpu_bytes[device] += gpu_bytes;
	pthread_mutex_unlock(&m->lock);
}

/* One report request; false if it failed (the counts are to be kept). */
static bool report_one(struct ctlc_conn *c, const char *line)
{
	struct ctl_msg msg;
	char why[256];
	int r = conn_call(c, line, REQ_TIMEOUT_MS, &msg, NULL, why, sizeof(why));

	if (!r) {
		atomic_fetch_add_explicit(&g_reports, 1, memory_order_relaxed);
		return true;
	}
	if (r == -EINVAL && !strcmp(why, "unknown request"))
		return true;	/* an older daemon: nobody to count them */
	atomic_fetch_add_explicit(&g_report_errors, 1, memory_order_relaxed);
	log_debug("libstagefs: report to %s failed: %s", c->m->sock, why);
	/* refused as more than we were handed: sending it again cannot help */
	return r == -ERANGE;
}

/*
 * Send @m's counts to its daemon: when @force or a second has passed since
 * the last report, and a connection is idle (else they wait for the next
 * time).  The job is STAGEFS_JOB if set here, else the daemon's job rule
 * for this process.
 */
void ctlc_mount_report(struct ctlc_mount *m, bool force)
{
	uint64_t cb, cf, gb[SFS_MAX_DEVICES];
	char job[PROCINFO_JOB_MAX * 3 + 8] = "", line[sizeof(job) + 128];
	const char *env = getenv(PROCINFO_ENV_JOB);
	bool any = false, ok = true;
	struct ctlc_conn *c;

	pthread_mutex_lock(&m->lock);
	if (!m->sock[0] || (!force && now_ms() - m->last_report_ms < REPORT_MS)) {
		pthread_mutex_unlock(&m->lock);
		return;
	}
	cb = m->client_bytes;
	cf = m->client_files;
	memcpy(gb, m->gpu_bytes, sizeof(gb));
	any = cb || cf;
	for (int i = 0; i < SFS_MAX_DEVICES; i++)
		any = any || gb[i];
	if (!any) {
		pthread_mutex_unlock(&m->lock);
		return;
	}
	m->client_bytes = m->client_files = 0;
	memset(m->gpu_bytes, 0, sizeof(m->gpu_bytes));
	m->last_report_ms = now_ms();
	pthread_mutex_unlock(&m->lock);

	if (conn_acquire(m, false, &c)) {
		ctlc_mount_add(m, cb, cf, -1, 0);
		for (int i = 0; i < SFS_MAX_DEVICES; i++)
			ctlc_mount_add(m, 0, 0, i, gb[i]);
		return;
	}
	if (env && env[0]) {
		strcpy(job, " job=");
		ctl_escape(env, job + 5, sizeof(job) - 5);
	}
	if (cb || cf) {
		snprintf(line, sizeof(line), "CLIENT_READ bytes=%llu files=%llu%s",
			 (unsigned long long)cb, (unsigned long long)cf, job);
		ok = report_one(c, line);
		if (ok)
			cb = cf = 0;
	}
	for (int i = 0; i < SFS_MAX_DEVICES && ok; i++) {
		char pci[40] = "";

		if (!gb[i])
			continue;
#ifdef CONFIG_HAVE_CUDA
		pthread_mutex_lock(&g_lock);
		if (g_pci[i][0])
			snprintf(pci, sizeof(pci), " pci=%.15s", g_pci[i]);
		pthread_mutex_unlock(&g_lock);
#endif
		snprintf(line, sizeof(line), "GPU_BYTES gpu=%d bytes=%llu%s%s", i,
			 (unsigned long long)gb[i], pci, job);
		ok = report_one(c, line);
		if (ok)
			gb[i] = 0;
	}
	conn_release(c);
	/* kept for the next report: the daemon may be back by then */
	ctlc_mount_add(m, cb, cf, -1, 0);
	for (int i = 0; i < SFS_MAX_DEVICES; i++)
		if (gb[i])
			ctlc_mount_add(m, 0, 0, i, gb[i]);
}

/* At exit (and dlclose): what is left to report goes out. */
__attribute__((destructor)) static void report_at_exit(void)
{
	struct list_node *first;

	pthread_mutex_lock(&g_lock);
	first = g_mounts.next;
	pthread_mutex_unlock(&g_lock);
	/* the list only grows at its head: from @first on, nodes and links are fixed */
	for (struct list_node *pos = first; pos != &g_mounts; pos = pos->next)
		ctlc_mount_report(list_entry(pos, struct ctlc_mount, node), true);
}

void ctlc_note_pci(int device)
{
#ifdef CONFIG_HAVE_CUDA
	char bus[16];

	if (device >= SFS_MAX_DEVICES)
		return;
	pthread_mutex_lock(&g_lock);
	if (!g_pci[device][0] &&
	    cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess)
		memcpy(g_pci[device], bus, sizeof(bus));
	pthread_mutex_unlock(&g_lock);
#endif
}

void ctlc_mount_hold(struct ctlc_mount *m)
{
	pthread_mutex_lock(&m->lock);
	m->handles++;
	pthread_mutex_unlock(&m->lock);
}

bool ctlc_mount_unhold(struct ctlc_mount *m)
{
	bool last;

	pthread_mutex_lock(&m->lock);
	last = --m->handles == 0;
	pthread_mutex_unlock(&m->lock);
	return last;
}

void ctlc_stats(uint64_t *reports, uint64_t *errors)
{
	*reports = atomic_load_explicit(&g_reports, memory_order_relaxed);
	*errors = atomic_load_explicit(&g_report_errors, memory_order_relaxed);
}
