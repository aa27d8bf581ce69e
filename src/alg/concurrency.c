/* concurrency.c -- the concurrency limit's spec and its lease book.
 *
 *     concurrency N [lease=DURATION]
 *
 * At most N permits held at once; a permit is held from its admission
 * until it is released, or, with a lease, until its lease ends, whichever
 * comes first (docs/decisions.md 3.9).  Without a lease the state is a
 * count (limiter/concurrency.c keeps it in one atomic word).  With one, the
 * limit must know when each permit's lease ends, exactly: the book.
 *
 * The book has one entry per handle held (at most N, since a handle holds
 * at least one permit), linked in admission order.  All leases have the
 * same length and the book's clock never goes back, so admission order is
 * expiry order: the head of the list is always the next lease to end, and
 * giving back the ended ones is popping the head while its expiry <= t --
 * O(1) per lease ended, never a scan.  A release ends its entry's hold in
 * O(1), by the entry's word (below), and the entry's generation moves on
 * (it leaves the list later), so a second release through a copy of the handle,
 * or a late release of an ended lease, finds another generation (or a
 * free entry) and changes nothing.
 *
 * A refusal's retry_after_ns is the time until enough leases end: walk the
 * list from the head, summing permits, until the request fits -- at most
 * n entries, and only on a refusal.
 *
 * Releases without the lock.  Every call but a release runs under the
 * limiter's lock; a release does not take it (a lock round trip per
 * release, contended by every thread, cost as much as the acquire).  Each
 * entry has one atomic word, its generation and the permits it holds
 * (0: not held), and the book counts the permits held as two growing
 * counters, held = taken - given:
 *
 *   take (lock):    entry off the free list, linked at the tail; taken +=
 *                   p (a plain store: only the lock holder writes it);
 *                   word = gen|p (release)
 *   release (none): raise the clock; word: gen|p -> gen+1|0 by one
 *                   compare-and-swap; if it won, given += p (atomic add)
 *   expiry (lock):  at the head, a held entry whose lease ended: the same
 *                   compare-and-swap; if it won, given += p
 *
 * Proof of the rules.  (1) Given back once: a hold ends only by the
 * compare-and-swap from its word gen|p, which at most one caller wins (the
 * word never takes that value again: the generation moves on, and an
 * entry is reused only after it is unlinked, under the lock, with its
 * word not held), and only the winner adds p to `given`.  (2) A stale
 * handle changes nothing: its word is no longer the entry's (another
 * generation, or not held), so its compare-and-swap fails; one out of
 * range is refused against n, read before the entry.  (3) N never
 * exceeded: an acquire decides under the lock with held = taken - given;
 * `taken` changes only under that lock and `given` only grows, and is
 * added to only after a word stopped being held, so the count is never
 * below the permits of the held words: a decision sees at least what is
 * held, never less.  (A release in its few instructions between its
 * compare-and-swap and its add is seen still holding its permits: a call
 * overlapping it may refuse as if it came first.)  (4) A released entry
 * stays linked until the head reaches it (expiry pops released entries
 * whatever their end) or a take finds no free entry and sweeps the list:
 * the caller has checked held + p <= N <= n, and each held word holds at
 * least one permit, so fewer than n entries are held and the sweep finds
 * one -- O(n), once per up to n releases.  Admission order stays expiry
 * order: only takes link, under the lock, at the tail.  (5) The entries
 * never move while the book lives, since a release may read one at any
 * time: the book grows by a new segment (sluice__leases_grow), published
 * by a release store of n after it is written; a release reads n
 * (acquire) before the segments.  (6) The clock is max(t_book, t_rel):
 * the lock holder moves t_book, a release raises t_rel by a
 * compare-and-swap loop, only upward, and before its add to `given`; a
 * table resets both only after seeing nothing held (the limiter's
 * sluice__conc_reuse), so a release that made it so raised first.  A
 * release whose entry's lease has ended by the clock gives it back as the
 * lease's end would, and reports SLUICE_ENOENT.  (7) Waiters: the add to
 * `given` is sequentially consistent, and the limiter reads its count of
 * waiters after it (limiter/concurrency.c, the same pair as without a
 * lease).
 *
 * Entry points: sluice__conc_parse, _format, sluice__is_conc_spec;
 * sluice__leases_init, _fini, _expire, _take, _give, _retry_after; _grow and
 * _relet for a limit changed in place (a larger N, another lease).
 */
#include "alg/concurrency.h"
#include "base/text.h"

#include <stdio.h>
#include <string.h>

