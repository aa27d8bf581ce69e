/* limiter.c -- the public limiter: a profile, a state, a lock, counters.
 *
 * Every decision goes through sluice__decide(), which clamps the time to
 * the latest the state has seen (CONTRACT.md section 1) and hands the
 * request to the algorithm; tables (table.c) call the same function on
 * their per-key states, so the two can never disagree.
 *
 * Concurrency, in this version: a per-limiter mutex around the decision (a
 * few dozen instructions: no allocation except the sliding logs' rare ring
 * growth, no system call).  The counters are atomics, updated with relaxed
 * increments after the decision, so reading them never takes the lock.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

struct sluice_limiter {
    sluice__profile pf;
    pthread_mutex_t mu;
    sluice__state st;
    sluice__counters counters;
};

/* ---- dispatch ----------------------------------------------------------- */

void sluice__state_init(const sluice__profile *pf, sluice__state *st)
{
    memset(st, 0, sizeof *st);
    if (pf->alg == SLUICE__TOKEN_BUCKET) st->u.tb.tokens = pf->cap_scaled;
}

void sluice__state_fini(const sluice__profile *pf, sluice__state *st)
{
    if (pf->alg == SLUICE__SLIDING_LOG || pf->alg == SLUICE__SLIDING_WHEEL)
        sluice__window_log_fini(&st->u.log);
}

bool sluice__decide(const sluice__profile *pf, sluice__state *st,
                    uint64_t now_ns, uint64_t permits, uint64_t max_wait,
                    sluice_result *res)
{
    /* the contract's time axis ends at 2^63-1: later times saturate there,
     * so no algorithm can overflow adding a period to a time */
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    uint64_t t = now_ns > st->t_last ? now_ns : st->t_last;
    switch (pf->alg) {
    case SLUICE__FIXED_WINDOW:
        return sluice__fixed_window_decide(pf, st, t, permits, max_wait, res);
    case SLUICE__SLIDING_LOG:
    case SLUICE__SLIDING_WHEEL:
        return sluice__window_log_decide(pf, st, t, permits, max_wait, res);
    case SLUICE__SLIDING_APPROX:
        return sluice__sliding_approx_decide(pf, st, t, permits, max_wait, res);
    case SLUICE__TOKEN_BUCKET:
        return sluice__token_bucket_decide(pf, st, t, permits, max_wait, res);
    case SLUICE__LEAKY_BUCKET:
        return sluice__leaky_bucket_decide(pf, st, t, permits, max_wait, res);
    default:
        return sluice__deny(res, 0, -1);
    }
}

uint64_t sluice__rest_at(const sluice__profile *pf, const sluice__state *st)
{
    switch (pf->alg) {
    case SLUICE__FIXED_WINDOW: return sluice__fixed_window_rest_at(pf, st);
    case SLUICE__SLIDING_LOG:
    case SLUICE__SLIDING_WHEEL: return sluice__window_log_rest_at(pf, st);
    case SLUICE__SLIDING_APPROX: return sluice__sliding_approx_rest_at(pf, st);
    case SLUICE__TOKEN_BUCKET: return sluice__token_bucket_rest_at(pf, st);
    case SLUICE__LEAKY_BUCKET: return sluice__leaky_bucket_rest_at(pf, st);
    default: return st->t_last;
    }
}

/* ---- public API --------------------------------------------------------- */

