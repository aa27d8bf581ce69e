/* test_composite.c -- one request against several limits at once
 * (sluice_composite_try_acquire_at; docs/composite.md, "Several limits on one
 * request").
 *
 * The oracle is the reference model (ref_model.h), one model per limit, and
 * the composite rule written out here from its text: allowed iff every
 * model would allow; then every model decides the request; otherwise a
 * model that would allow is probed (its remaining without the permits) and
 * a refusing one decides (a refusal changes nothing).  The combination:
 * the largest wait_ns, the smallest remaining, the largest retry_after_ns
 * of the refusers (-1 if any is -1).
 *
 *   test_random_traces   random traces over 1..4 limits of every algorithm
 *                        variant, as limiters and as keys of tables: every
 *                        field of the combined result and of each limit's
 *                        result, exactly (half the calls ask the combined
 *                        result alone).
 *   test_random_traces_own_permits  the same, each limit asked for its own
 *                        random permits (sluice_composite_try_acquire_n_at),
 *                        0 among them.
 *   test_all_or_nothing  a refusal by one limit takes nothing from another;
 *                        a new table key is made only by an admission.
 *   test_bad_calls       n of 0 and 17, refs naming neither or both, the
 *                        same limiter or key twice: SLUICE_EINVAL, nothing
 *                        decided.
 *   test_bare_refusal    no details asked: a refusal by any limit (before,
 *                        between or after the others, a limiter in the
 *                        locked path among them) takes nothing and is
 *                        counted on every limiter; a limiter twice counts
 *                        nothing.
 *   test_threads         4 threads, each asking a shared limit A together
 *                        with one of two limits B0/B1 (limiters of both
 *                        paths, and table keys), all at one instant: the
 *                        admissions on A and on each B are the contract's
 *                        for ONE order -- each admission's remaining is
 *                        distinct on every limit it touched, the orders of
 *                        A and of each B agree, every refusal fits into
 *                        that order, and the counts are exact; every
 *                        other run asks no details (a refusal stops at the
 *                        first refusing limit): the counts, exactly.
 *   test_threads_reconfigure  3 threads of composites while another thread
 *                        changes one limit's spec back and forth.
 *   test_three_kinds     a limiter, a key of an in-process table and a key
 *                        of a shared table in one composite, each limit's
 *                        spec changed between calls: all or nothing, every
 *                        limit's answer and remaining as fixed-window and
 *                        3.8 give them by hand.
 *   test_three_kinds_threads  4 threads at one instant, each asking the
 *                        three kinds (a limiter in the locked path, an
 *                        in-process key, a shared key) in its own order of
 *                        the refs: exactly the least capacity admitted, and
 *                        every limit charged for each admission and for
 *                        nothing else.
 *   test_shared_long_key a key longer than a shared table's max_key_bytes
 *                        (but not than SLUICE_MAX_KEY_BYTES) in a composite
 *                        is the key a single decision on that table
 *                        decides: its digest, not its bytes.
 *
 * SLUICE_TEST_SEED sets the random seed (printed); SLUICE_STRESS_SCALE
 * scales the repetitions.
 */
#define _POSIX_C_SOURCE 200809L
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
#include <unistd.h>

#include <sluice.h>

#include "ref_model.h"
#include "testutil.h"

#define SEC 1000000000ULL
#define ULL(x) ((unsigned long long)(x))

static uint64_t g_seed;
static double g_scale = 1.0;

/* ---- a random limit: its spec and the model's parameters ---------------- */

typedef struct limit {
    char spec[128];
    ref_params p;
    ref_model *m;
    sluice_limiter *lim;   /* or */
    sluice_table *tab;
    char key[24];
} limit;

static void limit_random(limit *l, uint64_t *rs)
{
    static const char *const names[] = {"fixed-window", "sliding-log", "sliding-wheel",
                                        "sliding-approx", "token-bucket", "leaky-bucket"};
    memset(l, 0, sizeof *l);
    int v = (int)tu_splitmix64_below(rs, 7); /* 6: leaky-bucket nodelay */
    ref_alg a = v == 6 ? REF_LEAKY_BUCKET : (ref_alg)v;
    static const uint64_t periods[] = {1000, 997, 1000000, 60};
    uint64_t W = periods[tu_splitmix64_below(rs, 4)], L = 1 + tu_splitmix64_below(rs, 6);
    l->p = (ref_params){.alg = a, .limit = L, .period_ns = W, .nodelay = v == 6};
    int n = snprintf(l->spec, sizeof l->spec, "%s %llu/%lluns", names[a], ULL(L), ULL(W));
    if (a == REF_TOKEN_BUCKET || a == REF_LEAKY_BUCKET) {
        l->p.capacity = 1 + tu_splitmix64_below(rs, 8);
        n += snprintf(l->spec + n, sizeof l->spec - (size_t)n, " %s=%llu",
                      a == REF_TOKEN_BUCKET ? "burst" : "capacity", ULL(l->p.capacity));
        if (v == 6) snprintf(l->spec + n, sizeof l->spec - (size_t)n, " nodelay");
    }
    if (a == REF_SLIDING_WHEEL) {
        static const uint64_t div[] = {1, 2, 4, 5, 10};
        uint64_t N = W % 10 == 0 ? div[tu_splitmix64_below(rs, 5)] : 1;
        l->p.slots = N;
        snprintf(l->spec + n, sizeof l->spec - (size_t)n, " slots=%llu", ULL(N));
    }
    l->m = ref_model_new(&l->p);
    assert_non_null(l->m);
}

static sluice_limit_ref limit_ref(const limit *l)
{
    return l->lim ? sluice_ref_limiter(l->lim) : sluice_ref_key(l->tab, l->key, strlen(l->key));
}

/* The composite rule on the models, limit i asked for pv[i]: fills want
 * (combined) and per[]. */
