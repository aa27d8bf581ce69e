/* concurrency.h -- the concurrency limit (`concurrency N [lease=DURATION]`,
 * docs/spec.md and docs/decisions.md section 3.9): its parsed spec and the
 * exact lease book that a leased limit keeps (concurrency.c).
 *
 *   sluice__conc_profile  N and the lease, parsed once
 *   sluice__conc_parse, _format
 *   sluice__leases        the permits held under a lease, oldest first
 *   sluice__leases_init, _fini, _expire, _take, _give, _retry_after
 *
 * The limiter (limiter/concurrency.c) holds the book under its lock for
 * every call but one: a release (sluice__leases_give) is lock-free, on the
 * entry's word, the count and the clock (concurrency.c has the proof). */
#ifndef SLUICE_ALG_CONCURRENCY_H
#define SLUICE_ALG_CONCURRENCY_H

#include "alg/alg.h"

/* The most permits a leased concurrency limit may hold: its book has one
 * entry per permit handle, and a handle holds at least one permit. */
#define SLUICE__CONC_MAX_LEASED 65536u

typedef struct sluice__conc_profile {
    uint64_t limit;    /* N, 1 .. SLUICE_MAX_LIMIT (.. SLUICE__CONC_MAX_LEASED
                        * with a lease) */
    uint64_t lease_ns; /* 0: none; else 1 .. SLUICE_MAX_PERIOD_NS */
} sluice__conc_profile;

/* Parse `concurrency N [lease=DURATION]`.  0, or a negative code with a
 * one-line reason naming the offending token.  A spec of another algorithm
 * is refused here (it is sluice__spec_parse's). */
SLUICE__INTERNAL int sluice__conc_parse(const char *spec, sluice__conc_profile *cp, char *err,
                                        size_t errlen);
/* The canonical form: `concurrency N` and ` lease=D` with D in its largest
 * whole unit.  The length, or SLUICE_ENOSPC. */
SLUICE__INTERNAL int sluice__conc_format(const sluice__conc_profile *cp, char *buf,
                                         size_t buflen);
/* A DURATION ([N]UNIT, as a PERIOD) and its canonical form (spec.c). */
SLUICE__INTERNAL int sluice__parse_duration(const char *p, size_t pn, uint64_t *ns);
SLUICE__INTERNAL int sluice__format_duration(uint64_t ns, char *buf, size_t buflen);
/* Whether the first token of `spec` is `concurrency`. */
SLUICE__INTERNAL bool sluice__is_conc_spec(const char *spec);

/* One entry of the book.  `state` is the entry's word: its generation
 * (high 32 bits) and the permits it holds (low 32; 0: not held).  A handle
 * names an entry and the word it saw when taken, and whoever ends the
 * hold -- a release (lock-free) or the lease's end (under the book's
 * lock) -- does it by one compare-and-swap from that word to the next
 * generation with no permits: exactly one of them wins, and only the
 * winner gives the permits back.  An entry that is not held may still be
 * linked (released, not yet passed by the head: concurrency.c). */
typedef struct sluice__lease {
    _Atomic uint64_t state;     /* gen << 32 | permits held */
    _Atomic uint64_t expiry_ns; /* admission + lease (< 2^64: both < 2^63);
                                 * atomic: a release reads it, a relet moves it */
    uint32_t prev, next; /* linked: the list, in admission order (= expiry
                          * order: all leases are equal and admission times
                          * never go back); free: next is the free list's
                          * link.  NIL at the ends.  Under the lock. */
} sluice__lease;

#define SLUICE__LEASE_NIL UINT32_MAX
#define SLUICE__LEASE_PMASK 0xffffffffu /* the permits of a state word */
/* The most segments of entries: a book grows by appending a segment at
 * least as long as all before (entries never move, so a lock-free release
 * may read them while the book grows), and never past 2 x 65536 entries:
 * at most 17 appends. */
#define SLUICE__LEASE_SEGS 18

typedef struct sluice__leases {
    /* written under the lock (and read by releases: t_book) */
    uint32_t freehead;   /* the free entries, linked by next; under the lock */
    uint32_t head, tail; /* the list: head = oldest = ends first; under the lock */
    /* Permits held = taken - given (mod 2^64: both only grow).  `taken`
     * is written under the lock only (a plain store); `given` is added to
     * by whoever ends a hold (a release without the lock, an expiry under
     * it).  Read `given` first: then the difference never wraps. */
    _Atomic uint64_t taken;
    /* The book's clock, the latest time of a call (docs/decisions.md 3.9),
     * is max(t_book, t_rel): t_book is moved under the lock, t_rel raised
     * (only upward) by releases. */
    _Atomic uint64_t t_book;
    char pad0[64]; /* the releases' words on other cache lines */
    _Atomic uint64_t given, t_rel;
    char pad1[64];
    /* written only as the book grows */
    _Atomic uint32_t n;  /* entries (end[nseg-1]); published after a segment */
    uint32_t nseg;
    uint32_t end[SLUICE__LEASE_SEGS];
    sluice__lease *seg[SLUICE__LEASE_SEGS]; /* entries [end[k-1], end[k]) */
} sluice__leases;

