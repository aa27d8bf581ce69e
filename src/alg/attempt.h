/* attempt.h -- the all-or-nothing protocol of a decision of several limits
 * (a composite), written once.
 *
 *   SLUICE__ATTEMPT  defines the protocol over one path's steps: hold and
 *                    judge every limit, then commit all or none, then let
 *                    go in reverse
 *
 * Rule (docs/decisions.md, 3.7): a request is allowed iff every limit
 * allows it; then, and only then, it is charged to every limit.  Every path
 * that decides a composite is this protocol over steps of its own: the
 * macro defines, for one path, a function that calls that path's step
 * functions by name (PREFIX_hold, ...), so that every compiler inlines
 * them at once and keeps the path's record in registers (through a table
 * of function pointers, clang -O3 kept it in memory: 40% more
 * instructions a composite of limiters):
 *
 *   composite.c, the general path   a hold is a lock, taken in one global
 *        order (limiters, keys of in-process tables, keys of shared tables:
 *        the kinds' ops); prepare makes new keys' entries; take is nothing.
 *   limiter/hold.c, lock-free limiters only   a hold is a snapshot of the
 *        limiter's 16-byte word; take freezes every word but the last from
 *        its snapshot and swaps the last (a compare-and-swap each); confirm
 *        reads the words again.
 *   table/table_hold.c, keys of in-process tables only   a hold is a read
 *        of the key's state words between two loads of its shard's
 *        sequence; take upgrades each shard's sequence to its lock from the
 *        value the read began with; confirm reads the words and sequences
 *        again.
 *
 * The two last are the first with optimistic holds: a snapshot stands for
 * the lock, and the take makes it one, or fails having taken nothing, and
 * the call starts over.  Each proof of what a snapshot stands for stays
 * beside its words (limiter/hold.c, table/table_hold.c).
 *
 * The steps, each given the path's own record c (every one defined; one
 * with nothing to do returns true or does nothing):
 *   hold(c, k)   hold the k-th limit in the path's order and judge the
 *                request on it, writing nothing: 1 allows, 0 refuses;
 *                SLUICE__STOP refuses and decides the call alone (the
 *                others need not be held: asked only when no answer but
 *                the verdict is wanted); SLUICE__AGAIN a hold not to be had
 *                as things stand (start over); SLUICE__HANDOVER not a call
 *                for this path (nothing decided).  A hold that fails leaves
 *                nothing of its own held.
 *   prepare(c)   all allow and permits are asked: the steps that can fail
 *                before anything is written; false refuses (and undoes
 *                them).
 *   take(c)      make every hold exclusive, all or none; false: none
 *                taken, start over (locks: true, the holds are).
 *   store(c, k)  write the k-th limit's new state.
 *   confirm(c)   a refusal or a probe: whether the answers hold together
 *                (every snapshot still as read); false: start over.
 *   settle(c, ok) the final answer, every limit still held.
 *   release(c, k, stored)  let the k-th limit go, in reverse order.
 */
#ifndef SLUICE_ALG_ATTEMPT_H
#define SLUICE_ALG_ATTEMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { SLUICE__HANDOVER = -1, SLUICE__AGAIN = -2, SLUICE__STOP = -3 };

/* Loops over the limits of a composite, unrolled: fully in the copies for
 * a given n, where the loop counters become constants. */
#define SLUICE__UNROLL _Pragma("GCC unroll 4")

/* Defines static int NAME(CTX *c, size_t n, uint64_t permits): the
 * protocol over the steps PREFIX_hold, PREFIX_prepare, PREFIX_take,
 * PREFIX_store, PREFIX_confirm, PREFIX_settle and PREFIX_release, each
 * taking a CTX * first.  It returns 1 (admitted, or a probe -- permits 0
 * -- that every limit allows), 0 (refused), SLUICE__AGAIN (nothing
 * written: start over) or SLUICE__HANDOVER (nothing decided). */
#define SLUICE__ATTEMPT(NAME, CTX, PREFIX)                                                    \
    static inline __attribute__((always_inline)) int NAME(CTX *c, size_t n, uint64_t permits) \
    {                                                                                         \
        bool all = true;                                                                      \
        size_t k = 0;                                                                         \
        int v = 1;                                                                            \
        SLUICE__UNROLL                                                                        \
        for (; k < n; k++) { /* hold and judge */                                             \
            v = PREFIX##_hold(c, k);                                                          \
            if (__builtin_expect(v < 0, 0)) break;                                            \
            all &= v == 1;                                                                    \
        }                                                                                     \
        if (v < 0) { /* let go of what is held, in reverse */                                 \
            while (k-- > 0) PREFIX##_release(c, k, false);                                    \
            return v == SLUICE__STOP ? 0 : v;                                                 \
        }                                                                                     \
        if (all && permits > 0) {                                                             \
            if (PREFIX##_prepare(c)) {                                                        \
                if (!PREFIX##_take(c)) {                                                      \
                    for (k = n; k-- > 0;) PREFIX##_release(c, k, false);                      \
                    return SLUICE__AGAIN;                                                     \
                }                                                                             \
                SLUICE__UNROLL                                                                \
                for (k = 0; k < n; k++) PREFIX##_store(c, k);                                 \
                PREFIX##_settle(c, true);                                                     \
                for (k = n; k-- > 0;) PREFIX##_release(c, k, true);                           \
                return 1;                                                                     \
            }                                                                                 \
            all = false; /* refused: nothing was written */                                   \
        }                                                                                     \
        if (!PREFIX##_confirm(c)) {                                                           \
            for (k = n; k-- > 0;) PREFIX##_release(c, k, false);                              \
            return SLUICE__AGAIN;                                                             \
        }                                                                                     \
        PREFIX##_settle(c, all);                                                              \
        for (k = n; k-- > 0;) PREFIX##_release(c, k, false);                                  \
        return all;                                                                           \
    }

#endif
