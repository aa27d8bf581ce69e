/* sliding_approx.c -- the two-window estimate of a sliding window.
 *
 * Contract (docs/decisions.md 3.4): k = floor(t/W), f = (t - kW)/W,
 * est = prev*(1 - f) + cur, with cur and prev the permits admitted in
 * windows k and k-1; a request for p is allowed iff est + p <= L.
 *
 * Multiplying by W keeps it exact in integers: with r = t - kW,
 *
 *     E = est * W = prev*(W - r) + cur*W,   allowed iff E + p*W <= L*W.
 *
 * prev, cur <= L <= 10^12 and W < 2^62, so u128 holds every product.
 * When L < 2^32, cur and prev pack with the latest time into one 128-bit
 * word (limiter.c: lock-free); the window index is the latest time's.
 * Memory: three words.  The estimate assumes the previous window's requests
 * were spread evenly; it can admit up to ~2L in a W-long interval that
 * straddles a window edge after an uneven previous window (README).
 *
 *   remaining       floor((L*W - E) / W)
 *   retry_after_ns  the least d with E(t+d) + p*W <= L*W, found in closed
 *                   form in this window, else the next, else the one after
 *                   (where est = 0); -1 for p > L.  The rule is in
 *                   sliding_approx.h, shared with the Redis tier.
 */
#include "internal.h"
#include "sliding_approx.h"

/* Move the state to window k. */
static void roll(sluice__state *st, uint64_t k)
{
    if (k == st->u.sa.window) return;
    st->u.sa.prev = (k == st->u.sa.window + 1) ? st->u.sa.cur : 0;
    st->u.sa.cur = 0;
    st->u.sa.window = k;
}

static bool decide(const sluice__profile *pf, sluice__state *st, uint64_t t, uint64_t p,
                   uint64_t max_wait, sluice_result *res)
{
    (void)max_wait;
    const uint64_t W = pf->period_ns, L = pf->limit;
    const uint64_t k = sluice__div_q(&pf->div_w, t);
    sluice__state v = *st; /* the state seen from t; written back only on
                            * an admission */
    roll(&v, k);
    const uint64_t r = t - k * W;
    const u128 lw = (u128)L * W;
    const u128 e = (u128)v.u.sa.prev * (W - r) + (u128)v.u.sa.cur * W;
    const bool ok = p <= L && e + (u128)p * W <= lw;
    if (ok && p) {
        v.t_last = t;
        v.u.sa.cur += p;
        *st = v;
    }
    if (!res) return ok;
    if (ok) return sluice__allow(res, (uint64_t)((lw - e - (u128)p * W) / W), 0);
    uint64_t remaining = (uint64_t)((lw - e) / W);
    if (p > L) return sluice__deny(res, remaining, -1);
    /* at most 2W - r < 2^63: W <= SLUICE_MAX_PERIOD_NS */
    return sluice__deny(res, remaining,
                        (int64_t)sluice__approx_wait_ns(W, L, v.u.sa.prev, v.u.sa.cur, r, p));
}

static uint64_t rest_at(const sluice__profile *pf, const sluice__state *st)
{
    uint64_t k = st->u.sa.window;
    if (st->u.sa.cur) return (k + 2) * pf->period_ns;
    if (st->u.sa.prev) return (k + 1) * pf->period_ns;
    return st->t_last;
}

static int setup(sluice__profile *pf, const sluice__opts *o, char *err, size_t errlen)
{
    (void)o, (void)err, (void)errlen;
    pf->packed = pf->limit < ((uint64_t)1 << 32); /* cur and prev in 32 bits each */
    return 0;
}

/* Packed: (latest admission's time, cur << 32 | prev); the window is the
 * time's. */
static void pack(const sluice__profile *pf, const sluice__state *st, uint64_t out[2])
{
    (void)pf;
    out[0] = st->t_last;
    out[1] = st->u.sa.cur << 32 | st->u.sa.prev;
}

static void unpack(const sluice__profile *pf, const uint64_t in[2], sluice__state *st)
{
    st->t_last = in[0];
    st->u.sa.window = sluice__div_q(&pf->div_w, in[0]);
    st->u.sa.cur = in[1] >> 32;
    st->u.sa.prev = in[1] & 0xffffffffu;
}

const sluice__alg_ops sluice__sliding_approx_ops = {
    .name = "sliding-approx",
    .options = SLUICE__OPT(SLUICE__OPT_CLOCK),
    .setup = setup,
    .format = sluice__format_no_options,
    .decide = decide,
    .rest_at = rest_at,
    .pack = pack,
    .unpack = unpack,
};
