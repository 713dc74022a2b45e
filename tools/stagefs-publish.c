/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stagefs-publish: publish a directory tree as a new version of a dataset in
 * a Ceph pool (`stagefs publish [options] DIR rados://POOL/NAME`).
 *
 * Design.  One thread walks DIR (never following symlinks; symlinks are
 * stored as symlinks; other file types are skipped with a warning), reads
 * each regular file in chunk_size pieces into one of -j slots, and names
 * each piece by XXH3-128 of its bytes.  A small chunk (up to
 * WRITE_FIRST_MAX: small files) is written at once with an aio op that
 * creates sfs.chunk.<id> exclusively: a new chunk costs one round trip, as
 * an object of `rados bench write` does, and the OSD's -EEXIST tells a
 * chunk already stored (by an earlier publish, or earlier in this tree),
 * which then goes the stat way below.  A larger chunk not seen earlier in
 * this run (a set of ids) gets an aio stat first; if the object is missing
 * (or has the wrong size) it starts an aio write_full of it; if it is there but
 * older than SFS_RADOS_FRESHEN_S, it sets the object's sfs.seen xattr, which
 * renews its mtime, so `stagefs gc` leaves it alone until the manifest that
 * names it is written (docs/gc.md).  Up to -j chunks
 * are in flight at once; the librados completion callback only queues the
 * slot and signals (STYLE 8), and the walking thread handles completions
 * whenever it needs a free slot.  Chunk objects are content-addressed and
 * shared by all datasets in the pool, so an unchanged tree uploads nothing.
 *
 * Packs.  A regular file of 1 .. --pack-max bytes (default chunk_size / 4)
 * is not a chunk object of its own: every object costs the OSD an op on
 * each cold read, whatever its size.  Small files, in walk order, are read
 * whole and appended to a pack buffer of chunk_size bytes; when the next
 * one does not fit, the pack is flushed: named sfs.pack.<id> by the
 * XXH3-128 of the bytes used, stored as a large chunk is (the set of pack
 * ids seen, stat, write_full or freshen; its buffer changes places with
 * the slot's), and added to the builder, then its files at their offsets
 * (each with one chunk id, the XXH3-128 of its own bytes: the builder
 * needs the pack first, so the files wait, path, attributes and id, until
 * the flush).  The last pack is flushed after the walk.  A hard link to a
 * packed file is a manifest_builder_link() as for any file; the builder
 * resolves links at finish, when the file is in.
 *
 * Versions reuse packs: before the walk, the latest version's manifest is
 * opened as a mount opens it (filled part by part into an unlinked sparse
 * file, manifest_lazy.h), and if it has the same chunk size, each file of
 * its packs goes into a hash map, chunk id -> (pack, offset, size).  A
 * small file of this tree whose chunk id and size are there is named at
 * that place (each place once: identical files of the old version each
 * had their own) instead of being packed again.  Every old pack is
 * stat'ed before the walk, -j at once; the first time the walk uses one:
 * if it is gone or has the wrong size, its files are packed afresh; if it
 * is older than SFS_RADOS_FRESHEN_S, its sfs.seen xattr is set, as for a
 * chunk and in flight as chunks are, so that gc spares it until the new
 * manifest names it (a pack gc removed meanwhile fails the publish: its
 * files are named in it already).  No previous version, an
 * unreadable or packless manifest, or another chunk size: nothing reused.
 * A pack is kept as long as any version names any of its files (gc); its
 * bytes of files gone stay with it.
 *
 * Identical small files are stored once: a map (idmap.h) of the small
 * files named in this run, chunk id -> (pack, offset), names a file whose
 * bytes are there at that place: a pack written already, the one being
 * filled (its index is set when it is flushed) or a pack of the version
 * before.
 *
 * When every chunk is stored, the manifest is built (streamed into an
 * unlinked temporary file, so its bytes are never all in memory) and written as
 * sfs.manifest.NAME.V with an exclusive create: V is one more than the
 * current sfs.dataset.NAME, and on -EEXIST (a concurrent publish took V) the
 * next V is tried.  Last, sfs.dataset.NAME is pointed at V unless a newer
 * version already took it.  A crash before that leaves the old version
 * current; chunks uploaded so far are reused by the next run.
 *
 * A file that changes while it is read (size or mtime) fails the publish: a
 * manifest never describes bytes that were not uploaded (packed or not).  The names of one
 * file (st_nlink > 1, same st_dev and st_ino) are read once and recorded as
 * hard links of the first name walked.
 *
 * Exit status: 0 published, 1 anything else (with a message on stderr).
 */
#include "htab.h"
#include "idmap.h"
#include "idset.h"
#include "manifest/inomap.h"
#include "json.h"
#include "log.h"
#include "backend/backend.h"
#include "manifest/manifest.h"
#include "manifest/manifest_lazy.h"
#include "backend/rados.h"
#include "util.h"

#include <dirent.h>
#include <liburing.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_CHUNK	(4 * MiB)
#define DEFAULT_JOBS	16
#define DEFAULT_TIMEOUT	30000

enum slot_state { SLOT_FREE, SLOT_CREATE, SLOT_STAT, SLOT_FRESHEN, SLOT_WRITE };

/* --pack-max by default: this fraction of the chunk size */
#define DEFAULT_PACK_DIV	4
#define PACK_MAX_UNSET	UINT64_MAX

/*
 * Chunks up to this size are written first and asked about after (one
 * round trip when new, as `rados bench write` does); larger ones are asked
 * about first, so an unchanged tree of big files uploads nothing.
 */
#define WRITE_FIRST_MAX	(128 * 1024)

/* small files opened, then read at once through io_uring (batch_small()) */
#define BATCH_MAX	64

/* A small file read into the pack being filled, added to the manifest when it is flushed. */
struct pending {
	char *rel;
	struct sfs_attr a;
	struct sfs_id chunk;	/* XXH3-128 of its bytes */
	uint32_t off;		/* where they start in the pack */
	bool first;		/* its bytes were appended (not a copy of an earlier file's) */
};

/* pub.placed: where a pack holds bytes this run named, pack << 32 | offset */
#define PLACE(pack, off)	((uint64_t)(pack) << 32 | (uint32_t)(off))
#define PLACE_PENDING		UINT32_MAX	/* the pack being filled: no index yet */

/* A pack of the previous version, and what this run made of it. */
enum { OLD_UNKNOWN = -1, OLD_GONE = -2 };
struct oldpack {
	struct sfs_id id;
	uint64_t size;
	int64_t index;		/* OLD_UNKNOWN, OLD_GONE, or its pack index in the builder */
	/* its stat, asked for every old pack before the walk (oldpacks_stat()) */
	int stat_rc;
	uint64_t osize;
	time_t omtime;
};

/* A file of the previous version stored in one of its packs: where its bytes lie. */
struct oldmember {
	struct htab_node node;	/* in pub.oldmap, under chunk.lo */
	struct sfs_id chunk;
	uint64_t size;
	uint32_t pack;		/* index into pub.oldpacks */
	uint32_t off;
	bool taken;		/* a file of this run lies there already */
};

/* One chunk in flight; its buffer is allocated with the publisher. */
struct slot {
	struct pub *p;
	enum slot_state state;
	bool pack;		/* a pack, not a chunk (for the counts) */
	bool oldpack;		/* SLOT_FRESHEN of a pack of the version before: no bytes here */
	rados_completion_t c;
	rados_write_op_t op;	/* SLOT_FRESHEN, SLOT_WRITE */
	char *buf;
	size_t len;
	char oid[SFS_RADOS_OID_MAX];
	uint64_t osize;		/* aio stat output */
	time_t omtime;
};

struct pub {
	/* options */
	uint32_t chunk_size;
	uint64_t pack_max;	/* files of 1 .. pack_max bytes go into packs; 0: none */
	int jobs;
	struct sfs_rados_opts ro;	/* --ceph-conf, --id, --keyring, --timeout */
	bool quiet, json;
	const char *dir;
	const char *uri;
	struct sfs_rados_uri target;	/* the URI, parsed (owns the strings below) */
	const char *pool, *name, *nspace;

	rados_t cl;
	rados_ioctx_t io;
	struct manifest_builder *mb;
	struct idset seen;	/* chunk ids handled in this run */
	struct idset seen_packs;	/* pack ids handled in this run */
	struct inomap links;	/* files with st_nlink > 1: their first name */

	/* the pack being filled (chunk_size bytes) and its files */
	char *pack;
	size_t pack_used;
	struct pending *pend;
	size_t npend, pend_cap;
	char *scratch;		/* pack_max bytes: a file that does not fit the pack */
	struct io_uring ring;	/* batch_small()'s reads */
	bool ring_ok;		/* else they are pread(2)s */

	/* the previous version's packs, for reuse (none: noldmem 0) */
	uint64_t prev_version;
	struct oldpack *oldpacks;
	uint32_t noldpacks;
	struct oldmember *oldmem;
	size_t noldmem;
	struct htab oldmap;	/* chunk id -> oldmember (several for repeated files) */
	struct idmap placed;	/* chunk id -> PLACE() of the small files named so far */

	struct slot *slots;
	int *freelist;		/* indexes of free slots, owned by the main thread */
	int nfree;

	pthread_mutex_t lock;
	pthread_cond_t cond;	/* a completion was queued */
	int *doneq;		/* ring of completed slot indexes; protected by lock */
	int dq_head, dq_n;	/* protected by lock */

	/* statistics, main thread only */
	uint64_t files, dirs, symlinks, hardlinks, skipped;
	uint64_t bytes, chunks, new_chunks, new_bytes, dup_chunks, fresh_chunks;
	uint64_t packs, new_packs, dup_packs, fresh_packs, reused_packs, packed_files;
	uint64_t same_files;	/* small files named where an identical one lies */
	uint64_t t0, last_progress;
	uint64_t t0_wall;	/* wall_s() at the start: objects newer are this run's */
	bool tty;
	size_t manifest_len;
	uint64_t version;

	bool failed;		/* first error already reported */
};

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void usage(FILE *f)
{
	fprintf(f,
"usage: stagefs publish [options] DIR rados://POOL/NAME[?OPT[&OPT]...]\n"
"\n"
"Upload the tree under DIR as the next version of dataset NAME in a Ceph\n"
"pool.  Data is stored as content-addressed chunk objects shared by every\n"
"dataset in the pool, so unchanged data is never uploaded twice; the new\n"
"version becomes the one rados://POOL/NAME mounts.\n"
"\n"
"options:\n"
"  --chunk-size SIZE  chunk size, a power of two from 4K to 64M (default 4M)\n"
"  --pack-max SIZE    store files of 1 byte to SIZE together in pack objects\n"
"                     of up to a chunk (default: chunk size / %d; 0: never)\n"
"  -j N               chunk operations in flight (default %d)\n"
"  --ceph-conf FILE   ceph.conf (default $CEPH_CONF, then /etc/ceph/ceph.conf)\n"
"  --id ID            cephx client id (default admin)\n"
"  --keyring FILE     cephx keyring (default: from ceph.conf)\n"
"  --timeout T        bound on every RADOS operation (default 30s)\n"
"  -q, --quiet        no progress and no summary; print only the result URI\n"
"  --json             print the final summary as JSON on stdout\n"
"  -h, --help         this text\n"
"\n"
"Exit status: 0 published, 1 failed.\n", DEFAULT_PACK_DIV, DEFAULT_JOBS);
}

static void die_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "stagefs publish: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see stagefs publish --help)\n");
	exit(1);
}