static bool model_composite_n(limit *ls, size_t n, const uint64_t *pv, uint64_t t, ref_result *want,
                              ref_result *per)
{
    bool all = true;
    for (size_t i = 0; i < n; i++) all &= ref_model_would_allow(ls[i].m, pv[i], t);
    for (size_t i = 0; i < n; i++) {
        if (all || !ref_model_would_allow(ls[i].m, pv[i], t)) {
            bool ok = ref_model_decide(ls[i].m, pv[i], t, &per[i]);
            assert_true(ok == all);
        } else { /* would allow: nothing is taken; its remaining as a probe */
            ref_model_decide(ls[i].m, 0, t, &per[i]);
            per[i].allowed = true;
        }
    }
    *want = (ref_result){.allowed = all, .remaining = UINT64_MAX};
    bool never = false;
    for (size_t i = 0; i < n; i++) {
        if (per[i].remaining < want->remaining) want->remaining = per[i].remaining;
        if (all && per[i].wait_ns > want->wait_ns) want->wait_ns = per[i].wait_ns;
        if (!per[i].allowed) {
            if (per[i].retry_after_ns < 0) never = true;
            else if (per[i].retry_after_ns > want->retry_after_ns)
                want->retry_after_ns = per[i].retry_after_ns;
        }
    }
    if (never) want->retry_after_ns = -1;
    return all;
}

static void expect_same(const char *what, const ref_result *w, const sluice_result *g,
                        const limit *ls, size_t n, uint64_t p, uint64_t t, size_t step)
{
    if (w->allowed == g->allowed && w->wait_ns == g->wait_ns && w->remaining == g->remaining &&
        w->retry_after_ns == g->retry_after_ns && g->error == 0)
        return;
    fprintf(stderr, "seed %llu step %zu: %s differs at t=%llu p=%llu\n", ULL(g_seed), step, what,
            ULL(t), ULL(p));
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "  limit %zu: %s%s\n", i, ls[i].spec, ls[i].tab ? " (table key)" : "");
    fprintf(stderr, "  want allowed=%d wait=%llu remaining=%llu retry=%lld\n", w->allowed,
            ULL(w->wait_ns), ULL(w->remaining), (long long)w->retry_after_ns);
    fprintf(stderr, "  got  allowed=%d wait=%llu remaining=%llu retry=%lld error=%d\n",
            g->allowed, ULL(g->wait_ns), ULL(g->remaining), (long long)g->retry_after_ns,
            g->error);
    fail();
}

/* Random traces; with own_permits each limit is asked for its own random
 * permits (sluice_composite_try_acquire_n_at; now and then all equal). */
static void random_traces(bool own_permits)
{
    uint64_t rs = g_seed ^ (own_permits ? 0xc1 : 0xc0);
    const size_t trials = tu_scaled(400, g_scale);
    char err[256];
    for (size_t trial = 0; trial < trials; trial++) {
        size_t n = 1 + tu_splitmix64_below(&rs, 4);
        bool tables = tu_splitmix64_below(&rs, 2);
        limit ls[4];
        for (size_t i = 0; i < n; i++) {
            limit_random(&ls[i], &rs);
            if (tables && tu_splitmix64_below(&rs, 2)) {
                if (i > 0 && ls[i - 1].tab && tu_splitmix64_below(&rs, 2)) { /* same table, other key */
                    ref_model_free(ls[i].m);
                    char key[24];
                    snprintf(key, sizeof key, "k%zu", i);
                    ls[i] = ls[i - 1];
                    ls[i].m = ref_model_new(&ls[i].p);
                    memcpy(ls[i].key, key, sizeof key);
                    continue;
                }
                ls[i].tab = sluice_table_new(ls[i].spec, 4 + tu_splitmix64_below(&rs, 4), err, sizeof err);
                if (!ls[i].tab) fprintf(stderr, "%s: %s\n", ls[i].spec, err);
                assert_non_null(ls[i].tab);
                snprintf(ls[i].key, sizeof ls[i].key, "k%zu", i);
            } else {
                ls[i].lim = sluice_limiter_new(ls[i].spec, err, sizeof err);
                if (!ls[i].lim) fprintf(stderr, "%s: %s\n", ls[i].spec, err);
                assert_non_null(ls[i].lim);
            }
        }
        sluice_limit_ref refs[4];
        for (size_t i = 0; i < n; i++) refs[i] = limit_ref(&ls[i]);
        uint64_t t = tu_splitmix64_below(&rs, 3000);
        for (size_t step = 0; step < 60; step++) {
            /* times move on; limiter-only trials also go back a little
             * (clamped to each limit's latest admission).  Table keys keep
             * time monotonic: a key dropped at rest forgets its latest time. */
            uint64_t W = ls[tu_splitmix64_below(&rs, n)].p.period_ns;
            t += tu_splitmix64_below(&rs, W / 2 + 2);
            uint64_t at = t;
            if (!tables && tu_splitmix64_below(&rs, 5) == 0) at = t > W ? t - tu_splitmix64_below(&rs, W) : 0;
            uint64_t p = tu_splitmix64_below(&rs, 10) == 0 ? 0 : 1 + tu_splitmix64_below(&rs, 4);
            if (tu_splitmix64_below(&rs, 30) == 0) p = 9; /* beyond every limit: -1 */
            uint64_t pv[4];
            for (size_t i = 0; i < n; i++) {
                pv[i] = p;
                if (own_permits && tu_splitmix64_below(&rs, 8) != 0)
                    pv[i] = tu_splitmix64_below(&rs, 6) == 0 ? 0 : 1 + tu_splitmix64_below(&rs, 5);
            }
            ref_result want, per[4];
            model_composite_n(ls, n, pv, at, &want, per);
            sluice_result got, gper[4];
            const bool each = tu_splitmix64_below(&rs, 2); /* or the combination alone */
            bool ok = own_permits ? sluice_composite_try_acquire_n_at(refs, pv, n, at, &got, each ? gper : NULL)
                                  : sluice_composite_try_acquire_at(refs, n, p, at, &got, each ? gper : NULL);
            assert_true(ok == got.allowed);
            expect_same("the composite", &want, &got, ls, n, p, at, step);
            for (size_t i = 0; i < n && each; i++) {
                char what[32];
                snprintf(what, sizeof what, "limit %zu", i);
                expect_same(what, &per[i], &gper[i], ls, n, p, at, step);
            }
        }
        for (size_t i = 0; i < n; i++) {
            ref_model_free(ls[i].m);
            sluice_limiter_free(ls[i].lim);
            if (ls[i].tab && !(i + 1 < n && ls[i + 1].tab == ls[i].tab)) sluice_table_free(ls[i].tab);
        }
    }
}

static void test_random_traces(void **state)
{
    (void)state;
    random_traces(false);
}

