/* table.c -- one limiter per key, for millions of keys in bounded memory.
 *
 * Layout.  The profile (parsed spec) is shared; each key costs one entry in
 * the probe array of one of S shards (S a power of two up to 64, one short
 * lock each -- sluice__spin, held for the lookup and the decision of
 * whatever may write, and also the shard's sequence count, which refusals
 * read instead: below; the shard is the hash's top bits).  The entries live
 * in the array itself, so that a lookup touches one place in memory -- a
 * 48-byte entry, and the one or two after it -- not an index slot and then
 * an entry elsewhere (two dependent misses):
 *
 *   slot     48 bytes   meta: the key length, the wheel list the entry is
 *                       in, and its probe distance (below); 0 = empty.
 *                       Wheel links (slot numbers) and the number of the
 *                       configuration the state is under (16 bytes with
 *                       meta); the key inline when <= 16 bytes, else a
 *                       pointer to a copy and the key's 64-bit hash (16);
 *                       the state in its packed 16-byte form (the latest
 *                       time and one count: limiter.c).  States that do
 *                       not pack (sliding-log and sliding-wheel, whose
 *                       rings live on the heap, and rare extreme specs)
 *                       take a whole sluice__state: 80-byte slots.
 *
 * Linear probing in Robin Hood order: the keys of a run lie in the order of
 * their home slots (home_of: the hash's low 32 bits scaled to the array),
 * so a miss stops at the first slot closer to its home than the probe is.
 * An insertion opens its place by moving the rest of the run one slot on;
 * a removal moves it one slot back (no tombstones, no rehash); each entry
 * moved takes its wheel links along (its neighbours are told its new slot),
 * and the shard's `gen` counts the moves.  The probe distance is kept in 5
 * bits of meta, exact below DIST_SAT; a distance of DIST_SAT or more (a run
 * that long is rare at a load of 0.8, and hash flooding cannot aim at it:
 * the seed is secret) is found again from the key's hash when needed.  Load
 * factor at most 0.8: a token-bucket key with a 16-byte key costs 48 / 0.8
 * = 60 bytes.  The arrays are sized for max_keys when the table is made
 * (with a margin per shard for an uneven spread: 6 standard deviations)
 * and come from calloc, so pages are touched only as keys arrive; the table
 * never allocates more, whatever keys arrive.
 *
 * Hashing: SipHash-1-3 under a 128-bit seed from getrandom(), per table
 * (a burst hashes eight keys at once, in vectors: siphash.c).  A key longer
 * than SLUICE_MAX_KEY_BYTES is held by its 16-byte digest (SipHash-2-4-128
 * under a key derived from the seed) with the length code DIGEST_LEN, which
 * no key held as itself has (key_view; docs/decisions.md, "Long keys").
 *
 * Reclaiming keys at rest.  A key whose limiter is at rest (sluice__rest_at
 * has passed) carries no information and can go.  Each shard files its
 * entries in a hierarchical timing wheel of 8 levels x 64 slots over ticks
 * of 2^20 ns (about 1 ms), an instance of the core the timer wheel uses
 * too (src/timer/wheel_core.h: where a tick is filed, which slot comes next),
 * with lists of its own: 4-byte links in the entry, under the shard lock.
 *
 *   level  slot width      reach            level  slot width   reach
 *     0    1 tick (1 ms)   67 ms              4    4.8 h        12.7 d
 *     1    67 ms           4.3 s              5    12.7 d       2.2 y
 *     2    4.3 s           4.6 min            6    2.2 y        143 y
 *     3    4.6 min         4.9 h              7    143 y        9100 y
 *
 * (2^63 ns is 2^43 ticks, inside the 48 bits of the eight levels: nothing
 * is ever beyond the last level.)  An entry is filed at the time it would
 * come to rest; a later admission moves that time on without touching the
 * wheel (the hot path does no wheel work).  When the wheel reaches the
 * entry, it is reclaimed if at rest, else re-filed at its current rest
 * time -- each re-filing is paid for by the admissions that caused it.
 *
 * A key at rest stays where it is until its room is wanted.  The table's
 * memory is reserved for max_keys keys anyway, so dropping a key the moment
 * it rests buys nothing until a new key needs its place; and a key that
 * comes back (many clients, each sending now and then) is then found in
 * place and decided on its state, which at rest decides as a fresh
 * limiter's would -- an admission without the lock, one miss -- instead
 * of being inserted again (a Robin Hood run moved, the wheel linked: twice
 * the cost; bench/README.md, "bench_table --sparse").  So no decision does
 * wheel upkeep; the wheel is advanced only when a new key finds no room --
 * its shard at ecap, or the table at max_keys.  Then the key's own place
 * is looked at first (reuse_at_rest): when the slot where it would go in
 * Robin Hood order, or the one before, holds a key at rest, that key is
 * reclaimed there and the new one takes its slot -- no entry moves, which
 * in a full table would be a run on each side.  Else make_room:
 * reclaim_some advances the wheel a visit at a time until it reclaims one
 * key or has caught up with `now` (a reclaimed entry's removal moves its
 * run back a slot: a walk along a list that drops entries follows the next
 * one to its new slot, after_close), first in the key's shard and then in
 * the others, before the policy refuses or evicts.  Occupancy bitmaps let the
 * wheel jump over empty slots, so an idle gap of years costs a few steps.
 * Since an entry is never filed later than its real rest time, advancing
 * the wheel to `now` (and looking through the current tick's slot, sweep_all)
 * finds every key at rest.  stats.keys counts the keys held, at rest or
 * not: exact (a key is counted from the reserve that makes it to the drop
 * that ends it), never above max_keys.  (A composite decision's lock still
 * takes a budgeted wheel step, sluice__table_lock.)  No decision scans the
 * table; sluice_table_scan walks it a bounded step per call (key
 * operations, at the end of this file).  SLUICE_TABLE_RECLAIM_WHEN_FULL,
 * which asked for this, is now what every table does (the flag is kept in
 * t->flags, so that its tests -- calm, the composite's fast path -- hold).
 *
 * Time: each shard's clock for reclaiming is the latest time any request
 * decided under its lock showed it (refusals and probes move nothing, their
 * time included, and admissions made without the lock move nothing but
 * their entry).  A key dropped at rest loses its own latest time: a later
 * request for it with an earlier time than that key had seen starts a fresh
 * limiter at the earlier time, which can admit earlier than the contract
 * would.  This needs callers whose times run backwards across the rest of a
 * key, and a table full enough to want that key's place; until it fills,
 * every key is exact whatever the order of times across keys.
 *
 * When full of keys in use: refuse the new key (default; counted), or, with
 * SLUICE_TABLE_EVICT_LRU, drop the entry with the oldest latest time among
 * LRU_SAMPLES sampled in the key's shard (Redis's approximated LRU).
 *
 * Configurations (changing the spec of every key, reconfigure.c's rule;
 * at the end of this file).  The table's spec is a chain of
 * configurations: a profile, the time of the change that made it, and a
 * link to the one that replaced it.  Each is numbered (an id, found again
 * through a segmented array that never moves); an entry keeps the id its
 * state is under.  A change makes a configuration and links it in: no key
 * is touched.  Whoever next holds an entry under its shard lock (decision,
 * peek, scan, the reclaiming wheel) first carries its state over each change
 * it missed, in order, each at that change's time clamped to the key's
 * latest admission -- exactly what the change would have done to it then,
 * since only an admission moves a state and every admission catches up
 * first.  A new key starts under the newest configuration.  The chain is
 * kept short: a change that would chain a ninth configuration first carries
 * every held key to the newest (cfg_collect: one pass over the slots, a
 * shard locked at a time), then retires the older ones -- their ids are
 * reused -- and frees each once no reader section that began before its
 * retiring runs ("reader sections", below): the memory of changes is
 * bounded (issue 26).
 *
 * Per-key overrides (the end of this file) are configurations of single
 * keys, kept per shard apart from the entries and looked up only where an
 * entry is made; an entry under one holds its id as it would a change's.
 *
 * Refusals and probes write nothing shared (docs/decisions.md, section 1:
 * only an admission changes a limiter).  A decision is first read, without
 * the lock (decide_read; sluice_table_peek_at reads the same way): no
 * store, no CAS, no locked instruction -- not the lock, not the shard's
 * `now`, not the wheel, not a shared counter (the statistics are striped
 * per thread, counters.h; the refused-keys sketch, when it is on, is the one
 * thing a refusal writes).  If the read finds a refusal or a probe it is the
 * answer.  If it finds an admission of a held key, it stores the words it
 * decided without the lock, into the key's entry alone (commit_free, below:
 * "Admissions without the lock"; when the shard's wheel is due a step, the
 * locked path decides instead).  Anything else (a key to make, a holder met
 * since) is decided again under the lock, as before.  (Under the lock -- a
 * burst's request on the shard it holds, or a read that met holders
 * READ_TRIES times -- a refusal or a probe is still decided first, with no
 * upkeep: it moves nothing but the lock.)
 * The lock word is a sequence (spin.h): odd while held, 2 more after each
 * hold.  The read:
 *
 *   v = the sequence (acquire); odd: a holder runs -- wait, read it again
 *   the probe run of the key's slots: each one's meta (distance code, key
 *     length) and two key words, the entry's configuration id and the two
 *     words of its packed state (read_words: the time half, the count
 *     half, the time half again -- equal, and not frozen);
 *     for a key absent and a new key that would need room, the shard's
 *     count and now, and every shard's `due` (full_read)
 *   decide on a copy of the state (the algorithm's decide_packed, as a
 *     lock-free limiter decides)
 *   the sequence again (after the loads): still v -- the answer, if it is
 *     a refusal or a probe; else read again (at most READ_TRIES times, then
 *     the lock)
 *
 * Why an answer given is one the locked path would have given at an
 * instant of the read: (1) every field read so -- meta, key words,
 * configuration id, state words, count, now, overrides -- is stored by a
 * holder only (but the state words, which admissions without the lock
 * store too: (6)), with an atomic store of the field's own size (PUT), and
 * loaded with an atomic load of the same size (GET); no store overlaps
 * another field's bytes (new_entry and slot_move store field by field, no
 * memset or memcpy over them), so no load tears within a field and there
 * is no data race.  (2)-(3) The read is base/seqlock.h's
 * protocol (the lock's bit-set is the hold's odd store), proved there.
 * So if the recheck reads v, every
 * load read the value the shard held from v's hold to the recheck: one state of
 * the shard, unchanged for the whole read, whatever order the loads ran in
 * -- a consistent snapshot, and the decision on it is the locked path's at
 * that instant (with no upkeep: the wheel and `now` only reclaim keys at
 * rest, which decide as fresh keys do).  (4) A read that mixed states is
 * never acted on (the recheck fails), and cannot go wrong before it: each
 * load is a value a holder stored, a probe run is cut at `cap` slots, a
 * configuration id is looked up warily (read_cfg), and the state is two
 * halves in the ranges the packed form allows, on which decide is total (no
 * key is ever dereferenced: only keys of at most 16 bytes, compared as
 * words).  (5) An admission a read found is stored only if the sequence is
 * still v once the entry is frozen (below): no holder ran from v to then,
 * so by (1)-(3) what the read loaded is still the shard's -- the slot holds
 * the key, under its newest configuration -- and the freeze found the
 * state words the read decided on; the words stored are those the locked
 * path would compute and store on that state.  The other shards' `due` are
 * read as the locked path reads them, without their locks: lower bounds,
 * each true when read.
 *
 * Admissions without the lock (commit_free).  An admission of a held key
 * writes its entry's 16 state bytes and nothing else: two threads
 * admitting distinct keys write distinct lines, never the shard's.  The
 * time half of a packed state is at most 2^63 - 1; its top bit (FROZEN)
 * marks the state frozen.  The admission, after its read:
 *
 *   freeze: compare-and-swap the time half from the one read to the same
 *     frozen -- this fails if another admission froze or stored a
 *     different time since: read again;
 *   load the count half: not the one read -- another admission stored
 *     since, with the same time (its thaw is the store the freeze read
 *     from, a release after its count half's): thaw and read again;
 *   load the sequence: still v -- store the count half, then the time half
 *     decided (release; not frozen, so this thaws it); else thaw and
 *     decide under the lock.
 *
 * (A thaw is a compare-and-swap of the time half from frozen to what was
 * read, which fails if a holder stored since.)  Once the time half is
 * frozen, no other admission can store either half until it thaws (each
 * must freeze first, and a freeze expects a time half not frozen), so the
 * count half loaded after the freeze is the entry's until then, but for a
 * holder's store -- and a holder that stored has run since v: the load of
 * the sequence sees it, (6).  So a state that passes both checks is the
 * pair the read decided on, held from the freeze to the stores: the
 * 16-byte compare-and-swap of the pair it replaces would have found the
 * same, at the cost of a locked cmpxchg16b (slower than the 8-byte one by
 * 3-4 ns a decision in a burst; docs/benchmarks.md).
 *
 * A holder reads an entry's state words once they are not frozen
 * (held_words waits), before it reads, moves, overwrites or drops the
 * entry, and stores them count half first, time half last (put_words).
 * (6) No admission stores into an entry a holder acts on: the holder's
 * lock (a sequentially consistent read-modify-write of the sequence, then
 * its load of the time half) and the admission's freeze (a sequentially
 * consistent compare-and-swap, then its load of the sequence) are a Dekker
 * pair: one of the two loads sees the other's write.  If the admission's
 * sees the lock, it stores nothing and thaws; else the holder's sees the
 * freeze and waits until the stores are done (release; the wait's load is
 * an acquire), so it acts on the state admitted.  An admission that froze
 * after the holder waited sees the lock, and the holder's words survive its
 * thaw: the thaw succeeds only on the frozen time half, which no holder
 * stores, before the holder's time-half store (which would have thawed it
 * anyway), and a freeze never changes the count half.  (7) A read without
 * the lock meets admissions made without the lock, which do not move the
 * sequence.  They store state words only, and an admission's time half is
 * never earlier than the one it replaces (the time decided at, clamped to
 * the latest admission).  So if read_words' two loads of the time half
 * agree and are not frozen, every admission between them stored that same
 * time, and the count half loaded between them is one of theirs (each
 * froze the time half before it stored its count half, release): the pair
 * is a state the entry held at an instant of the read, and with (1)-(3) for
 * every other field, the read saw the shard as it was at that instant.
 *
 * Keys longer than 16 bytes (their copy may be freed under the reader),
 * states that do not pack, and so the sliding-log and sliding-wheel keys
 * (rings that a holder may reallocate or free: reading them would need safe
 * reclamation) keep the locked path for every decision.  So does a new key
 * on a one-shard table that is full: its exact retry hint comes from a look
 * through the wheel, which refiles entries; a new key of a shard that has
 * overrides (their array is looked up under the lock); and a key whose
 * configuration has a newer one: its first decision after a change of spec
 * carries its state over under the lock, and its refusals read again from
 * then on.  Configurations are read through their ids and never freed
 * while the table lives (read_cfg).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall(): membarrier */
#endif
#include "base/clock.h"
#include "base/internal.h"
#include "base/counters.h"
#include "base/spin.h"
#include "table/table.h"
#include "table/topk.h"
#include "timer/wheel_core.h"
#include "table/hold.h"
#include "alg/reconfigure.h"
#include "table/region_table.h"
#include "table/skeleton.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define INLINE_KEY 16
#define SLOTS SLUICE__WCORE_SLOTS
#define TICK_SHIFT 20
#define SWEEP_BUDGET 8
#define RECLAIM_BATCH 1 /* wheel visits per step of reclaim_some: one key at a time */

/* A key: inline, zero-padded, when it has at most INLINE_KEY bytes; else a
 * pointer to a copy and the key's whole 64-bit hash (found again without
 * hashing, and compared before the bytes). */
typedef union ekey {
    unsigned char in[INLINE_KEY];
    struct {
        unsigned char *ext;
        uint64_t hash;
    } far;
    uint64_t w[2]; /* how the optimistic read reads it */
} ekey;

/* A slot of a shard's probe array: empty (meta 0) or a key's entry. */
typedef struct entry {
    uint32_t meta;  /* key length (17 bits) | wheel list + 1 (10) << 17 |
                     * probe distance code (5) << 27; 0: an empty slot */
    uint32_t next;  /* wheel list: slot + 1, 0 = none */
    uint32_t prev;  /* wheel list: slot + 1, 0 = head */
    uint32_t cfg;   /* the id of the configuration the state is under */
    ekey key;
    /* the state follows, at offset 32: 16 bytes packed, else a sluice__state */
} entry;

#define META_LEN(m) ((m) & 0x1ffffu)
#define META_WHERE(m) (((m) >> 17) & 0x3ffu) /* 0: in no list; else the wheel's list + 1 */
#define META_CODE(m) ((m) >> 27)             /* 0: empty; else min(distance, DIST_SAT) + 1 */
#define WHERE_BITS (0x3ffu << 17)
#define DIST_SAT 30u /* code DIST_SAT + 1: a distance of DIST_SAT or more */
_Static_assert(SLUICE__WCORE_LISTS < 0x3ff, "a list number fits in meta");
_Static_assert(SLUICE_MAX_KEY_BYTES < 0x20000, "a key length fits in meta");

static inline uint32_t dist_code(uint32_t d) { return (d < DIST_SAT ? d : DIST_SAT) + 1; }

/* A shard starts a cache line: its first line holds all that a decision
 * reads of it and an admission writes (the lock, cap, slab, now, the
 * wheel's current tick), so that an admission moves one line of it
 * between cores, and no shard shares a line with another. */
typedef struct shard {
    _Alignas(64) sluice__spin mu;
    uint32_t cap;        /* slots */
    uint32_t ecap;       /* entries at most (count < ecap < cap) */
    uint32_t count;      /* entries held */
    uint32_t gen;        /* moves of entries so far (a composite's parts
                          * look theirs up again after one) */
    unsigned char *slab; /* the probe array: cap slots of t->stride bytes */
    uint64_t now;        /* latest time a request showed this shard under
                          * its lock */
    uint64_t calm;       /* 1 + the last tick at which a decision has no
                          * wheel upkeep to do (0: the wheel is behind
                          * `now`): admissions without the lock stay below */
    /* The reclaiming wheel: wheel.cur is the first tick not wholly handled
     * (its level-0 slot holds the keys coming to rest within it); heads[]
     * are its lists, slot + 1, 0 = empty. */
    sluice__wcore wheel;
    uint32_t heads[SLUICE__WCORE_LISTS];
    uint64_t rng;
    /* The earliest rest time (ns) of the entries in the current tick's
     * level-0 slot, a lower bound (admissions only move rest times on); 0
     * when unknown.  It spares looking through that slot again while
     * nothing in it can be at rest yet. */
    uint64_t cur_min;
    _Atomic uint64_t *due; /* earliest time (ns) a key may be at rest, a lower
                            * bound readable without the lock: the shard's
                            * place in t->dues */
    /* The overrides of this shard's keys (the end of this file), sorted by
     * tag: read under the lock, changed under it and the table's cfg_mu. */
    struct ovr *ovr;
    uint32_t novr, ovrcap;
} shard;
_Static_assert(offsetof(shard, wheel) + sizeof(uint64_t) <= 64,
               "the lock, cap, slab, now, calm and the wheel's tick share the shard's first line");

