/* region.h -- the private header of the table placed in a shared region
 * (region_table.c has its design; skeleton.h what it shares with the
 * in-process table): the region's layout as it lies in memory (header,
 * shards, slots, configurations, counter stripes), the handle, the slot
 * and key accessors, and what one file of the placement calls in another.
 *
 * Map:  constants and the layout's types; slot accessors (slot_at, hdr_*,
 *       copy_of, slot_epoch, the state's words); configurations (cfg_at,
 *       epoch_now); shards and keys (shard_of, key_ok, key_view, key_hash,
 *       key_place);
 *       stripes_of; the functions across files, by file:
 *         region_table.c   slots, configurations, shards, decisions under
 *                          the lock, composite decisions, peeks, changes
 *                          of spec
 *         region_who.c     identities, lock words, the counter stripes
 *         region_read.c    the read without the lock, and decisions
 *         region_keys.c    remove, stats, scan
 *         region_settle.c  reservations (reserve, cancel, settle)
 *         region_attach.c  layout, initialisation, attach and open, the
 *                          placement's ops table */
#ifndef SLUICE_TABLE_REGION_H
#define SLUICE_TABLE_REGION_H

#include "alg/window_log.h"
#include "base/counters.h"
#include "alg/alg.h"
#include "base/spin.h"
#include "table/region_table.h"
#include "table/skeleton.h"
#include "table/table.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define MAGIC 0x656c626174756c73ULL /* "slutable" */
#define VERSION 6u /* 3: the shards' sequence words; 4: the counter stripes; 5: digested
                    * long keys (their length code; a key field of 16 bytes at least);
                    * 6: the slots' generations (reservations) */
#define CFG_K 8u /* configurations the region remembers (a power of two) */
#define EPOCH_MAX 0xfffffffeu /* changes of spec a region takes */
#define HEAD_BYTES 512
#define RING_MAX 65536u /* ring entries per key */
#define NONE UINT32_MAX

#define INIT_READY 1u
#define BUSY ((uint64_t)1 << 63)

/* A slot's header word. */
enum { K_EMPTY = 0, K_LIVE = 1, K_TOMB = 2 };
#define H_KIND(h) ((unsigned)((h) & 3u))
#define H_ACTIVE(h) ((unsigned)((h) >> 2 & 1u))
#define H_LEN(h) ((uint32_t)((h) >> 3 & 0x1fffffu))
#define H_TAG(h) ((uint32_t)((h) >> 32))
#define H_LIVE(tag, len, act) \
    ((uint64_t)(tag) << 32 | (uint64_t)(len) << 3 | (uint64_t)(act) << 2 | K_LIVE)

typedef struct rhead {
    _Atomic uint64_t init; /* 0 zeroed, BUSY | owner, INIT_READY */
    uint64_t magic;
    uint32_t version, flags;
    uint64_t need; /* bytes the layout takes */
    uint64_t max_keys, max_key_bytes;
    uint64_t seed[2];
    uint32_t nshards, cap, ecap, stride;
    uint32_t cb, ring_cap;
    char spec[SLUICE_SPEC_MAX];
    char boot[40]; /* the kernel's boot id when made ("" if unknown) */
    _Alignas(64) _Atomic uint64_t keys; /* keys held, <= max_keys */
    /* configurations: read-mostly, written only by changes of spec */
    _Alignas(64) _Atomic uint64_t epoch; /* the current configuration's number */
    _Atomic uint64_t cfg_lock;           /* 0, or a changer's identity */
    uint64_t floor; /* every key is under a configuration >= floor (cfg_lock) */
    uint64_t cfg_off; /* where the ring of configurations starts */
    uint64_t pidns;   /* the maker's pid namespace (pid_ns()), 0 if unknown */
} rhead;
_Static_assert(sizeof(rhead) <= HEAD_BYTES, "the header fits its bytes");

/* One remembered configuration, at cfg_off + (epoch % CFG_K) * its size:
 * the spec (canonical) from `at` on.  Written before `epoch` publishes it. */
typedef struct rcfg {
    uint64_t epoch;
    uint64_t at;
    char spec[SLUICE_SPEC_MAX];
} rcfg;

