/* table_hold.c -- composite decisions on keys of an in-process table: the
 * table key's kind ops (table/hold.h; composite.c runs the all-or-nothing
 * protocol over them), and the fast path of a composite made of table keys.
 *
 * Map:  the kind ops (sluice__table_key_view, _shard_of, _lock, _unlock,
 *       _find, _make, _refind, _store, _unmake, _reclaim, _count,
 *       _count_elsewhere); the fast path of table keys: the all-or-nothing
 *       protocol (alg/attempt.h) over reads (key_call: k_hold, k_take,
 *       k_store, k_confirm, k_release), tables_decide,
 *       sluice__tables_decide.  The section's own comments below say how
 *       the parts are held and why an answer given is all or nothing.
 */
#include "table/inproc.h"

#include "alg/attempt.h"

/* ---- composite decisions: a key's kind ops (table/hold.h) -------------- */

void sluice__table_key_view(sluice__key_hold *kh)
{
    kh->skey = kh->key ? kh->key : "";
    kh->skeylen = kh->keylen;
    key_view(kh->t, &kh->skey, &kh->skeylen, kh->dig);
}

void *sluice__table_shard_of(sluice_table *t, const void *key, size_t keylen, uint64_t *hash)
{
    if (!key) key = "";
    *hash = key_hash(t, key, keylen);
    return shard_for(t, *hash);
}

void sluice__table_lock(sluice_table *t, void *sh, uint64_t now_ns)
{
    shard *s = sh;
    (void)rd_enter(); /* the parts use configurations until the unlock */
    sluice__spin_lock(&s->mu);
    if (now_ns > s->now) PUT(&s->now, now_ns);
    (void)t; /* no wheel upkeep: keys at rest are reclaimed when room is wanted (make) */
}

void sluice__table_unlock(sluice_table *t, void *sh)
{
    (void)t;
    sluice__spin_unlock(&((shard *)sh)->mu);
    rd_exit(&sluice__rd_me);
}

void sluice__table_find(sluice__key_hold *kh)
{
    sluice_table *t = kh->t;
    shard *s = shard_for(t, kh->hash);
    const void *key = kh->skey;
    uint32_t slot = find(t, s, kh->hash, key, kh->skeylen);
    const tcfg *c = slot == UINT32_MAX ? sluice__inproc_key_cfg(t, s, (uint32_t)kh->hash, key, kh->skeylen)
                                       : cur_cfg(t);
    kh->h.pf = &c->pf;
    kh->shard = s;
    kh->created = false;
    kh->gen = s->gen;
    if (slot == UINT32_MAX) {
        kh->entry = UINT32_MAX;
        sluice__state_init(&c->pf, &kh->h.base);
        kh->h.st = &kh->h.base;
        return;
    }
    kh->entry = slot;
    /* carried over the changes it missed; when memory for a ring runs out,
     * decided under the configuration it reached (the next call retries) */
    const tcfg *ec = sluice__inproc_ent_cfg(t, s, kh->entry);
    kh->h.pf = ec ? &ec->pf : &cfg_of_id(t, ent(t, s, kh->entry)->cfg)->pf;
    entry *e = ent(t, s, kh->entry);
    if (t->pf.packed) {
        load_state(t, kh->h.pf, e, &kh->h.base);
        kh->h.st = &kh->h.base;
    } else {
        kh->h.st = ent_state(e);
    }
}

int sluice__table_make(sluice__key_hold *kh, bool alone, int64_t *retry)
{
    sluice_table *t = kh->t;
    shard *s = kh->shard;
    bool room = s->count < s->ecap && reserve(t);
    if (!room && alone) { /* keys at rest in this shard, then the policy */
        sluice__inproc_sweep_all(t, s, s->now);
        sluice__inproc_publish_due(s);
        room = s->count < s->ecap && reserve(t);
        if (!room && (t->flags & SLUICE_TABLE_EVICT_LRU) && sluice__inproc_evict_one(t, s)) {
            sluice__inproc_publish_due(s);
            room = true;
        }
    }
    if (!room) {
        uint64_t first = UINT64_MAX;
        for (unsigned k = 0; k < t->nshards; k++) {
            uint64_t d = atomic_load_explicit(&t->dues[k], memory_order_relaxed);
            if (d < first) first = d;
        }
        *retry = first == UINT64_MAX ? -1
                 : first > s->now    ? (int64_t)sluice__min_u64(first - s->now, INT64_MAX)
                                     : 1;
        return SLUICE_EFULL;
    }
    uint32_t i = sluice__inproc_new_entry(t, s, kh->hash, kh->skey, kh->skeylen,
                           (const tcfg *)kh->h.pf); /* the pf of sluice__table_find */
    if (i == UINT32_MAX) {
        atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
        *retry = -1;
        return SLUICE_ENOMEM;
    }
    kh->entry = i;
    kh->gen = s->gen;
    kh->created = true;
    if (!t->pf.packed) kh->h.st = ent_state(ent(t, s, i));
    return 0;
}

