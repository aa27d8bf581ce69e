/* calendar.h -- the windows of a calendar quota (fixed-window with tz=).
 *
 * Entry point: sluice__cal_window, the window [start, end) that holds an
 * instant, for a profile whose cal_unit is not SLUICE__CAL_NONE.  The
 * rules are in docs/spec.md (Calendar quotas) and calendar.c's head.
 */
#ifndef SLUICE_ALG_CALENDAR_H
#define SLUICE_ALG_CALENDAR_H

#include "alg/alg.h"

/* The calendar window of profile pf that holds t (ns since the Unix epoch,
 * UTC): *start <= t < *end, in ns; a start before the epoch reads 0, an
 * end past 2^63 reads 2^63.  Pure: no lock, no allocation, thread-safe. */
SLUICE__INTERNAL void sluice__cal_window(const sluice__profile *pf, uint64_t t,
                                         uint64_t *start, uint64_t *end);

#endif /* SLUICE_ALG_CALENDAR_H */
