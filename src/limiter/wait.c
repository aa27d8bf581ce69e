/* wait.c -- blocking acquires and cancellers (limiter.c has the limiter's
 * design).
 *
 * Map:  cancellers (sluice_canceller_new/_free/_cancel/_cancelled);
 *       sleep_until; acquire (one decision, then sleeps until the hint or a
 *       reservation's time); sluice_acquire, sluice_acquire_cancellable;
 *       stats (sluice_limiter_stats_get, sluice_limiter_wait_stats_get).
 *
 * A blocking acquire sleeps on the limiter's clock, never spins: for a
 * bucket it reserves and sleeps until the reservation's time (cancelled
 * and given back on a timeout or a cancel); for a window, it sleeps until
 * the refusal's retry hint and decides again.  The wait histogram is
 * striped per thread, as the counters are (counters.c): each acquire
 * records, once it returns, its wait from the call to the grant on the
 * limiter's clock, or how it failed.
 */
#include "limiter/lim.h"

/* ---- waiting ------------------------------------------------------------ */

struct sluice_canceller {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool cancelled;
};

sluice_canceller *sluice_canceller_new(void)
{
    sluice_canceller *c = sluice__calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) goto fail;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) goto fail;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        pthread_cond_destroy(&c->cv);
        goto fail;
    }
    return c;
fail:
    sluice__free(c);
    return NULL;
}

void sluice_canceller_free(sluice_canceller *c)
{
    if (!c) return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    sluice__free(c);
}

void sluice_canceller_cancel(sluice_canceller *c)
{
    pthread_mutex_lock(&c->mu);
    c->cancelled = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

bool sluice_canceller_cancelled(sluice_canceller *c)
{
    pthread_mutex_lock(&c->mu);
    bool v = c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return v;
}

/* Sleep until CLOCK_MONOTONIC reaches `until`; false if c was cancelled
 * first.  `now` and `until` are on the limiter's clock, which may be the
 * coarse one: the same axis. */
static bool sleep_until(uint64_t until, sluice_canceller *c)
{
    if (!c) {
        for (;;) {
            uint64_t now = sluice_now_ns();
            if (now >= until) return true;
            uint64_t ns = until - now;
            struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
            nanosleep(&ts, NULL); /* EINTR: loop and sleep what is left */
        }
    }
    struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
    pthread_mutex_lock(&c->mu);
    while (!c->cancelled && sluice_now_ns() < until)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) break;
    bool ok = !c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* The blocking acquire from `start` on clock `clk`; on success *granted
 * is the time of the grant: a bucket's booked time, or the later time its
 * sleep ended; a window's admitting decision. */
static int acquire(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns, sluice_canceller *c,
                   sluice__clock clk, uint64_t start, uint64_t *granted)
{
    uint64_t deadline = start + timeout_ns < start ? UINT64_MAX : start + timeout_ns;
    for (;;) {
        if (c && sluice_canceller_cancelled(c)) return SLUICE_ECANCELED;
        uint64_t now = sluice__clock_now(clk);
        uint64_t left = now < deadline ? deadline - now : 0;
        if (is_bucket(lim)) {
            /* x/time/rate's Wait: book the permits now, with a wait that
             * fits the time left, or take nothing and return at once */
            sluice_reservation rv;
            sluice_result r;
            if (!sluice_reserve_at(lim, permits, now, left, &rv, &r)) return SLUICE_ETIMEDOUT;
            if (rv.wait_ns == 0) {
                *granted = now;
                return 0;
            }
            if (sleep_until(rv.at_ns, c)) {
                uint64_t end = sluice__clock_now(clk); /* a coarse clock may lag */
                *granted = end > rv.at_ns ? end : rv.at_ns;
                return 0;
            }
            sluice_reservation_cancel_at(&rv, sluice__clock_now(clk));
            return SLUICE_ECANCELED;
        }
        sluice_result r;
        if (sluice__lim_decide(lim, permits, now, left, &r)) {
            *granted = now;
            return 0;
        }
        if (r.error) return r.error; /* sliding-log, sliding-wheel: no memory */
        /* -1: never; or more than the time left */
        if (r.retry_after_ns < 0 || (uint64_t)r.retry_after_ns > left) return SLUICE_ETIMEDOUT;
        if (!sleep_until(now + (uint64_t)r.retry_after_ns, c)) return SLUICE_ECANCELED;
    }
}

int sluice_acquire_cancellable(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns,
                               sluice_canceller *c)
{
    const sluice__clock clk = cur_cfg(lim)->pf.clock;
    uint64_t start = sluice__clock_now(clk), granted = start;
    int rc = acquire(lim, permits, timeout_ns, c, clk, start, &granted);
    sluice__waits_count(&lim->waits, rc, granted > start ? granted - start : 0);
    return rc;
}

bool sluice_acquire(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns)
{
    return sluice_acquire_cancellable(lim, permits, timeout_ns, NULL) == 0;
}

void sluice_limiter_stats_get(const sluice_limiter *lim, sluice_stats *out)
{
    sluice__counters_read(&lim->counters, out);
}

void sluice_limiter_wait_stats_get(const sluice_limiter *lim, sluice_wait_stats *out)
{
    sluice__waits_read(&lim->waits, out);
}

int sluice_limiter_spec_format(const sluice_limiter *lim, char *buf, size_t buflen)
{
    return sluice__spec_format(&cur_cfg(lim)->pf, buf, buflen);
}

int sluice_spec_check(const char *spec, char *canon, size_t canonlen, char *err,
                      size_t errlen)
{
    sluice__profile pf;
    int rc = sluice__spec_parse(spec, &pf, err, errlen);
    if (rc != 0) return rc;
    if (canon) {
        rc = sluice__spec_format(&pf, canon, canonlen);
        if (rc < 0) return rc;
    }
    return 0;
}
