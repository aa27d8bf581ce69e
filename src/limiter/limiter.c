/* limiter.c -- the public limiter: a profile, a state, counters.
 *
 * Every decision goes through sluice__decide() (internal.h), which clamps
 * the time to the latest admission (docs/decisions.md, section 1) and
 * hands the request to the algorithm's row of operations; tables (table.c)
 * call the same function on their per-key states, so the two can never
 * disagree.  Only an admission writes: an algorithm's decide leaves the
 * state untouched when it refuses or answers a probe.
 *
 * Concurrency.  When the profile says the state packs into 128 bits
 * (fixed-window always; token-bucket and leaky-bucket when burst*W/gcd(L,W)
 * < 2^64, which every practical spec meets; sliding-approx when L < 2^32),
 * the state lives in one 16-byte word -- the latest admission's time in
 * the low half, the algorithm's count in the high half -- and a decision is
 *
 *     read the word without writing it (load_word: two loads of the time
 *     half around one of the count half; proof at load_word)
 *     unpack, decide, pack: for a decision, in one call of the
 *     algorithm's decide_packed (internal.h), which gives the locked
 *     path's answer; for a reservation or a give-back, its three steps
 *     nothing changed (a refusal, a probe): return -- no store, no CAS
 *     else compare-and-swap the 16 bytes (cmpxchg16b); on failure retry
 *     with the value the CAS returned -- someone else admitted.
 *
 * No mutex, no spin lock, no allocation: lock-free, linearisable at the
 * snapshot for a refusal and at the successful CAS for an admission, so
 * the decisions are exactly the contract's for that order, with any
 * timestamps (a stale, earlier time is clamped inside the loop).  The word
 * has a cache line of its own, which under overload only ever is read, so
 * threads refusing on one limiter share it without moving it.
 *
 * Otherwise -- sliding-log and sliding-wheel, whose ring cannot be swapped
 * in one instruction, the rare unpackable specs, and machines without a
 * 16-byte CAS -- a mutex guards the state for a few dozen instructions.
 * The window logs are still refused without it: their writers publish the
 * ring's header under a sequence counter, which refusals and probes read
 * and recheck, writing nothing (window_log.c, proof in its head comment);
 * a read that would admit is committed under the mutex as it stands,
 * unless a writer came between (then the mutex decides again).
 *
 * Configurations.  The profile and the packed word live in a configuration
 * that the limiter reaches through one pointer.  A change of spec
 * (reconfigure.c) freezes the old word for ever, converts its state and
 * publishes a new configuration with a new word, so a decision that read
 * the old configuration can never commit on it; old configurations are
 * kept until the limiter is freed.  The time half of the word is at most
 * 2^63-1; its top bit marks the word held (by a composite decision,
 * composite.c, or a change): every CAS on it then fails and decisions wait
 * for the release.
 *
 * The refusals' hint.  Under overload a refusal need not decide at all:
 * beside its word each configuration keeps a hint H, 0 or a time such that
 * one permit is refused at every clamped time in [t_last, H) of the word
 * it was computed from (the algorithm's refused_until, internal.h).  Each
 * admission -- a successful CAS that took permits -- stores the hint of
 * the word it wrote, after its CAS; nothing else stores it.  A give-back
 * (a cancelled reservation, the one write that makes a word more
 * permissive) first clears the configuration's flag `hinted` (set when
 * it is made lock-free), for good.  A request for p >= 1 at now without
 * details then loads c (the configuration), hinted and H, in this order --
 * the live form before it reads the clock -- and if hinted is set and now
 * < H, the word's time half lo; if lo < H it is refused and counted: no
 * other read, no store.  (Until a change of spec c is the limiter's own
 * `first`, whose fields are addressed from the limiter, not from the load
 * of c: the loads still come in this order.)
 *
 * Claim: that is the decision's answer on the state c's word held at an
 * instant inside the call.  Proof (x86-64's ordering: stores become
 * visible in program order, loads read in program order).  Say H was
 * stored by admission A, whose CAS (instant a) wrote word S_A, and c was
 * loaded at c0; let L = max(c0, a), before the load of H (A's CAS precedes
 * its store of H).  At L, c was current: at c0 the call read it; at a, A's
 * CAS succeeded on c's word, which a reconfiguration freezes for ever
 * before it publishes the next configuration.  No give-back's CAS on c's
 * word came between a and L: if L = c0 > a, such a CAS, and the store
 * clearing `hinted` before it, were visible before the call's load of
 * hinted, which read it set.  So between a and L only admissions wrote the
 * word, and an admission only takes room: a word that refuses one permit
 * at t still refuses it, and any larger request, after admissions at times
 * <= t (refused_until's contract).  The time half never decreases (the frozen
 * bit aside, which only makes lo larger), so the latest time of the word
 * at L is <= lo < H, and the decision at L clamps now to t =
 * max(min(now, 2^63-1), t_last) with t_A <= t < H, where S_A refuses.  So
 * the refusal is the decision on the word at L; the call is linearised at
 * L.  (The hint is off after a give-back until the next reconfiguration:
 * an admission's late store could otherwise bring back a hint older than
 * the give-back.)  Window logs keep their hint in their publication, read
 * under its sequence (window_log.c); the locked path has none.
 *
 * The public decisions (decide_fast) are shaped for the refusal, the
 * overload's common case: the hint first, then the snapshot, the call and
 * the count inline, an admission's compare-and-swap too; retries, frozen
 * words and the locked path out of line.
 *
 * The counters are striped per thread (counters.c), and so is the wait
 * histogram of the blocking acquires: each records, once it returns, its
 * wait from the call to the grant on the limiter's clock, or how it failed.
 */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"
#include "base/clock.h"
#include "base/counters.h"
#include "limiter/limiter.h"
#include "limiter/hold.h"
#include "alg/bucket.h"
#include "alg/reconfigure.h"
#include "base/spin.h"
#include "alg/window_log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define HAVE_CAS128 SLUICE__CAS128 /* internal.h */

typedef union word {
    u128 w;
    uint64_t h[2]; /* little-endian: h[0] is the low half */
} word;

/* The time half of a packed word is at most 2^63-1; its top bit marks the
 * word frozen: held by a composite decision or a reconfiguration (see the
 * head comment).  A frozen word is never a value a decision expects, so
 * every compare-and-swap on it fails until it is released. */
#define FROZEN ((uint64_t)1 << 63)

/* One configuration of a limiter: its profile, whether it decides
 * lock-free, and (if so) the packed state word it decides on.  Immutable
 * but for the word.  A reconfiguration publishes a new one and leaves the
 * old word frozen for ever; retired configurations are kept, linked by
 * `older`, until the limiter is freed.  The first is part of the limiter
 * (`first`): until a change of spec, a refusal finds it from the limiter's
 * address, without waiting for the load of `cur`. */
