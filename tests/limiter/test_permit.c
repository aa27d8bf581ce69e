/* test_permit.c -- concurrency limits (src/limiter/concurrency.c,
 * src/alg/concurrency.c): permits held, released by their handle.
 *
 * (tests/limiter/test_concurrency.c is the rate limiters under threads;
 * this file is the `concurrency` algorithm.)  Decisions are checked one by
 * one against the reference model in tests/ref_model.c (ref_conc: a plain
 * list of every admission, summed literally, retry_after searched by
 * bisection), with and without a lease, at times near 2^63; the spec's
 * errors each by its message; threads for the lock-free count's
 * exactness (TSan); releases racing their leases' ends and their stale
 * copies, each permit given back once; the book's entries given back out
 * of order and taken again; the blocking acquires for FIFO order and for waking
 * one waiter per release; the queued acquires (called back from a timing
 * wheel, time injected by its advances) for FIFO order, cancel, deadlines
 * and leases, and under threads; changes in place
 * (sluice_concurrency_reconfigure_at, the table's) against the model's
 * ref_conc_reconfigure, and under threads. */
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
#include <time.h>

#include "ref_model.h"
#include "permit_log.h"
#include "testutil.h"

#define SEC 1000000000ULL
#define T_END ((uint64_t)INT64_MAX)

static sluice_concurrency *mk(const char *spec)
{
    char err[256];
    sluice_concurrency *c = sluice_concurrency_new(spec, err, sizeof err);
    if (!c) fail_msg("%s: %s", spec, err);
    return c;
}

