/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pack_check: what a published version says, checked against the pool and
 * the tree it was published from, without a mount (tests/rados/packs.sh).
 *
 *   pack_check CEPH_CONF POOL NS NAME@V SRCDIR   every regular file
 *       reassembled from the objects its manifest names (its pack's range,
 *       or its chunks) equals SRCDIR's file of that path byte for byte;
 *       each pack object has the size the manifest gives and hashes to its
 *       name; each packed file's bytes hash to its chunk id; each pack's
 *       members are exactly the files that say they lie in it.  Prints
 *       "files N packed P packs K chunks C".
 *   pack_check --packs CEPH_CONF POOL NS NAME@V  the packs the version
 *       names, one a line (in manifest order): the object name and the
 *       number of files of the version that lie in it.
 *
 * NS "" is the default namespace.  Exit status 0, or 1 with a message.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/rados.h"
#include "manifest/manifest.h"
#include "util.h"

static int bad;

static void complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void complain(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "pack_check: ");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	bad++;
}

/* Object @oid whole into a malloc'ed buffer of *@len bytes; NULL if missing. */
static char *get_object(rados_ioctx_t io, const char *oid, size_t *len)
{
	uint64_t size;
	time_t mtime;
	char *buf;
	int n;

	if (rados_stat(io, oid, &size, &mtime) < 0)
		return NULL;
	buf = malloc(size ? size : 1);
	if (!buf)
		return NULL;
	n = rados_read(io, oid, buf, size, 0);
	if (n < 0 || (uint64_t)n != size) {
		free(buf);
		return NULL;
	}
	*len = size;
	return buf;
}

