/* ref_model.h -- an independent reference model of the decision rules
 * (docs/decisions.md).
 *
 * This is the tests' oracle, not a second implementation of the library.  It
 * is written to be obviously faithful to the contract text and deliberately
 * unlike a production design:
 *
 *  - every admitted request is kept as a (time, permits) event in a plain
 *    list, and each window rule is evaluated literally as "the sum of the
 *    permits of the admitted requests whose time lies in the interval";
 *  - the buckets hold tokens / water as an exact rational with denominator
 *    PERIOD (the level times W is always an integer), in unsigned __int128,
 *    compared by cross-multiplication; no floating point anywhere;
 *  - `remaining` is found by searching for the largest k that a request at
 *    the same instant would be granted, and `retry_after_ns` by searching
 *    for the least integer wait d after which the same request would be
 *    granted with no other traffic, both with the model's own "would this be
 *    allowed" predicate.  Nothing is solved in closed form.
 *
 * The model takes its parameters directly; it never parses a spec.
 *
 * Time: a time earlier than the latest admission (a request with p >= 1
 * that was allowed) is treated as that latest time.  Refusals and probes
 * change nothing, their time included.
 * Times up to 2^63-1 are supported; the searches evaluate instants up to
 * 2^63-1 + 2^63, which still fit a uint64_t.
 *
 * Not thread-safe; one model per limiter (or per key of a table).
 */
#ifndef SLUICE_REF_MODEL_H
#define SLUICE_REF_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ref_alg {
    REF_FIXED_WINDOW,   /* 3.1 */
    REF_SLIDING_LOG,    /* 3.2 */
    REF_SLIDING_WHEEL,  /* 3.3 */
    REF_SLIDING_APPROX, /* 3.4 */
    REF_TOKEN_BUCKET,   /* 3.5 */
    REF_LEAKY_BUCKET    /* 3.6 */
} ref_alg;

typedef struct ref_params {
    ref_alg alg;
    uint64_t limit;     /* L: permits per period, >= 1 */
    uint64_t period_ns; /* W: the period in ns, >= 1 */
    uint64_t capacity;  /* token-bucket burst B / leaky-bucket capacity C;
                           0 means the default, L */
    uint64_t slots;     /* sliding-wheel N; must divide W (0 is refused) */
    bool nodelay;       /* leaky-bucket: meter (wait_ns always 0) */
    bool literal;       /* self-check mode: never prune the event list and
                           sum it with a linear scan (slow) */
} ref_params;

/* The same fields as sluice_result, so the model does not depend on the
 * library's header. */
typedef struct ref_result {
    bool allowed;
    uint64_t wait_ns;
    uint64_t remaining;
    int64_t retry_after_ns;
} ref_result;

typedef struct ref_model ref_model;

/* A fresh model (nothing admitted, bucket full, no water), or NULL when the
 * parameters are not usable (zero limit or period, slots not dividing W) or
 * memory runs out.  Free it with ref_model_free(). */
ref_model *ref_model_new(const ref_params *params);

/* Free a model; NULL is a no-op. */
void ref_model_free(ref_model *m);

/* Decide a request for `permits` at `now_ns`, update the model, and fill
 * `res` (may be NULL).  Returns res->allowed. */
bool ref_model_decide(ref_model *m, uint64_t permits, uint64_t now_ns,
                      ref_result *res);

/* Change the model's parameters at `at_ns`, keeping what it has admitted
 * (docs/decisions.md, section 3.8: "Changing a limit while it runs").  The
 * change's time t is at_ns, or the latest admission if that is later, and
 * becomes the model's latest time (a later request with an earlier time
 * counts as t).  Per rule:
 *   windows (sliding-log, sliding-wheel, sliding-approx)  every admitted
 *       event stays at its time; from t on the rule is the new one.  A
 *       model that prunes has forgotten events older than its old window:
 *       for a longer new window make it with `literal` set.
 *   fixed-window  the permits admitted in the old window of t count in the
 *       new window of t (one event at t).
 *   token-bucket  tokens(t) by the old rate, capped at the new burst.
 *   leaky-bucket  water(t) by the old rate, kept.
 * The buckets keep their level times PERIOD: the new PERIOD must be a
 * multiple of the old one (no rounding, as the rule has none).  The
 * algorithm (and sliding-wheel's slot width) must stay.  Returns false,
 * changing nothing, when any of this does not hold. */
bool ref_model_reconfigure(ref_model *m, const ref_params *params, uint64_t at_ns);

