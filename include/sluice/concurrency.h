/* sluice/concurrency.h -- concurrency limits: at most N permits held at once.
 *
 * Included by sluice.h; it can also be included on its own.  The spec is
 *
 *     concurrency N [lease=DURATION]
 *
 * (docs/spec.md).  A permit is held from its admission until it is
 * released; with `lease=`, a permit not released within its lease is given
 * back by itself, so a lost release, or a holder that died, cannot leak
 * capacity.  The exact rules are docs/decisions.md section 3.9.
 *
 * A concurrency limit is its own object, sluice_concurrency, not a
 * sluice_limiter: an admission returns a handle (sluice_permit) that must
 * be given back, so the rate limiters' calls, which return nothing to give
 * back, cannot be used on it by mistake (they do not take its type), and
 * a rate spec's sluice_limiter_new() refuses `concurrency` with a pointer
 * here.
 *
 * Example:
 *
 *     sluice_concurrency *c = sluice_concurrency_new("concurrency 8 lease=30s", err, sizeof err);
 *     sluice_permit pm;
 *     if (sluice_acquire_permit_at(c, 1, now_ns, &pm, NULL)) {
 *         ... serve the request ...
 *         sluice_permit_release_at(&pm, later_ns);
 *     }
 */
#ifndef SLUICE_CONCURRENCY_H
#define SLUICE_CONCURRENCY_H

#include "sluice.h" /* sluice_result and the error codes */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice_concurrency sluice_concurrency; /* opaque */

/* A held permit: filled by an admission; the caller owns it.  It carries
 * the limit that admitted it, so it can only ever be released there, and
 * must not be used after that limit is freed.  `permits` is 0 once the
 * handle holds nothing (refused, released, or found expired).  The other
 * fields are private.  Release a permit through one handle: a copy is the
 * same permit, and a release through a second copy returns SLUICE_ENOENT
 * with a lease, or when the limit has since been given to another key of
 * a table; without a lease, see sluice_permit_release_at. */
typedef struct sluice_permit {
    uint64_t permits;           /* permits held by this handle */
    sluice_concurrency *owner;  /* private: the limit that admitted it */
    uint32_t slot;              /* private: the lease book's entry */
    uint32_t gen;               /* private: the entry's generation, or
                                 * (no lease) the limit's epoch */
} sluice_permit;

/* Make a concurrency limit from `concurrency N [lease=DURATION]`, N from 1
 * to 10^12 (with a lease at most 65536: the limit keeps one entry per
 * permit handle held, 32 bytes each, allocated here).  Returns NULL on a
 * bad spec (a one-line reason naming the offending token in err, always
 * NUL-terminated when errlen > 0) or when memory runs out.  Thread-safe. */
sluice_concurrency *sluice_concurrency_new(const char *spec, char *err, size_t errlen);

/* Free the limit; NULL is a no-op.  No other call on it may be running or
 * follow, and its handles become invalid. */
void sluice_concurrency_free(sluice_concurrency *c);

/* Take `permits` at time `now_ns` (ns on the caller's axis, see
 * docs/decisions.md 3.9 for how a lease limit's clock moves).  Returns true
 * and fills *pm with a handle holding them, or returns false and takes
 * nothing (pm->permits = 0).  `permits` = 0 is a probe: allowed, takes
 * nothing, and the handle holds nothing.  res (may be NULL) receives:
 * remaining = N minus the permits held after the decision; for a refusal,
 * retry_after_ns = -1 when permits > N (never), else with a lease the
 * least wait after which enough leases end for the request to pass with no
 * other call, and without a lease INT64_MAX (no wait is known: only a
 * release can help; retry after one).  A refusal also happens while
 * blocking acquirers wait (sluice_acquire_permit): newcomers do not pass
 * them.  A NULL c or pm is refused with res->error = SLUICE_EINVAL.
 * Thread-safe; lock-free without a lease (one compare-and-swap on the
 * count), under the limit's mutex with one. */
bool sluice_acquire_permit_at(sluice_concurrency *c, uint64_t permits, uint64_t now_ns,
                              sluice_permit *pm, sluice_result *res);

/* Block until `permits` are held (0: *pm filled) or timeout_ns has passed
 * (SLUICE_ETIMEDOUT, nothing taken), on CLOCK_MONOTONIC.  Waiters are
 * served in arrival order, each woken only when its permits are free: a
 * release wakes as many waiters as it lets through, no more (no thundering
 * herd), and a waiter that needs more than is free keeps those behind it
 * waiting.  With a lease, the first waiter also wakes when the oldest lease
 * ends.  SLUICE_EINVAL for a NULL c or pm, or permits = 0 or > N.
 * Thread-safe. */
int sluice_acquire_permit(sluice_concurrency *c, uint64_t permits, uint64_t timeout_ns,
                          sluice_permit *pm);

