/* test_reserve.c -- reservations and cancellable waiting.
 *
 * The reference for a cancelled reservation is a twin limiter that never
 * made it: "a cancelled reservation leaves the limiter as if it had never
 * been made, when nothing was reserved after it" is checked decision by
 * decision against the twin; with later reservations, the limiter must
 * never be more permissive than the twin.  Expected waits are worked out
 * from the contract's token arithmetic in exact rationals (cross
 * multiplication), independently of the library's deficit form. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sluice.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "testutil.h"
#include "ref_model.h"

#define SEC 1000000000ULL

__extension__ typedef unsigned __int128 u128;

static sluice_limiter *mk(const char *spec)
{
    char err[256];
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    if (!l) fail_msg("%s: %s", spec, err);
    return l;
}

/* ceil(p / r) for r = L/W permits per ns: the ns to earn p tokens. */
static uint64_t ns_for(uint64_t p, uint64_t L, uint64_t W)
{
    u128 num = (unsigned __int128)p * W;
    return (uint64_t)((num + L - 1) / L);
}

/* A reservation beyond the tokens waits for them, exactly; the debt is
 * seen by later requests; the long-run rate is kept. */
static void test_reserve_wait(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 3/s burst=2");
    sluice_reservation rv;
    sluice_result r;
    const uint64_t t0 = 10 * SEC;
    assert_true(sluice_reserve_at(l, 2, t0, 0, &rv, &r)); /* the burst, at once */
    assert_int_equal(rv.wait_ns, 0);
    assert_int_equal(rv.at_ns, t0);
    /* 1 more: wait for one token at 3/s: ceil(1e9/3) */
    assert_false(sluice_reserve_at(l, 1, t0, ns_for(1, 3, SEC) - 1, &rv, &r));
    assert_int_equal(rv.permits, 0);
    assert_true(sluice_reserve_at(l, 1, t0, UINT64_MAX, &rv, &r));
    assert_int_equal(rv.wait_ns, ns_for(1, 3, SEC));
    /* and 2 more behind it: three tokens' time from t0 */
    assert_true(sluice_reserve_at(l, 2, t0, UINT64_MAX, &rv, &r));
    assert_int_equal(rv.wait_ns, ns_for(3, 3, SEC));
    /* a plain request sees the debt: nothing until the debt is paid and one
     * token more is earned */
    assert_false(sluice_try_acquire_at(l, 1, t0 + ns_for(3, 3, SEC), &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(ns_for(4, 3, SEC) - ns_for(3, 3, SEC)));
    assert_true(sluice_try_acquire_at(l, 1, t0 + ns_for(4, 3, SEC), &r));
    /* more than the burst can never be booked */
    assert_false(sluice_reserve_at(l, 3, t0 + 100 * SEC, UINT64_MAX, &rv, &r));
    assert_int_equal(r.retry_after_ns, -1);
    sluice_limiter_free(l);
}

/* Reservations against an independent formulation: ITU-T's virtual
 * scheduling algorithm for GCRA, with the theoretical arrival time TAT kept
 * exactly in units of 1/L ns (T = W/L is then the integer W).  A request for
 * p at t may go at  at = max(t, max(TAT, t) - (B - p)T)  and moves
 * TAT to max(TAT, t) + pT.  A plain try is allowed iff at == t.  The
 * library keeps a scaled deficit instead; every wait and decision must
 * agree, over random sequences of reservations and tries, with debts. */
static void test_reserve_vsa(void **state)
{
    (void)state;
    static const struct { const char *spec; uint64_t L, W, B; } cases[] = {
        {"token-bucket 3/s burst=2", 3, SEC, 2},
        {"token-bucket 7/10s", 7, 10 * SEC, 7},
        {"token-bucket 1000/s burst=10", 1000, SEC, 10},
        {"token-bucket 700000000/s burst=3", 700000000, SEC, 3},
        {"leaky-bucket 5/250ms capacity=4 nodelay", 5, 250000000, 4},
    };
    uint64_t x = 0x243f6a8885a308d3ULL;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const uint64_t L = cases[ci].L, W = cases[ci].W, B = cases[ci].B;
        for (int rep = 0; rep < 200; rep++) {
            sluice_limiter *l = mk(cases[ci].spec);
            u128 tat = 0; /* units of 1/L ns */
            uint64_t t = (uint64_t)rep * 1000003;
            for (int k = 0; k < 60; k++) {
                tu_xorshift64(&x);
                t += (x >> 40) % (2 * W / L + 1); /* about two emission intervals */
                uint64_t p = 1 + (x >> 8) % B;
                u128 tl = (u128)t * L;
                u128 base = tat > tl ? tat : tl;
                u128 slack = (u128)(B - p) * W;
                u128 at = base > tl + slack ? base - slack : tl;
                uint64_t wait = (uint64_t)((at - tl + L - 1) / L);
                sluice_result r;
                if (x >> 63) { /* a reservation, any wait */
                    sluice_reservation rv;
                    assert_true(sluice_reserve_at(l, p, t, UINT64_MAX, &rv, &r));
                    if (rv.wait_ns != wait)
                        fail_msg("%s rep %d step %d: reserve %llu at %llu waits %llu, VSA %llu",
                                 cases[ci].spec, rep, k, (unsigned long long)p,
                                 (unsigned long long)t, (unsigned long long)rv.wait_ns,
                                 (unsigned long long)wait);
                    tat = base + (u128)p * W;
                } else { /* a plain try */
                    bool ok = sluice_try_acquire_at(l, p, t, &r);
                    if (ok != (at == tl))
                        fail_msg("%s rep %d step %d: try %llu at %llu: %d, VSA %d", cases[ci].spec,
                                 rep, k, (unsigned long long)p, (unsigned long long)t, ok, at == tl);
                    if (ok) tat = base + (u128)p * W;
                    else assert_int_equal(r.retry_after_ns, (int64_t)wait);
                }
            }
            sluice_limiter_free(l);
        }
    }
}

/* Cancelled before its time, with nothing after it: the limiter decides
 * exactly as a twin that never reserved, for every later request. */
