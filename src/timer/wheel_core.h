/* wheel_core.h -- the core of sluice's hierarchical timing wheels.
 *
 * Two wheels share this core: the public timer wheel (wheel.c, 48-byte
 * timer nodes in FIFO lists) and each table shard's reclaimer (table.c,
 * 4-byte links inside a key's entry, under the shard's lock).  The core
 * decides where a tick is filed and which list must be looked at next; it
 * never sees a timer.  The caller keeps one list per list number, linked
 * however suits it; it files each item through sluice__wcore_file(), which
 * picks the list and marks it occupied, and says when a list loses its last
 * item (sluice__wcore_vacate()) -- the split of an intrusive container,
 * taken one step further: the core holds no links at all, so each user
 * keeps its own link size, its own list discipline and its own locking
 * (the core has none).
 *
 * Ticks and levels.  Time is a count of ticks (the caller picks the unit).
 * Write a tick in base 64: digit k is bits [6k, 6k+6).  The wheel has a
 * current tick `cur`; a tick e >= cur is filed on level
 *
 *     k = index of the most significant base-64 digit in which e and cur
 *         differ (0 when e == cur),
 *
 * in slot (digit k of e), i.e. list number 64k + slot.  With 8 levels (48
 * bits of ticks):
 *
 *   level  slot width (ticks)   e is there when it lies in cur's aligned
 *     0    1                    block of 64 ticks
 *     1    64                   block of 2^12, not cur's block of 64
 *     k    64^k                 block of 64^(k+1), not cur's of 64^k
 *     7    2^42                 block of 2^48, not cur's of 2^42
 *   beyond                      outside cur's block of 2^48: one list
 *                               (SLUICE__WCORE_BEYOND) with a lower bound
 *                               of its ticks
 *
 * Blocks, not distances, decide: e = cur + 1 sits on level 1 when it starts
 * a new block of 64.  A tick earlier than cur is filed as cur.
 *
 * Events.  On level k >= 1 every occupied slot's digit is above cur's (e
 * and cur share the digits above k, and e's digit k is the larger), so its
 * first tick -- cur's digits above k, the slot's digit, zeros below -- lies
 * after cur.  When cur reaches that tick the slot must be emptied and each
 * item filed again by the same rule, now on a lower level (or handled, if
 * due): the cascade.  An item is re-filed at most once per level on its way
 * down, and handled exactly at its tick, never early, never late.  On level
 * 0 the slot is the tick itself; the slot of cur may hold items filed at
 * cur (the table's keys resting within the current tick).  The beyond list
 * is due for re-filing when cur reaches the block of 2^48 that holds its
 * bound.
 *
 * sluice__wcore_next() finds the earliest event: on each level the lowest
 * occupied slot is that level's earliest (one bit scan of the level's 64-bit
 * occupancy word), and the levels are in time order -- every tick of level
 * k lies before every tick of level k + 1, which lie outside the block of
 * 64^(k+1) that holds all of level k -- so the lowest non-empty level gives
 * the next event: O(levels), no loop over ticks, an idle gap of years costs
 * nothing.  One exception: a caller may stop half way through a cascade
 * (the table does, to bound the work of one call), or move cur onto the
 * first tick of a slot without handling that tick yet; the slot, on some
 * level k >= 1 or the beyond list, then starts exactly at cur and comes
 * first.  Ties at cur go to the higher level, so a cascade finishes before
 * the items it brings down to cur are handled.
 *
 * sluice__wcore_step() is the cascade step: it moves cur to the next event
 * if that is at or before a given tick and returns the list to empty.
 * Driving a wheel is then
 *
 *     while ((li = sluice__wcore_step(c, last)) != SLUICE__WCORE_NONE)
 *         empty list li: each item due (its tick <= c->cur) is handled,
 *         every other one filed again by sluice__wcore_file(c, tick);
 *     then c->cur = last, if later.
 *
 * A list being emptied is an ordinary list: items may be unlinked from it
 * meanwhile, and nothing new can be filed there (new ticks >= cur go to
 * lower levels or later slots).
 *
 * The two users drive it in the two ways it allows.  wheel.c files only
 * ticks after cur (a timer due already goes on a list of its own), steps
 * to every event <= the tick of `now`, and fires what is due as soon as
 * cur reaches it.  table.c files ticks >= cur, so the level-0 slot of cur
 * collects the keys coming to rest within the current tick; it steps only
 * to events before the tick of `now` (a tick is handled once wholly past),
 * at most a budget of keys per call, and looks through the current tick's
 * slot when it must know every key at rest.  tests/timer/test_wheel_core.c
 * drives the core both ways against a reference.
 *
 * Every function is static inline, O(1) or O(levels); the state is 72
 * bytes (cur and 8 occupancy words) plus 16 for the beyond list.
 *
 * Entry points: sluice__wcore_init, _level, _list, _file (where an event
 * goes), _vacate, _slot_tick, _next (the next event), _step (the cascade).
 */
