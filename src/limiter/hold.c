/* hold.c -- a limiter as one limit of a composite decision (hold.h):
 * composite.c's general path runs the all-or-nothing protocol
 * (alg/attempt.h) over the kind ops here, and the fast path for composites
 * of lock-free limiters only (sluice__limiters_try) runs the same protocol
 * over steps on snapshots of the words, proved below.
 *
 * Map:  the kind ops (sluice__limiter_hold, _release, _count,
 *       _count_elsewhere); the fast path: count_all, count_elsewhere_rest,
 *       rest_ok, holds, its steps (lim_call: l_hold, l_take with
 *       take_words, l_store, l_confirm), limiters_decide (the proof above
 *       it),
 *       sluice__limiters_try, sluice__limiters_each.
 *
 * A file apart from limiter.c costs the fast path nothing: what it inlines
 * of the word (load_word, mkword, wait_frozen) comes from lim.h, so the
 * compiled functions are those of the one file (objdump: same sizes, same
 * calls).
 */
#include "limiter/lim.h"

#include "alg/attempt.h"

/* ---- composite decisions: a limiter's kind ops (limiter/hold.h) -------- */

/* A composite holds a lock-free limiter by freezing its word (a CAS from a
 * snapshot to the snapshot with the frozen bit), so that no other decision
 * can commit, or decide on it, until the release; a limiter in the locked
 * path by its mutex. */
void sluice__limiter_hold(sluice__lim_hold *part)
{
    sluice_limiter *lim = part->lim;
    cfg *c = cur_cfg(lim);
#if HAVE_CAS128
    while (c->lockfree) {
        u128 v;
        if (!load_word(&c->packed, &v)) {
            c = wait_frozen(lim, c);
            continue;
        }
        if (__sync_bool_compare_and_swap(&c->packed.w, v, v | FROZEN)) {
            uint64_t w[2] = {(uint64_t)v, (uint64_t)(v >> 64)};
            sluice__state_unpack(&c->pf, w, &part->h.base);
            part->lockfree = true;
            part->snap = v;
            part->where = c;
            part->h.pf = &c->pf;
            part->h.st = &part->h.base;
            return;
        }
    }
#endif
    pthread_mutex_lock(&lim->mu);
    c = cur_cfg(lim); /* stable while mu is held; never lock-free again */
    if (lim->pub) sluice__log_begin(lim->pub); /* ends at the release */
    part->lockfree = false;
    part->where = c;
    part->h.pf = &c->pf;
    part->h.st = &lim->st;
}

void sluice__limiter_release(sluice__lim_hold *part, bool commit)
{
    cfg *c = part->where;
#if HAVE_CAS128
    if (part->lockfree) {
        /* the count half first, then the time half without the frozen bit
         * (release): a reader that sees the bit clear sees the new count */
        uint64_t w[2] = {(uint64_t)part->snap, (uint64_t)(part->snap >> 64)};
        if (commit) {
            sluice__state_pack(&c->pf, &part->h.tmp, w);
            __atomic_store_n(&c->packed.h[1], w[1], __ATOMIC_RELEASE);
        }
        __atomic_store_n(&c->packed.h[0], w[0], __ATOMIC_RELEASE);
        return;
    }
#endif
    if (commit && !c->pf.ops->judge) part->lim->st = part->h.tmp;
    if (part->lim->pub) sluice__log_end(part->lim->pub, &part->lim->st, NULL, commit);
    pthread_mutex_unlock(&part->lim->mu);
}

void sluice__limiter_count(sluice_limiter *lim, uint64_t permits, bool ok)
{
    sluice__count(&lim->counters, permits, ok);
}

void sluice__limiter_count_elsewhere(sluice_limiter *lim, uint64_t permits)
{
    sluice__count_elsewhere(&lim->counters, permits);
}

