/* window_log.c -- the exact sliding window, over slots: sliding-wheel and
 * sliding-log.
 *
 * Contract (docs/decisions.md 3.3): with N slots of tick = W/N ns and
 * slot(t) = floor(t / tick), a request for p is allowed iff the permits
 * admitted with slot(t) - N < slot(t_i) <= slot(t), plus p, <= L.
 * The exact sliding log (3.2: t - W < t_i <= t) is the same rule with
 * tick = 1 ns and N = W, so one engine serves both.
 *
 * The textbook wheel sums every slot on every request and, after an
 * idle gap, walks every elapsed tick.  Here the ring holds only the slots
 * that admitted something, oldest first, each with the running total of
 * permits up to it (`cum`, modulo 2^64):
 *
 *     in the window = cum(newest) - cum(last retired)        O(1)
 *
 * Slots leave from the front when they fall out of the window; each entry
 * is pushed once and popped once, so a decision costs O(1) amortised,
 * whatever N is and however long the limiter was idle (a gap longer than
 * the window empties the ring in one step).  A refusal's retry_after is a
 * binary search over the ring for the oldest slot whose expiry leaves room:
 * O(log entries).
 *
 * Memory: at most min(N, L) entries of 16 bytes (every entry holds at least
 * one permit of at most L, in a distinct slot of the window).  The ring
 * starts empty and doubles when full, so a limiter costs what its traffic
 * needs.  If that growth fails, the request is refused (never admitted
 * unrecorded) with retry_after_ns = -1.
 *
 *   remaining       L - in the window
 *   retry_after_ns  (slot_j + N) * tick - t for the oldest entry j such that
 *                   the entries after it, plus p, fit; -1 for p > L.
 *
 * A limiter's refusals write nothing (window_log.h).  The limiter's
 * mutex guards its ring, and each holder that may change it brackets the
 * change with a sequence counter: odd while it works, then even, after it
 * has published a summary of the log (sluice__logpub): t_last, base, len,
 * the newest entry and the FRONT = 8 oldest, and the profile.  Refusals
 * and probes read the summary, never the ring (which the writer may move,
 * shrink or free at any time, so nothing a reader touches is ever freed
 * under it, and memory still follows the traffic), and recheck:
 *
 *   writer (mu held)                 reader
 *   W1 seq := q + 1   (relaxed)      R1 s1 := seq (acquire); odd: again
 *   W2 fields := ...  (release)      R2 fields    (acquire, any order)
 *   W3 seq := q + 2   (release)      R3 s2 := seq (relaxed); s2 != s1: again
 *      or q, if it wrote nothing
 *
 * Claim: when s2 == s1 every field R2 read is the value it had after the
 * last section that ended before R1, so the reader decided on one state,
 * which the log held from R1 to R3; the call is linearised at R1.
 * Proof.  Writers hold mu, so sections run one after another, and seq's
 * values, in its modification order, only grow -- but for a section that
 * wrote nothing, which returns it to the value before its own W1.  (a) R1
 * reads s1 from some W3 (or the zero of creation); that store is a release
 * read by an acquire, so every W2 of that section and of all earlier ones
 * happens before R2: no R2 load can read a value older than those.  (b)
 * Suppose an R2 load reads a value that a later section X stored.  X's W2
 * is a release read by an acquire, and X's W1 comes before it in X, so W1
 * happens before R3, and R3 reads W1's value q + 1 or a later one.  Every
 * value after X's W1 in the order is > q (X wrote, so it ends at q + 2;
 * sections that write nothing go back to a value >= q + 2), and s1 <= q
 * (R1 read a value from before X's W1).  So s2 > s1, and the read starts
 * over.  Hence a read that passes R3 saw exactly the state after the
 * section R1 read from.  (Each field is one aligned 8-byte or 4-byte atomic
 * access; on x86-64 every access above is a plain move: no write, no
 * locked instruction, no fence.)  A read that fails is retried 16 times
 * (with a pause while seq is odd), then the mutex decides.
 *
 * An admission is not decided twice.  A read that would admit skips R3
 * and keeps a plan: s1, the clamped time t, slot(t), the room and k, the
 * entries that leave.  Its thread takes mu and reads seq again (C); if it
 * is s1, it commits the plan as a section of its own (W1-W3: the k
 * entries retired, the newest grown or one pushed, the summary changed
 * where it changed), else -- or when the ring must grow -- the mutex
 * decides as it did before the read.  Claim: at C, seq == s1 implies that
 * every field R2 read holds the value it had after the section S that R1
 * read from, and still holds it, so the plan is decide()'s on the state
 * under mu.  Proof.  Sections hold mu, so none runs from C to the end of
 * the commit, and C reads the latest value of seq.  Suppose a section X
 * after S wrote (so changed the log since S, or stored a value R2 read).
 * X ended before C: one that began after the commit could not have
 * stored a value R2, which precedes C, read.  As in (b), every value of
 * seq from X's W1 on is > s1, so C reads one > s1.  Hence no section
 * after S wrote, and by (a) R2 read S's values, which the log still
 * holds.  (Sections that wrote nothing may have run: they changed nothing
 * the plan rests on, at most moved the ring to a new allocation, and the
 * commit works on the ring as it is under mu.)  The admission is
 * linearised at C.
 *
 * What the summary settles, exactly as retire() and measure() on the ring
 * (entries numbered from the oldest published, u0 = what the window held
 * at the last write, each entry at least one permit): the cut at t, when
 * k entries have left, is found among the published ones unless k >= FRONT
 * while some entry stays; then the read gives up to the mutex.  A refusal
 * of p <= FRONT permits never does, when u0 <= L: k entries leaving free
 * k permits, so it has u0 - k + p > L, k < p.  Its retry needs the oldest
 * j whose leaving makes room: the entries before j free fewer than
 * u0 + p - L permits, so j < p, published too.  So every refusal of at
 * most 8 permits and every probe while fewer than 8 entries (or all) have
 * left since the last write is a pure read; the rest -- larger requests
 * after many entries left, a window over-full after a LIMIT was lowered
 * -- may take the mutex.  Publishing adds to an admission a handful of
 * stores to the three lines of the summary: t_last, the newest entry, and
 * only when entries left or the newest is in the front, len, base,
 * front_at and the front entries that came into view: the front is a ring of its
 * own (front_at), so an admission that retires k entries writes at most
 * k + 1 of them, not 8.
 *
 * The hint.  Each section that writes also publishes, in W2, the time
 * until which one permit is refused: while the window is full (in it >= L)
 * nothing changes before its oldest entry leaves, at (slot_0 + N) * tick,
 * if that is after t_last (a change of spec that shortened the window may
 * leave entries out of it until the next decision); else 0.  A request for
 * p >= 1 permits is refused wherever one permit is.  A refusal reads seq,
 * the hint and seq again (R1-R3 above), so the hint is that of the state
 * the log held at R1, and a time below it, clamped to t_last (which is
 * below it), is refused there: three loads of one line, linearised at R1.
 *
 * A change of spec (carry, at the end) keeps the ring's entries at their
 * slots.  What the ring already retired is gone; where a longer new window
 * reaches back to it, one entry stands in for it, bounded by the largest
 * LIMIT per the smallest window of every spec the log admitted under (kept
 * in the header's 31 spare bits, `hist`, and stored with the ring by a
 * shared table and the Redis module): never less than the forgotten
 * admissions, so never admitting what the whole history would refuse, and
 * exact again once the new window has passed the slot it stands at.
 *
 * Sections and entry points:
 *   the log           the entries, their slots, the decision (static)
 *   read without lock sluice__log_pub_new, sluice__log_begin, sluice__log_end,
 *                     sluice__log_read, sluice__log_decide (window_log.h)
 *   the rows          sluice__sliding_wheel_ops, sluice__sliding_log_ops
 */
