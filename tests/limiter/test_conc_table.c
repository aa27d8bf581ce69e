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
#include <sched.h>
#include <sluice.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ref_model.h"
#include "permit_log.h"
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

/* ---- acquires that wait (sluice_concurrency_table_acquire, _async_at) --- */

#define T_END ((uint64_t)INT64_MAX)

typedef struct wt_arg {
    sluice_concurrency_table *t;
    const char *key;
    uint64_t permits, timeout_ns;
    int rc;
    sluice_result res;
    sluice_permit pm;
    _Atomic unsigned *order; /* the next position */
    unsigned pos;            /* where this waiter was served */
} wt_arg;

static void *wt_main(void *p)
{
    wt_arg *a = p;
    a->rc = sluice_concurrency_table_acquire(a->t, a->key, strlen(a->key), a->permits, a->timeout_ns,
                                             &a->pm, &a->res);
    if (a->rc == 0) a->pos = atomic_fetch_add(a->order, 1);
    return NULL;
}

/* Poll (bounded: 60 s of real time, for a loaded machine) until `n`
 * acquirers wait on `key`. */
static void wait_for_waiting(sluice_concurrency_table *t, const char *key, uint32_t n)
{
    for (int i = 0; i < 60000 && sluice_concurrency_table_waiting(t, key, strlen(key)) != n; i++)
        tu_sleep_ns(1000000);
    assert_int_equal(sluice_concurrency_table_waiting(t, key, strlen(key)), n);
}

/* Blocked threads on one key are served in the order they queued, one
 * release waking exactly the waiter it lets through; another key's line is
 * its own; a newcomer does not pass the line. */
static void test_blocking_fifo(void **state)
{
    (void)state;
    sluice_concurrency_table *t = mk("concurrency 2", 4);
    sluice_permit h1, h2, x;
    sluice_result r;
    assert_true(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 0, &h1, &r));
    assert_true(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 0, &h2, &r));
    enum { W = 4 };
    pthread_t th[W];
    wt_arg a[W];
    _Atomic unsigned order = 0;
    for (unsigned i = 0; i < W; i++) {
        a[i] = (wt_arg){.t = t, .key = "k", .permits = 1, .timeout_ns = 60 * SEC, .order = &order};
        assert_int_equal(pthread_create(&th[i], NULL, wt_main, &a[i]), 0);
        wait_for_waiting(t, "k", i + 1); /* queued in this order */
    }
    /* another key does not wait behind k */
    assert_int_equal(sluice_concurrency_table_acquire(t, "j", 1, 2, 60 * SEC, &x, &r), 0);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(sluice_permit_release_at(&x, 0), 0);
    assert_int_equal(sluice_permit_release_at(&h1, 0), 0);
    wait_for_waiting(t, "k", W - 1); /* exactly one woken */
    /* the first: were it another, the first would wait out its 60 s */
    pthread_join(th[0], NULL);
    assert_int_equal(a[0].rc, 0);
    assert_int_equal(a[0].pos, 0);
    assert_int_equal(a[0].pm.permits, 1);
    assert_false(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 0, &x, &r)); /* full */
    /* each release lets the next through, in order */
    assert_int_equal(sluice_permit_release_at(&h2, 0), 0);
    for (unsigned i = 1; i < W; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].rc, 0);
        assert_int_equal(a[i].pos, i);
        assert_int_equal(sluice_permit_release_at(&a[i - 1].pm, 0), 0);
    }
    assert_int_equal(sluice_concurrency_table_waiting(t, "k", 1), 0);
    assert_int_equal(sluice_permit_release_at(&a[W - 1].pm, 0), 0);
    assert_int_equal(sluice_concurrency_table_held_at(t, "k", 1, 0), 0);
    sluice_concurrency_table_free(t);
}

/* A timeout, a full table (refused at once, not waited for) and every bad
 * argument of the blocking acquire. */
