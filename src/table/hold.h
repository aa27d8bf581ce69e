/* hold.h -- a key of a table as one limit of a composite decision: the kind
 * ops that the table layer gives composite/ (composite.c runs the
 * all-or-nothing protocol over them), for both placements, and the fast
 * path for composites of in-process keys only.
 *
 *   sluice__key_hold        a key held: as asked, as stored, where it is
 *   in process (table.c, "composite decisions")
 *       sluice__table_key_view, _shard_of, _lock/_unlock, _find, _make,
 *       _refind, _store, _unmake, _reclaim, _count(_elsewhere), _note
 *       sluice__tables_decide   the fast path (its proof is beside it)
 *   in a shared region (region_table.c, "composite decisions")
 *       sluice__rtable_key_ok, _key_view, _shard_of, _lock/_unlock, _find,
 *       _make, _store, _unmake, _count, _reclaim, _resync
 */
#ifndef SLUICE_TABLE_HOLD_H
#define SLUICE_TABLE_HOLD_H

#include "alg/held.h"
#include "base/internal.h"
#include "base/siphash.h"

struct sluice__rtable;

typedef struct sluice__key_hold {
    sluice__held h;           /* first: what every kind of limit gives */
    sluice_table *t;
    const void *key;          /* the key as asked */
    size_t keylen;
    const void *skey;         /* the key as its table stores it (a long */
    size_t skeylen;           /* one's digest: the key_view functions) */
    unsigned char dig[SLUICE__DIGEST_BYTES]; /* that digest */
    uint64_t hash;            /* of skey, under the table's seed */
    uint32_t entry;           /* the key's slot, UINT32_MAX when absent */
    bool created;             /* the entry was made for this request */
    /* in process */
    void *shard;              /* the key's shard (its lock) */
    uint32_t gen;             /* the shard's moves when entry was found */
    /* in a shared region */
    struct sluice__rtable *rt; /* the region's view, or NULL: in process */
    uint64_t rid[2];          /* the region's identity (its random seed) */
    uint32_t rk;              /* the key's shard */
    uint64_t repoch;          /* the configuration decided under */
    bool stolen;              /* a dead holder's lock was taken (resync) */
} sluice__key_hold;

/* In process (table_hold.c).  The key as stored (skey, skeylen, dig from key,
 * keylen); the shard of a stored key (the lock order) and its hash;
 * locking a shard at now_ns (its clock moves on, nothing else: keys at
 * rest are reclaimed only by a make that needs room; a reader section runs
 * until the unlock); looking the key up in its locked shard (fills h.pf, h.st,
 * entry); making the key's entry when an admission needs it (0, or
 * SLUICE_EFULL with *retry set, or SLUICE_ENOMEM; `alone`: no other part
 * holds an entry of the shard, so keys at rest may be reclaimed and the
 * policy may evict); finding the key's slot (and h.st) again after entries
 * of its shard moved (a key made or dropped by another part); storing h.tmp
 * into the entry; undoing a made entry; reclaiming keys at rest in every
 * shard (with no lock held); counting (`full`: refused for want of room). */
SLUICE__INTERNAL void sluice__table_key_view(sluice__key_hold *kh);
SLUICE__INTERNAL void *sluice__table_shard_of(sluice_table *t, const void *key, size_t keylen,
                                              uint64_t *hash);
