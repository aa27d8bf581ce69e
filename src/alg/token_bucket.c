/* token_bucket.c -- the bucket machine: token bucket (GCRA) and leaky
 * bucket, exact, with reservations.
 *
 * Contract (docs/decisions.md 3.5): rate r = L/W permits per ns, capacity B,
 * full at the first request; tokens(t) = min(B, tokens(t') + (t - t')r);
 * a request for p is allowed iff tokens(t) >= p, and then takes p.
 * And 3.6: water(t) = max(0, water(t') - (t - t')r); allowed iff
 * water(t) + p <= C, and then adds p.
 *
 * The two are one machine: the water is the tokens missing from a full
 * bucket (water = B - tokens), which is also GCRA's theoretical arrival
 * time seen from now, (TAT - t) * r.  We keep that deficit, scaled so that
 * it is an integer.  With g = gcd(L, W), rl = L/g and rw = W/g (the rate in
 * lowest terms, rl/rw per ns) and full = B * rw:
 *
 *     D = deficit * rw >= 0,    D(t) = max(0, D(t') - (t - t')*rl)
 *     allowed iff D(t) + p*rw <= full, and then D += p*rw
 *
 * Every quantity is an integer and the decision is exact whatever the rate
 * (3/s, 7/10s, 1/d, 10^9/s): nothing is rounded, so nothing drifts.  Bounds:
 * (t - t')*rl < 2^63 * 10^12 < 2^103 and full <= 2^63 * L (the parser bounds
 * the time to fill, full/rl, by 2^63-1 ns), so a u128 holds every sum and
 * every wait fits an int64.  When full < 2^64 -- every practical spec:
 * 100/s, 3/s, 1/d, 10^12/d -- D fits 64 bits and the state packs into one
 * 128-bit word with the latest time (limiter.c: lock-free).
 *
 *   remaining       floor((full - D) / rw)
 *   retry_after_ns  ceil((D + p*rw - full) / rl) for p <= B; -1 for p > B
 *   wait_ns         the leaky shaper: ceil(D / rl), the water before the
 *                   request, so admitted requests leave at the rate r
 *
 * Reservations (sluice_reserve): a request may take permits that are not
 * there yet, putting the bucket in debt (D > full), and is told to wait
 * ceil((D + p*rw - full) / rl) before it uses them -- x/time/rate's Reserve.
 * Cancelling before that time gives the p*rw back: D -= p*rw.  If nothing
 * was reserved after it, the bucket is then exactly as if the reservation
 * had never been made (the deficit only ever decays linearly while it is
 * positive); if something was, that later reservation keeps its longer
 * wait, so cancelling never lets more through than the contract would.
 * Settling (sluice__bucket_settle, docs/decisions.md 3.10) charges a cost
 * above the estimate as debt, and gives one below it back by the same rule,
 * or exactly when nothing has touched the state since the reservation.
 *
 * Entry points: the bucket functions both buckets share (sluice__bucket_decide,
 * _reserve, _give_back, _rest_at, _setup, _pack, _unpack, _decide_packed,
 * _refused_until, _carry, _fits) and sluice__token_bucket_ops, its row.
 */
#include "alg/alg.h"
#include "alg/bucket.h"

#include <stdio.h>

static inline u128 drain(const sluice__profile *pf, const sluice__state *st, uint64_t t)
{
    return sluice__sub_sat(st->u.bk.deficit, (u128)(t - st->t_last) * pf->rl);
}

/* A wait in ns as an int64: saturated, although the bound on the debt
 * (sluice__bucket_reserve) keeps every wait below 2^63 already. */
static inline int64_t wait_i64(u128 w)
{
    return w > (u128)INT64_MAX ? INT64_MAX : (int64_t)w;
}

