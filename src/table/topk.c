/* topk.c -- the keys a table refuses most: Space-Saving heavy hitters
 * (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and
 * top-k elements in data streams", ICDT 2005).
 *
 * The algorithm.  m counters, each (key, count, error).  Refusals arrive
 * as (key, w): w refusals of one key at once (the paper's step is w = 1;
 * below, a thread gathers its refusals of one key and counts them in one
 * step).  A key already counted adds w to its count.  A new key takes a
 * free counter (count w, error 0), or, when all m are taken, the counter
 * with the least count c: the old key is forgotten and the new one gets
 * count c + w, error c.  With N refusals counted so far:
 *
 *   - the counts sum to N, so the least count is at most N/m;
 *   - a counted key's count is at least its true number f and at most
 *     f + error, with error <= least count <= N/m (its error is the least
 *     count when it came in, and the least count never decreases);
 *   - a key with f > N/m is counted: if it were not, the counter it last
 *     held was taken when the least count was >= its count, yet its count
 *     was >= f > N/m >= the least count ever is.
 *
 * None of the three depends on w or on the order of the steps: gathering
 * a key's refusals before counting them changes which key a tie evicts,
 * never a bound.
 *
 * Hot keys without a shared write.  A flood refused on one key would take
 * the key's sketch lock on every refusal, and with two threads the lock's
 * cache line would move between the cores every time (the overload path
 * otherwise writes nothing shared).  So every thread that owns a stripe
 * of the decision counters (counters.c: one of SLUICE__STRIPES - 1 slots,
 * exclusive for the thread's life, handed on when it exits) has, in every
 * sketch, a pending record of its own on its own cache line: a key (hash,
 * length, bytes), `count` refusals of it not yet counted, and `taken`.
 * A refusal of the record's key is one store to count (no lock, no locked
 * instruction, a line no other thread writes while no read runs); when
 * count - taken reaches PEND_MAX (256) they move into the key's sketch in
 * one step of weight count - taken under its lock, and the record is
 * emptied (count = taken = 0; the key stays).  A refusal of another key is
 * counted at once (one step of weight 1 under its sketch's lock), and the
 * record is left as it is -- unless the same key (by hash; `last`, the
 * owner's own note) was the one refused just before: then the key takes
 * the record, the old key's count - taken moved into its sketch first and
 * the record emptied, before the owner rewrites the key (under the
 * record's own sequence, a seqlock with the owner as the only writer).  So
 * a flood of keys refused once each costs one step each, with no rewrite,
 * and a hot key keeps its record while other keys come between its
 * refusals; which path a refusal takes never changes what is counted, only
 * when.  Threads without a stripe of their own (more than
 * SLUICE__STRIPES - 1 alive) count each refusal at once, w = 1.
 *
 * A read first collects every record: it reads the key consistently (the
 * sequence), then, under that key's sketch lock, adds count - taken and
 * sets taken = count.  `taken` is written only under the lock of the
 * record's key's sketch, by the reader or by the owner emptying it; the
 * owner never changes the key of a record with count > 0 without taking
 * that lock first, so the key a reader read under the lock is still the
 * record's when it stores taken.  The owner's count only grows meanwhile:
 * what it has added since the reader's load stays pending.  So a read
 * counts every refusal made before it began (a record whose key changes
 * under it has only refusals made since: each change moved the ones before
 * into the sketch), the bounds above hold for every read exactly as for a
 * sketch fed one refusal at a time, and between reads the sketch itself
 * lags by at most PEND_MAX - 1 refusals per thread, which no reader sees.
 *
 * Why records and not sampling (counting every n-th refusal with weight
 * n): a deterministic sample has no per-key bound (a stream that puts
 * each sampled refusal on one key hides the others entirely), a random
 * one only a probabilistic bound, while records keep Space-Saving's exact
 * ones.  Why records in the sketch and not in thread-local storage: a
 * thread-local record would outlive the table (tables are freed while
 * threads live), and its pending counts would be lost with the thread and
 * invisible to reads; records in the sketch are freed with it, stay when
 * their thread exits (the stripe's next owner carries on with them), and
 * are read.  The one thing a thread keeps is its stripe number.
 *
 * Cost: a hot key's refusal is a load of the thread's stripe, a compare of
 * the hash, length and key words with the record, and one store; a key
 * that changes every refusal pays the sketch lock and one step of weight
 * 1 (the record untouched); a key's second refusal in a row also rewrites
 * the record.  A flood of keys never seen (a full table refusing new keys)
 * makes every step one of a new key; that step is made short (below, "A
 * new key's step") and its lines are fetched before the lock.
 *
 * Layout.  One sketch per table shard (a key's sketch is its shard, chosen
 * by the same top bits of the same hash), each with its own spin lock, so
 * the moves of keys in different shards never meet.  A refusal may be
 * counted with or without the shard lock (composite decisions count after
 * unlocking); the sketch's lock is a leaf: nothing else is taken under it
 * (a record's moves take only it).  Per sketch, allocated when the sketch
 * is made and never again:
 *
 *   header     one cache line: the lock, the arrays, the counter the next
 *              new key takes (vic) and hints of its lines;
 *   index      b buckets of one cache line, b the power of two >= m / 2:
 *              6 slots of (a 32-bit tag of the hash, counter + 1), a word
 *              of their 8-bit tags and a word of used bits and `over`
 *              (before lookup: the details);
 *   ctr[m]     hash, count, error, stored length (and a truncation bit),
 *              the counter's place in ord[], its run and its index slot;
 *   ord[m]     the counters sorted by count, least first, in runs of equal
 *              counts (the Stream-Summary of the paper, as an array);
 *   end[m]     per run (a pool of m, with a free stack free[m]): the place
 *              in ord[] of its last counter;
 *   keys       m * max_key_bytes bytes: the stored key bytes;
 *
 * so a sketch costs 64 + m * (52 + max_key_bytes) + 64 * b bytes (the
 * index 32 .. 64 bytes a counter), rounded up to 64; and
 * per table, SLUICE__STRIPES - 1 = 15 pending records of 64 bytes plus
 * max_key_bytes rounded up to 8, each rounded up to 64 (128 bytes each
 * for keys of up to 64 bytes).
 *
 * A step of weight 1 is O(1), with no search: a counter of count c that
 * grows swaps places with the last counter of its run (ord[end]) and, now
 * last of the c's, becomes the first of the c + 1's (joining that run when
 * the next counter has c + 1, else starting one).  A step of weight w also
 * passes over the runs between c and c + w, one swap each (raise_by): at
 * most min(w, m) swaps, so at most one per refusal counted.  The counters
 * start at count 0 in one run, unkeyed: "take a free counter" and "take
 * the least counter" are then one step -- take the last counter of the
 * first run (a count of 0 was free: error 0) and grow it.
 *
 * A new key's step.  The counter it takes is kept (vic, with its hash),
 * set after every step: so the step starts from one line, not a chain of
 * four loads.  When vic, at place e0 > 0, was the last of the least run
 * (places 0 .. e0), the step leaves places 0 .. e0 - 1 as they were, so
 * the next vic is ord[e0 - 1] (lines the step has just read), and for
 * w = 1 vic needs no swap: it stays at e0 and joins the run after it (of
 * count + 1) or starts one.  Only once per run emptied (once per m new
 * keys in a flood) is the next vic looked up.  The index never moves a
 * key and is read without branches that depend on its contents (lookup,
 * index_add).  Before the lock, the step's lines -- its bucket, vic's
 * counter, key bytes and bucket, the places around vic in ord[], its run's
 * end and the counters on either side -- are prefetched from the header's
 * hints (a stale hint fetches a useless line, nothing else), so they
 * arrive together instead of one after another.  None of this changes the
 * algorithm: the counter taken is the last of the least run, as before.
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
#include "base/counters.h"
#include "base/internal.h"
#include "base/spin.h"
#include "table/topk.h"

#include <stdalign.h>
#include <string.h>

#define TRUNC_BIT 0x80000000u
#define TRUNC_MIX 0x9e3779b97f4a7c15ULL
/* A thread's pending refusals of one key are moved into the sketch when
 * they reach this many (or the key changes, or a read comes). */
