/* limiter.c -- the public limiter: a profile, a state, counters.
 *
 * Every decision goes through sluice__decide(), which clamps the time to
 * the latest the state has seen (CONTRACT.md section 1) and hands the
 * request to the algorithm; tables (table.c) call the same function on
 * their per-key states, so the two can never disagree.
 *
 * Concurrency.  When the profile says the state packs into 128 bits
 * (fixed-window always; token-bucket and leaky-bucket when burst*W/gcd(L,W)
 * < 2^64, which every practical spec meets; sliding-approx when L < 2^32),
 * the state lives in one 16-byte word -- the latest time in the low half,
 * the algorithm's count in the high half -- and a decision is
 *
 *     read both halves (plain 64-bit loads; a torn pair only fails the CAS)
 *     unpack, decide with the same code as the locked path, pack
 *     compare-and-swap the 16 bytes (cmpxchg16b); on failure retry with the
 *     value the CAS returned -- someone else made progress.
 *
 * No mutex, no spin lock, no allocation: lock-free, and linearisable at the
 * successful CAS, so the decisions are exactly the contract's for the order
 * of the CASes, with any timestamps (a stale, earlier time is clamped to
 * the latest inside the loop).  The word has a cache line of its own.
 *
 * Otherwise -- sliding-log and sliding-wheel, whose ring cannot be swapped
 * in one instruction, the rare unpackable specs, and machines without a
 * 16-byte CAS -- a mutex guards the state for a few dozen instructions.
 *
 * The counters are striped per thread (counters.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#define HAVE_CAS128 1
#else
#define HAVE_CAS128 0
#endif

typedef union word {
    u128 w;
    uint64_t h[2]; /* little-endian: h[0] is the low half */
} word;

struct sluice_limiter {
    _Alignas(64) word packed; /* lock-free state, alone on its cache line */
    _Alignas(64) sluice__profile pf;
    bool lockfree;
    pthread_mutex_t mu; /* the locked path */
    sluice__state st;
    sluice__counters counters;
};

/* ---- dispatch ----------------------------------------------------------- */

void sluice__state_init(const sluice__profile *pf, sluice__state *st)
{
    (void)pf; /* every algorithm's state at rest is all zeros */
    memset(st, 0, sizeof *st);
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
        return res ? sluice__deny(res, 0, -1) : false;
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

/* ---- the packed word ---------------------------------------------------- */

void sluice__state_unpack(const sluice__profile *pf, const uint64_t in[2],
                          sluice__state *st)
{
    const uint64_t lo = in[0], hi = in[1];
    st->t_last = lo;
    switch (pf->alg) {
    case SLUICE__FIXED_WINDOW:
        st->u.fw.window = sluice__div_q(&pf->div_w, lo);
        st->u.fw.count = hi;
        break;
    case SLUICE__SLIDING_APPROX:
        st->u.sa.window = sluice__div_q(&pf->div_w, lo);
        st->u.sa.cur = hi >> 32;
        st->u.sa.prev = hi & 0xffffffffu;
        break;
    case SLUICE__TOKEN_BUCKET:
    case SLUICE__LEAKY_BUCKET: st->u.bk.deficit = hi; break;
    default: break;
    }
}

void sluice__state_pack(const sluice__profile *pf, const sluice__state *st,
                        uint64_t out[2])
{
    out[0] = st->t_last;
    switch (pf->alg) {
    case SLUICE__FIXED_WINDOW: out[1] = st->u.fw.count; break;
    case SLUICE__SLIDING_APPROX: out[1] = st->u.sa.cur << 32 | st->u.sa.prev; break;
    case SLUICE__TOKEN_BUCKET:
    case SLUICE__LEAKY_BUCKET: out[1] = (uint64_t)st->u.bk.deficit; break;
    default: out[1] = 0; break;
    }
}

static inline u128 mkword(uint64_t lo, uint64_t hi) { return (u128)hi << 64 | lo; }

#if HAVE_CAS128
static bool decide_lockfree(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                            uint64_t max_wait, sluice_result *res)
{
    const sluice__profile *pf = &lim->pf;
    uint64_t lo = __atomic_load_n(&lim->packed.h[0], __ATOMIC_RELAXED);
    uint64_t hi = __atomic_load_n(&lim->packed.h[1], __ATOMIC_RELAXED);
    u128 old = mkword(lo, hi);
    for (;;) {
        sluice__state st;
        uint64_t w[2] = {(uint64_t)old, (uint64_t)(old >> 64)};
        sluice__state_unpack(pf, w, &st);
        bool ok = sluice__decide(pf, &st, now_ns, permits, max_wait, res);
        sluice__state_pack(pf, &st, w);
        u128 new = mkword(w[0], w[1]);
        u128 cur = __sync_val_compare_and_swap(&lim->packed.w, old, new);
        if (cur == old) return ok;
        old = cur;
    }
}
#endif

/* ---- public API --------------------------------------------------------- */

sluice_limiter *sluice_limiter_new(const char *spec, char *err, size_t errlen)
{
    sluice__profile pf;
    if (sluice__spec_parse(spec, &pf, err, errlen) != 0) return NULL;
    sluice_limiter *lim = sluice__malloc(sizeof *lim);
    if (!lim) {
        sluice__errf(err, errlen, "out of memory");
        return NULL;
    }
    memset(lim, 0, sizeof *lim);
    if (pthread_mutex_init(&lim->mu, NULL) != 0) {
        sluice__free(lim);
        sluice__errf(err, errlen, "cannot create a mutex");
        return NULL;
    }
    lim->pf = pf;
    lim->lockfree = HAVE_CAS128 && pf.packed;
    sluice__state_init(&lim->pf, &lim->st);
    uint64_t w[2];
    sluice__state_pack(&lim->pf, &lim->st, w);
    lim->packed.w = mkword(w[0], w[1]);
    return lim;
}

void sluice_limiter_free(sluice_limiter *lim)
{
    if (!lim) return;
    sluice__state_fini(&lim->pf, &lim->st);
    pthread_mutex_destroy(&lim->mu);
    sluice__free(lim);
}

static inline bool decide(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                          uint64_t max_wait, sluice_result *res)
{
    bool ok;
    sluice__set_error(0);
#if HAVE_CAS128
    if (lim->lockfree) {
        ok = decide_lockfree(lim, permits, now_ns, max_wait, res);
        sluice__count(&lim->counters, permits, ok);
        return ok;
    }
#endif
    pthread_mutex_lock(&lim->mu);
    ok = sluice__decide(&lim->pf, &lim->st, now_ns, permits, max_wait, res);
    pthread_mutex_unlock(&lim->mu);
    sluice__count(&lim->counters, permits, ok);
    return ok;
}

bool sluice_try_acquire_at(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                           sluice_result *res)
{
    return decide(lim, permits, now_ns, UINT64_MAX, res);
}

bool sluice_try_acquire(sluice_limiter *lim, uint64_t permits)
{
    return decide(lim, permits, sluice__clock_now(lim->pf.clock), UINT64_MAX, NULL);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

bool sluice_acquire(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns)
{
    uint64_t start = sluice__clock_now(lim->pf.clock);
    uint64_t deadline = start + timeout_ns < start ? UINT64_MAX : start + timeout_ns;
    for (;;) {
        uint64_t now = sluice__clock_now(lim->pf.clock);
        uint64_t left = now < deadline ? deadline - now : 0;
        sluice_result r;
        if (decide(lim, permits, now, left, &r)) {
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