/* Give back what *pm holds, at now_ns.  Returns 0 and sets pm->permits = 0,
 * or returns SLUICE_ENOENT and changes nothing but that: pm holds nothing
 * (never admitted, refused, already released), it is stale (a copy whose
 * permit was released through another copy), or its lease has ended by
 * now_ns (the permits went back by themselves).  SLUICE_EINVAL for a NULL
 * pm.  Without a lease the limit keeps only a count and an epoch, so a
 * release through a second copy of a handle is detected only when it would
 * take the count below zero, or when a table gave the limit to another key
 * since: no call ever releases more permits than were admitted.
 * Thread-safe. */
int sluice_permit_release_at(sluice_permit *pm, uint64_t now_ns);

/* sluice_acquire_permit_at and sluice_permit_release_at at the time of
 * CLOCK_MONOTONIC. */
bool sluice_try_acquire_permit(sluice_concurrency *c, uint64_t permits, sluice_permit *pm);
int sluice_permit_release(sluice_permit *pm);

/* ---- queued acquires, called back from a timing wheel -------------------
 *
 * An acquire that does not block a thread: it waits in the limit's queue of
 * waiters -- the same first-come-first-served line as the blocking
 * sluice_acquire_permit, so neither overtakes the other -- and is called
 * back from the wheel `wh` (sluice/wheel.h, driven on the same clock as
 * now_ns) once a release, or a lease's end, lets it through: one at a time,
 * in the order they asked, each when its permits are free (a request that
 * needs more than is free keeps those behind it waiting).  Or at its
 * deadline, with nothing taken. */

/* The callback of a queued acquire: `arg` as given, the request's id, and
 * `status`: 0 with `pm` holding the permits (copy *pm: it lives for the
 * call only; the caller then owns the permits and releases them as any
 * permit, sluice_permit_release_at), or SLUICE_ETIMEDOUT at the deadline,
 * nothing taken, pm NULL.  `now_ns` is the wheel's time.  It runs on the
 * thread that advances the wheel, with no lock of the limit held, and may
 * acquire, release and cancel on any limit. */
typedef void (*sluice_permit_fn)(void *arg, uint64_t id, int status, sluice_permit *pm,
                                 uint64_t now_ns);

/* Ask for `permits` of c at now_ns, called back by fn from wh: with the
 * permits at the wheel's first advance after they are granted (at once if
 * they are free and nobody waits: the next advance), or with
 * SLUICE_ETIMEDOUT at the first advance at or past deadline_ns (on the
 * axis of now_ns; INT64_MAX or more: none).  Returns 0 and the request's
 * id (>= 1, unique within c) in *id (may be NULL), or, nothing queued and
 * nothing taken: SLUICE_ERANGE for permits > N; SLUICE_EINVAL for a NULL
 * c, wh or fn, or permits 0; SLUICE_EFULL (the wheel is full) or
 * SLUICE_ENOMEM.  While such a request waits, non-blocking admissions on c
 * are refused, as with a blocked waiter.  Memory: one node of about 120
 * bytes per request, and one timer.  The wheel must outlive c's pending
 * requests (cancel them first), and sluice_concurrency_free(c) drops those
 * still pending without calling them back (a granted one's permits go
 * with c); it must not run while wh advances.  Thread-safe. */
int sluice_acquire_permit_async_at(sluice_concurrency *c, sluice_wheel *wh, uint64_t permits,
                                   uint64_t now_ns, uint64_t deadline_ns, sluice_permit_fn fn,
                                   void *arg, uint64_t *id);

/* Cancel the queued acquire `id` of c at now_ns: 0 when it will never call
 * back (if it was granted and not yet called back, its permits are given
 * back at now_ns, letting those behind through); SLUICE_EBUSY when its
 * callback is running or about to; SLUICE_ENOENT when it has called back,
 * was cancelled, or never existed; SLUICE_EINVAL for a NULL c.  May be
 * called from any callback.  Thread-safe. */
int sluice_permit_async_cancel_at(sluice_concurrency *c, uint64_t id, uint64_t now_ns);

/* The permits held at now_ns (with a lease, after the leases ended by then
 * went back): the metrics' gauge.  Thread-safe. */
uint64_t sluice_concurrency_held_at(sluice_concurrency *c, uint64_t now_ns);

/* The permits held as of the limit's latest call, without moving its clock
 * (leases ended since then still count): the metrics' gauge.  Thread-safe. */
uint64_t sluice_concurrency_held(const sluice_concurrency *c);

/* The acquirers waiting now: blocked threads (sluice_acquire_permit) and
 * queued acquires not yet granted.  Thread-safe. */
uint32_t sluice_concurrency_waiting(const sluice_concurrency *c);

/* N, as the spec says (the latest, after sluice_concurrency_reconfigure_at). */
uint64_t sluice_concurrency_limit(const sluice_concurrency *c);

