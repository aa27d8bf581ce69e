/* counters.c -- exact decision counters that cost no locked instruction.
 *
 * Every decision adds to a requests counter and a permits counter.  Two
 * atomic read-modify-writes per decision would cost more than the decision
 * itself (about 6 ns each here) and, with threads sharing a counter, would
 * put a second contended cache line on every call.  So a thread takes, at
 * its first decision, one of SLUICE__STRIPES - 1 process-wide slots, and
 * every counters block has a stripe (a cache line) per slot: the owner of a
 * slot is the only writer of that stripe, so a relaxed load and a relaxed
 * store (plain moves on x86) are exact.  A pthread key returns the slot when
 * the thread exits; its counts stay in the stripe for the next owner to add
 * to.  Threads that find no free slot use the last stripe, shared, with
 * atomic read-modify-writes: still exact, only slower.
 *
 * A reader sums the stripes with relaxed loads: each counter is exact, and
 * the set may mix instants while decisions run.
 *
 * The wait histograms of blocking acquires use the same slots: a stripe per
 * slot holds one counter per bucket (not cumulative: a wait is one add)
 * and the sum; the bucket is found by a binary search over the 16 integer
 * bounds in ns, so placement is exact, with no floating point.
 *
 * Sections and entry points:
 *   decision counters  sluice__counter_stripe (the thread's slot),
 *                      sluice__count_slow, _count_slow_denied, _count_tally,
 *                      sluice__counters_read (the sum of the stripes)
 *   wait histograms    sluice_wait_bucket_bound_ns, sluice__wait_bucket,
 *                      sluice__waits_count, sluice__waits_read
 */
#define _GNU_SOURCE
#include "base/counters.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define SHARED (SLUICE__STRIPES - 1)

static _Atomic uint32_t slots_taken; /* bit i: slot i owned */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static bool key_ok;
/* 0: not yet chosen; else slot + 1.  The default TLS model, never
 * initial-exec: libsluice.so must stay loadable by dlopen() (no STATIC_TLS);
 * tests/tls_model.sh checks it. */
_Thread_local unsigned sluice__my_slot;

static void release_slot(void *v)
{
    unsigned slot = (unsigned)(uintptr_t)v - 1;
    atomic_fetch_and_explicit(&slots_taken, ~(1u << slot), memory_order_release);
}

static void make_key(void) { key_ok = pthread_key_create(&key, release_slot) == 0; }

static unsigned choose_slot(void)
{
    unsigned slot = SHARED;
    pthread_once(&key_once, make_key);
    if (key_ok) {
        uint32_t cur = atomic_load_explicit(&slots_taken, memory_order_relaxed);
        for (;;) {
            uint32_t free_bits = ~cur & ((1u << SHARED) - 1);
            if (!free_bits) break;
            unsigned i = (unsigned)__builtin_ctz(free_bits);
            if (atomic_compare_exchange_weak_explicit(&slots_taken, &cur, cur | (1u << i),
                                                      memory_order_acquire, memory_order_relaxed)) {
                if (pthread_setspecific(key, (void *)(uintptr_t)(i + 1)) == 0) {
                    slot = i;
                } else {
                    release_slot((void *)(uintptr_t)(i + 1));
                }
                break;
            }
        }
    }
    sluice__my_slot = slot + 1;
    return slot;
}


static inline void shared_add(_Atomic uint64_t *c, uint64_t v) { sluice__stripe_add(c, v, false); }

unsigned sluice__counter_stripe(void)
{
    return sluice__my_slot ? sluice__my_slot - 1 : choose_slot();
}

/* sluice__count (counters.h) for a thread's first call and for the shared
 * stripe. */
void sluice__count_slow(sluice__counters *c, uint64_t permits, bool allowed)
{
    unsigned slot = sluice__counter_stripe();
    sluice__stripe *s = &c->s[slot];
    _Atomic uint64_t *req = permits == 0 ? &s->probes
                          : allowed      ? &s->requests_allowed
                                         : &s->requests_denied;
    _Atomic uint64_t *per = allowed ? &s->permits_allowed : &s->permits_denied;
    if (slot != SHARED) {
        sluice__own_inc(req);
        if (permits) sluice__own_add(per, permits);
    } else {
        atomic_fetch_add_explicit(req, 1, memory_order_relaxed);
        if (permits) shared_add(per, permits);
    }
}

