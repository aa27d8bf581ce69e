/* table.c -- one limiter per key, for millions of keys in bounded memory:
 * the in-process placement's overview, its construction and its decisions.
 *
 * Map:  this overview and the proof of the optimistic read;
 *       construction (sluice_table_new*, sluice_table_free, the test hooks
 *       sluice__table_*); decisions: room (make_room; reserve: inproc.h), the
 *       optimistic read (full_read, read_once, commit_free, decide_read),
 *       the locked path (decide_locked), sluice_table_try_acquire_at;
 *       bursts (sluice_table_try_acquire_burst_at); stats; the keys refused
 *       most (sluice_table_set_top, sluice_table_top_refused); the
 *       placement's ops table (sluice__inproc_ops, skeleton.h).
 *       Elsewhere (inproc.h is the private header they share):
 *         table_slots.c  slots, Robin Hood probing, the reclaiming wheel,
 *                        entry life, and their design note
 *         table_hold.c   composite decisions: a key's kind ops (hold.h)
 *         table_keys.c   remove, reset, peek, scan
 *         table_spec.c   reader sections, configurations (changing the spec
 *                        of every key), per-key overrides
 *         table_settle.c reservations on keys: reserve, cancel, settle
 *
 * Layout.  The profile (parsed spec) is shared; each key costs one entry in
 * the probe array of one of S shards (S a power of two up to 64, one short
 * lock each -- sluice__spin, held for the lookup and the decision of
 * whatever may write, and also the shard's sequence count, which refusals
 * read instead: below; the shard is the hash's top bits).  The entries live
 * in the array itself, so that a lookup touches one place in memory -- a
 * 48-byte entry, and the one or two after it -- not an index slot and then
 * an entry elsewhere (two dependent misses).  table_slots.c has the slot's
 * layout, the Robin Hood probing, the hashing and the reclaiming of keys at
 * rest (a key at rest stays in place until a new key wants its room);
 * table_spec.c the configurations and overrides.
 *
 * When full of keys in use: refuse the new key (default; counted), or, with
 * SLUICE_TABLE_EVICT_LRU, drop the entry with the oldest latest time among
 * LRU_SAMPLES sampled in the key's shard (Redis's approximated LRU).
 *
 * Refusals and probes write nothing shared (docs/decisions.md, section 1:
 * only an admission changes a limiter).  A decision is first read, without
 * the lock (decide_read; sluice_table_peek_at reads the same way): no
 * store, no CAS, no locked instruction -- not the lock, not the shard's
 * `now`, not the wheel, not a shared counter (the statistics are striped
 * per thread, counters.h; the refused-keys sketch, when it is on, is the one
 * thing a refusal writes).  If the read finds a refusal or a probe it is the
 * answer.  If it finds an admission of a held key, it stores the words it
 * decided without the lock, into the key's entry alone (commit_free, below:
 * "Admissions without the lock"; when the shard's wheel is due a step, the
 * locked path decides instead).  Anything else (a key to make, a holder met
 * since) is decided again under the lock, as before.  (Under the lock -- a
 * burst's request on the shard it holds, or a read that met holders
 * READ_TRIES times -- a refusal or a probe is still decided first, with no
 * upkeep: it moves nothing but the lock.)
 * The lock word is a sequence (spin.h): odd while held, 2 more after each
 * hold.  The read:
 *
 *   v = the sequence (acquire); odd: a holder runs -- wait, read it again
 *   the probe run of the key's slots: each one's meta (distance code, key
 *     length) and two key words, the entry's configuration id and the two
 *     words of its packed state (read_words: the time half, the count
 *     half, the time half again -- equal, and not frozen);
 *     for a key absent and a new key that would need room, the shard's
 *     count and now, and every shard's `due` (full_read)
 *   decide on a copy of the state (the algorithm's decide_packed, as a
 *     lock-free limiter decides)
 *   the sequence again (after the loads): still v -- the answer, if it is
 *     a refusal or a probe; else read again (at most READ_TRIES times, then
 *     the lock)
 *
 * Why an answer given is one the locked path would have given at an
 * instant of the read: (1) every field read so -- meta, key words,
 * configuration id, state words, count, now, overrides -- is stored by a
 * holder only (but the state words, which admissions without the lock
 * store too: (6)), with an atomic store of the field's own size (PUT), and
 * loaded with an atomic load of the same size (GET); no store overlaps
 * another field's bytes (new_entry and slot_move store field by field, no
 * memset or memcpy over them), so no load tears within a field and there
 * is no data race.  (2)-(3) The read is base/seqlock.h's
 * protocol (the lock's bit-set is the hold's odd store), proved there.
 * So if the recheck reads v, every
 * load read the value the shard held from v's hold to the recheck: one state of
 * the shard, unchanged for the whole read, whatever order the loads ran in
 * -- a consistent snapshot, and the decision on it is the locked path's at
 * that instant (with no upkeep: the wheel and `now` only reclaim keys at
 * rest, which decide as fresh keys do).  (4) A read that mixed states is
 * never acted on (the recheck fails), and cannot go wrong before it: each
 * load is a value a holder stored, a probe run is cut at `cap` slots, a
 * configuration id is looked up warily (read_cfg), and the state is two
 * halves in the ranges the packed form allows, on which decide is total (no
 * key is ever dereferenced: only keys of at most 16 bytes, compared as
 * words).  (5) An admission a read found is stored only if the sequence is
 * still v once the entry is frozen (below): no holder ran from v to then,
 * so by (1)-(3) what the read loaded is still the shard's -- the slot holds
 * the key, under its newest configuration -- and the freeze found the
 * state words the read decided on; the words stored are those the locked
 * path would compute and store on that state.  The other shards' `due` are
 * read as the locked path reads them, without their locks: lower bounds,
 * each true when read.
 *
 * Admissions without the lock (commit_free).  An admission of a held key
 * writes its entry's 16 state bytes and nothing else: two threads
 * admitting distinct keys write distinct lines, never the shard's.  The
 * time half of a packed state is at most 2^63 - 1; its top bit (FROZEN)
 * marks the state frozen.  The admission, after its read:
 *
 *   freeze: compare-and-swap the time half from the one read to the same
 *     frozen -- this fails if another admission froze or stored a
 *     different time since: read again;
 *   load the count half: not the one read -- another admission stored
 *     since, with the same time (its thaw is the store the freeze read
 *     from, a release after its count half's): thaw and read again;
 *   load the sequence: still v -- store the count half, then the time half
 *     decided (release; not frozen, so this thaws it); else thaw and
 *     decide under the lock.
 *
 * (A thaw is a compare-and-swap of the time half from frozen to what was
 * read, which fails if a holder stored since.)  Once the time half is
 * frozen, no other admission can store either half until it thaws (each
 * must freeze first, and a freeze expects a time half not frozen), so the
 * count half loaded after the freeze is the entry's until then, but for a
 * holder's store -- and a holder that stored has run since v: the load of
 * the sequence sees it, (6).  So a state that passes both checks is the
 * pair the read decided on, held from the freeze to the stores: the
 * 16-byte compare-and-swap of the pair it replaces would have found the
 * same, at the cost of a locked cmpxchg16b (slower than the 8-byte one by
 * 3-4 ns a decision in a burst; docs/benchmarks.md).
 *
 * A holder reads an entry's state words once they are not frozen
 * (held_words waits), before it reads, moves, overwrites or drops the
 * entry, and stores them count half first, time half last (put_words).
 * (6) No admission stores into an entry a holder acts on: the holder's
 * lock (a sequentially consistent read-modify-write of the sequence, then
 * its load of the time half) and the admission's freeze (a sequentially
 * consistent compare-and-swap, then its load of the sequence) are a Dekker
 * pair: one of the two loads sees the other's write.  If the admission's
 * sees the lock, it stores nothing and thaws; else the holder's sees the
 * freeze and waits until the stores are done (release; the wait's load is
 * an acquire), so it acts on the state admitted.  An admission that froze
 * after the holder waited sees the lock, and the holder's words survive its
 * thaw: the thaw succeeds only on the frozen time half, which no holder
 * stores, before the holder's time-half store (which would have thawed it
 * anyway), and a freeze never changes the count half.  (7) A read without
 * the lock meets admissions made without the lock, which do not move the
 * sequence.  They store state words only, and an admission's time half is
 * never earlier than the one it replaces (the time decided at, clamped to
 * the latest admission).  So if read_words' two loads of the time half
 * agree and are not frozen, every admission between them stored that same
 * time, and the count half loaded between them is one of theirs (each
 * froze the time half before it stored its count half, release): the pair
 * is a state the entry held at an instant of the read, and with (1)-(3) for
 * every other field, the read saw the shard as it was at that instant.
 *
 * Keys longer than 16 bytes (their copy may be freed under the reader),
 * states that do not pack, and so the sliding-log and sliding-wheel keys
 * (rings that a holder may reallocate or free: reading them would need safe
 * reclamation) keep the locked path for every decision.  So does a new key
 * on a one-shard table that is full: its exact retry hint comes from a look
 * through the wheel, which refiles entries; a new key of a shard that has
 * overrides (their array is looked up under the lock); and a key whose
 * configuration has a newer one: its first decision after a change of spec
 * carries its state over under the lock, and its refusals read again from
 * then on.  Configurations are read through their ids and never freed
 * while the table lives (read_cfg).
 */
