/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_json: libFuzzer harness for the JSON parser (src/json.c), which
 * reads .stagefs/stats for `stagefs top` and the tests.
 *
 * json.h promises that a malformed or hostile input gives an error with
 * its offset, never a crash.  Beyond that, a parsed document is walked
 * through every accessor and written back with json_write(); the output
 * must parse again and write the same bytes a second time (the writer
 * makes valid JSON of anything the parser accepts).  Seeds: a real
 * .stagefs/stats of a mount and the documents of tests/unit/test_json.c
 * (tests/fuzz/mkseeds.sh).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static void walk(const struct json *v, int depth)
{
	size_t n = json_len(v);

	(void)json_num(v, 0);
	(void)json_u64(v, 0);
	(void)json_bool(v, false);
	if (json_type(v) == JSON_STRING && !json_str(v, NULL))
		__builtin_trap();
	if (depth > JSON_MAX_DEPTH + 1)
		__builtin_trap();	/* deeper than the parser allows */
	for (size_t i = 0; i < n; i++) {
		const char *k = json_key(v, i);

		if (json_type(v) == JSON_OBJECT && !k)
			__builtin_trap();
		if (k && !json_get(v, k))
			__builtin_trap();	/* a key it lists, it finds */
		walk(json_at(v, i), depth + 1);
	}
	if (json_at(v, n))
		__builtin_trap();	/* nothing past the end */
}

/* json_write(@v) into a malloc'ed buffer; *@len its length. */
static char *write_doc(const struct json *v, size_t *len)
{
	char *out = NULL;
	FILE *f = open_memstream(&out, len);

	if (!f)
		abort();
	json_write(f, v);
	fclose(f);
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json_doc *doc, *again;
	char err[256];
	char *out1, *out2;
	size_t len1, len2;

	if (json_parse((const char *)data, size, &doc, err, sizeof(err)))
		return 0;
	walk(json_root(doc), 0);
	out1 = write_doc(json_root(doc), &len1);
	if (json_parse(out1, len1, &again, err, sizeof(err))) {
		fprintf(stderr, "json_write output does not parse: %s\n%.*s\n", err,
			(int)len1, out1);
		__builtin_trap();
	}
	out2 = write_doc(json_root(again), &len2);
	if (len1 != len2 || memcmp(out1, out2, len1)) {
		fprintf(stderr, "written twice differently:\n%.*s\n%.*s\n", (int)len1, out1,
			(int)len2, out2);
		__builtin_trap();
	}
	free(out1);
	free(out2);
	json_doc_free(again);
	json_doc_free(doc);
	return 0;
}
