/* rules.c -- rule sets: a rule file parsed into named limits, each request
 * decided as one composite, the whole set swapped atomically on reload.
 *
 * Layout.  The handle (struct sluice_rules) is stable; what a load made is a
 * version: the rules in file order, and per rule id the rule (or NULL when
 * this version lacks it) and the rule's counters.  A rule's limit -- a
 * sluice_limiter for a global rule, a sluice_table for a key rule -- is its
 * own object, which a later version may carry over (same pointer) when the
 * rule keeps its name.  Names get ids for the handle's life: every version
 * holds the sorted list of every name ever loaded, so an id resolved once
 * (sluice_rules_find) means the same rule across reloads, and its counters
 * (allocated once per id, never freed before the handle) go on counting.
 *
 * Reading a version: readers announce themselves in per-stripe counters
 * (the thread's stripe of counters.c: a cache line of its own, or the
 * shared last one), in one of two parities, as SRCU does:
 *
 *     reader:  e = epoch & 1;  readers[stripe][e] += 1;  v = cur;
 *              ... decide on v ...;  readers[stripe][e] -= 1
 *     writer:  cur = new;  flip epoch, wait until no reader of the old
 *              parity is left;  flip again, wait for the other parity;
 *              now free what only the old version used
 *
 * All of these are sequentially consistent.  A reader still on the old
 * version loaded cur before the writer stored the new one, so it had
 * counted itself, in one parity or the other, before the writer began to
 * wait; the writer waits for both parities, so it waits for that reader.
 * Readers that arrive meanwhile count in the parity not being waited for
 * (or, if they read the epoch just before a flip, see the new version), so
 * the wait ends.  The hot path pays two atomic additions on its own cache
 * line, two loads (epoch, cur), and nothing contended.
 *
 * No mix of versions.  A version that only drops, adds or carries rules
 * unchanged shares its carried objects with the old one, and each decision
 * uses one version: the switch is the pointer store.  A rule whose spec
 * changes in place (a global rule's limiter reconfigured with
 * sluice_limiter_reconfigure_at, keeping its state) would be seen changed
 * by decisions still on the old version, so then the writer closes a
 * gate: it stores NULL in cur (readers that find NULL step out and wait,
 * yielding the CPU), waits until no reader is left, changes the limiters,
 * and publishes the new version.  Decisions are held back for that moment
 * only.  Everything that can fail is done before: the text is parsed, new
 * limits made, each change tried on a scratch limiter of the old spec, and
 * a fresh limiter made for each change in case the real one runs out of
 * memory in the gate (it then starts fresh instead).
 *
 * One validation.  parse() is the whole check of a text, shared by
 * sluice_rules_check, _new, _reload and _diff: the syntax, every spec and
 * option, a rule file's own bounds (max_keys <= 2^24, at least one rule
 * unless SLUICE_RULES_ALLOW_EMPTY), then vet(): each key rule's overrides
 * set, by the load's own set_overrides, on a scratch table of one key of
 * the rule's spec -- the one refusal only the table knows (an override
 * whose state outgrows the table's 16-byte entries).  So a text check
 * accepts fails to load only for want of memory.  Files are read whole
 * (read_file: at most 16 MiB, not a directory, unchanged while read)
 * before anything is parsed.
 *
 * Memory over reloads.  A change in place of a global rule retires the
 * limiter's configuration, which the limiter keeps until it is freed (a
 * lock-free decision may be reading it).  Under the gate no decision is
 * inside, so the reload frees the retired ones there
 * (sluice__limiter_reclaim): a set reloaded forever keeps one per rule.
 * A key rule's table keeps its own configurations (table.c bounds those).
 * A concurrency rule whose N or lease changes is changed in place too (its
 * permits held count against the new N); a concurrency limit the set stops
 * using is not kept: the set drops its reference after the grace period
 * and the limit goes with its last permit handle's release (retire()).
 *
 * Shadow rules are decided after the composite of the enforcing rules, and
 * only when it admitted the request: each on its own, charged when it
 * would admit.  Counters per rule: allowed, denied, denied in shadow,
 * denied elsewhere; striped per thread as counters.c does.
 *
 * Sections and entry points:
 *   parsed text, the version, the reader's side, counters   (static)
 *   the text       sluice_rules_check, sluice_rules_check_flags
 *   files          sluice_rules_check_file
 *   building a version, what a reload would do   sluice_rules_diff, _diff_files
 *   the handle     sluice_rules_new, _new_file, _free, _reload_*_at
 *   reading        sluice_rules_find, _count, _generation, _info, _stats,
 *                  _set_top, _top_refused, _table_stats; sluice__rules_each
 *   deciding       sluice_shadow_try_acquire_at (the shadow rule on any
 *                  limits), sluice_rules_decide_at, sluice_rules_decide
 * One file past 1,200 lines: the parser, the versions and the deciding
 * share the parsed types and the readers' gate, which no other file may
 * see; split, they would need a header of those internals.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "base/clock.h"
#include "base/counters.h"
#include "limiter/limiter.h"
#include "limiter/concurrency.h"
#include "rules/rules.h"
#include "base/spin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- parsed text --------------------------------------------------------- */

typedef struct pover {
    unsigned char *key; /* owned */
    size_t keylen;
    char spec[SLUICE_SPEC_MAX]; /* canonical */
    size_t line;
} pover;

typedef struct pdef {
    char name[SLUICE_RULE_NAME_MAX + 1];
    bool global, shadow, evict;
    bool conc; /* a concurrency rule: `concurrency N [lease=D]` */
    char spec[SLUICE_SPEC_MAX]; /* canonical */
    uint64_t max_keys;
    size_t line;
    pover *ov; /* owned, sorted by key */
    size_t nov, capov;
} pdef;

typedef struct parsed {
    pdef *r;
    size_t n, cap;
    size_t noverrides;
} parsed;

static void parsed_free(parsed *p)
{
    for (size_t i = 0; i < p->n; i++) {
        for (size_t j = 0; j < p->r[i].nov; j++) sluice__free(p->r[i].ov[j].key);
        sluice__free(p->r[i].ov);
    }
    sluice__free(p->r);
    memset(p, 0, sizeof *p);
}

/* ---- the version --------------------------------------------------------- */

/* One rule's counters, striped: a cache line per stripe. */
typedef struct rctr_stripe {
    _Alignas(64) _Atomic uint64_t req[4];
    _Atomic uint64_t per[4];
} rctr_stripe;
typedef struct rctr {
    rctr_stripe s[SLUICE__STRIPES];
} rctr;

typedef struct rule {
    pdef d;                /* the definition (owns its overrides) */
    int32_t id;
    sluice_limiter *lim;   /* global rule */
    sluice_table *tab;     /* key rule */
    sluice_concurrency *conc;            /* global concurrency rule */
    sluice_concurrency_table *ctab;      /* key concurrency rule */
    rctr *ctr;             /* owned by the handle */
} rule;

typedef struct name_id {
    const char *name; /* owned by the handle */
    int32_t id;
} name_id;

typedef struct version {
    uint64_t generation;
    rule *r;          /* file order */
    size_t n;
    size_t nids;      /* ids 0 .. nids-1 known */
    rule **by_id;     /* nids: the rule, or NULL */
    rctr **ctr;       /* nids: counters (owned by the handle) */
    name_id *names;   /* nids, sorted by name */
    bool wall_clock;  /* the rules are calendar quotas: now is CLOCK_REALTIME */
} version;

typedef struct reader_stripe {
    _Alignas(64) _Atomic uint64_t n[2];
} reader_stripe;

struct sluice_rules {
    reader_stripe rd[SLUICE__STRIPES];
    _Alignas(64) _Atomic(version *) cur;
    _Atomic uint64_t epoch;
    pthread_mutex_t mu;  /* serialises reloads */
    version *v;          /* the current version (the writer's copy) */
    unsigned flags;
    size_t top_counters, top_key_bytes; /* sluice_rules_set_top (mu); 0: none */
    /* owned per id, for the handle's life (mu) */
    char **names;
    rctr **ctrs;
    size_t nids, capids;
};

/* ---- the reader's side --------------------------------------------------- */

static version *enter(sluice_rules *rs, unsigned *tok)
{
    unsigned s = sluice__counter_stripe();
    for (unsigned spins = 0;; spins++) {
        unsigned e = (unsigned)(atomic_load(&rs->epoch) & 1);
        atomic_fetch_add(&rs->rd[s].n[e], 1);
        version *v = atomic_load(&rs->cur);
        if (v) {
            *tok = s * 2 + e;
            return v;
        }
        /* the gate is closed: a reload is changing limits in place */
        atomic_fetch_sub(&rs->rd[s].n[e], 1);
        sluice__backoff(spins);
    }
}

static void leave(sluice_rules *rs, unsigned tok)
{
    atomic_fetch_sub(&rs->rd[tok / 2].n[tok % 2], 1);
}

/* Wait until no reader that entered before the call is left (the writer
 * has stored cur before). */
static void grace(sluice_rules *rs)
{
    for (int flip = 0; flip < 2; flip++) {
        unsigned old = (unsigned)(atomic_fetch_add(&rs->epoch, 1) & 1);
        for (unsigned s = 0; s < SLUICE__STRIPES; s++)
            for (unsigned spins = 0; atomic_load(&rs->rd[s].n[old]) != 0; spins++)
                sluice__backoff(spins);
    }
}

/* ---- counters ------------------------------------------------------------ */

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static void own_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, sat_add(atomic_load_explicit(c, memory_order_relaxed), v),
                          memory_order_relaxed);
}