/* The grammar: canonical forms, and each refusal naming its token. */
static void test_spec(void **state)
{
    (void)state;
    static const struct { const char *in, *canon; } ok[] = {
        {"concurrency 10", "concurrency 10"},
        {"  concurrency\t7  ", "concurrency 7"},
        {"concurrency 1 lease=30s", "concurrency 1 lease=30s"},
        {"concurrency 3 lease=60000ms", "concurrency 3 lease=min"},
        {"concurrency 3 lease=1500ms", "concurrency 3 lease=1500ms"},
        {"concurrency 3 lease=m", "concurrency 3 lease=min"},
        {"concurrency 1000000000000", "concurrency 1000000000000"},
        {"concurrency 65536 lease=1ns", "concurrency 65536 lease=ns"},
        {"concurrency 2 lease=36500d", "concurrency 2 lease=36500d"},
    };
    char canon[SLUICE_SPEC_MAX], err[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(sluice_concurrency_spec_check(ok[i].in, canon, sizeof canon, err, sizeof err), 0);
        assert_string_equal(canon, ok[i].canon);
        /* the canonical form parses to itself */
        char again[SLUICE_SPEC_MAX];
        assert_int_equal(sluice_concurrency_spec_check(canon, again, sizeof again, NULL, 0), 0);
        assert_string_equal(again, canon);
        sluice_concurrency *c = mk(ok[i].in);
        assert_true(sluice_concurrency_spec_format(c, again, sizeof again) > 0);
        assert_string_equal(again, canon);
        sluice_concurrency_free(c);
    }
    static const struct { const char *in, *needle; int rc; } bad[] = {
        {"concurrency 0", "\"0\"", SLUICE_EINVAL},
        {"concurrency", "missing N", SLUICE_EINVAL},
        {"", "empty spec", SLUICE_EINVAL},
        {"concurrency -1", "\"-1\"", SLUICE_EINVAL},
        {"concurrency 10x", "\"10x\"", SLUICE_EINVAL},
        {"concurrency 10/s", "\"10/s\"", SLUICE_EINVAL},
        {"concurrency 1000000000001", "\"1000000000001\"", SLUICE_ERANGE},
        {"concurrency 5 lease=0", "\"lease=0\"", SLUICE_EINVAL},
        {"concurrency 5 lease=0s", "\"lease=0s\"", SLUICE_EINVAL},
        {"concurrency 5 lease=", "\"lease=\"", SLUICE_EINVAL},
        {"concurrency 5 lease", "\"lease\"", SLUICE_EINVAL},
        {"concurrency 5 lease=5", "\"lease=5\"", SLUICE_EINVAL},
        {"concurrency 5 lease=5parsecs", "\"lease=5parsecs\"", SLUICE_EINVAL},
        {"concurrency 5 lease=36501d", "\"lease=36501d\"", SLUICE_ERANGE},
        {"concurrency 5 lease=1s lease=2s", "duplicate option \"lease=2s\"", SLUICE_EINVAL},
        {"concurrency 5 burst=2", "\"burst=2\"", SLUICE_EINVAL},
        {"concurrency 65537 lease=1s", "\"65537\"", SLUICE_ERANGE},
        {"token-bucket 5/s", "\"token-bucket\"", SLUICE_EINVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        int rc = sluice_concurrency_spec_check(bad[i].in, canon, sizeof canon, err, sizeof err);
        if (rc != bad[i].rc || !strstr(err, bad[i].needle))
            fail_msg("\"%s\": rc %d, err \"%s\" (want %d, \"%s\")", bad[i].in, rc, err, bad[i].rc,
                     bad[i].needle);
        assert_null(sluice_concurrency_new(bad[i].in, err, sizeof err));
    }
    assert_null(sluice_concurrency_new(NULL, err, sizeof err));
    /* a rate limiter's constructor points here */
    assert_null(sluice_limiter_new("concurrency 5", err, sizeof err));
    assert_non_null(strstr(err, "sluice_concurrency_new"));
    assert_int_equal(sluice_spec_check("concurrency 5", NULL, 0, err, sizeof err), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_spec_check("concurrency 5", canon, 5, NULL, 0), SLUICE_ENOSPC);
}

/* Acquire to N, refuse, release; double, refused and foreign releases. */
static void test_basic(void **state)
{
    (void)state;
    sluice_concurrency *c = mk("concurrency 3");
    assert_int_equal(sluice_concurrency_limit(c), 3);
    sluice_permit a, b, d;
    sluice_result r;
    assert_true(sluice_acquire_permit_at(c, 2, 0, &a, &r));
    assert_int_equal(a.permits, 2);
    assert_int_equal(r.remaining, 1);
    assert_int_equal(r.retry_after_ns, 0);
    assert_false(sluice_acquire_permit_at(c, 2, 0, &b, &r));
    assert_int_equal(b.permits, 0);
    assert_int_equal(r.remaining, 1);
    assert_int_equal(r.retry_after_ns, INT64_MAX); /* only a release can help */
    assert_int_equal(sluice_permit_release_at(&b, 0), SLUICE_ENOENT); /* refused: holds nothing */
    assert_false(sluice_acquire_permit_at(c, 4, 0, &b, &r));
    assert_int_equal(r.retry_after_ns, -1); /* never */
    assert_true(sluice_acquire_permit_at(c, 0, 0, &b, &r)); /* a probe */
    assert_int_equal(b.permits, 0);
    assert_int_equal(r.remaining, 1);
    assert_true(sluice_acquire_permit_at(c, 1, 0, &d, &r));
    assert_int_equal(r.remaining, 0);
    assert_int_equal(sluice_concurrency_held_at(c, 0), 3);
    assert_int_equal(sluice_permit_release_at(&a, 5), 0);
    assert_int_equal(a.permits, 0);
    assert_int_equal(sluice_permit_release_at(&a, 5), SLUICE_ENOENT); /* twice */
    assert_int_equal(sluice_concurrency_held_at(c, 5), 1);
    /* a copy released after the original: never below zero */
    sluice_permit copy = d;
    assert_int_equal(sluice_permit_release_at(&d, 6), 0);
    assert_int_equal(sluice_permit_release_at(&copy, 6), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_held_at(c, 6), 0);
    /* bad arguments */
    assert_false(sluice_acquire_permit_at(NULL, 1, 0, &a, &r));
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_false(sluice_acquire_permit_at(c, 1, 0, NULL, &r));
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_int_equal(sluice_permit_release_at(NULL, 0), SLUICE_EINVAL);
    sluice_permit zero = {0};
    assert_int_equal(sluice_permit_release_at(&zero, 0), SLUICE_ENOENT);
    assert_int_equal(sluice_acquire_permit(c, 4, 0, &a), SLUICE_EINVAL);
    assert_int_equal(sluice_acquire_permit(c, 0, 0, &a), SLUICE_EINVAL);
    assert_int_equal(sluice_acquire_permit(NULL, 1, 0, &a), SLUICE_EINVAL);
    sluice_concurrency_free(c);
    sluice_concurrency_free(NULL);
}

/* A lease ends exactly D after the admission, never before; a late
 * release changes nothing; a stale copy is refused; retry_after is the
 * time to the lease end that makes room. */
static void test_lease(void **state)
{
    (void)state;
    const uint64_t D = 10 * SEC;
    sluice_concurrency *c = mk("concurrency 3 lease=10s");
    sluice_permit a, b, x;
    sluice_result r;
    const uint64_t t0 = 100 * SEC;
    assert_true(sluice_acquire_permit_at(c, 2, t0, &a, &r));
    assert_true(sluice_acquire_permit_at(c, 1, t0 + 3 * SEC, &b, &r));
    assert_int_equal(r.remaining, 0);
    assert_false(sluice_acquire_permit_at(c, 1, t0 + 4 * SEC, &x, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(t0 + D - (t0 + 4 * SEC))); /* a's end */
    assert_false(sluice_acquire_permit_at(c, 3, t0 + 4 * SEC, &x, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(t0 + 3 * SEC + D - (t0 + 4 * SEC))); /* b's end */
    /* one ns before a's end: still held */
    assert_false(sluice_acquire_permit_at(c, 1, t0 + D - 1, &x, &r));
    assert_int_equal(r.retry_after_ns, 1);
    /* at its end: back */
    assert_true(sluice_acquire_permit_at(c, 2, t0 + D, &x, &r));
    assert_int_equal(r.remaining, 0);
    /* a's late release changes nothing */
    assert_int_equal(sluice_permit_release_at(&a, t0 + D), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_held_at(c, t0 + D), 3);
    /* a stale copy: released once through the original */
    sluice_permit copy = x;
    assert_int_equal(sluice_permit_release_at(&x, t0 + D + 1), 0);
    assert_int_equal(sluice_permit_release_at(&copy, t0 + D + 1), SLUICE_ENOENT);
    /* an earlier time counts as the latest seen */
    assert_int_equal(sluice_concurrency_held_at(c, 0), 1);
    assert_int_equal(sluice_permit_release_at(&b, 0), 0); /* ends at t0+3s+D: still held */
    assert_int_equal(sluice_concurrency_held_at(c, 0), 0);
    sluice_concurrency_free(c);

    /* near the end of time: a lease past 2^63-1 never ends */
    c = mk("concurrency 1 lease=36500d");
    assert_true(sluice_acquire_permit_at(c, 1, T_END - 5, &a, &r));
    assert_false(sluice_acquire_permit_at(c, 1, UINT64_MAX, &x, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(36500ULL * 86400 * SEC - 5)); /* past the axis' end */
    assert_int_equal(sluice_permit_release_at(&a, UINT64_MAX), 0);
    assert_true(sluice_acquire_permit_at(c, 1, UINT64_MAX, &x, &r));
    sluice_concurrency_free(c);
    c = mk("concurrency 1 lease=ns");
    assert_true(sluice_acquire_permit_at(c, 1, T_END - 1, &a, &r));
    assert_true(sluice_acquire_permit_at(c, 1, T_END, &x, &r)); /* a ended at 2^63-1 */
    assert_int_equal(sluice_permit_release_at(&a, T_END), SLUICE_ENOENT);
    sluice_concurrency_free(c);
}

/* The book's entries given back out of order: a release in the middle
 * and at the tail of the admission order, then acquires that need those
 * entries again (a book that unlinks released entries lazily must find
 * them), each new handle released once, the stale ones refused; and a
 * book grown after such releases. */
static void test_lease_released_entries(void **state)
{
    (void)state;
    sluice_concurrency *c = mk("concurrency 3 lease=10s");
    sluice_permit a, b, d, x, y, bcopy, dcopy;
    sluice_result r;
    const uint64_t t0 = 5 * SEC;
    assert_true(sluice_acquire_permit_at(c, 1, t0, &a, &r));
    assert_true(sluice_acquire_permit_at(c, 1, t0 + 1, &b, &r));
    assert_true(sluice_acquire_permit_at(c, 1, t0 + 2, &d, &r));
    bcopy = b;
    dcopy = d;
    assert_int_equal(sluice_permit_release_at(&b, t0 + 3), 0); /* the middle */
    assert_int_equal(sluice_permit_release_at(&d, t0 + 3), 0); /* the tail */
    assert_int_equal(sluice_concurrency_held_at(c, t0 + 3), 1);
    /* every entry is listed (a, and b and d released): the sweep frees them */
    assert_true(sluice_acquire_permit_at(c, 2, t0 + 4, &x, &r));
    assert_int_equal(r.remaining, 0);
    assert_false(sluice_acquire_permit_at(c, 1, t0 + 4, &y, &r));
    assert_int_equal(r.retry_after_ns, (int64_t)(10 * SEC - 4)); /* a's end, then x's */
    assert_int_equal(sluice_permit_release_at(&bcopy, t0 + 5), SLUICE_ENOENT);
    assert_int_equal(sluice_permit_release_at(&dcopy, t0 + 5), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_held_at(c, t0 + 5), 3);
    /* a grown book keeps the listed entries and their handles */
    assert_int_equal(sluice_permit_release_at(&x, t0 + 6), 0);
    char err[128];
    assert_int_equal(sluice_concurrency_reconfigure_at(c, "concurrency 6 lease=10s", t0 + 6, err, sizeof err), 0);
    assert_int_equal(sluice_permit_release_at(&x, t0 + 6), SLUICE_ENOENT); /* released already */
    sluice_permit m[5];
    for (int i = 0; i < 5; i++) assert_true(sluice_acquire_permit_at(c, 1, t0 + 7, &m[i], &r));
    assert_int_equal(r.remaining, 0);
    assert_false(sluice_acquire_permit_at(c, 1, t0 + 7, &y, &r));
    /* a's lease ends at t0 + 10s: its late release changes nothing */
    assert_int_equal(sluice_concurrency_held_at(c, t0 + 10 * SEC), 5);
    assert_int_equal(sluice_permit_release_at(&a, t0 + 10 * SEC), SLUICE_ENOENT);
    for (int i = 0; i < 5; i++) assert_int_equal(sluice_permit_release_at(&m[i], t0 + 10 * SEC), 0);
    assert_int_equal(sluice_concurrency_held_at(c, t0 + 10 * SEC), 0);
    sluice_concurrency_free(c);
}

/* Random calls, decision by decision against the model. */
static void run_model(const char *spec, uint64_t N, uint64_t lease, uint64_t t_base, uint64_t *seed,
                      int steps)
{
    sluice_concurrency *c = mk(spec);
    ref_conc *m = ref_conc_new(N, lease);
    assert_non_null(m);
    enum { H = 64 };
    sluice_permit pm[H], copy[H];
    uint64_t id[H] = {0};
    memset(pm, 0, sizeof pm);
    memset(copy, 0, sizeof copy);
    uint64_t t = t_base;
    for (int s = 0; s < steps; s++) {
        uint64_t step = tu_splitmix64_below(seed, 4) == 0 ? tu_splitmix64_below(seed, 3 * lease + 3)
                                                           : tu_splitmix64_below(seed, lease / 4 + 2);
        uint64_t now = t + step;
        if (tu_splitmix64_below(seed, 8) == 0 && now > 5) now -= tu_splitmix64_below(seed, 5); /* back */
        if (now > t) t = now;
        unsigned k = (unsigned)tu_splitmix64_below(seed, H);
        unsigned op = (unsigned)tu_splitmix64_below(seed, 10);
        if (op < 5 && pm[k].permits == 0) {
            uint64_t p = tu_splitmix64_below(seed, N + 2);
            sluice_result r;
            ref_result e;
            uint64_t rid;
            bool got = sluice_acquire_permit_at(c, p, now, &pm[k], &r);
            bool want = ref_conc_acquire(m, p, now, &e, &rid);
            if (got != want || r.remaining != e.remaining || r.retry_after_ns != e.retry_after_ns)
                fail_msg("%s step %d: acquire %llu at %llu: got %d rem %llu retry %lld, model %d rem %llu retry %lld",
                         spec, s, (unsigned long long)p, (unsigned long long)now, got,
                         (unsigned long long)r.remaining, (long long)r.retry_after_ns, want,
                         (unsigned long long)e.remaining, (long long)e.retry_after_ns);
            id[k] = rid;
            copy[k] = pm[k];
        } else if (op < 9) {
            /* release: the handle, or (with a lease) its stale copy */
            bool use_copy = lease && op == 8;
            sluice_permit *h = use_copy ? &copy[k] : &pm[k];
            bool held_before = h->permits != 0;
            int rc = sluice_permit_release_at(h, now);
            bool want = held_before && ref_conc_release(m, id[k], now);
            /* a handle holding nothing names no limit: no call on it */
            if ((rc == 0) != want)
                fail_msg("%s step %d: release of %u at %llu: rc %d, model %d", spec, s, k,
                         (unsigned long long)now, rc, want);
            if (use_copy) pm[k].permits = 0, id[k] = 0;
            else copy[k].permits = 0;
        } else {
            uint64_t h = sluice_concurrency_held_at(c, now), e = ref_conc_held(m, now);
            if (h != e)
                fail_msg("%s step %d: held at %llu: %llu, model %llu", spec, s,
                         (unsigned long long)now, (unsigned long long)h, (unsigned long long)e);
        }
    }
    ref_conc_free(m);
    sluice_concurrency_free(c);
}

static void test_model(void **state)
{
    (void)state;
    uint64_t seed = tu_env_seed();
    for (int round = 0; round < 4; round++) {
        run_model("concurrency 1", 1, 0, 0, &seed, 2000);
        run_model("concurrency 5", 5, 0, 0, &seed, 2000);
        run_model("concurrency 40", 40, 0, 0, &seed, 2000);
        run_model("concurrency 1 lease=100ns", 1, 100, 0, &seed, 2000);
        run_model("concurrency 5 lease=1000ns", 5, 1000, 1000, &seed, 2000);
        run_model("concurrency 40 lease=50us", 40, 50000, 7, &seed, 2000);
        /* near the end of time: leases run past 2^63-1 */
        run_model("concurrency 7 lease=1us", 7, 1000, T_END - 200000, &seed, 2000);
    }
}

/* Threads acquiring and releasing on one limit: never more than N held at
 * once (a counter the holders keep), nothing lost at the end. */
typedef struct th_arg {
    sluice_concurrency *c;
    uint64_t N, seed;
    _Atomic uint64_t *inside, *max_inside;
    unsigned iters;
    bool blocking;
    tu_errs errs;
} th_arg;

static void *th_main(void *p)
{
    th_arg *a = p;
    for (unsigned i = 0; i < a->iters; i++) {
        sluice_permit pm;
        uint64_t want = 1 + tu_splitmix64_below(&a->seed, 2);
        bool got;
        if (a->blocking) {
            int rc = sluice_acquire_permit(a->c, want, 30 * SEC, &pm);
            if (rc != 0 && rc != SLUICE_ETIMEDOUT) tu_errs_add(&a->errs, "acquire: %d", rc);
            got = rc == 0;
        } else {
            got = sluice_acquire_permit_at(a->c, want, 0, &pm, NULL);
        }
        if (!got) continue;
        uint64_t in = atomic_fetch_add(a->inside, want) + want;
        uint64_t mx = atomic_load(a->max_inside);
        while (in > mx && !atomic_compare_exchange_weak(a->max_inside, &mx, in)) {
        }
        atomic_fetch_sub(a->inside, want);
        int rc = sluice_permit_release_at(&pm, 0);
        if (rc != 0) tu_errs_add(&a->errs, "release: %d", rc);
    }
    return NULL;
}

static void run_threads(const char *spec, uint64_t N, bool blocking)
{
    sluice_concurrency *c = mk(spec);
    enum { T = 4 };
    pthread_t th[T];
    th_arg a[T];
    _Atomic uint64_t inside = 0, mx = 0;
    unsigned iters = TU_UNDER_TSAN ? 2000 : 20000;
    for (int i = 0; i < T; i++) {
        a[i] = (th_arg){.c = c, .N = N, .seed = 77u + (uint64_t)i, .inside = &inside, .max_inside = &mx,
                        .iters = iters, .blocking = blocking};
        assert_int_equal(pthread_create(&th[i], NULL, th_main, &a[i]), 0);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL); /* all, before a failure */
    for (int i = 0; i < T; i++) {
        if (a[i].errs.n) fail_msg("%s thread %d: %s", spec, i, a[i].errs.msg);
    }
    assert_true(atomic_load(&mx) <= N);
    assert_int_equal(sluice_concurrency_held_at(c, 0), 0);
    assert_int_equal(sluice_concurrency_waiting(c), 0);
    sluice_concurrency_free(c);
}

static void test_threads(void **state)
{
    (void)state;
    run_threads("concurrency 2", 2, false);
    run_threads("concurrency 3 lease=36500d", 3, false);
    run_threads("concurrency 2", 2, true);
    run_threads("concurrency 3 lease=36500d", 3, true);
}

/* A release races the end of its lease, and a stale copy races both: two
 * releasers (one through each handle, one through its copy, in opposite
 * orders) and one thread whose gauge calls end the leases, over many
 * rounds (the threads stay; barriers start and end each round).  The
 * model is the list of handles with their permits and lease ends: a
 * handle whose lease has ended by the releases' time is never released
 * (both get SLUICE_ENOENT); one whose lease has not is released through
 * exactly one of the two copies (or, when the gauge's time passes its end
 * first, through none); the gauge, with no acquire running, only falls;
 * at the end of each round nothing is held, and all N permits can be taken
 * again and not one more (a permit given back twice or never would show
 * as a wrapped count, or room beyond N or short of it). */
enum { RACE_K = 48, RACE_D = 100 };

typedef struct race_round_t {
    sluice_permit pm[RACE_K], copy[RACE_K];
    int rc[2][RACE_K];
    uint64_t t_rel, t0, t1, total;
    bool stop;
} race_round_t;

typedef struct race_arg {
    sluice_concurrency *c;
    race_round_t *r;
    int role; /* 0, 1: the releasers (handles, copies); 2: the gauge */
    pthread_barrier_t *bar;
    tu_errs errs;
} race_arg;

static void *race_main(void *p)
{
    race_arg *a = p;
    for (;;) {
        pthread_barrier_wait(a->bar); /* the round is set up */
        race_round_t *r = a->r;
        if (r->stop) return NULL;
        if (a->role < 2) {
            for (unsigned j = 0; j < RACE_K; j++) {
                unsigned i = a->role ? RACE_K - 1 - j : j;
                r->rc[a->role][i] = sluice_permit_release_at(a->role ? &r->copy[i] : &r->pm[i], r->t_rel);
            }
        } else {
            uint64_t last = r->total;
            for (uint64_t t = r->t0;; t += 2) { /* about two leases end per call */
                uint64_t h = sluice_concurrency_held_at(a->c, t < r->t1 ? t : r->t1);
                if (h > last)
                    tu_errs_add(&a->errs, "held %llu after %llu", (unsigned long long)h,
                                (unsigned long long)last);
                last = h;
                if (t >= r->t1) break;
            }
        }
        pthread_barrier_wait(a->bar); /* the round is done */
    }
}

static void test_release_races_expiry(void **state)
{
    (void)state;
    const uint64_t N = 3 * RACE_K;
    char spec[64];
    snprintf(spec, sizeof spec, "concurrency %llu lease=%dns", (unsigned long long)N, RACE_D);
    sluice_concurrency *c = mk(spec);
    static race_round_t r;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 4);
    race_arg a[3];
    pthread_t th[3];
    for (int k = 0; k < 3; k++) {
        a[k] = (race_arg){.c = c, .r = &r, .role = k, .bar = &bar};
        assert_int_equal(pthread_create(&th[k], NULL, race_main, &a[k]), 0);
    }
    uint64_t seed = 0x5eed1ea5e, base = 1000;
    const int rounds = TU_UNDER_TSAN ? 200 : 3000;
    int bad = 0;
    for (int round = 0; round < rounds && !bad; round++) {
        const bool late = round % 2 == 0;
        uint64_t end[RACE_K];
        r.total = 0;
        for (unsigned i = 0; i < RACE_K; i++) {
            uint64_t p = 1 + tu_splitmix64_below(&seed, 3), at = base + i;
            if (!sluice_acquire_permit_at(c, p, at, &r.pm[i], NULL)) fail_msg("round %d: acquire %u", round, i);
            r.copy[i] = r.pm[i];
            end[i] = at + RACE_D;
            r.total += p;
        }
        /* late: the releases at a time that splits the handles, the gauge
         * at or below it (each outcome is known); else at the first
         * admission's time, the gauge running past every lease's end (which
         * of the two ends a handle is the race) */
        const uint64_t split = base + RACE_D + tu_splitmix64_below(&seed, RACE_K);
        r.t_rel = late ? split : base;
        r.t0 = base + RACE_D; /* the first lease's end: the race from the start */
        r.t1 = late ? split : base + RACE_K + RACE_D;
        pthread_barrier_wait(&bar); /* go */
        pthread_barrier_wait(&bar); /* done */
        for (unsigned i = 0; i < RACE_K && !bad; i++) {
            int rc0 = r.rc[0][i], rc1 = r.rc[1][i];
            unsigned ok = (rc0 == 0) + (rc1 == 0);
            bool ended = end[i] <= r.t_rel;
            if ((rc0 != 0 && rc0 != SLUICE_ENOENT) || (rc1 != 0 && rc1 != SLUICE_ENOENT) ||
                (ended ? ok != 0 : (late ? ok != 1 : ok > 1))) {
                print_error("round %d late=%d: handle %u (end %llu, releases at %llu): rc %d %d\n",
                            round, late, i, (unsigned long long)end[i], (unsigned long long)r.t_rel,
                            rc0, rc1);
                bad = 1;
            }
        }
        const uint64_t t_end = base + RACE_K + RACE_D;
        sluice_permit all, one;
        uint64_t h = sluice_concurrency_held_at(c, t_end);
        bool got_all = sluice_acquire_permit_at(c, N, t_end, &all, NULL);
        bool got_one = sluice_acquire_permit_at(c, 1, t_end, &one, NULL);
        if (h != 0 || !got_all || got_one) {
            print_error("round %d: held %llu at the end, all %d, one more %d\n", round,
                        (unsigned long long)h, got_all, got_one);
            bad = 1;
        }
        if (got_all) sluice_permit_release_at(&all, t_end);
        if (got_one) sluice_permit_release_at(&one, t_end);
        base = t_end + 1;
    }
    r.stop = true;
    pthread_barrier_wait(&bar);
    for (int k = 0; k < 3; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&bar);
    if (a[2].errs.n) fail_msg("%s: gauge: %s", spec, a[2].errs.msg);
    assert_int_equal(bad, 0);
    sluice_concurrency_free(c);
}

/* Blocking acquires: served in arrival order, one waiter woken per
 * permit a release frees. */
typedef struct wt_arg {
    sluice_concurrency *c;
    unsigned idx;
    uint64_t permits, timeout_ns;
    int rc;
    sluice_permit pm;
    _Atomic unsigned *order; /* the next position */
    unsigned pos;            /* where this waiter was served */
} wt_arg;

static void *wt_main(void *p)
{
    wt_arg *a = p;
    a->rc = sluice_acquire_permit(a->c, a->permits, a->timeout_ns, &a->pm);
    if (a->rc == 0) a->pos = atomic_fetch_add(a->order, 1);
    return NULL;
}

/* Poll (bounded: 60 s of real time) until `n` acquirers wait. */
static void wait_for_waiting(sluice_concurrency *c, uint32_t n)
{
    for (int i = 0; i < 60000 && sluice_concurrency_waiting(c) != n; i++) tu_sleep_ns(1000000);
    assert_int_equal(sluice_concurrency_waiting(c), n);
}

static void test_blocking_fifo(void **state)
{
    (void)state;
    sluice_concurrency *c = mk("concurrency 2");
    sluice_permit hold, x;
    assert_true(sluice_acquire_permit_at(c, 2, 0, &hold, NULL));
    assert_int_equal(sluice_acquire_permit(c, 1, 1000000, &x), SLUICE_ETIMEDOUT);
    enum { W = 3 };
    pthread_t th[W];
    wt_arg a[W];
    _Atomic unsigned order = 0;
    for (unsigned i = 0; i < W; i++) {
        a[i] = (wt_arg){.c = c, .idx = i, .permits = 1, .timeout_ns = 60 * SEC, .order = &order};
        assert_int_equal(pthread_create(&th[i], NULL, wt_main, &a[i]), 0);
        wait_for_waiting(c, i + 1); /* queued in this order */
    }
    /* a newcomer does not pass the queue, even with room */
    sluice_permit half = hold;
    half.permits = 1;
    hold.permits = 1;
    assert_int_equal(sluice_permit_release_at(&half, 0), 0); /* one permit back */
    wait_for_waiting(c, 2);                                  /* exactly one woken */
    /* the first: were it another, it would wait out its 60 s and fail */
    pthread_join(th[0], NULL);
    assert_int_equal(a[0].rc, 0);
    assert_false(sluice_acquire_permit_at(c, 1, 0, &x, NULL));
    assert_int_equal(sluice_permit_release_at(&hold, 0), 0); /* the other */
    wait_for_waiting(c, 1);
    pthread_join(th[1], NULL);
    assert_int_equal(a[1].rc, 0);
    assert_int_equal(sluice_permit_release_at(&a[0].pm, 0), 0);
    pthread_join(th[2], NULL);
    assert_int_equal(a[2].rc, 0);
    assert_int_equal(sluice_permit_release_at(&a[1].pm, 0), 0);
    assert_int_equal(sluice_permit_release_at(&a[2].pm, 0), 0);
    assert_int_equal(sluice_concurrency_held_at(c, 0), 0);
    sluice_concurrency_free(c);
}

/* A big waiter at the head keeps a small one behind it waiting; when the
 * big one times out, the small one is served. */
static void test_blocking_head_timeout(void **state)
{
    (void)state;
    sluice_concurrency *c = mk("concurrency 3");
    sluice_permit hold;
    assert_true(sluice_acquire_permit_at(c, 2, 0, &hold, NULL));
    _Atomic unsigned order = 0;
    wt_arg big = {.c = c, .permits = 3, .timeout_ns = 200 * 1000000ULL, .order = &order};
    wt_arg small = {.c = c, .permits = 1, .timeout_ns = 60 * SEC, .order = &order};
    pthread_t tb, ts;
    assert_int_equal(pthread_create(&tb, NULL, wt_main, &big), 0);
    wait_for_waiting(c, 1);
    assert_int_equal(pthread_create(&ts, NULL, wt_main, &small), 0);
    pthread_join(tb, NULL);
    assert_int_equal(big.rc, SLUICE_ETIMEDOUT);
    pthread_join(ts, NULL);
    assert_int_equal(small.rc, 0);
    assert_int_equal(sluice_permit_release_at(&small.pm, 0), 0);
    assert_int_equal(sluice_permit_release_at(&hold, 0), 0);
    sluice_concurrency_free(c);
}

/* With a lease, a waiter is served when the holder's lease ends, though
 * the holder never releases (on the live clock: a 50-ms lease). */
static void test_blocking_lease(void **state)
{
    (void)state;
    sluice_concurrency *c = mk("concurrency 1 lease=50ms");
    sluice_permit hold, x;
    assert_true(sluice_try_acquire_permit(c, 1, &hold));
    assert_int_equal(sluice_acquire_permit(c, 1, 60 * SEC, &x), 0);
    assert_int_equal(sluice_permit_release(&hold), SLUICE_ENOENT); /* ended */
    assert_int_equal(sluice_permit_release(&x), 0);
    sluice_concurrency_free(c);
}

/* Every allocation of _new failing in turn: NULL, nothing leaked. */
static void test_oom(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0);
    for (long n = 0;; n++) {
        tu_alloc_arm(n, false);
        char err[128];
        sluice_concurrency *c = sluice_concurrency_new("concurrency 100 lease=1s", err, sizeof err);
        tu_alloc_disarm();
        if (c) {
            sluice_concurrency_free(c);
            break;
        }
        assert_non_null(strstr(err, "out of memory"));
        assert_int_equal(tu_alloc_live(), 0);
        assert_true(n < 10);
    }
    assert_int_equal(tu_alloc_live(), 0);
    assert_int_equal(tu_alloc_uninstall(), 0);
}


/* ---- queued acquires (sluice_acquire_permit_async_at) ------------------ */

/* Without a lease: each release lets through the head of the line, and only
 * as many as fit, in the order they asked; a head that needs more than is
 * free keeps those behind it waiting (the model: a FIFO served from the
 * head while the head fits). */
static void test_async_fifo(void **state)
{
    (void)state;
    sluice_concurrency *c = mk("concurrency 3");
    sluice_wheel *w = mkwheel();
    alog l = {0};
    sluice_permit held[3];
    for (int i = 0; i < 3; i++) assert_true(sluice_acquire_permit_at(c, 1, 0, &held[i], NULL));
    uint64_t a, b, d, e, none = T_END;
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, 0, none, alog_fn, &l, &a), 0);
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 2, 0, none, alog_fn, &l, &b), 0);
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, 0, none, alog_fn, &l, &d), 0);
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, 0, none, alog_fn, &l, &e), 0);
    assert_int_equal(sluice_concurrency_waiting(c), 4);
    /* newcomers do not pass the line */
    sluice_permit pm;
    assert_int_equal(sluice_permit_release_at(&held[0], 1), 0);
    assert_false(sluice_acquire_permit_at(c, 1, 1, &pm, NULL));
    sluice_wheel_advance(w, 10 * SEC);
    assert_int_equal(l.n, 1); /* a alone: b needs 2 */
    assert_int_equal(l.id[0], a);
    assert_int_equal(l.status[0], 0);
    assert_int_equal(l.pm[0].permits, 1);
    assert_int_equal(sluice_concurrency_held_at(c, 10 * SEC), 3);
    assert_int_equal(sluice_permit_release_at(&held[1], 11 * SEC), 0);
    sluice_wheel_advance(w, 12 * SEC);
    assert_int_equal(l.n, 1); /* b still needs 2: d and e wait behind it */
    assert_int_equal(sluice_permit_release_at(&held[2], 13 * SEC), 0);
    sluice_wheel_advance(w, 14 * SEC);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.id[1], b);
    assert_int_equal(l.pm[1].permits, 2);
    /* a's release lets d through; d's lets e */
    assert_int_equal(sluice_permit_release_at(&l.pm[0], 15 * SEC), 0);
    sluice_wheel_advance(w, 16 * SEC);
    assert_int_equal(l.n, 3);
    assert_int_equal(l.id[2], d);
    assert_int_equal(sluice_concurrency_waiting(c), 1);
    /* releasing b's two lets e through, and one stays free */
    assert_int_equal(sluice_permit_release_at(&l.pm[1], 17 * SEC), 0);
    sluice_wheel_advance(w, 18 * SEC);
    assert_int_equal(l.n, 4);
    assert_int_equal(l.id[3], e);
    assert_int_equal(sluice_concurrency_held_at(c, 18 * SEC), 2);
    assert_int_equal(sluice_concurrency_waiting(c), 0);
    /* free and nobody waits: granted at once, called back at the next advance */
    uint64_t f;
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, 19 * SEC, none, alog_fn, &l, &f), 0);
    assert_int_equal(sluice_concurrency_held_at(c, 19 * SEC), 3);
    assert_int_equal(l.n, 4);
    sluice_wheel_advance(w, 19 * SEC + 5000);
    assert_int_equal(l.n, 5);
    assert_int_equal(l.id[4], f);
    /* bad input: refused, nothing queued */
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 4, 20 * SEC, none, alog_fn, &l, NULL), SLUICE_ERANGE);
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 0, 20 * SEC, none, alog_fn, &l, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_acquire_permit_async_at(NULL, w, 1, 20 * SEC, none, alog_fn, &l, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_acquire_permit_async_at(c, NULL, 1, 20 * SEC, none, alog_fn, &l, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, 20 * SEC, none, NULL, &l, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_concurrency_waiting(c), 0);
    assert_int_equal(sluice_wheel_pending(w), 0);
    for (size_t i = 2; i < 5; i++) assert_int_equal(sluice_permit_release_at(&l.pm[i], 21 * SEC), 0);
    assert_int_equal(sluice_concurrency_held_at(c, 21 * SEC), 0);
    sluice_concurrency_free(c);
    sluice_wheel_free(w);
}

