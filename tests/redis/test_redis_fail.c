/* test_redis_fail.c -- Redis failing under a running limiter.
 *
 * Each scenario runs decision threads against a private redis-server while
 * the test breaks it: SIGKILL and restart on the same port, SIGSTOP and
 * SIGCONT, SCRIPT FLUSH, an error reply (WRONGTYPE), a server that turns
 * read-only (REPLICAOF, as after a failover), nothing listening, a listener
 * that never accepts (connect timeout).  Checked each time: every call
 * returns within command_timeout_ms (plus scheduling slack), the policy is
 * what decides while Redis cannot, the errors are counted by kind, the
 * circuit opens and stops the connection attempts, and the decisions come
 * back to Redis once it is back.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sluice.h>
#include <sluice/redis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "redis_server.h"
#include "testutil.h"

#define MSEC 1000000ULL
#define SEC 1000000000ULL
#define TIMEOUT_MS 60
/* A loaded 2-core CI machine can deschedule a thread for a while; a call
 * past its deadline by more than this fails the test. */
#define SLACK_NS (300 * MSEC) /* a hang would be seconds: the bound still tells */

static sluice_redis *mk_timeout(const char *spec, int port, int policy, uint32_t lease_max,
                               uint32_t timeout_ms)
{
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = port;
    cfg.policy = policy;
    cfg.command_timeout_ms = timeout_ms;
    cfg.connect_timeout_ms = 40;
    cfg.pool_size = 4;
    cfg.retry_min_ms = 20;
    cfg.retry_max_ms = 200;
    cfg.lease_max = lease_max;
    cfg.expected_processes = 2;
    char err[256];
    sluice_redis *r = sluice_redis_new(spec, &cfg, err, sizeof err);
    if (!r) fail_msg("%s: %s", spec, err);
    return r;
}

static sluice_redis *mk(const char *spec, int port, int policy, uint32_t lease_max)
{
    return mk_timeout(spec, port, policy, lease_max, TIMEOUT_MS);
}

/* Counts by phase and source, filled by the decision threads. */
enum { PH_BEFORE, PH_DOWN, PH_AFTER, PH_N };
typedef struct counts {
    _Atomic uint64_t n[PH_N][5][2]; /* phase, source, allowed */
    _Atomic uint64_t max_ns, over;  /* longest call; calls past deadline+slack */
} counts;

typedef struct runner {
    sluice_redis *r;
    counts *c;
    _Atomic int phase;
    _Atomic bool stop;
    int nthreads;
    pthread_t th[4];
    const char *key;
} runner;

static void *decide_loop(void *arg)
{
    runner *u = arg;
    /* bounded: at most 10 million calls, and the test stops it */
    for (int i = 0; i < 10000000 && !atomic_load(&u->stop); i++) {
        sluice_redis_info info;
        sluice_result res;
        uint64_t t0 = test_now_ns();
        bool ok = sluice_redis_try_acquire_ex(u->r, u->key, strlen(u->key), 1, &res, &info);
        uint64_t d = test_now_ns() - t0;
        int ph = atomic_load(&u->phase);
        atomic_fetch_add(&u->c->n[ph][info.source][ok], 1);
        uint64_t m = atomic_load(&u->c->max_ns);
        while (d > m && !atomic_compare_exchange_weak(&u->c->max_ns, &m, d)) {
        }
        if (d > TIMEOUT_MS * MSEC + SLACK_NS) atomic_fetch_add(&u->c->over, 1);
        tu_sleep_ns(200 * 1000); /* 5000 calls/s per thread at most */
    }
    return NULL;
}

static void start(runner *u, sluice_redis *r, counts *c, int nthreads, const char *key)
{
    memset(c, 0, sizeof *c);
    u->r = r;
    u->c = c;
    u->key = key;
    atomic_store(&u->phase, PH_BEFORE);
    atomic_store(&u->stop, false);
    u->nthreads = nthreads;
    for (int i = 0; i < nthreads; i++) assert_int_equal(pthread_create(&u->th[i], NULL, decide_loop, u), 0);
}

static void finish(runner *u)
{
    atomic_store(&u->stop, true);
    for (int i = 0; i < u->nthreads; i++) pthread_join(u->th[i], NULL);
}