static void test_random_traces_own_permits(void **state)
{
    (void)state;
    /* permits NULL, n 0: a bad call, nothing decided */
    char err[128];
    sluice_limiter *l = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    assert_non_null(l);
    sluice_limit_ref r = sluice_ref_limiter(l);
    sluice_result res, per[1], per2[2];
    uint64_t one = 1;
    assert_false(sluice_composite_try_acquire_n_at(&r, NULL, 1, 0, &res, per));
    assert_int_equal(res.error, SLUICE_EINVAL);
    assert_int_equal(per[0].error, SLUICE_EINVAL);
    assert_false(sluice_composite_try_acquire_n_at(&r, &one, 0, 0, &res, NULL));
    assert_int_equal(res.error, SLUICE_EINVAL);
    assert_true(sluice_composite_try_acquire_n_at(&r, &one, 1, 0, &res, NULL));
    /* A limit probed (0) inside an admission makes no key: a new key of a
     * full table does not refuse the request, and stays unmade. */
    sluice_table *t = sluice_table_new("fixed-window 5/s", 1, err, sizeof err);
    assert_non_null(t);
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 1, SEC, NULL)); /* the one key, busy */
    sluice_limit_ref rr[2] = {sluice_ref_limiter(l), sluice_ref_key(t, "b", 1)};
    uint64_t pv[2] = {1, 0};
    assert_true(sluice_composite_try_acquire_n_at(rr, pv, 2, SEC, &res, per2));
    assert_int_equal(per2[1].remaining, 5);
    assert_false(sluice_table_try_acquire_at(t, "c", 1, 1, SEC, &res)); /* still full: b was not made */
    assert_int_equal(res.error, SLUICE_EFULL);
    sluice_table_free(t);
    sluice_limiter_free(l);
    random_traces(true);
}

/* The bare yes/no path (res and per_limit NULL) decides as the detailed one:
 * two identical sets of limiters, one asked each way. */
static void test_bare_equals_detailed(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0xba;
    char err[256];
    for (size_t trial = 0; trial < tu_scaled(200, g_scale); trial++) {
        size_t n = 2 + tu_splitmix64_below(&rs, 3);
        limit ls[4];
        sluice_limiter *a[4], *b[4];
        sluice_limit_ref ra[4], rb[4];
        for (size_t i = 0; i < n; i++) {
            limit_random(&ls[i], &rs);
            a[i] = sluice_limiter_new(ls[i].spec, err, sizeof err);
            b[i] = sluice_limiter_new(ls[i].spec, err, sizeof err);
            assert_non_null(a[i]);
            assert_non_null(b[i]);
            ra[i] = sluice_ref_limiter(a[i]);
            rb[i] = sluice_ref_limiter(b[i]);
        }
        uint64_t t = 0;
        for (size_t step = 0; step < 60; step++) {
            t += tu_splitmix64_below(&rs, ls[0].p.period_ns / 2 + 2);
            uint64_t p = tu_splitmix64_below(&rs, 4);
            sluice_result r;
            bool x = sluice_composite_try_acquire_at(ra, n, p, t, &r, NULL);
            bool y = sluice_composite_try_acquire_at(rb, n, p, t, NULL, NULL);
            assert_true(x == y);
        }
        for (size_t i = 0; i < n; i++) {
            ref_model_free(ls[i].m);
            sluice_limiter_free(a[i]);
            sluice_limiter_free(b[i]);
        }
    }
}

static sluice_limiter *mk(const char *spec)
{
    char err[256];
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    if (!l) fprintf(stderr, "%s: %s\n", spec, err);
    assert_non_null(l);
    return l;
}

static uint64_t remaining_of(sluice_limiter *l, uint64_t t)
{
    sluice_result r;
    assert_true(sluice_try_acquire_at(l, 0, t, &r));
    return r.remaining;
}

static void test_all_or_nothing(void **state)
{
    (void)state;
    static const char *const specs[] = {"token-bucket 5/s", "fixed-window 5/s", "sliding-log 5/s",
                                        "sliding-wheel 5/s slots=5", "sliding-approx 5/s",
                                        "leaky-bucket 5/s"};
    for (size_t i = 0; i < 6; i++) {
        sluice_limiter *a = mk(specs[i]);
        sluice_limiter *b = mk("fixed-window 2/s");
        sluice_limit_ref refs[2] = {sluice_ref_limiter(a), sluice_ref_limiter(b)};
        sluice_result r, per[2];
        assert_true(sluice_composite_try_acquire_at(refs, 2, 2, SEC, &r, per));
        assert_int_equal(r.remaining, 0); /* b: 0 left */
        assert_int_equal(per[0].remaining, 3);
        /* b refuses: a keeps its 3 */
        assert_false(sluice_composite_try_acquire_at(refs, 2, 1, SEC + 1, &r, per));
        assert_true(per[0].allowed);
        assert_int_equal(per[0].remaining, 3);
        assert_false(per[1].allowed);
        assert_int_equal(r.retry_after_ns, SEC - 1);
        assert_int_equal(remaining_of(a, SEC + 1), 3);
        sluice_stats st;
        sluice_limiter_stats_get(a, &st);
        assert_int_equal(st.requests_allowed, 1);
        assert_int_equal(st.requests_denied, 1);
        assert_int_equal(st.permits_allowed, 2);
        sluice_limiter_free(a);
        sluice_limiter_free(b);
    }
    /* a table key is made only when the whole request is admitted */
    char err[256];
    sluice_table *t = sluice_table_new("token-bucket 5/s", 10, err, sizeof err);
    assert_non_null(t);
    sluice_limiter *b = mk("fixed-window 1/d");
    sluice_limit_ref refs[2] = {sluice_ref_key(t, "client", 6), sluice_ref_limiter(b)};
    assert_true(sluice_composite_try_acquire_at(refs, 2, 1, 0, NULL, NULL));
    sluice_table_stats ts;
    sluice_table_stats_get(t, &ts);
    assert_int_equal(ts.keys, 1);
    refs[0] = sluice_ref_key(t, "other", 5);
    sluice_result r;
    assert_false(sluice_composite_try_acquire_at(refs, 2, 1, 1, &r, NULL));
    sluice_table_stats_get(t, &ts);
    assert_int_equal(ts.keys, 1);
    assert_int_equal(r.remaining, 0);
    /* a full table refuses the new key with SLUICE_EFULL, takes nothing */
    sluice_table *full = sluice_table_new("fixed-window 1/d", 1, err, sizeof err);
    sluice_limiter *c = mk("token-bucket 5/s");
    assert_true(sluice_table_try_acquire_at(full, "x", 1, 1, 0, NULL));
    sluice_limit_ref r2[2] = {sluice_ref_limiter(c), sluice_ref_key(full, "y", 1)};
    assert_false(sluice_composite_try_acquire_at(r2, 2, 1, 5, &r, NULL));
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_int_equal(remaining_of(c, 5), 5);
    assert_false(sluice_composite_try_acquire_at(r2, 2, 1, 6, NULL, NULL)); /* bare */
    sluice_table_stats_get(full, &ts);
    assert_int_equal(ts.refused, 2);
    assert_int_equal(ts.keys, 1);
    sluice_limiter_free(c);
    sluice_table_free(full);
    sluice_limiter_free(b);
    sluice_table_free(t);
}

