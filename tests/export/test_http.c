/* test_http.c -- sluice/http.h: the RateLimit header fields.
 *
 *  - the examples of draft-ietf-httpapi-ratelimit-headers-10 that a limit
 *    and its decisions can produce, reproduced from the traffic the draft
 *    describes (its partition keys decoded by hand);
 *  - the exact block of lines for every algorithm, allowed and refused,
 *    with the numbers worked out in the comments from the decision rules
 *    (docs/decisions.md) and the mapping (docs/http-headers.md), not read
 *    from the code;
 *  - edge cases: remaining 0, a request no wait can help ("never"),
 *    sub-second and odd periods, the largest numbers, times near 2^63;
 *  - t and Retry-After against the limiter itself, on random traffic for
 *    every algorithm: after t seconds (no other traffic) at least one more
 *    permit is there; after Retry-After the refused request passes;
 *    Retry-After is never below t;
 *  - base64 of the partition key against RFC 4648's test vectors;
 *  - short buffers at every length: the length needed is reported, the
 *    buffer holds whole lines (whole items) only, NUL-terminated, and
 *    nothing is written past it;
 *  - bad arguments: every one refused with nothing written.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define SEC 1000000000ULL
#define MS 1000000ULL

/* ---- helpers ------------------------------------------------------------ */

static sluice_limiter *mk(const char *spec)
{
    char err[256];
    sluice_limiter *lim = sluice_limiter_new(spec, err, sizeof err);
    if (!lim) fail_msg("spec \"%s\" refused: %s", spec, err);
    return lim;
}

static void pol(sluice_http_policy *p, const char *name, const char *spec)
{
    char err[256];
    int rc = sluice_http_policy_init(p, name, spec, err, sizeof err);
    if (rc != 0) fail_msg("policy %s \"%s\": %d %s", name, spec, rc, err);
}

/* n admissions of one permit each at time t; all must pass. */
static void take(sluice_limiter *lim, unsigned n, uint64_t t)
{
    for (unsigned i = 0; i < n; i++) {
        sluice_result r;
        if (!sluice_try_acquire_at(lim, 1, t, &r)) fail_msg("admission %u refused", i);
    }
}

/* Ask for p permits at t and format the block for policy `p`. */
static void block(const sluice_http_policy *pl, sluice_limiter *lim, uint64_t permits,
                  uint64_t t, const void *pk, size_t pklen, unsigned flags, bool want_allowed,
                  const char *want)
{
    sluice_result r;
    bool ok = sluice_try_acquire_at(lim, permits, t, &r);
    assert_int_equal(ok, want_allowed);
    char buf[1024];
    size_t need = 0;
    assert_int_equal(sluice_http_headers(pl, &r, t, pk, pklen, flags, buf, sizeof buf, &need), 0);
    assert_int_equal(need, strlen(want));
    if (strcmp(buf, want) != 0) fail_msg("got\n%s\nwant\n%s", buf, want);
}

/* The RateLimit value alone. */
static void rl_value(const sluice_http_policy *pl, const sluice_result *r, uint64_t t,
                     const void *pk, size_t pklen, const char *want)
{
    char buf[512];
    size_t len = 0;
    assert_int_equal(sluice_http_ratelimit_value(pl, r, t, pk, pklen, buf, sizeof buf, &len), 0);
    assert_int_equal(len, strlen(want));
    if (strcmp(buf, want) != 0) fail_msg("got %s, want %s", buf, want);
}

static void policy_value(const sluice_http_policy *pl, const void *pk, size_t pklen,
                         const char *want)
{
    char buf[512];
    size_t len = 0;
    assert_int_equal(sluice_http_policy_value(pl, pk, pklen, buf, sizeof buf, &len), 0);
    assert_int_equal(len, strlen(want));
    if (strcmp(buf, want) != 0) fail_msg("got %s, want %s", buf, want);
}

/* ---- the draft's examples ----------------------------------------------- */