#define PEND_MAX 256
#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

typedef struct ctr {
    uint64_t hash;
    uint64_t count; /* 0: free (no key, not in the index) */
    uint64_t err;
    uint32_t len;   /* stored bytes | TRUNC_BIT when the key was longer */
    uint32_t pos;   /* place in ord[] */
    uint32_t run;   /* its run: end[run] is the run's last place in ord[] */
    uint32_t slot;  /* its slot in the index (bucket * 8 + slot), while keyed */
} ctr;

/* One cache line: the lock, the arrays (ord, end, free and the keys follow
 * c[m]: ord_of() ...), and what a new key's step will read, to prefetch it
 * before the lock. */
typedef struct sketch {
    alignas(64) sluice__spin mu;
    /* the counter a new key takes, ord[end[run of ord[0]]], and its hash:
     * set after every step (under mu; read without it only to prefetch) */
    uint64_t vich;
    ctr *c;
    uint64_t *index; /* buckets of 8 words (before lookup: the format) */
    uint32_t vic;
    uint32_t mask;   /* index buckets - 1 */
    uint32_t nfree;  /* runs on the free stack */
    /* hints for the prefetch (set with vic; any value is harmless): vic's
     * place in ord[] and its run, and the counters after and before it */
    uint32_t vpos, vrun, vnext, vprev;
} sketch;

