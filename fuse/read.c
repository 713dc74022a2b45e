/* SPDX-License-Identifier: Apache-2.0 */
/*
 * read: the FUSE READ handler (read_op, registered in ops.c's sfs_ops).
 *
 * Each chunk the request touches is taken from a chunk the I/O engine
 * filled recently (its buffer, no copy: the reply's iovec points into it)
 * or read from the cache file into a per-thread buffer (which measured
 * faster here than fuse_reply_data from an fd without splice).  Chunks
 * that are neither are handed to the engine (pf_want_submit) and the READ
 * is answered from the engine thread once they are in (aread_want_done):
 * a FUSE worker never waits for the backend.  Without the engine (no
 * io_uring) cache_read() fetches on the worker (read_sync), the fetch
 * counted by fuse/daemon.c.  READ replies are not spliced.
 *
 * In no-open mode (fuse/noopen.h) a READ with no file handle uses the
 * inode's handle from noopen_get(); .stagefs/ files are served from what
 * OPEN (or, in no-open mode, LOOKUP) rendered.  Every READ is replied to
 * exactly once: by read_op's path, or by aread_reply() on the engine thread.
 * Every READ of a dataset file that found its handle is counted once,
 * between stats_read_begin and stats_read_end (src/stats/stats.h), failed or at
 * the end of the file alike: those node totals are also .stagefs/stats's
 * read_requests, read_bytes, read_errors and stall_ms.
 */
#include "read.h"

#include "daemon.h"
#include "fh.h"
#include "noopen.h"
#include "packentry.h"
#include "pushmap.h"
#include "vfiles.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

static int fetch_chunk(void *arg, uint32_t idx, void *buf, size_t len)
{
	struct fh *fh = arg;
	struct sfs *fs = fh->fs;
	struct backend *be = fh->ds->be;
	int r;

	pf_demand_begin(fs->pf, len);	/* the rate cap; background work yields */
	daemon_fetch_begin(fs, fh->cf, idx);
	r = be->ops->read_chunk(be, &fh->attr, idx, buf, len);
	daemon_fetch_end(fs, fh->cf, idx, r, false);	/* counted there, as the engine's */
	pf_demand_end(fs->pf);
	return r;
}


/* How long a range whose READ failed with EIO fails again at once. */
#define READ_FAIL_FAST_MS	2000

/* A READ of [@off, @off + @size) of @fh failed with @err: remember EIO's range. */
static void read_failed(struct fh *fh, uint64_t off, size_t size, int err)
{
	if (err != -EIO)
		return;
	atomic_store(&fh->fail_until_ms, 0);
	atomic_store(&fh->fail_off, off);
	atomic_store(&fh->fail_end, off + size);
	atomic_store(&fh->fail_until_ms, now_ms() + READ_FAIL_FAST_MS);
}

/* Does [@off, @off + @size) meet the range that failed just now? */
static bool read_fails_fast(struct fh *fh, uint64_t off, size_t size)
{
	uint64_t until = atomic_load(&fh->fail_until_ms);

	return until && now_ms() < until && off < atomic_load(&fh->fail_end) &&
	       atomic_load(&fh->fail_off) < off + size;
}

static pthread_key_t rbuf_key;
static pthread_once_t rbuf_once = PTHREAD_ONCE_INIT;

static void rbuf_key_init(void)
{
	pthread_key_create(&rbuf_key, free);
}

/* The calling worker thread's reply buffer (1 MiB, reused for its life). */
static void *reply_buffer(size_t size)
{
	void *b;

	pthread_once(&rbuf_once, rbuf_key_init);
	b = pthread_getspecific(rbuf_key);
	if (!b) {
		if (posix_memalign(&b, 4096, MAX(size, (size_t)1 << 20)))
			return NULL;
		pthread_setspecific(rbuf_key, b);
	}
	return b;
}

/*
 * A READ on the worker thread through cache_read(): the path without the
 * engine, and of no-open mode.  @so: the open file's stats (NULL: none).
 * Every READ is counted, a failed one too (stats_read_end).
 */
static void read_sync(fuse_req_t req, struct sfs *fs, struct fh *fh,
		      struct stats_open *so, size_t size, off_t off, uint32_t uid)
{
	struct stats_read rd;
	struct cache_source src = {
		.fetch = fetch_chunk,
		.arg = fh,
		.uid = cache_owner_or_uid(fh->owner, uid),
		.nothrash = atomic_load(&fh->ds->nothrash),
	};
	void *buf = size <= (1u << 20) ? reply_buffer(size) : malloc(size);
	ssize_t n = -ENOMEM;