/* Cancel: a waiting request leaves the line (those behind it move up and
 * may pass); a granted one not yet called back gives its permits back;
 * a second cancel, or one after the callback, is SLUICE_ENOENT.  A
 * deadline calls back with SLUICE_ETIMEDOUT, nothing taken. */
static void test_async_cancel_deadline(void **state)
{
    (void)state;
    sluice_concurrency *c = mk("concurrency 2");
    sluice_wheel *w = mkwheel();
    alog l = {0};
    sluice_permit h;
    assert_true(sluice_acquire_permit_at(c, 1, 0, &h, NULL));
    uint64_t a, b, d;
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 2, 0, T_END, alog_fn, &l, &a), 0);
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, 0, 5 * SEC, alog_fn, &l, &b), 0);
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, 0, T_END, alog_fn, &l, &d), 0);
    sluice_wheel_advance(w, 4 * SEC);
    assert_int_equal(l.n, 0);
    sluice_wheel_advance(w, 5 * SEC); /* b's deadline */
    assert_int_equal(l.n, 1);
    assert_int_equal(l.id[0], b);
    assert_int_equal(l.status[0], SLUICE_ETIMEDOUT);
    assert_int_equal(sluice_concurrency_held_at(c, 5 * SEC), 1);
    /* cancelling the head (a, needs 2) lets d through */
    assert_int_equal(sluice_permit_async_cancel_at(c, a, 6 * SEC), 0);
    assert_int_equal(sluice_permit_async_cancel_at(c, a, 6 * SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_permit_async_cancel_at(c, b, 6 * SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_held_at(c, 6 * SEC), 2); /* d's, granted */
    /* d granted, not yet called back: cancel gives its permit back */
    assert_int_equal(sluice_permit_async_cancel_at(c, d, 6 * SEC), 0);
    assert_int_equal(sluice_concurrency_held_at(c, 6 * SEC), 1);
    sluice_wheel_advance(w, 7 * SEC);
    assert_int_equal(l.n, 1);
    assert_int_equal(sluice_wheel_pending(w), 0);
    assert_int_equal(sluice_permit_async_cancel_at(NULL, 1, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_permit_release_at(&h, 8 * SEC), 0);
    /* a pending request when the limit is freed: dropped, no callback */
    assert_true(sluice_acquire_permit_at(c, 2, 9 * SEC, &h, NULL));
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, 9 * SEC, T_END, alog_fn, &l, NULL), 0);
    sluice_concurrency_free(c);
    assert_int_equal(sluice_wheel_pending(w), 0);
    sluice_wheel_advance(w, 100 * SEC);
    assert_int_equal(l.n, 1);
    sluice_wheel_free(w);
}