/* A thread's pending record (one per counters stripe a thread owns: see
 * the head comment), followed by its key's bytes in words (zero past the
 * key's end), max_key_bytes rounded up to 8.  Every field is read and
 * written with __atomic builtins. */
typedef struct pend {
    alignas(64) _Atomic uint64_t seq; /* even; odd while the owner rewrites hash, len,
                                       * key (base/seqlock.h) */
    uint64_t hash;
    uint64_t count;  /* refusals of the key since it became pending (owner) */
    uint64_t taken;  /* of those, already in the sketch (under its lock) */
    uint32_t len;    /* as ctr.len */
    uint64_t last;   /* the hash of the key the owner counted directly last
                      * (owner only: the record's policy, never its content) */
} pend;

struct sluice__topk {
    unsigned bits;  /* 2^bits sketches */
    uint32_t m;
    uint32_t maxb;
    uint64_t seed[2];
    void *mem;      /* every sketch's arrays, one block */
    sketch *s;      /* 2^bits, cache-line aligned */
    void *pend;     /* SLUICE__STRIPES - 1 records of pstride bytes, aligned */
    size_t pstride;
};

static inline uint32_t *ord_of(const sluice__topk *k, const sketch *s)
{
    return (uint32_t *)(void *)(s->c + k->m);
}
static inline uint32_t *end_of(const sluice__topk *k, const sketch *s)
{
    return ord_of(k, s) + k->m;
}
static inline uint32_t *free_of(const sluice__topk *k, const sketch *s)
{
    return ord_of(k, s) + 2 * (size_t)k->m;
}
/* The index's buckets: a power of two, at least m / 2 (about 2 keys a
 * bucket of 6 slots). */