static void shared_add(_Atomic uint64_t *c, uint64_t v)
{
    uint64_t old = atomic_load_explicit(c, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(c, &old, sat_add(old, v), memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

/* Count on stripe s, the calling thread's (enter's token / 2). */
static void rctr_count(rctr *c, unsigned s, int decision, uint64_t permits)
{
    rctr_stripe *st = &c->s[s];
    if (s != SLUICE__STRIPES - 1) {
        own_add(&st->req[decision], 1);
        if (permits) own_add(&st->per[decision], permits);
    } else {
        atomic_fetch_add_explicit(&st->req[decision], 1, memory_order_relaxed);
        if (permits) shared_add(&st->per[decision], permits);
    }
}

static void rctr_read(const rctr *c, sluice_rule_stats *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned s = 0; s < SLUICE__STRIPES; s++) {
        rctr_stripe *st = (rctr_stripe *)&c->s[s]; /* loads only */
        for (int d = 0; d < 4; d++) {
            out->requests[d] += atomic_load_explicit(&st->req[d], memory_order_relaxed);
            out->permits[d] = sat_add(out->permits[d],
                                      atomic_load_explicit(&st->per[d], memory_order_relaxed));
        }
    }
}

/* ---- the text ------------------------------------------------------------ */

/* err: "line N: WHAT "TOKEN"[: MORE]", the token's bytes that are not
 * printable ASCII written \xHH, at most 80 of them (then ...). */
static int bad(char *err, size_t errlen, size_t line, const char *what, const char *tok,
               size_t toklen, const char *more)
{
    if (errlen == 0) return SLUICE_EINVAL;
    /* a quoted word as written: its own quotes would double the message's */
    if (tok && toklen >= 2 && tok[0] == '"' && tok[toklen - 1] == '"') {
        tok++;
        toklen -= 2;
    }
    char q[80 * 4 + 8];
    size_t k = 0;
    if (tok) {
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < toklen && i < 80; i++) {
            unsigned char c = (unsigned char)tok[i];
            if (c >= 0x20 && c < 0x7f) {
                q[k++] = (char)c;
            } else {
                q[k++] = '\\';
                q[k++] = 'x';
                q[k++] = hex[c >> 4];
                q[k++] = hex[c & 15];
            }
        }
        if (toklen > 80) q[k++] = '.', q[k++] = '.', q[k++] = '.';
    }
    q[k] = '\0';
    if (tok)
        snprintf(err, errlen, "line %zu: %s \"%s\"%s%s", line, what, q, more ? ": " : "",
                 more ? more : "");
    else
        snprintf(err, errlen, "line %zu: %s", line, what);
    return SLUICE_EINVAL;
}

typedef struct word {
    const char *src; /* as written */
    size_t srclen;
    char *val;       /* decoded, into the line's buffer, NUL-terminated */
    size_t len;
    bool quoted;
} word;

#define MAX_TOKS 16

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Split [s, e) into tokens, decoding into buf (at least e - s + MAX_TOKS
 * bytes).  Returns the count, or -1 with a message in err. */
static int split(const char *s, const char *e, size_t line, word *t, char *buf, char *err,
                 size_t errlen)
{
    int n = 0;
    char *o = buf;
    while (s < e) {
        if (*s == ' ' || *s == '\t') {
            s++;
            continue;
        }
        if (*s == '#') break;
        if (n == MAX_TOKS) {
            bad(err, errlen, line, "too many words on the line (at most 16), from", s,
                (size_t)(e - s), NULL);
            return -1;
        }
        word *k = &t[n++];
        k->src = s;
        k->val = o;
        k->quoted = *s == '"';
        if (k->quoted) {
            const char *p = s + 1;
            for (;;) {
                if (p == e) {
                    bad(err, errlen, line, "unterminated quoted string", s, (size_t)(e - s), NULL);
                    return -1;
                }
                if (*p == '"') {
                    p++;
                    break;
                }
                if (*p == '\\') {
                    if (p + 1 < e && (p[1] == '\\' || p[1] == '"')) {
                        *o++ = p[1];
                        p += 2;
                    } else if (p + 3 < e && p[1] == 'x' && hexval(p[2]) >= 0 && hexval(p[3]) >= 0) {
                        *o++ = (char)(hexval(p[2]) * 16 + hexval(p[3]));
                        p += 4;
                    } else {
                        bad(err, errlen, line, "bad escape (\\\\, \\\" or \\xHH) in", s,
                            (size_t)(e - s), NULL);
                        return -1;
                    }
                    continue;
                }
                *o++ = *p++;
            }
            if (p < e && *p != ' ' && *p != '\t') {
                const char *w = p;
                while (w < e && *w != ' ' && *w != '\t') w++;
                bad(err, errlen, line, "text right after a closing quote", s, (size_t)(w - s), NULL);
                return -1;
            }
            s = p;
        } else {
            while (s < e && *s != ' ' && *s != '\t') {
                if (*s == '"') {
                    const char *w = k->src;
                    while (w < e && *w != ' ' && *w != '\t') w++;
                    bad(err, errlen, line, "stray double quote in", k->src, (size_t)(w - k->src), NULL);
                    return -1;
                }
                *o++ = *s++;
            }
        }
        k->srclen = (size_t)(s - k->src);
        k->len = (size_t)(o - k->val);
        *o++ = '\0';
    }
    return n;
}

static bool good_name(const char *s, size_t n)
{
    if (n == 0 || n > SLUICE_RULE_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '-' && c != '.' && c != ':'))) return false;
    }
    return true;
}

/* A concurrency spec: its first word is `concurrency` (the spec's own
 * reader of words, alg/concurrency.c). */
static bool is_conc(const char *spec) { return sluice__is_conc_spec(spec); }

/* The spec of token k (quoted) into canon; 0 or an error. */
static int take_spec(const word *k, size_t line, char *canon, char *err, size_t errlen)
{
    if (!k->quoted)
        return bad(err, errlen, line, "the spec must be in double quotes:", k->src, k->srclen,
                   NULL);
    char why[256];
    if (is_conc(k->val)) {
        if (sluice_concurrency_spec_check(k->val, canon, SLUICE_SPEC_MAX, why, sizeof why) != 0)
            return bad(err, errlen, line, "bad spec", k->val, k->len, why);
        return 0;
    }
    if (sluice_spec_check(k->val, canon, SLUICE_SPEC_MAX, why, sizeof why) != 0)
        return bad(err, errlen, line, "bad spec", k->val, k->len, why);
    return 0;
}

static pdef *find_def(parsed *p, const char *name, size_t n)
{
    for (size_t i = 0; i < p->n; i++)
        if (strlen(p->r[i].name) == n && memcmp(p->r[i].name, name, n) == 0) return &p->r[i];
    return NULL;
}

static int cmp_key(const unsigned char *a, size_t an, const unsigned char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : an < bn ? -1 : an > bn;
}

static int rule_line(parsed *p, word *t, int n, size_t line, char *err, size_t errlen)
{
    if (n < 2) return bad(err, errlen, line, "rule without a name (rule NAME SCOPE \"SPEC\" [OPTION...])", NULL, 0, NULL);
    if (!good_name(t[1].val, t[1].len) || t[1].quoted)
        return bad(err, errlen, line,
                   "bad rule name (1..64 letters, digits, _ - . :, starting with a letter or digit)",
                   t[1].src, t[1].srclen, NULL);
    const pdef *dup = find_def(p, t[1].val, t[1].len);
    if (dup) {
        char more[64];
        snprintf(more, sizeof more, "defined before at line %zu", dup->line);
        return bad(err, errlen, line, "rule defined twice:", t[1].src, t[1].srclen, more);
    }
    if (n < 3) return bad(err, errlen, line, "rule without a scope (global or key):", t[1].src, t[1].srclen, NULL);
    bool global;
    if (!t[2].quoted && strcmp(t[2].val, "global") == 0) global = true;
    else if (!t[2].quoted && strcmp(t[2].val, "key") == 0) global = false;
    else return bad(err, errlen, line, "bad scope (expected global or key)", t[2].src, t[2].srclen, NULL);
    if (n < 4) return bad(err, errlen, line, "rule without a spec:", t[1].src, t[1].srclen, NULL);
    if (p->n == SLUICE_RULES_MAX)
        return bad(err, errlen, line, "too many rules (at most 1024):", t[1].src, t[1].srclen, NULL);
    pdef d;
    memset(&d, 0, sizeof d);
    memcpy(d.name, t[1].val, t[1].len);
    d.global = global;
    d.line = line;
    d.max_keys = global ? 0 : SLUICE_RULE_DEFAULT_MAX_KEYS;
    int rc = take_spec(&t[3], line, d.spec, err, errlen);
    if (rc) return rc;
    d.conc = is_conc(d.spec);
    bool seen_max = false, seen_policy = false;
    for (int i = 4; i < n; i++) {
        const word *k = &t[i];
        const char *v = k->val;
        bool is_max = !k->quoted && strncmp(v, "max_keys=", 9) == 0;
        bool is_pol = !k->quoted && strncmp(v, "policy=", 7) == 0;
        bool is_sh = !k->quoted && strcmp(v, "shadow") == 0;
        if (!is_max && !is_pol && !is_sh)
            return bad(err, errlen, line, "unknown option (max_keys=N, policy=refuse|evict-lru, shadow)",
                       k->src, k->srclen, NULL);
        if ((is_max && seen_max) || (is_pol && seen_policy) || (is_sh && d.shadow))
            return bad(err, errlen, line, "option given twice:", k->src, k->srclen, NULL);
        if (global && (is_max || is_pol))
            return bad(err, errlen, line, "option for key rules only, on a global rule:", k->src,
                       k->srclen, NULL);
        if (is_sh) {
            d.shadow = true;
        } else if (is_max) {
            seen_max = true;
            if (sluice_parse_u64(v + 9, k->len - 9, SLUICE_RULE_MAX_KEYS_MAX, &d.max_keys) != 0 ||
                d.max_keys == 0)
                return bad(err, errlen, line, "bad max_keys (1 .. 16777216):", k->src, k->srclen, NULL);
        } else {
            seen_policy = true;
            if (strcmp(v + 7, "refuse") == 0) d.evict = false;
            else if (strcmp(v + 7, "evict-lru") == 0 && d.conc)
                return bad(err, errlen, line,
                           "policy=evict-lru on a concurrency rule (a key holding permits is never dropped):",
                           k->src, k->srclen, NULL);
            else if (strcmp(v + 7, "evict-lru") == 0) d.evict = true;
            else return bad(err, errlen, line, "bad policy (refuse or evict-lru):", k->src, k->srclen, NULL);
        }
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        pdef *r = sluice__calloc(cap, sizeof *r);
        if (!r) return SLUICE_ENOMEM;
        if (p->n) memcpy(r, p->r, p->n * sizeof *r);
        sluice__free(p->r);
        p->r = r;
        p->cap = cap;
    }
    p->r[p->n++] = d;
    return 0;
}