static void test_blocking_errors(void **state)
{
    (void)state;
    sluice_concurrency_table *t = mk("concurrency 2", 1);
    sluice_permit h, x;
    sluice_result r;
    assert_true(sluice_concurrency_table_acquire_at(t, "a", 1, 2, 0, &h, &r));
    uint64_t t0 = sluice_now_ns();
    assert_int_equal(sluice_concurrency_table_acquire(t, "a", 1, 1, 2000000, &x, &r), SLUICE_ETIMEDOUT);
    assert_true(sluice_now_ns() - t0 >= 2000000); /* it did wait its 2 ms */
    assert_false(r.allowed);
    assert_int_equal(r.error, SLUICE_ETIMEDOUT);
    assert_int_equal(x.permits, 0);
    assert_int_equal(sluice_concurrency_table_waiting(t, "a", 1), 0);
    assert_int_equal(sluice_concurrency_table_held_at(t, "a", 1, 0), 2);
    /* a new key, every entry held: at once (a wait would last 600 s) */
    t0 = sluice_now_ns();
    assert_int_equal(sluice_concurrency_table_acquire(t, "b", 1, 1, 600 * SEC, &x, &r), SLUICE_EFULL);
    assert_true(sluice_now_ns() - t0 < 300 * SEC);
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_int_equal(sluice_concurrency_table_keys(t), 1);
    assert_int_equal(sluice_concurrency_table_acquire(NULL, "a", 1, 1, 0, &x, &r), SLUICE_EINVAL);
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_acquire(t, NULL, 1, 1, 0, &x, &r), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_acquire(t, "a", 1, 1, 0, NULL, &r), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_acquire(t, "a", 1, 0, 0, &x, &r), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_acquire(t, "a", 1, 3, 0, &x, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_waiting(NULL, "a", 1), 0);
    assert_int_equal(sluice_concurrency_table_waiting(t, "zz", 2), 0);
    assert_int_equal(sluice_permit_release_at(&h, 0), 0);
    /* the key is free: through at once, and a new key may take its entry */
    assert_int_equal(sluice_concurrency_table_acquire(t, "b", 1, 2, 0, &x, &r), 0);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(sluice_permit_release_at(&x, 0), 0);
    sluice_concurrency_table_free(t);
}

/* With a lease, a blocked waiter is let through when the holder's lease
 * ends, though it never releases (the live clock: a 50-ms lease). */
static void test_blocking_lease(void **state)
{
    (void)state;
    sluice_concurrency_table *t = mk("concurrency 1 lease=50ms", 2);
    sluice_permit h, x;
    sluice_result r;
    assert_true(sluice_concurrency_table_acquire_at(t, "k", 1, 1, sluice_now_ns(), &h, &r));
    assert_int_equal(sluice_concurrency_table_acquire(t, "k", 1, 1, 60 * SEC, &x, &r), 0);
    assert_int_equal(sluice_permit_release(&h), SLUICE_ENOENT); /* ended */
    assert_int_equal(sluice_permit_release(&x), 0);
    sluice_concurrency_table_free(t);
}

/* Queued acquires on keys, time injected: each key's line is served from
 * its head while the head fits (the model: a FIFO per key), a newcomer
 * does not pass it, ids are unique over the table. */
