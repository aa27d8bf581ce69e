/* region_table.c -- a table in memory that several processes share.
 *
 * nginx workers, gunicorn, PHP-FPM: N processes with a table each get N
 * times the limit.  This table lives in a region the caller maps into every
 * process (nginx's shared zone, mapped before fork; or a named region,
 * shm_open or a file, that unrelated processes attach), and every process
 * decides on the same keys.  The algorithms are the library's rows
 * (internal.h) on the same states as everywhere else; what is here is the
 * placement, the locking and the crash argument.
 *
 * Map.  This file: slots (writing a key's state: the two copies and the
 * flip), configurations (a handle's parsed profiles), shards (lock,
 * repair, find, drop, sweep, evict, room), decisions under the lock
 * (sluice__rt_decide_locked), composite decisions (sluice__rtable_find,
 * _make, _store, ...), peeks (sluice__rtable_peek_at), changing the spec
 * (sluice__rtable_reconfigure_at).  The placement's other files:
 * region_who.c (identities, lock words, the counter stripes: Locking and
 * Statistics), region_read.c (refusals and probes read without the lock,
 * and their proof; sluice__rtable_try_acquire_at), region_keys.c (remove,
 * stats, scan), region_settle.c (reservations: reserve, cancel, settle),
 * region_attach.c (layout, initialisation, attach, open; the
 * ops table the public functions call through), region.h (the layout's
 * types and what the files share).  What both placements share --
 * sizing, the seqlock read and its proof, the dispatch -- is skeleton.h's
 * and base/seqlock.h's.
 *
 * Layout: no pointers, only offsets from the region's start (each process
 * maps it at its own address); nothing is allocated after creation.
 *
 *   header   512 bytes   init word, magic, layout version (6), the
 *                        canonical spec it was made with (its origin:
 *                        the layout's), max_keys, max_key_bytes, flags,
 *                        the sizes below, the SipHash seed, the boot id,
 *                        the count of keys; on a line of their own, the
 *                        current configuration's epoch, the changes' lock
 *                        word and floor (below), where the configurations
 *                        lie
 *   shards   128 bytes   S of them (one per 256 keys, up to 64): a lock
 *                        word, a sequence word (odd while held: the read,
 *                        region_read.c), the count of keys, a lower bound on the
 *                        earliest rest time, the latest time an admission
 *                        showed it, the admission counters
 *   slots    stride      S x cap of them; shard k's are a linear-probing
 *                        array of cap = ecap * 4/3 + 1 slots for at most
 *                        ecap keys (load <= 0.75; ecap = max_keys / S plus
 *                        6 standard deviations of a random spread, as
 *                        table.c), the key's home ((tag * cap) >> 32) and
 *                        shard (the top bits) from its SipHash-1-3 under
 *                        the region's seed, so chosen keys cannot flood a
 *                        probe run in any process
 *
 *   slot:  0  header word   kind (empty, live, tombstone) | the active copy
 *                           (0/1) | key length | tag (hash's low 32 bits)
 *          8  epochs        the configuration each copy's state is under
 *                           (32 bits each: copy 0's low, copy 1's high)
 *         16  key           max_key_bytes, rounded up to 16 (16 at least:
 *                           a longer key is held by its 16-byte digest,
 *                           length code SLUICE__DIGEST_LEN; table.h)
 *          .  copy 0, copy 1 the state, twice: 16 bytes each when it packs
 *                           (limiter.c's 16-byte form), for the window
 *                           logs the ring's header (t_last, base, head,
 *                           len) and a summary of the ring for the read
 *                           (its newest entry and 8 oldest: 176 bytes),
 *                           else a whole sluice__state (48)
 *          .  ring          sliding-log and sliding-wheel: ring_cap
 *                           entries of 16 bytes, ring_cap the power of two
 *                           above min(N, L) (window_log.c: at most min(N,
 *                           L) entries are ever held), at most 65536
 *   configs  144 bytes   CFG_K = 8 of them, after the slots: the last
 *                        configurations (epoch, time of the change, the
 *                        canonical spec), epoch e at e % CFG_K
 *   gens       4 bytes   S x cap of them, after the configurations: each
 *                        slot's generation, moved when a key is made in it
 *                        (before the header publishes it: crash argument
 *                        2), so that a reservation's settle finds the very
 *                        entry it was made on (region_settle.c)
 *   stripes   64 bytes   NSTRIPES = 128 + 1 of them, last (from the next
 *                        multiple of 64): the counts of refusals, probes
 *                        and refusals for want of room, a line per thread
 *                        (Statistics, region_who.c), the last one shared
 *
 * So a token-bucket key with keys of up to 16 bytes costs a 64-byte slot,
 * about 108 bytes a key all-in (sluice_table_region_size at 10^5 keys); a
 * sliding-log 10/s key about 1 KiB, a sliding-log 100/s key 3 KiB.
 *
 * Crash argument (a process killed by SIGKILL at any instruction).  What a
 * process writes into the region, and why every prefix of it is a valid
 * table:
 *
 *  1. A decision on a held key writes the inactive copy of its state, then
 *     flips the active bit of the slot's header word: one aligned 8-byte
 *     store (release order).  Killed before the flip, the key keeps its old
 *     state (the decision is lost); after it, the new.  No holder reads the
 *     inactive copy (a read without the lock may, as it becomes inactive
 *     under it: that read's recheck fails).  The window logs also write their ring: a new
 *     entry past the held ones (the ring's capacity exceeds the most it
 *     holds, so that place is outside what the old header covers), or the
 *     newest entry's running total in place (one 8-byte store); killed
 *     before the flip, the old header then counts that admission's permits
 *     (the lost decision was charged, never under-counted).
 *  2. A new key: its bytes and its first state (copy 0) are written into a
 *     slot whose header says empty or tombstone, then the header is stored
 *     live: one store.  Before it, nothing reads those bytes.
 *  3. Dropping a key (remove, reclaiming, eviction) stores its header as a
 *     tombstone, then turns tombstones back into empty slots from the
 *     dropped one backwards while the slot after is empty: each of those
 *     stores leaves a valid probe array (a tombstone followed by an empty
 *     slot ends every probe that reaches it, as an empty slot does).  No
 *     key ever moves (no Robin Hood shifting, whose half-done shift could
 *     not be told from a finished one).
 *  4. Counts: the shard's count of keys and admission counters are
 *     written after the store they count, a refusal's count in its
 *     thread's stripe after the read that decided it (one 8-byte store per
 *     count); the region's count of keys (max_keys) is taken before a new
 *     key is stored and given back after a key is dropped.  A kill between
 *     can leave them off by one.
 *
 *  5. The shard's sequence: odd from just after the lock to just before
 *     the unlock.  A holder killed between leaves it odd (the read,
 *     region_read.c, then goes to the lock); killed outside, even, with nothing of the
 *     hold half-done.  The waiter that takes the lock over stores it odd
 *     (the same value when it is: it never goes down), and its unlock
 *     stores it even, 2 past.
 *
 * So a killed process leaves its shard's lock held and, at worst, its own
 * decision lost and the counts off.  The waiter that takes the lock from
 * the dead holder repairs the shard before using it: counts the live slots
 * again, forgets the rest-time bound (it sweeps at its next need), and for
 * the window logs commits each key's state again (region_read.c: the summaries).
 * Then, with no lock held, it locks every shard in order (repairing any
 * other that a dead process holds) and sets the region's count of keys to
 * the sum of the shards' counts, exact again since nothing changes them
 * while every shard is held.  Keys other than the one being decided are
 * never written by a decision, so no other key is touched; the key being
 * decided keeps its last complete state.
 *
 * A handle parses the current configuration at attach, and a new one
 * (after a change of spec) at its first decision under it, under the
 * lock.  A composite decision (below) still holds the shard locks of its
 * region keys, refusals included: it must judge every limit at one
 * instant.
 *
 * Damage (include/sluice.h, "What a damaged region can do").  Processes
 * trust each other, but what one reads from the region is checked before it
 * is used as a length, an index, a count of steps or a holder, so that a
 * damaged region gives wrong answers, never a crash, a hang, growth or a
 * write outside it.  Offsets and sizes come from the handle's own layout
 * (made from the arguments; the header's copies are compared at attach,
 * cfg_off among them, and never used).  A slot's key length above
 * max_key_bytes is no key (scan); a probe run stops at cap slots; a free
 * slot that the counts promised and the probe does not find refuses the
 * key (no_slot: the place given back, the shard recounted); a key whose
 * epoch is ahead of the region's, or CFG_K or more behind (the floor keeps
 * it within), is decided under the current configuration without a
 * carry-over (key_load); a ring's head and length are cut to its capacity
 * (state_load); a configuration's text that does not fit the layout is
 * read as the origin's (prof_fits); a handle keeps CFG_K parsed
 * configurations and those retired meanwhile (prof), whatever epochs it
 * sees; a lock word whose start time is 0 while its pid's /proc answers is a damaged word, taken over (gone: every process of a
 * region sees /proc, or none).  A word naming a live process at its true
 * start time cannot be told from a holder: it stalls its shard, as a
 * SIGSTOPped holder does.  The header records the maker's pid namespace
 * (the inode of /proc/self/ns/pid); attaching from another is refused (its
 * pids would name other processes).  An init word of 0 over a header that
 * is not zero is refused, not initialised over.  sluice_table_open makes
 * its object with O_EXCL, never through a symbolic link, and refuses one
 * that is not a regular file, is another user's, or is writable by others;
 * its flock is waited on for at most 10 s.
 *
 * Composite decisions (composite.c holds, judges, commits, releases; the
 * functions are near the end).  A composite holds the shard locks of its
 * region keys first, ordered by (region identity, shard) -- the identity is
 * the 128-bit random seed in the header, the same in every process however
 * it maps the region, so every process takes shard locks in one order and
 * no cycle of waiters can form across processes; then its in-process limits
 * by address (a region lock is never awaited while an in-process one is
 * held, so threads waiting on each other inside one process cannot close a
 * cycle through the region either).  Then, with every limit held: the
 * keys are found and judged on copies (the window logs measure their ring
 * without writing); if every limit allows, new keys are made -- each
 * published at once with a fresh state (crash argument 2: a key at rest) --
 * then each key's decided state is committed as a single decision commits
 * it (crash argument 1); if any step refuses, the made keys are dropped
 * (crash argument 3).  Room for a new key: the shard is swept only when no
 * other part of the call holds it, and the policy evicts only after the
 * other shards were swept with nothing held, as for single decisions.
 *
 * Dead holders during a composite: each shard lock it waits for is taken
 * over from a dead holder and repaired as above, whatever else the call
 * holds (a repair touches only that shard); the region's count of keys is
 * resynchronised after the call has released everything (resync takes
 * every shard, so it must hold nothing).  A composite killed while holding
 * several shard locks leaves each to be taken over alone.  Killed during
 * its commit, it leaves the keys before the kill charged and the rest not,
 * each key whole (one flip each): that one request's permits lost on some
 * of its limits -- a request charged and never served, never an admission
 * the contract would refuse -- plus, at worst, a fresh key it made (at
 * rest: reclaimable) and the counts that the repair sets right.
 *
 * Changing the spec (sluice__rtable_reconfigure_at; reconfigure.c's rule,
 * docs/decisions.md 3.8).  The region is the source of truth: processes
 * hold handles, each with the profiles it parsed, and a change made
 * through any handle must reach all of them -- nginx's old workers keep
 * deciding on the same region during a graceful reload.  So the region
 * keeps the configuration: epoch E (the number of changes so far) and the
 * last CFG_K configurations with the time of each change.  A change, under
 * the changes' lock word (taken over from a dead changer like a shard
 * lock): parses and checks the new spec against the current one (the same
 * algorithm and the checks of reconfigure.c; a packed origin's 16-byte
 * copies must still hold it; a window log's min(N', L') + 2 must fit the
 * rings the region was made with: one entry a carry-over may add for
 * retired permits, one an admission writes past the held ones), writes
 * configuration E + 1 in its place, then publishes it by storing the
 * epoch (release), then forgets every shard's rest-time bound (rest times
 * may come sooner).  Nothing else is visited.
 *
 * Every decision loads the epoch once (acquire; a word only changes
 * write, so it stays in every core's cache) after locking its shard, and
 * finds the handle's parsed profile of that epoch (a tag check; parsed from
 * the region the first time, under a handle mutex).  A key whose copy says
 * an older epoch e first carries its state over every change after e, in
 * order, each at its time (sluice__reconfigure_state: the carry-over a
 * single limiter makes, clamped to the key's latest admission), and
 * commits that (crash argument 1: one flip; killed before it, the key is
 * carried again next time, the same way).  New keys start under E.  So
 * every key is decided exactly as if each change had been applied to it at
 * its time, in every process.
 *
 * Forgetting: configuration E + 1 takes the place of E + 1 - CFG_K.  The
 * header's floor is a lower bound on every key's epoch; when it would be
 * forgotten (floor <= E + 1 - CFG_K), the change first brings every key of
 * every shard forward to E (one shard locked at a time) and sets floor = E.
 * So a key's epochs, and those of any decision holding a shard lock, are
 * always remembered -- exactly, at the cost of one pass over the slots
 * every CFG_K - 1 changes; a handle's parsed profile of epoch e is
 * replaced (by e + CFG_K) only once no shard holder can be under e.
 * Epochs are 32-bit per copy: a region takes 2^32 - 2 changes.  A ring
 * full after several changes that each lengthen the window (no admission
 * between) merges its two oldest entries before a carry-over (the older
 * permits then count at the later slot: never fewer counted).
 *
 * Reclaiming keys at rest: lazily, when a new key finds its shard (or the
 * table) full: the shard's slots are swept for keys whose rest time has
 * passed, unless its lower bound on the earliest rest time (kept by every
 * new key; admissions only move rest times later) says none can be; the
 * other shards are swept too (one at a time, nothing held) before a refusal.
 * Then the policy: refuse (SLUICE_EFULL, with a lower bound on the wait), or
 * with SLUICE_TABLE_EVICT_LRU drop the oldest of 8 sampled keys of the
 * shard.  As SLUICE_TABLE_RECLAIM_WHEN_FULL in table.c: held keys at rest
 * stay counted until room is needed.
 */
