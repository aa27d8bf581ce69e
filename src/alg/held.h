/* held.h -- one limit held by a decision of several limits (a composite),
 * as every kind of limit shares it.
 *
 *   sluice__held    what any held limit gives the decision: the profile,
 *                   the state to decide on, the state an admission leaves,
 *                   the verdict and the answer
 *   sluice__answer  one limit's answer, as the combination reads it
 *   sluice__judge   decide on a held state without writing it
 *   sluice__combine the composite's result from its limits' answers (the
 *                   rule, written once for every path that decides one)
 *
 * Each kind of limit embeds a sluice__held as the first field of its own
 * hold (limiter/hold.h: a limiter; table/hold.h: a key of a table, in
 * process or in a shared region), and composite/ runs the all-or-nothing
 * protocol over them (composite.c). */
#ifndef SLUICE_ALG_HELD_H
#define SLUICE_ALG_HELD_H

#include "alg/alg.h"

typedef struct sluice__held {
    const sluice__profile *pf; /* the profile the limit decides under */
    sluice__state *st;         /* the state to decide on (the kind's, or &base) */
    sluice__state base;        /* a copy of the state when it is not in place */
    sluice__state tmp;         /* a copy, or the state after the admission */
    bool ok;                   /* the limit's verdict */
    sluice_result r;           /* and its answer */
} sluice__held;

typedef struct sluice__answer {
    bool ok;
    sluice_result r;
} sluice__answer;

/* Decide a request on *st without writing *st or anything it points to:
 * the row's judge (a window log measures its ring in place), or
 * sluice__decide on *tmp, a copy, which then holds the state after the
 * admission, ready to be stored.  Returns whether the request would be
 * admitted; res (if not NULL) gets the answer. */
static inline bool sluice__judge(const sluice__profile *pf, const sluice__state *st,
                                 sluice__state *tmp, uint64_t now_ns, uint64_t permits,
                                 sluice_result *res)
{
    if (pf->ops->judge)
        return pf->ops->judge(pf, st, sluice__clamp_time(st, now_ns), permits, res);
    *tmp = *st;
    return sluice__decide(pf, tmp, now_ns, permits, UINT64_MAX, res);
}

/* The result of a decided composite from its limits' answers a[0..n)
 * (docs/decisions.md, 3.7): allowed = ok; the smallest remaining (a limit
 * that would have allowed a refused call reports its remaining without the
 * permits, which it still has); for an admission the largest wait_ns; for
 * a refusal the largest retry_after_ns of the refusing limits (-1 if any is
 * -1) and the first refusing limit's error.  Into *res and, each limit's
 * own as reported, per_limit[0..n) (either may be NULL).  Returns ok. */
static inline bool sluice__combine(const sluice__answer *a, size_t n, bool ok, uint64_t permits,
                                   sluice_result *res, sluice_result *per_limit)
{
    sluice_result c = {.allowed = ok};
    c.remaining = UINT64_MAX;
    int64_t retry = 0;
    bool never = false;
    for (size_t i = 0; i < n; i++) {
        sluice_result r = a[i].r;
        if (!ok && a[i].ok) { /* would have allowed: nothing was taken */
            r.remaining += permits;
            r.wait_ns = 0;
        }
        if (r.remaining < c.remaining) c.remaining = r.remaining;
        if (r.wait_ns > c.wait_ns) c.wait_ns = r.wait_ns;
        if (!a[i].ok) {
            if (r.retry_after_ns < 0) never = true;
            else if (r.retry_after_ns > retry) retry = r.retry_after_ns;
            if (!c.error) c.error = r.error;
        }
        if (per_limit) per_limit[i] = r;
    }
    if (!ok) {
        c.wait_ns = 0;
        c.retry_after_ns = never ? -1 : retry;
    }
    if (res) *res = c;
    return ok;
}

#endif /* SLUICE_ALG_HELD_H */