typedef struct cfg {
    _Alignas(64) word packed; /* lock-free state, on a cache line with: */
    _Atomic uint64_t hint;    /* the refusals' hint (head comment) */
    _Atomic bool hinted;      /* lock-free, and no give-back yet: the hint is on */
    clockid_t clock;          /* what the live form reads: pf.clock's */
    bool lockfree;            /* on the word's line: a refusal reads it too */
    _Alignas(64) sluice__profile pf;
    struct cfg *older;
} cfg;

struct sluice_limiter {
    _Atomic(cfg *) cur;  /* the current configuration */
    const sluice__alg_ops *ops; /* the algorithm's row: never changes */
    pthread_mutex_t mu;  /* the locked path; serialises reconfigurations */
    sluice__state st;    /* the locked path's state */
    sluice__logpub *pub; /* sliding-log, sliding-wheel: st's log as refusals
                          * read it without mu (window_log.c); else NULL */
    _Atomic uint32_t refs; /* the creator's, plus one per sluice__limiter_retain */
    cfg first;           /* the configuration it was made with */
    sluice__counters counters;
    sluice__waits waits; /* blocking acquires (counters.h) */
};

static inline cfg *cur_cfg(const sluice_limiter *lim)
{
    return atomic_load_explicit(&((sluice_limiter *)lim)->cur, memory_order_acquire);
}


/* ---- the packed word ---------------------------------------------------- */

static inline u128 mkword(uint64_t lo, uint64_t hi) { return (u128)hi << 64 | lo; }

/* What a call does to a state: decide (try_acquire, acquire), reserve, or
 * give a reservation's permits back (at_ns: the reservation's time; the
 * permits go back only if the clamped time is before it).  *t_eff receives
 * the time the call was decided at: now_ns clamped to the latest
 * admission, and to 2^63-1. */
enum op { OP_DECIDE, OP_RESERVE, OP_GIVE_BACK };

static inline bool apply(const sluice__profile *pf, sluice__state *st, enum op op,
                         uint64_t now_ns, uint64_t permits, uint64_t max_wait,
                         uint64_t at_ns, sluice_result *res, uint64_t *t_eff)
{
    uint64_t t = sluice__clamp_time(st, now_ns);
    *t_eff = t;
    if (op == OP_DECIDE) return sluice__decide(pf, st, t, permits, max_wait, res);
    if (op == OP_RESERVE) return sluice__bucket_reserve(pf, st, t, permits, max_wait, res);
    return sluice__bucket_give_back(pf, st, t, permits, at_ns);
}

#if HAVE_CAS128
/* A consistent snapshot of the 16-byte word without writing it, or false
 * when the word is frozen.  The time half only grows but for the frozen
 * bit (every write stores the clamped time, which is >= the one it
 * replaces; a holder of the frozen word writes the count half before it
 * clears the bit, with release order), so if two loads of it around the
 * load of the count half agree and are not frozen, the pair read is a
 * value the word held at an instant between the loads.  (Each half is an
 * aligned 8-byte load, atomic on x86-64, and cmpxchg16b writes all 16
 * bytes at once; the acquire loads keep the three in program order.)
 * Retried only when a write moved the time: some other decision admitted,
 * so the loop is lock-free. */
static inline bool load_word(const word *pw, u128 *out)
{
    for (;;) {
        uint64_t lo = __atomic_load_n(&pw->h[0], __ATOMIC_ACQUIRE);
        if (lo & FROZEN) return false;
        uint64_t hi = __atomic_load_n(&pw->h[1], __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&pw->h[0], __ATOMIC_ACQUIRE) == lo) {
            *out = mkword(lo, hi);
            return true;
        }
    }
}

/* The refusals' hint after an admission wrote w (head comment): stored
 * after the compare-and-swap, on the line it just took. */
static inline void set_hint(cfg *c, const uint64_t w[2])
{
    atomic_store_explicit(&c->hint, c->pf.ops->refused_until(&c->pf, w),
                          memory_order_release);
}

/* Wait while c's word is frozen; returns the configuration to use next:
 * c once its word is released, or the new one a reconfiguration
 * published. */
static cfg *wait_frozen(sluice_limiter *lim, cfg *c)
{
    for (unsigned n = 0;; n++) {
        cfg *now = cur_cfg(lim);
        if (now != c) return now;
        if (!(__atomic_load_n(&c->packed.h[0], __ATOMIC_ACQUIRE) & FROZEN)) return c;
        sluice__backoff(n);
    }
}

/* One decision on the snapshot `old`: the word it leaves in *new (== old
 * when nothing was written: a refusal, a probe). */
static inline __attribute__((always_inline)) bool
step(const sluice__profile *pf, enum op op, u128 old, uint64_t permits, uint64_t now_ns,
     uint64_t max_wait, uint64_t at_ns, sluice_result *res, uint64_t *t_eff, u128 *new)
{
    const uint64_t w[2] = {(uint64_t)old, (uint64_t)(old >> 64)};
    if (op == OP_DECIDE) { /* the algorithm's one-call form */
        sluice__state tl = {.t_last = w[0]};
        *t_eff = sluice__clamp_time(&tl, now_ns);
        sluice__packed_req q = {.w = {w[0], w[1]}, .now_ns = now_ns, .p = permits,
                                .max_wait = max_wait, .res = res, .out = {w[0], w[1]}};
        const bool r = pf->ops->decide_packed(pf, &q);
        *new = mkword(q.out[0], q.out[1]);
        return r;
    }
    uint64_t nw[2];
    sluice__state st;
    sluice__state_unpack(pf, w, &st);
    const bool r = apply(pf, &st, op, now_ns, permits, max_wait, at_ns, res, t_eff);
    sluice__state_pack(pf, &st, nw);
    *new = mkword(nw[0], nw[1]);
    return r;
}

/* Lock-free: decide on a snapshot; a refusal or a probe leaves the state as
 * it was and returns with no write at all (linearised at the snapshot);
 * anything else commits with one compare-and-swap, retried from the value
 * the CAS saw (linearised at the successful CAS).  A frozen word is waited
 * for (held for a few dozen instructions by a composite decision or a
 * reconfiguration).  Returns false, deciding nothing, when the limiter has
 * moved to the locked path (*c then holds its configuration).
 *
 * decide_lockfree is the path of a refusal, inlined into its caller: one
 * snapshot, one decision, nothing to write.  Everything else -- a commit,
 * a retry, a frozen word -- continues out of line in lockfree_loop, from
 * the snapshot and decision already made (`first`, when not NULL). */
