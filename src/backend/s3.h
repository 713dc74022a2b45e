/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3: what the s3:// source (backend_s3.c) is built from.
 *
 *   s3cred.c  where a bucket's endpoint, region and credentials come from:
 *             the URI, stagefs.conf, the AWS_* environment and the
 *             ~/.aws-style credentials and config files, as the AWS CLI
 *             looks them up; credential files root-only, refused otherwise.
 *   s3http.c  requests: signed by libcurl (SigV4), many ranged GETs in
 *             flight on one thread (a curl multi handle and its connection
 *             pool), retried with backoff on 5xx, 429 and connection
 *             errors until the request's deadline.
 *   s3list.c  a bucket's keys under a prefix: ListObjectsV2, page by
 *             page, parsed with expat; or one directory of them
 *             (delimiter=/).
 *
 * Nothing here knows the manifest or the cache: backend_s3.c turns a
 * listing into a tree and reads into chunks.
 */
#ifndef STAGEFS_S3_H
#define STAGEFS_S3_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct sfs_config;

/* Where a bucket is and how to sign for it (s3cred.c fills it). */
struct s3_target {
	char *endpoint;		/* scheme://host[:port], no trailing '/' */
	bool path_style;	/* ENDPOINT/BUCKET/KEY, else BUCKET.host/KEY */
	char *region;
	char *bucket;
	char *prefix;		/* "" or ending in '/' */
	char *access_key;	/* NULL: unsigned (anonymous) requests */
	char *secret_key;
	char *session_token;	/* or NULL */
	char *cred_source;	/* where the keys came from, for messages */
	uint64_t timeout_ms;	/* a request's deadline, retries included */
	unsigned connections;	/* requests in flight at most */
};

/*
 * Parse "s3://BUCKET[/PREFIX][?OPT&...]" (OPT: endpoint=URL, region=R,
 * profile=P, timeout=DURATION) and resolve the rest as the AWS CLI does:
 * the URI's options, then stagefs.conf (s3_endpoint, s3_region,
 * s3_profile, s3_credentials_file), then AWS_ENDPOINT_URL_S3 /
 * AWS_ENDPOINT_URL, AWS_REGION / AWS_DEFAULT_REGION, AWS_PROFILE,
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
 * AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE (default ~/.aws/...).
 * Returns 0 or -errno with a message naming the source in @err.
 */
int s3_target_resolve(struct s3_target *t, const char *uri, const struct sfs_config *cfg,
		      char *err, size_t errlen);
void s3_target_release(struct s3_target *t);

/* ---- s3http.c ---- */

/*
 * A ranged GET of [@off, @off + @len) of @key into @buf, checked against
 * @etag (If-Match): the object replaced since it was listed gives -EIO.
 * ->done runs once, on the client's thread, with ->res set to @len or
 * -errno; it must only hand over.
 */
struct s3_get {
	const char *key;	/* the whole key, prefix included */
	const char *etag;	/* as listed, quotes included; NULL: not checked */
	const char *version;	/* the object version to read (versionId), or NULL */
	uint64_t off;
	size_t len;
	void *buf;
	void (*done)(struct s3_get *g);
	int res;
	/* the client's */
	struct s3_get *next;
	void *easy;		/* CURL * while a try is in flight */
	void *headers;		/* struct curl_slist * */
	size_t got;
	long status;		/* this try's HTTP status */
	char errbody[160];	/* the start of an error reply */
	size_t errlen;
	uint64_t deadline_ms, retry_at_ms;
	unsigned tries;
};

struct s3_client;

/* A client for @t (which it keeps a pointer to): its thread, its pool. */
int s3_client_start(const struct s3_target *t, struct s3_client **out, char *err,
		    size_t errlen);
/* Every request queued or in flight ends with -ESHUTDOWN first. */
void s3_client_stop(struct s3_client *c);
/* Queue @g: 0 (->done will run), or -ESHUTDOWN. */
int s3_client_get(struct s3_client *c, struct s3_get *g);

/*
 * One request on the calling thread, with the same signing and retries:
 * GET of @key (NULL: the bucket) with the canonical query @query (NULL:
 * none), the body into *@body (malloc'ed, NUL-terminated, at most @max
 * bytes) and the HTTP status into *@status.  0 when an answer came (any
 * status), else -errno with the reason in @err.
 */
int s3_fetch(const struct s3_target *t, const char *key, const char *query, char **body,
	     size_t *len, size_t max, long *status, char *err, size_t errlen);

/*
 * @s into @out (@n bytes) as SigV4 wants it: RFC 3986's unreserved bytes
 * kept, '/' kept if @keep_slash, the rest %XX.  0 or -ENAMETOOLONG.
 */
