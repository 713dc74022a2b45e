/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_manifest_lazy: a local copy filled part by part from a remote (a
 * file read through a counting, failing, slow reader): opening fetches the
 * header, the part table and the root's part only; every entry then reads
 * as in the remote; each part is fetched once, also when eight threads
 * touch it at once; a reopen fetches nothing; a remote that fails gives
 * -EIO at once for the hold and works again after; a part damaged in the
 * remote is refused only where touched, after one fetch again; a part
 * torn in the local copy is fetched again and served; marks that do not
 * match make a new copy; the background fill completes the copy untouched,
 * fetching each part once, and a close waits for one remote read at most.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "log.h"
#include "manifest/manifest.h"
#include "manifest/manifest_i.h"
#include "manifest/manifest_lazy.h"
#include "util.h"

#define NDIRS	20
#define PER_DIR	1000
#define NENT	(1 + NDIRS + NDIRS * PER_DIR)

struct remote {
	int fd;
	_Atomic uint64_t calls, bytes;
	_Atomic int fail;		/* reads fail with -EIO */
	_Atomic int delay_ms;
};

static struct remote rem;
static char dir[64], rpath[PATH_MAX], cpath[PATH_MAX];
static uint64_t rsize;

static int rread(void *arg, void *buf, size_t len, uint64_t off, char *err,
		 size_t errlen)
{
	struct remote *r = arg;

	atomic_fetch_add(&r->calls, 1);
	if (atomic_load(&r->delay_ms))
		usleep(1000 * (useconds_t)atomic_load(&r->delay_ms));
	if (atomic_load(&r->fail)) {
		snprintf(err, errlen, "remote down");
		return -EIO;
	}
	if (pread(r->fd, buf, len, (off_t)off) != (ssize_t)len) {
		snprintf(err, errlen, "short read");
		return -EIO;
	}
	atomic_fetch_add(&r->bytes, len);
	return 0;
}

static const struct manifest_remote R = { .read = rread, .arg = &rem };

