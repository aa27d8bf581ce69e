/* table.c -- one limiter per key, in bounded memory.
 *
 * Layout: a chained hash table of entries {hash, key, state} over one shared
 * profile (the parsed spec), so a key costs its state plus its key bytes,
 * not a whole limiter.  Keys are any bytes, 0 .. SLUICE_MAX_KEY_BYTES long.
 *
 * Bounded memory: at most max_keys entries exist.  Each entry's "rest time"
 * (sluice__rest_at: when its limiter is back at rest with no more traffic)
 * is kept in a binary min-heap.  When a new key arrives and the table is
 * full, the entry with the earliest rest time is dropped if that time has
 * come (its limiter is at rest: dropping it changes no decision); if not,
 * every held key is in use and the new key is refused (SLUICE_EFULL, with
 * retry_after_ns = when the first held key comes to rest).  Refusing never
 * admits more than the contract would.
 *
 * Time: the table's clock for reclaiming is the latest time any request has
 * shown it.  A key dropped at rest loses its own latest time; a later
 * request for that key with an older time than the one it had seen starts
 * a fresh limiter at the older time.  This only matters to callers whose
 * times run backwards across a reclamation.
 *
 * Concurrency, in this version: one mutex around lookup and decision.
 * The hash is seeded FNV-1a; a keyed hash against flooding comes with the
 * sharded table.
 */
#include "internal.h"

#include <pthread.h>
#include <string.h>

typedef struct entry {
    struct entry *next; /* hash chain */
    uint64_t hash;
    uint64_t rest_at;   /* heap key */
    uint32_t heap_i;    /* index in the heap */
    uint32_t keylen;
    sluice__state st;
    unsigned char key[]; /* keylen bytes */
} entry;

struct sluice_table {
    sluice__profile pf;
    pthread_mutex_t mu;
    size_t max_keys;
    size_t count;
    size_t nbuckets; /* a power of two */
    entry **buckets;
    entry **heap;    /* count entries, min rest_at first; capacity heap_cap */
    size_t heap_cap;
    uint64_t seed;
    uint64_t t_max;  /* latest time any request showed */
    uint64_t reclaimed, refused;
    sluice__counters counters;
};

static uint64_t hash_key(uint64_t seed, const unsigned char *k, size_t n)
{
    uint64_t h = 14695981039346656037ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= k[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 29; /* spread the low bits used for the bucket index */
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 32);
}

/* ---- heap of rest times ------------------------------------------------- */

static void heap_set(sluice_table *t, size_t i, entry *e)
{
    t->heap[i] = e;
    e->heap_i = (uint32_t)i;
}

static void heap_up(sluice_table *t, size_t i)
{
    entry *e = t->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (t->heap[parent]->rest_at <= e->rest_at) break;
        heap_set(t, i, t->heap[parent]);
        i = parent;
    }
    heap_set(t, i, e);
}

static void heap_down(sluice_table *t, size_t i)
{
    entry *e = t->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= t->count) break;
        if (c + 1 < t->count && t->heap[c + 1]->rest_at < t->heap[c]->rest_at) c++;
        if (e->rest_at <= t->heap[c]->rest_at) break;
        heap_set(t, i, t->heap[c]);
        i = c;
    }
    heap_set(t, i, e);
}

static void heap_fix(sluice_table *t, entry *e)
{
    heap_up(t, e->heap_i);
    heap_down(t, e->heap_i);
}

/* ---- construction ------------------------------------------------------- */

sluice_table *sluice_table_new(const char *spec, size_t max_keys, char *err,
                               size_t errlen)
{
    sluice__profile pf;
    if (sluice__spec_parse(spec, &pf, err, errlen) != 0) return NULL;
    if (max_keys < 1 || max_keys > ((size_t)1 << 32)) {
        sluice__errf(err, errlen, "bad max_keys %zu: expected 1 .. 2^32", max_keys);
        return NULL;
    }
    sluice_table *t = sluice__calloc(1, sizeof *t);
    if (!t) goto oom;
    t->pf = pf;
    t->max_keys = max_keys;
    t->nbuckets = 16;
    t->buckets = sluice__calloc(t->nbuckets, sizeof *t->buckets);
    t->heap_cap = 16;
    t->heap = sluice__calloc(t->heap_cap, sizeof *t->heap);
    if (!t->buckets || !t->heap) goto oom;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        sluice__free(t->buckets);
        sluice__free(t->heap);
        sluice__free(t);
        sluice__errf(err, errlen, "cannot create a mutex");
        return NULL;
    }
    t->seed = (uint64_t)(uintptr_t)t ^ sluice_now_ns();
    return t;
oom:
    if (t) {
        sluice__free(t->buckets);
        sluice__free(t->heap);
        sluice__free(t);
    }
    sluice__errf(err, errlen, "out of memory");
    return NULL;
}

static void entry_free(sluice_table *t, entry *e)
{
    sluice__state_fini(&t->pf, &e->st);
    sluice__free(e);
}

