/* concurrency.c -- the concurrency limit (sluice/concurrency.h): permits
 * held, given back by their handle.
 *
 * Without a lease the state is one atomic word: the count of permits held
 * (low 40 bits; N <= 10^12 < 2^40), an epoch (23 bits), which a handle
 * carries as its generation, and a frozen bit (the top): set while a
 * decision with rate limits holds the word (composite/conc_with.c), during
 * which every other call on it waits.  An admission is a compare-and-swap
 * from c to c + p when c + p <= N; a release one from c to c - p when p <= c
 * and the epoch is the handle's (so no release can ever give back more than
 * was admitted, nor reach a later tenant of a table's key: conc_table.c
 * bumps the epoch when it gives an idle limit to another key).  Both are
 * lock-free; a failed compare-and-swap means another call made progress.
 *
 * With a lease the state is the lease book (alg/concurrency.c), under a
 * short spin lock (base/spin.h; a pthread mutex pair costs about three
 * times as much, and the book's work is a few dozen instructions): every
 * call gives back the leases ended by its time, then decides.
 *
 * Waiters (sluice_acquire_permit) queue in arrival order under the mutex,
 * each with its own condition variable.  Whoever frees permits -- a
 * release, a waiter whose time ran out, a lease that ended -- runs grant():
 * it serves the queue from the head, taking each waiter's permits for it
 * and signalling that waiter alone, and stops at the first that does not
 * fit.  So a release wakes exactly the waiters it lets through, in order.
 * A lock-free release must not miss a waiter that queued after its failed
 * try: the waiter raises `nwait` before it tries, the releaser lowers the
 * count before it reads `nwait` (both sequentially consistent: of the two,
 * at least one sees the other), and a releaser that sees a waiter takes the
 * mutex, which the waiter holds from its try until it sleeps.  With a
 * lease the same pair is the book's lock: the waiter raises `nwait`, then
 * takes the lock to try; a releaser reads `nwait` inside the lock, after
 * its release.  Lock order: mu, then the book's lock.  While
 * anybody waits, non-blocking admissions are refused, so newcomers cannot
 * overtake the queue.
 *
 * With a lease, only the head waiter sleeps with a timeout at the next
 * lease's end (and every waiter at its own deadline); when the head
 * changes, grant() signals the new head so that it sets its own timer.
 *
 * Queued acquires (sluice_acquire_permit_async_at) are waiters of the same
 * queue, so they keep their place among blocked threads.  Each has one
 * timer on its wheel instead of a condition variable: at its deadline (as
 * a leased limit's head, also at the next lease's end, where it serves the
 * queue as a blocked head would); grant() moves a granted one's timer to 0,
 * so the wheel's next advance calls it back, in grant order (the wheel
 * fires equal deadlines in schedule order).  The callback runs outside mu.
 * Lock order: mu, sl, the wheel's.  `napend` counts the requests not yet
 * called back (granted or not), so that a table does not give the limit
 * to another key while one is pending (sluice__conc_reuse): a granted
 * one's lease may end before its callback, leaving the limit idle.  A
 * table's requests carry ids the table chose (sluice__conc_async_id_at),
 * unique within the table, so that an id names its key.
 *
 * Changed in place (sluice_concurrency_reconfigure_at): N is an atomic word
 * that every decision reads once, so a smaller N refuses while the permits
 * held reach it (room() is 0 then, never a wrapped difference); a leased
 * limit's book grows under its lock into entries allocated before (the
 * handles' indices stay), and a new lease moves every held lease's end to
 * its admission plus the new lease (all alike: the list stays in order).
 * The lease itself (on or off) is fixed: a book or a word for life.
 *
 * A rule set's references (sluice__conc_ref, rules/rules.c): the set holds
 * one and each of its permit handles one, so a limit a reload took out of
 * use is freed by the release of its last handle; a table's limits count
 * on their table (conc_table.c).
 *
 * Entry points: sluice_concurrency_new, _free, _reconfigure_at;
 * sluice_acquire_permit_at,
 * sluice_acquire_permit, sluice_permit_release_at (and live forms);
 * sluice_concurrency_held_at, _limit, _spec_check, _spec_format;
 * sluice_acquire_permit_async_at, sluice_permit_async_cancel_at.
 */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"
#include "base/clock.h"
#include "base/spin.h"
#include "alg/concurrency.h"
#include "limiter/concurrency.h"
#include "timer/wheel.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

typedef struct anode anode;
typedef struct waiter {
    struct waiter *next;
    uint64_t permits;
    sluice_permit *pm; /* filled by grant() */
    bool granted;
    anode *an;         /* a queued acquire's node, or NULL: a blocked thread */
    pthread_cond_t cv; /* on CLOCK_MONOTONIC (a blocked thread's only) */
} waiter;

