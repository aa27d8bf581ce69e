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
 * straddles a window edge after an uneven previous window (docs/spec.md).
 *
 *   remaining       floor((L*W - E) / W)
 *   retry_after_ns  the least d with E(t+d) + p*W <= L*W, found in closed
 *                   form in this window, else the next, else the one after
 *                   (where est = 0); -1 for p > L.  The rule is in
 *                   sliding_approx.h, shared with the Redis tier.
 *
 * Entry point: sluice__sliding_approx_ops, its row (setup, decide, rest_at,
 * pack/unpack, decide_packed, refused_until, carry, fits).
 */
#include "alg/alg.h"
#include "alg/sliding_approx.h"

/* Move the state to window k. */
static void roll(sluice__state *st, uint64_t k)
{
    if (k == st->u.sa.window) return;
    st->u.sa.prev = (k == st->u.sa.window + 1) ? st->u.sa.cur : 0;
    st->u.sa.cur = 0;
    st->u.sa.window = k;
}

/* Decide at t, whose window is k. */
static inline __attribute__((always_inline)) bool
decide_k(const sluice__profile *pf, sluice__state *st, uint64_t t, uint64_t k, uint64_t p,
         sluice_result *res)
{
    const uint64_t W = pf->period_ns, L = pf->limit;
    sluice__state v = *st; /* the state seen from t; written back only on
                            * an admission */
    roll(&v, k);
    const uint64_t r = t - k * W;
    const u128 lw = (u128)L * W;
    const u128 e = (u128)v.u.sa.prev * (W - r) + (u128)v.u.sa.cur * W;
    /* a probe is always allowed, also above the limit (after a
     * reconfiguration lowered it) */
    const bool ok = p == 0 || (p <= L && e + (u128)p * W <= lw);
    if (ok && p) {
        v.t_last = t;
        v.u.sa.cur += p;
        *st = v;
    }
    if (!res) return ok;
    if (ok) return sluice__allow(res, e < lw ? (uint64_t)((lw - e - (u128)p * W) / W) : 0, 0);
    /* e may exceed L*W after a reconfiguration lowered L */
    uint64_t remaining = e < lw ? (uint64_t)((lw - e) / W) : 0;
    if (p > L) return sluice__deny(res, remaining, -1);
    /* at most 2W - r < 2^63: W <= SLUICE_MAX_PERIOD_NS */
    return sluice__deny(res, remaining,
                        (int64_t)sluice__approx_wait_ns(W, L, v.u.sa.prev, v.u.sa.cur, r, p));
}