/* Section 3.2: RateLimit-Policy examples. */
static void test_draft_policy_examples(void **state)
{
    (void)state;
    sluice_http_policy a, b;
    /* `RateLimit-Policy: "default";q=100;w=10` */
    pol(&a, "default", "fixed-window 100/10s");
    policy_value(&a, NULL, 0, "\"default\";q=100;w=10");
    /* `RateLimit-Policy: "permin";q=50;w=60,"perhr";q=1000;w=3600`: two
     * policies appended to one value.  RFC 9651 serializes a List with ", "
     * between members (the draft's example omits the optional space). */
    pol(&a, "permin", "sliding-log 50/min");
    pol(&b, "perhr", "sliding-log 1000/h");
    char buf[256];
    size_t len = 0;
    assert_int_equal(sluice_http_policy_value(&a, NULL, 0, buf, sizeof buf, &len), 0);
    assert_int_equal(sluice_http_policy_value(&b, NULL, 0, buf, sizeof buf, &len), 0);
    assert_string_equal(buf, "\"permin\";q=50;w=60, \"perhr\";q=1000;w=3600");
    assert_int_equal(len, strlen(buf));
    /* Appendix A.2.7: `"hour";q=1000;w=3600, "day";q=5000;w=86400` */
    pol(&a, "hour", "fixed-window 1000/h");
    pol(&b, "day", "fixed-window 5000/d");
    len = 0;
    assert_int_equal(sluice_http_policy_value(&a, NULL, 0, buf, sizeof buf, &len), 0);
    assert_int_equal(sluice_http_policy_value(&b, NULL, 0, buf, sizeof buf, &len), 0);
    assert_string_equal(buf, "\"hour\";q=1000;w=3600, \"day\";q=5000;w=86400");
    /* Section 9.5: `"somepolicy";q=10000;w=1000` */
    pol(&a, "somepolicy", "token-bucket 10000/1000s");
    policy_value(&a, NULL, 0, "\"somepolicy\";q=10000;w=1000");
    /* The draft's pk examples (`:cHsdsRa894==:`, `:sdfjLJUOUH==:`) are not
     * canonical base64 (their last character before the padding has bits
     * set that padding drops), so no byte string encodes to them; a key of
     * our own shows the form. */
    pol(&a, "peruser", "sliding-wheel 100/min");
    policy_value(&a, "user-42", 7, "\"peruser\";q=100;w=60;pk=:dXNlci00Mg==:");
}

/* Section 4.2: RateLimit examples. */
static void test_draft_ratelimit_examples(void **state)
{
    (void)state;
    sluice_http_policy p;
    sluice_result r;

    /* `RateLimit: "default";r=50;t=30`: 100 per minute, 50 used by 30 s;
     * the window ends at 60 s. */
    sluice_limiter *lim = mk("fixed-window 100/min");
    pol(&p, "default", "fixed-window 100/min");
    take(lim, 49, 0);
    assert_true(sluice_try_acquire_at(lim, 1, 30 * SEC, &r));
    rl_value(&p, &r, 30 * SEC, NULL, 0, "\"default\";r=50;t=30");
    sluice_limiter_free(lim);

    /* `RateLimit: "default";r=999;pk=:dHJpYWwxMjEzMjM=:` -- 999 remaining
     * and no reset: a quota of 999 untouched (nothing to come back), for the
     * key "trial121323" (the base64 decoded by hand). */
    lim = mk("fixed-window 999/d");
    pol(&p, "default", "fixed-window 999/d");
    assert_true(sluice_try_acquire_at(lim, 0, 5 * SEC, &r));
    rl_value(&p, &r, 5 * SEC, "trial121323", 11, "\"default\";r=999;pk=:dHJpYWwxMjEzMjM=:");
    sluice_limiter_free(lim);

    /* `RateLimit: "default";r=300000000;t=60;pk=:QXBwLTk5OQ==:` -- 300 MB
     * left for the next 60 s, key "App-999": a minute window of 300000001
     * bytes, one used at its start. */
    lim = mk("fixed-window 300000001/min");
    pol(&p, "default", "fixed-window 300000001/min");
    assert_true(sluice_try_acquire_at(lim, 1, 120 * SEC, &r));
    rl_value(&p, &r, 120 * SEC, "App-999", 7, "\"default\";r=300000000;t=60;pk=:QXBwLTk5OQ==:");
    sluice_limiter_free(lim);
}