/* A queued acquire (sluice_acquire_permit_async_at): its waiter, in the
 * queue until granted or timed out, and one timer on its wheel -- at its
 * deadline, as the head of a leased limit also at the next lease's end,
 * and at 0 (the next advance) once granted, to call back. */
struct anode {
    waiter w;
    anode *next, *prev; /* the limit's requests not yet called back */
    sluice_wheel *wh;
    sluice_permit_fn fn;
    void *arg;
    uint64_t id, deadline;
    sluice_timer_id timer; /* 0 while its callback runs */
    sluice_permit pm;
};

struct sluice_concurrency {
    _Alignas(64) _Atomic uint64_t count; /* no lease: permits held | epoch << 40 */
    _Atomic uint32_t nwait;              /* waiters queued, or about to */
    _Atomic uint64_t limit;              /* N (_reconfigure_at changes it) */
    sluice__conc_profile cp;             /* cp.lease_ns under sl; cp.limit unused */
    bool has_lease;                      /* fixed at make: the book or the word */
    _Atomic uint64_t refs;               /* a rule set's references (sluice__conc_ref) */
    sluice_concurrency_table *home;      /* the table whose key it is, or NULL */
    pthread_mutex_t mu;   /* the queue */
    sluice__spin sl;      /* the book */
    sluice__leases book;  /* with a lease, under sl */
    waiter *qhead, *qtail;
    anode *ahead;         /* queued acquires not yet called back, under mu */
    _Atomic uint32_t napend; /* their count: a table's key with one is not at rest */
    uint64_t next_id;     /* under mu */
};

#define CMASK (((uint64_t)1 << 40) - 1) /* the count of the no-lease word */
#define FROZEN ((uint64_t)1 << 63)          /* held by a decision with other limits */
#define EPOCH(w) ((uint32_t)((w) >> 40) & 0x7fffffu) /* 23 bits */

static bool leased(const sluice_concurrency *c) { return c->has_lease; }

/* N, read once per decision (a reconfigure may change it at any time). */
static uint64_t nlim(const sluice_concurrency *c)
{
    return atomic_load_explicit(&((sluice_concurrency *)c)->limit, memory_order_relaxed);
}

/* Room for new permits: N - held, 0 when a smaller N left more held. */
static uint64_t room(uint64_t N, uint64_t held) { return held >= N ? 0 : N - held; }

sluice_concurrency *sluice__conc_make(const sluice__conc_profile *cp)
{
    sluice_concurrency *c = sluice__calloc64(sizeof *c);
    if (!c) return NULL;
    c->cp = *cp;
    c->has_lease = cp->lease_ns != 0;
    atomic_init(&c->limit, cp->limit);
    atomic_init(&c->refs, 1);
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        sluice__free64(c);
        return NULL;
    }
    if (cp->lease_ns && sluice__leases_init(&c->book, (uint32_t)cp->limit) != 0) {
        pthread_mutex_destroy(&c->mu);
        sluice__free64(c);
        return NULL;
    }
    return c;
}

sluice_concurrency *sluice_concurrency_new(const char *spec, char *err, size_t errlen)
{
    sluice__conc_profile cp;
    if (sluice__conc_parse(spec, &cp, err, errlen) != 0) return NULL;
    sluice_concurrency *c = sluice__conc_make(&cp);
    if (!c) sluice__errf(err, errlen, "out of memory");
    return c;
}

bool sluice__conc_reuse(sluice_concurrency *c, uint64_t now_ns)
{
    /* a queued acquire not yet called back keeps its key, granted or not
     * (a granted one's lease may end before its callback) */
    if (atomic_load(&c->nwait) != 0 || atomic_load(&c->napend) != 0) return false;
    if (!leased(c)) {
        /* count 0 -> 0 with the next epoch; a release in between (count
         * above 0) makes the compare-and-swap fail */
        uint64_t n = atomic_load(&c->count);
        if ((n & (CMASK | FROZEN)) != 0) return false;
        uint64_t next = (n & ~CMASK) + ((uint64_t)1 << 40);
        return atomic_compare_exchange_strong(&c->count, &n, next & ~FROZEN); /* epoch wraps */
    }
    /* idle iff the last lease to end (the list's tail) has ended by now:
     * known without moving the limit's clock, which only its own key's
     * calls move */
    sluice__spin_lock(&c->sl);
    uint64_t t = now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : now_ns;
    if (t < c->book.t_last) t = c->book.t_last;
    bool idle = c->book.tail == SLUICE__LEASE_NIL || c->book.e[c->book.tail].expiry_ns <= t;
    if (idle) {
        sluice__leases_expire(&c->book, t); /* empties the list */
        c->book.t_last = 0; /* a fresh key's clock; entries keep their generations */
    }
    sluice__spin_unlock(&c->sl);
    return idle;
}