static bool decide(const sluice__profile *pf, sluice__state *st, uint64_t t, uint64_t p,
                   uint64_t max_wait, sluice_result *res)
{
    (void)max_wait;
    return decide_k(pf, st, t, sluice__div_q(&pf->div_w, t), p, res);
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

/* unpack, clamp, decide, pack, with one division instead of two: the
 * latest admission (<= t) is in t's window k iff it is not before kW, in
 * window k - 1 iff not before (k-1)W; else any index that is neither
 * (k - 2, modulo 2^64) makes roll() forget both counts, as the true one
 * would.  A refusal or a probe leaves out as the caller set it: w. */
static bool decide_packed(const sluice__profile *pf, sluice__packed_req *q)
{
    const uint64_t *w = q->w, now_ns = q->now_ns, p = q->p;
    uint64_t *out = q->out;
    sluice__state st;
    st.t_last = w[0];
    const uint64_t t = sluice__clamp_time(&st, now_ns);
    const uint64_t W = pf->period_ns;
    const uint64_t k = sluice__div_q(&pf->div_w, t);
    const uint64_t kw = k * W; /* <= t: no overflow */
    st.u.sa.window = w[0] >= kw ? k : k && w[0] >= kw - W ? k - 1 : k - 2;
    st.u.sa.cur = w[1] >> 32;
    st.u.sa.prev = w[1] & 0xffffffffu;
    const bool ok = decide_k(pf, &st, t, k, p, q->res);
    if (ok && p) pack(pf, &st, out); /* else out is w already */
    return ok;
}

/* The refusals' hint (internal.h), within the window k of w[0] (r = t -
 * kW): one permit is refused iff prev*(W - r) + cur*W + W > L*W.  With
 * cur >= L that holds to the window's end; else, with a = (L - cur - 1)*W,
 * iff prev*(W - r) > a, i.e. (W - r an integer) W - r > floor(a/prev): for
 * r < W - floor(a/prev), which is above r = 0 only when L - cur - 1 < prev.
 * Admissions in the window only add to cur, so their words refuse wherever
 * w did.  The next window is left to the decision. */
static __attribute__((noinline)) uint64_t refused_in_window(const sluice__profile *pf,
                                                             const uint64_t w[2])
{
    const uint64_t W = pf->period_ns, L = pf->limit;
    const uint64_t cur = w[1] >> 32, prev = w[1] & 0xffffffffu;
    const uint64_t end = (sluice__div_q(&pf->div_w, w[0]) + 1) * W; /* <= w[0] + W */
    if (cur >= L) return end;
    const uint64_t t = end - (uint64_t)sluice__div128((u128)(L - cur - 1) * W, prev);
    return t > w[0] ? t : 0; /* floor(a/prev) < W: t > kW */
}

static uint64_t refused_until(const sluice__profile *pf, const uint64_t w[2])
{
    const uint64_t L = pf->limit, cur = w[1] >> 32, prev = w[1] & 0xffffffffu;
    if (cur < L && L - cur - 1 >= prev) return 0; /* room for one: the common case */
    return refused_in_window(pf, w);
}

/* The newest window (of length w) that an instant <= last can be in, seen
 * from window k: 1 for k, 2 for k - 1, 0 for older. */
static int place(uint64_t last, uint64_t w, uint64_t k)
{
    const uint64_t j = last / w;
    return j == k ? 1 : j + 1 == k ? 2 : 0;
}

/* A change of spec at t (reconfigure.c): the counts keep no times, only
 * windows, so each is placed in the newest new window that any of its
 * admissions can lie in -- the current window's are at most the latest
 * admission, the previous window's before its end.  A permit counted in a
 * later window than its own never weighs less in an estimate from t on, so
 * the new estimate is never below the one of the real times; with an
 * unchanged PERIOD it is exact. */
static void carry(const sluice__profile *from, const sluice__profile *to, sluice__state *st,
                  uint64_t t)
{
    const uint64_t k = st->u.sa.window, k2 = sluice__div_q(&to->div_w, t);
    uint64_t cur = 0, prev = 0;
    if (st->u.sa.cur) {
        int w = place(st->t_last, to->period_ns, k2);
        if (w == 1) cur += st->u.sa.cur;
        else if (w == 2) prev += st->u.sa.cur;
    }
    if (st->u.sa.prev && k > 0) {
        int w = place(k * from->period_ns - 1, to->period_ns, k2);
        if (w == 1) cur += st->u.sa.prev;
        else if (w == 2) prev += st->u.sa.prev;
    }
    /* The windows before k - 1 are forgotten.  When a longer new window
     * reaches back to them, each counts as full (at most L: an admission
     * needs cur + p <= L), placed in the newest new window its end is in. */
    if (k >= 2) { /* the first old window that overlaps new window k2 - 1 */
        const uint64_t first = k2 ? (uint64_t)((u128)(k2 - 1) * to->period_ns / from->period_ns) : 0;
        if (first <= k - 2) {
            const u128 x = (u128)from->limit * (k - 1 - first);
            const uint64_t add = x > UINT64_MAX / 4 ? UINT64_MAX / 4 : (uint64_t)x;
            int w = place((k - 1) * from->period_ns - 1, to->period_ns, k2);
            if (w == 1) cur += add;
            else if (w == 2) prev += add;
        }
    }
    st->u.sa.window = k2;
    st->u.sa.cur = cur;
    st->u.sa.prev = prev;
}

/* Carried counts may pass 2^32 (two windows in one): then the limiter
 * leaves the packed word. */
static bool fits(const sluice__profile *pf, const sluice__state *st)
{
    (void)pf;
    return st->u.sa.cur < ((uint64_t)1 << 32) && st->u.sa.prev < ((uint64_t)1 << 32);
}

/* A reservation settled at t (docs/decisions.md 3.10).  Below the
 * estimate, the difference leaves the count of the reservation's window,
 * cur while t is in it, prev in the next one: exactly the state had it
 * taken `a`; later it no longer counts.  Above it, the extra joins cur at
 * t past L, saturating at what the state holds (2^32-1 when packed). */
static int settle(const sluice__profile *pf, sluice__state *st, uint64_t t,
                  const sluice__settle_req *q)
{
    const uint64_t k = sluice__div_q(&pf->div_w, t), k0 = sluice__div_q(&pf->div_w, q->t0);
    if (q->a < q->p) {
        /* a give-back is no admission: the state keeps its time and its
         * window w (packed, the window is the time's), and the count of
         * window k0 is cur when k0 = w, prev when k0 = w - 1 */
        const uint64_t w = st->u.sa.window;
        if (k > k0 + 1) return 0; /* k0's permits no longer count from t */
        uint64_t *c = k0 == w ? &st->u.sa.cur : k0 + 1 == w ? &st->u.sa.prev : NULL;
        if (c) *c = *c > q->p - q->a ? *c - (q->p - q->a) : 0;
        return 0;
    }
    sluice__state v = *st;
    roll(&v, k); /* the extra joins cur at t, an admission past L */
    const uint64_t cap = pf->packed ? UINT32_MAX : UINT64_MAX, cur = v.u.sa.cur;
    v.u.sa.cur = cur >= cap || q->a - q->p > cap - cur ? cap : cur + (q->a - q->p);
    v.t_last = t;
    *st = v;
    return 0;
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
    .decide_packed = decide_packed,
    .refused_until = refused_until,
    .carry = carry,
    .fits = fits,
    .settle = settle,
};
