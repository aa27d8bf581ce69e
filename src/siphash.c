/* siphash.c -- SipHash-1-3, the keyed hash of the key tables.
 *
 * Keys come from the network, so an attacker chooses them; with a public
 * hash function they could pick keys that all land in one probe run and
 * turn every lookup into a scan (Redis moved to SipHash for this reason).
 * SipHash (Aumasson and Bernstein, 2012) is a pseudo-random function keyed
 * by 128 secret bits: without the key, colliding inputs cannot be found
 * faster than by chance.  We use the 1-3 variant (one compression round per
 * 8-byte word, three finalisation rounds), as Redis, Rust's HashMap and
 * CPython do: ample for hash-flooding resistance, about twice as fast as
 * 2-4.  Written from the paper's description; the tests check the same
 * code with 2-4 rounds against the paper's test vector (test_table_scale.c).
 */
#include "table.h"

#include <string.h>

static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

#define SIPROUND                                                               \
    do {                                                                       \
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);              \
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;                                 \
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;                                 \
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);              \
    } while (0)

static inline uint64_t load_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint64_t siphash(int crounds, int drounds, const uint64_t key[2],
                               const void *data, size_t len)
{
    const unsigned char *in = data;
    uint64_t v0 = 0x736f6d6570736575ULL ^ key[0];
    uint64_t v1 = 0x646f72616e646f6dULL ^ key[1];
    uint64_t v2 = 0x6c7967656e657261ULL ^ key[0];
    uint64_t v3 = 0x7465646279746573ULL ^ key[1];
    const unsigned char *end = in + (len & ~(size_t)7);
    for (; in != end; in += 8) {
        uint64_t m = load_le64(in);
        v3 ^= m;
        for (int r = 0; r < crounds; r++) SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7: b |= (uint64_t)in[6] << 48; /* fall through */
    case 6: b |= (uint64_t)in[5] << 40; /* fall through */
    case 5: b |= (uint64_t)in[4] << 32; /* fall through */
    case 4: b |= (uint64_t)in[3] << 24; /* fall through */
    case 3: b |= (uint64_t)in[2] << 16; /* fall through */
    case 2: b |= (uint64_t)in[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)in[0]; break;
    default: break;
    }
    v3 ^= b;
    for (int r = 0; r < crounds; r++) SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    for (int r = 0; r < drounds; r++) SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t sluice__siphash13(const uint64_t key[2], const void *data, size_t len)
{
    return siphash(1, 3, key, data, len);
}

uint64_t sluice__siphash_cd(int crounds, int drounds, const uint64_t key[2],
                            const void *data, size_t len)
{
    return siphash(crounds, drounds, key, data, len);
}
