/* region_read.c -- a shared table's decisions and peeks, read first
 * without the lock: refusals and probes write nothing shared; an
 * admission, a new key, or a read that met holders READ_TRIES times goes to
 * the lock (region_table.c's sluice__rt_decide_locked).  region_table.c has
 * the design; region.h the layout; base/seqlock.h the read protocol and its
 * proof.
 *
 * Map:  the snapshot (rsnap, read_once, read_key), deciding on it
 *       (snap_state, ring_read, full_read, decide_read); the entry point
 *       sluice__rtable_try_acquire_at; peeks (peek_read, peek_at,
 *       sluice__rtable_peek_at).
 *
 * Refusals and probes are reads (docs/decisions.md, section 1: only an
 * admission changes a limiter).  A decision, and a peek, is first read
 * without the lock (decide_read, read_key): no compare-and-swap, no locked
 * instruction, no store to the shard -- not the lock word, not the
 * sequence, not a slot.  A refusal or a probe then stores only its count,
 * in the calling thread's own counter stripe (region_who.c): a line
 * no other thread writes, as an in-process table counts.  If the read
 * finds a refusal or a probe, that is the answer; anything else (an admission, a
 * key to make, a read that met holders READ_TRIES times) is decided under
 * the lock as before.  The read:
 *
 *   v = the shard's sequence (acquire); odd: a holder runs -- pause, again
 *   the region's epoch; the probe run of the key's slots (header words) and
 *     each candidate's key words; for the key, the epoch and the state
 *     words of the copy its header's bit names (for a window log, its
 *     header and summary: never the ring); for a key not held, the shard's
 *     count, due and now
 *   the sequence again, after an acquire fence: still v -- a snapshot;
 *     else read again (at most READ_TRIES times, then the lock)
 *   on the snapshot (snap_state): a key under an older configuration, or
 *     a handle that has not parsed the current one, goes to the lock; else
 *     the algorithm's decide on a copy of the state (a window log's:
 *     sluice__log_read on its summary, below) -- a refusal or a probe is
 *     the answer, an admission goes to the lock
 *
 * Why an answer given is the one the locked path would have given at an
 * instant of the read.  (1)-(3) The read is base/seqlock.h's protocol, and
 * its proof is there: every field read so -- a slot's header, epochs, key
 * words and state words, a shard's count, due and now -- is stored only by
 * a holder (PUT, or the _Atomic fields' stores of its order) and loaded
 * with GET, each with the field's own size; no store overlaps another
 * field's bytes (keys are stored and compared in zero-padded 8-byte words,
 * states in 8-byte words); the hold's odd store is shard_lock's
 * sluice__seq_hold.  So when the recheck reads v, every load read what the
 * shard held from v's unlock to the recheck: one state of the shard,
 * unchanged for the whole read, whatever order the loads ran in.  (4) Only that snapshot is decided on, after the recheck; a read that
 * mixed states is thrown away before anything is decided.  Before the
 * recheck the loads may mix states, and stay bounded anyway: the probe run
 * is cut at cap slots, a key is compared up to the length its header says
 * (at most max_key_bytes, as a holder stored it), nothing read is used as
 * a pointer.  (5) On the snapshot the read does what decide_locked does:
 * the same lookup (sluice__rt_find(): the key's slot, or absent at an empty slot);
 * the same state (the copy the header's bit names -- a commit writes the
 * other copy, then flips); the same configuration (the epoch loaded during
 * the read, as a holder loads it; a key under an older one goes to the
 * lock, which carries it over and commits); for a key not held, a fresh
 * limiter's probe or refusal, or, for a new key that would need room,
 * full_read: what make_room and reclaim_others would find -- the shard or
 * the region full, no shard with a key due by the shard's time, no
 * eviction (the other shards' due and the region's count are read as the
 * locked path reads them, without their locks: each true when read).  The
 * locked path writes nothing else for these (the shard's `now` moves only
 * for an admission or a new key).  (6) The profile decided under is a
 * parsed configuration this handle made and published (read_prof), never
 * changed while published and not freed while the read's reader section
 * runs; never the region's text of a spec, which a change may rewrite.
 *
 * An admission read so is not thrown away: the caller takes the lock, and
 * if the sequence it finds is still v (no hold since the read: every hold
 * leaves it 2 higher, and a taken-over lock is excluded) and the epoch is
 * the read's, the shard is exactly the snapshot, so the admission decided
 * on it is the locked path's: its state is committed at once (crash
 * argument 1), without a second lookup.  Else the locked path decides.
 *
 * A holder killed mid-hold (crash argument 5) leaves its shard's sequence
 * odd: reads of that shard meet it READ_TRIES times and go to the lock,
 * where the waiter takes the lock over, repairs the shard and decides;
 * its unlock makes the sequence even, 2 past the odd value: one no read
 * has begun with.  A read that began at v before the holder died and saw
 * some of its stores meets the odd value or a later one at its recheck, as
 * in (3): the takeover stores nothing lower.  What the dead holder left
 * half-written is never in a snapshot: an inactive copy and its epoch
 * (the header's bit names the other), a new key's bytes (its header is
 * not live yet) -- crash arguments 1-3, which make every prefix of a hold
 * a valid table; and the counts it left off are repaired under the lock
 * as before.  Killed before its odd store or after its even one, it left
 * the sequence even and the shard whole: reads go on, and the lock waits
 * for the next writer to take it over.
 *
 * The window logs (sliding-log, sliding-wheel): window_log.c writes their
 * ring entries in place, with plain stores, so the read never loads the
 * ring (that would race).  Each state copy carries a summary of the ring
 * instead, written with the copy (PUT, before the flip): the newest entry
 * and the 8 oldest, what a limiter publishes for its own lock-free
 * refusals (window_log.h).  The read fills a publication in its own
 * memory from the snapshot and asks sluice__log_read, whose proof
 * (window_log.c's head comment) gives the locked decision's answer exactly
 * from such a summary, or none -- an admission, or a window cut past the 8
 * oldest entries: then the lock.  A peek asks it for the room (a probe),
 * then for the refusal when the permits do not fit; the rest time needs
 * only the newest entry.  One thing differs from the state the lock reads:
 * a holder killed after adding permits to the newest entry in place and
 * before its flip (crash argument 1) leaves the ring counting them and the
 * summary not; so the takeover's repair commits every key of the shard
 * again (its own state, its own configuration: one flip each), and reads
 * see the shard only after that (its sequence is odd until the unlock).
 */