bool sluice__bucket_decide(const sluice__profile *pf, sluice__state *st, uint64_t t,
                           uint64_t p, uint64_t max_wait, sluice_result *res)
{
    const u128 full = pf->cap_scaled;
    const u128 d = drain(pf, st, t);
    const u128 add = (u128)p * pf->rw; /* p > B implies add > full */
    /* a probe is always allowed, also while reservations keep the bucket
     * in debt (d > full) */
    bool ok = p == 0 || (d <= full && add <= full - d);
    uint64_t wait = 0;
    if (ok && pf->shaper && p != 0) {
        wait = (uint64_t)sluice__ceil_div64(d, pf->rl);
        ok = wait <= max_wait;
    }
    if (ok && p) { /* only an admission writes */
        st->t_last = t;
        st->u.bk.deficit = d + add;
    }
    if (!res) return ok;
    const u128 dd = ok ? d + add : d;
    uint64_t remaining = dd < full ? (uint64_t)sluice__div128(full - dd, pf->rw) : 0;
    if (ok) return sluice__allow(res, remaining, wait);
    if (wait > max_wait) { /* sluice_acquire: the wait exceeds the time left */
        sluice__deny(res, remaining, -1);
        res->wait_ns = wait;
        return false;
    }
    if (p > pf->capacity) return sluice__deny(res, remaining, -1);
    return sluice__deny(res, remaining, wait_i64(sluice__ceil_div64(d + add - full, pf->rl)));
}

bool sluice__bucket_reserve(const sluice__profile *pf, sluice__state *st, uint64_t t,
                            uint64_t p, uint64_t max_wait, sluice_result *res)
{
    /* reserving 0 permits is a probe: allowed, waits for nothing, changes
     * nothing -- also while the bucket is in debt */
    if (p == 0) return sluice__bucket_decide(pf, st, t, 0, max_wait, res);
    const u128 full = pf->cap_scaled;
    const u128 d = drain(pf, st, t);
    const u128 add = (u128)p * pf->rw;
    u128 over = d + add > full ? d + add - full : 0;
    u128 w = sluice__ceil_div64(over, pf->rl);
    if (pf->shaper && p != 0) {
        u128 ws = sluice__ceil_div64(d, pf->rl);
        if (ws > w) w = ws;
    }
    /* A reservation never waits beyond max_wait, nor past the end of the
     * time axis (t + w <= 2^63-1, so at_ns is a time).  The debt is bounded
     * too: the bucket must come back to rest within 2^63-1 ns,
     * ceil((d + add) / rl) <= INT64_MAX, so that every later wait and
     * retry_after_ns (both at most that) fits an int64; and the deficit
     * stays below 2^64 where it is packed. */
    const u128 dmax = (u128)INT64_MAX * pf->rl;
    const u128 limit = pf->packed && dmax > (u128)UINT64_MAX ? (u128)UINT64_MAX : dmax;
    bool ok = p <= pf->capacity && w <= max_wait && w <= (u128)((uint64_t)INT64_MAX - t) &&
              d + add <= limit;
    if (ok && p) {
        st->t_last = t;
        st->u.bk.deficit = d + add;
    }
    if (!res) return ok;
    const u128 dd = ok ? d + add : d;
    uint64_t remaining = dd < full ? (uint64_t)sluice__div128(full - dd, pf->rw) : 0;
    if (ok) return sluice__allow(res, remaining, (uint64_t)w);
    sluice__deny(res, remaining, -1);
    if (p <= pf->capacity) res->wait_ns = w > (u128)UINT64_MAX ? UINT64_MAX : (uint64_t)w;
    return false;
}

bool sluice__bucket_give_back(const sluice__profile *pf, sluice__state *st, uint64_t t,
                              uint64_t p, uint64_t at_ns)
{
    /* the permits' time has come (t is the clamped time, so a stale call
     * cannot give back permits that later admissions already counted on) */
    if (p == 0 || t >= at_ns) return false; /* nothing to give back: no write */
    u128 d = drain(pf, st, t);
    st->t_last = t;
    st->u.bk.deficit = sluice__sub_sat(d, (u128)p * pf->rw);
    return true;
}

/* The largest deficit the state may hold: the bucket back at rest within
 * 2^63-1 ns, and below 2^64 where it is packed (sluice__bucket_reserve). */