static int override_line(parsed *p, word *t, int n, size_t line, char *err, size_t errlen)
{
    if (n < 2) return bad(err, errlen, line, "override without a rule (override RULE KEY \"SPEC\")", NULL, 0, NULL);
    pdef *d = t[1].quoted ? NULL : find_def(p, t[1].val, t[1].len);
    if (!d) return bad(err, errlen, line, "override of an unknown rule (define it before):", t[1].src, t[1].srclen, NULL);
    if (d->global)
        return bad(err, errlen, line, "override of a global rule (overrides are for key rules):",
                   t[1].src, t[1].srclen, NULL);
    if (d->conc)
        return bad(err, errlen, line, "override of a concurrency rule (every key has the rule's N):",
                   t[1].src, t[1].srclen, NULL);
    if (n < 3) return bad(err, errlen, line, "override without a key:", t[1].src, t[1].srclen, NULL);
    if (n < 4) return bad(err, errlen, line, "override without a spec:", t[2].src, t[2].srclen, NULL);
    if (n > 4) return bad(err, errlen, line, "unexpected word after the override's spec:", t[4].src, t[4].srclen, NULL);
    pover o;
    memset(&o, 0, sizeof o);
    o.line = line;
    int rc = take_spec(&t[3], line, o.spec, err, errlen);
    if (rc) return rc;
    /* a key of a table keeps the table's algorithm and slot width */
    sluice_spec_info ri, oi;
    if (sluice_spec_parse(d->spec, &ri, NULL, 0) == 0 && sluice_spec_parse(o.spec, &oi, NULL, 0) == 0) {
        char more[160];
        if (ri.algorithm != oi.algorithm) {
            snprintf(more, sizeof more, "the rule's algorithm is %s", sluice_algorithm_name(ri.algorithm));
            return bad(err, errlen, line, "override with another algorithm", t[3].val, t[3].len, more);
        }
        if (ri.slots && ri.period_ns / ri.slots != oi.period_ns / oi.slots) {
            snprintf(more, sizeof more, "the rule's slots are %llu ns wide",
                     (unsigned long long)(ri.period_ns / ri.slots));
            return bad(err, errlen, line, "override with another slot width", t[3].val, t[3].len, more);
        }
    }
    /* sorted insert; a key given twice is refused */
    size_t lo = 0, hi = d->nov;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_key(d->ov[mid].key, d->ov[mid].keylen, (const unsigned char *)t[2].val, t[2].len);
        if (c == 0) {
            char more[64];
            snprintf(more, sizeof more, "given before at line %zu", d->ov[mid].line);
            return bad(err, errlen, line, "override key given twice:", t[2].src, t[2].srclen, more);
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (d->nov == SLUICE_RULE_OVERRIDES_MAX)
        return bad(err, errlen, line, "too many overrides for the rule (at most 1024):", t[1].src, t[1].srclen, NULL);
    if (d->nov == d->capov) {
        size_t cap = d->capov ? d->capov * 2 : 4;
        pover *v = sluice__calloc(cap, sizeof *v);
        if (!v) return SLUICE_ENOMEM;
        if (d->nov) memcpy(v, d->ov, d->nov * sizeof *v);
        sluice__free(d->ov);
        d->ov = v;
        d->capov = cap;
    }
    o.key = sluice__malloc(t[2].len);
    if (!o.key) return SLUICE_ENOMEM;
    if (t[2].len) memcpy(o.key, t[2].val, t[2].len);
    o.keylen = t[2].len;
    memmove(&d->ov[lo + 1], &d->ov[lo], (d->nov - lo) * sizeof *d->ov);
    d->ov[lo] = o;
    d->nov++;
    p->noverrides++;
    return 0;
}

static int vet(const parsed *p, char *err, size_t errlen);

/* Parse the whole text and vet it as the load will use it (vet): the one
 * validation of sluice_rules_check, _new and _reload.  0, SLUICE_EINVAL
 * (err names line and token) or SLUICE_ENOMEM; on error p is empty.  A
 * text with no rules is SLUICE_EINVAL unless flags has
 * SLUICE_RULES_ALLOW_EMPTY. */
static int parse(const char *text, size_t len, unsigned flags, parsed *p, char *err,
                 size_t errlen)
{
    memset(p, 0, sizeof *p);
    if (errlen) err[0] = '\0';
    if (!text && len) {
        sluice__errf(err, errlen, "no text");
        return SLUICE_EINVAL;
    }
    char *buf = NULL;
    size_t bufcap = 0;
    int rc = 0;
    size_t line = 0;
    for (size_t pos = 0; rc == 0 && pos < len;) {
        line++;
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + 1;
        if (n && s[n - 1] == '\r') n--;
        const char *z = memchr(s, '\0', n);
        if (z) {
            rc = bad(err, errlen, line, "NUL byte in the text", NULL, 0, NULL);
            break;
        }
        const char *cr = memchr(s, '\r', n);
        if (cr) {
            rc = bad(err, errlen, line, "stray carriage return", NULL, 0, NULL);
            break;
        }
        if (n + MAX_TOKS + 1 > bufcap) {
            sluice__free(buf);
            bufcap = n + MAX_TOKS + 1 < 256 ? 256 : n + MAX_TOKS + 1;
            buf = sluice__malloc(bufcap);
            if (!buf) {
                rc = SLUICE_ENOMEM;
                break;
            }
        }
        word t[MAX_TOKS];
        int nt = split(s, s + n, line, t, buf, err, errlen);
        if (nt < 0) {
            rc = SLUICE_EINVAL;
        } else if (nt == 0) {
            continue;
        } else if (!t[0].quoted && strcmp(t[0].val, "rule") == 0) {
            rc = rule_line(p, t, nt, line, err, errlen);
        } else if (!t[0].quoted && strcmp(t[0].val, "override") == 0) {
            rc = override_line(p, t, nt, line, err, errlen);
        } else {
            rc = bad(err, errlen, line, "unknown directive (rule or override)", t[0].src, t[0].srclen, NULL);
        }
    }
    sluice__free(buf);
    if (rc == 0 && p->n == 0 && !(flags & SLUICE_RULES_ALLOW_EMPTY)) {
        sluice__errf(err, errlen,
                     "no rules in the text: a set without rules limits nothing "
                     "(SLUICE_RULES_ALLOW_EMPTY, or sluice check --allow-empty, accepts it)");
        rc = SLUICE_EINVAL;
    }
    if (rc == 0) rc = vet(p, err, errlen);
    if (rc == SLUICE_ENOMEM) sluice__errf(err, errlen, "out of memory");
    if (rc) parsed_free(p);
    return rc;
}

int sluice_rules_check_flags(const char *text, size_t len, unsigned flags, size_t *nrules,
                             size_t *noverrides, char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    if (flags & ~(SLUICE_RULES_RECLAIM_WHEN_FULL | SLUICE_RULES_ALLOW_EMPTY)) {
        sluice__errf(err, errlen, "unknown flags 0x%x", flags);
        return SLUICE_EINVAL;
    }
    parsed p;
    int rc = parse(text, len, flags, &p, err, errlen);
    if (rc == 0) {
        if (nrules) *nrules = p.n;
        if (noverrides) *noverrides = p.noverrides;
        parsed_free(&p);
    }
    return rc;
}

int sluice_rules_check(const char *text, size_t len, size_t *nrules, size_t *noverrides,
                       char *err, size_t errlen)
{
    return sluice_rules_check_flags(text, len, SLUICE_RULES_ALLOW_EMPTY, nrules, noverrides, err,
                                    errlen);
}

/* ---- files --------------------------------------------------------------- */

/* Read the whole file `path` into *out (owned by the caller; *len bytes).
 * Returns 0, SLUICE_EINVAL (err: the file's name and the reason) or
 * SLUICE_ENOMEM.  Read to the end before anything is checked; a directory,
 * more than SLUICE_RULES_FILE_MAX bytes (a device or pipe that never ends
 * included), or a regular file whose size or modification time changed
 * while it was read is refused.  Every loop is bounded by the cap. */
static int read_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    if (!path) {
        sluice__errf(err, errlen, "no file name");
        return SLUICE_EINVAL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sluice__errf(err, errlen, "cannot open \"%s\": %s", path, strerror(errno));
        return SLUICE_EINVAL;
    }
    struct stat a, b;
    if (fstat(fd, &a) != 0) {
        sluice__errf(err, errlen, "cannot read \"%s\": %s", path, strerror(errno));
        close(fd);
        return SLUICE_EINVAL;
    }
    if (S_ISDIR(a.st_mode)) {
        sluice__errf(err, errlen, "cannot read \"%s\": is a directory", path);
        close(fd);
        return SLUICE_EINVAL;
    }
    int rc = 0;
    size_t cap = 4096, n = 0;
    char *buf = sluice__malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap > SLUICE_RULES_FILE_MAX) {
                sluice__errf(err, errlen, "\"%s\" is larger than 16 MiB (%zu bytes)", path,
                             SLUICE_RULES_FILE_MAX);
                rc = SLUICE_EINVAL;
                break;
            }
            /* one byte past the cap tells a file of exactly the cap */
            size_t ncap = cap * 2 > SLUICE_RULES_FILE_MAX ? SLUICE_RULES_FILE_MAX + 1 : cap * 2;
            char *nb = sluice__malloc(ncap);
            if (nb) memcpy(nb, buf, n);
            sluice__free(buf);
            buf = nb;
            cap = ncap;
            if (!buf) break;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            sluice__errf(err, errlen, "cannot read \"%s\": %s", path, strerror(errno));
            rc = SLUICE_EINVAL;
            break;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    if (!buf && rc == 0) {
        sluice__errf(err, errlen, "out of memory reading \"%s\"", path);
        rc = SLUICE_ENOMEM;
    }
    if (rc == 0 && S_ISREG(a.st_mode) &&
        (fstat(fd, &b) != 0 || b.st_size != a.st_size || (off_t)n != a.st_size ||
         b.st_mtim.tv_sec != a.st_mtim.tv_sec || b.st_mtim.tv_nsec != a.st_mtim.tv_nsec)) {
        sluice__errf(err, errlen, "\"%s\" changed while it was read (a writer not done?): nothing loaded",
                     path);
        rc = SLUICE_EINVAL;
    }
    close(fd);
    if (rc != 0) {
        sluice__free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return 0;
}

