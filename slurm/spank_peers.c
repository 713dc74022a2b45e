/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_peers: the job's nodes as the node's peer group (docs/slurm.md,
 * "The job's nodes as the peer group"; docs/fleet.md).
 *
 * Each job running on a node leaves its nodes' peer addresses in
 * STATEDIR/peers/JOBID.NODE, one "IP:PORT # NAME" line each, written by
 * its prolog and removed by its epilog.  The daemon's peers_file is then
 * rewritten as the union of those lists (each address once, at most
 * PEERS_MAX: past that the places are shared max-min fairly between the
 * jobs, spank_fair.c, and each job that lost nodes is named in a comment
 * line of the file, in slurmd's log and in the job's output at its next
 * step), under an exclusive lock on STATEDIR/peers.lock so that the
 * prologs and epilogs of jobs sharing the node (or of several slurmd on
 * one machine) never lose each other's update, and the daemon is asked to
 * reread it: PEERS reload=1 on its control socket, which only root may
 * send and whose answer says whether the file was taken.  With no job
 * left the file names nobody, and the group is what the daemon's own
 * `peers` setting makes it: the node's configured group.
 *
 * A node's address: its Slurm name put into peer_host= for %n (default:
 * the name itself), resolved to IPv4 by getaddrinfo (nsswitch.conf:
 * /etc/hosts, DNS), with peer_port= (785 unless given).  A node leaves
 * itself out of its job's list: the daemon is always a member of its own
 * group.  Resolved here rather than by the daemon, so that a name that
 * does not resolve leaves out that node alone, and says so, instead of
 * making the daemon refuse the whole file.  The node list is expanded by
 * Slurm's own hostlist functions.
 *
 * Who can change the group: root.  The lists live in the root-only state
 * directory; the peers_file's directory must be root's and writable by
 * nobody else, and the daemon itself refuses a peers_file that is not
 * root's or that others may write.  Node names come from slurmd (the
 * job's credential), never from the job's environment.
 *
 * Everything runs in a child as root with a deadline (spank_asuser.c): a
 * slow resolver or a hung daemon never holds up the prolog or epilog past
 * it.  The child's memory is never freed (it exits at once), which also
 * spares us knowing which allocator libslurm's hostlist strings came from.
 */
#include "spank_stagefs_i.h"
#include "spank_fair.h"

#include "ctlproto.h"
#include "util.h"

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define PEERS_MAX		255	/* the daemon's 256 members, itself included */
#define PEERS_TIMEOUT_MS	5000	/* resolving, the lock, the daemon's answer */
#define LIST_MAX		65536	/* bytes of one job's list */
#define ADDR_MAX		32	/* "a.b.c.d:port" */
#define NAMES_MAX		160	/* the node names of one member's comment */
#define CUT_LINES_MAX		32	/* jobs named in the peers_file's "left out" lines */
/* the daemon reads at most 64 KiB of peers_file (src/peer/peer.c) */
#define PEERS_FILE_MAX		65536
/* a job's "left out" line in the peers_file, read back by its steps */
#define CUT_PREFIX		"# left out: job "

struct peers_work {
	uint32_t jobid;
	bool start;		/* the job's start: add its nodes; else take them out */
};

static int peers_result(int fd, const char *status, const char *msg, const char *more)
{
	char line[SPANK_LINE_MAX];

	snprintf(line, sizeof(line), "PEERS status=%s", status);
	if (msg)
		client_put_word(line, sizeof(line), "msg", msg);
	if (more)
		strncat(line, more, sizeof(line) - strlen(line) - 1);
	strncat(line, "\n", sizeof(line) - strlen(line) - 1);
	return write(fd, line, strlen(line)) == (ssize_t)strlen(line) ? 0 : -1;
}

/* STATEDIR/peers/JOBID.NODE (the node's name made safe, as for the state file). */
static void job_list_path(uint32_t jobid, char *out, size_t len)
{
	char node[256];

	snprintf(node, sizeof(node), "%s", job_node());
	for (char *c = node; *c; c++)
		if (*c == '/' || (c == node && *c == '.'))
			*c = '_';
	snprintf(out, len, "%s/peers/%" PRIu32 ".%s", conf.statedir, jobid, node);
}

