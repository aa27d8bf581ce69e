/* topk.c -- the keys a table refuses most: Space-Saving heavy hitters
 * (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and
 * top-k elements in data streams", ICDT 2005).
 *
 * The algorithm.  m counters, each (key, count, error).  A key already
 * counted adds 1 to its count.  A new key takes a free counter (count 1,
 * error 0), or, when all m are taken, the counter with the least count c:
 * the old key is forgotten and the new one gets count c + 1, error c.  With
 * N keys counted so far:
 *
 *   - the counts sum to N, so the least count is at most N/m;
 *   - a counted key's count is at least its true number f and at most
 *     f + error, with error <= least count <= N/m (its error is the least
 *     count when it came in, and the least count never decreases);
 *   - a key with f > N/m is counted: if it were not, the counter it last
 *     held was taken when the least count was >= its count, yet its count
 *     was >= f > N/m >= the least count ever is.
 *
 * Layout.  One sketch per table shard (a key's sketch is its shard, chosen
 * by the same top bits of the same hash), each with its own spin lock, so
 * refusals of keys in different shards never meet, and the lock a refusal
 * takes is as contended as the shard lock it has just left.  A refusal may
 * be counted with or without the shard lock (composite decisions count
 * after unlocking); the sketch's lock is a leaf: nothing else is taken
 * under it.  Per sketch, allocated when the sketch is made and never again:
 *
 *   ctr[m]     hash, count, error, stored length (and a truncation bit),
 *              the counter's place in ord[] and its run;
 *   keys       m * max_key_bytes bytes: the stored key bytes;
 *   ord[m]     the counters sorted by count, least first, in runs of equal
 *              counts (the Stream-Summary of the paper, as an array);
 *   end[m]     per run (a pool of m, with a free stack free[m]): the place
 *              in ord[] of its last counter;
 *   index      2m .. 4m slots (a power of two) of 8 bytes, linear probing
 *              on the hash: the hash's low 32 bits and counter + 1, 0 =
 *              empty (a probe looks at no counter until the 32 bits match);
 *              removal shifts the run back.
 *
 * so a sketch costs 64 + m * (52 + max_key_bytes) + 8 * slots bytes.
 *
 * Every step is O(1), with no search: counts only ever grow by 1, so a
 * counter of count c that grows swaps places with the last counter of its
 * run (ord[end]) and, now last of the c's, becomes the first of the c + 1's
 * (joining that run when the next counter has c + 1, else starting one).
 * The counters start at count 0 in one run, unkeyed: "take a free counter"
 * and "take the least counter" are then one step -- take the last counter
 * of the first run (a count of 0 was free: error 0) and grow it.
 *
 * Keys longer than max_key_bytes are kept to their first max_key_bytes
 * bytes and marked truncated: every key with the same first bytes is
 * counted as one (it is the prefix that is reported).  Such a prefix is
 * hashed apart (SipHash of the prefix), so it has one sketch whatever the
 * shard of each full key, and a truncated prefix never merges with an
 * untruncated key of the same bytes.
 *
 * Merged on read.  Every key (or prefix) is in exactly one sketch, so the
 * top keys of the table are the top of the union, and each entry's bound
 * is its sketch's: count - error <= f <= count, error <= N_s/m where N_s
 * is the refusals counted by that sketch, N_s <= N.  Hence for the table:
 * each count exceeds the truth by at most N/m, and every key refused more
 * than N/m times is reported (when `max` is large enough to reach it).
 */
#include "internal.h"
#include "spin.h"
#include "topk.h"

#include <stdalign.h>
#include <string.h>

#define TRUNC_BIT 0x80000000u
#define TRUNC_MIX 0x9e3779b97f4a7c15ULL

typedef struct ctr {
    uint64_t hash;
    uint64_t count; /* 0: free (no key, not in the index) */
    uint64_t err;
    uint32_t len;   /* stored bytes | TRUNC_BIT when the key was longer */
    uint32_t pos;   /* place in ord[] */
    uint32_t run;   /* its run: end[run] is the run's last place in ord[] */
    uint32_t pad;
} ctr;

typedef struct sketch {
    alignas(64) sluice__spin mu;
    uint32_t nfree;  /* runs on the free stack */
    uint32_t mask;   /* index slots - 1 */
    ctr *c;
    uint32_t *ord;
    uint32_t *end;
    uint32_t *free;
    uint64_t *index; /* the hash's low 32 bits << 32 | counter + 1; 0 = empty */
    unsigned char *keys;
} sketch;

