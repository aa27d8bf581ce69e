/* test_rls_decide.c -- sluice-rls's decision (server/rls/rls.c) at
 * injected times: windows aligned to multiples of the unit on the realtime
 * axis (one nanosecond short of the boundary, exactly on it), month and
 * year as 30 and 365 days, duration_until_reset, times near 2^63, and the
 * all-or-nothing rule.  The reference is arithmetic on the window index
 * floor(t / W), written here, not the library's limiter.
 */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "rls.h"

static const char CFG[] = "domain: t\n"
                          "descriptors:\n"
                          "  - {key: s, rate_limit: {unit: second, requests_per_unit: 2}}\n"
                          "  - {key: mo, rate_limit: {unit: month, requests_per_unit: 1}}\n"
                          "  - {key: y, rate_limit: {unit: year, requests_per_unit: 1}}\n"
                          "  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}\n"
                          "  - {key: big, rate_limit: {unit: day, requests_per_unit: 3}}\n"
                          "  - {key: five, rate_limit: {period: 5m, requests_per_unit: 2}}\n"
                          "  - {key: tb, rate_limit: {algorithm: token-bucket, period: 1s, requests_per_unit: 2,"
                          " burst: 4}}\n";

typedef struct call {
    Envoy__Service__Ratelimit__V3__RateLimitRequest req;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d[24], *dp[24];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e[24], *ep[24];
} call;

/* A request of n one-entry descriptors (keys[i], "v"). */
static void make(call *c, size_t n, const char *const keys[])
{
    envoy__service__ratelimit__v3__rate_limit_request__init(&c->req);
    c->req.domain = (char *)"t";
    c->req.n_descriptors = n;
    c->req.descriptors = c->dp;
    for (size_t i = 0; i < n; i++) {
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(&c->d[i]);
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(&c->e[i]);
        c->e[i].key = (char *)keys[i];
        c->e[i].value = (char *)"v";
        c->ep[i] = &c->e[i];
        c->d[i].n_entries = 1;
        c->d[i].entries = &c->ep[i];
        c->dp[i] = &c->d[i];
    }
}

static unsigned char scratch[RLS_SCRATCH_BYTES];

static int decide(rls_config *cfg, call *c, uint64_t t, rls_answer *a)
{
    rls_counts counts = {0};
    char msg[256];
    int rc = rls_should_rate_limit(cfg, &c->req, t, false, scratch, a, &counts, msg, sizeof msg);
    assert_int_equal(rc, 0);
    return a->resp.overall_code;
}

static rls_config *load(void)
{
    char err[256];
    rls_config *cfg = rls_config_new(1024);
    assert_non_null(cfg);
    assert_int_equal(rls_config_add_text(cfg, "t.yaml", CFG, sizeof CFG - 1, err, sizeof err), 0);
    return cfg;
}

#define OK ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
#define OVER ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
#define S 1000000000ull

static uint64_t reset_ns(const rls_answer *a, size_t i)
{
    const Google__Protobuf__Duration *d = a->resp.statuses[i]->duration_until_reset;
    return (uint64_t)d->seconds * S + (uint64_t)d->nanos;
}

/* Each unit's window ends exactly at the next multiple of its length. */
static void test_windows_align_to_the_epoch(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        uint64_t w;
        uint32_t limit;
    } u[] = {{"s", S, 2}, {"w", 7 * 86400 * S, 1}, {"mo", 30 * 86400 * S, 1}, {"y", 365 * 86400 * S, 1}};
    rls_config *cfg = load();
    for (size_t k = 0; k < sizeof u / sizeof u[0]; k++) {
        const uint64_t w = u[k].w;
        const uint64_t base = 1796256000ull * S / w * w + w; /* a window start, in 2026-2027 */
        call c;
        const char *keys[] = {u[k].key};
        make(&c, 1, keys);
        rls_answer a;
        /* Fill the window at its last nanosecond but one... */
        for (uint32_t i = 0; i < u[k].limit; i++)
            assert_int_equal(decide(cfg, &c, base + w - 2, &a), OK);
        assert_int_equal(reset_ns(&a, 0), 2);
        assert_int_equal(a.resp.statuses[0]->current_limit->unit, k == 0 ? 1 : k == 1 ? 7 : k == 2 ? 5 : 6);
        /* ... still full one nanosecond before the boundary ... */
        assert_int_equal(decide(cfg, &c, base + w - 1, &a), OVER);
        assert_int_equal(reset_ns(&a, 0), 1);
        /* ... and empty exactly on it. */
        assert_int_equal(decide(cfg, &c, base + w, &a), OK);
        assert_int_equal(reset_ns(&a, 0), w);
        assert_int_equal(a.resp.statuses[0]->limit_remaining, u[k].limit - 1);
    }
    rls_config_free(cfg);
}

