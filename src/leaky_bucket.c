/* leaky_bucket.c -- leaky bucket, as a shaper or (nodelay) as a meter.
 *
 * Contract (CONTRACT.md 3.6): rate r = L/W, volume C; the water drains
 * continuously and never below 0: water(t) = max(0, water(t') - (t - t')r).
 * A request for p is allowed iff water(t) + p <= C, and then adds p.  The
 * shaper makes an allowed request wait water(t)/r (the level before it was
 * added, rounded up to a whole ns), so admitted requests leave at the
 * constant rate r; the meter never makes anyone wait.
 *
 * The water is exactly the token bucket's deficit, so both run on the one
 * machine in token_bucket.c (its head comment has the arithmetic); here is
 * only what the shaper adds: the wait.
 *
 * Note the seed article's `water + 1 < capacity`, which grants one permit
 * fewer than the capacity: the test here is `<=`.
 */
#include "internal.h"

bool sluice__leaky_bucket_decide(const sluice__profile *pf, sluice__state *st,
                                 uint64_t t, uint64_t p, uint64_t max_wait,
                                 sluice_result *res)
{
    return sluice__bucket_decide(pf, st, t, p, max_wait, !pf->nodelay, res);
}

uint64_t sluice__leaky_bucket_rest_at(const sluice__profile *pf,
                                      const sluice__state *st)
{
    return sluice__bucket_rest_at(pf, st);
}
