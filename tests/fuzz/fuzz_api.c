/* fuzz_api.c -- fuzz the decision API against the reference model.
 *
 * The input is a small program: a header that makes two limiters and one
 * table (any of the six algorithms, the leaky bucket as shaper or meter,
 * rates from 1/ns to 10^12 per century, burst/capacity/slots options, a
 * table of 1 .. 8 keys with or without SLUICE_TABLE_EVICT_LRU, keys from 0
 * bytes to one byte over SLUICE_MAX_KEY_BYTES), then a stream of commands:
 * try_acquire, reserve, cancel or settle a reservation, table requests and
 * table reservations (reserve, cancel, settle on a key), probes, statistics checks.  Times come from the
 * input: bursts at one instant, window and slot edges, exactly a refusal's
 * retry_after_ns and one ns before, idle gaps of years, times earlier than
 * the last, 2^63-1 and beyond.
 *
 * Checked, decision by decision:
 *  - every field of sluice_result against tests/ref_model.c (one model per
 *    limiter and per table key), while the model can follow the limiter;
 *  - always: the return value equals res.allowed; allowed => retry_after_ns
 *    0; refused => retry_after_ns -1 or > 0; a probe (permits 0) is
 *    allowed (a table may refuse it only for its own reason: table full); permits above what the limiter can ever grant are refused
 *    with -1; remaining never exceeds that maximum; wait_ns is 0 except for
 *    the leaky-bucket shaper;
 *  - a cancel gives permits back (0) only before the reservation's time,
 *    and one that returns SLUICE_ENOENT changes nothing (a probe before and
 *    after it answers the same, and the model keeps agreeing); a second
 *    cancel of the same reservation returns SLUICE_ENOENT;
 *  - a table: a key longer than SLUICE_MAX_KEY_BYTES is a key as any
 *    (held by its digest); "full" (SLUICE_EFULL) only when max_keys keys not
 *    at rest are held and the key is not one of them; never more than
 *    max_keys keys held;
 *  - sluice_table_remove / _reset: 0 for a key in use, SLUICE_ENOENT (remove)
 *    for a key never made; the key then starts afresh; sluice_table_peek_at
 *    answers as the model would (refusals, probes, keys at rest), reports
 *    the model's latest admission and first instant at rest, and counts in
 *    no statistic;
 *  - the statistics (sluice_limiter_stats_get, sluice_table_stats_get) equal
 *    the counts of what was observed.
 *
 * Then the same input again as a program for a concurrency limit
 * (conc_program): `concurrency N` with or without a lease, acquires,
 * changes in place (sluice_concurrency_reconfigure_at: N and the lease),
 * releases through the handle and through stale copies of it, gauges;
 * every decision, remaining, retry_after_ns and release result against the
 * model's ref_conc, with times from the input up to 2^63-1 and beyond;
 * and a table of concurrency limits (conc_table_program: 2 keys' room for
 * 4 keys, no lease), each key against its own model, refused as full
 * exactly when the key holds nothing and two others hold permits; and the
 * same table's acquires that wait (conc_table_wait_program: queued
 * requests through a wheel the input advances, cancels, freeing with
 * requests pending).
 *
 * Where the model cannot follow.  The model has no reservations: a
 * reservation that books permits the bucket does not hold yet (debt), a
 * cancel that gives permits back, and a table eviction (which resets a key
 * we cannot name) put that limiter or key out of sync.  Out of sync, only
 * the invariants above are checked, and the harness keeps an upper bound of
 * the time the limiter is back at rest (full bucket, no water, empty
 * window): for a bucket, max(bound, t) + ceil(p * W / L) per admission
 * (GCRA's theoretical arrival time, rounded up), for a window t + 2W.  A
 * request at or after that bound finds the limiter at rest: a fresh model
 * takes over there, and the limiter's later requests are given times no
 * earlier than that point (the fresh model has no history to clamp to).
 *
 * The contract's time rule (docs: only an admission moves a limiter's time;
 * a refusal or a probe is a pure read) is assumed of both the library and
 * the model; the harness never relies on a refusal moving time.
 */
#include <sluice.h>
#include <stdarg.h>
#include <string.h>

#include "fuzz.h"
#include "ref_model.h"

__extension__ typedef unsigned __int128 u128;

#define TMAX ((uint64_t)INT64_MAX)
#define MAXOPS 600
#define NKEYS 8
#define NRV 8
#define LONGKEY (SLUICE_MAX_KEY_BYTES + 1) /* held by its digest: a key as any */


/* FUZZ_TRACE=1 in the environment: print every call and its result to
 * stderr (to read a crash's input as a program). */
