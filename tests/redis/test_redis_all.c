/* test_redis_all.c -- sluice_redis_try_acquire_all: several limits' keys
 * decided in one script, all or nothing, on a private redis-server.
 *
 * A refusal by one limit charges no other (read back by probes and in
 * Redis); an admission charges every one; the combined answer follows the
 * composite's rule (docs/decisions.md 3.7), checked against values worked
 * out by hand; 4 threads on two limits against an independent count of
 * what they were granted; the preconditions' errors, with nothing sent; a
 * damaged key value and a key of another type are errors; SCRIPT FLUSH
 * costs one EVAL and no error.  With leases (and a mix with exact limits):
 * a refusal by one limit leaves the others' leases as they were; a lease
 * that ends between the take and the put back loses the permits taken (they
 * are dropped, not put back); 4 threads and 4 processes on two leased
 * limits, where every permit Redis counted is accounted for: spent by an
 * admitted request, left in a lease, or dropped (so no refused request
 * spent one).  Windows of 36500 days (aligned to 0, so
 * none ends while the test runs) and buckets that refill one permit in
 * years: nothing depends on the time the test takes.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>
#include <sluice/redis.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_server.h"
#include "testutil.h"

static sluice_redis *mk_with(const char *spec, const char *prefix, int port, uint32_t lease_max)
{
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = port;
    cfg.key_prefix = prefix;
    cfg.command_timeout_ms = 5000;
    cfg.lease_max = lease_max;
    char err[256];
    sluice_redis *r = sluice_redis_new(spec, &cfg, err, sizeof err);
    if (!r) fail_msg("%s: %s", spec, err);
    return r;
}

static sluice_redis *mk(const char *spec, const char *prefix)
{
    return mk_with(spec, prefix, test_redis_shared.port, 0);
}

/* A probe: the key's remaining, read from Redis. */
static uint64_t left(sluice_redis *r, const char *key)
{
    sluice_result res;
    assert_true(sluice_redis_try_acquire(r, key, strlen(key), 0, &res));
    assert_int_equal(res.error, 0);
    return res.remaining;
}

static long long exists(sluice_redis *r, const char *key)
{
    char name[256];
    assert_true(sluice_redis_key_name(r, key, strlen(key), name, sizeof name) > 0);
    const char *argv[] = {"EXISTS", name};
    long long v = -1;
    assert_int_equal(test_redis_cmd(&test_redis_shared, &v, NULL, 0, 2, argv), 0);
    return v;
}

static int all2(sluice_redis *a, const char *ka, uint64_t pa, sluice_redis *b, const char *kb, uint64_t pb,
                sluice_result *res, sluice_result per[2])
{
    sluice_redis *rs[2] = {a, b};
    const void *keys[2] = {ka, kb};
    size_t lens[2] = {strlen(ka), strlen(kb)};
    uint64_t p[2] = {pa, pb};
    return sluice_redis_try_acquire_all(rs, keys, lens, p, 2, res, per);
}

#define YEARS "36500d"

/* The second limit refuses: the first is not charged (its key is not even
 * made); then both allow: both are charged. */
