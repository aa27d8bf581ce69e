/* test_limiter.c -- the limiter API around the algorithms: probes, the time
 * clamp, statistics, extremes of time, blocking acquire, several threads.
 * The decision rules themselves are checked against the reference model in
 * test_reference.c; here the expected values are worked out by hand from
 * docs/decisions.md. */
#define _POSIX_C_SOURCE 200809L
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

#include "testutil.h"

#define SEC 1000000000ULL
static const char *const all_specs[] = {
    "fixed-window 10/s",   "sliding-log 10/s",  "sliding-wheel 10/s",
    "sliding-approx 10/s", "token-bucket 10/s", "leaky-bucket 10/s nodelay",
    "leaky-bucket 10/s",
};
#define N_SPECS (sizeof all_specs / sizeof all_specs[0])

static sluice_limiter *mk(const char *spec)
{
    char err[256];
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    if (!l) fail_msg("%s: %s", spec, err);
    return l;
}

static void test_free_null(void **state)
{
    (void)state;
    sluice_limiter_free(NULL);
    sluice_table_free(NULL);
}

/* A probe is allowed, takes nothing, and reports what is left. */
static void test_probe(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_SPECS; i++) {
        sluice_limiter *l = mk(all_specs[i]);
        sluice_result r;
        assert_true(sluice_try_acquire_at(l, 0, SEC, &r));
        assert_int_equal(r.remaining, 10);
        assert_int_equal(r.wait_ns, 0);
        assert_int_equal(r.retry_after_ns, 0);
        assert_true(sluice_try_acquire_at(l, 4, SEC, &r));
        for (int k = 0; k < 3; k++) {
            assert_true(sluice_try_acquire_at(l, 0, SEC, &r));
            assert_int_equal(r.remaining, 6);
            assert_int_equal(r.wait_ns, 0);
        }
        /* six more fit at the same instant: the probes took nothing */
        assert_true(sluice_try_acquire_at(l, 6, SEC, &r));
        assert_false(sluice_try_acquire_at(l, 1, SEC, &r));
        sluice_stats st;
        sluice_limiter_stats_get(l, &st);
        assert_int_equal(st.probes, 4);
        assert_int_equal(st.requests_allowed, 2);
        assert_int_equal(st.requests_denied, 1);
        assert_int_equal(st.permits_allowed, 10);
        assert_int_equal(st.permits_denied, 1);
        sluice_limiter_free(l);
    }
}

/* A time earlier than the latest seen counts as the latest. */
static void test_backward_time(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_SPECS; i++) {
        sluice_limiter *l = mk(all_specs[i]);
        sluice_result r, r2;
        assert_true(sluice_try_acquire_at(l, 10, 5 * SEC, &r));
        assert_false(sluice_try_acquire_at(l, 1, 5 * SEC, &r));
        /* at an earlier time: same answer as at 5 s */
        assert_false(sluice_try_acquire_at(l, 1, 1 * SEC, &r2));
        assert_int_equal(r.retry_after_ns, r2.retry_after_ns);
        assert_int_equal(r.remaining, r2.remaining);
        sluice_limiter_free(l);
    }
}

/* Time near 2^63-1, beyond it (saturated), and idle gaps of years. */
static void test_time_extremes(void **state)
{
    (void)state;
    const uint64_t end = (uint64_t)INT64_MAX;
    for (size_t i = 0; i < N_SPECS; i++) {
        sluice_limiter *l = mk(all_specs[i]);
        sluice_result r;
        assert_true(sluice_try_acquire_at(l, 10, end - 1, &r));
        assert_false(sluice_try_acquire_at(l, 1, end, &r));
        assert_true(r.retry_after_ns > 0);
        /* 2^64-1 counts as 2^63-1: still refused, the same wait */
        sluice_result r2;
        assert_false(sluice_try_acquire_at(l, 1, UINT64_MAX, &r2));
        assert_int_equal(r2.retry_after_ns, r.retry_after_ns);
        sluice_limiter_free(l);

        /* a gap of 200 years from 0 */
        l = mk(all_specs[i]);
        assert_true(sluice_try_acquire_at(l, 10, 0, &r));
        assert_false(sluice_try_acquire_at(l, 1, 1, &r));
        assert_true(sluice_try_acquire_at(l, 10, 200ULL * 365 * 86400 * SEC, &r));
        assert_int_equal(r.remaining, 0);
        sluice_limiter_free(l);
    }
}

/* A million slots and an idle gap of years cost what ten do: this finishes
 * in milliseconds only if neither is walked. */