static size_t buckets_for(uint32_t m)
{
    size_t n = 1;
    while (n * 2 < (size_t)m) n <<= 1;
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
    size_t ns = (size_t)1 << shard_bits, m = counters, nb = buckets_for((uint32_t)m);
    /* per sketch: index (64-aligned buckets), ctr, ord, end, free, keys -- all
     * sizes below 2^30, so no sum (nor the product by ns <= 2^16) can overflow */
    size_t per = nb * 64 + m * sizeof(ctr) + 3 * m * sizeof(uint32_t) + m * max_key_bytes;
    per = (per + 63) & ~(size_t)63;
    k->bits = shard_bits;
    k->m = (uint32_t)m;
    k->maxb = (uint32_t)max_key_bytes;
    k->seed[0] = seed[0];
    k->seed[1] = seed[1];
    k->s = sluice__calloc64(ns * sizeof(sketch));
    k->mem = sluice__calloc64(ns * per);
    k->pstride = (sizeof(pend) + (max_key_bytes + 7) / 8 * 8 + 63) / 64 * 64;
    k->pend = sluice__calloc64((SLUICE__STRIPES - 1) * k->pstride);
    if (!k->s || !k->mem || !k->pend) {
        sluice__topk_free(k);
        return NULL;
    }
    unsigned char *p = k->mem;
    for (size_t i = 0; i < ns; i++, p += per) {
        sketch *s = &k->s[i];
        s->mask = (uint32_t)(nb - 1);
        s->index = (uint64_t *)(void *)p;
        s->c = (ctr *)(void *)(p + nb * 64);
        uint32_t *ord = ord_of(k, s), *end = end_of(k, s), *fr = free_of(k, s);
        /* every counter free, count 0, in run 0; runs 1 .. m-1 free */
        for (uint32_t c = 0; c < m; c++) {
            ord[c] = c;
            s->c[c].pos = c;
            s->c[c].run = 0;
        }
        end[0] = (uint32_t)m - 1;
        s->nfree = (uint32_t)m - 1;
        s->vic = (uint32_t)m - 1;
        for (uint32_t r = 1; r < m; r++) fr[r - 1] = r;
    }
    return k;
}

void sluice__topk_free(sluice__topk *k)
{
    if (!k) return;
    sluice__free64(k->pend);
    sluice__free64(k->s);
    sluice__free64(k->mem);
    sluice__free(k);
}

/* ---- one sketch ---------------------------------------------------------- */

static inline unsigned char *key_of(const sluice__topk *k, const sketch *s, uint32_t i)
{
    return (unsigned char *)(ord_of(k, s) + 3 * (size_t)k->m) + (size_t)i * k->maxb;
}

/* Counter i (of count c, c < UINT64_MAX) grows to c + w (saturating at
 * UINT64_MAX), w >= 1: it swaps places with the last of its run and leaves
 * that run (freed when empty); then, while the run after it counts less
 * than c + w, it swaps places with that run's last counter (the run keeps
 * its places, shifted down by one: still contiguous); there it joins the
 * run of c + w that follows, or starts one.  One step per run passed over:
 * at most min(w, m) steps, and one step for w = 1 (the case of the paper). */
static void raise_by(const sluice__topk *k, sketch *s, uint32_t i, uint64_t w)
{
    uint32_t *const ord = ord_of(k, s), *const end = end_of(k, s), *const fr = free_of(k, s);
    ctr *a = &s->c[i];
    const uint64_t target = a->count + w < a->count ? UINT64_MAX : a->count + w;
    uint32_t run = a->run, e = end[run], j = ord[e];
    ord[a->pos] = j;
    s->c[j].pos = a->pos;
    ord[e] = i;
    a->pos = e;
    if (e == 0 || s->c[ord[e - 1]].run != run) fr[s->nfree++] = run; /* empty */
    else end[run] = e - 1;
    while (e + 1 < k->m && s->c[ord[e + 1]].count < target) {
        uint32_t r2 = s->c[ord[e + 1]].run, e2 = end[r2], j2 = ord[e2];
        ord[e] = j2; /* r2's last counter takes i's place: r2 is e .. e2 - 1 */
        s->c[j2].pos = e;
        end[r2] = e2 - 1;
        ord[e2] = i;
        a->pos = e2;
        e = e2;
    }
    a->count = target;
    if (e + 1 < k->m && s->c[ord[e + 1]].count == target) {
        a->run = s->c[ord[e + 1]].run;
    } else {
        a->run = fr[--s->nfree];
        end[a->run] = e;
    }
}

