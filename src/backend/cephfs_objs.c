/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cephfs_objs: where a CephFS file's bytes lie in the data pool, and
 * reading them there with librados (cephfs_objs.h).
 */
#include "cephfs_objs.h"

#include "idmap.h"
#include "manifest/manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define COBJ_MAGIC	"SFSCOBJ2"
#define COBJ_TAG_MAX	512
#define COBJ_INO_BITS	48		/* the rest of an entry: its layout's number + 1 */
#define COBJ_INO_MASK	((UINT64_C(1) << COBJ_INO_BITS) - 1)
#define COBJ_LAYOUTS_MAX 0xffff
#define COBJ_POOLS_MAX	16		/* ioctxs a reader keeps */
#define COBJ_BLOCK_SHIFT 12		/* entries a checksum covers: 4,096 (32 KiB) */

/*
 * The map: this header, nlayouts layouts, the XXH3-64 of each block of
 * 1 << COBJ_BLOCK_SHIFT entries, then one uint64_t per manifest entry
 * (inode number - 1): 0 (read through the client), or the CephFS inode
 * number | (layout + 1) << COBJ_INO_BITS.  A block is checked the first
 * time an entry of it is asked for, as the manifest checks its parts: a
 * corrupt one sends its files to the client, never to another file's
 * objects.
 */
struct cobj_head {
	char magic[8];
	uint64_t nentries;
	uint64_t count;		/* entries not 0 */
	uint32_t nlayouts, reserved;
	char tag[COBJ_TAG_MAX];
};

static uint64_t nblocks(uint64_t nentries)
{
	return (nentries + (1u << COBJ_BLOCK_SHIFT) - 1) >> COBJ_BLOCK_SHIFT;
}

/* The checksum of block @b of @n entries at @ent. */
static uint64_t block_sum(const uint64_t *ent, uint64_t n, uint64_t b)
{
	uint64_t first = b << COBJ_BLOCK_SHIFT;
	uint64_t k = MIN(n - first, (uint64_t)1 << COBJ_BLOCK_SHIFT);

	return sfs_hash64(ent + first, k * sizeof(*ent)) ^ b;
}

bool cfsobj_layout_ok(const struct cfsobj_layout *l)
{
	return l->stripe_unit && l->stripe_count && l->object_size &&
	       l->object_size % l->stripe_unit == 0 && l->pool >= 0;
}

size_t cfsobj_extents(const struct cfsobj_layout *l, uint64_t off, size_t len,
		      struct cfsobj_extent *out, size_t max)
{
	uint64_t su = l->stripe_unit, sc = l->stripe_count;
	uint64_t per_object = l->object_size / su;	/* stripe units an object holds */
	size_t n = 0, done = 0;

	/* Ceph's Striper::file_to_extents(), one stripe unit at a time */
	while (done < len) {
		uint64_t cur = off + done;
		uint64_t blockno = cur / su, stripeno = blockno / sc, stripepos = blockno % sc;
		uint64_t objno = stripeno / per_object * sc + stripepos;
		uint64_t obj_off = stripeno % per_object * su + cur % su;
		size_t piece = (size_t)MIN((uint64_t)(len - done), su - cur % su);

		/* with one stripe, the next unit may continue the same object */
		if (n && n <= max && out[n - 1].objno == objno &&
		    out[n - 1].obj_off + out[n - 1].len == obj_off) {
			out[n - 1].len += piece;
		} else {
			if (n < max)
				out[n] = (struct cfsobj_extent){ objno, obj_off, done, piece };
			n++;
		}
		done += piece;
	}
	return n;
}

/* ---- the builder ---- */

struct cfsobj_builder {
	pthread_mutex_t lock;
	struct idmap files;	/* content id -> entry (as in the map) */
	struct cfsobj_layout layouts[64];
	struct cfsobj_layout *more;	/* past the first 64, rare */
	uint32_t nlayouts;
};

static struct cfsobj_layout *layout_at(struct cfsobj_builder *b, uint32_t i)
{
	return i < 64 ? &b->layouts[i] : &b->more[i - 64];
}

