/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stagefs-gc: drop old dataset versions and remove the chunk and pack
 * objects no manifest names any more (`stagefs gc [options] rados://POOL`).
 *
 * Design (mark and sweep, like git gc / restic prune / CVMFS gc).
 *   1. List every object of the pool's namespace once and sort the names
 *      into chunks, packs, manifest heads and parts, and dataset pointers
 *      (sfs_rados_oid_parse(); anything else is left alone).
 *   2. Choose the versions to drop: --drop NAME@V, and with --keep N all
 *      but the N newest versions up to each dataset's latest.  The latest
 *      version (the pointer's) is never dropped, nor a version above it (a
 *      publish in progress, or an interrupted one: drop it by name).
 *   3. Mark: read every manifest that stays and put each chunk id it names
 *      into a set, and each pack it names (manifest_pack()) into another.
 *      A pack is kept whole while any file of any such manifest lies in
 *      it, however many of its other files are gone.  The chunk ids of
 *      packed files name no object; marking them is harmless.  A manifest that cannot be read or opened stops the run
 *      before anything is removed, unless its head is younger than the
 *      grace period (a split manifest whose publish is still writing it).
 *   4. Sweep: remove the dropped versions (head first, then parts), then
 *      every unmarked chunk or pack and every orphan manifest part whose
 *      object mtime is older than the grace period.  Each is stat'ed first
 *      and removed with a write op that asserts the object version seen, so
 *      a chunk or pack that a publish renewed in between is kept.
 *
 * Why this is safe beside a running publish: publish stores (or renews the
 * mtime of, rados.h SFS_RADOS_FRESHEN_S) every chunk and every pack, new or
 * reused from the previous version, before it writes the manifest that
 * names it.  A manifest gc did not see was written after the
 * listing; its chunks were stored or renewed at most the publish's running
 * time plus SFS_RADOS_FRESHEN_S earlier, so a grace period longer than that
 * keeps them (docs/gc.md states the rule).  Versions dropped are gone for
 * mounts that still read them: their uncached chunks then fail with EIO.
 *
 * Removals run -j at a time through librados aio on this one thread (the
 * completions are waited for in order, no callbacks).
 *
 * Exit status: 0 done (or nothing to do), 1 any error (with a message).
 */
#include "idset.h"
#include "json.h"
#include "log.h"
#include "manifest/manifest.h"
#include "backend/rados.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_JOBS	16
#define DEFAULT_TIMEOUT	30000
#define DEFAULT_GRACE	3600

/* One manifest object (head or part) from the listing. */
struct mobj {
	char name[SFS_RADOS_NAME_MAX + 1];
	uint64_t version;
	int64_t part;		/* -1: the head (or only) object */
	bool drop;		/* its version is dropped */
};

/* A --drop argument. */
struct dropreq {
	char name[SFS_RADOS_NAME_MAX + 1];
	uint64_t version;
	bool found;
};

enum cand_kind { C_CHUNK, C_PACK, C_PART, C_DROPPED };

/* An object that may be removed: stat'ed, then removed if it qualifies. */
struct cand {
	char oid[SFS_RADOS_OID_MAX];
	enum cand_kind kind;
};

/* One aio operation in flight. */
struct op {
	const struct cand *c;
	rados_completion_t comp;
	rados_write_op_t wop;	/* the remove */
	bool removing;
	uint64_t size;
	time_t mtime;
};

struct gc {
	/* options */
	const char *uri;
	struct sfs_rados_uri target;	/* the URI, parsed (owns the strings below) */
	const char *pool, *nspace;
	struct sfs_rados_opts ro;	/* --ceph-conf, --id, --keyring, --timeout */
	uint64_t keep;		/* 0: --keep not given */
	struct dropreq *drops;
	size_t ndrops;
	uint64_t grace_s;
	bool dry_run, quiet, verbose, json;
	int jobs;

	rados_t cl;
	rados_ioctx_t io;
	time_t cutoff;		/* objects with mtime <= this are old enough */

