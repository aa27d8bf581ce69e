/* bench_table.c -- a table of millions of keys: the cost of one decision,
 * the bytes per key, and a flood of unique keys through a bounded table.
 *
 * Build (the lead adds these lines to bench/CMakeLists.txt, beside
 * bench_decide).  The benchmark reads two library internals through
 * src/table/table.h -- sluice__table_bytes() and sluice__table_new_seeded() --
 * so, unlike bench_decide, it also gets src/ on its include path; the hidden
 * symbols link fine from the static library:
 *
 *   add_executable(bench_table bench_table.c)
 *   target_include_directories(bench_table PRIVATE ${PROJECT_SOURCE_DIR}/src)
 *   target_link_libraries(bench_table PRIVATE sluice_static)
 *   set_target_properties(bench_table PROPERTIES
 *     RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
 *
 * By hand, from the repository root, after building libsluice.a in build/:
 *
 *   gcc -std=c11 -O2 -mcx16 -Iinclude -Isrc bench/bench_table.c \
 *       build/libsluice.a -lpthread -lm -o bench_table
 *
 * What it measures (bench/README.md has the details):
 *
 * 1. Decisions.  For N live keys (default 10^3, 10^6, 10^7) in a table made
 *    with max_keys = N and the spec "token-bucket 100/s" (--spec), keys of
 *    16 bytes (two 64-bit ids), drawn uniformly or from Zipf(1.0) over the N
 *    keys, by 1 or 2 threads: median ns per sluice_table_try_acquire_at(t,
 *    key, 16, 1, now, NULL), caller time advancing 1 ns per decision, on
 *    the wall clock and (beside it) in thread CPU time, which leaves out the
 *    time a thread was descheduled -- on a shared machine the two differ.  The
 *    key sequences are generated before any timing; every key is put in the
 *    table first (one request of half its burst, so that it stays in use --
 *    not at rest, hence held -- for the whole benchmark; checked).
 *    The floor, measured in the same process and interleaved with the rest:
 *    one dependent random 8-byte read per decision from an array as large
 *    as the table (sluice__table_bytes()), at a position fixed per key, over
 *    the same key sequence -- the one cache miss a lookup cannot avoid.
 *    With 2 threads, each has its own key sequence over the same table (and
 *    the same array for the floor); the cell is ns per decision per thread,
 *    and the total decisions per second is printed beside it.
 * 2. Bytes per key: sluice__table_bytes() / max_keys (all that the table
 *    allocates), and the growth of the process's resident set
 *    (/proc/self/statm) from before sluice_table_new to after the N keys
 *    are in, per key.
 * 3. Flood: a table with max_keys = 10^6 (--flood-keys) gets 10^6 held
 *    keys (1 permit each, caller time +1 ns per key: they all come to rest
 *    in the same millisecond, 10 ms later), then --flood (default 10^8)
 *    unique keys that each ask once, caller time advancing 10^8 ns /
 *    max_keys per key (100 ns: the flood keys not yet at rest are then a
 *    tenth of max_keys), interleaved with one request per microsecond of
 *    caller time for 1000 of the held keys (in turn: 0 .. 499 at 1000/s,
 *    always in use; 500 .. 999 at 25/s, at rest and reclaimable between
 *    requests), each also asked of an independent sluice_limiter: any
 *    difference in allowed, remaining, retry_after_ns or wait_ns is a
 *    changed decision (must be 0; a held key refused because the table is
 *    full counts, and is also shown apart).  Tracks the keys held
 *    (stats.keys, sampled every 10^5 flood keys; never above max_keys), the
 *    peak resident set (getrusage ru_maxrss, and statm sampled with the
 *    keys) against the resident set with the held keys, the elapsed time
 *    and its slowest stretch of 10^5 flood keys.  The flood runs first, so
 *    that ru_maxrss is its own.
 *
 * 4. --refusals, alone: the cost of a refusal by the algorithm with and
 *    without the sketch of the keys refused most (bt_refusals below).
 * 5. Bursts (--burst, alone): sluice_table_try_acquire_burst_at() in bursts
 *    of 32 over 10^6 live keys (--burst-keys) drawn uniformly, against the
 *    same keys by single calls and against the floor "independent random
 *    loads each followed by a locked add, over an array of the table's
 *    size" (bt_burst_part has the details), interleaved, medians.
 * 6. The overload path (--overload, alone): 2 threads refusing one hot key
 *    against 1; a flood of unique keys against a full table of 10^6 keys
 *    against a normal decision; that decision against one dependent random
 *    load (bt_overload has the details), interleaved, medians.  With --top,
 *    both tables keep the sketch of the keys refused most
 *    (sluice_table_set_top(t, 64, 16)), as the targets must hold with it.
 * 7. Keys at rest by their next visit (--sparse, alone): 10^6 keys visited
 *    uniformly 10 ns apart, under "token-bucket 1000/s burst=1000" (at rest
 *    by the next visit) and "token-bucket 1/h burst=1000000" (held), against
 *    one dependent random load over 64 MiB (bt_sparse has the details).
 *
 * It ends with one table of the targets, met or missed.  Targets
 * are for reading (timings depend on the machine); the exit status is 1 only
 * when a check of correctness fails: a changed decision, more keys held than
 * max_keys, or a latency table that lost keys (the numbers would then not be
 * those of live keys); 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE: the floor in huge pages */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <sluice.h>

#include "table/table.h" /* sluice__table_bytes, sluice__table_new_seeded */

#define BT_DEFAULT_SPEC "token-bucket 100/s"
#define BT_T0_NS 1000000000ULL /* caller time of the first request */
#define BT_STEP_NS 1u          /* caller time per decision (latency part) */
#define BT_SPARSE_STEP_NS 10u  /* caller time per visit (--sparse) */
#define BT_MAX_SIZES 8
#define BT_MAX_THREADS 2

#define BT_FLOOD_TRACKED 1000u     /* held keys checked against a limiter */
/* Caller time per flood key: 10^8 ns / max_keys (100 ns for 10^6), so that
 * the flood keys not yet at rest -- 10 ms each under 100/s -- number a tenth
 * of max_keys and the held keys that come back always find room. */
#define BT_FLOOD_SPAN_NS 100000000u
#define BT_FLOOD_TRACK_NS 1000u    /* caller time per tracked request */
#define BT_FLOOD_SLOW_EVERY 40u    /* the slow half: one cycle in 40 */
#define BT_FLOOD_SAMPLE_EVERY 100000u

/* Targets of the issue. */
#define BT_TARGET_UNIFORM_NS 80.0
#define BT_TARGET_ZIPF_NS 40.0
#define BT_TARGET_BYTES 64.0
#define BT_TARGET_FLOOD_RSS 1.2

__extension__ typedef unsigned __int128 bt_u128;

typedef struct bt_key {
    uint64_t w[2]; /* two 64-bit ids: 16 bytes, stored inline by the table */
} bt_key;

enum { DIST_UNIFORM, DIST_ZIPF, NDIST };
static const char *const bt_dist_names[NDIST] = {"uniform", "zipf1.0"};

static volatile uint64_t bt_sink;
static long bt_page;

/* ---- small helpers ------------------------------------------------------ */

static uint64_t bt_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time: unlike the wall clock, it does not count
 * the time the thread spent descheduled (or asleep on a contended lock). */
static uint64_t bt_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64's finaliser: a bijection of 64-bit words. */
static uint64_t bt_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* splitmix64: the fast PRNG of the key sequences. */
static uint64_t bt_rand(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ULL;
    return bt_mix(*s);
}

/* Uniform in [0, n). */
static uint64_t bt_below(uint64_t *s, uint64_t n)
{
    return (uint64_t)(((bt_u128)bt_rand(s) * n) >> 64);
}