/* Entry i (< n, which the caller has read). */
static inline sluice__lease *sluice__leases_at(const sluice__leases *b, uint32_t i)
{
    if (i < b->end[0]) return &b->seg[0][i]; /* a book never grown */
    uint32_t k = 1;
    while (i >= b->end[k]) k++; /* i < n = the last end: k < nseg */
    return &b->seg[k][i - b->end[k - 1]];
}

/* The permits held (a snapshot when called without the lock). */
static inline uint64_t sluice__leases_held(const sluice__leases *b)
{
    sluice__leases *m = (sluice__leases *)b; /* atomics only */
    uint64_t g = atomic_load(&m->given);
    return atomic_load(&m->taken) - g;
}
/* The book's clock. */
static inline uint64_t sluice__leases_clock(const sluice__leases *b)
{
    sluice__leases *m = (sluice__leases *)b; /* atomics only */
    uint64_t a = atomic_load_explicit(&m->t_book, memory_order_relaxed);
    uint64_t r = atomic_load_explicit(&m->t_rel, memory_order_relaxed);
    return a > r ? a : r;
}
/* Reset the clock to 0 (a table's key given to another key).  Under the
 * lock, with nothing held. */
SLUICE__INTERNAL void sluice__leases_reset_clock(sluice__leases *b);

/* A book of n entries (1 .. SLUICE__CONC_MAX_LEASED): 0 or SLUICE_ENOMEM. */
SLUICE__INTERNAL int sluice__leases_init(sluice__leases *b, uint32_t n);
SLUICE__INTERNAL void sluice__leases_fini(sluice__leases *b);
/* Clamp now_ns to the book's clock (and to 2^63-1), move the clock there
 * and give back every lease that has ended by then (expiry <= t); unlink
 * the released entries met at the head.  Returns the clamped time.  At
 * most 2n entries are visited.  Under the lock. */
SLUICE__INTERNAL uint64_t sluice__leases_expire(sluice__leases *b, uint64_t now_ns);
/* Hold `permits` (1 .. 2^32-1) from t with lease lease_ns: the entry's
 * index, its generation in *gen.  The caller has checked room: the count
 * held plus `permits` is at most the book's n (N <= n), so an entry is
 * free, or released and still linked (then the list is swept once:
 * O(n), paid for by the releases it unlinks).  Under the lock. */
SLUICE__INTERNAL uint32_t sluice__leases_take(sluice__leases *b, uint64_t t, uint64_t permits,
                                              uint64_t lease_ns, uint32_t *gen);
/* Give back entry `i` of generation `gen` holding `permits`, at now_ns,
 * without the lock: 0 (given back), SLUICE_ENOENT after giving it back
 * because its lease had ended by the book's clock (as the lease's end
 * would), or SLUICE_ENOENT changing nothing when the handle is not held
 * (released, ended and given back, stale, out of range).  Raises the
 * book's clock to now_ns (clamped to 2^63-1).  Any thread, any time. */
SLUICE__INTERNAL int sluice__leases_give(sluice__leases *b, uint32_t i, uint32_t gen,
                                         uint64_t permits, uint64_t now_ns);
/* Append `bigger`'s entries (a book just made by _init, of at least as
 * many entries as b) to b as a new segment: b's entries stay where they
 * are (a release may be reading them), the new ones are free, with
 * indices from b's n on.  `bigger` is left empty.  Cannot fail: the
 * memory was taken by _init.  Under the lock. */
SLUICE__INTERNAL void sluice__leases_grow(sluice__leases *b, sluice__leases *bigger);
/* Every held lease's end moves from admission + old_ns to admission +
 * new_ns (a lease change applies to the permits held): the list's order is
 * kept, since all move alike.  Ends at or before the book's clock are
 * given back by the next _expire.  At most n entries are visited.  Under
 * the lock. */
SLUICE__INTERNAL void sluice__leases_relet(sluice__leases *b, uint64_t old_ns, uint64_t new_ns);
/* The end of the last lease still held (0: none).  Under the lock. */
SLUICE__INTERNAL uint64_t sluice__leases_last_end(const sluice__leases *b);
/* For a refusal of `permits` at t (after _expire) with N = limit: the least
 * wait after which, with no other call, enough leases have ended.  Under
 * the lock. */
SLUICE__INTERNAL int64_t sluice__leases_retry_after(const sluice__leases *b, uint64_t t,
                                                    uint64_t limit, uint64_t permits);

#endif /* SLUICE_ALG_CONCURRENCY_H */
