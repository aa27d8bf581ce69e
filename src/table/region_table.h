/* region_table.h -- the table placed in a shared region (region_table.c
 * and the region_*.c beside it), as table.c and composite.c reach it: the
 * handle (the public table functions call through its ops table,
 * skeleton.h) and a key as one limit of a composite decision.  The rest is
 * private to the placement: region.h. */
#ifndef SLUICE_REGION_TABLE_H
#define SLUICE_REGION_TABLE_H

#include "alg/alg.h"

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
 * decision: table/hold.h. */

#endif /* SLUICE_REGION_TABLE_H */