	stats_read_begin(fs->stats, &rd, fh->cf, (uint64_t)off, size, fh->ds->be->chunk_size);
	if (buf)
		n = cache_read(fs->cache, fh->cf, (uint64_t)off, buf, size, &src);
	stats_read_end(&rd, so, fuse_req_ctx(req)->pid, uid, n);
	if (n < 0) {
		read_failed(fh, (uint64_t)off, size, (int)n);
		fuse_reply_err(req, (int)-n);
	} else {
		fuse_reply_buf(req, buf, (size_t)n);
	}
	if (size > (1u << 20))
		free(buf);
}

/*
 * @len bytes at @off of @fh's file, which lies at @poff of pack entry
 * @pcf, into @buf, as READ @rd (begun here) of @uid: checked with the pack
 * at its first read after a start, never fetched.  false when the entry no
 * longer holds the pack (evicted, or found damaged: dropped); @rd is then
 * given up, to be counted where the READ goes instead.
 */
static bool pack_range(struct sfs *fs, struct fh *fh, struct cfile *pcf, uint32_t poff,
		       uint64_t off, void *buf, size_t len, uint32_t uid,
		       struct stats_read *rd)
{
	struct cache_source check = { .uid = uid };	/* checks, never fetches */

	stats_read_begin(fs->stats, rd, pcf, poff + off, len, fh->ds->be->chunk_size);
	if (!len || cache_read(fs->cache, pcf, poff + off, buf, len, &check) == (ssize_t)len)
		return true;
	stats_read_detach(rd);
	stats_read_drop_reader(rd);
	return false;
}

/*
 * A READ of a small file served from its pack's cache entry @pcf, at
 * @poff.  false when the entry no longer holds the pack: the READ then
 * goes the file's own way, and so does every later READ of @fh.
 */
static bool read_pack(fuse_req_t req, struct sfs *fs, struct fh *fh, struct cfile *pcf,
		      uint32_t poff, struct stats_open *so, size_t size, off_t off, uint32_t uid)
{
	uint64_t end = MIN((uint64_t)off + size, fh->attr.size);
	size_t len = (uint64_t)off < end ? (size_t)(end - (uint64_t)off) : 0;
	struct stats_read rd;
	void *buf = reply_buffer(size);

	if (!buf)
		return false;
	if (!pack_range(fs, fh, pcf, poff, (uint64_t)off, buf, len, uid, &rd)) {
		fh->pcf_gone = true;
		return false;
	}
	stats_read_end(&rd, so, fuse_req_ctx(req)->pid, uid, (ssize_t)len);
	fuse_reply_buf(req, buf, len);
	return true;
}

void read_push_charge_kept(struct sfs *fs, struct fh *fh)
{
	stats_open_cached(fs->stats, &fh->so, fh->attr.size, fh->ds->be->chunk_size);
	stats_node_add(fs->stats, STATS_NODE_PUSH_KEPT, 1);
}

void read_push(fuse_req_t req, struct sfs *fs, struct fh *fh, fuse_ino_t ino, size_t max)
{
	uint32_t uid = fuse_req_ctx(req)->uid;
	size_t len = (size_t)fh->attr.size;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);
	struct stats_read rd;
	int fd = -1, ret;
	void *buf;

	if (!fh->pcf || !len || len > max || len > (1u << 20) || !fs->se)
		return;
	if (pushmap_has(fs->pushed, ino)) {
		/* the kernel holds the pages of the last push: no copy again */
		read_push_charge_kept(fs, fh);
		return;
	}
	if (fs->splice_write) {
		/*
		 * Spliced from the entry's page cache to the kernel's pages
		 * for the file: one copy, by the kernel.  Pinned, so that no
		 * eviction punches the range out while it is read.
		 */
		cache_file_pin(fs->cache, fh->pcf);
		if (cache_file_verify_fd(fs->cache, fh->pcf, &fd)) {
			cache_file_unpin(fs->cache, fh->pcf);
			return;	/* gone or damaged: its READs find out */
		}
		stats_read_begin(fs->stats, &rd, fh->pcf, fh->poff, len, fh->ds->be->chunk_size);
		bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
		bv.buf[0].fd = fd;
		bv.buf[0].pos = fh->poff;
	} else {
		if (!(buf = reply_buffer(len)) ||
		    !pack_range(fs, fh, fh->pcf, fh->poff, 0, buf, len, uid, &rd))
			return;
		bv.buf[0].mem = buf;
	}
	ret = fuse_lowlevel_notify_store(fs->se, ino, 0, &bv, 0);
	if (fd >= 0) {
		cache_file_fd_release(fs->cache, fh->pcf);
		cache_file_unpin(fs->cache, fh->pcf);
	}
	if (ret) {
		/* not stored: its READs come, and are counted then */
		stats_read_detach(&rd);
		stats_read_drop_reader(&rd);
		return;
	}
	pushmap_add(fs->pushed, ino);
	stats_read_end(&rd, &fh->so, fuse_req_ctx(req)->pid, uid, (ssize_t)len);
	stats_node_add(fs->stats, STATS_NODE_READ_PUSHES, 1);
}

