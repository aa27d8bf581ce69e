/* clock.h -- the one reader of the live clocks, inline: a live decision
 * (sluice_try_acquire, sluice_table_try_acquire) makes one call, the
 * vDSO's clock_gettime, and no call into the library to reach it.
 *
 * CLOCK_MONOTONIC: nanosecond resolution, read through the vDSO (about 20 ns
 * here).  CLOCK_MONOTONIC_COARSE: the same axis, updated once per kernel
 * tick (1-4 ms), read through the vDSO without touching the hardware
 * counter (a few ns).  A limiter made with `clock=coarse` reads the second:
 * its decisions are those of the contract at times up to one tick late.
 * Where the system has no coarse clock, `clock=coarse` reads the fine one.
 *
 * Entry points: sluice__clock_id (the clockid_t of a profile's clock, to
 * keep in a configuration), sluice__clock_read (read one), and
 * sluice__clock_now (both).  The includer defines _POSIX_C_SOURCE (or
 * _GNU_SOURCE) before its first include, for clock_gettime.  Thread-safe.
 */
#ifndef SLUICE_CLOCK_H
#define SLUICE_CLOCK_H

#include <time.h>

#include "base/internal.h"

static inline clockid_t sluice__clock_id(sluice__clock c)
{
    if (c == SLUICE__CLOCK_REALTIME) return CLOCK_REALTIME;
#ifdef CLOCK_MONOTONIC_COARSE
    if (c == SLUICE__CLOCK_COARSE) return CLOCK_MONOTONIC_COARSE;
#else
    (void)c;
#endif
    return CLOCK_MONOTONIC;
}

/* The clock `id` now, in nanoseconds.  A monotonic clock's seconds count
 * from boot: the product stays far below 2^64 (585 years). */
static inline uint64_t sluice__clock_read(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The live clock a profile asks for, now. */
static inline uint64_t sluice__clock_now(sluice__clock c)
{
    return sluice__clock_read(sluice__clock_id(c));
}

#endif /* SLUICE_CLOCK_H */