#include "alg/window_log.h"
#include "base/spin.h"

#include <stdio.h>
#include <string.h>

#define RING_MIN 4u

static inline sluice__log_entry *at(const sluice__log *lg, uint32_t i)
{
    return &lg->e[(lg->head + i) & (lg->cap - 1)];
}

/* Drop from `lg` (a copy of the header: the entries themselves are never
 * written here) the entries whose slot no longer counts at slot s: slot <=
 * s - N.  The ring is sorted by slot, so the cut is found by a short scan
 * and then bisection: O(log entries) for a read that is not kept, O(1)
 * amortised for an admission (which keeps it). */
static void retire(sluice__log *lg, uint64_t s, uint64_t n)
{
    if (lg->len == 0 || s < n) return;
    const uint64_t out = s - n; /* slots <= out are outside (s - N, s] */
    if (at(lg, 0)->slot > out) return;
    uint32_t k; /* the number of entries to drop: slot(k-1) <= out < slot(k) */
    if (at(lg, lg->len - 1)->slot <= out) {
        k = lg->len; /* the whole window expired */
    } else {
        uint32_t lo = 1, hi = lg->len - 1; /* slot(lo-1) <= out < slot(hi) */
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (at(lg, mid)->slot <= out) lo = mid + 1;
            else hi = mid;
        }
        k = lo;
    }
    lg->base = at(lg, k - 1)->cum;
    lg->head = (lg->head + k) & (lg->cap - 1);
    lg->len -= k;
    if (lg->len == 0) lg->head = 0;
}