/* The index: counter numbers by hash, in buckets of one cache line (8
 * words), each BSLOTS slots, a word of 8-bit tags (byte j: slot j's) and a
 * word `meta`: bits 0 .. BSLOTS - 1 say which slots are used, bits 8 .. 63
 * are `over`.  A used slot is the 32-bit tag of the counter's hash (bits
 * 16 .. 47: none of the bucket's bits, none of the shard's) << 32 |
 * counter + 1, its byte in the tag word bits 40 .. 47 of the hash (an
 * unused slot and byte are 0), and the counter keeps where it is
 * (ctr.slot).  A key's home is bucket hash & mask; it sits in the first
 * bucket from its home (cyclically) with a free slot when it was added,
 * and `over` of a bucket counts the keys that sit past it with a home at
 * or before it.  So a lookup compares the key's byte with the tag word's
 * 8 at once (a counter is read only where they match, 1 in 256 used slots)
 * and stops at the first bucket whose `over` is 0; an addition takes the
 * first free slot by the bits; a removal empties its slot (taking one from
 * the `over` of the buckets between its home and it); no key ever moves.
 * With at most m keys in at least m / 2 buckets of 6, a bucket is full
 * rarely: the common step reads one bucket, with no branch that depends on
 * its contents, and stops.  Every walk is bounded by the number of buckets
 * (nothing can need more). */
#define BSLOTS 6
#define TAGS 6 /* the tag word's place in a bucket */
#define META 7 /* meta's */
#define USED ((1u << BSLOTS) - 1)
#define OVER1 ((uint64_t)1 << 8)
#define BYTES1 0x0101010101010101ULL

static inline uint32_t tag_of(uint64_t h) { return (uint32_t)(h >> 16); }
static inline uint64_t tag8_of(uint64_t h) { return (h >> 40) & 0xff; }

static inline uint64_t *bucket_of(const sketch *s, uint32_t b)
{
    return s->index + (size_t)b * 8;
}

/* The counter holding (h, key, len), or UINT32_MAX. */
static uint32_t lookup(const sluice__topk *k, const sketch *s, uint64_t h, const void *key,
                       uint32_t len)
{
    const uint32_t stored = len & ~TRUNC_BIT, tag = tag_of(h);
    const uint64_t t8 = tag8_of(h) * BYTES1;
    uint32_t b = (uint32_t)h & s->mask;
    for (uint32_t n = 0; n <= s->mask; n++, b = (b + 1) & s->mask) {
        const uint64_t *bk = bucket_of(s, b);
        /* the bytes of the tag word equal to the key's (and, by the borrow,
         * maybe a few more: each is checked) */
        const uint64_t x = bk[TAGS] ^ t8;
        uint64_t z = (x - BYTES1) & ~x & (BYTES1 << 7);
        while (z) {
            const unsigned j = (unsigned)__builtin_ctzll(z) / 8;
            z &= z - 1;
            if (j >= BSLOTS || !(bk[META] >> j & 1) || (uint32_t)(bk[j] >> 32) != tag) continue;
            const uint32_t i = (uint32_t)bk[j] - 1;
            const ctr *c = &s->c[i];
            if (c->hash == h && c->len == len && memcmp(key_of(k, s, i), key, stored) == 0)
                return i;
        }
        if (bk[META] < OVER1) break; /* over == 0 */
    }
    return UINT32_MAX;
}

static void index_add(sketch *s, uint32_t i)
{
    ctr *c = &s->c[i];
    uint32_t b = (uint32_t)c->hash & s->mask;
    for (uint32_t n = 0; n <= s->mask; n++, b = (b + 1) & s->mask) {
        uint64_t *bk = bucket_of(s, b);
        const unsigned empty = ~(unsigned)bk[META] & USED;
        if (empty) {
            const unsigned j = (unsigned)__builtin_ctz(empty);
            bk[j] = (uint64_t)tag_of(c->hash) << 32 | (i + 1);
            bk[TAGS] |= tag8_of(c->hash) << (8 * j);
            bk[META] |= 1u << j;
            c->slot = b * 8 + j;
            return;
        }
        bk[META] += OVER1; /* full: the key sits past it */
    }
    /* not reached: m keys never fill 6 * buckets >= 3 m slots */
}

/* Remove counter i (in the index) from the index. */
static void index_remove(sketch *s, uint32_t i)
{
    const ctr *c = &s->c[i];
    const uint32_t at = c->slot / 8, j = c->slot % 8;
    uint64_t *bk = bucket_of(s, at);
    bk[j] = 0;
    bk[TAGS] &= ~((uint64_t)0xff << (8 * j));
    bk[META] &= ~(uint64_t)(1u << j);
    for (uint32_t b = (uint32_t)c->hash & s->mask; b != at; b = (b + 1) & s->mask)
        bucket_of(s, b)[META] -= OVER1; /* it sat past this bucket */
}

