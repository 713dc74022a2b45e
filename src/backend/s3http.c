/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3http: S3 requests through libcurl (s3.h).
 *
 * Signing is libcurl's (CURLOPT_AWS_SIGV4), not ours.  Two things it
 * leaves to the caller with the curl of Debian 12 (7.88): S3 wants an
 * x-amz-content-sha256 header (here the hash of the empty body, every
 * request being a GET), and curl signs the query string as given, so it
 * must already be canonical (parameters sorted, values encoded as
 * s3_encode() does).  Keys are encoded the same way, '/' kept.
 *
 * Chunk reads run on one thread per client, in a curl multi handle: many
 * ranged GETs in flight over a pool of kept-alive connections (at most
 * s3_connections of them; the multi queues the rest).  A try that fails
 * for a reason worth trying again (no connection, a reset, a timeout, 5xx,
 * 429 or 503 SlowDown) is tried again after an exponential backoff with
 * jitter (50 ms doubling, at most 2 s), while the request's deadline
 * allows; then, and for any other failure (403, 404, 412: the object
 * replaced since it was listed), the read fails with EIO, the reason
 * logged.  Each try's own curl timeout is what is left of the deadline,
 * so a dead endpoint gives EIO within it.
 */
#include "s3.h"

#ifdef CONFIG_HAVE_S3

#include "log.h"
#include "util.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3_BACKOFF_MS		50
#define S3_BACKOFF_MAX_MS	2000

struct s3_client {
	const struct s3_target *t;
	CURLM *multi;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	struct s3_get *qhead, *qtail;	/* queued by s3_client_get(); under lock */
	bool stopping;			/* under lock */
	struct s3_get *waiting;		/* backing off before a try; the thread's */
	struct s3_get *active;		/* in the multi; the thread's */
};

static struct log_ratelimit rl_get = LOG_RATELIMIT_INIT(10000, 10);
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

/*
 * s3_fetch()'s handle, one a thread, kept between requests (curl_easy_reset
 * keeps a handle's connections): a walk's threads list directory after
 * directory each on a connection of its own, not on a new TCP (and TLS)
 * connection a request.  Freed when its thread ends.
 */
static pthread_key_t fetch_key;
static bool fetch_key_ok;

static void fetch_handle_free(void *e)
{
	curl_easy_cleanup(e);
}

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
	fetch_key_ok = !curl_init_rc && !pthread_key_create(&fetch_key, fetch_handle_free);
}

/* This thread's kept handle, reset; or, where none can be kept, a new one (*@kept false). */
static CURL *fetch_handle(bool *kept)
{
	CURL *e = fetch_key_ok ? pthread_getspecific(fetch_key) : NULL;

	*kept = e != NULL;
	if (e) {
		curl_easy_reset(e);
		return e;
	}
	e = curl_easy_init();
	*kept = e && fetch_key_ok && !pthread_setspecific(fetch_key, e);
	return e;
}

/* ---- requests ---- */

int s3_encode(const char *s, bool keep_slash, char *out, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		bool keep = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' ||
			    *p == '~' || (keep_slash && *p == '/');

		if (o + 4 > n)
			return -ENAMETOOLONG;
		if (keep) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
	return 0;
}

/* The URL of @key (NULL: the bucket) with @query (canonical, or NULL). */
static int s3_url(const struct s3_target *t, const char *key, const char *query, char *out,
		  size_t n)
{
	char ekey[3 * 1024 + 16];
	int r;

	if (key && s3_encode(key, true, ekey, sizeof(ekey)))
		return -ENAMETOOLONG;
	if (t->path_style)
		r = snprintf(out, n, "%s/%s%s%s%s%s", t->endpoint, t->bucket, key ? "/" : "",
			     key ? ekey : "", query ? "?" : "", query ? query : "");
	else
		r = snprintf(out, n, "https://%s.%s/%s%s%s", t->bucket,
			     t->endpoint + strlen("https://"), key ? ekey : "", query ? "?" : "",
			     query ? query : "");
	return r >= 0 && (size_t)r < n ? 0 : -ENAMETOOLONG;
}

