/* ref_model.c -- the reference model of docs/decisions.md section 3 (see
 * ref_model.h for what it is and why it looks the way it does).
 *
 * State of every model:
 *  - `latest`: the latest time at which something was admitted; an earlier
 *    time is treated as `latest`.  Only an admission changes the model: a
 *    refusal or a probe is decided on the state as it is and leaves it,
 *    time included, untouched (docs/decisions.md, section 1).
 *  - the windows: the list of admitted events (time, permits), in order of
 *    admission.  Because times are clamped, the list is sorted by time, so
 *    "the permits admitted with lo <= t_i <= hi" is a difference of two
 *    running totals found by bisection.  With `literal` set it is instead a
 *    linear scan over an unpruned list, which the self-tests compare against.
 *  - the buckets: the level (tokens for 3.5, water for 3.6) times W, which is
 *    always an integer because every change is p (times W) or dt * L / W
 *    (times W); kept with the time it was last brought up to date.
 *
 * Pruning: before each admission at time t, events that no rule can count at
 * t or any later time are dropped (older than the current window, the
 * window's tail, the wheel's oldest slot, or the previous window).
 */
#include "ref_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

typedef struct ref_event {
    uint64_t t;       /* the (clamped) time it was admitted at */
    uint64_t permits; /* how many permits it was granted */
    u128 cum;         /* permits of this and every earlier event, since
                         the model was made */
} ref_event;

struct ref_model {
    ref_params p; /* capacity resolved: never 0 */
    bool seen;    /* any call yet? */
    uint64_t latest;

    /* windows */
    ref_event *ev;
    size_t head; /* first event still held */
    size_t n;    /* one past the last event */
    size_t cap;
    u128 base; /* `cum` of everything before ev[head] */

    /* buckets */
    bool started;    /* the first request has been seen */
    u128 level;      /* tokens * W (token bucket) or water * W (leaky) */
    u128 owed;       /* token bucket: tokens * W below zero (a settle's
                        overdraft); when not 0, level is 0 */
    uint64_t t_prev; /* time `level` is valid at */
};

static void ref_die(const char *what)
{
    fprintf(stderr, "ref_model: %s\n", what);
    abort();
}

const char *ref_alg_name(ref_alg alg)
{
    switch (alg) {
    case REF_FIXED_WINDOW: return "fixed-window";
    case REF_SLIDING_LOG: return "sliding-log";
    case REF_SLIDING_WHEEL: return "sliding-wheel";
    case REF_SLIDING_APPROX: return "sliding-approx";
    case REF_TOKEN_BUCKET: return "token-bucket";
    case REF_LEAKY_BUCKET: return "leaky-bucket";
    }
    return "?";
}

static bool is_bucket(const ref_model *m)
{
    return m->p.alg == REF_TOKEN_BUCKET || m->p.alg == REF_LEAKY_BUCKET;
}

ref_model *ref_model_new(const ref_params *params)
{
    if (params == NULL || params->limit == 0 || params->period_ns == 0)
        return NULL;
    if (params->alg == REF_SLIDING_WHEEL &&
        (params->slots == 0 || params->period_ns % params->slots != 0))
        return NULL;
    ref_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->p = *params;
    if (m->p.capacity == 0)
        m->p.capacity = m->p.limit;
    return m;
}

void ref_model_free(ref_model *m)
{
    if (m == NULL)
        return;
    free(m->ev);
    free(m);
}

uint64_t ref_model_latest(const ref_model *m) { return m->latest; }
size_t ref_model_events(const ref_model *m) { return m->n - m->head; }
const ref_params *ref_model_params(const ref_model *m) { return &m->p; }

uint64_t ref_model_max_grant(const ref_model *m)
{
    return is_bucket(m) ? m->p.capacity : m->p.limit;
}

/* ---- the event list --------------------------------------------------- */

/* The running total of the permits of every event before index i. */
static u128 cum_before(const ref_model *m, size_t i)
{
    return i == m->head ? m->base : m->ev[i - 1].cum;
}

