/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest_build: build a serialized manifest from entries given in any
 * order (manifest.h: manifest_builder_*), and the content id a writer
 * records for a file (manifest_content_id()).
 *
 * The builder keeps every added entry in one array of compact records
 * (paths and targets in an arena, chunk ids in one table in the order they
 * were added, explicit content ids in a side array only when a caller gives
 * them) with an open-addressing index by path for duplicate checks.  The
 * index holds array positions, not pointers, because the array moves when
 * it grows: that is why it is not the intrusive table of htab.h.  It sorts
 * at finish: a counting sort by parent, a name sort inside each parent,
 * then a breadth-first pass that assigns the final indexes (manifest_i.h
 * says why that order).  Once parents are known the path index is freed,
 * so the peak is the records, the arena, the ids and four u32 per entry.
 *
 * The output (format 2, manifest_i.h) is produced front to back through
 * struct mf_out, into memory or a file, hashing each part as it goes: the
 * header is written last.  It is a pure function of the entries added, in
 * the order added, and the version: the same tree gives the same bytes.  A
 * builder is one thread's: it takes no lock.
 */
#include "manifest_i.h"

#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

void manifest_content_id(uint64_t size, const struct sfs_id *chunks,
			 uint32_t nchunks, struct sfs_id *out)
{
	XXH3_state_t st;
	uint8_t b[MF_ID_SIZE];
	XXH128_hash_t h;

	XXH3_128bits_reset(&st);
	st64(b, size);
	XXH3_128bits_update(&st, b, 8);
	for (uint32_t i = 0; i < nchunks; i++) {
		st_id(b, &chunks[i]);
		XXH3_128bits_update(&st, b, MF_ID_SIZE);
	}
	h = XXH3_128bits_digest(&st);
	out->hi = h.high64;
	out->lo = h.low64;
}


/* An added entry: 88 bytes, plus its path (and target) in the arena. */
struct bent {
	uint64_t path_off;	/* arena: path, NUL, [target, NUL] */
	uint64_t chunk_at;	/* first of its ids in b->ids */
	uint64_t size;
	int64_t sec[3];
	uint32_t nsec[3];
	uint32_t path_len;
	uint32_t mode, nlink, uid, gid;
	uint32_t parent;	/* set by finish */
	uint16_t target_len;	/* symlink target, or a hard link's file path */
	uint8_t name_len;	/* the last component's; 0 for the root */
	uint8_t link : 1;	/* a hard link: the target is the file's path */
	uint8_t chunked : 1;	/* has its ceil(size / chunk_size) ids */
	uint8_t content : 2;	/* CONTENT_* */
};

/* Where the last component of @e's path starts. */
static inline uint32_t bent_name_at(const struct bent *e)
{
	return e->path_len - e->name_len;
}

/* Chunk ids of @e (a regular file's, else 0). */
static inline uint32_t bent_nchunks(const struct manifest_builder *b,
				    const struct bent *e);

enum {
	CONTENT_NONE,		/* zero */
	CONTENT_GIVEN,		/* b->cids[i] */
	CONTENT_CHUNKS,		/* manifest_content_id() of its chunks, at finish */
};

struct manifest_builder {
	uint32_t chunk_size;
	struct bent *ents;
	size_t n, cap;
	struct sfs_id *cids;	/* content ids given, by entry; NULL until one is */
	char *arena;
	size_t arena_len, arena_cap;
	struct sfs_id *ids;
	size_t nids, ids_cap;
	size_t nlinks;
	/* packs: the pack table, and each entry's place (pack + 1) << 32 | off,
	 * NULL until a packed file is added */
	struct bpack {
		struct sfs_id id;
		uint64_t size;
	} *packs;
	size_t npacks, packs_cap;
	uint64_t *ploc;
	/* open-addressing path -> entry index + 1, at most 3/4 full; 0 is
	 * empty; NULL after finish */
	uint32_t *slots;
	size_t nslots;		/* power of two */
};

static inline uint32_t bent_nchunks(const struct manifest_builder *b,
				    const struct bent *e)
{
	return e->chunked ? (uint32_t)DIV_ROUND_UP(e->size, b->chunk_size) : 0;
}

struct manifest_builder *manifest_builder_create(uint32_t chunk_size)
{
	struct manifest_builder *b;

	if (chunk_size < 4096 || chunk_size > (1u << 30) ||
	    (chunk_size & (chunk_size - 1)))
		return NULL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->chunk_size = chunk_size;
	return b;
}

void manifest_builder_destroy(struct manifest_builder *b)
{
	if (!b)
		return;
	free(b->ents);
	free(b->cids);
	free(b->arena);
	free(b->ids);
	free(b->packs);
	free(b->ploc);
	free(b->slots);
	free(b);
}

size_t manifest_builder_mem(const struct manifest_builder *b)
{
	return b->cap * sizeof(*b->ents) + (b->cids ? b->cap * sizeof(*b->cids) : 0) +
	       (b->ploc ? b->cap * sizeof(*b->ploc) : 0) + b->packs_cap * sizeof(*b->packs) +
	       b->arena_cap + b->ids_cap * sizeof(*b->ids) +
	       b->nslots * sizeof(*b->slots);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 64;
	void *np;

	if (need <= *cap)
		return 0;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2 / elem)
			return -ENOMEM;
		ncap *= 2;
	}
	np = realloc(*p, ncap * elem);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

