/* test_redis_script.c -- the Lua scripts against the reference model.
 *
 * One private redis-server for the file.  Each scenario makes requests from
 * one thread, one round trip each (lease_max = 0), so Redis runs them in
 * order; every decision, at the time Redis reports (info.server_time_ns), is
 * compared field by field with tests/ref_model.c fed the same requests at
 * the same times.  Also: the SHA1s against SCRIPT LOAD, the spec range and
 * its edges near 2^53, TTLs and at-rest deletion, a clock that steps back,
 * key names and hash tags, configuration errors; key names that depend on
 * the spec's meaning only (not its spelling or clock) and are those of
 * earlier versions; the FAIL_LOCAL spec for each clock; every allocation of
 * the tier through sluice_set_allocator()'s hook, and each one failing; a
 * calendar quota as local_spec decided on its own (the epoch's) clock.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>
#include <sluice/redis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_server.h"
#include "testutil.h"
#include "ref_model.h"

static sluice_redis *mk(const char *spec, const char *prefix)
{
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = test_redis_shared.port;
    cfg.key_prefix = prefix;
    cfg.command_timeout_ms = 2000;
    char err[256];
    sluice_redis *r = sluice_redis_new(spec, &cfg, err, sizeof err);
    if (!r) fail_msg("%s: %s", spec, err);
    return r;
}

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(void) { return tu_xorshift64(&rng_state); }

/* Run n requests on one key with permits drawn from 0 .. maxp and pauses of
 * up to max_sleep_ns, comparing every decision with the model. */
static void against_model(const char *spec, ref_params rp, int n, uint64_t maxp,
                          uint64_t max_sleep_ns)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "ref%llu:", (unsigned long long)(rnd() % 1000000));
    sluice_redis *r = mk(spec, prefix);
    ref_model *m = ref_model_new(&rp);
    assert_non_null(m);
    int allowed = 0, denied = 0;
    for (int i = 0; i < n; i++) {
        uint64_t p = rnd() % (maxp + 1);
        sluice_result got;
        sluice_redis_info info;
        bool ok = sluice_redis_try_acquire_ex(r, "k", 1, p, &got, &info);
        assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
        ref_result want;
        ref_model_decide(m, p, info.server_time_ns, &want);
        if (ok != want.allowed || got.remaining != want.remaining ||
            got.retry_after_ns != want.retry_after_ns || got.wait_ns != 0)
            fail_msg("%s: request %d (p=%llu at %llu ns): redis allowed=%d remaining=%llu "
                     "retry=%lld, model allowed=%d remaining=%llu retry=%lld",
                     spec, i, (unsigned long long)p, (unsigned long long)info.server_time_ns,
                     ok, (unsigned long long)got.remaining, (long long)got.retry_after_ns,
                     want.allowed, (unsigned long long)want.remaining,
                     (long long)want.retry_after_ns);
        if (p) ok ? allowed++ : denied++;
        if (max_sleep_ns && rnd() % 4 == 0) tu_sleep_ns(rnd() % max_sleep_ns);
    }
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    assert_int_equal(st.by_redis, (uint64_t)n);
    assert_int_equal(st.err_connect + st.err_io + st.err_timeout + st.err_reply, 0);
    ref_model_free(m);
    sluice_redis_free(r);
    /* both outcomes were exercised */
    assert_true(allowed > 0);
    assert_true(denied > 0);
}

static ref_params tb(uint64_t L, uint64_t W, uint64_t B)
{
    return (ref_params){.alg = REF_TOKEN_BUCKET, .limit = L, .period_ns = W, .capacity = B};
}

static ref_params sa(uint64_t L, uint64_t W)
{
    return (ref_params){.alg = REF_SLIDING_APPROX, .limit = L, .period_ns = W};
}

static ref_params fw(uint64_t L, uint64_t W)
{
    return (ref_params){.alg = REF_FIXED_WINDOW, .limit = L, .period_ns = W};
}

#define MSEC 1000000ULL
#define SEC 1000000000ULL

