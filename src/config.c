/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config: see config.h.  The table below is the only place a setting is
 * described.
 */
#include "config.h"

#include "log.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

enum opt_type {
	OPT_STR,
	OPT_SIZE,
	OPT_UINT,
	OPT_BOOL,
	OPT_DURATION,
	OPT_RATIO,
	OPT_LOGLEVEL,
	OPT_AUTO,	/* enum cfg_auto: auto, on/yes or off/no */
	OPT_CHOICE,	/* int: the index of one of .choices */
};

struct opt {
	const char *name;
	enum opt_type type;
	size_t off;
	const char *def;	/* default, in the syntax a user would write */
	double min, max;	/* inclusive limits for numbers; 0/0 = none */
	const char *help;	/* one line: --help and the example config */
	const char *limits;	/* the limits in words where min/max do not say it all */
	const char *doc;	/* the reference text (markdown) of docs/configuration.md */
	const char *const *choices;	/* OPT_CHOICE: the words, NULL-terminated */
};

/*
 * The headings of docs/configuration.md's settings reference: a group
 * starts at the setting @first and runs to the next group's first.  @after
 * is markdown printed below the group's table.
 */
struct opt_group {
	const char *first;
	const char *title;
	const char *after;
};

#define O(f) offsetof(struct sfs_config, f)

