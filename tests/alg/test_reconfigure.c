/* test_reconfigure.c -- changing a running limiter's spec
 * (sluice_limiter_reconfigure_at, set_limit_at, set_burst_at; docs/c-api.md,
 * "Changing a limit while it runs").
 *
 *   test_exact_cases    per algorithm, decisions worked out by hand from
 *                       the rule (the working is in the comments).
 *   test_random_traces  every algorithm variant, random specs before and
 *                       after a change at a random time: before it, every
 *                       field equals the reference model of the old spec;
 *                       after it, every admission is one the rule allows,
 *                       checked by a checker written here from the rule's
 *                       text over the whole list of admissions (windows:
 *                       allowed iff, where the admissions a log still holds
 *                       decide it; where a longer new window reaches back
 *                       to ones it forgot, never admitting what the whole
 *                       history would refuse; sliding-approx: never above
 *                       the estimate of the admissions' real times, and
 *                       exactly when PERIOD stays; buckets: an exact
 *                       rational bucket started at the change, never
 *                       admitting what it would not).
 *   test_log_chains     chains of 2..6 changes of sliding-log and
 *                       sliding-wheel specs (shorter, longer, back), random
 *                       traffic: every admission one the reference model
 *                       (every admission kept) allows, remaining never above
 *                       its; every field equal to its where the window has
 *                       passed every slot the log may have forgotten.
 *   test_shorter_log_window  a window log's window shortened: the entries
 *                       it drops count no more, also for refusals asked
 *                       without details, at an earlier time than the change.
 *   test_twins_after_changes  two limiters, one history with changes:
 *                       asked without details and with, they agree.
 *   test_bad_changes    a bad spec, another algorithm, another slot width,
 *                       NULLs, set_burst on a window: an error naming the
 *                       token, and the limiter decides exactly as a twin
 *                       that was never touched.
 *   test_knobs          set_limit_at and set_burst_at.
 *   test_out_of_memory  a change whose allocation fails: SLUICE_ENOMEM, and
 *                       the limiter decides as its twin.
 *   test_threads        4 threads deciding while another reconfigures back
 *                       and forth (run under TSan): admissions never exceed
 *                       the largest limit, and the count is kept exactly.
 *
 * Tables (sluice_table_reconfigure_at, set_limit_at, set_burst_at):
 *   test_table_random_traces  test_random_traces' property on one key of a
 *                       table among others.
 *   test_table_log_chains, test_shared_log_chains  test_log_chains on one
 *                       key of a table, and of a table in a shared region
 *                       (its state stored there between decisions).
 *   test_table_exact    300 keys, three changes (some keys touched between
 *                       them, some missing all three): every field of every
 *                       decision and peek equals the reference model
 *                       changed at the same times (ref_model_reconfigure,
 *                       written from the rule's text), and each key's rest
 *                       time is one at which the model is at rest.
 *   test_table_rest     keys that rest later under the new spec are not
 *                       reclaimed at their old rest time (wheel, full table).
 *   test_table_million  10^6 keys reconfigured: the time is printed (the
 *                       bound asserted is generous), then keys sampled.
 *   test_table_bad_changes  bad specs, NULLs, knobs of 0, a state too big
 *                       for the table's 16 bytes, no memory, overrides on a
 *                       table in a shared region: the error names the
 *                       token, and the table decides as its twin (or as
 *                       before).
 *   test_table_knobs    a key and a limiter changed alike decide alike.
 *   test_table_threads  4 threads deciding, peeking and scanning while the
 *                       spec changes back and forth (TSan): no key admits
 *                       more than the larger limit; the count is kept.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <sluice.h>

#include "ref_model.h"
#include "testutil.h"

#define SEC 1000000000ULL
#define MS 1000000ULL
#define ULL(x) ((unsigned long long)(x))
typedef unsigned __int128 u128;

static uint64_t g_seed;
static double g_scale = 1.0;

static sluice_limiter *mk(const char *spec)
{
    char err[256];
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    if (!l) fprintf(stderr, "%s: %s\n", spec, err);
    assert_non_null(l);
    return l;
}

static void reconf(sluice_limiter *l, const char *spec, uint64_t t)
{
    char err[256];
    int rc = sluice_limiter_reconfigure_at(l, spec, t, err, sizeof err);
    if (rc) fprintf(stderr, "%s: %s\n", spec, err);
    assert_int_equal(rc, 0);
}

/* decide and check (allowed, remaining, retry_after) */
static void ask(sluice_limiter *l, uint64_t p, uint64_t t, bool ok, uint64_t remaining,
                int64_t retry)
{
    sluice_result r;
    bool got = sluice_try_acquire_at(l, p, t, &r);
    if (got != ok || r.remaining != remaining || r.retry_after_ns != retry)
        fprintf(stderr, "at %llu p=%llu: want %d rem %llu retry %lld, got %d rem %llu retry %lld\n",
                ULL(t), ULL(p), ok, ULL(remaining), (long long)retry, got, ULL(r.remaining),
                (long long)r.retry_after_ns);
    assert_true(got == ok);
    assert_int_equal(r.remaining, remaining);
    assert_int_equal(r.retry_after_ns, retry);
}

static void test_exact_cases(void **state)
{
    (void)state;
    /* fixed-window 5/s: 3 admitted at 0.1 s.  At 0.2 s to 4/s: the window's
     * count 3 stays, 1 left; 2 more at 0.3 s refused until the window ends
     * (0.7 s); 1 fits.  At 0.5 s to 10/2s: the count (4) of the window of
     * 0.5 s moves to the new window [0, 2 s): 6 left, also at 1.5 s (same
     * new window); at 2 s a fresh window: 10. */
    sluice_limiter *l = mk("fixed-window 5/s");
    ask(l, 3, 100 * MS, true, 2, 0);
    reconf(l, "fixed-window 4/s", 200 * MS);
    ask(l, 0, 200 * MS, true, 1, 0);
    ask(l, 2, 300 * MS, false, 1, 700 * MS);
    ask(l, 1, 300 * MS, true, 0, 0);
    reconf(l, "fixed-window 10/2s", 500 * MS);
    ask(l, 0, 1500 * MS, true, 6, 0);
    ask(l, 7, 1500 * MS, false, 6, 500 * MS);
    ask(l, 0, 2 * SEC, true, 10, 0);
    /* lowered below the count: nothing left, the count still counts */
    ask(l, 10, 2 * SEC, true, 0, 0);
    reconf(l, "fixed-window 3/2s", 2 * SEC + 1);
    ask(l, 1, 3 * SEC, false, 0, SEC);
    /* the change's time becomes the limiter's: a later request with an
     * earlier time is decided at it (4 s is in window 2 of 2 s: fresh) */
    reconf(l, "fixed-window 3/2s", 4 * SEC);
    ask(l, 1, 3 * SEC, true, 2, 0);
    sluice_limiter_free(l);

    /* sliding-log 4/s: admitted at 0, 0.25 s, 0.5 s.  At 0.6 s to 2/s: the 3
     * in (−0.4 s, 0.6 s] exceed 2: nothing left; 1 permit needs the window
     * to hold at most 1, i.e. the admissions of 0 and 0.25 s gone: at
     * 1.25 s, 0.65 s on.  At 0.7 s to 4/2s: all 3 in the 2-s window: 1 left. */
    l = mk("sliding-log 4/s");
    ask(l, 1, 0, true, 3, 0);
    ask(l, 1, 250 * MS, true, 2, 0);
    ask(l, 1, 500 * MS, true, 1, 0);
    reconf(l, "sliding-log 2/s", 600 * MS);
    ask(l, 1, 600 * MS, false, 0, 650 * MS);
    reconf(l, "sliding-log 4/2s", 700 * MS);
    ask(l, 0, 700 * MS, true, 1, 0);
    ask(l, 2, 700 * MS, false, 1, 1300 * MS); /* the 0-s admission leaves at 2 s */
    sluice_limiter_free(l);

    /* sliding-log 2/s: 2 at 0, 2 at 1 s (the first two leave the log).  At
     * 1.5 s to 3/2s: the window (-0.5 s, 1.5 s] holds all 4 -- the log
     * stands in for the two it forgot (at most 2 per old window) -- so
     * nothing is left, and 1 permit waits for the admissions of 0 to leave
     * at 2 s. */
    l = mk("sliding-log 2/s");
    ask(l, 2, 0, true, 0, 0);
    ask(l, 2, SEC, true, 0, 0);
    reconf(l, "sliding-log 3/2s", 1500 * MS);
    ask(l, 1, 1500 * MS, false, 0, 500 * MS);
    ask(l, 0, 2 * SEC, true, 1, 0);
    sluice_limiter_free(l);

    /* A chain (the Redis module's chain test, seed 1): sliding-log 6/3s, 1
     * at each of 0, 0.1, ..., 0.5 s.  At 0.6 s to 2/1s; 2 at 1.55 s (the
     * window (0.55 s, 1.55 s] is empty; the six leave the log).  At 1.6 s
     * back to 6/3s: the window (-1.4 s, 1.6 s] holds all 8, so nothing is
     * left.  The log stands in for the six it forgot with at most 6 (the
     * largest LIMIT of the chain) per 1 s (its shortest window) at 0.55 s,
     * the latest slot they can have: 1 permit then waits until that entry
     * leaves, 3.55 s (the rule itself: 3.2 s, when three of the six have
     * left).  Counting 2 per old window, it stood in for 2 and admitted
     * 2 over. */
    l = mk("sliding-log 6/3s");
    for (int i = 0; i < 6; i++) ask(l, 1, (uint64_t)i * 100 * MS, true, 5 - (uint64_t)i, 0);
    reconf(l, "sliding-log 2/s", 600 * MS);
    ask(l, 2, 1550 * MS, true, 0, 0);
    reconf(l, "sliding-log 6/3s", 1600 * MS);
    ask(l, 1, 1600 * MS, false, 0, 1950 * MS);
    ask(l, 0, 3550 * MS - 1, true, 0, 0);
    ask(l, 1, 3550 * MS, true, 3, 0);
    sluice_limiter_free(l);

    /* sliding-wheel 10/s slots=10 (100-ms slots): 6 at 0.05 s (slot 0).
     * To 20/2s slots=20 (same slots) at 0.5 s: 14 left, and at 1.5 s the
     * admission of slot 0 still counts (window of 20 slots).  At 2 s gone. */
    l = mk("sliding-wheel 10/s slots=10");
    ask(l, 6, 50 * MS, true, 4, 0);
    reconf(l, "sliding-wheel 20/2s slots=20", 500 * MS);
    ask(l, 0, 1500 * MS, true, 14, 0);
    ask(l, 0, 2 * SEC, true, 20, 0);
    sluice_limiter_free(l);

    /* sliding-approx 10/s: 6 at 0.5 s.  Same spec at 1.2 s: exact, window 1,
     * prev 6, f = 0.2: est 4.8, 5 left.  Then 20/2s at 1.3 s: the 6 (of the
     * 1-s window 0, latest admission 0.5 s) fall in the new window 0
     * [0, 2 s): cur 6, est 6, 14 left; at 2.5 s: prev 6, f = 1/4, est 4.5,
     * 15 left. */
    l = mk("sliding-approx 10/s");
    ask(l, 6, 500 * MS, true, 4, 0);
    reconf(l, "sliding-approx 10/s", 1200 * MS);
    ask(l, 0, 1200 * MS, true, 5, 0);
    reconf(l, "sliding-approx 20/2s", 1300 * MS);
    ask(l, 0, 1300 * MS, true, 14, 0);
    ask(l, 0, 2500 * MS, true, 15, 0);
    sluice_limiter_free(l);

    /* token-bucket 10/s (burst 10): take 4 at 0: 6 tokens.  burst=3 at 0:
     * min(3, 6) = 3.  Take 3 at 0: empty.  At 0.1 s to 1/s burst=20: the
     * old rate gave 1 token by then (capped at 3: 1), then 1/s: at 1.1 s 2
     * tokens; 3 more need 1 s. */
    l = mk("token-bucket 10/s");
    ask(l, 4, 0, true, 6, 0);
    reconf(l, "token-bucket 10/s burst=3", 0);
    ask(l, 0, 0, true, 3, 0);
    ask(l, 3, 0, true, 0, 0);
    reconf(l, "token-bucket 1/s burst=20", 100 * MS);
    ask(l, 0, 100 * MS, true, 1, 0);
    ask(l, 3, 1100 * MS, false, 2, SEC);
    ask(l, 2, 1100 * MS, true, 0, 0);
    sluice_limiter_free(l);

    /* leaky-bucket 10/s capacity=5 nodelay: 5 at 0.  At 0.1 s to 1/s
     * capacity=2: water(0.1 s) = 4 is kept, above the new capacity: 1 permit
     * needs water <= 1, 3 s at 1/s.  The shaper: water 1 at 3.1 s, 1 more
     * waits 1 s. */
    l = mk("leaky-bucket 10/s capacity=5 nodelay");
    ask(l, 5, 0, true, 0, 0);
    reconf(l, "leaky-bucket 1/s capacity=2 nodelay", 100 * MS);
    ask(l, 1, 100 * MS, false, 0, 3 * SEC);
    reconf(l, "leaky-bucket 1/s capacity=2", 100 * MS);
    sluice_result r;
    assert_true(sluice_try_acquire_at(l, 1, 3100 * MS, &r));
    assert_int_equal(r.wait_ns, SEC);
    assert_int_equal(r.remaining, 0);
    sluice_limiter_free(l);

    /* lock-free to locked: token-bucket 3 per 10^18 ns packs (burst*W <
     * 2^64); burst=20 does not: the limiter moves to its locked path and
     * keeps its tokens (3 - 2 = 1, capped at 20: 1). */
    l = mk("token-bucket 3/1000000000000000000ns");
    ask(l, 2, 0, true, 1, 0);
    reconf(l, "token-bucket 3/1000000000000000000ns burst=20", 0);
    ask(l, 0, 0, true, 1, 0);
    ask(l, 1, 0, true, 0, 0);
    reconf(l, "token-bucket 3/1000000000000000000ns", 0); /* and stays exact */
    ask(l, 1, 0, false, 0, 333333333333333334LL);
    sluice_limiter_free(l);
}