bool sluice__is_conc_spec(const char *spec)
{
    sluice__word w;
    return spec && sluice__next_word(&spec, &w) && sluice__word_is(w.p, w.n, "concurrency");
}

int sluice__conc_parse(const char *spec, sluice__conc_profile *cp, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    memset(cp, 0, sizeof *cp);
    if (!spec) {
        sluice__errf(err, errlen, "no spec (NULL)");
        return SLUICE_EINVAL;
    }
    const char *s = spec;
    int ntok = 0;
    bool seen_lease = false;
    sluice__word w;
    for (; sluice__next_word(&s, &w); ntok++) {
        const char *tok = w.p;
        const size_t n = w.n;
        if (ntok == 0) {
            if (!sluice__word_is(tok, n, "concurrency")) {
                sluice__errf(err, errlen, "unknown algorithm \"%.*s\": expected concurrency", SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
        } else if (ntok == 1) {
            int rc = sluice_parse_u64(tok, n, SLUICE_MAX_LIMIT, &cp->limit);
            if (rc != 0 || cp->limit < 1) {
                sluice__errf(err, errlen, "bad limit \"%.*s\": expected concurrency N with N a whole number from 1 to 10^12",
                             SLUICE__TOK(tok, n));
                return rc == SLUICE_ERANGE ? SLUICE_ERANGE : SLUICE_EINVAL;
            }
        } else {
            if (!sluice__word_is(tok, w.nname, "lease")) {
                sluice__errf(err, errlen, "unknown option \"%.*s\": concurrency takes only lease=DURATION",
                             SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
            if (seen_lease) {
                sluice__errf(err, errlen, "duplicate option \"%.*s\"", SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
            seen_lease = true;
            int rc = w.val ? sluice__parse_duration(w.val, w.nval, &cp->lease_ns) : SLUICE_EINVAL;
            if (rc == SLUICE_ERANGE) {
                sluice__errf(err, errlen, "bad option \"%.*s\": a lease longer than 36500d", SLUICE__TOK(tok, n));
                return SLUICE_ERANGE;
            }
            if (rc != 0) {
                sluice__errf(err, errlen, "bad option \"%.*s\": expected lease=[N]UNIT with N >= 1 and UNIT one of ns us ms s m min h d",
                             SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
        }
    }
    if (ntok == 0) {
        sluice__errf(err, errlen, "empty spec: expected concurrency N [lease=DURATION]");
        return SLUICE_EINVAL;
    }
    if (ntok == 1) {
        sluice__errf(err, errlen, "missing N after \"concurrency\"");
        return SLUICE_EINVAL;
    }
    if (cp->lease_ns && cp->limit > SLUICE__CONC_MAX_LEASED) {
        sluice__errf(err, errlen, "bad limit \"%llu\": with lease= N is at most %u (one entry per permit held)",
                     (unsigned long long)cp->limit, SLUICE__CONC_MAX_LEASED);
        return SLUICE_ERANGE;
    }
    return 0;
}

int sluice__conc_format(const sluice__conc_profile *cp, char *buf, size_t buflen)
{
    char lease[40] = "";
    if (cp->lease_ns) {
        memcpy(lease, " lease=", 8);
        sluice__format_duration(cp->lease_ns, lease + 7, sizeof lease - 7);
    }
    int n = snprintf(buf, buflen, "concurrency %llu%s", (unsigned long long)cp->limit, lease);
    if (n < 0) return SLUICE_EINVAL;
    if ((size_t)n >= buflen) return SLUICE_ENOSPC;
    return n;
}

/* ---- the lease book ------------------------------------------------------ */

int sluice__leases_init(sluice__leases *b, uint32_t n)
{
    memset(b, 0, sizeof *b);
    sluice__lease *e = sluice__calloc(n, sizeof *e);
    if (!e) return SLUICE_ENOMEM;
    for (uint32_t i = 0; i < n; i++) { /* entry 0 first */
        atomic_init(&e[i].state, 0);
        atomic_init(&e[i].expiry_ns, 0);
        e[i].prev = SLUICE__LEASE_NIL;
        e[i].next = i + 1 < n ? i + 1 : SLUICE__LEASE_NIL;
    }
    b->seg[0] = e;
    b->end[0] = n;
    b->nseg = 1;
    atomic_init(&b->n, n);
    b->freehead = 0;
    b->head = b->tail = SLUICE__LEASE_NIL;
    atomic_init(&b->taken, 0);
    atomic_init(&b->given, 0);
    atomic_init(&b->t_book, 0);
    atomic_init(&b->t_rel, 0);
    return 0;
}

void sluice__leases_fini(sluice__leases *b)
{
    for (uint32_t k = 0; k < b->nseg; k++) sluice__free(b->seg[k]);
    memset(b, 0, sizeof *b);
}

static uint32_t nentries(const sluice__leases *b)
{
    return atomic_load_explicit(&((sluice__leases *)b)->n, memory_order_relaxed);
}

/* Take entry i out of the list onto the free list.  Its word is not held. */
static inline void unlink_entry(sluice__leases *b, uint32_t i)
{
    sluice__lease *x = sluice__leases_at(b, i);
    if (x->prev != SLUICE__LEASE_NIL) sluice__leases_at(b, x->prev)->next = x->next;
    else b->head = x->next;
    if (x->next != SLUICE__LEASE_NIL) sluice__leases_at(b, x->next)->prev = x->prev;
    else b->tail = x->prev;
    x->prev = SLUICE__LEASE_NIL;
    x->next = b->freehead;
    b->freehead = i;
}

/* End the hold whose word is s (held): true for the one caller whose
 * compare-and-swap wins, which gives the permits back. */
static bool end_hold(sluice__leases *b, sluice__lease *x, uint64_t s)
{
    uint64_t next = ((s >> 32) + 1) << 32; /* the next generation, nothing held */
    if (!atomic_compare_exchange_strong(&x->state, &s, next & ~(uint64_t)SLUICE__LEASE_PMASK))
        return false;
    atomic_fetch_add(&b->given, s & SLUICE__LEASE_PMASK);
    return true;
}

void sluice__leases_reset_clock(sluice__leases *b)
{
    atomic_store(&b->t_book, 0);
    atomic_store(&b->t_rel, 0);
}

uint64_t sluice__leases_expire(sluice__leases *b, uint64_t now_ns)
{
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    uint64_t t = sluice__leases_clock(b);
    if (now_ns > t) t = now_ns;
    atomic_store_explicit(&b->t_book, t, memory_order_relaxed);
    /* each round unlinks the head, or loses one compare-and-swap to a
     * release (the entry is then released: unlinked by the next round) */
    const uint32_t n = nentries(b);
    for (uint32_t k = 0; k < 2 * n && b->head != SLUICE__LEASE_NIL; k++) {
        sluice__lease *x = sluice__leases_at(b, b->head);
        uint64_t s = atomic_load(&x->state);
        if (s & SLUICE__LEASE_PMASK) {
            if (atomic_load_explicit(&x->expiry_ns, memory_order_relaxed) > t) break;
            if (!end_hold(b, x, s)) continue;
        }
        unlink_entry(b, b->head);
    }
    return t;
}

/* Unlink every released entry of the list (at most n visited). */
static void sweep(sluice__leases *b)
{
    uint32_t i = b->head;
    for (uint32_t k = 0; k < nentries(b) && i != SLUICE__LEASE_NIL; k++) {
        sluice__lease *x = sluice__leases_at(b, i);
        uint32_t next = x->next;
        if ((atomic_load(&x->state) & SLUICE__LEASE_PMASK) == 0) unlink_entry(b, i);
        i = next;
    }
}

uint32_t sluice__leases_take(sluice__leases *b, uint64_t t, uint64_t permits, uint64_t lease_ns,
                             uint32_t *gen)
{
    if (b->freehead == SLUICE__LEASE_NIL) sweep(b); /* finds one: see the header */
    uint32_t i = b->freehead;
    sluice__lease *x = sluice__leases_at(b, i);
    b->freehead = x->next;
    atomic_store_explicit(&x->expiry_ns, t + lease_ns, memory_order_relaxed); /* both < 2^63 */
    x->next = SLUICE__LEASE_NIL;
    x->prev = b->tail;
    if (b->tail != SLUICE__LEASE_NIL) sluice__leases_at(b, b->tail)->next = i;
    else b->head = i;
    b->tail = i;
    /* the count first, then the word (release): a release that reads the
     * word, and adds to `given`, follows the count's store */
    atomic_store_explicit(&b->taken, atomic_load_explicit(&b->taken, memory_order_relaxed) + permits,
                          memory_order_relaxed);
    uint64_t s = atomic_load_explicit(&x->state, memory_order_relaxed);
    *gen = (uint32_t)(s >> 32);
    atomic_store_explicit(&x->state, (s & ~(uint64_t)SLUICE__LEASE_PMASK) | permits,
                          memory_order_release);
    return i;
}

int sluice__leases_give(sluice__leases *b, uint32_t i, uint32_t gen, uint64_t permits,
                        uint64_t now_ns)
{
    /* the clock first, whatever the handle (every call moves it): before
     * the count, so that a table which sees nothing held (the count)
     * resets the clock after this raise (sluice__leases_reset_clock) */
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    uint64_t c = atomic_load_explicit(&b->t_book, memory_order_relaxed);
    uint64_t r = atomic_load_explicit(&b->t_rel, memory_order_relaxed);
    while (now_ns > c && now_ns > r &&
           !atomic_compare_exchange_weak_explicit(&b->t_rel, &r, now_ns, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
    const uint64_t t = now_ns > c && now_ns > r ? now_ns : sluice__leases_clock(b);
    if (i >= atomic_load_explicit(&b->n, memory_order_acquire)) return SLUICE_ENOENT;
    if (permits == 0 || permits > SLUICE__LEASE_PMASK) return SLUICE_ENOENT;
    sluice__lease *x = sluice__leases_at(b, i);
    uint64_t s = ((uint64_t)gen << 32) | permits;
    if (atomic_load_explicit(&x->state, memory_order_acquire) != s) return SLUICE_ENOENT;
    const bool ended = atomic_load_explicit(&x->expiry_ns, memory_order_relaxed) <= t;
    if (!atomic_compare_exchange_strong(&x->state, &s, ((s >> 32) + 1) << 32))
        return SLUICE_ENOENT; /* not this hold, or ended or released by another */
    atomic_fetch_add(&b->given, permits);
    return ended ? SLUICE_ENOENT : 0;
}

void sluice__leases_grow(sluice__leases *b, sluice__leases *bigger)
{
    const uint32_t n = nentries(b), m = bigger->end[0];
    if (b->nseg == SLUICE__LEASE_SEGS || bigger->nseg != 1) { /* not reached: the header's bound */
        sluice__leases_fini(bigger);
        return;
    }
    sluice__lease *e = bigger->seg[0];
    for (uint32_t k = 0; k < m; k++) { /* the new entries first, lowest first */
        e[k].prev = SLUICE__LEASE_NIL;
        e[k].next = k + 1 < m ? n + k + 1 : b->freehead;
    }
    b->seg[b->nseg] = e;
    b->end[b->nseg] = n + m;
    b->nseg++;
    b->freehead = n;
    atomic_store_explicit(&b->n, n + m, memory_order_release); /* after the segment */
    memset(bigger, 0, sizeof *bigger);
}

void sluice__leases_relet(sluice__leases *b, uint64_t old_ns, uint64_t new_ns)
{
    uint32_t i = b->head;
    for (uint32_t k = 0; k < nentries(b) && i != SLUICE__LEASE_NIL; k++) {
        sluice__lease *x = sluice__leases_at(b, i);
        /* expiry = admission + old_ns, the admission below 2^63 and each
         * lease at most SLUICE_MAX_PERIOD_NS: no wrap either way */
        uint64_t e = atomic_load_explicit(&x->expiry_ns, memory_order_relaxed);
        atomic_store_explicit(&x->expiry_ns, e - old_ns + new_ns, memory_order_relaxed);
        i = x->next;
    }
}

uint64_t sluice__leases_last_end(const sluice__leases *b)
{
    uint32_t i = b->tail;
    for (uint32_t k = 0; k < nentries(b) && i != SLUICE__LEASE_NIL; k++) {
        sluice__lease *x = sluice__leases_at(b, i);
        if (atomic_load(&x->state) & SLUICE__LEASE_PMASK)
            return atomic_load_explicit(&x->expiry_ns, memory_order_relaxed);
        i = x->prev;
    }
    return 0;
}

int64_t sluice__leases_retry_after(const sluice__leases *b, uint64_t t, uint64_t limit,
                                   uint64_t permits)
{
    if (permits > limit) return -1;
    const uint64_t held = sluice__leases_held(b);
    if (held + permits <= limit) return 0;
    uint64_t need = held + permits - limit, freed = 0;
    uint32_t i = b->head;
    for (uint32_t k = 0; k < nentries(b) && i != SLUICE__LEASE_NIL; k++) {
        sluice__lease *x = sluice__leases_at(b, i);
        freed += atomic_load(&x->state) & SLUICE__LEASE_PMASK;
        if (freed >= need) {
            uint64_t d = atomic_load_explicit(&x->expiry_ns, memory_order_relaxed) - t; /* > 0 */
            return d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
        }
        i = x->next;
    }
    /* reached only when a release overlapping this refusal lowered the
     * count after the walk passed its entry: it passes now */
    return 0;
}
