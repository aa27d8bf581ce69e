/* divide.h -- division of a 64-bit time by a divisor fixed at _new.
 *
 * A window index is t / W on every decision; a 64-bit `div` costs 15-40
 * cycles, more than the rest of a token-bucket decision.  As compilers do
 * for constant divisors (Granlund and Montgomery, "Division by invariant
 * integers using multiplication", 1994, the round-up variant for N = 64),
 * we precompute, for a divisor d that is not a power of two,
 *
 *     l = ceil(log2 d),   m = floor(2^64 * (2^l - d) / d) + 1   (< 2^64)
 *
 * and then, for every 64-bit n,
 *
 *     t = mulhi(m, n),    n / d = (t + ((n - t) >> 1)) >> (l - 1)
 *
 * exactly (no rounding error for any n); a power of two is a shift.  The
 * tests compare it with `/` on random and edge values.
 *
 * Entry points: sluice__div_make (once, for a divisor), sluice__div_q
 * (each division).
 */
#ifndef SLUICE_DIVIDE_H
#define SLUICE_DIVIDE_H

#include <stdint.h>

typedef struct sluice__div {
    uint64_t d;     /* the divisor, >= 1 */
    uint64_t m;     /* magic multiplier; 0 for a power of two */
    uint8_t shift;  /* l - 1, or log2 d for a power of two */
} sluice__div;

static inline sluice__div sluice__div_make(uint64_t d)
{
    sluice__div v = {d, 0, 0};
    if ((d & (d - 1)) == 0) { /* power of two, including 1 */
        while (((uint64_t)1 << v.shift) < d) v.shift++;
        return v;
    }
    unsigned l = 64 - (unsigned)__builtin_clzll(d - 1); /* ceil(log2 d), 2..64 */
    __extension__ unsigned __int128 two_l = (unsigned __int128)1 << l;
    v.m = (uint64_t)(((two_l - d) << 64) / d + 1);
    v.shift = (uint8_t)(l - 1);
    return v;
}

static inline uint64_t sluice__div_q(const sluice__div *v, uint64_t n)
{
    if (v->m == 0) return n >> v->shift;
    __extension__ unsigned __int128 p = (unsigned __int128)v->m * n;
    uint64_t t = (uint64_t)(p >> 64);
    return (t + ((n - t) >> 1)) >> v->shift;
}

#endif /* SLUICE_DIVIDE_H */
