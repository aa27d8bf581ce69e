/* test_redis_metrics.c -- the Redis tier's series in a metrics registry
 * (sluice_metrics_add_redis), against a private redis-server.
 *
 * Each scenario makes decisions and breaks the server in ways whose effect
 * on the counters follows from the documented behaviour of the tier
 * (docs/redis.md): the values expected are stated by the test from what it
 * did, read back from the exposition by a small reader of its own, and the
 * exposition is checked with `promtool check metrics` and parsed back with
 * python3-prometheus-client (when installed).
 *
 *  - exact mode (one round trip per decision), then SIGKILL: the first
 *    call fails on the pooled connection (io), the next two cannot connect
 *    (connect) and open the circuit (threshold 3), the rest are refused by
 *    the open circuit (circuit); each is a fallback decided by the policy;
 *  - SIGSTOP: a call times out and opens the circuit (threshold 1); after
 *    the backoff a probe is in flight (half-open, seen from another
 *    thread), times out, reopens it; after SIGCONT the next probe closes it;
 *  - two-tier mode with the local clock injected: leases taken, spent,
 *    grown, expired (their unspent permits dropped), as the adaptation rule
 *    says.
 *  - the cluster families on a single server: mode 0, one node, no
 *    redirects or retries, one CLUSTER SLOTS answered (AUTO mode asks it
 *    once); test_redis_cluster checks them on a fake node and on the live
 *    cluster.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sluice.h>
#include <sluice/redis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_server.h"
#include "testutil.h"

#define MSEC 1000000ULL
#define SEC 1000000000ULL

static sluice_redis *mk(const char *spec, int port, uint32_t threshold, uint32_t retry_ms,
                        uint32_t timeout_ms, uint32_t lease_max,
                        uint64_t (*clock_fn)(void *), void *clock_arg)
{
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = port;
    cfg.policy = SLUICE_REDIS_FAIL_CLOSED;
    cfg.command_timeout_ms = timeout_ms;
    cfg.connect_timeout_ms = timeout_ms;
    cfg.pool_size = 1; /* one connection: which call meets the broken one is known */
    cfg.circuit_threshold = threshold;
    cfg.retry_min_ms = retry_ms;
    cfg.retry_max_ms = retry_ms;
    cfg.lease_max = lease_max;
    cfg.lease_ttl_ms = lease_max ? 1000 : 0;
    cfg.clock_fn = clock_fn;
    cfg.clock_arg = clock_arg;
    char err[256];
    sluice_redis *r = sluice_redis_new(spec, &cfg, err, sizeof err);
    if (!r) fail_msg("%s: %s", spec, err);
    return r;
}

/* The whole exposition (freed by the caller). */
static char *render(const sluice_metrics *m)
{
    size_t need = 0;
    assert_int_equal(sluice_metrics_write(m, NULL, 0, &need), SLUICE_ENOSPC);
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    assert_int_equal(sluice_metrics_write(m, buf, need + 1, NULL), 0);
    return buf;
}

/* The value of the one sample line `series VALUE`; fails if there is not
 * exactly one, or it is not a decimal integer. */
static uint64_t sample(const char *text, const char *series)
{
    size_t sl = strlen(series);
    const char *found = NULL;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        if ((size_t)(nl - line) > sl && memcmp(line, series, sl) == 0 && line[sl] == ' ') {
            if (found) fail_msg("two lines for %s", series);
            found = line + sl + 1;
        }
        line = nl + 1;
    }
    if (!found) fail_msg("no line for %s in:\n%s", series, text);
    char *end;
    unsigned long long v = strtoull(found, &end, 10);
    if (end == found || *end != '\n') fail_msg("bad value for %s", series);
    return v;
}

/* Every series of one limiter, as the test expects them. */
typedef struct want {
    uint64_t allowed, denied, round_trips, fallbacks;
    uint64_t err_connect, err_timeout, err_io, err_protocol, err_reply, err_pool, err_circuit;
    uint64_t leases, lease_taken, lease_dropped, circuit_state, circuit_opens;
    /* the cluster families, on a single server: mode 0, one node, no
     * redirects or retries; refreshes: the one CLUSTER SLOTS of AUTO mode */
    uint64_t refreshes;
} want;