/* A handle's parsed copy of a remembered configuration `epoch`.  Made once
 * per epoch, published in the handle's prof[epoch % CFG_K] and never
 * changed while published.  The one it replaces (epoch - CFG_K: no holder
 * of a shard lock can be under it any more, the floor) is retired and
 * freed once no reader section that may have found it runs (table.h,
 * sluice__rd_*; the reads without a lock run in one): so a handle holds
 * at most CFG_K of them and those retired meanwhile, however many changes
 * (issue 26 5: it kept one per change until the close).  When memory runs
 * out, the handle's own slot `spare[epoch % CFG_K]` is filled in place, as
 * the locked paths may (prof()); reads never use those. */
typedef struct rprof {
    _Atomic uint64_t epoch; /* UINT64_MAX while a spare is filled */
    uint64_t at;
    sluice__profile pf;
    sluice__retired ret; /* retired: on the handle's `retired` (skeleton.h) */
} rprof;
_Static_assert(offsetof(rhead, keys) == 256 && offsetof(rhead, boot) == 216 &&
                   offsetof(rhead, cfg_lock) == 328 && offsetof(rhead, epoch) == 320 &&
                   offsetof(rhead, cfg_off) == 344 && offsetof(rhead, pidns) == 352 &&
                   offsetof(rhead, nshards) == 64 && offsetof(rhead, stride) == 76,
               "where tests/table/test_region_table.c finds them");

typedef struct rshard {
    _Alignas(64) _Atomic uint64_t lock; /* 0, or the holder's identity */
    _Atomic uint64_t seq; /* odd while held; each hold adds 2 (the read) */
    _Atomic uint64_t count; /* live slots */
    _Atomic uint64_t due; /* <= the earliest rest time of the live keys */
    uint64_t now;         /* the latest time an admission showed the shard */
    uint64_t rng;
    /* admissions (refusals and probes: the counter stripes) */
    _Atomic uint64_t allowed, pallowed;
    _Atomic uint64_t reclaimed, evicted;
} rshard;
_Static_assert(sizeof(rshard) == 128, "two cache lines a shard");

/* The counter stripes (head comment: Statistics): NSTRIPES owned by one
 * thread each, then one shared.  A line each; only its owner writes an
 * owned stripe's counts. */
#define NSTRIPES 128u
typedef struct rstripe {
    _Atomic uint64_t owner; /* 0 free, or its thread's identity (tid_self) */
    _Atomic uint64_t denied, pdenied, probes, refused;
    /* of denied and pdenied, a composite's refusals by another limit that
     * this key would have admitted (zero in a region made before) */
    _Atomic uint64_t elsewhere, pelsewhere;
    uint64_t pad_;
} rstripe;
_Static_assert(sizeof(rstripe) == 64, "a cache line a stripe");

/* The ring's header, as a copy holds it, and a summary of the ring for the
 * read without the lock (which never reads the ring: window_log.c writes
 * its entries in place): the newest entry and the FRONT oldest, as a
 * limiter publishes them (window_log.h). */
#define FRONT SLUICE__LOG_FRONT
typedef struct rring {
    uint64_t t_last, base;
    uint32_t head, len;
    uint64_t newest_slot, newest_cum; /* when len > 0 */
    sluice__log_entry front[FRONT];   /* the oldest min(len, FRONT) */
    uint64_t hist; /* the log's carry history, 31 bits (window_log.c); 0 before */
} rring;
_Static_assert(sizeof(rring) % 16 == 0, "copies stay 16-byte aligned");

/* Everything the arguments decide, computed alike by every process. */
typedef struct layout {
    sluice__profile pf;
    bool ring;
    uint64_t max_keys, max_key_bytes;
    uint32_t nshards, shard_bits, cap, ecap, cb, ring_cap;
    size_t stride, key_off, copy_off, ring_off, slots_off, cfg_off, gens_off, stripes_off, need;
    char spec[SLUICE_SPEC_MAX];
} layout;