/* Report an error once; the publish will fail. */
static void fail(struct pub *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(struct pub *p, const char *fmt, ...)
{
	va_list ap;

	if (p->failed)
		return;
	p->failed = true;
	if (p->tty && !p->quiet)
		fputc('\n', stderr);
	fprintf(stderr, "stagefs publish: error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- progress ---- */

static double mbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / 1e6 / ((double)ns / 1e9) : 0.0;
}

static void progress(struct pub *p, bool force)
{
	uint64_t now = now_ns();
	char b1[32], b2[32];

	if (p->quiet)
		return;
	if (!force && now - p->last_progress < (p->tty ? 250000000ULL : 2000000000ULL))
		return;
	p->last_progress = now;
	fmt_size(p->bytes, b1, sizeof(b1));
	fmt_size(p->new_bytes, b2, sizeof(b2));
	fprintf(stderr, "%sfiles %" PRIu64 ", %s read, %s new, %.1f MB/s%s",
		p->tty ? "\r" : "", p->files, b1, b2,
		mbps(p->bytes, now - p->t0), p->tty ? "\033[K" : "\n");
	fflush(stderr);
}

/* ---- chunk pipeline ---- */

/* librados thread: queue the slot for the main thread, nothing else. */
static void slot_complete_cb(rados_completion_t c, void *arg)
{
	struct slot *s = arg;
	struct pub *p = s->p;

	pthread_mutex_lock(&p->lock);
	p->doneq[(p->dq_head + p->dq_n) % p->jobs] = (int)(s - p->slots);
	p->dq_n++;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

static void slot_free(struct pub *p, struct slot *s)
{
	s->state = SLOT_FREE;
	p->freelist[p->nfree++] = (int)(s - p->slots);
}

/* A new write op for @s; false (the slot freed, the publish failed) without memory. */
static bool slot_new_op(struct pub *p, struct slot *s)
{
	s->op = rados_create_write_op();
	if (!s->op) {
		fail(p, "out of memory");
		slot_free(p, s);
		return false;
	}
	return true;
}

/* Start s->op on chunk s->oid as @state; if it cannot start, "cannot @what" fails the publish. */
static void slot_operate(struct pub *p, struct slot *s, enum slot_state state,
			 const char *what)
{
	int rc;

	rados_aio_create_completion2(s, slot_complete_cb, &s->c);
	s->state = state;
	rc = rados_aio_write_op_operate(s->op, p->io, s->c, s->oid, NULL, 0);
	if (rc < 0) {
		rados_aio_release(s->c);
		rados_release_write_op(s->op);
		s->op = NULL;
		fail(p, "cannot %s %s: %s", what, s->oid, strerror(-rc));
		slot_free(p, s);
	}
}

static void slot_start_write(struct pub *p, struct slot *s)
{
	if (!slot_new_op(p, s))
		return;
	sfs_rados_write_immutable(s->op, s->buf, s->len);
	slot_operate(p, s, SLOT_WRITE, "write");
}

/*
 * A small chunk: store it unless the object exists (exclusive create and
 * write in one op).  New: done in one round trip.  -EEXIST: the object is
 * there, and the stat path decides whether it needs freshening or fixing.
 */
static void slot_start_create(struct pub *p, struct slot *s)
{
	if (!slot_new_op(p, s))
		return;
	rados_write_op_create(s->op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
	sfs_rados_write_immutable(s->op, s->buf, s->len);
	slot_operate(p, s, SLOT_CREATE, "write");
}

/*
 * The chunk is stored but its mtime is old: set its sfs.seen xattr, which
 * makes the mtime now, so that a concurrent `stagefs gc` (which spares
 * chunks younger than its grace period) cannot remove it before the
 * manifest naming it is written (rados.h, SFS_RADOS_FRESHEN_S).  The op
 * asserts the object exists: if gc removed it meanwhile, it is written.
 */
/*
 * Into @op: set the object's sfs.seen xattr to now (which renews its
 * mtime), asserting it exists.  For chunks and reused packs alike.
 */
static void freshen_op_prep(rados_write_op_t op)
{
	char now[32];

	snprintf(now, sizeof(now), "%020" PRIu64, wall_s());
	rados_write_op_assert_exists(op);
	rados_write_op_setxattr(op, SFS_RADOS_SEEN_XATTR, now, strlen(now));
}

static void slot_start_freshen(struct pub *p, struct slot *s)
{
	if (!slot_new_op(p, s))
		return;
	freshen_op_prep(s->op);
	slot_operate(p, s, SLOT_FRESHEN, "update");
}

static void slot_start_stat(struct pub *p, struct slot *s)
{
	int rc;

	rados_aio_create_completion2(s, slot_complete_cb, &s->c);
	s->state = SLOT_STAT;
	rc = rados_aio_stat(p->io, s->oid, s->c, &s->osize, &s->omtime);
	if (rc < 0) {
		rados_aio_release(s->c);
		fail(p, "cannot stat %s: %s", s->oid, strerror(-rc));
		slot_free(p, s);
	}
}

/* Handle one finished operation of slot @s. */
static void slot_done(struct pub *p, struct slot *s)
{
	int rc = rados_aio_get_return_value(s->c);

	rados_aio_release(s->c);
	s->c = NULL;
	if (s->op) {
		rados_release_write_op(s->op);
		s->op = NULL;
	}
	if (s->state == SLOT_CREATE) {
		if (rc == -EEXIST) {
			if (!p->failed)
				slot_start_stat(p, s);
			else
				slot_free(p, s);
			return;
		}
		s->state = SLOT_WRITE;	/* its outcome counts as a write's */
	}
	if (s->state == SLOT_STAT && rc == 0 && s->osize == s->len &&
	    (uint64_t)s->omtime >= p->t0_wall) {
		/* stored during this run: a chunk repeated in the tree (or
		 * stored by a publish running beside this one) */
		if (s->pack)
			p->dup_packs++;
		else
			p->dup_chunks++;
		slot_free(p, s);
		return;
	}
	if (s->state == SLOT_STAT && rc == 0 && s->osize == s->len &&
	    (uint64_t)s->omtime + SFS_RADOS_FRESHEN_S < wall_s()) {
		if (!p->failed)
			slot_start_freshen(p, s);
		else
			slot_free(p, s);
		return;
	}
	if (s->state == SLOT_FRESHEN) {
		if (rc == 0) {
			if (s->pack)
				p->fresh_packs++;
			else
				p->fresh_chunks++;
			slot_free(p, s);
			return;
		}
		if (rc != -ENOENT) {
			fail(p, "cannot update %s: %s", s->oid, strerror(-rc));
			slot_free(p, s);
			return;
		}
		if (s->oldpack) {
			/* its files are named in it already, and its bytes are not here */
			fail(p, "%s of %s@%" PRIu64 " was removed while this publish reused it "
			     "(a gc beside it?): publish again", s->oid, p->name, p->prev_version);
			slot_free(p, s);
			return;
		}
		/* removed by gc after our stat: store it again */
		rc = -ENOENT;
		s->state = SLOT_STAT;
	}
	if (s->state == SLOT_STAT) {
		if (rc == 0 && s->osize == s->len) {
			slot_free(p, s);	/* already in the pool, fresh */
			return;
		}
		if (rc == 0)
			fprintf(stderr, "stagefs publish: warning: %s holds %" PRIu64 " bytes instead of %zu; rewriting it\n",
				s->oid, s->osize, s->len);
		if (rc == 0 || rc == -ENOENT) {
			if (!p->failed)
				slot_start_write(p, s);
			else
				slot_free(p, s);
			return;
		}
		fail(p, "cannot stat %s: %s", s->oid, strerror(-rc));
	} else if (rc < 0) {
		fail(p, "cannot write %s: %s", s->oid, strerror(-rc));
	} else {
		if (s->pack)
			p->new_packs++;
		else
			p->new_chunks++;
		p->new_bytes += s->len;
	}
	slot_free(p, s);
}

/* Wait for at least one completion and handle all that are queued. */
static void reap(struct pub *p)
{
	int idx[256];
	int n = 0;

	pthread_mutex_lock(&p->lock);
	while (p->dq_n == 0)
		pthread_cond_wait(&p->cond, &p->lock);
	while (p->dq_n && n < (int)ARRAY_SIZE(idx)) {
		idx[n++] = p->doneq[p->dq_head];
		p->dq_head = (p->dq_head + 1) % p->jobs;
		p->dq_n--;
	}
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < n; i++) {
		struct slot *s = &p->slots[idx[i]];

		/* the callback may run before aio_write_full returns */
		rados_aio_wait_for_complete_and_cb(s->c);
		slot_done(p, s);
	}
}

static struct slot *slot_get(struct pub *p)
{
	struct slot *s;

	while (p->nfree == 0)
		reap(p);
	s = &p->slots[p->freelist[--p->nfree]];
	s->pack = false;
	s->oldpack = false;
	return s;
}

static void drain(struct pub *p)
{
	while (p->nfree < p->jobs)
		reap(p);
}

/* ---- walking ---- */

static void attr_from_stat(const struct stat *st, struct sfs_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->mode = st->st_mode;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
	a->size = (uint64_t)st->st_size;
	a->atime = st->st_atim;
	a->mtime = st->st_mtim;
	a->ctime = st->st_ctim;
	/* directories: computed; files: each entry is its own inode */
	a->nlink = S_ISDIR(st->st_mode) ? 0 : 1;
}

/* ---- packs ---- */

/*
 * Store the pack being filled: its id is the XXH3-128 of its bytes; the
 * manifest gets the pack, then its files; the object goes the way of a
 * large chunk (stat, then write or freshen), its bytes handed to a slot
 * (the slot's free buffer becomes the next pack's).  0, or -1 when the
 * publish failed.
 */
static int pack_flush(struct pub *p)
{
	struct sfs_id id;
	struct slot *s;
	uint32_t idx;
	size_t i = 0;
	char *t;
	int rc, added;

	if (!p->npend)
		return 0;
	sfs_id_of(p->pack, p->pack_used, &id);
	rc = manifest_builder_add_pack(p->mb, &id, p->pack_used, &idx);
	if (rc) {
		fail(p, "cannot add a pack to the manifest: %s", strerror(-rc));
		goto out_fail;
	}
	for (; i < p->npend; i++) {
		struct pending *pe = &p->pend[i];

		rc = manifest_builder_add_packed(p->mb, pe->rel, &pe->a, &pe->chunk, idx,
						 pe->off);
		if (!rc && pe->first)
			rc = idmap_put(&p->placed, &pe->chunk, PLACE(idx, pe->off));
		if (rc) {
			fail(p, "cannot add %s to the manifest: %s", pe->rel, strerror(-rc));
			goto out_fail;
		}
		free(pe->rel);
	}
	p->npend = 0;
	p->packs++;
	added = idset_add(&p->seen_packs, &id);
	if (added < 0) {
		fail(p, "out of memory");
		return -1;
	}
	if (added == 0) {	/* the same bytes packed earlier in this run */
		p->dup_packs++;
		p->pack_used = 0;
		return 0;
	}
	s = slot_get(p);
	if (p->failed) {
		slot_free(p, s);
		return -1;
	}
	t = s->buf;
	s->buf = p->pack;
	p->pack = t;
	s->len = p->pack_used;
	s->pack = true;
	p->pack_used = 0;
	sfs_rados_pack_oid(&id, s->oid);
	/*
	 * A new pack almost always: its bytes are this run's files in this
	 * run's order (unchanged files of the version before keep their old
	 * packs, pack_reuse()).  Create it at once, as a small chunk; only if
	 * it exists (-EEXIST) does the stat path decide.
	 */
	slot_start_create(p, s);
	return 0;

out_fail:
	for (; i < p->npend; i++)
		free(p->pend[i].rel);
	p->npend = 0;
	return -1;
}

static bool oldmember_eq(const struct htab_node *n, const void *key)
{
	const struct oldmember *om = htab_entry(n, struct oldmember, node);

	return !om->taken && sfs_id_eq(&om->chunk, key);
}

/*
 * First reuse of old pack @op: is the object there, of its size?  Renew its
 * mtime if it is old (the rule chunks follow: gc keeps it until the new
 * manifest names it), then add it to the manifest.  A pack that is gone
 * (or damaged) is not reused: its files are packed again.  0, or -1 when
 * the publish failed.
 */
static int oldpack_take(struct pub *p, struct oldpack *op)
{
	char oid[SFS_RADOS_OID_MAX];
	uint64_t size = op->osize;
	time_t mtime = op->omtime;
	uint32_t idx;
	int rc = op->stat_rc;

	sfs_rados_pack_oid(&op->id, oid);
	if (rc == 0 && size != op->size) {
		fprintf(stderr, "stagefs publish: warning: %s holds %" PRIu64 " bytes instead of %" PRIu64 "; its files are packed again\n",
			oid, size, op->size);
		op->index = OLD_GONE;
		return 0;
	}
	if (rc == 0 && (uint64_t)mtime + SFS_RADOS_FRESHEN_S < wall_s()) {
		/* renewed in flight, as chunks are; counted in fresh_packs when done */
		struct slot *s = slot_get(p);

		if (p->failed) {
			slot_free(p, s);
			return -1;
		}
		s->pack = s->oldpack = true;
		memcpy(s->oid, oid, sizeof(oid));
		slot_start_freshen(p, s);
		if (p->failed)
			return -1;
	}
	if (rc == -ENOENT) {
		fprintf(stderr, "stagefs publish: warning: %s of %s@%" PRIu64 " is missing; its files are packed again\n",
			oid, p->name, p->prev_version);
		op->index = OLD_GONE;
		return 0;
	}
	if (rc < 0) {
		fail(p, "cannot stat %s: %s", oid, strerror(-rc));
		return -1;
	}
	rc = manifest_builder_add_pack(p->mb, &op->id, op->size, &idx);
	if (rc) {
		fail(p, "cannot add a pack to the manifest: %s", strerror(-rc));
		return -1;
	}
	op->index = idx;
	p->packs++;
	p->reused_packs++;
	return 0;
}

/*
 * A small file the previous version stored in a pack, with these bytes
 * (chunk id @id, its size in @a): name it where it lies.  1 reused, 0 not
 * (pack it), -1 the publish failed.
 */
static int pack_reuse(struct pub *p, const char *rel, const struct sfs_attr *a,
		      const struct sfs_id *id)
{
	struct htab_node *n = htab_find(&p->oldmap, id->lo, oldmember_eq, id);
	struct oldmember *om;
	struct oldpack *op;
	int rc;

	if (!n)
		return 0;
	om = htab_entry(n, struct oldmember, node);
	if (om->size != a->size)
		return 0;
	op = &p->oldpacks[om->pack];
	if (op->index == OLD_UNKNOWN && oldpack_take(p, op))
		return -1;
	if (op->index < 0)
		return 0;
	rc = manifest_builder_add_packed(p->mb, rel, a, id, (uint32_t)op->index, om->off);
	if (!rc)
		rc = idmap_put(&p->placed, id, PLACE(op->index, om->off));
	if (rc) {
		fail(p, "cannot add %s to the manifest: %s", rel, strerror(-rc));
		return -1;
	}
	om->taken = true;
	return 1;
}

/* Name @rel in the pack being filled, at @off.  0, or -1 when the publish failed. */
static int pend_add(struct pub *p, const char *rel, const struct sfs_attr *a,
		    const struct sfs_id *id, uint32_t off, bool first)
{
	struct pending *pe;

	if (p->npend == p->pend_cap) {
		size_t cap = p->pend_cap ? p->pend_cap * 2 : 256;
		struct pending *np = realloc(p->pend, cap * sizeof(*np));

		if (!np) {
			fail(p, "out of memory");
			return -1;
		}
		p->pend = np;
		p->pend_cap = cap;
	}
	pe = &p->pend[p->npend];
	pe->rel = strdup(rel);
	if (!pe->rel) {
		fail(p, "out of memory");
		return -1;
	}
	pe->a = *a;
	pe->chunk = *id;
	pe->off = off;
	pe->first = first;
	p->npend++;
	return 0;
}

/*
 * A small file whose bytes (chunk id @id) this run named already, in a
 * pack of its own or of the version before: name it there too, as chunks
 * of identical large files are shared.  1 named, 0 not (a first copy), -1
 * the publish failed.
 */
static int pack_same(struct pub *p, const char *rel, const struct sfs_attr *a,
		     const struct sfs_id *id)
{
	uint64_t place;
	uint32_t pack;
	int rc;

	if (!idmap_get(&p->placed, id, &place))
		return 0;
	pack = (uint32_t)(place >> 32);
	if (pack == PLACE_PENDING) {
		if (pend_add(p, rel, a, id, (uint32_t)place, false))
			return -1;
	} else {
		rc = manifest_builder_add_packed(p->mb, rel, a, id, pack, (uint32_t)place);
		if (rc) {
			fail(p, "cannot add %s to the manifest: %s", rel, strerror(-rc));
			return -1;
		}
	}
	p->same_files++;
	return 1;
}

/*
 * Regular file @rel, open at @fd, of 1 .. pack_max bytes (@st): read it
 * whole, then name it in a pack of the previous version that holds these
 * bytes, or append it to the pack being filled (flushing that first if it
 * does not fit).  0, or -1 when the publish failed.
 */
/*
 * A small file's @st->st_size bytes, at @buf, into the pack being filled:
 * hashed, and named where identical bytes lie already (pack_same(),
 * pack_reuse()), else appended.  @buf may be the pack's free room itself,
 * at or past its end (batch_small()), or the scratch buffer.
 */
static int pack_take(struct pub *p, const char *rel, const struct stat *st, const char *buf)
{
	size_t len = (size_t)st->st_size;
	struct sfs_attr a;
	struct sfs_id id;
	int rc;

	sfs_id_of(buf, len, &id);
	p->bytes += len;
	attr_from_stat(st, &a);
	rc = pack_same(p, rel, &a, &id);
	if (rc == 0 && p->noldmem)
		rc = pack_reuse(p, rel, &a, &id);
	if (rc < 0)
		return -1;
	if (rc == 0) {
		if (p->pack_used + len > p->chunk_size && pack_flush(p))
			return -1;
		if (buf != p->pack + p->pack_used)	/* scratch, or past a copy */
			memmove(p->pack + p->pack_used, buf, len);
		if (pend_add(p, rel, &a, &id, (uint32_t)p->pack_used, true) ||
		    idmap_put(&p->placed, &id, PLACE(PLACE_PENDING, p->pack_used))) {
			fail(p, "out of memory");
			return -1;
		}
		p->pack_used += len;
	}
	p->packed_files++;
	p->files++;
	progress(p, false);
	return 0;
}

/* @fd's stat still @st after its bytes were read: else it changed meanwhile */
static int unchanged(struct pub *p, int fd, const char *rel, const struct stat *st)
{
	struct stat st2;

	if (fstat(fd, &st2) < 0 || st2.st_size != st->st_size ||
	    st2.st_mtim.tv_sec != st->st_mtim.tv_sec ||
	    st2.st_mtim.tv_nsec != st->st_mtim.tv_nsec) {
		fail(p, "%s/%s changed while being published", p->dir, rel);
		return -1;
	}
	return 0;
}

static int pack_file(struct pub *p, int fd, const char *rel, const struct stat *st)
{
	size_t len = (size_t)st->st_size;
	bool fits = p->pack_used + len <= p->chunk_size;
	char *dst = fits ? p->pack + p->pack_used : p->scratch;
	ssize_t n;

	n = pread_full(fd, dst, len, 0);
	if (n != (ssize_t)len) {
		if (n < 0)
			fail(p, "cannot read %s/%s: %s", p->dir, rel, strerror((int)-n));
		else
			fail(p, "%s/%s shrank while being published", p->dir, rel);
		return -1;
	}
	if (unchanged(p, fd, rel, st))
		return -1;
	return pack_take(p, rel, st, dst);
}

/* A source file opened for reading: without touching its atime where we may */
static int open_src(int dirfd, const char *name, int flags)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME | flags);

	if (fd < 0 && errno == EPERM)	/* O_NOATIME: not the file's owner */
		fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | flags);
	return fd;
}