/* The composite fast path, when every limit is a lock-free limiter
 * (sluice__limiters_try; composite.c runs it first), and its proof: the
 * protocol (SLUICE__ATTEMPT) with a snapshot of each word for its hold
 * (l_hold), a freeze and a swap for its take (l_take, l_store), a second
 * read for its confirm (l_confirm).  Each limit is read and decided once, as a single decision is -- one snapshot
 * of its 16-byte word (load_word: a value the word held at one instant),
 * one decide_packed, which gives its answer too when details are asked --
 * and counted inline in each limiter; the combination (sluice__combine)
 * is made there as well, with no other setup.  The one common order is
 * that of the instants X below:
 *
 *   refused, no details asked   the first limit that refuses on its
 *        snapshot decides the call.  At the instant X of that snapshot the
 *        limit refused the request, so the composite was refused at X,
 *        whatever the others held; it writes nothing, so placing it at X
 *        changes no limit's sequence of states.  The other limits' answers
 *        are not reported, so they need no instant in common: the limits
 *        after the refusing one are not read at all.
 *   refused with details, or a probe   every limit's answer is reported,
 *        so they need one instant: once all are decided, every word but the
 *        last one read is read again; each still at its snapshot held it
 *        from its first read to its second, so all held theirs at the
 *        instant of the last snapshot (after every other first read, before
 *        every second read), and X is there.  Nothing is written; a word
 *        that moved: start over.  (A word comes back to a value it
 *        held before only when a reservation is cancelled at the same
 *        clamped time, which restores the bucket exactly; a call whose two
 *        reads straddle both may combine that limit without the
 *        reservation with another limit as it was while it was out.)  The
 *        details are the answers of the decisions on those snapshots --
 *        with res but no per_limit, only the refusing limits' are combined:
 *        a limit that would have allowed has at least the permits remaining
 *        without them, a refusing one fewer, so it never gives the
 *        smallest, and it has no retry_after_ns.
 *   admitted   every word but the last, in one order for all calls (by
 *        limiter address), is frozen with a CAS from its snapshot: from then
 *        on it holds its snapshot, every CAS on it fails and every reader
 *        waits.  The CAS of the last word from its snapshot to its new value
 *        is X: all words hold their snapshots at X, and each limit's new
 *        state is the one the decision on its snapshot gave.  The frozen
 *        words then get theirs before anyone can decide on them.  A failed
 *        CAS (another decision got in) unfreezes, unchanged, what was frozen
 *        and starts over; nothing is waited for while a word is held, and
 *        the order by address lets one of two contending calls through.
 *
 * No over-admission: every admission, single or composite, moves each word
 * it charges from a value it held at X to the value the decision on that
 * value gave.  No permit lost: a refusal or a probe writes nothing, and a
 * word frozen for nothing is restored to the value it held.
 *
 * limiters_decide returns 1 (admitted, or a probe that every limit
 * allows), 0 (refused), -1 when the call is not one for this path -- a bad
 * call, a ref that is not a limiter, a limiter named twice, or one that
 * takes the locked path (nothing decided, nothing counted: the caller's
 * `otherwise`, composite.c's general path, takes it).  The answers are those on
 * the snapshots the call is linearised at: with res, their combination;
 * with ans, each limit's. */
#if HAVE_CAS128
/* Count one composite call in each of its limiters, as sluice__count
 * (counters.h) does, the thread's stripe looked up once and the two
 * counters the call adds to chosen once: at the same offsets in every
 * limiter. */
static inline __attribute__((always_inline)) void
count_all(const sluice_limit_ref *refs, size_t n, uint64_t permits, bool ok)
{
    const unsigned slot = sluice__my_slot - 1; /* UINT_MAX when not chosen */
    if (slot >= SLUICE__STRIPES - 1) {
        for (size_t j = 0; j < n; j++) sluice__count(&refs[j].limiter->counters, permits, ok);
        return;
    }
    const size_t at = offsetof(sluice_limiter, counters) + slot * sizeof(sluice__stripe);
    const size_t req = permits == 0 ? offsetof(sluice__stripe, probes)
                       : ok         ? offsetof(sluice__stripe, requests_allowed)
                                    : offsetof(sluice__stripe, requests_denied);
    const size_t per = ok ? offsetof(sluice__stripe, permits_allowed)
                          : offsetof(sluice__stripe, permits_denied);
    if (permits == 0) {
        SLUICE__UNROLL
        for (size_t j = 0; j < n; j++)
            sluice__own_inc((_Atomic uint64_t *)((char *)refs[j].limiter + at + req));
        return;
    }
    SLUICE__UNROLL
    for (size_t j = 0; j < n; j++) {
        char *s = (char *)refs[j].limiter + at;
        sluice__own_inc((_Atomic uint64_t *)(s + req));
        sluice__own_add((_Atomic uint64_t *)(s + per), permits);
    }
}