#define _GNU_SOURCE
#include "alg/reconfigure.h"
#include "table/hold.h"
#include "table/region.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
/* ---- slots -------------------------------------------------------------- */


/* A fresh state of profile pf for slot s (the window logs' ring is s's). */
static void state_fresh(const sluice__rtable *r, const sluice__profile *pf, unsigned char *s,
                        sluice__state *st)
{
    sluice__state_init(pf, st);
    if (r->L.ring) {
        st->u.log.e = (sluice__log_entry *)(void *)(s + r->L.ring_off);
        st->u.log.cap = r->L.ring_cap;
        st->u.log.fixed = 1;
    }
}



/* The key of a slot: keylen bytes in 8-byte words, the last zero-padded,
 * each stored with PUT (the read compares them with GET). */
static void key_write(const sluice__rtable *r, unsigned char *s, const void *key, size_t keylen)
{
    uint64_t *d = (uint64_t *)(void *)(s + r->L.key_off);
    const unsigned char *k = key;
    keylen = sluice__key_bytes(keylen);
    for (size_t i = 0; i < keylen; i += 8) {
        uint64_t w = 0;
        memcpy(&w, k + i, keylen - i < 8 ? keylen - i : 8);
        PUT(&d[i / 8], w);
    }
}

/* The state of slot s, whose header word is h, under its profile pf. */
static void state_load(const sluice__rtable *r, const sluice__profile *pf, unsigned char *s,
                       uint64_t h, sluice__state *st)
{
    const unsigned char *c = copy_of(r, s, H_ACTIVE(h));
    if (r->L.pf.packed) { /* the layout's form: 16 bytes a copy */
        uint64_t w[2];
        memcpy(w, c, sizeof w);
        sluice__state_unpack(pf, w, st);
    } else if (r->L.ring) {
        rring g;
        memcpy(&g, c, sizeof g);
        state_fresh(r, pf, s, st);
        st->t_last = g.t_last;
        st->u.log.base = g.base;
        st->u.log.hist = (unsigned)(g.hist & 0x7fffffffu); /* any 31 bits decode */
        /* from the region: within the ring, whatever it says */
        st->u.log.head = g.head & (r->L.ring_cap - 1);
        st->u.log.len = g.len <= r->L.ring_cap ? g.len : r->L.ring_cap;
    } else {
        memcpy(st, c, sizeof *st);
    }
}