static void test_refusal_charges_none(void **state)
{
    (void)state;
    sluice_redis *fw = mk("fixed-window 5/" YEARS, "all1:");
    sluice_redis *tb = mk("token-bucket 2/" YEARS " burst=2", "all1:");
    sluice_result res, per[2];
    assert_true(sluice_redis_try_acquire(tb, "b", 1, 2, &res)); /* tb: 0 left */
    assert_int_equal(all2(fw, "a", 1, tb, "b", 1, &res, per), 0);
    assert_false(res.allowed);
    assert_int_equal(res.error, 0);
    assert_true(per[0].allowed); /* would have: its remaining without the permit */
    assert_int_equal(per[0].remaining, 5);
    assert_false(per[1].allowed);
    assert_int_equal(per[1].remaining, 0);
    assert_true(per[1].retry_after_ns > 0);
    assert_int_equal(res.retry_after_ns, per[1].retry_after_ns);
    assert_int_equal(res.remaining, 0);
    assert_int_equal(exists(fw, "a"), 0); /* nothing written */
    assert_int_equal(left(fw, "a"), 5);
    /* p > burst on the second: -1 for the whole request, still nothing charged */
    assert_int_equal(all2(fw, "a", 2, tb, "b", 3, &res, per), 0);
    assert_int_equal(res.retry_after_ns, -1);
    assert_int_equal(left(fw, "a"), 5);

    /* both allow: both charged; remaining is the smallest */
    sluice_redis *sa = mk("sliding-approx 10/" YEARS, "all1:");
    assert_int_equal(all2(fw, "a", 2, sa, "c", 3, &res, per), 1);
    assert_true(res.allowed);
    assert_int_equal(res.retry_after_ns, 0);
    assert_int_equal(per[0].remaining, 3);
    assert_int_equal(per[1].remaining, 7);
    assert_int_equal(res.remaining, 3);
    assert_int_equal(left(fw, "a"), 3);
    assert_int_equal(left(sa, "c"), 7);
    /* the first refuses now (4 > 3 left): the second keeps its 7 */
    assert_int_equal(all2(fw, "a", 4, sa, "c", 1, &res, per), 0);
    assert_false(per[0].allowed);
    assert_true(per[1].allowed);
    assert_int_equal(per[1].remaining, 7);
    assert_int_equal(left(sa, "c"), 7);
    /* a probe of every limit: allowed, nothing charged */
    assert_int_equal(all2(fw, "a", 0, sa, "c", 0, &res, per), 1);
    assert_int_equal(res.remaining, 3);
    assert_int_equal(left(fw, "a"), 3);
    sluice_redis_stats st;
    sluice_redis_stats_get(fw, &st);
    assert_int_equal(st.err_protocol + st.err_reply + st.err_io + st.err_timeout, 0);
    sluice_redis_free(fw);
    sluice_redis_free(tb);
    sluice_redis_free(sa);
}

/* ---- 4 threads on two limits --------------------------------------------- */

enum { THREADS = 4, CALLS = 60, LA = 40, LB = 30 };
typedef struct worker {
    sluice_redis *a, *b;
    uint64_t seed;
    uint64_t got_a, got_b; /* permits admitted to this thread */
    int errors;
} worker;

static void *run(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < CALLS; i++) {
        uint64_t pa = 1 + tu_xorshift64(&w->seed) % 3, pb = 1 + tu_xorshift64(&w->seed) % 3;
        sluice_result res;
        int rc = all2(w->a, "x", pa, w->b, "y", pb, &res, NULL);
        if (rc < 0) w->errors++;
        else if (rc == 1) w->got_a += pa, w->got_b += pb;
        if ((rc == 1) != res.allowed) w->errors++;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    sluice_redis *a = mk("fixed-window 40/" YEARS, "all2:");
    sluice_redis *b = mk("token-bucket 30/" YEARS, "all2:");
    worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.a = a, .b = b, .seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1)};
        assert_int_equal(pthread_create(&th[i], NULL, run, &w[i]), 0);
    }
    uint64_t ga = 0, gb = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].errors, 0);
        ga += w[i].got_a;
        gb += w[i].got_b;
    }
    /* never over either limit, and what Redis holds is exactly what was
     * granted: no charge without an admission */
    assert_true(ga <= LA);
    assert_true(gb <= LB);
    assert_true(ga > 0);
    assert_int_equal(left(a, "x"), LA - ga);
    assert_int_equal(left(b, "y"), LB - gb);
    /* 240 requests of 1..3 permits: the limits were reached */
    assert_true(LA - ga < 3 || LB - gb < 3);
    sluice_redis_free(a);
    sluice_redis_free(b);
}

/* ---- preconditions ----------------------------------------------------------- */