#define _GNU_SOURCE
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

/* ---- the read without the lock (head comment) --------------------------- */


/* Whether the slot at s, whose header says length keylen, holds key: word
 * by word, GET loads against the caller's bytes zero-padded as key_write
 * pads them. */
static bool read_key_eq(const sluice__rtable *r, unsigned char *s, const void *key, size_t keylen)
{
    uint64_t *d = (uint64_t *)(void *)(s + r->L.key_off);
    const unsigned char *k = key;
    size_t i = 0;
    keylen = sluice__key_bytes(keylen);
    for (; i + 8 <= keylen; i += 8) {
        uint64_t w;
        memcpy(&w, k + i, 8);
        if (GET(&d[i / 8]) != w) return false;
    }
    if (i < keylen) {
        uint64_t w = 0;
        memcpy(&w, k + i, keylen - i);
        if (GET(&d[i / 8]) != w) return false;
    }
    return true;
}

/* One read of key's slot in shard k (GET loads only; the probe run cut at
 * cap slots, each key compared up to its header's length, at most
 * max_key_bytes: bounded whatever mix of states the loads see). */
static void read_once(const sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                      size_t keylen, rsnap *sn)
{
    rshard *sh = &r->sh[k];
    const uint32_t cap = r->L.cap;
    uint32_t i = (uint32_t)(((uint64_t)tag * cap) >> 32);
    sn->epoch = epoch_now(r);
    sn->found = false;
    for (uint32_t d = 0; d < cap; d++) {
        unsigned char *s = slot_at(r, k, i);
        const uint64_t h = atomic_load_explicit(hdr_of(s), (memory_order)SLUICE__SEQ_LOAD);
        const unsigned kind = H_KIND(h);
        if (kind == K_EMPTY) break;
        if (kind == K_LIVE && H_TAG(h) == tag && H_LEN(h) == keylen &&
            read_key_eq(r, s, key, keylen)) {
            const unsigned c = H_ACTIVE(h);
            const uint64_t *cw = (const uint64_t *)(const void *)copy_of(r, s, c);
            size_t n = r->L.pf.packed ? 2 : r->L.ring ? RING_HEAD_WORDS : STATE_WORDS;
            sn->found = true;
            sn->i = i;
            sn->h = h;
            sn->ep = slot_epoch(s, c);
            for (size_t j = 0; j < n; j++) sn->u.w[j] = GET(&cw[j]);
            if (r->L.ring) { /* the front entries the ring holds, at most FRONT */
                const size_t m = sn->u.g.len < FRONT ? sn->u.g.len : FRONT;
                for (n = RING_HEAD_WORDS; n < RING_HEAD_WORDS + 2 * m; n++) sn->u.w[n] = GET(&cw[n]);
            }
            return;
        }
        if (++i == cap) i = 0;
    }
    sn->count = atomic_load_explicit(&sh->count, (memory_order)SLUICE__SEQ_LOAD);
    sn->due = atomic_load_explicit(&sh->due, (memory_order)SLUICE__SEQ_LOAD);
    sn->now = GET(&sh->now);
}

