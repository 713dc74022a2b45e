/* SPDX-License-Identifier: Apache-2.0 */
/*
 * session_io: see session_io.h.
 */
#include "session_io.h"

#include <errno.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIO_MAX_HOOKS	4
#define SIO_INIT_MAX	256	/* fuse_in_header + fuse_init_in is 104 bytes in 7.45 */

#ifndef FOPEN_PASSTHROUGH
#define FOPEN_PASSTHROUGH	(1 << 7)	/* protocol 7.40: the kernel's ABI */
#endif

/* The 7.40 layouts of the two replies the hooks patch. */
struct sio_open_out {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;	/* "padding" before 7.40 */
};

struct sio_init_out {
	uint32_t major;
	uint32_t minor;
	uint32_t max_readahead;
	uint32_t flags;
	uint16_t max_background;
	uint16_t congestion_threshold;
	uint32_t max_write;
	uint32_t time_gran;
	uint16_t max_pages;
	uint16_t map_alignment;
	uint32_t flags2;
	uint32_t max_stack_depth;	/* "unused[0]" before 7.40 */
	uint32_t unused[6];
};

_Static_assert(sizeof(struct sio_open_out) == sizeof(struct fuse_open_out),
	       "fuse_open_out layout");
_Static_assert(sizeof(struct sio_init_out) == sizeof(struct fuse_init_out),
	       "fuse_init_out layout");
_Static_assert(offsetof(struct sio_init_out, flags2) ==
	       offsetof(struct fuse_init_out, flags2), "fuse_init_out.flags2");

struct session_io {
	/* set before the session's first request, read-only afterwards */
	struct session_io_hooks hooks[SIO_MAX_HOOKS];
	unsigned nhooks;
	bool hooked;
	/* set while the kernel's INIT is read, in the main thread, before any worker */
	uint64_t kernel_flags;
	unsigned char init_req[SIO_INIT_MAX];	/* that INIT, as read */
	size_t init_len;
	/* a takeover: INIT to return from the first read; its reply is dropped */
	bool replay, replay_reply;
};

#ifndef CONFIG_FUSE_PASSTHROUGH_API
/* The request the calling worker thread is handling (see session_io.h). */
static __thread struct {
	uint64_t unique;
	uint32_t opcode;
	int32_t backing_id;	/* for this request's OPEN reply; 0 = none */
} cur;
#endif

int session_io_create(struct session_io **out)
{
	struct session_io *sio = calloc(1, sizeof(*sio));

	if (!sio)
		return -ENOMEM;
	*out = sio;
	return 0;
}

void session_io_destroy(struct session_io *sio)
{
	free(sio);
}

int session_io_register(struct session_io *sio, const struct session_io_hooks *h)
{
	if (sio->nhooks == SIO_MAX_HOOKS)
		return -ENOSPC;
	sio->hooks[sio->nhooks++] = *h;
	return 0;
}

bool session_io_hooked(const struct session_io *sio)
{
	return sio && sio->hooked;
}

uint64_t session_io_kernel_flags(const struct session_io *sio)
{
	return sio ? sio->kernel_flags : 0;
}

size_t session_io_init_request(const struct session_io *sio, void *buf, size_t len)
{
	if (!sio || !sio->init_len || len < sio->init_len)
		return 0;
	memcpy(buf, sio->init_req, sio->init_len);
	return sio->init_len;
}

int session_io_replay_init(struct session_io *sio, const void *req, size_t len)
{
	const struct fuse_in_header *in = req;

	if (len < sizeof(*in) || len > sizeof(sio->init_req) || in->opcode != FUSE_INIT ||
	    in->len != len)
		return -EINVAL;
	memcpy(sio->init_req, req, len);
	sio->init_len = len;
	sio->replay = true;
	return 0;
}

void session_io_note_request(uint64_t unique, uint32_t opcode)
{
#ifndef CONFIG_FUSE_PASSTHROUGH_API
	cur.unique = unique;
	cur.opcode = opcode;
	cur.backing_id = 0;
#else
	(void)unique;
	(void)opcode;
#endif
}

void session_io_set_backing_id(int32_t id)
{
#ifndef CONFIG_FUSE_PASSTHROUGH_API
	cur.backing_id = id;
#else
	(void)id;
#endif
}

