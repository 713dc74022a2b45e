/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptacct: see ptacct.h.
 *
 * The BPF side (CONFIG_HAVE_BPF: libbpf, clang and bpftool at build time)
 * is the skeleton bpftool generates from fuse/bpf/ptread.bpf.c, embedded
 * in the binary.  Its map is keyed by the file handle the daemon gave the
 * kernel at OPEN, fh->id (fuse/handles.h): a handle is
 * looked up in pa->open (the passthrough opens not yet released) before it
 * is used, and RELEASE drains the map and takes its handle out of that
 * table before the handle is freed, under pa->lock, so a drain never
 * touches a freed handle.  The kernel finishes every read of a file before
 * its RELEASE is sent, so nothing is left for a handle after that drain.
 *
 * Cost: no READ or OPEN of the daemon path is touched.  A passthrough OPEN
 * adds a table insert; its RELEASE two bpf() calls: the lookup-and-delete
 * of the opener thread's entry, and of the handle's count of entries made
 * ("created"); only when other threads read through it (more entries were
 * made than were drained) the whole map is drained.
 */
#include "ptacct.h"

#include "fh.h"
#include "log.h"
#include "passthrough.h"
#include "stats/stats.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#ifdef CONFIG_HAVE_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/types.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "bpf/ptread.h"
#include "bpf/ptread.skel.h"

#define DRAIN_PERIOD_NS	1000000000ULL

struct ptacct {
	struct sfs *fs;
	struct ptread *skel;
	int map_fd;
	int created_fd;
	int hook;			/* enum hook: the set loaded */
	char fallback[96];		/* why not fentry, for the log */

	pthread_mutex_t lock;
	struct htab open;		/* protected by lock: struct fh by pa_node, passthrough opens */
	uint64_t unknown;		/* protected by lock: entries of no open handle */

	pthread_t drainer;
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cond;
	bool stop;			/* protected by stop_lock */
};

static bool fh_eq(const struct htab_node *n, const void *key)
{
	return htab_entry(n, struct fh, pa_node)->id == *(const uint64_t *)key;
}

/* Charge one entry of the map (taken out of it) to its open and reader.  Under pa->lock. */
static void charge_locked(struct ptacct *pa, const struct ptread_key *k,
			  const struct ptread_val *v)
{
	struct htab_node *node = htab_find(&pa->open, htab_hash_u64(k->fh), fh_eq, &k->fh);
	struct fh *fh;

	if (!node) {
		/* an open served before the handle was published: estimated already */
		pa->unknown++;
		return;
	}
	fh = htab_entry(node, struct fh, pa_node);
	fh->pa_bytes += v->bytes;
	fh->pa_mmapped |= v->mmaps != 0;
	fh->pa_entries++;
	stats_passthrough_read(pa->fs->stats, &fh->so, (pid_t)k->tid, (pid_t)v->tgid, v->uid,
			       v->bytes, v->calls, v->ns, v->last_ns, fh->ds->be->chunk_size, false);
}

/* Charge every entry of the map to its open and reader.  Under pa->lock. */
static void drain_locked(struct ptacct *pa)
{
	struct ptread_key k;
	struct ptread_val v;

	/* each pass takes the first key and deletes it; bounded against a busy writer */
	for (unsigned n = 0; n < 2 * PTREAD_MAX_ENTRIES; n++) {
		if (bpf_map_get_next_key(pa->map_fd, NULL, &k))
			break;
		if (!bpf_map_lookup_and_delete_elem(pa->map_fd, &k, &v))
			charge_locked(pa, &k, &v);
	}
}

static void *drainer_main(void *arg)
{
	struct ptacct *pa = arg;
	uint64_t next = now_ns();

	pthread_mutex_lock(&pa->stop_lock);
	while (!pa->stop) {
		next += DRAIN_PERIOD_NS;
		if (next < now_ns())
			next = now_ns();
		while (!pa->stop && cond_wait_until_ns(&pa->stop_cond, &pa->stop_lock, next) == 0)
			;
		if (pa->stop)
			break;
		pthread_mutex_unlock(&pa->stop_lock);
		pthread_mutex_lock(&pa->lock);
		drain_locked(pa);
		pthread_mutex_unlock(&pa->lock);
		pthread_mutex_lock(&pa->stop_lock);
	}
	pthread_mutex_unlock(&pa->stop_lock);
	return NULL;
}