/* Change the limit's spec at now_ns, keeping the permits held
 * (docs/decisions.md 3.9): from then on N is the new spec's -- with more
 * held than the new N, every acquire is refused until releases bring the
 * permits held below it, so at most max(held at the change, new N) are
 * ever held, and new N once those drain -- and every handle releases as
 * before, exactly once.  A new lease applies to the permits held too:
 * each lease ends at its admission plus the new lease (a permit whose new
 * end is at or before now_ns is back at once).  Waiters keep their place
 * (one that asks for more than the new N waits until its deadline).
 * Returns 0, or a negative code with a one-line reason in err (always
 * NUL-terminated when errlen > 0): a bad spec (naming its token),
 * SLUICE_EINVAL for a NULL c or a change that adds or removes the lease
 * (the limit keeps a book of its handles only with one: make a new
 * limit), SLUICE_ENOMEM (a larger leased N needs 32 bytes per permit;
 * nothing changed).  Thread-safe: decisions and releases may run at the
 * same time (each sees the old N or the new); changes of one limit are
 * serialised by the caller. */
int sluice_concurrency_reconfigure_at(sluice_concurrency *c, const char *spec, uint64_t now_ns,
                                      char *err, size_t errlen);
/* The same at the time of CLOCK_MONOTONIC. */
int sluice_concurrency_reconfigure(sluice_concurrency *c, const char *spec, char *err,
                                   size_t errlen);

/* Check a concurrency spec without making a limit; with canon not NULL,
 * write its canonical form there (`concurrency N` and ` lease=D`, D in its
 * largest whole unit).  0, SLUICE_ENOSPC, or a negative code with a
 * one-line reason in err.  Thread-safe. */
int sluice_concurrency_spec_check(const char *spec, char *canon, size_t canonlen, char *err,
                                  size_t errlen);

/* The canonical spec of a limit, as sluice_concurrency_spec_check writes
 * it: its length, or SLUICE_ENOSPC. */
int sluice_concurrency_spec_format(const sluice_concurrency *c, char *buf, size_t buflen);

/* A concurrency limit and rate limits on one request, all or nothing: take
 * `permits` from c and from every limit of refs[0..n) (a composite,
 * sluice_composite_try_acquire_at: limiters and table keys) at now_ns, or
 * from none.  True: *pm holds c's permits -- one release gives them back;
 * the rate limits' permits are spent, as rates are.  When c refuses, the
 * rate limits are not asked and res is c's answer; else res is the
 * composite's, its remaining the smaller of the composite's and c's (c's
 * without the permits when refused).  SLUICE_EINVAL (res->error) for a NULL
 * c, pm or refs, n outside 1 .. SLUICE_COMPOSITE_MAX, or a bad composite.
 * Every limit's decisions are those of one order of all calls: c is held
 * (its other calls wait a moment) while the composite decides.
 * Thread-safe. */
bool sluice_acquire_permit_with_at(sluice_concurrency *c, const sluice_limit_ref *refs, size_t n,
                                   uint64_t permits, uint64_t now_ns, sluice_permit *pm,
                                   sluice_result *res);

/* ---- a table of concurrency limits, one per key -------------------------
 *
 * Each key has its own `concurrency N [lease=D]` limit.  An admission fills
 * a handle of that key's limit: release it with sluice_permit_release_at,
 * as any permit (the table is not needed for it).  Keys are any bytes (0 ..
 * any length), held by a 16-byte keyed digest.  A key holding permits is
 * never dropped; while more than max_keys keys would hold permits, an
 * acquire for a new key is refused with res->error = SLUICE_EFULL (a key
 * that holds nothing is dropped to make room: its limit starts fresh, and a
 * stale handle of it changes nothing).  Memory: max_keys limits at most
 * (each about 200 bytes, plus 32 bytes per N with a lease), made as keys
 * first arrive.
 *
 * Acquires that wait -- blocking (sluice_concurrency_table_acquire) and
 * queued (sluice_concurrency_table_acquire_async_at) -- wait in the key's
 * own line, as on a single limit: strict first-come-first-served per key,
 * blocked threads and queued requests alike, and a release wakes only the
 * waiters it lets through.  A key with a waiter is not at rest: it is never
 * dropped for another key while a blocked call on it has not returned, or
 * a queued request on it has not been called back (or cancelled).  A new
 * key is refused with SLUICE_EFULL at once when every entry is held or
 * waited on: waits are for permits of a key, never for room in the table. */
typedef struct sluice_concurrency_table sluice_concurrency_table; /* opaque */

/* A table for spec `concurrency N [lease=D]` and 1 .. 2^24 keys.  NULL
 * with a one-line reason in err on a bad spec or max_keys, or when memory
 * runs out.  Thread-safe. */
sluice_concurrency_table *sluice_concurrency_table_new(const char *spec, size_t max_keys, char *err,
                                                       size_t errlen);
/* Free the table and every key's limit (their handles become invalid);
 * NULL is a no-op.  No other call on it may be running or follow (a
 * blocking acquire included).  Queued acquires still pending are dropped
 * without being called back (their timers taken off their wheels, which
 * must still exist; a granted one's permits go with the table). */
void sluice_concurrency_table_free(sluice_concurrency_table *t);
/* sluice_acquire_permit_at on the limit of key[0..keylen).  Refused with
 * res->error = SLUICE_EFULL when the key is new and every one of max_keys
 * keys holds permits; SLUICE_EINVAL for a NULL t or pm (or key with
 * keylen > 0); SLUICE_ENOMEM when a new key's limit cannot be made.
 * Thread-safe (a short lock over the lookup and the decision). */
