/* test_async.c -- asynchronous acquire (sluice_queue) through a wheel driven
 * by hand: FIFO grants, the shaper's constant-rate release (each grant within
 * one tick of the contract's wait_ns, checked against a twin limiter's
 * decisions), the queue bound, cancellation (also from callbacks), bad
 * arguments and failed allocations; and the lifetimes: every order of
 * freeing queue, limiter and wheel with requests pending (run under ASan in
 * CI), and a queue freed while the wheel's own thread fires its timers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

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
    sluice_queue *q;
    uint64_t cancel_id; /* cancel this from inside the callback, if not 0 */
    int cancel_rc;
};

static void on_grant(void *arg, uint64_t id, uint64_t now)
{
    struct ctx *c = arg;
    c->log->id[c->log->n] = id;
    c->log->at[c->log->n] = now;
    c->log->tag[c->log->n++] = c->tag;
    if (c->cancel_id) c->cancel_rc = sluice_queue_cancel_at(c->q, c->cancel_id, now);
}

static sluice_limiter *mk(const char *spec)
{
    char err[256];
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    if (!l) fail_msg("%s: %s", spec, err);
    return l;
}

static sluice_queue *queue(sluice_limiter *l, sluice_wheel *w, uint32_t max)
{
    char err[128];
    sluice_queue *q = sluice_queue_new(l, w, max, err, sizeof err);
    if (!q) fail_msg("queue: %s", err);
    return q;
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
    sluice_queue *q = queue(l, w, 0);
    log_t lg = {0};
    struct ctx c[40];
    uint64_t want[40];
    for (int k = 0; k < 40; k++) {
        c[k] = (struct ctx){&lg, k, q, 0, 0};
        uint64_t at = t0 + (uint64_t)k * 100000; /* 0.1 ms apart */
        assert_int_equal(sluice_queue_acquire_at(q, 1, at, on_grant, &c[k], NULL), 0);
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
    assert_int_equal(sluice_queue_len(q), 0);
    sluice_queue_free(q);
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
    sluice_queue *q = queue(l, w, 0);
    log_t lg = {0};
    struct ctx c[6];
    for (int k = 0; k < 6; k++) {
        c[k] = (struct ctx){&lg, k, q, 0, 0};
        assert_int_equal(sluice_queue_acquire_at(q, 1, t0, on_grant, &c[k], NULL), 0);
    }
    run(w, t0, t0 + SEC, MS);
    assert_int_equal(lg.n, 6);
    for (int k = 0; k < 6; k++) {
        assert_int_equal(lg.tag[k], k);
        uint64_t due = t0 + (uint64_t)k * 100 * MS;
        assert_true(lg.at[k] >= due && lg.at[k] <= due + TICK);
    }
    sluice_queue_free(q);
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
        sluice_queue *q = queue(l, w, 0);
        log_t lg = {0};
        struct ctx c[5];
        for (int k = 0; k < 5; k++) {
            c[k] = (struct ctx){&lg, k, q, 0, 0};
            assert_int_equal(sluice_queue_acquire_at(q, 1, t0, on_grant, &c[k], NULL), 0);
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
        sluice_queue_free(q);
        sluice_wheel_free(w);
        sluice_limiter_free(l);
    }
}

static void test_bounds(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 1/s burst=2");
    sluice_wheel *w = wheel(0);
    sluice_queue *q = queue(l, w, 3);
    log_t lg = {0};
    struct ctx c = {&lg, 0, q, 0, 0};
    for (int k = 0; k < 3; k++)
        assert_int_equal(sluice_queue_acquire_at(q, 1, 0, on_grant, &c, NULL), 0);
    assert_int_equal(sluice_queue_acquire_at(q, 1, 0, on_grant, &c, NULL), SLUICE_EFULL);
    assert_int_equal(sluice_queue_len(q), 3);
    assert_int_equal(sluice_queue_acquire_at(q, 3, 0, on_grant, &c, NULL), SLUICE_EFULL);
    run(w, 0, 3 * SEC, 10 * MS);
    assert_int_equal(lg.n, 3);
    assert_int_equal(sluice_queue_len(q), 0);
    /* more than the burst can never be granted: refused at once */
    assert_int_equal(sluice_queue_acquire_at(q, 3, 3 * SEC, on_grant, &c, NULL), SLUICE_ERANGE);
    sluice_limiter *fw = mk("fixed-window 2/s");
    sluice_queue *qf = queue(fw, w, 0);
    assert_int_equal(sluice_queue_acquire_at(qf, 3, 0, on_grant, &c, NULL), SLUICE_ERANGE);
    /* parked behind a head, too */
    assert_int_equal(sluice_queue_acquire_at(qf, 2, 0, on_grant, &c, NULL), 0);
    assert_int_equal(sluice_queue_acquire_at(qf, 1, 0, on_grant, &c, NULL), 0);
    assert_int_equal(sluice_queue_acquire_at(qf, 3, 0, on_grant, &c, NULL), SLUICE_ERANGE);
    assert_int_equal(sluice_queue_len(qf), 2); /* granted at once, not yet called back; parked */
    sluice_queue_free(qf);
    sluice_limiter_free(fw);
    /* a wheel that is full refuses, and nothing is taken */
    sluice_wheel *w1 = sluice_wheel_new(TICK, 1, 0, NULL, 0);
    assert_non_null(w1);
    sluice_limiter *tb = mk("token-bucket 1/s burst=1");
    sluice_queue *q1 = queue(tb, w1, 0);
    assert_int_equal(sluice_queue_acquire_at(q1, 1, 0, on_grant, &c, NULL), 0);
    assert_int_equal(sluice_queue_acquire_at(q1, 1, 0, on_grant, &c, NULL), SLUICE_EFULL);
    assert_int_equal(sluice_queue_len(q1), 1);
    sluice_result r;
    assert_false(sluice_try_acquire_at(tb, 1, 0, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)SEC); /* only the first booked */
    sluice_queue_free(q1);
    sluice_limiter_free(tb);
    sluice_wheel_free(w1);
    /* the default bound: 4096 */
    sluice_limiter *big = mk("token-bucket 1000/s burst=1");
    sluice_queue *qd = queue(big, w, 0);
    for (int k = 0; k < 4096; k++)
        assert_int_equal(sluice_queue_acquire_at(qd, 1, 0, on_grant, &c, NULL), 0);
    assert_int_equal(sluice_queue_acquire_at(qd, 1, 0, on_grant, &c, NULL), SLUICE_EFULL);
    sluice_queue_free(qd);
    sluice_limiter_free(big);
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_limiter_free(l);
}

static void test_bad_args(void **state)
{
    (void)state;
    sluice_limiter *l = mk("token-bucket 1/s burst=2");
    sluice_wheel *w = wheel(0);
    char err[128];
    err[0] = 'x';
    assert_null(sluice_queue_new(NULL, w, 0, err, sizeof err));
    assert_string_equal(err, "the limiter is NULL");
    assert_null(sluice_queue_new(l, NULL, 0, err, sizeof err));
    assert_string_equal(err, "the wheel is NULL");
    assert_null(sluice_queue_new(NULL, NULL, 0, NULL, 0)); /* no buffer: fine */
    sluice_queue *q = queue(l, w, 0);
    log_t lg = {0};
    struct ctx c = {&lg, 0, q, 0, 0};
    assert_int_equal(sluice_queue_acquire_at(NULL, 1, 0, on_grant, &c, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_queue_acquire_at(q, 1, 0, NULL, &c, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_queue_acquire(NULL, 1, on_grant, &c, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_queue_cancel_at(NULL, 1, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_queue_cancel(NULL, 1), SLUICE_EINVAL);
    assert_int_equal(sluice_queue_cancel_at(q, 0, 0), SLUICE_ENOENT);
    assert_int_equal(sluice_queue_len(NULL), 0);
    sluice_queue_free(NULL);
    /* nothing was queued or taken by the refusals */
    assert_int_equal(sluice_queue_len(q), 0);
    assert_true(sluice_try_acquire_at(l, 2, 0, NULL));
    assert_int_equal(sluice_wheel_pending(w), 0);
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_limiter_free(l);
}

/* The test allocator (tests/testutil.h) fails the Nth call from now on and
 * counts what is live, to check that a failed allocation takes nothing and
 * leaks nothing. */
static void test_out_of_memory(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0);
    sluice_limiter *l = mk("token-bucket 1/s burst=1");
    sluice_wheel *w = wheel(0);
    /* sluice_queue_new: fail each of its allocations in turn */
    sluice_queue *q = NULL;
    for (long n = 0; !q; n++) {
        assert_true(n < 10);
        long live = tu_alloc_live();
        char err[128];
        tu_alloc_arm(n, false);
        q = sluice_queue_new(l, w, 0, err, sizeof err);
        tu_alloc_disarm();
        if (!q) {
            assert_string_equal(err, "out of memory");
            assert_int_equal(tu_alloc_live(), live);
        }
    }
    /* an acquire whose node cannot be had: refused, nothing booked */
    log_t lg = {0};
    struct ctx c = {&lg, 0, q, 0, 0};
    tu_alloc_arm(0, false);
    assert_int_equal(sluice_queue_acquire_at(q, 1, 0, on_grant, &c, NULL), SLUICE_ENOMEM);
    tu_alloc_disarm();
    assert_int_equal(sluice_queue_len(q), 0);
    assert_true(sluice_try_acquire_at(l, 1, 0, NULL)); /* the token is there */
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_limiter_free(l);
    assert_int_equal(tu_alloc_live(), 0);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

/* Cancelling: never calls back, gives a bucket's permits back (the next
 * request is granted earlier), works from inside another callback. */
static void test_cancel(void **state)
{
    (void)state;
    const uint64_t t0 = SEC;
    sluice_limiter *l = mk("token-bucket 10/s burst=1");
    sluice_wheel *w = wheel(t0);
    sluice_queue *q = queue(l, w, 0);
    log_t lg = {0};
    struct ctx c[4];
    uint64_t id[4];
    for (int k = 0; k < 4; k++) {
        c[k] = (struct ctx){&lg, k, q, 0, 0};
        assert_int_equal(sluice_queue_acquire_at(q, 1, t0, on_grant, &c[k], &id[k]), 0);
    }
    /* request 0 (granted at t0) cancels request 3 from its callback */
    c[0].cancel_id = id[3];
    /* cancel request 1 before its time: its permit comes back */
    assert_int_equal(sluice_queue_cancel_at(q, id[1], t0), 0);
    assert_int_equal(sluice_queue_cancel_at(q, id[1], t0), SLUICE_ENOENT);
    assert_int_equal(sluice_queue_cancel_at(q, 999, t0), SLUICE_ENOENT);
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
    assert_int_equal(sluice_queue_cancel_at(q, id[0], t0 + SEC), SLUICE_ENOENT); /* fired */
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_limiter_free(l);
}

/* Cancelling a window queue's head: the next request becomes the head and
 * asks at the next advance (else it would stay parked for ever). */
static void test_cancel_window_head(void **state)
{
    (void)state;
    const uint64_t t0 = 500 * MS;
    sluice_limiter *l = mk("fixed-window 1/s");
    sluice_wheel *w = wheel(t0);
    sluice_queue *q = queue(l, w, 0);
    log_t lg = {0};
    struct ctx c[3];
    uint64_t id[3];
    for (int k = 0; k < 3; k++) {
        c[k] = (struct ctx){&lg, k, q, 0, 0};
        assert_int_equal(sluice_queue_acquire_at(q, 1, t0, on_grant, &c[k], &id[k]), 0);
    }
    run(w, t0, t0 + 10 * MS, MS); /* 0 granted; 1 is the head, refused until 1 s */
    assert_int_equal(lg.n, 1);
    assert_int_equal(sluice_queue_len(q), 2);
    assert_int_equal(sluice_queue_cancel_at(q, id[1], t0 + 10 * MS), 0);
    assert_int_equal(sluice_queue_cancel_at(q, id[1], t0 + 10 * MS), SLUICE_ENOENT);
    assert_int_equal(sluice_queue_len(q), 1);
    run(w, t0 + 11 * MS, 3 * SEC, MS);
    assert_int_equal(lg.n, 2);
    assert_int_equal(lg.tag[1], 2);
    assert_true(lg.at[1] >= SEC && lg.at[1] <= SEC + 2 * TICK);
    assert_int_equal(sluice_queue_len(q), 0);
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_limiter_free(l);
}

/* Every order of freeing the queue, its limiter and its wheel, with
 * requests pending: for a bucket (requests booked ahead) and a window (a
 * head asking, others parked).  Nothing is touched after it is freed (ASan
 * in CI; before the queue was an object of its own, freeing the wheel and
 * then the limiter read the freed wheel), no callback runs after its queue
 * or its wheel is freed, a queue whose limiter was freed goes on granting
 * from it, and a queue whose wheel was freed refuses new requests. */
enum { OBJ_Q, OBJ_L, OBJ_W };

static void test_free_orders(void **state)
{
    (void)state;
    static const int orders[6][3] = {
        {OBJ_Q, OBJ_L, OBJ_W}, {OBJ_Q, OBJ_W, OBJ_L}, {OBJ_L, OBJ_Q, OBJ_W},
        {OBJ_L, OBJ_W, OBJ_Q}, {OBJ_W, OBJ_Q, OBJ_L}, {OBJ_W, OBJ_L, OBJ_Q},
    };
    /* both grant at t0, t0 + 100 ms, t0 + 200 ms, ... */
    static const char *const specs[] = {"token-bucket 10/s burst=1", "fixed-window 1/100ms"};
    for (size_t si = 0; si < 2; si++) {
        const bool bucket = si == 0;
        for (size_t oi = 0; oi < 6; oi++) {
            const uint64_t t0 = SEC;
            uint64_t now = t0;
            sluice_limiter *l = mk(specs[si]);
            sluice_wheel *w = wheel(t0);
            sluice_queue *q = queue(l, w, 0);
            log_t lg = {0};
            struct ctx c[5];
            uint64_t id[5];
            for (int k = 0; k < 4; k++) {
                c[k] = (struct ctx){&lg, k, q, 0, 0};
                assert_int_equal(sluice_queue_acquire_at(q, 1, t0, on_grant, &c[k], &id[k]), 0);
            }
            sluice_wheel_advance(w, now);
            assert_int_equal(lg.n, 1);
            int made = 4;
            bool qf = false, lf = false, wf = false;
            for (int step = 0; step < 3; step++) {
                const int n = lg.n;
                switch (orders[oi][step]) {
                case OBJ_Q:
                    assert_int_equal(sluice_queue_len(q), wf ? 0 : (size_t)(made - n));
                    sluice_queue_free(q);
                    qf = true;
                    if (!wf) { /* its timers were cancelled: nothing fires */
                        run(w, now, now + SEC, MS);
                        now += SEC;
                        assert_int_equal(sluice_wheel_pending(w), 0);
                    }
                    assert_int_equal(lg.n, n);
                    /* a bucket's booked permits stay taken */
                    if (bucket && !lf && !wf) assert_false(sluice_try_acquire_at(l, 1, t0, NULL));
                    break;
                case OBJ_L:
                    sluice_limiter_free(l);
                    lf = true;
                    if (!qf && !wf) {
                        /* the queue still holds it: one more request is
                         * granted 100 ms on, and a new one is taken */
                        c[4] = (struct ctx){&lg, 4, q, 0, 0};
                        assert_int_equal(sluice_queue_acquire_at(q, 1, now, on_grant, &c[4], &id[4]), 0);
                        made++;
                        run(w, now, now + 100 * MS, MS);
                        now += 100 * MS;
                        assert_int_equal(lg.n, n + 1);
                        assert_int_equal(lg.tag[n], n);
                    }
                    break;
                case OBJ_W:
                    sluice_wheel_free(w);
                    wf = true;
                    assert_int_equal(lg.n, n); /* dropped, not called */
                    if (!qf) {
                        assert_int_equal(sluice_queue_len(q), 0);
                        assert_int_equal(sluice_queue_cancel_at(q, id[3], now), SLUICE_ENOENT);
                        assert_int_equal(sluice_queue_acquire_at(q, 1, now, on_grant, &c[0], NULL),
                                         SLUICE_ECANCELED);
                    }
                    if (bucket && !lf && !qf) assert_false(sluice_try_acquire_at(l, 1, t0, NULL));
                    break;
                }
            }
            /* the first request, and one more when the limiter went first
             * with the others alive; never anything after a free */
            assert_int_equal(lg.n, orders[oi][0] == OBJ_L ? 2 : 1);
        }
    }
}

/* A queue freed while the wheel's own thread fires its timers: no callback
 * runs after sluice_queue_free() returns (each round's callbacks check a
 * flag set once it has), and nothing is touched after it is freed (ASan,
 * TSan in CI).  The limiter is freed before the queue in every other round. */
#define RACE_ROUNDS 200
#define RACE_REQS 16

struct race {
    _Atomic bool freed;
    _Atomic int calls, late;
};

static void on_race(void *arg, uint64_t id, uint64_t now)
{
    (void)id;
    (void)now;
    struct race *r = arg;
    if (atomic_load(&r->freed)) atomic_fetch_add(&r->late, 1);
    for (volatile int k = 0; k < 2000; k++) {
    }
    if (atomic_load(&r->freed)) atomic_fetch_add(&r->late, 1);
    atomic_fetch_add(&r->calls, 1);
}

static void test_free_while_firing(void **state)
{
    (void)state;
    static struct race rs[RACE_ROUNDS];
    char err[128];
    /* 1-us ticks: a request granted at once fires within microseconds */
    sluice_wheel *w = sluice_wheel_new(1000, 100000, sluice_now_ns(), err, sizeof err);
    assert_non_null(w);
    assert_int_equal(sluice_wheel_start(w), 0);
    long calls = 0;
    for (int k = 0; k < RACE_ROUNDS; k++) {
        struct race *r = &rs[k];
        atomic_init(&r->freed, false);
        atomic_init(&r->calls, 0);
        atomic_init(&r->late, 0);
        /* every request passes at once: the bucket's fire now, the
         * window's one after the other as each becomes head */
        sluice_limiter *l = mk(k % 4 < 2 ? "token-bucket 1000000/s burst=1000000"
                                         : "fixed-window 1000000/s");
        sluice_queue *q = queue(l, w, 0);
        for (int i = 0; i < RACE_REQS; i++)
            assert_int_equal(sluice_queue_acquire(q, 1, on_race, r, NULL), 0);
        if (k % 2) sluice_limiter_free(l);
        /* let the wheel's thread get 0 to 90 us into the firing */
        uint64_t until = sluice_now_ns() + (uint64_t)(k % 10) * 10000;
        while (sluice_now_ns() < until) {
        }
        sluice_queue_free(q);
        atomic_store(&r->freed, true);
        if (k % 2 == 0) sluice_limiter_free(l);
        calls += atomic_load(&r->calls);
    }
    sluice_wheel_free(w);
    int late = 0;
    for (int k = 0; k < RACE_ROUNDS; k++) late += atomic_load(&rs[k].late);
    assert_int_equal(late, 0);
    print_message("free while firing: %ld of %d callbacks ran before their queue was freed\n",
                  calls, RACE_ROUNDS * RACE_REQS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shaper_release),
        cmocka_unit_test(test_bucket_fifo),
        cmocka_unit_test(test_window_fifo),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_cancel_window_head),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_free_orders),
        cmocka_unit_test(test_free_while_firing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