struct sluice__rtable {
    layout L; /* from the spec the region was made with (its origin) */
    _Atomic(rprof *) prof[CFG_K];
    rprof spare[CFG_K];      /* when memory runs out (rprof) */
    sluice__retired *retired; /* replaced, waiting for the readers (prof_mu) */
    pthread_mutex_t prof_mu; /* fills prof[] */
    unsigned flags;
    rhead *h;
    rshard *sh;
    unsigned char *slots;
    void *map; /* sluice_table_open's mapping, unmapped on close */
    size_t map_len;
    uint64_t dseed[2]; /* long keys' digest key, from the region's seed (table.h) */
};

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }
static inline unsigned char *slot_at(const sluice__rtable *r, uint32_t k, uint32_t i)
{
    return r->slots + ((size_t)k * r->L.cap + i) * r->L.stride;
}
static inline _Atomic uint64_t *hdr_of(unsigned char *s) { return (_Atomic uint64_t *)s; }
static inline uint64_t hdr_get(unsigned char *s)
{
    return atomic_load_explicit(hdr_of(s), memory_order_acquire);
}
static inline void hdr_set(unsigned char *s, uint64_t v)
{
    atomic_store_explicit(hdr_of(s), v, memory_order_release);
}
static inline unsigned char *copy_of(const sluice__rtable *r, unsigned char *s, unsigned c)
{
    return s + r->L.copy_off + (size_t)c * r->L.cb;
}
/* The configuration a copy of slot s is under: the second word holds copy
 * 0's epoch in its low half, copy 1's in its high half. */
static inline uint32_t *epoch_word(unsigned char *s, unsigned c)
{
    return (uint32_t *)(void *)(s + 8 + 4 * c);
}
static inline uint32_t slot_epoch(unsigned char *s, unsigned c) { return GET(epoch_word(s, c)); }
/* A state as the words a copy holds: STATE_WORDS words of 8 bytes, the
 * packed form's two or a whole sluice__state's (padding zeroed). */
#define STATE_WORDS ((sizeof(sluice__state) + 7) / 8)
typedef union swords {
    sluice__state st;
    uint64_t w[STATE_WORDS];
} swords;
#define RING_WORDS (sizeof(rring) / 8)
#define RING_HEAD_WORDS (offsetof(rring, front) / 8) /* all but the front */
_Static_assert(offsetof(rring, front) % 8 == 0, "the front starts on a word");
typedef union rwords {
    rring g;
    uint64_t w[RING_WORDS];
} rwords;
#define SNAP_WORDS (RING_WORDS > STATE_WORDS ? RING_WORDS : STATE_WORDS)
static inline rcfg *cfg_at(const sluice__rtable *r, uint64_t epoch)
{
    return (rcfg *)(void *)((unsigned char *)r->h + r->L.cfg_off) + (epoch & (CFG_K - 1));
}
/* The current configuration's number: one load of a word only changes
 * write. */
static inline uint64_t epoch_now(const sluice__rtable *r)
{
    return atomic_load_explicit(&r->h->epoch, memory_order_acquire);
}
static inline void bump(_Atomic uint64_t *c, uint64_t n) /* shard locked */
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          (memory_order)SLUICE__SEQ_STORE);
}
static inline uint32_t shard_of(const sluice__rtable *r, uint64_t hash)
{
    return r->L.shard_bits ? (uint32_t)(hash >> (64 - r->L.shard_bits)) : 0;
}
/* Whether a key is one the table takes: any length, not NULL with one. */
static inline bool key_ok(const sluice__rtable *r, const void *key, size_t keylen)
{
    (void)r;
    return key || !keylen;
}
/* Long keys (table.h; docs/decisions.md, "Long keys"): a key longer than
 * max_key_bytes as the region holds it -- its digest under the region's
 * seed, into dig, with the length code SLUICE__DIGEST_LEN.  O(len). */
static inline void key_view(const sluice__rtable *r, const void **key, size_t *keylen,
                            unsigned char dig[SLUICE__DIGEST_BYTES])
{
    if (*keylen <= r->L.max_key_bytes) return;
    sluice__key_digest(r->dseed, *key, *keylen, dig);
    *key = dig;
    *keylen = SLUICE__DIGEST_LEN;
}
/* The hash of a key as held (key_view). */
static inline uint64_t key_hash(const sluice__rtable *r, const void *key, size_t keylen)
{
    return sluice__siphash13(r->h->seed, key, sluice__key_bytes(keylen));
}
/* A key as the region holds it (NULL with length 0 as ""; a long key as
 * its digest, into dig: key_view), its hash into *hash; returns its shard. */
static inline uint32_t key_place(const sluice__rtable *r, const void **key, size_t *keylen,
                                 unsigned char dig[SLUICE__DIGEST_BYTES], uint64_t *hash)
{
    if (!*key) *key = "";
    key_view(r, key, keylen, dig);
    *hash = key_hash(r, *key, *keylen);
    return shard_of(r, *hash);
}