#include "table/inproc.h"


/* ---- construction ------------------------------------------------------- */

static void free_shards(sluice_table *t)
{
    for (unsigned k = 0; t->shards && k < t->nshards; k++) {
        shard *s = &t->shards[k];
        if (s->slab) {
            for (uint32_t i = 0; i < s->cap; i++) {
                entry *e = ent(t, s, i);
                if (!META_CODE(e->meta)) continue;
                if (META_LEN(e->meta) > INLINE_KEY) sluice__free(e->key.far.ext);
                if (!t->pf.packed) sluice__state_fini(&t->pf, ent_state(e));
            }
        }
    }
    sluice__free(t->slabs);
    sluice__free64(t->shards);
    sluice__free64((void *)t->dues);
}

static sluice_table *table_new(const char *spec, size_t max_keys, unsigned flags,
                               const uint64_t *seed, char *err, size_t errlen)
{
    sluice__profile pf;
    if (sluice__spec_parse(spec, &pf, err, errlen) != 0) return NULL;
    if (max_keys < 1 || max_keys > ((size_t)1 << 32)) {
        sluice__errf(err, errlen, "bad max_keys %zu: expected 1 .. 2^32", max_keys);
        return NULL;
    }
    if (flags & ~(SLUICE_TABLE_EVICT_LRU | SLUICE_TABLE_RECLAIM_WHEN_FULL)) {
        sluice__errf(err, errlen, "bad flags 0x%x", flags);
        return NULL;
    }
    sluice__rd_setup(); /* how reader sections order themselves, before any runs */
    sluice_table *t = sluice__calloc64(sizeof *t);
    if (!t) goto oom;
    t->ops = &sluice__inproc_ops;
    t->place = t;
    t->pf = pf;
    if (sluice__inproc_cfg_init(t) != 0) {
        sluice__inproc_cfg_free(t);
        sluice__free64(t);
        t = NULL;
        goto oom;
    }
    /* keys at rest are reclaimed only when room is wanted, whatever the
     * flags say (SLUICE_TABLE_RECLAIM_WHEN_FULL is what every table does;
     * table_slots.c's head comment) */
    t->flags = flags;
    t->max_keys = max_keys;
    /* 32 + 16 = 48 bytes packed, 32 + 48 = 80 otherwise: both keep the
     * state 16-byte aligned */
    t->stride = sizeof(entry) + (pf.packed ? 16 : sizeof(sluice__state));
    uint64_t ecap; /* skeleton.h */
    sluice__table_sizing(max_keys, &t->shard_bits, &ecap);
    t->nshards = 1u << t->shard_bits;
    if (seed) {
        t->seed[0] = seed[0];
        t->seed[1] = seed[1];
    } else {
        sluice__random_seed(t->seed);
    }
    sluice__digest_seed(t->seed, t->dseed);
    t->shards = sluice__calloc64(t->nshards * sizeof *t->shards);
    t->dues = sluice__calloc64(t->nshards * sizeof *t->dues);
    if (!t->shards || !t->dues) goto oom;
    const uint64_t cap = sluice__table_cap(ecap, 4); /* load factor <= 0.8 */
    /* one block for every shard's array, in huge pages where the system
     * gives them (alloc.c): a random lookup then misses the TLB rarely */
    t->slabs = sluice__calloc((size_t)cap * t->nshards, t->stride);
    if (!t->slabs) goto oom;
    /* the entries' stamps come with the first reservation (table_settle.c):
     * a table that never reserves pays nothing for them */
    atomic_init(&t->refs, 1);
    sluice__advise_huge(t->slabs, (size_t)cap * t->nshards * t->stride);
    for (unsigned k = 0; k < t->nshards; k++) {
        shard *s = &t->shards[k];
        s->ecap = (uint32_t)(ecap > UINT32_MAX - 1 ? UINT32_MAX - 1 : ecap);
        s->cap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
        s->slab = t->slabs + (size_t)k * s->cap * t->stride;
        s->rng = t->seed[0] ^ (0x9e3779b97f4a7c15ULL * (k + 1)) ^ 1;
        s->due = &t->dues[k];
        atomic_store_explicit(s->due, UINT64_MAX, memory_order_relaxed);
        sluice__wcore_init(&s->wheel, 0);
    }
    return t;
oom:
    if (t) {
        free_shards(t); /* what was made of it */
        sluice__inproc_cfg_free(t);
        pthread_mutex_destroy(&t->cfg_mu);
        sluice__free64(t);
    }
    sluice__errf(err, errlen, "out of memory");
    return NULL;
}

