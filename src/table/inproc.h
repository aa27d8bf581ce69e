/* inproc.h -- the private header of the in-process table (table.c has its
 * overview): the layout of a shard and of its slots, the handle, the
 * helpers every file of the placement inlines, and what one file of it
 * calls in another.
 *
 * Map:  constants and types (ekey, entry, shard, tcfg, struct sluice_table);
 *       reader sections (rd_enter, rd_exit: table_spec.c has their design);
 *       slot accessors (ent, the state's words: held_words, put_words,
 *       read_words, load_state, store_state); keys (home_of, key_view,
 *       key_hash, pad_key, key_eq, find); the optimistic read's helpers
 *       (read_find, read_state, read_cfg, readable, prefetch_run,
 *       shard_for: table.c's head comment proves the read); configurations
 *       (cur_cfg, cfg_of_id, ent_rest_at); room (reserve); then the
 *       functions across files, by file:
 *         table.c        construction, decisions, the optimistic read,
 *                        bursts, the refused-keys hook, the ops table
 *         table_slots.c  probing, the reclaiming wheel, entry life
 *         table_hold.c   composite decisions: a key's kind ops
 *         table_keys.c   remove, reset, peek, scan
 *         table_spec.c   reader sections, configurations, overrides
 *         table_settle.c reservations on keys (the entries' stamps, t->refs)
 *
 * The helpers are static inline here, so that the decision paths inline
 * them as they did when the placement was one file. */
#ifndef SLUICE_TABLE_INPROC_H
#define SLUICE_TABLE_INPROC_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall(): membarrier; clock_gettime (base/clock.h) */
#endif

#include "base/clock.h"
#include "alg/alg.h"
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
#include <sys/syscall.h> /* SYS_membarrier */

#define INLINE_KEY 16
#define SLOTS SLUICE__WCORE_SLOTS
#define TICK_SHIFT 20
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
    uint64_t stamped; /* stamps given so far (table_settle.c, under the lock) */
} shard;
_Static_assert(offsetof(shard, wheel) + sizeof(uint64_t) <= 64,
               "the lock, cap, slab, now and the wheel's tick share the shard's first line");

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
    /* reservations (table_settle.c): the holders of the table (its creator,
     * and each reservation open), the entries' stamps (one per slot of
     * every shard, laid out as `slabs`; NULL until the table's first
     * reservation), and the configurations made or retired so far */
    _Atomic size_t refs;
    _Atomic(uint64_t *) stamps;
    _Atomic uint64_t cfg_serial;
};

/* The entries' stamps (table_settle.c, "Which key"), or NULL while the
 * table has made no reservation.  Set once; read and written under the
 * lock of the shard whose stamps they are. */
static inline uint64_t *stamps_of(const sluice_table *t)
{
    return atomic_load_explicit(&((sluice_table *)t)->stamps, memory_order_acquire);
}

/* The stamp of slot i of shard s in the stamps st. */
static inline uint64_t *stamp_at(const sluice_table *t, uint64_t *st, const shard *s,
                                 uint32_t i)
{
    return &st[(size_t)(s - t->shards) * s->cap + i];
}

/* ---- slots and keys ------------------------------------------------------------ */

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

/* Long keys (docs/decisions.md, "Long keys").  A key of more than
 * SLUICE_MAX_KEY_BYTES is stored as its 16-byte digest (table.h) with the
 * length code DIGEST_LEN, which no key stored as itself has: so a long key
 * never equals a short one, its own digest bytes included.  Past the entry
 * points (key_view) a key length is such a code; key_bytes gives the bytes
 * behind it. */
#define DIGEST_LEN SLUICE__DIGEST_LEN
#define key_bytes sluice__key_bytes
_Static_assert(SLUICE__DIGEST_LEN < 0x20000, "the digest's length code fits in meta");

/* ---- reader sections (table_spec.c) ----------------------------------------- */

#define RD_SLOTS 256
typedef struct rd_slot {
    _Alignas(64) _Atomic uint64_t at; /* the epoch its thread's section began at; 0: none */
    _Atomic unsigned owned;           /* a thread has it */
} rd_slot;
SLUICE__INTERNAL extern rd_slot sluice__rd_slots[RD_SLOTS];
SLUICE__INTERNAL extern _Atomic uint64_t sluice__rd_epoch;
SLUICE__INTERNAL extern _Atomic uint64_t sluice__rd_anon;       /* sections of threads without a slot */
/* A thread's own: its slot and the depth of its sections, in one
 * thread-local (one address lookup per section: the library's TLS model is
 * dynamic), which rd_enter returns for rd_exit. */