/* With a lease: the head is let through when the lease ends (the wheel's
 * time, no release), at times near 2^63. */
static void test_async_lease(void **state)
{
    (void)state;
    const uint64_t T = T_END - 1000 * SEC;
    sluice_concurrency *c = mk("concurrency 2 lease=10s");
    char err[256];
    sluice_wheel *w = sluice_wheel_new(1000, 1024, T, err, sizeof err);
    assert_non_null(w);
    alog l = {0};
    sluice_permit h1, h2;
    assert_true(sluice_acquire_permit_at(c, 1, T, &h1, NULL));
    assert_true(sluice_acquire_permit_at(c, 1, T + 3 * SEC, &h2, NULL));
    uint64_t x, y;
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 2, T + 4 * SEC, T_END, alog_fn, &l, &x), 0);
    assert_int_equal(sluice_acquire_permit_async_at(c, w, 1, T + 4 * SEC, T_END, alog_fn, &l, &y), 0);
    sluice_wheel_advance(w, T + 10 * SEC); /* h1's lease ends: 1 free, x needs 2 */
    assert_int_equal(l.n, 0);
    sluice_wheel_advance(w, T + 13 * SEC); /* h2's ends: x through, y waits */
    assert_int_equal(l.n, 1);
    assert_int_equal(l.id[0], x);
    assert_int_equal(l.status[0], 0);
    assert_int_equal(l.pm[0].permits, 2);
    assert_int_equal(sluice_permit_release_at(&h1, T + 13 * SEC), SLUICE_ENOENT); /* ended */
    assert_int_equal(sluice_permit_release_at(&l.pm[0], T + 14 * SEC), 0);
    sluice_wheel_advance(w, T + 14 * SEC + 5000);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.id[1], y);
    assert_int_equal(sluice_concurrency_held_at(c, T + 15 * SEC), 1);
    assert_int_equal(sluice_wheel_pending(w), 0);
    sluice_concurrency_free(c);
    sluice_wheel_free(w);
}