static int g_trace = -1;

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void trace(const char *fmt, ...)
{
    if (g_trace < 0) g_trace = getenv("FUZZ_TRACE") != NULL;
    if (!g_trace) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

static void trace_result(const char *call, const char *spec, uint64_t p, uint64_t t, bool ok,
                         const sluice_result *r)
{
    trace("%s(\"%s\", p=%llu, t=%llu) -> allowed=%d wait=%llu remaining=%llu retry=%lld\n", call,
          spec, (unsigned long long)p, (unsigned long long)t, ok, (unsigned long long)r->wait_ns,
          (unsigned long long)r->remaining, (long long)r->retry_after_ns);
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- limiter configurations -------------------------------------------- */

typedef struct rate {
    const char *text;
    uint64_t limit, period_ns;
} rate;

#define SEC UINT64_C(1000000000)
#define DAY (86400 * SEC)
static const rate RATES[] = {
    {"10/s", 10, SEC},
    {"3/s", 3, SEC},
    {"7/10s", 7, 10 * SEC},
    {"1/d", 1, DAY},
    {"5/250ms", 5, 250000000},
    {"2/3ns", 2, 3},
    {"1/ns", 1, 1},
    {"3/7us", 3, 7000},
    {"1000000000/s", 1000000000, SEC},
    {"100/m", 100, 60 * SEC},
    {"1000000000000/36500d", UINT64_C(1000000000000), 36500 * DAY},
    {"36500/36500d", 36500, 36500 * DAY},
    {"1/36500d", 1, 36500 * DAY},
    {"1000000000000/d", UINT64_C(1000000000000), DAY},
    {"4/4ns", 4, 4},
    {"60/min", 60, 60 * SEC},
};
#define NRATES (sizeof RATES / sizeof RATES[0])

static const uint64_t CAPACITIES[] = {1, 2, 3, 5, 16, 1000, 1000000, UINT64_C(1) << 40};
static const uint64_t SLOTS[] = {1, 2, 3, 4, 5, 7, 10, 64};

typedef struct config {
    char spec[160];
    ref_params p; /* capacity 0: the default */
    uint64_t max_grant;
    bool bucket, shaper;
} config;

static const ref_alg ALGS[7] = {REF_FIXED_WINDOW,   REF_SLIDING_LOG,  REF_SLIDING_WHEEL,
                                REF_SLIDING_APPROX, REF_TOKEN_BUCKET, REF_LEAKY_BUCKET,
                                REF_LEAKY_BUCKET};

static void config_write(config *c)
{
    const ref_params *p = &c->p;
    int n = snprintf(c->spec, sizeof c->spec, "%s %llu/%lluns", ref_alg_name(p->alg),
                     (unsigned long long)p->limit, (unsigned long long)p->period_ns);
    if (p->capacity)
        n += snprintf(c->spec + n, sizeof c->spec - (size_t)n, " %s=%llu",
                      p->alg == REF_TOKEN_BUCKET ? "burst" : "capacity",
                      (unsigned long long)p->capacity);
    if (p->alg == REF_SLIDING_WHEEL)
        n += snprintf(c->spec + n, sizeof c->spec - (size_t)n, " slots=%llu",
                      (unsigned long long)p->slots);
    if (p->nodelay) snprintf(c->spec + n, sizeof c->spec - (size_t)n, " nodelay");
    c->bucket = p->alg == REF_TOKEN_BUCKET || p->alg == REF_LEAKY_BUCKET;
    c->shaper = p->alg == REF_LEAKY_BUCKET && !p->nodelay;
    c->max_grant = c->bucket ? (p->capacity ? p->capacity : p->limit) : p->limit;
}

/* Four header bytes: algorithm, rate, capacity, slots.  The spec is written
 * with the period in ns (the parser's units are fuzz_spec's business). */
static config config_from(fuzz_in *in)
{
    config c;
    memset(&c, 0, sizeof c);
    uint8_t a = fuzz_u8(in), r = fuzz_u8(in), cap = fuzz_u8(in), sl = fuzz_u8(in);
    c.p.alg = ALGS[a % 7];
    c.p.nodelay = a % 7 == 6;
    const rate *rt = &RATES[r % NRATES];
    c.p.limit = rt->limit;
    c.p.period_ns = rt->period_ns;
    if ((c.p.alg == REF_TOKEN_BUCKET || c.p.alg == REF_LEAKY_BUCKET) && cap % 3 != 0)
        c.p.capacity = CAPACITIES[(cap / 3) % 8];
    if (c.p.alg == REF_SLIDING_WHEEL) {
        c.p.slots = SLOTS[sl % 8];
        if (c.p.period_ns % c.p.slots != 0) c.p.slots = 1;
    }
    config_write(&c);
    return c;
}

/* ---- a subject: a limiter or a table key, with its model --------------- */

typedef struct stats {
    uint64_t allowed, denied, pallowed, pdenied, probes;
} stats;

static void stats_add(stats *s, uint64_t p, bool ok)
{
    if (p == 0) s->probes++;
    else if (ok) s->allowed++, s->pallowed = sat_add(s->pallowed, p);
    else s->denied++, s->pdenied = sat_add(s->pdenied, p);
}

static void stats_check(const stats *want, const sluice_stats *got, const char *what)
{
    FUZZ_CHECK(got->requests_allowed == want->allowed && got->requests_denied == want->denied &&
                   got->permits_allowed == want->pallowed && got->permits_denied == want->pdenied &&
                   got->probes == want->probes,
               "%s statistics: allowed %llu/%llu denied %llu/%llu permits allowed %llu/%llu "
               "denied %llu/%llu probes %llu/%llu (library/observed)",
               what, (unsigned long long)got->requests_allowed, (unsigned long long)want->allowed,
               (unsigned long long)got->requests_denied, (unsigned long long)want->denied,
               (unsigned long long)got->permits_allowed, (unsigned long long)want->pallowed,
               (unsigned long long)got->permits_denied, (unsigned long long)want->pdenied,
               (unsigned long long)got->probes, (unsigned long long)want->probes);
}

typedef struct subject {
    const config *c;
    ref_model *m;       /* NULL: not yet made (a key never asked) */
    bool synced;        /* the model follows the limiter */
    uint64_t rest;      /* out of sync: the limiter is at rest at or after this */
    uint64_t floor;     /* times given are at least this (after a resync) */
    uint64_t max_adm;   /* the latest time given with an admission */
    uint64_t max_any;   /* the latest time given */
    uint64_t cur;       /* the input's current time for this subject */
    uint64_t remaining; /* the last decision's remaining */
    uint64_t last_p;    /* the last refusal: permits, time, retry */
    uint64_t last_t;
    int64_t last_retry;
    stats st;
} subject;

static void subject_init(subject *s, const config *c)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    s->synced = true;
    s->remaining = c->max_grant;
}

static ref_model *model_new(const config *c)
{
    ref_model *m = ref_model_new(&c->p);
    FUZZ_CHECK(m != NULL, "ref_model_new refused %s", c->spec);
    return m;
}

/* ceil(p * W / L), saturated */
static uint64_t drain_time(const config *c, uint64_t p)
{
    u128 v = ((u128)p * c->p.period_ns + c->p.limit - 1) / c->p.limit;
    return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

/* Put s out of sync: from now on only the invariants are checked until it
 * is at rest.  The model's own state comes to rest by its latest time plus
 * the time to drain a full bucket, or two windows. */
static void unsync(subject *s)
{
    if (!s->synced) return;
    s->synced = false;
    uint64_t base = s->m ? ref_model_latest(s->m) : 0;
    base = max64(base, s->max_adm);
    s->rest = s->c->bucket ? sat_add(base, drain_time(s->c, s->c->max_grant))
                           : sat_add(base, sat_add(s->c->p.period_ns, s->c->p.period_ns));
}

/* Out of sync: account an admission of p at (given) time t. */
static void track_admission(subject *s, uint64_t t, uint64_t p)
{
    uint64_t ta = max64(t, s->max_adm);
    if (s->c->bucket)
        s->rest = sat_add(max64(s->rest, ta), drain_time(s->c, p));
    else
        s->rest = max64(s->rest, sat_add(ta, sat_add(s->c->p.period_ns, s->c->p.period_ns)));
}

/* The time to give for input time t: at least the floor; at or after the
 * rest bound an out-of-sync subject gets a fresh model. */
static uint64_t subject_time(subject *s, uint64_t t)
{
    uint64_t tc = min64(t, TMAX);
    if (tc < s->floor) tc = s->floor;
    if (!s->synced && tc >= s->rest) {
        /* at rest: a fresh model; a limiter may have seen times up to
         * max_any, which then is the new floor */
        ref_model_free(s->m);
        s->m = model_new(s->c);
        s->synced = true;
        s->floor = max64(tc, min64(s->max_any, TMAX));
        tc = s->floor;
        s->remaining = s->c->max_grant;
    }
    s->max_any = max64(s->max_any, tc);
    return t > TMAX && tc == TMAX ? t : tc; /* beyond 2^63-1 counts as 2^63-1 */
}

/* ---- checks ------------------------------------------------------------ */

enum kind { K_TRY, K_RESERVE, K_TABLE };

static void check_invariants(const subject *s, enum kind k, bool ok, const sluice_result *r,
                             uint64_t p, int table_err)
{
    const char *spec = s->c->spec;
    FUZZ_CHECK(ok == r->allowed, "%s: return %d, res.allowed %d", spec, ok, r->allowed);
    FUZZ_CHECK(r->reserved_[0] == 0 && r->reserved_[1] == 0 && r->reserved_[2] == 0,
               "%s: reserved words of the result not zero", spec);
    if (k != K_TABLE)
        FUZZ_CHECK(r->error == 0, "%s: error %d from a limiter", spec, (int)r->error);
    if (ok) FUZZ_CHECK(r->error == 0, "%s: allowed with error %d", spec, (int)r->error);
    if (ok) {
        FUZZ_CHECK(r->retry_after_ns == 0, "%s: allowed p=%llu with retry_after_ns %lld", spec,
                   (unsigned long long)p, (long long)r->retry_after_ns);
    } else {
        FUZZ_CHECK(r->retry_after_ns == -1 || r->retry_after_ns > 0,
                   "%s: refused p=%llu with retry_after_ns %lld", spec, (unsigned long long)p,
                   (long long)r->retry_after_ns);
    }
    if (k == K_TABLE && table_err != 0) return; /* refused by the table, not the key */
    /* a probe, a reservation of 0 permits included, is always allowed */
    if (p == 0)
        FUZZ_CHECK(ok, "%s: probe refused (retry %lld)", spec, (long long)r->retry_after_ns);
    if (p > s->c->max_grant)
        FUZZ_CHECK(!ok && r->retry_after_ns == -1,
                   "%s: p=%llu above the maximum %llu: allowed=%d retry %lld", spec,
                   (unsigned long long)p, (unsigned long long)s->c->max_grant, ok,
                   (long long)r->retry_after_ns);
    FUZZ_CHECK(r->remaining <= s->c->max_grant, "%s: remaining %llu above the maximum %llu", spec,
               (unsigned long long)r->remaining, (unsigned long long)s->c->max_grant);
    if (k != K_RESERVE && (!ok || !s->c->shaper))
        FUZZ_CHECK(r->wait_ns == 0, "%s: wait_ns %llu (allowed=%d)", spec,
                   (unsigned long long)r->wait_ns, ok);
}

static void check_same(const subject *s, const ref_result *e, const sluice_result *g, uint64_t p,
                       uint64_t t)
{
    FUZZ_CHECK(e->allowed == g->allowed && e->wait_ns == g->wait_ns &&
                   e->remaining == g->remaining && e->retry_after_ns == g->retry_after_ns,
               "%s: p=%llu t=%llu (model latest %llu): model allowed=%d wait=%llu remaining=%llu "
               "retry=%lld, library allowed=%d wait=%llu remaining=%llu retry=%lld",
               s->c->spec, (unsigned long long)p, (unsigned long long)t,
               (unsigned long long)ref_model_latest(s->m), e->allowed,
               (unsigned long long)e->wait_ns, (unsigned long long)e->remaining,
               (long long)e->retry_after_ns, g->allowed, (unsigned long long)g->wait_ns,
               (unsigned long long)g->remaining, (long long)g->retry_after_ns);
}

/* After a decision of the subject's own limiter at given time t. */
static void note(subject *s, uint64_t t, uint64_t p, bool ok, const sluice_result *r)
{
    if (ok && p > 0) {
        if (!s->synced) track_admission(s, min64(t, TMAX), p);
        s->max_adm = max64(s->max_adm, min64(t, TMAX));
    }
    s->remaining = r->remaining;
    if (!ok && r->retry_after_ns > 0) {
        s->last_p = p;
        s->last_t = s->synced ? max64(min64(t, TMAX), ref_model_latest(s->m)) : min64(t, TMAX);
        s->last_retry = r->retry_after_ns;
    }
}

/* A decision the model follows: decide it there too and compare. */
static void follow(subject *s, uint64_t t, uint64_t p, const sluice_result *g)
{
    if (!s->m) s->m = model_new(s->c);
    ref_result e;
    ref_model_decide(s->m, p, min64(t, TMAX), &e);
    check_same(s, &e, g, p, t);
}

/* ---- the input's choices ---------------------------------------------- */

static uint64_t pick_time(fuzz_in *in, subject *s)
{
    const config *c = s->c;
    uint64_t w = c->p.period_ns, t = s->cur;
    uint64_t spacing = max64(1, w / c->p.limit);
    uint64_t tick = c->p.alg == REF_SLIDING_WHEEL ? w / c->p.slots : w;
    uint8_t mode = fuzz_u8(in);
    switch (mode % 16) {
    case 0: case 1: case 2: case 3: break; /* the same instant */
    case 4: case 5: case 6: t = sat_add(t, fuzz_u64(in) % (2 * spacing + 1)); break;
    case 7: t = sat_add(t, fuzz_u64(in) % (w + 1)); break;
    case 8: { /* a window or slot edge, or one ns either side */
        uint8_t b = fuzz_u8(in);
        uint64_t g = b & 1 ? tick : w;
        uint64_t e = sat_add(t / g * g, g);
        t = (b >> 1) % 3 == 0 ? e - 1 : (b >> 1) % 3 == 1 ? e : sat_add(e, 1);
        break;
    }
    case 9: t = sat_add(t, 1 + (fuzz_u64(in) >> (fuzz_u8(in) % 64))); break;
    case 10: { /* earlier than the last */
        uint64_t back = 1 + fuzz_u64(in) % sat_add(w, w);
        return t > back ? t - back : 0;
    }
    case 11: /* the last refusal's retry_after_ns, or one ns before */
        if (s->last_retry > 0) {
            uint64_t e = sat_add(s->last_t, (uint64_t)s->last_retry);
            return fuzz_u8(in) & 1 ? e : e - 1;
        }
        break;
    case 12: t = TMAX - fuzz_u8(in) % 4; break;
    case 13: return fuzz_u64(in); /* anything, beyond 2^63-1 too */
    default: t = sat_add(t, fuzz_u8(in)); break;
    }
    s->cur = min64(t, TMAX);
    return t;
}

static uint64_t pick_permits(fuzz_in *in, const subject *s)
{
    uint64_t mg = s->c->max_grant;
    switch (fuzz_u8(in) % 16) {
    case 0: return 0;
    case 6: return s->remaining;
    case 7: return sat_add(s->remaining, 1);
    case 8: return mg;
    case 9: return sat_add(mg, 1);
    case 10: return 1 + fuzz_u8(in) % min64(mg, 16);
    case 11: return UINT64_MAX;
    case 12: return UINT64_C(1) << 63;
    case 13: return fuzz_u64(in) % sat_add(sat_add(mg, mg), 1);
    case 14: return s->last_p;
    default: return 1;
    }
}

static uint64_t pick_max_wait(fuzz_in *in, const subject *s)
{
    switch (fuzz_u8(in) % 4) {
    case 0: return UINT64_MAX;
    case 1: return 0;
    case 2: return fuzz_u64(in) % sat_add(sat_add(s->c->p.period_ns, s->c->p.period_ns), 1);
    default: return fuzz_u64(in);
    }
}

/* ---- limiters ----------------------------------------------------------- */

typedef struct lim {
    config c;
    sluice_limiter *lim;
    subject s;
} lim;

static void lim_make(lim *l, fuzz_in *in)
{
    char err[256];
    l->c = config_from(in);
    l->lim = sluice_limiter_new(l->c.spec, err, sizeof err);
    if (!l->lim && l->c.p.capacity) { /* e.g. a bucket that takes > 2^63 ns to fill */
        l->c.p.capacity = 0;
        config_write(&l->c);
        l->lim = sluice_limiter_new(l->c.spec, err, sizeof err);
    }
    FUZZ_CHECK(l->lim != NULL, "spec \"%s\" refused: %s", l->c.spec, err);
    subject_init(&l->s, &l->c);
    l->s.m = model_new(&l->c);
}

static void lim_try(lim *l, fuzz_in *in)
{
    subject *s = &l->s;
    uint64_t t = subject_time(s, pick_time(in, s));
    uint64_t p = pick_permits(in, s);
    sluice_result r;
    memset(&r, 0x5a, sizeof r);
    bool ok = sluice_try_acquire_at(l->lim, p, t, &r);
    trace_result("try_acquire_at", l->c.spec, p, t, ok, &r);
    stats_add(&s->st, p, ok);
    check_invariants(s, K_TRY, ok, &r, p, 0);
    if (s->synced) follow(s, t, p, &r);
    note(s, t, p, ok, &r);
}

/* A probe at the latest time this limiter was given: what a cancel that
 * reports failure must not change. */
static sluice_result lim_probe(lim *l)
{
    subject *s = &l->s;
    uint64_t t = max64(s->max_any, s->floor);
    sluice_result r;
    bool ok = sluice_try_acquire_at(l->lim, 0, t, &r);
    trace_result("probe", l->c.spec, 0, t, ok, &r);
    stats_add(&s->st, 0, ok);
    check_invariants(s, K_TRY, ok, &r, 0, 0);
    if (s->synced) follow(s, t, 0, &r);
    return r;
}

typedef struct held_rv {
    sluice_reservation r;
    int owner; /* -1: free slot */
} held_rv;

static void lim_reserve(lim *ls, int i, held_rv *rvs, fuzz_in *in)
{
    lim *l = &ls[i];
    subject *s = &l->s;
    uint64_t t = subject_time(s, pick_time(in, s));
    uint64_t p = pick_permits(in, s);
    uint64_t mw = pick_max_wait(in, s);
    bool would = s->synced && ref_model_would_allow(s->m, p, min64(t, TMAX));
    /* a bucket that does not hold the permits: the model's retry_after_ns
     * for them is the reservation's wait (a refusal is a pure read of the
     * model) */
    ref_result pre;
    bool have_pre = s->synced && l->c.bucket && p > 0 && !would && p <= l->c.max_grant;
    uint64_t teff = s->synced ? max64(min64(t, TMAX), ref_model_latest(s->m)) : 0;
    if (have_pre) {
        FUZZ_CHECK(!ref_model_decide(s->m, p, min64(t, TMAX), &pre), "model allowed what it would not");
        FUZZ_CHECK(pre.retry_after_ns > 0, "model retry %lld", (long long)pre.retry_after_ns);
    }
    sluice_reservation rv;
    sluice_result r;
    memset(&r, 0x5a, sizeof r);
    bool ok = sluice_reserve_at(l->lim, p, t, mw, &rv, &r);
    trace("max_wait=%llu at=%llu ", (unsigned long long)mw, (unsigned long long)rv.at_ns);
    trace_result("reserve_at", l->c.spec, p, t, ok, &r);
    stats_add(&s->st, p, ok);
    check_invariants(s, K_RESERVE, ok, &r, p, 0);
    if (ok) {
        FUZZ_CHECK(rv.permits == p && rv.wait_ns == r.wait_ns && rv.wait_ns <= mw,
                   "%s: reservation of %llu: permits %llu wait %llu (res %llu, max %llu)",
                   l->c.spec, (unsigned long long)p, (unsigned long long)rv.permits,
                   (unsigned long long)rv.wait_ns, (unsigned long long)r.wait_ns,
                   (unsigned long long)mw);
        FUZZ_CHECK(rv.at_ns >= min64(t, TMAX) || p == 0, "%s: reservation at %llu before %llu",
                   l->c.spec, (unsigned long long)rv.at_ns, (unsigned long long)t);
        FUZZ_CHECK(rv.at_ns <= TMAX, "%s: reservation at %llu, past 2^63-1", l->c.spec,
                   (unsigned long long)rv.at_ns);
    } else {
        FUZZ_CHECK(rv.permits == 0, "%s: refused reservation holds %llu permits", l->c.spec,
                   (unsigned long long)rv.permits);
    }
    if (!l->c.bucket) {
        /* the windows cannot book the future: a reservation is a try */
        FUZZ_CHECK(!ok || rv.wait_ns == 0, "%s: window reservation waits %llu", l->c.spec,
                   (unsigned long long)rv.wait_ns);
        if (s->synced) follow(s, t, p, &r);
    } else if (p == 0) {
        if (s->synced) follow(s, t, 0, &r);
    } else if (ok && would && s->synced) {
        /* the bucket holds the permits: an admission (the shaper's wait is
         * the model's) */
        follow(s, t, p, &r);
        if (!l->c.shaper)
            FUZZ_CHECK(rv.wait_ns == 0, "%s: reservation the bucket holds waits %llu",
                       l->c.spec, (unsigned long long)rv.wait_ns);
    } else if (ok) {
        /* booked into debt (or out of sync already) */
        FUZZ_CHECK(!s->synced || rv.wait_ns > 0, "%s: debt reservation with no wait", l->c.spec);
        if (have_pre) {
            /* the wait is the time until the bucket holds the permits (and,
             * for the shaper, at least its turn in the output) */
            uint64_t want = (uint64_t)pre.retry_after_ns;
            FUZZ_CHECK(l->c.shaper ? rv.wait_ns >= want : rv.wait_ns == want,
                       "%s: reservation of %llu at %llu waits %llu, the model's retry_after is %llu",
                       l->c.spec, (unsigned long long)p, (unsigned long long)teff,
                       (unsigned long long)rv.wait_ns, (unsigned long long)want);
            FUZZ_CHECK(r.remaining == 0, "%s: remaining %llu with the bucket in debt", l->c.spec,
                       (unsigned long long)r.remaining);
        }
        unsync(s);
    } else {
        /* refused: nothing taken */
        FUZZ_CHECK(r.retry_after_ns == -1, "%s: refused reservation with retry %lld", l->c.spec,
                   (long long)r.retry_after_ns);
        if (s->synced && !l->c.shaper)
            FUZZ_CHECK(!would, "%s: reservation of %llu refused, the bucket holds them",
                       l->c.spec, (unsigned long long)p);
        if (have_pre && !l->c.shaper) {
            /* refused only for the documented reasons: the wait exceeds
             * max_wait or ends past 2^63-1, or the debt would take more
             * than 2^63-1 ns to repay (the wait plus refilling the whole
             * bucket, rounded up here) */
            uint64_t w = (uint64_t)pre.retry_after_ns;
            FUZZ_CHECK(w > mw || w > TMAX - teff ||
                           sat_add(w, drain_time(&l->c, l->c.max_grant)) >= TMAX,
                       "%s: reservation of %llu at %llu refused; its wait %llu fits max_wait %llu",
                       l->c.spec, (unsigned long long)p, (unsigned long long)teff,
                       (unsigned long long)w, (unsigned long long)mw);
        }
    }
    note(s, t, p, ok, &r);
    if (ok) { /* every algorithm's settles; a bucket's (p >= 1) cancels */
        uint8_t k = fuzz_u8(in) % NRV;
        rvs[k].r = rv;
        rvs[k].owner = i;
    }
}

static bool same_result(const sluice_result *a, const sluice_result *b)
{
    return a->allowed == b->allowed && a->wait_ns == b->wait_ns && a->remaining == b->remaining &&
           a->retry_after_ns == b->retry_after_ns;
}

static void lim_cancel(lim *ls, held_rv *rvs, fuzz_in *in)
{
    held_rv *v = &rvs[fuzz_u8(in) % NRV];
    if (v->owner < 0) return;
    lim *l = &ls[v->owner];
    subject *s = &l->s;
    if (!l->c.bucket) { /* the windows cannot give back: refused, kept */
        int rc = sluice_reservation_cancel_at(&v->r, s->cur);
        FUZZ_CHECK(rc == SLUICE_EINVAL, "%s: a window's cancel returned %d", l->c.spec, rc);
        return;
    }
    uint8_t b = fuzz_u8(in);
    uint64_t t;
    switch (b % 4) {
    case 0: t = v->r.at_ns - (v->r.at_ns > 0); break;
    case 1: t = v->r.at_ns; break;
    case 2: t = fuzz_u64(in) % sat_add(v->r.at_ns, 1); break;
    default: t = pick_time(in, s); break;
    }
    t = subject_time(s, t);
    sluice_result before = lim_probe(l);
    int rc = sluice_reservation_cancel_at(&v->r, t);
    trace("cancel_at(\"%s\" reservation of %llu at %llu, t=%llu) -> %d\n", l->c.spec,
          (unsigned long long)v->r.permits, (unsigned long long)v->r.at_ns, (unsigned long long)t, rc);
    FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT, "%s: cancel returned %d", l->c.spec, rc);
    if (rc == 0) {
        FUZZ_CHECK(t < v->r.at_ns, "%s: cancelled at %llu, its time %llu had come", l->c.spec,
                   (unsigned long long)t, (unsigned long long)v->r.at_ns);
        unsync(s); /* permits given back: the model has no such step */
        s->remaining = l->c.max_grant;
    } else {
        sluice_result after = lim_probe(l);
        FUZZ_CHECK(same_result(&before, &after),
                   "%s: cancel at %llu returned %d but changed the limiter: probe remaining "
                   "%llu -> %llu, retry %lld -> %lld",
                   l->c.spec, (unsigned long long)t, rc, (unsigned long long)before.remaining,
                   (unsigned long long)after.remaining, (long long)before.retry_after_ns,
                   (long long)after.retry_after_ns);
    }
    /* once cancelled, or its time come, it is final */
    rc = sluice_reservation_cancel_at(&v->r, t);
    FUZZ_CHECK(rc == SLUICE_ENOENT, "%s: a second cancel returned %d", l->c.spec, rc);
    v->owner = -1;
}

/* Settle a held reservation (docs/decisions.md 3.10) at a cost from the
 * input: 0, below, equal, above, up to 2^64-1, at any time.  0 the first
 * time; a second settle and a cancel after it return SLUICE_ENOENT (a
 * window's cancel SLUICE_EINVAL) and change nothing.  A settle at another
 * cost puts the model out of sync (it has no settle step here;
 * tests/limiter/test_reserve.c follows settles with it); an overdraft is
 * tracked as an admission at t for the bound of the time the limiter is
 * back at rest, so a request past that bound must find it at rest again:
 * the overdraft is paid, and no more than it. */
static void lim_settle(lim *ls, held_rv *rvs, fuzz_in *in)
{
    held_rv *v = &rvs[fuzz_u8(in) % NRV];
    if (v->owner < 0) return;
    lim *l = &ls[v->owner];
    subject *s = &l->s;
    const uint64_t p = v->r.permits;
    uint64_t a;
    switch (fuzz_u8(in) % 5) {
    case 0: a = 0; break;
    case 1: a = p ? fuzz_u64(in) % p : 0; break;
    case 2: a = p; break;
    case 3: a = sat_add(p, 1 + fuzz_u64(in) % sat_add(l->c.max_grant, 1)); break;
    default: a = fuzz_u64(in); break;
    }
    uint64_t t = subject_time(s, pick_time(in, s));
    if (a != p) unsync(s); /* before: its bound counts what came so far */
    int rc = sluice_reservation_settle_at(&v->r, a, t);
    trace("settle_at(\"%s\" reservation of %llu at %llu, actual=%llu, t=%llu) -> %d\n",
          l->c.spec, (unsigned long long)p, (unsigned long long)v->r.at_ns,
          (unsigned long long)a, (unsigned long long)t, rc);
    FUZZ_CHECK(rc == 0, "%s: settle returned %d", l->c.spec, rc);
    if (a > p) {
        track_admission(s, min64(t, TMAX), a - p);
        s->max_adm = max64(s->max_adm, min64(t, TMAX));
    }
    if (a != p) s->remaining = l->c.max_grant;
    sluice_result before = lim_probe(l);
    rc = sluice_reservation_settle_at(&v->r, a, t);
    FUZZ_CHECK(rc == SLUICE_ENOENT, "%s: a second settle returned %d", l->c.spec, rc);
    rc = sluice_reservation_cancel_at(&v->r, t);
    FUZZ_CHECK(rc == (l->c.bucket ? SLUICE_ENOENT : SLUICE_EINVAL),
               "%s: a cancel after a settle returned %d", l->c.spec, rc);
    sluice_result after = lim_probe(l);
    FUZZ_CHECK(same_result(&before, &after),
               "%s: a refused settle or cancel changed the limiter: probe remaining %llu -> "
               "%llu, retry %lld -> %lld",
               l->c.spec, (unsigned long long)before.remaining,
               (unsigned long long)after.remaining, (long long)before.retry_after_ns,
               (long long)after.retry_after_ns);
    v->owner = -1;
}

static void lim_check_stats(lim *l)
{
    sluice_stats got;
    sluice_limiter_stats_get(l->lim, &got);
    stats_check(&l->s.st, &got, l->c.spec);
}

/* ---- the table ---------------------------------------------------------- */

typedef struct table {
    config c;
    sluice_table *t;
    size_t max_keys;
    bool lru;
    uint64_t now; /* the latest time given to the table */
    unsigned char *key[NKEYS];
    size_t keylen[NKEYS];
    int alias[NKEYS]; /* the first key of the same bytes */
    subject ks[NKEYS];
    stats st;
    uint64_t evicted;
} table;

static void table_make(table *tb, fuzz_in *in)
{
    char err[256];
    memset(tb, 0, sizeof *tb);
    tb->c = config_from(in);
    uint8_t b = fuzz_u8(in);
    tb->max_keys = 1 + b % NKEYS;
    tb->lru = (b >> 3) & 1;
    unsigned flags = tb->lru ? SLUICE_TABLE_EVICT_LRU : 0;
    tb->t = sluice_table_new_flags(tb->c.spec, tb->max_keys, flags, err, sizeof err);
    if (!tb->t && tb->c.p.capacity) {
        tb->c.p.capacity = 0;
        config_write(&tb->c);
        tb->t = sluice_table_new_flags(tb->c.spec, tb->max_keys, flags, err, sizeof err);
    }
    FUZZ_CHECK(tb->t != NULL, "table \"%s\" refused: %s", tb->c.spec, err);
    /* keys: lengths from the input; key k is byte k, then 'a' + k */
    for (int k = 0; k < NKEYS; k++) {
        uint8_t l = fuzz_u8(in);
        size_t len = l < 200 ? l % 40 : l < 250 ? 17 + l : l == 250 ? SLUICE_MAX_KEY_BYTES : LONGKEY;
        tb->key[k] = malloc(len ? len : 1);
        FUZZ_CHECK(tb->key[k] != NULL, "out of memory");
        memset(tb->key[k], 'a' + k, len);
        if (len) tb->key[k][0] = (unsigned char)k; /* keys differ unless empty */
        tb->keylen[k] = len;
        subject_init(&tb->ks[k], &tb->c);
    }
    /* keys differ in their first byte; empty keys are one key */
    for (int k = 0; k < NKEYS; k++) {
        tb->alias[k] = k;
        for (int j = 0; j < k; j++)
            if (tb->keylen[k] == 0 && tb->keylen[j] == 0 && tb->alias[k] == k) tb->alias[k] = j;
    }
}

static void table_free(table *tb)
{
    sluice_table_free(tb->t);
    for (int k = 0; k < NKEYS; k++) {
        free(tb->key[k]);
        ref_model_free(tb->ks[k].m);
    }
}

/* Is key k, as far as the harness knows, holding state at time t (not at
 * rest)?  -1: unknown (out of sync). */
static int key_busy(const table *tb, int k, uint64_t t)
{
    const subject *s = &tb->ks[k];
    if (!s->synced) return t >= s->rest ? 0 : -1;
    /* a fresh model from a time later than t on (a peek past the rest
     * bound, which moves no time of the table): the key at t is unknown */
    if (s->floor > t) return -1;
    return s->m && !ref_model_at_rest(s->m, t);
}

/* A key's time, as table_req gives it: a key that may have been dropped at
 * rest gets no time earlier than the table's latest. */
static uint64_t key_time(table *tb, int k, uint64_t t)
{
    if (key_busy(tb, k, tb->now) != 1 && t < tb->now) t = tb->now;
    return t;
}

static void table_req(table *tb, fuzz_in *in)
{
    int k = tb->alias[fuzz_u8(in) % NKEYS];
    subject *s = &tb->ks[k];
    uint64_t t = pick_time(in, s);
    /* a key at rest may have been dropped with its latest time, after
     * which an earlier time starts afresh (table.c): keep such keys'
     * times at or after the table's latest */
    t = subject_time(s, key_time(tb, k, t));
    uint64_t p = pick_permits(in, s);
    sluice_result r;
    memset(&r, 0x5a, sizeof r);
    bool ok = sluice_table_try_acquire_at(tb->t, tb->keylen[k] ? tb->key[k] : NULL, tb->keylen[k],
                                          p, t, &r);
    int err = r.error;
    trace("table key #%d (%zu bytes) max_keys=%zu lru=%d error=%d ", k, tb->keylen[k], tb->max_keys,
          tb->lru, err);
    trace_result("table_try_acquire_at", tb->c.spec, p, t, ok, &r);
    uint64_t tc = min64(t, TMAX);
    tb->now = max64(tb->now, tc);
    stats_add(&tb->st, p, ok);
    stats_add(&s->st, p, ok);
    check_invariants(s, K_TABLE, ok, &r, p, err);
    FUZZ_CHECK(err == 0 || err == SLUICE_EFULL, "%s: table error %d", tb->c.spec, err);
    if (err == SLUICE_EFULL) {
        FUZZ_CHECK(!ok, "full and allowed");
        FUZZ_CHECK(key_busy(tb, k, tb->now) != 1, "%s: a held key (#%d) refused as new",
                   tb->c.spec, k);
        size_t busy = 0;
        bool unknown = false;
        for (int j = 0; j < NKEYS; j++) {
            if (j == k) continue;
            int b = key_busy(tb, j, tb->now);
            busy += b == 1;
            unknown |= b < 0;
        }
        FUZZ_CHECK(unknown || busy >= tb->max_keys,
                   "%s: table of max_keys %zu refused key #%d as full with %zu keys not at rest",
                   tb->c.spec, tb->max_keys, k, busy);
        return; /* nothing decided */
    }
    if (s->synced) follow(s, t, p, &r);
    note(s, t, p, ok, &r);

    sluice_table_stats ts;
    sluice_table_stats_get(tb->t, &ts);
    FUZZ_CHECK(ts.keys <= tb->max_keys, "%llu keys held, max_keys %zu",
               (unsigned long long)ts.keys, tb->max_keys);
    if (ts.evicted != tb->evicted) {
        FUZZ_CHECK(tb->lru && ts.evicted == tb->evicted + 1, "evicted %llu -> %llu (lru %d)",
                   (unsigned long long)tb->evicted, (unsigned long long)ts.evicted, tb->lru);
        tb->evicted = ts.evicted;
        /* some other key lost its state; we cannot tell which */
        for (int j = 0; j < NKEYS; j++)
            if (j != k && key_busy(tb, j, tb->now) != 0) unsync(&tb->ks[j]);
    }
}

/* sluice_table_remove or _reset: the key starts afresh. */
static void table_drop(table *tb, fuzz_in *in)
{
    int k = tb->alias[fuzz_u8(in) % NKEYS];
    subject *s = &tb->ks[k];
    bool reset = fuzz_u8(in) & 1;
    const void *key = tb->keylen[k] ? tb->key[k] : NULL;
    int busy = key_busy(tb, k, tb->now);
    int rc = reset ? sluice_table_reset(tb->t, key, tb->keylen[k])
                   : sluice_table_remove(tb->t, key, tb->keylen[k]);
    trace("table %s key #%d -> %d\n", reset ? "reset" : "remove", k, rc);
    if (reset) FUZZ_CHECK(rc == 0, "%s: reset of key #%d: %d", tb->c.spec, k, rc);
    else if (busy == 1) FUZZ_CHECK(rc == 0, "%s: remove of held key #%d: %d", tb->c.spec, k, rc);
    else if (!s->m && s->synced) FUZZ_CHECK(rc == SLUICE_ENOENT, "%s: remove of key #%d never made: %d",
                                            tb->c.spec, k, rc);
    else FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT, "%s: remove of key #%d: %d", tb->c.spec, k, rc);
    /* a fresh limiter from now on */
    ref_model_free(s->m);
    s->m = NULL;
    s->synced = true;
    s->max_adm = 0;
    s->remaining = tb->c.max_grant;
}