int sluice_rules_check_file(const char *path, unsigned flags, size_t *nrules, size_t *noverrides,
                            char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    char *text;
    size_t len;
    int rc = read_file(path, &text, &len, err, errlen);
    if (rc) return rc;
    rc = sluice_rules_check_flags(text, len, flags, nrules, noverrides, err, errlen);
    sluice__free(text);
    return rc;
}

/* ---- building a version -------------------------------------------------- */

static void version_free(version *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        pdef *d = &v->r[i].d;
        for (size_t j = 0; j < d->nov; j++) sluice__free(d->ov[j].key);
        sluice__free(d->ov);
    }
    sluice__free(v->r);
    sluice__free(v->by_id);
    sluice__free(v->ctr);
    sluice__free(v->names);
    sluice__free(v);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const name_id *)a)->name, ((const name_id *)b)->name);
}

static int32_t find_id(const version *v, const char *name)
{
    size_t lo = 0, hi = v->nids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(v->names[mid].name, name);
        if (c == 0) return v->names[mid].id;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Give every rule of p an id, adding the new names to the handle (mu held,
 * or the handle not yet shared).  The handle's arrays only grow; ids past
 * `known` that a failed reload added stay known, harmlessly (their
 * counters zero).  Returns 0, SLUICE_ENOMEM, or SLUICE_EINVAL when the
 * names would exceed SLUICE_RULES_NAMES_MAX. */
static int assign_ids(sluice_rules *rs, const version *old, const parsed *p, int32_t *ids,
                      char *err, size_t errlen)
{
    for (size_t i = 0; i < p->n; i++) {
        int32_t id = -1;
        if (old) id = find_id(old, p->r[i].name);
        for (size_t j = old ? old->nids : 0; id < 0 && j < rs->nids; j++)
            if (strcmp(rs->names[j], p->r[i].name) == 0) id = (int32_t)j;
        if (id < 0) {
            if (rs->nids == SLUICE_RULES_NAMES_MAX) {
                bad(err, errlen, p->r[i].line, "too many rule names over the rule set's life (at most 65536):",
                    p->r[i].name, strlen(p->r[i].name), NULL);
                return SLUICE_EINVAL;
            }
            if (rs->nids == rs->capids) {
                size_t cap = rs->capids ? rs->capids * 2 : 16;
                char **nn = sluice__calloc(cap, sizeof *nn);
                rctr **nc = sluice__calloc(cap, sizeof *nc);
                if (!nn || !nc) {
                    sluice__free(nn);
                    sluice__free(nc);
                    return SLUICE_ENOMEM;
                }
                if (rs->nids) {
                    memcpy(nn, rs->names, rs->nids * sizeof *nn);
                    memcpy(nc, rs->ctrs, rs->nids * sizeof *nc);
                }
                sluice__free(rs->names);
                sluice__free(rs->ctrs);
                rs->names = nn;
                rs->ctrs = nc;
                rs->capids = cap;
            }
            size_t nl = strlen(p->r[i].name);
            char *name = sluice__malloc(nl + 1);
            rctr *c = sluice__calloc64(sizeof *c);
            if (!name || !c) {
                sluice__free(name);
                if (c) sluice__free64(c);
                return SLUICE_ENOMEM;
            }
            memcpy(name, p->r[i].name, nl + 1);
            rs->names[rs->nids] = name;
            rs->ctrs[rs->nids] = c;
            id = (int32_t)rs->nids++;
        }
        ids[i] = id;
    }
    return 0;
}

/* What a reload does with one rule (P_NOMEM: it could not be found out). */
typedef enum plan { P_NEW, P_CARRY, P_RECONF, P_NOMEM } plan;

/* A rule's limit: a limiter (global rule) or a table (key rule). */
typedef struct limit {
    sluice_limiter *lim;
    sluice_table *tab;
    sluice_concurrency *conc;
    sluice_concurrency_table *ctab;
} limit;

/* Free a limit no permit was ever taken on (a scratch, a spare, a build
 * that failed). */
static void limit_free(limit *l)
{
    sluice_limiter_free(l->lim);
    sluice_table_free(l->tab);
    sluice_concurrency_free(l->conc);
    sluice_concurrency_table_free(l->ctab);
    *l = (limit){0};
}

/* A concurrency limit that was in use leaves the set (a reload, or
 * sluice_rules_free): the set drops its reference, and the limit goes with
 * the release of its last permit handle (each holds one:
 * sluice_rules_acquire_at), at once when none is held.  Called after the
 * grace period, when no decision can reach it through a version. */
static void retire(sluice_concurrency *c, sluice_concurrency_table *t)
{
    if (c) sluice__conc_unref(c);
    if (t) sluice__ctab_unref(t);
}

static bool same_overrides(const pdef *a, const pdef *b)
{
    if (a->nov != b->nov) return false;
    for (size_t i = 0; i < a->nov; i++)
        if (cmp_key(a->ov[i].key, a->ov[i].keylen, b->ov[i].key, b->ov[i].keylen) != 0 ||
            strcmp(a->ov[i].spec, b->ov[i].spec) != 0)
            return false;
    return true;
}

/* Set d's overrides on a fresh table at now_ns.  0 or a negative code, with
 * err naming the override's line and key. */
static int set_overrides(sluice_table *t, const pdef *d, uint64_t now_ns, char *err, size_t errlen)
{
    for (size_t i = 0; i < d->nov; i++) {
        const pover *o = &d->ov[i];
        char why[256];
        int rc = sluice_table_override_set_at(t, o->key, o->keylen, o->spec, now_ns, why, sizeof why);
        if (rc == SLUICE_ENOMEM) return rc;
        if (rc) return bad(err, errlen, o->line, "bad override for key", (const char *)o->key,
                           o->keylen, why);
    }
    return 0;
}

/* Change a running rule's limit from `from` to `to` at now_ns, in place
 * (same scope; for key rules the same max_keys and policy): a global
 * rule's limiter is reconfigured; a key rule's table gets the new spec and
 * the overrides' differences.  0 or a negative code (SLUICE_EINVAL: this
 * change cannot carry the state; SLUICE_ENOMEM). */
static int change(const pdef *from, const pdef *to, limit *l, uint64_t now_ns)
{
    /* a concurrency rule keeps its permits held (docs/decisions.md 3.9) */
    if (to->conc && to->global) return sluice_concurrency_reconfigure_at(l->conc, to->spec, now_ns, NULL, 0);
    if (to->conc) return sluice_concurrency_table_reconfigure_at(l->ctab, to->spec, now_ns, NULL, 0);
    if (to->global) return sluice_limiter_reconfigure_at(l->lim, to->spec, now_ns, NULL, 0);
    int rc = 0;
    if (strcmp(from->spec, to->spec) != 0)
        rc = sluice_table_reconfigure_at(l->tab, to->spec, now_ns, NULL, 0);
    /* both lists are sorted by key: walk them together, twice -- the
     * removals first, so that a full set of overrides can swap keys */
    for (int pass = 0; pass < 2; pass++) {
        size_t i = 0, j = 0;
        while (rc == 0 && (i < from->nov || j < to->nov)) {
            const pover *a = i < from->nov ? &from->ov[i] : NULL;
            const pover *b = j < to->nov ? &to->ov[j] : NULL;
            int c = !a ? 1 : !b ? -1 : cmp_key(a->key, a->keylen, b->key, b->keylen);
            if (c < 0) {
                if (pass == 0) rc = sluice_table_override_remove_at(l->tab, a->key, a->keylen, now_ns);
                if (rc == SLUICE_ENOENT) rc = 0;
                i++;
            } else {
                if (pass == 1 && (c > 0 || strcmp(a->spec, b->spec) != 0))
                    rc = sluice_table_override_set_at(l->tab, b->key, b->keylen, b->spec, now_ns,
                                                      NULL, 0);
                if (c == 0) i++;
                j++;
            }
        }
    }
    return rc;
}

/* Make the limit of a new (or fresh) rule, with its overrides.  0,
 * SLUICE_ENOMEM, or SLUICE_EINVAL for an override the table refuses (err
 * names it); the spec and max_keys were checked by the parser. */
static int make_limit(const pdef *d, unsigned flags, limit *l, char *err, size_t errlen)
{
    *l = (limit){0};
    if (d->conc && d->global) {
        l->conc = sluice_concurrency_new(d->spec, NULL, 0);
        return l->conc ? 0 : SLUICE_ENOMEM;
    }
    if (d->conc) {
        l->ctab = sluice_concurrency_table_new(d->spec, (size_t)d->max_keys, NULL, 0);
        return l->ctab ? 0 : SLUICE_ENOMEM;
    }
    if (d->global) {
        l->lim = sluice_limiter_new(d->spec, NULL, 0);
        return l->lim ? 0 : SLUICE_ENOMEM;
    }
    unsigned tf = (d->evict ? SLUICE_TABLE_EVICT_LRU : 0) |
                  (flags & SLUICE_RULES_RECLAIM_WHEN_FULL ? SLUICE_TABLE_RECLAIM_WHEN_FULL : 0);
    l->tab = sluice_table_new_flags(d->spec, (size_t)d->max_keys, tf, NULL, 0);
    if (!l->tab) return SLUICE_ENOMEM;
    int rc = set_overrides(l->tab, d, 0, err, errlen);
    if (rc) limit_free(l);
    return rc;
}

/* The part of the validation that only the table knows: each key rule's
 * overrides are set, by set_overrides as make_limit sets them, on a
 * scratch table of one key made from the rule's spec -- an override whose
 * state needs more than the table's 16-byte entries is refused here, with
 * the load's message, not first at the load.  0, SLUICE_EINVAL (err names
 * the override) or SLUICE_ENOMEM. */
/* Whether rule d reads the wall clock (a calendar quota, tz=): its times
 * are ns since the Unix epoch, every other rule's the monotonic clock's. */
static bool on_wall_clock(const pdef *d)
{
    sluice_spec_info info;
    return !d->conc && sluice_spec_parse(d->spec, &info, NULL, 0) == 0 &&
           info.clock == SLUICE_CLOCK_REALTIME;
}

static int vet(const parsed *p, char *err, size_t errlen)
{
    /* One time serves every rule of a request (sluice_rules_decide_at): a
     * set mixing calendar quotas with rules on the monotonic clock would
     * decide one of them on the wrong axis. */
    for (size_t i = 1; i < p->n; i++)
        if (on_wall_clock(&p->r[i]) != on_wall_clock(&p->r[0])) {
            const pdef *w = on_wall_clock(&p->r[i]) ? &p->r[i] : &p->r[0];
            const pdef *m = w == &p->r[i] ? &p->r[0] : &p->r[i];
            sluice__errf(err, errlen,
                         "line %zu: rule %s is a calendar quota (tz=, the wall clock) and rule %s "
                         "(line %zu) is not: rules on different clocks cannot share a set",
                         w->line, w->name, m->name, m->line);
            return SLUICE_EINVAL;
        }
    for (size_t i = 0; i < p->n; i++) {
        const pdef *d = &p->r[i];
        if (d->global || d->nov == 0) continue;
        pdef small = *d;
        small.max_keys = 1;
        small.evict = false;
        limit s;
        int rc = make_limit(&small, 0, &s, err, errlen);
        if (rc) return rc;
        limit_free(&s);
    }
    return 0;
}

/* What to do with a rule defined as `from` in the running set and as `to`
 * in the new text.  A change in place is tried first on a scratch limit
 * made from `from` (the checks depend on the specs only, not the state):
 * if it is refused the rule starts fresh. */
static plan plan_for(const pdef *from, const pdef *to)
{
    if (!from || from->global != to->global) return P_NEW;
    if (!to->global && (from->max_keys != to->max_keys || from->evict != to->evict)) return P_NEW;
    if (strcmp(from->spec, to->spec) == 0 && same_overrides(from, to)) return P_CARRY;
    if (from->conc != to->conc) return P_NEW; /* rate <-> concurrency */
    pdef small = *from;
    small.max_keys = 1; /* a scratch table need not hold keys */
    small.evict = false;
    limit s;
    int rc = make_limit(&small, 0, &s, NULL, 0);
    if (rc == 0) rc = change(from, to, &s, 0);
    limit_free(&s);
    return rc == 0 ? P_RECONF : rc == SLUICE_ENOMEM ? P_NOMEM : P_NEW;
}

/* A new table of the set gets the sketch sluice_rules_set_top asked for
 * (mu held, or the handle not yet shared).  0 or SLUICE_ENOMEM. */
static int give_top(const sluice_rules *rs, sluice_table *t)
{
    if (!t || rs->top_counters == 0) return 0;
    int rc = sluice_table_set_top(t, rs->top_counters, rs->top_key_bytes);
    return rc == SLUICE_ENOMEM ? rc : 0;
}

/* Build the version of p over `old` (NULL for the first).  Takes p's
 * definitions (p is left empty).  Fills plans[] and spare[] (for each
 * P_RECONF rule a fresh limit, taken if the change fails at the switch --
 * out of memory -- so that nothing can fail there).  Returns 0 or an error
 * (err set; everything made is freed). */
static int build(sluice_rules *rs, const version *old, parsed *p, version **out, plan *plans,
                 limit *spare, char *err, size_t errlen)
{
    *out = NULL;
    int32_t *ids = p->n ? sluice__calloc(p->n, sizeof *ids) : NULL;
    version *v = sluice__calloc(1, sizeof *v);
    int rc = (p->n && !ids) || !v ? SLUICE_ENOMEM : 0;
    if (rc == 0) rc = assign_ids(rs, old, p, ids, err, errlen);
    if (rc == 0) {
        v->generation = old ? old->generation + 1 : 1;
        v->wall_clock = p->n && on_wall_clock(&p->r[0]); /* vet: all or none */
        v->nids = rs->nids;
        v->r = p->n ? sluice__calloc(p->n, sizeof *v->r) : NULL;
        v->by_id = sluice__calloc(v->nids, sizeof *v->by_id);
        v->ctr = sluice__calloc(v->nids, sizeof *v->ctr);
        v->names = sluice__calloc(v->nids, sizeof *v->names);
        if ((p->n && !v->r) || !v->by_id || !v->ctr || !v->names) rc = SLUICE_ENOMEM;
    }
    if (rc == 0) {
        for (size_t i = 0; i < v->nids; i++) {
            v->ctr[i] = rs->ctrs[i];
            v->names[i] = (name_id){rs->names[i], (int32_t)i};
        }
        if (v->nids) qsort(v->names, v->nids, sizeof *v->names, cmp_name);
    }
    for (size_t i = 0; rc == 0 && i < p->n; i++) {
        rule *r = &v->r[i];
        r->d = p->r[i];
        p->r[i].ov = NULL; /* moved */
        p->r[i].nov = 0;
        r->id = ids[i];
        r->ctr = rs->ctrs[r->id];
        v->n++;
        v->by_id[r->id] = r;
        const rule *o = old && (size_t)r->id < old->nids ? old->by_id[r->id] : NULL;
        plans[i] = plan_for(o ? &o->d : NULL, &r->d);
        spare[i] = (limit){0};
        if (plans[i] == P_NOMEM) {
            plans[i] = P_CARRY; /* nothing made, nothing to free */
            rc = SLUICE_ENOMEM;
        } else if (plans[i] == P_NEW) {
            limit l;
            rc = make_limit(&r->d, rs->flags, &l, err, errlen);
            r->lim = l.lim;
            r->tab = l.tab;
            r->conc = l.conc;
            r->ctab = l.ctab;
            if (rc == 0) rc = give_top(rs, r->tab);
        } else {
            r->lim = o->lim;
            r->tab = o->tab;
            r->conc = o->conc;
            r->ctab = o->ctab;
            if (plans[i] == P_RECONF) {
                rc = make_limit(&r->d, rs->flags, &spare[i], err, errlen);
                if (rc == 0) rc = give_top(rs, spare[i].tab);
            }
        }
    }
    if (rc != 0) {
        if (rc == SLUICE_ENOMEM) {
            if (v && v->n && plans[v->n - 1] == P_NEW)
                bad(err, errlen, v->r[v->n - 1].d.line, "out of memory making the rule",
                    v->r[v->n - 1].d.name, strlen(v->r[v->n - 1].d.name), NULL);
            else
                sluice__errf(err, errlen, "out of memory");
        }
        for (size_t i = 0; v && i < v->n; i++) {
            if (plans[i] == P_NEW) {
                sluice_limiter_free(v->r[i].lim);
                sluice_table_free(v->r[i].tab);
                sluice_concurrency_free(v->r[i].conc);
                sluice_concurrency_table_free(v->r[i].ctab);
            }
            limit_free(&spare[i]);
        }
        version_free(v);
        v = NULL;
    }
    sluice__free(ids);
    parsed_free(p);
    *out = v;
    return rc;
}

/* ---- what a reload would do ---------------------------------------------- */

/* Why plan_for(from, to) gives P_NEW, in a short phrase (why[] >= 96). */
static void fresh_why(const pdef *from, const pdef *to, char *why, size_t n)
{
    sluice_spec_info a, b;
    if (from->conc != to->conc) {
        snprintf(why, n, "the kind of limit changes (rate <-> concurrency)");
        return;
    }
    if (from->global != to->global)
        snprintf(why, n, "the scope changes (%s -> %s)", from->global ? "global" : "key",
                 to->global ? "global" : "key");
    else if (!to->global && from->max_keys != to->max_keys)
        snprintf(why, n, "max_keys %llu -> %llu", (unsigned long long)from->max_keys,
                 (unsigned long long)to->max_keys);
    else if (!to->global && from->evict != to->evict)
        snprintf(why, n, "the policy changes (%s -> %s)", from->evict ? "evict-lru" : "refuse",
                 to->evict ? "evict-lru" : "refuse");
    else if (to->conc)
        snprintf(why, n, "a lease is %s (a leased limit keeps a book of its handles)",
                 strstr(to->spec, "lease=") ? "added" : "removed");
    else if (sluice_spec_parse(from->spec, &a, NULL, 0) == 0 &&
             sluice_spec_parse(to->spec, &b, NULL, 0) == 0 && a.algorithm != b.algorithm)
        snprintf(why, n, "the algorithm changes (%s -> %s)", sluice_algorithm_name(a.algorithm),
                 sluice_algorithm_name(b.algorithm));
    else
        snprintf(why, n, "the new spec or overrides cannot carry the state");
}

static int diff_parsed(const parsed *o, const parsed *p, sluice_rules_diff_fn fn, void *arg)
{
    char why[160];
    for (size_t i = 0; i < p->n; i++) {
        const pdef *to = &p->r[i];
        const pdef *from = find_def((parsed *)o, to->name, strlen(to->name));
        int what;
        why[0] = '\0';
        if (!from) {
            what = SLUICE_RULE_ADDED;
        } else {
            plan pl = plan_for(from, to);
            if (pl == P_NOMEM) return SLUICE_ENOMEM;
            if (pl == P_CARRY) {
                what = SLUICE_RULE_KEPT;
            } else if (pl == P_RECONF) {
                what = SLUICE_RULE_CARRIED;
                snprintf(why, sizeof why, "%s", strcmp(from->spec, to->spec) != 0
                                                    ? "the spec changes, the state is kept"
                                                    : "the overrides change, the state is kept");
            } else {
                what = SLUICE_RULE_FRESH;
                fresh_why(from, to, why, sizeof why);
            }
        }
        if (fn) fn(arg, to->name, what, why);
    }
    for (size_t i = 0; i < o->n; i++)
        if (!find_def((parsed *)p, o->r[i].name, strlen(o->r[i].name)) && fn)
            fn(arg, o->r[i].name, SLUICE_RULE_REMOVED, "");
    return 0;
}

/* Prefix err's message with "old: " or "new: ". */
static void which_text(const char *which, char *err, size_t errlen)
{
    if (errlen == 0) return;
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", err);
    snprintf(err, errlen, "%s: %s", which, tmp);
}

int sluice_rules_diff(const char *old, size_t oldlen, const char *text, size_t len,
                      unsigned flags, sluice_rules_diff_fn fn, void *arg, char *err,
                      size_t errlen)
{
    if (errlen) err[0] = '\0';
    if (flags & ~(SLUICE_RULES_RECLAIM_WHEN_FULL | SLUICE_RULES_ALLOW_EMPTY)) {
        sluice__errf(err, errlen, "unknown flags 0x%x", flags);
        return SLUICE_EINVAL;
    }
    parsed o, p;
    int rc = parse(old, oldlen, SLUICE_RULES_ALLOW_EMPTY, &o, err, errlen);
    if (rc) {
        which_text("old", err, errlen);
        return rc;
    }
    rc = parse(text, len, flags, &p, err, errlen);
    if (rc) {
        which_text("new", err, errlen);
        parsed_free(&o);
        return rc;
    }
    rc = diff_parsed(&o, &p, fn, arg);
    if (rc == SLUICE_ENOMEM) sluice__errf(err, errlen, "out of memory");
    parsed_free(&o);
    parsed_free(&p);
    return rc;
}

int sluice_rules_diff_files(const char *old_path, const char *path, unsigned flags,
                            sluice_rules_diff_fn fn, void *arg, char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    char *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    int rc = read_file(old_path, &a, &an, err, errlen);
    if (rc == 0) rc = read_file(path, &b, &bn, err, errlen);
    if (rc == 0) rc = sluice_rules_diff(a, an, b, bn, flags, fn, arg, err, errlen);
    sluice__free(a);
    sluice__free(b);
    return rc;
}

/* ---- the handle ---------------------------------------------------------- */

static void free_handle(sluice_rules *rs)
{
    for (size_t i = 0; i < rs->nids; i++) {
        sluice__free(rs->names[i]);
        sluice__free64(rs->ctrs[i]);
    }
    sluice__free(rs->names);
    sluice__free(rs->ctrs);
    pthread_mutex_destroy(&rs->mu);
    sluice__free64(rs);
}

sluice_rules *sluice_rules_new(const char *text, size_t len, unsigned flags, char *err,
                               size_t errlen)
{
    if (errlen) err[0] = '\0';
    if (flags & ~(SLUICE_RULES_RECLAIM_WHEN_FULL | SLUICE_RULES_ALLOW_EMPTY)) {
        sluice__errf(err, errlen, "unknown flags 0x%x", flags);
        return NULL;
    }
    parsed p;
    if (parse(text, len, flags, &p, err, errlen) != 0) return NULL;
    sluice_rules *rs = sluice__calloc64(sizeof *rs);
    if (!rs || pthread_mutex_init(&rs->mu, NULL) != 0) {
        sluice__free64(rs);
        parsed_free(&p);
        sluice__errf(err, errlen, "out of memory");
        return NULL;
    }
    rs->flags = flags & SLUICE_RULES_RECLAIM_WHEN_FULL; /* what the tables are made with */
    size_t n = p.n ? p.n : 1;
    plan *plans = sluice__calloc(n, sizeof *plans);
    limit *fb = sluice__calloc(n, sizeof *fb);
    version *v = NULL;
    int rc = plans && fb ? build(rs, NULL, &p, &v, plans, fb, err, errlen) : SLUICE_ENOMEM;
    if (rc == SLUICE_ENOMEM && (!plans || !fb)) {
        parsed_free(&p);
        sluice__errf(err, errlen, "out of memory");
    }
    sluice__free(plans);
    sluice__free(fb);
    if (rc != 0) {
        free_handle(rs);
        return NULL;
    }
    rs->v = v;
    atomic_store(&rs->cur, v);
    return rs;
}

sluice_rules *sluice_rules_new_file(const char *path, unsigned flags, char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    size_t len = 0;
    char *text;
    if (read_file(path, &text, &len, err, errlen) != 0) return NULL;
    sluice_rules *rs = sluice_rules_new(text, len, flags, err, errlen);
    sluice__free(text);
    return rs;
}

void sluice_rules_free(sluice_rules *rs)
{
    if (!rs) return;
    version *v = rs->v;
    for (size_t i = 0; v && i < v->n; i++) {
        sluice_limiter_free(v->r[i].lim);
        sluice_table_free(v->r[i].tab);
        retire(v->r[i].conc, v->r[i].ctab); /* freed now, or by their last release */
    }
    version_free(v);
    free_handle(rs);
}

int sluice_rules_reload_flags_at(sluice_rules *rs, const char *text, size_t len, unsigned flags,
                                 uint64_t now_ns, char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    if (!rs) {
        sluice__errf(err, errlen, "no rule set");
        return SLUICE_EINVAL;
    }
    if (flags & ~SLUICE_RULES_ALLOW_EMPTY) {
        sluice__errf(err, errlen, "unknown flags 0x%x", flags);
        return SLUICE_EINVAL;
    }
    parsed p;
    int rc = parse(text, len, flags, &p, err, errlen);
    if (rc) return rc;
    pthread_mutex_lock(&rs->mu);
    version *old = rs->v, *v = NULL;
    size_t n = p.n ? p.n : 1;
    plan *plans = sluice__calloc(n, sizeof *plans);
    limit *fb = sluice__calloc(n, sizeof *fb);
    if (!plans || !fb) {
        parsed_free(&p);
        sluice__errf(err, errlen, "out of memory");
        rc = SLUICE_ENOMEM;
    } else {
        rc = build(rs, old, &p, &v, plans, fb, err, errlen);
    }
    if (rc == 0) {
        bool gate = false;
        for (size_t i = 0; i < v->n; i++) gate |= plans[i] == P_RECONF;
        if (gate) {
            atomic_store(&rs->cur, NULL); /* close: no decision runs past here */
            grace(rs);
            for (size_t i = 0; i < v->n; i++) {
                if (plans[i] != P_RECONF) continue;
                rule *r = &v->r[i];
                limit l = {.lim = r->lim, .tab = r->tab, .conc = r->conc, .ctab = r->ctab};
                if (change(&old->by_id[r->id]->d, &r->d, &l, now_ns) == 0) {
                    /* no decision is inside (the gate): the configurations
                     * the change retired can go now, not with the limiter */
                    if (r->lim) sluice__limiter_reclaim(r->lim);
                } else {
                    /* out of memory in the change (the scratch took it):
                     * the rule starts fresh with its spare; the old limit
                     * goes below */
                    r->lim = fb[i].lim;
                    r->tab = fb[i].tab;
                    r->conc = fb[i].conc;
                    r->ctab = fb[i].ctab;
                    fb[i] = (limit){0};
                    plans[i] = P_NEW;
                }
            }
            atomic_store(&rs->cur, v);
        } else {
            atomic_store(&rs->cur, v);
            grace(rs);
        }
        rs->v = v;
        /* free the limits of the old version that the new one does not use */
        for (size_t i = 0; i < old->n; i++) {
            const rule *o = &old->r[i];
            const rule *nr = (size_t)o->id < v->nids ? v->by_id[o->id] : NULL;
            if (!nr || nr->lim != o->lim) sluice_limiter_free(o->lim);
            if (!nr || nr->tab != o->tab) sluice_table_free(o->tab);
            if (!nr || nr->conc != o->conc) retire(o->conc, NULL);
            if (!nr || nr->ctab != o->ctab) retire(NULL, o->ctab);
        }
        for (size_t i = 0; i < v->n; i++) limit_free(&fb[i]);
        version_free(old);
    }
    pthread_mutex_unlock(&rs->mu);
    sluice__free(plans);
    sluice__free(fb);
    return rc;
}

int sluice_rules_reload_at(sluice_rules *rs, const char *text, size_t len, uint64_t now_ns,
                           char *err, size_t errlen)
{
    return sluice_rules_reload_flags_at(rs, text, len, 0, now_ns, err, errlen);
}

int sluice_rules_reload_file_flags_at(sluice_rules *rs, const char *path, unsigned flags,
                                      uint64_t now_ns, char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    if (!rs) {
        sluice__errf(err, errlen, "no rule set");
        return SLUICE_EINVAL;
    }
    size_t len = 0;
    char *text;
    int rc = read_file(path, &text, &len, err, errlen);
    if (rc) return rc;
    rc = sluice_rules_reload_flags_at(rs, text, len, flags, now_ns, err, errlen);
    sluice__free(text);
    return rc;
}

int sluice_rules_reload_file_at(sluice_rules *rs, const char *path, uint64_t now_ns, char *err,
                                size_t errlen)
{
    return sluice_rules_reload_file_flags_at(rs, path, 0, now_ns, err, errlen);
}

/* ---- reading ------------------------------------------------------------- */

int32_t sluice_rules_find(const sluice_rules *rs, const char *name)
{
    if (!rs || !name) return SLUICE_EINVAL;
    sluice_rules *w = (sluice_rules *)rs; /* the reader counts only */
    unsigned tok;
    const version *v = enter(w, &tok);
    int32_t id = find_id(v, name);
    leave(w, tok);
    return id < 0 ? SLUICE_ENOENT : id;
}

size_t sluice_rules_count(const sluice_rules *rs)
{
    if (!rs) return 0;
    sluice_rules *w = (sluice_rules *)rs;
    unsigned tok;
    size_t n = enter(w, &tok)->n;
    leave(w, tok);
    return n;
}

uint64_t sluice_rules_generation(const sluice_rules *rs)
{
    if (!rs) return 0;
    sluice_rules *w = (sluice_rules *)rs;
    unsigned tok;
    uint64_t g = enter(w, &tok)->generation;
    leave(w, tok);
    return g;
}

/* A concurrency rule's gauges in *st (r NULL: absent; other rules: 0). */
static void conc_gauge(const rule *r, sluice_rule_stats *st)
{
    st->held = st->limit = 0;
    if (r && r->conc) {
        st->held = sluice_concurrency_held(r->conc);
        st->limit = sluice_concurrency_limit(r->conc);
    } else if (r && r->ctab) {
        st->held = sluice_concurrency_table_held(r->ctab);
        st->limit = sluice_concurrency_table_limit(r->ctab);
    }
}

int sluice_rules_info(const sluice_rules *rs, size_t index, sluice_rule_info *out)
{
    if (!rs || !out) return SLUICE_EINVAL;
    sluice_rules *w = (sluice_rules *)rs;
    unsigned tok;
    const version *v = enter(w, &tok);
    int rc = SLUICE_ENOENT;
    if (index < v->n) {
        const rule *r = &v->r[index];
        memset(out, 0, sizeof *out);
        memcpy(out->name, r->d.name, sizeof out->name);
        out->id = r->id;
        out->global = r->d.global;
        out->shadow = r->d.shadow;
        memcpy(out->spec, r->d.spec, sizeof out->spec);
        out->max_keys = r->d.max_keys;
        out->evict_lru = r->d.evict;
        out->overrides = r->d.nov;
        out->line = r->d.line;
        rctr_read(r->ctr, &out->stats);
        conc_gauge(r, &out->stats);
        rc = 0;
    }
    leave(w, tok);
    return rc;
}

int sluice_rules_stats(const sluice_rules *rs, int32_t id, sluice_rule_stats *out)
{
    if (!rs || !out) return SLUICE_EINVAL;
    sluice_rules *w = (sluice_rules *)rs;
    unsigned tok;
    const version *v = enter(w, &tok);
    int rc = SLUICE_ENOENT;
    if (id >= 0 && (size_t)id < v->nids) {
        rctr_read(v->ctr[id], out);
        conc_gauge(v->by_id[id], out);
        rc = 0;
    }
    leave(w, tok);
    return rc;
}

void sluice__rules_each(const sluice_rules *rs, sluice__rules_fn fn, void *arg)
{
    sluice_rules *w = (sluice_rules *)rs;
    unsigned tok;
    const version *v = enter(w, &tok);
    for (size_t i = 0; i < v->n; i++) {
        sluice_rule_stats st;
        rctr_read(v->r[i].ctr, &st);
        conc_gauge(&v->r[i], &st);
        fn(arg, v->r[i].d.name, v->r[i].d.shadow, &st, v->r[i].tab);
    }
    leave(w, tok);
}

int sluice_rules_set_top(sluice_rules *rs, size_t counters, size_t max_key_bytes)
{
    if (!rs) return SLUICE_EINVAL;
    pthread_mutex_lock(&rs->mu);
    int rc = 0;
    if (rs->top_counters) {
        rc = SLUICE_EINVAL;
    } else {
        /* the bounds are the table's: tried on the first table, or on a
         * scratch one when the set has no key rule */
        for (size_t i = 0; rc == 0 && i < rs->v->n; i++)
            if (rs->v->r[i].tab) rc = sluice_table_set_top(rs->v->r[i].tab, counters, max_key_bytes);
        if (rc == 0) {
            sluice_table *t = sluice_table_new("fixed-window 1/s", 1, NULL, 0);
            rc = t ? sluice_table_set_top(t, counters, max_key_bytes) : SLUICE_ENOMEM;
            sluice_table_free(t);
        }
        if (rc == 0) {
            rs->top_counters = counters;
            rs->top_key_bytes = max_key_bytes;
        }
    }
    pthread_mutex_unlock(&rs->mu);
    return rc;
}

/* The table of key rule `id` in v, or NULL. */
static const sluice_table *table_of(const version *v, int32_t id)
{
    if (id < 0 || (size_t)id >= v->nids || !v->by_id[id]) return NULL;
    return v->by_id[id]->tab;
}

int sluice_rules_top_refused(const sluice_rules *rs, int32_t id, sluice_top_entry out[],
                             size_t max, size_t *n)
{
    if (!rs || !n || (!out && max > 0)) return SLUICE_EINVAL;
    *n = 0;
    sluice_rules *w = (sluice_rules *)rs;
    unsigned tok;
    const sluice_table *t = table_of(enter(w, &tok), id);
    int rc = t ? sluice_table_top_refused(t, out, max, n) : SLUICE_ENOENT;
    leave(w, tok);
    return rc;
}

int sluice_rules_table_stats(const sluice_rules *rs, int32_t id, sluice_table_stats *out)
{
    if (!rs || !out) return SLUICE_EINVAL;
    sluice_rules *w = (sluice_rules *)rs;
    unsigned tok;
    const sluice_table *t = table_of(enter(w, &tok), id);
    int rc = SLUICE_ENOENT;
    if (t) {
        sluice_table_stats_get(t, out);
        rc = 0;
    }
    leave(w, tok);
    return rc;
}

/* ---- deciding ------------------------------------------------------------ */

static bool bad_call(sluice_result *res, sluice_rule_outcome *per_rule, size_t n)
{
    if (res) sluice__fail(res, SLUICE_EINVAL);
    if (per_rule && n <= SLUICE_COMPOSITE_MAX) memset(per_rule, 0, n * sizeof *per_rule);
    return false;
}

/* A ref that names exactly one limit: a limiter, or a table's key. */
static bool ref_ok(const sluice_limit_ref *r)
{
    return (r->limiter != NULL) != (r->table != NULL) && (r->key || r->keylen == 0);
}

static bool same_limit(const sluice_limit_ref *a, const sluice_limit_ref *b)
{
    if (a->limiter || b->limiter) return a->limiter == b->limiter;
    return a->table == b->table && a->keylen == b->keylen &&
           (a->keylen == 0 || memcmp(a->key, b->key, a->keylen) == 0);
}

/* One limit's own decision: a composite of one is that limit's decision. */
static bool decide_one(const sluice_limit_ref *r, uint64_t permits, uint64_t now_ns,
                       sluice_result *out)
{
    return r->limiter ? sluice_try_acquire_at(r->limiter, permits, now_ns, out)
                      : sluice_table_try_acquire_at(r->table, r->key, r->keylen, permits,
                                                    now_ns, out);
}

static bool bad_shadow_call(sluice_result *res, sluice_rule_outcome *per, size_t n)
{
    if (res) sluice__fail(res, SLUICE_EINVAL);
    if (per && n <= SLUICE_COMPOSITE_MAX) memset(per, 0, n * sizeof *per);
    return false;
}

bool sluice_shadow_try_acquire_at(const sluice_limit_ref *refs, const bool *shadow, size_t n,
                                  uint64_t permits, uint64_t now_ns, sluice_result *res,
                                  sluice_rule_outcome *per)
{
    if (!refs || !shadow || n == 0 || n > SLUICE_COMPOSITE_MAX)
        return bad_shadow_call(res, per, n);
    sluice_limit_ref en[SLUICE_COMPOSITE_MAX];
    sluice_result eres[SLUICE_COMPOSITE_MAX];
    size_t ne = 0, at[SLUICE_COMPOSITE_MAX]; /* limit i's place among the enforcing */
    for (size_t i = 0; i < n; i++) {
        if (!ref_ok(&refs[i])) return bad_shadow_call(res, per, n);
        for (size_t j = 0; j < i; j++) /* a limit twice, enforcing or shadow */
            if (same_limit(&refs[i], &refs[j])) return bad_shadow_call(res, per, n);
        if (!shadow[i]) {
            at[i] = ne;
            en[ne++] = refs[i];
        }
    }
    sluice_result all;
    bool ok;
    if (ne == 1) {
        ok = decide_one(&en[0], permits, now_ns, &all);
        eres[0] = all;
    } else if (ne) {
        ok = sluice_composite_try_acquire_at(en, ne, permits, now_ns, &all, eres);
    } else {
        ok = true;
        memset(&all, 0, sizeof all);
        all.allowed = true;
        all.remaining = UINT64_MAX;
    }
    sluice_rule_outcome mine[SLUICE_COMPOSITE_MAX]; /* the shadows are decided anyway */
    if (!per) per = mine;
    for (size_t i = 0; i < n; i++) {
        sluice_rule_outcome *o = &per[i];
        memset(o, 0, sizeof *o);
        if (!shadow[i]) {
            o->res = eres[at[i]];
            o->decision = ok ? SLUICE_RULE_ALLOWED
                        : o->res.allowed ? SLUICE_RULE_DENIED_ELSEWHERE : SLUICE_RULE_DENIED;
            continue;
        }
        o->shadow = true;
        if (!ok) {
            o->decision = SLUICE_RULE_DENIED_ELSEWHERE; /* not decided, not charged */
            continue;
        }
        o->decision = decide_one(&refs[i], permits, now_ns, &o->res) ? SLUICE_RULE_ALLOWED
                                                                     : SLUICE_RULE_DENIED_SHADOW;
    }
    if (res) *res = all;
    return ok;
}

/* A bad call of sluice_rules_decide_at on v (see the header): a NULL key
 * with keylen > 0, a request twice, an id no load gave, a concurrency rule,
 * the same global rule twice. */
static bool bad_req(const version *v, const sluice_rule_key *req, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!req[i].key && req[i].keylen) return true;
        int32_t id = req[i].rule;
        if (id < 0 || (size_t)id >= v->nids) return true;
        const rule *r = v->by_id[id];
        if (r && r->d.conc) return true;
        for (size_t j = 0; j < i; j++) {
            if (req[j].rule != id) continue;
            if (r && r->d.global) return true; /* the key does not count */
            if (req[j].keylen == req[i].keylen &&
                (req[i].keylen == 0 || memcmp(req[j].key, req[i].key, req[i].keylen) == 0))
                return true;
        }
    }
    return false;
}

