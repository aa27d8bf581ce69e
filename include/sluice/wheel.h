/* sluice/wheel.h -- timers: a hierarchical timing wheel.
 *
 * Included by sluice.h; it can also be included on its own (its error codes
 * are those of sluice/errors.h).  The design, with the table of levels,
 * granularity and reach, is the head comment of src/timer/wheel.c.
 *
 * A wheel holds timers, each a deadline (uint64_t nanoseconds on the
 * caller's monotonic axis), a callback and a pointer.  Scheduling and
 * cancelling cost O(1); timers live in a slab of 48-byte nodes that grows a
 * chunk of 1024 at a time and gives chunks back as they empty, so memory
 * follows the number pending and returns to its starting size when none
 * is.
 *
 * When timers fire.  Time is cut into ticks of tick_ns (default 1 ms).  A
 * timer's due time is its deadline rounded up to a multiple of tick_ns
 * (deadline 1.2 ms, tick 1 ms: due at 2 ms).  sluice_wheel_advance(w, now)
 * fires every pending timer whose due time is <= now, so a timer never fires
 * before its deadline and fires in the first advance() at or after its due
 * time: at most one tick minus 1 ns after its deadline, plus however late
 * the caller is.  This holds at every distance: a timer one year or 2^63 ns
 * away is moved down the levels as time approaches (no precision is lost on
 * the way), and one beyond the last level waits on an overflow list and is
 * re-filed, never fired early.
 *
 * Two ways to drive it:
 *  - by hand: call sluice_wheel_advance(w, now) from your event loop, and
 *    sleep at most until sluice_wheel_next_deadline(w) (e.g. epoll_wait with
 *    a timeout of ceil((next - now) / 1 ms)).  Nothing needs to run while no
 *    timer is due: there is no periodic tick.
 *  - its own thread: sluice_wheel_start(w) runs a thread that sleeps on
 *    CLOCK_MONOTONIC until the next deadline and fires the timers.  Deadlines
 *    are then on the sluice_now_ns() axis.
 *
 * Callbacks run on the thread that calls advance() (or the wheel's own
 * thread) with no lock of the wheel held: a callback may schedule, cancel
 * and reschedule any timer of any wheel, including its own id (which is no
 * longer pending: cancelling it returns SLUICE_EBUSY).  It must not free the
 * wheel.  Timers are fired one at a time; advance() calls are serialised
 * (see sluice_wheel_advance()), so no two callbacks of one wheel run at once.
 *
 * Thread-safety: unless stated otherwise, every function may be called from
 * any thread at any time, also from inside a callback; the wheel protects
 * itself with an internal mutex, held for a few dozen instructions per call
 * (advance(): per timer moved or fired, released every 256 timers moved)
 * and never while a callback runs.
 */
#ifndef SLUICE_WHEEL_H
#define SLUICE_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; what this header declares
 * is part of its exported interface. */
#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility push(default)
#endif

typedef struct sluice_wheel sluice_wheel; /* opaque */

/* A timer's handle: nonzero for a timer that was scheduled (0 is never an
 * id, so it can mean "no timer").  An id names one scheduling only: once the
 * timer has fired or been cancelled, the id is stale and every call with it
 * returns SLUICE_ENOENT, even after its memory holds a new timer (ids carry a
 * 32-bit generation; a stale id could only be mistaken for a new one after
 * its node has been reused 2^32 times).  An id means something only to the
 * wheel that made it: given to another wheel, it may name one of that
 * wheel's timers. */
typedef uint64_t sluice_timer_id;

/* A timer's callback: `arg` as given to sluice_wheel_schedule(), the timer's
 * id (already stale: the timer is no longer pending when its callback runs),
 * and `now_ns`, the time advance() was called with (the latest time the
 * wheel has seen), which is >= the timer's deadline. */
typedef void (*sluice_timer_fn)(void *arg, sluice_timer_id id, uint64_t now_ns);

/* Levels and slots of the wheel (see src/timer/wheel.c): level k has 64 slots of
 * 64^k ticks.  With the default tick of 1 ms the levels reach 2^48 ms (8925
 * years), beyond any uint64_t nanosecond; with tick_ns below 65536 ns the
 * farther deadlines wait on the overflow list. */
#define SLUICE_WHEEL_LEVELS 8
#define SLUICE_WHEEL_SLOT_BITS 6

