/* test_table_settle.c -- reservations and settles on keys of a table
 * (sluice_table_reserve_at, sluice_table_reservation_cancel_at,
 * sluice_table_reservation_settle_at; docs/decisions.md 3.10).
 *
 * The reference for settles is tests/ref_model.c's ref_model_settle, one
 * model per key, decision by decision on every algorithm; for cancels a
 * twin limiter (the limiter's own cancel is tested against its twin in
 * tests/limiter/test_reserve.c).  Then what only a table has: a key
 * removed, reset, evicted or made again between the reservation and its
 * settle (nothing settles on the new entry), a change of spec, a table
 * freed before its reservations (run under ASan), and threads on distinct
 * and shared keys (run under TSan).  Every test but test_processes runs
 * twice: on an in-process table, and ("... (region)") on a table in a
 * shared region; test_processes forks processes that decide on the key a
 * reservation of the parent's is open on (src/table/region_settle.c). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sluice.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "ref_model.h"

#define SEC 1000000000ULL

/* The placement the tests run on: in process, or (the tests named "...
 * (region)") a table in a shared region, attached in this process's
 * memory; the regions are freed after the test (region_off), once every
 * reservation holding their handles is closed. */
static bool in_region;
enum { REGIONS_MAX = 16, REGION_KEY_BYTES = 16 };
static void *regions[REGIONS_MAX];
static size_t nregions;

static sluice_table *mkt(const char *spec, size_t max_keys, unsigned flags)
{
    char err[256];
    sluice_table *t;
    if (in_region) {
        const size_t size = sluice_table_region_size(spec, max_keys, REGION_KEY_BYTES, err,
                                                     sizeof err);
        if (!size) fail_msg("%s: %s", spec, err);
        assert_true(nregions < REGIONS_MAX);
        void *reg = aligned_alloc(64, (size + 63) / 64 * 64);
        assert_non_null(reg);
        memset(reg, 0, size);
        regions[nregions++] = reg;
        t = sluice_table_attach(reg, size, spec, max_keys, REGION_KEY_BYTES, flags, err,
                                sizeof err);
    } else {
        t = sluice_table_new_flags(spec, max_keys, flags, err, sizeof err);
    }
    if (!t) fail_msg("%s: %s", spec, err);
    return t;
}

static int region_on(void **state)
{
    (void)state;
    in_region = true;
    return 0;
}

static int region_off(void **state)
{
    (void)state;
    in_region = false;
    while (nregions) free(regions[--nregions]);
    return 0;
}

/* What a request for 0 permits on key k reports remaining at t. */
static uint64_t remaining(sluice_table *t, const char *k, uint64_t at)
{
    sluice_result r;
    assert_true(sluice_table_try_acquire_at(t, k, strlen(k), 0, at, &r));
    return r.remaining;
}

/* ---- the answers -------------------------------------------------------- */

static void test_codes(void **state)
{
    (void)state;
    sluice_table *t = mkt("fixed-window 10/s", 64, 0);
    sluice_table_reservation rv;
    sluice_result r;
    /* a settle: once; then ENOENT for a settle or a cancel */
    assert_true(sluice_table_reserve_at(t, "a", 1, 4, SEC, 0, &rv, &r));
    assert_int_equal(rv.permits, 4);
    assert_int_equal(rv.at_ns, SEC);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 2, SEC), 0);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 2, SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_table_reservation_cancel_at(&rv, SEC), SLUICE_ENOENT);
    assert_int_equal(remaining(t, "a", SEC), 8);
    /* a window cannot be cancelled (and stays open) */
    assert_true(sluice_table_reserve_at(t, "a", 1, 3, SEC, 0, &rv, NULL));
    assert_int_equal(sluice_table_reservation_cancel_at(&rv, SEC), SLUICE_EINVAL);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 3, SEC), 0);
    /* refused: nothing taken, nothing to settle */
    assert_false(sluice_table_reserve_at(t, "a", 1, 11, SEC, 0, &rv, &r));
    assert_int_equal(r.retry_after_ns, -1);
    assert_int_equal(rv.permits, 0);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 1, SEC), SLUICE_ENOENT);
    /* bad arguments */
    assert_false(sluice_table_reserve_at(t, NULL, 3, 1, SEC, 0, &rv, &r));
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_false(sluice_table_reserve_at(NULL, "a", 1, 1, SEC, 0, &rv, &r));
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_int_equal(sluice_table_reservation_settle_at(NULL, 1, SEC), SLUICE_EINVAL);
    assert_int_equal(sluice_table_reservation_cancel_at(NULL, SEC), SLUICE_EINVAL);
    sluice_table_reservation zero;
    memset(&zero, 0, sizeof zero);
    assert_int_equal(sluice_table_reservation_settle_at(&zero, 1, SEC), SLUICE_EINVAL);
    assert_int_equal(sluice_table_reservation_cancel_at(&zero, SEC), SLUICE_EINVAL);
    assert_int_equal(remaining(t, "a", SEC), 5); /* none of them took anything */
    /* a bucket: cancel once, then a settle is refused */
    sluice_table *b = mkt("token-bucket 10/s", 64, 0);
    assert_true(sluice_table_reserve_at(b, "k", 1, 10, SEC, 0, NULL, NULL)); /* no rv: no hold */
    assert_true(sluice_table_reserve_at(b, "k", 1, 5, SEC, SEC, &rv, NULL));
    assert_int_equal(rv.wait_ns, SEC / 2);
    assert_int_equal(sluice_table_reservation_cancel_at(&rv, SEC), 0);
    assert_int_equal(sluice_table_reservation_cancel_at(&rv, SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 9, SEC), SLUICE_ENOENT);
    assert_int_equal(remaining(b, "k", SEC), 0);
    assert_int_equal(remaining(b, "k", SEC + SEC / 10), 1); /* as before it: no debt */
    /* a probe reserves nothing; on a key not held it settles nothing */
    assert_true(sluice_table_reserve_at(b, "new", 3, 0, SEC, 0, &rv, NULL));
    assert_int_equal(sluice_table_reservation_cancel_at(&rv, SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 4, SEC), SLUICE_ENOENT);
    sluice_table_free(b);
    sluice_table_free(t);
}

