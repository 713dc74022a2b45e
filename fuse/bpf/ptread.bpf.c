// SPDX-License-Identifier: GPL-2.0
/*
 * ptread: counts the reads the kernel serves itself through FUSE
 * passthrough opens of one stagefs mount, for the daemon's feed rate
 * (fuse/ptacct.c loads it; docs/feedrate.md).
 *
 * Two sets of programs; the loader tries the first and falls back to the
 * second where the kernel refuses it:
 *
 *  - "fentry": fentry/fexit on fuse_passthrough_read_iter() and
 *    fuse_passthrough_splice_read(), which every read(2), pread, readv,
 *    io_uring read, AIO read and splice of a passthrough open goes through,
 *    and fentry on fuse_passthrough_mmap().
 *  - "syscalls" (x86-64): tp_btf on the raw syscall tracepoints, for
 *    read, pread64, readv, preadv, preadv2, sendfile and splice whose file
 *    is a passthrough open of ours (the descriptor looked up in the
 *    caller's file table), and for mmap of one; and tp_btf on
 *    io_uring_complete for IORING_OP_READ, READV and READ_FIXED.  It
 *    misses AIO (io_submit) and 32-bit callers, and it costs every
 *    syscall on the machine a few tens of ns while it runs (syscall
 *    tracepoints put every task on the slow path).
 *
 * mmap()ed pages are read by page faults on the backing file, which
 * neither sees: the daemon only learns that the open was mapped.  Only
 * files of the mount whose superblock's s_dev is mount_dev (set by the
 * daemon before load) count, and only passthrough opens (struct fuse_file
 * with a backing file): several stagefs daemons may run on one machine,
 * each with its own copy.
 *
 * acct, keyed by (the daemon's file handle: struct fuse_file's fh, reader
 * thread), sums the bytes returned, the calls, their time, and keeps the
 * end of the last call and the reader's fsuid.  The daemon drains it every
 * second and at the RELEASE of a handle (lookup-and-delete).  A full map
 * drops the read and counts it in lost.
 *
 * The thread is named as the daemon's pid namespace sees it
 * (bpf_get_ns_current_pid_tgid with that namespace's device and inode), as
 * FUSE names it in requests; a reader outside that namespace is thread 0.
 *
 * Struct layouts are the kernel's, read with CO-RE: the definitions below
 * name only the members used, and libbpf relocates them against the
 * running kernel's BTF (/sys/kernel/btf/vmlinux).
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "ptread.h"

char LICENSE[] SEC("license") = "GPL";

struct super_block {
	__u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
	void *private_data;
} __attribute__((preserve_access_index));

struct kiocb {
	struct file *ki_filp;
} __attribute__((preserve_access_index));

struct fuse_file {
	__u64 fh;
	struct file *passthrough;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long di, si, dx, r10, r8, orig_ax;
} __attribute__((preserve_access_index));

struct io_kiocb {
	struct file *file;
	__u8 opcode;
} __attribute__((preserve_access_index));

struct io_uring_cqe {
	__s32 res;
} __attribute__((preserve_access_index));

struct io_ring_ctx;

typedef struct {
	__u32 val;
} kuid_t;

struct cred {
	kuid_t fsuid;
} __attribute__((preserve_access_index));

struct task_struct {
	const struct cred *cred;
	struct files_struct *files;
} __attribute__((preserve_access_index));

struct iov_iter;
struct pipe_inode_info;
struct vm_area_struct;

/* Set by the daemon before load. */
const volatile __u32 mount_dev;		/* kernel dev_t of the mount's superblock */
const volatile __u64 pidns_dev;		/* the daemon's pid namespace (nsfs dev, inode) */
const volatile __u64 pidns_ino;

__u64 lost;				/* reads dropped: acct was full */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PTREAD_MAX_ENTRIES);
	__type(key, struct ptread_key);
	__type(value, struct ptread_val);
} acct SEC(".maps");