static __attribute__((noinline)) bool
lockfree_loop(sluice_limiter *lim, cfg **pc, enum op op, uint64_t permits, uint64_t now_ns,
              uint64_t max_wait, uint64_t at_ns, sluice_result *res, uint64_t *t_eff, bool *ok,
              const u128 *first, u128 first_new, bool first_r)
{
    cfg *c = *pc;
    u128 old = first ? *first : 0;
    for (;;) {
        if (!first) {
            while (!load_word(&c->packed, &old)) {
                c = wait_frozen(lim, c);
                if (!c->lockfree) {
                    *pc = c;
                    return false;
                }
            }
        }
        const sluice__profile *pf = &c->pf;
        for (;;) {
            u128 new;
            bool r;
            if (first) {
                new = first_new;
                r = first_r;
                first = NULL;
            } else {
                r = step(pf, op, old, permits, now_ns, max_wait, at_ns, res, t_eff, &new);
            }
            if (new != old) {
                /* a give-back turns the hint off before its word can be
                 * seen (head comment) */
                if (op == OP_GIVE_BACK) atomic_store(&c->hinted, false);
                u128 cur = __sync_val_compare_and_swap(&c->packed.w, old, new);
                if (cur != old) {
                    old = cur;
                    if ((uint64_t)old & FROZEN) break; /* held: wait, start over */
                    continue;
                }
                if (op != OP_GIVE_BACK) {
                    const uint64_t w[2] = {(uint64_t)new, (uint64_t)(new >> 64)};
                    set_hint(c, w);
                }
            }
            *ok = r;
            return true;
        }
    }
}

static inline __attribute__((always_inline)) bool
decide_lockfree(sluice_limiter *lim, cfg **pc, enum op op, uint64_t permits, uint64_t now_ns,
                uint64_t max_wait, uint64_t at_ns, sluice_result *res, uint64_t *t_eff, bool *ok)
{
    u128 old, new;
    if (!load_word(&(*pc)->packed, &old))
        return lockfree_loop(lim, pc, op, permits, now_ns, max_wait, at_ns, res, t_eff, ok,
                             NULL, 0, false);
    bool r = step(&(*pc)->pf, op, old, permits, now_ns, max_wait, at_ns, res, t_eff, &new);
    if (new != old)
        return lockfree_loop(lim, pc, op, permits, now_ns, max_wait, at_ns, res, t_eff, ok,
                             &old, new, r);
    *ok = r;
    return true;
}
#endif

static void cfg_free_all(sluice_limiter *lim, cfg *c)
{
    while (c) {
        cfg *o = c->older;
        if (c != &lim->first) sluice__free64(c);
        c = o;
    }
}

/* ---- public API --------------------------------------------------------- */

sluice_limiter *sluice_limiter_new(const char *spec, char *err, size_t errlen)
{
    sluice__profile pf;
    if (sluice__spec_parse(spec, &pf, err, errlen) != 0) return NULL;
    sluice_limiter *lim = sluice__calloc64(sizeof *lim);
    if (!lim) {
        sluice__errf(err, errlen, "out of memory");
        return NULL;
    }
    cfg *c = &lim->first;
    if (pthread_mutex_init(&lim->mu, NULL) != 0) {
        sluice__free64(lim);
        sluice__errf(err, errlen, "cannot create a mutex");
        return NULL;
    }
    atomic_init(&lim->refs, 1);
    c->pf = pf;
    c->clock = sluice__clock_id(pf.clock);
    c->lockfree = HAVE_CAS128 && pf.packed;
    atomic_init(&c->hinted, c->lockfree);
    lim->ops = pf.ops;
    sluice__state_init(&c->pf, &lim->st);
    if (pf.alg == SLUICE__SLIDING_LOG || pf.alg == SLUICE__SLIDING_WHEEL) {
        if (!(lim->pub = sluice__log_pub_new(&c->pf))) {
            pthread_mutex_destroy(&lim->mu);
            sluice__free64(lim);
            sluice__errf(err, errlen, "out of memory");
            return NULL;
        }
    }
    if (pf.packed) {
        uint64_t w[2];
        sluice__state_pack(&c->pf, &lim->st, w);
        c->packed.w = mkword(w[0], w[1]);
    }
    atomic_init(&lim->cur, c);
    return lim;
}

void sluice_limiter_free(sluice_limiter *lim)
{
    if (!lim) return;
    if (atomic_fetch_sub_explicit(&lim->refs, 1, memory_order_acq_rel) != 1) return;
    cfg *c = atomic_load_explicit(&lim->cur, memory_order_relaxed);
    if (!c->lockfree) sluice__state_fini(&c->pf, &lim->st);
    sluice__free64(lim->pub);
    pthread_mutex_destroy(&lim->mu);
    cfg_free_all(lim, c);
    sluice__free64(lim);
}

/* The locked path (run tries the window logs' lock-free read first). */
static __attribute__((noinline)) bool
run_locked(sluice_limiter *lim, enum op op, uint64_t permits, uint64_t now_ns,
           uint64_t max_wait, uint64_t at_ns, sluice_result *res, uint64_t *t_eff)
{
    bool ok;
    pthread_mutex_lock(&lim->mu);
    cfg *c = cur_cfg(lim); /* stable while mu is held */
    if (lim->pub) sluice__log_begin(lim->pub);
    ok = apply(&c->pf, &lim->st, op, now_ns, permits, max_wait, at_ns, res, t_eff);
    if (lim->pub) sluice__log_end(lim->pub, &lim->st, NULL, ok && permits);
    pthread_mutex_unlock(&lim->mu);
    return ok;
}

/* Inlined into each caller, so that `op` is a constant there. */
static inline __attribute__((always_inline)) bool
run(sluice_limiter *lim, enum op op, uint64_t permits, uint64_t now_ns, uint64_t max_wait,
    uint64_t at_ns, sluice_result *res, uint64_t *t_eff)
{
    bool ok;
#if HAVE_CAS128
    cfg *c = cur_cfg(lim);
    if (!c->lockfree || !decide_lockfree(lim, &c, op, permits, now_ns, max_wait, at_ns, res,
                                         t_eff, &ok))
#endif
        /* a window log: refusals and probes read (window_log.h) */
        if (!lim->pub || !sluice__log_read(lim->pub, now_ns, permits, res, t_eff, &ok))
            ok = run_locked(lim, op, permits, now_ns, max_wait, at_ns, res, t_eff);
    if (op != OP_GIVE_BACK) sluice__count(&lim->counters, permits, ok);
    return ok;
}

static __attribute__((noinline)) bool decide(sluice_limiter *lim, uint64_t permits,
                                             uint64_t now_ns, uint64_t max_wait,
                                             sluice_result *res)
{
    uint64_t t;
    return run(lim, OP_DECIDE, permits, now_ns, max_wait, 0, res, &t);
}

#if HAVE_CAS128
/* decide_fast when its compare-and-swap failed (someone else admitted, or
 * the word is frozen): decide again from a new snapshot (lockfree_loop),
 * else on the locked path, and count. */
static __attribute__((noinline)) bool decide_resume(sluice_limiter *lim, cfg *c,
                                                    const sluice__packed_req *q)
{
    uint64_t t;
    bool ok;
    if (!lockfree_loop(lim, &c, OP_DECIDE, q->p, q->now_ns, q->max_wait, 0, q->res, &t, &ok,
                       NULL, 0, false)) {
        if (!lim->pub || !sluice__log_read(lim->pub, q->now_ns, q->p, q->res, &t, &ok))
            ok = run_locked(lim, OP_DECIDE, q->p, q->now_ns, q->max_wait, 0, q->res, &t);
    }
    sluice__count(&lim->counters, q->p, ok);
    return ok;
}
#endif