/* Write st, of profile pf and configuration epoch, into copy c of slot s
 * (not the active one).  region.h's sluice__rt_state_commit, inline on the
 * admission path, calls it and then flips. */
void sluice__rt_state_write(const sluice__rtable *r, const sluice__profile *pf, unsigned char *s,
                            unsigned c, const sluice__state *st, uint32_t epoch)
{
    unsigned char *d = copy_of(r, s, c);
    uint64_t *dw = (uint64_t *)(void *)d;
    if (r->L.pf.packed) { /* word by word, as the read loads them */
        uint64_t w[2];
        sluice__state_pack(pf, st, w);
        PUT(&dw[0], w[0]);
        PUT(&dw[1], w[1]);
    } else if (r->L.ring) {
        const sluice__log *lg = &st->u.log;
        rwords u;
        memset(&u, 0, sizeof u);
        u.g.t_last = st->t_last;
        u.g.base = lg->base;
        u.g.head = lg->head;
        u.g.len = lg->len;
        u.g.hist = lg->hist;
        for (uint32_t i = 0; i < lg->len && i < FRONT; i++)
            u.g.front[i] = lg->e[(lg->head + i) & (lg->cap - 1)];
        if (lg->len) {
            const sluice__log_entry *n = &lg->e[(lg->head + lg->len - 1) & (lg->cap - 1)];
            u.g.newest_slot = n->slot;
            u.g.newest_cum = n->cum;
        }
        for (size_t i = 0; i < RING_WORDS; i++) PUT(&dw[i], u.w[i]);
    } else {
        swords u;
        memset(&u, 0, sizeof u);
        u.st = *st;
        for (size_t i = 0; i < STATE_WORDS; i++) PUT(&dw[i], u.w[i]);
    }
    PUT(epoch_word(s, c), epoch);
}

/* ---- configurations ----------------------------------------------------- */



/* This handle's parsed configuration `epoch` (one the region remembers:
 * between its floor and its epoch; a caller holding a shard lock, or the
 * changes' lock, keeps it remembered), parsed from the region the first
 * time.  A change publishes the epoch after writing the configuration, and
 * an entry is only written again CFG_K changes later, once no key and no
 * holder of a shard lock can be under it any more (the floor). */
/* Whether a profile parsed from the region's text fits its layout, as a
 * change checks it (sluice__rtable_reconfigure_at): the origin's algorithm,
 * 16 bytes of state when the copies are that, a window log's entries in
 * its fixed ring. */
static bool prof_fits(const sluice__rtable *r, const sluice__profile *pf)
{
    if (pf->ops != r->L.pf.ops || (r->L.pf.packed && !pf->packed)) return false;
    return !r->L.ring || sluice__min_u64(pf->slots, pf->limit) < r->L.ring_cap;
}