static void test_cancel_exact(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "token-bucket 3/s burst=2", "token-bucket 7/10s", "token-bucket 1000000000/s burst=5",
        "leaky-bucket 3/s capacity=2 nodelay", "leaky-bucket 5/s capacity=3",
    };
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        for (int rep = 0; rep < 300; rep++) {
            sluice_limiter *a = mk(specs[si]), *b = mk(specs[si]);
            uint64_t t = (uint64_t)rep * 977 * SEC;
            /* a common history */
            for (int k = 0; k < 6; k++) {
                tu_xorshift64(&x);
                t += x % (SEC / 2);
                uint64_t p = x >> 60 & 1 ? 1 : 2;
                sluice_result ra, rb;
                assert_int_equal(sluice_try_acquire_at(a, p, t, &ra),
                                 sluice_try_acquire_at(b, p, t, &rb));
            }
            /* a reserves; b does not; a cancels before its time */
            sluice_reservation rv;
            sluice_result r;
            tu_xorshift64(&x);
            bool ok = sluice_reserve_at(a, 1 + (x & 1), t, UINT64_MAX, &rv, &r);
            if (!ok || rv.wait_ns < 2) {
                sluice_limiter_free(a);
                sluice_limiter_free(b);
                continue;
            }
            uint64_t tc = t + (x >> 20) % rv.wait_ns;
            if (tc >= rv.at_ns) tc = rv.at_ns - 1;
            assert_int_equal(sluice_reservation_cancel_at(&rv, tc), 0);
            assert_int_equal(sluice_reservation_cancel_at(&rv, tc), SLUICE_ENOENT);
            /* b must have seen time tc too (a's clamp moved to tc) */
            sluice_result rb0;
            sluice_try_acquire_at(b, 0, tc, &rb0);
            for (int k = 0; k < 20; k++) {
                tu_xorshift64(&x);
                uint64_t tt = tc + x % (2 * SEC);
                if (k % 5 == 0) tt = tc; /* also at the cancel instant */
                uint64_t p = x >> 61;
                sluice_result ra, rb;
                bool oa = sluice_try_acquire_at(a, p, tt, &ra);
                bool ob = sluice_try_acquire_at(b, p, tt, &rb);
                if (oa != ob || ra.remaining != rb.remaining || ra.retry_after_ns != rb.retry_after_ns ||
                    ra.wait_ns != rb.wait_ns)
                    fail_msg("%s rep %d step %d: with cancelled reservation %d/%llu/%lld/%llu, "
                             "twin %d/%llu/%lld/%llu",
                             specs[si], rep, k, oa, (unsigned long long)ra.remaining,
                             (long long)ra.retry_after_ns, (unsigned long long)ra.wait_ns, ob,
                             (unsigned long long)rb.remaining, (long long)rb.retry_after_ns,
                             (unsigned long long)rb.wait_ns);
                t = tt;
            }
            sluice_limiter_free(a);
            sluice_limiter_free(b);
        }
    }
}

/* Cancelled after a later reservation: never more permissive than a twin
 * that never made the first one (x/time/rate issues 56924, 69419). */
static void test_cancel_with_later(void **state)
{
    (void)state;
    uint64_t x = 12345;
    for (int rep = 0; rep < 2000; rep++) {
        sluice_limiter *a = mk("token-bucket 4/s burst=3"), *b = mk("token-bucket 4/s burst=3");
        uint64_t t = SEC;
        sluice_reservation r1, r2;
        sluice_result r;
        assert_true(sluice_reserve_at(a, 3, t, UINT64_MAX, &r1, &r)); /* the burst */
        assert_true(sluice_reserve_at(b, 3, t, UINT64_MAX, NULL, &r));
        tu_xorshift64(&x);
        uint64_t p1 = 1 + x % 3, p2 = 1 + (x >> 8) % 3;
        assert_true(sluice_reserve_at(a, p1, t, UINT64_MAX, &r1, &r)); /* a only */
        assert_true(sluice_reserve_at(a, p2, t, UINT64_MAX, &r2, &r)); /* both */
        assert_true(sluice_reserve_at(b, p2, t, UINT64_MAX, NULL, &r));
        uint64_t tc = t + (x >> 16) % (r1.wait_ns + 1);
        int rc = sluice_reservation_cancel_at(&r1, tc);
        assert_true(rc == 0 || (rc == SLUICE_ENOENT && tc >= r1.at_ns));
        for (uint64_t tt = tc; tt < tc + 3 * SEC; tt += SEC / 16) {
            sluice_result ra, rb;
            sluice_try_acquire_at(a, 0, tt, &ra);
            sluice_try_acquire_at(b, 0, tt, &rb);
            if (ra.remaining > rb.remaining)
                fail_msg("rep %d: at %llu a has %llu permits, its twin %llu", rep,
                         (unsigned long long)tt, (unsigned long long)ra.remaining,
                         (unsigned long long)rb.remaining);
        }
        sluice_limiter_free(a);
        sluice_limiter_free(b);
    }
}