/* Uniform in (0, 1]. */
static double bt_unit(uint64_t *s)
{
    return ((double)(bt_rand(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

/* Key number r (0 .. N-1) of the latency tables, of the held keys of the
 * flood, and flood key i: the second id keeps the families apart. */
static bt_key bt_key_of(uint64_t r)
{
    bt_key k = {{bt_mix(r ^ 0x5eedf00dcafe1234ULL), r}};
    return k;
}

static bt_key bt_flood_key(uint64_t i)
{
    bt_key k = {{bt_mix(i ^ 0xf100df100df100dULL), i | (1ULL << 63)}};
    return k;
}

/* The resident set, bytes, from /proc/self/statm (0 if unreadable). */
static uint64_t bt_rss(void)
{
    unsigned long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &res) != 2)
        res = 0;
    fclose(f);
    return (uint64_t)res * (uint64_t)bt_page;
}

/* The process's peak resident set so far, bytes (getrusage, KiB on Linux). */
static uint64_t bt_maxrss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u;
}

static int bt_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[n] (sorts v). */
static double bt_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bt_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void *bt_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "bench_table: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* 1234567 -> "1.2e6" style for key counts that are powers of ten, else %llu. */
static const char *bt_count(uint64_t n, char *buf, size_t len)
{
    uint64_t p = 1;
    int e = 0;
    while (p < n && e < 19) {
        p *= 10;
        e++;
    }
    if (p == n && e >= 3)
        snprintf(buf, len, "10^%d", e);
    else
        snprintf(buf, len, "%" PRIu64, n);
    return buf;
}

/* ---- Zipf(1.0) over 1 .. n: rejection-inversion ------------------------- */

/* Hoermann and Derflinger, "Rejection-inversion to generate variates from
 * monotone discrete distributions" (1996), as Apache Commons RNG's
 * RejectionInversionZipfSampler, for exponent 1: h(x) = 1/x, its integral
 * H(x) = log x, H^-1(y) = exp y.  O(1) per sample, no table. */
typedef struct bt_zipf {
    double n, h_x1, h_n, s;
} bt_zipf;

static void bt_zipf_init(bt_zipf *z, uint64_t n)
{
    z->n = (double)n;
    z->h_x1 = log(1.5) - 1.0;              /* H(1.5) - h(1) */
    z->h_n = log((double)n + 0.5);         /* H(n + 0.5) */
    z->s = 2.0 - exp(log(2.5) - 1.0 / 2);  /* 2 - H^-1(H(2.5) - h(2)) */
}

/* A rank in 1 .. n, P(k) proportional to 1/k. */
static uint64_t bt_zipf_next(const bt_zipf *z, uint64_t *rng)
{
    for (;;) {
        double u = z->h_n + bt_unit(rng) * (z->h_x1 - z->h_n);
        double x = exp(u);
        double kd = floor(x + 0.5);
        if (kd < 1)
            kd = 1;
        else if (kd > z->n)
            kd = z->n;
        if (kd - x <= z->s || u >= log(kd + 0.5) - 1.0 / kd)
            return (uint64_t)kd;
    }
}

/* ---- the timed loops ---------------------------------------------------- */

/* n decisions of 1 permit; returns those allowed. */
static uint64_t bt_run_table(sluice_table *t, const bt_key *keys, size_t n,
                             uint64_t now)
{
    uint64_t allowed = 0;
    for (size_t i = 0; i < n; i++) {
        allowed += sluice_table_try_acquire_at(t, &keys[i], sizeof keys[i], 1,
                                               now, NULL);
        now += BT_STEP_NS;
    }
    return allowed;
}

/* The floor: n dependent random reads.  Every word of arr is all ones, so
 * v + 1 is 0 and each read is at pos[i]; but the address depends on the
 * value of the previous read, so the reads cannot overlap. */
static uint64_t bt_run_floor(const uint64_t *arr, const uint64_t *pos, size_t n)
{
    uint64_t v = UINT64_MAX;
    for (size_t i = 0; i < n; i++)
        v = arr[pos[i] ^ (v + 1)];
    return v;
}

typedef struct bt_job {
    bool floor;
    sluice_table *t;
    const bt_key *keys;
    const uint64_t *arr, *pos;
    size_t n;
    uint64_t now;              /* caller time of the first decision */
    pthread_barrier_t *start;  /* NULL when run on the calling thread */
    uint64_t t_begin, t_end, cpu_begin, cpu_end, result;
} bt_job;

static void *bt_job_main(void *arg)
{
    bt_job *j = arg;
    if (j->start != NULL)
        pthread_barrier_wait(j->start);
    j->cpu_begin = bt_cpu_ns();
    j->t_begin = bt_clock_ns();
    j->result = j->floor ? bt_run_floor(j->arr, j->pos, j->n)
                         : bt_run_table(j->t, j->keys, j->n, j->now);
    j->t_end = bt_clock_ns();
    j->cpu_end = bt_cpu_ns();
    return NULL;
}

/* ---- part 1 and 2: decisions and bytes per key -------------------------- */

/* One timed thing of a key count: a floor or the table, for one key
 * distribution and thread count. */
typedef struct bt_meas {
    bool floor;
    int dist, nthreads;
    double *ns;    /* per run: ns per decision per thread (wall clock) */
    double *cpu;   /* per run: the same in thread CPU time */
    double *rate;  /* per run: decisions per second, all threads */
    uint64_t allowed, decided;
    double med_ns, med_cpu, med_rate;
} bt_meas;

enum { BT_NMEAS = NDIST * 2 * 2 }; /* dist x {1, 2 threads} x {floor, table} */

typedef struct bt_size_result {
    uint64_t n;
    size_t table_bytes;
    double bytes_per_key, rss_per_key, fill_ns;
    uint64_t rss_delta;
    bool lost_keys; /* keys reclaimed, refused or missing: not all live */
    sluice_table_stats st;
    bt_meas meas[BT_NMEAS];
} bt_size_result;

typedef struct bt_opts {
    uint64_t runs, iters, flood, flood_keys, burst_keys;
    bool burst;
    bool top; /* --overload --top: the tables count their refusals in a sketch */
    uint64_t sizes[BT_MAX_SIZES];
    size_t nsizes;
    const char *spec;
} bt_opts;

/* Fill every meas of one key count: run it o->runs times, interleaved. */
static int bt_measure_size(const bt_opts *o, uint64_t n, bt_size_result *out,
                           double *worst_spread)
{
    char err[256], nb[32];
    const uint64_t seed[2] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    memset(out, 0, sizeof *out);
    out->n = n;

    /* The burst of the spec: what a probe of a fresh limiter reports. */
    sluice_limiter *probe = sluice_limiter_new(o->spec, err, sizeof err);
    if (probe == NULL) {
        fprintf(stderr, "bench_table: spec \"%s\" refused: %s\n", o->spec, err);
        return -1;
    }
    sluice_result pr;
    sluice_try_acquire_at(probe, 0, BT_T0_NS, &pr);
    sluice_limiter_free(probe);
    const uint64_t warm_permits = pr.remaining / 2 ? pr.remaining / 2 : 1;

    fprintf(stderr, "bench_table: %s keys: filling...\n", bt_count(n, nb, sizeof nb));
    const uint64_t rss0 = bt_rss();
    sluice_table *t = sluice__table_new_seeded(o->spec, (size_t)n, 0, seed, err, sizeof err);
    if (t == NULL) {
        fprintf(stderr, "bench_table: table of %" PRIu64 " keys: %s\n", n, err);
        return -1;
    }
    out->table_bytes = sluice__table_bytes(t);
    uint64_t now = BT_T0_NS;
    uint64_t f0 = bt_clock_ns();
    for (uint64_t r = 0; r < n; r++) {
        bt_key k = bt_key_of(r);
        sluice_table_try_acquire_at(t, &k, sizeof k, warm_permits, now, NULL);
        now += BT_STEP_NS;
    }
    out->fill_ns = (double)(bt_clock_ns() - f0) / (double)n;
    const uint64_t rss1 = bt_rss();
    out->rss_delta = rss1 > rss0 ? rss1 - rss0 : 0;
    out->bytes_per_key = (double)out->table_bytes / (double)n;
    out->rss_per_key = (double)out->rss_delta / (double)n;
    sluice_table_stats_get(t, &out->st);
    if (out->st.keys != n)
        out->lost_keys = true;

    /* Key sequences (rank -> key) and floor positions (key -> word of an
     * array as large as the table), per distribution and thread, made now:
     * nothing of this is timed. */
    const size_t iters = (size_t)o->iters;
    const uint64_t words = out->table_bytes / sizeof(uint64_t);
    bt_key *keys[NDIST][BT_MAX_THREADS];
    uint64_t *pos[NDIST][BT_MAX_THREADS];
    bt_zipf z;
    bt_zipf_init(&z, n);
    for (int d = 0; d < NDIST; d++)
        for (int th = 0; th < BT_MAX_THREADS; th++) {
            uint64_t rng = 0x243f6a8885a308d3ULL ^ ((uint64_t)d << 40) ^ ((uint64_t)th << 32) ^ n;
            keys[d][th] = bt_xmalloc(iters * sizeof(bt_key));
            pos[d][th] = bt_xmalloc(iters * sizeof(uint64_t));
            for (size_t i = 0; i < iters; i++) {
                uint64_t r = d == DIST_UNIFORM ? bt_below(&rng, n) : bt_zipf_next(&z, &rng) - 1;
                keys[d][th][i] = bt_key_of(r);
                pos[d][th][i] = bt_mix(r ^ 0x9e3779b97f4a7c15ULL) % words;
            }
        }
    /* The floor's array: every word all ones (see bt_run_floor); written, so
     * that its pages are real, as the table's are. */
    uint64_t *arr = bt_xmalloc((size_t)words * sizeof(uint64_t));
    memset(arr, 0xff, (size_t)words * sizeof(uint64_t));

    bt_meas *m = out->meas;
    for (int d = 0, k = 0; d < NDIST; d++)
        for (int th = 1; th <= BT_MAX_THREADS; th++)
            for (int fl = 1; fl >= 0; fl--, k++) {
                m[k].floor = fl;
                m[k].dist = d;
                m[k].nthreads = th;
                m[k].ns = bt_xmalloc(o->runs * sizeof(double));
                m[k].cpu = bt_xmalloc(o->runs * sizeof(double));
                m[k].rate = bt_xmalloc(o->runs * sizeof(double));
            }

    fprintf(stderr, "bench_table: %s keys: %" PRIu64 " runs...\n",
            bt_count(n, nb, sizeof nb), o->runs);
    /* Run 0 .. runs; pass 0 is the warm-up (a tenth of a run, untimed). */
    for (uint64_t r = 0; r <= o->runs; r++) {
        for (int k = 0; k < BT_NMEAS; k++) {
            bt_job jobs[BT_MAX_THREADS];
            pthread_t tids[BT_MAX_THREADS];
            pthread_barrier_t bar;
            const int nt = m[k].nthreads;
            const size_t len = r == 0 ? iters / 10 + 1 : iters;
            for (int th = 0; th < nt; th++) {
                jobs[th] = (bt_job){.floor = m[k].floor, .t = t, .keys = keys[m[k].dist][th],
                                    .arr = arr, .pos = pos[m[k].dist][th], .n = len,
                                    .now = now, .start = nt > 1 ? &bar : NULL};
            }
            if (nt == 1) {
                bt_job_main(&jobs[0]);
            } else {
                pthread_barrier_init(&bar, NULL, (unsigned)nt);
                for (int th = 0; th < nt; th++)
                    if (pthread_create(&tids[th], NULL, bt_job_main, &jobs[th]) != 0) {
                        fprintf(stderr, "bench_table: pthread_create failed\n");
                        exit(1);
                    }
                for (int th = 0; th < nt; th++)
                    pthread_join(tids[th], NULL);
                pthread_barrier_destroy(&bar);
            }
            if (!m[k].floor)
                now += len * BT_STEP_NS;
            uint64_t first = UINT64_MAX, last = 0;
            double ns = 0, cpu = 0;
            for (int th = 0; th < nt; th++) {
                bt_sink += jobs[th].result;
                if (jobs[th].t_begin < first)
                    first = jobs[th].t_begin;
                if (jobs[th].t_end > last)
                    last = jobs[th].t_end;
                ns += (double)(jobs[th].t_end - jobs[th].t_begin) / (double)len;
                cpu += (double)(jobs[th].cpu_end - jobs[th].cpu_begin) / (double)len;
                if (r > 0 && !m[k].floor) {
                    m[k].allowed += jobs[th].result;
                    m[k].decided += len;
                }
            }
            if (r > 0) {
                m[k].ns[r - 1] = ns / nt;
                m[k].cpu[r - 1] = cpu / nt;
                m[k].rate[r - 1] = (double)nt * (double)len * 1e9 / (double)(last - first);
            }
        }
    }
    for (int k = 0; k < BT_NMEAS; k++) {
        m[k].med_cpu = bt_median(m[k].cpu, o->runs);
        m[k].med_ns = bt_median(m[k].ns, o->runs);
        m[k].med_rate = bt_median(m[k].rate, o->runs);
        double spread = m[k].med_ns > 0
                            ? (m[k].ns[o->runs - 1] - m[k].ns[0]) / m[k].med_ns
                            : 0;
        if (spread > *worst_spread)
            *worst_spread = spread;
    }

    sluice_table_stats_get(t, &out->st);
    if (out->st.keys != n || out->st.reclaimed || out->st.evicted || out->st.refused)
        out->lost_keys = true;

    free(arr);
    for (int d = 0; d < NDIST; d++)
        for (int th = 0; th < BT_MAX_THREADS; th++) {
            free(keys[d][th]);
            free(pos[d][th]);
        }
    sluice_table_free(t);
    return 0;
}

/* ---- part 3: the flood -------------------------------------------------- */

typedef struct bt_flood_result {
    bool run;
    uint64_t n;                 /* flood keys */
    uint64_t held;              /* keys held after the fill */
    uint64_t rss_base, rss_held;
    uint64_t rss_peak_statm, rss_peak_ru;
    uint64_t keys_max;
    uint64_t step_ns, track_every; /* caller time per flood key; flood keys per tracked request */
    uint64_t tracked_decisions, tracked_allowed, mismatches;
    uint64_t mismatches_full;   /* of which: refused as full (SLUICE_EFULL) */
    uint64_t flood_allowed, flood_full, flood_other;
    double elapsed_s, fill_s;
    double slowest_s;           /* the slowest window of BT_FLOOD_SAMPLE_EVERY keys */
    uint64_t slowest_at;        /* its first flood key */
    sluice_table_stats st;
} bt_flood_result;

static bool bt_same(const sluice_result *a, const sluice_result *b, bool oa, bool ob)
{
    return oa == ob && a->allowed == b->allowed && a->wait_ns == b->wait_ns &&
           a->remaining == b->remaining && a->retry_after_ns == b->retry_after_ns;
}

static int bt_flood(const bt_opts *o, bt_flood_result *fr)
{
    char err[256];
    memset(fr, 0, sizeof *fr);
    fr->run = true;
    fr->n = o->flood;
    char nb[32];
    fprintf(stderr, "bench_table: flood: filling %s held keys...\n",
            bt_count(o->flood_keys, nb, sizeof nb));

    sluice_limiter **lim = bt_xmalloc(BT_FLOOD_TRACKED * sizeof *lim);
    for (unsigned j = 0; j < BT_FLOOD_TRACKED; j++) {
        lim[j] = sluice_limiter_new(o->spec, err, sizeof err);
        if (lim[j] == NULL) {
            fprintf(stderr, "bench_table: spec \"%s\" refused: %s\n", o->spec, err);
            return -1;
        }
    }
    fr->rss_base = bt_rss();
    sluice_table *t = sluice_table_new(o->spec, (size_t)o->flood_keys, err, sizeof err);
    if (t == NULL) {
        fprintf(stderr, "bench_table: flood table: %s\n", err);
        return -1;
    }
    uint64_t now = BT_T0_NS;
    uint64_t c0 = bt_clock_ns();
    for (uint64_t r = 0; r < o->flood_keys; r++) {
        bt_key k = bt_key_of(r);
        sluice_result a, b;
        bool oa = sluice_table_try_acquire_at(t, &k, sizeof k, 1, now, &a);
        if (r < BT_FLOOD_TRACKED) {
            bool ob = sluice_try_acquire_at(lim[r], 1, now, &b);
            fr->tracked_decisions++;
            fr->tracked_allowed += ob;
            fr->mismatches += !bt_same(&a, &b, oa, ob);
        }
        now += 1;
    }
    fr->fill_s = (double)(bt_clock_ns() - c0) / 1e9;
    sluice_table_stats_get(t, &fr->st);
    fr->held = fr->st.keys;
    fr->keys_max = fr->st.keys;
    fr->rss_held = bt_rss();
    fr->rss_peak_statm = fr->rss_held;

    fr->step_ns = BT_FLOOD_SPAN_NS / o->flood_keys ? BT_FLOOD_SPAN_NS / o->flood_keys : 1;
    fr->track_every = BT_FLOOD_TRACK_NS / fr->step_ns ? BT_FLOOD_TRACK_NS / fr->step_ns : 1;
    fprintf(stderr, "bench_table: flood: %" PRIu64 " unique keys...\n", o->flood);
    uint64_t tracked_seq = 0;
    const uint64_t t0 = bt_clock_ns();
    const uint64_t report_every = o->flood / 10 ? o->flood / 10 : 1;
    uint64_t window_t = t0;
    for (uint64_t i = 0; i < o->flood; i++) {
        now += fr->step_ns;
        bt_key k = bt_flood_key(i);
        sluice_result fres;
        if (sluice_table_try_acquire_at(t, &k, sizeof k, 1, now, &fres)) {
            fr->flood_allowed++;
        } else {
            int e = fres.error;
            if (e == SLUICE_EFULL)
                fr->flood_full++;
            else if (e != 0)
                fr->flood_other++;
        }
        if (i % fr->track_every == 0) {
            /* tracked keys 0 .. 499 every cycle of 1000 requests (one
             * cycle is 1 ms: 1000/s, drained after about 0.1 s), 500 .. 999
             * one cycle in 40 (25/s: at rest, reclaimable, in between) */
            uint64_t j = tracked_seq % BT_FLOOD_TRACKED, cycle = tracked_seq / BT_FLOOD_TRACKED;
            tracked_seq++;
            if (j < BT_FLOOD_TRACKED / 2 || cycle % BT_FLOOD_SLOW_EVERY == 0) {
                bt_key hk = bt_key_of(j);
                sluice_result a, b;
                bool oa = sluice_table_try_acquire_at(t, &hk, sizeof hk, 1, now, &a);
                int e = a.error;
                bool ob = sluice_try_acquire_at(lim[j], 1, now, &b);
                fr->tracked_decisions++;
                fr->tracked_allowed += ob;
                if (!bt_same(&a, &b, oa, ob)) {
                    if (fr->mismatches < 5)
                        fprintf(stderr,
                                "bench_table: flood: held key %" PRIu64 " at %" PRIu64
                                " ns: table %d (remaining %" PRIu64 ", retry %" PRId64
                                ", error %d), limiter %d (remaining %" PRIu64
                                ", retry %" PRId64 ")\n",
                                j, now, oa, a.remaining, a.retry_after_ns, e, ob,
                                b.remaining, b.retry_after_ns);
                    fr->mismatches++;
                    fr->mismatches_full += e == SLUICE_EFULL;
                }
            }
        }
        if ((i + 1) % BT_FLOOD_SAMPLE_EVERY == 0) {
            sluice_table_stats st;
            sluice_table_stats_get(t, &st);
            if (st.keys > fr->keys_max)
                fr->keys_max = st.keys;
            uint64_t rss = bt_rss();
            if (rss > fr->rss_peak_statm)
                fr->rss_peak_statm = rss;
            uint64_t c = bt_clock_ns();
            if ((double)(c - window_t) / 1e9 > fr->slowest_s) {
                fr->slowest_s = (double)(c - window_t) / 1e9;
                fr->slowest_at = i + 1 - BT_FLOOD_SAMPLE_EVERY;
            }
            window_t = c;
        }
        if ((i + 1) % report_every == 0)
            fprintf(stderr, "bench_table: flood: %" PRIu64 "%% (%.0f s)\n",
                    (i + 1) * 100 / o->flood, (double)(bt_clock_ns() - t0) / 1e9);
    }
    fr->elapsed_s = (double)(bt_clock_ns() - t0) / 1e9;
    sluice_table_stats_get(t, &fr->st);
    if (fr->st.keys > fr->keys_max)
        fr->keys_max = fr->st.keys;
    uint64_t rss = bt_rss();
    if (rss > fr->rss_peak_statm)
        fr->rss_peak_statm = rss;
    fr->rss_peak_ru = bt_maxrss();

    sluice_table_free(t);
    for (unsigned j = 0; j < BT_FLOOD_TRACKED; j++)
        sluice_limiter_free(lim[j]);
    free(lim);
    return 0;
}

/* ---- part 4: bursts (--burst) ------------------------------------------- */

/* sluice_table_try_acquire_burst_at() on --burst-keys live keys (default
 * 10^6) drawn uniformly, in bursts of BT_BURST requests at one caller time
 * each (+BT_BURST ns per burst), against the same key sequence decided by
 * single calls (BT_BURST at each caller time, as the bursts), and two floors over arrays as large as the
 * table, at the same fixed place per key:
 *   burst floor  in bursts of BT_BURST: prefetch the BT_BURST words, then
 *                per word a load followed by a locked add on it -- one
 *                miss per decision, overlapped, and one locked instruction
 *                (the least a burst that locks per request can do);
 *   chain floor  one dependent read per decision (part 1's floor);
 *   run floor    as the burst floor, but each decision's place is a
 *                48-byte slot and the five lines from it are prefetched
 *                (what a lookup asks for: its home slot's line and the
 *                next four, src/table/table.c, prefetch_run) -- a reference for
 *                the layout, not the target's floor.
 * All five interleaved, o->runs times after a warm-up; medians. */
#define BT_BURST 32
#define BT_TARGET_BURST_RATIO 4.0

typedef struct bt_burst_result {
    bool run;
    uint64_t n, iters;
    double single_ns, burst_ns, floor_ns, chain_ns, run_ns, huge_ns; /* medians, wall */
    double single_cpu, burst_cpu, floor_cpu, chain_cpu, run_cpu, huge_cpu; /* CPU */
    double spread;        /* worst (max - min) / median of the four */
    uint64_t allowed, decided;
    bool lost_keys;
} bt_burst_result;

static uint64_t bt_run_burst(sluice_table *t, const void *const *kp, const size_t *lens,
                             size_t n, uint64_t now)
{
    uint64_t allowed = 0;
    sluice_result res[BT_BURST];
    for (size_t i = 0; i < n; i += BT_BURST) {
        size_t m = n - i < BT_BURST ? n - i : BT_BURST;
        allowed += sluice_table_try_acquire_burst_at(t, m, kp + i, lens, NULL, now, res);
        now += BT_BURST * BT_STEP_NS;
    }
    return allowed;
}

/* The same decisions by single calls: BT_BURST calls at each caller time. */
static uint64_t bt_run_calls(sluice_table *t, const bt_key *keys, size_t n, uint64_t now)
{
    uint64_t allowed = 0;
    for (size_t i = 0; i < n; i++) {
        allowed += sluice_table_try_acquire_at(t, &keys[i], sizeof keys[i], 1, now, NULL);
        if (i % BT_BURST == BT_BURST - 1)
            now += BT_BURST * BT_STEP_NS;
    }
    return allowed;
}

static uint64_t bt_run_burst_floor(uint64_t *arr, const uint64_t *pos, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += BT_BURST) {
        size_t m = n - i < BT_BURST ? n - i : BT_BURST;
        for (size_t k = 0; k < m; k++)
            __builtin_prefetch(&arr[pos[i + k]]);
        for (size_t k = 0; k < m; k++) {
            uint64_t *w = &arr[pos[i + k]];
            sum += *(volatile uint64_t *)w;
            __atomic_fetch_add(w, 1, __ATOMIC_RELAXED);
        }
    }
    return sum;
}