/* A composite decision reclaims keys at rest only when a new key needs
 * their room, as single decisions do (docs/tables.md): keys at rest stay
 * held, and a key that comes back decides on its state at rest (a full
 * bucket, as a fresh key would).  Before, a composite's lock advanced the
 * shard's wheel and dropped keys at rest on the way. */
static void test_keys_at_rest_stay(void **state)
{
    (void)state;
    char err[256], key[16];
    sluice_table *t = sluice_table_new("token-bucket 5/s", 100, err, sizeof err);
    assert_non_null(t);
    sluice_limiter *b = mk("fixed-window 1000/d");
    for (int i = 0; i < 10; i++) { /* ten keys, each at rest after 1 s */
        snprintf(key, sizeof key, "k%d", i);
        assert_true(sluice_table_try_acquire_at(t, key, strlen(key), 1, 0, NULL));
    }
    /* years later, a new key through a composite: room to spare */
    const uint64_t later = 3 * 365 * 86400 * SEC;
    sluice_limit_ref refs[2] = {sluice_ref_key(t, "new", 3), sluice_ref_limiter(b)};
    assert_true(sluice_composite_try_acquire_at(refs, 2, 1, later, NULL, NULL));
    sluice_table_stats ts;
    sluice_table_stats_get(t, &ts);
    assert_int_equal(ts.keys, 11);
    assert_int_equal(ts.reclaimed, 0);
    /* a held key at rest decides as a fresh one: 5 - 2 left */
    refs[0] = sluice_ref_key(t, "k3", 2);
    sluice_result r;
    assert_true(sluice_composite_try_acquire_at(refs, 2, 2, later + 1, &r, NULL));
    assert_int_equal(r.remaining, 3);
    sluice_table_stats_get(t, &ts);
    assert_int_equal(ts.keys, 11);
    assert_int_equal(ts.reclaimed, 0);
    /* a full table of keys at rest: the new key's room is reclaimed */
    sluice_table *full = sluice_table_new("token-bucket 5/s", 4, err, sizeof err);
    assert_non_null(full);
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "f%d", i);
        assert_true(sluice_table_try_acquire_at(full, key, strlen(key), 1, 0, NULL));
    }
    sluice_limit_ref r2[2] = {sluice_ref_key(full, "new", 3), sluice_ref_limiter(b)};
    assert_false(sluice_composite_try_acquire_at(r2, 2, 1, SEC / 10, &r, NULL)); /* none at rest */
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_true(sluice_composite_try_acquire_at(r2, 2, 1, later, &r, NULL));
    sluice_table_stats_get(full, &ts); /* a wheel visit may drop a list of them */
    assert_true(ts.reclaimed >= 1);
    assert_true(ts.keys <= 4);
    assert_int_equal(ts.keys + ts.reclaimed, 5); /* each key counted once */
    sluice_table_free(full);
    sluice_limiter_free(b);
    sluice_table_free(t);
}

static void expect_bad(const sluice_limit_ref *refs, size_t n, sluice_limiter *watch)
{
    sluice_result r, per[SLUICE_COMPOSITE_MAX + 1];
    uint64_t before = watch ? remaining_of(watch, 10) : 0;
    assert_false(sluice_composite_try_acquire_at(refs, n, 1, 10, &r, per));
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_int_equal(r.retry_after_ns, -1);
    if (watch) assert_int_equal(remaining_of(watch, 10), before);
}

static void test_bad_calls(void **state)
{
    (void)state;
    sluice_limiter *a = mk("token-bucket 5/s");
    char err[256];
    sluice_table *t = sluice_table_new("token-bucket 5/s", 10, err, sizeof err);
    assert_non_null(t);
    sluice_limit_ref refs[SLUICE_COMPOSITE_MAX + 1];
    for (size_t i = 0; i <= SLUICE_COMPOSITE_MAX; i++) refs[i] = sluice_ref_limiter(a);
    expect_bad(refs, 0, a);
    expect_bad(NULL, 1, a);
    sluice_limiter *many[SLUICE_COMPOSITE_MAX + 1];
    for (size_t i = 0; i <= SLUICE_COMPOSITE_MAX; i++) refs[i] = sluice_ref_limiter(many[i] = mk("fixed-window 5/s"));
    expect_bad(refs, SLUICE_COMPOSITE_MAX + 1, many[0]);
    sluice_result r;
    assert_true(sluice_composite_try_acquire_at(refs, SLUICE_COMPOSITE_MAX, 1, 10, &r, NULL));
    assert_int_equal(r.remaining, 4);
    for (size_t i = 0; i <= SLUICE_COMPOSITE_MAX; i++) sluice_limiter_free(many[i]);
    refs[0] = sluice_ref_limiter(a);
    refs[1] = sluice_ref_limiter(a); /* the same limiter twice */
    expect_bad(refs, 2, a);
    refs[1] = (sluice_limit_ref){.limiter = a, .table = t, .key = "k", .keylen = 1}; /* both */
    expect_bad(refs, 2, a);
    refs[1] = (sluice_limit_ref){.key = "k", .keylen = 1}; /* neither */
    expect_bad(refs, 2, a);
    refs[1] = sluice_ref_key(t, NULL, 3); /* NULL key with a length */
    expect_bad(refs, 2, a);
    refs[1] = sluice_ref_key(t, NULL, 5); /* (a long key is a key: its digest, test_table.c) */
    expect_bad(refs, 2, a);
    /* a bad call with no result to fill: still refused, nothing taken */
    uint64_t before = remaining_of(a, 10);
    assert_false(sluice_composite_try_acquire_at(refs, 2, 1, 10, NULL, NULL));
    assert_int_equal(remaining_of(a, 10), before);
    refs[1] = sluice_ref_key(t, "key", 3);
    refs[2] = sluice_ref_key(t, "key", 3); /* the same key twice, new */
    expect_bad(refs, 3, a);
    assert_true(sluice_table_try_acquire_at(t, "key", 3, 1, 10, NULL));
    expect_bad(refs, 3, a); /* ... and held */
    sluice_table_stats ts;
    sluice_table_stats_get(t, &ts);
    assert_int_equal(ts.keys, 1);
    refs[2] = sluice_ref_key(t, "kez", 3); /* two keys of one table: fine */
    assert_true(sluice_composite_try_acquire_at(refs, 3, 1, 10, &r, NULL));
    assert_int_equal(r.remaining, 3); /* "key": 5 - 2 */
    sluice_limiter_free(a);
    sluice_table_free(t);
}

