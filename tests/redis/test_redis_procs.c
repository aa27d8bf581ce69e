/* test_redis_procs.c -- several processes sharing one global limit.
 *
 * Four child processes (fork) each make their own limiter on one private
 * redis-server and decide as fast as they can on one shared key, counting
 * their admissions per millisecond of CLOCK_MONOTONIC (one axis for every
 * process on the machine) in shared memory.  From those counts:
 *
 *   excess = max over intervals [i, j) ms of admitted - (B + r * (j - i) ms)
 *
 * the most by which the processes together beat the token bucket's own
 * maximum over any interval.  It must stay within the documented bound
 * (sluice_redis_limits_get: min(P * lease_cap, ceil(L * lease_ttl / W)))
 * plus the requests in flight (one per process: granted by Redis just
 * before an interval, answered inside it), and the limit must still be
 * used (no starvation).  Also: the same without leases, with clocks 10 s
 * apart and running at different rates, sliding-approx, threads, and the
 * lease and refusal-cache mechanics on a fake clock.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <sluice.h>
#include <sluice/redis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_server.h"
#include "testutil.h"

#define MSEC 1000000ULL
#define SEC 1000000000ULL
#define MAX_MS 20000
#define NPROC 4

typedef struct shared {
    _Atomic uint64_t per_ms[MAX_MS];
    _Atomic uint64_t allowed[NPROC], denied[NPROC], errors[NPROC], round_trips[NPROC];
    _Atomic uint64_t by_lease[NPROC], by_cache[NPROC];
} shared;

/* Clocks of the children: offset and rate differ; never sent to Redis. */
typedef struct skew {
    uint64_t base, offset;
    int num, den; /* rate num/den */
} skew;

static uint64_t skew_clock(void *arg)
{
    const skew *s = arg;
    uint64_t d = test_now_ns() - s->base;
    return s->offset + s->base + d * (uint64_t)s->num / (uint64_t)s->den;
}

typedef struct scenario {
    const char *spec;
    const char *prefix;
    uint32_t lease_max;
    uint64_t dur_ns;
    bool skewed;
} scenario;

static void child(const scenario *sc, int me, shared *sh, uint64_t t_start)
{
    skew sk = {.base = test_now_ns(), .offset = 0, .num = 1, .den = 1};
    if (sc->skewed) {
        static const uint64_t offs[NPROC] = {0, 10 * SEC, 20 * SEC, 10 * SEC};
        static const int nums[NPROC] = {1, 1, 1, 2}, dens[NPROC] = {1, 1, 2, 1};
        sk.offset = offs[me], sk.num = nums[me], sk.den = dens[me];
    }
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = test_redis_shared.port;
    cfg.lease_max = sc->lease_max;
    cfg.expected_processes = NPROC;
    cfg.key_prefix = sc->prefix;
    cfg.command_timeout_ms = 1000;
    cfg.policy = SLUICE_REDIS_FAIL_CLOSED;
    if (sc->skewed) cfg.clock_fn = skew_clock, cfg.clock_arg = &sk;
    char err[256];
    sluice_redis *r = sluice_redis_new(sc->spec, &cfg, err, sizeof err);
    if (!r) _exit(3);
    sluice_redis_ping(r);
    while (test_now_ns() < t_start) tu_sleep_ns(100000);
    uint64_t end = t_start + sc->dur_ns;
    for (uint64_t i = 0, now = test_now_ns(); now < end && i < (1ULL << 36); i++) {
        sluice_redis_info info;
        bool ok = sluice_redis_try_acquire_ex(r, "shared", 6, 1, NULL, &info);
        now = test_now_ns();
        if (info.source == SLUICE_REDIS_SRC_POLICY) sh->errors[me]++;
        if (ok) {
            uint64_t ms = (now - t_start) / MSEC;
            if (ms < MAX_MS) atomic_fetch_add_explicit(&sh->per_ms[ms], 1, memory_order_relaxed);
            sh->allowed[me]++;
        } else {
            sh->denied[me]++;
        }
    }
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    sh->round_trips[me] = st.round_trips;
    sh->by_lease[me] = st.by_lease;
    sh->by_cache[me] = st.by_cache;
    sluice_redis_free(r);
    _exit(0); /* not exit(): the atexit hook would kill the shared server */
}

typedef struct outcome {
    uint64_t allowed, denied, errors, round_trips, excess;
    double excess_f;
    uint64_t bound; /* documented, for P = NPROC */
} outcome;

