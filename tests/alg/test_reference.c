/* test_reference.c -- randomized differential tests: the library against the
 * reference model (ref_model.c), decision by decision, every field of
 * sluice_result compared.
 *
 * Each limiter under test is built from a spec string by the library and,
 * independently, from hand-written parameters by the model; both are driven
 * with the same generated trace:
 *   - bursts at one instant, evenly spread requests, idle gaps from 1 ns to
 *     years, timestamps earlier than the previous one;
 *   - requests exactly on a window / slot edge, one ns before and after it,
 *     and exactly when an admitted request leaves the sliding window;
 *   - weighted requests (0 .. 2*LIMIT, exactly `remaining` and one more,
 *     UINT64_MAX, 2^63) and probes (permits = 0);
 *   - after a refusal, the same request again at t + retry_after - 1 (must
 *     fail) and at t + retry_after (must pass);
 *   - times near 2^63-1 and exactly 2^63-1.
 * The PRNG is splitmix64 with fixed seeds, so every run is the same.
 *
 * Also: the model against the contract's golden traces and against itself
 * in a slow literal mode; per-key tables against one model per key; and the
 * long-run admitted rate of the buckets against rate * elapsed, exactly.
 *
 * A mismatch prints the spec, seed, step, time, permits, the expected and
 * the actual decision, and the requests just before it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_model.h"
#include "sluice.h"
#include "testutil.h"

__extension__ typedef unsigned __int128 u128;

#define US UINT64_C(1000)
#define MS UINT64_C(1000000)
#define SEC UINT64_C(1000000000)
#define MINUTE (60 * SEC)
#define HOUR (3600 * SEC)
#define DAY (86400 * SEC)
#define TMAX ((uint64_t)INT64_MAX) /* 2^63-1, the last time that must work */

/* ---- a small deterministic PRNG (splitmix64) ----------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) { return tu_splitmix64(&r->s); }

/* uniform in [0, n); 0 when n is 0 */
static uint64_t rng_below(rng *r, uint64_t n)
{
    return (uint64_t)(((u128)rng_next(r) * n) >> 64);
}

/* uniform in [0, n] */
static uint64_t rng_upto(rng *r, uint64_t n)
{
    return n == UINT64_MAX ? rng_next(r) : rng_below(r, n + 1);
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return h;
}

static uint64_t sat_add(uint64_t a, uint64_t b, uint64_t cap)
{
    return a > cap || b > cap - a ? cap : a + b;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static void u128_str(u128 v, char *buf, size_t len)
{
    char tmp[48];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v != 0 && n < sizeof tmp);
    size_t i = 0;
    for (; i < n && i + 1 < len; i++)
        buf[i] = tmp[n - 1 - i];
    buf[i] = '\0';
}

/* ---- the cases ---------------------------------------------------------- */

typedef struct rate {
    const char *text;
    uint64_t limit;
    uint64_t period_ns;
} rate;

static const rate RATES[] = {
    {"10/s", 10, SEC},
    {"3/s", 3, SEC},
    {"7/10s", 7, 10 * SEC},
    {"100/s", 100, SEC},
    {"700000000/s", 700000000, SEC},
    {"1000000000/s", 1000000000, SEC},
    {"1/d", 1, DAY},
    {"5/250ms", 5, 250 * MS},
    {"1000000000000/1000s", UINT64_C(1000000000000), 1000 * SEC},
    {"1000000000000/d", UINT64_C(1000000000000), DAY},
    {"36500/36500d", 36500, 36500 * DAY},
    {"1000000000000/36500d", UINT64_C(1000000000000), 36500 * DAY},
};
#define NRATES (sizeof RATES / sizeof RATES[0])

typedef struct tcase {
    char spec[160];
    ref_params p;
} tcase;

/* A case: the spec string the library parses and the parameters the model
 * gets, written side by side. */
static tcase mk_case(ref_alg alg, const rate *r, uint64_t capacity,
                     uint64_t slots, bool nodelay)
{
    tcase c;
    memset(&c, 0, sizeof c);
    c.p.alg = alg;
    c.p.limit = r->limit;
    c.p.period_ns = r->period_ns;
    c.p.capacity = capacity;
    c.p.slots = slots;
    c.p.nodelay = nodelay;
    int n = snprintf(c.spec, sizeof c.spec, "%s %s", ref_alg_name(alg), r->text);
    if (alg == REF_TOKEN_BUCKET && capacity)
        n += snprintf(c.spec + n, sizeof c.spec - (size_t)n, " burst=%" PRIu64, capacity);
    if (alg == REF_LEAKY_BUCKET && capacity)
        n += snprintf(c.spec + n, sizeof c.spec - (size_t)n, " capacity=%" PRIu64, capacity);
    if (alg == REF_SLIDING_WHEEL && slots && slots != UINT64_MAX)
        n += snprintf(c.spec + n, sizeof c.spec - (size_t)n, " slots=%" PRIu64, slots);
    if (nodelay)
        snprintf(c.spec + n, sizeof c.spec - (size_t)n, " nodelay");
    return c;
}

/* The library's default slots for "sliding-wheel RATE", found without
 * reading its sources: the N whose explicit "slots=N" has the same
 * canonical form as the spec without slots.  0 when none is found. */
static uint64_t default_slots(const rate *r)
{
    char spec[160], canon_def[160], canon[160], err[256];
    snprintf(spec, sizeof spec, "sliding-wheel %s", r->text);
    if (sluice_spec_check(spec, canon_def, sizeof canon_def, err, sizeof err) != 0)
        return 0;
    /* candidates: N up to 10^6, and N = W / tick for ticks up to 10^6 ns */
    for (uint64_t k = 1; k <= 1000000 && k <= r->period_ns; k++) {
        if (r->period_ns % k != 0)
            continue;
        uint64_t cand[2] = {k, r->period_ns / k};
        for (int j = 0; j < 2; j++) {
            snprintf(spec, sizeof spec, "sliding-wheel %s slots=%" PRIu64, r->text, cand[j]);
            if (sluice_spec_check(spec, canon, sizeof canon, err, sizeof err) == 0 &&
                strcmp(canon, canon_def) == 0)
                return cand[j];
        }
    }
    return 0;
}