static int publish_file(struct pub *p, int dirfd, const char *name,
			const char *rel, const struct stat *lst)
{
	struct stat st;
	struct sfs_id *ids = NULL;
	struct sfs_attr a;
	uint64_t nchunks;
	int fd, rc = -1;

	fd = open_src(dirfd, name, 0);
	if (fd < 0) {
		fail(p, "cannot open %s/%s: %s", p->dir, rel, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != lst->st_ino) {
		fail(p, "%s/%s changed while being published", p->dir, rel);
		goto out_close;
	}
	if (st.st_size > 0 && (uint64_t)st.st_size <= p->pack_max) {
		rc = pack_file(p, fd, rel, &st);
		goto out_close;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	nchunks = DIV_ROUND_UP((uint64_t)st.st_size, p->chunk_size);
	if (nchunks > UINT32_MAX) {
		fail(p, "%s/%s is too large for chunk size %u", p->dir, rel, p->chunk_size);
		goto out_close;
	}
	ids = malloc(nchunks ? nchunks * sizeof(*ids) : 1);
	if (!ids) {
		fail(p, "out of memory");
		goto out_close;
	}
	for (uint64_t k = 0; k < nchunks && !p->failed; k++) {
		struct slot *s = slot_get(p);
		size_t len = backend_chunk_len((uint64_t)st.st_size, p->chunk_size,
					       (uint32_t)k);
		ssize_t n;
		int added;

		if (p->failed) {
			slot_free(p, s);
			break;
		}
		n = pread_full(fd, s->buf, len, (off_t)(k * p->chunk_size));
		if (n != (ssize_t)len) {
			slot_free(p, s);
			if (n < 0)
				fail(p, "cannot read %s/%s: %s", p->dir, rel, strerror((int)-n));
			else
				fail(p, "%s/%s shrank while being published", p->dir, rel);
			break;
		}
		s->len = len;
		sfs_id_of(s->buf, len, &ids[k]);
		p->bytes += len;
		p->chunks++;
		if (len <= WRITE_FIRST_MAX) {
			/* no set of ids seen: the OSD says -EEXIST for a repeat */
			sfs_rados_chunk_oid(&ids[k], s->oid);
			slot_start_create(p, s);
			progress(p, false);
			continue;
		}
		added = idset_add(&p->seen, &ids[k]);
		if (added < 0) {
			slot_free(p, s);
			fail(p, "out of memory");
			break;
		}
		if (added == 0) {
			p->dup_chunks++;
			slot_free(p, s);
		} else {
			sfs_rados_chunk_oid(&ids[k], s->oid);
			slot_start_stat(p, s);
		}
		progress(p, false);
	}
	if (p->failed)
		goto out_free;
	if (unchanged(p, fd, rel, &st))
		goto out_free;
	attr_from_stat(&st, &a);
	rc = manifest_builder_add(p->mb, rel, &a, NULL, ids, (uint32_t)nchunks);
	if (rc) {
		fail(p, "cannot add %s to the manifest: %s", rel, strerror(-rc));
		rc = -1;
		goto out_free;
	}
	p->files++;
	rc = 0;
out_free:
	free(ids);
out_close:
	close(fd);
	return rc;
}

/* A regular file, or one more name of a file published already. */
static int publish_name(struct pub *p, int dirfd, const char *name,
			const char *rel, const struct stat *st)
{
	const char *first;
	int rc = 0;

	if (st->st_nlink < 2)
		return publish_file(p, dirfd, name, rel, st);
	first = inomap_first(&p->links, st->st_dev, st->st_ino, rel, &rc);
	if (rc) {
		fail(p, "out of memory");
		return -1;
	}
	if (!first)
		return publish_file(p, dirfd, name, rel, st);
	rc = manifest_builder_link(p->mb, rel, first);
	if (rc) {
		fail(p, "cannot add hard link %s (to %s) to the manifest: %s",
		     rel, first, strerror(-rc));
		return -1;
	}
	p->hardlinks++;
	return 0;
}

/* list_dir()'s entries: the d_type, then the name */
#define ENT_TYPE(e)	((unsigned char)(e)[0])
#define ENT_NAME(e)	((e) + 1)

static int name_cmp(const void *a, const void *b)
{
	return strcmp(ENT_NAME(*(char *const *)a), ENT_NAME(*(char *const *)b));
}

/*
 * Entries of directory @fd, sorted by name (so progress and errors are
 * reproducible): each its d_type byte, then its name.
 */
static int list_dir(struct pub *p, int fd, const char *rel, char ***out, size_t *nout)
{
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int dfd = dup(fd);

	if (dfd < 0 || !(d = fdopendir(dfd))) {
		fail(p, "cannot read directory %s/%s: %s", p->dir, rel, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno) {
				fail(p, "cannot read directory %s/%s: %s", p->dir, rel,
				     strerror(errno));
				goto out_fail;
			}
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			char **nv = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*v));

			if (!nv)
				goto out_oom;
			v = nv;
		}
		size_t len = strlen(de->d_name);

		if (!(v[n] = malloc(len + 2)))
			goto out_oom;
		v[n][0] = (char)de->d_type;
		memcpy(v[n] + 1, de->d_name, len + 1);
		n++;
	}
	closedir(d);
	if (n)	/* an empty directory: v is NULL, which qsort may not get */
		qsort(v, n, sizeof(*v), name_cmp);
	*out = v;
	*nout = n;
	return 0;

