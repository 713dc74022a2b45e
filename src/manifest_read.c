/*
 * manifest_read: open a serialized manifest and answer lookups on its
 * bytes (manifest.h: manifest_open() and the accessors).
 *
 * Design.  The format (manifest_i.h, docs/manifest.md) keeps each
 * directory's children one name-sorted run, so:
 *   - lookup is a binary search inside the parent's run (O(log n) records
 *     touched, nothing allocated);
 *   - readdir is a linear walk of the run, in a stable order;
 *   - every non-root entry's parent has a smaller index and every directory's
 *     first child a larger one, so parent walks strictly descend and end.
 * Opening validates the header, the section bounds and XXH3-64 checksums of
 * the header and of each section; it never parses the entries, so a
 * 10 M-entry manifest opens in the time it takes to hash it (~20 GB/s).
 *
 * Guarantees.  The checksums catch accidental damage; they are no defence
 * against a crafted manifest with valid checksums, so every accessor decodes
 * the records it touches through ent_load(), which checks each index, offset
 * and length against the section it points into, the name rules ('/', NUL,
 * "." and ".." never appear) and the ordering invariants above, and returns
 * -EIO on anything inconsistent.  Nothing here reads outside the buffer.
 * A manifest is immutable once opened, so all readers are thread safe
 * without locks.
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

struct manifest {
	uint8_t *buf;
	size_t len;
	uint32_t chunk_size;
	uint32_t entry_size;
	uint64_t version;
	uint64_t nentries;
	uint64_t nchunks;
	uint64_t bytes;
	const uint8_t *ents;	/* nentries * entry_size */
	const uint8_t *chunks;	/* nchunks * 16 */
	const char *strs;
	uint64_t strs_len;
};

/* One decoded, validated entry. */
struct ment {
	uint32_t idx;
	uint32_t mode;
	uint32_t nlink, uid, gid;
	uint64_t size;
	int64_t sec[3];
	uint32_t nsec[3];
	uint32_t parent;
	const char *name;
	uint32_t name_len;
	uint32_t count;
	uint64_t first;
	struct sfs_id content;
	uint32_t inode;		/* another name of entry @inode; 0: its own inode */
};

static bool str_in_range(const struct manifest *m, uint64_t off, uint64_t len)
{
	return off <= m->strs_len && len <= m->strs_len - off;
}

/*
 * Decode entry @idx and check everything that can be checked locally.
 * Returns 0, -ENOENT for an index out of range, -EIO for a bad record.
 */
static int ent_load(const struct manifest *m, uint64_t idx, struct ment *e)
{
	const uint8_t *p;
	uint64_t name_off;

	if (idx >= m->nentries)
		return -ENOENT;
	p = m->ents + idx * m->entry_size;
	e->idx = (uint32_t)idx;
	e->mode = ld32(p + E_MODE);
	e->nlink = ld32(p + E_NLINK);
	e->uid = ld32(p + E_UID);
	e->gid = ld32(p + E_GID);
	e->size = ld64(p + E_SIZE);
	for (int i = 0; i < 3; i++) {
		e->sec[i] = (int64_t)ld64(p + E_ATIME + 8 * i);
		e->nsec[i] = ld32(p + E_ATIME_NS + 4 * i);
		if (e->nsec[i] >= 1000000000u)
			goto bad;
	}
	e->parent = ld32(p + E_PARENT);
	name_off = ld64(p + E_NAME_OFF);
	e->name_len = ld32(p + E_NAME_LEN);
	e->count = ld32(p + E_COUNT);
	e->first = ld64(p + E_FIRST);
	ld_id(p + E_CONTENT, &e->content);
	e->inode = m->entry_size >= MF_ENTRY_SIZE_LINKS ? ld32(p + E_INODE) : 0;

	if (!str_in_range(m, name_off, e->name_len))
		goto bad;
	e->name = m->strs + name_off;
	if (idx == 0) {
		if (e->parent != 0 || e->name_len != 0 || !S_ISDIR(e->mode))
			goto bad;
	} else {
		if (e->parent >= idx || !name_ok(e->name, e->name_len))
			goto bad;
	}

	switch (e->mode & S_IFMT) {
	case S_IFDIR:
		if (e->count && (e->first <= idx || e->first > m->nentries ||
				 e->count > m->nentries - e->first))
			goto bad;
		break;
	case S_IFREG:
		if (e->first > m->nchunks || e->count > m->nchunks - e->first)
			goto bad;
		break;
	case S_IFLNK:
		if (e->count == 0 || e->count > MF_TARGET_MAX ||
		    !str_in_range(m, e->first, e->count) ||
		    memchr(m->strs + e->first, '\0', e->count))
			goto bad;
		break;
	default:
		goto bad;
	}
	/* a hard link names an earlier regular file (checked in ent_inode) */
	if (e->inode && (e->inode >= idx || !S_ISREG(e->mode)))
		goto bad;
	return 0;
bad:
	log_err("manifest v%llu: entry %llu is corrupt",
		(unsigned long long)m->version, (unsigned long long)idx);
	return -EIO;
}