/* The default tick, 1 ms, and the largest accepted, 2^40 ns (about 18.3
 * minutes). */
#define SLUICE_WHEEL_DEFAULT_TICK_NS 1000000ULL
#define SLUICE_WHEEL_MAX_TICK_NS (1ULL << 40)

/* The largest max_timers, 2^31. */
#define SLUICE_WHEEL_MAX_TIMERS (1ULL << 31)

/* Make a wheel whose time starts at `now_ns` (timers with a deadline at or
 * before it are due at once), with ticks of `tick_ns` nanoseconds (0: the
 * default, 1 ms; at most SLUICE_WHEEL_MAX_TICK_NS) and room for at most
 * `max_timers` pending timers (1 .. SLUICE_WHEEL_MAX_TIMERS); the bound
 * costs nothing until timers are scheduled.  A wheel driven by its own
 * thread should start at sluice_now_ns().
 *
 * Allocates about 9 KiB for the wheel and 48 KiB for the first chunk of 1024
 * timer nodes; the wheel holds exactly that again whenever no timer is
 * pending.  Returns NULL when an argument is refused or memory (or
 * a mutex) cannot be had; then, when errlen > 0, `err` receives a
 * NUL-terminated one-line reason naming the offending argument.  The caller
 * owns the wheel and frees it with sluice_wheel_free().  Thread-safe. */
sluice_wheel *sluice_wheel_new(uint64_t tick_ns, size_t max_timers,
                               uint64_t now_ns, char *err, size_t errlen);

/* Stop the wheel's thread if it runs (as sluice_wheel_stop()), drop every
 * pending timer without calling it, and free the wheel.  NULL is a no-op.
 * No other call on `w` may be in progress or follow, and it must not be
 * called from one of the wheel's callbacks. */
void sluice_wheel_free(sluice_wheel *w);

/* Schedule `fn(arg, id, now)` for `deadline_ns` (any value).  It fires in
 * the first advance() whose now_ns reaches the deadline rounded up to the
 * tick; so a deadline at or before the start of the wheel's current tick
 * fires at the next advance(), whatever time it is given, while one later
 * in the current tick (the wheel's time included) waits for its end.  The wheel does not
 * own `arg`; it must stay valid until the callback has run or the timer has
 * been cancelled.  On success returns 0 and, when `out` is not NULL, stores
 * the timer's id there.  Errors (nothing scheduled, *out untouched):
 *   SLUICE_EINVAL  w or fn is NULL;
 *   SLUICE_EFULL   max_timers timers are pending already;
 *   SLUICE_ENOMEM  the slab had to grow by a chunk and the allocation failed.
 * O(1).  Allocates only when every chunk of nodes the wheel holds is in full
 * use: then one chunk of 1024 (48 KiB), so at most once per 1024 schedules;
 * chunks that become entirely unused are given back (one is kept as a
 * spare).  When the wheel's own thread sleeps past the new deadline, it is
 * woken.
 *
 * Order (see sluice_wheel_advance()): timers fire by deadline, timers of
 * equal deadline in the order they were scheduled.
 *
 * Called from a callback (or on another thread while advance() runs), a
 * timer whose due time is at or before the tick being fired is put off to
 * the next advance() call, never fired in the current one, so a callback
 * that schedules itself "now" runs once per advance() and cannot make one
 * call loop forever; next_deadline() then returns the wheel's time, telling
 * the loop not to sleep.  A later deadline that is still <= the time the
 * running advance() goes to fires in that same call, in order.
 * Thread-safe. */
int sluice_wheel_schedule(sluice_wheel *w, uint64_t deadline_ns,
                          sluice_timer_fn fn, void *arg, sluice_timer_id *out);

/* Move the pending timer `id` to `deadline_ns`, keeping its id, callback and
 * argument (cheaper than cancel + schedule, and it cannot fail for memory:
 * for expiry times that are pushed back on every use).  It is then ordered
 * as if scheduled now.  Returns 0, or:
 *   SLUICE_ENOENT  `id` has fired, was cancelled or never existed;
 *   SLUICE_EBUSY   `id`'s callback is running (on any thread);
 *   SLUICE_EINVAL  w is NULL.
 * O(1).  Thread-safe. */
int sluice_wheel_reschedule(sluice_wheel *w, sluice_timer_id id,
                            uint64_t deadline_ns);