/* A composite refused by limit i with no details asked, counted denied in
 * every limit: each other limit that would have admitted counts
 * denied_elsewhere too -- those before i admitted on their snapshots; those
 * after i, not read by the call, are decided now on a snapshot of their
 * own (a read: nothing is written; a word held by a composite or frozen by
 * a change counts as not admitting).  Off the path of admissions. */
static __attribute__((noinline)) void count_elsewhere_rest(const sluice_limit_ref *refs, size_t i,
                                                           size_t n, uint64_t permits,
                                                           uint64_t now_ns)
{
    for (size_t j = 0; j < n && permits; j++) {
        if (j == i) continue;
        bool would = j < i;
        if (j > i) {
            cfg *c = cur_cfg(refs[j].limiter);
            u128 v;
            if (c->lockfree && load_word(&c->packed, &v)) {
                const uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64);
                sluice__packed_req q = {.w = {lo, hi}, .now_ns = now_ns, .p = permits,
                                        .max_wait = UINT64_MAX, .res = NULL, .out = {lo, hi}};
                would = c->pf.ops->decide_packed(&c->pf, &q);
            }
        }
        if (would) sluice__count_elsewhere(&refs[j].limiter->counters, permits);
    }
}

/* Whether refs[i..n) are limiters, none of them named twice in refs[0..n)
 * (those before i were checked as they were decided). */
static __attribute__((noinline)) bool rest_ok(const sluice_limit_ref *refs, size_t i, size_t n)
{
    for (; i < n; i++) {
        if (!refs[i].limiter || refs[i].table) return false;
        for (size_t j = 0; j < i; j++)
            if (refs[j].limiter == refs[i].limiter) return false;
    }
    return true;
}

/* Whether c's word holds the snapshot w: load_word's three loads, each
 * compared with its half of w.  w's time half has the frozen bit clear, so
 * a frozen word never matches; nor does one that moved between the loads
 * (the caller then starts over, as it does for any word that moved). */
static inline bool holds(const cfg *c, const uint64_t w[2])
{
    return __atomic_load_n(&c->packed.h[0], __ATOMIC_ACQUIRE) == w[0] &&
           __atomic_load_n(&c->packed.h[1], __ATOMIC_ACQUIRE) == w[1] &&
           __atomic_load_n(&c->packed.h[0], __ATOMIC_ACQUIRE) == w[0];
}

/* What the caller asks for: nothing but the verdict, the combination of
 * the answers (into res), or every limit's answer (into ans). */
enum { DETAILS_NONE, DETAILS_SUM, DETAILS_EACH };

/* One call of the fast path: the protocol's steps (alg/attempt.h) over
 * snapshots of the limiters' words.  Inlined into limiters_decide, where n
 * and details are constants of each copy: they stay so only while the
 * call's own record never escapes, so the arrays that the decisions are
 * handed (q, as, ans) are the caller's, reached through pointers. */
typedef struct lim_call {
    const sluice_limit_ref *refs;
    size_t n;
    uint64_t permits, now_ns;
    int details;
    cfg **cs;
    sluice__packed_req *q; /* snapshot w, the admission's word out */
    sluice__answer *as;    /* DETAILS_SUM: each limit's answer */
    sluice__answer *ans;   /* DETAILS_EACH: each limit's answer */
    bool *oks;
    size_t last; /* the word the take swapped */
} lim_call;

/* Hold limit i: a snapshot of its word, decided on as a single decision
 * is.  Without details, a refusal decides the call (the first refusing
 * limit: the proof's first case). */
