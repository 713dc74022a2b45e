/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3cred: where an s3:// source's endpoint, region and credentials come
 * from (s3.h).  The lookup order is the AWS CLI's, so that a node set up
 * for `aws s3` reads the same bucket the same way:
 *
 *   endpoint     URI endpoint=, s3_endpoint, $AWS_ENDPOINT_URL_S3,
 *                $AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS
 *                (https://s3.REGION.amazonaws.com, virtual-hosted names)
 *   region       URI region=, s3_region, $AWS_REGION, $AWS_DEFAULT_REGION,
 *                the profile's region, else us-east-1
 *   profile      URI profile=, s3_profile, $AWS_PROFILE, else "default"
 *   credentials  $AWS_ACCESS_KEY_ID + $AWS_SECRET_ACCESS_KEY (+ token) when
 *                no profile was named; else the profile in the credentials
 *                file (s3_credentials_file, $AWS_SHARED_CREDENTIALS_FILE,
 *                ~/.aws/credentials), then in the config file
 *                ($AWS_CONFIG_FILE, ~/.aws/config, section "profile NAME")
 *
 * A file that holds keys must be the daemon's own (root's) and closed to
 * group and others, as peer_key_file must: a key another local user could
 * read or plant is refused with the reason, never used.
 */
#include "s3.h"

#ifdef CONFIG_HAVE_S3

#include "config.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S3_DEFAULT_REGION "us-east-1"

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] ? v : NULL;
}

static const char *nonempty(const char *s)
{
	return s && s[0] ? s : NULL;
}

/* ~/.aws/NAME of the daemon's user into @buf ($HOME, else the passwd entry). */
static void aws_home_file(const char *name, char *buf, size_t len)
{
	const char *home = env("HOME");
	struct passwd *pw;

	if (!home && (pw = getpwuid(geteuid())))
		home = pw->pw_dir;
	snprintf(buf, len, "%s/.aws/%s", home ? home : "/root", name);
}

/* What one profile of a credentials or config file says. */
struct profile {
	const char *want;	/* the section's name */
	char *access_key, *secret_key, *session_token, *region, *endpoint;
	bool found;
};

static int set_str(char **dst, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return 0;
	free(*dst);
	*dst = s;
	return 1;
}

static int profile_line(void *user, const char *section, const char *name, const char *value)
{
	struct profile *p = user;

	if (strcmp(section, p->want))
		return 1;
	p->found = true;
	if (!strcmp(name, "aws_access_key_id"))
		return set_str(&p->access_key, value);
	if (!strcmp(name, "aws_secret_access_key"))
		return set_str(&p->secret_key, value);
	if (!strcmp(name, "aws_session_token"))
		return set_str(&p->session_token, value);
	if (!strcmp(name, "region"))
		return set_str(&p->region, value);
	if (!strcmp(name, "endpoint_url"))
		return set_str(&p->endpoint, value);
	return 1;
}

static void profile_release(struct profile *p)
{
	if (p->secret_key)
		explicit_bzero(p->secret_key, strlen(p->secret_key));
	free(p->access_key);
	free(p->secret_key);
	free(p->session_token);
	free(p->region);
	free(p->endpoint);
	memset(p, 0, sizeof(*p));
}

/*
 * Read section @section of the INI file @path into @p.  A missing file is
 * 0 with nothing found (unless @must); a file holding keys must be
 * root's and mode 0600 or tighter.
 */
static int profile_read(const char *path, const char *section, bool must, struct profile *p,
			char *err, size_t errlen)
{
	struct stat st;
	FILE *f;
	int fd, line;

	p->want = section;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		if (e == ENOENT && !must)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(err, errlen, "%s: not a regular file", path);
		return -EPERM;
	}
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	line = ini_parse_file(f, profile_line, p);
	fclose(f);
	if (line) {
		snprintf(err, errlen, "%s:%d: cannot parse this line", path, line > 0 ? line : 0);
		profile_release(p);
		return -EINVAL;
	}
	if ((p->access_key || p->secret_key || p->session_token) &&
	    ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 077))) {
		snprintf(err, errlen,
			 "%s holds S3 keys, so it must be owned by root and not accessible to group or others (it is uid %u, mode %04o): chmod 600 it",
			 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		profile_release(p);
		return -EPERM;
	}
	p->want = NULL;
	return 0;
}