/* ---- one subject: the library, or the model in literal mode ------------- */

typedef struct subject {
    sluice_limiter *lim;    /* the library, or */
    ref_model *lit;         /* a literal model (self-tests) */
    sluice_limiter *shadow; /* the library again, asked with res = NULL */
} subject;

static bool subject_new(subject *s, const tcase *c, bool literal)
{
    char err[256] = "";
    memset(s, 0, sizeof *s);
    if (literal) {
        ref_params p = c->p;
        p.literal = true;
        s->lit = ref_model_new(&p);
        return s->lit != NULL;
    }
    s->lim = sluice_limiter_new(c->spec, err, sizeof err);
    if (s->lim == NULL) {
        fprintf(stderr, "REFUSED spec \"%s\": %s\n", c->spec, err);
        return false;
    }
    s->shadow = sluice_limiter_new(c->spec, err, sizeof err);
    assert_non_null(s->shadow);
    return true;
}

static void subject_free(subject *s)
{
    sluice_limiter_free(s->lim);
    sluice_limiter_free(s->shadow);
    ref_model_free(s->lit);
    memset(s, 0, sizeof *s);
}

/* One decision; returns a description of an inconsistency of the library
 * with itself (return value vs res->allowed, res vs res = NULL), or NULL. */
static const char *subject_decide(subject *s, uint64_t p, uint64_t t, sluice_result *res)
{
    if (s->lim) {
        /* poison the result so that an unset field shows */
        memset(res, 0x5a, sizeof *res);
        bool ok = sluice_try_acquire_at(s->lim, p, t, res);
        bool ok_null = sluice_try_acquire_at(s->shadow, p, t, NULL);
        if (ok != res->allowed)
            return "return value differs from res->allowed";
        if (ok != ok_null)
            return "a twin limiter asked with res = NULL decided differently";
        return NULL;
    }
    ref_result r;
    ref_model_decide(s->lit, p, t, &r);
    res->allowed = r.allowed;
    res->wait_ns = r.wait_ns;
    res->remaining = r.remaining;
    res->retry_after_ns = r.retry_after_ns;
    return NULL;
}

/* ---- the differential driver -------------------------------------------- */

#define HIST 8

typedef struct driver {
    const char *spec;
    const char *what; /* "library" or "literal model" or a key */
    uint64_t seed;
    size_t step;
    uint64_t hist_t[HIST], hist_p[HIST];
    size_t nhist;
} driver;

static uint64_t g_decisions;
static unsigned g_reports;

static void print_history(const driver *d)
{
    size_t n = d->nhist < HIST ? d->nhist : HIST;
    fprintf(stderr, "  previous requests (oldest first):");
    for (size_t i = n; i > 0; i--) {
        size_t k = (d->nhist - i) % HIST;
        fprintf(stderr, " (%" PRIu64 ",%" PRIu64 ")", d->hist_t[k], d->hist_p[k]);
    }
    fprintf(stderr, "\n");
}

static void report(const driver *d, uint64_t t, uint64_t eff, uint64_t p,
                   const ref_result *e, const sluice_result *g, const char *why)
{
    if (++g_reports > 40)
        return;
    fprintf(stderr,
            "MISMATCH spec=\"%s\" (%s) seed=%" PRIu64 " step=%zu time=%" PRIu64
            " (effective %" PRIu64 ") permits=%" PRIu64 "%s%s\n"
            "  expected allowed=%d wait_ns=%" PRIu64 " remaining=%" PRIu64
            " retry_after_ns=%" PRId64 "\n"
            "  got      allowed=%d wait_ns=%" PRIu64 " remaining=%" PRIu64
            " retry_after_ns=%" PRId64 "\n",
            d->spec, d->what, d->seed, d->step, t, eff, p, why ? ": " : "",
            why ? why : "", e->allowed, e->wait_ns, e->remaining,
            e->retry_after_ns, g->allowed, g->wait_ns, g->remaining,
            g->retry_after_ns);
    print_history(d);
}

static bool same(const ref_result *e, const sluice_result *g)
{
    return e->allowed == g->allowed && e->wait_ns == g->wait_ns &&
           e->remaining == g->remaining && e->retry_after_ns == g->retry_after_ns;
}

/* One request to both; true when they agree. */
static bool both(driver *d, subject *s, ref_model *m, uint64_t t, uint64_t p,
                 ref_result *e, sluice_result *g)
{
    const char *why = subject_decide(s, p, t, g);
    ref_model_decide(m, p, t, e);
    g_decisions++;
    bool ok = same(e, g) && why == NULL;
    if (!ok)
        report(d, t, ref_model_latest(m), p, e, g, why);
    d->hist_t[d->nhist % HIST] = t;
    d->hist_p[d->nhist % HIST] = p;
    d->nhist++;
    d->step++;
    return ok;
}

static uint64_t pick_permits(rng *r, uint64_t max_grant, uint64_t remaining)
{
    uint64_t u = rng_below(r, 1000);
    if (u < 60) return 0;
    if (u < 480) return 1;
    if (u < 580) return remaining;
    if (u < 660) return sat_add(remaining, 1, UINT64_MAX);
    if (u < 760) return 1 + rng_below(r, min_u64(max_grant, 16));
    if (u < 850) return rng_upto(r, sat_add(max_grant, max_grant, UINT64_MAX));
    if (u < 880) return max_grant;
    if (u < 900) return sat_add(max_grant, 1, UINT64_MAX);
    if (u < 915) return UINT64_MAX;
    if (u < 925) return UINT64_C(1) << 63;
    return 1 + rng_below(r, max_grant);
}

enum start_kind { START_ZERO, START_RANDOM, START_NEAR_MAX };

static uint64_t start_time(rng *r, int start, uint64_t w)
{
    switch (start) {
    case START_ZERO: return 0;
    case START_RANDOM: return rng_below(r, UINT64_C(1) << 62);
    default: return TMAX - rng_upto(r, min_u64(TMAX, sat_add(3 * w, 5 * SEC, TMAX)));
    }
}

/* Drive `steps` requests of a generated trace into the subject and a fresh
 * model; returns the number of mismatches (the trace stops at the first). */
