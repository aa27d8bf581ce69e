/* bench_region.c -- a decision on a table shared between processes
 * (sluice_table_attach, src/table/region_table.c) against one on the in-process
 * table (sluice_table_new), same spec, same keys, same sequence.
 *
 *   build/bench/bench_region [--keys N[,N...]] [--runs R] [--decisions D]
 *                            [--spec SPEC] [--table local|region]
 *
 * Defaults: N = 1000 and 100000 live 16-byte keys (two 64-bit ids), drawn
 * uniformly; spec "token-bucket 100/s"; R = 7 runs of D = 200000 decisions
 * each, the two tables' runs interleaved (in-process, region, in-process,
 * ...) so that a loaded machine's noise falls on both alike.  Every key is
 * put in each table first (one request of half its burst, so it stays in
 * use: held, never reclaimed).  The region is an anonymous MAP_SHARED
 * mapping, as nginx's zone or a mapping made before fork is.  Printed: the
 * median ns per sluice_table_try_acquire_at() of each table, on the wall
 * clock and in thread CPU time (which leaves out descheduling), the ratio
 * region / in-process and the issue's target (<= 1.2x), met or MISSED.  One
 * thread: the cost of a decision, not of contention between processes.
 *
 * Keys at rest by their next visit (bench/README.md, "bench_table --sparse"):
 * --step NS (caller time per decision, default 1) and --fill P (the first
 * request's permits, default half the burst), e.g. --keys 1000000 --step 10
 * --fill 1 --spec "token-bucket 1000/s burst=1000": a key's next visit
 * comes about 10 ms after its last, its permit back after 1 ms.
 *
 * Refusals: --spec "fixed-window 2/1h" (each key filled with 1 of its 2,
 * one more admitted, then every decision a refusal), with --procs 2 for
 * two processes refusing at once (a refusal reads the shard, no lock).
 *
 * Instruction counts, which a busy machine does not move (callgrind):
 * --table local or --table region (without --procs) decides on that table
 * only, and prints its ns; br_run is never inlined, so that
 *   valgrind --tool=callgrind --toggle-collect=br_run \
 *       build/bench/bench_region --table region --keys 100000 --runs 1 \
 *       --decisions 100000
 * counts the instructions of the warm-up run and the timed runs alone
 * ((R + 1) x D decisions; the filling and the set-up are left out), and
 * --cache-sim=yes (with --LL=2097152,16,64, an LL the table outgrows) their
 * misses.  The warm-up run (one run of the sequence, untimed, before the R
 * runs) leaves no first touch to the timed runs: every key's page was
 * touched when it was filled.
 *
 * With --procs P (P >= 2): P forked processes on the region table against
 * P threads on the in-process table, each deciding D times over the same
 * N keys (its own sequence), all started together; printed: the total
 * decisions per second of each (the median of R runs) and their ratio.
 */
#define _GNU_SOURCE
#include <sluice.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct key16 {
    uint64_t w[2];
} key16;

static volatile uint64_t br_sink;