/* A reservation is counted as a request; a settle is not. */
static void test_stats(void **state)
{
    (void)state;
    sluice_table *t = mkt("sliding-log 5/s", 8, 0);
    sluice_table_reservation rv;
    assert_true(sluice_table_reserve_at(t, "x", 1, 2, SEC, 0, &rv, NULL));
    assert_false(sluice_table_reserve_at(t, "x", 1, 4, SEC, 0, NULL, NULL));
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 9, SEC), 0);
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.decisions.requests_allowed, 1);
    assert_int_equal(st.decisions.requests_denied, 1);
    sluice_table_free(t);
}

/* A full table refuses a new key's reservation as it refuses its request
 * (SLUICE_EFULL, nothing taken, no hold), and makes room from keys at
 * rest, in any shard. */
static void test_full(void **state)
{
    (void)state;
    sluice_table *t = mkt("fixed-window 10/s", 1, 0);
    sluice_table_reservation rv, x;
    sluice_result r;
    assert_true(sluice_table_reserve_at(t, "a", 1, 2, SEC, 0, &rv, NULL));
    assert_false(sluice_table_reserve_at(t, "b", 1, 1, SEC, 0, &x, &r));
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_null(x.table);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 2, SEC), 0);
    assert_true(sluice_table_reserve_at(t, "b", 1, 1, 2 * SEC, 0, &x, &r)); /* a at rest */
    assert_int_equal(sluice_table_reservation_settle_at(&x, 1, 2 * SEC), 0);
    sluice_table_free(t);
    /* many shards: the room is in another shard */
    enum { N = 4096 };
    t = mkt("fixed-window 10/s", N, 0);
    char k[16];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof k, "k%d", i);
        assert_true(sluice_table_try_acquire_at(t, k, strlen(k), 1, SEC, NULL));
    }
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.keys, N);
    for (int i = 0; i < 64; i++) { /* every one a new key, all others at rest */
        snprintf(k, sizeof k, "n%d", i);
        assert_true(sluice_table_reserve_at(t, k, strlen(k), 3, 3 * SEC, 0, &rv, &r));
        assert_int_equal(sluice_table_reservation_settle_at(&rv, 3, 3 * SEC), 0);
    }
    sluice_table_free(t);
}

/* ---- against the reference model ---------------------------------------- */

typedef struct settle_case {
    const char *spec;
    ref_params rp;
} settle_case;

static const settle_case cases[] = {
    {"fixed-window 10/s", {.alg = REF_FIXED_WINDOW, .limit = 10, .period_ns = SEC}},
    {"sliding-approx 10/s", {.alg = REF_SLIDING_APPROX, .limit = 10, .period_ns = SEC}},
    {"sliding-log 10/s", {.alg = REF_SLIDING_LOG, .limit = 10, .period_ns = SEC}},
    {"sliding-wheel 10/s slots=4",
     {.alg = REF_SLIDING_WHEEL, .limit = 10, .period_ns = SEC, .slots = 4}},
    {"token-bucket 10/s burst=8",
     {.alg = REF_TOKEN_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 8}},
    {"token-bucket 3/7s burst=5",
     {.alg = REF_TOKEN_BUCKET, .limit = 3, .period_ns = 7 * SEC, .capacity = 5}},
    {"token-bucket 3/7s burst=3000000000", /* burst*rw >= 2^64: not packed */
     {.alg = REF_TOKEN_BUCKET, .limit = 3, .period_ns = 7 * SEC, .capacity = 3000000000}},
    {"leaky-bucket 10/s capacity=6 nodelay",
     {.alg = REF_LEAKY_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 6, .nodelay = true}},
};

/* Random decisions, reservations (due at once, or a bucket's booked
 * ahead) and settles (0, below, equal, above, far above) at current and
 * stale times, on three keys of one table (long enough for one to be held
 * by its copy), each against its own model: every answer, every
 * reservation's due time, and after every step the remaining permits of
 * the key. */