struct cfsobj_builder *cfsobj_builder_create(void)
{
	struct cfsobj_builder *b = calloc(1, sizeof(*b));

	if (b)
		pthread_mutex_init(&b->lock, NULL);
	return b;
}

void cfsobj_builder_destroy(struct cfsobj_builder *b)
{
	if (!b)
		return;
	idmap_release(&b->files);
	free(b->more);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static int layout_index(struct cfsobj_builder *b, const struct cfsobj_layout *l, uint32_t *idx)
{
	struct cfsobj_layout k = *l, *more;
	uint32_t i;

	k.reserved = 0;
	for (i = 0; i < b->nlayouts; i++) {
		if (!memcmp(layout_at(b, i), &k, sizeof(k))) {
			*idx = i;
			return 0;
		}
	}
	if (b->nlayouts >= COBJ_LAYOUTS_MAX)
		return -EINVAL;
	if (b->nlayouts >= 64 && (b->nlayouts - 64) % 64 == 0) {
		more = realloc(b->more, (b->nlayouts - 64 + 64) * sizeof(*more));
		if (!more)
			return -ENOMEM;
		b->more = more;
	}
	*layout_at(b, b->nlayouts) = k;
	*idx = b->nlayouts++;
	return 0;
}

int cfsobj_builder_add(struct cfsobj_builder *b, const struct sfs_id *content, uint64_t ino,
		       const struct cfsobj_layout *l)
{
	uint32_t idx;
	int r;

	if (!cfsobj_layout_ok(l) || !ino || ino > COBJ_INO_MASK)
		return -EINVAL;
	pthread_mutex_lock(&b->lock);
	r = layout_index(b, l, &idx);
	if (!r)
		r = idmap_put(&b->files, content, ino | (uint64_t)(idx + 1) << COBJ_INO_BITS);
	pthread_mutex_unlock(&b->lock);
	return r;
}

size_t cfsobj_builder_count(struct cfsobj_builder *b)
{
	size_t n;

	pthread_mutex_lock(&b->lock);
	n = idmap_count(&b->files);
	pthread_mutex_unlock(&b->lock);
	return n;
}

int cfsobj_builder_build(struct cfsobj_builder *b, const struct manifest *m, const char *tag,
			 void **buf, size_t *len)
{
	uint64_t n = manifest_nentries(m), *ent, *sums;
	struct cobj_head *h;
	size_t size;
	char *p;

	if (strlen(tag) >= COBJ_TAG_MAX)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&b->lock);
	size = sizeof(*h) + b->nlayouts * sizeof(struct cfsobj_layout) +
	       (nblocks(n) + n) * sizeof(uint64_t);
	p = calloc(1, size);
	if (!p) {
		pthread_mutex_unlock(&b->lock);
		return -ENOMEM;
	}
	h = (struct cobj_head *)p;
	memcpy(h->magic, COBJ_MAGIC, sizeof(h->magic));
	h->nentries = n;
	h->nlayouts = b->nlayouts;
	strcpy(h->tag, tag);
	for (uint32_t i = 0; i < b->nlayouts; i++)
		memcpy(p + sizeof(*h) + i * sizeof(struct cfsobj_layout), layout_at(b, i),
		       sizeof(struct cfsobj_layout));
	sums = (uint64_t *)(p + sizeof(*h) + b->nlayouts * sizeof(struct cfsobj_layout));
	ent = sums + nblocks(n);
	for (uint64_t ino = 1; ino <= n; ino++) {
		struct sfs_attr a;
		uint64_t v;

		/* a hard link's names all give the inode's first entry */
		if (manifest_getattr(m, ino, &a) || !S_ISREG(a.mode) || a.ino != ino)
			continue;
		if (idmap_get(&b->files, &a.content, &v)) {
			ent[ino - 1] = v;
			h->count++;
		}
	}
	for (uint64_t i = 0; i < nblocks(n); i++)
		sums[i] = block_sum(ent, n, i);
	pthread_mutex_unlock(&b->lock);
	*buf = p;
	*len = size;
	return 0;
}

