/* reconfigure.h -- changing a running limit's spec (reconfigure.c): the
 * generic part that the limiter, both tables and the Redis module share.
 *
 *   sluice__reconfigure_check   may `to` replace `from`?
 *   sluice__reconfigure_state   a state carried from one profile to another
 *   sluice__state_packable      does a state fit its profile's packed word?
 *   sluice__reconfigure_knob    a spec with one knob (limit, burst) changed
 *   sluice__reconfigure_fit     a state cut to what packs
 */
#ifndef SLUICE_ALG_RECONFIGURE_H
#define SLUICE_ALG_RECONFIGURE_H

#include "alg/alg.h"

/* Whether `to` may replace `from` on a running limiter (0, or a negative
 * code with the reason in err); the state of a limiter of profile `from`,
 * changed at now_ns into one of profile `to` (docs/decisions.md, "Changing
 * a limit while it runs"); whether a state fits the packed word of its
 * profile. */
SLUICE__INTERNAL int sluice__reconfigure_check(const sluice__profile *from,
                                               const sluice__profile *to, char *err,
                                               size_t errlen);
SLUICE__INTERNAL void sluice__reconfigure_state(const sluice__profile *from,
                                                const sluice__profile *to,
                                                sluice__state *st, uint64_t now_ns);
SLUICE__INTERNAL bool sluice__state_packable(const sluice__profile *pf,
                                             const sluice__state *st);
/* The spec of profile `cur` with one knob changed, into buf -- LIMIT and
 * PERIOD (SLUICE__KNOB_LIMIT: a = limit, b = period_ns; sliding-wheel keeps
 * its slot width, the windows' capacity follows L) or a bucket's burst or
 * capacity (SLUICE__KNOB_BURST: a); 0 or SLUICE_EINVAL with the reason in
 * err.  And a state that does not pack under its packed profile, cut to
 * what packs (a table's entries keep 16 bytes): a bucket's level to
 * 2^64 - 1 units (more than the full bucket), sliding-approx's counts to
 * 2^32 - 1 (more than its L) -- it refuses while they would, and drains a
 * little sooner. */
enum { SLUICE__KNOB_LIMIT = 1, SLUICE__KNOB_BURST = 2 };
SLUICE__INTERNAL int sluice__reconfigure_knob(const sluice__profile *cur, int knob, uint64_t a,
                                              uint64_t b, char *buf, size_t buflen, char *err,
                                              size_t errlen);
SLUICE__INTERNAL void sluice__reconfigure_fit(const sluice__profile *pf, sluice__state *st);

#endif /* SLUICE_ALG_RECONFIGURE_H */