static unsigned run_trace(const tcase *c, uint64_t seed, size_t steps, int start,
                          bool literal)
{
    rng r = {seed ^ hash_str(c->spec) ^ (uint64_t)start};
    subject s;
    if (!subject_new(&s, c, literal))
        return 1;
    ref_model *m = ref_model_new(&c->p);
    assert_non_null(m);
    static const char *const start_names[] = {"start 0", "random start", "start near 2^63-1"};
    char what[64];
    snprintf(what, sizeof what, "%s, %s", literal ? "literal model" : "library", start_names[start]);
    driver d = {c->spec, what, seed, 0, {0}, {0}, 0};

    const uint64_t w = c->p.period_ns, l = c->p.limit;
    const bool bucket = c->p.alg == REF_TOKEN_BUCKET || c->p.alg == REF_LEAKY_BUCKET;
    const uint64_t spacing = max_u64(1, w / l); /* the mean gap at the rate */
    const uint64_t tick = c->p.alg == REF_SLIDING_WHEEL ? w / c->p.slots : w;
    const uint64_t grid = bucket ? spacing : tick;
    const uint64_t mg = ref_model_max_grant(m);

    uint64_t t = start_time(&r, start, w);
    uint64_t recent[16] = {0};
    size_t nrecent = 0, at_max = 0;
    uint64_t remaining = mg;
    unsigned bad = 0;

    while (d.step < steps && !bad) {
        if (start == START_NEAR_MAX && d.step == steps * 3 / 4)
            t = TMAX; /* jump to exactly 2^63-1 */
        uint64_t u = rng_below(&r, 1000), dt = 0, req = t;
        if (u < 300) {
            dt = 0; /* burst at one instant */
        } else if (u < 600) {
            dt = rng_upto(&r, 2 * spacing); /* spread evenly */
        } else if (u < 680) {
            dt = rng_upto(&r, w);
        } else if (u < 780) {
            /* on a window / slot edge, or one ns either side */
            uint64_t g = rng_below(&r, 2) ? grid : w;
            uint64_t e = sat_add(t / g * g, g, TMAX);
            uint64_t off = rng_below(&r, 3);
            uint64_t target = off == 0 ? e - 1 : off == 1 ? e : sat_add(e, 1, TMAX);
            dt = target > t ? target - t : 0;
        } else if (u < 830 && nrecent > 0) {
            /* when an admitted request leaves the window (its slot, for the
             * wheel), or one ns either side */
            uint64_t a = recent[rng_below(&r, min_u64(nrecent, 16))];
            uint64_t e = c->p.alg == REF_SLIDING_WHEEL
                             ? sat_add((a / tick) * tick, w, TMAX)
                             : sat_add(a, w, TMAX);
            uint64_t off = rng_below(&r, 3);
            uint64_t target = off == 0 ? e - 1 : off == 1 ? e : sat_add(e, 1, TMAX);
            dt = target > t ? target - t : 0;
        } else if (u < 860) {
            /* an idle gap, 1 ns .. about 13 days */
            dt = 1 + rng_below(&r, UINT64_C(1) << rng_below(&r, 51));
        } else if (u < 863) {
            /* an idle gap of months to decades */
            dt = 1 + rng_below(&r, UINT64_C(1) << (51 + rng_below(&r, 10)));
        } else if (u < 910) {
            /* earlier than the previous request */
            uint64_t back = 1 + rng_below(&r, sat_add(w, w, UINT64_MAX));
            req = t > back ? t - back : 0;
        } else {
            dt = rng_upto(&r, spacing);
        }
        if (req == t) {
            t = sat_add(t, dt, TMAX);
            req = t;
        }
        uint64_t p = pick_permits(&r, mg, remaining);
        ref_result e;
        sluice_result g;
        if (!both(&d, &s, m, req, p, &e, &g)) {
            bad++;
            break;
        }
        remaining = e.remaining;
        if (e.allowed && p > 0)
            recent[nrecent++ % 16] = ref_model_latest(m);

        /* retry_after honoured exactly: the same request one ns early must
         * fail, on time must pass (no other traffic in between) */
        if (!e.allowed && e.retry_after_ns > 0 && rng_below(&r, 1000) < 400) {
            /* the refusal's effective time: its own, clamped to the latest
             * admission (a refusal does not move the clock) */
            uint64_t te = req > ref_model_latest(m) ? req : ref_model_latest(m);
            uint64_t ra = (uint64_t)e.retry_after_ns;
            if (ra <= TMAX - te) {
                if (!both(&d, &s, m, te + ra - 1, p, &e, &g)) {
                    bad++;
                    break;
                }
                if (g.allowed) {
                    report(&d, te + ra - 1, te + ra - 1, p, &e, &g,
                           "allowed one ns before retry_after");
                    bad++;
                    break;
                }
                if (!both(&d, &s, m, te + ra, p, &e, &g)) {
                    bad++;
                    break;
                }
                if (!g.allowed) {
                    report(&d, te + ra, te + ra, p, &e, &g,
                           "refused at exactly retry_after");
                    bad++;
                    break;
                }
                remaining = e.remaining;
                recent[nrecent++ % 16] = te + ra;
                t = te + ra;
            }
        }

        /* stuck at 2^63-1 for a while: start over with fresh objects */
        at_max = t == TMAX ? at_max + 1 : 0;
        if (at_max > 300 && start != START_NEAR_MAX) {
            subject_free(&s);
            ref_model_free(m);
            if (!subject_new(&s, c, literal))
                return bad + 1;
            m = ref_model_new(&c->p);
            t = start_time(&r, START_RANDOM, w);
            nrecent = 0;
            remaining = mg;
            at_max = 0;
        }
    }
    subject_free(&s);
    ref_model_free(m);
    return bad;
}

/* Every case with each seed and each start. */
static unsigned run_cases(const tcase *cases, size_t n, size_t steps,
                          unsigned nseeds, bool literal)
{
    static const uint64_t seeds[] = {
        UINT64_C(0x5eed0001), UINT64_C(0x00c0ffee), UINT64_C(0xdeadbeef12345678),
        UINT64_C(42), UINT64_C(0x9e3779b97f4a7c15)};
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++)
        for (unsigned k = 0; k < nseeds && k < 5; k++) {
            int start = (int)((i + k) % 3);
            bad += run_trace(&cases[i], seeds[k], steps, start, literal);
            /* and one more near 2^63-1 for every case */
            if (k == 0 && start != START_NEAR_MAX)
                bad += run_trace(&cases[i], seeds[k] + 1, steps / 4 + 1,
                                 START_NEAR_MAX, literal);
        }
    return bad;
}

