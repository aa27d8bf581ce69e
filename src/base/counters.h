/* counters.h -- exact decision counters, striped per thread (counters.c).
 * Shared by limiters and tables.
 *
 * Entry points: the inline counts of the hot paths (sluice__count,
 * _count_denied, _count_denied_at, _count_elsewhere; a tally of a burst,
 * sluice__tally_add then sluice__count_tally), the slow and read sides in
 * counters.c, and the wait histogram (sluice__waits_count, _read).
 */
#ifndef SLUICE_COUNTERS_H
#define SLUICE_COUNTERS_H

#include "base/internal.h"

/* Decision counters, shared by limiters and tables.  Striped: a thread
 * owns one of the first SLUICE__STRIPES - 1 stripes for its lifetime
 * (counters.c) and adds to it with plain loads and stores -- no locked
 * instruction, no cache line shared with another thread; threads beyond
 * those share the last stripe, with atomic read-modify-writes.  Reading
 * sums the stripes. */
#define SLUICE__STRIPES 16
typedef struct sluice__stripe {
    _Alignas(64) _Atomic uint64_t requests_allowed, requests_denied;
    _Atomic uint64_t permits_allowed, permits_denied, probes;
    _Atomic uint64_t denied_elsewhere, permits_elsewhere; /* sluice__count_elsewhere */
} sluice__stripe;
typedef struct sluice__counters {
    sluice__stripe s[SLUICE__STRIPES];
} sluice__counters;
/* The stripe the calling thread counts in, chosen at its first call: below
 * SLUICE__STRIPES - 1 it is the thread's own (plain stores are exact);
 * SLUICE__STRIPES - 1 is shared (atomic read-modify-writes).  For other
 * striped counters (rules.c). */
SLUICE__INTERNAL unsigned sluice__counter_stripe(void);
/* Count one decision.  Inline: a thread that owns its stripe adds with two
 * plain loads and stores; its first call and the shared stripe go to
 * sluice__count_slow.  sluice__my_slot is the thread's slot + 1, 0 until
 * chosen (counters.c). */
SLUICE__INTERNAL extern _Thread_local unsigned sluice__my_slot;
SLUICE__INTERNAL void sluice__count_slow(sluice__counters *c, uint64_t permits,
                                         bool allowed);
/* sluice__count_slow(c, permits, false), returning false. */
SLUICE__INTERNAL bool sluice__count_slow_denied(sluice__counters *c, uint64_t permits);
static inline uint64_t sluice__sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}
/* Owner-only update: no other thread writes this stripe. */
static inline void sluice__own_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, sluice__sat_add(atomic_load_explicit(c, memory_order_relaxed), v),
                          memory_order_relaxed);
}
/* A stripe's count plus v, saturating: by its owner (own: a relaxed load
 * and store, sluice__own_add), or on a stripe several threads share (an
 * atomic read-modify-write).  The one way a stripe is added to, in process
 * (sluice__counters) and in a shared region (src/table/region_who.c). */