/* One configuration of the table's spec (the end of this file). */
typedef struct tcfg {
    sluice__profile pf;           /* first: &c->pf leads back to c */
    uint64_t at;                  /* the time (ns) of the change that made it */
    _Atomic(struct tcfg *) newer; /* the configuration that replaced it */
    uint32_t id;
    sluice__retired ret;          /* retired: on t->retired (skeleton.h) */
} tcfg;

#define CFG_SEGS 32 /* segment j holds ids 2^j - 1 .. 2^(j+1) - 2 */

struct sluice_table {
    sluice__profile pf; /* the first spec: its algorithm and whether states pack */
    _Atomic(tcfg *) cur; /* the newest configuration */
    unsigned flags;
    size_t max_keys;
    size_t stride;       /* bytes per entry */
    unsigned shard_bits;
    unsigned nshards;
    uint64_t seed[2];
    uint64_t dseed[2]; /* the long keys' digest key (sluice__digest_seed) */
    shard *shards;
    unsigned char *slabs; /* every shard's probe array, one after the other */
    _Atomic uint64_t *dues; /* each shard's `due`, side by side: a new key's
                             * refusal reads them all */
    _Atomic size_t keys;
    _Atomic uint64_t reclaimed, evicted;
    sluice__counters counters;
    sluice__counters full; /* requests refused for want of room: the
                            * refused statistic, striped (its denials) */
    _Atomic(sluice__topk *) top; /* the keys refused most, or NULL (topk.c) */
    sluice__rtable *region; /* a table in a shared region (region_table.c), or NULL */
    const sluice__table_ops *ops; /* the placement's (skeleton.h), chosen when made */
    void *place;                  /* what its functions take: this table, or `region` */
    /* configurations: by id, and the lock of changes */
    _Atomic(_Atomic(tcfg *) *) cfgs[CFG_SEGS];
    uint32_t ncfg;
    /* reclaiming them (cfg_mu): the oldest of the chain still numbered and
     * the chain's length from it; ids free for reuse; configurations
     * retired, each with the reader epoch it waits out (rd_*) */
    tcfg *oldest;
    uint32_t chain;
    uint32_t *free_ids;
    uint32_t nfree, free_cap;
    sluice__retired *retired;
    pthread_mutex_t cfg_mu; /* serialises changes of spec and of overrides */
    _Atomic size_t novr;    /* overrides held */
    size_t max_ovr;         /* at most (cfg_mu) */
};

static const tcfg *ent_cfg(sluice_table *t, shard *s, uint32_t i);
static const tcfg *cur_cfg(const sluice_table *t);
static sluice__clock cur_clock(const sluice_table *t);
static tcfg *cfg_of_id(const sluice_table *t, uint32_t id);
static int cfg_init(sluice_table *t);
static void cfg_free(sluice_table *t);
static uint64_t rest_of(sluice_table *t, shard *s, uint32_t i);
static const tcfg *key_cfg(const sluice_table *t, const shard *s, uint32_t tag, const void *key,
                           size_t keylen);
static void ovr_free_all(sluice_table *t);
static const sluice__table_ops local_ops; /* this file's placement: the end of the file */

/* ---- reader sections: when a configuration may be freed ----------------- */

/* A configuration the table no longer reaches (cfg_collect: every key
 * carried past it, its id unmapped) may still be in the hands of a call
 * that read it before -- a decision reading without the lock, or one that
 * looked it up under a shard lock and uses it after.  So every call of the
 * table that reads configurations runs in a reader section (rd_enter,
 * rd_exit; nested sections count once), which writes the reader epoch it
 * began at into its thread's own line of rd_slots (0 outside).  A retired
 * configuration carries the epoch at its retiring (stamp; the epoch is then
 * moved on); it is freed once every thread in a section began after it:
 * min over the slots of the nonzero epochs > stamp (and no reader without
 * a slot of its own: rd_anon).  A reader whose epoch is later read the
 * epoch after the retiring (acquire: it sees the unmapping), so never finds
 * the configuration.  A reader whose epoch the changer does not see yet
 * could have read the unmapping before: the changer's sync (membarrier, a
 * barrier on every thread of the process, where the system has it; else a
 * fence on both sides, the reader's at each outermost rd_enter) orders the
 * reader's epoch store before its loads, or makes it visible.  Nothing
 * waits: what cannot be freed yet is freed at a later change.  Cost to a
 * decision: a thread-local load and two stores to its own line. */
#define RD_SLOTS 256
typedef struct rd_slot {
    _Alignas(64) _Atomic uint64_t at; /* the epoch its thread's section began at; 0: none */
    _Atomic unsigned owned;           /* a thread has it */
} rd_slot;
static rd_slot rd_slots[RD_SLOTS];
static _Atomic uint64_t rd_epoch = 1;
static _Atomic uint64_t rd_anon;       /* sections of threads without a slot */
/* A thread's own: its slot and the depth of its sections, in one
 * thread-local (one address lookup per section: the library's TLS model is
 * dynamic), which rd_enter returns for rd_exit. */
typedef struct rd_tls {
    unsigned mine;  /* slot + 1; 0: not yet asked; RD_SLOTS + 1: none */
    unsigned depth; /* sections open */
} rd_tls;
static _Thread_local rd_tls rd_me;
static pthread_once_t rd_once = PTHREAD_ONCE_INIT;
static pthread_key_t rd_key;
static bool rd_key_ok;

#if defined(SYS_membarrier) && !SLUICE__SEQ_TSAN
#define RD_MEMB_PRIVATE_EXPEDITED (1 << 3)
#define RD_MEMB_REGISTER_PRIVATE_EXPEDITED (1 << 4)
static bool rd_memb; /* registered: a reader's fence is the changer's barrier */
#else
#define rd_memb false
#endif

/* A thread ends: its slot is free again (a later section of this thread,
 * from another destructor, counts in rd_anon). */
static void rd_release(void *v)
{
    const unsigned i = (unsigned)(uintptr_t)v;
    if (i == 0 || i > RD_SLOTS) return;
    rd_me.mine = RD_SLOTS + 1;
    atomic_store_explicit(&rd_slots[i - 1].at, 0, memory_order_release);
    atomic_store_explicit(&rd_slots[i - 1].owned, 0, memory_order_release);
}

/* In the child of fork(): only the forking thread runs, so every other
 * thread's slot is free (else its epoch would hold back every free). */