/* A consistent snapshot of key's slot in shard k, read without writing
 * anything (the proof is in the head comment): true; false when READ_TRIES
 * reads met a holder or were overtaken by one.  Inline in this file's
 * decision (decide_read); sluice__rt_read_key is it for the peeks. */
static inline __attribute__((always_inline)) bool
read_key(const sluice__rtable *r, uint32_t k, uint32_t tag, const void *key, size_t keylen,
         rsnap *sn)
{
    rshard *sh = &r->sh[k];
    for (unsigned n = 0; n < READ_TRIES; n++) {
        const uint64_t v = sluice__seq_begin(&sh->seq);
        if (v & 1) { /* held: wait without writing */
            sluice__backoff(n);
            continue;
        }
        read_once(r, k, tag, key, keylen, sn);
        if (sluice__seq_valid(&sh->seq, v)) {
            sn->v = v;
            return true;
        }
    }
    return false;
}
bool sluice__rt_read_key(const sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                         size_t keylen, rsnap *sn)
{
    return read_key(r, k, tag, key, keylen, sn);
}

/* The profile a snapshot decides under, and its state into st (fresh when
 * the key is not held); NULL when the lock must decide: the key missed a
 * change of spec (the lock carries it over first), or this handle has not
 * parsed the current configuration yet (the lock parses it).  Inline in
 * decide_read, as read_key is. */
static inline __attribute__((always_inline)) const sluice__profile *
snap_state(const sluice__rtable *r, const rsnap *sn, sluice__state *st)
{
    const rprof *p = sluice__rt_read_prof(r, sn->epoch);
    if (!p || (sn->found && sn->ep != sn->epoch)) return NULL;
    const sluice__profile *pf = &p->pf;
    if (!sn->found) {
        sluice__state_init(pf, st);
    } else if (r->L.ring) { /* the header only: ring_read decides */
        sluice__state_init(pf, st);
        st->t_last = sn->u.g.t_last;
    } else if (r->L.pf.packed) {
        sluice__state_unpack(pf, sn->u.w, st);
    } else {
        swords u;
        memcpy(u.w, sn->u.w, sizeof u.w);
        *st = u.st;
    }
    return pf;
}
const sluice__profile *sluice__rt_snap_state(const sluice__rtable *r, const rsnap *sn,
                                             sluice__state *st)
{
    return snap_state(r, sn, st);
}

