/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_backend_dir: the dir:// backend on a temp tree: scan, lookup,
 * getattr, readdir, readlink and statfs through the ops table; read_chunk
 * bytes; hard links (one inode, the source's nlink, one content id); files
 * changed after the scan give -EIO; a removed source is served
 * from the snapshot saved in the cache dir (with the cache still serving
 * its bytes); URI forms and errors; the saved scan reused for an unchanged
 * tree, and not for a changed one, bad stamps or dir_reuse_scan = no.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cache/cache.h"
#include "config.h"
#include "backend/dirscan.h"
#include "log.h"
#include "util.h"

#define CS	(64u * 1024)
/* "ünïcødé" in UTF-8 */
#define UNAME	"\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb8" "d" "\xc3\xa9"

struct tctx {
	char dir[PATH_MAX / 2];
	char src[PATH_MAX / 2 + 16];	/* the dataset */
	char cdir[PATH_MAX / 2 + 16];	/* cache_dir */
	char uri[PATH_MAX];
	struct sfs_config cfg;
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

/* The bytes of test file @seed at [@off, @off + @len). */
static void pattern(uint32_t seed, uint64_t off, void *buf, size_t len)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++) {
		uint64_t o = off + i;

		p[i] = (unsigned char)((o * 2654435761u >> 13) ^ (o >> 7) ^ seed);
	}
}

static void make_file(const char *dir, const char *rel, uint32_t seed, uint64_t size,
		      mode_t mode)
{
	char path[PATH_MAX * 2];
	unsigned char *buf = malloc(size ? size : 1);
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	pattern(seed, 0, buf, size);
	assert_int_equal(pwrite_full(fd, buf, size, 0), (ssize_t)size);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
	free(buf);
}

static void sub(const struct tctx *t, const char *rel, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", t->src, rel);
}

/*
 *   a.txt            3 chunks + 5 bytes, 0640
 *   empty            0 bytes
 *   exact            1 chunk exactly
 *   file with space  10 bytes
 *   UNAME            7 bytes
 *   link -> a.txt, dangling -> nowhere/at/all
 *   fifo             (skipped by the scan)
 *   sub/ (0750), sub/deeper/c.bin (2 chunks + 1), sub/deeper/up -> ../../a.txt
 */
static int setup(void **state)
{
	const char *base = getenv("TMPDIR");
	struct tctx *t = calloc(1, sizeof(*t));
	char p[PATH_MAX * 2];
	char err[256];

	snprintf(t->dir, sizeof(t->dir), "%s/test_backend_dir.XXXXXX",
		 base && *base ? base : "/tmp");
	if (!mkdtemp(t->dir))
		return -1;
	snprintf(t->src, sizeof(t->src), "%s/src", t->dir);
	snprintf(t->cdir, sizeof(t->cdir), "%s/cache", t->dir);
	snprintf(t->uri, sizeof(t->uri), "dir://%s", t->src);
	mkdir(t->src, 0755);
	make_file(t->src, "a.txt", 1, 3ull * CS + 5, 0640);
	make_file(t->src, "empty", 2, 0, 0644);
	make_file(t->src, "exact", 3, CS, 0644);
	make_file(t->src, "file with space", 4, 10, 0644);
	make_file(t->src, UNAME, 5, 7, 0644);
	sub(t, "link", p, sizeof(p));
	symlink("a.txt", p);
	sub(t, "dangling", p, sizeof(p));
	symlink("nowhere/at/all", p);
	sub(t, "fifo", p, sizeof(p));
	mkfifo(p, 0600);
	sub(t, "sub", p, sizeof(p));
	mkdir(p, 0750);
	chmod(p, 0750);
	sub(t, "sub/deeper", p, sizeof(p));
	mkdir(p, 0755);
	make_file(p, "c.bin", 6, 2ull * CS + 1, 0644);
	sub(t, "sub/deeper/up", p, sizeof(p));
	symlink("../../a.txt", p);

	config_init(&t->cfg);
	if (config_set(&t->cfg, "cache_dir", t->cdir, err, sizeof(err)) ||
	    config_set(&t->cfg, "chunk_size", "64K", err, sizeof(err)))
		return -1;
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tctx *t = *state;

	config_release(&t->cfg);
	nftw(t->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(t);
	return 0;
}

static struct backend *open_be(const char *uri, const struct sfs_config *cfg)
{
	struct backend *be = NULL;
	char err[512] = "";
	int r = backend_open(uri, cfg, &be, err, sizeof(err));

	if (r)
		fail_msg("backend_open(%s) = %d: %s", uri, r, err);
	assert_non_null(be);
	return be;
}

/* The config with dir_scan_background off: the snapshot is saved when open returns. */
static const struct sfs_config *foreground(struct tctx *t)
{
	char err[256];

	assert_int_equal(config_set(&t->cfg, "dir_scan_background", "no", err, sizeof(err)), 0);
	return &t->cfg;
}

static void lookup_path(struct backend *be, const char *path, struct sfs_attr *a)
{
	char buf[PATH_MAX];
	uint64_t ino = SFS_ROOT_INO;
	int r;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *save, *name = strtok_r(buf, "/", &save); name;
	     name = strtok_r(NULL, "/", &save)) {
		r = be->ops->lookup(be, ino, name, a);
		if (r)
			fail_msg("lookup %s (at %s): %d", path, name, r);
		ino = a->ino;
	}
}