/* Near the end of the time axis: no overflow, the same rule. */
static void test_times_near_2_63(void **state)
{
    (void)state;
    rls_config *cfg = load();
    call c;
    const char *keys[] = {"s"};
    make(&c, 1, keys);
    rls_answer a;
    uint64_t top = (UINT64_C(1) << 63) - 1;
    uint64_t start = top / S * S; /* the last second's window */
    assert_int_equal(decide(cfg, &c, top, &a), OK);
    assert_int_equal(reset_ns(&a, 0), start + S - top);
    assert_int_equal(decide(cfg, &c, top, &a), OK);
    assert_int_equal(decide(cfg, &c, top, &a), OVER);
    rls_config_free(cfg);
}

/* A refusal by one limit charges none: "big" (3 a day) keeps its count
 * while "s" (2 a second) refuses, then serves alone. */
static void test_all_or_nothing(void **state)
{
    (void)state;
    rls_config *cfg = load();
    call both, big;
    const char *kb[] = {"s", "big"}, *kg[] = {"big"};
    make(&both, 2, kb);
    make(&big, 1, kg);
    rls_answer a;
    const uint64_t t = 1800000000ull * S;
    assert_int_equal(decide(cfg, &both, t, &a), OK);
    assert_int_equal(decide(cfg, &both, t, &a), OK);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(decide(cfg, &both, t, &a), OVER);
        assert_int_equal(a.resp.statuses[0]->code, OVER);
        assert_int_equal(a.resp.statuses[1]->code, OK);
        assert_int_equal(a.resp.statuses[1]->limit_remaining, 1);
    }
    assert_int_equal(decide(cfg, &big, t, &a), OK);
    assert_int_equal(a.resp.statuses[0]->limit_remaining, 0);
    assert_int_equal(decide(cfg, &big, t, &a), OVER);
    rls_config_free(cfg);
}

/* hits_addend: the request's (0 means 1), a descriptor's (0 = a probe). */
static void test_hits(void **state)
{
    (void)state;
    rls_config *cfg = load();
    call c;
    const char *keys[] = {"big"};
    make(&c, 1, keys);
    rls_answer a;
    const uint64_t t = 1800000000ull * S;
    c.req.hits_addend = 2;
    assert_int_equal(decide(cfg, &c, t, &a), OK);
    assert_int_equal(a.resp.statuses[0]->limit_remaining, 1);
    Google__Protobuf__UInt64Value zero = GOOGLE__PROTOBUF__UINT64_VALUE__INIT;
    c.d[0].hits_addend = &zero;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(decide(cfg, &c, t, &a), OK);
        assert_int_equal(a.resp.statuses[0]->limit_remaining, 1);
    }
    c.d[0].hits_addend = NULL;
    assert_int_equal(decide(cfg, &c, t, &a), OVER); /* 2 more of 1 left */
    c.req.hits_addend = 0;                          /* means 1 */
    assert_int_equal(decide(cfg, &c, t, &a), OK);
    assert_int_equal(decide(cfg, &c, t, &a), OVER);
    rls_config_free(cfg);
}

