/* bench_decide.c -- the cost of one decision, per algorithm, against a floor.
 *
 * For every algorithm it times single-threaded decisions of 1 permit on one
 * limiter, four ways:
 *
 *   caller time, allowed   sluice_try_acquire_at(), spec "ALG 1000000000/s"
 *                          (sliding-log: "ALG 1000000/ms", the same rate over
 *                          a 1-ms window, to bound its memory), time advanced
 *                          1 us per decision: every decision is an admission
 *                          (the log then holds 1000 entries, the wheel's 1000
 *                          slots of 1 ms are all in use)
 *   caller time, denied    sluice_try_acquire_at(), spec "ALG 1/d", time
 *                          advanced 1 ns per decision; after the first
 *                          request every decision is a refusal
 *   live clock, allowed    sluice_try_acquire() (reads CLOCK_MONOTONIC), the
 *                          same specs: the loop cannot reach 10^9/s
 *   live clock, denied     sluice_try_acquire(), spec "ALG 1/d"
 *
 * `res` is NULL in the _at calls, as the live form has no details either.
 *
 * The floor, measured in the same process and interleaved with the rest:
 *   clock+CAS  clock_gettime(CLOCK_MONOTONIC) and one 64-bit compare-and-swap
 *              (a GCRA-style max(word, now) + 1): the least a lock-free live
 *              admission can cost;
 *   clock+2ld  clock_gettime(CLOCK_MONOTONIC) and two loads of a shared
 *              16-byte word, compared with the time: the least a live
 *              refusal can cost (it must read the time and the state);
 *   coarse+2ld the same with CLOCK_MONOTONIC_COARSE (clock=coarse);
 *   CAS        the compare-and-swap alone: the least a caller-time decision
 *              can cost.
 * Caller-time cells are divided by the CAS floor, live-clock admissions by
 * clock+CAS, live refusals by clock+2ld (coarse: coarse+2ld).  Two reference rows are printed beside them and used for
 * no ratio: a 16-byte CAS (where the compiler has one) and an uncontended
 * mutex lock + unlock, the primitives of the library's lock-free and locked
 * limiters.
 *
 * Then two threads: refusing on one limiter per algorithm (live clock,
 * "ALG 1/d"), each thread's cost against its one-thread cost measured in
 * the same run (target: <= 1.15x, so that the pair does >= 1.75x the work
 * of one), beside the floor of two threads doing clock+2ld on one shared
 * word; and admitting (live clock), against clock+CAS on one shared word
 * and on a word each.  Each thread times its own loop (wall and CPU time);
 * "overlap" is the two threads' CPU time over the pair's wall time (2.0:
 * they ran side by side all along; on a loaded machine less, and the
 * two-thread figures mean less).
 *
 * Last, concurrency limits (bench_conc): an acquire and its release of 1
 * permit ("concurrency 1000", and with lease=1h) against one token-bucket
 * admission in the same run, 1 thread and 2 threads on one object; the
 * ratio is the cost in token-bucket admissions (target: <= 2x).
 *
 * Each measurement is repeated (--runs, default 11) over --iters decisions
 * (default 2*10^6); runs of all measurements are interleaved round-robin so
 * that drift of the machine hits them alike; the table shows the median.
 * Every decision's result is counted and the count is checked against the
 * path (all allowed / all denied) and published through a volatile sink, so
 * the compiler cannot drop the loop; calls into libsluice.a are opaque to
 * it anyway.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>

#include <sluice.h>

#define BENCH_DENY_LIMIT "1/d"
#define BENCH_ALLOW_STEP_NS 1000u
#define BENCH_DENY_STEP_NS 1u
#define BENCH_T0_NS 1000000000ULL

/* The allowed path runs at 10^9/s over a 1-s window, so that the
 * sliding-wheel has its default 1000 slots of 1 ms (as in "ALG 100/s");
 * sliding-log keeps one entry per distinct admission time in the window, so
 * it gets the same rate over a 1-ms window to bound its memory. */
#define BENCH_ALLOW_LIMIT "1000000000/s"
#define BENCH_ALLOW_LIMIT_LOG "1000000/ms"

static const struct {
    const char *name;   /* algorithm as printed */
    const char *algo;   /* spec: algo + " " + LIMIT + opts */
    const char *opts;
    const char *allow_limit;
} bench_algos[] = {
    {"fixed-window", "fixed-window", "", BENCH_ALLOW_LIMIT},
    {"sliding-log", "sliding-log", "", BENCH_ALLOW_LIMIT_LOG},
    {"sliding-wheel", "sliding-wheel", "", BENCH_ALLOW_LIMIT},
    {"sliding-approx", "sliding-approx", "", BENCH_ALLOW_LIMIT},
    {"token-bucket", "token-bucket", "", BENCH_ALLOW_LIMIT},
    {"leaky-bucket", "leaky-bucket", "", BENCH_ALLOW_LIMIT},
    {"leaky-bucket nodelay", "leaky-bucket", " nodelay", BENCH_ALLOW_LIMIT},
};
#define BENCH_NALGOS (sizeof bench_algos / sizeof bench_algos[0])

