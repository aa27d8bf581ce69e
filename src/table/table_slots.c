/* table_slots.c -- the in-process table's slots: probing in Robin Hood
 * order, the reclaiming wheel, and the life of an entry (table.c has the
 * overview; inproc.h the layout's types and the inlined accessors).
 *
 * Map:  entries and slots (find_probes, slot_move, slot_place, slot_open,
 *       slot_close); the wheel (wheel_unlink, wheel_file, publish_due,
 *       wheel_first_rest, wheel_visit, wheel_advance, sweep_all); entry
 *       life (drop_entry, new_entry, put_entry, reuse_at_rest, evict_one).
 *
 *   slot     48 bytes   meta: the key length, the wheel list the entry is
 *                       in, and its probe distance (below); 0 = empty.
 *                       Wheel links (slot numbers) and the number of the
 *                       configuration the state is under (16 bytes with
 *                       meta); the key inline when <= 16 bytes, else a
 *                       pointer to a copy and the key's 64-bit hash (16);
 *                       the state in its packed 16-byte form (the latest
 *                       time and one count: limiter.c).  States that do
 *                       not pack (sliding-log and sliding-wheel, whose
 *                       rings live on the heap, and rare extreme specs)
 *                       take a whole sluice__state: 80-byte slots.
 *
 * Linear probing in Robin Hood order: the keys of a run lie in the order of
 * their home slots (home_of: the hash's low 32 bits scaled to the array),
 * so a miss stops at the first slot closer to its home than the probe is.
 * An insertion opens its place by moving the rest of the run one slot on;
 * a removal moves it one slot back (no tombstones, no rehash); each entry
 * moved takes its wheel links along (its neighbours are told its new slot)
 * and its reservation stamp, once the table has made a reservation
 * (table_settle.c, "Which key"), and the shard's `gen` counts the moves.
 * The probe distance is kept in 5 bits of meta, exact below DIST_SAT; a
 * distance of DIST_SAT or more (a run that long is rare at a load of 0.8,
 * and hash flooding cannot aim at it: the seed is secret) is found again
 * from the key's hash when needed.  Load factor at most 0.8: a token-bucket
 * key with a 16-byte key costs 48 / 0.8 = 60 bytes (8 / 0.8 = 10 more for
 * its stamp once the table has made a reservation).  The arrays are sized
 * for max_keys when the table is made (with a margin per shard for an
 * uneven spread: 6 standard deviations) and come from calloc, so pages
 * are touched only as keys arrive; the table never allocates more,
 * whatever keys arrive (but the stamps, once).
 *
 * Hashing: SipHash-1-3 under a 128-bit seed from getrandom(), per table
 * (a burst hashes eight keys at once, in vectors: siphash.c).  A key longer
 * than SLUICE_MAX_KEY_BYTES is held by its 16-byte digest (SipHash-2-4-128
 * under a key derived from the seed) with the length code DIGEST_LEN, which
 * no key held as itself has (key_view; docs/decisions.md, "Long keys").
 *
 * Reclaiming keys at rest.  A key whose limiter is at rest (sluice__rest_at
 * has passed) carries no information and can go.  Each shard files its
 * entries in a hierarchical timing wheel of 8 levels x 64 slots over ticks
 * of 2^20 ns (about 1 ms), an instance of the core the timer wheel uses
 * too (src/timer/wheel_core.h: where a tick is filed, which slot comes next),
 * with lists of its own: 4-byte links in the entry, under the shard lock.
 *
 *   level  slot width      reach            level  slot width   reach
 *     0    1 tick (1 ms)   67 ms              4    4.8 h        12.7 d
 *     1    67 ms           4.3 s              5    12.7 d       2.2 y
 *     2    4.3 s           4.6 min            6    2.2 y        143 y
 *     3    4.6 min         4.9 h              7    143 y        9100 y
 *
 * (2^63 ns is 2^43 ticks, inside the 48 bits of the eight levels: nothing
 * is ever beyond the last level.)  An entry is filed at the time it would
 * come to rest; a later admission moves that time on without touching the
 * wheel (the hot path does no wheel work).  When the wheel reaches the
 * entry, it is reclaimed if at rest, else re-filed at its current rest
 * time -- each re-filing is paid for by the admissions that caused it.
 *
 * A key at rest stays where it is until its room is wanted.  The table's
 * memory is reserved for max_keys keys anyway, so dropping a key the moment
 * it rests buys nothing until a new key needs its place; and a key that
 * comes back (many clients, each sending now and then) is then found in
 * place and decided on its state, which at rest decides as a fresh
 * limiter's would -- an admission without the lock, one miss -- instead
 * of being inserted again (a Robin Hood run moved, the wheel linked: twice
 * the cost; bench/README.md, "bench_table --sparse").  So no decision does
 * wheel upkeep; the wheel is advanced only when a new key finds no room --
 * its shard at ecap, or the table at max_keys.  Then the key's own place
 * is looked at first (reuse_at_rest): when the slot where it would go in
 * Robin Hood order, or the one before, holds a key at rest, that key is
 * reclaimed there and the new one takes its slot -- no entry moves, which
 * in a full table would be a run on each side.  Else make_room:
 * reclaim_some advances the wheel a visit at a time until it reclaims one
 * key or has caught up with `now` (a reclaimed entry's removal moves its
 * run back a slot: a walk along a list that drops entries follows the next
 * one to its new slot, after_close), first in the key's shard and then in
 * the others, before the policy refuses or evicts.  Occupancy bitmaps let the
 * wheel jump over empty slots, so an idle gap of years costs a few steps.
 * Since an entry is never filed later than its real rest time, advancing
 * the wheel to `now` (and looking through the current tick's slot, sweep_all)
 * finds every key at rest.  stats.keys counts the keys held, at rest or
 * not: exact (a key is counted from the reserve that makes it to the drop
 * that ends it), never above max_keys.  A composite decision is no
 * different: its lock (sluice__table_lock) does no wheel work, and its
 * make reclaims only when the new key finds no room.  No decision scans the
 * table; sluice_table_scan walks it a bounded step per call
 * (table_keys.c).  SLUICE_TABLE_RECLAIM_WHEN_FULL, which asked for this,
 * is now what every table does (the flag is accepted and changes nothing).
 *
 * Time: each shard's clock for reclaiming is the latest time any request
 * decided under its lock showed it (refusals and probes move nothing, their
 * time included, and admissions made without the lock move nothing but
 * their entry).  A key dropped at rest loses its own latest time: a later
 * request for it with an earlier time than that key had seen starts a fresh
 * limiter at the earlier time, which can admit earlier than the contract
 * would.  This needs callers whose times run backwards across the rest of a
 * key, and a table full enough to want that key's place; until it fills,
 * every key is exact whatever the order of times across keys.
 */