	/* the listing */
	struct sfs_id *chunks;
	size_t nchunks, chunks_cap;
	struct sfs_id *packs;
	size_t npacks, packs_cap;
	struct mobj *mobjs;
	size_t nmobjs, mobjs_cap;
	uint64_t others;

	struct idset marked;
	struct idset marked_packs;
	struct cand *cands;
	size_t ncands, cands_cap;

	/* results */
	uint64_t versions_dropped, manifests_read, manifests_young;
	uint64_t chunks_in_use, removed, removed_bytes, removed_chunks;
	uint64_t kept_young, kept_changed, gone_already;
	uint64_t packs_in_use, removed_packs, packs_young, packs_changed;
	uint64_t t0;
	int errors;
};

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void usage(FILE *f)
{
	fprintf(f,
"usage: stagefs gc [options] rados://POOL[?OPT[&OPT]...]\n"
"\n"
"Drop old versions of the datasets in a Ceph pool, then remove the chunk\n"
"and pack objects that no remaining version names.  The latest version of\n"
"every dataset is always kept.  Chunks and packs younger than the grace\n"
"period are kept too, so gc may run while publishes do (see docs/gc.md).\n"
"\n"
"options:\n"
"  --keep N           keep the N newest versions of every dataset (N >= 1)\n"
"                     and drop the older ones\n"
"  --drop NAME@V      drop version V of dataset NAME (repeatable)\n"
"  --grace T          keep unnamed chunks and packs younger than T (default 1h; below\n"
"                     %um it is safe only when no publish runs)\n"
"  -n, --dry-run      remove nothing; print what would be removed\n"
"  -j N               operations in flight (default %d)\n"
"  --ceph-conf FILE   ceph.conf (default $CEPH_CONF, then /etc/ceph/ceph.conf)\n"
"  --id ID            cephx client id (default admin)\n"
"  --keyring FILE     cephx keyring (default: from ceph.conf)\n"
"  --timeout T        bound on every RADOS operation (default 30s)\n"
"  -v, --verbose      print every object removed\n"
"  -q, --quiet        print errors only\n"
"  --json             print the summary as JSON on stdout\n"
"  -h, --help         this text\n"
"\n"
"Exit status: 0 done, 1 an error (nothing is removed when a manifest that\n"
"stays cannot be read).\n", SFS_RADOS_FRESHEN_S / 60 * 2, DEFAULT_JOBS);
}

static void die_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "stagefs gc: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see stagefs gc --help)\n");
	exit(1);
}