/* The start of each thread's call in flight (a thread is in one at a time). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PTREAD_MAX_ENTRIES);
	__type(key, __u64);	/* pid_tgid */
	__type(value, __u64);	/* ktime at entry */
} start SEC(".maps");

/* A syscall of the syscalls set in flight on a thread. */
struct sys_call {
	__u64 fh;
	__u64 t0;
	__u32 mmap;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PTREAD_MAX_ENTRIES);
	__type(key, __u64);	/* pid_tgid */
	__type(value, struct sys_call);
} sys_start SEC(".maps");

/* Is @f a passthrough open of our mount?  Then its fuse_file's fh in *@fh. */
static __always_inline int ours(struct file *f, __u64 *fh)
{
	struct fuse_file *ff;

	if (!f || BPF_CORE_READ(f, f_inode, i_sb, s_dev) != mount_dev)
		return 0;
	ff = BPF_CORE_READ(f, private_data);
	if (!ff || !BPF_CORE_READ(ff, passthrough))
		return 0;
	*fh = BPF_CORE_READ(ff, fh);
	return 1;
}

static __always_inline void enter(struct file *f)
{
	__u64 id = bpf_get_current_pid_tgid(), t, fh;

	if (!ours(f, &fh))
		return;
	t = bpf_ktime_get_ns();
	bpf_map_update_elem(&start, &id, &t, BPF_ANY);
}

/* Add to the (fh, thread) entry; a new one gets @v. */
static __always_inline void charge(__u64 fh, struct ptread_val *v)
{
	struct bpf_pidns_info ns = { 0 };
	struct ptread_key k = { .fh = fh };
	struct ptread_val *e;
	struct task_struct *task;

	if (!bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns))) {
		k.tid = ns.pid;
		v->tgid = ns.tgid;
	}
	task = (struct task_struct *)bpf_get_current_task();
	v->uid = BPF_CORE_READ(task, cred, fsuid.val);
	e = bpf_map_lookup_elem(&acct, &k);
	if (!e) {
		if (!bpf_map_update_elem(&acct, &k, v, BPF_NOEXIST))
			return;
		e = bpf_map_lookup_elem(&acct, &k);	/* another CPU made it first */
		if (!e) {
			__sync_fetch_and_add(&lost, 1);
			return;
		}
	}
	__sync_fetch_and_add(&e->bytes, v->bytes);
	__sync_fetch_and_add(&e->calls, v->calls);
	__sync_fetch_and_add(&e->ns, v->ns);
	__sync_fetch_and_add(&e->mmaps, v->mmaps);
	if (v->last_ns > e->last_ns)
		e->last_ns = v->last_ns;
	e->uid = v->uid;
	e->tgid = v->tgid;
}

static __always_inline void leave(struct file *f, long ret)
{
	__u64 id = bpf_get_current_pid_tgid(), now, fh, *t0;
	struct ptread_val v = { 0 };

	t0 = bpf_map_lookup_elem(&start, &id);
	if (!t0)
		return;
	now = bpf_ktime_get_ns();
	v.ns = now - *t0;
	bpf_map_delete_elem(&start, &id);
	if (ret <= 0 || !ours(f, &fh))
		return;	/* EOF, an error, -EIOCBQUEUED (async direct I/O: not seen) */
	v.bytes = (__u64)ret;
	v.calls = 1;
	v.last_ns = now;
	charge(fh, &v);
}

SEC("fentry/fuse_passthrough_read_iter")
int BPF_PROG(read_enter, struct kiocb *iocb, struct iov_iter *iter)
{
	enter(BPF_CORE_READ(iocb, ki_filp));
	return 0;
}

SEC("fexit/fuse_passthrough_read_iter")
int BPF_PROG(read_exit, struct kiocb *iocb, struct iov_iter *iter, long ret)
{
	leave(BPF_CORE_READ(iocb, ki_filp), ret);
	return 0;
}

SEC("fentry/fuse_passthrough_splice_read")
int BPF_PROG(splice_enter, struct file *in, void *ppos, struct pipe_inode_info *pipe,
	     __u64 len, unsigned int flags)
{
	enter(in);
	return 0;
}