static void check(const char *text, const char *name, const want *w)
{
    char s[256];
#define S(fmt, ...) (snprintf(s, sizeof s, fmt, name, ##__VA_ARGS__), sample(text, s))
    assert_int_equal(S("sluice_redis_requests_total{limit=\"%s\",decision=\"allowed\"}"), w->allowed);
    assert_int_equal(S("sluice_redis_requests_total{limit=\"%s\",decision=\"denied\"}"), w->denied);
    if (S("sluice_redis_round_trips_total{limit=\"%s\"}") != w->round_trips)
        fail_msg("round trips: want %llu in\n%s", (unsigned long long)w->round_trips, text);
    assert_int_equal(S("sluice_redis_fallbacks_total{limit=\"%s\"}"), w->fallbacks);
    static const char *const kinds[] = {"connect", "timeout", "io", "protocol", "reply", "pool",
                                        "circuit"};
    const uint64_t errs[] = {w->err_connect, w->err_timeout, w->err_io,     w->err_protocol,
                             w->err_reply,   w->err_pool,    w->err_circuit};
    for (int i = 0; i < 7; i++) {
        snprintf(s, sizeof s, "sluice_redis_errors_total{limit=\"%s\",kind=\"%s\"}", name, kinds[i]);
        uint64_t got = sample(text, s);
        if (got != errs[i])
            fail_msg("errors of kind %s: %llu, the test caused %llu\n%s", kinds[i],
                     (unsigned long long)got, (unsigned long long)errs[i], text);
    }
    assert_int_equal(S("sluice_redis_leases_total{limit=\"%s\"}"), w->leases);
    assert_int_equal(S("sluice_redis_lease_permits_total{limit=\"%s\",outcome=\"taken\"}"),
                     w->lease_taken);
    assert_int_equal(S("sluice_redis_lease_permits_total{limit=\"%s\",outcome=\"dropped\"}"),
                     w->lease_dropped);
    assert_int_equal(S("sluice_redis_circuit_state{limit=\"%s\"}"), w->circuit_state);
    assert_int_equal(S("sluice_redis_circuit_opens_total{limit=\"%s\"}"), w->circuit_opens);
    assert_int_equal(S("sluice_redis_cluster_mode{limit=\"%s\"}"), 0);
    assert_int_equal(S("sluice_redis_cluster_nodes{limit=\"%s\"}"), 1);
    assert_int_equal(S("sluice_redis_cluster_redirects_total{limit=\"%s\",kind=\"moved\"}"), 0);
    assert_int_equal(S("sluice_redis_cluster_redirects_total{limit=\"%s\",kind=\"ask\"}"), 0);
    assert_int_equal(S("sluice_redis_cluster_retries_total{limit=\"%s\",reason=\"tryagain\"}"), 0);
    assert_int_equal(S("sluice_redis_cluster_retries_total{limit=\"%s\",reason=\"clusterdown\"}"),
                     0);
    assert_int_equal(S("sluice_redis_cluster_slot_refreshes_total{limit=\"%s\"}"), w->refreshes);
#undef S
}

static void check_tools(const char *text)
{
    char msg[512];
    int rc = tu_check_exposition(text, msg, sizeof msg);
    if (rc == 2) fprintf(stderr, "# not checked with the Prometheus tools: %s\n", msg);
    else if (rc != 0) fail_msg("%s\n%s", msg, text);
}

static bool decide(sluice_redis *r, const char *key, uint64_t permits, int want_source)
{
    sluice_redis_info info;
    sluice_result res;
    bool ok = sluice_redis_try_acquire_ex(r, key, strlen(key), permits, &res, &info);
    if (info.source != want_source)
        fail_msg("%s: source %d, expected %d (error %d)", key, info.source, want_source, info.error);
    return ok;
}

