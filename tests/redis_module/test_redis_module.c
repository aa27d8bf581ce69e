/* test_redis_module.c -- the Redis module sluice.so, in real redis-servers.
 *
 * Every server is started by this file on a free loopback port, in a
 * private temporary directory, with --loadmodule (the `testclock` argument
 * unless the test is about the real clock), and killed when the test ends
 * or the process dies (PR_SET_PDEATHSIG, atexit).  Every wait is bounded.
 *
 *  - decisions against the reference model (tests/ref_model.c), request by
 *    request, for every algorithm, with the time injected by `AT`; PEEK
 *    checked against the ACQUIRE that follows it at the same instant;
 *  - SLUICE.THROTTLE against the model's token bucket, and exact where
 *    redis-cell is not: 3/s, 8000/s and 10^9/s;
 *  - a restart from RDB and from AOF keeps every state byte for byte,
 *    and its expiry;
 *  - a replica holds its master's states byte for byte, and has run SET,
 *    never a SLUICE command (it never decides with its own clock);
 *  - the real clock: expiries at rest, RESET;
 *  - bad input of every kind: an error, the key unchanged;
 *  - changes of spec: by hand, the issue's script, seeded chains against
 *    the model (windows shorter, longer and back), a value with the
 *    carry's history and bad ones; a key named AT; RESET and WATCH; a
 *    64-MB spec;
 *  - keys left by redis-cell, against redis-cell's rule;
 *  - a single-node cluster with the module loaded.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "module_server.h"
#include "ref_model.h"
#include "testutil.h"

#ifndef TEST_MODULE_PATH
#define TEST_MODULE_PATH "sluice.so"
#endif

#define T0 1700000000000000000ULL /* a realistic wall-clock time, in ns */
#define SEC 1000000000ULL
#define MS 1000000ULL

/* A command; the reply (never NULL: a lost connection fails the test). */
static redisReply *cmd(srv *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(s->c, fmt, ap);
    va_end(ap);
    if (!r) fail_msg("connection to port %d lost: %s", s->port, s->c->errstr);
    return r;
}

