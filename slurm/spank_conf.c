/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_conf: what the plugin is told: the administrator's plugstack.conf
 * arguments (conf) and the user's options (conf_opt), with their checks.
 *
 * The options' callbacks check each value where it is given, so sbatch,
 * salloc and srun refuse a bad one at submission; slurmstepd gets the
 * values through the same callbacks, the prolog and epilog from the job's
 * environment (conf_opts_from_env), checked again.  The effective wait,
 * failure policy and sharding are the user's choice within the
 * administrator's defaults and limits (conf_wait_s() and its siblings).
 */
#include "spank_stagefs_i.h"

#include "util.h"

#include <slurm/spank.h>

#include <stdio.h>
#include <string.h>

/* ---- the administrator's settings: plugstack.conf arguments ---- */

struct conf conf;

int conf_parse(int ac, char **av)
{
	memset(&conf, 0, sizeof(conf));
	snprintf(conf.statedir, sizeof(conf.statedir), "%s", CONF_STATEDIR);
	snprintf(conf.peer_host, sizeof(conf.peer_host), "%%n");
	conf.peer_port = CONF_PEER_PORT;
	conf.wait_s = CONF_WAIT_S;
	conf.max_wait_s = CONF_MAX_WAIT_S;
	bool port_given = false;

	for (int i = 0; i < ac; i++) {
		const char *a = av[i], *eq = strchr(a, '=');
		size_t kl = eq ? (size_t)(eq - a) : strlen(a);
		const char *v = eq ? eq + 1 : "";
		uint64_t n;

#define KEY(k) (kl == strlen(k) && !strncmp(a, k, kl))
		if (KEY("mount") || KEY("socket") || KEY("statedir") || KEY("peers_file")) {
			char *dst = KEY("mount") ? conf.mount : KEY("socket") ? conf.socket :
				    KEY("statedir") ? conf.statedir : conf.peers_file;

			if (v[0] != '/' || strlen(v) >= PATH_MAX) {
				slurm_error("stagefs: plugstack.conf: %.*s= wants an absolute path, not '%s'",
					    (int)kl, a, v);
				return -1;
			}
			strcpy(dst, v);
			/* "/datasets/" and "/datasets" are the same mount */
			for (size_t l = strlen(dst); l > 1 && dst[l - 1] == '/'; l--)
				dst[l - 1] = '\0';
		} else if (KEY("wait") || KEY("max_wait")) {
			if (parse_uint(v, &n) || !n || n > 7 * 86400) {
				slurm_error("stagefs: plugstack.conf: %.*s= wants seconds (1 to 604800), not '%s'",
					    (int)kl, a, v);
				return -1;
			}
			*(KEY("wait") ? &conf.wait_s : &conf.max_wait_s) = (unsigned)n;
		} else if (KEY("peer_port")) {
			if (parse_uint(v, &n) || !n || n > 65535) {
				slurm_error("stagefs: plugstack.conf: peer_port= wants a TCP port (1 to 65535), not '%s'",
					    v);
				return -1;
			}
			conf.peer_port = (unsigned)n;
			port_given = true;
		} else if (KEY("peer_host")) {
			const char *pc = strchr(v, '%');

			/* a name or address, where %n is the node's name (once at most) */
			if (!*v || strlen(v) >= sizeof(conf.peer_host) || strcspn(v, " \t/:") != strlen(v) ||
			    (pc && (pc[1] != 'n' || strchr(pc + 1, '%')))) {
				slurm_error("stagefs: plugstack.conf: peer_host= wants a host name or IPv4 address, %%n standing for the node's name (once), not '%s'",
					    v);
				return -1;
			}
			strcpy(conf.peer_host, v);
		} else if (KEY("shard")) {
			if (strcmp(v, "node") && strcmp(v, "all")) {
				slurm_error("stagefs: plugstack.conf: shard= is node or all, not '%s'", v);
				return -1;
			}
			conf.shard_all = !strcmp(v, "all");
		} else if (KEY("onfail")) {
			if (strcmp(v, "run") && strcmp(v, "fail")) {
				slurm_error("stagefs: plugstack.conf: onfail= is run or fail, not '%s'", v);
				return -1;
			}
			conf.onfail_fail = !strcmp(v, "fail");
		} else {
			slurm_error("stagefs: plugstack.conf: unknown argument '%s' (known: mount= socket= statedir= wait= max_wait= onfail= shard= peers_file= peer_port= peer_host=)",
				    a);
			return -1;
		}
#undef KEY
	}
	if (!conf.mount[0]) {
		slurm_error("stagefs: plugstack.conf: mount=PATH (the node's stagefs mount) is missing");
		return -1;
	}
	/* the port alone is a group half asked for: say so rather than do nothing */
	if (port_given && !conf.peers_file[0]) {
		slurm_error("stagefs: plugstack.conf: peer_port= without peers_file= (the daemon's peers_file, which the plugin writes) does nothing");
		return -1;
	}
	if (conf.wait_s > conf.max_wait_s)
		conf.wait_s = conf.max_wait_s;
	conf.ok = true;
	return 0;
}