/* Keys of every length (0 to SLUICE_MAX_KEY_BYTES) and every byte (NUL,
 * '{' and '}', which shape a key's hash tag, 0xff), through one call on two
 * limits: each key is its own limit of 3 -- three calls admitted, the
 * fourth refused by both and charging neither -- and a key that differs
 * in its last byte alone is untouched (its probe still says 3). */
static void test_key_bytes(void **state)
{
    (void)state;
    sluice_redis *a = mk("fixed-window 3/" YEARS, "allk1:");
    sluice_redis *b = mk("token-bucket 3/" YEARS " burst=3", "allk2:");
    static const size_t lens[] = {0, 1, 2, 17, 255, 256, 1000, SLUICE_MAX_KEY_BYTES};
    static unsigned char k[SLUICE_MAX_KEY_BYTES], k2[SLUICE_MAX_KEY_BYTES];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const size_t n = lens[li];
        for (size_t i = 0; i < n; i++) k[i] = (unsigned char)(i * 37 + li); /* every byte value */
        if (n > 2) k[0] = '{', k[1] = '}', k[2] = 0;
        memcpy(k2, k, n);
        if (n) k2[n - 1] ^= 0x80;
        sluice_redis *rs[2] = {a, b};
        const void *keys[2] = {k, k};
        size_t kl[2] = {n, n};
        uint64_t p[2] = {1, 1};
        sluice_result res, per[2];
        for (int i = 0; i < 3; i++) assert_int_equal(sluice_redis_try_acquire_all(rs, keys, kl, p, 2, &res, per), 1);
        assert_int_equal(sluice_redis_try_acquire_all(rs, keys, kl, p, 2, &res, per), 0);
        assert_int_equal(res.error, 0);
        assert_int_equal(res.remaining, 0);
        if (n) { /* the neighbour key: a fresh limit on both */
            assert_true(sluice_redis_try_acquire(a, k2, n, 0, &res));
            assert_int_equal(res.remaining, 3);
            assert_true(sluice_redis_try_acquire(b, k2, n, 0, &res));
            assert_int_equal(res.remaining, 3);
        }
    }
    sluice_redis_free(a);
    sluice_redis_free(b);
}

