/* lim.h -- the private header of the limiter's files (limiter.c has the
 * design): the packed word, a configuration, the handle, and what one file
 * calls in another.
 *
 * Map:  the word (word, FROZEN, mkword, load_word: its snapshot, proved
 *       there; wait_frozen); a configuration (cfg); the handle (struct sluice_limiter,
 *       cur_cfg, is_bucket); across files:
 *         limiter.c  the word's decisions, the public API, reservations,
 *                    changes of spec (sluice__lim_decide)
 *         wait.c     blocking acquires and cancellers
 *         hold.c     a limiter as one limit of a composite: its kind ops
 *                    and the composite fast path
 * The hot paths' helpers are static inline here, so that limiter.c's and
 * hold.c's decisions inline them as they did in one file. */
#ifndef SLUICE_LIMITER_LIM_H
#define SLUICE_LIMITER_LIM_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "alg/alg.h"
#include "base/clock.h"
#include "base/counters.h"
#include "limiter/limiter.h"
#include "limiter/hold.h"
#include "alg/bucket.h"
#include "alg/reconfigure.h"
#include "base/spin.h"
#include "alg/window_log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define HAVE_CAS128 SLUICE__CAS128 /* internal.h */

typedef union word {
    u128 w;
    uint64_t h[2]; /* little-endian: h[0] is the low half */
} word;

/* The time half of a packed word is at most 2^63-1; its top bit marks the
 * word frozen: held by a composite decision or a reconfiguration (see the
 * head comment).  A frozen word is never a value a decision expects, so
 * every compare-and-swap on it fails until it is released. */
#define FROZEN ((uint64_t)1 << 63)

/* One configuration of a limiter: its profile, whether it decides
 * lock-free, and (if so) the packed state word it decides on.  Immutable
 * but for the word.  A reconfiguration publishes a new one and leaves the
 * old word frozen for ever; retired configurations are kept, linked by
 * `older`, until the limiter is freed.  The first is part of the limiter
 * (`first`): until a change of spec, a refusal finds it from the limiter's
 * address, without waiting for the load of `cur`. */
typedef struct cfg {
    _Alignas(64) word packed; /* lock-free state, on a cache line with: */
    _Atomic uint64_t hint;    /* the refusals' hint (head comment) */
    _Atomic bool hinted;      /* lock-free, and no give-back yet: the hint is on */
    clockid_t clock;          /* what the live form reads: pf.clock's */
    bool lockfree;            /* on the word's line: a refusal reads it too */
    _Alignas(64) sluice__profile pf;
    struct cfg *older;
} cfg;

struct sluice_limiter {
    _Atomic(cfg *) cur;  /* the current configuration */
    const sluice__alg_ops *ops; /* the algorithm's row: never changes */
    pthread_mutex_t mu;  /* the locked path; serialises reconfigurations */
    sluice__state st;    /* the locked path's state */
    sluice__logpub *pub; /* sliding-log, sliding-wheel: st's log as refusals
                          * read it without mu (window_log.c); else NULL */
    _Atomic uint32_t refs; /* the creator's, plus one per sluice__limiter_retain */
    cfg first;           /* the configuration it was made with */
    sluice__counters counters;
    sluice__waits waits; /* blocking acquires (counters.h) */
};

static inline cfg *cur_cfg(const sluice_limiter *lim)
{
    return atomic_load_explicit(&((sluice_limiter *)lim)->cur, memory_order_acquire);
}

static inline bool is_bucket(const sluice_limiter *lim) { return lim->ops->bucket; }

static inline u128 mkword(uint64_t lo, uint64_t hi) { return (u128)hi << 64 | lo; }

#if HAVE_CAS128
/* What a call does to a state: decide (try_acquire, acquire), reserve, or
 * give a reservation's permits back (at_ns: the reservation's time; the
 * permits go back only if the clamped time is before it).  *t_eff receives
 * the time the call was decided at: now_ns clamped to the latest
 * admission, and to 2^63-1.
 * A settle (OP_SETTLE) takes its reservation from *sq (sluice__settle_req,
 * with pf0 the profile it was made under: under another, nothing is given
 * back, only an excess charged); it returns false only when the state
 * could not take it (SLUICE_ENOMEM).  A bucket's reserve, when sq is not
 * NULL, leaves there its time and the deficit it left (the settle's memo):
 * the last call's, which is the one committed. */
enum op { OP_DECIDE, OP_RESERVE, OP_GIVE_BACK, OP_SETTLE };

typedef struct settle_op {
    sluice__settle_req q;
    const sluice__profile *pf0;
} settle_op;

static inline bool apply(const sluice__profile *pf, sluice__state *st, enum op op,
                         uint64_t now_ns, uint64_t permits, uint64_t max_wait,
                         uint64_t at_ns, sluice_result *res, uint64_t *t_eff, settle_op *sq)
{
    uint64_t t = sluice__clamp_time(st, now_ns);
    *t_eff = t;
    if (op == OP_DECIDE) return sluice__decide(pf, st, t, permits, max_wait, res);
    if (op == OP_RESERVE) {
        const bool ok = sluice__bucket_reserve(pf, st, t, permits, max_wait, res);
        if (ok && sq) {
            sq->q.t0 = t;
            sq->q.d1 = st->u.bk.deficit;
        }
        return ok;
    }
    if (op == OP_SETTLE) {
        sluice__settle_req q = sq->q;
        if (pf != sq->pf0 && q.a < q.p) return true; /* units changed: keep them */
        return pf->ops->settle(pf, st, t, &q) == 0;
    }
    return sluice__bucket_give_back(pf, st, t, permits, at_ns);
}

/* A consistent snapshot of the 16-byte word without writing it, or false
 * when the word is frozen.  The time half only grows but for the frozen
 * bit (every write stores the clamped time, which is >= the one it
 * replaces; a holder of the frozen word writes the count half before it
 * clears the bit, with release order), so if two loads of it around the
 * load of the count half agree and are not frozen, the pair read is a
 * value the word held at an instant between the loads.  (Each half is an
 * aligned 8-byte load, atomic on x86-64, and cmpxchg16b writes all 16
 * bytes at once; the acquire loads keep the three in program order.)
 * Retried only when a write moved the time: some other decision admitted,
 * so the loop is lock-free. */
static inline bool load_word(const word *pw, u128 *out)
{
    for (;;) {
        uint64_t lo = __atomic_load_n(&pw->h[0], __ATOMIC_ACQUIRE);
        if (lo & FROZEN) return false;
        uint64_t hi = __atomic_load_n(&pw->h[1], __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&pw->h[0], __ATOMIC_ACQUIRE) == lo) {
            *out = mkword(lo, hi);
            return true;
        }
    }
}
#endif

/* Wait while c's word is frozen; returns the configuration to use next:
 * c once its word is released, or the new one a reconfiguration
 * published. */
static inline cfg *wait_frozen(sluice_limiter *lim, cfg *c)
{
    for (unsigned n = 0;; n++) {
        cfg *now = cur_cfg(lim);
        if (now != c) return now;
        if (!(__atomic_load_n(&c->packed.h[0], __ATOMIC_ACQUIRE) & FROZEN)) return c;
        sluice__backoff(n);
    }
}

/* limiter.c: one decision, counted, out of line (the blocking acquires'
 * step). */
SLUICE__INTERNAL bool sluice__lim_decide(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                                         uint64_t max_wait, sluice_result *res);

#endif /* SLUICE_LIMITER_LIM_H */