static void test_wheel_no_walk(void **state)
{
    (void)state;
    sluice_limiter *l = mk("sliding-wheel 1000000000/s slots=1000000000");
    sluice_result r;
    uint64_t t = 0;
    for (int i = 0; i < 200000; i++) {
        t += 10ULL * 365 * 86400 * SEC / 200000 * 10; /* big steps */
        assert_true(sluice_try_acquire_at(l, 1, t, &r));
        assert_int_equal(r.remaining, 1000000000 - 1);
    }
    sluice_limiter_free(l);
}

/* retry_after_ns is exact: at t + retry - 1 still refused, at t + retry
 * allowed (no other traffic). */
static void test_retry_after_exact(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "fixed-window 3/s",   "sliding-log 3/s",  "sliding-wheel 3/s slots=8",
        "sliding-approx 3/s", "token-bucket 3/s", "leaky-bucket 3/s nodelay",
        "leaky-bucket 7/10s capacity=2",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        sluice_limiter *l = mk(specs[i]);
        sluice_result r;
        uint64_t t = 1234567891;
        while (sluice_try_acquire_at(l, 1, t, &r)) t += 1000;
        assert_true(r.retry_after_ns > 0);
        uint64_t due = t + (uint64_t)r.retry_after_ns;
        sluice_result r2;
        assert_false(sluice_try_acquire_at(l, 1, due - 1, &r2));
        assert_int_equal(r2.retry_after_ns, 1);
        assert_true(sluice_try_acquire_at(l, 1, due, &r2));
        sluice_limiter_free(l);
    }
}

static void test_too_many_permits(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_SPECS; i++) {
        sluice_limiter *l = mk(all_specs[i]);
        sluice_result r;
        assert_false(sluice_try_acquire_at(l, 11, SEC, &r));
        assert_int_equal(r.retry_after_ns, -1);
        assert_int_equal(r.remaining, 10);
        assert_false(sluice_try_acquire_at(l, UINT64_MAX, SEC, &r));
        assert_int_equal(r.retry_after_ns, -1);
        sluice_stats st;
        sluice_limiter_stats_get(l, &st);
        assert_int_equal(st.permits_denied, UINT64_MAX); /* saturated */
        assert_int_equal(st.requests_denied, 2);
        sluice_limiter_free(l);
    }
}

static void test_format_roundtrip(void **state)
{
    (void)state;
    static const char *const specs[][2] = {
        {"token-bucket 100/1000ms burst=100", "token-bucket 100/s"},
        {"leaky-bucket 60/m capacity=5 nodelay", "leaky-bucket 60/min capacity=5 nodelay"},
        {"sliding-wheel 10/3600s", "sliding-wheel 10/h"},
        {"sliding-wheel 10/s slots=1000", "sliding-wheel 10/s"},
        {"sliding-wheel 10/s slots=10", "sliding-wheel 10/s slots=10"},
        {"fixed-window 1000000000000/86400000000000ns", "fixed-window 1000000000000/d"},
        {"sliding-approx 5/1500us", "sliding-approx 5/1500us"},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        sluice_limiter *l = mk(specs[i][0]);
        char buf[64], buf2[64];
        int n = sluice_limiter_spec_format(l, buf, sizeof buf);
        assert_int_equal(n, (int)strlen(specs[i][1]));
        assert_string_equal(buf, specs[i][1]);
        sluice_limiter *l2 = mk(buf);
        assert_int_equal(sluice_limiter_spec_format(l2, buf2, sizeof buf2), n);
        assert_string_equal(buf, buf2);
        sluice_limiter_free(l);
        sluice_limiter_free(l2);
    }
}

/* sluice_acquire: refuses at once, taking nothing, when the timeout cannot
 * be met; waits when it can.  Real time, but only a few milliseconds. */