/* Appendix A: whole responses. */
static void test_draft_responses(void **state)
{
    (void)state;
    sluice_http_policy p;

    /* A.1.1: quota exhausted for the next 50 s, the request still served
     * (`"default";r=0;t=50`), then refused 2 s later (`r=0;t=48`; our
     * server refuses, so Retry-After joins, never earlier than t).  100
     * per minute, all used at 10 s. */
    sluice_limiter *lim = mk("fixed-window 100/min");
    pol(&p, "default", "fixed-window 100/min");
    take(lim, 99, 10 * SEC);
    block(&p, lim, 1, 10 * SEC, NULL, 0, SLUICE_HTTP_NO_POLICY, true,
          "RateLimit: \"default\";r=0;t=50\r\n");
    block(&p, lim, 1, 12 * SEC, NULL, 0, SLUICE_HTTP_NO_POLICY, false,
          "RateLimit: \"default\";r=0;t=48\r\nRetry-After: 48\r\n");
    sluice_limiter_free(lim);

    /* A.1.2: 5000 a day and 1000 an hour; 4900 used in the first 14 hours
     * (350 an hour): `RateLimit: "dayLimit";r=100;t=36000`. */
    lim = mk("fixed-window 5000/d");
    pol(&p, "dayLimit", "fixed-window 5000/d");
    for (unsigned h = 0; h < 14; h++) take(lim, 350, h * 3600 * SEC);
    sluice_result r;
    assert_true(sluice_try_acquire_at(lim, 0, 14 * 3600 * SEC, &r));
    rl_value(&p, &r, 14 * 3600 * SEC, NULL, 0, "\"dayLimit\";r=100;t=36000");
    sluice_limiter_free(lim);

    /* A.1.3: 100 per minute, 40 used after 2 s:
     * `RateLimit-Policy: "basic";q=100;w=60` `RateLimit: "basic";r=60;t=58`. */
    lim = mk("fixed-window 100/min");
    pol(&p, "basic", "fixed-window 100/min");
    take(lim, 39, 0);
    block(&p, lim, 1, 2 * SEC, NULL, 0, 0, true,
          "RateLimit-Policy: \"basic\";q=100;w=60\r\nRateLimit: \"basic\";r=60;t=58\r\n");
    sluice_limiter_free(lim);

    /* A.1.4: exhausted, throttled with Retry-After 5 s, `r=0;t=5`: the
     * draft gives Retry-After as a date 5 s after Date; we write the
     * equivalent delay-seconds. */
    lim = mk("fixed-window 100/min");
    pol(&p, "default", "fixed-window 100/min");
    take(lim, 100, 55 * SEC);
    block(&p, lim, 1, 55 * SEC, NULL, 0, SLUICE_HTTP_NO_POLICY, false,
          "RateLimit: \"default\";r=0;t=5\r\nRetry-After: 5\r\n");
    sluice_limiter_free(lim);

    /* A.2.1: `RateLimit: "fixedwindow";r=99;t=50`,
     * `RateLimit-Policy: "fixedwindow";q=100;w=60` (one request at 10 s). */
    lim = mk("fixed-window 100/min");
    pol(&p, "fixedwindow", "fixed-window 100/min");
    block(&p, lim, 1, 10 * SEC, NULL, 0, 0, true,
          "RateLimit-Policy: \"fixedwindow\";q=100;w=60\r\n"
          "RateLimit: \"fixedwindow\";r=99;t=50\r\n");
    sluice_limiter_free(lim);

    /* A.2.3: a 429 with `RateLimit-Policy: "dynamic";q=15;w=20` and
     * `RateLimit: "dynamic";r=0;t=20`: 15 per 20 s, all used at the start. */
    lim = mk("fixed-window 15/20s");
    pol(&p, "dynamic", "fixed-window 15/20s");
    take(lim, 15, 40 * SEC);
    block(&p, lim, 1, 40 * SEC, NULL, 0, 0, false,
          "RateLimit-Policy: \"dynamic\";q=15;w=20\r\n"
          "RateLimit: \"dynamic\";r=0;t=20\r\nRetry-After: 20\r\n");
    sluice_limiter_free(lim);
}

/* ---- every algorithm ---------------------------------------------------- */

/* 10 per minute: 4 taken at 10 s, then a fifth. */
static void test_algorithms_allowed(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        const char *want;
    } cases[] = {
        /* window [0, 60 s): t = 60 - 10 */
        {"fixed-window 10/min",
         "RateLimit-Policy: \"p\";q=10;w=60\r\nRateLimit: \"p\";r=5;t=50\r\n"},
        /* everything counted now has left by 10 s + 60 s: t = 60 */
        {"sliding-log 10/min",
         "RateLimit-Policy: \"p\";q=10;w=60\r\nRateLimit: \"p\";r=5;t=60\r\n"},
        {"sliding-wheel 10/min slots=6",
         "RateLimit-Policy: \"p\";q=10;w=60\r\nRateLimit: \"p\";r=5;t=60\r\n"},
        /* the estimate forgets window [0, 60) at 120 s: t = 110 */
        {"sliding-approx 10/min",
         "RateLimit-Policy: \"p\";q=10;w=60\r\nRateLimit: \"p\";r=5;t=110\r\n"},
        /* one token every 6 s */
        {"token-bucket 10/min",
         "RateLimit-Policy: \"p\";q=10;w=60\r\nRateLimit: \"p\";r=5;t=6\r\n"},
        {"token-bucket 10/min burst=20",
         "RateLimit-Policy: \"p\";q=10;w=60;sluice-burst=20\r\nRateLimit: \"p\";r=15;t=6\r\n"},
        {"leaky-bucket 10/min",
         "RateLimit-Policy: \"p\";q=10;w=60\r\nRateLimit: \"p\";r=5;t=6\r\n"},
        {"leaky-bucket 10/min capacity=5 nodelay",
         "RateLimit-Policy: \"p\";q=10;w=60;sluice-burst=5\r\nRateLimit: \"p\";r=0;t=6\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluice_limiter *lim = mk(cases[i].spec);
        sluice_http_policy p;
        pol(&p, "p", cases[i].spec);
        take(lim, 4, 10 * SEC);
        block(&p, lim, 1, 10 * SEC, NULL, 0, 0, true, cases[i].want);
        sluice_limiter_free(lim);
    }
}

