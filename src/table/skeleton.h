/* skeleton.h -- what the table's two placements share: the in-process
 * table (table.c: Robin Hood probing, entries that move, lock-free
 * admissions that freeze a state) and the table in a shared region
 * (region_*.c: keys that never move, two copies of a state and a flip).
 * Private to src/table/.
 *
 * Map:  the read without the lock (PUT, GET, READ_TRIES; the protocol and
 *       its proof: base/seqlock.h); the eviction sample (LRU_SAMPLES);
 *       sizing (sluice__table_sizing); configurations retired by a change
 *       of spec, freed once no reader can hold them (sluice__retired); the
 *       dispatch of the public table functions (sluice__table_ops, one per
 *       placement, chosen when the handle is made).
 *
 * What stays per placement: the slot layout and how a decision commits.
 * As src/timer/wheel_core.h is for the two timing wheels. */
#ifndef SLUICE_TABLE_SKELETON_H
#define SLUICE_TABLE_SKELETON_H

#include <math.h>

#include "alg/alg.h"
#include "base/seqlock.h"
#include "table/table.h"

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

/* ---- retired configurations ---------------------------------------------- */

/* A configuration a change of spec replaced (table.c's tcfg, a region
 * handle's parsed rprof) may still be in the hands of a reader section
 * (table.h, sluice__rd_*) that found it before.  Both placements keep such
 * objects on one list, each stamped with the reader epoch it waits out
 * (sluice__rd_retire_stamp(), taken after the object is unlinked from
 * everything a later section could find), and free each once every
 * section running began after its stamp (sluice__rd_min_active() above
 * it).  The list is the owner's, under the owner's lock. */
typedef struct sluice__retired {
    struct sluice__retired *next;
    uint64_t stamp; /* 0: not stamped yet (sluice__retired_stamp) */
} sluice__retired;

/* Put node on *list, stamped `stamp` (0: sluice__retired_stamp later). */
static inline void sluice__retire(sluice__retired **list, sluice__retired *node, uint64_t stamp)
{
    node->stamp = stamp;
    node->next = *list;
    *list = node;
}

/* Stamp the nodes put on *list since the last stamp (those at its head
 * with stamp 0) with `stamp`: for a batch unlinked at once. */
static inline void sluice__retired_stamp(sluice__retired *list, uint64_t stamp)
{
    for (sluice__retired *n = list; n && n->stamp == 0; n = n->next) n->stamp = stamp;
}

/* Free, with free_fn on the object that holds it at byte `off`, each node
 * of *list that no reader section can hold any more; all of them when
 * `all` (the owner is being freed: no section can run on it). */
static inline void sluice__retired_free(sluice__retired **list, size_t off,
                                        void (*free_fn)(void *), bool all)
{
    if (!*list) return;
    const uint64_t min = all ? UINT64_MAX : sluice__rd_min_active();
    for (sluice__retired **pp = list; *pp;) {
        sluice__retired *n = *pp;
        if (all || (n->stamp != 0 && n->stamp < min)) {
            *pp = n->next;
            free_fn((unsigned char *)n - off);
        } else {
            pp = &n->next;
        }
    }
}

/* ---- the dispatch ------------------------------------------------------- */

/* The public table functions of one placement (sluice.h has their
 * arguments and answers).  A handle's ops are chosen once, when it is made
 * (table.c's table_new: in process; sluice__table_wrap, from a region's
 * attach: the region's), and the public functions call through them with
 * the handle's `place` -- the placement's own object (the table itself in
 * process, the region's view in a region) -- the in-process decision
 * inline, behind one compare of the ops pointer.  What
 * a placement does not offer it says in `lacks`: NULL, or why (overrides
 * and the refused-keys sketch: then those calls refuse with SLUICE_EINVAL
 * and that reason). */