/* The run floor: slots of 48 bytes (of `slots` in the array), five lines
 * prefetched from each. */
static uint64_t bt_run_run_floor(uint64_t *arr, const uint64_t *pos, size_t n, uint64_t slots)
{
    unsigned char *b = (unsigned char *)arr;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += BT_BURST) {
        size_t m = n - i < BT_BURST ? n - i : BT_BURST;
        for (size_t k = 0; k < m; k++) {
            const unsigned char *e = b + (pos[i + k] % slots) * 48;
            __builtin_prefetch(e);
            __builtin_prefetch(e + 64);
            __builtin_prefetch(e + 128);
            __builtin_prefetch(e + 192);
            __builtin_prefetch(e + 256);
        }
        for (size_t k = 0; k < m; k++) {
            uint64_t *w = (uint64_t *)(void *)(b + (pos[i + k] % slots) * 48);
            sum += *(volatile uint64_t *)w;
            __atomic_fetch_add(w, 1, __ATOMIC_RELAXED);
        }
    }
    return sum;
}

static int bt_burst_part(const bt_opts *o, bt_burst_result *br)
{
    char err[256], nb[32];
    const uint64_t seed[2] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    const uint64_t n = o->burst_keys;
    const size_t iters = (size_t)o->iters;
    memset(br, 0, sizeof *br);
    br->run = true;
    br->n = n;
    br->iters = iters;

    sluice_limiter *probe = sluice_limiter_new(o->spec, err, sizeof err);
    if (probe == NULL) {
        fprintf(stderr, "bench_table: spec \"%s\" refused: %s\n", o->spec, err);
        return -1;
    }
    sluice_result pr;
    sluice_try_acquire_at(probe, 0, BT_T0_NS, &pr);
    sluice_limiter_free(probe);
    const uint64_t warm_permits = pr.remaining / 2 ? pr.remaining / 2 : 1;

    fprintf(stderr, "bench_table: burst, %s keys: filling...\n", bt_count(n, nb, sizeof nb));
    sluice_table *t = sluice__table_new_seeded(o->spec, (size_t)n, 0, seed, err, sizeof err);
    if (t == NULL || (o->top && sluice_table_set_top(t, 64, 16) != 0)) {
        fprintf(stderr, "bench_table: table of %" PRIu64 " keys: %s\n", n, t ? "no sketch" : err);
        sluice_table_free(t);
        return -1;
    }
    uint64_t now = BT_T0_NS;
    for (uint64_t r = 0; r < n; r++) {
        bt_key k = bt_key_of(r);
        sluice_table_try_acquire_at(t, &k, sizeof k, warm_permits, now, NULL);
        now += BT_STEP_NS;
    }
    const uint64_t words = sluice__table_bytes(t) / sizeof(uint64_t);
    bt_key *keys = bt_xmalloc(iters * sizeof *keys);
    const void **kp = bt_xmalloc(iters * sizeof *kp);
    uint64_t *pos = bt_xmalloc(iters * sizeof *pos);
    size_t lens[BT_BURST];
    for (size_t k = 0; k < BT_BURST; k++)
        lens[k] = sizeof(bt_key);
    uint64_t rng = 0xb7e151628aed2a6bULL ^ n;
    for (size_t i = 0; i < iters; i++) {
        uint64_t r = bt_below(&rng, n);
        keys[i] = bt_key_of(r);
        kp[i] = &keys[i];
        pos[i] = bt_mix(r ^ 0x9e3779b97f4a7c15ULL) % words;
    }
    uint64_t *chain = bt_xmalloc((size_t)words * sizeof(uint64_t));
    memset(chain, 0xff, (size_t)words * sizeof(uint64_t)); /* see bt_run_floor */
    uint64_t *flat = bt_xmalloc((size_t)words * sizeof(uint64_t));
    memset(flat, 0, (size_t)words * sizeof(uint64_t));
    /* the floor again over an array in huge pages, as the library asks for
     * its tables (src/base/alloc.c), where the system gives them */
    void *hv = NULL;
    const size_t hbytes = ((size_t)words * sizeof(uint64_t) + (1u << 21) - 1) & ~(size_t)((1u << 21) - 1);
    if (posix_memalign(&hv, (size_t)1 << 21, hbytes) != 0) {
        fprintf(stderr, "bench_table: out of memory\n");
        exit(1);
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(hv, hbytes, MADV_HUGEPAGE);
#endif
    uint64_t *huge = hv;
    memset(huge, 0, hbytes);

    double *v[12];
    for (int k = 0; k < 12; k++)
        v[k] = bt_xmalloc(o->runs * sizeof(double));
    const uint64_t slots = words * 8 / 48 > 7 ? words * 8 / 48 - 6 : 1; /* five lines inside */
    fprintf(stderr, "bench_table: burst, %s keys: %" PRIu64 " runs...\n",
            bt_count(n, nb, sizeof nb), o->runs);
    for (uint64_t r = 0; r <= o->runs; r++) { /* pass 0: warm-up, a tenth */
        const size_t len = r == 0 ? iters / 10 + 1 : iters;
        for (int k = 0; k < 6; k++) {
            uint64_t c0 = bt_cpu_ns(), t0 = bt_clock_ns(), got;
            switch (k) {
            case 5:
                got = bt_run_burst_floor(huge, pos, len);
                break;
            case 4:
                got = bt_run_run_floor(flat, pos, len, slots);
                break;
            case 0:
                got = bt_run_calls(t, keys, len, now);
                break;
            case 1:
                got = bt_run_burst(t, kp, lens, len, now);
                break;
            case 2:
                got = bt_run_burst_floor(flat, pos, len);
                break;
            default:
                got = bt_run_floor(chain, pos, len);
                break;
            }
            uint64_t t1 = bt_clock_ns(), c1 = bt_cpu_ns();
            bt_sink += got;
            if (k < 2) {
                now += (len + BT_BURST) * BT_STEP_NS;
                if (r > 0) {
                    br->allowed += got;
                    br->decided += len;
                }
            }
            if (r > 0) {
                v[2 * k][r - 1] = (double)(t1 - t0) / (double)len;
                v[2 * k + 1][r - 1] = (double)(c1 - c0) / (double)len;
            }
        }
    }
    double med[12];
    for (int k = 0; k < 12; k++) {
        med[k] = bt_median(v[k], o->runs);
        if (k % 2 == 0 && med[k] > 0) {
            double s = (v[k][o->runs - 1] - v[k][0]) / med[k];
            if (s > br->spread)
                br->spread = s;
        }
        free(v[k]);
    }
    br->single_ns = med[0], br->single_cpu = med[1];
    br->burst_ns = med[2], br->burst_cpu = med[3];
    br->floor_ns = med[4], br->floor_cpu = med[5];
    br->chain_ns = med[6], br->chain_cpu = med[7];
    br->run_ns = med[8], br->run_cpu = med[9];
    br->huge_ns = med[10], br->huge_cpu = med[11];
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    if (st.keys != n || st.reclaimed || st.evicted || st.refused)
        br->lost_keys = true;
    free(chain);
    free(flat);
    free(huge);
    free(keys);
    free(kp);
    free(pos);
    sluice_table_free(t);
    return 0;
}

static const char *bt_met(bool ok) { return ok ? "met" : "MISSED"; }

/* --burst: run part 4 alone and report it. */
static int bt_burst_main(const bt_opts *o)
{
    bt_burst_result br;
    const uint64_t wall0 = bt_clock_ns();
    if (bt_burst_part(o, &br) != 0)
        return 1;
    char nb[32];
    printf("bench_table --burst: sluice %s, spec \"%s\", %s live 16-byte keys drawn "
           "uniformly;\nbursts of %d at one caller time each (+%d ns per burst), single "
           "calls the same;\n%" PRIu64 " runs x %" PRIu64 " decisions, interleaved; "
           "median ns per decision; the sketch of the keys refused most: %s\n\n",
           sluice_version(), o->spec, bt_count(br.n, nb, sizeof nb), BT_BURST,
           BT_BURST * BT_STEP_NS, o->runs, br.iters, o->top ? "on (--top)" : "off");
    const double fw = br.floor_ns > 0 ? br.floor_ns : 1, fc = br.floor_cpu > 0 ? br.floor_cpu : 1;
    printf("%-52s %8s %8s %8s %8s\n", "", "ns", "(cpu)", "/ floor", "(cpu)");
    printf("%-52s %8.1f %8.1f %7.2fx %7.2fx\n", "single calls (sluice_table_try_acquire_at)",
           br.single_ns, br.single_cpu, br.single_ns / fw, br.single_cpu / fc);
    printf("%-52s %8.1f %8.1f %7.2fx %7.2fx\n", "bursts of 32 (..._try_acquire_burst_at)",
           br.burst_ns, br.burst_cpu, br.burst_ns / fw, br.burst_cpu / fc);
    printf("%-52s %8.1f %8.1f %7.2fx %7.2fx\n", "floor: independent loads, each + locked add",
           br.floor_ns, br.floor_cpu, 1.0, 1.0);
    printf("%-52s %8.1f %8.1f %7.2fx %7.2fx\n", "(one dependent load per decision)", br.chain_ns,
           br.chain_cpu, br.chain_ns / fw, br.chain_cpu / fc);
    printf("%-52s %8.1f %8.1f %7.2fx %7.2fx\n", "(the same, five lines a decision: a run)",
           br.run_ns, br.run_cpu, br.run_ns / fw, br.run_cpu / fc);
    printf("%-52s %8.1f %8.1f %7.2fx %7.2fx\n", "(the floor in huge pages, as the table is)",
           br.huge_ns, br.huge_cpu, br.huge_ns / fw, br.huge_cpu / fc);
    printf("\nfloor: in bursts of %d, the words prefetched, then each loaded and a locked add\n"
           "done on it; arrays as large as the table (%s keys), one word per key.  The run\n"
           "line: the same with the five lines a lookup asks for prefetched for each (a\n"
           "48-byte slot, its line and the next four); bursts / run = %.2fx (cpu %.2fx).\n"
           "The table asks for huge pages (src/base/alloc.c; --small-pages: not); against\n"
           "the floor in huge pages too, bursts are %.2fx (cpu %.2fx).\n"
           "Bursts are %.2fx faster than single calls (wall).  Allowed %.1f%% (the same\n"
           "sequence each run).  (cpu): thread CPU time, without the time descheduled.\n"
           "Worst run spread (max-min)/median (wall): %.0f%%.%s\n",
           BT_BURST, nb, br.run_ns > 0 ? br.burst_ns / br.run_ns : 0.0,
           br.run_cpu > 0 ? br.burst_cpu / br.run_cpu : 0.0,
           br.huge_ns > 0 ? br.burst_ns / br.huge_ns : 0.0,
           br.huge_cpu > 0 ? br.burst_cpu / br.huge_cpu : 0.0,
           br.burst_ns > 0 ? br.single_ns / br.burst_ns : 0.0,
           br.decided ? 100.0 * (double)br.allowed / (double)br.decided : 0.0, br.spread * 100,
           br.lost_keys ? "\n! not all keys stayed live" : "");
    const double ratio = br.burst_ns / fw, ratio_cpu = br.burst_cpu / fc;
    printf("\n%-52s %-9s %-9s %s\n", "target (issue)", "goal", "measured", "(cpu)");
    printf("%-52s <= %3.1fx  %6.2fx  %6.2fx  %s\n", "bursts of 32, 10^6 uniform keys / floor",
           BT_TARGET_BURST_RATIO, ratio, ratio_cpu, bt_met(ratio <= BT_TARGET_BURST_RATIO));
    printf("\ntotal wall time %.0f s; exit status %d\n",
           (double)(bt_clock_ns() - wall0) / 1e9, br.lost_keys ? 1 : 0);
    return br.lost_keys ? 1 : 0;
}

/* ---- main --------------------------------------------------------------- */

static int bt_parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi,
                        uint64_t *out)
{
    char *end;
    if (s == NULL) {
        fprintf(stderr, "bench_table: %s needs a value\n", opt);
        return -1;
    }
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "bench_table: %s \"%s\": want an integer %" PRIu64 " .. %" PRIu64 "\n",
                opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* "1000,1000000" -> sizes */
static int bt_parse_sizes(const char *s, bt_opts *o)
{
    if (s == NULL) {
        fprintf(stderr, "bench_table: --keys needs a value\n");
        return -1;
    }
    o->nsizes = 0;
    while (*s) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno != 0 || end == s || s[0] == '-' || v < 1 || v > 100000000ULL ||
            (*end != ',' && *end != '\0') || o->nsizes == BT_MAX_SIZES) {
            fprintf(stderr, "bench_table: --keys: want up to %d key counts 1 .. 10^8, "
                            "comma-separated\n", BT_MAX_SIZES);
            return -1;
        }
        o->sizes[o->nsizes++] = v;
        s = *end ? end + 1 : end;
    }
    return o->nsizes ? 0 : -1;
}

