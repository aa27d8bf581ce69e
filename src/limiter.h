/* limiter.h -- what a limiter (limiter.c) tells the modules built on it. */
#ifndef SLUICE_LIMITER_H
#define SLUICE_LIMITER_H

#include "internal.h"

/* What a limiter tells the modules built on it (limiter.c): whether it is
 * a bucket (reservations book the future), its capacity, and a reference
 * count: sluice__limiter_retain() takes a reference that a later
 * sluice_limiter_free() gives back; the limiter's memory goes with the last
 * one, so an object holding a limiter (an asynchronous queue, async.c) stays
 * safe whichever of the two its user frees first. */
SLUICE__INTERNAL bool sluice__limiter_is_bucket(const sluice_limiter *lim);
SLUICE__INTERNAL uint64_t sluice__limiter_capacity(const sluice_limiter *lim);
SLUICE__INTERNAL void sluice__limiter_retain(sluice_limiter *lim);

#endif /* SLUICE_LIMITER_H */
