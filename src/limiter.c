/* limiter.c -- the public limiter: a profile, a state, counters.
 *
 * Every decision goes through sluice__decide() (internal.h), which clamps
 * the time to the latest admission (docs/decisions.md, section 1) and
 * hands the request to the algorithm's row of operations; tables (table.c)
 * call the same function on their per-key states, so the two can never
 * disagree.  Only an admission writes: an algorithm's decide leaves the
 * state untouched when it refuses or answers a probe.
 *
 * Concurrency.  When the profile says the state packs into 128 bits
 * (fixed-window always; token-bucket and leaky-bucket when burst*W/gcd(L,W)
 * < 2^64, which every practical spec meets; sliding-approx when L < 2^32),
 * the state lives in one 16-byte word -- the latest admission's time in
 * the low half, the algorithm's count in the high half -- and a decision is
 *
 *     read the word without writing it (load_word: two loads of the time
 *     half around one of the count half; proof at load_word)
 *     unpack, decide with the same code as the locked path, pack
 *     nothing changed (a refusal, a probe): return -- no store, no CAS
 *     else compare-and-swap the 16 bytes (cmpxchg16b); on failure retry
 *     with the value the CAS returned -- someone else admitted.
 *
 * No mutex, no spin lock, no allocation: lock-free, linearisable at the
 * snapshot for a refusal and at the successful CAS for an admission, so
 * the decisions are exactly the contract's for that order, with any
 * timestamps (a stale, earlier time is clamped inside the loop).  The word
 * has a cache line of its own, which under overload only ever is read, so
 * threads refusing on one limiter share it without moving it.
 *
 * Otherwise -- sliding-log and sliding-wheel, whose ring cannot be swapped
 * in one instruction, the rare unpackable specs, and machines without a
 * 16-byte CAS -- a mutex guards the state for a few dozen instructions.
 *
 * The counters are striped per thread (counters.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"
#include "counters.h"
#include "limiter.h"

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
    _Atomic uint32_t refs; /* the creator's, plus one per sluice__limiter_retain */
    sluice__counters counters;
};


/* ---- the packed word ---------------------------------------------------- */

static inline u128 mkword(uint64_t lo, uint64_t hi) { return (u128)hi << 64 | lo; }

/* What a call does to a state: decide (try_acquire, acquire), reserve, or
 * give a reservation's permits back (at_ns: the reservation's time; the
 * permits go back only if the clamped time is before it).  *t_eff receives
 * the time the call was decided at: now_ns clamped to the latest
 * admission, and to 2^63-1. */
enum op { OP_DECIDE, OP_RESERVE, OP_GIVE_BACK };

static inline bool apply(const sluice__profile *pf, sluice__state *st, enum op op,
                         uint64_t now_ns, uint64_t permits, uint64_t max_wait,
                         uint64_t at_ns, sluice_result *res, uint64_t *t_eff)
{
    uint64_t t = sluice__clamp_time(st, now_ns);
    *t_eff = t;
    if (op == OP_DECIDE) return sluice__decide(pf, st, t, permits, max_wait, res);
    if (op == OP_RESERVE) return sluice__bucket_reserve(pf, st, t, permits, max_wait, res);
    return sluice__bucket_give_back(pf, st, t, permits, at_ns);
}

#if HAVE_CAS128
/* A consistent snapshot of the 16-byte word without writing it.  The time
 * half only grows (every write stores the clamped time, which is >= the
 * one it replaces), so if two loads of it around the load of the count
 * half agree, every write that landed in between left the time unchanged,
 * and the count half that was read sat in the word beside exactly that
 * time at the instant it was loaded: the pair is the word's value at that
 * instant.  (Each half is an aligned 8-byte load, atomic on x86-64, and
 * cmpxchg16b writes all 16 bytes at once; the acquire loads keep the three
 * in program order.)  Retried only when a write moved the time: some other
 * decision admitted, so the loop is lock-free. */
static inline u128 load_word(const word *pw)
{
    for (;;) {
        uint64_t lo = __atomic_load_n(&pw->h[0], __ATOMIC_ACQUIRE);
        uint64_t hi = __atomic_load_n(&pw->h[1], __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&pw->h[0], __ATOMIC_ACQUIRE) == lo) return mkword(lo, hi);
    }
}