/* Move the ring to a new allocation of `want` entries (>= len, a power of
 * two >= RING_MIN).  False, with the ring unchanged, when memory runs out. */
static bool resize(sluice__log *lg, uint64_t want)
{
    sluice__log_entry *e = sluice__malloc((size_t)want * sizeof *e);
    if (!e) return false;
    for (uint32_t i = 0; i < lg->len; i++) e[i] = *at(lg, i);
    sluice__free(lg->e);
    lg->e = e;
    lg->cap = (uint32_t)want;
    lg->head = 0;
    return true;
}

static bool grow(sluice__log *lg)
{
    if (lg->fixed) return false; /* sized for its bound: never full */
    uint64_t want = lg->cap ? (uint64_t)lg->cap * 2 : RING_MIN;
    /* the ring never holds more than min(N, L) entries (each holds at least
     * one permit, in a distinct slot of the window), so it stops growing by
     * itself; a ring past 2^31 entries is refused rather than allowed to
     * wrap its 32-bit indexes */
    if (want > ((uint64_t)1 << 31)) return false;
    return resize(lg, want);
}

/* After a burst the window may empty again: a ring at most a quarter full
 * is halved (or freed when empty and past RING_MIN), so memory follows the
 * traffic of the window.  Halving at a quarter keeps every entry's copies,
 * growing and shrinking, O(1) amortised.  A failed allocation keeps the
 * larger ring. */
static void shrink(sluice__log *lg)
{
    if (lg->fixed || lg->cap <= RING_MIN * 4 || lg->len > lg->cap / 4) return;
    (void)resize(lg, lg->cap / 2);
}

/* The decision at t on the header *lg (already retired to t): fills res
 * and returns whether p permits fit.  Writes nothing. */
static bool measure(const sluice__profile *pf, const sluice__log *lg, uint64_t t,
                    uint64_t p, sluice_result *res)
{
    const uint64_t n = pf->slots, L = pf->limit;
    const uint64_t newest = lg->len ? at(lg, lg->len - 1)->cum : lg->base;
    const uint64_t used = newest - lg->base;
    /* used may exceed L after a reconfiguration lowered it */
    const uint64_t room = used < L ? L - used : 0;
    if (p == 0) return res ? sluice__allow(res, room, 0) : true;
    if (p > room) {
        if (!res) return false;
        if (p > L) return sluice__deny(res, room, -1);
        /* the oldest j with newest - cum_j <= L - p: binary search */
        uint32_t lo = 0, hi = lg->len - 1;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (newest - at(lg, mid)->cum <= L - p) hi = mid;
            else lo = mid + 1;
        }
        uint64_t expiry = (at(lg, lo)->slot + n) * pf->tick_ns;
        return sluice__deny(res, room, (int64_t)(expiry - t));
    }
    return res ? sluice__allow(res, room - p, 0) : true;
}

/* The decision, writing nothing (a composite's first phase). */
static bool judge(const sluice__profile *pf, const sluice__state *st, uint64_t t, uint64_t p,
                  sluice_result *res)
{
    sluice__log v = st->u.log; /* a copy of the header: the ring is only read */
    retire(&v, sluice__div_q(&pf->div_tick, t), pf->slots);
    return measure(pf, &v, t, p, res);
}

/* Room in the ring for one more entry, so that the next admission cannot
 * fail (a composite's second phase); the entries stay as they are. */
static bool reserve(sluice__state *st)
{
    sluice__log *lg = &st->u.log;
    return lg->len < lg->cap || grow(lg);
}

/* decide(), or with `force` an admission past the limit (a settle's
 * overdraft: p no more than 2^64-1 less what the window holds). */
static bool admit_at(const sluice__profile *pf, sluice__state *st, uint64_t t, uint64_t p,
                     sluice_result *res, bool force)
{
    const uint64_t s = sluice__div_q(&pf->div_tick, t);
    sluice__log v = st->u.log; /* the header seen from t: written back only
                                * on an admission */
    sluice__log *lg = &v;
    retire(lg, s, pf->slots);
    if (p == 0 || (!force && !measure(pf, lg, t, p, NULL))) return measure(pf, lg, t, p, res);
    const uint64_t newest = lg->len ? at(lg, lg->len - 1)->cum : lg->base;
    if (force && p > UINT64_MAX - (newest - lg->base)) p = UINT64_MAX - (newest - lg->base);
    if (p == 0) return true; /* a forced admission into a window full to 2^64-1 */
    if (lg->len && at(lg, lg->len - 1)->slot == s) {
        at(lg, lg->len - 1)->cum += p;
    } else {
        if (lg->len == lg->cap && !grow(lg)) {
            /* nothing is kept, not even the retiring: at a time before t
             * (but after the latest admission) those entries still count */
            if (res) {
                measure(pf, lg, t, 0, res);
                sluice__deny(res, res->remaining, -1);
                res->error = SLUICE_ENOMEM;
            }
            return false;
        }
        sluice__log_entry *e = at(lg, lg->len);
        e->slot = s;
        e->cum = newest + p;
        lg->len++;
        shrink(lg);
    }
    st->t_last = t;
    st->u.log = v;
    return res ? measure(pf, lg, t, 0, res) && sluice__allow(res, res->remaining, 0) : true;
}