const rprof *sluice__rt_prof(sluice__rtable *r, uint64_t epoch)
{
    _Atomic(rprof *) *slot = &r->prof[epoch & (CFG_K - 1)];
    rprof *p = atomic_load_explicit(slot, memory_order_acquire);
    if (p && atomic_load_explicit(&p->epoch, memory_order_acquire) == epoch) return p;
    pthread_mutex_lock(&r->prof_mu);
    p = atomic_load_explicit(slot, memory_order_relaxed);
    if (!p || atomic_load_explicit(&p->epoch, memory_order_relaxed) != epoch) {
        rprof *n = sluice__calloc64(sizeof *n);
        rprof *const spare = &r->spare[epoch & (CFG_K - 1)];
        if (!n) { /* no memory: in place, which only the locked paths use */
            n = spare;
            atomic_store_explicit(&n->epoch, UINT64_MAX, memory_order_relaxed);
        }
        const rcfg *c = cfg_at(r, epoch);
        char spec[SLUICE_SPEC_MAX];
        memcpy(spec, c->spec, sizeof spec);
        spec[sizeof spec - 1] = 0;
        /* written by a change that parsed and checked it: it parses and
         * fits the layout (a damaged text that does not is decided under
         * the origin's spec) */
        if (sluice__spec_parse(spec, &n->pf, NULL, 0) != 0 || !prof_fits(r, &n->pf))
            n->pf = r->L.pf;
        n->at = c->at;
        atomic_store_explicit(&n->epoch, epoch, memory_order_release);
        atomic_store_explicit(slot, n, memory_order_release);
        if (p && p != spare) { /* unlinked: retired, then the epoch moves on */
            sluice__retire(&r->retired, &((rprof *)p)->ret, sluice__rd_retire_stamp());
        }
        p = n;
    }
    /* free what no reader section can hold any more */
    sluice__retired_free(&r->retired, offsetof(rprof, ret), sluice__free64, false);
    pthread_mutex_unlock(&r->prof_mu);
    return p;
}

/* Carry st, under configuration `from`, over every change up to `to`, in
 * order, each at its time (reconfigure.c: clamped to the key's latest
 * admission); returns the profile it ends under. */
static const sluice__profile *carry_over(sluice__rtable *r, sluice__state *st, uint64_t from,
                                         uint64_t to)
{
    const sluice__profile *pf = &sluice__rt_prof(r, from)->pf;
    for (uint64_t e = from + 1; e <= to; e++) {
        const rprof *n = sluice__rt_prof(r, e);
        sluice__log *lg = &st->u.log;
        if (r->L.ring && lg->len == lg->cap) {
            /* room for the entry a longer window may add for the permits
             * the ring retired (window_log.c), in a ring that cannot grow:
             * the oldest entry is merged into the next -- its permits then
             * count at the later slot, leaving the window later: never
             * fewer counted (only after several changes that each lengthen
             * the window, with no admission between, can a ring be full) */
            lg->head = (lg->head + 1) & (lg->cap - 1);
            lg->len--;
        }
        sluice__reconfigure_state(pf, &n->pf, st, n->at);
        if (r->L.pf.packed) sluice__reconfigure_fit(&n->pf, st); /* 16 bytes a copy */
        pf = &n->pf;
    }
    return pf;
}

/* The state of slot i of shard k (locked), header *hp, under the current
 * configuration `epoch`: a key under an older one is first carried over
 * the changes it missed, and that committed (crash argument 1).  Returns
 * the profile to decide under; *hp follows the commit. */
const sluice__profile *sluice__rt_key_load(sluice__rtable *r, unsigned char *s, uint64_t *hp,
                                       sluice__state *st, uint64_t epoch)
{
    const uint32_t e = slot_epoch(s, H_ACTIVE(*hp));
    if (e == epoch) {
        const sluice__profile *pf = &sluice__rt_prof(r, epoch)->pf;
        state_load(r, pf, s, *hp, st);
        return pf;
    }
    if (e > epoch || epoch - e >= CFG_K) {
        /* a damaged region: a key's configuration is always one of the
         * CFG_K remembered (the floor), never a later one.  Its state is
         * taken as it is, under the current one -- a wrong answer maybe,
         * never a carry-over of 2^32 steps under the shard lock */
        const sluice__profile *pf = &sluice__rt_prof(r, epoch)->pf;
        state_load(r, pf, s, *hp, st);
        *hp = sluice__rt_state_commit(r, pf, s, *hp, st, (uint32_t)epoch);
        return pf;
    }
    state_load(r, &sluice__rt_prof(r, e)->pf, s, *hp, st);
    const sluice__profile *pf = carry_over(r, st, e, epoch);
    *hp = sluice__rt_state_commit(r, pf, s, *hp, st, (uint32_t)epoch);
    return pf;
}


/* ---- shards ------------------------------------------------------------- */

/* Repair a shard taken from a dead holder (locked): recount it; and for
 * the window logs, commit each key's state again (its own configuration,
 * nothing decided), so that its copy's summary of the ring says what the
 * ring does -- a holder killed after adding permits to the newest entry in
 * place, before its flip (crash argument 1), left the ring charged and the
 * summary not. */
static void repair(sluice__rtable *r, uint32_t k)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < r->L.cap; i++) {
        unsigned char *s = slot_at(r, k, i);
        const uint64_t h = hdr_get(s);
        if (H_KIND(h) != K_LIVE) continue;
        n++;
        if (r->L.ring) {
            const uint32_t e = slot_epoch(s, H_ACTIVE(h));
            const sluice__profile *pf = &sluice__rt_prof(r, e)->pf;
            sluice__state st;
            state_load(r, pf, s, h, &st);
            (void)sluice__rt_state_commit(r, pf, s, h, &st, e);
        }
    }
    atomic_store_explicit(&r->sh[k].count, n, (memory_order)SLUICE__SEQ_STORE);
    atomic_store_explicit(&r->sh[k].due, 0, (memory_order)SLUICE__SEQ_STORE); /* unknown */
}

/* Shard k's lock, found held by region.h's sluice__rt_shard_lock (whose
 * comment says what it does) for process `me`: wait for it, or take it from
 * a dead holder (sluice__rt_lock_word) and repair the shard. */
uint64_t sluice__rt_shard_lock_wait(sluice__rtable *r, uint32_t k, uint64_t me, bool *stolen)
{
    rshard *sh = &r->sh[k];
    const bool dead = sluice__rt_lock_word(&sh->lock, me);
    const uint64_t v = sluice__seq_hold(&sh->seq);
    if (dead) {
        repair(r, k);
        *stolen = true;
    }
    return v;
}