/* libbpf's messages go to our log, at debug level (the failure is logged once, by us). */
static int libbpf_log(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	if (level == LIBBPF_DEBUG)
		return 0;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	if (n && line[n - 1] == '\n')
		line[n - 1] = '\0';
	log_debug("libbpf: %s", line);
	return 0;
}

/* A stat(2) device number as the kernel holds it (MKDEV: major << 20 | minor). */
static uint64_t kernel_dev(dev_t d)
{
	return (uint64_t)major(d) << 20 | minor(d);
}

/*
 * The device of @fs's mount, from /proc/self/mountinfo: stat(2) of the
 * mount point would wait on this very daemon.  0 or -ENOENT.
 */
static int mount_dev(struct sfs *fs, uint64_t *dev)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[8192];
	int ret = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char mnt[4096];
		unsigned a, b;

		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mnt) != 3)
			continue;
		if (!strcmp(mnt, fs->mountpoint) && strstr(line, " - fuse.stagefs ")) {
			*dev = (uint64_t)a << 20 | b;	/* the last one: ours, on top */
			ret = 0;
		}
	}
	fclose(f);
	return ret;
}

/*
 * The program sets of ptread.bpf.c, in the order they are tried: the
 * fentry hooks on the passthrough functions (exact for every read path),
 * else the syscall and io_uring tracepoints (x86-64), else those without
 * io_uring (a kernel without it).
 */
enum hook { HOOK_FENTRY, HOOK_SYSCALLS, HOOK_SYSCALLS_NO_URING, NHOOKS };

static const char *const hook_name[NHOOKS] = {
	"fentry on fuse_passthrough_read_iter",
	"syscall and io_uring tracepoints",
	"syscall tracepoints",
};

/* Open, set up, load and attach set @h; 0 or -errno (pa->skel NULL then). */
static int bpf_try(struct ptacct *pa, enum hook h, uint64_t dev, const struct stat *ns)
{
	struct ptread *sk = ptread__open();
	bool fe = h == HOOK_FENTRY;
	int ret;

	if (!sk)
		return -errno;
	sk->rodata->mount_dev = (__u32)dev;
	sk->rodata->pidns_dev = kernel_dev(ns->st_dev);
	sk->rodata->pidns_ino = ns->st_ino;
	bpf_program__set_autoload(sk->progs.read_enter, fe);
	bpf_program__set_autoload(sk->progs.read_exit, fe);
	bpf_program__set_autoload(sk->progs.splice_enter, fe);
	bpf_program__set_autoload(sk->progs.splice_exit, fe);
	bpf_program__set_autoload(sk->progs.mmap_enter, fe);
#ifdef __x86_64__
	bpf_program__set_autoload(sk->progs.sys_enter, !fe);
	bpf_program__set_autoload(sk->progs.sys_exit, !fe);
	bpf_program__set_autoload(sk->progs.uring_complete, h == HOOK_SYSCALLS);
#else
	if (!fe) {
		ptread__destroy(sk);
		return -ENOTSUP;
	}
#endif
	ret = ptread__load(sk);
	if (!ret)
		ret = ptread__attach(sk);
	if (ret) {
		ptread__destroy(sk);
		return ret;
	}
	pa->skel = sk;
	pa->hook = h;
	return 0;
}

