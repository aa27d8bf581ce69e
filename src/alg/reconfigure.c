/* reconfigure.c -- changing a running limiter's spec, keeping its state.
 *
 * The rule (docs/decisions.md, 3.8; docs/c-api.md, "Changing a limit while it
 * runs"): a change at time t keeps what the limiter has admitted and
 * decides from t on with the new LIMIT and PERIOD.  t is now_ns clamped to the latest admission (time
 * never goes backwards), and the state's time becomes t: a later request
 * with an earlier time is decided at t, under the new spec -- the change is
 * never applied to the past.  Per algorithm:
 *
 *   sliding-log, sliding-wheel   the ring keeps every admission at its slot;
 *       from t on the window is the new one (N' = PERIOD'/tick).  The slot
 *       width (tick) must stay: sliding-wheel refuses a change of it (the
 *       ring's slots would mean other instants); sliding-log's is 1 ns.
 *       Admissions retired by later admissions are gone; when a longer new
 *       window reaches back to them, one entry stands in for them with a
 *       bound (window_log.c): never admitting what the whole history
 *       would refuse.
 *   fixed-window   the permits admitted in the window of t (by the old
 *       PERIOD) count in the window of t by the new PERIOD.
 *   sliding-approx  the counts keep no times, only windows: each old count
 *       is placed in the newest new window that any of its admissions can
 *       lie in (the old current window's admissions are at most the latest
 *       admission; the previous window's end at its end), so the estimate
 *       is never below the one of the admissions' real times: it may refuse
 *       a little more than the new spec would, never admit more.  With an
 *       unchanged PERIOD this is exact.
 *   token-bucket   tokens(t) by the old rate, capped at the new burst; then
 *       the new rate.  A debt of reservations is kept.
 *   leaky-bucket   water(t) by the old rate, kept (above the new capacity
 *       it refuses until it has drained); then the new rate.
 *
 * The buckets keep their level in units of 1/rw permit (token_bucket.c);
 * the new unit is 1/rw', and a level that does not fall on it is rounded
 * towards less room (up to 1/rw' permit: never more admitted).  A level
 * that would take longer than 2^63-1 ns (292 years) to drain at the new
 * rate is cut to that, so every wait fits an int64.
 *
 * Refused: another algorithm, and sliding-wheel's slot width (both would
 * need the admissions' exact times, which the state does not keep); a
 * change between a calendar quota (tz=, times since the Unix epoch) and a
 * spec on the monotonic axis (their times do not compare); and a calendar
 * quota's period_ns through the limit knob (its spec names its period).
 *
 * What is generic is here; each algorithm's part is in its row of
 * operations (internal.h: recheck, carry, fits), next to its decide.
 *
 * Entry points: sluice__reconfigure_check (may `from` become `to`),
 * sluice__reconfigure_state (carry a state), sluice__state_packable,
 * sluice__reconfigure_knob (one option changed), sluice__reconfigure_fit.
 */
#include "alg/alg.h"
#include "alg/reconfigure.h"

int sluice__reconfigure_check(const sluice__profile *from, const sluice__profile *to,
                              char *err, size_t errlen)
{
    if (from->alg != to->alg) {
        sluice__errf(err, errlen,
                     "cannot change the algorithm \"%s\" of a running limiter to \"%s\": make a new limiter",
                     from->ops->name, to->ops->name);
        return SLUICE_EINVAL;
    }
    if ((from->tz != NULL) != (to->tz != NULL)) {
        sluice__errf(err, errlen, "cannot change a %s into a %s: the time axes differ (tz= reads the Unix epoch); make a new limiter",
                     from->tz ? "calendar quota (tz=)" : "spec without tz=",
                     from->tz ? "spec without tz=" : "calendar quota (tz=)");
        return SLUICE_EINVAL;
    }
    return to->ops->recheck ? to->ops->recheck(from, to, err, errlen) : 0;
}

void sluice__reconfigure_state(const sluice__profile *from, const sluice__profile *to,
                               sluice__state *st, uint64_t now_ns)
{
    const uint64_t t = sluice__clamp_time(st, now_ns);
    if (to->ops->carry) to->ops->carry(from, to, st, t);
    st->t_last = t; /* the change is never applied to the past */
}

bool sluice__state_packable(const sluice__profile *pf, const sluice__state *st)
{
    return pf->packed && (!pf->ops->fits || pf->ops->fits(pf, st));
}

int sluice__reconfigure_knob(const sluice__profile *cur, int knob, uint64_t a, uint64_t b,
                             char *buf, size_t buflen, char *err, size_t errlen)
{
    sluice__profile k = *cur;
    if (knob == SLUICE__KNOB_LIMIT) {
        if (a == 0 || b == 0) {
            sluice__errf(err, errlen, "bad %s 0: expected a whole number >= 1",
                         a == 0 ? "limit" : "period_ns");
            return SLUICE_EINVAL;
        }
        if (cur->tz && b != cur->period_ns) {
            sluice__errf(err, errlen, "bad period_ns %llu: a calendar quota (tz=) keeps the period of its spec; change it with a new spec",
                         (unsigned long long)b);
            return SLUICE_EINVAL;
        }
        k.limit = a;
        k.period_ns = b;
        if (k.alg == SLUICE__SLIDING_WHEEL) k.slots = b / cur->tick_ns;
        if (!k.ops->bucket) k.capacity = a;
    } else {
        if (!k.ops->bucket) {
            sluice__errf(err, errlen, "burst applies to token-bucket and leaky-bucket only");
            return SLUICE_EINVAL;
        }
        if (a == 0) {
            sluice__errf(err, errlen, "bad burst 0: expected a whole number >= 1");
            return SLUICE_EINVAL;
        }
        k.capacity = a;
    }
    if (sluice__spec_format(&k, buf, buflen) < 0) {
        sluice__errf(err, errlen, "cannot format the new spec");
        return SLUICE_EINVAL;
    }
    return 0;
}

void sluice__reconfigure_fit(const sluice__profile *pf, sluice__state *st)
{
    if (sluice__state_packable(pf, st)) return;
    if (pf->ops->bucket) { /* above the (packed) full bucket: refuses as long */
        st->u.bk.deficit = UINT64_MAX;
    } else if (pf->alg == SLUICE__SLIDING_APPROX) {
        const uint64_t top = ((uint64_t)1 << 32) - 1; /* above the (packed) L */
        if (st->u.sa.cur > top) st->u.sa.cur = top;
        if (st->u.sa.prev > top) st->u.sa.prev = top;
    }
}