out_oom:
	fail(p, "out of memory");
out_fail:
	closedir(d);
	while (n)
		free(v[--n]);
	free(v);
	return -1;
}

/* @rel, the path of directory @rlen bytes long, made that of @name in it */
static int rel_set(struct pub *p, char *rel, size_t rlen, const char *name)
{
	size_t nlen = strlen(name);

	if (rlen + (rlen ? 1 : 0) + nlen >= PATH_MAX) {
		fail(p, "%s/%s/%s: path too long", p->dir, rel, name);
		return -1;
	}
	if (rlen)
		rel[rlen] = '/';
	memcpy(rel + rlen + (rlen ? 1 : 0), name, nlen + 1);
	return 0;
}

struct bfile {
	int fd;
	struct stat st;
	const char *name;
	size_t off;		/* its bytes' place past the pack's used part */
	ssize_t res;		/* bytes read, or -errno */
};

/* batch_small()'s files read into the pack's free room: all at once */
static void batch_read(struct pub *p, struct bfile *b, size_t nb)
{
	char *room = p->pack + p->pack_used;
	size_t queued = 0, submitted = 0, waiting;

	for (size_t k = 0; p->ring_ok && k < nb; k++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);

		if (!sqe)
			break;
		io_uring_prep_read(sqe, b[k].fd, room + b[k].off, (unsigned)b[k].st.st_size, 0);
		io_uring_sqe_set_data64(sqe, k);
		b[k].res = -EINPROGRESS;
		queued++;
	}
	while (submitted < queued) {
		int r = io_uring_submit(&p->ring);

		if (r <= 0)
			break;
		submitted += (size_t)r;
	}
	for (waiting = submitted; waiting;) {
		struct io_uring_cqe *cqe;
		int r = io_uring_wait_cqe(&p->ring, &cqe);

		if (r == -EINTR)
			continue;
		if (r < 0) {
			/* reads may still land in the pack: nothing of it is stored */
			fail(p, "io_uring: waiting for reads: %s", strerror(-r));
			return;
		}
		b[io_uring_cqe_get_data64(cqe)].res = cqe->res;
		io_uring_cqe_seen(&p->ring, cqe);
		waiting--;
	}
	if (submitted < queued) {
		/* reads the kernel did not take: dropped with the ring, read below */
		io_uring_queue_exit(&p->ring);
		p->ring_ok = false;
	}
	/*
	 * The rest of a short read, and all of one not queued or failed (a
	 * file system whose files io_uring cannot read says so here): by
	 * pread(2), whose error is the one reported.
	 */
	for (size_t k = 0; k < nb; k++) {
		size_t len = (size_t)b[k].st.st_size;
		ssize_t n;

		if (b[k].res < 0)
			b[k].res = 0;
		if ((size_t)b[k].res >= len)
			continue;
		n = pread_full(b[k].fd, room + b[k].off + b[k].res, len - (size_t)b[k].res,
			       (off_t)b[k].res);
		b[k].res = n < 0 ? n : b[k].res + n;
	}
}

