/* held.h -- one limit held by a decision of several limits (a composite),
 * as every kind of limit shares it.
 *
 *   sluice__held    what any held limit gives the decision: the profile,
 *                   the state to decide on, the state an admission leaves,
 *                   the verdict and the answer
 *   sluice__answer  one limit's answer, as the combination reads it
 *   sluice__judge   decide on a held state without writing it
 *
 * Each kind of limit embeds a sluice__held as the first field of its own
 * hold (limiter/hold.h: a limiter; table/hold.h: a key of a table, in
 * process or in a shared region), and composite/ runs the all-or-nothing
 * protocol over them (composite.c). */
#ifndef SLUICE_ALG_HELD_H
#define SLUICE_ALG_HELD_H

#include "base/internal.h"

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

#endif /* SLUICE_ALG_HELD_H */
