/* table_keys.c -- key operations of the in-process table: remove, reset,
 * peek and scan (table.c has the overview).
 *
 * Map:  lock_find; remove (sluice_table_remove, sluice_table_reset);
 *       peek (peek_at, sluice_table_peek_at: read as decide_read reads,
 *       else under the lock); scan (scan_counted, sluice_table_scan: a
 *       bounded step per call, in the order of the keys' hashes, so a
 *       cursor survives moves of the Robin Hood runs).
 */
#include "table/inproc.h"

/* ---- key operations: remove, reset, peek, scan -------------------------- */

/* Lock the shard of key and find its entry: returns the key's slot, or
 * UINT32_MAX when the key is not held (the shard stays locked either way). */
static uint32_t lock_find(sluice_table *t, const void *key, size_t keylen, shard **sp)
{
    if (!key) key = ""; /* keylen is 0 */
    const uint64_t h = key_hash(t, key, keylen);
    shard *s = shard_for(t, h);
    sluice__spin_lock(&s->mu);
    *sp = s;
    return find(t, s, h, key, keylen);
}

static int table_remove(sluice_table *t, const void *key, size_t keylen)
{
    if (!t || !key_ok(key, keylen)) return SLUICE_EINVAL;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    shard *s;
    uint32_t i = lock_find(t, key, keylen, &s);
    if (i != UINT32_MAX) {
        sluice__inproc_drop_entry(t, s, i); /* out of the wheel and the probe array, place freed */
        sluice__inproc_publish_due(s);
    }
    sluice__spin_unlock(&s->mu);
    return i == UINT32_MAX ? SLUICE_ENOENT : 0;
}

int sluice_table_remove(sluice_table *t, const void *key, size_t keylen)
{
    return (t ? t->ops : &sluice__inproc_ops)->remove(t ? t->place : NULL, key, keylen);
}

int sluice__inproc_local_remove(void *place, const void *key, size_t keylen)
{
    sluice_table *t = place;
    rd_tls *rd = rd_enter(); /* the reclaiming wheel's upkeep reads configurations */
    const int rc = table_remove(t, key, keylen);
    rd_exit(rd);
    return rc;
}

int sluice_table_reset(sluice_table *t, const void *key, size_t keylen)
{
    int rc = sluice_table_remove(t, key, keylen);
    return rc == SLUICE_ENOENT ? 0 : rc; /* a key not held is at rest already */
}

/* What entry i holds, for the caller (shard locked): under the
 * configuration that applies to it (rest_of). */
static void key_state_of(sluice_table *t, shard *s, uint32_t i, sluice_key_state *out)
{
    out->rest_ns = sluice__inproc_rest_of(t, s, i);
    out->last_ns = sluice__inproc_ent_t_last(t, ent(t, s, i));
    out->flags = META_LEN(ent(t, s, i)->meta) == DIGEST_LEN ? SLUICE_KEY_DIGEST : 0;
}