#if HAVE_CAS128
/* A window log's decision: refusals read, admissions commit what the read
 * found (window_log.h). */
static __attribute__((noinline)) bool decide_log(sluice_limiter *lim, uint64_t permits,
                                                 uint64_t now_ns, sluice_result *res)
{
    uint64_t t;
    bool ok;
    if (!sluice__log_decide(lim->pub, &lim->mu, &lim->st, now_ns, permits, res, &ok))
        ok = run_locked(lim, OP_DECIDE, permits, now_ns, UINT64_MAX, 0, res, &t);
    sluice__count(&lim->counters, permits, ok);
    return ok;
}
#endif

/* A decision from the public calls, shaped for the refusal: one snapshot,
 * the algorithm's decide_packed on a request in memory, and -- nothing to
 * write -- the count; after the call only lim and the request are needed,
 * so it saves next to no registers.  An admission commits with one
 * compare-and-swap here too.  Everything else continues out of line
 * (decide_resume after a failed compare-and-swap; decide for a frozen word
 * and the locked path, but for the window logs' read, which comes first
 * as in run). */
static inline __attribute__((always_inline)) bool
decide_fast(sluice_limiter *lim, uint64_t permits, uint64_t now_ns, sluice_result *res)
{
#if HAVE_CAS128
    cfg *c = cur_cfg(lim);
    u128 old;
    if (c->lockfree && load_word(&c->packed, &old)) {
        const uint64_t lo = (uint64_t)old, hi = (uint64_t)(old >> 64);
        sluice__packed_req q = {.w = {lo, hi}, .now_ns = now_ns, .p = permits,
                                .max_wait = UINT64_MAX, .res = res, .out = {lo, hi}};
        const bool r = c->pf.ops->decide_packed(&c->pf, &q);
        if (q.out[0] != q.w[0] || q.out[1] != q.w[1]) {
            if (!__sync_bool_compare_and_swap(&c->packed.w, mkword(q.w[0], q.w[1]),
                                              mkword(q.out[0], q.out[1])))
                return decide_resume(lim, c, &q);
            set_hint(c, q.out);
        }
        sluice__count(&lim->counters, q.p, r);
        return r;
    }
    if (!c->lockfree && lim->pub) return decide_log(lim, permits, now_ns, res);
#endif
    return decide(lim, permits, now_ns, UINT64_MAX, res);
}

/* The refusals' hint (head comment) of configuration c for a request of
 * `permits`: a time such that the request is refused at any earlier time,
 * or 0.  Lock-free: three loads of c's first line, the flag, the hint,
 * then the time half of the word, which must be below the hint too.  A
 * window log: its published hint (window_log.h).  0 for a probe, when the
 * hint is off, and on the locked path. */
static inline uint64_t hint_for(const sluice_limiter *lim, const cfg *c, uint64_t permits)
{
    if (permits == 0) return 0;
#if HAVE_CAS128
    if (__builtin_expect(atomic_load_explicit(&c->hinted, memory_order_acquire), 1)) {
        const uint64_t h = atomic_load_explicit(&c->hint, memory_order_acquire);
        return __atomic_load_n(&c->packed.h[0], __ATOMIC_ACQUIRE) < h ? h : 0;
    }
#endif
    /* a window log's (a lock-free limiter after a give-back has no pub) */
    return lim->pub ? sluice__log_hint(lim->pub) : 0;
}

/* The current configuration's hint and clock for a public call, and
 * where to read the word's time half once the time is known to be below
 * the hint (NULL: checked already, or no word).  While the limiter has its
 * first configuration, the flag and the hint are addressed from the
 * limiter (&lim->first), not from the load of `cur` before them, so the
 * two levels of loads become one; they still come after the load of cur
 * in program order, as the head comment's proof has them.  The word's
 * line, which an admission's compare-and-swap has just written, is read
 * only for a refusal. */
typedef struct hint {
    uint64_t h;
    const uint64_t *lo;
    clockid_t clock;
} hint;

static inline __attribute__((always_inline)) hint hint_now(const sluice_limiter *lim,
                                                           uint64_t permits)
{
    const cfg *c = cur_cfg(lim);
#if HAVE_CAS128
    const cfg *f = &lim->first;
    const bool on = atomic_load_explicit(&f->hinted, memory_order_acquire);
    const uint64_t h = atomic_load_explicit(&f->hint, memory_order_acquire);
    if (__builtin_expect(c == f && on, 1))
        return (hint){permits != 0 ? h : 0, &f->packed.h[0], f->clock};
    if (!c->lockfree) /* a window log's, under its sequence (window_log.h) */
        return (hint){permits != 0 && lim->pub ? sluice__log_hint(lim->pub) : 0, NULL,
                      c->clock};
#endif
    return (hint){hint_for(lim, c, permits), NULL, c->clock};
}

static inline bool hint_refuses(hint x, uint64_t now_ns)
{
    return now_ns < x.h && (!x.lo || __atomic_load_n(x.lo, __ATOMIC_ACQUIRE) < x.h);
}

/* The public decisions but for the hint's refusal, out of line: what
 * follows the hint saves no registers for them. */
static __attribute__((noinline)) bool decide_rest(sluice_limiter *lim, uint64_t permits,
                                                  uint64_t now_ns, sluice_result *res)
{
    return decide_fast(lim, permits, now_ns, res);
}

bool sluice_try_acquire_at(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                           sluice_result *res)
{
    if (!res && hint_refuses(hint_now(lim, permits), now_ns))
        return sluice__count_denied(&lim->counters, permits);
    return decide_rest(lim, permits, now_ns, res);
}

bool sluice_try_acquire(sluice_limiter *lim, uint64_t permits)
{
    /* the hint is read before the clock (head comment: the refusal is
     * linearised before the hint's load), and so is the thread's counter
     * slot: after the clock only the comparison and the counts are left */
    const hint x = hint_now(lim, permits);
    const unsigned slot = sluice__my_slot - 1;
    /* base/clock.h's reader, inline: the clock's id is in the configuration */
    const uint64_t now = sluice__clock_read(x.clock);
    if (hint_refuses(x, now)) return sluice__count_denied_at(&lim->counters, slot, permits);
    return decide_rest(lim, permits, now, NULL);
}

static bool is_bucket(const sluice_limiter *lim) { return lim->ops->bucket; }

bool sluice__limiter_is_bucket(const sluice_limiter *lim) { return is_bucket(lim); }

uint64_t sluice__limiter_capacity(const sluice_limiter *lim) { return cur_cfg(lim)->pf.capacity; }