/* Cancel the timer `id`.  Returns
 *   0              it was pending and now never fires;
 *   SLUICE_EBUSY   its callback is running right now, on another thread or
 *                  as the caller (a callback cancelling its own id): it is
 *                  too late to stop it, and the id is stale once it returns;
 *   SLUICE_ENOENT  it has fired, was cancelled already, or never existed
 *                  (including id 0);
 *   SLUICE_EINVAL  w is NULL.
 * Cancelling is always safe, whatever the id.  O(1); allocates nothing, and
 * may free a chunk of the slab that became entirely unused.  Thread-safe. */
int sluice_wheel_cancel(sluice_wheel *w, sluice_timer_id id);

/* Move the wheel's time to `now_ns` (an earlier time than the wheel has seen
 * counts as that time: time only moves forward) and fire every pending
 * timer whose due time (deadline rounded up to the tick) is <= now_ns.
 * Returns how many callbacks it ran.
 *
 * Order: in one call, callbacks run in order of deadline, and timers with
 * equal deadlines in the order they were scheduled (the order of a heap
 * keyed on (deadline, schedule order), as libuv's).  Only timers scheduled
 * while the call runs with a due time at or before the tick being fired are
 * put off to the next call (see sluice_wheel_schedule()); they fire first in
 * that call.
 *
 * Cost: O(number fired + slots visited), independent of the time elapsed:
 * empty slots are skipped with one bit scan per level, so advancing over an
 * idle gap of years costs no more than over one tick.  A timer is moved down
 * from a coarse level to a finer one at most once per level on its way to
 * firing (7 times at most; typically once or twice).
 *
 * One advance at a time: when another advance() is running (on another
 * thread, or the caller is one of its callbacks), this call hands its
 * now_ns to the running one, which fires what that makes due before it
 * returns, and returns 0 at once.
 *
 * Thread-safe.  Callbacks run on the calling thread, with no lock held. */
size_t sluice_wheel_advance(sluice_wheel *w, uint64_t now_ns);

/* The earliest time at which advance() could fire something: a time <= the
 * wheel's time when a timer is due already (advance now), UINT64_MAX when
 * nothing is pending (sleep until woken) -- or when the only timers are due
 * after UINT64_MAX - tick_ns.  Otherwise the due time of the earliest
 * pending timer, exactly, except after that timer was cancelled from a
 * coarse level (>= 1): then it may be earlier (the level keeps a lower bound
 * that a cancel does not raise), and sleeping until it costs one needless
 * wake-up, after which the answer is exact again.  So an event loop that
 * sleeps until next_deadline() and then calls advance() is never late by
 * more than a tick and wakes needlessly at most once per coarse slot whose
 * first timer was cancelled.  O(levels).  Thread-safe. */
uint64_t sluice_wheel_next_deadline(const sluice_wheel *w);

/* The number of timers scheduled and neither fired (their callback started)
 * nor cancelled.  Exact when no other thread is scheduling, cancelling or
 * advancing at the same time.  O(1), lock-free.  Thread-safe. */
size_t sluice_wheel_pending(const sluice_wheel *w);

/* Run a thread that drives the wheel on CLOCK_MONOTONIC (sluice_now_ns()):
 * it sleeps with pthread_cond_timedwait until next_deadline(), calls
 * advance() with the clock's time, and sleeps again; a schedule() or
 * reschedule() that moves the next deadline earlier than its sleep wakes it.
 * With nothing pending it sleeps until a timer is scheduled.  Callbacks then
 * run on that thread.  Calling advance() by hand as well is allowed.
 * Returns 0, SLUICE_EBUSY when the thread runs already, SLUICE_ENOMEM when
 * the thread cannot be created, SLUICE_EINVAL when w is NULL.
 * Thread-safe. */
int sluice_wheel_start(sluice_wheel *w);

/* Stop the wheel's thread and wait for it to exit (a callback it is running
 * completes first).  Pending timers stay pending.  No-op when no thread
 * runs.  Called from a callback running on the wheel's own thread, it asks
 * the thread to exit once the callback returns and returns at once (the
 * thread is joined by the next sluice_wheel_start() or sluice_wheel_free()).
 * Thread-safe. */
void sluice_wheel_stop(sluice_wheel *w);

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_WHEEL_H */