static inline u128 debt_max(const sluice__profile *pf)
{
    const u128 dmax = (u128)INT64_MAX * pf->rl;
    return pf->packed && dmax > (u128)UINT64_MAX ? (u128)UINT64_MAX : dmax;
}

/* A reservation settled at t (docs/decisions.md 3.10).  Below the
 * estimate, b = (p - a)*rw goes back in two cases:
 *   - t is before the reservation's time (its permits still booked, not
 *     yet due): the cancel's rule (sluice__bucket_give_back), D -= b;
 *   - nothing has written the state since the reservation (it is still
 *     (t0, d1)): then D(t) is d1 drained, and had it taken `a` it would be
 *     d1 - b drained, so D(t) -= min(b, max(0, d1 - (t - t0)*rl)): exactly
 *     the bucket that reservation would have left.
 * Otherwise the permits count as used: with other traffic since, the
 * bucket may have been full in the meantime had `a` been taken, and the
 * refill it lost there is not known, so giving back could let more through
 * than the contract.  Above it, (a - p)*rw joins the deficit at t: a debt,
 * saturating at debt_max. */
int sluice__bucket_settle(const sluice__profile *pf, sluice__state *st, uint64_t t,
                          const sluice__settle_req *q)
{
    const u128 d = drain(pf, st, t);
    u128 nd;
    if (q->a < q->p) {
        u128 back = (u128)(q->p - q->a) * pf->rw;
        if (t >= q->at_ns) {
            if (st->t_last != q->t0 || st->u.bk.deficit != q->d1) return 0; /* used */
            const u128 mine = sluice__sub_sat(q->d1, (u128)(t - q->t0) * pf->rl);
            if (back > mine) back = mine;
            if (back == 0) return 0; /* the refill made up for it all */
        }
        nd = sluice__sub_sat(d, back);
    } else {
        const u128 extra = (u128)(q->a - q->p) * pf->rw, dm = debt_max(pf);
        nd = d >= dm ? d : extra > dm - d ? dm : d + extra;
    }
    st->t_last = t;
    st->u.bk.deficit = nd;
    return 0;
}

uint64_t sluice__bucket_rest_at(const sluice__profile *pf, const sluice__state *st)
{
    return st->t_last + (uint64_t)sluice__ceil_div64(st->u.bk.deficit, pf->rl);
}

/* The buckets' options: burst (token-bucket) or capacity (leaky-bucket),
 * whichever belongs to the algorithm; default LIMIT. */
int sluice__bucket_setup(sluice__profile *pf, const sluice__opts *o, char *err, size_t errlen)
{
    const uint64_t L = pf->limit, W = pf->period_ns;
    const int k = pf->ops->options & SLUICE__OPT(SLUICE__OPT_BURST) ? SLUICE__OPT_BURST
                                                                     : SLUICE__OPT_CAPACITY;
    if (o->seen[k]) pf->capacity = o->val[k];
    pf->nodelay = o->seen[SLUICE__OPT_NODELAY];
    pf->shaper = k == SLUICE__OPT_CAPACITY && !pf->nodelay;
    /* time to fill = capacity * W / L must fit an int64 (292 years) */
    if ((u128)pf->capacity * W > (u128)INT64_MAX * L) {
        sluice__errf(err, errlen,
                     "\"%s=%llu\" too large: the bucket would take longer than 2^63 ns to %s at %llu per %llu ns",
                     k == SLUICE__OPT_BURST ? "burst" : "capacity", (unsigned long long)pf->capacity,
                     k == SLUICE__OPT_BURST ? "refill" : "drain", (unsigned long long)L,
                     (unsigned long long)W);
        return SLUICE_ERANGE;
    }
    const uint64_t g = sluice__gcd(L, W);
    pf->rl = L / g;
    pf->rw = W / g;
    pf->cap_scaled = (u128)pf->capacity * pf->rw;
    pf->packed = (pf->cap_scaled >> 64) == 0;
    return 0;
}

/* Packed: (latest admission's time, deficit), for deficits below 2^64. */
void sluice__bucket_pack(const sluice__profile *pf, const sluice__state *st, uint64_t out[2])
{
    (void)pf;
    out[0] = st->t_last;
    out[1] = (uint64_t)st->u.bk.deficit;
}