static bool decide(const sluice__profile *pf, sluice__state *st, uint64_t t, uint64_t p,
                   uint64_t max_wait, sluice_result *res)
{
    (void)max_wait;
    return admit_at(pf, st, t, p, res, false);
}

/* A reservation settled at t (docs/decisions.md 3.10).  Below the
 * estimate nothing goes back: the log's entries are cumulative and shared
 * with later admissions, so the permits count as used until they leave the
 * window.  Above it, the extra is an admission at t past L (an entry of
 * its own or added to the newest), so nothing more passes until enough
 * leaves the window; SLUICE_ENOMEM, nothing changed, if the ring cannot
 * grow. */
static int settle(const sluice__profile *pf, sluice__state *st, uint64_t t,
                  const sluice__settle_req *q)
{
    if (q->a <= q->p) return 0;
    return admit_at(pf, st, t, q->a - q->p, NULL, true) ? 0 : SLUICE_ENOMEM;
}

static uint64_t rest_at(const sluice__profile *pf, const sluice__state *st)
{
    const sluice__log *lg = &st->u.log;
    if (lg->len == 0) return st->t_last;
    return (at(lg, lg->len - 1)->slot + pf->slots) * pf->tick_ns;
}

static void fini(sluice__state *st)
{
    sluice__log *lg = &st->u.log;
    if (!lg->fixed) sluice__free(lg->e);
    memset(lg, 0, sizeof *lg);
}

/* ---- a limiter's log, read without its lock (window_log.h) -------------- */

/* How many times a read starts over on a changed or odd sequence before
 * the caller takes the mutex. */
#define READ_TRIES 16
#define FRONT SLUICE__LOG_FRONT

sluice__logpub *sluice__log_pub_new(const sluice__profile *pf)
{
    sluice__logpub *pub = sluice__calloc64(sizeof *pub);
    if (pub) atomic_store_explicit(&pub->pf, pf, memory_order_release);
    return pub;
}

void sluice__log_begin(sluice__logpub *pub)
{
    pub->sections++;
    pub->open = atomic_load_explicit(&pub->seq, memory_order_relaxed); /* even */
    atomic_store_explicit(&pub->seq, pub->open + 1, memory_order_relaxed);
}

/* The refusals' hint of a state's log (head comment) under profile pf:
 * 0 when the oldest entry is out of the window at t_last already (after a
 * change of spec shortened it: retired at the next decision). */
static uint64_t log_hint(const sluice__profile *pf, const sluice__state *st)
{
    const sluice__log *lg = &st->u.log;
    if (lg->len == 0 || at(lg, lg->len - 1)->cum - lg->base < pf->limit) return 0;
    const uint64_t h = (at(lg, 0)->slot + pf->slots) * pf->tick_ns; /* <= t_last + W */
    return h > st->t_last ? h : 0;
}

/* The published entry i < min(len, FRONT), the front starting at fa. */
static inline uint64_t front_slot(const sluice__logpub *pub, uint64_t fa, uint32_t i)
{
    return atomic_load_explicit(&pub->front[(fa + i) % FRONT].slot, memory_order_acquire);
}
static inline uint64_t front_cum(const sluice__logpub *pub, uint64_t fa, uint32_t i)
{
    return atomic_load_explicit(&pub->front[(fa + i) % FRONT].cum, memory_order_acquire);
}