/* A reservation the model admitted (ref_model_reserve), for a settle:
 * its time, when its permits are due, its permits (0: refused). */
typedef struct ref_resv {
    uint64_t t0, at, p;
    __extension__ unsigned __int128 level, owed; /* a bucket's, after it */
} ref_resv;

/* A reservation.  For a bucket with max_wait > 0 and permits > 0: booked
 * ahead (x/time/rate's Reserve), the bucket going below zero tokens (above
 * its capacity of water) by as much as the refill makes up within
 * max_wait; res gets allowed and wait_ns only.  Else ref_model_decide, in
 * full.  *rv receives what a settle needs. */
bool ref_model_reserve(ref_model *m, uint64_t permits, uint64_t now_ns, uint64_t max_wait,
                       ref_result *res, ref_resv *rv);

/* Settle the reservation rv at `actual` permits at now_ns (docs/decisions.md
 * section 3.10), written as the rule reads: above the estimate the extra is
 * admitted at now past the limit (a bucket's tokens go below zero, to be
 * refilled before anything passes); below it, fixed-window and
 * sliding-approx turn the reservation's event into `actual` permits while
 * it still counts, the buckets give the difference back while now is
 * before the permits are due, or when the bucket is still as the
 * reservation left it (then as if it had taken `actual`), and the window
 * logs give nothing back.  Returns whether the
 * model changed (then now, clamped, is its latest time).  Each
 * reservation is settled at most once. */
bool ref_model_settle(ref_model *m, const ref_resv *rv, uint64_t actual, uint64_t now_ns);

/* Would a request for `permits` at `at_ns` be allowed, given what has been
 * admitted so far and no other traffic?  `at_ns` earlier than the latest
 * time seen counts as that time.  Changes nothing. */
bool ref_model_would_allow(const ref_model *m, uint64_t permits,
                           uint64_t at_ns);

/* Is the model back at rest at `at_ns` (empty window, full bucket, no
 * water): would a fresh model decide every later request the same way,
 * provided no later request is earlier than `at_ns`?  Changes nothing. */
bool ref_model_at_rest(const ref_model *m, uint64_t at_ns);

/* The most permits one request can ever be granted: L for the windows,
 * B for the token bucket, C for the leaky bucket. */
uint64_t ref_model_max_grant(const ref_model *m);

/* The latest time at which the model admitted permits (0 before the first
 * admission). */
uint64_t ref_model_latest(const ref_model *m);

/* How many admitted events the model currently keeps in its list. */
size_t ref_model_events(const ref_model *m);

/* The parameters the model was made with (capacity resolved to its value). */
const ref_params *ref_model_params(const ref_model *m);

/* "fixed-window", "sliding-log", ... */
const char *ref_alg_name(ref_alg alg);

/* ---- concurrency limits (docs/decisions.md 3.9) --------------------------
 *
 * A plain list of every admission ever made: (id, permits, time, released).
 * The permits held at t are the sum over the list of those not released
 * and, with a lease D, admitted at a time a with t < a + D.  The clock is
 * the latest time of any call with a lease (an earlier time counts as it);
 * without a lease time plays no part.  retry_after_ns is searched by
 * bisection over the wait with the model's own "would it fit" predicate. */
typedef struct ref_conc ref_conc;

/* limit N >= 1; lease_ns 0 for none.  NULL when memory runs out. */
ref_conc *ref_conc_new(uint64_t limit, uint64_t lease_ns);
void ref_conc_free(ref_conc *m);
/* Decide an acquire; on an admission of p >= 1, *id gets its id (>= 1). */
bool ref_conc_acquire(ref_conc *m, uint64_t permits, uint64_t now_ns, ref_result *res,
                      uint64_t *id);
/* Release admission `id` at now_ns: true if it was held then (and now is
 * not), false if it was released already, its lease had ended, or no such
 * id (then nothing changes but the clock). */
bool ref_conc_release(ref_conc *m, uint64_t id, uint64_t now_ns);
/* The permits held at now_ns (moves the clock, as every call). */
uint64_t ref_conc_held(ref_conc *m, uint64_t now_ns);
/* Change N and the lease at now_ns (docs/decisions.md 3.9): the leases
 * ended by then under the old lease are over for good; the others end at
 * their admission plus the new lease; held permits stay, counted against
 * the new N. */
void ref_conc_reconfigure(ref_conc *m, uint64_t limit, uint64_t lease_ns, uint64_t now_ns);

#endif /* SLUICE_REF_MODEL_H */
