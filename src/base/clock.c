/* clock.c -- the live clocks.
 *
 * CLOCK_MONOTONIC: nanosecond resolution, read through the vDSO (about 20 ns
 * here).  CLOCK_MONOTONIC_COARSE: the same axis, updated once per kernel
 * tick (1-4 ms), read through the vDSO without touching the hardware
 * counter (a few ns).  A limiter made with `clock=coarse` reads the second:
 * its decisions are those of the contract at times up to one tick late.
 */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE
#include "base/internal.h"

#include <time.h>

static uint64_t read_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t sluice_now_ns(void) { return read_clock(CLOCK_MONOTONIC); }

uint64_t sluice__clock_now(sluice__clock c)
{
#ifdef CLOCK_MONOTONIC_COARSE
    if (c == SLUICE__CLOCK_COARSE) return read_clock(CLOCK_MONOTONIC_COARSE);
#else
    (void)c;
#endif
    return read_clock(CLOCK_MONOTONIC);
}