/* getattr/lookup agree with lstat(2) of the source. */
static void check_attr(const struct tctx *t, struct backend *be, const char *rel)
{
	char p[PATH_MAX * 2];
	struct sfs_attr a, g;
	struct stat st;

	sub(t, rel, p, sizeof(p));
	assert_int_equal(lstat(p, &st), 0);
	lookup_path(be, rel, &a);
	assert_int_equal(a.mode, st.st_mode);
	assert_int_equal(a.uid, st.st_uid);
	assert_int_equal(a.gid, st.st_gid);
	if (!S_ISDIR(st.st_mode))
		assert_int_equal(a.size, st.st_size);
	assert_int_equal(a.mtime.tv_sec, st.st_mtim.tv_sec);
	assert_int_equal(a.mtime.tv_nsec, st.st_mtim.tv_nsec);
	assert_int_equal(a.ctime.tv_sec, st.st_ctim.tv_sec);
	assert_int_equal(a.ctime.tv_nsec, st.st_ctim.tv_nsec);
	if (S_ISREG(st.st_mode))
		assert_false(sfs_id_is_zero(&a.content));
	else
		assert_true(sfs_id_is_zero(&a.content));
	assert_true(a.ino > SFS_ROOT_INO);
	assert_int_equal(be->ops->getattr(be, a.ino, &g), 0);
	assert_int_equal(g.ino, a.ino);
	assert_int_equal(g.mode, a.mode);
	assert_int_equal(g.size, a.size);
	assert_true(sfs_id_eq(&g.content, &a.content));
}

/* Every chunk of @rel read through read_chunk matches the pattern. */
static void check_chunks(struct backend *be, const char *rel, uint32_t seed)
{
	struct sfs_attr a;
	unsigned char *got = malloc(be->chunk_size), *want = malloc(be->chunk_size);
	uint32_t n;

	lookup_path(be, rel, &a);
	n = (uint32_t)DIV_ROUND_UP(a.size, be->chunk_size);
	for (uint32_t i = 0; i < n; i++) {
		size_t len = backend_chunk_len(a.size, be->chunk_size, i);

		memset(got, 0xee, be->chunk_size);
		assert_int_equal(be->ops->read_chunk(be, &a, i, got, len), (int)len);
		pattern(seed, (uint64_t)i * be->chunk_size, want, len);
		assert_memory_equal(got, want, len);
	}
	free(got);
	free(want);
}

static void test_scan_and_metadata(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, &t->cfg);
	struct sfs_attr a;
	struct stat st;
	uint64_t bytes, files;
	char buf[64];

	assert_string_equal(be->ops->scheme, "dir");
	assert_string_equal(be->uri, t->uri);
	assert_int_equal(be->chunk_size, CS);

	/* the root */
	assert_int_equal(be->ops->getattr(be, SFS_ROOT_INO, &a), 0);
	assert_true(S_ISDIR(a.mode));
	assert_int_equal(a.ino, SFS_ROOT_INO);
	assert_int_equal(stat(t->src, &st), 0);
	assert_int_equal(a.mode, st.st_mode);

	check_attr(t, be, "a.txt");
	check_attr(t, be, "empty");
	check_attr(t, be, "exact");
	check_attr(t, be, "file with space");
	check_attr(t, be, UNAME);
	check_attr(t, be, "link");
	check_attr(t, be, "dangling");
	check_attr(t, be, "sub");
	check_attr(t, be, "sub/deeper");
	check_attr(t, be, "sub/deeper/c.bin");
	check_attr(t, be, "sub/deeper/up");

	lookup_path(be, "a.txt", &a);
	assert_int_equal(a.mode, S_IFREG | 0640);
	assert_int_equal(a.size, 3ull * CS + 5);
	lookup_path(be, "sub", &a);
	assert_int_equal(a.mode, S_IFDIR | 0750);

	/* misses */
	assert_int_equal(be->ops->lookup(be, SFS_ROOT_INO, "nope", &a), -ENOENT);
	assert_int_equal(be->ops->lookup(be, SFS_ROOT_INO, "fifo", &a), -ENOENT);
	assert_int_equal(be->ops->lookup(be, SFS_ROOT_INO, "A.TXT", &a), -ENOENT);
	lookup_path(be, "a.txt", &a);
	assert_int_equal(be->ops->lookup(be, a.ino, "x", &a), -ENOTDIR);
	assert_int_not_equal(be->ops->getattr(be, 1000000, &a), 0);

	/* readlink: the target, not NUL-terminated */
	lookup_path(be, "link", &a);
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(be->ops->readlink(be, a.ino, buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "a.txt", 5);
	assert_int_equal(buf[5], 'x');
	assert_int_equal(a.size, 5);
	lookup_path(be, "dangling", &a);
	assert_int_equal(be->ops->readlink(be, a.ino, buf, sizeof(buf)), 14);
	assert_memory_equal(buf, "nowhere/at/all", 14);
	assert_int_equal(be->ops->readlink(be, a.ino, buf, 3), 3);	/* truncated */
	lookup_path(be, "sub/deeper/up", &a);
	assert_int_equal(be->ops->readlink(be, a.ino, buf, sizeof(buf)), 11);
	assert_memory_equal(buf, "../../a.txt", 11);
	lookup_path(be, "a.txt", &a);
	assert_int_equal(be->ops->readlink(be, a.ino, buf, sizeof(buf)), -EINVAL);

	/* statfs: bytes of regular files, entries */
	assert_non_null(be->ops->statfs);
	assert_int_equal(be->ops->statfs(be, &bytes, &files), 0);
	assert_int_equal(bytes, (3ull * CS + 5) + 0 + CS + 10 + 7 + (2ull * CS + 1));
	print_message("statfs: %llu bytes, %llu files\n", (unsigned long long)bytes,
		      (unsigned long long)files);
	assert_true(files >= 12 && files <= 13);	/* 12 entries below the root */

	backend_close(be);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_readdir(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, &t->cfg);
	const char *want[] = { "a.txt", "dangling", "empty", "exact", "file with space",
			       "link", "sub", UNAME };
	struct sfs_dirlist dl = { 0 };
	struct sfs_attr a;

	qsort(want, ARRAY_SIZE(want), sizeof(want[0]), cmp_name);
	assert_int_equal(be->ops->readdir(be, SFS_ROOT_INO, &dl), 0);
	assert_int_equal(dl.n, ARRAY_SIZE(want));	/* no fifo, no . or .. */
	for (size_t i = 0; i < dl.n; i++) {
		assert_string_equal(dl.ent[i].name, want[i]);	/* sorted, stable */
		assert_int_equal(be->ops->lookup(be, SFS_ROOT_INO, dl.ent[i].name, &a), 0);
		if (dl.ent[i].ino)
			assert_int_equal(dl.ent[i].ino, a.ino);
		assert_int_equal(dl.ent[i].mode & S_IFMT, a.mode & S_IFMT);
	}
	sfs_dirlist_release(&dl);
	assert_int_equal(dl.n, 0);
	assert_null(dl.ent);

	lookup_path(be, "sub/deeper", &a);
	assert_int_equal(be->ops->readdir(be, a.ino, &dl), 0);
	assert_int_equal(dl.n, 2);
	assert_string_equal(dl.ent[0].name, "c.bin");
	assert_string_equal(dl.ent[1].name, "up");
	assert_true(S_ISLNK(dl.ent[1].mode));
	sfs_dirlist_release(&dl);

	lookup_path(be, "a.txt", &a);
	assert_int_equal(be->ops->readdir(be, a.ino, &dl), -ENOTDIR);
	backend_close(be);
}