/* ---- random traces against checkers written from the rule --------------- */

typedef struct adm {
    uint64_t t, p;
} adm;

typedef struct spec {
    ref_params p;
    char s[128];
} spec;

static void spec_make(spec *sp, ref_alg a, bool nodelay, uint64_t L, uint64_t W, uint64_t cap,
                      uint64_t slots)
{
    static const char *const names[] = {"fixed-window", "sliding-log", "sliding-wheel",
                                        "sliding-approx", "token-bucket", "leaky-bucket"};
    sp->p = (ref_params){.alg = a, .limit = L, .period_ns = W, .capacity = cap, .slots = slots,
                         .nodelay = nodelay};
    int n = snprintf(sp->s, sizeof sp->s, "%s %llu/%lluns", names[a], ULL(L), ULL(W));
    if (a == REF_TOKEN_BUCKET) snprintf(sp->s + n, sizeof sp->s - (size_t)n, " burst=%llu", ULL(cap));
    if (a == REF_LEAKY_BUCKET)
        snprintf(sp->s + n, sizeof sp->s - (size_t)n, " capacity=%llu%s", ULL(cap),
                 nodelay ? " nodelay" : "");
    if (a == REF_SLIDING_WHEEL) snprintf(sp->s + n, sizeof sp->s - (size_t)n, " slots=%llu", ULL(slots));
}

/* sum of permits admitted at times in [lo, hi] */
static uint64_t sum_in(const adm *h, size_t n, uint64_t lo, uint64_t hi)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        if (h[i].t >= lo && h[i].t <= hi) s += h[i].p;
    return s;
}

/* A bucket on exact rationals: level in units of 1/D permit. */
typedef struct rbucket {
    u128 level; /* tokens (token-bucket) or water (leaky-bucket), * D */
    uint64_t t;
} rbucket;

static void rb_move(rbucket *b, const ref_params *p, uint64_t D, uint64_t t, bool token)
{
    u128 d = (u128)(t - b->t) * p->limit * (D / p->period_ns);
    if (token) {
        u128 cap = (u128)p->capacity * D;
        b->level = b->level + d > cap ? cap : b->level + d;
    } else {
        b->level = b->level > d ? b->level - d : 0;
    }
    b->t = t;
}

/* What a trace runs on: a limiter, or one key of a table of several
 * (sluice_table_reconfigure_at changes them all). */
typedef struct tgt {
    sluice_limiter *l;
    sluice_table *t;
    uint64_t noise; /* the other keys' requests */
    void *reg;      /* a shared table's region (tgt_new_shared), or NULL */
    size_t reg_bytes;
} tgt;

static void tgt_new(tgt *g, const char *sp, bool table)
{
    *g = (tgt){.noise = 0x5eed};
    if (!table) {
        g->l = mk(sp);
        return;
    }
    char err[256];
    g->t = sluice_table_new_flags(sp, 64, SLUICE_TABLE_RECLAIM_WHEN_FULL, err, sizeof err);
    if (!g->t) fprintf(stderr, "%s: %s\n", sp, err);
    assert_non_null(g->t);
}

/* A table in a shared region (an anonymous MAP_SHARED mapping, as a
 * process would share it with its children). */