/* A READ is at most 1 MiB (max_read_kb) and chunks at least 64 KiB. */
#define READ_PIECES	18

/* One chunk's share of a READ. */
struct piece {
	struct pf_want w;	/* w.arg: the aread */
	size_t coff;		/* offset in the chunk */
	size_t len;
	size_t pos;		/* offset in the reply */
	bool from_disk;		/* read from the cache file into the reply buffer */
	bool wanted;		/* handed to the engine */
};

/* A READ in progress; freed by whoever replies. */
struct aread {
	fuse_req_t req;
	struct sfs *fs;
	struct fh *fh;	/* the kernel sends no RELEASE while a READ is out */
	pid_t pid;
	uint32_t uid;
	uint64_t off;
	size_t size;		/* bytes asked, clipped at end of file */
	unsigned n;
	_Atomic unsigned left;	/* wants not done yet */
	char *dbuf;		/* pieces read from disk, when the reply is async */
	struct stats_read rd;
	struct stats_open *so;	/* &fh->so, &so_own, or NULL (no-open mode) */
	struct stats_open so_own;	/* a no-open READ at 0: its own "open" */
	struct piece p[READ_PIECES];
};

/*
 * Reply to @ar with every piece, or with the error of the first failed
 * one: never short before end of file (the kernel would take a short
 * READ as the file's end and cache that size).  Count it, release
 * everything.
 */
static void aread_reply(struct aread *ar, const char *dbuf)
{
	struct sfs *fs = ar->fs;
	struct iovec iov[READ_PIECES];
	ssize_t n = 0;
	int err = 0;
	unsigned k;

	for (k = 0; k < ar->n; k++) {
		struct piece *p = &ar->p[k];

		if (p->from_disk) {
			iov[k].iov_base = (void *)(dbuf + p->pos);
		} else if (p->w.res < 0) {
			err = p->w.res;
			break;
		} else {
			iov[k].iov_base = (char *)p->w.data + p->coff;
			if (p->w.fetched)
				stats_read_fetched(&ar->rd, p->w.len);
		}
		iov[k].iov_len = p->len;
		n += (ssize_t)p->len;
	}
	if (err)
		n = err;
	stats_read_end(&ar->rd, ar->so, ar->pid, ar->uid, n);
	if (n < 0) {
		read_failed(ar->fh, ar->off, ar->size, (int)n);
		fuse_reply_err(ar->req, (int)-n);
	} else {
		fuse_reply_iov(ar->req, iov, (int)k);
	}
	for (k = 0; k < ar->n; k++)
		pf_want_release(fs->pf, &ar->p[k].w);
}

/* The engine thread: the last chunk of an async READ is in. */
static void aread_want_done(struct pf_want *w)
{
	struct aread *ar = w->arg;
	struct sfs *fs = ar->fs;

	if (atomic_fetch_sub(&ar->left, 1) != 1)
		return;
	/* its own fetch, or a fill that readahead or warmup had started */
	stats_read_waited(&ar->rd);
	aread_reply(ar, ar->dbuf);
	pf_note_async_read(fs->pf);
	free(ar->dbuf);
	free(ar);
	atomic_fetch_sub(&fs->reads_in_engine, 1);
}

/*
 * Serve what is at hand (recent fill buffers, the cache file); hand the rest
 * to the engine.  Returns true if the READ was answered or handed over,
 * false if it must take read_sync() instead.
 */