static long long cmd_int(srv *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(s->c, fmt, ap);
    va_end(ap);
    if (!r) fail_msg("connection lost");
    if (r->type != REDIS_REPLY_INTEGER) fail_msg("not an integer reply: %s", r->str ? r->str : "?");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* An array reply of n integers into out[]. */
static void ints(redisReply *r, long long *out, size_t n)
{
    if (r->type != REDIS_REPLY_ARRAY) fail_msg("not an array: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    assert_int_equal(r->elements, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r->element[i]->type, REDIS_REPLY_INTEGER);
        out[i] = r->element[i]->integer;
    }
    freeReplyObject(r);
}

static void expect_error(redisReply *r, const char *part)
{
    if (r->type != REDIS_REPLY_ERROR || !strstr(r->str, part))
        fail_msg("expected an error with \"%s\", got type %d: %s", part, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

/* The value of a key (empty when missing), and its absolute expiry. */
typedef struct snap {
    char v[4096];
    size_t n;
    bool exists;
    long long expire_ms;
} snap;

static void take(srv *s, const char *key, snap *out)
{
    redisReply *r = cmd(s, "GET %s", key);
    out->exists = r->type == REDIS_REPLY_STRING;
    out->n = out->exists ? r->len : 0;
    assert_true(out->n <= sizeof out->v);
    if (out->n) memcpy(out->v, r->str, out->n);
    freeReplyObject(r);
    out->expire_ms = cmd_int(s, "PEXPIRETIME %s", key);
}

static void assert_same(const snap *a, const snap *b, const char *key)
{
    if (a->exists != b->exists || a->n != b->n || memcmp(a->v, b->v, a->n) != 0 ||
        a->expire_ms != b->expire_ms)
        fail_msg("key %s differs (exists %d/%d, %zu/%zu bytes, expiry %lld/%lld)", key, a->exists,
                 b->exists, a->n, b->n, a->expire_ms, b->expire_ms);
}

/* ---- the model --------------------------------------------------------- */

typedef struct spec_case {
    const char *spec;
    ref_params p;
} spec_case;

static const spec_case g_specs[] = {
    {"fixed-window 5/250ms", {.alg = REF_FIXED_WINDOW, .limit = 5, .period_ns = 250 * MS}},
    {"fixed-window 1000000000/s", {.alg = REF_FIXED_WINDOW, .limit = 1000000000, .period_ns = SEC}},
    {"sliding-log 7/s", {.alg = REF_SLIDING_LOG, .limit = 7, .period_ns = SEC}},
    {"sliding-log 3/10us", {.alg = REF_SLIDING_LOG, .limit = 3, .period_ns = 10000}},
    {"sliding-wheel 100/s slots=10", {.alg = REF_SLIDING_WHEEL, .limit = 100, .period_ns = SEC, .slots = 10}},
    {"sliding-wheel 20/s", {.alg = REF_SLIDING_WHEEL, .limit = 20, .period_ns = SEC, .slots = 1000}},
    {"sliding-approx 10/s", {.alg = REF_SLIDING_APPROX, .limit = 10, .period_ns = SEC}},
    {"sliding-approx 5000000000/min", {.alg = REF_SLIDING_APPROX, .limit = 5000000000ULL, .period_ns = 60 * SEC}},
    {"token-bucket 3/s burst=5", {.alg = REF_TOKEN_BUCKET, .limit = 3, .period_ns = SEC, .capacity = 5}},
    {"token-bucket 7/10s", {.alg = REF_TOKEN_BUCKET, .limit = 7, .period_ns = 10 * SEC}},
    {"token-bucket 8000/s burst=1", {.alg = REF_TOKEN_BUCKET, .limit = 8000, .period_ns = SEC, .capacity = 1}},
    {"token-bucket 1000000000/s burst=3", {.alg = REF_TOKEN_BUCKET, .limit = 1000000000, .period_ns = SEC, .capacity = 3}},
    {"token-bucket 1000000007/s burst=20000000000", /* 128-bit level */
     {.alg = REF_TOKEN_BUCKET, .limit = 1000000007, .period_ns = SEC, .capacity = 20000000000ULL}},
    {"leaky-bucket 10/s capacity=5", {.alg = REF_LEAKY_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 5}},
    {"leaky-bucket 3/s nodelay", {.alg = REF_LEAKY_BUCKET, .limit = 3, .period_ns = SEC, .nodelay = true}},
};
#define N_SPECS (sizeof g_specs / sizeof g_specs[0])

static long long ceil_div(uint64_t ns, uint64_t unit) { return (long long)(ns / unit + (ns % unit != 0)); }

/* The module's ACQUIRE reply for the model's decision. */
static void expected_reply(const ref_result *e, long long out[4])
{
    out[0] = e->allowed;
    out[1] = (long long)e->remaining;
    out[2] = e->allowed ? 0 : e->retry_after_ns < 0 ? -1 : ceil_div((uint64_t)e->retry_after_ns, MS);
    out[3] = ceil_div(e->wait_ns, MS);
}

static srv g_tc; /* the shared server with testclock */

static int group_setup(void **state)
{
    (void)state;
    const char *extra[] = {"--save", "", "--appendonly", "no", NULL};
    return srv_start(&g_tc, TEST_MODULE_PATH, "testclock", extra);
}

static int group_teardown(void **state)
{
    (void)state;
    srv_stop(&g_tc);
    return 0;
}

/* A random time step: the scales the algorithms care about. */
static uint64_t step(uint64_t *rng, const ref_params *p)
{
    const uint64_t w = p->period_ns, l = p->limit;
    switch (tu_splitmix64_below(rng, 8)) {
    case 0: return 0;
    case 1: return 1 + tu_splitmix64_below(rng, 3);
    case 2: return tu_splitmix64_below(rng, w / l + 2);
    case 3: return w / l + tu_splitmix64_below(rng, 3) - 1;
    case 4: return tu_splitmix64_below(rng, w / 4 + 1);
    case 5: return w - 1 + tu_splitmix64_below(rng, 3);
    case 6: return tu_splitmix64_below(rng, 3 * w);
    default: return tu_splitmix64_below(rng, 2 * MS);
    }
}

static uint64_t permits(uint64_t *rng, const ref_params *p)
{
    const uint64_t cap = p->capacity ? p->capacity : p->limit;
    switch (tu_splitmix64_below(rng, 8)) {
    case 0: return 0;
    case 1: return 2 + tu_splitmix64_below(rng, 3);
    case 2: return cap;
    case 3: return cap + 1;
    case 4: return 1 + tu_splitmix64_below(rng, cap);
    default: return 1;
    }
}

static void test_against_model(void **state)
{
    (void)state;
    uint64_t rng = tu_env_seed();
    const int steps = 300;
    for (size_t i = 0; i < N_SPECS; i++) {
        const spec_case *sc = &g_specs[i];
        ref_model *m = ref_model_new(&sc->p);
        assert_non_null(m);
        char key[32];
        snprintf(key, sizeof key, "model:%zu", i);
        uint64_t t = T0 + tu_splitmix64_below(&rng, SEC);
        long long allowed = 0;
        for (int k = 0; k < steps; k++) {
            t += step(&rng, &sc->p);
            uint64_t at = t;
            if (tu_splitmix64_below(&rng, 16) == 0) at = t - tu_splitmix64_below(&rng, SEC); /* late */
            const uint64_t p = permits(&rng, &sc->p);
            ref_result e;
            ref_model_decide(m, p, at, &e);
            long long want[4], got[4], peek[4];
            expected_reply(&e, want);
            if (tu_splitmix64_below(&rng, 3) == 0) {
                ints(cmd(&g_tc, "SLUICE.PEEK %s %s %llu AT %llu", key, sc->spec, (unsigned long long)p,
                         (unsigned long long)at), peek, 4);
                if (memcmp(peek, want, sizeof want) != 0)
                    fail_msg("%s step %d: PEEK %llu at %llu: got %lld %lld %lld %lld, want %lld %lld %lld %lld",
                             sc->spec, k, (unsigned long long)p, (unsigned long long)at, peek[0], peek[1],
                             peek[2], peek[3], want[0], want[1], want[2], want[3]);
            }
            ints(cmd(&g_tc, "SLUICE.ACQUIRE %s %s %llu AT %llu", key, sc->spec, (unsigned long long)p,
                     (unsigned long long)at), got, 4);
            if (memcmp(got, want, sizeof want) != 0)
                fail_msg("%s step %d: ACQUIRE %llu at %llu: got %lld %lld %lld %lld, want %lld %lld %lld %lld",
                         sc->spec, k, (unsigned long long)p, (unsigned long long)at, got[0], got[1],
                         got[2], got[3], want[0], want[1], want[2], want[3]);
            allowed += got[0] && p > 0;
        }
        assert_true(allowed > 0);
        ref_model_free(m);
    }
}

/* THROTTLE = the token bucket of max_burst + 1 at count/period s. */
static void test_throttle_against_model(void **state)
{
    (void)state;
    static const struct { uint64_t burst, count, period; } cases[] = {
        {15, 30, 60}, {4, 1, 1}, {2, 3, 1}, {0, 8000, 1}, {0, 1000000000, 1}, {9, 7, 10},
    };
    uint64_t rng = tu_env_seed() ^ 0x5eed;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint64_t B = cases[i].burst + 1;
        ref_params p = {.alg = REF_TOKEN_BUCKET, .limit = cases[i].count,
                        .period_ns = cases[i].period * SEC, .capacity = B};
        ref_model *m = ref_model_new(&p);
        char key[32];
        snprintf(key, sizeof key, "throttle:%zu", i);
        uint64_t t = T0;
        for (int k = 0; k < 200; k++) {
            t += step(&rng, &p);
            const uint64_t q = permits(&rng, &p);
            ref_result e;
            ref_model_decide(m, q, t, &e);
            /* reset_after: the least wait after which a request for the
             * whole burst would pass, searched on the model */
            uint64_t lo = 0, hi = 1;
            while (!ref_model_would_allow(m, B, t + hi)) hi *= 2;
            while (lo < hi) {
                uint64_t mid = lo + (hi - lo) / 2;
                if (ref_model_would_allow(m, B, t + mid)) hi = mid;
                else lo = mid + 1;
            }
            long long got[5];
            ints(cmd(&g_tc, "SLUICE.THROTTLE %s %llu %llu %llu %llu AT %llu", key,
                     (unsigned long long)cases[i].burst, (unsigned long long)cases[i].count,
                     (unsigned long long)cases[i].period, (unsigned long long)q, (unsigned long long)t),
                 got, 5);
            const long long want[5] = {
                !e.allowed, (long long)B, (long long)e.remaining,
                e.allowed || e.retry_after_ns < 0 ? -1 : ceil_div((uint64_t)e.retry_after_ns, SEC),
                ceil_div(lo, SEC)};
            if (memcmp(got, want, sizeof want) != 0)
                fail_msg("THROTTLE %llu %llu %llu step %d q %llu: got %lld %lld %lld %lld %lld, want %lld %lld %lld %lld %lld",
                         (unsigned long long)cases[i].burst, (unsigned long long)cases[i].count,
                         (unsigned long long)cases[i].period, k, (unsigned long long)q, got[0], got[1],
                         got[2], got[3], got[4], want[0], want[1], want[2], want[3], want[4]);
        }
        ref_model_free(m);
    }
    /* redis-cell's own example: a fresh key */
    long long r[5];
    ints(cmd(&g_tc, "SLUICE.THROTTLE user123 15 30 60 AT %llu", (unsigned long long)T0), r, 5);
    const long long readme[5] = {0, 16, 15, -1, 2};
    assert_memory_equal(r, readme, sizeof r);
}

/* Where redis-cell rounds its emission interval to whole ns (3/s: 333333333
 * ns, drifting by a third of a ns per request) or to ms (8000/s), the module
 * holds the exact rate. */
static void test_throttle_exact_rates(void **state)
{
    (void)state;
    long long r[5];
    /* 3/s, burst 1: the second request needs 333333333.33 ns */
    ints(cmd(&g_tc, "SLUICE.THROTTLE exact3 0 3 1 AT %llu", (unsigned long long)T0), r, 5);
    assert_int_equal(r[0], 0);
    ints(cmd(&g_tc, "SLUICE.THROTTLE exact3 0 3 1 AT %llu", (unsigned long long)(T0 + 333333333)), r, 5);
    assert_int_equal(r[0], 1);
    ints(cmd(&g_tc, "SLUICE.THROTTLE exact3 0 3 1 AT %llu", (unsigned long long)(T0 + 333333334)), r, 5);
    assert_int_equal(r[0], 0);
    /* 3 a second for 300 s from an empty bucket of 2 (so that no token is
     * lost to the cap): the k-th passes at ceil(k * 10^9 / 3) ns and not a
     * ns earlier -- no drift */
    ints(cmd(&g_tc, "SLUICE.THROTTLE exact3b 1 3 1 2 AT %llu", (unsigned long long)T0), r, 5);
    assert_int_equal(r[0], 0);
    for (uint64_t k = 1; k <= 900; k++) {
        const uint64_t due = T0 + (k * SEC + 2) / 3;
        ints(cmd(&g_tc, "SLUICE.THROTTLE exact3b 1 3 1 AT %llu", (unsigned long long)(due - 1)), r, 5);
        assert_int_equal(r[0], 1);
        ints(cmd(&g_tc, "SLUICE.THROTTLE exact3b 1 3 1 AT %llu", (unsigned long long)due), r, 5);
        assert_int_equal(r[0], 0);
    }
    /* 8000/s: one every 125 us exactly */
    for (uint64_t k = 0; k < 800; k++) {
        const uint64_t due = T0 + k * 125000;
        if (k) {
            ints(cmd(&g_tc, "SLUICE.THROTTLE exact8k 0 8000 1 AT %llu", (unsigned long long)(due - 1)), r, 5);
            assert_int_equal(r[0], 1);
        }
        ints(cmd(&g_tc, "SLUICE.THROTTLE exact8k 0 8000 1 AT %llu", (unsigned long long)due), r, 5);
        assert_int_equal(r[0], 0);
    }
    /* 10^9/s: one per ns, and a burst of 1 means exactly one per ns */
    for (uint64_t k = 0; k < 500; k++) {
        ints(cmd(&g_tc, "SLUICE.THROTTLE exact1g 0 1000000000 1 AT %llu", (unsigned long long)(T0 + k)), r, 5);
        assert_int_equal(r[0], 0);
        ints(cmd(&g_tc, "SLUICE.THROTTLE exact1g 0 1000000000 1 AT %llu", (unsigned long long)(T0 + k)), r, 5);
        assert_int_equal(r[0], 1);
        assert_int_equal(r[3], 1); /* 1 ns, rounded up to a second */
    }
}

/* ---- bad input --------------------------------------------------------- */

/* A calendar quota (fixed-window with tz=): Paris's 25-hour day of
 * 2024-10-27 runs from 10-26 22:00 UTC to 10-27 23:00 UTC.  The stored
 * state, read back, keeps the window's count (load_body); the refusal's
 * retry is the time to the end, in ms rounded up; a bad zone is refused. */
static void test_calendar_quota(void **state)
{
    (void)state;
    srv *s = &g_tc;
    const char *spec = "fixed-window 2/d tz=Europe/Paris";
    const unsigned long long day = 1729987200ULL * 1000000000ULL, /* 2024-10-27 00:00 UTC */
        t = day + 12ULL * 3600 * 1000000000ULL, end = day + 23ULL * 3600 * 1000000000ULL;
    long long r[4];
    ints(cmd(s, "SLUICE.ACQUIRE cal:k %s 1 AT %llu", spec, t), r, 4);
    assert_true(r[0] == 1 && r[1] == 1);
    ints(cmd(s, "SLUICE.ACQUIRE cal:k %s 1 AT %llu", spec, t + 1), r, 4);
    assert_true(r[0] == 1 && r[1] == 0);
    ints(cmd(s, "SLUICE.ACQUIRE cal:k %s 1 AT %llu", spec, t + 2), r, 4);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[2], (end - t - 2 + 999999) / 1000000); /* 11 h in ms */
    ints(cmd(s, "SLUICE.ACQUIRE cal:k %s 1 AT %llu", spec, end - 1), r, 4);
    assert_true(r[0] == 0 && r[2] == 1);
    ints(cmd(s, "SLUICE.ACQUIRE cal:k %s 2 AT %llu", spec, end), r, 4);
    assert_true(r[0] == 1 && r[1] == 0);
    expect_error(cmd(s, "SLUICE.ACQUIRE cal:k %s", "fixed-window 2/d tz=Mars/Base"), "unknown zone \"Mars/Base\"");
    expect_error(cmd(s, "SLUICE.ACQUIRE cal:k %s", "token-bucket 2/d tz=UTC"), "fixed-window only");
}

static void test_bad_input(void **state)
{
    (void)state;
    srv *s = &g_tc;
    long long r[4];
    ints(cmd(s, "SLUICE.ACQUIRE bad:k %s 2 AT %llu", "token-bucket 5/s", (unsigned long long)T0), r, 4);
    snap before, after;
    take(s, "bad:k", &before);
    assert_true(before.exists);

    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k"), "wrong number of arguments");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s 1 2", "token-bucket 5/s"), "wrong number of arguments");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s", "token-bucket 5/s burts=3"), "unknown option \"burts=3\"");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s", "token-bucket 0/s"), "bad limit");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s", ""), "empty spec");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %b", "token-bucket\0 5/s", (size_t)17), "NUL");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s -1", "token-bucket 5/s"), "permits");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s x", "token-bucket 5/s"), "permits");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s 1 AT -5", "token-bucket 5/s"),
                 "bad AT time \"-5\": expected a time in ns from 0 to 2^63-1");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s 1 AT 9223372036854775808", "token-bucket 5/s"), "bad AT time");
    /* numbers past 2^63 and 2^64: a clear message naming the token */
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s 18446744073709551616", "token-bucket 5/s"),
                 "bad permits \"18446744073709551616\": expected a whole number from 0 to 2^64-1");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s 1%s", "token-bucket 5/s", "00000000000000000000000000000000000000000000"),
                 "bad permits \"1000000000000000000000000000000000000000...\"");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s %b", "token-bucket 5/s", "1\r\n2", (size_t)4), "bad permits \"1??2\"");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 18446744073709551615 1"),
                 "bad count \"18446744073709551615\": expected a whole number from 1 to 10^12 (permits per period)");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 1000000000001 1"), "bad count");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 5 18446744073709551615"), "bad period \"18446744073709551615\"");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 18446744073709551615 5 1"), "bad max_burst \"18446744073709551615\"");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 5 1 18446744073709551616"), "bad quantity");
    /* another algorithm's state on the key: refused, the state stays */
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s", "leaky-bucket 5/s"), "another algorithm");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s", "fixed-window 5/s"), "another algorithm");
    expect_error(cmd(s, "SLUICE.PEEK bad:k %s", "sliding-log 5/s"), "another algorithm");
    /* windows whose ring would be unbounded */
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:w %s", "sliding-log 5000/s"), "4096");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:w %s", "sliding-wheel 10000/min"), "4096");
    ints(cmd(s, "SLUICE.ACQUIRE bad:w %s AT %llu", "sliding-wheel 10000/min slots=60", (unsigned long long)T0), r, 4);
    assert_int_equal(r[0], 1);
    /* THROTTLE's numbers */
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k -1 5 1"), "max_burst");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 0 1"), "count");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 5 0"), "period");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 5 1 -2"), "quantity");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 5 999999999999"), "bad period");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 9223372036854775806 1 3153600000"), "bad rate");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 5"), "wrong number of arguments");
    /* the readers' edges: no sign, no empty token, at most 20 digits (so
     * 21 with leading zeros are refused too), 2^64 refused above */
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s +1", "token-bucket 5/s"), "bad permits \"+1\"");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s %s", "token-bucket 5/s", ""), "bad permits \"\"");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s 000000000000000000001", "token-bucket 5/s"),
                 "bad permits \"000000000000000000001\"");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s 1 AT +5", "token-bucket 5/s"), "bad AT time \"+5\"");
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:k %s 1 AT %s", "token-bucket 5/s", ""), "bad AT time \"\"");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k +1 5 1"), "bad max_burst \"+1\"");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 %s 1", ""), "bad count \"\"");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:k 1 5 1 +1"), "bad quantity \"+1\"");
    take(s, "bad:k", &after);
    assert_same(&before, &after, "bad:k");
    /* leading zeros are the number: 20 digits for permits and the time */
    ints(cmd(s, "SLUICE.ACQUIRE bad:zeros %s 00000000000000000002 AT 0%llu", "token-bucket 5/s",
             (unsigned long long)T0), r, 4);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 3);
    long long c5[5];
    ints(cmd(s, "SLUICE.THROTTLE bad:zeros2 0000000000000000004 00000000000000000001 01 002 AT %llu",
             (unsigned long long)T0), c5, 5);
    assert_int_equal(c5[0], 0); /* not limited: 2 of a burst of 5 */
    assert_int_equal(c5[1], 5);
    assert_int_equal(c5[2], 3);
    /* redis-cell values (a TAT): an optional '-' then 1 to 19 digits,
     * within int64_t; leading zeros are the number; anything else is not
     * one, and THROTTLE refuses it as it refuses any string not a state */
    freeReplyObject(cmd(s, "SET bad:cell 0000000000000000005"));
    ints(cmd(s, "SLUICE.THROTTLE bad:cell 1 1 1 1 AT %llu", (unsigned long long)T0), c5, 5);
    assert_int_equal(c5[0], 0); /* TAT 5 ns is long past: a full bucket */
    assert_int_equal(c5[2], 1);
    static const char *const not_cell[] = {"+5", "-", "5 ", "9223372036854775808", "-9223372036854775808",
                                           "00000000000000000005", "18446744073709551621"};
    for (size_t i = 0; i < sizeof not_cell / sizeof not_cell[0]; i++) {
        freeReplyObject(cmd(s, "SET bad:cell %s", not_cell[i]));
        expect_error(cmd(s, "SLUICE.THROTTLE bad:cell 1 1 1 1 AT %llu", (unsigned long long)T0), "sluice");
        redisReply *v = cmd(s, "GET bad:cell");
        assert_string_equal(v->str, not_cell[i]); /* untouched */
        freeReplyObject(v);
    }
    /* 2^64-1 permits is a request like any other: refused, no wait helps */
    for (size_t i = 0; i < N_SPECS; i++) {
        ints(cmd(s, "SLUICE.ACQUIRE bad:max %s 18446744073709551615 AT %llu", g_specs[i].spec,
                 (unsigned long long)T0), r, 4);
        assert_int_equal(r[0], 0);
        assert_int_equal(r[2], -1);
        ints(cmd(s, "SLUICE.PEEK bad:max %s 18446744073709551615 AT %llu", g_specs[i].spec,
                 (unsigned long long)T0), r, 4);
        assert_int_equal(r[0], 0);
        assert_int_equal(cmd_int(s, "EXISTS bad:max"), 0);
    }
    long long t5[5];
    ints(cmd(s, "SLUICE.THROTTLE bad:max 1 5 1 18446744073709551615 AT %llu", (unsigned long long)T0), t5, 5);
    assert_int_equal(t5[0], 1);
    assert_int_equal(t5[3], -1);
    assert_int_equal(cmd_int(s, "EXISTS bad:max"), 0);

    /* keys that hold something else */
    freeReplyObject(cmd(s, "SET bad:str hello"));
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:str %s", "token-bucket 5/s"), "not a sluice state");
    expect_error(cmd(s, "SLUICE.RESET bad:str"), "not a sluice state");
    /* damaged states (the right spec id, impossible contents) */
    snap v;
    take(s, "bad:k", &v);
    assert_int_equal(v.n, 9 + strlen("token-bucket 5/s") + 16); /* header, spec, t_last, level */
    char dmg[128];
    memcpy(dmg, v.v, v.n);
    memset(dmg + v.n - 8, 0xff, 8); /* a deficit above the burst */
    freeReplyObject(cmd(s, "SET bad:dmg %b", dmg, v.n));
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:dmg %s", "token-bucket 5/s"), "damaged");
    freeReplyObject(cmd(s, "SET bad:dmg %b", v.v, v.n - 1)); /* truncated */
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:dmg %s", "token-bucket 5/s"), "damaged");
    ints(cmd(s, "SLUICE.ACQUIRE bad:wh %s 2 AT %llu", "sliding-wheel 10/s", (unsigned long long)T0), r, 4);
    take(s, "bad:wh", &v);
    /* header, spec, t_last, one slot: gap 0, 2 permits */
    assert_int_equal(v.n, 9 + strlen("sliding-wheel 10/s") + 8 + 2);
    const size_t g = v.n - 2; /* the gap; the permits follow */
    memcpy(dmg, v.v, v.n);
    dmg[g + 1] = 0; /* a slot that admitted nothing */
    freeReplyObject(cmd(s, "SET bad:dmg %b", dmg, v.n));
    expect_error(cmd(s, "SLUICE.PEEK bad:dmg %s", "sliding-wheel 10/s"), "damaged");
    dmg[g + 1] = 2, dmg[g] = (char)0x80; /* a varint cut short */
    freeReplyObject(cmd(s, "SET bad:dmg %b", dmg, v.n));
    expect_error(cmd(s, "SLUICE.PEEK bad:dmg %s", "sliding-wheel 10/s"), "damaged");
    dmg[g] = 100; /* a slot 100 ms back: inside the 1-s window */
    freeReplyObject(cmd(s, "SET bad:dmg %b", dmg, v.n));
    ints(cmd(s, "SLUICE.PEEK bad:dmg %s 9 AT %llu", "sliding-wheel 10/s", (unsigned long long)T0), r, 4);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[2], 900); /* the slot leaves the window 900 ms after T0 */
    dmg[g] = (char)0xe8, dmg[g + 1] = 0x07; /* 1000 ms back: outside the window */
    char longer[128];
    memcpy(longer, dmg, v.n);
    longer[v.n] = 2;
    freeReplyObject(cmd(s, "SET bad:dmg %b", longer, v.n + 1));
    expect_error(cmd(s, "SLUICE.PEEK bad:dmg %s", "sliding-wheel 10/s"), "damaged");
    dmg[9] ^= 1; /* the stored spec no longer matches its id */
    freeReplyObject(cmd(s, "SET bad:dmg2 %b", dmg, v.n));
    expect_error(cmd(s, "SLUICE.PEEK bad:dmg2 %s", "sliding-wheel 20/s"), "damaged");
    /* after every refusal the value is untouched */
    take(s, "bad:dmg", &after);
    assert_int_equal(after.n, v.n + 1);
    assert_memory_equal(after.v, longer, v.n + 1);

    freeReplyObject(cmd(s, "RPUSH bad:list x"));
    expect_error(cmd(s, "SLUICE.ACQUIRE bad:list %s", "token-bucket 5/s"), "WRONGTYPE");
    expect_error(cmd(s, "SLUICE.PEEK bad:list %s", "token-bucket 5/s"), "WRONGTYPE");
    expect_error(cmd(s, "SLUICE.THROTTLE bad:list 1 1 1"), "WRONGTYPE");
    expect_error(cmd(s, "SLUICE.RESET bad:list"), "WRONGTYPE");
    assert_int_equal(cmd_int(s, "LLEN bad:list"), 1);
    expect_error(cmd(s, "SLUICE.RESET"), "wrong number of arguments");
    assert_int_equal(cmd_int(s, "SLUICE.RESET bad:k"), 1);
    assert_int_equal(cmd_int(s, "SLUICE.RESET bad:k"), 0);
    assert_int_equal(cmd_int(s, "EXISTS bad:k"), 0);
}