#define STEPS 12000
#define SEEDS 4

static void add(tcase *cases, size_t *n, size_t cap, tcase c)
{
    assert_true(*n < cap);
    cases[(*n)++] = c;
}

static void test_window(ref_alg alg)
{
    tcase cases[NRATES];
    size_t n = 0;
    for (size_t i = 0; i < NRATES; i++)
        add(cases, &n, NRATES, mk_case(alg, &RATES[i], 0, 0, false));
    unsigned bad = run_cases(cases, n, STEPS, SEEDS, false);
    assert_int_equal(bad, 0);
}

static void test_fixed_window(void **state)
{
    (void)state;
    test_window(REF_FIXED_WINDOW);
}

static void test_sliding_log(void **state)
{
    (void)state;
    test_window(REF_SLIDING_LOG);
}

static void test_sliding_approx(void **state)
{
    (void)state;
    test_window(REF_SLIDING_APPROX);
}

static void test_sliding_wheel(void **state)
{
    (void)state;
    static const uint64_t slots[] = {1, 10, 1000, 1000000};
    tcase cases[NRATES * 5];
    size_t n = 0;
    for (size_t i = 0; i < NRATES; i++) {
        for (size_t k = 0; k < sizeof slots / sizeof slots[0]; k++)
            add(cases, &n, NRATES * 5, mk_case(REF_SLIDING_WHEEL, &RATES[i], 0, slots[k], false));
        uint64_t def = default_slots(&RATES[i]);
        if (def == 0) {
            fprintf(stderr, "NOTE: could not find the default slots of sliding-wheel %s;"
                            " default not tested for it\n", RATES[i].text);
            continue;
        }
        tcase c = mk_case(REF_SLIDING_WHEEL, &RATES[i], 0, UINT64_MAX, false);
        c.p.slots = def; /* spec without slots=, model with the default */
        add(cases, &n, NRATES * 5, c);
    }
    /* the wheel has more cases: fewer steps each */
    unsigned bad = run_cases(cases, n, STEPS / 2, SEEDS, false);
    assert_int_equal(bad, 0);
}

/* Can a bucket of this capacity be filled within SLUICE_MAX_PERIOD_NS (the
 * header's bound; beyond it a spec may be refused)? */
static bool fill_fits(const rate *r, uint64_t capacity)
{
    return (u128)capacity * r->period_ns <= (u128)SLUICE_MAX_PERIOD_NS * r->limit;
}

/* burst / capacity variations: default, 1, 7, 3*L, and a large one */
static size_t bucket_cases(ref_alg alg, bool nodelay, tcase *cases, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < NRATES; i++) {
        const rate *r = &RATES[i];
        /* as large as the fill time allows: about 30 years, odd */
        u128 big = (u128)(30 * 365 * DAY) * r->limit / r->period_ns;
        if (big > 1000 * r->limit)
            big = 1000 * r->limit + 1;
        const uint64_t caps[] = {0, 1, 7, 3 * r->limit, (uint64_t)big | 1};
        for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++)
            if (fill_fits(r, caps[k] ? caps[k] : r->limit))
                add(cases, &n, cap, mk_case(alg, r, caps[k], 0, nodelay));
    }
    return n;
}

static void test_token_bucket(void **state)
{
    (void)state;
    tcase cases[NRATES * 5];
    size_t n = bucket_cases(REF_TOKEN_BUCKET, false, cases, NRATES * 5);
    unsigned bad = run_cases(cases, n, STEPS / 2, SEEDS, false);
    assert_int_equal(bad, 0);
}

static void test_leaky_bucket(void **state)
{
    (void)state;
    tcase cases[NRATES * 10];
    size_t n = bucket_cases(REF_LEAKY_BUCKET, false, cases, NRATES * 10);
    n += bucket_cases(REF_LEAKY_BUCKET, true, cases + n, NRATES * 10 - n);
    unsigned bad = run_cases(cases, n, STEPS / 3, SEEDS, false);
    assert_int_equal(bad, 0);
}

/* Random rates across the whole supported range (1/d .. 10^9/s), with the
 * period written in a random unit, and random options. */
static tcase random_case(rng *r, ref_alg alg)
{
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {{"d", DAY}, {"h", HOUR}, {"min", MINUTE}, {"m", MINUTE},
                 {"s", SEC}, {"ms", MS}, {"us", US}, {"ns", 1}};
    for (;;) {
        /* W log-uniform in 1 ns .. 100 d; L in range for W */
        uint64_t w = 1 + rng_below(r, UINT64_C(1) << rng_below(r, 53));
        if (rng_below(r, 3) == 0)
            w = (1 + rng_below(r, 1000)) * units[rng_below(r, 8)].ns;
        if (rng_below(r, 10) == 0)
            w = (1 + rng_below(r, 36500)) * DAY; /* up to 100 years */
        if (w > SLUICE_MAX_PERIOD_NS)
            continue;
        uint64_t lmin = (w + DAY - 1) / DAY; /* L/W >= 1/d */
        uint64_t lmax = min_u64(w, UINT64_C(1000000000000)); /* L/W <= 1/ns */
        if (lmin > lmax)
            continue;
        uint64_t l = lmin + rng_below(r, UINT64_C(1) << rng_below(r, 41));
        if (l > lmax)
            l = lmin + rng_upto(r, min_u64(lmax - lmin, 1000));
        /* the largest unit that divides W */
        size_t ui = 0;
        while (w % units[ui].ns != 0 || (rng_below(r, 4) == 0 && units[ui].ns > 1))
            ui++;
        char rt[64];
        uint64_t nunits = w / units[ui].ns;
        if (nunits == 1 && rng_below(r, 2))
            snprintf(rt, sizeof rt, "%" PRIu64 "/%s", l, units[ui].name);
        else
            snprintf(rt, sizeof rt, "%" PRIu64 "/%" PRIu64 "%s", l, nunits, units[ui].name);
        rate ra = {rt, l, w};
        uint64_t capacity = 0, slots = 0;
        bool nodelay = false;
        if (alg == REF_TOKEN_BUCKET || alg == REF_LEAKY_BUCKET) {
            /* fill time capacity * W / L <= 1000 d */
            u128 most = (u128)(1000 * DAY) * l / w;
            if (rng_below(r, 3) && most >= 1)
                capacity = 1 + (uint64_t)((u128)rng_next(r) % (most < 100000 * (u128)l ? most : 100000 * (u128)l));
            nodelay = alg == REF_LEAKY_BUCKET && rng_below(r, 2);
        }
        if (alg == REF_SLIDING_WHEEL) {
            /* a random divisor of W up to 10^6 */
            uint64_t divs[64];
            size_t nd = 0;
            for (uint64_t k = 1; k <= min_u64(w, 1000000) && nd < 64; k++)
                if (w % k == 0 && (nd < 8 || rng_below(r, 4) == 0))
                    divs[nd++] = k;
            slots = divs[rng_below(r, nd)];
        }
        return mk_case(alg, &ra, capacity, slots, nodelay);
    }
}

