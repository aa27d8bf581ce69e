/* region_settle.c -- reservations on keys of a table in a shared region:
 * reserve, cancel, settle (docs/decisions.md, section 3.10; docs/tables.md,
 * "Reservations").
 *
 * Map:  the entry a reservation names (rv_slot), a give-back's rest time
 *       (due_lower); sluice__rtable_reserve_at, _cancel_at, _settle_at,
 *       which region_attach.c's ops table gives table_settle.c.
 *
 * The rules are the in-process table's, through the same functions
 * (table_settle.c's sluice__rv_decide, _give_back, _settle, over the
 * algorithms' rows); table_settle.c keeps the reservation's states and its
 * hold on the handle, and this file what the region's placement needs:
 * the locking, and which entry.  Each operation holds the lock of the
 * key's shard for its lookup, its decision and its commit (a flip: crash
 * argument 1 of region_table.c), as a decision under the lock does.
 *
 * Which entry.  Keys never move in a region, so the reservation names its
 * entry by place: the shard (from the key's hash), the slot (in the
 * reservation's cfg_ field), the key's tag and length code, and the slot's
 * generation, a 32-bit word per slot in the region (region.h, gen_of)
 * that every process moves when it makes a key in the slot, before the
 * header publishes it.  A key dropped (removed, reset, reclaimed at rest,
 * evicted) and made again -- in this slot or another, by any process --
 * is a new entry: the slot's header or its generation differs, and the
 * cancel or settle changes nothing and says so (SLUICE_ENOENT).  Unlike
 * the in-process table's per-bucket counter, no other key's making moves
 * it.  A generation comes back after 2^32 makings of one slot.
 *
 * Which units.  The reservation keeps the region's configuration number
 * (epoch: every process's) in serial_; after a change of spec between the
 * reservation and its settle nothing goes back (3.10); an excess is still
 * charged, under the new spec.
 *
 * The handle and the processes.  The reservation is the caller's memory,
 * and holds the process-local handle (table_settle.c: its refcount); the
 * region holds nothing for it.  So a process that dies with reservations
 * open leaves nothing to clean: their permits stay taken, as a reservation
 * never settled leaves them.  A reservation is settled by the process that
 * made it (its handle is a pointer of that process).
 *
 * Hostile region.  The slot index is the caller's (checked against the
 * layout anyway); the header, tag, length and generation read from the
 * region are only compared; a state is loaded as every decision loads it
 * (region_table.c: the ring's head and length cut to its capacity).
 */
#include "table/hold.h"
#include "table/region.h"

/* Slot rv->cfg_ of shard k (locked), if it still holds the entry rv was
 * made on (head comment, "Which entry"), else NULL. */
static unsigned char *rv_slot(const sluice__rtable *r, uint32_t k,
                              const sluice_table_reservation *rv)
{
    if (rv->cfg_ >= r->L.cap) return NULL; /* a probe of a key not held: NONE */
    unsigned char *s = slot_at(r, k, rv->cfg_);
    const uint64_t h = hdr_get(s);
    if (H_KIND(h) != K_LIVE || H_TAG(h) != (uint32_t)rv->hash_ || H_LEN(h) != rv->keylen_)
        return NULL;
    return atomic_load_explicit(gen_of(r, k, rv->cfg_), memory_order_relaxed) == rv->kgen_ ? s
                                                                                         : NULL;
}

/* A cancel or a settle may bring the key's rest time nearer: shard k's
 * bound on the earliest rest time must stay a lower bound. */
static void due_lower(sluice__rtable *r, uint32_t k, const sluice__profile *pf,
                      const sluice__state *st)
{
    rshard *sh = &r->sh[k];
    const uint64_t rest = sluice__rest_at(pf, st);
    if (rest < atomic_load_explicit(&sh->due, memory_order_relaxed))
        atomic_store_explicit(&sh->due, rest, (memory_order)SLUICE__SEQ_STORE);
}