static inline __attribute__((always_inline)) int l_hold(lim_call *lc, size_t i)
{
    const sluice_limit_ref *refs = lc->refs;
    sluice_limiter *lim = refs[i].limiter;
    if (!lim || refs[i].table) return SLUICE__HANDOVER;
    SLUICE__UNROLL
    for (size_t j = 0; j < i; j++)
        if (refs[j].limiter == lim) return SLUICE__HANDOVER; /* a limiter twice */
    cfg *c = cur_cfg(lim);
    if (!c->lockfree) return SLUICE__HANDOVER;
    u128 v;
    if (!load_word(&c->packed, &v)) { /* held: wait, start over */
        wait_frozen(lim, c);
        return SLUICE__AGAIN;
    }
    lc->cs[i] = c;
    const uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64);
    lc->q[i] = (sluice__packed_req){.w = {lo, hi}, .now_ns = lc->now_ns, .p = lc->permits,
                                    .max_wait = UINT64_MAX,
                                    .res = lc->details == DETAILS_SUM    ? &lc->as[i].r
                                           : lc->details == DETAILS_EACH ? &lc->ans[i].r
                                                                         : NULL,
                                    .out = {lo, hi}};
    const bool ok = c->pf.ops->decide_packed(&c->pf, &lc->q[i]);
    if (lc->details == DETAILS_NONE) {
        if (ok) return 1;
        /* this limit alone refuses the call -- a good one -- counted here,
         * where the verdict is a constant */
        if (i + 1 < lc->n && !rest_ok(refs, i + 1, lc->n)) return SLUICE__HANDOVER;
        count_all(refs, lc->n, lc->permits, false);
        count_elsewhere_rest(refs, i, lc->n, lc->permits, lc->now_ns);
        return SLUICE__STOP;
    }
    lc->oks[i] = ok;
    return ok;
}

/* Every word but the last, in one order for all calls (by limiter
 * address), frozen from its snapshot; the last swapped from its snapshot
 * to its new value.  A failed CAS unfreezes, unchanged, what was frozen.
 * Returns the index of the word swapped, or n when none was taken. */
static inline __attribute__((always_inline)) size_t
take_words(const sluice_limit_ref *refs, cfg *const *cs, const sluice__packed_req *q, size_t n)
{
    unsigned char o[SLUICE_COMPOSITE_MAX]; /* by address (insertion, n is small) */
    for (size_t j = 0; j < n; j++) {
        size_t k = j;
        for (; k > 0 && (uintptr_t)refs[o[k - 1]].limiter > (uintptr_t)refs[j].limiter; k--)
            o[k] = o[k - 1];
        o[k] = (unsigned char)j;
    }
    size_t k = 0; /* freeze all but the last */
    for (; k + 1 < n; k++) {
        const sluice__packed_req *x = &q[o[k]];
        if (!__sync_bool_compare_and_swap(&cs[o[k]]->packed.w, mkword(x->w[0], x->w[1]),
                                          mkword(x->w[0] | FROZEN, x->w[1])))
            break;
    }
    const sluice__packed_req *x = &q[o[k]];
    if (k + 1 < n || !__sync_bool_compare_and_swap(&cs[o[k]]->packed.w, mkword(x->w[0], x->w[1]),
                                                   mkword(x->out[0], x->out[1]))) {
        for (size_t j = 0; j < k; j++) /* unfreeze, unchanged */
            __atomic_store_n(&cs[o[j]]->packed.h[0], q[o[j]].w[0], __ATOMIC_RELEASE);
        return n;
    }
    return o[k];
}

static inline __attribute__((always_inline)) bool l_take(lim_call *lc)
{
    lc->last = take_words(lc->refs, lc->cs, lc->q, lc->n);
    return lc->last < lc->n;
}

/* A frozen word gets its new value: the count half, then the time half
 * without the bit (release).  The last was swapped already. */
static inline __attribute__((always_inline)) void l_store(lim_call *lc, size_t i)
{
    if (i == lc->last) return;
    word *pw = &lc->cs[i]->packed;
    __atomic_store_n(&pw->h[1], lc->q[i].out[1], __ATOMIC_RELEASE);
    __atomic_store_n(&pw->h[0], lc->q[i].out[0], __ATOMIC_RELEASE);
}

/* A refusal with details, or a probe: every word but the last one read
 * still at its snapshot (the last snapshot's instant: no need to read it
 * again). */
static inline __attribute__((always_inline)) bool l_confirm(lim_call *lc)
{
    SLUICE__UNROLL
    for (size_t j = 0; j + 1 < lc->n; j++)
        if (!holds(lc->cs[j], lc->q[j].w)) return false;
    return true;
}

/* Nothing to prepare, settle or let go: an admission's take is its
 * commit, and a snapshot holds nothing. */
static inline bool l_prepare(lim_call *lc)
{
    (void)lc;
    return true;
}
static inline void l_settle(lim_call *lc, bool ok) { (void)lc, (void)ok; }
static inline void l_release(lim_call *lc, size_t i, bool stored)
{
    (void)lc, (void)i, (void)stored;
}