static void run(const scenario *sc, outcome *o, uint64_t L, uint64_t W, uint64_t B)
{
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    uint64_t t_start = test_now_ns() + 300 * MSEC;
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) child(sc, i, sh, t_start);
    }
    uint64_t give_up = t_start + sc->dur_ns + 20 * SEC;
    for (int i = 0; i < NPROC; i++) {
        int status = -1;
        while (waitpid(pids[i], &status, WNOHANG) == 0) {
            if (test_now_ns() > give_up) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], &status, 0);
                fail_msg("child %d hung", i);
            }
            tu_sleep_ns(10 * MSEC);
        }
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    memset(o, 0, sizeof *o);
    for (int i = 0; i < NPROC; i++) {
        o->allowed += sh->allowed[i];
        o->denied += sh->denied[i];
        o->errors += sh->errors[i];
        o->round_trips += sh->round_trips[i];
    }
    /* excess over any interval of whole ms */
    double r_ms = (double)L * (double)MSEC / (double)W, best = -1e18, minv = 0, s = 0;
    uint64_t n_ms = sc->dur_ns / MSEC + 1;
    for (uint64_t j = 1; j <= n_ms && j <= MAX_MS; j++) {
        s += (double)atomic_load(&sh->per_ms[j - 1]);
        double v = s - r_ms * (double)j;
        if (v - minv > best) best = v - minv;
        if (v < minv) minv = v;
    }
    o->excess_f = best - (double)B;
    o->excess = o->excess_f > 0 ? (uint64_t)(o->excess_f + 0.999) : 0;
    /* the documented bound, from the library */
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.lease_max = sc->lease_max;
    cfg.expected_processes = NPROC;
    sluice_redis *r = sluice_redis_new(sc->spec, &cfg, NULL, 0);
    assert_non_null(r);
    sluice_redis_limits lim;
    sluice_redis_limits_get(r, &lim);
    o->bound = lim.overadmit_bound;
    sluice_redis_free(r);
    uint64_t lease = 0, cache = 0;
    for (int i = 0; i < NPROC; i++) lease += sh->by_lease[i], cache += sh->by_cache[i];
    fprintf(stderr,
            "# %s, %d processes, lease_max %u%s, %.1f s: allowed %llu (%.4f of r*T), denied %llu, "
            "errors %llu, round trips %llu, by lease %llu, by cache %llu; excess over any interval "
            "%.1f permits (bound %llu + %d in flight)\n",
            sc->spec, NPROC, sc->lease_max, sc->skewed ? ", skewed clocks" : "",
            (double)sc->dur_ns / 1e9, (unsigned long long)o->allowed,
            (double)o->allowed / ((double)L * (double)sc->dur_ns / (double)W),
            (unsigned long long)o->denied, (unsigned long long)o->errors,
            (unsigned long long)o->round_trips, (unsigned long long)lease,
            (unsigned long long)cache, o->excess_f, (unsigned long long)o->bound, NPROC);
    munmap(sh, sizeof *sh);
}

static void test_four_procs_two_tier(void **state)
{
    (void)state;
    scenario sc = {"token-bucket 20000/s burst=500", "p4lease:", 10000, 3 * SEC, false};
    outcome o;
    run(&sc, &o, 20000, SEC, 500);
    assert_int_equal(o.errors, 0);
    assert_int_equal(o.bound, 200); /* min(4 * 50, 20000 * 10 ms / 1 s) */
    assert_true(o.excess <= o.bound + NPROC);
    /* over the whole run: at most B + L*T + bound, and the limit is used */
    assert_true(o.allowed <= 500 + 60000 + o.bound + NPROC);
    assert_true(o.allowed >= 60000 / 2); /* loose: the machine may be busy */
    /* and most decisions never left the process */
    assert_true(o.round_trips * 20 < o.allowed + o.denied);
}

static void test_four_procs_exact(void **state)
{
    (void)state;
    scenario sc = {"token-bucket 2000/s burst=50", "p4exact:", 0, 2 * SEC, false};
    outcome o;
    run(&sc, &o, 2000, SEC, 50);
    assert_int_equal(o.errors, 0);
    assert_int_equal(o.bound, 0);
    assert_true(o.excess <= NPROC); /* only the requests in flight */
    assert_true(o.allowed <= 50 + 4000 + NPROC);
    /* (how much is used depends on the round trips the machine manages) */
    assert_true(o.allowed >= 50);
}

/* Clocks 0, +10 s, +20 s at half speed, +10 s at double speed: never sent
 * to Redis, so they cannot over-admit; the slow clock only keeps leases
 * longer, which the P * lease_cap bound already covers. */