static void test_async_fifo(void **state)
{
    (void)state;
    sluice_concurrency_table *t = mk("concurrency 2", 4);
    sluice_wheel *w = mkwheel();
    alog l = {0};
    sluice_permit h1, h2, x;
    sluice_result r;
    uint64_t a, b, d, e;
    assert_true(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 0, &h1, &r));
    assert_true(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 0, &h2, &r));
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 1, 0, T_END, alog_fn, &l, &a), 0);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 2, 0, T_END, alog_fn, &l, &b), 0);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 1, 0, T_END, alog_fn, &l, &d), 0);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "j", 1, 2, 0, T_END, alog_fn, &l, &e), 0);
    /* ids: distinct over the table, k's and j's alike */
    assert_true(a >= 1 && a != b && a != d && a != e && b != d && b != e && d != e);
    assert_int_equal(sluice_concurrency_table_waiting(t, "k", 1), 3);
    assert_int_equal(sluice_concurrency_table_waiting(t, "j", 1), 0); /* granted, not called back */
    sluice_wheel_advance(w, 1 * SEC);
    assert_int_equal(l.n, 1); /* j's at once, k's line waits */
    assert_true(l.id[0] == e && l.status[0] == 0 && l.pm[0].permits == 2);
    assert_int_equal(sluice_permit_release_at(&h1, 2 * SEC), 0); /* a through */
    sluice_wheel_advance(w, 3 * SEC);
    assert_int_equal(l.n, 2);
    assert_true(l.id[1] == a && l.status[1] == 0 && l.pm[1].permits == 1);
    assert_int_equal(sluice_permit_release_at(&h2, 4 * SEC), 0); /* 1 free: b needs 2, d waits behind */
    sluice_wheel_advance(w, 5 * SEC);
    assert_int_equal(l.n, 2);
    assert_int_equal(sluice_concurrency_table_waiting(t, "k", 1), 2);
    assert_false(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 5 * SEC, &x, &r)); /* no passing */
    assert_int_equal(r.error, 0);
    assert_int_equal(r.remaining, 1);
    assert_int_equal(sluice_permit_release_at(&l.pm[1], 6 * SEC), 0); /* b through, d not */
    sluice_wheel_advance(w, 7 * SEC);
    assert_int_equal(l.n, 3);
    assert_true(l.id[2] == b && l.status[2] == 0 && l.pm[2].permits == 2);
    assert_int_equal(sluice_concurrency_table_waiting(t, "k", 1), 1);
    assert_int_equal(sluice_permit_release_at(&l.pm[2], 8 * SEC), 0);
    sluice_wheel_advance(w, 9 * SEC);
    assert_int_equal(l.n, 4);
    assert_true(l.id[3] == d && l.status[3] == 0);
    assert_int_equal(sluice_permit_release_at(&l.pm[3], 10 * SEC), 0);
    assert_int_equal(sluice_permit_release_at(&l.pm[0], 10 * SEC), 0);
    assert_int_equal(sluice_concurrency_table_held_at(t, "k", 1, 10 * SEC), 0);
    assert_int_equal(sluice_concurrency_table_held_at(t, "j", 1, 10 * SEC), 0);
    assert_int_equal(sluice_concurrency_table_waiting(t, "k", 1), 0);
    sluice_concurrency_table_free(t);
    sluice_wheel_free(w);
}

/* A deadline, a cancel (waiting: those behind move up; granted and not
 * called back: its permits go back), a cancel naming the wrong key, and
 * every bad argument. */