void sluice__bucket_unpack(const sluice__profile *pf, const uint64_t in[2], sluice__state *st)
{
    (void)pf;
    st->t_last = in[0];
    st->u.bk.deficit = in[1];
}

/* The lock-free path (limiter.c), for packed profiles, where full and the
 * deficit are below 2^64: the drain, the request and the test in 64-bit
 * arithmetic, which give the u128 machine's answer -- a drain that
 * overflows 64 bits exceeds any deficit (d = 0, as the saturated
 * subtraction gives), a request p*rw that overflows is above full.  A
 * refusal leaves the word as it was (its details, when asked for, in 64 bits
 * too: refusal_details); a decision that is not a shaper's grant (whose
 * wait needs a division) ends here as well, its details one 64-bit
 * division: a probe leaves the word, an admission packs (t, d + p*rw <=
 * full).  The rest goes to the machine: decide_packed_slow, on the unpacked word (t
 * already clamped), out of line so that the 64-bit path saves no
 * registers. */
static __attribute__((noinline)) bool decide_packed_slow(const sluice__profile *pf,
                                                         sluice__packed_req *q, uint64_t t)
{
    sluice__state st;
    sluice__bucket_unpack(pf, q->w, &st);
    const bool r = sluice__bucket_decide(pf, &st, t, q->p, q->max_wait, q->res);
    sluice__bucket_pack(pf, &st, q->out);
    return r;
}

/* A refusal's details (q->res not NULL) at the drained deficit d, in 64
 * bits: remaining (full - d)/rw; retry_after ceil((d + p*rw - full)/rl),
 * p*rw <= full for p <= B; a sum past 2^64 (deep debt) goes to the
 * machine.  Out of line, so that a bare refusal saves no registers. */
static __attribute__((noinline)) bool refusal_details(const sluice__profile *pf,
                                                      sluice__packed_req *q, uint64_t t,
                                                      uint64_t d)
{
    const uint64_t full = (uint64_t)pf->cap_scaled, p = q->p;
    const uint64_t add = p * pf->rw; /* used only for p <= B: no overflow */
    uint64_t over;
    if (p <= pf->capacity && d > full && __builtin_add_overflow(d - full, add, &over))
        return decide_packed_slow(pf, q, t);
    const uint64_t remaining = d < full ? (full - d) / pf->rw : 0;
    if (p > pf->capacity) return sluice__deny(q->res, remaining, -1);
    if (d <= full) over = add - (full - d); /* add > full - d: refused */
    const uint64_t n = over / pf->rl + (over % pf->rl != 0);
    return sluice__deny(q->res, remaining, n > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n);
}

bool sluice__bucket_decide_packed(const sluice__profile *pf, sluice__packed_req *q)
{
    const uint64_t t_last = q->w[0], deficit = q->w[1], p = q->p;
    const uint64_t now = q->now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : q->now_ns;
    const uint64_t t = now > t_last ? now : t_last; /* sluice__clamp_time */
    const uint64_t full = (uint64_t)pf->cap_scaled;
    uint64_t drained, add;
    const uint64_t d =
        __builtin_mul_overflow(t - t_last, pf->rl, &drained) || drained >= deficit
            ? 0
            : deficit - drained;
    const bool ok = p == 0 || (!__builtin_mul_overflow(p, pf->rw, &add) && d <= full &&
                               add <= full - d);
    if (!ok) return q->res ? refusal_details(pf, q, t, d) : false; /* out is w */
    if (p && pf->shaper) return decide_packed_slow(pf, q, t);
    if (p) {
        q->out[0] = t;
        q->out[1] = d + add;
    }
    if (!q->res) return true;
    /* the details of an admission or a probe that waits for nothing: what
     * is left, in whole permits (a probe in debt, d > full, has none) */
    const uint64_t dd = p ? d + add : d; /* an admission leaves dd <= full */
    return sluice__allow(q->res, dd < full ? (full - dd) / pf->rw : 0, 0);
}