enum { COL_AT_ALLOW, COL_AT_DENY, COL_LIVE_ALLOW, COL_LIVE_DENY, COL_COARSE_ALLOW,
       COL_COARSE_DENY, NCOLS };
static const char *const bench_col_names[NCOLS] = {
    "allowed", "denied", "allowed", "denied", "allowed", "denied"};

/* The floors, and two reference points that are not used for ratios: a
 * 16-byte CAS (what the library's lock-free limiters do once per decision,
 * when the compiler has it) and an uncontended mutex lock + unlock (what its
 * locked limiters do). */
enum { FLOOR_CLOCK_CAS, FLOOR_CAS, FLOOR_CAS128, FLOOR_MUTEX, FLOOR_CLOCK_LOADS,
       FLOOR_COARSE_LOADS, NFLOORS };

#if defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#define BENCH_HAVE_CAS128 1
__extension__ typedef unsigned __int128 bench_u128;
static _Alignas(64) bench_u128 bench_word128;
#else
#define BENCH_HAVE_CAS128 0
#endif

/* One timed thing: a floor or a (limiter, path). */
typedef struct bench_meas {
    int floor;              /* FLOOR_* or -1 for a decision */
    bool live, expect_allow;
    sluice_limiter *lim;
    uint64_t now_ns, step_ns; /* caller time cursor */
    uint64_t wrong;         /* decisions against expect_allow */
    double *ns;             /* per run, ns per decision */
} bench_meas;

static volatile uint64_t bench_sink;
static uint64_t bench_word; /* the floor's CAS target */
static pthread_mutex_t bench_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t bench_guarded; /* under bench_mu */

static uint64_t bench_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* iters of clock read + CAS on *word; returns the successful CASes. */
static uint64_t bench_clock_cas_on(uint64_t *word, uint64_t iters)
{
    uint64_t ok = 0;
    uint64_t cur = __atomic_load_n(word, __ATOMIC_RELAXED);
    for (uint64_t i = 0; i < iters; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        uint64_t want = (cur > now ? cur : now) + 1;
        if (__atomic_compare_exchange_n(word, &cur, want, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            cur = want;
            ok++;
        }
    }
    return ok;
}

static uint64_t bench_floor_clock_cas(uint64_t iters)
{
    return bench_clock_cas_on(&bench_word, iters);
}

/* The state a refusal reads: a 16-byte word, its time half and count half
 * (no thread writes it while the floor runs). */
static _Alignas(64) uint64_t bench_state[2] = {1, 1};

/* iters of a clock read + two loads of *w, compared with the time (the
 * least a live refusal can do: read the time, read the state, decide);
 * returns how many compared "refuse" (all of them). */
static uint64_t bench_clock_loads_on(const uint64_t *w, clockid_t clk, uint64_t iters)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < iters; i++) {
        struct timespec ts;
        clock_gettime(clk, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        uint64_t lo = __atomic_load_n(&w[0], __ATOMIC_ACQUIRE);
        uint64_t hi = __atomic_load_n(&w[1], __ATOMIC_ACQUIRE);
        n += now - lo >= hi; /* always: the state says refuse */
    }
    return n;
}