/* Load and attach the program; 0, or -errno with the reason in @why. */
static int bpf_start(struct ptacct *pa, char *why, size_t len)
{
	int ret, first = 0;
	struct stat ns;
	uint64_t dev;

	libbpf_set_print(libbpf_log);
	ret = mount_dev(pa->fs, &dev);
	if (ret) {
		snprintf(why, len, "the mount is not in /proc/self/mountinfo");
		return ret;
	}
	if (stat("/proc/self/ns/pid", &ns) < 0) {
		ret = -errno;
		snprintf(why, len, "/proc/self/ns/pid: %s", strerror(-ret));
		return ret;
	}
	/*
	 * The syscall tracepoints tax every read on the machine, stagefs's or
	 * not (a few hundred ns each): only passthrough_accounting=bpf asks
	 * for them.  auto takes fentry or nothing (the estimate).
	 */
	int nhooks = pa->fs->cfg.passthrough_accounting == CFG_PTACCT_BPF ? NHOOKS : HOOK_FENTRY + 1;

	for (int h = 0; h < nhooks; h++) {
		ret = bpf_try(pa, (enum hook)h, dev, &ns);
		if (!ret) {
			if (h > HOOK_FENTRY)
				snprintf(pa->fallback, sizeof(pa->fallback),
					 "; fentry refused: %s", strerror(-first));
			break;
		}
		log_debug("passthrough accounting: %s: %s", hook_name[h], strerror(-ret));
		if (!first)
			first = ret;
	}
	if (ret) {
		if (nhooks < NHOOKS)
			snprintf(why, len, "fentry on the passthrough read was refused (%s); "
				 "passthrough_accounting=bpf would count through the syscall "
				 "tracepoints, at a cost to every read on the machine",
				 strerror(-first));
		else
			snprintf(why, len, "the BPF program did not load (%s; it needs CAP_BPF, "
				 "CAP_PERFMON and the kernel's BTF)", strerror(-first));
		return first;
	}
	pa->map_fd = bpf_map__fd(pa->skel->maps.acct);
	pa->created_fd = bpf_map__fd(pa->skel->maps.created);
	return 0;
}

static void bpf_stop(struct ptacct *pa)
{
	ptread__destroy(pa->skel);
	pa->skel = NULL;
}

