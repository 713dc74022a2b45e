/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest_read: open a serialized manifest and answer lookups on its
 * bytes (manifest.h: manifest_open(), manifest_open_file() and the
 * accessors).
 *
 * Design.  The format (manifest_i.h, docs/manifest.md) keeps each
 * directory's children one name-sorted run, so:
 *   - lookup is a binary search inside the parent's run (O(log n) records
 *     touched, nothing allocated);
 *   - readdir is a linear walk of the run, in a stable order;
 *   - every non-root entry's parent has a smaller index and every directory's
 *     first child a larger one, so parent walks strictly descend and end.
 * The bytes are used where they lie: a malloc'ed buffer (manifest_open) or
 * a read-only shared mapping of a file (manifest_open_file), so every mount
 * of one file shares its page cache and the daemon holds no copy.
 *
 * Verification.  Opening a format 2 manifest checks the header, its
 * checksum, the section bounds against the file size and the checksum of
 * the part table, and nothing else: constant time whatever the size.  Each
 * part (64 KiB of one section) is hashed the first time an accessor reads
 * from it; a part that matches gets its bit in m->ok and is never hashed
 * again, one that does not gets its bit in m->bad, is logged once (dataset,
 * version, part, section) and gives -EIO to every access, now and later.
 * Bytes of an unverified or bad part are never decoded.  Format 1
 * manifests are verified whole at open, as they always were.
 *
 * Parts fetched on demand.  A mapped file may be a sparse copy that its
 * manifest_source fills (src/manifest/manifest_lazy.h: rados:// copies parts from
 * RADOS as they are touched).  The reader asks the source for a part just
 * before it hashes it, and once more, forcing a fetch, if the hash fails;
 * only a part that fails after that is marked bad.  A source that cannot
 * fetch (the OSD is down) fails the access with EIO and marks nothing, so
 * the next touch tries again.
 *
 * Guarantees.  The checksums catch accidental damage; they are no defence
 * against a crafted manifest with valid checksums, so every accessor decodes
 * the records it touches through ent_load(), which checks each index, offset
 * and length against the section it points into, the name rules ('/', NUL,
 * "." and ".." never appear) and the ordering invariants above, and returns
 * -EIO on anything inconsistent.  Nothing here reads outside the buffer.
 * A manifest is immutable once opened (the part bitmaps only ever gain
 * bits, with atomic ORs), so all readers are thread safe without locks.
 *
 * A mapped file must not be truncated while it is open (the reader would
 * take SIGBUS): the backends keep theirs in the cache directory, written
 * once under a temporary name and renamed, never changed in place.
 */
#include "manifest_i.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

/* manifest_pack_content()'s seed: "sfs.pack" */
#define MANIFEST_PACK_SEED 0x7366732e7061636bULL
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/*
 * A corrupt part or entry is found by the lookup or read that touches it:
 * any user can repeat that as often as they like (issue 27).  10 lines
 * per 10 s, the next one saying how many were suppressed.
 */
static struct log_ratelimit rl_corrupt = LOG_RATELIMIT_INIT(10000, 10);

struct manifest {
	const uint8_t *base;	/* the whole manifest, @len bytes */
	size_t len;
	void *owned;		/* manifest_open(): free()d at close */
	void *map;		/* manifest_open_file(): munmap()ed at close */
	uint32_t format;
	uint32_t chunk_size;
	uint32_t entry_size;
	uint64_t version;
	uint64_t nentries;
	uint64_t nchunks;
	uint64_t bytes;
	uint64_t ent_off, chk_off, str_off;	/* from base */
	uint64_t strs_len;
	/* format 2 */
	uint32_t shift;		/* parts of 2^shift bytes */
	uint64_t per_part;	/* entry records per part */
	uint64_t ent_len, chk_len;
	uint64_t chk_part0, str_part0, nparts;
	int nsec;		/* sections: 3, or 5 with packs */
	uint64_t soff[MF2_NSEC], slen[MF2_NSEC];	/* each section's bytes */
	uint64_t part0[MF2_NSEC + 1];	/* each one's first part; [nsec] = nparts */
	uint64_t npacks, nmembers;	/* packs (MF_INCOMPAT_PACKS), else 0 */
	const uint8_t *table;	/* nparts XXH3-64s */
	_Atomic uint64_t *ok;	/* parts verified good, one bit each */
	_Atomic uint64_t *bad;	/* parts that failed, logged once */
	struct manifest_source src;	/* fills parts missing from the file, or none */
	char name[128];		/* for logs: "pool/NAME", or "" */
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
	uint32_t pack;		/* file: its pack's index + 1; 0: not packed */
	uint32_t pack_off;	/* ... and where its bytes start in it */
};