/* @name's peer address, "IP:PORT", into @out.  0, or -1 with @why set. */
static int node_addr(const char *name, char *out, size_t len, const char **why)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;
	char host[512], ip[INET_ADDRSTRLEN];
	const char *pc = strstr(conf.peer_host, "%n");
	int rc;

	if (pc)
		snprintf(host, sizeof(host), "%.*s%s%s", (int)(pc - conf.peer_host),
			 conf.peer_host, name, pc + 2);
	else
		snprintf(host, sizeof(host), "%s", conf.peer_host);
	rc = getaddrinfo(host, NULL, &hints, &ai);
	if (rc) {
		*why = gai_strerror(rc);
		return -1;
	}
	inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip, sizeof(ip));
	freeaddrinfo(ai);
	snprintf(out, len, "%s:%u", ip, conf.peer_port);
	return 0;
}

/*
 * This job's list: every node of SLURM_JOB_NODELIST (the prolog's, from
 * slurmd) and its address, into STATEDIR/peers/JOBID.NODE.  0, or -1 with
 * the reason in @err.  The names that did not resolve are told in @bad;
 * the nodes past PEERS_MAX are counted in a "# unlisted=N" line.
 */
static int job_list_write(uint32_t jobid, char *err, size_t errlen, char *bad, size_t badlen)
{
	const char *list = getenv("SLURM_JOB_NODELIST");
	char path[STATE_PATH_MAX], *buf, *name;
	size_t len = 0, n = 0, left = 0;
	hostlist_t hl;
	int ret;

	if (!list)
		list = getenv("SLURM_NODELIST");
	if (!list || !*list) {
		snprintf(err, errlen, "the prolog was given no SLURM_JOB_NODELIST");
		return -1;
	}
	hl = slurm_hostlist_create(list);
	buf = malloc(LIST_MAX);
	if (!hl || !buf) {
		snprintf(err, errlen, "cannot expand the node list %s", list);
		return -1;
	}
	len = (size_t)snprintf(buf, LIST_MAX, "# job %" PRIu32 ": %.200s\n", jobid, list);
	while ((name = slurm_hostlist_shift(hl))) {
		char addr[ADDR_MAX];
		const char *why = NULL;
		size_t bl = strlen(bad);

		/*
		 * Not this node: the daemon is always a member, at its
		 * peer_listen, and a machine's own name often resolves to a
		 * loopback address (Debian's /etc/hosts: 127.0.1.1), which
		 * would make it a phantom member here.
		 */
		if (!strcmp(name, job_node()))
			continue;
		if (n == PEERS_MAX || len + strlen(name) + ADDR_MAX + 8 > LIST_MAX) {
			left++;
			continue;
		}
		if (node_addr(name, addr, sizeof(addr), &why)) {
			if (bl < badlen)
				snprintf(bad + bl, badlen - bl, "%s%s: %s", bl ? ", " : "", name, why);
			continue;
		}
		len += (size_t)snprintf(buf + len, LIST_MAX - len, "%s # %s\n", addr, name);
		n++;
	}
	/*
	 * Past PEERS_MAX the job could never have more places: those nodes
	 * are not resolved, only counted, and the union counts them as left
	 * out.
	 */
	if (left)
		len += (size_t)snprintf(buf + len, LIST_MAX - len, "# unlisted=%zu\n", left);
	ret = job_statedir_ready();
	if (!ret) {
		snprintf(path, sizeof(path), "%s/peers", conf.statedir);
		ret = mkdir_p(path, 0700);
	}
	if (ret) {
		snprintf(err, errlen, "state directory %s: %s", conf.statedir,
			 ret == -EPERM ? "must be root's and writable by nobody else" : strerror(-ret));
		return -1;
	}
	job_list_path(jobid, path, sizeof(path));
	ret = write_file_atomic(path, buf, len, 0600, false);
	if (ret) {
		snprintf(err, errlen, "%s: %s", path, strerror(-ret));
		return -1;
	}
	return 0;
}