bool sluice_concurrency_table_acquire_at(sluice_concurrency_table *t, const void *key, size_t keylen,
                                         uint64_t permits, uint64_t now_ns, sluice_permit *pm,
                                         sluice_result *res);
/* Block until `permits` of key[0..keylen) are held (0: *pm filled) or
 * timeout_ns has passed, on CLOCK_MONOTONIC: sluice_acquire_permit on the
 * key's limit (the same line as the queued acquires below, strict
 * first-come-first-served per key; with a lease a waiter is also let
 * through when a lease ends).  Returns, with nothing taken and pm->permits
 * = 0 on failure: SLUICE_ETIMEDOUT; SLUICE_EFULL when the key is new and
 * all max_keys keys hold permits or have waiters (not waited for);
 * SLUICE_EINVAL for a NULL t or pm, a NULL key with keylen > 0, or permits
 * 0 or above N; SLUICE_ENOMEM when a new key's limit cannot be made.  res
 * (may be NULL) receives: on success, allowed with remaining = N minus the
 * permits the key held just after (a snapshot: others may move it); on
 * failure, res->error = the code.  The key is held (never dropped for
 * another) from the call until it returns.  Thread-safe; the table must
 * not be freed while a call blocks on it. */
int sluice_concurrency_table_acquire(sluice_concurrency_table *t, const void *key, size_t keylen,
                                     uint64_t permits, uint64_t timeout_ns, sluice_permit *pm,
                                     sluice_result *res);

/* sluice_acquire_permit_async_at on the limit of key[0..keylen): called
 * back by fn from the wheel wh with the permits (status 0, a handle of the
 * key's limit, released by sluice_permit_release_at) once they are granted
 * in the key's line, or with SLUICE_ETIMEDOUT at the first advance at or
 * past deadline_ns (INT64_MAX or more: none).  Returns 0 and the request's
 * id in *id (may be NULL): >= 1, unique within the table (never given to
 * another request of any key), or, nothing queued and nothing taken:
 * SLUICE_ERANGE for permits > N; SLUICE_EINVAL for a NULL t, wh or fn, a
 * NULL key with keylen > 0, or permits 0; SLUICE_EFULL when the key is new
 * and all max_keys keys hold permits or have waiters (the table: not
 * waited for), or when the wheel is full; SLUICE_ENOMEM.  The key is held
 * (never dropped for another) until the request is called back or
 * cancelled.  The wheel must outlive the table's pending requests (cancel
 * them first); sluice_concurrency_table_free drops those still pending
 * without calling them back, and must not run while wh advances.
 * Thread-safe. */
int sluice_concurrency_table_acquire_async_at(sluice_concurrency_table *t, sluice_wheel *wh,
                                              const void *key, size_t keylen, uint64_t permits,
                                              uint64_t now_ns, uint64_t deadline_ns,
                                              sluice_permit_fn fn, void *arg, uint64_t *id);

/* Cancel the queued acquire `id` of key[0..keylen) at now_ns, as
 * sluice_permit_async_cancel_at: 0 when it will never call back (if it was
 * granted and not yet called back, its permits are given back at now_ns);
 * SLUICE_EBUSY when its callback is running or about to; SLUICE_ENOENT
 * when it has called back, was cancelled, never existed, or is another
 * key's (the key is named so that a cancel can only reach its own key's
 * requests: an id given with the wrong key cancels nothing);
 * SLUICE_EINVAL for a NULL t, or a NULL key with keylen > 0.  May be
 * called from any callback.  Thread-safe. */
int sluice_concurrency_table_async_cancel_at(sluice_concurrency_table *t, const void *key,
                                             size_t keylen, uint64_t id, uint64_t now_ns);

/* The acquirers waiting on key[0..keylen) now: blocked threads and queued
 * acquires not yet granted (0 for a key the table does not hold).
 * Thread-safe. */
uint32_t sluice_concurrency_table_waiting(sluice_concurrency_table *t, const void *key,
                                          size_t keylen);

/* The permits the key holds at now_ns (0 for a key the table does not
 * hold).  Thread-safe. */
uint64_t sluice_concurrency_table_held_at(sluice_concurrency_table *t, const void *key,
                                          size_t keylen, uint64_t now_ns);
/* The keys held now (some may hold nothing, until their entry is needed).
 * Thread-safe. */
size_t sluice_concurrency_table_keys(sluice_concurrency_table *t);
/* Change every key's spec at now_ns, as sluice_concurrency_reconfigure_at
 * does for one limit (permits held stay, at most max(held, new N) per
 * key); keys that arrive later get the new spec.  Every key or none: 0, or
 * a negative code with a one-line reason in err (a bad spec, SLUICE_EINVAL
 * for a NULL t or a lease added or removed, SLUICE_ENOMEM).  max_keys
 * cannot change (make a new table).  Thread-safe (acquires on the table
 * wait for it; releases do not). */