static const char *mname(const struct manifest *m)
{
	return m->name[0] ? m->name : "manifest";
}

/* The section part @p (< nparts) belongs to. */
static int part_sec(const struct manifest *m, uint64_t p)
{
	int s = 0;

	while (s + 1 < m->nsec && p >= m->part0[s + 1])
		s++;
	return s;
}

/* Hash part @p against the part table; record and log the outcome. */
static int part_verify(const struct manifest *m, uint64_t p)
{
	uint64_t soff, slen, off, len, want, bit = 1ull << (p % 64);
	int sec;

	if (atomic_load_explicit(&m->bad[p / 64], memory_order_relaxed) & bit)
		return -EIO;
	sec = part_sec(m, p);
	soff = m->soff[sec];
	slen = m->slen[sec];
	off = (p - m->part0[sec]) << m->shift;
	len = MIN(slen - off, 1ull << m->shift);
	want = ld64(m->table + p * 8);
	if (m->src.fill && m->src.fill(m->src.arg, p, soff + off, len, false))
		return -EIO;	/* not there and not fetched: a later touch tries again */
	if (m->map)
		madvise((void *)((uintptr_t)(m->base + soff + off) & ~(uintptr_t)4095),
			len + ((uintptr_t)(m->base + soff + off) & 4095), MADV_WILLNEED);
	if (XXH3_64bits(m->base + soff + off, len) == want ||
	    /* a copy filled on demand: the local bytes may be torn; once more from the source */
	    (m->src.fill && m->src.fill(m->src.arg, p, soff + off, len, true) == 0 &&
	     XXH3_64bits(m->base + soff + off, len) == want)) {
		atomic_fetch_or_explicit(&m->ok[p / 64], bit, memory_order_relaxed);
		return 0;
	}
	if (!(atomic_fetch_or_explicit(&m->bad[p / 64], bit, memory_order_relaxed) & bit))
		log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: part %llu of %llu (%s, bytes %llu..%llu of the manifest) fails its checksum: refusing it (republish, or remove the cached copy)",
			mname(m), (unsigned long long)m->version,
			(unsigned long long)p, (unsigned long long)m->nparts,
			mf2_sec_name(part_sec(m, p)), (unsigned long long)(soff + off),
			(unsigned long long)(soff + off + len));
	return -EIO;
}

/* 0 if part @p may be read (verified now or before), else -EIO. */
static inline int part_ok(const struct manifest *m, uint64_t p)
{
	if (m->format == MF_FORMAT_V1)
		return 0;
	if (atomic_load_explicit(&m->ok[p / 64], memory_order_relaxed) & (1ull << (p % 64)))
		return 0;
	return part_verify(m, p);
}

/* Record @idx (< nentries), or NULL (-EIO) if its part is bad. */
static const uint8_t *ent_ptr(const struct manifest *m, uint64_t idx)
{
	if (m->format == MF_FORMAT_V1)
		return m->base + m->ent_off + idx * m->entry_size;
	if (part_ok(m, idx / m->per_part))
		return NULL;
	return m->base + m->ent_off + ((idx / m->per_part) << m->shift) +
	       (idx % m->per_part) * m->entry_size;
}