/*
 * The peers_file's directory must be root's and writable by nobody else
 * (made 0755 if missing): whoever may rename in it could swap the file.
 * 0, or -1 with the reason in @err.
 */
static int peers_dir_check(char *err, size_t errlen)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	struct stat st;
	int ret;

	snprintf(tmp, sizeof(tmp), "%s", conf.peers_file);
	snprintf(dir, sizeof(dir), "%s", dirname(tmp));
	ret = mkdir_p(dir, 0755);
	if (!ret && lstat(dir, &st))
		ret = -errno;
	if (!ret && (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)))
		ret = -EPERM;
	if (ret)
		snprintf(err, errlen, "peers_file's directory %s: %s", dir,
			 ret == -EPERM ? "must be root's and writable by nobody else" : strerror(-ret));
	return ret ? -1 : 0;
}

/* Is the word @w (@len bytes) one of the space-separated words of @s? */
static bool has_word(const char *s, const char *w, size_t len)
{
	while (*s) {
		size_t l = strcspn(s, " ");

		if (l == len && !strncmp(s, w, len))
			return true;
		s += l + (s[l] == ' ');
	}
	return false;
}

/* One list in STATEDIR/peers: a job's nodes as seen from one node (JOBID.NODE). */
struct job_list {
	uint32_t jobid;
	char file[256];
	const char **addrs, **names;	/* NUL-terminated, into the file's bytes */
	size_t n, unlisted;
};

static int job_list_cmp(const void *a, const void *b)
{
	const struct job_list *x = a, *y = b;

	if (x->jobid != y->jobid)
		return x->jobid < y->jobid ? -1 : 1;
	return strcmp(x->file, y->file);
}

/*
 * Parse @buf, one list file's bytes, in place into @jl: "IP:PORT # NAME"
 * lines (our own), "# unlisted=N", other comments.  0 or -ENOMEM.
 */
static int job_list_parse(char *buf, struct job_list *jl)
{
	size_t cap = 0;

	for (char *line = buf, *next; *line; line = next) {
		size_t ll = strcspn(line, "\n"), al = strcspn(line, " #\n");
		char *name = line + al;

		next = line + ll + (line[ll] == '\n');
		line[ll] = '\0';
		if (!strncmp(line, "# unlisted=", 11)) {
			uint64_t u;

			if (!parse_uint(line + 11, &u) && u <= UINT32_MAX)
				jl->unlisted = (size_t)u;
			continue;
		}
		if (!al || al >= ADDR_MAX)
			continue;
		if (jl->n == cap) {
			size_t nc = cap ? 2 * cap : 64;
			const char **a = realloc(jl->addrs, nc * sizeof(*a));
			const char **nm = a ? realloc(jl->names, nc * sizeof(*nm)) : NULL;

			if (a)
				jl->addrs = a;
			if (!a || !nm)
				return -ENOMEM;
			jl->names = nm;
			cap = nc;
		}
		name += strspn(name, " #");
		line[al] = '\0';
		jl->addrs[jl->n] = line;
		jl->names[jl->n++] = name;
	}
	return 0;
}

/*
 * The live jobs' lists: every JOBID.NODE file of STATEDIR/peers, sorted by
 * job id and file name (never in directory order).  0 with the lists in
 * *@out, or -1 with @err.
 */