#include "table/inproc.h"

/* ---- entries and slots -------------------------------------------------- */

uint64_t sluice__inproc_ent_t_last(const sluice_table *t, entry *e)
{
    uint64_t w[2];
    if (t->pf.packed) {
        held_words(e, w);
        return w[0];
    }
    return ((sluice__state *)ent_state(e))->t_last;
}


/* Move the entry of slot `from` to empty slot `to`, at probe distance d;
 * its wheel list follows it (links are slot numbers; its stamp follows in
 * slot_open and slot_close, once a shift).  Field by field, with PUT for
 * what the optimistic read reads. */
static void slot_move(const sluice_table *t, shard *s, uint32_t from, uint32_t to, uint32_t d)
{
    entry *a = ent(t, s, from), *b = ent(t, s, to);
    const uint32_t m = a->meta;
    b->next = a->next;
    b->prev = a->prev;
    PUT(&b->cfg, a->cfg);
    PUT(&b->key.w[0], a->key.w[0]);
    PUT(&b->key.w[1], a->key.w[1]);
    if (t->pf.packed) {
        uint64_t w[2];
        held_words(a, w);
        put_words(b, w);
    } else { /* never read without the lock */
        memcpy(ent_state(b), ent_state(a), sizeof(sluice__state));
    }
    PUT(&b->meta, (m & ~(0x1fu << 27)) | dist_code(d) << 27);
    if (META_WHERE(m)) {
        if (b->prev) ent(t, s, b->prev - 1)->next = to + 1;
        else s->heads[META_WHERE(m) - 1] = to + 1;
        if (b->next) ent(t, s, b->next - 1)->prev = to + 1;
    }
}