static uint64_t sum_src(counts *c, int ph, int src)
{
    return atomic_load(&c->n[ph][src][0]) + atomic_load(&c->n[ph][src][1]);
}

static void print_stats(const char *what, sluice_redis *r, counts *c)
{
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    fprintf(stderr,
            "# %s: max call %.1f ms; redis/policy before %llu/%llu down %llu/%llu after %llu/%llu; "
            "err connect=%llu timeout=%llu io=%llu reply=%llu circuit=%llu pool=%llu; "
            "connects=%llu reconnects=%llu discarded=%llu opens=%llu closes=%llu noscript=%llu\n",
            what, (double)atomic_load(&c->max_ns) / 1e6,
            (unsigned long long)sum_src(c, PH_BEFORE, SLUICE_REDIS_SRC_REDIS),
            (unsigned long long)sum_src(c, PH_BEFORE, SLUICE_REDIS_SRC_POLICY),
            (unsigned long long)sum_src(c, PH_DOWN, SLUICE_REDIS_SRC_REDIS),
            (unsigned long long)sum_src(c, PH_DOWN, SLUICE_REDIS_SRC_POLICY),
            (unsigned long long)sum_src(c, PH_AFTER, SLUICE_REDIS_SRC_REDIS),
            (unsigned long long)sum_src(c, PH_AFTER, SLUICE_REDIS_SRC_POLICY),
            (unsigned long long)st.err_connect, (unsigned long long)st.err_timeout,
            (unsigned long long)st.err_io, (unsigned long long)st.err_reply,
            (unsigned long long)st.err_circuit, (unsigned long long)st.err_pool,
            (unsigned long long)st.connects, (unsigned long long)st.reconnects,
            (unsigned long long)st.discarded, (unsigned long long)st.circuit_opens,
            (unsigned long long)st.circuit_closes, (unsigned long long)st.noscript);
}

/* Wait (bounded) until the limiter reaches Redis again (its circuit
 * closed); returns how long it took from `since`. */
static uint64_t recovery_ns(sluice_redis *r, uint64_t since)
{
    for (int i = 0; i < 2000; i++) { /* at most ~10 s */
        if (sluice_redis_ping(r) == 0) return test_now_ns() - since;
        tu_sleep_ns(5 * MSEC);
    }
    fail_msg("no recovery within 10 s");
    return 0;
}

/* SIGKILL mid-run, restart on the same port: each policy is observed while
 * it is down, nothing hangs, decisions come back to Redis. */
static void kill_restart(int policy, const char *name)
{
    test_redis srv;
    assert_int_equal(test_redis_start(&srv, 0), 0);
    sluice_redis *r = mk("token-bucket 200/s burst=20", srv.port, policy, 0);
    counts c;
    runner u;
    start(&u, r, &c, 2, "k");
    tu_sleep_ns(400 * MSEC);
    test_redis_kill(&srv);
    atomic_store(&u.phase, PH_DOWN);
    tu_sleep_ns(800 * MSEC);
    assert_int_equal(test_redis_start(&srv, srv.port), 0);
    uint64_t t_up = test_now_ns();
    uint64_t rec = recovery_ns(r, t_up);
    atomic_store(&u.phase, PH_AFTER);
    tu_sleep_ns(400 * MSEC);
    finish(&u);
    char what[64];
    snprintf(what, sizeof what, "SIGKILL+restart, %s", name);
    print_stats(what, r, &c);
    fprintf(stderr, "# %s: back to Redis %.1f ms after the restart\n", what, (double)rec / 1e6);
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    assert_int_equal(atomic_load(&c.over), 0);
    assert_true(sum_src(&c, PH_BEFORE, SLUICE_REDIS_SRC_REDIS) > 50);
    assert_true(sum_src(&c, PH_DOWN, SLUICE_REDIS_SRC_POLICY) > 10);
    assert_true(sum_src(&c, PH_AFTER, SLUICE_REDIS_SRC_REDIS) > 50);
    assert_true(st.circuit_opens >= 1);
    assert_true(st.circuit_closes >= 1);
    assert_true(st.reconnects >= 1);
    assert_true(st.err_connect + st.err_io >= 1);
    assert_true(st.err_circuit >= 1); /* the circuit kept calls off the network */
    /* connection attempts while down are bounded by the backoff, not by the
     * call rate (2 threads x up to 5000 calls/s for 0.8 s) */
    assert_true(st.err_connect < 100);
    assert_true(rec < 1 * SEC);
    /* the policy */
    uint64_t down_ok = atomic_load(&c.n[PH_DOWN][SLUICE_REDIS_SRC_POLICY][1]);
    uint64_t down_no = atomic_load(&c.n[PH_DOWN][SLUICE_REDIS_SRC_POLICY][0]);
    if (policy == SLUICE_REDIS_FAIL_CLOSED) assert_int_equal(down_ok, 0);
    if (policy == SLUICE_REDIS_FAIL_OPEN) assert_int_equal(down_no, 0);
    if (policy == SLUICE_REDIS_FAIL_LOCAL) {
        /* 100/s burst 10 locally (200/s over 2 processes); down for 0.8 s
         * plus the restart and the recovery (at most ~2 s on a busy machine) */
        assert_true(down_ok >= 10 && down_ok <= 10 + 100 * 3);
        assert_true(down_no > 0);
    }
    sluice_redis_free(r);
    test_redis_stop(&srv);
}

