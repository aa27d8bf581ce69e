/* spin.c -- the slow path of the short lock (spin.h): test and
 * test-and-set, waiting between tries with spin.h's sluice__backoff (the
 * pause instruction for the first 64 rounds, then sched_yield()), so that a
 * holder preempted on a busy machine is not spun on for a whole time slice.
 *
 * Entry point: sluice__spin_wait (called by sluice__spin_lock on contention).
 */
#define _POSIX_C_SOURCE 200809L
#include "base/spin.h"

void sluice__spin_wait(sluice__spin *l)
{
    for (unsigned n = 0;; n++) {
        if (!(atomic_load_explicit(&l->seq, memory_order_relaxed) & 1) &&
            !(atomic_fetch_or_explicit(&l->seq, 1, memory_order_seq_cst) & 1))
            return;
        sluice__backoff(n < 64 ? n : 64);
    }
}