/* After a repair: the region's count of keys, from the shards' (every
 * shard held, nothing held on entry). */
void sluice__rt_resync(sluice__rtable *r)
{
    bool stolen = false;
    uint64_t n = 0;
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        sluice__rt_shard_lock(r, k, &stolen);
        n += atomic_load_explicit(&r->sh[k].count, memory_order_relaxed);
    }
    atomic_store_explicit(&r->h->keys, n, memory_order_relaxed);
    for (uint32_t k = r->L.nshards; k-- > 0;) sluice__rt_shard_unlock(r, k);
}


/* The slot holding key in shard k (locked), or NONE; *freep receives the
 * first reusable slot of the probe (a tombstone, or the empty slot that
 * ended it), NONE when there is none. */
uint32_t sluice__rt_find(const sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                     size_t keylen, uint32_t *freep)
{
    const uint32_t cap = r->L.cap;
    uint32_t i = (uint32_t)(((uint64_t)tag * cap) >> 32), fr = NONE;
    for (uint32_t d = 0; d < cap; d++) {
        unsigned char *s = slot_at(r, k, i);
        const uint64_t h = hdr_get(s);
        const unsigned kind = H_KIND(h);
        if (kind == K_EMPTY) {
            if (fr == NONE) fr = i;
            break;
        }
        if (kind == K_TOMB) {
            if (fr == NONE) fr = i;
        } else if (H_TAG(h) == tag && H_LEN(h) == keylen &&
                   (keylen == 0 || memcmp(s + r->L.key_off, key, sluice__key_bytes(keylen)) == 0)) {
            *freep = fr;
            return i;
        }
        if (++i == cap) i = 0;
    }
    *freep = fr;
    return NONE;
}

/* Drop the key of slot i of shard k (locked): crash argument 3. */
void sluice__rt_drop(sluice__rtable *r, uint32_t k, uint32_t i)
{
    const uint32_t cap = r->L.cap;
    hdr_set(slot_at(r, k, i), K_TOMB);
    bump(&r->sh[k].count, (uint64_t)-1);
    atomic_fetch_sub_explicit(&r->h->keys, 1, memory_order_relaxed);
    if (H_KIND(hdr_get(slot_at(r, k, i + 1 == cap ? 0 : i + 1))) != K_EMPTY) return;
    for (uint32_t n = 0, j = i; n < cap && H_KIND(hdr_get(slot_at(r, k, j))) == K_TOMB; n++) {
        hdr_set(slot_at(r, k, j), K_EMPTY);
        j = j ? j - 1 : cap - 1;
    }
}

/* Drop every key of shard k (locked) at rest by now; the shard's bound on
 * the earliest rest time becomes exact.  Returns the keys dropped. */
static uint32_t sweep(sluice__rtable *r, uint32_t k, uint64_t now)
{
    uint32_t freed = 0;
    uint64_t first = UINT64_MAX;
    const uint64_t epoch = epoch_now(r);
    for (uint32_t i = 0; i < r->L.cap; i++) {
        unsigned char *s = slot_at(r, k, i);
        uint64_t h = hdr_get(s);
        if (H_KIND(h) != K_LIVE) continue;
        sluice__state st;
        const sluice__profile *pf = sluice__rt_key_load(r, s, &h, &st, epoch);
        const uint64_t rest = sluice__rest_at(pf, &st);
        if (rest <= now) {
            sluice__rt_drop(r, k, i);
            bump(&r->sh[k].reclaimed, 1);
            freed++;
        } else if (rest < first) {
            first = rest;
        }
    }
    atomic_store_explicit(&r->sh[k].due, first, (memory_order)SLUICE__SEQ_STORE);
    return freed;
}

/* Drop the least recently admitted of LRU_SAMPLES sampled keys of shard k
 * (locked, holding at least one key). */
static void evict_one(sluice__rtable *r, uint32_t k)
{
    rshard *sh = &r->sh[k];
    const uint32_t cap = r->L.cap;
    uint32_t best = NONE;
    uint64_t best_t = UINT64_MAX;
    for (int n = 0; n < LRU_SAMPLES; n++) {
        sh->rng ^= sh->rng << 13;
        sh->rng ^= sh->rng >> 7;
        sh->rng ^= sh->rng << 17;
        uint32_t i = (uint32_t)(((sh->rng >> 32) * cap) >> 32);
        for (uint32_t d = 0; d < cap; d++, i = i + 1 == cap ? 0 : i + 1) {
            unsigned char *s = slot_at(r, k, i);
            uint64_t h = hdr_get(s);
            if (H_KIND(h) != K_LIVE) continue;
            sluice__state st;
            (void)sluice__rt_key_load(r, s, &h, &st, epoch_now(r));
            if (st.t_last < best_t || best == NONE) {
                best_t = st.t_last;
                best = i;
            }
            break;
        }
    }
    if (best == NONE) return;
    sluice__rt_drop(r, k, best);
    bump(&sh->evicted, 1);
}