struct sluice__topk {
    unsigned bits;  /* 2^bits sketches */
    uint32_t m;
    uint32_t maxb;
    uint64_t seed[2];
    void *mem;      /* every sketch's arrays, one block */
    sketch *s;      /* 2^bits, cache-line aligned */
};

static size_t slots_for(uint32_t m)
{
    size_t n = 1;
    while (n < (size_t)m * 2) n <<= 1;
    return n;
}

sluice__topk *sluice__topk_new(unsigned shard_bits, size_t counters, size_t max_key_bytes,
                               const uint64_t seed[2])
{
    if (counters < 1 || counters > SLUICE_TOP_COUNTERS_MAX || max_key_bytes < 1 ||
        max_key_bytes > SLUICE_TOP_KEY_MAX || shard_bits > 16)
        return NULL;
    sluice__topk *k = sluice__calloc(1, sizeof *k);
    if (!k) return NULL;
    size_t ns = (size_t)1 << shard_bits, m = counters, slots = slots_for((uint32_t)m);
    /* per sketch: ctr (8-aligned), ord, end, free, index, keys -- all sizes below
     * 2^30, so no sum can overflow */
    size_t per = m * sizeof(ctr) + slots * sizeof(uint64_t) + 3 * m * sizeof(uint32_t) +
                 m * max_key_bytes;
    per = (per + 7) & ~(size_t)7;
    k->bits = shard_bits;
    k->m = (uint32_t)m;
    k->maxb = (uint32_t)max_key_bytes;
    k->seed[0] = seed[0];
    k->seed[1] = seed[1];
    k->s = sluice__calloc64(ns * sizeof(sketch));
    k->mem = sluice__calloc(ns, per);
    if (!k->s || !k->mem) {
        sluice__topk_free(k);
        return NULL;
    }
    unsigned char *p = k->mem;
    for (size_t i = 0; i < ns; i++, p += per) {
        sketch *s = &k->s[i];
        s->mask = (uint32_t)(slots - 1);
        s->c = (ctr *)(void *)p;
        s->index = (uint64_t *)(void *)(p + m * sizeof(ctr));
        s->ord = (uint32_t *)(s->index + slots);
        s->end = s->ord + m;
        s->free = s->end + m;
        s->keys = (unsigned char *)(s->free + m);
        /* every counter free, count 0, in run 0; runs 1 .. m-1 free */
        for (uint32_t c = 0; c < m; c++) {
            s->ord[c] = c;
            s->c[c].pos = c;
            s->c[c].run = 0;
        }
        s->end[0] = (uint32_t)m - 1;
        s->nfree = (uint32_t)m - 1;
        for (uint32_t r = 1; r < m; r++) s->free[r - 1] = r;
    }
    return k;
}

void sluice__topk_free(sluice__topk *k)
{
    if (!k) return;
    sluice__free64(k->s);
    sluice__free(k->mem);
    sluice__free(k);
}

/* ---- one sketch ---------------------------------------------------------- */

static inline unsigned char *key_of(const sluice__topk *k, const sketch *s, uint32_t i)
{
    return s->keys + (size_t)i * k->maxb;
}

/* Counter i (of count c, c < UINT64_MAX) grows to c + 1: it swaps places
 * with the last of its run, leaves that run (freed when empty) and joins
 * the run of c + 1 that follows, or starts one. */
static void grow(const sluice__topk *k, sketch *s, uint32_t i)
{
    ctr *a = &s->c[i];
    uint32_t run = a->run, e = s->end[run], j = s->ord[e];
    s->ord[a->pos] = j;
    s->c[j].pos = a->pos;
    s->ord[e] = i;
    a->pos = e;
    if (e == 0 || s->c[s->ord[e - 1]].run != run) s->free[s->nfree++] = run; /* empty */
    else s->end[run] = e - 1;
    a->count++;
    if (e + 1 < k->m && s->c[s->ord[e + 1]].count == a->count) {
        a->run = s->c[s->ord[e + 1]].run;
    } else {
        a->run = s->free[--s->nfree];
        s->end[a->run] = e;
    }
}

/* The counter holding (h, key, len), or UINT32_MAX. */
static uint32_t lookup(const sluice__topk *k, const sketch *s, uint64_t h, const void *key,
                       uint32_t len)
{
    uint32_t stored = len & ~TRUNC_BIT;
    for (uint32_t j = (uint32_t)h & s->mask;; j = (j + 1) & s->mask) {
        uint64_t v = s->index[j];
        if (v == 0) return UINT32_MAX;
        if ((uint32_t)(v >> 32) != (uint32_t)h) continue;
        uint32_t i = (uint32_t)v - 1;
        const ctr *c = &s->c[i];
        if (c->hash == h && c->len == len && memcmp(key_of(k, s, i), key, stored) == 0) return i;
    }
}