static void test_read_chunk(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, &t->cfg);

	check_chunks(be, "a.txt", 1);
	check_chunks(be, "exact", 3);
	check_chunks(be, "file with space", 4);
	check_chunks(be, UNAME, 5);
	check_chunks(be, "sub/deeper/c.bin", 6);
	backend_close(be);

	/* another chunk size gives other chunk boundaries, same bytes */
	char err[256];

	assert_int_equal(config_set(&t->cfg, "chunk_size", "128K", err, sizeof(err)), 0);
	be = open_be(t->uri, &t->cfg);
	assert_int_equal(be->chunk_size, 128 * 1024);
	unsigned char *got = malloc(128 * 1024), *want = malloc(128 * 1024);
	struct sfs_attr a;

	lookup_path(be, "a.txt", &a);
	assert_int_equal(be->ops->read_chunk(be, &a, 1, got, CS + 5), (int)(CS + 5));
	pattern(1, 128 * 1024, want, CS + 5);
	assert_memory_equal(got, want, CS + 5);
	free(got);
	free(want);
	backend_close(be);
}

/* A file changed after the scan: read_chunk says EIO, never mixes versions. */
static void test_changed_after_scan(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, &t->cfg);
	unsigned char buf[CS];
	struct sfs_attr a, c, e;
	char p[PATH_MAX * 2];
	int fd;

	lookup_path(be, "a.txt", &a);
	lookup_path(be, "sub/deeper/c.bin", &c);
	lookup_path(be, "exact", &e);

	/* appended to: size and mtime differ */
	usleep(20000);
	sub(t, "a.txt", p, sizeof(p));
	fd = open(p, O_WRONLY | O_APPEND);
	assert_int_equal(write(fd, "more", 4), 4);
	close(fd);
	assert_int_equal(be->ops->read_chunk(be, &a, 0, buf, CS), -EIO);
	assert_int_equal(be->ops->read_chunk(be, &a, 3, buf, 5), -EIO);

	/* rewritten in place, same size: mtime differs */
	sub(t, "sub/deeper/c.bin", p, sizeof(p));
	fd = open(p, O_WRONLY);
	assert_int_equal(pwrite(fd, "X", 1, 10), 1);
	close(fd);
	assert_int_equal(be->ops->read_chunk(be, &c, 0, buf, CS), -EIO);

	/* deleted, or replaced by another file */
	sub(t, "exact", p, sizeof(p));
	assert_int_equal(unlink(p), 0);
	assert_int_equal(be->ops->read_chunk(be, &e, 0, buf, CS), -EIO);
	make_file(t->src, "exact", 3, CS, 0644);	/* same bytes, new inode */
	assert_int_equal(be->ops->read_chunk(be, &e, 0, buf, CS), -EIO);

	/* untouched files still read */
	check_chunks(be, "file with space", 4);
	backend_close(be);

	/* a rescan sees the new versions under new content ids */
	be = open_be(t->uri, &t->cfg);
	struct sfs_attr a2;

	lookup_path(be, "a.txt", &a2);
	assert_int_equal(a2.size, 3ull * CS + 9);
	assert_false(sfs_id_eq(&a.content, &a2.content));
	assert_int_equal(be->ops->read_chunk(be, &a2, 3, buf, 9), 9);
	assert_memory_equal(buf + 5, "more", 4);
	backend_close(be);
}