/* Exact mode, then SIGKILL. */
static void test_kill(void **state)
{
    (void)state;
    test_redis srv;
    assert_int_equal(test_redis_start(&srv, 0), 0);
    /* the circuit, once open, stays open for the rest of the test (60 s) */
    sluice_redis *r = mk("token-bucket 3/h", srv.port, 3, 60000, 500, 0, NULL, NULL);
    char err[128];
    sluice_limiter *lim = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    assert_non_null(lim);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_limiter(m, "local", lim), 0);
    assert_int_equal(sluice_metrics_add_redis(m, "global", r), 0);
    assert_int_equal(sluice_metrics_add_redis(m, "global", r), SLUICE_EINVAL); /* once */
    assert_int_equal(sluice_metrics_add_redis(NULL, "x", r), SLUICE_EINVAL);

    want w = {0};
    char *text = render(m);
    check(text, "global", &w);
    check_tools(text);
    free(text);

    /* 3 per hour: three admitted, two refused, a probe (a round trip too);
     * the first EVALSHA on the new server is answered NOSCRIPT and sent
     * again as EVAL: one round trip more */
    for (int i = 0; i < 5; i++)
        assert_int_equal(decide(r, "k", 1, SLUICE_REDIS_SRC_REDIS), i < 3);
    assert_true(decide(r, "k", 0, SLUICE_REDIS_SRC_REDIS));
    w.allowed = 4, w.denied = 2, w.round_trips = 6 + 1;
    w.refreshes = 1; /* AUTO: one CLUSTER SLOTS, answered "cluster support disabled" */
    text = render(m);
    check(text, "global", &w);
    free(text);

    test_redis_kill(&srv);
    for (int i = 0; i < 6; i++) assert_false(decide(r, "k", 1, SLUICE_REDIS_SRC_POLICY));
    /* the pooled connection breaks (sent: a round trip), two connects are
     * refused, the third failure opens the circuit, three calls are kept
     * off the network; all six decided by the policy (fail closed) */
    w.denied += 6, w.round_trips += 1, w.fallbacks = 6;
    w.err_io = 1, w.err_connect = 2, w.err_circuit = 3;
    w.circuit_state = SLUICE_REDIS_CIRCUIT_OPEN, w.circuit_opens = 1;
    text = render(m);
    check(text, "global", &w);
    check_tools(text);
    /* the core's series are there too, before the sources' */
    const char *core = strstr(text, "sluice_requests_total{limit=\"local\"");
    const char *src = strstr(text, "# HELP sluice_redis_requests_total");
    assert_non_null(core);
    assert_non_null(src);
    assert_true(core < src);
    free(text);

    /* removed: gone from the exposition */
    assert_int_equal(sluice_metrics_remove(m, r), 0);
    text = render(m);
    assert_null(strstr(text, "sluice_redis_"));
    free(text);
    sluice_metrics_free(m);
    sluice_limiter_free(lim);
    sluice_redis_free(r);
    test_redis_stop(&srv);
}

/* A call on another thread, for the probe that hangs on a frozen server. */
typedef struct call {
    sluice_redis *r;
    _Atomic bool done;
    bool ok;
    sluice_redis_info info;
} call;

static void *call_thread(void *p)
{
    call *c = p;
    sluice_result res;
    c->ok = sluice_redis_try_acquire_ex(c->r, "h", 1, 1, &res, &c->info);
    atomic_store(&c->done, true);
    return NULL;
}

static int circuit_state(sluice_redis *r)
{
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    return st.circuit_state;
}

