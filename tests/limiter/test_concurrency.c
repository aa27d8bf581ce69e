/* test_concurrency.c -- many threads on one limiter (and on one table):
 * the decisions must stay exactly those of docs/decisions.md section 3 for some
 * order of the concurrent calls (section 5): no over-admission, no lost
 * permits, slightly out-of-order timestamps clamped to the latest.
 *
 * Time is always passed explicitly (the `_at` functions); nothing sleeps.
 * Threads are made once per test and reused across repetitions, released
 * together by a barrier (pool_run below), pinned to the cores in turn and
 * lined up once more by a short spin (gate) so that their calls really
 * overlap; each test prints how many did.  Every decision rule is checked
 * against the reference model (ref_model.h), never against the library.
 *
 *   test_frozen_time      (a) 2, 4 and 16 threads on one limiter of each of
 *                         the seven algorithm variants, every call at one
 *                         instant after some history.  The admitted total is
 *                         what the contract admits at that instant (exactly
 *                         with unit permits; within max_permits - 1 with
 *                         mixed ones), the counters match the threads'
 *                         tallies, and the whole outcome is linearizable:
 *                         see chain_check().
 *   test_moving_time      (b) the same, with time moving on a shared counter
 *                         that the threads advance, and stale (earlier)
 *                         timestamps on purpose.  Buckets: admitted within
 *                         [capacity + rate*T - (max_permits - 1), capacity +
 *                         rate*T], and exactly capacity + floor(rate*T) after
 *                         draining at T.  Windows: each algorithm's own upper
 *                         bound, and a lower bound derived in the comment
 *                         above moving_bounds().
 *   test_linearizable     2 threads x 6 calls at scattered times and
 *                         permits, every algorithm: some interleaving that
 *                         keeps each thread's program order and the real-time
 *                         order of non-overlapping calls reproduces every
 *                         field of every result on the reference model
 *                         (exhaustive search, at most C(12,6) = 924).
 *   test_one_of_sixteen   (c) 16 threads each asking once at (nearly) the
 *                         same instant on a limit of 1: exactly one admitted,
 *                         10^5 repetitions, a fresh limiter for each.
 *   test_table_frozen     8 threads over one table of 1000 keys, random
 *                         keys, all at one frozen instant per phase:
 *                         per key the same chain check as (a) (so admitted <=
 *                         what the key's limiter has at that instant), and
 *                         the table's counters match the threads' tallies.
 *   test_table_hot_key    3 threads on one key of a one-shard table (150
 *                         other keys held, which thread 0 also removes and
 *                         makes again: index shifts, entries reused), mixing
 *                         admissions (p = 1), refusals that read (p = 1 once
 *                         empty, p = cap + 1) and probes, many phases: per
 *                         phase the chain check,
 *                         and the admitted count is exactly the contract's:
 *                         min(room at the instant, unit requests).
 *
 * Environment:
 *   SLUICE_STRESS_SCALE   multiplies every repetition count (default 1.0;
 *                         0.1 under ThreadSanitizer).
 *   SLUICE_TEST_SEED      the random seed (default: from the clock); printed
 *                         at start so that a failing run's parameters can be
 *                         reproduced (the interleavings cannot).
 */
#if defined(__linux__)
#define _GNU_SOURCE /* pthread_setaffinity_np, sched_getaffinity */
#else
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sluice.h>

#include "limiter/limiter.h" /* sluice__limiter_raw */
#include "ref_model.h"
#include "testutil.h"

#define SEC 1000000000ULL
#define MAX_THREADS 16
#define ULL(x) ((unsigned long long)(x))

static double g_scale = 1.0;
static uint64_t g_seed;

static double secs_since(uint64_t t0) { return (double)(sluice_now_ns() - t0) / 1e9; }

/* ---- random numbers (splitmix64, tests/testutil.h; one state per thread) */

/* uniform in [lo, hi] */
static uint64_t rng_range(uint64_t *s, uint64_t lo, uint64_t hi)
{
    return lo + tu_splitmix64_below(s, hi - lo + 1);
}

/* A seed for (test, repetition, thread). */
static uint64_t seed_for(uint64_t test, uint64_t rep, uint64_t thread)
{
    uint64_t s = g_seed ^ (test * 0x100000001b3ULL);
    s ^= tu_splitmix64(&s) + rep * 0x9e3779b97f4a7c15ULL;
    s ^= tu_splitmix64(&s) + thread * 0xc2b2ae3d27d4eb4fULL;
    return s;
}

/* ---- algorithm variants and random limits -------------------------------- */

typedef struct variant {
    const char *name;
    ref_alg alg;
    bool nodelay;
} variant;

static const variant variants[] = {
    {"fixed-window", REF_FIXED_WINDOW, false},
    {"sliding-log", REF_SLIDING_LOG, false},
    {"sliding-wheel", REF_SLIDING_WHEEL, false},
    {"sliding-approx", REF_SLIDING_APPROX, false},
    {"token-bucket", REF_TOKEN_BUCKET, false},
    {"leaky-bucket", REF_LEAKY_BUCKET, false}, /* shaper */
    {"leaky-bucket", REF_LEAKY_BUCKET, true},  /* nodelay: meter */
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static bool alg_is_bucket(ref_alg a) { return a == REF_TOKEN_BUCKET || a == REF_LEAKY_BUCKET; }

/* One limiter's parameters, as a spec for the library and as ref_params for
 * the model, made from the same numbers. */
typedef struct cfg {
    const variant *v;
    uint64_t limit;     /* L */
    uint64_t period_ns; /* W */
    uint64_t cap;       /* the most one request can get: B, C or L */
    uint64_t slots;     /* sliding-wheel N, else 0 */
    char spec[160];
    ref_params rp;
} cfg;

static void cfg_make(cfg *c, const variant *v, uint64_t limit, uint64_t period_ns,
                     uint64_t cap, uint64_t slots)
{
    memset(c, 0, sizeof *c);
    c->v = v;
    c->limit = limit;
    c->period_ns = period_ns;
    c->cap = alg_is_bucket(v->alg) ? cap : limit;
    c->slots = v->alg == REF_SLIDING_WHEEL ? slots : 0;
    char opt[64] = "";
    if (v->alg == REF_SLIDING_WHEEL)
        snprintf(opt, sizeof opt, " slots=%llu", ULL(slots));
    else if (v->alg == REF_TOKEN_BUCKET)
        snprintf(opt, sizeof opt, " burst=%llu", ULL(cap));
    else if (v->alg == REF_LEAKY_BUCKET)
        snprintf(opt, sizeof opt, " capacity=%llu%s", ULL(cap), v->nodelay ? " nodelay" : "");
    snprintf(c->spec, sizeof c->spec, "%s %llu/%lluns%s", v->name, ULL(limit), ULL(period_ns),
             opt);
    c->rp.alg = v->alg;
    c->rp.limit = limit;
    c->rp.period_ns = period_ns;
    c->rp.capacity = alg_is_bucket(v->alg) ? cap : 0;
    c->rp.slots = c->slots;
    c->rp.nodelay = v->nodelay;
}

/* Random L in [lmin, lmax], capacity in [cmin, cmax], W log-uniform-ish in
 * [wmin, wmax] but never below L (the contract's rates stop at 1/ns);
 * sliding-wheel gets 1..64 slots and a W they divide. */
static void cfg_random(cfg *c, const variant *v, uint64_t *rs, uint64_t lmin, uint64_t lmax,
                       uint64_t cmin, uint64_t cmax, uint64_t wmin, uint64_t wmax)
{
    static const uint64_t pow10[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};
    uint64_t limit = rng_range(rs, lmin, lmax);
    uint64_t cap = rng_range(rs, cmin, cmax);
    uint64_t w = rng_range(rs, 1000, 9999) * pow10[tu_splitmix64_below(rs, 8)];
    if (w < wmin) w = wmin + tu_splitmix64_below(rs, wmin);
    if (w > wmax) w = wmax - tu_splitmix64_below(rs, wmax / 2);
    if (w < limit) w = limit;
    uint64_t slots = 0;
    if (v->alg == REF_SLIDING_WHEEL) {
        slots = rng_range(rs, 1, 64);
        if (w < slots) w = slots;
        w -= w % slots;
    }
    cfg_make(c, v, limit, w, cap, slots);
}

static sluice_limiter *mk(const char *spec)
{
    char err[256];
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    if (!l) fail_msg("%s: %s", spec, err);
    return l;
}

static ref_model *mk_ref(const cfg *c)
{
    ref_model *m = ref_model_new(&c->rp);
    if (!m) fail_msg("ref_model_new refused %s", c->spec);
    return m;
}

/* ---- errors seen by worker threads (tu_errs, tests/testutil.h) ---------- */

static void terr_check(const tu_errs *e, unsigned n, const char *what)
{
    for (unsigned i = 0; i < n; i++)
        if (e[i].n) fail_msg("%s: thread %u: %u bad results; first: %s", what, i, e[i].n, e[i].msg);
}

/* The checks every single result must pass on its own, whatever the
 * interleaving: a probe is allowed with no wait; an allowed request has no
 * retry and at most cap - p left; a refused one has retry > 0 (-1 only when
 * p > cap) and fewer than p left; only the leaky-bucket shaper waits. */
static void check_one(tu_errs *e, const cfg *c, uint64_t p, uint64_t t, bool ok,
                      const sluice_result *r)
{
    const bool shaper = c->v->alg == REF_LEAKY_BUCKET && !c->v->nodelay;
    if (r->error != 0)
        tu_errs_add(e, "%s: p=%llu t=%llu: error %d", c->spec, ULL(p), ULL(t), r->error);
    if (ok != r->allowed) tu_errs_add(e, "%s: return value %d but res.allowed %d", c->spec, ok, r->allowed);
    if (r->remaining > c->cap)
        tu_errs_add(e, "%s: p=%llu: remaining %llu > %llu", c->spec, ULL(p), ULL(r->remaining),
                 ULL(c->cap));
    if (p == 0) {
        if (!ok || r->wait_ns != 0 || r->retry_after_ns != 0)
            tu_errs_add(e, "%s: probe: allowed %d wait %llu retry %lld", c->spec, ok, ULL(r->wait_ns),
                     (long long)r->retry_after_ns);
    } else if (ok && p > c->cap) {
        tu_errs_add(e, "%s: allowed p=%llu > %llu, more than it can ever grant", c->spec, ULL(p),
                 ULL(c->cap));
    } else if (ok) {
        /* water before <= C - p, and the wait is that over the rate */
        uint64_t wmax = shaper ? ((c->cap - p) * c->period_ns + c->limit - 1) / c->limit : 0;
        if (r->retry_after_ns != 0 || r->remaining > c->cap - p || r->wait_ns > wmax)
            tu_errs_add(e, "%s: allowed p=%llu t=%llu: remaining %llu retry %lld wait %llu", c->spec,
                     ULL(p), ULL(t), ULL(r->remaining), (long long)r->retry_after_ns,
                     ULL(r->wait_ns));
    } else {
        bool never = p > c->cap;
        if (r->remaining >= p || r->wait_ns != 0 || (never ? r->retry_after_ns != -1
                                                            : r->retry_after_ns <= 0))
            tu_errs_add(e, "%s: refused p=%llu t=%llu: remaining %llu retry %lld wait %llu", c->spec,
                     ULL(p), ULL(t), ULL(r->remaining), (long long)r->retry_after_ns,
                     ULL(r->wait_ns));
    }
}

/* ---- a pool of threads reused across repetitions ------------------------ */

/* The cores this process may run on.  The workers are pinned to them in
 * turn: left to itself the kernel tends to queue the threads a barrier
 * wakes on the waker's core, where they run one after the other and never
 * race (seen on a 2-core machine: 0% of the calls overlapped).  Pinning is
 * best effort; without it (not Linux, or refused) the tests still check
 * the same things, with less overlap. */
static unsigned g_ncpu = 1;
#if defined(__linux__)
static int g_cpus[CPU_SETSIZE];

static void cpus_init(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    g_ncpu = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int i = 0; i < CPU_SETSIZE; i++)
            if (CPU_ISSET(i, &set)) g_cpus[g_ncpu++] = i;
    if (g_ncpu == 0) g_ncpu = 1;
}