/*
 * backend_dir.c says chunk reads check "size, mtime and ctime": a file
 * rewritten in place with its mtime put back (touch -d, rsync -t, tar x)
 * still has a new ctime and must give EIO, not the new bytes.
 */
static void test_changed_mtime_restored(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, &t->cfg);
	unsigned char buf[CS];
	struct timespec times[2];
	struct sfs_attr a;
	struct stat st;
	char p[PATH_MAX * 2];
	int fd;

	lookup_path(be, "sub/deeper/c.bin", &a);
	sub(t, "sub/deeper/c.bin", p, sizeof(p));
	assert_int_equal(stat(p, &st), 0);
	usleep(20000);
	fd = open(p, O_WRONLY);
	assert_int_equal(pwrite(fd, "XYZ", 3, 100), 3);
	times[0] = st.st_atim;
	times[1] = st.st_mtim;
	assert_int_equal(futimens(fd, times), 0);
	close(fd);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mtim.tv_nsec, a.mtime.tv_nsec);	/* mtime as scanned */
	assert_true(st.st_ctim.tv_sec != a.ctime.tv_sec ||
		    st.st_ctim.tv_nsec != a.ctime.tv_nsec);
	int r = be->ops->read_chunk(be, &a, 0, buf, CS);

	if (r != -EIO)
		fail_msg("read_chunk of a file rewritten with its mtime restored = %d "
			 "(bytes 100..102 \"%.3s\"): expected -EIO", r, buf + 100);
	backend_close(be);
}

/* The source gone: the snapshot in the cache dir serves the metadata. */
static void test_offline_snapshot(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, foreground(t));
	struct sfs_dirlist dl = { 0 };
	struct sfs_attr a, a_off;
	char moved[PATH_MAX + 16], snapdir[PATH_MAX], err[512], buf[64];
	uint64_t bytes, files, bytes2, files2;

	lookup_path(be, "a.txt", &a);
	assert_int_equal(be->ops->statfs(be, &bytes, &files), 0);
	backend_close(be);
	snprintf(snapdir, sizeof(snapdir), "%s/snapshots", t->cdir);
	assert_int_equal(access(snapdir, F_OK), 0);

	/* removed (moved away) */
	snprintf(moved, sizeof(moved), "%s.moved", t->src);
	assert_int_equal(rename(t->src, moved), 0);

	/* another chunk size configured: the snapshot's wins */
	assert_int_equal(config_set(&t->cfg, "chunk_size", "1M", err, sizeof(err)), 0);
	be = open_be(t->uri, &t->cfg);
	assert_int_equal(be->chunk_size, CS);
	lookup_path(be, "a.txt", &a_off);
	assert_int_equal(a_off.ino, a.ino);
	assert_int_equal(a_off.size, a.size);
	assert_true(sfs_id_eq(&a_off.content, &a.content));
	assert_int_equal(be->ops->readdir(be, SFS_ROOT_INO, &dl), 0);
	assert_int_equal(dl.n, 8);
	sfs_dirlist_release(&dl);
	lookup_path(be, "sub/deeper/up", &a_off);
	assert_int_equal(be->ops->readlink(be, a_off.ino, buf, sizeof(buf)), 11);
	assert_int_equal(be->ops->statfs(be, &bytes2, &files2), 0);
	assert_int_equal(bytes2, bytes);
	assert_int_equal(files2, files);
	/* data that is not cached cannot be had */
	lookup_path(be, "a.txt", &a_off);
	assert_int_equal(be->ops->read_chunk(be, &a_off, 0, buf, sizeof(buf)), -EIO);
	backend_close(be);

	/* a trailing slash names the same source */
	char uri2[PATH_MAX + 8];

	snprintf(uri2, sizeof(uri2), "%s//", t->uri);
	be = open_be(uri2, &t->cfg);
	lookup_path(be, "a.txt", &a_off);
	backend_close(be);

	/* without the snapshot (another cache_dir) it fails, saying why */
	struct sfs_config other;
	char odir[PATH_MAX + 16];

	snprintf(odir, sizeof(odir), "%s/other-cache", t->dir);
	config_init(&other);
	assert_int_equal(config_set(&other, "cache_dir", odir, err, sizeof(err)), 0);
	be = NULL;
	err[0] = '\0';
	assert_int_equal(backend_open(t->uri, &other, &be, err, sizeof(err)), -ENOENT);
	assert_null(be);
	print_message("no source, no snapshot: %s\n", err);
	assert_non_null(strstr(err, t->src));
	assert_non_null(strstr(err, "No such file"));
	config_release(&other);

	/* the source back: scanned again, online */
	assert_int_equal(rename(moved, t->src), 0);
	be = open_be(t->uri, &t->cfg);
	assert_int_equal(be->chunk_size, 1024 * 1024);
	check_chunks(be, "a.txt", 1);
	backend_close(be);
}