/* ---- --refusals: the cost of a refusal, with and without the sketch ----- */

/* Tables of N keys under "fixed-window 1/h", each key filled with its one
 * permit, so that every later request is refused by the algorithm (the
 * refusal path the sketch adds to).  Two tables per N, one with a sketch of
 * the keys refused most (sluice_table_set_top(t, 64, 16): the 16-byte keys
 * whole), one without; 1 and 2 threads, each its own uniform key sequence
 * over the N keys (N = 1: both threads refuse one hot key).  The runs of
 * the two tables alternate; medians of --runs repetitions (after one warm-up)
 * of --iters refusals per thread. */
static int bt_refusals(const bt_opts *o)
{
    static const uint64_t sizes[] = {1, 1000, 1000000};
    printf("bench_table --refusals: spec \"fixed-window 1/h\", every key holding its one "
           "permit,\n16-byte keys, uniform; %" PRIu64 " runs x %" PRIu64
           " refusals per thread; median ns per refusal\n\n", o->runs, o->iters);
    printf("%-5s %3s %12s %8s %12s %8s %9s\n", "keys", "thr", "off ns", "(cpu)", "sketch ns",
           "(cpu)", "on/off");
    int status = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint64_t n = sizes[si];
        char err[256], nb[32];
        sluice_table *t[2];
        for (int on = 0; on < 2; on++) {
            t[on] = sluice_table_new("fixed-window 1/h", (size_t)n, err, sizeof err);
            if (!t[on] || (on && sluice_table_set_top(t[on], 64, 16) != 0)) {
                fprintf(stderr, "bench_table: --refusals: %s\n", t[on] ? "set_top" : err);
                return 1;
            }
            for (uint64_t r = 0; r < n; r++) {
                bt_key k = bt_key_of(r);
                if (!sluice_table_try_acquire_at(t[on], &k, sizeof k, 1, BT_T0_NS, NULL)) {
                    fprintf(stderr, "bench_table: --refusals: a key was not admitted\n");
                    return 1;
                }
            }
        }
        bt_key *keys[BT_MAX_THREADS];
        for (int th = 0; th < BT_MAX_THREADS; th++) {
            keys[th] = bt_xmalloc(o->iters * sizeof *keys[th]);
            uint64_t rng = 0xfeed0000u + (uint64_t)th * 7919u + n;
            for (uint64_t i = 0; i < o->iters; i++) keys[th][i] = bt_key_of(bt_below(&rng, n));
        }
        for (int nt = 1; nt <= BT_MAX_THREADS; nt++) {
            double *v[4];
            for (int q = 0; q < 4; q++) v[q] = bt_xmalloc(o->runs * sizeof(double));
            uint64_t now = BT_T0_NS + 1;
            for (uint64_t r = 0; r <= o->runs; r++) {
                for (int on = 0; on < 2; on++) {
                    bt_job jobs[BT_MAX_THREADS];
                    pthread_t tids[BT_MAX_THREADS];
                    pthread_barrier_t bar;
                    for (int th = 0; th < nt; th++)
                        jobs[th] = (bt_job){.t = t[on], .keys = keys[th], .n = (size_t)o->iters,
                                            .now = now, .start = nt > 1 ? &bar : NULL};
                    if (nt == 1) {
                        bt_job_main(&jobs[0]);
                    } else {
                        pthread_barrier_init(&bar, NULL, (unsigned)nt);
                        for (int th = 0; th < nt; th++)
                            if (pthread_create(&tids[th], NULL, bt_job_main, &jobs[th]) != 0) {
                                fprintf(stderr, "bench_table: pthread_create failed\n");
                                exit(1);
                            }
                        for (int th = 0; th < nt; th++) pthread_join(tids[th], NULL);
                        pthread_barrier_destroy(&bar);
                    }
                    double ns = 0, cpu = 0;
                    for (int th = 0; th < nt; th++) {
                        if (jobs[th].result != 0) status = 1; /* all must be refused */
                        ns += (double)(jobs[th].t_end - jobs[th].t_begin) / (double)o->iters;
                        cpu += (double)(jobs[th].cpu_end - jobs[th].cpu_begin) / (double)o->iters;
                    }
                    if (r > 0) {
                        v[on * 2][r - 1] = ns / nt;
                        v[on * 2 + 1][r - 1] = cpu / nt;
                    }
                }
                now += o->iters * BT_STEP_NS;
            }
            double med[4];
            for (int q = 0; q < 4; q++) med[q] = bt_median(v[q], (size_t)o->runs);
            printf("%-5s %3d %12.1f %8.1f %12.1f %8.1f %8.2fx\n", bt_count(n, nb, sizeof nb), nt,
                   med[0], med[1], med[2], med[3], med[0] > 0 ? med[2] / med[0] : 0.0);
            for (int q = 0; q < 4; q++) free(v[q]);
        }
        sluice_top_entry top[1];
        size_t got = 0;
        sluice_table_top_refused(t[1], top, 1, &got);
        if (got != 1 || top[0].count == 0) status = 1; /* the sketch did count */
        for (int th = 0; th < BT_MAX_THREADS; th++) free(keys[th]);
        sluice_table_free(t[0]);
        sluice_table_free(t[1]);
    }
    printf("\n2 threads: ns per refusal per thread.  on/off: sketch / no sketch (wall).\n"
           "exit status %d\n", status);
    return status;
}