/* sluice_table_peek_at: what a request would get, changing nothing. */
static void table_peek(table *tb, fuzz_in *in)
{
    int k = tb->alias[fuzz_u8(in) % NKEYS];
    subject *s = &tb->ks[k];
    uint64_t t = subject_time(s, key_time(tb, k, pick_time(in, s)));
    uint64_t p = pick_permits(in, s);
    const void *key = tb->keylen[k] ? tb->key[k] : NULL;
    int busy = key_busy(tb, k, tb->now);
    sluice_result r;
    sluice_key_state ks;
    memset(&r, 0x5a, sizeof r);
    memset(&ks, 0x5a, sizeof ks);
    int rc = sluice_table_peek_at(tb->t, key, tb->keylen[k], p, t, &r, &ks);
    trace("table peek key #%d -> %d last=%llu rest=%llu ", k, rc, (unsigned long long)ks.last_ns,
          (unsigned long long)ks.rest_ns);
    trace_result("table_peek_at", tb->c.spec, p, t, r.allowed, &r);
    FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT, "%s: peek returned %d", tb->c.spec, rc);
    FUZZ_CHECK(rc == 0 || (ks.last_ns == 0 && ks.rest_ns == 0), "%s: peek of a key not held: state set",
               tb->c.spec);
    if (busy == 1) FUZZ_CHECK(rc == 0, "%s: peek of held key #%d: %d", tb->c.spec, k, rc);
    check_invariants(s, K_TRY, r.allowed, &r, p, 0);
    if (!s->synced) return;
    /* the model's answer; a refusal or a probe is a pure read of it, an
     * admission is asked of a fresh copy when the key has no history */
    if (!s->m) s->m = model_new(s->c);
    uint64_t tc = min64(t, TMAX);
    bool would = ref_model_would_allow(s->m, p, tc);
    FUZZ_CHECK(r.allowed == would, "%s: peek of key #%d p=%llu t=%llu: allowed %d, the model %d",
               tb->c.spec, k, (unsigned long long)p, (unsigned long long)t, r.allowed, would);
    if (!would || p == 0) {
        ref_result e;
        ref_model_decide(s->m, p, tc, &e);
        check_same(s, &e, &r, p, t);
    } else if (ref_model_latest(s->m) <= tc && ref_model_at_rest(s->m, tc)) {
        /* at rest: a fresh limiter's answer, asked of a fresh model */
        ref_model *m = model_new(s->c);
        ref_result e;
        ref_model_decide(m, p, tc, &e);
        ref_model_free(m);
        FUZZ_CHECK(e.allowed == r.allowed && e.wait_ns == r.wait_ns && e.remaining == r.remaining &&
                       e.retry_after_ns == r.retry_after_ns,
                   "%s: peek of fresh key #%d differs from a fresh model", tb->c.spec, k);
    }
    if (rc == 0 && busy == 1) {
        /* its state: the latest admission, and the first instant at rest */
        FUZZ_CHECK(ks.last_ns == ref_model_latest(s->m), "%s: key #%d last_ns %llu, model %llu",
                   tb->c.spec, k, (unsigned long long)ks.last_ns,
                   (unsigned long long)ref_model_latest(s->m));
        FUZZ_CHECK(ks.rest_ns >= ks.last_ns && ref_model_at_rest(s->m, ks.rest_ns) &&
                       (ks.rest_ns == ks.last_ns || !ref_model_at_rest(s->m, ks.rest_ns - 1)),
                   "%s: key #%d rest_ns %llu is not the model's first instant at rest", tb->c.spec, k,
                   (unsigned long long)ks.rest_ns);
    }
}

