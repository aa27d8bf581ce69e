/* spin.h -- the short lock of the table's shards (spin.c has its slow
 * path), and the back-off of every spin wait (limiter.c's frozen words).
 *
 * Entry points: sluice__spin_lock, _unlock (the lock); sluice__spin_read_begin,
 * _read_valid, _try_upgrade (the reader without the lock); sluice__backoff
 * (the n-th wait of any spin loop).
 */
#ifndef SLUICE_SPIN_H
#define SLUICE_SPIN_H

#include <sched.h>
#include <stdatomic.h>

#include "base/internal.h"
#include "base/seqlock.h"

/* A short lock for critical sections of a few dozen instructions: test
 * and test-and-set, spinning a little, then yielding the CPU (so a holder
 * preempted on a busy machine is not spun on for a whole time slice).
 * Uncontended, lock + unlock is one locked bit-set and one store: about a
 * third of a pthread mutex's cost.
 *
 * The lock word is also a sequence count (a seqlock, seqlock.h: the
 * protocol and its proof, written once for both table placements): odd
 * while held, 2 more after each hold.  A reader that must not write --
 * table.c's refusals -- reads without the lock: sluice__spin_read_begin(),
 * then its loads (SLUICE__GET), then sluice__spin_read_valid() with the
 * value begun with.  The lock's bit-set is the hold's odd store, followed
 * by seqlock.h's fence.
 *
 * Taking the lock (its bit-set, or an upgrade's compare-and-swap) is
 * sequentially consistent -- on x86-64 the same locked instruction as an
 * acquire: table.c's lock-free admissions freeze an entry, then load the
 * sequence, while a holder sets the bit, then loads the entry (a Dekker
 * pair: of two such threads, at least one sees the other's write). */
typedef struct sluice__spin {
    _Atomic uint64_t seq; /* even: free; odd: held */
} sluice__spin;
SLUICE__INTERNAL void sluice__spin_wait(sluice__spin *l);
static inline void sluice__spin_lock(sluice__spin *l)
{
    if (atomic_fetch_or_explicit(&l->seq, 1, memory_order_seq_cst) & 1) sluice__spin_wait(l);
    sluice__seq_held_fence(); /* the bit-set before the hold's stores */
}
static inline void sluice__spin_unlock(sluice__spin *l)
{
    sluice__seq_unhold(&l->seq); /* only the holder writes the word while it is odd */
}
/* The start of a read without the lock: the sequence (odd: held, the read
 * cannot succeed -- wait or lock). */
static inline uint64_t sluice__spin_read_begin(const sluice__spin *l)
{
    return sluice__seq_begin(&l->seq);
}
/* Take the lock only if no holder has run since sluice__spin_read_begin()
 * returned v (even): a compare-and-swap from v to v + 1, so that what the
 * read loaded is still what the lock guards.  False: a holder ran (or
 * runs), nothing was taken. */
static inline bool sluice__spin_try_upgrade(sluice__spin *l, uint64_t v)
{
    if (!atomic_compare_exchange_strong_explicit(&l->seq, &v, v | 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return false;
    sluice__seq_held_fence(); /* the bit-set before the hold's stores */
    return true;
}
/* Whether no holder has run since sluice__spin_read_begin() returned v (even). */
static inline bool sluice__spin_read_valid(const sluice__spin *l, uint64_t v)
{
    return sluice__seq_valid(&l->seq, v);
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