static void test_async_cancel_deadline(void **state)
{
    (void)state;
    sluice_concurrency_table *t = mk("concurrency 2", 2);
    sluice_wheel *w = mkwheel();
    alog l = {0};
    sluice_permit h, x;
    sluice_result r;
    uint64_t a, b, d, e;
    assert_true(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 0, &h, &r));
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 2, 0, T_END, alog_fn, &l, &a), 0);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 1, 0, 5 * SEC, alog_fn, &l, &b), 0);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 1, 0, T_END, alog_fn, &l, &d), 0);
    sluice_wheel_advance(w, 5 * SEC - 1000);
    assert_int_equal(l.n, 0);
    sluice_wheel_advance(w, 5 * SEC); /* b's deadline */
    assert_int_equal(l.n, 1);
    assert_true(l.id[0] == b && l.status[0] == SLUICE_ETIMEDOUT && l.at[0] == 5 * SEC);
    /* a cancel naming another key reaches nothing: a stays */
    assert_true(sluice_concurrency_table_acquire_at(t, "j", 1, 1, 5 * SEC, &x, &r));
    assert_int_equal(sluice_concurrency_table_async_cancel_at(t, "j", 1, a, 6 * SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_table_async_cancel_at(t, "zz", 2, a, 6 * SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_table_waiting(t, "k", 1), 2);
    /* a leaves the line: d, behind it, fits and is granted */
    assert_int_equal(sluice_concurrency_table_async_cancel_at(t, "k", 1, a, 6 * SEC), 0);
    assert_int_equal(sluice_concurrency_table_async_cancel_at(t, "k", 1, a, 6 * SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_table_async_cancel_at(t, "k", 1, b, 6 * SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_table_waiting(t, "k", 1), 0);
    assert_int_equal(sluice_concurrency_table_held_at(t, "k", 1, 6 * SEC), 2);
    /* d granted, not yet called back: a cancel gives its permit back */
    assert_int_equal(sluice_concurrency_table_async_cancel_at(t, "k", 1, d, 6 * SEC), 0);
    assert_int_equal(sluice_concurrency_table_held_at(t, "k", 1, 6 * SEC), 1);
    sluice_wheel_advance(w, 7 * SEC);
    assert_int_equal(l.n, 1); /* neither a nor d ever calls back */
    /* errors, nothing queued */
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 3, 8 * SEC, T_END, alog_fn, &l, &e), SLUICE_ERANGE);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 0, 8 * SEC, T_END, alog_fn, &l, &e), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(NULL, w, "k", 1, 1, 8 * SEC, T_END, alog_fn, &l, &e), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, NULL, "k", 1, 1, 8 * SEC, T_END, alog_fn, &l, &e), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 1, 8 * SEC, T_END, NULL, &l, &e), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, NULL, 1, 1, 8 * SEC, T_END, alog_fn, &l, &e), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_async_cancel_at(NULL, "k", 1, 1, 8 * SEC), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_table_async_cancel_at(t, NULL, 1, 1, 8 * SEC), SLUICE_EINVAL);
    /* a new key, both entries held (k, j): refused at once */
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "n", 1, 1, 8 * SEC, T_END, alog_fn, &l, &e), SLUICE_EFULL);
    assert_int_equal(sluice_concurrency_table_keys(t), 2);
    sluice_wheel_advance(w, 9 * SEC);
    assert_int_equal(l.n, 1);
    assert_int_equal(sluice_permit_release_at(&h, 10 * SEC), 0);
    assert_int_equal(sluice_permit_release_at(&x, 10 * SEC), 0);
    sluice_concurrency_table_free(t);
    sluice_wheel_free(w);
}

/* A lease's end lets a queued waiter through (injected time), and a key
 * whose only claim is a request granted but not yet called back (its
 * lease ended meanwhile) is still not given to another key until then. */
static void test_async_lease(void **state)
{
    (void)state;
    sluice_concurrency_table *t = mk("concurrency 1 lease=10s", 2);
    sluice_wheel *w = mkwheel();
    alog l = {0};
    sluice_permit h, x, y;
    sluice_result r;
    uint64_t a, b;
    assert_true(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 0, &h, &r));
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 1, 1 * SEC, T_END, alog_fn, &l, &a), 0);
    sluice_wheel_advance(w, 10 * SEC - 1000);
    assert_int_equal(l.n, 0);
    sluice_wheel_advance(w, 10 * SEC + 1000); /* h's lease ends at 10 s */
    assert_int_equal(l.n, 1);
    assert_true(l.id[0] == a && l.status[0] == 0 && l.pm[0].permits == 1);
    assert_int_equal(sluice_permit_release_at(&h, 11 * SEC), SLUICE_ENOENT); /* ended */
    /* b waits behind a's permit (lease to 20 s); a releases at 12 s: b is
     * granted, its callback due at the next advance -- which comes only
     * after b's own lease (12 s + 10 s) has ended */
    assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 1, 11 * SEC, T_END, alog_fn, &l, &b), 0);
    assert_int_equal(sluice_permit_release_at(&l.pm[0], 12 * SEC), 0);
    assert_int_equal(sluice_concurrency_table_waiting(t, "k", 1), 0);
    /* the table is full: "j" holds its entry, "k" has b pending */
    assert_true(sluice_concurrency_table_acquire_at(t, "j", 1, 1, 30 * SEC, &y, &r));
    for (int i = 0; i < 20; i++) { /* a flood of new keys: k is never taken */
        char key[8];
        snprintf(key, sizeof key, "n%d", i);
        assert_false(sluice_concurrency_table_acquire_at(t, key, strlen(key), 1, 30 * SEC, &x, &r));
        assert_int_equal(r.error, SLUICE_EFULL);
    }
    sluice_wheel_advance(w, 30 * SEC);
    assert_int_equal(l.n, 2);
    assert_true(l.id[1] == b && l.status[1] == 0 && l.pm[1].permits == 1);
    /* b's handle is k's: its lease ended at 22 s, so it releases nothing,
     * and no other key's permit either */
    assert_int_equal(sluice_permit_release_at(&l.pm[1], 30 * SEC), SLUICE_ENOENT);
    /* now k is at rest, and a new key may have its entry */
    assert_true(sluice_concurrency_table_acquire_at(t, "n0", 2, 1, 31 * SEC, &x, &r));
    assert_int_equal(sluice_concurrency_table_held_at(t, "k", 1, 31 * SEC), 0);
    assert_int_equal(sluice_permit_release_at(&x, 31 * SEC), 0);
    assert_int_equal(sluice_permit_release_at(&y, 31 * SEC), 0);
    sluice_concurrency_table_free(t);
    sluice_wheel_free(w);
}