/* Reservations on table keys (sluice_table_reserve_at, _cancel_at,
 * _settle_at): a reservation is a request (counted), taking its key out of
 * sync when it takes permits (a booking, then a settle or cancel the model
 * does not follow; tests/table/test_table_settle.c follows them), with the
 * key's bound of rest moved as for an admission.  A settle or cancel
 * answers 0 or SLUICE_ENOENT (the key's entry may be gone: removed, reset,
 * evicted, reclaimed at rest), a window's cancel SLUICE_EINVAL; the second
 * answer is SLUICE_ENOENT and changes nothing (peeked before and after).
 * Those still open when the table is freed are settled after its free (the
 * reservations hold it). */
typedef struct held_trv {
    sluice_table_reservation r;
    int key; /* -1: free slot */
} held_trv;

static void table_reserve(table *tb, held_trv *trv, fuzz_in *in)
{
    held_trv *v = &trv[fuzz_u8(in) % NRV];
    /* the slot holds one: settle or cancel it first (before any time is
     * given to a key: the harness counts every time given as seen) */
    if (v->key >= 0) return;
    int k = tb->alias[fuzz_u8(in) % NKEYS];
    subject *s = &tb->ks[k];
    uint64_t t = subject_time(s, key_time(tb, k, pick_time(in, s)));
    uint64_t p = pick_permits(in, s);
    uint64_t mw = pick_max_wait(in, s);
    sluice_result r;
    memset(&r, 0x5a, sizeof r);
    bool ok = sluice_table_reserve_at(tb->t, tb->keylen[k] ? tb->key[k] : NULL, tb->keylen[k], p,
                                      t, mw, &v->r, &r);
    trace("table key #%d reserve (max_wait %llu) error=%d ", k, (unsigned long long)mw, r.error);
    trace_result("table_reserve_at", tb->c.spec, p, t, ok, &r);
    FUZZ_CHECK(r.error == 0 || r.error == SLUICE_EFULL, "%s: table reserve error %d", tb->c.spec,
               r.error);
    FUZZ_CHECK(ok == r.allowed, "%s: reserve returned %d, allowed %d", tb->c.spec, ok, r.allowed);
    FUZZ_CHECK(v->r.permits == (ok ? p : 0), "%s: reservation holds %llu of %llu", tb->c.spec,
               (unsigned long long)v->r.permits, (unsigned long long)p);
    FUZZ_CHECK(!ok || v->r.at_ns <= TMAX, "%s: reservation at %llu", tb->c.spec,
               (unsigned long long)v->r.at_ns);
    FUZZ_CHECK(ok || !v->r.table, "%s: a refused reservation holds its table", tb->c.spec);
    FUZZ_CHECK(!ok || v->r.wait_ns <= mw || p == 0, "%s: reservation waits %llu past %llu",
               tb->c.spec, (unsigned long long)v->r.wait_ns, (unsigned long long)mw);
    stats_add(&tb->st, p, ok);
    stats_add(&s->st, p, ok);
    uint64_t tc = min64(t, TMAX);
    tb->now = max64(tb->now, tc);
    if (ok && p) {
        unsync(s);
        track_admission(s, tc, p);
        s->max_adm = max64(s->max_adm, tc);
        s->remaining = tb->c.max_grant;
    }
    if (ok) v->key = k;
    sluice_table_stats ts;
    sluice_table_stats_get(tb->t, &ts);
    if (ts.evicted != tb->evicted) { /* some key lost its state */
        tb->evicted = ts.evicted;
        for (int j = 0; j < NKEYS; j++)
            if (j != k && key_busy(tb, j, tb->now) != 0) unsync(&tb->ks[j]);
    }
}