static void test_token_bucket(void **state)
{
    (void)state;
    against_model("token-bucket 100/s burst=5", tb(100, SEC, 5), 400, 3, 20 * MSEC);
    against_model("token-bucket 3/s", tb(3, SEC, 3), 200, 2, 100 * MSEC);
    against_model("token-bucket 7/10ms burst=4", tb(7, 10 * MSEC, 4), 400, 5, 3 * MSEC);
    against_model("token-bucket 1000000000/s burst=50000", tb(1000000000, SEC, 50000), 300,
                  60000, 100000);
    against_model("token-bucket 1/d burst=2", tb(1, 86400 * SEC, 2), 50, 3, 0);
    against_model("token-bucket 1000000000000/d burst=3000", tb(1000000000000ULL, 86400 * SEC, 3000),
                  300, 4000, 1 * MSEC);
}

static void test_sliding_approx(void **state)
{
    (void)state;
    against_model("sliding-approx 10/100ms", sa(10, 100 * MSEC), 400, 3, 20 * MSEC);
    against_model("sliding-approx 5/3ms", sa(5, 3 * MSEC), 400, 2, 2 * MSEC);
    against_model("sliding-approx 1000/s", sa(1000, SEC), 300, 400, 50 * MSEC);
    against_model("sliding-approx 7/1500us", sa(7, 1500000), 400, 3, 1 * MSEC);
    against_model("sliding-approx 1/d", sa(1, 86400 * SEC), 30, 2, 0);
}

/* Numbers next to 2^53: the largest specs that keep a 1-us quantum, and the
 * next ones, which get a coarser quantum; decisions stay exact. */
static void test_edges_2_53(void **state)
{
    (void)state;
    struct { const char *spec; uint64_t quantum; } q[] = {
        {"token-bucket 1/s burst=9007199253", 1000},    /* (B+1)*10^6 < 2^53 */
        {"token-bucket 1/s burst=9007199254", 10000},   /* just over */
        {"sliding-approx 4503599626/s", 1000},          /* (2L+1)*10^6 < 2^53 */
        {"sliding-approx 4503599627/s", 10000},
        {"token-bucket 1000000000/s", 1000},
        {"token-bucket 1/36500d burst=1", 1000},
        {"token-bucket 1/36500d burst=2", 10000},
        {"sliding-approx 1000000000000/s", 1000000},    /* (2L+1)*10^3 < 2^53 at 1 ms */
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        sluice_redis *r = mk(q[i].spec, "edge:");
        sluice_redis_limits lim;
        sluice_redis_limits_get(r, &lim);
        if (lim.quantum_ns != q[i].quantum)
            fail_msg("%s: quantum %llu, want %llu", q[i].spec, (unsigned long long)lim.quantum_ns,
                     (unsigned long long)q[i].quantum);
        sluice_redis_free(r);
    }
    /* full bucket of 9007199253 * 10^6 units: take all, refuse one, refuse
     * B+1 forever, probe */
    const uint64_t B = 9007199253ULL;
    against_model("token-bucket 1/s burst=9007199253", tb(1, SEC, B), 60, B + 2, 2 * MSEC);
    sluice_redis *r = mk("token-bucket 1/s burst=9007199253", "edge2:");
    ref_params rp = tb(1, SEC, B);
    ref_model *m = ref_model_new(&rp);
    uint64_t ps[] = {B, 1, B + 1, 0, B - 1, UINT64_MAX, 1, 2, 0};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        sluice_result got;
        sluice_redis_info info;
        bool ok = sluice_redis_try_acquire_ex(r, "e", 1, ps[i], &got, &info);
        ref_result want;
        ref_model_decide(m, ps[i], info.server_time_ns, &want);
        assert_int_equal(ok, want.allowed);
        assert_int_equal(got.remaining, want.remaining);
        assert_int_equal(got.retry_after_ns, want.retry_after_ns);
        tu_sleep_ns(1500 * 1000);
    }
    ref_model_free(m);
    sluice_redis_free(r);
    /* sliding-approx at its edge: requests near L */
    const uint64_t L = 4503599626ULL;
    r = mk("sliding-approx 4503599626/s", "edge3:");
    rp = sa(L, SEC);
    m = ref_model_new(&rp);
    uint64_t ps2[] = {L - 1, 2, 1, L, L + 1, 0, UINT64_MAX, 1};
    for (size_t i = 0; i < sizeof ps2 / sizeof ps2[0]; i++) {
        sluice_result got;
        sluice_redis_info info;
        bool ok = sluice_redis_try_acquire_ex(r, "e", 1, ps2[i], &got, &info);
        ref_result want;
        ref_model_decide(m, ps2[i], info.server_time_ns, &want);
        assert_int_equal(ok, want.allowed);
        assert_int_equal(got.remaining, want.remaining);
        assert_int_equal(got.retry_after_ns, want.retry_after_ns);
    }
    ref_model_free(m);
    sluice_redis_free(r);
    against_model("sliding-approx 4503599626/s", sa(L, SEC), 60, L / 3, 30 * MSEC);
}

