/* composite.c -- one request decided against several limits, all or
 * nothing.
 *
 * Map:
 *   kinds of limit     the kind ops (hold, find, make, store, unmake,
 *                      release, count) of a limiter (limiter/hold.h), an
 *                      in-process table key and a shared-table key
 *                      (table/hold.h): the protocol below names no kind
 *   the general path   lock_cmp, same_key, the protocol's steps over the
 *                      kinds (g_hold, g_prepare, g_store, g_settle,
 *                      g_release: alg/attempt.h runs them), attempt,
 *                      general_in/general (set up, retry once for room,
 *                      count; one reader section)
 *   the result         sluice__combine (alg/held.h: the rule below)
 *   entry point        sluice_composite_try_acquire_at: the fast paths
 *                      (all lock-free limiters: sluice__limiters_try and
 *                      _each, limiter/hold.c; all in-process keys:
 *                      sluice__tables_decide, table/table_hold.c), each of
 *                      which hands back, with nothing decided, any call it
 *                      cannot decide; then the general path.
 *
 * Rule (docs/decisions.md, 3.7): allowed iff every
 * limit allows; then, and only then, charged to every limit.  The result
 * combines the limits' answers: the largest wait_ns, the smallest
 * remaining (a limit that would have allowed a refused request reports its
 * remaining without the permits), the largest retry_after_ns of the
 * refusing limits (-1 if any is -1).
 *
 * The protocol -- hold and judge every limit, commit all or none, let go
 * in reverse -- is written once, SLUICE__ATTEMPT (alg/attempt.h), and each
 * path is that function over steps of its own:
 *
 *   limiters only, all lock-free: sluice__limiters_try (limiter/hold.c),
 *        the public call's first try when per_limit is NULL.  A hold is a
 *        snapshot of the limiter's word, decided on as a single decision
 *        is; take freezes every word but the last in one order and swaps
 *        the last; confirm reads the words again.  It hands any other call,
 *        undecided, to the general path (a callback: limiter/ names nothing
 *        above it).  The proof is beside it.
 *   keys of in-process tables only, every one held already:
 *        sluice__tables_decide (table/table_hold.c).  A hold is a read
 *        under the shard's sequence; take upgrades each sequence to the
 *        shard's lock from the value its read began with; confirm reads
 *        the words and sequences again.  Anything it cannot do so (a key to
 *        make, a change of spec to carry over) goes to the general path
 *        with nothing decided.  The proof is beside it.
 *   the general path, below: every kind of limit, held by locks.
 *
 * The general path: two-phase locking in one global order.  Every limit
 * is held before anything is written, in the order of the address of what holds it
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
 *            of keys resynchronised once nothing is held).  Then judge it:
 *            decide on its held state, writing nothing (sluice__judge: on a
 *            copy; the window logs measure their ring).
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
#include "alg/alg.h"
#include "alg/attempt.h"
#include "alg/held.h"
#include "limiter/hold.h"
#include "table/hold.h"
#include "table/region_table.h"
#include "table/table.h"

#include <string.h>

/* ---- kinds of limit ------------------------------------------------------ */

/* One limit of a call: its kind, its place in the global lock order, and
 * the kind's own hold (whose first field, h, every kind shares). */
typedef struct part {
    const struct kind *kind;
    sluice__held *h;       /* &u.l.h or &u.k.h */
    int cls;               /* lock order: 0 region keys, then 1 local limits */
    uint64_t o[3];         /* then these: (region identity, shard) or address */
    bool first_of_lock;    /* the first part of its lock (shards are shared) */
    uint64_t p;            /* the permits this limit is asked for */
    union {
        sluice__lim_hold l;
        sluice__key_hold k;
    } u;
} part;