void sluice__log_end(sluice__logpub *pub, const sluice__state *st, const sluice__profile *pf,
                     bool wrote)
{
    if (!wrote && !pf) { /* nothing the summary shows has changed */
        atomic_store_explicit(&pub->seq, pub->open, memory_order_release);
        return;
    }
    const sluice__log *lg = &st->u.log;
    const uint32_t m = lg->len < FRONT ? lg->len : FRONT;
    const uint32_t pm = pub->ring_len < FRONT ? pub->ring_len : FRONT;
    uint64_t fa = atomic_load_explicit(&pub->front_at, memory_order_relaxed);
    /* Since the last publication the ring has only retired its oldest
     * entries and added to its newest (whose cum may have grown), unless
     * it moved (a new allocation) or a change of spec put an entry in
     * front: then the front is written anew.  Else the published entries
     * older than the oldest one now are dropped (front_at moves past
     * them), the others stay where they are but the last (it may be the
     * newest), which is written again with the entries that come into
     * view. */
    uint32_t keep = 0;
    if (!pf && lg->e == pub->ring && lg->len && pm) {
        const uint64_t first = at(lg, 0)->slot;
        uint32_t k = 0;
        while (k < pm && front_slot(pub, fa, k) < first) k++;
        if (k < pm || pub->ring_len == pm) keep = pm - k;
        fa += k;
    }
    for (uint32_t i = keep ? keep - 1 : 0; i < m; i++) {
        atomic_store_explicit(&pub->front[(fa + i) % FRONT].slot, at(lg, i)->slot,
                              memory_order_release);
        atomic_store_explicit(&pub->front[(fa + i) % FRONT].cum, at(lg, i)->cum,
                              memory_order_release);
    }
    atomic_store_explicit(&pub->front_at, fa, memory_order_release);
    pub->ring = lg->e;
    pub->ring_len = lg->len;
    if (lg->len) {
        atomic_store_explicit(&pub->newest_slot, at(lg, lg->len - 1)->slot, memory_order_release);
        atomic_store_explicit(&pub->newest_cum, at(lg, lg->len - 1)->cum, memory_order_release);
    }
    atomic_store_explicit(&pub->len, lg->len, memory_order_release);
    atomic_store_explicit(&pub->base, lg->base, memory_order_release);
    atomic_store_explicit(&pub->t_last, st->t_last, memory_order_release);
    if (pf) atomic_store_explicit(&pub->pf, pf, memory_order_release);
    atomic_store_explicit(
        &pub->hint, log_hint(atomic_load_explicit(&pub->pf, memory_order_relaxed), st),
        memory_order_release);
    atomic_store_explicit(&pub->seq, pub->open + 2, memory_order_release);
}

/* What a read found that would admit, for the holder of the mutex to
 * commit without deciding again: the sequence it read, the clamped time,
 * its slot, the room in the window and how many entries leave it. */
typedef struct plan {
    uint64_t seq, t, slot, room;
    uint32_t k;
} plan;

/* retire() and measure() on the summary, or -1 (the mutex decides): 0
 * refused, 1 a probe's answer, 2 an admission (*pl filled but for seq). */
static inline __attribute__((always_inline)) int
read_once(const sluice__logpub *pub, uint64_t now_ns, uint64_t p, sluice_result *res,
          uint64_t *t_eff, plan *pl)
{
    const sluice__profile *pf = atomic_load_explicit(&pub->pf, memory_order_acquire);
    const uint64_t n = pf->slots, L = pf->limit;
    uint64_t t = atomic_load_explicit(&pub->t_last, memory_order_acquire);
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    if (now_ns > t) t = now_ns;
    const uint32_t len = atomic_load_explicit(&pub->len, memory_order_acquire);
    const uint32_t m = len < FRONT ? len : FRONT;
    const uint64_t base = atomic_load_explicit(&pub->base, memory_order_acquire);
    const uint64_t newest = len ? atomic_load_explicit(&pub->newest_cum, memory_order_acquire)
                                : base;
    const uint64_t fa = atomic_load_explicit(&pub->front_at, memory_order_acquire);
    /* retire: k entries leave, the oldest first */
    uint32_t k = 0;
    uint64_t cut = base;
    const uint64_t s = sluice__div_q(&pf->div_tick, t);
    if (len && s >= n && front_slot(pub, fa, 0) <= s - n) {
        const uint64_t out = s - n;
        if (atomic_load_explicit(&pub->newest_slot, memory_order_acquire) <= out) {
            k = len;
            cut = newest;
        } else {
            k = 1;
            while (k < m && front_slot(pub, fa, k) <= out) k++;
            if (k == m && m < len) return -1; /* the cut is past the front */
            cut = front_cum(pub, fa, k - 1);
        }
    }
    const uint64_t used = newest - cut;
    const uint64_t room = used < L ? L - used : 0;
    *t_eff = t;
    if (p == 0) {
        if (res) sluice__allow(res, room, 0);
        return 1;
    }
    if (p <= room) {
        pl->t = t;
        pl->slot = s;
        pl->room = room;
        pl->k = k;
        return 2;
    }
    if (!res) return 0;
    if (p > L) {
        sluice__deny(res, room, -1);
        return 0;
    }
    /* the oldest j >= k with newest - cum_j <= L - p (the newest always
     * is one) */
    uint32_t j = k;
    while (j < m && newest - front_cum(pub, fa, j) > L - p) j++;
    uint64_t slot;
    if (j < m) slot = front_slot(pub, fa, j);
    else if (len - 1 == m) slot = atomic_load_explicit(&pub->newest_slot, memory_order_acquire);
    else return -1; /* past the front */
    sluice__deny(res, room, (int64_t)((slot + n) * pf->tick_ns - t));
    return 0;
}