/* An endpoint URL as given: http(s)://host[:port], a trailing '/' dropped. */
static int endpoint_check(const char *uri, const char *e, char **out, char *err, size_t errlen)
{
	size_t n = strlen(e);

	if ((strncmp(e, "http://", 7) && strncmp(e, "https://", 8)) || strpbrk(e, "?# \t") ||
	    n > 512) {
		snprintf(err, errlen, "%s: the endpoint '%s' is not an http:// or https:// URL", uri, e);
		return -EINVAL;
	}
	while (n && e[n - 1] == '/')
		n--;
	*out = strndup(e, n);
	return *out ? 0 : -ENOMEM;
}

static bool bucket_ok(const char *b)
{
	size_t n = strlen(b);

	if (n < 1 || n > 255)
		return false;
	for (const char *p = b; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
			return false;
	return true;
}

/* PREFIX as a key prefix: "" or "a/b/"; '.', '..' and empty parts refused. */
static int prefix_norm(const char *uri, const char *path, char **out, char *err, size_t errlen)
{
	size_t n = strlen(path);
	char *s;

	while (n && path[n - 1] == '/')
		n--;
	s = malloc(n + 2);
	if (!s)
		return -ENOMEM;
	memcpy(s, path, n);
	s[n] = '\0';
	for (char *p = s; n && p;) {
		char *slash = strchr(p, '/');
		size_t l = slash ? (size_t)(slash - p) : strlen(p);

		if (l == 0 || (l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.')) {
			snprintf(err, errlen, "%s: the prefix may not hold '.', '..' or '//'", uri);
			free(s);
			return -EINVAL;
		}
		p = slash ? slash + 1 : NULL;
	}
	if (n) {
		s[n] = '/';
		s[n + 1] = '\0';
	}
	*out = s;
	return 0;
}

int s3_target_resolve(struct s3_target *t, const char *uri, const struct sfs_config *cfg,
		      char *err, size_t errlen)
{
	const char *u_endpoint = NULL, *u_region = NULL, *u_profile = NULL;
	const char *profile, *ep, *region, *q;
	char *copy, *opts = NULL, *path, *save, cpath[4096], fpath[4096], section[300];
	struct profile pc = { 0 }, pf = { 0 };
	uint64_t timeout_ms = cfg->rados_timeout_ms;
	bool named;
	int ret;

	memset(t, 0, sizeof(*t));
	copy = strdup(uri + strlen("s3://"));
	if (!copy)
		return -ENOMEM;
	if ((q = strchr(copy, '?'))) {
		opts = (char *)q;
		*opts++ = '\0';
	}
	path = strchr(copy, '/');
	if (path)
		*path++ = '\0';
	if (!bucket_ok(copy)) {
		snprintf(err, errlen, "%s: expected s3://BUCKET[/PREFIX] with a bucket name of letters, digits, '.', '-' and '_'",
			 uri);
		ret = -EINVAL;
		goto out;
	}
	for (char *o = opts ? strtok_r(opts, "&", &save) : NULL; o; o = strtok_r(NULL, "&", &save)) {
		char *v = strchr(o, '=');

		if (v)
			*v++ = '\0';
		if (v && v[0] && !strcmp(o, "endpoint"))
			u_endpoint = v;
		else if (v && v[0] && !strcmp(o, "region"))
			u_region = v;
		else if (v && v[0] && !strcmp(o, "profile"))
			u_profile = v;
		else if (v && !strcmp(o, "timeout")) {
			if (parse_duration_ms(v, &timeout_ms) || timeout_ms < 100) {
				snprintf(err, errlen, "%s: bad timeout '%s'", uri, v);
				ret = -EINVAL;
				goto out;
			}
		} else {
			snprintf(err, errlen, "%s: unknown or bad option '%s' (expected endpoint=, region=, profile=, timeout=)",
				 uri, o);
			ret = -EINVAL;
			goto out;
		}
	}
	t->bucket = strdup(copy);
	if (!t->bucket) {
		ret = -ENOMEM;
		goto out;
	}
	ret = prefix_norm(uri, path ? path : "", &t->prefix, err, errlen);
	if (ret)
		goto out;

	named = u_profile || nonempty(cfg->s3_profile);
	profile = u_profile ? u_profile : nonempty(cfg->s3_profile) ? cfg->s3_profile
		: env("AWS_PROFILE") ? env("AWS_PROFILE") : "default";
	if (nonempty(cfg->s3_credentials_file))
		snprintf(cpath, sizeof(cpath), "%s", cfg->s3_credentials_file);
	else if (env("AWS_SHARED_CREDENTIALS_FILE"))
		snprintf(cpath, sizeof(cpath), "%s", env("AWS_SHARED_CREDENTIALS_FILE"));
	else
		aws_home_file("credentials", cpath, sizeof(cpath));
	if (env("AWS_CONFIG_FILE"))
		snprintf(fpath, sizeof(fpath), "%s", env("AWS_CONFIG_FILE"));
	else
		aws_home_file("config", fpath, sizeof(fpath));

	ret = profile_read(cpath, profile, nonempty(cfg->s3_credentials_file) != NULL, &pc, err,
			   errlen);
	if (ret)
		goto out;
	snprintf(section, sizeof(section), "%s%s", strcmp(profile, "default") ? "profile " : "",
		 profile);
	ret = profile_read(fpath, section, false, &pf, err, errlen);
	if (ret)
		goto out;

	/* credentials */
	if (!named && env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY")) {
		t->access_key = strdup(env("AWS_ACCESS_KEY_ID"));
		t->secret_key = strdup(env("AWS_SECRET_ACCESS_KEY"));
		if (env("AWS_SESSION_TOKEN"))
			t->session_token = strdup(env("AWS_SESSION_TOKEN"));
		t->cred_source = strdup("the AWS_ACCESS_KEY_ID environment");
	} else {
		struct profile *p = pc.access_key && pc.secret_key ? &pc
			: pf.access_key && pf.secret_key ? &pf : NULL;

		if (!p) {
			snprintf(err, errlen,
				 "%s: no S3 credentials: profile '%s' has no aws_access_key_id and aws_secret_access_key in %s or %s%s",
				 uri, profile, cpath, fpath,
				 named ? "" : ", and AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set");
			ret = -EACCES;
			goto out;
		}
		t->access_key = p->access_key;
		t->secret_key = p->secret_key;
		t->session_token = p->session_token;
		p->access_key = p->secret_key = p->session_token = NULL;
		if (asprintf(&t->cred_source, "profile '%s' of %s", profile,
			     p == &pc ? cpath : fpath) < 0)
			t->cred_source = NULL;
	}
	if (!t->access_key || !t->secret_key || !t->cred_source) {
		ret = -ENOMEM;
		goto out;
	}

	/* region and endpoint */
	region = u_region ? u_region : nonempty(cfg->s3_region) ? cfg->s3_region
		: env("AWS_REGION") ? env("AWS_REGION") : env("AWS_DEFAULT_REGION")
		? env("AWS_DEFAULT_REGION") : pf.region ? pf.region : S3_DEFAULT_REGION;
	for (const char *p = region; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_')) {
			snprintf(err, errlen, "%s: bad region '%s'", uri, region);
			ret = -EINVAL;
			goto out;
		}
	t->region = strdup(region);
	ep = u_endpoint ? u_endpoint : nonempty(cfg->s3_endpoint) ? cfg->s3_endpoint
		: env("AWS_ENDPOINT_URL_S3") ? env("AWS_ENDPOINT_URL_S3")
		: env("AWS_ENDPOINT_URL") ? env("AWS_ENDPOINT_URL") : pf.endpoint;
	if (ep) {
		ret = endpoint_check(uri, ep, &t->endpoint, err, errlen);
		t->path_style = true;
	} else {
		/* AWS itself: the bucket in the host name */
		ret = asprintf(&t->endpoint, "https://s3.%s.amazonaws.com", region) < 0 ? -ENOMEM : 0;
		if (ret)
			t->endpoint = NULL;
	}
	if (!ret && !t->region)
		ret = -ENOMEM;
	if (ret)
		goto out;
	t->timeout_ms = timeout_ms;
	t->connections = cfg->s3_connections ? cfg->s3_connections : 32;
out:
	profile_release(&pc);
	profile_release(&pf);
	free(copy);
	if (ret)
		s3_target_release(t);
	return ret;
}

void s3_target_release(struct s3_target *t)
{
	if (t->secret_key)
		explicit_bzero(t->secret_key, strlen(t->secret_key));
	if (t->session_token)
		explicit_bzero(t->session_token, strlen(t->session_token));
	free(t->endpoint);
	free(t->region);
	free(t->bucket);
	free(t->prefix);
	free(t->access_key);
	free(t->secret_key);
	free(t->session_token);
	free(t->cred_source);
	memset(t, 0, sizeof(*t));
}

#endif /* CONFIG_HAVE_S3 */