/* sluice_rules_decide_at on the version v, entered by the caller: 1
 * allowed, 0 refused, -1 a bad call (nothing decided). */
static int decide_in(sluice_rules *rs, const version *v, unsigned tok, const sluice_rule_key *req,
                     size_t n, uint64_t permits, uint64_t now_ns, sluice_result *res,
                     sluice_rule_outcome *per_rule)
{
    (void)rs;
    for (size_t i = 0; i < n; i++) {
        if (!req[i].key && req[i].keylen) /* any length: a long key is held by its digest */
            return -1;
        for (size_t j = 0; j < i; j++)
            if (req[j].rule == req[i].rule && req[j].keylen == req[i].keylen &&
                (req[i].keylen == 0 || memcmp(req[j].key, req[i].key, req[i].keylen) == 0))
                return -1;
    }
    const rule *rl[SLUICE_COMPOSITE_MAX];
    sluice_limit_ref refs[SLUICE_COMPOSITE_MAX];
    bool shadow[SLUICE_COMPOSITE_MAX];
    size_t nr = 0; /* the rules the set holds, in req order */
    for (size_t i = 0; i < n; i++) {
        int32_t id = req[i].rule;
        if (id < 0 || (size_t)id >= v->nids) return -1;
        const rule *r = v->by_id[id];
        if (r && r->d.conc) return -1; /* its permits must be given back: sluice_rules_acquire_at */
        rl[i] = r;
        if (r && r->d.global) /* the key does not count: once per global rule */
            for (size_t j = 0; j < i; j++)
                if (rl[j] == r) return -1;
        if (r) {
            shadow[nr] = r->d.shadow;
            refs[nr++] = r->d.global ? sluice_ref_limiter(r->lim)
                                     : sluice_ref_key(r->tab, req[i].key, req[i].keylen);
        }
    }
    sluice_rule_outcome out[SLUICE_COMPOSITE_MAX];
    sluice_result all;
    bool ok = true;
    memset(&all, 0, sizeof all);
    all.allowed = true;
    all.remaining = UINT64_MAX;
    if (nr) ok = sluice_shadow_try_acquire_at(refs, shadow, nr, permits, now_ns, &all, out);
    for (size_t i = 0, k = 0; i < n; i++) {
        const rule *r = rl[i];
        sluice_rule_outcome o;
        if (r) {
            o = out[k++];
            rctr_count(r->ctr, tok / 2, o.decision, permits);
        } else {
            memset(&o, 0, sizeof o);
            o.decision = SLUICE_RULE_ABSENT;
        }
        if (per_rule) per_rule[i] = o;
    }
    if (res) *res = all;
    return ok;
}

