/* siphash.h -- the keyed hashes of the key tables (siphash.c).
 *
 *   sluice__siphash_cd        SipHash-c-d, for the tests' vectors
 *   long keys                 sluice__siphash24_128, sluice__digest_seed,
 *                             sluice__key_digest, SLUICE__DIGEST_*
 *   eight keys at once        sluice__siphash13_x8 (_with: one version)
 *
 * SipHash-1-3 itself (sluice__siphash13) is in shared.h. */
#ifndef SLUICE_BASE_SIPHASH_H
#define SLUICE_BASE_SIPHASH_H

#include "base/internal.h"

/* SipHash-c-d, for the tests. */
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

#endif /* SLUICE_BASE_SIPHASH_H */