SEC("fexit/fuse_passthrough_splice_read")
int BPF_PROG(splice_exit, struct file *in, void *ppos, struct pipe_inode_info *pipe,
	     __u64 len, unsigned int flags, long ret)
{
	leave(in, ret);
	return 0;
}

SEC("fentry/fuse_passthrough_mmap")
int BPF_PROG(mmap_enter, struct file *file, struct vm_area_struct *vma)
{
	struct ptread_val v = { .mmaps = 1, .last_ns = bpf_ktime_get_ns() };
	__u64 fh;

	if (ours(file, &fh))
		charge(fh, &v);
	return 0;
}

/* ---- the syscalls set (x86-64) ---- */

#if defined(__TARGET_ARCH_x86)
#define NR_READ		0
#define NR_MMAP		9
#define NR_PREAD64	17
#define NR_READV	19
#define NR_SENDFILE	40
#define NR_SPLICE	275
#define NR_PREADV	295
#define NR_PREADV2	327

#define IORING_OP_READV		1
#define IORING_OP_READ_FIXED	4
#define IORING_OP_READ		22

/* The file behind descriptor @fd of the current task, or NULL. */
static __always_inline struct file *fd_file(long fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds, *f = NULL;

	if (!fdt || fd < 0 || (unsigned long)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

static __always_inline int watched(long id)
{
	return id == NR_READ || id == NR_PREAD64 || id == NR_READV || id == NR_PREADV ||
	       id == NR_PREADV2 || id == NR_SENDFILE || id == NR_SPLICE || id == NR_MMAP;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	struct sys_call c = { 0 };
	__u64 tid = bpf_get_current_pid_tgid();
	long fd;

	if (!watched(id))
		return 0;
	if (id == NR_SENDFILE)
		fd = BPF_CORE_READ(regs, si);	/* in_fd */
	else if (id == NR_MMAP)
		fd = BPF_CORE_READ(regs, r8);
	else
		fd = BPF_CORE_READ(regs, di);
	if (!ours(fd_file(fd), &c.fh))
		return 0;
	c.mmap = id == NR_MMAP;
	c.t0 = bpf_ktime_get_ns();
	bpf_map_update_elem(&sys_start, &tid, &c, BPF_ANY);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	__u64 tid = bpf_get_current_pid_tgid(), now;
	struct ptread_val v = { 0 };
	struct sys_call *c;

	if (!watched(BPF_CORE_READ(regs, orig_ax)))
		return 0;
	c = bpf_map_lookup_elem(&sys_start, &tid);
	if (!c)
		return 0;
	now = bpf_ktime_get_ns();
	v.last_ns = now;
	if (c->mmap) {
		v.mmaps = (unsigned long)ret < (unsigned long)-4095;	/* an address, not -errno */
	} else if (ret > 0) {
		v.bytes = (__u64)ret;
		v.calls = 1;
		v.ns = now - c->t0;
	}
	if (v.bytes || v.mmaps)
		charge(c->fh, &v);
	bpf_map_delete_elem(&sys_start, &tid);
	return 0;
}

SEC("tp_btf/io_uring_complete")
int BPF_PROG(uring_complete, struct io_ring_ctx *ring, void *req, struct io_uring_cqe *cqe)
{
	struct io_kiocb *r = req;
	struct ptread_val v = { 0 };
	__u8 op = BPF_CORE_READ(r, opcode);
	__s32 res;
	__u64 fh;

	if (op != IORING_OP_READ && op != IORING_OP_READV && op != IORING_OP_READ_FIXED)
		return 0;
	res = BPF_CORE_READ(cqe, res);
	if (res <= 0 || !ours(BPF_CORE_READ(r, file), &fh))
		return 0;
	v.bytes = (__u64)res;
	v.calls = 1;
	v.last_ns = bpf_ktime_get_ns();
	charge(fh, &v);
	return 0;
}
#endif