bool sluice_rules_decide_at(sluice_rules *rs, const sluice_rule_key *req, size_t n,
                            uint64_t permits, uint64_t now_ns, sluice_result *res,
                            sluice_rule_outcome *per_rule)
{
    if (!rs || !req || n == 0 || n > SLUICE_COMPOSITE_MAX) return bad_call(res, per_rule, n);
    unsigned tok;
    const version *v = enter(rs, &tok);
    int rc = decide_in(rs, v, tok, req, n, permits, now_ns, res, per_rule);
    leave(rs, tok);
    return rc < 0 ? bad_call(res, per_rule, n) : rc == 1;
}

bool sluice_rules_decide(sluice_rules *rs, const sluice_rule_key *req, size_t n, uint64_t permits,
                         sluice_result *res, sluice_rule_outcome *per_rule)
{
    if (!rs || !req || n == 0 || n > SLUICE_COMPOSITE_MAX) return bad_call(res, per_rule, n);
    unsigned tok;
    const version *v = enter(rs, &tok); /* the clock its rules read */
    const uint64_t now_ns = v->wall_clock ? sluice__clock_now(SLUICE__CLOCK_REALTIME) : sluice_now_ns();
    int rc = decide_in(rs, v, tok, req, n, permits, now_ns, res, per_rule);
    leave(rs, tok);
    return rc < 0 ? bad_call(res, per_rule, n) : rc == 1;
}