/*
 * The entry holding the inode of name @e: @e itself, or for a hard link the
 * entry it names, which must be a regular file that is its own inode (one
 * step, no chains).  @e and @out may be the same.  Returns 0 or -EIO.
 */
static int ent_inode(const struct manifest *m, const struct ment *e,
		     struct ment *out)
{
	uint32_t name_idx = e->idx, inode = e->inode;

	if (!inode) {
		if (out != e)
			*out = *e;
		return 0;
	}
	if (ent_load(m, inode, out) || !S_ISREG(out->mode) || out->inode) {
		log_err("manifest v%llu: entry %u is a hard link to entry %u, which is not a file",
			(unsigned long long)m->version, name_idx, inode);
		return -EIO;
	}
	return 0;
}

/* Load the entry holding inode @ino (for a hard link's own index: its file's). */
static int ino_load(const struct manifest *m, uint64_t ino, struct ment *e)
{
	int rc;

	if (ino == 0 || ino > m->nentries)
		return -ENOENT;
	rc = ent_load(m, ino - 1, e);
	return rc ? rc : ent_inode(m, e, e);
}

static void ent_attr(const struct ment *e, struct sfs_attr *out)
{
	memset(out, 0, sizeof(*out));
	out->ino = (uint64_t)e->idx + 1;
	out->mode = e->mode;
	out->nlink = e->nlink;
	out->uid = e->uid;
	out->gid = e->gid;
	out->size = e->size;
	out->atime.tv_sec = (time_t)e->sec[0];
	out->atime.tv_nsec = e->nsec[0];
	out->mtime.tv_sec = (time_t)e->sec[1];
	out->mtime.tv_nsec = e->nsec[1];
	out->ctime.tv_sec = (time_t)e->sec[2];
	out->ctime.tv_nsec = e->nsec[2];
	if (S_ISREG(e->mode))
		out->content = e->content;
}

/* Load child @idx of directory @dir and check it points back at @dir. */
static int child_load(const struct manifest *m, const struct ment *dir,
		      uint64_t idx, struct ment *c)
{
	int rc = ent_load(m, idx, c);

	if (rc)
		return rc == -ENOENT ? -EIO : rc;
	if (c->parent != dir->idx) {
		log_err("manifest v%llu: entry %llu is listed under directory %u but names %u as parent",
			(unsigned long long)m->version, (unsigned long long)idx,
			dir->idx, c->parent);
		return -EIO;
	}
	return 0;
}