/* The bare call (no details) stops at the first limit that refuses: still
 * nothing is taken anywhere, every limiter counts the refusal (those after
 * the refuser, and one in the locked path, too), and a limiter named twice
 * is a bad call that counts nothing. */
static void expect_stats(sluice_limiter *l, uint64_t allowed, uint64_t denied, uint64_t pa,
                         uint64_t pd)
{
    sluice_stats st;
    sluice_limiter_stats_get(l, &st);
    assert_int_equal(st.requests_allowed, allowed);
    assert_int_equal(st.requests_denied, denied);
    assert_int_equal(st.permits_allowed, pa);
    assert_int_equal(st.permits_denied, pd);
}

static void test_bare_refusal(void **state)
{
    (void)state;
    sluice_limiter *a = mk("token-bucket 5/s"), *b = mk("fixed-window 3/d"),
                   *c = mk("sliding-approx 5/s"), *l = mk("sliding-log 5/s");
    sluice_limit_ref refs[4] = {sluice_ref_limiter(a), sluice_ref_limiter(b),
                                sluice_ref_limiter(c), sluice_ref_limiter(l)};
    assert_true(sluice_composite_try_acquire_at(refs, 3, 2, SEC, NULL, NULL)); /* b: 1 left */
    assert_false(sluice_composite_try_acquire_at(refs, 3, 2, SEC, NULL, NULL)); /* b refuses */
    sluice_limit_ref rev[3] = {refs[2], refs[1], refs[0]};
    assert_false(sluice_composite_try_acquire_at(rev, 3, 3, SEC, NULL, NULL));
    assert_int_equal(remaining_of(a, SEC), 3);
    assert_int_equal(remaining_of(b, SEC), 1);
    assert_int_equal(remaining_of(c, SEC), 3);
    expect_stats(a, 1, 2, 2, 5);
    expect_stats(b, 1, 2, 2, 5);
    expect_stats(c, 1, 2, 2, 5);
    /* a limiter in the locked path after the refuser, and before it */
    sluice_limit_ref bl[2] = {refs[1], refs[3]};
    assert_false(sluice_composite_try_acquire_at(bl, 2, 2, SEC, NULL, NULL));
    sluice_limit_ref lb[2] = {refs[3], refs[1]};
    assert_false(sluice_composite_try_acquire_at(lb, 2, 2, SEC, NULL, NULL));
    expect_stats(l, 0, 2, 0, 4);
    expect_stats(b, 1, 4, 2, 9);
    assert_int_equal(remaining_of(l, SEC), 5);
    /* the same limiter twice, after a refuser: a bad call, not counted */
    sluice_limit_ref dup[3] = {refs[1], refs[0], refs[0]};
    assert_false(sluice_composite_try_acquire_at(dup, 3, 1, SEC, NULL, NULL));
    expect_stats(a, 1, 2, 2, 5);
    expect_stats(b, 1, 4, 2, 9);
    sluice_limiter_free(a);
    sluice_limiter_free(b);
    sluice_limiter_free(c);
    sluice_limiter_free(l);
}

/* ---- threads ------------------------------------------------------------ */

#define THREADS 4
#define CALLS 400

typedef struct rec {
    bool ok;
    unsigned b;                /* which B */
    sluice_result a_r, b_r;    /* per-limit results */
} rec;

typedef struct tctx {
    sluice_limit_ref a, b[2];
    uint64_t t;
    bool bare; /* no details asked: only ok and b recorded */
    rec recs[THREADS][CALLS];
    _Atomic unsigned go;
} tctx;

typedef struct targ {
    tctx *c;
    unsigned self;
} targ;

static void *worker(void *v)
{
    targ *ta = v;
    tctx *c = ta->c;
    atomic_fetch_add(&c->go, 1);
    while (atomic_load(&c->go) < THREADS) {
    }
    for (unsigned k = 0; k < CALLS; k++) {
        unsigned b = (ta->self + k) & 1;
        sluice_limit_ref refs[2] = {c->a, c->b[b]};
        if (k & 2) { /* either order in the array */
            refs[0] = c->b[b];
            refs[1] = c->a;
        }
        sluice_result per[2];
        rec *r = &c->recs[ta->self][k];
        if (c->bare) {
            r->ok = sluice_composite_try_acquire_at(refs, 2, 1, c->t, NULL, NULL);
            r->b = b;
            continue;
        }
        r->ok = sluice_composite_try_acquire_at(refs, 2, 1, c->t, NULL, per);
        r->b = b;
        r->a_r = per[k & 2 ? 1 : 0];
        r->b_r = per[k & 2 ? 0 : 1];
    }
    return NULL;
}

static uint64_t probe_remaining(const sluice_limit_ref *r, uint64_t t)
{
    sluice_result res;
    sluice_composite_try_acquire_at(r, 1, 0, t, &res, NULL);
    return res.remaining;
}

/* One run at a frozen instant: A has room la, each B room lb.  `bare`: no
 * details asked (a refusal stops at the first refusing limit), so only the
 * counts are checked -- no over-admission, no permit lost. */