/* @line appended to list @h; NULL (and @h freed) when out of memory. */
static struct curl_slist *header_add(struct curl_slist *h, const char *line)
{
	struct curl_slist *n = curl_slist_append(h, line);

	if (!n)
		curl_slist_free_all(h);
	return n;
}

/* A signed GET of @url, ending at @deadline_ms, on @e (reset). */
static int setup_get(const struct s3_target *t, CURL *e, const char *url, const char *etag,
		     uint64_t deadline_ms, struct curl_slist **hdrs)
{
	char sig[160], line[1200];
	uint64_t now = now_ms(), left = deadline_ms > now ? deadline_ms - now : 1;
	/*
	 * A try gets half of what is left (at least 2 s), so that a request
	 * stuck on a dead connection is tried again on another.
	 */
	uint64_t try_ms = MIN(left, MAX(left / 2, 2000));
	struct curl_slist *h = NULL;

	snprintf(sig, sizeof(sig), "aws:amz:%s:s3", t->region);
	h = header_add(h, "x-amz-content-sha256: " S3_EMPTY_SHA256);
	if (h && t->session_token) {
		snprintf(line, sizeof(line), "x-amz-security-token: %s", t->session_token);
		h = header_add(h, line);
		explicit_bzero(line, sizeof(line));
	}
	if (h && etag) {
		snprintf(line, sizeof(line), "If-Match: %s", etag);
		h = header_add(h, line);
	}
	if (!h)
		return -ENOMEM;
	*hdrs = h;
	if (curl_easy_setopt(e, CURLOPT_URL, url) ||
	    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) ||
	    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") ||
	    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) ||
	    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h) ||
	    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sig) ||
	    curl_easy_setopt(e, CURLOPT_USERNAME, t->access_key) ||
	    curl_easy_setopt(e, CURLOPT_PASSWORD, t->secret_key) ||
	    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)MIN(try_ms, (uint64_t)LONG_MAX)) ||
	    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)MIN(try_ms, 10000)) ||
	    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L) ||
	    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024))
		return -EINVAL;
	return 0;
}

/* Worth another try: no answer, or an answer that says "later". */
static bool retryable(CURLcode rc, long status, const char *body)
{
	if (rc == CURLE_WRITE_ERROR || rc == CURLE_OUT_OF_MEMORY)
		return false;
	if (rc != CURLE_OK)
		return true;
	return status >= 500 || status == 429 ||
	       (status == 400 && body && strstr(body, "<Code>RequestTimeout</Code>"));
}

static void sleep_for_ms(uint64_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static uint64_t backoff_ms(unsigned tries)
{
	uint64_t d = (uint64_t)S3_BACKOFF_MS << MIN(tries, 10u);

	d = MIN(d, (uint64_t)S3_BACKOFF_MAX_MS);
	return d / 2 + (uint64_t)random() % (d / 2 + 1);
}

/* The text between <@tag> and </@tag> in @body into @buf (empty: none). */
static void xml_field(const char *body, const char *tag, char *buf, size_t len)
{
	char open[40], close[40];
	const char *a, *b;

	buf[0] = '\0';
	if (!body)
		return;
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = strstr(body, open);
	if (!a)
		return;
	a += strlen(open);
	b = strstr(a, close);
	if (b)
		snprintf(buf, len, "%.*s", (int)MIN((size_t)(b - a), len - 1), a);
}

void s3_error_text(long status, const char *body, char *buf, size_t len)
{
	char code[64], msg[160];

	xml_field(body, "Code", code, sizeof(code));
	xml_field(body, "Message", msg, sizeof(msg));
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = ' ';
	if (code[0])
		snprintf(buf, len, "HTTP %ld %s%s%s", status, code, msg[0] ? ": " : "", msg);
	else
		snprintf(buf, len, "HTTP %ld", status);
}

/* ---- one request on the caller's thread ---- */

struct body {
	char *p;
	size_t len, cap, max;
};

static size_t body_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct body *b = arg;
	size_t n = size * nmemb;

	if (b->len + n + 1 > b->max)
		return 0;
	if (b->len + n + 1 > b->cap) {
		size_t cap = MAX(b->cap * 2, b->len + n + 1);
		char *p = realloc(b->p, MIN(cap, b->max));

		if (!p)
			return 0;
		b->p = p;
		b->cap = MIN(cap, b->max);
	}
	memcpy(b->p + b->len, ptr, n);
	b->len += n;
	b->p[b->len] = '\0';
	return n;
}

