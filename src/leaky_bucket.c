/* leaky_bucket.c -- leaky bucket, as a shaper or (nodelay) as a meter.
 *
 * Contract (CONTRACT.md 3.6): rate r = L/W, volume C; the water drains
 * continuously and never below 0: water(t) = max(0, water(t') - (t - t')r).
 * A request for p is allowed iff water(t) + p <= C, and then adds p.  The
 * shaper makes an allowed request wait water(t)/r (the level before it was
 * added, rounded up to a whole ns), so admitted requests leave at the
 * constant rate r; the meter never makes anyone wait.
 *
 * Note the seed article's `water + 1 < capacity`, which grants one permit
 * fewer than the capacity: the test here is `<=`.
 *
 * As in token_bucket.c the level is kept scaled by W, so that draining
 * (t - t')*L units per ns step is exact integer arithmetic:
 *
 *     Y = water * W,  0 <= Y <= C*W,  Y(t) = max(0, Y(t') - (t - t')*L)
 *
 *   wait_ns         ceil(Y / L)                  (shaper only)
 *   remaining       floor((C*W - Y) / W)
 *   retry_after_ns  ceil((Y + p*W - C*W) / L) for p <= C; -1 for p > C.
 * The parser bounds C*W/L by 2^63-1 ns: every wait fits an int64.
 */
#include "internal.h"

bool sluice__leaky_bucket_decide(const sluice__profile *pf, sluice__state *st,
                                 uint64_t t, uint64_t p, uint64_t max_wait,
                                 sluice_result *res)
{
    const u128 W = pf->period_ns;
    const u128 full = pf->cap_scaled;
    u128 y = sluice__sub_sat(st->u.lb.water, (u128)(t - st->t_last) * pf->limit);
    st->u.lb.water = y;
    st->t_last = t;

    if (p > pf->capacity) return sluice__deny(res, (uint64_t)((full - y) / W), -1);
    u128 add = (u128)p * W;
    if (y + add > full)
        return sluice__deny(res, (uint64_t)((full - y) / W),
                            (int64_t)sluice__ceil_div(y + add - full, pf->limit));
    uint64_t wait = (pf->nodelay || p == 0) ? 0 : (uint64_t)sluice__ceil_div(y, pf->limit);
    if (wait > max_wait) {
        sluice__deny(res, (uint64_t)((full - y) / W), -1);
        res->wait_ns = wait;
        return false;
    }
    y += add;
    st->u.lb.water = y;
    return sluice__allow(res, (uint64_t)((full - y) / W), wait);
}

uint64_t sluice__leaky_bucket_rest_at(const sluice__profile *pf,
                                      const sluice__state *st)
{
    return st->t_last + (uint64_t)sluice__ceil_div(st->u.lb.water, pf->limit);
}