static const char *bent_path(const struct manifest_builder *b, const struct bent *e)
{
	return b->arena + e->path_off;
}

static uint64_t path_hash(const char *p, size_t len)
{
	return XXH3_64bits(p, len);
}

/* Slot holding @path, or the empty slot where it would go. */
static size_t slot_find(const struct manifest_builder *b, const char *path,
			size_t len)
{
	size_t mask = b->nslots - 1;
	size_t i = (size_t)path_hash(path, len) & mask;

	for (;;) {
		uint32_t v = b->slots[i];
		const struct bent *e;

		if (!v)
			return i;
		e = &b->ents[v - 1];
		if (e->path_len == len && !memcmp(bent_path(b, e), path, len))
			return i;
		i = (i + 1) & mask;
	}
}

/* A path index for @want entries at most 3/4 full, holding every entry. */
static int slots_rebuild(struct manifest_builder *b, size_t want)
{
	size_t nslots = 1024;

	while (nslots / 4 * 3 < want)
		nslots *= 2;
	free(b->slots);
	b->slots = calloc(nslots, sizeof(*b->slots));
	if (!b->slots) {
		b->nslots = 0;
		return -ENOMEM;
	}
	b->nslots = nslots;
	for (size_t i = 0; i < b->n; i++) {
		const struct bent *e = &b->ents[i];

		b->slots[slot_find(b, bent_path(b, e), e->path_len)] = (uint32_t)(i + 1);
	}
	return 0;
}

/* Room in the path index for one more entry (rebuilt if finish freed it). */
static int slots_room(struct manifest_builder *b)
{
	if (b->slots && b->n + 1 <= b->nslots / 4 * 3)
		return 0;
	return slots_rebuild(b, b->slots ? b->nslots : b->n + 1);
}

/*
 * Room for one more entry named @path: its hash slot in *@slot (free),
 * and b->ents grown.  -EEXIST if the name is taken.
 */
static int entry_reserve(struct manifest_builder *b, const char *path,
			 size_t len, size_t *slot)
{
	size_t cap = b->cap;
	int rc;

	if (b->n >= MF_MAX_ENTRIES)
		return -EOVERFLOW;
	rc = slots_room(b);
	if (rc)
		return rc;
	*slot = slot_find(b, path, len);
	if (b->slots[*slot])
		return -EEXIST;
	if (grow((void **)&b->ents, &b->cap, b->n + 1, sizeof(*b->ents)))
		return -ENOMEM;
	if (b->cids && b->cap != cap) {
		size_t c = cap;

		if (grow((void **)&b->cids, &c, b->cap, sizeof(*b->cids)))
			return -ENOMEM;
	}
	if (b->ploc && b->cap != cap) {
		size_t c = cap;

		if (grow((void **)&b->ploc, &c, b->cap, sizeof(*b->ploc)))
			return -ENOMEM;
		memset(b->ploc + cap, 0, (b->cap - cap) * sizeof(*b->ploc));
	}
	return 0;
}

/* Check a relative path; sets *name_at to the start of its last component. */
static int path_check(const char *path, size_t len, uint32_t *name_at)
{
	size_t start = 0;

	*name_at = 0;
	if (len == 0)
		return 0;
	if (len > UINT32_MAX / 2)
		return -ENAMETOOLONG;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		if (i - start > MF_NAME_MAX)
			return -ENAMETOOLONG;
		if (!name_ok(path + start, i - start))
			return -EINVAL;
		*name_at = (uint32_t)start;
		start = i + 1;
	}
	return 0;
}

/* Store content id @id of the entry being added (b->n). */
static int cid_put(struct manifest_builder *b, const struct sfs_id *id)
{
	if (!b->cids) {
		b->cids = malloc(b->cap * sizeof(*b->cids));
		if (!b->cids)
			return -ENOMEM;
	}
	b->cids[b->n] = *id;
	return 0;
}