/* What the protocol asks of a kind of limit.  NULL: nothing to do. */
typedef struct kind {
    bool key;                                     /* a table key (same_key, make) */
    void (*hold)(part *pt, uint64_t now);         /* take its lock (first_of_lock) */
    void (*find)(part *pt);                       /* fill h.pf, h.st under it */
    void (*refind)(part *pt);                     /* again, after a make moved it */
    int (*make)(part *pt, bool alone, bool last, int64_t *retry); /* its entry */
    void (*store)(part *pt);                      /* commit h.tmp (or h.st) */
    void (*unmake)(part *pt);                     /* undo a make */
    /* count the final answer under the hold, or after the release */
    void (*count_held)(part *pt, uint64_t permits, bool ok);
    void (*release)(part *pt, bool commit);
    void (*count)(part *pt, uint64_t permits, bool ok);
    void (*reclaim)(part *pt, uint64_t now);      /* keys at rest, nothing held */
} kind;

/* A limiter: held by its frozen word or mutex, stored by its release. */
static void lim_hold(part *pt, uint64_t now)
{
    (void)now;
    sluice__limiter_hold(&pt->u.l);
}
static void lim_release(part *pt, bool commit) { sluice__limiter_release(&pt->u.l, commit); }
static void lim_count(part *pt, uint64_t permits, bool ok)
{
    sluice__limiter_count(pt->u.l.lim, permits, ok);
    if (!ok && permits && pt->h->ok) sluice__limiter_count_elsewhere(pt->u.l.lim, permits);
}
static const kind LIMITER = {.hold = lim_hold, .release = lim_release, .count = lim_count};

/* A key of an in-process table: its shard's spin lock. */
static void key_hold(part *pt, uint64_t now) { sluice__table_lock(pt->u.k.t, pt->u.k.shard, now); }
static void key_find(part *pt) { sluice__table_find(&pt->u.k); }
static void key_refind(part *pt) { sluice__table_refind(&pt->u.k); }
static int key_make(part *pt, bool alone, bool last, int64_t *retry)
{
    (void)last;
    return sluice__table_make(&pt->u.k, alone, retry);
}
static void key_store(part *pt) { sluice__table_store(&pt->u.k); }
static void key_unmake(part *pt) { sluice__table_unmake(&pt->u.k); }
static void key_release(part *pt, bool commit)
{
    (void)commit;
    sluice__table_unlock(pt->u.k.t, pt->u.k.shard);
}
static void key_count(part *pt, uint64_t permits, bool ok)
{
    sluice__key_hold *k = &pt->u.k;
    sluice__table_count(k->t, permits, ok, !pt->h->ok && pt->h->r.error == SLUICE_EFULL);
    if (!ok && permits && pt->h->ok) sluice__table_count_elsewhere(k->t, permits);
    if (!ok) sluice__table_note(k->t, k->key, k->keylen, k->hash);
}
static void key_reclaim(part *pt, uint64_t now) { sluice__table_reclaim(pt->u.k.t, now); }
static const kind TABLE_KEY = {.key = true, .hold = key_hold, .find = key_find,
                               .refind = key_refind, .make = key_make, .store = key_store,
                               .unmake = key_unmake, .release = key_release,
                               .count = key_count, .reclaim = key_reclaim};

/* A key of a table in a shared region: its shard's lock word, taken over
 * from a dead holder if need be; counted under it. */
static void rkey_hold(part *pt, uint64_t now)
{
    sluice__rtable_lock(pt->u.k.rt, pt->u.k.rk, now, &pt->u.k.stolen);
}
static void rkey_find(part *pt) { sluice__rtable_find(&pt->u.k); }
static int rkey_make(part *pt, bool alone, bool last, int64_t *retry)
{
    /* a region evicts only after its other shards were swept, as its
     * single decisions do (or when it has one shard) */
    return sluice__rtable_make(&pt->u.k, alone, last, retry);
}
static void rkey_store(part *pt) { sluice__rtable_store(&pt->u.k); }
static void rkey_unmake(part *pt) { sluice__rtable_unmake(&pt->u.k); }
static void rkey_count_held(part *pt, uint64_t permits, bool ok)
{
    sluice__rtable_count(&pt->u.k, permits, ok, !pt->h->ok && pt->h->r.error == SLUICE_EFULL,
                         !ok && permits && pt->h->ok);
}
static void rkey_release(part *pt, bool commit)
{
    (void)commit;
    sluice__rtable_unlock(pt->u.k.rt, pt->u.k.rk);
}
static void rkey_reclaim(part *pt, uint64_t now) { sluice__rtable_reclaim(pt->u.k.rt, now); }
static const kind SHARED_KEY = {.key = true, .hold = rkey_hold, .find = rkey_find,
                                .make = rkey_make, .store = rkey_store, .unmake = rkey_unmake,
                                .count_held = rkey_count_held, .release = rkey_release,
                                .reclaim = rkey_reclaim};