/* Chunk id @j (< nchunks) into @id; 0 or -EIO. */
static int id_get(const struct manifest *m, uint64_t j, struct sfs_id *id)
{
	uint64_t off = j * MF_ID_SIZE;

	if (m->format != MF_FORMAT_V1 && part_ok(m, m->chk_part0 + (off >> m->shift)))
		return -EIO;
	ld_id(m->base + m->chk_off + off, id);
	return 0;
}

/*
 * The @len bytes at @off of the string table, or NULL if they are out of
 * range, cross a part boundary (format 2 writers never do that) or lie in a
 * bad part.
 */
static const char *str_get(const struct manifest *m, uint64_t off, uint64_t len)
{
	if (off > m->strs_len || len > m->strs_len - off)
		return NULL;
	if (len && m->format != MF_FORMAT_V1) {
		if (off >> m->shift != (off + len - 1) >> m->shift ||
		    part_ok(m, m->str_part0 + (off >> m->shift)))
			return NULL;
	}
	return (const char *)m->base + m->str_off + off;
}

/*
 * Decode entry @idx and check everything that can be checked locally.
 * Returns 0, -ENOENT for an index out of range, -EIO for a bad record
 * (logged) or a bad part (logged by part_verify).
 */
static int ent_load(const struct manifest *m, uint64_t idx, struct ment *e)
{
	const uint8_t *p;
	uint64_t name_off;
	const char *tgt;

	if (idx >= m->nentries)
		return -ENOENT;
	p = ent_ptr(m, idx);
	if (!p)
		return -EIO;
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
	e->pack = m->npacks ? ld32(p + E_PACK) : 0;
	e->pack_off = e->pack ? ld32(p + E_PACK_OFF) : 0;

	e->name = str_get(m, name_off, e->name_len);
	if (!e->name)
		goto bad;
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
		/* a packed file is one chunk, inside its pack (manifest_file_pack) */
		if (e->pack && (e->pack > m->npacks || e->count != 1))
			goto bad;
		break;
	case S_IFLNK:
		if (e->count == 0 || e->count > MF_TARGET_MAX)
			goto bad;
		tgt = str_get(m, e->first, e->count);
		if (!tgt || memchr(tgt, '\0', e->count))
			goto bad;
		break;
	default:
		goto bad;
	}
	/* a hard link names an earlier regular file (checked in ent_inode) */
	if (e->inode && (e->inode >= idx || !S_ISREG(e->mode)))
		goto bad;
	if (e->pack && !S_ISREG(e->mode))
		goto bad;
	return 0;
bad:
	log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: entry %llu is corrupt",
		mname(m), (unsigned long long)m->version, (unsigned long long)idx);
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
		log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: entry %u is a hard link to entry %u, which is not a file", mname(m),
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
		log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: entry %llu is listed under directory %u but names %u as parent", mname(m),
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
 * Check that section [off, off+len) lies in [lo, total).  @sum: hash it
 * too (format 1).  Returns 0 or -EINVAL with a message.
 */
static int section_check(const uint8_t *buf, size_t total, uint64_t lo,
			 uint64_t off, uint64_t len, const uint64_t *sum,
			 const char *what, char *err, size_t errlen)
{
	if (off < lo || off > total)
		return errmsg(err, errlen, -EINVAL, "%s starts outside the manifest", what);
	if (len > total - off)
		return errmsg(err, errlen, -EINVAL, "truncated %s", what);
	if (sum && XXH3_64bits(buf + off, len) != *sum)
		return errmsg(err, errlen, -EINVAL, "%s checksum mismatch", what);
	return 0;
}

