/* sliding_approx.h -- sliding-approx's retry rule, for every place that
 * answers for a sliding-approx state: the core's limiter (sliding_approx.c)
 * and the Redis tier, whose script keeps the state in Redis and whose
 * client computes the wait from the script's reply (src/redis/redis.c).
 *
 * With k the window of t, r = t - kW the offset into it, and prev, cur the
 * permits admitted in windows k-1 and k, the estimate times W is
 * E(r) = prev*(W - r) + cur*W, and p permits fit iff E + p*W <= L*W.  E
 * only falls as r grows within a window, so the least wait is closed-form:
 * the first offset in this window at which p fit, else the first offset in
 * the next one (where prev' = cur, cur' = 0), which always exists for
 * p <= L (at the latest its end, where the estimate is 0).
 *
 * Header-only (static inline): a pure function of its arguments, so the
 * Redis tier shares it without an exported symbol, and it is not public
 * API (its arguments are the algorithm's internal state).
 *
 * Entry points: sluice__approx_first_fit, sluice__approx_wait_ns.
 */
#ifndef SLUICE_SLIDING_APPROX_H
#define SLUICE_SLIDING_APPROX_H

#include <stdint.h>

__extension__ typedef unsigned __int128 sluice__approx_u128;

/* The least offset r' in [0, W] into a window with previous count `prev`
 * and current count `cur` at which p more permits fit; W if none fits
 * before the window ends.  Needs L <= 10^12 and W < 2^62 (the spec's
 * ranges): (L - cur - p) * W fits 128 bits.  cur and prev may exceed L
 * (an overdraft a settle forced, docs/decisions.md 3.10), up to 2^64-1. */
static inline uint64_t sluice__approx_first_fit(uint64_t W, uint64_t L, uint64_t prev,
                                                uint64_t cur, uint64_t p)
{
    if (cur > L || p > L - cur) return W; /* cur never shrinks in a window */
    if (prev == 0) return 0;
    /* prev*(W - r') <= (L-cur-p)*W  <=>  r' >= W - floor((L-cur-p)*W / prev) */
    sluice__approx_u128 q = (sluice__approx_u128)(L - cur - p) * W / prev;
    return q >= W ? 0 : W - (uint64_t)q;
}

/* The least wait in ns, from offset r (0 <= r < W) into a window with counts
 * prev and cur, after which a request for p <= L permits is allowed with no
 * other traffic; 0 if it is allowed at r.  The result is at most 2W - r. */
static inline uint64_t sluice__approx_wait_ns(uint64_t W, uint64_t L, uint64_t prev,
                                              uint64_t cur, uint64_t r, uint64_t p)
{
    uint64_t at = sluice__approx_first_fit(W, L, prev, cur, p);
    if (at < W) return at > r ? at - r : 0;
    /* the next window: prev' = cur, cur' = 0 */
    return W - r + sluice__approx_first_fit(W, L, cur, 0, p);
}

#endif /* SLUICE_SLIDING_APPROX_H */
