/* skeleton.h -- what the table's two placements share: the in-process
 * table (table.c: Robin Hood probing, entries that move, lock-free
 * admissions that freeze a state) and the table in a shared region
 * (region_*.c: keys that never move, two copies of a state and a flip).
 * Private to src/table/.
 *
 * Map:  the read without the lock (PUT, GET, READ_TRIES; the protocol and
 *       its proof: base/seqlock.h); the eviction sample (LRU_SAMPLES);
 *       sizing (sluice__table_sizing); the dispatch of the public table
 *       functions (sluice__table_ops, one per placement, chosen when the
 *       handle is made).
 *
 * What stays per placement: the slot layout and how a decision commits.
 * As src/timer/wheel_core.h is for the two timing wheels. */
#ifndef SLUICE_TABLE_SKELETON_H
#define SLUICE_TABLE_SKELETON_H

#include <math.h>

#include "base/internal.h"
#include "base/seqlock.h"

/* ---- the read without the lock ----------------------------------------- */

/* What a placement's read without the lock loads -- a shard's count, now
 * and due, a slot's header or meta, key words, configuration and state
 * words -- a holder stores with PUT and the read loads with GET, each field
 * with its own size (base/seqlock.h: the protocol and its proof; plain
 * moves on x86-64).  Holders read them plainly or with GET: only holders
 * store (and, in process, admissions without the lock: table.c). */
#define PUT(p, v) SLUICE__PUT(p, v)
#define GET(p) SLUICE__GET(p)

/* Reads tried (each met a holder, or was overtaken by one) before the
 * caller takes the lock. */
#define READ_TRIES 16

/* ---- room ---------------------------------------------------------------- */

/* Keys sampled for an eviction (SLUICE_TABLE_EVICT_LRU): the least recently
 * admitted of this many in the key's shard goes (Redis's approximated LRU). */
#define LRU_SAMPLES 8

/* ---- sizing ---------------------------------------------------------------- */

/* How a table for max_keys keys (1 .. 2^32) is cut, in both placements:
 * one shard per 256 keys, up to 64 (*shard_bits: log2 of their number),
 * each holding at most *ecap keys -- its share plus 6 standard deviations
 * of a random spread (and 64), never more than max_keys -- so that a
 * table reaches max_keys before a shard fills but with odds below 10^-9.
 * Each placement then gives a shard ecap + ecap / load_div + 1 slots
 * (sluice__table_cap): its load factor.  A region's layout is computed
 * from this: changing it changes every region's layout (region_table.c's
 * VERSION). */
static inline void sluice__table_sizing(size_t max_keys, unsigned *shard_bits, uint64_t *ecap)
{
    unsigned bits = 0;
    while (bits < 6 && ((size_t)256 << bits) < max_keys) bits++;
    const unsigned n = 1u << bits;
    const double per = (double)max_keys / n;
    uint64_t e = n == 1 ? max_keys : (uint64_t)(per + 6 * sqrt(per) + 64);
    if (e > max_keys) e = max_keys;
    *shard_bits = bits;
    *ecap = e;
}

/* The slots of a shard for ecap keys at a load of at most
 * load_div / (load_div + 1), at most UINT32_MAX. */
static inline uint32_t sluice__table_cap(uint64_t ecap, unsigned load_div)
{
    const uint64_t cap = ecap + ecap / load_div + 1;
    return cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
}

#endif /* SLUICE_TABLE_SKELETON_H */