static void test_preconditions(void **state)
{
    (void)state;
    sluice_redis *a = mk("fixed-window 5/" YEARS, "all3:");
    sluice_redis *b = mk("token-bucket 5/" YEARS, "all3:");
    sluice_redis *other = mk_with("fixed-window 5/" YEARS, "all3:", test_redis_shared.port + 1, 0);
    sluice_redis_config fc;
    sluice_redis_config_init(&fc);
    fc.port = test_redis_shared.port;
    fc.key_prefix = "all3:";
    fc.local_spec = "fixed-window 10/s";
    sluice_redis *fronted = sluice_redis_new("fixed-window 500/" YEARS, &fc, NULL, 0);
    assert_non_null(fronted);
    sluice_redis_stats st0, st1;
    sluice_redis_stats_get(a, &st0);
    sluice_result res, per[SLUICE_COMPOSITE_MAX + 1];
    sluice_redis *rs[SLUICE_COMPOSITE_MAX + 1];
    const void *keys[SLUICE_COMPOSITE_MAX + 1];
    size_t lens[SLUICE_COMPOSITE_MAX + 1];
    uint64_t p[SLUICE_COMPOSITE_MAX + 1];
    char names[SLUICE_COMPOSITE_MAX + 1][8];
    for (int i = 0; i <= SLUICE_COMPOSITE_MAX; i++) {
        rs[i] = i % 2 ? b : a;
        snprintf(names[i], sizeof names[i], "k%d", i);
        keys[i] = names[i];
        lens[i] = strlen(names[i]);
        p[i] = 1;
    }
    /* n out of range, NULL arrays */
    assert_int_equal(sluice_redis_try_acquire_all(rs, keys, lens, p, 0, &res, per), SLUICE_EINVAL);
    assert_int_equal(res.error, SLUICE_EINVAL);
    assert_false(res.allowed);
    assert_int_equal(sluice_redis_try_acquire_all(rs, keys, lens, p, SLUICE_COMPOSITE_MAX + 1, &res, per),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_redis_try_acquire_all(NULL, keys, lens, p, 2, &res, per), SLUICE_EINVAL);
    assert_int_equal(sluice_redis_try_acquire_all(rs, keys, lens, NULL, 2, NULL, NULL), SLUICE_EINVAL);
    /* another Redis; a limit with a local_spec; a NULL limit */
    sluice_redis *bad[2] = {a, other};
    assert_int_equal(sluice_redis_try_acquire_all(bad, keys, lens, p, 2, &res, per), SLUICE_EINVAL);
    assert_int_equal(per[1].error, SLUICE_EINVAL);
    bad[1] = fronted;
    assert_int_equal(sluice_redis_try_acquire_all(bad, keys, lens, p, 2, &res, per), SLUICE_EINVAL);
    bad[1] = NULL;
    assert_int_equal(sluice_redis_try_acquire_all(bad, keys, lens, p, 2, &res, per), SLUICE_EINVAL);
    /* one Redis key twice (same limit, same key) */
    sluice_redis *twice[2] = {a, a};
    const void *k2[2] = {"z", "z"};
    size_t l2[2] = {1, 1};
    assert_int_equal(sluice_redis_try_acquire_all(twice, k2, l2, p, 2, &res, per), SLUICE_EINVAL);
    /* a key too long */
    static char huge[SLUICE_MAX_KEY_BYTES + 1];
    const void *k3[2] = {"z", huge};
    size_t l3[2] = {1, sizeof huge};
    sluice_redis *ab[2] = {a, b};
    assert_int_equal(sluice_redis_try_acquire_all(ab, k3, l3, p, 2, &res, per), SLUICE_EINVAL);
    /* nothing was sent */
    sluice_redis_stats_get(a, &st1);
    assert_int_equal(st1.round_trips, st0.round_trips);
    assert_int_equal(st1.allowed + st1.denied, st0.allowed + st0.denied);
    assert_int_equal(exists(a, "z"), 0);
    /* SLUICE_COMPOSITE_MAX limits at once: fine */
    assert_int_equal(sluice_redis_try_acquire_all(rs, keys, lens, p, SLUICE_COMPOSITE_MAX, &res, per), 1);
    assert_int_equal(res.remaining, 4);
    assert_int_equal(left(a, "k0"), 4);
    assert_int_equal(left(b, "k1"), 4);
    sluice_redis_free(a);
    sluice_redis_free(b);
    sluice_redis_free(other);
    sluice_redis_free(fronted);
}

/* ---- damaged keys, NOSCRIPT ------------------------------------------------ */