static void test_model(void **state)
{
    (void)state;
    uint64_t seed = tu_env_seed();
    print_message("seed %llu (SLUICE_TEST_SEED)\n", (unsigned long long)seed);
    enum { STEPS = 3000, OPEN = 8, KEYS = 3 };
    static const char *const keys[KEYS] = {"k0", "", "a key longer than sixteen bytes"};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const settle_case *c = &cases[ci];
        sluice_table *t = mkt(c->spec, 64, 0);
        ref_model *m[KEYS];
        sluice_table_reservation rv[OPEN];
        ref_resv mv[OPEN];
        size_t key_of[OPEN];
        bool open[OPEN] = {false};
        const uint64_t W = c->rp.period_ns;
        const bool bucket = c->rp.alg == REF_TOKEN_BUCKET || c->rp.alg == REF_LEAKY_BUCKET;
        uint64_t now = 5 * W;
        /* every key made first: a table with room reclaims none, so each
         * key keeps its one entry all through the run */
        for (size_t k = 0; k < KEYS; k++) {
            m[k] = ref_model_new(&c->rp);
            assert_non_null(m[k]);
            assert_true(sluice_table_try_acquire_at(t, keys[k], strlen(keys[k]), 1, now, NULL));
            assert_true(ref_model_decide(m[k], 1, now, NULL));
        }
        const uint64_t cap = ref_model_max_grant(m[0]);
        for (int i = 0; i < STEPS; i++) {
            uint64_t dice = tu_splitmix64_below(&seed, 100);
            if (dice < 30) now += tu_splitmix64_below(&seed, W / 4 + 1);
            uint64_t at = dice % 10 == 0 ? now - tu_splitmix64_below(&seed, W) : now;
            const size_t slot = (size_t)tu_splitmix64_below(&seed, OPEN);
            size_t k = (size_t)tu_splitmix64_below(&seed, KEYS);
            uint64_t p = tu_splitmix64_below(&seed, cap + 2);
            sluice_result r;
            ref_result mr;
            if (dice < 45) {
                bool ok = sluice_table_try_acquire_at(t, keys[k], strlen(keys[k]), p, at, &r);
                bool mok = ref_model_decide(m[k], p, at, &mr);
                if (ok != mok || r.remaining != mr.remaining ||
                    r.retry_after_ns != mr.retry_after_ns)
                    fail_msg("%s step %d: try %llu at %llu: %d/%llu/%lld, model %d/%llu/%lld",
                             c->spec, i, (unsigned long long)p, (unsigned long long)at, ok,
                             (unsigned long long)r.remaining, (long long)r.retry_after_ns, mok,
                             (unsigned long long)mr.remaining, (long long)mr.retry_after_ns);
            } else if (dice < 75 && !open[slot]) {
                const bool ahead = bucket && dice % 2;
                const uint64_t mw = ahead ? tu_splitmix64_below(&seed, 2 * W) : 0;
                bool ok = sluice_table_reserve_at(t, keys[k], strlen(keys[k]), p, at, mw,
                                                  &rv[slot], &r);
                bool mok = ref_model_reserve(m[k], p, at, mw, &mr, &mv[slot]);
                if (ok != mok || (ahead ? r.wait_ns != mr.wait_ns : r.remaining != mr.remaining))
                    fail_msg("%s step %d: reserve %llu at %llu: %d/%llu/%llu, model %d/%llu/%llu",
                             c->spec, i, (unsigned long long)p, (unsigned long long)at, ok,
                             (unsigned long long)r.remaining, (unsigned long long)r.wait_ns,
                             mok, (unsigned long long)mr.remaining,
                             (unsigned long long)mr.wait_ns);
                if (ok) {
                    if (rv[slot].at_ns != mv[slot].at)
                        fail_msg("%s step %d: due at %llu, model at %llu", c->spec, i,
                                 (unsigned long long)rv[slot].at_ns,
                                 (unsigned long long)mv[slot].at);
                    open[slot] = true;
                    key_of[slot] = k;
                }
            } else if (open[slot]) {
                k = key_of[slot];
                const uint64_t rp = rv[slot].permits;
                uint64_t a;
                switch (tu_splitmix64_below(&seed, 5)) {
                case 0: a = 0; break;
                case 1: a = rp ? tu_splitmix64_below(&seed, rp) : 0; break;
                case 2: a = rp; break;
                case 3: a = rp + 1 + tu_splitmix64_below(&seed, cap < 100 ? cap : 100); break;
                default: a = rp + tu_splitmix64_below(&seed, cap < 100 ? 4 * cap : 400); break;
                }
                assert_int_equal(sluice_table_reservation_settle_at(&rv[slot], a, at), 0);
                ref_model_settle(m[k], &mv[slot], a, at);
                assert_int_equal(sluice_table_reservation_settle_at(&rv[slot], a, at),
                                 SLUICE_ENOENT);
                open[slot] = false;
            }
            bool ok = sluice_table_try_acquire_at(t, keys[k], strlen(keys[k]), 0, at, &r);
            bool mok = ref_model_decide(m[k], 0, at, &mr);
            if (!ok || !mok || r.remaining != mr.remaining)
                fail_msg("%s step %d: key %zu remaining %llu at %llu, model %llu", c->spec, i,
                         k, (unsigned long long)r.remaining, (unsigned long long)at,
                         (unsigned long long)mr.remaining);
        }
        for (size_t s = 0; s < OPEN; s++) /* close the rest: the table's holds */
            if (open[s]) assert_int_equal(sluice_table_reservation_settle_at(&rv[s], rv[s].permits, now), 0);
        for (size_t k = 0; k < KEYS; k++) ref_model_free(m[k]);
        sluice_table_free(t);
    }
}

/* A bucket's cancel on a table key is the limiter's: checked against a
 * twin limiter given the same calls, before and after the due time, with
 * a later booking between. */
static void test_cancel_twin(void **state)
{
    (void)state;
    static const char *const specs[] = {"token-bucket 10/s burst=4", "leaky-bucket 10/s capacity=4",
                                        "token-bucket 3/7s burst=3000000000"};
    for (size_t si = 0; si < 3; si++) {
        char err[256];
        sluice_table *t = mkt(specs[si], 16, 0);
        sluice_limiter *l = sluice_limiter_new(specs[si], err, sizeof err);
        assert_non_null(l);
        uint64_t now = SEC;
        for (int round = 0; round < 40; round++) {
            sluice_table_reservation a, b;
            sluice_reservation la, lb;
            sluice_result r1, r2;
            const uint64_t p = 1 + (uint64_t)round % 4;
            bool o1 = sluice_table_reserve_at(t, "k", 1, p, now, 2 * SEC, &a, &r1);
            bool o2 = sluice_reserve_at(l, p, now, 2 * SEC, &la, &r2);
            assert_int_equal(o1, o2);
            assert_int_equal(r1.wait_ns, r2.wait_ns);
            if (round % 3 == 0) { /* a later booking between */
                assert_int_equal(sluice_table_reserve_at(t, "k", 1, 1, now, 2 * SEC, &b, NULL),
                                 sluice_reserve_at(l, 1, now, 2 * SEC, &lb, NULL));
            }
            const uint64_t when = now + (uint64_t)(round % 5) * SEC / 10;
            if (o1)
                assert_int_equal(sluice_table_reservation_cancel_at(&a, when),
                                 sluice_reservation_cancel_at(&la, when));
            if (round % 3 == 0 && b.state != 0 && b.table)
                assert_int_equal(sluice_table_reservation_settle_at(&b, b.permits, when), 0);
            for (uint64_t q = 0; q <= 4; q++) {
                bool x = sluice_table_try_acquire_at(t, "k", 1, q, when, &r1);
                bool y = sluice_try_acquire_at(l, q, when, &r2);
                assert_int_equal(x, y);
                assert_int_equal(r1.retry_after_ns, r2.retry_after_ns);
                if (x) break;
            }
            now += SEC / 7;
        }
        sluice_limiter_free(l);
        sluice_table_free(t);
    }
}

/* ---- what only a table has ---------------------------------------------- */

/* A key dropped (removed, reset) between the reservation and its settle,
 * and made again: the settle finds another entry and changes nothing --
 * no give-back to the new entry (which would let through permits it never
 * took), no overdraft. */