static void test_refused_specs(void **state)
{
    (void)state;
    const char *bad[] = {
        "sliding-log 10/s", "leaky-bucket 10/s", "sliding-wheel 10/s",
        "sliding-approx 7/1500ns",           /* not a whole number of us */
        "fixed-window 7/1500ns",             /* not a whole number of us */
        "sliding-approx 1000000000000/d",    /* (2L+1)*W/q >= 2^53 for every q dividing W */
        "token-bucket 10/s burts=5",         /* the core's grammar */
        "token-bucket 1/36500d burst=1000000000000",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "x";
        sluice_redis *r = sluice_redis_new(bad[i], NULL, err, sizeof err);
        if (r) fail_msg("accepted \"%s\"", bad[i]);
        assert_true(strlen(err) > 10);
    }
    char err[256];
    assert_null(sluice_redis_new("sliding-log 10/s", NULL, err, sizeof err));
    assert_non_null(strstr(err, "sliding-log"));
    assert_non_null(strstr(err, "fixed-window")); /* among the algorithms that have one */
    assert_null(sluice_redis_new("fixed-window 7/1500ns", NULL, err, sizeof err));
    assert_non_null(strstr(err, "microseconds"));
    assert_null(sluice_redis_new("token-bucket 10/s burts=5", NULL, err, sizeof err));
    assert_non_null(strstr(err, "burts=5"));
    /* configuration */
    sluice_redis_config c;
    sluice_redis_config_init(&c);
    c.command_timeout_ms = 0;
    assert_null(sluice_redis_new("token-bucket 1/s", &c, err, sizeof err));
    assert_non_null(strstr(err, "command_timeout_ms"));
    sluice_redis_config_init(&c);
    c.key_prefix = "a{b";
    assert_null(sluice_redis_new("token-bucket 1/s", &c, err, sizeof err));
    sluice_redis_config_init(&c);
    c.policy = 7;
    assert_null(sluice_redis_new("token-bucket 1/s", &c, err, sizeof err));
    sluice_redis_config_init(&c);
    c.local_spec = "nonsense";
    assert_null(sluice_redis_new("token-bucket 1/s", &c, err, sizeof err));
    assert_non_null(strstr(err, "local_spec"));
    sluice_redis_free(NULL);
}

static void test_script_sha(void **state)
{
    (void)state;
    for (int i = 0; i < 4; i++) {
        const char *argv[] = {"SCRIPT", "LOAD", sluice_redis_script_source(i)};
        char sha[64];
        assert_int_equal(test_redis_cmd(&test_redis_shared, NULL, sha, sizeof sha, 3, argv), 0);
        assert_string_equal(sha, sluice_redis_script_sha(i));
    }
    assert_non_null(strstr(sluice_redis_script_source(2), "fixed-window"));
    assert_null(sluice_redis_script_source(4));
    assert_null(sluice_redis_script_sha(4));
    assert_null(sluice_redis_script_sha(-1));
}

static long long pttl(const char *key, size_t keylen)
{
    (void)keylen;
    const char *argv[] = {"PTTL", key};
    long long v = -3;
    if (test_redis_cmd(&test_redis_shared, &v, NULL, 0, 2, argv) != 0) return -4;
    return v;
}