/*
 * Entries @v[@i..@n) of directory @dirfd taken as a batch of small files,
 * as many as are in a row and fit the pack's free room (at most BATCH_MAX):
 * each opened and stat'ed here, then all read at once (batch_read()), then
 * packed in order.  One file at a time, a source not in the page cache was
 * read at its disk's latency per file, and each file cost an lstat(2)
 * besides; the d_type and the open file's fstat(2) say enough.  Returns how
 * many entries it took: 0 when the first is not such a file (no room, a
 * large or empty file, another hard link, not a regular file, or one that
 * will not open), which the caller then takes the usual way.
 */
static size_t batch_small(struct pub *p, int dirfd, char **v, size_t i, size_t n,
			  char *rel, size_t rlen)
{
	struct bfile b[BATCH_MAX];
	size_t nb = 0, used = 0, room = p->chunk_size - p->pack_used;
	const char *base = p->pack + p->pack_used;	/* pack_take() may not flush: all fit */

	for (; i + nb < n && nb < BATCH_MAX; nb++) {
		const char *e = v[i + nb];
		struct bfile *f = &b[nb];

		if (ENT_TYPE(e) != DT_REG && ENT_TYPE(e) != DT_UNKNOWN)
			break;
		/* O_NONBLOCK: a FIFO put in its place opens, and fails the check */
		f->fd = open_src(dirfd, ENT_NAME(e), O_NONBLOCK);
		if (f->fd < 0)
			break;
		if (fstat(f->fd, &f->st) < 0 || !S_ISREG(f->st.st_mode) || f->st.st_size <= 0 ||
		    (uint64_t)f->st.st_size > p->pack_max || f->st.st_nlink > 1 ||
		    (size_t)f->st.st_size > room - used ||
		    /* io_uring's reads honour O_NONBLOCK: -EAGAIN, not the disk */
		    (fcntl(f->fd, F_SETFL, O_NOATIME) < 0 && fcntl(f->fd, F_SETFL, 0) < 0)) {
			close(f->fd);
			break;
		}
		f->name = ENT_NAME(e);
		f->off = used;
		f->res = 0;
		used += (size_t)f->st.st_size;
	}
	if (!nb)
		return 0;
	batch_read(p, b, nb);
	if (p->failed) {
		for (size_t k = 0; k < nb; k++)
			close(b[k].fd);
		return nb;
	}

	/*
	 * In order.  A file taken as a copy is not appended, and the next
	 * ones' bytes are moved down (pack_take()): never onto a later file's.
	 */
	for (size_t k = 0; k < nb && !p->failed; k++) {
		struct bfile *f = &b[k];

		if (rel_set(p, rel, rlen, f->name))
			break;
		if (f->res < 0)
			fail(p, "cannot read %s/%s: %s", p->dir, rel, strerror((int)-f->res));
		else if (f->res != f->st.st_size)
			fail(p, "%s/%s shrank while being published", p->dir, rel);
		else if (!unchanged(p, f->fd, rel, &f->st))
			pack_take(p, rel, &f->st, base + f->off);
		rel[rlen] = '\0';
	}
	for (size_t k = 0; k < nb; k++)
		close(b[k].fd);
	return nb;
}