/* Format 1: sections in order, each hashed whole. */
static int open_v1(struct manifest *m, char *err, size_t errlen)
{
	const uint8_t *b = m->base;
	uint64_t ent_len = ld64(b + H_ENT_LEN), chk_len = ld64(b + H_CHK_LEN);
	uint64_t sum;
	int rc;

	m->ent_off = ld64(b + H_ENT_OFF);
	m->chk_off = ld64(b + H_CHK_OFF);
	m->str_off = ld64(b + H_STR_OFF);
	m->strs_len = ld64(b + H_STR_LEN);
	if (ent_len != m->nentries * m->entry_size)
		return errmsg(err, errlen, -EINVAL, "entry table size does not match the entry count");
	if (chk_len != m->nchunks * MF_ID_SIZE)
		return errmsg(err, errlen, -EINVAL, "chunk table size does not match the chunk count");
	sum = ld64(b + H_ENT_SUM);
	rc = section_check(b, m->len, ld32(b + H_HDRSIZE), m->ent_off, ent_len,
			   &sum, "entry table", err, errlen);
	if (rc)
		return rc;
	sum = ld64(b + H_CHK_SUM);
	rc = section_check(b, m->len, m->ent_off + ent_len, m->chk_off, chk_len,
			   &sum, "chunk table", err, errlen);
	if (rc)
		return rc;
	sum = ld64(b + H_STR_SUM);
	return section_check(b, m->len, m->chk_off + chk_len, m->str_off,
			     m->strs_len, &sum, "string table", err, errlen);
}

/* Format 2: sections and part table in order, the part table hashed. */
static int open_v2(struct manifest *m, char *err, size_t errlen)
{
	const uint8_t *b = m->base;
	uint64_t tab_off, tab_len, words, sum, lo;
	int rc;

	m->shift = ld32(b + H2_PARTSHIFT);
	if (m->shift < MF2_PART_SHIFT_MIN || m->shift > MF2_PART_SHIFT_MAX ||
	    (1u << m->shift) < m->entry_size)
		return errmsg(err, errlen, -EINVAL, "bad part size 2^%u", m->shift);
	m->per_part = mf2_per_part(m->entry_size, m->shift);
	m->nsec = mf2_nsec(ld32(b + H_INCOMPAT));
	for (int i = 0; i < m->nsec; i++) {
		m->soff[i] = ld64(b + mf2_sec_off_at(i));
		m->slen[i] = ld64(b + mf2_sec_len_at(i));
	}
	m->ent_off = m->soff[MF2_SEC_ENT];
	m->ent_len = m->slen[MF2_SEC_ENT];
	m->chk_off = m->soff[MF2_SEC_CHK];
	m->chk_len = m->slen[MF2_SEC_CHK];
	m->str_off = m->soff[MF2_SEC_STR];
	m->strs_len = m->slen[MF2_SEC_STR];
	tab_off = ld64(b + H2_TAB_OFF);
	m->nparts = ld64(b + H2_NPARTS);
	if (m->ent_len != mf2_ent_len(m->nentries, m->entry_size, m->shift))
		return errmsg(err, errlen, -EINVAL, "entry table size does not match the entry count");
	if (m->chk_len != m->nchunks * MF_ID_SIZE)
		return errmsg(err, errlen, -EINVAL, "chunk table size does not match the chunk count");
	if (m->nsec > MF2_SEC_PACK) {
		if (m->entry_size < MF_ENTRY_SIZE_PACKS)
			return errmsg(err, errlen, -EINVAL, "entry records too small for packs");
		if (m->slen[MF2_SEC_PACK] % MF_PACK_SIZE ||
		    m->slen[MF2_SEC_PACK] / MF_PACK_SIZE >= UINT32_MAX)
			return errmsg(err, errlen, -EINVAL, "bad pack table size");
		if (m->slen[MF2_SEC_MEM] % MF_MEMBER_SIZE ||
		    m->slen[MF2_SEC_MEM] / MF_MEMBER_SIZE > UINT32_MAX)
			return errmsg(err, errlen, -EINVAL, "bad member table size");
		m->npacks = m->slen[MF2_SEC_PACK] / MF_PACK_SIZE;
		m->nmembers = m->slen[MF2_SEC_MEM] / MF_MEMBER_SIZE;
	}
	m->part0[0] = 0;
	for (int i = 0; i < m->nsec; i++) {
		if (m->slen[i] > m->len)
			return errmsg(err, errlen, -EINVAL, "truncated %s", mf2_sec_name(i));
		m->part0[i + 1] = m->part0[i] + mf2_nparts(m->slen[i], m->shift);
	}
	if (m->nparts != m->part0[m->nsec])
		return errmsg(err, errlen, -EINVAL, "part count does not match the sections");
	m->chk_part0 = m->part0[MF2_SEC_CHK];
	m->str_part0 = m->part0[MF2_SEC_STR];
	tab_len = m->nparts * 8;

	lo = ld32(b + H_HDRSIZE);
	for (int i = 0; i < m->nsec; i++) {
		rc = section_check(b, m->len, lo, m->soff[i], m->slen[i], NULL,
				   mf2_sec_name(i), err, errlen);
		if (rc)
			return rc;
		lo = m->soff[i] + m->slen[i];
	}
	sum = ld64(b + H2_TAB_SUM);
	rc = section_check(b, m->len, lo, tab_off, tab_len, &sum, "part table", err, errlen);
	if (rc)
		return rc;
	m->table = b + tab_off;
	words = (m->nparts + 63) / 64;
	m->ok = calloc(words ? words : 1, sizeof(*m->ok));
	m->bad = calloc(words ? words : 1, sizeof(*m->bad));
	if (!m->ok || !m->bad)
		return errmsg(err, errlen, -ENOMEM, "out of memory");
	return 0;
}