sluice_table *sluice_table_new_flags(const char *spec, size_t max_keys, unsigned flags,
                                  char *err, size_t errlen)
{
    return table_new(spec, max_keys, flags, NULL, err, errlen);
}

sluice_table *sluice_table_new(const char *spec, size_t max_keys, char *err, size_t errlen)
{
    return table_new(spec, max_keys, 0, NULL, err, errlen);
}

sluice_table *sluice__table_new_seeded(const char *spec, size_t max_keys, unsigned flags,
                                       const uint64_t seed[2], char *err, size_t errlen)
{
    return table_new(spec, max_keys, flags, seed, err, errlen);
}

void sluice__table_seed(const sluice_table *t, uint64_t seed[2])
{
    seed[0] = t->seed[0];
    seed[1] = t->seed[1];
}

size_t sluice__table_bytes(const sluice_table *t)
{
    size_t n = sizeof *t + t->nshards * sizeof(shard);
    const bool stamped = stamps_of(t) != NULL; /* since the first reservation */
    for (unsigned k = 0; k < t->nshards; k++)
        n += (size_t)t->shards[k].cap * (t->stride + (stamped ? sizeof(uint64_t) : 0));
    return n;
}

size_t sluice__table_image(const sluice_table *t, void *buf, size_t cap)
{
    size_t n = 0;
    for (unsigned k = 0; k < t->nshards; k++) {
        const shard *s = &t->shards[k];
        const size_t ne = (size_t)s->cap * t->stride;
        if (buf && n + sizeof *s + ne <= cap) {
            unsigned char *b = (unsigned char *)buf + n;
            memcpy(b, s, sizeof *s);
            memcpy(b + sizeof *s, s->slab, ne);
        }
        n += sizeof *s + ne;
    }
    return n;
}

uint32_t sluice__table_probe_len(sluice_table *t, const void *key, size_t keylen)
{
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    const uint64_t h = key_hash(t, key, keylen);
    shard *s = &t->shards[t->shard_bits ? h >> (64 - t->shard_bits) : 0];
    uint32_t n;
    sluice__spin_lock(&s->mu);
    find_probes(t, s, h, key, keylen, &n);
    sluice__spin_unlock(&s->mu);
    return n;
}

sluice_table *sluice__table_wrap(const sluice__table_ops *ops, const sluice__profile *pf,
                                 unsigned flags, size_t max_keys,
                                sluice__rtable *r)
{
    sluice_table *t = sluice__calloc64(sizeof *t);
    if (!t) return NULL;
    t->pf = *pf;
    if (sluice__inproc_cfg_init(t) != 0) { /* its spec, for the clock the live calls read */
        sluice__inproc_cfg_free(t);
        sluice__free64(t);
        return NULL;
    }
    t->flags = flags;
    t->max_keys = max_keys;
    t->region = r;
    t->ops = ops;
    t->place = r;
    atomic_init(&t->refs, 1); /* its reservations' generations are the region's: no stamps */
    return t;
}

sluice__rtable *sluice__table_region(const sluice_table *t) { return t->region; }

void sluice_table_free(sluice_table *t)
{
    if (t) sluice__inproc_release(t);
}

/* Let go of one hold on t (its creator's, or an open reservation's,
 * table_settle.c); the last frees it. */
void sluice__inproc_release(sluice_table *t)
{
    if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
    if (t->ops->close) t->ops->close(t->place);
    sluice__free(atomic_load_explicit(&t->stamps, memory_order_relaxed));
    sluice__inproc_ovr_free_all(t);
    free_shards(t);
    sluice__topk_free(atomic_load_explicit(&t->top, memory_order_relaxed));
    sluice__inproc_cfg_free(t);
    pthread_mutex_destroy(&t->cfg_mu);
    sluice__free64(t);
}

/* ---- decisions ---------------------------------------------------------- */