/* A damaged snapshot is refused with a message, not trusted. */
static void test_offline_bad_snapshot(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, foreground(t));
	char moved[PATH_MAX + 16], err[512] = "", cmd[PATH_MAX * 2];

	backend_close(be);
	snprintf(cmd, sizeof(cmd),
		 "for f in '%s'/snapshots/*.manifest; do truncate -s 100 \"$f\"; done", t->cdir);
	assert_int_equal(system(cmd), 0);
	snprintf(moved, sizeof(moved), "%s.moved", t->src);
	assert_int_equal(rename(t->src, moved), 0);
	be = NULL;
	assert_true(backend_open(t->uri, &t->cfg, &be, err, sizeof(err)) < 0);
	assert_null(be);
	print_message("damaged snapshot: %s\n", err);
	assert_non_null(strstr(err, "snapshot"));
	assert_int_equal(rename(moved, t->src), 0);
}

/* The whole point of the snapshot: cached bytes are served without the source. */
struct be_src {
	struct backend *be;
	struct sfs_attr attr;
	unsigned fetches;
};

static int be_fetch(void *arg, uint32_t idx, void *buf, size_t len)
{
	struct be_src *s = arg;

	s->fetches++;
	return s->be->ops->read_chunk(s->be, &s->attr, idx, buf, len);
}

static void test_offline_serves_cache(void **state)
{
	struct tctx *t = *state;
	struct cache_opts o = { .dir = t->cdir, .fd_cache = 16 };
	struct backend *be = open_be(t->uri, &t->cfg);
	struct be_src s = { .be = be };
	struct cache_source src = { .fetch = be_fetch, .arg = &s, .uid = 1000 };
	unsigned char *got = malloc(4 * CS), *want = malloc(4 * CS);
	char moved[PATH_MAX + 16], err[512];
	struct cache *c;
	struct cfile *cf;
	uint64_t size;

	/* the cache and the snapshot share cache_dir */
	assert_int_equal(cache_create(&o, &c, err, sizeof(err)), 0);
	lookup_path(be, "a.txt", &s.attr);
	size = s.attr.size;
	pattern(1, 0, want, size);
	assert_int_equal(cache_file_get(c, &s.attr.content, size, be->chunk_size, &cf), 0);
	assert_int_equal(cache_read(c, cf, 0, got, size, &src), (ssize_t)size);
	assert_memory_equal(got, want, size);
	assert_int_equal(s.fetches, 4);
	cache_file_put(c, cf);
	cache_destroy(c);
	backend_close(be);

	snprintf(moved, sizeof(moved), "%s.moved", t->src);
	assert_int_equal(rename(t->src, moved), 0);

	be = open_be(t->uri, &t->cfg);
	s = (struct be_src){ .be = be };
	assert_int_equal(cache_create(&o, &c, err, sizeof(err)), 0);
	lookup_path(be, "a.txt", &s.attr);
	assert_int_equal(cache_file_get(c, &s.attr.content, s.attr.size, be->chunk_size, &cf), 0);
	memset(got, 0, 4 * CS);
	assert_int_equal(cache_read(c, cf, 0, got, size, &src), (ssize_t)size);
	assert_memory_equal(got, want, size);
	assert_int_equal(s.fetches, 0);
	cache_file_put(c, cf);

	/* an uncached file: EIO */
	lookup_path(be, "exact", &s.attr);
	assert_int_equal(cache_file_get(c, &s.attr.content, s.attr.size, be->chunk_size, &cf), 0);
	assert_int_equal(cache_read(c, cf, 0, got, 100, &src), -EIO);
	cache_file_put(c, cf);
	cache_destroy(c);
	backend_close(be);
	assert_int_equal(rename(moved, t->src), 0);
	free(got);
	free(want);
}