static void pin_self(unsigned k)
{
    if (g_ncpu < 2) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(g_cpus[k % g_ncpu], &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
#else
static void cpus_init(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    g_ncpu = n >= 1 && n <= 4096 ? (unsigned)n : 1;
}

static void pin_self(unsigned k) { (void)k; }
#endif

typedef void (*job_fn)(void *ctx, unsigned self, size_t rep);

typedef struct pool pool;
typedef struct worker {
    pool *p;
    unsigned self;
} worker;

struct pool {
    unsigned n;
    pthread_t th[MAX_THREADS];
    worker w[MAX_THREADS];
    pthread_barrier_t bar; /* n workers + the main thread */
    /* the job: written by the main thread only between runs (the barrier
     * orders those writes before the workers' reads) */
    job_fn fn;
    void *ctx;
    size_t reps;
    bool sync_each;
    bool quit;
};

static void *pool_main(void *arg)
{
    worker *w = arg;
    pool *p = w->p;
    pin_self(w->self);
    for (;;) { /* ends when the main thread sets quit (pool_free) */
        pthread_barrier_wait(&p->bar);
        if (p->quit) break;
        for (size_t k = 0; k < p->reps; k++) {
            if (p->sync_each) pthread_barrier_wait(&p->bar);
            p->fn(p->ctx, w->self, k);
        }
        pthread_barrier_wait(&p->bar);
    }
    return NULL;
}

static pool *pool_new(unsigned n)
{
    assert_true(n >= 1 && n <= MAX_THREADS);
    pool *p = calloc(1, sizeof *p);
    assert_non_null(p);
    p->n = n;
    assert_int_equal(pthread_barrier_init(&p->bar, NULL, n + 1), 0);
    for (unsigned i = 0; i < n; i++) {
        p->w[i] = (worker){p, i};
        assert_int_equal(pthread_create(&p->th[i], NULL, pool_main, &p->w[i]), 0);
    }
    return p;
}

/* Run fn(ctx, thread, k) for k = 0 .. reps-1 on every thread, and return
 * when all are done.  The threads start together (a barrier); with
 * sync_each, every repetition starts with a barrier of its own, so that
 * repetition k+1 begins only when all threads have finished k. */
static void pool_run(pool *p, job_fn fn, void *ctx, size_t reps, bool sync_each)
{
    p->fn = fn;
    p->ctx = ctx;
    p->reps = reps;
    p->sync_each = sync_each;
    pthread_barrier_wait(&p->bar);
    if (sync_each)
        for (size_t k = 0; k < reps; k++) pthread_barrier_wait(&p->bar);
    pthread_barrier_wait(&p->bar);
}

static void pool_free(pool *p)
{
    p->quit = true;
    pthread_barrier_wait(&p->bar);
    for (unsigned i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_barrier_destroy(&p->bar);
    free(p);
}

/* A start line inside a job.  The barrier wakes the threads one after the
 * other, and a woken thread can finish all its calls before the next one
 * runs; so each thread, once it reaches the line, spins until as many
 * threads as there are cores have reached it (waiting for more would only
 * spin while they cannot run), and those then start their calls together.
 * The spin is bounded by `spins` (on a loaded machine the others may not get
 * a core for a while: then it goes on alone). */
static void gate(_Atomic unsigned *arrive, unsigned n, unsigned spins)
{
    unsigned need = n < g_ncpu ? n : g_ncpu;
    atomic_fetch_add(arrive, 1);
    for (unsigned i = 0; i < spins && atomic_load(arrive) < need; i++) {
    }
}

/* ---- the frozen-instant linearizability check --------------------------- */

/* One call as a thread saw it. */
typedef struct call_rec {
    uint64_t t, p;
    uint64_t wait_ns, remaining;
    int64_t retry;
    uint32_t thread, idx; /* program order: idx-th call of `thread` */
    uint32_t key;         /* table: the key's index */
    bool allowed;
    uint64_t pos;         /* chain_check's order */
} call_rec;

static int cmp_admitted(const void *a, const void *b)
{
    const call_rec *x = *(const call_rec *const *)a, *y = *(const call_rec *const *)b;
    return x->remaining < y->remaining ? 1 : x->remaining > y->remaining ? -1 : 0;
}

static int cmp_replay(const void *a, const void *b)
{
    const call_rec *x = *(const call_rec *const *)a, *y = *(const call_rec *const *)b;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Is this set of concurrent calls, all at one instant (their times are that
 * instant or earlier, and the limiter has already seen the instant), the
 * outcome of some sequential order of them, decided by the contract?
 *
 * At one instant every algorithm has a single "room" (what `remaining`
 * reports, rounded down): an admitted request for p lowers it by exactly p,
 * a refusal or a probe leaves it as it is, and each call reports the room
 * after it.  So in any valid order the admitted calls are the ones whose
 * `remaining` values, sorted in decreasing order, form the chain
 * room0 - p1, room0 - p1 - p2, ... (all distinct), and every refusal or
 * probe reports one of the chain's levels.  That fixes the order up to
 * calls that change nothing; each thread's calls must come in its program
 * order.  Then the calls, replayed in that order into the model, must
 * reproduce every field (allowed, remaining, retry_after_ns, wait_ns).
 *
 * `m` is the model with the limiter's state just before the calls, its
 * latest time already the instant; room0 is what it reports there.
 * `c` holds each thread's calls together, in program order.  Returns true,
 * or false with the reason in `why`.  Consumes the model's state. */
static bool chain_check(ref_model *m, uint64_t room0, call_rec *c, size_t n, char *why,
                        size_t whylen)
{
    bool ok = false;
    call_rec **adm = malloc((n + 1) * sizeof *adm);
    call_rec **all = malloc((n + 1) * sizeof *all);
    uint64_t *level = malloc((n + 1) * sizeof *level);
    assert_true(adm && all && level);
    size_t na = 0;
    for (size_t i = 0; i < n; i++) {
        all[i] = &c[i];
        if (c[i].allowed && c[i].p > 0) adm[na++] = &c[i];
    }
    qsort(adm, na, sizeof *adm, cmp_admitted);
    level[0] = room0;
    for (size_t j = 0; j < na; j++) {
        call_rec *a = adm[j];
        if (a->p > level[j] || a->remaining != level[j] - a->p) {
            snprintf(why, whylen,
                     "admitted call (thread %u #%u p=%llu remaining=%llu) does not continue the "
                     "chain at level %llu (room before the calls %llu, %zu admitted so far)",
                     a->thread, a->idx, ULL(a->p), ULL(a->remaining), ULL(level[j]), ULL(room0), j);
            goto out;
        }
        level[j + 1] = a->remaining;
        a->pos = 2 * (j + 1);
    }
    for (size_t i = 0; i < n; i++) {
        if (c[i].allowed && c[i].p > 0) continue;
        /* level[] decreases strictly: bisect for the call's remaining */
        size_t lo = 0, hi = na + 1;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (level[mid] > c[i].remaining) lo = mid + 1;
            else hi = mid;
        }
        if (lo > na || level[lo] != c[i].remaining) {
            snprintf(why, whylen,
                     "%s call (thread %u #%u p=%llu) reports remaining=%llu, which no order gives "
                     "(room before %llu, %zu admitted)",
                     c[i].p == 0 ? "probe" : "refused", c[i].thread, c[i].idx, ULL(c[i].p),
                     ULL(c[i].remaining), ULL(room0), na);
            goto out;
        }
        c[i].pos = 2 * lo + 1;
    }
    for (size_t i = 1; i < n; i++)
        if (c[i].thread == c[i - 1].thread && c[i].pos < c[i - 1].pos) {
            snprintf(why, whylen,
                     "thread %u: call #%u (p=%llu allowed=%d remaining=%llu) saw less room than its "
                     "later call #%u (p=%llu allowed=%d remaining=%llu)",
                     c[i].thread, c[i - 1].idx, ULL(c[i - 1].p), c[i - 1].allowed,
                     ULL(c[i - 1].remaining), c[i].idx, ULL(c[i].p), c[i].allowed,
                     ULL(c[i].remaining));
            goto out;
        }
    qsort(all, n, sizeof *all, cmp_replay);
    for (size_t i = 0; i < n; i++) {
        const call_rec *x = all[i];
        ref_result r;
        ref_model_decide(m, x->p, x->t, &r);
        if (r.allowed != x->allowed || r.remaining != x->remaining ||
            r.retry_after_ns != x->retry || r.wait_ns != x->wait_ns) {
            snprintf(why, whylen,
                     "replayed in chain order, call %zu (thread %u #%u p=%llu t=%llu) gave "
                     "allowed=%d remaining=%llu retry=%lld wait=%llu; the model says allowed=%d "
                     "remaining=%llu retry=%lld wait=%llu",
                     i, x->thread, x->idx, ULL(x->p), ULL(x->t), x->allowed, ULL(x->remaining),
                     (long long)x->retry, ULL(x->wait_ns), r.allowed, ULL(r.remaining),
                     (long long)r.retry_after_ns, ULL(r.wait_ns));
            goto out;
        }
    }
    ok = true;
out:
    free(adm);
    free(all);
    free(level);
    return ok;
}

/* The library's and the model's decision of one serial call must agree. */
static void serial_call(const cfg *c, sluice_limiter *l, ref_model *m, uint64_t p, uint64_t t)
{
    sluice_result r;
    ref_result e;
    bool ok = sluice_try_acquire_at(l, p, t, &r);
    ref_model_decide(m, p, t, &e);
    if (ok != e.allowed || r.remaining != e.remaining || r.retry_after_ns != e.retry_after_ns ||
        r.wait_ns != e.wait_ns)
        fail_msg("%s: serial p=%llu t=%llu: got allowed=%d remaining=%llu retry=%lld wait=%llu, "
                 "model allowed=%d remaining=%llu retry=%lld wait=%llu",
                 c->spec, ULL(p), ULL(t), ok, ULL(r.remaining), (long long)r.retry_after_ns,
                 ULL(r.wait_ns), e.allowed, ULL(e.remaining), (long long)e.retry_after_ns,
                 ULL(e.wait_ns));
}

typedef struct tally {
    uint64_t req_ok, req_no, perm_ok, perm_no, probes;
} tally;

static void tally_add(tally *t, uint64_t p, bool ok)
{
    if (p == 0) t->probes++;
    else if (ok) t->req_ok++, t->perm_ok += p;
    else t->req_no++, t->perm_no += p;
}

static void tally_sum(tally *sum, const tally *t)
{
    sum->req_ok += t->req_ok;
    sum->req_no += t->req_no;
    sum->perm_ok += t->perm_ok;
    sum->perm_no += t->perm_no;
    sum->probes += t->probes;
}

/* The counters grew by exactly what the threads counted. */
static void check_stats(const char *what, const sluice_stats *before, const sluice_stats *after,
                        const tally *t)
{
    if (after->requests_allowed - before->requests_allowed != t->req_ok ||
        after->requests_denied - before->requests_denied != t->req_no ||
        after->permits_allowed - before->permits_allowed != t->perm_ok ||
        after->permits_denied - before->permits_denied != t->perm_no ||
        after->probes - before->probes != t->probes)
        fail_msg("%s: counters grew by allowed %llu/%llu permits, denied %llu/%llu, probes %llu; "
                 "the threads counted %llu/%llu, %llu/%llu, %llu",
                 what, ULL(after->requests_allowed - before->requests_allowed),
                 ULL(after->permits_allowed - before->permits_allowed),
                 ULL(after->requests_denied - before->requests_denied),
                 ULL(after->permits_denied - before->permits_denied),
                 ULL(after->probes - before->probes), ULL(t->req_ok), ULL(t->perm_ok),
                 ULL(t->req_no), ULL(t->perm_no), ULL(t->probes));
}

static const unsigned thread_counts[] = {2, 4, 16};
#define N_THREAD_COUNTS (sizeof thread_counts / sizeof thread_counts[0])

/* ---- (a) frozen time ----------------------------------------------------- */

typedef struct frozen_ctx {
    const cfg *c;
    sluice_limiter *lim;
    uint64_t t;     /* the instant; the limiter has admitted at it already
                     * (else t_old == t and early == 1) */
    uint64_t t_old; /* an earlier time some calls pass (clamped to t) */
    uint64_t early; /* calls pass up to early - 1 ns before t (clamped) */
    size_t calls;   /* per thread; rec has room for stride */
    size_t stride;
    bool unit;      /* permits 0..1, else 0..3 */
    uint64_t seed;
    unsigned nthreads;
    call_rec *rec;
    _Atomic unsigned arrive;  /* gate() */
    _Atomic unsigned running; /* threads inside their calls */
    uint64_t busy[MAX_THREADS]; /* calls made while another thread ran */
    uint64_t busy_total, calls_total;
    tu_errs err[MAX_THREADS];
} frozen_ctx;

static void frozen_job(void *vc, unsigned self, size_t rep)
{
    (void)rep;
    frozen_ctx *c = vc;
    uint64_t rs = seed_for(1, c->seed, self);
    call_rec *out = c->rec + (size_t)self * c->stride;
    uint64_t busy = 0;
    gate(&c->arrive, c->nthreads, 200000);
    atomic_fetch_add(&c->running, 1);
    for (size_t i = 0; i < c->calls; i++) {
        uint64_t r = tu_splitmix64(&rs);
        uint64_t p = (r & 7) == 0 ? 0 : c->unit ? 1 : 1 + (r >> 3) % 3;
        uint64_t t = c->t;
        busy += atomic_load_explicit(&c->running, memory_order_relaxed) > 1;
        switch ((r >> 8) & 7) {
        case 0: t = c->t - (r >> 16) % c->early; break; /* a little earlier */
        case 1: t = c->t_old; break;                /* much earlier */
        default: break;
        }
        sluice_result res;
        bool ok = sluice_try_acquire_at(c->lim, p, t, &res);
        check_one(&c->err[self], c->c, p, t, ok, &res);
        out[i] = (call_rec){.t = t, .p = p, .wait_ns = res.wait_ns, .remaining = res.remaining,
                            .retry = res.retry_after_ns, .thread = self, .idx = (uint32_t)i,
                            .allowed = ok};
    }
    atomic_fetch_sub(&c->running, 1);
    c->busy[self] = busy;
}

/* One repetition: a fresh limiter with some history, then the threads at
 * one instant. */
static void frozen_rep(pool *pl, frozen_ctx *fc, const variant *v, uint64_t rep, bool unit)
{
    uint64_t rs = seed_for(2, rep, 0);
    cfg c;
    cfg_random(&c, v, &rs, 10, 200, 4, 200, 1000, 10 * SEC);
    sluice_limiter *l = mk(c.spec);
    ref_model *m = mk_ref(&c);
    const uint64_t W = c.period_ns;
    uint64_t t = rng_range(&rs, 4 * W + 1000, UINT64_C(1) << 62);

    /* history: up to 40 serial calls at times in [t - 2W, t], in random
     * order (so some are clamped), taking up to about half the room */
    unsigned h = (unsigned)tu_splitmix64_below(&rs, 41);
    uint64_t taken = 0;
    for (unsigned i = 0; i < h && taken < c.cap / 2; i++) {
        uint64_t p = tu_splitmix64_below(&rs, 4);
        uint64_t th = t - tu_splitmix64_below(&rs, 2 * W + 1);
        serial_call(&c, l, m, p, th);
        taken += p;
    }
    /* the limiter admits at the instant (only an admission moves its
     * clock), so that every thread's call, earlier ones too, is at it; when
     * nothing fits at t, the threads call at t only */
    ref_result e;
    sluice_result r;
    bool at_t = ref_model_would_allow(m, 1, t);
    if (at_t) serial_call(&c, l, m, 1, t);
    ref_model_decide(m, 0, t, &e);
    assert_true(sluice_try_acquire_at(l, 0, t, &r));
    if (r.remaining != e.remaining)
        fail_msg("%s: probe at %llu: remaining %llu, model %llu", c.spec, ULL(t),
                 ULL(r.remaining), ULL(e.remaining));
    const uint64_t room0 = e.remaining;
    sluice_stats before, after;
    sluice_limiter_stats_get(l, &before);

    /* enough calls that the demand exceeds the room */
    fc->c = &c;
    fc->lim = l;
    fc->t = t;
    fc->t_old = at_t ? t - rng_range(&rs, 1000, 2 * W) : t;
    fc->early = at_t ? 1000 : 1;
    fc->calls = (2 * room0 + 16) / pl->n + 4;
    assert_true(fc->calls <= fc->stride);
    fc->unit = unit;
    fc->seed = tu_splitmix64(&rs);
    fc->nthreads = pl->n;
    atomic_store(&fc->arrive, 0);
    memset(fc->err, 0, sizeof fc->err);
    pool_run(pl, frozen_job, fc, 1, false);
    terr_check(fc->err, pl->n, "frozen time");

    /* compact the threads' records: thread-major, program order */
    size_t n = 0;
    tally tl = {0};
    for (unsigned k = 0; k < pl->n; k++) fc->busy_total += fc->busy[k];
    for (unsigned k = 0; k < pl->n; k++)
        for (size_t i = 0; i < fc->calls; i++) {
            call_rec *x = &fc->rec[(size_t)k * fc->stride + i];
            tally_add(&tl, x->p, x->allowed);
            fc->rec[n++] = *x;
        }
    fc->calls_total += n;
    const uint64_t requested = tl.perm_ok + tl.perm_no;
    const uint64_t maxp = unit ? 1 : 3;
    if (tl.perm_ok > room0)
        fail_msg("%s, %u threads: admitted %llu permits at one instant, the contract allows %llu",
                 c.spec, pl->n, ULL(tl.perm_ok), ULL(room0));
    if (tl.req_no > 0 ? tl.perm_ok + (maxp - 1) < room0 : tl.perm_ok != requested)
        fail_msg("%s, %u threads: admitted %llu permits of %llu asked at one instant with room "
                 "%llu (%llu refusals): permits were lost",
                 c.spec, pl->n, ULL(tl.perm_ok), ULL(requested), ULL(room0), ULL(tl.req_no));
    sluice_limiter_stats_get(l, &after);
    check_stats(c.spec, &before, &after, &tl);

    char why[640];
    if (!chain_check(m, room0, fc->rec, n, why, sizeof why))
        fail_msg("%s, %u threads, at %llu, %s permits: not linearizable: %s", c.spec, pl->n,
                 ULL(t), unit ? "unit" : "mixed", why);

    /* what is left is exactly the room minus what was admitted */
    assert_true(sluice_try_acquire_at(l, 0, t, &r));
    if (r.remaining != room0 - tl.perm_ok)
        fail_msg("%s: after the threads %llu remain, expected %llu - %llu", c.spec,
                 ULL(r.remaining), ULL(room0), ULL(tl.perm_ok));
    ref_model_free(m);
    sluice_limiter_free(l);
}

static void test_frozen_time(void **state)
{
    (void)state;
    const size_t reps = tu_scaled(150, g_scale);
    uint64_t t0 = sluice_now_ns();
    frozen_ctx *fc = calloc(1, sizeof *fc);
    assert_non_null(fc);
    fc->stride = (2 * 200 + 16) / 2 + 4;
    fc->rec = calloc(MAX_THREADS * fc->stride, sizeof *fc->rec);
    assert_non_null(fc->rec);
    size_t total = 0;
    for (size_t ti = 0; ti < N_THREAD_COUNTS; ti++) {
        pool *pl = pool_new(thread_counts[ti]);
        for (size_t vi = 0; vi < N_VARIANTS; vi++)
            for (size_t k = 0; k < reps; k++, total++)
                frozen_rep(pl, fc, &variants[vi], total, k % 2 == 1);
        pool_free(pl);
    }
    printf("[ conc     ] frozen time: %zu repetitions (%zu per algorithm and thread count), "
           "%.0f%% of %llu calls made while another thread was calling, %.2f s\n",
           total, reps, 100.0 * (double)fc->busy_total / (double)fc->calls_total,
           ULL(fc->calls_total), secs_since(t0));
    free(fc->rec);
    free(fc);
}

/* ---- (b) moving time ----------------------------------------------------- */

typedef struct moving_ctx {
    const cfg *c;
    sluice_limiter *lim;
    _Atomic uint64_t clock; /* simulated ns, advanced by the threads */
    uint64_t step_max;      /* S: each advance is 1 .. S */
    size_t calls;           /* per thread */
    bool unit;
    uint64_t seed;
    tally tl[MAX_THREADS];
    uint64_t nonprobe[MAX_THREADS];
    uint64_t t_max[MAX_THREADS];
    unsigned nthreads;
    _Atomic unsigned arrive;  /* gate() */
    _Atomic unsigned running; /* threads inside their calls */
    uint64_t busy[MAX_THREADS];
    tu_errs err[MAX_THREADS];
} moving_ctx;

#define STALE_RING 32

/* Each call: permits 0 (1/8), else 1 (unit) or 1..3.  Its time is one of
 *  - the clock after advancing it by 1..S (3/4 of the non-probe calls that
 *    are not stale): only a request for permits advances the clock, and it
 *    then uses the value its own advance produced;
 *  - the clock as it is (probes, and the other non-probe calls);
 *  - stale (1/16 of the time, then held for 1..6 calls): a value this
 *    thread read up to 32 calls before, as a thread preempted between
 *    reading the clock and asking.
 * moving_bounds() relies on exactly this. */
static void moving_job(void *vc, unsigned self, size_t rep)
{
    (void)rep;
    moving_ctx *c = vc;
    uint64_t rs = seed_for(3, c->seed, self);
    uint64_t ring[STALE_RING];
    size_t ring_n = 0;
    uint64_t held = 0;
    unsigned hold = 0;
    tally tl = {0};
    uint64_t nonprobe = 0, t_max = 0, busy = 0;
    gate(&c->arrive, c->nthreads, 200000);
    atomic_fetch_add(&c->running, 1);
    for (size_t i = 0; i < c->calls; i++) {
        uint64_t r = tu_splitmix64(&rs);
        busy += atomic_load_explicit(&c->running, memory_order_relaxed) > 1;
        uint64_t p = (r & 7) == 0 ? 0 : c->unit ? 1 : 1 + (r >> 3) % 3;
        uint64_t t;
        if (hold > 0) {
            t = held;
            hold--;
        } else if (ring_n > 0 && ((r >> 8) & 15) == 0) {
            size_t back = (size_t)((r >> 16) % (ring_n < STALE_RING ? ring_n : STALE_RING));
            held = t = ring[(ring_n - 1 - back) % STALE_RING];
            hold = (unsigned)((r >> 24) % 6);
        } else {
            if (p > 0 && ((r >> 12) & 3) != 0) {
                uint64_t step = 1 + (r >> 32) % c->step_max;
                t = atomic_fetch_add(&c->clock, step) + step;
            } else {
                t = atomic_load(&c->clock);
            }
            ring[ring_n++ % STALE_RING] = t;
        }
        sluice_result res;
        bool ok = sluice_try_acquire_at(c->lim, p, t, &res);
        check_one(&c->err[self], c->c, p, t, ok, &res);
        tally_add(&tl, p, ok);
        nonprobe += p > 0;
        if (t > t_max) t_max = t;
    }
    atomic_fetch_sub(&c->running, 1);
    c->busy[self] = busy;
    c->tl[self] = tl;
    c->nonprobe[self] = nonprobe;
    c->t_max[self] = t_max;
}

/* The bounds of one moving-time run.
 *
 * Setting: the main thread's request for 1 permit at t0 (admitted: the
 * limiter is fresh), then n threads as in moving_job(), then T = the clock's
 * final value (every advance's value was used by the request that made it,
 * so T is the latest time the limiter saw).  A is every permit admitted from
 * t0 to T, the main thread's included; P = the largest request (1 or 3).
 *
 * The jump lemma.  Order the requests for permits (p > 0) by the order the
 * limiter decided them (it is linearizable: that is what is being tested),
 * and let E_i be the effective (clamped) time of the i-th: the largest time
 * any call up to it passed.  Then E_{i+1} <= E_i + g, g = n*S.  Proof: the
 * clock's value read by call i+1 exceeds E_i only through advances whose
 * own calls had not been decided by call i; an advance is made only by a
 * request for permits, so those calls are call i+1 or later ones, and each
 * thread has at most one call in progress: at most n advances of at most S.
 * Probes and stale or unadvanced reads add nothing.  Consequently any span
 * of effective times of length k*g inside [t0, T] holds at least k requests
 * for permits.  And whenever the room (what `remaining` reports) is >= P,
 * the next request for permits is admitted and takes >= 1.
 *
 * Buckets (capacity B, rate r = L/W; S is chosen with g*r <= 1/4):
 * between two consecutive requests for permits the bucket gains at most
 * g*r <= 1/4 of a permit.  After t0 it holds B - 1; by induction it never
 * reaches B again (an admission takes >= 1 > 1/4; after a refusal it holds
 * < P <= B - 1), so the cap min(B, ...) never cuts (for the leaky bucket:
 * the water never runs dry), and A + (what is left at T) = B + r*(T - t0)
 * exactly.  Draining at T with unit requests takes floor of what is left,
 * so  A + drained == B + floor(L*(T - t0)/W)  exactly.  Before the drain:
 * once the room is below P (it is after (4/3)B + 2 requests for permits,
 * each lowering it by >= 3/4 while it is >= P) it stays below P: an
 * admission at room < P + 1/4 leaves < P - 3/4, a refusal leaves < P.  So
 * B + floor(r(T - t0)) - (P - 1) <= A <= B + floor(r(T - t0)).
 *
 * Fixed window (t0 = k0*W, S with g <= W/(4L)): K = windows from t0's to
 * T's.  Each holds <= L, so A <= K*L.  A window k before T's holds >= 4L - 1
 * > L requests for permits; if it ended with <= L - P admitted, each of
 * them found room >= P and was admitted: more than L, impossible.  So it
 * holds >= L - P + 1, and after draining at T the last holds L:
 * A + drained >= (K - 1)(L - P + 1) + L  (== K*L with unit permits).
 *
 * Sliding log and wheel: any W consecutive ns (for the wheel: N consecutive
 * slots) hold <= L, so A <= L * ceil(span / W).  Lower: take any interval
 * I = [a, a + W + L*g] inside [t0, T].  If I held <= L - P admitted, every
 * request in J = [a + W, a + W + L*g] (there are >= L) would find room >= P,
 * since its window (e - W, e] lies inside I (the wheel's window is inside
 * (e - W, e] too), and be admitted: >= L in I, a contradiction.  So each of
 * the m = floor((T - t0 + 1) / (W + L*g + 1)) disjoint such intervals holds
 * >= L - P + 1: A >= m(L - P + 1).  With g <= W/(4L), L*g <= W/4.
 *
 * Sliding approx (t0 = k0*W, S with L(L+1)g <= W/2): cur <= est <= L, so a
 * window holds <= L and A <= K*L.  For a window k before T's, its last
 * y = (L+1)g ns hold >= L requests for permits, at which est <= prev*y/W +
 * c_k <= L*y/W + c_k <= 1/2 + c_k.  If c_k <= L - P - 1/2 all of them would
 * be admitted, more than L.  So c_k >= L - P and A >= (K - 1)(L - P).
 */
typedef struct bounds {
    uint64_t lo, hi;                 /* for A, before the drain */
    uint64_t lo_drained, hi_drained; /* for A + drained */
} bounds;

static bounds moving_bounds(const cfg *c, unsigned n, uint64_t S, uint64_t P, uint64_t t0,
                            uint64_t T)
{
    const uint64_t L = c->limit, W = c->period_ns, g = n * S, span = T - t0 + 1;
    bounds b = {0, 0, 0, 0};
    switch (c->v->alg) {
    case REF_TOKEN_BUCKET:
    case REF_LEAKY_BUCKET: {
        uint64_t full = c->cap + L * (T - t0) / W;
        b.hi = b.hi_drained = b.lo_drained = full;
        b.lo = full - (P - 1);
        break;
    }
    case REF_FIXED_WINDOW: {
        uint64_t K = T / W - t0 / W + 1;
        b.hi = b.hi_drained = K * L;
        b.lo = (K - 1) * (L - P + 1);
        b.lo_drained = b.lo + L;
        break;
    }
    case REF_SLIDING_APPROX: {
        uint64_t K = T / W - t0 / W + 1;
        b.hi = b.hi_drained = K * L;
        b.lo = b.lo_drained = (K - 1) * (L - P);
        break;
    }
    case REF_SLIDING_LOG:
    case REF_SLIDING_WHEEL: {
        uint64_t chunks;
        if (c->v->alg == REF_SLIDING_LOG) {
            chunks = (span + W - 1) / W;
        } else {
            uint64_t tick = W / c->slots;
            chunks = (T / tick - t0 / tick + 1 + c->slots - 1) / c->slots;
        }
        b.hi = b.hi_drained = chunks * L;
        b.lo = b.lo_drained = span / (W + L * g + 1) * (L - P + 1);
        break;
    }
    }
    return b;
}

typedef struct moving_sum {
    size_t reps;
    uint64_t windows; /* W-long spans run through, summed */
    uint64_t admitted;
    uint64_t busy, calls;
} moving_sum;

static void moving_rep(pool *pl, moving_ctx *mc, const variant *v, uint64_t rep, bool unit,
                       size_t calls_total, moving_sum *sum)
{
    uint64_t rs = seed_for(4, rep, 0);
    const unsigned n = pl->n;
    const uint64_t P = unit ? 1 : 3;
    cfg c;
    if (v->alg == REF_SLIDING_APPROX)
        cfg_random(&c, v, &rs, P + 2, 8, 0, 0, 100000, 10 * SEC);
    else if (alg_is_bucket(v->alg))
        cfg_random(&c, v, &rs, 5, 40, P + 1, 60, 100000, 10 * SEC);
    else
        cfg_random(&c, v, &rs, P + 2, 40, 0, 0, 100000, 10 * SEC);
    const uint64_t L = c.limit, W = c.period_ns;
    /* S: see moving_bounds() */
    uint64_t S = v->alg == REF_SLIDING_APPROX ? W / (2 * n * L * (L + 1)) : W / (4 * n * L);
    assert_true(S >= 1);
    uint64_t t0 = tu_splitmix64_below(&rs, UINT64_C(1) << 62);
    if (v->alg == REF_FIXED_WINDOW || v->alg == REF_SLIDING_APPROX) t0 -= t0 % W;

    sluice_limiter *l = mk(c.spec);
    sluice_result r;
    if (!sluice_try_acquire_at(l, 1, t0, &r)) fail_msg("%s: the first request was refused", c.spec);
    sluice_stats before, after;
    sluice_limiter_stats_get(l, &before);

    mc->c = &c;
    mc->lim = l;
    atomic_store(&mc->clock, t0);
    mc->step_max = S;
    mc->calls = calls_total / n;
    mc->unit = unit;
    mc->seed = tu_splitmix64(&rs);
    mc->nthreads = n;
    atomic_store(&mc->arrive, 0);
    memset(mc->err, 0, sizeof mc->err);
    pool_run(pl, moving_job, mc, 1, false);
    terr_check(mc->err, n, "moving time");

    const uint64_t T = atomic_load(&mc->clock);
    tally tl = {0};
    uint64_t nonprobe = 0;
    for (unsigned k = 0; k < n; k++) {
        tally_sum(&tl, &mc->tl[k]);
        nonprobe += mc->nonprobe[k];
        sum->busy += mc->busy[k];
        sum->calls += mc->calls;
        assert_true(mc->t_max[k] <= T);
    }
    sluice_limiter_stats_get(l, &after);
    check_stats(c.spec, &before, &after, &tl);

    const uint64_t A = 1 + tl.perm_ok;
    bounds b = moving_bounds(&c, n, S, P, t0, T);
    /* the bucket's lower bound needs the demand to have emptied it */
    if (alg_is_bucket(v->alg)) assert_true(nonprobe >= 2 * c.cap + 4);
    if (A > b.hi || A < b.lo)
        fail_msg("%s, %u threads, %s permits, t0=%llu T=%llu (%.2f periods): admitted %llu, "
                 "the contract bounds it to [%llu, %llu]",
                 c.spec, n, unit ? "unit" : "mixed", ULL(t0), ULL(T), (double)(T - t0) / (double)W,
                 ULL(A), ULL(b.lo), ULL(b.hi));

    /* drain what is left at T with unit requests */
    uint64_t drained = 0, limit_iter = b.hi_drained + 10;
    bool refused = false;
    for (uint64_t i = 0; i < limit_iter && !refused; i++) {
        if (sluice_try_acquire_at(l, 1, T, &r)) drained++;
        else refused = true;
    }
    assert_true(refused);
    if (A + drained > b.hi_drained || A + drained < b.lo_drained ||
        (unit && v->alg == REF_FIXED_WINDOW && A + drained != b.hi_drained))
        fail_msg("%s, %u threads, %s permits, t0=%llu T=%llu: admitted %llu + %llu drained at T, "
                 "the contract says [%llu, %llu]",
                 c.spec, n, unit ? "unit" : "mixed", ULL(t0), ULL(T), ULL(A), ULL(drained),
                 ULL(b.lo_drained), ULL(b.hi_drained));
    sluice_stats fin;
    sluice_limiter_stats_get(l, &fin);
    tl.req_ok += drained, tl.perm_ok += drained, tl.req_no++, tl.perm_no++;
    check_stats(c.spec, &before, &fin, &tl);
    sluice_limiter_free(l);
    sum->reps++;
    sum->windows += (T - t0) / W;
    sum->admitted += A;
}

static void test_moving_time(void **state)
{
    (void)state;
    const size_t reps = tu_scaled(40, g_scale);
    const size_t calls_total = 24000;
    uint64_t t0 = sluice_now_ns();
    moving_ctx *mc = calloc(1, sizeof *mc);
    assert_non_null(mc);
    moving_sum sum = {0, 0, 0, 0, 0};
    size_t rep = 0;
    for (size_t ti = 0; ti < N_THREAD_COUNTS; ti++) {
        pool *pl = pool_new(thread_counts[ti]);
        for (size_t vi = 0; vi < N_VARIANTS; vi++)
            for (size_t k = 0; k < reps; k++, rep++)
                moving_rep(pl, mc, &variants[vi], rep, k % 2 == 1, calls_total, &sum);
        pool_free(pl);
    }
    free(mc);
    printf("[ conc     ] moving time: %zu repetitions (%zu per algorithm and thread count, %zu "
           "calls each), %.1f periods and %.0f permits admitted per repetition on average, "
           "%.0f%% of the calls made while another thread was calling, %.2f s\n",
           sum.reps, reps, calls_total, (double)sum.windows / (double)sum.reps,
           (double)sum.admitted / (double)sum.reps, 100.0 * (double)sum.busy / (double)sum.calls,
           secs_since(t0));
}

/* ---- linearizability, exhaustively: 2 threads x 6 calls ------------------
 *
 * Each call is stamped from one shared counter just before and just after
 * it (seq_cst read-modify-writes).  If call a's end stamp precedes call b's
 * start stamp, a's effect on the limiter happens-before b, so in any valid
 * order a comes first: this real-time order, and each thread's program
 * order, are the only constraints on the order searched for.  Small limits
 * (1..4), permits 0..3 (some above what can ever be granted), times
 * scattered over two periods in random order (most calls are out of order
 * for their thread and for the limiter), 0..3 serial calls before. */

#define LIN_CALLS 6

typedef struct lin_call {
    uint64_t t, p;
    uint64_t start, end; /* ticks of a shared counter around the call */
    bool allowed;
    uint64_t wait_ns, remaining;
    int64_t retry;
} lin_call;

typedef struct lin_ctx {
    sluice_limiter *lim;
    _Atomic unsigned arrive;
    _Atomic uint64_t seq;
    unsigned delay[2];
    lin_call calls[2][LIN_CALLS];
} lin_ctx;

static void lin_job(void *vc, unsigned self, size_t rep)
{
    (void)rep;
    lin_ctx *c = vc;
    /* line the two threads up, so that their calls overlap, then shift
     * them by a few dozen ns so that they interleave differently */
    gate(&c->arrive, 2, 20000);
    for (unsigned i = 0; i < c->delay[self]; i++) atomic_load_explicit(&c->seq, memory_order_relaxed);
    for (unsigned k = 0; k < LIN_CALLS; k++) {
        lin_call *x = &c->calls[self][k];
        sluice_result r;
        x->start = atomic_fetch_add(&c->seq, 1);
        x->allowed = sluice_try_acquire_at(c->lim, x->p, x->t, &r);
        x->end = atomic_fetch_add(&c->seq, 1);
        x->wait_ns = r.wait_ns;
        x->remaining = r.remaining;
        x->retry = r.retry_after_ns;
    }
}

typedef struct lin_search {
    const cfg *c;
    const lin_call (*calls)[LIN_CALLS];
    const uint64_t *hist_t, *hist_p;
    unsigned nhist;
    unsigned order[2 * LIN_CALLS]; /* thread of each position */
    unsigned leaves;
    bool found;
} lin_search;

/* Does this interleaving, decided by the model, give every recorded result? */
static bool lin_replay(const lin_search *s)
{
    ref_model *m = mk_ref(s->c);
    for (unsigned i = 0; i < s->nhist; i++) ref_model_decide(m, s->hist_p[i], s->hist_t[i], NULL);
    unsigned next[2] = {0, 0};
    bool ok = true;
    for (unsigned i = 0; i < 2 * LIN_CALLS && ok; i++) {
        const lin_call *x = &s->calls[s->order[i]][next[s->order[i]]++];
        ref_result r;
        ref_model_decide(m, x->p, x->t, &r);
        ok = r.allowed == x->allowed && r.remaining == x->remaining &&
             r.retry_after_ns == x->retry && r.wait_ns == x->wait_ns;
    }
    ref_model_free(m);
    return ok;
}

/* Every interleaving that keeps both program orders and the real-time order
 * (a call that ended before another began comes first), depth-first, until
 * one reproduces the results.  At most C(12,6) = 924 leaves. */
static void lin_dfs(lin_search *s, unsigned i, unsigned j)
{
    if (s->found) return;
    const lin_call *a = s->calls[0], *b = s->calls[1];
    if (i == LIN_CALLS && j == LIN_CALLS) {
        s->leaves++;
        s->found = lin_replay(s);
        return;
    }
    /* thread 0's call i next: no remaining call of thread 1 ended before it
     * began (their ends increase, so look at the first) */
    if (i < LIN_CALLS && (j == LIN_CALLS || b[j].end > a[i].start)) {
        s->order[i + j] = 0;
        lin_dfs(s, i + 1, j);
    }
    if (j < LIN_CALLS && (i == LIN_CALLS || a[i].end > b[j].start)) {
        s->order[i + j] = 1;
        lin_dfs(s, i, j + 1);
    }
}

static void test_linearizable(void **state)
{
    (void)state;
    const size_t reps = tu_scaled(60000, g_scale);
    uint64_t t0 = sluice_now_ns();
    pool *pl = pool_new(2);
    lin_ctx *lc = calloc(1, sizeof *lc);
    assert_non_null(lc);
    size_t overlapped = 0, leaves = 0;
    for (size_t rep = 0; rep < reps; rep++) {
        uint64_t rs = seed_for(5, rep, 0);
        const variant *v = &variants[rep % N_VARIANTS];
        cfg c;
        cfg_random(&c, v, &rs, 1, 4, 1, 4, 8, 1000000);
        const uint64_t W = c.period_ns;
        uint64_t base = rng_range(&rs, 3 * W, UINT64_C(1) << 62);
        sluice_limiter *l = mk(c.spec);
        /* 0..3 serial calls before, then 12 at scattered times in
         * [base, base + 2W] and permits 0..3 (some above the capacity) */
        uint64_t hist_t[3], hist_p[3];
        unsigned nhist = (unsigned)tu_splitmix64_below(&rs, 4);
        for (unsigned i = 0; i < nhist; i++) {
            hist_t[i] = base - tu_splitmix64_below(&rs, 2 * W);
            hist_p[i] = tu_splitmix64_below(&rs, 4);
            sluice_try_acquire_at(l, hist_p[i], hist_t[i], NULL);
        }
        for (unsigned k = 0; k < 2; k++)
            for (unsigned i = 0; i < LIN_CALLS; i++)
                lc->calls[k][i] = (lin_call){.t = base + tu_splitmix64_below(&rs, 2 * W + 1),
                                             .p = tu_splitmix64_below(&rs, 4)};
        lc->lim = l;
        lc->delay[0] = (unsigned)tu_splitmix64_below(&rs, 64);
        lc->delay[1] = (unsigned)tu_splitmix64_below(&rs, 64);
        atomic_store(&lc->arrive, 0);
        pool_run(pl, lin_job, lc, 1, false);

        const lin_call *a = lc->calls[0], *b = lc->calls[1];
        bool ov = false;
        for (unsigned i = 0; i < LIN_CALLS; i++)
            for (unsigned j = 0; j < LIN_CALLS; j++)
                ov |= a[i].start < b[j].end && b[j].start < a[i].end;
        overlapped += ov;
        lin_search s = {.c = &c, .calls = (const lin_call(*)[LIN_CALLS])lc->calls,
                        .hist_t = hist_t, .hist_p = hist_p, .nhist = nhist};
        lin_dfs(&s, 0, 0);
        leaves += s.leaves;
        if (!s.found) {
            /* the whole case on stderr (cmocka's message buffer is short) */
            fprintf(stderr, "%s: the limiter's results, that no order reproduces:\n", c.spec);
            for (unsigned i = 0; i < nhist; i++)
                fprintf(stderr, "  before: t=%llu p=%llu\n", ULL(hist_t[i]), ULL(hist_p[i]));
            for (unsigned k = 0; k < 2; k++)
                for (unsigned i = 0; i < LIN_CALLS; i++) {
                    const lin_call *x = &lc->calls[k][i];
                    fprintf(stderr,
                            "  thread %u #%u [%llu,%llu]: t=%llu p=%llu -> allowed=%d "
                            "remaining=%llu retry=%lld wait=%llu\n",
                            k, i, ULL(x->start), ULL(x->end), ULL(x->t), ULL(x->p), x->allowed,
                            ULL(x->remaining), (long long)x->retry, ULL(x->wait_ns));
                }
            fail_msg("%s: no order of the 12 calls (%u allowed by program and real-time order "
                     "tried) reproduces the results (listed above)",
                     c.spec, s.leaves);
        }
        sluice_limiter_free(l);
    }
    pool_free(pl);
    free(lc);
    printf("[ conc     ] linearizable: %zu repetitions of 2 threads x %d calls, %zu with "
           "overlapping calls, %.1f orders tried on average, %.2f s\n",
           reps, LIN_CALLS, overlapped, (double)leaves / (double)reps, secs_since(t0));
}

/* ---- (c) sixteen threads, one permit ------------------------------------- */

#define ONE_THREADS 16
#define ONE_BATCH 250

typedef struct one_res {
    bool allowed;
    uint64_t remaining, wait_ns;
    int64_t retry;
} one_res;

typedef struct one_ctx {
    _Atomic unsigned arrive[ONE_BATCH];
    _Atomic uint64_t seq[ONE_BATCH];
    uint64_t start[ONE_BATCH][ONE_THREADS], end[ONE_BATCH][ONE_THREADS];
    sluice_limiter *lim[ONE_BATCH];
    uint64_t t[ONE_BATCH][ONE_THREADS];
    one_res res[ONE_BATCH][ONE_THREADS];
} one_ctx;

static void one_job(void *vc, unsigned self, size_t rep)
{
    one_ctx *c = vc;
    sluice_result r;
    one_res *o = &c->res[rep][self];
    gate(&c->arrive[rep], ONE_THREADS, 2000);
    c->start[rep][self] = atomic_fetch_add(&c->seq[rep], 1);
    o->allowed = sluice_try_acquire_at(c->lim[rep], 1, c->t[rep][self], &r);
    c->end[rep][self] = atomic_fetch_add(&c->seq[rep], 1);
    o->remaining = r.remaining;
    o->wait_ns = r.wait_ns;
    o->retry = r.retry_after_ns;
}

static void test_one_of_sixteen(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "token-bucket 1/s burst=1", "fixed-window 1/s",   "sliding-wheel 1/s",
        "leaky-bucket 1/s capacity=1", "sliding-log 1/s", "sliding-approx 1/s",
        "leaky-bucket 1/s capacity=1 nodelay",
    };
    const size_t nspecs = sizeof specs / sizeof specs[0];
    const size_t reps = tu_scaled(100000, g_scale);
    uint64_t t0 = sluice_now_ns();
    pool *pl = pool_new(ONE_THREADS);
    one_ctx *oc = calloc(1, sizeof *oc);
    assert_non_null(oc);
    uint64_t rs = seed_for(6, 0, 0);
    size_t overlapped = 0;
    for (size_t done = 0; done < reps;) {
        size_t batch = reps - done < ONE_BATCH ? reps - done : ONE_BATCH;
        for (size_t k = 0; k < batch; k++) {
            oc->lim[k] = mk(specs[(done + k) % nspecs]);
            /* one instant, well inside a window; a quarter of the threads
             * pass a time up to 1 us earlier */
            uint64_t t = tu_splitmix64_below(&rs, UINT64_C(1) << 33) * SEC + 1000 + tu_splitmix64_below(&rs, SEC / 2);
            for (unsigned i = 0; i < ONE_THREADS; i++)
                oc->t[k][i] = tu_splitmix64_below(&rs, 4) == 0 ? t - tu_splitmix64_below(&rs, 1001) : t;
            atomic_store(&oc->arrive[k], 0);
            atomic_store(&oc->seq[k], 0);
        }
        pool_run(pl, one_job, oc, batch, true);
        for (size_t k = 0; k < batch; k++) {
            const char *spec = specs[(done + k) % nspecs];
            unsigned admitted = 0;
            /* did any two calls overlap? (the i-th start before the j-th end
             * and the j-th start before the i-th end) */
            bool ov = false;
            for (unsigned i = 0; i < ONE_THREADS && !ov; i++)
                for (unsigned j = i + 1; j < ONE_THREADS && !ov; j++)
                    ov = oc->start[k][i] < oc->end[k][j] && oc->start[k][j] < oc->end[k][i];
            overlapped += ov;
            for (unsigned i = 0; i < ONE_THREADS; i++) {
                const one_res *o = &oc->res[k][i];
                admitted += o->allowed;
                bool good = o->remaining == 0 && o->wait_ns == 0 &&
                            (o->allowed ? o->retry == 0
                                        : o->retry > 0 && (uint64_t)o->retry <= 2 * SEC);
                if (!good)
                    fail_msg("%s, repetition %zu, thread %u: allowed=%d remaining=%llu wait=%llu "
                             "retry=%lld",
                             spec, done + k, i, o->allowed, ULL(o->remaining), ULL(o->wait_ns),
                             (long long)o->retry);
            }
            if (admitted != 1)
                fail_msg("%s, repetition %zu: %u of %d threads admitted, expected exactly 1", spec,
                         done + k, admitted, ONE_THREADS);
            sluice_stats st;
            sluice_limiter_stats_get(oc->lim[k], &st);
            if (st.requests_allowed != 1 || st.requests_denied != ONE_THREADS - 1 ||
                st.permits_allowed != 1 || st.permits_denied != ONE_THREADS - 1 || st.probes != 0)
                fail_msg("%s, repetition %zu: counters allowed %llu denied %llu", spec, done + k,
                         ULL(st.requests_allowed), ULL(st.requests_denied));
            sluice_limiter_free(oc->lim[k]);
        }
        done += batch;
    }
    pool_free(pl);
    free(oc);
    printf("[ conc     ] one of sixteen: %zu repetitions (%zu algorithms in turn), %zu with "
           "overlapping calls, %.2f s\n",
           reps, nspecs, overlapped, secs_since(t0));
}

/* ---- tables: 8 threads, 1000 keys, frozen per key ------------------------ */

#define TAB_THREADS 8
#define TAB_KEYS 1000
#define TAB_PHASES 3

typedef struct table_ctx {
    const cfg *c;
    sluice_table *tab;
    uint64_t base, phase_off; /* the keys' instant: base + phase_off */
    size_t calls;             /* per thread */
    uint32_t keys;            /* keys asked for: TAB_KEYS, or 1 (hot key) */
    uint32_t churn;           /* hot key: thread 0 also removes and makes again
                               * the keys other0 .. other<churn - 1> */
    uint64_t seed;
    call_rec *rec;            /* TAB_THREADS * calls */
    tu_errs err[TAB_THREADS];
} table_ctx;

/* Every key is at the same instant in a phase.  (With an instant of its
 * own per key, a shard's clock -- the latest time any of its keys showed
 * it -- could pass the end of one key's window while that key's own
 * instant is still inside it; the table would then reclaim the key as at
 * rest and its next request start fresh: the limitation that src/table/table.c's
 * head comment states for callers whose times run backwards across a key's
 * rest.  This test is about concurrency, so it keeps time consistent
 * across keys.) */
static uint64_t key_time(const table_ctx *c, uint32_t key)
{
    (void)key;
    return c->base + c->phase_off;
}

static void table_job(void *vc, unsigned self, size_t rep)
{
    (void)rep;
    table_ctx *c = vc;
    uint64_t rs = seed_for(7, c->seed, self);
    call_rec *out = c->rec + (size_t)self * c->calls;
    for (size_t i = 0; i < c->calls; i++) {
        uint64_t r = tu_splitmix64(&rs);
        uint32_t key = (uint32_t)((r >> 32) % c->keys);
        uint64_t p = (r & 7) == 0 ? 0 : 1 + (r >> 3) % 3;
        if (c->keys == 1) /* unit permits, probes, and requests never granted */
            p = (r & 7) == 0 ? 0 : (r & 7) == 1 ? c->c->cap + 1 : 1;
        uint64_t t = key_time(c, key);
        char kb[16];
        int kl;
        if (c->churn && self == 0) { /* shifts in the index, entries reused */
            kl = snprintf(kb, sizeof kb, "other%u", (uint32_t)(r % c->churn));
            sluice_table_remove(c->tab, kb, (size_t)kl);
            sluice_table_try_acquire_at(c->tab, kb, (size_t)kl, 0, t, NULL); /* a probe */
            sluice_table_try_acquire_at(c->tab, kb, (size_t)kl, 1, t, NULL);
        }
        kl = snprintf(kb, sizeof kb, "key%u", key);
        sluice_result res;
        bool ok = sluice_table_try_acquire_at(c->tab, kb, (size_t)kl, p, t, &res);
        if (res.error != 0)
            tu_errs_add(&c->err[self], "key %u: sluice_table_last_error %d", key,
                     res.error);
        check_one(&c->err[self], c->c, p, t, ok, &res);
        out[i] = (call_rec){.t = t, .p = p, .wait_ns = res.wait_ns, .remaining = res.remaining,
                            .retry = res.retry_after_ns, .thread = self, .idx = (uint32_t)i,
                            .key = key, .allowed = ok};
    }
}

static void test_table_frozen(void **state)
{
    (void)state;
    const size_t rounds = tu_scaled(4, g_scale);
    uint64_t t0 = sluice_now_ns();
    pool *pl = pool_new(TAB_THREADS);
    table_ctx *tc = calloc(1, sizeof *tc);
    assert_non_null(tc);
    ref_model **refs = calloc(TAB_KEYS, sizeof *refs);
    size_t *count = calloc(TAB_KEYS + 1, sizeof *count);
    assert_true(refs && count);
    size_t calls_max = TAB_KEYS * (2 * 8 + 4) / TAB_THREADS;
    tc->rec = calloc(TAB_THREADS * calls_max, sizeof *tc->rec);
    call_rec *grouped = calloc(TAB_THREADS * calls_max, sizeof *grouped);
    assert_true(tc->rec && grouped);
    size_t runs = 0, calls_done = 0;
    for (size_t round = 0; round < rounds; round++)
        for (size_t vi = 0; vi < N_VARIANTS; vi++, runs++) {
            uint64_t rs = seed_for(8, runs, 0);
            const variant *v = &variants[vi];
            cfg c;
            cfg_make(&c, v, rng_range(&rs, 3, 8), SEC, rng_range(&rs, 4, 8), 10);
            char err[256];
            sluice_table *tab = sluice_table_new(c.spec, TAB_KEYS, err, sizeof err);
            if (!tab) fail_msg("%s: %s", c.spec, err);
            for (uint32_t k = 0; k < TAB_KEYS; k++) refs[k] = mk_ref(&c);
            tally all = {0};
            tc->c = &c;
            tc->tab = tab;
            tc->base = rng_range(&rs, SEC, UINT64_C(1) << 62);
            tc->calls = TAB_KEYS * (2 * c.cap + 4) / TAB_THREADS;
            tc->keys = TAB_KEYS;
            assert_true(tc->calls <= calls_max);
            for (unsigned ph = 0; ph < TAB_PHASES; ph++) {
                tc->phase_off = ph * (SEC / 3 + 7);
                tc->seed = tu_splitmix64(&rs);
                memset(tc->err, 0, sizeof tc->err);
                pool_run(pl, table_job, tc, 1, false);
                terr_check(tc->err, TAB_THREADS, "table");
                /* group by key, keeping thread-major program order */
                const size_t n = TAB_THREADS * tc->calls;
                memset(count, 0, (TAB_KEYS + 1) * sizeof *count);
                for (size_t i = 0; i < n; i++) count[tc->rec[i].key + 1]++;
                for (uint32_t k = 0; k < TAB_KEYS; k++) count[k + 1] += count[k];
                for (size_t i = 0; i < n; i++) {
                    tally_add(&all, tc->rec[i].p, tc->rec[i].allowed);
                    grouped[count[tc->rec[i].key]++] = tc->rec[i];
                }
                size_t lo = 0;
                for (uint32_t k = 0; k < TAB_KEYS; k++) {
                    size_t hi = count[k]; /* now the end of key k's group */
                    ref_result e;
                    ref_model_decide(refs[k], 0, key_time(tc, k), &e);
                    char why[640];
                    if (hi > lo && !chain_check(refs[k], e.remaining, grouped + lo, hi - lo, why,
                                                sizeof why))
                        fail_msg("%s table, key %u, phase %u: not linearizable: %s", c.spec, k, ph,
                                 why);
                    lo = hi;
                }
                calls_done += n;
            }
            sluice_table_stats ts;
            sluice_table_stats_get(tab, &ts);
            const sluice_stats zero = {0};
            check_stats(c.spec, &zero, &ts.decisions, &all);
            if (ts.keys > TAB_KEYS || ts.refused != 0)
                fail_msg("%s table: %llu keys, %llu refused", c.spec, ULL(ts.keys),
                         ULL(ts.refused));
            for (uint32_t k = 0; k < TAB_KEYS; k++) ref_model_free(refs[k]);
            sluice_table_free(tab);
        }
    pool_free(pl);
    free(grouped);
    free(tc->rec);
    free(tc);
    free(refs);
    free(count);
    printf("[ conc     ] table: %zu runs (%d threads, %d keys, %d phases), %zu calls, %.2f s\n",
           runs, TAB_THREADS, TAB_KEYS, TAB_PHASES, calls_done, secs_since(t0));
}

/* ---- the window logs over a long run: refusals read, admissions lock ---- */

/* sliding-log and sliding-wheel refuse and answer probes without their
 * mutex, from a summary of the log that admissions publish under a
 * sequence counter (src/alg/window_log.c).  One limiter of each, with 2 and 4
 * threads, through a run of many rounds: time moves between rounds by
 * random gaps (the same instant again, a little, a fraction of the window,
 * more than the window), so entries leave the window before, between and
 * during the rounds; in each round the threads call at one instant --
 * admitting until the window is full, then refusing.  Three rounds in four
 * ask 0..3 permits, sometimes 9..12 (more than the summary's 8 published
 * entries settle) and sometimes more than LIMIT, with results: the round
 * must be linearizable against the model (chain_check, which also leaves
 * the model at the state after the round).  The fourth asks 1 permit
 * without results (the bare yes/no path): exactly min(room, calls) are
 * admitted, and no thread is admitted after it was refused (at one
 * instant the room only shrinks); the model then takes them as one
 * admission at the instant.  The counters must match the run's tallies. */
typedef struct logrun_ctx {
    const cfg *c;
    sluice_limiter *lim;
    uint64_t t, t_old, early;
    size_t calls, stride;
    uint64_t seed;
    unsigned nthreads;
    bool blind; /* unit permits, no results */
    call_rec *rec;
    _Atomic unsigned arrive;
    tu_errs err[MAX_THREADS];
} logrun_ctx;

static void logrun_job(void *vc, unsigned self, size_t rep)
{
    (void)rep;
    logrun_ctx *c = vc;
    uint64_t rs = seed_for(9, c->seed, self);
    call_rec *out = c->rec + (size_t)self * c->stride;
    gate(&c->arrive, c->nthreads, 200000);
    for (size_t i = 0; i < c->calls; i++) {
        uint64_t r = tu_splitmix64(&rs);
        uint64_t p = 1;
        if (!c->blind) switch (r & 31) {
            case 0: case 1: case 2: case 3: p = 0; break;
            case 4: case 5: p = 9 + (r >> 5) % 4; break;
            case 6: p = c->c->limit + 1; break;
            case 7: case 8: case 9: p = 2 + (r >> 5) % 2; break;
            default: break;
            }
        uint64_t t = c->t;
        if (((r >> 8) & 7) == 0) t = c->t - (r >> 16) % c->early;
        else if (((r >> 8) & 7) == 1) t = c->t_old;
        sluice_result res = {0};
        bool ok = sluice_try_acquire_at(c->lim, p, t, c->blind ? NULL : &res);
        if (!c->blind) check_one(&c->err[self], c->c, p, t, ok, &res);
        out[i] = (call_rec){.t = t, .p = p, .wait_ns = res.wait_ns, .remaining = res.remaining,
                            .retry = res.retry_after_ns, .thread = self, .idx = (uint32_t)i,
                            .allowed = ok};
    }
}

static void test_window_log_run(void **state)
{
    (void)state;
    const size_t rounds = tu_scaled(400, g_scale);
    uint64_t t0 = sluice_now_ns();
    static const unsigned nth[] = {2, 4};
    logrun_ctx *lc = calloc(1, sizeof *lc);
    assert_non_null(lc);
    lc->stride = (2 * 200 + 16) / 2 + 4;
    lc->rec = calloc(MAX_THREADS * lc->stride, sizeof *lc->rec);
    assert_non_null(lc->rec);
    size_t calls = 0, refused = 0, admitted = 0;
    for (size_t ti = 0; ti < sizeof nth / sizeof nth[0]; ti++) {
        pool *pl = pool_new(nth[ti]);
        for (size_t vi = 1; vi <= 2; vi++) { /* sliding-log, sliding-wheel */
            const variant *v = &variants[vi];
            assert_true(v->alg == REF_SLIDING_LOG || v->alg == REF_SLIDING_WHEEL);
            uint64_t rs = seed_for(9, ti, vi);
            cfg c;
            cfg_random(&c, v, &rs, 10, 200, 4, 200, 1000, 10 * SEC);
            sluice_limiter *l = mk(c.spec);
            ref_model *m = mk_ref(&c);
            const uint64_t W = c.period_ns;
            uint64_t t = rng_range(&rs, 4 * W + 1000, UINT64_C(1) << 61);
            const uint64_t tick = c.slots ? W / c.slots : 1;
            uint64_t hist[64]; /* the instants of the rounds that admitted */
            size_t nh = 0;
            tally tl = {0};
            for (size_t round = 0; round < rounds; round++) {
                /* the instant the oldest admission still in the window
                 * leaves it (slot + N ticks), or just before the next one */
                uint64_t h = t;
                for (size_t i = nh > 64 ? nh - 64 : 0; i < nh; i++)
                    if ((hist[i % 64] / tick + W / tick) * tick > t) {
                        h = (hist[i % 64] / tick + W / tick) * tick;
                        break;
                    }
                switch (tu_splitmix64_below(&rs, 8)) { /* how far time moves */
                case 0: break;
                case 1: t += 1 + tu_splitmix64_below(&rs, W / 64 + 1); break;
                case 2: t += W / 2 + tu_splitmix64_below(&rs, W); break;
                case 3: t += W + tu_splitmix64_below(&rs, 2 * W); break;
                case 4: case 5: /* when the oldest leaves, or 1 ns before */
                    t = h - (h > t && (tu_splitmix64(&rs) & 3) == 0);
                    break;
                default: t += 1 + tu_splitmix64_below(&rs, W / 8 + 1); break;
                }

                /* a serial probe or refusal first, read from the summary
                 * the last admission left: checked field by field */
                ref_result pr;
                ref_model_decide(m, 0, t, &pr);
                const uint64_t q = pr.remaining + 1 + tu_splitmix64_below(&rs, 12);
                if (tu_splitmix64(&rs) & 1) {
                    serial_call(&c, l, m, 0, t);
                    tally_add(&tl, 0, true);
                } else if (q <= c.limit) {
                    serial_call(&c, l, m, q, t);
                    tally_add(&tl, q, false);
                }
                /* half the rounds start with a serial admission at t (then
                 * earlier times are clamped to it); the others call at t
                 * only, so their first calls read a summary from before t */
                bool at_t = (tu_splitmix64(&rs) & 1) && ref_model_would_allow(m, 1, t);
                if (at_t) {
                    serial_call(&c, l, m, 1, t);
                    tally_add(&tl, 1, true);
                }
                ref_result e;
                ref_model_decide(m, 0, t, &e);
                const uint64_t room0 = e.remaining;
                lc->c = &c;
                lc->lim = l;
                lc->t = t;
                lc->t_old = at_t ? t - rng_range(&rs, 1, 2 * W) : t;
                lc->early = at_t ? 1000 : 1;
                lc->blind = tu_splitmix64_below(&rs, 4) == 0;
                /* half the rounds ask more than the room, the others
                 * less, so that the window holds many slots' entries */
                lc->calls = (2 * room0 + 16) / pl->n + 4;
                if (tu_splitmix64(&rs) & 1) lc->calls = 1 + tu_splitmix64_below(&rs, room0 / 4 / pl->n + 1);
                assert_true(lc->calls <= lc->stride);
                lc->seed = tu_splitmix64(&rs);
                lc->nthreads = pl->n;
                atomic_store(&lc->arrive, 0);
                memset(lc->err, 0, sizeof lc->err);
                pool_run(pl, logrun_job, lc, 1, false);
                terr_check(lc->err, pl->n, "window log run");
                /* compact: thread-major, program order */
                size_t n = 0;
                uint64_t round_perm = 0;
                for (unsigned k = 0; k < pl->n; k++)
                    for (size_t i = 0; i < lc->calls; i++) {
                        call_rec *x = &lc->rec[(size_t)k * lc->stride + i];
                        tally_add(&tl, x->p, x->allowed);
                        if (x->allowed && x->p) admitted++, round_perm += x->p;
                        refused += !x->allowed;
                        if (lc->blind && i > 0 && x->allowed && !x[-1].allowed)
                            fail_msg("%s, %u threads, round %zu at %llu: thread %u admitted after "
                                     "it was refused, at one instant",
                                     c.spec, pl->n, round, ULL(t), k);
                        lc->rec[n++] = *x;
                    }
                calls += n;
                char why[640];
                if (!lc->blind) {
                    if (!chain_check(m, room0, lc->rec, n, why, sizeof why))
                        fail_msg("%s, %u threads, round %zu at %llu: not linearizable: %s",
                                 c.spec, pl->n, round, ULL(t), why);
                } else {
                    const uint64_t want = room0 < n ? room0 : n;
                    if (round_perm != want)
                        fail_msg("%s, %u threads, round %zu at %llu: %zu calls of 1 with room "
                                 "%llu admitted %llu",
                                 c.spec, pl->n, round, ULL(t), n, ULL(room0), ULL(round_perm));
                    ref_result a;
                    if (round_perm && !ref_model_decide(m, round_perm, t, &a))
                        fail_msg("%s: the model refuses the round's %llu permits", c.spec,
                                 ULL(round_perm));
                }
                if (at_t || round_perm) hist[nh++ % 64] = t;
                sluice_result r;
                assert_true(sluice_try_acquire_at(l, 0, t, &r));
                if (r.remaining != room0 - round_perm)
                    fail_msg("%s, round %zu: %llu remain after the round, expected %llu - %llu",
                             c.spec, round, ULL(r.remaining), ULL(room0), ULL(round_perm));
                tally_add(&tl, 0, true);
            }
            sluice_stats st;
            sluice_limiter_stats_get(l, &st);
            const sluice_stats zero = {0};
            check_stats(c.spec, &zero, &st, &tl);
            ref_model_free(m);
            sluice_limiter_free(l);
        }
        pool_free(pl);
    }
    free(lc->rec);
    free(lc);
    printf("[ conc     ] window logs: %zu rounds x 2 algorithms x 2 thread counts, %zu calls "
           "(%zu admitted, %zu refused), %.2f s\n",
           rounds, calls, admitted, refused, secs_since(t0));
}

/* ---- a refusal changes nothing ------------------------------------------ */

/* For every algorithm: after the limiter is full, refusals (at the
 * instant, later, earlier; with and without a result; more than LIMIT) and
 * probes (now, and long after) leave its raw state exactly as it was
 * (sluice__limiter_raw, src/limiter/limiter.h: the packed word of the lock-free
 * ones; the window logs' sequence, their count of mutex sections, t_last,
 * length, base and newest cum) -- the window logs did not even take their
 * mutex -- while the counters count every call.  An admission then changes
 * it (the window logs: sequence + 2, one section).  And a window log's
 * refusal that the summary cannot settle (a retry past its 8 entries) takes
 * the mutex but leaves the sequence as it found it. */
static void test_refusal_writes_nothing(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "fixed-window 5/s",          "sliding-log 5/s",    "sliding-wheel 5/s slots=10",
        "sliding-approx 5/s",        "token-bucket 5/s",   "leaky-bucket 5/s nodelay",
        "leaky-bucket 5/s",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        const bool wlog = strncmp(specs[i], "sliding-log", 11) == 0 ||
                          strncmp(specs[i], "sliding-wheel", 13) == 0;
        sluice_limiter *l = mk(specs[i]);
        const uint64_t t = 10 * SEC;
        for (uint64_t k = 0; k < 5; k++)
            if (!sluice_try_acquire_at(l, 1, t + k * 1000, NULL))
                fail_msg("%s: admission %llu refused", specs[i], ULL(k));
        const uint64_t t1 = t + 5000;
        uint64_t before[6], after[6];
        sluice_stats s0, s1;
        sluice__limiter_raw(l, before);
        sluice_limiter_stats_get(l, &s0);
        static const struct {
            uint64_t p, dt; /* dt: ns after t1, or UINT64_MAX for t */
            bool res, ok;
        } calls[] = {
            {1, 0, true, false},       {1, 0, false, false},     {1, 1, true, false},
            {1, 1000, false, false},   {1, UINT64_MAX, true, false}, {3, 7, true, false},
            {6, 0, true, false},       {6, 0, false, false},     {0, 0, true, true},
            {0, 0, false, true},       {0, 30 * SEC, true, true}, {0, UINT64_MAX, true, true},
        };
        uint64_t refusals = 0, probes = 0;
        for (size_t k = 0; k < sizeof calls / sizeof calls[0]; k++) {
            const uint64_t at = calls[k].dt == UINT64_MAX ? t : t1 + calls[k].dt;
            sluice_result r;
            bool ok = sluice_try_acquire_at(l, calls[k].p, at, calls[k].res ? &r : NULL);
            if (ok != calls[k].ok)
                fail_msg("%s: p=%llu at %llu: allowed %d", specs[i], ULL(calls[k].p), ULL(at), ok);
            refusals += !ok;
            probes += calls[k].p == 0;
            sluice__limiter_raw(l, after);
            if (memcmp(before, after, sizeof before) != 0)
                fail_msg("%s: p=%llu at %llu (%s) changed the state: %llx %llx %llx %llx -> "
                         "%llx %llx %llx %llx",
                         specs[i], ULL(calls[k].p), ULL(at), ok ? "allowed" : "refused",
                         ULL(before[0]), ULL(before[1]), ULL(before[2]), ULL(before[3]),
                         ULL(after[0]), ULL(after[1]), ULL(after[2]), ULL(after[3]));
        }
        sluice_limiter_stats_get(l, &s1);
        if (s1.requests_denied - s0.requests_denied != refusals ||
            s1.probes - s0.probes != probes || s1.requests_allowed != s0.requests_allowed)
            fail_msg("%s: counters: denied +%llu probes +%llu allowed +%llu, expected +%llu +%llu +0",
                     specs[i], ULL(s1.requests_denied - s0.requests_denied),
                     ULL(s1.probes - s0.probes), ULL(s1.requests_allowed - s0.requests_allowed),
                     ULL(refusals), ULL(probes));
        assert_true(sluice_try_acquire_at(l, 1, t1 + 30 * SEC, NULL));
        sluice__limiter_raw(l, after);
        if (memcmp(before, after, sizeof before) == 0)
            fail_msg("%s: an admission left the raw state as it was", specs[i]);
        if (wlog && (after[0] != before[0] + 2 || after[1] != before[1] + 1))
            fail_msg("%s: an admission moved the sequence %llu -> %llu, sections %llu -> %llu",
                     specs[i], ULL(before[0]), ULL(after[0]), ULL(before[1]), ULL(after[1]));
        sluice_limiter_free(l);
    }

    /* a window log's refusal past the summary: 20 entries, then 9 permits
     * asked with a result (the retry is the 9th entry's expiry) */
    sluice_limiter *l = mk("sliding-log 20/s");
    for (uint64_t k = 0; k < 20; k++) assert_true(sluice_try_acquire_at(l, 1, SEC + k, NULL));
    uint64_t before[6], after[6];
    sluice__limiter_raw(l, before);
    assert_false(sluice_try_acquire_at(l, 9, SEC + 20, NULL)); /* settled by the summary */
    sluice__limiter_raw(l, after);
    assert_memory_equal(before, after, sizeof before);
    sluice_result r;
    assert_false(sluice_try_acquire_at(l, 9, SEC + 20, &r));
    assert_int_equal(r.retry_after_ns, 2 * SEC + 8 - (SEC + 20));
    sluice__limiter_raw(l, after);
    if (after[0] != before[0] || after[1] != before[1] + 1 ||
        memcmp(before + 2, after + 2, 4 * sizeof *before) != 0)
        fail_msg("the mutex-taking refusal: sequence %llu -> %llu, sections %llu -> %llu",
                 ULL(before[0]), ULL(after[0]), ULL(before[1]), ULL(after[1]));
    sluice_limiter_free(l);
}

/* ---- tables: 3 threads on one hot key ------------------------------------ */

#define HOT_THREADS 3
#define HOT_PHASES 12
#define HOT_CALLS 300 /* per thread and phase */
#define HOT_OTHERS 150 /* other keys held in the table (one shard) */

static void test_table_hot_key(void **state)
{
    (void)state;
    const size_t rounds = tu_scaled(3, g_scale) + 1;
    uint64_t t0 = sluice_now_ns();
    pool *pl = pool_new(HOT_THREADS);
    table_ctx *tc = calloc(1, sizeof *tc);
    assert_non_null(tc);
    tc->rec = calloc(HOT_THREADS * HOT_CALLS, sizeof *tc->rec);
    assert_non_null(tc->rec);
    size_t runs = 0, calls_done = 0, admitted_all = 0;
    for (size_t round = 0; round < rounds; round++)
        for (size_t vi = 0; vi < N_VARIANTS; vi++, runs++) {
            uint64_t rs = seed_for(9, runs, 0);
            const variant *v = &variants[vi];
            cfg c;
            cfg_make(&c, v, rng_range(&rs, 3, 8), SEC, rng_range(&rs, 4, 8), 10);
            char err[256];
            sluice_table *tab = sluice_table_new(c.spec, 256, err, sizeof err);
            if (!tab) fail_msg("%s: %s", c.spec, err);
            ref_model *ref = mk_ref(&c);
            tally all = {0};
            tc->c = &c;
            tc->tab = tab;
            tc->base = rng_range(&rs, SEC, UINT64_C(1) << 62);
            tc->calls = HOT_CALLS;
            tc->keys = 1;
            tc->churn = HOT_OTHERS;
            /* other keys in the hot key's shards, so that the index has runs */
            for (uint32_t k = 0; k < HOT_OTHERS; k++) {
                char kb[24];
                int kl = snprintf(kb, sizeof kb, "other%u", k);
                sluice_table_try_acquire_at(tab, kb, (size_t)kl, 1, tc->base, NULL);
                tally_add(&all, 1, true);
            }
            for (unsigned ph = 0; ph < HOT_PHASES; ph++) {
                tc->phase_off = ph * (SEC / 5 + 7);
                tc->seed = tu_splitmix64(&rs);
                memset(tc->err, 0, sizeof tc->err);
                pool_run(pl, table_job, tc, 1, false);
                terr_check(tc->err, HOT_THREADS, "hot key");
                for (size_t i = 0; i < tc->calls; i++) { /* thread 0's churn */
                    tally_add(&all, 0, true); /* the probe of a key just removed */
                    tally_add(&all, 1, true); /* and its first request */
                }
                const size_t n = HOT_THREADS * tc->calls;
                size_t units = 0, admitted = 0;
                for (size_t i = 0; i < n; i++) {
                    tally_add(&all, tc->rec[i].p, tc->rec[i].allowed);
                    units += tc->rec[i].p == 1;
                    admitted += tc->rec[i].allowed && tc->rec[i].p > 0;
                }
                ref_result e;
                ref_model_decide(ref, 0, key_time(tc, 0), &e);
                const uint64_t room0 = e.remaining;
                if (admitted != (room0 < units ? room0 : units))
                    fail_msg("%s hot key, phase %u: %zu admitted, the contract admits %llu", c.spec,
                             ph, admitted, ULL(room0 < units ? room0 : units));
                char why[640];
                if (!chain_check(ref, room0, tc->rec, n, why, sizeof why))
                    fail_msg("%s hot key, phase %u: not linearizable: %s", c.spec, ph, why);
                /* the model now holds the calls replayed in a valid order:
                 * the key's state for the next phase */
                calls_done += n;
                admitted_all += admitted;
            }
            sluice_table_stats ts;
            sluice_table_stats_get(tab, &ts);
            const sluice_stats zero = {0};
            check_stats(c.spec, &zero, &ts.decisions, &all);
            if (ts.refused != 0) fail_msg("%s hot key: %llu refused as full", c.spec, ULL(ts.refused));
            ref_model_free(ref);
            sluice_table_free(tab);
        }
    pool_free(pl);
    free(tc->rec);
    free(tc);
    printf("[ conc     ] table hot key: %zu runs (%d threads, %d phases), %zu calls, %zu admitted, "
           "%.2f s\n",
           runs, HOT_THREADS, HOT_PHASES, calls_done, admitted_all, secs_since(t0));
}

/* ---- admissions without the lock, racing entries that move ------------- */

/* Admissions of held keys store their state without the shard's lock
 * (src/table/table.c, "Admissions without the lock"), while whoever holds the
 * lock moves entries along their probe runs (an insertion moves the rest
 * of a run one slot on, a removal one slot back).  An admission that
 * stored into a slot its key had left, or that a move copied from before
 * the store, loses a permit or gives one to another key.  Here one shard
 * (max_keys 256) holds ADM_KEYS keys; threads 1.. admit single permits on
 * them at one instant while thread 0 removes and makes other keys of the
 * same shard, so that the runs shift under the admissions all the time.
 * The spec's capacity is CAP per key: each key must end with exactly
 * min(CAP, requests) admitted -- counted by the callers, and read back from
 * the table (remaining = CAP - admitted).  Capacities above and below the
 * requests per key, for fixed-window and token-bucket. */
#define ADM_THREADS 4
#define ADM_KEYS 24
#define ADM_OTHERS 120

typedef struct adm_ctx {
    sluice_table *tab;
    uint64_t t;
    size_t calls; /* per admitting thread */
    uint64_t seed;
    _Atomic size_t stop;                   /* admitting threads done */
    _Atomic uint64_t admitted[ADM_KEYS];   /* per key */
    _Atomic uint64_t requests[ADM_KEYS];
    _Atomic uint64_t churned;
    tu_errs err[ADM_THREADS];
} adm_ctx;

static void adm_job(void *vc, unsigned self, size_t rep)
{
    (void)rep;
    adm_ctx *c = vc;
    uint64_t rs = seed_for(11, c->seed, self);
    char kb[24];
    if (self == 0) { /* churn until the others are done (bounded) */
        for (size_t i = 0; i < 50u * 1000 * 1000 &&
                           atomic_load(&c->stop) < ADM_THREADS - 1; i++) {
            int kl = snprintf(kb, sizeof kb, "other%u", (unsigned)(tu_splitmix64(&rs) % ADM_OTHERS));
            if (sluice_table_remove(c->tab, kb, (size_t)kl) != 0)
                sluice_table_try_acquire_at(c->tab, kb, (size_t)kl, 1, c->t, NULL);
            atomic_fetch_add(&c->churned, 1);
        }
        return;
    }
    for (size_t i = 0; i < c->calls; i++) {
        const unsigned k = (unsigned)(tu_splitmix64(&rs) % ADM_KEYS);
        int kl = snprintf(kb, sizeof kb, "key%u", k);
        sluice_result res;
        const bool ok = sluice_table_try_acquire_at(c->tab, kb, (size_t)kl, 1, c->t, &res);
        atomic_fetch_add(&c->requests[k], 1);
        if (ok) atomic_fetch_add(&c->admitted[k], 1);
        if (res.error != 0) tu_errs_add(&c->err[self], "key %u: error %d", k, res.error);
    }
    atomic_fetch_add(&c->stop, 1);
}

static void test_table_admit_moving(void **state)
{
    (void)state;
    const size_t rounds = tu_scaled(6, g_scale) + 1;
    uint64_t t0 = sluice_now_ns();
    pool *pl = pool_new(ADM_THREADS);
    adm_ctx *c = calloc(1, sizeof *c);
    assert_non_null(c);
    size_t calls_done = 0, churned = 0;
    for (size_t round = 0; round < rounds; round++) {
        uint64_t rs = seed_for(12, round, 0);
        c->calls = 20000 + round * 4000;
        const uint64_t per_key = c->calls * (ADM_THREADS - 1) / ADM_KEYS; /* about */
        const uint64_t cap = round % 2 ? per_key / 2 : per_key * 4;
        char spec[96];
        if (round % 4 < 2)
            snprintf(spec, sizeof spec, "fixed-window %llu/h", ULL(cap));
        else
            snprintf(spec, sizeof spec, "token-bucket 1/h burst=%llu", ULL(cap));
        char err[256];
        c->tab = sluice_table_new(spec, 256, err, sizeof err);
        if (!c->tab) fail_msg("%s: %s", spec, err);
        c->t = rng_range(&rs, SEC, UINT64_C(1) << 62);
        for (unsigned k = 0; k < ADM_KEYS; k++) {
            atomic_store(&c->admitted[k], 0);
            atomic_store(&c->requests[k], 0);
            char kb[24];
            int kl = snprintf(kb, sizeof kb, "key%u", k);
            sluice_table_try_acquire_at(c->tab, kb, (size_t)kl, 0, c->t, NULL); /* a probe */
        }
        for (unsigned k = 0; k < ADM_OTHERS; k += 2) { /* runs to shift */
            char kb[24];
            int kl = snprintf(kb, sizeof kb, "other%u", k);
            sluice_table_try_acquire_at(c->tab, kb, (size_t)kl, 1, c->t, NULL);
        }
        atomic_store(&c->stop, 0);
        atomic_store(&c->churned, 0);
        c->seed = tu_splitmix64(&rs);
        memset(c->err, 0, sizeof c->err);
        pool_run(pl, adm_job, c, 1, false);
        terr_check(c->err, ADM_THREADS, "admit moving");
        for (unsigned k = 0; k < ADM_KEYS; k++) {
            const uint64_t req = atomic_load(&c->requests[k]);
            const uint64_t got = atomic_load(&c->admitted[k]);
            const uint64_t want = req < cap ? req : cap;
            if (got != want)
                fail_msg("%s, key %u: %llu of %llu requests admitted, the contract admits %llu",
                         spec, k, ULL(got), ULL(req), ULL(want));
            char kb[24];
            int kl = snprintf(kb, sizeof kb, "key%u", k);
            sluice_result r;
            if (sluice_table_peek_at(c->tab, kb, (size_t)kl, 0, c->t, &r, NULL) != 0)
                fail_msg("%s, key %u: not held", spec, k);
            if (r.remaining != cap - got)
                fail_msg("%s, key %u: the table holds %llu remaining, %llu admitted of %llu", spec,
                         k, ULL(r.remaining), ULL(got), ULL(cap));
        }
        calls_done += c->calls * (ADM_THREADS - 1);
        churned += atomic_load(&c->churned);
        sluice_table_free(c->tab);
    }
    pool_free(pl);
    free(c);
    printf("[ conc     ] admissions among moves: %zu rounds, %zu admissions asked, %zu churn "
           "steps, %.2f s\n",
           rounds, calls_done, churned, secs_since(t0));
}

int main(void)
{
    g_scale = tu_env_scale(1.0);
    cpus_init();
    g_seed = tu_env_seed();
    printf("[ conc     ] SLUICE_STRESS_SCALE=%g SLUICE_TEST_SEED=%llu, %u cores\n", g_scale,
           ULL(g_seed), g_ncpu);
    fflush(stdout);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frozen_time),
        cmocka_unit_test(test_moving_time),
        cmocka_unit_test(test_linearizable),
        cmocka_unit_test(test_one_of_sixteen),
        cmocka_unit_test(test_table_frozen),
        cmocka_unit_test(test_window_log_run),
        cmocka_unit_test(test_refusal_writes_nothing),
        cmocka_unit_test(test_table_hot_key),
        cmocka_unit_test(test_table_admit_moving),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
