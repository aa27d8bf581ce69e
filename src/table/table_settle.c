/* table_settle.c -- reservations on keys of a table: reserve, cancel,
 * settle (docs/decisions.md, section 3.10; docs/tables.md,
 * "Reservations").
 *
 * Map:  the key a reservation names (rv_find, rv_same); its hold on the
 *       table (rv_close, rv_open); the rules on a state, which both
 *       placements use (sluice__rv_decide, _give_back, _settle: skeleton.h);
 *       sluice_table_reserve_at, sluice_table_reservation_cancel_at,
 *       sluice_table_reservation_settle_at.
 *
 * The public functions keep the reservation's states and its hold on the
 * handle for both placements; the in-process table's lookup and commit
 * are here, inline, and a table in a shared region is reached through its
 * ops (skeleton.h: reserve_at, cancel_at, settle_at; region_settle.c has
 * its locking and how it names the entry).  What follows is the
 * in-process placement's.
 *
 * The rules are the limiter's, on the key's state, through the same
 * functions: the buckets' sluice__bucket_reserve and _give_back, every
 * algorithm's ops->settle (src/alg/).  Each operation holds the lock of the
 * key's shard for its lookup and its update, as the locked path of a
 * decision does (table.c); the state words are read and stored as a holder
 * reads and stores them (held_words, put_words), so admissions made without
 * the lock never cross them.
 *
 * Which key.  The reservation is the caller's and outlives no table (its
 * hold, below), but the key's entry may go: removed, reset, evicted by the
 * LRU policy, or reclaimed at rest when a new key wants room -- and the key
 * may be made again.  A settle on the new entry would give back permits the
 * new entry never took.  So the reservation keeps the key (its bytes when
 * at most INLINE_KEY, else its stored length and 64-bit keyed hash) and the
 * entry's stamp: a 64-bit number per slot (t->stamps, beside the probe
 * arrays, laid out as they are), which follows its entry when a Robin Hood
 * shift moves it (slot_open, slot_close: stamps_shift), and which
 * put_entry clears to 0 when it makes an entry.  A table that never
 * reserves has no stamps at all: they are allocated at its first
 * reservation (8 bytes a slot, 10.5 a key at 10^6 keys), and until then a
 * shift or a new entry pays one predictable test of the pointer -- no
 * store, no locked instruction (docs/benchmarks.md, "Reservation
 * stamps").  The first reservation on an entry gives it the next number of
 * its shard (shard.stamped, under the lock: 1, 2, ...); later ones on the
 * same entry find it.  A settle acts iff it finds the key and its entry's
 * stamp is the reservation's: an entry made since, for this key in any
 * slot, has 0 or a later number, and the making, moving or dropping of
 * another key never changes this entry's stamp -- so churn of other keys
 * (a million keys coming and going) loses neither a give-back nor an
 * overdraft.  Else the cancel or settle changes nothing and says so
 * (SLUICE_ENOENT).  Numbers are never reused, so no wrap can make an old
 * reservation match a new entry: 2^64 first reservations in one shard, at
 * a billion a second, take 584 years.  The stamps are read and written
 * under the shard's lock only; the pointer is published once
 * (compare-and-swap, release), and a holder that still sees it NULL meets
 * only stamps of 0 in its shard (a number is given under the same lock,
 * after a load of the pointer that saw it: every later holder of the lock
 * sees it too), so the shifts and makings done without it lose nothing.
 *
 * Which units.  After a change of spec (or of an override) nothing goes
 * back (3.10).  Configurations are numbered and their numbers reused, so
 * the reservation keeps the key's configuration number and t->cfg_serial,
 * which cfg_add and cfg_unmap move (table_spec.c): both as reserved, and
 * the key is under the configuration it was reserved under.
 *
 * The table's life.  A granted reservation holds the table (t->refs): its
 * creator's sluice_table_free() only lets go of its own hold, and the last
 * reservation closed frees it.  Either order of freeing is then safe.
 */
#include "table/inproc.h"
#include "alg/bucket.h"

/* A reservation's state, as the limiter's (limiter.c): RV_ACTIVE may be
 * cancelled (a bucket's, p >= 1) and settled; RV_OPEN only settled (a
 * window's, or a bucket's probe); RV_FINAL is done (refused, cancelled or
 * settled) and holds no table. */
enum { RV_NONE, RV_ACTIVE, RV_FINAL, RV_OPEN };

/* The slot of the key rv names in its locked shard s, or UINT32_MAX: the
 * probe run from the key's home, in Robin Hood order (as find()), matching
 * the stored length and the bytes (a short key) or the kept hash (a long
 * one). */
