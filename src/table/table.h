/* table.h -- the table's internals that the tests and benchmarks reach
 * (table.c), and SipHash-c-d (siphash.c), which the tests check against
 * SipHash's published vectors. */
#ifndef SLUICE_TABLE_H
#define SLUICE_TABLE_H

#include "base/internal.h"

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

/* SipHash-1-3 (sluice__siphash13) is in shared.h; SipHash-c-d, for the
 * tests. */
SLUICE__INTERNAL uint64_t sluice__siphash_cd(int crounds, int drounds, const uint64_t key[2],
                                             const void *data, size_t len);

/* Long keys (docs/decisions.md, "Long keys").  A key longer than a
 * table's cap (SLUICE_MAX_KEY_BYTES in process, max_key_bytes in a shared
 * region) is stored as its 16-byte digest: SipHash-2-4 with 128-bit output
 * under a key derived from the table's secret seed (sluice__digest_seed,
 * once per table), marked apart from every real key by its length code.
 * sluice__siphash24_128 is the bare function, for the tests' vectors. */
#define SLUICE__DIGEST_BYTES 16
/* The length code of a digested key, in both placements: more than any
 * key stored as itself can have (SLUICE_MAX_KEY_BYTES at most). */
#define SLUICE__DIGEST_LEN ((size_t)SLUICE_MAX_KEY_BYTES + 1)
/* The bytes behind a stored key's length code. */
static inline size_t sluice__key_bytes(size_t keylen)
{
    return keylen == SLUICE__DIGEST_LEN ? SLUICE__DIGEST_BYTES : keylen;
}
SLUICE__INTERNAL void sluice__siphash24_128(const uint64_t key[2], const void *data, size_t len,
                                            uint64_t out[2]);
SLUICE__INTERNAL void sluice__digest_seed(const uint64_t seed[2], uint64_t out[2]);
SLUICE__INTERNAL void sluice__key_digest(const uint64_t dseed[2], const void *key, size_t len,
                                         unsigned char out[SLUICE__DIGEST_BYTES]);

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

/* Whether the compiler can build siphash.c's vector versions (x86-64, the
 * GNU vector extensions and target attributes of gcc and clang). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SLUICE__SIP_VECTORS 1
#else
#define SLUICE__SIP_VECTORS 0
#endif

/* SipHash-1-3 of eight keys: out[l] = sluice__siphash13(key, data[l],
 * len[l]), for lengths with the same number of whole 8-byte words (len[l]
 * / 8 equal; data[l] not NULL), in the vectors of the best instruction set
 * the machine has.  The _with form runs the version `isa` asks for (0
 * scalar, 1 AVX2, 2 AVX-512) and returns false, doing nothing, where the
 * machine or the build has none: for the tests. */
SLUICE__INTERNAL void sluice__siphash13_x8(const uint64_t key[2], const void *const data[8],
                                           const size_t len[8], uint64_t out[8]);
SLUICE__INTERNAL bool sluice__siphash13_x8_with(int isa, const uint64_t key[2],
                                                const void *const data[8], const size_t len[8],
                                                uint64_t out[8]);

#endif /* SLUICE_TABLE_H */