/* 10 per minute, all 10 taken at 10 s; one more asked at 25.5 s. */
static void test_algorithms_refused(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        const char *want;
    } cases[] = {
        /* window ends at 60 s: 34.5 s -> 35 */
        {"fixed-window 10/min", "RateLimit: \"p\";r=0;t=35\r\nRetry-After: 35\r\n"},
        /* the admissions at 10 s leave at 70 s: 44.5 s -> 45 */
        {"sliding-log 10/min", "RateLimit: \"p\";r=0;t=45\r\nRetry-After: 45\r\n"},
        /* slot 1 ([10 s, 20 s)) leaves at slot 7, 70 s */
        {"sliding-wheel 10/min slots=6", "RateLimit: \"p\";r=0;t=45\r\nRetry-After: 45\r\n"},
        /* cur = 10 until 60 s: the earliest pass is at 60 s + 6 s, when
         * 10 * (1 - f) + 1 <= 10, f = 0.1: 40.5 s -> 41 */
        {"sliding-approx 10/min", "RateLimit: \"p\";r=0;t=41\r\nRetry-After: 41\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluice_limiter *lim = mk(cases[i].spec);
        sluice_http_policy p;
        pol(&p, "p", cases[i].spec);
        take(lim, 10, 10 * SEC);
        block(&p, lim, 1, 25 * SEC + 500 * MS, NULL, 0, SLUICE_HTTP_NO_POLICY, false,
              cases[i].want);
        sluice_limiter_free(lim);
    }
    /* The buckets refill: ask again 0.5 s after the tenth admission.  The
     * first token is back at 16 s, 5.5 s later: t = min(6, 5.5) -> 6,
     * Retry-After 6. */
    static const char *const buckets[] = {"token-bucket 10/min", "leaky-bucket 10/min",
                                          "leaky-bucket 10/min nodelay"};
    for (size_t i = 0; i < 3; i++) {
        sluice_limiter *lim = mk(buckets[i]);
        sluice_http_policy p;
        pol(&p, "p", buckets[i]);
        take(lim, 10, 10 * SEC);
        block(&p, lim, 1, 10 * SEC + 500 * MS, NULL, 0, SLUICE_HTTP_NO_POLICY, false,
              "RateLimit: \"p\";r=0;t=6\r\nRetry-After: 6\r\n");
        /* two permits: 11.5 s away, t stays the bound */
        block(&p, lim, 2, 10 * SEC + 500 * MS, NULL, 0, SLUICE_HTTP_NO_POLICY, false,
              "RateLimit: \"p\";r=0;t=6\r\nRetry-After: 12\r\n");
        sluice_limiter_free(lim);
    }
}

/* The legacy fields, and a partition key on every line that carries it. */
static void test_legacy(void **state)
{
    (void)state;
    sluice_http_policy p;
    sluice_limiter *lim = mk("fixed-window 100/min");
    pol(&p, "api", "fixed-window 100/min");
    take(lim, 99, 30 * SEC);
    block(&p, lim, 1, 30 * SEC, "k", 1, SLUICE_HTTP_LEGACY, true,
          "RateLimit-Policy: \"api\";q=100;w=60;pk=:aw==:\r\n"
          "RateLimit: \"api\";r=0;t=30;pk=:aw==:\r\n"
          "X-RateLimit-Limit: 100\r\nX-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 30\r\n");
    block(&p, lim, 1, 40 * SEC, NULL, 0, SLUICE_HTTP_LEGACY | SLUICE_HTTP_NO_POLICY, false,
          "RateLimit: \"api\";r=0;t=20\r\nRetry-After: 20\r\n"
          "X-RateLimit-Limit: 100\r\nX-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 20\r\n");
    /* the next window, untouched: t left out, Reset 0 */
    block(&p, lim, 0, 60 * SEC, NULL, 0, SLUICE_HTTP_LEGACY | SLUICE_HTTP_NO_POLICY, true,
          "RateLimit: \"api\";r=100\r\n"
          "X-RateLimit-Limit: 100\r\nX-RateLimit-Remaining: 100\r\nX-RateLimit-Reset: 0\r\n");
    sluice_limiter_free(lim);

    /* the sample in docs/http-headers.md */
    lim = mk("token-bucket 10/min burst=5");
    pol(&p, "api", "token-bucket 10/min burst=5");
    take(lim, 5, 0);
    block(&p, lim, 1, 0, "k", 1, SLUICE_HTTP_LEGACY, false,
          "RateLimit-Policy: \"api\";q=10;w=60;sluice-burst=5;pk=:aw==:\r\n"
          "RateLimit: \"api\";r=0;t=6;pk=:aw==:\r\n"
          "Retry-After: 6\r\n"
          "X-RateLimit-Limit: 10\r\nX-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 6\r\n");
    sluice_limiter_free(lim);
}