/* Copy n key bytes: a key of 8 .. 16 bytes as two 8-byte moves (they may
 * overlap), so the common short key needs no call. */
static inline void copy_key(unsigned char *to, const unsigned char *from, uint32_t n)
{
    if (n >= 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, from, 8);
        memcpy(&b, from + n - 8, 8);
        memcpy(to, &a, 8);
        memcpy(to + n - 8, &b, 8);
    } else {
        memcpy(to, from, n);
    }
}

/* Count w refusals of (h, key, len) in s (under s's lock): the weighted
 * step of Space-Saving. */
static void note_w(const sluice__topk *k, sketch *s, uint64_t h, const void *key, uint32_t len,
                   uint64_t w)
{
    uint32_t *const ord = ord_of(k, s), *const end = end_of(k, s), *const fr = free_of(k, s);
    uint32_t i = lookup(k, s, h, key, len), e0 = 0;
    if (i == UINT32_MAX) { /* the last counter of the least run: free or the least */
        i = LD(&s->vic);
        ctr *c = &s->c[i];
        e0 = c->count < UINT64_MAX ? c->pos : 0; /* 0: no shortcut below */
        if (c->count > 0) index_remove(s, i);
        c->hash = h;
        c->len = len;
        c->err = c->count;
        copy_key(key_of(k, s, i), key, len & ~TRUNC_BIT);
        index_add(s, i);
    }
    if (e0 > 0 && w == 1) {
        /* raise_by's step, in short: i is the last of the least run, which
         * keeps places 0 .. e0 - 1; i stays at e0 and joins the run after
         * (of count + 1), or starts one */
        ctr *c = &s->c[i];
        const uint64_t t = c->count + 1;
        end[c->run] = e0 - 1;
        c->count = t;
        if (e0 + 1 < k->m && s->c[ord[e0 + 1]].count == t) {
            c->run = s->c[ord[e0 + 1]].run;
        } else {
            c->run = fr[--s->nfree];
            end[c->run] = e0;
        }
    } else if (s->c[i].count < UINT64_MAX) {
        raise_by(k, s, i, w); /* saturates: stays put */
    }
    /* The next new key's counter.  When this step took the counter at e0 > 0
     * (the last of the least run, which held places 0 .. e0, count below
     * UINT64_MAX), raise_by moved it to a place >= e0 and left the places
     * before e0 as they were: the least run is now 0 .. e0 - 1, and its last
     * counter is ord[e0 - 1], whose lines raise_by has just read.  (The one
     * case of a flood of new keys but once per run.)  Else look it up. */
    const uint32_t v = e0 > 0 ? ord[e0 - 1] : ord[end[s->c[ord[0]].run]];
    const uint32_t vp = s->c[v].pos;
    ST(&s->vic, v);
    ST(&s->vich, s->c[v].hash);
    ST(&s->vpos, vp);
    ST(&s->vrun, s->c[v].run);
    ST(&s->vnext, vp + 1 < k->m ? ord[vp + 1] : v);
    ST(&s->vprev, vp > 0 ? ord[vp - 1] : v);
}

static inline sketch *sketch_of(const sluice__topk *k, uint64_t h)
{
    return &k->s[k->bits ? h >> (64 - k->bits) : 0];
}

/* ---- the pending record of a thread ---------------------------------------- */

static inline pend *pend_of(const sluice__topk *k, unsigned stripe)
{
    return (pend *)(void *)((unsigned char *)k->pend + (size_t)stripe * k->pstride);
}

static inline uint64_t *pend_words(pend *p) { return (uint64_t *)(void *)(p + 1); }

/* The word w of a key of `stored` bytes, zero past its end. */
static inline uint64_t key_word(const unsigned char *key, uint32_t stored, uint32_t w)
{
    uint64_t v = 0;
    uint32_t at = w * 8, n = stored - at < 8 ? stored - at : 8;
    memcpy(&v, key + at, n);
    return v;
}