static void tgt_new_shared(tgt *g, const char *sp)
{
    *g = (tgt){.noise = 0x5eed};
    char err[256];
    g->reg_bytes = sluice_table_region_size(sp, 64, 16, err, sizeof err);
    if (!g->reg_bytes) fprintf(stderr, "%s: %s\n", sp, err);
    assert_true(g->reg_bytes > 0);
    g->reg = mmap(NULL, g->reg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(g->reg != MAP_FAILED);
    g->t = sluice_table_attach(g->reg, g->reg_bytes, sp, 64, 16, 0, err, sizeof err);
    if (!g->t) fprintf(stderr, "%s: %s\n", sp, err);
    assert_non_null(g->t);
}

static bool tgt_decide(tgt *g, uint64_t p, uint64_t t, sluice_result *r)
{
    if (g->l) return sluice_try_acquire_at(g->l, p, t, r);
    char other[8];
    snprintf(other, sizeof other, "n%u", (unsigned)tu_splitmix64_below(&g->noise, 16));
    sluice_table_try_acquire_at(g->t, other, strlen(other), tu_splitmix64_below(&g->noise, 3),
                                t, NULL);
    return sluice_table_try_acquire_at(g->t, "trace", 5, p, t, r);
}

static void tgt_reconf(tgt *g, const char *sp, uint64_t t)
{
    if (g->l) {
        reconf(g->l, sp, t);
        return;
    }
    char err[256];
    int rc = sluice_table_reconfigure_at(g->t, sp, t, err, sizeof err);
    if (rc) fprintf(stderr, "%s: %s\n", sp, err);
    assert_int_equal(rc, 0);
}

static void tgt_free(tgt *g)
{
    sluice_limiter_free(g->l);
    sluice_table_free(g->t);
    if (g->reg) munmap(g->reg, g->reg_bytes);
}

static void one_trace(uint64_t *rs, int variant, bool table)
{
    ref_alg a = variant == 6 ? REF_LEAKY_BUCKET : (ref_alg)variant;
    bool nodelay = variant == 6;
    static const uint64_t periods[] = {1000, 2000, 500, 3000};
    uint64_t W1 = periods[tu_splitmix64_below(rs, 4)], W2 = periods[tu_splitmix64_below(rs, 4)];
    if (a == REF_SLIDING_APPROX && tu_splitmix64_below(rs, 3) == 0) W2 = W1;
    uint64_t L1 = 1 + tu_splitmix64_below(rs, 8), L2 = 1 + tu_splitmix64_below(rs, 8);
    uint64_t C1 = 1 + tu_splitmix64_below(rs, 8), C2 = 1 + tu_splitmix64_below(rs, 8);
    uint64_t N1 = 0, N2 = 0;
    if (a == REF_SLIDING_WHEEL) { /* tick 100 or 250 ns, kept */
        uint64_t tick = tu_splitmix64_below(rs, 2) ? 100 : 250;
        if (W1 % tick) W1 = 1000;
        if (W2 % tick) W2 = 1000;
        N1 = W1 / tick;
        N2 = W2 / tick;
    }
    bool bucket = a == REF_TOKEN_BUCKET || a == REF_LEAKY_BUCKET;
    spec s1, s2;
    spec_make(&s1, a, nodelay, L1, W1, bucket ? C1 : 0, N1);
    spec_make(&s2, a, nodelay, L2, W2, bucket ? C2 : 0, N2);
    tgt l;
    tgt_new(&l, s1.s, table);
    ref_model *m = ref_model_new(&s1.p);
    assert_non_null(m);
    adm hist[200];
    size_t nh = 0;
    uint64_t t = tu_splitmix64_below(rs, 5000), latest = 0;
    size_t steps_before = tu_splitmix64_below(rs, 30), steps_after = 40;
    for (size_t k = 0; k < steps_before; k++) {
        t += tu_splitmix64_below(rs, W1 / 3 + 1);
        uint64_t p = tu_splitmix64_below(rs, 4);
        ref_result w;
        sluice_result g;
        bool ok = tgt_decide(&l, p, t, &g);
        assert_true(ref_model_decide(m, p, t, &w) == ok);
        assert_int_equal(g.remaining, w.remaining);
        assert_int_equal(g.retry_after_ns, w.retry_after_ns);
        assert_int_equal(g.wait_ns, w.wait_ns);
        if (ok && p) {
            hist[nh++] = (adm){t > latest ? t : latest, p};
            if (t > latest) latest = t;
        }
    }
    /* the change, at a time that may be before the latest admission */
    uint64_t tc = t + tu_splitmix64_below(rs, W1);
    if (tu_splitmix64_below(rs, 4) == 0 && latest > 10) tc = latest - tu_splitmix64_below(rs, 10);
    tgt_reconf(&l, s2.s, tc);
    const uint64_t Tc = tc > latest ? tc : latest; /* the change's time */
    /* a key a table does not hold (nothing admitted) is made when it
     * comes, fresh under the new spec: no change's time clamps it */
    const uint64_t T = table && nh == 0 ? 0 : Tc;
    /* the checkers' state at T */
    uint64_t fw_carry = 0;
    if (a == REF_FIXED_WINDOW) fw_carry = sum_in(hist, nh, T / W1 * W1, T);
    const uint64_t D = W1 * W2;
    rbucket rb = {0, 0};
    if (bucket) {
        /* replay the old bucket over the admissions (time from the first
         * request: a token bucket starts full, a leaky one empty) */
        bool token = a == REF_TOKEN_BUCKET;
        rb.level = token ? (u128)C1 * D : 0;
        rb.t = nh ? hist[0].t : T;
        for (size_t i = 0; i < nh; i++) {
            rb_move(&rb, &s1.p, D, hist[i].t, token);
            u128 pd = (u128)hist[i].p * D;
            if (token) rb.level -= pd;
            else rb.level += pd;
        }
        rb_move(&rb, &s1.p, D, T, token);
        if (token && rb.level > (u128)C2 * D) rb.level = (u128)C2 * D;
        if (table && nh == 0) rb.level = token ? (u128)C2 * D : 0; /* fresh */
    }
    size_t nh_before = nh;
    uint64_t now = Tc;
    for (size_t k = 0; k < steps_after; k++) {
        now += tu_splitmix64_below(rs, W2 / 3 + 1);
        uint64_t at = tu_splitmix64_below(rs, 6) == 0 && now > W2 ? now - tu_splitmix64_below(rs, W2) : now;
        uint64_t p = tu_splitmix64_below(rs, 4);
        sluice_result g;
        bool ok = tgt_decide(&l, p, at, &g);
        uint64_t s = at > latest ? at : latest; /* clamped: latest >= T below */
        if (s < T) s = T;
        bool want; /* the checker's answer; NULL-ish for one-sided checks */
        bool exact = true;
        switch (a) {
        case REF_SLIDING_LOG:
        case REF_SLIDING_WHEEL: {
            uint64_t tick = a == REF_SLIDING_LOG ? 1 : W2 / N2;
            uint64_t N = a == REF_SLIDING_LOG ? W2 : N2;
            uint64_t sl = s / tick;
            uint64_t lo = sl >= N ? (sl - N + 1) * tick : 0;
            const uint64_t N1w = a == REF_SLIDING_LOG ? W1 : N1;
            want = sum_in(hist, nh, lo, s) + p <= L2; /* the whole history */
            /* what the log forgot lies at or before slot(latest) - N1, and
             * so does what stands in for it (a bound): exact once the
             * window has passed that slot, else never admitting more */
            if (nh_before) {
                uint64_t last = hist[nh_before - 1].t / tick;
                exact = last < N1w || (sl >= N && sl - N >= last - N1w);
            }
            break;
        }
        case REF_FIXED_WINDOW: {
            uint64_t k2 = s / W2;
            uint64_t c = (k2 == T / W2 ? fw_carry : 0) + sum_in(hist + nh_before, nh - nh_before, k2 * W2, s);
            want = c + p <= L2;
            break;
        }
        case REF_SLIDING_APPROX: {
            /* the whole history; the counts forgot the windows before the
             * last two, and stand in for them as full when a longer window
             * reaches back: never admitting more */
            uint64_t k2 = s / W2, r = s - k2 * W2;
            uint64_t cur = sum_in(hist, nh, k2 * W2, s);
            uint64_t prev = k2 ? sum_in(hist, nh, (k2 - 1) * W2, k2 * W2 - 1) : 0;
            u128 e = (u128)prev * (W2 - r) + (u128)cur * W2;
            want = e + (u128)p * W2 <= (u128)L2 * W2;
            exact = W1 == W2;
            break;
        }
        default: {
            bool token = a == REF_TOKEN_BUCKET;
            rbucket b = rb;
            rb_move(&b, &s2.p, D, s, token);
            u128 pd = (u128)p * D;
            want = token ? b.level >= pd : b.level + pd <= (u128)C2 * D;
            exact = false; /* the level is rounded at the change, towards less */
            if (ok && p) rb = b;
            if (ok && p) {
                if (token) rb.level -= pd;
                else rb.level += pd;
            }
            break;
        }
        }
        if (p == 0) want = true;
        if (ok && !want)
            fprintf(stderr, "seed %llu: %s -> %s at %llu: admitted %llu at %llu (clamped %llu) against the rule\n",
                    ULL(g_seed), s1.s, s2.s, ULL(tc), ULL(p), ULL(at), ULL(s));
        assert_false(ok && !want);
        if (exact && ok != want)
            fprintf(stderr, "seed %llu: %s -> %s at %llu: refused %llu at %llu (clamped %llu)\n",
                    ULL(g_seed), s1.s, s2.s, ULL(tc), ULL(p), ULL(at), ULL(s));
        if (exact) assert_true(ok == want);
        if (ok && p) {
            hist[nh++] = (adm){s, p};
            latest = s;
        }
    }
    ref_model_free(m);
    tgt_free(&l);
}

static void test_random_traces(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0x7ec;
    for (size_t rep = 0; rep < tu_scaled(300, g_scale); rep++)
        for (int v = 0; v < 7; v++) one_trace(&rs, v, false);
}

/* The same property for one key of a table whose spec changes
 * (sluice_table_reconfigure_at), among other keys that decide meanwhile. */
static void test_table_random_traces(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0x7ab1e;
    for (size_t rep = 0; rep < tu_scaled(300, g_scale); rep++)
        for (int v = 0; v < 7; v++) one_trace(&rs, v, true);
}

/* ---- chains of changes of a window log ---------------------------------- */

/* Whether the trace's key is held (a table may drop a key at rest). */
static bool tgt_held(tgt *g)
{
    if (g->l) return true;
    sluice_key_state ks;
    return sluice_table_peek_at(g->t, "trace", 5, 0, 0, NULL, &ks) == 0;
}

/* One chain: 2..6 changes between sliding-log (or sliding-wheel, 100-ns
 * slots) specs of random LIMIT and PERIOD -- shorter, longer, back --
 * with random traffic between them (or none: a table's key then catches up
 * over several changes at once), on a limiter or one key of a table,
 * against the reference model changed at the same instants, which keeps
 * every admission (literal).  The log forgets admissions that left its
 * window; a change to a longer window stands in for them with a bound
 * (window_log.c, carry).  Every slot it may have forgotten is at or before
 * F = the largest slot(T_c) - N_old over the changes so far (T_c the
 * change's clamped time).  Checked: every admission is one the model
 * allows (the rule over the whole history), and `remaining` never above
 * the model's; where the window has passed F, every field equals the
 * model's.  Counts the decisions of each kind in n[0] (exact), n[1]. */
static void chain_trace(uint64_t *rs, bool wheel, int mode, uint64_t n[2])
{
    static const uint64_t periods[] = {500, 1000, 2000, 3000};
    const uint64_t tick = wheel ? 100 : 1;
    const ref_alg a = wheel ? REF_SLIDING_WHEEL : REF_SLIDING_LOG;
    spec sp;
    uint64_t W = periods[tu_splitmix64_below(rs, 4)], L0 = 1 + tu_splitmix64_below(rs, 8);
    if (mode == 2) L0 = 8, W = 3000; /* a region's rings are sized by its first spec */
    spec_make(&sp, a, false, L0, W, 0, W / tick);
    sp.p.literal = true;
    const bool table = mode > 0;
    tgt g;
    if (mode == 2) tgt_new_shared(&g, sp.s);
    else tgt_new(&g, sp.s, table);
    ref_model *m = ref_model_new(&sp.p);
    assert_non_null(m);
    char trail[512]; /* the chain so far, for a failure's message */
    int tl = snprintf(trail, sizeof trail, "%s", sp.s);
    bool forgot = false;
    uint64_t F = 0, now = tu_splitmix64_below(rs, 5000);
    const int changes = 2 + (int)tu_splitmix64_below(rs, 5);
    for (int c = 0; c <= changes; c++) {
        const uint64_t N = sp.p.period_ns / tick, L = sp.p.limit;
        /* some eras see no request: a table's key then catches up over
         * several changes at once */
        const int steps = tu_splitmix64_below(rs, 4) == 0 ? 0 : 8 + (int)tu_splitmix64_below(rs, 30);
        for (int k = 0; k < steps; k++) {
            switch (tu_splitmix64_below(rs, 4)) { /* bursts, steady, gaps */
            case 0: break;
            case 1: now += tu_splitmix64_below(rs, sp.p.period_ns / L + 1); break;
            case 2: now += tu_splitmix64_below(rs, sp.p.period_ns / 3 + 1); break;
            default: now += tu_splitmix64_below(rs, 2 * sp.p.period_ns); break;
            }
            const uint64_t at = tu_splitmix64_below(rs, 6) == 0 && now > sp.p.period_ns
                                    ? now - tu_splitmix64_below(rs, sp.p.period_ns)
                                    : now;
            const uint64_t p = tu_splitmix64_below(rs, 10) == 0 ? L + 1 : tu_splitmix64_below(rs, 4);
            if (!tgt_held(&g) && ref_model_events(m)) { /* dropped at rest: fresh */
                ref_model_free(m);
                assert_non_null(m = ref_model_new(&sp.p));
                forgot = false;
                F = 0;
            }
            const uint64_t latest = ref_model_latest(m);
            const uint64_t s = (at > latest ? at : latest) / tick; /* the clamped slot */
            const bool exact = !forgot || (s >= N && s - N >= F);
            sluice_result r;
            const bool ok = tgt_decide(&g, p, at, &r);
            ref_result w;
            bool fail;
            if (exact) {
                const bool want = ref_model_decide(m, p, at, &w);
                fail = ok != want || r.remaining != w.remaining ||
                       r.retry_after_ns != w.retry_after_ns || r.wait_ns != w.wait_ns;
                n[0]++;
            } else {
                fail = ok && p && !ref_model_would_allow(m, p, at);
                if (ok && p && !fail) assert_true(ref_model_decide(m, p, at, &w));
                else ref_model_decide(m, 0, at, &w); /* a probe: changes nothing */
                if (fail) w.allowed = false;
                fail = fail || r.remaining > w.remaining;
                n[1]++;
            }
            if (fail)
                fprintf(stderr,
                        "seed %llu: %s%s: %s %llu at %llu: got %d rem %llu retry %lld, the model "
                        "%d rem %llu retry %lld\n",
                        ULL(g_seed), mode == 2 ? "shared table " : table ? "table " : "", trail, exact ? "exact" : "bounded",
                        ULL(p), ULL(at), ok, ULL(r.remaining), (long long)r.retry_after_ns,
                        w.allowed, ULL(w.remaining), (long long)w.retry_after_ns);
            assert_false(fail);
        }
        if (c == changes) break;
        /* the change: a new LIMIT and PERIOD, at a time that may be before
         * the latest admission */
        spec nx;
        W = periods[tu_splitmix64_below(rs, 4)];
        spec_make(&nx, a, false, 1 + tu_splitmix64_below(rs, 8), W, 0, W / tick);
        nx.p.literal = true;
        uint64_t tc = now + tu_splitmix64_below(rs, sp.p.period_ns);
        if (tu_splitmix64_below(rs, 4) == 0 && now > 10) tc = now - tu_splitmix64_below(rs, 10);
        const bool held = tgt_held(&g);
        tgt_reconf(&g, nx.s, tc);
        if (held) {
            assert_true(ref_model_reconfigure(m, &nx.p, tc));
            const uint64_t sc = ref_model_latest(m) / tick;
            if (sc >= N && (!forgot || sc - N > F)) F = sc - N;
            if (sc >= N) forgot = true;
        } else { /* a key not held comes fresh, under the new spec */
            ref_model_free(m);
            assert_non_null(m = ref_model_new(&nx.p));
            forgot = false;
            F = 0;
        }
        if (tl < (int)sizeof trail - 1)
            tl += snprintf(trail + tl, sizeof trail - (size_t)tl, " -> %s at %llu", nx.s, ULL(tc));
        sp = nx;
    }
    ref_model_free(m);
    tgt_free(&g);
}

/* Chains of 2..6 changes of sliding-log and sliding-wheel specs on a
 * limiter (chain_trace).  Failed before the bound counted every LIMIT the
 * chain had (window_log.c, carry): 6/3s, 2/1s, 6/3s admitted over. */
static void test_log_chains(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0xc4a19;
    uint64_t n[2] = {0, 0};
    for (size_t rep = 0; rep < tu_scaled(400, g_scale); rep++) {
        chain_trace(&rs, false, 0, n);
        chain_trace(&rs, true, 0, n);
    }
    printf("log chains: %llu decisions exact, %llu bounded\n", ULL(n[0]), ULL(n[1]));
    assert_true(n[0] > n[1]);
    assert_true(n[1] > 0);
}

/* The same through a table (sluice_table_reconfigure_at), the key among
 * others: keys are carried lazily, over every change they missed. */
static void test_table_log_chains(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0x7c4a19;
    uint64_t n[2] = {0, 0};
    for (size_t rep = 0; rep < tu_scaled(200, g_scale); rep++) {
        chain_trace(&rs, false, 1, n);
        chain_trace(&rs, true, 1, n);
    }
    printf("table log chains: %llu decisions exact, %llu bounded\n", ULL(n[0]), ULL(n[1]));
    assert_true(n[0] > n[1]);
    assert_true(n[1] > 0);
}

/* The same through a table in a shared region: a key's state is stored in
 * the region between its decisions, the carry's history with it
 * (region_table.c), and carried over every change it missed at its next
 * decision. */
static void test_shared_log_chains(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0x5c4a19;
    uint64_t n[2] = {0, 0};
    for (size_t rep = 0; rep < tu_scaled(200, g_scale); rep++) {
        chain_trace(&rs, false, 2, n);
        chain_trace(&rs, true, 2, n);
    }
    printf("shared table log chains: %llu decisions exact, %llu bounded\n", ULL(n[0]), ULL(n[1]));
    assert_true(n[0] > n[1]);
    assert_true(n[1] > 0);
}

/* ---- a table of many keys against the reference model ------------------ */

/* The next spec of a chain of changes, chosen so that the library is exact
 * (docs/c-api.md, "Changing a limit while it runs"): the logs' windows never
 * grow (nothing they forgot comes back into a window), sliding-wheel keeps
 * its 100-ns slots, sliding-approx keeps PERIOD, the buckets' new rate is in
 * lowest terms over a PERIOD that is a multiple of the old one (the carried
 * level is a whole number of the new unit: no rounding). */
static void next_spec(uint64_t *rs, ref_alg a, bool nodelay, const spec *from, spec *to)
{
    static const uint64_t periods[] = {500, 1000, 2000, 3000};
    static const uint64_t coprime[] = {1, 3, 7, 9, 11, 13};
    uint64_t W = from ? from->p.period_ns : 1000, L = 1 + tu_splitmix64_below(rs, 8);
    uint64_t C = 1 + tu_splitmix64_below(rs, 8), N = 0;
    switch (a) {
    case REF_FIXED_WINDOW: W = periods[tu_splitmix64_below(rs, 4)]; break;
    case REF_SLIDING_LOG:
    case REF_SLIDING_WHEEL:
        do W = periods[tu_splitmix64_below(rs, 4)];
        while (from && W > from->p.period_ns);
        if (!from) W = 3000;
        if (a == REF_SLIDING_WHEEL) N = W / 100;
        break;
    case REF_SLIDING_APPROX: break;
    default:
        if (from) W *= 1 + tu_splitmix64_below(rs, 2);
        L = coprime[tu_splitmix64_below(rs, 6)];
        break;
    }
    bool bucket = a == REF_TOKEN_BUCKET || a == REF_LEAKY_BUCKET;
    spec_make(to, a, nodelay, L, W, bucket ? C : 0, N);
}

#define TKEYS 300

static void table_exact(uint64_t *rs, int variant)
{
    const ref_alg a = variant == 6 ? REF_LEAKY_BUCKET : (ref_alg)variant;
    const bool nodelay = variant == 6;
    spec sp;
    next_spec(rs, a, nodelay, NULL, &sp);
    char err[256];
    sluice_table *t = sluice_table_new_flags(sp.s, 4 * TKEYS, SLUICE_TABLE_RECLAIM_WHEN_FULL, err,
                                             sizeof err);
    assert_non_null(t);
    ref_model *m[TKEYS];
    bool held[TKEYS] = {false}; /* the table holds the key: it admitted */
    for (int k = 0; k < TKEYS; k++) assert_non_null(m[k] = ref_model_new(&sp.p));
    uint64_t now = 1000;
    for (int phase = 0; phase < 4; phase++) {
        const uint64_t W = sp.p.period_ns;
        for (int step = 0; step < 1500; step++) {
            /* keys k % 4 > phase sit out: they miss up to three changes */
            int k = (int)tu_splitmix64_below(rs, TKEYS);
            if (k % 4 > phase) continue;
            char key[16];
            snprintf(key, sizeof key, "key-%d", k);
            now += tu_splitmix64_below(rs, W / 20 + 1);
            uint64_t at = tu_splitmix64_below(rs, 6) == 0 && now > W ? now - tu_splitmix64_below(rs, W) : now;
            uint64_t p = tu_splitmix64_below(rs, 4);
            if (tu_splitmix64_below(rs, 8) == 0) { /* peek: as the model would answer */
                sluice_result r;
                sluice_key_state ks;
                int rc = sluice_table_peek_at(t, key, strlen(key), p, at, &r, &ks);
                assert_int_equal(rc, held[k] ? 0 : SLUICE_ENOENT);
                assert_true(r.allowed == ref_model_would_allow(m[k], p, at));
                if (held[k]) assert_int_equal(ks.last_ns, ref_model_latest(m[k]));
                continue;
            }
            sluice_result g;
            ref_result w;
            bool ok = sluice_table_try_acquire_at(t, key, strlen(key), p, at, &g);
            bool want = ref_model_decide(m[k], p, at, &w);
            if (ok != want || g.remaining != w.remaining || g.retry_after_ns != w.retry_after_ns ||
                g.wait_ns != w.wait_ns)
                fprintf(stderr,
                        "seed %llu: %s phase %d %s p=%llu at %llu: got %d rem %llu retry %lld wait %llu, "
                        "want %d rem %llu retry %lld wait %llu\n",
                        ULL(g_seed), sp.s, phase, key, ULL(p), ULL(at), ok, ULL(g.remaining),
                        (long long)g.retry_after_ns, ULL(g.wait_ns), want, ULL(w.remaining),
                        (long long)w.retry_after_ns, ULL(w.wait_ns));
            assert_true(ok == want);
            assert_int_equal(g.remaining, w.remaining);
            assert_int_equal(g.retry_after_ns, w.retry_after_ns);
            assert_int_equal(g.wait_ns, w.wait_ns);
            if (ok && p) held[k] = true;
        }
        if (phase == 3) break;
        /* the change: at a time that may be before some keys' latest
         * admission (those are changed at their latest admission) */
        spec nx;
        next_spec(rs, a, nodelay, &sp, &nx);
        uint64_t tc = tu_splitmix64_below(rs, 3) == 0 ? now - tu_splitmix64_below(rs, W) : now + tu_splitmix64_below(rs, W);
        int rc = sluice_table_reconfigure_at(t, nx.s, tc, err, sizeof err);
        if (rc) fprintf(stderr, "%s -> %s: %s\n", sp.s, nx.s, err);
        assert_int_equal(rc, 0);
        for (int k = 0; k < TKEYS; k++) {
            if (held[k]) { /* a held key is changed */
                assert_true(ref_model_reconfigure(m[k], &nx.p, tc));
            } else { /* a key not held is made fresh, under the new spec */
                ref_model_free(m[k]);
                assert_non_null(m[k] = ref_model_new(&nx.p));
            }
        }
        sp = nx;
    }
    /* the scan sees each held key's state under the spec that applies to
     * it: its latest time, and a rest time at which the model is at rest */
    for (int k = 0; k < TKEYS; k++) {
        char key[16];
        snprintf(key, sizeof key, "key-%d", k);
        sluice_key_state ks;
        int rc = sluice_table_peek_at(t, key, strlen(key), 0, 0, NULL, &ks);
        assert_int_equal(rc, held[k] ? 0 : SLUICE_ENOENT);
        if (!held[k]) continue;
        assert_int_equal(ks.last_ns, ref_model_latest(m[k]));
        if (!ref_model_at_rest(m[k], ks.rest_ns))
            fprintf(stderr, "seed %llu: %s %s: rest %llu, the model is not at rest then\n",
                    ULL(g_seed), sp.s, key, ULL(ks.rest_ns));
        assert_true(ref_model_at_rest(m[k], ks.rest_ns));
    }
    for (int k = 0; k < TKEYS; k++) ref_model_free(m[k]);
    sluice_table_free(t);
}

/* Every key of a table, reconfigured three times (some keys touched between
 * the changes, some missing all three), decides exactly as the reference
 * model changed at the same times (ref_model_reconfigure, from the rule's
 * text): every field of every decision, peek's answer and the key's
 * latest time, and a rest time at which the model is at rest. */
static void test_table_exact(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0x7ab1e5;
    for (size_t rep = 0; rep < tu_scaled(4, g_scale); rep++)
        for (int v = 0; v < 7; v++) table_exact(&rs, v);
}

/* Rest times depend on the spec: keys that rest later under a new spec are
 * not reclaimed at their old rest time, neither by the wheel nor when a new
 * key finds the table full; they go once at rest under the new spec. */
static void test_table_rest(void **state)
{
    (void)state;
    char err[256], key[16];
    sluice_table *t = sluice_table_new("token-bucket 10/s", 100, err, sizeof err);
    assert_non_null(t);
    for (int k = 0; k < 100; k++) { /* empty: at rest at 1 s */
        snprintf(key, sizeof key, "k%d", k);
        assert_true(sluice_table_try_acquire_at(t, key, strlen(key), 10, 0, NULL));
    }
    /* at 0.5 s: 5 tokens, refilled at 1/s, full at 5.5 s */
    assert_int_equal(sluice_table_reconfigure_at(t, "token-bucket 1/s burst=10", SEC / 2, err, sizeof err), 0);
    sluice_result r;
    for (uint64_t at = 2 * SEC; at <= 5 * SEC; at += SEC) { /* the wheel passes 1 s; full */
        assert_false(sluice_table_try_acquire_at(t, "new", 3, 1, at, &r));
        assert_int_equal(r.error, SLUICE_EFULL);
    }
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.reclaimed, 0);
    assert_int_equal(st.keys, 100);
    sluice_key_state ks;
    assert_int_equal(sluice_table_peek_at(t, "k7", 2, 0, 5 * SEC, &r, &ks), 0);
    assert_int_equal(ks.rest_ns, 5 * SEC + SEC / 2);
    assert_int_equal(r.remaining, 9); /* 5 + 4.5 */
    /* at 5.5 s they are at rest under the new spec: a new key takes a place */
    assert_true(sluice_table_try_acquire_at(t, "new", 3, 1, 5 * SEC + SEC / 2, &r));
    sluice_table_stats_get(t, &st);
    assert_true(st.reclaimed >= 1);
    sluice_table_free(t);

    /* a slower spec of windows: sliding-log 5/s -> 5/3s at 0.5 s; each key
     * admitted at 0.1 s rests at 3.1 s now, not 1.1 s */
    t = sluice_table_new("sliding-log 5/s", 10, err, sizeof err);
    assert_non_null(t);
    for (int k = 0; k < 10; k++) {
        snprintf(key, sizeof key, "k%d", k);
        assert_true(sluice_table_try_acquire_at(t, key, strlen(key), 5, SEC / 10, NULL));
    }
    assert_int_equal(sluice_table_reconfigure_at(t, "sliding-log 5/3s", SEC / 2, err, sizeof err), 0);
    assert_false(sluice_table_try_acquire_at(t, "new", 3, 1, 2 * SEC, &r));
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_false(sluice_table_try_acquire_at(t, "k3", 2, 1, 2 * SEC, &r)); /* still held: 5 in 3 s */
    assert_int_equal(r.error, 0);
    assert_int_equal(r.retry_after_ns, (int64_t)(SEC + SEC / 10));
    assert_true(sluice_table_try_acquire_at(t, "new", 3, 1, 3 * SEC + SEC / 10, &r));
    sluice_table_free(t);
}