/* Threads queueing requests, and taking and releasing permits without
 * waiting, while this thread drives the wheel whose callbacks release:
 * every request called back exactly once, with its permits, and nothing
 * left held or waiting (TSan checks the locking). */
#define AT_THREADS 3
#define AT_EACH 200
typedef struct {
    sluice_concurrency *c;
    _Atomic uint64_t done, bad;
} at_shared;

static void at_fn(void *arg, uint64_t id, int status, sluice_permit *pm, uint64_t now)
{
    (void)id;
    at_shared *s = arg;
    if (status != 0) {
        atomic_fetch_add(&s->bad, 1);
        atomic_fetch_add(&s->done, 1);
        return;
    }
    sluice_permit mine = *pm;
    if (mine.permits != 1 || sluice_concurrency_held(s->c) > 2) atomic_fetch_add(&s->bad, 1);
    if (sluice_permit_release_at(&mine, now) != 0) atomic_fetch_add(&s->bad, 1);
    atomic_fetch_add(&s->done, 1);
}

typedef struct {
    at_shared *s;
    sluice_wheel *w;
} at_arg;

static void *at_asker(void *p)
{
    at_arg *a = p;
    for (int i = 0; i < AT_EACH; i++) {
        if (sluice_acquire_permit_async_at(a->s->c, a->w, 1, 0, T_END, at_fn, a->s, NULL) != 0)
            atomic_fetch_add(&a->s->bad, 1);
        sluice_permit pm;
        if (sluice_acquire_permit_at(a->s->c, 1, 0, &pm, NULL) &&
            sluice_permit_release_at(&pm, 0) != 0)
            atomic_fetch_add(&a->s->bad, 1);
    }
    return NULL;
}