int s3_fetch(const struct s3_target *t, const char *key, const char *query, char **body,
	     size_t *len, size_t max, long *status, char *err, size_t errlen)
{
	uint64_t deadline = now_ms() + t->timeout_ms;
	char url[8192];
	unsigned tries = 0;
	int ret;

	pthread_once(&curl_once, curl_init);
	if (curl_init_rc) {
		snprintf(err, errlen, "libcurl: %s", curl_easy_strerror(curl_init_rc));
		return -EIO;
	}
	ret = s3_url(t, key, query, url, sizeof(url));
	if (ret) {
		snprintf(err, errlen, "s3://%s/%s: key too long", t->bucket, key ? key : "");
		return ret;
	}
	for (;;) {
		struct body b = { .max = max };
		struct curl_slist *h = NULL;
		char cerr[CURL_ERROR_SIZE] = "";
		bool kept;
		CURL *e = fetch_handle(&kept);
		CURLcode rc;
		uint64_t wait;

		if (!e)
			return -ENOMEM;
		ret = setup_get(t, e, url, NULL, deadline, &h);
		if (!ret && (curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_write) ||
			     curl_easy_setopt(e, CURLOPT_WRITEDATA, &b) ||
			     curl_easy_setopt(e, CURLOPT_ERRORBUFFER, cerr)))
			ret = -EINVAL;
		if (ret) {
			curl_slist_free_all(h);
			if (!kept)
				curl_easy_cleanup(e);
			snprintf(err, errlen, "libcurl: cannot set a request up");
			return ret;
		}
		rc = curl_easy_perform(e);
		*status = 0;
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
		/* no pointer into this frame may outlive the request */
		curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
		curl_slist_free_all(h);
		if (!kept)
			curl_easy_cleanup(e);
		wait = backoff_ms(tries++);
		if (retryable(rc, *status, b.p) && now_ms() + wait < deadline) {
			free(b.p);
			sleep_for_ms(wait);
			continue;
		}
		if (rc != CURLE_OK) {
			if (rc == CURLE_WRITE_ERROR)
				snprintf(err, errlen, "%s: the answer is larger than %zu bytes", url, max);
			else
				snprintf(err, errlen, "s3://%s: %s: %s (%u tries in %" PRIu64 " ms)",
					 t->bucket, t->endpoint, cerr[0] ? cerr : curl_easy_strerror(rc),
					 tries, t->timeout_ms);
			free(b.p);
			return rc == CURLE_WRITE_ERROR ? -EFBIG : -EHOSTUNREACH;
		}
		*body = b.p ? b.p : strdup("");
		*len = b.len;
		return *body ? 0 : -ENOMEM;
	}
}

/* ---- the client: chunk reads in flight on one thread ---- */

static size_t get_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct s3_get *g = arg;
	size_t n = size * nmemb;

	if (!g->status)
		curl_easy_getinfo(g->easy, CURLINFO_RESPONSE_CODE, &g->status);
	if (g->status == 200 || g->status == 206) {
		if (g->got + n > g->len)
			return 0;	/* more than asked: CURLE_WRITE_ERROR, EIO */
		memcpy((char *)g->buf + g->got, ptr, n);
		g->got += n;
		return n;
	}
	if (g->errlen + 1 < sizeof(g->errbody)) {
		size_t c = MIN(n, sizeof(g->errbody) - 1 - g->errlen);

		memcpy(g->errbody + g->errlen, ptr, c);
		g->errlen += c;
		g->errbody[g->errlen] = '\0';
	}
	return n;
}

