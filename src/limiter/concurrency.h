/* concurrency.h -- what the concurrency limit (concurrency.c) gives the
 * per-key table of such limits (conc_table.c).
 *
 *   sluice__conc_make    a limit from a parsed spec
 *   sluice__conc_reuse   give an idle limit to another key */
#ifndef SLUICE_LIMITER_CONCURRENCY_H
#define SLUICE_LIMITER_CONCURRENCY_H

#include "base/internal.h"
#include "alg/concurrency.h"

/* A limit from a parsed profile: NULL when memory runs out. */
SLUICE__INTERNAL sluice_concurrency *sluice__conc_make(const sluice__conc_profile *cp);

/* If the limit holds nothing at now_ns (with a lease: every lease has
 * ended by then) and nobody waits on it: make it a fresh limit for another
 * key -- bump its epoch (a handle of the earlier key can then never release
 * here) and reset its clock -- and return true.  Else change nothing and
 * return false.  Called under the table's lock, with no acquire
 * on c running (acquires on a table's keys take that lock); releases may
 * run at once. */
SLUICE__INTERNAL bool sluice__conc_reuse(sluice_concurrency *c, uint64_t now_ns);

#endif /* SLUICE_LIMITER_CONCURRENCY_H */