static bool read_engine(fuse_req_t req, struct sfs *fs, struct fh *fh,
			struct stats_open *so, size_t size, off_t off, uint32_t uid)
{
	uint32_t csize = fh->ds->be->chunk_size;
	uint64_t end = MIN((uint64_t)off + size, fh->attr.size);
	struct pf_want *want[READ_PIECES];
	unsigned nwant = 0;
	struct aread *ar;
	char *rbuf;

	if ((uint64_t)off >= end) {
		/* at or past the end: counted as read_sync() counts it */
		struct stats_read rd;

		stats_read_begin(fs->stats, &rd, fh->cf, (uint64_t)off, 0, csize);
		stats_read_end(&rd, so, fuse_req_ctx(req)->pid, uid, 0);
		fuse_reply_buf(req, NULL, 0);
		return true;
	}
	if ((end - 1) / csize - (uint64_t)off / csize + 1 > READ_PIECES)
		return false;
	rbuf = reply_buffer(size);
	ar = calloc(1, sizeof(*ar));
	if (!rbuf || !ar) {
		free(ar);
		return false;
	}
	ar->req = req;
	ar->fs = fs;
	ar->fh = fh;
	ar->so = so;
	ar->off = (uint64_t)off;
	if (so && so != &fh->so) {
		/* the caller's is on its stack: the READ may outlive it */
		ar->so_own = *so;
		ar->so = &ar->so_own;
	}
	ar->pid = fuse_req_ctx(req)->pid;
	ar->uid = uid;
	ar->size = (size_t)(end - (uint64_t)off);
	stats_read_begin(fs->stats, &ar->rd, fh->cf, (uint64_t)off, ar->size, csize);
	/* here, not at the reply: that may run on the engine thread */
	stats_read_reader(&ar->rd, ar->so, ar->pid, ar->uid);
	for (uint64_t pos = (uint64_t)off; pos < end; ar->n++) {
		struct piece *p = &ar->p[ar->n];
		uint32_t idx = (uint32_t)(pos / csize);

		p->coff = (size_t)(pos % csize);
		p->len = (size_t)MIN(end - pos, (uint64_t)csize - p->coff);
		p->pos = (size_t)(pos - (uint64_t)off);
		p->w = (struct pf_want){
			.be = fh->ds->be, .attr = &fh->attr, .cf = fh->cf,
			.idx = idx, .uid = cache_owner_or_uid(fh->owner, uid),
			.nothrash = atomic_load(&fh->ds->nothrash),
			.done = aread_want_done, .arg = ar,
		};
		if (!pf_want_peek(fs->pf, &p->w)) {
			ssize_t r = cache_read_cached(fs->cache, fh->cf, pos, rbuf + p->pos, p->len);

			if (r == (ssize_t)p->len) {
				p->from_disk = true;
			} else {
				p->wanted = true;
				want[nwant++] = &p->w;
			}
		}
		pos += p->len;
	}
	if (!nwant) {
		/* all at hand: answer now, pointing into the fill buffers */
		aread_reply(ar, rbuf);
		free(ar);
		return true;
	}
	for (unsigned k = 0; k < ar->n && !ar->dbuf; k++) {
		if (ar->p[k].from_disk && !(ar->dbuf = malloc(ar->size)))
			goto out_sync;
	}
	for (unsigned k = 0; ar->dbuf && k < ar->n; k++)
		if (ar->p[k].from_disk)
			memcpy(ar->dbuf + ar->p[k].pos, rbuf + ar->p[k].pos, ar->p[k].len);
	atomic_init(&ar->left, nwant);
	stats_read_detach(&ar->rd);
	atomic_fetch_add(&fs->reads_in_engine, 1);
	if (pf_want_submit(fs->pf, want, nwant) == 0)
		return true;	/* aread_want_done() replies */
	atomic_fetch_sub(&fs->reads_in_engine, 1);
out_sync:
	/* no engine after all (stopping): drop what we hold, go the slow way */
	stats_read_detach(&ar->rd);
	stats_read_drop_reader(&ar->rd);	/* the slow way begins its own */
	for (unsigned k = 0; k < ar->n; k++)
		pf_want_release(fs->pf, &ar->p[k].w);
	free(ar->dbuf);
	free(ar);
	return false;
}