static uint32_t rv_find(const sluice_table *t, const shard *s,
                        const sluice_table_reservation *rv)
{
    const uint64_t h = rv->hash_;
    uint32_t i = home_of(s, (uint32_t)h);
    for (uint32_t d = 0; d < s->cap; d++) {
        const entry *e = ent(t, s, i);
        const uint32_t code = META_CODE(e->meta);
        if (code == 0 || dist_lt(t, s, i, code, d)) break;
        if (META_LEN(e->meta) == rv->keylen_ &&
            (rv->keylen_ > INLINE_KEY ? e->key.far.hash == h
                                      : e->key.w[0] == rv->key_[0] && e->key.w[1] == rv->key_[1]))
            return i;
        if (++i == s->cap) i = 0;
    }
    return UINT32_MAX;
}

/* Whether slot i (UINT32_MAX: absent) of locked shard s is the entry rv was
 * made on (head comment, "Which key"): its stamp is rv's, which is not 0. */
static bool rv_same(const sluice_table *t, const shard *s, uint32_t i,
                    const sluice_table_reservation *rv)
{
    uint64_t *st = stamps_of(t);
    return i != UINT32_MAX && rv->kgen_ && st && *stamp_at(t, st, s, i) == rv->kgen_;
}

/* The table's stamps, made at its first reservation (outside any lock; a
 * thread that loses the race frees its own): 0, or SLUICE_ENOMEM. */
static int stamps_make(sluice_table *t)
{
    if (stamps_of(t)) return 0;
    uint64_t *st = sluice__calloc((size_t)t->shards[0].cap * t->nshards, sizeof *st);
    if (!st) return SLUICE_ENOMEM;
    uint64_t *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&t->stamps, &none, st, memory_order_acq_rel,
                                                 memory_order_acquire))
        sluice__free(st);
    return 0;
}

/* The stamp of entry i of locked shard s, given now if it has none. */
static uint64_t stamp_take(sluice_table *t, shard *s, uint32_t i)
{
    uint64_t *p = stamp_at(t, stamps_of(t), s, i);
    if (!*p) *p = ++s->stamped; /* 1, 2, ...: never 0 again within 2^64 */
    return *p;
}

/* Close rv: done for good, and its hold on the table let go (the table
 * may be freed here). */
static void rv_close(sluice_table_reservation *rv)
{
    sluice_table *t = rv->table;
    rv->state = RV_FINAL;
    rv->table = NULL;
    sluice__inproc_release(t);
}

/* The key's state, in place or as a copy (packed), and its profile, after
 * carrying it over the changes of spec it missed; NULL when memory for a
 * ring runs out. */
static const tcfg *state_of(sluice_table *t, shard *s, uint32_t i, sluice__state *copy,
                            sluice__state **st)
{
    const tcfg *c = sluice__inproc_ent_cfg(t, s, i);
    if (!c) return NULL;
    if (t->pf.packed) {
        load_state(t, &c->pf, ent(t, s, i), copy);
        *st = copy;
    } else {
        *st = ent_state(ent(t, s, i));
    }
    return c;
}

/* Store a state changed by a cancel or a settle, and file the key at its
 * new rest time (a give-back may bring it nearer: the shard's `due` must
 * stay a lower bound). */
static void state_put(sluice_table *t, shard *s, uint32_t i, const tcfg *c,
                      const sluice__state *st)
{
    if (t->pf.packed) store_state(t, &c->pf, ent(t, s, i), st);
    sluice__inproc_wheel_unlink(t, s, i);
    sluice__inproc_wheel_file(t, s, i, ent_rest_at(t, s, i));
    sluice__inproc_publish_due(s);
}

/* ---- the rules on a state (skeleton.h: both placements) ---------------- */

bool sluice__rv_decide(const sluice__profile *pf, sluice__state *st, uint64_t now_ns,
                       uint64_t permits, uint64_t max_wait_ns, sluice_result *res,
                       sluice_table_reservation *rv)
{
    const uint64_t tt = sluice__clamp_time(st, now_ns);
    const bool ok = pf->ops->bucket ? sluice__bucket_reserve(pf, st, tt, permits, max_wait_ns, res)
                                    : sluice__decide(pf, st, tt, permits, UINT64_MAX, res);
    if (ok && rv) {
        rv->permits = permits;
        rv->wait_ns = res->wait_ns;
        rv->at_ns = tt + res->wait_ns; /* <= 2^63-1: the reserve bounds it */
        rv->t_ns_ = tt;
        if (pf->ops->bucket) {
            rv->d1_[0] = (uint64_t)st->u.bk.deficit;
            rv->d1_[1] = (uint64_t)(st->u.bk.deficit >> 64);
        }
    }
    return ok;
}