/* SIGSTOP: timeouts, an open circuit, a probe in flight, a closed circuit. */
static void test_half_open(void **state)
{
    (void)state;
    test_redis srv;
    assert_int_equal(test_redis_start(&srv, 0), 0);
    /* threshold 1, backoff 40 ms (jittered to 30 .. 40 ms), deadline 400 ms */
    sluice_redis *r = mk("token-bucket 1000/s burst=1000", srv.port, 1, 40, 400, 0, NULL, NULL);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_redis(m, "frozen", r), 0);
    assert_true(decide(r, "h", 1, SLUICE_REDIS_SRC_REDIS));
    want w = {.allowed = 1, .round_trips = 2, .refreshes = 1}; /* NOSCRIPT, then EVAL */
    char *text = render(m);
    check(text, "frozen", &w);
    free(text);

    test_redis_freeze(&srv); /* the kernel still takes the request */
    assert_false(decide(r, "h", 1, SLUICE_REDIS_SRC_POLICY));
    w.denied = 1, w.round_trips = 3, w.fallbacks = 1, w.err_timeout = 1;
    w.circuit_state = SLUICE_REDIS_CIRCUIT_OPEN, w.circuit_opens = 1;
    text = render(m);
    check(text, "frozen", &w);
    free(text);

    /* past the backoff (no _at form: the tier's deadlines are real), a
     * probe: it connects anew (the old context was discarded), sends, and
     * waits; meanwhile the circuit is half-open */
    tu_sleep_ns(60 * MSEC);
    call c = {.r = r};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, call_thread, &c), 0);
    int seen = -1;
    for (int i = 0; i < 300 && !atomic_load(&c.done); i++) { /* <= 300 ms: within its deadline */
        if ((seen = circuit_state(r)) == SLUICE_REDIS_CIRCUIT_HALF_OPEN) break;
        tu_sleep_ns(1 * MSEC);
    }
    if (seen == SLUICE_REDIS_CIRCUIT_HALF_OPEN) {
        text = render(m);
        w.circuit_state = SLUICE_REDIS_CIRCUIT_HALF_OPEN;
        /* the probe counts its round trip when it sends, after connecting */
        uint64_t rt = sample(text, "sluice_redis_round_trips_total{limit=\"frozen\"}");
        assert_true(rt == 3 || rt == 4);
        w.round_trips = rt;
        check(text, "frozen", &w);
        check_tools(text);
        free(text);
    } else {
        fail_msg("the probe was not seen in flight (state %d)", seen);
    }
    pthread_join(th, NULL);
    assert_false(c.ok);
    assert_int_equal(c.info.source, SLUICE_REDIS_SRC_POLICY);
    assert_int_equal(c.info.error, SLUICE_ETIMEDOUT);
    /* the probe failed: open again (not a new opening) */
    w.denied = 2, w.round_trips = 4, w.fallbacks = 2, w.err_timeout = 2;
    w.circuit_state = SLUICE_REDIS_CIRCUIT_OPEN;
    text = render(m);
    check(text, "frozen", &w);
    free(text);

    /* back: after the backoff the next call probes and closes it */
    test_redis_thaw(&srv);
    tu_sleep_ns(60 * MSEC);
    assert_true(decide(r, "h", 1, SLUICE_REDIS_SRC_REDIS));
    w.allowed = 2, w.round_trips = 5;
    w.circuit_state = SLUICE_REDIS_CIRCUIT_CLOSED;
    text = render(m);
    check(text, "frozen", &w);
    check_tools(text);
    free(text);

    sluice_metrics_free(m);
    sluice_redis_free(r);
    test_redis_stop(&srv);
}

static uint64_t fake_now;
static uint64_t fake_clock(void *arg)
{
    (void)arg;
    return fake_now;
}

/* Two tiers: leases on an injected local clock (lease_ttl 1 s; a lease's
 * size starts at 1 surplus permit, doubles when spent within half its
 * lifetime, halves when it expires more than half unspent). */
static void test_leases(void **state)
{
    (void)state;
    test_redis srv;
    assert_int_equal(test_redis_start(&srv, 0), 0);
    fake_now = 1000 * SEC;
    sluice_redis *r = mk("token-bucket 100000/h burst=100000", srv.port, 3, 1000, 500, 8,
                         fake_clock, NULL);
    sluice_redis_limits lim;
    sluice_redis_limits_get(r, &lim);
    assert_int_equal(lim.lease_cap, 8);
    assert_int_equal(lim.lease_ttl_ns, SEC);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_redis(m, "leased", r), 0);

    /* 1: a round trip (two: NOSCRIPT, then EVAL) asks 1 + 1, keeps a
     * lease of 1 */
    assert_true(decide(r, "L", 1, SLUICE_REDIS_SRC_REDIS));
    /* 2: spent from the lease, at once: the next lease doubles (2) */
    assert_true(decide(r, "L", 1, SLUICE_REDIS_SRC_LEASE));
    /* 3: a round trip asks 1 + 2, keeps 2 */
    assert_true(decide(r, "L", 1, SLUICE_REDIS_SRC_REDIS));
    want w = {.allowed = 3, .round_trips = 3, .leases = 2, .lease_taken = 3, .refreshes = 1};
    char *text = render(m);
    check(text, "leased", &w);
    free(text);
    /* 4: 2 s later the lease of 2 has expired unspent (dropped; the size
     * halves to 1); a round trip asks 1 + 1, keeps 1 */
    fake_now += 2 * SEC;
    assert_true(decide(r, "L", 1, SLUICE_REDIS_SRC_REDIS));
    w.allowed = 4, w.round_trips = 4, w.leases = 3, w.lease_taken = 4, w.lease_dropped = 2;
    text = render(m);
    check(text, "leased", &w);
    check_tools(text);
    free(text);

    sluice_metrics_free(m);
    sluice_redis_free(r);
    test_redis_stop(&srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill),
        cmocka_unit_test(test_half_open),
        cmocka_unit_test(test_leases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
