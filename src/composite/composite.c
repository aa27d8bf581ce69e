/* composite.c -- one request decided against several limits, all or
 * nothing.
 *
 * Rule (docs/decisions.md, 3.7): allowed iff every
 * limit allows; then, and only then, charged to every limit.  The result
 * combines the limits' answers: the largest wait_ns, the smallest
 * remaining (a limit that would have allowed a refused request reports its
 * remaining without the permits), the largest retry_after_ns of the
 * refusing limits (-1 if any is -1).
 *
 * Limiters only, all lock-free: sluice__limiters_try (limiter.c), the
 * public call's tail when per_limit is NULL, which holds nothing while it
 * decides and hands any other call back to sluice__composite_rest.  Each
 * limit is read and decided once, as a single decision is -- one snapshot
 * of its 16-byte word (load_word: a value the word held at one instant),
 * one decide_packed, which gives its answer too when details are asked --
 * and counted inline in each limiter; the combination is made there as
 * well, with no answers array and no other setup.  The one common order is
 * that of the instants X below:
 *
 *   refused, no details asked   the first limit that refuses on its
 *        snapshot decides the call.  At the instant X of that snapshot the
 *        limit refused the request, so the composite was refused at X,
 *        whatever the others held; it writes nothing, so placing it at X
 *        changes no limit's sequence of states.  The other limits' answers
 *        are not reported, so they need no instant in common: the limits
 *        after the refusing one are not read at all.
 *   refused with details, or a probe   every limit's answer is reported,
 *        so they need one instant: once all are decided, every word but the
 *        last one read is read again; each still at its snapshot held it
 *        from its first read to its second, so all held theirs at the
 *        instant of the last snapshot (after every other first read, before
 *        every second read), and X is there.  Nothing is written; a word
 *        that moved: start over.  (A word comes back to a value it
 *        held before only when a reservation is cancelled at the same
 *        clamped time, which restores the bucket exactly; a call whose two
 *        reads straddle both may combine that limit without the
 *        reservation with another limit as it was while it was out.)  The
 *        details are the answers of the decisions on those snapshots --
 *        with res but no per_limit, only the refusing limits' are combined:
 *        a limit that would have allowed has at least the permits remaining
 *        without them, a refusing one fewer, so it never gives the
 *        smallest, and it has no retry_after_ns.
 *   admitted   every word but the last, in one order for all calls (by
 *        limiter address), is frozen with a CAS from its snapshot: from then
 *        on it holds its snapshot, every CAS on it fails and every reader
 *        waits.  The CAS of the last word from its snapshot to its new value
 *        is X: all words hold their snapshots at X, and each limit's new
 *        state is the one the decision on its snapshot gave.  The frozen
 *        words then get theirs before anyone can decide on them.  A failed
 *        CAS (another decision got in) unfreezes, unchanged, what was frozen
 *        and starts over; nothing is waited for while a word is held, and
 *        the order by address lets one of two contending calls through.
 *
 * No over-admission: every admission, single or composite, moves each word
 * it charges from a value it held at X to the value the decision on that
 * value gave.  No permit lost: a refusal or a probe writes nothing, and a
 * word frozen for nothing is restored to the value it held.
 *
 * Keys of in-process tables only, every one held already:
 * sluice__tables_decide (table.c) reads them as single decisions do, each
 * shard between two loads of its sequence, and commits an admission by
 * taking each shard with a compare-and-swap from the sequence its read
 * began with -- the proof is beside it.  Anything it cannot do so (a key to
 * make, a change of spec to carry over, a wheel due a step) goes to the
 * general path with nothing decided.
 *
 * Otherwise, two-phase locking in one global order.  Every limit is held
 * before anything is decided, in the order of the address of what holds it
 * (the limiter, or the table's shard; two keys of one shard share its
 * lock), so two composites can never wait for each other in a cycle.  Keys
 * of tables shared between processes come first, ordered by (region
 * identity, shard), which every process computes alike whatever address it
 * maps the region at (region_table.c, "Composite decisions"):
 *
 *   hold     a lock-free limiter: freeze its 16-byte word with one CAS
 *            (limiter.c: the top bit of the time half marks it held; single
 *            decisions, which never hold anything while they wait, wait
 *            for it); a limiter in the locked path: its mutex; a table
 *            key: its shard's spin lock; a region key: its shard's lock word
 *            (taken over from a dead holder and repaired; the region's count
 *            of keys resynchronised once nothing is held).
 *   judge    decide every limit on its held state, writing nothing
 *            (sluice__judge: on a copy; the window logs measure their ring).
 *   prepare  if all allow: make the entries of new table keys and room in
 *            the window logs' rings -- the only steps that can fail; a
 *            failure undoes the entries made (nobody saw them) and refuses.
 *   commit   store every new state (a window log decides on its real
 *            state, which cannot fail any more).
 *   release  in reverse order: a frozen word gets its new count half, then
 *            its time half without the bit (release order).
 *
 * Every limit's state is held from before its decision to after its
 * commit, so the composite is linearisable at the moment all are held, and
 * every limit sees the same order of calls.  A refusal writes nothing but
 * the holds themselves.
 *
 * New table keys: a full shard is swept for keys at rest (and the policy
 * may evict) only when no other part of the call holds an entry of that
 * shard; keys at rest in other shards are reclaimed with nothing held, and
 * the call is then tried once more.
 */