static int errmsg(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int errmsg(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/*
 * Check that section [off, off+len) lies in [lo, total) and hash it.
 * Returns 0 or -EINVAL with a message.
 */
static int section_check(const uint8_t *buf, size_t total, uint64_t lo,
			 uint64_t off, uint64_t len, uint64_t sum,
			 const char *what, char *err, size_t errlen)
{
	if (off < lo || off > total)
		return errmsg(err, errlen, -EINVAL, "%s starts outside the manifest", what);
	if (len > total - off)
		return errmsg(err, errlen, -EINVAL, "truncated %s", what);
	if (XXH3_64bits(buf + off, len) != sum)
		return errmsg(err, errlen, -EINVAL, "%s checksum mismatch", what);
	return 0;
}

int manifest_open(void *buf, size_t len, struct manifest **out,
		  char *err, size_t errlen)
{
	uint8_t hdr[MF_HEADER_MAX];
	const uint8_t *b = buf;
	uint32_t hsize, fmt, incompat, ent_size, chunk_size;
	uint64_t nent, nchk, ent_off, ent_len, chk_off, chk_len, str_off, str_len;
	struct manifest *m;
	struct ment root;
	int rc;

	*out = NULL;
	if (len < 16 || memcmp(b + H_MAGIC, MF_MAGIC, 8))
		return errmsg(err, errlen, -EINVAL,
			      len < 8 ? "truncated header" : "bad magic (not a stagefs manifest)");
	fmt = ld32(b + H_FORMAT);
	if (fmt != MF_FORMAT_VERSION)
		return errmsg(err, errlen, -EINVAL,
			      "unsupported manifest format version %u (this stagefs reads %u)",
			      fmt, MF_FORMAT_VERSION);
	hsize = ld32(b + H_HDRSIZE);
	if (hsize < MF_HEADER_SIZE || hsize > MF_HEADER_MAX || hsize % 8)
		return errmsg(err, errlen, -EINVAL, "bad header size %u", hsize);
	if (len < hsize)
		return errmsg(err, errlen, -EINVAL, "truncated header");
	memcpy(hdr, b, hsize);
	memset(hdr + H_HDRSUM, 0, 8);
	if (XXH3_64bits(hdr, hsize) != ld64(b + H_HDRSUM))
		return errmsg(err, errlen, -EINVAL, "header checksum mismatch");

	incompat = ld32(b + H_INCOMPAT);
	if (incompat & ~MF_INCOMPAT_KNOWN)
		return errmsg(err, errlen, -EINVAL,
			      "manifest uses features this stagefs does not know (flags 0x%x)",
			      incompat);
	chunk_size = ld32(b + H_CHUNKSIZE);
	if (chunk_size < 4096 || chunk_size > (1u << 30) ||
	    (chunk_size & (chunk_size - 1)))
		return errmsg(err, errlen, -EINVAL, "bad chunk size %u", chunk_size);
	ent_size = ld32(b + H_ENTSIZE);
	if (ent_size < MF_ENTRY_SIZE || ent_size > 4096 || ent_size % 8)
		return errmsg(err, errlen, -EINVAL, "bad entry size %u", ent_size);

	nent = ld64(b + H_NENTRIES);
	nchk = ld64(b + H_NCHUNKS);
	ent_off = ld64(b + H_ENT_OFF);
	ent_len = ld64(b + H_ENT_LEN);
	chk_off = ld64(b + H_CHK_OFF);
	chk_len = ld64(b + H_CHK_LEN);
	str_off = ld64(b + H_STR_OFF);
	str_len = ld64(b + H_STR_LEN);
	if (nent == 0 || nent > MF_MAX_ENTRIES)
		return errmsg(err, errlen, -EINVAL, "bad entry count %llu",
			      (unsigned long long)nent);
	if (ent_len != nent * ent_size)
		return errmsg(err, errlen, -EINVAL, "entry table size does not match the entry count");
	if (nchk > UINT64_MAX / MF_ID_SIZE || chk_len != nchk * MF_ID_SIZE)
		return errmsg(err, errlen, -EINVAL, "chunk table size does not match the chunk count");

	/* sections in order, each after the previous one, all inside @len */
	rc = section_check(b, len, hsize, ent_off, ent_len, ld64(b + H_ENT_SUM),
			   "entry table", err, errlen);
	if (rc)
		return rc;
	rc = section_check(b, len, ent_off + ent_len, chk_off, chk_len,
			   ld64(b + H_CHK_SUM), "chunk table", err, errlen);
	if (rc)
		return rc;
	rc = section_check(b, len, chk_off + chk_len, str_off, str_len,
			   ld64(b + H_STR_SUM), "string table", err, errlen);
	if (rc)
		return rc;

	m = calloc(1, sizeof(*m));
	if (!m)
		return errmsg(err, errlen, -ENOMEM, "out of memory");
	m->buf = buf;
	m->len = len;
	m->chunk_size = chunk_size;
	m->entry_size = ent_size;
	m->version = ld64(b + H_VERSION);
	m->nentries = nent;
	m->nchunks = nchk;
	m->bytes = ld64(b + H_BYTES);
	m->ents = b + ent_off;
	m->chunks = b + chk_off;
	m->strs = (const char *)b + str_off;
	m->strs_len = str_len;

	if (ent_load(m, 0, &root)) {
		free(m);
		return errmsg(err, errlen, -EINVAL, "root entry is not a valid directory");
	}
	*out = m;
	return 0;
}

void manifest_close(struct manifest *m)
{
	if (!m)
		return;
	free(m->buf);
	free(m);
}

uint32_t manifest_chunk_size(const struct manifest *m)
{
	return m->chunk_size;
}

uint64_t manifest_version(const struct manifest *m)
{
	return m->version;
}

uint64_t manifest_nentries(const struct manifest *m)
{
	return m->nentries;
}

void manifest_totals(const struct manifest *m, uint64_t *bytes, uint64_t *files)
{
	if (bytes)
		*bytes = m->bytes;
	if (files)
		*files = m->nentries;
}

int manifest_getattr(const struct manifest *m, uint64_t ino, struct sfs_attr *out)
{
	struct ment e;
	int rc = ino_load(m, ino, &e);

	if (rc)
		return rc;
	ent_attr(&e, out);
	return 0;
}

int manifest_lookup(const struct manifest *m, uint64_t parent, const char *name,
		    struct sfs_attr *out)
{
	struct ment dir, c;
	size_t nlen = strlen(name);
	uint64_t lo, hi;
	int rc;

	rc = ino_load(m, parent, &dir);
	if (rc)
		return rc;
	if (!S_ISDIR(dir.mode))
		return -ENOTDIR;
	if (nlen > MF_NAME_MAX)
		return -ENAMETOOLONG;
	/* the kernel resolves "." and ".." itself; other bad names just miss */
	lo = dir.first;
	hi = dir.first + dir.count;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		int c_;

		rc = child_load(m, &dir, mid, &c);
		if (rc)
			return rc;
		c_ = name_cmp(name, nlen, c.name, c.name_len);
		if (c_ == 0) {
			rc = ent_inode(m, &c, &c);
			if (rc)
				return rc;
			ent_attr(&c, out);
			return 0;
		}
		if (c_ < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -ENOENT;
}

int manifest_readdir(const struct manifest *m, uint64_t ino, struct sfs_dirlist *out)
{
	struct ment dir, c;
	const char *prev = NULL;
	uint32_t prev_len = 0;
	struct sfs_dirent *ent = NULL;
	size_t n = 0;
	int rc;

	out->n = 0;
	out->ent = NULL;
	rc = ino_load(m, ino, &dir);
	if (rc)
		return rc;
	if (!S_ISDIR(dir.mode))
		return -ENOTDIR;
	if (dir.count == 0)
		return 0;
	ent = calloc(dir.count, sizeof(*ent));
	if (!ent)
		return -ENOMEM;
	for (uint32_t i = 0; i < dir.count; i++) {
		rc = child_load(m, &dir, dir.first + i, &c);
		if (rc)
			goto out_free;
		/* strictly increasing names: no duplicates ever reach the kernel */
		if (prev && name_cmp(prev, prev_len, c.name, c.name_len) >= 0) {
			log_err("manifest v%llu: directory %u is not sorted",
				(unsigned long long)m->version, dir.idx);
			rc = -EIO;
			goto out_free;
		}
		prev = c.name;
		prev_len = c.name_len;
		ent[n].name = strndup(c.name, c.name_len);
		if (!ent[n].name) {
			rc = -ENOMEM;
			goto out_free;
		}
		ent[n].ino = (uint64_t)(c.inode ? c.inode : c.idx) + 1;
		ent[n].mode = c.mode;
		n++;
	}
	out->n = n;
	out->ent = ent;
	return 0;

out_free:
	for (size_t i = 0; i < n; i++)
		free(ent[i].name);
	free(ent);
	return rc;
}

int manifest_readlink(const struct manifest *m, uint64_t ino, char *buf, size_t size)
{
	struct ment e;
	size_t n;
	int rc = ino_load(m, ino, &e);

	if (rc)
		return rc;
	if (!S_ISLNK(e.mode))
		return -EINVAL;
	n = MIN((size_t)e.count, size);
	memcpy(buf, m->strs + e.first, n);
	return (int)n;
}

uint32_t manifest_nchunks(const struct manifest *m, uint64_t ino)
{
	struct ment e;

	if (ino_load(m, ino, &e) || !S_ISREG(e.mode))
		return 0;
	return e.count;
}

int manifest_chunk(const struct manifest *m, uint64_t ino, uint32_t idx,
		   struct sfs_id *id)
{
	struct ment e;
	uint64_t want;
	int rc = ino_load(m, ino, &e);

	if (rc)
		return rc;
	if (!S_ISREG(e.mode))
		return -EINVAL;
	want = DIV_ROUND_UP(e.size, m->chunk_size);
	if (e.count && e.count != want) {
		log_err("manifest v%llu: entry %u has %u chunks for %llu bytes",
			(unsigned long long)m->version, e.idx, e.count,
			(unsigned long long)e.size);
		return -EIO;
	}
	if (idx >= e.count)
		return -EINVAL;
	ld_id(m->chunks + (e.first + idx) * MF_ID_SIZE, id);
	return 0;
}

uint64_t manifest_nids(const struct manifest *m)
{
	return m->nchunks;
}

void manifest_id(const struct manifest *m, uint64_t i, struct sfs_id *id)
{
	if (i >= m->nchunks) {
		memset(id, 0, sizeof(*id));
		return;
	}
	ld_id(m->chunks + i * MF_ID_SIZE, id);
}

int manifest_path(const struct manifest *m, uint64_t ino, char *buf, size_t size)
{
	struct ment e;
	uint32_t chain[MF_MAX_DEPTH];
	uint32_t depth = 0;
	size_t len = 0;
	int rc;

	if (size == 0)
		return -ERANGE;
	rc = ino_load(m, ino, &e);
	if (rc)
		return rc;
	/* parent < idx for every non-root entry, so this ends; bound it anyway */
	while (e.idx != 0) {
		if (depth == MF_MAX_DEPTH)
			return -EIO;
		chain[depth++] = e.idx;
		rc = ent_load(m, e.parent, &e);
		if (rc)
			return rc == -ENOENT ? -EIO : rc;
		if (!S_ISDIR(e.mode))
			return -EIO;
	}
	while (depth--) {
		rc = ent_load(m, chain[depth], &e);
		if (rc)
			return rc;
		if (len + (len ? 1 : 0) + e.name_len >= size)
			return -ERANGE;
		if (len)
			buf[len++] = '/';
		memcpy(buf + len, e.name, e.name_len);
		len += e.name_len;
	}
	buf[len] = '\0';
	return len > INT_MAX ? -ERANGE : (int)len;
}