SLUICE__INTERNAL void sluice__table_lock(sluice_table *t, void *shard, uint64_t now_ns);
SLUICE__INTERNAL void sluice__table_unlock(sluice_table *t, void *shard);
SLUICE__INTERNAL void sluice__table_find(sluice__key_hold *kh);
SLUICE__INTERNAL int sluice__table_make(sluice__key_hold *kh, bool alone, int64_t *retry);
SLUICE__INTERNAL void sluice__table_refind(sluice__key_hold *kh);
SLUICE__INTERNAL void sluice__table_store(sluice__key_hold *kh);
SLUICE__INTERNAL void sluice__table_unmake(sluice__key_hold *kh);
SLUICE__INTERNAL void sluice__table_reclaim(sluice_table *t, uint64_t now_ns);
SLUICE__INTERNAL void sluice__table_count(sluice_table *t, uint64_t permits, bool ok, bool full);
SLUICE__INTERNAL void sluice__table_count_elsewhere(sluice_table *t, uint64_t permits);
/* Count a refusal of `key` in the table's sketch of the keys refused most,
 * if it has one; h is the key's hash under the table's seed (0: unknown,
 * computed).  Takes no shard lock. */
SLUICE__INTERNAL void sluice__table_note(sluice_table *t, const void *key, size_t keylen,
                                         uint64_t h);

/* The whole composite when the refs are 1 to SLUICE_COMPOSITE_MAX
 * distinct keys already held by in-process tables, read without locks as a
 * single decision reads them and committed by upgrading each shard's
 * sequence (table.c), counted in each table: 1 admitted (or a probe every
 * limit allows), 0 refused; -1 with nothing decided or counted otherwise
 * (the caller takes the general path).  `ans` NULL: no details; else
 * every limit's answer. */
SLUICE__INTERNAL int sluice__tables_decide(const sluice_limit_ref *refs, size_t n,
                                           uint64_t permits, uint64_t now_ns,
                                           sluice__answer *ans);

/* In a shared region (region_table.c; its head comment, "Composite
 * decisions").  Whether a key is one the table takes; the key as stored
 * (a long one's digest, under the region's cap); the key's shard, its hash
 * and the region's identity (the lock order, alike in every process);
 * locking a shard at now_ns (*stolen: taken from a dead holder and
 * repaired -- resync once nothing is held) and unlocking it; looking the
 * key up in its locked shard (fills h.pf, h.st, entry, repoch); making its
 * slot (0, or SLUICE_EFULL with *retry set; `alone`: no other part holds
 * that shard, so keys at rest may be swept; `evict`: and the policy may
 * evict); storing the decided state; dropping a made slot; counting the
 * decision (shard locked); sweeping every shard for keys at rest and making
 * the region's count of keys exact again (nothing held). */
SLUICE__INTERNAL bool sluice__rtable_key_ok(const struct sluice__rtable *r, const void *key,
                                            size_t keylen);
SLUICE__INTERNAL void sluice__rtable_key_view(const struct sluice__rtable *r, const void **key,
                                              size_t *keylen, unsigned char dig[16]);
SLUICE__INTERNAL uint32_t sluice__rtable_shard_of(const struct sluice__rtable *r,
                                                  const void *key, size_t keylen,
                                                  uint64_t *hash, uint64_t id[2]);
SLUICE__INTERNAL void sluice__rtable_lock(struct sluice__rtable *r, uint32_t k, uint64_t now_ns,
                                          bool *stolen);
SLUICE__INTERNAL void sluice__rtable_unlock(struct sluice__rtable *r, uint32_t k);
SLUICE__INTERNAL void sluice__rtable_find(sluice__key_hold *kh);
SLUICE__INTERNAL int sluice__rtable_make(sluice__key_hold *kh, bool alone, bool evict,
                                         int64_t *retry);
SLUICE__INTERNAL void sluice__rtable_store(sluice__key_hold *kh);
SLUICE__INTERNAL void sluice__rtable_unmake(sluice__key_hold *kh);
SLUICE__INTERNAL void sluice__rtable_count(sluice__key_hold *kh, uint64_t permits, bool ok,
                                           bool full, bool elsewhere);
SLUICE__INTERNAL void sluice__rtable_reclaim(struct sluice__rtable *r, uint64_t now_ns);
SLUICE__INTERNAL void sluice__rtable_resync(struct sluice__rtable *r);

#endif /* SLUICE_TABLE_HOLD_H */