static void test_after_reset(void **state)
{
    (void)state;
    for (int how = 0; how < 3; how++) {
        sluice_table *t = mkt("fixed-window 10/s", 64, 0);
        sluice_table_reservation rv, up;
        assert_true(sluice_table_reserve_at(t, "u", 1, 6, SEC, 0, &rv, NULL));
        assert_true(sluice_table_reserve_at(t, "u", 1, 1, SEC, 0, &up, NULL));
        if (how == 0) assert_int_equal(sluice_table_reset(t, "u", 1), 0);
        else if (how == 1) assert_int_equal(sluice_table_remove(t, "u", 1), 0);
        if (how < 2) {
            /* made again, and filled */
            assert_true(sluice_table_try_acquire_at(t, "u", 1, 10, SEC, NULL));
            assert_int_equal(sluice_table_reservation_settle_at(&rv, 0, SEC), SLUICE_ENOENT);
            assert_int_equal(remaining(t, "u", SEC), 0);
            assert_int_equal(sluice_table_reservation_settle_at(&up, 5, SEC), SLUICE_ENOENT);
            assert_false(sluice_table_try_acquire_at(t, "u", 1, 0 + 1, SEC, NULL));
            assert_int_equal(remaining(t, "u", 2 * SEC), 10); /* no overdraft either */
        } else { /* removed and not made again */
            assert_int_equal(sluice_table_remove(t, "u", 1), 0);
            assert_int_equal(sluice_table_reservation_settle_at(&rv, 9, SEC), SLUICE_ENOENT);
            assert_int_equal(sluice_table_reservation_cancel_at(&up, SEC), SLUICE_EINVAL);
            assert_int_equal(sluice_table_reservation_settle_at(&up, 0, SEC), SLUICE_ENOENT);
            assert_int_equal(remaining(t, "u", SEC), 10);
        }
        sluice_table_free(t);
    }
    /* a bucket's cancel too */
    sluice_table *t = mkt("token-bucket 10/s", 64, 0);
    sluice_table_reservation rv;
    assert_true(sluice_table_reserve_at(t, "b", 1, 8, SEC, 0, &rv, NULL));
    assert_int_equal(sluice_table_reset(t, "b", 1), 0);
    assert_true(sluice_table_try_acquire_at(t, "b", 1, 10, SEC, NULL));
    assert_int_equal(sluice_table_reservation_cancel_at(&rv, SEC), SLUICE_ENOENT);
    assert_int_equal(remaining(t, "b", SEC), 0);
    sluice_table_free(t);
}

/* A key evicted (SLUICE_TABLE_EVICT_LRU) while its reservation is open,
 * then made again: the same.  And a key reclaimed at rest to make room. */
static void test_after_eviction(void **state)
{
    (void)state;
    sluice_table *t = mkt("sliding-approx 10/s", 1, SLUICE_TABLE_EVICT_LRU);
    sluice_table_reservation rv;
    assert_true(sluice_table_reserve_at(t, "a", 1, 7, SEC, 0, &rv, NULL));
    assert_true(sluice_table_try_acquire_at(t, "b", 1, 1, SEC, NULL)); /* evicts a */
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 10, SEC, NULL)); /* evicts b: a anew */
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 1, SEC), SLUICE_ENOENT);
    assert_int_equal(remaining(t, "a", SEC), 0);
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.evicted, 2);
    sluice_table_free(t);

    /* reclaimed at rest: the reservation's window has passed */
    t = mkt("fixed-window 10/s", 1, 0);
    assert_true(sluice_table_reserve_at(t, "a", 1, 4, SEC, 0, &rv, NULL));
    assert_true(sluice_table_try_acquire_at(t, "b", 1, 1, 3 * SEC, NULL)); /* a at rest: reclaimed */
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 1, 5 * SEC, NULL)); /* b likewise: a anew */
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 30, 5 * SEC), SLUICE_ENOENT);
    assert_int_equal(remaining(t, "a", 5 * SEC), 9);
    sluice_table_free(t);
}

/* The same key, held all along: a settle after other keys came and went
 * (the table has room) still acts, as the limiter's. */
static void test_other_keys(void **state)
{
    (void)state;
    sluice_table *t = mkt("fixed-window 10/s", 4096, 0);
    sluice_table_reservation rv;
    assert_true(sluice_table_reserve_at(t, "mine", 4, 8, SEC, 0, &rv, NULL));
    char k[16];
    for (int i = 0; i < 100; i++) { /* made and removed, other keys */
        snprintf(k, sizeof k, "o%d", i);
        assert_true(sluice_table_try_acquire_at(t, k, strlen(k), 1, SEC, NULL));
        if (i % 2) assert_int_equal(sluice_table_remove(t, k, strlen(k)), 0);
    }
    /* no other key's making or removal touches mine's stamp (a region: its
     * slot's generation) */
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 2, SEC), 0);
    assert_int_equal(remaining(t, "mine", SEC), 8);
    sluice_table_free(t);
}

/* Churn of other keys while a reserved key stays: thousands of keys made
 * and removed around it (the Robin Hood shifts move its entry back and
 * forth), then one settle above the reservation and one below.  The
 * overdraft is charged and the give-back made, as the model's.  (Before
 * each entry had its own stamp, the table kept one generation per bucket
 * of hashes, 256 buckets here: 4000 makings moved the key's bucket with
 * odds 1 - 2e-7, and both settles changed nothing.) */