static void test_acquire(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 5/s burst=1");
    assert_true(sluice_acquire(l, 1, 0));
    uint64_t t0 = sluice_now_ns();
    assert_false(sluice_acquire(l, 1, 0));       /* next token in ~200 ms */
    assert_false(sluice_acquire(l, 1, 1000000)); /* 1 ms is not enough */
    assert_false(sluice_acquire(l, 2, UINT64_MAX)); /* more than the burst */
    assert_true(sluice_now_ns() - t0 < 150000000); /* none of those slept it out */
    assert_true(sluice_acquire(l, 1, 2 * SEC));
    assert_true(sluice_now_ns() - t0 >= 150000000);
    sluice_stats st;
    sluice_limiter_stats_get(l, &st);
    assert_int_equal(st.permits_allowed, 2);
    sluice_limiter_free(l);

    /* the shaper sleeps its wait_ns, and refuses when it exceeds the timeout */
    l = mk("leaky-bucket 100/s capacity=3");
    assert_true(sluice_acquire(l, 1, 0));
    assert_false(sluice_acquire(l, 1, 1000)); /* would wait ~10 ms */
    t0 = sluice_now_ns();
    assert_true(sluice_acquire(l, 1, SEC));
    assert_true(sluice_now_ns() - t0 >= 5000000);
    sluice_limiter_free(l);

    /* sluice_try_acquire reads the limiter's clock: one token an hour */
    l = mk("token-bucket 1/h burst=1");
    assert_true(sluice_try_acquire(l, 1));
    assert_false(sluice_try_acquire(l, 1));
    assert_true(sluice_try_acquire(l, 0)); /* a probe */
    sluice_limiter_free(l);

    /* a window: refuses at once when the retry is past the timeout or never,
     * sleeps the retry when it fits (here at most one 100 ms window) */
    l = mk("fixed-window 1/100ms");
    assert_true(sluice_acquire(l, 1, 0));
    t0 = sluice_now_ns();
    assert_false(sluice_acquire(l, 2, UINT64_MAX)); /* more than the limit */
    assert_true(sluice_acquire(l, 1, SEC));
    assert_true(sluice_now_ns() - t0 < 500000000);
    assert_false(sluice_acquire(l, 1, 0)); /* granted at the window's start: used up */
    sluice_limiter_stats_get(l, &st);
    assert_int_equal(st.permits_allowed, 2);
    sluice_limiter_free(l);
}

/* Several threads on one limiter at a frozen time: exactly LIMIT admitted. */
struct hammer {
    sluice_limiter *l;
    uint64_t t;
    int n;
    int allowed;
};

static void *hammer_run(void *arg)
{
    struct hammer *h = arg;
    for (int i = 0; i < h->n; i++)
        if (sluice_try_acquire_at(h->l, 1, h->t, NULL)) h->allowed++;
    return NULL;
}

static void test_threads_frozen_time(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "fixed-window 1000/s",   "sliding-log 1000/s",  "sliding-wheel 1000/s",
        "sliding-approx 1000/s", "token-bucket 1000/s", "leaky-bucket 1000/s",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        for (int rep = 0; rep < 5; rep++) {
            sluice_limiter *l = mk(specs[i]);
            struct hammer h[4];
            pthread_t th[4];
            for (int k = 0; k < 4; k++) {
                h[k] = (struct hammer){l, 7 * SEC + 1, 2000, 0};
                assert_int_equal(pthread_create(&th[k], NULL, hammer_run, &h[k]), 0);
            }
            int total = 0;
            for (int k = 0; k < 4; k++) {
                pthread_join(th[k], NULL);
                total += h[k].allowed;
            }
            assert_int_equal(total, 1000);
            sluice_stats st;
            sluice_limiter_stats_get(l, &st);
            assert_int_equal(st.requests_allowed, 1000);
            assert_int_equal(st.requests_denied, 7000);
            sluice_limiter_free(l);
        }
    }
}

/* ---- the window log's ring follows the traffic (issue 9, defect 11) ---- */

/* 2^17 admissions at distinct instants of one window grow the ring to 2^17
 * entries of 16 bytes (2 MiB); once they have left the window, the ring is
 * halved at each admission while at most a quarter full, so a few dozen
 * admissions later it is back to a few entries. */
static void test_log_ring_shrinks(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0); /* counts the live bytes */
    const size_t base = tu_alloc_live_bytes();
    sluice_limiter *l = mk("sliding-log 1000000/s");
    const size_t made = tu_alloc_live_bytes() - base;
    enum { N = 1 << 17 };
    for (uint64_t i = 0; i < N; i++) assert_true(sluice_try_acquire_at(l, 1, i, NULL));
    const size_t full = tu_alloc_live_bytes() - base - made;
    assert_true(full >= (size_t)N * 16);
    /* the window has passed: every admission starts a new slot */
    for (uint64_t i = 0; i < 40; i++) assert_true(sluice_try_acquire_at(l, 1, 2 * SEC + i, NULL));
    const size_t after = tu_alloc_live_bytes() - base - made;
    if (after > 64 * 16)
        fail_msg("ring still holds %zu bytes after the window emptied (%zu at its peak)", after,
                 full);
    sluice_limiter_free(l);
    assert_int_equal(tu_alloc_live_bytes(), base);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_ring_shrinks),
        cmocka_unit_test(test_free_null),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_backward_time),
        cmocka_unit_test(test_time_extremes),
        cmocka_unit_test(test_wheel_no_walk),
        cmocka_unit_test(test_retry_after_exact),
        cmocka_unit_test(test_too_many_permits),
        cmocka_unit_test(test_format_roundtrip),
        cmocka_unit_test(test_acquire),
        cmocka_unit_test(test_threads_frozen_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
