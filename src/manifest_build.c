/*
 * manifest_build: build a serialized manifest from entries given in any
 * order (manifest.h: manifest_builder_*), and the content id a writer
 * records for a file (manifest_content_id()).
 *
 * The builder keeps every added entry in one array (paths and targets in
 * an arena, chunk ids in one table) with an open-addressing index by path
 * for duplicate checks.  The index holds array positions, not pointers,
 * because the array moves when it grows: that is why it is not the
 * intrusive table of htab.h.  It sorts at finish: a counting sort by parent, a
 * name sort inside each parent, then a breadth-first pass that assigns the
 * final indexes (manifest_i.h says why that order).  Its output is a pure
 * function of the entries added and the version: the same tree gives the
 * same bytes.  A builder is one thread's: it takes no lock.
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


struct bent {
	uint64_t path_off;
	uint32_t path_len;
	uint32_t name_at;	/* offset of the last component inside the path */
	uint64_t target_off;
	uint32_t target_len;
	uint32_t nchunks;
	uint64_t chunk_at;
	uint32_t mode, nlink, uid, gid;
	uint64_t size;
	int64_t sec[3];
	uint32_t nsec[3];
	struct sfs_id content;
	bool link;		/* a hard link: target_off/len hold the file's path */
	uint32_t parent;	/* set by finish */
};

struct manifest_builder {
	uint32_t chunk_size;
	struct bent *ents;
	size_t n, cap;
	char *arena;
	size_t arena_len, arena_cap;
	struct sfs_id *ids;
	size_t nids, ids_cap;
	/* open-addressing path -> entry index + 1; 0 is empty */
	uint32_t *slots;
	size_t nslots;		/* power of two */
};

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
	free(b->arena);
	free(b->ids);
	free(b->slots);
	free(b);
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

static int slots_grow(struct manifest_builder *b)
{
	size_t nslots = b->nslots ? b->nslots * 2 : 1024;
	uint32_t *old = b->slots;
	size_t oldn = b->nslots;

	b->slots = calloc(nslots, sizeof(*b->slots));
	if (!b->slots) {
		b->slots = old;
		return -ENOMEM;
	}
	b->nslots = nslots;
	for (size_t i = 0; i < oldn; i++) {
		const struct bent *e;

		if (!old[i])
			continue;
		e = &b->ents[old[i] - 1];
		b->slots[slot_find(b, bent_path(b, e), e->path_len)] = old[i];
	}
	free(old);
	return 0;
}

/*
 * Room for one more entry named @path: its hash slot in *@slot (free),
 * and b->ents grown.  -EEXIST if the name is taken.
 */
static int entry_reserve(struct manifest_builder *b, const char *path,
			 size_t len, size_t *slot)
{
	int rc;

	if (b->n >= MF_MAX_ENTRIES)
		return -EOVERFLOW;
	if (b->n + 1 > b->nslots / 2) {
		rc = slots_grow(b);
		if (rc)
			return rc;
	}
	*slot = slot_find(b, path, len);
	if (b->slots[*slot])
		return -EEXIST;
	if (grow((void **)&b->ents, &b->cap, b->n + 1, sizeof(*b->ents)))
		return -ENOMEM;
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

static int arena_put(struct manifest_builder *b, const char *s, size_t len,
		     uint64_t *off)
{
	if (grow((void **)&b->arena, &b->arena_cap, b->arena_len + len + 1, 1))
		return -ENOMEM;
	memcpy(b->arena + b->arena_len, s, len);
	b->arena[b->arena_len + len] = '\0';
	*off = b->arena_len;
	b->arena_len += len + 1;
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
	if (arena_put(b, path, len, &e->path_off))
		return -ENOMEM;
	if (tlen && arena_put(b, target, tlen, &e->target_off))
		return -ENOMEM;	/* the path bytes stay as unreferenced garbage */
	e->path_len = (uint32_t)len;
	e->name_at = name_at;
	e->target_len = (uint32_t)tlen;
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
		e->content = attr->content;
		if (nchunks) {
			memcpy(b->ids + b->nids, chunks, nchunks * sizeof(*chunks));
			e->chunk_at = b->nids;
			e->nchunks = nchunks;
			b->nids += nchunks;
		}
		/* a chunked (or empty) file without an id gets the chunk-list id */
		if (sfs_id_is_zero(&e->content) && (nchunks || e->size == 0))
			manifest_content_id(e->size, chunks, nchunks, &e->content);
		if (!e->nlink)
			e->nlink = 1;
	} else if (type == S_IFLNK && !e->nlink) {
		e->nlink = 1;
	}
	b->slots[slot] = (uint32_t)(b->n + 1);
	b->n++;
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
	rc = entry_reserve(b, path, len, &slot);
	if (rc)
		return rc;
	e = &b->ents[b->n];
	memset(e, 0, sizeof(*e));
	if (arena_put(b, path, len, &e->path_off) ||
	    arena_put(b, target, tlen, &e->target_off))
		return -ENOMEM;
	e->path_len = (uint32_t)len;
	e->name_at = name_at;
	e->target_len = (uint32_t)tlen;
	e->mode = S_IFREG;	/* the rest is the file's, copied at finish */
	e->link = true;
	b->slots[slot] = (uint32_t)(b->n + 1);
	b->n++;
	return 0;
}

