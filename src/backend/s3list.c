/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3list: every key under a prefix (s3.h), with ListObjectsV2: up to 1,000
 * keys a request, the next page asked for with the continuation token the
 * last one gave.  On a versioned bucket, ListObjectVersions instead (the
 * next page from the key and version-id markers), keeping each key's
 * latest version with its id; a key whose latest is a delete marker is
 * gone.  The XML is parsed with expat as it comes off the page
 * (a page is at most a few hundred KB); an element's text longer than S3
 * allows (keys are at most 1,024 bytes) or a page larger than 16 MiB is
 * refused, not truncated.
 *
 * One directory at a time (s3_list_dir()): the same requests with
 * delimiter=/, whose CommonPrefixes are the directory's subdirectories.
 * A range of one (s3_list_range(), for s3wide.c): the first page from
 * start-after (ListObjectsV2) or key-marker (ListObjectVersions: after
 * every version of that key), and a word after each page.
 */
#include "s3.h"

#ifdef CONFIG_HAVE_S3

#include "util.h"

#include <errno.h>
#include <expat.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE_MAX	(16u << 20)
#define TEXT_MAX	4096

enum field {
	F_NONE, F_KEY, F_SIZE, F_ETAG, F_MTIME, F_VERSION, F_LATEST,
	F_TRUNCATED, F_TOKEN, F_NEXT_KEY, F_NEXT_VERSION, F_PREFIX,
};

struct page {
	int depth;
	bool in_contents;
	bool in_prefixes;	/* a CommonPrefixes element */
	enum field f;
	char text[TEXT_MAX + 1];
	size_t tlen;
	bool overflow;
	/* the current object */
	char key[TEXT_MAX + 1], etag[TEXT_MAX + 1], size[32], mtime[64], version[TEXT_MAX + 1];
	unsigned have;
	bool latest;
	/* the page */
	bool versions;		/* ListObjectVersions */
	bool truncated;
	char token[TEXT_MAX + 1];	/* ListObjectsV2's continuation */
	char next_key[TEXT_MAX + 1], next_version[TEXT_MAX + 1];	/* ListObjectVersions' */
	int (*fn)(void *arg, const struct s3_object *o);
	int (*on_prefix)(void *arg, const char *prefix);	/* NULL: no delimiter */
	const char *prefix;	/* of the keys asked for */
	const char *start_after;	/* the first page's, or NULL */
	unsigned max_keys;	/* a page's */
	char pfx[TEXT_MAX + 1];	/* the current CommonPrefixes' Prefix */
	void *arg;
	int ret;
	char *err;
	size_t errlen;
	XML_Parser p;
};

static enum field field_of(const char *name, bool in_contents, bool in_prefixes, int depth)
{
	if (in_prefixes && depth == 3 && !strcmp(name, "Prefix"))
		return F_PREFIX;
	if (in_contents && depth == 3) {
		if (!strcmp(name, "Key"))
			return F_KEY;
		if (!strcmp(name, "Size"))
			return F_SIZE;
		if (!strcmp(name, "ETag"))
			return F_ETAG;
		if (!strcmp(name, "LastModified"))
			return F_MTIME;
		if (!strcmp(name, "VersionId"))
			return F_VERSION;
		if (!strcmp(name, "IsLatest"))
			return F_LATEST;
	}
	if (!in_contents && depth == 2) {
		if (!strcmp(name, "IsTruncated"))
			return F_TRUNCATED;
		if (!strcmp(name, "NextContinuationToken"))
			return F_TOKEN;
		if (!strcmp(name, "NextKeyMarker"))
			return F_NEXT_KEY;
		if (!strcmp(name, "NextVersionIdMarker"))
			return F_NEXT_VERSION;
	}
	return F_NONE;
}

static void XMLCALL on_start(void *arg, const XML_Char *name, const XML_Char **attrs)
{
	struct page *pg = arg;

	(void)attrs;
	pg->depth++;
	if (pg->depth == 2 && !strcmp(name, pg->versions ? "Version" : "Contents")) {
		pg->in_contents = true;
		pg->have = 0;
		pg->latest = !pg->versions;
		pg->version[0] = '\0';
	}
	if (pg->depth == 2 && pg->on_prefix && !strcmp(name, "CommonPrefixes")) {
		pg->in_prefixes = true;
		pg->pfx[0] = '\0';
	}
	pg->f = field_of(name, pg->in_contents, pg->in_prefixes, pg->depth);
	pg->tlen = 0;
}