static void test_damaged_and_noscript(void **state)
{
    (void)state;
    sluice_redis *a = mk("fixed-window 5/" YEARS, "all4:");
    sluice_redis *b = mk("token-bucket 5/" YEARS, "all4:");
    sluice_result res, per[2];
    assert_int_equal(all2(a, "d", 1, b, "d", 1, &res, per), 1);
    char name[256];
    assert_true(sluice_redis_key_name(b, "d", 1, name, sizeof name) > 0);
    /* a time no script writes (beyond 2^53 ticks): an error, counted */
    const char *hset[] = {"HSET", name, "t", "9100000000000000"};
    assert_int_equal(test_redis_cmd(&test_redis_shared, NULL, NULL, 0, 4, hset), 0);
    sluice_redis_stats st0, st1;
    sluice_redis_stats_get(a, &st0);
    assert_int_equal(all2(a, "d", 1, b, "d", 1, &res, per), SLUICE_EBACKEND);
    assert_false(res.allowed);
    assert_int_equal(res.error, SLUICE_EBACKEND);
    sluice_redis_stats_get(a, &st1);
    assert_int_equal(st1.err_protocol, st0.err_protocol + 1);
    /* a key of another type: Redis's error reply, an error */
    const char *del[] = {"DEL", name};
    const char *set[] = {"SET", name, "garbage"};
    assert_int_equal(test_redis_cmd(&test_redis_shared, NULL, NULL, 0, 2, del), 0);
    assert_int_equal(test_redis_cmd(&test_redis_shared, NULL, NULL, 0, 3, set), 0);
    assert_int_equal(all2(a, "d", 1, b, "d", 1, &res, per), SLUICE_EBACKEND);
    /* Redis ran the first of them (the damage shows in its reply: a's
     * permit was taken); the second failed reading b's key, before any
     * write */
    assert_int_equal(left(a, "d"), 3);
    assert_int_equal(test_redis_cmd(&test_redis_shared, NULL, NULL, 0, 2, del), 0);
    /* SCRIPT FLUSH: answered by EVAL, no error */
    const char *flush[] = {"SCRIPT", "FLUSH"};
    assert_int_equal(test_redis_cmd(&test_redis_shared, NULL, NULL, 0, 2, flush), 0);
    sluice_redis_stats_get(a, &st0);
    assert_int_equal(all2(a, "d", 1, b, "d", 1, &res, per), 1);
    sluice_redis_stats_get(a, &st1);
    assert_int_equal(st1.noscript, st0.noscript + 1);
    assert_int_equal(st1.round_trips, st0.round_trips + 2);
    assert_int_equal(left(a, "d"), 2);
    assert_int_equal(left(b, "d"), 4); /* b's key was deleted: fresh */
    sluice_redis_free(a);
    sluice_redis_free(b);
}


/* ---- with leases -------------------------------------------------------------- */

/* A local clock for a leased limit: `t`, jumping by `jump` ns once `reads`
 * more reads have been made (0: never). */
typedef struct test_clock {
    _Atomic uint64_t t;
    _Atomic int reads;
    uint64_t jump;
} test_clock;

static uint64_t clock_read(void *arg)
{
    test_clock *c = arg;
    if (atomic_load(&c->reads) > 0 && atomic_fetch_sub(&c->reads, 1) == 1) atomic_fetch_add(&c->t, c->jump);
    return atomic_load(&c->t);
}

static sluice_redis *mk_leased(const char *spec, const char *prefix, uint32_t lease_max, test_clock *clk)
{
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = test_redis_shared.port;
    cfg.key_prefix = prefix;
    cfg.command_timeout_ms = 5000;
    cfg.lease_max = lease_max;
    if (clk) {
        cfg.clock_fn = clock_read;
        cfg.clock_arg = clk;
    }
    char err[256];
    sluice_redis *r = sluice_redis_new(spec, &cfg, err, sizeof err);
    if (!r) fail_msg("%s: %s", spec, err);
    return r;
}