#include "base/internal.h"
#include "composite/composite.h"
#include "table/region_table.h"
#include "table/table.h"

#include <string.h>

/* The global lock order: keys of region tables first, by (region identity,
 * shard) -- alike in every process, whatever address each maps a region
 * at -- then the process's own limits by address.  0: the same lock. */
static int lock_cmp(const sluice__part *a, const sluice__part *b)
{
    if ((a->rt != NULL) != (b->rt != NULL)) return a->rt ? -1 : 1;
    if (a->rt) {
        if (a->rid[0] != b->rid[0]) return a->rid[0] < b->rid[0] ? -1 : 1;
        if (a->rid[1] != b->rid[1]) return a->rid[1] < b->rid[1] ? -1 : 1;
        return a->rk < b->rk ? -1 : a->rk > b->rk;
    }
    const uintptr_t x = (uintptr_t)a->order, y = (uintptr_t)b->order;
    return x < y ? -1 : x > y;
}

static bool same_key(const sluice__part *a, const sluice__part *b)
{
    if (a->rt || b->rt) { /* two handles of one region are one table */
        if (!a->rt || !b->rt || lock_cmp(a, b) != 0) return false;
    } else if (a->t != b->t || a->where != b->where) {
        return false;
    }
    if (a->entry != UINT32_MAX || b->entry != UINT32_MAX) return a->entry == b->entry;
    return a->keylen == b->keylen && (a->keylen == 0 || memcmp(a->key, b->key, a->keylen) == 0);
}

static bool bad_call(size_t n, sluice_result *res, sluice_result *per_limit)
{
    if (res) sluice__fail(res, SLUICE_EINVAL);
    if (per_limit)
        for (size_t i = 0; i < n && i < SLUICE_COMPOSITE_MAX; i++) sluice__fail(&per_limit[i], SLUICE_EINVAL);
    return false;
}

/* One attempt: hold, judge, prepare, commit, release.  Returns whether the
 * permits were taken; *efull_retry when a new key found its table full
 * while another part of the call held the shard, or other shards may hold
 * keys at rest; -1 on a duplicate key (nothing decided). */