static void XMLCALL on_text(void *arg, const XML_Char *s, int len)
{
	struct page *pg = arg;

	if (pg->f == F_NONE)
		return;
	if (pg->tlen + (size_t)len > TEXT_MAX) {
		pg->overflow = true;
		return;
	}
	memcpy(pg->text + pg->tlen, s, (size_t)len);
	pg->tlen += (size_t)len;
}

/* "2026-11-29T00:17:02.367Z" */
static int parse_time(const char *s, struct timespec *ts)
{
	struct tm tm = { 0 };
	const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	long ns = 0, scale = 100000000;

	if (!rest)
		return -EINVAL;
	if (*rest == '.')
		for (rest++; *rest >= '0' && *rest <= '9'; rest++, scale /= 10)
			ns += (*rest - '0') * scale;
	ts->tv_sec = timegm(&tm);
	ts->tv_nsec = ns;
	return 0;
}

static void fail(struct page *pg, int ret, const char *fmt, const char *what)
{
	if (!pg->ret) {
		pg->ret = ret;
		snprintf(pg->err, pg->errlen, fmt, what);
	}
	XML_StopParser(pg->p, XML_FALSE);
}

static void object_end(struct page *pg)
{
	struct s3_object o = { .key = pg->key, .etag = pg->etag };
	char *end;

	if (!pg->latest)
		return;		/* an older version */
	if ((pg->have & 0xf) != 0xf) {
		fail(pg, -EPROTO, "the listing has an object without a %s", "key, size, ETag or time");
		return;
	}
	errno = 0;
	o.size = strtoull(pg->size, &end, 10);
	if (errno || *end || pg->size[0] == '-' || !pg->size[0]) {
		fail(pg, -EPROTO, "the listing has a bad size '%s'", pg->size);
		return;
	}
	if (parse_time(pg->mtime, &o.mtime)) {
		fail(pg, -EPROTO, "the listing has a bad LastModified '%s'", pg->mtime);
		return;
	}
	for (const char *p = pg->etag; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) {
			fail(pg, -EPROTO, "the listing has a bad ETag for %s", pg->key);
			return;
		}
	if (pg->versions && pg->version[0] && strcmp(pg->version, "null"))
		o.version = pg->version;	/* "null": put while versioning was off */
	pg->ret = pg->fn(pg->arg, &o);
	if (pg->ret) {
		if (!pg->err[0] && pg->ret < 0)
			snprintf(pg->err, pg->errlen, "%s: %s", pg->key, strerror(-pg->ret));
		XML_StopParser(pg->p, XML_FALSE);
	}
}

static void XMLCALL on_end(void *arg, const XML_Char *name)
{
	struct page *pg = arg;
	char *dst = NULL;
	size_t cap = 0;

	if (pg->overflow) {
		fail(pg, -EPROTO, "the listing has a %s longer than S3 allows", name);
		return;
	}
	pg->text[pg->tlen] = '\0';
	switch (pg->f) {
	case F_KEY: dst = pg->key; cap = sizeof(pg->key); pg->have |= 1; break;
	case F_SIZE: dst = pg->size; cap = sizeof(pg->size); pg->have |= 2; break;
	case F_ETAG: dst = pg->etag; cap = sizeof(pg->etag); pg->have |= 4; break;
	case F_MTIME: dst = pg->mtime; cap = sizeof(pg->mtime); pg->have |= 8; break;
	case F_TRUNCATED: pg->truncated = !strcmp(pg->text, "true"); break;
	case F_TOKEN: dst = pg->token; cap = sizeof(pg->token); break;
	case F_VERSION: dst = pg->version; cap = sizeof(pg->version); break;
	case F_LATEST: pg->latest = !strcmp(pg->text, "true"); break;
	case F_NEXT_KEY: dst = pg->next_key; cap = sizeof(pg->next_key); break;
	case F_NEXT_VERSION: dst = pg->next_version; cap = sizeof(pg->next_version); break;
	case F_PREFIX: dst = pg->pfx; cap = sizeof(pg->pfx); break;
	case F_NONE: break;
	}
	if (dst && pg->tlen >= cap) {
		fail(pg, -EPROTO, "the listing has a %s too long", name);
		return;
	}
	if (dst)
		memcpy(dst, pg->text, pg->tlen + 1);
	pg->f = F_NONE;
	pg->tlen = 0;
	if (pg->depth == 2 && pg->in_contents && !strcmp(name, pg->versions ? "Version" : "Contents")) {
		pg->in_contents = false;
		object_end(pg);
	} else if (pg->depth == 2 && pg->in_prefixes && !strcmp(name, "CommonPrefixes")) {
		pg->in_prefixes = false;
		if (pg->pfx[0] && (pg->ret = pg->on_prefix(pg->arg, pg->pfx))) {
			if (!pg->err[0])
				snprintf(pg->err, pg->errlen, "%s: %s", pg->pfx, strerror(-pg->ret));
			XML_StopParser(pg->p, XML_FALSE);
		}
	}
	pg->depth--;
}