/* READ of a virtual file: rendered at OPEN, or (no-open mode) at LOOKUP for the inode's user. */
static void read_virtual(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			 struct fuse_file_info *fi)
{
	struct sfs *fs = fuse_req_userdata(req);
	int idx = vfiles_index(ino);
	void *buf;
	ssize_t n;

	if (idx < 0) {
		fuse_reply_buf(req, NULL, 0);	/* the no-open probe */
		return;
	}
	buf = size <= (1u << 20) ? reply_buffer(size) : malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (fi->fh) {
		/*
		 * Reply from a copy: once the kernel has the reply, the reader
		 * may close and RELEASE free @v in another thread before our
		 * writev() returns, and ASan checks the iovec after the call
		 * (docs/testing.md, "Sanitizers").
		 */
		int err;
		struct vfh *v = vfh_of(fs, req, ino, fi->fh, &err);
		size_t from;

		if (!v) {
			if (size > (1u << 20))
				free(buf);
			fuse_reply_err(req, -err);
			return;
		}
		from = MIN((size_t)off, v->len);
		n = (ssize_t)MIN(size, v->len - from);
		if (n)
			memcpy(buf, v->data + from, (size_t)n);
	} else {
		n = noopen_vfile_read(fs->no, idx, vfiles_uid(ino), (uint64_t)off, buf, size);
	}
	fuse_reply_buf(req, buf, (size_t)n);
	if (size > (1u << 20))
		free(buf);
}

void read_op(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi)
{
	struct sfs *fs = fuse_req_userdata(req);

	if (ino >= SFS_VIRT_BASE) {
		read_virtual(req, ino, size, off, fi);
		return;
	}

	struct fh *fh = NULL;
	struct noopen_ent *noe = NULL;
	struct stats_open *so = NULL, first = { 0 };
	uint32_t uid = fuse_req_ctx(req)->uid;

	if (fi->fh) {
		int err;

		fh = fh_of(fs, req, ino, fi->fh, &err);
		if (!fh) {
			fuse_reply_err(req, -err);
			return;
		}
		so = &fh->so;
	} else {
		/* no-open mode: the inode's handle; a READ at 0 starts a file */
		int ret = noopen_get(fs->no, ino, &noe, &fh);

		if (ret) {
			fuse_reply_err(req, -ret);
			return;
		}
		if (!off) {
			so = &first;
			pf_hint_open(fs->pf, ino, uid, fuse_req_ctx(req)->pid);
			pf_stage_open(fs->pf, fh->ds->be, fh->ds->name,
				      atomic_load(&fh->ds->epoch_staging), uid,
				      fuse_req_ctx(req)->gid, 0, fh->attr.ino);
		}
	}
	if (!fh->pcf_gone && size <= (1u << 20) && packentry_maybe(fh->ds->be, &fh->attr)) {
		struct cfile *pcf = fh->pcf, *got = NULL;
		uint32_t poff = fh->poff;
		bool done;

		/* opened before its pack came in: the pack's entry, if it has it now */
		if (!pcf && !cache_chunk_present(fs->cache, fh->cf, 0) &&
		    !packentry_get(fs->cache, fh->ds->be, &fh->attr, &got, &poff))
			pcf = got;
		done = pcf && read_pack(req, fs, fh, pcf, poff, so, size, off, uid);
		if (got)
			cache_file_put(fs->cache, got);
		if (done) {
			noopen_put(fs->no, noe);
			return;
		}
	}
	if (read_fails_fast(fh, (uint64_t)off, size)) {
		/* the kernel's READ of a page its readahead just failed on */
		struct stats_read rd;

		stats_read_begin(fs->stats, &rd, fh->cf, (uint64_t)off, size, fh->ds->be->chunk_size);
		stats_read_end(&rd, so, fuse_req_ctx(req)->pid, uid, -EIO);
		fuse_reply_err(req, EIO);
		noopen_put(fs->no, noe);
		return;
	}
	pf_ra_read(fh->ra, (uint64_t)off, size, cache_owner_or_uid(fh->owner, uid));
	/*
	 * A READ handed to the engine may be answered after we drop the
	 * no-open handle reference: the kernel's open file pins the inode,
	 * so no FORGET (which frees the handle) comes while a READ is out.
	 */
	if (!(pf_has_engine(fs->pf) && size <= (1u << 20) &&
	      read_engine(req, fs, fh, so, size, off, uid)))
		read_sync(req, fs, fh, so, size, off, uid);
	noopen_put(fs->no, noe);
}
