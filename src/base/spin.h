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
 * whether no holder ran in between, under one rule: every store a holder
 * makes to what such readers read, and every such load of a reader, is an
 * atomic access of order SLUICE__SEQ_STORE / SLUICE__SEQ_LOAD.  Those are
 * relaxed, ordered by a release fence the lock takes after its bit-set and
 * an acquire fence the recheck takes before its load: if a reader's load
 * sees a holder's store, the fences synchronise, so the hold's start (the
 * bit-set) happens before the recheck, which then reads that odd value or a
 * later one, never the value begun with.  ThreadSanitizer does not model
 * fences, so under it each store is a release and each load an acquire
 * instead, which gives the same edge access by access.  On x86-64 all of it
 * is plain moves: the reader writes nothing.
 *
 * Taking the lock (its bit-set, or an upgrade's compare-and-swap) is
 * sequentially consistent -- on x86-64 the same locked instruction as an
 * acquire: table.c's lock-free admissions freeze an entry, then load the
 * sequence, while a holder sets the bit, then loads the entry (a Dekker
 * pair: of two such threads, at least one sees the other's write). */
#if defined(__SANITIZE_THREAD__)
#define SLUICE__SEQ_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE__SEQ_TSAN 1
#endif
#endif
#ifndef SLUICE__SEQ_TSAN
#define SLUICE__SEQ_TSAN 0
#endif
#define SLUICE__SEQ_STORE (SLUICE__SEQ_TSAN ? __ATOMIC_RELEASE : __ATOMIC_RELAXED)
#define SLUICE__SEQ_LOAD (SLUICE__SEQ_TSAN ? __ATOMIC_ACQUIRE : __ATOMIC_RELAXED)

typedef struct sluice__spin {
    _Atomic uint64_t seq; /* even: free; odd: held */
} sluice__spin;
SLUICE__INTERNAL void sluice__spin_wait(sluice__spin *l);
static inline void sluice__spin_lock(sluice__spin *l)
{
    if (atomic_fetch_or_explicit(&l->seq, 1, memory_order_seq_cst) & 1) sluice__spin_wait(l);
#if !SLUICE__SEQ_TSAN
    atomic_thread_fence(memory_order_release); /* the bit-set before the hold's stores */
#endif
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
/* Take the lock only if no holder has run since sluice__spin_read_begin()
 * returned v (even): a compare-and-swap from v to v + 1, so that what the
 * read loaded is still what the lock guards.  False: a holder ran (or
 * runs), nothing was taken. */
static inline bool sluice__spin_try_upgrade(sluice__spin *l, uint64_t v)
{
    if (!atomic_compare_exchange_strong_explicit(&l->seq, &v, v | 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return false;
#if !SLUICE__SEQ_TSAN
    atomic_thread_fence(memory_order_release); /* the bit-set before the hold's stores */
#endif
    return true;
}
/* Whether no holder has run since sluice__spin_read_begin() returned v (even). */
static inline bool sluice__spin_read_valid(const sluice__spin *l, uint64_t v)
{
#if !SLUICE__SEQ_TSAN
    atomic_thread_fence(memory_order_acquire); /* the reader's loads before the recheck */
#endif
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
