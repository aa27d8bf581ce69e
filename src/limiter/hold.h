/* hold.h -- a limiter as one limit of a composite decision (hold.c,
 * "composite decisions"): the kind ops that composite/ runs its protocol
 * over, and the fast path for composites of lock-free limiters only.
 *
 *   sluice__lim_hold               a limiter held: its frozen word or mutex
 *   sluice__limiter_hold/_release  take it (fills h.pf, h.st), give it back
 *   sluice__limiter_count(_elsewhere)  count the decision in the limiter
 *   sluice__limiters_try/_each     the fast path (composite.c's head
 *                                  comment has its proof)
 */
#ifndef SLUICE_LIMITER_HOLD_H
#define SLUICE_LIMITER_HOLD_H

#include "alg/held.h"
#include "base/internal.h"

typedef struct sluice__lim_hold {
    sluice__held h;       /* first: what every kind of limit gives */
    sluice_limiter *lim;
    void *where;          /* the configuration held */
    bool lockfree;        /* a frozen word is held, not the mutex */
    u128 snap;            /* the frozen word's value */
} sluice__lim_hold;

/* Hold a limiter for a composite (its mutex, or its frozen word: single
 * decisions wait for it), fill h.pf and h.st; release it, storing h.tmp
 * first if `commit` and the state is not on the heap.  A limiter in the
 * locked path commits a window log by deciding on its real state before
 * the release.  Between the two, the caller must not wait for anything
 * that another holder may hold out of the global lock order. */
SLUICE__INTERNAL void sluice__limiter_hold(sluice__lim_hold *part);
SLUICE__INTERNAL void sluice__limiter_release(sluice__lim_hold *part, bool commit);
SLUICE__INTERNAL void sluice__limiter_count(sluice_limiter *lim, uint64_t permits, bool ok);
/* After the count of a refused composite: this limit would have admitted
 * (sluice__count_elsewhere). */
SLUICE__INTERNAL void sluice__limiter_count_elsewhere(sluice_limiter *lim, uint64_t permits);

/* What decides a composite call that the fast path below does not: the
 * public call's arguments and answer (sluice_composite_try_acquire_at). */
typedef bool sluice__composite_fn(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                                  uint64_t now_ns, sluice_result *res,
                                  sluice_result *per_limit);

/* The whole composite when the refs are 1 to SLUICE_COMPOSITE_MAX distinct
 * lock-free limiters, without holding anything while deciding, counted in
 * each limiter.  sluice__limiters_try: whether admitted (or a probe every
 * limit allows), the combination of the limits' answers (sluice__combine)
 * into *res unless res is NULL; any other call (a bad one, a table key, a
 * limiter twice or in the locked path) is handed, with nothing decided or
 * counted, to `otherwise` (per_limit NULL; now_ns capped at INT64_MAX, as
 * every decision takes it) -- a tail call, so that the
 * fast path costs no frame of its caller's: composite.c passes its general
 * path.  sluice__limiters_each: each limit's answer into ans; 1 admitted
 * (or a probe every limit allows), 0 refused, -1 for any other call,
 * nothing decided or counted. */
SLUICE__INTERNAL bool sluice__limiters_try(const sluice_limit_ref *refs, size_t n,
                                           uint64_t permits, uint64_t now_ns,
                                           sluice_result *res, sluice__composite_fn *otherwise);
SLUICE__INTERNAL int sluice__limiters_each(const sluice_limit_ref *refs, size_t n,
                                           uint64_t permits, uint64_t now_ns,
                                           sluice__answer *ans);

#endif /* SLUICE_LIMITER_HOLD_H */