typedef struct sluice__table_ops {
    const char *name; /* "in-process", "shared region" */
    bool (*try_acquire_at)(void *place, const void *key, size_t keylen, uint64_t permits,
                           uint64_t now_ns, sluice_result *res);
    size_t (*burst_at)(void *place, size_t n, const void *const keys[], const size_t keylens[],
                       const uint64_t permits[], uint64_t now_ns, sluice_result results[]);
    int (*remove)(void *place, const void *key, size_t keylen);
    int (*peek_at)(void *place, const void *key, size_t keylen, uint64_t permits, uint64_t now_ns,
                   sluice_result *res, sluice_key_state *state);
    void (*stats_get)(const void *place, sluice_table_stats *out);
    int (*scan)(void *place, uint64_t cursor, size_t count, sluice_table_scan_fn fn, void *arg,
                uint64_t *next_cursor, size_t *visited);
    int (*reconfigure_at)(void *place, const char *spec, int knob, uint64_t a, uint64_t b,
                          uint64_t now_ns, char *err, size_t errlen);
    /* Reservations (table_settle.c has the rules and the reservation's
     * states; the in-process table's are there, inline, and these NULL):
     * reserve on key, counted as a request, filling rv's memo
     * (sluice__rv_decide) and the placement's private fields that name the
     * entry; cancel and settle on the entry rv names, if it is still the
     * one: 0, or the answer (SLUICE_ENOENT: it is not, nothing changed). */
    bool (*reserve_at)(void *place, const void *key, size_t keylen, uint64_t permits,
                       uint64_t now_ns, uint64_t max_wait_ns, sluice_table_reservation *rv,
                       sluice_result *res);
    int (*cancel_at)(void *place, const sluice_table_reservation *rv, uint64_t now_ns);
    int (*settle_at)(void *place, const sluice_table_reservation *rv, uint64_t actual_permits,
                     uint64_t now_ns);
    void (*close)(void *place); /* what the placement holds; NULL: nothing */
    const char *lacks;          /* NULL, or why overrides and the sketch are not offered */
} sluice__table_ops;

/* ---- reservations: the rules on a key's state, for both placements -------- */

/* (table_settle.c.)  Reserve `permits` on the state st of profile pf at
 * now_ns (clamped to the state's time here): a bucket's reserve, a window's
 * decision.  When granted and rv is not NULL, rv's public fields and its
 * memo (the time, a bucket's state after it) are filled; the caller fills
 * what names the entry.  Give back a bucket reservation's permits (the
 * cancel's rule): true when they went back.  Settle rv at actual_permits
 * (the units unchanged since: the caller checks): 0, or SLUICE_ENOMEM with
 * nothing changed (a fixed ring cannot take the overdraft).  Each changes
 * st only; the caller stores it. */
SLUICE__INTERNAL bool sluice__rv_decide(const sluice__profile *pf, sluice__state *st,
                                        uint64_t now_ns, uint64_t permits, uint64_t max_wait_ns,
                                        sluice_result *res, sluice_table_reservation *rv);
SLUICE__INTERNAL bool sluice__rv_give_back(const sluice__profile *pf, sluice__state *st,
                                           uint64_t now_ns, const sluice_table_reservation *rv);
SLUICE__INTERNAL int sluice__rv_settle(const sluice__profile *pf, sluice__state *st,
                                       uint64_t now_ns, const sluice_table_reservation *rv,
                                       uint64_t actual_permits);

/* A burst decided one request at a time through `one` (a placement's
 * try_acquire_at), for a placement with no burst of its own: the same
 * answers as n single calls (keys or keylens NULL: each request fails with
 * SLUICE_EINVAL). */
static inline size_t sluice__table_burst_each(void *place,
                                              bool (*one)(void *, const void *, size_t, uint64_t,
                                                          uint64_t, sluice_result *),
                                              size_t n, const void *const keys[],
                                              const size_t keylens[], const uint64_t permits[],
                                              uint64_t now_ns, sluice_result results[])
{
    size_t allowed = 0;
    for (size_t i = 0; i < n; i++) {
        sluice_result *res = results ? &results[i] : NULL;
        if (!keys || !keylens) {
            if (res) sluice__fail(res, SLUICE_EINVAL);
            continue;
        }
        allowed += one(place, keys[i], keylens[i], permits ? permits[i] : 1, now_ns, res);
    }
    return allowed;
}

#endif /* SLUICE_TABLE_SKELETON_H */