/* The bytes of SRCDIR/@path, whole. */
static char *get_file(const char *dir, const char *path, size_t *len)
{
	char full[8192];
	struct stat st;
	char *buf;
	int fd;

	snprintf(full, sizeof(full), "%s/%s", dir, path);
	fd = open(full, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (buf && pread_full(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
		free(buf);
		buf = NULL;
	}
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

int main(int argc, char **argv)
{
	struct sfs_rados_opts ro = { .timeout_ms = 30000 };
	bool list = argc > 1 && !strcmp(argv[1], "--packs");
	const char *pool, *ns, *src = NULL;
	char err[512], name[SFS_RADOS_NAME_MAX + 1], oid[SFS_RADOS_OID_MAX];
	char **packbuf = NULL;
	size_t *packlen = NULL;
	uint64_t version, nfiles = 0, npacked = 0, nchunks = 0, *members = NULL;
	struct manifest *m;
	rados_ioctx_t io;
	rados_t cl;
	const char *at;
	uint32_t np;
	size_t mlen;
	void *mbuf;

	if (list) {
		argv++;
		argc--;
	}
	if (argc != (list ? 5 : 6)) {
		fprintf(stderr, "usage: pack_check [--packs] CEPH_CONF POOL NS NAME@V [SRCDIR]\n");
		return 1;
	}
	ro.conf = argv[1];
	pool = argv[2];
	ns = argv[3];
	at = strrchr(argv[4], '@');
	if (!list)
		src = argv[5];
	if (!at || (size_t)(at - argv[4]) > SFS_RADOS_NAME_MAX || parse_uint(at + 1, &version)) {
		fprintf(stderr, "pack_check: '%s' is not NAME@V\n", argv[4]);
		return 1;
	}
	memcpy(name, argv[4], (size_t)(at - argv[4]));
	name[at - argv[4]] = '\0';
	if (sfs_rados_connect(&ro, &cl, err, sizeof(err)) ||
	    sfs_rados_ioctx(cl, pool, *ns ? ns : NULL, &io, err, sizeof(err)) ||
	    sfs_rados_manifest_read(io, name, version, &mbuf, &mlen, err, sizeof(err)) ||
	    manifest_open(mbuf, mlen, &m, err, sizeof(err))) {
		fprintf(stderr, "pack_check: %s\n", err);
		return 1;
	}
	if (manifest_verify(m, NULL)) {
		fprintf(stderr, "pack_check: %s@%" PRIu64 ": bad manifest parts\n", name, version);
		return 1;
	}
	np = manifest_npacks(m);
	if (list) {
		for (uint32_t k = 0; k < np; k++) {
			struct manifest_pack pk;

			if (manifest_pack(m, k, &pk)) {
				complain("pack %u is corrupt", k);
				continue;
			}
			sfs_rados_pack_oid(&pk.id, oid);
			printf("%s %u\n", oid, pk.nmembers);
		}
		manifest_close(m);
		rados_ioctx_destroy(io);
		rados_shutdown(cl);
		return bad ? 1 : 0;
	}

	/* every pack: its object, its members */
	packbuf = calloc(np ? np : 1, sizeof(*packbuf));
	packlen = calloc(np ? np : 1, sizeof(*packlen));
	members = calloc(np ? np : 1, sizeof(*members));
	if (!packbuf || !packlen || !members)
		return 1;
	for (uint32_t k = 0; k < np; k++) {
		struct manifest_pack pk;
		struct sfs_id id;

		if (manifest_pack(m, k, &pk)) {
			complain("pack %u is corrupt", k);
			continue;
		}
		sfs_rados_pack_oid(&pk.id, oid);
		packbuf[k] = get_object(io, oid, &packlen[k]);
		if (!packbuf[k]) {
			complain("%s: missing", oid);
			continue;
		}
		sfs_id_of(packbuf[k], packlen[k], &id);
		if (packlen[k] != pk.size || !sfs_id_eq(&id, &pk.id))
			complain("%s: %zu bytes, expected %" PRIu64 ", or not its bytes' hash",
				 oid, packlen[k], pk.size);
		for (uint32_t j = 0; j < pk.nmembers; j++) {
			struct manifest_member mb;
			uint32_t fp, fo;

			if (manifest_pack_member(m, k, j, &mb)) {
				complain("%s: member %u is corrupt", oid, j);
				continue;
			}
			if (manifest_file_pack(m, mb.ino, &fp, &fo, NULL) || fp != k || fo != mb.off)
				complain("%s: member %u (inode %" PRIu64 ") does not lie there", oid, j,
					 mb.ino);
		}
		members[k] = pk.nmembers;
	}

	/* every file: its bytes, from its pack or its chunks */
	for (uint64_t ino = 1; ino <= manifest_nentries(m); ino++) {
		char path[4096];
		struct sfs_attr a;
		struct sfs_id id;
		uint32_t pack, off;
		size_t slen;
		char *sbuf;
		int rc;

		if (manifest_getattr(m, ino, &a) || !S_ISREG(a.mode))
			continue;
		if (manifest_path(m, ino, path, sizeof(path)) < 0) {
			complain("inode %" PRIu64 ": no path", ino);
			continue;
		}
		nfiles++;
		sbuf = get_file(src, path, &slen);
		if (!sbuf || slen != a.size) {
			complain("%s: not in %s, or not of %" PRIu64 " bytes", path, src, a.size);
			free(sbuf);
			continue;
		}
		rc = manifest_file_pack(m, ino, &pack, &off, NULL);
		if (rc == 0) {
			/* counted once per inode, as the pack's members are */
			if (a.ino == ino)
				npacked++;
			if (!packbuf[pack] || off + a.size > packlen[pack] ||
			    memcmp(packbuf[pack] + off, sbuf, slen))
				complain("%s: pack %u at %u does not hold its bytes", path, pack, off);
			else if (manifest_chunk(m, ino, 0, &id) ||
				 !(sfs_id_of(sbuf, slen, &a.content), sfs_id_eq(&a.content, &id)))
				complain("%s: its chunk id is not its bytes' hash", path);
		} else if (rc == -ENODATA) {
			uint64_t done = 0;

			for (uint32_t c = 0; c < manifest_nchunks(m, ino); c++) {
				size_t clen;
				char *cbuf;

				if (manifest_chunk(m, ino, c, &id)) {
					complain("%s: chunk %u unreadable", path, c);
					break;
				}
				sfs_rados_chunk_oid(&id, oid);
				cbuf = get_object(io, oid, &clen);
				if (!cbuf || done + clen > slen || memcmp(cbuf, sbuf + done, clen)) {
					complain("%s: chunk %u (%s) missing or wrong", path, c, oid);
					free(cbuf);
					break;
				}
				done += clen;
				nchunks++;
				free(cbuf);
			}
			if (done != slen)
				complain("%s: its chunks hold %" PRIu64 " of %zu bytes", path, done, slen);
		} else {
			complain("%s: manifest_file_pack: %s", path, strerror(-rc));
		}
		free(sbuf);
	}
	{
		uint64_t sum = 0;

		for (uint32_t k = 0; k < np; k++)
			sum += members[k];
		if (sum != npacked)
			complain("%" PRIu64 " pack members, %" PRIu64 " packed files", sum, npacked);
	}
	printf("files %" PRIu64 " packed %" PRIu64 " packs %u chunks %" PRIu64 "\n", nfiles,
	       npacked, np, nchunks);
	for (uint32_t k = 0; k < np; k++)
		free(packbuf[k]);
	free(packbuf);
	free(packlen);
	free(members);
	manifest_close(m);
	rados_ioctx_destroy(io);
	rados_shutdown(cl);
	return bad ? 1 : 0;
}