/* The permits of the process's lease for `key` (a probe answers from it). */
static uint64_t lease_left(sluice_redis *r, const char *key)
{
    sluice_result res;
    sluice_redis_info info;
    assert_true(sluice_redis_try_acquire_ex(r, key, strlen(key), 0, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_LEASE);
    return res.remaining;
}

/* Spend from A's lease until it holds at least 4 permits (its size
 * doubles each time one is used up at once: a few rounds). */
static void warm(sluice_redis *a, const char *key)
{
    sluice_result res;
    for (int i = 0; i < 40 && lease_left(a, key) < 4; i++)
        assert_true(sluice_redis_try_acquire(a, key, strlen(key), 1, &res));
    assert_true(lease_left(a, key) >= 4);
}

#define SPEC_A "fixed-window 4000/" YEARS
#define SPEC_B "fixed-window 200/" YEARS

/* B's Redis window is full: a call refused by B leaves A's lease as it was
 * (nothing spent, nothing dropped, no round trip for A), the second time
 * from B's remembered refusal too; with B's room back, both are charged.
 * Then the same with an exact limit as B.  On today's code the call is
 * refused with SLUICE_EINVAL. */
static void test_leased_refusal_charges_none(void **state)
{
    (void)state;
    test_clock clk = {.t = 1000000000000ULL};
    sluice_redis *a = mk_leased(SPEC_A, "all5:", 8, &clk);
    sluice_redis *b = mk_leased(SPEC_B, "all5:", 8, NULL);
    sluice_redis *ax = mk(SPEC_A, "all5:"), *bx = mk(SPEC_B, "all5:"); /* exact: Redis's counts */
    sluice_result res, per[2];
    assert_true(sluice_redis_try_acquire(bx, "b", 1, 200, &res)); /* B: full */
    warm(a, "a");
    const uint64_t held = lease_left(a, "a"), in_redis = left(ax, "a");
    sluice_redis_stats s0, s1;
    sluice_redis_stats_get(a, &s0);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(all2(a, "a", 1, b, "b", 1, &res, per), 0);
        assert_false(res.allowed);
        assert_int_equal(res.error, 0);
        assert_true(per[0].allowed);
        if (round == 0) /* (the second time B may refuse before A is reached:
                           the limits go in the order of their addresses) */
            assert_int_equal(per[0].remaining, held); /* without the request */
        assert_false(per[1].allowed);
        assert_true(per[1].retry_after_ns > 0);
        assert_int_equal(res.retry_after_ns, per[1].retry_after_ns);
        assert_int_equal(lease_left(a, "a"), held);
    }
    sluice_redis_stats_get(a, &s1);
    assert_int_equal(s1.round_trips, s0.round_trips);
    assert_int_equal(s1.lease_dropped, s0.lease_dropped);
    assert_int_equal(s1.by_lease, s0.by_lease + 2); /* the probes */
    assert_int_equal(s1.denied, s0.denied + 2);
    assert_int_equal(left(ax, "a"), in_redis);
    sluice_redis_stats sb;
    sluice_redis_stats_get(b, &sb);
    assert_int_equal(sb.by_cache, 1); /* the second refusal: remembered */
    assert_int_equal(sb.round_trips, 1);

    /* B with room (another key): both charged, A from its lease */
    assert_int_equal(all2(a, "a", 1, b, "b2", 2, &res, per), 1);
    assert_true(res.allowed);
    assert_int_equal(per[0].remaining, held - 1);
    assert_int_equal(lease_left(a, "a"), held - 1);
    assert_int_equal(left(ax, "a"), in_redis);        /* spent from the lease: no round trip */
    assert_int_equal(left(bx, "b2") + 2 <= 200, 1); /* B's fetch: 2 and its lease */
    sluice_redis_stats_get(a, &s0);
    assert_int_equal(s0.by_lease, s1.by_lease + 2);

    /* an exact limit refusing: A's lease as it was; then admitting: spent */
    const uint64_t held2 = lease_left(a, "a");
    assert_int_equal(all2(a, "a", 1, bx, "b", 1, &res, per), 0);
    assert_true(per[0].allowed);
    assert_false(per[1].allowed);
    assert_int_equal(lease_left(a, "a"), held2);
    /* A without a lease for its key: asked in the same script run as B,
     * so B's refusal leaves A's Redis key unwritten */
    assert_int_equal(all2(a, "a3", 1, bx, "b", 1, &res, per), 0);
    assert_true(per[0].allowed);
    assert_int_equal(exists(ax, "a3"), 0);
    assert_int_equal(all2(bx, "b3", 1, a, "a", 1, &res, per), 1);
    assert_int_equal(lease_left(a, "a"), held2 - 1);
    assert_int_equal(left(bx, "b3"), 199);
    assert_int_equal(left(ax, "a"), in_redis);
    sluice_redis_free(a);
    sluice_redis_free(b);
    sluice_redis_free(ax);
    sluice_redis_free(bx);
}