static void test_random_specs(void **state)
{
    (void)state;
    rng r = {UINT64_C(0x51c3)};
    unsigned bad = 0;
    for (int i = 0; i < 96; i++) {
        ref_alg alg = (ref_alg)(i % 6);
        tcase c = random_case(&r, alg);
        bad += run_trace(&c, rng_next(&r), 3000, i % 3, false);
    }
    assert_int_equal(bad, 0);
}

/* ---- the model against itself and against the golden traces ------------ */

static void test_model_literal(void **state)
{
    (void)state;
    tcase cases[16];
    size_t n = 0;
    const rate *r10 = &RATES[0], *r7 = &RATES[2], *r5 = &RATES[7];
    add(cases, &n, 16, mk_case(REF_FIXED_WINDOW, r10, 0, 0, false));
    add(cases, &n, 16, mk_case(REF_FIXED_WINDOW, r5, 0, 0, false));
    add(cases, &n, 16, mk_case(REF_SLIDING_LOG, r10, 0, 0, false));
    add(cases, &n, 16, mk_case(REF_SLIDING_LOG, r7, 0, 0, false));
    add(cases, &n, 16, mk_case(REF_SLIDING_WHEEL, r10, 0, 10, false));
    add(cases, &n, 16, mk_case(REF_SLIDING_WHEEL, r7, 0, 1000, false));
    add(cases, &n, 16, mk_case(REF_SLIDING_APPROX, r10, 0, 0, false));
    add(cases, &n, 16, mk_case(REF_SLIDING_APPROX, r7, 0, 0, false));
    unsigned bad = run_cases(cases, n, 1500, 1, true);
    assert_int_equal(bad, 0);
}

/* tests/golden/, beside the folder of this source file (tests/alg/). */
static void golden_path(char *buf, size_t len, const char *name)
{
    const char *f = __FILE__;
    const char *slash = strrchr(f, '/');
    int dirlen = slash ? (int)(slash - f) : 1;
    snprintf(buf, len, "%.*s/../golden/%s", dirlen, slash ? f : ".", name);
}

typedef struct golden_case {
    const char *name;
    ref_params p;
} golden_case;

#define KEYS_MAX 8

/* Check one golden trace: the model always, and the library (a limiter per
 * key, built from the trace's "# spec:" line) when `lib`. */
static unsigned golden_one(const golden_case *gc, bool lib)
{
    char path[4096], epath[4096], name[256];
    snprintf(name, sizeof name, "%s.trace", gc->name);
    golden_path(path, sizeof path, name);
    snprintf(name, sizeof name, "%s.expected", gc->name);
    golden_path(epath, sizeof epath, name);
    FILE *tf = fopen(path, "r");
    FILE *ef = fopen(epath, "r");
    if (tf == NULL || ef == NULL) {
        fprintf(stderr, "golden files for %s not found at %s\n", gc->name, path);
        if (tf) fclose(tf);
        if (ef) fclose(ef);
        return 1;
    }
    char spec[512] = "";
    char keys[KEYS_MAX][64];
    ref_model *models[KEYS_MAX];
    sluice_limiter *lims[KEYS_MAX];
    size_t nkeys = 0;
    unsigned bad = 0, rows = 0;
    char line[512], eline[512];
    /* skip the expected header */
    if (fgets(eline, sizeof eline, ef) == NULL)
        bad++;
    while (fgets(line, sizeof line, tf) != NULL) {
        if (strncmp(line, "# spec: ", 8) == 0) {
            snprintf(spec, sizeof spec, "%s", line + 8);
            spec[strcspn(spec, "\r\n")] = '\0';
            continue;
        }
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char key[64] = "";
        uint64_t t = 0, p = 1;
        char *c1 = strchr(line, ',');
        t = strtoull(line, NULL, 10);
        if (c1) {
            char *c2 = strchr(c1 + 1, ',');
            size_t kl = c2 ? (size_t)(c2 - c1 - 1) : strcspn(c1 + 1, "\r\n");
            snprintf(key, sizeof key, "%.*s", (int)kl, c1 + 1);
            if (c2)
                p = strtoull(c2 + 1, NULL, 10);
        }
        size_t k = 0;
        while (k < nkeys && strcmp(keys[k], key) != 0)
            k++;
        if (k == nkeys) {
            assert_true(nkeys < KEYS_MAX);
            snprintf(keys[k], sizeof keys[k], "%s", key);
            models[k] = ref_model_new(&gc->p);
            lims[k] = NULL;
            if (lib) {
                char err[256];
                lims[k] = sluice_limiter_new(spec, err, sizeof err);
                if (lims[k] == NULL) {
                    fprintf(stderr, "golden %s: spec \"%s\" refused: %s\n", gc->name, spec, err);
                    bad++;
                }
            }
            nkeys++;
        }
        ref_result e;
        ref_model_decide(models[k], p, t, &e);
        char want[512];
        snprintf(want, sizeof want, "%" PRIu64 ",%s,%" PRIu64 ",%d,%" PRIu64 ",%" PRIu64 ",%" PRId64,
                 t, key, p, e.allowed, e.wait_ns, e.remaining, e.retry_after_ns);
        if (fgets(eline, sizeof eline, ef) == NULL) {
            bad++;
            break;
        }
        eline[strcspn(eline, "\r\n")] = '\0';
        rows++;
        if (strcmp(want, eline) != 0) {
            fprintf(stderr, "golden %s row %u: model gives %s, expected %s\n", gc->name, rows, want, eline);
            bad++;
        }
        if (lims[k] != NULL) {
            sluice_result g;
            memset(&g, 0x5a, sizeof g);
            sluice_try_acquire_at(lims[k], p, t, &g);
            snprintf(want, sizeof want, "%" PRIu64 ",%s,%" PRIu64 ",%d,%" PRIu64 ",%" PRIu64 ",%" PRId64,
                     t, key, p, g.allowed, g.wait_ns, g.remaining, g.retry_after_ns);
            if (strcmp(want, eline) != 0) {
                fprintf(stderr, "golden %s row %u: library gives %s, expected %s\n", gc->name, rows, want, eline);
                bad++;
            }
        }
    }
    if (rows == 0)
        bad++;
    for (size_t k = 0; k < nkeys; k++) {
        ref_model_free(models[k]);
        sluice_limiter_free(lims[k]);
    }
    fclose(tf);
    fclose(ef);
    return bad;
}