static void err(struct gc *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void err(struct gc *g, const char *fmt, ...)
{
	va_list ap;

	g->errors++;
	fprintf(stderr, "stagefs gc: error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void note(struct gc *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct gc *g, const char *fmt, ...)
{
	va_list ap;

	if (g->quiet)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 256;
	void *np;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	np = realloc(*p, ncap * elem);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

/* ---- 1. the listing ---- */

static int list_pool(struct gc *g)
{
	rados_list_ctx_t ctx;
	const char *oid;
	int rc;

	rc = rados_nobjects_list_open(g->io, &ctx);
	if (rc < 0) {
		err(g, "cannot list pool '%s': %s", g->pool, strerror(-rc));
		return rc;
	}
	while ((rc = rados_nobjects_list_next(ctx, &oid, NULL, NULL)) == 0) {
		struct sfs_rados_oid o;

		switch (sfs_rados_oid_parse(oid, &o)) {
		case SFS_RADOS_CHUNK:
			if (grow((void **)&g->chunks, &g->chunks_cap, g->nchunks + 1,
				 sizeof(*g->chunks)))
				goto oom;
			g->chunks[g->nchunks++] = o.id;
			break;
		case SFS_RADOS_PACK:
			if (grow((void **)&g->packs, &g->packs_cap, g->npacks + 1,
				 sizeof(*g->packs)))
				goto oom;
			g->packs[g->npacks++] = o.id;
			break;
		case SFS_RADOS_MANIFEST:
			if (grow((void **)&g->mobjs, &g->mobjs_cap, g->nmobjs + 1,
				 sizeof(*g->mobjs)))
				goto oom;
			memset(&g->mobjs[g->nmobjs], 0, sizeof(*g->mobjs));
			memcpy(g->mobjs[g->nmobjs].name, o.name, sizeof(o.name));
			g->mobjs[g->nmobjs].version = o.version;
			g->mobjs[g->nmobjs].part = o.part;
			g->nmobjs++;
			break;
		case SFS_RADOS_DATASET:
			break;	/* datasets are found through their manifests */
		default:
			g->others++;
		}
	}
	rados_nobjects_list_close(ctx);
	if (rc != -ENOENT) {
		err(g, "cannot list pool '%s': %s", g->pool, strerror(-rc));
		return rc;
	}
	return 0;
oom:
	rados_nobjects_list_close(ctx);
	err(g, "out of memory");
	return -ENOMEM;
}

/* Heads first, by name, then version (parts after their head). */
static int mobj_cmp(const void *a, const void *b)
{
	const struct mobj *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	if (x->version != y->version)
		return x->version < y->version ? -1 : 1;
	return x->part < y->part ? -1 : x->part > y->part;
}

static const struct mobj *head_of(const struct gc *g, const char *name,
				  uint64_t version)
{
	struct mobj key = { .version = version, .part = -1 };

	snprintf(key.name, sizeof(key.name), "%s", name);
	return bsearch(&key, g->mobjs, g->nmobjs, sizeof(key), mobj_cmp);
}

/* ---- 2. what to drop ---- */

static int choose_drops(struct gc *g)
{
	size_t i = 0;

	/* one dataset at a time: [i, j) are its objects, sorted by version */
	while (i < g->nmobjs) {
		const char *name = g->mobjs[i].name;
		uint64_t latest = 0, kept = 0;
		size_t j = i;
		int rc;

		while (j < g->nmobjs && !strcmp(g->mobjs[j].name, name))
			j++;
		rc = sfs_rados_latest(g->io, name, &latest);
		if (rc && rc != -ENOENT) {
			err(g, "cannot read sfs.dataset.%s: %s", name, strerror(-rc));
			return rc;
		}
		/* newest first, so --keep counts from the latest down */
		for (size_t k = j; k-- > i;) {
			struct mobj *m = &g->mobjs[k];

			if (m->part >= 0 || m->version > latest)
				continue;
			if (m->version != latest && g->keep && kept >= g->keep)
				m->drop = true;
			kept++;
		}
		for (size_t d = 0; d < g->ndrops; d++) {
			struct dropreq *r = &g->drops[d];
			struct mobj *m;

			if (strcmp(r->name, name))
				continue;
			m = (struct mobj *)head_of(g, r->name, r->version);
			if (!m)
				continue;
			r->found = true;
			if (r->version == latest) {
				err(g, "%s@%" PRIu64 " is the latest version of %s: publish a newer one first",
				    name, r->version, name);
				return -EINVAL;
			}
			m->drop = true;
		}
		/* parts go with their head */
		for (size_t k = i; k < j; k++) {
			const struct mobj *h;

			if (g->mobjs[k].part < 0)
				continue;
			h = head_of(g, name, g->mobjs[k].version);
			g->mobjs[k].drop = h && h->drop;
		}
		i = j;
	}
	for (size_t d = 0; d < g->ndrops; d++) {
		if (!g->drops[d].found) {
			err(g, "%s@%" PRIu64 " does not exist (no object sfs.manifest.%s.%" PRIu64 ")",
			    g->drops[d].name, g->drops[d].version, g->drops[d].name,
			    g->drops[d].version);
			return -ENOENT;
		}
	}
	return 0;
}

/* ---- 3. mark ---- */

static int mark_version(struct gc *g, const struct mobj *m)
{
	char msg[512], oid[SFS_RADOS_OID_MAX];
	struct manifest *mf;
	uint64_t size;
	time_t mtime;
	void *buf;
	size_t len;
	int rc;

	rc = sfs_rados_manifest_read(g->io, m->name, m->version, &buf, &len,
				     msg, sizeof(msg));
	if (!rc) {
		rc = manifest_open(buf, len, &mf, msg, sizeof(msg));
		if (rc)
			free(buf);
	}
	if (!rc) {
		uint64_t bad;

		/* a bad part's ids would read as zero: marking must see them all */
		rc = manifest_verify(mf, &bad);
		if (rc) {
			snprintf(msg, sizeof(msg), "%" PRIu64 " bad part(s) in the manifest (checksum mismatch)",
				 bad);
			manifest_close(mf);
		}
	}
	if (rc) {
		/* being written by a publish (a split manifest): its chunks are young */
		sfs_rados_manifest_oid(m->name, m->version, oid);
		if (rados_stat(g->io, oid, &size, &mtime) == 0 && mtime > g->cutoff) {
			note(g, "stagefs gc: %s@%" PRIu64 " is not readable yet (%s); written %lld s ago, so taken for a publish in progress",
			     m->name, m->version, msg, (long long)(time(NULL) - mtime));
			g->manifests_young++;
			return 0;
		}
		if (rc == -ENOENT) {	/* removed since the listing */
			note(g, "stagefs gc: %s@%" PRIu64 " vanished during the run", m->name,
			     m->version);
			return 0;
		}
		err(g, "cannot read %s@%" PRIu64 ": %s; nothing was removed (drop it with --drop %s@%" PRIu64 " if it is abandoned)",
		    m->name, m->version, msg, m->name, m->version);
		return rc;
	}
	for (uint64_t i = 0, n = manifest_nids(mf); i < n; i++) {
		struct sfs_id id;

		manifest_id(mf, i, &id);
		if (idset_add(&g->marked, &id) < 0) {
			manifest_close(mf);
			err(g, "out of memory");
			return -ENOMEM;
		}
	}
	for (uint32_t i = 0, n = manifest_npacks(mf); i < n; i++) {
		struct manifest_pack pk;

		/* verified, so only a record that makes no sense fails */
		rc = manifest_pack(mf, i, &pk);
		if (rc) {
			manifest_close(mf);
			err(g, "cannot read %s@%" PRIu64 ": pack %u is corrupt; nothing was removed (drop it with --drop %s@%" PRIu64 " if it is abandoned)",
			    m->name, m->version, i, m->name, m->version);
			return rc;
		}
		if (idset_add(&g->marked_packs, &pk.id) < 0) {
			manifest_close(mf);
			err(g, "out of memory");
			return -ENOMEM;
		}
	}
	manifest_close(mf);
	g->manifests_read++;
	return 0;
}

static int mark(struct gc *g)
{
	for (size_t i = 0; i < g->nmobjs; i++) {
		const struct mobj *m = &g->mobjs[i];
		int rc;

		if (m->part >= 0 || m->drop)
			continue;
		rc = mark_version(g, m);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- 4. sweep ---- */

static int add_cand(struct gc *g, const char *oid, enum cand_kind kind)
{
	if (grow((void **)&g->cands, &g->cands_cap, g->ncands + 1, sizeof(*g->cands))) {
		err(g, "out of memory");
		return -ENOMEM;
	}
	snprintf(g->cands[g->ncands].oid, SFS_RADOS_OID_MAX, "%s", oid);
	g->cands[g->ncands].kind = kind;
	g->ncands++;
	return 0;
}

/* Unmarked chunks and packs, and orphan parts; dropped versions' parts. */
static int collect(struct gc *g)
{
	char oid[SFS_RADOS_OID_MAX];

	for (size_t i = 0; i < g->nmobjs; i++) {
		const struct mobj *m = &g->mobjs[i];

		if (m->part < 0)
			continue;
		if (!m->drop && head_of(g, m->name, m->version))
			continue;
		sfs_rados_part_oid(m->name, m->version, (uint64_t)m->part, oid);
		if (add_cand(g, oid, m->drop ? C_DROPPED : C_PART))
			return -ENOMEM;
	}
	for (size_t i = 0; i < g->nchunks; i++) {
		if (idset_has(&g->marked, &g->chunks[i])) {
			g->chunks_in_use++;
			continue;
		}
		sfs_rados_chunk_oid(&g->chunks[i], oid);
		if (add_cand(g, oid, C_CHUNK))
			return -ENOMEM;
	}
	for (size_t i = 0; i < g->npacks; i++) {
		if (idset_has(&g->marked_packs, &g->packs[i])) {
			g->packs_in_use++;
			continue;
		}
		sfs_rados_pack_oid(&g->packs[i], oid);
		if (add_cand(g, oid, C_PACK))
			return -ENOMEM;
	}
	return 0;
}

static void op_start_stat(struct gc *g, struct op *o)
{
	int rc;

	o->removing = false;
	rados_aio_create_completion2(NULL, NULL, &o->comp);
	rc = rados_aio_stat(g->io, o->c->oid, o->comp, &o->size, &o->mtime);
	if (rc < 0) {
		rados_aio_release(o->comp);
		o->comp = NULL;
		err(g, "cannot stat %s: %s", o->c->oid, strerror(-rc));
	}
}

static void op_start_remove(struct gc *g, struct op *o, uint64_t objver)
{
	int rc;

	o->removing = true;
	o->wop = rados_create_write_op();
	if (!o->wop) {
		err(g, "out of memory");
		return;
	}
	/* a publish that renewed or rewrote it since the stat wins */
	rados_write_op_assert_version(o->wop, objver);
	rados_write_op_remove(o->wop);
	rados_aio_create_completion2(NULL, NULL, &o->comp);
	rc = rados_aio_write_op_operate(o->wop, g->io, o->comp, o->c->oid, NULL, 0);
	if (rc < 0) {
		rados_aio_release(o->comp);
		o->comp = NULL;
		rados_release_write_op(o->wop);
		o->wop = NULL;
		err(g, "cannot remove %s: %s", o->c->oid, strerror(-rc));
	}
}

static void counted_removed(struct gc *g, const struct op *o)
{
	g->removed++;
	g->removed_bytes += o->size;
	if (o->c->kind == C_CHUNK)
		g->removed_chunks++;
	else if (o->c->kind == C_PACK)
		g->removed_packs++;
	if (g->dry_run)
		printf("would remove %s (%" PRIu64 " bytes)\n", o->c->oid, o->size);
	else if (g->verbose)
		printf("removed %s (%" PRIu64 " bytes)\n", o->c->oid, o->size);
}

/* Handle the finished operation of @o; may start its remove. */
static void op_done(struct gc *g, struct op *o)
{
	uint64_t objver;
	int rc;

	rados_aio_wait_for_complete_and_cb(o->comp);
	rc = rados_aio_get_return_value(o->comp);
	objver = rados_aio_get_version(o->comp);
	rados_aio_release(o->comp);
	o->comp = NULL;
	if (o->wop) {
		rados_release_write_op(o->wop);
		o->wop = NULL;
	}
	if (rc == -ENOENT) {	/* someone else removed it */
		g->gone_already++;
		return;
	}
	if (o->removing) {
		if (rc == 0)
			counted_removed(g, o);
		else if ((rc == -ERANGE || rc == -EOVERFLOW) && o->c->kind == C_PACK)
			g->packs_changed++;	/* renewed by a publish meanwhile */
		else if (rc == -ERANGE || rc == -EOVERFLOW)
			g->kept_changed++;
		else
			err(g, "cannot remove %s: %s", o->c->oid, strerror(-rc));
		return;
	}
	if (rc < 0) {
		err(g, "cannot stat %s: %s", o->c->oid, strerror(-rc));
		return;
	}
	if (o->c->kind != C_DROPPED && o->mtime > g->cutoff) {
		if (o->c->kind == C_PACK)
			g->packs_young++;
		else
			g->kept_young++;
		return;
	}
	if (g->dry_run) {
		counted_removed(g, o);
		return;
	}
	op_start_remove(g, o, objver);
}

/* Stat and remove g->cands[from, to), -j at a time, in order. */
static void sweep_range(struct gc *g, size_t from, size_t to)
{
	struct op *ops = calloc((size_t)g->jobs, sizeof(*ops));
	size_t next = from, head = 0, n = 0;	/* ring of in-flight ops */

	if (!ops) {
		err(g, "out of memory");
		return;
	}
	while (next < to || n) {
		while (next < to && n < (size_t)g->jobs) {
			struct op *o = &ops[(head + n) % (size_t)g->jobs];

			memset(o, 0, sizeof(*o));
			o->c = &g->cands[next++];
			op_start_stat(g, o);
			if (o->comp)
				n++;
		}
		if (!n)
			break;
		{
			struct op *o = &ops[head];

			op_done(g, o);
			head = (head + 1) % (size_t)g->jobs;
			n--;
			if (o->comp) {	/* its remove: back in the ring, at the end */
				struct op *t = &ops[(head + n) % (size_t)g->jobs];

				if (t != o)
					*t = *o;
				n++;
			}
		}
	}
	free(ops);
}

/* Drop the chosen versions: each head first (the version is gone), then the rest. */
static void sweep(struct gc *g)
{
	char oid[SFS_RADOS_OID_MAX];
	size_t first;

	for (size_t i = 0; i < g->nmobjs; i++) {
		const struct mobj *m = &g->mobjs[i];

		if (m->part >= 0 || !m->drop)
			continue;
		g->versions_dropped++;
		note(g, "stagefs gc: %s %s@%" PRIu64, g->dry_run ? "would drop" : "dropping",
		     m->name, m->version);
	}
	/* heads of dropped versions go into a range of their own, swept first */
	first = g->ncands;
	for (size_t i = 0; i < g->nmobjs; i++) {
		const struct mobj *m = &g->mobjs[i];

		if (m->part >= 0 || !m->drop)
			continue;
		sfs_rados_manifest_oid(m->name, m->version, oid);
		if (add_cand(g, oid, C_DROPPED))
			return;
	}
	sweep_range(g, first, g->ncands);
	if (g->errors)
		return;		/* leave the chunks of a half-dropped version */
	sweep_range(g, 0, first);
}

/* ---- main ---- */

/*
 * The target, in the mount's grammar (sfs_rados_uri_parse): a whole pool
 * (chunks are shared by every dataset in it), with ns=, conf=, id=,
 * keyring= and timeout= as it allows; those take precedence over the flags.
 */
static void parse_target(struct gc *g, const char *uri)
{
	char msg[512];

	if (sfs_rados_uri_parse(uri, &g->target, msg, sizeof(msg)))
		die_usage("%s", msg);
	if (g->target.plain || g->target.chunk_size)
		die_usage("%s: gc works on published datasets: no plain or chunk_size", uri);
	if (g->target.path && *g->target.path)
		die_usage("%s: gc works on a whole pool (chunks are shared by every dataset): give rados://POOL, and --drop/--keep for versions",
			  uri);
	g->pool = g->target.pool;
	g->nspace = g->target.ns;
	sfs_rados_uri_opts(&g->target, &g->ro);
}

static void parse_drop(struct gc *g, const char *arg)
{
	const char *at = strrchr(arg, '@');
	struct dropreq *r;
	char *end;
	size_t nlen;

	if (!at || at == arg)
		die_usage("--drop: '%s' is not NAME@VERSION", arg);
	nlen = (size_t)(at - arg);
	g->drops = realloc(g->drops, (g->ndrops + 1) * sizeof(*g->drops));
	if (!g->drops)
		die_usage("out of memory");
	r = &g->drops[g->ndrops++];
	memset(r, 0, sizeof(*r));
	if (nlen > SFS_RADOS_NAME_MAX)
		die_usage("--drop: '%s': dataset name too long", arg);
	memcpy(r->name, arg, nlen);
	if (!sfs_rados_name_ok(r->name))
		die_usage("--drop: '%s': bad dataset name (letters, digits, '_' and '-')", arg);
	errno = 0;
	r->version = strtoull(at + 1, &end, 10);
	if (errno || *end || end == at + 1 || r->version == 0 || at[1] == '-')
		die_usage("--drop: '%s': the version must be a number from 1", arg);
}

static void parse_args(struct gc *g, int argc, char **argv)
{
	enum { O_KEEP = 256, O_DROP, O_GRACE, O_JSON };
	static const struct option lopts[] = {
		{ "keep", required_argument, NULL, O_KEEP },
		{ "drop", required_argument, NULL, O_DROP },
		{ "grace", required_argument, NULL, O_GRACE },
		{ "dry-run", no_argument, NULL, 'n' },
		SFS_RADOS_LONGOPTS,
		{ "json", no_argument, NULL, O_JSON },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char msg[256];
	uint64_t v;
	int c, r;

	while ((c = getopt_long(argc, argv, "nj:vqh", lopts, NULL)) != -1) {
		switch (c) {
		case O_KEEP:
			if (parse_uint(optarg, &v) || v < 1)
				die_usage("--keep: '%s' is not a number from 1 (the latest version is always kept)",
					  optarg);
			g->keep = v;
			break;
		case O_DROP:
			parse_drop(g, optarg);
			break;
		case O_GRACE:
			if (!strcmp(optarg, "0"))
				v = 0;
			else if (parse_duration_ms(optarg, &v))
				die_usage("--grace: '%s' is not a duration (30m, 1h, 0)", optarg);
			g->grace_s = v / 1000;
			break;
		case 'n':
			g->dry_run = true;
			break;
		case 'j':
			if (parse_uint(optarg, &v) || v < 1 || v > 1024)
				die_usage("-j: '%s' is not a number from 1 to 1024", optarg);
			g->jobs = (int)v;
			break;
		case O_JSON:
			g->json = true;
			break;
		case 'v':
			g->verbose = true;
			break;
		case 'q':
			g->quiet = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			r = sfs_rados_cli_opt(c, optarg, &g->ro, msg, sizeof(msg));
			if (r < 0)
				die_usage("%s", msg);
			if (!r)
				die_usage("bad option");
		}
	}
	if (argc - optind != 1)
		die_usage("expected one rados://POOL");
	g->uri = argv[optind];
	parse_target(g, g->uri);
}

#define S(n)	((n) == 1 ? "" : "s")

static void summary(struct gc *g)
{
	double secs = (double)(now_ns() - g->t0) / 1e9;
	const char *would = g->dry_run ? "would remove" : "removed";
	uint64_t mobjs;
	char b1[32];

	if (g->json) {
		printf("{\"pool\": ");
		json_write_str(stdout, g->pool);
		printf(", \"namespace\": ");
		json_write_str(stdout, g->nspace ? g->nspace : "");
		printf(", \"dry_run\": %s"
		       ", \"versions_dropped\": %" PRIu64 ", \"manifests_read\": %" PRIu64
		       ", \"manifests_in_progress\": %" PRIu64
		       ", \"chunks\": %zu, \"chunks_in_use\": %" PRIu64
		       ", \"objects_removed\": %" PRIu64 ", \"chunks_removed\": %" PRIu64
		       ", \"bytes_removed\": %" PRIu64 ", \"kept_young\": %" PRIu64
		       ", \"kept_changed\": %" PRIu64
		       ", \"packs\": %zu, \"packs_in_use\": %" PRIu64
		       ", \"packs_removed\": %" PRIu64 ", \"packs_kept_young\": %" PRIu64
		       ", \"packs_kept_changed\": %" PRIu64 ", \"gone_already\": %" PRIu64
		       ", \"other_objects\": %" PRIu64 ", \"grace_s\": %" PRIu64
		       ", \"errors\": %d, \"seconds\": %.3f}\n",
		       g->dry_run ? "true" : "false",
		       g->versions_dropped, g->manifests_read, g->manifests_young,
		       g->nchunks, g->chunks_in_use, g->removed, g->removed_chunks,
		       g->removed_bytes, g->kept_young, g->kept_changed,
		       g->npacks, g->packs_in_use, g->removed_packs, g->packs_young,
		       g->packs_changed,
		       g->gone_already, g->others, g->grace_s, g->errors, secs);
		return;
	}
	if (g->quiet)
		return;
	mobjs = g->removed - g->removed_chunks - g->removed_packs;
	printf("gc %s: %s %" PRIu64 " object%s, %s (%" PRIu64 " chunk%s, %" PRIu64
	       " pack%s, %" PRIu64 " manifest object%s; %" PRIu64 " version%s dropped) in %.2f s; chunks kept: %"
	       PRIu64 " in use, %" PRIu64 " younger than the grace period (%" PRIu64
	       " s), %" PRIu64 " renewed meanwhile; packs kept: %" PRIu64 " in use, %"
	       PRIu64 " younger, %" PRIu64 " renewed; %d error%s\n",
	       g->uri, would, g->removed, S(g->removed),
	       fmt_size(g->removed_bytes, b1, sizeof(b1)), g->removed_chunks,
	       S(g->removed_chunks), g->removed_packs, S(g->removed_packs),
	       mobjs, S(mobjs), g->versions_dropped,
	       S(g->versions_dropped), secs, g->chunks_in_use, g->kept_young,
	       g->grace_s, g->kept_changed, g->packs_in_use, g->packs_young,
	       g->packs_changed, g->errors, S(g->errors));
}

int main(int argc, char **argv)
{
	struct gc g = {
		.jobs = DEFAULT_JOBS,
		.ro.timeout_ms = DEFAULT_TIMEOUT,
		.grace_s = DEFAULT_GRACE,
		.marked = IDSET_INIT,
		.marked_packs = IDSET_INIT,
	};
	char msg[512];
	int rc = 1;

	parse_args(&g, argc, argv);
	if (g.grace_s < 2 * SFS_RADOS_FRESHEN_S && !g.quiet)
		fprintf(stderr, "stagefs gc: warning: a grace period of %" PRIu64 " s is safe only while no publish runs on this pool (docs/gc.md)\n",
			g.grace_s);
	g.t0 = now_ns();
	if (sfs_rados_connect(&g.ro, &g.cl, msg, sizeof(msg)) ||
	    sfs_rados_ioctx(g.cl, g.pool, g.nspace, &g.io, msg, sizeof(msg))) {
		fprintf(stderr, "stagefs gc: error: %s\n", msg);
		goto out_shutdown;
	}
	/* before the listing: whatever is older than this was old when we looked */
	g.cutoff = (time_t)((uint64_t)time(NULL) - g.grace_s);

	if (list_pool(&g))
		goto out_io;
	qsort(g.mobjs, g.nmobjs, sizeof(*g.mobjs), mobj_cmp);
	if (choose_drops(&g) || mark(&g) || collect(&g))
		goto out_io;
	sweep(&g);
	summary(&g);
	rc = g.errors ? 1 : 0;

out_io:
	rados_ioctx_destroy(g.io);
out_shutdown:
	if (g.cl)
		rados_shutdown(g.cl);
	idset_release(&g.marked);
	idset_release(&g.marked_packs);
	free(g.chunks);
	free(g.packs);
	free(g.mobjs);
	free(g.cands);
	free(g.drops);
	sfs_rados_uri_release(&g.target);	/* pool, nspace */
	return rc;
}
