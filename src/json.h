/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json: just enough JSON for stagefs: a string escaper for the writers
 * (.stagefs/stats) and a small, bounds-checked parser for the readers
 * (`stagefs top`, tests), so that tools/ need nothing from fuse/.
 *
 * The parser builds a read-only tree in one allocation arena owned by the
 * returned struct json_doc.  It accepts RFC 8259 JSON only (no comments, no
 * trailing commas), refuses nesting deeper than JSON_MAX_DEPTH and inputs
 * over JSON_MAX_INPUT bytes, and checks every index it takes: a malformed or
 * hostile input gives an error with its byte offset, never a crash.
 * Numbers are kept as doubles and, when they are whole and fit, also as
 * exact unsigned 64-bit integers (byte counters exceed 2^53).
 */
#ifndef STAGEFS_JSON_H
#define STAGEFS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH	64
#define JSON_MAX_INPUT	(64u << 20)

enum json_type {
	JSON_NULL,
	JSON_BOOL,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

struct json;		/* one value in a parsed document */
struct json_doc;	/* a parsed document: owns every value in it */

/*
 * Parse @len bytes of @text.  Returns 0 and the document in *@out (free it
 * with json_doc_free(); every value from it dies with it), or -EINVAL with
 * "offset N: what" in @err, or -ENOMEM / -E2BIG.
 */
int json_parse(const char *text, size_t len, struct json_doc **out,
	       char *err, size_t errlen);
void json_doc_free(struct json_doc *doc);
/* The top-level value of @doc. */
const struct json *json_root(const struct json_doc *doc);

/* Type of @v; JSON_NULL for a NULL @v, so lookups can be chained. */
enum json_type json_type(const struct json *v);
/* Member @key of object @o; NULL if @o is not an object or has no @key. */
const struct json *json_get(const struct json *o, const char *key);
/* Number of elements of an array or members of an object (0 otherwise). */
size_t json_len(const struct json *v);
/* Element @i of an array, or the value of member @i of an object; NULL past the end. */
const struct json *json_at(const struct json *v, size_t i);
/* Key of member @i of an object; NULL otherwise. */
const char *json_key(const struct json *o, size_t i);
/* Number value, or @def if @v is not a number. */
double json_num(const struct json *v, double def);
/* Exact whole number value, or @def if @v is not a whole number in [0, 2^64). */
uint64_t json_u64(const struct json *v, uint64_t def);
/* String value (NUL-terminated; JSON's \u0000 is refused), or @def. */
const char *json_str(const struct json *v, const char *def);
/* Boolean value, or @def. */
bool json_bool(const struct json *v, bool def);

/*
 * Write @s as a quoted JSON string to @f: '"', '\\' and control characters
 * are escaped; bytes that are not valid UTF-8 are written as U+FFFD so that
 * the output is always valid JSON.
 */
void json_write_str(FILE *f, const char *s);

/*
 * Length (1-4) of the valid UTF-8 sequence starting at @s, or 0 if the
 * bytes there are not one (overlong forms and surrogates are invalid).
 * Reads no further than a NUL.
 */
size_t json_utf8_seq(const char *s);

/* Write value @v (and everything under it) as compact JSON to @f. */
void json_write(FILE *f, const struct json *v);

#endif
