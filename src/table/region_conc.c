/* region_conc.c -- concurrency limits in a shared region, crash-safe
 * (sluice_concurrency_region, sluice/concurrency.h): per key at most N
 * permits held across every process attached, each held handle recorded
 * with its holder, so that a holder that dies gives its permits back.
 *
 * Map:  the layout (chead, cshard, cslot, cholder, cwait; make_layout,
 *       sluice_concurrency_region_size); a key's waiters (futex_wake,
 *       futex_sleep, wake_freed, wait_reset); a key's slot (find,
 *       slot_idle, slot_retire_idle, sweep_for_room, expire, recount);
 *       holders (sweep, take); the shard's lock and repair; attach, open
 *       (region_attach.c maps the name) and free; acquire; the blocking
 *       acquire (its design note above sluice__cr_wait_leave); release
 *       (a release through a handle with queued acquires serves them
 *       first: region_conc_async.c), held, waiting; the region-wide reads
 *       of the metrics (limit, recovered, stats).  The layout of a slot
 *       and the handle are in region_conc.h, shared with
 *       region_conc_async.c (the queued acquires, called back from a
 *       timing wheel), which builds on the sluice__cr_ calls here.
 *
 * Why its own region and not the rate table's (region_table.c).  The
 * skeleton's ops table (skeleton.h) is the rate tables' calls: a decision
 * that spends permits and returns nothing.  A concurrency permit is held
 * and given back, and a shared one must say who holds it; that is a
 * different slot (a holder list, not an algorithm state and two copies)
 * and a different call set.  What it shares with the rate region it calls:
 * the identities and the dead-holder test of the lock words (region_who.c),
 * the sizing of shards (skeleton.h), the long-key digest (base/siphash.h).
 *
 * Layout (all offsets from the region's start; every process computes them
 * alike from spec and max_keys, and attach compares them with the header):
 *
 *     0            chead, CHEAD bytes: magic, version, sizes, seed, boot
 *                  id, pid namespace, spec, the count of keys made
 *     CHEAD        nshards cshard lines: the lock word, slots in use, the
 *                  permits recovered from dead holders (a counter)
 *     slots_off    nshards * cap slots of `stride` bytes: a cslot (64
 *                  bytes: state, held, clock, next lease end, cursors, the
 *                  key's 16-byte digest), then H = N cholder entries of 32
 *                  bytes (holder identity, pid namespace, lease end,
 *                  permits, generation), then a cwait of 32 bytes (the
 *                  key's waiters: futex word, count, passes, wakes, the
 *                  sweeper's identity)
 *
 * Keys are held by their digest under the region's seed and never move:
 * linear probing from the digest's home slot in its shard, at most cap
 * slots, a run ending at an empty slot.  A slot once used is never
 * emptied (runs stay whole): a key that holds nothing (slot_idle: every
 * lease ended, no holder) is given to a new key met on its run, or, when
 * the shard's share (ecap) or the region's max_keys leaves no room for a
 * new key, becomes a tombstone (skipped by lookups, reused by new keys) so
 * that the new key takes its room.  A key holding permits is thus never
 * at rest and never dropped.  A new key is refused (SLUICE_EFULL) when
 * there is no room and no idle key in its shard.
 *
 * Holders.  A handle's entry records `who` (pid | low 31 bits of the start
 * time << 32, as a lock word: region_who.c) and the pid namespace's inode.
 * An acquire that finds its key full sweeps it (sweep): up to
 * SLUICE_CONC_REGION_SWEEP entries from the key's cursor, each holder
 * process asked once (sluice__rt_gone with the /proc look: no such pid, a
 * zombie, a pid reused), entries of another namespace than the region's
 * taken as damage (no process of one can attach) -- and the sweep after
 * one that freed nothing waits SLUICE_CONC_REGION_SWEEP_GAP_NS on the
 * key's clock (a sweep of 16 live holder processes costs about 240 us
 * under the shard's lock: once a millisecond, not at every refusal).  So
 * a dead holder's permits are back within ceil(H / SWEEP) sweeps of its
 * key.  A live holder's entry is never freed but by its release or its
 * lease: the permits held by live processes never exceed N.  A new key that
 * finds no room also sweeps the holders of up to ROOM_SWEEP_KEYS held keys
 * of its shard (sweep_for_room, from a rotating slot cursor), so that a key
 * held only by dead processes, which nobody asks for again, gives its room
 * up: within ceil(cap / 4) * ceil(H / SWEEP) such refusals.
 *
 * Crash safety of the updates.  Every change is under the shard's lock
 * word, taken from a dead holder as the rate region's are.  An admission
 * writes the entry's fields, then `who` (the entry now counts), then adds
 * to `held`; a release or a sweep clears `who`, then subtracts.  A process
 * killed between the two leaves `held` off by its permits: whoever takes
 * its lock recounts every slot of the shard from its entries (repair), so
 * `held` is always the sum of the entries that count once the lock is
 * free.  What a repair does not make exact: the region's count of keys
 * (taken before a slot is made live, across shards): a process killed
 * between the two leaves it one high, one key of room lost until the
 * region is made again.
 *
 * Damage.  Every field read from the region is bounded before use: a
 * state that is neither empty nor live is skipped; `held` above N admits
 * nothing (no subtraction wraps); an entry whose permits are 0 or above N
 * is freed by a sweep or a repair; the cursors are taken modulo H; a shard
 * count above its share refuses new keys; a probe run stops at cap slots,
 * a scan of entries at H.  The wait line's fields are hints: a wrong count
 * costs wake syscalls or a pass (bounded by passes < waiters), a wrong
 * sweeper naming a live process is replaced by a waiter whose poll finds
 * the key unswept for 100 ms, a wrong word only ends a sleep early.  A
 * handle's indexes (a permit handle is the caller's memory) are checked
 * against the handle's own layout.
 *
 * Metrics.  sluice_concurrency_region_stats_get reads every slot head once, a
 * shard at a time under its lock (so a dead locker's lock is recovered as
 * at any call): O(nshards * cap) whatever the counts say, each slot's
 * `held` clamped to N.  The permits a sweep frees because their holder
 * died are added to the shard's `recovered` (an atomic counter, read
 * without the lock; entries freed as damage are not counted).
 */
#define _GNU_SOURCE
#include "table/region_conc.h"
#include "base/clock.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- the layout ----------------------------------------------------------- */

#define CMAGIC 0x636e6f636563756cULL /* "lucecono": a concurrency region */
#define CVERSION 3u /* 2: a key's wait line (cwait) after its holder entries; 3: the
                     * shard's count of permits recovered from dead holders */
#define CHEAD 512
#define CONC_REGION_MAX_N 65536u /* holder entries per key */
enum { S_EMPTY = 0, S_LIVE = 1, S_TOMB = 2 }; /* a slot's state */