void sluice_concurrency_free(sluice_concurrency *c)
{
    if (!c) return;
    /* queued acquires still pending: never called back (see the header) */
    for (anode *an = c->ahead, *n; an; an = n) {
        n = an->next;
        if (an->timer) sluice_wheel_cancel(an->wh, an->timer);
        sluice__free(an);
    }
    if (leased(c)) sluice__leases_fini(&c->book);
    pthread_mutex_destroy(&c->mu);
    sluice__free64(c);
}

/* The lock-free count: add p if it fits (the count before in *was, the
 * word's epoch in *epoch). */
static bool count_take(sluice_concurrency *c, uint64_t N, uint64_t p, uint64_t *was,
                       uint32_t *epoch)
{
    uint64_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
    for (unsigned k = 0;; k++) {
        if (n & FROZEN) { /* a decision with other limits holds it: a moment */
            sluice__backoff(k);
            n = atomic_load_explicit(&c->count, memory_order_relaxed);
            continue;
        }
        if (p > room(N, n & CMASK)) {
            *was = n & CMASK;
            return false;
        }
        if (atomic_compare_exchange_weak_explicit(&c->count, &n, n + p, memory_order_acq_rel,
                                                  memory_order_relaxed))
            break;
    }
    *was = n & CMASK;
    *epoch = EPOCH(n);
    return true;
}

static void fill(sluice_permit *pm, sluice_concurrency *c, uint64_t p, uint32_t slot, uint32_t gen)
{
    *pm = (sluice_permit){.permits = p, .owner = c, .slot = slot, .gen = gen};
}

/* When the head of a leased limit's queue should look again: its deadline
 * or the next lease's end.  Under sl. */
static uint64_t head_wake(const sluice_concurrency *c, uint64_t deadline)
{
    if (c->book.head != SLUICE__LEASE_NIL && c->book.e[c->book.head].expiry_ns < deadline)
        return c->book.e[c->book.head].expiry_ns;
    return deadline;
}

/* A new head of a leased limit's queue sets its timer at the next lease's
 * end.  Under mu and sl. */
static void wake_head(sluice_concurrency *c)
{
    waiter *h = c->qhead;
    if (!h || !leased(c)) return;
    if (h->an) sluice_wheel_reschedule(h->an->wh, h->an->timer, head_wake(c, h->an->deadline));
    else pthread_cond_signal(&h->cv);
}

/* Try the queue's head waiter, and the next, ... at t (the book's clock,
 * after _expire).  Under mu, and with a lease sl. */
static void grant(sluice_concurrency *c, uint64_t t)
{
    waiter *w;
    bool served = false;
    const uint64_t N = nlim(c);
    while ((w = c->qhead) != NULL) {
        if (leased(c)) {
            if (w->permits > room(N, c->book.held)) break;
            uint32_t gen, slot = sluice__leases_take(&c->book, t, w->permits, c->cp.lease_ns, &gen);
            fill(w->pm, c, w->permits, slot, gen);
        } else {
            uint64_t was;
            uint32_t ep;
            if (!count_take(c, N, w->permits, &was, &ep)) break;
            fill(w->pm, c, w->permits, UINT32_MAX, ep);
        }
        w->granted = true;
        c->qhead = w->next;
        if (!c->qhead) c->qtail = NULL;
        atomic_fetch_sub(&c->nwait, 1);
        if (w->an) /* called back at the wheel's next advance, in grant order */
            sluice_wheel_reschedule(w->an->wh, w->an->timer, 0);
        else
            pthread_cond_signal(&w->cv);
        served = true;
    }
    /* a new head sets its timer at the next lease's end */
    if (served) wake_head(c);
}

/* A leased limit's grant() from outside both locks, at the book's clock. */
static void serve(sluice_concurrency *c)
{
    pthread_mutex_lock(&c->mu);
    sluice__spin_lock(&c->sl);
    grant(c, c->book.t_last);
    sluice__spin_unlock(&c->sl);
    pthread_mutex_unlock(&c->mu);
}