/* Values of every algorithm with random bytes changed, cut or appended:
 * each request gets a decision or an error, and the server lives on. */
static void test_mutated_states(void **state)
{
    (void)state;
    srv *s = &g_tc;
    uint64_t rng = tu_env_seed() ^ 0x6d757461;
    long long r[4];
    int errors = 0, answers = 0;
    for (size_t i = 0; i < N_SPECS; i++) {
        uint64_t t = T0;
        for (int k = 0; k < 8; k++) {
            t += step(&rng, &g_specs[i].p);
            ints(cmd(s, "SLUICE.ACQUIRE mut:src %s %llu AT %llu", g_specs[i].spec,
                     (unsigned long long)(1 + tu_splitmix64_below(&rng, 2)), (unsigned long long)t), r, 4);
        }
        snap v;
        take(s, "mut:src", &v);
        assert_true(v.exists);
        for (int k = 0; k < 60; k++) {
            char m[sizeof v.v + 8];
            size_t n = v.n;
            memcpy(m, v.v, n);
            const int flips = 1 + (int)tu_splitmix64_below(&rng, 3);
            for (int f = 0; f < flips; f++) {
                const size_t at = tu_splitmix64_below(&rng, n);
                switch (tu_splitmix64_below(&rng, 4)) {
                case 0: m[at] ^= (char)(1u << tu_splitmix64_below(&rng, 8)); break;
                case 1: m[at] = (char)tu_splitmix64_below(&rng, 256); break;
                case 2: n = at + 1; break; /* cut */
                default: m[n] = (char)tu_splitmix64_below(&rng, 256), n++; break; /* append */
                }
                if (n > sizeof v.v) n = sizeof v.v;
            }
            freeReplyObject(cmd(s, "SET mut:k %b", m, n));
            redisReply *x = cmd(s, "SLUICE.ACQUIRE mut:k %s %llu AT %llu", g_specs[i].spec,
                                (unsigned long long)tu_splitmix64_below(&rng, 3),
                                (unsigned long long)(t + tu_splitmix64_below(&rng, 2 * SEC)));
            if (x->type == REDIS_REPLY_ERROR) errors++;
            else if (x->type == REDIS_REPLY_ARRAY && x->elements == 4) answers++;
            else fail_msg("%s: unexpected reply type %d", g_specs[i].spec, x->type);
            freeReplyObject(x);
        }
        assert_int_equal(cmd_int(s, "SLUICE.RESET mut:src"), 1);
    }
    /* strings near redis-cell's TATs (digits, signs, blanks, 1-24 bytes):
     * THROTTLE decides or refuses with an error, the others refuse */
    int cells = 0;
    for (int k = 0; k < 300; k++) {
        static const char alphabet[] = "0123456789012345678901234567890123456789-+ x";
        char m[32];
        const size_t n = 1 + tu_splitmix64_below(&rng, 24);
        for (size_t i = 0; i < n; i++) m[i] = alphabet[tu_splitmix64_below(&rng, sizeof alphabet - 1)];
        freeReplyObject(cmd(s, "SET mut:cell %b", m, n));
        redisReply *x = cmd(s, "SLUICE.THROTTLE mut:cell 3 1 1 %llu AT %llu",
                            (unsigned long long)tu_splitmix64_below(&rng, 6),
                            (unsigned long long)(T0 + tu_splitmix64_below(&rng, 10 * SEC)));
        if (x->type == REDIS_REPLY_ARRAY && x->elements == 5) cells++;
        else if (x->type != REDIS_REPLY_ERROR) fail_msg("THROTTLE on \"%.*s\": reply type %d", (int)n, m, x->type);
        freeReplyObject(x);
        x = cmd(s, "SLUICE.ACQUIRE mut:cell %s", "token-bucket 1/s burst=4");
        if (x->type != REDIS_REPLY_ERROR && !(x->type == REDIS_REPLY_ARRAY && x->elements == 4))
            fail_msg("ACQUIRE on \"%.*s\": reply type %d", (int)n, m, x->type);
        freeReplyObject(x);
    }
    assert_true(cells > 0);
    /* the windows' mark on a value of another algorithm: refused */
    long long r2[4];
    ints(cmd(s, "SLUICE.ACQUIRE mut:flag %s AT %llu", "token-bucket 5/s", (unsigned long long)T0), r2, 4);
    snap f;
    take(s, "mut:flag", &f);
    f.v[3] = (char)(f.v[3] | 0x80);
    freeReplyObject(cmd(s, "SET mut:flag %b", f.v, f.n));
    expect_error(cmd(s, "SLUICE.ACQUIRE mut:flag %s AT %llu", "token-bucket 5/s", (unsigned long long)T0),
                 "not a sluice state");
    redisReply *x = cmd(s, "PING");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    assert_true(errors > 0);
    assert_true(answers > 0);
}

/* A key named AT (any case) is a key: the clock's keyword is read only
 * after the spec (THROTTLE: after the period). */
static void test_key_named_at(void **state)
{
    (void)state;
    srv *s = &g_tc;
    long long r[5];
    static const char *const names[] = {"AT", "at", "At"};
    for (size_t i = 0; i < 3; i++) {
        freeReplyObject(cmd(s, "DEL %s", names[i]));
        ints(cmd(s, "SLUICE.PEEK %s %s", names[i], "token-bucket 5/min"), r, 4);
        assert_int_equal(r[0], 1);
        assert_int_equal(r[1], 4);
        ints(cmd(s, "SLUICE.ACQUIRE %s %s", names[i], "token-bucket 5/min"), r, 4);
        assert_int_equal(r[0], 1);
        assert_int_equal(cmd_int(s, "EXISTS %s", names[i]), 1);
        ints(cmd(s, "SLUICE.ACQUIRE %s %s 2", names[i], "token-bucket 5/min"), r, 4);
        assert_int_equal(r[1], 2);
        ints(cmd(s, "SLUICE.THROTTLE %s 4 5 60", names[i]), r, 5); /* the same bucket */
        assert_int_equal(r[2], 1);
        assert_int_equal(cmd_int(s, "SLUICE.RESET %s", names[i]), 1);
        /* with the clock's keyword as well */
        ints(cmd(s, "SLUICE.ACQUIRE %s %s AT %llu", names[i], "fixed-window 2/s", (unsigned long long)T0), r, 4);
        assert_int_equal(r[1], 1);
        ints(cmd(s, "SLUICE.ACQUIRE %s %s 1 at %llu", names[i], "fixed-window 2/s", (unsigned long long)T0), r, 4);
        assert_int_equal(r[1], 0);
        ints(cmd(s, "SLUICE.PEEK %s %s 1 AT %llu", names[i], "fixed-window 2/s", (unsigned long long)(T0 + SEC)), r, 4);
        assert_int_equal(r[1], 1);
        ints(cmd(s, "SLUICE.THROTTLE %s%s 1 1 1 AT %llu", names[i], "x", (unsigned long long)T0), r, 5);
        assert_int_equal(r[2], 1);
        ints(cmd(s, "SLUICE.THROTTLE %s%s 1 1 1 1 AT %llu", names[i], "x", (unsigned long long)T0), r, 5);
        assert_int_equal(r[2], 0);
        assert_int_equal(cmd_int(s, "SLUICE.RESET %s", names[i]), 1);
    }
    /* the keyword where a spec or a permit count stands is that argument */
    expect_error(cmd(s, "SLUICE.ACQUIRE k AT %llu", (unsigned long long)T0), "bad spec");
    expect_error(cmd(s, "SLUICE.ACQUIRE k %s AT", "fixed-window 2/s"), "permits");
}

/* WATCH key, `what` from another client, then MULTI/PING/EXEC: whether
 * the transaction went through (its WATCH held). */
static bool watch_holds(srv *s, redisContext *other, const char *key, const char *what)
{
    freeReplyObject(cmd(s, "WATCH %s", key));
    redisReply *o = redisCommand(other, what, key);
    assert_non_null(o);
    freeReplyObject(o);
    freeReplyObject(cmd(s, "MULTI"));
    freeReplyObject(cmd(s, "PING"));
    redisReply *x = cmd(s, "EXEC");
    const bool held = x->type == REDIS_REPLY_ARRAY;
    assert_true(held || x->type == REDIS_REPLY_NIL);
    freeReplyObject(x);
    return held;
}

/* SLUICE.RESET touches a key only when it deletes a state: another
 * client's WATCH holds through a RESET of a missing key, of a string that
 * is not a state and of a key of another type, and breaks when a state
 * is deleted. */
static void test_reset_watch(void **state)
{
    (void)state;
    srv *s = &g_tc;
    redisContext *other = srv_connect(s->port);
    assert_non_null(other);
    freeReplyObject(cmd(s, "DEL rw:none"));
    assert_true(watch_holds(s, other, "rw:none", "SLUICE.RESET %s"));
    freeReplyObject(cmd(s, "SET rw:str hello"));
    assert_true(watch_holds(s, other, "rw:str", "SLUICE.RESET %s"));
    freeReplyObject(cmd(s, "RPUSH rw:list x"));
    assert_true(watch_holds(s, other, "rw:list", "SLUICE.RESET %s"));
    assert_true(watch_holds(s, other, "rw:list", "SLUICE.ACQUIRE %s fixed-window 1/s"));
    snap v;
    take(s, "rw:str", &v);
    assert_true(v.exists && v.n == 5);
    long long r[4];
    ints(cmd(s, "SLUICE.ACQUIRE rw:k %s AT %llu", "fixed-window 1/s", (unsigned long long)T0), r, 4);
    assert_false(watch_holds(s, other, "rw:k", "SLUICE.RESET %s"));
    assert_int_equal(cmd_int(s, "EXISTS rw:k"), 0);
    redisFree(other);
}

/* A spec's length is checked before anything reads it: a spec of 64 MB
 * costs the server no more than a short one (its own time per call, in
 * INFO commandstats; hashing 64 MB took 0.38 s before), and the error says
 * so.  A spec of 256 bytes is parsed; of 257, refused for its length. */
static void test_long_spec(void **state)
{
    (void)state;
    srv *s = &g_tc;
    const size_t big = (size_t)64 << 20;
    char *spec = malloc(big);
    assert_non_null(spec);
    memset(spec, 'x', big);
    memcpy(spec, "token-bucket 5/s", 16);
    freeReplyObject(cmd(s, "CONFIG RESETSTAT"));
    expect_error(cmd(s, "SLUICE.ACQUIRE long:k %b", spec, big), "the spec is 67108864 bytes, more than the module's 256");
    expect_error(cmd(s, "SLUICE.PEEK long:k %b", spec, big), "67108864 bytes");
    free(spec);
    redisReply *r = cmd(s, "INFO commandstats");
    const char *c = strstr(r->str, "cmdstat_sluice.acquire:");
    assert_non_null(c);
    c = strstr(c, "usec=");
    assert_non_null(c);
    const long usec = atol(c + 5);
    freeReplyObject(r);
    if (usec > 20000) fail_msg("a 64-MB spec took the server %ld us", usec);
    char s256[257];
    memset(s256, ' ', 256);
    memcpy(s256, "token-bucket 5/s", 16);
    s256[256] = 'x';
    expect_error(cmd(s, "SLUICE.ACQUIRE long:k %b", s256, (size_t)257), "257 bytes, more than the module's 256");
    long long x[4];
    ints(cmd(s, "SLUICE.PEEK long:k %b", s256, (size_t)256), x, 4); /* parsed: trailing blanks */
    assert_int_equal(x[1], 4);
    expect_error(cmd(s, "SLUICE.ACQUIRE long:k %b", "token-bucket 5/s\0", (size_t)17), "NUL byte (at byte 16)");
    assert_int_equal(cmd_int(s, "EXISTS long:k"), 0);
}

/* ---- a change of spec ------------------------------------------------- */

/* A key keeps its admissions when its spec changes within an algorithm
 * (docs/decisions.md 3.8), so THROTTLE's parameters can change on the fly as
 * redis-cell's can.  Expected values worked out from the rule by hand. */