/* ---- the map ---- */

struct cfsobj_map {
	void *buf;
	size_t len;
	bool mapped;
	uint64_t nentries, count;
	const struct cfsobj_layout *layouts;
	uint32_t nlayouts;
	const uint64_t *sums, *ent;
	_Atomic uint8_t *checked;	/* per block: 0 not yet, 1 good, 2 corrupt */
};

static void release(void *buf, size_t len, bool mapped)
{
	if (mapped)
		munmap(buf, len);
	else
		free(buf);
}

int cfsobj_map_open(void *buf, size_t len, bool mapped, const struct manifest *m,
		    const char *tag, struct cfsobj_map **out, char *err, size_t errlen)
{
	const struct cobj_head *h = buf;
	struct cfsobj_map *map;
	size_t want;

	if (len < sizeof(*h) || memcmp(h->magic, COBJ_MAGIC, sizeof(h->magic)) ||
	    h->nlayouts > COBJ_LAYOUTS_MAX || !memchr(h->tag, 0, sizeof(h->tag))) {
		release(buf, len, mapped);
		return errf(err, errlen, -EINVAL, "not an object map");
	}
	if (strcmp(h->tag, tag) || h->nentries != manifest_nentries(m)) {
		release(buf, len, mapped);
		return errf(err, errlen, -ESTALE, "made for another walk");
	}
	want = h->nentries > (SIZE_MAX - sizeof(*h)) / 16 ? 0 :
	       sizeof(*h) + h->nlayouts * sizeof(struct cfsobj_layout) +
	       (nblocks(h->nentries) + h->nentries) * sizeof(uint64_t);
	if (len != want) {
		release(buf, len, mapped);
		return errf(err, errlen, -EINVAL, "%zu bytes, not %zu", len, want);
	}
	map = calloc(1, sizeof(*map));
	if (map)
		map->checked = calloc(nblocks(h->nentries) + 1, 1);
	if (!map || !map->checked) {
		free(map);
		release(buf, len, mapped);
		return errf(err, errlen, -ENOMEM, "out of memory");
	}
	map->buf = buf;
	map->len = len;
	map->mapped = mapped;
	map->nentries = h->nentries;
	map->count = h->count;
	map->nlayouts = h->nlayouts;
	map->layouts = (const struct cfsobj_layout *)((const char *)buf + sizeof(*h));
	map->sums = (const uint64_t *)(map->layouts + h->nlayouts);
	map->ent = map->sums + nblocks(h->nentries);
	for (uint32_t i = 0; i < map->nlayouts; i++) {
		if (!cfsobj_layout_ok(&map->layouts[i])) {
			cfsobj_map_close(map);
			return errf(err, errlen, -EINVAL, "layout %u is not a striping", i);
		}
	}
	*out = map;
	return 0;
}

int cfsobj_map_open_file(const char *path, const struct manifest *m, const char *tag,
			 struct cfsobj_map **out, char *err, size_t errlen)
{
	struct stat st;
	void *buf;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errf(err, errlen, -errno, "%s", strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
		r = errno ? -errno : -EINVAL;
		close(fd);
		return errf(err, errlen, r, "not a map file");
	}
	buf = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	r = -errno;
	close(fd);
	if (buf == MAP_FAILED)
		return errf(err, errlen, r, "mmap: %s", strerror(-r));
	return cfsobj_map_open(buf, (size_t)st.st_size, true, m, tag, out, err, errlen);
}

void cfsobj_map_close(struct cfsobj_map *map)
{
	if (!map)
		return;
	release(map->buf, map->len, map->mapped);
	free(map->checked);
	free(map);
}

uint64_t cfsobj_map_count(const struct cfsobj_map *map)
{
	return map->count;
}

int cfsobj_map_find(const struct cfsobj_map *map, uint64_t mino, uint64_t *ino,
		    struct cfsobj_layout *l)
{
	uint64_t v, idx, b;
	uint8_t state;