/* Whether the owner's record holds (h, key, len) (owner only: its own
 * stores, read back). */
static bool pend_holds(pend *p, uint64_t h, const unsigned char *key, uint32_t len)
{
    if (LD(&p->hash) != h ||
        LD(&p->len) != len)
        return false;
    const uint32_t stored = len & ~TRUNC_BIT;
    uint64_t *kw = pend_words(p);
    for (uint32_t w = 0; w * 8 < stored; w++)
        if (LD(&kw[w]) != key_word(key, stored, w))
            return false;
    return true;
}

/* A consistent copy of the record's key (hash, len, bytes into buf) and
 * its count and taken, read without writing (the owner may be running):
 * base/seqlock.h's protocol, with the owner as the only holder. */
static void pend_snapshot(pend *p, uint64_t *h, uint32_t *len, uint64_t *buf, uint64_t *count,
                          uint64_t *taken)
{
    uint64_t *kw = pend_words(p);
    for (unsigned n = 0;; n++) {
        const uint64_t v = sluice__seq_begin(&p->seq);
        if (v & 1) { /* the owner is rewriting it: a few stores */
            sluice__backoff(n);
            continue;
        }
        *h = __atomic_load_n(&p->hash, SLUICE__SEQ_LOAD);
        *len = __atomic_load_n(&p->len, SLUICE__SEQ_LOAD);
        uint32_t stored = *len & ~TRUNC_BIT;
        for (uint32_t w = 0; w * 8 < stored && w < SLUICE_TOP_KEY_MAX / 8; w++)
            buf[w] = __atomic_load_n(&kw[w], SLUICE__SEQ_LOAD);
        *count = __atomic_load_n(&p->count, SLUICE__SEQ_LOAD);
        *taken = LD(&p->taken);
        if (sluice__seq_valid(&p->seq, v)) return;
    }
}

/* The owner moves its record's refusals not yet in the sketch into it and
 * empties the record (count and taken 0: the key stays, for the next
 * refusal to match).  Under the key's sketch lock, as every store to taken. */
static void pend_flush(const sluice__topk *k, pend *p)
{
    const uint64_t h = LD(&p->hash);
    const uint32_t len = LD(&p->len);
    const uint32_t stored = len & ~TRUNC_BIT;
    uint64_t buf[SLUICE_TOP_KEY_MAX / 8];
    uint64_t *kw = pend_words(p);
    for (uint32_t w = 0; w * 8 < stored; w++)
        buf[w] = LD(&kw[w]);
    sketch *s = sketch_of(k, h);
    sluice__spin_lock(&s->mu);
    uint64_t c = LD(&p->count);
    uint64_t t = LD(&p->taken);
    if (c > t) note_w(k, s, h, buf, len, c - t);
    __atomic_store_n(&p->count, 0, SLUICE__SEQ_STORE);
    ST(&p->taken, 0);
    sluice__spin_unlock(&s->mu);
}

/* A reader moves another thread's pending refusals into the sketch: under
 * the sketch lock of the key it finds there, it adds count - taken and sets
 * taken = count (the owner never writes taken outside that lock, and never
 * changes its key without taking it first while count > 0).  A few tries:
 * a record whose key keeps changing holds only refusals made during the
 * read (each change moved the ones before into the sketch). */
static void pend_collect(const sluice__topk *k, pend *p)
{
    uint64_t buf[SLUICE_TOP_KEY_MAX / 8];
    for (int tries = 0; tries < 4; tries++) {
        uint64_t h, c, t;
        uint32_t len;
        pend_snapshot(p, &h, &len, buf, &c, &t);
        if (c <= t) return;
        sketch *s = sketch_of(k, h);
        sluice__spin_lock(&s->mu);
        pend_snapshot(p, &h, &len, buf, &c, &t); /* again, under the lock */
        bool mine = sketch_of(k, h) == s;
        if (mine && c > t) {
            note_w(k, s, h, buf, len, c - t);
            ST(&p->taken, c);
        }
        sluice__spin_unlock(&s->mu);
        if (mine) return;
    }
}