static const golden_case GOLDEN[] = {
    {"fixed-window", {REF_FIXED_WINDOW, 10, SEC, 0, 0, false, false}},
    {"sliding-log", {REF_SLIDING_LOG, 10, SEC, 0, 0, false, false}},
    {"sliding-wheel", {REF_SLIDING_WHEEL, 10, SEC, 0, 10, false, false}},
    {"sliding-approx", {REF_SLIDING_APPROX, 10, SEC, 0, 0, false, false}},
    {"token-bucket", {REF_TOKEN_BUCKET, 10, SEC, 5, 0, false, false}},
    {"leaky-bucket", {REF_LEAKY_BUCKET, 10, SEC, 5, 0, false, false}},
    {"leaky-bucket-nodelay", {REF_LEAKY_BUCKET, 10, SEC, 5, 0, true, false}},
};

static void test_model_golden(void **state)
{
    (void)state;
    unsigned bad = 0;
    for (size_t i = 0; i < sizeof GOLDEN / sizeof GOLDEN[0]; i++)
        bad += golden_one(&GOLDEN[i], false);
    assert_int_equal(bad, 0);
}

static void test_library_golden(void **state)
{
    (void)state;
    unsigned bad = 0;
    for (size_t i = 0; i < sizeof GOLDEN / sizeof GOLDEN[0]; i++)
        bad += golden_one(&GOLDEN[i], true);
    assert_int_equal(bad, 0);
}

/* ---- tables: one model per key ------------------------------------------ */

#define TKEYS 300

typedef struct tkey {
    unsigned char bytes[48];
    size_t len;
    ref_model *m;
    uint64_t remaining;
} tkey;

static void make_keys(tkey *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        memset(&keys[i], 0, sizeof keys[i]);
        if (i == 0) {
            keys[i].len = 0; /* the empty key */
        } else if (i % 5 == 1) {
            /* binary, with NUL bytes */
            uint64_t v = (uint64_t)i * 0x0100000001ULL;
            memcpy(keys[i].bytes, &v, sizeof v);
            keys[i].len = sizeof v;
        } else {
            int len = snprintf((char *)keys[i].bytes, sizeof keys[i].bytes, "user-%zu-%.*s",
                               i, (int)(i % 23), "xxxxxxxxxxxxxxxxxxxxxxxxxx");
            keys[i].len = (size_t)len;
        }
    }
}

/* `rotate`: far more keys than max_keys, but never more than max_keys keys
 * not at rest at once (the model tells), so every decision must be exact. */
static unsigned table_trace(const tcase *c, uint64_t seed, size_t nkeys,
                            size_t max_keys, size_t steps, bool rotate)
{
    char err[256] = "";
    sluice_table *tab = sluice_table_new(c->spec, max_keys, err, sizeof err);
    if (tab == NULL) {
        fprintf(stderr, "REFUSED table spec \"%s\": %s\n", c->spec, err);
        return 1;
    }
    static tkey keys[TKEYS];
    assert_true(nkeys <= TKEYS);
    make_keys(keys, nkeys);
    rng r = {seed ^ hash_str(c->spec)};
    const uint64_t w = c->p.period_ns;
    const uint64_t spacing = max_u64(1, w / c->p.limit);
    uint64_t t = rng_below(&r, UINT64_C(1) << 50);
    unsigned bad = 0;
    size_t nonrest[TKEYS];
    char what[96];
    driver d = {c->spec, what, seed, 0, {0}, {0}, 0};

    for (size_t step = 0; step < steps && !bad; step++) {
        uint64_t u = rng_below(&r, 1000);
        if (u < 300)
            ;
        else if (u < 800)
            t += rng_upto(&r, 2 * spacing);
        else if (u < 980)
            t += rng_upto(&r, w / 4);
        else
            t += rng_upto(&r, 3 * w);

        size_t k = rotate ? rng_below(&r, nkeys) : (size_t)rng_below(&r, rng_below(&r, 2) ? 16 : nkeys);
        if (rotate && (keys[k].m == NULL || ref_model_at_rest(keys[k].m, t))) {
            size_t nn = 0;
            for (size_t i = 0; i < nkeys; i++)
                if (keys[i].m != NULL && i != k && !ref_model_at_rest(keys[i].m, t))
                    nonrest[nn++] = i;
            if (nn >= max_keys)
                k = nonrest[rng_below(&r, nn)];
        }
        tkey *key = &keys[k];
        if (key->m == NULL) {
            key->m = ref_model_new(&c->p);
            key->remaining = ref_model_max_grant(key->m);
        }
        uint64_t p = pick_permits(&r, ref_model_max_grant(key->m), key->remaining);
        if (p > 4 * ref_model_max_grant(key->m) && rng_below(&r, 2))
            p = 1;
        sluice_result g;
        ref_result e;
        memset(&g, 0x5a, sizeof g);
        bool ok = sluice_table_try_acquire_at(tab, key->len ? key->bytes : NULL, key->len, p, t, &g);
        ref_model_decide(key->m, p, t, &e);
        g_decisions++;
        d.step = step;
        snprintf(what, sizeof what, "table max_keys=%zu, key #%zu", max_keys, k);
        if (ok != g.allowed || !same(&e, &g)) {
            report(&d, t, ref_model_latest(key->m), p, &e, &g,
                   ok != g.allowed ? "return value differs from res->allowed" : NULL);
            if (!ok && g.retry_after_ns == -1 && e.retry_after_ns != -1)
                fprintf(stderr, "  g.error = %d (%s)\n",
                        g.error, sluice_strerror(g.error));
            bad++;
        }
        key->remaining = e.remaining;
        d.hist_t[d.nhist % HIST] = t;
        d.hist_p[d.nhist % HIST] = p;
        d.nhist++;
    }
    for (size_t i = 0; i < nkeys; i++) {
        ref_model_free(keys[i].m);
        keys[i].m = NULL;
    }
    sluice_table_free(tab);
    return bad;
}