static void test_cancel_rules(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 1/s burst=1");
    sluice_reservation rv;
    memset(&rv, 0, sizeof rv);
    assert_int_equal(sluice_reservation_cancel_at(&rv, 0), SLUICE_EINVAL); /* never made */
    assert_int_equal(sluice_reservation_cancel_at(NULL, 0), SLUICE_EINVAL);
    assert_true(sluice_reserve_at(l, 1, SEC, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_cancel_at(&rv, SEC), SLUICE_ENOENT); /* used at once */
    assert_true(sluice_reserve_at(l, 1, SEC, 5 * SEC, &rv, NULL));
    assert_int_equal(rv.at_ns, 2 * SEC);
    assert_int_equal(sluice_reservation_cancel_at(&rv, 2 * SEC), SLUICE_ENOENT); /* its time */
    sluice_limiter_free(l);

    /* a reservation of 0 permits gives nothing back and writes nothing: a
     * cancel before its time must not move the limiter's time (found by
     * fuzz_api: a later request at t=0 was decided at the cancel's t, so a
     * bucket a day's drip from empty still held that request 2^63 ns on) */
    for (int k = 0; k < 2; k++) {
        const char *spec = k ? "leaky-bucket 1/d capacity=16 nodelay" : "token-bucket 1/d burst=16";
        const uint64_t END = (uint64_t)INT64_MAX;
        l = mk(spec);
        sluice_result r;
        assert_true(sluice_reserve_at(l, 0, END, 0, &rv, NULL));
        assert_int_equal(sluice_reservation_cancel_at(&rv, END - 1), SLUICE_ENOENT);
        assert_true(sluice_try_acquire_at(l, 1, 0, &r));
        assert_int_equal(r.remaining, 15); /* admitted at 0, not at END - 1 */
        assert_true(sluice_try_acquire_at(l, 1, END, &r));
        assert_int_equal(r.remaining, 15); /* the first drained long ago */
        /* still open to a settle: a probe's overdraft is charged */
        assert_int_equal(sluice_reservation_settle_at(&rv, 2, END), 0);
        assert_true(sluice_try_acquire_at(l, 0, END, &r));
        assert_int_equal(r.remaining, 13);
        sluice_limiter_free(l);
    }

    /* the windows cannot book the future: reserve is try, cancel refused */
    l = mk("sliding-log 2/s");
    sluice_result r;
    assert_true(sluice_reserve_at(l, 2, SEC, UINT64_MAX, &rv, &r));
    assert_int_equal(rv.wait_ns, 0);
    assert_int_equal(sluice_reservation_cancel_at(&rv, SEC), SLUICE_EINVAL);
    assert_false(sluice_reserve_at(l, 1, SEC, UINT64_MAX, &rv, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)SEC);
    sluice_limiter_free(l);
}

/* A blocked acquire wakes on cancel, returns false with ECANCELED, and its
 * booked permits are given back. */
struct waiter {
    sluice_limiter *l;
    sluice_canceller *c;
    bool ok;
    int err;
    uint64_t took_ns;
    uint64_t start_ns, end_ns;
};

static void *wait_run(void *arg)
{
    struct waiter *w = arg;
    uint64_t t0 = sluice_now_ns();
    w->err = sluice_acquire_cancellable(w->l, 1, 60 * SEC, w->c);
    w->ok = w->err == 0;
    w->took_ns = sluice_now_ns() - t0;
    return NULL;
}

static void test_acquire_cancel(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 1/min burst=1");
    sluice_canceller *c = sluice_canceller_new();
    assert_non_null(c);
    assert_int_equal(sluice_acquire_cancellable(l, 1, 0, c), 0); /* the one token */
    struct waiter w = {l, c, true, 0, 0, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_run, &w), 0);
    tu_sleep_ns(50000000); /* let it book and sleep (it would sleep 60 s) */
    sluice_canceller_cancel(c);
    pthread_join(th, NULL);
    assert_false(w.ok);
    assert_int_equal(w.err, SLUICE_ECANCELED);
    assert_true(w.took_ns < 30 * SEC);
    /* the booked permit came back: the next token is due a minute after the
     * first, not two */
    sluice_result r;
    assert_false(sluice_try_acquire_at(l, 1, sluice_now_ns(), &r));
    assert_true(r.retry_after_ns <= (int64_t)(60 * SEC));
    /* a cancelled canceller fails every later acquire at once */
    assert_int_equal(sluice_acquire_cancellable(l, 1, UINT64_MAX, c), SLUICE_ECANCELED);
    sluice_canceller_free(c);
    sluice_canceller_free(NULL);
    sluice_limiter_free(l);
}

/* Several threads acquiring at once with a timeout: those that cannot be
 * served in time return at once, the others in FIFO booking order; the
 * total granted is what the bucket can give in the timeout. */
static void *acq_run(void *arg)
{
    struct waiter *w = arg;
    w->start_ns = sluice_now_ns();
    w->err = sluice_acquire_cancellable(w->l, 1, 100000000, NULL); /* 100 ms */
    w->ok = w->err == 0;
    w->end_ns = sluice_now_ns();
    w->took_ns = w->end_ns - w->start_ns;
    return NULL;
}

static void test_acquire_threads(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 50/s burst=1"); /* one per 20 ms */
    enum { N = 12 };
    struct waiter w[N];
    pthread_t th[N];
    for (int k = 0; k < N; k++) {
        w[k] = (struct waiter){l, NULL, false, 0, 0, 0, 0};
        assert_int_equal(pthread_create(&th[k], NULL, acq_run, &w[k]), 0);
    }
    int granted = 0;
    uint64_t first = UINT64_MAX, last = 0;
    for (int k = 0; k < N; k++) {
        pthread_join(th[k], NULL);
        if (w[k].start_ns < first) first = w[k].start_ns;
        if (w[k].end_ns > last) last = w[k].end_ns;
        if (w[k].ok) {
            granted++;
            assert_true(w[k].took_ns < 400000000); /* 100 ms + scheduling */
        } else {
            assert_int_equal(w[k].err, SLUICE_ETIMEDOUT);
            assert_true(w[k].took_ns < 100000000); /* refused without sleeping it out */
        }
    }
    /* the first at once and one per 20 ms: at least the 5 that fit 100 ms
     * when all start together, and never more than the bucket gave over the
     * whole span (however late the threads started on a busy machine) */
    assert_true(granted >= 5);
    assert_true((uint64_t)granted <= 1 + (last - first) / 20000000 + 1);
    sluice_limiter_free(l);
}

/* Regression (issue 9, defect 1): a reservation carries its limiter, so it
 * can only give its permits back there; cancelling it never hands them to
 * another limiter. */
static void test_cancel_bound_to_limiter(void **state)
{
    (void)state;
    sluice_limiter *a = mk("token-bucket 1/s burst=1"), *b = mk("token-bucket 1/s burst=1");
    sluice_reservation rv;
    assert_true(sluice_try_acquire_at(a, 1, 0, NULL));
    assert_true(sluice_reserve_at(a, 1, 0, UINT64_MAX, &rv, NULL)); /* used at 1 s */
    assert_ptr_equal(rv.limiter, a);
    assert_int_equal(rv.at_ns, SEC);
    assert_true(sluice_try_acquire_at(b, 1, 0, NULL));
    assert_int_equal(sluice_reservation_cancel_at(&rv, 0), 0);
    /* b gained nothing: still one permit at one instant with burst=1 */
    assert_false(sluice_try_acquire_at(b, 1, 0, NULL));
    /* a got its permit back: its bucket is as if the reservation never was */
    sluice_result r;
    assert_false(sluice_try_acquire_at(a, 1, 0, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)SEC);
    assert_true(sluice_try_acquire_at(a, 1, SEC, NULL));
    sluice_limiter_free(a);
    sluice_limiter_free(b);
}

/* Regression (defect 2): a stale cancel, whose time is clamped to a later
 * admission past the reservation's time, reports SLUICE_ENOENT and gives
 * nothing back. */
static void test_cancel_stale(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 1/s burst=1");
    sluice_reservation rv;
    assert_true(sluice_try_acquire_at(l, 1, 0, NULL));
    assert_true(sluice_reserve_at(l, 1, 0, UINT64_MAX, &rv, NULL));
    assert_int_equal(rv.at_ns, SEC);
    assert_true(sluice_try_acquire_at(l, 1, 2 * SEC, NULL));
    assert_int_equal(sluice_reservation_cancel_at(&rv, 0), SLUICE_ENOENT);
    /* one permit at 2 s with burst=1, not two */
    assert_false(sluice_try_acquire_at(l, 1, 2 * SEC, NULL));
    sluice_limiter_free(l);
}

/* A cancel gives permits back: the one change that makes a bucket more
 * permissive.  Refusals asked without details (which the limiter may
 * settle from the time its last admission left, limiter.c) see them back
 * at once, then the admissions after are exact again to the nanosecond. */