/* Bad requests get a status and a message, and decide nothing. */
static void test_bad_requests(void **state)
{
    (void)state;
    rls_config *cfg = load();
    call c;
    const char *keys[] = {"big"};
    make(&c, 1, keys);
    rls_answer a;
    rls_counts counts = {0};
    char msg[256];
    c.req.domain = (char *)"";
    assert_int_equal(rls_should_rate_limit(cfg, &c.req, 1, false, scratch, &a, &counts, msg, sizeof msg),
                     RLS_GRPC_INVALID_ARGUMENT);
    assert_string_equal(msg, "rate limit domain must not be empty");
    c.req.domain = (char *)"t";
    c.d[0].n_entries = 0;
    assert_int_equal(rls_should_rate_limit(cfg, &c.req, 1, false, scratch, &a, &counts, msg, sizeof msg),
                     RLS_GRPC_INVALID_ARGUMENT);
    assert_string_equal(msg, "descriptor 0 has no entries");
    c.d[0].n_entries = 1;
    c.req.n_descriptors = 0;
    assert_int_equal(rls_should_rate_limit(cfg, &c.req, 1, false, scratch, &a, &counts, msg, sizeof msg),
                     RLS_GRPC_INVALID_ARGUMENT);
    /* Nothing was charged: the limit of 3 is whole. */
    c.req.n_descriptors = 1;
    c.req.hits_addend = 3;
    assert_int_equal(decide(cfg, &c, 1, &a), OK);
    rls_config_free(cfg);
}

/* 20 descriptors that all reach one key: one limit of the composite,
 * charged once, every status its answer (more enforced descriptors than
 * SLUICE_COMPOSITE_MAX: the case libFuzzer found overflowing a buffer). */
static void test_many_descriptors_one_key(void **state)
{
    (void)state;
    rls_config *cfg = load();
    call c;
    const char *keys[20];
    for (int i = 0; i < 20; i++)
        keys[i] = "big";
    make(&c, 20, keys);
    rls_answer a;
    const uint64_t t = 1800000000ull * S;
    for (uint32_t left = 2; left != UINT32_MAX; left--) {
        assert_int_equal(decide(cfg, &c, t, &a), OK);
        for (int i = 0; i < 20; i++)
            assert_int_equal(a.resp.statuses[i]->limit_remaining, left);
    }
    assert_int_equal(decide(cfg, &c, t, &a), OVER);
    rls_config_free(cfg);
}

/* `period: 5m`: windows on multiples of 300 s since the epoch. */
static void test_period_aligned(void **state)
{
    (void)state;
    rls_config *cfg = load();
    call c;
    const char *keys[] = {"five"};
    make(&c, 1, keys);
    rls_answer a;
    const uint64_t w = 300 * S, end = 1800000000ull * S / w * w + w; /* a window's end */
    assert_int_equal(decide(cfg, &c, end - 1, &a), OK);
    assert_int_equal(reset_ns(&a, 0), 1);
    assert_int_equal(a.resp.statuses[0]->current_limit->unit, 0); /* no unit is 5 minutes */
    assert_int_equal(decide(cfg, &c, end - 1, &a), OK);
    assert_int_equal(decide(cfg, &c, end - 1, &a), OVER);
    assert_int_equal(decide(cfg, &c, end, &a), OK);
    assert_int_equal(reset_ns(&a, 0), w);
    rls_config_free(cfg);
}

/* `algorithm: token-bucket`, 2 a second, burst 4: 4 at once, then one per
 * 500 ms -- tokens(t) computed here by hand. */
static void test_token_bucket(void **state)
{
    (void)state;
    rls_config *cfg = load();
    call c;
    const char *keys[] = {"tb"};
    make(&c, 1, keys);
    rls_answer a;
    const uint64_t t = 1800000000ull * S;
    for (int i = 0; i < 4; i++)
        assert_int_equal(decide(cfg, &c, t, &a), OK);
    assert_int_equal(decide(cfg, &c, t, &a), OVER);
    assert_int_equal(reset_ns(&a, 0), S); /* a token in 500 ms: 1 s rounded up */
    assert_int_equal(decide(cfg, &c, t + S / 2 - 1, &a), OVER);
    assert_int_equal(decide(cfg, &c, t + S / 2, &a), OK);
    assert_int_equal(decide(cfg, &c, t + S / 2, &a), OVER);
    assert_int_equal(a.resp.statuses[0]->current_limit->unit, 1); /* 1 s is SECOND */
    rls_config_free(cfg);
}