static uint64_t br_clock(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t br_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int br_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ns per decision over the sequence, wall and CPU. */
static uint64_t br_step = 1; /* caller time per decision, ns (--step) */

static __attribute__((noinline)) void br_run(sluice_table *t, const key16 *keys,
                                             const uint32_t *seq, size_t d, uint64_t *now,
                                             double *wall, double *cpu)
{
    uint64_t ok = 0;
    const uint64_t w0 = br_clock(CLOCK_MONOTONIC), c0 = br_clock(CLOCK_THREAD_CPUTIME_ID);
    for (size_t i = 0; i < d; i++)
        ok += sluice_table_try_acquire_at(t, &keys[seq[i]], sizeof(key16), 1, *now += br_step, NULL);
    const uint64_t c1 = br_clock(CLOCK_THREAD_CPUTIME_ID), w1 = br_clock(CLOCK_MONOTONIC);
    br_sink += ok;
    *wall = (double)(w1 - w0) / (double)d;
    *cpu = (double)(c1 - c0) / (double)d;
}

/* ---- several deciders at once ---- */

typedef struct br_job {
    sluice_table *t;
    const key16 *keys;
    uint32_t *seq;
    size_t d;
} br_job;

static void *br_thread(void *arg)
{
    br_job *j = arg;
    uint64_t now = 2000000000u, ok = 0;
    for (size_t i = 0; i < j->d; i++)
        ok += sluice_table_try_acquire_at(j->t, &j->keys[j->seq[i]], sizeof(key16), 1, ++now, NULL);
    br_sink += ok;
    return NULL;
}

/* Decisions per second of P deciders: threads on `local`, or (procs) forked
 * processes on `shared`. */
static double br_many(sluice_table *t, bool procs, unsigned p, const key16 *keys,
                      uint32_t *const *seqs, size_t d)
{
    br_job jobs[64];
    pthread_t th[64];
    pid_t kids[64];
    const uint64_t w0 = br_clock(CLOCK_MONOTONIC);
    for (unsigned i = 0; i < p; i++) {
        jobs[i] = (br_job){.t = t, .keys = keys, .seq = seqs[i], .d = d};
        if (!procs) {
            if (pthread_create(&th[i], NULL, br_thread, &jobs[i]) != 0) return 0;
        } else if ((kids[i] = fork()) == 0) {
            br_thread(&jobs[i]);
            _exit(0);
        } else if (kids[i] < 0) {
            return 0;
        }
    }
    for (unsigned i = 0; i < p; i++) {
        if (!procs) pthread_join(th[i], NULL);
        else waitpid(kids[i], NULL, 0);
    }
    const uint64_t w1 = br_clock(CLOCK_MONOTONIC);
    return (double)p * (double)d / ((double)(w1 - w0) / 1e9);
}

/* Which tables a run without --procs decides on (--table). */
enum { BR_BOTH, BR_LOCAL, BR_REGION };
static int br_table = BR_BOTH;

static int br_one(const char *spec, uint64_t n, unsigned runs, size_t d, unsigned procs,
                  uint64_t fill)
{
    char err[256];
    sluice_table *local = sluice_table_new(spec, n, err, sizeof err);
    if (!local) {
        fprintf(stderr, "bench_region: %s\n", err);
        return 1;
    }
    const size_t size = sluice_table_region_size(spec, n, sizeof(key16), err, sizeof err);
    void *reg = size ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                     : MAP_FAILED;
    sluice_table *shared = reg != MAP_FAILED
                               ? sluice_table_attach(reg, size, spec, n, sizeof(key16), 0, err, sizeof err)
                               : NULL;
    if (!shared) {
        fprintf(stderr, "bench_region: region of %zu bytes: %s\n", size, err);
        return 1;
    }
    sluice_spec_info info;
    sluice_spec_parse(spec, &info, NULL, 0);
    const uint64_t half = fill ? fill : info.capacity / 2 ? info.capacity / 2 : 1;
    key16 *keys = malloc(n * sizeof *keys);
    uint32_t *seq = malloc(d * sizeof *seq);
    double *wl = malloc(runs * sizeof *wl), *cl = malloc(runs * sizeof *cl);
    double *wr = malloc(runs * sizeof *wr), *cr = malloc(runs * sizeof *cr);
    if (!keys || !seq || !wl || !cl || !wr || !cr) {
        fprintf(stderr, "bench_region: out of memory\n");
        return 1;
    }
    uint64_t now = 1000000000u, rng = 42;
    for (uint64_t i = 0; i < n; i++) {
        keys[i].w[0] = br_mix(i + 1);
        keys[i].w[1] = br_mix(~i);
        if (!sluice_table_try_acquire_at(local, &keys[i], sizeof(key16), half, now, NULL) ||
            !sluice_table_try_acquire_at(shared, &keys[i], sizeof(key16), half, now, NULL)) {
            fprintf(stderr, "bench_region: filling key %" PRIu64 " refused\n", i);
            return 1;
        }
    }
    for (size_t i = 0; i < d; i++) seq[i] = (uint32_t)(br_mix(rng++) % n);
    if (procs >= 2) {
        uint32_t *seqs[64];
        double *tl = wl, *tr = wr; /* decisions per second, per run */
        for (unsigned i = 0; i < procs; i++) {
            if (!(seqs[i] = malloc(d * sizeof *seqs[i]))) {
                fprintf(stderr, "bench_region: out of memory\n");
                return 1;
            }
            for (size_t j = 0; j < d; j++) seqs[i][j] = (uint32_t)(br_mix(rng++) % n);
        }
        for (unsigned r = 0; r < runs; r++) {
            tl[r] = br_many(local, false, procs, keys, seqs, d);
            tr[r] = br_many(shared, true, procs, keys, seqs, d);
            if (tl[r] <= 0 || tr[r] <= 0) {
                fprintf(stderr, "bench_region: cannot start %u deciders\n", procs);
                return 1;
            }
        }
        qsort(tl, runs, sizeof *tl, br_cmp);
        qsort(tr, runs, sizeof *tr, br_cmp);
        printf("%10" PRIu64 "  %9u  %14.0f  %14.0f  %6.2fx\n", n, procs, tl[runs / 2],
               tr[runs / 2], tl[runs / 2] / tr[runs / 2]);
        for (unsigned i = 0; i < procs; i++) free(seqs[i]);
        goto done;
    }
    uint64_t now_l = now, now_r = now;
    if (br_table != BR_REGION) br_run(local, keys, seq, d, &now_l, &wl[0], &cl[0]); /* warm */
    if (br_table != BR_LOCAL) br_run(shared, keys, seq, d, &now_r, &wr[0], &cr[0]);
    for (unsigned r = 0; r < runs; r++) {
        if (br_table != BR_REGION) br_run(local, keys, seq, d, &now_l, &wl[r], &cl[r]);
        if (br_table != BR_LOCAL) br_run(shared, keys, seq, d, &now_r, &wr[r], &cr[r]);
    }
    if (br_table != BR_BOTH) { /* one table: its ns alone */
        double *w = br_table == BR_LOCAL ? wl : wr, *c = br_table == BR_LOCAL ? cl : cr;
        qsort(w, runs, sizeof *w, br_cmp);
        qsort(c, runs, sizeof *c, br_cmp);
        printf("%10" PRIu64 "  %-7s %9.1f %9.1f\n", n, br_table == BR_LOCAL ? "local" : "region",
               w[runs / 2], c[runs / 2]);
        goto done;
    }
    qsort(wl, runs, sizeof *wl, br_cmp);
    qsort(cl, runs, sizeof *cl, br_cmp);
    qsort(wr, runs, sizeof *wr, br_cmp);
    qsort(cr, runs, sizeof *cr, br_cmp);
    const double ml = wl[runs / 2], mcl = cl[runs / 2], mr = wr[runs / 2], mcr = cr[runs / 2];
    printf("%10" PRIu64 "  %9.1f %9.1f  %9.1f %9.1f  %6.2fx %6.2fx  %8.1f  %s\n", n, ml, mcl, mr,
           mcr, mr / ml, mcr / mcl, (double)size / (double)n,
           mcr / mcl <= 1.2 ? "met" : "MISSED");
done:
    sluice_table_free(local);
    sluice_table_free(shared);
    munmap(reg, size);
    free(keys);
    free(seq);
    free(wl);
    free(cl);
    free(wr);
    free(cr);
    return 0;
}

int main(int argc, char **argv)
{
    const char *spec = "token-bucket 100/s";
    char keylist[256] = "1000,100000";
    unsigned runs = 7, procs = 1;
    size_t d = 200000;
    uint64_t fill = 0; /* 0: half the burst */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--spec") && i + 1 < argc) spec = argv[++i];
        else if (!strcmp(argv[i], "--keys") && i + 1 < argc) snprintf(keylist, sizeof keylist, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--decisions") && i + 1 < argc) d = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--procs") && i + 1 < argc) procs = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--step") && i + 1 < argc) br_step = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--fill") && i + 1 < argc) fill = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--table") && i + 1 < argc && !strcmp(argv[i + 1], "local"))
            br_table = BR_LOCAL, i++;
        else if (!strcmp(argv[i], "--table") && i + 1 < argc && !strcmp(argv[i + 1], "region"))
            br_table = BR_REGION, i++;
        else {
            fprintf(stderr, "usage: bench_region [--keys N[,N...]] [--runs R] [--decisions D] "
                            "[--procs P] [--spec SPEC] [--step NS] [--fill P] [--table local|region]\n");
            return 2;
        }
    }
    if (runs < 1 || d < 1 || procs < 1 || procs > 64 || br_step < 1 || br_step > 1000000) {
        fprintf(stderr, "bench_region: --runs and --decisions must be >= 1, --procs 1 .. 64, "
                        "--step 1 .. 1000000\n");
        return 2;
    }
    printf("bench_region: sluice %s, spec \"%s\", 16-byte keys drawn uniformly, %u decider%s, "
           "median of %u runs of %zu decisions each, +%" PRIu64 " ns each\n",
           sluice_version(), spec, procs, procs > 1 ? "s" : "", runs, d, br_step);
    if (procs >= 2)
        printf("%10s  %9s  %14s  %14s  %7s\n", "keys", "deciders", "threads dec/s",
               "processes dec/s", "ratio");
    else if (br_table != BR_BOTH)
        printf("%10s  %-7s %9s %9s\n", "keys", "table", "ns", "(cpu)");
    else
        printf("%10s  %9s %9s  %9s %9s  %7s %7s  %8s  %s\n", "keys", "local ns", "(cpu)",
               "region ns", "(cpu)", "ratio", "(cpu)", "B/key", "target <= 1.2x (cpu)");
    for (char *p = strtok(keylist, ","); p; p = strtok(NULL, ",")) {
        uint64_t n = strtoull(p, NULL, 10);
        if (n < 1) {
            fprintf(stderr, "bench_region: bad key count \"%s\"\n", p);
            return 2;
        }
        if (br_one(spec, n, runs, d, procs, fill)) return 1;
    }
    return 0;
}