static int attempt(sluice__part *parts, const size_t *ord, size_t n, uint64_t permits,
                   uint64_t now, bool details, bool last, bool *efull, bool *any_ok)
{
    for (size_t k = 0; k < n; k++) { /* hold, in the global order */
        sluice__part *pt = &parts[ord[k]];
        if (!pt->first_of_lock) continue;
        if (pt->lim) sluice__limiter_hold(pt);
        else if (pt->rt) sluice__rtable_lock(pt->rt, pt->rk, now, &pt->stolen);
        else sluice__table_lock(pt->t, (void *)pt->order, now);
    }
    for (size_t i = 0; i < n; i++) {
        if (parts[i].rt) sluice__rtable_find(&parts[i]);
        else if (!parts[i].lim) sluice__table_find(&parts[i]);
    }

    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        for (size_t j = i + 1; j < n; j++)
            if (!parts[i].lim && !parts[j].lim && same_key(&parts[i], &parts[j])) rc = -1;

    bool all = rc == 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        sluice__part *pt = &parts[i];
        pt->ok = sluice__judge(pt->pf, pt->st, &pt->tmp, now, permits, details ? &pt->r : NULL);
        all &= pt->ok;
    }
    bool commit = all && permits > 0;
    *efull = false;
    *any_ok = all;
    if (commit) { /* prepare: the steps that can fail */
        for (size_t i = 0; i < n && commit; i++) {
            sluice__part *pt = &parts[i];
            if (!pt->lim && !pt->rt) sluice__table_refind(pt); /* an earlier make moved it? */
            if (!pt->lim && pt->entry == UINT32_MAX) {
                bool alone = true;
                for (size_t j = 0; j < n; j++)
                    if (j != i && !parts[j].lim && lock_cmp(&parts[j], pt) == 0) alone = false;
                int64_t retry = -1;
                /* a region evicts only after its other shards were swept,
                 * as its single decisions do (or when it has one shard) */
                int e = pt->rt ? sluice__rtable_make(pt, alone, last, &retry)
                               : sluice__table_make(pt, alone, &retry);
                if (e != 0) {
                    sluice__deny(&pt->r, 0, retry);
                    pt->r.error = e;
                    pt->ok = false;
                    commit = false;
                    *efull = e == SLUICE_EFULL;
                    break;
                }
            }
            if (pt->pf->ops->reserve && !pt->pf->ops->reserve(pt->st)) {
                sluice__judge(pt->pf, pt->st, &pt->tmp, now, 0, &pt->r);
                sluice__deny(&pt->r, pt->r.remaining, -1);
                pt->r.error = SLUICE_ENOMEM;
                pt->ok = false;
                commit = false;
            }
        }
        if (!commit)
            for (size_t i = 0; i < n; i++) {
                if (!parts[i].created) continue;
                if (parts[i].rt) sluice__rtable_unmake(&parts[i]);
                else sluice__table_unmake(&parts[i]);
            }
    }
    if (commit) {
        for (size_t i = 0; i < n; i++) {
            sluice__part *pt = &parts[i];
            if (!pt->lim && !pt->rt) sluice__table_refind(pt); /* a later make moved it? */
            if (pt->pf->ops->judge) /* judged in place: now take the permits */
                sluice__decide(pt->pf, pt->st, now, permits, UINT64_MAX, details ? &pt->r : NULL);
            if (pt->rt) sluice__rtable_store(pt);
            else if (!pt->lim) sluice__table_store(pt);
        }
    }
    if (rc == 0 && (last || commit || !*efull)) { /* the final answer: a region
                                                  * counts under its lock */
        const bool ok = commit || (all && permits == 0);
        for (size_t i = 0; i < n; i++)
            if (parts[i].rt)
                sluice__rtable_count(&parts[i], permits, ok,
                                     !parts[i].ok && parts[i].r.error == SLUICE_EFULL,
                                     !ok && permits && parts[i].ok);
    }
    for (size_t k = n; k-- > 0;) { /* release, in reverse order */
        sluice__part *pt = &parts[ord[k]];
        if (!pt->first_of_lock) continue;
        if (pt->lim) sluice__limiter_release(pt, commit);
        else if (pt->rt) sluice__rtable_unlock(pt->rt, pt->rk);
        else sluice__table_unlock(pt->t, (void *)pt->order);
    }
    if (rc) return rc;
    return commit;
}

/* After a dead holder's shard was taken over (and repaired) by this call:
 * the region's count of keys, exact again -- with nothing held, as
 * region_table.c's resync locks every shard of the region. */
