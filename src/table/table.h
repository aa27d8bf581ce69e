/* table.h -- the table's internals that the tests and benchmarks reach
 * (table.c), and its reader sections; SipHash (base/siphash.h) comes with
 * it. */
#ifndef SLUICE_TABLE_H
#define SLUICE_TABLE_H

#include "base/internal.h"
#include "base/siphash.h" /* the tests reach SipHash through this header */

/* Table internals for the tests and benchmarks (table.c): a table with a
 * given seed instead of a random one; the slots a lookup of key probes
 * (found or not); the bytes the table has allocated (probe arrays, shards;
 * long keys and rings not included) and the seed. */
SLUICE__INTERNAL sluice_table *sluice__table_new_seeded(const char *spec, size_t max_keys,
                                                        unsigned flags, const uint64_t seed[2],
                                                        char *err, size_t errlen);
SLUICE__INTERNAL uint32_t sluice__table_probe_len(sluice_table *t, const void *key,
                                                  size_t keylen);
SLUICE__INTERNAL size_t sluice__table_bytes(const sluice_table *t);
SLUICE__INTERNAL void sluice__table_seed(const sluice_table *t, uint64_t seed[2]);
/* A copy of every shard -- its struct (the lock's sequence word, its clock
 * and wheel included) and its probe array -- into buf, if it has
 * cap bytes; returns the bytes the copy takes.  For the tests that a
 * refusal or a probe writes nothing (call it with no decision running). */
SLUICE__INTERNAL size_t sluice__table_image(const sluice_table *t, void *buf, size_t cap);
/* sluice_table_scan(), also storing in *visited (if not NULL) the places
 * the call looked at (its work, at most count). */
SLUICE__INTERNAL int sluice__table_scan_counted(sluice_table *t, uint64_t cursor, size_t count,
                                                sluice_table_scan_fn fn, void *arg,
                                                uint64_t *next_cursor, size_t *visited);

/* Reader sections (table.c, "reader sections"): a call that may read an
 * object another thread may retire runs between sluice__rd_enter and
 * sluice__rd_exit (the token it returned; sections nest); the retiring
 * thread unlinks the object, takes sluice__rd_retire_stamp(), and frees it
 * once sluice__rd_min_active() is above that stamp.  sluice__rd_setup
 * before any section of a new object runs. */
SLUICE__INTERNAL void sluice__rd_setup(void);
SLUICE__INTERNAL void *sluice__rd_enter(void);
SLUICE__INTERNAL void sluice__rd_exit(void *tok);
SLUICE__INTERNAL uint64_t sluice__rd_retire_stamp(void);
SLUICE__INTERNAL uint64_t sluice__rd_min_active(void);

#endif /* SLUICE_TABLE_H */