/* A's lease ends (its clock passes the lease's end) between the take and
 * the put back: the permit taken is dropped, not put back.  The same call
 * with the clock still: put back, nothing dropped. */
static void test_leased_expiry_drops(void **state)
{
    (void)state;
    test_clock clk = {.t = 5000000000000ULL, .jump = 3600ULL * 1000000000ULL};
    sluice_redis *a = mk_leased(SPEC_A, "all6:", 8, &clk);
    sluice_redis *bx = mk(SPEC_B, "all6:");
    sluice_result res;
    assert_true(sluice_redis_try_acquire(bx, "b", 1, 200, &res)); /* B: full */
    warm(a, "a");
    const uint64_t held = lease_left(a, "a");
    sluice_redis_stats s0, s1;
    sluice_redis_stats_get(a, &s0);
    /* B exact: asked after every leased limit has its permits in hand */
    assert_int_equal(all2(a, "a", 2, bx, "b", 1, &res, NULL), 0); /* still clock: put back */
    sluice_redis_stats_get(a, &s1);
    assert_int_equal(s1.lease_dropped, s0.lease_dropped);
    assert_int_equal(lease_left(a, "a"), held);
    /* the call reads A's clock at the take, then at the put back: an hour later */
    atomic_store(&clk.reads, 2);
    assert_int_equal(all2(a, "a", 2, bx, "b", 1, &res, NULL), 0);
    assert_int_equal(atomic_load(&clk.reads), 0);
    sluice_redis_stats_get(a, &s1);
    assert_int_equal(s1.lease_dropped, s0.lease_dropped + 2); /* the 2 taken */
    /* the rest of the lease ends when next seen: nothing of it came back */
    assert_int_equal(lease_left(a, "a"), 0);
    sluice_redis_stats_get(a, &s1);
    assert_int_equal(s1.lease_dropped, s0.lease_dropped + held);
    sluice_redis_free(a);
    sluice_redis_free(bx);
}

/* Two leased limits under load, A roomy and B small (B refuses most calls
 * once full).  Every permit Redis counted for a key must be accounted for:
 * spent by an admitted call, still in a lease, or dropped.  A permit of A
 * spent by a call that B refused would be in none of them. */
enum { LEASE_WORKERS = 4, LEASE_CALLS = 150, LA2 = 4000, LB2 = 200 };

typedef struct lease_tally {
    uint64_t got_a, got_b, refused, errors;
} lease_tally;

typedef struct lease_worker {
    sluice_redis *a, *b;
    uint64_t seed;
    lease_tally t;
} lease_worker;

static void *lease_run(void *arg)
{
    lease_worker *w = arg;
    for (int i = 0; i < LEASE_CALLS; i++) {
        uint64_t pa = 1 + tu_xorshift64(&w->seed) % 3, pb = 1 + tu_xorshift64(&w->seed) % 3;
        sluice_result res;
        int rc = all2(w->a, "x", pa, w->b, "y", pb, &res, NULL);
        if (rc < 0 || (rc == 1) != res.allowed) w->t.errors++;
        else if (rc == 1) w->t.got_a += pa, w->t.got_b += pb;
        else w->t.refused++;
    }
    return NULL;
}

/* What a limiter holds and dropped of `key`, once its leases are probed. */
static uint64_t unspent(sluice_redis *r, const char *key)
{
    uint64_t held = lease_left(r, key);
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    assert_int_equal(st.err_connect + st.err_timeout + st.err_io + st.err_protocol + st.err_reply, 0);
    return held + st.lease_dropped;
}