static void test_kill_closed(void **state)
{
    (void)state;
    kill_restart(SLUICE_REDIS_FAIL_CLOSED, "fail-closed");
}
static void test_kill_open(void **state)
{
    (void)state;
    kill_restart(SLUICE_REDIS_FAIL_OPEN, "fail-open");
}
static void test_kill_local(void **state)
{
    (void)state;
    kill_restart(SLUICE_REDIS_FAIL_LOCAL, "fail-local");
}

/* SIGSTOP: the kernel still accepts connections and takes the requests,
 * nothing answers.  Every call returns within its deadline. */
static void test_sigstop(void **state)
{
    (void)state;
    test_redis srv;
    assert_int_equal(test_redis_start(&srv, 0), 0);
    sluice_redis *r = mk("sliding-approx 500/s", srv.port, SLUICE_REDIS_FAIL_LOCAL, 0);
    counts c;
    runner u;
    start(&u, r, &c, 3, "s");
    tu_sleep_ns(300 * MSEC);
    test_redis_freeze(&srv);
    atomic_store(&u.phase, PH_DOWN);
    tu_sleep_ns(1200 * MSEC);
    test_redis_thaw(&srv);
    uint64_t rec = recovery_ns(r, test_now_ns());
    atomic_store(&u.phase, PH_AFTER);
    tu_sleep_ns(300 * MSEC);
    finish(&u);
    print_stats("SIGSTOP 1.2 s", r, &c);
    fprintf(stderr, "# SIGSTOP: back to Redis %.1f ms after SIGCONT\n", (double)rec / 1e6);
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    assert_int_equal(atomic_load(&c.over), 0);
    assert_true(atomic_load(&c.max_ns) >= TIMEOUT_MS * MSEC * 9 / 10); /* it did time out */
    assert_true(st.err_timeout >= 1);
    assert_true(st.circuit_opens >= 1);
    assert_true(st.discarded >= 1); /* timed-out contexts are not reused */
    assert_true(sum_src(&c, PH_DOWN, SLUICE_REDIS_SRC_POLICY) > 10);
    assert_true(sum_src(&c, PH_AFTER, SLUICE_REDIS_SRC_REDIS) > 20);
    /* timeouts while frozen are bounded by the circuit, not by the calls */
    assert_true(st.err_timeout < 60);
    sluice_redis_free(r);
    test_redis_stop(&srv);
}

/* SCRIPT FLUSH mid-run: no call fails; at most one NOSCRIPT per
 * connection. */