bool sluice__rv_give_back(const sluice__profile *pf, sluice__state *st, uint64_t now_ns,
                          const sluice_table_reservation *rv)
{
    /* decided at the clamped time, inside the hold: a stale now_ns cannot
     * give back what a later admission counted on */
    return sluice__bucket_give_back(pf, st, sluice__clamp_time(st, now_ns), rv->permits,
                                    rv->at_ns);
}

int sluice__rv_settle(const sluice__profile *pf, sluice__state *st, uint64_t now_ns,
                      const sluice_table_reservation *rv, uint64_t actual_permits)
{
    const sluice__settle_req q = {.t0 = rv->t_ns_, .at_ns = rv->at_ns, .p = rv->permits,
                                  .a = actual_permits,
                                  .d1 = (u128)rv->d1_[1] << 64 | rv->d1_[0]};
    return pf->ops->settle(pf, st, sluice__clamp_time(st, now_ns), &q);
}

/* ---- the public functions ------------------------------------------------ */

/* A granted reservation: open (a bucket's, p >= 1: ACTIVE, else OPEN),
 * holding its table. */
static void rv_open(sluice_table *t, sluice_table_reservation *rv, uint64_t permits)
{
    rv->state = t->pf.ops->bucket && permits ? RV_ACTIVE : RV_OPEN;
    rv->table = t;
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed); /* its hold */
}

bool sluice_table_reserve_at(sluice_table *t, const void *key, size_t keylen,
                             uint64_t permits, uint64_t now_ns, uint64_t max_wait_ns,
                             sluice_table_reservation *rv, sluice_result *res)
{
    sluice_result r = {0};
    if (rv) memset(rv, 0, sizeof *rv);
    if (rv) rv->state = RV_FINAL; /* refused, until granted */
    if (t && t->ops != &sluice__inproc_ops && t->ops->reserve_at) { /* another placement */
        sluice_table_reservation mine;
        memset(&mine, 0, sizeof mine);
        const bool ok = t->ops->reserve_at(t->place, key, keylen, permits, now_ns, max_wait_ns,
                                           rv ? rv : &mine, res);
        if (ok && rv) rv_open(t, rv, permits);
        return ok;
    }
    if (!t || !key_ok(key, keylen) || t->ops != &sluice__inproc_ops) {
        sluice__fail(&r, SLUICE_EINVAL);
        if (t) sluice__count(&t->counters, permits, false);
        if (res) *res = r;
        return false;
    }
    if (rv && stamps_make(t) != 0) { /* a reservation to settle needs its entry's stamp */
        sluice__fail(&r, SLUICE_ENOMEM);
        sluice__count(&t->counters, permits, false);
        if (res) *res = r;
        return false;
    }
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    sluice__key_hold kh = {.t = t, .key = key, .keylen = keylen};
    sluice__table_key_view(&kh);
    void *sh = sluice__table_shard_of(t, kh.skey, kh.skeylen, &kh.hash);
    shard *s = sh;
    const sluice__profile *pf;
    bool ok = false, full = false;
    for (int attempt = 0;; attempt++) {
        sluice__table_lock(t, sh, now_ns);
        sluice__table_find(&kh);
        pf = kh.h.pf;
        if (kh.entry != UINT32_MAX || permits == 0 || permits > pf->capacity) break;
        /* a fresh limiter grants this: make the key first (its shard's keys
         * at rest, the policy; then, as a composite does, keys at rest in
         * every shard with nothing held, and once more) */
        int64_t retry = -1;
        const int rc = sluice__table_make(&kh, true, &retry);
        if (rc == 0) break;
        if (rc == SLUICE_EFULL && attempt == 0) {
            sluice__table_unlock(t, sh);
            sluice__table_reclaim(t, now_ns);
            continue;
        }
        if (rc == SLUICE_EFULL) {
            sluice__deny(&r, 0, retry);
            r.error = SLUICE_EFULL;
            full = true;
        } else {
            sluice__fail(&r, rc);
        }
        goto out;
    }
    sluice__state *st = kh.h.st; /* the key's (in place, or a copy), or a fresh one */
    ok = sluice__rv_decide(pf, st, now_ns, permits, max_wait_ns, &r, rv);
    if (kh.entry != UINT32_MAX) {
        if (ok && permits) {
            if (t->pf.packed) store_state(t, pf, ent(t, s, kh.entry), st);
            if (kh.created) {
                sluice__inproc_wheel_file(t, s, kh.entry, ent_rest_at(t, s, kh.entry));
                sluice__inproc_publish_due(s);
            }
        } else if (kh.created) { /* a window log that could not grow */
            sluice__table_unmake(&kh);
        }
    }
    if (ok && rv) {
        rv->hash_ = kh.hash;
        rv->keylen_ = (uint32_t)kh.skeylen;
        if (kh.skeylen <= INLINE_KEY) {
            ekey k;
            pad_key(&k, kh.skey, kh.skeylen);
            rv->key_[0] = k.w[0];
            rv->key_[1] = k.w[1];
        }
        /* the key's entry (its stamp) and configuration now; a probe of a
         * key not held has neither: its settle can only find it gone */
        rv->kgen_ = kh.entry == UINT32_MAX ? 0 : stamp_take(t, s, kh.entry);
        rv->cfg_ = kh.entry == UINT32_MAX ? 0 : ent(t, s, kh.entry)->cfg;
        rv->serial_ = atomic_load_explicit(&t->cfg_serial, memory_order_relaxed);
        rv_open(t, rv, permits);
    }
out:
    sluice__table_unlock(t, sh);
    sluice__table_count(t, permits, ok, full);
    if (!ok) sluice__table_note(t, kh.key ? kh.key : "", keylen, 0);
    if (res) *res = r;
    return ok;
}

