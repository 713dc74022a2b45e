/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_manifest: libFuzzer harness for the manifest reader
 * (src/manifest/manifest_read.c).  The input is a serialized manifest, as a dir://
 * snapshot in the cache or a published RADOS object would hold it.
 *
 * manifest.h promises that a truncated, fuzzed or hostile manifest is
 * refused by manifest_open() or gives -EIO from an accessor, never a crash
 * or an out-of-bounds read: an opened manifest is walked through every
 * accessor, entry by entry (the first MAX_WALK of them), and ASan/UBSan
 * check each read.  The seeds are real manifests (tests/fuzz/mkseeds.sh).
 *
 * The XXH3 checksums of the header, the part table and the parts (format
 * 2; the sections in format 1) would stop almost every mutation at
 * manifest_open() or at a part's first touch, and they are no defence
 * against a crafted manifest anyway: so each input is tried twice, as it is
 * and with its checksums made right (fix_sums), which lets the fuzzer reach
 * the decoders behind them.  manifest_verify() runs on each opened one too.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "backend/backend.h"
#include "manifest/manifest.h"
#include "manifest/manifest_i.h"

#define MAX_WALK	2048	/* entries walked per input: bounded time */

static void walk(const struct manifest *m)
{
	uint64_t n = manifest_nentries(m), bytes, files, nids;
	char buf[4096];

	manifest_totals(m, &bytes, &files);
	(void)manifest_chunk_size(m);
	(void)manifest_version(m);
	nids = manifest_nids(m);
	for (uint64_t i = 0; i < nids && i < MAX_WALK; i++) {
		struct sfs_id id;

		manifest_id(m, i, &id);
	}
	for (uint64_t ino = 0; ino <= n + 1 && ino <= MAX_WALK; ino++) {
		struct sfs_attr a, b;
		struct sfs_dirlist dl = { 0 };
		uint32_t nc;

		if (manifest_getattr(m, ino, &a))
			continue;
		(void)manifest_readlink(m, ino, buf, sizeof(buf));
		(void)manifest_path(m, ino, buf, sizeof(buf));
		(void)manifest_path(m, ino, buf, 3);	/* too short */
		nc = manifest_nchunks(m, ino);
		for (uint32_t k = 0; k < nc && k < 64; k++) {
			struct sfs_id id;

			(void)manifest_chunk(m, ino, k, &id);
		}
		if (manifest_readdir(m, ino, &dl))
			continue;
		for (size_t k = 0; k < dl.n && k < MAX_WALK; k++)
			(void)manifest_lookup(m, ino, dl.ent[k].name, &b);
		(void)manifest_lookup(m, ino, "", &b);
		(void)manifest_lookup(m, ino, "\xff-no-such-name", &b);
		sfs_dirlist_release(&dl);
	}
}

/* Store the right checksums of the header, sections and parts of @b, where they fit. */
static void fix_sums(uint8_t *b, size_t len)
{
	manifest_reseal(b, len);
}

/* Open @size bytes of @data (a copy exactly that long), walk it, close it. */
static void try_open(const uint8_t *data, size_t size, bool fix)
{
	struct manifest *m;
	char err[256];
	uint8_t *buf = malloc(size ? size : 1);

	if (!buf)
		return;
	memcpy(buf, data, size);
	if (fix)
		fix_sums(buf, size);
	if (manifest_open(buf, size, &m, err, sizeof(err))) {
		free(buf);	/* still ours on failure */
		return;
	}
	walk(m);
	(void)manifest_verify(m, NULL);
	manifest_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	try_open(data, size, false);
	try_open(data, size, true);
	return 0;
}