/* sluice__log_read(), and for an admission its plan: 1 settled, 0 not (pl
 * filled when the read would admit, else pl->seq odd). */
static inline __attribute__((always_inline)) int
read_log(const sluice__logpub *pub, uint64_t now_ns, uint64_t p, sluice_result *res,
         uint64_t *t_eff, bool *ok, plan *pl)
{
    for (unsigned i = 0; i < READ_TRIES; i++) {
        const uint64_t s1 = atomic_load_explicit(&pub->seq, memory_order_acquire);
        if (s1 & 1) { /* a writer is at work, for a few dozen instructions */
            sluice__backoff(i);
            continue;
        }
        sluice_result r;
        uint64_t t;
        const int v = read_once(pub, now_ns, p, res ? &r : NULL, &t, pl);
        if (v == 2) { /* an admission: the mutex's holder checks the sequence */
            pl->seq = s1;
            return 0;
        }
        if (v < 0) break; /* the mutex decides */
        if (atomic_load_explicit(&pub->seq, memory_order_relaxed) != s1) continue;
        if (res) *res = r;
        *t_eff = t;
        *ok = v == 1;
        return 1;
    }
    pl->seq = 1;
    return 0;
}

bool sluice__log_read(const sluice__logpub *pub, uint64_t now_ns, uint64_t p,
                      sluice_result *res, uint64_t *t_eff, bool *ok)
{
    plan pl;
    return read_log(pub, now_ns, p, res, t_eff, ok, &pl);
}

/* Under the mutex: commit the admission of p permits that pl found, as
 * one section would (sluice__log_begin, decide, sluice__log_end), and
 * fill *res (when not NULL) as decide() would; false, with nothing
 * changed, when a section wrote since the read (the sequence moved), or
 * the new entry needs a larger ring. */
static bool admit(sluice__logpub *pub, sluice__state *st, const plan *pl, uint64_t p,
                  sluice_result *res)
{
    /* mu is held: this is the latest value, even (sections end before
     * their unlock); the plan's seq when no section wrote since its read */
    const uint64_t q = atomic_load_explicit(&pub->seq, memory_order_relaxed);
    if (q != pl->seq) return false;
    sluice__log *lg = &st->u.log;
    sluice__log_entry *const ring = lg->e;
    const uint32_t k = pl->k, len0 = lg->len, len = len0 - k, mask = lg->cap - 1;
    uint32_t head = lg->head;
    /* the newest entry stays (k < len0) and is in the plan's slot: it grows */
    sluice__log_entry *const last = len ? &ring[(head + len0 - 1) & mask] : NULL;
    const bool same = last && last->slot == pl->slot;
    if (!same && len == lg->cap) return false; /* a full ring: decide() grows it */
    pub->sections++;
    atomic_store_explicit(&pub->seq, q + 1, memory_order_relaxed);
    /* retire() and decide()'s admission, on the ring itself */
    uint64_t newest;
    if (k) {
        lg->base = ring[(head + k - 1) & mask].cum;
        lg->head = head = len ? (head + k) & mask : 0;
    }
    if (same) {
        newest = last->cum += p;
    } else {
        newest = (last ? last->cum : lg->base) + p;
        sluice__log_entry *e = &ring[(head + len) & mask];
        e->slot = pl->slot;
        e->cum = newest;
    }
    const uint32_t n = len + !same;
    lg->len = n;
    st->t_last = pl->t;
    /* sluice__log_end(), knowing what changed: k published entries leave
     * the front (front_at moves past them); the entries that come into
     * view, and the newest if it is in the front, are written -- none
     * when no entry left and the newest is past the front */
    if (k || n <= FRONT) {
        const uint32_t m = n < FRONT ? n : FRONT, m0 = len0 < FRONT ? len0 : FRONT;
        uint32_t lo = k < m0 ? m0 - k : 0;
        if (lo > n - 1) lo = n - 1;
        const uint64_t fa = atomic_load_explicit(&pub->front_at, memory_order_relaxed) + k;
        for (uint32_t i = lo; i < m; i++) {
            const sluice__log_entry *e = &ring[(head + i) & mask];
            atomic_store_explicit(&pub->front[(fa + i) % FRONT].slot, e->slot,
                                  memory_order_release);
            atomic_store_explicit(&pub->front[(fa + i) % FRONT].cum, e->cum,
                                  memory_order_release);
        }
        if (k) {
            atomic_store_explicit(&pub->front_at, fa, memory_order_release);
            atomic_store_explicit(&pub->base, lg->base, memory_order_release);
        }
    }
    if (!same) atomic_store_explicit(&pub->newest_slot, pl->slot, memory_order_release);
    atomic_store_explicit(&pub->newest_cum, newest, memory_order_release);
    if (n != len0) atomic_store_explicit(&pub->len, n, memory_order_release);
    atomic_store_explicit(&pub->t_last, pl->t, memory_order_release);
    atomic_store_explicit(
        &pub->hint, log_hint(atomic_load_explicit(&pub->pf, memory_order_relaxed), st),
        memory_order_release);
    if (!same) shrink(lg); /* may move the ring, nothing readers see */
    pub->ring = lg->e;
    pub->ring_len = n;
    atomic_store_explicit(&pub->seq, q + 2, memory_order_release);
    if (res) sluice__allow(res, pl->room - p, 0);
    return true;
}

