/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy: [quota] and [dataset NAME] rules read through config_load():
 * quota precedence (user rule, then the largest group rule, then the
 * default), dataset allow rules and eviction policy, errors with file:line,
 * and a reload (SIGHUP) that builds a new policy while the old one stays
 * intact, or is refused and leaves the old one in force.
 *
 * Names are the stock Debian accounts, present on every test machine:
 * root 0/0, daemon 1/1, bin 2/2, sys 3/3, sync 4 (primary group nogroup),
 * lp 7/7, nobody 65534/65534 (nogroup).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "cred.h"
#include "policy.h"
#include "util.h"

struct tctx {
	char dir[PATH_MAX / 2];
	char path[PATH_MAX];
};

static int setup(void **state)
{
	const char *base = getenv("TMPDIR");
	struct tctx *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	snprintf(t->dir, sizeof(t->dir), "%s/test_policy.XXXXXX",
		 base && *base ? base : "/tmp");
	if (!mkdtemp(t->dir))
		return -1;
	snprintf(t->path, sizeof(t->path), "%s/stagefs.conf", t->dir);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tctx *t = *state;

	unlink(t->path);
	rmdir(t->dir);
	free(t);
	return 0;
}

static void need_accounts(void)
{
	static const char *const users[] = { "daemon", "bin", "sys", "sync", "lp", "nobody" };

	for (size_t i = 0; i < ARRAY_SIZE(users); i++)
		if (!getpwnam(users[i]))
			skip();
	if (!getgrnam("nogroup"))
		skip();
}

/*
 * Write @text to the test's config file and load it into a new policy.
 * Returns config_load()'s result; the policy is in *@out either way (the
 * caller destroys it), the message in @err.
 */
static int load(struct tctx *t, const char *text, struct policy **out,
		char *err, size_t errlen)
{
	struct sfs_config cfg;
	FILE *f = fopen(t->path, "w");
	int r;

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	*out = policy_create();
	assert_non_null(*out);
	config_init(&cfg);
	policy_register(*out);
	r = config_load(&cfg, t->path, err, errlen);
	config_release(&cfg);
	return r;
}

static struct policy *load_ok(struct tctx *t, const char *text)
{
	struct policy *p;
	char err[512] = "";

	if (load(t, text, &p, err, sizeof(err)))
		fail_msg("config_load: %s", err);
	return p;
}

static const char quota_ini[] =
	"[quota]\n"
	"default = 100G\n"
	"user:daemon = 2T\n"
	"uid:2 = none\n"
	"group:nogroup = 5G\n"
	"gid:3 = 1G\n"
	"gid:3 = 2G\n"			/* a rule given twice: the later wins */
	"uid:65534 = 1M\n";

/* A user: rule wins, then the largest group: rule, then the default. */
static void test_quota_precedence(void **state)
{
	struct tctx *t = *state;
	struct policy *p;

	need_accounts();
	p = load_ok(t, quota_ini);
	assert_int_equal(p->quota_default, 100 * GiB);
	assert_int_equal(policy_quota(p, 1), 2048 * GiB);		/* user:daemon */
	assert_true(policy_quota(p, 2) == POLICY_UNLIMITED);	/* uid:2 = none */
	assert_int_equal(policy_quota(p, 3), 2 * GiB);		/* sys's group, later rule */
	assert_int_equal(policy_quota(p, 4), 5 * GiB);		/* sync: primary group nogroup */
	assert_int_equal(policy_quota(p, 65534), 1 * MiB);	/* user rule over its group's */
	assert_int_equal(policy_quota(p, 7), 100 * GiB);	/* lp: no rule, the default */
	assert_int_equal(p->nquota, 5);
	policy_destroy(p);

	/* no [quota] at all: everyone unlimited; a NULL policy too */
	p = load_ok(t, "[stagefs]\nthreads = 4\n");
	assert_true(policy_quota(p, 1) == POLICY_UNLIMITED);
	assert_true(policy_quota(NULL, 1) == POLICY_UNLIMITED);
	policy_destroy(p);
}

/* Of several group rules that apply, the largest counts. */
static void test_quota_largest_group(void **state)
{
	struct tctx *t = *state;
	struct passwd *pw;
	gid_t groups[64];
	int n = ARRAY_SIZE(groups);
	char ini[512];
	struct policy *p;

	/* root's groups: at least its primary one, 0 */
	pw = getpwuid(0);
	assert_non_null(pw);
	assert_true(getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) >= 0);
	assert_true(n >= 1);
	snprintf(ini, sizeof(ini), "[quota]\ndefault = 1K\ngid:%u = 3G\ngid:%u = 7G\n",
		 (unsigned)groups[0], (unsigned)groups[n - 1]);
	p = load_ok(t, ini);
	assert_int_equal(policy_quota(p, 0), 7 * GiB);
	policy_destroy(p);
	snprintf(ini, sizeof(ini), "[quota]\ndefault = 1K\ngid:%u = 7G\ngid:%u = 3G\n",
		 (unsigned)groups[0], (unsigned)groups[n - 1]);
	p = load_ok(t, ini);
	assert_int_equal(policy_quota(p, 0), n == 1 ? 3 * GiB : 7 * GiB);
	policy_destroy(p);
}