/* envoyproxy/ratelimit's `replaces`: a limit named in the `replaces` of
 * another limit matched by the same request is not applied (its
 * descriptor is answered OK with no current limit) and spends nothing;
 * alone, it applies. */
static void test_replaces(void **state)
{
    (void)state;
    static const char cfgtext[] =
        "domain: t\n"
        "descriptors:\n"
        "  - {key: gen, rate_limit: {unit: day, requests_per_unit: 1, name: general}}\n"
        "  - {key: vip, rate_limit: {unit: day, requests_per_unit: 3, name: vip, replaces: [{name: general}]}}\n"
        "  - {key: other, rate_limit: {unit: day, requests_per_unit: 5, replaces: [{name: nothing}, {name: vip}]}}\n";
    char err[256];
    rls_config *cfg = rls_config_new(1024);
    assert_non_null(cfg);
    assert_int_equal(rls_config_add_text(cfg, "r.yaml", cfgtext, sizeof cfgtext - 1, err, sizeof err), 0);
    assert_true(rls_config_has_replaces(cfg));
    static const char *const both[] = {"gen", "vip"};
    static const char *const gen[] = {"gen"};
    static const char *const three[] = {"gen", "vip", "other"};
    call c;
    rls_answer a;
    uint64_t t = 1000 * S;
    make(&c, 2, both);
    for (int i = 0; i < 3; i++) { /* vip's 3; general (1 a day) not applied */
        assert_int_equal(decide(cfg, &c, t, &a), OK);
        assert_null(a.resp.statuses[0]->current_limit);
        assert_int_equal(a.resp.statuses[1]->current_limit->requests_per_unit, 3);
        assert_int_equal(a.resp.statuses[1]->limit_remaining, 2 - i);
    }
    assert_int_equal(decide(cfg, &c, t, &a), OVER);
    assert_int_equal(a.resp.statuses[0]->code, OK);
    assert_int_equal(a.resp.statuses[1]->code, OVER);
    /* general alone: it applies, and the requests above spent none of it */
    make(&c, 1, gen);
    assert_int_equal(decide(cfg, &c, t, &a), OK);
    assert_int_equal(a.resp.statuses[0]->current_limit->requests_per_unit, 1);
    assert_int_equal(decide(cfg, &c, t, &a), OVER);
    /* other replaces vip, which replaces general: both are dropped (the
     * replaces of every matched limit count, as envoyproxy/ratelimit does) */
    make(&c, 3, three);
    for (int i = 0; i < 5; i++)
        assert_int_equal(decide(cfg, &c, t, &a), OK);
    assert_null(a.resp.statuses[0]->current_limit);
    assert_null(a.resp.statuses[1]->current_limit);
    assert_int_equal(decide(cfg, &c, t, &a), OVER);
    rls_config_free(cfg);
}

/* A request of n descriptors: descriptor i has the entries
 * (keys[i][0], values[i][0]) .. up to 4, ended by a NULL key. */
typedef struct mcall {
    Envoy__Service__Ratelimit__V3__RateLimitRequest req;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d[8], *dp[8];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e[8][4], *ep[8][4];
} mcall;

static void make_kv(mcall *c, size_t n, const char *const kv[][8])
{
    envoy__service__ratelimit__v3__rate_limit_request__init(&c->req);
    c->req.domain = (char *)"t";
    c->req.n_descriptors = n;
    c->req.descriptors = c->dp;
    for (size_t i = 0; i < n; i++) {
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(&c->d[i]);
        size_t m = 0;
        for (; m < 4 && kv[i][2 * m]; m++) {
            envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(&c->e[i][m]);
            c->e[i][m].key = (char *)kv[i][2 * m];
            c->e[i][m].value = (char *)kv[i][2 * m + 1];
            c->ep[i][m] = &c->e[i][m];
        }
        c->d[i].n_entries = m;
        c->d[i].entries = c->ep[i];
        c->dp[i] = &c->d[i];
    }
}

static int decide_kv(rls_config *cfg, mcall *c, uint64_t t, unsigned flags, rls_answer *a)
{
    rls_counts counts = {0};
    char msg[256];
    int rc = rls_should_rate_limit(cfg, &c->req, t, flags, scratch, a, &counts, msg, sizeof msg);
    assert_int_equal(rc, 0);
    return a->resp.overall_code;
}