static int job_lists_read(struct job_list **out, size_t *nout, char *err, size_t errlen)
{
	char dir[STATE_PATH_MAX];
	struct job_list *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/peers", conf.statedir);
	d = opendir(dir);
	while (d && (de = readdir(d))) {
		size_t nl = strlen(de->d_name), dl = strspn(de->d_name, "0123456789");
		uint64_t id;
		char *buf, num[16];
		ssize_t got;
		int fd;

		/* JOBID.NODE: not ".", "..", a write in progress (.tmp) or anything else */
		if (!dl || dl > 10 || de->d_name[dl] != '.' || nl >= sizeof(v->file) ||
		    (nl > 4 && !strcmp(de->d_name + nl - 4, ".tmp")))
			continue;
		memcpy(num, de->d_name, dl);
		num[dl] = '\0';
		if (parse_uint(num, &id) || id > UINT32_MAX)
			continue;
		fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		buf = malloc(LIST_MAX + 1);
		got = buf ? read(fd, buf, LIST_MAX) : -1;
		close(fd);
		if (got <= 0) {
			free(buf);
			continue;
		}
		buf[got] = '\0';
		/* kept until the child exits: only what the file holds */
		buf = realloc(buf, (size_t)got + 1) ?: buf;
		if (n == cap) {
			struct job_list *nv = realloc(v, (cap ? 2 * cap : 16) * sizeof(*v));

			if (!nv)
				goto oom;
			v = nv;
			cap = cap ? 2 * cap : 16;
		}
		memset(&v[n], 0, sizeof(v[n]));
		v[n].jobid = (uint32_t)id;
		memcpy(v[n].file, de->d_name, nl + 1);
		if (job_list_parse(buf, &v[n]))
			goto oom;
		n++;
	}
	if (d)
		closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), job_list_cmp);
	*out = v;
	*nout = n;
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

/*
 * The lists of one job (several slurmd on one machine each keep theirs)
 * as one, for fair_select(): each job is one claimant.  0 or -ENOMEM.
 */
static int jobs_merge(const struct job_list *jl, size_t n, struct fair_job **out, size_t *nout)
{
	struct fair_job *fj = calloc(n ? n : 1, sizeof(*fj));
	size_t nj = 0;

	if (!fj)
		return -ENOMEM;
	for (size_t i = 0; i < n;) {
		size_t k, total = 0, unlisted = 0;
		const char **a;

		for (k = i; k < n && jl[k].jobid == jl[i].jobid; k++) {
			total += jl[k].n;
			unlisted += jl[k].unlisted;
		}
		a = malloc((total ? total : 1) * sizeof(*a));
		if (!a)
			return -ENOMEM;
		fj[nj] = (struct fair_job){ .jobid = jl[i].jobid, .addrs = a, .naddrs = total,
					    .unlisted = unlisted };
		for (total = 0; i < k; i++) {
			memcpy(a + total, jl[i].addrs, jl[i].n * sizeof(*a));
			total += jl[i].n;
		}
		nj++;
	}
	*out = fj;
	*nout = nj;
	return 0;
}

/*
 * Under the lock: peers_file := the live jobs' nodes, each address once
 * with the names of the nodes that have it, at most PEERS_MAX shared
 * fairly between the jobs (spank_fair.c), and a comment line for each job
 * that lost nodes.  0 with the count in @members and the jobs that lost
 * nodes in @cut ("" if none), or -1 with the reason in @err.
 */