static void test_churn(void **state)
{
    (void)state;
    static const settle_case churn_cases[] = {
        {"token-bucket 10/s burst=8",
         {.alg = REF_TOKEN_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 8}},
        {"fixed-window 10/s", {.alg = REF_FIXED_WINDOW, .limit = 10, .period_ns = SEC}},
        {"sliding-log 10/s", {.alg = REF_SLIDING_LOG, .limit = 10, .period_ns = SEC}},
    };
    enum { MAKINGS = 4000, HELD = 200 };
    for (size_t ci = 0; ci < sizeof churn_cases / sizeof churn_cases[0]; ci++) {
        const settle_case *c = &churn_cases[ci];
        sluice_table *t = mkt(c->spec, 256, 0);
        ref_model *m = ref_model_new(&c->rp);
        assert_non_null(m);
        const uint64_t t0 = 3 * SEC, t1 = t0 + SEC / 10;
        sluice_table_reservation lo, hi;
        ref_resv mlo, mhi;
        ref_result mr;
        assert_true(sluice_table_reserve_at(t, "A", 1, 5, t0, 0, &lo, NULL));
        assert_true(ref_model_reserve(m, 5, t0, 0, &mr, &mlo));
        assert_true(sluice_table_reserve_at(t, "A", 1, 2, t0, 0, &hi, NULL));
        assert_true(ref_model_reserve(m, 2, t0, 0, &mr, &mhi));
        /* HELD keys stay (the table near full: long runs around A's slot),
         * then MAKINGS more come and go, each made and removed */
        char k[24];
        for (int i = 0; i < HELD + MAKINGS; i++) {
            snprintf(k, sizeof k, "other-%d", i);
            assert_true(sluice_table_try_acquire_at(t, k, strlen(k), 1, t0, NULL));
            if (i >= HELD) assert_int_equal(sluice_table_remove(t, k, strlen(k)), 0);
        }
        /* above: 9 used of 2 reserved, 7 charged past the limit */
        assert_int_equal(sluice_table_reservation_settle_at(&hi, 9, t1), 0);
        ref_model_settle(m, &mhi, 9, t1);
        assert_true(ref_model_decide(m, 0, t1, &mr));
        assert_int_equal(remaining(t, "A", t1), mr.remaining);
        /* below: 1 used of 5, 4 back (a sliding-log keeps them: 3.10) */
        assert_int_equal(sluice_table_reservation_settle_at(&lo, 1, t1), 0);
        ref_model_settle(m, &mlo, 1, t1);
        for (uint64_t at = t1; at < t1 + 3 * SEC; at += SEC / 4) {
            assert_true(ref_model_decide(m, 0, at, &mr));
            assert_int_equal(remaining(t, "A", at), mr.remaining);
        }
        ref_model_free(m);
        sluice_table_free(t);
    }
}

/* A key dropped (removed, reset, evicted, reclaimed at rest) and made
 * again in the same slot, and reserved on again: the old reservation
 * still finds another entry (SLUICE_ENOENT, nothing changed), the new one
 * acts -- the new entry's stamp is a new number, not the old one's. */
static void test_remade_stamp(void **state)
{
    (void)state;
    for (int how = 0; how < 4; how++) {
        /* one key at most: a key made again takes the same slot */
        sluice_table *t = mkt("fixed-window 10/s", 1,
                              how == 2 ? SLUICE_TABLE_EVICT_LRU : 0);
        sluice_table_reservation old, now;
        assert_true(sluice_table_reserve_at(t, "a", 1, 4, SEC, 0, &old, NULL));
        uint64_t at = SEC;
        if (how == 0) {
            assert_int_equal(sluice_table_remove(t, "a", 1), 0);
        } else if (how == 1) {
            assert_int_equal(sluice_table_reset(t, "a", 1), 0);
        } else if (how == 2) {
            assert_true(sluice_table_try_acquire_at(t, "b", 1, 1, SEC, NULL)); /* evicts a */
            assert_int_equal(sluice_table_remove(t, "b", 1), 0);
        } else {
            at = 3 * SEC; /* a at rest: b takes its room, then goes */
            assert_true(sluice_table_try_acquire_at(t, "b", 1, 1, at, NULL));
            assert_int_equal(sluice_table_remove(t, "b", 1), 0);
        }
        assert_true(sluice_table_reserve_at(t, "a", 1, 3, at, 0, &now, NULL)); /* a anew */
        assert_int_equal(sluice_table_reservation_settle_at(&old, 0, at), SLUICE_ENOENT);
        assert_int_equal(sluice_table_reservation_settle_at(&old, 0, at), SLUICE_ENOENT);
        assert_int_equal(remaining(t, "a", at), 7); /* nothing given back to the new entry */
        assert_int_equal(sluice_table_reservation_settle_at(&now, 5, at), 0); /* 2 over */
        assert_int_equal(remaining(t, "a", at), 5);
        sluice_table_free(t);
    }
}

/* The entries' stamps come with the table's first reservation: when that
 * allocation fails, the reservation is refused with SLUICE_ENOMEM and takes
 * nothing; a reservation with no rv needs none; the next one allocates
 * them.  (In process only: a region's generations are in the region.) */
static int alloc_off(void **state)
{
    (void)state;
    tu_alloc_disarm(); /* a failed check leaves nothing armed for the next test */
    return 0;
}

static void test_stamps_oom(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0); /* tests/testutil.h */
    sluice_table *t = mkt("token-bucket 10/s", 1000, 0);
    sluice_table_reservation rv;
    sluice_result r;
    tu_alloc_arm(0, true); /* every allocation from now on fails */
    assert_false(sluice_table_reserve_at(t, "k", 1, 4, SEC, 0, &rv, &r));
    assert_int_equal(r.error, SLUICE_ENOMEM);
    assert_int_equal(rv.permits, 0);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 0, SEC), SLUICE_ENOENT);
    assert_int_equal(remaining(t, "k", SEC), 10); /* nothing taken, the key not made */
    assert_true(sluice_table_reserve_at(t, "k", 1, 3, SEC, 0, NULL, &r)); /* no rv: no stamps */
    assert_int_equal(remaining(t, "k", SEC), 7);
    tu_alloc_disarm();
    const long calls = tu_alloc_calls();
    assert_true(sluice_table_reserve_at(t, "k", 1, 4, SEC, 0, &rv, &r));
    assert_int_equal(tu_alloc_calls(), calls + 1); /* the stamps, once */
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 2, SEC), 0); /* 2 back */
    assert_int_equal(remaining(t, "k", SEC), 5);
    assert_true(sluice_table_reserve_at(t, "k", 1, 1, SEC, 0, &rv, NULL));
    assert_int_equal(tu_alloc_calls(), calls + 1);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 1, SEC), 0);
    assert_int_equal(remaining(t, "k", SEC), 4);
    sluice_table_free(t);
    assert_int_equal(tu_alloc_live(), 0);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

/* A change of spec between the reservation and its settle: nothing goes
 * back (the units changed); an excess is still charged, under the new
 * spec. */
