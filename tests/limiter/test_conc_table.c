/* test_conc_table.c -- a table of concurrency limits
 * (src/limiter/conc_table.c): one limit per key, permits released by their
 * handle, a key holding permits never dropped, stale handles of a dropped
 * key powerless.  Decisions against one reference model per key
 * (tests/ref_model.c, ref_conc); "full" exactly when the key holds nothing
 * and max_keys other keys hold permits. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sluice.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ref_model.h"
#include "testutil.h"

#define SEC 1000000000ULL

static sluice_concurrency_table *mk(const char *spec, size_t max_keys)
{
    char err[256];
    sluice_concurrency_table *t = sluice_concurrency_table_new(spec, max_keys, err, sizeof err);
    if (!t) fail_msg("%s: %s", spec, err);
    return t;
}

static void test_bad(void **state)
{
    (void)state;
    char err[256];
    assert_null(sluice_concurrency_table_new("concurrency 0", 4, err, sizeof err));
    assert_non_null(strstr(err, "\"0\""));
    assert_null(sluice_concurrency_table_new("concurrency 2", 0, err, sizeof err));
    assert_non_null(strstr(err, "max_keys"));
    sluice_concurrency_table *t = mk("concurrency 2", 4);
    sluice_permit pm;
    sluice_result r;
    assert_false(sluice_concurrency_table_acquire_at(NULL, "a", 1, 1, 0, &pm, &r));
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_false(sluice_concurrency_table_acquire_at(t, NULL, 3, 1, 0, &pm, &r));
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_false(sluice_concurrency_table_acquire_at(t, "a", 1, 1, 0, NULL, &r));
    /* the empty key is a key */
    assert_true(sluice_concurrency_table_acquire_at(t, NULL, 0, 1, 0, &pm, &r));
    assert_int_equal(sluice_concurrency_table_held_at(t, "", 0, 0), 1);
    assert_int_equal(sluice_permit_release_at(&pm, 0), 0);
    sluice_concurrency_table_free(t);
    sluice_concurrency_table_free(NULL);
}

/* Random calls over 6 keys in a table of 3, without a lease. */
static void test_model(void **state)
{
    (void)state;
    uint64_t seed = tu_env_seed();
    enum { K = 6, MAXK = 3, H = 4 };
    const uint64_t N = 3;
    for (int round = 0; round < 20; round++) {
        sluice_concurrency_table *t = mk("concurrency 3", MAXK);
        ref_conc *m[K];
        sluice_permit pm[K][H];
        uint64_t id[K][H];
        memset(pm, 0, sizeof pm);
        memset(id, 0, sizeof id);
        for (int k = 0; k < K; k++) m[k] = ref_conc_new(N, 0);
        for (int s = 0; s < 3000; s++) {
            unsigned k = (unsigned)tu_splitmix64_below(&seed, K), h = (unsigned)tu_splitmix64_below(&seed, H);
            char key[8];
            snprintf(key, sizeof key, "k%u", k);
            if (pm[k][h].permits == 0 && tu_splitmix64_below(&seed, 2) == 0) {
                uint64_t p = tu_splitmix64_below(&seed, N + 2), rid;
                unsigned holding = 0;
                for (int j = 0; j < K; j++) holding += ref_conc_held(m[j], 0) > 0;
                bool full = ref_conc_held(m[k], 0) == 0 && holding == MAXK && p > 0;
                sluice_result r;
                ref_result e;
                bool got = sluice_concurrency_table_acquire_at(t, key, strlen(key), p, 0, &pm[k][h], &r);
                if (full) {
                    if (got || r.error != SLUICE_EFULL)
                        fail_msg("step %d: key %u: want full, got %d error %d", s, k, got, r.error);
                    continue;
                }
                bool want = ref_conc_acquire(m[k], p, 0, &e, &rid);
                if (got != want || r.error || r.remaining != e.remaining || r.retry_after_ns != e.retry_after_ns)
                    fail_msg("step %d: key %u acquire %llu: %d rem %llu err %d; model %d rem %llu", s, k,
                             (unsigned long long)p, got, (unsigned long long)r.remaining, r.error, want,
                             (unsigned long long)e.remaining);
                id[k][h] = rid;
            } else if (pm[k][h].permits) {
                assert_int_equal(sluice_permit_release_at(&pm[k][h], 0), 0);
                assert_true(ref_conc_release(m[k], id[k][h], 0));
            }
            assert_true(sluice_concurrency_table_keys(t) <= MAXK);
        }
        for (int k = 0; k < K; k++) ref_conc_free(m[k]);
        sluice_concurrency_table_free(t);
    }
}