static int union_write(size_t *members, char *cut, size_t cutlen, char *err, size_t errlen)
{
	static const char head[] =
		"# The nodes of the Slurm jobs running on this node: its stagefs peer group.\n"
		"# Written by the stagefs SPANK plugin at each job's start and end; do not edit.\n";
	const size_t cap = sizeof(head) + (CUT_LINES_MAX + 1) * 160 +
			   (size_t)PEERS_MAX * (ADDR_MAX + NAMES_MAX + 8);
	const char **group = calloc(PEERS_MAX, sizeof(*group));
	char *out = malloc(cap), names[NAMES_MAX];
	struct job_list *jl = NULL;
	struct fair_job *fj = NULL;
	size_t njl = 0, nj = 0, n, len, ncut = 0, cl = 0, nclaim = 0;
	int ret;

	_Static_assert(sizeof(head) + (CUT_LINES_MAX + 1) * 160 +
		       (size_t)PEERS_MAX * (ADDR_MAX + NAMES_MAX + 8) <= PEERS_FILE_MAX,
		       "a peers_file the daemon would refuse as too large");
	cut[0] = '\0';
	if (!group || !out) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (job_lists_read(&jl, &njl, err, errlen))
		return -1;
	if (jobs_merge(jl, njl, &fj, &nj)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	n = fair_select(fj, nj, PEERS_MAX, group);
	for (size_t j = 0; j < nj; j++)		/* the jobs that claim a place */
		nclaim += fj[j].naddrs + fj[j].unlisted > 0;

	len = (size_t)snprintf(out, cap, "%s", head);
	for (size_t j = 0; j < nj; j++) {
		if (!fj[j].left_out)
			continue;
		if (ncut++ < CUT_LINES_MAX)
			len += (size_t)snprintf(out + len, cap - len,
						CUT_PREFIX "%" PRIu32 ": %zu of its %zu other node(s); %zu job(s) share the %d places\n",
						fj[j].jobid, fj[j].left_out,
						fj[j].naddrs + fj[j].unlisted, nclaim, PEERS_MAX);
		if (cl + 1 < cutlen)
			cl += (size_t)snprintf(cut + cl, cutlen - cl, "%sjob %" PRIu32 " lost %zu of its %zu other nodes",
					       cl ? ", " : "", fj[j].jobid, fj[j].left_out,
					       fj[j].naddrs + fj[j].unlisted);
	}
	if (ncut > CUT_LINES_MAX)
		len += (size_t)snprintf(out + len, cap - len, "# left out: %zu job(s) more\n",
					ncut - CUT_LINES_MAX);
	if (cl >= cutlen && cutlen > 4)
		snprintf(cut + cutlen - 4, 4, "...");
	/* each member with the names of its nodes, in every job's list */
	for (size_t k = 0; k < n; k++) {
		size_t nl = 0;

		names[0] = '\0';
		for (size_t i = 0; i < njl; i++)
			for (size_t e = 0; e < jl[i].n; e++) {
				size_t wl = strlen(jl[i].names[e]);

				if (!wl || strcmp(jl[i].addrs[e], group[k]) ||
				    has_word(names, jl[i].names[e], wl) || nl + wl + 2 > sizeof(names))
					continue;
				nl += (size_t)snprintf(names + nl, sizeof(names) - nl, "%s%s",
						       nl ? " " : "", jl[i].names[e]);
			}
		len += (size_t)snprintf(out + len, cap - len, "%s # %s\n", group[k], names);
	}
	ret = write_file_atomic(conf.peers_file, out, len, 0644, false);
	if (ret) {
		snprintf(err, errlen, "%s: %s", conf.peers_file, strerror(-ret));
		return -1;
	}
	*members = n;
	return 0;
}

/*
 * A connection to the daemon's control socket, past HELLO, into @conn.
 * Made before the lock is taken: finding the socket reads the mount, and
 * a child stuck in a hung daemon's FUSE request outlives its kill.
 * 0, or -1 with @err.
 */
static int daemon_connect(struct ctl_conn **conn, char *err, size_t errlen)
{
	char sock[PATH_MAX];
	int sfd, ret;

	if (conf.socket[0]) {
		snprintf(sock, sizeof(sock), "%s", conf.socket);
	} else {
		ret = ctl_socket_of(conf.mount, sock, sizeof(sock));
		if (ret) {
			snprintf(err, errlen, "%s/" CTL_SOCKET_VFILE ": %s (is stagefs mounted there?)",
				 conf.mount, strerror(-ret));
			return -1;
		}
	}
	sfd = ctl_connect(sock);
	if (sfd < 0) {
		snprintf(err, errlen, "cannot connect to %s: %s", sock, strerror(-sfd));
		return -1;
	}
	*conn = malloc(sizeof(**conn));
	if (!*conn) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	ctl_conn_init(*conn, sfd);
	return ctl_hello(*conn, err, errlen) ? -1 : 0;
}

/*
 * Ask the daemon to reread its peers_file (PEERS reload=1, root only).
 * 0 with its OK line's words in @m (over @line), or -1 with @err.
 */
static int daemon_reread(struct ctl_conn *conn, char *err, size_t errlen, char **line,
			 struct ctl_msg *m)
{
	int ret = ctl_sendf(conn->fd, "PEERS reload=1\n");
	const char *pf;

	if (!ret)
		ret = ctl_read_line(conn, line, PEERS_TIMEOUT_MS);
	if (ret < 0 || ctl_parse(*line, m)) {
		snprintf(err, errlen, "the daemon did not answer PEERS");
		return -1;
	}
	if (strcmp(m->argv[0], "OK")) {
		const char *msg = ctl_get(m, "msg"), *code = ctl_get(m, "code");

		snprintf(err, errlen, "the daemon refused its new peers_file: %s (%s)",
			 msg ? msg : "?", code ? code : "?");
		return -1;
	}
	/* a daemon reading another file would never see the jobs' nodes */
	pf = ctl_get(m, "peers_file");
	if (!pf || strcmp(pf, conf.peers_file)) {
		snprintf(err, errlen, "the daemon's peers_file is '%s', not %s (plugstack.conf peers_file=)",
			 pf ? pf : "?", conf.peers_file);
		return -1;
	}
	return 0;
}

/* The child's work, as root: see the top of the file.  One PEERS line to @fd. */
static int peers_work(void *arg, int fd)
{
	const struct peers_work *w = arg;
	char err[2 * STATE_PATH_MAX] = "", cerr[2 * STATE_PATH_MAX] = "", bad[1024] = "";
	char path[STATE_PATH_MAX], more[SPANK_LINE_MAX] = "", cut[1024], peers[2048];
	struct ctl_conn *conn = NULL;
	const char *pl;
	char *line = NULL;
	struct ctl_msg m;
	size_t members = 0;
	int lfd;

	if (w->start) {
		if (job_list_write(w->jobid, err, sizeof(err), bad, sizeof(bad)))
			return peers_result(fd, "error", err, NULL);
	} else {
		job_list_path(w->jobid, path, sizeof(path));
		if (unlink(path) && errno == ENOENT)
			return peers_result(fd, "none", NULL, NULL);	/* not ours: nothing to undo */
	}
	if (peers_dir_check(err, sizeof(err)))
		return peers_result(fd, "error", err, NULL);
	/* without the daemon the file is still written: it reads it when it starts */
	if (daemon_connect(&conn, cerr, sizeof(cerr)))
		conn = NULL;
	snprintf(path, sizeof(path), "%s/peers.lock", conf.statedir);
	lfd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX)) {
		snprintf(err, sizeof(err), "%s: %s", path, strerror(errno));
		return peers_result(fd, "error", err, NULL);
	}
	/* the lock is held until we exit: the daemon rereads what we wrote */
	if (union_write(&members, cut, sizeof(cut), err, sizeof(err)))
		return peers_result(fd, "error", err, NULL);
	snprintf(more, sizeof(more), " written=%zu", members);
	if (cut[0])
		client_put_word(more, sizeof(more), "cut", cut);
	if (!conn)
		return peers_result(fd, "error", cerr, more);
	if (daemon_reread(conn, err, sizeof(err), &line, &m))
		return peers_result(fd, "error", err, more);
	more[0] = '\0';
	client_put_word(more, sizeof(more), "members", ctl_get(&m, "members") ?: "?");
	/* the short words first: a group of 255 does not fit in one line */
	if (bad[0])
		client_put_word(more, sizeof(more), "left_out", bad);
	if (cut[0])
		client_put_word(more, sizeof(more), "cut", cut);
	pl = ctl_get(&m, "peers") ?: "";
	snprintf(peers, sizeof(peers), "%s", pl);
	if (strlen(pl) >= sizeof(peers)) {
		char *c = strrchr(peers, ',');

		snprintf(c ? c : peers, sizeof(peers) - (size_t)((c ? c : peers) - peers), ",...");
	}
	client_put_word(more, sizeof(more), "peers", peers);
	return peers_result(fd, "ok", NULL, more);
}