/* iters of CAS alone; returns the successful CASes. */
static uint64_t bench_floor_cas(uint64_t iters)
{
    uint64_t ok = 0;
    uint64_t cur = __atomic_load_n(&bench_word, __ATOMIC_RELAXED);
    for (uint64_t i = 0; i < iters; i++) {
        uint64_t want = cur + 1;
        if (__atomic_compare_exchange_n(&bench_word, &cur, want, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            cur = want;
            ok++;
        }
    }
    return ok;
}

/* iters of 16-byte CAS alone; returns the successful CASes. */
static uint64_t bench_floor_cas128(uint64_t iters)
{
    uint64_t ok = 0;
#if BENCH_HAVE_CAS128
    bench_u128 cur = bench_word128;
    for (uint64_t i = 0; i < iters; i++) {
        bench_u128 seen = __sync_val_compare_and_swap(&bench_word128, cur, cur + 1);
        if (seen == cur) {
            cur++;
            ok++;
        } else {
            cur = seen;
        }
    }
#else
    (void)iters;
#endif
    return ok;
}

/* iters of an uncontended mutex lock, increment, unlock. */
static uint64_t bench_floor_mutex(uint64_t iters)
{
    for (uint64_t i = 0; i < iters; i++) {
        pthread_mutex_lock(&bench_mu);
        bench_guarded++;
        pthread_mutex_unlock(&bench_mu);
    }
    return iters;
}

static uint64_t bench_floor(int floor, uint64_t iters)
{
    switch (floor) {
    case FLOOR_CLOCK_CAS: return bench_floor_clock_cas(iters);
    case FLOOR_CAS: return bench_floor_cas(iters);
    case FLOOR_CAS128: return bench_floor_cas128(iters);
    case FLOOR_CLOCK_LOADS: return bench_clock_loads_on(bench_state, CLOCK_MONOTONIC, iters);
    case FLOOR_COARSE_LOADS:
        return bench_clock_loads_on(bench_state, CLOCK_MONOTONIC_COARSE, iters);
    default: return bench_floor_mutex(iters);
    }
}

static uint64_t bench_at(sluice_limiter *lim, uint64_t *now_ns, uint64_t step_ns,
                         uint64_t iters)
{
    uint64_t allowed = 0, t = *now_ns;
    for (uint64_t i = 0; i < iters; i++) {
        allowed += sluice_try_acquire_at(lim, 1, t, NULL);
        t += step_ns;
    }
    *now_ns = t;
    return allowed;
}

static uint64_t bench_live(sluice_limiter *lim, uint64_t iters)
{
    uint64_t allowed = 0;
    for (uint64_t i = 0; i < iters; i++)
        allowed += sluice_try_acquire(lim, 1);
    return allowed;
}

/* Run m once over iters; returns ns per iteration. */
static double bench_once(bench_meas *m, uint64_t iters)
{
    uint64_t n;
    uint64_t t0 = bench_clock_ns();
    if (m->floor >= 0)
        n = bench_floor(m->floor, iters);
    else if (m->live)
        n = bench_live(m->lim, iters);
    else
        n = bench_at(m->lim, &m->now_ns, m->step_ns, iters);
    uint64_t t1 = bench_clock_ns();
    if (m->floor < 0)
        m->wrong += m->expect_allow ? iters - n : n;
    bench_sink += n;
    return (double)(t1 - t0) / (double)iters;
}

/* Two threads at once, started together: on limiters l[0] and l[1] (which
 * may be the same) with the live clock, or, when l[0] is NULL, a floor on
 * words w[0] and w[1] (which may be the same): clock+CAS, or clock+2ld
 * when `loads`.  Returns the wall time per decision over both threads
 * (ns); *each (when not NULL) receives the slower thread's own wall time
 * per decision, *overlap the two threads' CPU time over the pair's wall
 * time. */
typedef struct bench_thr {
    sluice_limiter *lim;
    uint64_t *word;
    bool loads;
    uint64_t iters, n;
    pthread_barrier_t *bar;
    uint64_t t0, t1, cpu; /* this thread's loop: wall start, end; CPU ns */
} bench_thr;

static uint64_t bench_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *bench_thr_run(void *p)
{
    bench_thr *a = p;
    pthread_barrier_wait(a->bar);
    uint64_t c0 = bench_cpu_ns();
    a->t0 = bench_clock_ns();
    a->n = a->lim     ? bench_live(a->lim, a->iters)
           : a->loads ? bench_clock_loads_on(a->word, CLOCK_MONOTONIC, a->iters)
                      : bench_clock_cas_on(a->word, a->iters);
    a->t1 = bench_clock_ns();
    a->cpu = bench_cpu_ns() - c0;
    return NULL;
}

static _Alignas(64) uint64_t bench_words[2][8]; /* a cache line each */

static double bench_two_ex(sluice_limiter *l0, sluice_limiter *l1, uint64_t *w0, uint64_t *w1,
                           bool loads, uint64_t iters, uint64_t *allowed, double *each,
                           double *overlap)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 3);
    bench_thr a[2] = {{l0, w0, loads, iters, 0, &bar, 0, 0, 0},
                      {l1, w1, loads, iters, 0, &bar, 0, 0, 0}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, bench_thr_run, &a[k]);
    pthread_barrier_wait(&bar);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&bar);
    uint64_t t0 = a[0].t0 < a[1].t0 ? a[0].t0 : a[1].t0;
    uint64_t t1 = a[0].t1 > a[1].t1 ? a[0].t1 : a[1].t1;
    if (allowed) *allowed = a[0].n + a[1].n;
    bench_sink += a[0].n + a[1].n;
    if (each) {
        uint64_t w = a[0].t1 - a[0].t0 > a[1].t1 - a[1].t0 ? a[0].t1 - a[0].t0
                                                            : a[1].t1 - a[1].t0;
        *each = (double)w / (double)iters;
    }
    if (overlap) *overlap = t1 > t0 ? (double)(a[0].cpu + a[1].cpu) / (double)(t1 - t0) : 0;
    return (double)(t1 - t0) / (double)(2 * iters);
}

