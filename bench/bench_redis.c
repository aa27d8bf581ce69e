/* bench_redis.c -- the Redis tier in one run: decisions/s, latency and
 * global over-admission of
 *
 *   (a) plain Redis + Lua: one EVALSHA round trip per decision
 *       (libsluice-redis with lease_max = 0: the contract, exactly);
 *   (b) sluice two-tier: leases from Redis spent locally, refusals
 *       remembered (lease_max = 10000, expected_processes = P);
 *   (c) local only: a sluice_table in each process (no shared limit);
 *
 * each with 1 and 4 processes (fork) deciding as fast as they can, one
 * thread each, on one shared key.  Every decision is timed with two
 * CLOCK_MONOTONIC reads (p50/p99 from a log-linear histogram, 1/16 octave).
 * Admissions are counted per millisecond of CLOCK_MONOTONIC in shared memory;
 * for token-bucket the over-admission is
 *
 *   excess = max over intervals [i, j) ms of admitted - (B + L * (j-i) ms / W)
 *
 * the most by which all processes together beat the bucket's own maximum
 * over any interval (negative: they never reached it); the whole-run figure
 * is admitted - (B + L * T / W).  The (b) run with 4
 * processes lasts --long seconds (default 10); the others --seconds
 * (default 3).
 *
 *   build/bench/bench_redis [--spec SPEC] [--seconds S] [--long S] [--port P]
 *
 * Without --port it starts its own redis-server on a free loopback port (no
 * persistence) and stops it at the end.  Loopback only.
 */
#define _GNU_SOURCE
#include <sluice.h>
#include <sluice/redis.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"

#define MSEC 1000000ULL
#define SEC 1000000000ULL
#define MAX_MS 60000
#define MAXP 4
#define HB (64 * 16)

typedef struct shared {
    _Atomic uint64_t per_ms[MAX_MS];
    uint64_t hist[MAXP][HB];
    uint64_t allowed[MAXP], denied[MAXP], errors[MAXP], round_trips[MAXP], decisions[MAXP];
    uint64_t elapsed[MAXP];
} shared;

static unsigned hbucket(uint64_t v)
{
    if (v < 16) return (unsigned)v;
    unsigned b = 63u - (unsigned)__builtin_clzll(v);
    return (b - 3) * 16 + (unsigned)((v >> (b - 4)) & 15);
}

static uint64_t hvalue(unsigned i)
{
    if (i < 16) return i;
    unsigned b = i / 16 + 3, sub = i % 16;
    return ((uint64_t)(16 + sub)) << (b - 4);
}

enum { MODE_A, MODE_B, MODE_C };
static const char *mode_name[] = {"(a) Redis+Lua, 1 round trip/decision",
                                  "(b) sluice two-tier, leases", "(c) local only"};

static const char *g_spec = "token-bucket 100000/s burst=1000";
static int g_port;

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / SEC), (long)(ns % SEC)};
    nanosleep(&ts, NULL);
}

static void child(int mode, int nproc, int me, shared *sh, uint64_t t_start, uint64_t dur,
                  const char *prefix)
{
    sluice_redis *r = NULL;
    sluice_table *t = NULL;
    char err[256];
    if (mode == MODE_C) {
        t = sluice_table_new(g_spec, 16, err, sizeof err);
    } else {
        sluice_redis_config cfg;
        sluice_redis_config_init(&cfg);
        cfg.port = g_port;
        cfg.key_prefix = prefix;
        cfg.command_timeout_ms = 1000;
        cfg.expected_processes = (uint32_t)nproc;
        cfg.lease_max = mode == MODE_B ? 10000 : 0;
        r = sluice_redis_new(g_spec, &cfg, err, sizeof err);
        if (r) sluice_redis_ping(r);
    }
    if (!r && !t) {
        fprintf(stderr, "bench_redis: %s\n", err);
        _exit(3);
    }
    uint64_t *h = calloc(HB, sizeof *h);
    if (!h) _exit(4);
    while (test_now_ns() < t_start) sleep_ns(50000);
    uint64_t end = t_start + dur, now = test_now_ns(), allowed = 0, denied = 0, errors = 0;
    uint64_t first = now;
    for (uint64_t i = 0; now < end && i < (1ULL << 38); i++) {
        uint64_t t0 = now;
        bool ok;
        if (t) {
            ok = sluice_table_try_acquire_at(t, "bench", 5, 1, t0, NULL);
        } else {
            sluice_redis_info info;
            ok = sluice_redis_try_acquire_ex(r, "bench", 5, 1, NULL, &info);
            if (info.source == SLUICE_REDIS_SRC_POLICY) errors++;
        }
        now = test_now_ns();
        h[hbucket(now - t0)]++;
        if (ok) {
            allowed++;
            uint64_t ms = (now - t_start) / MSEC;
            if (ms < MAX_MS) atomic_fetch_add_explicit(&sh->per_ms[ms], 1, memory_order_relaxed);
        } else {
            denied++;
        }
    }
    sh->elapsed[me] = now - first;
    sh->allowed[me] = allowed;
    sh->denied[me] = denied;
    sh->errors[me] = errors;
    sh->decisions[me] = allowed + denied;
    memcpy(sh->hist[me], h, HB * sizeof *h);
    if (r) {
        sluice_redis_stats st;
        sluice_redis_stats_get(r, &st);
        sh->round_trips[me] = st.round_trips;
        sluice_redis_free(r);
    }
    sluice_table_free(t);
    free(h);
    _exit(0);
}