/* A callback may queue, cancel and release on the table (no lock of it is
 * held while callbacks run). */
typedef struct reent {
    sluice_concurrency_table *t;
    sluice_wheel *w;
    alog l;
    uint64_t next_id, cancel_id;
    int rc_q, rc_c, rc_r;
} reent;

static void reent_fn(void *arg, uint64_t id, int status, sluice_permit *pm, uint64_t now)
{
    reent *x = arg;
    alog_fn(&x->l, id, status, pm, now);
    if (x->l.n != 1) return;
    sluice_permit mine = *pm;
    x->rc_q = sluice_concurrency_table_acquire_async_at(x->t, x->w, "k", 1, 1, now, T_END, reent_fn, x, &x->next_id);
    x->rc_c = sluice_concurrency_table_async_cancel_at(x->t, "j", 1, x->cancel_id, now);
    x->rc_r = sluice_permit_release_at(&mine, now); /* lets the new request through */
}

static void test_async_from_callback(void **state)
{
    (void)state;
    reent x = {.t = mk("concurrency 1", 2), .w = mkwheel(), .rc_q = 1, .rc_c = 1, .rc_r = 1};
    sluice_permit h;
    sluice_result r;
    uint64_t a;
    assert_true(sluice_concurrency_table_acquire_at(x.t, "j", 1, 1, 0, &h, &r));
    assert_int_equal(sluice_concurrency_table_acquire_async_at(x.t, x.w, "j", 1, 1, 0, T_END, reent_fn, &x, &x.cancel_id), 0);
    assert_int_equal(sluice_concurrency_table_acquire_async_at(x.t, x.w, "k", 1, 1, 0, T_END, reent_fn, &x, &a), 0);
    sluice_wheel_advance(x.w, 1 * SEC);
    assert_int_equal(x.l.n, 1);
    assert_true(x.l.id[0] == a && x.rc_q == 0 && x.rc_c == 0 && x.rc_r == 0);
    assert_int_equal(sluice_concurrency_table_waiting(x.t, "j", 1), 0);
    sluice_wheel_advance(x.w, 2 * SEC);
    assert_int_equal(x.l.n, 2);
    assert_true(x.l.id[1] == x.next_id && x.l.status[1] == 0);
    assert_int_equal(sluice_permit_release_at(&x.l.pm[1], 3 * SEC), 0);
    assert_int_equal(sluice_permit_release_at(&h, 3 * SEC), 0);
    sluice_concurrency_table_free(x.t);
    sluice_wheel_free(x.w);
}

/* Freeing the table with queued acquires pending (waiting, and granted but
 * not called back): none is ever called back, and nothing leaks (ASan). */
static void test_async_free_pending(void **state)
{
    (void)state;
    const char *specs[2] = {"concurrency 1", "concurrency 1 lease=5s"};
    for (int s = 0; s < 2; s++) {
        sluice_concurrency_table *t = mk(specs[s], 4);
        sluice_wheel *w = mkwheel();
        alog l = {0};
        sluice_permit h;
        sluice_result r;
        assert_true(sluice_concurrency_table_acquire_at(t, "k", 1, 1, 0, &h, &r));
        assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "k", 1, 1, 0, 9 * SEC, alog_fn, &l, NULL), 0);
        assert_int_equal(sluice_concurrency_table_acquire_async_at(t, w, "j", 1, 1, 0, 9 * SEC, alog_fn, &l, NULL), 0);
        sluice_concurrency_table_free(t);
        sluice_wheel_advance(w, 10 * SEC);
        assert_int_equal(l.n, 0);
        assert_int_equal(sluice_wheel_pending(w), 0);
        sluice_wheel_free(w);
    }
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