static int peers_run(bool start, uint32_t jobid, char *msg, size_t len)
{
	const struct spank_user root = { .uid = 0, .gid = 0, .gids = { 0 }, .ngids = 1 };
	struct peers_work w = { .jobid = jobid, .start = start };
	char res[SPANK_LINE_MAX], cutmsg[1200] = "";
	const char *st, *why, *cut;
	struct ctl_msg m;
	int ret = asuser_run(&root, peers_work, &w, PEERS_TIMEOUT_MS, res, sizeof(res));

	if (ret || ctl_parse(res, &m) || strcmp(m.argv[0], "PEERS") || !(st = ctl_get(&m, "status"))) {
		snprintf(msg, len, "%s", ret == -ETIMEDOUT ?
			 "the peer group helper hung past its deadline (a stopped daemon, or a slow resolver) and was killed" :
			 "the peer group helper died without a result");
		return -1;
	}
	if (!strcmp(st, "none")) {
		msg[0] = '\0';
		return 0;
	}
	cut = ctl_get(&m, "cut");
	if (cut)
		snprintf(cutmsg, sizeof(cutmsg), "; past %d members, the places are shared between the jobs here: %s",
			 PEERS_MAX, cut);
	if (strcmp(st, "ok")) {
		why = ctl_get(&m, "msg");
		snprintf(msg, len, "%s%s", why ? why : "unknown error", cutmsg);
		return -1;
	}
	why = ctl_get(&m, "left_out");
	snprintf(msg, len, "the daemon's peer group: %s member(s): %s%s%s%s",
		 ctl_get(&m, "members") ?: "?", ctl_get(&m, "peers") ?: "",
		 why ? "; left out: " : "", why ? why : "", cutmsg);
	return 0;
}