typedef struct chead {
    _Atomic uint64_t init; /* 0 zeroed, BUSY | maker's identity, INIT_READY */
    uint64_t magic;
    uint32_t version, holders; /* H */
    uint32_t nshards, cap;
    uint64_t need, max_keys, limit, lease_ns, ecap, stride;
    uint64_t seed[2];
    uint64_t pidns; /* the maker's pid namespace, 0 if unknown */
    char boot[40];
    char spec[SLUICE_SPEC_MAX];
    _Alignas(64) _Atomic uint64_t keys; /* slots ever made live, <= max_keys */
} chead;
_Static_assert(sizeof(chead) <= CHEAD, "the header fits its bytes");
_Static_assert(offsetof(chead, magic) == 8 && offsetof(chead, version) == 16 &&
                   offsetof(chead, limit) == 48 && offsetof(chead, pidns) == 96 &&
                   offsetof(chead, keys) == 320,
               "where tests/table/test_conc_region.c finds them");

typedef struct cshard {
    _Alignas(64) _Atomic uint64_t lock; /* 0, or the holder's identity */
    uint64_t count;                     /* slots made live */
    uint32_t swept;                     /* the next slot a search for room sweeps */
    _Atomic uint64_t recovered;         /* permits swept from dead holders, ever (a
                                         * counter: added to under the lock, read without) */
} cshard;
_Static_assert(sizeof(cshard) == 64, "a line a shard");


static int make_layout(const char *spec, size_t max_keys, clayout *L, char *err, size_t errlen)
{
    memset(L, 0, sizeof *L);
    if (!spec) {
        sluice__errf(err, errlen, "no spec");
        return SLUICE_EINVAL;
    }
    if (sluice__conc_parse(spec, &L->cp, err, errlen) != 0) return SLUICE_EINVAL;
    if (L->cp.limit > CONC_REGION_MAX_N) {
        sluice__errf(err, errlen,
                     "concurrency %llu in a shared region: N is at most %u there (each held "
                     "handle records its holder, 32 bytes per N per key)",
                     (unsigned long long)L->cp.limit, CONC_REGION_MAX_N);
        return SLUICE_ERANGE;
    }
    if (max_keys < 1 || max_keys > ((size_t)1 << 24)) {
        sluice__errf(err, errlen, "bad max_keys %zu: expected 1 .. 2^24", max_keys);
        return SLUICE_EINVAL;
    }
    if (sluice__conc_format(&L->cp, L->spec, sizeof L->spec) < 0) {
        sluice__errf(err, errlen, "spec too long");
        return SLUICE_EINVAL;
    }
    unsigned bits;
    uint64_t ecap;
    sluice__table_sizing(max_keys, &bits, &ecap);
    L->max_keys = max_keys;
    L->ecap = ecap;
    L->shard_bits = bits;
    L->nshards = 1u << bits;
    L->cap = sluice__table_cap(ecap, 4);
    L->holders = (uint32_t)L->cp.limit;
    L->stride = sizeof(cslot) + (size_t)L->holders * sizeof(cholder) + sizeof(cwait);
    L->slots_off = CHEAD + (size_t)L->nshards * sizeof(cshard);
    /* <= 2^24 * 1.25 + 64 shards' slots of at most 2 MiB + 64: below 2^47 */
    const unsigned __int128 need =
        (unsigned __int128)L->slots_off + (unsigned __int128)L->nshards * L->cap * L->stride;
    if (need > SIZE_MAX) {
        sluice__errf(err, errlen, "a region of %zu keys for \"%s\" exceeds the address space",
                     max_keys, L->spec);
        return SLUICE_ERANGE;
    }
    L->need = (size_t)need;
    return 0;
}

size_t sluice_concurrency_region_size(const char *spec, size_t max_keys, char *err,
                                      size_t errlen)
{
    clayout L;
    return make_layout(spec, max_keys, &L, err, errlen) == 0 ? L.need : 0;
}

/* ---- a key's slot ---------------------------------------------------------- */

/* The shard of slot s (a slot of this region). */
static inline uint32_t cshard_of(const sluice_concurrency_region *r, const cslot *s)
{
    return (uint32_t)((size_t)((const unsigned char *)s - r->slots) / r->L.stride / r->L.cap);
}
static inline uint64_t who_of(cholder *e)
{
    return atomic_load_explicit(&e->who, memory_order_relaxed);
}

/* Free entry e of slot s: it stops counting, then leaves `held`. */
static void holder_free(cslot *s, cholder *e)
{
    const uint64_t p = e->permits;
    atomic_store_explicit(&e->who, 0, memory_order_relaxed);
    s->held = s->held >= p ? s->held - p : 0;
}

/* Whether entry e (counting) is damage: permits outside 1 .. N. */
static inline bool holder_bad(const sluice_concurrency_region *r, const cholder *e)
{
    return e->permits == 0 || e->permits > r->L.cp.limit;
}

/* Recount slot s from its entries: `held` and the next lease end, freeing
 * damaged entries.  O(H).  Shard locked. */
static void recount(const sluice_concurrency_region *r, cslot *s)
{
    uint64_t held = 0, next = UINT64_MAX;
    for (uint32_t j = 0; j < r->L.holders; j++) {
        cholder *e = holder_at(s, j);
        if (!who_of(e)) continue;
        if (holder_bad(r, e)) {
            atomic_store_explicit(&e->who, 0, memory_order_relaxed);
            continue;
        }
        held += e->permits; /* <= H * N <= 2^32 */
        if (e->expiry && e->expiry < next) next = e->expiry;
    }
    s->held = held;
    s->next_exp = next;
}

/* Give back the leases of slot s ended by t (expiry <= t).  O(H) when one
 * may have ended, O(1) otherwise.  Shard locked. */
static void expire(const sluice_concurrency_region *r, cslot *s, uint64_t t)
{
    if (!r->L.cp.lease_ns || s->next_exp > t) return;
    uint64_t next = UINT64_MAX;
    for (uint32_t j = 0; j < r->L.holders; j++) {
        cholder *e = holder_at(s, j);
        if (!who_of(e) || !e->expiry) continue;
        if (e->expiry <= t)
            holder_free(s, e);
        else if (e->expiry < next)
            next = e->expiry;
    }
    s->next_exp = next;
}

/* The key's clock: now clamped to 2^63-1 and never before the key's
 * latest call; moved there.  Shard locked. */
uint64_t sluice__cr_key_time(cslot *s, uint64_t now_ns)
{
    uint64_t t = now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : now_ns;
    if (s->t_last <= (uint64_t)INT64_MAX && t < s->t_last) t = s->t_last;
    s->t_last = t;
    return t;
}

/* Whether slot s holds nothing at now_ns (its leases ended by then given
 * back: O(H) once after a lease ended, else O(1)).  `held` is trusted
 * here (a damaged 0 over counting entries loses that key's permits, as
 * damage may: the head comment); a recount per idle slot would make a
 * new key's search O(cap * H). */
