/* test_redis_all.c -- sluice_redis_try_acquire_all: several limits' keys
 * decided in one script, all or nothing, on a private redis-server.
 *
 * A refusal by one limit charges no other (read back by probes and in
 * Redis); an admission charges every one; the combined answer follows the
 * composite's rule (docs/decisions.md 3.7), checked against values worked
 * out by hand; 4 threads on two limits against an independent count of
 * what they were granted; the preconditions' errors, with nothing sent; a
 * damaged key value and a key of another type are errors; SCRIPT FLUSH
 * costs one EVAL and no error.  Windows of 36500 days (aligned to 0, so
 * none ends while the test runs) and buckets that refill one permit in
 * years: nothing depends on the time the test takes.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>
#include <sluice/redis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void test_preconditions(void **state)
{
    (void)state;
    sluice_redis *a = mk("fixed-window 5/" YEARS, "all3:");
    sluice_redis *b = mk("token-bucket 5/" YEARS, "all3:");
    sluice_redis *other = mk_with("fixed-window 5/" YEARS, "all3:", test_redis_shared.port + 1, 0);
    sluice_redis *leased = mk_with("fixed-window 500/" YEARS, "all3:", test_redis_shared.port, 10);
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
    /* another Redis; a limit with leases; a NULL limit */
    sluice_redis *bad[2] = {a, other};
    assert_int_equal(sluice_redis_try_acquire_all(bad, keys, lens, p, 2, &res, per), SLUICE_EINVAL);
    assert_int_equal(per[1].error, SLUICE_EINVAL);
    bad[1] = leased;
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
    sluice_redis_free(leased);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusal_charges_none),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_preconditions),
        cmocka_unit_test(test_damaged_and_noscript),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