/* Validate rv for a cancel or a settle: 0, or the answer. */
static int rv_check(const sluice_table_reservation *rv)
{
    if (!rv || rv->state == RV_NONE) return SLUICE_EINVAL;
    if (rv->state != RV_ACTIVE && rv->state != RV_OPEN) return SLUICE_ENOENT;
    return rv->table ? 0 : SLUICE_EINVAL;
}

int sluice_table_reservation_cancel_at(sluice_table_reservation *rv, uint64_t now_ns)
{
    const int bad = rv_check(rv);
    if (bad) return bad;
    sluice_table *t = rv->table;
    if (!t->pf.ops->bucket) return SLUICE_EINVAL; /* every configuration has its algorithm */
    /* a bucket's RV_OPEN holds no permits: nothing to give back, and it
     * stays open to a settle, as a limiter's */
    if (rv->state != RV_ACTIVE) return SLUICE_ENOENT;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    if (t->ops != &sluice__inproc_ops) { /* another placement: it served the reserve */
        const int rc = t->ops->cancel_at(t->place, rv, now_ns);
        rv_close(rv);
        return rc;
    }
    shard *s = shard_for(t, rv->hash_);
    sluice__table_lock(t, s, now_ns);
    int rc = SLUICE_ENOENT;
    const uint32_t i = rv_find(t, s, rv);
    if (rv_same(t, s, i, rv)) {
        sluice__state copy, *st;
        const tcfg *c = state_of(t, s, i, &copy, &st);
        if (c && sluice__rv_give_back(&c->pf, st, now_ns, rv)) {
            state_put(t, s, i, c, st);
            rc = 0;
        }
    }
    sluice__table_unlock(t, s);
    rv_close(rv);
    return rc;
}

int sluice_table_reservation_settle_at(sluice_table_reservation *rv, uint64_t actual_permits,
                                       uint64_t now_ns)
{
    const int bad = rv_check(rv);
    if (bad) return bad;
    sluice_table *t = rv->table;
    if (actual_permits == rv->permits) {
        rv_close(rv);
        return 0;
    }
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    if (t->ops != &sluice__inproc_ops) { /* another placement: it served the reserve */
        const int rc = t->ops->settle_at(t->place, rv, actual_permits, now_ns);
        if (rc != SLUICE_ENOMEM) rv_close(rv);
        return rc;
    }
    shard *s = shard_for(t, rv->hash_);
    sluice__table_lock(t, s, now_ns);
    int rc = SLUICE_ENOENT;
    const uint32_t i = rv_find(t, s, rv);
    if (rv_same(t, s, i, rv)) {
        sluice__state copy, *st;
        const tcfg *c = state_of(t, s, i, &copy, &st);
        if (!c) {
            rc = SLUICE_ENOMEM;
        } else if (actual_permits < rv->permits &&
                   (c->id != rv->cfg_ ||
                    atomic_load_explicit(&t->cfg_serial, memory_order_relaxed) != rv->serial_)) {
            rc = 0; /* the units changed: the permits count as used */
        } else {
            rc = sluice__rv_settle(&c->pf, st, now_ns, rv, actual_permits);
            if (rc == 0) state_put(t, s, i, c, st);
        }
    }
    sluice__table_unlock(t, s);
    if (rc != SLUICE_ENOMEM) rv_close(rv);
    return rc;
}