void sluice__table_refind(sluice__key_hold *kh)
{
    sluice_table *t = kh->t;
    shard *s = kh->shard;
    if (kh->entry == UINT32_MAX || kh->gen == s->gen) return;
    kh->entry = find(t, s, kh->hash, kh->skey, kh->skeylen);
    kh->gen = s->gen;
    if (!t->pf.packed) kh->h.st = ent_state(ent(t, s, kh->entry));
}

void sluice__table_store(sluice__key_hold *kh)
{
    sluice_table *t = kh->t;
    shard *s = kh->shard;
    sluice__table_refind(kh);
    entry *e = ent(t, s, kh->entry);
    if (t->pf.packed) store_state(t, kh->h.pf, e, &kh->h.tmp);
    else if (!t->pf.ops->judge) memcpy(ent_state(e), &kh->h.tmp, sizeof kh->h.tmp);
    if (kh->created) {
        sluice__inproc_wheel_file(t, s, kh->entry, ent_rest_at(t, s, kh->entry));
        sluice__inproc_publish_due(s);
    }
}

void sluice__table_unmake(sluice__key_hold *kh)
{
    sluice__table_refind(kh);
    sluice__inproc_drop_entry(kh->t, kh->shard, kh->entry);
    kh->entry = UINT32_MAX;
    kh->created = false;
}

void sluice__table_reclaim(sluice_table *t, uint64_t now_ns)
{
    rd_tls *rd = rd_enter();
    for (unsigned k = 0; k < t->nshards; k++) {
        shard *o = &t->shards[k];
        if (atomic_load_explicit(o->due, memory_order_relaxed) > now_ns) continue;
        sluice__spin_lock(&o->mu);
        sluice__inproc_sweep_all(t, o, now_ns > o->now ? now_ns : o->now);
        sluice__inproc_publish_due(o);
        sluice__spin_unlock(&o->mu);
    }
    rd_exit(rd);
}

void sluice__table_count(sluice_table *t, uint64_t permits, bool ok, bool full)
{
    sluice__count(&t->counters, permits, ok);
    if (full) sluice__count(&t->full, 1, false);
}

void sluice__table_count_elsewhere(sluice_table *t, uint64_t permits)
{
    sluice__count_elsewhere(&t->counters, permits);
}

/* A composite of table keys only (hold.h): the protocol's steps
 * (alg/attempt.h) over reads.  Every key is read as a single decision
 * reads it (decide_read), and, when all admit, every shard taken with
 * sluice__spin_try_upgrade and the words stored (put_words, as a holder
 * stores them) -- no lock held while reading and deciding, no lock waited
 * for.
 *
 * Why an answer is one instant of every limit.  A refusal or a probe
 * (confirm): each shard's sequence is read before its keys and checked
 * unchanged after the last key of all, and each key's state words (which
 * admissions without the lock change, the sequence not) are read again
 * after the last key of all and found as first read -- an admission only
 * adds to a state, so a state found twice was held in between -- so every
 * key held its state from its read to those checks; it writes nothing, as
 * a single one.  An admission (take): the upgrades, each from the sequence
 * its read began with, succeed only if no holder ran since (so what was
 * read under the sequence was whole), and each state is checked once more
 * under them (an admission without the lock may have come before), so the
 * admission is linearised at the last check, with every state as read.
 *
 * Anything else -- a key not held yet (its entry must be made), a key
 * that is not read (long, or of a table whose states do not pack), a table
 * in a shared region, a change of spec to carry over, a key twice, holders
 * met READ_TRIES times -- returns -1 with nothing decided, stored or
 * counted: the general path decides it. */
typedef struct key_part {
    sluice_table *t;
    shard *s;
    uint64_t h, v;
    uint64_t w[2], out[2];
    ekey k;
    uint32_t at;
    bool first; /* the first part of its shard: reads and takes its sequence */
    bool ok;
} key_part;

/* The call's record: scalars and a pointer to the parts, so that it stays
 * in registers (the parts, indexed by a variable, cannot). */
typedef struct key_call {
    key_part *p;
    const sluice_limit_ref *refs;
    size_t n;
    uint64_t permits, now_ns;
    sluice__answer *ans;
} key_call;

/* Hold key i: its state's words, read under its shard's sequence, and the
 * request decided on them. */
static inline int k_hold(key_call *kc, size_t i)
{
    key_part *p = &kc->p[i];
    if (p->first) {
        p->v = sluice__spin_read_begin(&p->s->mu);
        if (p->v & 1) return SLUICE__AGAIN;
    } else {
        for (size_t j = 0; j < i; j++)
            if (kc->p[j].s == p->s) p->v = kc->p[j].v;
    }
    sluice_table *t = p->t;
    const uint32_t at = read_find(t, p->s, p->h, &p->k, kc->refs[i].keylen);
    if (at == RUN_TORN) return SLUICE__AGAIN;
    if (at == UINT32_MAX) return SLUICE__HANDOVER; /* a key to make: the general path */
    const tcfg *c = read_cfg(t, p->s, at);
    if (!c) return SLUICE__HANDOVER;
    if (!read_words(ent(t, p->s, at), p->w)) return SLUICE__AGAIN;
    sluice__answer *a = kc->ans ? &kc->ans[i] : NULL;
    if (a) *a = (sluice__answer){.ok = false};
    p->ok = decide_words(&c->pf, p->w, kc->now_ns, kc->permits, a ? &a->r : NULL, p->out);
    p->at = at;
    return p->ok;
}

