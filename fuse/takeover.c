/* SPDX-License-Identifier: Apache-2.0 */
/*
 * takeover: see takeover.h.
 *
 * The state travels as a sealed memfd (no size limit, nothing on disk),
 * beside the /dev/fuse descriptor, in one SCM_RIGHTS message.  Its layout,
 * all integers little-endian as the host writes them (the reader is the
 * same machine):
 *
 *   "SFSTKO\0\0"  u32 version  u32 generation  u32 flags
 *   u32 init_len  init_len bytes (the kernel's INIT request)
 *   u32 mountpoint length, bytes
 *   u32 n  then n x { u32 name length, bytes, u32 source length, bytes,
 *                     u32 hidden }
 *
 * A reader refuses a version it does not know (TAKEOVER_EXIT_REFUSED):
 * the supervisor then leaves the daemon it has running.
 */
#include "takeover.h"

#include "handles.h"
#include "log.h"
#include "session_io.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define TKO_MAGIC	"SFSTKO\0\0"
#define TKO_VERSION	1u
#define TKO_F_NOOPEN	1u
#define TKO_MSG_STATE	0x53544b31u	/* "STK1" */
#define TKO_RECV_MS	10000		/* the supervisor sends at once */
#define NOTIFY_RESEND	7		/* FUSE_NOTIFY_RESEND, 7.40 */

struct takeover {
	pthread_mutex_t lock;	/* one state message at a time, the newest last */
	int chan;		/* to the supervisor */
	bool resuming;
	bool fd_sent;		/* the supervisor has our descriptors (sent once) */
	int fuse_fd;		/* resuming: the descriptor received */
	int recs_old;		/* resuming: the handle records of the daemon before */
	int recs_fd;		/* ours (fuse/handles.h), or -1 */
	uint32_t generation, flags;
	uint64_t down_ms;
	unsigned char init[256];
	size_t init_len;
	char *mountpoint;
	uint32_t nds;
	char **names, **sources;
	bool *hidden;
};

/* ---- the state record ---- */

struct wbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void put(struct wbuf *b, const void *p, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > b->cap) {
		size_t cap = MAX(b->cap * 2, b->len + n + 4096);
		char *np = realloc(b->p, cap);

