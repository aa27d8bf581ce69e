/* region_table.h -- the table placed in a shared region (region_table.c),
 * as table.c reaches it: the public table functions dispatch here when the
 * handle's `region` is set. */
#ifndef SLUICE_REGION_TABLE_H
#define SLUICE_REGION_TABLE_H

#include "internal.h"

typedef struct sluice__rtable sluice__rtable;

/* table.c: a handle for a region table (its profile, flags and max_keys,
 * and the region's process-local view); NULL when memory runs out.  Freed
 * by sluice_table_free(), which closes r.  Whether a handle is one. */
SLUICE__INTERNAL sluice_table *sluice__table_wrap(const sluice__profile *pf, unsigned flags,
                                                  size_t max_keys, sluice__rtable *r);
SLUICE__INTERNAL bool sluice__table_is_region(const sluice_table *t);

/* region_table.c: the table functions on a region table, with the public
 * functions' arguments and answers (sluice.h). */
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

#endif /* SLUICE_REGION_TABLE_H */