	if (!map || mino == 0 || mino > map->nentries)
		return 0;
	b = (mino - 1) >> COBJ_BLOCK_SHIFT;
	state = atomic_load_explicit(&map->checked[b], memory_order_relaxed);
	if (!state) {
		/* two threads may both check a block: the same answer */
		state = block_sum(map->ent, map->nentries, b) == map->sums[b] ? 1 : 2;
		atomic_store_explicit(&map->checked[b], state, memory_order_relaxed);
	}
	if (state != 1)
		return -EBADMSG;
	v = map->ent[mino - 1];
	idx = v >> COBJ_INO_BITS;
	if (!v || idx == 0 || idx > map->nlayouts || !(v & COBJ_INO_MASK))
		return 0;
	*ino = v & COBJ_INO_MASK;
	*l = map->layouts[idx - 1];
	return 1;
}

/* ---- reading ---- */

struct cfsobj_reader {
	rados_t rados;
	uint64_t snapid;
	pthread_mutex_t lock;
	unsigned npools;
	struct { int64_t pool; rados_ioctx_t io; } pools[COBJ_POOLS_MAX];
};

int cfsobj_reader_create(rados_t rados, uint64_t snapid, struct cfsobj_reader **out)
{
	struct cfsobj_reader *rd = calloc(1, sizeof(*rd));

	if (!rd)
		return -ENOMEM;
	rd->rados = rados;
	rd->snapid = snapid;
	pthread_mutex_init(&rd->lock, NULL);
	*out = rd;
	return 0;
}

void cfsobj_reader_destroy(struct cfsobj_reader *rd)
{
	if (!rd)
		return;
	for (unsigned i = 0; i < rd->npools; i++)
		rados_ioctx_destroy(rd->pools[i].io);
	pthread_mutex_destroy(&rd->lock);
	free(rd);
}

/* The I/O context of @pool, reading at the reader's snapshot: 0 or -errno. */
static int pool_io(struct cfsobj_reader *rd, int64_t pool, rados_ioctx_t *io)
{
	int r = 0;

	pthread_mutex_lock(&rd->lock);
	for (unsigned i = 0; i < rd->npools; i++) {
		if (rd->pools[i].pool == pool) {
			*io = rd->pools[i].io;
			goto out;
		}
	}
	if (rd->npools == COBJ_POOLS_MAX) {
		r = -ENOSPC;	/* the client reads the rest */
		goto out;
	}
	r = rados_ioctx_create2(rd->rados, pool, io);
	if (r < 0)
		goto out;
	if (rd->snapid != (uint64_t)-2 /* CEPH_NOSNAP */)
		rados_ioctx_snap_set_read(*io, rd->snapid);
	rd->pools[rd->npools].pool = pool;
	rd->pools[rd->npools].io = *io;
	rd->npools++;
out:
	pthread_mutex_unlock(&rd->lock);
	return r;
}

/* One object's reads: one operation with a read per extent in it. */
struct obj_op {
	uint64_t objno;
	rados_read_op_t op;
	rados_completion_t comp;
};

struct cfsobj_aread {
	void *buf;
	size_t len, n, nops;
	atomic_uint left;	/* operations not answered, and the starter's hold */
	int err;		/* from starting them */
	void (*cb)(void *arg);
	void *arg;
	struct cfsobj_extent *x;
	size_t *got;
	int *prval;
	struct obj_op *ops;
};

static void aread_put(struct cfsobj_aread *ar)
{
	if (atomic_fetch_sub(&ar->left, 1) == 1)
		ar->cb(ar->arg);
}

static void aread_op_done(rados_completion_t comp, void *arg)
{
	(void)comp;
	aread_put(arg);
}

static void aread_free(struct cfsobj_aread *ar)
{
	for (size_t j = 0; j < ar->nops; j++) {
		if (ar->ops[j].comp)
			rados_aio_release(ar->ops[j].comp);
		if (ar->ops[j].op)
			rados_release_read_op(ar->ops[j].op);
	}
	free(ar);
}

