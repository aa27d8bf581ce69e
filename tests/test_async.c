/* test_async.c -- asynchronous acquire through a wheel driven by hand:
 * FIFO grants, the shaper's constant-rate release (each grant within one
 * tick of the contract's wait_ns, checked against a twin limiter's
 * decisions), the queue bound, and cancellation (also from callbacks). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>
#include <string.h>

#define MS 1000000ULL
#define SEC 1000000000ULL
#define TICK MS

typedef struct log {
    int n;
    uint64_t id[256], at[256];
    int tag[256];
} log_t;

struct ctx {
    log_t *log;
    int tag;
    sluice_limiter *lim;
    uint64_t cancel_id; /* cancel this from inside the callback, if not 0 */
    int cancel_rc;
};

static void on_grant(void *arg, uint64_t id, uint64_t now)
{
    struct ctx *c = arg;
    c->log->id[c->log->n] = id;
    c->log->at[c->log->n] = now;
    c->log->tag[c->log->n++] = c->tag;
    if (c->cancel_id) c->cancel_rc = sluice_async_cancel_at(c->lim, c->cancel_id, now);
}

static sluice_limiter *mk(const char *spec)
{
    char err[256];
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    if (!l) fail_msg("%s: %s", spec, err);
    return l;
}

static sluice_wheel *wheel(uint64_t t0)
{
    char err[128];
    sluice_wheel *w = sluice_wheel_new(TICK, 100000, t0, err, sizeof err);
    if (!w) fail_msg("wheel: %s", err);
    return w;
}

/* Drive the wheel by hand from t to end in steps of `step`. */
static void run(sluice_wheel *w, uint64_t t, uint64_t end, uint64_t step)
{
    for (; t <= end; t += step) sluice_wheel_advance(w, t);
}

/* The leaky-bucket shaper releases a burst at the constant rate: each
 * callback within one tick after the contract's wait_ns (a twin limiter's
 * try_acquire_at at the same instants), never before, in FIFO order. */
static void test_shaper_release(void **state)
{
    (void)state;
    const uint64_t t0 = 5 * SEC;
    sluice_limiter *l = mk("leaky-bucket 100/s capacity=50"), *twin = mk("leaky-bucket 100/s capacity=50");
    sluice_wheel *w = wheel(t0);
    log_t lg = {0};
    struct ctx c[40];
    uint64_t want[40];
    for (int k = 0; k < 40; k++) {
        c[k] = (struct ctx){&lg, k, l, 0, 0};
        uint64_t at = t0 + (uint64_t)k * 100000; /* 0.1 ms apart */
        assert_int_equal(sluice_acquire_async_at(l, w, 1, at, on_grant, &c[k], NULL), 0);
        sluice_result r;
        assert_true(sluice_try_acquire_at(twin, 1, at, &r));
        want[k] = at + r.wait_ns;
    }
    run(w, t0, t0 + 2 * SEC, 250000); /* advance every 0.25 ms */
    assert_int_equal(lg.n, 40);
    for (int k = 0; k < 40; k++) {
        assert_int_equal(lg.tag[k], k); /* FIFO */
        if (lg.at[k] < want[k] || lg.at[k] > want[k] + TICK + 250000)
            fail_msg("grant %d at %llu, contract %llu", k, (unsigned long long)lg.at[k],
                     (unsigned long long)want[k]);
        if (k) assert_true(lg.at[k] - lg.at[k - 1] <= 10 * MS + TICK + 250000);
    }
    assert_int_equal(sluice_limiter_queued(l), 0);
    sluice_wheel_free(w);
    sluice_limiter_free(l);
    sluice_limiter_free(twin);
}

/* A token bucket books in call order: grants are FIFO and on time. */
static void test_bucket_fifo(void **state)
{
    (void)state;
    const uint64_t t0 = SEC;
    sluice_limiter *l = mk("token-bucket 10/s burst=1");
    sluice_wheel *w = wheel(t0);
    log_t lg = {0};
    struct ctx c[6];
    for (int k = 0; k < 6; k++) {
        c[k] = (struct ctx){&lg, k, l, 0, 0};
        assert_int_equal(sluice_acquire_async_at(l, w, 1, t0, on_grant, &c[k], NULL), 0);
    }
    run(w, t0, t0 + SEC, MS);
    assert_int_equal(lg.n, 6);
    for (int k = 0; k < 6; k++) {
        assert_int_equal(lg.tag[k], k);
        uint64_t due = t0 + (uint64_t)k * 100 * MS;
        assert_true(lg.at[k] >= due && lg.at[k] <= due + TICK);
    }
    sluice_wheel_free(w);
    sluice_limiter_free(l);
}

