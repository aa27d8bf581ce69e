/* internal.h -- what every source file of the library shares: the base
 * layer's compatibility and small exact helpers.
 *
 * The algorithm core (the profile, the state, the rows of operations and
 * their dispatch) is the alg layer's: alg/alg.h.  The other modules own
 * their internal headers: counters.h, spin.h, clock.h, siphash.h, text.h,
 * tzif.h here; alg/alg.h, bucket.h, held.h above; shared.h holds what
 * libsluice-redis calls too.
 *
 * Map: compatibility (u128, SLUICE__CAS128, SLUICE__INTERNAL); the clock
 * kinds (sluice__clock, read in base/clock.h); errors (sluice__errf); small
 * exact helpers; filling a result (sluice__deny, _fail, _allow).
 */
#ifndef SLUICE_INTERNAL_H
#define SLUICE_INTERNAL_H

#include "sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/divide.h"
#include "base/shared.h"

__extension__ typedef unsigned __int128 u128;

/* Whether a 16-byte compare-and-swap (cmpxchg16b) is at hand: the packed
 * states of limiters (limiter.c) are decided lock-free with it; elsewhere
 * under a lock.  (Table keys need only an 8-byte one: table.c,
 * commit_free.) */
#if defined(__x86_64__) && defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#define SLUICE__CAS128 1
#else
#define SLUICE__CAS128 0
#endif

#define SLUICE__INTERNAL __attribute__((visibility("hidden")))

/* The live clock a limit reads (a spec's clock= or tz=): base/clock.h. */
typedef enum sluice__clock {
    SLUICE__CLOCK_MONOTONIC, /* CLOCK_MONOTONIC, ns resolution (default) */
    SLUICE__CLOCK_COARSE,    /* CLOCK_MONOTONIC_COARSE, ~1-4 ms resolution */
    SLUICE__CLOCK_REALTIME   /* CLOCK_REALTIME: the Unix epoch (specs with tz=) */
} sluice__clock;

/* Allocation through the installed hooks, the seed source and SipHash-1-3:
 * shared.h (libsluice-redis calls them too). */

/* Write a formatted one-line message into err (errlen may be 0). */
SLUICE__INTERNAL void sluice__errf(char *err, size_t errlen, const char *fmt,
                                   ...) __attribute__((format(printf, 3, 4)));

/* Small exact helpers. */
static inline uint64_t sluice__gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}
static inline uint64_t sluice__min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline u128 sluice__ceil_div(u128 a, u128 b) { return a / b + (a % b != 0); }
/* a - b, or 0 when b > a */
static inline u128 sluice__sub_sat(u128 a, u128 b) { return a > b ? a - b : 0; }

/* a / b for b >= 1, with a 64-bit division when a fits 64 bits. */
static inline u128 sluice__div128(u128 a, uint64_t b)
{
    return (a >> 64) == 0 ? (u128)((uint64_t)a / b) : a / b;
}
static inline u128 sluice__ceil_div64(u128 a, uint64_t b)
{
    return (a >> 64) == 0 ? (u128)((uint64_t)a / b + ((uint64_t)a % b != 0))
                          : sluice__ceil_div(a, b);
}

/* Fill a result (res not NULL). */
static inline bool sluice__deny(sluice_result *res, uint64_t remaining,
                                int64_t retry_after_ns)
{
    *res = (sluice_result){.allowed = false, .remaining = remaining,
                           .retry_after_ns = retry_after_ns};
    return false;
}
/* A refusal the algorithm did not decide (res->error says why). */
static inline bool sluice__fail(sluice_result *res, int code)
{
    *res = (sluice_result){.allowed = false, .retry_after_ns = -1, .error = code};
    return false;
}
static inline bool sluice__allow(sluice_result *res, uint64_t remaining,
                                 uint64_t wait_ns)
{
    *res = (sluice_result){.allowed = true, .wait_ns = wait_ns, .remaining = remaining};
    return true;
}

#endif /* SLUICE_INTERNAL_H */