/* Threads blocking on keys that churn through a table too small for them
 * all (6 keys, room for 3, N = 1), while another thread queues requests on
 * them called back from a wheel this thread drives: never more than N
 * inside per key (an independent count), every wait ends, nothing left
 * held or waiting.  A key's entry given to another key while an acquirer
 * was between its lookup and its wait would let a second holder of that
 * key in.  TSan checks the locking. */
#define CW_KEYS 6
typedef struct cw_shared {
    sluice_concurrency_table *t;
    sluice_wheel *w;
    _Atomic uint64_t inside[CW_KEYS], most[CW_KEYS];
    _Atomic uint64_t queued, called, granted, blocked_ok, full, timedout;
    _Atomic bool asking_done;
    tu_errs errs; /* under mu */
    pthread_mutex_t mu;
} cw_shared;

typedef struct cw_arg {
    cw_shared *s;
    uint64_t seed;
    unsigned k; /* a queued request's key */
} cw_arg;

static void cw_err(cw_shared *s, const char *what, int rc)
{
    pthread_mutex_lock(&s->mu);
    tu_errs_add(&s->errs, "%s: %d", what, rc);
    pthread_mutex_unlock(&s->mu);
}

static void cw_inside(cw_shared *s, unsigned k, sluice_permit *pm, uint64_t now)
{
    uint64_t in = atomic_fetch_add(&s->inside[k], 1) + 1, mx = atomic_load(&s->most[k]);
    while (in > mx && !atomic_compare_exchange_weak(&s->most[k], &mx, in)) {
    }
    sched_yield(); /* hold it a moment: others come to wait */
    atomic_fetch_sub(&s->inside[k], 1);
    int rc = sluice_permit_release_at(pm, now);
    if (rc != 0) cw_err(s, "release", rc);
}

static void cw_fn(void *arg, uint64_t id, int status, sluice_permit *pm, uint64_t now)
{
    (void)id;
    cw_arg *a = arg;
    if (status != 0) cw_err(a->s, "queued acquire", status);
    else {
        sluice_permit mine = *pm;
        atomic_fetch_add(&a->s->granted, 1);
        cw_inside(a->s, a->k, &mine, now);
    }
    atomic_fetch_add(&a->s->called, 1);
}

static void *cw_blocker(void *p)
{
    cw_arg *a = p;
    unsigned iters = TU_UNDER_TSAN ? 1000 : 20000;
    for (unsigned i = 0; i < iters; i++) {
        unsigned k = (unsigned)tu_splitmix64_below(&a->seed, CW_KEYS);
        char key[3] = {'k', (char)('0' + k), 0};
        sluice_permit pm;
        sluice_result r;
        int rc = sluice_concurrency_table_acquire(a->s->t, key, 2, 1, 5000000, &pm, &r);
        if (rc == SLUICE_EFULL) atomic_fetch_add(&a->s->full, 1);
        else if (rc == SLUICE_ETIMEDOUT) atomic_fetch_add(&a->s->timedout, 1);
        else if (rc != 0) cw_err(a->s, "blocking acquire", rc);
        else {
            atomic_fetch_add(&a->s->blocked_ok, 1);
            cw_inside(a->s, k, &pm, 0);
        }
    }
    return NULL;
}

