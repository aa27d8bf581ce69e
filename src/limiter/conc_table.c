/* conc_table.c -- a table of concurrency limits, one per key
 * (sluice_concurrency_table, sluice/concurrency.h).
 *
 * Each key has its own concurrency limit (concurrency.c), and an admission
 * returns that limit's handle, so a permit carries its table's key and is
 * released as any other, by sluice_permit_release_at -- without the table.
 *
 * Keys are held by their 16-byte digest (SipHash-2-4, 128-bit, under the
 * table's random seed: base/siphash.h), in a chained hash over at most
 * max_keys entries, all under one mutex (an acquire is a lookup and one
 * compare-and-swap; releases never take it).  An entry's limit is made on
 * its first use and kept until the table is freed, so a handle always
 * points at live memory.  A key holding permits (or with waiters, below)
 * is never dropped.  When all max_keys entries are in use, a new key takes the
 * entry of a key that holds nothing -- found by a scan from a rotating
 * cursor, at most max_keys entries -- and that limit's epoch moves on
 * (sluice__conc_reuse), so a stale handle of the earlier key changes
 * nothing there.  With none idle the new key is refused (res->error =
 * SLUICE_EFULL): never more than max_keys keys, never a key's permits lost.
 *
 * Waiting on a key (sluice_concurrency_table_acquire, blocking, and
 * _acquire_async_at, called back from a wheel) is waiting on the key's own
 * limit, in its one first-come-first-served queue (concurrency.c): the
 * table adds no queue of its own.  What it adds is the key's life: a key
 * with a waiter is not at rest, so its entry must not go to another key,
 * from the lookup under mu until the waiter leaves.  A blocking acquire
 * pins the entry under mu (`pins`, which the reuse scan skips) and unpins
 * it, under mu again, when it returns -- which covers the moment between
 * the lookup and its queueing on the limit, when the limit alone would
 * look idle.  A queued acquire is queued under mu, and the limit counts it
 * (`napend`, seen by sluice__conc_reuse) until its callback has been
 * called or it is cancelled.  A new key finding every entry held, pinned
 * or waited on is refused (SLUICE_EFULL) at once: room is not waited for.
 * Queued acquires get ids from one table-wide counter, so an id names its
 * key: a cancel with another key's name finds nothing.
 *
 * A change in place (sluice_concurrency_table_reconfigure_at) changes every
 * key's limit made so far, under the mutex (so no acquire runs), after the
 * memory each needs was taken for all: every key or none; keys made later
 * get the new spec.
 *
 * Entry points: sluice_concurrency_table_new, _free, _acquire_at,
 * _acquire, _acquire_async_at, _async_cancel_at, _waiting,
 * _held_at, _keys, _reconfigure_at, _limit, _held.
 */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"
#include "base/clock.h"
#include "base/siphash.h"
#include "limiter/concurrency.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define NIL UINT32_MAX

typedef struct centry {
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint32_t next; /* the hash chain */
    bool used;     /* holds a key now */
    uint32_t pins; /* blocking acquires in progress (sluice_concurrency_table_acquire) */
    sluice_concurrency *c; /* NULL until first used; kept */
} centry;

struct sluice_concurrency_table {
    pthread_mutex_t mu;
    sluice__conc_profile cp;   /* under mu */
    _Atomic uint64_t refs;     /* a rule set's references (sluice__ctab_ref) */
    uint64_t dseed[2];
    uint32_t max_keys, made, nkeys, cursor;
    uint32_t nb;      /* buckets, a power of two >= max_keys */
    uint64_t next_id; /* the last queued acquire's id */
    uint32_t *bucket; /* chain heads */
    centry *e;        /* max_keys */
};

sluice_concurrency_table *sluice_concurrency_table_new(const char *spec, size_t max_keys, char *err,
                                                       size_t errlen)
{
    sluice__conc_profile cp;
    if (sluice__conc_parse(spec, &cp, err, errlen) != 0) return NULL;
    if (max_keys < 1 || max_keys > (1u << 24)) {
        sluice__errf(err, errlen, "bad max_keys %zu: expected 1 .. 2^24", max_keys);
        return NULL;
    }
    sluice_concurrency_table *t = sluice__calloc(1, sizeof *t);
    uint32_t nb = 1;
    while (nb < max_keys) nb <<= 1;
    if (t) {
        t->bucket = sluice__calloc(nb, sizeof *t->bucket);
        t->e = sluice__calloc(max_keys, sizeof *t->e);
    }
    if (!t || !t->bucket || !t->e || pthread_mutex_init(&t->mu, NULL) != 0) {
        if (t) {
            sluice__free(t->bucket);
            sluice__free(t->e);
        }
        sluice__free(t);
        sluice__errf(err, errlen, "out of memory");
        return NULL;
    }
    memset(t->bucket, 0xff, (size_t)nb * sizeof *t->bucket); /* NIL */
    t->cp = cp;
    atomic_init(&t->refs, 1);
    t->max_keys = (uint32_t)max_keys;
    t->nb = nb;
    uint64_t seed[2];
    sluice__random_seed(seed);
    sluice__digest_seed(seed, t->dseed);
    return t;
}