/* A held window-log key's decision from its snapshot's summary, as a
 * limiter's refusals read theirs: sluice__log_read (window_log.c proves it
 * gives the locked decision's answer exactly, or false when it cannot tell:
 * an admission, or a cut past the FRONT oldest entries) on a publication
 * filled from the snapshot (process memory: nothing shared is written). */
bool sluice__rt_ring_read(const sluice__profile *pf, const rsnap *sn, uint64_t now,
                      uint64_t permits, sluice_result *res, bool *ok)
{
    const rring *g = &sn->u.g; /* its head, then m front entries */
    const uint32_t m = g->len < FRONT ? g->len : FRONT;
    sluice__logpub pub; /* the fields sluice__log_read reads */
    atomic_store_explicit(&pub.seq, 0, memory_order_relaxed);
    atomic_store_explicit(&pub.front_at, 0, memory_order_relaxed);
    atomic_store_explicit(&pub.pf, pf, memory_order_relaxed);
    atomic_store_explicit(&pub.t_last, g->t_last, memory_order_relaxed);
    atomic_store_explicit(&pub.base, g->base, memory_order_relaxed);
    atomic_store_explicit(&pub.newest_slot, g->newest_slot, memory_order_relaxed);
    atomic_store_explicit(&pub.newest_cum, g->newest_cum, memory_order_relaxed);
    atomic_store_explicit(&pub.len, g->len, memory_order_relaxed);
    for (uint32_t i = 0; i < m; i++) {
        atomic_store_explicit(&pub.front[i].slot, g->front[i].slot, memory_order_relaxed);
        atomic_store_explicit(&pub.front[i].cum, g->front[i].cum, memory_order_relaxed);
    }
    uint64_t t_eff;
    return sluice__log_read(&pub, now, permits, res, &t_eff, ok);
}

/* Whether a request for a key shard k does not hold (1 <= permits <=
 * capacity) is refused for want of room, from the snapshot: the locked path
 * would find no room -- the shard or the region full, no shard with
 * anything due by its time, and no eviction.  *retry: the locked path's
 * hint (full_retry).  The other shards' `due` are read as the locked path
 * reads them, without their locks: lower bounds, each true when read. */
static bool full_read(const sluice__rtable *r, uint32_t k, const rsnap *sn, uint64_t now_ns,
                      int64_t *retry)
{
    if (r->flags & SLUICE_TABLE_EVICT_LRU) return false;
    const uint64_t now = now_ns > sn->now ? now_ns : sn->now; /* the shard's, had we locked */
    if (sn->count < r->L.ecap &&
        atomic_load_explicit(&r->h->keys, memory_order_relaxed) < r->L.max_keys)
        return false;
    uint64_t first = UINT64_MAX;
    for (uint32_t o = 0; o < r->L.nshards; o++) {
        const uint64_t d = o == k ? sn->due
                                  : atomic_load_explicit(&r->sh[o].due,
                                                         (memory_order)SLUICE__SEQ_LOAD);
        if (d <= now) return false; /* a sweep may make room */
        if (d < first) first = d;
    }
    *retry = first == UINT64_MAX ? -1 : (int64_t)sluice__min_u64(first - now, INT64_MAX);
    return true;
}

/* An admission read without the lock, on a held key whose state is a
 * copy (not a window log's ring): what to commit under the lock if nothing
 * moved since the read (sluice__rtable_try_acquire_at). */
typedef struct radm {
    bool ready;
    uint32_t i;
    uint64_t h, v, epoch;
    const sluice__profile *pf;
    sluice__state st; /* the state after the admission */
} radm;

/* The decision of a request read without writing: true with *ok (and *res,
 * *full) when it is a refusal or a probe; false when the lock must decide
 * (an admission -- then *adm, when it can be committed as read --, a new
 * key that room may be made for, or no consistent read). */