static double bench_two(sluice_limiter *l0, sluice_limiter *l1, uint64_t *w0, uint64_t *w1,
                        uint64_t iters, uint64_t *allowed)
{
    return bench_two_ex(l0, l1, w0, w1, false, iters, allowed, NULL, NULL);
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[n] (sorts v). */
static double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int bench_parse_u64(const char *opt, const char *s, uint64_t lo,
                           uint64_t hi, uint64_t *out)
{
    char *end;
    if (s == NULL) {
        fprintf(stderr, "bench_decide: %s needs a value\n", opt);
        return -1;
    }
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < lo ||
        v > hi) {
        fprintf(stderr, "bench_decide: %s \"%s\": want an integer %" PRIu64
                        " .. %" PRIu64 "\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static void bench_usage(FILE *out)
{
    fprintf(out,
            "usage: bench_decide [--runs N] [--iters N] [--only ALGORITHM]\n"
            "  --runs N     repetitions of each measurement (default 11)\n"
            "  --iters N    decisions per repetition (default 2000000)\n"
            "  --only S     only the algorithms whose name contains S\n"
            "Prints the median ns per decision of each algorithm, allowed and\n"
            "denied, with caller time and the live clock, and its ratio to a\n"
            "floor (a 64-bit CAS; a CLOCK_MONOTONIC read plus a 64-bit CAS).\n");
}

static sluice_limiter *bench_limiter(size_t a, const char *limit, bool coarse)
{
    char spec[128], err[256];
    snprintf(spec, sizeof spec, "%s %s%s%s", bench_algos[a].algo, limit,
             bench_algos[a].opts, coarse ? " clock=coarse" : "");
    sluice_limiter *lim = sluice_limiter_new(spec, err, sizeof err);
    if (lim == NULL)
        fprintf(stderr, "bench_decide: spec \"%s\" refused: %s\n", spec, err);
    return lim;
}

/* ---- concurrency: acquire + release against one token-bucket admission --
 * One iteration of `conc` is sluice_acquire_permit_at of 1 permit and its
 * sluice_permit_release_at (caller time); of `tb`, one
 * sluice_try_acquire_at on "token-bucket 1000000000/s", time advanced 1 us
 * (always an admission).  Both at caller time, in the same run,
 * interleaved; 1 thread, and 2 threads on one shared object. */
typedef struct bench_conc_thr {
    sluice_concurrency *c;
    sluice_limiter *tb;
    uint64_t iters, n, t0;
    pthread_barrier_t *bar;
} bench_conc_thr;

static uint64_t bench_conc_loop(sluice_concurrency *c, sluice_limiter *tb, uint64_t iters,
                                uint64_t t0)
{
    uint64_t ok = 0, t = t0;
    if (tb) {
        for (uint64_t i = 0; i < iters; i++, t += 1000) ok += sluice_try_acquire_at(tb, 1, t, NULL);
        return ok;
    }
    for (uint64_t i = 0; i < iters; i++, t += 1000) {
        sluice_permit pm;
        if (sluice_acquire_permit_at(c, 1, t, &pm, NULL)) ok += sluice_permit_release_at(&pm, t) == 0;
    }
    return ok;
}

static void *bench_conc_run(void *p)
{
    bench_conc_thr *a = p;
    pthread_barrier_wait(a->bar);
    a->n = bench_conc_loop(a->c, a->tb, a->iters, a->t0);
    return NULL;
}

/* ns per iteration over `nth` threads (1 or 2) on one object; *ok counts
 * the admissions. */
static double bench_conc_once(sluice_concurrency *c, sluice_limiter *tb, int nth, uint64_t iters,
                              uint64_t t0, uint64_t *ok)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nth + 1);
    bench_conc_thr a[2];
    pthread_t th[2];
    for (int k = 0; k < nth; k++) {
        a[k] = (bench_conc_thr){c, tb, iters, 0, t0, &bar};
        pthread_create(&th[k], NULL, bench_conc_run, &a[k]);
    }
    uint64_t s = bench_clock_ns();
    pthread_barrier_wait(&bar);
    *ok = 0;
    for (int k = 0; k < nth; k++) {
        pthread_join(th[k], NULL);
        *ok += a[k].n;
    }
    uint64_t e = bench_clock_ns();
    pthread_barrier_destroy(&bar);
    return (double)(e - s) / (double)(iters * (uint64_t)nth);
}

static int bench_conc(uint64_t runs, uint64_t iters)
{
    static const char *const names[3] = {"token-bucket admission", "concurrency acquire+release",
                                         "concurrency lease=1h acquire+release"};
    enum { NC = 3 };
    char err[256];
    sluice_limiter *tb = sluice_limiter_new("token-bucket 1000000000/s", err, sizeof err);
    sluice_concurrency *c0 = sluice_concurrency_new("concurrency 1000", err, sizeof err);
    sluice_concurrency *c1 = sluice_concurrency_new("concurrency 1000 lease=1h", err, sizeof err);
    double *v = calloc(2 * NC * runs, sizeof *v);
    if (!tb || !c0 || !c1 || !v) {
        fprintf(stderr, "bench_decide: concurrency: %s\n", err);
        return 1;
    }
    bool wrong = false;
    uint64_t t[2][NC] = {{BENCH_T0_NS, BENCH_T0_NS, BENCH_T0_NS}, {BENCH_T0_NS, BENCH_T0_NS, BENCH_T0_NS}};
    for (uint64_t r = 0; r <= runs; r++) /* run 0 warms up */
        for (int th = 1; th <= 2; th++)
            for (int k = 0; k < NC; k++) {
                uint64_t ok, n = r ? iters : iters / 10 + 1;
                double ns = bench_conc_once(k == 1 ? c0 : c1, k == 0 ? tb : NULL, th, n,
                                            t[th - 1][k], &ok);
                t[th - 1][k] += n * 1000 * (k == 0 ? (uint64_t)th : 1);
                if (ok != n * (uint64_t)th) wrong = true;
                if (r) v[((size_t)(th - 1) * NC + (size_t)k) * runs + r - 1] = ns;
            }
    printf("\nconcurrency: acquire + release of 1 permit against one token-bucket admission,\n"
           "caller time, same run (median ns per iteration over all threads, %" PRIu64 " runs of %" PRIu64 ")\n\n",
           runs, iters);
    printf("%-38s %-20s %s\n", "", "1 thread", "2 threads, one object");
    double base[2] = {bench_median(v, runs), bench_median(v + NC * runs, runs)};
    for (int k = 0; k < NC; k++) {
        double one = bench_median(v + (size_t)k * runs, runs);
        double two = bench_median(v + (size_t)(NC + k) * runs, runs);
        printf("%-38s %6.1f ns (%4.2fx)     %6.1f ns (%4.2fx)\n", names[k], one, one / base[0], two,
               two / base[1]);
    }
    if (wrong) printf("! an acquire or release failed\n");
    sluice_limiter_free(tb);
    sluice_concurrency_free(c0);
    sluice_concurrency_free(c1);
    free(v);
    return wrong;
}

int main(int argc, char **argv)
{
    uint64_t runs = 11, iters = 2000000;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bench_usage(stdout);
            return 0;
        } else if (strcmp(a, "--runs") == 0) {
            i++;
            if (bench_parse_u64(a, i < argc ? argv[i] : NULL, 1, 10000,
                                &runs) != 0)
                return 2;
        } else if (strcmp(a, "--iters") == 0) {
            i++;
            if (bench_parse_u64(a, i < argc ? argv[i] : NULL, 1,
                                UINT64_C(10000000000), &iters) != 0)
                return 2;
        } else if (strcmp(a, "--only") == 0) {
            if (++i >= argc) {
                fprintf(stderr, "bench_decide: --only needs a value\n");
                return 2;
            }
            only = argv[i];
        } else {
            fprintf(stderr, "bench_decide: unknown argument \"%s\" (try --help)\n", a);
            return 2;
        }
    }

    /* Build every measurement: the floors, then NCOLS per algorithm. */
    bench_meas meas[NFLOORS + BENCH_NALGOS * NCOLS];
    bool used[BENCH_NALGOS];
    size_t nmeas = 0;
    int status = 0;
    memset(meas, 0, sizeof meas);
    for (int f = 0; f < NFLOORS; f++)
        meas[nmeas++].floor = f;
    bool have_cas128 = BENCH_HAVE_CAS128;
    for (size_t a = 0; a < BENCH_NALGOS; a++) {
        used[a] = only == NULL || strstr(bench_algos[a].name, only) != NULL;
        for (int c = 0; c < NCOLS; c++) {
            bench_meas *m = &meas[nmeas++];
            m->floor = -1;
            if (!used[a])
                continue;
            m->live = c != COL_AT_ALLOW && c != COL_AT_DENY;
            m->expect_allow = c == COL_AT_ALLOW || c == COL_LIVE_ALLOW || c == COL_COARSE_ALLOW;
            m->step_ns = m->expect_allow ? BENCH_ALLOW_STEP_NS : BENCH_DENY_STEP_NS;
            m->now_ns = BENCH_T0_NS;
            m->lim = bench_limiter(a, m->expect_allow ? bench_algos[a].allow_limit
                                                      : BENCH_DENY_LIMIT,
                                   c == COL_COARSE_ALLOW || c == COL_COARSE_DENY);
            if (m->lim == NULL) {
                status = 1;
                continue;
            }
        }
    }
    for (size_t k = 0; k < nmeas; k++)
        meas[k].ns = calloc(runs, sizeof(double));
    for (size_t k = 0; k < nmeas; k++)
        if (meas[k].ns == NULL) {
            fprintf(stderr, "bench_decide: out of memory\n");
            return 1;
        }

    /* Warm up: the first request of each limiter (the one admission of the
     * denied path) and a tenth of a run, untimed and unchecked. */
    uint64_t warm = iters / 10 + 1;
    for (size_t k = 0; k < nmeas; k++) {
        bench_meas *m = &meas[k];
        if (m->floor >= 0) {
            bench_sink += bench_floor(m->floor, warm);
        } else if (m->lim != NULL) {
            bench_sink += m->live ? bench_live(m->lim, warm)
                                  : bench_at(m->lim, &m->now_ns, m->step_ns, warm);
        }
    }

    for (uint64_t r = 0; r < runs; r++)
        for (size_t k = 0; k < nmeas; k++)
            if (meas[k].floor >= 0 || meas[k].lim != NULL)
                meas[k].ns[r] = bench_once(&meas[k], iters);

    /* Spread of the runs: the worst (max - min) / median over all cells. */
    double worst_spread = 0, med[NFLOORS + BENCH_NALGOS * NCOLS];
    for (size_t k = 0; k < nmeas; k++) {
        if (meas[k].floor < 0 && meas[k].lim == NULL)
            continue;
        med[k] = bench_median(meas[k].ns, runs);
        double spread = med[k] > 0 ? (meas[k].ns[runs - 1] - meas[k].ns[0]) / med[k] : 0;
        if (spread > worst_spread)
            worst_spread = spread;
    }
    double floor_lc = med[FLOOR_CLOCK_CAS], floor_cas = med[FLOOR_CAS];
    double floor_l2 = med[FLOOR_CLOCK_LOADS], floor_c2 = med[FLOOR_COARSE_LOADS];

    printf("bench_decide: sluice %s, 1 thread, %" PRIu64 " runs x %" PRIu64
           " decisions; median ns per decision\n\n",
           sluice_version(), runs, iters);
    printf("floor  clock+CAS  CLOCK_MONOTONIC read + 64-bit CAS  %7.2f ns\n",
           floor_lc);
    printf("floor  CAS        64-bit compare-and-swap alone      %7.2f ns\n",
           floor_cas);
    if (have_cas128)
        printf("ref    CAS128     16-byte compare-and-swap alone     %7.2f ns\n",
               med[FLOOR_CAS128]);
    printf("floor  clock+2ld  CLOCK_MONOTONIC read + 2 loads     %7.2f ns\n",
           floor_l2);
    printf("floor  coarse+2ld CLOCK_MONOTONIC_COARSE + 2 loads   %7.2f ns\n",
           floor_c2);
    printf("ref    mutex      uncontended lock + unlock          %7.2f ns\n\n",
           med[FLOOR_MUTEX]);
    printf("%-21s %-31s %-31s %s\n", "", "caller time (_at) / CAS floor",
           "live / clock+CAS, clock+2ld", "coarse / clock+CAS, coarse+2ld");
    printf("%-21s", "algorithm");
    for (int c = 0; c < NCOLS; c++)
        printf(c + 1 < NCOLS ? " %-15s" : " %s", bench_col_names[c]);
    printf("\n");
    bool any_wrong = false;
    for (size_t a = 0; a < BENCH_NALGOS; a++) {
        if (!used[a])
            continue;
        printf("%-21s", bench_algos[a].name);
        for (int c = 0; c < NCOLS; c++) {
            size_t k = NFLOORS + a * NCOLS + (size_t)c;
            const bench_meas *m = &meas[k];
            char cell[48];
            if (m->lim == NULL) {
                snprintf(cell, sizeof cell, "refused");
            } else {
                double fl = !m->live ? floor_cas
                            : m->expect_allow ? floor_lc
                            : c == COL_LIVE_DENY ? floor_l2 : floor_c2;
                snprintf(cell, sizeof cell, "%6.1f (%4.1fx)%s", med[k],
                         fl > 0 ? med[k] / fl : 0.0, m->wrong ? "!" : "");
                any_wrong |= m->wrong != 0;
            }
            printf(c + 1 < NCOLS ? " %-15s" : " %s", cell);
        }
        printf("\n");
    }
    printf("\nallowed: \"ALG %s\" (sliding-log: %s), caller time +%u ns "
           "per decision;\ndenied: \"ALG %s\" after its first request, caller "
           "time +%u ns per decision.\nWorst run spread (max-min)/median over "
           "all cells: %.0f%%.\n",
           BENCH_ALLOW_LIMIT, BENCH_ALLOW_LIMIT_LOG, BENCH_ALLOW_STEP_NS,
           BENCH_DENY_LIMIT, BENCH_DENY_STEP_NS, worst_spread * 100);
    printf("\nrefusal with the live clock / clock+2ld (target <= 1.15x):");
    for (size_t a = 0; a < BENCH_NALGOS; a++) {
        const bench_meas *m = &meas[NFLOORS + a * NCOLS + COL_LIVE_DENY];
        if (!used[a] || m->lim == NULL) continue;
        double r = floor_l2 > 0 ? med[NFLOORS + a * NCOLS + COL_LIVE_DENY] / floor_l2 : 0;
        printf("\n  %-21s %5.2fx %s", bench_algos[a].name, r, r <= 1.15 ? "met" : "MISSED");
    }
    printf("\n");
    if (any_wrong) {
        printf("! some decisions went against the path (allowed where denial "
               "was expected or vice versa):\n");
        for (size_t a = 0; a < BENCH_NALGOS; a++)
            for (int c = 0; c < NCOLS; c++) {
                const bench_meas *m = &meas[NFLOORS + a * NCOLS + (size_t)c];
                if (m->wrong)
                    printf("!   %s, %s %s: %" PRIu64 " of %" PRIu64 "\n",
                           bench_algos[a].name, m->live ? "live" : "caller time",
                           bench_col_names[c], m->wrong, runs * iters);
            }
        status = 1;
    }

    /* Two threads refusing on one limiter (live clock), per algorithm, and
     * the floor: two threads doing clock+2ld on one shared word.  Each run
     * times, back to back, one thread alone and then two together on the
     * same limiter (or word), so the ratio compares like with like. */
    {
        uint64_t diters = iters / 2 + 1;
        size_t nd = 1 + BENCH_NALGOS;
        double *one = calloc(nd * runs, sizeof *one), *each = calloc(nd * runs, sizeof *each);
        double *wall = calloc(nd * runs, sizeof *wall), *ovl = calloc(nd * runs, sizeof *ovl);
        sluice_limiter *dl[BENCH_NALGOS] = {NULL};
        for (size_t a = 0; a < BENCH_NALGOS; a++)
            if (used[a] && (dl[a] = bench_limiter(a, BENCH_DENY_LIMIT, false)) != NULL)
                bench_sink += sluice_try_acquire(dl[a], 1); /* the one admission */
        bool dwrong = false;
        for (uint64_t r = 0; one && each && wall && ovl && r < runs; r++)
            for (size_t k = 0; k < nd; k++) {
                sluice_limiter *l = k ? dl[k - 1] : NULL;
                if (k && !l) continue;
                uint64_t t0 = bench_clock_ns();
                uint64_t n = l ? bench_live(l, diters)
                               : bench_clock_loads_on(bench_state, CLOCK_MONOTONIC, diters);
                one[k * runs + r] = (double)(bench_clock_ns() - t0) / (double)diters;
                uint64_t ok = 0;
                wall[k * runs + r] = bench_two_ex(l, l, bench_state, bench_state, true, diters,
                                                  &ok, &each[k * runs + r], &ovl[k * runs + r]);
                if (l && (n != 0 || ok != 0)) dwrong = true, status = 1;
                bench_sink += n;
            }
        if (one && each && wall && ovl) {
            printf("\n2 threads refusing on one limiter, live clock: each thread's own ns per "
                   "decision\nagainst one thread alone on the same limiter, timed back to back "
                   "(target <= 1.15x);\npair = the work the two do together over one thread's "
                   "(target >= 1.75x); overlap = CPU time of\nthe two over the pair's wall "
                   "time (2.0: side by side all along). Median of %" PRIu64 " runs of 2 x %" PRIu64
                   ".\n\n", runs, diters);
            printf("%-21s %-10s %-20s %-8s %s\n", "", "1 thread", "each of 2 (ratio)", "pair",
                   "overlap");
            for (size_t k = 0; k < nd; k++) {
                if (k && !dl[k - 1]) continue;
                double o = bench_median(one + k * runs, runs);
                double e = bench_median(each + k * runs, runs);
                double w = bench_median(wall + k * runs, runs);
                double v = bench_median(ovl + k * runs, runs);
                printf("%-21s %6.1f ns  %6.1f ns (%4.2fx)%s  %5.2fx%s  %4.2f\n",
                       k ? bench_algos[k - 1].name : "floor clock+2ld", o, e, e / o,
                       k && e / o > 1.15 ? "!" : " ", o / w, k && o / w < 1.75 ? "!" : " ", v);
            }
            printf("(!: that target missed)\n");
            if (dwrong) printf("! a refusal path admitted\n");
        }
        for (size_t a = 0; a < BENCH_NALGOS; a++) sluice_limiter_free(dl[a]);
        free(one), free(each), free(wall), free(ovl);
    }

    /* Two threads, live clock, allowed path: on one limiter (contended)
     * and on a limiter each; floors: clock+CAS on one word and on a word
     * each.  Aggregate wall time per decision. */
    enum { T_FLOOR_SHARED, T_FLOOR_OWN, T_FIRST_ALG };
    size_t nt = T_FIRST_ALG + 2 * BENCH_NALGOS;
    double *tns = calloc(nt * runs, sizeof *tns);
    sluice_limiter *tl[BENCH_NALGOS][3] = {{NULL}};
    uint64_t titers = iters / 2 + 1;
    for (size_t a = 0; a < BENCH_NALGOS; a++)
        for (int k = 0; k < 3 && used[a]; k++)
            tl[a][k] = bench_limiter(a, bench_algos[a].allow_limit, false);
    for (uint64_t r = 0; tns && r < runs; r++) {
        tns[T_FLOOR_SHARED * runs + r] =
            bench_two(NULL, NULL, bench_words[0], bench_words[0], titers, NULL);
        tns[T_FLOOR_OWN * runs + r] =
            bench_two(NULL, NULL, bench_words[0], bench_words[1], titers, NULL);
        for (size_t a = 0; a < BENCH_NALGOS; a++) {
            if (!tl[a][0] || !tl[a][1] || !tl[a][2]) continue;
            uint64_t ok = 0;
            tns[(T_FIRST_ALG + 2 * a) * runs + r] =
                bench_two(tl[a][0], tl[a][0], NULL, NULL, titers, &ok);
            if (ok != 2 * titers) any_wrong = true, status = 1;
            tns[(T_FIRST_ALG + 2 * a + 1) * runs + r] =
                bench_two(tl[a][1], tl[a][2], NULL, NULL, titers, &ok);
            if (ok != 2 * titers) any_wrong = true, status = 1;
        }
    }
    if (tns) {
        double fs = bench_median(tns + T_FLOOR_SHARED * runs, runs);
        double fo = bench_median(tns + T_FLOOR_OWN * runs, runs);
        printf("\n2 threads, live clock, allowed path: wall ns per decision over both "
               "threads\n(median of %" PRIu64 " runs of 2 x %" PRIu64 "; ratio to the "
               "floor with the same sharing)\n\n", runs, titers);
        printf("floor  clock+CAS on one shared word    %7.2f ns\n", fs);
        printf("floor  clock+CAS on a word each        %7.2f ns\n\n", fo);
        printf("%-21s %-16s %-22s %s\n", "algorithm", "1 thread", "2 threads, one limiter",
               "2 threads, a limiter each");
        for (size_t a = 0; a < BENCH_NALGOS; a++) {
            if (!used[a] || !tl[a][0] || !tl[a][1] || !tl[a][2]) continue;
            double one = med[NFLOORS + a * NCOLS + COL_LIVE_ALLOW];
            double sh = bench_median(tns + (T_FIRST_ALG + 2 * a) * runs, runs);
            double ow = bench_median(tns + (T_FIRST_ALG + 2 * a + 1) * runs, runs);
            char c1[32], c2[32];
            snprintf(c1, sizeof c1, "%6.1f (%4.1fx)", sh, sh / fs);
            snprintf(c2, sizeof c2, "%6.1f (%4.1fx)", ow, ow / fo);
            printf("%-21s %6.1f ns        %-22s %s\n", bench_algos[a].name, one, c1, c2);
        }
        if (any_wrong) printf("! a threaded run refused on the allowed path\n");
    }
    for (size_t a = 0; a < BENCH_NALGOS; a++)
        for (int k = 0; k < 3; k++) sluice_limiter_free(tl[a][k]);
    free(tns);

    if ((only == NULL || strstr("concurrency", only) != NULL) && bench_conc(runs, iters) != 0)
        status = 1;

    for (size_t k = 0; k < nmeas; k++) {
        sluice_limiter_free(meas[k].lim);
        free(meas[k].ns);
    }
    return status;
}