typedef struct row {
    double dps, p50, p99;
    uint64_t allowed, errors, round_trips;
    double excess, whole_excess, secs;
} row;

static int run(int mode, int nproc, uint64_t dur, uint64_t L, uint64_t W, uint64_t B, row *out)
{
    static int seq;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "bench%d-%d:", (int)getpid(), ++seq);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return -1;
    uint64_t t_start = test_now_ns() + 300 * MSEC;
    pid_t pids[MAXP];
    for (int i = 0; i < nproc; i++) {
        pids[i] = fork();
        if (pids[i] == 0) child(mode, nproc, i, sh, t_start, dur, prefix);
    }
    int bad = 0;
    uint64_t give_up = t_start + dur + 30 * SEC;
    for (int i = 0; i < nproc; i++) {
        int st = -1;
        while (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == 0) {
            if (test_now_ns() > give_up) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], &st, 0);
            }
            sleep_ns(20 * MSEC);
        }
        if (pids[i] <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
    }
    memset(out, 0, sizeof *out);
    uint64_t dec = 0, maxel = 0;
    static uint64_t hsum[HB];
    memset(hsum, 0, sizeof hsum);
    for (int i = 0; i < nproc; i++) {
        dec += sh->decisions[i];
        out->allowed += sh->allowed[i];
        out->errors += sh->errors[i];
        out->round_trips += sh->round_trips[i];
        if (sh->elapsed[i] > maxel) maxel = sh->elapsed[i];
        for (int b = 0; b < HB; b++) hsum[b] += sh->hist[i][b];
    }
    out->secs = (double)maxel / 1e9;
    out->dps = maxel ? (double)dec * 1e9 / (double)maxel : 0;
    uint64_t seen = 0;
    out->p50 = out->p99 = 0;
    for (int b = 0; b < HB; b++) {
        if (seen <= dec / 2 && seen + hsum[b] > dec / 2) out->p50 = (double)hvalue((unsigned)b);
        if (seen <= dec * 99 / 100 && seen + hsum[b] > dec * 99 / 100) out->p99 = (double)hvalue((unsigned)b);
        seen += hsum[b];
    }
    /* over-admission (token bucket measure) */
    double r_ms = (double)L * (double)MSEC / (double)W, best = -1e18, minv = 0, s = 0;
    uint64_t n_ms = dur / MSEC + 1;
    for (uint64_t j = 1; j <= n_ms && j <= MAX_MS; j++) {
        s += (double)atomic_load(&sh->per_ms[j - 1]);
        double v = s - r_ms * (double)j;
        if (v - minv > best) best = v - minv;
        if (v < minv) minv = v;
    }
    out->excess = best - (double)B;
    out->whole_excess = (double)out->allowed - ((double)B + r_ms * (double)n_ms);
    munmap(sh, sizeof *sh);
    return bad ? -1 : 0;
}

static bool parse_canon(const char *spec, uint64_t *L, uint64_t *W, uint64_t *B)
{
    /* From the Redis tier's own view of the spec, via a throwaway limiter:
     * only token-bucket gets the over-admission measure. */
    if (strncmp(spec, "token-bucket ", 13) != 0) return false;
    char canon[SLUICE_SPEC_MAX];
    if (sluice_spec_check(spec, canon, sizeof canon, NULL, 0) != 0) return false;
    unsigned long long l = 0, n = 1, b = 0;
    char unit[8] = "";
    const char *p = canon + 13;
    if (sscanf(p, "%llu/", &l) != 1) return false;
    p = strchr(p, '/') + 1;
    if (*p >= '0' && *p <= '9') n = strtoull(p, (char **)&p, 10);
    sscanf(p, "%7[a-z]", unit);
    static const struct { const char *u; uint64_t ns; } us[] = {
        {"ns", 1}, {"us", 1000}, {"ms", MSEC}, {"s", SEC}, {"min", 60 * SEC}, {"h", 3600 * SEC}, {"d", 86400 * SEC}};
    uint64_t w = 0;
    for (size_t i = 0; i < sizeof us / sizeof us[0]; i++)
        if (strcmp(unit, us[i].u) == 0) w = n * us[i].ns;
    const char *bu = strstr(canon, "burst=");
    b = bu ? strtoull(bu + 6, NULL, 10) : l;
    *L = l, *W = w, *B = b;
    return w != 0;
}