static const char datasets_ini[] =
	"[dataset imagenet]\n"
	"source = rados://datasets/imagenet\n"
	"allow = user:daemon, group:nogroup\n"
	"policy = nothrash\n"
	"epoch_staging = off\n"
	"\n"
	"[dataset coco]\n"
	"source = dir:///nfs/coco\n"
	"\n"
	"[dataset mixed]\n"
	"source = /data/mixed\n"
	"allow = uid:2 *\n"
	"policy = lru\n"
	"epoch_staging = on\n"
	"\n"
	"[dataset users]\n"
	"allow = uid:2, uid:3\n";

/* policy_may_read() for a caller built from plain values (src/cred.h). */
static bool may_read(const struct policy_dataset *d, uint32_t uid, uint32_t gid,
		     const gid_t *groups, int ngroups)
{
	struct cred cr;

	cred_init(&cr, uid, gid, 0, groups, ngroups);
	return policy_may_read(d, &cr);
}

/* allow = rules: users, primary and supplementary groups, root, everyone. */
static void test_dataset_allow(void **state)
{
	struct tctx *t = *state;
	const struct policy_dataset *d;
	const gid_t nogroup[] = { 65534 };
	const gid_t other[] = { 7, 12 };
	struct policy *p;

	need_accounts();
	p = load_ok(t, datasets_ini);
	assert_int_equal(p->nds, 4);

	d = policy_dataset(p, "imagenet");
	assert_non_null(d);
	assert_string_equal(d->source, "rados://datasets/imagenet");
	assert_int_equal(d->evict, EVICT_NOTHRASH);
	assert_int_equal(d->epoch_staging, CFG_OFF);
	assert_false(d->allow_all);
	assert_int_equal(d->nallow, 2);
	assert_true(policy_needs_groups(d));
	assert_true(may_read(d, 1, 1, NULL, 0));		/* user:daemon */
	assert_false(may_read(d, 2, 2, NULL, 0));		/* bin */
	assert_false(may_read(d, 2, 2, other, 2));
	assert_true(may_read(d, 2, 2, nogroup, 1));		/* supplementary */
	assert_true(may_read(d, 4, 65534, NULL, 0));		/* primary */
	assert_true(may_read(d, 0, 0, NULL, 0));		/* root always */

	d = policy_dataset(p, "coco");
	assert_non_null(d);
	assert_true(d->allow_all);
	assert_int_equal(d->evict, EVICT_LRU);
	assert_int_equal(d->epoch_staging, -1);		/* the setting decides */
	assert_false(policy_needs_groups(d));
	assert_true(may_read(d, 2, 2, NULL, 0));

	d = policy_dataset(p, "mixed");
	assert_non_null(d);
	assert_true(d->allow_all);				/* "*" in the list */
	assert_int_equal(d->epoch_staging, CFG_ON);
	assert_true(may_read(d, 7, 7, NULL, 0));

	d = policy_dataset(p, "users");
	assert_non_null(d);
	assert_null(d->source);
	assert_false(policy_needs_groups(d));			/* uid rules only */
	assert_true(may_read(d, 3, 3, NULL, 0));
	assert_false(may_read(d, 1, 3, NULL, 0));	/* gid 3 is not uid 3 */

	/* no rules for a name: everyone */
	assert_null(policy_dataset(p, "nope"));
	assert_null(policy_dataset(NULL, "coco"));
	assert_true(may_read(NULL, 7, 7, NULL, 0));
	assert_false(policy_needs_groups(NULL));
	policy_destroy(p);
}

/*
 * namespace:NAME rules: the CSI plugin's question (policy_ns_may_read); a
 * host process never matches one (only root reads a dataset whose list
 * names namespaces alone).
 */