void sluice__limiter_raw(sluice_limiter *lim, uint64_t out[6])
{
    memset(out, 0, 6 * sizeof *out);
#if HAVE_CAS128
    cfg *c = cur_cfg(lim);
    u128 v;
    if (c->lockfree && load_word(&c->packed, &v)) {
        out[0] = (uint64_t)v;
        out[1] = (uint64_t)(v >> 64);
        return;
    }
#endif
    pthread_mutex_lock(&lim->mu);
    const sluice__state *st = &lim->st;
    if (lim->pub) {
        const sluice__log *lg = &st->u.log;
        out[0] = atomic_load_explicit(&lim->pub->seq, memory_order_relaxed);
        out[1] = lim->pub->sections;
        out[2] = st->t_last;
        out[3] = lg->len;
        out[4] = lg->base;
        out[5] = lg->len ? lg->e[(lg->head + lg->len - 1) & (lg->cap - 1)].cum : 0;
    } else {
        out[2] = st->t_last;
        memcpy(&out[3], &st->u, 2 * sizeof(uint64_t));
    }
    pthread_mutex_unlock(&lim->mu);
}

void sluice__limiter_retain(sluice_limiter *lim)
{
    atomic_fetch_add_explicit(&lim->refs, 1, memory_order_relaxed);
}

enum { RV_NONE, RV_ACTIVE, RV_FINAL };

bool sluice_reserve_at(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                       uint64_t max_wait_ns, sluice_reservation *rv, sluice_result *res)
{
    sluice_result r;
    uint64_t t;
    bool ok = is_bucket(lim) ? run(lim, OP_RESERVE, permits, now_ns, max_wait_ns, 0, &r, &t)
                             : run(lim, OP_DECIDE, permits, now_ns, UINT64_MAX, 0, &r, &t);
    if (res) *res = r;
    if (rv) {
        rv->permits = ok ? permits : 0;
        rv->wait_ns = ok ? r.wait_ns : 0;
        rv->at_ns = ok ? t + r.wait_ns : 0; /* <= 2^63-1: the reserve bounds it */
        rv->limiter = lim;
        rv->state = ok && is_bucket(lim) && permits ? RV_ACTIVE : RV_FINAL;
    }
    return ok;
}

int sluice_reservation_cancel_at(sluice_reservation *rv, uint64_t now_ns)
{
    if (!rv || rv->state == RV_NONE || !rv->limiter) return SLUICE_EINVAL;
    sluice_limiter *lim = rv->limiter;
    if (!is_bucket(lim)) return SLUICE_EINVAL;
    if (rv->state != RV_ACTIVE) return SLUICE_ENOENT;
    rv->state = RV_FINAL;
    /* whether the permits go back is decided inside the update, at the
     * clamped time: a stale now_ns cannot give back what a later admission
     * already counted on */
    uint64_t t;
    return run(lim, OP_GIVE_BACK, rv->permits, now_ns, 0, rv->at_ns, NULL, &t) ? 0
                                                                              : SLUICE_ENOENT;
}

/* ---- waiting ------------------------------------------------------------ */

struct sluice_canceller {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool cancelled;
};

sluice_canceller *sluice_canceller_new(void)
{
    sluice_canceller *c = sluice__calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) goto fail;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) goto fail;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        pthread_cond_destroy(&c->cv);
        goto fail;
    }
    return c;
fail:
    sluice__free(c);
    return NULL;
}

void sluice_canceller_free(sluice_canceller *c)
{
    if (!c) return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    sluice__free(c);
}

