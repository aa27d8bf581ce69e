/* clock.c -- the public clock, sluice_now_ns(): CLOCK_MONOTONIC through
 * clock.h's reader, the one the library's live decisions use inline
 * (clock.h's head comment has the two clocks).
 *
 * Entry point: sluice_now_ns.
 */
#define _POSIX_C_SOURCE 200809L
#include "base/clock.h"

uint64_t sluice_now_ns(void) { return sluice__clock_read(CLOCK_MONOTONIC); }