int sluice__inproc_peek_at(sluice_table *t, const void *key, size_t keylen, uint64_t permits,
                   uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    if (!t || !key_ok(key, keylen)) {
        if (res) sluice__fail(res, SLUICE_EINVAL);
        if (state) memset(state, 0, sizeof *state);
        return SLUICE_EINVAL;
    }
    sluice_result r = {0};
    sluice__state fresh, tmp;
    shard *s;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    if (readable(t, keylen)) { /* a probe: read as decide_read reads */
        if (!key) key = "";
        const uint64_t h = key_hash(t, key, keylen);
        s = shard_for(t, h);
        ekey k;
        pad_key(&k, key, keylen);
        for (unsigned n = 0; n < READ_TRIES; n++) {
            const uint64_t v = sluice__spin_read_begin(&s->mu);
            if (v & 1) {
                sluice__backoff(n);
                continue;
            }
            const uint32_t at = read_find(t, s, h, &k, keylen);
            if (at == RUN_TORN) continue;
            const tcfg *c = read_cfg(t, s, at);
            if (!c) break; /* the lock's */
            if (at == UINT32_MAX) sluice__state_init(&c->pf, &fresh);
            else if (!read_state(t, &c->pf, s, at, &fresh)) continue;
            sluice__judge(&c->pf, &fresh, &tmp, now_ns, permits, &r);
            if (!sluice__spin_read_valid(&s->mu, v)) continue;
            if (state && at != UINT32_MAX) {
                state->last_ns = fresh.t_last;
                state->rest_ns = sluice__rest_at(&c->pf, &fresh);
            } else if (state) {
                memset(state, 0, sizeof *state);
            }
            if (res) *res = r;
            return at == UINT32_MAX ? SLUICE_ENOENT : 0;
        }
    }
    uint32_t i = lock_find(t, key, keylen, &s);
    if (i == UINT32_MAX) {
        const void *k = key ? key : "";
        const tcfg *c = s->novr ? sluice__inproc_key_cfg(t, s, (uint32_t)key_hash(t, k, keylen), k,
                                          keylen)
                                : cur_cfg(t);
        sluice__spin_unlock(&s->mu);
        /* what a fresh limiter would answer: decided on a fresh state of
         * our own, which nothing stores */
        sluice__state_init(&c->pf, &fresh);
        sluice__judge(&c->pf, &fresh, &tmp, now_ns, permits, &r);
        if (state) memset(state, 0, sizeof *state);
        if (res) *res = r;
        return SLUICE_ENOENT;
    }
    entry *e = ent(t, s, i);
    sluice__state held;
    const sluice__state *st = &held;
    /* the changes it missed are carried over first (what its next decision
     * would do; nothing else changes) */
    const tcfg *c = sluice__inproc_ent_cfg(t, s, i);
    if (!c) {
        sluice__spin_unlock(&s->mu);
        if (res) sluice__fail(res, SLUICE_ENOMEM);
        if (state) memset(state, 0, sizeof *state);
        return SLUICE_ENOMEM;
    }
    if (t->pf.packed) load_state(t, &c->pf, e, &held);
    else st = ent_state(e);
    /* judged without writing: on a copy, or in place by the window logs'
     * judge, which only reads their ring */
    sluice__judge(&c->pf, st, &tmp, now_ns, permits, &r);
    if (state) key_state_of(t, s, i, state);
    sluice__spin_unlock(&s->mu);
    if (res) *res = r;
    return 0;
}

int sluice_table_peek_at(sluice_table *t, const void *key, size_t keylen, uint64_t permits,
                         uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    return (t ? t->ops : &sluice__inproc_ops)->peek_at(t ? t->place : NULL, key, keylen, permits, now_ns, res,
                                              state);
}

int sluice__inproc_local_peek_at(void *place, const void *key, size_t keylen, uint64_t permits,
                         uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    sluice_table *t = place;
    rd_tls *rd = rd_enter(); /* configurations read, also after the unlock */
    const int rc = sluice__inproc_peek_at(t, key, keylen, permits, now_ns, res, state);
    rd_exit(rd);
    return rc;
}

/* The scan.  Its cursor is a point in the scan's order of keys: a
 * permutation of the bits of the key's hash -- its shard (the top bits),
 * then its tag (the low 32 bits, which fix its home slot: home_of is
 * non-decreasing in the tag), then the hash's middle bits (scan_order).  A
 * call gives the keys of order >= the cursor in increasing order, a home
 * slot at a time: under the shard's lock it copies the keys whose home is
 * that slot (all of one run, Robin Hood order keeps them together) and
 * whose order is >= the cursor, unlocks, sorts them, and gives them; the
 * cursor becomes the order after the last one given, or the smallest order
 * of the next home slot.  0 both starts and ends a scan.
 *
 * Why a key held for the whole scan is given (entries move -- a Robin Hood
 * insertion moves a run's tail a slot on, a removal moves it a slot back --
 * so no slot number can be a cursor; a key's hash never changes):
 *  1. The cursor only grows, from 0 to the end (or wraps to 0 past the
 *     largest order, which ends the scan), and it passes order x only
 *     (a) by giving a key of order x, or (b) by a look, under its shard's
 *     lock, at the home slot of every key of order x (moving to the next
 *     home, or passing up to EMPTY_RUN empty slots -- an empty slot is a home
 *     of no key: a key lies at its home or past it, every slot between held),
 *     or (c) by passing an empty shard, seen so under its lock.
 *  2. So when the cursor passes a key's order during the scan, while the key
 *     is held: (a) gives it; (b) finds it in its home's run and copies it,
 *     to give it in order -- the cursor moves past it only once it is given
 *     (a callback that stops, or the call's budget, leaves the cursor on
 *     the next key not given); (c) cannot happen.
 * A key is given at most once per time it was made: once given, the cursor
 * is past its order.  Two keys of one table with equal 64-bit hashes are
 * the one exception: the second is skipped when a call ends between them
 * (a chance of about n^2 / 2^65 for n keys that such a pair exists at all).
 * The work of a call is at most `count` places; the callback runs unlocked,
 * on copies (on the stack up to SCAN_INLINE bytes of keys and SCAN_KEYS
 * keys, else in buffers made with the shard unlocked, after which the home
 * is looked at again). */