bool sluice__log_decide(sluice__logpub *pub, pthread_mutex_t *mu, sluice__state *st,
                        uint64_t now_ns, uint64_t p, sluice_result *res, bool *ok)
{
    plan pl;
    uint64_t t;
    if (read_log(pub, now_ns, p, res, &t, ok, &pl)) return true;
    if (pl.seq & 1) return false;
    pthread_mutex_lock(mu);
    const bool done = admit(pub, st, &pl, p, res);
    pthread_mutex_unlock(mu);
    *ok = done;
    return done;
}

/* The default sliding-wheel slot: 1 ms when PERIOD is a whole number of
 * milliseconds, else 1 us when a whole number of microseconds, else 1 ns.
 * Memory follows the traffic, not N. */
static uint64_t default_tick(uint64_t w)
{
    if (w % 1000000 == 0) return 1000000;
    if (w % 1000 == 0) return 1000;
    return 1;
}

static int wheel_setup(sluice__profile *pf, const sluice__opts *o, char *err, size_t errlen)
{
    const uint64_t W = pf->period_ns;
    const uint64_t n = o->seen[SLUICE__OPT_SLOTS] ? o->val[SLUICE__OPT_SLOTS] : W / default_tick(W);
    if (n > W || W % n != 0) {
        sluice__errf(err, errlen,
                     "bad option \"slots=%llu\": PERIOD (%llu ns) / slots must be a whole number of ns >= 1",
                     (unsigned long long)n, (unsigned long long)W);
        return SLUICE_EINVAL;
    }
    pf->slots = n;
    pf->tick_ns = W / n;
    pf->div_tick = sluice__div_make(pf->tick_ns);
    return 0;
}

static int wheel_format(const sluice__profile *pf, char *buf, size_t buflen)
{
    if (pf->slots == pf->period_ns / default_tick(pf->period_ns))
        return snprintf(buf, buflen, "%s", "");
    return snprintf(buf, buflen, " slots=%llu", (unsigned long long)pf->slots);
}

/* sliding-log: the wheel with 1-ns slots, N = W. */
static int log_setup(sluice__profile *pf, const sluice__opts *o, char *err, size_t errlen)
{
    (void)o, (void)err, (void)errlen;
    pf->slots = pf->period_ns;
    pf->tick_ns = 1;
    pf->div_tick = sluice__div_make(1);
    return 0;
}

/* The history a carry needs, in the log's 31 spare bits (hist): two
 * 15-bit codes m * 2^e (m < 2^9, e < 2^6; 0: none), a LIMIT rounded up in
 * bits 0-14 and a window in slots rounded down in bits 15-29.  Rounding
 * that way only loosens the bound below (at most 1/256 each), never
 * makes it undercount; values below 512 are exact. */
#define HMANT 9u
#define HCODE 15u
#define HMASK ((1u << HCODE) - 1)

static unsigned hist_code(uint64_t v, bool up)
{
    unsigned e = 0;
    while ((v >> e) >= (1u << HMANT)) e++;
    uint64_t m = v >> e;
    if (up && (m << e) != v && ++m == (1u << HMANT)) m >>= 1, e++;
    return (unsigned)(e << HMANT | m);
}

/* The value of a code, saturated at 2^64 - 1 (a shared region's bits are
 * whatever they are). */
static uint64_t hist_value(unsigned c)
{
    const unsigned e = (c >> HMANT) & 63u;
    const uint64_t m = c & ((1u << HMANT) - 1);
    return e > 64 - HMANT && (m >> (64 - e)) ? UINT64_MAX : m << e;
}