static void test_skewed_clocks(void **state)
{
    (void)state;
    scenario sc = {"token-bucket 20000/s burst=500", "p4skew:", 10000, 2 * SEC, true};
    outcome o;
    run(&sc, &o, 20000, SEC, 500);
    assert_int_equal(o.errors, 0);
    assert_true(o.excess <= NPROC * 50 + NPROC);
    assert_true(o.allowed <= 500 + 40000 + NPROC * 50 + NPROC);
    assert_true(o.allowed >= 40000 / 2);
    scenario ex = {"token-bucket 2000/s burst=50", "p4skewx:", 0, 1 * SEC, true};
    run(&ex, &o, 2000, SEC, 50);
    assert_true(o.excess <= NPROC);
}

static void test_four_procs_sliding(void **state)
{
    (void)state;
    /* sliding-approx admits at most L per window and up to ~2L across a
     * window edge; with leases at most P * lease_cap more at any time */
    scenario sc = {"sliding-approx 20000/s", "p4sa:", 10000, 2500 * MSEC, false};
    outcome o;
    run(&sc, &o, 20000, SEC, 0);
    assert_int_equal(o.errors, 0);
    assert_int_equal(o.bound, 200);
    /* (the "excess" printed is the token-bucket measure, not meaningful
     * here) the run touches at most 4 windows of 1 s */
    assert_true(o.allowed <= 4 * 20000 + o.bound + NPROC);
    assert_true(o.allowed >= 50000 / 2);
}

/* fixed-window with leases: one window of 36500 days (aligned to 0: it
 * does not end during the run), so Redis grants at most L in all, and the
 * processes, admitting only what Redis granted them, at most L together;
 * leases expire unspent only while a process is not asking. */
static void test_four_procs_fixed_window(void **state)
{
    (void)state;
    scenario sc = {"fixed-window 3000/36500d", "p4fw:", 10000, 1 * SEC, false};
    outcome o;
    run(&sc, &o, 3000, 36500ULL * 86400 * SEC, 0);
    assert_int_equal(o.errors, 0);
    assert_int_equal(o.bound, 28); /* 4 * lease_cap, lease_cap = 3000 / (100 * 4) */
    assert_true(o.allowed <= 3000);
    assert_true(o.allowed >= 3000 - o.bound);
    assert_true(o.round_trips * 2 < o.allowed + o.denied);
}

/* ---- one process, threads ------------------------------------------------- */

typedef struct tharg {
    sluice_redis *r;
    uint64_t end;
    _Atomic uint64_t *allowed; /* per key */
} tharg;

static void *thread_loop(void *p)
{
    tharg *a = p;
    static const char *keys[3] = {"a", "b", "c"};
    for (uint64_t i = 0; i < (1ULL << 32) && test_now_ns() < a->end; i++) {
        int k = (int)(i % 3);
        if (sluice_redis_try_acquire(a->r, keys[k], 1, 1, NULL))
            atomic_fetch_add(&a->allowed[k], 1);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = test_redis_shared.port;
    cfg.lease_max = 1000;
    cfg.key_prefix = "threads:";
    cfg.command_timeout_ms = 1000;
    cfg.pool_size = 2;
    sluice_redis *r = sluice_redis_new("token-bucket 5000/s burst=100", &cfg, NULL, 0);
    assert_non_null(r);
    _Atomic uint64_t allowed[3] = {0, 0, 0};
    tharg a = {r, test_now_ns() + 1500 * MSEC, allowed};
    pthread_t th[4];
    uint64_t t0 = test_now_ns();
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, thread_loop, &a), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    double secs = (double)(test_now_ns() - t0) / 1e9;
    sluice_redis_limits lim;
    sluice_redis_limits_get(r, &lim);
    assert_int_equal(lim.lease_cap, 50);
    for (int k = 0; k < 3; k++) {
        uint64_t n = atomic_load(&allowed[k]);
        assert_true((double)n <= 100 + 5000 * secs + 50 + 4);
        assert_true((double)n >= 5000 * 1.5 / 2);
    }
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    assert_true(st.by_lease > st.by_redis);
    assert_true(st.connects <= 2);
    sluice_redis_free(r);
}

/* ---- leases and remembered refusals on a fake local clock ------------------ */

static _Atomic uint64_t fake_ns = 1000 * SEC;
static uint64_t fake_clock(void *arg)
{
    (void)arg;
    return atomic_load(&fake_ns);
}

static sluice_redis *mk_fake(const char *spec, uint32_t lease_max, const char *prefix)
{
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = test_redis_shared.port;
    cfg.lease_max = lease_max;
    cfg.key_prefix = prefix;
    cfg.command_timeout_ms = 1000;
    cfg.clock_fn = fake_clock;
    char err[256];
    sluice_redis *r = sluice_redis_new(spec, &cfg, err, sizeof err);
    if (!r) fail_msg("%s", err);
    return r;
}