static void test_uris(void **state)
{
	struct tctx *t = *state;
	struct backend *be = NULL;
	char err[512] = "";

	/* a bare absolute path means dir:// */
	be = open_be(t->src, &t->cfg);
	assert_string_equal(be->ops->scheme, "dir");
	backend_close(be);

	be = NULL;
	assert_int_equal(backend_open("dir://relative/path", &t->cfg, &be, err, sizeof(err)),
			 -EINVAL);
	assert_null(be);
	assert_non_null(strstr(err, "dir:///"));
	assert_int_equal(backend_open("ftp://host/x", &t->cfg, &be, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unknown source scheme"));
	assert_int_equal(backend_open("dirx:///tmp", &t->cfg, &be, err, sizeof(err)), -EINVAL);
	assert_int_equal(backend_open("", &t->cfg, &be, err, sizeof(err)), -EINVAL);

	/* a file, not a directory */
	char p[PATH_MAX * 2];

	snprintf(p, sizeof(p), "dir://%s/a.txt", t->src);
	assert_true(backend_open(p, &t->cfg, &be, err, sizeof(err)) < 0);
	assert_null(be);
	backend_close(NULL);
}

/* Names of one file are one inode with the source's nlink and content id. */
static void test_hard_links(void **state)
{
	static const char *const names[] = { "a.txt", "hard b", "sub/deeper/hard-c" };
	struct tctx *t = *state;
	char p[PATH_MAX * 2], q[PATH_MAX * 2];
	struct sfs_attr a, first, other;
	struct sfs_dirlist dl;
	struct backend *be;
	uint64_t bytes;
	bool seen = false;

	sub(t, "a.txt", p, sizeof(p));
	for (size_t i = 1; i < ARRAY_SIZE(names); i++) {
		sub(t, names[i], q, sizeof(q));
		assert_int_equal(link(p, q), 0);
	}
	/* a file whose other name is outside the dataset */
	sub(t, "exact", p, sizeof(p));
	snprintf(q, sizeof(q), "%s/outside", t->dir);
	assert_int_equal(link(p, q), 0);

	be = open_be(t->uri, &t->cfg);
	lookup_path(be, names[0], &first);
	assert_int_equal(first.nlink, 3);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		lookup_path(be, names[i], &a);
		assert_int_equal(a.ino, first.ino);
		assert_int_equal(a.nlink, 3);
		assert_int_equal(a.size, 3ull * CS + 5);
		assert_true(sfs_id_eq(&a.content, &first.content));
		assert_int_equal(be->ops->getattr(be, a.ino, &a), 0);
		assert_int_equal(a.ino, first.ino);
		check_chunks(be, names[i], 1);
	}
	lookup_path(be, "sub/deeper", &a);
	assert_int_equal(be->ops->readdir(be, a.ino, &dl), 0);
	for (size_t i = 0; i < dl.n; i++) {
		if (strcmp(dl.ent[i].name, "hard-c"))
			continue;
		assert_int_equal(dl.ent[i].ino, first.ino);
		seen = true;
	}
	sfs_dirlist_release(&dl);
	assert_true(seen);

	/* one name in the tree: an inode of its own, nlink as the source says */
	lookup_path(be, "exact", &other);
	assert_int_not_equal(other.ino, first.ino);
	assert_int_equal(other.nlink, 2);

	/* the data counts once */
	assert_int_equal(be->ops->statfs(be, &bytes, NULL), 0);
	assert_int_equal(bytes, 3ull * CS + 5 + CS + 10 + 7 + 2ull * CS + 1);
	backend_close(be);
}

/* The stamp file of the saved scan of @t's source (the only one there). */
static void stamps_path(const struct tctx *t, char *out, size_t len)
{
	char cmd[PATH_MAX * 2];
	FILE *f;

	snprintf(cmd, sizeof(cmd), "ls %s/snapshots/*.dirs", t->cdir);
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_non_null(fgets(out, (int)len, f));
	out[strcspn(out, "\n")] = '\0';
	pclose(f);
}

/* Rewrite @rel in place with the same size: no directory changes. */
static void rewrite_in_place(const struct tctx *t, const char *rel)
{
	char p[PATH_MAX * 2];
	int fd;

	usleep(20000);
	sub(t, rel, p, sizeof(p));
	fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "NEWBYTES!!", 10, 0), 10);
	close(fd);
}

/*
 * An unchanged tree is served from the saved scan: proven by a file
 * rewritten in place (which the directory stamps cannot see) still having
 * its old attributes, so that its read fails with EIO; that EIO removes the
 * stamps, and the next mount scans and serves the new bytes.
 */
static void test_reuse_saved_scan(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, foreground(t));
	unsigned char buf[16];
	char stamps[PATH_MAX * 2];
	struct sfs_attr a, b;

	lookup_path(be, "file with space", &a);
	backend_close(be);
	stamps_path(t, stamps, sizeof(stamps));
	rewrite_in_place(t, "file with space");

	be = open_be(t->uri, &t->cfg);
	lookup_path(be, "file with space", &b);
	assert_true(sfs_id_eq(&a.content, &b.content));	/* the saved scan's */
	check_attr(t, be, "sub/deeper/c.bin");
	check_chunks(be, "sub/deeper/c.bin", 6);
	assert_int_equal(be->ops->read_chunk(be, &b, 0, buf, 10), -EIO);
	assert_int_equal(access(stamps, F_OK), -1);	/* removed by that EIO */
	backend_close(be);

	be = open_be(t->uri, &t->cfg);
	lookup_path(be, "file with space", &b);
	assert_false(sfs_id_eq(&a.content, &b.content));
	assert_int_equal(be->ops->read_chunk(be, &b, 0, buf, 10), 10);
	assert_memory_equal(buf, "NEWBYTES!!", 10);
	assert_int_equal(access(stamps, F_OK), 0);	/* saved again */
	backend_close(be);
}

