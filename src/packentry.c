/* SPDX-License-Identifier: Apache-2.0 */
/*
 * packentry: see packentry.h.
 */
#include "packentry.h"

#include "log.h"

#include <errno.h>

bool packentry_maybe(const struct backend *be, const struct sfs_attr *a)
{
	return be->m && manifest_npacks(be->m) && a->size && a->size <= be->chunk_size;
}

int packentry_open(struct cache *c, struct backend *be, const struct sfs_attr *a,
		   struct cfile **pcf, uint32_t *poff, uint32_t *pack,
		   struct manifest_pack *pk)
{
	struct sfs_id id;

	if (!packentry_maybe(be, a) ||
	    manifest_file_pack(be->m, a->ino, pack, poff, pk) ||
	    pk->size > be->chunk_size || a->size > pk->size - *poff)
		return -ENOENT;
	manifest_pack_content(&pk->id, &id);
	return cache_file_get(c, &id, pk->size, be->chunk_size, pcf) ? -ENOENT : 0;
}

int packentry_get(struct cache *c, struct backend *be, const struct sfs_attr *a,
		  struct cfile **pcf, uint32_t *poff)
{
	struct manifest_pack pk;
	struct cfile *cf;
	uint32_t pack, off;

	if (packentry_open(c, be, a, &cf, &off, &pack, &pk))
		return -ENOENT;
	if (!cache_chunk_present(c, cf, 0)) {
		cache_file_put(c, cf);
		return -ENOENT;
	}
	*pcf = cf;
	*poff = off;
	return 0;
}

bool packentry_chunk_cached(struct cache *c, struct backend *be,
			    const struct sfs_attr *a, struct cfile *cf, uint32_t idx)
{
	struct cfile *pcf;
	uint32_t poff;

	if (cache_chunk_present(c, cf, idx))
		return true;
	if (idx || packentry_get(c, be, a, &pcf, &poff))
		return false;
	cache_file_put(c, pcf);
	return true;
}

int packentry_check(struct backend *be, uint32_t pack, const struct manifest_pack *pk,
		    const void *buf)
{
	char hex[SFS_ID_HEX_LEN + 1];
	struct manifest_member mb;
	struct sfs_id got;
	uint32_t n = 0;

	sfs_id_of(buf, (size_t)pk->size, &got);
	if (!sfs_id_eq(&got, &pk->id)) {
		sfs_id_hex(&got, hex);
		log_err("%s: pack %u is corrupt (its %llu bytes hash to %s): not cached",
			be->uri, pack, (unsigned long long)pk->size, hex);
		return -EIO;
	}
	for (uint32_t j = 0; j < pk->nmembers; j++) {
		if (manifest_pack_member(be->m, pack, j, &mb))
			continue;	/* logged; that file is read alone, and fails there */
		sfs_id_of((const char *)buf + mb.off, (size_t)mb.size, &got);
		if (!sfs_id_eq(&got, &mb.chunk)) {
			sfs_id_hex(&got, hex);
			log_err("%s: pack %u is corrupt (%llu bytes at %u hash to %s): not cached",
				be->uri, pack, (unsigned long long)mb.size, mb.off, hex);
			return -EIO;
		}
		n++;
	}
	return (int)n;
}

struct fill_src {
	struct cache *c;
	struct backend *be;
	const struct sfs_attr *a;
	struct cfile *pcf;
	uint32_t poff, uid;
};

/* struct cache_source's fetch: the file's range of its pack's entry, checked. */
static int fill_fetch(void *arg, uint32_t idx, void *buf, size_t len)
{
	struct fill_src *s = arg;
	struct cache_source check = { .uid = s->uid };	/* checks, never fetches */
	struct sfs_id want, got;
	ssize_t n;

	if (idx || len != s->a->size)
		return -EINVAL;
	n = cache_read(s->c, s->pcf, s->poff, buf, len, &check);
	if (n != (ssize_t)len)
		return -ENOENT;
	if (manifest_chunk(s->be->m, s->a->ino, 0, &want))
		return -EIO;
	sfs_id_of(buf, len, &got);
	return sfs_id_eq(&got, &want) ? (int)len : -EIO;
}

int packentry_fill_file(struct cache *c, struct backend *be, const struct sfs_attr *a,
			struct cfile *cf, uint32_t uid)
{
	struct fill_src s = { .c = c, .be = be, .a = a, .uid = uid };
	struct cache_source src = { .fetch = fill_fetch, .arg = &s, .uid = uid };
	int ret;

	if (cache_chunk_present(c, cf, 0))
		return 0;
	if (packentry_get(c, be, a, &s.pcf, &s.poff))
		return -ENOENT;
	ret = cache_read_prefetch(c, cf, 0, &src);
	cache_file_put(c, s.pcf);
	return ret;
}