static void manifest_free(struct manifest *m)
{
	free((void *)m->ok);
	free((void *)m->bad);
	free(m);
}

/*
 * Check header and layout of the @len bytes at @b and make the manifest
 * (not owning @b yet).  Returns 0 or -EINVAL/-ENOMEM with @err.
 */
static int open_bytes(const uint8_t *b, size_t len,
		      const struct manifest_source *src, struct manifest **out,
		      char *err, size_t errlen)
{
	uint8_t hdr[MF_HEADER_MAX];
	uint32_t hsize, fmt, incompat, ent_size, chunk_size;
	uint64_t nent, nchk;
	struct manifest *m;
	struct ment root;
	int rc;

	*out = NULL;
	if (len < 16 || memcmp(b + H_MAGIC, MF_MAGIC, 8))
		return errmsg(err, errlen, -EINVAL,
			      len < 8 ? "truncated header" : "bad magic (not a stagefs manifest)");
	fmt = ld32(b + H_FORMAT);
	if (fmt != MF_FORMAT_VERSION && fmt != MF_FORMAT_V1)
		return errmsg(err, errlen, -EINVAL,
			      "unsupported manifest format version %u (this stagefs reads 1 and %u)",
			      fmt, MF_FORMAT_VERSION);
	hsize = ld32(b + H_HDRSIZE);
	if (hsize < (fmt == MF_FORMAT_V1 ? MF_HEADER_SIZE : MF2_HEADER_SIZE) ||
	    hsize > MF_HEADER_MAX || hsize % 8)
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
	if (nent == 0 || nent > MF_MAX_ENTRIES)
		return errmsg(err, errlen, -EINVAL, "bad entry count %llu",
			      (unsigned long long)nent);
	if (nchk > UINT64_MAX / MF_ID_SIZE / 2)
		return errmsg(err, errlen, -EINVAL, "bad chunk count");

	m = calloc(1, sizeof(*m));
	if (!m)
		return errmsg(err, errlen, -ENOMEM, "out of memory");
	m->base = b;
	m->len = len;
	m->format = fmt;
	m->chunk_size = chunk_size;
	m->entry_size = ent_size;
	m->version = ld64(b + H_VERSION);
	m->nentries = nent;
	m->nchunks = nchk;
	m->bytes = ld64(b + H_BYTES);
	if (src)
		m->src = *src;	/* format 1 is verified whole at open: never called */
	rc = fmt == MF_FORMAT_V1 ? open_v1(m, err, errlen) : open_v2(m, err, errlen);
	if (rc) {
		manifest_free(m);
		return rc;
	}
	if (ent_load(m, 0, &root)) {
		manifest_free(m);
		return errmsg(err, errlen, -EINVAL, "root entry is not a valid directory");
	}
	*out = m;
	return 0;
}