static void test_async_threads(void **state)
{
    (void)state;
    at_shared s = {.c = mk("concurrency 2")};
    sluice_wheel *w = mkwheel();
    at_arg a = {&s, w};
    pthread_t th[AT_THREADS];
    for (int i = 0; i < AT_THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, at_asker, &a), 0);
    uint64_t t = 1;
    /* bounded: each advance calls back at least one granted request once
     * all have asked; 10^6 rounds is far past what 600 requests need */
    for (long k = 0; k < 1000000 && atomic_load(&s.done) < AT_THREADS * AT_EACH; k++)
        sluice_wheel_advance(w, t += 1000);
    for (int i = 0; i < AT_THREADS; i++) pthread_join(th[i], NULL);
    for (long k = 0; k < 1000000 && atomic_load(&s.done) < AT_THREADS * AT_EACH; k++)
        sluice_wheel_advance(w, t += 1000);
    assert_int_equal(atomic_load(&s.done), AT_THREADS * AT_EACH);
    assert_int_equal(atomic_load(&s.bad), 0);
    assert_int_equal(sluice_concurrency_held_at(s.c, t), 0);
    assert_int_equal(sluice_concurrency_waiting(s.c), 0);
    sluice_concurrency_free(s.c);
    sluice_wheel_free(w);
}

/* Changing a limit in place (sluice_concurrency_reconfigure_at): the
 * errors, each named; then random acquires, releases and changes of N
 * (and of the lease, with one) against the model (ref_conc_reconfigure):
 * each answer, the permits held, and each release's 0 or ENOENT -- so
 * held permits count against the new N and every handle releases once. */
