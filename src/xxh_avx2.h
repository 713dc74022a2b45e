/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xxh_avx2: XXH3 compiled for AVX2 (src/xxh_avx2.c is built with -mavx2
 * where configure found the compiler takes it: AVX2_CFLAGS).
 *
 * A baseline x86-64 build gets XXH3's SSE2 code, about 20 GB/s on this
 * project's machines; its AVX2 code hashes the same bytes to the same
 * values (XXH3 is defined on bytes, not on a vector width) at 50-57 GB/s.
 * Every cached byte is hashed at least once (a fill's check, a pack's id
 * and each of its files'), so src/util.c's sfs_id_of() and sfs_hash64()
 * call these where the CPU has AVX2 and xxh_avx2_built is true.  The CPU
 * is asked in util.c, never here: this file's code may hold AVX2
 * instructions anywhere.
 */
#ifndef STAGEFS_XXH_AVX2_H
#define STAGEFS_XXH_AVX2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* true when this build holds the AVX2 code (else the two below abort) */
extern const bool xxh_avx2_built;

/* XXH3_128bits(@buf, @len): *@lo = low64, *@hi = high64 */
void xxh_avx2_128(const void *buf, size_t len, uint64_t *lo, uint64_t *hi);
/* XXH3_64bits(@buf, @len) */
uint64_t xxh_avx2_64(const void *buf, size_t len);

#endif