static rls_config *load_text(const char *text)
{
    char err[256];
    rls_config *cfg = rls_config_new(1024);
    assert_non_null(cfg);
    assert_int_equal(rls_config_add_text(cfg, "q.yaml", text, strlen(text), err, sizeof err), 0);
    return cfg;
}

/* share_threshold (envoyproxy/ratelimit's README, example 11): the values a
 * wildcard with share_threshold matches share one counter, also when the
 * wildcard is a parent level; without it each value has its own.  A
 * share_threshold without a '*' is refused with envoyproxy's message. */
static void test_share_threshold(void **state)
{
    (void)state;
    rls_config *cfg = load_text("domain: t\n"
                                "descriptors:\n"
                                "  - {key: files, value: 'files/*', share_threshold: true,\n"
                                "     rate_limit: {unit: hour, requests_per_unit: 10}}\n"
                                "  - {key: files_no_share, value: 'files_no_share/*', share_threshold: false,\n"
                                "     rate_limit: {unit: hour, requests_per_unit: 10}}\n"
                                "  - key: route\n"
                                "    value: 'api/*'\n"
                                "    share_threshold: true\n"
                                "    descriptors:\n"
                                "      - {key: method, rate_limit: {unit: day, requests_per_unit: 2}}\n");
    mcall c;
    rls_answer a;
    uint64_t t = 3600 * S * 1000;
    static const char *const fa[][8] = {{"files", "files/a.pdf"}}, *const fb[][8] = {{"files", "files/b.csv"}},
                             *const fc[][8] = {{"files", "files/c.txt"}};
    for (int i = 0; i < 5; i++) {
        make_kv(&c, 1, fa);
        assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
        make_kv(&c, 1, fb);
        assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
        assert_int_equal(a.resp.statuses[0]->limit_remaining, 10 - 2 * (i + 1));
    }
    make_kv(&c, 1, fc); /* 5 + 5 spent the shared 10 */
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OVER);
    static const char *const na[][8] = {{"files_no_share", "files_no_share/a.pdf"}},
                             *const nb[][8] = {{"files_no_share", "files_no_share/b.csv"}};
    make_kv(&c, 1, na);
    for (int i = 0; i < 10; i++)
        assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OVER);
    make_kv(&c, 1, nb); /* its own 10 */
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    assert_int_equal(a.resp.statuses[0]->limit_remaining, 9);
    /* the wildcard at the parent level: api/v1 and api/v2 share per method */
    static const char *const v1[][8] = {{"route", "api/v1", "method", "GET"}},
                             *const v2[][8] = {{"route", "api/v2", "method", "GET"}},
                             *const v2p[][8] = {{"route", "api/v2", "method", "POST"}};
    make_kv(&c, 1, v1);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    make_kv(&c, 1, v2);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OVER);
    make_kv(&c, 1, v2p);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    assert_int_equal(a.resp.statuses[0]->limit_remaining, 1);
    rls_config_free(cfg);

    char err[256];
    static const char bad[] = "domain: t\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n"
                              "    rate_limit: {unit: day, requests_per_unit: 1}\n";
    cfg = rls_config_new(16);
    assert_int_equal(rls_config_add_text(cfg, "s.yaml", bad, sizeof bad - 1, err, sizeof err), -1);
    assert_string_equal(err, "s.yaml:3: share_threshold can only be used with wildcard values (containing '*'), "
                             "but found key 'k_v'");
    rls_config_free(cfg);
}

/* quota_mode (envoyproxy/ratelimit's service: the request is OVER_LIMIT iff
 * a rate limit descriptor is, or every quota descriptor is).  A quota
 * descriptor over its limit answers OVER_LIMIT and the request passes while
 * another quota descriptor can; when none can, nothing is charged; when a
 * regular limit refuses, no quota is charged.  QUOTA_MODE: every limit. */