/* Where a new key of home slot `home` goes in Robin Hood order (after the
 * keys of its home and of earlier ones): the first slot empty or held by a
 * key of a later home; *dist receives its probe distance there. */
/* An empty slot for a new key of home slot `home`, in Robin Hood order:
 * after the keys of its home and of earlier ones, before those of later
 * ones -- the rest of the run moves one slot on.  *dist receives its probe
 * distance.  There is an empty slot: count < ecap < cap. */
static uint32_t slot_place(const sluice_table *t, const shard *s, uint32_t home, uint32_t *dist)
{
    uint32_t p = home, d = 0, code;
    while ((code = META_CODE(ent(t, s, p)->meta)) != 0 && !dist_lt(t, s, p, code, d)) {
        if (++p == s->cap) p = 0;
        d++;
    }
    *dist = d;
    return p;
}

/* The entries' stamps (table_settle.c, "Which key") follow a shift of
 * the run a .. b (cyclically): with `on` (slot_open), the entries of a ..
 * b - 1 went one slot on; else (slot_close) those of a + 1 .. b one slot
 * back.  Only in a table that has made a reservation: out of line, so
 * that the others' shifts pay one test. */
static __attribute__((noinline, cold)) void stamps_shift(const sluice_table *t, uint64_t *sp,
                                                        const shard *s, uint32_t a, uint32_t b,
                                                        bool on)
{
    uint64_t *st = stamp_at(t, sp, s, 0);
    if (on) {
        for (uint32_t x = b; x != a;) {
            const uint32_t f = x ? x - 1 : s->cap - 1;
            st[x] = st[f];
            x = f;
        }
    } else {
        for (uint32_t x = a; x != b;) {
            const uint32_t j = x + 1 == s->cap ? 0 : x + 1;
            st[x] = st[j];
            x = j;
        }
    }
}

static uint32_t slot_open(const sluice_table *t, shard *s, uint32_t home, uint32_t *dist)
{
    uint32_t d;
    const uint32_t p = slot_place(t, s, home, &d);
    uint32_t q = p;
    while (META_CODE(ent(t, s, q)->meta))
        if (++q == s->cap) q = 0;
    uint64_t *sp = stamps_of(t);
    if (__builtin_expect(sp != NULL, 0)) stamps_shift(t, sp, s, p, q, true);
    while (q != p) { /* from the run's end back to p: each moves one on */
        const uint32_t f = q ? q - 1 : s->cap - 1;
        slot_move(t, s, f, q, slot_dist(t, s, f) + 1);
        q = f;
    }
    s->gen++;
    *dist = d;
    return p;
}

/* Empty held slot i (its entry out of the wheel, its key and state freed):
 * the rest of its run moves one slot back, down to a key at its home or an
 * empty slot.  Returns the slot emptied last: the entries that were in
 * slots i + 1 .. it (cyclically) are now one slot back. */