static void get_release(struct s3_get *g)
{
	curl_slist_free_all(g->headers);
	g->headers = NULL;
	if (g->easy)
		curl_easy_cleanup(g->easy);
	g->easy = NULL;
}

/* Begin a try of @g in the multi: 0, or -errno (g->res not yet set). */
static int try_start(struct s3_client *c, struct s3_get *g)
{
	char url[8192], range[64], query[1100];
	CURL *e;
	int ret;

	g->got = 0;
	g->status = 0;
	g->errlen = 0;
	g->errbody[0] = '\0';
	if (g->version) {
		memcpy(query, "versionId=", 10);
		if (s3_encode(g->version, false, query + 10, sizeof(query) - 10))
			return -ENAMETOOLONG;
	}
	ret = s3_url(c->t, g->key, g->version ? query : NULL, url, sizeof(url));
	if (ret)
		return ret;
	e = g->easy = curl_easy_init();
	if (!e)
		return -ENOMEM;
	snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, g->off, g->off + g->len - 1);
	ret = setup_get(c->t, e, url, g->etag, g->deadline_ms, (struct curl_slist **)&g->headers);
	if (!ret && (curl_easy_setopt(e, CURLOPT_RANGE, range) ||
		     curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, get_write) ||
		     curl_easy_setopt(e, CURLOPT_WRITEDATA, g) ||
		     curl_easy_setopt(e, CURLOPT_PRIVATE, g)))
		ret = -EINVAL;
	if (!ret && curl_multi_add_handle(c->multi, e) != CURLM_OK)
		ret = -ENOMEM;
	if (ret) {
		get_release(g);
		return ret;
	}
	g->tries++;
	g->next = c->active;
	c->active = g;
	return 0;
}

static void list_remove(struct s3_get **head, struct s3_get *g)
{
	for (struct s3_get **p = head; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	g->next = NULL;
}

static void get_end(struct s3_get *g, int res)
{
	get_release(g);
	g->res = res;
	g->done(g);
}

/* A try of @g ended with @rc: done, failed, or another try scheduled. */
static void try_done(struct s3_client *c, struct s3_get *g, CURLcode rc)
{
	char why[256];
	uint64_t now = now_ms(), wait;
	long status = 0;

	curl_easy_getinfo(g->easy, CURLINFO_RESPONSE_CODE, &status);
	curl_multi_remove_handle(c->multi, g->easy);
	list_remove(&c->active, g);
	if (rc == CURLE_OK && (status == 206 || status == 200) && g->got == g->len) {
		get_end(g, (int)g->len);
		return;
	}
	wait = backoff_ms(g->tries);
	if (retryable(rc, status, g->errbody) && now + wait < g->deadline_ms) {
		get_release(g);
		g->retry_at_ms = now + wait;
		g->next = c->waiting;
		c->waiting = g;
		return;
	}
	if (rc == CURLE_OK && (status == 206 || status == 200))
		snprintf(why, sizeof(why), "%zu of %zu bytes (the object shorter than listed?)",
			 g->got, g->len);
	else if (rc == CURLE_WRITE_ERROR)
		snprintf(why, sizeof(why), "more bytes than asked for");
	else if (rc != CURLE_OK)
		snprintf(why, sizeof(why), "%s, %u tries in %" PRIu64 " ms", curl_easy_strerror(rc),
			 g->tries, c->t->timeout_ms);
	else if (status == 412)
		snprintf(why, sizeof(why), "replaced since it was listed (its ETag is no longer %s): remount to see the new version",
			 g->etag ? g->etag : "");
	else if (status == 404)
		snprintf(why, sizeof(why), "deleted since it was listed%s",
			 g->version ? " (this version too)" : "");
	else
		s3_error_text(status, g->errbody, why, sizeof(why));
	log_limited(&rl_get, LOG_ERR, "s3://%s/%s: bytes %" PRIu64 "+%zu: %s", c->t->bucket, g->key,
		    g->off, g->len, why);
	get_end(g, -EIO);
}

static void *client_thread(void *arg)
{
	struct s3_client *c = arg;

	for (;;) {
		struct s3_get *g, *next, *q;
		uint64_t now, wake;
		bool stop;
		CURLMsg *msg;
		int running, left, ms;

		pthread_mutex_lock(&c->lock);
		q = c->qhead;
		c->qhead = c->qtail = NULL;
		stop = c->stopping;
		pthread_mutex_unlock(&c->lock);
		if (stop) {
			/* queued, backing off, in flight: all end now */
			for (g = q; g; g = next) {
				next = g->next;
				get_end(g, -ESHUTDOWN);
			}
			for (g = c->waiting; g; g = next) {
				next = g->next;
				get_end(g, -ESHUTDOWN);
			}
			for (g = c->active; g; g = next) {
				next = g->next;
				curl_multi_remove_handle(c->multi, g->easy);
				get_end(g, -ESHUTDOWN);
			}
			break;
		}
		for (g = q; g; g = next) {
			int r;

			next = g->next;
			r = try_start(c, g);
			if (r)
				get_end(g, r);
		}
		now = now_ms();
		wake = now + 1000;
		for (g = c->waiting; g; g = next) {
			next = g->next;
			if (g->retry_at_ms > now) {
				wake = MIN(wake, g->retry_at_ms);
				continue;
			}
			list_remove(&c->waiting, g);
			if (try_start(c, g))
				get_end(g, -EIO);
		}
		curl_multi_perform(c->multi, &running);
		while ((msg = curl_multi_info_read(c->multi, &left))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&g);
			try_done(c, g, msg->data.result);
		}
		for (g = c->waiting; g; g = g->next)	/* those just put back too */
			wake = MIN(wake, g->retry_at_ms);
		now = now_ms();
		ms = wake > now ? (int)MIN(wake - now, 1000) : 0;
		if (c->waiting && !ms)
			continue;
		curl_multi_poll(c->multi, NULL, 0, ms, NULL);
	}
	return NULL;
}