static void table_cases(tcase *cases, size_t *n, size_t cap)
{
    const rate *r10 = &RATES[0], *r5 = &RATES[7], *r100 = &RATES[3];
    add(cases, n, cap, mk_case(REF_FIXED_WINDOW, r10, 0, 0, false));
    add(cases, n, cap, mk_case(REF_SLIDING_LOG, r10, 0, 0, false));
    add(cases, n, cap, mk_case(REF_SLIDING_WHEEL, r10, 0, 10, false));
    add(cases, n, cap, mk_case(REF_SLIDING_APPROX, r10, 0, 0, false));
    add(cases, n, cap, mk_case(REF_TOKEN_BUCKET, r10, 5, 0, false));
    add(cases, n, cap, mk_case(REF_LEAKY_BUCKET, r10, 5, 0, false));
    add(cases, n, cap, mk_case(REF_LEAKY_BUCKET, r10, 5, 0, true));
    add(cases, n, cap, mk_case(REF_FIXED_WINDOW, r5, 0, 0, false));
    add(cases, n, cap, mk_case(REF_SLIDING_LOG, r100, 0, 0, false));
    add(cases, n, cap, mk_case(REF_SLIDING_WHEEL, r5, 0, 5, false));
    add(cases, n, cap, mk_case(REF_SLIDING_APPROX, r5, 0, 0, false));
    add(cases, n, cap, mk_case(REF_TOKEN_BUCKET, r100, 0, 0, false));
    add(cases, n, cap, mk_case(REF_LEAKY_BUCKET, r5, 0, 0, false));
}

static void test_table(void **state)
{
    (void)state;
    tcase cases[16];
    size_t n = 0;
    table_cases(cases, &n, 16);
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += table_trace(&cases[i], 7 + i, TKEYS, 1024, 30000, false);
        bad += table_trace(&cases[i], 1000 + i, TKEYS, TKEYS, 30000, false);
    }
    assert_int_equal(bad, 0);
}

static void test_table_rotating(void **state)
{
    (void)state;
    tcase cases[16];
    size_t n = 0;
    table_cases(cases, &n, 16);
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += table_trace(&cases[i], 77 + i, TKEYS, 16, 30000, true);
        bad += table_trace(&cases[i], 99 + i, 64, 1, 10000, true);
    }
    assert_int_equal(bad, 0);
}

/* A table full of keys not at rest refuses a new key (sluice.h: takes
 * nothing, SLUICE_EFULL, retry_after_ns = the time until the first held key
 * comes to rest), while held keys are still decided by their own limiters;
 * a key back at rest makes room for a new one without changing any
 * decision. */
static void test_table_full(void **state)
{
    (void)state;
    char err[256];
    sluice_table *tab = sluice_table_new("token-bucket 1/d", 2, err, sizeof err);
    assert_non_null(tab);
    sluice_result res;
    assert_true(sluice_table_try_acquire_at(tab, "a", 1, 1, 0, &res));
    assert_int_equal(res.error, 0);
    assert_true(sluice_table_try_acquire_at(tab, "b", 1, 1, 10, &res));
    /* "c" finds two keys, neither at rest until one day after it was used:
     * "a" is first, at DAY */
    memset(&res, 0x5a, sizeof res);
    assert_false(sluice_table_try_acquire_at(tab, "c", 1, 1, 20, &res));
    assert_false(res.allowed);
    assert_int_equal(res.error, SLUICE_EFULL);
    assert_int_equal(res.retry_after_ns, (int64_t)(DAY - 20));
    /* a held key is still decided by its limiter */
    assert_false(sluice_table_try_acquire_at(tab, "a", 1, 1, 30, &res));
    assert_int_equal(res.error, 0);
    assert_int_equal(res.retry_after_ns, (int64_t)(DAY - 30));
    /* retry_after of the refusal honoured exactly */
    assert_false(sluice_table_try_acquire_at(tab, "c", 1, 1, DAY - 1, &res));
    assert_int_equal(res.error, SLUICE_EFULL);
    assert_int_equal(res.retry_after_ns, 1);
    /* at DAY "a" is full again: "c" takes its place */
    assert_true(sluice_table_try_acquire_at(tab, "c", 1, 1, DAY, &res));
    assert_int_equal(res.error, 0);
    assert_int_equal(res.remaining, 0);
    /* "b" was not dropped: still empty until DAY + 10 */
    assert_false(sluice_table_try_acquire_at(tab, "b", 1, 1, DAY + 9, &res));
    assert_int_equal(res.retry_after_ns, 1);
    assert_true(sluice_table_try_acquire_at(tab, "b", 1, 1, DAY + 10, &res));
    /* "a" was dropped at rest: a fresh, full limiter, as the contract says */
    assert_true(sluice_table_try_acquire_at(tab, "a", 1, 1, 2 * DAY, &res));
    sluice_table_free(tab);
}

/* ---- the long-run rate of the buckets ----------------------------------- */