int manifest_builder_add(struct manifest_builder *b, const char *path,
			 const struct sfs_attr *attr, const char *target,
			 const struct sfs_id *chunks, uint32_t nchunks)
{
	size_t len = strlen(path), tlen = 0, slot;
	uint32_t type = attr->mode & S_IFMT;
	struct bent *e;
	uint32_t name_at;
	int rc;

	rc = path_check(path, len, &name_at);
	if (rc)
		return rc;
	if (type != S_IFDIR && type != S_IFREG && type != S_IFLNK)
		return -EINVAL;
	if (len == 0 && type != S_IFDIR)
		return -EINVAL;
	if (type == S_IFLNK) {
		if (!target)
			return -EINVAL;
		tlen = strlen(target);
		if (tlen == 0)
			return -EINVAL;
		if (tlen > MF_TARGET_MAX)
			return -ENAMETOOLONG;
	} else if (target) {
		return -EINVAL;
	}
	if (nchunks && (type != S_IFREG ||
			nchunks != DIV_ROUND_UP(attr->size, b->chunk_size)))
		return -EINVAL;
	if ((long)attr->atime.tv_nsec < 0 || attr->atime.tv_nsec >= 1000000000L ||
	    (long)attr->mtime.tv_nsec < 0 || attr->mtime.tv_nsec >= 1000000000L ||
	    (long)attr->ctime.tv_nsec < 0 || attr->ctime.tv_nsec >= 1000000000L)
		return -EINVAL;
	rc = entry_reserve(b, path, len, &slot);
	if (rc)
		return rc;
	if (nchunks && grow((void **)&b->ids, &b->ids_cap, b->nids + nchunks,
			    sizeof(*b->ids)))
		return -ENOMEM;
	e = &b->ents[b->n];
	memset(e, 0, sizeof(*e));
	/* the target right after the path: one arena_put, one offset */
	if (grow((void **)&b->arena, &b->arena_cap, b->arena_len + len + tlen + 2, 1))
		return -ENOMEM;
	e->path_off = b->arena_len;
	memcpy(b->arena + b->arena_len, path, len + 1);
	if (tlen)
		memcpy(b->arena + b->arena_len + len + 1, target, tlen + 1);
	e->path_len = (uint32_t)len;
	e->name_len = (uint8_t)(len - name_at);
	e->target_len = (uint16_t)tlen;
	e->mode = attr->mode;
	e->nlink = attr->nlink;
	e->uid = attr->uid;
	e->gid = attr->gid;
	e->size = type == S_IFLNK ? tlen : attr->size;
	e->sec[0] = attr->atime.tv_sec;
	e->sec[1] = attr->mtime.tv_sec;
	e->sec[2] = attr->ctime.tv_sec;
	e->nsec[0] = (uint32_t)attr->atime.tv_nsec;
	e->nsec[1] = (uint32_t)attr->mtime.tv_nsec;
	e->nsec[2] = (uint32_t)attr->ctime.tv_nsec;
	if (type == S_IFREG) {
		if (!sfs_id_is_zero(&attr->content)) {
			if (cid_put(b, &attr->content))
				return -ENOMEM;
			e->content = CONTENT_GIVEN;
		} else if (nchunks || e->size == 0) {
			/* a chunked (or empty) file without an id gets the chunk-list id */
			e->content = CONTENT_CHUNKS;
		}
		if (nchunks) {
			memcpy(b->ids + b->nids, chunks, nchunks * sizeof(*chunks));
			e->chunk_at = b->nids;
			e->chunked = 1;
			b->nids += nchunks;
		}
		if (!e->nlink)
			e->nlink = 1;
	} else if (type == S_IFLNK && !e->nlink) {
		e->nlink = 1;
	}
	b->arena_len += len + 1 + (tlen ? tlen + 1 : 0);
	b->slots[slot] = (uint32_t)(b->n + 1);
	b->n++;
	return 0;
}

int manifest_builder_add_pack(struct manifest_builder *b, const struct sfs_id *id,
			      uint64_t size, uint32_t *index)
{
	if (size == 0 || size > b->chunk_size)
		return -EINVAL;
	if (b->npacks >= UINT32_MAX - 1)
		return -EOVERFLOW;
	if (grow((void **)&b->packs, &b->packs_cap, b->npacks + 1, sizeof(*b->packs)))
		return -ENOMEM;
	b->packs[b->npacks].id = *id;
	b->packs[b->npacks].size = size;
	*index = (uint32_t)b->npacks++;
	return 0;
}

int manifest_builder_add_packed(struct manifest_builder *b, const char *path,
				const struct sfs_attr *attr, const struct sfs_id *chunk,
				uint32_t pack, uint32_t off)
{
	struct sfs_attr a = *attr;
	int rc;

	if (!S_ISREG(a.mode) || a.size == 0 || a.size > b->chunk_size ||
	    pack >= b->npacks || off > b->packs[pack].size ||
	    a.size > b->packs[pack].size - off)
		return -EINVAL;
	if (!b->ploc) {
		b->ploc = calloc(b->cap ? b->cap : 1, sizeof(*b->ploc));
		if (!b->ploc)
			return -ENOMEM;
	}
	memset(&a.content, 0, sizeof(a.content));	/* the chunk's, as unpacked */
	rc = manifest_builder_add(b, path, &a, NULL, chunk, 1);
	if (rc)
		return rc;
	b->ploc[b->n - 1] = ((uint64_t)pack + 1) << 32 | off;
	return 0;
}

int manifest_builder_link(struct manifest_builder *b, const char *path,
			  const char *target)
{
	size_t len = strlen(path), tlen = strlen(target), slot;
	struct bent *e;
	uint32_t name_at, tname_at;
	int rc;

	rc = path_check(path, len, &name_at);
	if (!rc)
		rc = path_check(target, tlen, &tname_at);
	if (rc)
		return rc;
	if (len == 0 || tlen == 0 || (len == tlen && !memcmp(path, target, len)))
		return -EINVAL;
	if (tlen > UINT16_MAX)
		return -ENAMETOOLONG;
	rc = entry_reserve(b, path, len, &slot);
	if (rc)
		return rc;
	if (grow((void **)&b->arena, &b->arena_cap, b->arena_len + len + tlen + 2, 1))
		return -ENOMEM;
	e = &b->ents[b->n];
	memset(e, 0, sizeof(*e));
	e->path_off = b->arena_len;
	memcpy(b->arena + b->arena_len, path, len + 1);
	memcpy(b->arena + b->arena_len + len + 1, target, tlen + 1);
	b->arena_len += len + tlen + 2;
	e->path_len = (uint32_t)len;
	e->name_len = (uint8_t)(len - name_at);
	e->target_len = (uint16_t)tlen;
	e->mode = S_IFREG;	/* the rest is the file's, copied at finish */
	e->link = 1;
	b->slots[slot] = (uint32_t)(b->n + 1);
	b->n++;
	b->nlinks++;
	return 0;
}