int manifest_open(void *buf, size_t len, struct manifest **out,
		  char *err, size_t errlen)
{
	int rc = open_bytes(buf, len, NULL, out, err, errlen);

	if (!rc)
		(*out)->owned = buf;
	return rc;
}

/* Map @fd (size @size) and open it; the mapping is the manifest's on success. */
static int open_mapped(int fd, uint64_t size, const struct manifest_source *src,
		       struct manifest **out, char *err, size_t errlen)
{
	void *map;
	int rc;

	map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		return errmsg(err, errlen, rc, "mmap: %s", strerror(-rc));
	}
	rc = open_bytes(map, (size_t)size, src, out, err, errlen);
	if (rc) {
		munmap(map, (size_t)size);
		return rc;
	}
	(*out)->map = map;
	return 0;
}

/* The size of regular file @fd, or -errno / -EINVAL with @err. */
static int64_t file_size(int fd, char *err, size_t errlen)
{
	struct stat st;
	int rc;

	if (fstat(fd, &st) < 0) {
		rc = -errno;
		return errmsg(err, errlen, rc, "%s", strerror(-rc));
	}
	if (!S_ISREG(st.st_mode) || st.st_size < 16 || (uint64_t)st.st_size > SIZE_MAX)
		return errmsg(err, errlen, -EINVAL, "%s",
			      S_ISREG(st.st_mode) ? "truncated header" : "not a regular file");
	return st.st_size;
}

int manifest_open_fd(int fd, const struct manifest_source *src,
		     struct manifest **out, char *err, size_t errlen)
{
	int64_t size;

	*out = NULL;
	size = file_size(fd, err, errlen);
	if (size < 0)
		return (int)size;
	return open_mapped(fd, (uint64_t)size, src, out, err, errlen);
}

int manifest_open_file(const char *path, struct manifest **out,
		       char *err, size_t errlen)
{
	char msg[200];
	int fd, rc;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		return errmsg(err, errlen, rc, "%s: %s", path, strerror(-rc));
	}
	rc = manifest_open_fd(fd, NULL, out, msg, sizeof(msg));
	close(fd);
	if (rc)
		errmsg(err, errlen, rc, "%s: %s", path, msg);
	return rc;
}

void manifest_close(struct manifest *m)
{
	if (!m)
		return;
	if (m->map)
		munmap(m->map, m->len);
	free(m->owned);
	if (m->src.release)
		m->src.release(m->src.arg);
	manifest_free(m);
}

uint64_t manifest_fetched_bytes(const struct manifest *m)
{
	return m->src.fetched ? m->src.fetched(m->src.arg) : 0;
}

void manifest_set_name(struct manifest *m, const char *name)
{
	snprintf(m->name, sizeof(m->name), "%s", name ? name : "");
}

uint32_t manifest_format(const struct manifest *m)
{
	return m->format;
}

int manifest_verify(struct manifest *m, uint64_t *bad_parts)
{
	uint64_t bad = 0;

	for (uint64_t p = 0; m->format != MF_FORMAT_V1 && p < m->nparts; p++)
		if (part_ok(m, p))
			bad++;
	if (bad_parts)
		*bad_parts = bad;
	return bad ? -EIO : 0;
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
			log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: directory %u is not sorted", mname(m),
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
	memcpy(buf, str_get(m, e.first, e.count), n);	/* checked by ent_load */
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
		log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: entry %u has %u chunks for %llu bytes", mname(m),
			(unsigned long long)m->version, e.idx, e.count,
			(unsigned long long)e.size);
		return -EIO;
	}
	if (idx >= e.count)
		return -EINVAL;
	return id_get(m, e.first + idx, id);
}

