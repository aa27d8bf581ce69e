/* concurrency.h -- the concurrency limit (`concurrency N [lease=DURATION]`,
 * docs/spec.md and docs/decisions.md section 3.9): its parsed spec and the
 * exact lease book that a leased limit keeps (concurrency.c).
 *
 *   sluice__conc_profile  N and the lease, parsed once
 *   sluice__conc_parse, _format
 *   sluice__leases        the permits held under a lease, oldest first
 *   sluice__leases_init, _fini, _retry_after; inline (every decision runs
 *   them): _expire (its loop: _pop), _take, _give, _unlink
 *
 * The lease book is a plain single-threaded structure; the limiter
 * (limiter/concurrency.c) holds it under its lock. */
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

/* One entry of the book: a handle's permits and when its lease ends (the
 * admission time + lease, < 2^64 since both are below 2^63).  `gen` counts
 * the entry's uses, so a handle of an earlier use is stale. */
typedef struct sluice__lease {
    uint64_t expiry_ns;
    uint64_t permits; /* 0: the entry is free */
    uint32_t gen;
    uint32_t prev, next; /* the held list, in admission order (= expiry
                          * order: all leases are equal and admission times
                          * never go back); NIL at the ends */
} sluice__lease;

#define SLUICE__LEASE_NIL UINT32_MAX

typedef struct sluice__leases {
    sluice__lease *e; /* n entries */
    uint32_t *free;   /* a stack of the free entries' indices */
    uint32_t n, nfree;
    uint32_t head, tail; /* the held list: head = oldest = expires first */
    uint64_t held;       /* permits held: the sum over the held list */
    uint64_t t_last;     /* the latest time of a call (docs/decisions.md 3.9) */
} sluice__leases;

/* A book of n entries (1 .. SLUICE__CONC_MAX_LEASED): 0 or SLUICE_ENOMEM. */
SLUICE__INTERNAL int sluice__leases_init(sluice__leases *b, uint32_t n);
SLUICE__INTERNAL void sluice__leases_fini(sluice__leases *b);
/* Give back every lease that has ended by t (the book's clock): pop the
 * list's head while its expiry <= t.  At most n entries are visited. */
SLUICE__INTERNAL void sluice__leases_pop(sluice__leases *b, uint64_t t);
/* Clamp now_ns to the book's clock (and to 2^63-1), move the clock there
 * and give back every lease that has ended by then (expiry <= t).  Returns
 * the clamped time.  Inline: every call on a leased limit runs it, and
 * mostly no lease has ended (the head's end is later). */
static inline uint64_t sluice__leases_expire(sluice__leases *b, uint64_t now_ns)
{
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    if (now_ns > b->t_last) b->t_last = now_ns;
    if (b->head != SLUICE__LEASE_NIL && b->e[b->head].expiry_ns <= b->t_last)
        sluice__leases_pop(b, b->t_last);
    return b->t_last;
}
/* Take entry i out of the held list onto the free stack: its permits are
 * no longer held and its generation moves on.  Under the lock. */
static inline void sluice__leases_unlink(sluice__leases *b, uint32_t i)
{
    sluice__lease *x = &b->e[i];
    if (x->prev != SLUICE__LEASE_NIL) b->e[x->prev].next = x->next;
    else b->head = x->next;
    if (x->next != SLUICE__LEASE_NIL) b->e[x->next].prev = x->prev;
    else b->tail = x->prev;
    b->held -= x->permits;
    x->permits = 0;
    x->gen++;
    b->free[b->nfree++] = i;
}
/* Hold `permits` (>= 1, room checked by the caller) from t with lease
 * lease_ns: the entry's index, its generation in *gen.  A free entry
 * always exists while held < n. */
static inline uint32_t sluice__leases_take(sluice__leases *b, uint64_t t, uint64_t permits,
                                           uint64_t lease_ns, uint32_t *gen)
{
    uint32_t i = b->free[--b->nfree];
    sluice__lease *x = &b->e[i];
    x->expiry_ns = t + lease_ns; /* both < 2^63: no wrap */
    x->permits = permits;
    x->next = SLUICE__LEASE_NIL;
    x->prev = b->tail;
    if (b->tail != SLUICE__LEASE_NIL) b->e[b->tail].next = i;
    else b->head = i;
    b->tail = i;
    b->held += permits;
    *gen = x->gen;
    return i;
}
/* Give back entry `i` of generation `gen` holding `permits`: true, or false
 * (changing nothing) when the handle is not held (released, expired, or
 * out of range). */
static inline bool sluice__leases_give(sluice__leases *b, uint32_t i, uint32_t gen,
                                       uint64_t permits)
{
    if (i >= b->n) return false;
    const sluice__lease *x = &b->e[i];
    if (x->permits == 0 || x->gen != gen || x->permits != permits) return false;
    sluice__leases_unlink(b, i);
    return true;
}
/* Move b's entries into `bigger` (a book just made by _init with more
 * entries than b): every entry keeps its index, generation and place in
 * the held list, the new ones are free; b is left empty (its arrays
 * freed).  Cannot fail: the memory was taken by _init. */
SLUICE__INTERNAL void sluice__leases_grow(sluice__leases *b, sluice__leases *bigger);
/* Every held lease's end moves from admission + old_ns to admission +
 * new_ns (a lease change applies to the permits held): the list's order is
 * kept, since all move alike.  Ends at or before the book's clock are
 * given back by the next _expire.  At most n entries are visited. */
SLUICE__INTERNAL void sluice__leases_relet(sluice__leases *b, uint64_t old_ns, uint64_t new_ns);
/* For a refusal of `permits` at t (after _expire) with N = limit: the least
 * wait after which, with no other call, enough leases have ended. */
SLUICE__INTERNAL int64_t sluice__leases_retry_after(const sluice__leases *b, uint64_t t,
                                                    uint64_t limit, uint64_t permits);

#endif /* SLUICE_ALG_CONCURRENCY_H */