/* A name added, removed or renamed anywhere, or a chmod of a directory: a scan. */
static void test_reuse_sees_names(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, &t->cfg);
	char p[PATH_MAX * 2], q[PATH_MAX * 2];
	struct sfs_attr a;

	backend_close(be);
	make_file(t->src, "sub/deeper/new.bin", 7, 100, 0644);
	be = open_be(t->uri, &t->cfg);
	lookup_path(be, "sub/deeper/new.bin", &a);
	assert_int_equal(a.size, 100);
	backend_close(be);

	sub(t, "sub/deeper/new.bin", p, sizeof(p));
	sub(t, "sub/deeper/renamed.bin", q, sizeof(q));
	assert_int_equal(rename(p, q), 0);
	be = open_be(t->uri, &t->cfg);
	assert_int_equal(be->ops->lookup(be, SFS_ROOT_INO, "sub", &a), 0);
	lookup_path(be, "sub/deeper", &a);
	assert_int_equal(be->ops->lookup(be, a.ino, "new.bin", &a), -ENOENT);
	lookup_path(be, "sub/deeper/renamed.bin", &a);
	backend_close(be);

	sub(t, "sub", p, sizeof(p));
	assert_int_equal(chmod(p, 0700), 0);	/* the directory's ctime */
	be = open_be(t->uri, &t->cfg);
	lookup_path(be, "sub", &a);
	assert_int_equal(a.mode & 07777, 0700);
	backend_close(be);
}

/* Stamps that are not well formed, or of another chunk size: a scan, never a failure. */
static void test_reuse_bad_stamps(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, foreground(t));
	char stamps[PATH_MAX * 2], err[256];
	unsigned char *good;
	struct stat st;
	size_t len;
	int fd;

	backend_close(be);
	stamps_path(t, stamps, sizeof(stamps));
	assert_int_equal(stat(stamps, &st), 0);
	len = (size_t)st.st_size;
	good = malloc(len);
	fd = open(stamps, O_RDONLY);
	assert_int_equal(pread_full(fd, good, len, 0), (ssize_t)len);
	close(fd);
	for (size_t cut = 0; cut < len; cut += 1 + cut / 3) {
		/* truncated, then the same length with one byte flipped */
		for (int flip = 0; flip < 2; flip++) {
			unsigned char *bad = malloc(len);

			memcpy(bad, good, len);
			if (flip)
				bad[cut] ^= 0x5a;
			assert_int_equal(write_file_atomic(stamps, bad, flip ? len : cut,
							   0600, false), 0);
			free(bad);
			be = open_be(t->uri, &t->cfg);
			check_attr(t, be, "sub/deeper/c.bin");
			check_chunks(be, "a.txt", 1);
			backend_close(be);
		}
	}
	free(good);

	/* another chunk size: scanned again, with its own chunk size */
	assert_int_equal(config_set(&t->cfg, "chunk_size", "128K", err, sizeof(err)), 0);
	be = open_be(t->uri, &t->cfg);
	assert_int_equal(be->chunk_size, 128 * 1024);
	check_chunks(be, "a.txt", 1);
	backend_close(be);
}

/* dir_reuse_scan = no: always a scan. */
static void test_reuse_off(void **state)
{
	struct tctx *t = *state;
	struct backend *be = open_be(t->uri, &t->cfg);
	unsigned char buf[16];
	char err[256];
	struct sfs_attr a;

	backend_close(be);
	rewrite_in_place(t, "file with space");
	assert_int_equal(config_set(&t->cfg, "dir_reuse_scan", "no", err, sizeof(err)), 0);
	be = open_be(t->uri, &t->cfg);
	lookup_path(be, "file with space", &a);
	assert_int_equal(be->ops->read_chunk(be, &a, 0, buf, 10), 10);
	assert_memory_equal(buf, "NEWBYTES!!", 10);
	backend_close(be);
}

/* The manifest is a function of the tree, not of the scan's threads or timing. */
static void test_scan_same_bytes(void **state)
{
	struct tctx *t = *state;
	struct dirscan_result r[3];
	char p[PATH_MAX * 2], q[PATH_MAX * 2], err[512];
	int rootfd;

	for (int i = 0; i < 30; i++) {
		snprintf(p, sizeof(p), "%s/d%02d", t->src, i);
		assert_int_equal(mkdir(p, 0755), 0);
		make_file(p, "f", (uint32_t)i, (uint64_t)i * 10, 0644);
		/* names of one file in several directories, none first for sure */
		snprintf(q, sizeof(q), "%s/d%02d/hard", t->src, i);
		sub(t, "d00/f", p, sizeof(p));
		if (i)
			assert_int_equal(link(p, q), 0);
	}
	rootfd = open(t->src, O_RDONLY | O_DIRECTORY);
	assert_true(rootfd >= 0);
	/* the first reads the directories (their atimes move), the others compare */
	for (int i = 0; i < 3; i++)
		if (dirscan_run(rootfd, t->src, i == 1 ? 1 : 8, CS, &r[i], err, sizeof(err)))
			fail_msg("dirscan_run: %s", err);
	close(rootfd);
	assert_int_equal(r[1].manifest_len, r[2].manifest_len);
	assert_memory_equal(r[1].manifest, r[2].manifest, r[1].manifest_len);
	for (int i = 0; i < 3; i++) {
		free(r[i].manifest);
		free(r[i].stamps);
	}
}