/* ---- edge cases --------------------------------------------------------- */

static void test_edges(void **state)
{
    (void)state;
    sluice_http_policy p;
    sluice_limiter *lim;

    /* remaining 0 on an allowed request: the last permit of the window */
    lim = mk("fixed-window 3/min");
    pol(&p, "p", "fixed-window 3/min");
    take(lim, 2, 0);
    block(&p, lim, 1, 0, NULL, 0, SLUICE_HTTP_NO_POLICY, true, "RateLimit: \"p\";r=0;t=60\r\n");
    sluice_limiter_free(lim);

    /* never: more permits than the burst.  No Retry-After; t as usual, or
     * left out when the bucket is full */
    lim = mk("token-bucket 10/min burst=5");
    pol(&p, "p", "token-bucket 10/min burst=5");
    block(&p, lim, 6, 0, NULL, 0, SLUICE_HTTP_NO_POLICY, false, "RateLimit: \"p\";r=5\r\n");
    take(lim, 2, 0);
    block(&p, lim, 6, 0, NULL, 0, SLUICE_HTTP_NO_POLICY, false,
          "RateLimit: \"p\";r=3;t=6\r\n");
    sluice_limiter_free(lim);

    /* a fresh limiter's probe: full, t left out */
    lim = mk("sliding-log 10/s");
    pol(&p, "p", "sliding-log 10/s");
    block(&p, lim, 0, 0, NULL, 0, 0, true,
          "RateLimit-Policy: \"p\";q=10;w=1\r\nRateLimit: \"p\";r=10\r\n");
    sluice_limiter_free(lim);

    /* a sub-second window: 5 per 250 ms is 20 per second, burst 5; 150 ms
     * to the window's end rounds up to 1 s */
    lim = mk("fixed-window 5/250ms");
    pol(&p, "p", "fixed-window 5/250ms");
    take(lim, 5, 100 * MS);
    block(&p, lim, 1, 100 * MS, NULL, 0, 0, false,
          "RateLimit-Policy: \"p\";q=20;w=1;sluice-burst=5\r\n"
          "RateLimit: \"p\";r=0;t=1\r\nRetry-After: 1\r\n");
    sluice_limiter_free(lim);

    /* periods that are no whole number of seconds: w rounds up, q rounds
     * down, so q/w never exceeds the rate */
    pol(&p, "p", "sliding-wheel 3/1500ms");      /* 4 in 2 s (4.0) */
    policy_value(&p, NULL, 0, "\"p\";q=4;w=2;sluice-burst=3");
    pol(&p, "p", "sliding-log 7/2500ms");        /* 8.4 in 3 s */
    policy_value(&p, NULL, 0, "\"p\";q=8;w=3;sluice-burst=7");
    pol(&p, "p", "fixed-window 1/7ns");          /* 142857142.86 in 1 s */
    policy_value(&p, NULL, 0, "\"p\";q=142857142;w=1;sluice-burst=1");
    pol(&p, "p", "token-bucket 10/100ms");
    policy_value(&p, NULL, 0, "\"p\";q=100;w=1;sluice-burst=10");
    pol(&p, "p", "leaky-bucket 1/d");
    policy_value(&p, NULL, 0, "\"p\";q=1;w=86400");

    /* huge: 10^12 per ns is 10^21 a second, written as the largest sf
     * integer; the longest period; a burst beyond 15 digits */
    pol(&p, "p", "fixed-window 1000000000000/ns");
    policy_value(&p, NULL, 0, "\"p\";q=999999999999999;w=1;sluice-burst=1000000000000");
    pol(&p, "p", "token-bucket 1000000000000/ns burst=5000000000000000000");
    policy_value(&p, NULL, 0, "\"p\";q=999999999999999;w=1;sluice-burst=999999999999999");
    lim = mk("token-bucket 1000000000000/ns burst=5000000000000000000");
    block(&p, lim, 1, 0, NULL, 0, SLUICE_HTTP_NO_POLICY, true,
          "RateLimit: \"p\";r=999999999999999;t=1\r\n");
    sluice_limiter_free(lim);

    /* 1 per 36500 days: a refusal's wait is 3153600000 s */
    lim = mk("token-bucket 1/36500d");
    pol(&p, "p", "token-bucket 1/36500d");
    take(lim, 1, 0);
    block(&p, lim, 1, 0, NULL, 0, 0, false,
          "RateLimit-Policy: \"p\";q=1;w=3153600000\r\n"
          "RateLimit: \"p\";r=0;t=3153600000\r\nRetry-After: 3153600000\r\n");
    sluice_limiter_free(lim);

    /* times near the end of the axis: 2^63-1 is in window 2^63-1 / 60 s;
     * a later time counts as 2^63-1 */
    const uint64_t end = (uint64_t)INT64_MAX; /* 9223372036854775807 */
    const uint64_t to_end = 60 * SEC - end % (60 * SEC);
    char want[128];
    snprintf(want, sizeof want, "RateLimit: \"p\";r=9;t=%" PRIu64 "\r\n",
             (uint64_t)(to_end / SEC + (to_end % SEC != 0)));
    for (int k = 0; k < 2; k++) {
        lim = mk("fixed-window 10/min");
        pol(&p, "p", "fixed-window 10/min");
        block(&p, lim, 1, k ? UINT64_MAX : end, NULL, 0, SLUICE_HTTP_NO_POLICY, true, want);
        sluice_limiter_free(lim);
    }
}

