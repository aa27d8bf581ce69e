/* fixed_window.c -- the fixed window counter.
 *
 * Contract (docs/decisions.md 3.1): windows are [kW, (k+1)W) on the time axis,
 * aligned to 0; a request for p is allowed iff the permits admitted in the
 * window of t, plus p, <= L.
 *
 * The textbook counter restarts its window at the first request after
 * the old one expired, so its windows drift with the traffic; here the
 * window is t / W, the same for every limiter and every run.
 *
 * State: the window index and the permits admitted in it (<= L); the index
 * is t / W by a precomputed multiply-and-shift (divide.h).  An idle gap of
 * any length is one such division.  Packed for lock-free updates, the state
 * is (latest time, count): the index is the latest time's.
 *
 *   remaining       L - count
 *   retry_after_ns  (k+1)W - t, the start of the next window, for p <= L;
 *                   -1 for p > L.
 *
 * Calendar quotas (tz=ZONE): the windows are those of alg/calendar.c
 * instead (a day, a week, N months, a year of the zone's local calendar),
 * and a window's number is its start in ns; the rest is unchanged, and
 * retry_after_ns is the exact time to the window's end.
 *
 * Entry point: sluice__fixed_window_ops, its row (setup, decide, rest_at,
 * pack/unpack, decide_packed, refused_until, carry, settle).  A calendar
 * quota gets a row of its own at setup, calendar_ops, the same but for
 * decide, decide_packed and refused_until, which find the calendar's
 * windows: so the plain row's decisions never test for a zone (a
 * refusal with its details cost 10 instructions more while they did).
 */
#include "alg/alg.h"

#include "alg/calendar.h"

/* The window of t: its number (k, or a calendar window's start), its
 * start and its end, in ns. */
typedef struct fw_win {
    uint64_t k, start, end;
} fw_win;

static inline __attribute__((always_inline)) fw_win window_in(const sluice__profile *pf, uint64_t t,
                                                             const bool cal)
{
    fw_win w;
    if (cal) {
        sluice__cal_window(pf, t, &w.start, &w.end);
        w.k = w.start;
        return w;
    }
    w.k = sluice__div_q(&pf->div_w, t);
    w.start = w.k * pf->period_ns; /* <= t: no overflow */
    w.end = w.start + pf->period_ns; /* as before: (k+1)W */
    return w;
}

/* For the calls that serve both rows. */
static inline __attribute__((always_inline)) fw_win window_of(const sluice__profile *pf, uint64_t t)
{
    return pf->tz ? window_in(pf, t, true) : window_in(pf, t, false);
}

/* Decide at t, whose window is wn. */
static inline __attribute__((always_inline)) bool
decide_k(const sluice__profile *pf, sluice__state *st, uint64_t t, const fw_win *wn, uint64_t p,
         sluice_result *res)
{
    const uint64_t k = wn->k;
    const uint64_t count = k == st->u.fw.window ? st->u.fw.count : 0;
    /* count may exceed L after a reconfiguration lowered it */
    const uint64_t room = count < pf->limit ? pf->limit - count : 0;
    const bool ok = p <= room;
    if (ok && p) { /* only an admission writes */
        st->t_last = t;
        st->u.fw.window = k;
        st->u.fw.count = count + p;
    }
    if (!res) return ok;
    if (ok) return sluice__allow(res, room - p, 0);
    return sluice__deny(res, room,
                        p > pf->limit ? -1 : (int64_t)(wn->end - t));
}

static bool decide(const sluice__profile *pf, sluice__state *st, uint64_t t, uint64_t p,
                   uint64_t max_wait, sluice_result *res)
{
    (void)max_wait;
    const fw_win wn = window_in(pf, t, false);
    return decide_k(pf, st, t, &wn, p, res);
}

static bool decide_cal(const sluice__profile *pf, sluice__state *st, uint64_t t, uint64_t p,
                       uint64_t max_wait, sluice_result *res)
{
    (void)max_wait;
    const fw_win wn = window_in(pf, t, true);
    return decide_k(pf, st, t, &wn, p, res);
}

static uint64_t rest_at(const sluice__profile *pf, const sluice__state *st)
{
    if (st->u.fw.count == 0) return st->t_last;
    return window_of(pf, st->t_last).end; /* <= t_last + W: no overflow */
}

static const sluice__alg_ops calendar_ops;

/* A calendar quota (tz=, parsed before this runs) gets the row whose
 * decisions find the calendar's windows; the plain row's never test for
 * one. */
static int setup(sluice__profile *pf, const sluice__opts *o, char *err, size_t errlen)
{
    (void)o, (void)err, (void)errlen;
    pf->packed = true; /* count <= L < 2^64 */
    if (pf->tz) pf->ops = &calendar_ops;
    return 0;
}

/* Packed: (latest admission's time, count); the window is the time's. */
static void pack(const sluice__profile *pf, const sluice__state *st, uint64_t out[2])
{
    (void)pf;
    out[0] = st->t_last;
    out[1] = st->u.fw.count;
}

