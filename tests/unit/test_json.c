/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_json: the JSON parser (values, exact 64-bit integers, escapes and
 * surrogates, every kind of malformed input, depth and size limits) and the
 * string escaper (control characters, quotes, invalid UTF-8), round trips.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static struct json_doc *parse_ok(const char *text)
{
	struct json_doc *doc = NULL;
	char err[128] = "";
	int ret = json_parse(text, strlen(text), &doc, err, sizeof(err));

	if (ret)
		fail_msg("json_parse(%s): %d %s", text, ret, err);
	return doc;
}

static int parse_err(const char *text, size_t len)
{
	struct json_doc *doc = NULL;
	char err[128] = "";
	int ret = json_parse(text, len, &doc, err, sizeof(err));

	assert_null(doc);
	if (ret == -EINVAL)
		assert_non_null(strstr(err, "offset "));
	return ret;
}

static char *write_str(const char *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	json_write_str(f, s);
	fclose(f);
	return buf;
}

static void test_values(void **state)
{
	struct json_doc *doc = parse_ok(
		" {\"a\": 1, \"b\": [true, false, null, -2.5e3, \"x\"],"
		" \"big\": 18446744073709551615, \"neg\": -7, \"f\": 0.5,"
		" \"o\": {}, \"e\": [] }\n");
	const struct json *r = json_root(doc), *b;

	assert_int_equal(json_type(r), JSON_OBJECT);
	assert_int_equal(json_len(r), 7);
	assert_string_equal(json_key(r, 0), "a");
	assert_int_equal(json_u64(json_get(r, "a"), 0), 1);
	b = json_get(r, "b");
	assert_int_equal(json_len(b), 5);
	assert_true(json_bool(json_at(b, 0), false));
	assert_false(json_bool(json_at(b, 1), true));
	assert_int_equal(json_type(json_at(b, 2)), JSON_NULL);
	assert_true(json_num(json_at(b, 3), 0) == -2500.0);
	assert_int_equal(json_u64(json_at(b, 3), 42), 42);	/* not whole */
	assert_string_equal(json_str(json_at(b, 4), NULL), "x");
	assert_null(json_at(b, 5));
	assert_true(json_u64(json_get(r, "big"), 0) == UINT64_MAX);
	assert_int_equal(json_u64(json_get(r, "neg"), 9), 9);
	assert_true(json_num(json_get(r, "neg"), 0) == -7.0);
	assert_true(json_num(json_get(r, "f"), 0) == 0.5);
	assert_int_equal(json_len(json_get(r, "o")), 0);
	assert_int_equal(json_type(json_get(r, "e")), JSON_ARRAY);
	/* lookups chain through missing values */
	assert_null(json_get(json_get(r, "missing"), "x"));
	assert_null(json_get(b, "a"));
	assert_int_equal(json_u64(NULL, 5), 5);
	assert_string_equal(json_str(json_get(r, "a"), "def"), "def");
	json_doc_free(doc);

	/* 2^53 + 1 is exact as an integer though not as a double */
	doc = parse_ok("[9007199254740993]");
	assert_true(json_u64(json_at(json_root(doc), 0), 0) == 9007199254740993ULL);
	json_doc_free(doc);
	/* past 2^64: a number, not a whole one */
	doc = parse_ok("18446744073709551616");
	assert_int_equal(json_u64(json_root(doc), 3), 3);
	assert_true(json_num(json_root(doc), 0) > 1.8e19);
	json_doc_free(doc);
}

