/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dirscan_stamps: is a tree unchanged since its last scan
 * (dirscan_unchanged)?  Every directory's saved stamp (inode, mtime,
 * ctime; dirscan_i.h says the file's layout) is checked against the
 * source by a few threads, the first change ending the check.
 */
#include "dirscan_i.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct check {
	int rootfd;
	const unsigned char **rec;	/* each record's start */
	size_t n;
	size_t next;			/* protected by lock */
	int changed;			/* protected by lock */
	char why[PATH_MAX + 100];	/* protected by lock */
	pthread_mutex_t lock;
};

static void check_one(struct check *ck, const unsigned char *f)
{
	char path[PATH_MAX];
	uint64_t ino;
	int64_t ms, cs;
	uint32_t mn, cn;
	uint16_t plen;
	struct stat st;
	const char *what = NULL;
	int e = 0;

	memcpy(&ino, f, 8);
	memcpy(&ms, f + 8, 8);
	memcpy(&mn, f + 16, 4);
	memcpy(&cs, f + 20, 8);
	memcpy(&cn, f + 28, 4);
	memcpy(&plen, f + 32, 2);
	memcpy(path, f + STAMP_FIX, plen);
	path[plen] = '\0';
	if (fstatat(ck->rootfd, path, &st,
		    AT_SYMLINK_NOFOLLOW | (plen ? 0 : AT_EMPTY_PATH)) < 0)
		e = errno;
	else if (!S_ISDIR(st.st_mode))
		what = "no longer a directory";
	else if ((uint64_t)st.st_ino != ino)
		what = "replaced (inode number changed)";
	else if (st.st_mtim.tv_sec != ms || (uint32_t)st.st_mtim.tv_nsec != mn)
		what = "mtime changed";
	else if (st.st_ctim.tv_sec != cs || (uint32_t)st.st_ctim.tv_nsec != cn)
		what = "ctime changed";
	if (!e && !what)
		return;
	pthread_mutex_lock(&ck->lock);
	if (!ck->changed) {
		ck->changed = 1;
		snprintf(ck->why, sizeof(ck->why), "directory \"%s\": %s",
			 plen ? path : ".", e ? strerror(e) : what);
	}
	pthread_mutex_unlock(&ck->lock);
}

static void *check_worker(void *arg)
{
	struct check *ck = arg;

	for (;;) {
		size_t i, end;

		pthread_mutex_lock(&ck->lock);
		i = ck->next;
		end = ck->changed ? i : MIN(ck->n, i + 64);
		ck->next = end;
		pthread_mutex_unlock(&ck->lock);
		if (i == end)
			return NULL;
		for (; i < end; i++)
			check_one(ck, ck->rec[i]);
	}
}

int dirscan_unchanged(int rootfd, const void *stamps, size_t len,
		      unsigned threads, char *why, size_t whylen)
{
	const unsigned char *p = stamps;
	struct check ck = { .rootfd = rootfd };
	pthread_t tids[64];
	unsigned started = 0;
	uint32_t magic;
	uint64_t n;
	size_t off = STAMP_HDR;

	if (len < STAMP_HDR)
		return -EINVAL;
	memcpy(&magic, p, 4);
	memcpy(&n, p + 8, 8);
	if (magic != STAMP_MAGIC || n == 0 || n > (len - STAMP_HDR) / STAMP_FIX)
		return -EINVAL;
	ck.rec = malloc(n * sizeof(*ck.rec));
	if (!ck.rec)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		uint16_t plen;

		if (len - off < STAMP_FIX)
			goto bad;
		memcpy(&plen, p + off + 32, 2);
		if (plen >= PATH_MAX || len - off - STAMP_FIX < plen ||
		    memchr(p + off + STAMP_FIX, '\0', plen))
			goto bad;
		ck.rec[i] = p + off;
		off += STAMP_FIX + plen;
	}
	if (off != len)
		goto bad;
	ck.n = n;
	pthread_mutex_init(&ck.lock, NULL);
	threads = MIN(MIN(threads, ARRAY_SIZE(tids)), (unsigned)(n / 256));
	for (; started < threads; started++)
		if (pthread_create(&tids[started], NULL, check_worker, &ck))
			break;
	check_worker(&ck);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	pthread_mutex_destroy(&ck.lock);
	free(ck.rec);
	if (ck.changed)
		snprintf(why, whylen, "%s", ck.why);
	return ck.changed;
bad:
	free(ck.rec);
	return -EINVAL;
}
