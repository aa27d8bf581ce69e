/* sluice_peer.c -- sluice's side of bench/peers/run.sh.
 *
 * The same scenarios as the peers (Guava, x/time/rate, Redis+Lua), through
 * the public C API only: a token bucket on the live clock,
 * sluice_try_acquire(lim, 1), one limiter shared by 1 or 2 threads.
 *
 *   allowed  "token-bucket 1000000000000/s": every call is admitted
 *   denied   "token-bucket 1/d", one acquire first: every call is refused
 *
 * With --coarse, the same four again with " clock=coarse" appended to the
 * spec (run.sh passes it only when `sluice spec` accepts that option).
 * `sluice_peer --probe SPEC` exits 0 when the library accepts SPEC, else 1.
 *
 * Each repetition runs for --ms milliseconds (checked every BATCH calls, and
 * never more than a fixed number of batches); ns per decision is the wall
 * time from the first thread's start to the last thread's end divided by
 * the decisions of all threads.  Repetitions of all scenarios are
 * interleaved round-robin.  Output, one line per repetition:
 *
 *   sample <peer> <threads> <path> <ns_per_decision> <decisions> <allowed> <denied>
 *
 * and one `median` line per scenario with the same first fields.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sluice.h>

#define BATCH 256
#define MAX_BATCHES 4000000u /* a hard cap on one repetition's loop */
#define MAX_THREADS 2

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct scenario {
    const char *peer;
    int threads;
    bool allowed_path;
    const char *spec;
    double ns[64];
    int nsamples;
} scenario;

typedef struct worker {
    sluice_limiter *lim;
    pthread_barrier_t *barrier;
    uint64_t dur_ns;
    uint64_t start, end, decisions, allowed;
} worker;

static void *worker_run(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->barrier);
    uint64_t t0 = mono_ns(), t = t0, n = 0, ok = 0;
    for (uint32_t b = 0; b < MAX_BATCHES; b++) {
        for (int i = 0; i < BATCH; i++)
            ok += sluice_try_acquire(w->lim, 1);
        n += BATCH;
        t = mono_ns();
        if (t - t0 >= w->dur_ns)
            break;
    }
    w->start = t0;
    w->end = t;
    w->decisions = n;
    w->allowed = ok;
    return NULL;
}

/* One repetition of s; returns ns per decision, or -1 on a setup error. */
static double run_once(scenario *s, uint64_t dur_ns, bool print)
{
    char err[160];
    sluice_limiter *lim = sluice_limiter_new(s->spec, err, sizeof err);
    if (!lim) {
        fprintf(stderr, "sluice_peer: spec \"%s\" refused: %s\n", s->spec, err);
        return -1;
    }
    if (!s->allowed_path && !sluice_try_acquire(lim, 1)) {
        fprintf(stderr, "sluice_peer: first acquire of \"%s\" refused\n", s->spec);
        sluice_limiter_free(lim);
        return -1;
    }
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)s->threads);
    worker w[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    for (int i = 0; i < s->threads; i++) {
        w[i] = (worker){.lim = lim, .barrier = &barrier, .dur_ns = dur_ns};
        if (pthread_create(&tid[i], NULL, worker_run, &w[i]) != 0) {
            fprintf(stderr, "sluice_peer: pthread_create failed\n");
            exit(1);
        }
    }
    uint64_t start = UINT64_MAX, end = 0, n = 0, ok = 0;
    for (int i = 0; i < s->threads; i++) {
        pthread_join(tid[i], NULL);
        if (w[i].start < start)
            start = w[i].start;
        if (w[i].end > end)
            end = w[i].end;
        n += w[i].decisions;
        ok += w[i].allowed;
    }
    pthread_barrier_destroy(&barrier);
    sluice_limiter_free(lim);
    double ns = (double)(end - start) / (double)n;
    if (print)
        printf("sample %s %d %s %.3f %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", s->peer,
               s->threads, s->allowed_path ? "allowed" : "denied", ns, n, ok, n - ok);
    return ns;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long arg_long(const char *opt, const char *v, long lo, long hi)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "sluice_peer: %s wants a number in %ld..%ld\n", opt, lo, hi);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    long reps = 5, ms = 200, warm_ms = 100;
    bool coarse = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps"))
            reps = arg_long("--reps", argv[++i < argc ? i : 0], 1, 64);
        else if (!strcmp(argv[i], "--ms"))
            ms = arg_long("--ms", argv[++i < argc ? i : 0], 1, 10000);
        else if (!strcmp(argv[i], "--warmup-ms"))
            warm_ms = arg_long("--warmup-ms", argv[++i < argc ? i : 0], 0, 10000);
        else if (!strcmp(argv[i], "--coarse"))
            coarse = true;
        else if (!strcmp(argv[i], "--probe") && i + 1 < argc) /* exit 0 iff the spec is accepted */
            return sluice_spec_check(argv[i + 1], NULL, 0, NULL, 0) == 0 ? 0 : 1;
        else {
            fprintf(stderr, "usage: sluice_peer [--reps N] [--ms MS] [--warmup-ms MS] [--coarse]\n"
                            "       sluice_peer --probe SPEC\n");
            return 2;
        }
    }
    scenario sc[8];
    int nsc = 0;
    for (int v = 0; v < (coarse ? 2 : 1); v++)
        for (int th = 1; th <= 2; th++)
            for (int p = 0; p < 2; p++)
                sc[nsc++] = (scenario){
                    .peer = v ? "sluice-coarse" : "sluice",
                    .threads = th,
                    .allowed_path = p == 0,
                    .spec = p == 0 ? (v ? "token-bucket 1000000000000/s clock=coarse"
                                        : "token-bucket 1000000000000/s")
                                   : (v ? "token-bucket 1/d clock=coarse" : "token-bucket 1/d"),
                };
    for (int i = 0; i < nsc && warm_ms > 0; i++)
        if (run_once(&sc[i], (uint64_t)warm_ms * 1000000u, false) < 0)
            return 1;
    for (long r = 0; r < reps; r++)
        for (int i = 0; i < nsc; i++) {
            double ns = run_once(&sc[i], (uint64_t)ms * 1000000u, true);
            if (ns < 0)
                return 1;
            sc[i].ns[sc[i].nsamples++] = ns;
        }
    for (int i = 0; i < nsc; i++) {
        scenario *s = &sc[i];
        qsort(s->ns, (size_t)s->nsamples, sizeof s->ns[0], cmp_double);
        int n = s->nsamples;
        double med = n % 2 ? s->ns[n / 2] : (s->ns[n / 2 - 1] + s->ns[n / 2]) / 2;
        printf("median %s %d %s %.3f\n", s->peer, s->threads,
               s->allowed_path ? "allowed" : "denied", med);
    }
    fflush(stdout);
    return 0;
}