static void test_cancel_then_refusal(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 1/s burst=1");
    sluice_reservation rv;
    assert_true(sluice_try_acquire_at(l, 1, 0, NULL)); /* empty until 1 s */
    assert_true(sluice_reserve_at(l, 1, 0, UINT64_MAX, &rv, NULL)); /* in debt to 2 s */
    assert_false(sluice_try_acquire_at(l, 1, SEC + SEC / 2, NULL));
    assert_false(sluice_try_acquire_at(l, 2, SEC + SEC / 2, NULL));
    assert_int_equal(sluice_reservation_cancel_at(&rv, SEC / 2), 0); /* empty to 1 s */
    assert_false(sluice_try_acquire_at(l, 1, SEC - 1, NULL));
    assert_true(sluice_try_acquire_at(l, 1, SEC + SEC / 2, NULL)); /* empty to 2.5 s */
    assert_false(sluice_try_acquire_at(l, 1, 2 * SEC + SEC / 2 - 1, NULL));
    assert_true(sluice_try_acquire_at(l, 1, 2 * SEC + SEC / 2, NULL));
    /* again, once the limiter has seen a cancel */
    assert_true(sluice_reserve_at(l, 1, 2 * SEC + SEC / 2, UINT64_MAX, &rv, NULL));
    assert_false(sluice_try_acquire_at(l, 1, 4 * SEC, NULL));
    assert_int_equal(sluice_reservation_cancel_at(&rv, 3 * SEC), 0);
    assert_true(sluice_try_acquire_at(l, 1, 4 * SEC, NULL));
    assert_false(sluice_try_acquire_at(l, 1, 5 * SEC - 1, NULL));
    sluice_stats st;
    sluice_limiter_stats_get(l, &st);
    assert_int_equal(st.requests_allowed, 6);
    assert_int_equal(st.requests_denied, 6);
    assert_int_equal(st.permits_denied, 7);
    sluice_limiter_free(l);
}

/* Regression (defect 3): however deep reservations put a bucket in debt,
 * retry_after_ns is -1 or a positive wait that fits an int64; the debt is
 * bounded so that the bucket comes back to rest within 2^63-1 ns. */
