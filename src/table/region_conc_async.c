/* region_conc_async.c -- queued acquires on a shared concurrency region,
 * called back from a timing wheel (sluice_concurrency_region_acquire_async_at,
 * sluice_concurrency_region_async_cancel_at; sluice/concurrency.h).
 *
 * Map: the node (rqnode) and the handle's queue (rq_lock, rq_link,
 * rq_first); serving a key (rq_serve); the timer's callback (rq_fire);
 * the request and its cancel; what region_conc.c calls (a release through
 * the handle, the handle's free).
 *
 * A queued request (sluice_concurrency_region_acquire_async_at) is a node
 * of the handle's queue, in this process, with one timer on its wheel; no
 * thread blocks.  In the region it is one of its key's waiters (counted in
 * the key's wait line, as a blocked acquirer is), so that a release in any
 * process moves the key's futex word (sluice__cr_wake_freed); it never
 * sleeps on the
 * word.  The handle's queue is in arrival order; of a key's requests in it,
 * the first not yet granted is the key's head: only the head re-checks the
 * key on a timer, at the blocked sweeper's cadence -- 1 ms after it became
 * head, then naps that double (to SLUICE_CONC_REGION_SWEEPER_NAP_NS) while
 * it finds no room, no freed permit and an unmoved word, and at the key's
 * earliest lease end -- sweeping as the sweeper does
 * (sluice__cr_expire_sweep: the same sweep, gated by the key's
 * sweep_next); the others' timers are their deadlines.  A re-check, a
 * release through the handle, a time-out or a cancel serves the key's
 * requests from the head in order (rq_serve): each that fits takes its
 * permits under the shard's lock, leaves the line, and has its timer moved
 * to 0, so that the wheel's next advance calls it back (in grant order: the
 * wheel fires equal deadlines in schedule order); the first that does not
 * fit stops the round, and becomes the head.
 *
 * Lock order: the handle's qmu, then a shard's lock; the wheel's calls
 * under qmu only (the wheel holds no lock while a callback runs, and a
 * callback takes qmu).  Callbacks run outside qmu, counted in `inflight`.
 * Freeing the handle (sluice__cr_queue_drop) cancels every timer it can; a request
 * whose timer has fired already is the callback's to drop (it sees
 * `closing`), and free waits for those and for running callbacks, then
 * unbinds from the wheels.  The handle binds itself to each wheel it
 * queues on (timer/wheel.h): a wheel freed first drops the requests queued
 * on it, without calling back (rq_wheel_gone), so either order is safe.
 *
 * A process that dies with requests queued: they sleep on no word, so no
 * wake is lost on them, and the region's non-blocking acquires never defer
 * to waiters, so they block nobody; their count in the key's line stays
 * until the slot goes to another key (an upper bound, as a killed blocked
 * waiter's).  A forked child's copy of the handle starts with an empty
 * queue (rq_lock), and its free leaves the parent's requests alone. */
#define _GNU_SOURCE
#include "table/region_conc.h"
#include "base/clock.h"
#include "timer/wheel.h"

#include <stddef.h>
#include <string.h>
#include <unistd.h>

#define RQ_GAP_NS ((uint64_t)SLUICE_CONC_REGION_SWEEP_GAP_NS)
#define RQ_NAP_NS ((uint64_t)SLUICE_CONC_REGION_SWEEPER_NAP_NS)

typedef struct rqnode {
    struct rqnode *next, *prev; /* the handle's queue, in arrival order */
    sluice_concurrency_region *r;
    sluice_wheel *wh;
    sluice_region_permit_fn fn;
    void *arg;
    uint64_t id, permits, deadline;
    uint64_t gap;          /* as head: the next nap */
    uint64_t lease_end;    /* as head: the key's earliest lease end at its last look */
    sluice_timer_id timer; /* 0 once fired: its callback is due or running */
    uint32_t k, home;      /* its key's shard and home slot */
    uint32_t line;         /* the slot whose wait line counts it, or NONE */
    uint32_t seen;         /* as head: the key's word at its last look */
    pid_t pid;             /* the process that queued it */
    bool granted, head;
    bool done; /* its callback is due: no longer in the key's line */
    bool just; /* granted by the running rq_serve */
    unsigned char dig[SLUICE__DIGEST_BYTES];
    sluice_region_permit pm; /* filled when granted */
} rqnode;

/* The handle's binding to one wheel it queued on (timer/wheel.h): the
 * wheel's free drops the requests on it (rq_wheel_gone). */