/* A key dropped for another: a stale handle of it releases nothing. */
static void test_stale_after_drop(void **state)
{
    (void)state;
    const char *specs[2] = {"concurrency 2", "concurrency 2 lease=10s"};
    for (int s = 0; s < 2; s++) {
        sluice_concurrency_table *t = mk(specs[s], 1);
        sluice_permit a, b, x;
        sluice_result r;
        assert_true(sluice_concurrency_table_acquire_at(t, "a", 1, 1, 0, &a, &r));
        sluice_permit copy = a;
        assert_false(sluice_concurrency_table_acquire_at(t, "b", 1, 1, 0, &x, &r)); /* a holds */
        assert_int_equal(r.error, SLUICE_EFULL);
        assert_int_equal(sluice_permit_release_at(&a, 1), 0);
        assert_true(sluice_concurrency_table_acquire_at(t, "b", 1, 1, 2, &b, &r)); /* a dropped */
        assert_int_equal(r.remaining, 1);
        assert_int_equal(sluice_permit_release_at(&copy, 3), SLUICE_ENOENT);
        assert_int_equal(sluice_concurrency_table_held_at(t, "b", 1, 3), 1);
        assert_int_equal(sluice_concurrency_table_held_at(t, "a", 1, 3), 0);
        assert_int_equal(sluice_permit_release_at(&b, 3), 0);
        sluice_concurrency_table_free(t);
    }
    /* with a lease, an ended lease frees its key for another */
    sluice_concurrency_table *t = mk("concurrency 1 lease=10s", 1);
    sluice_permit a, b;
    sluice_result r;
    assert_true(sluice_concurrency_table_acquire_at(t, "a", 1, 1, 100 * SEC, &a, &r));
    assert_false(sluice_concurrency_table_acquire_at(t, "b", 1, 1, 105 * SEC, &b, &r));
    assert_int_equal(r.error, SLUICE_EFULL);
    /* b's request did not move a's clock: a at 101 s is a's own time */
    assert_false(sluice_concurrency_table_acquire_at(t, "a", 1, 1, 101 * SEC, &b, &r));
    assert_int_equal(r.error, 0);
    assert_int_equal(r.retry_after_ns, (int64_t)(9 * SEC));
    assert_false(sluice_concurrency_table_acquire_at(t, "b", 1, 1, 110 * SEC - 1, &b, &r));
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_true(sluice_concurrency_table_acquire_at(t, "b", 1, 1, 110 * SEC, &b, &r));
    /* b is a fresh key: its own clock, from its own first call */
    assert_int_equal(sluice_permit_release_at(&a, 110 * SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_permit_release_at(&b, 111 * SEC), 0);
    sluice_concurrency_table_free(t);
}

/* Threads on three keys: never more than N inside per key. */
typedef struct targ {
    sluice_concurrency_table *t;
    _Atomic uint64_t *inside, *most; /* per key */
    uint64_t seed;
    tu_errs errs;
} targ;

static void *tmain(void *p)
{
    targ *a = p;
    unsigned iters = TU_UNDER_TSAN ? 3000 : 30000;
    for (unsigned i = 0; i < iters; i++) {
        unsigned k = (unsigned)tu_splitmix64_below(&a->seed, 3);
        char key[4] = {'k', (char)('0' + k), 0, 0};
        sluice_permit pm;
        sluice_result r;
        if (!sluice_concurrency_table_acquire_at(a->t, key, 2, 1, 0, &pm, &r)) {
            if (r.error) tu_errs_add(&a->errs, "acquire: error %d", r.error);
            continue;
        }
        uint64_t in = atomic_fetch_add(&a->inside[k], 1) + 1, mx = atomic_load(&a->most[k]);
        while (in > mx && !atomic_compare_exchange_weak(&a->most[k], &mx, in)) {
        }
        atomic_fetch_sub(&a->inside[k], 1);
        if (sluice_permit_release_at(&pm, 0) != 0) tu_errs_add(&a->errs, "release failed");
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    sluice_concurrency_table *t = mk("concurrency 2", 8);
    _Atomic uint64_t inside[3] = {0}, most[3] = {0};
    pthread_t th[4];
    targ a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (targ){.t = t, .inside = inside, .most = most, .seed = 5u + (uint64_t)i};
        assert_int_equal(pthread_create(&th[i], NULL, tmain, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL); /* all, before a failure */
    for (int i = 0; i < 4; i++) {
        if (a[i].errs.n) fail_msg("thread %d: %s", i, a[i].errs.msg);
    }
    for (int k = 0; k < 3; k++) {
        char key[3] = {'k', (char)('0' + k), 0};
        assert_true(atomic_load(&most[k]) <= 2);
        assert_int_equal(sluice_concurrency_table_held_at(t, key, 2, 0), 0);
    }
    sluice_concurrency_table_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_stale_after_drop),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