static inline uint64_t slot_of(const sketch *s, uint32_t i)
{
    return (uint64_t)(uint32_t)s->c[i].hash << 32 | (i + 1);
}

static void index_add(sketch *s, uint32_t i)
{
    uint32_t j = (uint32_t)s->c[i].hash & s->mask;
    while (s->index[j]) j = (j + 1) & s->mask;
    s->index[j] = slot_of(s, i);
}

/* Remove counter i from the index, shifting back the entries of the run
 * after it that probed past its slot (linear probing needs no tombstone). */
static void index_remove(sketch *s, uint32_t i)
{
    const uint64_t v = slot_of(s, i);
    uint32_t hole = (uint32_t)s->c[i].hash & s->mask;
    while (s->index[hole] != v) hole = (hole + 1) & s->mask;
    for (uint32_t j = (hole + 1) & s->mask; s->index[j]; j = (j + 1) & s->mask) {
        uint32_t home = (uint32_t)(s->index[j] >> 32) & s->mask;
        /* the entry at j may fill the hole unless its home lies cyclically
         * in (hole, j] */
        bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (stays) continue;
        s->index[hole] = s->index[j];
        hole = j;
    }
    s->index[hole] = 0;
}

static void note_one(const sluice__topk *k, sketch *s, uint64_t h, const void *key, uint32_t len)
{
    uint32_t i = lookup(k, s, h, key, len);
    if (i == UINT32_MAX) { /* the last counter of the least run: free or the least */
        i = s->ord[s->end[s->c[s->ord[0]].run]];
        ctr *c = &s->c[i];
        if (c->count > 0) index_remove(s, i);
        c->hash = h;
        c->len = len;
        c->err = c->count;
        memcpy(key_of(k, s, i), key, len & ~TRUNC_BIT);
        index_add(s, i);
    }
    if (s->c[i].count < UINT64_MAX) grow(k, s, i); /* saturates: stays put */
}

void sluice__topk_note(sluice__topk *k, const void *key, size_t keylen, uint64_t h)
{
    uint32_t len = (uint32_t)keylen;
    if (keylen > k->maxb) { /* the prefix is the key: hashed apart */
        len = k->maxb | TRUNC_BIT;
        h = sluice__siphash13(k->seed, key, k->maxb) ^ TRUNC_MIX;
    }
    sketch *s = &k->s[k->bits ? h >> (64 - k->bits) : 0];
    sluice__spin_lock(&s->mu);
    note_one(k, s, h, key, len);
    sluice__spin_unlock(&s->mu);
}

/* ---- reading ------------------------------------------------------------- */

/* Whether a ranks before b: more refusals, then key bytes, then shorter,
 * then untruncated. */
static bool before(uint64_t ca, const unsigned char *ka, size_t la, bool ta,
                   const sluice_top_entry *b)
{
    if (ca != b->count) return ca > b->count;
    size_t n = la < b->keylen ? la : b->keylen;
    int c = n ? memcmp(ka, b->key, n) : 0;
    if (c) return c < 0;
    if (la != b->keylen) return la < b->keylen;
    return !ta && b->truncated;
}

void sluice__topk_read(sluice__topk *k, sluice_top_entry *out, size_t max, size_t *n)
{
    size_t have = 0;
    for (size_t si = 0; si < ((size_t)1 << k->bits); si++) {
        sketch *s = &k->s[si];
        sluice__spin_lock(&s->mu);
        for (uint32_t i = 0; i < k->m; i++) {
            const ctr *c = &s->c[i];
            if (c->count == 0) continue; /* free */
            const unsigned char *key = key_of(k, s, i);
            size_t len = c->len & ~TRUNC_BIT;
            bool trunc = (c->len & TRUNC_BIT) != 0;
            /* the place among the `have` kept, sorted; past max: not kept */
            size_t at = have;
            while (at > 0 && before(c->count, key, len, trunc, &out[at - 1])) at--;
            if (at >= max) continue;
            size_t last = have < max ? have : max - 1;
            memmove(&out[at + 1], &out[at], (last - at) * sizeof *out);
            sluice_top_entry *e = &out[at];
            e->count = c->count;
            e->error = c->err;
            e->keylen = len;
            e->truncated = trunc;
            memcpy(e->key, key, len);
            if (have < max) have++;
        }
        sluice__spin_unlock(&s->mu);
    }
    *n = have;
}