static void test_change_of_spec(void **state)
{
    (void)state;
    srv *s = &g_tc;
    long long r[5];
#define AT(d) (unsigned long long)(T0 + (d))
    /* token bucket 1/s, burst 5, emptied at T0 */
    ints(cmd(s, "SLUICE.THROTTLE cfg:thr 4 1 1 5 AT %llu", AT(0)), r, 5);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[2], 0);
    /* 2 s later under burst 10: the 2 tokens stay */
    ints(cmd(s, "SLUICE.THROTTLE cfg:thr 9 1 1 3 AT %llu", AT(2 * SEC)), r, 5);
    const long long a[5] = {1, 10, 2, 1, 8}; /* limited, 10, 2 left, 1 s, 8 s to full */
    assert_memory_equal(r, a, sizeof a);
    ints(cmd(s, "SLUICE.THROTTLE cfg:thr 9 1 1 2 AT %llu", AT(2 * SEC)), r, 5);
    const long long b[5] = {0, 10, 0, -1, 10};
    assert_memory_equal(r, b, sizeof b);
    /* 100 s later the bucket of 10 is full; under burst 3 it holds 3 */
    ints(cmd(s, "SLUICE.THROTTLE cfg:thr 2 1 1 0 AT %llu", AT(100 * SEC)), r, 5);
    const long long c[5] = {0, 3, 3, -1, 0};
    assert_memory_equal(r, c, sizeof c);
    ints(cmd(s, "SLUICE.THROTTLE cfg:thr 2 1 1 1 AT %llu", AT(100 * SEC)), r, 5);
    const long long d[5] = {0, 3, 2, -1, 1};
    assert_memory_equal(r, d, sizeof d);

    /* a faster rate from a quarter token: the next token in 3/4 / 4 s */
    ints(cmd(s, "SLUICE.ACQUIRE cfg:tb %s 2 AT %llu", "token-bucket 1/s burst=2", AT(0)), r, 4);
    assert_int_equal(r[0], 1);
    snap v0, v1;
    take(s, "cfg:tb", &v0);
    ints(cmd(s, "SLUICE.PEEK cfg:tb %s 1 AT %llu", "token-bucket 4/s burst=2", AT(250 * MS)), r, 4);
    take(s, "cfg:tb", &v1);
    assert_same(&v0, &v1, "cfg:tb"); /* a PEEK changes nothing */
    /* the change happens at the first request under the new spec, refused
     * or not, so that its retry_after holds */
    ints(cmd(s, "SLUICE.ACQUIRE cfg:tb %s 1 AT %llu", "token-bucket 4/s burst=2", AT(250 * MS)), r, 4);
    const long long e[4] = {0, 0, 188, 0}; /* 187.5 ms, rounded up */
    assert_memory_equal(r, e, sizeof e);
    take(s, "cfg:tb", &v1);
    assert_non_null(memmem(v1.v, v1.n, "token-bucket 4/s burst=2", 24));
    ints(cmd(s, "SLUICE.ACQUIRE cfg:tb %s 1 AT %llu", "token-bucket 4/s burst=2", AT(437500 * 1000 - 1)), r, 4);
    assert_int_equal(r[0], 0);
    ints(cmd(s, "SLUICE.ACQUIRE cfg:tb %s 1 AT %llu", "token-bucket 4/s burst=2", AT(437500 * 1000)), r, 4);
    assert_int_equal(r[0], 1);
    /* a change to a state at rest leaves no key */
    ints(cmd(s, "SLUICE.ACQUIRE cfg:tb %s 0 AT %llu", "token-bucket 1/s burst=1", AT(10 * SEC)), r, 4);
    assert_int_equal(cmd_int(s, "EXISTS cfg:tb"), 0);

    /* a fixed window keeps its count in the same window */
    ints(cmd(s, "SLUICE.ACQUIRE cfg:fw %s 5 AT %llu", "fixed-window 5/s", AT(0)), r, 4);
    ints(cmd(s, "SLUICE.ACQUIRE cfg:fw %s 1 AT %llu", "fixed-window 8/s", AT(1 * MS)), r, 4);
    const long long f[4] = {1, 2, 0, 0};
    assert_memory_equal(r, f, sizeof f);
    ints(cmd(s, "SLUICE.ACQUIRE cfg:fw %s 3 AT %llu", "fixed-window 8/s", AT(2 * MS)), r, 4);
    const long long g[4] = {0, 2, 998, 0};
    assert_memory_equal(r, g, sizeof g);

    /* a sliding wheel keeps its slots, but not under another slot width */
    ints(cmd(s, "SLUICE.ACQUIRE cfg:sw %s 6 AT %llu", "sliding-wheel 10/s", AT(0)), r, 4);
    ints(cmd(s, "SLUICE.PEEK cfg:sw %s 6 AT %llu", "sliding-wheel 12/s", AT(1 * MS)), r, 4);
    const long long h[4] = {1, 0, 0, 0};
    assert_memory_equal(r, h, sizeof h);
    ints(cmd(s, "SLUICE.PEEK cfg:sw %s 7 AT %llu", "sliding-wheel 12/s", AT(1 * MS)), r, 4);
    const long long i[4] = {0, 6, 999, 0};
    assert_memory_equal(r, i, sizeof i);
    expect_error(cmd(s, "SLUICE.ACQUIRE cfg:sw %s 1 AT %llu", "sliding-wheel 10/s slots=10", AT(2 * MS)),
                 "cannot change the slot width");
    expect_error(cmd(s, "SLUICE.ACQUIRE cfg:sw %s 1 AT %llu", "sliding-log 10/s", AT(2 * MS)),
                 "another algorithm");
#undef AT
}

/* A window changed to a shorter one by a request that admits nothing (a
 * probe, a refusal) is stored without the entries that left the new
 * window: read back, it is a state like any other, never "damaged" (the
 * issue's script, on the test clock). */
static void test_change_to_shorter_window(void **state)
{
    (void)state;
    srv *s = &g_tc;
    long long r[4];
#define AT(d) (unsigned long long)(T0 + (d))
    static const char *const probe[][2] = {
        {"sliding-log 4096/10s", "sliding-log 100/s"},
        {"sliding-wheel 4096/10s slots=1000", "sliding-wheel 100/s slots=100"},
    };
    for (size_t i = 0; i < 2; i++) {
        const char *key = i ? "short:w" : "short:y";
        ints(cmd(s, "SLUICE.ACQUIRE %s %s 5 AT %llu", key, probe[i][0], AT(0)), r, 4);
        ints(cmd(s, "SLUICE.ACQUIRE %s %s 1 AT %llu", key, probe[i][0], AT(1200 * MS)), r, 4);
        assert_int_equal(r[0], 1);
        ints(cmd(s, "SLUICE.ACQUIRE %s %s 0 AT %llu", key, probe[i][1], AT(1200 * MS)), r, 4);
        const long long a[4] = {1, 99, 0, 0}; /* the 5 left the 1-s window */
        assert_memory_equal(r, a, sizeof a);
        ints(cmd(s, "SLUICE.PEEK %s %s 1 AT %llu", key, probe[i][1], AT(1200 * MS)), r, 4);
        const long long b[4] = {1, 98, 0, 0};
        assert_memory_equal(r, b, sizeof b);
        ints(cmd(s, "SLUICE.ACQUIRE %s %s 99 AT %llu", key, probe[i][1], AT(1300 * MS)), r, 4);
        assert_int_equal(r[0], 1);
        ints(cmd(s, "SLUICE.ACQUIRE %s %s 1 AT %llu", key, probe[i][1], AT(1300 * MS)), r, 4);
        const long long c[4] = {0, 0, 900, 0}; /* the 1 at 1.2 s leaves at 2.2 s */
        assert_memory_equal(r, c, sizeof c);
    }
    /* the change made by a refusal */
    ints(cmd(s, "SLUICE.ACQUIRE short:z %s 5 AT %llu", "sliding-log 6/10s", AT(0)), r, 4);
    ints(cmd(s, "SLUICE.ACQUIRE short:z %s 1 AT %llu", "sliding-log 6/10s", AT(1200 * MS)), r, 4);
    ints(cmd(s, "SLUICE.ACQUIRE short:z %s 2 AT %llu", "sliding-log 1/s", AT(1200 * MS)), r, 4);
    const long long d[4] = {0, 0, -1, 0};
    assert_memory_equal(r, d, sizeof d);
    ints(cmd(s, "SLUICE.ACQUIRE short:z %s 1 AT %llu", "sliding-log 1/s", AT(1500 * MS)), r, 4);
    const long long e[4] = {0, 0, 700, 0};
    assert_memory_equal(r, e, sizeof e);
    ints(cmd(s, "SLUICE.ACQUIRE short:z %s 1 AT %llu", "sliding-log 1/s", AT(2200 * MS)), r, 4);
    assert_int_equal(r[0], 1);

    /* admissions that left the ring count again in a longer window: 5/s
     * took 5 at 0 and 1 at 1.5 s; at 1.6 s under 5/10s the window holds 6.
     * The value keeps how many left (5): one entry at 0.5 s stands for them
     * (window_log.c, carry: at most 5 per second of the new window, at most
     * the 5 that left), so it refuses until 10.5 s (the rule: until 10 s) */
    ints(cmd(s, "SLUICE.ACQUIRE long:x %s 5 AT %llu", "sliding-log 5/s", AT(0)), r, 4);
    ints(cmd(s, "SLUICE.ACQUIRE long:x %s 1 AT %llu", "sliding-log 5/s", AT(1500 * MS)), r, 4);
    assert_int_equal(r[0], 1);
    ints(cmd(s, "SLUICE.ACQUIRE long:x %s 1 AT %llu", "sliding-log 5/10s", AT(1600 * MS)), r, 4);
    assert_int_equal(r[0], 0);
    assert_true(r[2] >= 8400);
    ints(cmd(s, "SLUICE.ACQUIRE long:x %s 1 AT %llu", "sliding-log 5/10s", AT(10400 * MS)), r, 4);
    assert_int_equal(r[0], 0);
    ints(cmd(s, "SLUICE.ACQUIRE long:x %s 4 AT %llu", "sliding-log 5/10s", AT(10500 * MS)), r, 4);
    assert_int_equal(r[0], 1);
    /* the same history under 50/10s: 6 in the window, room for 44 exactly */
    ints(cmd(s, "SLUICE.ACQUIRE long:y %s 5 AT %llu", "sliding-log 5/s", AT(0)), r, 4);
    ints(cmd(s, "SLUICE.ACQUIRE long:y %s 1 AT %llu", "sliding-log 5/s", AT(1500 * MS)), r, 4);
    ints(cmd(s, "SLUICE.PEEK long:y %s 44 AT %llu", "sliding-log 50/10s", AT(1600 * MS)), r, 4);
    const long long f[4] = {1, 0, 0, 0};
    assert_memory_equal(r, f, sizeof f);
    ints(cmd(s, "SLUICE.PEEK long:y %s 45 AT %llu", "sliding-log 50/10s", AT(1600 * MS)), r, 4);
    const long long g[4] = {0, 44, 8900, 0};
    assert_memory_equal(r, g, sizeof g);
#undef AT
}

/* The fuzzer's input (tests/redis_module/corpus/fuzz_module/crash-ee8693...):
 * a sliding-log 7/s value whose ring held 2^63-1 permits above 20 that had
 * left it.  Read under 4096/10s, the change carried the 20 back into the
 * ring (window_log.c, carry) and stored a ring of 2^63+19 from a base of 0,
 * which the module then refused as damaged.  The retired count is part of
 * the total: base + ring above 2^63 is refused at once, unchanged; at 2^63
 * exactly it is read, changed, and read back as a decision. */
static void test_retired_total(void **state)
{
    (void)state;
    srv *s = &g_tc;
    static const unsigned char head[] = {
        'S', 'L', 1, 0x81, 0x59, 0x3b, 0xf0, 0xf1, 15, /* version, retired sliding-log, id */
        's', 'l', 'i', 'd', 'i', 'n', 'g', '-', 'l', 'o', 'g', ' ', '7', '/', 's',
        0x00, 0x2f, 0x92, 0x8f, 0xfe, 0x00, 0x00, 0x66, /* t_last 0x660000fe8f922f00 */
        20,                                             /* 20 left the ring */
        0xa7, 0xf1, 0x00, /* one slot 14503 ns before t_last, */
    };
    const unsigned long long t_last = 0x660000fe8f922f00ULL;
    unsigned char v[sizeof head + 10];
    memcpy(v, head, sizeof head);
    memset(v + sizeof head, 0xff, 9), v[sizeof head + 9] = 0; /* of 2^63-1 permits */
    freeReplyObject(cmd(s, "SET tot:over %b", v, sizeof v));
    snap before, after;
    take(s, "tot:over", &before);
    expect_error(cmd(s, "SLUICE.ACQUIRE tot:over %s 3 AT %llu", "sliding-log 4096/10s", t_last), "damaged");
    expect_error(cmd(s, "SLUICE.PEEK tot:over %s 0 AT %llu", "sliding-log 7/s", t_last), "damaged");
    take(s, "tot:over", &after);
    assert_same(&before, &after, "tot:over");

    v[sizeof head] = (unsigned char)0xec; /* 2^63-20 permits: 2^63 in all */
    freeReplyObject(cmd(s, "SET tot:full %b", v, sizeof v));
    long long r[4];
    ints(cmd(s, "SLUICE.PEEK tot:full %s 1 AT %llu", "sliding-log 7/s", t_last), r, 4);
    assert_int_equal(r[0], 0);
    ints(cmd(s, "SLUICE.ACQUIRE tot:full %s 3 AT %llu", "sliding-log 4096/10s", t_last), r, 4);
    assert_int_equal(r[0], 0);
    take(s, "tot:full", &after);
    assert_true(after.n != sizeof v || memcmp(after.v, v, sizeof v) != 0); /* the change was stored */
    /* read back: the slot of 2^63-20 leaves the 10-s window 10 s - 14503 ns
     * after t_last, the 20 carried to t_last - 1 s before it */
    ints(cmd(s, "SLUICE.PEEK tot:full %s 1 AT %llu", "sliding-log 4096/10s", t_last), r, 4);
    const long long a[3] = {0, 0, 10000};
    assert_memory_equal(r, a, sizeof a);
    ints(cmd(s, "SLUICE.ACQUIRE tot:full %s 4096 AT %llu", "sliding-log 4096/10s", t_last + 10 * SEC), r, 4);
    assert_int_equal(r[0], 1);
}

/* A window's value with the carry's history (HIST_FLAG, sluice_module.c):
 * sliding-log 2/s, 2 permits at t_last, 6 that left the ring, and the
 * history of a chain that admitted under LIMIT 6 with 1-s windows (coded:
 * 6, and 476 * 2^21 = 998244352 ns, rounded down).  Changed to 20/3s at
 * t_last, the 6 that left stand in as min(6 * ceil(2 s / 998244352 ns),
 * 6) = 6 at t_last - 1 s: 20 - 2 - 6 = 12 left.  Without the history, the
 * old spec's 2 per 1 s: min(2 * 2, 6) = 4, 14 left.  A history of 0, of
 * 2^31 or on another algorithm is refused, the value left alone. */
static void test_carry_history_value(void **state)
{
    (void)state;
    srv *s = &g_tc;
    unsigned char v[] = {
        'S', 'L', 1, 0xc1, 0x4a, 0xab, 0xb8, 0xe9, 15, /* retired+history sliding-log, id */
        's', 'l', 'i', 'd', 'i', 'n', 'g', '-', 'l', 'o', 'g', ' ', '2', '/', 's',
        0x00, 0x2f, 0x92, 0x8f, 0xfe, 0x00, 0x00, 0x66, /* t_last */
        6,                                              /* 6 left the ring */
        0x86, 0x80, 0xb8, 0xaf, 0x01,                   /* history 6 | 11228 << 15 */
        0x00, 0x02,                                     /* 2 permits at slot(t_last) */
    };
    const unsigned long long t_last = 0x660000fe8f922f00ULL;
    long long r[4];
    freeReplyObject(cmd(s, "SET hist:ok %b", v, sizeof v));
    ints(cmd(s, "SLUICE.PEEK hist:ok %s 0 AT %llu", "sliding-log 20/3s", t_last), r, 4);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 12);
    /* the same value without the history */
    unsigned char w[sizeof v - 5];
    memcpy(w, v, 33);
    memcpy(w + 33, v + 38, sizeof v - 38);
    w[3] = 0x81;
    freeReplyObject(cmd(s, "SET hist:none %b", w, sizeof w));
    ints(cmd(s, "SLUICE.PEEK hist:none %s 0 AT %llu", "sliding-log 20/3s", t_last), r, 4);
    assert_int_equal(r[1], 14);
    /* bad histories */
    static const struct {
        unsigned char b[5], alg;
        const char *why;
    } bad[] = {
        {{0x00, 0x80, 0x80, 0x80, 0x00}, 0xc1, "damaged"}, /* 0, then a cut entry */
        {{0x80, 0x80, 0x80, 0x80, 0x08}, 0xc1, "damaged"}, /* 2^31 */
        {{0x86, 0x80, 0xb8, 0xaf, 0x01}, 0x40, "not a sluice state"}, /* fixed-window */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(v + 33, bad[i].b, 5);
        v[3] = bad[i].alg;
        freeReplyObject(cmd(s, "SET hist:bad %b", v, sizeof v));
        snap before, after;
        take(s, "hist:bad", &before);
        expect_error(cmd(s, "SLUICE.ACQUIRE hist:bad %s 1 AT %llu", "sliding-log 2/s", t_last),
                     bad[i].why);
        take(s, "hist:bad", &after);
        assert_same(&before, &after, "hist:bad");
    }
}