int sluice_concurrency_table_reconfigure_at(sluice_concurrency_table *t, const char *spec,
                                            uint64_t now_ns, char *err, size_t errlen);
/* Every key's N (the latest spec's).  Thread-safe. */
uint64_t sluice_concurrency_table_limit(sluice_concurrency_table *t);
/* The permits held by all keys, each as of its latest call (leases ended
 * since still count): the metrics' gauge.  O(max_keys).  Thread-safe. */
uint64_t sluice_concurrency_table_held(sluice_concurrency_table *t);

/* ---- a table of concurrency limits in a shared region -------------------
 *
 * The per-key table above, placed in memory that processes share (nginx's
 * shared zone, an anonymous MAP_SHARED mapping made before fork), so that
 * at most N permits of a key are held across every process.  Its own
 * object, not a sluice_table: a permit must be given back, and the rate
 * tables' calls return nothing to give back (docs/tables.md, "Concurrency
 * limits in a shared region").  Its permits are sluice_region_permit
 * handles, released by sluice_region_permit_release_at (a distinct type:
 * sluice_permit_release_at cannot be given one by mistake).  Acquires do
 * not wait (sluice_concurrency_region_acquire_at), block a thread
 * (sluice_concurrency_region_acquire), or queue and are called back from a
 * timing wheel (sluice_concurrency_region_acquire_async_at).
 *
 * Crash safety.  Each held permit handle records its holder in the region:
 * the process's pid, its start time and its pid namespace (the shard locks
 * name their holders so too).  A process that dies holding permits -- a
 * SIGKILL, a crash -- cannot release them; the region gives them back:
 * an acquire that finds its key without room sweeps the key: it checks
 * up to SLUICE_CONC_REGION_SWEEP of the key's holder entries (a rotating
 * cursor; each holder process asked once: a kill() and a read of /proc)
 * and returns the permits of each whose holder is gone (no such pid, a
 * zombie, or the pid now another process's) -- unless the key's previous
 * sweep freed nothing less than SLUICE_CONC_REGION_SWEEP_GAP_NS (1 ms, on
 * the callers' clock) before, so that a key full of live holders pays for
 * a sweep once a millisecond, not at every refusal.  The bound: once the
 * holder has died (the kernel shows it a zombie, or its parent has reaped
 * it), its permits are back within ceil(H / SLUICE_CONC_REGION_SWEEP)
 * sweeps of its key, H the key's holder entries (= N): for a key with at
 * most SLUICE_CONC_REGION_SWEEP handles held, at the first acquire that
 * finds the key full 1 ms or more after the death (or sooner); for more,
 * at most one such acquire per 1 ms per 16 handles later.  A
 * new key refused for want of room first sweeps so up to 4 held keys of
 * its shard, so a key held only by dead processes, that nobody asks for
 * again, gives its room up too.  A
 * holder killed while it held a shard's lock is recovered as the rate
 * tables' are: the next process to lock the shard takes the lock and
 * recounts the shard's keys from their holder entries.  With `lease=D` a
 * permit also comes back by itself D after its admission, at the next call
 * on its key, whoever holds it.  A key holding permits is never given to
 * another key (it is not at rest); one that holds none may be.
 *
 * The region: sluice_concurrency_region_size() bytes (N <= 65536 in a
 * region: 32 bytes per N per key, as a leased limit's book), zeroed before
 * the first attach.  Every process must share one pid namespace (a region
 * made in another is refused at attach) and see /proc, as for the shared
 * rate tables (sluice_table_attach in sluice.h; the same damage rules:
 * every count, index and holder read from the region is checked before
 * use, and a region damaged by a faulty writer gives wrong answers but
 * never loops without bound nor writes outside itself). */
typedef struct sluice_concurrency_region sluice_concurrency_region; /* opaque */

/* Holder entries a sweep of a key checks, at most; and the least time
 * between two sweeps of a key when the first freed nothing (1 ms). */
#define SLUICE_CONC_REGION_SWEEP 16
#define SLUICE_CONC_REGION_SWEEP_GAP_NS 1000000u
/* How often a blocked acquirer that is not its key's sweeper re-checks
 * (sluice_concurrency_region_acquire): 100 ms; the sweeper's longest nap
 * between sweeps while they find nothing: 16 ms. */
#define SLUICE_CONC_REGION_WAIT_POLL_NS 100000000u
#define SLUICE_CONC_REGION_SWEEPER_NAP_NS 16000000u

/* A permit held in a region: filled by an admission; the caller owns it,
 * and may hand it to another process that has the region attached (a
 * forked child) to release.  Its holder stays the process that acquired
 * it: when that one dies, the permit goes back, whoever has the handle.
 * `permits` is 0 once it holds nothing.  The other fields are private. */
typedef struct sluice_region_permit {
    uint64_t permits;                 /* permits held by this handle */
    sluice_concurrency_region *owner; /* private: the region's handle */
    uint32_t shard, slot, holder;     /* private: where its holder entry is */
    uint32_t gen;                     /* private: the entry's generation */
} sluice_region_permit;