/* A change of spec keeps the ring's admissions at their slots
 * (reconfigure.c).  The ring no longer holds admissions that had left the
 * window at a later admission; a longer new window may reach back to
 * them.  They all lie at or before slot r = slot(t_last) - N (and before
 * the oldest held entry): each left a window of the spec then in force,
 * and a change to a longer window stood in for those it reached (below).
 *
 * The bound.  Let Lmax be the largest LIMIT and Nmin the smallest N
 * (slots) of the specs under which anything was admitted since the state
 * was fresh.  Any Nmin consecutive slots hold at most Lmax admitted
 * permits: the latest admission among them, under a spec (L, N), saw
 * all of them in its window (N >= Nmin, and what it counted is never less
 * than what was admitted, by induction on this bound) and found them and
 * itself within L <= Lmax.  So one entry at slot r standing for
 * min(Lmax * ceil(span / Nmin), all retired permits) -- span the slots of
 * the new window at t up to r -- never counts less than they would, in
 * any window from t on, and leaves the window no earlier than they would:
 * nothing is admitted that the whole history would refuse.  Bounding by
 * the old spec's LIMIT alone undercounted after several changes (6/3s,
 * then 2/1s, then 6/3s again admitted 2 over).  Lmax and Nmin are kept in
 * the log's hist bits, folded in at each change after an admission.
 * Exact once the new window has passed r: then only held entries count.
 * reserve() has made room for the entry. */
static void carry(const sluice__profile *from, const sluice__profile *to, sluice__state *st,
                  uint64_t t)
{
    sluice__log *lg = &st->u.log;
    const uint64_t n1 = from->slots, n2 = to->slots;
    uint64_t lmax = from->limit, nmin = n1;
    if (lg->hist) {
        const uint64_t l0 = hist_value(lg->hist & HMASK), n0 = hist_value(lg->hist >> HCODE & HMASK);
        if (l0 > lmax) lmax = l0;
        if (n0 && n0 < nmin) nmin = n0;
    }
    if (lg->len || lg->base) /* something was admitted: the specs so far count */
        lg->hist = hist_code(lmax, true) | hist_code(nmin, false) << HCODE;
    const uint64_t last = sluice__div_q(&from->div_tick, st->t_last);
    if (n2 <= n1 || lg->base == 0 || last < n1) return; /* nothing retired can count */
    uint64_t r = last - n1;
    if (lg->len && at(lg, 0)->slot <= r) {
        if (at(lg, 0)->slot == 0) return;
        r = at(lg, 0)->slot - 1;
    }
    const uint64_t s = sluice__div_q(&to->div_tick, t);
    if (s >= n2 && r <= s - n2) return; /* out of every window from t on */
    const uint64_t span = s >= n2 ? r - (s - n2) : r + 1;
    const u128 bound = (u128)lmax * (span / nmin + (span % nmin != 0));
    const uint64_t x = bound < lg->base ? (uint64_t)bound : lg->base;
    if (lg->len == lg->cap) return; /* no room (reserve failed): cannot happen */
    lg->head = (lg->head + lg->cap - 1) & (lg->cap - 1);
    at(lg, 0)->slot = r;
    at(lg, 0)->cum = lg->base;
    lg->len++;
    lg->base -= x;
}

/* The slot width must stay: the ring's slots would mean other instants. */
static int wheel_recheck(const sluice__profile *from, const sluice__profile *to, char *err,
                         size_t errlen)
{
    if (from->tick_ns == to->tick_ns) return 0;
    sluice__errf(err, errlen,
                 "cannot change the slot width of a running sliding-wheel (%llu ns) to %llu ns: keep PERIOD/slots",
                 (unsigned long long)from->tick_ns, (unsigned long long)to->tick_ns);
    return SLUICE_EINVAL;
}

/* The ring cannot be packed into 16 bytes: a mutex guards it (limiter.c). */
const sluice__alg_ops sluice__sliding_wheel_ops = {
    .name = "sliding-wheel",
    .options = SLUICE__OPT(SLUICE__OPT_SLOTS) | SLUICE__OPT(SLUICE__OPT_CLOCK),
    .setup = wheel_setup,
    .format = wheel_format,
    .decide = decide,
    .rest_at = rest_at,
    .fini = fini,
    .judge = judge,
    .reserve = reserve,
    .recheck = wheel_recheck,
    .carry = carry,
    .settle = settle,
};

const sluice__alg_ops sluice__sliding_log_ops = {
    .name = "sliding-log",
    .options = SLUICE__OPT(SLUICE__OPT_CLOCK),
    .setup = log_setup,
    .format = sluice__format_no_options,
    .decide = decide,
    .rest_at = rest_at,
    .fini = fini,
    .judge = judge,
    .reserve = reserve,
    .carry = carry,
    .settle = settle,
};