bool sluice_acquire_permit_at(sluice_concurrency *c, uint64_t permits, uint64_t now_ns,
                              sluice_permit *pm, sluice_result *res)
{
    sluice_result tmp;
    if (!res) res = &tmp;
    if (pm) *pm = (sluice_permit){0};
    if (!c || !pm) return sluice__fail(res, SLUICE_EINVAL);
    if (!leased(c)) {
        const uint64_t N = nlim(c);
        uint64_t was;
        uint32_t ep;
        if (permits == 0) return sluice__allow(res, room(N, atomic_load(&c->count) & CMASK), 0);
        if (atomic_load_explicit(&c->nwait, memory_order_acquire) == 0 &&
            count_take(c, N, permits, &was, &ep)) {
            fill(pm, c, permits, UINT32_MAX, ep);
            return sluice__allow(res, N - was - permits, 0);
        }
        uint64_t n = atomic_load_explicit(&c->count, memory_order_relaxed) & CMASK;
        return sluice__deny(res, N - (n < N ? n : N), permits > N ? -1 : INT64_MAX);
    }
    sluice__spin_lock(&c->sl);
    const uint64_t N = nlim(c); /* under sl: a reconfigure changes it there */
    uint64_t t = sluice__leases_expire(&c->book, now_ns);
    bool queue = atomic_load_explicit(&c->nwait, memory_order_relaxed) != 0;
    bool ok = permits == 0 || (!queue && permits <= room(N, c->book.held));
    if (ok && permits) {
        uint32_t gen, slot = sluice__leases_take(&c->book, t, permits, c->cp.lease_ns, &gen);
        fill(pm, c, permits, slot, gen);
    }
    if (ok) sluice__allow(res, room(N, c->book.held), 0);
    else
        sluice__deny(res, room(N, c->book.held),
                     queue && permits <= room(N, c->book.held)
                         ? INT64_MAX /* room, but waiters first */
                         : sluice__leases_retry_after(&c->book, t, N, permits));
    sluice__spin_unlock(&c->sl);
    return ok;
}

bool sluice_try_acquire_permit(sluice_concurrency *c, uint64_t permits, sluice_permit *pm)
{
    return sluice_acquire_permit_at(c, permits, sluice__clock_read(CLOCK_MONOTONIC), pm, NULL);
}

int sluice_permit_release_at(sluice_permit *pm, uint64_t now_ns)
{
    if (!pm) return SLUICE_EINVAL;
    sluice_concurrency *c = pm->owner;
    uint64_t p = pm->permits;
    if (!c || p == 0) return SLUICE_ENOENT;
    int rc = 0;
    if (!leased(c)) {
        uint64_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
        for (unsigned k = 0;; k++) {
            if (n & FROZEN) {
                sluice__backoff(k);
                n = atomic_load_explicit(&c->count, memory_order_relaxed);
                continue;
            }
            if ((n & CMASK) < p || EPOCH(n) != pm->gen) {
                pm->permits = 0;
                return SLUICE_ENOENT;
            }
            if (atomic_compare_exchange_weak_explicit(&c->count, &n, n - p, memory_order_seq_cst,
                                                      memory_order_relaxed))
                break;
        }
        pm->permits = 0;
        if (atomic_load_explicit(&c->nwait, memory_order_seq_cst) != 0) {
            pthread_mutex_lock(&c->mu);
            grant(c, 0);
            pthread_mutex_unlock(&c->mu);
        }
        return 0;
    }
    sluice__spin_lock(&c->sl);
    sluice__leases_expire(&c->book, now_ns);
    if (!sluice__leases_give(&c->book, pm->slot, pm->gen, p)) rc = SLUICE_ENOENT;
    bool queue = atomic_load_explicit(&c->nwait, memory_order_relaxed) != 0;
    sluice__spin_unlock(&c->sl);
    pm->permits = 0;
    if (queue) serve(c);
    return rc;
}

int sluice_permit_release(sluice_permit *pm)
{
    return sluice_permit_release_at(pm, sluice__clock_read(CLOCK_MONOTONIC));
}

/* grant() under mu after a waiter left the queue; `signal`: wake the new
 * head so that it sets its timer at the next lease's end. */
static void regrant(sluice_concurrency *c, bool signal)
{
    if (leased(c)) sluice__spin_lock(&c->sl);
    grant(c, leased(c) ? c->book.t_last : 0);
    if (signal) wake_head(c);
    if (leased(c)) sluice__spin_unlock(&c->sl);
}