static void test_namespaces(void **state)
{
	struct tctx *t = *state;
	const struct policy_dataset *d;
	struct policy *p = load_ok(t,
		"[dataset vision]\nsource = /x\nallow = namespace:vision, namespace:team-2\n"
		"[dataset open]\nsource = /y\n"
		"[dataset star]\nsource = /z\nallow = namespace:vision, *\n"
		"[dataset users]\nsource = /w\nallow = uid:7\n");

	d = policy_dataset(p, "vision");
	assert_non_null(d);
	assert_int_equal(d->nallow, 2);
	assert_true(policy_ns_may_read(d, "vision"));
	assert_true(policy_ns_may_read(d, "team-2"));
	assert_false(policy_ns_may_read(d, "ml"));
	assert_false(policy_ns_may_read(d, ""));		/* not known: never */
	assert_false(policy_ns_may_read(d, "visio"));
	assert_false(policy_needs_groups(d));
	assert_false(may_read(d, 7, 7, NULL, 0));		/* a host user */
	assert_true(may_read(d, 0, 0, NULL, 0));		/* root */

	d = policy_dataset(p, "open");
	assert_true(d->allow_all);
	assert_true(policy_ns_may_read(d, "ml"));
	assert_true(policy_ns_may_read(d, ""));
	assert_true(policy_ns_may_read(policy_dataset(p, "star"), "anyone"));
	assert_false(policy_ns_may_read(policy_dataset(p, "users"), "vision"));
	assert_true(policy_ns_may_read(NULL, ""));		/* no rules at all */

	/* no [quota] namespace: rule: none has a quota, none is a tenant */
	assert_false(policy_has_ns_quotas(p));
	assert_false(policy_ns_has_quota(p, "vision"));
	assert_int_equal(policy_quota_ns(p, "vision"), POLICY_UNLIMITED);
	policy_destroy(p);

	/*
	 * [quota] namespace:NAME: the namespace's pods together, apart from
	 * the uid rules (a namespace rule never matches uid 0, say)
	 */
	p = load_ok(t, "[quota]\ndefault = 1G\nnamespace:vision = 5T\nnamespace:nlp = none\n"
		       "uid:0 = 7G\nnamespace:vision = 6T\n");
	assert_true(policy_has_ns_quotas(p));
	assert_true(policy_ns_has_quota(p, "vision"));
	assert_true(policy_ns_has_quota(p, "nlp"));
	assert_false(policy_ns_has_quota(p, "ml"));
	assert_int_equal(policy_quota_ns(p, "vision"), 6ull << 40);	/* the later line wins */
	assert_int_equal(policy_quota_ns(p, "nlp"), POLICY_UNLIMITED);
	assert_int_equal(policy_quota_ns(p, "ml"), POLICY_UNLIMITED);
	assert_int_equal(policy_quota(p, 0), 7ull << 30);
	assert_int_equal(policy_quota(p, 4242), 1ull << 30);

	assert_true(policy_ns_valid("a"));
	assert_true(policy_ns_valid("kube-system"));
	assert_false(policy_ns_valid(""));
	assert_false(policy_ns_valid("-a"));
	assert_false(policy_ns_valid("a-"));
	assert_false(policy_ns_valid("Vision"));
	assert_false(policy_ns_valid("a_b"));
	assert_false(policy_ns_valid("a/b"));
	assert_false(policy_ns_valid("0123456789012345678901234567890123456789012345678901234567890123"));
	policy_destroy(p);
}

/* Every bad rule stops the load with FILE:LINE and what is wrong. */
static void test_errors(void **state)
{
	static const struct {
		const char *ini;
		const char *want;
	} cases[] = {
		{ "[quota]\ndefault = 1G\nuser:no_such_user_x = 1G\n", ":3: unknown user 'no_such_user_x'" },
		{ "[quota]\ngroup:no_such_group_x = 1G\n", ":2: unknown group 'no_such_group_x'" },
		{ "[quota]\ndefault = lots\n", ":2: default: 'lots' is not a size" },
		{ "[quota]\nuid:x = 1G\n", ":2: 'uid:x': not a number" },
		{ "[quota]\nuser = 1G\n", ":2: expected user:NAME = SIZE" },
		{ "[quota]\nfriend:x = 1G\n", ":2: friend: 'x = 1G' is not a size" },
		{ "[quotas]\ndefault = 1G\n", ":2: unknown section [quotas]" },
		{ "[dataset a/b]\nsource = /x\n", "expected [dataset NAME] with a plain NAME" },
		{ "[dataset .hidden]\nsource = /x\n", "expected [dataset NAME] with a plain NAME" },
		{ "[datasetx]\nsource = /x\n", "unknown section [datasetx]" },
		{ "[dataset d]\nsource = /x\npolicy = fifo\n", ":3: policy: 'fifo' is not lru or nothrash" },
		{ "[dataset d]\nepoch_staging = maybe\n", ":2: epoch_staging: 'maybe' is not auto, on or off" },
		{ "[dataset d]\nowner = me\n", ":2: [dataset d]: unknown key 'owner'" },
		{ "[dataset d]\nallow = user:no_such_user_x\n", ":2: unknown user 'no_such_user_x'" },
		{ "[dataset d]\nallow = namespace:Vision\n", ":2: 'namespace:Vision': not a Kubernetes namespace name" },
		{ "[quota]\nnamespace:Vision = 5T\n", ":2: 'namespace:Vision': not a Kubernetes namespace name" },
		{ "[quota]\nnamespace:vision = lots\n", ":2: namespace:vision: 'lots' is not a size" },
		/* a second [dataset d] used to be merged into the first: here it
		 * would have widened uid:5's dataset to everyone */
		{ "[dataset d]\nsource = /x\nallow = uid:5\n\n[dataset d]\nallow = *\n",
		  ":5: [dataset d] repeats the section of line 1" },
		{ "[quota]\ndefault = 1G\n[dataset d]\nsource = /x\n[quota]\ndefault = none\n",
		  ":5: [quota] repeats the section of line 1" },
	};
	struct tctx *t = *state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct policy *p;
		char err[512] = "";

		if (!load(t, cases[i].ini, &p, err, sizeof(err)))
			fail_msg("case %zu loaded; want an error with \"%s\"", i, cases[i].want);
		if (strncmp(err, t->path, strlen(t->path)) || !strstr(err, cases[i].want))
			fail_msg("case %zu: got \"%s\"; want \"%s\" after the file name",
				 i, err, cases[i].want);
		policy_destroy(p);
	}
}