/* ---- the general path ---------------------------------------------------- */

/* The global lock order: keys of region tables first, by (region identity,
 * shard) -- alike in every process, whatever address each maps a region
 * at -- then the process's own limits by address.  0: the same lock. */
static int lock_cmp(const part *a, const part *b)
{
    if (a->cls != b->cls) return a->cls < b->cls ? -1 : 1;
    for (int i = 0; i < 3; i++)
        if (a->o[i] != b->o[i]) return a->o[i] < b->o[i] ? -1 : 1;
    return 0;
}

/* Whether two key parts name one key of one table. */
static bool same_key(const part *a, const part *b)
{
    const sluice__key_hold *x = &a->u.k, *y = &b->u.k;
    if (a->kind != b->kind || lock_cmp(a, b) != 0) return false; /* one shard */
    if (a->kind == &TABLE_KEY && x->t != y->t) return false; /* two handles of one
                                                              * region are one table */
    if (x->entry != UINT32_MAX || y->entry != UINT32_MAX) return x->entry == y->entry;
    return x->keylen == y->keylen && (x->keylen == 0 || memcmp(x->key, y->key, x->keylen) == 0);
}

static bool bad_call(size_t n, sluice_result *res, sluice_result *per_limit)
{
    if (res) sluice__fail(res, SLUICE_EINVAL);
    if (per_limit)
        for (size_t i = 0; i < n && i < SLUICE_COMPOSITE_MAX; i++) sluice__fail(&per_limit[i], SLUICE_EINVAL);
    return false;
}

/* The general path's steps of the protocol (alg/attempt.h), over the
 * parts of one call: each part's kind does what the step asks of it. */
typedef struct general_call {
    part *parts;
    const size_t *ord; /* the global lock order: the protocol's order */
    size_t n;
    uint64_t now;
    bool details;
    bool last;  /* the call's last attempt: a full table refuses for good */
    bool efull; /* a new key found its table full (keys at rest in other
                 * shards may make room) */
} general_call;

/* Hold the k-th part in the lock order (its lock when the first part of
 * it), find its state, and judge the request on it.  A key named twice
 * (two parts of one lock, so next to each other in the order): not a call
 * to decide. */
static inline __attribute__((always_inline)) int g_hold(general_call *g, size_t k)
{
    part *pt = &g->parts[g->ord[k]];
    if (pt->first_of_lock) pt->kind->hold(pt, g->now);
    if (pt->kind->find) pt->kind->find(pt);
    for (size_t j = k; pt->kind->key && j > 0 && lock_cmp(&g->parts[g->ord[j - 1]], pt) == 0; j--)
        if (same_key(&g->parts[g->ord[j - 1]], pt)) return SLUICE__HANDOVER;
    sluice__held *h = pt->h;
    h->ok = sluice__judge(h->pf, h->st, &h->tmp, g->now, pt->p, g->details ? &h->r : NULL);
    return h->ok;
}

/* New keys' entries and room in the window logs' rings, the steps that can
 * fail; a failure undoes the entries made (nobody saw them). */