void sluice_table_free(sluice_table *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->count; i++) entry_free(t, t->heap[i]);
    sluice__free(t->buckets);
    sluice__free(t->heap);
    pthread_mutex_destroy(&t->mu);
    sluice__free(t);
}

/* ---- lookup, insert, reclaim -------------------------------------------- */

static entry **find(sluice_table *t, uint64_t h, const void *key, size_t keylen)
{
    entry **pp = &t->buckets[h & (t->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next) {
        entry *e = *pp;
        if (e->hash == h && e->keylen == keylen &&
            (keylen == 0 || memcmp(e->key, key, keylen) == 0))
            return pp;
    }
    return pp;
}

/* Double the bucket array; on failure keep the old one (chains get longer,
 * nothing is lost). */
static void rehash(sluice_table *t)
{
    size_t n = t->nbuckets * 2;
    entry **b = sluice__calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < t->nbuckets; i++) {
        entry *e = t->buckets[i];
        while (e) {
            entry *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    sluice__free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

/* Remove the heap's root (the earliest rest time) from the table. */
static void drop_root(sluice_table *t)
{
    entry *e = t->heap[0];
    entry **pp = find(t, e->hash, e->key, e->keylen);
    *pp = e->next;
    t->count--;
    if (t->count) {
        heap_set(t, 0, t->heap[t->count]);
        heap_down(t, 0);
    }
    entry_free(t, e);
    t->reclaimed++;
}

/* A new entry for key, linked at *slot, or NULL with last_error set. */
static entry *insert(sluice_table *t, entry **slot, uint64_t h, const void *key,
                     size_t keylen, uint64_t now, sluice_result *res)
{
    if (t->count == t->max_keys) {
        entry *oldest = t->heap[0];
        if (oldest->rest_at > now) {
            t->refused++;
            sluice__set_error(SLUICE_EFULL);
            uint64_t d = oldest->rest_at - now;
            sluice__deny(res, 0, d > INT64_MAX ? INT64_MAX : (int64_t)d);
            return NULL;
        }
        drop_root(t);
        slot = find(t, h, key, keylen); /* the chain may have changed */
    }
    if (t->count == t->heap_cap) {
        size_t cap = t->heap_cap * 2;
        entry **hp = sluice__realloc(t->heap, t->heap_cap * sizeof *hp, cap * sizeof *hp);
        if (!hp) goto oom;
        t->heap = hp;
        t->heap_cap = cap;
    }
    entry *e = sluice__malloc(sizeof *e + keylen);
    if (!e) goto oom;
    memset(e, 0, sizeof *e);
    e->hash = h;
    e->keylen = (uint32_t)keylen;
    if (keylen) memcpy(e->key, key, keylen);
    sluice__state_init(&t->pf, &e->st);
    e->next = NULL;
    *slot = e;
    e->rest_at = 0; /* sifted to its place after the decision */
    t->heap[t->count] = e;
    t->count++;
    heap_up(t, t->count - 1);
    if (t->count > t->nbuckets) rehash(t);
    return e;
oom:
    sluice__set_error(SLUICE_ENOMEM);
    sluice__deny(res, 0, -1);
    return NULL;
}

bool sluice_table_try_acquire_at(sluice_table *t, const void *key, size_t keylen,
                                 uint64_t permits, uint64_t now_ns,
                                 sluice_result *res)
{
    sluice_result scratch;
    if (!res) res = &scratch;
    if (keylen > SLUICE_MAX_KEY_BYTES || (!key && keylen)) {
        sluice__set_error(SLUICE_EINVAL);
        sluice__deny(res, 0, -1);
        sluice__count(&t->counters, permits, false);
        return false;
    }
    sluice__set_error(0);
    uint64_t h = hash_key(t->seed, key, keylen);
    pthread_mutex_lock(&t->mu);
    if (now_ns > t->t_max) t->t_max = now_ns;
    entry **slot = find(t, h, key, keylen);
    entry *e = *slot;
    bool ok = false;
    if (!e) e = insert(t, slot, h, key, keylen, t->t_max, res);
    if (e) {
        ok = sluice__decide(&t->pf, &e->st, now_ns, permits, UINT64_MAX, res);
        uint64_t r = sluice__rest_at(&t->pf, &e->st);
        if (r != e->rest_at) {
            e->rest_at = r;
            heap_fix(t, e);
        }
    }
    pthread_mutex_unlock(&t->mu);
    sluice__count(&t->counters, permits, ok);
    return ok;
}

void sluice_table_stats_get(const sluice_table *t, sluice_table_stats *out)
{
    sluice_table *m = (sluice_table *)t;
    pthread_mutex_lock(&m->mu);
    out->keys = m->count;
    out->reclaimed = m->reclaimed;
    out->refused = m->refused;
    pthread_mutex_unlock(&m->mu);
    sluice__counters_read(&t->counters, &out->decisions);
}