static const struct opt opts[] = {
	{ "cache_dir", OPT_STR, O(cache_dir), "/var/cache/stagefs", 0, 0,
	  "directory on local NVMe holding the chunk cache (created 0700)",
	  .limits = "absolute path",
	  .doc =
		"Directory on local NVMe that holds the chunk cache. It is created "
		"(0700) if needed and locked while the daemon runs, so two daemons "
		"cannot share it. It also holds the dir:// snapshots. Layout: "
		"`cache.md`. It and every directory above it must be owned by root "
		"(or the daemon's user) and writable by nobody else (a sticky parent "
		"such as `/tmp` excepted), links on the way too: otherwise the "
		"daemon does not start, naming the directory (`security.md`)." },
	{ "cache_size", OPT_SIZE, O(cache_size), "0", 0, 0,
	  "most bytes of disk the cache may use (real blocks); 0 = limited by cache_free_ratio only",
	  .doc =
		"Most disk space the cache may use, counted in 4 KiB blocks of "
		"present chunks. `0`: bounded by `cache_free_ratio` only." },
	{ "cache_free_ratio", OPT_RATIO, O(cache_free_ratio), "0.10", 0, 0.95,
	  "share of the cache filesystem always left free",
	  .doc =
		"Share of the whole cache filesystem always left free, re-checked "
		"before every fill. The cache shrinks when others fill the disk." },
	{ "chunk_size", OPT_SIZE, O(chunk_size), "4M", 4 * 1024, 64 * 1024 * 1024,
	  "cache fill unit for dir:// sources (power of two)",
	  .limits = "4K .. 64M, power of two (as `stagefs publish --chunk-size`)",
	  .doc =
		"Unit in which dir:// files (and plain RADOS namespaces) are "
		"fetched and cached. Each chunk costs a backend read, a 64-byte "
		"journal record and 72 bytes of memory while its file is known, so "
		"small chunks suit only small files or tests (`tools/bench.sh "
		"index` uses 4K to make a million chunks from 4 GiB). Published "
		"RADOS datasets carry their own chunk size. A dir:// snapshot "
		"mounted offline uses the chunk size it was scanned with." },
	{ "cache_sync", OPT_BOOL, O(cache_sync), "no", 0, 0,
	  "fdatasync chunk data before recording it in the index; no: after a power cut, chunks whose bytes were lost fail their first-read check and are refetched",
	  .doc =
		"`fdatasync` a chunk's data before recording it in the journal. "
		"With `no` (the default), a power cut may leave records for chunks "
		"whose bytes never reached the disk; every chunk is checked against"
		" its hash at its first read after a start, so they are refetched, "
		"never served. `yes` costs a journal commit of the cache filesystem"
		" per chunk (measured: cold reads of 128 KiB objects 0.47 -> 0.69 "
		"of `rados bench` when turned off) to save those refetches; see "
		"`cache.md`, \"Crash safety\"." },
	{ "fd_cache", OPT_UINT, O(fd_cache), "0", 0, 1048576,
	  "cache-file descriptors kept open (bounded: never one per inode); 0 = from RLIMIT_NOFILE (raised to its hard limit at start): all but an eighth + 1024, at most 65536",
	  .limits = "0, 16 .. 1048576",
	  .doc =
		"Most cache-file descriptors kept open (an `O_DIRECT` twin opened "
		"for fills counts as one more). Idle ones beyond it are closed in "
		"LRU order, so a dataset of millions of files never costs one "
		"descriptor per file. `0`: from `RLIMIT_NOFILE`, whose soft limit "
		"the daemon raises to the hard one at start: the limit less an "
		"eighth and 1024 (kept for FUSE, librados sockets, logs), at most "
		"65,536. An explicit value above that is lowered, with a notice. "
		"Out of descriptors anyway (`EMFILE`), the cache closes half of its"
		" idle ones and retries." },
	{ "threads", OPT_UINT, O(threads), "0", 0, 256,
	  "most FUSE worker threads; 0 = from the CPUs this process may run on (4 each, 16 to 64)",
	  .doc =
		"Most FUSE worker threads; `0` = 4 per CPU the daemon may run on "
		"(its affinity mask), at least 16, at most 64. Threads start on "
		"demand and are kept (none is ended when idle)." },
	{ "entry_timeout", OPT_DURATION, O(entry_timeout_ms), "1h", 0, 0,
	  "how long the kernel trusts a name lookup before asking again (datasets are immutable)",
	  .doc =
		"How long the kernel trusts a name lookup (and a negative one) "
		"before it asks the daemon again at the entry's next use. Datasets "
		"are immutable, so long is safe, and short costs a LOOKUP round "
		"trip per path component per use once expired (`0`: on every path "
		"walk). It does not bound the kernel's memory: an expired entry "
		"stays cached until reclaimed; `kernel_inodes_max` bounds that." },
	{ "attr_timeout", OPT_DURATION, O(attr_timeout_ms), "1h", 0, 0,
	  "how long the kernel trusts an inode's attributes before asking again",
	  .doc =
		"How long the kernel trusts attributes before a `stat` asks the "
		"daemon again (a GETATTR round trip). Like `entry_timeout`, it frees"
		" no kernel memory." },
	{ "kernel_inodes_max", OPT_UINT, O(kernel_inodes_max), "1000000", 0, 2000000000,
	  "most inodes (and dentries) the kernel keeps for the mount, ~1.1 KiB of slab each; above it the oldest are pruned (Linux >= 6.18); 0 = left to the kernel's reclaim",
	  .doc =
		"Most inodes the kernel keeps for this mount. Each entry a walk "
		"(`find`, `ls -l`, a DataLoader's first epoch) looks up leaves an "
		"inode and a dentry in the kernel, about 1.1 KiB of slab "
		"(`fuse_inode` 896 B, `dentry` 192 B), kept once unused until "
		"memory pressure reclaims them: 9 GB after a walk of 10 M entries. "
		"`entry_timeout` and `attr_timeout` do not free them (an expired "
		"FUSE dentry is only looked up again at its next use). Above this "
		"many the daemon asks the kernel to drop the oldest it looked up "
		"(`FUSE_NOTIFY_PRUNE`, FUSE 7.45, Linux 6.18) down to 90 %: an "
		"unused one is evicted (its FORGET follows), one in use (open, a "
		"cwd, a directory with cached children) stays and is asked again "
		"later. Cost: an evicted file's next access is a LOOKUP round trip "
		"and its page cache is gone (the next read comes from the daemon's "
		"cache file); the daemon keeps 40-72 bytes per inode counted. The "
		"default bounds the slab near 1.1 GB. `0`, or an older kernel (said"
		" once in the log): the kernel's own reclaim decides. "
		"`.stagefs/stats` shows `kernel_inodes` (counted now) and "
		"`kernel_prunes` (asked so far)." },
	{ "readdirplus", OPT_AUTO, O(readdirplus), "auto", 0, 0,
	  "directory listings with attributes (READDIRPLUS); auto = the kernel's adaptive mode, on = always, off = never (names only; a stat is a LOOKUP)",
	  .doc =
		"Whether directory listings carry each entry's attributes "
		"(`READDIRPLUS`). A READDIRPLUS reply makes the kernel create an "
		"inode and a dentry for every entry listed, which `ls -l` and a "
		"DataLoader's `stat` then use without a LOOKUP, but which a "
		"names-only walk (`find`, `os.scandir` without `stat`) pays for and "
		"leaves in memory (`kernel_inodes_max`). `auto`: the kernel's "
		"adaptive mode (the first part of a listing with attributes, the "
		"rest too only if entries of the directory were looked up). `on`: "
		"always. `off`: names only; each `stat` is then a LOOKUP round trip"
		" (`benchmarks.md`, scale check)." },
	{ "readdirplus_max", OPT_UINT, O(readdirplus_max), "32", 0, 1000000,
	  "most entries in one READDIRPLUS reply (the kernel lists the rest names-only unless the entries are being stat'ed); 0 = as many as fit",
	  .doc =
		"Most entries one READDIRPLUS reply carries. With `readdirplus = "
		"auto` the kernel asks for the first part of a listing with "
		"attributes and the rest with plain READDIR, unless entries of the "
		"directory were used in between (`ls -l` stats them): a short first"
		" reply keeps a names-only walk from making an inode for every "
		"entry, while `ls -l` still gets attributes. Linux 6.18 asks for "
		"up to 128 KiB at once, so without a cap `find` instantiated every "
		"entry of each directory of up to ~750 entries. Measured at 1 M "
		"files, caches dropped (`benchmarks.md`, scale check): no cap, "
		"`find` 2.6-3.1x ext4 and `ls -l` of 100,000 entries 0.5x; 256: "
		"1.1x and 0.47x; 32: 0.6x and 0.6x. `0`: as many as fit." },
	{ "read_ahead_kb", OPT_UINT, O(read_ahead_kb), "4096", 0, 65536,
	  "bdi read_ahead_kb set on the mount (larger READ requests)",
	  .doc =
		"Written to the mount's `/sys/class/bdi/.../read_ahead_kb` after "
		"mounting, and used as FUSE `max_readahead` (at least "
		"`max_read_kb`), so that sequential readers send large READs." },
	{ "max_read_kb", OPT_UINT, O(max_read_kb), "1024", 4, 1024,
	  "largest READ request in KiB",
	  .doc =
		"Largest READ request, in KiB (FUSE `max_read`)." },
	{ "splice", OPT_BOOL, O(splice), "yes", 0, 0,
	  "let the kernel splice what the daemon sends from a file: a small file put in the page cache at its OPEN",
	  .doc =
		"Ask the kernel for its splice capabilities (`SPLICE_WRITE`, "
		"`SPLICE_MOVE`) where it offers them. Used for one thing: a small "
		"file served from its pack's cache entry is put in the kernel's "
		"page cache at its OPEN spliced from the entry, so that the kernel "
		"copies it once (`cache.md`, Pack entries; about 8 % less daemon "
		"CPU on a warm epoch of 60-220 KB files). READ replies are never "
		"spliced: a cache hit is copied from the engine's buffer or a "
		"per-thread buffer and sent with `fuse_reply_iov()` "
		"(`passthrough.md`, Figures). `no`: the pushed file is read into "
		"a buffer and written to the kernel." },
	{ "passthrough", OPT_AUTO, O(passthrough), "auto", 0, 0,
	  "let the kernel read fully cached files itself (FUSE passthrough); auto = where the kernel and privileges allow",
	  .doc =
		"Let the kernel read fully cached, verified files directly from the"
		" cache file (FUSE passthrough); no READ then reaches the daemon. "
		"`auto`: use it where the kernel and privileges allow, and say once"
		" in the log when it cannot. `on`: fail the mount if it cannot be "
		"used. `off`: never." },
	{ "passthrough_min_size", OPT_SIZE, O(passthrough_min_size), "0", 0, 0,
	  "files up to this size stay on the daemon path even when fully cached (keep_cache there makes hot re-reads cost no READ)",
	  .doc =
		"Fully cached files of at most this many bytes stay on the daemon "
		"path (where `keep_cache` serves hot re-reads with no READ) instead"
		" of going passthrough. `0`: every non-empty file may go "
		"passthrough, which measured faster for small files read with a "
		"cold page cache (`passthrough.md`, Figures)." },
	{ "passthrough_accounting", OPT_CHOICE, O(passthrough_accounting), "auto", 0, 0,
	  "how passthrough reads are counted: bpf = exactly, by an eBPF program; estimate = the file size at open; auto = bpf where its fentry hook loads, else estimate",
	  .limits = "auto, bpf or estimate",
	  .choices = (const char *const[]){ "auto", "bpf", "estimate", NULL },
	  .doc =
		"How the feed rate counts reads through passthrough opens, which "
		"never reach the daemon. `bpf`: an eBPF program on the kernel's "
		"passthrough read (fentry on `fuse_passthrough_read_iter` and "
		"`fuse_passthrough_splice_read`, or, where the kernel refuses "
		"fentry, the syscall and io_uring tracepoints, which cost every "
		"syscall on the machine a few hundred ns) counts the bytes each "
		"reader thread got, exactly; the mount fails if it cannot be "
		"loaded (a build without libbpf, no BTF, no `CAP_BPF`). "
		"`estimate`: each passthrough open is charged its file's size at "
		"open, marked estimated (`read_bytes_estimated`). `auto`: `bpf` "
		"where fentry loads (it costs only passthrough reads), else "
		"`estimate`: the syscall tracepoints are taken only when asked for "
		"with `bpf`. The log says which at mount, which hook, and why. "
		"See `feedrate.md`." },
	{ "stall_idle_gap", OPT_DURATION, O(stall_idle_gap_ms), "2s", 10, 3600000,
	  "a reader thread with no event (open, read, close) for longer than this is idle, not counted in its active time (the stall share's denominator)",
	  .doc =
		"The stall share is the share of a reader's active time it spent "
		"waiting for data the cache did not have. A reader thread's active"
		" time is the time between its consecutive events (OPEN, READ, "
		"RELEASE, a passthrough read, a client-library report), except "
		"gaps longer than this, which count as idle (a data loader paused "
		"for validation or a checkpoint). Longer than the one-second "
		"period at which passthrough reads are collected. See "
		"`feedrate.md`." },
	{ "no_open", OPT_AUTO, O(no_open), "auto", 0, 0,
	  "read files with no OPEN or RELEASE request (FUSE no-open mode); auto = on a single-dataset mount where passthrough is not active",
	  .doc =
		"FUSE no-open mode: the kernel reads files with no OPEN and no "
		"RELEASE request (one READ round trip per small file instead of "
		"three; hot re-reads reach the daemon not at all). Excludes "
		"passthrough and access rules, so `auto` turns it on only for a "
		"single-dataset mount where passthrough is not active; `on` fails "
		"the mount where it cannot be had, and is refused on multi-dataset "
		"mounts and with `passthrough=on`. See `noopen.md`." },
	{ "supervise", OPT_AUTO, O(supervise), "auto", 0, 0,
	  "keep the mount across a daemon crash or restart: a small supervisor holds /dev/fuse and starts a new daemon that takes it over; auto = on unless -f",
	  .doc =
		"A supervisor process holds the mount's `/dev/fuse` descriptor and "
		"the state the kernel negotiated; when the daemon dies (a crash, "
		"SIGKILL) or is restarted on purpose (`stagefs restart`, a package "
		"upgrade) it starts a new daemon that takes the same mount over, "
		"and readers see a pause, never an error. A clean unmount still "
		"ends it. `auto` turns it on unless `-f` is given (a daemon run in "
		"a terminal for debugging); the systemd unit sets `on`. A "
		"supervised mount keeps `uring` off (`uring=on` is refused with "
		"`supervise=on`, and wins over `auto`). See `restart.md`." },
	{ "uring", OPT_AUTO, O(uring), "auto", 0, 0,
	  "take FUSE requests through io_uring, one queue per CPU (Linux >= 6.14); auto = where the kernel parameter fuse.enable_uring is Y, on = set it",
	  .doc =
		"FUSE over io_uring (Linux >= 6.14): requests come through one ring"
		" queue per CPU, each served by threads pinned to that CPU, and a "
		"reply and the next fetch are one `io_uring_enter`. `auto` uses it "
		"where the kernel parameter "
		"`/sys/module/fuse/parameters/enable_uring` is `Y` (the kernel's "
		"default is `N`); `on` sets that parameter (it is system-wide and "
		"stays set) and fails the mount where the rings cannot be had; "
		"`off` keeps `/dev/fuse`. Only in builds against libfuse 3.14-3.16."
		" See `fuse-uring.md`." },
	{ "uring_queue_depth", OPT_UINT, O(uring_queue_depth), "0", 0, 1024,
	  "FUSE io_uring entries per CPU queue, a thread each: the requests the daemon can hold per CPU; 0 = auto",
	  .doc =
		"Ring entries of each `uring` queue (one queue per CPU), each "
		"with its own thread pinned to that CPU. A request holds its entry"
		" until it is answered (a cold READ waiting for the backend holds "
		"one, its thread free meanwhile), so a queue holds at most this "
		"many requests; the kernel keeps the rest to itself, where their "
		"wait cannot be counted as stall (`fuse_uring_queue_full` counts "
		"how often that happened). `0`: `threads / CPUs` (at least 2) or "
		"64 per queue up to 512 in all, whichever is more. See "
		"`fuse-uring.md`." },
	{ "lookup_readahead_max", OPT_SIZE, O(lookup_readahead_max), "1M", 0, 0,
	  "a fully cached file of at most this size is read into the page cache when it is looked up, overlapping the disk read with the OPEN and READ that follow; 0 = never",
	  .doc =
		"When a regular file of at most this size is looked up and its "
		"cache file is whole and verified, the daemon starts reading the "
		"cache file into the page cache (`readahead(2)`, no wait for the "
		"data) before it answers the LOOKUP, so the disk read overlaps the "
		"OPEN and READ round trips that follow instead of coming after "
		"them. Costs a wasted read of the file for a LOOKUP that no read "
		"follows (`stat` of many files). `0`: never. See `passthrough.md`, "
		"\"Small files with a cold page cache\"." },
	{ "xattrs", OPT_BOOL, O(xattrs), "no", 0, 0,
	  "serve the user.stagefs.* extended attributes; no: the kernel is told at the first getxattr/listxattr that there are none and never asks again (ls -l probes two per file)",
	  .doc =
		"Serve the read-only `user.stagefs.content`, `user.stagefs.cached` "
		"and `user.stagefs.source` extended attributes. A dataset has no "
		"other attributes, yet `ls -l` asks for two per file "
		"(`security.selinux`, `system.posix_acl_access`) and the kernel "
		"does not cache the answers, so with `yes` each costs a round trip "
		"to the daemon (`ls -l` of 10,000 files: 20,000 requests, 3-4x the "
		"time of ext4). With `no` (the default) the first GETXATTR or "
		"LISTXATTR is answered `ENOSYS`, and the kernel then answers every "
		"later one itself (`EOPNOTSUPP`, for every file of the mount) with "
		"no request. The facts stay available another way: how much of a "
		"file is cached from `stagefs warmup --check [--json] PATH` "
		"(`user.stagefs.cached`), the dataset's URI from `source` in "
		"`.stagefs/stats` (`user.stagefs.source`); a file's cache identity "
		"(`user.stagefs.content`, the name of its cache file) only from a "
		"mount with `-o xattrs=yes`, as the benchmarks mount. Fixed for the "
		"mount's lifetime: the kernel remembers `ENOSYS` until unmount." },
	{ "dir_scan_threads", OPT_UINT, O(dir_scan_threads), "0", 0, 256,
	  "threads scanning a dir://, cephfs:// or s3:// source at mount (and checking a saved dir:// scan); 0 = 4 per CPU, 8 to 64",
	  .doc =
		"Threads that scan a `dir://` source at mount, each reading whole "
		"directories and `lstat`ing their entries, and that check a saved "
		"scan's directories (`dir_reuse_scan`); and that walk a "
		"`cephfs://` tree (a directory each, one readdirplus from the MDS)"
		" or list an `s3://` prefix (a directory each, its pages of "
		"ListObjectsV2 with `delimiter=/`). A scan waits on the disk "
		"or, on NFS, Lustre, CephFS and S3, on the server for each directory, so more "
		"threads than CPUs pay off there. `0`: 4 per CPU the daemon may run"
		" on, at least 8, at most 64." },
	{ "dir_scan_background", OPT_BOOL, O(dir_scan_background), "yes", 0, 0,
	  "dir://, cephfs://, s3://: the mount answers once the source's top directory is read, while the rest is scanned; no = wait for the whole scan",
	  .doc =
		"With `yes` a `dir://` or `cephfs://` mount that has to scan (no saved scan, or a "
		"changed source), and every `s3://` mount, answers as soon as the top directory is read; "
		"the rest is scanned in the background, breadth first. A lookup "
		"or listing of a directory already read is answered at once, with "
		"the inode numbers the finished scan gives (nothing the kernel "
		"holds changes when it ends); one of a directory not read yet "
		"waits until the scan has read it and every directory before it "
		"in breadth-first order (its children's inode numbers depend on "
		"those), as does a listing of a directory "
		"holding a file with several names (hard links), and `statfs` "
		"reports no size until the end (epoch staging waits for it). If "
		"the scan fails past the top (a directory removed, swapped for a "
		"symlink or unreadable while it runs) the error is logged, what "
		"was read is still served, everything else gives `EIO` (never an"
		" empty listing), and nothing is saved: the next mount scans "
		"again. An unmount during the scan waits for its end (logged), so "
		"that the next mount can reuse it (`s3://` keeps no scan: its "
		"unmount stops it). The daemon's peak memory is its "
		"own plus the scan's, now at the same time (1 M files here: 450 MB "
		"against 290 MB). With `no` the mount waits for the whole scan and "
		"fails if it fails." },
	{ "dir_reuse_scan", OPT_BOOL, O(dir_reuse_scan), "yes", 0, 0,
	  "dir://, cephfs://: mount from the scan saved last time if the source did not change (directory stamps; ceph.dir.rctime, rbytes, rentries); no = always scan",
	  .doc =
		"A `dir://` mount saves its scan (the manifest and a stamp of every"
		" directory: inode number, mtime, ctime) under "
		"`CACHE_DIR/snapshots/`. With `yes` the next mount of the same path"
		" and `chunk_size` stats each directory once and, if none changed, "
		"serves the saved scan instead of scanning again (1 M files in "
		"1,000 directories: well under a second against a full scan). "
		"Adding, removing or renaming an entry changes its directory's "
		"mtime and ctime, so a new, deleted or renamed file or directory "
		"is seen. (`cephfs://` sources save their walk too and check the "
		"tree's recursive statistics instead: `cephfs.md`.) **What the check cannot see**: a file rewritten, "
		"truncated, `chmod`ed, `chown`ed or `touch`ed in place (no name "
		"added or removed), and a directory change whose times equal the "
		"recorded ones (timestamps set back with `touch -d`, a timestamp "
		"granularity coarser than the change, an NFS client still caching "
		"the old attributes: `actimeo`). A file changed in place is still "
		"never served mixed: a read of it fails with `EIO` (its size, mtime"
		" and ctime no longer match) and the saved stamps are removed, so "
		"the next mount scans. To force a scan: `-o dir_reuse_scan=no`, or "
		"delete `CACHE_DIR/snapshots/*.dirs`." },
	{ "allow_other", OPT_BOOL, O(allow_other), "yes", 0, 0,
	  "let users other than the mounter read (access rules still apply)",
	  .doc =
		"Mount with `allow_other` so that users other than the mounter can "
		"read. Access rules (permissions, `allow =` of `[dataset]`) still "
		"apply." },
	{ "runtime_dir", OPT_STR, O(runtime_dir), "/run/stagefs", 0, 0,
	  "directory for the control sockets",
	  .doc =
		"Directory for the control socket, `<hash of the mount "
		"point>.sock`, through which the stagefs tools (warmup, ...) talk "
		"to the daemon. Created 0755 if needed; the same ownership rules "
		"as `cache_dir`, or the daemon does not start." },
	{ "control_max_connections", OPT_UINT, O(control_max_connections), "512", 32, 65536,
	  "control-socket connections open at once (16 of them only root may use)",
	  .doc =
		"Control-socket connections open at once, all users together (each "
		"is a thread of the daemon). The last 16 are kept for root, so the "
		"administrator's tools always get in. A connection over a limit is "
		"refused with `ERR code=EAGAIN` and a message naming the limit "
		"(`docs/control.md`, \"Limits\")." },
	{ "control_user_connections", OPT_UINT, O(control_user_connections), "64", 1, 65536,
	  "control-socket connections one user (other than root) may hold open",
	  .doc =
		"Control-socket connections one user other than root may hold open "
		"at once, so that no user can take every connection. The client "
		"library opens at most 8 per process and mount; `stagefs warmup` "
		"one. Root is bound by `control_max_connections` only." },
	{ "control_idle_timeout", OPT_DURATION, O(control_idle_timeout_ms), "5min", 0, 0,
	  "close a control connection that sent no request this long, holds no cache file and runs no job; 0 = never",
	  .doc =
		"Close a control connection that sent no request for this long while "
		"it holds no cache file handed over by `CACHE_FD` and runs no "
		"`WARMUP` (the client library opens a new one when it needs it). "
		"`0`: never." },
	{ "client_report_rate", OPT_SIZE, O(client_report_rate), "32G", 1024 * 1024,
	  1024.0 * 1024 * 1024 * 1024,
	  "most bytes a second one user's client library may report as read from cache files (and as copied to GPUs)",
	  .limits = "1M .. 1T (per second)",
	  .doc =
		"The time bound on what the client library reports (`CLIENT_READ`, "
		"`GPU_BYTES`, `control.md`): one user's reports together add at most "
		"this many bytes a second to the feed rate (2 s of it at once), each "
		"kind apart, besides being bounded by the files handed to it. Set it "
		"to what the node's cache disks can read at most: reports beyond it "
		"are refused and counted nowhere (`feedrate.md`)." },
	{ "ceph_conf", OPT_STR, O(ceph_conf), "", 0, 0,
	  "ceph.conf for rados:// sources (default $CEPH_CONF, then /etc/ceph/ceph.conf)",
	  .doc =
		"`ceph.conf` to use. Empty: `$CEPH_CONF`, then "
		"`/etc/ceph/ceph.conf`." },
	{ "client_id", OPT_STR, O(client_id), "admin", 0, 0,
	  "cephx client id (client.ID)",
	  .doc =
		"cephx client id (`client.ID`)." },
	{ "keyring", OPT_STR, O(keyring), "", 0, 0,
	  "cephx keyring path (default: from ceph.conf)",
	  .doc =
		"cephx keyring path. Empty: whatever `ceph.conf` says." },
	{ "rados_timeout", OPT_DURATION, O(rados_timeout_ms), "30s", 1000, 0,
	  "bound on any RADOS operation; a reader gets EIO after it",
	  .doc =
		"Bound on every RADOS operation (OSD and monitor ops). A reader "
		"gets EIO after it instead of a hung mount." },
	{ "cephfs_threads", OPT_UINT, O(cephfs_threads), "16", 1, 64,
	  "cephfs://: threads for libcephfs's calls (reads through it, a live tree's version checks)",
	  .doc =
		"`cephfs://` sources: how many of libcephfs's calls run at once, "
		"each on a thread of its own (they block): reads through the "
		"client, and a live tree's version check after a direct read. "
		"Direct reads from the objects need no thread. Every read is "
		"bounded by `rados_timeout` all the same (docs/cephfs.md)." },
	{ "cephfs_direct_reads", OPT_BOOL, O(cephfs_direct_reads), "yes", 0, 0,
	  "cephfs://: read files from the data pool's objects with librados (no: through libcephfs)",
	  .doc =
		"`cephfs://` sources: read a file's bytes from its objects in "
		"the data pool with librados, where the walk learnt its inode "
		"number and layout, instead of through libcephfs (open, read, "
		"close a file per chunk). Files with a pool namespace, a missing "
		"object or a key without OSD read caps are read through the "
		"client all the same (docs/cephfs.md)." },
	{ "s3_endpoint", OPT_STR, O(s3_endpoint), "", 0, 0,
	  "s3://: endpoint URL (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS)",
	  .doc =
		"`s3://` sources: the S3 endpoint, `http://HOST:PORT` or "
		"`https://HOST` (a RADOS Gateway, MinIO); buckets are then named "
		"in the path. Empty: `$AWS_ENDPOINT_URL_S3`, `$AWS_ENDPOINT_URL`, "
		"the profile's `endpoint_url`, else AWS in the region. The URI's "
		"`endpoint=` wins over all (docs/s3.md)." },
	{ "s3_region", OPT_STR, O(s3_region), "", 0, 0,
	  "s3://: region signed for (default $AWS_REGION, $AWS_DEFAULT_REGION, the profile's region, else us-east-1)",
	  .doc =
		"`s3://` sources: the region requests are signed for. Empty: "
		"`$AWS_REGION`, `$AWS_DEFAULT_REGION`, the profile's `region`, "
		"else `us-east-1`." },
	{ "s3_profile", OPT_STR, O(s3_profile), "", 0, 0,
	  "s3://: profile of the credentials and config files (default $AWS_PROFILE, else default)",
	  .doc =
		"`s3://` sources: the profile to take keys, region and endpoint "
		"from in the credentials and config files. Named here (or by the "
		"URI's `profile=`), it wins over `$AWS_ACCESS_KEY_ID`. Empty: "
		"`$AWS_PROFILE`, else `default`." },
	{ "s3_credentials_file", OPT_STR, O(s3_credentials_file), "", 0, 0,
	  "s3://: AWS-style credentials file, root's and mode 0600 (default $AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials)",
	  .doc =
		"`s3://` sources: the credentials file (`[PROFILE]` sections with "
		"`aws_access_key_id`, `aws_secret_access_key`, "
		"`aws_session_token`). A file holding keys must be owned by root "
		"and closed to group and others, or the mount is refused. Empty: "
		"`$AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`." },
	{ "s3_connections", OPT_UINT, O(s3_connections), "32", 1, 256,
	  "s3://: ranged GETs in flight (kept-alive connections) per source",
	  .doc =
		"`s3://` sources: how many requests are in flight at once, each "
		"on a kept-alive connection of its own; more wait for one. Every "
		"request, retries included, is bounded by `rados_timeout` (or "
		"the URI's `timeout=`)." },
	{ "manifest_fill", OPT_BOOL, O(manifest_fill), "yes", 0, 0,
	  "rados://: fetch the rest of a large manifest in the background after the mount answers; no = only the parts touched",
	  .doc =
		"A `rados://` manifest over 4 MiB is copied into "
		"`CACHE_DIR/manifests/` part by part: the mount answers once it "
		"has the header and the part table, and a part comes from RADOS "
		"when first touched (docs/manifest.md, \"The local copy\"). With "
		"`yes` a thread then fetches the parts nobody touched, 4 MiB at a "
		"time, one read at a time and only while no reader waits for a "
		"part, until the copy is complete, so later walks and an OSD "
		"outage find it local; it costs the manifest's size in network "
		"reads and disk (about 130 bytes per entry) once per version and "
		"node. With `no` only the parts the mounts touch are ever fetched." },
	{ "log_level", OPT_LOGLEVEL, O(log_level), "notice", 0, 0,
	  "error, warning, notice, info or debug",
	  .doc =
		"Messages above this level are dropped. `-d` forces `debug`." },
	{ "log_file", OPT_STR, O(log_file), "", 0, 0,
	  "append log lines to this file (default: stderr in the foreground, syslog in the background)",
	  .doc =
		"Append log lines to this file (created 0600). Empty: stderr in the"
		" foreground (`-f`), syslog (ident `stagefs`) in the background." },
	{ "prefetch_inflight", OPT_UINT, O(prefetch_inflight), "32", 1, 1024,
	  "backend fetches in flight at once: background work starts only while readers' fetches leave room",
	  .doc =
		"Backend fetches in flight at once, readers' and background ones "
		"together. Background work starts only while readers' fetches leave"
		" room." },
	{ "prefetch_user_inflight", OPT_UINT, O(prefetch_user_inflight), "16", 1, 1024,
	  "background (readahead, hint, warmup, epoch staging) fetches in flight for one user",
	  .doc =
		"Background fetches (readahead, hints, warmup, epoch staging) in "
		"flight for one user." },
	{ "backend_max_rate", OPT_SIZE, O(backend_max_rate), "0", 0, 0,
	  "bytes per second of all backend fetches (readers borrow ahead); 0 = no cap",
	  .doc =
		"Bytes per second of all backend fetches together; readers may "
		"borrow ahead. `0`: no cap." },
	{ "prefetch_weights", OPT_STR, O(prefetch_weights), "", 0, 0,
	  "fair-share weights of background fetches, UID:WEIGHT or namespace:NAME:WEIGHT,... (others 1)",
	  .doc =
		"Fair-share weights of users' background fetches, `UID:WEIGHT,...`;"
		" other users weigh 1. `namespace:NAME:WEIGHT` weighs a Kubernetes "
		"namespace with a `[quota]` rule, whose pods the cache charges as "
		"one owner (`kubernetes.md`). The value has commas, so set it in the "
		"config file, not with `-o`." },
	{ "readahead_max", OPT_UINT, O(readahead_max), "8", 0, 1024,
	  "most chunks fetched ahead of a sequential reader; 0 = no readahead",
	  .doc =
		"Most chunks fetched ahead of a sequential reader. `0`: no "
		"readahead." },
	{ "hint_window", OPT_UINT, O(hint_window), "64", 1, 1048576,
	  "files prefetched ahead of a reader that announced its order",
	  .doc =
		"Files prefetched ahead of a reader that announced its read order." },
	{ "hint_window_bytes", OPT_SIZE, O(hint_window_bytes), "2G", 0, 0,
	  "bytes prefetched ahead of a reader that announced its order",
	  .doc =
		"Bytes prefetched ahead of such a reader." },
	{ "epoch_staging", OPT_AUTO, O(epoch_staging), "auto", 0, 0,
	  "stage the rest of a dataset a user reads as an epoch, at the lowest priority; auto = if it fits the user's share of the cache",
	  .doc =
		"When a user opens many distinct files of a dataset and re-opens "
		"few (`epoch_staging_files` of them, re-opens at most a quarter of "
		"that: a shuffled DataLoader's epoch), stage the rest of the "
		"dataset for that user in the background, as a warmup would, after"
		" every other kind of fetch, within `prefetch_user_inflight` and "
		"`backend_max_rate`, charged to the user and admitted only where it"
		" fits their quota and the cache without evicting anything. It "
		"stops when the dataset is cached, when the user opened nothing in"
		" it for `epoch_staging_idle`, or when a staged chunk does not fit. "
		"`auto`: only datasets whose size fits the user's share of the "
		"cache (their quota, at most the cache's capacity). `on`: any "
		"dataset, up to what fits. `off`: never. `epoch_staging = ` in a "
		"`[dataset NAME]` section sets it for that dataset. See "
		"`prefetch.md`, \"Epoch staging\"." },
	{ "epoch_staging_files", OPT_UINT, O(epoch_staging_files), "64", 8, 65536,
	  "distinct files of a dataset a user opens (re-opens at most a quarter of that) that make an epoch",
	  .doc =
		"Distinct files of one dataset a user must open, with re-opens at "
		"most a quarter of this many, before `epoch_staging` takes it for "
		"an epoch. Each (dataset, user) being counted holds "
		"16 bytes per file of this window." },
	{ "epoch_staging_idle", OPT_DURATION, O(epoch_staging_idle_ms), "30s", 1000, 86400000,
	  "a staging stops when its user opened no file of the dataset for this long",
	  .doc =
		"A staging stops when its user opened no file of the dataset for "
		"this long (the readers stopped); the counting of opens also starts"
		" over after such a pause." },
	{ "pack_push", OPT_BOOL, O(pack_push), "yes", 0, 0,
	  "store a pack's small files in the kernel's page cache as the pack arrives for readers; no = at each file's open",
	  .doc =
		"When a pack arrives for readers (a reader's miss, readahead, "
		"epoch staging), store each of its files that the kernel has "
		"looked up in the kernel's page cache at once, from the engine's "
		"buffer, and write the pack's cache entry with `O_DIRECT`: one "
		"copy of each byte instead of two (`cache.md`, \"Pack entries\"). "
		"`no`: the entry is written through the page cache and each file "
		"is copied from it at its open. Off in no-open mode." },
	{ "prefetch_io_uring", OPT_BOOL, O(prefetch_io_uring), "yes", 0, 0,
	  "run every fetch on one I/O engine thread: librados aio or io_uring source reads, O_DIRECT io_uring cache writes; no = a thread per fetch",
	  .doc =
		"Run every backend fetch on the I/O engine: one thread, librados "
		"aio or io_uring reads of dir:// sources, `O_DIRECT` io_uring "
		"writes of the cache from registered buffers (files under 256 KiB: "
		"one buffered write). `no` (or no io_uring "
		"on this kernel): a worker thread per background fetch, readers "
		"fetch on their FUSE worker." },
	{ "prefetch_buffers", OPT_SIZE, O(prefetch_buffers), "128M", 1024 * 1024, 1024.0 * 1024 * 1024,
	  "memory of the I/O engine's chunk buffers, registered with io_uring; recently filled chunks are served from it",
	  .doc =
		"Memory of the engine's chunk buffers, registered with io_uring "
		"(needs that much `RLIMIT_MEMLOCK` or CAP_IPC_LOCK, else they are "
		"used unregistered). Recently filled chunks are served to readers "
		"from it." },
	/* feed-rate metrics (fuse/metrics.c, docs/feedrate.md) */
	{ "metrics_port", OPT_UINT, O(metrics_port), "0", 0, 65535,
	  "serve Prometheus metrics at http://127.0.0.1:PORT/metrics; 0 = off",
	  .doc =
		"Serve Prometheus metrics at `http://127.0.0.1:PORT/metrics`. `0`: "
		"off." },
	{ "metrics_file", OPT_STR, O(metrics_file), "", 0, 0,
	  "rewrite this file (node_exporter textfile collector) with the metrics; empty = off",
	  .doc =
		"Rewrite this file (written aside, then renamed) with the same "
		"metrics, for node_exporter's textfile collector. Empty: off." },
	{ "metrics_interval", OPT_DURATION, O(metrics_interval_ms), "5s", 1000, 3600000,
	  "how often metrics_file is rewritten",
	  .doc =
		"How often `metrics_file` is rewritten." },
	{ "metrics_group", OPT_STR, O(metrics_group), "", 0, 0,
	  "group (name or gid) that may read metrics_file (mode 0640); empty = the daemon's group",
	  .doc =
		"Group, by name or number, of `metrics_file`, which is mode 0640 "
		"because the metrics name every user and job: give it the "
		"scraper's group. Empty: the daemon's own group." },
	/* peer groups (src/peer/peer.c, fuse/peerd.c, docs/fleet.md) */
	{ "peer_listen", OPT_STR, O(peer_listen), "", 0, 0,
	  "this node's address in its peer group, HOST[:PORT] (IPv4, port 785 if none); empty = no peer group",
	  .doc =
		"This node's address in its peer group, `HOST:PORT` or `HOST` "
		"(IPv4; port 785, below 1024 so that no unprivileged user can "
		"take it first), where it serves chunks to its peers over TLS 1.3 "
		"and from which it asks them; it is a "
		"member of the group whether `peers` lists it or not. If the port "
		"cannot be bound the node still mounts, reads from its backends, "
		"and tries again (1 s doubling to 30 s). Empty: the "
		"node is in no group and reads only from its backends. Only "
		"published `rados://` datasets are shared (their chunks are "
		"content-addressed); `dir://` and plain RADOS namespaces never are."
		" Read at start, as are `peer_key_file` and `peer_timeout`: SIGHUP "
		"rereads only the members (`peers`, `peers_file`). See `fleet.md`." },
	{ "peers", OPT_STR, O(peers), "", 0, 0,
	  "the peer group, HOST[:PORT], ... (this node included)",
	  .doc =
		"The peer group as a static list, `HOST:PORT, ...` (port 785 "
		"where none is given), this node's "
		"`peer_listen` included; at most 256. Each chunk is owned by one "
		"live member, by rendezvous hashing of its content address, and a "
		"miss asks that owner first. The value has commas: set it in the "
		"config file." },
	{ "peers_file", OPT_STR, O(peers_file), "", 0, 0,
	  "file of the peer group, one HOST:PORT a line, written by a scheduler integration; reread on SIGHUP or PEERS reload=1",
	  .doc =
		"A file listing the group, one `HOST:PORT` a line (`#` comments), "
		"for a scheduler integration (a Slurm prolog, `slurm.md`) to write; "
		"it is reread, with the config file, on SIGHUP, and alone on the "
		"control socket's `PEERS reload=1` (root only, `control.md`). Its "
		"members are added to those of `peers`. It must be owned by root "
		"(or the daemon's user) and writable by nobody else, else it is "
		"refused (the group stays as it was, or the daemon does not "
		"start); a file that does not exist (yet) adds no member." },
	{ "peer_key_file", OPT_STR, O(peer_key_file), "", 0, 0,
	  "the group's shared secret (at least 32 characters), in a file owned by root and not readable by group or others",
	  .limits = "required with peer_listen",
	  .doc =
		"The group's shared secret, the first line of this file (at least 32"
		" characters; `openssl rand -hex 32` makes one). Like a Ceph "
		"keyring, the file must be owned by root (or the daemon's user) and"
		" not readable or writable by group or others, else the daemon "
		"refuses to start. It keys the TLS 1.3 sessions between peers as a "
		"pre-shared key: both ends prove they hold it before a request is "
		"sent, and the chunks are encrypted on the wire (`security.md`, "
		"\"Peers\")." },
	{ "peer_timeout", OPT_DURATION, O(peer_timeout_ms), "2s", 10, 600000,
	  "longest wait for a peer's chunk before the backend is asked instead",
	  .doc =
		"The longest a fill waits for a peer's answer, from the moment it "
		"asks: past it the chunk is read from the backend, and the peer is "
		"skipped for a back-off (1 s, doubling to 30 s). It should be above"
		" the time the backend takes to read a chunk, since an owner that "
		"misses reads it from the backend before it answers." },
	{ "peer_serve_max_mbps", OPT_UINT, O(peer_serve_max_mbps), "0", 0, 1000000,
	  "MB/s this node serves to its peers, all together; 0 = no cap",
	  .doc =
		"Megabytes (10^6 bytes) per second this node sends to its peers, all"
		" together. Serving runs on threads of lower CPU priority (nice 10)"
		" than the node's own readers. `0`: no cap." },
	{ "peer_test_corrupt", OPT_BOOL, O(peer_test_corrupt), "no", 0, 0,
	  "tests only: flip a byte of every chunk served to peers",
	  .doc =
		"For tests only: flip one byte of every chunk this node serves to "
		"its peers, who must detect it (`tests/rados/peers_trust.sh`)." },
};