static bool peek_same(table *tb, int k, uint64_t t, const sluice_result *before)
{
    sluice_result r;
    sluice_table_peek_at(tb->t, tb->keylen[k] ? tb->key[k] : NULL, tb->keylen[k], 1, t, &r, NULL);
    return before == NULL || same_result(before, &r);
}

static void table_close(table *tb, held_trv *trv, fuzz_in *in)
{
    held_trv *v = &trv[fuzz_u8(in) % NRV];
    if (v->key < 0) return;
    const int k = v->key;
    subject *s = &tb->ks[k];
    const uint64_t p = v->r.permits;
    uint64_t t = subject_time(s, key_time(tb, k, pick_time(in, s)));
    uint8_t b = fuzz_u8(in);
    int rc;
    if (b & 1) { /* a cancel */
        rc = sluice_table_reservation_cancel_at(&v->r, t);
        /* the call took its key's shard at t, which steps the table's
         * clock there (keys at rest by t may be reclaimed), whatever it
         * answered: t is the table's latest, as for a decision */
        tb->now = max64(tb->now, min64(t, TMAX));
        trace("table cancel key #%d reservation of %llu at %llu, t=%llu -> %d\n", k,
              (unsigned long long)p, (unsigned long long)v->r.at_ns, (unsigned long long)t, rc);
        if (!tb->c.bucket) {
            FUZZ_CHECK(rc == SLUICE_EINVAL, "%s: a window's table cancel returned %d", tb->c.spec, rc);
            return; /* still open */
        }
        FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT, "%s: table cancel returned %d", tb->c.spec, rc);
        if (p == 0) {
            FUZZ_CHECK(rc == SLUICE_ENOENT, "%s: a probe's cancel returned %d", tb->c.spec, rc);
            return; /* open to a settle */
        }
        if (rc == 0) {
            FUZZ_CHECK(min64(t, TMAX) < v->r.at_ns, "%s: table cancel at %llu, due %llu", tb->c.spec,
                       (unsigned long long)t, (unsigned long long)v->r.at_ns);
            unsync(s);
        }
    } else {
        uint64_t a;
        switch (fuzz_u8(in) % 5) {
        case 0: a = 0; break;
        case 1: a = p ? fuzz_u64(in) % p : 0; break;
        case 2: a = p; break;
        case 3: a = sat_add(p, 1 + fuzz_u64(in) % sat_add(tb->c.max_grant, 1)); break;
        default: a = fuzz_u64(in); break;
        }
        if (a != p) unsync(s);
        rc = sluice_table_reservation_settle_at(&v->r, a, t);
        tb->now = max64(tb->now, min64(t, TMAX)); /* as the cancel's, above */
        trace("table settle key #%d reservation of %llu at %llu, actual=%llu, t=%llu -> %d\n", k,
              (unsigned long long)p, (unsigned long long)v->r.at_ns, (unsigned long long)a,
              (unsigned long long)t, rc);
        FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT, "%s: table settle returned %d", tb->c.spec, rc);
        FUZZ_CHECK(a == p ? rc == 0 : 1, "%s: a settle at the estimate returned %d", tb->c.spec, rc);
        if (a > p && rc == 0) {
            track_admission(s, min64(t, TMAX), a - p);
            s->max_adm = max64(s->max_adm, min64(t, TMAX));
        }
    }
    s->remaining = tb->c.max_grant;
    FUZZ_CHECK(v->r.table == NULL, "%s: a closed reservation holds its table", tb->c.spec);
    /* closed: a second settle or cancel is refused and changes nothing */
    sluice_result before;
    sluice_table_peek_at(tb->t, tb->keylen[k] ? tb->key[k] : NULL, tb->keylen[k], 1, t, &before,
                         NULL);
    rc = sluice_table_reservation_settle_at(&v->r, p + 1, t);
    FUZZ_CHECK(rc == SLUICE_ENOENT, "%s: a second table settle returned %d", tb->c.spec, rc);
    rc = sluice_table_reservation_cancel_at(&v->r, t);
    FUZZ_CHECK(rc == SLUICE_ENOENT, "%s: a table cancel after closing returned %d", tb->c.spec, rc);
    FUZZ_CHECK(peek_same(tb, k, t, &before), "%s: a refused table settle changed key #%d",
               tb->c.spec, k);
    v->key = -1;
}