static uint32_t slot_close(const sluice_table *t, shard *s, uint32_t i)
{
    const uint32_t first = i;
    for (;;) {
        const uint32_t j = i + 1 == s->cap ? 0 : i + 1;
        const uint32_t code = META_CODE(ent(t, s, j)->meta);
        if (code <= 1) break; /* empty, or at its home */
        slot_move(t, s, j, i, slot_dist(t, s, j) - 1);
        i = j;
    }
    uint64_t *sp = stamps_of(t);
    if (__builtin_expect(sp != NULL, 0)) stamps_shift(t, sp, s, first, i, false);
    PUT(&ent(t, s, i)->meta, 0);
    s->gen++;
    return i;
}

/* Where the entry of slot x is after slot_close(i) returned last. */
static inline uint32_t after_close(const shard *s, uint32_t x, uint32_t i, uint32_t last)
{
    const uint32_t off = x >= i ? x - i : x + s->cap - i;
    const uint32_t run = last >= i ? last - i : last + s->cap - i;
    if (off == 0 || off > run) return x;
    return x ? x - 1 : s->cap - 1;
}

/* ---- the wheel ---------------------------------------------------------- */

/* The wheel's level choice, occupancy words, event search and cascade step
 * are src/timer/wheel_core.h; here are its lists and what a visit does.  Ticks
 * are rest >> TICK_SHIFT <= 2^44, and cur < 2^43 (times are at most
 * 2^63 - 1): a tick never lies beyond the last level. */

void sluice__inproc_wheel_unlink(const sluice_table *t, shard *s, uint32_t i)
{
    entry *e = ent(t, s, i);
    uint32_t where = META_WHERE(e->meta);
    if (!where) return;
    uint32_t li = where - 1;
    if (e->prev) ent(t, s, e->prev - 1)->next = e->next;
    else s->heads[li] = e->next;
    if (e->next) ent(t, s, e->next - 1)->prev = e->prev;
    if (!s->heads[li]) sluice__wcore_vacate(&s->wheel, li);
    PUT(&e->meta, e->meta & ~WHERE_BITS);
    e->next = e->prev = 0;
}

/* The list that holds time `rest` (ns). */
static inline uint32_t list_for(const shard *s, uint64_t rest)
{
    return sluice__wcore_list(&s->wheel, rest >> TICK_SHIFT);
}

/* Whether list li is the level-0 slot of the current tick. */
static inline bool list_is_cur(const shard *s, uint32_t li)
{
    return li == ((uint32_t)s->wheel.cur & (SLOTS - 1));
}

/* File entry i at time `rest` (ns). */
void sluice__inproc_wheel_file(const sluice_table *t, shard *s, uint32_t i, uint64_t rest)
{
    uint32_t li = sluice__wcore_file(&s->wheel, rest >> TICK_SHIFT);
    if (list_is_cur(s, li) && s->cur_min > rest) s->cur_min = rest;
    entry *e = ent(t, s, i);
    PUT(&e->meta, (e->meta & ~WHERE_BITS) | ((li + 1) << 17));
    e->prev = 0;
    e->next = s->heads[li];
    if (e->next) ent(t, s, e->next - 1)->prev = i + 1;
    s->heads[li] = i + 1;
}

void sluice__inproc_publish_due(shard *s)
{
    uint64_t ev;
    uint32_t li = sluice__wcore_next(&s->wheel, &ev);
    uint64_t due = li == SLUICE__WCORE_NONE ? UINT64_MAX : ev << TICK_SHIFT;
    /* only the current tick's own slot has a sharper bound (a cascade
     * pending at cur would come first, as the core orders ties) */
    if (li != SLUICE__WCORE_NONE && list_is_cur(s, li) && s->cur_min > due) due = s->cur_min;
    atomic_store_explicit(s->due, due, (memory_order)SLUICE__SEQ_STORE);
}

/* The earliest time (ns) at which an entry of the shard comes to rest, or
 * UINT64_MAX if none; entries filed too early on the way are filed again
 * (ordinary wheel upkeep).  After at most `budget` visits it settles for a
 * lower bound: the start of the earliest slot. */