/* Publish the contents of directory @fd, whose relative path is @rel. */
static int walk(struct pub *p, int fd, char *rel, size_t rlen)
{
	char **names;
	size_t n;
	int rc = 0;

	if (list_dir(p, fd, rel, &names, &n))
		return -1;
	for (size_t i = 0; i < n && !rc && !p->failed; i++) {
		const char *name = ENT_NAME(names[i]);
		size_t nlen = strlen(name), clen = rlen + (rlen ? 1 : 0) + nlen;
		struct sfs_attr a;
		struct stat st;
		size_t took;

		if (p->pack_max && (took = batch_small(p, fd, names, i, n, rel, rlen))) {
			i += took - 1;
			continue;
		}
		if (rel_set(p, rel, rlen, name)) {
			rc = -1;
			break;
		}

		if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			fail(p, "cannot stat %s/%s: %s", p->dir, rel, strerror(errno));
			rc = -1;
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			attr_from_stat(&st, &a);
			if (sub < 0) {
				fail(p, "cannot open directory %s/%s: %s", p->dir, rel,
				     strerror(errno));
				rc = -1;
			} else if ((rc = manifest_builder_add(p->mb, rel, &a, NULL, NULL, 0))) {
				fail(p, "cannot add %s to the manifest: %s", rel, strerror(-rc));
				close(sub);
			} else {
				p->dirs++;
				rc = walk(p, sub, rel, clen);
				close(sub);
			}
		} else if (S_ISREG(st.st_mode)) {
			rc = publish_name(p, fd, name, rel, &st);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t tl = readlinkat(fd, name, target, sizeof(target) - 1);

			if (tl < 0) {
				fail(p, "cannot read symlink %s/%s: %s", p->dir, rel,
				     strerror(errno));
				rc = -1;
			} else {
				target[tl] = '\0';
				attr_from_stat(&st, &a);
				rc = manifest_builder_add(p->mb, rel, &a, target, NULL, 0);
				if (rc)
					fail(p, "cannot add symlink %s to the manifest: %s",
					     rel, strerror(-rc));
				else
					p->symlinks++;
			}
		} else {
			fprintf(stderr, "stagefs publish: warning: skipping %s/%s (not a file, directory or symlink)\n",
				p->dir, rel);
			p->skipped++;
		}
		rel[rlen] = '\0';
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc || p->failed ? -1 : 0;
}

/* ---- the manifest ---- */

/*
 * A file for the manifest, gone when closed: in $TMPDIR (else /var/tmp), so
 * that the builder streams it there instead of holding it in memory.
 */
static int manifest_tmpfile(void)
{
	const char *dir = getenv("TMPDIR");
	char path[PATH_MAX];
	int fd;

	if (!dir || !*dir)
		dir = "/var/tmp";
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT))
		return fd < 0 ? -errno : fd;
	snprintf(path, sizeof(path), "%s/stagefs-publish.XXXXXX", dir);
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unlink(path);
	return fd;
}

/* ---- the previous version's packs ---- */

struct prev_remote {
	rados_ioctx_t io;
	struct sfs_rados_mlayout ml;
};

/* manifest_remote.read: ranged reads of the previous manifest's objects */
static int prev_read(void *arg, void *buf, size_t len, uint64_t off,
		     char *err, size_t errlen)
{
	struct prev_remote *r = arg;

	return sfs_rados_manifest_pread(r->io, &r->ml, buf, len, off, err, errlen);
}

/* The files of the previous manifest's packs that may be packed now. */
static int prev_members(struct pub *p, struct manifest *m)
{
	uint32_t np = manifest_npacks(m);
	size_t cap = 0;

	p->oldpacks = calloc(np, sizeof(*p->oldpacks));
	if (!p->oldpacks)
		return -ENOMEM;
	p->noldpacks = np;
	for (uint32_t k = 0; k < np; k++) {
		struct oldpack *op = &p->oldpacks[k];
		struct manifest_pack pk;

		op->index = OLD_GONE;
		if (manifest_pack(m, k, &pk))
			continue;	/* a bad part: not reused */
		op->id = pk.id;
		op->size = pk.size;
		op->index = OLD_UNKNOWN;
		for (uint32_t j = 0; j < pk.nmembers; j++) {
			struct manifest_member mb;
			struct oldmember *om;

			if (manifest_pack_member(m, k, j, &mb) || mb.size > p->pack_max)
				continue;
			if (p->noldmem == cap) {
				struct oldmember *nv;

				cap = cap ? cap * 2 : 1024;
				nv = realloc(p->oldmem, cap * sizeof(*nv));
				if (!nv)
					return -ENOMEM;
				p->oldmem = nv;
			}
			om = &p->oldmem[p->noldmem++];
			memset(om, 0, sizeof(*om));
			om->chunk = mb.chunk;
			om->size = mb.size;
			om->pack = k;
			om->off = mb.off;
		}
	}
	if (htab_init(&p->oldmap, p->noldmem ? p->noldmem : 1))
		return -ENOMEM;
	for (size_t i = 0; i < p->noldmem; i++)
		htab_add(&p->oldmap, &p->oldmem[i].node, p->oldmem[i].chunk.lo);
	return 0;
}

/*
 * Where the small files of the latest version lie, so that the files this
 * tree keeps are named in the packs that hold them instead of uploaded
 * again.  The manifest is opened as a mount opens it (manifest_lazy.h):
 * the header and part table first, then only the parts the pack and
 * member tables lead to, into a sparse file in $TMPDIR unlinked at once.
 * No latest version, another chunk size, no packs, or a manifest that
 * cannot be read: nothing to reuse, which is not an error.  Returns 0, or
 * -1 out of memory (the publish failed).
 */
/*
 * Stat every pack of the version before, -j at once, before the walk: a
 * republish of a tree of 65,000 packs would otherwise make 65,000
 * synchronous round trips as its walk meets them.  The walk decides from
 * these (oldpack_take()); what changes after (a gc removing one) is caught
 * when the pack is renewed, or by the mount's checks.
 */
static void oldpacks_stat(struct pub *p)
{
	rados_completion_t *c = calloc(p->jobs, sizeof(*c));
	char oid[SFS_RADOS_OID_MAX];
	uint32_t next = 0, done = 0;

	if (!c) {
		fail(p, "out of memory");
		return;
	}
	while (done < p->noldpacks) {
		while (next < p->noldpacks && next - done < (uint32_t)p->jobs) {
			struct oldpack *op = &p->oldpacks[next];
			int slot = (int)(next % (uint32_t)p->jobs);

			sfs_rados_pack_oid(&op->id, oid);
			op->stat_rc = rados_aio_create_completion2(NULL, NULL, &c[slot]);
			if (!op->stat_rc)
				op->stat_rc = rados_aio_stat(p->io, oid, c[slot], &op->osize,
							     &op->omtime);
			if (op->stat_rc) {
				if (c[slot])
					rados_aio_release(c[slot]);
				c[slot] = NULL;
			}
			next++;
		}
		struct oldpack *op = &p->oldpacks[done];
		int slot = (int)(done % (uint32_t)p->jobs);

		if (c[slot]) {
			rados_aio_wait_for_complete(c[slot]);
			op->stat_rc = rados_aio_get_return_value(c[slot]);
			rados_aio_release(c[slot]);
			c[slot] = NULL;
		}
		done++;
	}
	free(c);
}

