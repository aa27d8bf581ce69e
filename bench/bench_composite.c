/* bench_composite.c -- the cost of a composite decision against single ones.
 *
 * Single-threaded, caller time, 1 permit a request.  For each set of three
 * limits it times
 *
 *   single    sluice_try_acquire_at() on one limit alone
 *   sum of 3  the three limits one after the other, each with its own
 *             sluice_try_acquire_at() (what stacking limiters by hand costs,
 *             without its all-or-nothing guarantee)
 *   composite sluice_composite_try_acquire_at() over the three
 *
 * in three ways:
 *
 *   allowed    every request allowed (specs of 10^9/s, time advanced 1 us a
 *              request); no details asked (res NULL); single: the first
 *              limit
 *   refused    every request refused by the last limit (its spec at 1/d,
 *              after one admission), no details asked; single: that
 *              refusing limit -- a bare read.  The composite stops at the
 *              first limit that refuses, here the last one, so the two
 *              limits before it are decided too
 *   refused&r  the same with details asked (a sluice_result for each call,
 *              per_limit NULL): the composite reads and decides every limit
 *              and reads every word again to validate its snapshot
 *
 * The ratio composite / single is the figure of issue 11: a composite of 3
 * limits costs <= 3.5x one decision.  Each row prints it and its verdict
 * against that target, and the last line counts the rows that meet it.
 * Table keys are timed the same way (three tables, one key each; single =
 * sluice_table_try_acquire_at).
 *
 * The machine is shared and preemption only ever adds time, so each cell is
 * the fastest batch of 2000 requests among --iters / 2000 batches (default
 * 10^6 requests) times --runs (default 7); batches of the three columns are
 * interleaved round-robin, so drift hits them alike.
 *
 *   bench_composite [--iters N] [--runs N]
 *   bench_composite --limits K --path PATH [--calls N]
 *
 * The second form is for callgrind, whose instruction counts a busy machine
 * does not move: K token-bucket limits (2 to 4; PATH allowed, refused or
 * refused&r as above), N composite calls (default 10^5) inside bc_count and
 * nothing else timed or printed but the call count:
 *
 *   valgrind --tool=callgrind --toggle-collect=bc_count \
 *       build/bench/bench_composite --limits 3 --path refused
 *
 * Instructions a call: the collected Ir / N.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sluice.h>

#define STEP_NS 1000u
#define BATCH 2000u
#define TARGET 3.5 /* composite / single, issue 11 */
#define T0_NS 1000000000ULL

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

enum mode { SINGLE, SUM, COMPOSITE };
enum path { ALLOWED, REFUSED, REFUSED_R, NPATHS };
static const char *const path_name[NPATHS] = {"allowed", "refused", "refused&r"};

typedef struct set {
    const char *name;
    const char *specs[3];
    bool tables;
} set;

static const set sets[] = {
    {"token-bucket x3", {"token-bucket 1000000000/s", "token-bucket 1000000000/s", "token-bucket 1000000000/s"}, false},
    {"fixed-window x3", {"fixed-window 1000000000/s", "fixed-window 1000000000/s", "fixed-window 1000000000/s"}, false},
    {"fw + tb + approx", {"fixed-window 1000000000/s", "token-bucket 1000000000/s", "sliding-approx 1000000/ms"}, false},
    {"table keys tb x3", {"token-bucket 1000000000/s", "token-bucket 1000000000/s", "token-bucket 1000000000/s"}, true},
};
#define NSETS (sizeof sets / sizeof sets[0])

typedef struct inst {
    sluice_limiter *lim[3];
    sluice_table *tab[3];
    sluice_limit_ref refs[3];
    uint64_t t;
} inst;

static volatile uint64_t sink;

static void inst_make(inst *in, const set *s, bool deny)
{
    char err[256];
    memset(in, 0, sizeof *in);
    for (int k = 0; k < 3; k++) {
        const char *spec = s->specs[k];
        char buf[128];
        if (deny && k == 2) { /* the last limit refuses after one admission */
            snprintf(buf, sizeof buf, "%.*s 1/d", (int)strcspn(spec, " "), spec);
            spec = buf;
        }
        if (s->tables) {
            in->tab[k] = sluice_table_new(spec, 1000, err, sizeof err);
            if (!in->tab[k]) { fprintf(stderr, "%s: %s\n", spec, err); exit(1); }
            in->refs[k] = sluice_ref_key(in->tab[k], "client-42", 9);
        } else {
            in->lim[k] = sluice_limiter_new(spec, err, sizeof err);
            if (!in->lim[k]) { fprintf(stderr, "%s: %s\n", spec, err); exit(1); }
            in->refs[k] = sluice_ref_limiter(in->lim[k]);
        }
    }
    in->t = T0_NS;
    if (deny) sluice_composite_try_acquire_at(in->refs, 3, 1, in->t, NULL, NULL);
}

static void inst_free(inst *in)
{
    for (int k = 0; k < 3; k++) {
        sluice_limiter_free(in->lim[k]);
        sluice_table_free(in->tab[k]);
    }
}

static bool one(const sluice_limit_ref *r, uint64_t t, sluice_result *res)
{
    return r->limiter ? sluice_try_acquire_at(r->limiter, 1, t, res)
                      : sluice_table_try_acquire_at(r->table, r->key, r->keylen, 1, t, res);
}