uint64_t sluice__inproc_wheel_first_rest(sluice_table *t, shard *s, uint32_t budget)
{
    for (;;) {
        uint64_t ev;
        uint32_t li = sluice__wcore_next(&s->wheel, &ev);
        if (li == SLUICE__WCORE_NONE) return UINT64_MAX;
        uint64_t best = UINT64_MAX;
        for (uint32_t n = s->heads[li]; n;) {
            uint32_t i = n - 1;
            n = ent(t, s, i)->next;
            if (budget-- == 0) return ev << TICK_SHIFT;
            uint64_t rest = ent_rest_at(t, s, i);
            if (list_for(s, rest) == li) {
                if (rest < best) best = rest;
            } else { /* it rests later than its slot: move it on */
                sluice__inproc_wheel_unlink(t, s, i);
                sluice__inproc_wheel_file(t, s, i, rest);
            }
        }
        if (best != UINT64_MAX) return best;
    }
}

uint32_t sluice__inproc_drop_entry(sluice_table *t, shard *s, uint32_t i);

/* Handle one entry of a slot that has become due at tick cur: reclaim it if
 * at rest by `now`, else file it again.  Returns true if reclaimed. */
static bool wheel_visit(sluice_table *t, shard *s, uint32_t i, uint64_t now)
{
    sluice__inproc_wheel_unlink(t, s, i);
    uint64_t rest = ent_rest_at(t, s, i);
    if (rest <= now) {
        sluice__inproc_drop_entry(t, s, i);
        atomic_fetch_add_explicit(&t->reclaimed, 1, memory_order_relaxed);
        return true;
    }
    sluice__inproc_wheel_file(t, s, i, rest);
    return false;
}

/* Advance the wheel so that every tick before tick(now) is handled, doing
 * at most *budget entry visits (UINT32_MAX: no limit).  Returns the number
 * of entries reclaimed.  Each step empties one list at a tick < tick(now):
 * a coarse slot (its entries go down to finer levels, or are reclaimed),
 * or a tick's level-0 slot, whose entries have all come to rest by now
 * unless an admission moved them on (then they are filed later).  A step
 * cut short by the budget is taken up again by the next call. */
uint32_t sluice__inproc_wheel_advance(sluice_table *t, shard *s, uint64_t now, uint32_t *budget)
{
    const uint64_t target = now >> TICK_SHIFT;
    uint32_t freed = 0;
    while (s->wheel.cur < target && *budget) {
        uint64_t was = s->wheel.cur;
        uint32_t li = sluice__wcore_step(&s->wheel, target - 1);
        if (li == SLUICE__WCORE_NONE) {
            s->wheel.cur = target;
            s->cur_min = 0;
            break;
        }
        if (s->wheel.cur != was) s->cur_min = 0;
        while (s->heads[li] && *budget) {
            if (*budget != UINT32_MAX) (*budget)--;
            freed += wheel_visit(t, s, s->heads[li] - 1, now);
        }
    }
    return freed;
}

/* Every key of the shard at rest by `now`, reclaimed: the wheel advanced to
 * now, then the current tick's slots looked through. */