void sluice_concurrency_table_free(sluice_concurrency_table *t)
{
    if (!t) return;
    for (uint32_t i = 0; i < t->made; i++) sluice_concurrency_free(t->e[i].c);
    pthread_mutex_destroy(&t->mu);
    sluice__free(t->bucket);
    sluice__free(t->e);
    sluice__free(t);
}

static uint32_t bucket_of(const sluice_concurrency_table *t, const unsigned char *dig)
{
    uint64_t h;
    memcpy(&h, dig, sizeof h);
    return (uint32_t)(h & (t->nb - 1));
}

static uint32_t find(const sluice_concurrency_table *t, const unsigned char *dig)
{
    uint32_t i = t->bucket[bucket_of(t, dig)];
    for (uint32_t k = 0; k < t->max_keys && i != NIL; k++, i = t->e[i].next)
        if (memcmp(t->e[i].dig, dig, sizeof t->e[i].dig) == 0) return i;
    return NIL;
}

static void unlink_key(sluice_concurrency_table *t, uint32_t i)
{
    uint32_t *pp = &t->bucket[bucket_of(t, t->e[i].dig)];
    for (uint32_t k = 0; k < t->max_keys && *pp != NIL; k++, pp = &t->e[*pp].next)
        if (*pp == i) {
            *pp = t->e[i].next;
            break;
        }
    t->e[i].used = false;
    t->nkeys--;
}

/* An entry for a new key: a never-used one, or the first idle key from
 * the cursor on (dropped).  NIL: every key holds permits.  Under mu. */
static uint32_t take_entry(sluice_concurrency_table *t, uint64_t now_ns)
{
    if (t->made < t->max_keys) {
        centry *x = &t->e[t->made];
        if (!x->c) {
            if (!(x->c = sluice__conc_make(&t->cp))) return NIL - 1; /* no memory */
            sluice__conc_set_home(x->c, t);
        }
        return t->made++;
    }
    for (uint32_t k = 0; k < t->max_keys; k++) {
        uint32_t i = t->cursor;
        t->cursor = (t->cursor + 1) % t->max_keys;
        if (!t->e[i].used) return i; /* dropped before: fresh already */
        if (t->e[i].pins == 0 && sluice__conc_reuse(t->e[i].c, now_ns)) {
            unlink_key(t, i);
            return i;
        }
    }
    return NIL;
}

/* The entry of key `dig`, made for it if new: its index, or NIL (the
 * table is full of keys not at rest) or NIL - 1 (no memory).  Under mu. */
static uint32_t lookup(sluice_concurrency_table *t, const unsigned char *dig, uint64_t now_ns)
{
    uint32_t i = find(t, dig);
    if (i != NIL) return i;
    i = take_entry(t, now_ns);
    if (i >= NIL - 1) return i;
    centry *x = &t->e[i];
    memcpy(x->dig, dig, sizeof x->dig);
    x->used = true;
    uint32_t b = bucket_of(t, dig);
    x->next = t->bucket[b];
    t->bucket[b] = i;
    t->nkeys++;
    return i;
}

/* The key's digest into dig; false, with nothing done, when the table or
 * the key is not one (NULL, or NULL bytes of a non-zero length).  Every
 * call on a key starts here. */
static bool key_digest(const sluice_concurrency_table *t, const void *key, size_t keylen,
                       unsigned char dig[SLUICE__DIGEST_BYTES])
{
    if (!t || (!key && keylen)) return false;
    sluice__key_digest(t->dseed, key ? key : "", keylen, dig);
    return true;
}