/* Every entry under @dir (inode @ino, path @rel), depth first, as "path ino mode nlink size content\n". */
static void walk(struct backend *be, uint64_t ino, const char *rel, FILE *out)
{
	struct sfs_dirlist dl;

	assert_int_equal(be->ops->readdir(be, ino, &dl), 0);
	for (size_t i = 0; i < dl.n; i++) {
		char p[PATH_MAX];
		struct sfs_attr a;

		snprintf(p, sizeof(p), "%s%s%s", rel, rel[0] ? "/" : "", dl.ent[i].name);
		assert_int_equal(be->ops->lookup(be, ino, dl.ent[i].name, &a), 0);
		assert_int_equal(dl.ent[i].ino, a.ino);
		fprintf(out, "%s %" PRIu64 " %o %u %" PRIu64 " %016" PRIx64 "%016" PRIx64 "\n",
			p, a.ino, a.mode, a.nlink, a.size, a.content.hi, a.content.lo);
		if (S_ISDIR(a.mode))
			walk(be, a.ino, p, out);
	}
	sfs_dirlist_release(&dl);
}

/*
 * dir_scan_background: the mount answers from the scan while it runs (slowed
 * here), with the inode numbers and attributes the finished manifest gives.
 */
static void test_background_same_answers(void **state)
{
	struct tctx *t = *state;
	char p[PATH_MAX * 2], *live = NULL, *done = NULL;
	size_t llen = 0, dlen = 0;
	uint64_t bytes, files;
	struct backend *be;
	struct sfs_attr a;
	FILE *f;

	/* more directories, so that the scan is still running below */
	for (int i = 0; i < 20; i++) {
		snprintf(p, sizeof(p), "%s/d%02d", t->src, i);
		assert_int_equal(mkdir(p, 0755), 0);
		make_file(p, "f", (uint32_t)i, (uint64_t)i * 100, 0644);
		snprintf(p, sizeof(p), "%s/d%02d/e", t->src, i);
		assert_int_equal(mkdir(p, 0755), 0);
	}
	setenv("STAGEFS_TEST_SCAN_DELAY_US", "20000", 1);
	be = open_be(t->uri, &t->cfg);
	unsetenv("STAGEFS_TEST_SCAN_DELAY_US");
	/* 42 directories at 20 ms each over the threads: not done yet */
	assert_int_equal(be->ops->statfs(be, &bytes, &files), -EAGAIN);
	f = open_memstream(&live, &llen);
	walk(be, SFS_ROOT_INO, "", f);
	fclose(f);
	while (be->ops->statfs(be, &bytes, &files) == -EAGAIN)
		usleep(10000);
	f = open_memstream(&done, &dlen);
	walk(be, SFS_ROOT_INO, "", f);
	fclose(f);
	assert_string_equal(live, done);
	assert_int_equal(be->ops->getattr(be, SFS_ROOT_INO, &a), 0);
	assert_true(S_ISDIR(a.mode));
	free(live);
	free(done);
	backend_close(be);
}

/* A directory removed before the background scan reaches it: EIO, never an empty listing. */
static void test_background_fails_with_eio(void **state)
{
	struct tctx *t = *state;
	char p[PATH_MAX * 2];
	struct sfs_dirlist dl;
	struct backend *be;
	struct sfs_attr a;
	uint64_t bytes, files;

	for (int i = 0; i < 20; i++) {
		snprintf(p, sizeof(p), "%s/d%02d", t->src, i);
		assert_int_equal(mkdir(p, 0755), 0);
	}
	setenv("STAGEFS_TEST_SCAN_DELAY_US", "50000", 1);
	be = open_be(t->uri, &t->cfg);
	unsetenv("STAGEFS_TEST_SCAN_DELAY_US");
	/* the top was read: d19 is known, and last in line */
	assert_int_equal(be->ops->lookup(be, SFS_ROOT_INO, "d19", &a), 0);
	snprintf(p, sizeof(p), "%s/d19", t->src);
	assert_int_equal(rmdir(p), 0);
	assert_int_equal(be->ops->readdir(be, a.ino, &dl), -EIO);
	/* the scan failed; the backend says so a moment later */
	for (int i = 0; i < 500 && be->ops->statfs(be, &bytes, &files) == -EAGAIN; i++)
		usleep(10000);
	assert_int_equal(be->ops->statfs(be, &bytes, &files), -EIO);
	/* what was read is still served */
	assert_int_equal(be->ops->lookup(be, SFS_ROOT_INO, "a.txt", &a), 0);
	backend_close(be);
	/* nothing saved: the next mount scans again */
	backend_close(open_be(t->uri, foreground(t)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_scan_and_metadata),
		T(test_readdir),
		T(test_read_chunk),
		T(test_hard_links),
		T(test_changed_after_scan),
		T(test_changed_mtime_restored),
		T(test_offline_snapshot),
		T(test_offline_bad_snapshot),
		T(test_offline_serves_cache),
		T(test_uris),
		T(test_reuse_saved_scan),
		T(test_reuse_sees_names),
		T(test_reuse_bad_stamps),
		T(test_reuse_off),
		T(test_scan_same_bytes),
		T(test_background_same_answers),
		T(test_background_fails_with_eio),
#undef T
	};

	printf("test_backend_dir: dir:// scan, metadata ops, read_chunk, changed files, offline snapshot\n");
	fflush(stdout);
	log_level = LOG_CRIT;	/* the errors these tests provoke are expected */
	return cmocka_run_group_tests_name("backend_dir", tests, NULL, NULL);
}
