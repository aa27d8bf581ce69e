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
 * Uncontended, lock + unlock is one exchange and one store: about a third
 * of a pthread mutex's cost. */
typedef struct sluice__spin {
    _Atomic int locked;
} sluice__spin;
SLUICE__INTERNAL void sluice__spin_wait(sluice__spin *l);
static inline void sluice__spin_lock(sluice__spin *l)
{
    if (!atomic_exchange_explicit(&l->locked, 1, memory_order_acquire)) return;
    sluice__spin_wait(l);
}
static inline void sluice__spin_unlock(sluice__spin *l)
{
    atomic_store_explicit(&l->locked, 0, memory_order_release);
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
