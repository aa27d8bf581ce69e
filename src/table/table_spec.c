/* table_spec.c -- changing the spec of an in-process table: the reader
 * sections that say when a configuration may be freed, the chain of
 * configurations, and per-key overrides (table.c has the overview).
 *
 * Map:  reader sections (rd_claim, rd_sync, sluice__rd_*; rd_enter and
 *       rd_exit are inlined from inproc.h); configurations (cfg_add,
 *       cfg_unmap, cfg_retire, cfg_collect, cfg_init, cfg_free, carry,
 *       catch_up, ent_cfg, rest_of, sluice_table_reconfigure*,
 *       sluice_table_set_*_at); overrides (ovr_find, key_cfg,
 *       sluice_table_override_*).
 *
 * Configurations (changing the spec of every key, reconfigure.c's rule;
 * at the end of this file).  The table's spec is a chain of
 * configurations: a profile, the time of the change that made it, and a
 * link to the one that replaced it.  Each is numbered (an id, found again
 * through a segmented array that never moves); an entry keeps the id its
 * state is under.  A change makes a configuration and links it in: no key
 * is touched.  Whoever next holds an entry under its shard lock (decision,
 * peek, scan, the reclaiming wheel) first carries its state over each change
 * it missed, in order, each at that change's time clamped to the key's
 * latest admission -- exactly what the change would have done to it then,
 * since only an admission moves a state and every admission catches up
 * first.  A new key starts under the newest configuration.  The chain is
 * kept short: a change that would chain a ninth configuration first carries
 * every held key to the newest (cfg_collect: one pass over the slots, a
 * shard locked at a time), then retires the older ones -- their ids are
 * reused -- and frees each once no reader section that began before its
 * retiring runs ("reader sections", below): the memory of changes is
 * bounded (issue 26).
 *
 * Per-key overrides (the end of this file) are configurations of single
 * keys, kept per shard apart from the entries and looked up only where an
 * entry is made; an entry under one holds its id as it would a change's.
 */
#include "table/inproc.h" /* first: it defines _GNU_SOURCE (syscall) */

#include <unistd.h>

/* ---- reader sections: when a configuration may be freed ----------------- */

/* A configuration the table no longer reaches (cfg_collect: every key
 * carried past it, its id unmapped) may still be in the hands of a call
 * that read it before -- a decision reading without the lock, or one that
 * looked it up under a shard lock and uses it after.  So every call of the
 * table that reads configurations runs in a reader section (rd_enter,
 * rd_exit; nested sections count once), which writes the reader epoch it
 * began at into its thread's own line of sluice__rd_slots (0 outside).  A retired
 * configuration carries the epoch at its retiring (stamp; the epoch is then
 * moved on); it is freed once every thread in a section began after it:
 * min over the slots of the nonzero epochs > stamp (and no reader without
 * a slot of its own: sluice__rd_anon).  A reader whose epoch is later read the
 * epoch after the retiring (acquire: it sees the unmapping), so never finds
 * the configuration.  A reader whose epoch the changer does not see yet
 * could have read the unmapping before: the changer's sync (membarrier, a
 * barrier on every thread of the process, where the system has it; else a
 * fence on both sides, the reader's at each outermost rd_enter) orders the
 * reader's epoch store before its loads, or makes it visible.  Nothing
 * waits: what cannot be freed yet is freed at a later change.  Cost to a
 * decision: a thread-local load and two stores to its own line. */
rd_slot sluice__rd_slots[RD_SLOTS];
_Atomic uint64_t sluice__rd_epoch = 1;
_Atomic uint64_t sluice__rd_anon; /* sections of threads without a slot */
_Thread_local rd_tls sluice__rd_me;
#ifdef RD_MEMB_REGISTER_PRIVATE_EXPEDITED
bool sluice__rd_memb; /* registered: a reader's fence is the changer's barrier */
#endif
static pthread_once_t rd_once = PTHREAD_ONCE_INIT;
static pthread_key_t rd_key;
static bool rd_key_ok;

/* A thread ends: its slot is free again (a later section of this thread,
 * from another destructor, counts in sluice__rd_anon). */
