/*
 * manifest_i.h: the serialized manifest's format, shared by the reader
 * (manifest_read.c) and the builder (manifest_build.c) and seen by nobody
 * else.  docs/manifest.md has the byte layout in full.
 *
 * A serialized manifest is a fixed header, a table of fixed-size
 * little-endian entry records, a table of 16-byte chunk ids and a string
 * table.  Entries are in breadth-first order from the root, and each
 * directory's children are one contiguous run sorted bytewise by name
 * (name_cmp()).  Every section has an XXH3-64 checksum in the header, and
 * the header one of its own.  A v1 record is MF_ENTRY_SIZE bytes, or
 * MF_ENTRY_SIZE_LINKS when some entries share an inode (hard links);
 * readers accept larger records and headers up to MF_HEADER_MAX.
 */
#ifndef STAGEFS_MANIFEST_I_H
#define STAGEFS_MANIFEST_I_H

#include "manifest.h"

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

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

#endif