typedef struct rqbind {
    sluice__wheel_binding b;
    struct rqbind *next; /* the handle's, under qmu */
    sluice_concurrency_region *r;
    sluice_wheel *wh;
    pid_t pid; /* the process that bound it */
} rqbind;

static uint64_t rq_min(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* The queue is the process's: a child forked after requests queued starts
 * with none (the parent's stay the parent's; its copy of the mutex, held
 * or not at the fork, is made afresh). */
static void rq_lock(sluice_concurrency_region *r)
{
    const pid_t me = getpid();
    if (r->qpid != me) {
        (void)pthread_mutex_init(&r->qmu, NULL);
        (void)pthread_cond_init(&r->qcv, NULL);
        r->qhead = r->qtail = NULL;
        r->binds = NULL; /* the parent's (rq_wheel_gone ignores them here) */
        r->inflight = 0;
        r->closing = false;
        atomic_store_explicit(&r->nqueued, 0, memory_order_relaxed);
        r->qpid = me;
    }
    pthread_mutex_lock(&r->qmu);
}

static void rq_link(sluice_concurrency_region *r, rqnode *n)
{
    n->next = NULL;
    n->prev = r->qtail;
    if (r->qtail) r->qtail->next = n;
    else r->qhead = n;
    r->qtail = n;
}

static void rq_unlink(sluice_concurrency_region *r, rqnode *n)
{
    if (n->prev) n->prev->next = n->next;
    else r->qhead = n->next;
    if (n->next) n->next->prev = n->prev;
    else r->qtail = n->prev;
    n->next = n->prev = NULL;
}

/* The key's head: its first request not yet granted.  Under qmu. */
static rqnode *rq_first(const sluice_concurrency_region *r, const unsigned char *dig)
{
    for (rqnode *n = r->qhead; n; n = n->next)
        if (!n->granted && !n->done && memcmp(n->dig, dig, SLUICE__DIGEST_BYTES) == 0) return n;
    return NULL;
}

/* When a waiting request's timer should fire: as head, at its next look. */
static uint64_t rq_when(const rqnode *n, uint64_t now)
{
    if (!n->head) return n->deadline;
    const uint64_t at = rq_min(n->deadline, sluice__sat_add(now, n->gap));
    return n->lease_end > now ? rq_min(at, n->lease_end) : at;
}

/* Leave the wait line that counts n.  Shard n->k locked. */
static void rq_line_leave(sluice_concurrency_region *r, rqnode *n)
{
    if (n->line != NONE) sluice__cr_wait_leave(r, n->k, n->line, n->dig);
    n->line = NONE;
}

/* Serve the key's requests from its head at `now`, in order, each that
 * fits taking its permits (the head's look sweeps as a blocked sweeper's).
 * *fresh (may be NULL): whether the head's look found room, freed permits
 * or the word moved since its last.  Under qmu; takes the shard's lock. */
static void rq_serve(sluice_concurrency_region *r, const unsigned char *dig, uint32_t k,
                     uint32_t home, uint64_t now, bool *fresh)
{
    if (fresh) *fresh = false;
    rqnode *first = rq_first(r, dig);
    if (!first || r->closing) return;
    const uint64_t N = r->L.cp.limit;
    sluice__cr_lock(r, k);
    const uint32_t i = sluice__cr_find(r, k, home, dig, true, now);
    if (i == NONE) { /* the key has no slot and no room for one: the head's next look */
        sluice__cr_unlock(r, k);
        if (!first->head) {
            first->head = true;
            first->gap = RQ_GAP_NS;
            if (first->timer)
                (void)sluice_wheel_reschedule(first->wh, first->timer, rq_when(first, now));
        }
        return;
    }
    cslot *s = cslot_at(r, k, i);
    cwait *w = wait_of(r, s);
    const uint64_t t = sluice__cr_key_time(s, now);
    const bool moved = atomic_load_explicit(&w->seq, memory_order_relaxed) != first->seen;
    const bool freed = sluice__cr_expire_sweep(r, s, t, first->permits);
    bool took = false, stop = false;
    rqnode *head = NULL;
    for (rqnode *n = first; n; n = n->next) {
        if (n->granted || n->done || memcmp(n->dig, dig, SLUICE__DIGEST_BYTES) != 0) continue;
        /* a line reset since (the slot went to another key and back) no
         * longer counts it */
        if (n->line != NONE && n->line != i) rq_line_leave(r, n);
        uint32_t gen = 0, j = NONE;
        const uint64_t held = s->held > N ? N : s->held;
        if (!stop && n->permits <= N - held) j = sluice__cr_take(r, s, t, n->permits, &gen);
        if (j == NONE) { /* waits on: counted in the line, the first is the head */
            stop = true;
            if (n->line == NONE) {
                if (w->waiters < UINT32_MAX) w->waiters++;
                n->line = i;
            }
            if (!head) head = n;
            continue;
        }
        rq_line_leave(r, n);
        n->granted = n->just = true;
        n->head = false;
        n->pm = (sluice_region_permit){
            .permits = n->permits, .owner = r, .shard = k, .slot = i, .holder = j, .gen = gen};
        atomic_fetch_sub_explicit(&r->nqueued, 1, memory_order_relaxed);
        took = true;
    }
    /* what the sweep freed beyond what was taken goes to a blocked waiter */
    _Atomic uint32_t *wake = freed ? sluice__cr_wake_freed(r, s) : NULL;
    if (head) {
        head->seen = atomic_load_explicit(&w->seq, memory_order_relaxed);
        head->lease_end = s->next_exp; /* and at the earliest lease's end */
    }
    sluice__cr_unlock(r, k);
    if (wake) sluice__cr_futex_wake(wake, 1);
    if (fresh) *fresh = moved || freed || took;
    /* the granted are called back at the next advance; a new head looks
     * 1 ms from now */
    for (rqnode *n = first; n; n = n->next) {
        if (memcmp(n->dig, dig, SLUICE__DIGEST_BYTES) != 0) continue;
        if (n->just && n->timer) (void)sluice_wheel_reschedule(n->wh, n->timer, 0);
        n->just = false;
        if (n == head && !n->head) {
            n->head = true;
            n->gap = RQ_GAP_NS;
            if (n->timer) (void)sluice_wheel_reschedule(n->wh, n->timer, rq_when(n, now));
        }
    }
}

/* Drop a request that will not be called back: its permits released, or
 * its count in the line removed.  Not under qmu (a release serves the
 * queue). */
static void rq_discard(sluice_concurrency_region *r, rqnode *n, uint64_t now)
{
    if (n->granted) {
        (void)sluice_region_permit_release_at(&n->pm, now);
    } else {
        sluice__cr_lock(r, n->k);
        rq_line_leave(r, n);
        sluice__cr_unlock(r, n->k);
    }
}

/* The handle's binding to wh, made on its first request there (NULL: out
 * of memory).  Under qmu. */
static void rq_wheel_gone(sluice__wheel_binding *b);
static rqbind *rq_bind(sluice_concurrency_region *r, sluice_wheel *wh)
{
    for (rqbind *x = r->binds; x; x = x->next)
        if (x->wh == wh) return x;
    rqbind *x = sluice__calloc(1, sizeof *x);
    if (!x) return NULL;
    x->b.on_free = rq_wheel_gone;
    x->r = r;
    x->wh = wh;
    x->pid = getpid();
    sluice__wheel_bind(wh, &x->b);
    x->next = r->binds;
    r->binds = x;
    return x;
}

/* A wheel the handle queued on is being freed (its thread stopped, no
 * advance running, so none of its callbacks): its requests are dropped
 * without a callback -- permits taken released, counts in the line
 * removed -- and the handle lets the wheel go. */
static void rq_wheel_gone(sluice__wheel_binding *b)
{
    rqbind *x = (rqbind *)(void *)((char *)b - offsetof(rqbind, b));
    if (x->pid != getpid()) return; /* a forked child's copy: the parent's binding */
    sluice_concurrency_region *r = x->r;
    rq_lock(r);
    rqnode *drop = NULL;
    for (rqnode *n = r->qhead, *next; n; n = next) {
        next = n->next;
        if (n->wh != x->wh) continue;
        rq_unlink(r, n);
        if (!n->granted && !n->done)
            atomic_fetch_sub_explicit(&r->nqueued, 1, memory_order_relaxed);
        n->next = drop;
        drop = n;
    }
    for (rqbind **pp = &r->binds; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    pthread_mutex_unlock(&r->qmu);
    for (rqnode *n = drop, *next; n; n = next) {
        next = n->next;
        rq_discard(r, n, 0);
        sluice__free(n);
    }
    /* those of the keys behind the dropped, on other wheels, may fit now */
    rq_lock(r);
    for (rqnode *n = r->qhead; n; n = n->next)
        if (!n->granted && !n->done) rq_serve(r, n->dig, n->k, n->home, 0, NULL);
    pthread_mutex_unlock(&r->qmu);
    sluice__free(x);
}

static void rq_fire(void *arg, sluice_timer_id id, uint64_t now)
{
    (void)id;
    rqnode *n = arg;
    sluice_concurrency_region *r = n->r;
    if (n->pid != getpid()) { /* a forked child's copy of the wheel: the parent's request */
        sluice__free(n);
        return;
    }
    rq_lock(r);
    n->timer = 0;
    if (r->closing) { /* the handle is being freed: dropped, not called back */
        pthread_mutex_unlock(&r->qmu);
        rq_discard(r, n, 0);
        rq_lock(r);
        rq_unlink(r, n);
        pthread_cond_broadcast(&r->qcv);
        pthread_mutex_unlock(&r->qmu);
        sluice__free(n);
        return;
    }
    int status = 0;
    if (!n->granted) {
        bool fresh = false;
        rq_serve(r, n->dig, n->k, n->home, now, &fresh);
        if (!n->granted && now < n->deadline) { /* look again later */
            if (n->head) n->gap = fresh ? RQ_GAP_NS : rq_min(n->gap * 2, RQ_NAP_NS);
            /* its own node was just freed by the firing: no full wheel */
            if (sluice_wheel_schedule(n->wh, rq_when(n, now), rq_fire, n, &n->timer) != 0)
                (void)sluice_wheel_schedule(n->wh, now, rq_fire, n, &n->timer);
            pthread_mutex_unlock(&r->qmu);
            return;
        }
        if (!n->granted) { /* its deadline */
            sluice__cr_lock(r, n->k);
            rq_line_leave(r, n);
            sluice__cr_unlock(r, n->k);
            n->done = true;
            atomic_fetch_sub_explicit(&r->nqueued, 1, memory_order_relaxed);
            rq_serve(r, n->dig, n->k, n->home, now, NULL);
            status = SLUICE_ETIMEDOUT;
        }
    }
    n->done = true; /* in the queue while it runs: a cancel says SLUICE_EBUSY */
    r->inflight++;
    pthread_mutex_unlock(&r->qmu);
    n->fn(n->arg, n->id, status, status == 0 ? &n->pm : NULL, now);
    pthread_mutex_lock(&r->qmu);
    r->inflight--;
    rq_unlink(r, n);
    if (r->closing) pthread_cond_broadcast(&r->qcv);
    pthread_mutex_unlock(&r->qmu);
    sluice__free(n);
}

int sluice_concurrency_region_acquire_async_at(sluice_concurrency_region *r, sluice_wheel *wh,
                                               const void *key, size_t keylen, uint64_t permits,
                                               uint64_t now_ns, uint64_t deadline_ns,
                                               sluice_region_permit_fn fn, void *arg,
                                               uint64_t *id)
{
    if (!r || !wh || !fn || (!key && keylen) || permits == 0) return SLUICE_EINVAL;
    const uint64_t N = r->L.cp.limit;
    if (permits > N) return SLUICE_ERANGE;
    rqnode *n = sluice__calloc(1, sizeof *n);
    if (!n) return SLUICE_ENOMEM;
    n->r = r;
    n->wh = wh;
    n->fn = fn;
    n->arg = arg;
    n->permits = permits;
    n->deadline = deadline_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : deadline_ns;
    n->gap = RQ_GAP_NS;
    n->lease_end = UINT64_MAX;
    n->line = NONE;
    n->k = sluice__cr_place(r, key, keylen, n->dig, &n->home);
    n->pid = getpid();
    rq_lock(r);
    if (!rq_bind(r, wh)) { /* first, so that nothing is undone for it */
        pthread_mutex_unlock(&r->qmu);
        sluice__free(n);
        return SLUICE_ENOMEM;
    }
    const bool first = rq_first(r, n->dig) == NULL; /* else it queues behind them */
    sluice__cr_lock(r, n->k);
    const uint32_t i = sluice__cr_find(r, n->k, n->home, n->dig, true, now_ns);
    if (i == NONE) {
        sluice__cr_unlock(r, n->k);
        pthread_mutex_unlock(&r->qmu);
        sluice__free(n);
        return SLUICE_EFULL;
    }
    cslot *s = cslot_at(r, n->k, i);
    cwait *w = wait_of(r, s);
    const uint64_t t = sluice__cr_key_time(s, now_ns);
    bool freed = false;
    uint32_t gen = 0, j = NONE;
    if (first) {
        freed = sluice__cr_expire_sweep(r, s, t, permits);
        const uint64_t held = s->held > N ? N : s->held;
        if (permits <= N - held) j = sluice__cr_take(r, s, t, permits, &gen);
    }
    if (j != NONE) {
        n->granted = true;
        n->pm = (sluice_region_permit){
            .permits = permits, .owner = r, .shard = n->k, .slot = i, .holder = j, .gen = gen};
    } else {
        if (w->waiters < UINT32_MAX) w->waiters++;
        n->line = i;
        n->head = first;
        n->seen = atomic_load_explicit(&w->seq, memory_order_relaxed);
        n->lease_end = s->next_exp;
    }
    _Atomic uint32_t *wake = freed ? sluice__cr_wake_freed(r, s) : NULL;
    sluice__cr_unlock(r, n->k);
    if (wake) sluice__cr_futex_wake(wake, 1);
    const int rc =
        sluice_wheel_schedule(wh, n->granted ? 0 : rq_when(n, now_ns), rq_fire, n, &n->timer);
    if (rc != 0) { /* nothing queued, nothing taken */
        pthread_mutex_unlock(&r->qmu);
        rq_discard(r, n, now_ns);
        sluice__free(n);
        return rc;
    }
    rq_link(r, n);
    if (!n->granted) atomic_fetch_add_explicit(&r->nqueued, 1, memory_order_relaxed);
    n->id = ++r->next_id;
    if (id) *id = n->id;
    pthread_mutex_unlock(&r->qmu);
    return 0;
}

int sluice_concurrency_region_async_cancel_at(sluice_concurrency_region *r, uint64_t id,
                                              uint64_t now_ns)
{
    if (!r) return SLUICE_EINVAL;
    rq_lock(r);
    rqnode *n = r->qhead;
    while (n && n->id != id) n = n->next;
    if (!n || id == 0) {
        pthread_mutex_unlock(&r->qmu);
        return SLUICE_ENOENT;
    }
    /* timer 0: fired, its callback has the node (or waits for qmu) */
    if (n->timer == 0 || sluice_wheel_cancel(n->wh, n->timer) != 0) {
        pthread_mutex_unlock(&r->qmu);
        return SLUICE_EBUSY;
    }
    rq_unlink(r, n);
    if (!n->granted) {
        sluice__cr_lock(r, n->k);
        rq_line_leave(r, n);
        sluice__cr_unlock(r, n->k);
        atomic_fetch_sub_explicit(&r->nqueued, 1, memory_order_relaxed);
        rq_serve(r, n->dig, n->k, n->home, now_ns, NULL);
    }
    pthread_mutex_unlock(&r->qmu);
    if (n->granted) (void)sluice_region_permit_release_at(&n->pm, now_ns); /* taken, never given */
    sluice__free(n);
    return 0;
}

/* Whether requests wait in this process's queue of the handle (a read
 * without qmu: a request queued meanwhile looks at its first timer). */
bool sluice__cr_queue_mine(const sluice_concurrency_region *r)
{
    return atomic_load_explicit(&((sluice_concurrency_region *)r)->nqueued,
                                memory_order_relaxed) != 0 &&
           r->qpid == getpid();
}

/* A release through the handle of permits of key dig (shard k): its queued
 * requests first. */
void sluice__cr_queue_released(sluice_concurrency_region *r, const unsigned char *dig, uint32_t k,
                        uint64_t now)
{
    uint64_t b;
    memcpy(&b, dig + 8, sizeof b);
    rq_lock(r);
    rq_serve(r, dig, k, (uint32_t)(b % r->L.cap), now, NULL);
    pthread_mutex_unlock(&r->qmu);
}

/* sluice_concurrency_region_free: drop every request (see the section's
 * head), and wait for the callbacks that have them or run. */
void sluice__cr_queue_drop(sluice_concurrency_region *r)
{
    rq_lock(r);
    r->closing = true;
    rqnode *drop = NULL;
    for (rqnode *n = r->qhead, *next; n; n = next) {
        next = n->next;
        if (n->timer && sluice_wheel_cancel(n->wh, n->timer) == 0) {
            rq_unlink(r, n);
            n->next = drop;
            drop = n;
        }
    }
    while (r->qhead || r->inflight) pthread_cond_wait(&r->qcv, &r->qmu);
    rqbind *binds = r->binds;
    r->binds = NULL;
    pthread_mutex_unlock(&r->qmu);
    for (rqnode *n = drop, *next; n; n = next) {
        next = n->next;
        rq_discard(r, n, 0); /* 0: the key's own latest time */
        sluice__free(n);
    }
    for (rqbind *x = binds, *next; x; x = next) { /* the wheels hear no more of it */
        next = x->next;
        sluice__wheel_unbind(x->wh, &x->b);
        sluice__free(x);
    }
}
