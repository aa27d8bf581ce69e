/* fixed_window.c -- the fixed window counter.
 *
 * Contract (CONTRACT.md 3.1): windows are [kW, (k+1)W) on the time axis,
 * aligned to 0; a request for p is allowed iff the permits admitted in the
 * window of t, plus p, <= L.
 *
 * The seed article's counter restarts its window at the first request after
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
 */
#include "internal.h"

bool sluice__fixed_window_decide(const sluice__profile *pf, sluice__state *st,
                                 uint64_t t, uint64_t p, uint64_t max_wait,
                                 sluice_result *res)
{
    (void)max_wait;
    const uint64_t k = sluice__div_q(&pf->div_w, t);
    const uint64_t count = k == st->u.fw.window ? st->u.fw.count : 0;
    const uint64_t room = pf->limit - count;
    const bool ok = p <= room;
    if (ok && p) { /* only an admission writes */
        st->t_last = t;
        st->u.fw.window = k;
        st->u.fw.count = count + p;
    }
    if (!res) return ok;
    if (ok) return sluice__allow(res, room - p, 0);
    return sluice__deny(res, room,
                        p > pf->limit ? -1 : (int64_t)((k + 1) * pf->period_ns - t));
}

uint64_t sluice__fixed_window_rest_at(const sluice__profile *pf,
                                      const sluice__state *st)
{
    if (st->u.fw.count == 0) return st->t_last;
    return (st->u.fw.window + 1) * pf->period_ns; /* <= t_last + W: no overflow */
}