		if (!np) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void put_u32(struct wbuf *b, uint32_t v)
{
	put(b, &v, sizeof(v));
}

static void put_str(struct wbuf *b, const char *s)
{
	put_u32(b, (uint32_t)strlen(s));
	put(b, s, strlen(s));
}

struct rbuf {
	const char *p;
	size_t len, off;
	bool bad;
};

static void get(struct rbuf *b, void *out, size_t n)
{
	if (b->bad || n > b->len - b->off) {
		b->bad = true;
		memset(out, 0, n);
		return;
	}
	memcpy(out, b->p + b->off, n);
	b->off += n;
}

static uint32_t get_u32(struct rbuf *b)
{
	uint32_t v;

	get(b, &v, sizeof(v));
	return v;
}

static char *get_str(struct rbuf *b)
{
	uint32_t n = get_u32(b);
	char *s;

	if (b->bad || n > b->len - b->off || n > (1u << 16)) {
		b->bad = true;
		return NULL;
	}
	s = strndup(b->p + b->off, n);
	b->off += n;
	if (!s || strlen(s) != n)
		b->bad = true;	/* no memory, or a NUL inside */
	return s;
}

static int parse_state(struct takeover *t, const char *p, size_t len, char *err, size_t errlen)
{
	struct rbuf b = { .p = p, .len = len };
	char magic[8];
	uint32_t version, n;

	get(&b, magic, sizeof(magic));
	if (b.bad || memcmp(magic, TKO_MAGIC, sizeof(magic)))
		return errf(err, errlen, -EPROTO, "the takeover state is not one stagefs wrote");
	version = get_u32(&b);
	if (version != TKO_VERSION)
		return errf(err, errlen, -EPROTO, "the takeover state is version %u, this "
			    "stagefs reads version %u: the running daemon stays", version,
			    TKO_VERSION);
	t->generation = get_u32(&b);
	t->flags = get_u32(&b);
	t->init_len = get_u32(&b);
	if (t->init_len > sizeof(t->init))
		b.bad = true;
	else
		get(&b, t->init, t->init_len);
	t->mountpoint = get_str(&b);
	n = get_u32(&b);
	if (!b.bad && n <= SFS_MAX_DATASETS) {
		t->names = calloc(n ? n : 1, sizeof(*t->names));
		t->sources = calloc(n ? n : 1, sizeof(*t->sources));
		t->hidden = calloc(n ? n : 1, sizeof(*t->hidden));
		if (!t->names || !t->sources || !t->hidden)
			b.bad = true;
		for (uint32_t i = 0; !b.bad && i < n; i++) {
			t->names[i] = get_str(&b);
			t->sources[i] = get_str(&b);
			t->hidden[i] = get_u32(&b) != 0;
			t->nds = i + 1;
		}
	} else {
		b.bad = true;
	}
	if (b.bad || !t->generation || t->generation >= HANDLE_GEN_LIMIT)
		return errf(err, errlen, -EPROTO, "the takeover state is damaged");
	return 0;
}

static int build_state(struct sfs *fs, const struct takeover *t, int *out)
{
	struct wbuf b = { 0 };
	unsigned char init[256];
	size_t init_len = session_io_init_request(fs->sio, init, sizeof(init));
	uint32_t n = fs->multi ? atomic_load(&fs->nds) : 0;
	int fd, ret = 0;

	put(&b, TKO_MAGIC, 8);
	put_u32(&b, TKO_VERSION);
	put_u32(&b, fs->generation);
	put_u32(&b, t->flags);
	put_u32(&b, (uint32_t)init_len);
	put(&b, init, init_len);
	put_str(&b, fs->mountpoint);
	put_u32(&b, n);
	for (uint32_t i = 0; i < n; i++) {
		put_str(&b, fs->ds[i]->name);
		put_str(&b, fs->ds[i]->source);
		put_u32(&b, fs->ds[i]->hidden);
	}
	if (b.oom) {
		free(b.p);
		return -ENOMEM;
	}
	fd = memfd_create("stagefs-takeover", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		free(b.p);
		return -errno;
	}
	if (pwrite_full(fd, b.p, b.len, 0) != (ssize_t)b.len ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		ret = errno ? -errno : -EIO;
	free(b.p);
	if (ret) {
		close(fd);
		return ret;
	}
	*out = fd;
	return 0;
}

/* ---- the channel ---- */

int takeover_msg_send(int chan, const int *fds, int nfds)
{
	uint32_t type = TKO_MSG_STATE;
	struct iovec iov = { .iov_base = &type, .iov_len = sizeof(type) };
	union {
		char buf[CMSG_SPACE(TAKEOVER_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u = { 0 };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int)),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);

	if (nfds < 1 || nfds > TAKEOVER_MAX_FDS)
		return -EINVAL;
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	while (sendmsg(chan, &msg, MSG_NOSIGNAL) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

int takeover_msg_recv(int chan, int *fds, int flags)
{
	uint32_t type = 0;
	struct iovec iov = { .iov_base = &type, .iov_len = sizeof(type) };
	union {
		char buf[CMSG_SPACE(TAKEOVER_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	ssize_t r = recvmsg(chan, &msg, MSG_CMSG_CLOEXEC | flags);
	struct cmsghdr *c;
	int n = 0;

	if (r <= 0)
		return r < 0 ? -errno : 0;
	c = CMSG_FIRSTHDR(&msg);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
		n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		n = MIN(n, TAKEOVER_MAX_FDS);
		memcpy(fds, CMSG_DATA(c), (size_t)n * sizeof(int));
	}
	if (r != sizeof(type) || type != TKO_MSG_STATE || n < 1 || (msg.msg_flags & MSG_CTRUNC)) {
		for (int i = 0; i < n; i++)
			close(fds[i]);
		return -EPROTO;
	}
	return n;
}

/*
 * One message with 2 or 3 descriptors: the /dev/fuse one, the state, and
 * the handle records if the daemon before kept them (*@recs_fd, else -1).
 */
static int recv_state(struct takeover *t, int *fuse_fd, int *state_fd, int *recs_fd)
{
	struct pollfd p = { .fd = t->chan, .events = POLLIN };
	int fds[TAKEOVER_MAX_FDS] = { -1, -1, -1 }, n;

	if (poll(&p, 1, TKO_RECV_MS) != 1)
		return -ETIMEDOUT;
	n = takeover_msg_recv(t->chan, fds, 0);
	if (n == 1) {
		close(fds[0]);
		n = -EPROTO;
	}
	if (n <= 0)
		return n ? n : -EPROTO;
	*fuse_fd = fds[0];
	*state_fd = fds[1];
	*recs_fd = fds[2];
	return 0;
}

int takeover_open(struct sfs *fs, struct takeover **out, char *err, size_t errlen)
{
	const char *env = getenv(TAKEOVER_ENV_FD), *resume = getenv(TAKEOVER_ENV_RESUME);
	const char *down = getenv(TAKEOVER_ENV_DOWN_MS);
	struct takeover *t;
	struct stat st;
	int chan, state_fd = -1, ret;
	char *map;

	*out = NULL;
	if (!env)
		return 0;
	chan = atoi(env);
	unsetenv(TAKEOVER_ENV_FD);
	unsetenv(TAKEOVER_ENV_RESUME);
	if (chan < 3 || fcntl(chan, F_SETFD, FD_CLOEXEC) < 0)
		return errf(err, errlen, -EBADF, "%s=%s: not a descriptor", TAKEOVER_ENV_FD, env);
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	t->chan = chan;
	t->fuse_fd = -1;
	t->recs_old = -1;
	t->recs_fd = -1;
	t->down_ms = down ? strtoull(down, NULL, 10) : 0;
	unsetenv(TAKEOVER_ENV_DOWN_MS);
	if (!resume || (strcmp(resume, "1") && strcmp(resume, "check"))) {
		*out = t;
		return 0;
	}
	ret = recv_state(t, &t->fuse_fd, &state_fd, &t->recs_old);
	if (ret) {
		takeover_close(t);
		return errf(err, errlen, ret, "takeover: no state from the supervisor: %s",
			    strerror(-ret));
	}
	if (fstat(state_fd, &st) < 0 || st.st_size <= 0 || st.st_size > (64 << 20)) {
		close(state_fd);
		takeover_close(t);
		return errf(err, errlen, -EPROTO, "takeover: the state is not a file of a sane size");
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, state_fd, 0);
	close(state_fd);
	if (map == MAP_FAILED) {
		takeover_close(t);
		return errf(err, errlen, -ENOMEM, "takeover: cannot map the state");
	}
	ret = parse_state(t, map, (size_t)st.st_size, err, errlen);
	munmap(map, (size_t)st.st_size);
	if (ret) {
		takeover_close(t);
		return ret;
	}
	t->resuming = true;
	fs->generation = t->generation + 1;
	if (fs->generation >= HANDLE_GEN_LIMIT)
		fs->generation = 1;	/* 2^20 takeovers: the oldest handles are long closed */
	*out = t;
	return 0;
}

void takeover_close(struct takeover *t)
{
	if (!t)
		return;
	if (t->chan >= 0)
		close(t->chan);
	if (t->fuse_fd >= 0 && !t->resuming)
		close(t->fuse_fd);
	if (t->recs_old >= 0)
		close(t->recs_old);
	for (uint32_t i = 0; i < t->nds; i++) {
		free(t->names[i]);
		free(t->sources[i]);
	}
	free(t->names);
	free(t->sources);
	free(t->hidden);
	free(t->mountpoint);
	free(t);
}

bool takeover_resuming(const struct takeover *t)
{
	return t && t->resuming;
}

int takeover_fuse_fd(const struct takeover *t)
{
	return t ? t->fuse_fd : -1;
}

const char *takeover_mountpoint(const struct takeover *t)
{
	return t ? t->mountpoint : NULL;
}

bool takeover_noopen(const struct takeover *t)
{
	return t && (t->flags & TKO_F_NOOPEN);
}

void takeover_set_noopen(struct takeover *t, bool active)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->flags = active ? t->flags | TKO_F_NOOPEN : t->flags & ~TKO_F_NOOPEN;
	pthread_mutex_unlock(&t->lock);
}

void takeover_datasets(const struct takeover *t, const char *const **names,
		       const char *const **sources, const bool **hidden, uint32_t *n)
{
	*names = (const char *const *)t->names;
	*sources = (const char *const *)t->sources;
	*hidden = t->hidden;
	*n = t->nds;
}

uint64_t takeover_down_ms(const struct takeover *t)
{
	return t ? t->down_ms : 0;
}

size_t takeover_init_request(const struct takeover *t, const void **req)
{
	*req = t->init;
	return t->init_len;
}

int takeover_publish(struct sfs *fs)
{
	struct takeover *t = fs->tko;
	int fds[3], state, ret;

	if (!t || !fs->se)
		return 0;	/* not supervised; or starting: main publishes once mounted */
	pthread_mutex_lock(&t->lock);
	ret = build_state(fs, t, &state);
	if (ret) {
		pthread_mutex_unlock(&t->lock);
		log_warn("takeover: cannot write the state for the supervisor: %s", strerror(-ret));
		return ret;
	}
	/*
	 * The descriptors once (the supervisor keeps the /dev/fuse one it
	 * has, and takes our handle records); later messages carry the state
	 */
	fds[0] = fuse_session_fd(fs->se);
	fds[1] = state;
	fds[2] = t->recs_fd;
	ret = t->fd_sent ? takeover_msg_send(t->chan, fds + 1, 1) :
			   takeover_msg_send(t->chan, fds, t->recs_fd >= 0 ? 3 : 2);
	close(state);
	if (!ret)
		t->fd_sent = true;
	pthread_mutex_unlock(&t->lock);
	if (ret) {
		log_warn("takeover: cannot reach the supervisor: %s (a crash of this daemon "
			 "would end the mount)", strerror(-ret));
		return ret;
	}
	return 0;
}

int takeover_resend(struct sfs *fs)
{
	struct fuse_out_header out = {
		.len = sizeof(out),
		.error = NOTIFY_RESEND,
		.unique = 0,
	};
	ssize_t n = write(fuse_session_fd(fs->se), &out, sizeof(out));

	if (n == (ssize_t)sizeof(out)) {
		log_info("takeover: asked the kernel to send again what the daemon before "
			 "had not answered");
		return 0;
	}
	n = n < 0 ? -errno : -EIO;
	log_warn("takeover: the kernel cannot send again what the daemon before had not "
		 "answered (FUSE_NOTIFY_RESEND: %s; Linux 6.9 or later has it): those "
		 "requests wait until the mount is aborted", strerror((int)-n));
	return (int)n;
}

void takeover_set_records(struct takeover *t, int fd)
{
	if (t)
		t->recs_fd = fd;
}

int takeover_old_records(const struct takeover *t)
{
	return t ? t->recs_old : -1;
}