/* Slot i of shard k's generation: a 32-bit word, in an array after the
 * configurations, moved each time a key is made in the slot (shard locked:
 * region_table.c), so that a reservation names the entry it was made on
 * (region_settle.c).  Any value is valid: it is only compared. */
static inline _Atomic uint32_t *gen_of(const sluice__rtable *r, uint32_t k, uint32_t i)
{
    return (_Atomic uint32_t *)(void *)((unsigned char *)r->h + r->L.gens_off) +
           ((size_t)k * r->L.cap + i);
}
/* A key is made in slot i of shard k (locked): its generation moves, before
 * the header publishes it. */
static inline void gen_bump(const sluice__rtable *r, uint32_t k, uint32_t i)
{
    _Atomic uint32_t *g = gen_of(r, k, i);
    atomic_store_explicit(g, atomic_load_explicit(g, memory_order_relaxed) + 1u,
                          memory_order_relaxed);
}

static inline rstripe *stripes_of(const sluice__rtable *r)
{
    return (rstripe *)(void *)((unsigned char *)r->h + r->L.stripes_off);
}

/* What a decision on one key reads of its shard, from GET loads between two
 * loads of the shard's sequence that found it even and unchanged. */
typedef struct rsnap {
    uint64_t v;                 /* the sequence the read began and ended with */
    uint64_t epoch;             /* the region's configuration */
    bool found;                 /* the key is held */
    uint32_t i;                 /* its slot */
    uint64_t h;                 /* and the slot's header word */
    uint32_t ep;                /* the configuration its active copy is under */
    union {
        uint64_t w[SNAP_WORDS]; /* that copy's words (2 when packed) */
        rring g;                /* a window log's (its head and m front entries) */
    } u;
    uint64_t count, due, now;   /* the shard's, when the key is not held */
} rsnap;

/* On the paths of a read and of an unlock, inline in every file (region_table.c
 * makes and takes the profiles and locks the shards). */
/* The parsed configuration `epoch` for a read without the lock (in a reader
 * section: it stays allocated until the section ends): one made for it and
 * published, else NULL (the lock path makes it). */
static inline const rprof *sluice__rt_read_prof(const sluice__rtable *r, uint64_t epoch)
{
    const rprof *p = atomic_load_explicit(&((sluice__rtable *)r)->prof[epoch & (CFG_K - 1)],
                                          memory_order_acquire);
    const uintptr_t a = (uintptr_t)p, lo = (uintptr_t)r->spare; /* one of the spares? */
    if (!p || (a >= lo && a < lo + sizeof r->spare)) return NULL;
    return atomic_load_explicit(&((rprof *)p)->epoch, memory_order_acquire) == epoch ? p : NULL;
}

/* The sequence even again, 2 past the hold's odd value (release: after the
 * hold's stores), then the lock free. */
static inline void sluice__rt_shard_unlock(sluice__rtable *r, uint32_t k)
{
    rshard *sh = &r->sh[k];
    sluice__seq_unhold(&sh->seq);
    atomic_store_explicit(&sh->lock, 0, memory_order_release);
}

/* ---- across the files (region.h's map) ---------------------------------- */

/* region_table.c (each function's comment is above its definition):
 * writing a key's state into one copy (the commit's half before the
 * flip: sluice__rt_state_commit, below), a handle's parsed configuration of
 * an epoch (under a shard lock), a key's state carried over to the
 * current configuration, a shard's lock found held (the wait, or the
 * takeover and repair; then the seqlock's hold), the region's count of keys
 * made exact, a key's slot in a locked shard, dropping a slot, the hint of
 * a refusal for want of room, sweeping the other shards, one decision
 * under the lock. */
SLUICE__INTERNAL void sluice__rt_state_write(const sluice__rtable *r, const sluice__profile *pf,
                                             unsigned char *s, unsigned c,
                                             const sluice__state *st, uint32_t epoch);
SLUICE__INTERNAL const rprof *sluice__rt_prof(sluice__rtable *r, uint64_t epoch);
SLUICE__INTERNAL const sluice__profile *sluice__rt_key_load(sluice__rtable *r, unsigned char *s,
                                                            uint64_t *hp, sluice__state *st,
                                                            uint64_t epoch);