/* Take one of the region's max_keys places. */
static bool reserve(sluice__rtable *r)
{
    uint64_t n = atomic_load_explicit(&r->h->keys, memory_order_relaxed);
    do {
        if (n >= r->L.max_keys) return false;
    } while (!atomic_compare_exchange_weak_explicit(&r->h->keys, &n, n + 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

/* Room for a new key in shard k (locked) at time now: a place reserved.
 * Evicts (as the flags say) only when `evict`: after the other shards were
 * swept. */
static bool make_room(sluice__rtable *r, uint32_t k, uint64_t now, bool evict)
{
    rshard *sh = &r->sh[k];
    const uint64_t count = atomic_load_explicit(&sh->count, memory_order_relaxed);
    if (count < r->L.ecap && reserve(r)) return true;
    if (atomic_load_explicit(&sh->due, memory_order_relaxed) <= now && sweep(r, k, now) &&
        atomic_load_explicit(&sh->count, memory_order_relaxed) < r->L.ecap && reserve(r))
        return true;
    if (evict && (r->flags & SLUICE_TABLE_EVICT_LRU) &&
        atomic_load_explicit(&sh->count, memory_order_relaxed)) {
        evict_one(r, k);
        if (atomic_load_explicit(&sh->count, memory_order_relaxed) < r->L.ecap && reserve(r))
            return true;
    }
    return false;
}

/* A place was reserved for a new key in shard k (locked), yet its probe
 * found no free slot: the shard's count said room where there is none (a
 * damaged region).  The place is given back and the shard recounted. */
static void no_slot(sluice__rtable *r, uint32_t k)
{
    atomic_fetch_sub_explicit(&r->h->keys, 1, memory_order_relaxed);
    uint64_t n = 0;
    for (uint32_t i = 0; i < r->L.cap; i++) n += H_KIND(hdr_get(slot_at(r, k, i))) == K_LIVE;
    atomic_store_explicit(&r->sh[k].count, n, (memory_order)SLUICE__SEQ_STORE);
}

/* A lower bound on the wait until some held key comes to rest, or -1. */
int64_t sluice__rt_full_retry(const sluice__rtable *r, uint64_t now)
{
    uint64_t first = UINT64_MAX;
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        uint64_t d = atomic_load_explicit(&r->sh[k].due, memory_order_relaxed);
        if (d < first) first = d;
    }
    if (first == UINT64_MAX) return -1;
    return first > now ? (int64_t)sluice__min_u64(first - now, INT64_MAX) : 1;
}

/* Sweep the shards other than k, one at a time, for keys at rest by now
 * (nothing held on entry). */
void sluice__rt_reclaim_others(sluice__rtable *r, uint32_t k, uint64_t now, bool *stolen)
{
    for (uint32_t o = 0; o < r->L.nshards; o++) {
        if (o == k || atomic_load_explicit(&r->sh[o].due, memory_order_relaxed) > now) continue;
        sluice__rt_shard_lock(r, o, stolen);
        (void)sweep(r, o, now > r->sh[o].now ? now : r->sh[o].now);
        sluice__rt_shard_unlock(r, o);
    }
}

/* ---- decisions ---------------------------------------------------------- */




/* One decision in shard k (locked).  *full: refused for want of room;
 * `evict`: the policy may evict (make_room).  Only an admission, or a new
 * key's request (which may sweep), moves the shard's `now`. */
bool sluice__rt_decide_locked(sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                          size_t keylen, uint64_t permits, uint64_t now, sluice_result *res,
                          bool evict, bool *full)
{
    rshard *sh = &r->sh[k];
    const uint64_t epoch = epoch_now(r); /* with the shard held: sluice__rt_prof() */
    const sluice__profile *pf;
    *full = false;
    uint32_t fr;
    uint32_t i = sluice__rt_find(r, k, tag, key, keylen, &fr);
    sluice__state st;
    if (i != NONE) {
        unsigned char *s = slot_at(r, k, i);
        uint64_t h = hdr_get(s);
        pf = sluice__rt_key_load(r, s, &h, &st, epoch);
        bool ok = sluice__decide(pf, &st, now, permits, UINT64_MAX, res);
        if (ok && permits) { /* only an admission writes */
            sluice__rt_state_commit(r, pf, s, h, &st, (uint32_t)epoch);
            if (now > sh->now) PUT(&sh->now, now);
        }
        return ok;
    }
    pf = &sluice__rt_prof(r, epoch)->pf;
    if (permits == 0 || permits > pf->capacity) { /* a fresh limiter's probe or refusal */
        sluice__state_init(pf, &st);
        return sluice__decide(pf, &st, now, permits, UINT64_MAX, res);
    }
    if (now > sh->now) PUT(&sh->now, now);
    if (!make_room(r, k, sh->now, evict)) {
        *full = true;
        if (res) {
            sluice__deny(res, 0, sluice__rt_full_retry(r, sh->now));
            res->error = SLUICE_EFULL;
        }
        return false;
    }
    (void)sluice__rt_find(r, k, tag, key, keylen, &fr); /* room may have moved the first free slot */
    if (fr == NONE) { /* count < ecap < cap, unless the counts are damaged */
        no_slot(r, k);
        *full = true;
        if (res) {
            sluice__deny(res, 0, -1);
            res->error = SLUICE_EFULL;
        }
        return false;
    }
    unsigned char *s = slot_at(r, k, fr);
    state_fresh(r, pf, s, &st);
    if (!sluice__decide(pf, &st, now, permits, UINT64_MAX, res)) { /* cannot happen */
        atomic_fetch_sub_explicit(&r->h->keys, 1, memory_order_relaxed);
        return false;
    }
    key_write(r, s, key, keylen);
    sluice__rt_state_write(r, pf, s, 0, &st, (uint32_t)epoch);
    gen_bump(r, k, fr);
    hdr_set(s, H_LIVE(tag, keylen, 0)); /* published: crash argument 2 */
    bump(&sh->count, 1);
    const uint64_t rest = sluice__rest_at(pf, &st);
    if (rest < atomic_load_explicit(&sh->due, memory_order_relaxed))
        atomic_store_explicit(&sh->due, rest, (memory_order)SLUICE__SEQ_STORE);
    return true;
}

/* Count a decision: an admission in the region (shard k locked, as it is
 * written anyway), a refusal or a probe in the handle (`sh` unused then). */
/* ---- composite decisions: a key's kind ops (table/hold.h) -------------- */

bool sluice__rtable_key_ok(const sluice__rtable *r, const void *key, size_t keylen)
{
    return key_ok(r, key, keylen);
}

void sluice__rtable_key_view(const sluice__rtable *r, const void **key, size_t *keylen,
                             unsigned char dig[16])
{
    key_view(r, key, keylen, dig);
}

uint32_t sluice__rtable_shard_of(const sluice__rtable *r, const void *key, size_t keylen,
                                 uint64_t *hash, uint64_t id[2])
{
    if (!key) key = "";
    *hash = key_hash(r, key, keylen);
    id[0] = r->h->seed[0];
    id[1] = r->h->seed[1];
    return shard_of(r, *hash);
}

void sluice__rtable_lock(sluice__rtable *r, uint32_t k, uint64_t now_ns, bool *stolen)
{
    sluice__rt_shard_lock(r, k, stolen);
    if (now_ns > r->sh[k].now) PUT(&r->sh[k].now, now_ns);
}

void sluice__rtable_unlock(sluice__rtable *r, uint32_t k) { sluice__rt_shard_unlock(r, k); }

void sluice__rtable_find(sluice__key_hold *pt)
{
    sluice__rtable *r = pt->rt;
    const uint32_t k = pt->rk;
    uint32_t fr;
    const uint32_t i = sluice__rt_find(r, k, (uint32_t)pt->hash, pt->skey, pt->skeylen, &fr);
    pt->repoch = epoch_now(r); /* with the shard held: sluice__rt_prof() */
    pt->created = false;
    pt->h.st = &pt->h.base;
    if (i == NONE) {
        pt->entry = UINT32_MAX;
        pt->h.pf = &sluice__rt_prof(r, pt->repoch)->pf;
        sluice__state_init(pt->h.pf, &pt->h.base);
        return;
    }
    pt->entry = i;
    unsigned char *s = slot_at(r, k, i);
    uint64_t h = hdr_get(s);
    /* a window log's ring stays in the slot */
    pt->h.pf = sluice__rt_key_load(r, s, &h, &pt->h.base, pt->repoch);
}

/* The key is published at once with a fresh state (crash argument 2: a key
 * at rest, which a killed caller leaves reclaimable); the decided state is
 * committed over it by sluice__rtable_store, or the key dropped again. */
int sluice__rtable_make(sluice__key_hold *pt, bool alone, bool evict, int64_t *retry)
{
    sluice__rtable *r = pt->rt;
    const uint32_t k = pt->rk;
    rshard *sh = &r->sh[k];
    const bool room =
        alone ? make_room(r, k, sh->now, evict || r->L.nshards == 1)
              : atomic_load_explicit(&sh->count, memory_order_relaxed) < r->L.ecap && reserve(r);
    if (!room) {
        *retry = sluice__rt_full_retry(r, sh->now);
        return SLUICE_EFULL;
    }
    const void *key = pt->skey;
    const uint32_t tag = (uint32_t)pt->hash;
    uint32_t fr;
    (void)sluice__rt_find(r, k, tag, key, pt->skeylen, &fr); /* room may have moved the first free slot */
    if (fr == NONE) { /* count < ecap < cap, unless the counts are damaged */
        no_slot(r, k);
        *retry = -1;
        return SLUICE_EFULL;
    }
    unsigned char *s = slot_at(r, k, fr);
    state_fresh(r, pt->h.pf, s, &pt->h.base);
    key_write(r, s, key, pt->skeylen);
    sluice__rt_state_write(r, pt->h.pf, s, 0, &pt->h.base, (uint32_t)pt->repoch);
    gen_bump(r, k, fr);
    hdr_set(s, H_LIVE(tag, pt->skeylen, 0));
    bump(&sh->count, 1);
    pt->entry = fr;
    pt->created = true;
    pt->h.st = &pt->h.base;
    return 0;
}

void sluice__rtable_store(sluice__key_hold *pt)
{
    sluice__rtable *r = pt->rt;
    unsigned char *s = slot_at(r, pt->rk, pt->entry);
    /* a window log was decided on its real state (the ring in the slot) */
    const sluice__state *st = r->L.pf.ops->judge ? pt->h.st : &pt->h.tmp;
    sluice__rt_state_commit(r, pt->h.pf, s, hdr_get(s), st, (uint32_t)pt->repoch); /* crash argument 1 */
    if (pt->created) {
        rshard *sh = &r->sh[pt->rk];
        const uint64_t rest = sluice__rest_at(pt->h.pf, st);
        if (rest < atomic_load_explicit(&sh->due, memory_order_relaxed))
            atomic_store_explicit(&sh->due, rest, (memory_order)SLUICE__SEQ_STORE);
    }
}

void sluice__rtable_unmake(sluice__key_hold *pt)
{
    sluice__rt_drop(pt->rt, pt->rk, pt->entry);
    pt->entry = UINT32_MAX;
    pt->created = false;
}

void sluice__rtable_count(sluice__key_hold *pt, uint64_t permits, bool ok, bool full,
                          bool elsewhere)
{
    sluice__rt_count_decision(pt->rt, &pt->rt->sh[pt->rk], permits, ok, full, elsewhere);
}

void sluice__rtable_reclaim(sluice__rtable *r, uint64_t now_ns)
{
    bool stolen = false;
    sluice__rt_reclaim_others(r, NONE, now_ns, &stolen);
    if (stolen) sluice__rt_resync(r);
}

void sluice__rtable_resync(sluice__rtable *r) { sluice__rt_resync(r); }

/* ---- peeks (region_read.c reads; the lock when it cannot tell) ---------- */


/* A peek on a snapshot (snap_state's pf and st), writing nothing: judged on
 * a copy, or for a held window-log key from its summary (ring_read: the
 * probe's room, then the refusal when the permits do not fit); false when
 * the summary cannot tell (the lock judges). */
static bool peek_read(const sluice__rtable *r, const rsnap *sn, const sluice__profile *pf,
                      sluice__state *st, uint64_t now, uint64_t permits, sluice_result *out,
                      sluice_key_state *ks)
{
    if (!sn->found || !r->L.ring) {
        sluice__state tmp;
        sluice__judge(pf, st, &tmp, now, permits, out);
        if (ks && sn->found) {
            ks->last_ns = st->t_last;
            ks->rest_ns = sluice__rest_at(pf, st);
        } else if (ks) {
            memset(ks, 0, sizeof *ks);
        }
        return true;
    }
    bool ok;
    if (!sluice__rt_ring_read(pf, sn, now, 0, out, &ok)) return false;
    const uint64_t room = out->remaining;
    if (permits > room) {
        if (!sluice__rt_ring_read(pf, sn, now, permits, out, &ok)) return false;
    } else if (permits) {
        sluice__allow(out, room - permits, 0);
    }
    if (ks) { /* the rest time needs only the newest entry: a ring of it */
        sluice__log_entry one = {.slot = sn->u.g.newest_slot, .cum = sn->u.g.newest_cum};
        st->u.log.e = &one;
        st->u.log.cap = 1;
        st->u.log.head = 0;
        st->u.log.len = sn->u.g.len ? 1 : 0;
        ks->last_ns = st->t_last;
        ks->rest_ns = sluice__rest_at(pf, st);
        st->u.log.e = NULL;
    }
    return true;
}

static int peek_at(sluice__rtable *r, const void *key, size_t keylen, uint64_t permits,
                   uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    if (!key_ok(r, key, keylen)) {
        if (res) sluice__fail(res, SLUICE_EINVAL);
        if (state) memset(state, 0, sizeof *state);
        return SLUICE_EINVAL;
    }
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint64_t hash;
    const uint32_t k = key_place(r, &key, &keylen, dig, &hash);
    bool stolen = false;
    uint32_t fr;
    sluice_result out = {0};
    sluice__state st, tmp;
    rsnap sn;
    const sluice__profile *rp;
    if (sluice__rt_read_key(r, k, (uint32_t)hash, key, keylen, &sn) && (rp = sluice__rt_snap_state(r, &sn, &st)) &&
        peek_read(r, &sn, rp, &st, now_ns, permits, &out, state)) {
        if (res) *res = out;
        return sn.found ? 0 : SLUICE_ENOENT;
    }
    sluice__rt_shard_lock(r, k, &stolen);
    uint32_t i = sluice__rt_find(r, k, (uint32_t)hash, key, keylen, &fr);
    const uint64_t epoch = epoch_now(r); /* with the shard held: sluice__rt_prof() */
    if (i == NONE) {
        const sluice__profile pf = sluice__rt_prof(r, epoch)->pf; /* a copy: used unlocked */
        sluice__rt_shard_unlock(r, k);
        sluice__state_init(&pf, &st);
        sluice__judge(&pf, &st, &tmp, now_ns, permits, &out);
        if (state) memset(state, 0, sizeof *state);
    } else {
        unsigned char *s = slot_at(r, k, i);
        uint64_t h = hdr_get(s);
        const sluice__profile *pf = sluice__rt_key_load(r, s, &h, &st, epoch);
        /* judged without writing: on a copy, or by the window logs' judge,
         * which only reads the ring */
        sluice__judge(pf, &st, &tmp, now_ns, permits, &out);
        if (state) {
            state->last_ns = st.t_last;
            state->rest_ns = sluice__rest_at(pf, &st);
        }
        sluice__rt_shard_unlock(r, k);
    }
    if (stolen) sluice__rt_resync(r);
    if (res) *res = out;
    return i == NONE ? SLUICE_ENOENT : 0;
}

int sluice__rtable_peek_at(sluice__rtable *r, const void *key, size_t keylen, uint64_t permits,
                           uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    void *rd = sluice__rd_enter(); /* the profile a read finds stays (read_prof) */
    const int rc = peek_at(r, key, keylen, permits, now_ns, res, state);
    sluice__rd_exit(rd);
    return rc;
}


/* ---- changing the spec -------------------------------------------------- */

/* Carry every key of every shard over to configuration `epoch` (the
 * changes' lock held; nothing else).  After it, every key is under epoch. */
static void bring_forward(sluice__rtable *r, uint64_t epoch, bool *stolen)
{
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        sluice__rt_shard_lock(r, k, stolen);
        for (uint32_t i = 0; i < r->L.cap; i++) {
            unsigned char *s = slot_at(r, k, i);
            uint64_t h = hdr_get(s);
            if (H_KIND(h) != K_LIVE || slot_epoch(s, H_ACTIVE(h)) == epoch) continue;
            sluice__state st;
            (void)sluice__rt_key_load(r, s, &h, &st, epoch);
        }
        sluice__rt_shard_unlock(r, k);
    }
}

/* The new spec's profile and canonical text: `spec`, or (spec NULL) the
 * current profile `cur` with one knob changed. */
static int new_spec(const sluice__profile *cur, const char *spec, int knob, uint64_t a,
                    uint64_t b, sluice__profile *to, char canon[SLUICE_SPEC_MAX], char *err,
                    size_t errlen)
{
    char buf[SLUICE_SPEC_MAX];
    int rc;
    if (!spec) {
        if ((rc = sluice__reconfigure_knob(cur, knob, a, b, buf, sizeof buf, err, errlen)) != 0)
            return rc;
        spec = buf;
    }
    if ((rc = sluice__spec_parse(spec, to, err, errlen)) != 0) return rc;
    memset(canon, 0, SLUICE_SPEC_MAX);
    if (sluice__spec_format(to, canon, SLUICE_SPEC_MAX) < 0) {
        sluice__errf(err, errlen, "cannot format the spec \"%s\"", spec);
        return SLUICE_EINVAL;
    }
    return 0;
}

int sluice__rtable_reconfigure_at(sluice__rtable *r, const char *spec, int knob, uint64_t a,
                                  uint64_t b, uint64_t now_ns, char *err, size_t errlen)
{
    sluice__profile to;
    char canon[SLUICE_SPEC_MAX];
    int rc;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    rhead *h = r->h;
    bool stolen = false;
    (void)sluice__rt_lock_word(&h->cfg_lock, sluice__rt_self()); /* a dead changer published nothing, or all */
    const uint64_t epoch = atomic_load_explicit(&h->epoch, memory_order_relaxed);
    const sluice__profile *cur = &sluice__rt_prof(r, epoch)->pf;
    if ((rc = new_spec(cur, spec, knob, a, b, &to, canon, err, errlen)) != 0) goto out;
    if ((rc = sluice__reconfigure_check(cur, &to, err, errlen)) != 0) goto out;
    if (r->L.pf.packed && !to.packed) {
        sluice__errf(err, errlen,
                     "\"%s\" needs more than the 16 bytes of state each key of this region has: "
                     "make a new region", canon);
        rc = SLUICE_EINVAL;
        goto out;
    }
    if (r->L.ring) {
        const uint64_t bound = sluice__min_u64(to.slots, to.limit);
        if (bound > r->L.ring_cap - 2) {
            sluice__errf(err, errlen,
                         "%s keeps up to min(N, L) = %llu ring entries per key; this region's "
                         "rings hold %u (made for \"%s\"), so min(N, L) may be at most %u: "
                         "make a new region",
                         to.ops->name, (unsigned long long)bound, r->L.ring_cap, r->L.spec,
                         r->L.ring_cap - 2);
            rc = SLUICE_EINVAL;
            goto out;
        }
    }
    if (epoch >= EPOCH_MAX) {
        sluice__errf(err, errlen, "too many changes of spec (%u): make a new region", EPOCH_MAX);
        rc = SLUICE_ERANGE;
        goto out;
    }
    /* the new configuration takes the place of epoch + 1 - CFG_K: no key
     * may still be under that one */
    if (epoch + 1 >= CFG_K && h->floor <= epoch + 1 - CFG_K) {
        bring_forward(r, epoch, &stolen);
        h->floor = epoch;
    }
    rcfg *c = cfg_at(r, epoch + 1);
    c->epoch = epoch + 1;
    c->at = now_ns;
    memcpy(c->spec, canon, sizeof c->spec);
    atomic_store_explicit(&h->epoch, epoch + 1, memory_order_release); /* published */
    /* keys may come to rest sooner under the new spec: every shard's lower
     * bound on its rest times is unknown again */
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        sluice__rt_shard_lock(r, k, &stolen);
        atomic_store_explicit(&r->sh[k].due, 0, (memory_order)SLUICE__SEQ_STORE);
        sluice__rt_shard_unlock(r, k);
    }
out:
    atomic_store_explicit(&h->cfg_lock, 0, memory_order_release);
    if (stolen) sluice__rt_resync(r);
    return rc;
}

