/* sluice.h -- in-process rate limiting for C.
 *
 * sluice decides "may this request go now?" inside the process, exactly to a
 * written contract (docs/decisions.md states each rule), in nanoseconds,
 * with no server.  Six
 * algorithms share one API:
 *
 *   fixed-window    LIMIT permits per aligned window [kW, (k+1)W)
 *   sliding-log     exact sliding window over admitted requests
 *   sliding-wheel   sliding window over a ring of slots (timing wheel)
 *   sliding-approx  two-window estimate prev*(1-f) + cur
 *   token-bucket    GCRA: capacity `burst`, refilled at LIMIT/PERIOD
 *   leaky-bucket    water drains at LIMIT/PERIOD; shaper (reports a wait)
 *                   or meter (`nodelay`)
 *
 * A limiter is described by a spec string, `ALGORITHM LIMIT/PERIOD [OPT...]`,
 * e.g. "token-bucket 100/s burst=20" (grammar in docs/spec.md).  Besides the
 * contract's options, every algorithm takes `clock=monotonic` (default) or
 * `clock=coarse`, the clock its live functions read (see Clocks below);
 * fixed-window also takes `tz=ZONE [anchor=D]` with a period of d, w,
 * Nmonth or y: a calendar quota, whose windows are the zone's local days,
 * weeks, months or years (docs/spec.md, "Calendar quotas").
 *
 * Conventions
 *  - Time is uint64_t nanoseconds on a monotonic axis.  Functions named
 *    `_at` take it from the caller (any value 0 .. 2^63-1); the others read
 *    CLOCK_MONOTONIC.  Only an admission (a request for p >= 1 permits that
 *    is allowed) changes a limiter: a refusal or a probe is a pure read of
 *    its state, its time included.  A time earlier than the latest
 *    admission is treated as that time.
 *  - Decisions return bool.  Everything else that can fail returns int: 0 on
 *    success or a negative SLUICE_E* code (see sluice_strerror()).
 *    Constructors return NULL and write a one-line reason, naming the
 *    offending token, into a caller buffer.
 *  - Objects are opaque; `_free(NULL)` is a no-op.
 *  - No decision allocates, except: sliding-log and sliding-wheel, whose
 *    ring grows with the requests admitted in the window (docs/spec.md); a
 *    table's first request for a key longer than 16 bytes (a copy of the
 *    key, or of its 16-byte digest when longer than SLUICE_MAX_KEY_BYTES);
 *    an asynchronous acquire (its queue node).  If that allocation
 *    fails the request is refused, never admitted unrecorded.
 *
 * Thread-safety: constructors (`_new`) may be called from any number of
 * threads at once (each makes an object of its own).  `_free` must not run
 * while any other call uses the same object, and sluice_set_allocator()
 * only before any object exists.  Every other function may be called from
 * any number of threads at once on the same object with no lock held by
 * the caller; the decisions are then
 * exactly those of the contract for some order of the concurrent calls (no
 * over-admission, no lost permits), also when threads pass slightly
 * out-of-order timestamps.  Per algorithm, on x86-64 (which has a 16-byte
 * compare-and-swap):
 *
 *   fixed-window, token-bucket, leaky-bucket, sliding-approx
 *       lock-free: a 16-byte word (latest admission's time, count).  A
 *       refusal or a probe reads it with plain loads and writes nothing; an
 *       admission commits with one compare-and-swap loop, where a failed CAS
 *       means another thread's admission went in.  No mutex, no spin lock,
 *       no allocation.  (token-bucket and leaky-bucket
 *       need burst * PERIOD / gcd(LIMIT, PERIOD) < 2^64, sliding-approx
 *       LIMIT < 2^32, which every practical spec meets; beyond, and on other
 *       machines, they take the short lock below.)
 *   sliding-log, sliding-wheel
 *       admissions take a mutex around a critical section of a few dozen
 *       instructions (the ring of slots cannot be swapped in one
 *       instruction) and publish a summary of the window under a sequence
 *       counter; a refusal or a probe reads that summary with plain loads
 *       and writes nothing (a refusal of more than 8 permits, or a probe,
 *       after more than 8 slots left the window unseen by an admission,
 *       may take the mutex).
 *   tables (sluice_table_*) of the four lock-free algorithms, keys of at
 *   most 16 bytes
 *       a refusal or a probe reads the key's entry and its shard's sequence
 *       count with plain loads and writes nothing; an admission of a key
 *       the table holds writes its 16-byte state and nothing else (a
 *       compare-and-swap that freezes it, then two stores), so threads on
 *       distinct keys share no written cache line; making, removing and
 *       reclaiming keys take the shard's short lock.  Longer keys, the
 *       window logs' tables and other machines decide under that lock.
 *
 * A composite decision (sluice_composite_try_acquire_at) or a change of
 * spec (sluice_limiter_reconfigure_at) holds a lock-free limiter's word for
 * a few dozen instructions; decisions on that limiter wait for it meanwhile.
 *
 * The statistics are exact under any concurrency and cost no locked
 * instruction: each thread counts in a cache line of its own.
 *
 * Clocks: the live functions read CLOCK_MONOTONIC (ns resolution, about
 * 20-30 ns through the vDSO), or, for a limiter made with the spec option
 * `clock=coarse`, CLOCK_MONOTONIC_COARSE (the same axis at the kernel tick,
 * 1-4 ms resolution, about 5 ns): decisions are then those of the contract
 * at a time up to one tick late.  A calendar quota (fixed-window with
 * `tz=ZONE`, docs/spec.md) reads CLOCK_REALTIME: its times, in the `_at`
 * functions too, are nanoseconds since the Unix epoch (UTC); a realtime
 * clock stepped back is time standing still, as for any earlier `now`.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; what this header declares
 * is its exported interface. */
#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility push(default)
#endif

#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 2
#define SLUICE_VERSION_PATCH 0
#define SLUICE_VERSION_STRING "0.2.0"
/* One comparable number: MAJOR * 10000 + MINOR * 100 + PATCH (0.1.0 is
 * 100; MINOR and PATCH stay below 100). */
#define SLUICE_VERSION_NUMBER \
    (SLUICE_VERSION_MAJOR * 10000 + SLUICE_VERSION_MINOR * 100 + SLUICE_VERSION_PATCH)

/* Limits of the spec grammar.  LIMIT is 1 .. SLUICE_MAX_LIMIT permits per
 * PERIOD; PERIOD is 1 ns .. SLUICE_MAX_PERIOD_NS (100 years of 365 days).
 * For the buckets, the time to fill (burst or capacity times PERIOD/LIMIT)
 * is at most 2^63-1 ns (about 292 years), so that every wait fits an
 * int64.  Times passed to the `_at` functions above 2^63-1 count as 2^63-1. */
#define SLUICE_MAX_LIMIT 1000000000000ULL         /* 10^12 */
#define SLUICE_MAX_PERIOD_NS 3153600000000000000ULL /* 36500 d */

/* The negative error codes SLUICE_OK .. SLUICE_ECANCELED and
 * sluice_strerror(): one sign convention throughout, 0 is success. */
#include "sluice/errors.h"

/* The library's version, SLUICE_VERSION_STRING of the build.  Thread-safe. */
const char *sluice_version(void);

/* The library's version as SLUICE_VERSION_NUMBER of the build: compare it
 * with the header's SLUICE_VERSION_NUMBER to detect a program running
 * against another libsluice than it was compiled with.  Thread-safe. */
int sluice_version_number(void);

/* ------------------------------------------------------------------------ */
/* Allocation                                                                */

/* The functions the library uses for its own memory (the core's and
 * libsluice-redis's; hiredis's own allocations are not included).
 *  malloc_fn  as malloc(): a block of `size` bytes, or NULL.
 *  calloc_fn  as calloc(): `count` * `size` zeroed bytes (the product is
 *             checked for overflow by the library), or NULL.  The library
 *             zeroes nothing itself: a table sized for millions of keys
 *             asks for tens of MB at creation, and a calloc that maps fresh
 *             zero pages (as glibc's does for large blocks) keeps them
 *             untouched, so the table costs only what its keys use.
 *  free_fn    as free(); never called with NULL.
 * Blocks must be aligned as malloc's are (for any type, max_align_t).
 *  reserved   must be NULL.  Later versions may give these slots a meaning
 *             (e.g. an aligned allocation, or a context pointer passed to
 *             the functions), with NULL meaning what this version does, so
 *             the struct keeps its size and a caller built for an older
 *             version keeps working.
 * Set it with designated initializers, which leave `reserved` NULL:
 *     sluice_allocator a = {.malloc_fn = m, .calloc_fn = c, .free_fn = f}; */
typedef struct sluice_allocator {
    void *(*malloc_fn)(size_t size);
    void *(*calloc_fn)(size_t count, size_t size);
    void (*free_fn)(void *ptr);
    void *reserved[4];
} sluice_allocator;

/* Install `a` (copied) as the library's allocator, or libc's when `a` is
 * NULL.  Returns 0, or SLUICE_EINVAL (nothing changed) when a function is
 * NULL or a reserved slot is not.  Not thread-safe: call it before any sluice
 * object exists, and free every object with the allocator that made it.
 * Used by the tests to fail the Nth allocation. */
int sluice_set_allocator(const sluice_allocator *a);

/* Copy the installed allocator (libc's by default) into `out`.  Thread-safe
 * while no sluice_set_allocator() call runs. */
void sluice_get_allocator(sluice_allocator *out);

/* ------------------------------------------------------------------------ */
/* Clock                                                                     */

/* CLOCK_MONOTONIC now, in nanoseconds (about 20 ns through the vDSO).
 * The axis of specs without tz=; for a limiter or table whose spec came
 * from elsewhere, read sluice_limiter_now_ns() or sluice_table_now_ns().
 * Thread-safe. */
uint64_t sluice_now_ns(void);

/* ------------------------------------------------------------------------ */
/* Numbers                                                                   */

/* Read the `n` bytes at `s` (no NUL needed) as a decimal integer of at most
 * `max`: plain digits only, no sign, space or exponent, leading zeros
 * allowed.  Returns 0 with the value in *out; SLUICE_EINVAL when n is 0, s
 * or out is NULL, or any byte is not a digit; SLUICE_ERANGE when all are
 * digits but the value is above `max` (however many digits: it never
 * overflows).  On an error *out is unchanged.  The limit-spec grammar, the
 * rule files and `sluice replay` read their numbers with it, so a caller
 * that reads numbers beside them accepts exactly the same ones.
 * Thread-safe. */
int sluice_parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out);

/* ------------------------------------------------------------------------ */
/* Limiters                                                                  */

typedef struct sluice_limiter sluice_limiter; /* opaque */