typedef struct rd_tls {
    unsigned mine;  /* slot + 1; 0: not yet asked; RD_SLOTS + 1: none */
    unsigned depth; /* sections open */
} rd_tls;
SLUICE__INTERNAL extern _Thread_local rd_tls sluice__rd_me;

#if defined(SYS_membarrier) && !SLUICE__SEQ_TSAN
#define RD_MEMB_PRIVATE_EXPEDITED (1 << 3)
#define RD_MEMB_REGISTER_PRIVATE_EXPEDITED (1 << 4)
SLUICE__INTERNAL extern bool sluice__rd_memb; /* registered: a reader's fence is the changer's barrier */
#else
#define sluice__rd_memb false
#endif

/* ---- across files ------------------------------------------------------------ */

/* table_slots.c */
SLUICE__INTERNAL uint64_t sluice__inproc_ent_t_last(const sluice_table *t, entry *e);
SLUICE__INTERNAL void sluice__inproc_wheel_unlink(const sluice_table *t, shard *s, uint32_t i);
SLUICE__INTERNAL void sluice__inproc_wheel_file(const sluice_table *t, shard *s, uint32_t i, uint64_t rest);
SLUICE__INTERNAL void sluice__inproc_publish_due(shard *s);
SLUICE__INTERNAL uint64_t sluice__inproc_wheel_first_rest(sluice_table *t, shard *s, uint32_t budget);
SLUICE__INTERNAL uint32_t sluice__inproc_wheel_advance(sluice_table *t, shard *s, uint64_t now, uint32_t *budget);
SLUICE__INTERNAL uint32_t sluice__inproc_sweep_all(sluice_table *t, shard *s, uint64_t now);
SLUICE__INTERNAL uint32_t sluice__inproc_drop_entry(sluice_table *t, shard *s, uint32_t i);
SLUICE__INTERNAL uint32_t sluice__inproc_new_entry(sluice_table *t, shard *s, uint64_t h, const void *key, size_t keylen, const tcfg *c);
SLUICE__INTERNAL uint32_t sluice__inproc_reuse_at_rest(sluice_table *t, shard *s, uint64_t h, const void *key, size_t keylen, const tcfg *c);
SLUICE__INTERNAL bool sluice__inproc_evict_one(sluice_table *t, shard *s);
/* table.c */
SLUICE__INTERNAL extern const sluice__table_ops sluice__inproc_ops; /* this placement's (skeleton.h) */
/* table.c: the table's end, when its last holder lets go (refs) */
SLUICE__INTERNAL void sluice__inproc_release(sluice_table *t);
/* table_keys.c */
SLUICE__INTERNAL int sluice__inproc_local_remove(void *place, const void *key, size_t keylen);
SLUICE__INTERNAL int sluice__inproc_peek_at(sluice_table *t, const void *key, size_t keylen, uint64_t permits, uint64_t now_ns, sluice_result *res, sluice_key_state *state);
SLUICE__INTERNAL int sluice__inproc_local_peek_at(void *place, const void *key, size_t keylen, uint64_t permits, uint64_t now_ns, sluice_result *res, sluice_key_state *state);
SLUICE__INTERNAL int sluice__inproc_local_scan(void *place, uint64_t cursor, size_t count, sluice_table_scan_fn fn, void *arg, uint64_t *next_cursor, size_t *visited);
/* table_spec.c */
SLUICE__INTERNAL unsigned sluice__inproc_rd_claim(void);
SLUICE__INTERNAL int sluice__inproc_cfg_init(sluice_table *t);
SLUICE__INTERNAL void sluice__inproc_cfg_free(sluice_table *t);
SLUICE__INTERNAL bool sluice__inproc_carry(sluice_table *t, entry *e, const tcfg *c, const tcfg *n, uint64_t at);
SLUICE__INTERNAL const tcfg *sluice__inproc_ent_cfg(sluice_table *t, shard *s, uint32_t i);
SLUICE__INTERNAL uint64_t sluice__inproc_rest_of(sluice_table *t, shard *s, uint32_t i);
SLUICE__INTERNAL int sluice__inproc_local_reconfigure_at(void *place, const char *spec, int knob, uint64_t a, uint64_t b, uint64_t now_ns, char *err, size_t errlen);
SLUICE__INTERNAL const tcfg *sluice__inproc_key_cfg(const sluice_table *t, const shard *s, uint32_t tag, const void *key, size_t keylen);
SLUICE__INTERNAL void sluice__inproc_ovr_free_all(sluice_table *t);

/* ---- helpers, inlined --------------------------------------------------------- */