static void test_debt_bounded(void **state)
{
    (void)state;
    const uint64_t day = 86400 * SEC, W = 36500 * day;
    sluice_limiter *l = mk("token-bucket 1/36500d burst=2");
    sluice_reservation rv;
    unsigned booked = 0;
    for (int i = 0; i < 4; i++) {
        if (sluice_reserve_at(l, 1, 0, UINT64_MAX, &rv, NULL)) {
            booked++;
            assert_true(rv.at_ns <= (uint64_t)INT64_MAX);
        }
    }
    /* 2 from the burst; a third would be repaid at W = 3.15e18 ns, but the
     * bucket would then be full again only at 3W = 9.46e18 ns > 2^63-1, and
     * a later request for the whole burst would be told to wait that long:
     * refused, as is the fourth */
    assert_int_equal(booked, 2);
    sluice_result r;
    assert_false(sluice_try_acquire_at(l, 2, 0, &r));
    assert_true(r.retry_after_ns > 0);
    assert_int_equal(r.retry_after_ns, (int64_t)(2 * W)); /* empty: 2 tokens */
    assert_false(sluice_reserve_at(l, 1, 0, UINT64_MAX, &rv, NULL));
    /* at the edge: a debt that is repaid, and the bucket full, exactly at
     * 2^63-1 is accepted */
    sluice_limiter *e = mk("token-bucket 1/3074457345618258602ns burst=2");
    for (int i = 0; i < 3; i++) assert_true(sluice_reserve_at(e, 1, 0, UINT64_MAX, &rv, NULL));
    assert_false(sluice_reserve_at(e, 1, 0, UINT64_MAX, &rv, NULL));
    assert_false(sluice_try_acquire_at(e, 2, 0, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(3 * 3074457345618258602ULL)); /* 2^63-2 */
    sluice_limiter_free(e);
    assert_false(sluice_try_acquire_at(l, 3, 0, &r));
    assert_int_equal(r.retry_after_ns, -1);
    sluice_limiter_free(l);
}

/* Regression (defect 4): a probe is allowed while the bucket is in debt,
 * for both buckets, and changes nothing. */
static void test_probe_in_debt(void **state)
{
    (void)state;
    static const char *const specs[] = {"leaky-bucket 1/s capacity=1",
                                        "leaky-bucket 1/s capacity=1 nodelay",
                                        "token-bucket 1/s burst=1"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        sluice_limiter *l = mk(specs[k]);
        assert_true(sluice_reserve_at(l, 1, 0, UINT64_MAX, NULL, NULL));
        assert_true(sluice_reserve_at(l, 1, 0, UINT64_MAX, NULL, NULL));
        sluice_result r;
        assert_true(sluice_try_acquire_at(l, 0, 0, &r));
        assert_true(r.allowed);
        assert_int_equal(r.remaining, 0);
        assert_int_equal(r.wait_ns, 0);
        assert_int_equal(r.retry_after_ns, 0);
        /* reserving 0 permits is a probe too, whatever max_wait */
        sluice_reservation rv;
        assert_true(sluice_reserve_at(l, 0, 0, 0, &rv, &r));
        assert_int_equal(rv.permits, 0);
        assert_int_equal(rv.wait_ns, 0);
        assert_int_equal(r.retry_after_ns, 0);
        /* the debt of one permit is repaid at 1 s, the bucket back at 2 s */
        assert_false(sluice_try_acquire_at(l, 1, SEC, &r));
        assert_int_equal(r.retry_after_ns, (int64_t)SEC);
        sluice_limiter_free(l);
    }
}

/* Regression (defect 11): a reservation's at_ns never passes 2^63-1, the
 * end of the time axis: one that would is refused. */
static void test_reserve_at_end_of_time(void **state)
{
    (void)state;
    const uint64_t end = (uint64_t)INT64_MAX;
    sluice_limiter *l = mk("token-bucket 1/d burst=1");
    sluice_reservation rv;
    assert_true(sluice_reserve_at(l, 1, end - SEC, UINT64_MAX, &rv, NULL));
    assert_int_equal(rv.at_ns, end - SEC);
    assert_false(sluice_reserve_at(l, 1, end - SEC, UINT64_MAX, &rv, NULL));
    assert_int_equal(rv.permits, 0);
    /* times past the axis count as 2^63-1 */
    assert_false(sluice_reserve_at(l, 1, UINT64_MAX, UINT64_MAX, &rv, NULL));
    sluice_limiter *s = mk("leaky-bucket 1/s capacity=5");
    assert_true(sluice_reserve_at(s, 1, end - 1, UINT64_MAX, &rv, NULL));
    assert_int_equal(rv.at_ns, end - 1); /* the shaper: no water yet */
    assert_false(sluice_reserve_at(s, 1, end - 1, UINT64_MAX, &rv, NULL)); /* would wait 1 s */
    sluice_limiter_free(l);
    sluice_limiter_free(s);
}


/* ---- settling a reservation (docs/decisions.md 3.10) --------------------- */

/* The return codes: 0 once; then SLUICE_ENOENT for a second settle and for
 * a cancel, and for a settle after a cancel or of a refused reservation;
 * SLUICE_EINVAL for NULL and a reservation never made.  Each refusal
 * changes nothing. */
static void test_settle_codes(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 10/s burst=10");
    sluice_reservation rv, none;
    memset(&none, 0, sizeof none);
    assert_int_equal(sluice_reservation_settle_at(NULL, 1, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_reservation_settle_at(&none, 1, 0), SLUICE_EINVAL);
    assert_true(sluice_reserve_at(l, 6, 0, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 2, 0), 0);
    assert_int_equal(sluice_reservation_settle_at(&rv, 0, 0), SLUICE_ENOENT);
    assert_int_equal(sluice_reservation_settle_at(&rv, 100, 0), SLUICE_ENOENT);
    assert_int_equal(sluice_reservation_cancel_at(&rv, 0), SLUICE_ENOENT);
    sluice_result r;
    assert_true(sluice_try_acquire_at(l, 0, 0, &r));
    assert_int_equal(r.remaining, 8); /* 2 used, and nothing more */
    assert_true(sluice_reserve_at(l, 3, 0, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_cancel_at(&rv, 0), SLUICE_ENOENT); /* its time: 0 */
    assert_int_equal(sluice_reservation_settle_at(&rv, 0, 0), SLUICE_ENOENT);
    /* one in debt: cancelled before its time, then no settle */
    assert_true(sluice_reserve_at(l, 7, 0, UINT64_MAX, &rv, NULL));
    assert_int_equal(sluice_reservation_cancel_at(&rv, 0), 0);
    assert_int_equal(sluice_reservation_settle_at(&rv, 9, 0), SLUICE_ENOENT);
    /* a refused one */
    assert_false(sluice_reserve_at(l, 6, 0, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 1, 0), SLUICE_ENOENT);
    assert_true(sluice_try_acquire_at(l, 0, 0, &r));
    assert_int_equal(r.remaining, 5);
    sluice_limiter_free(l);
    /* a window's reservation settles too; its cancel stays SLUICE_EINVAL */
    l = mk("fixed-window 10/s");
    assert_true(sluice_reserve_at(l, 4, 0, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_cancel_at(&rv, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_reservation_settle_at(&rv, 1, 0), 0);
    assert_int_equal(sluice_reservation_settle_at(&rv, 1, 0), SLUICE_ENOENT);
    assert_true(sluice_try_acquire_at(l, 0, 0, &r));
    assert_int_equal(r.remaining, 9);
    sluice_limiter_free(l);
}

/* Worked examples of each rule, numbers from the contract. */
static void test_settle_rules(void **state)
{
    (void)state;
    sluice_reservation rv;
    sluice_result r;
    /* token-bucket, below, at once: the 6 go back */
    sluice_limiter *l = mk("token-bucket 1/s burst=10");
    assert_true(sluice_reserve_at(l, 10, 0, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 4, 0), 0);
    assert_true(sluice_try_acquire_at(l, 6, 0, &r));
    assert_false(sluice_try_acquire_at(l, 1, 0, &r));
    sluice_limiter_free(l);
    /* below, 5 s later, another 5 taken meanwhile: the permits were due
     * at 0 and others came since, so they count as used (had it taken 0,
     * the bucket would have been full from 0 to 5 s and lost that refill) */
    l = mk("token-bucket 1/s burst=10");
    assert_true(sluice_reserve_at(l, 10, 0, 0, &rv, NULL));
    assert_true(sluice_try_acquire_at(l, 5, 5 * SEC, &r));
    assert_int_equal(sluice_reservation_settle_at(&rv, 0, 5 * SEC), 0);
    assert_false(sluice_try_acquire_at(l, 1, 5 * SEC, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)SEC);
    /* a quiet bucket: 3 s later it holds 3; had it taken 2, it would be
     * full: 7 go back */
    assert_true(sluice_reserve_at(l, 10, 100 * SEC, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 2, 103 * SEC), 0);
    assert_true(sluice_try_acquire_at(l, 10, 103 * SEC, &r));
    /* booked ahead, settled before its time: the cancel's rule, even with
     * traffic in between */
    assert_true(sluice_try_acquire_at(l, 10, 200 * SEC, &r));
    assert_true(sluice_reserve_at(l, 5, 200 * SEC, UINT64_MAX, &rv, NULL));
    assert_int_equal(rv.at_ns, 205 * SEC);
    assert_false(sluice_try_acquire_at(l, 1, 201 * SEC, &r));
    assert_int_equal(sluice_reservation_settle_at(&rv, 1, 201 * SEC), 0);
    /* -5 + 1 refilled + 4 back: empty, one more in 1 s */
    assert_false(sluice_try_acquire_at(l, 1, 201 * SEC, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)SEC);
    sluice_limiter_free(l);
    /* after a change of spec, nothing goes back; an excess is charged */
    l = mk("token-bucket 10/s burst=10");
    assert_true(sluice_reserve_at(l, 10, 0, 0, &rv, NULL));
    char err[128];
    assert_int_equal(sluice_limiter_reconfigure_at(l, "token-bucket 20/s burst=10", 0, err,
                                                   sizeof err), 0);
    assert_int_equal(sluice_reservation_settle_at(&rv, 0, 0), 0);
    assert_false(sluice_try_acquire_at(l, 1, 0, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(SEC / 20));
    assert_true(sluice_reserve_at(l, 1, SEC, 0, &rv, NULL));
    /* full again at 1 s; 11 for 1: -1 token, 2 to one at 20/s */
    assert_int_equal(sluice_reservation_settle_at(&rv, 11, SEC), 0);
    assert_false(sluice_try_acquire_at(l, 1, SEC, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(SEC / 10));
    sluice_limiter_free(l);
    /* above: a debt of 15 tokens at 10/s, paid before anything passes */
    l = mk("token-bucket 10/s burst=10");
    assert_true(sluice_reserve_at(l, 2, 0, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 25, 0), 0);
    assert_false(sluice_try_acquire_at(l, 1, 0, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(16 * SEC / 10));
    assert_false(sluice_try_acquire_at(l, 1, 16 * SEC / 10 - 1, &r));
    assert_true(sluice_try_acquire_at(l, 1, 16 * SEC / 10, &r));
    sluice_limiter_free(l);
    /* fixed-window: back within the window, not after it; above: counted
     * in the window of the settle, past L */
    l = mk("fixed-window 10/s");
    assert_true(sluice_reserve_at(l, 8, SEC / 10, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 3, SEC / 5), 0);
    assert_true(sluice_try_acquire_at(l, 7, SEC / 5, &r));
    assert_false(sluice_try_acquire_at(l, 1, SEC / 5, &r));
    assert_true(sluice_reserve_at(l, 5, SEC + 1, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 0, 2 * SEC + 1), 0);
    assert_true(sluice_try_acquire_at(l, 10, 2 * SEC + 1, &r)); /* window 2 is whole */
    assert_true(sluice_reserve_at(l, 5, 3 * SEC, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 15, 3 * SEC + SEC / 2), 0);
    assert_false(sluice_try_acquire_at(l, 1, 3 * SEC + SEC / 2, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(SEC / 2));
    assert_int_equal(r.remaining, 0);
    assert_true(sluice_try_acquire_at(l, 10, 4 * SEC, &r));
    sluice_limiter_free(l);
    /* sliding-approx: back from the next window's prev */
    l = mk("sliding-approx 10/s");
    assert_true(sluice_reserve_at(l, 10, SEC / 2, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 4, SEC + SEC / 2), 0);
    /* est = 4 * 0.5 = 2: room 8 */
    assert_true(sluice_try_acquire_at(l, 0, SEC + SEC / 2, &r));
    assert_int_equal(r.remaining, 8);
    sluice_limiter_free(l);
    /* sliding-log: nothing back; the overdraft leaves the window W later */
    l = mk("sliding-log 10/s");
    assert_true(sluice_reserve_at(l, 6, 0, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 1, 0), 0);
    assert_true(sluice_try_acquire_at(l, 0, 0, &r));
    assert_int_equal(r.remaining, 4);
    assert_true(sluice_reserve_at(l, 4, SEC / 2, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, 30, SEC / 2), 0);
    assert_false(sluice_try_acquire_at(l, 1, SEC, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(SEC / 2)); /* all leaves at 1.5 s */
    assert_true(sluice_try_acquire_at(l, 10, SEC + SEC / 2, &r));
    sluice_limiter_free(l);
}

/* actual = 0, and actual = 2^64-1 at times near 2^63: no overflow; the
 * overdraft saturates where the state would overflow and the limiter
 * refuses for as long as it lasts. */
static void test_settle_extremes(void **state)
{
    (void)state;
    const uint64_t end = (uint64_t)INT64_MAX;
    static const char *const specs[] = {
        "token-bucket 10/s",        "token-bucket 3/7s burst=3000000000", /* not packed */
        "leaky-bucket 10/s nodelay", "fixed-window 10/s",
        "sliding-approx 10/s",      "sliding-approx 5000000000/s", /* not packed */
        "sliding-log 10/s",         "sliding-wheel 10/s slots=5"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        sluice_limiter *l = mk(specs[k]);
        sluice_reservation rv, rz;
        sluice_result r;
        assert_true(sluice_reserve_at(l, 3, end - 2 * SEC, 0, &rz, NULL));
        assert_int_equal(sluice_reservation_settle_at(&rz, 0, end - 2 * SEC), 0);
        assert_true(sluice_reserve_at(l, 1, end - SEC, 0, &rv, NULL));
        assert_int_equal(sluice_reservation_settle_at(&rv, UINT64_MAX, UINT64_MAX), 0);
        /* past the time axis counts as its end: nothing passes there, and
         * the retry hint still fits an int64 */
        assert_false(sluice_try_acquire_at(l, 1, UINT64_MAX, &r));
        assert_true(r.retry_after_ns > 0 || r.retry_after_ns == -1);
        assert_int_equal(r.remaining, 0);
        assert_true(sluice_try_acquire_at(l, 0, end, &r));
        sluice_limiter_free(l);
    }
    /* the bucket's debt at its cap: 2^63-1 ns of refill, the retry exact */
    sluice_limiter *l = mk("token-bucket 10/s");
    sluice_reservation rv;
    sluice_result r;
    assert_true(sluice_reserve_at(l, 1, 0, 0, &rv, NULL));
    assert_int_equal(sluice_reservation_settle_at(&rv, UINT64_MAX, 0), 0);
    assert_false(sluice_try_acquire_at(l, 1, 0, &r));
    /* deficit (2^63-1)*rl, rl = 1, rw = 10^8, full = 10^9 */
    assert_int_equal(r.retry_after_ns, INT64_MAX - 900000000);
    sluice_limiter_free(l);
}

/* An overdraft past what the state holds (settled at 2^64-1) on a two-
 * window estimate: a refusal inside the window still says when to come
 * back, and that instant is the first allowed one.  (The wait's helper
 * assumed cur <= L: cur + p wrapped and the refusal said 0; fuzz_api.) */
static void test_settle_overdraft_wait(void **state)
{
    (void)state;
    static const char *const specs[] = {"sliding-approx 10/s", "sliding-approx 1000000000000/1d",
                                        "sliding-approx 5000000000/s"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        for (uint64_t p = 1; p <= 3; p++) {
            sluice_limiter *l = mk(specs[k]);
            sluice_spec_info info;
            assert_int_equal(sluice_spec_parse(specs[k], &info, NULL, 0), 0);
            const uint64_t W = info.period_ns, t = 5 * W + W / 3, r0 = t % W;
            sluice_reservation rv;
            sluice_result r;
            assert_true(sluice_reserve_at(l, 1, t, 0, &rv, NULL));
            assert_int_equal(sluice_reservation_settle_at(&rv, UINT64_MAX, t), 0);
            assert_false(sluice_try_acquire_at(l, p, t, &r));
            /* nothing fits in this window; in the next, once the previous
             * window's weight has fallen enough, before its end */
            if (r.retry_after_ns <= (int64_t)(W - r0) || r.retry_after_ns > (int64_t)(2 * W - r0))
                fail_msg("%s p=%llu: retry_after %lld outside (%llu, %llu]", specs[k],
                         (unsigned long long)p, (long long)r.retry_after_ns,
                         (unsigned long long)(W - r0), (unsigned long long)(2 * W - r0));
            const uint64_t at = t + (uint64_t)r.retry_after_ns;
            assert_false(sluice_try_acquire_at(l, p, at - 1, NULL));
            assert_true(sluice_try_acquire_at(l, p, at, NULL));
            sluice_limiter_free(l);
        }
    }
}

/* Random reservations, settles (0, below, equal, above, far above),
 * decisions and stale times, on every algorithm, decision by decision
 * against the reference model's settle; and the bound: in every window,
 * what was admitted, each reservation at its settled cost, never passes
 * the limit (the overdrafts come on top of it, never inside it). */
typedef struct settle_case {
    const char *spec;
    ref_params rp;
} settle_case;

typedef struct adm {
    uint64_t t, cost;
} adm;

static int adm_cmp(const void *x, const void *y)
{
    const adm *a = x, *b = y;
    return a->t < b->t ? -1 : a->t > b->t;
}

static void check_bound(const settle_case *c, const adm *a, size_t n)
{
    const ref_params *p = &c->rp;
    const uint64_t W = p->period_ns;
    for (size_t e = 0; e < n; e++) {
        u128 sum = 0;
        for (size_t s = e + 1; s-- > 0;) {
            switch (p->alg) {
            case REF_FIXED_WINDOW:
                if (a[s].t / W != a[e].t / W) goto next;
                break;
            case REF_SLIDING_LOG:
                if (a[e].t - a[s].t >= W) goto next;
                break;
            case REF_TOKEN_BUCKET: break;
            default: return;
            }
            sum += a[s].cost;
            if (p->alg == REF_TOKEN_BUCKET) {
                /* [t_s, t_e]: B + (t_e - t_s) L / W */
                const u128 cap = (u128)(p->capacity ? p->capacity : p->limit) * W +
                                 (u128)(a[e].t - a[s].t) * p->limit;
                if (sum * W > cap)
                    fail_msg("%s: %llu admitted in [%llu, %llu]", c->spec,
                             (unsigned long long)sum, (unsigned long long)a[s].t,
                             (unsigned long long)a[e].t);
            } else if (sum > p->limit) {
                fail_msg("%s: %llu admitted in the window of %llu", c->spec,
                         (unsigned long long)sum, (unsigned long long)a[e].t);
            }
        }
    next:;
    }
}

static void test_settle_model(void **state)
{
    (void)state;
    const settle_case cases[] = {
        {"fixed-window 10/s", {.alg = REF_FIXED_WINDOW, .limit = 10, .period_ns = SEC}},
        {"sliding-approx 10/s", {.alg = REF_SLIDING_APPROX, .limit = 10, .period_ns = SEC}},
        {"sliding-log 10/s", {.alg = REF_SLIDING_LOG, .limit = 10, .period_ns = SEC}},
        {"sliding-wheel 10/s slots=4",
         {.alg = REF_SLIDING_WHEEL, .limit = 10, .period_ns = SEC, .slots = 4}},
        {"token-bucket 10/s burst=8",
         {.alg = REF_TOKEN_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 8}},
        {"token-bucket 3/7s burst=5",
         {.alg = REF_TOKEN_BUCKET, .limit = 3, .period_ns = 7 * SEC, .capacity = 5}},
        {"token-bucket 3/7s burst=3000000000", /* burst*rw >= 2^64: locked */
         {.alg = REF_TOKEN_BUCKET, .limit = 3, .period_ns = 7 * SEC, .capacity = 3000000000}},
        {"leaky-bucket 10/s capacity=6 nodelay",
         {.alg = REF_LEAKY_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 6, .nodelay = true}},
    };
    uint64_t seed = tu_env_seed();
    print_message("seed %llu (SLUICE_TEST_SEED)\n", (unsigned long long)seed);
    enum { STEPS = 3000, OPEN = 8 };
    /* pass 0: every reservation is due at once; pass 1: a bucket's may
     * book ahead.  The bound is checked on pass 0 only: a booking given
     * back before its time leaves later bookings with their longer wait
     * (the cancel's rule), so their permits are taken before their at_ns
     * by others and at_ns is no longer when they are used. */
    for (size_t run = 0; run < 2 * (sizeof cases / sizeof cases[0]); run++) {
        const size_t ci = run / 2, pass = run % 2;
        const settle_case *c = &cases[ci];
        sluice_limiter *l = mk(c->spec);
        ref_model *m = ref_model_new(&c->rp);
        assert_non_null(m);
        sluice_reservation rv[OPEN];
        ref_resv mv[OPEN];
        size_t adm_of[OPEN];
        bool open[OPEN] = {false};
        adm *ad = calloc(STEPS, sizeof *ad);
        size_t nad = 0;
        const uint64_t W = c->rp.period_ns, cap = ref_model_max_grant(m);
        const bool bucket = c->rp.alg == REF_TOKEN_BUCKET || c->rp.alg == REF_LEAKY_BUCKET;
        uint64_t now = 5 * W;
        for (int i = 0; i < STEPS; i++) {
            uint64_t dice = tu_splitmix64_below(&seed, 100);
            if (dice < 30) now += tu_splitmix64_below(&seed, W / 4 + 1);
            uint64_t t = dice % 10 == 0 && now > W ? now - tu_splitmix64_below(&seed, W) : now;
            size_t slot = (size_t)tu_splitmix64_below(&seed, OPEN);
            uint64_t p = tu_splitmix64_below(&seed, cap + 2);
            sluice_result r;
            ref_result mr;
            if (dice < 45) { /* a plain decision */
                bool ok = sluice_try_acquire_at(l, p, t, &r);
                bool mok = ref_model_decide(m, p, t, &mr);
                if (ok != mok || r.remaining != mr.remaining ||
                    r.retry_after_ns != mr.retry_after_ns)
                    fail_msg("%s step %d: try %llu at %llu: %d/%llu/%lld, model %d/%llu/%lld",
                             c->spec, i, (unsigned long long)p, (unsigned long long)t, ok,
                             (unsigned long long)r.remaining, (long long)r.retry_after_ns, mok,
                             (unsigned long long)mr.remaining, (long long)mr.retry_after_ns);
                if (ok && p) ad[nad++] = (adm){ref_model_latest(m), p};
            } else if (dice < 75 && !open[slot]) { /* a reservation */
                /* a bucket's may book ahead, into debt */
                const bool ahead = bucket && pass == 1 && dice % 2;
                const uint64_t mw = ahead ? tu_splitmix64_below(&seed, 2 * W) : 0;
                bool ok = sluice_reserve_at(l, p, t, mw, &rv[slot], &r);
                bool mok = ref_model_reserve(m, p, t, mw, &mr, &mv[slot]);
                if (ok != mok || (ahead ? r.wait_ns != mr.wait_ns : r.remaining != mr.remaining))
                    fail_msg("%s step %d: reserve %llu at %llu: %d/%llu/%llu, model %d/%llu/%llu",
                             c->spec, i, (unsigned long long)p, (unsigned long long)t, ok,
                             (unsigned long long)r.remaining, (unsigned long long)r.wait_ns,
                             mok, (unsigned long long)mr.remaining,
                             (unsigned long long)mr.wait_ns);
                if (ok) {
                    if (rv[slot].at_ns != mv[slot].at)
                        fail_msg("%s step %d: due at %llu, model at %llu", c->spec, i,
                                 (unsigned long long)rv[slot].at_ns,
                                 (unsigned long long)mv[slot].at);
                    open[slot] = true;
                    adm_of[slot] = nad;
                    /* used at its time: booked permits count from then */
                    ad[nad++] = (adm){mv[slot].at, p};
                }
            } else if (open[slot]) { /* a settle */
                const uint64_t rp = rv[slot].permits;
                uint64_t a;
                switch (tu_splitmix64_below(&seed, 5)) {
                case 0: a = 0; break;
                case 1: a = rp ? tu_splitmix64_below(&seed, rp) : 0; break;
                case 2: a = rp; break;
                /* overdrafts small enough that no debt reaches its cap
                 * (2^63-1 ns of refill: test_settle_extremes) */
                case 3: a = rp + 1 + tu_splitmix64_below(&seed, cap < 100 ? cap : 100); break;
                default: a = rp + tu_splitmix64_below(&seed, cap < 100 ? 4 * cap : 400); break;
                }
                assert_int_equal(sluice_reservation_settle_at(&rv[slot], a, t), 0);
                ref_model_settle(m, &mv[slot], a, t);
                assert_int_equal(sluice_reservation_settle_at(&rv[slot], a, t), SLUICE_ENOENT);
                if (a < ad[adm_of[slot]].cost) ad[adm_of[slot]].cost = a;
                open[slot] = false;
            }
            /* after every step: one permit now, as the model says */
            bool ok = sluice_try_acquire_at(l, 0, t, &r);
            bool mok = ref_model_decide(m, 0, t, &mr);
            if (!ok || !mok || r.remaining != mr.remaining)
                fail_msg("%s step %d: remaining %llu at %llu, model %llu", c->spec, i,
                         (unsigned long long)r.remaining, (unsigned long long)t,
                         (unsigned long long)mr.remaining);
        }
        qsort(ad, nad, sizeof *ad, adm_cmp);
        if (pass == 0) check_bound(c, ad, nad);
        free(ad);
        ref_model_free(m);
        sluice_limiter_free(l);
    }
}

/* Settles from several threads on one limiter, lock-free (fixed-window,
 * sliding-approx) and locked (sliding-log), all within one window and
 * with room for everything: each settle moves the count by exactly
 * a - p (sliding-log: max(0, a - p), as it gives nothing back), so the
 * window ends holding the sum of the settled costs, and every second
 * settle is refused.  Run under TSan in CI. */
enum { ST_THREADS = 4, ST_ITERS = 2000 };

typedef struct settle_worker {
    sluice_limiter *l;
    uint64_t seed, total, total_log;
    tu_errs errs;
} settle_worker;

static void *settle_run(void *arg)
{
    settle_worker *w = arg;
    for (int i = 0; i < ST_ITERS; i++) {
        const uint64_t p = 1 + tu_splitmix64_below(&w->seed, 50);
        const uint64_t a = tu_splitmix64_below(&w->seed, 100);
        const uint64_t t = SEC + tu_splitmix64_below(&w->seed, SEC / 2);
        sluice_reservation rv;
        if (!sluice_reserve_at(w->l, p, t, 0, &rv, NULL)) {
            tu_errs_add(&w->errs, "reservation of %llu refused", (unsigned long long)p);
            continue;
        }
        int rc = sluice_reservation_settle_at(&rv, a, t);
        if (rc != 0) tu_errs_add(&w->errs, "settle returned %d", rc);
        rc = sluice_reservation_settle_at(&rv, a, t);
        if (rc != SLUICE_ENOENT) tu_errs_add(&w->errs, "second settle returned %d", rc);
        w->total += a;
        w->total_log += a > p ? a : p;
    }
    return NULL;
}

static void test_settle_threads(void **state)
{
    (void)state;
    static const char *const specs[] = {"fixed-window 1000000000/2s",
                                        "sliding-approx 1000000000/2s",
                                        "sliding-log 1000000000/2s"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        sluice_limiter *l = mk(specs[k]);
        settle_worker w[ST_THREADS];
        pthread_t th[ST_THREADS];
        memset(w, 0, sizeof w);
        for (int i = 0; i < ST_THREADS; i++) {
            w[i].l = l;
            w[i].seed = tu_env_seed() + (uint64_t)i;
            assert_int_equal(pthread_create(&th[i], NULL, settle_run, &w[i]), 0);
        }
        uint64_t total = 0;
        for (int i = 0; i < ST_THREADS; i++) pthread_join(th[i], NULL); /* all, before a failure */
        for (int i = 0; i < ST_THREADS; i++) {
            if (w[i].errs.n) fail_msg("%s: %s", specs[k], w[i].errs.msg);
            total += k == 2 ? w[i].total_log : w[i].total;
        }
        sluice_result r;
        assert_true(sluice_try_acquire_at(l, 0, SEC + SEC / 2, &r));
        if (r.remaining != 1000000000 - total)
            fail_msg("%s: remaining %llu, want %llu", specs[k], (unsigned long long)r.remaining,
                     (unsigned long long)(1000000000 - total));
        sluice_limiter_free(l);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_wait),
        cmocka_unit_test(test_reserve_vsa),
        cmocka_unit_test(test_cancel_exact),
        cmocka_unit_test(test_cancel_with_later),
        cmocka_unit_test(test_cancel_rules),
        cmocka_unit_test(test_acquire_cancel),
        cmocka_unit_test(test_acquire_threads),
        cmocka_unit_test(test_cancel_bound_to_limiter),
        cmocka_unit_test(test_cancel_stale),
        cmocka_unit_test(test_cancel_then_refusal),
        cmocka_unit_test(test_debt_bounded),
        cmocka_unit_test(test_probe_in_debt),
        cmocka_unit_test(test_reserve_at_end_of_time),
        cmocka_unit_test(test_settle_codes),
        cmocka_unit_test(test_settle_rules),
        cmocka_unit_test(test_settle_extremes),
        cmocka_unit_test(test_settle_overdraft_wait),
        cmocka_unit_test(test_settle_model),
        cmocka_unit_test(test_settle_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