static bool decide_read(sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                        size_t keylen, uint64_t permits, uint64_t now, sluice_result *res,
                        bool *ok, bool *full, radm *adm)
{
    rsnap sn;
    sluice__state st;
    adm->ready = false;
    if (!read_key(r, k, tag, key, keylen, &sn)) return false;
    const sluice__profile *pf = snap_state(r, &sn, &st);
    if (!pf) return false;
    *full = false;
    if (sn.found && r->L.ring) return sluice__rt_ring_read(pf, &sn, now, permits, res, ok);
    if (sn.found || permits == 0 || permits > pf->capacity) { /* as decide_locked */
        *ok = sluice__decide(pf, &st, now, permits, UINT64_MAX, res);
        if (!(*ok && permits)) return true; /* only an admission writes */
        if (sn.found) {
            adm->ready = true;
            adm->i = sn.i;
            adm->h = sn.h;
            adm->v = sn.v;
            adm->epoch = sn.epoch;
            adm->pf = pf;
            adm->st = st;
        }
        return false;
    }
    int64_t retry;
    if (!full_read(r, k, &sn, now, &retry)) return false;
    *ok = false;
    *full = true;
    if (res) {
        sluice__deny(res, 0, retry);
        res->error = SLUICE_EFULL;
    }
    return true;
}

static bool try_acquire_at(sluice__rtable *r, const void *key, size_t keylen,
                           uint64_t permits, uint64_t now_ns, sluice_result *res)
{
    bool stolen = false, full;
    if (!key_ok(r, key, keylen)) { /* refused, and counted as a refusal */
        if (res) sluice__fail(res, SLUICE_EINVAL);
        sluice__rt_count_decision(r, NULL, permits, false, false, false);
        return false;
    }
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint64_t hash;
    const uint32_t k = key_place(r, &key, &keylen, dig, &hash);
    bool ok;
    radm adm;
    if (decide_read(r, k, (uint32_t)hash, key, keylen, permits, now_ns, res, &ok, &full, &adm)) {
        sluice__rt_count_decision(r, NULL, permits, ok, full, false);
        return ok;
    }
    const bool evict = (r->flags & SLUICE_TABLE_EVICT_LRU) != 0;
    rshard *sh = &r->sh[k];
    const uint64_t v = sluice__rt_shard_lock(r, k, &stolen);
    if (adm.ready && !stolen && v == adm.v && epoch_now(r) == adm.epoch) {
        /* no hold since the read ended with v (a hold leaves the sequence
         * 2 higher), and no change of spec: the shard is as the read saw
         * it, so the decision on it is the locked path's -- commit it */
        sluice__rt_state_commit(r, adm.pf, slot_at(r, k, adm.i), adm.h, &adm.st, (uint32_t)adm.epoch);
        if (now_ns > sh->now) PUT(&sh->now, now_ns);
        sluice__rt_count_decision(r, sh, permits, true, false, false);
        sluice__rt_shard_unlock(r, k);
        return true;
    }
    ok = sluice__rt_decide_locked(r, k, (uint32_t)hash, key, keylen, permits, now_ns, res,
                       evict && r->L.nshards == 1, &full);
    if (full && (r->L.nshards > 1 || stolen)) {
        /* keys at rest elsewhere may make room, else the policy: once more */
        const uint64_t now = r->sh[k].now;
        sluice__rt_shard_unlock(r, k);
        if (stolen) sluice__rt_resync(r); /* a count a dead process left too high */
        stolen = false;
        if (r->L.nshards > 1) sluice__rt_reclaim_others(r, k, now, &stolen);
        sluice__rt_shard_lock(r, k, &stolen);
        ok = sluice__rt_decide_locked(r, k, (uint32_t)hash, key, keylen, permits, now_ns, res, evict, &full);
    }
    sluice__rt_count_decision(r, &r->sh[k], permits, ok, full, false);
    sluice__rt_shard_unlock(r, k);
    if (stolen) sluice__rt_resync(r);
    return ok;
}

bool sluice__rtable_try_acquire_at(sluice__rtable *r, const void *key, size_t keylen,
                                   uint64_t permits, uint64_t now_ns, sluice_result *res)
{
    void *rd = sluice__rd_enter(); /* the profile a read finds stays (read_prof) */
    const bool ok = try_acquire_at(r, key, keylen, permits, now_ns, res);
    sluice__rd_exit(rd);
    return ok;
}