/* ---- --overload: the overload path (refusals that read) ------------------ */

/* The three figures of the overload path, in one run, each against its
 * floor or its reference measured in the same process, interleaved run by
 * run, medians of --runs repetitions (after one warm-up) of --iters
 * operations per thread:
 *  (a) hot key: 1 and 2 threads refusing one key of a table ("fixed-window
 *      1/h", 1000 keys, 16-byte keys, the key holding its one permit): each
 *      thread's ns per refusal with 2 threads over the 1-thread ns (goal
 *      <= 1.15x).  Floor: 1 and 2 threads each loading one shared word per
 *      iteration (a read-shared cache line).
 *  (b) flood: a table of --flood-keys (default 10^6) 8-byte keys, full, every
 *      key held ("token-bucket 1/h burst=1000000": each admitted once, at
 *      rest only an hour later), then unique keys never seen, each asking
 *      once (refused as full), against a normal decision: one request of a
 *      held key drawn uniformly (admitted) -- ns per flood key / ns per
 *      normal decision (goal <= 1.5x).  The refusals must all be counted as
 *      full and the held keys stay exactly --flood-keys.
 *  (c) the same normal decision (10^6 uniform 8-byte keys, one call per
 *      key) against the floor of bt_run_floor: one dependent random 8-byte
 *      load per decision over an array of the table's size (goal <= 1.3x:
 *      one miss per decision). */
#define BT_TARGET_HOT_RATIO 1.15
#define BT_TARGET_FLOOD_RATIO 1.5
#define BT_TARGET_MISS_RATIO 1.3

typedef struct bt_ojob {
    int kind;                 /* 0: table decisions; 1: bt_run_floor; 2: shared loads;
                               * 3: table decisions 10 ns apart (--sparse) */
    sluice_table *t;
    const uint64_t *keys;     /* 8-byte keys, or NULL: the one key `hot` */
    const bt_key *hot;
    const uint64_t *arr, *pos;
    const volatile uint64_t *shared;
    size_t n;
    uint64_t now;
    pthread_barrier_t *start;
    uint64_t t_begin, t_end, cpu_begin, cpu_end, result;
} bt_ojob;

static void *bt_ojob_main(void *arg)
{
    bt_ojob *j = arg;
    if (j->start != NULL) pthread_barrier_wait(j->start);
    j->cpu_begin = bt_cpu_ns();
    j->t_begin = bt_clock_ns();
    uint64_t r = 0, now = j->now;
    if (j->kind == 1) {
        r = bt_run_floor(j->arr, j->pos, j->n);
    } else if (j->kind == 2) {
        for (size_t i = 0; i < j->n; i++) r += j->shared[0];
    } else if (j->kind == 3) { /* --sparse: 8-byte keys, BT_SPARSE_STEP_NS apart */
        for (size_t i = 0; i < j->n; i++, now += BT_SPARSE_STEP_NS)
            r += sluice_table_try_acquire_at(j->t, &j->keys[i], sizeof j->keys[i], 1, now, NULL);
    } else if (j->keys == NULL) {
        for (size_t i = 0; i < j->n; i++, now += BT_STEP_NS)
            r += sluice_table_try_acquire_at(j->t, j->hot, sizeof *j->hot, 1, now, NULL);
    } else {
        for (size_t i = 0; i < j->n; i++, now += BT_STEP_NS)
            r += sluice_table_try_acquire_at(j->t, &j->keys[i], sizeof j->keys[i], 1, now, NULL);
    }
    j->t_end = bt_clock_ns();
    j->cpu_end = bt_cpu_ns();
    j->result = r;
    return NULL;
}

/* Run nt copies of job (nt <= BT_MAX_THREADS); returns the mean ns per
 * operation per thread (wall clock; *cpu: thread CPU time); *result sums
 * the threads' results. */
static double bt_orun(const bt_ojob *job, int nt, uint64_t *result, double *cpu)
{
    bt_ojob jobs[BT_MAX_THREADS];
    pthread_t tids[BT_MAX_THREADS];
    pthread_barrier_t bar;
    for (int th = 0; th < nt; th++) {
        jobs[th] = *job;
        jobs[th].start = nt > 1 ? &bar : NULL;
    }
    if (nt == 1) {
        bt_ojob_main(&jobs[0]);
    } else {
        pthread_barrier_init(&bar, NULL, (unsigned)nt);
        for (int th = 0; th < nt; th++)
            if (pthread_create(&tids[th], NULL, bt_ojob_main, &jobs[th]) != 0) {
                fprintf(stderr, "bench_table: pthread_create failed\n");
                exit(1);
            }
        for (int th = 0; th < nt; th++) pthread_join(tids[th], NULL);
        pthread_barrier_destroy(&bar);
    }
    double ns = 0, c = 0;
    *result = 0;
    for (int th = 0; th < nt; th++) {
        ns += (double)(jobs[th].t_end - jobs[th].t_begin) / (double)job->n;
        c += (double)(jobs[th].cpu_end - jobs[th].cpu_begin) / (double)job->n;
        *result += jobs[th].result;
    }
    *cpu = c / nt;
    return ns / nt;
}

static int bt_overload(const bt_opts *o)
{
    const size_t runs = (size_t)o->runs, n = (size_t)o->iters, nk = (size_t)o->flood_keys;
    char err[256], nb[32];
    int status = 0;
    printf("bench_table --overload: %zu runs x %zu operations per thread, medians; "
           "floors interleaved;\nthe sketch of the keys refused most: %s\n\n", runs, n,
           o->top ? "on (--top: sluice_table_set_top(t, 64, 16) on both tables)" : "off");

    /* (a) one hot key */
    sluice_table *hot = sluice_table_new("fixed-window 1/h", 1000, err, sizeof err);
    if (!hot || (o->top && sluice_table_set_top(hot, 64, 16) != 0)) {
        fprintf(stderr, "bench_table: --overload: %s\n", hot ? "set_top failed" : err);
        return 1;
    }
    for (uint64_t r = 0; r < 1000; r++) {
        bt_key k = bt_key_of(r);
        sluice_table_try_acquire_at(hot, &k, sizeof k, 1, BT_T0_NS, NULL);
    }
    const bt_key hk = bt_key_of(7);
    static volatile uint64_t shared_word = 1;
    double *v[8]; /* wall, then cpu: floor 1t, floor 2t, table 1t, table 2t */
    for (int q = 0; q < 8; q++) v[q] = bt_xmalloc(runs * sizeof(double));
    uint64_t now = BT_T0_NS + 1;
    for (size_t r = 0; r <= runs; r++) {
        uint64_t res;
        double c[4], m[4];
        bt_ojob fl = {.kind = 2, .shared = &shared_word, .n = n};
        bt_ojob tb = {.kind = 0, .t = hot, .hot = &hk, .n = n, .now = now};
        m[0] = bt_orun(&fl, 1, &res, &c[0]);
        m[2] = bt_orun(&tb, 1, &res, &c[2]);
        if (res != 0) status = 1; /* every one refused */
        m[1] = bt_orun(&fl, 2, &res, &c[1]);
        m[3] = bt_orun(&tb, 2, &res, &c[3]);
        if (res != 0) status = 1;
        if (r > 0)
            for (int q = 0; q < 4; q++) {
                v[q][r - 1] = m[q];
                v[4 + q][r - 1] = c[q];
            }
        now += n * BT_STEP_NS;
    }
    double hm[8];
    for (int q = 0; q < 8; q++) hm[q] = bt_median(v[q], runs);
    sluice_table_stats hs;
    sluice_table_stats_get(hot, &hs);
    if (o->top) { /* the sketch counted every refusal of the one key, exactly */
        sluice_top_entry te[2];
        size_t tn = 0;
        if (sluice_table_top_refused(hot, te, 2, &tn) != 0 || tn != 1 ||
            te[0].count != hs.decisions.requests_denied || te[0].error != 0 ||
            te[0].keylen != sizeof hk || memcmp(te[0].key, &hk, sizeof hk) != 0) {
            fprintf(stderr, "bench_table: --overload --top: the sketch's count is wrong\n");
            status = 1;
        }
    }
    sluice_table_free(hot);

    /* (b), (c): a full table of nk 8-byte keys, every one held */
    sluice_table *t = sluice_table_new("token-bucket 1/h burst=1000000", nk, err, sizeof err);
    if (!t || (o->top && sluice_table_set_top(t, 64, 16) != 0)) {
        fprintf(stderr, "bench_table: --overload: %s\n", t ? "set_top failed" : err);
        return 1;
    }
    for (uint64_t k = 0; k < nk; k++)
        if (!sluice_table_try_acquire_at(t, &k, sizeof k, 1, BT_T0_NS, NULL)) {
            fprintf(stderr, "bench_table: --overload: a held key was refused\n");
            return 1;
        }
    const size_t bytes = sluice__table_bytes(t), words = bytes / sizeof(uint64_t);
    uint64_t *arr = bt_xmalloc(words * sizeof *arr);
    for (size_t i = 0; i < words; i++) arr[i] = UINT64_MAX;
    uint64_t *held = bt_xmalloc(n * sizeof *held), *pos = bt_xmalloc(n * sizeof *pos);
    uint64_t *flood = bt_xmalloc(n * sizeof *flood);
    uint64_t rng = 0x0be410adULL ^ nk, next_flood = nk;
    for (size_t i = 0; i < n; i++) {
        held[i] = bt_below(&rng, nk);
        pos[i] = bt_mix(held[i]) % words;
    }
    sluice_table_stats before;
    sluice_table_stats_get(t, &before);
    double *w[6]; /* wall, then cpu: floor, normal, flood */
    for (int q = 0; q < 6; q++) w[q] = bt_xmalloc(runs * sizeof(double));
    now = BT_T0_NS + 1;
    uint64_t flood_asked = 0, normal_allowed = 0, normal_asked = 0;
    for (size_t r = 0; r <= runs; r++) {
        for (size_t i = 0; i < n; i++) flood[i] = next_flood++; /* never seen */
        uint64_t res;
        double m[3], c[3];
        bt_ojob fl = {.kind = 1, .arr = arr, .pos = pos, .n = n};
        bt_ojob nd = {.kind = 0, .t = t, .keys = held, .n = n, .now = now};
        bt_ojob fd = {.kind = 0, .t = t, .keys = flood, .n = n, .now = now + n};
        m[0] = bt_orun(&fl, 1, &res, &c[0]);
        bt_sink += res;
        m[1] = bt_orun(&nd, 1, &res, &c[1]);
        normal_allowed += res;
        normal_asked += n;
        m[2] = bt_orun(&fd, 1, &res, &c[2]);
        if (res != 0) status = 1; /* the flood is refused */
        flood_asked += n;
        if (r > 0)
            for (int q = 0; q < 3; q++) {
                w[q][r - 1] = m[q];
                w[3 + q][r - 1] = c[q];
            }
        now += 2 * n * BT_STEP_NS;
    }
    double fm[6];
    for (int q = 0; q < 6; q++) fm[q] = bt_median(w[q], runs);
    sluice_table_stats after;
    sluice_table_stats_get(t, &after);
    if (after.keys != nk || after.refused - before.refused != flood_asked ||
        normal_allowed != normal_asked)
        status = 1;

    printf("(a) one hot key of a table (fixed-window 1/h, 16-byte key holding its permit), "
           "ns per refusal per thread\n");
    printf("    %-34s %9s %7s %9s %7s %7s %7s\n", "", "1 thread", "(cpu)", "2 threads", "(cpu)",
           "2t/1t", "(cpu)");
    printf("    %-34s %9.1f %7.1f %9.1f %7.1f %6.2fx %6.2fx\n", "refusal", hm[2], hm[6], hm[3],
           hm[7], hm[3] / hm[2], hm[7] / hm[6]);
    printf("    %-34s %9.1f %7.1f %9.1f %7.1f %6.2fx %6.2fx\n", "floor: a load of one shared word",
           hm[0], hm[4], hm[1], hm[5], hm[1] / hm[0], hm[5] / hm[4]);
    printf("    refused: %" PRIu64 ", allowed %" PRIu64 "\n\n", hs.decisions.requests_denied,
           hs.decisions.requests_allowed);
    printf("(b), (c) a full table of %s 8-byte keys, every key held "
           "(token-bucket 1/h burst=1000000), 1 thread\n", bt_count(nk, nb, sizeof nb));
    printf("    %-52s %8.1f ns (cpu %.1f)\n",
           "floor: one dependent random load over the table's size", fm[0], fm[3]);
    printf("    %-52s %8.1f ns (cpu %.1f)  %5.2fx the floor (cpu %.2fx)\n",
           "normal decision (held key, uniform, admitted)", fm[1], fm[4], fm[1] / fm[0],
           fm[4] / fm[3]);
    printf("    %-52s %8.1f ns (cpu %.1f)  %5.2fx a normal decision (cpu %.2fx)\n",
           "flood key (unique, refused as full)", fm[2], fm[5], fm[2] / fm[1], fm[5] / fm[4]);
    printf("    keys held %" PRIu64 " (of %zu); refused as full %" PRIu64 " of %" PRIu64
           " flood keys; normal allowed %" PRIu64 " of %" PRIu64 "\n\n",
           after.keys, nk, after.refused - before.refused, flood_asked, normal_allowed,
           normal_asked);
    printf("%-60s %-8s %-9s %s\n", "target (issue 10)", "goal", "measured", "");
    printf("%-60s <= %4.2fx %6.2fx   %s\n", "(a) 2 threads refusing on one hot key, per thread",
           BT_TARGET_HOT_RATIO, hm[3] / hm[2], bt_met(hm[3] / hm[2] <= BT_TARGET_HOT_RATIO));
    printf("%-60s <= %4.2fx %6.2fx   %s\n", "(b) flood key vs a normal decision, full table",
           BT_TARGET_FLOOD_RATIO, fm[2] / fm[1], bt_met(fm[2] / fm[1] <= BT_TARGET_FLOOD_RATIO));
    printf("%-60s <= %4.2fx %6.2fx   %s\n", "(c) decision vs one dependent random load",
           BT_TARGET_MISS_RATIO, fm[1] / fm[0], bt_met(fm[1] / fm[0] <= BT_TARGET_MISS_RATIO));
    printf("(ratios of the wall-clock medians; on a loaded machine the (cpu) ones are the steadier)\n"
           "\nexit status %d\n", status);
    for (int q = 0; q < 8; q++) free(v[q]);
    for (int q = 0; q < 6; q++) free(w[q]);
    free(arr);
    free(held);
    free(pos);
    free(flood);
    sluice_table_free(t);
    return status;
}