/* Build the remote manifest once: 20 directories of 1000 files. */
static int setup(void **state)
{
	struct sfs_attr d = { .mode = S_IFDIR | 0755 };
	struct sfs_attr f = { .mode = S_IFREG | 0644, .nlink = 1 };
	struct manifest_builder *b;
	char path[64];
	struct sfs_id id = { 1, 2 };
	int fd;

	(void)state;
	log_level = LOG_CRIT;
	snprintf(dir, sizeof(dir), "/tmp/test_manifest_lazy.XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(rpath, sizeof(rpath), "%s/remote", dir);
	snprintf(cpath, sizeof(cpath), "%s/copy", dir);
	b = manifest_builder_create(1u << 20);
	for (int i = 0; i < NDIRS; i++) {
		snprintf(path, sizeof(path), "d%02d", i);
		assert_int_equal(manifest_builder_add(b, path, &d, NULL, NULL, 0), 0);
		for (int k = 0; k < PER_DIR; k++) {
			snprintf(path, sizeof(path), "d%02d/file-%06d", i, i * PER_DIR + k);
			f.size = (uint64_t)(i * PER_DIR + k);
			id.lo = (uint64_t)(i * PER_DIR + k);
			assert_int_equal(manifest_builder_add(b, path, &f, NULL, &id,
							      f.size ? 1 : 0), 0);
		}
	}
	fd = open(rpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(manifest_builder_write(b, 7, fd, &rsize), 0);
	manifest_builder_destroy(b);
	rem.fd = fd;
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	close(rem.fd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* A fresh copy: no copy, no marks, counters at zero. */
static void fresh(void)
{
	char m[PATH_MAX];

	unlink(cpath);
	assert_int_equal(manifest_lazy_marks_path(cpath, m, sizeof(m)), 0);
	unlink(m);
	atomic_store(&rem.calls, 0);
	atomic_store(&rem.bytes, 0);
	atomic_store(&rem.fail, 0);
	atomic_store(&rem.delay_ms, 0);
}

static struct manifest *lopen(uint64_t *got)
{
	struct manifest *m;
	char err[256];
	uint64_t g;
	int rc = manifest_lazy_open(cpath, rsize, &R, "test", false, &m,
				    got ? got : &g, err, sizeof(err));

	if (rc)
		fail_msg("manifest_lazy_open: %d %s", rc, err);
	return m;
}

/* Entry part @p of the manifest at @b: its offset. */
static uint64_t entry_part_off(const uint8_t *h, uint64_t p)
{
	return ld64(h + H2_ENT_OFF) + (p << ld32(h + H2_PARTSHIFT));
}

static void test_open_and_walk(void **state)
{
	struct manifest *m, *whole;
	struct sfs_attr a, b;
	char err[256];
	uint64_t got;

	(void)state;
	fresh();
	m = lopen(&got);
	/* header, part table, the root's part: a few KiB of a 2+ MB manifest */
	assert_true(rsize > 2000000);
	assert_true(got < 100000);
	assert_int_equal(got, atomic_load(&rem.bytes));
	assert_int_equal(manifest_fetched_bytes(m), got);
	/* every entry as in the remote itself */
	assert_int_equal(manifest_open_file(rpath, &whole, err, sizeof(err)), 0);
	for (uint64_t ino = 1; ino <= NENT; ino++) {
		assert_int_equal(manifest_getattr(m, ino, &a), 0);
		assert_int_equal(manifest_getattr(whole, ino, &b), 0);
		assert_memory_equal(&a, &b, sizeof(a));
	}
	assert_int_equal(manifest_lookup(m, SFS_ROOT_INO, "d07", &a), 0);
	assert_int_equal(manifest_lookup(m, a.ino, "file-007123", &b), 0);
	assert_int_equal(b.size, 7123);
	assert_int_equal(manifest_verify(m, NULL), 0);
	/* each part once: never more than the manifest */
	assert_true(atomic_load(&rem.bytes) <= rsize);
	assert_int_equal(manifest_fetched_bytes(m), atomic_load(&rem.bytes));
	manifest_close(m);
	manifest_close(whole);

	/* a reopen fetches nothing, even for everything */
	atomic_store(&rem.bytes, 0);
	m = lopen(&got);
	assert_int_equal(got, 0);
	assert_int_equal(manifest_verify(m, NULL), 0);
	assert_int_equal(atomic_load(&rem.bytes), 0);
	manifest_close(m);
}

static void test_remote_down(void **state)
{
	struct manifest *m;
	struct sfs_attr a;
	uint64_t calls;

	(void)state;
	fresh();
	m = lopen(NULL);
	atomic_store(&rem.fail, 1);
	/* d15's files: parts nobody touched */
	assert_int_equal(manifest_getattr(m, 1 + NDIRS + 15 * PER_DIR + 500, &a), -EIO);
	calls = atomic_load(&rem.calls);
	/* the same part again at once: failed without asking the remote */
	assert_int_equal(manifest_getattr(m, 1 + NDIRS + 15 * PER_DIR + 500, &a), -EIO);
	assert_int_equal(atomic_load(&rem.calls), calls);
	/* the remote back and the hold over: served (nothing marked bad) */
	atomic_store(&rem.fail, 0);
	usleep(1100 * 1000);
	assert_int_equal(manifest_getattr(m, 1 + NDIRS + 15 * PER_DIR + 500, &a), 0);
	/* file k is entry 1 + NDIRS + k, inode one more */
	assert_int_equal(a.size, 15 * PER_DIR + 500 - 1);
	manifest_close(m);
}

static void test_remote_corrupt(void **state)
{
	uint8_t h[256], x;
	struct manifest *m;
	struct sfs_attr a;
	uint64_t off, calls;

	(void)state;
	fresh();
	assert_int_equal(pread(rem.fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	/* entry part 20: entries 12600..13229, files of d12 */
	off = entry_part_off(h, 20) + 3000;
	assert_int_equal(pread(rem.fd, &x, 1, (off_t)off), 1);
	x ^= 0x55;
	assert_int_equal(pwrite(rem.fd, &x, 1, (off_t)off), 1);
	m = lopen(NULL);
	/* everything before it is served (a walk: part 20 is fetched ahead) */
	for (uint64_t ino = 1; ino <= 12600; ino++)
		assert_int_equal(manifest_getattr(m, ino, &a), 0);
	calls = atomic_load(&rem.calls);
	assert_int_equal(manifest_getattr(m, 12601, &a), -EIO);
	/* refused, fetched once more, refused for good */
	assert_true(atomic_load(&rem.calls) > calls);
	calls = atomic_load(&rem.calls);
	assert_int_equal(manifest_getattr(m, 12602, &a), -EIO);
	assert_int_equal(atomic_load(&rem.calls), calls);
	assert_int_equal(manifest_getattr(m, 13300, &a), 0);
	manifest_close(m);
	x ^= 0x55;
	assert_int_equal(pwrite(rem.fd, &x, 1, (off_t)off), 1);
}

static void test_torn_local(void **state)
{
	uint8_t h[256], zero[4096] = { 0 };
	struct manifest *m;
	struct sfs_attr a;
	int fd;

	(void)state;
	fresh();
	m = lopen(NULL);
	assert_int_equal(manifest_verify(m, NULL), 0);
	manifest_close(m);
	/* part 9 marked present but zeros (a crash before its data was written) */
	assert_int_equal(pread(rem.fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	fd = open(cpath, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zero, sizeof(zero), (off_t)entry_part_off(h, 9)),
			 (ssize_t)sizeof(zero));
	close(fd);
	atomic_store(&rem.bytes, 0);
	m = lopen(NULL);
	assert_int_equal(manifest_getattr(m, 9 * 630 + 10, &a), 0);
	assert_int_equal(atomic_load(&rem.bytes), 65536);
	assert_int_equal(manifest_verify(m, NULL), 0);
	manifest_close(m);
}

static struct manifest *shared_m;

static void *toucher(void *arg)
{
	struct sfs_attr a;

	(void)arg;
	return (void *)(intptr_t)manifest_getattr(shared_m, 17 * 630 + 3, &a);
}

static void test_concurrent(void **state)
{
	pthread_t t[8];
	void *rc;

	(void)state;
	fresh();
	shared_m = lopen(NULL);
	atomic_store(&rem.calls, 0);
	atomic_store(&rem.delay_ms, 100);
	for (int i = 0; i < 8; i++)
		assert_int_equal(pthread_create(&t[i], NULL, toucher, NULL), 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(t[i], &rc), 0);
		assert_int_equal((intptr_t)rc, 0);
	}
	/* one fetch for the entry part (its name's string part may be another) */
	assert_true(atomic_load(&rem.calls) <= 2);
	manifest_close(shared_m);
}

static void test_background_fill(void **state)
{
	struct manifest *m;
	char err[256];
	uint64_t got, t0;

	(void)state;
	fresh();
	assert_int_equal(manifest_lazy_open(cpath, rsize, &R, "test", true, &m, &got,
					    err, sizeof(err)), 0);
	/* the whole copy arrives untouched, each part once */
	for (t0 = now_ms(); manifest_fetched_bytes(m) < rsize * 9 / 10 && now_ms() - t0 < 10000;)
		usleep(10000);
	usleep(100000);
	assert_true(manifest_fetched_bytes(m) > rsize * 9 / 10);
	assert_true(manifest_fetched_bytes(m) <= rsize);
	atomic_store(&rem.fail, 1);
	assert_int_equal(manifest_verify(m, NULL), 0);	/* all local */
	manifest_close(m);

	/* a close while the fill waits on a slow remote: within one read */
	fresh();
	atomic_store(&rem.delay_ms, 300);
	assert_int_equal(manifest_lazy_open(cpath, rsize, &R, "test", true, &m, &got,
					    err, sizeof(err)), 0);
	usleep(50000);
	t0 = now_ms();
	manifest_close(m);
	assert_true(now_ms() - t0 < 1000);
}

static void test_bad_marks(void **state)
{
	struct manifest *m;
	char mp[PATH_MAX];
	uint64_t got;

	(void)state;
	fresh();
	m = lopen(NULL);
	manifest_close(m);
	assert_int_equal(manifest_lazy_marks_path(cpath, mp, sizeof(mp)), 0);
	assert_int_equal(truncate(mp, 3), 0);
	m = lopen(&got);
	assert_true(got > 0);	/* made again */
	assert_int_equal(manifest_verify(m, NULL), 0);
	manifest_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_and_walk),
		cmocka_unit_test(test_remote_down),
		cmocka_unit_test(test_remote_corrupt),
		cmocka_unit_test(test_torn_local),
		cmocka_unit_test(test_concurrent),
		cmocka_unit_test(test_background_fill),
		cmocka_unit_test(test_bad_marks),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