/* The refusals' hint (internal.h): one permit is refused at t >= t0 iff
 * the drained deficit d(t) = D - (t - t0)*rl stays above full - rw, i.e.
 * while (t - t0)*rl < need = D - (full - rw): for t < t0 + ceil(need/rl),
 * saturated.  (rw <= full: the capacity is at least 1.)  An admission at
 * t' <= t adds to the deficit drained to t', which then drains as before,
 * so the words it makes refuse wherever w did; p*rw >= rw makes larger
 * requests refused too.  The division runs only when the bucket cannot
 * take one more permit, and not for rates whose rl is 1 (100/s, 1/d). */
uint64_t sluice__bucket_refused_until(const sluice__profile *pf, const uint64_t w[2])
{
    const uint64_t room = (uint64_t)pf->cap_scaled - pf->rw, rl = pf->rl;
    if (w[1] <= room) return 0;
    const uint64_t need = w[1] - room;
    const uint64_t n = rl == 1 ? need : need / rl + (need % rl != 0);
    uint64_t t;
    return __builtin_add_overflow(w[0], n, &t) ? UINT64_MAX : t;
}

/* ceil(x * to / from), saturated at max. */
static u128 rescale(u128 x, uint64_t from, uint64_t to, u128 max)
{
    const u128 q = x / from, r = x % from;
    if (q > max / to) return max;
    const u128 v = q * to + sluice__ceil_div(r * to, from);
    return v > max ? max : v;
}

/* A change of spec at t (reconfigure.c).  The level at t by the old rate,
 * in the new unit 1/rw' (rounded up: towards less room), cut to what
 * drains within 2^63-1 ns at the new rate.  token-bucket (`cap`): the
 * tokens, capped at the new burst -- tokens missing from it are
 * B' - min(B', B - d/rw), i.e. (B'*rw + d - B*rw)/rw when positive.
 * leaky-bucket: the water, kept whole (above the new capacity it refuses
 * until it has drained). */
void sluice__bucket_carry(const sluice__profile *from, const sluice__profile *to,
                          sluice__state *st, uint64_t t, bool cap)
{
    const u128 d = drain(from, st, t);
    const u128 max = (u128)INT64_MAX * to->rl;
    if (!cap) {
        st->u.bk.deficit = rescale(d, from->rw, to->rw, max);
        return;
    }
    const u128 have = (u128)to->capacity * from->rw + d; /* < 2^127 */
    st->u.bk.deficit =
        have > from->cap_scaled ? rescale(have - from->cap_scaled, from->rw, to->rw, max) : 0;
}

static void token_carry(const sluice__profile *from, const sluice__profile *to,
                        sluice__state *st, uint64_t t)
{
    sluice__bucket_carry(from, to, st, t, true);
}

/* A carried level may not fit 64 bits: then the limiter leaves the packed
 * word. */
bool sluice__bucket_fits(const sluice__profile *pf, const sluice__state *st)
{
    (void)pf;
    return (st->u.bk.deficit >> 64) == 0;
}

static int format(const sluice__profile *pf, char *buf, size_t buflen)
{
    if (pf->capacity == pf->limit) return snprintf(buf, buflen, "%s", "");
    return snprintf(buf, buflen, " burst=%llu", (unsigned long long)pf->capacity);
}

const sluice__alg_ops sluice__token_bucket_ops = {
    .name = "token-bucket",
    .options = SLUICE__OPT(SLUICE__OPT_BURST) | SLUICE__OPT(SLUICE__OPT_CLOCK),
    .setup = sluice__bucket_setup,
    .format = format,
    .decide = sluice__bucket_decide,
    .rest_at = sluice__bucket_rest_at,
    .pack = sluice__bucket_pack,
    .unpack = sluice__bucket_unpack,
    .decide_packed = sluice__bucket_decide_packed,
    .refused_until = sluice__bucket_refused_until,
    .bucket = true,
    .carry = token_carry,
    .fits = sluice__bucket_fits,
    .settle = sluice__bucket_settle,
};