/* ---- --sparse: keys that come back to rest between visits ---------------- */

/* A table of --flood-keys (default 10^6) 8-byte keys, every one made first
 * (caller time 10 ns apart), then visited uniformly at random, one request
 * of 1 permit per visit, 10 ns of caller time apart, in three tables, each
 * against the floor measured in the same run:
 *  sparse  "token-bucket 1000/s burst=1000": a visit's permit is back 1 ms
 *          later; a key's next visit comes 10 ms later on average, so most
 *          visits find their key at rest (the fraction is printed);
 *  held    "token-bucket 1/h burst=1000000": never at rest in the run;
 *  sparse, SLUICE_TABLE_RECLAIM_WHEN_FULL: the first case with the flag
 *          (the same as the default since keys at rest stay in place until
 *          their room is wanted; built against an older library, the
 *          difference the flag made).
 * Floor: one dependent random 8-byte load per visit over an array of
 * 64 MiB (about the table's size), in the visits' order.  Medians of --runs
 * runs (after one warm-up) of --iters visits, the four interleaved run by
 * run (the floor first, then the tables, the first of them rotating from
 * run to run); wall clock and thread CPU time.  Every visit must be
 * admitted. */
#define BT_SPARSE_FLOOR_BYTES ((size_t)64 << 20)
#define BT_SPARSE_REST_VISITS (1000000u / BT_SPARSE_STEP_NS) /* 1 ms of visits */

typedef struct bt_scase {
    const char *name, *spec;
    unsigned flags;
    sluice_table *t;
    uint64_t now;
} bt_scase;

static int bt_sparse(const bt_opts *o)
{
    const size_t runs = (size_t)o->runs, n = (size_t)o->iters, nk = (size_t)o->flood_keys;
    char err[256], nb[32];
    int status = 0;
    bt_scase cs[3] = {
        {"sparse (keys at rest), default", "token-bucket 1000/s burst=1000", 0, NULL, 0},
        {"held, default", "token-bucket 1/h burst=1000000", 0, NULL, 0},
        {"sparse, SLUICE_TABLE_RECLAIM_WHEN_FULL", "token-bucket 1000/s burst=1000",
         SLUICE_TABLE_RECLAIM_WHEN_FULL, NULL, 0},
    };
    const int nc = 3;
    for (int c = 0; c < nc; c++) {
        cs[c].t = sluice_table_new_flags(cs[c].spec, nk, cs[c].flags, err, sizeof err);
        if (!cs[c].t) {
            fprintf(stderr, "bench_table: --sparse: %s\n", err);
            return 1;
        }
        cs[c].now = BT_T0_NS;
        for (uint64_t k = 0; k < nk; k++, cs[c].now += BT_SPARSE_STEP_NS)
            if (!sluice_table_try_acquire_at(cs[c].t, &k, sizeof k, 1, cs[c].now, NULL)) {
                fprintf(stderr, "bench_table: --sparse: a new key was refused\n");
                return 1;
            }
    }
    const size_t words = BT_SPARSE_FLOOR_BYTES / sizeof(uint64_t);
    uint64_t *arr = bt_xmalloc(words * sizeof *arr);
    memset(arr, 0xff, words * sizeof *arr);
    uint64_t *keys = bt_xmalloc(n * sizeof *keys), *pos = bt_xmalloc(n * sizeof *pos);
    uint64_t *last = bt_xmalloc(nk * sizeof *last); /* visit number of each key's last visit */
    for (size_t k = 0; k < nk; k++) last[k] = k; /* the fill was visit k */
    uint64_t rng = 0x5ba25e0ULL ^ nk, visit = nk, at_rest = 0, visits = 0;
    double *v[8]; /* wall, then cpu: floor, then each case */
    for (int q = 0; q < 8; q++) v[q] = bt_xmalloc(runs * sizeof(double));
    uint64_t allowed[3] = {0, 0, 0};
    fprintf(stderr, "bench_table --sparse: %zu runs...\n", runs);
    for (size_t r = 0; r <= runs; r++) {
        for (size_t i = 0; i < n; i++, visit++) { /* the visits of this run */
            keys[i] = bt_below(&rng, nk);
            pos[i] = bt_mix(keys[i] ^ 0x9e3779b97f4a7c15ULL) % words;
            if (r > 0) {
                at_rest += visit - last[keys[i]] >= BT_SPARSE_REST_VISITS;
                visits++;
            }
            last[keys[i]] = visit;
        }
        uint64_t res;
        double m[4], cpu[4];
        bt_ojob fl = {.kind = 1, .arr = arr, .pos = pos, .n = n};
        m[0] = bt_orun(&fl, 1, &res, &cpu[0]);
        bt_sink += res;
        for (int q = 0; q < nc; q++) { /* the tables in turn, first one rotating */
            const int c = (int)((r + (size_t)q) % (size_t)nc);
            bt_ojob j = {.kind = 3, .t = cs[c].t, .keys = keys, .n = n, .now = cs[c].now};
            m[1 + c] = bt_orun(&j, 1, &res, &cpu[1 + c]);
            if (r > 0) allowed[c] += res;
            if (res != n) status = 1; /* every visit is admitted */
            cs[c].now += n * BT_SPARSE_STEP_NS;
        }
        if (r > 0)
            for (int q = 0; q < 4; q++) {
                v[q][r - 1] = m[q];
                v[4 + q][r - 1] = cpu[q];
            }
    }
    double med[8];
    for (int q = 0; q < 8; q++) med[q] = bt_median(v[q], runs);
    printf("bench_table --sparse: sluice %s; %s 8-byte keys (max_keys the same), each made "
           "first,\nthen visited uniformly at random, 1 permit, caller time +%u ns per visit; "
           "%zu runs x %zu visits,\nmedians, interleaved; %.1f%% of the visits found their "
           "key at rest (1 ms since its last)\n\n",
           sluice_version(), bt_count(nk, nb, sizeof nb), BT_SPARSE_STEP_NS, runs, n,
           visits ? 100.0 * (double)at_rest / (double)visits : 0.0);
    printf("    %-42s %8s %8s %7s %7s %10s %10s\n", "", "ns", "(cpu)", "ratio", "(cpu)", "keys",
           "reclaimed");
    printf("    %-42s %8.1f %8.1f\n", "floor: one dependent random load, 64 MiB", med[0],
           med[4]);
    for (int c = 0; c < nc; c++) {
        sluice_table_stats st;
        sluice_table_stats_get(cs[c].t, &st);
        printf("    %-42s %8.1f %8.1f %6.2fx %6.2fx %10" PRIu64 " %10" PRIu64 "\n", cs[c].name,
               med[1 + c], med[5 + c], med[1 + c] / med[0], med[5 + c] / med[4], st.keys,
               st.reclaimed);
        if (st.keys > nk || allowed[c] != (uint64_t)(runs * n)) status = 1;
    }
    printf("\n%-60s %-8s %-9s %s\n", "target (issue 23)", "goal", "measured", "(cpu)");
    for (int c = 0; c < 2; c++)
        printf("%-60s <= %4.2fx %6.2fx  %6.2fx  %s\n", cs[c].name, BT_TARGET_MISS_RATIO,
               med[1 + c] / med[0], med[5 + c] / med[4],
               bt_met(med[1 + c] / med[0] <= BT_TARGET_MISS_RATIO));
    printf("(ratios to the floor; on a loaded machine the (cpu) ones are the steadier)\n"
           "\nexit status %d\n", status);
    for (int c = 0; c < nc; c++) sluice_table_free(cs[c].t);
    for (int q = 0; q < 8; q++) free(v[q]);
    free(arr);
    free(keys);
    free(pos);
    free(last);
    return status;
}

/* calloc, but not the library's default allocator: no huge-page advice. */
static void *bt_calloc(size_t n, size_t size) { return calloc(n, size); }

