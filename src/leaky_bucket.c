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
 * As in token_bucket.c the level is kept scaled by rw = W/gcd(L, W), so
 * that draining rl = L/gcd(L, W) units per ns is exact integer arithmetic:
 *
 *     Y = water * rw,  0 <= Y <= C*rw,  Y(t) = max(0, Y(t') - (t - t')*rl)
 *
 *   wait_ns         ceil(Y / rl)                 (shaper only)
 *   remaining       floor((C*rw - Y) / rw)
 *   retry_after_ns  ceil((Y + p*rw - C*rw) / rl) for p <= C; -1 for p > C.
 * The parser bounds C*rw/rl by 2^63-1 ns: every wait fits an int64.  When
 * C*rw < 2^64 the state packs into one 128-bit word (lock-free).
 */
#include "internal.h"

bool sluice__leaky_bucket_decide(const sluice__profile *pf, sluice__state *st,
                                 uint64_t t, uint64_t p, uint64_t max_wait,
                                 sluice_result *res)
{
    const u128 full = pf->cap_scaled;
    u128 y = sluice__sub_sat(st->u.lb.water, (u128)(t - st->t_last) * pf->rl);
    st->t_last = t;
    const u128 add = (u128)p * pf->rw; /* p > C implies add > full */
    bool ok = add <= full - y;
    uint64_t wait = 0;
    if (ok && !pf->nodelay && p != 0) {
        wait = (uint64_t)sluice__ceil_div64(y, pf->rl);
        ok = wait <= max_wait;
    }
    st->u.lb.water = ok ? y + add : y;
    if (!res) return ok;
    uint64_t remaining = (uint64_t)sluice__div128(full - st->u.lb.water, pf->rw);
    if (ok) return sluice__allow(res, remaining, wait);
    if (wait > max_wait) { /* sluice_acquire: the wait exceeds the time left */
        sluice__deny(res, remaining, -1);
        res->wait_ns = wait;
        return false;
    }
    if (p > pf->capacity) return sluice__deny(res, remaining, -1);
    return sluice__deny(res, remaining, (int64_t)sluice__ceil_div64(y + add - full, pf->rl));
}

uint64_t sluice__leaky_bucket_rest_at(const sluice__profile *pf,
                                      const sluice__state *st)
{
    return st->t_last + (uint64_t)sluice__ceil_div64(st->u.lb.water, pf->rl);
}