static int load_previous(struct pub *p)
{
	struct prev_remote r = { .io = p->io };
	struct manifest_remote mr = { .read = prev_read, .arg = &r };
	const char *tmp = getenv("TMPDIR");
	char dir[PATH_MAX], path[PATH_MAX + 16], marks[PATH_MAX + 32], msg[512];
	struct manifest *m = NULL;
	uint64_t latest, got;
	int rc;

	if (!p->pack_max || sfs_rados_latest(p->io, p->name, &latest))
		return 0;
	if (sfs_rados_manifest_layout(p->io, p->name, latest, &r.ml, msg, sizeof(msg)))
		return 0;
	if (!tmp || !*tmp)
		tmp = "/var/tmp";
	snprintf(dir, sizeof(dir), "%s/stagefs-publish.XXXXXX", tmp);
	if (!mkdtemp(dir))
		return 0;
	snprintf(path, sizeof(path), "%s/prev", dir);
	rc = manifest_lazy_open(path, r.ml.size, &mr, p->name, false, &m, &got,
				msg, sizeof(msg));
	/* the copy stays mapped (and its fds open) until closed */
	unlink(path);
	if (!manifest_lazy_marks_path(path, marks, sizeof(marks)))
		unlink(marks);
	rmdir(dir);
	if (rc)
		return 0;
	if (manifest_chunk_size(m) == p->chunk_size && manifest_npacks(m)) {
		p->prev_version = latest;
		rc = prev_members(p, m);
	}
	manifest_close(m);
	if (rc) {
		fail(p, "out of memory");
		return -1;
	}
	oldpacks_stat(p);
	return p->failed ? -1 : 0;
}

static int store_manifest(struct pub *p)
{
	uint64_t latest = 0, len;
	char err[512];
	bool newer;
	int rc, fd;

	rc = sfs_rados_latest(p->io, p->name, &latest);
	if (rc && rc != -ENOENT) {
		fail(p, "cannot read sfs.dataset.%s: %s", p->name, strerror(-rc));
		return -1;
	}
	fd = manifest_tmpfile();
	if (fd < 0) {
		fail(p, "cannot create a temporary file for the manifest: %s", strerror(-fd));
		return -1;
	}
	rc = manifest_builder_write(p->mb, latest + 1, fd, &len);
	if (rc) {
		fail(p, "cannot build the manifest: %s", strerror(-rc));
		close(fd);
		return -1;
	}
	/* the tree is in the file now: the upload's buffers get its memory */
	manifest_builder_destroy(p->mb);
	p->mb = NULL;
	/* claim latest+1, or the next free version if a concurrent publish won */
	for (uint64_t v = latest + 1; v < latest + 1000; v++) {
		if (v > latest + 1 && (rc = manifest_file_set_version(fd, v))) {
			fail(p, "cannot write the manifest: %s", strerror(-rc));
			close(fd);
			return -1;
		}
		rc = sfs_rados_manifest_write_fd(p->io, p->name, v, fd, len, err, sizeof(err));
		if (rc == -EEXIST)
			continue;
		if (rc) {
			fail(p, "%s", err);
			close(fd);
			return -1;
		}
		p->version = v;
		p->manifest_len = (size_t)len;
		break;
	}
	close(fd);
	if (!p->version) {
		fail(p, "could not claim a version of %s after 1000 tries", p->name);
		return -1;
	}
	rc = sfs_rados_set_latest(p->io, p->name, p->version, &newer);
	if (rc) {
		fail(p, "stored %s@%" PRIu64 " but cannot update sfs.dataset.%s: %s",
		     p->name, p->version, p->name, strerror(-rc));
		return -1;
	}
	if (newer)
		fprintf(stderr, "stagefs publish: warning: a newer version of %s was published meanwhile; it stays the latest\n",
			p->name);
	return 0;
}

/* ---- main ---- */

/*
 * The target, in the mount's grammar (sfs_rados_uri_parse): a pool and a
 * dataset name, no version (publish chooses it), published mode; its
 * ns=, conf=, id=, keyring= and timeout= take precedence over the flags.
 */
static void parse_target(struct pub *p, const char *uri)
{
	char msg[512];

	if (sfs_rados_uri_parse(uri, &p->target, msg, sizeof(msg)))
		die_usage("%s", msg);
	if (p->target.plain)
		die_usage("%s: publish writes published datasets, not plain objects", uri);
	if (!p->target.name)
		die_usage("%s: expected rados://POOL/NAME", uri);
	if (p->target.version)
		die_usage("%s: the version is chosen by publish; leave out '@'", uri);
	if (p->target.chunk_size)
		die_usage("%s: give the chunk size with --chunk-size", uri);
	p->pool = p->target.pool;
	p->name = p->target.name;
	p->nspace = p->target.ns;
	sfs_rados_uri_opts(&p->target, &p->ro);
}