/* Random chains of spec changes on one key, against the reference model
 * changed at the same instants (ref_model_reconfigure, written from
 * docs/decisions.md 3.8).  Every reply is a decision, never an error ("damaged"
 * above all), but for the changes the rule refuses (another algorithm,
 * another slot width: an error, the value unchanged byte for byte).  Where
 * the module is exact -- windows that never grow, sliding-approx keeping its
 * PERIOD, buckets whose new rate in lowest terms has a PERIOD that is a
 * multiple of the old one -- every reply equals the model's.  Half the
 * windows' chains change LIMIT and window freely (shorter, longer, back):
 * where a window reaches back to admissions that left the ring, the module
 * stands in for them with the core's bound (window_log.c, carry: the
 * largest LIMIT per smallest window of the chain, kept in the value), so
 * each admission must be one the model allows, and is then made on the
 * model too; once the window has passed every slot the ring may have
 * forgotten (at or before slot(T) - N_old, the largest over the changes
 * at T), every reply equals the model's again.  A key the module dropped
 * at rest restarts the model. */
typedef struct chain_spec {
    char text[96];
    ref_params p;
} chain_spec;

/* The next spec of a chain.  Windows: `grow` 0, a window no longer than
 * the last; 1, any window. */
static void chain_next(uint64_t *rng, ref_alg a, bool nodelay, const chain_spec *from, chain_spec *to,
                       int grow)
{
    static const uint64_t coprime[] = {1, 3, 7, 9, 11, 13}; /* with every W below */
    uint64_t W = from ? from->p.period_ns / SEC : 1 + tu_splitmix64_below(rng, 4);
    uint64_t L = 1 + tu_splitmix64_below(rng, 8), C = 1 + tu_splitmix64_below(rng, 8);
    static const uint64_t wins[] = {1, 2, 3, 5};
    memset(&to->p, 0, sizeof to->p);
    to->p.alg = a;
    to->p.literal = true; /* every event kept: a window may grow back */
    switch (a) {
    case REF_FIXED_WINDOW:
        W = wins[tu_splitmix64_below(rng, 4)];
        snprintf(to->text, sizeof to->text, "%s %llu/%llus", ref_alg_name(a), (unsigned long long)L,
                 (unsigned long long)W);
        break;
    case REF_SLIDING_LOG:
        do W = wins[tu_splitmix64_below(rng, 4)];
        while (from && !grow && W > from->p.period_ns / SEC);
        snprintf(to->text, sizeof to->text, "%s %llu/%llus", ref_alg_name(a), (unsigned long long)L,
                 (unsigned long long)W);
        break;
    case REF_SLIDING_WHEEL: /* slots of 100 ms */
        do W = wins[tu_splitmix64_below(rng, 4)];
        while (from && !grow && W > from->p.period_ns / SEC);
        to->p.slots = W * 10;
        snprintf(to->text, sizeof to->text, "sliding-wheel %llu/%llus slots=%llu", (unsigned long long)L,
                 (unsigned long long)W, (unsigned long long)to->p.slots);
        break;
    case REF_SLIDING_APPROX: /* the same PERIOD */
        snprintf(to->text, sizeof to->text, "sliding-approx %llu/%llus", (unsigned long long)L,
                 (unsigned long long)W);
        break;
    default: /* a bucket: a PERIOD that is a multiple of the old one */
        if (from) W *= 1 + tu_splitmix64_below(rng, 2);
        L = coprime[tu_splitmix64_below(rng, 6)];
        to->p.capacity = C;
        snprintf(to->text, sizeof to->text, "%s %llu/%llus %s=%llu%s", ref_alg_name(a), (unsigned long long)L,
                 (unsigned long long)W, a == REF_TOKEN_BUCKET ? "burst" : "capacity", (unsigned long long)C,
                 nodelay ? " nodelay" : "");
        to->p.nodelay = nodelay;
        break;
    }
    to->p.limit = L;
    to->p.period_ns = W * SEC;
}

static void test_change_chains(void **state)
{
    (void)state;
    srv *s = &g_tc;
    uint64_t rng = tu_env_seed() ^ 0xc4a1;
    const int chains = 6, steps = 150;
    int exact_steps = 0, safe_steps = 0, refused_changes = 0;
    for (int v = 0; v < 7; v++) {
        const ref_alg a = v == 6 ? REF_LEAKY_BUCKET : (ref_alg)v;
        const bool nodelay = v == 6;
        for (int c = 0; c < chains; c++) {
            char key[32];
            snprintf(key, sizeof key, "chain:%d:%d", v, c);
            chain_spec cur;
            chain_next(&rng, a, nodelay, NULL, &cur, 0);
            const bool windows = a == REF_SLIDING_LOG || a == REF_SLIDING_WHEEL;
            const bool growth = windows && (c & 1); /* the chain's kind */
            ref_model *m = ref_model_new(&cur.p);
            assert_non_null(m);
            const uint64_t tick = a == REF_SLIDING_WHEEL ? SEC / 10 : 1;
            bool forgot = false; /* the ring may have forgotten slots <= F */
            uint64_t F = 0;
            uint64_t t = T0 + tu_splitmix64_below(&rng, SEC);
            for (int k = 0; k < steps; k++) {
                const uint64_t W = cur.p.period_ns;
                switch (tu_splitmix64_below(&rng, 4)) {
                case 0: break;
                case 1: t += tu_splitmix64_below(&rng, W / cur.p.limit + 1); break;
                case 2: t += tu_splitmix64_below(&rng, W / 4 + 1); break;
                default: t += tu_splitmix64_below(&rng, 2 * W); break;
                }
                if (tu_splitmix64_below(&rng, 12) == 0) { /* a change the rule refuses */
                    const bool wheel = a == REF_SLIDING_WHEEL && tu_splitmix64_below(&rng, 2);
                    const char *bad = wheel ? "sliding-wheel 4/s slots=5"
                                     : a == REF_TOKEN_BUCKET ? "leaky-bucket 4/s" : "token-bucket 4/s";
                    snap before, after;
                    take(s, key, &before);
                    redisReply *x = cmd(s, "SLUICE.ACQUIRE %s %s 1 AT %llu", key, bad, (unsigned long long)t);
                    if (before.exists) {
                        expect_error(x, wheel ? "slot width" : "another algorithm");
                        refused_changes++;
                    } else {
                        freeReplyObject(x); /* no key: a fresh one under `bad` */
                        freeReplyObject(cmd(s, "DEL %s", key));
                    }
                    take(s, key, &after);
                    assert_same(&before, &after, key);
                    continue;
                }
                if (tu_splitmix64_below(&rng, 8) == 0) { /* the change */
                    chain_spec nx;
                    chain_next(&rng, a, nodelay, &cur, &nx, growth);
                    assert_true(ref_model_reconfigure(m, &nx.p, t));
                    const uint64_t sc = ref_model_latest(m) / tick, n_old = W / tick;
                    if (windows && sc >= n_old) {
                        if (!forgot || sc - n_old > F) F = sc - n_old;
                        forgot = true;
                    }
                    cur = nx;
                }
                const uint64_t n_cur = cur.p.period_ns / tick, latest = ref_model_latest(m);
                const uint64_t sl = (t > latest ? t : latest) / tick; /* the clamped slot */
                const bool exact = !forgot || (sl >= n_cur && sl - n_cur >= F);
                uint64_t p = tu_splitmix64_below(&rng, 4);
                if (tu_splitmix64_below(&rng, 10) == 0) p = ref_model_max_grant(m) + 1;
                if (tu_splitmix64_below(&rng, 6) == 0) { /* a PEEK changes nothing */
                    long long r[4];
                    ints(cmd(s, "SLUICE.PEEK %s %s %llu AT %llu", key, cur.text, (unsigned long long)p,
                             (unsigned long long)t), r, 4);
                    const bool w = ref_model_would_allow(m, p, t);
                    if (exact ? r[0] != w : r[0] && !w)
                        fail_msg("%s: PEEK %llu at T0+%llu: got %lld, the model %d", cur.text,
                                 (unsigned long long)p, (unsigned long long)(t - T0), r[0], w);
                }
                long long got[4];
                redisReply *x = cmd(s, "SLUICE.ACQUIRE %s %s %llu AT %llu", key, cur.text, (unsigned long long)p,
                                    (unsigned long long)t);
                if (x->type == REDIS_REPLY_ERROR)
                    fail_msg("%s, chain %d step %d: ACQUIRE %llu at T0+%llu: %s", cur.text, c, k,
                             (unsigned long long)p, (unsigned long long)(t - T0), x->str);
                ints(x, got, 4);
                if (exact) {
                    ref_result e;
                    long long want[4];
                    ref_model_decide(m, p, t, &e);
                    expected_reply(&e, want);
                    if (memcmp(got, want, sizeof want) != 0)
                        fail_msg("%s, chain %d step %d: ACQUIRE %llu at T0+%llu: got %lld %lld %lld %lld, want %lld %lld %lld %lld",
                                 cur.text, c, k, (unsigned long long)p, (unsigned long long)(t - T0), got[0],
                                 got[1], got[2], got[3], want[0], want[1], want[2], want[3]);
                    exact_steps++;
                } else {
                    if (got[0] && p > 0) {
                        if (!ref_model_would_allow(m, p, t))
                            fail_msg("%s, chain %d step %d: admitted %llu at T0+%llu against the rule",
                                     cur.text, c, k, (unsigned long long)p, (unsigned long long)(t - T0));
                        assert_true(ref_model_decide(m, p, t, NULL));
                    }
                    safe_steps++;
                }
                if (!cmd_int(s, "EXISTS %s", key)) { /* dropped at rest: a fresh start */
                    ref_model_free(m);
                    m = ref_model_new(&cur.p);
                    assert_non_null(m);
                    forgot = false;
                }
            }
            ref_model_free(m);
        }
    }
    assert_true(exact_steps > 1000);
    assert_true(safe_steps > 50);
    assert_true(refused_changes > 10);
}

/* ---- moving from redis-cell -------------------------------------------- */

/* redis-cell's CL.THROTTLE, as its source states the rule (GCRA on a TAT in
 * ns since the epoch; a missing or past TAT counts as now): with emission
 * interval T and tolerance tau = (max_burst + 1) * T, a request for q is
 * limited iff max(TAT, now) + q*T - tau > now; else TAT becomes
 * max(TAT, now) + q*T.  Written here from that text, for whole-ns T.
 * One exception, by the contract: q = 0 is a probe, always allowed (redis-cell
 * limits it only when TAT - now exceeds tau, which it never writes itself:
 * a TAT it stores is at most its now + tau). */
static bool cell_limited(int64_t *tat, int64_t now, int64_t T, int64_t B, int64_t q)
{
    if (q == 0) return false;
    const int64_t base = *tat > now ? *tat : now;
    const int64_t next = base + q * T;
    if (next - B * T > now) return true;
    *tat = next;
    return false;
}

/* Keys holding redis-cell's values (SET key TAT PX ttl, as redis-cell
 * writes them) are read by SLUICE.THROTTLE as its state: every decision
 * equals redis-cell's, from the first request on, through the admission
 * that replaces the value with a sluice state and after it. */