int s3_client_start(const struct s3_target *t, struct s3_client **out, char *err,
		    size_t errlen)
{
	struct s3_client *c;
	int ret;

	pthread_once(&curl_once, curl_init);
	if (curl_init_rc) {
		snprintf(err, errlen, "libcurl: %s", curl_easy_strerror(curl_init_rc));
		return -EIO;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->t = t;
	pthread_mutex_init(&c->lock, NULL);
	c->multi = curl_multi_init();
	if (!c->multi ||
	    curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)t->connections) ||
	    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)t->connections) ||
	    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)t->connections)) {
		snprintf(err, errlen, "libcurl: cannot make a multi handle");
		s3_client_stop(c);
		return -ENOMEM;
	}
	ret = -pthread_create(&c->thread, NULL, client_thread, c);
	if (ret) {
		snprintf(err, errlen, "cannot start the S3 client's thread: %s", strerror(-ret));
		s3_client_stop(c);
		return ret;
	}
	c->started = true;
	*out = c;
	return 0;
}

void s3_client_stop(struct s3_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_mutex_unlock(&c->lock);
	if (c->started) {
		curl_multi_wakeup(c->multi);
		pthread_join(c->thread, NULL);
	}
	if (c->multi)
		curl_multi_cleanup(c->multi);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int s3_client_get(struct s3_client *c, struct s3_get *g)
{
	g->next = NULL;
	g->easy = g->headers = NULL;
	g->tries = 0;
	g->deadline_ms = now_ms() + c->t->timeout_ms;
	pthread_mutex_lock(&c->lock);
	if (c->stopping) {
		pthread_mutex_unlock(&c->lock);
		return -ESHUTDOWN;
	}
	if (c->qtail)
		c->qtail->next = g;
	else
		c->qhead = g;
	c->qtail = g;
	pthread_mutex_unlock(&c->lock);
	curl_multi_wakeup(c->multi);
	return 0;
}

#endif /* CONFIG_HAVE_S3 */