/* 10^6 keys: the change visits none of them, so it takes about as long as
 * for one key.  The bound asserted is generous (a loaded machine); the
 * figure is printed.  Each key then decides under the new spec. */
static void test_table_million(void **state)
{
    (void)state;
    const uint32_t n = 1000000;
    char err[256];
    sluice_table *t = sluice_table_new("token-bucket 10/s", n, err, sizeof err);
    assert_non_null(t);
    for (uint32_t k = 0; k < n; k++) /* each takes 4 of 10 at 0 */
        assert_true(sluice_table_try_acquire_at(t, &k, sizeof k, 4, 0, NULL));
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = sluice_table_reconfigure_at(t, "token-bucket 1/s burst=8", 100 * MS, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    assert_int_equal(rc, 0);
    const uint64_t ns = (uint64_t)(b.tv_sec - a.tv_sec) * SEC + (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec;
    printf("reconfiguring a table of %u keys took %llu ns\n", n, ULL(ns));
    assert_true(ns < 50 * MS);
    /* at 0.1 s each key has 6 + 1 = 7 tokens (capped at 8), then 1/s */
    uint64_t rs = g_seed ^ 0x1e6;
    for (int i = 0; i < 2000; i++) {
        uint32_t k = (uint32_t)tu_splitmix64_below(&rs, n);
        sluice_result r;
        assert_true(sluice_table_try_acquire_at(t, &k, sizeof k, 0, 100 * MS, &r));
        assert_int_equal(r.remaining, 7);
        assert_false(sluice_table_try_acquire_at(t, &k, sizeof k, 8, 100 * MS, &r));
        assert_int_equal(r.retry_after_ns, (int64_t)SEC);
    }
    sluice_table_free(t);
}

/* ---- bad changes --------------------------------------------------------- */

/* l and twin must decide alike from here on (l had a refused change) */
static void expect_twins(sluice_limiter *l, sluice_limiter *twin, uint64_t t0)
{
    char a[SLUICE_SPEC_MAX], b[SLUICE_SPEC_MAX];
    assert_true(sluice_limiter_spec_format(l, a, sizeof a) > 0);
    assert_true(sluice_limiter_spec_format(twin, b, sizeof b) > 0);
    assert_string_equal(a, b);
    for (uint64_t k = 0; k < 30; k++) {
        sluice_result x, y;
        uint64_t t = t0 + k * 37 * MS;
        bool ox = sluice_try_acquire_at(l, k % 3, t, &x);
        bool oy = sluice_try_acquire_at(twin, k % 3, t, &y);
        assert_true(ox == oy);
        assert_int_equal(x.remaining, y.remaining);
        assert_int_equal(x.retry_after_ns, y.retry_after_ns);
    }
}

static void bad(const char *from, const char *to, const char *token, int code)
{
    sluice_limiter *l = mk(from), *twin = mk(from);
    assert_true(sluice_try_acquire_at(l, 2, 10 * MS, NULL));
    assert_true(sluice_try_acquire_at(twin, 2, 10 * MS, NULL));
    char err[256];
    int rc = sluice_limiter_reconfigure_at(l, to, 20 * MS, err, sizeof err);
    if (rc != code || !strstr(err, token))
        fprintf(stderr, "%s -> %s: rc %d, err \"%s\" (want %d naming %s)\n", from, to ? to : "NULL",
                rc, err, code, token);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err, token));
    expect_twins(l, twin, 5 * MS); /* also: the refused change's time was not kept */
    sluice_limiter_free(l);
    sluice_limiter_free(twin);
}