static const char *bent_target(const struct manifest_builder *b,
			       const struct bent *e)
{
	return b->arena + e->path_off + e->path_len + 1;
}

/*
 * Resolve the hard links: @inode[i] is the builder entry whose file entry i
 * names (i itself for all but links), @names[i] the number of names of file
 * i.  Returns 0, or -ENOENT / -EINVAL (logged) for a link whose target is
 * missing or is not a regular file added with manifest_builder_add().
 */
static int links_resolve(struct manifest_builder *b, uint32_t *inode,
			 uint32_t *names)
{
	for (size_t i = 0; i < b->n; i++) {
		inode[i] = (uint32_t)i;
		names[i] = 1;
	}
	for (size_t i = 0; i < b->n; i++) {
		const struct bent *e = &b->ents[i];
		const char *t = bent_target(b, e);
		uint32_t v;

		if (!e->link)
			continue;
		v = b->slots[slot_find(b, t, e->target_len)];
		if (!v) {
			log_err("manifest: hard link '%s' names '%s', which is not in the tree",
				bent_path(b, e), t);
			return -ENOENT;
		}
		if (!S_ISREG(b->ents[v - 1].mode) || b->ents[v - 1].link) {
			log_err("manifest: hard link '%s' names '%s', which is not a regular file%s",
				bent_path(b, e), t,
				b->ents[v - 1].link ? " (it is a hard link itself)" : "");
			return -EINVAL;
		}
		inode[i] = v - 1;
		names[v - 1]++;
	}
	return 0;
}

static int bent_name_cmp(const void *pa, const void *pb, void *arg)
{
	const struct manifest_builder *b = arg;
	const struct bent *x = &b->ents[*(const uint32_t *)pa];
	const struct bent *y = &b->ents[*(const uint32_t *)pb];

	return name_cmp(bent_path(b, x) + bent_name_at(x), x->name_len,
			bent_path(b, y) + bent_name_at(y), y->name_len);
}

/* ---- output: front to back, into memory or a file, parts hashed on the way ---- */

#define OUT_BUF		(1u << 20)

struct mf_out {
	int fd;			/* -1: into mem */
	uint8_t *mem;		/* the manifest so far (memory), or the write buffer */
	size_t cap;
	uint64_t pos;		/* bytes produced */
	uint64_t flushed;	/* file: bytes written to fd */
	int err;
	/* the part being hashed */
	uint32_t shift;
	uint64_t fill;		/* bytes in the current part; 0 between sections too */
	XXH3_state_t st;
	uint64_t *table;	/* part hashes so far */
	uint64_t np, tcap;
};

static int out_flush(struct mf_out *o)
{
	size_t n = (size_t)(o->pos - o->flushed);
	ssize_t w;

	if (o->fd < 0 || o->err || !n)
		return o->err;
	w = pwrite_full(o->fd, o->mem, n, (off_t)o->flushed);
	if (w != (ssize_t)n)
		o->err = w < 0 ? (int)w : -EIO;
	o->flushed = o->pos;
	return o->err;
}

/* Append @len bytes (@p NULL: zeros). */
static void out_put(struct mf_out *o, const void *p, size_t len)
{
	while (len && !o->err) {
		size_t at, n;

		if (o->fd < 0) {
			if (o->pos + len > o->cap) {
				size_t cap = o->cap;

				if (grow((void **)&o->mem, &cap, (size_t)o->pos + len, 1)) {
					o->err = -ENOMEM;
					return;
				}
				o->cap = cap;
			}
			at = (size_t)o->pos;
			n = len;
		} else {
			if (o->pos - o->flushed == OUT_BUF && out_flush(o))
				return;
			at = (size_t)(o->pos - o->flushed);
			n = MIN(len, OUT_BUF - at);
		}
		if (p) {
			memcpy(o->mem + at, p, n);
			p = (const uint8_t *)p + n;
		} else {
			memset(o->mem + at, 0, n);
		}
		o->pos += n;
		len -= n;
	}
}

static void part_end(struct mf_out *o)
{
	if (o->np == o->tcap && grow((void **)&o->table, &o->tcap, o->np + 1,
				    sizeof(*o->table))) {
		o->err = -ENOMEM;
		return;
	}
	o->table[o->np++] = XXH3_64bits_digest(&o->st);
	XXH3_64bits_reset(&o->st);
	o->fill = 0;
}

/* Append @len bytes (@p NULL: zeros) to the section being written. */
static void sec_put(struct mf_out *o, const void *p, size_t len)
{
	static const uint8_t zeros[4096];
	uint64_t psize = 1ull << o->shift;

	while (len && !o->err) {
		size_t n = (size_t)MIN((uint64_t)len, psize - o->fill);

		if (!p)
			n = MIN(n, sizeof(zeros));
		out_put(o, p, n);
		XXH3_64bits_update(&o->st, p ? p : zeros, n);
		o->fill += n;
		if (p)
			p = (const uint8_t *)p + n;
		len -= n;
		if (o->fill == psize)
			part_end(o);
	}
}