static void test_reconfigure_errors(void **state)
{
    (void)state;
    char err[256];
    sluice_concurrency *c = mk("concurrency 2");
    sluice_concurrency *l = mk("concurrency 2 lease=1s");
    assert_int_equal(sluice_concurrency_reconfigure_at(c, "concurrency 2 lease=1s", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "a lease cannot be added in place"));
    assert_int_equal(sluice_concurrency_reconfigure_at(l, "concurrency 2", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "the lease cannot be removed in place"));
    assert_true(sluice_concurrency_reconfigure_at(c, "concurrency 0", 0, err, sizeof err) < 0);
    assert_non_null(strstr(err, "0"));
    assert_true(sluice_concurrency_reconfigure_at(c, "token-bucket 5/s", 0, err, sizeof err) < 0);
    assert_true(err[0] != '\0');
    assert_true(sluice_concurrency_reconfigure_at(l, "concurrency 65537 lease=1s", 0, err, sizeof err) < 0);
    assert_non_null(strstr(err, "65537"));
    assert_int_equal(sluice_concurrency_reconfigure_at(NULL, "concurrency 2", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "no limit"));
    /* nothing changed by a refusal */
    assert_int_equal(sluice_concurrency_limit(c), 2);
    char canon[64];
    assert_true(sluice_concurrency_spec_format(l, canon, sizeof canon) > 0);
    assert_string_equal(canon, "concurrency 2 lease=s");
    /* a change shows in the spec and N */
    assert_int_equal(sluice_concurrency_reconfigure_at(l, "concurrency 7 lease=3s", 0, err, sizeof err), 0);
    assert_true(sluice_concurrency_spec_format(l, canon, sizeof canon) > 0);
    assert_string_equal(canon, "concurrency 7 lease=3s");
    assert_int_equal(sluice_concurrency_limit(l), 7);
    /* out of memory growing a leased book: refused, nothing changed */
    assert_int_equal(tu_alloc_install(), 0);
    sluice_concurrency *m = mk("concurrency 2 lease=1s");
    sluice_permit pm;
    assert_true(sluice_acquire_permit_at(m, 2, 0, &pm, NULL));
    tu_alloc_arm(0, false);
    assert_int_equal(sluice_concurrency_reconfigure_at(m, "concurrency 9 lease=1s", 0, err, sizeof err),
                     SLUICE_ENOMEM);
    assert_non_null(strstr(err, "out of memory"));
    tu_alloc_disarm();
    assert_int_equal(sluice_concurrency_limit(m), 2);
    assert_int_equal(sluice_concurrency_reconfigure_at(m, "concurrency 9 lease=1s", 0, err, sizeof err), 0);
    assert_int_equal(sluice_permit_release_at(&pm, 1), 0); /* a handle from the smaller book */
    sluice_concurrency_free(m);
    /* a table: every key or none -- each allocation failing in turn leaves
     * every key at N 2, then the change takes */
    sluice_concurrency_table *t = sluice_concurrency_table_new("concurrency 2 lease=1s", 4, err, sizeof err);
    assert_non_null(t);
    sluice_permit k[3];
    for (int i = 0; i < 3; i++)
        assert_true(sluice_concurrency_table_acquire_at(t, &"abc"[i], 1, 2, 0, &k[i], NULL));
    int rc;
    for (long n = 0;; n++) {
        tu_alloc_arm(n, false);
        rc = sluice_concurrency_table_reconfigure_at(t, "concurrency 9 lease=1s", 1, err, sizeof err);
        tu_alloc_disarm();
        if (rc == 0) break;
        assert_int_equal(rc, SLUICE_ENOMEM);
        assert_non_null(strstr(err, "out of memory"));
        assert_int_equal(sluice_concurrency_table_limit(t), 2);
        sluice_result r;
        sluice_permit x;
        for (int i = 0; i < 3; i++) {
            assert_false(sluice_concurrency_table_acquire_at(t, &"abc"[i], 1, 1, 1, &x, &r));
            assert_int_equal(r.remaining, 0);
        }
        assert_true(n < 16);
    }
    assert_int_equal(sluice_concurrency_table_limit(t), 9);
    for (int i = 0; i < 3; i++) assert_int_equal(sluice_permit_release_at(&k[i], 2), 0);
    sluice_concurrency_table_free(t);
    assert_int_equal(tu_alloc_live(), 0);
    assert_int_equal(tu_alloc_uninstall(), 0);
    sluice_concurrency_free(c);
    sluice_concurrency_free(l);
}

static void reconf_model(uint64_t lease_ns, uint64_t seed)
{
    char spec[96], err[256];
    uint64_t N = 3, lease = lease_ns;
    snprintf(spec, sizeof spec, "concurrency %llu", (unsigned long long)N);
    if (lease) snprintf(spec, sizeof spec, "concurrency %llu lease=%llums", (unsigned long long)N,
                        (unsigned long long)(lease / 1000000));
    sluice_concurrency *c = mk(spec);
    ref_conc *m = ref_conc_new(N, lease);
    assert_non_null(m);
    struct { sluice_permit pm; uint64_t id; } h[64];
    size_t nh = 0;
    uint64_t t = T_END - 7200 * SEC, maxN = N; /* near 2^63 */
    for (int step = 0; step < 20000; step++) {
        t += tu_splitmix64_below(&seed, lease ? lease / 4 : SEC);
        uint64_t op = tu_splitmix64_below(&seed, 16);
        if (op == 0) { /* a change: N 1 .. 12, and the lease 100 ms .. 3 s */
            N = 1 + tu_splitmix64_below(&seed, 12);
            if (lease) lease = (1 + tu_splitmix64_below(&seed, 30)) * 100000000ull;
            if (lease) snprintf(spec, sizeof spec, "concurrency %llu lease=%llums",
                                (unsigned long long)N, (unsigned long long)(lease / 1000000));
            else snprintf(spec, sizeof spec, "concurrency %llu", (unsigned long long)N);
            assert_int_equal(sluice_concurrency_reconfigure_at(c, spec, t, err, sizeof err), 0);
            ref_conc_reconfigure(m, N, lease, t);
            if (N > maxN) maxN = N;
        } else if (op < 7 && nh) {
            size_t i = tu_splitmix64_below(&seed, nh);
            bool want = ref_conc_release(m, h[i].id, t);
            int got = sluice_permit_release_at(&h[i].pm, t);
            if (got != (want ? 0 : SLUICE_ENOENT))
                fail_msg("step %d: release got %d, the model says %d", step, got, want);
            assert_int_equal(sluice_permit_release_at(&h[i].pm, t), SLUICE_ENOENT); /* once */
            h[i] = h[--nh];
        } else if (nh < 64) {
            uint64_t p = 1 + tu_splitmix64_below(&seed, 3);
            ref_result want;
            uint64_t id = 0;
            bool wok = ref_conc_acquire(m, p, t, &want, &id);
            sluice_result res;
            bool ok = sluice_acquire_permit_at(c, p, t, &h[nh].pm, &res);
            if (ok != wok || res.remaining != want.remaining ||
                (!ok && res.retry_after_ns != want.retry_after_ns))
                fail_msg("step %d (N %llu, %llu permits): got %d rem %llu retry %lld, the model %d rem %llu retry %lld",
                         step, (unsigned long long)N, (unsigned long long)p, ok,
                         (unsigned long long)res.remaining, (long long)res.retry_after_ns, wok,
                         (unsigned long long)want.remaining, (long long)want.retry_after_ns);
            if (ok) h[nh++].id = id;
        }
        uint64_t held = sluice_concurrency_held_at(c, t), want = ref_conc_held(m, t);
        if (held != want) fail_msg("step %d: held %llu, the model %llu", step,
                                   (unsigned long long)held, (unsigned long long)want);
        assert_true(held <= maxN);
    }
    while (nh) {
        nh--;
        sluice_permit_release_at(&h[nh].pm, t);
    }
    ref_conc_free(m);
    sluice_concurrency_free(c);
}

