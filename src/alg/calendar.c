/* calendar.c -- calendar windows: days, weeks, months and years of a zone.
 *
 * A window runs from one local midnight to the next window's local
 * midnight, in the profile's zone (base/tzif.c gives the offsets):
 *
 *   d        a day, from 00:00 to the next day's 00:00 (23, 24 or 25 h)
 *   w        an ISO 8601 week, from Monday 00:00
 *   Nmonth   N months (N divides 12: 1 2 3 4 6 12), from day `anchor` of
 *            January, and of every Nth month after (a quarter: January,
 *            April, July, October); an anchor past the month's last day
 *            falls on that last day (31 -> 28 or 29 February)
 *   y        a year, from 1 January 00:00
 *
 * The instant a window starts is the first instant at which local time
 * reaches its first midnight (sluice__tz_first_reach): the earlier one when
 * a midnight happens twice, the end of the gap when a DST gap skips it.
 * These starts only move forward as the dates do, so the windows tile the
 * time axis.  The window of t: the local date of t gives a candidate
 * start date D; when t is already past the start of D's successor (local
 * time fell back across midnight), the window is the successor's.
 *
 * The hot path.  The zone keeps the latest window of each calendar (unit,
 * months, anchor) in a small cache under a sequence lock (base/seqlock.h):
 * a decision inside that window is one snapshot read and the check
 * start <= t < end, no calendar arithmetic.  A miss computes the window
 * and publishes it if no other thread is publishing into the slot then (a
 * failed compare-and-swap skips the publication: never a wait).
 *
 * Integer arithmetic only (civil dates from tzif.c); times are cut to
 * whole seconds for the zone (every offset and transition is whole
 * seconds), and the bounds are whole seconds again, in ns.
 */
#include "alg/calendar.h"

#include "base/seqlock.h"
#include "base/tzif.h"

#define NS 1000000000ULL
#define DAY 86400

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b < 0); }

/* The first day (since the epoch) of the window numbered i: for d and w
 * the day itself, for months a month count y * 12 + (m - 1), for y the
 * year. */
static int64_t first_day(const sluice__profile *pf, int64_t i)
{
    switch (pf->cal_unit) {
    case SLUICE__CAL_MONTH: {
        const int64_t y = floor_div(i, 12);
        const unsigned m = (unsigned)(i - y * 12) + 1;
        static const unsigned char md[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        const unsigned last = m == 2 && leap ? 29 : md[m - 1];
        return sluice__days_from_civil(y, m, pf->anchor < last ? pf->anchor : last);
    }
    case SLUICE__CAL_YEAR:
        return sluice__days_from_civil(i, 1, 1);
    default:
        return i;
    }
}

static int64_t step(const sluice__profile *pf)
{
    return pf->cal_unit == SLUICE__CAL_WEEK ? 7 : pf->cal_unit == SLUICE__CAL_MONTH ? pf->cal_n : 1;
}

/* The number of the window that holds local day `days` (by dates alone). */
static int64_t index_of(const sluice__profile *pf, int64_t days)
{
    int64_t y;
    unsigned m, d;
    switch (pf->cal_unit) {
    case SLUICE__CAL_WEEK:
        return days - (days + 3 - floor_div(days + 3, 7) * 7); /* the Monday on or before */
    case SLUICE__CAL_MONTH: {
        sluice__civil_from_days(days, &y, &m, &d);
        int64_t i = y * 12 + (m - 1);
        if (days < first_day(pf, i)) i--; /* before this month's anchor day */
        return floor_div(i, pf->cal_n) * pf->cal_n;
    }
    case SLUICE__CAL_YEAR:
        sluice__civil_from_days(days, &y, &m, &d);
        return y;
    default:
        return days;
    }
}

/* The instant (s) window i starts. */
static int64_t start_of(const sluice__profile *pf, int64_t i)
{
    return sluice__tz_first_reach(pf->tz, first_day(pf, i) * DAY);
}

static uint64_t to_ns(int64_t s)
{
    if (s <= 0) return 0;
    if ((uint64_t)s > (uint64_t)INT64_MAX / NS) return 1ULL << 63; /* past the axis */
    return (uint64_t)s * NS;
}

void sluice__cal_window(const sluice__profile *pf, uint64_t t, uint64_t *start, uint64_t *end)
{
    const uint64_t key = (uint64_t)pf->cal_unit | (uint64_t)pf->cal_n << 8 |
                         (uint64_t)pf->anchor << 16 | 1ULL << 24;
    _Static_assert(SLUICE__TZ_WINS == 8, "the slot is the top 3 bits of a Fibonacci hash");
    sluice__tz_win *w = sluice__tz_wins(pf->tz) + (key * 0x9E3779B97F4A7C15ULL >> 61);
    const uint64_t v = sluice__seq_begin(&w->seq);
    if (!(v & 1)) {
        const uint64_t k = SLUICE__GET(&w->key), s = SLUICE__GET(&w->start), e = SLUICE__GET(&w->end);
        if (sluice__seq_valid(&w->seq, v) && k == key && s <= t && t < e) {
            *start = s;
            *end = e;
            return;
        }
    }
    const int64_t sec = (int64_t)(t / NS); /* < 2^35 */
    const int64_t local = sec + sluice__tz_offset(pf->tz, sec);
    int64_t i = index_of(pf, floor_div(local, DAY));
    int64_t s = start_of(pf, i), e = start_of(pf, i + step(pf));
    for (int k = 0; k < 3 && to_ns(e) <= t; k++) { /* fell back across a start */
        i += step(pf);
        s = e;
        e = start_of(pf, i + step(pf));
    }
    *start = to_ns(s);
    *end = to_ns(e);
    uint64_t even = v;
    if (!(v & 1) && atomic_compare_exchange_strong(&w->seq, &even, v | 1)) { /* the hold */
        sluice__seq_held_fence();
        SLUICE__PUT(&w->key, key);
        SLUICE__PUT(&w->start, *start);
        SLUICE__PUT(&w->end, *end);
        sluice__seq_unhold(&w->seq);
    }
}