static void test_quota_mode(void **state)
{
    (void)state;
    rls_config *cfg = load_text("domain: t\n"
                                "descriptors:\n"
                                "  - {key: q1, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}\n"
                                "  - {key: q2, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 2}}\n"
                                "  - {key: r, rate_limit: {unit: day, requests_per_unit: 5}}\n");
    mcall c;
    rls_answer a;
    uint64_t t = 86400 * S * 100;
    static const char *const all[][8] = {{"q1", "v"}, {"q2", "v"}, {"r", "v"}};
    make_kv(&c, 3, all);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK); /* q1 over, q2 can */
    assert_int_equal(a.resp.statuses[0]->code, OVER);
    assert_int_equal(a.resp.statuses[1]->code, OK);
    assert_int_equal(a.resp.statuses[1]->limit_remaining, 0);
    assert_int_equal(a.resp.statuses[2]->limit_remaining, 3);
    /* every quota descriptor over: refused, r not charged */
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OVER);
    assert_int_equal(a.resp.statuses[0]->code, OVER);
    assert_int_equal(a.resp.statuses[1]->code, OVER);
    assert_int_equal(a.resp.statuses[2]->code, OK);
    assert_int_equal(a.resp.statuses[2]->limit_remaining, 3);
    static const char *const r_only[][8] = {{"r", "v"}};
    make_kv(&c, 1, r_only);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
        assert_int_equal(a.resp.statuses[0]->limit_remaining, 2 - i);
    }
    /* r is spent: a fresh quota value is refused with it, and not charged */
    static const char *const fresh[][8] = {{"q1", "w"}, {"r", "v"}}, *const fresh_only[][8] = {{"q1", "w"}};
    make_kv(&c, 2, fresh);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OVER);
    assert_int_equal(a.resp.statuses[0]->code, OK);
    make_kv(&c, 1, fresh_only);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    assert_int_equal(a.resp.statuses[0]->limit_remaining, 0);
    /* QUOTA_MODE: r is a quota descriptor too, and the only one: refused */
    make_kv(&c, 1, r_only);
    assert_int_equal(decide_kv(cfg, &c, t, RLS_QUOTA_ALL, &a), OVER);
    static const char *const r_fresh[][8] = {{"r", "x"}, {"q1", "v"}};
    make_kv(&c, 2, r_fresh); /* r's fresh value can: OK, q1 over */
    assert_int_equal(decide_kv(cfg, &c, t, RLS_QUOTA_ALL, &a), OK);
    assert_int_equal(a.resp.statuses[1]->code, OVER);
    rls_config_free(cfg);
}

/* The count of value_to_metric's (or detailed_metric's) series `name` of
 * the limit a descriptor reaches, decision `which`; -1 when absent. */
static long detail_count(const rls_config *cfg, const char *const kv[8], const char *name, int which)
{
    const char *keys[4], *values[4];
    size_t kl[4], vl[4], n = 0;
    for (; n < 4 && kv[2 * n]; n++) {
        keys[n] = kv[2 * n];
        values[n] = kv[2 * n + 1];
        kl[n] = strlen(keys[n]);
        vl[n] = strlen(values[n]);
    }
    const rls_limit *lim = rls_config_find(cfg, "t", 1, keys, kl, values, vl, n);
    assert_non_null(lim);
    if (!lim->detail)
        return -1;
    for (size_t i = 0; i < lim->detail->n; i++) {
        if (!strcmp(lim->detail->e[i].key, name))
            return (long)lim->detail->e[i].v[which];
    }
    return -1;
}

/* value_to_metric (envoyproxy/ratelimit's README, example 10): the
 * request's values in the series' name where a level has value_to_metric,
 * the full value for a wildcard level with it; a path without it has no
 * per-value series; detailed_metric takes precedence. */