/* Lock-free: decide on a snapshot; a refusal or a probe leaves the state as
 * it was and returns with no write at all (linearised at the snapshot);
 * anything else commits with one compare-and-swap, retried from the value
 * the CAS saw (linearised at the successful CAS). */
static bool decide_lockfree(sluice_limiter *lim, enum op op, uint64_t permits, uint64_t now_ns,
                            uint64_t max_wait, uint64_t at_ns, sluice_result *res,
                            uint64_t *t_eff)
{
    const sluice__profile *pf = &lim->pf;
    u128 old = load_word(&lim->packed);
    for (;;) {
        sluice__state st;
        uint64_t w[2] = {(uint64_t)old, (uint64_t)(old >> 64)};
        sluice__state_unpack(pf, w, &st);
        bool ok = apply(pf, &st, op, now_ns, permits, max_wait, at_ns, res, t_eff);
        sluice__state_pack(pf, &st, w);
        u128 new = mkword(w[0], w[1]);
        if (new == old) return ok; /* nothing to write */
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
    sluice_limiter *lim = sluice__calloc64(sizeof *lim);
    if (!lim) {
        sluice__errf(err, errlen, "out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&lim->mu, NULL) != 0) {
        sluice__free64(lim);
        sluice__errf(err, errlen, "cannot create a mutex");
        return NULL;
    }
    atomic_init(&lim->refs, 1);
    lim->pf = pf;
    lim->lockfree = HAVE_CAS128 && pf.packed;
    sluice__state_init(&lim->pf, &lim->st);
    if (pf.packed) {
        uint64_t w[2];
        sluice__state_pack(&lim->pf, &lim->st, w);
        lim->packed.w = mkword(w[0], w[1]);
    }
    return lim;
}

void sluice_limiter_free(sluice_limiter *lim)
{
    if (!lim) return;
    if (atomic_fetch_sub_explicit(&lim->refs, 1, memory_order_acq_rel) != 1) return;
    sluice__state_fini(&lim->pf, &lim->st);
    pthread_mutex_destroy(&lim->mu);
    sluice__free64(lim);
}

static inline bool run(sluice_limiter *lim, enum op op, uint64_t permits, uint64_t now_ns,
                       uint64_t max_wait, uint64_t at_ns, sluice_result *res, uint64_t *t_eff)
{
    bool ok;
#if HAVE_CAS128
    if (lim->lockfree) {
        ok = decide_lockfree(lim, op, permits, now_ns, max_wait, at_ns, res, t_eff);
    } else
#endif
    {
        pthread_mutex_lock(&lim->mu);
        ok = apply(&lim->pf, &lim->st, op, now_ns, permits, max_wait, at_ns, res, t_eff);
        pthread_mutex_unlock(&lim->mu);
    }
    if (op != OP_GIVE_BACK) sluice__count(&lim->counters, permits, ok);
    return ok;
}

static inline bool decide(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                          uint64_t max_wait, sluice_result *res)
{
    uint64_t t;
    return run(lim, OP_DECIDE, permits, now_ns, max_wait, 0, res, &t);
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

static bool is_bucket(const sluice_limiter *lim) { return lim->pf.ops->bucket; }

bool sluice__limiter_is_bucket(const sluice_limiter *lim) { return is_bucket(lim); }

uint64_t sluice__limiter_capacity(const sluice_limiter *lim) { return lim->pf.capacity; }

void sluice__limiter_retain(sluice_limiter *lim)
{
    atomic_fetch_add_explicit(&lim->refs, 1, memory_order_relaxed);
}

enum { RV_NONE, RV_ACTIVE, RV_FINAL };

bool sluice_reserve_at(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                       uint64_t max_wait_ns, sluice_reservation *rv, sluice_result *res)
{
    sluice_result r;
    uint64_t t;
    bool ok = is_bucket(lim) ? run(lim, OP_RESERVE, permits, now_ns, max_wait_ns, 0, &r, &t)
                             : run(lim, OP_DECIDE, permits, now_ns, UINT64_MAX, 0, &r, &t);
    if (res) *res = r;
    if (rv) {
        rv->permits = ok ? permits : 0;
        rv->wait_ns = ok ? r.wait_ns : 0;
        rv->at_ns = ok ? t + r.wait_ns : 0; /* <= 2^63-1: the reserve bounds it */
        rv->limiter = lim;
        rv->state = ok && is_bucket(lim) && permits ? RV_ACTIVE : RV_FINAL;
    }
    return ok;
}

int sluice_reservation_cancel_at(sluice_reservation *rv, uint64_t now_ns)
{
    if (!rv || rv->state == RV_NONE || !rv->limiter) return SLUICE_EINVAL;
    sluice_limiter *lim = rv->limiter;
    if (!is_bucket(lim)) return SLUICE_EINVAL;
    if (rv->state != RV_ACTIVE) return SLUICE_ENOENT;
    rv->state = RV_FINAL;
    /* whether the permits go back is decided inside the update, at the
     * clamped time: a stale now_ns cannot give back what a later admission
     * already counted on */
    uint64_t t;
    return run(lim, OP_GIVE_BACK, rv->permits, now_ns, 0, rv->at_ns, NULL, &t) ? 0
                                                                              : SLUICE_ENOENT;
}

/* ---- waiting ------------------------------------------------------------ */

struct sluice_canceller {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool cancelled;
};

sluice_canceller *sluice_canceller_new(void)
{
    sluice_canceller *c = sluice__calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) goto fail;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) goto fail;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        pthread_cond_destroy(&c->cv);
        goto fail;
    }
    return c;
fail:
    sluice__free(c);
    return NULL;
}