static int ptacct_create_bpf(struct sfs *fs, struct ptacct **out, char *why, size_t len)
{
	struct ptacct *pa = calloc(1, sizeof(*pa));
	int ret;

	if (!pa) {
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	pa->fs = fs;
	ret = htab_init(&pa->open, 1024);
	if (ret) {
		snprintf(why, len, "out of memory");
		goto out_free;
	}
	ret = bpf_start(pa, why, len);
	if (ret)
		goto out_stop;
	pthread_mutex_init(&pa->lock, NULL);
	pthread_mutex_init(&pa->stop_lock, NULL);
	cond_init_monotonic(&pa->stop_cond);
	ret = -pthread_create(&pa->drainer, NULL, drainer_main, pa);
	if (ret) {
		snprintf(why, len, "cannot start its thread: %s", strerror(-ret));
		goto out_stop;
	}
	*out = pa;
	return 0;

out_stop:
	bpf_stop(pa);
	htab_release(&pa->open);
out_free:
	free(pa);
	return ret;
}

void ptacct_destroy(struct ptacct *pa)
{
	if (!pa)
		return;
	pthread_mutex_lock(&pa->stop_lock);
	pa->stop = true;
	pthread_cond_signal(&pa->stop_cond);
	pthread_mutex_unlock(&pa->stop_lock);
	pthread_join(pa->drainer, NULL);
	pthread_mutex_lock(&pa->lock);
	drain_locked(pa);
	if (pa->unknown)
		log_info("passthrough accounting: %" PRIu64 " reports of opens made before "
			 "the BPF program was in place (estimated instead)", pa->unknown);
	pthread_mutex_unlock(&pa->lock);
	bpf_stop(pa);
	htab_release(&pa->open);
	pthread_mutex_destroy(&pa->lock);
	free(pa);
}

bool ptacct_exact(const struct ptacct *pa)
{
	return pa != NULL;
}

/* Detach the program's hooks, keeping its maps.  @pa may be NULL. */
static void ptacct_detach(struct ptacct *pa)
{
	if (pa)
		ptread__detach(pa->skel);	/* the maps stay, for ptacct_lost() */
}

const char *ptacct_hook(const struct ptacct *pa)
{
	if (!pa)
		return "";
	return pa->hook == HOOK_FENTRY ? "fentry" : "syscalls";
}

static const char *hook_text(const struct ptacct *pa, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s", hook_name[pa->hook], pa->fallback);
	return buf;
}

uint64_t ptacct_lost(struct ptacct *pa)
{
	return pa ? __atomic_load_n(&pa->skel->bss->lost, __ATOMIC_RELAXED) : 0;
}

void ptacct_open(struct ptacct *pa, struct fh *fh)
{
	uint64_t key = fh->id;

	if (!pa)
		return;
	fh->pa_bytes = 0;
	fh->pa_entries = 0;
	fh->pa_mmapped = false;
	pthread_mutex_lock(&pa->lock);
	htab_reserve(&pa->open, pa->open.n + 1);	/* or longer chains */
	htab_add(&pa->open, &fh->pa_node, htab_hash_u64(key));
	pthread_mutex_unlock(&pa->lock);
}

void ptacct_release(struct ptacct *pa, struct fh *fh)
{
	struct ptread_key k = { .fh = fh->id, .tid = (uint32_t)stats_open_tid(&fh->so) };
	struct ptread_val v;
	uint64_t rest = 0, made = 0;

	if (!pa)
		return;
	pthread_mutex_lock(&pa->lock);
	/* the kernel ends every read of the file before its RELEASE: nothing more comes */
	if (k.tid && !bpf_map_lookup_and_delete_elem(pa->map_fd, &k, &v))
		charge_locked(pa, &k, &v);
	bpf_map_lookup_and_delete_elem(pa->created_fd, &k.fh, &made);
	if (made > fh->pa_entries || !k.tid)
		drain_locked(pa);	/* other threads read through it */
	htab_del(&pa->open, &fh->pa_node);
	/* pages of a mapping are read by faults no hook sees: the rest of the file, estimated */
	if (fh->pa_mmapped && fh->attr.size > fh->pa_bytes)
		rest = fh->attr.size - fh->pa_bytes;
	pthread_mutex_unlock(&pa->lock);
	if (rest)
		stats_passthrough_read(pa->fs->stats, &fh->so, 0, 0, 0, rest, 1, 0, now_ns(),
				       fh->ds->be->chunk_size, true);
}

#else /* !CONFIG_HAVE_BPF */

static const char *hook_text(const struct ptacct *pa, char *buf, size_t len)
{
	return "";
}

const char *ptacct_hook(const struct ptacct *pa)
{
	return "";
}

/* Detach the program's hooks, keeping its maps.  @pa may be NULL. */
static void ptacct_detach(struct ptacct *pa)
{
}

static int ptacct_create_bpf(struct sfs *fs, struct ptacct **out, char *why, size_t len)
{
	snprintf(why, len, "this build has no BPF support (configure found no libbpf, "
		 "clang or bpftool)");
	return -ENOTSUP;
}

void ptacct_destroy(struct ptacct *pa)
{
}

bool ptacct_exact(const struct ptacct *pa)
{
	return false;
}

uint64_t ptacct_lost(struct ptacct *pa)
{
	return 0;
}

void ptacct_open(struct ptacct *pa, struct fh *fh)
{
}

void ptacct_release(struct ptacct *pa, struct fh *fh)
{
}

#endif /* CONFIG_HAVE_BPF */

int ptacct_create(struct sfs *fs, struct ptacct **out, char *why, size_t len)
{
	*out = NULL;
	why[0] = '\0';
	if (fs->cfg.passthrough == CFG_OFF ||
	    fs->cfg.passthrough_accounting == CFG_PTACCT_ESTIMATE)
		return 0;
	return ptacct_create_bpf(fs, out, why, len);
}

int ptacct_settle(struct sfs *fs, int load_ret, const char *why, char *err, size_t errlen)
{
	int mode = fs->cfg.passthrough_accounting;
	char hook[256];

	if (!passthrough_active(fs->pt)) {
		ptacct_detach(ptacct_of(fs));
		log_info("passthrough accounting: off (passthrough is not active)");
		return 0;
	}
	if (mode == CFG_PTACCT_ESTIMATE) {
		log_notice("passthrough accounting: estimate (passthrough_accounting=estimate): "
			   "each passthrough open counts its file size as read");
		return 0;
	}
	if (ptacct_of(fs)) {
		log_notice("passthrough accounting: bpf (%s; hook: %s): passthrough reads are "
			   "counted exactly", mode == CFG_PTACCT_BPF ? "passthrough_accounting=bpf" :
			   "passthrough_accounting=auto, the BPF program loaded",
			   hook_text(ptacct_of(fs), hook, sizeof(hook)));
		return 0;
	}
	if (mode == CFG_PTACCT_BPF) {
		snprintf(err, errlen, "passthrough_accounting=bpf: %s", why);
		return load_ret ? load_ret : -ENOTSUP;
	}
	log_notice("passthrough accounting: estimate (passthrough_accounting=auto, %s): "
		   "each passthrough open counts its file size as read", why);
	return 0;
}

const char *ptacct_mode(struct sfs *fs)
{
	if (!passthrough_active(fs->pt))
		return "off";
	return ptacct_exact(ptacct_of(fs)) ? "bpf" : "estimate";
}
