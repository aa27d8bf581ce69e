/* window_log.h -- what a limiter (limiter.c) needs to refuse on a window
 * log (sliding-log, sliding-wheel; window_log.c) without taking its lock,
 * and to admit without deciding twice: a published summary of its log
 * under a sequence counter.  The proofs of the read and of the commit are
 * in window_log.c's head comment.
 *
 * Entry points: sluice__log_pub_new, sluice__log_hint, sluice__log_read,
 * sluice__log_decide, sluice__log_begin, sluice__log_end.
 */
#ifndef SLUICE_WINDOW_LOG_H
#define SLUICE_WINDOW_LOG_H

#include "alg/alg.h"

#include <pthread.h>

/* How many of the log's oldest entries are published. */
#define SLUICE__LOG_FRONT 8

/* A limiter's window log as lock-free readers see it: its header, its
 * newest entry and its SLUICE__LOG_FRONT oldest entries -- never the ring
 * itself, which its writer may move or free at any time.  Written only by
 * the holder of the limiter's mutex, between sluice__log_begin() and
 * sluice__log_end() or in sluice__log_decide()'s commit; every field but
 * the writer's own is atomic.  Readers touch three cache lines; the
 * writer's own fields are on a fourth.  A refusal by the hint reads only
 * the first line: seq, hint, seq (sluice__log_hint). */
typedef struct sluice__logpub {
    _Atomic uint64_t seq; /* even: stable; odd: a writer is changing the log */
    _Atomic uint64_t hint; /* refusals' hint: 0, or a time below which a
                            * request for >= 1 permit is refused (window_log.c) */
    _Atomic(const sluice__profile *) pf; /* the limiter's current profile */
    _Atomic uint64_t t_last;
    _Atomic uint64_t base;        /* the log's base */
    _Atomic uint64_t newest_slot; /* the newest entry's (when len > 0) */
    _Atomic uint64_t newest_cum;
    _Atomic uint32_t len;         /* the ring's */
    _Atomic uint32_t front_at;    /* where the oldest entry is in front[]
                                   * (mod 2^32, a multiple of FRONT) */
    struct {
        _Atomic uint64_t slot, cum;
    } front[SLUICE__LOG_FRONT];   /* the oldest min(len, FRONT) entries, the
                                   * i-th at (front_at + i) % FRONT */
    /* the writer's own (a line of their own: 192 bytes above) */
    _Alignas(64) uint64_t open;     /* seq before sluice__log_begin() */
    uint64_t sections; /* how many sluice__log_begin() (tests read it) */
    const sluice__log_entry *ring; /* the ring and its length at the last */
    uint32_t ring_len;             /* publication */
} sluice__logpub;

/* A new publication of the (empty, at rest) log of profile pf, or NULL
 * when memory runs out; freed by sluice__free64(). */
SLUICE__INTERNAL sluice__logpub *sluice__log_pub_new(const sluice__profile *pf);

/* The published hint, read under the sequence (window_log.c): a request
 * for permits >= 1 at a time below it is refused; 0 when the read met a
 * writer, or when there is no such time. */
static inline uint64_t sluice__log_hint(const sluice__logpub *pub)
{
    const uint64_t s1 = atomic_load_explicit(&pub->seq, memory_order_acquire);
    const uint64_t h = atomic_load_explicit(&pub->hint, memory_order_acquire);
    return atomic_load_explicit(&pub->seq, memory_order_relaxed) == s1 && !(s1 & 1) ? h : 0;
}

/* Decide p permits at now_ns from the publication, writing nothing.  True
 * when that settles it -- a refusal or a probe (p == 0) --, with *ok, *res
 * (when not NULL) and *t_eff (the clamped time) filled exactly as the
 * locked decision would fill them; false when the caller must decide under
 * the mutex: the read would admit, it needs more than the published
 * entries (window_log.c says when), or writers kept changing the log. */
SLUICE__INTERNAL bool sluice__log_read(const sluice__logpub *pub, uint64_t now_ns, uint64_t p,
                                       sluice_result *res, uint64_t *t_eff, bool *ok);

/* A decision on the limiter whose state `st` the mutex `mu` guards and
 * whose publication is `pub`, called without mu: sluice__log_read(), and
 * when the read would admit, the admission it found committed under mu
 * (taken and released here) -- unless a writer changed the log since the
 * read -- without deciding again.  True when that settles it, with *ok and
 * *res (when not NULL) filled exactly as the locked decision would fill
 * them; false when the caller must decide under mu (a stale read, a ring
 * to grow, or as sluice__log_read). */
SLUICE__INTERNAL bool sluice__log_decide(sluice__logpub *pub, pthread_mutex_t *mu,
                                         sluice__state *st, uint64_t now_ns, uint64_t p,
                                         sluice_result *res, bool *ok);

/* Under the mutex, around anything that may change the state's log
 * (a decision, a composite's hold and release, a reconfiguration): begin
 * makes the sequence odd; end publishes the state `st` (and the profile
 * `pf`, when not NULL) and makes the sequence even again -- back to its
 * value before begin when nothing was written (`wrote` false, pf NULL and
 * the header unchanged), so a refusal leaves it as it found it. */
SLUICE__INTERNAL void sluice__log_begin(sluice__logpub *pub);
SLUICE__INTERNAL void sluice__log_end(sluice__logpub *pub, const sluice__state *st,
                                      const sluice__profile *pf, bool wrote);

#endif /* SLUICE_WINDOW_LOG_H */