/* ---- --churn: test_table_scale's owned keys, one thread ---------------- */

/* The pattern of test_table_scale's two threaded cases (owned keys;
 * evict-lru), in one thread, so that the cost of a decision can be
 * compared across key counts: 16 owners of keys/16 keys each, 400 epochs
 * 25 ms apart, about 4 requests a key in all, half in a window that moves
 * through the keys and half anywhere.  Owned: "token-bucket 2/s burst=2",
 * max_keys = keys, permits 0-3; evict-lru: "token-bucket 1/s burst=2",
 * max_keys = keys / 4, 1 permit.  One epoch's requests, all owners in
 * turn (noinline: callgrind's --toggle-collect=bt_churn_epoch counts them);
 * returns how many. */
#define BT_CHURN_OWNERS 16
#define BT_CHURN_EPOCHS 400
__attribute__((noinline)) uint64_t bt_churn_epoch(sluice_table *t, uint64_t keys, bool evict,
                                                  unsigned ep, uint64_t *rs);
__attribute__((noinline)) uint64_t bt_churn_epoch(sluice_table *t, uint64_t keys, bool evict,
                                                  unsigned ep, uint64_t *rs)
{
    const uint64_t np = keys / BT_CHURN_OWNERS, hot = np / 64 > 8 ? np / 64 : 8;
    const uint64_t per_epoch = (4 * np + BT_CHURN_EPOCHS - 1) / BT_CHURN_EPOCHS;
    const uint64_t now = 1000 * BT_T0_NS + ep * 25000000ULL, hot0 = ep * np / BT_CHURN_EPOCHS;
    uint64_t calls = 0;
    for (unsigned w = 0; w < BT_CHURN_OWNERS; w++)
        for (uint64_t i = 0; i < per_epoch; i++) {
            const uint64_t x = bt_rand(&rs[w]);
            const uint64_t j = (x & 1) ? (hot0 + (x >> 8) % hot) % np : (x >> 8) % np;
            const unsigned pick = (unsigned)((x >> 40) % 10);
            const uint64_t p = evict ? 1 : pick == 0 ? 0 : pick < 7 ? 1 : pick < 9 ? 2 : 3;
            const uint64_t k[2] = {j * BT_CHURN_OWNERS + w, evict ? 0xe71cULL : 0x0ed0ULL};
            sluice_result r;
            bt_sink += sluice_table_try_acquire_at(t, k, sizeof k, p, now, &r);
            calls++;
        }
    return calls;
}

/* --churn [owned|evict-lru|stamped]: that case (owned and evict-lru by
 * default) at each --keys count (default 250000, 500000, 1000000):
 * decisions, thread CPU ns a decision, keys reclaimed and evicted.
 * stamped: evict-lru on a table that has made a reservation first, so
 * that its entries' stamps follow every shift (src/table/table_settle.c). */
static int bt_churn(const bt_opts *o, const char *only)
{
    printf("%-10s %-9s %9s %10s %10s %10s\n", "keys", "case", "decisions", "cpu ns/dec",
           "reclaimed", "evicted");
    for (size_t z = 0; z < o->nsizes; z++) {
        const uint64_t keys = o->sizes[z] / BT_CHURN_OWNERS * BT_CHURN_OWNERS;
        static const char *const names[] = {"owned", "evict-lru", "stamped"};
        for (int c = 0; c < 3; c++) {
            if (only ? strcmp(only, names[c]) != 0 : c == 2) continue;
            const int evict = c >= 1;
            char err[256];
            const uint64_t max_keys = evict ? keys / 4 : keys;
            /* a fixed hash key: the same slots, moves and evictions in every
             * run, so that callgrind's counts compare across builds */
            const uint64_t seed[2] = {0x5eed0c4u, 0x5eed0c5u};
            sluice_table *t = sluice__table_new_seeded(
                evict ? "token-bucket 1/s burst=2" : "token-bucket 2/s burst=2", (size_t)max_keys,
                evict ? SLUICE_TABLE_EVICT_LRU : 0, seed, err, sizeof err);
            if (!t) {
                fprintf(stderr, "bench_table: --churn at %llu keys: %s\n", (unsigned long long)keys, err);
                return 1;
            }
            if (c == 2) { /* one reservation, settled, its key removed: the same
                           * table as evict-lru's, but that the stamps exist */
                sluice_table_reservation rv;
                if (!sluice_table_reserve_at(t, "r", 1, 1, 1000 * BT_T0_NS, 0, &rv, NULL) ||
                    sluice_table_reservation_settle_at(&rv, 1, 1000 * BT_T0_NS) != 0 ||
                    sluice_table_remove(t, "r", 1) != 0) {
                    fprintf(stderr, "bench_table: --churn stamped: the reservation failed\n");
                    sluice_table_free(t);
                    return 1;
                }
            }
            uint64_t rs[BT_CHURN_OWNERS], calls = 0;
            for (unsigned w = 0; w < BT_CHURN_OWNERS; w++) rs[w] = 42 + 7919 * w;
            const uint64_t c0 = bt_cpu_ns();
            for (unsigned ep = 0; ep < BT_CHURN_EPOCHS; ep++)
                calls += bt_churn_epoch(t, keys, evict, ep, rs);
            const double ns = (double)(bt_cpu_ns() - c0) / (double)calls;
            sluice_table_stats st;
            sluice_table_stats_get(t, &st);
            printf("%-10llu %-9s %9llu %10.1f %10llu %10llu\n", (unsigned long long)keys,
                   names[c], (unsigned long long)calls, ns,
                   (unsigned long long)st.reclaimed, (unsigned long long)st.evicted);
            sluice_table_free(t);
        }
    }
    return 0;
}

static void bt_usage(FILE *out)
{
    fprintf(out,
            "usage: bench_table [--quick] [--runs N] [--iters N] [--keys N,N,...]\n"
            "                   [--flood N] [--flood-keys N] [--spec SPEC]\n"
            "       bench_table --refusals [--runs N] [--iters N]\n"
            "       bench_table --burst [--burst-keys N] [--runs N] [--iters N] [--spec SPEC]\n"
            "       bench_table --overload [--top] [--runs N] [--iters N] [--flood-keys N]\n"
            "       bench_table --sparse [--runs N] [--iters N] [--flood-keys N]\n"
            "       bench_table --churn [owned|evict-lru|stamped] [--keys N,N,...]\n"
            "  --runs N     repetitions of each measurement (default 7)\n"
            "  --iters N    decisions per repetition and thread (default 2000000)\n"
            "  --flood N    unique keys of the flood (default 100000000; 0: no flood)\n"
            "  --flood-keys N  max_keys and held keys of the flood's table\n"
            "               (default 1000000)\n"
            "  --keys LIST  live key counts (default 1000,1000000,10000000)\n"
            "  --spec S     the tables' spec (default \"" BT_DEFAULT_SPEC "\")\n"
            "  --refusals   only the cost of a refusal with and without the sketch\n"
            "               of the keys refused most (sluice_table_set_top)\n"
            "  --burst      only the burst API: ns per decision in bursts of 32 against\n"
            "               single calls and the floor \"independent random loads each\n"
            "               followed by a locked add\" (default --iters 1000000)\n"
            "  --burst-keys N  live keys of --burst (default 1000000)\n"
            "  --overload   only the overload path: 2 threads refusing one hot key\n"
            "               against 1, a flood of unique keys against a full table of\n"
            "               --flood-keys against a normal decision, and that decision\n"
            "               against one dependent random load (default --iters 1000000)\n"
            "  --sparse     only keys visited now and then: 10^6 keys (--flood-keys)\n"
            "               visited uniformly 10 ns apart, at rest by their next visit\n"
            "               (token-bucket 1000/s burst=1000) and held (1/h), against one\n"
            "               dependent random load over 64 MiB (default --iters 1000000)\n"
            "  --churn      only test_table_scale's owned keys and evict-lru (max_keys\n"
            "               keys / 4) in one thread: CPU ns a decision at each --keys\n"
            "               (default 250000,500000,1000000); callgrind counts them\n"
            "               (stamped: evict-lru after one reservation, so with the\n"
            "               entries' stamps)\n"
            "               with --toggle-collect=bt_churn_epoch\n"
            "  --top        with --overload: both tables keep the sketch of the keys\n"
            "               refused most (sluice_table_set_top(t, 64, 16)); with\n"
            "               --burst: the burst's table\n"
            "  --small-pages  the tables in 4 KB pages: an allocator of the bench's\n"
            "               own (calloc passed through), which the library gives no\n"
            "               huge-page advice (src/base/alloc.c)\n"
            "  --quick      a smoke run of every part: --runs 3 --iters 200000\n"
            "               --keys 1000,1000000 --flood 3000000 --flood-keys 100000\n"
            "Prints the median ns per decision at each key count, uniform and\n"
            "Zipf(1.0) keys, 1 and 2 threads, against a floor (one dependent\n"
            "random read from an array as large as the table); bytes per key;\n"
            "a flood of unique keys through a table of max_keys 10^6; and the\n"
            "issue's targets, met or missed.\n");
}

