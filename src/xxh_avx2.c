/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xxh_avx2: see xxh_avx2.h.  Without __AVX2__ (not x86-64, or a build that
 * leaves the flag out, as the fuzzers' does) it holds no hashing code.
 */
#include "xxh_avx2.h"

#include <stdlib.h>

#ifdef __AVX2__

#define XXH_INLINE_ALL
#include <xxhash.h>

#if XXH_VECTOR != XXH_AVX2 && XXH_VECTOR != XXH_AVX512
#error "-mavx2 given but xxhash.h did not pick its AVX2 code"
#endif

const bool xxh_avx2_built = true;

void xxh_avx2_128(const void *buf, size_t len, uint64_t *lo, uint64_t *hi)
{
	XXH128_hash_t h = XXH3_128bits(buf, len);

	*lo = h.low64;
	*hi = h.high64;
}

uint64_t xxh_avx2_64(const void *buf, size_t len)
{
	return XXH3_64bits(buf, len);
}

#else

const bool xxh_avx2_built = false;

void xxh_avx2_128(const void *buf, size_t len, uint64_t *lo, uint64_t *hi)
{
	(void)buf, (void)len, (void)lo, (void)hi;
	abort();
}

uint64_t xxh_avx2_64(const void *buf, size_t len)
{
	(void)buf, (void)len;
	abort();
}

#endif