/* The bytes a region for `concurrency N [lease=D]` (N at most 65536) and
 * max_keys keys (1 .. 2^24) needs, or 0 with a one-line reason in err.
 * Thread-safe. */
size_t sluice_concurrency_region_size(const char *spec, size_t max_keys, char *err,
                                      size_t errlen);

/* Place the table in caller memory of `size` bytes at `region` (64-byte
 * aligned, shared by the processes).  A zeroed region is initialised once,
 * however many processes race to attach; an initialised one is attached.
 * Refused (NULL, the reason in err): a bad spec or max_keys, a size below
 * sluice_concurrency_region_size(), a region that is neither zeroed nor
 * such a table (a rate table's included), one of another spec, max_keys
 * or layout version, or made in another boot or pid namespace.  The handle
 * is process local (a child forked after attaching may use it): free it
 * with sluice_concurrency_region_free(), which leaves the region alone.
 * Thread-safe. */
sluice_concurrency_region *sluice_concurrency_region_attach(void *region, size_t size,
                                                            const char *spec, size_t max_keys,
                                                            char *err, size_t errlen);

/* The same in a named region that unrelated processes create or attach,
 * by sluice_table_open's rules (sluice.h): "/name" a POSIX shared memory
 * object, any other path a file; made exclusively (mode 0600), never
 * through a symbolic link, refused when owned by another user or writable
 * by others; sized by the first process under its flock.  Refusals name
 * the path.  The handle owns its mapping (sluice_concurrency_region_free
 * unmaps it); the name stays until sluice_table_unlink(path).
 * Thread-safe. */
sluice_concurrency_region *sluice_concurrency_region_open(const char *path, const char *spec,
                                                          size_t max_keys, char *err,
                                                          size_t errlen);

/* Free a handle (the region stays, and so do its permits; an opened one's
 * mapping is unmapped); NULL is a no-op.  No call on it may be running or
 * follow. */
void sluice_concurrency_region_free(sluice_concurrency_region *r);

/* Take `permits` of key[0..keylen) at now_ns (ns on CLOCK_MONOTONIC's axis:
 * every process of a region passes times of one clock).  True: *pm holds
 * them, recorded as this process's.  False: nothing taken, pm->permits = 0,
 * and res (may be NULL) says why: room (remaining = N minus the permits
 * held; retry_after_ns -1 when permits > N, else with a lease the wait
 * until the earliest lease ends -- a lower bound, retry then -- and
 * without one INT64_MAX: only a release can help), or res->error =
 * SLUICE_EFULL (a new key, and no slot of its shard is free or idle),
 * SLUICE_EINVAL (NULL r or pm, or a NULL key with keylen > 0).  Before a
 * refusal for want of room the key is swept (above: up to
 * SLUICE_CONC_REGION_SWEEP holder entries, dead holders' permits back; at
 * most once a millisecond while sweeps free nothing).  Keys are any bytes,
 * held by a 16-byte keyed digest.  Each key has its own clock, moved by
 * every call on it (docs/decisions.md 3.9): an earlier now_ns counts as the
 * key's latest.  `permits` = 0 is a probe: allowed, nothing taken.
 * Thread-safe, and safe across processes: a short lock on the key's
 * shard. */
bool sluice_concurrency_region_acquire_at(sluice_concurrency_region *r, const void *key,
                                          size_t keylen, uint64_t permits, uint64_t now_ns,
                                          sluice_region_permit *pm, sluice_result *res);

/* Block until `permits` of key[0..keylen) are held -- released by any
 * process, a lease's end, or a dead holder swept -- or timeout_ns has
 * passed, on CLOCK_MONOTONIC (the axis the region's callers pass).
 * Returns 0 with *pm filled (as sluice_concurrency_region_acquire_at), or,
 * nothing taken and pm->permits = 0: SLUICE_ETIMEDOUT; SLUICE_EFULL (a new
 * key, and no room for it: not waited for); SLUICE_EINVAL for a NULL r or
 * pm, a NULL key with keylen > 0, or permits 0 or above N.  res (may be
 * NULL) receives the last decision (res->error the code of a failure).
 *
 * Waking, across processes: waiters sleep on a futex word of their key in
 * the region.  A release that leaves room wakes one sleeping waiter, not
 * all (no thundering herd; a waiter caught between its check and its
 * sleep sees the word moved and re-checks too); that one takes its permits and wakes the next while
 * room is left, or, when its permits do not fit, passes the wake on (each
 * waiter at most once per release).  One waiter of the key (the sweeper)
 * re-checks and sweeps 1 ms (SLUICE_CONC_REGION_SWEEP_GAP_NS) after it
 * sleeps, then after naps that double while it finds nothing, up to
 * SLUICE_CONC_REGION_SWEEPER_NAP_NS (16 ms), so that permits freed by no
 * release -- a dead holder's, swept as in the acquire above, or an ended
 * lease -- reach a waiter within 16 ms (times the sweep's bound, ceil(H /
 * SLUICE_CONC_REGION_SWEEP), for more handles); the others look every
 * SLUICE_CONC_REGION_WAIT_POLL_NS (100 ms), and take the sweeper's role
 * over when its process has died or it left (so for up to that long after
 * the sweeper got its permits, nobody sweeps).  A waiter killed while
 * it waits blocks nobody: at worst the wake it was given is lost, and the
 * room is found at the next re-check.
 *
 * Order: the kernel wakes the sleepers of one word in the order they went
 * to sleep (tasks of normal priority), so waiters are served roughly in
 * arrival order, within a process and across processes; but it is not a
 * strict queue: a non-blocking acquire, or an arriving blocking one, takes
 * free permits before a woken waiter gets to them (it then sleeps again,
 * behind those that slept meanwhile), and a waiter whose permits do not
 * fit lets smaller ones behind it through.  (The in-process
 * sluice_acquire_permit is a strict queue.)  Thread-safe, and safe across
 * processes. */