/* The details of one decision.
 *  allowed         true if the permits were granted.
 *  wait_ns         for an allowed request of the leaky-bucket shaper, the
 *                  time it must wait before it proceeds (its turn in the
 *                  constant-rate output); 0 otherwise.
 *  remaining       whole permits a request at the same instant could still
 *                  get after this decision (rounded down).
 *  retry_after_ns  for a refusal, the least wait (rounded up to a whole ns,
 *                  so a client never retries too early) after which the same
 *                  request, with no other traffic, is allowed; -1 when no
 *                  wait can help (permits exceed what the limiter can ever
 *                  grant); 0 for an allowed request.
 *  error           0 when the algorithm decided; otherwise the request was
 *                  refused for a reason of its own (retry_after_ns = -1,
 *                  but for SLUICE_EFULL a lower bound: see
 *                  sluice_table_try_acquire_at):
 *                  SLUICE_ENOMEM (sliding-log or sliding-wheel could not
 *                  grow its ring to record the request: refused rather than
 *                  admitted unrecorded; a table could not copy a long key),
 *                  SLUICE_EINVAL (a table's key too long) or SLUICE_EFULL (a
 *                  table holds max_keys keys, none at rest).
 * The struct may grow at its end in a later minor version; the reserved
 * words are zero. */
typedef struct sluice_result {
    bool allowed;
    uint64_t wait_ns;
    uint64_t remaining;
    int64_t retry_after_ns;
    int32_t error;
    uint32_t reserved_[3];
} sluice_result;

/* Counters of one limiter, since it was made.  A probe (permits = 0) counts
 * in `probes` only. */
typedef struct sluice_stats {
    uint64_t requests_allowed;
    uint64_t requests_denied;
    uint64_t permits_allowed;  /* saturates at UINT64_MAX */
    uint64_t permits_denied;   /* saturates at UINT64_MAX */
    uint64_t probes;
    /* Of requests_denied and permits_denied, those of composite decisions
     * (sluice_composite_try_acquire_at, several --limit flags) that another
     * limit refused while this one would have admitted them: charged
     * nothing here, counted so that the limit that bites can be told
     * (the metrics' decision="denied_elsewhere").  Keys of tables in a
     * shared region count them too, region-wide (every process's, as
     * the region's other counts). */
    uint64_t requests_denied_elsewhere;
    uint64_t permits_denied_elsewhere; /* saturates at UINT64_MAX */
    uint64_t reserved_[2]; /* zero: room to grow in a minor version */
} sluice_stats;

/* Make a limiter from a spec such as "sliding-wheel 100/s slots=100".
 * Returns NULL when the spec is refused or memory runs out; then, when
 * errlen > 0, `err` receives a NUL-terminated one-line reason naming the
 * offending token (e.g. `unknown option "burts=5"`).  The caller owns the
 * result and frees it with sluice_limiter_free().  Thread-safe (it touches no
 * shared state other than the allocator). */
sluice_limiter *sluice_limiter_new(const char *spec, char *err, size_t errlen);

/* Free a limiter and everything it holds.  NULL is a no-op.  No other call
 * may be using `lim` at the same time, and none may follow -- except by the
 * asynchronous queues made on it (sluice_queue_new), which keep it in memory
 * and go on using it until the last of them is freed. */
void sluice_limiter_free(sluice_limiter *lim);

/* Ask for `permits` at time `now_ns` (nanoseconds on the caller's monotonic
 * axis; a time earlier than the limiter's latest admission counts as that
 * time).  Returns true and takes the permits, or returns false and takes
 * nothing.  permits = 0 is a probe: always true, takes nothing, and fills
 * `res` with the limiter's state at now_ns.  When `res` is not NULL it
 * receives the decision's details (see sluice_result).  Thread-safe. */
bool sluice_try_acquire_at(sluice_limiter *lim, uint64_t permits,
                           uint64_t now_ns, sluice_result *res);

/* sluice_try_acquire_at() at sluice_now_ns(), without details. */
bool sluice_try_acquire(sluice_limiter *lim, uint64_t permits);

/* Block until `permits` are granted and return true, or return false at
 * once, consuming nothing, when they cannot be granted within `timeout_ns`
 * (with no other traffic).  token-bucket and leaky-bucket book the permits
 * at once with a wait that fits the timeout (as x/time/rate's Wait: see
 * sluice_reserve_at) and sleep it -- concurrent callers are served in the
 * order they booked; the windows sleep each refusal's retry_after_ns and ask
 * again, within the same deadline.  The shaper's wait_ns is slept before
 * returning and counts against the timeout.  UINT64_MAX: no timeout.
 * Sleeps on CLOCK_MONOTONIC.  Thread-safe. */
bool sluice_acquire(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns);

/* A cancellation handle for blocking acquires: any number of
 * sluice_acquire_cancellable() calls may wait on one;
 * sluice_canceller_cancel() wakes them all (they return SLUICE_ECANCELED,
 * and a bucket's booked permits are given back), and every later acquire
 * with it fails at once.  _new returns NULL when out of memory.  _free: no call
 * may be using it.  The others are thread-safe. */
typedef struct sluice_canceller sluice_canceller;
sluice_canceller *sluice_canceller_new(void);
void sluice_canceller_free(sluice_canceller *c);
void sluice_canceller_cancel(sluice_canceller *c);
bool sluice_canceller_cancelled(sluice_canceller *c);

/* sluice_acquire(), interruptible by `c` (may be NULL).  Returns 0 when
 * the permits were granted, else SLUICE_ETIMEDOUT (they cannot be granted
 * within the timeout; nothing taken), SLUICE_ECANCELED (nothing taken, or a
 * bucket's booking given back) or SLUICE_ENOMEM (sliding-log or
 * sliding-wheel could not grow its ring).  Thread-safe. */
int sluice_acquire_cancellable(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns,
                               sluice_canceller *c);

/* Wait histograms.  Every blocking acquire that is granted records its
 * wait, and so does every asynchronous acquire (sluice_queue_acquire_at)
 * whose callback runs, in one of SLUICE_WAIT_BUCKETS + 1 buckets of fixed
 * bounds: bucket i (0 .. SLUICE_WAIT_BUCKETS - 1) counts the waits w with
 * bound(i-1) < w <= bound(i), bound(i) = sluice_wait_bucket_bound_ns(i):
 *   100 us, 250 us, 500 us, 1 ms, 2.5 ms, 5 ms, 10 ms, 25 ms, 50 ms,
 *   100 ms, 250 ms, 500 ms, 1 s, 2.5 s, 5 s, 10 s
 * and the last bucket counts the waits above 10 s.  A wait of 0 (granted
 * at once) counts in bucket 0.  Blocking: from the call to the grant, on
 * the limiter's clock (a bucket's booked time, or the later time the sleep
 * ended; a window's admitting decision).  Asynchronous: from the request's
 * now_ns to the wheel's time passed to its callback.  The acquires that end
 * without permits are counted apart, never in the histogram. */
#define SLUICE_WAIT_BUCKETS 16

typedef struct sluice_wait_stats {
    uint64_t buckets[SLUICE_WAIT_BUCKETS + 1]; /* per bucket, not cumulative */
    uint64_t count;     /* waits recorded: the sum of `buckets` */
    uint64_t sum_ns;    /* their sum, saturating at UINT64_MAX */
    uint64_t timed_out; /* blocking: SLUICE_ETIMEDOUT returned (mostly at
                           once: the wait would not fit); queues: 0 */
    uint64_t cancelled; /* blocking: SLUICE_ECANCELED returned; queues:
                           requests cancelled (sluice_queue_cancel_at
                           returned 0) */
    uint64_t failed;    /* blocking: another error (SLUICE_ENOMEM);
                           queues: requests refused at once (any error but
                           SLUICE_EINVAL: nothing queued) */
    uint64_t dropped;   /* queues: pending requests dropped because the
                           wheel was freed; blocking: 0 */
    uint64_t reserved_[4]; /* zero: room to grow in a minor version */
} sluice_wait_stats;

/* The upper bound of wait bucket i in ns (the list above), UINT64_MAX for
 * i >= SLUICE_WAIT_BUCKETS (the last bucket has none).  Thread-safe. */
uint64_t sluice_wait_bucket_bound_ns(unsigned i);

/* Copy the wait histogram of the limiter's blocking acquires
 * (sluice_acquire, sluice_acquire_cancellable) into `out`.  Counted per
 * thread without a lock (as sluice_limiter_stats_get's counters); each
 * bucket is exact, and `count` is the sum of the buckets read.
 * Thread-safe. */
void sluice_limiter_wait_stats_get(const sluice_limiter *lim, sluice_wait_stats *out);

/* A reservation: permits taken now, to be used at `at_ns`.  Filled by
 * sluice_reserve_at(); the caller owns it.  It carries the limiter that
 * made it, so it can only ever be cancelled or settled there; it must not
 * be used after that limiter is freed.  `limiter`, `state` and the fields
 * after them are private. */
typedef struct sluice_reservation {
    uint64_t permits; /* permits taken (0 if refused) */
    uint64_t wait_ns; /* how long to wait before using them */
    uint64_t at_ns;   /* when they may be used: the reserving time + wait_ns,
                       * never past 2^63-1 */
    sluice_limiter *limiter; /* private: the limiter that made it */
    uint32_t state;          /* private */
    uint64_t t_ns_;          /* private: the time it was decided at */
    uint64_t d1_[2];         /* private: a bucket's state after it */
    const void *cfg_;        /* private: the configuration it was made under */
} sluice_reservation;

/* Take `permits` now, to be used after a wait -- x/time/rate's Reserve.
 * token-bucket and leaky-bucket may go into debt: the permits are booked
 * even if the bucket does not hold them yet, and rv->wait_ns says when they
 * are there (for the shaper, at least its wait_ns); later requests see the
 * debt, so the long-run rate is the contract's.  The reservation is refused
 * (false, nothing taken) when permits exceed the burst/capacity, when the
 * wait would exceed `max_wait_ns` or end past 2^63-1 ns, or when the debt
 * would take more than 2^63-1 ns to repay (so every later wait and
 * retry_after_ns fits an int64).  The window algorithms cannot book the
 * future: for them this is sluice_try_acquire_at() (wait 0).  permits = 0
 * is a probe, as for sluice_try_acquire_at(): always allowed, waits for
 * nothing, even while the bucket is in debt.  `rv` and `res`
 * may be NULL.  Counts as a request in the statistics.  Thread-safe
 * (lock-free where the limiter is). */
bool sluice_reserve_at(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                       uint64_t max_wait_ns, sluice_reservation *rv, sluice_result *res);

/* Give back a reservation's permits before their time, on the limiter that
 * made it: token-bucket and leaky-bucket only.  now_ns is clamped to the
 * limiter's latest admission first; the permits go back only if that time
 * is before rv->at_ns.  If nothing was reserved or admitted after it, the
 * limiter is then exactly as if it had never been made; if something was,
 * that later request keeps its longer wait, so cancelling never lets more
 * through than the contract would.  Returns 0 when the permits were given
 * back; SLUICE_ENOENT, with nothing given back, when the reservation was
 * already cancelled or its time has come (the permits count as used), or
 * holds no permits (one of 0, which stays open to a settle);
 * SLUICE_EINVAL for another algorithm or a reservation never made.
 * Thread-safe. */
int sluice_reservation_cancel_at(sluice_reservation *rv, uint64_t now_ns);