static void threads_run(const char *aspec, const char *bspec, bool btable, int atable,
                        uint64_t la, uint64_t lb, bool bare)
{
    char err[256];
    tctx *c = calloc(1, sizeof *c);
    assert_non_null(c);
    /* A: a limiter (atable 0), a key of its own table (1), or a key of B's
     * table (2: aspec is bspec; one shard holds all three keys) -- with
     * table keys only, the composite reads them without locks */
    sluice_limiter *a = atable ? NULL : mk(aspec), *bl[2] = {NULL, NULL};
    sluice_table *bt = NULL, *at = NULL;
    if (atable == 1) {
        at = sluice_table_new(aspec, 16, err, sizeof err);
        assert_non_null(at);
    }
    if (btable) {
        bt = sluice_table_new(bspec, 16, err, sizeof err);
        assert_non_null(bt);
        if (atable == 2) at = bt;
        c->b[0] = sluice_ref_key(bt, "b0", 2);
        c->b[1] = sluice_ref_key(bt, "b1", 2);
    } else {
        assert_int_equal(atable, 0);
        for (int i = 0; i < 2; i++) c->b[i] = sluice_ref_limiter(bl[i] = mk(bspec));
    }
    c->a = atable ? sluice_ref_key(at, "a", 1) : sluice_ref_limiter(a);
    c->t = 5 * SEC;
    c->bare = bare;
    pthread_t th[THREADS];
    targ ta[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        ta[i] = (targ){c, i};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &ta[i]), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) pthread_join(th[i], NULL);

    /* the admissions: distinct remaining on A; on each B, distinct and in
     * the same order as on A (one common order) */
    static bool seen_a[THREADS * CALLS + 1];
    memset(seen_a, 0, sizeof seen_a);
    uint64_t n_ok = 0, n_b[2] = {0, 0};
    uint64_t b_at_a[2][THREADS * CALLS + 1]; /* B's remaining by A's remaining */
    uint64_t last_a[2] = {UINT64_MAX, UINT64_MAX}; /* A's remaining after B's last admission */
    for (int j = 0; j < 2; j++)
        for (size_t x = 0; x <= THREADS * CALLS; x++) b_at_a[j][x] = UINT64_MAX;
    for (unsigned i = 0; i < THREADS; i++)
        for (unsigned k = 0; k < CALLS; k++) {
            const rec *r = &c->recs[i][k];
            if (!r->ok) continue;
            n_ok++;
            n_b[r->b]++;
            if (bare) continue;
            assert_true(r->a_r.remaining < la);
            assert_false(seen_a[r->a_r.remaining]); /* A: one order */
            seen_a[r->a_r.remaining] = true;
            b_at_a[r->b][r->a_r.remaining] = r->b_r.remaining;
        }
    assert_true(n_ok <= la);
    for (int j = 0; j < 2; j++) assert_true(n_b[j] <= lb);
    for (int j = 0; j < 2 && !bare; j++) {
        /* walking A's order (remaining descending), B_j's remaining must
         * descend one by one from lb - 1 */
        uint64_t expect = lb;
        for (uint64_t x = la; x-- > 0;) {
            if (b_at_a[j][x] == UINT64_MAX) continue;
            assert_int_equal(b_at_a[j][x], expect - 1);
            expect--;
            last_a[j] = x;
        }
        assert_int_equal(expect, lb - n_b[j]);
    }
    /* A's admissions are la-1 .. la-n_ok: a prefix of the order */
    for (uint64_t x = la - n_ok; x < la && !bare; x++) assert_true(seen_a[x]);
    /* the refusals fit in the order: refused by B_j means B_j was full, so
     * after B_j's last admission, and A had what it reports */
    for (unsigned i = 0; i < THREADS; i++)
        for (unsigned k = 0; k < CALLS; k++) {
            const rec *r = &c->recs[i][k];
            if (r->ok || bare) continue;
            assert_true(!r->a_r.allowed || !r->b_r.allowed);
            if (!r->b_r.allowed) {
                assert_int_equal(r->b_r.remaining, 0);
                assert_int_equal(n_b[r->b], lb);
                if (r->a_r.allowed) assert_true(r->a_r.remaining <= last_a[r->b]);
            }
            if (!r->a_r.allowed) assert_int_equal(r->a_r.remaining, 0);
            assert_true(r->a_r.remaining >= la - n_ok);
        }
    /* no permit lost: every limit holds exactly what was admitted, and one
     * of them is full (every thread went on until refused) */
    assert_int_equal(probe_remaining(&c->a, c->t), la - n_ok);
    for (int j = 0; j < 2; j++) assert_int_equal(probe_remaining(&c->b[j], c->t), lb - n_b[j]);
    assert_true(n_ok == la || (n_b[0] == lb && n_b[1] == lb));
    sluice_stats st;
    if (atable == 2) { /* one table: A's and B's counts together */
        sluice_table_stats ts;
        sluice_table_stats_get(at, &ts);
        assert_int_equal(ts.decisions.requests_allowed, 2 * n_ok);
        assert_int_equal(ts.decisions.requests_allowed + ts.decisions.requests_denied,
                         2 * THREADS * CALLS);
    } else if (atable) {
        sluice_table_stats ts;
        sluice_table_stats_get(at, &ts);
        st = ts.decisions;
    } else {
        sluice_limiter_stats_get(a, &st);
    }
    if (atable != 2) {
        assert_int_equal(st.requests_allowed, n_ok);
        assert_int_equal(st.requests_allowed + st.requests_denied, THREADS * CALLS);
    }
    for (int j = 0; j < 2 && !btable; j++) { /* each call counted on every limit */
        sluice_limiter_stats_get(bl[j], &st);
        assert_int_equal(st.requests_allowed, n_b[j]);
        assert_int_equal(st.requests_allowed + st.requests_denied, THREADS * CALLS / 2);
    }
    sluice_limiter_free(a);
    sluice_limiter_free(bl[0]);
    sluice_limiter_free(bl[1]);
    if (at != bt) sluice_table_free(at);
    sluice_table_free(bt);
    free(c);
}

static void test_threads(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        bool btable;
        int atable;
        uint64_t la, lb;
    } cases[] = {
        {"fixed-window 1000/d", "token-bucket 600/d", false, 0, 1000, 600},  /* A runs out */
        {"token-bucket 1500/d", "fixed-window 300/d", false, 0, 1500, 300},  /* the Bs run out */
        {"sliding-log 700/d", "token-bucket 400/d", false, 0, 700, 400},     /* A locked */
        {"token-bucket 900/d", "sliding-wheel 500/d", false, 0, 900, 500},   /* Bs locked */
        {"fixed-window 800/d", "token-bucket 500/d", true, 0, 800, 500},     /* Bs table keys */
        {"sliding-approx 1000/d", "sliding-log 450/d", true, 0, 1000, 450},
        {"fixed-window 800/d", "token-bucket 500/d", true, 1, 800, 500},     /* table keys only */
        {"token-bucket 700/d", "sliding-approx 400/d", true, 1, 700, 400},
        {"token-bucket 900/d", "token-bucket 900/d", true, 2, 900, 900},     /* one shard */
    };
    size_t reps = tu_scaled(5, g_scale); /* each way: details, and bare */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (size_t r = 0; r < 2 * reps; r++)
            threads_run(cases[k].a, cases[k].b, cases[k].btable, cases[k].atable, cases[k].la,
                        cases[k].lb, r & 1);
}