uint32_t sluice__inproc_sweep_all(sluice_table *t, shard *s, uint64_t now)
{
    uint32_t unlimited = UINT32_MAX;
    uint32_t freed = sluice__inproc_wheel_advance(t, s, now, &unlimited);
    const uint64_t cur = s->wheel.cur;
    if (cur != now >> TICK_SHIFT) return freed;
    uint32_t li;
    while ((li = sluice__wcore_step(&s->wheel, cur)) != SLUICE__WCORE_NONE &&
           sluice__wcore_level(li) >= 1) { /* cascade into tick cur */
        while (s->heads[li]) freed += wheel_visit(t, s, s->heads[li] - 1, now);
    }
    const uint32_t slot0 = (uint32_t)cur & (SLOTS - 1);
    if (s->cur_min > now) return freed; /* nothing there is at rest yet */
    uint64_t min = UINT64_MAX;
    for (uint32_t n = s->heads[slot0]; n;) {
        uint32_t i = n - 1;
        n = ent(t, s, i)->next;
        uint64_t rest = ent_rest_at(t, s, i);
        if (rest <= now) {
            sluice__inproc_wheel_unlink(t, s, i);
            const uint32_t last = sluice__inproc_drop_entry(t, s, i);
            if (n) n = after_close(s, n - 1, i, last) + 1; /* it may have moved back */
            atomic_fetch_add_explicit(&t->reclaimed, 1, memory_order_relaxed);
            freed++;
        } else if ((rest >> TICK_SHIFT) > cur) { /* rests later: move it on, so
                                                  * the slot's bound stays below
                                                  * every later slot's start */
            sluice__inproc_wheel_unlink(t, s, i);
            sluice__inproc_wheel_file(t, s, i, rest);
        } else if (rest < min) {
            min = rest;
        }
    }
    s->cur_min = min;
    return freed;
}

/* ---- entry life --------------------------------------------------------- */

static uint32_t drop_entry_keep(sluice_table *t, shard *s, uint32_t i, bool keep_place);

uint32_t sluice__inproc_drop_entry(sluice_table *t, shard *s, uint32_t i)
{
    return drop_entry_keep(t, s, i, false);
}

/* Drop the entry of slot i; with keep_place, its place in t->keys passes
 * to the caller (no other thread can take it in between).  Returns
 * slot_close's answer: which entries moved back a slot. */
static uint32_t drop_entry_keep(sluice_table *t, shard *s, uint32_t i, bool keep_place)
{
    entry *e = ent(t, s, i);
    sluice__inproc_wheel_unlink(t, s, i);
    if (t->pf.packed) { /* an admission that froze it before the hold ends first */
        uint64_t w[2];
        held_words(e, w);
    }
    if (!t->pf.packed) sluice__state_fini(&t->pf, ent_state(e));
    if (META_LEN(e->meta) > INLINE_KEY) sluice__free(e->key.far.ext);
    const uint32_t last = slot_close(t, s, i);
    PUT(&s->count, s->count - 1);
    if (!keep_place) atomic_fetch_sub_explicit(&t->keys, 1, memory_order_relaxed);
    return last;
}

static void put_entry(sluice_table *t, shard *s, uint32_t i, uint32_t d, uint64_t h,
                      const void *key, size_t keylen, const tcfg *c, unsigned char *copy);

/* A new entry for key (hash h), in its place of the probe run (the caller
 * has reserved a key in t->keys); returns its slot, or UINT32_MAX when
 * memory runs out. */
uint32_t sluice__inproc_new_entry(sluice_table *t, shard *s, uint64_t h, const void *key, size_t keylen,
                          const tcfg *c)
{
    unsigned char *copy = NULL;
    if (keylen > INLINE_KEY) {
        copy = sluice__malloc(key_bytes(keylen));
        if (!copy) return UINT32_MAX;
        memcpy(copy, key, key_bytes(keylen));
    }
    uint32_t d;
    const uint32_t i = slot_open(t, s, home_of(s, (uint32_t)h), &d);
    put_entry(t, s, i, d, h, key, keylen, c, copy);
    PUT(&s->count, s->count + 1);
    return i;
}

/* Key (hash h; its copy when longer than INLINE_KEY) into slot i at probe
 * distance d, a fresh state under configuration c: field by field, with PUT
 * for what the optimistic read reads (no memset over it). */