/*
 * Resolve the hard links: @inode[i] is the builder entry whose file entry i
 * names (i itself for all but links), @names[i] the number of names of file
 * i.  Returns 0, or -ENOENT / -EINVAL (logged) for a link whose target is
 * missing or is not a regular file added with manifest_builder_add().
 */
static int links_resolve(struct manifest_builder *b, uint32_t *inode,
			 uint32_t *names, bool *any)
{
	*any = false;
	for (size_t i = 0; i < b->n; i++) {
		inode[i] = (uint32_t)i;
		names[i] = 1;
	}
	for (size_t i = 0; i < b->n; i++) {
		const struct bent *e = &b->ents[i];
		const char *t = b->arena + e->target_off;
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
		*any = true;
	}
	return 0;
}

static int bent_name_cmp(const void *pa, const void *pb, void *arg)
{
	const struct manifest_builder *b = arg;
	const struct bent *x = &b->ents[*(const uint32_t *)pa];
	const struct bent *y = &b->ents[*(const uint32_t *)pb];

	return name_cmp(bent_path(b, x) + x->name_at, x->path_len - x->name_at,
			bent_path(b, y) + y->name_at, y->path_len - y->name_at);
}

int manifest_builder_finish(struct manifest_builder *b, uint64_t version,
			    void **bufp, size_t *lenp)
{
	uint32_t *count = NULL, *start = NULL, *sorted = NULL, *order = NULL,
		 *final = NULL, *inode = NULL, *names = NULL, *lowest = NULL;
	uint64_t *chunk_first = NULL;
	uint64_t strs_len = 0, total_bytes = 0, nids = 0;
	uint64_t ent_off, chk_off, str_off, total;
	uint32_t root, esize;
	bool links;
	size_t slot, n;
	uint8_t *buf = NULL, *ents, *chk;
	char *strs;
	int rc;

	*bufp = NULL;
	*lenp = 0;

	/* the root, implicitly */
	if (b->n + 1 > b->nslots / 2) {
		rc = slots_grow(b);
		if (rc)
			return rc;
	}
	slot = slot_find(b, "", 0);
	if (!b->slots[slot]) {
		struct sfs_attr ra = { .mode = S_IFDIR | 0755 };

		rc = manifest_builder_add(b, "", &ra, NULL, NULL, 0);
		if (rc)
			return rc;
		slot = slot_find(b, "", 0);
	}
	root = b->slots[slot] - 1;
	n = b->n;

	rc = -ENOMEM;
	count = calloc(n + 1, sizeof(*count));
	start = calloc(n + 1, sizeof(*start));
	sorted = malloc(n * sizeof(*sorted));
	order = malloc(n * sizeof(*order));
	final = malloc(n * sizeof(*final));
	inode = malloc(n * sizeof(*inode));
	names = malloc(n * sizeof(*names));
	lowest = malloc(n * sizeof(*lowest));
	chunk_first = malloc(n * sizeof(*chunk_first));
	if (!count || !start || !sorted || !order || !final || !inode ||
	    !names || !lowest || !chunk_first)
		goto out;
	rc = links_resolve(b, inode, names, &links);
	if (rc)
		goto out;
	rc = -ENOMEM;

	/* parents */
	for (size_t i = 0; i < n; i++) {
		struct bent *e = &b->ents[i];
		size_t plen;
		uint32_t v;

		if (i == root) {
			e->parent = root;
			continue;
		}
		plen = e->name_at ? e->name_at - 1 : 0;
		v = b->slots[slot_find(b, bent_path(b, e), plen)];
		if (!v) {
			log_err("manifest: '%s' has no parent directory '%.*s'",
				bent_path(b, e), (int)plen, bent_path(b, e));
			rc = -ENOENT;
			goto out;
		}
		if (!S_ISDIR(b->ents[v - 1].mode)) {
			log_err("manifest: '%s' is under '%.*s', which is not a directory",
				bent_path(b, e), (int)plen, bent_path(b, e));
			rc = -ENOTDIR;
			goto out;
		}
		e->parent = v - 1;
		count[e->parent]++;
	}

	/* counting sort by parent, then by name inside each parent */
	for (size_t i = 0, s = 0; i < n; i++) {
		start[i] = (uint32_t)s;
		s += count[i];
	}
	memset(count, 0, (n + 1) * sizeof(*count));
	for (size_t i = 0; i < n; i++) {
		uint32_t p = b->ents[i].parent;

		if (i == root)
			continue;
		sorted[start[p] + count[p]++] = (uint32_t)i;
	}
	for (size_t i = 0; i < n; i++)
		if (count[i] > 1)
			qsort_r(sorted + start[i], count[i], sizeof(*sorted),
				bent_name_cmp, b);

	/* breadth-first: each directory's children get consecutive indexes */
	{
		size_t head = 0, tail = 0;

		order[tail++] = root;
		while (head < tail) {
			uint32_t d = order[head++];

			for (uint32_t k = 0; k < count[d]; k++)
				order[tail++] = sorted[start[d] + k];
		}
		if (tail != n) {	/* cannot happen: every entry has a parent chain */
			rc = -EIO;
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++)
		final[order[i]] = (uint32_t)i;
	/* the first name of a file in entry order holds its inode */
	for (size_t i = 0; i < n; i++)
		lowest[i] = UINT32_MAX;
	for (size_t i = 0; i < n; i++)
		lowest[inode[i]] = MIN(lowest[inode[i]], final[i]);

	for (size_t i = 0; i < n; i++) {
		const struct bent *e = &b->ents[i];

		strs_len += e->path_len - e->name_at;
		if (S_ISLNK(e->mode))
			strs_len += e->target_len;
		if (S_ISREG(e->mode) && !e->link) {
			nids += e->nchunks;
			total_bytes += e->size;
		}
	}

	/* v1 records unless there are hard links, so old trees keep their bytes */
	esize = links ? MF_ENTRY_SIZE_LINKS : MF_ENTRY_SIZE;
	ent_off = MF_HEADER_SIZE;
	chk_off = ent_off + (uint64_t)n * esize;
	str_off = chk_off + nids * MF_ID_SIZE;
	total = str_off + strs_len;
	if (total > SIZE_MAX) {
		rc = -EFBIG;
		goto out;
	}
	buf = calloc(1, total);
	if (!buf)
		goto out;
	ents = buf + ent_off;
	chk = buf + chk_off;
	strs = (char *)buf + str_off;

	{
		uint64_t soff = 0, coff = 0;

		/* each file's chunk run once, in entry order; its links share it */
		for (size_t i = 0; i < n; i++) {
			const struct bent *e = &b->ents[order[i]];

			if (!S_ISREG(e->mode) || e->link)
				continue;
			chunk_first[order[i]] = coff;
			for (uint32_t k = 0; k < e->nchunks; k++)
				st_id(chk + (coff + k) * MF_ID_SIZE,
				      &b->ids[e->chunk_at + k]);
			coff += e->nchunks;
		}

		for (size_t i = 0; i < n; i++) {
			/* @e gives the name and parent, @f (its file) the rest */
			const struct bent *e = &b->ents[order[i]];
			uint32_t fi = inode[order[i]];
			const struct bent *f = &b->ents[fi];
			uint8_t *p = ents + i * esize;
			uint32_t nlen = e->path_len - e->name_at;
			uint32_t nlink = f->nlink, cnt = 0;
			uint64_t first = 0;

			switch (e->mode & S_IFMT) {
			case S_IFDIR:
				cnt = count[order[i]];
				first = cnt ? final[sorted[start[order[i]]]] : 0;
				if (!nlink) {
					nlink = 2;
					for (uint32_t k = 0; k < cnt; k++)
						if (S_ISDIR(b->ents[sorted[start[order[i]] + k]].mode))
							nlink++;
				}
				break;
			case S_IFREG:
				cnt = f->nchunks;
				first = chunk_first[fi];
				if (names[fi] > 1)
					nlink = MAX(nlink, names[fi]);
				if (esize >= MF_ENTRY_SIZE_LINKS && lowest[fi] != i)
					st32(p + E_INODE, lowest[fi]);
				break;
			case S_IFLNK:
				cnt = e->target_len;
				first = soff;
				memcpy(strs + soff, b->arena + e->target_off, cnt);
				soff += cnt;
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
			st32(p + E_PARENT, final[e->parent]);
			st64(p + E_NAME_OFF, soff);
			st32(p + E_NAME_LEN, nlen);
			memcpy(strs + soff, bent_path(b, e) + e->name_at, nlen);
			soff += nlen;
			st32(p + E_COUNT, cnt);
			st64(p + E_FIRST, first);
			st_id(p + E_CONTENT, &f->content);
		}
	}

	memcpy(buf + H_MAGIC, MF_MAGIC, 8);
	st32(buf + H_FORMAT, MF_FORMAT_VERSION);
	st32(buf + H_HDRSIZE, MF_HEADER_SIZE);
	st32(buf + H_INCOMPAT, 0);
	st32(buf + H_COMPAT, links ? MF_COMPAT_HARDLINKS : 0);
	st32(buf + H_CHUNKSIZE, b->chunk_size);
	st32(buf + H_ENTSIZE, esize);
	st64(buf + H_VERSION, version);
	st64(buf + H_NENTRIES, n);
	st64(buf + H_NCHUNKS, nids);
	st64(buf + H_BYTES, total_bytes);
	st64(buf + H_ENT_OFF, ent_off);
	st64(buf + H_ENT_LEN, (uint64_t)n * esize);
	st64(buf + H_ENT_SUM, XXH3_64bits(buf + ent_off, (uint64_t)n * esize));
	st64(buf + H_CHK_OFF, chk_off);
	st64(buf + H_CHK_LEN, nids * MF_ID_SIZE);
	st64(buf + H_CHK_SUM, XXH3_64bits(buf + chk_off, nids * MF_ID_SIZE));
	st64(buf + H_STR_OFF, str_off);
	st64(buf + H_STR_LEN, strs_len);
	st64(buf + H_STR_SUM, XXH3_64bits(buf + str_off, strs_len));
	st64(buf + H_HDRSUM, XXH3_64bits(buf, MF_HEADER_SIZE));

	*bufp = buf;
	*lenp = total;
	rc = 0;
out:
	free(count);
	free(start);
	free(sorted);
	free(order);
	free(final);
	free(inode);
	free(names);
	free(lowest);
	free(chunk_first);
	return rc;
}