static void test_script_flush(void **state)
{
    (void)state;
    test_redis srv;
    assert_int_equal(test_redis_start(&srv, 0), 0);
    /* the flushes are under test, not the machine's load: a command
     * timeout a loaded machine does not reach (CI saw a 166-ms call at
     * load 10, which the 60-ms timeout turned into a policy decision) */
    sluice_redis *r = mk_timeout("token-bucket 1000/s", srv.port, SLUICE_REDIS_FAIL_CLOSED, 0, 5000);
    counts c;
    runner u;
    start(&u, r, &c, 4, "f");
    tu_sleep_ns(300 * MSEC);
    for (int i = 0; i < 3; i++) {
        const char *argv[] = {"SCRIPT", "FLUSH"};
        char buf[64];
        assert_int_equal(test_redis_cmd(&srv, NULL, buf, sizeof buf, 2, argv), 0);
        tu_sleep_ns(200 * MSEC);
    }
    finish(&u);
    print_stats("SCRIPT FLUSH x3", r, &c);
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    assert_int_equal(st.by_policy, 0);
    assert_true(st.noscript >= 1);
    /* each connection meets NOSCRIPT at most once per flush (plus its first
     * use, as the server never saw the script) */
    assert_true(st.noscript <= st.connects * 4);
    assert_int_equal(st.err_reply + st.err_io + st.err_timeout + st.err_connect, 0);
    sluice_redis_free(r);
    test_redis_stop(&srv);
}

