/* limiter.c -- the public limiter: a profile, a state, counters.
 *
 * Map:  this design note; the packed word (apply, step, lockfree_loop,
 *       decide_lockfree); the public API (sluice_limiter_new/_free, the
 *       decisions: run, decide_fast, the hint, sluice_try_acquire*;
 *       reservations: sluice_reserve_at, sluice_reservation_cancel_at,
 *       sluice_reservation_settle_at);
 *       changes of spec (sluice_limiter_reconfigure*, _set_*_at); spec
 *       info and sluice__limiter_reclaim.
 *       Elsewhere (lim.h is the private header they share):
 *         wait.c   blocking acquires (sluice_acquire*) and cancellers
 *         hold.c   a limiter as one limit of a composite (hold.h): its kind
 *                  ops and the composite fast path, with its proof
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
 * admission -- a successful CAS that took permits, a settle's overdraft
 * included -- stores the hint of the word it wrote, after its CAS; nothing
 * else stores it.  A give-back (a cancelled reservation or one settled
 * below its estimate, the writes that make a word more permissive:
 * gives_back) first clears the configuration's flag `hinted` (set when
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
 * histogram of the blocking acquires (wait.c).
 */#include "limiter/lim.h"

/* ---- the packed word ---------------------------------------------------- */

#if HAVE_CAS128

/* The refusals' hint after an admission wrote w (head comment): stored
 * after the compare-and-swap, on the line it just took. */
static inline void set_hint(cfg *c, const uint64_t w[2])
{
    atomic_store_explicit(&c->hint, c->pf.ops->refused_until(&c->pf, w),
                          memory_order_release);
}

/* Whether a write makes the word more permissive (head comment, the
 * hint): a give-back, or a settle below its reservation. */
static inline bool gives_back(enum op op, const settle_op *sq)
{
    return op == OP_GIVE_BACK || (op == OP_SETTLE && sq->q.a < sq->q.p);
}

/* One decision on the snapshot `old`: the word it leaves in *new (== old
 * when nothing was written: a refusal, a probe). */