#define SCAN_INLINE 256 /* key bytes copied to the stack */
#define SCAN_KEYS 16    /* keys of one home slot copied to the stack */
#define EMPTY_RUN 256   /* empty slots passed over as one place */

/* A key's place in the scan's order (hash h). */
static inline uint64_t scan_order(const sluice_table *t, uint64_t h)
{
    const unsigned sb = t->shard_bits;
    return (h & ~(UINT64_MAX >> sb)) | (h & 0xffffffffu) << (32 - sb) |
           ((h >> 32) & ((UINT64_C(1) << (32 - sb)) - 1));
}

/* The smallest order of shard k's home slot `home` (home <= cap; cap: the
 * next shard's first order, 0 past the last shard). */
static uint64_t home_order(const sluice_table *t, unsigned k, const shard *s, uint32_t home)
{
    const unsigned sb = t->shard_bits;
    if (home >= s->cap)
        return k + 1 >= t->nshards ? 0 : (uint64_t)(k + 1) << (64 - sb);
    const uint64_t tag = (((uint64_t)home << 32) + s->cap - 1) / s->cap; /* < 2^32 */
    return (sb ? (uint64_t)k << (64 - sb) : 0) | tag << (32 - sb);
}

typedef struct scan_key {
    uint64_t order;
    size_t off, len; /* in the key buffer */
    sluice_key_state ks;
} scan_key;