int main(int argc, char **argv)
{
    double secs = 3, lsecs = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--spec") == 0 && i + 1 < argc) g_spec = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) secs = atof(argv[++i]);
        else if (strcmp(argv[i], "--long") == 0 && i + 1 < argc) lsecs = atof(argv[++i]);
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) g_port = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_redis [--spec SPEC] [--seconds S] [--long S] [--port P]\n");
            return 2;
        }
    }
    if (secs <= 0 || secs > 50 || lsecs <= 0 || lsecs > 50) {
        fprintf(stderr, "bench_redis: durations must be in (0, 50] s\n");
        return 2;
    }
    uint64_t L, W, B;
    if (!parse_canon(g_spec, &L, &W, &B)) {
        fprintf(stderr, "bench_redis: --spec must be a token-bucket spec\n");
        return 2;
    }
    test_redis srv = {0};
    if (!g_port) {
        if (test_redis_start(&srv, 0) != 0) return 1;
        g_port = srv.port;
    }
    sluice_redis_config cfg;
    sluice_redis_config_init(&cfg);
    cfg.lease_max = 10000;
    cfg.expected_processes = 4;
    char err[256];
    sluice_redis *probe = sluice_redis_new(g_spec, &cfg, err, sizeof err);
    if (!probe) {
        fprintf(stderr, "bench_redis: %s\n", err);
        return 2;
    }
    sluice_redis_limits lim4;
    sluice_redis_limits_get(probe, &lim4);
    sluice_redis_free(probe);

    printf("spec: %s   redis-server on 127.0.0.1:%d   %ld online CPUs\n", g_spec, g_port,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("(b) with 4 processes: lease cap %llu, lease ttl %.1f ms, documented bound %llu permits (%.2f%% of LIMIT)\n\n",
           (unsigned long long)lim4.lease_cap, (double)lim4.lease_ttl_ns / 1e6,
           (unsigned long long)lim4.overadmit_bound, 100.0 * (double)lim4.overadmit_bound / (double)L);
    printf("| mode | procs | seconds | decisions/s | p50 ns | p99 ns | allowed | round trips | errors | over-admission, any interval | over-admission, whole run |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    row rows[3][2];
    int failed = 0;
    for (int m = 0; m < 3; m++)
        for (int pi = 0; pi < 2; pi++) {
            int np = pi ? 4 : 1;
            double s = (m == MODE_B && np == 4) ? lsecs : secs;
            row *o = &rows[m][pi];
            if (run(m, np, (uint64_t)(s * 1e9), L, W, B, o) != 0) failed = 1;
            char ex[64] = "n/a (no shared limit)", wx[64] = "n/a";
            if (m != MODE_C) {
                snprintf(ex, sizeof ex, "%+.0f permits (%+.3f%% of L)", o->excess,
                         100 * o->excess / (double)L);
                snprintf(wx, sizeof wx, "%+.0f (%+.3f%%)", o->whole_excess,
                         100 * o->whole_excess / (double)L);
            }
            printf("| %s | %d | %.1f | %.0f | %.0f | %.0f | %llu | %llu | %llu | %s | %s |\n", mode_name[m],
                   np, o->secs, o->dps, o->p50, o->p99, (unsigned long long)o->allowed,
                   (unsigned long long)o->round_trips, (unsigned long long)o->errors, ex, wx);
            fflush(stdout);
        }
    printf("\n(b)/(a) decisions/s: %.0fx with 1 process, %.0fx with 4 (target >= 100x)\n",
           rows[MODE_B][0].dps / rows[MODE_A][0].dps, rows[MODE_B][1].dps / rows[MODE_A][1].dps);
    printf("(b), 4 processes, %.0f s: over-admission over any interval %+.0f permits = %+.3f%% of L "
           "(negative: never above the bucket's own maximum; target <= 1%%; documented bound %llu)\n",
           rows[MODE_B][1].secs, rows[MODE_B][1].excess, 100 * rows[MODE_B][1].excess / (double)L,
           (unsigned long long)lim4.overadmit_bound);
    if (srv.pid) test_redis_stop(&srv);
    return failed;
}
