/* token_bucket.c -- token bucket, the GCRA of the contract, exact.
 *
 * Contract (CONTRACT.md 3.5): rate r = L/W permits per ns, capacity B,
 * full at the first request; tokens(t) = min(B, tokens(t') + (t - t')r);
 * a request for p is allowed iff tokens(t) >= p, and then takes p.
 *
 * This is GCRA in disguise: with emission interval T = W/L and theoretical
 * arrival time TAT, tokens(t) = B - (max(TAT, t) - t)/T.  We keep the token
 * count instead of TAT, scaled by W so that it is an integer:
 *
 *     X = tokens * W,   0 <= X <= B*W,   X(t) = min(B*W, X(t') + (t-t')*L)
 *
 * Every quantity is then an integer and the decision is exact, whatever the
 * rate (3/s, 7/10s, 1/d, 10^9/s): nothing is rounded, so nothing drifts.
 * Bounds: (t - t')*L < 2^63 * 10^12 < 2^103 and B*W <= 2^62 * 2^62, so a
 * u128 holds every sum.  The spec parser ensures B*W/L (the time to fill the
 * bucket) is at most 2^63-1 ns, so every wait fits an int64.
 *
 *   remaining       floor(X / W)
 *   retry_after_ns  ceil((p*W - X) / L) for p <= B; -1 for p > B.
 */
#include "internal.h"

bool sluice__token_bucket_decide(const sluice__profile *pf, sluice__state *st,
                                 uint64_t t, uint64_t p, uint64_t max_wait,
                                 sluice_result *res)
{
    (void)max_wait;
    const u128 W = pf->period_ns;
    u128 x = st->u.tb.tokens + (u128)(t - st->t_last) * pf->limit;
    if (x > pf->cap_scaled) x = pf->cap_scaled;
    st->u.tb.tokens = x;
    st->t_last = t;

    if (p > pf->capacity) return sluice__deny(res, (uint64_t)(x / W), -1);
    u128 need = (u128)p * W;
    if (x < need)
        return sluice__deny(res, (uint64_t)(x / W),
                            (int64_t)sluice__ceil_div(need - x, pf->limit));
    x -= need;
    st->u.tb.tokens = x;
    return sluice__allow(res, (uint64_t)(x / W), 0);
}

uint64_t sluice__token_bucket_rest_at(const sluice__profile *pf,
                                      const sluice__state *st)
{
    u128 missing = pf->cap_scaled - st->u.tb.tokens;
    return st->t_last + (uint64_t)sluice__ceil_div(missing, pf->limit);
}