/* ---- the user's options ---- */

struct conf_opt conf_opt = { .onfail = -1, .shard_all = -1 };

enum { OPT_STAGE, OPT_WAIT, OPT_ONFAIL, OPT_SHARD };

/*
 * Check a --stagefs argument: comma-separated paths relative to the mount
 * root (or absolute, under it: checked where the mount is known), no ".."
 * component, at most SPANK_MAX_PATHS.  0 or -1 with @why set.
 */
static int check_paths(const char *arg, const char **why)
{
	size_t n = 0;
	const char *p = arg;

	if (!*arg || strlen(arg) >= OPT_PATHS_MAX) {
		*why = "wants DATASET[/PATH][,...], relative to the stagefs mount";
		return -1;
	}
	while (*p) {
		size_t len = strcspn(p, ",");
		const char *c = p, *end = p + len;

		if (!len) {
			*why = "has an empty path";
			return -1;
		}
		if (++n > SPANK_MAX_PATHS) {
			*why = "names more than 64 paths";
			return -1;
		}
		while (c < end) {
			size_t cl = strcspn(c, "/,");

			if (cl == 2 && c[0] == '.' && c[1] == '.') {
				*why = "may not go up ('..')";
				return -1;
			}
			c += cl + (c + cl < end);
		}
		p = *end ? end + 1 : end;
	}
	return 0;
}

static int opt_cb(int val, const char *arg, int remote)
{
	const char *why = NULL;
	uint64_t n;

	switch (val) {
	case OPT_STAGE:
		if (!arg || check_paths(arg, &why))
			break;
		snprintf(conf_opt.paths, sizeof(conf_opt.paths), "%s", arg);
		conf_opt.given = true;
		return 0;
	case OPT_WAIT:
		if (!arg || parse_uint(arg, &n) || !n || n > 7 * 86400) {
			why = "wants seconds (1 to 604800)";
			break;
		}
		conf_opt.wait_s = (unsigned)n;
		return 0;
	case OPT_ONFAIL:
		if (arg && (!strcmp(arg, "run") || !strcmp(arg, "fail"))) {
			conf_opt.onfail = !strcmp(arg, "fail");
			return 0;
		}
		why = "is run or fail";
		break;
	case OPT_SHARD:
		if (arg && (!strcmp(arg, "node") || !strcmp(arg, "all"))) {
			conf_opt.shard_all = !strcmp(arg, "all");
			return 0;
		}
		why = "is node or all";
		break;
	}
	slurm_error("stagefs: --%s=%s %s", val == OPT_STAGE ? "stagefs" :
		    val == OPT_WAIT ? "stagefs-wait" : val == OPT_ONFAIL ? "stagefs-onfail" :
		    "stagefs-shard", arg ? arg : "", why);
	return -1;
}

static struct spank_option conf_options[] = {
	{ "stagefs", "DATASET[/PATH][,...]",
	  "stage these paths of the node's stagefs mount on each node of the job "
	  "(its share: shard NODE/NNODES) before the job starts", 1, OPT_STAGE, opt_cb },
	{ "stagefs-wait", "SECONDS",
	  "wait at most this long for --stagefs's staging on each node; "
	  "the rest is then read on demand", 1, OPT_WAIT, opt_cb },
	{ "stagefs-onfail", "run|fail",
	  "if --stagefs's staging fails or times out on a node: run the job anyway "
	  "(reads go to the backend), or fail its tasks there", 1, OPT_ONFAIL, opt_cb },
	{ "stagefs-shard", "node|all",
	  "what --stagefs stages on each node: its share (shard NODE/NNODES, the "
	  "default), or all of it (every node reads every file)", 1, OPT_SHARD, opt_cb },
	SPANK_OPTIONS_TABLE_END
};

int conf_opts_from_env(spank_t sp)
{
	for (size_t i = 0; conf_options[i].name; i++) {
		char *arg = NULL;

		if (spank_option_getopt(sp, &conf_options[i], &arg) != ESPANK_SUCCESS)
			continue;
		if (opt_cb(conf_options[i].val, arg, 1))
			return -1;
	}
	return 0;
}

unsigned conf_wait_s(void)
{
	unsigned w = conf_opt.wait_s ? conf_opt.wait_s : conf.wait_s;

	return w < conf.max_wait_s ? w : conf.max_wait_s;
}

bool conf_onfail_fail(void)
{
	return conf_opt.onfail < 0 ? conf.onfail_fail : conf_opt.onfail;
}

bool conf_shard_all(void)
{
	return conf_opt.shard_all < 0 ? conf.shard_all : conf_opt.shard_all;
}

void conf_register_options(spank_t sp)
{
	for (size_t i = 0; conf_options[i].name; i++)
		if (spank_option_register(sp, &conf_options[i]) != ESPANK_SUCCESS)
			slurm_error("stagefs: cannot register --%s", conf_options[i].name);
}