/* Saturate a limiter of rate L/W and capacity B: drain it with one request
 * for B permits, then ask for `p` permits at every instant, retrying after
 * each refusal at exactly retry_after, until `nreq` requests were allowed or
 * `horizon` ns went by, and stop just after a refusal.  Then with
 * X = elapsed * L / W (exact):  admitted <= B + X, and admitted > B + X - p;
 * the contract's 1 ppm bound is asserted, exactness reported. */
static unsigned long_run(const char *spec, uint64_t l, uint64_t w, uint64_t b,
                         uint64_t p, uint64_t nreq, uint64_t horizon)
{
    char err[256];
    sluice_limiter *lim = sluice_limiter_new(spec, err, sizeof err);
    if (lim == NULL) {
        fprintf(stderr, "REFUSED spec \"%s\": %s\n", spec, err);
        return 1;
    }
    uint64_t t0 = 1000, t = t0, calls = 0;
    sluice_result res;
    if (!sluice_try_acquire_at(lim, b, t, &res)) {
        fprintf(stderr, "long run %s: the first request for the full %" PRIu64 " was refused\n", spec, b);
        sluice_limiter_free(lim);
        return 1;
    }
    u128 admitted = b;
    uint64_t allowed = 0;
    unsigned bad = 0;
    for (;;) {
        calls++;
        if (sluice_try_acquire_at(lim, p, t, &res)) {
            admitted += p;
            allowed++;
            continue;
        }
        if (allowed >= nreq || t - t0 >= horizon)
            break;
        if (res.retry_after_ns <= 0) {
            fprintf(stderr, "long run %s: refused with retry_after_ns=%" PRId64 " at %" PRIu64 "\n",
                    spec, res.retry_after_ns, t);
            bad++;
            break;
        }
        t += (uint64_t)res.retry_after_ns;
    }
    uint64_t elapsed = t - t0;
    u128 x_num = (u128)elapsed * l; /* X = x_num / w */
    u128 adm_w = (admitted - b) * w;
    u128 lo_w = (admitted - b + p) * w;
    bool exact = adm_w <= x_num && lo_w > x_num;
    bool ppm_ok = adm_w * 1000000 <= x_num * 1000001 && lo_w * 1000000 >= x_num * 999999;
    double x = (double)x_num / (double)w;
    double dev = x > 0 ? ((double)(admitted - b) - x) / x * 1e6 : 0;
    char as[48];
    u128_str(admitted, as, sizeof as);
    fprintf(stderr, "long run %-42s admitted=%s over %.6g s (expected %.3f + burst %" PRIu64
                    "), deviation %+.4f ppm, %" PRIu64 " calls%s\n",
            spec, as, (double)elapsed / 1e9, x, b, dev, calls,
            exact ? ", exact" : ppm_ok ? ", NOT exact (within 1 ppm)" : ", OUT OF BOUNDS");
    if (!ppm_ok)
        bad++;
    sluice_limiter_free(lim);
    return bad;
}

static void test_long_run_rate(void **state)
{
    (void)state;
    static const struct {
        const char *rate;
        uint64_t l, w, p, nreq, horizon;
    } runs[] = {
        {"3/s", 3, SEC, 1, 1000000, UINT64_MAX},
        {"7/10s", 7, 10 * SEC, 1, 1000000, UINT64_MAX},
        {"700000000/s", 700000000, SEC, 1, 1000000, UINT64_MAX},
        {"700000000/s", 700000000, SEC, 7001, 1000000, UINT64_MAX},
        {"1/d", 1, DAY, 1, 1000000, 100000 * DAY},
        {"1000000000000/d", UINT64_C(1000000000000), DAY, 1, 1000000, UINT64_MAX},
        {"1000000000000/d", UINT64_C(1000000000000), DAY, 999983, 1000000, UINT64_MAX},
        {"5/250ms", 5, 250 * MS, 1, 1000000, UINT64_MAX},
        {"1000000000/s", 1000000000, SEC, 3, 1000000, UINT64_MAX},
    };
    unsigned bad = 0;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char spec[128];
        snprintf(spec, sizeof spec, "token-bucket %s", runs[i].rate);
        bad += long_run(spec, runs[i].l, runs[i].w, runs[i].l, runs[i].p, runs[i].nreq, runs[i].horizon);
        snprintf(spec, sizeof spec, "leaky-bucket %s nodelay", runs[i].rate);
        bad += long_run(spec, runs[i].l, runs[i].w, runs[i].l, runs[i].p, runs[i].nreq, runs[i].horizon);
        /* a small burst, so the bound is tight */
        snprintf(spec, sizeof spec, "token-bucket %s burst=1", runs[i].rate);
        /* (only where one ns of rounding in retry_after is under 1 ppm of
         * the spacing: with burst=1 whatever arrives past a full bucket is
         * lost, and a client can only come back on a whole ns) */
        if (runs[i].p == 1 && runs[i].w / runs[i].l >= 1000000)
            bad += long_run(spec, runs[i].l, runs[i].w, 1, 1, runs[i].nreq, runs[i].horizon);
    }
    assert_int_equal(bad, 0);
}

/* Each test's run time, to keep the whole file within its budget. */
static uint64_t g_test_start;

static int timer_start(void **state)
{
    (void)state;
    g_test_start = sluice_now_ns();
    return 0;
}

static int timer_stop(void **state)
{
    (void)state;
    fprintf(stderr, "  (%.2f s)\n", (double)(sluice_now_ns() - g_test_start) / 1e9);
    return 0;
}

#define TIMED(f) cmocka_unit_test_setup_teardown(f, timer_start, timer_stop)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TIMED(test_model_golden),
        TIMED(test_model_literal),
        TIMED(test_library_golden),
        TIMED(test_fixed_window),
        TIMED(test_sliding_log),
        TIMED(test_sliding_wheel),
        TIMED(test_sliding_approx),
        TIMED(test_token_bucket),
        TIMED(test_leaky_bucket),
        TIMED(test_random_specs),
        TIMED(test_table),
        TIMED(test_table_rotating),
        TIMED(test_table_full),
        TIMED(test_long_run_rate),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fprintf(stderr, "test_reference: %" PRIu64 " decisions compared\n", g_decisions);
    return rc;
}