/* The first held index whose time is >= t (or > t when `after`). */
static size_t bisect(const ref_model *m, uint64_t t, bool after)
{
    size_t lo = m->head, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        bool left = after ? m->ev[mid].t <= t : m->ev[mid].t < t;
        if (left)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The permits of the admitted events with lo <= t_i <= hi. */
static u128 sum_in(const ref_model *m, uint64_t lo, uint64_t hi)
{
    if (lo > hi)
        return 0;
    if (m->p.literal) {
        u128 s = 0;
        for (size_t i = m->head; i < m->n; i++)
            if (m->ev[i].t >= lo && m->ev[i].t <= hi)
                s += m->ev[i].permits;
        return s;
    }
    size_t a = bisect(m, lo, false);
    size_t b = bisect(m, hi, true);
    return cum_before(m, b) - cum_before(m, a);
}

static void add_event(ref_model *m, uint64_t t, uint64_t permits)
{
    if (m->n == m->cap) {
        if (m->head > 0 && m->head * 2 >= m->n) {
            /* compact: slide the held events to the front */
            memmove(m->ev, m->ev + m->head, (m->n - m->head) * sizeof *m->ev);
            m->n -= m->head;
            m->head = 0;
        } else {
            size_t ncap = m->cap ? m->cap * 2 : 64;
            ref_event *nev = realloc(m->ev, ncap * sizeof *nev);
            if (nev == NULL)
                ref_die("out of memory");
            m->ev = nev;
            m->cap = ncap;
        }
    }
    if (m->n > m->head && m->ev[m->n - 1].t > t)
        ref_die("events out of order");
    ref_event *e = &m->ev[m->n];
    e->t = t;
    e->permits = permits;
    e->cum = cum_before(m, m->n) + permits;
    m->n++;
}

/* The first time whose events can still count at t or later (see each
 * rule below for the window it counts). */
static uint64_t horizon(const ref_model *m, uint64_t t)
{
    uint64_t w = m->p.period_ns;
    switch (m->p.alg) {
    case REF_FIXED_WINDOW:
        return t / w * w;
    case REF_SLIDING_LOG:
        return t >= w ? t - w + 1 : 0;
    case REF_SLIDING_WHEEL: {
        uint64_t tick = w / m->p.slots;
        uint64_t s = t / tick;
        return s + 1 > m->p.slots ? (s + 1 - m->p.slots) * tick : 0;
    }
    case REF_SLIDING_APPROX: {
        uint64_t k = t / w;
        return k >= 1 ? (k - 1) * w : 0;
    }
    default:
        return 0;
    }
}

static void prune(ref_model *m, uint64_t t)
{
    if (m->p.literal || is_bucket(m))
        return;
    uint64_t h = horizon(m, t);
    while (m->head < m->n && m->ev[m->head].t < h) {
        m->base = m->ev[m->head].cum;
        m->head++;
    }
    if (m->head == m->n) {
        m->head = m->n = 0;
    }
}

/* ---- the rules of section 3 --------------------------------------------- */
/* Each takes a time t >= latest (so every admitted event is at or before t)
 * and tells whether p permits would be granted at t. */

/* 3.1: the permits admitted in the window [kW, (k+1)W) of t, plus p, <= L. */
static bool fixed_window_allows(const ref_model *m, uint64_t t, uint64_t p)
{
    uint64_t w = m->p.period_ns;
    uint64_t k = t / w;
    u128 in_window = sum_in(m, k * w, t);
    return in_window + p <= m->p.limit;
}

/* 3.2: the permits admitted with t - W < t_i <= t, plus p, <= L. */
static bool sliding_log_allows(const ref_model *m, uint64_t t, uint64_t p)
{
    uint64_t w = m->p.period_ns;
    uint64_t lo = t >= w ? t - w + 1 : 0; /* t_i > t - W, t_i >= 0 */
    u128 in_window = sum_in(m, lo, t);
    return in_window + p <= m->p.limit;
}

/* 3.3: slot(x) = floor(x / tick); the permits admitted with
 * slot(t) - N < slot(t_i) <= slot(t), plus p, <= L.  slot(t_i) >= s - N + 1
 * is t_i >= (s - N + 1) * tick. */
static bool sliding_wheel_allows(const ref_model *m, uint64_t t, uint64_t p)
{
    uint64_t n = m->p.slots;
    uint64_t tick = m->p.period_ns / n;
    uint64_t s = t / tick;
    uint64_t lo = s + 1 > n ? (s + 1 - n) * tick : 0;
    u128 in_window = sum_in(m, lo, t);
    return in_window + p <= m->p.limit;
}

/* 3.4: k = floor(t/W), r = t - kW (so f = r/W); cur, prev = the permits of
 * windows k and k-1; est = prev*(1 - f) + cur; allowed iff est + p <= L,
 * i.e. (times W) prev*(W - r) + cur*W + p*W <= L*W. */
static void approx_counts(const ref_model *m, uint64_t t, u128 *prev,
                          u128 *cur, uint64_t *r)
{
    uint64_t w = m->p.period_ns;
    uint64_t k = t / w;
    *r = t - k * w;
    *cur = sum_in(m, k * w, t);
    *prev = k >= 1 ? sum_in(m, (k - 1) * w, k * w - 1) : 0;
}

static bool sliding_approx_allows(const ref_model *m, uint64_t t, uint64_t p)
{
    u128 w = m->p.period_ns;
    u128 prev, cur;
    uint64_t r;
    approx_counts(m, t, &prev, &cur, &r);
    u128 lhs = prev * (w - r) + cur * w + (u128)p * w;
    return lhs <= (u128)m->p.limit * w;
}

/* 3.5: tokens(t) = min(B, tokens(t_prev) + (t - t_prev) * L/W); the bucket
 * is full at the first request.  Times W: min(B*W, level + dt*L). */
static u128 tokens_times_w(const ref_model *m, uint64_t t)
{
    u128 full = (u128)m->p.capacity * m->p.period_ns;
    if (!m->started)
        return full;
    u128 refill = (u128)(t - m->t_prev) * m->p.limit;
    if (refill < m->owed)
        return 0; /* still below zero: nothing to take */
    u128 v = m->level + (refill - m->owed);
    return v < full ? v : full;
}

/* The token bucket's debt left at t (tokens * W below zero). */
static u128 owed_at(const ref_model *m, uint64_t t)
{
    u128 refill = (u128)(t - m->t_prev) * m->p.limit;
    return m->owed > refill ? m->owed - refill : 0;
}

static bool token_bucket_allows(const ref_model *m, uint64_t t, uint64_t p)
{
    return tokens_times_w(m, t) >= (u128)p * m->p.period_ns;
}

/* 3.6: water(t) = max(0, water(t_prev) - (t - t_prev) * L/W).
 * Times W: max(0, level - dt*L). */
static u128 water_times_w(const ref_model *m, uint64_t t)
{
    if (!m->started)
        return 0;
    u128 drained = (u128)(t - m->t_prev) * m->p.limit;
    return m->level > drained ? m->level - drained : 0;
}

static bool leaky_bucket_allows(const ref_model *m, uint64_t t, uint64_t p)
{
    u128 w = m->p.period_ns;
    return water_times_w(m, t) + (u128)p * w <= (u128)m->p.capacity * w;
}

static bool allows(const ref_model *m, uint64_t t, uint64_t p)
{
    if (t < m->latest)
        ref_die("rule evaluated before the latest time");
    if (p == 0)
        return true; /* a probe is always allowed */
    switch (m->p.alg) {
    case REF_FIXED_WINDOW: return fixed_window_allows(m, t, p);
    case REF_SLIDING_LOG: return sliding_log_allows(m, t, p);
    case REF_SLIDING_WHEEL: return sliding_wheel_allows(m, t, p);
    case REF_SLIDING_APPROX: return sliding_approx_allows(m, t, p);
    case REF_TOKEN_BUCKET: return token_bucket_allows(m, t, p);
    case REF_LEAKY_BUCKET: return leaky_bucket_allows(m, t, p);
    }
    return false;
}

/* ---- the searches ------------------------------------------------------ */

/* remaining: the largest k <= max_grant that a request at t would get. */
static uint64_t search_remaining(const ref_model *m, uint64_t t)
{
    uint64_t lo = 0, hi = ref_model_max_grant(m);
    if (allows(m, t, hi))
        return hi;
    /* allows(lo) and not allows(hi) */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (allows(m, t, mid))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* retry_after: the least integer d >= 0 with the same request allowed at
 * t + d and no other traffic; -1 if p exceeds what can ever be granted. */
static int64_t search_retry(const ref_model *m, uint64_t t, uint64_t p)
{
    if (p > ref_model_max_grant(m))
        return -1;
    if (allows(m, t, p))
        return 0;
    uint64_t lo = 0, hi = 1; /* not allowed at t + lo */
    for (;;) {
        if (t > UINT64_MAX - hi)
            ref_die("retry search ran past 2^64 ns");
        if (allows(m, t + hi, p))
            break;
        lo = hi;
        if (hi >= (UINT64_C(1) << 63))
            ref_die("retry search found no wait below 2^63 ns");
        hi *= 2;
    }
    /* not allowed at t + lo, allowed at t + hi */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (allows(m, t + mid, p))
            hi = mid;
        else
            lo = mid;
    }
    if (hi > (uint64_t)INT64_MAX)
        ref_die("retry wait does not fit int64");
    return (int64_t)hi;
}

/* ---- decisions --------------------------------------------------------- */

static uint64_t clamp_time(const ref_model *m, uint64_t t)
{
    return m->seen && t < m->latest ? m->latest : t;
}

bool ref_model_would_allow(const ref_model *m, uint64_t permits, uint64_t at_ns)
{
    return allows(m, clamp_time(m, at_ns), permits);
}

bool ref_model_at_rest(const ref_model *m, uint64_t at_ns)
{
    uint64_t t = clamp_time(m, at_ns);
    uint64_t w = m->p.period_ns;
    switch (m->p.alg) {
    case REF_FIXED_WINDOW:
    case REF_SLIDING_LOG:
    case REF_SLIDING_WHEEL:
        /* nothing counts now, so nothing will count later */
        return sum_in(m, horizon(m, t), t) == 0;
    case REF_SLIDING_APPROX: {
        uint64_t k = t / w;
        return sum_in(m, k >= 1 ? (k - 1) * w : 0, t) == 0;
    }
    case REF_TOKEN_BUCKET:
        return tokens_times_w(m, t) == (u128)m->p.capacity * w;
    case REF_LEAKY_BUCKET:
        return water_times_w(m, t) == 0;
    }
    return false;
}

bool ref_model_decide(ref_model *m, uint64_t permits, uint64_t now_ns,
                      ref_result *res)
{
    uint64_t t = clamp_time(m, now_ns);

    /* decide on the state as it is: a refusal or a probe changes nothing,
     * its time included (section 1) */
    ref_result r = {false, 0, 0, 0};
    r.allowed = permits == 0 || allows(m, t, permits);
    if (r.allowed && permits > 0) {
        if (is_bucket(m)) {
            /* bring the level up to t; the bucket is full (or dry) until the
             * first admission */
            if (!m->started) {
                m->level = m->p.alg == REF_TOKEN_BUCKET
                               ? (u128)m->p.capacity * m->p.period_ns
                               : 0;
                m->started = true;
            } else {
                m->level = m->p.alg == REF_TOKEN_BUCKET ? tokens_times_w(m, t)
                                                        : water_times_w(m, t);
                m->owed = 0; /* an admission needs tokens: the debt is paid */
            }
            m->t_prev = t;
        } else {
            prune(m, t);
        }
        m->seen = true;
        m->latest = t;
        u128 pw = (u128)permits * m->p.period_ns;
        switch (m->p.alg) {
        case REF_TOKEN_BUCKET:
            m->level -= pw;
            break;
        case REF_LEAKY_BUCKET:
            if (!m->p.nodelay) {
                /* wait = water(t) / r, rounded up; water*W / (L/W) / W */
                u128 l = m->p.limit;
                u128 wait = (m->level + l - 1) / l;
                if (wait > UINT64_MAX)
                    ref_die("shaper wait does not fit uint64");
                r.wait_ns = (uint64_t)wait;
            }
            m->level += pw;
            break;
        default:
            add_event(m, t, permits);
            break;
        }
    }
    r.remaining = search_remaining(m, t);
    r.retry_after_ns = r.allowed ? 0 : search_retry(m, t, permits);
    if (res != NULL)
        *res = r;
    return r.allowed;
}

/* ---- 3.8: changing the parameters -------------------------------------- */

bool ref_model_reconfigure(ref_model *m, const ref_params *params, uint64_t at_ns)
{
    ref_params np = *params;
    if (np.alg != m->p.alg || np.limit == 0 || np.period_ns == 0)
        return false;
    if (np.capacity == 0)
        np.capacity = np.limit;
    if (np.alg == REF_SLIDING_WHEEL &&
        (np.slots == 0 || np.period_ns % np.slots != 0 ||
         np.period_ns / np.slots != m->p.period_ns / m->p.slots))
        return false;
    if (is_bucket(m) && np.period_ns % m->p.period_ns != 0)
        return false;
    np.literal = m->p.literal;
    const uint64_t t = m->seen && at_ns < m->latest ? m->latest : at_ns;
    switch (np.alg) {
    case REF_FIXED_WINDOW: {
        uint64_t w = m->p.period_ns;
        u128 count = sum_in(m, t / w * w, t);
        m->head = m->n = 0;
        m->base = 0;
        if (count > 0)
            add_event(m, t, (uint64_t)count);
        break;
    }
    case REF_TOKEN_BUCKET:
    case REF_LEAKY_BUCKET:
        if (m->started) {
            const u128 k = np.period_ns / m->p.period_ns; /* level * W -> * W' */
            u128 level = np.alg == REF_TOKEN_BUCKET ? tokens_times_w(m, t) : water_times_w(m, t);
            level *= k;
            u128 full = (u128)np.capacity * np.period_ns;
            if (np.alg == REF_TOKEN_BUCKET && level > full)
                level = full; /* capped at the new burst */
            m->level = level;
            m->t_prev = t;
        } /* else full (empty) of the new burst (capacity) */
        break;
    default: /* the events stay where they are */
        break;
    }
    m->p = np;
    m->seen = true;
    m->latest = t;
    return true;
}

/* ---- 3.10: settling a reservation --------------------------------------- */

static void bucket_to(ref_model *m, uint64_t t);

bool ref_model_reserve(ref_model *m, uint64_t permits, uint64_t now_ns, uint64_t max_wait,
                       ref_result *res, ref_resv *rv)
{
    const uint64_t t = clamp_time(m, now_ns);
    rv->t0 = rv->at = t;
    rv->p = 0;
    if (!is_bucket(m) || permits == 0 || max_wait == 0) {
        bool ok = ref_model_decide(m, permits, now_ns, res);
        rv->p = ok ? permits : 0;
        rv->level = m->level;
        rv->owed = m->owed;
        return ok;
    }
    /* a bucket booking the future: the permits are taken now, below zero
     * tokens (above the capacity of water) if need be, and may be used
     * once the refill has made up for what they lack:
     * wait = ceil((p*W - tokens*W) / L), at most max_wait */
    const uint64_t w = m->p.period_ns;
    const __int128 have =
        m->p.alg == REF_TOKEN_BUCKET
            ? (__int128)tokens_times_w(m, t) - (__int128)(m->started ? owed_at(m, t) : 0)
            : (__int128)m->p.capacity * w - (__int128)water_times_w(m, t);
    __int128 lack = (__int128)permits * w - have;
    uint64_t wait = lack > 0 ? (uint64_t)((lack + m->p.limit - 1) / m->p.limit) : 0;
    bool ok = permits <= m->p.capacity && wait <= max_wait;
    if (ok) {
        bucket_to(m, t);
        const u128 x = (u128)permits * w;
        if (m->p.alg == REF_LEAKY_BUCKET) {
            m->level += x;
        } else if (m->level >= x) {
            m->level -= x;
        } else {
            m->owed += x - m->level;
            m->level = 0;
        }
        m->seen = true;
        m->latest = t;
        rv->p = permits;
        rv->at = t + wait;
    }
    rv->level = m->level;
    rv->owed = m->owed;
    if (res) {
        res->allowed = ok;
        /* refused: the wait it would have needed (none past the burst) */
        res->wait_ns = permits <= m->p.capacity ? wait : 0;
    }
    return ok;
}

/* Bring a bucket to t (the level valid at t, the debt left). */
static void bucket_to(ref_model *m, uint64_t t)
{
    if (!m->started) {
        m->level = m->p.alg == REF_TOKEN_BUCKET ? (u128)m->p.capacity * m->p.period_ns : 0;
        m->owed = 0;
        m->started = true;
    } else if (m->p.alg == REF_TOKEN_BUCKET) {
        u128 owed = owed_at(m, t);
        m->level = tokens_times_w(m, t);
        m->owed = owed;
    } else {
        m->level = water_times_w(m, t);
    }
    m->t_prev = t;
}

bool ref_model_settle(ref_model *m, const ref_resv *rv, uint64_t actual, uint64_t now_ns)
{
    const uint64_t t = clamp_time(m, now_ns), w = m->p.period_ns;
    const uint64_t p = rv->p;
    if (actual == p)
        return false;
    if (actual > p) {
        /* the extra is charged at t, past any limit */
        const uint64_t extra = actual - p;
        if (is_bucket(m)) {
            bucket_to(m, t);
            const u128 x = (u128)extra * w;
            if (m->p.alg == REF_LEAKY_BUCKET) {
                m->level += x;
            } else if (m->level >= x) {
                m->level -= x;
            } else {
                m->owed += x - m->level;
                m->level = 0;
            }
        } else {
            add_event(m, t, extra);
        }
        m->seen = true;
        m->latest = t;
        return true;
    }
    /* below the estimate */
    const uint64_t back = p - actual;
    switch (m->p.alg) {
    case REF_SLIDING_LOG:
    case REF_SLIDING_WHEEL:
        return false; /* the permits count as used */
    case REF_FIXED_WINDOW:
    case REF_SLIDING_APPROX: {
        /* the reservation's event still counts: its window (or, for
         * sliding-approx, the next); then it becomes `actual` permits */
        const uint64_t k = t / w, k0 = rv->t0 / w;
        if (!(k == k0 || (m->p.alg == REF_SLIDING_APPROX && k == k0 + 1)))
            return false;
        /* permits at one instant are alike: take them from the events
         * at t0, newest first, then correct the running totals */
        uint64_t left = back;
        size_t i = m->n;
        while (left > 0 && i > m->head && m->ev[i - 1].t >= rv->t0) {
            i--;
            if (m->ev[i].t != rv->t0)
                continue;
            uint64_t take = m->ev[i].permits < left ? m->ev[i].permits : left;
            m->ev[i].permits -= take;
            left -= take;
        }
        if (left > 0)
            ref_die("settle: the reservation's permits are gone");
        for (size_t j = i; j < m->n; j++)
            m->ev[j].cum = cum_before(m, j) + m->ev[j].permits;
        m->seen = true;
        /* a give-back is no admission: the two-window estimate's clock
         * stays (its weights depend on the instant); a fixed window's may
         * move within the window, where no decision tells the difference */
        if (m->p.alg == REF_FIXED_WINDOW) m->latest = t;
        return true;
    }
    case REF_TOKEN_BUCKET:
    case REF_LEAKY_BUCKET:
    {
        /* the permits go back while they are booked, not yet due; after,
         * only to a bucket still as the reservation left it: then the
         * difference between the level now and had it taken `actual` */
        u128 r = (u128)back * w;
        if (t >= rv->at) {
            if (m->t_prev != rv->t0 || m->level != rv->level || m->owed != rv->owed)
                return false;
            const __int128 dt = (__int128)(t - rv->t0) * m->p.limit, bw = (__int128)r;
            const __int128 full = (__int128)m->p.capacity * w;
            __int128 now_p, now_a;
            if (m->p.alg == REF_TOKEN_BUCKET) {
                const __int128 t1 = (__int128)rv->level - (__int128)rv->owed;
                now_p = t1 + dt < full ? t1 + dt : full;
                now_a = t1 + bw + dt < full ? t1 + bw + dt : full;
                r = (u128)(now_a - now_p);
            } else {
                now_p = (__int128)rv->level - dt > 0 ? (__int128)rv->level - dt : 0;
                now_a = (__int128)rv->level - bw - dt > 0 ? (__int128)rv->level - bw - dt : 0;
                r = (u128)(now_p - now_a);
            }
            if (r == 0)
                return false;
        }
        bucket_to(m, t);
        if (m->p.alg == REF_LEAKY_BUCKET) {
            m->level = m->level > r ? m->level - r : 0;
        } else if (m->owed >= r) {
            m->owed -= r;
        } else {
            const u128 full = (u128)m->p.capacity * w;
            m->level += r - m->owed;
            m->owed = 0;
            if (m->level > full)
                m->level = full;
        }
        m->latest = t;
        return true;
    }
    }
    return false;
}

/* ---- concurrency limits ---------------------------------------------------- */

typedef struct ref_hold {
    uint64_t permits, at;
    bool released;
} ref_hold;

struct ref_conc {
    uint64_t limit, lease, clock;
    ref_hold *h; /* h[id - 1] */
    size_t n, cap;
};

ref_conc *ref_conc_new(uint64_t limit, uint64_t lease_ns)
{
    if (limit == 0) return NULL;
    ref_conc *m = calloc(1, sizeof *m);
    if (m) {
        m->limit = limit;
        m->lease = lease_ns;
    }
    return m;
}

void ref_conc_free(ref_conc *m)
{
    if (!m) return;
    free(m->h);
    free(m);
}

static uint64_t conc_time(ref_conc *m, uint64_t t)
{
    if (t > (uint64_t)INT64_MAX) t = (uint64_t)INT64_MAX;
    if (m->lease && t > m->clock) m->clock = t;
    return m->lease ? m->clock : t;
}

/* Held at t: the literal sum.  (t may exceed 2^63 in the search; the
 * comparison is done in 128 bits.) */
static uint64_t conc_held(const ref_conc *m, u128 t)
{
    uint64_t s = 0;
    for (size_t i = 0; i < m->n; i++) {
        const ref_hold *x = &m->h[i];
        if (x->released) continue;
        if (m->lease && !(t < (u128)x->at + m->lease)) continue;
        s += x->permits;
    }
    return s;
}

bool ref_conc_acquire(ref_conc *m, uint64_t permits, uint64_t now_ns, ref_result *res,
                      uint64_t *id)
{
    uint64_t t = conc_time(m, now_ns);
    uint64_t held = conc_held(m, t);
    ref_result r = {0};
    if (id) *id = 0;
    if (permits == 0 || held + permits <= m->limit) {
        if (permits) {
            if (m->n == m->cap) {
                size_t nc = m->cap ? 2 * m->cap : 64;
                ref_hold *nh = realloc(m->h, nc * sizeof *nh);
                if (!nh) abort();
                m->h = nh;
                m->cap = nc;
            }
            m->h[m->n++] = (ref_hold){.permits = permits, .at = t};
            if (id) *id = m->n;
        }
        r.allowed = true;
        r.remaining = (held >= m->limit ? 0 : m->limit - held) - permits; /* a probe over a smaller N: 0 */
    } else {
        r.remaining = held >= m->limit ? 0 : m->limit - held; /* a smaller N after a change */
        if (permits > m->limit) r.retry_after_ns = -1;
        else if (!m->lease) r.retry_after_ns = INT64_MAX;
        else {
            /* the least d >= 1 with held(t + d) + p <= N: bisection over
             * [1, 2^63], held being non-increasing in d */
            u128 lo = 1, hi = (u128)1 << 63;
            if (conc_held(m, (u128)t + hi) + permits > m->limit) r.retry_after_ns = INT64_MAX;
            else {
                while (lo < hi) {
                    u128 mid = lo + (hi - lo) / 2;
                    if (conc_held(m, (u128)t + mid) + permits <= m->limit) hi = mid;
                    else lo = mid + 1;
                }
                r.retry_after_ns = lo > (u128)INT64_MAX ? INT64_MAX : (int64_t)lo;
            }
        }
    }
    if (res) *res = r;
    return r.allowed;
}

bool ref_conc_release(ref_conc *m, uint64_t id, uint64_t now_ns)
{
    uint64_t t = conc_time(m, now_ns);
    if (id == 0 || id > m->n) return false;
    ref_hold *x = &m->h[id - 1];
    if (x->released) return false;
    if (m->lease && !((u128)t < (u128)x->at + m->lease)) return false;
    x->released = true;
    return true;
}

uint64_t ref_conc_held(ref_conc *m, uint64_t now_ns)
{
    return conc_held(m, conc_time(m, now_ns));
}

void ref_conc_reconfigure(ref_conc *m, uint64_t limit, uint64_t lease_ns, uint64_t now_ns)
{
    uint64_t t = conc_time(m, now_ns);
    for (size_t i = 0; m->lease && i < m->n; i++)
        if (!m->h[i].released && !((u128)t < (u128)m->h[i].at + m->lease)) m->h[i].released = true;
    m->limit = limit;
    m->lease = lease_ns;
}
