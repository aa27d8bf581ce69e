/* region_table.h -- the table placed in a shared region (region_table.c
 * and the region_*.c beside it), as table.c and composite.c reach it: the
 * handle (the public table functions call through its ops table,
 * skeleton.h) and a key as one limit of a composite decision.  The rest is
 * private to the placement: region.h. */
#ifndef SLUICE_REGION_TABLE_H
#define SLUICE_REGION_TABLE_H

#include "base/internal.h"

typedef struct sluice__rtable sluice__rtable;

/* table.c: a handle for a region table (its profile, flags and max_keys,
 * and the region's process-local view); NULL when memory runs out.  Freed
 * by sluice_table_free(), which closes r.  Whether a handle is one. */
struct sluice__table_ops;
SLUICE__INTERNAL sluice_table *sluice__table_wrap(const struct sluice__table_ops *ops,
                                                  const sluice__profile *pf, unsigned flags,
                                                  size_t max_keys, sluice__rtable *r);
SLUICE__INTERNAL sluice__rtable *sluice__table_region(const sluice_table *t); /* or NULL */

/* region_table.c: a key of a region table as one limit of a composite
 * decision (composite.c; region_table.c, "Composite decisions").  Whether a
 * key is one the table takes; the key's shard, its hash and the region's
 * identity (the lock order, alike in every process); locking a shard at
 * now_ns (*stolen: taken from a dead holder and repaired -- resync once
 * nothing is held) and unlocking it; looking the key up in its locked
 * shard (fills pf, st, entry, where); making its slot (0, or SLUICE_EFULL
 * with *retry set; `alone`: no other part holds that shard, so keys at rest
 * may be swept; `evict`: and the policy may evict); storing the decided
 * state; dropping a made slot; counting the decision (shard locked);
 * sweeping every shard for keys at rest and making the region's count of
 * keys exact again (nothing held). */
struct sluice__part;
SLUICE__INTERNAL bool sluice__rtable_key_ok(const sluice__rtable *r, const void *key,
                                            size_t keylen);
SLUICE__INTERNAL void sluice__rtable_key_view(const sluice__rtable *r, const void **key,
                                              size_t *keylen, unsigned char dig[16]);
SLUICE__INTERNAL uint32_t sluice__rtable_shard_of(const sluice__rtable *r, const void *key,
                                                  size_t keylen, uint64_t *hash,
                                                  uint64_t id[2]);
SLUICE__INTERNAL void sluice__rtable_lock(sluice__rtable *r, uint32_t k, uint64_t now_ns,
                                          bool *stolen);
SLUICE__INTERNAL void sluice__rtable_unlock(sluice__rtable *r, uint32_t k);
SLUICE__INTERNAL void sluice__rtable_find(struct sluice__part *part);
SLUICE__INTERNAL int sluice__rtable_make(struct sluice__part *part, bool alone, bool evict,
                                         int64_t *retry);
SLUICE__INTERNAL void sluice__rtable_store(struct sluice__part *part);
SLUICE__INTERNAL void sluice__rtable_unmake(struct sluice__part *part);
SLUICE__INTERNAL void sluice__rtable_count(struct sluice__part *part, uint64_t permits, bool ok,
                                           bool full, bool elsewhere);
SLUICE__INTERNAL void sluice__rtable_reclaim(sluice__rtable *r, uint64_t now_ns);
SLUICE__INTERNAL void sluice__rtable_resync(sluice__rtable *r);

#endif /* SLUICE_REGION_TABLE_H */