#ifndef SLUICE_WHEEL_CORE_H
#define SLUICE_WHEEL_CORE_H

#include <stdbool.h>
#include <stdint.h>

#define SLUICE__WCORE_LEVELS 8
#define SLUICE__WCORE_BITS 6
#define SLUICE__WCORE_SLOTS (1u << SLUICE__WCORE_BITS)                   /* 64 */
#define SLUICE__WCORE_SPAN_BITS (SLUICE__WCORE_LEVELS * SLUICE__WCORE_BITS) /* 48 */
#define SLUICE__WCORE_LISTS (SLUICE__WCORE_LEVELS * SLUICE__WCORE_SLOTS)  /* 512 */
/* List numbers: 0 .. 511 the slots (64 * level + slot), then these two. */
#define SLUICE__WCORE_BEYOND SLUICE__WCORE_LISTS /* outside cur's 2^48 block */
#define SLUICE__WCORE_NONE UINT32_MAX            /* no list */

_Static_assert(SLUICE__WCORE_SPAN_BITS < 64, "the levels leave room beyond them");

typedef struct sluice__wcore {
    uint64_t cur;                        /* the current tick */
    uint64_t occ[SLUICE__WCORE_LEVELS];  /* bit s of occ[k]: list 64k+s non-empty */
    uint64_t beyond_min;                 /* <= every tick on the beyond list */
    bool beyond;                         /* the beyond list is not empty */
} sluice__wcore;

static inline void sluice__wcore_init(sluice__wcore *c, uint64_t cur)
{
    c->cur = cur;
    for (unsigned k = 0; k < SLUICE__WCORE_LEVELS; k++) c->occ[k] = 0;
    c->beyond_min = UINT64_MAX;
    c->beyond = false;
}

static inline unsigned sluice__wcore_level(uint32_t list)
{
    return list / SLUICE__WCORE_SLOTS;
}

/* The list a tick is filed on, relative to cur (a tick before cur counts as
 * cur): 64 * level + slot, or SLUICE__WCORE_BEYOND. */
static inline uint32_t sluice__wcore_list(const sluice__wcore *c, uint64_t e)
{
    if (e <= c->cur) return (uint32_t)c->cur & (SLUICE__WCORE_SLOTS - 1);
    unsigned k = (unsigned)(63 - __builtin_clzll(e ^ c->cur)) / SLUICE__WCORE_BITS;
    if (k >= SLUICE__WCORE_LEVELS) return SLUICE__WCORE_BEYOND;
    return k * SLUICE__WCORE_SLOTS +
           ((unsigned)(e >> (k * SLUICE__WCORE_BITS)) & (SLUICE__WCORE_SLOTS - 1));
}

/* File an item of tick e: returns the list it goes on (as
 * sluice__wcore_list()), which the caller links it into, and marks that
 * list occupied. */
static inline uint32_t sluice__wcore_file(sluice__wcore *c, uint64_t e)
{
    if (e <= c->cur) {
        c->occ[0] |= (uint64_t)1 << (c->cur & (SLUICE__WCORE_SLOTS - 1));
        return (uint32_t)c->cur & (SLUICE__WCORE_SLOTS - 1);
    }
    unsigned k = (unsigned)(63 - __builtin_clzll(e ^ c->cur)) / SLUICE__WCORE_BITS;
    if (k >= SLUICE__WCORE_LEVELS) {
        if (e < c->beyond_min) c->beyond_min = e;
        c->beyond = true;
        return SLUICE__WCORE_BEYOND;
    }
    unsigned slot = (unsigned)(e >> (k * SLUICE__WCORE_BITS)) & (SLUICE__WCORE_SLOTS - 1);
    c->occ[k] |= (uint64_t)1 << slot;
    return k * SLUICE__WCORE_SLOTS + slot;
}