static inline void sluice__stripe_add(_Atomic uint64_t *c, uint64_t v, bool own)
{
    if (own) {
        sluice__own_add(c, v);
        return;
    }
    uint64_t old = atomic_load_explicit(c, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(c, &old, sluice__sat_add(old, v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}
/* The sum of one count over n stripes, saturating: the count at byte `off`
 * of each stripe, the stripes `stride` bytes apart from `first` (relaxed
 * loads: each count exact, the set possibly of different instants).  The
 * one way stripes are read, wherever they lie: sluice__counters_read, and
 * a shared region's stripes (src/table/region_keys.c). */
static inline uint64_t sluice__stripes_sum(const void *first, size_t stride, unsigned n,
                                           size_t off)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < n; i++) {
        _Atomic uint64_t *c =
            (_Atomic uint64_t *)(void *)((unsigned char *)first + (size_t)i * stride + off);
        sum = sluice__sat_add(sum, atomic_load_explicit(c, memory_order_relaxed));
    }
    return sum;
}
/* Owner-only count of one more request: not saturated, as the shared
 * stripe's atomic add is not (2^64 requests take centuries). */
static inline void sluice__own_inc(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
static inline void sluice__count(sluice__counters *c, uint64_t permits, bool allowed)
{
    const unsigned slot = sluice__my_slot - 1; /* UINT_MAX when not chosen */
    if (slot >= SLUICE__STRIPES - 1) {
        sluice__count_slow(c, permits, allowed);
        return;
    }
    sluice__stripe *s = &c->s[slot];
    sluice__own_inc(permits == 0 ? &s->probes
                    : allowed    ? &s->requests_allowed
                                 : &s->requests_denied);
    if (permits) sluice__own_add(allowed ? &s->permits_allowed : &s->permits_denied, permits);
}
/* sluice__count of a refusal of permits >= 1 by the thread whose
 * sluice__my_slot - 1 is `slot` (read early by a caller that reads the
 * clock in between: the thread-local load is then done by the time the
 * refusal is known); returns false, so that the caller can end with it.
 * Written out rather than through a sluice__count taking the slot: that
 * version cost the window logs' hinted refusals 0.04x of the clock+2ld
 * floor (bench_decide, alternated builds), past the 1.15x target. */
static inline bool sluice__count_denied_at(sluice__counters *c, unsigned slot,
                                           uint64_t permits)
{
    if (__builtin_expect(slot >= SLUICE__STRIPES - 1, 0))
        return sluice__count_slow_denied(c, permits);
    sluice__stripe *s = &c->s[slot];
    sluice__own_inc(&s->requests_denied);
    sluice__own_add(&s->permits_denied, permits);
    return false;
}
static inline bool sluice__count_denied(sluice__counters *c, uint64_t permits)
{
    return sluice__count_denied_at(c, sluice__my_slot - 1, permits);
}
/* Mark a refusal already counted (sluice__count, permits >= 1) as one a
 * composite made for another limit while this one would have admitted:
 * sluice_stats.requests_denied_elsewhere, a part of requests_denied. */
static inline void sluice__count_elsewhere(sluice__counters *c, uint64_t permits)
{
    const unsigned slot = sluice__my_slot - 1; /* chosen by the count before */
    if (slot >= SLUICE__STRIPES - 1) {
        sluice__stripe *s = &c->s[SLUICE__STRIPES - 1];
        atomic_fetch_add_explicit(&s->denied_elsewhere, 1, memory_order_relaxed);
        sluice__stripe_add(&s->permits_elsewhere, permits, false);
        return;
    }
    sluice__stripe *s = &c->s[slot];
    sluice__own_inc(&s->denied_elsewhere);
    sluice__own_add(&s->permits_elsewhere, permits);
}
/* Decisions tallied locally and counted at once (a burst counts its
 * decisions when it returns: one stripe update, not one per decision). */
typedef struct sluice__tally {
    uint64_t requests_allowed, requests_denied, permits_allowed, permits_denied, probes;
} sluice__tally;
static inline void sluice__tally_add(sluice__tally *t, uint64_t permits, bool allowed)
{
    if (permits == 0) t->probes++;
    else if (allowed) t->requests_allowed++, t->permits_allowed = sluice__sat_add(t->permits_allowed, permits);
    else t->requests_denied++, t->permits_denied = sluice__sat_add(t->permits_denied, permits);
}
SLUICE__INTERNAL void sluice__count_tally(sluice__counters *c, const sluice__tally *t);
SLUICE__INTERNAL void sluice__counters_read(const sluice__counters *c,
                                            sluice_stats *out);

/* Wait histograms (sluice_wait_stats): the bucket of a wait, and a striped
 * histogram for the blocking acquires of a limiter, written like the
 * decision counters (a thread's own stripe, plain loads and stores; the
 * shared last stripe with atomic read-modify-writes).  Bucket counts are
 * per bucket, not cumulative, so a wait is one increment. */
SLUICE__INTERNAL unsigned sluice__wait_bucket(uint64_t wait_ns);
typedef struct sluice__wait_stripe {
    _Alignas(64) _Atomic uint64_t n[SLUICE_WAIT_BUCKETS + 1];
    _Atomic uint64_t sum_ns, timed_out, cancelled, failed;
} sluice__wait_stripe;
typedef struct sluice__waits {
    sluice__wait_stripe s[SLUICE__STRIPES];
} sluice__waits;
/* Count the end of a blocking acquire: rc 0 records `wait_ns` in the
 * histogram, SLUICE_ETIMEDOUT / SLUICE_ECANCELED / another code count in
 * timed_out / cancelled / failed. */
SLUICE__INTERNAL void sluice__waits_count(sluice__waits *w, int rc, uint64_t wait_ns);
SLUICE__INTERNAL void sluice__waits_read(const sluice__waits *w, sluice_wait_stats *out);

#endif /* SLUICE_COUNTERS_H */
