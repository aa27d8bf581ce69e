/* limiter.h -- what a limiter (limiter.c) tells the modules built on it. */
#ifndef SLUICE_LIMITER_H
#define SLUICE_LIMITER_H

#include "base/internal.h"

/* What a limiter tells the modules built on it (limiter.c): whether it is
 * a bucket (reservations book the future), its capacity, and a reference
 * count: sluice__limiter_retain() takes a reference that a later
 * sluice_limiter_free() gives back; the limiter's memory goes with the last
 * one, so an object holding a limiter (an asynchronous queue, async.c) stays
 * safe whichever of the two its user frees first. */
SLUICE__INTERNAL bool sluice__limiter_is_bucket(const sluice_limiter *lim);
SLUICE__INTERNAL uint64_t sluice__limiter_capacity(const sluice_limiter *lim);
SLUICE__INTERNAL void sluice__limiter_retain(sluice_limiter *lim);

/* Free the configurations that changes of spec retired (all but the
 * current one and the first, which is part of the limiter), which the
 * limiter otherwise keeps until it is freed, since a lock-free decision may
 * still be reading one.  The caller guarantees that none can: no call on
 * `lim` runs or is under way (rules.c calls it under its gate, after a
 * grace period, on limiters only its decisions reach).  Takes the mutex. */
SLUICE__INTERNAL void sluice__limiter_reclaim(sluice_limiter *lim);

/* For the tests: the limiter's state as raw words, to check that a call
 * changed nothing.  A lock-free limiter: its packed word (out[0] the time
 * half, out[1] the count half), the rest 0.  A window log: out[0] the
 * sequence its refusals read, out[1] how many times its writers took the
 * mutex, out[2..5] t_last, len, base and the newest entry's cum.  Else
 * t_last and the state's next two words.  Takes the mutex. */
SLUICE__INTERNAL void sluice__limiter_raw(sluice_limiter *lim, uint64_t out[6]);

#endif /* SLUICE_LIMITER_H */