static void parse_args(struct pub *p, int argc, char **argv)
{
	enum { O_CHUNK = 256, O_PACK_MAX, O_JSON };
	static const struct option lopts[] = {
		{ "chunk-size", required_argument, NULL, O_CHUNK },
		{ "pack-max", required_argument, NULL, O_PACK_MAX },
		SFS_RADOS_LONGOPTS,
		{ "json", no_argument, NULL, O_JSON },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char msg[256];
	uint64_t v;
	int c, r;

	while ((c = getopt_long(argc, argv, "j:qh", lopts, NULL)) != -1) {
		switch (c) {
		case O_CHUNK:
			if (parse_size(optarg, &v) || v < 4096 || v > 64 * MiB || (v & (v - 1)))
				die_usage("--chunk-size: '%s' is not a power of two from 4K to 64M",
					  optarg);
			p->chunk_size = (uint32_t)v;
			break;
		case O_PACK_MAX:
			if (parse_size(optarg, &v) || v > 64 * MiB)
				die_usage("--pack-max: '%s' is not a size from 0 to the chunk size",
					  optarg);
			p->pack_max = v;
			break;
		case 'j':
			if (parse_uint(optarg, &v) || v < 1 || v > 1024)
				die_usage("-j: '%s' is not a number from 1 to 1024", optarg);
			p->jobs = (int)v;
			break;
		case O_JSON:
			p->json = true;
			break;
		case 'q':
			p->quiet = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			r = sfs_rados_cli_opt(c, optarg, &p->ro, msg, sizeof(msg));
			if (r < 0)
				die_usage("%s", msg);
			if (!r)
				die_usage("bad option");
		}
	}
	if (p->pack_max == PACK_MAX_UNSET)
		p->pack_max = p->chunk_size / DEFAULT_PACK_DIV;
	if (p->pack_max > p->chunk_size)
		die_usage("--pack-max: %" PRIu64 " is larger than the chunk size (%u): a pack is at most a chunk",
			  p->pack_max, p->chunk_size);
	if (argc - optind != 2)
		die_usage("expected DIR and rados://POOL/NAME");
	p->dir = argv[optind];
	p->uri = argv[optind + 1];
	parse_target(p, p->uri);
}

static void summary(struct pub *p)
{
	uint64_t ns = now_ns() - p->t0;
	double secs = (double)ns / 1e9;
	char b1[32], b2[32], b3[32];
	const char *nsq = p->nspace ? "?ns=" : "";
	const char *nsv = p->nspace ? p->nspace : "";

	if (p->json) {
		printf("{\"uri\": ");
		json_write_str(stdout, p->uri);
		printf(", \"pool\": ");
		json_write_str(stdout, p->pool);
		printf(", \"namespace\": ");
		json_write_str(stdout, nsv);
		printf(", \"name\": ");
		json_write_str(stdout, p->name);
		printf(", \"version\": %" PRIu64 ", \"files\": %" PRIu64
		       ", \"dirs\": %" PRIu64 ", \"symlinks\": %" PRIu64
		       ", \"hardlinks\": %" PRIu64
		       ", \"skipped\": %" PRIu64 ", \"bytes\": %" PRIu64
		       ", \"chunks\": %" PRIu64 ", \"new_chunks\": %" PRIu64
		       ", \"new_bytes\": %" PRIu64 ", \"freshened_chunks\": %" PRIu64
		       ", \"chunk_size\": %u, \"pack_max\": %" PRIu64
		       ", \"packs\": %" PRIu64 ", \"new_packs\": %" PRIu64
		       ", \"reused_packs\": %" PRIu64 ", \"freshened_packs\": %" PRIu64
		       ", \"packed_files\": %" PRIu64 ", \"same_files\": %" PRIu64
		       ", \"previous_version\": %" PRIu64
		       ", \"manifest_bytes\": %zu, \"seconds\": %.3f"
		       ", \"mb_per_s\": %.1f}\n",
		       p->version, p->files, p->dirs, p->symlinks, p->hardlinks,
		       p->skipped,
		       p->bytes, p->chunks, p->new_chunks, p->new_bytes,
		       p->fresh_chunks, p->chunk_size, p->pack_max, p->packs,
		       p->new_packs, p->reused_packs, p->fresh_packs, p->packed_files,
		       p->same_files, p->prev_version, p->manifest_len, secs, mbps(p->bytes, ns));
		return;
	}
	if (!p->quiet) {
		printf("files      %" PRIu64 " (%" PRIu64 " directories, %" PRIu64
		       " symlinks, %" PRIu64 " hard links, %" PRIu64 " skipped)\n",
		       p->files, p->dirs, p->symlinks, p->hardlinks, p->skipped);
		printf("bytes      %s\n", fmt_size(p->bytes, b1, sizeof(b1)));
		printf("chunks     %" PRIu64 " of %s (%" PRIu64 " new, %" PRIu64
		       " already in the pool, %" PRIu64 " repeated in this tree)\n",
		       p->chunks, fmt_size(p->chunk_size, b2, sizeof(b2)),
		       p->new_chunks, p->chunks - p->new_chunks - p->dup_chunks,
		       p->dup_chunks);
		if (p->pack_max) {
			printf("packs      %" PRIu64 " holding %" PRIu64 " files of up to %s (%" PRIu64
			       " new, %" PRIu64 " already in the pool, %" PRIu64
			       " repeated in this tree",
			       p->packs, p->packed_files, fmt_size(p->pack_max, b2, sizeof(b2)),
			       p->new_packs,
			       p->packs - p->new_packs - p->dup_packs - p->reused_packs,
			       p->dup_packs);
			if (p->prev_version)
				printf(", %" PRIu64 " reused from @%" PRIu64, p->reused_packs,
				       p->prev_version);
			printf(")\n");
			if (p->same_files)
				printf("           %" PRIu64 " of the files are copies of others, "
				       "named where those lie\n", p->same_files);
		}
		printf("new bytes  %s\n", fmt_size(p->new_bytes, b3, sizeof(b3)));
		printf("time       %.2f s, %.1f MB/s\n", secs, mbps(p->bytes, ns));
		printf("manifest   sfs.manifest.%s.%" PRIu64 " (%s)\n", p->name,
		       p->version, fmt_size(p->manifest_len, b1, sizeof(b1)));
	}
	printf("published rados://%s/%s@%" PRIu64 "%s%s\n", p->pool, p->name,
	       p->version, nsq, nsv);
}

int main(int argc, char **argv)
{
	struct pub p = {
		.chunk_size = DEFAULT_CHUNK,
		.pack_max = PACK_MAX_UNSET,
		.jobs = DEFAULT_JOBS,
		.ro.timeout_ms = DEFAULT_TIMEOUT,
	};
	char err[512], rel[PATH_MAX] = "";
	struct sfs_attr a;
	struct stat st;
	int dirfd, rc = 1;

	parse_args(&p, argc, argv);
	/*
	 * Big arrays (the builder's) in their own mappings: glibc otherwise
	 * raises the threshold as they grow and the old copies of each
	 * doubling stay resident in the heap (up to twice the peak).  But not
	 * librados's copy of each object written (its C API copies the bytes
	 * into a buffer of its own): mapped and unmapped per object, its
	 * page faults and zeroing were a quarter of the publisher's CPU.  So
	 * the threshold is just above a chunk (peak at 1 M entries: 120 B an
	 * entry either way).  Nor trimmed: each copy freed at the heap's top
	 * gave its pages back (brk down, brk up at the next object), and
	 * zeroing them anew was still 16 % of the publisher's CPU with the
	 * page cache hot; up to 64 MiB free at the top now stays.
	 */
	mallopt(M_MMAP_THRESHOLD, (int)MIN(MAX(256 * 1024, p.chunk_size + 64 * 1024),
					   (uint64_t)32 << 20));
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	p.tty = isatty(STDERR_FILENO);
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond, NULL);

	dirfd = open(p.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0 || fstat(dirfd, &st) < 0) {
		fprintf(stderr, "stagefs publish: error: cannot open directory %s: %s\n",
			p.dir, strerror(errno));
		return 1;
	}

	p.slots = calloc((size_t)p.jobs, sizeof(*p.slots));
	p.freelist = calloc((size_t)p.jobs, sizeof(*p.freelist));
	p.doneq = calloc((size_t)p.jobs, sizeof(*p.doneq));
	p.mb = manifest_builder_create(p.chunk_size);
	if (!p.slots || !p.freelist || !p.doneq || !p.mb) {
		fprintf(stderr, "stagefs publish: error: out of memory\n");
		return 1;
	}
	for (int i = 0; i < p.jobs; i++) {
		p.slots[i].p = &p;
		p.slots[i].buf = malloc(p.chunk_size);
		if (!p.slots[i].buf) {
			fprintf(stderr, "stagefs publish: error: cannot allocate %d buffers of %u bytes\n",
				p.jobs, p.chunk_size);
			return 1;
		}
		p.freelist[p.nfree++] = i;
	}
	if (p.pack_max && (!(p.pack = malloc(p.chunk_size)) ||
			   !(p.scratch = malloc(p.pack_max)))) {
		fprintf(stderr, "stagefs publish: error: out of memory\n");
		return 1;
	}
	/* no io_uring (a seccomp filter, io_uring_disabled): pread(2)s */
	p.ring_ok = p.pack_max && io_uring_queue_init(BATCH_MAX, &p.ring, 0) == 0;

	if (sfs_rados_connect(&p.ro, &p.cl, err, sizeof(err)) ||
	    sfs_rados_ioctx(p.cl, p.pool, p.nspace, &p.io, err, sizeof(err))) {
		fprintf(stderr, "stagefs publish: error: %s\n", err);
		goto out_shutdown;
	}

	p.t0 = now_ns();
	p.t0_wall = wall_s();
	p.last_progress = p.t0;
	attr_from_stat(&st, &a);
	rc = manifest_builder_add(p.mb, "", &a, NULL, NULL, 0);
	if (rc) {
		fail(&p, "cannot add the root: %s", strerror(-rc));
	} else if (!load_previous(&p) && !walk(&p, dirfd, rel, 0)) {
		pack_flush(&p);	/* the last one, partly filled */
	}
	drain(&p);
	rc = 1;
	if (p.failed)
		goto out_io;
	progress(&p, true);
	if (p.tty && !p.quiet)
		fputc('\n', stderr);
	if (store_manifest(&p))
		goto out_io;
	summary(&p);
	rc = 0;

out_io:
	rados_ioctx_destroy(p.io);
out_shutdown:
	if (p.cl)
		rados_shutdown(p.cl);
	manifest_builder_destroy(p.mb);
	for (int i = 0; i < p.jobs; i++)
		free(p.slots[i].buf);
	free(p.slots);
	free(p.freelist);
	free(p.doneq);
	idset_release(&p.seen);
	idset_release(&p.seen_packs);
	idmap_release(&p.placed);
	inomap_release(&p.links);
	for (size_t i = 0; i < p.npend; i++)
		free(p.pend[i].rel);
	free(p.pend);
	free(p.pack);
	free(p.scratch);
	if (p.ring_ok)
		io_uring_queue_exit(&p.ring);
	htab_release(&p.oldmap);
	free(p.oldmem);
	free(p.oldpacks);
	sfs_rados_uri_release(&p.target);	/* pool, name, nspace */
	close(dirfd);
	return rc;
}