/* Names are sf-strings: quotes and backslashes escaped. */
static void test_names(void **state)
{
    (void)state;
    sluice_http_policy p;
    pol(&p, "a\"b\\c d", "fixed-window 1/s");
    policy_value(&p, NULL, 0, "\"a\\\"b\\\\c d\";q=1;w=1");
    char name[SLUICE_HTTP_NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[SLUICE_HTTP_NAME_MAX] = '\0';
    pol(&p, name, "fixed-window 1/s"); /* the longest */
    assert_string_equal(p.name, name);
}

/* The policy of a limiter is that of its spec. */
static void test_from_limiter(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "fixed-window 5/250ms", "sliding-log 100/s", "sliding-wheel 1000/min slots=60",
        "sliding-approx 7/10s", "token-bucket 100/s burst=20", "leaky-bucket 10/s capacity=5",
        "leaky-bucket 3/h nodelay clock=coarse"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        sluice_limiter *lim = mk(specs[i]);
        sluice_http_policy a, b;
        pol(&a, "x", specs[i]);
        assert_int_equal(sluice_http_policy_from_limiter(&b, "x", lim), 0);
        assert_memory_equal(&a, &b, sizeof a);
        sluice_limiter_free(lim);
    }
}

/* RFC 4648 section 10's test vectors, and bytes that are not text. */
static void test_base64(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } v[] = {{"f", "Zg=="},     {"fo", "Zm8="},         {"foo", "Zm9v"},
             {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
    sluice_http_policy p;
    pol(&p, "k", "fixed-window 1/s");
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "\"k\";q=1;w=1;pk=:%s:", v[i].out);
        policy_value(&p, v[i].in, strlen(v[i].in), want);
    }
    const unsigned char bin[] = {0x00, 0xff, 0xfe, 0x3e, 0x3f};
    policy_value(&p, bin, sizeof bin, "\"k\";q=1;w=1;pk=:AP/+Pj8=:");
}

/* ---- t and Retry-After against the limiter ------------------------------ */

static uint64_t rnd_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) { return tu_xorshift64(&rnd_state); }

/* Random traffic on a limiter; after each decision, on a copy of the
 * traffic so far (a second limiter fed the same admissions):
 *  - r < burst: a probe at now + t seconds sees more than r remaining;
 *  - a refusal with Retry-After: the same request passes then, and
 *    Retry-After >= t and Retry-After s >= retry_after_ns. */
static void test_bounds_hold(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "fixed-window 7/3s",      "fixed-window 5/250ms",      "sliding-log 7/3s",
        "sliding-wheel 7/3s slots=30", "sliding-approx 7/3s", "sliding-approx 50/1500ms",
        "token-bucket 7/3s burst=3", "token-bucket 20/s",       "leaky-bucket 7/3s",
        "leaky-bucket 7/3s capacity=4 nodelay"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        sluice_http_policy p;
        pol(&p, "p", specs[s]);
        sluice_limiter *lim = mk(specs[s]);
        uint64_t t = 5 * SEC;
        uint64_t admitted[400][2]; /* (time, permits) */
        size_t n = 0;
        for (int i = 0; i < 300; i++) {
            t += rnd() % (700 * MS);
            uint64_t permits = 1 + rnd() % 3;
            sluice_result r;
            bool ok = sluice_try_acquire_at(lim, permits, t, &r);
            if (ok) {
                admitted[n][0] = t;
                admitted[n][1] = permits;
                n++;
            }
            sluice_http_state st;
            assert_int_equal(sluice_http_state_get(&p, &r, t, &st), 0);
            assert_int_equal(st.remaining, r.remaining);
            /* a twin limiter with the same admissions */
            sluice_limiter *twin = mk(specs[s]);
            for (size_t k = 0; k < n; k++)
                assert_true(sluice_try_acquire_at(twin, admitted[k][1], admitted[k][0], NULL));
            if (r.remaining < p.burst) {
                assert_true(st.reset_s >= 1);
                sluice_result later;
                sluice_try_acquire_at(twin, 0, t + (uint64_t)st.reset_s * SEC, &later);
                if (later.remaining <= r.remaining)
                    fail_msg("%s: r=%" PRIu64 " t=%" PRId64 " at %" PRIu64
                             " but still %" PRIu64 " then",
                             specs[s], r.remaining, st.reset_s, t, later.remaining);
            } else {
                assert_int_equal(st.reset_s, -1);
            }
            if (ok) {
                assert_int_equal(st.retry_after_s, 0);
            } else if (r.retry_after_ns < 0) {
                assert_int_equal(st.retry_after_s, -1);
            } else {
                assert_true(st.retry_after_s >= st.reset_s);
                assert_true((uint64_t)st.retry_after_s * SEC >= (uint64_t)r.retry_after_ns);
                assert_true((uint64_t)(st.retry_after_s - 1) * SEC < (uint64_t)r.retry_after_ns);
                assert_true(sluice_try_acquire_at(twin, permits,
                                                  t + (uint64_t)st.retry_after_s * SEC, NULL));
            }
            sluice_limiter_free(twin);
            if (n == 400) break;
        }
        sluice_limiter_free(lim);
    }
}

