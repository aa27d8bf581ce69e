/* async.c -- acquiring without blocking a thread: a queue (sluice_queue)
 * bound to one limiter and one timing wheel (wheel.c) calls back when the
 * permits are granted.
 *
 * Each request is a node in the queue's FIFO list (bounded: past the bound
 * a request is refused at once with SLUICE_EFULL) and one timer in the
 * wheel.  The limiter knows nothing of queues: a queue only asks it for
 * decisions, reservations and give-backs, as any caller would.
 *
 *   token-bucket, leaky-bucket   the permits are booked when the request is
 *       made (sluice_reserve_at: the bucket may go into debt), and the timer
 *       is set for the time they are there -- for the shaper, its wait_ns,
 *       so the shaper releases its requests at the constant rate through
 *       the wheel, each within a tick of its contract time.  Bookings are in
 *       call order and the wheel fires equal deadlines in schedule order, so
 *       grants are FIFO.  Cancelling gives the permits back (exactly, as
 *       sluice_reservation_cancel_at).
 *   the windows    they cannot book the future, so only the queue's head
 *       asks: at once if the queue was empty, then at each refusal's
 *       retry_after_ns; the others wait parked.  When the head is granted,
 *       the next becomes head and asks at the next advance.  A request that
 *       could pass now still waits behind earlier ones (FIFO).
 *
 * Lifetimes: any order of freeing the queue, its limiter and its wheel is
 * safe.
 *   - The queue holds a reference on the limiter (sluice__limiter_retain):
 *     a limiter freed first stays in memory, still deciding for the queue,
 *     until the queue lets it go.
 *   - The queue is bound to the wheel (wheel.h): a wheel freed first tells
 *     the queue, which drops its requests (their timers go with the wheel;
 *     no callback runs) and refuses new ones with SLUICE_ECANCELED; it never
 *     touches the wheel again.
 *   - A queue freed first cancels its timers, waits for any of its
 *     callbacks running on another thread (the wheel's own, say) to return,
 *     unbinds from the wheel and drops its reference on the limiter.  To
 *     make that wait possible, a firing timer whose queue is closing leaves
 *     its request to sluice_queue_free() (which sees SLUICE_EBUSY from the
 *     wheel until the callback has returned), and a grant's callback, run
 *     outside the lock, is counted in `inflight`.
 *
 * Waits: each request keeps its now_ns; when its callback is due, the wait
 * (the wheel's time minus that, 0 if earlier) goes into the queue's
 * histogram (sluice_wait_stats), as do cancellations, refusals and drops:
 * plain counters under the queue's lock, which those paths hold anyway.
 *
 * The queue's lock is never held while a user callback runs, and the wheel
 * calls back with none of its locks held, so callbacks may make and cancel
 * requests freely.  Lock order: the queue's, then the wheel's.
 *
 * Entry points: sluice_queue_new, _free, _acquire_at, _acquire, _cancel_at,
 * _cancel, _len, _wait_stats_get; the wheel's callbacks on_fire (grant in
 * order) and on_wheel_free (the wheel freed first).
 */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"
#include "base/counters.h"
#include "limiter/limiter.h"
#include "timer/wheel.h"

#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>

typedef struct areq areq;
struct areq {
    areq *next, *prev;
    sluice_queue *q;
    sluice_grant_fn fn;
    void *arg;
    uint64_t permits, id;
    uint64_t t0; /* the request's now_ns */
    sluice_timer_id timer;
    sluice_reservation rv; /* buckets */
    bool granted;          /* the permits are taken; the callback is due */
};

struct sluice_queue {
    pthread_mutex_t mu;
    pthread_cond_t idle;      /* inflight fell to 0 while closing */
    sluice_limiter *lim;      /* a reference of our own */
    sluice_wheel *w;          /* NULL once the wheel has been freed */
    sluice__wheel_binding bind;
    bool bucket;              /* lim books the future (reservations) */
    bool closing;             /* sluice_queue_free() has begun */
    areq *head, *tail;        /* FIFO */
    uint32_t len, max;
    uint32_t inflight;        /* grant callbacks running outside mu */
    uint64_t next_id;
    sluice_wait_stats waits;  /* under mu */
};

#define QUEUE_DEFAULT_MAX 4096u
#define PARKED UINT64_MAX

static void unlink_req(sluice_queue *q, areq *r)
{
    if (r->prev) r->prev->next = r->next;
    else q->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else q->tail = r->prev;
    q->len--;
}