static inline __attribute__((always_inline)) bool g_prepare(general_call *g)
{
    part *parts = g->parts;
    const size_t n = g->n;
    bool commit = true;
    for (size_t i = 0; i < n && commit; i++) {
        part *pt = &parts[i];
        sluice__held *h = pt->h;
        if (pt->p == 0) continue; /* a probe (permits per limit): no key made */
        if (pt->kind->refind) pt->kind->refind(pt); /* an earlier make moved it? */
        if (pt->kind->make && pt->u.k.entry == UINT32_MAX) {
            bool alone = true;
            for (size_t j = 0; j < n; j++)
                if (j != i && lock_cmp(&parts[j], pt) == 0) alone = false;
            int64_t retry = -1;
            int e = pt->kind->make(pt, alone, g->last, &retry);
            if (e != 0) {
                sluice__deny(&h->r, 0, retry);
                h->r.error = e;
                h->ok = false;
                commit = false;
                g->efull = e == SLUICE_EFULL;
                break;
            }
        }
        if (h->pf->ops->reserve && !h->pf->ops->reserve(h->st)) {
            sluice__judge(h->pf, h->st, &h->tmp, g->now, 0, &h->r);
            sluice__deny(&h->r, h->r.remaining, -1);
            h->r.error = SLUICE_ENOMEM;
            h->ok = false;
            commit = false;
        }
    }
    if (!commit)
        for (size_t i = 0; i < n; i++)
            if (parts[i].kind->key && parts[i].u.k.created) parts[i].kind->unmake(&parts[i]);
    return commit;
}

/* Commit the k-th part's new state (a window log decides on its real
 * state, which cannot fail any more). */
static inline __attribute__((always_inline)) void g_store(general_call *g, size_t k)
{
    part *pt = &g->parts[g->ord[k]];
    sluice__held *h = pt->h;
    if (pt->p == 0) return; /* a probe changes nothing */
    if (pt->kind->refind) pt->kind->refind(pt); /* a later make moved it? */
    if (h->pf->ops->judge) /* judged in place: now take the permits */
        sluice__decide(h->pf, h->st, g->now, pt->p, UINT64_MAX, g->details ? &h->r : NULL);
    if (pt->kind->store) pt->kind->store(pt);
}

/* The final answer, counted under the hold by the kinds that do -- unless
 * the call is tried again for room. */
static inline __attribute__((always_inline)) void g_settle(general_call *g, bool ok)
{
    if (!g->last && !ok && g->efull) return;
    for (size_t i = 0; i < g->n; i++)
        if (g->parts[i].kind->count_held)
            g->parts[i].kind->count_held(&g->parts[i], g->parts[i].p, ok);
}

static inline __attribute__((always_inline)) void g_release(general_call *g, size_t k, bool stored)
{
    part *pt = &g->parts[g->ord[k]];
    if (pt->first_of_lock) pt->kind->release(pt, stored && pt->p > 0); /* a probe: nothing */
}

/* The holds are locks: taken already, and nothing to confirm. */
static inline bool g_take(general_call *g)
{
    (void)g;
    return true;
}
static inline bool g_confirm(general_call *g)
{
    (void)g;
    return true;
}

SLUICE__ATTEMPT(general_attempt, general_call, g)

/* One attempt of the general path: the protocol with its steps inlined. */
static __attribute__((noinline)) int attempt(general_call *g, uint64_t permits)
{
    return general_attempt(g, g->n, permits);
}

/* After a dead holder's shard was taken over (and repaired) by this call:
 * the region's count of keys, exact again -- with nothing held, as
 * region_table.c's resync locks every shard of the region. */
static void resync_stolen(part *parts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (parts[i].kind == &SHARED_KEY && parts[i].u.k.stolen) {
            sluice__rtable_resync(parts[i].u.k.rt);
            for (size_t j = i; j < n; j++) /* once per region */
                if (parts[j].kind == &SHARED_KEY && parts[j].o[0] == parts[i].o[0] &&
                    parts[j].o[1] == parts[i].o[1])
                    parts[j].u.k.stolen = false;
        }
}

/* Set up part pt for ref r: its kind, its hold, its place in the lock
 * order.  false: a bad ref. */