/* Zeros to the end of the current part, if one is begun. */
static void sec_pad(struct mf_out *o)
{
	if (o->fill)
		sec_put(o, NULL, (size_t)((1ull << o->shift) - o->fill));
}

/* End the section: its last, short part gets its hash. */
static void sec_end(struct mf_out *o)
{
	if (o->fill)
		part_end(o);
}

/* Start a section at a multiple of @align; returns its offset. */
static uint64_t sec_begin(struct mf_out *o, uint64_t align)
{
	out_put(o, NULL, (size_t)((align - o->pos % align) % align));
	o->fill = 0;
	XXH3_64bits_reset(&o->st);
	return o->pos;
}

/*
 * Where the next string of @len bytes goes, from string offset *@soff: the
 * start of the next part if it would cross a boundary.  Advances *@soff.
 */
static uint64_t str_place(uint64_t *soff, uint64_t len, uint32_t shift)
{
	uint64_t psize = 1ull << shift, at = *soff;

	if (len && at / psize != (at + len - 1) / psize)
		at = (at / psize + 1) * psize;
	*soff = at + len;
	return at;
}

/* The sort of a finish: who comes where, and each directory's children. */
struct layout {
	size_t n;
	uint32_t *count;	/* children of each entry */
	uint32_t *start;	/* where they are in sorted; after the BFS: the first's index */
	uint32_t *sorted, *order, *final;
	uint32_t *inode, *names, *lowest;	/* NULL without hard links */
};

static void layout_release(struct layout *l)
{
	free(l->count);
	free(l->start);
	free(l->sorted);
	free(l->order);
	free(l->final);
	free(l->inode);
	free(l->names);
	free(l->lowest);
}

static uint32_t lay_inode(const struct layout *l, size_t i)
{
	return l->inode ? l->inode[i] : (uint32_t)i;
}

/* Parents, hard links, the breadth-first order.  Frees the path index. */
static int layout_make(struct manifest_builder *b, struct layout *l)
{
	uint32_t root;
	size_t slot, n;
	int rc;

	memset(l, 0, sizeof(*l));
	/* the root, implicitly */
	rc = slots_room(b);
	if (rc)
		return rc;
	slot = slot_find(b, "", 0);
	if (!b->slots[slot]) {
		struct sfs_attr ra = { .mode = S_IFDIR | 0755 };

		rc = manifest_builder_add(b, "", &ra, NULL, NULL, 0);
		if (rc)
			return rc;
		slot = slot_find(b, "", 0);
	}
	root = b->slots[slot] - 1;
	n = l->n = b->n;

	if (b->nlinks) {
		l->inode = malloc(n * sizeof(*l->inode));
		l->names = malloc(n * sizeof(*l->names));
		l->lowest = malloc(n * sizeof(*l->lowest));
		if (!l->inode || !l->names || !l->lowest)
			return -ENOMEM;
		rc = links_resolve(b, l->inode, l->names);
		if (rc)
			return rc;
	}
	l->count = calloc(n + 1, sizeof(*l->count));
	if (!l->count)
		return -ENOMEM;

	/* parents */
	for (size_t i = 0; i < n; i++) {
		struct bent *e = &b->ents[i];
		size_t plen;
		uint32_t v;

		if (i == root) {
			e->parent = root;
			continue;
		}
		plen = bent_name_at(e) ? bent_name_at(e) - 1 : 0;
		v = b->slots[slot_find(b, bent_path(b, e), plen)];
		if (!v) {
			log_err("manifest: '%s' has no parent directory '%.*s'",
				bent_path(b, e), (int)plen, bent_path(b, e));
			return -ENOENT;
		}
		if (!S_ISDIR(b->ents[v - 1].mode)) {
			log_err("manifest: '%s' is under '%.*s', which is not a directory",
				bent_path(b, e), (int)plen, bent_path(b, e));
			return -ENOTDIR;
		}
		e->parent = v - 1;
		l->count[e->parent]++;
	}
	/* the path index has done its work: its memory goes to the sort */
	free(b->slots);
	b->slots = NULL;
	b->nslots = 0;

	l->start = calloc(n + 1, sizeof(*l->start));
	l->sorted = malloc(n * sizeof(*l->sorted));
	if (!l->start || !l->sorted)
		return -ENOMEM;
	/* counting sort by parent, then by name inside each parent */
	for (size_t i = 0, s = 0; i < n; i++) {
		l->start[i] = (uint32_t)s;
		s += l->count[i];
	}
	memset(l->count, 0, (n + 1) * sizeof(*l->count));
	for (size_t i = 0; i < n; i++) {
		uint32_t p = b->ents[i].parent;

		if (i == root)
			continue;
		l->sorted[l->start[p] + l->count[p]++] = (uint32_t)i;
	}
	for (size_t i = 0; i < n; i++)
		if (l->count[i] > 1)
			qsort_r(l->sorted + l->start[i], l->count[i], sizeof(*l->sorted),
				bent_name_cmp, b);

	l->order = malloc(n * sizeof(*l->order));
	if (!l->order)
		return -ENOMEM;
	/*
	 * Breadth-first: each directory's children get consecutive indexes;
	 * start[d] becomes the index of d's first child, so the sort's output
	 * can go before final[] is allocated (the peak stays at four arrays).
	 */
	{
		size_t head = 0, tail = 0;

		l->order[tail++] = root;
		while (head < tail) {
			uint32_t d = l->order[head++];
			uint32_t s = l->start[d];

			l->start[d] = (uint32_t)tail;
			for (uint32_t k = 0; k < l->count[d]; k++)
				l->order[tail++] = l->sorted[s + k];
		}
		if (tail != n)	/* cannot happen: every entry has a parent chain */
			return -EIO;
	}
	free(l->sorted);
	l->sorted = NULL;
	l->final = malloc(n * sizeof(*l->final));
	if (!l->final)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		l->final[l->order[i]] = (uint32_t)i;
	/* the first name of a file in entry order holds its inode */
	if (l->inode) {
		for (size_t i = 0; i < n; i++)
			l->lowest[i] = UINT32_MAX;
		for (size_t i = 0; i < n; i++)
			l->lowest[l->inode[i]] = MIN(l->lowest[l->inode[i]], l->final[i]);
	}
	return 0;
}