static void test_from_redis_cell(void **state)
{
    (void)state;
    srv *s = &g_tc;
    static const struct { int64_t burst, count, period; } cases[] = {
        {4, 1, 1}, {15, 30, 60}, {0, 8000, 1}, {9, 5, 10}, {2, 1000000000, 1}, {99, 100, 1},
    };
    uint64_t rng = tu_env_seed() ^ 0xce11;
    int limited = 0, passed = 0, migrated = 0, refused_first = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t B = cases[i].burst + 1, T = cases[i].period * (int64_t)SEC / cases[i].count;
        for (int k = 0; k < 8; k++) {
            char key[32];
            snprintf(key, sizeof key, "cell:%zu:%d", i, k);
            int64_t now = (int64_t)T0 + (int64_t)tu_splitmix64_below(&rng, SEC);
            /* a TAT from 2 bursts back to 1.25 bursts ahead (a clock that
             * stepped back can leave one beyond the burst) */
            int64_t tat = now - 2 * B * T + (int64_t)tu_splitmix64_below(&rng, (uint64_t)(3 * B * T + B * T / 4 + 1));
            /* the first key of each case: a TAT a whole burst ahead, asked
             * at once for at least a permit, so that a refusal read on
             * redis-cell's TAT itself is certain, whatever the seed */
            if (k == 0) tat = now + B * T;
            const long long ttl_ms = tat > now ? (tat - now) / (int64_t)MS + 1 : 1;
            freeReplyObject(cmd(s, "SET %s %lld PX %lld", key, (long long)tat, ttl_ms + 60000));
            bool carried = false;
            for (int step = 0; step < 40; step++) {
                const bool pinned = k == 0 && step == 0;
                switch (pinned ? 0 : tu_splitmix64_below(&rng, 3)) {
                case 0: break;
                case 1: now += (int64_t)tu_splitmix64_below(&rng, (uint64_t)(2 * T + 1)); break;
                default: now += (int64_t)tu_splitmix64_below(&rng, (uint64_t)(B * T + 1)); break;
                }
                const int64_t q = (int64_t)tu_splitmix64_below(&rng, (uint64_t)(B < 4 ? B + 2 : 4)) + pinned;
                snap before;
                take(s, key, &before);
                long long r[5];
                ints(cmd(s, "SLUICE.THROTTLE %s %lld %lld %lld %lld AT %lld", key, (long long)cases[i].burst,
                         (long long)cases[i].count, (long long)cases[i].period, (long long)q, (long long)now),
                     r, 5);
                const bool want = cell_limited(&tat, now, T, B, q);
                if (r[0] != want)
                    fail_msg("CL.THROTTLE %s %lld %lld %lld %lld at TAT - now = %lld ns: got limited %lld, redis-cell %d",
                             key, (long long)cases[i].burst, (long long)cases[i].count,
                             (long long)cases[i].period, (long long)q, (long long)(tat - now), r[0], want);
                assert_int_equal(r[1], B);
                limited += want;
                passed += !want;
                snap after;
                take(s, key, &after);
                if (want || q == 0) { /* a refusal or a probe writes nothing */
                    assert_same(&before, &after, key);
                    if (want && !carried) refused_first++;
                } else { /* an admission stores a sluice state */
                    assert_true(after.n > 2 && after.v[0] == 'S' && after.v[1] == 'L');
                    carried = true;
                }
            }
            migrated += carried;
        }
    }
    assert_true(limited > 50 && passed > 50);
    /* refusals read the TAT itself: at least the pinned one of each case */
    assert_true(migrated > 30 && refused_first >= 6);

    /* values like redis-cell's that are not well-formed: errors, unchanged */
    long long r[5];
    static const char *const bad[] = {"99999999999999999999", "+5", "", "12 ", "0x10", "-"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        freeReplyObject(cmd(s, "SET cell:bad %s", bad[i]));
        expect_error(cmd(s, "SLUICE.THROTTLE cell:bad 4 1 1 AT %llu", (unsigned long long)T0), "not a sluice state");
        redisReply *x = cmd(s, "GET cell:bad");
        assert_int_equal(x->len, strlen(bad[i]));
        freeReplyObject(x);
    }
    /* a TAT in the past, or negative: a full bucket */
    freeReplyObject(cmd(s, "SET cell:past -5"));
    ints(cmd(s, "SLUICE.THROTTLE cell:past 4 1 1 AT %llu", (unsigned long long)T0), r, 5);
    const long long full[5] = {0, 5, 4, -1, 1};
    assert_memory_equal(r, full, sizeof full);
    /* the end of time: refused, no wait overflows */
    freeReplyObject(cmd(s, "SET cell:end 9223372036854775807"));
    ints(cmd(s, "SLUICE.THROTTLE cell:end 4 1 1 AT %llu", (unsigned long long)T0), r, 5);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[3], (long long)((INT64_MAX - (int64_t)T0 - 4 * (int64_t)SEC + (int64_t)SEC - 1) / (int64_t)SEC));
    ints(cmd(s, "SLUICE.THROTTLE cell:end 4 1 1 AT 9223372036854775807"), r, 5);
    assert_int_equal(r[0], 0);
    /* ACQUIRE and PEEK do not read it; RESET deletes it */
    freeReplyObject(cmd(s, "SET cell:acq %lld", (long long)T0));
    expect_error(cmd(s, "SLUICE.ACQUIRE cell:acq %s", "token-bucket 1/s burst=5"), "redis-cell value");
    expect_error(cmd(s, "SLUICE.PEEK cell:acq %s", "token-bucket 1/s burst=5"), "redis-cell value");
    assert_int_equal(cmd_int(s, "SLUICE.RESET cell:acq"), 1);
    assert_int_equal(cmd_int(s, "EXISTS cell:acq"), 0);
}

/* ---- the real clock ---------------------------------------------------- */

static void test_real_clock(void **state)
{
    (void)state;
    srv s = {0};
    const char *extra[] = {"--save", "", "--appendonly", "no", NULL};
    assert_int_equal(srv_start(&s, TEST_MODULE_PATH, NULL, extra), 0);
    long long r[5];
    /* AT is refused without testclock */
    expect_error(cmd(&s, "SLUICE.ACQUIRE k %s 1 AT 5", "token-bucket 5/min"), "testclock");
    expect_error(cmd(&s, "SLUICE.ACQUIRE k %s AT 5", "token-bucket 5/min"), "testclock");
    expect_error(cmd(&s, "SLUICE.THROTTLE k 1 1 1 1 AT 5"), "testclock");
    expect_error(cmd(&s, "SLUICE.THROTTLE k 1 1 1 AT 5"), "testclock");
    assert_int_equal(cmd_int(&s, "EXISTS k"), 0);
    /* but a key named AT is a key */
    ints(cmd(&s, "SLUICE.ACQUIRE AT %s", "token-bucket 5/min"), r, 4);
    assert_int_equal(r[1], 4);
    ints(cmd(&s, "SLUICE.PEEK AT %s", "token-bucket 5/min"), r, 4);
    assert_int_equal(r[1], 3);
    ints(cmd(&s, "SLUICE.PEEK at %s", "token-bucket 5/min"), r, 4); /* another key */
    assert_int_equal(r[1], 4);
    assert_int_equal(cmd_int(&s, "SLUICE.RESET AT"), 1);
    assert_int_equal(cmd_int(&s, "SLUICE.RESET At"), 0);
    const long long before_ms = (long long)(time(NULL)) * 1000;
    for (int i = 0; i < 5; i++) {
        ints(cmd(&s, "SLUICE.ACQUIRE k %s", "token-bucket 5/min"), r, 4);
        assert_int_equal(r[0], 1);
        assert_int_equal(r[1], 4 - i);
    }
    ints(cmd(&s, "SLUICE.ACQUIRE k %s", "token-bucket 5/min"), r, 4);
    assert_int_equal(r[0], 0);
    assert_true(r[2] >= 11000 && r[2] <= 12000); /* one token: 12 s after the first */
    /* the key goes when the bucket is full again: 60 s after the first */
    const long long exp = cmd_int(&s, "PEXPIRETIME k");
    assert_true(exp >= before_ms + 59000 && exp <= before_ms + 62000);
    ints(cmd(&s, "SLUICE.PEEK k %s 0", "token-bucket 5/min"), r, 4);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 0);
    assert_int_equal(cmd_int(&s, "SLUICE.RESET k"), 1);
    assert_int_equal(cmd_int(&s, "EXISTS k"), 0);
    ints(cmd(&s, "SLUICE.ACQUIRE k %s", "token-bucket 5/min"), r, 4);
    assert_int_equal(r[1], 4);
    /* a refusal or a probe on a missing key writes nothing */
    ints(cmd(&s, "SLUICE.ACQUIRE none %s 6", "token-bucket 5/min"), r, 4);
    assert_int_equal(r[2], -1);
    ints(cmd(&s, "SLUICE.ACQUIRE none %s 0", "token-bucket 5/min"), r, 4);
    ints(cmd(&s, "SLUICE.PEEK none %s 1", "token-bucket 5/min"), r, 4);
    ints(cmd(&s, "SLUICE.THROTTLE none 1 1 1 0"), r, 5);
    assert_int_equal(cmd_int(&s, "EXISTS none"), 0);
    /* a refusal touches nothing: a transaction WATCHing the key goes
     * through; an admission breaks it */
    redisContext *other = srv_connect(s.port);
    assert_non_null(other);
    for (int admit = 0; admit < 2; admit++) {
        freeReplyObject(cmd(&s, "WATCH k"));
        redisReply *o = redisCommand(other, "SLUICE.ACQUIRE k %s %d", "token-bucket 5/min", admit ? 1 : 9);
        assert_non_null(o);
        assert_int_equal(o->type, REDIS_REPLY_ARRAY);
        assert_int_equal(o->element[0]->integer, admit);
        freeReplyObject(o);
        freeReplyObject(cmd(&s, "MULTI"));
        freeReplyObject(cmd(&s, "PING"));
        o = cmd(&s, "EXEC");
        assert_int_equal(o->type, admit ? REDIS_REPLY_NIL : REDIS_REPLY_ARRAY);
        freeReplyObject(o);
    }
    redisFree(other);
    /* a short window expires its key by itself */
    ints(cmd(&s, "SLUICE.ACQUIRE short %s", "fixed-window 1/50ms"), r, 4);
    assert_int_equal(r[0], 1);
    assert_int_equal(cmd_int(&s, "EXISTS short"), 1);
    for (int i = 0; i < 100 && cmd_int(&s, "EXISTS short"); i++) srv_nap_ms(10);
    assert_int_equal(cmd_int(&s, "EXISTS short"), 0);
    /* THROTTLE on the real clock: redis-cell's first reply */
    ints(cmd(&s, "SLUICE.THROTTLE user123 15 30 60"), r, 5);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], 16);
    assert_int_equal(r[2], 15);
    assert_int_equal(r[3], -1);
    assert_int_equal(r[4], 2);
    /* a redis-cell value on the real clock: TAT 3 s ahead (2 of 5 tokens
     * left at 1/s), with redis-cell's TTL; the admission leaves a sluice
     * state that expires when the bucket is full again, 5 s later */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const long long now_ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    freeReplyObject(cmd(&s, "SET cell %lld PX 3000", now_ns + 3000000000LL));
    ints(cmd(&s, "SLUICE.THROTTLE cell 4 1 1 3"), r, 5);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[2], 2);
    ints(cmd(&s, "SLUICE.THROTTLE cell 4 1 1 2"), r, 5);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[2], 0);
    const long long cell_exp = cmd_int(&s, "PEXPIRETIME cell");
    assert_true(cell_exp >= now_ns / 1000000 + 5000 && cell_exp <= now_ns / 1000000 + 6000);
    /* a module argument it does not know: the server refuses to start */
    srv bad = {0};
    assert_int_equal(srv_start(&bad, TEST_MODULE_PATH, "fastclock", extra), -1);
    srv_stop(&bad);
    srv_stop(&s);
}

/* ---- persistence and replication --------------------------------------- */

/* Admissions on a key of every algorithm, AT-timed and (`real`) on the
 * server's clock, so that both kinds of value and expiry are there. */
#define N_KEYS (N_SPECS + 4)
static void populate(srv *s, uint64_t seed)
{
    uint64_t rng = seed;
    long long r[5];
    for (size_t i = 0; i < N_SPECS; i++) {
        uint64_t t = T0;
        for (int k = 0; k < 20; k++) {
            t += step(&rng, &g_specs[i].p);
            ints(cmd(s, "SLUICE.ACQUIRE p:%d %s %llu AT %llu", (int)i, g_specs[i].spec,
                     (unsigned long long)permits(&rng, &g_specs[i].p), (unsigned long long)t), r, 4);
        }
    }
    ints(cmd(s, "SLUICE.ACQUIRE p:real0 %s 3", "sliding-log 10/h"), r, 4);
    ints(cmd(s, "SLUICE.ACQUIRE p:real1 %s 2", "token-bucket 10/h"), r, 4);
    ints(cmd(s, "SLUICE.ACQUIRE p:real2 %s 1", "leaky-bucket 1/min capacity=3"), r, 4);
    ints(cmd(s, "SLUICE.THROTTLE p:real3 5 10 3600 2"), r, 5);
}

static void take_all(srv *s, snap *out)
{
    char key[32];
    for (size_t i = 0; i < N_KEYS; i++) {
        if (i < N_SPECS) snprintf(key, sizeof key, "p:%zu", i);
        else snprintf(key, sizeof key, "p:real%zu", i - N_SPECS);
        take(s, key, &out[i]);
        assert_true(out[i].exists);
        /* real-clock keys expire, AT-timed ones do not */
        assert_true(i < N_SPECS ? out[i].expire_ms == -1 : out[i].expire_ms > 0);
    }
}

static void compare_all(const snap *a, const snap *b)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        char key[32];
        snprintf(key, sizeof key, "#%zu", i);
        assert_same(&a[i], &b[i], key);
    }
}

static void test_restart_rdb(void **state)
{
    (void)state;
    srv s = {0};
    const char *extra[] = {"--save", "", "--appendonly", "no", "--dbfilename", "dump.rdb", NULL};
    assert_int_equal(srv_start(&s, TEST_MODULE_PATH, "testclock", extra), 0);
    populate(&s, 11);
    /* the admissions count as changes (save points see them) */
    redisReply *info = cmd(&s, "INFO persistence");
    const char *c = strstr(info->str, "rdb_changes_since_last_save:");
    assert_non_null(c);
    assert_true(atol(c + strlen("rdb_changes_since_last_save:")) > 0);
    freeReplyObject(info);
    static snap a[N_KEYS], b[N_KEYS];
    take_all(&s, a);
    redisReply *r = cmd(&s, "SAVE");
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    srv_kill(&s);
    assert_int_equal(srv_start(&s, TEST_MODULE_PATH, "testclock", extra), 0);
    take_all(&s, b);
    compare_all(a, b);
    srv_stop(&s);
}

static void test_restart_aof(void **state)
{
    (void)state;
    srv s = {0};
    const char *extra[] = {"--save", "", "--appendonly", "yes", "--appendfsync", "always", NULL};
    assert_int_equal(srv_start(&s, TEST_MODULE_PATH, "testclock", extra), 0);
    populate(&s, 12);
    static snap a[N_KEYS], b[N_KEYS], c[N_KEYS];
    take_all(&s, a);
    srv_kill(&s); /* no SAVE, no clean shutdown: the AOF alone */
    assert_int_equal(srv_start(&s, TEST_MODULE_PATH, "testclock", extra), 0);
    take_all(&s, b);
    compare_all(a, b);
    /* a rewritten AOF holds them too */
    redisReply *r = cmd(&s, "BGREWRITEAOF");
    freeReplyObject(r);
    for (int i = 0; i < 500; i++) {
        redisReply *info = cmd(&s, "INFO persistence");
        bool busy = strstr(info->str, "aof_rewrite_in_progress:1") ||
                    strstr(info->str, "aof_rewrite_scheduled:1");
        freeReplyObject(info);
        if (!busy) break;
        srv_nap_ms(20);
    }
    populate(&s, 13); /* more after the rewrite */
    take_all(&s, b);
    srv_kill(&s);
    assert_int_equal(srv_start(&s, TEST_MODULE_PATH, "testclock", extra), 0);
    take_all(&s, c);
    compare_all(b, c);
    srv_stop(&s);
}

static long long stat_calls(srv *s, const char *command)
{
    redisReply *r = cmd(s, "INFO commandstats");
    char pat[64];
    snprintf(pat, sizeof pat, "cmdstat_%s:calls=", command);
    const char *c = strstr(r->str, pat);
    long long v = c ? atoll(c + strlen(pat)) : 0;
    freeReplyObject(r);
    return v;
}