/* A change that shortens a window log's window at t leaves the entries
 * that fall out of it until the next decision; a refusal asked without
 * details (which the limiter may settle from a hint it published, a time
 * below which the full window refuses) must see the room at t already.
 * sliding-wheel 10/s, slots of 100 ms: 10 permits at 0 fill the window
 * until 1 s; at 950 ms the window becomes 5 slots (500 ms), which the
 * permits at 0 left at 500 ms: a request at an earlier time counts at 950
 * ms and passes.  The same for sliding-log over 1 s, then 500 ms. */
static void test_shorter_log_window(void **state)
{
    (void)state;
    const char *from[2] = {"sliding-wheel 10/s slots=10", "sliding-log 10/s"};
    const char *to[2] = {"sliding-wheel 10/500ms slots=5", "sliding-log 10/500ms"};
    for (int k = 0; k < 2; k++) {
        sluice_limiter *l = mk(from[k]);
        for (int i = 0; i < 10; i++) assert_true(sluice_try_acquire_at(l, 1, 0, NULL));
        assert_false(sluice_try_acquire_at(l, 1, 400 * MS, NULL));
        reconf(l, to[k], 950 * MS);
        assert_true(sluice_try_acquire_at(l, 1, 400 * MS, NULL));
        for (int i = 0; i < 9; i++) assert_true(sluice_try_acquire_at(l, 1, 950 * MS, NULL));
        assert_false(sluice_try_acquire_at(l, 1, 950 * MS, NULL));
        assert_false(sluice_try_acquire_at(l, 1, 1399 * MS, NULL));
        assert_true(sluice_try_acquire_at(l, 1, 1500 * MS, NULL));
        sluice_limiter_free(l);
    }
}