bool sluice_concurrency_table_acquire_at(sluice_concurrency_table *t, const void *key, size_t keylen,
                                         uint64_t permits, uint64_t now_ns, sluice_permit *pm,
                                         sluice_result *res)
{
    sluice_result tmp;
    if (!res) res = &tmp;
    if (pm) *pm = (sluice_permit){0};
    unsigned char dig[SLUICE__DIGEST_BYTES];
    if (!pm || !key_digest(t, key, keylen, dig)) return sluice__fail(res, SLUICE_EINVAL);
    pthread_mutex_lock(&t->mu);
    if (permits == 0 && find(t, dig) == NIL) { /* a probe of a key not held: a fresh limit */
        pthread_mutex_unlock(&t->mu);
        return sluice__allow(res, t->cp.limit, 0);
    }
    uint32_t i = lookup(t, dig, now_ns);
    if (i >= NIL - 1) {
        pthread_mutex_unlock(&t->mu);
        return sluice__fail(res, i == NIL ? SLUICE_EFULL : SLUICE_ENOMEM);
    }
    bool ok = sluice_acquire_permit_at(t->e[i].c, permits, now_ns, pm, res);
    pthread_mutex_unlock(&t->mu);
    return ok;
}

int sluice_concurrency_table_acquire(sluice_concurrency_table *t, const void *key, size_t keylen,
                                     uint64_t permits, uint64_t timeout_ns, sluice_permit *pm,
                                     sluice_result *res)
{
    sluice_result tmp;
    if (!res) res = &tmp;
    if (pm) *pm = (sluice_permit){0};
    unsigned char dig[SLUICE__DIGEST_BYTES];
    if (!pm || permits == 0 || !key_digest(t, key, keylen, dig)) {
        sluice__fail(res, SLUICE_EINVAL);
        return SLUICE_EINVAL;
    }
    uint64_t now = sluice__clock_read(CLOCK_MONOTONIC);
    pthread_mutex_lock(&t->mu);
    int rc = permits > t->cp.limit ? SLUICE_EINVAL : 0;
    uint32_t i = rc ? NIL : lookup(t, dig, now);
    if (rc == 0 && i >= NIL - 1) rc = i == NIL ? SLUICE_EFULL : SLUICE_ENOMEM;
    if (rc) {
        pthread_mutex_unlock(&t->mu);
        sluice__fail(res, rc);
        return rc;
    }
    /* pinned: the key keeps its entry until this call returns, also in the
     * moment before it queues on the limit (sluice__conc_reuse sees its
     * waiter only once it has) */
    t->e[i].pins++;
    sluice_concurrency *c = t->e[i].c;
    pthread_mutex_unlock(&t->mu);
    rc = sluice_acquire_permit(c, permits, timeout_ns, pm);
    pthread_mutex_lock(&t->mu);
    t->e[i].pins--;
    pthread_mutex_unlock(&t->mu);
    if (rc != 0) {
        sluice__fail(res, rc);
        return rc;
    }
    uint64_t N = sluice_concurrency_limit(c), h = sluice_concurrency_held(c);
    sluice__allow(res, h >= N ? 0 : N - h, 0);
    return 0;
}