int cfsobj_aread_start(struct cfsobj_reader *rd, uint64_t ino, const struct cfsobj_layout *l,
		       uint64_t off, void *buf, size_t len, void (*cb)(void *arg), void *arg,
		       struct cfsobj_aread **out)
{
	size_t max = len / l->stripe_unit + 2;
	struct cfsobj_aread *ar;
	rados_ioctx_t io;
	int ret;

	ret = pool_io(rd, l->pool, &io);
	if (ret)
		return ret;
	/* one allocation: the state, then its arrays */
	ar = calloc(1, sizeof(*ar) + max * (sizeof(*ar->x) + sizeof(*ar->got) +
					    sizeof(*ar->prval) + sizeof(*ar->ops)));
	if (!ar)
		return -ENOMEM;
	ar->ops = (struct obj_op *)(ar + 1);
	ar->x = (struct cfsobj_extent *)(ar->ops + max);
	ar->got = (size_t *)(ar->x + max);
	ar->prval = (int *)(ar->got + max);
	ar->buf = buf;
	ar->len = len;
	ar->cb = cb;
	ar->arg = arg;
	ar->n = len ? cfsobj_extents(l, off, len, ar->x, max) : 0;
	if (ar->n > max) {
		free(ar);
		return -EINVAL;
	}
	/*
	 * One operation per object, a read in it per extent (with several
	 * stripes an object holds every stripe_count-th unit), all objects
	 * in flight at once.
	 */
	for (size_t i = 0; i < ar->n; i++) {
		size_t j;

		for (j = 0; j < ar->nops && ar->ops[j].objno != ar->x[i].objno; j++)
			;
		if (j == ar->nops) {
			ar->ops[j].objno = ar->x[i].objno;
			ar->ops[j].op = rados_create_read_op();
			if (!ar->ops[j].op) {
				aread_free(ar);
				return -ENOMEM;
			}
			ar->nops++;
		}
		rados_read_op_read(ar->ops[j].op, ar->x[i].obj_off, ar->x[i].len,
				   (char *)buf + ar->x[i].buf_off, &ar->got[i], &ar->prval[i]);
	}
	/* each operation started holds the read, and so does this function */
	atomic_init(&ar->left, 1);
	*out = ar;
	for (size_t j = 0; j < ar->nops && !ar->err; j++) {
		char oid[48];

		ret = rados_aio_create_completion2(ar, aread_op_done, &ar->ops[j].comp);
		if (ret < 0) {
			ar->ops[j].comp = NULL;
			ar->err = ret;
			break;
		}
		snprintf(oid, sizeof(oid), "%llx.%08llx", (unsigned long long)ino,
			 (unsigned long long)ar->ops[j].objno);
		atomic_fetch_add(&ar->left, 1);
		ret = rados_aio_read_op_operate(ar->ops[j].op, io, ar->ops[j].comp, oid, 0);
		if (ret < 0) {
			ar->err = ret;
			atomic_fetch_sub(&ar->left, 1);	/* never started: no answer */
		}
	}
	aread_put(ar);	/* @cb now, if every operation has answered */
	return 0;
}

int cfsobj_aread_end(struct cfsobj_aread *ar)
{
	int ret = ar->err;

	for (size_t j = 0; j < ar->nops; j++) {
		int r;

		if (!ar->ops[j].comp)
			continue;
		r = rados_aio_get_return_value(ar->ops[j].comp);
		if (r < 0 && (!ret || r == -ENOENT))
			ret = r;
	}
	for (size_t i = 0; i < ar->n && !ret; i++) {
		if (ar->prval[i] < 0) {
			ret = ar->prval[i];
			break;
		}
		/* past the object's end: a hole, zeros as CephFS reads them */
		if (ar->got[i] < ar->x[i].len)
			memset((char *)ar->buf + ar->x[i].buf_off + ar->got[i], 0,
			       ar->x[i].len - MIN(ar->got[i], ar->x[i].len));
	}
	if (!ret)
		ret = (int)ar->len;
	aread_free(ar);
	return ret;
}