bool sluice__count_slow_denied(sluice__counters *c, uint64_t permits)
{
    sluice__count_slow(c, permits, false);
    return false;
}

void sluice__count_tally(sluice__counters *c, const sluice__tally *t)
{
    const unsigned slot = sluice__counter_stripe();
    sluice__stripe *s = &c->s[slot];
    _Atomic uint64_t *to[5] = {&s->requests_allowed, &s->requests_denied, &s->permits_allowed,
                               &s->permits_denied, &s->probes};
    const uint64_t by[5] = {t->requests_allowed, t->requests_denied, t->permits_allowed,
                            t->permits_denied, t->probes};
    for (int i = 0; i < 5; i++) {
        if (!by[i]) continue;
        if (slot != SHARED) sluice__own_add(to[i], by[i]);
        else if (i == 2 || i == 3) shared_add(to[i], by[i]); /* permits saturate */
        else atomic_fetch_add_explicit(to[i], by[i], memory_order_relaxed);
    }
}

void sluice__counters_read(const sluice__counters *c, sluice_stats *out)
{
    memset(out, 0, sizeof *out);
#define SUM(f) sluice__stripes_sum(c->s, sizeof c->s[0], SLUICE__STRIPES, offsetof(sluice__stripe, f))
    out->requests_allowed = SUM(requests_allowed);
    out->requests_denied = SUM(requests_denied);
    out->probes = SUM(probes);
    out->permits_allowed = SUM(permits_allowed);
    out->permits_denied = SUM(permits_denied);
    out->requests_denied_elsewhere = SUM(denied_elsewhere);
    out->permits_denied_elsewhere = SUM(permits_elsewhere);
#undef SUM
}

/* ---- wait histograms ------------------------------------------------------ */

/* The bounds of sluice_wait_stats's buckets, in ns: 1-2.5-5 steps from
 * 100 us to 10 s (docs/metrics.md). */
static const uint64_t wait_bounds_ns[SLUICE_WAIT_BUCKETS] = {
    100000,    250000,    500000,    1000000,    2500000,    5000000,
    10000000,  25000000,  50000000,  100000000,  250000000,  500000000,
    1000000000, 2500000000, 5000000000, 10000000000};

uint64_t sluice_wait_bucket_bound_ns(unsigned i)
{
    return i < SLUICE_WAIT_BUCKETS ? wait_bounds_ns[i] : UINT64_MAX;
}

unsigned sluice__wait_bucket(uint64_t wait_ns)
{
    unsigned lo = 0, hi = SLUICE_WAIT_BUCKETS; /* the first bound >= wait */
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (wait_bounds_ns[mid] < wait_ns) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void sluice__waits_count(sluice__waits *w, int rc, uint64_t wait_ns)
{
    unsigned slot = sluice__my_slot ? sluice__my_slot - 1 : choose_slot();
    sluice__wait_stripe *s = &w->s[slot];
    _Atomic uint64_t *c = rc == 0                   ? &s->n[sluice__wait_bucket(wait_ns)]
                          : rc == SLUICE_ETIMEDOUT ? &s->timed_out
                          : rc == SLUICE_ECANCELED ? &s->cancelled
                                                   : &s->failed;
    if (slot != SHARED) {
        sluice__own_add(c, 1);
        if (rc == 0) sluice__own_add(&s->sum_ns, wait_ns);
    } else {
        atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
        if (rc == 0) shared_add(&s->sum_ns, wait_ns);
    }
}

void sluice__waits_read(const sluice__waits *w, sluice_wait_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < SLUICE__STRIPES; i++) {
        sluice__wait_stripe *s = (sluice__wait_stripe *)&w->s[i]; /* loads only */
        for (int b = 0; b <= SLUICE_WAIT_BUCKETS; b++)
            out->buckets[b] += atomic_load_explicit(&s->n[b], memory_order_relaxed);
        out->sum_ns = sluice__sat_add(out->sum_ns,
                                      atomic_load_explicit(&s->sum_ns, memory_order_relaxed));
        out->timed_out += atomic_load_explicit(&s->timed_out, memory_order_relaxed);
        out->cancelled += atomic_load_explicit(&s->cancelled, memory_order_relaxed);
        out->failed += atomic_load_explicit(&s->failed, memory_order_relaxed);
    }
    for (int b = 0; b <= SLUICE_WAIT_BUCKETS; b++) out->count += out->buckets[b];
}