int sluice_concurrency_region_acquire(sluice_concurrency_region *r, const void *key,
                                      size_t keylen, uint64_t permits, uint64_t timeout_ns,
                                      sluice_region_permit *pm, sluice_result *res);

/* ---- queued acquires on a region, called back from a timing wheel -------
 *
 * A request that blocks no thread: it waits in this process's queue of the
 * handle and is called back from the wheel `wh` (sluice/wheel.h, driven on
 * CLOCK_MONOTONIC's axis, as the region's callers pass) once its permits
 * are held, or at its deadline with nothing taken.  Its node lives in this
 * process; the region sees it as one of the key's waiters (counted in
 * sluice_concurrency_region_waiting and the stats' `waiting`, so that a
 * release in any process moves the key's futex word).
 *
 * How it learns of room: a release through the same handle serves the
 * handle's queue of that key at once (before it wakes a blocked waiter);
 * a release in another process, a lease's end or a dead holder is found by
 * the key's first queued request in this process, which re-checks on its
 * wheel timer -- and sweeps the key as a blocked key's sweeper does -- 1 ms
 * (SLUICE_CONC_REGION_SWEEP_GAP_NS) after it became the first, then after
 * naps that double while it finds nothing and the futex word has not
 * moved, up to SLUICE_CONC_REGION_SWEEPER_NAP_NS (16 ms), and at the key's
 * earliest lease end; room found, or the word moved, starts the naps at
 * 1 ms again.  Bound: room made by another
 * process's release, or a lease's end, is taken within 16 ms plus one tick
 * of the wheel plus however late its driver advances it; a dead holder's
 * permits within ceil(H / SLUICE_CONC_REGION_SWEEP) such re-checks (16 ms
 * each; for a key with at most 16 handles held, one).
 *
 * Order: first come first served among the handle's queued requests of one
 * key -- one whose permits do not fit keeps those behind it waiting.
 * Across processes, and against this process's blocking and non-blocking
 * acquires, it is not a queue: whoever looks first while there is room
 * takes it (a non-blocking acquire does not defer to waiters in a region),
 * so, as for the blocking acquire, roughly arrival order, not strictly. */

/* The callback of a region's queued acquire: `arg` as given, the request's
 * id, and `status`: 0 with `pm` holding the permits (copy *pm: it lives for
 * the call only; the caller then owns the permits and releases them with
 * sluice_region_permit_release_at), or SLUICE_ETIMEDOUT at the deadline,
 * nothing taken, pm NULL.  `now_ns` is the wheel's time.  It runs on the
 * thread that advances the wheel, with no lock of the region or the
 * handle held, and may acquire, release and cancel on any region -- but
 * not free the handle. */
typedef void (*sluice_region_permit_fn)(void *arg, uint64_t id, int status,
                                        sluice_region_permit *pm, uint64_t now_ns);

/* Ask for `permits` of key[0..keylen) at now_ns, called back by fn from
 * wh: with the permits at the wheel's first advance after they are taken
 * (when they are free and no earlier request of this handle waits for the
 * key, they are taken here and called back at the next advance), or with
 * SLUICE_ETIMEDOUT at the first advance at or past deadline_ns (the axis
 * of now_ns; INT64_MAX or more: none).  Returns 0 and the request's id
 * (>= 1, unique within the handle) in *id (may be NULL), or, nothing
 * queued and nothing taken: SLUICE_EINVAL for a NULL r, wh or fn, a NULL
 * key with keylen > 0, or permits 0; SLUICE_ERANGE for permits > N;
 * SLUICE_EFULL for a new key with no room in the region (not queued: as
 * the acquires, a key is made when it is asked for); SLUICE_EFULL from the
 * wheel (max_timers pending) or SLUICE_ENOMEM.  Memory: one node (168
 * bytes on x86-64) per request (the library's allocator), one timer of wh,
 * and per wheel the handle queued on, a binding of 48 bytes kept until
 * either is freed.
 * Lifetimes: the request belongs to the handle and to this process.
 * sluice_concurrency_region_free(r) drops its pending requests without
 * calling them back -- a request's permits taken and not yet called back
 * are released, its count in the key's waiters removed -- and waits for a
 * callback of r running on another thread to return (so it must not be
 * called from one); a child forked after a request queued sees the
 * handle's queue empty, and its free leaves the parent's requests alone.
 * Either may go first: sluice_wheel_free(wh) drops the requests queued
 * on wh the same way (none called back; permits taken released, counts
 * removed) and the handle lives on; the two frees must not run at the
 * same time.  If the process dies, its queued requests block nobody (a
 * release's wake goes to blocked sleepers only; the region's non-blocking
 * acquires never defer to waiters); their count in the key's waiters stays
 * until the key's slot goes to another key, as a killed blocked waiter's.
 * Thread-safe (a short mutex of the handle, then the key's shard lock). */