static inline __attribute__((always_inline)) bool
step(const sluice__profile *pf, enum op op, u128 old, uint64_t permits, uint64_t now_ns,
     uint64_t max_wait, uint64_t at_ns, sluice_result *res, uint64_t *t_eff, u128 *new,
     settle_op *sq)
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
    const bool r = apply(pf, &st, op, now_ns, permits, max_wait, at_ns, res, t_eff, sq);
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
              const u128 *first, u128 first_new, bool first_r, settle_op *sq)
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
                r = step(pf, op, old, permits, now_ns, max_wait, at_ns, res, t_eff, &new, sq);
            }
            if (new != old) {
                /* a give-back turns the hint off before its word can be
                 * seen (head comment) */
                if (gives_back(op, sq)) atomic_store(&c->hinted, false);
                u128 cur = __sync_val_compare_and_swap(&c->packed.w, old, new);
                if (cur != old) {
                    old = cur;
                    if ((uint64_t)old & FROZEN) break; /* held: wait, start over */
                    continue;
                }
                if (!gives_back(op, sq)) {
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
                uint64_t max_wait, uint64_t at_ns, sluice_result *res, uint64_t *t_eff, bool *ok,
                settle_op *sq)
{
    u128 old, new;
    if (!load_word(&(*pc)->packed, &old))
        return lockfree_loop(lim, pc, op, permits, now_ns, max_wait, at_ns, res, t_eff, ok,
                             NULL, 0, false, sq);
    bool r = step(&(*pc)->pf, op, old, permits, now_ns, max_wait, at_ns, res, t_eff, &new, sq);
    if (new != old)
        return lockfree_loop(lim, pc, op, permits, now_ns, max_wait, at_ns, res, t_eff, ok,
                             &old, new, r, sq);
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
           uint64_t max_wait, uint64_t at_ns, sluice_result *res, uint64_t *t_eff, settle_op *sq)
{
    bool ok;
    pthread_mutex_lock(&lim->mu);
    cfg *c = cur_cfg(lim); /* stable while mu is held */
    if (lim->pub) sluice__log_begin(lim->pub);
    ok = apply(&c->pf, &lim->st, op, now_ns, permits, max_wait, at_ns, res, t_eff, sq);
    if (lim->pub)
        sluice__log_end(lim->pub, &lim->st, NULL,
                        op == OP_SETTLE ? ok && sq->q.a > sq->q.p : ok && permits);
    pthread_mutex_unlock(&lim->mu);
    return ok;
}

/* Inlined into each caller, so that `op` is a constant there. */
static inline __attribute__((always_inline)) bool
run(sluice_limiter *lim, enum op op, uint64_t permits, uint64_t now_ns, uint64_t max_wait,
    uint64_t at_ns, sluice_result *res, uint64_t *t_eff, settle_op *sq)
{
    bool ok;
#if HAVE_CAS128
    cfg *c = cur_cfg(lim);
    if (!c->lockfree || !decide_lockfree(lim, &c, op, permits, now_ns, max_wait, at_ns, res,
                                         t_eff, &ok, sq))
#endif
        /* a window log: refusals and probes read (window_log.h) */
        if (op != OP_DECIDE || !lim->pub ||
            !sluice__log_read(lim->pub, now_ns, permits, res, t_eff, &ok))
            ok = run_locked(lim, op, permits, now_ns, max_wait, at_ns, res, t_eff, sq);
    if (op == OP_DECIDE || op == OP_RESERVE) sluice__count(&lim->counters, permits, ok);
    return ok;
}

__attribute__((noinline)) bool sluice__lim_decide(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                                            uint64_t max_wait, sluice_result *res)
{
    uint64_t t;
    return run(lim, OP_DECIDE, permits, now_ns, max_wait, 0, res, &t, NULL);
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
                       NULL, 0, false, NULL)) {
        if (!lim->pub || !sluice__log_read(lim->pub, q->now_ns, q->p, q->res, &t, &ok))
            ok = run_locked(lim, OP_DECIDE, q->p, q->now_ns, q->max_wait, 0, q->res, &t, NULL);
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
        ok = run_locked(lim, OP_DECIDE, permits, now_ns, UINT64_MAX, 0, res, &t, NULL);
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
    return sluice__lim_decide(lim, permits, now_ns, UINT64_MAX, res);
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

/* A reservation's state: RV_ACTIVE may be cancelled (a bucket's, p >= 1)
 * and settled; RV_OPEN only settled (a window's, or a bucket's probe);
 * RV_FINAL is done (refused, cancelled or settled). */
enum { RV_NONE, RV_ACTIVE, RV_FINAL, RV_OPEN };

bool sluice_reserve_at(sluice_limiter *lim, uint64_t permits, uint64_t now_ns,
                       uint64_t max_wait_ns, sluice_reservation *rv, sluice_result *res)
{
    sluice_result r;
    uint64_t t;
    /* the configuration first: one that changes before the reservation
     * is decided only makes its settle give nothing back */
    const cfg *c = cur_cfg(lim);
    settle_op sq = {.q = {.d1 = 0}};
    bool ok = is_bucket(lim) ? run(lim, OP_RESERVE, permits, now_ns, max_wait_ns, 0, &r, &t, &sq)
                             : run(lim, OP_DECIDE, permits, now_ns, UINT64_MAX, 0, &r, &t, NULL);
    if (res) *res = r;
    if (rv) {
        rv->permits = ok ? permits : 0;
        rv->wait_ns = ok ? r.wait_ns : 0;
        rv->at_ns = ok ? t + r.wait_ns : 0; /* <= 2^63-1: the reserve bounds it */
        rv->limiter = lim;
        rv->state = !ok ? RV_FINAL : is_bucket(lim) && permits ? RV_ACTIVE : RV_OPEN;
        rv->t_ns_ = t;
        /* a bucket's deficit after it (its reserve wrote sq) */
        rv->d1_[0] = (uint64_t)sq.q.d1;
        rv->d1_[1] = (uint64_t)(sq.q.d1 >> 64);
        rv->cfg_ = &c->pf;
    }
    return ok;
}

int sluice_reservation_settle_at(sluice_reservation *rv, uint64_t actual_permits,
                                 uint64_t now_ns)
{
    if (!rv || rv->state == RV_NONE || !rv->limiter) return SLUICE_EINVAL;
    if (rv->state != RV_ACTIVE && rv->state != RV_OPEN) return SLUICE_ENOENT;
    sluice_limiter *lim = rv->limiter;
    if (!lim->ops->settle) return SLUICE_EINVAL;
    if (actual_permits == rv->permits) {
        rv->state = RV_FINAL;
        return 0;
    }
    settle_op sq = {.q = {.t0 = rv->t_ns_, .at_ns = rv->at_ns, .p = rv->permits,
                          .a = actual_permits, .d1 = (u128)rv->d1_[1] << 64 | rv->d1_[0]},
                    .pf0 = rv->cfg_};
    uint64_t t;
    if (!run(lim, OP_SETTLE, 0, now_ns, 0, 0, NULL, &t, &sq)) return SLUICE_ENOMEM;
    rv->state = RV_FINAL;
    return 0;
}

int sluice_reservation_cancel_at(sluice_reservation *rv, uint64_t now_ns)
{
    if (!rv || rv->state == RV_NONE || !rv->limiter) return SLUICE_EINVAL;
    sluice_limiter *lim = rv->limiter;
    if (!is_bucket(lim)) return SLUICE_EINVAL;
    /* a bucket's RV_OPEN is a reservation of 0 permits: nothing to give
     * back, and nothing written (it stays open to a settle) */
    if (rv->state != RV_ACTIVE) return SLUICE_ENOENT;
    rv->state = RV_FINAL;
    /* whether the permits go back is decided inside the update, at the
     * clamped time: a stale now_ns cannot give back what a later admission
     * already counted on */
    uint64_t t;
    return run(lim, OP_GIVE_BACK, rv->permits, now_ns, 0, rv->at_ns, NULL, &t, NULL) ? 0
                                                                              : SLUICE_ENOENT;
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

uint64_t sluice_limiter_now_ns(const sluice_limiter *lim)
{
    return lim ? sluice__clock_now(cur_cfg(lim)->pf.clock) : 0;
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