/* Entry record @i (final order) into @p (@esize bytes, zeroed). */
static void record_fill(const struct manifest_builder *b, const struct layout *l,
			size_t i, uint32_t esize, uint64_t name_off,
			uint64_t target_off, uint8_t *p)
{
	/* @e gives the name and parent, @f (its file) the rest */
	const struct bent *e = &b->ents[l->order[i]];
	uint32_t fi = lay_inode(l, l->order[i]);
	const struct bent *f = &b->ents[fi];
	uint32_t nlen = e->name_len;
	uint32_t nlink = f->nlink, cnt = 0;
	uint64_t first = 0;
	struct sfs_id content = { 0, 0 };

	switch (e->mode & S_IFMT) {
	case S_IFDIR:
		cnt = l->count[l->order[i]];
		first = cnt ? l->start[l->order[i]] : 0;
		if (!nlink) {
			nlink = 2;
			for (uint32_t k = 0; k < cnt; k++)
				if (S_ISDIR(b->ents[l->order[first + k]].mode))
					nlink++;
		}
		break;
	case S_IFREG:
		cnt = bent_nchunks(b, f);
		first = f->chunk_at;
		if (l->names && l->names[fi] > 1)
			nlink = MAX(nlink, l->names[fi]);
		if (l->lowest && esize >= MF_ENTRY_SIZE_LINKS && l->lowest[fi] != i)
			st32(p + E_INODE, l->lowest[fi]);
		if (b->ploc && esize >= MF_ENTRY_SIZE_PACKS && b->ploc[fi]) {
			st32(p + E_PACK, (uint32_t)(b->ploc[fi] >> 32));
			st32(p + E_PACK_OFF, (uint32_t)b->ploc[fi]);
		}
		if (f->content == CONTENT_GIVEN)
			content = b->cids[fi];
		else if (f->content == CONTENT_CHUNKS)
			manifest_content_id(f->size, b->ids + f->chunk_at, cnt, &content);
		break;
	case S_IFLNK:
		cnt = e->target_len;
		first = target_off;
		break;
	}
	st32(p + E_MODE, f->mode);
	st32(p + E_NLINK, nlink);
	st32(p + E_UID, f->uid);
	st32(p + E_GID, f->gid);
	st64(p + E_SIZE, f->size);
	for (int t = 0; t < 3; t++) {
		st64(p + E_ATIME + 8 * t, (uint64_t)f->sec[t]);
		st32(p + E_ATIME_NS + 4 * t, f->nsec[t]);
	}
	st32(p + E_PARENT, l->final[e->parent]);
	st64(p + E_NAME_OFF, name_off);
	st32(p + E_NAME_LEN, nlen);
	st32(p + E_COUNT, cnt);
	st64(p + E_FIRST, first);
	st_id(p + E_CONTENT, &content);
}

/* Order of two members of one pack: by offset. */
static int member_cmp(const void *pa, const void *pb, void *arg)
{
	const struct manifest_builder *b = arg;
	uint32_t x = (uint32_t)b->ploc[*(const uint32_t *)pa];
	uint32_t y = (uint32_t)b->ploc[*(const uint32_t *)pb];

	return x < y ? -1 : x > y;
}

/*
 * The pack table and the member table: each pack's files (the entry that
 * holds each one's inode) in offset order, packs in the order added.
 * Sets *@pack_off and *@mem_off; 0 or -errno.
 */
static int emit_packs(struct manifest_builder *b, const struct layout *l,
		      struct mf_out *o, uint64_t *pack_off, uint64_t *mem_off)
{
	uint32_t *start = calloc(b->npacks + 1, sizeof(*start));
	uint32_t *fill = calloc(b->npacks + 1, sizeof(*fill));
	uint32_t *mem = NULL;
	size_t nmem = 0;
	int rc = 0;

