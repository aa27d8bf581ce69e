/* test_conc_with.c -- a concurrency limit with rate limits, all or nothing
 * (src/composite/conc_with.c).  The rate limits' side is checked through
 * probes of the limiters themselves; the concurrency side through its
 * gauge; threads (TSan) for the hold: never more than N inside, nothing
 * lost, with plain acquires and releases running at once. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sluice.h>
#include <stdatomic.h>
#include <string.h>

#include "testutil.h"

#define SEC 1000000000ULL

static uint64_t room(sluice_limiter *l, uint64_t t)
{
    sluice_result r;
    assert_true(sluice_try_acquire_at(l, 0, t, &r));
    return r.remaining;
}

static void test_all_or_nothing(void **state)
{
    (void)state;
    const char *specs[2] = {"concurrency 2", "concurrency 2 lease=10s"};
    for (int s = 0; s < 2; s++) {
        char err[128];
        sluice_concurrency *c = sluice_concurrency_new(specs[s], err, sizeof err);
        sluice_limiter *rate = sluice_limiter_new("token-bucket 3/s", err, sizeof err);
        sluice_table *tab = sluice_table_new("fixed-window 10/s", 8, err, sizeof err);
        assert_non_null(c);
        assert_non_null(rate);
        assert_non_null(tab);
        sluice_limit_ref refs[2] = {sluice_ref_limiter(rate), sluice_ref_key(tab, "k", 1)};
        sluice_permit a, b, x;
        sluice_result r;
        const uint64_t t = 5 * SEC;
        assert_true(sluice_acquire_permit_with_at(c, refs, 2, 1, t, &a, &r));
        assert_int_equal(a.permits, 1);
        assert_int_equal(r.remaining, 1); /* min(c: 1, rate: 2, window: 9) */
        assert_true(sluice_acquire_permit_with_at(c, refs, 2, 1, t, &b, &r));
        assert_int_equal(r.remaining, 0);
        assert_int_equal(room(rate, t), 1);
        /* c full: the rate limits are not charged */
        assert_false(sluice_acquire_permit_with_at(c, refs, 2, 1, t, &x, &r));
        assert_int_equal(x.permits, 0);
        assert_int_equal(room(rate, t), 1);
        assert_int_equal(sluice_permit_release_at(&a, t), 0); /* one release */
        assert_int_equal(sluice_concurrency_held_at(c, t), 1);
        /* rate refuses (asks 2, has 1): c is not charged */
        assert_false(sluice_acquire_permit_with_at(c, refs, 2, 2, t, &x, &r));
        assert_true(r.retry_after_ns > 0);
        assert_int_equal(r.remaining, 1);
        assert_int_equal(sluice_concurrency_held_at(c, t), 1);
        /* c refuses 3 > N: never */
        assert_false(sluice_acquire_permit_with_at(c, refs, 2, 3, t, &x, &r));
        assert_int_equal(r.retry_after_ns, -1);
        /* bad calls */
        assert_false(sluice_acquire_permit_with_at(c, refs, 0, 1, t, &x, &r));
        assert_int_equal(r.error, SLUICE_EINVAL);
        assert_false(sluice_acquire_permit_with_at(c, NULL, 1, 1, t, &x, &r));
        assert_int_equal(r.error, SLUICE_EINVAL);
        sluice_limit_ref twice[2] = {sluice_ref_limiter(rate), sluice_ref_limiter(rate)};
        assert_false(sluice_acquire_permit_with_at(c, twice, 2, 1, t, &x, &r));
        assert_int_equal(r.error, SLUICE_EINVAL);
        assert_int_equal(sluice_concurrency_held_at(c, t), 1); /* a bad call takes nothing */
        assert_int_equal(sluice_permit_release_at(&b, t), 0);
        assert_int_equal(sluice_concurrency_held_at(c, t), 0);
        sluice_concurrency_free(c);
        sluice_limiter_free(rate);
        sluice_table_free(tab);
    }
}

typedef struct warg {
    sluice_concurrency *c;
    sluice_limiter *rate;
    bool with;
    _Atomic uint64_t *inside, *most;
    tu_errs errs;
} warg;

static void *wmain(void *p)
{
    warg *a = p;
    sluice_limit_ref ref = sluice_ref_limiter(a->rate);
    unsigned iters = TU_UNDER_TSAN ? 3000 : 30000;
    for (unsigned i = 0; i < iters; i++) {
        sluice_permit pm;
        sluice_result r;
        bool ok = a->with ? sluice_acquire_permit_with_at(a->c, &ref, 1, 1, 0, &pm, &r)
                          : sluice_acquire_permit_at(a->c, 1, 0, &pm, &r);
        if (!ok) continue;
        uint64_t in = atomic_fetch_add(a->inside, 1) + 1, mx = atomic_load(a->most);
        while (in > mx && !atomic_compare_exchange_weak(a->most, &mx, in)) {
        }
        atomic_fetch_sub(a->inside, 1);
        if (sluice_permit_release_at(&pm, 0) != 0) tu_errs_add(&a->errs, "release failed");
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    const char *specs[2] = {"concurrency 2", "concurrency 2 lease=36500d"};
    for (int s = 0; s < 2; s++) {
        char err[128];
        sluice_concurrency *c = sluice_concurrency_new(specs[s], err, sizeof err);
        sluice_limiter *rate = sluice_limiter_new("token-bucket 1000000000000/s", err, sizeof err);
        _Atomic uint64_t inside = 0, most = 0;
        pthread_t th[4];
        warg a[4];
        for (int i = 0; i < 4; i++) {
            a[i] = (warg){.c = c, .rate = rate, .with = i % 2 == 0, .inside = &inside, .most = &most};
            assert_int_equal(pthread_create(&th[i], NULL, wmain, &a[i]), 0);
        }
        for (int i = 0; i < 4; i++) pthread_join(th[i], NULL); /* all, before a failure */
        for (int i = 0; i < 4; i++) {
            if (a[i].errs.n) fail_msg("thread %d: %s", i, a[i].errs.msg);
        }
        assert_true(atomic_load(&most) <= 2);
        assert_int_equal(sluice_concurrency_held_at(c, 0), 0);
        sluice_concurrency_free(c);
        sluice_limiter_free(rate);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