/* ---- short buffers ------------------------------------------------------ */

static void test_short_buffers(void **state)
{
    (void)state;
    sluice_http_policy p;
    sluice_limiter *lim = mk("fixed-window 100/min");
    pol(&p, "api", "fixed-window 100/min");
    take(lim, 100, 30 * SEC);
    sluice_result r;
    assert_false(sluice_try_acquire_at(lim, 1, 30 * SEC, &r));
    const char *whole = "RateLimit-Policy: \"api\";q=100;w=60;pk=:aw==:\r\n"
                        "RateLimit: \"api\";r=0;t=30;pk=:aw==:\r\n"
                        "Retry-After: 30\r\n"
                        "X-RateLimit-Limit: 100\r\nX-RateLimit-Remaining: 0\r\n"
                        "X-RateLimit-Reset: 30\r\n";
    const size_t n = strlen(whole);
    size_t need = 0;
    assert_int_equal(sluice_http_headers(&p, &r, 30 * SEC, "k", 1, SLUICE_HTTP_LEGACY, NULL, 0,
                                         &need),
                     SLUICE_ENOSPC);
    assert_int_equal(need, n);
    char buf[512];
    for (size_t len = 0; len <= n + 1; len++) {
        memset(buf, '#', sizeof buf);
        need = 0;
        int rc = sluice_http_headers(&p, &r, 30 * SEC, "k", 1, SLUICE_HTTP_LEGACY, buf, len,
                                     &need);
        assert_int_equal(need, n);
        assert_int_equal(rc, len > n ? 0 : SLUICE_ENOSPC);
        for (size_t i = len; i < sizeof buf; i++) assert_int_equal(buf[i], '#');
        if (len == 0) continue;
        /* the longest prefix of whole lines that fits with its NUL */
        size_t keep = 0;
        for (const char *e = whole; (e = strstr(e, "\r\n")) != NULL; e += 2)
            if ((size_t)(e + 2 - whole) < len) keep = (size_t)(e + 2 - whole);
        assert_int_equal(strlen(buf), keep);
        assert_memory_equal(buf, whole, keep);
    }

    /* appends: two items; short buffers keep whole items, *len counts all */
    sluice_http_policy q;
    pol(&q, "day", "fixed-window 5000/d");
    const char *list = "\"api\";q=100;w=60, \"day\";q=5000;w=86400";
    const size_t first = strlen("\"api\";q=100;w=60");
    for (size_t len = 0; len <= strlen(list) + 1; len++) {
        memset(buf, '#', sizeof buf);
        size_t at = 0;
        int rc1 = sluice_http_policy_value(&p, NULL, 0, len ? buf : NULL, len, &at);
        int rc2 = sluice_http_policy_value(&q, NULL, 0, len ? buf : NULL, len, &at);
        assert_int_equal(at, strlen(list));
        assert_int_equal(rc1, len > first ? 0 : SLUICE_ENOSPC);
        assert_int_equal(rc2, len > strlen(list) ? 0 : SLUICE_ENOSPC);
        for (size_t i = len; i < sizeof buf; i++) assert_int_equal(buf[i], '#');
        if (len == 0) continue;
        if (len > strlen(list))
            assert_string_equal(buf, list);
        else if (len > first)
            assert_string_equal(buf, "\"api\";q=100;w=60");
        else
            assert_string_equal(buf, "");
    }
    sluice_limiter_free(lim);
}

/* ---- bad arguments ------------------------------------------------------ */