static void unpack(const sluice__profile *pf, const uint64_t in[2], sluice__state *st)
{
    st->t_last = in[0];
    st->u.fw.window = window_of(pf, in[0]).k;
    st->u.fw.count = in[1];
}

/* unpack, clamp, decide, pack, with one division instead of two: the
 * latest admission (<= t) is in t's window k iff it is not before the
 * window's start kW.  A refusal or a probe leaves out as the caller set it: w. */
static inline __attribute__((always_inline)) bool
decide_packed_in(const sluice__profile *pf, sluice__packed_req *q, const bool cal)
{
    const uint64_t *w = q->w, now_ns = q->now_ns, p = q->p;
    uint64_t *out = q->out;
    sluice__state st;
    st.t_last = w[0];
    const uint64_t t = sluice__clamp_time(&st, now_ns);
    const fw_win wn = window_in(pf, t, cal);
    st.u.fw.window = wn.k;
    st.u.fw.count = w[0] >= wn.start ? w[1] : 0;
    const bool ok = decide_k(pf, &st, t, &wn, p, q->res);
    if (ok && p) pack(pf, &st, out); /* else out is w already */
    return ok;
}

static bool decide_packed(const sluice__profile *pf, sluice__packed_req *q)
{
    return decide_packed_in(pf, q, false);
}

static bool decide_packed_cal(const sluice__profile *pf, sluice__packed_req *q)
{
    return decide_packed_in(pf, q, true);
}

/* The refusals' hint (internal.h): a full window, count >= L, refuses
 * one permit (and more) until its end; admissions in it only add to the
 * count.  Else 0: one permit would pass at w[0]. */
static uint64_t refused_until(const sluice__profile *pf, const uint64_t w[2])
{
    if (w[1] < pf->limit) return 0;
    return window_in(pf, w[0], false).end; /* <= w[0] + W */
}

static uint64_t refused_until_cal(const sluice__profile *pf, const uint64_t w[2])
{
    if (w[1] < pf->limit) return 0;
    return window_in(pf, w[0], true).end;
}

/* A change of spec at t: the permits admitted in the old window of t count
 * in the new window of t (reconfigure.c). */
static void carry(const sluice__profile *from, const sluice__profile *to, sluice__state *st,
                  uint64_t t)
{
    const uint64_t count =
        st->u.fw.window == window_of(from, t).k ? st->u.fw.count : 0;
    st->u.fw.window = window_of(to, t).k;
    st->u.fw.count = count;
}

/* A reservation settled at t (docs/decisions.md 3.10).  Below the
 * estimate, the difference leaves the count while t is still in the
 * reservation's window (the count holds its permits, so this is exactly
 * the state had it taken `a`); a window that has ended no longer counts,
 * so there is nothing to give back.  Above it, the extra is counted in t's
 * window past L (saturating at 2^64-1): nothing more passes there. */
static int settle(const sluice__profile *pf, sluice__state *st, uint64_t t,
                  const sluice__settle_req *q)
{
    const uint64_t k = window_of(pf, t).k; /* a calendar window's start, as everywhere */
    const uint64_t count = k == st->u.fw.window ? st->u.fw.count : 0;
    uint64_t n;
    if (q->a < q->p) {
        if (k != window_of(pf, q->t0).k || k != st->u.fw.window) return 0;
        n = count > q->p - q->a ? count - (q->p - q->a) : 0;
    } else {
        n = q->a - q->p > UINT64_MAX - count ? UINT64_MAX : count + (q->a - q->p);
    }
    st->t_last = t;
    st->u.fw.window = k;
    st->u.fw.count = n;
    return 0;
}

const sluice__alg_ops sluice__fixed_window_ops = {
    .name = "fixed-window",
    .options = SLUICE__OPT(SLUICE__OPT_CLOCK) | SLUICE__OPT(SLUICE__OPT_TZ) | SLUICE__OPT(SLUICE__OPT_ANCHOR),
    .setup = setup,
    .format = sluice__format_no_options,
    .decide = decide,
    .rest_at = rest_at,
    .pack = pack,
    .unpack = unpack,
    .decide_packed = decide_packed,
    .refused_until = refused_until,
    .carry = carry,
    .settle = settle,
};

/* Calendar quotas (tz=): the same row but for the three calls every
 * decision makes.  Not in spec.c's table of names: setup() picks it. */
static const sluice__alg_ops calendar_ops = {
    .name = "fixed-window",
    .options = SLUICE__OPT(SLUICE__OPT_CLOCK) | SLUICE__OPT(SLUICE__OPT_TZ) | SLUICE__OPT(SLUICE__OPT_ANCHOR),
    .setup = setup,
    .format = sluice__format_no_options,
    .decide = decide_cal,
    .rest_at = rest_at,
    .pack = pack,
    .unpack = unpack,
    .decide_packed = decide_packed_cal,
    .refused_until = refused_until_cal,
    .carry = carry,
    .settle = settle,
};