static void rd_release(void *v)
{
    const unsigned i = (unsigned)(uintptr_t)v;
    if (i == 0 || i > RD_SLOTS) return;
    sluice__rd_me.mine = RD_SLOTS + 1;
    atomic_store_explicit(&sluice__rd_slots[i - 1].at, 0, memory_order_release);
    atomic_store_explicit(&sluice__rd_slots[i - 1].owned, 0, memory_order_release);
}

/* In the child of fork(): only the forking thread runs, so every other
 * thread's slot is free (else its epoch would hold back every free). */
static void rd_atfork_child(void)
{
    for (unsigned i = 0; i < RD_SLOTS; i++) {
        if (i + 1 == sluice__rd_me.mine) continue;
        atomic_store_explicit(&sluice__rd_slots[i].at, 0, memory_order_relaxed);
        atomic_store_explicit(&sluice__rd_slots[i].owned, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&sluice__rd_anon, sluice__rd_me.mine > RD_SLOTS && sluice__rd_me.depth ? 1 : 0,
                          memory_order_relaxed);
}

static void rd_init(void)
{
    rd_key_ok = pthread_key_create(&rd_key, rd_release) == 0;
    (void)pthread_atfork(NULL, NULL, rd_atfork_child);
#ifdef RD_MEMB_REGISTER_PRIVATE_EXPEDITED
    sluice__rd_memb = syscall(SYS_membarrier, RD_MEMB_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
}

/* Before a table is shared: the readers' mode (membarrier or fences) is
 * settled before any reader of it runs. */
static void rd_setup(void) { pthread_once(&rd_once, rd_init); }

unsigned sluice__inproc_rd_claim(void)
{
    rd_setup();
    if (rd_key_ok)
        for (unsigned i = 0; i < RD_SLOTS; i++) {
            unsigned z = 0;
            if (atomic_load_explicit(&sluice__rd_slots[i].owned, memory_order_relaxed) == 0 &&
                atomic_compare_exchange_strong(&sluice__rd_slots[i].owned, &z, 1)) {
                if (pthread_setspecific(rd_key, (void *)(uintptr_t)(i + 1)) == 0) return i + 1;
                atomic_store_explicit(&sluice__rd_slots[i].owned, 0, memory_order_release);
                break;
            }
        }
    return RD_SLOTS + 1;
}

/* The changer's half (after unmapping, before reading the slots): a
 * barrier on every thread, or its own fence; false when it failed (the
 * readers have no fence of their own then: nothing may be freed). */
static bool rd_sync(void)
{
#if !SLUICE__SEQ_TSAN /* under ThreadSanitizer the slots' loads are seq_cst */
    atomic_thread_fence(memory_order_seq_cst);
#endif
#ifdef RD_MEMB_PRIVATE_EXPEDITED
    if (sluice__rd_memb) return syscall(SYS_membarrier, RD_MEMB_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
    return true;
}

/* The reader sections for region_table.c (table.h). */
void sluice__rd_setup(void) { rd_setup(); }
void *sluice__rd_enter(void) { return rd_enter(); }
void sluice__rd_exit(void *tok) { rd_exit(tok); }
uint64_t sluice__rd_retire_stamp(void)
{
    return atomic_fetch_add_explicit(&sluice__rd_epoch, 1, memory_order_seq_cst);
}

/* The least epoch a section running now began at: UINT64_MAX when none
 * runs; 0 when a reader without a slot runs (it has no epoch), or when the
 * sync failed. */
uint64_t sluice__rd_min_active(void)
{
    if (!rd_sync() || atomic_load_explicit(&sluice__rd_anon, memory_order_seq_cst)) return 0;
    uint64_t m = UINT64_MAX;
    for (unsigned i = 0; i < RD_SLOTS; i++) {
        const uint64_t a = atomic_load_explicit(&sluice__rd_slots[i].at, memory_order_seq_cst);
        if (a && a < m) m = a;
    }
    return m;
}

/* ---- configurations: changing the spec of every key --------------------- */


/* Number c and make it findable (t->cfg_mu held, or the table not yet
 * shared); false when out of memory or numbers. */
static bool cfg_add(sluice_table *t, tcfg *c)
{
    const bool reuse = t->nfree > 0; /* an id a retired configuration left */
    if (!reuse && t->ncfg >= UINT32_MAX - 1) return false;
    const uint32_t id = reuse ? t->free_ids[t->nfree - 1] : t->ncfg;
    const uint64_t v = (uint64_t)id + 1;
    const unsigned j = 63u - (unsigned)__builtin_clzll(v);
    _Atomic(tcfg *) *seg = atomic_load_explicit(&t->cfgs[j], memory_order_relaxed);
    if (!seg) {
        seg = sluice__calloc((size_t)1 << j, sizeof *seg);
        if (!seg) return false;
        atomic_store_explicit(&t->cfgs[j], seg, memory_order_release);
    }
    if (reuse) t->nfree--;
    else t->ncfg++;
    c->id = id;
    /* before c is published: a settle that finds it finds the serial moved */
    atomic_fetch_add_explicit(&t->cfg_serial, 1, memory_order_relaxed);
    atomic_store_explicit(&seg[v - ((uint64_t)1 << j)], c, memory_order_release);
    return true;
}

/* Unmap configuration c: its id is free for reuse (a read without the lock
 * that still finds an entry with that id is under a sequence a holder has
 * moved on since: cfg_collect locked every shard). */
static void cfg_unmap(sluice_table *t, tcfg *c)
{
    const uint64_t v = (uint64_t)c->id + 1;
    const unsigned j = 63u - (unsigned)__builtin_clzll(v);
    _Atomic(tcfg *) *seg = atomic_load_explicit(&t->cfgs[j], memory_order_relaxed);
    atomic_store_explicit(&seg[v - ((uint64_t)1 << j)], NULL, memory_order_release);
    atomic_fetch_add_explicit(&t->cfg_serial, 1, memory_order_relaxed); /* its id may return */
    if (t->nfree == t->free_cap) { /* at most every id ever made: bounded by the most live */
        const uint32_t cap = t->free_cap ? 2 * t->free_cap : 16;
        uint32_t *a = sluice__malloc((size_t)cap * sizeof *a);
        if (!a) return; /* the id stays used: one number lost, nothing else */
        if (t->nfree) memcpy(a, t->free_ids, t->nfree * sizeof *a);
        sluice__free(t->free_ids);
        t->free_ids = a;
        t->free_cap = cap;
    }
    t->free_ids[t->nfree++] = c->id;
}

/* Retire configuration c (t->cfg_mu held; no key is under it and it is
 * linked nowhere): unmapped, then stamped with the reader epoch, which moves
 * on. */
static void cfg_retire(sluice_table *t, tcfg *c)
{
    cfg_unmap(t, c);
    sluice__retire(&t->retired, &c->ret, sluice__rd_retire_stamp());
}

/* Free the retired configurations no reader section can hold any more
 * (t->cfg_mu held). */
static void cfg_free_retired(sluice_table *t)
{
    sluice__retired_free(&t->retired, offsetof(tcfg, ret), sluice__free, false);
}

/* The chain grew past CFG_KEEP configurations (t->cfg_mu held): carry every
 * held key to the newest (each shard locked in turn, as any locked call
 * would carry it), then retire every configuration of the chain before the
 * newest -- no key is under one, no lookup finds one -- for
 * cfg_free_retired.  A key that cannot be carried (a ring that cannot
 * grow) leaves the chain as it is, for a later change. */
#define CFG_KEEP 8
static void cfg_collect(sluice_table *t)
{
    tcfg *cur = atomic_load_explicit(&t->cur, memory_order_relaxed);
    bool all = true;
    for (unsigned k = 0; k < t->nshards && all; k++) {
        shard *s = &t->shards[k];
        sluice__spin_lock(&s->mu);
        for (uint32_t j = 0; j < s->cap && all; j++)
            if (META_CODE(ent(t, s, j)->meta) && ent(t, s, j)->cfg != cur->id)
                all = sluice__inproc_ent_cfg(t, s, j) != NULL;
        sluice__spin_unlock(&s->mu);
    }
    if (!all) return;
    for (tcfg *c = t->oldest, *n; c != cur; c = n) {
        n = atomic_load_explicit(&c->newer, memory_order_relaxed);
        cfg_unmap(t, c);
        sluice__retire(&t->retired, &c->ret, 0);
    }
    /* unmapped before the epoch moves on: a section that begins later
     * reads the epoch (acquire) after this, and finds none of them */
    sluice__retired_stamp(t->retired, sluice__rd_retire_stamp());
    t->oldest = cur;
    t->chain = 1;
}

/* The first configuration: the spec the table was made with. */
int sluice__inproc_cfg_init(sluice_table *t)
{
    tcfg *c = sluice__calloc(1, sizeof *c);
    if (!c) return SLUICE_ENOMEM;
    c->pf = t->pf;
    if (!cfg_add(t, c)) {
        sluice__free(c);
        return SLUICE_ENOMEM;
    }
    atomic_store_explicit(&t->cur, c, memory_order_relaxed);
    t->oldest = c;
    t->chain = 1;
    t->max_ovr = SLUICE_TABLE_OVERRIDES_DEFAULT;
    if (pthread_mutex_init(&t->cfg_mu, NULL) != 0) return SLUICE_ENOMEM;
    return 0;
}

void sluice__inproc_cfg_free(sluice_table *t)
{
    for (unsigned j = 0; j < CFG_SEGS; j++) { /* every configuration numbered */
        _Atomic(tcfg *) *seg = atomic_load_explicit(&t->cfgs[j], memory_order_relaxed);
        if (!seg) continue;
        for (size_t i = 0; i < ((size_t)1 << j); i++)
            sluice__free(atomic_load_explicit(&seg[i], memory_order_relaxed));
        sluice__free((void *)seg);
    }
    sluice__retired_free(&t->retired, offsetof(tcfg, ret), sluice__free, true); /* and those retired */
    sluice__free(t->free_ids);
}

/* Carry entry e's state from configuration c to n at time `at` (clamped to
 * the key's latest admission: reconfigure.c).  False when a window log's
 * ring cannot grow (nothing changes). */
bool sluice__inproc_carry(sluice_table *t, entry *e, const tcfg *c, const tcfg *n, uint64_t at)
{
    sluice__state st, *sp = &st;
    if (t->pf.packed) load_state(t, &c->pf, e, &st);
    else sp = ent_state(e);
    if (n->pf.ops->reserve && !n->pf.ops->reserve(sp)) return false;
    sluice__reconfigure_state(&c->pf, &n->pf, sp, at);
    if (t->pf.packed) {
        sluice__reconfigure_fit(&n->pf, &st); /* the entry keeps 16 bytes */
        store_state(t, &n->pf, e, &st);
    }
    PUT(&e->cfg, n->id);
    return true;
}

/* Carry entry e's state from configuration c over each change after it, in
 * order, each at its time (clamped to the key's latest admission:
 * reconfigure.c, the same carry-over a single limiter makes).  Returns the
 * newest, or NULL when a window log's ring cannot grow (the entry stays at
 * the configuration it reached). */
static const tcfg *catch_up(sluice_table *t, entry *e, const tcfg *c, const tcfg *n)
{
    do {
        if (!sluice__inproc_carry(t, e, c, n, n->at)) return NULL;
        c = n;
    } while ((n = atomic_load_explicit(&((tcfg *)c)->newer, memory_order_acquire)));
    return c;
}

/* The configuration entry i decides under (shard s locked), its state
 * carried over the changes it missed first; NULL when memory runs out. */
const tcfg *sluice__inproc_ent_cfg(sluice_table *t, shard *s, uint32_t i)
{
    entry *e = ent(t, s, i);
    const tcfg *c = cur_cfg(t);
    if (e->cfg == c->id) return c; /* the common case: under the newest */
    c = cfg_of_id(t, e->cfg);
    const tcfg *n = atomic_load_explicit(&((tcfg *)c)->newer, memory_order_acquire);
    return n ? catch_up(t, e, c, n) : c;
}

/* When entry i comes to rest under the configuration that applies to it
 * (shard locked).  An entry that could not be carried over (no memory for
 * its ring) is taken to rest a second after the shard's time: the wheel
 * looks at it again then, and never drops it unconverted. */
uint64_t sluice__inproc_rest_of(sluice_table *t, shard *s, uint32_t i)
{
    const tcfg *c = sluice__inproc_ent_cfg(t, s, i);
    if (!c) return sluice__min_u64(s->now, (uint64_t)INT64_MAX - ((uint64_t)1 << 30)) + ((uint64_t)1 << 30);
    entry *e = ent(t, s, i);
    if (!t->pf.packed) return sluice__rest_at(&c->pf, ent_state(e));
    sluice__state st;
    load_state(t, &c->pf, e, &st);
    return sluice__rest_at(&c->pf, &st);
}

/* Whether a new profile np may follow `from` on the keys of t (a change of
 * spec, or an override of a key under it): reconfigure.c's rule, and a
 * state that still fits the 16 bytes of a packed table's slot.  0, or a
 * negative error code with the reason in err. */
static int cfg_fits(const sluice_table *t, const sluice__profile *from,
                    const sluice__profile *np, const char *spec, char *err, size_t errlen)
{
    int rc = sluice__reconfigure_check(from, np, err, errlen);
    if (rc == 0 && t->pf.packed && !np->packed) {
        sluice__errf(err, errlen,
                     "\"%s\" needs more than the 16 bytes of state each key of this table has: make a new table",
                     spec);
        rc = SLUICE_EINVAL;
    }
    return rc;
}

/* Change the table's spec at now_ns to `spec`, or (spec NULL) to the
 * current one with one knob changed (sluice__reconfigure_knob). */
static int table_reconfigure(sluice_table *t, const char *spec, int knob, uint64_t a,
                             uint64_t b, uint64_t now_ns, char *err, size_t errlen)
{
    if (!t) {
        sluice__errf(err, errlen, "no table (NULL)");
        return SLUICE_EINVAL;
    }
    return t->ops->reconfigure_at(t->place, spec, knob, a, b, now_ns, err, errlen);
}

int sluice__inproc_local_reconfigure_at(void *place, const char *spec, int knob, uint64_t a,
                                uint64_t b, uint64_t now_ns, char *err, size_t errlen)
{
    sluice_table *t = place;
    tcfg *nc = sluice__calloc(1, sizeof *nc);
    if (!nc) {
        sluice__errf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    pthread_mutex_lock(&t->cfg_mu);
    tcfg *c = atomic_load_explicit(&t->cur, memory_order_relaxed);
    char buf[SLUICE_SPEC_MAX];
    int rc = 0;
    if (!spec) {
        if ((rc = sluice__reconfigure_knob(&c->pf, knob, a, b, buf, sizeof buf, err, errlen)) !=
            0)
            goto out;
        spec = buf;
    }
    if ((rc = sluice__spec_parse(spec, &nc->pf, err, errlen)) != 0) goto out;
    if ((rc = cfg_fits(t, &c->pf, &nc->pf, spec, err, errlen)) != 0) goto out;
    if (!cfg_add(t, nc)) {
        sluice__errf(err, errlen, t->ncfg >= UINT32_MAX - 1 ? "too many changes (2^32 - 1)"
                                                            : "out of memory");
        rc = t->ncfg >= UINT32_MAX - 1 ? SLUICE_ERANGE : SLUICE_ENOMEM;
        goto out;
    }
    nc->at = now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : now_ns;
    /* nc is whole before anyone can reach it: through c (entries catching
     * up), then as the newest (keys made from now on) */
    atomic_store_explicit(&c->newer, nc, memory_order_release);
    atomic_store_explicit(&t->cur, nc, memory_order_release);
    nc = NULL;
    if (++t->chain > CFG_KEEP) cfg_collect(t); /* the chain's memory stays bounded */
    cfg_free_retired(t);
out:
    pthread_mutex_unlock(&t->cfg_mu);
    sluice__free(nc);
    return rc;
}

int sluice_table_reconfigure_at(sluice_table *t, const char *spec, uint64_t now_ns, char *err,
                                size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!spec) {
        sluice__errf(err, errlen, "no spec (NULL)");
        return SLUICE_EINVAL;
    }
    return table_reconfigure(t, spec, 0, 0, 0, now_ns, err, errlen);
}

int sluice_table_reconfigure(sluice_table *t, const char *spec, char *err, size_t errlen)
{
    uint64_t now = t ? sluice__clock_now(cur_clock(t)) : 0;
    return sluice_table_reconfigure_at(t, spec, now, err, errlen);
}

int sluice_table_set_limit_at(sluice_table *t, uint64_t limit, uint64_t period_ns,
                              uint64_t now_ns, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    return table_reconfigure(t, NULL, SLUICE__KNOB_LIMIT, limit, period_ns, now_ns, err, errlen);
}

int sluice_table_set_burst_at(sluice_table *t, uint64_t burst, uint64_t now_ns, char *err,
                              size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    return table_reconfigure(t, NULL, SLUICE__KNOB_BURST, burst, 0, now_ns, err, errlen);
}

/* ---- per-key overrides -------------------------------------------------- */

/* An override: a key of the table under a spec of its own.  Each shard
 * keeps the overrides of its keys in an array sorted by tag, apart from
 * the entries: a key without one pays nothing when it decides; the array is
 * searched only where a key's entry is made (and where a request for a key
 * not held is answered), and only in a shard that has overrides.  An entry
 * under an override holds the override's configuration as its own; that
 * configuration is never linked to a newer one, so changes of the table's
 * spec pass it by.  Setting, changing or removing an override carries a
 * held entry over at once (one key, under its shard lock); a key not held
 * finds its override when its entry is made again. */
typedef struct ovr {
    uint32_t tag;
    uint32_t keylen;
    unsigned char *key; /* a copy, NULL when keylen is 0 */
    tcfg *cfg;          /* the override's spec */
} ovr;

/* The override of key in shard s (locked, or cfg_mu held), or NULL; *pos
 * receives where one would be inserted. */
static ovr *ovr_find(const shard *s, uint32_t tag, const void *key, size_t keylen, uint32_t *pos)
{
    uint32_t lo = 0, hi = s->novr;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->ovr[mid].tag < tag) lo = mid + 1;
        else hi = mid;
    }
    if (pos) *pos = lo;
    for (uint32_t i = lo; i < s->novr && s->ovr[i].tag == tag; i++)
        if (s->ovr[i].keylen == keylen &&
            (keylen == 0 || memcmp(s->ovr[i].key, key, key_bytes(keylen)) == 0))
            return &s->ovr[i];
    return NULL;
}

/* The configuration a new entry of key starts under (shard locked): its
 * override's, else the newest of the table. */
const tcfg *sluice__inproc_key_cfg(const sluice_table *t, const shard *s, uint32_t tag, const void *key,
                           size_t keylen)
{
    if (s->novr) {
        const ovr *o = ovr_find(s, tag, key, keylen, NULL);
        if (o) return o->cfg;
    }
    return cur_cfg(t);
}

void sluice__inproc_ovr_free_all(sluice_table *t)
{
    for (unsigned k = 0; k < t->nshards; k++) {
        shard *s = &t->shards[k];
        for (uint32_t i = 0; i < s->novr; i++) sluice__free(s->ovr[i].key);
        sluice__free(s->ovr);
    }
}

/* Carry held entry i (shard s locked) to configuration n at `at`, and file
 * it at its new rest time.  False when memory runs out (nothing changes). */
static bool carry_held(sluice_table *t, shard *s, uint32_t i, const tcfg *n, uint64_t at)
{
    const tcfg *c = sluice__inproc_ent_cfg(t, s, i);
    if (!c || !sluice__inproc_carry(t, ent(t, s, i), c, n, at)) return false;
    sluice__inproc_wheel_unlink(t, s, i);
    sluice__inproc_wheel_file(t, s, i, sluice__inproc_rest_of(t, s, i));
    sluice__inproc_publish_due(s);
    return true;
}

int sluice_table_set_max_overrides(sluice_table *t, size_t max)
{
    if (!t || t->ops->lacks || max > SLUICE_TABLE_OVERRIDES_MAX) return SLUICE_EINVAL;
    pthread_mutex_lock(&t->cfg_mu);
    int rc = max < atomic_load_explicit(&t->novr, memory_order_relaxed) ? SLUICE_EINVAL : 0;
    if (rc == 0) t->max_ovr = max;
    pthread_mutex_unlock(&t->cfg_mu);
    return rc;
}

size_t sluice_table_override_count(const sluice_table *t)
{
    return t ? atomic_load_explicit(&((sluice_table *)t)->novr, memory_order_relaxed) : 0;
}

/* An override's key as the table stores it (key_view: a long key as its
 * digest, written into dig; NULL with length 0 as the empty key): *key and
 * *keylen are replaced, *h receives its hash; returns its shard. */
static shard *ovr_key(const sluice_table *t, const void **key, size_t *keylen,
                      unsigned char dig[SLUICE__DIGEST_BYTES], uint64_t *h)
{
    if (!*key) *key = "";
    key_view(t, key, keylen, dig);
    *h = key_hash(t, *key, *keylen);
    return shard_for(t, *h);
}

static int override_set_at(sluice_table *t, const void *key, size_t keylen,
                           const char *spec, uint64_t now_ns, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!t || t->ops->lacks || !spec || !key_ok(key, keylen)) {
        sluice__errf(err, errlen, "%s",
                     !t              ? "no table (NULL)"
                     : t->ops->lacks ? t->ops->lacks
                     : !spec         ? "no spec (NULL)"
                                     : "bad key: NULL with a length");
        return SLUICE_EINVAL;
    }
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint64_t h;
    shard *s = ovr_key(t, &key, &keylen, dig, &h);
    const uint32_t tag = (uint32_t)h;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    tcfg *nc = sluice__calloc(1, sizeof *nc);
    if (!nc) {
        sluice__errf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    int rc = sluice__spec_parse(spec, &nc->pf, err, errlen);
    if (rc != 0) {
        sluice__free(nc);
        return rc;
    }
    unsigned char *copy = NULL;
    ovr *arr = NULL, *old = NULL;
    uint32_t newcap = 0;
    pthread_mutex_lock(&t->cfg_mu); /* the overrides change only under it */
    const tcfg *base = atomic_load_explicit(&t->cur, memory_order_relaxed);
    if ((rc = cfg_fits(t, &base->pf, &nc->pf, spec, err, errlen)) != 0) goto out;
    uint32_t pos;
    ovr *o = ovr_find(s, tag, key, keylen, &pos);
    if (!o) {
        if (atomic_load_explicit(&t->novr, memory_order_relaxed) >= t->max_ovr) {
            sluice__errf(err, errlen,
                         "too many overrides (%zu): remove one, or raise the bound with sluice_table_set_max_overrides",
                         t->max_ovr);
            rc = SLUICE_EFULL;
            goto out;
        }
        if (keylen && !(copy = sluice__malloc(key_bytes(keylen)))) goto oom;
        if (keylen) memcpy(copy, key, key_bytes(keylen));
        if (s->novr == s->ovrcap) {
            newcap = s->ovrcap ? 2 * s->ovrcap : 4;
            if (!(arr = sluice__calloc(newcap, sizeof *arr))) goto oom;
        }
    }
    if (!cfg_add(t, nc)) goto oom;
    nc->at = now_ns;
    tcfg *const made = nc;
    nc = NULL; /* the table's now, whatever follows */
    sluice__spin_lock(&s->mu);
    uint32_t slot = find(t, s, h, key, keylen);
    if (slot != UINT32_MAX && !carry_held(t, s, slot, made, now_ns)) {
        sluice__spin_unlock(&s->mu);
        goto oom; /* a ring could not grow: the key stays as it was */
    }
    tcfg *gone = NULL; /* the override's spec it replaces */
    if (o) {
        gone = o->cfg;
        o->cfg = made;
    } else {
        if (arr) {
            if (s->novr) memcpy(arr, s->ovr, s->novr * sizeof *arr);
            old = s->ovr;
            s->ovr = arr;
            s->ovrcap = newcap;
            arr = NULL;
        }
        memmove(&s->ovr[pos + 1], &s->ovr[pos], (s->novr - pos) * sizeof *s->ovr);
        s->ovr[pos] = (ovr){.tag = tag, .keylen = (uint32_t)keylen, .key = copy, .cfg = made};
        PUT(&s->novr, s->novr + 1);
        copy = NULL;
        atomic_fetch_add_explicit(&t->novr, 1, memory_order_relaxed);
    }
    sluice__spin_unlock(&s->mu);
    if (gone) cfg_retire(t, gone); /* no key under it: carried above */
    cfg_free_retired(t);
    goto out;
oom:
    sluice__errf(err, errlen, "out of memory");
    rc = SLUICE_ENOMEM;
out:
    pthread_mutex_unlock(&t->cfg_mu);
    sluice__free(nc);
    sluice__free(copy);
    sluice__free(arr);
    sluice__free(old);
    return rc;
}

int sluice_table_override_set_at(sluice_table *t, const void *key, size_t keylen,
                                 const char *spec, uint64_t now_ns, char *err, size_t errlen)
{
    rd_tls *rd = rd_enter();
    const int rc = override_set_at(t, key, keylen, spec, now_ns, err, errlen);
    rd_exit(rd);
    return rc;
}

static int override_remove_at(sluice_table *t, const void *key, size_t keylen,
                              uint64_t now_ns)
{
    if (!t || t->ops->lacks || !key_ok(key, keylen)) return SLUICE_EINVAL;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint64_t h;
    shard *s = ovr_key(t, &key, &keylen, dig, &h);
    const uint32_t tag = (uint32_t)h;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    int rc = 0;
    unsigned char *copy = NULL;
    tcfg *gone = NULL;
    pthread_mutex_lock(&t->cfg_mu);
    ovr *o = ovr_find(s, tag, key, keylen, NULL);
    if (!o) {
        rc = SLUICE_ENOENT;
    } else {
        const tcfg *base = atomic_load_explicit(&t->cur, memory_order_relaxed);
        sluice__spin_lock(&s->mu);
        uint32_t slot = find(t, s, h, key, keylen);
        if (slot != UINT32_MAX && !carry_held(t, s, slot, base, now_ns)) {
            rc = SLUICE_ENOMEM; /* a ring could not grow: nothing changes */
        } else {
            copy = o->key;
            gone = o->cfg;
            const size_t at = (size_t)(o - s->ovr); /* pos or after: tags may be equal */
            memmove(o, o + 1, (s->novr - at - 1) * sizeof *o);
            PUT(&s->novr, s->novr - 1);
            atomic_fetch_sub_explicit(&t->novr, 1, memory_order_relaxed);
        }
        sluice__spin_unlock(&s->mu);
        if (gone) cfg_retire(t, gone); /* no key under it: carried to the base */
        cfg_free_retired(t);
    }
    pthread_mutex_unlock(&t->cfg_mu);
    sluice__free(copy);
    return rc;
}

int sluice_table_override_remove_at(sluice_table *t, const void *key, size_t keylen,
                                    uint64_t now_ns)
{
    rd_tls *rd = rd_enter();
    const int rc = override_remove_at(t, key, keylen, now_ns);
    rd_exit(rd);
    return rc;
}

static int override_get(sluice_table *t, const void *key, size_t keylen, char *spec,
                        size_t speclen)
{
    if (!t || t->ops->lacks || !key_ok(key, keylen) || (!spec && speclen)) return SLUICE_EINVAL;
    if (!key) key = "";
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(t, &key, &keylen, dig);
    const uint64_t h = key_hash(t, key, keylen);
    shard *s = shard_for(t, h);
    sluice__spin_lock(&s->mu);
    const ovr *o = s->novr ? ovr_find(s, (uint32_t)h, key, keylen, NULL) : NULL;
    const tcfg *c = o ? o->cfg : NULL;
    sluice__spin_unlock(&s->mu); /* configurations live as long as the table */
    if (!c) return SLUICE_ENOENT;
    char buf[SLUICE_SPEC_MAX];
    int n = sluice__spec_format(&c->pf, buf, sizeof buf);
    if (n < 0) return SLUICE_EINVAL;
    if ((size_t)n >= speclen) return SLUICE_ENOSPC;
    memcpy(spec, buf, (size_t)n + 1);
    return 0;
}

int sluice_table_override_get(sluice_table *t, const void *key, size_t keylen, char *spec,
                              size_t speclen)
{
    rd_tls *rd = rd_enter();
    const int rc = override_get(t, key, keylen, spec, speclen);
    rd_exit(rd);
    return rc;
}