#ifndef CONFIG_FUSE_PASSTHROUGH_API
/* libfuse passes the session's userdata: the struct sfs. */
static ssize_t sio_read(int fd, void *buf, size_t len, void *userdata)
{
	struct session_io *sio = ((struct sfs *)userdata)->sio;
	const struct fuse_in_header *in = buf;
	ssize_t n;

	if (sio->replay && len >= sio->init_len) {
		/* the main thread, before any worker: see session_io_replay_init() */
		sio->replay = false;
		sio->replay_reply = true;
		memcpy(buf, sio->init_req, sio->init_len);
		n = (ssize_t)sio->init_len;
	} else {
		n = read(fd, buf, len);
	}
	if (n < (ssize_t)sizeof(*in))
		return n;	/* errno is read(2)'s */
	cur.unique = in->unique;
	cur.opcode = in->opcode;
	cur.backing_id = 0;
	if (in->opcode == FUSE_INIT) {
		const struct fuse_init_in *arg = (const void *)(in + 1);
		size_t have = (size_t)n - sizeof(*in);
		uint64_t flags = 0;

		if (have >= offsetof(struct fuse_init_in, flags) + sizeof(arg->flags))
			flags = arg->flags;
		if ((flags & FUSE_INIT_EXT) &&
		    have >= offsetof(struct fuse_init_in, flags2) + sizeof(arg->flags2))
			flags |= (uint64_t)arg->flags2 << 32;
		sio->kernel_flags = flags;
		if ((size_t)n <= sizeof(sio->init_req) && !sio->replay_reply) {
			memcpy(sio->init_req, buf, (size_t)n);
			sio->init_len = (size_t)n;
		}
	}
	return n;
}

/* The replies the hooks change: OPENs that go passthrough, and INIT. */
static void patch_reply(struct session_io *sio, struct iovec *iov)
{
	if (cur.opcode == FUSE_OPEN && cur.backing_id > 0 &&
	    iov[1].iov_len == sizeof(struct sio_open_out)) {
		struct sio_open_out *arg = iov[1].iov_base;

		arg->open_flags |= FOPEN_PASSTHROUGH;
		arg->backing_id = cur.backing_id;
		cur.backing_id = 0;
	} else if (cur.opcode == FUSE_INIT &&
		   iov[1].iov_len >= offsetof(struct sio_init_out, unused)) {
		struct sio_init_out *arg = iov[1].iov_base;
		struct session_io_init init = {
			.kernel_flags = sio->kernel_flags,
			.max_write = arg->max_write,
			.max_pages = (arg->flags & FUSE_MAX_PAGES) ? arg->max_pages : 0,
		};

		for (unsigned i = 0; i < sio->nhooks; i++)
			if (sio->hooks[i].init_reply)
				sio->hooks[i].init_reply(sio->hooks[i].arg, &init);
		if (init.max_stack_depth)
			arg->max_stack_depth = init.max_stack_depth;
		if (init.flags2) {
			arg->flags |= FUSE_INIT_EXT;
			arg->flags2 |= init.flags2;
		}
	}
}

static ssize_t sio_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct session_io *sio = ((struct sfs *)userdata)->sio;
	struct fuse_out_header *out = iov[0].iov_base;
	ssize_t n;

	if (count >= 2 && out->unique && out->unique == cur.unique && !out->error)
		patch_reply(sio, iov);
	if (sio->replay_reply && cur.opcode == FUSE_INIT && out->unique == cur.unique) {
		/* the kernel has had its INIT answered, by the first daemon */
		sio->replay_reply = false;
		return (ssize_t)out->len;
	}
	/* e.g. the request came from a ring: the reply goes back there */
	for (unsigned i = 0; i < sio->nhooks; i++)
		if (sio->hooks[i].reply && sio->hooks[i].reply(sio->hooks[i].arg, iov, count, &n))
			return n;
	return writev(fd, iov, count);
}

static ssize_t sio_splice_receive(int fdin, off_t *offin, int fdout,
				  off_t *offout, size_t len, unsigned int flags,
				  void *userdata)
{
	return splice(fdin, offin, fdout, offout, len, flags);
}

static ssize_t sio_splice_send(int fdin, off_t *offin, int fdout, off_t *offout,
			       size_t len, unsigned int flags, void *userdata)
{
	/* READ replies only: nothing to patch */
	return splice(fdin, offin, fdout, offout, len, flags);
}

static const struct fuse_custom_io sio_io = {
	.read = sio_read,
	.writev = sio_writev,
	.splice_receive = sio_splice_receive,
	.splice_send = sio_splice_send,
};
#endif /* !CONFIG_FUSE_PASSTHROUGH_API */

int session_io_attach(struct session_io *sio, struct fuse_session *se)
{
#ifndef CONFIG_FUSE_PASSTHROUGH_API
	int ret;

	/*
	 * Always: besides the modules' hooks, the read hook keeps the INIT a
	 * daemon taking the mount over replays (fuse/takeover.h).
	 */
	/*
	 * fuse_session_custom_io() only records the callbacks and the fd;
	 * libfuse does not care who opened /dev/fuse.  So the mount keeps
	 * fuse_session_mount() (option parsing, auto_unmount, unmount) and
	 * the hooks go on its descriptor before the first request is read.
	 */
	sio->hooked = true;
	ret = fuse_session_custom_io(se, &sio_io, fuse_session_fd(se));
	return ret;
#else
	return 0;
#endif
}