static struct timespec ts_of(uint64_t ns)
{
    return (struct timespec){.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
}

int sluice_acquire_permit(sluice_concurrency *c, uint64_t permits, uint64_t timeout_ns,
                          sluice_permit *pm)
{
    if (pm) *pm = (sluice_permit){0};
    if (!c || !pm || permits == 0 || permits > nlim(c)) return SLUICE_EINVAL;
    uint64_t now = sluice__clock_read(CLOCK_MONOTONIC);
    uint64_t deadline = now + timeout_ns < now || now + timeout_ns > (uint64_t)INT64_MAX
                            ? (uint64_t)INT64_MAX
                            : now + timeout_ns;
    waiter w = {.permits = permits, .pm = pm};
    pthread_mutex_lock(&c->mu);
    atomic_fetch_add(&c->nwait, 1); /* before the try: see the head comment */
    if (c->qhead == NULL) {
        if (leased(c)) {
            sluice__spin_lock(&c->sl);
            uint64_t t = sluice__leases_expire(&c->book, now);
            if (permits <= room(nlim(c), c->book.held)) {
                uint32_t gen, slot = sluice__leases_take(&c->book, t, permits, c->cp.lease_ns, &gen);
                fill(pm, c, permits, slot, gen);
                w.granted = true;
            }
            sluice__spin_unlock(&c->sl);
        } else {
            uint64_t was;
            uint32_t ep;
            if (count_take(c, nlim(c), permits, &was, &ep)) {
                fill(pm, c, permits, UINT32_MAX, ep);
                w.granted = true;
            }
        }
        if (w.granted) {
            atomic_fetch_sub(&c->nwait, 1);
            pthread_mutex_unlock(&c->mu);
            return 0;
        }
    }
    pthread_condattr_t ca;
    int ok = pthread_condattr_init(&ca) == 0;
    if (ok) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        ok = pthread_cond_init(&w.cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!ok) {
        atomic_fetch_sub(&c->nwait, 1);
        regrant(c, false);
        pthread_mutex_unlock(&c->mu);
        return SLUICE_ENOMEM;
    }
    if (c->qtail) c->qtail->next = &w;
    else c->qhead = &w;
    c->qtail = &w;
    int rc = 0;
    for (;;) {
        if (w.granted) break;
        uint64_t wake = deadline;
        if (leased(c) && c->qhead == &w) {
            sluice__spin_lock(&c->sl);
            wake = head_wake(c, wake);
            sluice__spin_unlock(&c->sl);
        }
        struct timespec ts = ts_of(wake);
        pthread_cond_timedwait(&w.cv, &c->mu, &ts);
        if (w.granted) break;
        now = sluice__clock_read(CLOCK_MONOTONIC);
        if (leased(c)) {
            sluice__spin_lock(&c->sl);
            grant(c, sluice__leases_expire(&c->book, now));
            sluice__spin_unlock(&c->sl);
        }
        if (w.granted) break;
        if (now >= deadline) {
            /* leave the queue; those behind may fit now */
            waiter **pp = &c->qhead, *prev = NULL;
            while (*pp != &w) {
                prev = *pp;
                pp = &(*pp)->next;
            }
            *pp = w.next;
            if (c->qtail == &w) c->qtail = prev;
            atomic_fetch_sub(&c->nwait, 1);
            regrant(c, true);
            rc = SLUICE_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}

uint64_t sluice_concurrency_held_at(sluice_concurrency *c, uint64_t now_ns)
{
    if (!c) return 0;
    if (!leased(c)) return atomic_load(&c->count) & CMASK;
    sluice__spin_lock(&c->sl);
    sluice__leases_expire(&c->book, now_ns);
    bool queue = atomic_load_explicit(&c->nwait, memory_order_relaxed) != 0;
    sluice__spin_unlock(&c->sl);
    if (queue) serve(c); /* ended leases may let waiters through */
    sluice__spin_lock(&c->sl);
    uint64_t h = c->book.held;
    sluice__spin_unlock(&c->sl);
    return h;
}

uint64_t sluice_concurrency_held(const sluice_concurrency *c)
{
    if (!c) return 0;
    sluice_concurrency *cc = (sluice_concurrency *)c; /* the lock only */
    if (!leased(c)) return atomic_load(&cc->count) & CMASK;
    sluice__spin_lock(&cc->sl);
    uint64_t h = cc->book.held;
    sluice__spin_unlock(&cc->sl);
    return h;
}

uint32_t sluice_concurrency_waiting(const sluice_concurrency *c)
{
    return c ? atomic_load(&((sluice_concurrency *)c)->nwait) : 0;
}

uint64_t sluice_concurrency_limit(const sluice_concurrency *c) { return c ? nlim(c) : 0; }

int sluice_concurrency_spec_check(const char *spec, char *canon, size_t canonlen, char *err,
                                  size_t errlen)
{
    sluice__conc_profile cp;
    int rc = sluice__conc_parse(spec, &cp, err, errlen);
    if (rc != 0) return rc;
    if (canon) {
        rc = sluice__conc_format(&cp, canon, canonlen);
        if (rc < 0) return rc;
    }
    return 0;
}

int sluice_concurrency_spec_format(const sluice_concurrency *c, char *buf, size_t buflen)
{
    if (!c) return SLUICE_EINVAL;
    sluice__conc_profile cp = {.limit = nlim(c)};
    if (leased(c)) {
        sluice_concurrency *cc = (sluice_concurrency *)c; /* the lock only */
        sluice__spin_lock(&cc->sl);
        cp.lease_ns = cc->cp.lease_ns;
        sluice__spin_unlock(&cc->sl);
    }
    return sluice__conc_format(&cp, buf, buflen);
}

/* ---- changed in place --------------------------------------------------- */

int sluice__conc_prepare(sluice_concurrency *c, const sluice__conc_profile *cp,
                         sluice__leases *spare, char *err, size_t errlen)
{
    memset(spare, 0, sizeof *spare);
    if ((cp->lease_ns != 0) != leased(c)) {
        sluice__errf(err, errlen,
                     leased(c) ? "the lease cannot be removed in place (a leased limit keeps "
                                 "a book of its handles): make a new limit"
                               : "a lease cannot be added in place (a leased limit keeps a "
                                 "book of its handles): make a new limit");
        return SLUICE_EINVAL;
    }
    if (!leased(c)) return 0;
    sluice__spin_lock(&c->sl);
    uint32_t n = c->book.n;
    sluice__spin_unlock(&c->sl);
    if (cp->limit <= n) return 0;
    if (sluice__leases_init(spare, (uint32_t)cp->limit) != 0) {
        sluice__errf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    return 0;
}

void sluice__conc_apply(sluice_concurrency *c, const sluice__conc_profile *cp,
                        sluice__leases *spare, uint64_t now_ns)
{
    pthread_mutex_lock(&c->mu);
    if (!leased(c)) {
        atomic_store(&c->limit, cp->limit);
        grant(c, 0); /* a larger N may let waiters through */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    sluice__spin_lock(&c->sl);
    uint64_t t = sluice__leases_expire(&c->book, now_ns);
    if (spare->e && spare->n > c->book.n) sluice__leases_grow(&c->book, spare);
    sluice__leases_relet(&c->book, c->cp.lease_ns, cp->lease_ns);
    c->cp.lease_ns = cp->lease_ns;
    atomic_store(&c->limit, cp->limit);
    sluice__leases_expire(&c->book, t); /* leases a shorter one ended */
    grant(c, t);
    wake_head(c); /* the head's timer: the next lease's end moved */
    sluice__spin_unlock(&c->sl);
    pthread_mutex_unlock(&c->mu);
    if (spare->e) sluice__leases_fini(spare); /* not needed after all */
}

int sluice_concurrency_reconfigure_at(sluice_concurrency *c, const char *spec, uint64_t now_ns,
                                      char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    if (!c) {
        sluice__errf(err, errlen, "no limit");
        return SLUICE_EINVAL;
    }
    sluice__conc_profile cp;
    int rc = sluice__conc_parse(spec, &cp, err, errlen);
    if (rc != 0) return rc;
    sluice__leases spare;
    rc = sluice__conc_prepare(c, &cp, &spare, err, errlen);
    if (rc == 0) sluice__conc_apply(c, &cp, &spare, now_ns);
    return rc;
}

int sluice_concurrency_reconfigure(sluice_concurrency *c, const char *spec, char *err,
                                   size_t errlen)
{
    return sluice_concurrency_reconfigure_at(c, spec, sluice__clock_read(CLOCK_MONOTONIC), err,
                                             errlen);
}

/* ---- references of a rule set -------------------------------------------- */

void sluice__conc_set_home(sluice_concurrency *c, sluice_concurrency_table *t) { c->home = t; }

void sluice__conc_ref(sluice_concurrency *c)
{
    if (c->home) sluice__ctab_ref(c->home);
    else atomic_fetch_add(&c->refs, 1);
}

void sluice__conc_unref(sluice_concurrency *c)
{
    if (c->home) sluice__ctab_unref(c->home);
    else if (atomic_fetch_sub(&c->refs, 1) == 1) sluice_concurrency_free(c);
}

/* ---- held by a decision with rate limits (composite/conc_with.c) -------- */

bool sluice__conc_hold(sluice_concurrency *c, uint64_t permits, uint64_t now_ns, uint64_t *snap,
                       sluice_result *res)
{
    if (leased(c)) {
        sluice__spin_lock(&c->sl);
        const uint64_t N = nlim(c);
        uint64_t t = sluice__leases_expire(&c->book, now_ns);
        bool queue = atomic_load_explicit(&c->nwait, memory_order_relaxed) != 0;
        if (permits == 0 || (!queue && permits <= room(N, c->book.held))) {
            *snap = t;
            sluice__allow(res, room(N, c->book.held) - permits, 0);
            return true; /* the lock stays held */
        }
        sluice__deny(res, room(N, c->book.held),
                     queue && permits <= room(N, c->book.held)
                         ? INT64_MAX
                         : sluice__leases_retry_after(&c->book, t, N, permits));
        sluice__spin_unlock(&c->sl);
        return false;
    }
    const uint64_t N = nlim(c);
    uint64_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
    for (unsigned k = 0;; k++) {
        if (n & FROZEN) {
            sluice__backoff(k);
            n = atomic_load_explicit(&c->count, memory_order_relaxed);
            continue;
        }
        uint64_t held = n & CMASK;
        if (atomic_load_explicit(&c->nwait, memory_order_acquire) != 0 || permits > room(N, held)) {
            sluice__deny(res, room(N, held), permits > N ? -1 : INT64_MAX);
            return false;
        }
        if (atomic_compare_exchange_weak_explicit(&c->count, &n, n | FROZEN, memory_order_acq_rel,
                                                  memory_order_relaxed)) {
            *snap = n;
            sluice__allow(res, room(N, held) - permits, 0);
            return true;
        }
    }
}

void sluice__conc_unhold(sluice_concurrency *c, uint64_t snap, bool commit, uint64_t permits,
                         sluice_permit *pm)
{
    if (leased(c)) {
        if (commit && permits) {
            uint32_t gen, slot = sluice__leases_take(&c->book, snap, permits, c->cp.lease_ns, &gen);
            fill(pm, c, permits, slot, gen);
        }
        sluice__spin_unlock(&c->sl);
        return;
    }
    if (commit && permits) fill(pm, c, permits, UINT32_MAX, EPOCH(snap));
    atomic_store_explicit(&c->count, commit ? snap + permits : snap, memory_order_seq_cst);
    /* a release waiting on the frozen word sees waiters itself; none to serve here */
}

/* ---- queued acquires, called back from a timing wheel ------------------- */

static void alink(sluice_concurrency *c, anode *an)
{
    an->prev = NULL;
    an->next = c->ahead;
    if (c->ahead) c->ahead->prev = an;
    c->ahead = an;
    atomic_fetch_add(&c->napend, 1);
}

static void aunlink(sluice_concurrency *c, anode *an)
{
    if (an->prev) an->prev->next = an->next;
    else c->ahead = an->next;
    if (an->next) an->next->prev = an->prev;
    atomic_fetch_sub(&c->napend, 1);
}

/* Take a waiter out of the queue (it is in it).  Under mu. */
static void dequeue(sluice_concurrency *c, waiter *w)
{
    waiter **pp = &c->qhead, *prev = NULL;
    while (*pp != w) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    *pp = w->next;
    if (c->qtail == w) c->qtail = prev;
    atomic_fetch_sub(&c->nwait, 1);
}

static void on_fire(void *arg, sluice_timer_id id, uint64_t now)
{
    (void)id;
    anode *an = arg;
    sluice_concurrency *c = an->w.pm->owner; /* set at the request */
    pthread_mutex_lock(&c->mu);
    an->timer = 0;
    int status = 0;
    if (!an->w.granted) {
        if (leased(c)) { /* a lease ended, perhaps: serve the queue */
            sluice__spin_lock(&c->sl);
            grant(c, sluice__leases_expire(&c->book, now));
            sluice__spin_unlock(&c->sl);
        }
        if (!an->w.granted) {
            if (now < an->deadline) { /* the head's lease wake came first */
                uint64_t at = an->deadline;
                if (leased(c) && c->qhead == &an->w) {
                    sluice__spin_lock(&c->sl);
                    at = head_wake(c, at);
                    sluice__spin_unlock(&c->sl);
                }
                /* its own node was just freed by the firing: no full wheel */
                if (sluice_wheel_schedule(an->wh, at, on_fire, an, &an->timer) != 0)
                    sluice_wheel_schedule(an->wh, now, on_fire, an, &an->timer);
                pthread_mutex_unlock(&c->mu);
                return;
            }
            bool head = c->qhead == &an->w;
            dequeue(c, &an->w);
            regrant(c, head); /* those behind may fit now */
            status = SLUICE_ETIMEDOUT;
        }
    }
    aunlink(c, an);
    pthread_mutex_unlock(&c->mu);
    an->fn(an->arg, an->id, status, status == 0 ? &an->pm : NULL, now);
    sluice__free(an);
}

/* A queued acquire with the id `given`, or (0) the limit's next. */
static int async_at(sluice_concurrency *c, sluice_wheel *wh, uint64_t permits, uint64_t now_ns,
                    uint64_t deadline_ns, sluice_permit_fn fn, void *arg, uint64_t given,
                    uint64_t *id)
{
    if (!c || !wh || !fn || permits == 0) return SLUICE_EINVAL;
    if (permits > nlim(c)) return SLUICE_ERANGE;
    anode *an = sluice__calloc(1, sizeof *an);
    if (!an) return SLUICE_ENOMEM;
    an->wh = wh;
    an->fn = fn;
    an->arg = arg;
    an->deadline = deadline_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : deadline_ns;
    an->w.permits = permits;
    an->w.pm = &an->pm;
    an->w.an = an;
    an->pm.owner = c; /* on_fire finds the limit here; permits stays 0 until granted */
    pthread_mutex_lock(&c->mu);
    atomic_fetch_add(&c->nwait, 1); /* before the try: see the head comment */
    uint64_t at = an->deadline;
    if (c->qhead == NULL) {
        if (leased(c)) {
            sluice__spin_lock(&c->sl);
            uint64_t t = sluice__leases_expire(&c->book, now_ns);
            if (permits <= room(nlim(c), c->book.held)) {
                uint32_t gen, slot = sluice__leases_take(&c->book, t, permits, c->cp.lease_ns, &gen);
                fill(&an->pm, c, permits, slot, gen);
                an->w.granted = true;
            } else {
                at = head_wake(c, at);
            }
            sluice__spin_unlock(&c->sl);
        } else {
            uint64_t was;
            uint32_t ep;
            if (count_take(c, nlim(c), permits, &was, &ep)) {
                fill(&an->pm, c, permits, UINT32_MAX, ep);
                an->w.granted = true;
            }
        }
    }
    if (an->w.granted) {
        atomic_fetch_sub(&c->nwait, 1);
        at = 0; /* called back at the next advance */
    }
    int rc = sluice_wheel_schedule(wh, at, on_fire, an, &an->timer);
    if (rc != 0) {
        if (!an->w.granted) {
            atomic_fetch_sub(&c->nwait, 1);
            regrant(c, false);
        }
        pthread_mutex_unlock(&c->mu);
        if (an->w.granted) sluice_permit_release_at(&an->pm, now_ns);
        sluice__free(an);
        return rc;
    }
    if (!an->w.granted) {
        if (c->qtail) c->qtail->next = &an->w;
        else c->qhead = &an->w;
        c->qtail = &an->w;
    }
    an->id = given ? given : ++c->next_id;
    alink(c, an);
    if (id) *id = an->id;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int sluice_acquire_permit_async_at(sluice_concurrency *c, sluice_wheel *wh, uint64_t permits,
                                   uint64_t now_ns, uint64_t deadline_ns, sluice_permit_fn fn,
                                   void *arg, uint64_t *id)
{
    return async_at(c, wh, permits, now_ns, deadline_ns, fn, arg, 0, id);
}

int sluice__conc_async_id_at(sluice_concurrency *c, sluice_wheel *wh, uint64_t permits,
                             uint64_t now_ns, uint64_t deadline_ns, sluice_permit_fn fn,
                             void *arg, uint64_t id)
{
    return async_at(c, wh, permits, now_ns, deadline_ns, fn, arg, id, NULL);
}

int sluice_permit_async_cancel_at(sluice_concurrency *c, uint64_t id, uint64_t now_ns)
{
    if (!c) return SLUICE_EINVAL;
    pthread_mutex_lock(&c->mu);
    anode *an = c->ahead;
    while (an && an->id != id) an = an->next;
    if (!an) {
        pthread_mutex_unlock(&c->mu);
        return SLUICE_ENOENT;
    }
    /* timer 0: its callback has the node; ENOENT: it fired and the
     * callback waits for mu */
    if (an->timer == 0 || sluice_wheel_cancel(an->wh, an->timer) != 0) {
        pthread_mutex_unlock(&c->mu);
        return SLUICE_EBUSY;
    }
    aunlink(c, an);
    bool granted = an->w.granted;
    if (!granted) {
        bool head = c->qhead == &an->w;
        dequeue(c, &an->w);
        regrant(c, head);
    }
    pthread_mutex_unlock(&c->mu);
    if (granted) sluice_permit_release_at(&an->pm, now_ns); /* taken, never given: back */
    sluice__free(an);
    return 0;
}