static void test_after_reconfigure(void **state)
{
    (void)state;
    char err[256];
    sluice_table *t = mkt("fixed-window 10/s", 16, 0);
    sluice_table_reservation a, b;
    assert_true(sluice_table_reserve_at(t, "k", 1, 6, SEC, 0, &a, NULL));
    assert_true(sluice_table_reserve_at(t, "k", 1, 1, SEC, 0, &b, NULL));
    assert_int_equal(sluice_table_reconfigure_at(t, "fixed-window 20/s", SEC, err, sizeof err), 0);
    assert_int_equal(sluice_table_reservation_settle_at(&a, 0, SEC), 0);
    assert_int_equal(remaining(t, "k", SEC), 13);
    assert_int_equal(sluice_table_reservation_settle_at(&b, 4, SEC), 0);
    assert_int_equal(remaining(t, "k", SEC), 10);
    sluice_table_free(t);
    if (in_region) return; /* a region has no overrides */
    /* an override set on the key, the same */
    t = mkt("token-bucket 10/s", 16, 0);
    assert_true(sluice_table_reserve_at(t, "k", 1, 6, SEC, 0, &a, NULL));
    assert_int_equal(sluice_table_override_set_at(t, "k", 1, "token-bucket 10/s burst=20", SEC,
                                                  err, sizeof err), 0);
    assert_int_equal(sluice_table_reservation_settle_at(&a, 0, SEC), 0);
    assert_int_equal(remaining(t, "k", SEC), 4);
    sluice_table_free(t);
}

/* The overdraft: charged at once past the limit, as the limiter's; and
 * at the end of the time axis. */
static void test_overdraft(void **state)
{
    (void)state;
    sluice_table *t = mkt("token-bucket 10/s", 16, 0);
    sluice_table_reservation rv;
    assert_true(sluice_table_reserve_at(t, "k", 1, 2, SEC, 0, &rv, NULL));
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 25, SEC), 0);
    sluice_result r;
    assert_false(sluice_table_try_acquire_at(t, "k", 1, 1, SEC, &r));
    /* 15 in debt: 16 to earn for one permit, 1.6 s */
    assert_int_equal(r.retry_after_ns, 16 * SEC / 10);
    assert_true(sluice_table_try_acquire_at(t, "k", 1, 1, SEC + 16 * SEC / 10, NULL));
    /* near 2^63: times clamp, a huge overdraft saturates */
    const uint64_t end = (uint64_t)INT64_MAX - 5;
    assert_true(sluice_table_reserve_at(t, "e", 1, 1, end, 0, &rv, NULL));
    assert_int_equal(sluice_table_reservation_settle_at(&rv, UINT64_MAX, UINT64_MAX), 0);
    assert_false(sluice_table_try_acquire_at(t, "e", 1, 1, UINT64_MAX, &r));
    sluice_table_free(t);
}

/* The table freed with reservations open: it lives on for them, and the
 * last one closed frees it (ASan and LeakSanitizer watch); b's cancel
 * gives back, after the long key's reservation. */
static void test_free_first(void **state)
{
    (void)state;
    static const char *const specs[] = {"token-bucket 10/s", "sliding-log 20/s"};
    for (int si = 0; si < 2; si++) {
        sluice_table *t = mkt(specs[si], 16, 0);
        sluice_table_reservation a, b, c;
        assert_true(sluice_table_reserve_at(t, "zzzzzzzzzzzzzzzzzzzzzz", 22, 1, SEC, SEC, &c, NULL));
        assert_true(sluice_table_reserve_at(t, "a", 1, 10, SEC, SEC, &a, NULL));
        assert_true(sluice_table_reserve_at(t, "a", 1, 3, SEC, SEC, &b, NULL)); /* booked ahead */
        sluice_table_free(t);
        assert_int_equal(sluice_table_reservation_settle_at(&a, 5, SEC), 0);
        assert_int_equal(sluice_table_reservation_settle_at(&a, 5, SEC), SLUICE_ENOENT);
        if (si == 0) assert_int_equal(sluice_table_reservation_cancel_at(&b, SEC), 0);
        else assert_int_equal(sluice_table_reservation_settle_at(&b, 0, SEC), 0);
        assert_int_equal(sluice_table_reservation_settle_at(&c, 1, SEC), 0); /* the last: frees */
        assert_null(c.table);
        assert_int_equal(sluice_table_reservation_settle_at(&c, 1, SEC), SLUICE_ENOENT);
    }
}

/* ---- across processes (a table in a shared region) ----------------------- */

#define CHILD_CHECK(c)                                                  \
    do {                                                                \
        if (!(c)) {                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);     \
            _exit(1);                                                   \
        }                                                               \
    } while (0)

typedef struct xproc {
    void *reg;
    size_t size;
    const char *spec;
} xproc;

/* Run `step` in a forked process on its own handle of the region (attached
 * there, as an unrelated process would), and wait for it: it exits 0 when
 * every check held. */
static void in_child(const xproc *x, int step, void (*fn)(sluice_table *, int))
{
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[256];
        sluice_table *t = sluice_table_attach(x->reg, x->size, x->spec, 64, REGION_KEY_BYTES, 0,
                                              err, sizeof err);
        CHILD_CHECK(t);
        fn(t, step);
        sluice_table_free(t);
        _exit(0);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) fail_msg("step %d: the child failed", step);
}

static void other_process(sluice_table *t, int step)
{
    sluice_result r;
    sluice_table_reservation rv;
    switch (step) {
    case 0: /* admits on the key the parent reserved on */
        CHILD_CHECK(sluice_table_try_acquire_at(t, "k", 1, 3, SEC, &r) && r.remaining == 3);
        break;
    case 1: /* sees the parent's settle below, then its overdraft */
        CHILD_CHECK(sluice_table_try_acquire_at(t, "k", 1, 0, SEC, &r) && r.remaining == 6);
        break;
    case 2:
        CHILD_CHECK(!sluice_table_try_acquire_at(t, "k", 1, 1, SEC, &r));
        CHILD_CHECK(sluice_table_try_acquire_at(t, "k", 1, 10, 2 * SEC, &r));
        break;
    case 3: /* removes the key and makes it again */
        CHILD_CHECK(sluice_table_remove(t, "r", 1) == 0);
        CHILD_CHECK(sluice_table_try_acquire_at(t, "r", 1, 10, 3 * SEC, &r));
        break;
    case 4: /* reserves and dies without settling */
        CHILD_CHECK(sluice_table_reserve_at(t, "d", 1, 7, 3 * SEC, 0, &rv, &r));
        _exit(0);
    default: break;
    }
}

/* One process reserves, another admits on the same key, the first
 * settles: 3.10's rules hold across processes (the window's give-back,
 * the overdraft every process sees); a key removed and made again by
 * another process settles nothing; a process that dies with a reservation
 * open leaves its permits taken and nothing else. */