static void check_accounts(const char *prefix, uint64_t got_a, uint64_t got_b, uint64_t un_a, uint64_t un_b,
                           uint64_t refused)
{
    sluice_redis *ax = mk("fixed-window 4000/" YEARS, prefix), *bx = mk("fixed-window 200/" YEARS, prefix);
    const uint64_t ra = LA2 - left(ax, "x"), rb = LB2 - left(bx, "y"); /* Redis's counts */
    assert_true(got_a <= LA2);
    assert_true(got_b <= LB2);
    assert_int_equal(ra, got_a + un_a);
    assert_int_equal(rb, got_b + un_b);
    /* B was exhausted and refused while A had room */
    assert_true(refused > 0);
    assert_true(LA2 - ra > 100);
    sluice_redis_free(ax);
    sluice_redis_free(bx);
}

static void test_leased_threads(void **state)
{
    (void)state;
    sluice_redis *a = mk_leased(SPEC_A, "all7:", 8, NULL), *b = mk_leased(SPEC_B, "all7:", 8, NULL);
    lease_worker w[LEASE_WORKERS];
    pthread_t th[LEASE_WORKERS];
    for (int i = 0; i < LEASE_WORKERS; i++) {
        w[i] = (lease_worker){.a = a, .b = b, .seed = 0x2545F4914F6CDD1DULL * (uint64_t)(i + 1)};
        assert_int_equal(pthread_create(&th[i], NULL, lease_run, &w[i]), 0);
    }
    lease_tally sum = {0};
    for (int i = 0; i < LEASE_WORKERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].t.errors, 0);
        sum.got_a += w[i].t.got_a, sum.got_b += w[i].t.got_b, sum.refused += w[i].t.refused;
    }
    check_accounts("all7:", sum.got_a, sum.got_b, unspent(a, "x"), unspent(b, "y"), sum.refused);
    sluice_redis_free(a);
    sluice_redis_free(b);
}

/* The same from 4 processes (fork), each with its own limiters. */
typedef struct lease_shared {
    lease_tally t[LEASE_WORKERS];
    uint64_t un_a[LEASE_WORKERS], un_b[LEASE_WORKERS];
} lease_shared;

static void test_leased_processes(void **state)
{
    (void)state;
    lease_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    pid_t pids[LEASE_WORKERS];
    for (int i = 0; i < LEASE_WORKERS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            sluice_redis *a = mk_leased(SPEC_A, "all8:", 8, NULL), *b = mk_leased(SPEC_B, "all8:", 8, NULL);
            lease_worker w = {.a = a, .b = b, .seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 7)};
            lease_run(&w);
            sh->t[i] = w.t;
            sh->un_a[i] = unspent(a, "x");
            sh->un_b[i] = unspent(b, "y");
            sluice_redis_free(a);
            sluice_redis_free(b);
            _exit(0); /* not exit(): the atexit hook would kill the shared server */
        }
    }
    const uint64_t give_up = test_now_ns() + 120ULL * 1000000000ULL; /* a loaded machine */
    lease_tally sum = {0};
    uint64_t un_a = 0, un_b = 0;
    for (int i = 0; i < LEASE_WORKERS; i++) {
        int status = -1;
        while (waitpid(pids[i], &status, WNOHANG) == 0) {
            if (test_now_ns() > give_up) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], &status, 0);
                fail_msg("child %d hung", i);
            }
            tu_sleep_ns(10 * 1000000ULL);
        }
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        assert_int_equal(sh->t[i].errors, 0);
        sum.got_a += sh->t[i].got_a, sum.got_b += sh->t[i].got_b, sum.refused += sh->t[i].refused;
        un_a += sh->un_a[i], un_b += sh->un_b[i];
    }
    check_accounts("all8:", sum.got_a, sum.got_b, un_a, un_b, sum.refused);
    munmap(sh, sizeof *sh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusal_charges_none),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_key_bytes),
        cmocka_unit_test(test_preconditions),
        cmocka_unit_test(test_damaged_and_noscript),
        cmocka_unit_test(test_leased_refusal_charges_none),
        cmocka_unit_test(test_leased_expiry_drops),
        cmocka_unit_test(test_leased_threads),
        cmocka_unit_test(test_leased_processes),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