static bool slot_idle(const sluice_concurrency_region *r, cslot *s, uint64_t now_ns)
{
    uint64_t t = now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : now_ns;
    if (s->t_last <= (uint64_t)INT64_MAX && t < s->t_last) t = s->t_last;
    expire(r, s, t);
    return s->held == 0;
}

/* ---- waiters: the futex word of a key ------------------------------------ */

/* Wake up to n sleepers of word w (a shared futex: no FUTEX_PRIVATE_FLAG,
 * so processes mapping the region at any address meet on it). */
void sluice__cr_futex_wake(_Atomic uint32_t *w, int n)
{
    (void)syscall(SYS_futex, (void *)w, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* Sleep on w while it holds `seen`, at most ns: WOKEN by a wake, MOVED
 * when w had moved already (a wake between the check and the sleep), or
 * 0 at the time-out or on a signal. */
enum { WOKEN = 1, MOVED = 2 };
static int futex_sleep(_Atomic uint32_t *w, uint32_t seen, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    const long rc = syscall(SYS_futex, (void *)w, FUTEX_WAIT, seen, &ts, NULL, 0);
    return rc == 0 ? WOKEN : errno == EAGAIN ? MOVED : 0;
}

/* Bump s's word for one more wake; the caller wakes after unlocking.
 * Shard locked. */
static _Atomic uint32_t *wake_one(cwait *w)
{
    atomic_fetch_add_explicit(&w->seq, 1, memory_order_relaxed);
    return &w->seq;
}

/* After a call on slot s that freed permits (a release, a lease's end, a
 * dead holder swept): one waiter to wake, if any waits and room is left
 * (NULL: none); the round of passed wakes starts again.  Shard locked. */
_Atomic uint32_t *sluice__cr_wake_freed(const sluice_concurrency_region *r, cslot *s)
{
    cwait *w = wait_of(r, s);
    if (w->waiters == 0 || s->held >= r->L.cp.limit) return NULL;
    w->passes = 0;
    return wake_one(w);
}

/* A slot given to another key, or made a tombstone: its waiters (a key
 * that held nothing, so they were about to pass) are all woken to find
 * their key again, and its wait line starts afresh (the word keeps
 * counting: a sleeper's old value never matches again).  Shard locked;
 * rare, so the wake is made here. */
static void wait_reset(const sluice_concurrency_region *r, cslot *s)
{
    cwait *w = wait_of(r, s);
    if (w->waiters) sluice__cr_futex_wake(wake_one(w), INT32_MAX);
    w->waiters = w->passes = 0;
    atomic_store_explicit(&w->sweeper, 0, memory_order_relaxed);
}

/* Make slot s key dig's, fresh.  Shard locked. */
static void slot_claim(const sluice_concurrency_region *r, cslot *s, const unsigned char *dig)
{
    wait_reset(r, s);
    memcpy(s->dig, dig, sizeof s->dig);
    s->held = 0;
    s->t_last = 0;
    s->next_exp = UINT64_MAX;
    s->cursor = s->hint = 0;
    s->sweep_next = 0;
}

/* Whether the region may make one more key: its count below max_keys.
 * A failed compare-and-swap means another shard made or gave up a key;
 * bounded all the same (a million tries: never met). */
static bool keys_take(sluice_concurrency_region *r)
{
    uint64_t n = atomic_load_explicit(&r->h->keys, memory_order_relaxed);
    for (unsigned k = 0; k < (1u << 20); k++) {
        if (n >= r->L.max_keys) return false;
        if (atomic_compare_exchange_weak_explicit(&r->h->keys, &n, n + 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return true;
    }
    return false;
}

/* Make slot s (empty or a tombstone) live for key dig, if the shard's
 * share and the region's max_keys allow one more key.  Shard k locked. */
static bool slot_make(sluice_concurrency_region *r, uint32_t k, cslot *s,
                      const unsigned char *dig)
{
    cshard *sh = &r->sh[k];
    if (sh->count >= r->L.ecap || !keys_take(r)) return false;
    slot_claim(r, s, dig);
    atomic_store_explicit(&s->state, S_LIVE, memory_order_relaxed);
    sh->count++;
    return true;
}

/* Turn an idle key of shard k (locked) into a tombstone, giving back its
 * room: true if one was found (at most cap slots visited). */
static bool slot_retire_idle(sluice_concurrency_region *r, uint32_t k, uint64_t now_ns)
{
    for (uint32_t i = 0; i < r->L.cap; i++) {
        cslot *s = cslot_at(r, k, i);
        if (atomic_load_explicit(&s->state, memory_order_relaxed) != S_LIVE ||
            !slot_idle(r, s, now_ns))
            continue;
        wait_reset(r, s);
        atomic_store_explicit(&s->state, S_TOMB, memory_order_relaxed);
        if (r->sh[k].count) r->sh[k].count--;
        if (atomic_load_explicit(&r->h->keys, memory_order_relaxed))
            atomic_fetch_sub_explicit(&r->h->keys, 1, memory_order_relaxed);
        return true;
    }
    return false;
}

static bool sweep(const sluice_concurrency_region *r, cslot *s, uint64_t t);

/* Sweep the holders of shard k's keys (locked) for dead ones, from the
 * shard's slot cursor, SLUICE_CONC_REGION_SWEEP entries of at most
 * ROOM_SWEEP_KEYS keys per call: so that a key held only by processes
 * that died, which nobody asks for again, becomes idle and gives its room
 * up.  True when one did. */
#define ROOM_SWEEP_KEYS 4
static bool sweep_for_room(sluice_concurrency_region *r, uint32_t k, uint64_t now_ns)
{
    cshard *sh = &r->sh[k];
    uint32_t i = sh->swept % r->L.cap;
    bool freed = false;
    for (uint32_t n = 0, swept = 0; n < r->L.cap && swept < ROOM_SWEEP_KEYS;
         n++, i = i + 1 == r->L.cap ? 0 : i + 1) {
        cslot *s = cslot_at(r, k, i);
        if (atomic_load_explicit(&s->state, memory_order_relaxed) != S_LIVE || s->held == 0)
            continue;
        const uint64_t t = now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : now_ns;
        (void)sweep(r, s, t < s->t_last && s->t_last <= (uint64_t)INT64_MAX ? s->t_last : t);
        swept++;
        if (slot_idle(r, s, now_ns)) freed = true;
    }
    sh->swept = i;
    return freed;
}

/* The slot of key dig in shard k (locked), from `home`: found, or (make)
 * a new one -- the first tombstone or idle key met on the run, else the
 * empty slot that ends it; when the shard or the region has no room for
 * one more key, an idle key elsewhere in the shard becomes a tombstone to
 * make it.  NONE when there is none.  At most 4 passes over the cap
 * slots (the run, the idle search, the sweep for room, the idle search). */
uint32_t sluice__cr_find(sluice_concurrency_region *r, uint32_t k, uint32_t home,
                     const unsigned char *dig, bool make, uint64_t now_ns)
{
    uint32_t i = home, reuse = NONE, empty = NONE;
    for (uint32_t n = 0; n < r->L.cap; n++, i = i + 1 == r->L.cap ? 0 : i + 1) {
        cslot *s = cslot_at(r, k, i);
        const uint64_t st = atomic_load_explicit(&s->state, memory_order_relaxed);
        if (st == S_EMPTY) {
            empty = i;
            break;
        }
        if (st == S_TOMB) {
            if (reuse == NONE) reuse = i;
            continue;
        }
        if (st != S_LIVE) continue; /* damage: not a key, not reused */
        if (memcmp(s->dig, dig, sizeof s->dig) == 0) return i;
        if (make && reuse == NONE && slot_idle(r, s, now_ns)) reuse = i;
    }
    if (!make) return NONE;
    const uint32_t at = reuse != NONE ? reuse : empty;
    if (at == NONE) return NONE;
    cslot *s = cslot_at(r, k, at);
    if (atomic_load_explicit(&s->state, memory_order_relaxed) == S_LIVE) { /* idle: re-tag */
        slot_claim(r, s, dig);
        return at;
    }
    if (slot_make(r, k, s, dig)) return at;
    /* no room: an idle key off the run gives its room up */
    if (slot_retire_idle(r, k, now_ns) && slot_make(r, k, s, dig)) return at;
    /* none idle: dead holders of other keys may have left one so */
    if (sweep_for_room(r, k, now_ns) && slot_retire_idle(r, k, now_ns) &&
        slot_make(r, k, s, dig))
        return at;
    return NONE;
}

/* ---- holders ---------------------------------------------------------------- */

/* Free the entries of dead holders (and damaged ones) among the next
 * SLUICE_CONC_REGION_SWEEP of slot s from its cursor, at the key's time t
 * -- unless the key's previous sweep freed nothing less than
 * SLUICE_CONC_REGION_SWEEP_GAP_NS before t: a key full of live holders
 * pays for a sweep (a kill() and a read of /proc per holder process)
 * once per gap, not at every refusal.  Each holder process is asked about
 * once per sweep, however many of the entries are its.  Returns whether
 * an entry was freed.  Shard locked. */
static bool sweep(const sluice_concurrency_region *r, cslot *s, uint64_t t)
{
    const uint32_t H = r->L.holders;
    if (H == 0 || t < s->sweep_next) return false;
    uint64_t asked[SLUICE_CONC_REGION_SWEEP];
    bool dead[SLUICE_CONC_REGION_SWEEP];
    unsigned nasked = 0;
    bool freed = false, damaged = false;
    uint32_t j = s->cursor % H;
    for (uint32_t n = 0; n < SLUICE_CONC_REGION_SWEEP && n < H; n++, j = j + 1 == H ? 0 : j + 1) {
        cholder *e = holder_at(s, j);
        const uint64_t who = who_of(e);
        if (!who) continue;
        if (holder_bad(r, e)) {
            atomic_store_explicit(&e->who, 0, memory_order_relaxed);
            damaged = freed = true;
            continue;
        }
        bool gone;
        if (e->ns != r->pidns) {
            gone = true; /* damage: no process of another namespace attaches */
        } else {
            unsigned q = 0;
            while (q < nasked && asked[q] != who) q++;
            if (q == nasked) { /* not asked yet in this sweep */
                asked[nasked] = who;
                dead[nasked++] = sluice__rt_gone(who, true);
            }
            gone = dead[q];
        }
        if (gone) {
            if (e->ns == r->pidns) /* a dead process's, not damage: counted */
                atomic_fetch_add_explicit(&r->sh[cshard_of(r, s)].recovered, e->permits,
                                          memory_order_relaxed);
            holder_free(s, e);
            freed = true;
        }
    }
    s->cursor = j;
    if (damaged) recount(r, s);
    s->sweep_next = freed ? t : sluice__sat_add(t, SLUICE_CONC_REGION_SWEEP_GAP_NS);
    return freed;
}

/* Record `permits` held by this process in a free entry of slot s from t:
 * its index (and generation in *gen), or NONE when every entry is taken
 * (only damage does that: each entry holds >= 1 and held < N).  Shard
 * locked. */
uint32_t sluice__cr_take(sluice_concurrency_region *r, cslot *s, uint64_t t, uint64_t permits,
                     uint32_t *gen)
{
    const uint32_t H = r->L.holders;
    uint32_t j = s->hint % H;
    for (uint32_t n = 0; n < H; n++, j = j + 1 == H ? 0 : j + 1) {
        cholder *e = holder_at(s, j);
        if (who_of(e)) continue;
        e->ns = r->pidns;
        e->expiry = r->L.cp.lease_ns ? t + r->L.cp.lease_ns : 0; /* < 2^64 */
        e->permits = (uint32_t)permits;
        e->gen++;
        *gen = e->gen;
        atomic_store_explicit(&e->who, sluice__rt_self(), memory_order_relaxed);
        s->held += permits; /* the entry counts first: a crash here is recounted */
        if (e->expiry && e->expiry < s->next_exp) s->next_exp = e->expiry;
        s->hint = j + 1 == H ? 0 : j + 1;
        return j;
    }
    return NONE;
}

/* ---- the shard's lock ---------------------------------------------------------- */

/* Lock shard k; a lock taken from a dead holder (killed mid-update) has
 * every slot of the shard recounted from its entries.  Bound: region_who.c
 * (sluice__rt_lock_word); the repair O(cap * H). */
void sluice__cr_lock(sluice_concurrency_region *r, uint32_t k)
{
    if (!sluice__rt_lock_word(&r->sh[k].lock, sluice__rt_self())) return;
    uint64_t live = 0;
    for (uint32_t i = 0; i < r->L.cap; i++) {
        cslot *s = cslot_at(r, k, i);
        const uint64_t st = atomic_load_explicit(&s->state, memory_order_relaxed);
        if (st != S_LIVE) continue;
        live++;
        recount(r, s);
    }
    r->sh[k].count = live;
}

void sluice__cr_unlock(sluice_concurrency_region *r, uint32_t k)
{
    atomic_store_explicit(&r->sh[k].lock, 0, memory_order_release);
}

/* The digest of a key, its shard and its home slot. */
uint32_t sluice__cr_place(const sluice_concurrency_region *r, const void *key, size_t keylen,
                      unsigned char dig[SLUICE__DIGEST_BYTES], uint32_t *home)
{
    sluice__key_digest(r->dseed, key ? key : "", keylen, dig);
    uint64_t a, b;
    memcpy(&a, dig, sizeof a);
    memcpy(&b, dig + 8, sizeof b);
    *home = (uint32_t)(b % r->L.cap);
    return r->L.shard_bits ? (uint32_t)(a >> (64 - r->L.shard_bits)) : 0;
}

/* ---- attach ------------------------------------------------------------------------ */

static bool zeroed_head(const void *region)
{
    const unsigned char *p = region;
    for (size_t i = 8; i < CHEAD + sizeof(cshard); i++)
        if (p[i]) return false;
    return true;
}

static void initialise(void *region, const clayout *L)
{
    chead *h = region;
    h->magic = CMAGIC;
    h->version = CVERSION;
    h->holders = L->holders;
    h->nshards = L->nshards;
    h->cap = L->cap;
    h->need = L->need;
    h->max_keys = L->max_keys;
    h->limit = L->cp.limit;
    h->lease_ns = L->cp.lease_ns;
    h->ecap = L->ecap;
    h->stride = L->stride;
    sluice__random_seed(h->seed);
    h->pidns = sluice__rt_pid_ns();
    sluice__rt_boot_id(h->boot);
    memcpy(h->spec, L->spec, sizeof h->spec);
    atomic_store_explicit(&h->keys, 0, memory_order_relaxed);
    /* shards and slots: zero already (a zeroed region) */
}

/* The difference between an initialised header and the layout, as a
 * one-line message; 0 when they agree. */
static int check_header(const chead *h, const clayout *L, size_t size, char *err, size_t errlen)
{
    if (h->magic != CMAGIC) {
        sluice__errf(err, errlen, "%s",
                     h->magic == MAGIC ? "the region holds a rate table, not concurrency limits"
                                       : "the region does not hold sluice concurrency limits "
                                         "(bad magic)");
        return SLUICE_EINVAL;
    }
    if (h->version != CVERSION) {
        sluice__errf(err, errlen,
                     "the region holds concurrency limits of layout version %u; this library "
                     "reads version %u",
                     h->version, CVERSION);
        return SLUICE_EINVAL;
    }
    char boot[40], now[40];
    memcpy(boot, h->boot, sizeof boot);
    boot[sizeof boot - 1] = 0;
    sluice__rt_boot_id(now);
    if (boot[0] && now[0] && strcmp(boot, now) != 0) {
        sluice__errf(err, errlen, "the region was made in another boot (%s): unlink it and "
                     "start afresh", boot);
        return SLUICE_EINVAL;
    }
    const uint64_t ns = sluice__rt_pid_ns();
    if (h->pidns != ns) {
        sluice__errf(err, errlen,
                     "the region was made in another pid namespace (pid:[%llu], this process's "
                     "pid:[%llu]): its holders' pids would name processes this one cannot see",
                     (unsigned long long)h->pidns, (unsigned long long)ns);
        return SLUICE_EINVAL;
    }
    char spec[SLUICE_SPEC_MAX];
    memcpy(spec, h->spec, sizeof spec);
    spec[sizeof spec - 1] = 0;
    if (strcmp(spec, L->spec) != 0) {
        sluice__errf(err, errlen, "the region holds concurrency limits of spec \"%s\", not \"%s\"",
                     spec, L->spec);
        return SLUICE_EINVAL;
    }
    if (h->max_keys != L->max_keys) {
        sluice__errf(err, errlen, "the region holds %llu keys at most, not %llu",
                     (unsigned long long)h->max_keys, (unsigned long long)L->max_keys);
        return SLUICE_EINVAL;
    }
    if (h->limit != L->cp.limit || h->lease_ns != L->cp.lease_ns || h->need != L->need ||
        h->nshards != L->nshards || h->cap != L->cap || h->holders != L->holders ||
        h->stride != L->stride || h->ecap != L->ecap) {
        sluice__errf(err, errlen, "the region's layout (%llu bytes) differs from this one's (%zu)",
                     (unsigned long long)h->need, L->need);
        return SLUICE_EINVAL;
    }
    if (size < L->need) {
        sluice__errf(err, errlen, "a region of %zu bytes is too small: these limits need %zu",
                     size, L->need);
        return SLUICE_EINVAL;
    }
    return 0;
}

sluice_concurrency_region *sluice_concurrency_region_attach(void *region, size_t size,
                                                            const char *spec, size_t max_keys,
                                                            char *err, size_t errlen)
{
    clayout L;
    if (make_layout(spec, max_keys, &L, err, errlen) != 0) return NULL;
    if (!region || ((uintptr_t)region & 63) != 0) {
        sluice__errf(err, errlen, "the region must be 64-byte aligned (a mapping is)");
        return NULL;
    }
    if (size < CHEAD + sizeof(cshard)) {
        sluice__errf(err, errlen, "a region of %zu bytes is too small: these limits need %zu",
                     size, L.need);
        return NULL;
    }
    chead *h = region;
    const uint64_t me = sluice__rt_self();
    for (unsigned n = 0;; n++) { /* bounded: region_attach.c's protocol */
        uint64_t v = atomic_load_explicit(&h->init, memory_order_acquire);
        if (v == INIT_READY) break;
        if (v != 0 && !(v & BUSY)) {
            sluice__errf(err, errlen, "the region is neither zeroed nor sluice concurrency limits");
            return NULL;
        }
        if (size < L.need) { /* ours to make, and too small for it */
            sluice__errf(err, errlen, "a region of %zu bytes is too small: these limits need %zu",
                         size, L.need);
            return NULL;
        }
        bool mine = false;
        if (v == 0 || (n >= 64 && sluice__rt_gone(v & ~BUSY, (n & 3) == 3)))
            mine = atomic_compare_exchange_strong_explicit(&h->init, &v, BUSY | me,
                                                           memory_order_acquire,
                                                           memory_order_relaxed);
        if (mine && v == 0 && !zeroed_head(region)) {
            atomic_store_explicit(&h->init, 0, memory_order_release);
            sluice__errf(err, errlen, "the region is not zeroed: its init word is 0 but its "
                         "header is not (a region must be all zero bytes before its first attach)");
            return NULL;
        }
        if (mine) {
            initialise(region, &L);
            atomic_store_explicit(&h->init, INIT_READY, memory_order_release);
            break;
        }
        sluice__backoff(n);
    }
    if (check_header(h, &L, size, err, errlen) != 0) return NULL;
    sluice_concurrency_region *r = sluice__calloc64(sizeof *r);
    if (!r) {
        sluice__errf(err, errlen, "out of memory");
        return NULL;
    }
    r->L = L;
    r->h = h;
    r->sh = (cshard *)(void *)((unsigned char *)region + CHEAD);
    r->slots = (unsigned char *)region + L.slots_off;
    r->pidns = h->pidns;
    sluice__digest_seed(h->seed, r->dseed);
    if (pthread_mutex_init(&r->qmu, NULL) != 0) {
        sluice__free64(r);
        sluice__errf(err, errlen, "out of memory (a mutex)");
        return NULL;
    }
    if (pthread_cond_init(&r->qcv, NULL) != 0) {
        pthread_mutex_destroy(&r->qmu);
        sluice__free64(r);
        sluice__errf(err, errlen, "out of memory (a condition variable)");
        return NULL;
    }
    r->qpid = getpid();
    return r;
}

sluice_concurrency_region *sluice_concurrency_region_open(const char *path, const char *spec,
                                                          size_t max_keys, char *err,
                                                          size_t errlen)
{
    if (!path || !*path) {
        sluice__errf(err, errlen, "no path");
        return NULL;
    }
    clayout L;
    if (make_layout(spec, max_keys, &L, err, errlen) != 0) return NULL;
    void *map;
    size_t len;
    if (sluice__rt_map_named(path, L.need, &map, &len, err, errlen) != 0) return NULL;
    sluice_concurrency_region *r =
        sluice_concurrency_region_attach(map, len, spec, max_keys, err, errlen);
    if (!r) {
        munmap(map, len);
        sluice__rt_name_error(path, err, errlen);
        return NULL;
    }
    r->map = map;
    r->map_len = len;
    return r;
}


void sluice_concurrency_region_free(sluice_concurrency_region *r)
{
    if (!r) return;
    if (r->qpid == getpid()) { /* a forked child's copy: the queue is the parent's */
        sluice__cr_queue_drop(r);
        pthread_cond_destroy(&r->qcv);
        pthread_mutex_destroy(&r->qmu);
    }
    if (r->map) munmap(r->map, r->map_len);
    sluice__free64(r);
}

/* ---- acquire, release, held --------------------------------------------------------- */

/* Give back slot s's leases ended by t and, when `permits` (> 0) do not
 * fit, sweep it for dead holders: whether permits were freed.  Shard
 * locked. */
bool sluice__cr_expire_sweep(const sluice_concurrency_region *r, cslot *s, uint64_t t,
                         uint64_t permits)
{
    const uint64_t N = r->L.cp.limit, held0 = s->held;
    expire(r, s, t);
    if (permits && (s->held > N || permits > N - s->held)) {
        sweep(r, s, t);
        expire(r, s, t);
        if (s->held > N) recount(r, s); /* only damage makes it so */
    }
    return s->held < held0;
}

/* A refusal's retry_after_ns on slot s at t: the wait until its earliest
 * lease ends, else INT64_MAX.  Shard locked. */
static int64_t lease_retry(const sluice_concurrency_region *r, const cslot *s, uint64_t t)
{
    if (!r->L.cp.lease_ns || s->next_exp == UINT64_MAX || s->next_exp <= t) return INT64_MAX;
    return s->next_exp - t > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(s->next_exp - t);
}

bool sluice_concurrency_region_acquire_at(sluice_concurrency_region *r, const void *key,
                                          size_t keylen, uint64_t permits, uint64_t now_ns,
                                          sluice_region_permit *pm, sluice_result *res)
{
    sluice_result scratch;
    if (!res) res = &scratch;
    if (pm) *pm = (sluice_region_permit){0};
    if (!r || !pm || (!key && keylen)) return sluice__fail(res, SLUICE_EINVAL);
    const uint64_t N = r->L.cp.limit;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint32_t home;
    const uint32_t k = sluice__cr_place(r, key, keylen, dig, &home);
    sluice__cr_lock(r, k);
    /* a probe, or a request no wait can help, makes no key */
    const bool make = permits > 0 && permits <= N;
    const uint32_t i = sluice__cr_find(r, k, home, dig, make, now_ns);
    if (i == NONE) {
        sluice__cr_unlock(r, k);
        if (permits == 0) return sluice__allow(res, N, 0); /* a key not held holds nothing */
        if (permits > N) return sluice__deny(res, N, -1);
        return sluice__fail(res, SLUICE_EFULL);
    }
    cslot *s = cslot_at(r, k, i);
    const uint64_t t = sluice__cr_key_time(s, now_ns);
    const bool freed = sluice__cr_expire_sweep(r, s, t, make ? permits : 0);
    const uint64_t held = s->held > N ? N : s->held;
    if (!make) {
        _Atomic uint32_t *wake = freed ? sluice__cr_wake_freed(r, s) : NULL;
        sluice__cr_unlock(r, k);
        if (wake) sluice__cr_futex_wake(wake, 1);
        return permits == 0 ? sluice__allow(res, N - held, 0) : sluice__deny(res, N - held, -1);
    }
    if (permits > N - held) {
        const int64_t retry = lease_retry(r, s, t);
        _Atomic uint32_t *wake = freed ? sluice__cr_wake_freed(r, s) : NULL;
        sluice__cr_unlock(r, k);
        if (wake) sluice__cr_futex_wake(wake, 1);
        return sluice__deny(res, N - held, retry);
    }
    uint32_t gen = 0;
    const uint32_t j = sluice__cr_take(r, s, t, permits, &gen);
    const uint64_t after = s->held > N ? N : s->held;
    _Atomic uint32_t *wake = freed ? sluice__cr_wake_freed(r, s) : NULL;
    sluice__cr_unlock(r, k);
    if (wake) sluice__cr_futex_wake(wake, 1);
    if (j == NONE) return sluice__deny(res, 0, INT64_MAX); /* damage: every entry taken */
    *pm = (sluice_region_permit){
        .permits = permits, .owner = r, .shard = k, .slot = i, .holder = j, .gen = gen};
    return sluice__allow(res, N - after, 0);
}

/* The blocking acquire's wait (sluice_concurrency_region_acquire).
 *
 * A waiter that finds no room counts itself in the key's wait line, reads
 * the line's futex word under the shard's lock, unlocks and sleeps on the
 * word: a release (or a lease's end, or a swept dead holder) seen by any
 * call bumps the word under the lock and wakes one sleeper, after
 * unlocking -- so a wake cannot fall between a waiter's check and its
 * sleep (the word moved: FUTEX_WAIT returns at once), and a release wakes
 * one process, not all.  The woken waiter takes its permits and, when room
 * is left and others wait, wakes the next (a chain, one at a time); one
 * whose permits do not fit passes its wake on (at most once per waiter per
 * release, `passes`, so mixed sizes cannot wake in a circle).
 *
 * Dead holders and leases free permits that no release announces.  One
 * waiter of the key, the sweeper, wakes and re-checks (its acquire
 * sweeps, the other waiters sleep) after SLUICE_CONC_REGION_SWEEP_GAP_NS,
 * then after naps that double while it finds nothing, up to
 * SLUICE_CONC_REGION_SWEEPER_NAP_NS (16 ms: a sweep of 16 live holder
 * processes costs about 150 us; once a millisecond that was 16% of a CPU
 * for a waiter, once per 16 ms it is 1%); the others wake each
 * SLUICE_CONC_REGION_WAIT_POLL_NS to look (no sweep), and take the role
 * over when the sweeper's process is gone (or it left), or when the key
 * has not been swept for that long (a sweeper that does not sweep: a
 * damaged identity, a process that exec'd).  A waiter killed asleep leaves the kernel's
 * queue; its count in `waiters` stays (a hint: it costs a wake syscall per
 * release) until the slot is given to another key.  One killed after a
 * wake took it loses that wake: the others find the room at their next
 * poll.  A sweeper that leaves frees the role for the next waiter that
 * sleeps (a release's waiter, or a poll). */
#define BLOCK_FAIL(code)                                                                  \
    do {                                                                                  \
        sluice__fail(res, (code));                                                        \
        return (code);                                                                    \
    } while (0)

/* Leave slot i's wait line (counted there by an earlier round), unless the
 * slot went to another key since (its line was reset).  Shard k locked. */
void sluice__cr_wait_leave(sluice_concurrency_region *r, uint32_t k, uint32_t i,
                       const unsigned char *dig)
{
    cslot *s = cslot_at(r, k, i);
    if (atomic_load_explicit(&s->state, memory_order_relaxed) != S_LIVE ||
        memcmp(s->dig, dig, sizeof s->dig) != 0)
        return;
    cwait *w = wait_of(r, s);
    if (w->waiters) w->waiters--;
}

/* The waiter leaves for good: if it was the sweeper, the role is free for
 * the next waiter that sleeps (woken by a release, or at its poll: not
 * woken for it, so that a release stays one wake).  Shard locked. */
static void wait_quit(cwait *w, uint64_t me)
{
    if (atomic_load_explicit(&w->sweeper, memory_order_relaxed) == me)
        atomic_store_explicit(&w->sweeper, 0, memory_order_relaxed);
}

int sluice_concurrency_region_acquire(sluice_concurrency_region *r, const void *key,
                                      size_t keylen, uint64_t permits, uint64_t timeout_ns,
                                      sluice_region_permit *pm, sluice_result *res)
{
    sluice_result scratch;
    if (!res) res = &scratch;
    if (pm) *pm = (sluice_region_permit){0};
    if (!r || !pm || (!key && keylen) || permits == 0 || permits > r->L.cp.limit)
        BLOCK_FAIL(SLUICE_EINVAL);
    const uint64_t N = r->L.cp.limit, me = sluice__rt_self();
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint32_t home;
    const uint32_t k = sluice__cr_place(r, key, keylen, dig, &home);
    uint64_t now = sluice__clock_read(CLOCK_MONOTONIC);
    const uint64_t deadline = sluice__sat_add(now, timeout_ns) > (uint64_t)INT64_MAX
                                  ? (uint64_t)INT64_MAX
                                  : sluice__sat_add(now, timeout_ns);
    uint32_t mine = NONE; /* the slot whose wait line counts this caller */
    bool woke = false, polled = false, first = true, sweeper = false;
    int how = 0; /* how the last sleep ended */
    uint64_t gap = SLUICE_CONC_REGION_SWEEP_GAP_NS; /* the sweeper's next nap */
    for (;;) { /* each round ends, or sleeps until a wake, a poll or the deadline */
        sluice__cr_lock(r, k);
        now = sluice__clock_read(CLOCK_MONOTONIC);
        if (mine != NONE) sluice__cr_wait_leave(r, k, mine, dig);
        mine = NONE;
        const uint32_t i = sluice__cr_find(r, k, home, dig, true, now);
        if (i == NONE) {
            sluice__cr_unlock(r, k);
            BLOCK_FAIL(SLUICE_EFULL);
        }
        cslot *s = cslot_at(r, k, i);
        cwait *w = wait_of(r, s);
        if (how == WOKEN) w->woken++; /* the kernel's wakes: the tests count them */
        const uint64_t t = sluice__cr_key_time(s, now);
        /* the arrival and the sweeper sweep; the others' polls only look,
         * unless the key has not been swept for a poll's time (a sweeper
         * that does not sweep: then this one takes the role) */
        const bool stale =
            polled && !sweeper &&
            t >= sluice__sat_add(s->sweep_next, SLUICE_CONC_REGION_WAIT_POLL_NS);
        const bool freed = sluice__cr_expire_sweep(r, s, t, first || sweeper || stale ? permits : 0);
        first = false;
        const uint64_t held = s->held > N ? N : s->held;
        uint32_t gen = 0, j = NONE;
        if (permits <= N - held) j = sluice__cr_take(r, s, t, permits, &gen); /* NONE: damage */
        /* what this call freed (a dead holder, a lease), beyond what it
         * took, goes to a waiter: a release's rule */
        int nwake = freed && sluice__cr_wake_freed(r, s) ? 1 : 0;
        if (j != NONE) {
            /* a woken waiter wakes the next while room is left */
            if (!nwake && woke && w->waiters && s->held < N) nwake = (wake_one(w), 1);
            wait_quit(w, me);
            const uint64_t after = s->held > N ? N : s->held;
            sluice__cr_unlock(r, k);
            if (nwake) sluice__cr_futex_wake(&w->seq, nwake);
            *pm = (sluice_region_permit){
                .permits = permits, .owner = r, .shard = k, .slot = i, .holder = j, .gen = gen};
            sluice__allow(res, N - after, 0);
            return 0;
        }
        /* no room: a wake this waiter cannot use goes on to the next */
        if (!nwake && woke && held < N && w->waiters && w->passes < w->waiters) {
            w->passes++;
            nwake = (wake_one(w), 1);
        }
        if (now >= deadline) {
            wait_quit(w, me);
            const int64_t retry = lease_retry(r, s, t);
            sluice__cr_unlock(r, k);
            if (nwake) sluice__cr_futex_wake(&w->seq, nwake);
            sluice__deny(res, N - held, retry);
            res->error = SLUICE_ETIMEDOUT;
            return SLUICE_ETIMEDOUT;
        }
        /* sleep: counted in the line, on the word as it is now */
        if (w->waiters < UINT32_MAX) w->waiters++;
        mine = i;
        const uint64_t sw = atomic_load_explicit(&w->sweeper, memory_order_relaxed);
        sweeper = sw == me;
        if (!sweeper && (sw == 0 || stale || (polled && sluice__rt_gone(sw, true)))) {
            atomic_store_explicit(&w->sweeper, me, memory_order_relaxed);
            sweeper = true;
        }
        /* the sweeper's naps double while its sweeps find nothing (1, 2,
         * 4, 8, 16 ms): a key full of live holders costs a sweep per
         * 16 ms, not per ms, and a death is seen within 16 ms */
        if (woke || freed) gap = SLUICE_CONC_REGION_SWEEP_GAP_NS;
        else if (polled && gap < SLUICE_CONC_REGION_SWEEPER_NAP_NS) gap *= 2;
        const uint32_t seen = atomic_load_explicit(&w->seq, memory_order_relaxed);
        uint64_t nap = deadline - now;
        uint64_t poll = sweeper ? gap : SLUICE_CONC_REGION_WAIT_POLL_NS;
        if (sweeper && s->next_exp > t && s->next_exp - t < poll)
            poll = s->next_exp - t; /* and at the earliest lease's end, on the key's clock */
        if (nap > poll) nap = poll;
        sluice__cr_unlock(r, k);
        if (nwake) sluice__cr_futex_wake(&w->seq, nwake);
        how = futex_sleep(&w->seq, seen, nap);
        woke = how != 0;
        polled = !woke;
    }
}

int sluice_region_permit_release_at(sluice_region_permit *pm, uint64_t now_ns)
{
    if (!pm) return SLUICE_EINVAL;
    if (pm->permits == 0) return SLUICE_ENOENT;
    sluice_concurrency_region *r = pm->owner;
    if (!r || pm->shard >= r->L.nshards || pm->slot >= r->L.cap || pm->holder >= r->L.holders ||
        pm->permits > r->L.cp.limit)
        return SLUICE_EINVAL;
    sluice__cr_lock(r, pm->shard);
    cslot *s = cslot_at(r, pm->shard, pm->slot);
    int rc = SLUICE_ENOENT;
    _Atomic uint32_t *wake = NULL;
    bool freed = false;
    const bool mine = sluice__cr_queue_mine(r);
    unsigned char dig[SLUICE__DIGEST_BYTES];
    if (atomic_load_explicit(&s->state, memory_order_relaxed) == S_LIVE) {
        const uint64_t held0 = s->held;
        expire(r, s, sluice__cr_key_time(s, now_ns));
        cholder *e = holder_at(s, pm->holder);
        if (who_of(e) && e->gen == pm->gen && e->permits == pm->permits) {
            holder_free(s, e);
            rc = 0;
        }
        freed = s->held < held0;
        memcpy(dig, s->dig, sizeof dig);
        if (freed && !mine) wake = sluice__cr_wake_freed(r, s);
    }
    sluice__cr_unlock(r, pm->shard);
    /* with requests queued in this process: those of the key first
     * (rq_serve), then one blocked waiter for what is left */
    if (freed && mine) {
        sluice__cr_queue_released(r, dig, pm->shard, now_ns);
        sluice__cr_lock(r, pm->shard);
        if (atomic_load_explicit(&s->state, memory_order_relaxed) == S_LIVE &&
            memcmp(s->dig, dig, sizeof dig) == 0)
            wake = sluice__cr_wake_freed(r, s);
        sluice__cr_unlock(r, pm->shard);
    }
    if (wake) sluice__cr_futex_wake(wake, 1); /* one waiter: it passes on what it cannot use */
    if (rc == 0) pm->permits = 0;
    return rc;
}

uint64_t sluice_concurrency_region_held_at(sluice_concurrency_region *r, const void *key,
                                           size_t keylen, uint64_t now_ns)
{
    if (!r || (!key && keylen)) return 0;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint32_t home;
    const uint32_t k = sluice__cr_place(r, key, keylen, dig, &home);
    sluice__cr_lock(r, k);
    const uint32_t i = sluice__cr_find(r, k, home, dig, false, now_ns);
    uint64_t held = 0;
    _Atomic uint32_t *wake = NULL;
    if (i != NONE) {
        cslot *s = cslot_at(r, k, i);
        const uint64_t held0 = s->held;
        expire(r, s, sluice__cr_key_time(s, now_ns));
        held = s->held;
        if (held < held0) wake = sluice__cr_wake_freed(r, s);
    }
    sluice__cr_unlock(r, k);
    if (wake) sluice__cr_futex_wake(wake, 1);
    return held;
}

uint32_t sluice_concurrency_region_waiting(sluice_concurrency_region *r, const void *key,
                                           size_t keylen)
{
    if (!r || (!key && keylen)) return 0;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint32_t home;
    const uint32_t k = sluice__cr_place(r, key, keylen, dig, &home);
    sluice__cr_lock(r, k);
    const uint32_t i = sluice__cr_find(r, k, home, dig, false, 0);
    const uint32_t n = i == NONE ? 0 : wait_of(r, cslot_at(r, k, i))->waiters;
    sluice__cr_unlock(r, k);
    return n;
}

/* ---- region-wide reads: the metrics ------------------------------------------------ */

uint64_t sluice_concurrency_region_limit(const sluice_concurrency_region *r)
{
    return r ? r->L.cp.limit : 0;
}

/* The shards' counters, summed (saturating: a damaged one may be anything),
 * without their locks: each is one atomic word. */
uint64_t sluice_concurrency_region_recovered(const sluice_concurrency_region *r)
{
    if (!r) return 0;
    uint64_t sum = 0;
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        const uint64_t v = atomic_load_explicit(&r->sh[k].recovered, memory_order_relaxed);
        sum = sum > UINT64_MAX - v ? UINT64_MAX : sum + v;
    }
    return sum;
}

/* One pass over every slot head, a shard at a time under its lock (taken
 * from a dead holder as every call takes it): nshards * cap slots at most,
 * whatever the region holds.  Each count is read as the slot has it (no
 * lease is expired, no clock moved: a read changes nothing) and clamped:
 * a slot's `held` to N, the keys to max_keys. */
int sluice_concurrency_region_stats_get(sluice_concurrency_region *r,
                                        sluice_concurrency_region_stats *st)
{
    if (!r || !st) return SLUICE_EINVAL;
    const uint64_t N = r->L.cp.limit;
    uint64_t keys = 0, held = 0, waiting = 0;
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        sluice__cr_lock(r, k);
        for (uint32_t i = 0; i < r->L.cap; i++) {
            cslot *s = cslot_at(r, k, i);
            if (atomic_load_explicit(&s->state, memory_order_relaxed) != S_LIVE) continue;
            keys++;                              /* <= 2^24 * 2 slots */
            held += s->held > N ? N : s->held;   /* <= 2^25 * 2^16 */
            waiting += wait_of(r, s)->waiters;   /* <= 2^25 * 2^32 */
        }
        sluice__cr_unlock(r, k);
    }
    if (keys > r->L.max_keys) keys = r->L.max_keys; /* damage: stray live states */
    if (held > keys * N) held = keys * N;
    *st = (sluice_concurrency_region_stats){.held = held,
                                            .keys = keys,
                                            .waiting = waiting,
                                            .limit = N,
                                            .max_keys = r->L.max_keys,
                                            .recovered = sluice_concurrency_region_recovered(r)};
    return 0;
}