#undef O

static const struct opt_group groups[] = {
	{ "cache_dir", "Cache", NULL },
	{ "threads", "FUSE and the kernel", NULL },
	{ "ceph_conf", "Ceph (rados:// sources)",
	  "A rados:// source can override these settings for itself: see\n"
	  "[rados:// source options](#rados-source-options) below.\n" },
	{ "log_level", "Logging", NULL },
	{ "prefetch_inflight", "Prefetching and backend bandwidth",
	  "Readahead, hints, warmup and the I/O engine are described in\n"
	  "`docs/prefetch.md`, `prefetch/prefetch.h` and `docs/control.md`.\n" },
	{ "metrics_port", "Metrics",
	  "The metrics are described in `docs/feedrate.md`.\n" },
	{ "peer_listen", "Peer groups",
	  "Nodes of a group share their cached chunks: `docs/fleet.md`.\n" },
};

struct section_handler {
	const char *prefix;
	config_section_fn fn;
	void *arg;
};

static struct section_handler handlers[8];
static size_t nhandlers;

void config_add_section(const char *prefix, config_section_fn fn, void *arg)
{
	for (size_t i = 0; i < nhandlers; i++) {
		if (!strcmp(handlers[i].prefix, prefix)) {
			handlers[i].fn = fn;
			handlers[i].arg = arg;
			return;
		}
	}
	if (nhandlers < ARRAY_SIZE(handlers))
		handlers[nhandlers++] = (struct section_handler){ prefix, fn, arg };
}