/* The windows: the new head asks at the next advance. */
static void promote(sluice_queue *q, uint64_t now)
{
    areq *h = q->head;
    if (h && !q->bucket && !h->granted) sluice_wheel_reschedule(q->w, h->timer, now);
}

static void on_fire(void *arg, sluice_timer_id id, uint64_t now)
{
    (void)id;
    areq *r = arg;
    sluice_queue *q = r->q;
    pthread_mutex_lock(&q->mu);
    if (q->closing) { /* sluice_queue_free() owns r and waits for us */
        pthread_mutex_unlock(&q->mu);
        return;
    }
    if (!r->granted) { /* a window's head asks */
        sluice_result res;
        if (!sluice_try_acquire_at(q->lim, r->permits, now, &res)) {
            uint64_t at = now + (res.retry_after_ns > 0 ? (uint64_t)res.retry_after_ns : 1);
            /* its own node was just freed by the firing, so this cannot
             * meet a full wheel; if memory fails, ask again next advance */
            if (sluice_wheel_schedule(q->w, at, on_fire, r, &r->timer) != 0)
                sluice_wheel_schedule(q->w, now, on_fire, r, &r->timer);
            pthread_mutex_unlock(&q->mu);
            return;
        }
        r->granted = true;
    }
    unlink_req(q, r);
    promote(q, now);
    uint64_t wait = now > r->t0 ? now - r->t0 : 0;
    q->waits.buckets[sluice__wait_bucket(wait)]++;
    q->waits.count++;
    q->waits.sum_ns = wait > UINT64_MAX - q->waits.sum_ns ? UINT64_MAX : q->waits.sum_ns + wait;
    q->inflight++;
    pthread_mutex_unlock(&q->mu);
    r->fn(r->arg, r->id, now);
    sluice__free(r);
    pthread_mutex_lock(&q->mu);
    if (--q->inflight == 0 && q->closing) pthread_cond_broadcast(&q->idle);
    pthread_mutex_unlock(&q->mu);
}

/* The wheel is being freed (its thread has stopped, no call is in
 * progress): drop the requests, whose timers go with it, and let it go. */
static void on_wheel_free(sluice__wheel_binding *b)
{
    sluice_queue *q = (sluice_queue *)(void *)((char *)b - offsetof(sluice_queue, bind));
    pthread_mutex_lock(&q->mu);
    areq *r = q->head;
    q->waits.dropped += q->len;
    q->head = q->tail = NULL;
    q->len = 0;
    q->w = NULL;
    pthread_mutex_unlock(&q->mu);
    for (areq *n; r; r = n) {
        n = r->next;
        sluice__free(r);
    }
}