/* The configuration numbered id (made and published before any entry could
 * hold its number). */
static inline tcfg *cfg_of_id(const sluice_table *t, uint32_t id)
{
    sluice_table *m = (sluice_table *)t; /* loads only */
    const uint64_t v = (uint64_t)id + 1;
    const unsigned j = 63u - (unsigned)__builtin_clzll(v);
    _Atomic(tcfg *) *seg = atomic_load_explicit(&m->cfgs[j], memory_order_acquire);
    return atomic_load_explicit(&seg[v - ((uint64_t)1 << j)], memory_order_acquire);
}

static inline const tcfg *cur_cfg(const sluice_table *t)
{
    return atomic_load_explicit(&((sluice_table *)t)->cur, memory_order_acquire);
}

static inline rd_tls *rd_enter(void)
{
    rd_tls *me = &sluice__rd_me;
    if (me->depth++) return me;
    unsigned i = me->mine;
    if (__builtin_expect(i == 0, 0)) me->mine = i = sluice__inproc_rd_claim();
    if (i <= RD_SLOTS) {
        atomic_store_explicit(&sluice__rd_slots[i - 1].at,
                              atomic_load_explicit(&sluice__rd_epoch, memory_order_acquire),
                              SLUICE__SEQ_TSAN ? memory_order_seq_cst : memory_order_relaxed);
#if !SLUICE__SEQ_TSAN /* ThreadSanitizer has no fences: the store above is seq_cst there */
        if (sluice__rd_memb) atomic_signal_fence(memory_order_seq_cst);
        else atomic_thread_fence(memory_order_seq_cst);
#endif
    } else {
        atomic_fetch_add_explicit(&sluice__rd_anon, 1, memory_order_seq_cst);
    }
    return me;
}

static inline void rd_exit(rd_tls *me)
{
    if (--me->depth) return;
    const unsigned i = me->mine;
    if (i <= RD_SLOTS) atomic_store_explicit(&sluice__rd_slots[i - 1].at, 0, memory_order_release);
    else atomic_fetch_sub_explicit(&sluice__rd_anon, 1, memory_order_release);
}

static inline entry *ent(const sluice_table *t, const shard *s, uint32_t i)
{
    return (entry *)(s->slab + (size_t)i * t->stride);
}

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
static inline void load_state(const sluice_table *t, const sluice__profile *pf, entry *e,
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

static inline void store_state(const sluice_table *t, const sluice__profile *pf, entry *e,
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
static inline uint64_t ent_rest_at(sluice_table *t, shard *s, uint32_t i)
{
    return sluice__inproc_rest_of(t, s, i);
}

static inline uint32_t home_of(const shard *s, uint32_t tag)
{
    return (uint32_t)(((uint64_t)tag * s->cap) >> 32);
}

/* The hash of the key entry e holds: kept for a long key, else computed. */
static inline uint64_t ent_hash(const sluice_table *t, const entry *e)
{
    const size_t len = META_LEN(e->meta);
    return len > INLINE_KEY ? e->key.far.hash : sluice__siphash13(t->seed, e->key.in, len);
}

/* The probe distance of held slot j: its code, or, when that says only
 * "DIST_SAT or more", from the key's hash. */
static inline uint32_t slot_dist(const sluice_table *t, const shard *s, uint32_t j)
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
static inline uint32_t find_probes(const sluice_table *t, const shard *s, uint64_t h, const void *key,
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
static inline bool read_state(sluice_table *t, const sluice__profile *pf, shard *s, uint32_t i,
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

/* Whether requests for key are read at all: packed states, inline keys. */
static inline bool readable(const sluice_table *t, size_t keylen)
{
    return t->pf.packed && keylen <= INLINE_KEY;
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

/* Whether (key, keylen) is a key the table accepts: any length, but not
 * NULL with a length (key_view stores a long one as its digest). */
static inline bool key_ok(const void *key, size_t keylen)
{
    return key || !keylen;
}



/* The clock of the current spec (what the live forms read). */
static inline sluice__clock cur_clock(const sluice_table *t)
{
    rd_tls *rd = rd_enter();
    const sluice__clock c = cur_cfg(t)->pf.clock;
    rd_exit(rd);
    return c;
}

/* Take one of the table's max_keys places. */
static inline bool reserve(sluice_table *t)
{
    size_t k = atomic_load_explicit(&t->keys, memory_order_relaxed);
    do {
        if (k >= t->max_keys) return false;
    } while (!atomic_compare_exchange_weak_explicit(&t->keys, &k, k + 1, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

#endif /* SLUICE_TABLE_INPROC_H */