static void test_lease_mechanics(void **state)
{
    (void)state;
    sluice_redis *r = mk_fake("token-bucket 100000/s", 100, "mech:");
    sluice_redis_limits lim;
    sluice_redis_limits_get(r, &lim);
    assert_int_equal(lim.lease_cap, 100);           /* min(100, 100000/100) */
    assert_int_equal(lim.lease_ttl_ns, 10 * MSEC);  /* min(W/100, 100 ms) */
    assert_int_equal(lim.overadmit_bound, 100);
    assert_int_equal(lim.quantum_ns, 1000);
    sluice_result res;
    sluice_redis_info info;
    /* the first request goes to Redis and brings a lease of 1 */
    assert_true(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
    assert_int_equal(info.granted, 2);
    assert_true(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_LEASE);
    assert_int_equal(res.remaining, 0);
    /* used up at once (the fake clock stands still): the lease doubles each
     * time, up to the cap */
    uint64_t last = 0;
    for (int i = 0; i < 2000; i++) {
        assert_true(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
        if (info.source == SLUICE_REDIS_SRC_REDIS) {
            assert_true(info.granted - 1 >= last || info.granted - 1 == 100);
            last = info.granted - 1;
            assert_true(last <= 100);
        } else {
            assert_int_equal(info.source, SLUICE_REDIS_SRC_LEASE);
            assert_true(res.remaining < 100);
        }
    }
    assert_int_equal(last, 100);
    /* a probe answers from the lease */
    assert_true(sluice_redis_try_acquire_ex(r, "k", 1, 0, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_LEASE);
    uint64_t left = res.remaining;
    /* the lease expires: its permits are dropped, the next request asks Redis */
    sluice_redis_stats st0, st1;
    sluice_redis_stats_get(r, &st0);
    atomic_fetch_add(&fake_ns, 10 * MSEC);
    assert_true(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
    sluice_redis_stats_get(r, &st1);
    assert_int_equal(st1.lease_dropped - st0.lease_dropped, left);
    /* ... and it was mostly unspent, so the next lease is smaller */
    assert_true(info.granted - 1 <= 100);
    sluice_redis_free(r);

    /* remembered refusals: Redis ran dry granting the first request, so the
     * second is refused here until one permit could be back */
    r = mk_fake("token-bucket 1/s burst=1", 10, "mech2:");
    assert_true(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
    assert_int_equal(info.granted, 1);
    assert_false(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_CACHE);
    int64_t retry = res.retry_after_ns;
    assert_true(retry > 900 * (int64_t)MSEC && retry <= (int64_t)SEC);
    atomic_fetch_add(&fake_ns, 100 * MSEC);
    assert_false(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_CACHE);
    assert_int_equal(res.retry_after_ns, retry - 100 * (int64_t)MSEC);
    /* more than the burst: never; remembered as such */
    atomic_fetch_add(&fake_ns, 2 * SEC);
    assert_false(sluice_redis_try_acquire_ex(r, "k", 1, 2, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
    assert_int_equal(res.retry_after_ns, -1);
    atomic_fetch_add(&fake_ns, 5 * SEC);
    assert_false(sluice_redis_try_acquire_ex(r, "k", 1, 5, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_CACHE);
    assert_int_equal(res.retry_after_ns, -1);
    /* a smaller request than the one remembered is asked of Redis */
    sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info);
    assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
    sluice_redis_free(r);
}

/* A local limiter in front refuses this process's own excess without a
 * round trip. */
static void test_local_front(void **state)
{
    (void)state;
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.port = test_redis_shared.port;
    cfg.key_prefix = "front:";
    cfg.local_spec = "token-bucket 10/s burst=3";
    cfg.command_timeout_ms = 1000;
    sluice_redis *r = sluice_redis_new("token-bucket 1000/s", &cfg, NULL, 0);
    assert_non_null(r);
    sluice_redis_info info;
    for (int i = 0; i < 3; i++) {
        assert_true(sluice_redis_try_acquire_ex(r, "k", 1, 1, NULL, &info));
        assert_int_equal(info.source, SLUICE_REDIS_SRC_REDIS);
    }
    sluice_result res;
    assert_false(sluice_redis_try_acquire_ex(r, "k", 1, 1, &res, &info));
    assert_int_equal(info.source, SLUICE_REDIS_SRC_LOCAL);
    assert_true(res.retry_after_ns > 0);
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    assert_int_equal(st.round_trips, 3 + st.noscript);
    assert_int_equal(st.by_local, 1);
    sluice_redis_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_mechanics),
        cmocka_unit_test(test_local_front),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_four_procs_two_tier),
        cmocka_unit_test(test_four_procs_exact),
        cmocka_unit_test(test_skewed_clocks),
        cmocka_unit_test(test_four_procs_sliding),
        cmocka_unit_test(test_four_procs_fixed_window),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