/* Twins: two limiters with one history of admissions and changes of
 * spec, one asked without details (which the limiter may settle from the
 * time a refusal lasts, which its admissions leave), the other with them:
 * their answers agree at every step, before and after the changes, at
 * times that mostly move forward, sometimes back. */
static void test_twins_after_changes(void **state)
{
    (void)state;
    static const char *const specs[][3] = {
        {"token-bucket 3/s burst=5", "token-bucket 7/2s burst=2", "token-bucket 1/s"},
        {"leaky-bucket 5/s", "leaky-bucket 2/s capacity=9", "leaky-bucket 5/s nodelay"},
        {"fixed-window 10/s", "fixed-window 3/500ms", "fixed-window 10/2s"},
        {"sliding-approx 10/s", "sliding-approx 4/s", "sliding-approx 10/3s"},
        {"sliding-wheel 10/s slots=10", "sliding-wheel 4/500ms slots=5",
         "sliding-wheel 9/2s slots=20"},
    };
    uint64_t rng = 0x5eed ^ g_seed;
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        sluice_limiter *a = mk(specs[k][0]), *b = mk(specs[k][0]);
        uint64_t t = SEC;
        int64_t retry = 0; /* the last refusal's, from the twin with details */
        for (int step = 0; step < 6000; step++) {
            if (step % 2000 == 1999) {
                reconf(a, specs[k][1 + step / 2000 % 2], t);
                reconf(b, specs[k][1 + step / 2000 % 2], t);
            }
            const uint64_t r = tu_splitmix64_below(&rng, 100);
            if (retry > 0 && r < 50) t += (uint64_t)retry - (r % 2); /* at the edge */
            else if (r >= 95 && t > 300 * MS) t -= tu_splitmix64_below(&rng, 300 * MS);
            else t += tu_splitmix64_below(&rng, 80 * MS);
            const uint64_t p = r % 7 == 0 ? 0 : 1 + tu_splitmix64_below(&rng, 3);
            sluice_result res;
            const bool ok_b = sluice_try_acquire_at(b, p, t, &res);
            const bool ok_a = sluice_try_acquire_at(a, p, t, NULL);
            retry = ok_b ? 0 : res.retry_after_ns;
            if (ok_a != ok_b)
                fprintf(stderr, "%s: step %d, %llu permits at %llu: %d without details, %d with\n",
                        specs[k][0], step, ULL(p), ULL(t), ok_a, ok_b);
            assert_true(ok_a == ok_b);
        }
        sluice_limiter_free(a);
        sluice_limiter_free(b);
    }
}

static void test_bad_changes(void **state)
{
    (void)state;
    bad("token-bucket 5/s", "token-bucket 0/s", "\"0/s\"", SLUICE_ERANGE);
    bad("token-bucket 5/s", "token-bucket 5/s burts=2", "\"burts=2\"", SLUICE_EINVAL);
    bad("token-bucket 5/s", "token-bucket 5/s junk", "\"junk\"", SLUICE_EINVAL);
    bad("token-bucket 5/s", "tokenbucket 5/s", "\"tokenbucket\"", SLUICE_EINVAL);
    bad("token-bucket 5/s", "", "empty", SLUICE_EINVAL);
    bad("token-bucket 5/s", NULL, "NULL", SLUICE_EINVAL);
    bad("token-bucket 5/s", "leaky-bucket 5/s", "\"leaky-bucket\"", SLUICE_EINVAL);
    bad("fixed-window 5/s", "sliding-log 5/s", "algorithm", SLUICE_EINVAL);
    bad("sliding-log 5/s", "sliding-wheel 5/s", "\"sliding-wheel\"", SLUICE_EINVAL);
    bad("sliding-wheel 5/s slots=10", "sliding-wheel 5/s slots=5", "slot width", SLUICE_EINVAL);
    bad("sliding-wheel 5/s", "sliding-wheel 5/1500us", "slot width", SLUICE_EINVAL);
    bad("fixed-window 5/s", "fixed-window 5/s nodelay", "\"nodelay\"", SLUICE_EINVAL);
    char err[64];
    assert_int_equal(sluice_limiter_reconfigure_at(NULL, "fixed-window 1/s", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "NULL"));
    assert_int_equal(sluice_limiter_reconfigure(NULL, "fixed-window 1/s", err, sizeof err),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_limiter_set_burst_at(NULL, 5, 0, err, sizeof err), SLUICE_EINVAL);
    assert_non_null(strstr(err, "NULL"));
    /* err may be NULL or short */
    sluice_limiter *l = mk("fixed-window 5/s");
    assert_int_equal(sluice_limiter_reconfigure_at(l, "fixed-window x/s", 0, NULL, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_limiter_reconfigure_at(l, "fixed-window x/s", 0, NULL, 8), SLUICE_EINVAL);
    strcpy(err, "kept");
    assert_int_equal(sluice_limiter_set_limit_at(l, 0, SEC, 0, err, 0), SLUICE_EINVAL);
    assert_string_equal(err, "kept"); /* errlen 0: not written */
    assert_int_equal(sluice_limiter_reconfigure_at(l, "fixed-window x/s", 0, err, 4), SLUICE_EINVAL);
    assert_int_equal(strlen(err), 3);
    /* knobs: set_burst on a window; zeros */
    assert_int_equal(sluice_limiter_set_burst_at(l, 5, 0, err, sizeof err), SLUICE_EINVAL);
    assert_non_null(strstr(err, "burst"));
    assert_int_equal(sluice_limiter_set_limit_at(l, 0, SEC, 0, err, sizeof err), SLUICE_EINVAL);
    assert_int_equal(sluice_limiter_set_limit_at(l, 5, 0, 0, err, sizeof err), SLUICE_EINVAL);
    sluice_limiter *twin = mk("fixed-window 5/s");
    expect_twins(l, twin, 0);
    sluice_limiter_free(l);
    sluice_limiter_free(twin);
}

/* A table and its twin decide alike on several keys (the table had a
 * refused change). */
static void expect_table_twins(sluice_table *t, sluice_table *twin, uint64_t t0)
{
    for (uint64_t k = 0; k < 30; k++) {
        sluice_result x, y;
        const char *key = k % 2 ? "a" : "b";
        uint64_t at = t0 + k * 37 * MS;
        bool ox = sluice_table_try_acquire_at(t, key, 1, k % 3, at, &x);
        bool oy = sluice_table_try_acquire_at(twin, key, 1, k % 3, at, &y);
        assert_true(ox == oy);
        assert_int_equal(x.remaining, y.remaining);
        assert_int_equal(x.retry_after_ns, y.retry_after_ns);
    }
}

static void tbad(const char *from, const char *to, const char *token, int code)
{
    char err[256];
    sluice_table *t = sluice_table_new(from, 16, err, sizeof err);
    sluice_table *twin = sluice_table_new(from, 16, err, sizeof err);
    assert_non_null(t);
    assert_non_null(twin);
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 2, 10 * MS, NULL));
    assert_true(sluice_table_try_acquire_at(twin, "a", 1, 2, 10 * MS, NULL));
    int rc = sluice_table_reconfigure_at(t, to, 20 * MS, err, sizeof err);
    if (rc != code || !strstr(err, token))
        fprintf(stderr, "table %s -> %s: rc %d, err \"%s\" (want %d naming %s)\n", from,
                to ? to : "NULL", rc, err, code, token);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err, token));
    expect_table_twins(t, twin, 5 * MS); /* the refused change's time was not kept */
    sluice_table_free(t);
    sluice_table_free(twin);
}

