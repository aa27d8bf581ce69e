/* token_bucket.c -- token bucket, the GCRA of the contract, exact.
 *
 * Contract (CONTRACT.md 3.5): rate r = L/W permits per ns, capacity B,
 * full at the first request; tokens(t) = min(B, tokens(t') + (t - t')r);
 * a request for p is allowed iff tokens(t) >= p, and then takes p.
 *
 * This is GCRA in disguise: with emission interval T = W/L and theoretical
 * arrival time TAT, tokens(t) = B - (max(TAT, t) - t)/T.  We keep the token
 * count instead of TAT, scaled so that it is an integer.  With g = gcd(L, W),
 * rl = L/g and rw = W/g (the rate in lowest terms, rl/rw per ns):
 *
 *     X = tokens * rw,  0 <= X <= B*rw,  X(t) = min(B*rw, X(t') + (t-t')*rl)
 *
 * Every quantity is then an integer and the decision is exact, whatever the
 * rate (3/s, 7/10s, 1/d, 10^9/s): nothing is rounded, so nothing drifts.
 * Bounds: (t - t')*rl < 2^63 * 10^12 < 2^103 and B*rw <= 2^63 * L (the
 * parser bounds the time to fill the bucket, B*rw/rl, by 2^63-1 ns), so a
 * u128 holds every sum and every wait fits an int64.  When B*rw < 2^64 --
 * every practical spec: 100/s, 3/s, 1/d, 10^12/d -- the state packs into one
 * 128-bit word with the latest time, and limiter.c updates it lock-free.
 *
 *   remaining       floor(X / rw)
 *   retry_after_ns  ceil((p*rw - X) / rl) for p <= B; -1 for p > B.
 */
#include "internal.h"

bool sluice__token_bucket_decide(const sluice__profile *pf, sluice__state *st,
                                 uint64_t t, uint64_t p, uint64_t max_wait,
                                 sluice_result *res)
{
    (void)max_wait;
    u128 x = st->u.tb.tokens + (u128)(t - st->t_last) * pf->rl;
    if (x > pf->cap_scaled) x = pf->cap_scaled;
    st->t_last = t;
    const u128 need = (u128)p * pf->rw; /* p > B implies need > cap_scaled >= x */
    const bool ok = x >= need;
    if (ok) x -= need;
    st->u.tb.tokens = x;
    if (!res) return ok;
    uint64_t remaining = (uint64_t)sluice__div128(x, pf->rw);
    if (ok) return sluice__allow(res, remaining, 0);
    if (p > pf->capacity) return sluice__deny(res, remaining, -1);
    return sluice__deny(res, remaining, (int64_t)sluice__ceil_div64(need - x, pf->rl));
}

uint64_t sluice__token_bucket_rest_at(const sluice__profile *pf,
                                      const sluice__state *st)
{
    u128 missing = pf->cap_scaled - st->u.tb.tokens;
    return st->t_last + (uint64_t)sluice__ceil_div64(missing, pf->rl);
}