uint64_t manifest_nids(const struct manifest *m)
{
	return m->nchunks;
}

void manifest_id(const struct manifest *m, uint64_t i, struct sfs_id *id)
{
	if (i >= m->nchunks || id_get(m, i, id))
		memset(id, 0, sizeof(*id));
}

uint32_t manifest_npacks(const struct manifest *m)
{
	return (uint32_t)m->npacks;
}

/* Pack record @i into @out, its first member in *@first: 0, -ENOENT or -EIO. */
static int pack_load(const struct manifest *m, uint32_t i, struct manifest_pack *out,
		     uint64_t *first)
{
	uint64_t off = (uint64_t)i * MF_PACK_SIZE;
	const uint8_t *p;

	if (i >= m->npacks)
		return -ENOENT;
	if (part_ok(m, m->part0[MF2_SEC_PACK] + (off >> m->shift)))
		return -EIO;
	p = m->base + m->soff[MF2_SEC_PACK] + off;
	ld_id(p + P_ID, &out->id);
	out->size = ld64(p + P_SIZE);
	*first = ld32(p + P_FIRST);
	out->nmembers = ld32(p + P_COUNT);
	if (out->size == 0 || out->size > m->chunk_size || *first > m->nmembers ||
	    out->nmembers > m->nmembers - *first) {
		log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: pack %u is corrupt",
			mname(m), (unsigned long long)m->version, i);
		return -EIO;
	}
	return 0;
}

int manifest_pack(const struct manifest *m, uint32_t pack, struct manifest_pack *out)
{
	uint64_t first;

	return pack_load(m, pack, out, &first);
}

void manifest_pack_content(const struct sfs_id *pack_id, struct sfs_id *out)
{
	uint8_t b[16];
	XXH128_hash_t h;

	for (int i = 0; i < 8; i++) {
		b[i] = (uint8_t)(pack_id->hi >> (56 - 8 * i));
		b[8 + i] = (uint8_t)(pack_id->lo >> (56 - 8 * i));
	}
	h = XXH3_128bits_withSeed(b, sizeof(b), MANIFEST_PACK_SEED);
	out->hi = h.high64;
	out->lo = h.low64;
}

int manifest_file_pack(const struct manifest *m, uint64_t ino, uint32_t *pack,
		       uint32_t *off, struct manifest_pack *out)
{
	struct manifest_pack pk;
	struct ment e;
	uint64_t first;
	int rc = ino_load(m, ino, &e);

	if (rc)
		return rc;
	if (!S_ISREG(e.mode))
		return -EINVAL;
	if (!e.pack)
		return -ENODATA;
	rc = pack_load(m, e.pack - 1, &pk, &first);
	if (rc)
		return rc == -ENOENT ? -EIO : rc;
	if (e.size == 0 || e.pack_off > pk.size || e.size > pk.size - e.pack_off) {
		log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: entry %u lies outside its pack %u",
			mname(m), (unsigned long long)m->version, e.idx, e.pack - 1);
		return -EIO;
	}
	*pack = e.pack - 1;
	*off = e.pack_off;
	if (out)
		*out = pk;
	return 0;
}

int manifest_pack_member(const struct manifest *m, uint32_t pack, uint32_t j,
			 struct manifest_member *out)
{
	struct manifest_pack pk;
	struct sfs_id cid;
	const uint8_t *p;
	uint64_t first, off, idx;
	struct ment e;
	int rc = pack_load(m, pack, &pk, &first);