static int scan_counted(sluice_table *t, uint64_t cursor, size_t count,
                        sluice_table_scan_fn fn, void *arg, uint64_t *next_cursor,
                        size_t *visited)
{
    if (visited) *visited = 0;
    if (!t || !fn || !next_cursor || count == 0) return SLUICE_EINVAL;
    const unsigned sb = t->shard_bits;
    unsigned char stackbuf[SCAN_INLINE];
    scan_key stackkeys[SCAN_KEYS];
    unsigned char *buf = stackbuf;
    scan_key *keys = stackkeys;
    size_t bufcap = sizeof stackbuf, keycap = SCAN_KEYS, work = 0;
    uint64_t c = cursor;
    bool done = false;
    int rc = 0;
    while (!done && work < count && rc == 0) {
        const unsigned k = sb ? (unsigned)(c >> (64 - sb)) : 0;
        shard *s = &t->shards[k];
        sluice__spin_lock(&s->mu);
        if (s->count == 0) { /* nothing held: the shard is one place */
            sluice__spin_unlock(&s->mu);
            work++;
            c = home_order(t, k, s, s->cap);
            done = c == 0;
            continue;
        }
        const uint32_t home = home_of(s, (uint32_t)(c >> (32 - sb)));
        if (!META_CODE(ent(t, s, home)->meta)) { /* empty slots: homes of no key */
            uint32_t h2 = home;
            while (h2 < s->cap && h2 - home < EMPTY_RUN && !META_CODE(ent(t, s, h2)->meta)) h2++;
            sluice__spin_unlock(&s->mu);
            work++;
            c = home_order(t, k, s, h2);
            done = c == 0;
            continue;
        }
        size_t n = 0, used = 0, need_keys = 0, need_bytes = 0;
        for (uint32_t o = 0, j = home;; o++) { /* the run's keys of this home */
            entry *e = ent(t, s, j);
            if (!META_CODE(e->meta)) break;
            const uint32_t d = slot_dist(t, s, j);
            if (d < o) break; /* a later home's */
            if (d == o) {
                const uint64_t ord = scan_order(t, ent_hash(t, e));
                const size_t len = key_bytes(META_LEN(e->meta)); /* a digest's 16 */
                if (ord >= c) {
                    need_keys++;
                    need_bytes += len;
                    if (n < keycap && used + len <= bufcap) {
                        memcpy(buf + used, len > INLINE_KEY ? e->key.far.ext : e->key.in, len);
                        keys[n] = (scan_key){.order = ord, .off = used, .len = len};
                        key_state_of(t, s, j, &keys[n].ks);
                        used += len;
                        n++;
                    }
                }
            }
            if (++j == s->cap) j = 0;
        }
        sluice__spin_unlock(&s->mu);
        if (n < need_keys) { /* bigger buffers, made unlocked; then look again */
            unsigned char *nb = need_bytes > bufcap ? sluice__malloc(need_bytes) : NULL;
            scan_key *nk = need_keys > keycap ? sluice__calloc(need_keys, sizeof *nk) : NULL;
            if ((need_bytes > bufcap && !nb) || (need_keys > keycap && !nk)) {
                sluice__free(nb);
                sluice__free(nk);
                rc = SLUICE_ENOMEM;
                break;
            }
            if (nb) {
                if (buf != stackbuf) sluice__free(buf);
                buf = nb;
                bufcap = need_bytes;
            }
            if (nk) {
                if (keys != stackkeys) sluice__free(keys);
                keys = nk;
                keycap = need_keys;
            }
            continue;
        }
        for (size_t a = 1; a < n; a++) /* in order (a handful: insertion sort) */
            for (size_t b = a; b > 0 && keys[b - 1].order > keys[b].order; b--) {
                const scan_key x = keys[b];
                keys[b] = keys[b - 1];
                keys[b - 1] = x;
            }
        size_t i = 0;
        if (n == 0) work++; /* a home whose keys were all given before */
        for (; i < n && work < count && rc == 0; i++) {
            work++;
            c = keys[i].order + 1; /* past the largest: 0, the end */
            done = c == 0;
            rc = fn(buf + keys[i].off, keys[i].len, &keys[i].ks, arg); /* no lock held */
        }
        if (i == n && rc == 0 && !done) { /* the home is done: the next one */
            c = home_order(t, k, s, home + 1);
            done = c == 0;
        }
    }
    if (buf != stackbuf) sluice__free(buf);
    if (keys != stackkeys) sluice__free(keys);
    *next_cursor = done ? 0 : c;
    if (visited) *visited = work;
    return rc;
}

int sluice__table_scan_counted(sluice_table *t, uint64_t cursor, size_t count,
                               sluice_table_scan_fn fn, void *arg, uint64_t *next_cursor,
                               size_t *visited)
{
    return (t ? t->ops : &sluice__inproc_ops)->scan(t ? t->place : NULL, cursor, count, fn, arg, next_cursor,
                                           visited);
}

int sluice__inproc_local_scan(void *place, uint64_t cursor, size_t count, sluice_table_scan_fn fn,
                      void *arg, uint64_t *next_cursor, size_t *visited)
{
    sluice_table *t = place;
    rd_tls *rd = rd_enter(); /* the states given carry keys over changes first */
    const int rc = scan_counted(t, cursor, count, fn, arg, next_cursor, visited);
    rd_exit(rd);
    return rc;
}

int sluice_table_scan(sluice_table *t, uint64_t cursor, size_t count, sluice_table_scan_fn fn,
                      void *arg, uint64_t *next_cursor)
{
    return sluice__table_scan_counted(t, cursor, count, fn, arg, next_cursor, NULL);
}