void sluice_canceller_free(sluice_canceller *c)
{
    if (!c) return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    sluice__free(c);
}

void sluice_canceller_cancel(sluice_canceller *c)
{
    pthread_mutex_lock(&c->mu);
    c->cancelled = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

bool sluice_canceller_cancelled(sluice_canceller *c)
{
    pthread_mutex_lock(&c->mu);
    bool v = c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return v;
}

/* Sleep until CLOCK_MONOTONIC reaches `until`; false if c was cancelled
 * first.  `now` and `until` are on the limiter's clock, which may be the
 * coarse one: the same axis. */
static bool sleep_until(uint64_t until, sluice_canceller *c)
{
    if (!c) {
        for (;;) {
            uint64_t now = sluice_now_ns();
            if (now >= until) return true;
            uint64_t ns = until - now;
            struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
            nanosleep(&ts, NULL); /* EINTR: loop and sleep what is left */
        }
    }
    struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
    pthread_mutex_lock(&c->mu);
    while (!c->cancelled && sluice_now_ns() < until)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) break;
    bool ok = !c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

int sluice_acquire_cancellable(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns,
                               sluice_canceller *c)
{
    const sluice__clock clk = lim->pf.clock;
    uint64_t start = sluice__clock_now(clk);
    uint64_t deadline = start + timeout_ns < start ? UINT64_MAX : start + timeout_ns;
    for (;;) {
        if (c && sluice_canceller_cancelled(c)) return SLUICE_ECANCELED;
        uint64_t now = sluice__clock_now(clk);
        uint64_t left = now < deadline ? deadline - now : 0;
        if (is_bucket(lim)) {
            /* x/time/rate's Wait: book the permits now, with a wait that
             * fits the time left, or take nothing and return at once */
            sluice_reservation rv;
            sluice_result r;
            if (!sluice_reserve_at(lim, permits, now, left, &rv, &r)) return SLUICE_ETIMEDOUT;
            if (rv.wait_ns == 0 || sleep_until(rv.at_ns, c)) return 0;
            sluice_reservation_cancel_at(&rv, sluice__clock_now(clk));
            return SLUICE_ECANCELED;
        }
        sluice_result r;
        if (decide(lim, permits, now, left, &r)) return 0;
        if (r.error) return r.error; /* sliding-log, sliding-wheel: no memory */
        /* -1: never; or more than the time left */
        if (r.retry_after_ns < 0 || (uint64_t)r.retry_after_ns > left) return SLUICE_ETIMEDOUT;
        if (!sleep_until(now + (uint64_t)r.retry_after_ns, c)) return SLUICE_ECANCELED;
    }
}

bool sluice_acquire(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns)
{
    return sluice_acquire_cancellable(lim, permits, timeout_ns, NULL) == 0;
}

void sluice_limiter_stats_get(const sluice_limiter *lim, sluice_stats *out)
{
    sluice__counters_read(&lim->counters, out);
}

int sluice_limiter_spec_format(const sluice_limiter *lim, char *buf, size_t buflen)
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

void sluice_limiter_spec_get(const sluice_limiter *lim, sluice_spec_info *out)
{
    sluice__spec_info(&lim->pf, out);
}
