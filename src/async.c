/* async.c -- acquiring without blocking a thread: a callback when the
 * permits are granted, driven by a timing wheel (wheel.c).
 *
 * Each request is a node in its limiter's FIFO queue (bounded: past the
 * bound a request is refused at once with SLUICE_EFULL) and one timer in
 * the caller's wheel.
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
 * The queue's lock is never held while a callback runs, and the wheel calls
 * back with none of its locks held, so callbacks may make and cancel
 * requests freely.
 */
#include "internal.h"

#include <string.h>

struct sluice__areq {
    struct sluice__areq *next, *prev;
    sluice_limiter *lim;
    sluice_wheel *w;
    sluice_grant_fn fn;
    void *arg;
    uint64_t permits, id;
    sluice_timer_id timer;
    sluice_reservation rv; /* buckets */
    bool granted;          /* the permits are taken; the callback is due */
};
typedef struct sluice__areq areq;

#define QUEUE_DEFAULT_MAX 4096u
#define PARKED UINT64_MAX

int sluice__aqueue_init(sluice__aqueue *q)
{
    memset(q, 0, sizeof *q);
    q->max = QUEUE_DEFAULT_MAX;
    return pthread_mutex_init(&q->mu, NULL) == 0 ? 0 : SLUICE_ENOMEM;
}

void sluice__aqueue_fini(sluice__aqueue *q)
{
    for (areq *r = q->head, *n; r; r = n) { /* requests never fired: drop */
        n = r->next;
        sluice_wheel_cancel(r->w, r->timer);
        sluice__free(r);
    }
    pthread_mutex_destroy(&q->mu);
}

static void unlink_req(sluice__aqueue *q, areq *r)
{
    if (r->prev) r->prev->next = r->next;
    else q->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else q->tail = r->prev;
    q->len--;
}

/* The windows: the new head asks at the next advance. */
static void promote(sluice__aqueue *q, uint64_t now)
{
    areq *h = q->head;
    if (h && !sluice__limiter_is_bucket(h->lim) && !h->granted)
        sluice_wheel_reschedule(h->w, h->timer, now);
}

static void on_fire(void *arg, sluice_timer_id id, uint64_t now)
{
    (void)id;
    areq *r = arg;
    sluice__aqueue *q = sluice__limiter_aqueue(r->lim);
    pthread_mutex_lock(&q->mu);
    if (!r->granted) { /* a window's head asks */
        sluice_result res;
        if (!sluice_try_acquire_at(r->lim, r->permits, now, &res)) {
            uint64_t at = now + (res.retry_after_ns > 0 ? (uint64_t)res.retry_after_ns : 1);
            /* its own node was just freed by the firing, so this cannot
             * meet a full wheel; if memory fails, ask again next advance */
            if (sluice_wheel_schedule(r->w, at, on_fire, r, &r->timer) != 0)
                sluice_wheel_schedule(r->w, now, on_fire, r, &r->timer);
            pthread_mutex_unlock(&q->mu);
            return;
        }
        r->granted = true;
    }
    unlink_req(q, r);
    promote(q, now);
    pthread_mutex_unlock(&q->mu);
    r->fn(r->arg, r->id, now);
    sluice__free(r);
}

int sluice_acquire_async_at(sluice_limiter *lim, sluice_wheel *w, uint64_t permits,
                            uint64_t now_ns, sluice_grant_fn fn, void *arg, uint64_t *id)
{
    if (!lim || !w || !fn) return SLUICE_EINVAL;
    sluice__aqueue *q = sluice__limiter_aqueue(lim);
    pthread_mutex_lock(&q->mu);
    int rc = 0;
    if (q->len >= q->max) {
        rc = SLUICE_EFULL;
        goto out;
    }
    areq *r = sluice__calloc(1, sizeof *r);
    if (!r) {
        rc = SLUICE_ENOMEM;
        goto out;
    }
    r->lim = lim;
    r->w = w;
    r->fn = fn;
    r->arg = arg;
    r->permits = permits;
    uint64_t deadline;
    sluice_result res;
    if (sluice__limiter_is_bucket(lim)) {
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
    rc = sluice_wheel_schedule(w, deadline, on_fire, r, &r->timer);
    if (rc != 0) {
        if (sluice__limiter_is_bucket(lim)) sluice_reservation_cancel_at(&r->rv, now_ns);
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
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int sluice_acquire_async(sluice_limiter *lim, sluice_wheel *w, uint64_t permits,
                         sluice_grant_fn fn, void *arg, uint64_t *id)
{
    return sluice_acquire_async_at(lim, w, permits, sluice_now_ns(), fn, arg, id);
}

int sluice_async_cancel_at(sluice_limiter *lim, uint64_t id, uint64_t now_ns)
{
    if (!lim) return SLUICE_EINVAL;
    sluice__aqueue *q = sluice__limiter_aqueue(lim);
    pthread_mutex_lock(&q->mu);
    areq *r = q->head;
    while (r && r->id != id) r = r->next;
    int rc = SLUICE_ENOENT;
    if (r) {
        rc = sluice_wheel_cancel(r->w, r->timer);
        if (rc == SLUICE_ENOENT) rc = SLUICE_EBUSY; /* fired: its callback waits for us */
        if (rc == 0) {
            bool was_head = q->head == r;
            unlink_req(q, r);
            if (sluice__limiter_is_bucket(lim)) sluice_reservation_cancel_at(&r->rv, now_ns);
            if (was_head) promote(q, now_ns);
            sluice__free(r);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int sluice_async_cancel(sluice_limiter *lim, uint64_t id)
{
    return sluice_async_cancel_at(lim, id, sluice_now_ns());
}

int sluice_limiter_set_queue_max(sluice_limiter *lim, uint32_t max)
{
    if (!lim || max == 0) return SLUICE_EINVAL;
    sluice__aqueue *q = sluice__limiter_aqueue(lim);
    pthread_mutex_lock(&q->mu);
    q->max = max;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

size_t sluice_limiter_queued(sluice_limiter *lim)
{
    sluice__aqueue *q = sluice__limiter_aqueue(lim);
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}
