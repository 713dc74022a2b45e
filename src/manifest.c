/*
 * manifest: build, serialize and read the indexed dataset description.
 *
 * Design.  A serialized manifest is a fixed header, a table of fixed-size
 * little-endian entry records, a table of 16-byte chunk ids and a string
 * table (docs/manifest.md has the byte layout).  Entries are in breadth-first
 * order from the root, and each directory's children are one contiguous run
 * sorted bytewise by name, so:
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
 *
 * The builder accepts entries in any order and sorts at finish: a counting
 * sort by parent, a name sort inside each parent, then a breadth-first pass
 * that assigns the final indexes.  Its output is a pure function of the
 * entries added and the version: the same tree gives the same bytes.
 */
#include "manifest.h"

#include "log.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* ---- on-disk layout (docs/manifest.md) ---- */

#define MF_MAGIC		"SFSMANIF"
#define MF_FORMAT_VERSION	1u
#define MF_HEADER_SIZE		160u	/* what v1 writers emit */
#define MF_HEADER_MAX		4096u	/* larger headers are rejected */
#define MF_ENTRY_SIZE		104u	/* v1 record; readers accept larger */
#define MF_ENTRY_SIZE_LINKS	112u	/* v1 record + inode field (hard links) */
#define MF_ID_SIZE		16u
#define MF_INCOMPAT_KNOWN	0u	/* incompat flag bits this reader knows */
#define MF_COMPAT_HARDLINKS	(1u << 0)	/* some entries share an inode */
#define MF_NAME_MAX		255u
#define MF_TARGET_MAX		4095u
#define MF_MAX_ENTRIES		(UINT32_MAX - 1u)
#define MF_MAX_DEPTH		4096u

/* header field offsets */
enum {
	H_MAGIC = 0,
	H_FORMAT = 8,
	H_HDRSIZE = 12,
	H_HDRSUM = 16,
	H_INCOMPAT = 24,
	H_COMPAT = 28,
	H_CHUNKSIZE = 32,
	H_ENTSIZE = 36,
	H_VERSION = 40,
	H_NENTRIES = 48,
	H_NCHUNKS = 56,
	H_BYTES = 64,
	H_ENT_OFF = 72,
	H_ENT_LEN = 80,
	H_ENT_SUM = 88,
	H_CHK_OFF = 96,
	H_CHK_LEN = 104,
	H_CHK_SUM = 112,
	H_STR_OFF = 120,
	H_STR_LEN = 128,
	H_STR_SUM = 136,
	/* 144..159 reserved, written as zero */
};

/* entry record field offsets */
enum {
	E_MODE = 0,
	E_NLINK = 4,
	E_UID = 8,
	E_GID = 12,
	E_SIZE = 16,
	E_ATIME = 24,
	E_MTIME = 32,
	E_CTIME = 40,
	E_ATIME_NS = 48,
	E_MTIME_NS = 52,
	E_CTIME_NS = 56,
	E_PARENT = 60,
	E_NAME_OFF = 64,
	E_NAME_LEN = 72,
	E_COUNT = 76,	/* dir: children; file: chunks; symlink: target length */
	E_FIRST = 80,	/* dir: first child; file: first chunk; symlink: target offset */
	E_CONTENT = 88,
	/* records of MF_ENTRY_SIZE_LINKS bytes or more */
	E_INODE = 104,	/* index of the entry holding this name's inode; 0: itself */
	/* 108..111 reserved, written as zero */
};

static inline uint32_t ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static inline void st32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void st64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

/* Ids are stored in hex order (big-endian hi, then lo): the bytes read as
 * hex are the object name suffix. */
static inline void ld_id(const uint8_t *p, struct sfs_id *id)
{
	uint64_t hi, lo;

	memcpy(&hi, p, 8);
	memcpy(&lo, p + 8, 8);
	id->hi = be64toh(hi);
	id->lo = be64toh(lo);
}

static inline void st_id(uint8_t *p, const struct sfs_id *id)
{
	uint64_t hi = htobe64(id->hi), lo = htobe64(id->lo);

	memcpy(p, &hi, 8);
	memcpy(p + 8, &lo, 8);
}

static bool name_ok(const char *name, size_t len)
{
	if (len == 0 || len > MF_NAME_MAX)
		return false;
	if (memchr(name, '/', len) || memchr(name, '\0', len))
		return false;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return false;
	return true;
}

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, MIN(alen, blen));

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

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

/* ======================================================================
 * Reading
 * ====================================================================== */

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

/* ======================================================================
 * Building
 * ====================================================================== */

/* One added entry; strings live in b->arena, chunk ids in b->ids. */
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