/* ---- concurrency rules: a permit held, then released ------------------- */

/* Take `permits` of concurrency rule r (key k) at now_ns into *pm. */
static bool conc_take(const rule *r, const sluice_rule_key *k, uint64_t permits, uint64_t now_ns,
                      sluice_permit *pm, sluice_result *res)
{
    if (r->conc) return sluice_acquire_permit_at(r->conc, permits, now_ns, pm, res);
    return sluice_concurrency_table_acquire_at(r->ctab, k->key, k->keylen, permits, now_ns, pm, res);
}

bool sluice_rules_acquire_at(sluice_rules *rs, const sluice_rule_key *req, size_t n,
                             uint64_t permits, uint64_t now_ns, sluice_rules_permit *hold,
                             sluice_result *res, sluice_rule_outcome *per_rule)
{
    if (hold) memset(hold, 0, sizeof *hold);
    if (!hold) return bad_call(res, per_rule, n);
    hold->conc_rule = -1;
    if (!rs || !req || n == 0 || n > SLUICE_COMPOSITE_MAX) return bad_call(res, per_rule, n);
    unsigned tok;
    const version *v = enter(rs, &tok);
    size_t ci = SIZE_MAX; /* the request's concurrency rule, at most one */
    sluice_rule_key rest[SLUICE_COMPOSITE_MAX];
    size_t at[SLUICE_COMPOSITE_MAX], nrest = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = req[i].rule;
        if (id < 0 || (size_t)id >= v->nids || (!req[i].key && req[i].keylen)) {
            leave(rs, tok);
            return bad_call(res, per_rule, n);
        }
        const rule *r = v->by_id[id];
        if (r && r->d.conc) {
            if (ci != SIZE_MAX) { /* two concurrency rules in one request */
                leave(rs, tok);
                return bad_call(res, per_rule, n);
            }
            ci = i;
        } else {
            /* (checked below with the others, before anything is taken) */
            at[nrest] = i;
            rest[nrest++] = req[i];
        }
    }
    if (bad_req(v, rest, nrest)) {
        leave(rs, tok);
        return bad_call(res, per_rule, n);
    }
    const rule *cr = ci == SIZE_MAX ? NULL : v->by_id[req[ci].rule];
    sluice_rule_outcome co;
    memset(&co, 0, sizeof co);
    sluice_permit pm = {0};
    bool ok = true;
    sluice_result all;
    memset(&all, 0, sizeof all);
    all.allowed = true;
    all.remaining = UINT64_MAX;
    sluice_rule_outcome out[SLUICE_COMPOSITE_MAX];
    if (cr && !cr->d.shadow) { /* first: a refusal asks no rate limit */
        co.decision = SLUICE_RULE_ALLOWED;
        if (!conc_take(cr, &req[ci], permits, now_ns, &pm, &co.res)) {
            co.decision = SLUICE_RULE_DENIED;
            ok = false;
            all = co.res;
            for (size_t k = 0; k < nrest; k++) {
                memset(&out[k], 0, sizeof out[k]);
                const rule *r = v->by_id[rest[k].rule];
                out[k].decision = r ? SLUICE_RULE_DENIED_ELSEWHERE : SLUICE_RULE_ABSENT;
                out[k].shadow = r && r->d.shadow;
                if (r) rctr_count(r->ctr, tok / 2, out[k].decision, permits);
            }
        }
    }
    if (ok && nrest) {
        /* the rate rules, as sluice_rules_decide_at; the permit goes back
         * if they refuse */
        int rc = decide_in(rs, v, tok, rest, nrest, permits, now_ns, &all, out);
        if (rc < 0) {
            if (pm.permits) sluice_permit_release_at(&pm, now_ns);
            leave(rs, tok);
            return bad_call(res, per_rule, n);
        }
        ok = rc == 1;
        if (!ok && pm.permits) {
            sluice_permit_release_at(&pm, now_ns);
            co.decision = SLUICE_RULE_DENIED_ELSEWHERE;
        }
    }
    if (cr && !cr->d.shadow && ok && co.res.remaining < all.remaining)
        all.remaining = co.res.remaining;
    if (cr && cr->d.shadow) { /* counts, never refuses; decided when the rest allowed */
        co.shadow = true;
        co.decision = SLUICE_RULE_DENIED_ELSEWHERE;
        if (ok)
            co.decision = conc_take(cr, &req[ci], permits, now_ns, &pm, &co.res)
                              ? SLUICE_RULE_ALLOWED
                              : SLUICE_RULE_DENIED_SHADOW;
    }
    if (cr) rctr_count(cr->ctr, tok / 2, co.decision, permits);
    if (pm.permits) {
        hold->pm = pm;
        hold->conc_rule = req[ci].rule;
        hold->generation = v->generation;
        /* the handle's reference: the limit outlives the set's use of it
         * until this permit is released (v is current or in its grace
         * period, so the set's reference is still held) */
        sluice__conc_ref(pm.owner);
    }
    leave(rs, tok);
    if (per_rule) {
        for (size_t k = 0; k < nrest; k++) per_rule[at[k]] = out[k];
        if (ci != SIZE_MAX) {
            if (!cr) {
                memset(&co, 0, sizeof co);
                co.decision = SLUICE_RULE_ABSENT;
            }
            per_rule[ci] = co;
        }
    }
    if (res) *res = all;
    return ok;
}

int sluice_rules_release_at(sluice_rules_permit *hold, uint64_t now_ns)
{
    if (!hold) return SLUICE_EINVAL;
    sluice_concurrency *c = hold->pm.owner;
    if (!c || hold->pm.permits == 0) return sluice_permit_release_at(&hold->pm, now_ns);
    /* a live handle: released (or found ended, with a lease) exactly once
     * here -- the limit's call sets pm.permits to 0 either way -- then its
     * reference goes, perhaps the last of a limit a reload retired */
    int rc = sluice_permit_release_at(&hold->pm, now_ns);
    sluice__conc_unref(c);
    return rc;
}