int main(int argc, char **argv)
{
    bt_opts o = {.runs = 7, .iters = 2000000, .flood = 100000000, .flood_keys = 1000000,
                 .burst_keys = 1000000,
                 .sizes = {1000, 1000000, 10000000}, .nsizes = 3,
                 .spec = BT_DEFAULT_SPEC};
    bool refusals = false, overload = false, sparse = false, churn = false;
    const char *churn_only = NULL; /* --churn's case, or both */
    bool quick = false, runs_set = false, iters_set = false, flood_set = false,
         keys_set = false, flood_keys_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bt_usage(stdout);
            return 0;
        } else if (strcmp(a, "--quick") == 0) {
            quick = true;
        } else if (strcmp(a, "--refusals") == 0) {
            refusals = true;
        } else if (strcmp(a, "--burst") == 0) {
            o.burst = true;
        } else if (strcmp(a, "--overload") == 0) {
            overload = true;
        } else if (strcmp(a, "--sparse") == 0) {
            sparse = true;
        } else if (strcmp(a, "--churn") == 0) {
            churn = true;
            if (v && (strcmp(v, "owned") == 0 || strcmp(v, "evict-lru") == 0 ||
                      strcmp(v, "stamped") == 0)) {
                churn_only = v;
                i++;
            }
        } else if (strcmp(a, "--top") == 0) {
            o.top = true;
        } else if (strcmp(a, "--small-pages") == 0) {
            const sluice_allocator al = {.malloc_fn = malloc, .calloc_fn = bt_calloc, .free_fn = free};
            if (sluice_set_allocator(&al) != 0) return 2;
        } else if (strcmp(a, "--burst-keys") == 0) {
            if (bt_parse_u64(a, v, 1, UINT64_C(100000000), &o.burst_keys) != 0)
                return 2;
            i++;
        } else if (strcmp(a, "--runs") == 0) {
            if (bt_parse_u64(a, v, 1, 1000, &o.runs) != 0)
                return 2;
            runs_set = true;
            i++;
        } else if (strcmp(a, "--iters") == 0) {
            if (bt_parse_u64(a, v, 1, 100000000, &o.iters) != 0)
                return 2;
            iters_set = true;
            i++;
        } else if (strcmp(a, "--flood") == 0) {
            if (bt_parse_u64(a, v, 0, UINT64_C(10000000000), &o.flood) != 0)
                return 2;
            flood_set = true;
            i++;
        } else if (strcmp(a, "--flood-keys") == 0) {
            if (bt_parse_u64(a, v, 2 * BT_FLOOD_TRACKED, UINT64_C(100000000), &o.flood_keys) != 0)
                return 2;
            flood_keys_set = true;
            i++;
        } else if (strcmp(a, "--keys") == 0) {
            if (bt_parse_sizes(v, &o) != 0)
                return 2;
            keys_set = true;
            i++;
        } else if (strcmp(a, "--spec") == 0) {
            if (v == NULL) {
                fprintf(stderr, "bench_table: --spec needs a value\n");
                return 2;
            }
            o.spec = v;
            i++;
        } else {
            fprintf(stderr, "bench_table: unknown argument \"%s\" (try --help)\n", a);
            return 2;
        }
    }
    if (quick) {
        if (!runs_set)
            o.runs = 3;
        if (!iters_set)
            o.iters = 200000;
        if (!flood_set)
            o.flood = 3000000;
        if (!flood_keys_set)
            o.flood_keys = 100000;
        if (!keys_set) {
            o.sizes[0] = 1000;
            o.sizes[1] = 1000000;
            o.nsizes = 2;
        }
    }
    if (o.top && !overload && !o.burst) {
        fprintf(stderr, "bench_table: --top goes with --overload or --burst (--refusals "
                        "measures both)\n");
        return 2;
    }
    if (churn) {
        if (!keys_set) {
            o.sizes[0] = 250000;
            o.sizes[1] = 500000;
            o.sizes[2] = 1000000;
            o.nsizes = 3;
        }
        return bt_churn(&o, churn_only);
    }
    if (refusals) return bt_refusals(&o);
    if (overload) {
        if (!iters_set) o.iters = quick ? 200000 : 1000000;
        if (!flood_keys_set) o.flood_keys = 1000000;
        return bt_overload(&o);
    }
    if (sparse) {
        if (!iters_set) o.iters = quick ? 200000 : 1000000;
        if (!flood_keys_set) o.flood_keys = 1000000;
        return bt_sparse(&o);
    }
    if (o.burst) {
        if (!iters_set)
            o.iters = quick ? 200000 : 1000000;
        return bt_burst_main(&o);
    }
    bt_page = sysconf(_SC_PAGESIZE);
    if (bt_page <= 0)
        bt_page = 4096;

    int status = 0;
    const uint64_t wall0 = bt_clock_ns();

    /* The flood first: ru_maxrss is then its own peak. */
    bt_flood_result fr;
    memset(&fr, 0, sizeof fr);
    if (o.flood > 0 && bt_flood(&o, &fr) != 0)
        return 1;

    bt_size_result *sr = bt_xmalloc(o.nsizes * sizeof *sr);
    double worst_spread = 0;
    for (size_t s = 0; s < o.nsizes; s++)
        if (bt_measure_size(&o, o.sizes[s], &sr[s], &worst_spread) != 0)
            return 1;

    /* ---- the report ---- */
    char nb[32];
    printf("bench_table: sluice %s, spec \"%s\", 16-byte keys, caller time "
           "+%u ns per decision;\n%" PRIu64 " runs x %" PRIu64
           " decisions per thread; median ns per decision\n\n",
           sluice_version(), o.spec, BT_STEP_NS, o.runs, o.iters);
    printf("floor: one dependent random 8-byte read per decision from an array "
           "as large as the\ntable, at a fixed place per key, over the same key "
           "sequence (same threads)\n\n");
    printf("%-5s %-8s %3s %12s %8s %9s %8s %7s %12s %8s\n", "keys", "dist", "thr",
           "ns/decision", "(cpu)", "floor ns", "(cpu)", "ratio", "Mdecisions/s", "allowed");
    for (size_t s = 0; s < o.nsizes; s++) {
        const bt_size_result *r = &sr[s];
        for (int k = 0; k < BT_NMEAS; k += 2) {
            const bt_meas *fl = &r->meas[k], *tb = &r->meas[k + 1];
            printf("%-5s %-8s %3d %11.1f%s %8.1f %9.1f %8.1f %6.1fx %12.2f %7.1f%%\n",
                   bt_count(r->n, nb, sizeof nb), bt_dist_names[tb->dist], tb->nthreads,
                   tb->med_ns, r->lost_keys ? "!" : " ", tb->med_cpu, fl->med_ns, fl->med_cpu,
                   fl->med_ns > 0 ? tb->med_ns / fl->med_ns : 0.0, tb->med_rate / 1e6,
                   tb->decided ? 100.0 * (double)tb->allowed / (double)tb->decided : 0.0);
        }
    }
    printf("\nMedians of the wall clock; (cpu): of the thread's CPU time, which "
           "leaves out the\ntime it was descheduled or asleep on a lock.  2 threads: "
           "ns per decision per\nthread; Mdecisions/s is both threads together.  ratio: "
           "wall / floor wall.\nWorst run spread (max-min)/median over all cells "
           "(wall): %.0f%%.\n", worst_spread * 100);
    bool lost = false;
    for (size_t s = 0; s < o.nsizes; s++)
        if (sr[s].lost_keys) {
            lost = true;
            printf("! %s keys: not all keys stayed live (keys %" PRIu64 ", reclaimed %" PRIu64
                   ", evicted %" PRIu64 ", refused %" PRIu64 ")\n",
                   bt_count(sr[s].n, nb, sizeof nb), sr[s].st.keys, sr[s].st.reclaimed,
                   sr[s].st.evicted, sr[s].st.refused);
        }
    if (lost)
        status = 1;

    printf("\nbytes per key (table of max_keys = N, N keys in it)\n");
    printf("%-6s %14s %14s %14s %12s %14s\n", "keys", "table bytes", "bytes/key",
           "RSS growth", "RSS/key", "first request");
    for (size_t s = 0; s < o.nsizes; s++) {
        const bt_size_result *r = &sr[s];
        printf("%-6s %14zu %14.1f %14" PRIu64 " %12.1f %11.0f ns\n",
               bt_count(r->n, nb, sizeof nb), r->table_bytes, r->bytes_per_key,
               r->rss_delta, r->rss_per_key, r->fill_ns);
    }

    uint64_t peak = fr.rss_peak_ru > fr.rss_peak_statm ? fr.rss_peak_ru : fr.rss_peak_statm;
    uint64_t held_d = fr.rss_held > fr.rss_base ? fr.rss_held - fr.rss_base : 0;
    uint64_t peak_d = peak > fr.rss_base ? peak - fr.rss_base : 0;
    double ratio_whole = fr.rss_held ? (double)peak / (double)fr.rss_held : 0.0;
    double ratio_table = held_d ? (double)peak_d / (double)held_d : 0.0;
    char fk[32];
    bt_count(o.flood_keys, fk, sizeof fk);
    if (fr.run) {
        const double mib = 1024.0 * 1024.0;
        printf("\nflood: max_keys %s; %s held keys (1 permit each, caller time +1 ns "
               "per key), then\n%" PRIu64 " unique keys asking once each (caller time "
               "+%u ns per key); %u held keys\nchecked against their own limiter "
               "(in turn, one request per %u ns of caller time)\n",
               fk, fk, fr.n, (unsigned)fr.step_ns, BT_FLOOD_TRACKED,
               (unsigned)(fr.track_every * fr.step_ns));
        printf("  fill:  %" PRIu64 " keys held, RSS %.1f MiB (%.1f MiB over the "
               "%.1f MiB before the table), %.2f s\n",
               fr.held, (double)fr.rss_held / mib, (double)held_d / mib,
               (double)fr.rss_base / mib, fr.fill_s);
        printf("  flood: %.1f s, %.0f ns per flood key (with the checks); slowest "
               "%u keys: %.2f s\n         (from flood key %" PRIu64 "); admitted %" PRIu64
               ", refused as full %" PRIu64 ", other errors %" PRIu64 "\n",
               fr.elapsed_s, fr.n ? fr.elapsed_s * 1e9 / (double)fr.n : 0.0,
               BT_FLOOD_SAMPLE_EVERY, fr.slowest_s, fr.slowest_at, fr.flood_allowed,
               fr.flood_full, fr.flood_other);
        printf("  keys held: max %" PRIu64 " (sampled every %u flood keys), at the "
               "end %" PRIu64 "; reclaimed %" PRIu64 ", evicted %" PRIu64 "\n",
               fr.keys_max, BT_FLOOD_SAMPLE_EVERY, fr.st.keys, fr.st.reclaimed,
               fr.st.evicted);
        printf("  peak RSS: %.1f MiB (ru_maxrss %.1f, statm %.1f): %.3fx the RSS "
               "with the held keys;\n  the table alone (over the RSS before it): "
               "%.1f MiB, %.3fx\n",
               (double)peak / mib, (double)fr.rss_peak_ru / mib,
               (double)fr.rss_peak_statm / mib, ratio_whole, (double)peak_d / mib,
               ratio_table);
        printf("  held-key decisions: %" PRIu64 " (%" PRIu64 " allowed by the limiter), %" PRIu64
               " different from the limiter's\n  (of which %" PRIu64 " refused as full)\n",
               fr.tracked_decisions, fr.tracked_allowed, fr.mismatches, fr.mismatches_full);
        if (fr.mismatches || fr.keys_max > o.flood_keys || fr.held != o.flood_keys)
            status = 1;
    }

    /* ---- the targets ---- */
    const bt_size_result *m6 = NULL;
    for (size_t s = 0; s < o.nsizes; s++)
        if (sr[s].n == 1000000)
            m6 = &sr[s];
    printf("\n%-56s %-9s %-11s %s\n", "target (issue)", "goal", "measured", "(cpu)");
    if (m6 != NULL) {
        /* meas order per dist: 1 thread floor, table; 2 threads floor, table */
        double u1 = m6->meas[1].med_ns, z1 = m6->meas[5].med_ns;
        double bytes = m6->bytes_per_key > m6->rss_per_key ? m6->bytes_per_key : m6->rss_per_key;
        printf("%-56s <= %3.0f ns %6.1f ns %6.1f  %s%s\n",
               "ns/decision, 10^6 uniform keys, 1 thread, caller time", BT_TARGET_UNIFORM_NS,
               u1, m6->meas[1].med_cpu, bt_met(u1 <= BT_TARGET_UNIFORM_NS),
               m6->lost_keys ? " (!)" : "");
        printf("%-56s <= %3.0f ns %6.1f ns %6.1f  %s%s\n",
               "ns/decision, 10^6 Zipf(1.0) keys, 1 thread, caller time", BT_TARGET_ZIPF_NS,
               z1, m6->meas[5].med_cpu, bt_met(z1 <= BT_TARGET_ZIPF_NS),
               m6->lost_keys ? " (!)" : "");
        printf("%-56s <= %3.0f B  %6.1f B          %s\n",
               "bytes per key all-in, 10^6 16-byte keys", BT_TARGET_BYTES, bytes,
               bt_met(bytes <= BT_TARGET_BYTES));
        printf("  (allocated %.1f B/key, resident %.1f B/key: the larger is judged;\n"
               "   the floors at 10^6 keys: uniform %.1f ns, Zipf %.1f ns)\n",
               m6->bytes_per_key, m6->rss_per_key, m6->meas[0].med_ns, m6->meas[4].med_ns);
    } else {
        printf("(no 10^6-key table in this run: the decision and bytes targets are not measured)\n");
    }
    if (fr.run) {
        char label[96];
        double judged = ratio_whole > ratio_table ? ratio_whole : ratio_table;
        snprintf(label, sizeof label, "flood peak RSS / RSS of %s held keys", fk);
        printf("%-56s <= %4.2fx  %6.3fx           %s\n", label, BT_TARGET_FLOOD_RSS, judged,
               bt_met(judged <= BT_TARGET_FLOOD_RSS));
        printf("  (whole process %.3fx, the table alone %.3fx: the larger is judged)\n",
               ratio_whole, ratio_table);
        snprintf(label, sizeof label, "flood keys held, max (sampled)");
        printf("%-56s <= %-6s %8" PRIu64 "           %s\n", label, fk, fr.keys_max,
               bt_met(fr.keys_max <= o.flood_keys));
        printf("%-56s    0      %8" PRIu64 "           %s\n", "flood held-key decisions changed",
               fr.mismatches, bt_met(fr.mismatches == 0));
    } else {
        printf("(no flood in this run: the flood targets are not measured)\n");
    }
    printf("\ntotal wall time %.0f s; exit status %d\n",
           (double)(bt_clock_ns() - wall0) / 1e9, status);

    for (size_t s = 0; s < o.nsizes; s++)
        for (int k = 0; k < BT_NMEAS; k++) {
            free(sr[s].meas[k].ns);
            free(sr[s].meas[k].cpu);
            free(sr[s].meas[k].rate);
        }
    free(sr);
    return status;
}