/* The query of the next page (the first if no marker is set), canonical for SigV4. */
static int page_query(const struct page *pg, char *q, size_t n)
{
	char etok[3 * TEXT_MAX + 1], ever[3 * TEXT_MAX + 1], epfx[3 * 1024 + 1];
	char eafter[3 * 1024 + 1] = "";
	const char *delim = pg->on_prefix ? "delimiter=%2F&" : "";
	/* the first page starts after @start_after; the next from where the last ended */
	bool first = pg->start_after && pg->start_after[0] &&
		     !(pg->versions ? pg->next_key[0] : pg->token[0]);
	int r;

	if (s3_encode(pg->prefix, false, epfx, sizeof(epfx)) ||
	    (first && s3_encode(pg->start_after, false, eafter, sizeof(eafter))))
		return -ENAMETOOLONG;
	if (pg->versions) {
		/* sorted: delimiter, key-marker, max-keys, prefix, version-id-marker, versions */
		if (s3_encode(first ? pg->start_after : pg->next_key, false, etok, sizeof(etok)) ||
		    s3_encode(pg->next_version, false, ever, sizeof(ever)))
			return -ENAMETOOLONG;
		r = snprintf(q, n, "%s%s%s%smax-keys=%u&prefix=%s%s%s&versions=", delim,
			     etok[0] ? "key-marker=" : "", etok, etok[0] ? "&" : "",
			     pg->max_keys, epfx, pg->next_version[0] ? "&version-id-marker=" : "", ever);
	} else {
		/* sorted: continuation-token, delimiter, list-type, max-keys, prefix, start-after */
		if (s3_encode(pg->token, false, etok, sizeof(etok)))
			return -ENAMETOOLONG;
		r = snprintf(q, n, "%s%s%s%slist-type=2&max-keys=%u&prefix=%s%s%s",
			     pg->token[0] ? "continuation-token=" : "", etok, pg->token[0] ? "&" : "",
			     delim, pg->max_keys, epfx, first ? "&start-after=" : "", eafter);
	}
	return r >= 0 && (size_t)r < n ? 0 : -ENAMETOOLONG;
}

static void list_error(const struct s3_target *t, long status, const char *body, char *err,
		       size_t errlen)
{
	char why[256];

	s3_error_text(status, body, why, sizeof(why));
	if (status == 404 && strstr(body, "NoSuchBucket"))
		snprintf(err, errlen, "s3://%s: no such bucket at %s (%s)", t->bucket, t->endpoint, why);
	else if (status == 403)
		snprintf(err, errlen, "s3://%s: access denied with the keys from %s (%s)", t->bucket,
			 t->cred_source, why);
	else if (status == 301 || status == 307)
		snprintf(err, errlen, "s3://%s: the bucket is not in region %s at %s (%s)", t->bucket,
			 t->region, t->endpoint, why);
	else
		snprintf(err, errlen, "s3://%s: cannot list it at %s (%s)", t->bucket, t->endpoint, why);
}

int s3_versioning(const struct s3_target *t, bool *on, char *err, size_t errlen)
{
	char *body = NULL;
	size_t len = 0;
	long status = 0;
	int ret;

	*on = false;
	ret = s3_fetch(t, NULL, "versioning=", &body, &len, 65536, &status, err, errlen);
	if (ret)
		return ret;
	if (status == 200)
		*on = strstr(body, "<Status>Enabled</Status>") ||
		      strstr(body, "<Status>Suspended</Status>");
	else if (status != 403 && status != 405 && status != 501)
		list_error(t, status, body, err, errlen);
	free(body);
	/* not allowed to ask, or no versioning there: an unversioned bucket */
	return status == 200 || status == 403 || status == 405 || status == 501 ? 0
		: status == 404 ? -ENOENT : -EIO;
}