int sluice_concurrency_region_acquire_async_at(sluice_concurrency_region *r, sluice_wheel *wh,
                                               const void *key, size_t keylen, uint64_t permits,
                                               uint64_t now_ns, uint64_t deadline_ns,
                                               sluice_region_permit_fn fn, void *arg,
                                               uint64_t *id);

/* Cancel the queued acquire `id` of r at now_ns: 0 when it will never call
 * back (taken and not yet called back: its permits are released at now_ns,
 * letting others through); SLUICE_EBUSY when its callback is running or
 * about to; SLUICE_ENOENT when it has called back, was cancelled, or never
 * existed; SLUICE_EINVAL for a NULL r.  May be called from any callback.
 * Thread-safe. */
int sluice_concurrency_region_async_cancel_at(sluice_concurrency_region *r, uint64_t id,
                                              uint64_t now_ns);

/* Give back what *pm holds, at now_ns: 0 (pm->permits = 0), or
 * SLUICE_ENOENT changing nothing else: pm holds nothing, its permits were
 * released through a copy, or they went back (its lease ended by now_ns,
 * or its holder was found dead).  SLUICE_EINVAL for a NULL pm or one whose
 * fields are not the region's.  A release that leaves room while
 * acquirers block on the key wakes one of them
 * (sluice_concurrency_region_acquire).  Thread-safe, across processes. */
int sluice_region_permit_release_at(sluice_region_permit *pm, uint64_t now_ns);

/* The permits key[0..keylen) holds at now_ns (leases ended by then given
 * back; dead holders' permits still count until a sweep returns them): 0
 * for a key the region does not hold.  Thread-safe, across processes. */
uint64_t sluice_concurrency_region_held_at(sluice_concurrency_region *r, const void *key,
                                           size_t keylen, uint64_t now_ns);

/* The acquirers waiting on key[0..keylen) now, in every process: blocked
 * (sluice_concurrency_region_acquire) and queued and not yet granted
 * (sluice_concurrency_region_acquire_async_at); 0 for a key the region
 * does not hold.  A waiter killed while it waited (or whose process died
 * with it queued) still counts until the key's slot goes to another key,
 * so this is an upper bound.  Thread-safe, across
 * processes. */
uint32_t sluice_concurrency_region_waiting(sluice_concurrency_region *r, const void *key,
                                           size_t keylen);

/* The region as a whole, for the metrics (sluice_metrics_add_concurrency_region
 * in sluice/metrics.h), read by sluice_concurrency_region_stats_get. */
typedef struct sluice_concurrency_region_stats {
    uint64_t held;      /* permits held, over every key, each key's as of its
                         * latest call (a lease ended since still counts; a
                         * dead holder's counts until a sweep frees it) */
    uint64_t keys;      /* keys the region holds (some may hold nothing, until
                         * their slot is needed): at most max_keys */
    uint64_t waiting;   /* blocked and queued acquirers, over every key: an upper bound,
                         * as sluice_concurrency_region_waiting */
    uint64_t limit;     /* N, per key */
    uint64_t max_keys;
    uint64_t recovered; /* permits given back because their holder process
                         * died (found by a sweep), since the region was
                         * made: a counter, in every process alike */
} sluice_concurrency_region_stats;

/* Fill *st from the region, every process's keys: one pass over every
 * key's slot head, a shard at a time under the shard's lock (a lock whose
 * holder died is taken over, as by every call), so O(max_keys), bounded
 * by the region's own layout whatever its counts say (a count damaged by
 * a faulty writer gives a wrong number, clamped: held <= keys * N, keys <=
 * max_keys).  Changes nothing (no lease is expired, no clock moved).
 * Returns 0, or SLUICE_EINVAL for a NULL r or st.  Thread-safe, across
 * processes. */
int sluice_concurrency_region_stats_get(sluice_concurrency_region *r,
                                        sluice_concurrency_region_stats *st);

/* N, as the region's spec says (0 for a NULL r).  O(1).  Thread-safe. */
uint64_t sluice_concurrency_region_limit(const sluice_concurrency_region *r);

/* The permits given back because their holder died, since the region was
 * made (stats' `recovered`, without the pass over the keys: O(shards), no
 * lock).  0 for a NULL r.  Thread-safe, across processes. */
uint64_t sluice_concurrency_region_recovered(const sluice_concurrency_region *r);

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_CONCURRENCY_H */