/* One refusal of (h, key, len) counted in its sketch at once, w = 1.  The
 * lines a new key's step reads (its index slot, the counter it takes, that
 * counter's key bytes and index slot) are prefetched before the lock's
 * locked instruction, which later loads would wait for: loads of words
 * that never change (index, mask, c) and of vic and vich, whose values
 * are only hints here. */
static void note_locked(const sluice__topk *k, uint64_t h, const void *key, uint32_t len)
{
    sketch *s = sketch_of(k, h);
    const uint32_t v = LD(&s->vic);
    __builtin_prefetch(bucket_of(s, (uint32_t)h & s->mask));
    __builtin_prefetch(bucket_of(s, (uint32_t)LD(&s->vich) & s->mask), 1);
    /* every hint is below m (only such are stored); a ctr may span two lines */
    const ctr *cv = &s->c[v], *cn = &s->c[LD(&s->vnext)], *cp = &s->c[LD(&s->vprev)];
    __builtin_prefetch(cv, 1);
    __builtin_prefetch(&cv->slot, 1);
    __builtin_prefetch(key_of(k, s, v), 1);
    __builtin_prefetch(&ord_of(k, s)[LD(&s->vpos)]);
    __builtin_prefetch(&end_of(k, s)[LD(&s->vrun)], 1);
    __builtin_prefetch(cn);
    __builtin_prefetch(&cn->slot);
    __builtin_prefetch(cp);
    __builtin_prefetch(&cp->slot);
    sluice__spin_lock(&s->mu);
    note_w(k, s, h, key, len, 1);
    sluice__spin_unlock(&s->mu);
}

void sluice__topk_note(sluice__topk *k, const void *key, size_t keylen, uint64_t h)
{
    uint32_t len = (uint32_t)keylen;
    if (keylen > k->maxb) { /* the prefix is the key: hashed apart */
        len = k->maxb | TRUNC_BIT;
        h = sluice__siphash13(k->seed, key, k->maxb) ^ TRUNC_MIX;
    }
    unsigned stripe = sluice__my_slot - 1; /* UINT_MAX until chosen */
    if (stripe >= SLUICE__STRIPES - 1) stripe = sluice__counter_stripe();
    if (stripe >= SLUICE__STRIPES - 1) { /* a thread without a record of its own */
        note_locked(k, h, key, len);
        return;
    }
    pend *p = pend_of(k, stripe);
    if (pend_holds(p, h, key, len)) { /* the record's key again: one store */
        const uint64_t c = LD(&p->count) + 1;
        __atomic_store_n(&p->count, c, SLUICE__SEQ_STORE);
        if (c - LD(&p->taken) >= PEND_MAX)
            pend_flush(k, p);
        return;
    }
    if (LD(&p->last) != h) { /* not the key refused just before: counted now */
        ST(&p->last, h);
        note_locked(k, h, key, len);
        return;
    }
    /* twice in a row: the key becomes the record's */
    if (LD(&p->count) > 0) pend_flush(k, p); /* even when all taken: to empty it under the lock */
    /* a new key: rewritten under the record's sequence (odd while it is) */
    const uint32_t stored = len & ~TRUNC_BIT;
    sluice__seq_hold(&p->seq); /* odd, then the fence: before the stores */
    __atomic_store_n(&p->hash, h, SLUICE__SEQ_STORE);
    __atomic_store_n(&p->len, len, SLUICE__SEQ_STORE);
    uint64_t *kw = pend_words(p);
    for (uint32_t w = 0; w * 8 < stored; w++)
        __atomic_store_n(&kw[w], key_word(key, stored, w), SLUICE__SEQ_STORE);
    sluice__seq_unhold(&p->seq);
    __atomic_store_n(&p->count, 1, SLUICE__SEQ_STORE);
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
    /* every thread's pending refusals first: the read counts every refusal
     * made before it */
    for (unsigned st = 0; st < SLUICE__STRIPES - 1; st++) pend_collect(k, pend_of(k, st));
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