static void put_entry(sluice_table *t, shard *s, uint32_t i, uint32_t d, uint64_t h,
                      const void *key, size_t keylen, const tcfg *c, unsigned char *copy)
{
    entry *e = ent(t, s, i);
    e->next = e->prev = 0;
    PUT(&e->cfg, c->id);
    ekey k;
    pad_key(&k, key, keylen);
    if (copy) {
        k.far.ext = copy;
        k.far.hash = h;
    }
    PUT(&e->key.w[0], k.w[0]);
    PUT(&e->key.w[1], k.w[1]);
    sluice__state st;
    sluice__state_init(&c->pf, &st);
    store_state(t, &c->pf, e, &st);
    PUT(&e->meta, (uint32_t)keylen | dist_code(d) << 27);
    /* a new entry, with no stamp yet: no reservation made on an older one
     * settles here (table_settle.c) */
    uint64_t *sp = stamps_of(t);
    if (__builtin_expect(sp != NULL, 0)) *stamp_at(t, sp, s, i) = 0;
}

/* Room wanted for a new key (hash h) in shard s, and its place in Robin
 * Hood order -- the slot where it would go, or the one before (which
 * holds a key of its home or an earlier one) -- is held by a key at rest
 * by s->now: that key's slot is the one wanted.  It is reclaimed there and
 * the new key takes the slot, its place in t->keys and in s->count: no
 * entry moves (slot_open and slot_close would move the runs on both sides
 * of a full table, each moved entry's wheel neighbours told).  Either
 * slot keeps the order: the keys before are of homes no later than the new
 * key's, those after of homes no earlier.  Returns the slot, or UINT32_MAX
 * (no such key at rest, or no memory for a long key's copy: make_room
 * then). */
uint32_t sluice__inproc_reuse_at_rest(sluice_table *t, shard *s, uint64_t h, const void *key,
                              size_t keylen, const tcfg *c)
{
    uint32_t d;
    const uint32_t p = slot_place(t, s, home_of(s, (uint32_t)h), &d);
    for (uint32_t k = 0; k < 2 && k <= d; k++) {
        const uint32_t q = k == 0 ? p : p ? p - 1 : s->cap - 1;
        entry *e = ent(t, s, q);
        if (!META_CODE(e->meta) || ent_rest_at(t, s, q) > s->now) continue;
        unsigned char *copy = NULL;
        if (keylen > INLINE_KEY) {
            if (!(copy = sluice__malloc(key_bytes(keylen)))) return UINT32_MAX;
            memcpy(copy, key, key_bytes(keylen));
        }
        sluice__inproc_wheel_unlink(t, s, q);
        if (t->pf.packed) { /* an admission that froze it before the hold ends first */
            uint64_t w[2];
            held_words(e, w);
        } else {
            sluice__state_fini(&t->pf, ent_state(e));
        }
        if (META_LEN(e->meta) > INLINE_KEY) sluice__free(e->key.far.ext);
        put_entry(t, s, q, d - k, h, key, keylen, c, copy);
        s->gen++; /* another key in the slot: a composite's parts look again */
        atomic_fetch_add_explicit(&t->reclaimed, 1, memory_order_relaxed);
        return q;
    }
    return UINT32_MAX;
}

/* Evict the least recently used of a sample of the shard's entries; its
 * place in t->keys passes to the caller. */
bool sluice__inproc_evict_one(sluice_table *t, shard *s)
{
    if (s->count == 0) return false;
    uint32_t best = UINT32_MAX;
    uint64_t best_t = UINT64_MAX;
    for (int k = 0; k < LRU_SAMPLES; k++) {
        s->rng ^= s->rng << 13;
        s->rng ^= s->rng >> 7;
        s->rng ^= s->rng << 17;
        uint32_t i = (uint32_t)(((s->rng >> 32) * s->cap) >> 32);
        while (!META_CODE(ent(t, s, i)->meta))
            if (++i == s->cap) i = 0;
        uint64_t tl = sluice__inproc_ent_t_last(t, ent(t, s, i));
        if (tl < best_t) {
            best_t = tl;
            best = i;
        }
    }
    drop_entry_keep(t, s, best, true);
    atomic_fetch_add_explicit(&t->evicted, 1, memory_order_relaxed);
    return true;
}