/* Reclaim keys of shard s (locked) at rest by `now`: one if there is one
 * (more only from the current tick's look) -- the wheel advanced
 * RECLAIM_BATCH visits at a time until one is reclaimed or it has caught up
 * with now, then, if none was, the look through the current tick
 * (sweep_all).  A visit that reclaims nothing files an entry again at its
 * later rest time, paid for by the admissions that moved it; so one call
 * costs one reclaim past those, however long the wheel was left behind
 * (the keys at rest that it leaves stay in place for their next visit, or
 * the next new key).  One at a time keeps the table full, so that the next
 * new key finds its room at rest in its own place (reuse_at_rest) more
 * often than not: a flood of new keys through keys at rest costs what it
 * cost when a sweep dropped them (bench/README.md).  Returns how many. */
static uint32_t reclaim_some(sluice_table *t, shard *s, uint64_t now)
{
    uint32_t freed = 0;
    while (!freed && s->wheel.cur < now >> TICK_SHIFT) {
        uint32_t budget = RECLAIM_BATCH;
        freed = sluice__inproc_wheel_advance(t, s, now, &budget);
    }
    return freed ? freed : sluice__inproc_sweep_all(t, s, now);
}

/* Room for one more key in shard s (locked): reclaim keys at rest (in s,
 * then, unlocking s, in the other shards), or evict as the policy says.
 * Returns true with a place reserved in t->keys, or false with *retry set.
 * *relocked tells that s was unlocked on the way (the caller must look the
 * key up again). */
static bool make_room(sluice_table *t, shard *s, uint64_t now, int64_t *retry,
                      bool *relocked)
{
    *relocked = false;
    if (s->count < s->ecap && reserve(t)) return true;
    reclaim_some(t, s, now);
    sluice__inproc_publish_due(s);
    if (s->count < s->ecap && reserve(t)) return true;
    if (s->count < s->ecap && t->nshards > 1) { /* the room may be elsewhere */
        sluice__spin_unlock(&s->mu);
        bool got = false;
        for (unsigned k = 0; k < t->nshards && !got; k++) {
            shard *o = &t->shards[k];
            /* a shard whose wheel has nothing due by now has nothing at rest */
            if (o == s || atomic_load_explicit(o->due, memory_order_relaxed) > now) continue;
            sluice__spin_lock(&o->mu);
            if (reclaim_some(t, o, now > o->now ? now : o->now)) got = reserve(t);
            sluice__inproc_publish_due(o);
            sluice__spin_unlock(&o->mu);
        }
        sluice__spin_lock(&s->mu);
        *relocked = true;
        if (got) return true;
    }
    if ((t->flags & SLUICE_TABLE_EVICT_LRU) && sluice__inproc_evict_one(t, s)) { /* its place is ours */
        sluice__inproc_publish_due(s);
        return true;
    }
    /* refused: when is the first held key expected at rest?  Exactly, for
     * one shard; else the earliest shard's next wheel slot, a lower bound */
    uint64_t first = UINT64_MAX;
    if (t->nshards == 1) {
        first = sluice__inproc_wheel_first_rest(t, s, 256);
        sluice__inproc_publish_due(s);
    } else {
        for (unsigned k = 0; k < t->nshards; k++) {
            uint64_t d = atomic_load_explicit(&t->dues[k], memory_order_relaxed);
            if (d < first) first = d;
        }
    }
    *retry = first == UINT64_MAX ? -1 : first > now ? (int64_t)sluice__min_u64(first - now, INT64_MAX) : 1;
    return false;
}

/* ---- the optimistic read (head comment) --------------------------------- */

/* Whether a request for a key that shard s does not hold (1 <= permits <=
 * capacity) is refused for want of room, decided without writing: the
 * locked path (make_room) could find no room -- the table is full, every
 * shard it would sweep has nothing due by its time, and the policy does not
 * evict.  *retry receives the hint the locked path would give (from the
 * same lower bounds; where it would first have moved a wheel on, its bound
 * may be the later one).  False: let the locked path decide.  One shard
 * alone is left to it: its hint is exact, from a look through the wheel. */
static bool full_read(sluice_table *t, shard *s, uint64_t now_ns, int64_t *retry)
{
    if ((t->flags & SLUICE_TABLE_EVICT_LRU) || t->nshards == 1) return false;
    const uint64_t sn = GET(&s->now);
    const uint64_t now = now_ns > sn ? now_ns : sn; /* s->now, had we locked */
    const bool shard_full = GET(&s->count) >= s->ecap;
    if (!shard_full && atomic_load_explicit(&t->keys, memory_order_relaxed) < t->max_keys)
        return false;
    /* make_room sweeps s, and the others only when s has room: with s full,
     * only s's due counts; else the earliest of all.  The hint is the
     * earliest of all either way.  One array, a few lines, no branch. */
    uint64_t m0 = UINT64_MAX, m1 = UINT64_MAX; /* nshards: a power of two, >= 2 */
    for (_Atomic uint64_t *d = t->dues, *end = d + t->nshards; d != end; d += 2) {
        const uint64_t d0 = atomic_load_explicit(&d[0], (memory_order)SLUICE__SEQ_LOAD);
        const uint64_t d1 = atomic_load_explicit(&d[1], (memory_order)SLUICE__SEQ_LOAD);
        m0 = d0 < m0 ? d0 : m0;
        m1 = d1 < m1 ? d1 : m1;
    }
    const uint64_t first = m0 < m1 ? m0 : m1;
    const uint64_t mine = shard_full ? atomic_load_explicit(s->due, (memory_order)SLUICE__SEQ_LOAD)
                                     : first;
    if (mine <= now) return false;
    *retry = first == UINT64_MAX ? -1
             : first > now       ? (int64_t)sluice__min_u64(first - now, INT64_MAX)
                                 : 1;
    return true;
}

enum { READ_DONE, READ_LOCK, READ_TORN, READ_ADMIT };

/* What a read that found an admission of a held key decided: its slot,
 * configuration and new state (decide_read stores it if it can upgrade). */
typedef struct readout {
    uint32_t at;
    uint64_t was[2]; /* the state read */
    uint64_t w[2];   /* the state decided */
} readout;