SLUICE__INTERNAL uint64_t sluice__rt_shard_lock_wait(sluice__rtable *r, uint32_t k, uint64_t me,
                                                     bool *stolen);
SLUICE__INTERNAL void sluice__rt_resync(sluice__rtable *r);
SLUICE__INTERNAL uint32_t sluice__rt_find(const sluice__rtable *r, uint32_t k, uint32_t tag,
                                          const void *key, size_t keylen, uint32_t *freep);
SLUICE__INTERNAL void sluice__rt_drop(sluice__rtable *r, uint32_t k, uint32_t i);
SLUICE__INTERNAL int64_t sluice__rt_full_retry(const sluice__rtable *r, uint64_t now);
SLUICE__INTERNAL void sluice__rt_reclaim_others(sluice__rtable *r, uint32_t k, uint64_t now,
                                                bool *stolen);
SLUICE__INTERNAL bool sluice__rt_decide_locked(sluice__rtable *r, uint32_t k, uint32_t tag,
                                               const void *key, size_t keylen, uint64_t permits,
                                               uint64_t now, sluice_result *res, bool evict,
                                               bool *full);

/* region_who.c: this process's identity (pid and start time), whether a
 * holder is gone, this process's pid namespace, taking a lock word (true:
 * from a dead holder), the kernel's boot id, counting a decision in the
 * shard or the calling thread's stripe. */
SLUICE__INTERNAL extern _Atomic uint64_t sluice__rt_self_id;
SLUICE__INTERNAL uint64_t sluice__rt_self_ask(void);
SLUICE__INTERNAL bool sluice__rt_gone(uint64_t id, bool look);
SLUICE__INTERNAL uint64_t sluice__rt_pid_ns(void);
SLUICE__INTERNAL bool sluice__rt_lock_word(_Atomic uint64_t *w, uint64_t me);
SLUICE__INTERNAL void sluice__rt_boot_id(char out[40]);
SLUICE__INTERNAL void sluice__rt_count_decision(sluice__rtable *r, rshard *sh, uint64_t permits,
                                                bool ok, bool full, bool elsewhere);

/* On the path of an admission, inline in every file (as the read's and the
 * unlock's above): the calling process's identity, a shard's lock, a
 * commit.  Each was a call across files once region_table.c was split; an
 * admission makes all three (bench_region's 100000-key rows: 22
 * instructions a decision more than before the split, under callgrind). */

/* This process's identity for lock words (region_who.c: pid | the low
 * start-time bits << 32): one load once known, else the first ask. */
static inline uint64_t sluice__rt_self(void)
{
    const uint64_t v = atomic_load_explicit(&sluice__rt_self_id, memory_order_relaxed);
    return v ? v : sluice__rt_self_ask();
}

/* Lock shard k; *stolen is set when a dead holder's lock was taken.  The
 * sequence goes odd (it already is when a holder died mid-hold: then it
 * stays so), then a release fence: the hold's stores come after it, for
 * the read (base/seqlock.h's sluice__seq_hold; region_read.c).  Returns the
 * sequence as the lock found it (before the odd store).  A free lock is
 * taken here with one compare-and-swap; a held one is waited for, or taken
 * from a dead holder and its shard repaired, by sluice__rt_shard_lock_wait
 * (region_table.c). */
static inline uint64_t sluice__rt_shard_lock(sluice__rtable *r, uint32_t k, bool *stolen)
{
    rshard *sh = &r->sh[k];
    const uint64_t me = sluice__rt_self();
    uint64_t free_word = 0;
    if (!atomic_compare_exchange_strong_explicit(&sh->lock, &free_word, me,
                                                 memory_order_acquire, memory_order_relaxed))
        return sluice__rt_shard_lock_wait(r, k, me, stolen);
    return sluice__seq_hold(&sh->seq);
}

/* Commit st to slot s (header h), shard locked: the inactive copy and its
 * epoch (sluice__rt_state_write), then the flip.  Returns the new header
 * word. */
static inline uint64_t sluice__rt_state_commit(const sluice__rtable *r, const sluice__profile *pf,
                                               unsigned char *s, uint64_t h,
                                               const sluice__state *st, uint32_t epoch)
{
    sluice__rt_state_write(r, pf, s, H_ACTIVE(h) ^ 1u, st, epoch);
    hdr_set(s, h ^ (1u << 2));
    return h ^ (1u << 2);
}