static void test_replica(void **state)
{
    (void)state;
    srv m = {0}, rp = {0};
    const char *extra[] = {"--save", "", "--appendonly", "no", NULL};
    assert_int_equal(srv_start(&m, TEST_MODULE_PATH, "testclock", extra), 0);
    char port[16];
    snprintf(port, sizeof port, "%d", m.port);
    const char *rextra[] = {"--save", "", "--appendonly", "no", "--replicaof", "127.0.0.1", port, NULL};
    assert_int_equal(srv_start(&rp, TEST_MODULE_PATH, "testclock", rextra), 0);
    bool up = false;
    for (int i = 0; i < 500 && !up; i++) {
        redisReply *info = cmd(&rp, "INFO replication");
        up = strstr(info->str, "master_link_status:up") != NULL;
        freeReplyObject(info);
        if (!up) srv_nap_ms(20);
    }
    assert_true(up);
    populate(&m, 21);
    assert_int_equal(cmd_int(&m, "SLUICE.RESET p:real0"), 1);
    assert_int_equal(cmd_int(&m, "WAIT 1 5000"), 1);
    static snap a[N_KEYS], b[N_KEYS];
    for (size_t i = 0; i < N_KEYS; i++) {
        char key[32];
        if (i < N_SPECS) snprintf(key, sizeof key, "p:%zu", i);
        else snprintf(key, sizeof key, "p:real%zu", i - N_SPECS);
        take(&m, key, &a[i]);
        take(&rp, key, &b[i]);
        assert_same(&a[i], &b[i], key);
    }
    assert_false(a[N_SPECS].exists); /* the reset one, on both */
    /* inside MULTI/EXEC and inside a script, the result is replicated too */
    freeReplyObject(cmd(&m, "MULTI"));
    freeReplyObject(cmd(&m, "SLUICE.ACQUIRE p:multi %s 2", "token-bucket 10/h"));
    freeReplyObject(cmd(&m, "SLUICE.THROTTLE p:multi2 5 10 3600 2"));
    redisReply *rr = cmd(&m, "EXEC");
    assert_int_equal(rr->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rr->elements, 2);
    freeReplyObject(rr);
    rr = cmd(&m, "EVAL %s 1 p:lua", "return redis.call('SLUICE.ACQUIRE', KEYS[1], 'sliding-log 5/h', 3)");
    assert_int_equal(rr->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rr->element[0]->integer, 1);
    freeReplyObject(rr);
    assert_int_equal(cmd_int(&m, "WAIT 1 5000"), 1);
    static const char *const more[] = {"p:multi", "p:multi2", "p:lua"};
    for (size_t i = 0; i < 3; i++) {
        snap sm, sr;
        take(&m, more[i], &sm);
        take(&rp, more[i], &sr);
        assert_true(sm.exists && sm.expire_ms > 0);
        assert_same(&sm, &sr, more[i]);
    }
    /* the replica ran the results, never a decision */
    assert_true(stat_calls(&rp, "set") > 0);
    assert_int_equal(stat_calls(&rp, "sluice.acquire"), 0);
    assert_int_equal(stat_calls(&rp, "sluice.throttle"), 0);
    assert_true(stat_calls(&rp, "del") >= 1);
    /* a replica answers PEEK (read-only) as its master does, and refuses writes */
    long long x[4], y[4];
    ints(cmd(&m, "SLUICE.PEEK p:8 %s 2 AT %llu", g_specs[8].spec, (unsigned long long)(T0 + 7 * SEC)), x, 4);
    ints(cmd(&rp, "SLUICE.PEEK p:8 %s 2 AT %llu", g_specs[8].spec, (unsigned long long)(T0 + 7 * SEC)), y, 4);
    assert_memory_equal(x, y, sizeof x);
    expect_error(cmd(&rp, "SLUICE.ACQUIRE p:8 %s", g_specs[8].spec), "READONLY");
    srv_stop(&rp);
    srv_stop(&m);
}

/* ---- reservations: RESERVE, SETTLE, CANCEL ------------------------------ */

/* RESERVE's reply: allowed, remaining, retry_after_ms, wait_ms, id. */
static void reserve(srv *s, const char *key, const char *spec, uint64_t p, const char *max_wait_ms,
                    uint64_t at, long long out[5])
{
    if (max_wait_ms)
        ints(cmd(s, "SLUICE.RESERVE %s %s %llu %s AT %llu", key, spec, (unsigned long long)p,
                 max_wait_ms, (unsigned long long)at), out, 5);
    else
        ints(cmd(s, "SLUICE.RESERVE %s %s %llu AT %llu", key, spec, (unsigned long long)p,
                 (unsigned long long)at), out, 5);
}

static long long settle(srv *s, const char *key, long long id, uint64_t a, uint64_t at)
{
    return cmd_int(s, "SLUICE.SETTLE %s %lld %llu AT %llu", key, id, (unsigned long long)a,
                   (unsigned long long)at);
}

/* PEEK 0's remaining at `at`. */
static long long remaining_at(srv *s, const char *key, const char *spec, uint64_t at)
{
    long long r[4];
    ints(cmd(s, "SLUICE.PEEK %s %s 0 AT %llu", key, spec, (unsigned long long)at), r, 4);
    assert_int_equal(r[0], 1);
    return r[1];
}

/* Random reservations, settles and decisions on one key per algorithm,
 * each checked against the reference model's settle (tests/ref_model.c,
 * ref_model_settle): the same cases as tests/limiter/test_reserve.c. */
static void test_settle_against_model(void **state)
{
    (void)state;
    static const spec_case cases[] = {
        {"fixed-window 10/s", {.alg = REF_FIXED_WINDOW, .limit = 10, .period_ns = SEC}},
        {"sliding-approx 10/s", {.alg = REF_SLIDING_APPROX, .limit = 10, .period_ns = SEC}},
        {"sliding-log 10/s", {.alg = REF_SLIDING_LOG, .limit = 10, .period_ns = SEC}},
        {"sliding-wheel 10/s slots=4", {.alg = REF_SLIDING_WHEEL, .limit = 10, .period_ns = SEC, .slots = 4}},
        {"token-bucket 10/s burst=8", {.alg = REF_TOKEN_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 8}},
        {"token-bucket 3/7s burst=5", {.alg = REF_TOKEN_BUCKET, .limit = 3, .period_ns = 7 * SEC, .capacity = 5}},
        {"token-bucket 3/7s burst=3000000000",
         {.alg = REF_TOKEN_BUCKET, .limit = 3, .period_ns = 7 * SEC, .capacity = 3000000000ULL}},
        {"leaky-bucket 10/s capacity=6 nodelay",
         {.alg = REF_LEAKY_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 6, .nodelay = true}},
    };
    uint64_t seed = tu_env_seed();
    const uint64_t seed0 = seed; /* in every failure: SLUICE_TEST_SEED repeats it */
    enum { STEPS = 400, OPEN = 8 };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const spec_case *c = &cases[ci];
        ref_model *m = ref_model_new(&c->p);
        assert_non_null(m);
        char key[32];
        snprintf(key, sizeof key, "settle:%zu", ci);
        long long id[OPEN];
        ref_resv mv[OPEN];
        bool open[OPEN] = {false};
        const uint64_t W = c->p.period_ns, cap = ref_model_max_grant(m);
        const bool bucket = c->p.alg == REF_TOKEN_BUCKET || c->p.alg == REF_LEAKY_BUCKET;
        uint64_t now = T0 + 5 * W;
        int settled = 0, over = 0;
        for (int i = 0; i < STEPS; i++) {
            const uint64_t dice = tu_splitmix64_below(&seed, 100);
            if (dice < 30) now += tu_splitmix64_below(&seed, W / 4 + 1);
            const uint64_t t = dice % 10 == 0 ? now - tu_splitmix64_below(&seed, W) : now;
            const size_t slot = (size_t)tu_splitmix64_below(&seed, OPEN);
            const uint64_t p = tu_splitmix64_below(&seed, cap < 20 ? cap + 2 : 20);
            ref_result mr;
            if (dice < 45) { /* a plain decision */
                long long got[4], want[4];
                ints(cmd(&g_tc, "SLUICE.ACQUIRE %s %s %llu AT %llu", key, c->spec, (unsigned long long)p,
                         (unsigned long long)t), got, 4);
                ref_model_decide(m, p, t, &mr);
                expected_reply(&mr, want);
                if (memcmp(got, want, sizeof got) != 0)
                    fail_msg("seed %llu: %s step %d: ACQUIRE %llu at %llu: %lld %lld %lld %lld, "
                             "model %lld %lld %lld %lld",
                             (unsigned long long)seed0, c->spec, i, (unsigned long long)p,
                             (unsigned long long)t, got[0], got[1], got[2], got[3], want[0], want[1],
                             want[2], want[3]);
            } else if (dice < 75 && !open[slot]) { /* a reservation */
                /* a bucket's may book ahead (whole ms), into debt */
                const bool ahead = bucket && dice % 2;
                const uint64_t mw_ms = ahead ? tu_splitmix64_below(&seed, 2 * W / MS) : 0;
                char mw[24];
                snprintf(mw, sizeof mw, "%llu", (unsigned long long)mw_ms);
                long long got[5];
                reserve(&g_tc, key, c->spec, p, mw, t, got);
                const bool mok = ref_model_reserve(m, p, t, mw_ms * MS, &mr, &mv[slot]);
                if (got[0] != mok || (mok && got[3] != ceil_div(mr.wait_ns, MS)) || (got[4] != 0) != mok)
                    fail_msg("seed %llu: %s step %d: RESERVE %llu at %llu: %lld (wait %lld ms, id %lld), "
                             "model %d (%llu ns)",
                             (unsigned long long)seed0, c->spec, i, (unsigned long long)p,
                             (unsigned long long)t, got[0], got[3], got[4], mok,
                             (unsigned long long)mr.wait_ns);
                if (mok) open[slot] = true, id[slot] = got[4];
            } else if (open[slot]) { /* a settle */
                const uint64_t rp = mv[slot].p;
                uint64_t a;
                switch (settled % 5) { /* each kind in turn: every run has overdrafts */
                case 0: a = 0; break;
                case 1: a = rp ? tu_splitmix64_below(&seed, rp) : 0; break;
                case 2: a = rp; break;
                case 3: a = rp + 1 + tu_splitmix64_below(&seed, cap < 100 ? cap : 100); break;
                default: a = rp + tu_splitmix64_below(&seed, cap < 100 ? 4 * cap : 400); break;
                }
                assert_int_equal(settle(&g_tc, key, id[slot], a, t), 1);
                ref_model_settle(m, &mv[slot], a, t);
                settled++, over += a > rp;
                /* a second settle: refused, nothing changed */
                snap before, after;
                take(&g_tc, key, &before);
                expect_error(cmd(&g_tc, "SLUICE.SETTLE %s %lld %llu AT %llu", key, id[slot],
                                 (unsigned long long)a, (unsigned long long)t),
                             "no open reservation");
                take(&g_tc, key, &after);
                assert_same(&before, &after, key);
                open[slot] = false;
            }
            /* a key back at rest with no reservation open may go (a table's
             * rule, docs/decisions.md): a later request earlier than its
             * last admission is then decided as by a fresh limiter, so the
             * model starts afresh -- and it must have been at rest */
            if (!cmd_int(&g_tc, "EXISTS %s", key)) {
                for (size_t k = 0; k < OPEN; k++)
                    if (open[k]) fail_msg("seed %llu: %s step %d: the key went with reservation %zu open",
                                          (unsigned long long)seed0, c->spec, i, k);
                if (!ref_model_at_rest(m, t))
                    fail_msg("seed %llu: %s step %d: the key went at %llu, not at rest by the model",
                             (unsigned long long)seed0, c->spec, i, (unsigned long long)t);
                ref_model_free(m);
                m = ref_model_new(&c->p);
                assert_non_null(m);
            }
            /* after every step: what remains now, as the model says */
            ref_model_decide(m, 0, t, &mr);
            const long long rem = remaining_at(&g_tc, key, c->spec, t);
            if (rem != (long long)mr.remaining)
                fail_msg("seed %llu: %s step %d: remaining %lld at %llu, model %llu",
                         (unsigned long long)seed0, c->spec, i, rem,
                         (unsigned long long)t, (unsigned long long)mr.remaining);
        }
        if (settled < 5 || over < 2) fail_msg("%s: only %d settles, %d overdrafts", c->spec, settled, over);
        ref_model_free(m);
    }
}

/* Worked examples, by hand, and every way a settle or cancel is refused:
 * the value and its expiry unchanged each time. */