static void test_reconfigure_model(void **state)
{
    (void)state;
    reconf_model(0, 0xc0ffee);
    reconf_model(SEC, 0xbead);
}

/* A table changes every key in place: each key keeps its permits and gets
 * the new N; keys made later too; a lease cannot come or go. */
static void test_reconfigure_table(void **state)
{
    (void)state;
    char err[256];
    sluice_concurrency_table *t = sluice_concurrency_table_new("concurrency 2 lease=10s", 4, err, sizeof err);
    assert_non_null(t);
    sluice_permit a[2], b[2], x;
    sluice_result r;
    for (int i = 0; i < 2; i++) {
        assert_true(sluice_concurrency_table_acquire_at(t, "a", 1, 1, 0, &a[i], &r));
        assert_true(sluice_concurrency_table_acquire_at(t, "b", 1, 1, 0, &b[i], &r));
    }
    assert_int_equal(sluice_concurrency_table_held(t), 4);
    assert_int_equal(sluice_concurrency_table_reconfigure_at(t, "concurrency 2", 1, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "lease cannot be removed"));
    assert_int_equal(sluice_concurrency_table_reconfigure_at(t, "concurrency 1 lease=10s", 1, err, sizeof err), 0);
    assert_int_equal(sluice_concurrency_table_limit(t), 1);
    assert_false(sluice_concurrency_table_acquire_at(t, "a", 1, 1, 1, &x, &r));
    assert_int_equal(r.remaining, 0);
    assert_int_equal(sluice_permit_release_at(&a[0], 2), 0);
    assert_false(sluice_concurrency_table_acquire_at(t, "a", 1, 1, 2, &x, &r)); /* 1 held >= 1 */
    assert_int_equal(sluice_permit_release_at(&a[1], 2), 0);
    assert_true(sluice_concurrency_table_acquire_at(t, "a", 1, 1, 2, &x, &r));
    assert_int_equal(r.remaining, 0);
    assert_true(sluice_concurrency_table_acquire_at(t, "c", 1, 1, 2, &a[0], &r)); /* a new key: N 1 */
    assert_int_equal(r.remaining, 0);
    /* larger: the books grow, old handles release once */
    assert_int_equal(sluice_concurrency_table_reconfigure_at(t, "concurrency 40 lease=10s", 3, err, sizeof err), 0);
    for (int i = 0; i < 38; i++) assert_true(sluice_concurrency_table_acquire_at(t, "b", 1, 1, 3, &a[1], &r));
    assert_false(sluice_concurrency_table_acquire_at(t, "b", 1, 1, 3, &a[1], &r));
    assert_int_equal(sluice_permit_release_at(&b[0], 4), 0);
    assert_int_equal(sluice_permit_release_at(&b[0], 4), SLUICE_ENOENT);
    /* a shorter lease ends the old permits at their admission plus it */
    assert_int_equal(sluice_concurrency_table_held_at(t, "b", 1, 4), 39);
    assert_int_equal(sluice_concurrency_table_reconfigure_at(t, "concurrency 40 lease=2s", 4, err, sizeof err), 0);
    assert_int_equal(sluice_concurrency_table_held_at(t, "b", 1, 2 * SEC), 38); /* b[1], admitted at 0, ended */
    assert_int_equal(sluice_permit_release_at(&b[1], 2 * SEC), SLUICE_ENOENT);
    assert_int_equal(sluice_concurrency_table_held_at(t, "b", 1, 2 * SEC + 3), 0);
    sluice_concurrency_table_free(t);
}

/* Changes in place while threads take and release: the permits in flight
 * (counted by the threads: raised after an admission, lowered before its
 * release) never exceed the largest N configured (6: the threads ask for
 * up to 18 at once; with a lease the book also grows to 45 now and then),
 * every release returns 0, and at the end nothing is held; TSan checks the
 * book growing under releases and the atomic N. */
typedef struct rc_arg {
    sluice_concurrency *c;
    _Atomic int *stop;
    _Atomic uint64_t *inflight;
    uint64_t bound, over, bad;
    _Atomic uint64_t taken;
} rc_arg;

static void *rc_main(void *p)
{
    rc_arg *a = p;
    sluice_permit pm[3];
    size_t n = 0;
    uint64_t seed = (uint64_t)(uintptr_t)a;
    for (long i = 0; i < 2000000 && !atomic_load(a->stop); i++) {
        uint64_t want = 1 + tu_splitmix64_below(&seed, 2);
        if (n < 3 && tu_splitmix64_below(&seed, 2) && sluice_acquire_permit_at(a->c, want, 0, &pm[n], NULL)) {
            atomic_fetch_add(&a->taken, 1);
            if (atomic_fetch_add(a->inflight, want) + want > a->bound) a->over++;
            n++;
        } else if (n) {
            n--;
            atomic_fetch_sub(a->inflight, pm[n].permits);
            if (sluice_permit_release_at(&pm[n], 0) != 0) a->bad++;
        }
    }
    while (n) {
        n--;
        atomic_fetch_sub(a->inflight, pm[n].permits);
        if (sluice_permit_release_at(&pm[n], 0) != 0) a->bad++;
    }
    return NULL;
}

static void reconf_threads(bool lease)
{
    char err[256], spec[64];
    sluice_concurrency *c = mk(lease ? "concurrency 2 lease=36500d" : "concurrency 2");
    _Atomic int stop = 0;
    _Atomic uint64_t inflight = 0;
    rc_arg a[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (rc_arg){c, &stop, &inflight, lease ? 45 : 6, 0, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, rc_main, &a[i]), 0);
    }
    /* the changes start once every thread is taking (bounded: 60 s of a
     * loaded machine) */
    uint64_t t0 = sluice_now_ns();
    for (int i = 0; i < 3; i++)
        while (atomic_load(&a[i].taken) == 0 && sluice_now_ns() - t0 < 60 * SEC) sched_yield();
    size_t changes = tu_scaled(400, tu_env_scale(1));
    for (size_t k = 0; k < changes; k++) {
        uint64_t n = 1 + (k * 7) % 6 + (lease && k % 50 == 49 ? 39 : 0);
        snprintf(spec, sizeof spec, lease ? "concurrency %llu lease=36500d" : "concurrency %llu",
                 (unsigned long long)n);
        assert_int_equal(sluice_concurrency_reconfigure_at(c, spec, 0, err, sizeof err), 0);
        sched_yield();
    }
    atomic_store(&stop, 1);
    uint64_t taken = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(a[i].bad, 0);
        assert_int_equal(a[i].over, 0);
        taken += atomic_load(&a[i].taken);
    }
    assert_true(taken > 0);
    assert_int_equal(sluice_concurrency_held_at(c, 0), 0);
    sluice_concurrency_free(c);
}

static void test_reconfigure_threads(void **state)
{
    (void)state;
    reconf_threads(false);
    reconf_threads(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec),
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_lease),
        cmocka_unit_test(test_lease_released_entries),
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_release_races_expiry),
        cmocka_unit_test(test_blocking_fifo),
        cmocka_unit_test(test_blocking_head_timeout),
        cmocka_unit_test(test_blocking_lease),
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_async_fifo),
        cmocka_unit_test(test_async_cancel_deadline),
        cmocka_unit_test(test_async_lease),
        cmocka_unit_test(test_async_threads),
        cmocka_unit_test(test_reconfigure_errors),
        cmocka_unit_test(test_reconfigure_model),
        cmocka_unit_test(test_reconfigure_table),
        cmocka_unit_test(test_reconfigure_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
