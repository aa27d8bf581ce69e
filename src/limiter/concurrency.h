/* concurrency.h -- what the concurrency limit (concurrency.c) gives the
 * per-key table of such limits (conc_table.c).
 *
 *   sluice__conc_make    a limit from a parsed spec
 *   sluice__conc_reuse   give an idle limit to another key
 *   sluice__conc_hold, _unhold   a decision together with rate limits */
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

/* A decision of c together with other limits (composite/conc_with.c).
 * _hold: at now_ns, if c would admit `permits`, hold it -- no other call
 * on it proceeds until _unhold -- and return true with c's answer in *res
 * (remaining after the admission) and what _unhold needs in *snap; else
 * return false with c's refusal in *res, holding nothing.  _unhold: take
 * the permits (commit, filling *pm) or not, and let c go.  Nothing may
 * block between the two. */
SLUICE__INTERNAL bool sluice__conc_hold(sluice_concurrency *c, uint64_t permits, uint64_t now_ns,
                                        uint64_t *snap, sluice_result *res);
SLUICE__INTERNAL void sluice__conc_unhold(sluice_concurrency *c, uint64_t snap, bool commit,
                                          uint64_t permits, sluice_permit *pm);

#endif /* SLUICE_LIMITER_CONCURRENCY_H */