static void rd_atfork_child(void)
{
    for (unsigned i = 0; i < RD_SLOTS; i++) {
        if (i + 1 == rd_me.mine) continue;
        atomic_store_explicit(&rd_slots[i].at, 0, memory_order_relaxed);
        atomic_store_explicit(&rd_slots[i].owned, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&rd_anon, rd_me.mine > RD_SLOTS && rd_me.depth ? 1 : 0,
                          memory_order_relaxed);
}

static void rd_init(void)
{
    rd_key_ok = pthread_key_create(&rd_key, rd_release) == 0;
    (void)pthread_atfork(NULL, NULL, rd_atfork_child);
#ifdef RD_MEMB_REGISTER_PRIVATE_EXPEDITED
    rd_memb = syscall(SYS_membarrier, RD_MEMB_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
}

/* Before a table is shared: the readers' mode (membarrier or fences) is
 * settled before any reader of it runs. */
static void rd_setup(void) { pthread_once(&rd_once, rd_init); }

static unsigned rd_claim(void)
{
    rd_setup();
    if (rd_key_ok)
        for (unsigned i = 0; i < RD_SLOTS; i++) {
            unsigned z = 0;
            if (atomic_load_explicit(&rd_slots[i].owned, memory_order_relaxed) == 0 &&
                atomic_compare_exchange_strong(&rd_slots[i].owned, &z, 1)) {
                if (pthread_setspecific(rd_key, (void *)(uintptr_t)(i + 1)) == 0) return i + 1;
                atomic_store_explicit(&rd_slots[i].owned, 0, memory_order_release);
                break;
            }
        }
    return RD_SLOTS + 1;
}

static inline rd_tls *rd_enter(void)
{
    rd_tls *me = &rd_me;
    if (me->depth++) return me;
    unsigned i = me->mine;
    if (__builtin_expect(i == 0, 0)) me->mine = i = rd_claim();
    if (i <= RD_SLOTS) {
        atomic_store_explicit(&rd_slots[i - 1].at,
                              atomic_load_explicit(&rd_epoch, memory_order_acquire),
                              SLUICE__SEQ_TSAN ? memory_order_seq_cst : memory_order_relaxed);
#if !SLUICE__SEQ_TSAN /* ThreadSanitizer has no fences: the store above is seq_cst there */
        if (rd_memb) atomic_signal_fence(memory_order_seq_cst);
        else atomic_thread_fence(memory_order_seq_cst);
#endif
    } else {
        atomic_fetch_add_explicit(&rd_anon, 1, memory_order_seq_cst);
    }
    return me;
}

static inline void rd_exit(rd_tls *me)
{
    if (--me->depth) return;
    const unsigned i = me->mine;
    if (i <= RD_SLOTS) atomic_store_explicit(&rd_slots[i - 1].at, 0, memory_order_release);
    else atomic_fetch_sub_explicit(&rd_anon, 1, memory_order_release);
}

/* The changer's half (after unmapping, before reading the slots): a
 * barrier on every thread, or its own fence; false when it failed (the
 * readers have no fence of their own then: nothing may be freed). */
static bool rd_sync(void)
{
#if !SLUICE__SEQ_TSAN /* under ThreadSanitizer the slots' loads are seq_cst */
    atomic_thread_fence(memory_order_seq_cst);
#endif
#ifdef RD_MEMB_PRIVATE_EXPEDITED
    if (rd_memb) return syscall(SYS_membarrier, RD_MEMB_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
    return true;
}

/* The reader sections for region_table.c (table.h). */
void sluice__rd_setup(void) { rd_setup(); }
void *sluice__rd_enter(void) { return rd_enter(); }
void sluice__rd_exit(void *tok) { rd_exit(tok); }
uint64_t sluice__rd_retire_stamp(void)
{
    return atomic_fetch_add_explicit(&rd_epoch, 1, memory_order_seq_cst);
}

/* The least epoch a section running now began at: UINT64_MAX when none
 * runs; 0 when a reader without a slot runs (it has no epoch), or when the
 * sync failed. */
uint64_t sluice__rd_min_active(void)
{
    if (!rd_sync() || atomic_load_explicit(&rd_anon, memory_order_seq_cst)) return 0;
    uint64_t m = UINT64_MAX;
    for (unsigned i = 0; i < RD_SLOTS; i++) {
        const uint64_t a = atomic_load_explicit(&rd_slots[i].at, memory_order_seq_cst);
        if (a && a < m) m = a;
    }
    return m;
}

/* ---- entries and slots -------------------------------------------------- */

static inline entry *ent(const sluice_table *t, const shard *s, uint32_t i)
{
    return (entry *)(s->slab + (size_t)i * t->stride);
}

static inline void *ent_state(entry *e) { return (unsigned char *)e + sizeof(entry); }

/* A packed state's words: the time half (w[0], at most 2^63 - 1) and the
 * count half.  The time half's top bit marks the state frozen by an
 * admission made without the lock (commit_free, head comment).  Whoever
 * holds the shard's lock reads the words once they are not frozen
 * (held_words), and stores them count half first, time half last
 * (put_words: the time half's store thaws whatever an admission that must
 * give up froze meanwhile).  A read without the lock takes two loads of the
 * time half around the count half's (read_words). */
#define FROZEN ((uint64_t)1 << 63)

static inline void held_words(entry *e, uint64_t w[2])
{
    const uint64_t *sw = ent_state(e);
    for (unsigned n = 0;; n++) { /* seq_cst: the holder's half of a Dekker pair */
        w[0] = __atomic_load_n(&sw[0], __ATOMIC_SEQ_CST);
        if (!(w[0] & FROZEN)) break;
        sluice__backoff(n);
    }
    w[1] = GET(&sw[1]);
}

static inline void put_words(entry *e, const uint64_t w[2])
{
    uint64_t *sw = ent_state(e), was[2];
    held_words(e, was); /* an admission that froze it before the hold ends first */
    PUT(&sw[1], w[1]);
    PUT(&sw[0], w[0]);
}

/* False when the words are frozen, or the time half moved between its two
 * loads (read again). */
static inline bool read_words(entry *e, uint64_t w[2])
{
    const uint64_t *sw = ent_state(e);
    w[0] = __atomic_load_n(&sw[0], __ATOMIC_ACQUIRE);
    w[1] = __atomic_load_n(&sw[1], __ATOMIC_ACQUIRE);
    return !(w[0] & FROZEN) && __atomic_load_n(&sw[0], SLUICE__SEQ_LOAD) == w[0];
}

/* The state of e, under its configuration's profile pf. */
static void load_state(const sluice_table *t, const sluice__profile *pf, entry *e,
                       sluice__state *st)
{
    if (t->pf.packed) {
        uint64_t w[2];
        held_words(e, w);
        sluice__state_unpack(pf, w, st);
    } else {
        memcpy(st, ent_state(e), sizeof *st);
    }
}

static void store_state(const sluice_table *t, const sluice__profile *pf, entry *e,
                        const sluice__state *st)
{
    if (t->pf.packed) {
        uint64_t w[2];
        sluice__state_pack(pf, st, w);
        put_words(e, w);
    } else {
        memcpy(ent_state(e), st, sizeof *st);
    }
}

/* When entry i comes to rest (rest_of, at the end: under the configuration
 * that applies to it). */
static uint64_t ent_rest_at(sluice_table *t, shard *s, uint32_t i)
{
    return rest_of(t, s, i);
}

static uint64_t ent_t_last(const sluice_table *t, entry *e)
{
    uint64_t w[2];
    if (t->pf.packed) {
        held_words(e, w);
        return w[0];
    }
    return ((sluice__state *)ent_state(e))->t_last;
}

static inline uint32_t home_of(const shard *s, uint32_t tag)
{
    return (uint32_t)(((uint64_t)tag * s->cap) >> 32);
}

/* The hash of the key entry e holds: kept for a long key, else computed. */
static uint64_t ent_hash(const sluice_table *t, const entry *e)
{
    const size_t len = META_LEN(e->meta);
    return len > INLINE_KEY ? e->key.far.hash : sluice__siphash13(t->seed, e->key.in, len);
}

/* The probe distance of held slot j: its code, or, when that says only
 * "DIST_SAT or more", from the key's hash. */
static uint32_t slot_dist(const sluice_table *t, const shard *s, uint32_t j)
{
    const uint32_t code = META_CODE(ent(t, s, j)->meta);
    if (code <= DIST_SAT) return code - 1;
    const uint32_t h = home_of(s, (uint32_t)ent_hash(t, ent(t, s, j)));
    return j >= h ? j - h : j + s->cap - h;
}

/* Whether held slot j (meta code `code`) lies closer to its home than d. */
static inline bool dist_lt(const sluice_table *t, const shard *s, uint32_t j, uint32_t code,
                           uint32_t d)
{
    return code - 1 < d && (code <= DIST_SAT || slot_dist(t, s, j) < d);
}

/* Long keys (docs/decisions.md, "Long keys").  A key of more than
 * SLUICE_MAX_KEY_BYTES is stored as its 16-byte digest (table.h) with the
 * length code DIGEST_LEN, which no key stored as itself has: so a long key
 * never equals a short one, its own digest bytes included.  Past the entry
 * points (key_view) a key length is such a code; key_bytes gives the bytes
 * behind it. */
#define DIGEST_LEN SLUICE__DIGEST_LEN
#define key_bytes sluice__key_bytes
_Static_assert(SLUICE__DIGEST_LEN < 0x20000, "the digest's length code fits in meta");

/* The key as the table stores it: itself, or (longer than
 * SLUICE_MAX_KEY_BYTES) its digest into dig, with *keylen DIGEST_LEN.  O(len). */
static inline void key_view(const sluice_table *t, const void **key, size_t *keylen,
                            unsigned char dig[SLUICE__DIGEST_BYTES])
{
    if (*keylen <= SLUICE_MAX_KEY_BYTES) return;
    sluice__key_digest(t->dseed, *key, *keylen, dig);
    *key = dig;
    *keylen = DIGEST_LEN;
}

/* The hash of a key as stored (key_view). */
static inline uint64_t key_hash(const sluice_table *t, const void *key, size_t keylen)
{
    return sluice__siphash13(t->seed, key, key_bytes(keylen));
}

static inline void pad_key(ekey *k, const void *key, size_t keylen)
{
    k->w[0] = k->w[1] = 0;
    if (keylen == INLINE_KEY) memcpy(k->in, key, INLINE_KEY); /* the common sizes: */
    else if (keylen == 8) memcpy(k->in, key, 8);              /* loads, not a call */
    else if (keylen && keylen < INLINE_KEY) memcpy(k->in, key, keylen);
}

/* A decision on a key's packed words w under profile pf (which packs): the
 * algorithm's decide_packed, as a lock-free limiter decides (unpack, clamp,
 * decide, pack in one call).  out receives the words the decision leaves:
 * w itself unless it admits. */
static inline bool decide_words(const sluice__profile *pf, const uint64_t w[2], uint64_t now_ns,
                                uint64_t permits, sluice_result *res, uint64_t out[2])
{
    sluice__packed_req q = {.w = {w[0], w[1]}, .now_ns = now_ns, .p = permits,
                            .max_wait = UINT64_MAX, .res = res, .out = {w[0], w[1]}};
    const bool ok = pf->ops->decide_packed(pf, &q);
    out[0] = q.out[0];
    out[1] = q.out[1];
    return ok;
}

/* Whether entry e holds `key` (k: the key padded, when inline; h: its
 * hash): inline keys compared in two words, long ones by hash, then bytes. */
static inline bool key_eq(const entry *e, const ekey *k, const void *key, size_t keylen,
                          uint64_t h)
{
    if (META_LEN(e->meta) != keylen) return false;
    if (keylen > INLINE_KEY)
        return e->key.far.hash == h && memcmp(e->key.far.ext, key, key_bytes(keylen)) == 0;
    return ((e->key.w[0] ^ k->w[0]) | (e->key.w[1] ^ k->w[1])) == 0;
}

/* The slot holding `key` (hash h), or UINT32_MAX; *probes (if not NULL)
 * receives the slots looked at.  The run from the key's home is in Robin
 * Hood order, so a miss stops at an empty slot or at one closer to its home
 * than the probe is. */
static uint32_t find_probes(const sluice_table *t, const shard *s, uint64_t h, const void *key,
                            size_t keylen, uint32_t *probes)
{
    ekey k;
    pad_key(&k, key, keylen);
    uint32_t i = home_of(s, (uint32_t)h), found = UINT32_MAX, d = 0;
    for (;; d++) {
        const entry *e = ent(t, s, i);
        const uint32_t code = META_CODE(e->meta);
        if (code == 0 || dist_lt(t, s, i, code, d)) break;
        if (key_eq(e, &k, key, keylen, h)) {
            found = i;
            break;
        }
        if (++i == s->cap) i = 0;
    }
    if (probes) *probes = d + 1;
    return found;
}

static inline uint32_t find(const sluice_table *t, const shard *s, uint64_t h, const void *key,
                            size_t keylen)
{
    return find_probes(t, s, h, key, keylen, NULL);
}

/* Move the entry of slot `from` to empty slot `to`, at probe distance d;
 * its wheel list follows it (links are slot numbers).  Field by field, with
 * PUT for what the optimistic read reads. */
static void slot_move(const sluice_table *t, shard *s, uint32_t from, uint32_t to, uint32_t d)
{
    entry *a = ent(t, s, from), *b = ent(t, s, to);
    const uint32_t m = a->meta;
    b->next = a->next;
    b->prev = a->prev;
    PUT(&b->cfg, a->cfg);
    PUT(&b->key.w[0], a->key.w[0]);
    PUT(&b->key.w[1], a->key.w[1]);
    if (t->pf.packed) {
        uint64_t w[2];
        held_words(a, w);
        put_words(b, w);
    } else { /* never read without the lock */
        memcpy(ent_state(b), ent_state(a), sizeof(sluice__state));
    }
    PUT(&b->meta, (m & ~(0x1fu << 27)) | dist_code(d) << 27);
    if (META_WHERE(m)) {
        if (b->prev) ent(t, s, b->prev - 1)->next = to + 1;
        else s->heads[META_WHERE(m) - 1] = to + 1;
        if (b->next) ent(t, s, b->next - 1)->prev = to + 1;
    }
}

/* Where a new key of home slot `home` goes in Robin Hood order (after the
 * keys of its home and of earlier ones): the first slot empty or held by a
 * key of a later home; *dist receives its probe distance there. */
/* An empty slot for a new key of home slot `home`, in Robin Hood order:
 * after the keys of its home and of earlier ones, before those of later
 * ones -- the rest of the run moves one slot on.  *dist receives its probe
 * distance.  There is an empty slot: count < ecap < cap. */
static uint32_t slot_place(const sluice_table *t, const shard *s, uint32_t home, uint32_t *dist)
{
    uint32_t p = home, d = 0, code;
    while ((code = META_CODE(ent(t, s, p)->meta)) != 0 && !dist_lt(t, s, p, code, d)) {
        if (++p == s->cap) p = 0;
        d++;
    }
    *dist = d;
    return p;
}

static uint32_t slot_open(const sluice_table *t, shard *s, uint32_t home, uint32_t *dist)
{
    uint32_t d;
    const uint32_t p = slot_place(t, s, home, &d);
    uint32_t q = p;
    while (META_CODE(ent(t, s, q)->meta))
        if (++q == s->cap) q = 0;
    while (q != p) { /* from the run's end back to p: each moves one on */
        const uint32_t f = q ? q - 1 : s->cap - 1;
        slot_move(t, s, f, q, slot_dist(t, s, f) + 1);
        q = f;
    }
    s->gen++;
    *dist = d;
    return p;
}

/* Empty held slot i (its entry out of the wheel, its key and state freed):
 * the rest of its run moves one slot back, down to a key at its home or an
 * empty slot.  Returns the slot emptied last: the entries that were in
 * slots i + 1 .. it (cyclically) are now one slot back. */
static uint32_t slot_close(const sluice_table *t, shard *s, uint32_t i)
{
    for (;;) {
        const uint32_t j = i + 1 == s->cap ? 0 : i + 1;
        const uint32_t code = META_CODE(ent(t, s, j)->meta);
        if (code <= 1) break; /* empty, or at its home */
        slot_move(t, s, j, i, slot_dist(t, s, j) - 1);
        i = j;
    }
    PUT(&ent(t, s, i)->meta, 0);
    s->gen++;
    return i;
}

/* Where the entry of slot x is after slot_close(i) returned last. */
static inline uint32_t after_close(const shard *s, uint32_t x, uint32_t i, uint32_t last)
{
    const uint32_t off = x >= i ? x - i : x + s->cap - i;
    const uint32_t run = last >= i ? last - i : last + s->cap - i;
    if (off == 0 || off > run) return x;
    return x ? x - 1 : s->cap - 1;
}

/* ---- the wheel ---------------------------------------------------------- */

/* The wheel's level choice, occupancy words, event search and cascade step
 * are src/timer/wheel_core.h; here are its lists and what a visit does.  Ticks
 * are rest >> TICK_SHIFT <= 2^44, and cur < 2^43 (times are at most
 * 2^63 - 1): a tick never lies beyond the last level. */

static void wheel_unlink(const sluice_table *t, shard *s, uint32_t i)
{
    entry *e = ent(t, s, i);
    uint32_t where = META_WHERE(e->meta);
    if (!where) return;
    uint32_t li = where - 1;
    if (e->prev) ent(t, s, e->prev - 1)->next = e->next;
    else s->heads[li] = e->next;
    if (e->next) ent(t, s, e->next - 1)->prev = e->prev;
    if (!s->heads[li]) sluice__wcore_vacate(&s->wheel, li);
    PUT(&e->meta, e->meta & ~WHERE_BITS);
    e->next = e->prev = 0;
}

/* The list that holds time `rest` (ns). */
static inline uint32_t list_for(const shard *s, uint64_t rest)
{
    return sluice__wcore_list(&s->wheel, rest >> TICK_SHIFT);
}

/* Whether list li is the level-0 slot of the current tick. */
static inline bool list_is_cur(const shard *s, uint32_t li)
{
    return li == ((uint32_t)s->wheel.cur & (SLOTS - 1));
}

/* File entry i at time `rest` (ns). */
static void wheel_file(const sluice_table *t, shard *s, uint32_t i, uint64_t rest)
{
    uint32_t li = sluice__wcore_file(&s->wheel, rest >> TICK_SHIFT);
    if (list_is_cur(s, li) && s->cur_min > rest) s->cur_min = rest;
    entry *e = ent(t, s, i);
    PUT(&e->meta, (e->meta & ~WHERE_BITS) | ((li + 1) << 17));
    e->prev = 0;
    e->next = s->heads[li];
    if (e->next) ent(t, s, e->next - 1)->prev = i + 1;
    s->heads[li] = i + 1;
}

static void publish_due(shard *s)
{
    uint64_t ev;
    uint32_t li = sluice__wcore_next(&s->wheel, &ev);
    uint64_t due = li == SLUICE__WCORE_NONE ? UINT64_MAX : ev << TICK_SHIFT;
    /* only the current tick's own slot has a sharper bound (a cascade
     * pending at cur would come first, as the core orders ties) */
    if (li != SLUICE__WCORE_NONE && list_is_cur(s, li) && s->cur_min > due) due = s->cur_min;
    atomic_store_explicit(s->due, due, (memory_order)SLUICE__SEQ_STORE);
    PUT(&s->calm, (s->now >> TICK_SHIFT) <= s->wheel.cur ? s->wheel.cur + 1 : 0);
}

/* The earliest time (ns) at which an entry of the shard comes to rest, or
 * UINT64_MAX if none; entries filed too early on the way are filed again
 * (ordinary wheel upkeep).  After at most `budget` visits it settles for a
 * lower bound: the start of the earliest slot. */
static uint64_t wheel_first_rest(sluice_table *t, shard *s, uint32_t budget)
{
    for (;;) {
        uint64_t ev;
        uint32_t li = sluice__wcore_next(&s->wheel, &ev);
        if (li == SLUICE__WCORE_NONE) return UINT64_MAX;
        uint64_t best = UINT64_MAX;
        for (uint32_t n = s->heads[li]; n;) {
            uint32_t i = n - 1;
            n = ent(t, s, i)->next;
            if (budget-- == 0) return ev << TICK_SHIFT;
            uint64_t rest = ent_rest_at(t, s, i);
            if (list_for(s, rest) == li) {
                if (rest < best) best = rest;
            } else { /* it rests later than its slot: move it on */
                wheel_unlink(t, s, i);
                wheel_file(t, s, i, rest);
            }
        }
        if (best != UINT64_MAX) return best;
    }
}

static uint32_t drop_entry(sluice_table *t, shard *s, uint32_t i);

/* Handle one entry of a slot that has become due at tick cur: reclaim it if
 * at rest by `now`, else file it again.  Returns true if reclaimed. */
static bool wheel_visit(sluice_table *t, shard *s, uint32_t i, uint64_t now)
{
    wheel_unlink(t, s, i);
    uint64_t rest = ent_rest_at(t, s, i);
    if (rest <= now) {
        drop_entry(t, s, i);
        atomic_fetch_add_explicit(&t->reclaimed, 1, memory_order_relaxed);
        return true;
    }
    wheel_file(t, s, i, rest);
    return false;
}

/* Advance the wheel so that every tick before tick(now) is handled, doing
 * at most *budget entry visits (UINT32_MAX: no limit).  Returns the number
 * of entries reclaimed.  Each step empties one list at a tick < tick(now):
 * a coarse slot (its entries go down to finer levels, or are reclaimed),
 * or a tick's level-0 slot, whose entries have all come to rest by now
 * unless an admission moved them on (then they are filed later).  A step
 * cut short by the budget is taken up again by the next call. */
static uint32_t wheel_advance(sluice_table *t, shard *s, uint64_t now, uint32_t *budget)
{
    const uint64_t target = now >> TICK_SHIFT;
    uint32_t freed = 0;
    while (s->wheel.cur < target && *budget) {
        uint64_t was = s->wheel.cur;
        uint32_t li = sluice__wcore_step(&s->wheel, target - 1);
        if (li == SLUICE__WCORE_NONE) {
            s->wheel.cur = target;
            s->cur_min = 0;
            break;
        }
        if (s->wheel.cur != was) s->cur_min = 0;
        while (s->heads[li] && *budget) {
            if (*budget != UINT32_MAX) (*budget)--;
            freed += wheel_visit(t, s, s->heads[li] - 1, now);
        }
    }
    return freed;
}

/* Every key of the shard at rest by `now`, reclaimed: the wheel advanced to
 * now, then the current tick's slots looked through. */
static uint32_t sweep_all(sluice_table *t, shard *s, uint64_t now)
{
    uint32_t unlimited = UINT32_MAX;
    uint32_t freed = wheel_advance(t, s, now, &unlimited);
    const uint64_t cur = s->wheel.cur;
    if (cur != now >> TICK_SHIFT) return freed;
    uint32_t li;
    while ((li = sluice__wcore_step(&s->wheel, cur)) != SLUICE__WCORE_NONE &&
           sluice__wcore_level(li) >= 1) { /* cascade into tick cur */
        while (s->heads[li]) freed += wheel_visit(t, s, s->heads[li] - 1, now);
    }
    const uint32_t slot0 = (uint32_t)cur & (SLOTS - 1);
    if (s->cur_min > now) return freed; /* nothing there is at rest yet */
    uint64_t min = UINT64_MAX;
    for (uint32_t n = s->heads[slot0]; n;) {
        uint32_t i = n - 1;
        n = ent(t, s, i)->next;
        uint64_t rest = ent_rest_at(t, s, i);
        if (rest <= now) {
            wheel_unlink(t, s, i);
            const uint32_t last = drop_entry(t, s, i);
            if (n) n = after_close(s, n - 1, i, last) + 1; /* it may have moved back */
            atomic_fetch_add_explicit(&t->reclaimed, 1, memory_order_relaxed);
            freed++;
        } else if ((rest >> TICK_SHIFT) > cur) { /* rests later: move it on, so
                                                  * the slot's bound stays below
                                                  * every later slot's start */
            wheel_unlink(t, s, i);
            wheel_file(t, s, i, rest);
        } else if (rest < min) {
            min = rest;
        }
    }
    s->cur_min = min;
    return freed;
}

/* ---- entry life --------------------------------------------------------- */

static uint32_t drop_entry_keep(sluice_table *t, shard *s, uint32_t i, bool keep_place);

static uint32_t drop_entry(sluice_table *t, shard *s, uint32_t i)
{
    return drop_entry_keep(t, s, i, false);
}

/* Drop the entry of slot i; with keep_place, its place in t->keys passes
 * to the caller (no other thread can take it in between).  Returns
 * slot_close's answer: which entries moved back a slot. */
static uint32_t drop_entry_keep(sluice_table *t, shard *s, uint32_t i, bool keep_place)
{
    entry *e = ent(t, s, i);
    wheel_unlink(t, s, i);
    if (t->pf.packed) { /* an admission that froze it before the hold ends first */
        uint64_t w[2];
        held_words(e, w);
    }
    if (!t->pf.packed) sluice__state_fini(&t->pf, ent_state(e));
    if (META_LEN(e->meta) > INLINE_KEY) sluice__free(e->key.far.ext);
    const uint32_t last = slot_close(t, s, i);
    PUT(&s->count, s->count - 1);
    if (!keep_place) atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
    return last;
}

static void put_entry(sluice_table *t, shard *s, uint32_t i, uint32_t d, uint64_t h,
                      const void *key, size_t keylen, const tcfg *c, unsigned char *copy);

/* A new entry for key (hash h), in its place of the probe run (the caller
 * has reserved a key in t->keys); returns its slot, or UINT32_MAX when
 * memory runs out. */
static uint32_t new_entry(sluice_table *t, shard *s, uint64_t h, const void *key, size_t keylen,
                          const tcfg *c)
{
    unsigned char *copy = NULL;
    if (keylen > INLINE_KEY) {
        copy = sluice__malloc(key_bytes(keylen));
        if (!copy) return UINT32_MAX;
        memcpy(copy, key, key_bytes(keylen));
    }
    uint32_t d;
    const uint32_t i = slot_open(t, s, home_of(s, (uint32_t)h), &d);
    put_entry(t, s, i, d, h, key, keylen, c, copy);
    PUT(&s->count, s->count + 1);
    return i;
}

/* Key (hash h; its copy when longer than INLINE_KEY) into slot i at probe
 * distance d, a fresh state under configuration c: field by field, with PUT
 * for what the optimistic read reads (no memset over it). */
static void put_entry(sluice_table *t, shard *s, uint32_t i, uint32_t d, uint64_t h,
                      const void *key, size_t keylen, const tcfg *c, unsigned char *copy)
{
    entry *e = ent(t, s, i);
    e->next = e->prev = 0;
    PUT(&e->cfg, c->id);
    ekey k;
    pad_key(&k, key, keylen);
    if (copy) {
        k.far.ext = copy;
        k.far.hash = h;
    }
    PUT(&e->key.w[0], k.w[0]);
    PUT(&e->key.w[1], k.w[1]);
    sluice__state st;
    sluice__state_init(&c->pf, &st);
    store_state(t, &c->pf, e, &st);
    PUT(&e->meta, (uint32_t)keylen | dist_code(d) << 27);
}

/* Room wanted for a new key (hash h) in shard s, and its place in Robin
 * Hood order -- the slot where it would go, or the one before (which
 * holds a key of its home or an earlier one) -- is held by a key at rest
 * by s->now: that key's slot is the one wanted.  It is reclaimed there and
 * the new key takes the slot, its place in t->keys and in s->count: no
 * entry moves (slot_open and slot_close would move the runs on both sides
 * of a full table, each moved entry's wheel neighbours told).  Either
 * slot keeps the order: the keys before are of homes no later than the new
 * key's, those after of homes no earlier.  Returns the slot, or UINT32_MAX
 * (no such key at rest, or no memory for a long key's copy: make_room
 * then). */
static uint32_t reuse_at_rest(sluice_table *t, shard *s, uint64_t h, const void *key,
                              size_t keylen, const tcfg *c)
{
    uint32_t d;
    const uint32_t p = slot_place(t, s, home_of(s, (uint32_t)h), &d);
    for (uint32_t k = 0; k < 2 && k <= d; k++) {
        const uint32_t q = k == 0 ? p : p ? p - 1 : s->cap - 1;
        entry *e = ent(t, s, q);
        if (!META_CODE(e->meta) || ent_rest_at(t, s, q) > s->now) continue;
        unsigned char *copy = NULL;
        if (keylen > INLINE_KEY) {
            if (!(copy = sluice__malloc(key_bytes(keylen)))) return UINT32_MAX;
            memcpy(copy, key, key_bytes(keylen));
        }
        wheel_unlink(t, s, q);
        if (t->pf.packed) { /* an admission that froze it before the hold ends first */
            uint64_t w[2];
            held_words(e, w);
        } else {
            sluice__state_fini(&t->pf, ent_state(e));
        }
        if (META_LEN(e->meta) > INLINE_KEY) sluice__free(e->key.far.ext);
        put_entry(t, s, q, d - k, h, key, keylen, c, copy);
        s->gen++; /* another key in the slot: a composite's parts look again */
        atomic_fetch_add_explicit(&t->reclaimed, 1, memory_order_relaxed);
        return q;
    }
    return UINT32_MAX;
}

/* Evict the least recently used of a sample of the shard's entries; its
 * place in t->keys passes to the caller. */
static bool evict_one(sluice_table *t, shard *s)
{
    if (s->count == 0) return false;
    uint32_t best = UINT32_MAX;
    uint64_t best_t = UINT64_MAX;
    for (int k = 0; k < LRU_SAMPLES; k++) {
        s->rng ^= s->rng << 13;
        s->rng ^= s->rng >> 7;
        s->rng ^= s->rng << 17;
        uint32_t i = (uint32_t)(((s->rng >> 32) * s->cap) >> 32);
        while (!META_CODE(ent(t, s, i)->meta))
            if (++i == s->cap) i = 0;
        uint64_t tl = ent_t_last(t, ent(t, s, i));
        if (tl < best_t) {
            best_t = tl;
            best = i;
        }
    }
    drop_entry_keep(t, s, best, true);
    atomic_fetch_add_explicit(&t->evicted, 1, memory_order_relaxed);
    return true;
}

/* ---- construction ------------------------------------------------------- */

static void free_shards(sluice_table *t)
{
    for (unsigned k = 0; t->shards && k < t->nshards; k++) {
        shard *s = &t->shards[k];
        if (s->slab) {
            for (uint32_t i = 0; i < s->cap; i++) {
                entry *e = ent(t, s, i);
                if (!META_CODE(e->meta)) continue;
                if (META_LEN(e->meta) > INLINE_KEY) sluice__free(e->key.far.ext);
                if (!t->pf.packed) sluice__state_fini(&t->pf, ent_state(e));
            }
        }
    }
    sluice__free(t->slabs);
    sluice__free64(t->shards);
    sluice__free64((void *)t->dues);
}

static sluice_table *table_new(const char *spec, size_t max_keys, unsigned flags,
                               const uint64_t *seed, char *err, size_t errlen)
{
    sluice__profile pf;
    if (sluice__spec_parse(spec, &pf, err, errlen) != 0) return NULL;
    if (max_keys < 1 || max_keys > ((size_t)1 << 32)) {
        sluice__errf(err, errlen, "bad max_keys %zu: expected 1 .. 2^32", max_keys);
        return NULL;
    }
    if (flags & ~(SLUICE_TABLE_EVICT_LRU | SLUICE_TABLE_RECLAIM_WHEN_FULL)) {
        sluice__errf(err, errlen, "bad flags 0x%x", flags);
        return NULL;
    }
    rd_setup(); /* how reader sections order themselves, before any runs */
    sluice_table *t = sluice__calloc64(sizeof *t);
    if (!t) goto oom;
    t->ops = &local_ops;
    t->place = t;
    t->pf = pf;
    if (cfg_init(t) != 0) {
        cfg_free(t);
        sluice__free64(t);
        t = NULL;
        goto oom;
    }
    /* keys at rest are reclaimed only when room is wanted, whatever the
     * flags say (head comment): the flag is set so that every test of it
     * (calm, the composite's fast path) knows */
    t->flags = flags | SLUICE_TABLE_RECLAIM_WHEN_FULL;
    t->max_keys = max_keys;
    /* 32 + 16 = 48 bytes packed, 32 + 48 = 80 otherwise: both keep the
     * state 16-byte aligned */
    t->stride = sizeof(entry) + (pf.packed ? 16 : sizeof(sluice__state));
    uint64_t ecap; /* skeleton.h */
    sluice__table_sizing(max_keys, &t->shard_bits, &ecap);
    t->nshards = 1u << t->shard_bits;
    if (seed) {
        t->seed[0] = seed[0];
        t->seed[1] = seed[1];
    } else {
        sluice__random_seed(t->seed);
    }
    sluice__digest_seed(t->seed, t->dseed);
    t->shards = sluice__calloc64(t->nshards * sizeof *t->shards);
    t->dues = sluice__calloc64(t->nshards * sizeof *t->dues);
    if (!t->shards || !t->dues) goto oom;
    const uint64_t cap = sluice__table_cap(ecap, 4); /* load factor <= 0.8 */
    /* one block for every shard's array, in huge pages where the system
     * gives them (alloc.c): a random lookup then misses the TLB rarely */
    t->slabs = sluice__calloc((size_t)cap * t->nshards, t->stride);
    if (!t->slabs) goto oom;
    sluice__advise_huge(t->slabs, (size_t)cap * t->nshards * t->stride);
    for (unsigned k = 0; k < t->nshards; k++) {
        shard *s = &t->shards[k];
        s->ecap = (uint32_t)(ecap > UINT32_MAX - 1 ? UINT32_MAX - 1 : ecap);
        s->cap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
        s->slab = t->slabs + (size_t)k * s->cap * t->stride;
        s->rng = t->seed[0] ^ (0x9e3779b97f4a7c15ULL * (k + 1)) ^ 1;
        s->due = &t->dues[k];
        atomic_store_explicit(s->due, UINT64_MAX, memory_order_relaxed);
        sluice__wcore_init(&s->wheel, 0);
        s->calm = 1; /* now and the wheel at tick 0 */
    }
    return t;
oom:
    if (t) {
        free_shards(t); /* what was made of it */
        cfg_free(t);
        pthread_mutex_destroy(&t->cfg_mu);
        sluice__free64(t);
    }
    sluice__errf(err, errlen, "out of memory");
    return NULL;
}

sluice_table *sluice_table_new_flags(const char *spec, size_t max_keys, unsigned flags,
                                  char *err, size_t errlen)
{
    return table_new(spec, max_keys, flags, NULL, err, errlen);
}

sluice_table *sluice_table_new(const char *spec, size_t max_keys, char *err, size_t errlen)
{
    return table_new(spec, max_keys, 0, NULL, err, errlen);
}

sluice_table *sluice__table_new_seeded(const char *spec, size_t max_keys, unsigned flags,
                                       const uint64_t seed[2], char *err, size_t errlen)
{
    return table_new(spec, max_keys, flags, seed, err, errlen);
}

void sluice__table_seed(const sluice_table *t, uint64_t seed[2])
{
    seed[0] = t->seed[0];
    seed[1] = t->seed[1];
}

size_t sluice__table_bytes(const sluice_table *t)
{
    size_t n = sizeof *t + t->nshards * sizeof(shard);
    for (unsigned k = 0; k < t->nshards; k++)
        n += (size_t)t->shards[k].cap * t->stride;
    return n;
}

size_t sluice__table_image(const sluice_table *t, void *buf, size_t cap)
{
    size_t n = 0;
    for (unsigned k = 0; k < t->nshards; k++) {
        const shard *s = &t->shards[k];
        const size_t ne = (size_t)s->cap * t->stride;
        if (buf && n + sizeof *s + ne <= cap) {
            unsigned char *b = (unsigned char *)buf + n;
            memcpy(b, s, sizeof *s);
            memcpy(b + sizeof *s, s->slab, ne);
        }
        n += sizeof *s + ne;
    }
    return n;
}

uint32_t sluice__table_probe_len(sluice_table *t, const void *key, size_t keylen)
{
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    const uint64_t h = key_hash(t, key, keylen);
    shard *s = &t->shards[t->shard_bits ? h >> (64 - t->shard_bits) : 0];
    uint32_t n;
    sluice__spin_lock(&s->mu);
    find_probes(t, s, h, key, keylen, &n);
    sluice__spin_unlock(&s->mu);
    return n;
}

sluice_table *sluice__table_wrap(const sluice__table_ops *ops, const sluice__profile *pf,
                                 unsigned flags, size_t max_keys,
                                sluice__rtable *r)
{
    sluice_table *t = sluice__calloc64(sizeof *t);
    if (!t) return NULL;
    t->pf = *pf;
    if (cfg_init(t) != 0) { /* its spec, for the clock the live calls read */
        cfg_free(t);
        sluice__free64(t);
        return NULL;
    }
    t->flags = flags;
    t->max_keys = max_keys;
    t->region = r;
    t->ops = ops;
    t->place = r;
    return t;
}

sluice__rtable *sluice__table_region(const sluice_table *t) { return t->region; }

void sluice_table_free(sluice_table *t)
{
    if (!t) return;
    if (t->ops->close) t->ops->close(t->place);
    ovr_free_all(t);
    free_shards(t);
    sluice__topk_free(atomic_load_explicit(&t->top, memory_order_relaxed));
    cfg_free(t);
    pthread_mutex_destroy(&t->cfg_mu);
    sluice__free64(t);
}

/* ---- decisions ---------------------------------------------------------- */

/* Take one of the table's max_keys places. */
static bool reserve(sluice_table *t)
{
    size_t k = atomic_load_explicit(&t->keys, memory_order_relaxed);
    do {
        if (k >= t->max_keys) return false;
    } while (!atomic_compare_exchange_weak_explicit(&t->keys, &k, k + 1, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

/* Reclaim keys of shard s (locked) at rest by `now`: one if there is one
 * (more only from the current tick's look) -- the wheel advanced
 * RECLAIM_BATCH visits at a time until one is reclaimed or it has caught up
 * with now, then, if none was, the look through the current tick
 * (sweep_all).  A visit that reclaims nothing files an entry again at its
 * later rest time, paid for by the admissions that moved it; so one call
 * costs one reclaim past those, however long the wheel was left behind
 * (the keys at rest that it leaves stay in place for their next visit, or
 * the next new key).  One at a time keeps the table full, so that the next
 * new key finds its room at rest in its own place (reuse_at_rest) more
 * often than not: a flood of new keys through keys at rest costs what it
 * cost when a sweep dropped them (bench/README.md).  Returns how many. */
static uint32_t reclaim_some(sluice_table *t, shard *s, uint64_t now)
{
    uint32_t freed = 0;
    while (!freed && s->wheel.cur < now >> TICK_SHIFT) {
        uint32_t budget = RECLAIM_BATCH;
        freed = wheel_advance(t, s, now, &budget);
    }
    return freed ? freed : sweep_all(t, s, now);
}

/* Room for one more key in shard s (locked): reclaim keys at rest (in s,
 * then, unlocking s, in the other shards), or evict as the policy says.
 * Returns true with a place reserved in t->keys, or false with *retry set.
 * *relocked tells that s was unlocked on the way (the caller must look the
 * key up again). */
static bool make_room(sluice_table *t, shard *s, uint64_t now, int64_t *retry,
                      bool *relocked)
{
    *relocked = false;
    if (s->count < s->ecap && reserve(t)) return true;
    reclaim_some(t, s, now);
    publish_due(s);
    if (s->count < s->ecap && reserve(t)) return true;
    if (s->count < s->ecap && t->nshards > 1) { /* the room may be elsewhere */
        sluice__spin_unlock(&s->mu);
        bool got = false;
        for (unsigned k = 0; k < t->nshards && !got; k++) {
            shard *o = &t->shards[k];
            /* a shard whose wheel has nothing due by now has nothing at rest */
            if (o == s || atomic_load_explicit(o->due, memory_order_relaxed) > now) continue;
            sluice__spin_lock(&o->mu);
            if (reclaim_some(t, o, now > o->now ? now : o->now)) got = reserve(t);
            publish_due(o);
            sluice__spin_unlock(&o->mu);
        }
        sluice__spin_lock(&s->mu);
        *relocked = true;
        if (got) return true;
    }
    if ((t->flags & SLUICE_TABLE_EVICT_LRU) && evict_one(t, s)) { /* its place is ours */
        publish_due(s);
        return true;
    }
    /* refused: when is the first held key expected at rest?  Exactly, for
     * one shard; else the earliest shard's next wheel slot, a lower bound */
    uint64_t first = UINT64_MAX;
    if (t->nshards == 1) {
        first = wheel_first_rest(t, s, 256);
        publish_due(s);
    } else {
        for (unsigned k = 0; k < t->nshards; k++) {
            uint64_t d = atomic_load_explicit(&t->dues[k], memory_order_relaxed);
            if (d < first) first = d;
        }
    }
    *retry = first == UINT64_MAX ? -1 : first > now ? (int64_t)sluice__min_u64(first - now, INT64_MAX) : 1;
    return false;
}

/* ---- the optimistic read (head comment) --------------------------------- */

/* Whether a request for a key that shard s does not hold (1 <= permits <=
 * capacity) is refused for want of room, decided without writing: the
 * locked path (make_room) could find no room -- the table is full, every
 * shard it would sweep has nothing due by its time, and the policy does not
 * evict.  *retry receives the hint the locked path would give (from the
 * same lower bounds; where it would first have moved a wheel on, its bound
 * may be the later one).  False: let the locked path decide.  One shard
 * alone is left to it: its hint is exact, from a look through the wheel. */
static bool full_read(sluice_table *t, shard *s, uint64_t now_ns, int64_t *retry)
{
    if ((t->flags & SLUICE_TABLE_EVICT_LRU) || t->nshards == 1) return false;
    const uint64_t sn = GET(&s->now);
    const uint64_t now = now_ns > sn ? now_ns : sn; /* s->now, had we locked */
    const bool shard_full = GET(&s->count) >= s->ecap;
    if (!shard_full && atomic_load_explicit(&t->keys, memory_order_relaxed) < t->max_keys)
        return false;
    /* make_room sweeps s, and the others only when s has room: with s full,
     * only s's due counts; else the earliest of all.  The hint is the
     * earliest of all either way.  One array, a few lines, no branch. */
    uint64_t m0 = UINT64_MAX, m1 = UINT64_MAX; /* nshards: a power of two, >= 2 */
    for (_Atomic uint64_t *d = t->dues, *end = d + t->nshards; d != end; d += 2) {
        const uint64_t d0 = atomic_load_explicit(&d[0], (memory_order)SLUICE__SEQ_LOAD);
        const uint64_t d1 = atomic_load_explicit(&d[1], (memory_order)SLUICE__SEQ_LOAD);
        m0 = d0 < m0 ? d0 : m0;
        m1 = d1 < m1 ? d1 : m1;
    }
    const uint64_t first = m0 < m1 ? m0 : m1;
    const uint64_t mine = shard_full ? atomic_load_explicit(s->due, (memory_order)SLUICE__SEQ_LOAD)
                                     : first;
    if (mine <= now) return false;
    *retry = first == UINT64_MAX ? -1
             : first > now       ? (int64_t)sluice__min_u64(first - now, INT64_MAX)
                                 : 1;
    return true;
}

enum { READ_DONE, READ_LOCK, READ_TORN, READ_ADMIT };

/* What a read that found an admission of a held key decided: its slot,
 * configuration and new state (decide_read stores it if it can upgrade). */
typedef struct readout {
    uint32_t at;
    uint64_t was[2]; /* the state read */
    uint64_t w[2];   /* the state decided */
} readout;

/* find() for the optimistic read (k: the key zero-padded, as new_entry
 * stores it; keylen <= INLINE_KEY), on GET loads that may mix states: the
 * slot, UINT32_MAX when absent, or RUN_TORN for a probe run with no end,
 * which only a mix can show.  A distance code that says only "DIST_SAT or
 * more" does not end the run here (the locked path hashes the key to know):
 * the run goes on, to an empty slot, a nearer key or its bound. */
#define RUN_TORN (UINT32_MAX - 1) /* slots are below cap < 2^32 - 1 */
static inline __attribute__((always_inline)) uint32_t
read_find(sluice_table *t, shard *s, uint64_t h, const ekey *k, size_t keylen)
{
    uint32_t i = home_of(s, (uint32_t)h);
    for (uint32_t d = 0; d < s->cap; d++) {
        entry *e = ent(t, s, i);
        const uint32_t m = GET(&e->meta), code = META_CODE(m);
        if (code == 0 || (code - 1 < d && code <= DIST_SAT)) return UINT32_MAX;
        if (META_LEN(m) == keylen && GET(&e->key.w[0]) == k->w[0] &&
            GET(&e->key.w[1]) == k->w[1])
            return i;
        if (++i == s->cap) i = 0;
    }
    return RUN_TORN;
}

/* The packed state of entry i, read without the lock (read_words); false
 * when it must be read again. */
static bool read_state(sluice_table *t, const sluice__profile *pf, shard *s, uint32_t i,
                       sluice__state *st)
{
    uint64_t w[2];
    if (!read_words(ent(t, s, i), w)) return false;
    sluice__state_unpack(pf, w, st);
    return true;
}

/* The configuration that entry `at` of shard s (its id read with GET), or a
 * new key of s (at = UINT32_MAX), decides under, for the optimistic read;
 * NULL when the lock must decide: the entry missed a change of spec (the
 * lock carries it over first), the shard has overrides (looked up under the
 * lock), or a read that mixed states names no published configuration.
 * A configuration found so is not freed while the caller's reader section
 * runs (rd_enter). */
static inline __attribute__((always_inline)) const tcfg *
read_cfg(sluice_table *t, shard *s, uint32_t at)
{
    const tcfg *c = cur_cfg(t);
    if (at == UINT32_MAX) return GET(&s->novr) ? NULL : c;
    const uint32_t id = GET(&ent(t, s, at)->cfg);
    if (id != c->id) { /* cfg_of_id, wary of a mixed read */
        const uint64_t v = (uint64_t)id + 1;
        const unsigned j = 63u - (unsigned)__builtin_clzll(v);
        _Atomic(tcfg *) *seg = atomic_load_explicit(&t->cfgs[j], memory_order_acquire);
        c = seg ? atomic_load_explicit(&seg[v - ((uint64_t)1 << j)], memory_order_acquire) : NULL;
        if (!c) return NULL;
    }
    return atomic_load_explicit(&((tcfg *)c)->newer, memory_order_acquire) ? NULL : c;
}

/* One read of the decision of a request (packed state, key <= INLINE_KEY
 * bytes, k as for read_find): the lookup and the state, made of GET loads,
 * and the decision on a copy.  READ_DONE with *ok (and *res, *full: refused
 * for want of room) for a refusal or a probe; READ_LOCK for what only the
 * lock may decide (an admission, a new key); READ_TORN for a torn run.
 * The decision is on two halves in the ranges of the packed form. */
static inline __attribute__((always_inline)) int
read_once(sluice_table *t, shard *s, uint64_t h, const ekey *k, size_t keylen,
          uint64_t permits, uint64_t now_ns, sluice_result *res, bool *ok, bool *full,
          readout *ro)
{
    const uint32_t at = read_find(t, s, h, k, keylen);
    if (at == RUN_TORN) return READ_TORN;
    sluice__state st;
    *full = false;
    const tcfg *c = read_cfg(t, s, at);
    if (!c) return READ_LOCK;
    if (at != UINT32_MAX) {
        if (!read_words(ent(t, s, at), ro->was)) return READ_TORN;
        *ok = decide_words(&c->pf, ro->was, now_ns, permits, res, ro->w);
        if (ro->w[0] == ro->was[0] && ro->w[1] == ro->was[1])
            return READ_DONE; /* only an admission writes */
        ro->at = at;
        return READ_ADMIT;
    }
    if (permits == 0 || permits > c->pf.capacity) { /* as decide_locked: no key made */
        sluice__state_init(&c->pf, &st);
        *ok = sluice__decide(&c->pf, &st, now_ns, permits, UINT64_MAX, res);
        return READ_DONE;
    }
    int64_t retry;
    if (!full_read(t, s, now_ns, &retry)) return READ_LOCK;
    *ok = false;
    *full = true;
    if (res) {
        sluice__deny(res, 0, retry);
        res->error = SLUICE_EFULL;
    }
    return READ_DONE;
}

/* Whether an admission at now_ns has no wheel upkeep to do on shard s (read
 * without the lock: `calm` only grows while the wheel keeps up). */
static inline bool calm(const sluice_table *t, const shard *s, uint64_t now_ns)
{
    return (t->flags & SLUICE_TABLE_RECLAIM_WHEN_FULL) || (now_ns >> TICK_SHIFT) < GET(&s->calm);
}

/* An admission of a held key found by a read of shard e's shard s that
 * began at sequence v (head comment, "Admissions without the lock"):
 * freeze the state read (a compare-and-swap of its time half from the one
 * read to it with the frozen bit: no other admission can then store, and
 * holders wait), load the count half -- still the one read, or another
 * admission came between -- then the sequence: still v -- no holder has
 * run since the read began, none can act on e until it thaws -- store the
 * new state, count half first, then the time half, which thaws it; else
 * thaw it as it was.  An 8-byte freeze, not a 16-byte one of the pair: a
 * locked cmpxchg16b costs 3-4 ns more a decision in a burst
 * (docs/benchmarks.md), and any 64-bit machine has the 8-byte one.
 * Returns 1 stored, 0 when the state is no longer the one read (another
 * admission came first), -1 when a holder ran (the lock decides). */
static int commit_free(shard *s, entry *e, uint64_t v, const readout *ro)
{
    uint64_t *sw = ent_state(e), was = ro->was[0];
    if (!__atomic_compare_exchange_n(&sw[0], &was, ro->was[0] | FROZEN, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
        return 0;
    const bool same = __atomic_load_n(&sw[1], __ATOMIC_ACQUIRE) == ro->was[1];
    if (!same || atomic_load_explicit(&s->mu.seq, memory_order_seq_cst) != v) {
        uint64_t f = ro->was[0] | FROZEN; /* fails if a holder stored since */
        __atomic_compare_exchange_n(&sw[0], &f, ro->was[0], false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
        return same ? -1 : 0;
    }
    __atomic_store_n(&sw[1], ro->w[1], __ATOMIC_RELEASE);
    __atomic_store_n(&sw[0], ro->w[0], __ATOMIC_RELEASE);
    return 1;
}

/* Whether requests for key are read at all: packed states, inline keys. */
static inline bool readable(const sluice_table *t, size_t keylen)
{
    return t->pf.packed && keylen <= INLINE_KEY;
}

/* The decision of one request on shard s (unlocked), made without writing
 * anything shared: READ_DONE with *ok (and *res) when it is a refusal or a
 * probe, read consistently (the proof is in the head comment); READ_LOCK
 * when the caller must decide under the lock (an admission, a new key, a
 * request that is not readable()); READ_TORN when READ_TRIES reads met a
 * holder or a change: then under the lock, refusals and probes first. */
static inline __attribute__((always_inline)) int
decide_read(sluice_table *t, shard *s, uint64_t h, const void *key, size_t keylen,
            uint64_t permits, uint64_t now_ns, sluice_result *res, bool *ok)
{
    if (!readable(t, keylen)) return READ_LOCK;
    ekey k;
    pad_key(&k, key, keylen);
    for (unsigned n = 0; n < READ_TRIES; n++) {
        const uint64_t v = sluice__spin_read_begin(&s->mu);
        if (v & 1) { /* held: wait without writing */
            sluice__backoff(n);
            continue;
        }
        bool full;
        readout ro;
        const int rc = read_once(t, s, h, &k, keylen, permits, now_ns, res, ok, &full, &ro);
        if (rc == READ_ADMIT) { /* store what was read, if nothing moved since */
            if (!calm(t, s, now_ns)) return READ_LOCK; /* the wheel's upkeep: the lock's */
            const int got = commit_free(s, ent(t, s, ro.at), v, &ro);
            if (got > 0) return READ_DONE;
            if (got < 0) return READ_LOCK;
            sluice__backoff(n); /* another admission came first: read again */
            continue;
        }
        if (rc == READ_LOCK) return READ_LOCK;
        if (rc == READ_TORN || !sluice__spin_read_valid(&s->mu, v)) continue;
        if (full) sluice__count(&t->full, 1, false);
        return READ_DONE;
    }
    return READ_TORN;
}

/* The decision of one request on shard s, which the caller has locked (and
 * finds locked again on return: make_room may unlock it on the way).  The
 * key (not NULL; keylen <= SLUICE_MAX_KEY_BYTES) has the hash h, and
 * now_ns <= INT64_MAX.  This is the whole of a decision but the
 * lock and the counters: the single call and the burst both come here, so
 * a burst decides exactly as separate calls would. */
static bool decide_locked(sluice_table *t, shard *s, uint64_t h, const void *key,
                          size_t keylen, uint64_t permits, uint64_t now_ns,
                          sluice_result *res, bool read_first)
{
    bool ok = false;
    if (read_first) { /* a refusal or a probe moves nothing, as if read */
        ekey k;
        bool full;
        readout ro;
        pad_key(&k, key, keylen);
        if (read_once(t, s, h, &k, keylen, permits, now_ns, res, &ok, &full, &ro) == READ_DONE) {
            if (full) sluice__count(&t->full, 1, false);
            return ok;
        }
    }
    if (now_ns > s->now) PUT(&s->now, now_ns);
    /* no wheel upkeep: keys at rest stay in place until their room is
     * wanted (make_room; head comment, "Reclaiming keys at rest") */
    for (;;) {
        uint32_t i = find(t, s, h, key, keylen);
        bool fresh = false;
        const tcfg *c;
        if (i != UINT32_MAX) {
            if (!(c = ent_cfg(t, s, i))) { /* no memory to carry a ring over */
                if (res) sluice__fail(res, SLUICE_ENOMEM);
                break;
            }
        } else if (c = key_cfg(t, s, (uint32_t)h, key, keylen),
                   permits == 0 || permits > c->pf.capacity) {
            /* a fresh limiter admits exactly 1 .. capacity permits (L for
             * the windows): this request is a probe or a refusal, which
             * changes nothing, so the key is not made */
            sluice__state st;
            sluice__state_init(&c->pf, &st);
            ok = sluice__decide(&c->pf, &st, now_ns, permits, UINT64_MAX, res);
            break;
        } else if ((s->count >= s->ecap ||
                    atomic_load_explicit(&t->keys, memory_order_relaxed) >= t->max_keys) &&
                   (i = reuse_at_rest(t, s, h, key, keylen, c)) != UINT32_MAX) {
            fresh = true; /* in the place of a key at rest */
        } else {
            int64_t retry = -1;
            bool relocked;
            bool room = make_room(t, s, s->now, &retry, &relocked);
            if (relocked && find(t, s, h, key, keylen) != UINT32_MAX) {
                /* another thread made the key while s was unlocked */
                if (room) atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
                continue;
            }
            if (room && s->count >= s->ecap) { /* filled up while unlocked */
                atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
                room = false;
            }
            if (!room) {
                sluice__count(&t->full, 1, false);
                if (res) {
                    sluice__deny(res, 0, retry);
                    res->error = SLUICE_EFULL;
                }
                break;
            }
            i = new_entry(t, s, h, key, keylen, c);
            if (i == UINT32_MAX) {
                atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
                if (res) sluice__fail(res, SLUICE_ENOMEM);
                break;
            }
            fresh = true;
        }
        entry *e = ent(t, s, i);
        if (t->pf.packed) {
            uint64_t w[2], out[2];
            held_words(e, w);
            ok = decide_words(&c->pf, w, now_ns, permits, res, out);
            if (out[0] != w[0] || out[1] != w[1]) put_words(e, out); /* only an admission writes */
        } else {
            ok = sluice__decide(&c->pf, ent_state(e), now_ns, permits, UINT64_MAX, res);
        }
        if (fresh) {
            wheel_file(t, s, i, ent_rest_at(t, s, i));
            publish_due(s);
        }
        break;
    }
    return ok;
}

/* Fetch the lines a lookup of hash h most likely reads, all at once rather
 * than one after the other: its home slot's line and the next four.  In a
 * full table of 10^6 keys a key lies a mean 1.6 slots past its home: 86.7%
 * at most 3 past it, 92.2% at most 4, 95.5% at most 5
 * (sluice__table_probe_len over every key).  Five lines from the home
 * slot's line hold slots home .. home + 5 whole (home + 4 when the home
 * slot starts 48 bytes into its line): 94.7% of lookups, against 89.4%
 * for four lines.  A line asked for in vain costs less than a miss waited
 * for (bench_table --burst: 3 lines 5.2x the floor, 4 lines 4.1x, 5 lines
 * 3.8x, 6 lines 3.9x; docs/benchmarks.md).  Always inlined: gcc counts
 * a prefetch as no side effect, so a function that only prefetches is
 * "pure" to it (-fipa-pure-const), and a call of it that is not inlined
 * first is deleted -- at -O2, the default build's level, every prefetch
 * of the table was gone (bursts 195 ns a decision instead of 55;
 * tests/check_prefetch.sh now looks for them in the library). */
static inline __attribute__((always_inline)) void prefetch_run(const sluice_table *t,
                                                               const shard *s, uint64_t h)
{
    const unsigned char *e = (const unsigned char *)ent(t, s, home_of(s, (uint32_t)h));
    __builtin_prefetch(e);
    __builtin_prefetch(e + 64);
    __builtin_prefetch(e + 128);
    __builtin_prefetch(e + 192);
    __builtin_prefetch(e + 256);
}

static inline shard *shard_for(const sluice_table *t, uint64_t h)
{
    return &t->shards[t->shard_bits ? h >> (64 - t->shard_bits) : 0];
}

/* Whether a table refuses `key` of keylen bytes outright (SLUICE_EINVAL):
 * a NULL key of some length.  Any length is a key (key_view). */
static inline bool bad_key(const void *key, size_t keylen)
{
    return !key && keylen;
}

/* Whether a key is stored as its digest (and decided on its own in a
 * burst). */
static inline bool long_key(size_t keylen) { return keylen > SLUICE_MAX_KEY_BYTES; }

/* One decision on a valid key (not NULL), counted by the caller; a
 * refusal is noted in the sketch of the keys refused most (its own bytes,
 * as the sketch truncates them).  Always inlined: its prefetches must stay
 * in sluice_table_try_acquire_at (tests/check_prefetch.sh). */
static inline __attribute__((always_inline)) bool
decide_one(sluice_table *t, const void *key, size_t keylen, uint64_t permits, uint64_t now_ns,
           sluice_result *res)
{
    const void *const raw = key;
    const size_t rawlen = keylen;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    const uint64_t h = key_hash(t, key, keylen);
    shard *s = shard_for(t, h);
    prefetch_run(t, s, h);
    bool ok;
    const int rc = decide_read(t, s, h, key, keylen, permits, now_ns, res, &ok);
    if (rc != READ_DONE) {
        sluice__spin_lock(&s->mu);
        ok = decide_locked(t, s, h, key, keylen, permits, now_ns, res,
                           rc == READ_TORN);
        sluice__spin_unlock(&s->mu);
    }
    if (!ok) sluice__table_note(t, raw, rawlen, keylen == rawlen ? h : 0);
    return ok;
}

static inline __attribute__((always_inline)) bool
local_try_acquire_at(sluice_table *t, const void *key, size_t keylen, uint64_t permits,
                     uint64_t now_ns, sluice_result *res)
{
    if (bad_key(key, keylen)) {
        if (res) sluice__fail(res, SLUICE_EINVAL);
        sluice__count(&t->counters, permits, false);
        if (key) sluice__table_note(t, key, keylen, 0);
        return false;
    }
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    if (!key) key = ""; /* keylen is 0: no pointer arithmetic on NULL below */
    rd_tls *rd = rd_enter();
    const bool ok = decide_one(t, key, keylen, permits, now_ns, res);
    rd_exit(rd);
    sluice__count(&t->counters, permits, ok);
    return ok;
}

bool sluice_table_try_acquire_at(sluice_table *t, const void *key, size_t keylen,
                                 uint64_t permits, uint64_t now_ns, sluice_result *res)
{
    if (t->ops != &local_ops)
        return t->ops->try_acquire_at(t->place, key, keylen, permits, now_ns, res);
    return local_try_acquire_at(t, key, keylen, permits, now_ns, res);
}

bool sluice_table_try_acquire(sluice_table *t, const void *key, size_t keylen,
                              uint64_t permits, sluice_result *res)
{
    return sluice_table_try_acquire_at(t, key, keylen, permits,
                                       sluice__clock_now(cur_clock(t)), res);
}

/* ---- bursts ------------------------------------------------------------- */

/* A burst is decided as DPDK's bulk hash lookup decides: (1) hash the keys,
 * a chunk of BURST_CHUNK requests at a time, a chunk ahead of the
 * deciding; (2) ask for the lines of each lookup (prefetch_run) BURST_AHEAD
 * requests before it is decided; (3) decide each request in index order as
 * the single call does: decide_read(), else decide_locked().  The window of
 * (2) slides across the whole burst, so that about BURST_AHEAD lookups'
 * lines are on their way while a request is decided: their misses overlap
 * one another, instead of following one another as they do from call to
 * call.  (They do not all hide behind the deciding: on the machine
 * measured, the lines' time comes on top of the work; docs/benchmarks.md.)
 * Why a window and not a whole chunk's lines at once: a prefetch waits for
 * a fill buffer (about 16 lines in flight per core), and an admission's
 * locked compare-and-swap waits for the prefetches before it -- so the
 * core must never ask for much more than it can have in flight.  Asked for
 * BURST_AHEAD requests ahead, right after a decision, the lines have a
 * whole decision's time to get their fill buffers before the next locked
 * instruction (bench_table --burst, three lines a lookup: the chunk's lines
 * at once 5.7x the floor, the window 5.2x, 8 to 12 ahead best; with four
 * lines 4.7x; with five, 10 to 14 ahead alike).  Consecutive requests on
 * one shard that take the lock share one hold of it, at most to the end
 * of a chunk: in one thread that is the same sequence of steps on the
 * shard, and to other threads it is one of the orders separate calls
 * could have had (a request on the shard held is decided under that hold,
 * not read).  The burst holds one lock at a time, as a single call does,
 * and hashes no key while it holds one.  Its decisions are counted once,
 * when it returns (a tally, not a stripe update per decision). */
#define BURST_CHUNK 32 /* requests hashed at a time; the ring holds two chunks */
#define BURST_AHEAD 12 /* requests whose lines are asked for ahead (< BURST_CHUNK) */
#define BURST_RING (2 * BURST_CHUNK)

/* burst_hash() one key at a time. */
static void burst_hash_each(const sluice_table *t, size_t from, size_t to,
                            const void *const keys[], const size_t keylens[], uint64_t hash[],
                            shard *sh[])
{
    for (size_t i = from; i < to; i++) {
        const size_t r = i % BURST_RING;
        if (bad_key(keys[i], keylens[i]) || long_key(keylens[i])) {
            sh[r] = NULL; /* refused, or decided alone (decide_one) */
            continue;
        }
        hash[r] = sluice__siphash13(t->seed, keys[i] ? keys[i] : "", keylens[i]);
        sh[r] = shard_for(t, hash[r]);
    }
}

/* Pass 1 for requests [from, to) of a burst (to - from <= BURST_CHUNK,
 * from a multiple of 8), into the ring: each key's hash and shard, NULL for
 * a bad key.  Eight keys whose lengths have as many whole words (as
 * fixed-size keys do) are hashed at once, in vectors (siphash.c). */
static void burst_hash(const sluice_table *t, size_t from, size_t to, const void *const keys[],
                       const size_t keylens[], uint64_t hash[], shard *sh[])
{
    if (!keys || !keylens) {
        for (size_t i = from; i < to; i++) sh[i % BURST_RING] = NULL;
        return;
    }
    size_t i = from;
    for (; i + 8 <= to; i += 8) {
        const size_t words = keylens[i] / 8;
        bool same = true;
        for (size_t l = i; l < i + 8; l++)
            same &= keys[l] != NULL && !long_key(keylens[l]) && keylens[l] / 8 == words;
        if (!same) {
            burst_hash_each(t, i, i + 8, keys, keylens, hash, sh);
            continue;
        }
        sluice__siphash13_x8(t->seed, &keys[i], &keylens[i], &hash[i % BURST_RING]);
        for (size_t l = i; l < i + 8; l++)
            sh[l % BURST_RING] = shard_for(t, hash[l % BURST_RING]);
    }
    burst_hash_each(t, i, to, keys, keylens, hash, sh);
}

size_t sluice_table_try_acquire_burst_at(sluice_table *t, size_t n, const void *const keys[],
                                         const size_t keylens[], const uint64_t permits[],
                                         uint64_t now_ns, sluice_result results[])
{
    if (t->ops != &local_ops)
        return t->ops->burst_at(t->place, n, keys, keylens, permits, now_ns, results);
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    rd_tls *rd = rd_enter();
    size_t allowed = 0;
    sluice__tally tally = {0}; /* counted once, at the end */
    uint64_t hash[BURST_RING];
    shard *sh[BURST_RING]; /* NULL: a bad key (SLUICE_EINVAL) */
    shard *held = NULL;
    /* the first chunk eight keys at a time, the first lines asked for as
     * soon as their keys are hashed: the hashing of the rest overlaps them */
    for (size_t g = 0; g < n && g < BURST_CHUNK; g += 8) {
        const size_t end = n - g < 8 ? n : g + 8;
        burst_hash(t, g, end, keys, keylens, hash, sh);
        for (size_t j = g; j < end && j < BURST_AHEAD; j++)
            if (sh[j]) prefetch_run(t, sh[j], hash[j]);
    }
    for (size_t i = 0; i < n; i++) {
        if (i % BURST_CHUNK == 0) { /* a chunk begins: the next one is hashed */
            if (held) sluice__spin_unlock(&held->mu);
            held = NULL;
            const size_t next = i + BURST_CHUNK;
            if (next < n)
                burst_hash(t, next, n - next < BURST_CHUNK ? n : next + BURST_CHUNK, keys,
                           keylens, hash, sh);
        }
        const size_t r = i % BURST_RING;
        const uint64_t p = permits ? permits[i] : 1;
        sluice_result *res = results ? &results[i] : NULL;
        bool ok, noted = false;
        if (!sh[r] && keys && keylens && keys[i] && long_key(keylens[i])) {
            if (held) sluice__spin_unlock(&held->mu); /* one lock at a time */
            held = NULL;
            ok = decide_one(t, keys[i], keylens[i], p, now_ns, res); /* noted there */
            noted = true;
        } else if (!sh[r]) {
            if (res) sluice__fail(res, SLUICE_EINVAL);
            ok = false;
        } else {
            const void *key = keys[i] ? keys[i] : "";
            if (held && sh[r] != held) { /* one lock at a time */
                sluice__spin_unlock(&held->mu);
                held = NULL;
            }
            /* on the shard held, read under the hold: as decide_read */
            const int rc = sh[r] == held ? (readable(t, keylens[i]) ? READ_TORN : READ_LOCK)
                                         : decide_read(t, sh[r], hash[r], key, keylens[i], p,
                                                       now_ns, res, &ok);
            if (rc != READ_DONE) {
                if (sh[r] != held) {
                    held = sh[r];
                    sluice__spin_lock(&held->mu);
                }
                ok = decide_locked(t, held, hash[r], key, keylens[i], p, now_ns, res,
                                   rc == READ_TORN);
            }
        }
        const size_t ahead = i + BURST_AHEAD; /* 2: the window moves on */
        if (ahead < n && sh[ahead % BURST_RING])
            prefetch_run(t, sh[ahead % BURST_RING], hash[ahead % BURST_RING]);
        sluice__tally_add(&tally, p, ok);
        allowed += ok;
        if (!ok && !noted && keys && keylens && (keys[i] || !keylens[i])) { /* as one call */
            if (held) sluice__spin_unlock(&held->mu);
            held = NULL;
            sluice__table_note(t, keys[i], keylens[i], sh[r] ? hash[r] : 0);
        }
    }
    if (held) sluice__spin_unlock(&held->mu);
    rd_exit(rd);
    sluice__count_tally(&t->counters, &tally);
    return allowed;
}

void sluice_table_stats_get(const sluice_table *t, sluice_table_stats *out)
{
    t->ops->stats_get(t->place, out);
}

static void local_stats_get(const void *place, sluice_table_stats *out)
{
    const sluice_table *t = place;
    sluice_table *m = (sluice_table *)t; /* loads only */
    out->keys = atomic_load_explicit(&m->keys, memory_order_relaxed);
    out->reclaimed = atomic_load_explicit(&m->reclaimed, memory_order_relaxed);
    out->evicted = atomic_load_explicit(&m->evicted, memory_order_relaxed);
    sluice_stats full;
    sluice__counters_read(&m->full, &full);
    out->refused = full.requests_denied;
    sluice__counters_read(&t->counters, &out->decisions);
}

/* ---- the keys refused most (topk.c) -------------------------------------- */

int sluice_table_set_top(sluice_table *t, size_t counters, size_t max_key_bytes)
{
    if (!t || t->ops->lacks || atomic_load_explicit(&t->top, memory_order_acquire))
        return SLUICE_EINVAL;
    if (counters < 1 || counters > SLUICE_TOP_COUNTERS_MAX || max_key_bytes < 1 ||
        max_key_bytes > SLUICE_TOP_KEY_MAX)
        return SLUICE_EINVAL;
    sluice__topk *k = sluice__topk_new(t->shard_bits, counters, max_key_bytes, t->seed);
    if (!k) return SLUICE_ENOMEM;
    sluice__topk *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&t->top, &none, k, memory_order_release,
                                                 memory_order_relaxed)) {
        sluice__topk_free(k); /* another thread set one first */
        return SLUICE_EINVAL;
    }
    return 0;
}

int sluice_table_top_refused(const sluice_table *t, sluice_top_entry out[], size_t max, size_t *n)
{
    if (n) *n = 0;
    if (!t || !n || (!out && max > 0)) return SLUICE_EINVAL;
    sluice__topk *k = atomic_load_explicit(&((sluice_table *)t)->top, memory_order_acquire);
    if (!k) return SLUICE_ENOENT;
    sluice__topk_read(k, out, max, n);
    return 0;
}

void sluice__table_note(sluice_table *t, const void *key, size_t keylen, uint64_t h)
{
    sluice__topk *k = atomic_load_explicit(&t->top, memory_order_acquire);
    if (!k) return;
    if (!key) key = "";
    /* h = 0: the caller has no hash (a key too long for the table, whose
     * sketch hashes only its prefix); a real hash of 0 is computed again */
    if (h == 0 && keylen <= SLUICE_TOP_KEY_MAX) h = sluice__siphash13(t->seed, key, keylen);
    sluice__topk_note(k, key, keylen, h);
}

/* ---- composite decisions: a key's kind ops (table/hold.h) -------------- */

void sluice__table_key_view(sluice__key_hold *kh)
{
    kh->skey = kh->key ? kh->key : "";
    kh->skeylen = kh->keylen;
    key_view(kh->t, &kh->skey, &kh->skeylen, kh->dig);
}

void *sluice__table_shard_of(sluice_table *t, const void *key, size_t keylen, uint64_t *hash)
{
    if (!key) key = "";
    *hash = key_hash(t, key, keylen);
    return shard_for(t, *hash);
}

void sluice__table_lock(sluice_table *t, void *sh, uint64_t now_ns)
{
    shard *s = sh;
    (void)rd_enter(); /* the parts use configurations until the unlock */
    sluice__spin_lock(&s->mu);
    if (now_ns > s->now) PUT(&s->now, now_ns);
    if ((s->now >> TICK_SHIFT) > s->wheel.cur) {
        uint32_t budget = SWEEP_BUDGET;
        wheel_advance(t, s, s->now, &budget);
        publish_due(s);
    }
}

void sluice__table_unlock(sluice_table *t, void *sh)
{
    (void)t;
    sluice__spin_unlock(&((shard *)sh)->mu);
    rd_exit(&rd_me);
}

void sluice__table_find(sluice__key_hold *kh)
{
    sluice_table *t = kh->t;
    shard *s = shard_for(t, kh->hash);
    const void *key = kh->skey;
    uint32_t slot = find(t, s, kh->hash, key, kh->skeylen);
    const tcfg *c = slot == UINT32_MAX ? key_cfg(t, s, (uint32_t)kh->hash, key, kh->skeylen)
                                       : cur_cfg(t);
    kh->h.pf = &c->pf;
    kh->shard = s;
    kh->created = false;
    kh->gen = s->gen;
    if (slot == UINT32_MAX) {
        kh->entry = UINT32_MAX;
        sluice__state_init(&c->pf, &kh->h.base);
        kh->h.st = &kh->h.base;
        return;
    }
    kh->entry = slot;
    /* carried over the changes it missed; when memory for a ring runs out,
     * decided under the configuration it reached (the next call retries) */
    const tcfg *ec = ent_cfg(t, s, kh->entry);
    kh->h.pf = ec ? &ec->pf : &cfg_of_id(t, ent(t, s, kh->entry)->cfg)->pf;
    entry *e = ent(t, s, kh->entry);
    if (t->pf.packed) {
        load_state(t, kh->h.pf, e, &kh->h.base);
        kh->h.st = &kh->h.base;
    } else {
        kh->h.st = ent_state(e);
    }
}

int sluice__table_make(sluice__key_hold *kh, bool alone, int64_t *retry)
{
    sluice_table *t = kh->t;
    shard *s = kh->shard;
    bool room = s->count < s->ecap && reserve(t);
    if (!room && alone) { /* keys at rest in this shard, then the policy */
        sweep_all(t, s, s->now);
        publish_due(s);
        room = s->count < s->ecap && reserve(t);
        if (!room && (t->flags & SLUICE_TABLE_EVICT_LRU) && evict_one(t, s)) {
            publish_due(s);
            room = true;
        }
    }
    if (!room) {
        uint64_t first = UINT64_MAX;
        for (unsigned k = 0; k < t->nshards; k++) {
            uint64_t d = atomic_load_explicit(&t->dues[k], memory_order_relaxed);
            if (d < first) first = d;
        }
        *retry = first == UINT64_MAX ? -1
                 : first > s->now    ? (int64_t)sluice__min_u64(first - s->now, INT64_MAX)
                                     : 1;
        return SLUICE_EFULL;
    }
    uint32_t i = new_entry(t, s, kh->hash, kh->skey, kh->skeylen,
                           (const tcfg *)kh->h.pf); /* the pf of sluice__table_find */
    if (i == UINT32_MAX) {
        atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
        *retry = -1;
        return SLUICE_ENOMEM;
    }
    kh->entry = i;
    kh->gen = s->gen;
    kh->created = true;
    if (!t->pf.packed) kh->h.st = ent_state(ent(t, s, i));
    return 0;
}

void sluice__table_refind(sluice__key_hold *kh)
{
    sluice_table *t = kh->t;
    shard *s = kh->shard;
    if (kh->entry == UINT32_MAX || kh->gen == s->gen) return;
    kh->entry = find(t, s, kh->hash, kh->skey, kh->skeylen);
    kh->gen = s->gen;
    if (!t->pf.packed) kh->h.st = ent_state(ent(t, s, kh->entry));
}

void sluice__table_store(sluice__key_hold *kh)
{
    sluice_table *t = kh->t;
    shard *s = kh->shard;
    sluice__table_refind(kh);
    entry *e = ent(t, s, kh->entry);
    if (t->pf.packed) store_state(t, kh->h.pf, e, &kh->h.tmp);
    else if (!t->pf.ops->judge) memcpy(ent_state(e), &kh->h.tmp, sizeof kh->h.tmp);
    if (kh->created) {
        wheel_file(t, s, kh->entry, ent_rest_at(t, s, kh->entry));
        publish_due(s);
    }
}

void sluice__table_unmake(sluice__key_hold *kh)
{
    sluice__table_refind(kh);
    drop_entry(kh->t, kh->shard, kh->entry);
    kh->entry = UINT32_MAX;
    kh->created = false;
}

void sluice__table_reclaim(sluice_table *t, uint64_t now_ns)
{
    rd_tls *rd = rd_enter();
    for (unsigned k = 0; k < t->nshards; k++) {
        shard *o = &t->shards[k];
        if (atomic_load_explicit(o->due, memory_order_relaxed) > now_ns) continue;
        sluice__spin_lock(&o->mu);
        sweep_all(t, o, now_ns > o->now ? now_ns : o->now);
        publish_due(o);
        sluice__spin_unlock(&o->mu);
    }
    rd_exit(rd);
}

void sluice__table_count(sluice_table *t, uint64_t permits, bool ok, bool full)
{
    sluice__count(&t->counters, permits, ok);
    if (full) sluice__count(&t->full, 1, false);
}

void sluice__table_count_elsewhere(sluice_table *t, uint64_t permits)
{
    sluice__count_elsewhere(&t->counters, permits);
}

/* A composite of table keys only (hold.h): every key read as a single
 * decision reads it (decide_read), and, when all admit, every shard taken
 * with sluice__spin_try_upgrade and the words stored (put_words, as a
 * holder stores them) -- no lock held while reading and deciding, no lock waited for.  The
 * snapshot is one instant of every limit: each shard's sequence is read
 * before its keys and checked unchanged after the last key of all, and each
 * key's state words (which admissions without the lock change, the
 * sequence not) are read again after the last key of all and found as
 * first read -- an admission only adds to a state, so a state found twice
 * was held in between -- so every key held its state from its read to
 * those checks; the upgrades, each from the sequence the read began with,
 * succeed only if no holder ran since, and each state is checked once more
 * under them (an admission without the lock may have come before), so the
 * admission is linearised at the last check, with every state as read.  A refusal or a probe writes nothing, as a single one.  Anything
 * else -- a key not held yet (its entry must be made), a key that is not
 * read (long, or of a table whose states do not pack), a table in a shared
 * region, a change of spec to carry over, a shard whose wheel is due a
 * step, a key twice, holders met READ_TRIES times -- returns -1 with
 * nothing decided, stored or counted: the general path decides it. */
static int tables_decide(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                          uint64_t now_ns, sluice__answer *ans)
{
    struct {
        sluice_table *t;
        shard *s;
        uint64_t h, v;
        uint64_t w[2], out[2];
        ekey k;
        uint32_t at;
        bool first; /* the first part of its shard: reads and takes its sequence */
        bool ok;
    } p[SLUICE_COMPOSITE_MAX];
    if (!refs || n - 1 >= SLUICE_COMPOSITE_MAX) return -1;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    for (size_t i = 0; i < n; i++) {
        const sluice_limit_ref *r = &refs[i];
        sluice_table *t = r->table;
        if (r->limiter || !t || t->region || !readable(t, r->keylen) || (!r->key && r->keylen))
            return -1;
        const void *key = r->key ? r->key : "";
        p[i].t = t;
        p[i].h = sluice__siphash13(t->seed, key, r->keylen);
        p[i].s = shard_for(t, p[i].h);
        pad_key(&p[i].k, key, r->keylen);
        prefetch_run(t, p[i].s, p[i].h);
        p[i].first = true;
        for (size_t j = 0; j < i; j++) {
            if (p[j].s != p[i].s) continue;
            p[i].first = false;
            if (refs[j].keylen == r->keylen && p[j].k.w[0] == p[i].k.w[0] &&
                p[j].k.w[1] == p[i].k.w[1])
                return -1; /* a key twice */
        }
    }
    for (unsigned tries = 0; tries < READ_TRIES; tries++) {
        bool torn = false, all = true;
        for (size_t i = 0; i < n && !torn; i++) {
            if (p[i].first) {
                p[i].v = sluice__spin_read_begin(&p[i].s->mu);
                torn = p[i].v & 1;
            } else {
                for (size_t j = 0; j < i; j++)
                    if (p[j].s == p[i].s) p[i].v = p[j].v;
            }
            if (torn) break;
            sluice_table *t = p[i].t;
            const uint32_t at = read_find(t, p[i].s, p[i].h, &p[i].k, refs[i].keylen);
            if (at == RUN_TORN) {
                torn = true;
                break;
            }
            if (at == UINT32_MAX) return -1; /* a key to make: the general path */
            const tcfg *c = read_cfg(t, p[i].s, at);
            if (!c) return -1;
            if (!read_words(ent(t, p[i].s, at), p[i].w)) {
                torn = true;
                break;
            }
            if (ans) ans[i] = (sluice__answer){.ok = false};
            p[i].ok = decide_words(&c->pf, p[i].w, now_ns, permits, ans ? &ans[i].r : NULL,
                                   p[i].out);
            p[i].at = at;
            all &= p[i].ok;
        }
        for (size_t i = 0; i < n && !torn; i++) { /* every state still as read */
            uint64_t w[2];
            torn = !read_words(ent(p[i].t, p[i].s, p[i].at), w) || w[0] != p[i].w[0] ||
                   w[1] != p[i].w[1];
        }
        for (size_t i = 0; i < n && !torn; i++)
            if (p[i].first && !sluice__spin_read_valid(&p[i].s->mu, p[i].v)) torn = true;
        if (torn) {
            sluice__backoff(tries);
            continue;
        }
        if (all && permits > 0) { /* take every shard as read, or none */
            size_t got = 0;
            for (; got < n; got++)
                if (p[got].first && !sluice__spin_try_upgrade(&p[got].s->mu, p[got].v)) break;
            bool upkeep = false, moved = false;
            for (size_t i = 0; i < got && !upkeep; i++)
                upkeep = p[i].first && !(p[i].t->flags & SLUICE_TABLE_RECLAIM_WHEN_FULL) &&
                         ((now_ns > p[i].s->now ? now_ns : p[i].s->now) >> TICK_SHIFT) >
                             p[i].s->wheel.cur;
            for (size_t i = 0; got == n && !upkeep && !moved && i < n; i++) {
                uint64_t w[2]; /* an admission without the lock may have come between */
                held_words(ent(p[i].t, p[i].s, p[i].at), w);
                moved = w[0] != p[i].w[0] || w[1] != p[i].w[1];
            }
            if (got < n || upkeep || moved) { /* nothing stored: let them go */
                for (size_t i = 0; i < got; i++)
                    if (p[i].first) sluice__spin_unlock(&p[i].s->mu);
                if (upkeep) return -1; /* the wheel's step: the general path */
                sluice__backoff(tries);
                continue;
            }
            for (size_t i = 0; i < n; i++) {
                if (p[i].first && now_ns > p[i].s->now) PUT(&p[i].s->now, now_ns);
                put_words(ent(p[i].t, p[i].s, p[i].at), p[i].out);
            }
            for (size_t i = 0; i < n; i++)
                if (p[i].first) sluice__spin_unlock(&p[i].s->mu);
        }
        const bool ok = all; /* an admission, or a probe all allow */
        for (size_t i = 0; i < n; i++) {
            if (ans) ans[i].ok = p[i].ok;
            sluice__count(&p[i].t->counters, permits, ok);
            if (!ok && permits && p[i].ok) sluice__count_elsewhere(&p[i].t->counters, permits);
            if (!ok) sluice__table_note(p[i].t, refs[i].key, refs[i].keylen, p[i].h);
        }
        return ok;
    }
    return -1;
}

int sluice__tables_decide(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                          uint64_t now_ns, sluice__answer *ans)
{
    rd_tls *rd = rd_enter();
    const int rc = tables_decide(refs, n, permits, now_ns, ans);
    rd_exit(rd);
    return rc;
}

/* ---- key operations: remove, reset, peek, scan -------------------------- */

/* Whether (key, keylen) is a key the table accepts: any length, but not
 * NULL with a length (key_view stores a long one as its digest). */
static inline bool key_ok(const void *key, size_t keylen)
{
    return key || !keylen;
}

/* Lock the shard of key and find its entry: returns the key's slot, or
 * UINT32_MAX when the key is not held (the shard stays locked either way). */
static uint32_t lock_find(sluice_table *t, const void *key, size_t keylen, shard **sp)
{
    if (!key) key = ""; /* keylen is 0 */
    const uint64_t h = key_hash(t, key, keylen);
    shard *s = shard_for(t, h);
    sluice__spin_lock(&s->mu);
    *sp = s;
    return find(t, s, h, key, keylen);
}

static int table_remove(sluice_table *t, const void *key, size_t keylen)
{
    if (!t || !key_ok(key, keylen)) return SLUICE_EINVAL;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    shard *s;
    uint32_t i = lock_find(t, key, keylen, &s);
    if (i != UINT32_MAX) {
        drop_entry(t, s, i); /* out of the wheel and the probe array, place freed */
        publish_due(s);
    }
    sluice__spin_unlock(&s->mu);
    return i == UINT32_MAX ? SLUICE_ENOENT : 0;
}

int sluice_table_remove(sluice_table *t, const void *key, size_t keylen)
{
    return (t ? t->ops : &local_ops)->remove(t ? t->place : NULL, key, keylen);
}

static int local_remove(void *place, const void *key, size_t keylen)
{
    sluice_table *t = place;
    rd_tls *rd = rd_enter(); /* the reclaiming wheel's upkeep reads configurations */
    const int rc = table_remove(t, key, keylen);
    rd_exit(rd);
    return rc;
}

int sluice_table_reset(sluice_table *t, const void *key, size_t keylen)
{
    int rc = sluice_table_remove(t, key, keylen);
    return rc == SLUICE_ENOENT ? 0 : rc; /* a key not held is at rest already */
}

/* What entry i holds, for the caller (shard locked): under the
 * configuration that applies to it (rest_of). */
static void key_state_of(sluice_table *t, shard *s, uint32_t i, sluice_key_state *out)
{
    out->rest_ns = rest_of(t, s, i);
    out->last_ns = ent_t_last(t, ent(t, s, i));
    out->flags = META_LEN(ent(t, s, i)->meta) == DIGEST_LEN ? SLUICE_KEY_DIGEST : 0;
}

static int peek_at(sluice_table *t, const void *key, size_t keylen, uint64_t permits,
                   uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    if (!t || !key_ok(key, keylen)) {
        if (res) sluice__fail(res, SLUICE_EINVAL);
        if (state) memset(state, 0, sizeof *state);
        return SLUICE_EINVAL;
    }
    sluice_result r = {0};
    sluice__state fresh, tmp;
    shard *s;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    if (readable(t, keylen)) { /* a probe: read as decide_read reads */
        if (!key) key = "";
        const uint64_t h = key_hash(t, key, keylen);
        s = shard_for(t, h);
        ekey k;
        pad_key(&k, key, keylen);
        for (unsigned n = 0; n < READ_TRIES; n++) {
            const uint64_t v = sluice__spin_read_begin(&s->mu);
            if (v & 1) {
                sluice__backoff(n);
                continue;
            }
            const uint32_t at = read_find(t, s, h, &k, keylen);
            if (at == RUN_TORN) continue;
            const tcfg *c = read_cfg(t, s, at);
            if (!c) break; /* the lock's */
            if (at == UINT32_MAX) sluice__state_init(&c->pf, &fresh);
            else if (!read_state(t, &c->pf, s, at, &fresh)) continue;
            sluice__judge(&c->pf, &fresh, &tmp, now_ns, permits, &r);
            if (!sluice__spin_read_valid(&s->mu, v)) continue;
            if (state && at != UINT32_MAX) {
                state->last_ns = fresh.t_last;
                state->rest_ns = sluice__rest_at(&c->pf, &fresh);
            } else if (state) {
                memset(state, 0, sizeof *state);
            }
            if (res) *res = r;
            return at == UINT32_MAX ? SLUICE_ENOENT : 0;
        }
    }
    uint32_t i = lock_find(t, key, keylen, &s);
    if (i == UINT32_MAX) {
        const void *k = key ? key : "";
        const tcfg *c = s->novr ? key_cfg(t, s, (uint32_t)key_hash(t, k, keylen), k,
                                          keylen)
                                : cur_cfg(t);
        sluice__spin_unlock(&s->mu);
        /* what a fresh limiter would answer: decided on a fresh state of
         * our own, which nothing stores */
        sluice__state_init(&c->pf, &fresh);
        sluice__judge(&c->pf, &fresh, &tmp, now_ns, permits, &r);
        if (state) memset(state, 0, sizeof *state);
        if (res) *res = r;
        return SLUICE_ENOENT;
    }
    entry *e = ent(t, s, i);
    sluice__state held;
    const sluice__state *st = &held;
    /* the changes it missed are carried over first (what its next decision
     * would do; nothing else changes) */
    const tcfg *c = ent_cfg(t, s, i);
    if (!c) {
        sluice__spin_unlock(&s->mu);
        if (res) sluice__fail(res, SLUICE_ENOMEM);
        if (state) memset(state, 0, sizeof *state);
        return SLUICE_ENOMEM;
    }
    if (t->pf.packed) load_state(t, &c->pf, e, &held);
    else st = ent_state(e);
    /* judged without writing: on a copy, or in place by the window logs'
     * judge, which only reads their ring */
    sluice__judge(&c->pf, st, &tmp, now_ns, permits, &r);
    if (state) key_state_of(t, s, i, state);
    sluice__spin_unlock(&s->mu);
    if (res) *res = r;
    return 0;
}

int sluice_table_peek_at(sluice_table *t, const void *key, size_t keylen, uint64_t permits,
                         uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    return (t ? t->ops : &local_ops)->peek_at(t ? t->place : NULL, key, keylen, permits, now_ns, res,
                                              state);
}

static int local_peek_at(void *place, const void *key, size_t keylen, uint64_t permits,
                         uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    sluice_table *t = place;
    rd_tls *rd = rd_enter(); /* configurations read, also after the unlock */
    const int rc = peek_at(t, key, keylen, permits, now_ns, res, state);
    rd_exit(rd);
    return rc;
}

/* The scan.  Its cursor is a point in the scan's order of keys: a
 * permutation of the bits of the key's hash -- its shard (the top bits),
 * then its tag (the low 32 bits, which fix its home slot: home_of is
 * non-decreasing in the tag), then the hash's middle bits (scan_order).  A
 * call gives the keys of order >= the cursor in increasing order, a home
 * slot at a time: under the shard's lock it copies the keys whose home is
 * that slot (all of one run, Robin Hood order keeps them together) and
 * whose order is >= the cursor, unlocks, sorts them, and gives them; the
 * cursor becomes the order after the last one given, or the smallest order
 * of the next home slot.  0 both starts and ends a scan.
 *
 * Why a key held for the whole scan is given (entries move -- a Robin Hood
 * insertion moves a run's tail a slot on, a removal moves it a slot back --
 * so no slot number can be a cursor; a key's hash never changes):
 *  1. The cursor only grows, from 0 to the end (or wraps to 0 past the
 *     largest order, which ends the scan), and it passes order x only
 *     (a) by giving a key of order x, or (b) by a look, under its shard's
 *     lock, at the home slot of every key of order x (moving to the next
 *     home, or passing up to EMPTY_RUN empty slots -- an empty slot is a home
 *     of no key: a key lies at its home or past it, every slot between held),
 *     or (c) by passing an empty shard, seen so under its lock.
 *  2. So when the cursor passes a key's order during the scan, while the key
 *     is held: (a) gives it; (b) finds it in its home's run and copies it,
 *     to give it in order -- the cursor moves past it only once it is given
 *     (a callback that stops, or the call's budget, leaves the cursor on
 *     the next key not given); (c) cannot happen.
 * A key is given at most once per time it was made: once given, the cursor
 * is past its order.  Two keys of one table with equal 64-bit hashes are
 * the one exception: the second is skipped when a call ends between them
 * (a chance of about n^2 / 2^65 for n keys that such a pair exists at all).
 * The work of a call is at most `count` places; the callback runs unlocked,
 * on copies (on the stack up to SCAN_INLINE bytes of keys and SCAN_KEYS
 * keys, else in buffers made with the shard unlocked, after which the home
 * is looked at again). */
#define SCAN_INLINE 256 /* key bytes copied to the stack */
#define SCAN_KEYS 16    /* keys of one home slot copied to the stack */
#define EMPTY_RUN 256   /* empty slots passed over as one place */

/* A key's place in the scan's order (hash h). */
static inline uint64_t scan_order(const sluice_table *t, uint64_t h)
{
    const unsigned sb = t->shard_bits;
    return (h & ~(UINT64_MAX >> sb)) | (h & 0xffffffffu) << (32 - sb) |
           ((h >> 32) & ((UINT64_C(1) << (32 - sb)) - 1));
}

/* The smallest order of shard k's home slot `home` (home <= cap; cap: the
 * next shard's first order, 0 past the last shard). */
static uint64_t home_order(const sluice_table *t, unsigned k, const shard *s, uint32_t home)
{
    const unsigned sb = t->shard_bits;
    if (home >= s->cap)
        return k + 1 >= t->nshards ? 0 : (uint64_t)(k + 1) << (64 - sb);
    const uint64_t tag = (((uint64_t)home << 32) + s->cap - 1) / s->cap; /* < 2^32 */
    return (sb ? (uint64_t)k << (64 - sb) : 0) | tag << (32 - sb);
}

typedef struct scan_key {
    uint64_t order;
    size_t off, len; /* in the key buffer */
    sluice_key_state ks;
} scan_key;

static int scan_counted(sluice_table *t, uint64_t cursor, size_t count,
                        sluice_table_scan_fn fn, void *arg, uint64_t *next_cursor,
                        size_t *visited)
{
    if (visited) *visited = 0;
    if (!t || !fn || !next_cursor || count == 0) return SLUICE_EINVAL;
    const unsigned sb = t->shard_bits;
    unsigned char stackbuf[SCAN_INLINE];
    scan_key stackkeys[SCAN_KEYS];
    unsigned char *buf = stackbuf;
    scan_key *keys = stackkeys;
    size_t bufcap = sizeof stackbuf, keycap = SCAN_KEYS, work = 0;
    uint64_t c = cursor;
    bool done = false;
    int rc = 0;
    while (!done && work < count && rc == 0) {
        const unsigned k = sb ? (unsigned)(c >> (64 - sb)) : 0;
        shard *s = &t->shards[k];
        sluice__spin_lock(&s->mu);
        if (s->count == 0) { /* nothing held: the shard is one place */
            sluice__spin_unlock(&s->mu);
            work++;
            c = home_order(t, k, s, s->cap);
            done = c == 0;
            continue;
        }
        const uint32_t home = home_of(s, (uint32_t)(c >> (32 - sb)));
        if (!META_CODE(ent(t, s, home)->meta)) { /* empty slots: homes of no key */
            uint32_t h2 = home;
            while (h2 < s->cap && h2 - home < EMPTY_RUN && !META_CODE(ent(t, s, h2)->meta)) h2++;
            sluice__spin_unlock(&s->mu);
            work++;
            c = home_order(t, k, s, h2);
            done = c == 0;
            continue;
        }
        size_t n = 0, used = 0, need_keys = 0, need_bytes = 0;
        for (uint32_t o = 0, j = home;; o++) { /* the run's keys of this home */
            entry *e = ent(t, s, j);
            if (!META_CODE(e->meta)) break;
            const uint32_t d = slot_dist(t, s, j);
            if (d < o) break; /* a later home's */
            if (d == o) {
                const uint64_t ord = scan_order(t, ent_hash(t, e));
                const size_t len = key_bytes(META_LEN(e->meta)); /* a digest's 16 */
                if (ord >= c) {
                    need_keys++;
                    need_bytes += len;
                    if (n < keycap && used + len <= bufcap) {
                        memcpy(buf + used, len > INLINE_KEY ? e->key.far.ext : e->key.in, len);
                        keys[n] = (scan_key){.order = ord, .off = used, .len = len};
                        key_state_of(t, s, j, &keys[n].ks);
                        used += len;
                        n++;
                    }
                }
            }
            if (++j == s->cap) j = 0;
        }
        sluice__spin_unlock(&s->mu);
        if (n < need_keys) { /* bigger buffers, made unlocked; then look again */
            unsigned char *nb = need_bytes > bufcap ? sluice__malloc(need_bytes) : NULL;
            scan_key *nk = need_keys > keycap ? sluice__calloc(need_keys, sizeof *nk) : NULL;
            if ((need_bytes > bufcap && !nb) || (need_keys > keycap && !nk)) {
                sluice__free(nb);
                sluice__free(nk);
                rc = SLUICE_ENOMEM;
                break;
            }
            if (nb) {
                if (buf != stackbuf) sluice__free(buf);
                buf = nb;
                bufcap = need_bytes;
            }
            if (nk) {
                if (keys != stackkeys) sluice__free(keys);
                keys = nk;
                keycap = need_keys;
            }
            continue;
        }
        for (size_t a = 1; a < n; a++) /* in order (a handful: insertion sort) */
            for (size_t b = a; b > 0 && keys[b - 1].order > keys[b].order; b--) {
                const scan_key x = keys[b];
                keys[b] = keys[b - 1];
                keys[b - 1] = x;
            }
        size_t i = 0;
        if (n == 0) work++; /* a home whose keys were all given before */
        for (; i < n && work < count && rc == 0; i++) {
            work++;
            c = keys[i].order + 1; /* past the largest: 0, the end */
            done = c == 0;
            rc = fn(buf + keys[i].off, keys[i].len, &keys[i].ks, arg); /* no lock held */
        }
        if (i == n && rc == 0 && !done) { /* the home is done: the next one */
            c = home_order(t, k, s, home + 1);
            done = c == 0;
        }
    }
    if (buf != stackbuf) sluice__free(buf);
    if (keys != stackkeys) sluice__free(keys);
    *next_cursor = done ? 0 : c;
    if (visited) *visited = work;
    return rc;
}

int sluice__table_scan_counted(sluice_table *t, uint64_t cursor, size_t count,
                               sluice_table_scan_fn fn, void *arg, uint64_t *next_cursor,
                               size_t *visited)
{
    return (t ? t->ops : &local_ops)->scan(t ? t->place : NULL, cursor, count, fn, arg, next_cursor,
                                           visited);
}

static int local_scan(void *place, uint64_t cursor, size_t count, sluice_table_scan_fn fn,
                      void *arg, uint64_t *next_cursor, size_t *visited)
{
    sluice_table *t = place;
    rd_tls *rd = rd_enter(); /* the states given carry keys over changes first */
    const int rc = scan_counted(t, cursor, count, fn, arg, next_cursor, visited);
    rd_exit(rd);
    return rc;
}

int sluice_table_scan(sluice_table *t, uint64_t cursor, size_t count, sluice_table_scan_fn fn,
                      void *arg, uint64_t *next_cursor)
{
    return sluice__table_scan_counted(t, cursor, count, fn, arg, next_cursor, NULL);
}

/* ---- configurations: changing the spec of every key --------------------- */

/* The configuration numbered id (made and published before any entry could
 * hold its number). */
static tcfg *cfg_of_id(const sluice_table *t, uint32_t id)
{
    sluice_table *m = (sluice_table *)t; /* loads only */
    const uint64_t v = (uint64_t)id + 1;
    const unsigned j = 63u - (unsigned)__builtin_clzll(v);
    _Atomic(tcfg *) *seg = atomic_load_explicit(&m->cfgs[j], memory_order_acquire);
    return atomic_load_explicit(&seg[v - ((uint64_t)1 << j)], memory_order_acquire);
}

static const tcfg *cur_cfg(const sluice_table *t)
{
    return atomic_load_explicit(&((sluice_table *)t)->cur, memory_order_acquire);
}

/* The clock of the current spec (what the live forms read). */
static sluice__clock cur_clock(const sluice_table *t)
{
    rd_tls *rd = rd_enter();
    const sluice__clock c = cur_cfg(t)->pf.clock;
    rd_exit(rd);
    return c;
}

/* Number c and make it findable (t->cfg_mu held, or the table not yet
 * shared); false when out of memory or numbers. */
static bool cfg_add(sluice_table *t, tcfg *c)
{
    const bool reuse = t->nfree > 0; /* an id a retired configuration left */
    if (!reuse && t->ncfg >= UINT32_MAX - 1) return false;
    const uint32_t id = reuse ? t->free_ids[t->nfree - 1] : t->ncfg;
    const uint64_t v = (uint64_t)id + 1;
    const unsigned j = 63u - (unsigned)__builtin_clzll(v);
    _Atomic(tcfg *) *seg = atomic_load_explicit(&t->cfgs[j], memory_order_relaxed);
    if (!seg) {
        seg = sluice__calloc((size_t)1 << j, sizeof *seg);
        if (!seg) return false;
        atomic_store_explicit(&t->cfgs[j], seg, memory_order_release);
    }
    if (reuse) t->nfree--;
    else t->ncfg++;
    c->id = id;
    atomic_store_explicit(&seg[v - ((uint64_t)1 << j)], c, memory_order_release);
    return true;
}

/* Unmap configuration c: its id is free for reuse (a read without the lock
 * that still finds an entry with that id is under a sequence a holder has
 * moved on since: cfg_collect locked every shard). */
static void cfg_unmap(sluice_table *t, tcfg *c)
{
    const uint64_t v = (uint64_t)c->id + 1;
    const unsigned j = 63u - (unsigned)__builtin_clzll(v);
    _Atomic(tcfg *) *seg = atomic_load_explicit(&t->cfgs[j], memory_order_relaxed);
    atomic_store_explicit(&seg[v - ((uint64_t)1 << j)], NULL, memory_order_release);
    if (t->nfree == t->free_cap) { /* at most every id ever made: bounded by the most live */
        const uint32_t cap = t->free_cap ? 2 * t->free_cap : 16;
        uint32_t *a = sluice__malloc((size_t)cap * sizeof *a);
        if (!a) return; /* the id stays used: one number lost, nothing else */
        if (t->nfree) memcpy(a, t->free_ids, t->nfree * sizeof *a);
        sluice__free(t->free_ids);
        t->free_ids = a;
        t->free_cap = cap;
    }
    t->free_ids[t->nfree++] = c->id;
}

/* Retire configuration c (t->cfg_mu held; no key is under it and it is
 * linked nowhere): unmapped, then stamped with the reader epoch, which moves
 * on. */
static void cfg_retire(sluice_table *t, tcfg *c)
{
    cfg_unmap(t, c);
    sluice__retire(&t->retired, &c->ret, sluice__rd_retire_stamp());
}

/* Free the retired configurations no reader section can hold any more
 * (t->cfg_mu held). */
static void cfg_free_retired(sluice_table *t)
{
    sluice__retired_free(&t->retired, offsetof(tcfg, ret), sluice__free, false);
}

/* The chain grew past CFG_KEEP configurations (t->cfg_mu held): carry every
 * held key to the newest (each shard locked in turn, as any locked call
 * would carry it), then retire every configuration of the chain before the
 * newest -- no key is under one, no lookup finds one -- for
 * cfg_free_retired.  A key that cannot be carried (a ring that cannot
 * grow) leaves the chain as it is, for a later change. */
#define CFG_KEEP 8
static void cfg_collect(sluice_table *t)
{
    tcfg *cur = atomic_load_explicit(&t->cur, memory_order_relaxed);
    bool all = true;
    for (unsigned k = 0; k < t->nshards && all; k++) {
        shard *s = &t->shards[k];
        sluice__spin_lock(&s->mu);
        for (uint32_t j = 0; j < s->cap && all; j++)
            if (META_CODE(ent(t, s, j)->meta) && ent(t, s, j)->cfg != cur->id)
                all = ent_cfg(t, s, j) != NULL;
        sluice__spin_unlock(&s->mu);
    }
    if (!all) return;
    for (tcfg *c = t->oldest, *n; c != cur; c = n) {
        n = atomic_load_explicit(&c->newer, memory_order_relaxed);
        cfg_unmap(t, c);
        sluice__retire(&t->retired, &c->ret, 0);
    }
    /* unmapped before the epoch moves on: a section that begins later
     * reads the epoch (acquire) after this, and finds none of them */
    sluice__retired_stamp(t->retired, sluice__rd_retire_stamp());
    t->oldest = cur;
    t->chain = 1;
}

/* The first configuration: the spec the table was made with. */
static int cfg_init(sluice_table *t)
{
    tcfg *c = sluice__calloc(1, sizeof *c);
    if (!c) return SLUICE_ENOMEM;
    c->pf = t->pf;
    if (!cfg_add(t, c)) {
        sluice__free(c);
        return SLUICE_ENOMEM;
    }
    atomic_store_explicit(&t->cur, c, memory_order_relaxed);
    t->oldest = c;
    t->chain = 1;
    t->max_ovr = SLUICE_TABLE_OVERRIDES_DEFAULT;
    if (pthread_mutex_init(&t->cfg_mu, NULL) != 0) return SLUICE_ENOMEM;
    return 0;
}

static void cfg_free(sluice_table *t)
{
    for (unsigned j = 0; j < CFG_SEGS; j++) { /* every configuration numbered */
        _Atomic(tcfg *) *seg = atomic_load_explicit(&t->cfgs[j], memory_order_relaxed);
        if (!seg) continue;
        for (size_t i = 0; i < ((size_t)1 << j); i++)
            sluice__free(atomic_load_explicit(&seg[i], memory_order_relaxed));
        sluice__free((void *)seg);
    }
    sluice__retired_free(&t->retired, offsetof(tcfg, ret), sluice__free, true); /* and those retired */
    sluice__free(t->free_ids);
}

/* Carry entry e's state from configuration c to n at time `at` (clamped to
 * the key's latest admission: reconfigure.c).  False when a window log's
 * ring cannot grow (nothing changes). */
static bool carry(sluice_table *t, entry *e, const tcfg *c, const tcfg *n, uint64_t at)
{
    sluice__state st, *sp = &st;
    if (t->pf.packed) load_state(t, &c->pf, e, &st);
    else sp = ent_state(e);
    if (n->pf.ops->reserve && !n->pf.ops->reserve(sp)) return false;
    sluice__reconfigure_state(&c->pf, &n->pf, sp, at);
    if (t->pf.packed) {
        sluice__reconfigure_fit(&n->pf, &st); /* the entry keeps 16 bytes */
        store_state(t, &n->pf, e, &st);
    }
    PUT(&e->cfg, n->id);
    return true;
}

/* Carry entry e's state from configuration c over each change after it, in
 * order, each at its time (clamped to the key's latest admission:
 * reconfigure.c, the same carry-over a single limiter makes).  Returns the
 * newest, or NULL when a window log's ring cannot grow (the entry stays at
 * the configuration it reached). */
static const tcfg *catch_up(sluice_table *t, entry *e, const tcfg *c, const tcfg *n)
{
    do {
        if (!carry(t, e, c, n, n->at)) return NULL;
        c = n;
    } while ((n = atomic_load_explicit(&((tcfg *)c)->newer, memory_order_acquire)));
    return c;
}

/* The configuration entry i decides under (shard s locked), its state
 * carried over the changes it missed first; NULL when memory runs out. */
static const tcfg *ent_cfg(sluice_table *t, shard *s, uint32_t i)
{
    entry *e = ent(t, s, i);
    const tcfg *c = cur_cfg(t);
    if (e->cfg == c->id) return c; /* the common case: under the newest */
    c = cfg_of_id(t, e->cfg);
    const tcfg *n = atomic_load_explicit(&((tcfg *)c)->newer, memory_order_acquire);
    return n ? catch_up(t, e, c, n) : c;
}

/* When entry i comes to rest under the configuration that applies to it
 * (shard locked).  An entry that could not be carried over (no memory for
 * its ring) is taken to rest a second after the shard's time: the wheel
 * looks at it again then, and never drops it unconverted. */
static uint64_t rest_of(sluice_table *t, shard *s, uint32_t i)
{
    const tcfg *c = ent_cfg(t, s, i);
    if (!c) return sluice__min_u64(s->now, (uint64_t)INT64_MAX - ((uint64_t)1 << 30)) + ((uint64_t)1 << 30);
    entry *e = ent(t, s, i);
    if (!t->pf.packed) return sluice__rest_at(&c->pf, ent_state(e));
    sluice__state st;
    load_state(t, &c->pf, e, &st);
    return sluice__rest_at(&c->pf, &st);
}

/* Change the table's spec at now_ns to `spec`, or (spec NULL) to the
 * current one with one knob changed (sluice__reconfigure_knob). */
static int table_reconfigure(sluice_table *t, const char *spec, int knob, uint64_t a,
                             uint64_t b, uint64_t now_ns, char *err, size_t errlen)
{
    if (!t) {
        sluice__errf(err, errlen, "no table (NULL)");
        return SLUICE_EINVAL;
    }
    return t->ops->reconfigure_at(t->place, spec, knob, a, b, now_ns, err, errlen);
}

static int local_reconfigure_at(void *place, const char *spec, int knob, uint64_t a,
                                uint64_t b, uint64_t now_ns, char *err, size_t errlen)
{
    sluice_table *t = place;
    tcfg *nc = sluice__calloc(1, sizeof *nc);
    if (!nc) {
        sluice__errf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    pthread_mutex_lock(&t->cfg_mu);
    tcfg *c = atomic_load_explicit(&t->cur, memory_order_relaxed);
    char buf[SLUICE_SPEC_MAX];
    int rc = 0;
    if (!spec) {
        if ((rc = sluice__reconfigure_knob(&c->pf, knob, a, b, buf, sizeof buf, err, errlen)) !=
            0)
            goto out;
        spec = buf;
    }
    if ((rc = sluice__spec_parse(spec, &nc->pf, err, errlen)) != 0) goto out;
    if ((rc = sluice__reconfigure_check(&c->pf, &nc->pf, err, errlen)) != 0) goto out;
    if (t->pf.packed && !nc->pf.packed) {
        sluice__errf(err, errlen,
                     "\"%s\" needs more than the 16 bytes of state each key of this table has: make a new table",
                     spec);
        rc = SLUICE_EINVAL;
        goto out;
    }
    if (!cfg_add(t, nc)) {
        sluice__errf(err, errlen, t->ncfg >= UINT32_MAX - 1 ? "too many changes (2^32 - 1)"
                                                            : "out of memory");
        rc = t->ncfg >= UINT32_MAX - 1 ? SLUICE_ERANGE : SLUICE_ENOMEM;
        goto out;
    }
    nc->at = now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : now_ns;
    /* nc is whole before anyone can reach it: through c (entries catching
     * up), then as the newest (keys made from now on) */
    atomic_store_explicit(&c->newer, nc, memory_order_release);
    atomic_store_explicit(&t->cur, nc, memory_order_release);
    nc = NULL;
    if (++t->chain > CFG_KEEP) cfg_collect(t); /* the chain's memory stays bounded */
    cfg_free_retired(t);
out:
    pthread_mutex_unlock(&t->cfg_mu);
    sluice__free(nc);
    return rc;
}

int sluice_table_reconfigure_at(sluice_table *t, const char *spec, uint64_t now_ns, char *err,
                                size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!spec) {
        sluice__errf(err, errlen, "no spec (NULL)");
        return SLUICE_EINVAL;
    }
    return table_reconfigure(t, spec, 0, 0, 0, now_ns, err, errlen);
}

int sluice_table_reconfigure(sluice_table *t, const char *spec, char *err, size_t errlen)
{
    uint64_t now = t ? sluice__clock_now(cur_clock(t)) : 0;
    return sluice_table_reconfigure_at(t, spec, now, err, errlen);
}

int sluice_table_set_limit_at(sluice_table *t, uint64_t limit, uint64_t period_ns,
                              uint64_t now_ns, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    return table_reconfigure(t, NULL, SLUICE__KNOB_LIMIT, limit, period_ns, now_ns, err, errlen);
}

int sluice_table_set_burst_at(sluice_table *t, uint64_t burst, uint64_t now_ns, char *err,
                              size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    return table_reconfigure(t, NULL, SLUICE__KNOB_BURST, burst, 0, now_ns, err, errlen);
}

/* ---- per-key overrides -------------------------------------------------- */

/* An override: a key of the table under a spec of its own.  Each shard
 * keeps the overrides of its keys in an array sorted by tag, apart from
 * the entries: a key without one pays nothing when it decides; the array is
 * searched only where a key's entry is made (and where a request for a key
 * not held is answered), and only in a shard that has overrides.  An entry
 * under an override holds the override's configuration as its own; that
 * configuration is never linked to a newer one, so changes of the table's
 * spec pass it by.  Setting, changing or removing an override carries a
 * held entry over at once (one key, under its shard lock); a key not held
 * finds its override when its entry is made again. */
typedef struct ovr {
    uint32_t tag;
    uint32_t keylen;
    unsigned char *key; /* a copy, NULL when keylen is 0 */
    tcfg *cfg;          /* the override's spec */
} ovr;

/* The override of key in shard s (locked, or cfg_mu held), or NULL; *pos
 * receives where one would be inserted. */
static ovr *ovr_find(const shard *s, uint32_t tag, const void *key, size_t keylen, uint32_t *pos)
{
    uint32_t lo = 0, hi = s->novr;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->ovr[mid].tag < tag) lo = mid + 1;
        else hi = mid;
    }
    if (pos) *pos = lo;
    for (uint32_t i = lo; i < s->novr && s->ovr[i].tag == tag; i++)
        if (s->ovr[i].keylen == keylen &&
            (keylen == 0 || memcmp(s->ovr[i].key, key, key_bytes(keylen)) == 0))
            return &s->ovr[i];
    return NULL;
}

/* The configuration a new entry of key starts under (shard locked): its
 * override's, else the newest of the table. */
static const tcfg *key_cfg(const sluice_table *t, const shard *s, uint32_t tag, const void *key,
                           size_t keylen)
{
    if (s->novr) {
        const ovr *o = ovr_find(s, tag, key, keylen, NULL);
        if (o) return o->cfg;
    }
    return cur_cfg(t);
}

static void ovr_free_all(sluice_table *t)
{
    for (unsigned k = 0; k < t->nshards; k++) {
        shard *s = &t->shards[k];
        for (uint32_t i = 0; i < s->novr; i++) sluice__free(s->ovr[i].key);
        sluice__free(s->ovr);
    }
}

/* Carry held entry i (shard s locked) to configuration n at `at`, and file
 * it at its new rest time.  False when memory runs out (nothing changes). */
static bool carry_held(sluice_table *t, shard *s, uint32_t i, const tcfg *n, uint64_t at)
{
    const tcfg *c = ent_cfg(t, s, i);
    if (!c || !carry(t, ent(t, s, i), c, n, at)) return false;
    wheel_unlink(t, s, i);
    wheel_file(t, s, i, rest_of(t, s, i));
    publish_due(s);
    return true;
}

int sluice_table_set_max_overrides(sluice_table *t, size_t max)
{
    if (!t || t->ops->lacks || max > SLUICE_TABLE_OVERRIDES_MAX) return SLUICE_EINVAL;
    pthread_mutex_lock(&t->cfg_mu);
    int rc = max < atomic_load_explicit(&t->novr, memory_order_relaxed) ? SLUICE_EINVAL : 0;
    if (rc == 0) t->max_ovr = max;
    pthread_mutex_unlock(&t->cfg_mu);
    return rc;
}

size_t sluice_table_override_count(const sluice_table *t)
{
    return t ? atomic_load_explicit(&((sluice_table *)t)->novr, memory_order_relaxed) : 0;
}

static int override_set_at(sluice_table *t, const void *key, size_t keylen,
                           const char *spec, uint64_t now_ns, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!t || t->ops->lacks || !spec || !key_ok(key, keylen)) {
        sluice__errf(err, errlen, "%s",
                     !t              ? "no table (NULL)"
                     : t->ops->lacks ? t->ops->lacks
                     : !spec         ? "no spec (NULL)"
                                     : "bad key: NULL with a length");
        return SLUICE_EINVAL;
    }
    if (!key) key = "";
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    const uint64_t h = key_hash(t, key, keylen);
    const uint32_t tag = (uint32_t)h;
    shard *s = shard_for(t, h);
    tcfg *nc = sluice__calloc(1, sizeof *nc);
    if (!nc) {
        sluice__errf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    int rc = sluice__spec_parse(spec, &nc->pf, err, errlen);
    if (rc != 0) {
        sluice__free(nc);
        return rc;
    }
    unsigned char *copy = NULL;
    ovr *arr = NULL, *old = NULL;
    uint32_t newcap = 0;
    pthread_mutex_lock(&t->cfg_mu); /* the overrides change only under it */
    const tcfg *base = atomic_load_explicit(&t->cur, memory_order_relaxed);
    if ((rc = sluice__reconfigure_check(&base->pf, &nc->pf, err, errlen)) != 0) goto out;
    if (t->pf.packed && !nc->pf.packed) {
        sluice__errf(err, errlen,
                     "\"%s\" needs more than the 16 bytes of state each key of this table has",
                     spec);
        rc = SLUICE_EINVAL;
        goto out;
    }
    uint32_t pos;
    ovr *o = ovr_find(s, tag, key, keylen, &pos);
    if (!o) {
        if (atomic_load_explicit(&t->novr, memory_order_relaxed) >= t->max_ovr) {
            sluice__errf(err, errlen,
                         "too many overrides (%zu): remove one, or raise the bound with sluice_table_set_max_overrides",
                         t->max_ovr);
            rc = SLUICE_EFULL;
            goto out;
        }
        if (keylen && !(copy = sluice__malloc(key_bytes(keylen)))) goto oom;
        if (keylen) memcpy(copy, key, key_bytes(keylen));
        if (s->novr == s->ovrcap) {
            newcap = s->ovrcap ? 2 * s->ovrcap : 4;
            if (!(arr = sluice__calloc(newcap, sizeof *arr))) goto oom;
        }
    }
    if (!cfg_add(t, nc)) goto oom;
    nc->at = now_ns;
    tcfg *const made = nc;
    nc = NULL; /* the table's now, whatever follows */
    sluice__spin_lock(&s->mu);
    uint32_t slot = find(t, s, h, key, keylen);
    if (slot != UINT32_MAX && !carry_held(t, s, slot, made, now_ns)) {
        sluice__spin_unlock(&s->mu);
        goto oom; /* a ring could not grow: the key stays as it was */
    }
    tcfg *gone = NULL; /* the override's spec it replaces */
    if (o) {
        gone = o->cfg;
        o->cfg = made;
    } else {
        if (arr) {
            if (s->novr) memcpy(arr, s->ovr, s->novr * sizeof *arr);
            old = s->ovr;
            s->ovr = arr;
            s->ovrcap = newcap;
            arr = NULL;
        }
        memmove(&s->ovr[pos + 1], &s->ovr[pos], (s->novr - pos) * sizeof *s->ovr);
        s->ovr[pos] = (ovr){.tag = tag, .keylen = (uint32_t)keylen, .key = copy, .cfg = made};
        PUT(&s->novr, s->novr + 1);
        copy = NULL;
        atomic_fetch_add_explicit(&t->novr, 1, memory_order_relaxed);
    }
    sluice__spin_unlock(&s->mu);
    if (gone) cfg_retire(t, gone); /* no key under it: carried above */
    cfg_free_retired(t);
    goto out;
oom:
    sluice__errf(err, errlen, "out of memory");
    rc = SLUICE_ENOMEM;
out:
    pthread_mutex_unlock(&t->cfg_mu);
    sluice__free(nc);
    sluice__free(copy);
    sluice__free(arr);
    sluice__free(old);
    return rc;
}

int sluice_table_override_set_at(sluice_table *t, const void *key, size_t keylen,
                                 const char *spec, uint64_t now_ns, char *err, size_t errlen)
{
    rd_tls *rd = rd_enter();
    const int rc = override_set_at(t, key, keylen, spec, now_ns, err, errlen);
    rd_exit(rd);
    return rc;
}

static int override_remove_at(sluice_table *t, const void *key, size_t keylen,
                              uint64_t now_ns)
{
    if (!t || t->ops->lacks || !key_ok(key, keylen)) return SLUICE_EINVAL;
    if (!key) key = "";
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    const uint64_t h = key_hash(t, key, keylen);
    const uint32_t tag = (uint32_t)h;
    shard *s = shard_for(t, h);
    int rc = 0;
    unsigned char *copy = NULL;
    tcfg *gone = NULL;
    pthread_mutex_lock(&t->cfg_mu);
    ovr *o = ovr_find(s, tag, key, keylen, NULL);
    if (!o) {
        rc = SLUICE_ENOENT;
    } else {
        const tcfg *base = atomic_load_explicit(&t->cur, memory_order_relaxed);
        sluice__spin_lock(&s->mu);
        uint32_t slot = find(t, s, h, key, keylen);
        if (slot != UINT32_MAX && !carry_held(t, s, slot, base, now_ns)) {
            rc = SLUICE_ENOMEM; /* a ring could not grow: nothing changes */
        } else {
            copy = o->key;
            gone = o->cfg;
            const size_t at = (size_t)(o - s->ovr); /* pos or after: tags may be equal */
            memmove(o, o + 1, (s->novr - at - 1) * sizeof *o);
            PUT(&s->novr, s->novr - 1);
            atomic_fetch_sub_explicit(&t->novr, 1, memory_order_relaxed);
        }
        sluice__spin_unlock(&s->mu);
        if (gone) cfg_retire(t, gone); /* no key under it: carried to the base */
        cfg_free_retired(t);
    }
    pthread_mutex_unlock(&t->cfg_mu);
    sluice__free(copy);
    return rc;
}

int sluice_table_override_remove_at(sluice_table *t, const void *key, size_t keylen,
                                    uint64_t now_ns)
{
    rd_tls *rd = rd_enter();
    const int rc = override_remove_at(t, key, keylen, now_ns);
    rd_exit(rd);
    return rc;
}

static int override_get(sluice_table *t, const void *key, size_t keylen, char *spec,
                        size_t speclen)
{
    if (!t || t->ops->lacks || !key_ok(key, keylen) || (!spec && speclen)) return SLUICE_EINVAL;
    if (!key) key = "";
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    const uint64_t h = key_hash(t, key, keylen);
    shard *s = shard_for(t, h);
    sluice__spin_lock(&s->mu);
    const ovr *o = s->novr ? ovr_find(s, (uint32_t)h, key, keylen, NULL) : NULL;
    const tcfg *c = o ? o->cfg : NULL;
    sluice__spin_unlock(&s->mu); /* configurations live as long as the table */
    if (!c) return SLUICE_ENOENT;
    char buf[SLUICE_SPEC_MAX];
    int n = sluice__spec_format(&c->pf, buf, sizeof buf);
    if (n < 0) return SLUICE_EINVAL;
    if ((size_t)n >= speclen) return SLUICE_ENOSPC;
    memcpy(spec, buf, (size_t)n + 1);
    return 0;
}

int sluice_table_override_get(sluice_table *t, const void *key, size_t keylen, char *spec,
                              size_t speclen)
{
    rd_tls *rd = rd_enter();
    const int rc = override_get(t, key, keylen, spec, speclen);
    rd_exit(rd);
    return rc;
}

/* ---- this placement's operations (skeleton.h) ------------------------------ */

static size_t local_burst_at(void *place, size_t n, const void *const keys[],
                             const size_t keylens[], const uint64_t permits[], uint64_t now_ns,
                             sluice_result results[])
{
    return sluice_table_try_acquire_burst_at(place, n, keys, keylens, permits, now_ns, results);
}

static bool local_try_one(void *place, const void *key, size_t keylen, uint64_t permits,
                          uint64_t now_ns, sluice_result *res)
{
    return local_try_acquire_at(place, key, keylen, permits, now_ns, res);
}

static const sluice__table_ops local_ops = {
    .name = "in-process",
    .try_acquire_at = local_try_one,
    .burst_at = local_burst_at,
    .remove = local_remove,
    .peek_at = local_peek_at,
    .stats_get = local_stats_get,
    .scan = local_scan,
    .reconfigure_at = local_reconfigure_at,
    .close = NULL,
    .lacks = NULL,
};
