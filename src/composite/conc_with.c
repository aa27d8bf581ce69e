/* conc_with.c -- a concurrency limit and rate limits on one request, all
 * or nothing (sluice_acquire_permit_with_at, sluice/concurrency.h).
 *
 * The concurrency limit is held first (limiter/concurrency.c,
 * sluice__conc_hold: its word frozen, or its lease book locked) only when
 * it would admit; then the rate limits are decided as one composite
 * (composite.c); then the concurrency limit takes the permits if the
 * composite admitted, or is let go unchanged.  While it is held no other
 * call on it proceeds, so its decisions and the composite's are those of
 * one order of all calls: the request took effect at the composite's
 * instant, on every limit, or on none.  Nothing blocks while it is held
 * (a composite decision never waits on a lock it cannot take at once for
 * long: composite.c).
 *
 * Entry point: sluice_acquire_permit_with_at.
 */
#include "base/internal.h"
#include "limiter/concurrency.h"

bool sluice_acquire_permit_with_at(sluice_concurrency *c, const sluice_limit_ref *refs, size_t n,
                                   uint64_t permits, uint64_t now_ns, sluice_permit *pm,
                                   sluice_result *res)
{
    sluice_result tmp;
    if (!res) res = &tmp;
    if (pm) *pm = (sluice_permit){0};
    if (!c || !pm || !refs || n < 1 || n > SLUICE_COMPOSITE_MAX) return sluice__fail(res, SLUICE_EINVAL);
    sluice_result cr, rr;
    uint64_t snap;
    if (!sluice__conc_hold(c, permits, now_ns, &snap, &cr)) {
        *res = cr; /* the concurrency limit refused: the rate limits are not asked */
        return false;
    }
    bool ok = sluice_composite_try_acquire_at(refs, n, permits, now_ns, &rr, NULL);
    sluice__conc_unhold(c, snap, ok, permits, pm);
    *res = rr;
    /* remaining: the smaller; the concurrency limit's without the permits
     * when the request was refused (it would have allowed) */
    uint64_t crem = ok ? cr.remaining : cr.remaining + permits;
    if (crem < res->remaining) res->remaining = crem;
    return ok;
}