static bool reserve_at(sluice__rtable *r, const void *key, size_t keylen, uint64_t permits,
                       uint64_t now_ns, uint64_t max_wait_ns, sluice_table_reservation *rv,
                       sluice_result *res)
{
    sluice_result out = {0};
    bool ok = false, full = false, stolen = false;
    if (!key_ok(r, key, keylen)) { /* refused, and counted as a refusal */
        sluice__fail(&out, SLUICE_EINVAL);
        sluice__rt_count_decision(r, NULL, permits, false, false, false);
        if (res) *res = out;
        return false;
    }
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    sluice__key_hold kh;
    memset(&kh, 0, sizeof kh);
    kh.rt = r;
    kh.key = key;
    kh.keylen = keylen;
    kh.skey = key;
    kh.skeylen = keylen;
    const uint32_t k = key_place(r, &kh.skey, &kh.skeylen, kh.dig, &kh.hash);
    kh.rk = k;
    rshard *sh = &r->sh[k];
    const sluice__profile *pf;
    for (int attempt = 0;; attempt++) {
        sluice__rt_shard_lock(r, k, &stolen);
        sluice__rtable_find(&kh);
        pf = kh.h.pf;
        if (kh.entry != NONE || permits == 0 || permits > pf->capacity) break;
        /* a fresh limiter grants this: make the key first (its shard's
         * keys at rest; then those of the other shards, nothing held, and
         * the policy), as a decision does (region_read.c) */
        if (now_ns > sh->now) PUT(&sh->now, now_ns);
        int64_t retry = -1;
        if (sluice__rtable_make(&kh, true, attempt > 0, &retry) == 0) break;
        if (attempt == 0) {
            const uint64_t now = sh->now;
            sluice__rt_shard_unlock(r, k);
            if (stolen) sluice__rt_resync(r); /* a count a dead process left too high */
            stolen = false;
            sluice__rt_reclaim_others(r, k, now, &stolen);
            continue;
        }
        sluice__deny(&out, 0, retry);
        out.error = SLUICE_EFULL;
        full = true;
        goto out;
    }
    sluice__state *st = kh.h.st; /* the key's (its ring in the slot), or a fresh one */
    ok = sluice__rv_decide(pf, st, now_ns, permits, max_wait_ns, &out, rv);
    if (kh.entry != NONE) {
        unsigned char *s = slot_at(r, k, kh.entry);
        if (ok && permits) { /* only an admission writes */
            sluice__rt_state_commit(r, pf, s, hdr_get(s), st, (uint32_t)kh.repoch);
            if (now_ns > sh->now) PUT(&sh->now, now_ns);
            if (kh.created) due_lower(r, k, pf, st);
        } else if (kh.created) { /* cannot happen: a fresh limiter grants it */
            sluice__rtable_unmake(&kh);
        }
    }
    if (ok) {
        /* the entry: its place, tag, length and generation; a probe of a
         * key not held names none (its settle can only find it gone) */
        rv->hash_ = kh.hash;
        rv->keylen_ = (uint32_t)kh.skeylen;
        rv->cfg_ = kh.entry;
        rv->kgen_ = kh.entry == NONE
                        ? 0
                        : atomic_load_explicit(gen_of(r, k, kh.entry), memory_order_relaxed);
        rv->serial_ = kh.repoch;
    }
out:
    sluice__rt_count_decision(r, sh, permits, ok, full, false);
    sluice__rt_shard_unlock(r, k);
    if (stolen) sluice__rt_resync(r);
    if (res) *res = out;
    return ok;
}

bool sluice__rtable_reserve_at(sluice__rtable *r, const void *key, size_t keylen,
                               uint64_t permits, uint64_t now_ns, uint64_t max_wait_ns,
                               sluice_table_reservation *rv, sluice_result *res)
{
    void *rd = sluice__rd_enter();
    const bool ok = reserve_at(r, key, keylen, permits, now_ns, max_wait_ns, rv, res);
    sluice__rd_exit(rd);
    return ok;
}

/* A cancel (actual NULL) or a settle at *actual of rv, on its entry. */
static int close_at(sluice__rtable *r, const sluice_table_reservation *rv, const uint64_t *actual,
                    uint64_t now_ns)
{
    bool stolen = false;
    const uint32_t k = shard_of(r, rv->hash_);
    sluice__rt_shard_lock(r, k, &stolen);
    int rc = SLUICE_ENOENT;
    unsigned char *s = rv_slot(r, k, rv);
    if (s) {
        uint64_t h = hdr_get(s);
        const uint64_t epoch = epoch_now(r); /* with the shard held: sluice__rt_prof() */
        sluice__state st;
        const sluice__profile *pf = sluice__rt_key_load(r, s, &h, &st, epoch);
        if (!actual) {
            rc = sluice__rv_give_back(pf, &st, now_ns, rv) ? 0 : SLUICE_ENOENT;
        } else if (*actual < rv->permits && epoch != rv->serial_) {
            rc = 1; /* the units changed: the permits count as used, nothing written */
        } else {
            rc = sluice__rv_settle(pf, &st, now_ns, rv, *actual);
        }
        if (rc == 0) {
            sluice__rt_state_commit(r, pf, s, h, &st, (uint32_t)epoch);
            due_lower(r, k, pf, &st);
        }
        if (rc == 1) rc = 0;
    }
    sluice__rt_shard_unlock(r, k);
    if (stolen) sluice__rt_resync(r);
    return rc;
}

int sluice__rtable_cancel_at(sluice__rtable *r, const sluice_table_reservation *rv,
                             uint64_t now_ns)
{
    void *rd = sluice__rd_enter();
    const int rc = close_at(r, rv, NULL, now_ns);
    sluice__rd_exit(rd);
    return rc;
}

int sluice__rtable_settle_at(sluice__rtable *r, const sluice_table_reservation *rv,
                             uint64_t actual_permits, uint64_t now_ns)
{
    void *rd = sluice__rd_enter();
    const int rc = close_at(r, rv, &actual_permits, now_ns);
    sluice__rd_exit(rd);
    return rc;
}