static void test_bad_arguments(void **state)
{
    (void)state;
    sluice_http_policy p, keep;
    char err[256];
    pol(&keep, "ok", "fixed-window 1/s");
    p = keep;
    static const char *const bad_names[] = {"", "caf\xc3\xa9", "tab\there", "nl\n", "\x7f"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        err[0] = '\0';
        assert_int_equal(sluice_http_policy_init(&p, bad_names[i], "fixed-window 1/s", err,
                                                 sizeof err),
                         SLUICE_EINVAL);
        assert_non_null(strstr(err, "policy name"));
        assert_memory_equal(&p, &keep, sizeof p); /* untouched */
    }
    char longname[SLUICE_HTTP_NAME_MAX + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(sluice_http_policy_init(&p, longname, "fixed-window 1/s", err, sizeof err),
                     SLUICE_EINVAL);
    /* a bad spec: the parser's reason */
    assert_int_equal(sluice_http_policy_init(&p, "x", "fixed-window 1/s burst=3", err,
                                             sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "burst"));
    assert_int_equal(sluice_http_policy_init(&p, "x", "fixed-window 0/s", err, sizeof err) < 0,
                     true);
    assert_int_equal(sluice_http_policy_init(NULL, "x", "fixed-window 1/s", err, sizeof err),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_policy_init(&p, NULL, "fixed-window 1/s", err, sizeof err),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_policy_init(&p, "x", NULL, NULL, 0), SLUICE_EINVAL);
    assert_memory_equal(&p, &keep, sizeof p);
    assert_int_equal(sluice_http_policy_from_limiter(&p, "x", NULL), SLUICE_EINVAL);
    sluice_limiter *lim = mk("fixed-window 1/s");
    assert_int_equal(sluice_http_policy_from_limiter(NULL, "x", lim), SLUICE_EINVAL);
    assert_int_equal(sluice_http_policy_from_limiter(&p, NULL, lim), SLUICE_EINVAL);
    assert_int_equal(sluice_http_policy_from_limiter(&p, "", lim), SLUICE_EINVAL);
    sluice_limiter_free(lim);
    /* no error buffer, but a length: nothing is written through NULL */
    assert_int_equal(sluice_http_policy_init(&p, "x", NULL, NULL, 16), SLUICE_EINVAL);
    assert_memory_equal(&p, &keep, sizeof p);

    sluice_result r = {0};
    r.allowed = true;
    sluice_http_state st;
    assert_int_equal(sluice_http_state_get(NULL, &r, 0, &st), SLUICE_EINVAL);
    assert_int_equal(sluice_http_state_get(&keep, NULL, 0, &st), SLUICE_EINVAL);
    assert_int_equal(sluice_http_state_get(&keep, &r, 0, NULL), SLUICE_EINVAL);

    char buf[64] = "unchanged";
    size_t len = 0, need = 7;
    assert_int_equal(sluice_http_policy_value(NULL, NULL, 0, buf, sizeof buf, &len), SLUICE_EINVAL);
    assert_int_equal(sluice_http_policy_value(&keep, NULL, 1, buf, sizeof buf, &len), SLUICE_EINVAL);
    assert_int_equal(sluice_http_policy_value(&keep, NULL, 0, NULL, 5, &len), SLUICE_EINVAL);
    assert_int_equal(sluice_http_policy_value(&keep, NULL, 0, buf, sizeof buf, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_http_ratelimit_value(&keep, NULL, 0, NULL, 0, buf, sizeof buf, &len),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_ratelimit_value(&keep, &r, 0, NULL, 3, buf, sizeof buf, &len),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_ratelimit_value(NULL, &r, 0, NULL, 0, buf, sizeof buf, &len),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_ratelimit_value(&keep, &r, 0, NULL, 0, NULL, 5, &len),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_ratelimit_value(&keep, &r, 0, NULL, 0, buf, sizeof buf, NULL),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_headers(&keep, &r, 0, NULL, 0, 4, buf, sizeof buf, &need),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_headers(&keep, NULL, 0, NULL, 0, 0, buf, sizeof buf, &need),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_headers(NULL, &r, 0, NULL, 0, 0, buf, sizeof buf, &need),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_headers(&keep, &r, 0, NULL, 2, 0, buf, sizeof buf, &need),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_http_headers(&keep, &r, 0, NULL, 0, 0, NULL, 9, &need), SLUICE_EINVAL);
    assert_int_equal(len, 0);
    assert_int_equal(need, 7);
    assert_string_equal(buf, "unchanged");
    /* needed may be NULL: the block is written all the same */
    assert_int_equal(sluice_http_headers(&keep, &r, 0, NULL, 0, 0, buf, sizeof buf, NULL), 0);
    assert_string_equal(buf, "RateLimit-Policy: \"ok\";q=1;w=1\r\nRateLimit: \"ok\";r=0;t=1\r\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draft_policy_examples),
        cmocka_unit_test(test_draft_ratelimit_examples),
        cmocka_unit_test(test_draft_responses),
        cmocka_unit_test(test_algorithms_allowed),
        cmocka_unit_test(test_algorithms_refused),
        cmocka_unit_test(test_legacy),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_from_limiter),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_bounds_hold),
        cmocka_unit_test(test_short_buffers),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