static void test_processes(void **state)
{
    (void)state;
    char err[256];
    xproc x = {.spec = "fixed-window 10/s"};
    x.size = sluice_table_region_size(x.spec, 64, REGION_KEY_BYTES, err, sizeof err);
    assert_true(x.size > 0);
    x.reg = mmap(NULL, x.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(x.reg != MAP_FAILED);
    sluice_table *t = sluice_table_attach(x.reg, x.size, x.spec, 64, REGION_KEY_BYTES, 0, err,
                                          sizeof err);
    if (!t) fail_msg("%s", err);
    sluice_table_reservation rv;
    assert_true(sluice_table_reserve_at(t, "k", 1, 4, SEC, 0, &rv, NULL));
    in_child(&x, 0, other_process);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 1, SEC), 0); /* 3 back */
    in_child(&x, 1, other_process);
    assert_true(sluice_table_reserve_at(t, "k", 1, 2, SEC, 0, &rv, NULL));
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 8, SEC), 0); /* 12 of 10 */
    assert_int_equal(remaining(t, "k", SEC), 0);
    in_child(&x, 2, other_process);
    /* made again by another process: nothing settles on the new entry */
    assert_true(sluice_table_reserve_at(t, "r", 1, 6, 3 * SEC, 0, &rv, NULL));
    in_child(&x, 3, other_process);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 0, 3 * SEC), SLUICE_ENOENT);
    assert_int_equal(remaining(t, "r", 3 * SEC), 0);
    /* died with a reservation open: its permits stay taken */
    in_child(&x, 4, other_process);
    assert_int_equal(remaining(t, "d", 3 * SEC), 3);
    assert_true(sluice_table_reserve_at(t, "d", 1, 3, 3 * SEC, 0, &rv, NULL));
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 3, 3 * SEC), 0);
    /* a bucket: admitted on by another process after the reservation, so
     * a settle below gives nothing back (3.10) */
    sluice_table_free(t);
    munmap(x.reg, x.size);

    x.spec = "token-bucket 10/s";
    x.size = sluice_table_region_size(x.spec, 64, REGION_KEY_BYTES, err, sizeof err);
    x.reg = mmap(NULL, x.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(x.reg != MAP_FAILED);
    t = sluice_table_attach(x.reg, x.size, x.spec, 64, REGION_KEY_BYTES, 0, err, sizeof err);
    if (!t) fail_msg("%s", err);
    assert_true(sluice_table_reserve_at(t, "k", 1, 4, SEC, 0, &rv, NULL));
    in_child(&x, 0, other_process);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 1, SEC), 0);
    assert_int_equal(remaining(t, "k", SEC), 3); /* nothing back */
    assert_true(sluice_table_reserve_at(t, "k", 1, 3, SEC, 0, &rv, NULL));
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 1, SEC), 0);
    assert_int_equal(remaining(t, "k", SEC), 2); /* nothing since: 2 back */
    sluice_table_free(t);
    munmap(x.reg, x.size);
}

/* The slots' generations are region memory, and so hostile input: after
 * every one of them is overwritten (a co-tenant's stray writes), an open
 * reservation no longer finds its entry -- it changes nothing, says
 * SLUICE_ENOENT and lets its hold go -- and the table and its new
 * reservations go on as before (whatever the words hold, they are only
 * compared).  Offsets as src/table/region_attach.c lays them out: the
 * header's shard count, slots per shard and stride at 64, 68 and 76; the
 * generations after the slots and the 8 configurations of 144 bytes. */
static void test_region_damaged_generation(void **state)
{
    (void)state;
    char err[256];
    const char *spec = "fixed-window 10/s";
    const size_t size = sluice_table_region_size(spec, 300, REGION_KEY_BYTES, err, sizeof err);
    assert_true(size > 0);
    unsigned char *reg = aligned_alloc(64, (size + 63) / 64 * 64);
    assert_non_null(reg);
    memset(reg, 0, size);
    sluice_table *t = sluice_table_attach(reg, size, spec, 300, REGION_KEY_BYTES, 0, err,
                                          sizeof err);
    if (!t) fail_msg("%s", err);
    sluice_table_reservation rv;
    assert_true(sluice_table_reserve_at(t, "k", 1, 4, SEC, 0, &rv, NULL));
    uint32_t nshards, cap, stride;
    memcpy(&nshards, reg + 64, 4);
    memcpy(&cap, reg + 68, 4);
    memcpy(&stride, reg + 76, 4);
    assert_true(nshards == 2 && cap > 0 && stride >= 64);
    const size_t gens = 512 + (size_t)nshards * 128 + (size_t)nshards * cap * stride + 8 * 144;
    assert_true(gens + (size_t)nshards * cap * 4 <= size);
    memset(reg + gens, 0xa5, (size_t)nshards * cap * 4);
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 0, SEC), SLUICE_ENOENT);
    assert_null(rv.table);
    assert_int_equal(remaining(t, "k", SEC), 6); /* nothing given back */
    assert_true(sluice_table_reserve_at(t, "k", 1, 4, SEC, 0, &rv, NULL));
    assert_int_equal(sluice_table_reservation_settle_at(&rv, 1, SEC), 0); /* 3 back */
    assert_int_equal(remaining(t, "k", SEC), 5);
    sluice_table_free(t);
    free(reg);
}

/* ---- threads ------------------------------------------------------------ */

/* Threads reserving and settling within one window, with room for it all,
 * on keys of their own and on one key they share: each settle moves the
 * key's count by exactly a - p (sliding-log: max(0, a - p)), so each key
 * ends holding the sum of its settled costs.  Run under TSan in CI. */
enum { TH = 4, ITERS = 1500 };

typedef struct worker {
    sluice_table *t;
    int id;
    uint64_t seed, mine, shared;
    bool log;
    tu_errs errs;
} worker;