static void test_value_to_metric(void **state)
{
    (void)state;
    rls_config *cfg = load_text("domain: t\n"
                                "descriptors:\n"
                                "  - key: route\n"
                                "    value_to_metric: true\n"
                                "    descriptors:\n"
                                "      - key: http_method\n"
                                "        value_to_metric: true\n"
                                "        descriptors:\n"
                                "          - {key: subject_id, rate_limit: {unit: minute, requests_per_unit: 1}}\n"
                                "  - key: user\n"
                                "    value_to_metric: true\n"
                                "    descriptors:\n"
                                "      - key: action\n"
                                "        value: 'read*'\n"
                                "        value_to_metric: true\n"
                                "        descriptors:\n"
                                "          - {key: resource, rate_limit: {unit: minute, requests_per_unit: 100}}\n"
                                "  - key: plain\n"
                                "    descriptors:\n"
                                "      - {key: sub, rate_limit: {unit: minute, requests_per_unit: 100}}\n");
    mcall c;
    rls_answer a;
    uint64_t t = 60 * S * 1000;
    static const char *const get[][8] = {{"route", "api", "http_method", "GET", "subject_id", "123"}},
                             *const post[][8] = {{"route", "web", "http_method", "POST", "subject_id", "456"}},
                             *const rd[][8] = {{"user", "alice", "action", "readfile", "resource", "documents"}},
                             *const pl[][8] = {{"plain", "x", "sub", "y"}};
    make_kv(&c, 1, get);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OVER);
    make_kv(&c, 1, post);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    make_kv(&c, 1, rd);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    make_kv(&c, 1, pl);
    assert_int_equal(decide_kv(cfg, &c, t, 0, &a), OK);
    assert_int_equal(detail_count(cfg, get[0], "t.route_api.http_method_GET.subject_id", 0), 1);
    assert_int_equal(detail_count(cfg, get[0], "t.route_api.http_method_GET.subject_id", 1), 1);
    assert_int_equal(detail_count(cfg, get[0], "t.route_web.http_method_POST.subject_id", 0), 1);
    assert_int_equal(detail_count(cfg, rd[0], "t.user_alice.action_readfile.resource", 0), 1);
    assert_int_equal(detail_count(cfg, pl[0], "t.plain_x.sub_y", 0), -1); /* no series */
    rls_config_free(cfg);
}

/* `metadata` must be a mapping whose keys are scalars; refused with the
 * file and line otherwise, and kept (packed) when good. */
static void test_metadata_config(void **state)
{
    (void)state;
    char err[256];
    static const char list[] = "domain: t\ndescriptors:\n  - key: k\n    metadata: [1, 2]\n"
                               "    rate_limit: {unit: day, requests_per_unit: 1}\n";
    static const char key[] = "domain: t\ndescriptors:\n  - key: k\n    metadata: {[a]: 1}\n"
                              "    rate_limit: {unit: day, requests_per_unit: 1}\n";
    static const char good[] = "domain: t\ndescriptors:\n  - key: k\n    metadata: {a: {b: [1, x]}}\n"
                               "    rate_limit: {unit: day, requests_per_unit: 1}\n";
    rls_config *cfg = rls_config_new(16);
    assert_int_equal(rls_config_add_text(cfg, "m.yaml", list, sizeof list - 1, err, sizeof err), -1);
    assert_string_equal(err, "m.yaml:4: 'metadata' must be a mapping");
    assert_int_equal(rls_config_add_text(cfg, "m.yaml", key, sizeof key - 1, err, sizeof err), -1);
    assert_string_equal(err, "m.yaml:4: metadata keys must be strings");
    assert_int_equal(rls_config_add_text(cfg, "m.yaml", good, sizeof good - 1, err, sizeof err), 0);
    static const char *const k[] = {"k"}, *const v[] = {"v"};
    static const size_t kl[] = {1}, vl[] = {1};
    const rls_limit *lim = rls_config_find(cfg, "t", 1, k, kl, v, vl, 1);
    assert_non_null(lim);
    assert_non_null(lim->metadata);
    assert_true(lim->metadata_len > 0);
    rls_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows_align_to_the_epoch),
        cmocka_unit_test(test_times_near_2_63),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_hits),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_period_aligned),
        cmocka_unit_test(test_many_descriptors_one_key),
        cmocka_unit_test(test_token_bucket),
        cmocka_unit_test(test_replaces),
        cmocka_unit_test(test_share_threshold),
        cmocka_unit_test(test_quota_mode),
        cmocka_unit_test(test_value_to_metric),
        cmocka_unit_test(test_metadata_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