#define CW_ASKS 300
static void *cw_asker(void *p)
{
    cw_arg *a = p; /* a[0 .. CW_ASKS): one per request */
    for (unsigned i = 0; i < CW_ASKS; i++) {
        cw_arg *q = &a[i];
        q->k = (unsigned)tu_splitmix64_below(&a[0].seed, CW_KEYS);
        char key[3] = {'k', (char)('0' + q->k), 0};
        int rc = sluice_concurrency_table_acquire_async_at(a->s->t, a->s->w, key, 2, 1, 0, T_END, cw_fn, q, NULL);
        if (rc == SLUICE_EFULL) atomic_fetch_add(&a->s->full, 1);
        else if (rc != 0) cw_err(a->s, "queue", rc);
        else atomic_fetch_add(&a->s->queued, 1);
    }
    atomic_store(&a->s->asking_done, true);
    return NULL;
}

static void test_threads_waiting(void **state)
{
    (void)state;
    static cw_shared s; /* big: not on the stack */
    static cw_arg asks[CW_ASKS];
    memset(&s, 0, sizeof s);
    s.t = mk("concurrency 1", CW_KEYS / 2);
    s.w = mkwheel();
    assert_int_equal(pthread_mutex_init(&s.mu, NULL), 0);
    enum { B = 3 };
    pthread_t tb[B], ta;
    cw_arg ab[B];
    for (int i = 0; i < B; i++) {
        ab[i] = (cw_arg){.s = &s, .seed = 11u + (uint64_t)i};
        assert_int_equal(pthread_create(&tb[i], NULL, cw_blocker, &ab[i]), 0);
    }
    for (int i = 0; i < CW_ASKS; i++) asks[i] = (cw_arg){.s = &s, .seed = 99};
    assert_int_equal(pthread_create(&ta, NULL, cw_asker, asks), 0);
    /* drive the wheel until every request has called back: bounded in
     * rounds and in real time (a loaded machine: 120 s) */
    uint64_t t = 1, t0 = sluice_now_ns();
    for (long n = 0; n < 100000000 && sluice_now_ns() - t0 < 120 * SEC; n++) {
        sluice_wheel_advance(s.w, t += 1000);
        if (atomic_load(&s.asking_done) && atomic_load(&s.called) == atomic_load(&s.queued)) break;
        if ((n & 63) == 63) sched_yield(); /* let the others run */
    }
    pthread_join(ta, NULL);
    for (int i = 0; i < B; i++) pthread_join(tb[i], NULL); /* all, before a failure */
    for (long n = 0; n < 1000000 && atomic_load(&s.called) < atomic_load(&s.queued); n++)
        sluice_wheel_advance(s.w, t += 1000);
    if (s.errs.n) fail_msg("%s", s.errs.msg);
    assert_int_equal(atomic_load(&s.called), atomic_load(&s.queued));
    assert_int_equal(atomic_load(&s.granted), atomic_load(&s.queued));
    assert_true(atomic_load(&s.queued) > 0 && atomic_load(&s.blocked_ok) > 0);
    for (unsigned k = 0; k < CW_KEYS; k++) {
        char key[3] = {'k', (char)('0' + k), 0};
        if (atomic_load(&s.most[k]) > 1) fail_msg("key %u: %llu inside at once", k, (unsigned long long)atomic_load(&s.most[k]));
        assert_int_equal(sluice_concurrency_table_held_at(s.t, key, 2, 0), 0);
        assert_int_equal(sluice_concurrency_table_waiting(s.t, key, 2), 0);
    }
    print_message("queued %llu, blocking ok %llu, full %llu, timed out %llu\n",
                  (unsigned long long)atomic_load(&s.queued), (unsigned long long)atomic_load(&s.blocked_ok),
                  (unsigned long long)atomic_load(&s.full), (unsigned long long)atomic_load(&s.timedout));
    sluice_concurrency_table_free(s.t);
    sluice_wheel_free(s.w);
    pthread_mutex_destroy(&s.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_stale_after_drop),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_blocking_fifo),
        cmocka_unit_test(test_blocking_errors),
        cmocka_unit_test(test_blocking_lease),
        cmocka_unit_test(test_async_fifo),
        cmocka_unit_test(test_async_cancel_deadline),
        cmocka_unit_test(test_async_lease),
        cmocka_unit_test(test_async_from_callback),
        cmocka_unit_test(test_async_free_pending),
        cmocka_unit_test(test_threads_waiting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