static void *run(void *arg)
{
    worker *w = arg;
    char own[8];
    snprintf(own, sizeof own, "own%d", w->id);
    for (int i = 0; i < ITERS; i++) {
        const bool sh = i % 2;
        const char *k = sh ? "shared" : own;
        const uint64_t p = 1 + tu_splitmix64_below(&w->seed, 50);
        const uint64_t a = tu_splitmix64_below(&w->seed, 100);
        const uint64_t at = SEC + tu_splitmix64_below(&w->seed, SEC / 2);
        sluice_table_reservation rv;
        if (!sluice_table_reserve_at(w->t, k, strlen(k), p, at, 0, &rv, NULL)) {
            tu_errs_add(&w->errs, "reservation of %llu refused", (unsigned long long)p);
            continue;
        }
        int rc = sluice_table_reservation_settle_at(&rv, a, at);
        if (rc != 0) tu_errs_add(&w->errs, "settle returned %d", rc);
        if (sluice_table_reservation_settle_at(&rv, a, at) != SLUICE_ENOENT)
            tu_errs_add(&w->errs, "second settle accepted");
        const uint64_t cost = w->log && a < p ? p : a;
        if (sh) w->shared += cost;
        else w->mine += cost;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    static const char *const specs[] = {"fixed-window 1000000000/2s",
                                        "sliding-approx 1000000000/2s",
                                        "sliding-log 1000000000/2s", "token-bucket 1000000/2000s"};
    for (size_t si = 0; si < 4; si++) {
        /* a region's rings hold at most 65535 entries: a wheel, whose
         * settles below give nothing back either */
        const char *spec = in_region && si == 2 ? "sliding-wheel 1000000000/2s slots=1000"
                                                : specs[si];
        sluice_table *t = mkt(spec, 64, 0);
        worker w[TH];
        pthread_t th[TH];
        memset(w, 0, sizeof w);
        /* every key made first, with 1 permit (counted in the sums) */
        assert_true(sluice_table_try_acquire_at(t, "shared", 6, 1, SEC, NULL));
        for (int i = 0; i < TH; i++) {
            char own[8];
            snprintf(own, sizeof own, "own%d", i);
            assert_true(sluice_table_try_acquire_at(t, own, strlen(own), 1, SEC, NULL));
            w[i].mine = 1;
        }
        for (int i = 0; i < TH; i++) {
            w[i].t = t;
            w[i].id = i;
            w[i].log = si == 2;
            w[i].seed = tu_env_seed() + (uint64_t)i;
            assert_int_equal(pthread_create(&th[i], NULL, run, &w[i]), 0);
        }
        uint64_t shared = 1;
        /* every thread joined before any failure leaves (w is theirs) */
        for (int i = 0; i < TH; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < TH; i++) {
            if (w[i].errs.n) fail_msg("%s: %s", spec, w[i].errs.msg);
            shared += w[i].shared;
        }
        if (si != 3) { /* the bucket refills meanwhile: run for TSan only */
            const uint64_t full = 1000000000, at = SEC + SEC / 2;
            assert_int_equal(remaining(t, "shared", at), full - shared);
            for (int i = 0; i < TH; i++) {
                char own[8];
                snprintf(own, sizeof own, "own%d", i);
                assert_int_equal(remaining(t, own, at), full - w[i].mine);
            }
        }
        sluice_table_free(t);
    }
}

/* Threads reserving and settling on their keys while two others make and
 * remove thousands of other keys in the same shards (shifting the reserved
 * entries and their stamps under the shard locks): every settle acts, and
 * each key ends holding exactly the sum of its settled costs.  Run under
 * TSan in CI. */
static void *churn_run(void *arg)
{
    worker *w = arg;
    char k[24];
    for (int i = 0; i < 2 * ITERS; i++) {
        snprintf(k, sizeof k, "churn%d-%d", w->id, i);
        if (!sluice_table_try_acquire_at(w->t, k, strlen(k), 1, SEC, NULL))
            tu_errs_add(&w->errs, "churn key %s refused", k);
        else if (sluice_table_remove(w->t, k, strlen(k)) != 0)
            tu_errs_add(&w->errs, "churn key %s not removed", k);
    }
    return NULL;
}

static void test_threads_churn(void **state)
{
    (void)state;
    sluice_table *t = mkt("fixed-window 1000000000/2s", 64, 0);
    enum { CH = 2 };
    worker w[TH + CH];
    pthread_t th[TH + CH];
    memset(w, 0, sizeof w);
    assert_true(sluice_table_try_acquire_at(t, "shared", 6, 1, SEC, NULL));
    for (int i = 0; i < TH + CH; i++) {
        w[i].t = t;
        w[i].id = i;
        w[i].seed = tu_env_seed() + (uint64_t)i;
        assert_int_equal(pthread_create(&th[i], NULL, i < TH ? run : churn_run, &w[i]), 0);
    }
    for (int i = 0; i < TH + CH; i++) pthread_join(th[i], NULL);
    uint64_t shared = 1;
    for (int i = 0; i < TH + CH; i++) {
        if (w[i].errs.n) fail_msg("%s", w[i].errs.msg);
        shared += w[i].shared;
    }
    const uint64_t full = 1000000000, at = SEC + SEC / 2;
    assert_int_equal(remaining(t, "shared", at), full - shared);
    for (int i = 0; i < TH; i++) {
        char own[8];
        snprintf(own, sizeof own, "own%d", i);
        assert_int_equal(remaining(t, own, at), full - w[i].mine);
    }
    sluice_table_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codes),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_cancel_twin),
        cmocka_unit_test(test_after_reset),
        cmocka_unit_test(test_after_eviction),
        cmocka_unit_test(test_other_keys),
        cmocka_unit_test(test_churn),
        cmocka_unit_test(test_remade_stamp),
        cmocka_unit_test_teardown(test_stamps_oom, alloc_off),
        cmocka_unit_test(test_after_reconfigure),
        cmocka_unit_test(test_overdraft),
        cmocka_unit_test(test_free_first),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_threads_churn),
        /* the same on a table in a shared region */
#define IN_REGION(f) {#f " (region)", f, region_on, region_off, NULL}
        IN_REGION(test_codes),
        IN_REGION(test_stats),
        IN_REGION(test_full),
        IN_REGION(test_model),
        IN_REGION(test_cancel_twin),
        IN_REGION(test_after_reset),
        IN_REGION(test_after_eviction),
        IN_REGION(test_other_keys),
        IN_REGION(test_churn),
        IN_REGION(test_remade_stamp),
        IN_REGION(test_after_reconfigure),
        IN_REGION(test_overdraft),
        IN_REGION(test_free_first),
        IN_REGION(test_threads),
        IN_REGION(test_threads_churn),
        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_region_damaged_generation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