static void resync_stolen(sluice__part *parts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (parts[i].stolen) {
            sluice__rtable_resync(parts[i].rt);
            for (size_t j = i; j < n; j++) /* once per region */
                if (parts[j].rt && parts[j].rid[0] == parts[i].rid[0] &&
                    parts[j].rid[1] == parts[i].rid[1])
                    parts[j].stolen = false;
        }
}

/* The general path: set the parts up, hold them in the global lock order,
 * decide, commit or not, release, count.  Returns whether the request was
 * allowed (a probe: whether every limit allows it), or -1: a bad call,
 * nothing decided.  Each limit's answer into ans, unless NULL. */
static int general_in(const sluice_limit_ref *refs, size_t n, uint64_t permits, uint64_t now_ns,
                      sluice__answer *ans)
{
    if (!refs || n == 0 || n > SLUICE_COMPOSITE_MAX) return -1;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    const bool details = ans != NULL;
    sluice__part parts[SLUICE_COMPOSITE_MAX];
    size_t ord[SLUICE_COMPOSITE_MAX];
    for (size_t i = 0; i < n; i++) {
        const sluice_limit_ref *r = &refs[i];
        sluice__part *pt = &parts[i]; /* not zeroed: every field is set before use */
        pt->created = false;
        pt->rt = NULL;
        pt->stolen = false;
        if (details) pt->r = (sluice_result){0};
        else pt->r.error = 0; /* read for the table's count of refusals */
        if ((r->limiter != NULL) == (r->table != NULL)) return -1;
        if (r->limiter) {
            pt->lim = r->limiter;
            pt->t = NULL;
            pt->order = r->limiter;
        } else {
            pt->lim = NULL;
            pt->t = r->table;
            pt->key = r->key;
            pt->keylen = r->keylen;
            if ((pt->rt = sluice__table_region(r->table)) != NULL) {
                if (!sluice__rtable_key_ok(pt->rt, r->key, r->keylen)) return -1;
                sluice__part_key(pt); /* a long key: its digest (table.c) */
                pt->order = NULL;
                pt->rk = sluice__rtable_shard_of(pt->rt, pt->skey, pt->skeylen, &pt->hash, pt->rid);
            } else {
                if (!r->key && r->keylen) return -1;
                sluice__part_key(pt);
                pt->order = sluice__table_shard_of(r->table, pt->skey, pt->skeylen, &pt->hash);
            }
        }
        /* insertion sort in the global lock order */
        size_t k = i;
        while (k > 0 && lock_cmp(&parts[ord[k - 1]], pt) > 0) {
            ord[k] = ord[k - 1];
            k--;
        }
        ord[k] = i;
    }
    for (size_t k = 0; k < n; k++) {
        sluice__part *pt = &parts[ord[k]];
        pt->first_of_lock = k == 0 || lock_cmp(&parts[ord[k - 1]], pt) != 0;
        if (!pt->first_of_lock && pt->lim) return -1; /* a limiter twice */
    }

    bool efull = false, all = false;
    int got = attempt(parts, ord, n, permits, now_ns, details, false, &efull, &all);
    if (got == 0 && efull) { /* keys at rest elsewhere may make room: once more */
        resync_stolen(parts, n);
        for (size_t i = 0; i < n; i++) {
            if (parts[i].rt) sluice__rtable_reclaim(parts[i].rt, now_ns);
            else if (!parts[i].lim) sluice__table_reclaim(parts[i].t, now_ns);
        }
        got = attempt(parts, ord, n, permits, now_ns, details, true, &efull, &all);
    }
    resync_stolen(parts, n);
    if (got < 0) return -1;
    const bool ok = got == 1 || (all && permits == 0);

    for (size_t i = 0; i < n; i++) { /* a region's were counted under its lock */
        if (parts[i].lim) sluice__limiter_count(parts[i].lim, permits, ok);
        else if (!parts[i].rt)
            sluice__table_count(parts[i].t, permits, ok, !parts[i].ok && parts[i].r.error == SLUICE_EFULL);
        if (!ok && permits && parts[i].ok && !parts[i].rt) { /* refused by another limit */
            if (parts[i].lim) sluice__limiter_count_elsewhere(parts[i].lim, permits);
            else sluice__table_count_elsewhere(parts[i].t, permits);
        }
        if (!ok && !parts[i].lim && !parts[i].rt)
            sluice__table_note(parts[i].t, parts[i].key, parts[i].keylen, parts[i].hash);
    }
    for (size_t i = 0; ans && i < n; i++)
        ans[i] = (sluice__answer){.ok = parts[i].ok, .r = parts[i].r};
    return ok;
}