static const struct opt *opt_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (!strcmp(opts[i].name, name))
			return &opts[i];
	return NULL;
}

bool config_has(const char *name)
{
	return opt_find(name) != NULL;
}

static void fmt_limit(const struct opt *o, double v, char *buf, size_t len);

/*
 * Is @v (an integer setting's value, in the table's unit) within @o's
 * limits?  The message prints integers, as a user would write them.
 */
static int check_range(const struct opt *o, uint64_t v, char *err, size_t len)
{
	char val[32], lo[32], hi[32];

	if (o->type == OPT_UINT && v > UINT32_MAX && o->max == 0)
		return errf(err, len, -1, "%s: %" PRIu64 " is out of range [0, %" PRIu32 "]",
			    o->name, v, UINT32_MAX);
	if (o->min == 0 && o->max == 0)
		return 0;
	if (v >= (uint64_t)o->min && (o->max == 0 || v <= (uint64_t)o->max))
		return 0;
	if (o->type == OPT_DURATION)
		fmt_limit(o, (double)v, val, sizeof(val));
	else
		snprintf(val, sizeof(val), "%" PRIu64, v);	/* exact, as given */
	fmt_limit(o, o->min, lo, sizeof(lo));
	if (o->max == 0)
		return errf(err, len, -1, "%s: %s is out of range (at least %s)",
			    o->name, val, lo);
	fmt_limit(o, o->max, hi, sizeof(hi));
	return errf(err, len, -1, "%s: %s is out of range [%s, %s]", o->name, val, lo, hi);
}