/*
 * A reload, as fuse/access.c does on SIGHUP: a new policy is built from the
 * file while the old one stays as it was (readers may hold it); a refused
 * reload leaves the old one registered and in force.
 */
static void test_reload(void **state)
{
	struct tctx *t = *state;
	struct policy *old, *np, *bad;
	const struct policy_dataset *d;
	char err[512] = "";

	need_accounts();
	old = load_ok(t, "[quota]\ndefault = 1G\nuid:1 = 2G\n"
			 "[dataset a]\nsource = /a\nallow = uid:1\n");
	np = load_ok(t, "[quota]\ndefault = 3G\n"
			"[dataset a]\nsource = /a\nallow = uid:2\npolicy = nothrash\n"
			"[dataset b]\nsource = /b\n");

	/* the old policy is untouched by the new load */
	assert_int_equal(policy_quota(old, 1), 2 * GiB);
	assert_int_equal(policy_quota(old, 7), 1 * GiB);
	assert_int_equal(old->nds, 1);
	d = policy_dataset(old, "a");
	assert_true(may_read(d, 1, 1, NULL, 0));
	assert_false(may_read(d, 2, 2, NULL, 0));
	assert_int_equal(d->evict, EVICT_LRU);

	/* the new one has the new rules only: uid:1's rule is gone */
	assert_int_equal(policy_quota(np, 1), 3 * GiB);
	assert_int_equal(np->nds, 2);
	d = policy_dataset(np, "a");
	assert_false(may_read(d, 1, 1, NULL, 0));
	assert_true(may_read(d, 2, 2, NULL, 0));
	assert_int_equal(d->evict, EVICT_NOTHRASH);
	assert_non_null(policy_dataset(np, "b"));

	/* a refused reload: the caller drops it and registers the current one again */
	assert_int_not_equal(load(t, "[quota]\ndefault = 5G\nuser:no_such_user_x = 1G\n",
				  &bad, err, sizeof(err)), 0);
	policy_destroy(bad);
	/* an emptied file is refused like a bad one, not read as "no rules" */
	assert_int_not_equal(load(t, "", &bad, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "empty"));
	policy_destroy(bad);
	assert_int_not_equal(load(t, "; [dataset a]\n; allow = uid:2\n", &bad, err,
				  sizeof(err)), 0);
	policy_destroy(bad);
	policy_register(np);
	assert_int_equal(policy_quota(np, 1), 3 * GiB);
	{
		struct sfs_config cfg;
		FILE *f = fopen(t->path, "w");

		/* the next load goes to the re-registered policy */
		assert_non_null(f);
		fputs("[quota]\nuid:7 = 4G\n", f);
		fclose(f);
		config_init(&cfg);
		assert_int_equal(config_load(&cfg, t->path, err, sizeof(err)), 0);
		config_release(&cfg);
		assert_int_equal(policy_quota(np, 7), 4 * GiB);
	}
	policy_destroy(old);
	policy_destroy(np);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_quota_precedence),
		T(test_quota_largest_group),
		T(test_dataset_allow),
		T(test_namespaces),
		T(test_errors),
		T(test_reload),
#undef T
	};

	printf("test_policy: [quota] and [dataset] rules: precedence, allow lists, errors, reload\n");
	fflush(stdout);
	log_level = LOG_CRIT;
	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