static void test_ttl_and_rest(void **state)
{
    (void)state;
    sluice_redis *r = mk("token-bucket 10/s burst=5", "ttl:");
    char name[128];
    int n = sluice_redis_key_name(r, "a", 1, name, sizeof name);
    assert_true(n > 0);
    assert_non_null(strstr(name, "ttl:{a}:"));
    /* a probe on a key at rest creates nothing */
    sluice_result res;
    assert_true(sluice_redis_try_acquire(r, "a", 1, 0, &res));
    assert_int_equal(res.remaining, 5);
    assert_int_equal(pttl(name, (size_t)n), -2);
    /* 3 taken: full again in 300 ms; the TTL covers that and not much more */
    assert_true(sluice_redis_try_acquire(r, "a", 1, 3, &res));
    long long t = pttl(name, (size_t)n);
    assert_true(t > 250 && t <= 302);
    tu_sleep_ns(350 * MSEC);
    assert_int_equal(pttl(name, (size_t)n), -2); /* expired: at rest */
    assert_true(sluice_redis_try_acquire(r, "a", 1, 5, &res));
    assert_int_equal(res.remaining, 0);
    sluice_redis_free(r);

    r = mk("sliding-approx 10/200ms", "ttl:");
    n = sluice_redis_key_name(r, "b", 1, name, sizeof name);
    assert_true(sluice_redis_try_acquire(r, "b", 1, 1, &res));
    t = pttl(name, (size_t)n);
    assert_true(t > 200 && t <= 401); /* until the end of the next window */
    sluice_redis_free(r);
}

static void test_fixed_window(void **state)
{
    (void)state;
    against_model("fixed-window 10/100ms", fw(10, 100 * MSEC), 400, 3, 20 * MSEC);
    against_model("fixed-window 5/3ms", fw(5, 3 * MSEC), 400, 2, 2 * MSEC);
    against_model("fixed-window 1000/s", fw(1000, SEC), 300, 400, 50 * MSEC); /* p > L too */
    against_model("fixed-window 7/1500us", fw(7, 1500000), 400, 3, 1 * MSEC);
    against_model("fixed-window 1/d", fw(1, 86400 * SEC), 30, 2, 0);
    against_model("fixed-window 1000000000000/d", fw(1000000000000ULL, 86400 * SEC), 30,
                  1000000000001ULL, 0);
}

/* fixed-window's edges, read at Redis's time: a refusal waits exactly for
 * the end of the window (aligned to 0), p > L is refused for ever (-1) and
 * charges nothing, a refusal or a probe writes no key, and an admitted
 * key expires at its window's end. */