/* The same for a ratio, the one fractional type. */
static int check_ratio(const struct opt *o, double v, char *err, size_t len)
{
	if (o->min == 0 && o->max == 0)
		return 0;
	if (v < o->min || (o->max > 0 && v > o->max))
		return errf(err, len, -1, "%s: %g is out of range [%g, %g]",
			    o->name, v, o->min, o->max);
	return 0;
}

static int opt_apply(struct sfs_config *cfg, const struct opt *o,
		     const char *value, char *err, size_t len)
{
	void *p = (char *)cfg + o->off;
	uint64_t u;
	bool b;
	char *end;

	switch (o->type) {
	case OPT_STR: {
		char *s = strdup(value);

		if (!s)
			return errf(err, len, -1, "out of memory");
		free(*(char **)p);
		*(char **)p = s;
		return 0;
	}
	case OPT_SIZE:
		if (parse_size(value, &u) == -ERANGE)
			return errf(err, len, -1, "%s: '%s' is out of range (at most %" PRId64
				    " bytes, 2^63 - 1)", o->name, value, INT64_MAX);
		if (parse_size(value, &u))
			return errf(err, len, -1, "%s: '%s' is not a size (like 512K, 4M, 100G)",
				    o->name, value);
		if (check_range(o, u, err, len))
			return -1;
		*(uint64_t *)p = u;
		return 0;
	case OPT_UINT:
		if (parse_uint(value, &u))
			return errf(err, len, -1, "%s: '%s' is not a whole number",
				    o->name, value);
		if (check_range(o, u, err, len))
			return -1;
		*(uint32_t *)p = (uint32_t)u;
		return 0;
	case OPT_BOOL:
		if (parse_bool(value, &b))
			return errf(err, len, -1, "%s: '%s' is not yes or no", o->name, value);
		*(bool *)p = b;
		return 0;
	case OPT_DURATION:
		if (parse_duration_ms(value, &u))
			return errf(err, len, -1, "%s: '%s' is not a duration (like 500ms, 30s, 1h)",
				    o->name, value);
		if (check_range(o, u, err, len))
			return -1;
		*(uint64_t *)p = u;
		return 0;
	case OPT_RATIO: {
		double d;
		size_t n = strlen(value);

		errno = 0;
		d = strtod(value, &end);
		if (n && value[n - 1] == '%' && end == value + n - 1 && end != value)
			d /= 100, end++;
		if (errno || end == value || *end || !(d >= 0))	/* NaN too */
			return errf(err, len, -1, "%s: '%s' is not a ratio (like 0.1 or 10%%)",
				    o->name, value);
		if (check_ratio(o, d, err, len))
			return -1;
		*(double *)p = d;
		return 0;
	}
	case OPT_LOGLEVEL: {
		int l = log_level_parse(value);

		if (l < 0)
			return errf(err, len, -1, "%s: '%s' is not one of error, warning, notice, info, debug",
				    o->name, value);
		*(int *)p = l;
		return 0;
	}
	case OPT_CHOICE:
		for (int i = 0; o->choices[i]; i++) {
			if (!strcasecmp(value, o->choices[i])) {
				*(int *)p = i;
				return 0;
			}
		}
		return errf(err, len, -1, "%s: '%s' is not one of %s", o->name, value, o->limits);
	case OPT_AUTO:
		if (!strcasecmp(value, "auto")) {
			*(enum cfg_auto *)p = CFG_AUTO;
			return 0;
		}
		if (parse_bool(value, &b))
			return errf(err, len, -1, "%s: '%s' is not auto, on or off", o->name, value);
		*(enum cfg_auto *)p = b ? CFG_ON : CFG_OFF;
		return 0;
	}
	return errf(err, len, -1, "%s: unknown type", o->name);
}