/* Settle a reservation at its real cost, once the work is done: an LLM
 * call's tokens, a response's bytes, a query's rows (Envoy's hits_addend
 * at stream end).  Every algorithm; the exact rules are in
 * docs/decisions.md, section 3.10.  now_ns is clamped to the limiter's
 * latest admission, as for a decision.
 *   actual_permits < rv->permits: the difference goes back where that is
 *     exact and safe: a bucket while now is before rv->at_ns (the permits
 *     still booked: the cancel's rule), or when nothing else has been
 *     admitted, reserved or given back on it since (then it is exactly as
 *     if `actual_permits` had been reserved); otherwise they count as
 *     used; fixed-window while now is in the reservation's window;
 *     sliding-approx while it is in that window or the next (then exactly
 *     as if `actual_permits` had been taken); sliding-log and
 *     sliding-wheel give nothing back (the permits count as used until
 *     they leave the window).
 *   actual_permits > rv->permits: the extra is charged at once, even past
 *     the limit (an overdraft): a bucket goes into debt, a window counts
 *     it as admitted at now, so nothing else passes until it is paid.  The
 *     charge saturates where the state would overflow: a bucket's debt at
 *     2^63-1 ns of refill (and 2^64-1 scaled units when lock-free), a
 *     window's count at 2^64-1 (2^32-1 for a lock-free sliding-approx);
 *     the limiter then refuses for as long as the saturated debt lasts.
 *   equal: nothing changes.
 * After a change of the limiter's spec (sluice_limiter_reconfigure*),
 * nothing goes back (the units changed); an excess is still charged.  A
 * copy of a reservation is the same reservation: settle one of them.
 * A reservation that was refused (permits 0 and refused) cannot be settled.
 * Returns 0 when settled; SLUICE_ENOENT, with nothing changed, when it was
 * already settled, cancelled or refused; SLUICE_EINVAL for NULL or a
 * reservation never made; SLUICE_ENOMEM, with nothing changed (the
 * reservation stays open), when a sliding-log or sliding-wheel ring cannot
 * grow for the overdraft.  After a settle, sluice_reservation_cancel_at
 * returns SLUICE_ENOENT.  Does not count as a request in the statistics.
 * Thread-safe on the limiter (lock-free where it is); one reservation
 * must not be settled or cancelled by two threads at once. */
int sluice_reservation_settle_at(sluice_reservation *rv, uint64_t actual_permits,
                                 uint64_t now_ns);

/* Copy the limiter's counters into `out`.  Each counter is exact; the set is
 * read without stopping the limiter, so under concurrent decisions the
 * counters may come from slightly different instants.  Thread-safe. */
void sluice_limiter_stats_get(const sluice_limiter *lim, sluice_stats *out);

/* The longest canonical spec sluice_limiter_spec_format() writes, with its NUL. */
#define SLUICE_SPEC_MAX 128

/* Write the limiter's canonical spec into buf (NUL-terminated): the
 * algorithm, LIMIT/PERIOD with the period in its largest whole unit, and the
 * options that differ from their defaults, in a fixed order.  Parsing the
 * result makes an identical limiter, and formatting that gives the same
 * string.  Returns the length of the spec (excluding the NUL), or
 * SLUICE_ENOSPC when buflen is too small (buf then holds a truncated,
 * NUL-terminated prefix if buflen > 0).  SLUICE_SPEC_MAX bytes always
 * suffice.  Thread-safe. */
int sluice_limiter_spec_format(const sluice_limiter *lim, char *buf, size_t buflen);

/* Check a spec without keeping a limiter: 0 if it would be accepted, else a
 * negative code with the reason in err (as sluice_limiter_new).  When `canon`
 * is not NULL and the spec is valid, the canonical form is written there as
 * by sluice_limiter_spec_format().  Thread-safe. */