int s3_encode(const char *s, bool keep_slash, char *out, size_t n);

/* "Code: Message" of an S3 error reply, or its status's meaning. */
void s3_error_text(long status, const char *body, char *buf, size_t len);

/* ---- s3list.c ---- */

struct s3_object {
	const char *key;	/* the whole key */
	uint64_t size;
	struct timespec mtime;	/* LastModified */
	const char *etag;
	const char *version;	/* its VersionId on a versioned bucket, else NULL */
};

/*
 * Every object under @t->prefix, in the listing's (key) order, to @fn,
 * which returns 0 to go on or -errno to stop with it; with @versions
 * (a versioned bucket) the latest version of each key, with its id.
 * Returns 0, or -errno with a message in @err (a missing bucket, denied,
 * unreachable).
 */
int s3_list(const struct s3_target *t, bool versions,
	    int (*fn)(void *arg, const struct s3_object *o), void *arg, char *err, size_t errlen);

/*
 * One page or all of the keys under @prefix (a whole key prefix): with
 * @max_keys below 1,000, its first @max_keys keys only; else every page.
 * With @on_prefix, the listing is delimited at '/': keys directly under
 * @prefix go to @fn, and each common prefix (ending in '/', the start of
 * a deeper key) to @on_prefix, as S3 gives them, once each.  Either
 * returns 0 to go on, or stops the listing with what it returns: -errno,
 * or a value above 0 (found what it looked for).  Returns as s3_list(),
 * or that value.
 */
int s3_list_dir(const struct s3_target *t, bool versions, const char *prefix, unsigned max_keys,
		int (*fn)(void *arg, const struct s3_object *o),
		int (*on_prefix)(void *arg, const char *prefix), void *arg,
		char *err, size_t errlen);
/* s3_list_range()'s settings. */
struct s3_list_opts {
	const char *start_after;	/* keys after this one only (NULL, "": all) */
	unsigned page_keys;		/* max-keys a page (0: 1,000, S3's most) */
	/*
	 * After each page (@truncated: more to come): 0 goes on, a value
	 * above 0 stops the listing (s3_list_range() then returns 0), -errno
	 * fails it.
	 */
	int (*on_page)(void *arg, bool truncated);
};

/* s3_list_dir() of every page, from @o->start_after, with @o->on_page. */
int s3_list_range(const struct s3_target *t, bool versions, const char *prefix,
		  const struct s3_list_opts *o,
		  int (*fn)(void *arg, const struct s3_object *o),
		  int (*on_prefix)(void *arg, const char *prefix), void *arg,
		  char *err, size_t errlen);

/* ---- s3wide.c ---- */

/* Listing threads the mount may add to its walk's, in all (s3_list_wide()). */
struct s3_wide_budget {
	atomic_uint used;
	unsigned max;
	unsigned page_keys;	/* s3_list_opts's (tests); 0: 1,000 */
	atomic_bool stop;	/* set: every listing stops after its page */
};

/*
 * s3_list_dir() of a whole directory, with @on_prefix; the same entries,
 * to @fn and @on_prefix one call at a time, in no set order, a common
 * prefix possibly more than once.  A directory of more than a couple of
 * pages is cut into key ranges (s3_split_points()) listed at once by up
 * to @b->max more threads than the caller's, as @b allows.  Once @b->stop
 * is set it fails with -ECANCELED after the page in flight.
 */
int s3_list_wide(const struct s3_target *t, bool versions, const char *prefix,
		 struct s3_wide_budget *b,
		 int (*fn)(void *arg, const struct s3_object *o),
		 int (*on_prefix)(void *arg, const char *prefix), void *arg,
		 char *err, size_t errlen);

#define S3_SPLIT_KEY	1025	/* a key and its NUL */

/*
 * Keys that cut the keys after @after, up to and with @upto (NULL: no end),
 * all under the @plen bytes of @after that are the directory's prefix,
 * into ranges (each key the end of one, taken with it): at most @max into
 * @out, ascending, each after @after and not after @upto.  Names are
 * thought to vary at byte @vary, with the bytes @chars (ascending,
 * NUL-terminated): the cuts are at the deepest position above it that
 * has room after @after's byte.  Returns how many.
 */
size_t s3_split_points(const char *after, const char *upto, size_t plen, size_t vary,
		       const char *chars, char (*out)[S3_SPLIT_KEY], size_t max);

/*
 * Does the bucket keep versions (versioning Enabled or Suspended)?  *@on;
 * a gateway that does not let these keys ask (403) or has no versioning
 * says no.  0, or -errno with a message in @err.
 */
int s3_versioning(const struct s3_target *t, bool *on, char *err, size_t errlen);

#endif