void sluice_canceller_cancel(sluice_canceller *c)
{
    pthread_mutex_lock(&c->mu);
    c->cancelled = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

bool sluice_canceller_cancelled(sluice_canceller *c)
{
    pthread_mutex_lock(&c->mu);
    bool v = c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return v;
}

/* Sleep until CLOCK_MONOTONIC reaches `until`; false if c was cancelled
 * first.  `now` and `until` are on the limiter's clock, which may be the
 * coarse one: the same axis. */
static bool sleep_until(uint64_t until, sluice_canceller *c)
{
    if (!c) {
        for (;;) {
            uint64_t now = sluice_now_ns();
            if (now >= until) return true;
            uint64_t ns = until - now;
            struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
            nanosleep(&ts, NULL); /* EINTR: loop and sleep what is left */
        }
    }
    struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
    pthread_mutex_lock(&c->mu);
    while (!c->cancelled && sluice_now_ns() < until)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) break;
    bool ok = !c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* The blocking acquire from `start` on clock `clk`; on success *granted
 * is the time of the grant: a bucket's booked time, or the later time its
 * sleep ended; a window's admitting decision. */
static int acquire(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns, sluice_canceller *c,
                   sluice__clock clk, uint64_t start, uint64_t *granted)
{
    uint64_t deadline = start + timeout_ns < start ? UINT64_MAX : start + timeout_ns;
    for (;;) {
        if (c && sluice_canceller_cancelled(c)) return SLUICE_ECANCELED;
        uint64_t now = sluice__clock_now(clk);
        uint64_t left = now < deadline ? deadline - now : 0;
        if (is_bucket(lim)) {
            /* x/time/rate's Wait: book the permits now, with a wait that
             * fits the time left, or take nothing and return at once */
            sluice_reservation rv;
            sluice_result r;
            if (!sluice_reserve_at(lim, permits, now, left, &rv, &r)) return SLUICE_ETIMEDOUT;
            if (rv.wait_ns == 0) {
                *granted = now;
                return 0;
            }
            if (sleep_until(rv.at_ns, c)) {
                uint64_t end = sluice__clock_now(clk); /* a coarse clock may lag */
                *granted = end > rv.at_ns ? end : rv.at_ns;
                return 0;
            }
            sluice_reservation_cancel_at(&rv, sluice__clock_now(clk));
            return SLUICE_ECANCELED;
        }
        sluice_result r;
        if (decide(lim, permits, now, left, &r)) {
            *granted = now;
            return 0;
        }
        if (r.error) return r.error; /* sliding-log, sliding-wheel: no memory */
        /* -1: never; or more than the time left */
        if (r.retry_after_ns < 0 || (uint64_t)r.retry_after_ns > left) return SLUICE_ETIMEDOUT;
        if (!sleep_until(now + (uint64_t)r.retry_after_ns, c)) return SLUICE_ECANCELED;
    }
}

int sluice_acquire_cancellable(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns,
                               sluice_canceller *c)
{
    const sluice__clock clk = cur_cfg(lim)->pf.clock;
    uint64_t start = sluice__clock_now(clk), granted = start;
    int rc = acquire(lim, permits, timeout_ns, c, clk, start, &granted);
    sluice__waits_count(&lim->waits, rc, granted > start ? granted - start : 0);
    return rc;
}

bool sluice_acquire(sluice_limiter *lim, uint64_t permits, uint64_t timeout_ns)
{
    return sluice_acquire_cancellable(lim, permits, timeout_ns, NULL) == 0;
}

void sluice_limiter_stats_get(const sluice_limiter *lim, sluice_stats *out)
{
    sluice__counters_read(&lim->counters, out);
}

void sluice_limiter_wait_stats_get(const sluice_limiter *lim, sluice_wait_stats *out)
{
    sluice__waits_read(&lim->waits, out);
}

int sluice_limiter_spec_format(const sluice_limiter *lim, char *buf, size_t buflen)
{
    return sluice__spec_format(&cur_cfg(lim)->pf, buf, buflen);
}

int sluice_spec_check(const char *spec, char *canon, size_t canonlen, char *err,
                      size_t errlen)
{
    sluice__profile pf;
    int rc = sluice__spec_parse(spec, &pf, err, errlen);
    if (rc != 0) return rc;
    if (canon) {
        rc = sluice__spec_format(&pf, canon, canonlen);
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- composite decisions: a limiter's kind ops (limiter/hold.h) -------- */

/* A composite holds a lock-free limiter by freezing its word (a CAS from a
 * snapshot to the snapshot with the frozen bit), so that no other decision
 * can commit, or decide on it, until the release; a limiter in the locked
 * path by its mutex. */
void sluice__limiter_hold(sluice__lim_hold *part)
{
    sluice_limiter *lim = part->lim;
    cfg *c = cur_cfg(lim);
#if HAVE_CAS128
    while (c->lockfree) {
        u128 v;
        if (!load_word(&c->packed, &v)) {
            c = wait_frozen(lim, c);
            continue;
        }
        if (__sync_bool_compare_and_swap(&c->packed.w, v, v | FROZEN)) {
            uint64_t w[2] = {(uint64_t)v, (uint64_t)(v >> 64)};
            sluice__state_unpack(&c->pf, w, &part->h.base);
            part->lockfree = true;
            part->snap = v;
            part->where = c;
            part->h.pf = &c->pf;
            part->h.st = &part->h.base;
            return;
        }
    }
#endif
    pthread_mutex_lock(&lim->mu);
    c = cur_cfg(lim); /* stable while mu is held; never lock-free again */
    if (lim->pub) sluice__log_begin(lim->pub); /* ends at the release */
    part->lockfree = false;
    part->where = c;
    part->h.pf = &c->pf;
    part->h.st = &lim->st;
}

void sluice__limiter_release(sluice__lim_hold *part, bool commit)
{
    cfg *c = part->where;
#if HAVE_CAS128
    if (part->lockfree) {
        /* the count half first, then the time half without the frozen bit
         * (release): a reader that sees the bit clear sees the new count */
        uint64_t w[2] = {(uint64_t)part->snap, (uint64_t)(part->snap >> 64)};
        if (commit) {
            sluice__state_pack(&c->pf, &part->h.tmp, w);
            __atomic_store_n(&c->packed.h[1], w[1], __ATOMIC_RELEASE);
        }
        __atomic_store_n(&c->packed.h[0], w[0], __ATOMIC_RELEASE);
        return;
    }
#endif
    if (commit && !c->pf.ops->judge) part->lim->st = part->h.tmp;
    if (part->lim->pub) sluice__log_end(part->lim->pub, &part->lim->st, NULL, commit);
    pthread_mutex_unlock(&part->lim->mu);
}

void sluice__limiter_count(sluice_limiter *lim, uint64_t permits, bool ok)
{
    sluice__count(&lim->counters, permits, ok);
}

void sluice__limiter_count_elsewhere(sluice_limiter *lim, uint64_t permits)
{
    sluice__count_elsewhere(&lim->counters, permits);
}

/* ---- reconfiguration ---------------------------------------------------- */

/* Change the limiter to the profile `npf` at now_ns, or to the current
 * profile with one knob changed (npf NULL: limit/period when period_ns is
 * not 0, else burst). */
static int reconfigure(sluice_limiter *lim, const char *spec, uint64_t limit,
                       uint64_t period_ns, uint64_t burst, uint64_t now_ns, char *err,
                       size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!lim) {
        sluice__errf(err, errlen, "no limiter (NULL)");
        return SLUICE_EINVAL;
    }
    cfg *nc = sluice__calloc64(sizeof *nc);
    if (!nc) {
        sluice__errf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    pthread_mutex_lock(&lim->mu);
    cfg *c = cur_cfg(lim);
    int rc;
    char buf[SLUICE_SPEC_MAX];
    if (!spec) { /* one knob: the current spec with it changed */
        rc = period_ns ? sluice__reconfigure_knob(&c->pf, SLUICE__KNOB_LIMIT, limit, period_ns,
                                                  buf, sizeof buf, err, errlen)
                       : sluice__reconfigure_knob(&c->pf, SLUICE__KNOB_BURST, burst, 0, buf,
                                                  sizeof buf, err, errlen);
        spec = buf;
        if (rc < 0) goto out;
    }
    if ((rc = sluice__spec_parse(spec, &nc->pf, err, errlen)) != 0) goto out;
    if ((rc = sluice__reconfigure_check(&c->pf, &nc->pf, err, errlen)) != 0) goto out;
    sluice__state st;
#if HAVE_CAS128
    if (c->lockfree) { /* freeze the word for ever: no decision commits on it again */
        u128 v;
        for (unsigned n = 0;; n++) {
            if (load_word(&c->packed, &v) &&
                __sync_bool_compare_and_swap(&c->packed.w, v, v | FROZEN))
                break;
            sluice__backoff(n); /* a composite holds it */
        }
        uint64_t w[2] = {(uint64_t)v, (uint64_t)(v >> 64)};
        sluice__state_unpack(&c->pf, w, &st);
    } else
#endif
    {
        if (lim->pub) sluice__log_begin(lim->pub); /* ends at out */
        st = lim->st;
        /* room for what the change may add to a ring (window_log.c) */
        if (nc->pf.ops->reserve && !nc->pf.ops->reserve(&st)) {
            sluice__errf(err, errlen, "out of memory");
            rc = SLUICE_ENOMEM;
            if (lim->pub) sluice__log_end(lim->pub, &lim->st, NULL, false);
            goto out;
        }
    }
    sluice__reconfigure_state(&c->pf, &nc->pf, &st, now_ns);
    nc->clock = sluice__clock_id(nc->pf.clock);
    nc->lockfree = c->lockfree && sluice__state_packable(&nc->pf, &st);
    atomic_init(&nc->hinted, nc->lockfree);
    if (nc->lockfree) {
        uint64_t w[2];
        sluice__state_pack(&nc->pf, &st, w);
        nc->packed.w = mkword(w[0], w[1]);
    } else {
        lim->st = st;
    }
    nc->older = c;
    atomic_store_explicit(&lim->cur, nc, memory_order_release);
    if (lim->pub) sluice__log_end(lim->pub, &lim->st, &nc->pf, true);
    nc = NULL;
out:
    pthread_mutex_unlock(&lim->mu);
    sluice__free64(nc);
    return rc;
}

int sluice_limiter_reconfigure_at(sluice_limiter *lim, const char *spec, uint64_t now_ns,
                                  char *err, size_t errlen)
{
    if (!spec) {
        if (err && errlen) err[0] = '\0';
        sluice__errf(err, errlen, "no spec (NULL)");
        return SLUICE_EINVAL;
    }
    return reconfigure(lim, spec, 0, 0, 0, now_ns, err, errlen);
}

int sluice_limiter_reconfigure(sluice_limiter *lim, const char *spec, char *err, size_t errlen)
{
    uint64_t now = lim ? sluice__clock_now(cur_cfg(lim)->pf.clock) : 0;
    return sluice_limiter_reconfigure_at(lim, spec, now, err, errlen);
}

int sluice_limiter_set_limit_at(sluice_limiter *lim, uint64_t limit, uint64_t period_ns,
                                uint64_t now_ns, char *err, size_t errlen)
{
    if (limit == 0 || period_ns == 0) {
        if (err && errlen) err[0] = '\0';
        sluice__errf(err, errlen, "bad %s 0: expected a whole number >= 1",
                     limit == 0 ? "limit" : "period_ns");
        return SLUICE_EINVAL;
    }
    return reconfigure(lim, NULL, limit, period_ns, 0, now_ns, err, errlen);
}

int sluice_limiter_set_burst_at(sluice_limiter *lim, uint64_t burst, uint64_t now_ns,
                                char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (lim && !is_bucket(lim)) {
        sluice__errf(err, errlen, "burst applies to token-bucket and leaky-bucket only");
        return SLUICE_EINVAL;
    }
    if (burst == 0) {
        sluice__errf(err, errlen, "bad burst 0: expected a whole number >= 1");
        return SLUICE_EINVAL;
    }
    return reconfigure(lim, NULL, 0, 0, burst, now_ns, err, errlen);
}

/* The composite fast path, when every limit is a lock-free limiter
 * (sluice__limiters_try; composite.c runs it first), and its proof.  Each
 * limit is read and decided once, as a single decision is -- one snapshot
 * of its 16-byte word (load_word: a value the word held at one instant),
 * one decide_packed, which gives its answer too when details are asked --
 * and counted inline in each limiter; the combination (sluice__combine)
 * is made there as well, with no other setup.  The one common order is
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
 * limiters_decide returns 1 (admitted, or a probe that every limit
 * allows), 0 (refused), -1 when the call is not one for this path -- a bad
 * call, a ref that is not a limiter, a limiter named twice, or one that
 * takes the locked path (nothing decided, nothing counted: the caller's
 * `otherwise`, composite.c's general path, takes it).  The answers are those on
 * the snapshots the call is linearised at: with res, their combination;
 * with ans, each limit's. */
#if HAVE_CAS128
/* Loops over the limits of a composite, unrolled: fully in the copies of
 * sluice__limiters_try for a given n, where the loop counters become
 * constants and nothing but the limits' calls stays. */
#define UNROLL _Pragma("GCC unroll 4")

/* Count one composite call in each of its limiters, as sluice__count
 * (counters.h) does, the thread's stripe looked up once and the two
 * counters the call adds to chosen once: at the same offsets in every
 * limiter. */
static inline __attribute__((always_inline)) void
count_all(const sluice_limit_ref *refs, size_t n, uint64_t permits, bool ok)
{
    const unsigned slot = sluice__my_slot - 1; /* UINT_MAX when not chosen */
    if (slot >= SLUICE__STRIPES - 1) {
        for (size_t j = 0; j < n; j++) sluice__count(&refs[j].limiter->counters, permits, ok);
        return;
    }
    const size_t at = offsetof(sluice_limiter, counters) + slot * sizeof(sluice__stripe);
    const size_t req = permits == 0 ? offsetof(sluice__stripe, probes)
                       : ok         ? offsetof(sluice__stripe, requests_allowed)
                                    : offsetof(sluice__stripe, requests_denied);
    const size_t per = ok ? offsetof(sluice__stripe, permits_allowed)
                          : offsetof(sluice__stripe, permits_denied);
    if (permits == 0) {
        UNROLL
        for (size_t j = 0; j < n; j++)
            sluice__own_inc((_Atomic uint64_t *)((char *)refs[j].limiter + at + req));
        return;
    }
    UNROLL
    for (size_t j = 0; j < n; j++) {
        char *s = (char *)refs[j].limiter + at;
        sluice__own_inc((_Atomic uint64_t *)(s + req));
        sluice__own_add((_Atomic uint64_t *)(s + per), permits);
    }
}

/* A composite refused by limit i with no details asked, counted denied in
 * every limit: each other limit that would have admitted counts
 * denied_elsewhere too -- those before i admitted on their snapshots; those
 * after i, not read by the call, are decided now on a snapshot of their
 * own (a read: nothing is written; a word held by a composite or frozen by
 * a change counts as not admitting).  Off the path of admissions. */
static __attribute__((noinline)) void count_elsewhere_rest(const sluice_limit_ref *refs, size_t i,
                                                           size_t n, uint64_t permits,
                                                           uint64_t now_ns)
{
    for (size_t j = 0; j < n && permits; j++) {
        if (j == i) continue;
        bool would = j < i;
        if (j > i) {
            cfg *c = cur_cfg(refs[j].limiter);
            u128 v;
            if (c->lockfree && load_word(&c->packed, &v)) {
                const uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64);
                sluice__packed_req q = {.w = {lo, hi}, .now_ns = now_ns, .p = permits,
                                        .max_wait = UINT64_MAX, .res = NULL, .out = {lo, hi}};
                would = c->pf.ops->decide_packed(&c->pf, &q);
            }
        }
        if (would) sluice__count_elsewhere(&refs[j].limiter->counters, permits);
    }
}

/* Whether refs[i..n) are limiters, none of them named twice in refs[0..n)
 * (those before i were checked as they were decided). */
static __attribute__((noinline)) bool rest_ok(const sluice_limit_ref *refs, size_t i, size_t n)
{
    for (; i < n; i++) {
        if (!refs[i].limiter || refs[i].table) return false;
        for (size_t j = 0; j < i; j++)
            if (refs[j].limiter == refs[i].limiter) return false;
    }
    return true;
}

/* Whether c's word holds the snapshot w: load_word's three loads, each
 * compared with its half of w.  w's time half has the frozen bit clear, so
 * a frozen word never matches; nor does one that moved between the loads
 * (the caller then starts over, as it does for any word that moved). */
static inline bool holds(const cfg *c, const uint64_t w[2])
{
    return __atomic_load_n(&c->packed.h[0], __ATOMIC_ACQUIRE) == w[0] &&
           __atomic_load_n(&c->packed.h[1], __ATOMIC_ACQUIRE) == w[1] &&
           __atomic_load_n(&c->packed.h[0], __ATOMIC_ACQUIRE) == w[0];
}

/* What the caller asks for: nothing but the verdict, the combination of
 * the answers (into res), or every limit's answer (into ans). */
enum { DETAILS_NONE, DETAILS_SUM, DETAILS_EACH };

static inline __attribute__((always_inline)) int
limiters_decide(const sluice_limit_ref *refs, size_t n, uint64_t permits, uint64_t now_ns,
                sluice_result *res, sluice__answer *ans, const int details)
{
    cfg *cs[SLUICE_COMPOSITE_MAX];
    sluice__packed_req q[SLUICE_COMPOSITE_MAX]; /* snapshot w, the admission's word out */
    sluice__answer as[SLUICE_COMPOSITE_MAX];    /* DETAILS_SUM: each limit's answer */
    bool oks[SLUICE_COMPOSITE_MAX];
    for (;;) {
        bool all = true;
        size_t i = 0;
        UNROLL
        for (; i < n; i++) {
            sluice_limiter *lim = refs[i].limiter;
            if (!lim || refs[i].table) return -1;
            UNROLL
            for (size_t j = 0; j < i; j++)
                if (refs[j].limiter == lim) return -1; /* a limiter twice */
            cfg *c = cur_cfg(lim);
            if (!c->lockfree) return -1;
            u128 v;
            if (!load_word(&c->packed, &v)) { /* held: wait, start over */
                wait_frozen(lim, c);
                break;
            }
            cs[i] = c;
            const uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64);
            q[i] = (sluice__packed_req){.w = {lo, hi}, .now_ns = now_ns, .p = permits,
                                        .max_wait = UINT64_MAX,
                                        .res = details == DETAILS_SUM    ? &as[i].r
                                               : details == DETAILS_EACH ? &ans[i].r
                                                                         : NULL,
                                        .out = {lo, hi}};
            const bool ok = c->pf.ops->decide_packed(&c->pf, &q[i]);
            if (details == DETAILS_NONE) {
                if (ok) continue;
                /* this limit alone refuses the call -- a good one */
                if (i + 1 < n && !rest_ok(refs, i + 1, n)) return -1;
                count_all(refs, n, permits, false);
                count_elsewhere_rest(refs, i, n, permits, now_ns);
                return 0;
            }
            oks[i] = ok;
            all &= ok;
        }
        if (i < n) continue;
        int got;
        if (!all || permits == 0) { /* validate: every word still at its snapshot */
            size_t j = 0; /* the last snapshot's instant: no need to read it again */
            UNROLL
            for (; j + 1 < n; j++)
                if (!holds(cs[j], q[j].w)) break;
            if (j + 1 < n) continue;
            got = all;
        } else {
            /* the order of the words: by limiter address (insertion, n is small) */
            unsigned char o[SLUICE_COMPOSITE_MAX];
            for (size_t j = 0; j < n; j++) {
                size_t k = j;
                for (; k > 0 && (uintptr_t)refs[o[k - 1]].limiter > (uintptr_t)refs[j].limiter; k--)
                    o[k] = o[k - 1];
                o[k] = (unsigned char)j;
            }
            size_t k = 0; /* freeze all but the last */
            for (; k + 1 < n; k++) {
                const sluice__packed_req *x = &q[o[k]];
                if (!__sync_bool_compare_and_swap(&cs[o[k]]->packed.w, mkword(x->w[0], x->w[1]),
                                                  mkword(x->w[0] | FROZEN, x->w[1])))
                    break;
            }
            const sluice__packed_req *x = &q[o[k]];
            if (k + 1 < n ||
                !__sync_bool_compare_and_swap(&cs[o[k]]->packed.w, mkword(x->w[0], x->w[1]),
                                              mkword(x->out[0], x->out[1]))) {
                for (size_t j = 0; j < k; j++) /* unfreeze, unchanged, and start over */
                    __atomic_store_n(&cs[o[j]]->packed.h[0], q[o[j]].w[0], __ATOMIC_RELEASE);
                continue;
            }
            for (size_t j = 0; j < k; j++) { /* publish the held ones */
                word *pw = &cs[o[j]]->packed;
                __atomic_store_n(&pw->h[1], q[o[j]].out[1], __ATOMIC_RELEASE);
                __atomic_store_n(&pw->h[0], q[o[j]].out[0], __ATOMIC_RELEASE);
            }
            got = 1;
        }
        count_all(refs, n, permits, got);
        if (!got && permits && details != DETAILS_NONE) /* who would have admitted */
            for (size_t j = 0; j < n; j++)
                if (oks[j]) sluice__count_elsewhere(&refs[j].limiter->counters, permits);
        if (details == DETAILS_EACH)
            for (size_t j = 0; j < n; j++) ans[j].ok = oks[j];
        if (details == DETAILS_SUM) { /* the combination (alg/held.h) */
            UNROLL
            for (size_t j = 0; j < n; j++) as[j].ok = oks[j];
            sluice__combine(as, n, got, permits, res, NULL);
        }
        return got;
    }
}

/* Two copies: without details, the refusal's path is short. */
static inline __attribute__((always_inline)) int
sum_or_none(const sluice_limit_ref *refs, size_t n, uint64_t permits, uint64_t now_ns,
            sluice_result *res)
{
    return res ? limiters_decide(refs, n, permits, now_ns, res, NULL, DETAILS_SUM)
               : limiters_decide(refs, n, permits, now_ns, NULL, NULL, DETAILS_NONE);
}
#endif

bool sluice__limiters_try(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                         uint64_t now_ns, sluice_result *res, sluice__composite_fn *otherwise)
{
    /* What only the hand-over needs is kept in memory (volatile), not in
     * registers it would hold across the whole fast path: with the
     * callback in a callee-saved register, gcc -O3 spilled permits and
     * reloaded it at each limit (token-bucket x3, refused: 415
     * instructions a call against 402 before the callback; 406 so). */
    volatile size_t later_n = n;
    volatile uint64_t later_now = now_ns;
    sluice__composite_fn *volatile later = otherwise;
#if HAVE_CAS128
    if (refs && n - 1 < SLUICE_COMPOSITE_MAX) {
        const uint64_t t = now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : now_ns;
        /* copies for the usual shapes, 2 to 4 limits (per client AND per
         * route AND global...), whose loops unroll into straight code */
        int got;
        switch (n) {
        case 2: got = sum_or_none(refs, 2, permits, t, res); break;
        case 3: got = sum_or_none(refs, 3, permits, t, res); break;
        case 4: got = sum_or_none(refs, 4, permits, t, res); break;
        default: got = sum_or_none(refs, n, permits, t, res); break;
        }
        if (got >= 0) return got;
    }
#endif
    return later(refs, later_n, permits, later_now, res, NULL);
}

int sluice__limiters_each(const sluice_limit_ref *refs, size_t n, uint64_t permits,
                          uint64_t now_ns, sluice__answer *ans)
{
#if HAVE_CAS128
    if (!refs || n - 1 >= SLUICE_COMPOSITE_MAX) return -1;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    return limiters_decide(refs, n, permits, now_ns, NULL, ans, DETAILS_EACH);
#else
    (void)refs, (void)n, (void)permits, (void)now_ns, (void)ans;
    return -1;
#endif
}

void sluice_limiter_spec_get(const sluice_limiter *lim, sluice_spec_info *out)
{
    sluice__spec_info(&cur_cfg(lim)->pf, out);
}

void sluice__limiter_reclaim(sluice_limiter *lim)
{
    pthread_mutex_lock(&lim->mu);
    cfg *c = atomic_load_explicit(&lim->cur, memory_order_relaxed);
    if (c != &lim->first) {
        cfg *o = c->older;
        c->older = &lim->first; /* the chain cfg_free_all walks: current, first */
        while (o && o != &lim->first) {
            cfg *n = o->older;
            sluice__free64(o);
            o = n;
        }
    }
    pthread_mutex_unlock(&lim->mu);
}