static void test_fixed_window_edges(void **state)
{
    (void)state;
    const uint64_t W = 200 * MSEC;
    sluice_redis *r = mk("fixed-window 3/200ms", "fwe:");
    char name[128];
    int n = sluice_redis_key_name(r, "e", 1, name, sizeof name);
    assert_true(n > 0);
    sluice_result res;
    sluice_redis_info info;
    /* p > L on a fresh key: -1, and no key */
    assert_false(sluice_redis_try_acquire_ex(r, "e", 1, 4, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
    assert_int_equal(res.retry_after_ns, -1);
    assert_int_equal(res.remaining, 3);
    assert_true(sluice_redis_try_acquire(r, "e", 1, 0, &res));
    assert_int_equal(pttl(name, (size_t)n), -2);
    /* fill the window: every refusal in it waits for its end, exactly */
    for (int tries = 0; tries < 20; tries++) {
        assert_true(sluice_redis_try_acquire_ex(r, "e", 1, 3, &res, &info));
        uint64_t t0 = info.server_time_ns;
        assert_int_equal(res.remaining, 0);
        assert_false(sluice_redis_try_acquire_ex(r, "e", 1, 1, &res, &info));
        if (info.server_time_ns / W != t0 / W) { /* crossed an edge: again */
            tu_sleep_ns(W / 4);
            continue;
        }
        assert_int_equal(res.retry_after_ns, (int64_t)(W - info.server_time_ns % W));
        assert_int_equal(res.remaining, 0);
        /* p > L: never, even with the window full */
        assert_false(sluice_redis_try_acquire(r, "e", 1, 4, &res));
        assert_int_equal(res.retry_after_ns, -1);
        /* the key lives until the window's end (+1 ms), no longer */
        long long t = pttl(name, (size_t)n);
        long long left_ms = (long long)((W - t0 % W) / MSEC);
        if (t < left_ms - 100 || t > left_ms + 2)
            fail_msg("PTTL %lld ms, the window ends in %lld ms", t, left_ms);
        tu_sleep_ns(W - info.server_time_ns % W + 5 * MSEC);
        assert_int_equal(pttl(name, (size_t)n), -2); /* expired at the edge */
        assert_true(sluice_redis_try_acquire_ex(r, "e", 1, 3, &res, &info));
        assert_int_equal(res.remaining, 0);
        sluice_redis_free(r);
        return;
    }
    fail_msg("every try crossed a window edge");
}

/* The server's clock steps back (as after a failover to a server whose
 * clock is behind): the key's latest time wins. */
static void test_clock_back(void **state)
{
    (void)state;
    sluice_redis *r = mk("token-bucket 10/s burst=5", "back:");
    char name[128];
    sluice_redis_key_name(r, "k", 1, name, sizeof name);
    sluice_result res;
    sluice_redis_info info;
    assert_true(sluice_redis_try_acquire_ex(r, "k", 1, 5, &res, &info));
    uint64_t t_us = info.server_time_ns / 1000 + 10000000; /* 10 s ahead */
    char tbuf[32];
    snprintf(tbuf, sizeof tbuf, "%llu", (unsigned long long)t_us);
    const char *argv[] = {"HSET", name, "t", tbuf, "x", "0"};
    assert_int_equal(test_redis_cmd(&test_redis_shared, NULL, NULL, 0, 6, argv), 0);
    assert_false(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
    assert_int_equal(info.server_time_ns, t_us * 1000); /* clamped to the latest */
    assert_int_equal(res.retry_after_ns, 100 * MSEC);
    sluice_redis_free(r);
}

static void test_keys(void **state)
{
    (void)state;
    sluice_redis *r = mk("token-bucket 1/s burst=1", "keys:");
    sluice_result res;
    /* binary keys, braces, the empty key: all distinct */
    const char k1[] = "a}b", k2[] = "a\0b", k3[] = "{x}";
    assert_true(sluice_redis_try_acquire(r, k1, 3, 1, &res));
    assert_true(sluice_redis_try_acquire(r, k2, 3, 1, &res));
    assert_true(sluice_redis_try_acquire(r, k3, 3, 1, &res));
    assert_true(sluice_redis_try_acquire(r, NULL, 0, 1, &res));
    assert_false(sluice_redis_try_acquire(r, k1, 3, 1, &res));
    assert_false(sluice_redis_try_acquire(r, k2, 3, 1, &res));
    assert_false(sluice_redis_try_acquire(r, "", 0, 1, &res));
    /* a key too long is refused without a round trip */
    sluice_redis_info info;
    assert_false(sluice_redis_try_acquire_ex(r, "x", SLUICE_MAX_KEY_BYTES + 1, 1, &res, &info));
    assert_int_equal(info.error, SLUICE_EINVAL);
    assert_int_equal(res.retry_after_ns, -1);
    /* a long key is fine */
    char *big = calloc(SLUICE_MAX_KEY_BYTES, 1);
    assert_non_null(big);
    memset(big, 'z', SLUICE_MAX_KEY_BYTES);
    assert_true(sluice_redis_try_acquire(r, big, SLUICE_MAX_KEY_BYTES, 1, &res));
    assert_false(sluice_redis_try_acquire(r, big, SLUICE_MAX_KEY_BYTES, 1, &res));
    free(big);
    /* two specs never share a Redis key */
    sluice_redis *r2 = mk("token-bucket 2/s burst=1", "keys:");
    assert_true(sluice_redis_try_acquire(r2, k1, 3, 1, &res));
    char n1[64], n2[64];
    sluice_redis_key_name(r, "q", 1, n1, sizeof n1);
    sluice_redis_key_name(r2, "q", 1, n2, sizeof n2);
    assert_string_not_equal(n1, n2);
    assert_int_equal(sluice_redis_key_name(r, "q", 1, n1, 5), SLUICE_ENOSPC);
    sluice_redis_free(r2);
    sluice_redis_free(r);
}

/* The SPECID of a Redis key is FNV-1a (32 bits, offset basis 2166136261,
 * prime 16777619) of the canonical spec without its clock: written out here
 * from the published definition, so a change of the key names (which would
 * split one limit in two while processes of two versions share a Redis)
 * fails this test. */
static uint32_t fnv1a32(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 16777619u;
    }
    return h;
}

static void test_spec_names(void **state)
{
    (void)state;
    static const struct { const char *spec, *canon; } c[] = {
        {"token-bucket 10/s", "token-bucket 10/s"},
        {"token-bucket  10/1000ms burst=10", "token-bucket 10/s"},
        {"token-bucket 10/s clock=coarse", "token-bucket 10/s"},
        {"token-bucket 10/s burst=5 clock=monotonic", "token-bucket 10/s burst=5"},
        {"token-bucket 7/90s burst=3 clock=coarse", "token-bucket 7/90s burst=3"},
        {"sliding-approx 100/60s", "sliding-approx 100/min"},
        {"sliding-approx 100/m clock=coarse", "sliding-approx 100/min"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        sluice_redis *r = sluice_redis_new(c[i].spec, NULL, NULL, 0);
        assert_non_null(r);
        char got[128], want[128];
        assert_true(sluice_redis_key_name(r, "k", 1, got, sizeof got) > 0);
        snprintf(want, sizeof want, "sluice:{k}:%08x", (unsigned)fnv1a32(c[i].canon));
        if (strcmp(got, want) != 0)
            fail_msg("\"%s\": key name %s, want %s", c[i].spec, got, want);
        sluice_redis_free(r);
    }
}

/* The FAIL_LOCAL spec: LIMIT / P per PERIOD (exact when it can be said),
 * burst / P, and the spec's clock. */
static void test_fallback_specs(void **state)
{
    (void)state;
    static const struct { const char *spec; uint32_t procs; const char *want; } c[] = {
        {"token-bucket 10/s burst=4", 1, "token-bucket 10/s burst=4"},
        {"token-bucket 10/s burst=4", 2, "token-bucket 5/s burst=2"},
        {"token-bucket 10/s", 3, "token-bucket 10/3s burst=3"},
        {"token-bucket 10/s burst=2", 4, "token-bucket 10/4s burst=1"},
        {"token-bucket 10/s clock=coarse", 1, "token-bucket 10/s clock=coarse"},
        {"token-bucket 10/s clock=coarse", 5, "token-bucket 2/s clock=coarse"},
        {"token-bucket 10/s burst=5 clock=coarse", 2, "token-bucket 5/s burst=2 clock=coarse"},
        {"sliding-approx 10/s", 1, "sliding-approx 10/s"},
        {"sliding-approx 10/s", 4, "sliding-approx 2/s"},
        {"sliding-approx 10/s", 20, "sliding-approx 1/s"},
        {"sliding-approx 10/s clock=coarse", 2, "sliding-approx 5/s clock=coarse"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        sluice_redis_config cfg;
        sluice_redis_config_init(&cfg);
        cfg.expected_processes = c[i].procs;
        char err[256];
        sluice_redis *r = sluice_redis_new(c[i].spec, &cfg, err, sizeof err);
        if (!r) fail_msg("\"%s\": %s", c[i].spec, err);
        sluice_redis_limits lim;
        sluice_redis_limits_get(r, &lim);
        if (strcmp(lim.local_fallback_spec, c[i].want) != 0)
            fail_msg("\"%s\", %u processes: fallback \"%s\", want \"%s\"", c[i].spec,
                     (unsigned)c[i].procs, lim.local_fallback_spec, c[i].want);
        sluice_redis_free(r);
    }
}

/* A calendar quota as local_spec is decided at its own clock, the
 * epoch's: its refusal's retry is the time to the next UTC midnight,
 * computed here from CLOCK_REALTIME read before and after (the monotonic
 * clock, seconds since boot, would put the day's end elsewhere). */
static void test_local_calendar(void **state)
{
    (void)state;
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = test_redis_shared.port;
    cfg.key_prefix = "cal";
    cfg.command_timeout_ms = 2000;
    cfg.local_spec = "fixed-window 1/d tz=UTC";
    char err[256];
    sluice_redis *r = sluice_redis_new("token-bucket 1000/s", &cfg, err, sizeof err);
    if (!r) fail_msg("%s", err);
    const uint64_t day = 86400ULL * 1000000000ULL;
    struct timespec ts;
    uint64_t lo, hi;
    sluice_result res;
    sluice_redis_info info;
    for (int tries = 0;; tries++) { /* the two calls in one UTC day */
        clock_gettime(CLOCK_REALTIME, &ts);
        lo = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
        char key[16];
        snprintf(key, sizeof key, "k%d", tries);
        assert_true(sluice_redis_try_acquire_ex(r, key, strlen(key), 1, &res, &info));
        assert_false(sluice_redis_try_acquire_ex(r, key, strlen(key), 1, &res, &info));
        clock_gettime(CLOCK_REALTIME, &ts);
        hi = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
        if (lo / day == hi / day || tries == 2) break;
    }
    assert_int_equal(info.source, SLUICE_REDIS_SRC_LOCAL);
    const uint64_t end = (lo / day + 1) * day;
    if (res.retry_after_ns < (int64_t)(end - hi) || res.retry_after_ns > (int64_t)(end - lo))
        fail_msg("retry_after_ns %lld, want %llu .. %llu (to the next UTC midnight)",
                 (long long)res.retry_after_ns, (unsigned long long)(end - hi),
                 (unsigned long long)(end - lo));
    sluice_redis_free(r);
}

/* Every block the tier allocates comes from the hook and goes back to it
 * (the test allocator of tests/testutil.h aborts on a block it did not
 * hand out: a libc malloc'd block freed through the hook); sluice_redis_new fails cleanly at each
 * allocation, with a message and nothing left allocated. */
static void test_allocator(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0);
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = test_redis_shared.port;
    cfg.key_prefix = "alloc:";
    cfg.command_timeout_ms = 2000;
    cfg.lease_max = 100;
    /* with no local table, every block is the tier's own: the limiter,
     * its connection pool, and one key copy per key it holds a lease for */
    sluice_redis *r0 = sluice_redis_new("token-bucket 100000/s", &cfg, NULL, 0);
    assert_non_null(r0);
    long own = tu_alloc_live();
    if (own < 3) fail_msg("sluice_redis_new made %ld blocks through the hook", own);
    for (int k = 0; k < 20; k++) {
        char key[16];
        int kl = snprintf(key, sizeof key, "own-%d", k);
        sluice_result res;
        assert_true(sluice_redis_try_acquire(r0, key, (size_t)kl, 1, &res));
    }
    if (tu_alloc_live() < own + 20)
        fail_msg("20 keys added %ld blocks, want >= 20", tu_alloc_live() - own);
    sluice_redis_free(r0);
    assert_int_equal(tu_alloc_live(), 0);
    cfg.max_keys = 64;
    cfg.local_spec = "token-bucket 1000/s";
    cfg.policy = SLUICE_REDIS_FAIL_LOCAL;
    long n;
    for (n = 0; n < 10000; n++) {
        tu_alloc_arm(n, false);
        char err[256] = "";
        sluice_redis *r = sluice_redis_new("token-bucket 100000/s", &cfg, err, sizeof err);
        tu_alloc_disarm();
        if (!r) {
            if (tu_alloc_failures() == 0) fail_msg("refused with no failed allocation: %s", err);
            if (err[0] == '\0' || strchr(err, '\n')) fail_msg("allocation %ld: bad message", n);
            if (tu_alloc_live() != 0) fail_msg("allocation %ld: %ld blocks leaked", n, tu_alloc_live());
            continue;
        }
        /* two tiers: entries, key copies and their stripes' tables, through
         * the hook; long keys make the key name's buffer too */
        sluice_result res;
        for (int k = 0; k < 200; k++) {
            char key[700];
            int kl = snprintf(key, sizeof key, "key-%d", k);
            if (k % 50 == 0) {
                memset(key + kl, 'x', 600);
                kl += 600;
            }
            sluice_redis_try_acquire(r, key, (size_t)kl, 1, &res);
            sluice_redis_try_acquire(r, key, (size_t)kl, 1, &res);
        }
        sluice_redis_stats st;
        sluice_redis_stats_get(r, &st);
        assert_true(st.by_lease > 0);
        assert_true(tu_alloc_live() > 0);
        sluice_redis_free(r);
        if (tu_alloc_live() != 0) fail_msg("%ld blocks leaked by sluice_redis_free", tu_alloc_live());
        if (tu_alloc_failures() == 0) break;
    }
    if (n < 3) fail_msg("sluice_redis_new made only %ld allocations", n);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_script_sha),
        cmocka_unit_test(test_refused_specs),
        cmocka_unit_test(test_token_bucket),
        cmocka_unit_test(test_sliding_approx),
        cmocka_unit_test(test_fixed_window),
        cmocka_unit_test(test_fixed_window_edges),
        cmocka_unit_test(test_edges_2_53),
        cmocka_unit_test(test_ttl_and_rest),
        cmocka_unit_test(test_clock_back),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_spec_names),
        cmocka_unit_test(test_fallback_specs),
        cmocka_unit_test(test_allocator),
        cmocka_unit_test(test_local_calendar),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