static int list_pages(const struct s3_target *t, bool versions, const char *prefix,
		      unsigned max_keys, bool all, const struct s3_list_opts *o,
		      int (*fn)(void *arg, const struct s3_object *o),
		      int (*on_prefix)(void *arg, const char *prefix), void *arg,
		      char *err, size_t errlen)
{
	struct page *pg = calloc(1, sizeof(*pg));
	char query[4 * TEXT_MAX + 3 * 1024 + 128];
	int ret = 0;

	if (!pg)
		return -ENOMEM;
	pg->versions = versions;
	pg->prefix = prefix;
	pg->start_after = o ? o->start_after : NULL;
	pg->max_keys = max_keys;
	pg->on_prefix = on_prefix;
	pg->fn = fn;
	pg->arg = arg;
	pg->err = err;
	pg->errlen = errlen;
	err[0] = '\0';
	do {
		char *body = NULL;
		size_t len = 0;
		long status = 0;

		ret = page_query(pg, query, sizeof(query));
		if (ret) {
			snprintf(err, errlen, "s3://%s: the prefix or a continuation token is too long", t->bucket);
			break;
		}
		ret = s3_fetch(t, NULL, query, &body, &len, PAGE_MAX, &status, err, errlen);
		if (ret)
			break;
		if (status != 200) {
			list_error(t, status, body, err, errlen);
			free(body);
			ret = status == 403 ? -EACCES : status == 404 ? -ENOENT : -EIO;
			break;
		}
		pg->p = XML_ParserCreate("UTF-8");
		if (!pg->p) {
			free(body);
			ret = -ENOMEM;
			break;
		}
		XML_SetUserData(pg->p, pg);
		XML_SetElementHandler(pg->p, on_start, on_end);
		XML_SetCharacterDataHandler(pg->p, on_text);
		pg->depth = 0;
		pg->truncated = false;
		pg->token[0] = pg->next_key[0] = pg->next_version[0] = '\0';
		if (XML_Parse(pg->p, body, (int)len, XML_TRUE) == XML_STATUS_ERROR && !pg->ret) {
			snprintf(err, errlen, "s3://%s: the listing is not XML S3 would send (line %lu: %s)",
				 t->bucket, (unsigned long)XML_GetCurrentLineNumber(pg->p),
				 XML_ErrorString(XML_GetErrorCode(pg->p)));
			pg->ret = -EPROTO;
		}
		XML_ParserFree(pg->p);
		free(body);
		ret = pg->ret;
		if (!ret && pg->truncated && !(versions ? pg->next_key[0] : pg->token[0])) {
			snprintf(err, errlen, "s3://%s: a listing page is truncated but has no continuation token",
				 t->bucket);
			ret = -EPROTO;
		}
		if (!ret && o && o->on_page) {
			ret = o->on_page(arg, pg->truncated);
			if (ret > 0) {
				ret = 0;	/* done: the rest is not wanted */
				break;
			}
		}
	} while (!ret && pg->truncated && all);
	if (ret == -EPROTO && strncmp(err, "s3://", 5)) {
		char m[512];

		snprintf(m, sizeof(m), "%s", err);
		snprintf(err, errlen, "s3://%s: %s", t->bucket, m);
	}
	free(pg);
	return ret;
}

int s3_list(const struct s3_target *t, bool versions,
	    int (*fn)(void *arg, const struct s3_object *o), void *arg, char *err, size_t errlen)
{
	return list_pages(t, versions, t->prefix, 1000, true, NULL, fn, NULL, arg, err, errlen);
}

int s3_list_dir(const struct s3_target *t, bool versions, const char *prefix, unsigned max_keys,
		int (*fn)(void *arg, const struct s3_object *o),
		int (*on_prefix)(void *arg, const char *prefix), void *arg,
		char *err, size_t errlen)
{
	return list_pages(t, versions, prefix, max_keys && max_keys < 1000 ? max_keys : 1000,
			  !max_keys || max_keys >= 1000, NULL, fn, on_prefix, arg, err, errlen);
}

int s3_list_range(const struct s3_target *t, bool versions, const char *prefix,
		  const struct s3_list_opts *o,
		  int (*fn)(void *arg, const struct s3_object *o),
		  int (*on_prefix)(void *arg, const char *prefix), void *arg,
		  char *err, size_t errlen)
{
	unsigned keys = o->page_keys && o->page_keys < 1000 ? o->page_keys : 1000;

	return list_pages(t, versions, prefix, keys, true, o, fn, on_prefix, arg, err, errlen);
}

#endif /* CONFIG_HAVE_S3 */