/* One read of the decision of a request (packed state, key <= INLINE_KEY
 * bytes, k as for read_find): the lookup and the state, made of GET loads,
 * and the decision on a copy.  READ_DONE with *ok (and *res, *full: refused
 * for want of room) for a refusal or a probe; READ_LOCK for what only the
 * lock may decide (an admission, a new key); READ_TORN for a torn run.
 * The decision is on two halves in the ranges of the packed form. */
static inline __attribute__((always_inline)) int
read_once(sluice_table *t, shard *s, uint64_t h, const ekey *k, size_t keylen,
          uint64_t permits, uint64_t now_ns, sluice_result *res, bool *ok, bool *full,
          readout *ro)
{
    const uint32_t at = read_find(t, s, h, k, keylen);
    if (at == RUN_TORN) return READ_TORN;
    sluice__state st;
    *full = false;
    const tcfg *c = read_cfg(t, s, at);
    if (!c) return READ_LOCK;
    if (at != UINT32_MAX) {
        if (!read_words(ent(t, s, at), ro->was)) return READ_TORN;
        *ok = decide_words(&c->pf, ro->was, now_ns, permits, res, ro->w);
        if (ro->w[0] == ro->was[0] && ro->w[1] == ro->was[1])
            return READ_DONE; /* only an admission writes */
        ro->at = at;
        return READ_ADMIT;
    }
    if (permits == 0 || permits > c->pf.capacity) { /* as decide_locked: no key made */
        sluice__state_init(&c->pf, &st);
        *ok = sluice__decide(&c->pf, &st, now_ns, permits, UINT64_MAX, res);
        return READ_DONE;
    }
    int64_t retry;
    if (!full_read(t, s, now_ns, &retry)) return READ_LOCK;
    *ok = false;
    *full = true;
    if (res) {
        sluice__deny(res, 0, retry);
        res->error = SLUICE_EFULL;
    }
    return READ_DONE;
}

/* An admission of a held key found by a read of shard e's shard s that
 * began at sequence v (head comment, "Admissions without the lock"):
 * freeze the state read (a compare-and-swap of its time half from the one
 * read to it with the frozen bit: no other admission can then store, and
 * holders wait), load the count half -- still the one read, or another
 * admission came between -- then the sequence: still v -- no holder has
 * run since the read began, none can act on e until it thaws -- store the
 * new state, count half first, then the time half, which thaws it; else
 * thaw it as it was.  An 8-byte freeze, not a 16-byte one of the pair: a
 * locked cmpxchg16b costs 3-4 ns more a decision in a burst
 * (docs/benchmarks.md), and any 64-bit machine has the 8-byte one.
 * Returns 1 stored, 0 when the state is no longer the one read (another
 * admission came first), -1 when a holder ran (the lock decides). */