sluice_queue *sluice_queue_new(sluice_limiter *lim, sluice_wheel *w, uint32_t max,
                               char *err, size_t errlen)
{
    if (!lim || !w) {
        sluice__errf(err, errlen, "%s is NULL", !lim ? "the limiter" : "the wheel");
        return NULL;
    }
    sluice_queue *q = sluice__calloc(1, sizeof *q);
    if (!q) {
        sluice__errf(err, errlen, "out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        sluice__free(q);
        sluice__errf(err, errlen, "cannot create a mutex");
        return NULL;
    }
    if (pthread_cond_init(&q->idle, NULL) != 0) {
        pthread_mutex_destroy(&q->mu);
        sluice__free(q);
        sluice__errf(err, errlen, "cannot create a condition variable");
        return NULL;
    }
    q->max = max ? max : QUEUE_DEFAULT_MAX;
    q->lim = lim;
    q->bucket = sluice__limiter_is_bucket(lim);
    sluice__limiter_retain(lim);
    q->w = w;
    q->bind.on_free = on_wheel_free;
    sluice__wheel_bind(w, &q->bind);
    return q;
}

void sluice_queue_free(sluice_queue *q)
{
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->closing = true;
    areq *r = q->head;
    q->head = q->tail = NULL;
    q->len = 0;
    sluice_wheel *w = q->w;
    pthread_mutex_unlock(&q->mu);
    for (areq *n; r; r = n) {
        n = r->next;
        /* EBUSY: its timer fired and on_fire is about to see `closing` and
         * return; the id is stale (ENOENT) once it has */
        while (sluice_wheel_cancel(w, r->timer) == SLUICE_EBUSY) sched_yield();
        sluice__free(r);
    }
    pthread_mutex_lock(&q->mu);
    while (q->inflight > 0) pthread_cond_wait(&q->idle, &q->mu);
    pthread_mutex_unlock(&q->mu);
    if (w) sluice__wheel_unbind(w, &q->bind);
    sluice_limiter_free(q->lim); /* our reference */
    pthread_cond_destroy(&q->idle);
    pthread_mutex_destroy(&q->mu);
    sluice__free(q);
}

int sluice_queue_acquire_at(sluice_queue *q, uint64_t permits, uint64_t now_ns,
                            sluice_grant_fn fn, void *arg, uint64_t *id)
{
    if (!q || !fn) return SLUICE_EINVAL;
    pthread_mutex_lock(&q->mu);
    sluice_limiter *lim = q->lim;
    int rc = 0;
    if (!q->w || q->closing) {
        rc = SLUICE_ECANCELED;
        goto out;
    }
    if (q->len >= q->max) {
        rc = SLUICE_EFULL;
        goto out;
    }
    areq *r = sluice__calloc(1, sizeof *r);
    if (!r) {
        rc = SLUICE_ENOMEM;
        goto out;
    }
    r->q = q;
    r->fn = fn;
    r->arg = arg;
    r->permits = permits;
    r->t0 = now_ns;
    uint64_t deadline;
    sluice_result res;
    if (q->bucket) {
        if (!sluice_reserve_at(lim, permits, now_ns, (uint64_t)INT64_MAX, &r->rv, &res)) {
            sluice__free(r);
            rc = SLUICE_ERANGE; /* more than the bucket holds, or a wait past 2^63 ns */
            goto out;
        }
        deadline = r->rv.at_ns;
        r->granted = true;
    } else if (q->head) {
        deadline = PARKED; /* behind the queue */
        if (permits > sluice__limiter_capacity(lim)) {
            sluice__free(r);
            rc = SLUICE_ERANGE;
            goto out;
        }
    } else if (sluice_try_acquire_at(lim, permits, now_ns, &res)) {
        deadline = now_ns;
        r->granted = true;
    } else if (res.retry_after_ns < 0) {
        sluice__free(r);
        rc = SLUICE_ERANGE;
        goto out;
    } else {
        deadline = now_ns + (uint64_t)res.retry_after_ns;
    }
    rc = sluice_wheel_schedule(q->w, deadline, on_fire, r, &r->timer);
    if (rc != 0) {
        if (q->bucket) sluice_reservation_cancel_at(&r->rv, now_ns);
        sluice__free(r);
        goto out;
    }
    r->id = ++q->next_id;
    r->prev = q->tail;
    if (q->tail) q->tail->next = r;
    else q->head = r;
    q->tail = r;
    q->len++;
    if (id) *id = r->id;
out:
    if (rc != 0) q->waits.failed++;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int sluice_queue_acquire(sluice_queue *q, uint64_t permits, sluice_grant_fn fn, void *arg,
                         uint64_t *id)
{
    return sluice_queue_acquire_at(q, permits, sluice_now_ns(), fn, arg, id);
}

int sluice_queue_cancel_at(sluice_queue *q, uint64_t id, uint64_t now_ns)
{
    if (!q) return SLUICE_EINVAL;
    pthread_mutex_lock(&q->mu);
    areq *r = q->head;
    while (r && r->id != id) r = r->next;
    int rc = SLUICE_ENOENT;
    if (r) {
        rc = sluice_wheel_cancel(q->w, r->timer);
        if (rc == SLUICE_ENOENT) rc = SLUICE_EBUSY; /* fired: its callback waits for us */
        if (rc == 0) {
            bool was_head = q->head == r;
            unlink_req(q, r);
            if (q->bucket) sluice_reservation_cancel_at(&r->rv, now_ns);
            if (was_head) promote(q, now_ns);
            sluice__free(r);
            q->waits.cancelled++;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int sluice_queue_cancel(sluice_queue *q, uint64_t id)
{
    return sluice_queue_cancel_at(q, id, sluice_now_ns());
}

size_t sluice_queue_len(sluice_queue *q)
{
    if (!q) return 0;
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void sluice_queue_wait_stats_get(sluice_queue *q, sluice_wait_stats *out)
{
    if (!q) {
        memset(out, 0, sizeof *out);
        return;
    }
    pthread_mutex_lock(&q->mu);
    *out = q->waits;
    pthread_mutex_unlock(&q->mu);
}