int sluice_concurrency_table_acquire_async_at(sluice_concurrency_table *t, sluice_wheel *wh,
                                              const void *key, size_t keylen, uint64_t permits,
                                              uint64_t now_ns, uint64_t deadline_ns,
                                              sluice_permit_fn fn, void *arg, uint64_t *id)
{
    unsigned char dig[SLUICE__DIGEST_BYTES];
    if (!wh || !fn || permits == 0 || !key_digest(t, key, keylen, dig)) return SLUICE_EINVAL;
    pthread_mutex_lock(&t->mu);
    int rc = permits > t->cp.limit ? SLUICE_ERANGE : 0;
    uint32_t i = rc ? NIL : lookup(t, dig, now_ns);
    if (rc == 0 && i >= NIL - 1) rc = i == NIL ? SLUICE_EFULL : SLUICE_ENOMEM;
    if (rc == 0) {
        /* queued under mu: no reuse scan runs before the limit counts the
         * request (sluice__conc_reuse), and it counts it until called back */
        uint64_t rid = t->next_id + 1;
        rc = sluice__conc_async_id_at(t->e[i].c, wh, permits, now_ns, deadline_ns, fn, arg, rid);
        if (rc == 0) {
            t->next_id = rid;
            if (id) *id = rid;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int sluice_concurrency_table_async_cancel_at(sluice_concurrency_table *t, const void *key,
                                             size_t keylen, uint64_t id, uint64_t now_ns)
{
    unsigned char dig[SLUICE__DIGEST_BYTES];
    if (!key_digest(t, key, keylen, dig)) return SLUICE_EINVAL;
    pthread_mutex_lock(&t->mu);
    uint32_t i = find(t, dig);
    /* ids are unique within the table: another key's id matches nothing here */
    int rc = i == NIL || id == 0 ? SLUICE_ENOENT
                                 : sluice_permit_async_cancel_at(t->e[i].c, id, now_ns);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

uint32_t sluice_concurrency_table_waiting(sluice_concurrency_table *t, const void *key,
                                          size_t keylen)
{
    unsigned char dig[SLUICE__DIGEST_BYTES];
    if (!key_digest(t, key, keylen, dig)) return 0;
    pthread_mutex_lock(&t->mu);
    uint32_t i = find(t, dig);
    uint32_t n = i == NIL ? 0 : sluice_concurrency_waiting(t->e[i].c);
    pthread_mutex_unlock(&t->mu);
    return n;
}

uint64_t sluice_concurrency_table_held_at(sluice_concurrency_table *t, const void *key,
                                          size_t keylen, uint64_t now_ns)
{
    unsigned char dig[SLUICE__DIGEST_BYTES];
    if (!key_digest(t, key, keylen, dig)) return 0;
    pthread_mutex_lock(&t->mu);
    uint32_t i = find(t, dig);
    uint64_t h = i == NIL ? 0 : sluice_concurrency_held_at(t->e[i].c, now_ns);
    pthread_mutex_unlock(&t->mu);
    return h;
}

size_t sluice_concurrency_table_keys(sluice_concurrency_table *t)
{
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    size_t n = t->nkeys;
    pthread_mutex_unlock(&t->mu);
    return n;
}

int sluice_concurrency_table_reconfigure_at(sluice_concurrency_table *t, const char *spec,
                                            uint64_t now_ns, char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    if (!t) {
        sluice__errf(err, errlen, "no table");
        return SLUICE_EINVAL;
    }
    sluice__conc_profile cp;
    int rc = sluice__conc_parse(spec, &cp, err, errlen);
    if (rc != 0) return rc;
    pthread_mutex_lock(&t->mu);
    if ((cp.lease_ns != 0) != (t->cp.lease_ns != 0)) {
        pthread_mutex_unlock(&t->mu);
        sluice__errf(err, errlen, "a lease cannot be %s in place (a leased limit keeps a book of "
                     "its handles): make a new table", cp.lease_ns ? "added" : "removed");
        return SLUICE_EINVAL;
    }
    /* every key's limit or none: what can fail (memory for larger books)
     * is done for all first */
    sluice__leases one, *spare = &one;
    if (cp.lease_ns && t->made > 1 && !(spare = sluice__calloc(t->made, sizeof *spare))) rc = SLUICE_ENOMEM;
    uint32_t k = 0;
    for (; rc == 0 && k < t->made; k++)
        rc = sluice__conc_prepare(t->e[k].c, &cp, cp.lease_ns ? &spare[k] : &one, err, errlen);
    if (rc == 0) {
        for (uint32_t i = 0; i < t->made; i++)
            sluice__conc_apply(t->e[i].c, &cp, cp.lease_ns ? &spare[i] : &one, now_ns);
        t->cp = cp;
    } else {
        for (uint32_t i = 0; cp.lease_ns && spare && i + 1 < k; i++) sluice__leases_fini(&spare[i]);
        sluice__errf(err, errlen, "out of memory");
    }
    pthread_mutex_unlock(&t->mu);
    if (spare != &one) sluice__free(spare);
    return rc;
}

uint64_t sluice_concurrency_table_limit(sluice_concurrency_table *t)
{
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    uint64_t n = t->cp.limit;
    pthread_mutex_unlock(&t->mu);
    return n;
}

uint64_t sluice_concurrency_table_held(sluice_concurrency_table *t)
{
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    uint64_t h = 0;
    for (uint32_t i = 0; i < t->made; i++)
        if (t->e[i].used) h += sluice_concurrency_held(t->e[i].c);
    pthread_mutex_unlock(&t->mu);
    return h;
}

void sluice__ctab_ref(sluice_concurrency_table *t) { atomic_fetch_add(&t->refs, 1); }

void sluice__ctab_unref(sluice_concurrency_table *t)
{
    if (atomic_fetch_sub(&t->refs, 1) == 1) sluice_concurrency_table_free(t);
}