static int commit_free(shard *s, entry *e, uint64_t v, const readout *ro)
{
    uint64_t *sw = ent_state(e), was = ro->was[0];
    if (!__atomic_compare_exchange_n(&sw[0], &was, ro->was[0] | FROZEN, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
        return 0;
    const bool same = __atomic_load_n(&sw[1], __ATOMIC_ACQUIRE) == ro->was[1];
    if (!same || atomic_load_explicit(&s->mu.seq, memory_order_seq_cst) != v) {
        uint64_t f = ro->was[0] | FROZEN; /* fails if a holder stored since */
        __atomic_compare_exchange_n(&sw[0], &f, ro->was[0], false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
        return same ? -1 : 0;
    }
    __atomic_store_n(&sw[1], ro->w[1], __ATOMIC_RELEASE);
    __atomic_store_n(&sw[0], ro->w[0], __ATOMIC_RELEASE);
    return 1;
}

/* The decision of one request on shard s (unlocked), made without writing
 * anything shared: READ_DONE with *ok (and *res) when it is a refusal or a
 * probe, read consistently (the proof is in the head comment); READ_LOCK
 * when the caller must decide under the lock (an admission, a new key, a
 * request that is not readable()); READ_TORN when READ_TRIES reads met a
 * holder or a change: then under the lock, refusals and probes first. */
static inline __attribute__((always_inline)) int
decide_read(sluice_table *t, shard *s, uint64_t h, const void *key, size_t keylen,
            uint64_t permits, uint64_t now_ns, sluice_result *res, bool *ok)
{
    if (!readable(t, keylen)) return READ_LOCK;
    ekey k;
    pad_key(&k, key, keylen);
    for (unsigned n = 0; n < READ_TRIES; n++) {
        const uint64_t v = sluice__spin_read_begin(&s->mu);
        if (v & 1) { /* held: wait without writing */
            sluice__backoff(n);
            continue;
        }
        bool full;
        readout ro;
        const int rc = read_once(t, s, h, &k, keylen, permits, now_ns, res, ok, &full, &ro);
        if (rc == READ_ADMIT) { /* store what was read, if nothing moved since */
            const int got = commit_free(s, ent(t, s, ro.at), v, &ro);
            if (got > 0) return READ_DONE;
            if (got < 0) return READ_LOCK;
            sluice__backoff(n); /* another admission came first: read again */
            continue;
        }
        if (rc == READ_LOCK) return READ_LOCK;
        if (rc == READ_TORN || !sluice__spin_read_valid(&s->mu, v)) continue;
        if (full) sluice__count(&t->full, 1, false);
        return READ_DONE;
    }
    return READ_TORN;
}

/* The decision of one request on shard s, which the caller has locked (and
 * finds locked again on return: make_room may unlock it on the way).  The
 * key (not NULL; keylen <= SLUICE_MAX_KEY_BYTES) has the hash h, and
 * now_ns <= INT64_MAX.  This is the whole of a decision but the
 * lock and the counters: the single call and the burst both come here, so
 * a burst decides exactly as separate calls would. */
static bool decide_locked(sluice_table *t, shard *s, uint64_t h, const void *key,
                          size_t keylen, uint64_t permits, uint64_t now_ns,
                          sluice_result *res, bool read_first)
{
    bool ok = false;
    if (read_first) { /* a refusal or a probe moves nothing, as if read */
        ekey k;
        bool full;
        readout ro;
        pad_key(&k, key, keylen);
        if (read_once(t, s, h, &k, keylen, permits, now_ns, res, &ok, &full, &ro) == READ_DONE) {
            if (full) sluice__count(&t->full, 1, false);
            return ok;
        }
    }
    if (now_ns > s->now) PUT(&s->now, now_ns);
    /* no wheel upkeep: keys at rest stay in place until their room is
     * wanted (make_room; head comment, "Reclaiming keys at rest") */
    for (;;) {
        uint32_t i = find(t, s, h, key, keylen);
        bool fresh = false;
        const tcfg *c;
        if (i != UINT32_MAX) {
            if (!(c = sluice__inproc_ent_cfg(t, s, i))) { /* no memory to carry a ring over */
                if (res) sluice__fail(res, SLUICE_ENOMEM);
                break;
            }
        } else if (c = sluice__inproc_key_cfg(t, s, (uint32_t)h, key, keylen),
                   permits == 0 || permits > c->pf.capacity) {
            /* a fresh limiter admits exactly 1 .. capacity permits (L for
             * the windows): this request is a probe or a refusal, which
             * changes nothing, so the key is not made */
            sluice__state st;
            sluice__state_init(&c->pf, &st);
            ok = sluice__decide(&c->pf, &st, now_ns, permits, UINT64_MAX, res);
            break;
        } else if ((s->count >= s->ecap ||
                    atomic_load_explicit(&t->keys, memory_order_relaxed) >= t->max_keys) &&
                   (i = sluice__inproc_reuse_at_rest(t, s, h, key, keylen, c)) != UINT32_MAX) {
            fresh = true; /* in the place of a key at rest */
        } else {
            int64_t retry = -1;
            bool relocked;
            bool room = make_room(t, s, s->now, &retry, &relocked);
            if (relocked && find(t, s, h, key, keylen) != UINT32_MAX) {
                /* another thread made the key while s was unlocked */
                if (room) atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
                continue;
            }
            if (room && s->count >= s->ecap) { /* filled up while unlocked */
                atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
                room = false;
            }
            if (!room) {
                sluice__count(&t->full, 1, false);
                if (res) {
                    sluice__deny(res, 0, retry);
                    res->error = SLUICE_EFULL;
                }
                break;
            }
            i = sluice__inproc_new_entry(t, s, h, key, keylen, c);
            if (i == UINT32_MAX) {
                atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
                if (res) sluice__fail(res, SLUICE_ENOMEM);
                break;
            }
            fresh = true;
        }
        entry *e = ent(t, s, i);
        if (t->pf.packed) {
            uint64_t w[2], out[2];
            held_words(e, w);
            ok = decide_words(&c->pf, w, now_ns, permits, res, out);
            if (out[0] != w[0] || out[1] != w[1]) put_words(e, out); /* only an admission writes */
        } else {
            ok = sluice__decide(&c->pf, ent_state(e), now_ns, permits, UINT64_MAX, res);
        }
        if (fresh) {
            sluice__inproc_wheel_file(t, s, i, ent_rest_at(t, s, i));
            sluice__inproc_publish_due(s);
        }
        break;
    }
    return ok;
}

/* Whether a table refuses `key` of keylen bytes outright (SLUICE_EINVAL):
 * a NULL key of some length.  Any length is a key (key_view). */
static inline bool bad_key(const void *key, size_t keylen)
{
    return !key && keylen;
}

/* Whether a key is stored as its digest (and decided on its own in a
 * burst). */
static inline bool long_key(size_t keylen) { return keylen > SLUICE_MAX_KEY_BYTES; }

/* One decision on a valid key (not NULL), counted by the caller; a
 * refusal is noted in the sketch of the keys refused most (its own bytes,
 * as the sketch truncates them).  Always inlined: its prefetches must stay
 * in sluice_table_try_acquire_at (tests/check_prefetch.sh). */
static inline __attribute__((always_inline)) bool
decide_one(sluice_table *t, const void *key, size_t keylen, uint64_t permits, uint64_t now_ns,
           sluice_result *res)
{
    const void *const raw = key;
    const size_t rawlen = keylen;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    const uint64_t h = key_hash(t, key, keylen);
    shard *s = shard_for(t, h);
    prefetch_run(t, s, h);
    bool ok;
    const int rc = decide_read(t, s, h, key, keylen, permits, now_ns, res, &ok);
    if (rc != READ_DONE) {
        sluice__spin_lock(&s->mu);
        ok = decide_locked(t, s, h, key, keylen, permits, now_ns, res,
                           rc == READ_TORN);
        sluice__spin_unlock(&s->mu);
    }
    if (!ok) sluice__table_note(t, raw, rawlen, keylen == rawlen ? h : 0);
    return ok;
}

static inline __attribute__((always_inline)) bool
local_try_acquire_at(sluice_table *t, const void *key, size_t keylen, uint64_t permits,
                     uint64_t now_ns, sluice_result *res)
{
    if (bad_key(key, keylen)) {
        if (res) sluice__fail(res, SLUICE_EINVAL);
        sluice__count(&t->counters, permits, false);
        if (key) sluice__table_note(t, key, keylen, 0);
        return false;
    }
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    if (!key) key = ""; /* keylen is 0: no pointer arithmetic on NULL below */
    rd_tls *rd = rd_enter();
    const bool ok = decide_one(t, key, keylen, permits, now_ns, res);
    rd_exit(rd);
    sluice__count(&t->counters, permits, ok);
    return ok;
}

bool sluice_table_try_acquire_at(sluice_table *t, const void *key, size_t keylen,
                                 uint64_t permits, uint64_t now_ns, sluice_result *res)
{
    if (t->ops != &sluice__inproc_ops)
        return t->ops->try_acquire_at(t->place, key, keylen, permits, now_ns, res);
    return local_try_acquire_at(t, key, keylen, permits, now_ns, res);
}

bool sluice_table_try_acquire(sluice_table *t, const void *key, size_t keylen,
                              uint64_t permits, sluice_result *res)
{
    return sluice_table_try_acquire_at(t, key, keylen, permits,
                                       sluice__clock_now(cur_clock(t)), res);
}

uint64_t sluice_table_now_ns(const sluice_table *t)
{
    return t ? sluice__clock_now(cur_clock(t)) : 0;
}

/* ---- bursts ------------------------------------------------------------- */

/* A burst is decided as DPDK's bulk hash lookup decides: (1) hash the keys,
 * a chunk of BURST_CHUNK requests at a time, a chunk ahead of the
 * deciding; (2) ask for the lines of each lookup (prefetch_run) BURST_AHEAD
 * requests before it is decided; (3) decide each request in index order as
 * the single call does: decide_read(), else decide_locked().  The window of
 * (2) slides across the whole burst, so that about BURST_AHEAD lookups'
 * lines are on their way while a request is decided: their misses overlap
 * one another, instead of following one another as they do from call to
 * call.  (They do not all hide behind the deciding: on the machine
 * measured, the lines' time comes on top of the work; docs/benchmarks.md.)
 * Why a window and not a whole chunk's lines at once: a prefetch waits for
 * a fill buffer (about 16 lines in flight per core), and an admission's
 * locked compare-and-swap waits for the prefetches before it -- so the
 * core must never ask for much more than it can have in flight.  Asked for
 * BURST_AHEAD requests ahead, right after a decision, the lines have a
 * whole decision's time to get their fill buffers before the next locked
 * instruction (bench_table --burst, three lines a lookup: the chunk's lines
 * at once 5.7x the floor, the window 5.2x, 8 to 12 ahead best; with four
 * lines 4.7x; with five, 10 to 14 ahead alike).  Consecutive requests on
 * one shard that take the lock share one hold of it, at most to the end
 * of a chunk: in one thread that is the same sequence of steps on the
 * shard, and to other threads it is one of the orders separate calls
 * could have had (a request on the shard held is decided under that hold,
 * not read).  The burst holds one lock at a time, as a single call does,
 * and hashes no key while it holds one.  Its decisions are counted once,
 * when it returns (a tally, not a stripe update per decision). */
#define BURST_CHUNK 32 /* requests hashed at a time; the ring holds two chunks */
#define BURST_AHEAD 12 /* requests whose lines are asked for ahead (< BURST_CHUNK) */
#define BURST_RING (2 * BURST_CHUNK)

/* burst_hash() one key at a time. */
static void burst_hash_each(const sluice_table *t, size_t from, size_t to,
                            const void *const keys[], const size_t keylens[], uint64_t hash[],
                            shard *sh[])
{
    for (size_t i = from; i < to; i++) {
        const size_t r = i % BURST_RING;
        if (bad_key(keys[i], keylens[i]) || long_key(keylens[i])) {
            sh[r] = NULL; /* refused, or decided alone (decide_one) */
            continue;
        }
        hash[r] = sluice__siphash13(t->seed, keys[i] ? keys[i] : "", keylens[i]);
        sh[r] = shard_for(t, hash[r]);
    }
}

/* Pass 1 for requests [from, to) of a burst (to - from <= BURST_CHUNK,
 * from a multiple of 8), into the ring: each key's hash and shard, NULL for
 * a bad key.  Eight keys whose lengths have as many whole words (as
 * fixed-size keys do) are hashed at once, in vectors (siphash.c). */
static void burst_hash(const sluice_table *t, size_t from, size_t to, const void *const keys[],
                       const size_t keylens[], uint64_t hash[], shard *sh[])
{
    if (!keys || !keylens) {
        for (size_t i = from; i < to; i++) sh[i % BURST_RING] = NULL;
        return;
    }
    size_t i = from;
    for (; i + 8 <= to; i += 8) {
        const size_t words = keylens[i] / 8;
        bool same = true;
        for (size_t l = i; l < i + 8; l++)
            same &= keys[l] != NULL && !long_key(keylens[l]) && keylens[l] / 8 == words;
        if (!same) {
            burst_hash_each(t, i, i + 8, keys, keylens, hash, sh);
            continue;
        }
        sluice__siphash13_x8(t->seed, &keys[i], &keylens[i], &hash[i % BURST_RING]);
        for (size_t l = i; l < i + 8; l++)
            sh[l % BURST_RING] = shard_for(t, hash[l % BURST_RING]);
    }
    burst_hash_each(t, i, to, keys, keylens, hash, sh);
}

size_t sluice_table_try_acquire_burst_at(sluice_table *t, size_t n, const void *const keys[],
                                         const size_t keylens[], const uint64_t permits[],
                                         uint64_t now_ns, sluice_result results[])
{
    if (t->ops != &sluice__inproc_ops)
        return t->ops->burst_at(t->place, n, keys, keylens, permits, now_ns, results);
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    rd_tls *rd = rd_enter();
    size_t allowed = 0;
    sluice__tally tally = {0}; /* counted once, at the end */
    uint64_t hash[BURST_RING];
    shard *sh[BURST_RING]; /* NULL: a bad key (SLUICE_EINVAL) */
    shard *held = NULL;
    /* the first chunk eight keys at a time, the first lines asked for as
     * soon as their keys are hashed: the hashing of the rest overlaps them */
    for (size_t g = 0; g < n && g < BURST_CHUNK; g += 8) {
        const size_t end = n - g < 8 ? n : g + 8;
        burst_hash(t, g, end, keys, keylens, hash, sh);
        for (size_t j = g; j < end && j < BURST_AHEAD; j++)
            if (sh[j]) prefetch_run(t, sh[j], hash[j]);
    }
    for (size_t i = 0; i < n; i++) {
        if (i % BURST_CHUNK == 0) { /* a chunk begins: the next one is hashed */
            if (held) sluice__spin_unlock(&held->mu);
            held = NULL;
            const size_t next = i + BURST_CHUNK;
            if (next < n)
                burst_hash(t, next, n - next < BURST_CHUNK ? n : next + BURST_CHUNK, keys,
                           keylens, hash, sh);
        }
        const size_t r = i % BURST_RING;
        const uint64_t p = permits ? permits[i] : 1;
        sluice_result *res = results ? &results[i] : NULL;
        bool ok, noted = false;
        if (!sh[r] && keys && keylens && keys[i] && long_key(keylens[i])) {
            if (held) sluice__spin_unlock(&held->mu); /* one lock at a time */
            held = NULL;
            ok = decide_one(t, keys[i], keylens[i], p, now_ns, res); /* noted there */
            noted = true;
        } else if (!sh[r]) {
            if (res) sluice__fail(res, SLUICE_EINVAL);
            ok = false;
        } else {
            const void *key = keys[i] ? keys[i] : "";
            if (held && sh[r] != held) { /* one lock at a time */
                sluice__spin_unlock(&held->mu);
                held = NULL;
            }
            /* on the shard held, read under the hold: as decide_read */
            const int rc = sh[r] == held ? (readable(t, keylens[i]) ? READ_TORN : READ_LOCK)
                                         : decide_read(t, sh[r], hash[r], key, keylens[i], p,
                                                       now_ns, res, &ok);
            if (rc != READ_DONE) {
                if (sh[r] != held) {
                    held = sh[r];
                    sluice__spin_lock(&held->mu);
                }
                ok = decide_locked(t, held, hash[r], key, keylens[i], p, now_ns, res,
                                   rc == READ_TORN);
            }
        }
        const size_t ahead = i + BURST_AHEAD; /* 2: the window moves on */
        if (ahead < n && sh[ahead % BURST_RING])
            prefetch_run(t, sh[ahead % BURST_RING], hash[ahead % BURST_RING]);
        sluice__tally_add(&tally, p, ok);
        allowed += ok;
        if (!ok && !noted && keys && keylens && (keys[i] || !keylens[i])) { /* as one call */
            if (held) sluice__spin_unlock(&held->mu);
            held = NULL;
            sluice__table_note(t, keys[i], keylens[i], sh[r] ? hash[r] : 0);
        }
    }
    if (held) sluice__spin_unlock(&held->mu);
    rd_exit(rd);
    sluice__count_tally(&t->counters, &tally);
    return allowed;
}

void sluice_table_stats_get(const sluice_table *t, sluice_table_stats *out)
{
    t->ops->stats_get(t->place, out);
}

static void local_stats_get(const void *place, sluice_table_stats *out)
{
    const sluice_table *t = place;
    sluice_table *m = (sluice_table *)t; /* loads only */
    out->keys = atomic_load_explicit(&m->keys, memory_order_relaxed);
    out->reclaimed = atomic_load_explicit(&m->reclaimed, memory_order_relaxed);
    out->evicted = atomic_load_explicit(&m->evicted, memory_order_relaxed);
    sluice_stats full;
    sluice__counters_read(&m->full, &full);
    out->refused = full.requests_denied;
    sluice__counters_read(&t->counters, &out->decisions);
}

/* ---- the keys refused most (topk.c) -------------------------------------- */

int sluice_table_set_top(sluice_table *t, size_t counters, size_t max_key_bytes)
{
    if (!t || t->ops->lacks || atomic_load_explicit(&t->top, memory_order_acquire))
        return SLUICE_EINVAL;
    if (counters < 1 || counters > SLUICE_TOP_COUNTERS_MAX || max_key_bytes < 1 ||
        max_key_bytes > SLUICE_TOP_KEY_MAX)
        return SLUICE_EINVAL;
    sluice__topk *k = sluice__topk_new(t->shard_bits, counters, max_key_bytes, t->seed);
    if (!k) return SLUICE_ENOMEM;
    sluice__topk *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&t->top, &none, k, memory_order_release,
                                                 memory_order_relaxed)) {
        sluice__topk_free(k); /* another thread set one first */
        return SLUICE_EINVAL;
    }
    return 0;
}

int sluice_table_top_refused(const sluice_table *t, sluice_top_entry out[], size_t max, size_t *n)
{
    if (n) *n = 0;
    if (!t || !n || (!out && max > 0)) return SLUICE_EINVAL;
    sluice__topk *k = atomic_load_explicit(&((sluice_table *)t)->top, memory_order_acquire);
    if (!k) return SLUICE_ENOENT;
    sluice__topk_read(k, out, max, n);
    return 0;
}

void sluice__table_note(sluice_table *t, const void *key, size_t keylen, uint64_t h)
{
    sluice__topk *k = atomic_load_explicit(&t->top, memory_order_acquire);
    if (!k) return;
    if (!key) key = "";
    /* h = 0: the caller has no hash (a key too long for the table, whose
     * sketch hashes only its prefix); a real hash of 0 is computed again */
    if (h == 0 && keylen <= SLUICE_TOP_KEY_MAX) h = sluice__siphash13(t->seed, key, keylen);
    sluice__topk_note(k, key, keylen, h);
}

/* ---- this placement's operations (skeleton.h) ------------------------------ */

static size_t local_burst_at(void *place, size_t n, const void *const keys[],
                             const size_t keylens[], const uint64_t permits[], uint64_t now_ns,
                             sluice_result results[])
{
    return sluice_table_try_acquire_burst_at(place, n, keys, keylens, permits, now_ns, results);
}

static bool local_try_one(void *place, const void *key, size_t keylen, uint64_t permits,
                          uint64_t now_ns, sluice_result *res)
{
    return local_try_acquire_at(place, key, keylen, permits, now_ns, res);
}

const sluice__table_ops sluice__inproc_ops = {
    .name = "in-process",
    .try_acquire_at = local_try_one,
    .burst_at = local_burst_at,
    .remove = sluice__inproc_local_remove,
    .peek_at = sluice__inproc_local_peek_at,
    .stats_get = local_stats_get,
    .scan = sluice__inproc_local_scan,
    .reconfigure_at = sluice__inproc_local_reconfigure_at,
    .close = NULL,
    .lacks = NULL,
};