	if (!start || !fill) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < l->n; i++)
		if (b->ploc[i] && !b->ents[i].link)
			start[(b->ploc[i] >> 32) - 1 + 1]++, nmem++;
	for (size_t k = 0; k < b->npacks; k++)
		start[k + 1] += start[k];
	mem = malloc((nmem ? nmem : 1) * sizeof(*mem));	/* builder indexes */
	if (!mem) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < l->n; i++)
		if (b->ploc[i] && !b->ents[i].link) {
			uint32_t k = (uint32_t)(b->ploc[i] >> 32) - 1;

			mem[start[k] + fill[k]++] = (uint32_t)i;
		}
	for (size_t k = 0; k < b->npacks; k++)
		if (fill[k] > 1)
			qsort_r(mem + start[k], fill[k], sizeof(*mem), member_cmp, b);

	*pack_off = sec_begin(o, 8);
	for (size_t k = 0; k < b->npacks && !o->err; k++) {
		uint8_t r[MF_PACK_SIZE] = { 0 };

		st_id(r + P_ID, &b->packs[k].id);
		st64(r + P_SIZE, b->packs[k].size);
		st32(r + P_FIRST, start[k]);
		st32(r + P_COUNT, fill[k]);
		sec_put(o, r, sizeof(r));
	}
	sec_end(o);
	*mem_off = sec_begin(o, 8);
	for (size_t j = 0; j < nmem && !o->err; j++) {
		uint8_t r[MF_MEMBER_SIZE];
		uint32_t i = mem[j];

		st32(r + M_ENTRY, l->lowest ? l->lowest[i] : l->final[i]);
		st32(r + M_OFF, (uint32_t)b->ploc[i]);
		sec_put(o, r, sizeof(r));
	}
	sec_end(o);
	rc = o->err;
out:
	free(start);
	free(fill);
	free(mem);
	return rc;
}

/* Write the whole manifest through @o. */
static int emit(struct manifest_builder *b, uint64_t version, struct mf_out *o)
{
	struct layout l;
	uint64_t ent_off, ent_len, chk_off, str_off, str_len, tab_off;
	uint64_t pack_off = 0, pack_len = 0, mem_off = 0, mem_len = 0;
	uint64_t total_bytes = 0, soff, per, align;
	uint8_t hdr[MF2_HEADER_SIZE], rec[MF_ENTRY_SIZE_PACKS];
	uint32_t esize;
	int rc;

	rc = layout_make(b, &l);
	if (rc)
		goto out;
	esize = b->npacks ? MF_ENTRY_SIZE_PACKS :
		b->nlinks ? MF_ENTRY_SIZE_LINKS : MF_ENTRY_SIZE;
	per = mf2_per_part(esize, MF2_PART_SHIFT);
	o->shift = MF2_PART_SHIFT;
	/* page-aligned sections when big, so a part is whole pages of a mapping */
	align = (uint64_t)l.n * esize > (1u << MF2_PART_SHIFT) ? 4096 : 8;

	out_put(o, NULL, MF2_HEADER_SIZE);	/* written last */

	/* entries, assigning string offsets as the string pass will place them */
	ent_off = sec_begin(o, align);
	soff = 0;
	for (size_t i = 0; i < l.n && !o->err; i++) {
		const struct bent *e = &b->ents[l.order[i]];
		uint64_t name_off, target_off = 0;

		if (i && i % per == 0)
			sec_pad(o);
		name_off = str_place(&soff, e->name_len, MF2_PART_SHIFT);
		if (S_ISLNK(e->mode))
			target_off = str_place(&soff, e->target_len, MF2_PART_SHIFT);
		if (S_ISREG(e->mode) && !e->link)
			total_bytes += e->size;
		memset(rec, 0, esize);
		record_fill(b, &l, i, esize, name_off, target_off, rec);
		sec_put(o, rec, esize);
	}
	sec_end(o);
	ent_len = o->pos - ent_off;

	/* chunk ids, as added: each file's run once, its links share it */
	chk_off = sec_begin(o, align);
	for (size_t j = 0; j < b->nids && !o->err; j++) {
		uint8_t id[MF_ID_SIZE];

		st_id(id, &b->ids[j]);
		sec_put(o, id, MF_ID_SIZE);
	}
	sec_end(o);

	/* names and targets, in the order the entry pass placed them */
	str_off = sec_begin(o, align);
	soff = 0;
	for (size_t i = 0; i < l.n && !o->err; i++) {
		const struct bent *e = &b->ents[l.order[i]];
		uint32_t nlen = e->name_len;
		uint64_t at = str_place(&soff, nlen, MF2_PART_SHIFT);

		sec_put(o, NULL, (size_t)(at - (o->pos - str_off)));
		sec_put(o, bent_path(b, e) + bent_name_at(e), nlen);
		if (S_ISLNK(e->mode)) {
			at = str_place(&soff, e->target_len, MF2_PART_SHIFT);
			sec_put(o, NULL, (size_t)(at - (o->pos - str_off)));
			sec_put(o, bent_target(b, e), e->target_len);
		}
	}
	sec_end(o);
	str_len = o->pos - str_off;

	if (b->npacks) {
		rc = emit_packs(b, &l, o, &pack_off, &mem_off);
		if (rc)
			goto out;
		pack_len = (uint64_t)b->npacks * MF_PACK_SIZE;
		mem_len = o->pos - mem_off;
	}

	/* the part table */
	tab_off = sec_begin(o, 8);
	for (uint64_t p = 0; p < o->np && !o->err; p++) {
		uint8_t v[8];

		st64(v, o->table[p]);
		out_put(o, v, 8);
	}
	rc = o->err;
	if (rc)
		goto out;
	if (ent_len != mf2_ent_len(l.n, esize, MF2_PART_SHIFT)) {	/* cannot happen */
		rc = -EIO;
		goto out;
	}

	memset(hdr, 0, sizeof(hdr));
	memcpy(hdr + H_MAGIC, MF_MAGIC, 8);
	st32(hdr + H_FORMAT, MF_FORMAT_VERSION);
	st32(hdr + H_HDRSIZE, MF2_HEADER_SIZE);
	st32(hdr + H_INCOMPAT, b->npacks ? MF_INCOMPAT_PACKS : 0);
	st32(hdr + H_COMPAT, b->nlinks ? MF_COMPAT_HARDLINKS : 0);
	st32(hdr + H_CHUNKSIZE, b->chunk_size);
	st32(hdr + H_ENTSIZE, esize);
	st64(hdr + H_VERSION, version);
	st64(hdr + H_NENTRIES, l.n);
	st64(hdr + H_NCHUNKS, b->nids);
	st64(hdr + H_BYTES, total_bytes);
	st32(hdr + H2_PARTSHIFT, MF2_PART_SHIFT);
	st64(hdr + H2_ENT_OFF, ent_off);
	st64(hdr + H2_ENT_LEN, ent_len);
	st64(hdr + H2_CHK_OFF, chk_off);
	st64(hdr + H2_CHK_LEN, (uint64_t)b->nids * MF_ID_SIZE);
	st64(hdr + H2_STR_OFF, str_off);
	st64(hdr + H2_STR_LEN, str_len);
	st64(hdr + H2_TAB_OFF, tab_off);
	st64(hdr + H2_NPARTS, o->np);
	if (b->npacks) {
		st64(hdr + H2_PACK_OFF, pack_off);
		st64(hdr + H2_PACK_LEN, pack_len);
		st64(hdr + H2_MEM_OFF, mem_off);
		st64(hdr + H2_MEM_LEN, mem_len);
	}
	{
		/* the table as stored (little-endian) */
		XXH3_state_t st;

		XXH3_64bits_reset(&st);
		for (uint64_t p = 0; p < o->np; p++) {
			uint8_t v[8];

			st64(v, o->table[p]);
			XXH3_64bits_update(&st, v, 8);
		}
		st64(hdr + H2_TAB_SUM, XXH3_64bits_digest(&st));
	}
	st64(hdr + H_HDRSUM, XXH3_64bits(hdr, MF2_HEADER_SIZE));
	if (o->fd < 0) {
		memcpy(o->mem, hdr, sizeof(hdr));
	} else {
		ssize_t w;

		rc = out_flush(o);
		if (rc)
			goto out;
		w = pwrite_full(o->fd, hdr, sizeof(hdr), 0);
		if (w != (ssize_t)sizeof(hdr))
			rc = w < 0 ? (int)w : -EIO;
	}
out:
	layout_release(&l);
	return rc;
}