static void test_strings(void **state)
{
	struct json_doc *doc = parse_ok(
		"[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u00e9\\u20ac\\ud83d\\ude00\","
		" \"caf\xc3\xa9\"]");
	const struct json *r = json_root(doc);

	assert_string_equal(json_str(json_at(r, 0), NULL), "a\"b\\c/d\b\f\n\r\t");
	assert_string_equal(json_str(json_at(r, 1), NULL),
			    "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
	assert_string_equal(json_str(json_at(r, 2), NULL), "caf\xc3\xa9");
	json_doc_free(doc);
}

static void test_errors(void **state)
{
	static const char *const bad[] = {
		"", " ", "{", "[", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{1:2}", "[1 2]",
		"\"abc", "\"a\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00x\"",
		"\"\\u0000\"", "\"tab\there\"", "01", "-", "1.", "1e", ".5", "+1",
		"tru", "nul", "[1] x", "{\"a\":}", "[\"\\",
		/* not UTF-8 (tests/fuzz/corpus/json/utf8-*) */
		"\"a\x90\"", "\"\xc3(\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
		"\"\xe2\x82\"",
	};
	char deep[2 * (JSON_MAX_DEPTH + 2)];
	struct json_doc *doc = NULL;
	char err[128];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse_err(bad[i], strlen(bad[i])) != -EINVAL)
			fail_msg("accepted: %s", bad[i]);
	/* a NUL inside the input is not whitespace */
	assert_int_equal(parse_err("[1]\0", 4), -EINVAL);
	memset(deep, '[', sizeof(deep) / 2);
	memset(deep + sizeof(deep) / 2, ']', sizeof(deep) / 2);
	assert_int_equal(json_parse(deep, sizeof(deep), &doc, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "nested deeper"));
	assert_int_equal(parse_err("[]", (size_t)JSON_MAX_INPUT + 1), -E2BIG);
}

static void test_depth_limit_ok(void **state)
{
	char text[2 * JSON_MAX_DEPTH + 1];
	struct json_doc *doc;

	/* JSON_MAX_DEPTH nested arrays inside the top one are allowed */
	memset(text, '[', JSON_MAX_DEPTH);
	memset(text + JSON_MAX_DEPTH, ']', JSON_MAX_DEPTH);
	text[2 * JSON_MAX_DEPTH] = '\0';
	doc = parse_ok(text);
	json_doc_free(doc);
}

static void test_write_str(void **state)
{
	char *s = write_str("a\"b\\c\n\x01\x7f" "caf\xc3\xa9 \xff\xc3(");

	assert_string_equal(s, "\"a\\\"b\\\\c\\n\\u0001\\u007fcaf\xc3\xa9 \\ufffd\\ufffd(\"");
	free(s);
	/* overlong and surrogate encodings are invalid */
	s = write_str("\xc0\xaf\xed\xa0\x80");
	assert_string_equal(s, "\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"");
	free(s);
	s = write_str(NULL);
	assert_string_equal(s, "\"\"");
	free(s);
}

static void test_round_trip(void **state)
{
	const char *text = "{\"k\":[1,2.5,\"q\\\"\",true,null,{}],\"n\":18446744073709551615}";
	struct json_doc *doc = parse_ok(text);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	json_write(f, json_root(doc));
	fclose(f);
	assert_string_equal(buf, text);
	free(buf);
	json_doc_free(doc);

	/* -0.0 is written as "-0" is, so that a second write agrees (fuzz_json) */
	doc = parse_ok("[-0.0,-0,-0e5]");
	buf = NULL;
	f = open_memstream(&buf, &len);
	json_write(f, json_root(doc));
	fclose(f);
	assert_string_equal(buf, "[0,0,0]");
	free(buf);
	json_doc_free(doc);
}

/* Byte flips and truncations of a valid document never crash the parser. */
static void test_fuzz(void **state)
{
	const char *text = "{\"node\": {\"read_bytes\": 123, \"rates\": {\"1s\": "
			   "{\"x\": 1.5}}}, \"users\": [{\"user\": \"a\\u00e9\", \"uid\": 1}]}";
	size_t len = strlen(text);
	char *buf = malloc(len);

	for (size_t i = 0; i < len; i++) {
		for (int b = 0; b < 8; b++) {
			struct json_doc *doc = NULL;

			memcpy(buf, text, len);
			buf[i] ^= (char)(1 << b);
			if (!json_parse(buf, len, &doc, NULL, 0))
				json_doc_free(doc);
		}
		struct json_doc *doc = NULL;

		assert_int_not_equal(json_parse(text, i, &doc, NULL, 0), 0);
	}
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_depth_limit_ok),
		cmocka_unit_test(test_write_str),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_fuzz),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