/* The windows: the head asks at each retry, the others wait their turn. */
static void test_window_fifo(void **state)
{
    (void)state;
    const uint64_t t0 = 500 * MS;
    static const char *const specs[] = {"fixed-window 2/s", "sliding-log 2/s",
                                        "sliding-wheel 2/s slots=4", "sliding-approx 2/s"};
    for (size_t si = 0; si < 4; si++) {
        sluice_limiter *l = mk(specs[si]);
        sluice_wheel *w = wheel(t0);
        log_t lg = {0};
        struct ctx c[5];
        for (int k = 0; k < 5; k++) {
            c[k] = (struct ctx){&lg, k, l, 0, 0};
            assert_int_equal(sluice_acquire_async_at(l, w, 1, t0, on_grant, &c[k], NULL), 0);
        }
        run(w, t0, t0 + 5 * SEC, MS);
        assert_int_equal(lg.n, 5);
        for (int k = 0; k < 5; k++) assert_int_equal(lg.tag[k], k);
        /* never more than the limit in any window */
        sluice_stats st;
        sluice_limiter_stats_get(l, &st);
        assert_int_equal(st.permits_allowed, 5);
        if (si == 0) { /* fixed-window: 2 at once, 2 at 1 s, 1 at 2 s */
            assert_true(lg.at[1] <= t0 + TICK);
            assert_true(lg.at[2] >= SEC && lg.at[3] <= SEC + 2 * TICK);
            assert_true(lg.at[4] >= 2 * SEC && lg.at[4] <= 2 * SEC + 2 * TICK);
        }
        sluice_wheel_free(w);
        sluice_limiter_free(l);
    }
}

static void test_bounds(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 1/s burst=2");
    sluice_wheel *w = wheel(0);
    log_t lg = {0};
    struct ctx c = {&lg, 0, l, 0, 0};
    assert_int_equal(sluice_limiter_set_queue_max(l, 3), 0);
    assert_int_equal(sluice_limiter_set_queue_max(l, 0), SLUICE_EINVAL);
    for (int k = 0; k < 3; k++)
        assert_int_equal(sluice_acquire_async_at(l, w, 1, 0, on_grant, &c, NULL), 0);
    assert_int_equal(sluice_acquire_async_at(l, w, 1, 0, on_grant, &c, NULL), SLUICE_EFULL);
    assert_int_equal(sluice_limiter_queued(l), 3);
    assert_int_equal(sluice_acquire_async_at(l, w, 3, 0, on_grant, &c, NULL), SLUICE_EFULL);
    run(w, 0, 3 * SEC, 10 * MS);
    assert_int_equal(lg.n, 3);
    /* more than the burst can never be granted: refused at once */
    assert_int_equal(sluice_acquire_async_at(l, w, 3, 3 * SEC, on_grant, &c, NULL), SLUICE_ERANGE);
    assert_int_equal(sluice_acquire_async_at(NULL, w, 1, 0, on_grant, &c, NULL), SLUICE_EINVAL);
    sluice_limiter *fw = mk("fixed-window 2/s");
    assert_int_equal(sluice_acquire_async_at(fw, w, 3, 0, on_grant, &c, NULL), SLUICE_ERANGE);
    sluice_limiter_free(fw);
    sluice_wheel_free(w);
    sluice_limiter_free(l);
}

/* Cancelling: never calls back, gives a bucket's permits back (the next
 * request is granted earlier), works from inside another callback. */
static void test_cancel(void **state)
{
    (void)state;
    const uint64_t t0 = SEC;
    sluice_limiter *l = mk("token-bucket 10/s burst=1");
    sluice_wheel *w = wheel(t0);
    log_t lg = {0};
    struct ctx c[4];
    uint64_t id[4];
    for (int k = 0; k < 4; k++) {
        c[k] = (struct ctx){&lg, k, l, 0, 0};
        assert_int_equal(sluice_acquire_async_at(l, w, 1, t0, on_grant, &c[k], &id[k]), 0);
    }
    /* request 0 (granted at t0) cancels request 3 from its callback */
    c[0].cancel_id = id[3];
    /* cancel request 1 before its time: its permit comes back */
    assert_int_equal(sluice_async_cancel_at(l, id[1], t0), 0);
    assert_int_equal(sluice_async_cancel_at(l, id[1], t0), SLUICE_ENOENT);
    assert_int_equal(sluice_async_cancel_at(l, 999, t0), SLUICE_ENOENT);
    run(w, t0, t0 + SEC, MS);
    assert_int_equal(c[0].cancel_rc, 0);
    assert_int_equal(lg.n, 2); /* 0 and 2 */
    assert_int_equal(lg.tag[0], 0);
    assert_int_equal(lg.tag[1], 2);
    /* 2 booked the third token (t0 + 200 ms); with 1's given back, it still
     * fires at its booked time, never earlier */
    assert_true(lg.at[1] >= t0 + 200 * MS);
    /* after 1 and 3 were cancelled, the bucket is as if only 0 and 2 were
     * made (2 booking the token of t0 + 100 ms): at t0 + 200 ms one token is
     * there again, and the next is due 100 ms later */
    sluice_result r;
    assert_true(sluice_try_acquire_at(l, 1, t0 + 200 * MS, &r));
    assert_false(sluice_try_acquire_at(l, 1, t0 + 200 * MS, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(100 * MS));
    assert_int_equal(sluice_async_cancel_at(l, id[0], t0 + SEC), SLUICE_ENOENT); /* fired */
    sluice_wheel_free(w);
    sluice_limiter_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shaper_release),
        cmocka_unit_test(test_bucket_fifo),
        cmocka_unit_test(test_window_fifo),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_cancel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