static bool setup(part *pt, const sluice_limit_ref *r, bool details)
{
    if ((r->limiter != NULL) == (r->table != NULL)) return false;
    if (r->limiter) {
        pt->kind = &LIMITER;
        pt->h = &pt->u.l.h;
        pt->u.l.lim = r->limiter;
        pt->cls = 1;
        pt->o[0] = (uintptr_t)r->limiter;
        pt->o[1] = pt->o[2] = 0;
    } else {
        sluice__key_hold *k = &pt->u.k; /* not zeroed: every field is set before use */
        pt->h = &k->h;
        k->t = r->table;
        k->key = r->key;
        k->keylen = r->keylen;
        k->created = false;
        k->stolen = false;
        k->entry = UINT32_MAX;
        if ((k->rt = sluice__table_region(r->table)) != NULL) {
            if (!sluice__rtable_key_ok(k->rt, r->key, r->keylen)) return false;
            pt->kind = &SHARED_KEY;
            k->skey = k->key ? k->key : "";
            k->skeylen = k->keylen;
            sluice__rtable_key_view(k->rt, &k->skey, &k->skeylen, k->dig); /* a long key */
            k->rk = sluice__rtable_shard_of(k->rt, k->skey, k->skeylen, &k->hash, k->rid);
            pt->cls = 0;
            pt->o[0] = k->rid[0];
            pt->o[1] = k->rid[1];
            pt->o[2] = k->rk;
        } else {
            if (!r->key && r->keylen) return false;
            pt->kind = &TABLE_KEY;
            sluice__table_key_view(k); /* a long key: its digest */
            k->shard = sluice__table_shard_of(r->table, k->skey, k->skeylen, &k->hash);
            pt->cls = 1;
            pt->o[0] = (uintptr_t)k->shard;
            pt->o[1] = pt->o[2] = 0;
        }
    }
    if (details) pt->h->r = (sluice_result){0};
    else pt->h->r.error = 0; /* read for the table's count of refusals */
    return true;
}

/* The general path: set the parts up, hold them in the global lock order,
 * decide, commit or not, release, count.  Every limit asks for `permits`,
 * or with pv not NULL limit i for pv[i] (then `permits` is their largest).
 * Returns whether the request was allowed (a probe: whether every limit
 * allows it), or -1: a bad call, nothing decided.  Each limit's answer into
 * ans, unless NULL. */
static int general_in(const sluice_limit_ref *refs, size_t n, uint64_t permits, const uint64_t *pv,
                      uint64_t now_ns, sluice__answer *ans)
{
    if (!refs || n == 0 || n > SLUICE_COMPOSITE_MAX) return -1;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    const bool details = ans != NULL;
    part parts[SLUICE_COMPOSITE_MAX];
    size_t ord[SLUICE_COMPOSITE_MAX];
    for (size_t i = 0; i < n; i++) {
        part *pt = &parts[i];
        if (!setup(pt, &refs[i], details)) return -1;
        pt->p = pv ? pv[i] : permits;
        /* insertion sort in the global lock order */
        size_t k = i;
        while (k > 0 && lock_cmp(&parts[ord[k - 1]], pt) > 0) {
            ord[k] = ord[k - 1];
            k--;
        }
        ord[k] = i;
    }
    for (size_t k = 0; k < n; k++) {
        part *pt = &parts[ord[k]];
        pt->first_of_lock = k == 0 || lock_cmp(&parts[ord[k - 1]], pt) != 0;
        if (!pt->first_of_lock && !pt->kind->key) return -1; /* a limiter twice */
    }

    general_call g = {.parts = parts, .ord = ord, .n = n, .now = now_ns, .details = details};
    int got = attempt(&g, permits);
    if (got == 0 && g.efull) { /* keys at rest elsewhere may make room: once more */
        resync_stolen(parts, n);
        for (size_t i = 0; i < n; i++)
            if (parts[i].kind->reclaim) parts[i].kind->reclaim(&parts[i], now_ns);
        g.last = true;
        g.efull = false;
        got = attempt(&g, permits);
    }
    resync_stolen(parts, n);
    if (got < 0) return -1; /* a key twice */
    const bool ok = got == 1;

    for (size_t i = 0; i < n; i++) /* those counted under the hold were */
        if (parts[i].kind->count) parts[i].kind->count(&parts[i], parts[i].p, ok);
    for (size_t i = 0; ans && i < n; i++)
        ans[i] = (sluice__answer){.ok = parts[i].h->ok, .r = parts[i].h->r};
    return ok;
}