int manifest_builder_finish(struct manifest_builder *b, uint64_t version,
			    void **bufp, size_t *lenp)
{
	struct mf_out o = { .fd = -1 };
	int rc;

	*bufp = NULL;
	*lenp = 0;
	rc = emit(b, version, &o);
	free(o.table);
	if (rc) {
		free(o.mem);
		return rc;
	}
	*bufp = o.mem;
	*lenp = (size_t)o.pos;
	return 0;
}

int manifest_builder_write(struct manifest_builder *b, uint64_t version,
			   int fd, uint64_t *lenp)
{
	struct mf_out o = { .fd = fd };
	int rc;

	*lenp = 0;
	o.mem = malloc(OUT_BUF);
	if (!o.mem)
		return -ENOMEM;
	o.cap = OUT_BUF;
	rc = emit(b, version, &o);
	free(o.table);
	free(o.mem);
	if (!rc)
		*lenp = o.pos;
	return rc;
}

int manifest_file_set_version(int fd, uint64_t version)
{
	uint8_t hdr[MF2_HEADER_SIZE];
	ssize_t n = pread_full(fd, hdr, sizeof(hdr), 0);

	if (n < 0)
		return (int)n;
	if (n != (ssize_t)sizeof(hdr) || memcmp(hdr + H_MAGIC, MF_MAGIC, 8) ||
	    ld32(hdr + H_FORMAT) != MF_FORMAT_VERSION ||
	    ld32(hdr + H_HDRSIZE) != MF2_HEADER_SIZE)
		return -EINVAL;
	st64(hdr + H_VERSION, version);
	st64(hdr + H_HDRSUM, 0);
	st64(hdr + H_HDRSUM, XXH3_64bits(hdr, sizeof(hdr)));
	n = pwrite_full(fd, hdr, sizeof(hdr), 0);
	return n < 0 ? (int)n : n == (ssize_t)sizeof(hdr) ? 0 : -EIO;
}