/* List `list` has become empty. */
static inline void sluice__wcore_vacate(sluice__wcore *c, uint32_t list)
{
    if (list < SLUICE__WCORE_LISTS) {
        c->occ[list / SLUICE__WCORE_SLOTS] &= ~((uint64_t)1 << (list % SLUICE__WCORE_SLOTS));
    } else {
        c->beyond_min = UINT64_MAX;
        c->beyond = false;
    }
}

/* The first tick of a slot, relative to cur: the tick at which it is due. */
static inline uint64_t sluice__wcore_slot_tick(const sluice__wcore *c, uint32_t list)
{
    unsigned sh = sluice__wcore_level(list) * SLUICE__WCORE_BITS;
    uint64_t s = list % SLUICE__WCORE_SLOTS;
    /* sh + 6 <= 48 < 64: the shift is defined */
    return (c->cur & ~(((uint64_t)1 << (sh + SLUICE__WCORE_BITS)) - 1)) | s << sh;
}

/* The earliest event: returns its list and stores its tick (>= cur) in
 * *tick, or returns SLUICE__WCORE_NONE (and *tick = UINT64_MAX) when every
 * list is empty. */
static inline uint32_t sluice__wcore_next(const sluice__wcore *c, uint64_t *tick)
{
    const uint64_t span_mask = ((uint64_t)1 << SLUICE__WCORE_SPAN_BITS) - 1;
    /* cur may stop on the beyond list's event (a caller's advance to a
     * tick it does not handle yet): that re-filing comes first */
    if (c->beyond && (c->beyond_min & ~span_mask) <= c->cur) {
        *tick = c->cur;
        return SLUICE__WCORE_BEYOND;
    }
    for (unsigned k = 0; k < SLUICE__WCORE_LEVELS; k++) {
        if (!c->occ[k]) continue;
        uint32_t list = k * SLUICE__WCORE_SLOTS + (uint32_t)__builtin_ctzll(c->occ[k]);
        /* A cascade left half done (or not begun) on a higher level j
         * starts at cur, which then ends in j zero digits: rare, and
         * cheap to rule out. */
        if ((c->cur & (SLUICE__WCORE_SLOTS - 1)) == 0) {
            unsigned top = c->cur ? (unsigned)__builtin_ctzll(c->cur) / SLUICE__WCORE_BITS
                                  : SLUICE__WCORE_LEVELS - 1;
            if (top > SLUICE__WCORE_LEVELS - 1) top = SLUICE__WCORE_LEVELS - 1;
            for (unsigned j = top; j > k; j--) {
                unsigned pos = (unsigned)(c->cur >> (j * SLUICE__WCORE_BITS)) &
                               (SLUICE__WCORE_SLOTS - 1);
                if (c->occ[j] >> pos & 1) {
                    *tick = c->cur;
                    return j * SLUICE__WCORE_SLOTS + pos;
                }
            }
        }
        *tick = sluice__wcore_slot_tick(c, list);
        return list;
    }
    if (c->beyond) {
        *tick = c->beyond_min & ~span_mask;
        return SLUICE__WCORE_BEYOND;
    }
    *tick = UINT64_MAX;
    return SLUICE__WCORE_NONE;
}

/* The cascade step: when the earliest event is at a tick <= last, move cur
 * there and return its list, which the caller then empties (see the head
 * comment); else return SLUICE__WCORE_NONE and leave cur.  For the beyond
 * list the caller detaches the list and calls sluice__wcore_vacate() before
 * re-filing, since some of it may be filed there again. */
static inline uint32_t sluice__wcore_step(sluice__wcore *c, uint64_t last)
{
    uint64_t e;
    uint32_t list = sluice__wcore_next(c, &e);
    if (list == SLUICE__WCORE_NONE || e > last) return SLUICE__WCORE_NONE;
    c->cur = e;
    return list;
}

#endif /* SLUICE_WHEEL_CORE_H */
