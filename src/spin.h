/* spin.h -- the short lock of the table's shards (spin.c has its slow
 * path), and the back-off of every spin wait (limiter.c's frozen words). */
#ifndef SLUICE_SPIN_H
#define SLUICE_SPIN_H

#include <sched.h>
#include <stdatomic.h>

#include "internal.h"

/* A short lock for critical sections of a few dozen instructions: test
 * and test-and-set, spinning a little, then yielding the CPU (so a holder
 * preempted on a busy machine is not spun on for a whole time slice).
 * Uncontended, lock + unlock is one locked bit-set and one store: about a
 * third of a pthread mutex's cost.
 *
 * The lock word is also a sequence count (a seqlock): odd while held, and
 * each hold adds 2, so it never takes a value twice (2^63 holds are
 * centuries).  A reader that must not write -- table.c's refusals -- reads
 * without the lock: sluice__spin_read_begin(), then its loads, then
 * sluice__spin_read_valid() with the value begun with.  The pair says
 * whether no holder ran in between, under two rules: every store a holder
 * makes to what such readers read is an atomic store with release order,
 * and every such load of the reader is an atomic load with acquire order.
 * (Then a reader's load that sees a holder's store synchronises with it,
 * so the hold's start -- the bit-set, before the store -- happens before
 * the reader's recheck, which reads that odd value or a later one.)  On
 * x86-64 both are plain moves: the reader writes nothing. */
typedef struct sluice__spin {
    _Atomic uint64_t seq; /* even: free; odd: held */
} sluice__spin;
SLUICE__INTERNAL void sluice__spin_wait(sluice__spin *l);
static inline void sluice__spin_lock(sluice__spin *l)
{
    if (!(atomic_fetch_or_explicit(&l->seq, 1, memory_order_acquire) & 1)) return;
    sluice__spin_wait(l);
}
static inline void sluice__spin_unlock(sluice__spin *l)
{
    /* only the holder writes the word while it is odd */
    uint64_t v = atomic_load_explicit(&l->seq, memory_order_relaxed);
    atomic_store_explicit(&l->seq, v + 1, memory_order_release);
}
/* The start of a read without the lock: the sequence (odd: held, the read
 * cannot succeed -- wait or lock). */
static inline uint64_t sluice__spin_read_begin(const sluice__spin *l)
{
    return atomic_load_explicit(&((sluice__spin *)l)->seq, memory_order_acquire);
}
/* Whether no holder has run since sluice__spin_read_begin() returned v (even). */
static inline bool sluice__spin_read_valid(const sluice__spin *l, uint64_t v)
{
    return atomic_load_explicit(&((sluice__spin *)l)->seq, memory_order_relaxed) == v;
}

/* The n-th wait of a spin loop: a pause, then (past 64) yielding the CPU,
 * so a holder preempted on a busy machine is not spun on for a whole time
 * slice. */
static inline void sluice__backoff(unsigned n)
{
    if (n < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        sched_yield();
    }
}

#endif /* SLUICE_SPIN_H */