SLUICE__ATTEMPT(lim_attempt, lim_call, l)

static inline __attribute__((always_inline)) int
limiters_decide(const sluice_limit_ref *refs, size_t n, uint64_t permits, uint64_t now_ns,
                sluice_result *res, sluice__answer *ans, const int details)
{
    cfg *cs[SLUICE_COMPOSITE_MAX];
    sluice__packed_req q[SLUICE_COMPOSITE_MAX];
    sluice__answer as[SLUICE_COMPOSITE_MAX];
    bool oks[SLUICE_COMPOSITE_MAX];
    lim_call lc = {.refs = refs, .n = n, .permits = permits, .now_ns = now_ns,
                   .details = details, .cs = cs, .q = q, .as = as, .ans = ans, .oks = oks};
    int got;
    while ((got = lim_attempt(&lc, n, permits)) == SLUICE__AGAIN) {
    }
    if (got < 0) return -1;
    if (details == DETAILS_NONE) { /* a refusal was counted by l_hold */
        if (got) count_all(refs, n, permits, true);
        return got;
    }
    if (got) /* each branch counts with its own constant */
        count_all(refs, n, permits, true);
    else
        count_all(refs, n, permits, false);
    if (!got && permits) /* who would have admitted */
        for (size_t j = 0; j < n; j++)
            if (oks[j]) sluice__count_elsewhere(&refs[j].limiter->counters, permits);
    if (details == DETAILS_EACH)
        for (size_t j = 0; j < n; j++) ans[j].ok = oks[j];
    if (details == DETAILS_SUM) { /* the combination (alg/held.h) */
        SLUICE__UNROLL
        for (size_t j = 0; j < n; j++) as[j].ok = oks[j];
        sluice__combine(as, n, got, permits, res, NULL);
    }
    return got;
}

/* Two copies: without details, the refusal's path is short.  Each hands an
 * undecided call over itself, with what it knows -- n a constant in the
 * copies for 2 to 4 limits, res NULL in the copy without details, the time
 * already clamped (the general path clamps it the same way) -- so that the
 * only value the fast path keeps for the hand-over alone is the callback.
 * (With the original time, n and res kept too, gcc -O3 ran out of
 * callee-saved registers and reloaded permits at each limit: bench/README.md,
 * "The composite's hand-over", has the counts.) */
static inline __attribute__((always_inline)) bool
sum_or_none(const sluice_limit_ref *refs, size_t n, uint64_t permits, uint64_t now_ns,
            sluice_result *res, sluice__composite_fn *otherwise)
{
    if (res) {
        const int got = limiters_decide(refs, n, permits, now_ns, res, NULL, DETAILS_SUM);
        if (got >= 0) return got;
        return otherwise(refs, n, permits, now_ns, res, NULL);
    }
    const int got = limiters_decide(refs, n, permits, now_ns, NULL, NULL, DETAILS_NONE);
    if (got >= 0) return got;
    return otherwise(refs, n, permits, now_ns, NULL, NULL);
}
#endif

bool sluice__limiters_try(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                         uint64_t now_ns, sluice_result *res, sluice__composite_fn *otherwise)
{
#if HAVE_CAS128
    if (refs && n - 1 < SLUICE_COMPOSITE_MAX) {
        if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
        /* copies for the usual shapes, 2 to 4 limits (per client AND per
         * route AND global...), whose loops unroll into straight code */
        switch (n) {
        case 2: return sum_or_none(refs, 2, permits, now_ns, res, otherwise);
        case 3: return sum_or_none(refs, 3, permits, now_ns, res, otherwise);
        case 4: return sum_or_none(refs, 4, permits, now_ns, res, otherwise);
        default: return sum_or_none(refs, n, permits, now_ns, res, otherwise);
        }
    }
#endif
    return otherwise(refs, n, permits, now_ns, res, NULL);
}

int sluice__limiters_each(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                          uint64_t now_ns, sluice__answer *ans)
{
#if HAVE_CAS128
    if (!refs || n - 1 >= SLUICE_COMPOSITE_MAX) return -1;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    return limiters_decide(refs, n, permits, now_ns, NULL, ans, DETAILS_EACH);
#else
    (void)refs, (void)n, (void)permits, (void)now_ns, (void)ans;
    return -1;
#endif
}