int sluice_spec_check(const char *spec, char *canon, size_t canonlen,
                      char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* A parsed spec, read-only                                                  */

/* The algorithms, as sluice_spec_info reports them. */
enum {
    SLUICE_ALG_FIXED_WINDOW = 0,
    SLUICE_ALG_SLIDING_LOG = 1,
    SLUICE_ALG_SLIDING_WHEEL = 2,
    SLUICE_ALG_SLIDING_APPROX = 3,
    SLUICE_ALG_TOKEN_BUCKET = 4,
    SLUICE_ALG_LEAKY_BUCKET = 5
};

/* The clocks of the spec option `clock=` (see Clocks above). */
enum {
    SLUICE_CLOCK_MONOTONIC = 0, /* clock=monotonic, the default */
    SLUICE_CLOCK_COARSE = 1,    /* clock=coarse */
    SLUICE_CLOCK_REALTIME = 2   /* a spec with tz=: CLOCK_REALTIME, times
                                 * are ns since the Unix epoch (UTC) */
};

/* What a spec says, after parsing: every value as the limiter uses it,
 * defaults filled in.  For programs that build on a spec (another store, a
 * configuration report) without reading its text again.
 *  algorithm  SLUICE_ALG_*.
 *  clock      SLUICE_CLOCK_*.
 *  limit      LIMIT, permits per period, 1 .. SLUICE_MAX_LIMIT.
 *  period_ns  PERIOD in nanoseconds, 1 .. SLUICE_MAX_PERIOD_NS; for a
 *             calendar quota (clock SLUICE_CLOCK_REALTIME) a nominal
 *             length: 1 d, 7 d, 31 d a month, 366 d (the windows
 *             themselves follow the zone's calendar).
 *  capacity   the most permits a request can get at once: burst= for
 *             token-bucket, capacity= for leaky-bucket (LIMIT when not
 *             given), LIMIT for the other algorithms.
 *  slots      sliding-wheel: the ring's slots (slots=, or the default of
 *             1-ms, else 1-us, else 1-ns slots); each slot is
 *             period_ns / slots ns, a whole number.  0 for the others.
 *  nodelay    leaky-bucket: true for the meter (nodelay), false for the
 *             shaper.  false for the others.
 *  reserved   zero; later versions may fill them (a new option), so the
 *             struct keeps its size. */
typedef struct sluice_spec_info {
    int algorithm;
    int clock;
    uint64_t limit;
    uint64_t period_ns;
    uint64_t capacity;
    uint64_t slots;
    bool nodelay;
    uint64_t reserved[4];
} sluice_spec_info;

/* Parse `spec` into `out` without making a limiter.  Returns 0, or a
 * negative code with a one-line reason in err, as sluice_spec_check() (out
 * is then zeroed).  Formatting a limiter made from the spec and parsing that
 * gives the same info.  Thread-safe. */
int sluice_spec_parse(const char *spec, sluice_spec_info *out, char *err,
                      size_t errlen);

/* The parsed spec of a limiter (as sluice_spec_parse() of the spec it was
 * made from).  Thread-safe. */
void sluice_limiter_spec_get(const sluice_limiter *lim, sluice_spec_info *out);

/* The limiter's clock now, in nanoseconds: the time its live functions
 * (sluice_try_acquire, sluice_limiter_reconfigure, ...) read, on the axis
 * its `_at` functions take.  CLOCK_MONOTONIC (or its coarse form, for
 * `clock=coarse`) for most specs; CLOCK_REALTIME, nanoseconds since the
 * Unix epoch, for a calendar quota (tz=).  A caller that passes "now" to
 * the `_at` functions of a limiter whose spec it did not choose (from a
 * configuration) reads it here, never sluice_now_ns().  A spec change never
 * moves a limiter to the other axis, so the answer's axis is fixed for its
 * life.  lim == NULL gives 0.  Thread-safe. */
uint64_t sluice_limiter_now_ns(const sluice_limiter *lim);

/* The spec name of algorithm `alg` ("token-bucket" for
 * SLUICE_ALG_TOKEN_BUCKET), a static string; NULL for a value that is not
 * an algorithm.  Thread-safe. */
const char *sluice_algorithm_name(int alg);

/* ------------------------------------------------------------------------ */
/* Tables: one limiter per key                                               */

typedef struct sluice_table sluice_table; /* opaque */

/* Counters of a table. */
typedef struct sluice_table_stats {
    uint64_t keys;       /* keys held now, exactly: in use or at rest (a
                          * key at rest stays held until its place is
                          * wanted by a new key: sluice_table_new) */
    uint64_t reclaimed;  /* keys dropped because their limiter was at rest */
    uint64_t evicted;    /* keys dropped while in use (SLUICE_TABLE_EVICT_LRU) */
    uint64_t refused;    /* requests refused because the table was full */
    sluice_stats decisions; /* over all keys, as sluice_stats */
    uint64_t reserved_[4]; /* zero: room to grow in a minor version */
} sluice_table_stats;

/* The longest key a table stores as itself, in bytes.  Keys of up to 16
 * bytes (an IPv6 address, two 64-bit ids) are stored inline; longer ones
 * cost one allocation of their length.
 *
 * Long keys.  A key of any length is a key: no length escapes its limit.
 * A key longer than the table's cap -- SLUICE_MAX_KEY_BYTES for a table of
 * sluice_table_new(), max_key_bytes for a table in a shared region -- is
 * held by its digest: SipHash-2-4 with 128-bit output, keyed by a key
 * derived from the table's secret random seed (a shared region's seed lives
 * in the region, so every process digests alike), hashed in O(length) by
 * every call that names the key.  The digest is marked apart from every
 * key held as itself, so a long key never equals a short one (its own 16
 * digest bytes included).  Two distinct long keys share one limit only if
 * their digests collide: a chance of at most 2^-64 per pair (2^-128 for a
 * random pair; the seed is secret, so chosen keys do no better), or about
 * n^2 / 2^65 for n long keys.  Every function that takes a key agrees:
 * decisions, bursts, peek, remove, reset, overrides and composite refs
 * (sluice_ref_key); sluice_table_scan() gives such a key as its 16 digest
 * bytes with SLUICE_KEY_DIGEST in state->flags.  The sketch of the keys
 * refused most counts a key's first bytes (sluice_table_set_top). */
#define SLUICE_MAX_KEY_BYTES 65536

/* Flags for sluice_table_new_flags(). */
#define SLUICE_TABLE_EVICT_LRU 1u /* when full of keys in use, drop the least
                                   * recently used one (sampled) instead of
                                   * refusing the new key */
#define SLUICE_TABLE_RECLAIM_WHEN_FULL 2u /* drop keys at rest only when room
                                   * is needed: what every table does now;
                                   * accepted, changes nothing (see
                                   * sluice_table_new_flags) */

/* Make a table whose keys each get a limiter built from `spec`.  At most
 * `max_keys` keys (1 .. 2^32) are held at once; the table never holds more
 * and never grows its memory past what max_keys keys need (bytes per key in
 * docs/tables.md).  A key whose limiter is back at rest (full bucket, empty
 * window, no water) carries no information: it stays where it is, and its
 * next request is decided on it in place (as a fresh limiter would decide,
 * at the cost of a key in use), until a new key wants its room -- the
 * table holds max_keys keys, or the key's shard is full.  Then keys at rest
 * are reclaimed, without changing any decision, a few at a time, found
 * through a timing wheel of the keys' rest times (never a scan of the
 * table).  So sluice_table_stats_get()'s `keys` counts the keys held, at
 * rest or not; the keys in use are at most that.
 * When max_keys keys are held and none is at rest, a request for a new key
 * is refused (see sluice_table_try_acquire_at): this default policy never
 * admits more than the contract would.  Keys are hashed with SipHash-1-3
 * under a random per-table seed, so chosen keys cannot flood one bucket.
 * Returns NULL with a reason in `err` on a bad spec, a bad max_keys or no
 * memory.  Thread-safe. */
sluice_table *sluice_table_new(const char *spec, size_t max_keys, char *err,
                               size_t errlen);

/* sluice_table_new() with flags (0 or an OR of):
 *
 *  SLUICE_TABLE_EVICT_LRU: a full table drops the least recently used key
 *  (the oldest latest-admission time among a sample of 8 held keys of the
 *  new key's shard, as Redis's allkeys-lru) instead of refusing (a new key
 *  is still refused if its shard holds no key at all while the others fill
 *  the table).  An evicted key that was not at rest loses its state: its
 *  next request starts a fresh limiter (full bucket, empty window), so that
 *  key may then get up to one more burst than the contract allows; keys
 *  never evicted keep the contract exactly.
 *
 *  SLUICE_TABLE_RECLAIM_WHEN_FULL: keys at rest are dropped only when a
 *  shard needs room for a new key.  Every table does this now (before,
 *  without the flag, a sweep dropped keys at rest as calls went by, and a
 *  key that came back was inserted again, at twice the cost); the flag is
 *  accepted and changes nothing.  A table reclaims by its own clock, the
 *  latest time any call showed it; a key whose own requests run behind that
 *  clock (callers whose times are out of order across keys, such as a
 *  trace that interleaves keys) can then look at rest when it is not, and
 *  lose its state: this can only happen once the table fills (and, for a
 *  table in a composite, sluice_composite_try_acquire_at, when its lock
 *  takes a step of the wheel).
 *
 * Thread-safe. */
sluice_table *sluice_table_new_flags(const char *spec, size_t max_keys,
                                  unsigned flags, char *err, size_t errlen);

/* Free a table and every limiter in it.  NULL is a no-op.  No other call may
 * be using `t` at the same time.  With table reservations open
 * (sluice_table_reserve_at), the table lives on for them only, and is
 * freed when the last is settled or cancelled; a handle of a shared region
 * then still uses the region: memory given to sluice_table_attach must
 * stay mapped until then (sluice_table_open's mapping is the handle's, and
 * is unmapped with it). */
void sluice_table_free(sluice_table *t);

/* sluice_try_acquire_at() on the limiter of `key` (keylen bytes, any bytes,
 * any length: one longer than SLUICE_MAX_KEY_BYTES is held by its digest,
 * see "Long keys" above; key may be NULL when keylen is 0).  A key seen
 * for the first time gets a fresh limiter (a probe, or a request no fresh
 * limiter could admit, is decided without making the key).  Returns false
 * and takes nothing, with res->error telling why, when key is NULL with
 * keylen > 0 (SLUICE_EINVAL, retry_after_ns = -1), when
 * memory runs out (SLUICE_ENOMEM, retry_after_ns = -1), or when the table
 * holds max_keys keys, none at rest (SLUICE_EFULL; retry_after_ns is a lower
 * bound on the time until the first held key comes to rest -- the next time
 * the table's timing wheel looks at a key, exact for tables of up to 256
 * keys when the key's wheel slot is small -- so a client retrying then is
 * never late, and may be refused again with a new estimate; -1 if
 * unknown).  Decisions for different keys run in parallel (the table is
 * sharded); decisions for one key are exactly the contract's for some order
 * of the calls.  Thread-safe. */
bool sluice_table_try_acquire_at(sluice_table *t, const void *key,
                                 size_t keylen, uint64_t permits,
                                 uint64_t now_ns, sluice_result *res);

/* Decide n requests on one table at now_ns: exactly as n calls of
 * sluice_table_try_acquire_at() in index order.  keys[i] has keylens[i]
 * bytes; permits may be NULL (1 each); results[i] receives decision i.
 * Returns how many were allowed.
 *
 * Request i is sluice_table_try_acquire_at(t, keys[i], keylens[i],
 * permits ? permits[i] : 1, now_ns, &results[i]), with all its rules: a
 * key may repeat within a burst (each occurrence is decided after the ones
 * before it, and sees what they took), keys[i] may be NULL when keylens[i]
 * is 0 (the empty key, as ""), a probe or a request no fresh limiter could
 * admit does not make its key, and the table's counters count every
 * request (all of them when the burst returns: a sluice_table_stats_get()
 * running meanwhile may not see the burst's decisions yet).  A request that cannot be decided is refused on its own, with
 * the reason in results[i].error and the others decided as usual:
 * SLUICE_EINVAL (keys[i] NULL with keylens[i] > 0; also every request
 * when keys or keylens is NULL; a key longer than SLUICE_MAX_KEY_BYTES is
 * decided on its digest, as one call),
 * SLUICE_EFULL or SLUICE_ENOMEM (as for one call).  n = 0 does nothing and
 * returns 0 (the arrays may then be NULL).  Otherwise keys and keylens (and
 * permits and results, when not NULL) hold n elements each; results may be
 * NULL when only the count is wanted, and must not overlap the others.  The
 * burst reads the arrays and the key bytes, writes only results, and keeps
 * no pointer after it returns.
 *
 * Faster than n calls on tables larger than the CPU's caches: each key is
 * hashed and its part of the table asked for 32 requests ahead of its
 * decision, so the cache misses of a burst overlap (as DPDK's
 * rte_hash_lookup_bulk);
 * docs/benchmarks.md gives the cost.  Thread-safe, as the single call:
 * other threads may decide on the same table meanwhile, and their calls may
 * come between the burst's requests (a burst is not one atomic step).  It
 * holds one shard lock at a time, as the single call does, for at most 32
 * consecutive requests of that shard. */
size_t sluice_table_try_acquire_burst_at(sluice_table *t, size_t n,
                                         const void *const keys[],
                                         const size_t keylens[],
                                         const uint64_t permits[],
                                         uint64_t now_ns,
                                         sluice_result results[]);

/* sluice_table_try_acquire_at() at the clock the table's spec names:
 * CLOCK_MONOTONIC, or CLOCK_MONOTONIC_COARSE for `clock=coarse` (see Clocks
 * above).  `res` may be NULL.  Thread-safe. */
bool sluice_table_try_acquire(sluice_table *t, const void *key, size_t keylen,
                              uint64_t permits, sluice_result *res);

/* The table's clock now, in nanoseconds, as sluice_limiter_now_ns() for a
 * limiter: the time sluice_table_try_acquire() reads, on the axis of the
 * table's `_at` functions (the epoch's for a calendar quota, tz=; the
 * monotonic clock's otherwise).  For a table in shared memory, the spec it
 * was attached with names the clock; a spec change keeps the axis.  t ==
 * NULL gives 0.  Thread-safe. */
uint64_t sluice_table_now_ns(const sluice_table *t);

/* Copy the table's counters into `out`.  Thread-safe. */
void sluice_table_stats_get(const sluice_table *t, sluice_table_stats *out);

/* ---- the keys refused most ---- */

/* The most key bytes a sketch keeps, and the most counters per shard. */
#define SLUICE_TOP_KEY_MAX 256
#define SLUICE_TOP_COUNTERS_MAX 65536

/* One key of sluice_table_top_refused(). */
typedef struct sluice_top_entry {
    uint64_t count;  /* refusals counted for the key: at least its true
                      * number (since the sketch was set), at most that plus
                      * `error` */
    uint64_t error;  /* the most `count` can exceed the true number */
    size_t keylen;   /* bytes in key[], 0 .. the sketch's max_key_bytes */
    bool truncated;  /* the key was longer than max_key_bytes: key[] holds
                      * its first max_key_bytes bytes, and every key with
                      * those first bytes is counted under this entry */
    unsigned char key[SLUICE_TOP_KEY_MAX]; /* the key's bytes (not
                      * NUL-terminated) */
    uint64_t reserved_[2]; /* zero: room to grow in a minor version */
} sluice_top_entry;

/* Count, from now on, which keys the table refuses and how often, in a
 * bounded heavy-hitters sketch (Space-Saving): `counters` counters
 * (1 .. SLUICE_TOP_COUNTERS_MAX) for each of the table's shards (1 shard
 * for max_keys <= 256, then one per 256 keys up to 64), keys kept to their
 * first `max_key_bytes` bytes (1 .. SLUICE_TOP_KEY_MAX; a longer key counts
 * as its prefix, marked truncated).  Off by default: a table without it
 * does no work for it.  Every request the table answers false (the
 * algorithm's refusal, SLUICE_EFULL, SLUICE_EINVAL for a key too long,
 * SLUICE_ENOMEM), by sluice_table_try_acquire(_at), in a burst
 * (sluice_table_try_acquire_burst_at) or as a part of a refused composite
 * decision, counts once for its key.
 *
 * All the memory is allocated here, never later: per shard, about
 * 64 + counters * (52 + max_key_bytes) + 32..64 * counters bytes (16 counters
 * of 64-byte keys: about 2.4 KiB a shard), and per table 15 records of
 * 64 + max_key_bytes bytes, each rounded up to 64 (about 2 KiB for keys of
 * up to 64 bytes).  Once a thread has refused a key twice in a row, its
 * refusals of that key cost one store to that thread's own record (no
 * lock, nothing another thread writes; other keys may come between):
 * two threads refusing one hot key share no cache line for it.  Any other
 * refusal costs one short lock (the sketch's own, per shard) and O(1)
 * steps; so does every 256th refusal of one key by one thread.  Threads beyond the first 15 alive count every refusal
 * under the lock.  Admissions cost nothing (docs/benchmarks.md has the
 * figures).
 *
 * Error bound (docs/metrics.md): with N refusals made before a read
 * (sluice_table_top_refused, the metrics) and m = counters, each reported
 * count exceeds the key's true refusals by at most its `error`, which is
 * at most N/m, and is never below them; every key refused more than N/m
 * times is in the sketch, so it is among the top `max` read when fewer
 * than `max` keys have been counted more.  A read first moves the refusals
 * threads hold pending into the sketch, so it misses none made before it
 * began; ones made while it runs may or may not be counted.
 * Returns 0, or SLUICE_EINVAL (t NULL, a bound out of range, or a sketch
 * already set), SLUICE_ENOMEM (nothing changed).  Thread-safe: it may be
 * called while decisions run (refusals before it are not counted). */
int sluice_table_set_top(sluice_table *t, size_t counters, size_t max_key_bytes);

/* The at most `max` keys the table refused most, most first (ties in the
 * order of the key bytes), copied into out[0 .. *n).  Every thread's
 * pending refusals are first moved into the sketch (each refusal made
 * before the call is counted); then the entries are read one shard at a
 * time while decisions go on; nothing is allocated.
 * Returns 0, SLUICE_ENOENT (no sketch: see sluice_table_set_top; *n = 0),
 * or SLUICE_EINVAL (t or n NULL, or out NULL with max > 0).  Thread-safe. */
int sluice_table_top_refused(const sluice_table *t, sluice_top_entry out[], size_t max,
                             size_t *n);

/* ------------------------------------------------------------------------ */
/* Key operations on tables: remove, reset, peek, scan                       */
/*                                                                          */
/* For operators and tests.  Each takes the key's shard lock for the time of
 * a lookup (scan: of a bounded walk), so all are thread-safe with each other
 * and with concurrent decisions, and each is atomic with respect to the
 * decisions on the key it touches.  Keys are as for
 * sluice_table_try_acquire_at(): any length (a long one by its digest),
 * key may be NULL when keylen is 0; the key bytes need only live for the call. */

/* What a table holds for one key.
 *  last_ns  the latest time the key's limiter has seen (its latest
 *           admission's time: an earlier request counts as this time).
 *  rest_ns  the earliest time from which the limiter is back at rest with
 *           no further traffic (full bucket, empty window, no water):
 *           from then on the key decides as a fresh one, and the table may
 *           drop it (reclaiming).
 * Both are 0 for a key the table does not hold. */
typedef struct sluice_key_state {
    uint64_t last_ns;
    uint64_t rest_ns;
    uint64_t flags;        /* sluice_table_scan(): SLUICE_KEY_DIGEST or 0 */
    uint64_t reserved_[1]; /* zero: room to grow in a minor version */
} sluice_key_state;

/* sluice_key_state.flags, as sluice_table_scan() gives a key: the table
 * holds the key by its digest (a key longer than the table's cap: see
 * sluice_table_try_acquire_at), and the bytes given are the 16 digest
 * bytes, not a key -- passing them back to sluice_table_remove() or _peek_at
 * names another key (the short key of those bytes), never this one. */
#define SLUICE_KEY_DIGEST 1u

/* Drop `key` and its state: the next request for it starts a fresh limiter
 * (full bucket, empty window), and its place counts no more against
 * max_keys.  Returns 0 when the key was held, SLUICE_ENOENT when it was not
 * (nothing changes), SLUICE_EINVAL for a NULL table or a NULL key with
 * keylen > 0 (nothing changes).
 * Counted in no counter of sluice_table_stats but `keys`.  Thread-safe. */
int sluice_table_remove(sluice_table *t, const void *key, size_t keylen);

/* Put `key`'s limiter back at rest.  A limiter at rest carries no
 * information (a table keeps a key at rest only until its room is wanted,
 * and decides it as a fresh limiter): so a reset drops the key exactly as
 * sluice_table_remove() does (every later decision is the same as after a
 * remove).  It differs only in
 * its answer: 0 whether or not the key was held (a key not held is at rest
 * already), so a reset is idempotent.  SLUICE_EINVAL for the bad arguments
 * of sluice_table_remove() (nothing changes).  Thread-safe. */
int sluice_table_reset(sluice_table *t, const void *key, size_t keylen);

/* A reservation on a key of a table: sluice_reservation's counterpart
 * (docs/decisions.md, section 3.10; docs/tables.md, "Reservations").
 * Filled by sluice_table_reserve_at(); the caller owns it.  It carries its
 * table and its key: the key's hash, its bytes when it has at most 16
 * (longer ones by hash and length alone), and the key's generation, a
 * counter the table moves each time an entry is made for a key of the
 * same generation bucket (docs/tables.md; in a shared region, of the
 * same slot).  A granted reservation holds
 * its table: sluice_table_free() with reservations open leaves the table
 * to the last of them, freed when it is settled or cancelled; so either
 * order of freeing is safe, and every granted reservation must be settled
 * or cancelled (a window's, which cannot be cancelled, is closed by a
 * settle at its own `permits`).  `table`, `state` and the fields after
 * them are private. */
typedef struct sluice_table_reservation {
    uint64_t permits; /* permits taken (0 if refused) */
    uint64_t wait_ns; /* how long to wait before using them */
    uint64_t at_ns;   /* the reserving time + wait_ns, never past 2^63-1 */
    sluice_table *table; /* private: the table that made it (held) */
    uint32_t state;      /* private */
    uint64_t kgen_;      /* private: the entry's stamp (a region: its slot's generation) */
    uint64_t hash_;      /* private: the key's hash, as the table stores it */
    uint32_t keylen_;    /* private: its length code, as stored */
    uint32_t cfg_;       /* private: the key's configuration then (a region: its slot) */
    uint64_t key_[2];    /* private: its bytes (at most 16), zero-padded */
    uint64_t t_ns_;      /* private: the time it was decided at */
    uint64_t d1_[2];     /* private: a bucket's state after it */
    uint64_t serial_;    /* private: the table's configurations then */
} sluice_table_reservation;

/* sluice_reserve_at() on the limiter of `key` (keylen bytes, as for
 * sluice_table_try_acquire_at(); key may be NULL when keylen is 0), with
 * the same rules: a bucket may go into debt up to max_wait_ns, the window
 * algorithms decide as sluice_table_try_acquire_at().  A key seen for the
 * first time is made (a probe, or a request no fresh limiter could admit,
 * is decided without making it).  Returns false and takes nothing, with
 * res->error telling why, for the errors of sluice_table_try_acquire_at()
 * (SLUICE_EINVAL, SLUICE_ENOMEM, SLUICE_EFULL); a table in a shared
 * region serves it too (docs/tables.md, "Reservations").  rv and res may
 * be NULL (rv NULL: the permits are simply taken).  The table's first
 * reservation with rv not NULL allocates its entries' stamps (8 bytes a
 * slot, docs/tables.md, "Reservations"), and returns false with
 * SLUICE_ENOMEM if that fails.  Counts as a request in the table's
 * statistics.
 * Thread-safe: under the lock of the key's shard. */
bool sluice_table_reserve_at(sluice_table *t, const void *key, size_t keylen,
                             uint64_t permits, uint64_t now_ns, uint64_t max_wait_ns,
                             sluice_table_reservation *rv, sluice_result *res);

/* sluice_reservation_cancel_at() on the key the reservation was made on:
 * token-bucket and leaky-bucket only, the same rule.  Returns 0 when the
 * permits went back; SLUICE_ENOENT with nothing given back when it was
 * already cancelled, settled or refused, when its time has come, or when
 * the key's entry is no longer the one reserved on (the key was removed,
 * reset, evicted, or reclaimed at rest and perhaps made again since); a
 * reservation of 0 permits stays open to a settle; SLUICE_EINVAL for NULL,
 * a reservation never made, or another algorithm.  Every answer but
 * SLUICE_EINVAL and the open probe closes the reservation (and releases
 * its table).  Thread-safe; one reservation must not be cancelled or
 * settled by two threads at once. */
int sluice_table_reservation_cancel_at(sluice_table_reservation *rv, uint64_t now_ns);

/* sluice_reservation_settle_at() on the key the reservation was made on:
 * the same rules, exactly (docs/decisions.md, section 3.10), on the key's
 * state.  When the key's entry is no longer the one reserved on (removed,
 * reset, evicted by SLUICE_TABLE_EVICT_LRU, or reclaimed at rest to make
 * room in a full table, and perhaps made again since), the settle changes
 * nothing -- no give-back, no overdraft -- and returns SLUICE_ENOENT: the
 * key's history, the reservation with it, was dropped.  After a change of
 * the table's spec or of an override (sluice_table_reconfigure*,
 * sluice_table_override*) nothing goes back; an excess is still charged.
 * Returns 0 when settled; SLUICE_ENOENT, nothing changed, when already
 * settled, cancelled or refused, or the key's entry is gone; SLUICE_EINVAL
 * for NULL or a reservation never made; SLUICE_ENOMEM, nothing changed,
 * the reservation still open, when a window log cannot grow for the
 * overdraft.  Every other answer closes the reservation (and releases its
 * table).  Does not count as a request.  Thread-safe; one reservation must
 * not be settled or cancelled by two threads at once. */
int sluice_table_reservation_settle_at(sluice_table_reservation *rv, uint64_t actual_permits,
                                       uint64_t now_ns);

/* Look at `key` without making it or writing anything (a pure read: the
 * key's state, the table's clock, its wheel and its counters are left as
 * they are -- but for one step its next decision would take first: a key
 * that missed changes of the table's spec, sluice_table_reconfigure_at(),
 * is carried over them, which is the same state in the new spec's terms).  `res` (may be NULL) receives what sluice_table_try_acquire_at()
 * for `permits` at `now_ns` would answer (allowed, remaining,
 * retry_after_ns, wait_ns), without taking anything; permits = 0 gives the
 * key's state at now_ns as a probe does.  `state` (may be NULL) receives
 * the key's sluice_key_state.  Returns 0 when the table holds the key;
 * SLUICE_ENOENT when it does not: then `res` is what a fresh limiter would
 * answer (a first request for the key gets exactly that, unless the table
 * is full, SLUICE_EFULL, or a long key cannot be copied, SLUICE_ENOMEM) and
 * `state` is zeroed; SLUICE_EINVAL for the bad
 * arguments of sluice_table_remove() (res->error = SLUICE_EINVAL);
 * SLUICE_ENOMEM (res->error too, `state` zeroed) when carrying a
 * sliding-log or sliding-wheel key over a change needs a larger ring and
 * memory runs out.  A held
 * key that has come to rest by now_ns is answered from its state, which is
 * then a fresh limiter's answer too (unless now_ns is earlier than its
 * last_ns: once the table has reclaimed it, it starts afresh at now_ns; see
 * sluice_table_new_flags).  Thread-safe; the answer is the key's state at
 * one instant between the call and its return. */
int sluice_table_peek_at(sluice_table *t, const void *key, size_t keylen,
                         uint64_t permits, uint64_t now_ns, sluice_result *res,
                         sluice_key_state *state);

/* Called by sluice_table_scan() for each key it meets: the key's bytes
 * (keylen of them, a copy valid only during the call), its state, and the
 * caller's `arg`.  No lock is held during the call: it may call any
 * function on the table, sluice_table_remove() on the key included.
 * Returns 0 to go on, anything else to stop the scan there. */
typedef int (*sluice_table_scan_fn)(const void *key, size_t keylen,
                                    const sluice_key_state *state, void *arg);

/* One step of a scan over the table's keys, as Redis's SCAN: start with
 * cursor 0 and pass each call the cursor the last one stored in
 * *next_cursor, until it stores 0.  Each call looks at no more than `count`
 * places of the table (a place: a key given to fn, or a slot of a shard's
 * probe array whose keys were given before, or up to 256 empty slots in a
 * row, or a shard that holds no key) and calls `fn` for each key it gives,
 * in the calling thread.  Guarantees, whatever decisions, inserts,
 * removals, reclaiming and evictions run meanwhile:
 *  - every key held for the whole scan is given to fn at least once ("held
 *    for the whole scan": the table holds it at the first call and is never
 *    without it until the last; a key dropped -- removed, reset, reclaimed
 *    at rest or evicted -- and made again counts as a new key);
 *  - a key is given at most once per time it was made, so a table that
 *    nothing changes gives each key exactly once;
 *  - a key made or dropped during the scan may or may not be given.
 * (The one exception to both: two keys of equal 64-bit hashes under the
 * table's secret seed, when a call ends between them -- a chance of about
 * n^2 / 2^65 that n keys hold such a pair at all.)
 * The cursor is a point in an order of the keys by their hash, not a place
 * in memory: entries move as keys come and go, the hash of a key never
 * does, so a walk in that order, a home slot at a time, meets each held
 * key once (the proof is in src/table/table.c).  Every value is a valid cursor;
 * one is worth nothing on another table.  A full scan costs about
 * (K + E/256 + S) / count calls, K the keys held, E the empty slots (about
 * max_keys / 4 and more, fewer as the table fills) and S its shards (up to
 * 64).  A table in a shared region (sluice_table_attach, _open) scans its
 * own way, with the same guarantees: its cursor is a slot (keys there never
 * move), and a cursor it could not have stored is SLUICE_EINVAL.
 * Returns 0; or fn's nonzero return (the scan
 * stopped after that key: *next_cursor resumes after it); SLUICE_EINVAL for
 * a NULL t, fn or next_cursor, or count = 0 (nothing is called,
 * *next_cursor is left as it is); SLUICE_ENOMEM when keys could not be
 * copied (more than 256 bytes or 16 keys of one home slot; *next_cursor
 * resumes at them).
 * Thread-safe. */
int sluice_table_scan(sluice_table *t, uint64_t cursor, size_t count,
                      sluice_table_scan_fn fn, void *arg, uint64_t *next_cursor);

/* ---- tables shared between processes ---- */

/* A table can live in memory that several processes map (nginx workers,
 * gunicorn, PHP-FPM): every process decides on the same keys, so N
 * processes share one limit, not N.  The handle is a sluice_table, process
 * local: sluice_table_try_acquire(_at), _burst_at (one call per request),
 * _peek_at, _remove, _reset, _scan, _stats_get and the metrics registry
 * work on it as on any table, across processes (a decision is exactly the
 * contract's for some order of every process's calls; stats count every
 * process's decisions).  A refusal or a probe takes no lock: it reads the
 * key's shard, and writes only its count, in a line of the region that only
 * the calling thread writes.  Its keys may be limits of a composite decision
 * (sluice_ref_key; sluice_composite_try_acquire_at says how), all or
 * nothing across processes.  A burst on a shared table is decided one
 * request at a time, each as a single call.  Not on a shared table:
 * sluice_table_set_top (the sketch is one process's memory, and would rank
 * that process's refusals only) and the per-key overrides (they would need
 * a ring of configurations per key in the region): SLUICE_EINVAL, with the
 * reason "a table in a shared region has no overrides" where there is an
 * err (docs/decisions.md, "What a shared table does not do").
 *
 * The region holds no pointers and is never reallocated: keys of up to
 * max_key_bytes bytes (0 .. SLUICE_MAX_KEY_BYTES, fixed per table) live in
 * it as themselves; a longer key, of any length, by its 16-byte digest
 * under the region's seed ("Long keys", above), so max_key_bytes only
 * sizes the slots (each has room for at least 16 bytes).  sliding-log and
 * sliding-wheel keep a ring of up to min(N, L) entries per key (N the
 * window's slots: PERIOD in ns for sliding-log), reserved for every key:
 * min(N, L) must be below 65536 (1 MiB a key), else the spec is refused.
 * Keys at rest are reclaimed when a new key needs room; when none is at
 * rest, the policy of the flags (0: refuse with SLUICE_EFULL;
 * SLUICE_TABLE_EVICT_LRU: evict) applies as in sluice_table_new_flags().
 *
 * A process killed at any instruction (SIGKILL) blocks no other for long --
 * the next process that needs its lock takes it over within microseconds of
 * noticing, and repairs the counts -- and loses at most the decision it was
 * making; no other key is touched.  Every process must see the others'
 * process ids (one pid namespace: a process of another is refused at
 * attach) and /proc (all of them, or none).  Times: every process must pass times
 * on one axis -- sluice_table_try_acquire() reads CLOCK_MONOTONIC, which
 * all processes of one boot share; a region made in another boot (a file
 * that outlived a reboot) is refused.  The design and the proof are in
 * src/table/region_table.c.
 *
 * Changing the spec of a shared table (sluice_table_reconfigure_at,
 * sluice_table_set_limit_at, sluice_table_set_burst_at; same algorithm, as
 * for a limiter; docs/c-api.md, "Changing a limit while it runs") changes it
 * for every process: the region keeps the current configuration, and every handle,
 * in any process, decides under it from its next decision on (one load of
 * a word that only changes write); each key carries over the changes it
 * missed, each at its time, when next held.  The region must hold the new
 * spec: a packed spec's keys stay 16 bytes (a spec that needs more is
 * refused), and for sliding-log and sliding-wheel min(N, L) + 2 must fit
 * the ring each key got for the spec the region was made with (refused
 * otherwise, naming the bound).  Handles attached later must give the
 * current spec.
 *
 * What a damaged region can do.  The processes attached to a region trust
 * each other; still, a region damaged by a crashed writer, a buggy
 * co-tenant or a stray write never makes another process crash, hang, grow
 * without bound or write outside the region.  Every length, offset, count,
 * epoch and holder read from the region is checked before use and every
 * loop over it is bounded: a key length beyond max_key_bytes is skipped, a
 * probe run is cut at its shard's slots, a count that says room where
 * every slot is taken refuses the new key (SLUICE_EFULL) and recounts the
 * shard, a key's configuration outside the remembered ones is decided under
 * the current one (no carry-over), a ring's head and length are cut to its
 * capacity, a configuration text that does not fit the layout is read as
 * the origin's spec, a lock word naming a dead process or a start time of
 * 0 is taken over; a handle keeps at most 4096 parsed configurations, so
 * epochs that keep changing cost no more memory.  What damage can do: give
 * wrong answers (admit too much or too little, report wrong remaining or
 * statistics, lose or mix keys) until the damaged keys are removed or the
 * region is made again.  What no check can undo: a lock word that names a
 * live process at its true start time, or a co-tenant that holds a lock
 * for ever, stalls that shard as any lock would (as a holder stopped by
 * SIGSTOP does); a co-tenant that shrinks a file-backed region under the
 * others makes their next access fault (SIGBUS), as for any mapped file.
 * Refused at attach, with the reason: a region whose init word is 0 over a
 * header that is not all zero (it was not zeroed), one whose layout fields
 * (sizes, where its configurations lie) differ from the spec's, and one
 * made in another pid namespace (the header records the maker's; its lock
 * words would name pids this process cannot see). */

/* The bytes a region for this table needs (a multiple of nothing in
 * particular; map at least this much), or 0 with a one-line reason in err
 * for a bad spec, max_keys (1 .. 2^32), max_key_bytes, or a ring bound
 * too large.  Thread-safe. */
size_t sluice_table_region_size(const char *spec, size_t max_keys,
                                size_t max_key_bytes, char *err,
                                size_t errlen);

/* Place a table in caller memory of `size` bytes at `region` (64-byte
 * aligned; shared by the processes, e.g. nginx's shared zone or an
 * anonymous MAP_SHARED mapping made before fork).  A zeroed region is
 * initialised once, however many processes race to attach; an initialised
 * one is attached.  Refused (NULL, reason in err) when the region holds a
 * table of another spec (its current one: after a change of spec, the new
 * spec attaches and the old is refused), max_keys, max_key_bytes, flags or
 * layout version,
 * or was made in another boot or another pid namespace,
 * when size is below sluice_table_region_size(), or when the region is
 * neither zeroed nor a table (an init word of 0 over a header that is not
 * zero included).  flags: 0 or SLUICE_TABLE_EVICT_LRU
 * (SLUICE_TABLE_RECLAIM_WHEN_FULL is accepted: it is how a shared table
 * always reclaims).  The handle is process local: free it with
 * sluice_table_free(), which leaves the region alone (the caller unmaps
 * it).  A child forked after attaching may use the parent's handle.
 * Thread-safe. */
sluice_table *sluice_table_attach(void *region, size_t size, const char *spec,
                                  size_t max_keys, size_t max_key_bytes,
                                  unsigned flags, char *err, size_t errlen);

/* A table in a named region that unrelated processes create or attach:
 * `path` "/name" (one slash, at the start) is a POSIX shared memory object
 * (shm_open; gone at reboot), anything else a file (mode 0600 when made).
 * The object is made exclusively (O_EXCL) when there is none, and never
 * opened through a symbolic link (O_NOFOLLOW).  Refused, naming the path
 * and the reason: a symbolic link; an object that is not a regular file;
 * one owned by another user than the process's effective uid (root
 * included); one writable by its group or others (a name another user
 * planted first).  The first process sizes it, under the object's flock;
 * a process that finds that lock held for more than 10 s gives up (NULL,
 * "another process held its lock").  Then as sluice_table_attach().  The
 * handle owns its mapping: sluice_table_free() unmaps it, the object stays
 * (see sluice_table_unlink).  Thread-safe. */
sluice_table *sluice_table_open(const char *path, const char *spec,
                                size_t max_keys, size_t max_key_bytes,
                                unsigned flags, char *err, size_t errlen);

/* Remove the name of a region made by sluice_table_open() (shm_unlink or
 * unlink); processes that have it open keep using it.  Returns 0;
 * SLUICE_ENOENT when there is no such name; SLUICE_EBUSY when it is not
 * this process's to remove (EACCES, EPERM, EROFS, EBUSY); SLUICE_EINVAL
 * for a NULL, empty or bad name (a directory, a name too long). */
int sluice_table_unlink(const char *path);

/* ------------------------------------------------------------------------ */
/* Composite decisions: one request against several limits                   */

/* One limit of a composite decision: a limiter, or the key of a table.
 * Make one with sluice_ref_limiter() or sluice_ref_key(); the referenced
 * objects (and the key bytes) need only live for the call. */
typedef struct sluice_limit_ref {
    sluice_limiter *limiter; /* the limiter, or NULL for a table key */
    sluice_table *table;     /* with limiter NULL: the table ... */
    const void *key;         /* ... and the key (may be NULL when keylen is 0) */
    size_t keylen;
    void *reserved_[2]; /* NULL: room to grow (sluice_ref_limiter, sluice_ref_key set it) */
} sluice_limit_ref;

static inline sluice_limit_ref sluice_ref_limiter(sluice_limiter *lim)
{
    sluice_limit_ref r = {lim, NULL, NULL, 0, {NULL, NULL}};
    return r;
}

static inline sluice_limit_ref sluice_ref_key(sluice_table *t, const void *key, size_t keylen)
{
    sluice_limit_ref r = {NULL, t, key, keylen, {NULL, NULL}};
    return r;
}

/* The most limits one composite decision takes. */
#define SLUICE_COMPOSITE_MAX 16

/* Ask for `permits` at `now_ns` against the `n` limits refs[0..n-1] at once
 * (1 <= n <= SLUICE_COMPOSITE_MAX) -- per client AND per route AND global,
 * or 10/s AND 1000/h.  All or nothing: the request is allowed iff every
 * limit allows it, and only then are the permits taken from every limit; a
 * refusal by one limit takes nothing from any.  Returns true when allowed.
 *
 * `res` (may be NULL) receives the combination:
 *   allowed         every limit allowed;
 *   wait_ns         the largest of the limits' (the leaky-bucket shaper's
 *                   wait); 0 when refused;
 *   remaining       the smallest of the limits' remaining; when refused,
 *                   a limit that would have allowed reports its remaining
 *                   without this request's permits (as a probe would);
 *   retry_after_ns  the largest of the refusing limits' values, -1 if any
 *                   of them is -1; 0 when allowed.  (It is each refusing
 *                   limit's own wait, with no other traffic: after it the
 *                   request may still be refused by another limit.)
 *   error           the first non-zero error of a limit, in refs order
 *                   (SLUICE_ENOMEM, SLUICE_EFULL, SLUICE_EINVAL for a table
 *                   key as sluice_table_try_acquire_at), or SLUICE_EINVAL for
 *                   a bad call: n out of range, a ref naming neither or both
 *                   a limiter and a table, or the same limiter (or the same
 *                   key of one table) twice.  A bad call decides nothing.
 * `per_limit` (may be NULL; n entries, in refs order) receives each
 * limit's own answer: `allowed` tells whether that limit allowed the
 * request; when the composite is refused nothing was taken from it, and its
 * remaining is without the permits and its wait_ns 0.
 *
 * One `now_ns` serves every limit, so all must count time on one axis: a
 * calendar quota (tz=) counts from the Unix epoch, the other specs on the
 * monotonic clock (sluice_limiter_now_ns / sluice_table_now_ns of any of
 * them is the time when they agree).  The composite does not look at the
 * clocks (its fast path reads no configuration): a caller whose limits come
 * from a configuration refuses a mix where it reads it, as the nginx module
 * does (docs/nginx.md).
 *
 * A table key seen for the first time gets a fresh limiter only when the
 * whole request is allowed.  permits = 0 is a probe of every limit.  Each
 * limiter's and table's statistics count the request as allowed or denied
 * by the composite.
 *
 * Concurrency.  Every limit's decisions are exactly the contract's for one
 * order of all calls (single and composite), the same order for every
 * limit: no over-admission anywhere, and no permit lost to a refusal
 * elsewhere.  How (docs/composite.md, "Several limits on one request"):
 *  - limiters only, all lock-free (see the head of this file): the call
 *    decides on snapshots of their 16-byte words, writing nothing.  A
 *    refusal with no details asked (res and per_limit NULL) returns at the
 *    first limit that refuses on its snapshot, with no write at all: that
 *    limit refused at that instant, so the composite did.  A refusal with
 *    details, or a probe, reads every word again and, if none moved,
 *    returns with no write at all (all held their snapshots at one
 *    instant).  An admission freezes every word but the last with a compare-and-swap from
 *    its snapshot (the top bit of the word's time half marks it held),
 *    swaps the last from its snapshot to its new value (the instant the
 *    call takes effect), then stores the held words' new values; a failed
 *    CAS unfreezes, unchanged, what it froze and starts over.  It never
 *    waits while it holds a word.
 *  - keys of in-process tables only, each held already (and short, of a
 *    table whose states pack): each key is read without its shard's lock,
 *    as a single decision reads it, between two loads of the shard's
 *    sequence; a refusal or a probe is answered from the snapshot and
 *    writes nothing; an admission takes every shard only if its sequence
 *    has not moved since the read (a compare-and-swap each, never a wait),
 *    stores the new states and releases them -- else it reads again.
 *  - otherwise (new table keys, limiters in the locked path, mixes of
 *    limiters and table keys): every limit is
 *    held -- a frozen word, a limiter's mutex, a key's shard lock -- in one
 *    global order (by address), so no two calls can wait for each other in
 *    a cycle; then decided, committed to all or none, and released.
 *  - keys of tables shared between processes (sluice_table_attach/open;
 *    mixed freely with limiters, in-process tables and other regions): their
 *    shard locks are taken first, in an order every process computes alike
 *    -- by the region's identity (the random seed in its header), then the
 *    shard -- and the process's own limits after them, by address; so no
 *    two calls in any processes wait for each other in a cycle.  Two handles
 *    of one region are one table (the same key through both is a bad
 *    call).  A lock whose holder died (while holding one shard or several)
 *    is taken over and its shard repaired, as a single decision does; the
 *    region's count of keys is recounted once the call holds nothing.
 *    A new key is made only by an admission; a region full of keys in use
 *    refuses (SLUICE_EFULL) and charges nothing.  Each table counts the
 *    request in its statistics.  A process killed during the call: the
 *    request may be charged to some of its region keys and not others (each
 *    key's new state is stored with one flip, key after key) -- at most
 *    that one request's permits lost on some of its limits, as if it had
 *    been admitted and never served; never an admission beyond any limit,
 *    and no other key is touched.
 * A decision on a limiter whose word is held waits for the release (a
 * spin, then yielding the CPU): while composites run, single decisions on
 * their limiters are not lock-free.  Cost: as many compare-and-swaps as
 * the separate decisions, plus bookkeeping -- three lock-free limiters
 * about 2.8-3.1x one admission, three held table keys about 2.5x
 * (docs/benchmarks.md).  Thread-safe. */
bool sluice_composite_try_acquire_at(const sluice_limit_ref *refs, size_t n,
                                     uint64_t permits, uint64_t now_ns,
                                     sluice_result *res, sluice_result *per_limit);

/* As sluice_composite_try_acquire_at, but limit refs[i] is asked for its
 * own permits[i] (n entries; a 0 is a probe of that limit): one request
 * that costs 3 of one limit and 1 of another (Envoy's hits_addend per
 * descriptor).  All or nothing: allowed iff every limit allows its own
 * permits, and only then is each charged its own; a limit asked for 0 is
 * only probed, even in an admission (a new key of its table is not made).  The result combines as
 * above; when refused, a limit that would have allowed reports its
 * remaining without its permits.  With every permits[i] equal it is that
 * call exactly (its lock-free paths); otherwise it takes the general path
 * (every limit held in the global order).  SLUICE_EINVAL in res and
 * per_limit, nothing decided: permits NULL, or a bad call as above.
 * Thread-safe, with the same guarantee as sluice_composite_try_acquire_at. */
bool sluice_composite_try_acquire_n_at(const sluice_limit_ref *refs, const uint64_t *permits,
                                       size_t n, uint64_t now_ns, sluice_result *res,
                                       sluice_result *per_limit);

/* ------------------------------------------------------------------------ */
/* Changing a limit while it runs                                            */

/* Change the spec of a running limiter at `now_ns`, keeping what it has
 * admitted (docs/c-api.md, "Changing a limit while it runs"): the windows keep
 * their admitted permits at their admission times and decide from now_ns
 * on with the new LIMIT and PERIOD (fixed-window: the count of the window
 * of now_ns); token-bucket keeps its tokens, capped at the new burst, and
 * refills at the new rate; leaky-bucket keeps its water and drains at the
 * new rate.  Nothing is admitted that neither the old spec before the
 * change nor the new one after it would admit.  now_ns is clamped to the
 * latest admission, and becomes the limiter's time: a later request with an
 * earlier time counts as now_ns, under the new spec.
 *
 * The algorithm must stay the same, and sliding-wheel's slot width
 * (PERIOD/slots) too (a change of `slots` with PERIOD in proportion is
 * fine): both would need times the state does not keep.  Options may
 * change (burst, capacity, nodelay, clock).
 *
 * Returns 0, or a negative code with a one-line reason naming the offending
 * token in err (NUL-terminated when errlen > 0): SLUICE_EINVAL or
 * SLUICE_ERANGE for a bad spec or a refused change, SLUICE_ENOMEM.  On an
 * error nothing changes.
 *
 * Thread-safe: decisions may run at the same time; each is decided wholly
 * under the old spec or wholly under the new one.  Reconfigurations of one
 * limiter are serialised by its mutex; a lock-free limiter's state word is
 * frozen for the few instructions of the change.  Memory: each change
 * keeps the previous configuration (about 256 bytes) until the limiter is
 * freed, since a decision may still be reading it. */
int sluice_limiter_reconfigure_at(sluice_limiter *lim, const char *spec, uint64_t now_ns,
                                  char *err, size_t errlen);

/* sluice_limiter_reconfigure_at() at the limiter's clock's now. */
int sluice_limiter_reconfigure(sluice_limiter *lim, const char *spec, char *err,
                               size_t errlen);

/* The common single-knob changes, as golang.org/x/time/rate's SetLimitAt
 * and SetBurstAt: the current spec with only LIMIT/PERIOD (`limit` permits
 * per `period_ns` ns; every option, the burst and capacity included, stays
 * as it is; sliding-wheel keeps its slot width), or only the burst
 * (token-bucket) or capacity (leaky-bucket), changed as by
 * sluice_limiter_reconfigure_at().  Returns as it; set_burst on another
 * algorithm is SLUICE_EINVAL.  Thread-safe. */
int sluice_limiter_set_limit_at(sluice_limiter *lim, uint64_t limit, uint64_t period_ns,
                                uint64_t now_ns, char *err, size_t errlen);
int sluice_limiter_set_burst_at(sluice_limiter *lim, uint64_t burst, uint64_t now_ns,
                                char *err, size_t errlen);

/* Change the spec of every key of a table at `now_ns`, as
 * sluice_limiter_reconfigure_at() changes one limiter's: each key keeps
 * what it has admitted and decides from now_ns on under the new spec,
 * exactly as if it had been reconfigured at now_ns (clamped to that key's
 * latest admission, which becomes its time).  Keys made later start under
 * the new spec.  Same rules and errors as sluice_limiter_reconfigure_at():
 * the algorithm must stay, and sliding-wheel's slot width; a bad spec is
 * refused naming its token (SLUICE_EINVAL, SLUICE_ERANGE); SLUICE_ENOMEM;
 * SLUICE_EINVAL too for a spec whose state does not fit the 16 bytes each
 * key of a table made with a packed spec has (a token-bucket or
 * leaky-bucket whose burst * PERIOD/gcd(LIMIT, PERIOD) reaches 2^64,
 * sliding-approx with LIMIT >= 2^32: make a new table); SLUICE_ERANGE after
 * 2^32 - 2 changes.  On an error nothing changes.
 *
 * A table in a shared region (sluice_table_attach, sluice_table_open): the
 * change is made in the region, for every process and every handle (each
 * notices it at its next decision; "tables shared between processes"
 * above), with one more refusal (SLUICE_EINVAL, naming the bound): for
 * sliding-log and sliding-wheel, min(N, L) + 2 must fit the ring each key
 * got for the spec the region was made with.  Its cost there: the region remembers its last
 * 8 configurations; every 7th change first carries every key over (one
 * pass over the region's slots, one shard locked at a time), so no key is
 * ever under a configuration the region forgot.
 *
 * Cost: no key is visited.  The call makes the new configuration and links
 * it after the current one (O(1), under a mutex that only changes take;
 * no shard lock): it returns in microseconds for any number of keys, and
 * no decision waits for it.  Each key, the next time anything holds it
 * (a decision, peek, scan, the reclaiming of keys at rest), first applies
 * every change it missed, in order, each at its time -- a few dozen ns per
 * change missed.  Overrides (sluice_table_override_set_at) keep their own
 * spec.
 *
 * Keys at rest: a change that makes keys come to rest later is followed;
 * one that makes them rest sooner is seen when the table next looks at
 * them, at their old rest time (until then a full table may refuse a new
 * key that could have taken such a key's place).  A table reclaims only
 * when room is wanted anyway.  A
 * key the table no longer holds (reclaimed at rest before the change) comes
 * back fresh under the new spec: a longer window does not see its
 * admissions older than the old window.
 *
 * States cut to 16 bytes: a change that carries more than a packed state
 * holds (sliding-approx counts of 2^32 or more, a leaky-bucket's water
 * beyond 2^64 units) keeps the most that fits, above the new limit: the
 * key refuses as it would, only its recovery may come a little sooner.
 *
 * Thread-safe: decisions on any key may run meanwhile, each wholly under
 * one spec; changes of one table are serialised.  Memory does not grow
 * with changes: a table of sluice_table_new() keeps at most 8 chained
 * configurations (about 200 bytes each) -- the change that would chain a
 * ninth first carries every held key to the newest (one pass over the
 * slots, one shard locked at a time: a few ms for 10^6 keys) and frees the
 * older ones once no call that may still read them runs; a table in a
 * shared region holds the last 8 in the region and a parsed copy of each in
 * the handle (a replaced copy is freed the same way). */
int sluice_table_reconfigure_at(sluice_table *t, const char *spec, uint64_t now_ns,
                                char *err, size_t errlen);

/* sluice_table_reconfigure_at() at the clock of the table's current spec. */
int sluice_table_reconfigure(sluice_table *t, const char *spec, char *err, size_t errlen);

/* The single knobs for a whole table, as sluice_limiter_set_limit_at() and
 * sluice_limiter_set_burst_at(): the current spec with only LIMIT/PERIOD,
 * or only a bucket's burst/capacity, changed as by
 * sluice_table_reconfigure_at().  Same errors (SLUICE_EINVAL for a limit,
 * period or burst of 0, and for set_burst on a window algorithm).
 * Thread-safe. */
int sluice_table_set_limit_at(sluice_table *t, uint64_t limit, uint64_t period_ns,
                              uint64_t now_ns, char *err, size_t errlen);
int sluice_table_set_burst_at(sluice_table *t, uint64_t burst, uint64_t now_ns, char *err,
                              size_t errlen);

/* ------------------------------------------------------------------------ */
/* Per-key overrides                                                          */

/* Some keys of a table may have a spec of their own (an override): a table
 * of "token-bucket 10/s" where "premium-42" gets "token-bucket 1000/s".
 * The override's spec must keep the table's algorithm (and sliding-wheel's
 * slot width), as a change of spec must (sluice_table_reconfigure_at).  A
 * key under an override decides, peeks (its answers and rest time are the
 * override's) and is scanned under it; changes of the table's spec pass it
 * by (the live sluice_table_try_acquire() reads the clock of the table's
 * spec, not an override's clock= option).  Setting, changing or removing
 * an override at now_ns carries the
 * key's state over as a change of spec does: what it has admitted stays,
 * and it decides from now_ns (clamped to its latest admission) under the
 * new spec -- the override's, or after a removal the table's.  The
 * override belongs to the key, not to its entry: it stays when the key is
 * reclaimed at rest, removed or reset (sluice_table_remove), and a key
 * made again finds it.
 *
 * Overrides are kept apart from the keys: an array per shard, sorted by
 * hash, searched only where a key's entry is made, and only in a shard that
 * has overrides.  A key without an override pays nothing when it decides.
 * Their number is bounded: SLUICE_TABLE_OVERRIDES_DEFAULT per table unless
 * sluice_table_set_max_overrides() says otherwise.  Memory: about 32 bytes
 * plus the key's length per override held, and about 200 bytes per set or
 * change, kept until the table is freed (a key may be under it). */
#define SLUICE_TABLE_OVERRIDES_DEFAULT 1024
#define SLUICE_TABLE_OVERRIDES_MAX (1u << 20)

/* Set the most overrides the table may hold: 0 .. SLUICE_TABLE_OVERRIDES_MAX,
 * and not below the number held now.  Returns 0 or SLUICE_EINVAL.
 * Thread-safe. */
int sluice_table_set_max_overrides(sluice_table *t, size_t max);

/* Give `key` (keylen bytes, as for sluice_table_try_acquire_at) the spec
 * `spec` from now_ns on, or change the spec of its override.  A key the
 * table holds is carried over at once; one it does not hold starts under
 * the override when it comes.  Returns 0, or a negative code with a
 * one-line reason naming the offending token in err (NUL-terminated when
 * errlen > 0): SLUICE_EINVAL for a NULL table or spec, a bad key, a bad
 * spec, another algorithm or slot width, or a spec whose state does not fit
 * the table's 16 bytes per key; SLUICE_ERANGE for a number out of range;
 * SLUICE_EFULL when the table holds its most overrides already and key has
 * none; SLUICE_ENOMEM.  A table in a shared region has no overrides: the
 * override calls refuse it with SLUICE_EINVAL.  On an error nothing changes.  Thread-safe: the
 * key's decisions are each wholly under the old spec or the new. */
int sluice_table_override_set_at(sluice_table *t, const void *key, size_t keylen,
                                 const char *spec, uint64_t now_ns, char *err, size_t errlen);

/* Remove key's override at now_ns: a key the table holds is carried over
 * to the table's current spec.  Returns 0, SLUICE_ENOENT when key has no
 * override, SLUICE_EINVAL for a NULL table or a bad key, SLUICE_ENOMEM
 * (nothing changes).  Thread-safe. */
int sluice_table_override_remove_at(sluice_table *t, const void *key, size_t keylen,
                                    uint64_t now_ns);

/* The number of overrides the table holds (0 for NULL).  Thread-safe. */
size_t sluice_table_override_count(const sluice_table *t);

/* The spec of key's override, in the form sluice_limiter_spec_format() writes,
 * into spec (speclen bytes; SLUICE_SPEC_MAX always suffice).  Returns 0,
 * SLUICE_ENOENT when key has none, SLUICE_ENOSPC when speclen is too
 * small, SLUICE_EINVAL for a NULL table or a bad key.  Thread-safe. */
int sluice_table_override_get(sluice_table *t, const void *key, size_t keylen, char *spec,
                              size_t speclen);

/* ------------------------------------------------------------------------ */
/* Timers: the hierarchical timing wheel                                     */

#include "sluice/wheel.h"

/* ------------------------------------------------------------------------ */
/* Asynchronous acquire, through a timing wheel                              */

/* A queue of asynchronous acquires: requests for permits of ONE limiter that
 * do not block a thread but call back, from ONE timing wheel, once the
 * permits are granted -- in FIFO order per queue.  token-bucket and
 * leaky-bucket book the permits when the request is made (as
 * sluice_reserve_at, going into debt if need be) and call back when they
 * are there: for the leaky-bucket shaper, at its wait_ns, so its requests
 * are released at the constant rate, each within one tick of the wheel of
 * its contract time.  The windows wait in line: the head asks at each
 * retry_after_ns, the others wait their turn.  Deadlines are on the axis of
 * the `now_ns` given: the wheel must be driven on the same clock.
 *
 * Lifetimes: the queue, its limiter and its wheel may be freed in any
 * order.  The queue holds the limiter: after sluice_limiter_free() the
 * queue goes on using it, and its memory goes with the queue.  Freeing the
 * wheel first drops the queue's pending requests without calling them (a
 * bucket's booked permits stay taken, as a reservation never cancelled);
 * the queue then refuses new requests with SLUICE_ECANCELED and has only
 * sluice_queue_free() left to call.  Several queues may share a limiter or
 * a wheel; a limiter shared with other callers or queues still decides
 * exactly, but FIFO order holds within each queue only. */
typedef struct sluice_queue sluice_queue; /* opaque */

/* The callback of an asynchronous acquire: `arg` as given, the request's id,
 * and the wheel's time when it fired.  It runs on the thread that advances
 * the wheel (sluice_wheel_advance(), or the wheel's own thread) with no lock
 * of the queue or the wheel held, and may make and cancel requests on any
 * queue, but must not free its own queue or its wheel. */
typedef void (*sluice_grant_fn)(void *arg, uint64_t id, uint64_t now_ns);

/* Make a queue of at most `max` pending requests (0: the default, 4096) for
 * `lim`, called back from `w`.  Takes a reference on `lim` and binds to
 * `w`; owns neither.  Returns NULL with a one-line reason in `err` (when
 * errlen > 0) when lim or w is NULL or memory (or a mutex) cannot be had.
 * Allocates 392 bytes (x86-64), and one node of 120 bytes per pending
 * request.  Must not run at the same time as sluice_wheel_free(w).
 * Thread-safe otherwise. */
sluice_queue *sluice_queue_new(sluice_limiter *lim, sluice_wheel *w, uint32_t max,
                               char *err, size_t errlen);

/* Cancel every pending request (none calls back; a bucket's booked permits
 * stay taken: give them back first with sluice_queue_cancel_at() if the
 * limiter lives on), wait for a callback of the queue running on another
 * thread to return, let go of the limiter and the wheel, and free the queue.
 * No callback of the queue runs after it returns.  NULL is a no-op.  No
 * other call on `q` may be in progress (callbacks excepted) or follow; it
 * must not be called from one of the queue's own callbacks, nor at the same
 * time as sluice_wheel_free() of its wheel. */
void sluice_queue_free(sluice_queue *q);

/* Ask for `permits` at `now_ns` without blocking: `fn(arg, id, now)` runs
 * once they are granted (see above).  Returns 0 and the request's id (>= 1,
 * unique within the queue) in *id (may be NULL), or, with nothing queued
 * and nothing taken:
 *   SLUICE_EFULL      the queue holds `max` requests, or the wheel is full;
 *   SLUICE_ERANGE     `permits` can never be granted (more than the
 *                     capacity; for a bucket, also a wait past 2^63 ns);
 *   SLUICE_ECANCELED  the queue's wheel has been freed;
 *   SLUICE_ENOMEM;
 *   SLUICE_EINVAL     q or fn is NULL.
 * May be called from any callback.  Thread-safe. */
int sluice_queue_acquire_at(sluice_queue *q, uint64_t permits, uint64_t now_ns,
                            sluice_grant_fn fn, void *arg, uint64_t *id);

/* sluice_queue_acquire_at() at sluice_now_ns() (for a wheel driven on that
 * clock, e.g. by sluice_wheel_start()).  Thread-safe. */
int sluice_queue_acquire(sluice_queue *q, uint64_t permits, sluice_grant_fn fn, void *arg,
                         uint64_t *id);

/* Cancel the request `id` of `q` at `now_ns`: 0 when it will never call
 * back (a bucket's booked permits are given back, as
 * sluice_reservation_cancel_at; a window's head that was already granted
 * keeps its permits taken); SLUICE_EBUSY when its callback is running or
 * about to; SLUICE_ENOENT when it has called back already, was cancelled,
 * was dropped with the wheel, or never existed; SLUICE_EINVAL when q is
 * NULL.  May be called from any callback.  Thread-safe. */
int sluice_queue_cancel_at(sluice_queue *q, uint64_t id, uint64_t now_ns);
int sluice_queue_cancel(sluice_queue *q, uint64_t id); /* at sluice_now_ns() */

/* The number of requests pending in `q` (0 for NULL).  Thread-safe. */
size_t sluice_queue_len(sluice_queue *q);

/* Copy the wait histogram of the queue's asynchronous acquires (see
 * sluice_wait_stats: from the request's now_ns to the callback's time) and
 * its cancelled, refused and dropped requests into `out` (all zero for a
 * NULL q).  Counted under the queue's lock, which every queue call takes
 * anyway; this takes it for a copy.  Thread-safe. */
void sluice_queue_wait_stats_get(sluice_queue *q, sluice_wait_stats *out);

/* Metrics: the counters above in the Prometheus text format */
#include "sluice/metrics.h"
#include "sluice/http.h"
/* Concurrency limits: permits held, released by a handle */
#include "sluice/concurrency.h"

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