/* general_in() in one reader section (table.h, sluice__rd_*): a shared
 * table's key hands out its parsed configuration at its find, and a later
 * part's find may retire it (two keys under configurations CFG_K apart, as a
 * damaged region can show); the section keeps it until the decision ends. */
static __attribute__((noinline)) int general(const sluice_limit_ref *refs, size_t n,
                                             uint64_t permits, const uint64_t *pv,
                                             uint64_t now_ns, sluice__answer *ans)
{
    void *rd = sluice__rd_enter();
    const int rc = general_in(refs, n, permits, pv, now_ns, ans);
    sluice__rd_exit(rd);
    return rc;
}

/* ---- entry point --------------------------------------------------------- */

/* Every call but the lock-free limiters' without per_limit: the
 * in-process keys' fast path, each limiter's answer, the general path, bad
 * calls. */
static __attribute__((noinline)) bool rest(const sluice_limit_ref *refs, size_t n,
                                           uint64_t permits, uint64_t now_ns,
                                           sluice_result *res, sluice_result *per_limit)
{
    const bool tables = n && refs && refs[0].table; /* a guess at the kind; each checks */
    if (!res && !per_limit) { /* the overload's call: no details */
        int got = tables ? sluice__tables_decide(refs, n, permits, now_ns, NULL) : -1;
        if (got < 0) got = general(refs, n, permits, NULL, now_ns, NULL);
        return got > 0;
    }
    sluice__answer a[SLUICE_COMPOSITE_MAX];
    int got = tables      ? sluice__tables_decide(refs, n, permits, now_ns, a)
              : per_limit ? sluice__limiters_each(refs, n, permits, now_ns, a)
                          : -1;
    if (got < 0 && (got = general(refs, n, permits, NULL, now_ns, a)) < 0)
        return bad_call(n, res, per_limit);
    return sluice__combine(a, n, got == 1, permits, res, per_limit);
}

/* Lock-free limiters first, with no setup: limiter.c decides, counts and
 * combines them, or hands the call, undecided, to rest() (a callback: the
 * limiter layer knows nothing above it); table keys and each limit's
 * answer go to rest() at once. */
bool sluice_composite_try_acquire_at(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                                     uint64_t now_ns, sluice_result *res,
                                     sluice_result *per_limit)
{
    if (per_limit || (n && refs && refs[0].table))
        return rest(refs, n, permits, now_ns, res, per_limit);
    return sluice__limiters_try(refs, n, permits, now_ns, res, rest);
}

/* Each limit its own permits: all equal is the call above (its fast
 * paths); otherwise the general path, then the combination with each
 * limit's remaining made whole by its own permits when the request was
 * refused (sluice__combine adds one count for all). */
bool sluice_composite_try_acquire_n_at(const sluice_limit_ref *refs, const uint64_t *permits, size_t n,
                                       uint64_t now_ns, sluice_result *res, sluice_result *per_limit)
{
    if (!permits || !refs || n == 0 || n > SLUICE_COMPOSITE_MAX) return bad_call(n, res, per_limit);
    uint64_t most = 0;
    bool same = true;
    for (size_t i = 0; i < n; i++) {
        if (permits[i] > most) most = permits[i];
        same &= permits[i] == permits[0];
    }
    if (same) return sluice_composite_try_acquire_at(refs, n, permits[0], now_ns, res, per_limit);
    sluice__answer a[SLUICE_COMPOSITE_MAX];
    int got = general(refs, n, most, permits, now_ns, (res || per_limit) ? a : NULL);
    if (got < 0) return bad_call(n, res, per_limit);
    if (!res && !per_limit) return got > 0;
    for (size_t i = 0; i < n; i++)
        if (got != 1 && a[i].ok) { /* would have allowed: nothing was taken */
            a[i].r.remaining += permits[i];
            a[i].r.wait_ns = 0;
        }
    return sluice__combine(a, n, got == 1, 0, res, per_limit);
}
