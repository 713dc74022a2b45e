/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uring_read: read FILE front to back with io_uring (IORING_OP_READ, one
 * BLOCK-sized read in flight at a time, default 64 KiB) and print the
 * bytes read.  For tests/integration/feedrate_passthrough.sh: reads of a
 * passthrough open made through io_uring, which pass no read(2).
 *
 *   uring_read [-b BLOCK] FILE
 *
 * Exit 0, or 1 on an error (named on stderr), 2 on a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	size_t block = 65536;
	struct io_uring ring;
	uint64_t off = 0;
	char *buf;
	int fd, ret, c;

	while ((c = getopt(argc, argv, "b:")) != -1) {
		if (c != 'b')
			return 2;
		block = strtoul(optarg, NULL, 0);
	}
	if (optind + 1 != argc || !block) {
		fprintf(stderr, "usage: uring_read [-b BLOCK] FILE\n");
		return 2;
	}
	fd = open(argv[optind], O_RDONLY | O_CLOEXEC);
	buf = malloc(block);
	if (fd < 0 || !buf) {
		fprintf(stderr, "uring_read: %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	ret = io_uring_queue_init(4, &ring, 0);
	if (ret) {
		fprintf(stderr, "uring_read: io_uring_queue_init: %s\n", strerror(-ret));
		return 1;
	}
	for (;;) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		struct io_uring_cqe *cqe;
		int res;

		io_uring_prep_read(sqe, fd, buf, (unsigned)block, off);
		ret = io_uring_submit_and_wait(&ring, 1);
		if (ret >= 0)
			ret = io_uring_wait_cqe(&ring, &cqe);
		if (ret < 0) {
			fprintf(stderr, "uring_read: io_uring: %s\n", strerror(-ret));
			return 1;
		}
		res = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		if (res < 0) {
			fprintf(stderr, "uring_read: read at %" PRIu64 ": %s\n", off, strerror(-res));
			return 1;
		}
		if (!res)
			break;
		off += (uint64_t)res;
	}
	printf("%" PRIu64 "\n", off);
	io_uring_queue_exit(&ring);
	close(fd);
	free(buf);
	return 0;
}