static void table_check_stats(table *tb)
{
    sluice_table_stats ts;
    sluice_table_stats_get(tb->t, &ts);
    stats_check(&tb->st, &ts.decisions, tb->c.spec);
}

/* ---- the program -------------------------------------------------------- */

/* A concurrency limit run by the input, against ref_conc. */
static void conc_program(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    enum { H = 8 };
    uint64_t N = 1 + fuzz_u8(&in) % 8, lease = 0;
    uint8_t h = fuzz_u8(&in);
    if (h & 1) lease = 1 + (h & 2 ? fuzz_u16(&in) : fuzz_u64(&in) % 1000000000000ULL);
    char spec[80], err[256];
    snprintf(spec, sizeof spec, lease ? "concurrency %llu lease=%lluns" : "concurrency %llu",
             (unsigned long long)N, (unsigned long long)lease);
    sluice_concurrency *c = sluice_concurrency_new(spec, err, sizeof err);
    FUZZ_CHECK(c != NULL, "\"%s\": %s", spec, err);
    ref_conc *m = ref_conc_new(N, lease);
    FUZZ_CHECK(m != NULL, "out of memory");
    sluice_permit pm[H], copy[H];
    uint64_t id[H] = {0};
    memset(pm, 0, sizeof pm);
    memset(copy, 0, sizeof copy);
    uint64_t t = h & 4 ? TMAX - fuzz_u32(&in) : fuzz_u32(&in), maxN = N;
    for (int op = 0; op < MAXOPS && in.n > 0; op++) {
        uint8_t x = fuzz_u8(&in);
        unsigned k = (x >> 3) % H;
        switch (x >> 6) { /* the time of this call */
        case 0: break;
        case 1: t += fuzz_u8(&in); break;
        case 2: t += lease ? lease - 1 + fuzz_u8(&in) % 3 : fuzz_u16(&in); break;
        default: t = fuzz_u64(&in); break; /* back, far ahead, past 2^63-1 */
        }
        if (t > TMAX && (x & 1)) t = TMAX;
        switch (x % 4) {
        case 0:
        case 1: {
            if (pm[k].permits) break;
            uint64_t p = fuzz_u8(&in) % (N + 2), rid;
            sluice_result r;
            ref_result e;
            bool got = sluice_acquire_permit_at(c, p, t, &pm[k], &r);
            bool want = ref_conc_acquire(m, p, t, &e, &rid);
            trace("conc acquire %llu at %llu: %d rem %llu retry %lld\n", (unsigned long long)p,
                  (unsigned long long)t, got, (unsigned long long)r.remaining, (long long)r.retry_after_ns);
            FUZZ_CHECK(got == want && got == r.allowed && r.remaining == e.remaining &&
                           r.retry_after_ns == e.retry_after_ns,
                       "%s: acquire %llu at %llu: %d rem %llu retry %lld; model %d rem %llu retry %lld", spec,
                       (unsigned long long)p, (unsigned long long)t, got, (unsigned long long)r.remaining,
                       (long long)r.retry_after_ns, want, (unsigned long long)e.remaining,
                       (long long)e.retry_after_ns);
            FUZZ_CHECK(pm[k].permits == (got ? p : 0), "handle holds %llu", (unsigned long long)pm[k].permits);
            id[k] = rid;
            copy[k] = pm[k];
            break;
        }
        case 2: {
            bool stale = lease && (x & 4);
            sluice_permit *hp = stale ? &copy[k] : &pm[k];
            bool held = hp->permits != 0;
            int rc = sluice_permit_release_at(hp, t);
            bool want = held && ref_conc_release(m, id[k], t);
            trace("conc release %u%s at %llu: %d\n", k, stale ? " (copy)" : "", (unsigned long long)t, rc);
            FUZZ_CHECK(rc == (want ? 0 : SLUICE_ENOENT), "%s: release at %llu: %d, model %d", spec,
                       (unsigned long long)t, rc, want);
            FUZZ_CHECK(hp->permits == 0, "a released handle holds permits");
            if (stale) pm[k].permits = 0, id[k] = 0;
            else copy[k].permits = 0;
            break;
        }
        default: {
            if (x & 4) { /* a change in place: another N, another lease (ns) */
                N = 1 + fuzz_u8(&in) % 8;
                if (lease) lease = 1 + fuzz_u16(&in);
                maxN = N > maxN ? N : maxN;
                snprintf(spec, sizeof spec, lease ? "concurrency %llu lease=%lluns" : "concurrency %llu",
                         (unsigned long long)N, (unsigned long long)lease);
                int rc = sluice_concurrency_reconfigure_at(c, spec, t, err, sizeof err);
                FUZZ_CHECK(rc == 0, "reconfigure to \"%s\" at %llu: %s", spec, (unsigned long long)t, err);
                ref_conc_reconfigure(m, N, lease, t);
                trace("conc reconfigure %s at %llu\n", spec, (unsigned long long)t);
            }
            uint64_t a = sluice_concurrency_held_at(c, t), b = ref_conc_held(m, t);
            FUZZ_CHECK(a == b && a <= maxN, "%s: held at %llu: %llu, model %llu", spec, (unsigned long long)t,
                       (unsigned long long)a, (unsigned long long)b);
            break;
        }
        }
    }
    ref_conc_free(m);
    sluice_concurrency_free(c);
}

