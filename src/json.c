/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json: see json.h.  A recursive-descent parser over a bounded input with
 * an explicit depth limit; values live in a bump arena freed at once.
 */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct json {
	enum json_type type;
	bool b;
	bool whole;		/* @u holds the exact value */
	uint64_t u;
	double num;
	const char *str;
	size_t n;		/* elements / members */
	const struct json **items;
	const char **keys;	/* objects only */
};

struct arena_block {
	struct arena_block *next;
	size_t used, size;
	max_align_t data[];
};

struct json_doc {
	struct arena_block *blocks;
	const struct json *root;
};

struct parser {
	const char *s;
	size_t len, pos;
	struct json_doc *doc;
	char *err;
	size_t errlen;
	int rc;
};

static void *arena_alloc(struct json_doc *doc, size_t n)
{
	struct arena_block *b = doc->blocks;

	n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	if (!b || b->size - b->used < n) {
		size_t size = n > 60000 ? n : 60000;

		b = malloc(sizeof(*b) + size);
		if (!b)
			return NULL;
		b->size = size;
		b->used = 0;
		b->next = doc->blocks;
		doc->blocks = b;
	}
	b->used += n;
	return (char *)b->data + b->used - n;
}

static void *fail(struct parser *p, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void *fail(struct parser *p, int rc, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (p->rc)
		return NULL;
	p->rc = rc;
	n = snprintf(p->err, p->errlen, "offset %zu: ", p->pos);
	if (n >= 0 && (size_t)n < p->errlen) {
		va_start(ap, fmt);
		vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return NULL;
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
				   p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static bool lit(struct parser *p, const char *word)
{
	size_t n = strlen(word);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n))
		return false;
	p->pos += n;
	return true;
}

static int hex4(const char *s)
{
	int v = 0;

	for (int i = 0; i < 4; i++) {
		int c = (unsigned char)s[i], d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static size_t put_utf8(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* At an opening '"': the string's decoded bytes, NUL-terminated, in the arena. */
static const char *parse_string(struct parser *p)
{
	size_t start = ++p->pos, end = start, o = 0;
	char *out;

	/* find the closing quote first: the decoded string is never longer */
	while (end < p->len && p->s[end] != '"') {
		if (p->s[end] == '\\')
			end++;
		end++;
	}
	if (end >= p->len)
		return fail(p, -EINVAL, "unterminated string");
	out = arena_alloc(p->doc, end - start + 1);
	if (!out)
		return fail(p, -ENOMEM, "out of memory");
	while (p->pos < end) {
		unsigned char c = (unsigned char)p->s[p->pos];

		if (c < 0x20)
			return fail(p, -EINVAL, "control character in string");
		if (c >= 0x80) {
			/*
			 * RFC 8259 text is UTF-8: a reader must not be handed
			 * bytes that are not (found by tests/fuzz/fuzz_json).
			 * The closing quote at @end stops json_utf8_seq().
			 */
			size_t n = json_utf8_seq(p->s + p->pos);

			if (!n)
				return fail(p, -EINVAL, "invalid UTF-8 in string");
			memcpy(out + o, p->s + p->pos, n);
			o += n;
			p->pos += n;
			continue;
		}
		if (c != '\\') {
			out[o++] = (char)c;
			p->pos++;
			continue;
		}
		p->pos++;
		switch (p->s[p->pos]) {
		case '"': out[o++] = '"'; break;
		case '\\': out[o++] = '\\'; break;
		case '/': out[o++] = '/'; break;
		case 'b': out[o++] = '\b'; break;
		case 'f': out[o++] = '\f'; break;
		case 'n': out[o++] = '\n'; break;
		case 'r': out[o++] = '\r'; break;
		case 't': out[o++] = '\t'; break;
		case 'u': {
			int hi, lo;
			uint32_t cp;

			if (end - p->pos < 5 || (hi = hex4(p->s + p->pos + 1)) < 0)
				return fail(p, -EINVAL, "bad \\u escape");
			p->pos += 4;
			cp = (uint32_t)hi;
			if (hi >= 0xd800 && hi < 0xdc00) {
				if (end - p->pos < 7 || p->s[p->pos + 1] != '\\' ||
				    p->s[p->pos + 2] != 'u' ||
				    (lo = hex4(p->s + p->pos + 3)) < 0xdc00 || lo > 0xdfff)
					return fail(p, -EINVAL, "unpaired surrogate");
				p->pos += 6;
				cp = 0x10000 + (((uint32_t)hi - 0xd800) << 10) +
				     ((uint32_t)lo - 0xdc00);
			} else if (hi >= 0xdc00 && hi < 0xe000) {
				return fail(p, -EINVAL, "unpaired surrogate");
			} else if (hi == 0) {
				return fail(p, -EINVAL, "\\u0000 in string");
			}
			/* 6 escaped bytes (12 for a pair) decode to at most 4 */
			o += put_utf8(out + o, cp);
			break;
		}
		default:
			return fail(p, -EINVAL, "bad escape");
		}
		p->pos++;
	}
	out[o] = '\0';
	p->pos = end + 1;
	return out;
}

static const struct json *parse_value(struct parser *p, int depth);

static struct json *new_value(struct parser *p, enum json_type t)
{
	struct json *v = arena_alloc(p->doc, sizeof(*v));

	if (!v)
		return fail(p, -ENOMEM, "out of memory");
	memset(v, 0, sizeof(*v));
	v->type = t;
	return v;
}

static const struct json *parse_number(struct parser *p)
{
	size_t start = p->pos;
	struct json *v;
	char buf[64];
	bool whole = true;

	if (p->pos < p->len && p->s[p->pos] == '-')
		p->pos++;
	if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
		return fail(p, -EINVAL, "bad number");
	if (p->s[p->pos] == '0')
		p->pos++;
	else
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	if (p->pos < p->len && p->s[p->pos] == '.') {
		whole = false;
		p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return fail(p, -EINVAL, "bad number");
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		whole = false;
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return fail(p, -EINVAL, "bad number");
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos - start >= sizeof(buf))
		return fail(p, -EINVAL, "number too long");
	memcpy(buf, p->s + start, p->pos - start);
	buf[p->pos - start] = '\0';
	v = new_value(p, JSON_NUMBER);
	if (!v)
		return NULL;
	v->num = strtod(buf, NULL);
	if (whole && buf[0] != '-') {
		errno = 0;
		v->u = strtoull(buf, NULL, 10);
		v->whole = errno == 0;
	} else if (whole && !strcmp(buf, "-0")) {
		v->whole = true;
	}
	return v;
}

/* Elements (and keys) collected while parsing one array or object. */
struct vec {
	const struct json **items;
	const char **keys;
	size_t n, cap;
};

static int vec_push(struct vec *vc, const char *key, const struct json *v)
{
	if (vc->n == vc->cap) {
		size_t cap = vc->cap ? vc->cap * 2 : 8;
		const struct json **it = realloc(vc->items, cap * sizeof(*it));

		if (!it)
			return -ENOMEM;
		vc->items = it;
		const char **k = realloc(vc->keys, cap * sizeof(*k));

		if (!k)
			return -ENOMEM;
		vc->keys = k;
		vc->cap = cap;
	}
	vc->items[vc->n] = v;
	vc->keys[vc->n] = key;
	vc->n++;
	return 0;
}

static const struct json *parse_container(struct parser *p, int depth, bool obj)
{
	char close = obj ? '}' : ']';
	struct vec vc = { 0 };
	struct json *v = NULL;

	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		goto done;
	}
	for (;;) {
		const char *key = NULL;
		const struct json *item;

		skip_ws(p);
		if (obj) {
			if (p->pos >= p->len || p->s[p->pos] != '"') {
				fail(p, -EINVAL, "expected a string key");
				goto out;
			}
			key = parse_string(p);
			if (!key)
				goto out;
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':') {
				fail(p, -EINVAL, "expected ':'");
				goto out;
			}
			p->pos++;
		}
		item = parse_value(p, depth + 1);
		if (!item)
			goto out;
		if (vec_push(&vc, key, item)) {
			fail(p, -ENOMEM, "out of memory");
			goto out;
		}
		skip_ws(p);
		if (p->pos < p->len && p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->pos < p->len && p->s[p->pos] == close) {
			p->pos++;
			break;
		}
		fail(p, -EINVAL, "expected ',' or '%c'", close);
		goto out;
	}
done:
	v = new_value(p, obj ? JSON_OBJECT : JSON_ARRAY);
	if (!v)
		goto out;
	v->n = vc.n;
	if (vc.n) {
		v->items = arena_alloc(p->doc, vc.n * sizeof(*v->items));
		v->keys = obj ? arena_alloc(p->doc, vc.n * sizeof(*v->keys)) : NULL;
		if (!v->items || (obj && !v->keys)) {
			v = fail(p, -ENOMEM, "out of memory");
			goto out;
		}
		memcpy(v->items, vc.items, vc.n * sizeof(*v->items));
		if (obj)
			memcpy(v->keys, vc.keys, vc.n * sizeof(*v->keys));
	}
out:
	free(vc.items);
	free(vc.keys);
	return p->rc ? NULL : v;
}

static const struct json *parse_value(struct parser *p, int depth)
{
	struct json *v;

	if (depth > JSON_MAX_DEPTH)
		return fail(p, -EINVAL, "nested deeper than %d", JSON_MAX_DEPTH);
	skip_ws(p);
	if (p->pos >= p->len)
		return fail(p, -EINVAL, "unexpected end of input");
	switch (p->s[p->pos]) {
	case '{':
		return parse_container(p, depth, true);
	case '[':
		return parse_container(p, depth, false);
	case '"': {
		const char *s = parse_string(p);

		if (!s || !(v = new_value(p, JSON_STRING)))
			return NULL;
		v->str = s;
		return v;
	}
	case 't':
	case 'f': {
		bool b = lit(p, "true");

		if (!b && !lit(p, "false"))
			return fail(p, -EINVAL, "bad literal");
		if (!(v = new_value(p, JSON_BOOL)))
			return NULL;
		v->b = b;
		return v;
	}
	case 'n':
		if (!lit(p, "null"))
			return fail(p, -EINVAL, "bad literal");
		return new_value(p, JSON_NULL);
	default:
		return parse_number(p);
	}
}

int json_parse(const char *text, size_t len, struct json_doc **out,
	       char *err, size_t errlen)
{
	struct parser p = { .s = text, .len = len, .err = err, .errlen = errlen };
	char dummy[1];

	if (!errlen) {
		p.err = dummy;
		p.errlen = sizeof(dummy);
	}
	if (len > JSON_MAX_INPUT) {
		fail(&p, -E2BIG, "input larger than %u bytes", JSON_MAX_INPUT);
		return p.rc;
	}
	p.doc = calloc(1, sizeof(*p.doc));
	if (!p.doc)
		return -ENOMEM;
	p.doc->root = parse_value(&p, 0);
	if (!p.rc) {
		skip_ws(&p);
		if (p.pos != p.len)
			fail(&p, -EINVAL, "trailing characters after the value");
	}
	if (p.rc) {
		json_doc_free(p.doc);
		return p.rc;
	}
	*out = p.doc;
	return 0;
}

void json_doc_free(struct json_doc *doc)
{
	if (!doc)
		return;
	while (doc->blocks) {
		struct arena_block *b = doc->blocks;

		doc->blocks = b->next;
		free(b);
	}
	free(doc);
}

const struct json *json_root(const struct json_doc *doc)
{
	return doc->root;
}

enum json_type json_type(const struct json *v)
{
	return v ? v->type : JSON_NULL;
}

const struct json *json_get(const struct json *o, const char *key)
{
	if (!o || o->type != JSON_OBJECT)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (!strcmp(o->keys[i], key))
			return o->items[i];
	return NULL;
}

size_t json_len(const struct json *v)
{
	return v && (v->type == JSON_ARRAY || v->type == JSON_OBJECT) ? v->n : 0;
}

const struct json *json_at(const struct json *v, size_t i)
{
	return i < json_len(v) ? v->items[i] : NULL;
}

const char *json_key(const struct json *o, size_t i)
{
	return o && o->type == JSON_OBJECT && i < o->n ? o->keys[i] : NULL;
}

double json_num(const struct json *v, double def)
{
	return v && v->type == JSON_NUMBER ? v->num : def;
}

uint64_t json_u64(const struct json *v, uint64_t def)
{
	return v && v->type == JSON_NUMBER && v->whole ? v->u : def;
}

const char *json_str(const struct json *v, const char *def)
{
	return v && v->type == JSON_STRING ? v->str : def;
}

bool json_bool(const struct json *v, bool def)
{
	return v && v->type == JSON_BOOL ? v->b : def;
}

size_t json_utf8_seq(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	uint32_t cp;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)	/* also stops at the NUL */
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) ||
	    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return n;
}

