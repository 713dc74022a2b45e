/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * ptread.h: what the BPF program fuse/bpf/ptread.bpf.c and its loader
 * fuse/ptacct.c share: the key and value of its map "acct".  Fixed-width
 * types only: both the BPF target and the host compile it.
 */
#ifndef STAGEFS_PTREAD_H
#define STAGEFS_PTREAD_H

#define PTREAD_MAX_ENTRIES	16384	/* (handle, thread) pairs between two drains */
#define PTREAD_MAX_HANDLES	65536	/* handles read since their open (map "created") */

struct ptread_key {
	__u64 fh;	/* the daemon's file handle (struct fuse_file's fh) */
	__u32 tid;	/* reader thread in the daemon's pid namespace; 0: unknown */
	__u32 pad;
};

struct ptread_val {
	__u64 bytes;	/* returned by the read calls */
	__u64 calls;	/* read calls that returned data */
	__u64 ns;	/* time spent in those calls */
	__u64 last_ns;	/* end of the last one (CLOCK_MONOTONIC) */
	__u64 mmaps;	/* mmap() calls on the handle */
	__u32 uid;	/* the reader's fsuid */
	__u32 tgid;	/* its process, in the daemon's pid namespace; 0: unknown */
};

#endif