/* A table of concurrency limits run by the input, a model per key. */
static void conc_table_program(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    enum { K = 4, MAXK = 2, H = 3 };
    uint64_t N = 1 + fuzz_u8(&in) % 4;
    char spec[40], err[256];
    snprintf(spec, sizeof spec, "concurrency %llu", (unsigned long long)N);
    sluice_concurrency_table *t = sluice_concurrency_table_new(spec, MAXK, err, sizeof err);
    FUZZ_CHECK(t != NULL, "\"%s\": %s", spec, err);
    ref_conc *m[K];
    sluice_permit pm[K][H], copy[K][H];
    uint64_t id[K][H];
    memset(pm, 0, sizeof pm);
    memset(copy, 0, sizeof copy);
    memset(id, 0, sizeof id);
    for (int k = 0; k < K; k++) {
        m[k] = ref_conc_new(N, 0);
        FUZZ_CHECK(m[k] != NULL, "out of memory");
    }
    for (int op = 0; op < MAXOPS && in.n > 0; op++) {
        uint8_t x = fuzz_u8(&in);
        unsigned k = (x >> 2) % K, h = (x >> 4) % H;
        char key[2] = {(char)('a' + k), 0};
        if ((x & 3) != 3 && pm[k][h].permits == 0) {
            uint64_t p = fuzz_u8(&in) % (N + 2), rid = 0;
            unsigned holding = 0;
            for (int j = 0; j < K; j++) holding += ref_conc_held(m[j], 0) > 0;
            bool full = p > 0 && ref_conc_held(m[k], 0) == 0 && holding == MAXK;
            sluice_result r;
            ref_result e = {0};
            bool got = sluice_concurrency_table_acquire_at(t, key, 1, p, 0, &pm[k][h], &r);
            bool want = !full && ref_conc_acquire(m[k], p, 0, &e, &rid);
            FUZZ_CHECK(full ? !got && r.error == SLUICE_EFULL
                            : got == want && r.error == 0 && r.remaining == e.remaining &&
                                  r.retry_after_ns == e.retry_after_ns,
                       "table %s: key %u acquire %llu: %d err %d rem %llu; full %d model %d rem %llu", spec,
                       k, (unsigned long long)p, got, r.error, (unsigned long long)r.remaining, full, want,
                       (unsigned long long)e.remaining);
            id[k][h] = rid;
            copy[k][h] = pm[k][h];
        } else if (pm[k][h].permits) {
            int rc = sluice_permit_release_at(&pm[k][h], 0);
            bool want = ref_conc_release(m[k], id[k][h], 0);
            FUZZ_CHECK(rc == 0 && want, "table %s: release key %u: %d, model %d", spec, k, rc, want);
            FUZZ_CHECK(sluice_permit_release_at(&pm[k][h], 0) == SLUICE_ENOENT, "released twice");
        } else if (copy[k][h].permits && ref_conc_held(m[k], 0) == 0) {
            /* a stale copy where the key holds nothing (or was dropped
             * for another: a new epoch): never below zero, never another
             * key's */
            int rc = sluice_permit_release_at(&copy[k][h], 0);
            FUZZ_CHECK(rc == SLUICE_ENOENT, "table %s: stale release key %u: %d", spec, k, rc);
        }
        FUZZ_CHECK(sluice_concurrency_table_keys(t) <= MAXK, "more than %d keys", MAXK);
    }
    for (int k = 0; k < K; k++) ref_conc_free(m[k]);
    sluice_concurrency_table_free(t);
}

/* Acquires that wait, on a table of concurrency limits (3 keys, room for
 * 2, no lease): queued requests called back from a wheel the input
 * advances, non-blocking acquires, releases and cancels (with the right
 * key and with another's), then either every request drained or the table
 * freed with requests pending.  Checked: each request is called back at
 * most once, never after a cancel that returned 0 nor after the table's
 * free; a cancel of a request not yet called back returns 0 (one thread,
 * not in a callback), one naming another key SLUICE_ENOENT; a grant holds
 * its permits, and a key's grants come in the order its requests were
 * made (ids rise); a timeout comes at or after its deadline; at most N
 * permits per key are held (an independent count of the handles); and
 * "full" exactly when the key is at rest (no handle held, no request
 * pending) and two other keys are not. */
enum { QK = 3, QMAXK = 2, QR = 12, QH = 2 };
typedef struct qreq {
    struct qstate *st;
    int key; /* -1: free */
    uint64_t id, permits, deadline;
    bool called, cancelled, holding;
    sluice_permit pm; /* a grant's handle, while holding */
} qreq;
typedef struct qstate {
    qreq r[QR];
    sluice_permit nb[QK][QH]; /* non-blocking handles */
    uint64_t N, held[QK], last_granted[QK], calls_after_free;
    bool freed;
} qstate;

static void q_fn(void *arg, uint64_t id, int status, sluice_permit *pm, uint64_t now)
{
    qreq *r = arg;
    qstate *st = r->st;
    FUZZ_CHECK(!st->freed, "a request called back after its table was freed");
    FUZZ_CHECK(r->key >= 0 && id == r->id && !r->called && !r->cancelled,
               "request %llu called back twice, after a cancel, or with id %llu",
               (unsigned long long)r->id, (unsigned long long)id);
    r->called = true;
    if (status == 0) {
        FUZZ_CHECK(pm && pm->permits == r->permits, "granted with %llu permits of %llu",
                   pm ? (unsigned long long)pm->permits : 0ULL, (unsigned long long)r->permits);
        FUZZ_CHECK(id > st->last_granted[r->key], "key %d: request %llu granted after %llu",
                   r->key, (unsigned long long)id, (unsigned long long)st->last_granted[r->key]);
        st->last_granted[r->key] = id;
        st->held[r->key] += r->permits;
        FUZZ_CHECK(st->held[r->key] <= st->N, "key %d: %llu held, N %llu", r->key,
                   (unsigned long long)st->held[r->key], (unsigned long long)st->N);
        r->pm = *pm;
        r->holding = true;
    } else {
        FUZZ_CHECK(status == SLUICE_ETIMEDOUT && pm == NULL && now >= r->deadline,
                   "request %llu: status %d at %llu, deadline %llu", (unsigned long long)id, status,
                   (unsigned long long)now, (unsigned long long)r->deadline);
    }
}

/* Not at rest: a handle held, or a request neither called back nor
 * cancelled. */
static bool q_busy(const qstate *st, int k)
{
    if (st->held[k]) return true;
    for (int i = 0; i < QR; i++)
        if (st->r[i].key == k && !st->r[i].called && !st->r[i].cancelled) return true;
    return false;
}

static bool q_full(const qstate *st, int k)
{
    int others = 0;
    for (int j = 0; j < QK; j++) others += j != k && q_busy(st, j);
    return !q_busy(st, k) && others == QMAXK;
}