/* Composites while the spec of one of their limiters changes back and
 * forth: at one instant a window keeps its count, so the admissions never
 * exceed the larger limit and both limits hold exactly what was taken. */
typedef struct rctx {
    sluice_limit_ref refs[2];
    uint64_t t;
    _Atomic bool stop;
    _Atomic uint64_t admitted;
    _Atomic unsigned ready;
} rctx;

static void *rworker(void *v)
{
    rctx *c = v;
    atomic_fetch_add(&c->ready, 1);
    uint64_t n = 0;
    for (unsigned k = 0; k < 200000 && (k < 300 || !atomic_load(&c->stop)); k++) {
        sluice_limit_ref refs[2] = {c->refs[k & 1], c->refs[!(k & 1)]};
        n += sluice_composite_try_acquire_at(refs, 2, 1, c->t, NULL, NULL);
    }
    atomic_fetch_add(&c->admitted, n);
    return NULL;
}

static void test_threads_reconfigure(void **state)
{
    (void)state;
    static const char *const alt[][3] = {
        {"fixed-window 300/d", "fixed-window 500/d", "fixed-window 700/d"},
        {"sliding-log 300/d", "sliding-log 500/d", "sliding-log 700/d"},
    };
    for (size_t rep = 0; rep < tu_scaled(4, g_scale); rep++)
        for (size_t k = 0; k < 2; k++) {
            rctx c = {.t = 7 * SEC};
            sluice_limiter *a = mk(alt[k][0]), *b = mk("token-bucket 1000/d");
            c.refs[0] = sluice_ref_limiter(a);
            c.refs[1] = sluice_ref_limiter(b);
            atomic_init(&c.stop, false);
            atomic_init(&c.admitted, 0);
            atomic_init(&c.ready, 0);
            pthread_t th[3];
            for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, rworker, &c), 0);
            while (atomic_load(&c.ready) < 3) {
            }
            char err[256];
            for (int i = 0; i < 200; i++)
                assert_int_equal(sluice_limiter_reconfigure_at(a, alt[k][i & 1], c.t, err, sizeof err), 0);
            atomic_store(&c.stop, true);
            for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
            assert_int_equal(sluice_limiter_reconfigure_at(a, alt[k][2], c.t, err, sizeof err), 0);
            uint64_t n = atomic_load(&c.admitted);
            assert_true(n <= 500);
            assert_int_equal(remaining_of(a, c.t), 700 - n);
            assert_int_equal(remaining_of(b, c.t), 1000 - n);
            sluice_limiter_free(a);
            sluice_limiter_free(b);
        }
}

/* A shared table for the tests below, in a file of its own. */
static sluice_table *shared_table(char *path, size_t pathlen, const char *tag, const char *spec,
                                  size_t max_key_bytes)
{
    char err[256];
    snprintf(path, pathlen, "/tmp/sluice-test-composite-%s-%d.table", tag, (int)getpid());
    (void)sluice_table_unlink(path);
    sluice_table *t = sluice_table_open(path, spec, 64, max_key_bytes, 0, err, sizeof err);
    if (!t) fprintf(stderr, "%s: %s\n", spec, err);
    assert_non_null(t);
    return t;
}

/* The composite of refs[0..3) for p permits at t: whether admitted, and
 * each limit's answer in per. */
static bool three(const sluice_limit_ref *refs, uint64_t p, uint64_t t, sluice_result per[3])
{
    sluice_result r;
    const bool ok = sluice_composite_try_acquire_at(refs, 3, p, t, &r, per);
    assert_int_equal(r.allowed, ok);
    return ok;
}

static void expect_remaining(const sluice_limit_ref *refs, uint64_t t, uint64_t l, uint64_t k,
                             uint64_t s)
{
    assert_int_equal(probe_remaining(&refs[0], t), l);
    assert_int_equal(probe_remaining(&refs[1], t), k);
    assert_int_equal(probe_remaining(&refs[2], t), s);
}

static void test_three_kinds(void **state)
{
    (void)state;
    char err[256], path[96];
    sluice_limiter *lim = mk("fixed-window 3/s");
    sluice_table *tab = sluice_table_new("fixed-window 5/s", 64, err, sizeof err);
    assert_non_null(tab);
    sluice_table *sh = shared_table(path, sizeof path, "three", "fixed-window 4/s", 16);
    const sluice_limit_ref refs[3] = {sluice_ref_limiter(lim), sluice_ref_key(tab, "k", 1),
                                      sluice_ref_key(sh, "k", 1)};
    sluice_result per[3];
    const uint64_t t = 7 * SEC + 10; /* one window: [7 s, 8 s) */

    /* the limiter (3) refuses the fourth: nothing taken from the keys */
    for (int i = 0; i < 3; i++) assert_true(three(refs, 1, t, per));
    assert_false(three(refs, 1, t, per));
    assert_false(per[0].allowed);
    assert_int_equal(per[0].retry_after_ns, (int64_t)(8 * SEC - t));
    assert_int_equal(per[1].remaining, 2); /* would have allowed: without the permit */
    assert_int_equal(per[2].remaining, 1);
    expect_remaining(refs, t, 0, 2, 1);

    /* the limiter's spec changes (its window keeps its 3): the shared key
     * (4) refuses next, then its spec changes, then the table key's (5) */
    assert_int_equal(sluice_limiter_reconfigure_at(lim, "fixed-window 10/s", t + 1, err, sizeof err), 0);
    assert_true(three(refs, 1, t + 2, per));
    assert_false(three(refs, 1, t + 2, per));
    assert_true(per[0].allowed && per[1].allowed && !per[2].allowed);
    expect_remaining(refs, t + 2, 6, 1, 0);
    assert_int_equal(sluice_table_reconfigure_at(sh, "fixed-window 6/s", t + 3, err, sizeof err), 0);
    assert_true(three(refs, 1, t + 4, per));
    assert_false(three(refs, 1, t + 4, per));
    assert_true(per[0].allowed && !per[1].allowed && per[2].allowed);
    expect_remaining(refs, t + 4, 5, 0, 1);
    assert_int_equal(sluice_table_reconfigure_at(tab, "fixed-window 8/s", t + 5, err, sizeof err), 0);

    /* two permits: the shared key has one -- refused, nothing taken; one: taken
     * from all three */
    assert_false(three(refs, 2, t + 6, per));
    assert_true(per[0].allowed && per[1].allowed && !per[2].allowed);
    expect_remaining(refs, t + 6, 5, 3, 1);
    assert_true(three(refs, 1, t + 6, per));
    assert_int_equal(per[0].remaining, 4);
    assert_int_equal(per[1].remaining, 2);
    assert_int_equal(per[2].remaining, 0);
    expect_remaining(refs, t + 6, 4, 2, 0);

    /* the next window: each limit under its new spec, the composite the least */
    assert_true(three(refs, 6, 8 * SEC, per));
    expect_remaining(refs, 8 * SEC, 4, 2, 0);
    assert_false(three(refs, 1, 8 * SEC, per));
    sluice_table_free(sh);
    assert_int_equal(sluice_table_unlink(path), 0);
    sluice_table_free(tab);
    sluice_limiter_free(lim);
}