/* region_attach.c: a named region (sluice_table_open's rules: "/name" a
 * POSIX shared memory object, else a file; made exclusively, never through
 * a link, owned by this uid, writable by no one else; sized to `need` by
 * the first, under its flock) mapped whole: 0 with the mapping in *map and
 * its length in *len, or a negative code with the reason naming the path
 * in err.  And an attach's reason prefixed with the path (in place). */
SLUICE__INTERNAL int sluice__rt_map_named(const char *path, size_t need, void **map, size_t *len,
                                          char *err, size_t errlen);
SLUICE__INTERNAL void sluice__rt_name_error(const char *path, char *err, size_t errlen);

/* region_read.c: a snapshot of a key's slot read without the lock (false:
 * READ_TRIES reads met holders), the profile and state it decides under
 * (NULL: the lock must), a window log's answer from its summary (false:
 * the summary cannot tell). */
SLUICE__INTERNAL bool sluice__rt_read_key(const sluice__rtable *r, uint32_t k, uint32_t tag,
                                          const void *key, size_t keylen, rsnap *sn);
SLUICE__INTERNAL const sluice__profile *sluice__rt_snap_state(const sluice__rtable *r,
                                                              const rsnap *sn, sluice__state *st);
SLUICE__INTERNAL bool sluice__rt_ring_read(const sluice__profile *pf, const rsnap *sn,
                                           uint64_t now, uint64_t permits, sluice_result *res,
                                           bool *ok);

/* The table functions on a region table, with the public functions'
 * arguments and answers (sluice.h): region_read.c (decisions),
 * region_table.c (peeks), region_keys.c (remove, stats, scan),
 * region_attach.c (close); region_attach.c's ops table reaches them
 * (skeleton.h). */
SLUICE__INTERNAL void sluice__rtable_close(sluice__rtable *r);
SLUICE__INTERNAL bool sluice__rtable_try_acquire_at(sluice__rtable *r, const void *key,
                                                    size_t keylen, uint64_t permits,
                                                    uint64_t now_ns, sluice_result *res);
SLUICE__INTERNAL int sluice__rtable_remove(sluice__rtable *r, const void *key, size_t keylen);
SLUICE__INTERNAL int sluice__rtable_peek_at(sluice__rtable *r, const void *key, size_t keylen,
                                            uint64_t permits, uint64_t now_ns,
                                            sluice_result *res, sluice_key_state *state);
SLUICE__INTERNAL void sluice__rtable_stats_get(const sluice__rtable *r, sluice_table_stats *out);
SLUICE__INTERNAL int sluice__rtable_scan(sluice__rtable *r, uint64_t cursor, size_t count,
                                         sluice_table_scan_fn fn, void *arg,
                                         uint64_t *next_cursor, size_t *visited);

/* region_settle.c: reservations on the region's keys (skeleton.h's
 * reserve_at, cancel_at, settle_at; table_settle.c keeps the reservation's
 * states and its hold on the handle). */
SLUICE__INTERNAL bool sluice__rtable_reserve_at(sluice__rtable *r, const void *key, size_t keylen,
                                                uint64_t permits, uint64_t now_ns,
                                                uint64_t max_wait_ns,
                                                sluice_table_reservation *rv, sluice_result *res);
SLUICE__INTERNAL int sluice__rtable_cancel_at(sluice__rtable *r, const sluice_table_reservation *rv,
                                              uint64_t now_ns);
SLUICE__INTERNAL int sluice__rtable_settle_at(sluice__rtable *r, const sluice_table_reservation *rv,
                                              uint64_t actual_permits, uint64_t now_ns);

/* region_table.c: change the region's spec at now_ns to `spec`, or (spec
 * NULL) to its current one with one knob changed (sluice__reconfigure_knob:
 * knob, a, b), for every process (region_table.c, "Changing the spec"); 0
 * or a negative code with the reason in err, nothing changed.  table.c's
 * sluice_table_reconfigure_at, set_limit_at and set_burst_at reach it
 * through the ops table. */
SLUICE__INTERNAL int sluice__rtable_reconfigure_at(sluice__rtable *r, const char *spec, int knob,
                                                   uint64_t a, uint64_t b, uint64_t now_ns,
                                                   char *err, size_t errlen);

#endif /* SLUICE_TABLE_REGION_H */