void json_write_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	fputc('"', f);
	while (*p) {
		size_t n = json_utf8_seq((const char *)p);

		if (!n) {
			fputs("\\ufffd", f);
			p++;
			continue;
		}
		if (n > 1) {
			fwrite(p, 1, n, f);
			p += n;
			continue;
		}
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
		p++;
	}
	fputc('"', f);
}

void json_write(FILE *f, const struct json *v)
{
	switch (json_type(v)) {
	case JSON_NULL:
		fputs("null", f);
		return;
	case JSON_BOOL:
		fputs(v->b ? "true" : "false", f);
		return;
	case JSON_NUMBER:
		if (v->whole)
			fprintf(f, "%llu", (unsigned long long)v->u);
		else if (v->num == 0)
			fputs("0", f);	/* -0.0 too, as "-0" is: a second write agrees */
		else if (isfinite(v->num))
			fprintf(f, "%.17g", v->num);
		else
			fputs("null", f);
		return;
	case JSON_STRING:
		json_write_str(f, v->str);
		return;
	case JSON_ARRAY:
	case JSON_OBJECT:
		fputc(v->type == JSON_ARRAY ? '[' : '{', f);
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				fputc(',', f);
			if (v->type == JSON_OBJECT) {
				json_write_str(f, v->keys[i]);
				fputc(':', f);
			}
			json_write(f, v->items[i]);
		}
		fputc(v->type == JSON_ARRAY ? ']' : '}', f);
		return;
	}
}
