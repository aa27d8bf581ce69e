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
 *
 * Eight keys at once (sluice__siphash13_x8, for the table's bursts): the
 * rounds are adds, xors and rotations of 64-bit words, the same for every
 * key whose length has the same number of 8-byte words, so eight such keys
 * run in the eight 64-bit lanes of one vector -- one AVX-512 instruction
 * (vprolq: rotation included) where the scalar code spends eight, or two
 * AVX2 ones.  The message words are loaded lane by lane, as the scalar code
 * loads them; only the rounds are vectors.  Written once with the
 * compiler's vector extensions and compiled for each instruction set, the
 * one used is chosen when first called (__builtin_cpu_supports: the CPU
 * and the OS's saving of its registers), else the scalar code runs eight
 * times.  The tests check every version against the scalar code.
 *
 * Sections and entry points:
 *   one key      sluice__siphash13, sluice__siphash_cd, sluice__siphash24_128,
 *                sluice__digest_seed, sluice__key_digest (a long key's digest)
 *   eight keys   sluice__siphash13_x8 (the burst path; the vector versions,
 *                chosen at first call), sluice__siphash13_x8_with (tests)
 */
#include "base/siphash.h"

#include <string.h>

/* x rotated left by b (0 < b < 64), x a 64-bit word or a vector of them. */
#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

/* One round on v0 .. v3: words, or vectors of eight lanes. */
#define SIPROUND                                                               \
    do {                                                                       \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);              \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                 \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                 \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);              \
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

/* The last message word: the len & 7 bytes left at in, and len's low byte
 * on top. */
static inline uint64_t last_word(const unsigned char *in, size_t len)
{
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
    return b;
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
    const uint64_t b = last_word(in, len);
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

/* SipHash-2-4 with its 128-bit output (the paper's appendix; the
 * reference code's vectors_sip128): v1 starts xored with 0xee, the first
 * finalisation xors 0xee into v2 and gives the low half, a second one
 * after v1 ^= 0xdd the high half.  The digest of a key longer than a
 * table's cap (sluice__key_digest); one pass, O(len). */
void sluice__siphash24_128(const uint64_t key[2], const void *data, size_t len, uint64_t out[2])
{
    const unsigned char *in = data;
    uint64_t v0 = 0x736f6d6570736575ULL ^ key[0];
    uint64_t v1 = 0x646f72616e646f6dULL ^ key[1] ^ 0xee;
    uint64_t v2 = 0x6c7967656e657261ULL ^ key[0];
    uint64_t v3 = 0x7465646279746573ULL ^ key[1];
    const unsigned char *end = in + (len & ~(size_t)7);
    for (; in != end; in += 8) {
        const uint64_t m = load_le64(in);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    const uint64_t b = last_word(in, len);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xee;
    for (int r = 0; r < 4; r++) SIPROUND;
    out[0] = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    for (int r = 0; r < 4; r++) SIPROUND;
    out[1] = v0 ^ v1 ^ v2 ^ v3;
}

/* The digest's key: SipHash-2-4 of two labels under the table's seed, so
 * the digest and the table's SipHash-1-3 never run under one key. */
void sluice__digest_seed(const uint64_t seed[2], uint64_t out[2])
{
    out[0] = siphash(2, 4, seed, "sluice long-key digest, half 0", 30);
    out[1] = siphash(2, 4, seed, "sluice long-key digest, half 1", 30);
}

void sluice__key_digest(const uint64_t seed[2], const void *key, size_t len,
                        unsigned char out[SLUICE__DIGEST_BYTES])
{
    uint64_t d[2];
    sluice__siphash24_128(seed, key, len, d);
    memcpy(out, d, sizeof d); /* host order: the bytes are compared, never decoded */
}

/* ---- eight keys at once ------------------------------------------------- */

static void x8_scalar(const uint64_t key[2], const void *const data[8], const size_t len[8],
                      uint64_t out[8])
{
    for (int l = 0; l < 8; l++) out[l] = siphash(1, 3, key, data[l], len[l]);
}

#if SLUICE__SIP_VECTORS
typedef uint64_t v8u __attribute__((vector_size(64)));

/* A vector of f(0) .. f(7), built in registers: eight words stored to
 * memory and loaded as one vector would wait for the stores (a store
 * forwarding stall, a fifth of the function's time). */
#define LANES(f) ((v8u){f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7)})

/* The eight lanes' SipHash-1-3, inlined into each instruction set's
 * function below (no vector crosses a call). */
static inline __attribute__((always_inline)) void
x8_lanes(const uint64_t key[2], const void *const data[8], const size_t len[8], uint64_t out[8])
{
    const uint64_t k0 = key[0], k1 = key[1];
    v8u v0 = {0}, v1 = {0}, v2 = {0}, v3 = {0}, m;
    v0 += (uint64_t)(0x736f6d6570736575ULL ^ k0);
    v1 += (uint64_t)(0x646f72616e646f6dULL ^ k1);
    v2 += (uint64_t)(0x6c7967656e657261ULL ^ k0);
    v3 += (uint64_t)(0x7465646279746573ULL ^ k1);
    const size_t words = len[0] / 8; /* the same in every lane */
    for (size_t j = 0; j < words; j++) {
#define WORD(l) load_le64((const unsigned char *)data[l] + 8 * j)
        m = LANES(WORD);
#undef WORD
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
#define LAST(l) last_word((const unsigned char *)data[l] + 8 * words, len[l])
    m = LANES(LAST);
#undef LAST
    v3 ^= m;
    SIPROUND;
    v0 ^= m;
    v2 ^= (uint64_t)0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    m = v0 ^ v1 ^ v2 ^ v3;
    memcpy(out, &m, sizeof m);
}

__attribute__((target("avx512f"))) static void
x8_avx512(const uint64_t key[2], const void *const data[8], const size_t len[8], uint64_t out[8])
{
    x8_lanes(key, data, len, out);
}

__attribute__((target("avx2"))) static void
x8_avx2(const uint64_t key[2], const void *const data[8], const size_t len[8], uint64_t out[8])
{
    x8_lanes(key, data, len, out);
}
#endif

typedef void x8_fn(const uint64_t key[2], const void *const data[8], const size_t len[8],
                   uint64_t out[8]);

/* The version for `isa` (0 scalar, 1 AVX2, 2 AVX-512), NULL where the
 * machine or the build has none. */
static x8_fn *x8_version(int isa)
{
    if (isa == 0) return x8_scalar;
#if SLUICE__SIP_VECTORS
    __builtin_cpu_init();
    if (isa == 1 && __builtin_cpu_supports("avx2")) return x8_avx2;
    if (isa == 2 && __builtin_cpu_supports("avx512f")) return x8_avx512;
#endif
    return NULL;
}

bool sluice__siphash13_x8_with(int isa, const uint64_t key[2], const void *const data[8],
                               const size_t len[8], uint64_t out[8])
{
    x8_fn *f = isa >= 0 && isa <= 2 ? x8_version(isa) : NULL;
    if (!f) return false;
    f(key, data, len, out);
    return true;
}

void sluice__siphash13_x8(const uint64_t key[2], const void *const data[8], const size_t len[8],
                          uint64_t out[8])
{
    /* chosen once; threads that race store the same pointer */
    static _Atomic(x8_fn *) best;
    x8_fn *f = atomic_load_explicit(&best, memory_order_relaxed);
    if (!f) {
        f = x8_version(2);
        if (!f) f = x8_version(1);
        if (!f) f = x8_scalar;
        atomic_store_explicit(&best, f, memory_order_relaxed);
    }
    f(key, data, len, out);
}