void config_init(struct sfs_config *cfg)
{
	char err[256];

	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		if (opt_apply(cfg, &opts[i], opts[i].def, err, sizeof(err))) {
			/* a bad default is a programming error */
			log_err("config default: %s", err);
			abort();
		}
	}
}

void config_release(struct sfs_config *cfg)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		if (opts[i].type == OPT_STR) {
			char **p = (char **)((char *)cfg + opts[i].off);

			free(*p);
			*p = NULL;
		}
	}
}

int config_set(struct sfs_config *cfg, const char *name, const char *value,
	       char *err, size_t errlen)
{
	const struct opt *o = opt_find(name);

	if (!o)
		return errf(err, errlen, -1, "unknown setting '%s'", name);
	return opt_apply(cfg, o, value, err, errlen);
}

struct parse_ctx {
	struct sfs_config *cfg;
	char msg[512];
	bool failed;
};

static int config_ini_line(void *user, const char *section, const char *name,
		       const char *value)
{
	struct parse_ctx *ctx = user;
	int rc = -1;

	if (ctx->failed)
		return 0;
	if (!section[0] || !strcmp(section, "stagefs")) {
		rc = config_set(ctx->cfg, name, value, ctx->msg, sizeof(ctx->msg));
	} else {
		for (size_t i = 0; i < nhandlers; i++) {
			size_t pl = strlen(handlers[i].prefix);

			if (strncmp(section, handlers[i].prefix, pl))
				continue;
			rc = handlers[i].fn(handlers[i].arg, section, name, value,
					    ctx->msg, sizeof(ctx->msg));
			goto out;
		}
		snprintf(ctx->msg, sizeof(ctx->msg), "unknown section [%s]", section);
	}
out:
	if (rc) {
		ctx->failed = true;
		return 0;
	}
	return 1;
}