/* An error reply keeps the connection; READONLY (a replica) drops it. */
static void test_error_replies(void **state)
{
    (void)state;
    test_redis srv;
    assert_int_equal(test_redis_start(&srv, 0), 0);
    sluice_redis *r = mk("token-bucket 10/s", srv.port, SLUICE_REDIS_FAIL_CLOSED, 0);
    char name[64];
    sluice_redis_key_name(r, "w", 1, name, sizeof name);
    const char *set[] = {"SET", name, "not a hash"};
    assert_int_equal(test_redis_cmd(&srv, NULL, NULL, 0, 3, set), 0);
    sluice_redis_info info;
    sluice_result res;
    assert_true(sluice_redis_try_acquire_ex(r, "ok", 2, 1, &res, &info));
    assert_false(sluice_redis_try_acquire_ex(r, "w", 1, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_POLICY);
    assert_int_equal(info.error, SLUICE_EBACKEND);
    assert_true(res.retry_after_ns >= (int64_t)MSEC);
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    assert_int_equal(st.err_reply, 1);
    assert_int_equal(st.discarded, 0);
    assert_int_equal(st.connects, 1);
    /* read-only: REPLICAOF a port where nothing listens */
    char port[16];
    snprintf(port, sizeof port, "%d", srv.port == 65535 ? 1 : srv.port + 1);
    const char *ro[] = {"REPLICAOF", "127.0.0.1", port};
    char buf[64];
    assert_int_equal(test_redis_cmd(&srv, NULL, buf, sizeof buf, 3, ro), 0);
    assert_false(sluice_redis_try_acquire_ex(r, "ok", 2, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_POLICY);
    sluice_redis_stats_get(r, &st);
    assert_int_equal(st.err_reply, 2);
    assert_int_equal(st.discarded, 1);
    const char *noone[] = {"REPLICAOF", "NO", "ONE"};
    assert_int_equal(test_redis_cmd(&srv, NULL, buf, sizeof buf, 3, noone), 0);
    assert_true(sluice_redis_try_acquire_ex(r, "ok2", 3, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
    sluice_redis_free(r);
    test_redis_stop(&srv);
}

static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

/* Nothing listens: refused connects, the circuit opens, calls fail fast. */
static void test_nothing_listening(void **state)
{
    (void)state;
    sluice_redis *r = mk("token-bucket 10/s", closed_port(), SLUICE_REDIS_FAIL_OPEN, 0);
    assert_int_not_equal(sluice_redis_ping(r), 0);
    uint64_t t0 = test_now_ns(), worst = 0;
    int n = 0;
    while (test_now_ns() - t0 < 500 * MSEC && n < 1000000) {
        uint64_t a = test_now_ns();
        sluice_redis_info info;
        assert_true(sluice_redis_try_acquire_ex(r, "x", 1, 1, NULL, &info));
        assert_int_equal(info.source, SLUICE_REDIS_SRC_POLICY);
        uint64_t d = test_now_ns() - a;
        if (d > worst) worst = d;
        n++;
    }
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    fprintf(stderr, "# nothing listening: %d calls in 0.5 s, worst %.2f ms, %llu connect attempts, "
                    "%llu fast failures, %llu circuit opens\n",
            n, (double)worst / 1e6, (unsigned long long)st.err_connect,
            (unsigned long long)st.err_circuit, (unsigned long long)st.circuit_opens);
    assert_true(worst < TIMEOUT_MS * MSEC + SLACK_NS);
    assert_true(st.err_connect <= 3 + 500 / 20 + 2); /* threshold + backoff probes */
    assert_true(st.err_circuit > (uint64_t)n / 2);
    assert_int_equal(st.circuit_opens, 1);
    assert_int_equal(st.connects, 0);
    sluice_redis_free(r);
}

/* A listener whose backlog is full: connects hang; the connect timeout
 * (40 ms) bounds them. */
static void test_connect_timeout(void **state)
{
    (void)state;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
    assert_int_equal(listen(l, 0), 0);
    int fill[8];
    for (int i = 0; i < 8; i++) { /* fill the backlog (non-blocking connects) */
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fill[i], (struct sockaddr *)&a, sizeof a);
    }
    tu_sleep_ns(50 * MSEC);
    sluice_redis *r = mk("token-bucket 10/s", ntohs(a.sin_port), SLUICE_REDIS_FAIL_CLOSED, 0);
    uint64_t worst = 0;
    for (int i = 0; i < 5; i++) {
        uint64_t t = test_now_ns();
        sluice_redis_info info;
        assert_false(sluice_redis_try_acquire_ex(r, "x", 1, 1, NULL, &info));
        uint64_t d = test_now_ns() - t;
        if (d > worst) worst = d;
        assert_int_equal(info.source, SLUICE_REDIS_SRC_POLICY);
    }
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    fprintf(stderr, "# backlog full: worst call %.1f ms, %llu connect errors\n", (double)worst / 1e6,
            (unsigned long long)st.err_connect);
    assert_true(worst < TIMEOUT_MS * MSEC + SLACK_NS);
    assert_true(st.err_connect >= 1);
    sluice_redis_free(r);
    for (int i = 0; i < 8; i++) close(fill[i]);
    close(l);
}

/* Two-tier under a kill: leases keep admitting until they expire, then the
 * policy; back to Redis afterwards. */
static void test_kill_two_tier(void **state)
{
    (void)state;
    test_redis srv;
    assert_int_equal(test_redis_start(&srv, 0), 0);
    sluice_redis *r = mk("token-bucket 100000/s", srv.port, SLUICE_REDIS_FAIL_CLOSED, 1000);
    counts c;
    runner u;
    start(&u, r, &c, 2, "t");
    tu_sleep_ns(300 * MSEC);
    test_redis_kill(&srv);
    atomic_store(&u.phase, PH_DOWN);
    tu_sleep_ns(500 * MSEC);
    assert_int_equal(test_redis_start(&srv, srv.port), 0);
    uint64_t rec = recovery_ns(r, test_now_ns());
    atomic_store(&u.phase, PH_AFTER);
    tu_sleep_ns(300 * MSEC);
    finish(&u);
    print_stats("two-tier SIGKILL+restart", r, &c);
    fprintf(stderr, "# two-tier: back to Redis %.1f ms after the restart\n", (double)rec / 1e6);
    assert_int_equal(atomic_load(&c.over), 0);
    assert_true(sum_src(&c, PH_BEFORE, SLUICE_REDIS_SRC_LEASE) > 0);
    assert_true(sum_src(&c, PH_DOWN, SLUICE_REDIS_SRC_POLICY) > 0);
    assert_int_equal(atomic_load(&c.n[PH_DOWN][SLUICE_REDIS_SRC_POLICY][1]), 0);
    assert_true(sum_src(&c, PH_AFTER, SLUICE_REDIS_SRC_LEASE) + sum_src(&c, PH_AFTER, SLUICE_REDIS_SRC_REDIS) > 0);
    sluice_redis_free(r);
    test_redis_stop(&srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_closed),
        cmocka_unit_test(test_kill_open),
        cmocka_unit_test(test_kill_local),
        cmocka_unit_test(test_sigstop),
        cmocka_unit_test(test_script_flush),
        cmocka_unit_test(test_error_replies),
        cmocka_unit_test(test_nothing_listening),
        cmocka_unit_test(test_connect_timeout),
        cmocka_unit_test(test_kill_two_tier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