int peers_job_start(uint32_t jobid, char *msg, size_t len)
{
	return peers_run(true, jobid, msg, len);
}

int peers_job_end(uint32_t jobid, char *msg, size_t len)
{
	return peers_run(false, jobid, msg, len);
}

/*
 * In slurmstepd, as root, at a step's start: how many of the job's nodes
 * the node's peer group leaves out (the peers_file's CUT_PREFIX line for
 * the job), said once per change: the count last told is kept in
 * STATEDIR/JOBID.NODE.peers.  A sentence in @msg, or "" when there is
 * nothing new to tell.  Local files only (no daemon, no mount): no child.
 */
void peers_step_check(uint32_t jobid, char *msg, size_t len)
{
	char *buf = malloc(PEERS_FILE_MAX + 1), path[STATE_PATH_MAX], prefix[40], old[32] = "";
	size_t lost = 0, of = 0, njobs = 0;
	struct stat st;
	ssize_t got;
	int fd;

	msg[0] = '\0';
	if (!buf)
		return;
	fd = open(conf.peers_file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != 0) {
		if (fd >= 0)
			close(fd);
		free(buf);
		return;
	}
	got = read(fd, buf, PEERS_FILE_MAX);
	close(fd);
	buf[got > 0 ? got : 0] = '\0';
	snprintf(prefix, sizeof(prefix), CUT_PREFIX "%" PRIu32 ": ", jobid);
	for (char *line = buf; *line; line += strcspn(line, "\n"), line += *line == '\n') {
		if (strncmp(line, prefix, strlen(prefix)))
			continue;
		if (sscanf(line + strlen(prefix), "%zu of its %zu other node(s); %zu job(s)",
			   &lost, &of, &njobs) != 3)
			lost = 0;
		break;
	}
	free(buf);
	if (job_statedir_ready())
		return;
	job_state_path(jobid, ".peers", path, sizeof(path));
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		got = read(fd, old, sizeof(old) - 1);
		old[got > 0 ? got : 0] = '\0';
		close(fd);
	}
	if (!lost) {
		unlink(path);	/* a loss after this one is told again */
		return;
	}
	snprintf(prefix, sizeof(prefix), "%zu", lost);
	if (!strcmp(old, prefix))
		return;
	write_file_atomic(path, prefix, strlen(prefix), 0600, false);
	snprintf(msg, len, "the peer group on %s leaves out %zu of this job's %zu other node(s): "
		 "%zu job(s) here share its %d places (what this node lacks is read from the backend "
		 "rather than from them)", job_node(), lost, of, njobs, PEERS_MAX);
}