/* ns per request */
static double run(inst *in, enum mode m, size_t iters, enum path p)
{
    uint64_t ok = 0;
    const bool deny = p != ALLOWED;
    const uint64_t step = deny ? 1 : STEP_NS;
    sluice_result r, *res = p == REFUSED_R ? &r : NULL;
    /* refused singles: time the refusing limit; allowed: the first */
    const sluice_limit_ref *single = deny ? &in->refs[2] : &in->refs[0];
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < iters; i++) {
        in->t += step;
        switch (m) {
        case SINGLE: ok += one(single, in->t, res); break;
        case SUM:
            for (int k = 0; k < 3; k++) ok += one(&in->refs[k], in->t, res);
            break;
        case COMPOSITE: ok += sluice_composite_try_acquire_at(in->refs, 3, 1, in->t, res, NULL); break;
        }
        if (res) ok += (uint64_t)r.retry_after_ns;
    }
    double ns = (double)(now_ns() - t0) / (double)iters;
    sink += ok;
    return ns;
}

/* The callgrind form's loop: n composite calls over k limits, nothing
 * else (noinline, so that --toggle-collect=bc_count counts exactly these). */
uint64_t bc_count(const sluice_limit_ref *refs, size_t k, enum path p, uint64_t t, size_t n);
__attribute__((noinline)) uint64_t bc_count(const sluice_limit_ref *refs, size_t k, enum path p,
                                            uint64_t t, size_t n)
{
    uint64_t ok = 0;
    const uint64_t step = p == ALLOWED ? STEP_NS : 1;
    sluice_result r, *res = p == REFUSED_R ? &r : NULL;
    for (size_t i = 0; i < n; i++) {
        t += step;
        ok += sluice_composite_try_acquire_at(refs, k, 1, t, res, NULL);
    }
    return ok;
}

/* --limits K --path P: token-bucket xK, the last at 1/d when refusing. */
static int count_mode(size_t k, const char *path, size_t calls)
{
    enum path p = NPATHS;
    for (int i = 0; i < NPATHS; i++)
        if (strcmp(path, path_name[i]) == 0) p = (enum path)i;
    if (k < 2 || k > 4 || p == NPATHS || calls == 0) {
        fprintf(stderr, "bench_composite: --limits 2..4, --path allowed|refused|refused&r\n");
        return 2;
    }
    sluice_limiter *lim[4];
    sluice_limit_ref refs[4];
    char err[256];
    for (size_t i = 0; i < k; i++) {
        const char *spec = p != ALLOWED && i == k - 1 ? "token-bucket 1/d" : sets[0].specs[0];
        if (!(lim[i] = sluice_limiter_new(spec, err, sizeof err))) {
            fprintf(stderr, "%s: %s\n", spec, err);
            return 1;
        }
        refs[i] = sluice_ref_limiter(lim[i]);
    }
    if (p != ALLOWED) sluice_composite_try_acquire_at(refs, k, 1, T0_NS, NULL, NULL);
    const uint64_t ok = bc_count(refs, k, p, T0_NS, calls);
    printf("token-bucket x%zu %s: %zu calls, %llu allowed\n", k, path_name[p], calls,
           (unsigned long long)ok);
    for (size_t i = 0; i < k; i++) sluice_limiter_free(lim[i]);
    return ok == (p == ALLOWED ? calls : 0) ? 0 : 1; /* every call took its path */
}

int main(int argc, char **argv)
{
    size_t iters = 1000000, runs = 7, limits = 0, calls = 100000;
    const char *path = "refused";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--limits") == 0 && i + 1 < argc) limits = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--path") == 0 && i + 1 < argc) path = argv[++i];
        else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) calls = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_composite [--iters N] [--runs N]\n"
                            "       bench_composite --limits K --path PATH [--calls N]\n");
            return 2;
        }
    }
    if (limits) return count_mode(limits, path, calls);
    if (runs == 0 || iters < BATCH) return 2;
    printf("%-18s %-9s %9s %9s %9s %11s %9s  %s\n", "limits", "path", "single", "sum of 3",
           "composite", "comp/single", "comp/sum", "<= 3.5x");
    unsigned met = 0, rows = 0;
    for (size_t s = 0; s < NSETS; s++) {
        for (int p = 0; p < NPATHS; p++) {
            inst in[3];
            for (int m = 0; m < 3; m++) inst_make(&in[m], &sets[s], p != ALLOWED);
            double best[3] = {1e30, 1e30, 1e30};
            for (size_t r = 0; r < runs * (iters / BATCH); r++)
                for (int m = 0; m < 3; m++) {
                    double ns = run(&in[m], (enum mode)m, BATCH, (enum path)p);
                    if (ns < best[m]) best[m] = ns;
                }
            for (int m = 0; m < 3; m++) inst_free(&in[m]);
            const double ratio = best[2] / best[0];
            rows++;
            met += ratio <= TARGET;
            printf("%-18s %-9s %7.1fns %7.1fns %7.1fns %10.2fx %8.2fx  %s\n", sets[s].name,
                   path_name[p], best[0], best[1], best[2], ratio, best[2] / best[1],
                   ratio <= TARGET ? "met" : "missed");
        }
    }
    printf("target composite <= %.1fx single: met in %u of %u rows\n", TARGET, met, rows);
    return 0;
}