#define KT_THREADS 4
#define KT_CALLS 300

typedef struct ktctx {
    sluice_limit_ref refs[3];
    uint64_t t;
    pthread_barrier_t go;
    unsigned admitted[KT_THREADS];
    unsigned wrong[KT_THREADS]; /* answers that break the rule */
} ktctx;

typedef struct ktarg {
    ktctx *c;
    unsigned self;
} ktarg;

static void *kt_worker(void *v)
{
    ktarg *a = v;
    ktctx *c = a->c;
    static const unsigned char orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                               {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    pthread_barrier_wait(&c->go);
    for (unsigned k = 0; k < KT_CALLS; k++) {
        const unsigned char *o = orders[(a->self + k) % 6];
        const sluice_limit_ref refs[3] = {c->refs[o[0]], c->refs[o[1]], c->refs[o[2]]};
        sluice_result r, per[3];
        const bool details = k & 1;
        const bool ok = sluice_composite_try_acquire_at(refs, 3, 1, c->t, details ? &r : NULL,
                                                        details ? per : NULL);
        c->admitted[a->self] += ok;
        if (!details) continue;
        const unsigned allow = (unsigned)per[0].allowed + per[1].allowed + per[2].allowed;
        if (r.allowed != ok || (allow == 3) != ok) c->wrong[a->self]++;
    }
    return NULL;
}

static void test_three_kinds_threads(void **state)
{
    (void)state;
    char err[256], path[96];
    sluice_limiter *lim = mk("sliding-log 1000/s"); /* a window log: its mutex */
    sluice_table *tab = sluice_table_new("fixed-window 700/s", 64, err, sizeof err);
    assert_non_null(tab);
    sluice_table *sh = shared_table(path, sizeof path, "threads", "token-bucket 500/s", 16);
    ktctx c = {.refs = {sluice_ref_limiter(lim), sluice_ref_key(tab, "k", 1),
                        sluice_ref_key(sh, "k", 1)},
               .t = 5 * SEC};
    assert_int_equal(pthread_barrier_init(&c.go, NULL, KT_THREADS), 0);
    pthread_t th[KT_THREADS];
    ktarg args[KT_THREADS];
    for (unsigned i = 0; i < KT_THREADS; i++) {
        args[i] = (ktarg){&c, i};
        assert_int_equal(pthread_create(&th[i], NULL, kt_worker, &args[i]), 0);
    }
    unsigned admitted = 0;
    for (unsigned i = 0; i < KT_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        admitted += c.admitted[i];
        assert_int_equal(c.wrong[i], 0);
    }
    pthread_barrier_destroy(&c.go);
    /* 1200 calls at one instant: the shared key's 500, and each limit
     * charged exactly those */
    assert_int_equal(admitted, 500);
    expect_remaining(c.refs, c.t, 500, 200, 0);
    sluice_table_free(sh);
    assert_int_equal(sluice_table_unlink(path), 0);
    sluice_table_free(tab);
    sluice_limiter_free(lim);
}

static void test_shared_long_key(void **state)
{
    (void)state;
    char path[96];
    sluice_table *sh = shared_table(path, sizeof path, "long", "fixed-window 1/s", 16);
    sluice_limiter *lim = mk("fixed-window 5/s");
    char key[40];
    memset(key, 'x', sizeof key);
    const sluice_limit_ref refs[2] = {sluice_ref_limiter(lim), sluice_ref_key(sh, key, sizeof key)};
    sluice_result r;
    assert_true(sluice_composite_try_acquire_at(refs, 2, 1, SEC, &r, NULL));
    /* the key's one permit is taken: a single decision refuses it, and so
     * does the composite */
    assert_false(sluice_table_try_acquire_at(sh, key, sizeof key, 1, SEC, &r));
    assert_false(sluice_composite_try_acquire_at(refs, 2, 1, SEC, &r, NULL));
    sluice_table_stats st;
    sluice_table_stats_get(sh, &st);
    assert_int_equal(st.keys, 1); /* one key, stored once */
    assert_true(sluice_table_try_acquire_at(sh, key, sizeof key, 1, 2 * SEC, &r));
    assert_false(sluice_composite_try_acquire_at(refs, 2, 1, 2 * SEC, &r, NULL));
    sluice_table_free(sh);
    assert_int_equal(sluice_table_unlink(path), 0);
    sluice_limiter_free(lim);
}

int main(void)
{
    g_seed = tu_env_seed();
    g_scale = tu_env_scale(1.0);
    printf("SLUICE_TEST_SEED=%llu\n", ULL(g_seed));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_traces),
        cmocka_unit_test(test_random_traces_own_permits),
        cmocka_unit_test(test_bare_equals_detailed),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_bare_refusal),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_threads_reconfigure),
        cmocka_unit_test(test_three_kinds),
        cmocka_unit_test(test_three_kinds_threads),
        cmocka_unit_test(test_shared_long_key),
        cmocka_unit_test(test_keys_at_rest_stay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