/*
 * The INI text, handed to inih one whole line per call (config_ini_read).
 * Reading it here, not with inih's fgets, lets the loader refuse what inih
 * would silently get wrong: a line longer than inih's buffer (split into
 * two, every later line number off by one), a section name longer than
 * inih's (truncated, so two names could merge), and a section given twice.
 * The reader sees each line before inih does, and classifies it the way
 * inih will (comment, continuation, [section], name = value).
 */
#define INI_SECTION_MAX	50	/* inih's MAX_SECTION, NUL included */

struct ini_section_seen {
	char name[INI_SECTION_MAX];	/* canonical: see section_seen() */
	int line;
};

struct ini_src {
	const char *p, *end;		/* what is left of the text */
	int line;			/* the line last handed to inih */
	bool prev_name;			/* inih's prev_name is set (continuations) */
	size_t nitems;			/* [section] and name = value lines */
	struct ini_section_seen *seen;	/* sections other than [stagefs] */
	size_t nseen;
	int err_line;			/* != 0: this line was refused, */
	char err[256];			/* ... for this reason */
};

/* inih's find_chars_or_comment(): an inline ';' needs a blank before it. */
static const char *ini_find(const char *s, const char *chars)
{
	bool was_space = false;

	while (*s && !strchr(chars, *s) && !(was_space && *s == ';')) {
		was_space = isspace((unsigned char)*s);
		s++;
	}
	return s;
}

/*
 * Note the section @name (@len bytes, as inih will see it) opened on the
 * current line.  [stagefs] may repeat (the later setting wins); any other
 * section may appear once, so that two [dataset X] are never merged
 * silently.  "dataset  X" and "dataset X" are one section: the blanks after
 * the first word are one blank.  Returns false with src->err set.
 */
static bool section_seen(struct ini_src *src, const char *name, size_t len)
{
	struct ini_section_seen s = { .line = src->line }, *ns;
	size_t n = 0;
	const char *q = name, *qe = name + len;

	if (len >= sizeof(s.name)) {
		snprintf(src->err, sizeof(src->err),
			 "section name longer than %d characters", INI_SECTION_MAX - 1);
		return false;
	}
	while (q < qe && !isspace((unsigned char)*q))
		s.name[n++] = *q++;
	if (q < qe) {
		s.name[n++] = ' ';
		while (q < qe && isspace((unsigned char)*q))
			q++;
		while (q < qe)
			s.name[n++] = *q++;
	}
	s.name[n] = '\0';
	if (!s.name[0] || !strcmp(s.name, "stagefs"))
		return true;
	for (size_t i = 0; i < src->nseen; i++) {
		if (!strcmp(src->seen[i].name, s.name)) {
			snprintf(src->err, sizeof(src->err),
				 "[%.*s] repeats the section of line %d (a section may appear "
				 "once: merge the two)", (int)len, name, src->seen[i].line);
			return false;
		}
	}
	ns = realloc(src->seen, (src->nseen + 1) * sizeof(*ns));
	if (!ns) {
		snprintf(src->err, sizeof(src->err), "out of memory");
		return false;
	}
	src->seen = ns;
	src->seen[src->nseen++] = s;
	return true;
}

/* Classify @line (the current one, as inih will get it) as inih will. */
static bool ini_classify(struct ini_src *src, const char *line)
{
	const char *start = line, *e;

	if (src->line == 1 && !strncmp(start, "\xEF\xBB\xBF", 3))
		start += 3;
	while (isspace((unsigned char)*start))
		start++;
	if (!*start || *start == ';' || *start == '#')
		return true;			/* blank, comment */
	if (src->prev_name && start > line) {
		src->nitems++;			/* continuation of a value */
		return true;
	}
	if (*start == '[') {
		e = ini_find(start + 1, "]");
		if (*e != ']')
			return true;		/* inih reports the syntax error */
		src->prev_name = false;
		src->nitems++;
		return section_seen(src, start + 1, (size_t)(e - start - 1));
	}
	e = ini_find(start, "=:");
	if (*e == '=' || *e == ':') {
		const char *ne = e;

		while (ne > start && isspace((unsigned char)ne[-1]))
			ne--;
		src->prev_name = ne > start;
		src->nitems++;
	}
	return true;
}

/* inih's reader (fgets-like): the next whole line, or NULL to stop. */
static char *config_ini_read(char *buf, int size, void *arg)
{
	struct ini_src *src = arg;
	const char *nl;
	size_t n;

	if (src->err_line || src->p >= src->end || size < 2)
		return NULL;
	nl = memchr(src->p, '\n', (size_t)(src->end - src->p));
	n = nl ? (size_t)(nl - src->p) + 1 : (size_t)(src->end - src->p);
	src->line++;
	if (n > (size_t)size - 1) {
		snprintf(src->err, sizeof(src->err),
			 "line longer than %d characters", size - 2);
		src->err_line = src->line;
		return NULL;
	}
	memcpy(buf, src->p, n);
	buf[n] = '\0';
	src->p += n;
	if (!ini_classify(src, buf)) {
		src->err_line = src->line;
		return NULL;
	}
	return buf;
}

int config_load_buffer(struct sfs_config *cfg, const char *name, const char *buf,
		       size_t len, char *err, size_t errlen)
{
	struct parse_ctx ctx = { .cfg = cfg };
	struct ini_src src = { .p = buf, .end = buf + len };
	int line, r = 0;

	line = ini_parse_stream(config_ini_read, &src, config_ini_line, &ctx);
	if (line == -2) {
		r = errf(err, errlen, -1, "%s: out of memory", name);
	} else if (line > 0) {
		/* inih's first error comes before any line the reader refused */
		if (!ctx.failed)
			snprintf(ctx.msg, sizeof(ctx.msg),
				 "syntax error (expected 'name = value' or '[section]')");
		r = errf(err, errlen, -1, "%s:%d: %s", name, line, ctx.msg);
	} else if (src.err_line) {
		r = errf(err, errlen, -1, "%s:%d: %s", name, src.err_line, src.err);
	} else if (line != 0) {
		r = errf(err, errlen, -1, "%s: cannot parse (inih error %d)", name, line);
	} else if (!src.nitems) {
		/* a truncated or emptied file must not drop the access rules */
		r = errf(err, errlen, -1, "%s: no [section] and no setting in it; an empty "
			 "config file is refused", name);
	}
	free(src.seen);
	return r;
}