	if (rc)
		return rc;
	if (j >= pk.nmembers)
		return -ENOENT;
	off = (first + j) * MF_MEMBER_SIZE;
	if (part_ok(m, m->part0[MF2_SEC_MEM] + (off >> m->shift)))
		return -EIO;
	p = m->base + m->soff[MF2_SEC_MEM] + off;
	idx = ld32(p + M_ENTRY);
	out->off = ld32(p + M_OFF);
	rc = ent_load(m, idx, &e);
	if (rc && rc != -ENOENT)
		return rc;
	/*
	 * The member must be the file that says it lies here, its own inode,
	 * and its content id the one its single chunk gives: the pack's bytes
	 * are cached under it, so a crafted manifest must not name another
	 * file's content id.
	 */
	if (!rc && S_ISREG(e.mode) && !e.inode && e.pack == pack + 1 &&
	    e.pack_off == out->off && e.size && e.size <= pk.size - MIN(out->off, pk.size) &&
	    !id_get(m, e.first, &out->chunk)) {
		manifest_content_id(e.size, &out->chunk, 1, &cid);
		if (sfs_id_eq(&cid, &e.content)) {
			out->ino = idx + 1;
			out->size = e.size;
			out->content = e.content;
			return 0;
		}
	}
	log_limited(&rl_corrupt, LOG_ERR, "%s v%llu: member %u of pack %u (entry %llu) is not a file of that pack",
		mname(m), (unsigned long long)m->version, j, pack,
		(unsigned long long)idx);
	return -EIO;
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

void manifest_reseal(uint8_t *b, size_t len)
{
	static const int v1[3][3] = {
		{ H_ENT_OFF, H_ENT_LEN, H_ENT_SUM },
		{ H_CHK_OFF, H_CHK_LEN, H_CHK_SUM },
		{ H_STR_OFF, H_STR_LEN, H_STR_SUM },
	};
	uint8_t hdr[MF_HEADER_MAX];
	uint32_t hsize;

	if (len < MF_HEADER_SIZE || memcmp(b + H_MAGIC, MF_MAGIC, 8))
		return;
	if (ld32(b + H_FORMAT) != MF_FORMAT_V1 && len < MF2_HEADER_SIZE)
		return;
	hsize = ld32(b + H_HDRSIZE);
	if (hsize < MF_HEADER_SIZE || hsize > MF_HEADER_MAX || hsize > len)
		return;
	if (ld32(b + H_FORMAT) == MF_FORMAT_V1) {
		for (int i = 0; i < 3; i++) {
			uint64_t off = ld64(b + v1[i][0]), n = ld64(b + v1[i][1]);

			if (off <= len && n <= len - off)
				st64(b + v1[i][2], XXH3_64bits(b + off, n));
		}
	} else {
		uint32_t shift = ld32(b + H2_PARTSHIFT);
		uint64_t tab = ld64(b + H2_TAB_OFF), np = ld64(b + H2_NPARTS), p = 0;
		int nsec = mf2_nsec(ld32(b + H_INCOMPAT));

		if (shift < MF2_PART_SHIFT_MIN || shift > MF2_PART_SHIFT_MAX ||
		    tab > len || np > (len - tab) / 8)
			return;
		for (int i = 0; i < nsec; i++) {
			uint64_t off = ld64(b + mf2_sec_off_at(i)), n = ld64(b + mf2_sec_len_at(i));

			if (off > len || n > len - off)
				return;
			for (uint64_t k = 0; k < mf2_nparts(n, shift) && p < np; k++, p++)
				st64(b + tab + p * 8,
				     XXH3_64bits(b + off + (k << shift),
						 MIN(n - (k << shift), 1ull << shift)));
		}
		st64(b + H2_TAB_SUM, XXH3_64bits(b + tab, np * 8));
	}
	memcpy(hdr, b, hsize);
	memset(hdr + H_HDRSUM, 0, 8);
	st64(b + H_HDRSUM, XXH3_64bits(hdr, hsize));
}

void sfs_dirlist_release(struct sfs_dirlist *dl)
{
	for (size_t i = 0; i < dl->n; i++)
		free(dl->ent[i].name);
	free(dl->ent);
	dl->ent = NULL;
	dl->n = 0;
}
