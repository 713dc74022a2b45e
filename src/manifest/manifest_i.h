/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest_i.h: the serialized manifest's format, shared by the reader
 * (manifest_read.c) and the builder (manifest_build.c) and seen by nobody
 * else.  docs/manifest.md has the byte layout in full.
 *
 * Format 2 (what the builder writes): a fixed header, then three sections
 * cut into parts of 2^part_shift bytes (64 KiB): the entry table (fixed-size
 * little-endian records, a whole number of them per part, the part's tail
 * zero), the chunk table (16-byte ids) and the string table (names and
 * symlink targets, none crossing a part boundary), then the part table:
 * one XXH3-64 per part.  The header has an XXH3-64 of its own and one of
 * the part table; a reader checks those two at open and each part the
 * first time it touches it, so opening costs the same at 10 entries and
 * at 10 M.
 *
 * Format 1 (read only): the same header fields up to the section table,
 * whole sections with one XXH3-64 each, checked at open.
 *
 * Both: entries are in breadth-first order from the root, and each
 * directory's children are one contiguous run sorted bytewise by name
 * (name_cmp()).  A record is MF_ENTRY_SIZE bytes, or MF_ENTRY_SIZE_LINKS
 * when some entries share an inode (hard links); readers accept larger
 * records and headers up to MF_HEADER_MAX.
 */
#ifndef STAGEFS_MANIFEST_I_H
#define STAGEFS_MANIFEST_I_H

#include "manifest.h"

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define MF_MAGIC		"SFSMANIF"
#define MF_FORMAT_VERSION	2u	/* what the builder writes */
#define MF_FORMAT_V1		1u	/* still read: whole sections */
#define MF_HEADER_SIZE		160u	/* what v1 writers emitted */
#define MF2_HEADER_SIZE		256u	/* what v2 writers emit */
#define MF2_PART_SHIFT		16u	/* 64 KiB parts */
#define MF2_PART_SHIFT_MIN	12u	/* readers accept 4 KiB .. 1 MiB */
#define MF2_PART_SHIFT_MAX	20u
#define MF_HEADER_MAX		4096u	/* larger headers are rejected */
#define MF_ENTRY_SIZE		104u	/* v1 record; readers accept larger */
#define MF_ENTRY_SIZE_LINKS	112u	/* v1 record + inode field (hard links) */
#define MF_ENTRY_SIZE_PACKS	120u	/* + pack and offset (packed files) */
#define MF_ID_SIZE		16u
#define MF_PACK_SIZE		32u	/* a pack table record */
#define MF_MEMBER_SIZE		8u	/* a member table record */
#define MF_INCOMPAT_PACKS	(1u << 0)	/* small files stored in packs */
#define MF_INCOMPAT_KNOWN	MF_INCOMPAT_PACKS	/* incompat flag bits this reader knows */
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

/* format 2 header field offsets (0..71 as in format 1) */
enum {
	H2_PARTSHIFT = 72,	/* u32: parts of 2^shift bytes */
	/* 76: u32 reserved, zero */
	H2_ENT_OFF = 80,
	H2_ENT_LEN = 88,
	H2_CHK_OFF = 96,
	H2_CHK_LEN = 104,
	H2_STR_OFF = 112,
	H2_STR_LEN = 120,
	H2_TAB_OFF = 128,	/* the part table: nparts XXH3-64s */
	H2_NPARTS = 136,
	H2_TAB_SUM = 144,	/* XXH3-64 of the part table */
	/* with MF_INCOMPAT_PACKS (else reserved, zero): */
	H2_PACK_OFF = 152,	/* the pack table: MF_PACK_SIZE records */
	H2_PACK_LEN = 160,
	H2_MEM_OFF = 168,	/* the member table: MF_MEMBER_SIZE records */
	H2_MEM_LEN = 176,
	/* 184..255 reserved, written as zero */
};

/*
 * The sections of format 2, in file and part order: three, or five with
 * MF_INCOMPAT_PACKS.  Their header fields, for the reader, the lazy copy
 * and manifest_reseal().
 */
enum { MF2_SEC_ENT, MF2_SEC_CHK, MF2_SEC_STR, MF2_SEC_PACK, MF2_SEC_MEM, MF2_NSEC };
static inline int mf2_sec_off_at(int sec)
{
	static const int at[MF2_NSEC] = { H2_ENT_OFF, H2_CHK_OFF, H2_STR_OFF,
					  H2_PACK_OFF, H2_MEM_OFF };

	return at[sec];
}

static inline int mf2_sec_len_at(int sec)
{
	return mf2_sec_off_at(sec) + 8;
}

static inline const char *mf2_sec_name(int sec)
{
	static const char *const name[MF2_NSEC] = {
		"entry table", "chunk table", "string table", "pack table", "member table",
	};

	return name[sec];
}

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
	/* records of MF_ENTRY_SIZE_PACKS bytes or more, with MF_INCOMPAT_PACKS */
	E_PACK = 112,	/* file: its pack's index + 1; 0: its chunks are objects */
	E_PACK_OFF = 116,	/* file: where its bytes start in the pack */
};

/* pack table record (MF_PACK_SIZE bytes) */
enum {
	P_ID = 0,	/* 16: the pack object's name, XXH3-128 of its bytes */
	P_SIZE = 16,	/* u64: its bytes, at most chunk_size */
	P_FIRST = 24,	/* u32: its first record in the member table */
	P_COUNT = 28,	/* u32: members, in increasing offset order */
};

/* member table record (MF_MEMBER_SIZE bytes) */
enum {
	M_ENTRY = 0,	/* u32: the entry of a file in the pack (its inode's) */
	M_OFF = 4,	/* u32: where its bytes start */
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

/* A valid entry name: 1..255 bytes, no '/' or NUL, not "." or "..". */
static inline bool name_ok(const char *name, size_t len)
{
	if (len == 0 || len > MF_NAME_MAX)
		return false;
	if (memchr(name, '/', len) || memchr(name, '\0', len))
		return false;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return false;
	return true;
}

/* Bytewise name order: the order of a directory's children. */
static inline int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, MIN(alen, blen));

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

/* Sections of a format 2 manifest whose incompat flags are @incompat. */
static inline int mf2_nsec(uint32_t incompat)
{
	return incompat & MF_INCOMPAT_PACKS ? MF2_NSEC : MF2_SEC_PACK;
}

/* Parts a section of @len bytes is cut into. */
static inline uint64_t mf2_nparts(uint64_t len, uint32_t shift)
{
	return (len + (1ull << shift) - 1) >> shift;
}

/* Records of @esize bytes in one part of 2^@shift bytes. */
static inline uint64_t mf2_per_part(uint32_t esize, uint32_t shift)
{
	return (1ull << shift) / esize;
}

/* Length of an entry table of @n records (@n >= 1), each part full but the last. */
static inline uint64_t mf2_ent_len(uint64_t n, uint32_t esize, uint32_t shift)
{
	uint64_t per = mf2_per_part(esize, shift);

	return ((n - 1) / per << shift) + ((n - 1) % per + 1) * esize;
}

/*
 * Recompute every checksum of the manifest in @b (format 1 or 2) where the
 * header's offsets allow, as a hostile writer would: for the unit tests and
 * the fuzz harness, which want damage to reach the accessors.
 */
void manifest_reseal(uint8_t *b, size_t len);

#endif