/* Every shard taken from the sequence its read began with, and every
 * state found as read under them; or none taken. */
static inline bool k_take(key_call *kc)
{
    const size_t n = kc->n;
    size_t got = 0;
    for (; got < n; got++)
        if (kc->p[got].first && !sluice__spin_try_upgrade(&kc->p[got].s->mu, kc->p[got].v)) break;
    bool moved = false;
    for (size_t i = 0; got == n && !moved && i < n; i++) {
        uint64_t w[2]; /* an admission without the lock may have come between */
        held_words(ent(kc->p[i].t, kc->p[i].s, kc->p[i].at), w);
        moved = w[0] != kc->p[i].w[0] || w[1] != kc->p[i].w[1];
    }
    if (got == n && !moved) return true;
    for (size_t i = 0; i < got; i++) /* nothing stored: let them go */
        if (kc->p[i].first) sluice__spin_unlock(&kc->p[i].s->mu);
    return false;
}

static inline void k_store(key_call *kc, size_t i)
{
    if (kc->p[i].first && kc->now_ns > kc->p[i].s->now) PUT(&kc->p[i].s->now, kc->now_ns);
    put_words(ent(kc->p[i].t, kc->p[i].s, kc->p[i].at), kc->p[i].out);
}

/* A refusal or a probe: every state still as read, every shard's sequence
 * unchanged. */
static inline bool k_confirm(key_call *kc)
{
    for (size_t i = 0; i < kc->n; i++) {
        uint64_t w[2];
        if (!read_words(ent(kc->p[i].t, kc->p[i].s, kc->p[i].at), w) || w[0] != kc->p[i].w[0] ||
            w[1] != kc->p[i].w[1])
            return false;
    }
    for (size_t i = 0; i < kc->n; i++)
        if (kc->p[i].first && !sluice__spin_read_valid(&kc->p[i].s->mu, kc->p[i].v)) return false;
    return true;
}

/* Only what the take took: a shard, after an admission. */
static inline void k_release(key_call *kc, size_t i, bool stored)
{
    if (stored && kc->p[i].first) sluice__spin_unlock(&kc->p[i].s->mu);
}

/* Nothing to prepare (a key to make goes to the general path) or settle
 * (counted after). */
static inline bool k_prepare(key_call *kc)
{
    (void)kc;
    return true;
}
static inline void k_settle(key_call *kc, bool ok) { (void)kc, (void)ok; }

SLUICE__ATTEMPT(keys_attempt, key_call, k)

static int tables_decide(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                         uint64_t now_ns, sluice__answer *ans)
{
    if (!refs || n - 1 >= SLUICE_COMPOSITE_MAX) return -1;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    key_part parts[SLUICE_COMPOSITE_MAX]; /* not zeroed: each field is written before it is read */
    key_call kc = {.p = parts, .refs = refs, .n = n, .permits = permits, .now_ns = now_ns,
                   .ans = ans};
    for (size_t i = 0; i < n; i++) { /* who each key is, and where */
        const sluice_limit_ref *r = &refs[i];
        sluice_table *t = r->table;
        if (r->limiter || !t || t->region || !readable(t, r->keylen) || (!r->key && r->keylen))
            return -1;
        const void *key = r->key ? r->key : "";
        key_part *p = &kc.p[i];
        p->t = t;
        p->h = sluice__siphash13(t->seed, key, r->keylen);
        p->s = shard_for(t, p->h);
        pad_key(&p->k, key, r->keylen);
        prefetch_run(t, p->s, p->h);
        p->first = true;
        for (size_t j = 0; j < i; j++) {
            if (kc.p[j].s != p->s) continue;
            p->first = false;
            if (refs[j].keylen == r->keylen && kc.p[j].k.w[0] == p->k.w[0] &&
                kc.p[j].k.w[1] == p->k.w[1])
                return -1; /* a key twice */
        }
    }
    for (unsigned tries = 0; tries < READ_TRIES; tries++) {
        const int got = keys_attempt(&kc, n, permits);
        if (got == SLUICE__AGAIN) {
            sluice__backoff(tries);
            continue;
        }
        if (got < 0) return -1;
        for (size_t i = 0; i < n; i++) {
            if (ans) ans[i].ok = kc.p[i].ok;
            sluice__count(&kc.p[i].t->counters, permits, got);
            if (!got && permits && kc.p[i].ok)
                sluice__count_elsewhere(&kc.p[i].t->counters, permits);
            if (!got) sluice__table_note(kc.p[i].t, refs[i].key, refs[i].keylen, kc.p[i].h);
        }
        return got;
    }
    return -1;
}

int sluice__tables_decide(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                          uint64_t now_ns, sluice__answer *ans)
{
    rd_tls *rd = rd_enter();
    const int rc = tables_decide(refs, n, permits, now_ns, ans);
    rd_exit(rd);
    return rc;
}