/* Bad changes of a table's spec: an error naming the token, and every key
 * decides as in a twin table never touched. */
static void test_table_bad_changes(void **state)
{
    (void)state;
    tbad("token-bucket 5/s", "token-bucket 0/s", "\"0/s\"", SLUICE_ERANGE);
    tbad("token-bucket 5/s", "token-bucket 5/s burts=2", "\"burts=2\"", SLUICE_EINVAL);
    tbad("token-bucket 5/s", "tokenbucket 5/s", "\"tokenbucket\"", SLUICE_EINVAL);
    tbad("token-bucket 5/s", "", "empty", SLUICE_EINVAL);
    tbad("token-bucket 5/s", NULL, "NULL", SLUICE_EINVAL);
    tbad("token-bucket 5/s", "leaky-bucket 5/s", "\"leaky-bucket\"", SLUICE_EINVAL);
    tbad("fixed-window 5/s", "sliding-log 5/s", "algorithm", SLUICE_EINVAL);
    tbad("sliding-wheel 5/s slots=10", "sliding-wheel 5/s slots=5", "slot width", SLUICE_EINVAL);
    /* a packed table's keys have 16 bytes: a spec whose state needs more */
    tbad("token-bucket 3/1000000000000000000ns", "token-bucket 3/1000000000000000000ns burst=20",
         "16 bytes", SLUICE_EINVAL);
    char err[64];
    assert_int_equal(sluice_table_reconfigure_at(NULL, "fixed-window 1/s", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "NULL"));
    assert_int_equal(sluice_table_reconfigure(NULL, "fixed-window 1/s", err, sizeof err),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_burst_at(NULL, 5, 0, err, sizeof err), SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_limit_at(NULL, 5, SEC, 0, err, sizeof err), SLUICE_EINVAL);
    sluice_table *t = sluice_table_new("fixed-window 5/s", 16, err, sizeof err);
    sluice_table *twin = sluice_table_new("fixed-window 5/s", 16, err, sizeof err);
    assert_int_equal(sluice_table_reconfigure_at(t, "fixed-window x/s", 0, NULL, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_burst_at(t, 5, 0, err, sizeof err), SLUICE_EINVAL);
    assert_non_null(strstr(err, "burst"));
    assert_int_equal(sluice_table_set_limit_at(t, 0, SEC, 0, err, sizeof err), SLUICE_EINVAL);
    assert_non_null(strstr(err, "limit"));
    assert_int_equal(sluice_table_set_limit_at(t, 5, 0, 0, err, sizeof err), SLUICE_EINVAL);
    assert_non_null(strstr(err, "period_ns"));
    expect_table_twins(t, twin, 0);
    sluice_table_free(t);
    sluice_table_free(twin);
    /* a table in a shared region has no overrides; its spec changes in the
     * region, for every process (tests/table/test_region_table.c) */
    size_t size = sluice_table_region_size("token-bucket 5/s", 16, 16, err, sizeof err);
    assert_true(size > 0);
    size = (size + 63) / 64 * 64;
    void *region = aligned_alloc(64, size);
    assert_non_null(region);
    memset(region, 0, size);
    t = sluice_table_attach(region, size, "token-bucket 5/s", 16, 16, 0, err, sizeof err);
    assert_non_null(t);
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 5, 0, NULL));
    assert_int_equal(sluice_table_reconfigure_at(t, "token-bucket 9/s burts=2", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "burts"));
    assert_int_equal(sluice_table_set_limit_at(t, 9, SEC, 0, err, sizeof err), 0);
    assert_int_equal(sluice_table_override_set_at(t, "a", 1, "token-bucket 9/s", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "region"));
    assert_int_equal(sluice_table_override_remove_at(t, "a", 1, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_max_overrides(t, 5), SLUICE_EINVAL);
    assert_false(sluice_table_try_acquire_at(t, "a", 1, 1, 0, NULL)); /* no token at 0 */
    assert_true(sluice_table_try_acquire(t, "b", 1, 1, NULL));
    sluice_table_free(t);
    free(region);
    /* out of memory for the new configuration: nothing changes */
    assert_int_equal(tu_alloc_install(), 0);
    t = sluice_table_new("token-bucket 5/s", 16, err, sizeof err);
    twin = sluice_table_new("token-bucket 5/s", 16, err, sizeof err);
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 2, 10 * MS, NULL));
    assert_true(sluice_table_try_acquire_at(twin, "a", 1, 2, 10 * MS, NULL));
    tu_alloc_arm(0, true);
    assert_int_equal(sluice_table_reconfigure_at(t, "token-bucket 9/s", 20 * MS, err, sizeof err),
                     SLUICE_ENOMEM);
    tu_alloc_disarm();
    assert_non_null(strstr(err, "memory"));
    expect_table_twins(t, twin, 5 * MS);
    sluice_table_free(t);
    sluice_table_free(twin);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

/* The table's knobs are the limiter's: a key of a table and a limiter,
 * changed alike, decide alike. */
static void test_table_knobs(void **state)
{
    (void)state;
    char err[256];
    static const char *const specs[] = {"token-bucket 10/s burst=4", "leaky-bucket 5/s capacity=3",
                                        "sliding-wheel 10/s slots=10", "fixed-window 7/s"};
    for (int k = 0; k < 4; k++) {
        sluice_table *t = sluice_table_new(specs[k], 16, err, sizeof err);
        sluice_limiter *l = mk(specs[k]);
        bool bucket = k < 2;
        for (uint64_t i = 0; i < 40; i++) {
            uint64_t at = i * 71 * MS;
            if (i == 10) {
                assert_int_equal(sluice_table_set_limit_at(t, 30, 3 * SEC, at, err, sizeof err), 0);
                assert_int_equal(sluice_limiter_set_limit_at(l, 30, 3 * SEC, at, err, sizeof err), 0);
            }
            if (i == 20 && bucket) {
                assert_int_equal(sluice_table_set_burst_at(t, 2, at, err, sizeof err), 0);
                assert_int_equal(sluice_limiter_set_burst_at(l, 2, at, err, sizeof err), 0);
            }
            sluice_result x, y;
            bool ox = sluice_table_try_acquire_at(t, "key", 3, i % 4, at, &x);
            bool oy = sluice_try_acquire_at(l, i % 4, at, &y);
            assert_true(ox == oy);
            assert_int_equal(x.remaining, y.remaining);
            assert_int_equal(x.retry_after_ns, y.retry_after_ns);
            assert_int_equal(x.wait_ns, y.wait_ns);
        }
        sluice_table_free(t);
        sluice_limiter_free(l);
    }
}

/* Out of memory: each change allocates its new configuration; when that
 * fails (the test allocator of tests/testutil.h failing every call),
 * SLUICE_ENOMEM and nothing changes. */
static void test_out_of_memory(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0);
    static const char *const specs[][2] = {
        {"token-bucket 5/s", "token-bucket 9/s burst=2"},
        {"sliding-log 5/s", "sliding-log 2/s"},
    };
    for (int k = 0; k < 2; k++) {
        sluice_limiter *l = mk(specs[k][0]), *twin = mk(specs[k][0]);
        assert_true(sluice_try_acquire_at(l, 2, 10 * MS, NULL));
        assert_true(sluice_try_acquire_at(twin, 2, 10 * MS, NULL));
        char err[128];
        tu_alloc_arm(0, true);
        assert_int_equal(sluice_limiter_reconfigure_at(l, specs[k][1], 20 * MS, err, sizeof err),
                         SLUICE_ENOMEM);
        assert_int_equal(sluice_limiter_set_limit_at(l, 1, SEC, 20 * MS, err, sizeof err),
                         SLUICE_ENOMEM);
        tu_alloc_disarm();
        assert_non_null(strstr(err, "memory"));
        expect_twins(l, twin, 5 * MS);
        sluice_limiter_free(l);
        sluice_limiter_free(twin);
    }
    assert_int_equal(tu_alloc_uninstall(), 0);
}