static void test_settle_examples(void **state)
{
    (void)state;
    srv *s = &g_tc;
    long long r[5];
    snap a, b;
    const uint64_t t = T0 + 100 * SEC;
    /* token-bucket: 10 permits; reserve 4, settle at 7: 3 left; at 2: 8 left */
    const char *tb = "token-bucket 10/s burst=10";
    reserve(s, "ex:tb", tb, 4, NULL, t, r);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 6);
    assert_int_equal(settle(s, "ex:tb", r[4], 7, t), 1);
    assert_int_equal(remaining_at(s, "ex:tb", tb, t), 3);
    reserve(s, "ex:tb", tb, 3, NULL, t, r);
    assert_int_equal(r[1], 0);
    assert_int_equal(settle(s, "ex:tb", r[4], 1, t), 1); /* nothing since: exact */
    assert_int_equal(remaining_at(s, "ex:tb", tb, t), 2);
    /* an overdraft: 10 more than reserved puts the bucket 10 below zero:
     * nothing passes for 1 s, then one permit per 100 ms */
    reserve(s, "ex:tb", tb, 2, NULL, t, r);
    assert_int_equal(settle(s, "ex:tb", r[4], 12, t), 1);
    long long d[4];
    ints(cmd(s, "SLUICE.ACQUIRE ex:tb %s 1 AT %llu", tb, (unsigned long long)(t + SEC)), d, 4);
    assert_int_equal(d[0], 0);
    assert_int_equal(d[2], 100); /* retry after 100 ms */
    ints(cmd(s, "SLUICE.ACQUIRE ex:tb %s 1 AT %llu", tb, (unsigned long long)(t + SEC + 100 * MS)), d, 4);
    assert_int_equal(d[0], 1);

    /* fixed-window: reserve 5 of 5, settle at 2: 3 back in its window */
    const char *fw = "fixed-window 5/s";
    reserve(s, "ex:fw", fw, 5, NULL, t, r);
    assert_int_equal(settle(s, "ex:fw", r[4], 2, t + 10), 1);
    assert_int_equal(remaining_at(s, "ex:fw", fw, t + 10), 3);
    /* a second settle, a cancel after it: refused, nothing changed */
    take(s, "ex:fw", &a);
    expect_error(cmd(s, "SLUICE.SETTLE ex:fw %lld 1 AT %llu", r[4], (unsigned long long)t), "no open reservation");
    expect_error(cmd(s, "SLUICE.CANCEL ex:fw %lld AT %llu", r[4], (unsigned long long)t), "no open reservation");
    take(s, "ex:fw", &b);
    assert_same(&a, &b, "ex:fw");

    /* after a change of the key's spec, nothing goes back (the units
     * changed); an excess is still charged, under the new spec */
    reserve(s, "ex:chg", fw, 3, NULL, t, r);
    long long r2[5];
    reserve(s, "ex:chg", fw, 1, NULL, t, r2);
    ints(cmd(s, "SLUICE.ACQUIRE ex:chg %s 0 AT %llu", "fixed-window 10/s", (unsigned long long)(t + 1)), d, 4);
    assert_int_equal(d[1], 6);
    assert_int_equal(settle(s, "ex:chg", r[4], 1, t + 2), 1);
    assert_int_equal(remaining_at(s, "ex:chg", "fixed-window 10/s", t + 2), 6);
    assert_int_equal(settle(s, "ex:chg", r2[4], 3, t + 2), 1);
    assert_int_equal(remaining_at(s, "ex:chg", "fixed-window 10/s", t + 2), 4);

    /* the overdraft's widest: a window's count saturates at 2^64-1 (a
     * sliding-approx's at 2^32-1 when L < 2^32), past any limit a spec can
     * have; the value reads back (refusing), and the same value without
     * its overdraft mark is damaged */
    reserve(s, "ex:od", fw, 1, NULL, t, r);
    assert_int_equal(settle(s, "ex:od", r[4], UINT64_MAX, t), 1);
    ints(cmd(s, "SLUICE.ACQUIRE ex:od %s 1 AT %llu", fw, (unsigned long long)(t + 1)), d, 4);
    assert_int_equal(d[0], 0);
    ints(cmd(s, "SLUICE.ACQUIRE ex:od %s 1 AT %llu", fw, (unsigned long long)(t + SEC)), d, 4);
    assert_int_equal(d[0], 1); /* the next window */
    reserve(s, "ex:od2", "sliding-approx 5000000000/s", 1, NULL, t, r);
    assert_int_equal(settle(s, "ex:od2", r[4], UINT64_MAX, t), 1);
    take(s, "ex:od2", &a);
    ints(cmd(s, "SLUICE.ACQUIRE ex:od2 %s 1 AT %llu", "sliding-approx 5000000000/s", (unsigned long long)(t + 1)), d, 4);
    assert_int_equal(d[0], 0);
    /* the flags byte after the canonical spec: clear RSV_OVERDRAFT */
    const size_t at_flags = 9 + (unsigned char)a.v[8];
    assert_int_equal(a.v[at_flags], 1);
    a.v[at_flags] = 0;
    redisReply *x = cmd(s, "SET ex:od3 %b", a.v, a.n);
    freeReplyObject(x);
    expect_error(cmd(s, "SLUICE.ACQUIRE ex:od3 %s 1 AT %llu", "sliding-approx 5000000000/s", (unsigned long long)(t + 1)),
                 "damaged");
    /* a damaged section: a record count past RSV_MAX */
    a.v[at_flags] = 1;
    a.v[at_flags + 9] = 17;
    x = cmd(s, "SET ex:od4 %b", a.v, a.n);
    freeReplyObject(x);
    expect_error(cmd(s, "SLUICE.ACQUIRE ex:od4 %s 1 AT %llu", "sliding-approx 5000000000/s", (unsigned long long)(t + 1)),
                 "damaged");
    expect_error(cmd(s, "SLUICE.SETTLE ex:od4 %lld 1 AT %llu", r[4], (unsigned long long)(t + 1)), "damaged");
    assert_int_equal(cmd_int(s, "SLUICE.RESET ex:od4"), 1); /* RESET still deletes it */

    /* CANCEL: a bucket's booked permits go back before their time (1),
     * count as used after it (0); a window's cannot be cancelled */
    const char *lb = "token-bucket 1/s burst=1";
    reserve(s, "ex:c", lb, 1, NULL, t, r); /* takes the one token */
    reserve(s, "ex:c", lb, 1, NULL, t, r); /* booked: due in 1 s */
    assert_int_equal(r[3], 1000);
    assert_int_equal(cmd_int(s, "SLUICE.CANCEL ex:c %lld AT %llu", r[4], (unsigned long long)(t + 10)), 1);
    expect_error(cmd(s, "SLUICE.SETTLE ex:c %lld 1 AT %llu", r[4], (unsigned long long)t), "no open reservation");
    reserve(s, "ex:c", lb, 1, NULL, t + 20, r);
    assert_int_equal(cmd_int(s, "SLUICE.CANCEL ex:c %lld AT %llu", r[4], (unsigned long long)(t + 2 * SEC)), 0);
    reserve(s, "ex:w", fw, 1, NULL, t, r);
    take(s, "ex:w", &a);
    expect_error(cmd(s, "SLUICE.CANCEL ex:w %lld AT %llu", r[4], (unsigned long long)t), "CANCEL is for");
    take(s, "ex:w", &b);
    assert_same(&a, &b, "ex:w");
    assert_int_equal(settle(s, "ex:w", r[4], 1, t), 1); /* still open */

    /* unknown, foreign and malformed ids; bad numbers; arity */
    long long ra[5], rb[5];
    reserve(s, "ex:a", fw, 1, NULL, t, ra);
    reserve(s, "ex:b", fw, 1, NULL, t, rb);
    assert_true(ra[4] != rb[4]);
    take(s, "ex:a", &a);
    expect_error(cmd(s, "SLUICE.SETTLE ex:a %lld 1 AT %llu", rb[4], (unsigned long long)t), "no open reservation");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a %lld 1 AT %llu", ra[4] + 1, (unsigned long long)t), "no open reservation");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a %lld 1 AT %llu", ra[4] ^ (1LL << 40), (unsigned long long)t),
                 "no open reservation");
    expect_error(cmd(s, "SLUICE.SETTLE ex:none %lld 1 AT %llu", ra[4], (unsigned long long)t), "no open reservation");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a abc 1"), "bad reservation id \"abc\"");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a 0 1"), "bad reservation id \"0\"");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a -1 1"), "bad reservation id \"-1\"");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a 9223372036854775808 1"), "bad reservation id");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a %lld x", ra[4]), "bad actual \"x\"");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a %lld 18446744073709551616", ra[4]), "bad actual");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a %lld", ra[4]), "wrong number");
    expect_error(cmd(s, "SLUICE.SETTLE ex:a %lld 1 2", ra[4]), "wrong number");
    expect_error(cmd(s, "SLUICE.CANCEL ex:a"), "wrong number");
    expect_error(cmd(s, "SLUICE.RESERVE ex:a %s", fw), "wrong number");
    expect_error(cmd(s, "SLUICE.RESERVE ex:a %s 1 soon", fw), "bad max_wait_ms \"soon\"");
    expect_error(cmd(s, "SLUICE.RESERVE ex:a %s x", fw), "bad permits \"x\"");
    expect_error(cmd(s, "SLUICE.RESERVE ex:a %s 1", "fixed-window 5/s nope=1"), "bad spec");
    take(s, "ex:a", &b);
    assert_same(&a, &b, "ex:a");
    freeReplyObject(cmd(s, "SET ex:str hello"));
    expect_error(cmd(s, "SLUICE.SETTLE ex:str %lld 1", ra[4]), "not a sluice state");
    freeReplyObject(cmd(s, "RPUSH ex:list x"));
    expect_error(cmd(s, "SLUICE.SETTLE ex:list %lld 1", ra[4]), "WRONGTYPE");
    /* after a RESET, the key's old ids are gone, also once it is re-made */
    assert_int_equal(cmd_int(s, "SLUICE.RESET ex:a"), 1);
    reserve(s, "ex:a", fw, 1, NULL, t, r);
    expect_error(cmd(s, "SLUICE.SETTLE ex:a %lld 1 AT %llu", ra[4], (unsigned long long)t), "no open reservation");
    assert_int_equal(settle(s, "ex:a", r[4], 1, t), 1);

    /* at most 16 kept per key: the 17th drops the oldest */
    const char *big = "fixed-window 100/s";
    long long ids[17];
    for (int i = 0; i < 17; i++) {
        reserve(s, "ex:many", big, 1, NULL, t, r);
        ids[i] = r[4];
    }
    expect_error(cmd(s, "SLUICE.SETTLE ex:many %lld 0 AT %llu", ids[0], (unsigned long long)t), "no open reservation");
    for (int i = 1; i < 17; i++) assert_int_equal(settle(s, "ex:many", ids[i], 0, t), 1);
    assert_int_equal(remaining_at(s, "ex:many", big, t), 99); /* the dropped one's permit stays used */
}

/* Reservations and settles replicate as their results (SET), and survive
 * a restart from the AOF. */
static void test_settle_replica(void **state)
{
    (void)state;
    srv m = {0}, rp = {0};
    const char *extra[] = {"--save", "", "--appendonly", "yes", "--appendfsync", "always", NULL};
    assert_int_equal(srv_start(&m, TEST_MODULE_PATH, NULL, extra), 0);
    char port[16];
    snprintf(port, sizeof port, "%d", m.port);
    const char *rextra[] = {"--save", "", "--appendonly", "no", "--replicaof", "127.0.0.1", port, NULL};
    assert_int_equal(srv_start(&rp, TEST_MODULE_PATH, NULL, rextra), 0);
    bool up = false;
    for (int i = 0; i < 500 && !up; i++) {
        redisReply *info = cmd(&rp, "INFO replication");
        up = strstr(info->str, "master_link_status:up") != NULL;
        freeReplyObject(info);
        if (!up) srv_nap_ms(20);
    }
    assert_true(up);
    static const char *const specs[] = {"token-bucket 10/h", "sliding-log 5/h", "fixed-window 7/h"};
    long long r[5], keep[3];
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "rs:%d", i);
        ints(cmd(&m, "SLUICE.RESERVE %s %s 2", key, specs[i]), r, 5);
        assert_int_equal(r[0], 1);
        assert_int_equal(cmd_int(&m, "SLUICE.SETTLE %s %lld 4", key, r[4]), 1);
        ints(cmd(&m, "SLUICE.RESERVE %s %s 1", key, specs[i]), r, 5);
        keep[i] = r[4]; /* left open */
    }
    assert_int_equal(cmd_int(&m, "WAIT 1 5000"), 1);
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "rs:%d", i);
        snap a, b;
        take(&m, key, &a);
        take(&rp, key, &b);
        assert_true(a.exists && a.expire_ms > 0);
        assert_same(&a, &b, key);
    }
    /* a reservation keeps its key an hour past its time, though the state
     * is at rest in 100 ms; settled at 0 with nothing since, the bucket is
     * as if it had taken nothing, at rest: the key goes */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const long long now_ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    ints(cmd(&m, "SLUICE.RESERVE rs:keep %s 1", "token-bucket 10/s"), r, 5);
    const long long exp_ms = cmd_int(&m, "PEXPIRETIME rs:keep");
    assert_true(exp_ms >= now_ms + 3600 * 1000 && exp_ms <= now_ms + 3600 * 1000 + 60 * 1000);
    assert_int_equal(cmd_int(&m, "SLUICE.SETTLE rs:keep %lld 0", r[4]), 1);
    assert_int_equal(cmd_int(&m, "EXISTS rs:keep"), 0);
    assert_int_equal(stat_calls(&rp, "sluice.reserve"), 0);
    assert_int_equal(stat_calls(&rp, "sluice.settle"), 0);
    expect_error(cmd(&rp, "SLUICE.SETTLE rs:0 %lld 1", keep[0]), "READONLY");
    srv_stop(&rp);
    /* from the AOF: the open reservations can still be settled */
    snap before;
    take(&m, "rs:1", &before);
    srv_kill(&m);
    assert_int_equal(srv_start(&m, TEST_MODULE_PATH, NULL, extra), 0);
    snap after;
    take(&m, "rs:1", &after);
    assert_same(&before, &after, "rs:1");
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "rs:%d", i);
        assert_int_equal(cmd_int(&m, "SLUICE.SETTLE %s %lld 0", key, keep[i]), 1);
    }
    srv_stop(&m);
}

/* Cluster mode: every command names its key (first key 1), so a cluster
 * node routes it; here one node holding every slot. */
static void test_cluster_node(void **state)
{
    (void)state;
    srv s = {0};
    const char *extra[] = {"--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
                           "--cluster-config-file", "nodes.conf", NULL};
    s.port = srv_free_port(55000); /* its bus listens on port + 10000 */
    assert_true(s.port > 0);
    assert_int_equal(srv_start(&s, TEST_MODULE_PATH, "testclock", extra), 0);
    redisReply *r = cmd(&s, "CLUSTER ADDSLOTSRANGE 0 16383");
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    bool ok = false;
    for (int i = 0; i < 500 && !ok; i++) {
        redisReply *info = cmd(&s, "CLUSTER INFO");
        ok = strstr(info->str, "cluster_state:ok") != NULL;
        freeReplyObject(info);
        if (!ok) srv_nap_ms(20);
    }
    assert_true(ok);
    r = cmd(&s, "COMMAND GETKEYS SLUICE.ACQUIRE {user42}:read %s", "token-bucket 5/s");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    assert_string_equal(r->element[0]->str, "{user42}:read");
    freeReplyObject(r);
    long long x[5];
    ints(cmd(&s, "SLUICE.ACQUIRE {user42}:read %s", "token-bucket 5/s"), x, 4);
    assert_int_equal(x[0], 1);
    ints(cmd(&s, "SLUICE.THROTTLE {user42}:write 1 1 1"), x, 5);
    assert_int_equal(x[0], 0);
    srv_stop(&s);
}

/* ---- the test list ----------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_model),
        cmocka_unit_test(test_calendar_quota),
        cmocka_unit_test(test_throttle_against_model),
        cmocka_unit_test(test_throttle_exact_rates),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_mutated_states),
        cmocka_unit_test(test_key_named_at),
        cmocka_unit_test(test_reset_watch),
        cmocka_unit_test(test_long_spec),
        cmocka_unit_test(test_from_redis_cell),
        cmocka_unit_test(test_change_of_spec),
        cmocka_unit_test(test_change_to_shorter_window),
        cmocka_unit_test(test_retired_total),
        cmocka_unit_test(test_carry_history_value),
        cmocka_unit_test(test_change_chains),
        cmocka_unit_test(test_real_clock),
        cmocka_unit_test(test_restart_rdb),
        cmocka_unit_test(test_restart_aof),
        cmocka_unit_test(test_replica),
        cmocka_unit_test(test_cluster_node),
        cmocka_unit_test(test_settle_against_model),
        cmocka_unit_test(test_settle_examples),
        cmocka_unit_test(test_settle_replica),
    };
    /* SLUICE_TEST_FILTER=PATTERN (cmocka's * and ?): run only those */
    const char *only = getenv("SLUICE_TEST_FILTER");
    if (only && *only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