sluice_limiter *sluice_limiter_new(const char *spec, char *err, size_t errlen)
{
    sluice__profile pf;
    if (sluice__spec_parse(spec, &pf, err, errlen) != 0) return NULL;
    sluice_limiter *lim = sluice__calloc(1, sizeof *lim);
    if (!lim) {
        sluice__errf(err, errlen, "out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&lim->mu, NULL) != 0) {
        sluice__free(lim);
        sluice__errf(err, errlen, "cannot create a mutex");
        return NULL;
    }
    lim->pf = pf;
    sluice__state_init(&lim->pf, &lim->st);
    return lim;
}

void sluice_limiter_free(sluice_limiter *lim)
{
    if (!lim) return;
    sluice__state_fini(&lim->pf, &lim->st);
    pthread_mutex_destroy(&lim->mu);
    sluice__free(lim);
}

void sluice__count(sluice__counters *c, uint64_t permits, bool allowed)
{
    if (permits == 0) {
        atomic_fetch_add_explicit(&c->probes, 1, memory_order_relaxed);
        return;
    }
    _Atomic uint64_t *req = allowed ? &c->requests_allowed : &c->requests_denied;
    _Atomic uint64_t *per = allowed ? &c->permits_allowed : &c->permits_denied;
    atomic_fetch_add_explicit(req, 1, memory_order_relaxed);
    /* saturating add: a permits counter stops at UINT64_MAX */
    uint64_t old = atomic_load_explicit(per, memory_order_relaxed), sum;
    do {
        sum = old + permits < old ? UINT64_MAX : old + permits;
    } while (!atomic_compare_exchange_weak_explicit(per, &old, sum, memory_order_relaxed,
                                                    memory_order_relaxed));
}

void sluice__counters_read(const sluice__counters *c, sluice_stats *out)
{
    sluice__counters *m = (sluice__counters *)c; /* loads only */
    out->requests_allowed = atomic_load_explicit(&m->requests_allowed, memory_order_relaxed);
    out->requests_denied = atomic_load_explicit(&m->requests_denied, memory_order_relaxed);
    out->permits_allowed = atomic_load_explicit(&m->permits_allowed, memory_order_relaxed);
    out->permits_denied = atomic_load_explicit(&m->permits_denied, memory_order_relaxed);
    out->probes = atomic_load_explicit(&m->probes, memory_order_relaxed);
}

static bool decide_locked(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                          uint64_t max_wait, sluice_result *res)
{
    sluice__set_error(0);
    pthread_mutex_lock(&lim->mu);
    bool ok = sluice__decide(&lim->pf, &lim->st, now_ns, permits, max_wait, res);
    pthread_mutex_unlock(&lim->mu);
    sluice__count(&lim->counters, permits, ok);
    return ok;
}

bool sluice_try_acquire_at(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                           sluice_result *res)
{
    sluice_result scratch;
    return decide_locked(lim, permits, now_ns, UINT64_MAX, res ? res : &scratch);
}

bool sluice_try_acquire(sluice_limiter *lim, uint64_t permits)
{
    sluice_result scratch;
    return decide_locked(lim, permits, sluice_now_ns(), UINT64_MAX, &scratch);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

bool sluice_acquire(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns)
{
    uint64_t start = sluice_now_ns();
    uint64_t deadline = start + timeout_ns < start ? UINT64_MAX : start + timeout_ns;
    for (;;) {
        uint64_t now = sluice_now_ns();
        uint64_t left = now < deadline ? deadline - now : 0;
        sluice_result r;
        if (decide_locked(lim, permits, now, left, &r)) {
            if (r.wait_ns) sleep_ns(r.wait_ns);
            return true;
        }
        /* -1: never (or the shaper's wait exceeds what is left) */
        if (r.retry_after_ns < 0 || (uint64_t)r.retry_after_ns > left) return false;
        sleep_ns((uint64_t)r.retry_after_ns);
    }
}

void sluice_limiter_stats(const sluice_limiter *lim, sluice_stats *out)
{
    sluice__counters_read(&lim->counters, out);
}

int sluice_spec_format(const sluice_limiter *lim, char *buf, size_t buflen)
{
    return sluice__spec_format(&lim->pf, buf, buflen);
}

int sluice_spec_check(const char *spec, char *canon, size_t canonlen, char *err,
                      size_t errlen)
{
    sluice__profile pf;
    int rc = sluice__spec_parse(spec, &pf, err, errlen);
    if (rc != 0) return rc;
    if (canon) {
        rc = sluice__spec_format(&pf, canon, canonlen);
        if (rc < 0) return rc;
    }
    return 0;
}