static void test_knobs(void **state)
{
    (void)state;
    char err[256], buf[SLUICE_SPEC_MAX];
    /* token-bucket 10/s burst=4: take 4 at 0; SetLimit to 1/s at 0.5 s: the
     * old rate refilled 4 (capped at 4); burst kept */
    sluice_limiter *l = mk("token-bucket 10/s burst=4");
    ask(l, 4, 0, true, 0, 0);
    assert_int_equal(sluice_limiter_set_limit_at(l, 1, SEC, 200 * MS, err, sizeof err), 0);
    assert_true(sluice_limiter_spec_format(l, buf, sizeof buf) > 0);
    assert_string_equal(buf, "token-bucket 1/s burst=4");
    ask(l, 0, 200 * MS, true, 2, 0);           /* 0.2 s at 10/s: 2 tokens */
    ask(l, 3, 200 * MS, false, 2, SEC);        /* then 1/s */
    assert_int_equal(sluice_limiter_set_burst_at(l, 1, 200 * MS, err, sizeof err), 0);
    assert_true(sluice_limiter_spec_format(l, buf, sizeof buf) > 0);
    assert_string_equal(buf, "token-bucket 1/s"); /* burst = LIMIT: the default */
    ask(l, 0, 200 * MS, true, 1, 0);
    assert_int_equal(sluice_limiter_set_burst_at(l, 0, 0, err, sizeof err), SLUICE_EINVAL);
    sluice_limiter_free(l);
    /* sliding-wheel keeps its slot width: 10/s slots=10 -> 30 per 3 s */
    l = mk("sliding-wheel 10/s slots=10");
    assert_int_equal(sluice_limiter_set_limit_at(l, 30, 3 * SEC, 0, err, sizeof err), 0);
    assert_true(sluice_limiter_spec_format(l, buf, sizeof buf) > 0);
    assert_string_equal(buf, "sliding-wheel 30/3s slots=30");
    assert_int_equal(sluice_limiter_set_limit_at(l, 30, 3 * SEC + 50 * MS, 0, err, sizeof err),
                     SLUICE_EINVAL); /* not a whole number of 100-ms slots */
    sluice_limiter_free(l);
    /* leaky-bucket: burst is the capacity, nodelay kept */
    l = mk("leaky-bucket 5/s nodelay");
    assert_int_equal(sluice_limiter_set_burst_at(l, 9, 0, err, sizeof err), 0);
    assert_true(sluice_limiter_spec_format(l, buf, sizeof buf) > 0);
    assert_string_equal(buf, "leaky-bucket 5/s capacity=9 nodelay");
    assert_int_equal(sluice_limiter_set_limit_at(l, 2, MS, 0, err, sizeof err), 0);
    assert_true(sluice_limiter_spec_format(l, buf, sizeof buf) > 0);
    assert_string_equal(buf, "leaky-bucket 2/ms capacity=9 nodelay");
    sluice_limiter_free(l);
}

/* ---- threads ------------------------------------------------------------ */

#define THREADS 4

typedef struct tctx {
    sluice_limiter *l;
    const char *a, *b;
    uint64_t t;
    _Atomic bool stop;
    _Atomic uint64_t admitted;
    _Atomic unsigned ready;
} tctx;

static void *decider(void *v)
{
    tctx *c = v;
    atomic_fetch_add(&c->ready, 1);
    uint64_t n = 0;
    for (unsigned k = 0; !atomic_load(&c->stop) || k < 200; k++) {
        sluice_result r;
        if (sluice_try_acquire_at(c->l, 1, c->t, &r)) n++;
        if (k > 100000) break;
    }
    atomic_fetch_add(&c->admitted, n);
    return NULL;
}

static void threads_case(const char *a, const char *b, const char *last, uint64_t max_admit,
                         uint64_t final_room, bool count_kept)
{
    tctx c = {.a = a, .b = b, .t = 10 * SEC};
    c.l = mk(a);
    atomic_init(&c.stop, false);
    atomic_init(&c.admitted, 0);
    atomic_init(&c.ready, 0);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, decider, &c), 0);
    while (atomic_load(&c.ready) < THREADS) {
    }
    for (int k = 0; k < 200; k++) reconf(c.l, k & 1 ? a : b, c.t);
    atomic_store(&c.stop, true);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    reconf(c.l, last, c.t);
    uint64_t n = atomic_load(&c.admitted);
    assert_true(n <= max_admit);
    sluice_result r;
    assert_true(sluice_try_acquire_at(c.l, 0, c.t, &r));
    if (count_kept) assert_int_equal(r.remaining, n >= final_room ? 0 : final_room - n);
    else assert_true(r.remaining <= final_room);
    sluice_stats st;
    sluice_limiter_stats_get(c.l, &st);
    assert_int_equal(st.requests_allowed, n);
    sluice_limiter_free(c.l);
}

static void test_threads(void **state)
{
    (void)state;
    for (size_t rep = 0; rep < tu_scaled(5, g_scale); rep++) {
        /* windows keep the count: at one instant, never more than the
         * larger limit, and the final limit sees exactly what was taken */
        threads_case("fixed-window 300/d", "fixed-window 500/d", "fixed-window 700/d", 500, 700, true);
        threads_case("sliding-log 300/d", "sliding-log 500/d", "sliding-log 700/d", 500, 700, true);
        threads_case("sliding-approx 300/d", "sliding-approx 500/d", "sliding-approx 700/d", 500, 700, true);
        /* buckets: tokens only ever shrink at one instant */
        threads_case("token-bucket 500/d", "token-bucket 500/d burst=300", "token-bucket 500/d", 500,
                     500, false);
        /* lock-free <-> locked (burst=20 does not pack) */
        threads_case("token-bucket 3/1000000000000000000ns", "token-bucket 3/1000000000000000000ns burst=20",
                     "token-bucket 3/1000000000000000000ns", 20, 3, false);
    }
}

/* A table: 4 threads deciding on 32 keys (and peeking, and scanning) while
 * the main thread changes the spec back and forth.  Every change carries
 * each key's count over (one window, one instant), so no key ever admits
 * more than the larger limit, and a last change sees exactly what each key
 * took. */
#define TTKEYS 32

typedef struct ttctx {
    sluice_table *t;
    uint64_t at;
    _Atomic bool stop;
    _Atomic unsigned ready;
    _Atomic uint64_t admitted[TTKEYS];
} ttctx;

static int scan_nop(const void *key, size_t keylen, const sluice_key_state *st, void *arg)
{
    (void)key;
    (void)keylen;
    (void)st;
    (void)arg;
    return 0;
}

static void *table_decider(void *v)
{
    ttctx *c = v;
    uint64_t rs = g_seed ^ (uint64_t)(uintptr_t)&rs;
    uint64_t mine[TTKEYS] = {0};
    uint64_t cursor = 0;
    atomic_fetch_add(&c->ready, 1);
    for (unsigned k = 0; !atomic_load(&c->stop) || k < 500; k++) {
        unsigned key = (unsigned)tu_splitmix64_below(&rs, TTKEYS);
        switch (tu_splitmix64_below(&rs, 8)) {
        case 0:
            sluice_table_peek_at(c->t, &key, sizeof key, 1, c->at, NULL, NULL);
            break;
        case 1:
            sluice_table_scan(c->t, cursor, 4, scan_nop, NULL, &cursor);
            break;
        default:
            if (sluice_table_try_acquire_at(c->t, &key, sizeof key, 1, c->at, NULL)) mine[key]++;
        }
        if (k > 200000) break;
    }
    for (int i = 0; i < TTKEYS; i++) atomic_fetch_add(&c->admitted[i], mine[i]);
    return NULL;
}

static void table_threads_case(const char *a, const char *b, const char *last, uint64_t max_admit,
                               uint64_t final_room)
{
    char err[256];
    ttctx c = {.at = 10 * SEC};
    c.t = sluice_table_new(a, 4 * TTKEYS, err, sizeof err);
    assert_non_null(c.t);
    atomic_init(&c.stop, false);
    atomic_init(&c.ready, 0);
    for (int i = 0; i < TTKEYS; i++) atomic_init(&c.admitted[i], 0);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, table_decider, &c), 0);
    while (atomic_load(&c.ready) < THREADS) {
    }
    for (int k = 0; k < 300; k++)
        assert_int_equal(sluice_table_reconfigure_at(c.t, k & 1 ? a : b, c.at, err, sizeof err), 0);
    atomic_store(&c.stop, true);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    assert_int_equal(sluice_table_reconfigure_at(c.t, last, c.at, err, sizeof err), 0);
    uint64_t total = 0;
    for (unsigned key = 0; key < TTKEYS; key++) {
        uint64_t n = atomic_load(&c.admitted[key]);
        total += n;
        assert_true(n <= max_admit);
        sluice_result r;
        sluice_table_peek_at(c.t, &key, sizeof key, 0, c.at, &r, NULL);
        assert_int_equal(r.remaining, n >= final_room ? 0 : final_room - n);
    }
    sluice_table_stats st;
    sluice_table_stats_get(c.t, &st);
    assert_int_equal(st.decisions.requests_allowed, total);
    sluice_table_free(c.t);
}

static void test_table_threads(void **state)
{
    (void)state;
    for (size_t rep = 0; rep < tu_scaled(3, g_scale); rep++) {
        table_threads_case("fixed-window 30/d", "fixed-window 50/2d", "fixed-window 70/d", 50, 70);
        table_threads_case("sliding-log 30/d", "sliding-log 50/d", "sliding-log 70/d", 50, 70);
        table_threads_case("sliding-approx 30/d", "sliding-approx 50/d", "sliding-approx 70/d", 50, 70);
    }
}

int main(void)
{
    g_seed = tu_env_seed();
    g_scale = tu_env_scale(1.0);
    printf("SLUICE_TEST_SEED=%llu\n", ULL(g_seed));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_cases),
        cmocka_unit_test(test_random_traces),
        cmocka_unit_test(test_table_random_traces),
        cmocka_unit_test(test_log_chains),
        cmocka_unit_test(test_table_log_chains),
        cmocka_unit_test(test_shared_log_chains),
        cmocka_unit_test(test_table_exact),
        cmocka_unit_test(test_table_rest),
        cmocka_unit_test(test_table_million),
        cmocka_unit_test(test_table_bad_changes),
        cmocka_unit_test(test_table_knobs),
        cmocka_unit_test(test_table_threads),
        cmocka_unit_test(test_shorter_log_window),
        cmocka_unit_test(test_twins_after_changes),
        cmocka_unit_test(test_bad_changes),
        cmocka_unit_test(test_knobs),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