static void conc_table_wait_program(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    static qstate st; /* big: not on the stack */
    memset(&st, 0, sizeof st);
    st.N = 1 + fuzz_u8(&in) % 3;
    for (int i = 0; i < QR; i++) st.r[i] = (qreq){.st = &st, .key = -1};
    char spec[40], err[256];
    snprintf(spec, sizeof spec, "concurrency %llu", (unsigned long long)st.N);
    sluice_concurrency_table *t = sluice_concurrency_table_new(spec, QMAXK, err, sizeof err);
    FUZZ_CHECK(t != NULL, "\"%s\": %s", spec, err);
    sluice_wheel *w = sluice_wheel_new(1000, 64, 0, err, sizeof err);
    FUZZ_CHECK(w != NULL, "wheel: %s", err);
    uint64_t now = 0;
    for (int op = 0; op < MAXOPS && in.n > 0; op++) {
        uint8_t x = fuzz_u8(&in);
        int k = (x >> 3) % QK;
        char key[2] = {(char)('a' + k), 0};
        switch (x & 7) {
        case 0:
        case 1: { /* queue a request */
            uint64_t p = fuzz_u8(&in) % (st.N + 2), b = fuzz_u8(&in);
            qreq *r = NULL;
            for (int i = 0; i < QR && !r; i++)
                if (st.r[i].key < 0 || ((st.r[i].called || st.r[i].cancelled) && !st.r[i].holding))
                    r = &st.r[i];
            if (!r) break;
            uint64_t dl = b == 255 ? (uint64_t)INT64_MAX : now + b * 1000, id = 0;
            bool full = p > 0 && p <= st.N && q_full(&st, k);
            int rc = sluice_concurrency_table_acquire_async_at(t, w, key, 1, p, now, dl, q_fn, r, &id);
            int want = p == 0 ? SLUICE_EINVAL : p > st.N ? SLUICE_ERANGE : full ? SLUICE_EFULL : 0;
            FUZZ_CHECK(rc == want, "key %d queue %llu: %d, want %d", k, (unsigned long long)p, rc, want);
            if (rc == 0) {
                FUZZ_CHECK(id >= 1, "id 0");
                *r = (qreq){.st = &st, .key = k, .id = id, .permits = p, .deadline = dl};
            }
            break;
        }
        case 2: { /* a non-blocking acquire */
            int h = (x >> 6) & 1;
            if (st.nb[k][h].permits) break;
            uint64_t p = 1 + fuzz_u8(&in) % st.N;
            bool full = q_full(&st, k);
            sluice_result res;
            bool got = sluice_concurrency_table_acquire_at(t, key, 1, p, now, &st.nb[k][h], &res);
            FUZZ_CHECK(full ? !got && res.error == SLUICE_EFULL : res.error == 0,
                       "key %d acquire: %d error %d, full %d", k, got, res.error, full);
            if (got) {
                st.held[k] += p;
                FUZZ_CHECK(st.held[k] <= st.N, "key %d: %llu held", k, (unsigned long long)st.held[k]);
            }
            break;
        }
        case 3: { /* release a handle */
            int h = (x >> 6) & 1;
            if (st.nb[k][h].permits) {
                uint64_t p = st.nb[k][h].permits;
                FUZZ_CHECK(sluice_permit_release_at(&st.nb[k][h], now) == 0, "release failed");
                st.held[k] -= p;
            } else {
                for (int i = 0; i < QR; i++)
                    if (st.r[i].key == k && st.r[i].holding) {
                        FUZZ_CHECK(sluice_permit_release_at(&st.r[i].pm, now) == 0, "release failed");
                        st.held[k] -= st.r[i].permits;
                        st.r[i].holding = false;
                        break;
                    }
            }
            break;
        }
        case 4: { /* cancel */
            qreq *r = &st.r[fuzz_u8(&in) % QR];
            if (r->key < 0) break;
            char rk[2] = {(char)('a' + r->key), 0};
            if (x >> 7) { /* named with another key: nothing */
                rk[0] = (char)('a' + (r->key + 1) % QK);
                int rc = sluice_concurrency_table_async_cancel_at(t, rk, 1, r->id, now);
                FUZZ_CHECK(rc == SLUICE_ENOENT, "cancel with another key: %d", rc);
                break;
            }
            int rc = sluice_concurrency_table_async_cancel_at(t, rk, 1, r->id, now);
            bool live = !r->called && !r->cancelled;
            FUZZ_CHECK(rc == (live ? 0 : SLUICE_ENOENT), "cancel of request %llu (live %d): %d",
                       (unsigned long long)r->id, live, rc);
            if (rc == 0) r->cancelled = true;
            break;
        }
        default: /* the wheel moves */
            now += (uint64_t)fuzz_u8(&in) * 1000 * (x & 1 ? 1000 : 1);
            sluice_wheel_advance(w, now);
            break;
        }
        FUZZ_CHECK(sluice_concurrency_table_keys(t) <= QMAXK, "more than %d keys", QMAXK);
        for (int j = 0; j < QK; j++) {
            char kj[2] = {(char)('a' + j), 0};
            FUZZ_CHECK(sluice_concurrency_table_held_at(t, kj, 1, now) >= st.held[j],
                       "key %d: the table holds less than its handles", j);
        }
    }
    if (size & 1) { /* freed with requests pending: none ever called back */
        sluice_concurrency_table_free(t);
        st.freed = true;
        sluice_wheel_advance(w, now + (uint64_t)INT64_MAX / 2);
        FUZZ_CHECK(sluice_wheel_pending(w) == 0, "timers left on the wheel");
        sluice_wheel_free(w);
        return;
    }
    /* drain: release every handle and advance, until no request waits; each
     * round lets at least each key's head through (its permits <= N) */
    for (int round = 0; round < QR + 2; round++) {
        for (int k = 0; k < QK; k++)
            for (int h = 0; h < QH; h++)
                if (st.nb[k][h].permits) {
                    st.held[k] -= st.nb[k][h].permits;
                    FUZZ_CHECK(sluice_permit_release_at(&st.nb[k][h], now) == 0, "release failed");
                }
        for (int i = 0; i < QR; i++)
            if (st.r[i].holding) {
                FUZZ_CHECK(sluice_permit_release_at(&st.r[i].pm, now) == 0, "release failed");
                st.held[st.r[i].key] -= st.r[i].permits;
                st.r[i].holding = false;
            }
        sluice_wheel_advance(w, now += 1000);
    }
    for (int i = 0; i < QR; i++)
        FUZZ_CHECK(st.r[i].key < 0 || st.r[i].called || st.r[i].cancelled,
                   "request %llu never called back", (unsigned long long)st.r[i].id);
    for (int i = 0; i < QR; i++)
        if (st.r[i].holding) FUZZ_CHECK(sluice_permit_release_at(&st.r[i].pm, now) == 0, "release");
    for (int k = 0; k < QK; k++) {
        char kk[2] = {(char)('a' + k), 0};
        FUZZ_CHECK(sluice_concurrency_table_waiting(t, kk, 1) == 0, "key %d: waiters left", k);
    }
    sluice_concurrency_table_free(t);
    sluice_wheel_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    lim ls[2];
    lim_make(&ls[0], &in);
    lim_make(&ls[1], &in);
    table tb;
    table_make(&tb, &in);
    held_rv rvs[NRV];
    for (int i = 0; i < NRV; i++) rvs[i].owner = -1;
    held_trv trv[NRV];
    for (int i = 0; i < NRV; i++) trv[i].key = -1;

    for (int op = 0; op < MAXOPS && in.n > 0; op++) {
        uint8_t c = fuzz_u8(&in);
        int i = (c >> 7) & 1;
        switch (c % 8) {
        case 0: case 1: lim_try(&ls[i], &in); break;
        case 2: lim_reserve(ls, i, rvs, &in); break;
        case 3:
            if (c >> 3 & 1) lim_settle(ls, rvs, &in);
            else lim_cancel(ls, rvs, &in);
            break;
        case 4: table_req(&tb, &in); break;
        case 5:
            switch (c >> 3 & 3) {
            case 0: table_drop(&tb, &in); break;
            case 1: table_peek(&tb, &in); break;
            case 2: table_req(&tb, &in); break;
            default:
                if (c >> 5 & 1) table_close(&tb, trv, &in);
                else table_reserve(&tb, trv, &in);
                break;
            }
            break;
        case 6: lim_probe(&ls[i]); break;
        default:
            lim_check_stats(&ls[i]);
            table_check_stats(&tb);
            break;
        }
    }
    for (int i = 0; i < 2; i++) {
        lim_check_stats(&ls[i]);
        sluice_limiter_free(ls[i].lim);
        ref_model_free(ls[i].s.m);
    }
    table_check_stats(&tb);
    table_free(&tb);
    /* the reservations still open hold the table: the last one frees it */
    for (int i = 0; i < NRV; i++) {
        if (trv[i].key < 0) continue;
        int rc = sluice_table_reservation_settle_at(&trv[i].r, trv[i].r.permits, 0);
        FUZZ_CHECK(rc == 0, "settle after the table's free returned %d", rc);
        FUZZ_CHECK(trv[i].r.table == NULL, "a settled reservation holds its table");
    }
    conc_program(data, size);
    conc_table_program(data, size);
    conc_table_wait_program(data, size);
    return 0;
}