int config_load(struct sfs_config *cfg, const char *path, char *err, size_t errlen)
{
	char *buf = NULL, *nb;
	size_t len = 0, cap = 0;
	struct stat st;
	ssize_t n;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errf(err, errlen, -1, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		r = errf(err, errlen, -1, "%s: cannot stat: %s", path, strerror(errno));
		goto out_close;
	}
	if (S_ISDIR(st.st_mode)) {
		r = errf(err, errlen, -1, "%s: is a directory, not a config file", path);
		goto out_close;
	}
	for (;;) {
		if (len == cap) {
			if (cap >= CONFIG_MAX_BYTES) {
				r = errf(err, errlen, -1, "%s: larger than %d KiB; not a config file",
					 path, CONFIG_MAX_BYTES / 1024);
				goto out_free;
			}
			cap = cap ? cap * 2 : 4096;
			nb = realloc(buf, cap);
			if (!nb) {
				r = errf(err, errlen, -1, "%s: out of memory", path);
				goto out_free;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = errf(err, errlen, -1, "%s: cannot read: %s", path, strerror(errno));
			goto out_free;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	r = config_load_buffer(cfg, path, buf ? buf : "", len, err, errlen);
out_free:
	free(buf);
out_close:
	close(fd);
	return r;
}

int config_validate(const struct sfs_config *cfg, char *err, size_t errlen)
{
	if (cfg->chunk_size & (cfg->chunk_size - 1))
		return errf(err, errlen, -1, "chunk_size must be a power of two");
	if (!cfg->cache_dir[0] || cfg->cache_dir[0] != '/')
		return errf(err, errlen, -1, "cache_dir must be an absolute path");
	if (cfg->fd_cache && cfg->fd_cache < 16)
		return errf(err, errlen, -1, "fd_cache must be 0 (auto) or at least 16");
	if (cfg->passthrough == CFG_ON && cfg->no_open == CFG_ON)
		return errf(err, errlen, -1, "passthrough=on and no_open=on exclude each other "
			    "(passthrough is set up at OPEN)");
	return 0;
}

static const char *type_hint(enum opt_type t)
{
	switch (t) {
	case OPT_STR: return "STR";
	case OPT_SIZE: return "SIZE";
	case OPT_UINT: return "N";
	case OPT_BOOL: return "BOOL";
	case OPT_DURATION: return "TIME";
	case OPT_RATIO: return "RATIO";
	case OPT_LOGLEVEL: return "LEVEL";
	case OPT_AUTO: return "auto|on|off";
	case OPT_CHOICE: return "WORD";
	}
	return "?";
}

void config_print_help(FILE *f)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		char left[64];

		snprintf(left, sizeof(left), "%s=%s", opts[i].name,
			 type_hint(opts[i].type));
		fprintf(f, "    -o %-24s %s (default: %s)\n", left, opts[i].help,
			opts[i].def[0] ? opts[i].def : "none");
	}
}

/*
 * The example is also the config a package installs as
 * /etc/stagefs/stagefs.conf: every setting at its default, commented out,
 * and no dataset, so `stagefs -c FILE MOUNTPOINT` (the systemd unit) mounts
 * an empty root until a [dataset NAME] is added and the daemon reloads.
 */
void config_print_example(FILE *f)
{
	fprintf(f, "# stagefs configuration (INI), read by `stagefs -c FILE MOUNTPOINT`\n"
		   "# (the systemd unit: /etc/stagefs/stagefs.conf on /datasets).  Every\n"
		   "# setting is shown commented out at its default; -o name=value on the\n"
		   "# command line wins.  Generated from the option table: `stagefs\n"
		   "# --print-config` writes this file.  Manual: stagefs.conf(5).\n\n"
		   "[stagefs]\n");
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		fprintf(f, "# %s (%s)\n", opts[i].help, type_hint(opts[i].type));
		fprintf(f, "#%s = %s\n\n", opts[i].name, opts[i].def);
	}
	fprintf(f, "# Datasets: each [dataset NAME] with a source is mounted as\n"
		   "# MOUNTPOINT/NAME.  None is configured here: the mount root stays empty\n"
		   "# until one is added and the daemon reloads (kill -HUP, or\n"
		   "# `systemctl reload stagefs`).\n"
		   "#\n"
		   "#[dataset imagenet]\n"
		   "#source = rados://datasets/imagenet   ; or dir:///nfs/datasets/imagenet\n"
		   "#allow = group:vision, user:alice     ; absent: everyone\n"
		   "#policy = lru                         ; or nothrash\n"
		   "\n"
		   "# Quotas: each user's share of the cache (none: unlimited).\n"
		   "#\n"
		   "#[quota]\n"
		   "#default = 100G\n"
		   "#user:alice = 2T\n"
		   "#group:vision = 5T\n"
		   "#namespace:vision = 5T                ; a Kubernetes namespace's pods, together\n");
}

/* @v (a limit of @o) as a user would write it: 4K, 64M, 1s, 1h. */
static void fmt_limit(const struct opt *o, double v, char *buf, size_t len)
{
	static const char units[] = "KMGTP";
	uint64_t u = (uint64_t)v;
	int i;

	switch (o->type) {
	case OPT_SIZE:
		for (i = -1; i < 4 && u >= 1024 && !(u & 1023); i++)
			u >>= 10;
		if (i < 0)
			snprintf(buf, len, "%" PRIu64, u);
		else
			snprintf(buf, len, "%" PRIu64 "%c", u, units[i]);
		return;
	case OPT_DURATION:
		if (u && !(u % 3600000))
			snprintf(buf, len, "%" PRIu64 "h", u / 3600000);
		else if (u && !(u % 1000))
			snprintf(buf, len, "%" PRIu64 "s", u / 1000);
		else
			snprintf(buf, len, "%" PRIu64 "ms", u);
		return;
	default:
		snprintf(buf, len, "%.15g", v);
	}
}

/* The "limits" cell of @o's row. */
static void fmt_limits(const struct opt *o, char *buf, size_t len)
{
	char lo[32], hi[32];
	bool number = o->type == OPT_SIZE || o->type == OPT_UINT ||
		      o->type == OPT_DURATION || o->type == OPT_RATIO;

	if (o->limits) {
		snprintf(buf, len, "%s", o->limits);
		return;
	}
	if (o->min == 0 && o->max == 0) {
		snprintf(buf, len, "%s", number ? "—" : "");
		return;
	}
	fmt_limit(o, o->min, lo, sizeof(lo));
	fmt_limit(o, o->max, hi, sizeof(hi));
	if (o->max == 0)
		snprintf(buf, len, "≥ %s", lo);
	else
		snprintf(buf, len, "%s .. %s", lo, hi);
}

static void print_md_group_end(FILE *f, const struct opt_group *g)
{
	if (g && g->after)
		fprintf(f, "\n%s", g->after);
}

void config_print_markdown(FILE *f)
{
	const struct opt_group *g = NULL;
	size_t next = 0;

	fprintf(f, "%s\n", CONFIG_MD_BEGIN);
	fprintf(f, "## Settings\n\n"
		   "The defaults below are the defaults of the table; the limits are its\n"
		   "inclusive ranges. \"—\" means no limit.\n");
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		const struct opt *o = &opts[i];
		char limits[128];

		if (next < ARRAY_SIZE(groups) && !strcmp(groups[next].first, o->name)) {
			print_md_group_end(f, g);
			g = &groups[next++];
			fprintf(f, "\n### %s\n\n"
				   "| setting | type | default | limits | what it does |\n"
				   "|---|---|---|---|---|\n", g->title);
		}
		fmt_limits(o, limits, sizeof(limits));
		fprintf(f, "| `%s` | %s | ", o->name,
			o->type == OPT_AUTO ? "auto\\|on\\|off" : type_hint(o->type));
		if (o->def[0])
			fprintf(f, "`%s`", o->def);
		else
			fprintf(f, "(empty)");
		fprintf(f, " | %s%s| %s |\n", limits, limits[0] ? " " : "",
			o->doc ? o->doc : o->help);
	}
	print_md_group_end(f, g);
	fprintf(f, "%s\n", CONFIG_MD_END);
}

/*
 * @md (the table's markdown: `code` spans and [text](link)s) as scdoc: code
 * in bold, links as their text, scdoc's own characters escaped.
 */
static void scd_text(FILE *f, const char *md)
{
	bool code = false;

	for (const char *p = md; *p; p++) {
		if (*p == '`') {
			code = !code;
			fputc('*', f);
		} else if (*p == '[' && !code && strstr(p, "](")) {
			const char *close = strstr(p, "](");
			const char *end = strchr(close, ')');

			if (!end || memchr(p, '\n', (size_t)(end - p))) {
				fputc('[', f);
				continue;
			}
			for (const char *q = p + 1; q < close; q++) {
				if (*q == '*' || *q == '_' || *q == '\\')
					fputc('\\', f);
				fputc(*q == '`' ? '*' : *q, f);
			}
			p = end;
		} else {
			if (*p == '*' || *p == '_' || *p == '\\')
				fputc('\\', f);
			fputc(*p, f);
		}
	}
}

void config_print_scdoc(FILE *f)
{
	size_t next = 0;

	fprintf(f, "%s\n", CONFIG_SCD_BEGIN);
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		const struct opt *o = &opts[i];
		char limits[128];

		if (next < ARRAY_SIZE(groups) && !strcmp(groups[next].first, o->name)) {
			fprintf(f, "## ");
			scd_text(f, groups[next++].title);
			fprintf(f, "\n\n");
		}
		fmt_limits(o, limits, sizeof(limits));
		fprintf(f, "*");
		scd_text(f, o->name);
		fprintf(f, "* = _%s_\n\tDefault: ",
			o->type == OPT_AUTO ? "auto|on|off" : type_hint(o->type));
		if (o->def[0]) {
			fprintf(f, "*");
			scd_text(f, o->def);
			fprintf(f, "*");
		} else {
			fprintf(f, "empty");
		}
		if (limits[0] && strcmp(limits, "—")) {
			fprintf(f, ". Limits: ");
			scd_text(f, limits);
		}
		fprintf(f, ".\n\n\t");
		scd_text(f, o->doc ? o->doc : o->help);
		fprintf(f, "\n\n");
	}
	fprintf(f, "%s\n", CONFIG_SCD_END);
}
