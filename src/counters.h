/* counters.h -- exact decision counters, striped per thread (counters.c).
 * Shared by limiters and tables. */
#ifndef SLUICE_COUNTERS_H
#define SLUICE_COUNTERS_H

#include "internal.h"

/* Decision counters, shared by limiters and tables.  Striped: a thread
 * owns one of the first SLUICE__STRIPES - 1 stripes for its lifetime
 * (counters.c) and adds to it with plain loads and stores -- no locked
 * instruction, no cache line shared with another thread; threads beyond
 * those share the last stripe, with atomic read-modify-writes.  Reading
 * sums the stripes. */
#define SLUICE__STRIPES 16
typedef struct sluice__stripe {
    _Alignas(64) _Atomic uint64_t requests_allowed, requests_denied;
    _Atomic uint64_t permits_allowed, permits_denied, probes;
} sluice__stripe;
typedef struct sluice__counters {
    sluice__stripe s[SLUICE__STRIPES];
} sluice__counters;
SLUICE__INTERNAL void sluice__count(sluice__counters *c, uint64_t permits,
                                    bool allowed);
SLUICE__INTERNAL void sluice__counters_read(const sluice__counters *c,
                                            sluice_stats *out);

#endif /* SLUICE_COUNTERS_H */