/* general_in() in one reader section (table.h, sluice__rd_*): a shared
 * table's key hands out its parsed configuration at its find, and a later
 * part's find may retire it (two keys under configurations CFG_K apart, as a
 * damaged region can show); the section keeps it until the decision ends. */
static __attribute__((noinline)) int general(const sluice_limit_ref *refs, size_t n,
                                             uint64_t permits, uint64_t now_ns,
                                             sluice__answer *ans)
{
    void *rd = sluice__rd_enter();
    const int rc = general_in(refs, n, permits, now_ns, ans);
    sluice__rd_exit(rd);
    return rc;
}

/* The result of a decided call from the limits' answers (the rule at the
 * head of this file); returns ok. */
static bool combine(const sluice__answer *a, size_t n, bool ok, uint64_t permits,
                    sluice_result *res, sluice_result *per_limit)
{
    sluice_result c = {.allowed = ok};
    c.remaining = UINT64_MAX;
    int64_t retry = 0;
    bool never = false;
    for (size_t i = 0; i < n; i++) {
        sluice_result r = a[i].r;
        if (!ok && a[i].ok) { /* would have allowed: nothing was taken */
            r.remaining += permits;
            r.wait_ns = 0;
        }
        if (r.remaining < c.remaining) c.remaining = r.remaining;
        if (r.wait_ns > c.wait_ns) c.wait_ns = r.wait_ns;
        if (!a[i].ok) {
            if (r.retry_after_ns < 0) never = true;
            else if (r.retry_after_ns > retry) retry = r.retry_after_ns;
            if (!c.error) c.error = r.error;
        }
        if (per_limit) per_limit[i] = r;
    }
    if (!ok) {
        c.wait_ns = 0;
        c.retry_after_ns = never ? -1 : retry;
    }
    if (res) *res = c;
    return ok;
}

/* Everything but what sluice__limiters_try decides (composite.h). */
bool sluice__composite_rest(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                            uint64_t now_ns, sluice_result *res, sluice_result *per_limit)
{
    const bool tables = n && refs && refs[0].table; /* a guess at the kind; each checks */
    if (!res && !per_limit) { /* the overload's call: no details */
        int got = tables ? sluice__tables_decide(refs, n, permits, now_ns, NULL) : -1;
        if (got < 0) got = general(refs, n, permits, now_ns, NULL);
        return got > 0;
    }
    sluice__answer a[SLUICE_COMPOSITE_MAX];
    int got = tables      ? sluice__tables_decide(refs, n, permits, now_ns, a)
              : per_limit ? sluice__limiters_each(refs, n, permits, now_ns, a)
                          : -1;
    if (got < 0 && (got = general(refs, n, permits, now_ns, a)) < 0)
        return bad_call(n, res, per_limit);
    return combine(a, n, got == 1, permits, res, per_limit);
}

/* Lock-free limiters first, with no setup: limiter.c decides, counts and
 * combines them (and hands any other call back to sluice__composite_rest);
 * table keys and each limit's answer go to sluice__composite_rest at
 * once. */
bool sluice_composite_try_acquire_at(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                                     uint64_t now_ns, sluice_result *res,
                                     sluice_result *per_limit)
{
    if (per_limit || (n && refs && refs[0].table))
        return sluice__composite_rest(refs, n, permits, now_ns, res, per_limit);
    return sluice__limiters_try(refs, n, permits, now_ns, res);
}
